//! Layer lookups on the cluster: the owners of the keys answer whether they
//! hold them in a layer (the path rebuild's and the moves pass's question),
//! and every worker its part of a meeting layer (the moves pass's start).

use super::super::codec::{keys_from_bytes, keys_to_bytes};
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
    /// For each of `keys`, whether it lies in `layer` of `side`: each owner
    /// is asked about its keys.
    pub(super) fn lookup(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Vec<bool>, EngineError> {
        let b = self;
        // the candidates of each owner, in order
        let mut per_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            per_node.entry(b.owners[b.partitioner.of(k)] as usize).or_default().push(i);
        }
        let job_id = b.id;
        let s = side_to(side);
        let r = b.retrying("a layer lookup", |b| {
            let mut found = vec![false; keys.len()];
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
                for (&i, f) in idx.iter().zip(reply.found) {
                    found[i] = f;
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

    /// Every key in both forward layer `forward` and backward layer
    /// `backward`, gathered from every worker; `Err(count)` when some worker
    /// holds too many to send.
    pub(super) fn common_keys(&mut self, forward: usize, backward: usize) -> Result<Result<Vec<K>, u64>, EngineError> {
        let job_id = self.id;
        let r = self.retrying("the meeting layer", |b| {
            let (mut all, mut count, mut whole) = (Vec::new(), 0u64, true);
            for addr in b.addresses.clone() {
                let mut c = b.sh.clients.get(&addr)?;
                let req = CommonRequest { job_id, forward_layer: forward as u32, backward_layer: backward as u32 };
                let reply =
                    b.rt.block_on(async { tokio::time::timeout(Duration::from_secs(600), c.common(req)).await });
                let reply = match reply {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(st)) => return Err(rpc_err("collecting the meeting layer", &addr, st)),
                    Err(_) => {
                        return Err(ClusterError::Unavailable(format!(
                            "collecting the meeting layer ({addr}): timed out"
                        )))
                    }
                };
                let keys = keys_from_bytes::<K>(&reply.keys)?;
                whole &= keys.len() as u64 == reply.count;
                count += reply.count;
                all.extend(keys);
            }
            Ok(if whole { Ok(all) } else { Err(count) })
        });
        match r {
            Ok(Some(k)) => Ok(k),
            Ok(None) => Err(EngineError::Cancelled),
            Err(e) => Err(engine_error(e)),
        }
    }
}
