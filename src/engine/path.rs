//! Path rebuild without parent pointers: from the meeting state, regenerate
//! predecessors (forward side) or successors (backward side) and keep the one found
//! in the previous layer, down to layer 0 on both sides.

use super::search::LayerBackend;
use super::{EngineError, Problem, Side};
use crate::model::key::StateKey;
use crate::model::rules::{BoxMove, Scratch};

/// The pushes from the start to the goal through `meet`, which lies in forward
/// layer `forward` and backward layer `backward`.
pub fn rebuild<K: StateKey>(
    problem: &Problem<K>,
    lookup: &mut dyn LayerBackend<K>,
    meet: K,
    forward: usize,
    backward: usize,
) -> Result<Vec<BoxMove>, EngineError> {
    let mut sc = Scratch::new(&problem.board);
    let mut head = Vec::with_capacity(forward);
    let mut cur = meet;
    for layer in (0..forward).rev() {
        let mut cands: Vec<(K, BoxMove)> = Vec::new();
        problem.expand_unpruned(Side::Backward, &cur, &mut sc, |k, m| cands.push((k, m)));
        let keys: Vec<K> = cands.iter().map(|c| c.0).collect();
        let i = lookup
            .first_in_layer(Side::Forward, layer, &keys)?
            .ok_or_else(|| EngineError::Internal(format!("path rebuild: no predecessor in forward layer {layer}")))?;
        let (prev, pull) = cands[i];
        head.push(pull.undoing_pull(&problem.board));
        cur = prev;
    }
    head.reverse();
    cur = meet;
    for layer in (0..backward).rev() {
        let mut cands: Vec<(K, BoxMove)> = Vec::new();
        problem.expand_unpruned(Side::Forward, &cur, &mut sc, |k, m| cands.push((k, m)));
        let keys: Vec<K> = cands.iter().map(|c| c.0).collect();
        let i = lookup
            .first_in_layer(Side::Backward, layer, &keys)?
            .ok_or_else(|| EngineError::Internal(format!("path rebuild: no successor in backward layer {layer}")))?;
        head.push(cands[i].1);
        cur = cands[i].0;
    }
    Ok(head)
}
