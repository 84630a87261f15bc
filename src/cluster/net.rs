//! Connections: the cluster token (checked by a server interceptor, attached by a
//! client interceptor), optional TLS (rustls) on servers and clients, message size
//! limits and the cached channels nodes use to reach each other.

use super::proto::coordinator_client::CoordinatorClient;
use super::proto::worker_client::WorkerClient;
use super::{ClusterError, MAX_MESSAGE_BYTES};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
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

/// An RPC failure to `addr`, kept with its status code.
pub fn rpc_err(what: &str, addr: &str, status: Status) -> ClusterError {
    ClusterError::Rpc { what: what.to_string(), addr: addr.to_string(), status }
}

/// The connections a gRPC server accepts on `listener`, with Nagle's algorithm
/// off as on the client side: `serve_with_incoming` ignores the server
/// builder's `tcp_nodelay`, and a small reply held back until the peer's
/// delayed ACK cost tens of milliseconds per RPC round, several per layer.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}
