//! Rules as properties: pushes and pulls mirror each other; the parser never
//! panics on arbitrary bytes.

use crate::common::{for_levels, goal_seeds, reach_states, small_level, start_state, State};
use proptest::prelude::*;
use sokoshard::model::board::Board;
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::{for_each_pull, for_each_push, Pruning, Scratch};
use std::collections::HashSet;

fn pushes(board: &Board, sc: &mut Scratch, s: &State) -> HashSet<State> {
    let mut out = HashSet::new();
    for_each_push(board, sc, &s.0, s.1, Pruning::NONE, |b, p, _| {
        out.insert((b.to_vec(), p));
    });
    out
}

fn pulls(board: &Board, sc: &mut Scratch, s: &State) -> HashSet<State> {
    let mut out = HashSet::new();
    for_each_pull(board, sc, &s.0, s.1, Pruning::NONE, |b, p, _| {
        out.insert((b.to_vec(), p));
    });
    out
}

/// Up to `limit` states reachable from the start by pushes and from the goals by pulls.
fn sample_states(board: &Board, sc: &mut Scratch, limit: usize) -> Vec<State> {
    let mut seeds = vec![start_state(board, sc)];
    seeds.extend(goal_seeds(board, sc));
    reach_states(seeds, limit, |s, out| out.extend(pushes(board, sc, s).into_iter().chain(pulls(board, sc, s))))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        for l in split_collection(&text, "fuzz") {
            if let Ok(level) = l.parse() {
                let _ = Board::new(&level);
            }
        }
    }

    #[test]
    fn parser_never_panics_on_board_like_text(chars in proptest::collection::vec(proptest::sample::select(vec!['#', ' ', '.', '$', '*', '@', '+', '\n', '-', '|', '3', '1', ';', 'x']), 0..300)) {
        let text: String = chars.into_iter().collect();
        for l in split_collection(&text, "fuzz") {
            if let Ok(level) = l.parse() {
                let _ = Board::new(&level);
            }
        }
    }
}

#[test]
fn push_successor_iff_pull_predecessor() {
    let tally = for_levels(200, small_level(), |text, board| {
        let mut sc = Scratch::new(&board);
        for s in sample_states(&board, &mut sc, 300) {
            for t in pushes(&board, &mut sc, &s) {
                prop_assert!(
                    pulls(&board, &mut sc, &t).contains(&s),
                    "{}: push {:?} -> {:?} has no pull back",
                    text,
                    s,
                    t
                );
            }
            for t in pulls(&board, &mut sc, &s) {
                prop_assert!(
                    pushes(&board, &mut sc, &t).contains(&s),
                    "{}: pull {:?} -> {:?} has no push back",
                    text,
                    s,
                    t
                );
            }
        }
        Ok(None)
    });
    eprintln!("push_successor_iff_pull_predecessor: {tally:?}");
    tally.assert_covers(200, 0.3, false);
}
