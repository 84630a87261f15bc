//! The cluster's HTTP/1.1 listeners (the coordinator's status page, every
//! node's Prometheus metrics): one accept loop on hyper, the token rule they
//! share with gRPC, and small response helpers. Handlers answer from memory,
//! never compute.

use super::net::{same_token, TOKEN_HEADER};
use super::ClusterError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub type Reply = Response<Full<Bytes>>;

/// Connections served at once by one listener; more are closed at accept.
const MAX_CONNECTIONS: usize = 64;

/// What answers a request that passed the method and token checks.
pub type Handler = Arc<dyn Fn(&Request<Incoming>) -> Reply + Send + Sync>;

/// Binds `addr` now (so that a bad address fails the start), then serves
/// `handler` from a task of its own to callers with `token`. `what` names the
/// listener in logs and errors. Returns the bound address.
pub async fn spawn(
    addr: SocketAddr,
    what: &'static str,
    token: String,
    handler: Handler,
) -> Result<SocketAddr, ClusterError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ClusterError::io(format!("listening on {addr} for {what}"), e))?;
    let local = listener.local_addr().map_err(|e| ClusterError::io("reading the listen address", e))?;
    tracing::info!(listen = %local, "{what} listening");
    let token: Arc<str> = Arc::from(token);
    // idle or half-sent connections cost a permit each, and time out
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // out of descriptors and the like: let the condition pass
                    tracing::warn!(error = %e, "{what}: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                tracing::warn!("{what}: {MAX_CONNECTIONS} connections open, refusing one");
                continue;
            };
            let (handler, token) = (handler.clone(), token.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let svc = hyper::service::service_fn(move |req| {
                    let answer = checked(&req, &token).unwrap_or_else(|| handler(&req));
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), svc);
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "{what}: connection ended");
                }
            });
        }
    });
    Ok(local)
}

/// The refusal of a request that is not a GET or lacks the right token.
fn checked(req: &Request<Incoming>, token: &str) -> Option<Reply> {
    if req.method() != Method::GET {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not served here: only GET", req.method()));
        r.headers_mut().insert("allow", hyper::header::HeaderValue::from_static("GET"));
        return Some(r);
    }
    match token_of(req) {
        None => Some(text(
            StatusCode::UNAUTHORIZED,
            "no cluster token: add ?token=<the cluster token> or an Authorization: Bearer header".into(),
        )),
        Some(t) if !same_token(t.as_bytes(), token.as_bytes()) => {
            Some(text(StatusCode::UNAUTHORIZED, "wrong cluster token".into()))
        }
        Some(_) => None,
    }
}

pub fn reply(status: StatusCode, kind: &str, body: impl Into<Bytes>) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", kind)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()))
        .expect("static headers")
}

pub fn text(status: StatusCode, msg: String) -> Reply {
    reply(status, "text/plain; charset=utf-8", msg + "\n")
}

/// The Prometheus text exposition of `body`.
pub fn metrics(body: String) -> Reply {
    reply(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", body)
}

/// `%XX` decoded (a `+` stays a `+`: base64 tokens hold them); `None` for a
/// malformed escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The token a request carries, from its headers or its query.
fn token_of(req: &Request<Incoming>) -> Option<String> {
    let h = req.headers();
    if let Some(t) = h.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) {
        return Some(t.to_string());
    }
    if let Some(t) = h.get("authorization").and_then(|v| v.to_str().ok()).and_then(bearer) {
        return Some(t.to_string());
    }
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix("token=")).and_then(percent_decode)
}

/// Writes metrics in the Prometheus text format: `# HELP`, `# TYPE`, then one
/// sample per label set.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// One metric family: `kind` is `gauge` or `counter`; `samples` are the
    /// label pairs and value of each sample.
    pub fn family(&mut self, name: &str, kind: &str, help: &str, samples: &[(Vec<(&str, String)>, f64)]) {
        use std::fmt::Write;
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            self.out.push_str(name);
            if !labels.is_empty() {
                let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
                let _ = write!(self.out, "{{{}}}", l.join(","));
            }
            let _ = writeln!(self.out, " {value}");
        }
    }

    /// A family of one unlabelled sample.
    pub fn one(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help, &[(Vec::new(), value)]);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The token of an `Authorization: Bearer <token>` value; the scheme's name
/// is case-insensitive (RFC 9110), so `bearer` is taken too.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        // `authorization: bearer <token>` was refused as no token at all
        for v in ["Bearer abc", "bearer abc", "BEARER  abc"] {
            assert_eq!(bearer(v), Some("abc"), "{v}");
        }
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn tokens_in_addresses_are_decoded() {
        assert_eq!(percent_decode("a%20b+c%2Fd").as_deref(), Some("a b+c/d"));
        assert_eq!(percent_decode("x+/y=").as_deref(), Some("x+/y="));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("bad%2"), None);
        assert_eq!(percent_decode("bad%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
    }

    #[test]
    fn exposition_escapes_label_values() {
        let mut e = Exposition::default();
        e.family("x_total", "counter", "what x counts", &[(vec![("job", "a\"b\\c\nd".into())], 3.0)]);
        e.one("y", "gauge", "a y", 1.5);
        assert_eq!(
            e.finish(),
            "# HELP x_total what x counts\n# TYPE x_total counter\nx_total{job=\"a\\\"b\\\\c\\nd\"} 3\n# HELP y a y\n# TYPE y gauge\ny 1.5\n"
        );
    }
}
