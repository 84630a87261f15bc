//! The cluster's error kinds and their one mapping to gRPC status codes.

use crate::engine::{EngineError, SeamError};
use crate::storage::StorageError;
use tonic::{Code, Status};

/// Everything that can go wrong in the cluster room.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Missing or wrong cluster token.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// Another protocol version, or a request that does not fit the node's state.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A malformed request: bad level text, bad key bytes, unknown enum values.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// A message or payload over the explicit limits.
    #[error("too large: {0}")]
    TooLarge(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// A fenced request of an older layer step.
    #[error("stale request: {0}")]
    Stale(String),
    /// A checkpoint the job needs is missing or corrupt.
    #[error("data lost: {0}")]
    DataLoss(String),
    /// A node cannot be reached.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// An RPC to `addr` failed with `status`; `peer` says whether the node
    /// had answered as a sokoshard node before, which decides the hint.
    #[error("{what} ({addr}): {}: {}{}", .status.code(), .status.message(), hint(.status, *.peer))]
    Rpc { what: String, addr: String, status: Status, peer: Peer },
    #[error("cancelled")]
    Cancelled,
    /// The engine failed on its own (a seam's error comes back as itself).
    #[error(transparent)]
    Engine(EngineError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

/// Whether the peer of a failed call had answered as a sokoshard node before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Not known to be a sokoshard node: the address a user gave a command.
    Unverified,
    /// A cluster member (a worker that joined, the coordinator it joined): a
    /// broken call means the node stopped or restarted, not a wrong address.
    Member,
}

/// What a transport-level failure most likely means, for the user.
fn hint(status: &Status, peer: Peer) -> &'static str {
    let message = status.message();
    // a peer that accepts the connection and closes it before any answer
    // ends the call as "transport error" or, when the close wins the race
    // with the request, as cancelled with hyper's "operation was canceled"
    let not_grpc = message.contains("http2 error")
        || message.contains("h2 protocol error")
        || message == "transport error"
        || (status.code() == Code::Cancelled && message == "operation was canceled");
    // a client's own time limit ends the call as cancelled, "Timeout expired"
    let timed_out = status.code() == Code::DeadlineExceeded || message == "Timeout expired";
    let closed = not_grpc && !message.contains("invalid peer certificate");
    let refused = status.code() == Code::Unavailable && message.contains("connect");
    if peer == Peer::Member && (timed_out || closed || refused) {
        // a member that answered before and stops answering has stopped,
        // restarted or hung; its address was right
        if timed_out {
            "; the node answered before and gave no answer in time: is it hung or overloaded?"
        } else {
            "; the node answered before and stopped answering: did it stop or restart?"
        }
    } else if timed_out {
        "; no answer in time: is the address a sokoshard node, and is it up (not hung)?"
    } else if closed {
        "; the peer does not answer as a sokoshard node (gRPC over HTTP/2): a wrong address or port, or TLS on one side only?"
    } else {
        tls_hint(message)
    }
}

/// What to do about a TLS failure that rustls names in `message` (its names are
/// precise but say nothing of the flags that fix them); empty for other errors.
fn tls_hint(message: &str) -> &'static str {
    if !message.contains("invalid peer certificate") {
        ""
    } else if message.contains("NotValidForName") || message.contains("not valid for name") {
        "; the server's certificate was not issued for the address dialled: pass --tls-domain with a name the certificate lists"
    } else if message.contains("UnknownIssuer") || message.contains("BadSignature") {
        "; the server's certificate is not signed by the CA this client trusts: pass --tls-ca with the CA (or self-signed certificate) the server uses"
    } else {
        "; the server's TLS certificate was refused"
    }
}

