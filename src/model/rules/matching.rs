//! The frozen-target matching: when a move freezes boxes on targets, the boxes
//! that can still move must each reach a different free target.

use super::*;
use rustc_hash::FxHashMap;

/// The freeze prunings after a move onto `moved` (occupancy updated, `boxes`
/// the new set): a box frozen off its targets, or frozen boxes all on targets
/// that leave the others no matching.
pub(super) fn frozen_dead(board: &Board, sc: &mut Scratch, boxes: &[u16], moved: u16, kind: MoveKind) -> bool {
    let (off_target, targets) = match kind {
        MoveKind::Push => (push_freeze_deadlock(board, sc, moved), &board.goals),
        MoveKind::Pull => (pull_freeze_deadlock(board, sc, moved), &board.start_boxes),
    };
    // the freeze tests leave the frozen set in `sc.frozen`, empty when `moved` is not frozen
    off_target || (!sc.frozen.is_empty() && frozen_targets_unmatched(board, sc, boxes, targets, kind))
}

/// Which moves a box makes in [`frozen_targets_unmatched`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MoveKind {
    Push,
    Pull,
}

/// Buffers of the frozen-target matching.
#[derive(Debug, Clone, Default)]
pub(super) struct Matching {
    pub(super) boxes: Vec<u16>,
    pub(super) targets: Vec<u16>,
    /// Per free target, `row` words: the squares a box can get to it from.
    pub(super) reach: Vec<u64>,
    pub(super) queue: Vec<u16>,
    /// Per target: the box index matched to it, or `u32::MAX`.
    pub(super) owner: Vec<u32>,
    /// Per target: the augmenting round that last visited it.
    pub(super) seen: Vec<u32>,
    /// The free targets and their `reach` by frozen set (the move kind, then
    /// the sorted frozen squares): the same boxes freeze in many states, and
    /// the floods are most of the test's cost (on Microban II #131, where
    /// boxes freeze on goals all the time, they took 44% of the search).
    /// With them, per target, the square of the box the last perfect matching
    /// under that set gave it (`NONE`: none, or no matching yet): the next
    /// state with the same frozen set differs by a box or two, so most of
    /// those pairs still hold and only the rest are matched again.
    pub(super) cache: FxHashMap<Vec<u16>, Cached>,
    /// Words held by `cache`; it is emptied past [`CACHE_WORDS`].
    pub(super) cache_words: usize,
    key: Vec<u16>,
    unmatched: Vec<usize>,
    /// The last matching's box squares by target, from the cache.
    hint: Vec<u16>,
    /// Per floor square: the index of the movable box on it, `u32::MAX` if
    /// none (set and cleared by each test).
    box_at: Vec<u32>,
}

impl Matching {
    /// Whether a box on `b` can get to target `j` (reach words `row` to a target).
    #[inline]
    fn reaches(&self, row: usize, j: usize, b: u16) -> bool {
        self.reach[j * row + b as usize / 64] >> (b % 64) & 1 != 0
    }
}

/// A frozen set's free targets, their reach words, and the box squares the
/// last perfect matching under it gave them.
pub(super) type Cached = (Vec<u16>, Vec<u64>, Vec<u16>);

/// Most reach words the cache of one [`Scratch`] holds (4 MiB).
const CACHE_WORDS: usize = 1 << 19;

