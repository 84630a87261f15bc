//! Connections: the cluster token (checked by a server interceptor, attached by a
//! client interceptor), optional TLS (rustls) on servers and clients, message size
//! limits and the cached channels nodes use to reach each other.

use super::error::Peer;
use super::proto::coordinator_client::CoordinatorClient;
use super::proto::worker_client::WorkerClient;
use super::{ClusterError, MAX_MESSAGE_BYTES};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};
use tonic::{Request, Status};

/// The metadata entry that carries the cluster token.
pub const TOKEN_HEADER: &str = "x-sokoshard-token";

/// PEM files for TLS. A server needs `cert` and `key`; a client needs `ca` (the
/// certificate, or its issuer, that the servers present).
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    /// The name to check the server certificate against (default: the host of
    /// the address dialled).
    pub domain: Option<String>,
}

/// How a node talks to the others: the token and TLS.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub token: String,
    pub tls: Option<TlsFiles>,
}

impl NetConfig {
    pub fn new(token: impl Into<String>) -> Self {
        NetConfig { token: token.into(), tls: None }
    }

    fn read(path: &PathBuf, what: &str) -> Result<Vec<u8>, ClusterError> {
        std::fs::read(path).map_err(|e| ClusterError::io(format!("reading the TLS {what} {}", path.display()), e))
    }

    /// The server TLS config, if TLS is on.
    pub fn server_tls(&self) -> Result<Option<ServerTlsConfig>, ClusterError> {
        let Some(tls) = &self.tls else { return Ok(None) };
        match (&tls.cert, &tls.key) {
            (Some(c), Some(k)) => {
                let id = Identity::from_pem(Self::read(c, "certificate")?, Self::read(k, "key")?);
                Ok(Some(ServerTlsConfig::new().identity(id)))
            }
            (None, None) => Ok(None),
            _ => Err(ClusterError::InvalidArgument("TLS needs both --tls-cert and --tls-key".into())),
        }
    }

