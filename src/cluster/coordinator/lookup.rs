//! Path-rebuild lookups on the cluster: the owners of the keys answer whether
//! they hold them in a layer.

use super::super::codec::keys_to_bytes;
use super::super::net::rpc_err;
use super::super::proto::*;
use super::super::{side_to, ClusterError};
use super::backend::ClusterBackend;
use super::job::engine_error;
use crate::engine::{EngineError, Side};
use crate::model::key::StateKey;
use std::collections::BTreeMap;
use std::time::Duration;

impl<K: StateKey> ClusterBackend<'_, K> {
    /// Index of the first of `keys` in `layer` of `side`: each owner is asked
    /// about its keys (the path rebuild's lookups).
    pub(super) fn lookup_first(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Option<usize>, EngineError> {
        let b = self;
        // the candidates of each owner, in order
        let mut per_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            per_node.entry(b.owners[b.partitioner.of(k)] as usize).or_default().push(i);
        }
        let job_id = b.id;
        let s = side_to(side);
        let r = b.retrying("a path lookup", |b| {
            let mut found: Option<usize> = None;
            for (&node, idx) in &per_node {
                let addr = b.addresses[node].clone();
                let mut c = b.sh.clients.get(&addr)?;
                let ks: Vec<K> = idx.iter().map(|&i| keys[i]).collect();
                let req = LookupRequest { job_id, side: s, layer: layer as u32, keys: keys_to_bytes(&ks) };
                let reply = b.rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), c.lookup(req)).await });
                let reply = match reply {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(st)) => return Err(rpc_err("looking up keys", &addr, st)),
                    Err(_) => return Err(ClusterError::Unavailable(format!("looking up keys ({addr}): timed out"))),
                };
                if reply.found.len() != idx.len() {
                    return Err(ClusterError::Internal(format!(
                        "{addr} answered {} lookups for {}",
                        reply.found.len(),
                        idx.len()
                    )));
                }
                if let Some(j) = reply.found.iter().position(|&f| f) {
                    found = Some(found.map_or(idx[j], |cur: usize| cur.min(idx[j])));
                }
            }
            Ok(found)
        });
        match r {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(EngineError::Cancelled),
            Err(e) => Err(engine_error(e)),
        }
    }
}