/// After a move froze boxes that all sit on targets (`sc.frozen`; goals forward,
/// start squares backward), true when the boxes that can still move cannot each
/// be brought to a different free target. Why that is sound: frozen boxes never
/// move again on any path to the targets (each is blocked on both axes by walls,
/// dead squares or other frozen boxes, forever), so they are walls; boxes that
/// can move only ever hinder each other, and the player can only be more
/// restricted than anywhere at all. So the test drops every other box, lets the
/// player stand on any free square, and asks for a perfect matching of movable
/// boxes to free targets over "this box can reach that target": if even that
/// fails, no continuation places the boxes. Heiner lists this matching over the
/// 1-PG reachability as an extension of his tables; here it runs only when a box
/// freezes on a target, so its cost is rare. On Microban I #153 it catches a box
/// pushed into the corner below the goal column before the column is full, a
/// deadlock the k-PG tables only see at k = 5 and up (10^5 patterns before this
/// matching ran inside the k-games).
pub(super) fn frozen_targets_unmatched(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    targets: &[u16],
    kind: MoveKind,
) -> bool {
    for &f in &sc.frozen {
        sc.tmp_wall[f as usize] = true;
    }
    let m = &mut sc.matching;
    let walls = &sc.tmp_wall;
    m.boxes.clear();
    m.boxes.extend(boxes.iter().copied().filter(|&b| !walls[b as usize]));
    m.key.clear();
    m.key.push(kind as u16);
    m.key.extend_from_slice(&sc.frozen);
    m.key[1..].sort_unstable();
    let row = board.floor_count().div_ceil(64);
    if let Some((targets, reach, hint)) = m.cache.get(&m.key) {
        m.targets.clone_from(targets);
        m.reach.clone_from(reach);
        m.hint.clone_from(hint);
    } else {
        m.targets.clear();
        m.targets.extend(targets.iter().copied().filter(|&t| !walls[t as usize]));
        reach_targets(board, m, walls, row, kind);
        // the reach words and the hint's squares, four to a word
        let words = m.reach.len() + m.targets.len().div_ceil(4);
        if m.cache_words + words > CACHE_WORDS {
            m.cache.clear();
            m.cache_words = 0;
        }
        m.cache_words += words;
        m.hint.clear();
        m.hint.resize(m.targets.len(), NONE);
        m.cache.insert(m.key.clone(), (m.targets.clone(), m.reach.clone(), m.hint.clone()));
    }
    let dead = if m.boxes.len() > m.targets.len() {
        true
    } else {
        m.owner.clear();
        m.owner.resize(m.targets.len(), u32::MAX);
        m.seen.clear();
        m.seen.resize(m.targets.len(), 0);
        m.box_at.resize(board.floor_count(), u32::MAX);
        for (i, &b) in m.boxes.iter().enumerate() {
            m.box_at[b as usize] = i as u32;
        }
        // the last matching's pairs that still hold: the box is still here,
        // movable and unpaired, and still reaches the target (any valid
        // partial matching is a start from which the augmenting paths find
        // a perfect one if there is one)
        for j in 0..m.targets.len() {
            let b = m.hint[j];
            if b == NONE || m.box_at[b as usize] == u32::MAX || !m.reaches(row, j, b) {
                continue;
            }
            m.owner[j] = m.box_at[b as usize];
            // a box is on one square: it pairs once
            m.box_at[b as usize] = u32::MAX;
        }
        // each other box first takes a free target it reaches, if any (most
        // do: the augmenting paths are then left for the few that compete)
        let mut unmatched = std::mem::take(&mut m.unmatched);
        unmatched.clear();
        for (i, &b) in m.boxes.iter().enumerate() {
            if m.box_at[b as usize] == u32::MAX {
                continue;
            }
            let free = (0..m.targets.len()).find(|&j| m.owner[j] == u32::MAX && m.reaches(row, j, b));
            match free {
                Some(j) => m.owner[j] = i as u32,
                None => unmatched.push(i),
            }
        }
        for &b in &m.boxes {
            m.box_at[b as usize] = u32::MAX;
        }
        let mut matched = true;
        for (round, &i) in unmatched.iter().enumerate() {
            if !augment(m, row, i, round as u32 + 1) {
                matched = false;
                break;
            }
        }
        m.unmatched = unmatched;
        if matched {
            let (owner, boxes) = (&m.owner, &m.boxes);
            if let Some((_, _, hint)) = m.cache.get_mut(&m.key) {
                hint.iter_mut()
                    .zip(owner)
                    .for_each(|(h, &i)| *h = if i == u32::MAX { NONE } else { boxes[i as usize] });
            }
        }
        !matched
    };
    for &f in &sc.frozen {
        sc.tmp_wall[f as usize] = false;
    }
    dead
}

/// Per free target of `m.targets`, into `m.reach`: the squares a lone box can
/// be moved (by `kind`) to it from, with `walls` blocked.
fn reach_targets(board: &Board, m: &mut Matching, walls: &[bool], row: usize, kind: MoveKind) {
    m.reach.clear();
    m.reach.resize(m.targets.len() * row, 0);
    for (j, &t) in m.targets.iter().enumerate() {
        let bits = &mut m.reach[j * row..(j + 1) * row];
        bits[t as usize / 64] |= 1 << (t % 64);
        m.queue.clear();
        m.queue.push(t);
        while let Some(u) = m.queue.pop() {
            for d in 0..DIRS {
                // forward: a push in `d` that ends on `u` came from `s`, the
                // player behind it on `p`; backward: a pull that ends on `u`
                // is the reverse of a push from `u`, player on the far side
                let (s, p) = match kind {
                    MoveKind::Push => {
                        let s = board.neighbour(u, opposite(d));
                        (s, if s == NONE { NONE } else { board.neighbour(s, opposite(d)) })
                    }
                    MoveKind::Pull => (board.neighbour(u, d), board.neighbour(u, opposite(d))),
                };
                if s == NONE || p == NONE || walls[s as usize] || walls[p as usize] {
                    continue;
                }
                if bits[s as usize / 64] >> (s % 64) & 1 == 0 {
                    bits[s as usize / 64] |= 1 << (s % 64);
                    m.queue.push(s);
                }
            }
        }
    }
}

/// Kuhn's augmenting path from box `i`, in round `round`.
pub(super) fn augment(m: &mut Matching, row: usize, i: usize, round: u32) -> bool {
    let b = m.boxes[i];
    for j in 0..m.targets.len() {
        if m.seen[j] == round || !m.reaches(row, j, b) {
            continue;
        }
        m.seen[j] = round;
        let owner = m.owner[j];
        if owner == u32::MAX || augment(m, row, owner as usize, round) {
            m.owner[j] = i as u32;
            return true;
        }
    }
    false
}