    fn client_tls(&self) -> Result<Option<ClientTlsConfig>, ClusterError> {
        let Some(tls) = &self.tls else { return Ok(None) };
        let Some(ca) = &tls.ca else {
            if let Some(cert) = &tls.cert {
                // a node serving TLS dials its peers with TLS: its own cert is the CA
                // when the cluster shares one self-signed certificate
                let mut cfg =
                    ClientTlsConfig::new().ca_certificate(Certificate::from_pem(Self::read(cert, "certificate")?));
                if let Some(d) = &tls.domain {
                    cfg = cfg.domain_name(d.clone());
                }
                return Ok(Some(cfg));
            }
            return Ok(None);
        };
        let mut cfg = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(Self::read(ca, "CA certificate")?));
        if let Some(d) = &tls.domain {
            cfg = cfg.domain_name(d.clone());
        }
        Ok(Some(cfg))
    }

    /// A lazily connecting channel to `addr` (`host:port`, or a full URL).
    pub fn channel(&self, addr: &str) -> Result<Channel, ClusterError> {
        let tls = self.client_tls()?;
        let url = if addr.contains("://") {
            addr.to_string()
        } else if tls.is_some() {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        };
        let mut ep = Endpoint::from_shared(url.clone())
            .map_err(|e| ClusterError::InvalidArgument(format!("address {addr:?}: {e}")))?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .tcp_keepalive(Some(Duration::from_secs(10)))
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        if let Some(t) = tls {
            ep = ep.tls_config(t)?;
        }
        Ok(ep.connect_lazy())
    }

    pub(crate) fn coordinator_client(&self, addr: &str) -> Result<CoordinatorRpc, ClusterError> {
        Ok(CoordinatorClient::with_interceptor(self.channel(addr)?, AttachToken::new(&self.token)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    pub(crate) fn worker_client(&self, addr: &str) -> Result<WorkerRpc, ClusterError> {
        Ok(WorkerClient::with_interceptor(self.channel(addr)?, AttachToken::new(&self.token)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}

pub(crate) type CoordinatorRpc = CoordinatorClient<InterceptedService<Channel, AttachToken>>;
pub(crate) type WorkerRpc = WorkerClient<InterceptedService<Channel, AttachToken>>;

/// Client interceptor: attaches the cluster token to every call.
#[derive(Clone)]
pub struct AttachToken(MetadataValue<tonic::metadata::Ascii>);

impl AttachToken {
    pub fn new(token: &str) -> Result<Self, ClusterError> {
        let v = token
            .parse()
            .map_err(|_| ClusterError::InvalidArgument("the cluster token must be printable ASCII".into()))?;
        Ok(AttachToken(v))
    }
}

impl Interceptor for AttachToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert(TOKEN_HEADER, self.0.clone());
        Ok(req)
    }
}

/// Server interceptor: refuses calls without the right token, taken from
/// `x-sokoshard-token` or `authorization: Bearer <token>`.
#[derive(Clone)]
pub struct CheckToken(Arc<str>);

impl CheckToken {
    pub fn new(token: &str) -> Self {
        CheckToken(Arc::from(token))
    }
}

/// Compares two tokens in time independent of where they differ.
pub fn same_token(a: &[u8], b: &[u8]) -> bool {
    // no early exit on the first differing byte
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Interceptor for CheckToken {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let md = req.metadata();
        let given = md.get(TOKEN_HEADER).map(|v| v.as_bytes().to_vec()).or_else(|| {
            md.get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.strip_prefix("Bearer ").map(|t| t.as_bytes().to_vec()))
        });
        match given {
            None => {
                Err(ClusterError::Unauthenticated("no cluster token (set --token or SOKOSHARD_TOKEN)".into()).into())
            }
            Some(t) if same_token(&t, self.0.as_bytes()) => Ok(req),
            Some(_) => Err(ClusterError::Unauthenticated("wrong cluster token".into()).into()),
        }
    }
}

/// Worker clients by address, built once and shared (tonic clients are cheap
/// clones over one HTTP/2 connection).
#[derive(Clone)]
pub struct WorkerClients {
    net: NetConfig,
    cache: Arc<Mutex<HashMap<String, WorkerRpc>>>,
}

impl WorkerClients {
    pub fn new(net: NetConfig) -> Self {
        WorkerClients { net, cache: Arc::new(Mutex::new(HashMap::new())) }
    }

    pub fn get(&self, addr: &str) -> Result<WorkerRpc, ClusterError> {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = c.get(addr) {
            return Ok(w.clone());
        }
        let w = self.net.worker_client(addr)?;
        c.insert(addr.to_string(), w.clone());
        Ok(w)
    }

    /// Forgets the connection to `addr` (after the node behind it restarted).
    pub fn forget(&self, addr: &str) {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).remove(addr);
    }
}

/// An RPC failure to `addr`, a cluster member (a node that has answered as
/// one), kept with its status code.
pub fn rpc_err(what: &str, addr: &str, status: Status) -> ClusterError {
    ClusterError::Rpc { what: what.to_string(), addr: addr.to_string(), status, peer: Peer::Member }
}

/// An RPC failure to `addr` as a user gave it, not yet known to be a
/// sokoshard node.
pub fn first_contact_err(what: &str, addr: &str, status: Status) -> ClusterError {
    ClusterError::Rpc { what: what.to_string(), addr: addr.to_string(), status, peer: Peer::Unverified }
}

/// The connections a gRPC server accepts on `listener`, with Nagle's algorithm
/// off as on the client side: `serve_with_incoming` ignores the server
/// builder's `tcp_nodelay`, and a small reply held back until the peer's
/// delayed ACK cost tens of milliseconds per RPC round, several per layer.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// How often a failure that repeats the last one logged is logged again.
pub const RETRY_LOG_EVERY: Duration = Duration::from_secs(60);

/// A call retried while it fails (a worker joining, a heartbeat, a client
/// watching a job): the wait before the next try, doubling from `first` up to
/// `cap`, and which failures are worth a log line: the first of a run, one
/// whose message differs from the last logged, and otherwise one per
/// [`RETRY_LOG_EVERY`], so a node whose peer is down for an hour says so a few
/// dozen times with a count, not thousands of times.
#[derive(Debug)]
pub struct Retry {
    first: Duration,
    cap: Duration,
    wait: Duration,
    failures: u64,
    since: Option<Instant>,
    logged: Option<(Instant, String)>,
}

/// A run of failures as far as it went: how many, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failing {
    pub failures: u64,
    pub seconds: u64,
}

