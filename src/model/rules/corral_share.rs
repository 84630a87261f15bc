//! Whether the PI-corral restriction pays on a level: the share of pushes it
//! drops on a deterministic sample of the level's forward states.
//!
//! The restriction costs its search in every forward expansion (about a
//! quarter of the rules' time on Microban I #153) and on some levels drops
//! almost nothing: on Microban II #131 each bound iteration took 1.7 times
//! as long for 0.4% fewer states (docs/benchmarks.md, thirty-eighth
//! session). A solve samples the level before it searches and keeps the
//! restriction only where the sample shows it dropping pushes.
//!
//! Random walks from the start (up to [`WALKS`] walks of up to [`WALK_PUSHES`]
//! pushes, under dead squares and freeze tests, from a seed taken from the
//! level's fingerprint, so every node of a cluster decides alike) count at
//! each state the pushes with and without the restriction. The walk stops
//! early once at least [`EARLY_STATES`] states show [`EARLY_SHARE`] of the
//! pushes dropped, else at [`MAX_STATES`] states. A short sample is no proof:
//! on XSokoban #83 the first 1,024 states show 0.5% dropped, all 4,096 show
//! 9%, and the restriction halves its states.

use super::*;
use crate::model::xorshift::XorShift;

/// The most walks of a sample.
pub const WALKS: usize = 256;
/// The most pushes of one walk.
pub const WALK_PUSHES: usize = 64;
/// The most states a sample counts.
pub const MAX_STATES: u64 = 4096;
/// A sample stops early once this many states show [`EARLY_SHARE`] dropped.
pub const EARLY_STATES: u64 = 256;
pub const EARLY_SHARE: f64 = 0.02;
/// Below this share of pushes dropped the restriction does not pay.
pub const PAYS_FROM: f64 = 0.001;

/// The pushes of a sample of forward states, with and without the restriction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CorralShare {
    pub states: u64,
    /// Pushes under dead squares and freeze tests.
    pub pushes: u64,
    /// Of those, the pushes the PI-corral restriction keeps.
    pub kept: u64,
}

impl CorralShare {
    /// The share of the pushes the restriction drops.
    pub fn dropped(&self) -> f64 {
        if self.pushes == 0 {
            0.0
        } else {
            1.0 - self.kept as f64 / self.pushes as f64
        }
    }

    /// Whether the restriction drops enough to pay for its search: at least
    /// [`PAYS_FROM`] of the sampled pushes. A level with no push at all
    /// (solved, or dead at the start) keeps it: nothing is lost either way.
    pub fn pays(&self) -> bool {
        self.pushes == 0 || self.dropped() >= PAYS_FROM
    }

    /// Samples `board`'s forward states (see the module's text).
    pub fn sample(board: &Board) -> CorralShare {
        let mut sc = Scratch::new(board);
        let mut out = CorralShare::default();
        // any fixed sequence serves, as long as it is the same on every machine
        let mut random = XorShift::new(board.fingerprint());
        let mut next: Vec<(Vec<u16>, u16)> = Vec::new();
        for _ in 0..WALKS {
            let (mut boxes, mut player) = (board.start_boxes.clone(), board.start_player);
            for _ in 0..WALK_PUSHES {
                if out.states >= MAX_STATES || is_solved(board, &boxes) {
                    break;
                }
                next.clear();
                for_each_push(board, &mut sc, &boxes, player, Pruning::ALL, |b, p, _| next.push((b.to_vec(), p)));
                let mut kept = 0u64;
                for_each_push(board, &mut sc, &boxes, player, Pruning::SOLVE, |_, _, _| kept += 1);
                out.states += 1;
                out.pushes += next.len() as u64;
                out.kept += kept;
                if next.is_empty() {
                    break;
                }
                let pick = random.below(next.len());
                (boxes, player) = next.swap_remove(pick);
            }
            if out.states >= MAX_STATES
                || out.pushes == 0
                || (out.states >= EARLY_STATES && out.dropped() >= EARLY_SHARE)
            {
                break;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::shipped;

    /// Microban II #131: the restriction made each bound iteration 1.7 times
    /// as long for 0.4% fewer states, and a solve kept it.
    #[test]
    fn pi_corrals_are_turned_off_where_they_drop_almost_nothing() {
        let board = shipped("Microban_II_135.xsb", 131);
        let share = CorralShare::sample(&board);
        assert_eq!(share.states, MAX_STATES, "{share:?}");
        assert!(!share.pays(), "{share:?}");
    }

    /// XSokoban #83: a sample of 1,024 states showed 0.5% dropped, where the
    /// restriction halves the search's states; the whole sample shows 9%.
    #[test]
    fn a_short_sample_does_not_turn_pi_corrals_off_where_they_halve_the_states() {
        let board = shipped("XSokoban_90.xsb", 83);
        let share = CorralShare::sample(&board);
        assert!(share.pays() && share.dropped() > 0.02, "{share:?}");
    }

    /// Every node of a cluster decides for itself from the level: the same
    /// board gives the same sample.
    #[test]
    fn the_sample_is_the_same_on_every_call() {
        for (file, index) in [("Microban_155.xsb", 153), ("XSokoban_90.xsb", 5)] {
            let board = shipped(file, index);
            assert_eq!(CorralShare::sample(&board), CorralShare::sample(&shipped(file, index)));
        }
    }

    /// A level solved at the start has no push to sample: the restriction
    /// stays as asked (it cannot cost anything).
    #[test]
    fn a_level_with_no_push_keeps_what_was_asked() {
        let board = Board::new(&crate::model::level::parse_one("#####\n#@* #\n#####\n", "t").unwrap()).unwrap();
        let share = CorralShare::sample(&board);
        assert_eq!(share, CorralShare::default());
        assert!(share.pays());
    }
}
