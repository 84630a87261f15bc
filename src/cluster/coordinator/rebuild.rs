//! A lost disk costs time, not the job: the partitions of a worker that came
//! back without its data, or of a lost worker whose place a spare took, are
//! rebuilt from the other workers' layers.
//!
//! # Why recompute rather than replicate
//!
//! Layer `d + 1` of partition `p` is, by construction, the successors of layer
//! `d` (all partitions) that fall in `p`, kept by the bound at depth `d + 1`,
//! minus `p`'s own earlier layers of that side. Everything on the right-hand
//! side is either held by the surviving workers or already rebuilt, and the
//! rules, prunings, bound and tables are the job's, so replaying the layers in
//! order gives back exactly the lost layers: the seeds first, then every layer
//! of each side expanded by every worker with only the lost partitions'
//! successors routed (the rest dropped at the source), merged and sealed on the
//! rebuilt nodes only. The cost is time when a disk is lost: about one more
//! expansion of the side's stored layers (the generation, spread over all
//! workers; the merges and checkpoints touch only the lost partitions), nothing
//! while all goes well. Replicating each sealed layer to a second worker would
//! make recovery a copy, but would double every worker's disk, add the shards'
//! bytes to the network at every layer and put a second durable write on every
//! layer's critical path, for an event that should be rare. The job log and
//! the surviving checkpoints are untouched by a rebuild; a rebuild that fails
//! part way starts over on the next attempt (the rebuilt nodes are loaded empty
//! again).

use super::super::net::rpc_err;
use super::super::proto::*;
use super::super::{side_to, ClusterError};
use super::backend::ClusterBackend;
use super::State;
use crate::engine::Side;
use crate::model::key::StateKey;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tonic::{Code, Status};

impl<K: StateKey> ClusterBackend<'_, K> {
    /// The load replies, or `None` after marking the nodes that answered
    /// `data loss` (restarted without their checkpoint) for a rebuild.
    pub(super) fn lost_data(
        &mut self,
        replies: Vec<Result<LoadReply, Status>>,
    ) -> Result<Option<Vec<LoadReply>>, ClusterError> {
        let mut out = Vec::new();
        let mut lost = false;
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(reply) => out.push(reply),
                Err(s) if s.code() == Code::DataLoss && !self.rebuild[i] => {
                    tracing::warn!(
                        job = self.id,
                        node = %self.nodes[i],
                        reason = %s.message(),
                        "a worker is back without its data; its partitions are rebuilt from the others' layers"
                    );
                    self.rebuild[i] = true;
                    lost = true;
                }
                Err(s) => return Err(rpc_err("loading the job", &self.addresses[i], s)),
            }
        }
        if lost {
            self.loaded.iter_mut().for_each(|l| *l = 0);
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// Gives the places of the `missing` nodes to alive workers outside the
    /// job, if there are any; their partitions are then rebuilt. The new table
    /// goes to the job log first.
    pub(super) fn take_spares(
        &mut self,
        missing: &[usize],
        alive: &BTreeMap<String, (String, u64)>,
    ) -> Result<bool, ClusterError> {
        let spares: Vec<String> = alive.keys().filter(|n| !self.nodes.contains(n)).cloned().collect();
        if spares.is_empty() {
            return Ok(false);
        }
        for (&i, spare) in missing.iter().zip(spares) {
            tracing::warn!(
                job = self.id,
                lost = %self.nodes[i],
                spare = %spare,
                "a spare worker takes over a lost worker's partitions"
            );
            self.nodes[i] = spare;
            self.rebuild[i] = true;
        }
        self.loaded.iter_mut().for_each(|l| *l = 0);
        let nodes = self.nodes.clone();
        self.sh.update(self.id, true, |r| r.nodes = nodes)?;
        Ok(true)
    }

    /// Rebuilds the layers of the nodes marked for it, which are loaded and
    /// empty, from the seeds and the other nodes' layers (see the module).
    pub(super) fn rebuild_lost(&mut self) -> Result<(), ClusterError> {
        let rebuild = self.rebuild.clone();
        let only: Vec<u32> =
            (0..self.owners.len()).filter(|&p| rebuild[self.owners[p] as usize]).map(|p| p as u32).collect();
        let who: Vec<String> = (0..self.nodes.len()).filter(|&i| rebuild[i]).map(|i| self.nodes[i].clone()).collect();
        let who = who.join(", ");
        let started = Instant::now();
        let mut generated = 0u64;
        tracing::info!(job = self.id, nodes = %who, partitions = only.len(), "rebuilding lost partitions");
        for side in [Side::Forward, Side::Backward] {
            let layers = self.layers[side.index()].len();
            if layers == 0 {
                continue;
            }
            let seeds = self.seeds[side.index()].as_ref().ok_or_else(|| {
                ClusterError::DataLoss(format!(
                    "worker {who} lost its data and the {} side's seeds are not at hand (the coordinator restarted \
                     after the sides met); the job cannot be rebuilt",
                    side.name()
                ))
            })?;
            let bytes = self.keys_by_node(seeds, |node| rebuild[node]);
            let (job_id, s) = (self.id, side_to(side));
            self.some("rebuilding: seeding", &rebuild, |i, mut c| {
                let keys = bytes[i].clone();
                async move { c.seed(SeedRequest { job_id, side: s, keys }).await }
            })?;
            for layer in 0..layers - 1 {
                if self.stop.load(Ordering::SeqCst) {
                    return Err(ClusterError::Cancelled);
                }
                self.set_message(
                    State::Paused,
                    format!(
                        "rebuilding the partitions of worker {who} from the others' layers: {} layer {} of {}",
                        side.name(),
                        layer + 1,
                        layers - 1
                    ),
                );
                generated += self.rebuild_step(side, layer, &only, &rebuild)?;
            }
        }
        tracing::info!(
            job = self.id,
            nodes = %who,
            generated,
            seconds = started.elapsed().as_secs_f64(),
            "lost partitions rebuilt"
        );
        Ok(())
    }

    /// One layer of a rebuild: every node expands `layer` of `side` routing
    /// only the `only` partitions' successors; the rebuilt nodes merge and
    /// seal them as layer `layer + 1`. Returns the successors generated.
    fn rebuild_step(&mut self, side: Side, layer: usize, only: &[u32], rebuild: &[bool]) -> Result<u64, ClusterError> {
        let step = self.next_step();
        let (job_id, s) = (self.id, side_to(side));
        let exp = self.expand_all("rebuilding: expanding", side, layer, step, only)?;
        self.some("rebuilding: merging", rebuild, |_, mut c| async move {
            c.merge(MergeRequest { job_id, side: s, step, check_other: false }).await
        })?;
        self.some("rebuilding: sealing", rebuild, |_, mut c| async move {
            c.seal(SealRequest { job_id, side: s, step, layer: (layer + 1) as u32 }).await
        })?;
        Ok(exp.iter().map(|e| e.generated).sum())
    }
}