impl Retry {
    pub fn new(first: Duration, cap: Duration) -> Self {
        Retry { first, cap: cap.max(first), wait: first, failures: 0, since: None, logged: None }
    }

    /// Records a failure with `message` at `now`; returns the run so far when
    /// this failure is worth a log line.
    pub fn failed(&mut self, message: &str, now: Instant) -> Option<Failing> {
        self.wait = if self.failures == 0 { self.first } else { (self.wait * 2).min(self.cap) };
        self.failures += 1;
        let since = *self.since.get_or_insert(now);
        let log = match &self.logged {
            Some((at, last)) => last != message || now.saturating_duration_since(*at) >= RETRY_LOG_EVERY,
            None => true,
        };
        if !log {
            return None;
        }
        self.logged = Some((now, message.to_string()));
        Some(Failing { failures: self.failures, seconds: now.saturating_duration_since(since).as_secs() })
    }

    /// [`Retry::failed`] now, with its log line when it is worth one: a
    /// warning `what`, with the coordinator's address, the error, and the
    /// tries and seconds the failures have lasted.
    pub fn failed_at_coordinator(&mut self, what: &str, coordinator: &str, error: &str) {
        if let Some(f) = self.failed(error, Instant::now()) {
            tracing::warn!(coordinator, error, tries = f.failures, seconds = f.seconds, "{what}");
        }
    }

    /// The wait before the next try.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Records a success at `now`; returns the run of failures it ends, if any.
    pub fn succeeded(&mut self, now: Instant) -> Option<Failing> {
        let ended = self
            .since
            .map(|since| Failing { failures: self.failures, seconds: now.saturating_duration_since(since).as_secs() });
        *self = Retry::new(self.first, self.cap);
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_waits_longer_up_to_its_cap_and_logs_a_repeated_failure_once_a_minute() {
        let t0 = Instant::now();
        let mut r = Retry::new(Duration::from_millis(500), Duration::from_secs(4));
        let mut at = t0;
        let mut logged = Vec::new();
        let mut waits = Vec::new();
        // ten minutes of the same failure
        while at < t0 + Duration::from_secs(600) {
            if let Some(f) = r.failed("connection refused", at) {
                logged.push(f);
            }
            waits.push(r.wait().as_millis());
            at += r.wait();
        }
        assert_eq!(waits[..5], [500, 1000, 2000, 4000, 4000]);
        // the first failure, then one line a minute with the run's count and length
        assert_eq!(logged[0], Failing { failures: 1, seconds: 0 });
        assert_eq!(logged.len(), 10, "{logged:?}");
        assert!(logged.windows(2).all(|w| w[1].seconds >= w[0].seconds + 60), "{logged:?}");
        // failures at 0, 0.5, 1.5 and 3.5 s, then every 4 s from 7.5 s: the
        // 19th, at 63.5 s, is the first a minute after the first was logged
        assert_eq!(logged[1], Failing { failures: 19, seconds: 63 }, "{logged:?}");
        // a different failure is news
        assert!(r.failed("no route to host", at).is_some());
        assert!(r.failed("no route to host", at).is_none());
        // a success ends the run, and says how long it was; the next starts over
        let ended = r.succeeded(at + Duration::from_secs(1)).unwrap();
        assert_eq!(ended.failures, waits.len() as u64 + 2);
        assert!(ended.seconds >= 600, "{ended:?}");
        assert_eq!(r.succeeded(at), None);
        assert_eq!(r.failed("connection refused", at), Some(Failing { failures: 1, seconds: 0 }));
        assert_eq!(r.wait(), Duration::from_millis(500));
    }
}