impl ClusterError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ClusterError::Io { what: what.into(), source }
    }

    /// The gRPC code this error maps to.
    pub fn code(&self) -> Code {
        match self {
            ClusterError::Unauthenticated(_) => Code::Unauthenticated,
            ClusterError::FailedPrecondition(_) => Code::FailedPrecondition,
            ClusterError::InvalidArgument(_) => Code::InvalidArgument,
            ClusterError::TooLarge(_) => Code::ResourceExhausted,
            ClusterError::NotFound(_) => Code::NotFound,
            ClusterError::Stale(_) => Code::Aborted,
            ClusterError::DataLoss(_) => Code::DataLoss,
            ClusterError::Unavailable(_) | ClusterError::Transport(_) => Code::Unavailable,
            ClusterError::Rpc { status, .. } => status.code(),
            ClusterError::Cancelled => Code::Cancelled,
            ClusterError::Storage(e) if e.is_disk_full() => Code::ResourceExhausted,
            ClusterError::Storage(StorageError::Io { .. }) | ClusterError::Io { .. } => Code::Internal,
            ClusterError::Storage(_) => Code::DataLoss,
            ClusterError::Engine(EngineError::Cancelled) => Code::Cancelled,
            ClusterError::Engine(EngineError::Unsupported(_)) => Code::InvalidArgument,
            ClusterError::Engine(_) => Code::Internal,
            ClusterError::Internal(_) => Code::Internal,
        }
    }

    /// True when the error means a node went away (the job pauses and retries)
    /// rather than that the job itself is wrong (the job fails).
    pub fn is_node_fault(&self) -> bool {
        matches!(
            self.code(),
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded | Code::Aborted | Code::Unknown
        )
    }
}

/// An error that crossed one of the engine's seams: the cluster's own or the
/// storage room's, unboxed; anything else is internal.
impl From<SeamError> for ClusterError {
    fn from(e: SeamError) -> Self {
        match e.downcast::<ClusterError>() {
            Ok(c) => c,
            Err(e) => match e.downcast::<StorageError>() {
                Ok(s) => ClusterError::Storage(s),
                Err(e) => ClusterError::Internal(e.to_string()),
            },
        }
    }
}

impl From<EngineError> for ClusterError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Seam(s) => ClusterError::from(s),
            EngineError::Cancelled => ClusterError::Cancelled,
            other => ClusterError::Engine(other),
        }
    }
}

impl From<ClusterError> for Status {
    fn from(e: ClusterError) -> Status {
        match e {
            // pass a remote status through with its own code and message
            ClusterError::Rpc { what, addr, status, .. } => {
                Status::new(status.code(), format!("{what} ({addr}): {}", status.message()))
            }
            e => Status::new(e.code(), e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a_peer_that_is_no_sokoshard_node...` failed now and then: a peer that
    /// closed at once came back cancelled, and the error said nothing of why.
    #[test]
    fn a_peer_closing_at_once_is_named_however_the_close_comes() {
        for status in [Status::unavailable("transport error"), Status::cancelled("operation was canceled")] {
            assert!(hint(&status, Peer::Unverified).contains("does not answer as a sokoshard node"), "{status:?}");
        }
        assert!(hint(&Status::cancelled("Timeout expired"), Peer::Unverified).contains("no answer in time"));
        assert_eq!(hint(&Status::cancelled("the job was cancelled"), Peer::Unverified), "");
    }

    /// The smoke test killed a worker mid-job and the coordinator's pause
    /// message asked whether its address was wrong or TLS on one side only.
    #[test]
    fn a_member_that_stops_answering_is_not_called_a_wrong_address() {
        for status in [
            Status::unavailable("transport error"),
            Status::cancelled("operation was canceled"),
            Status::unavailable("tcp connect error"),
        ] {
            let h = hint(&status, Peer::Member);
            assert!(h.contains("did it stop or restart"), "{status:?}: {h}");
            assert!(!h.contains("wrong address"), "{status:?}: {h}");
        }
        assert!(hint(&Status::deadline_exceeded("Timeout expired"), Peer::Member).contains("hung"));
        // an answer from the node itself keeps no transport hint
        assert_eq!(hint(&Status::failed_precondition("the job is not loaded"), Peer::Member), "");
        assert_eq!(hint(&Status::unavailable("worker 2 (127.0.0.1:1) is lost"), Peer::Member), "");
    }
}
