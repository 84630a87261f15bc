//! The coordinator's HTTP listener (`--http`): the status page, its data as
//! `status.json`, and the replay page of each solved job, all behind the
//! cluster token (an `Authorization: Bearer` or `x-sokoshard-token` header, or
//! `?token=` in the address, which is how a browser opens the page).

use super::{Shared, State};
use crate::cluster::net::{same_token, TOKEN_HEADER};
use crate::cluster::ClusterError;
use crate::page::replay::{replay_html, ReplayLevel};
use crate::page::STATUS_HTML;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Binds `addr` now (so that a bad address fails the start) and serves from a
/// task of its own.
pub async fn spawn(addr: SocketAddr, sh: Arc<Shared>) -> Result<(), ClusterError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ClusterError::io(format!("listening on {addr} for the status page"), e))?;
    tracing::info!(http = %addr, "status page listening");
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // out of descriptors and the like: let the condition pass
                    tracing::warn!(error = %e, "status page accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let sh = sh.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let answer = answer(&sh, &req);
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
                if let Err(e) =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await
                {
                    tracing::debug!(error = %e, "status page connection ended");
                }
            });
        }
    });
    Ok(())
}

fn reply(status: StatusCode, kind: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", kind)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()))
        .expect("static headers")
}

fn text(status: StatusCode, msg: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", msg + "\n")
}

/// `%XX` and `+` decoded; `None` for a malformed escape or bytes that are not UTF-8.
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
            b'+' => {
                out.push(b' ');
                i += 1;
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
    if let Some(t) = h.get("authorization").and_then(|v| v.to_str().ok()).and_then(|s| s.strip_prefix("Bearer ")) {
        return Some(t.to_string());
    }
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix("token=")).and_then(percent_decode)
}

fn answer(sh: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not served here: only GET", req.method()));
    }
    match token_of(req) {
        None => {
            return text(
                StatusCode::UNAUTHORIZED,
                "no cluster token: open the page as /?token=<the cluster token>".into(),
            )
        }
        Some(t) if !same_token(t.as_bytes(), sh.cfg.net.token.as_bytes()) => {
            return text(StatusCode::UNAUTHORIZED, "wrong cluster token".into())
        }
        Some(_) => {}
    }
    let path = req.uri().path();
    match path {
        "/" | "/index.html" => reply(StatusCode::OK, "text/html; charset=utf-8", STATUS_HTML),
        "/status.json" => reply(StatusCode::OK, "application/json", status_json(sh).to_string()),
        _ => match path.strip_prefix("/jobs/").and_then(|r| r.strip_suffix("/replay")).map(str::parse::<u64>) {
            Some(Ok(id)) => replay(sh, id),
            _ => text(StatusCode::NOT_FOUND, format!("{path}: no such page (try /, /status.json, /jobs/<id>/replay)")),
        },
    }
}

fn replay(sh: &Shared, id: u64) -> Response<Full<Bytes>> {
    let Some(rec) = sh.record(id) else { return text(StatusCode::NOT_FOUND, format!("no job {id}")) };
    let solved = rec.result.as_ref().and_then(|r| Some((r.solution.clone()?, r.pushes?, r.moves?)));
    let Some((solution, pushes, moves)) = solved else {
        return text(StatusCode::NOT_FOUND, format!("job {id} has no solution to replay"));
    };
    match crate::model::level::parse_one(&rec.level_text, &rec.title) {
        Ok(mut level) => {
            level.index = rec.index as usize;
            level.title = rec.title.clone();
            let page = replay_html(&[ReplayLevel::new(&level, &solution, pushes, moves)]);
            reply(StatusCode::OK, "text/html; charset=utf-8", page)
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("job {id}'s level does not parse: {e}")),
    }
}

/// A rough duration for people: seconds, minutes or hours.
fn duration(secs: f64) -> String {
    if secs < 90.0 {
        format!("{secs:.0} s")
    } else if secs < 5400.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// What the page draws: the workers, and the jobs with their layer sizes.
fn status_json(sh: &Shared) -> serde_json::Value {
    let timeout = sh.cfg.heartbeat_timeout;
    let workers: Vec<serde_json::Value> = sh
        .lock_workers()
        .iter()
        .map(|(id, w)| {
            serde_json::json!({
                "node_id": id,
                "address": w.address,
                "alive": !w.left && w.last_seen.elapsed() < timeout,
                "partitions": w.stats.partitions,
                "memory_bytes": w.memory,
                "rss_bytes": w.stats.rss_bytes,
                "peak_rss_bytes": w.stats.peak_rss_bytes,
                "store_memory_bytes": w.stats.store_memory_bytes,
                "disk_bytes": w.stats.store_disk_bytes,
            })
        })
        .collect();
    let jobs: Vec<serde_json::Value> = sh
        .lock_jobs()
        .values()
        .map(|e| {
            let s = Shared::status_of(e);
            let r = &e.rec;
            let depth = r.layers[0].len().saturating_sub(1) + r.layers[1].len().saturating_sub(1);
            let expected = match (r.state, r.bound) {
                (State::Running | State::Paused, Some(u)) => {
                    let left = (u as usize).saturating_sub(depth);
                    // the layers grow, so this is a floor more than a forecast
                    let pace = s.seconds / depth.max(1) as f64;
                    format!(
                        "at most {left} more layers at bound {u}, {} at the pace so far",
                        duration(left as f64 * pace)
                    )
                }
                (State::Running | State::Paused, None) => "unknown (the plain search has no bound)".into(),
                _ => "-".into(),
            };
            serde_json::json!({
                "id": r.id,
                "title": r.title,
                "index": r.index,
                "kind": r.kind,
                "state": r.state,
                "message": r.message,
                "bound": r.bound,
                "stored": s.stored,
                "rate": s.rate,
                "seconds": s.seconds,
                "expected": expected,
                "forward": r.layers[0],
                "backward": r.layers[1],
                "pushes": r.result.as_ref().and_then(|x| x.pushes),
            })
        })
        .collect();
    serde_json::json!({ "coordinator": sh.cfg.listen.to_string(), "workers": workers, "jobs": jobs })
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn tokens_in_addresses_are_decoded() {
        assert_eq!(percent_decode("a%20b+c%2Fd").as_deref(), Some("a b c/d"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("bad%2"), None);
        assert_eq!(percent_decode("bad%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
    }
}
