//! A measurement, not part of the solver: how often the bounded search's
//! forward bound is inconsistent, that is drops by more than one across a
//! single push, on random walks from the start.
//!
//! ```text
//! cargo run --release --example bound_consistency -- LEVELS.xsb N[,N...] WALKS
//! ```
//!
//! Each walk takes up to 200 random pushes (dead squares avoided, every push
//! legal for the player's region) and, at every state on it, compares the
//! solver's bound (`LowerBounds::estimate`, the matching plus the pair
//! penalties) of the state with that of each of its successors. A consistent
//! bound, `h(s) <= 1 + h(t)` for every push `s -> t`, is what would let a
//! bound iteration keep the last one's layers (each state kept at bound `U`
//! is then kept at `U + 2` at the same depth; docs/benchmarks.md, thirty-eighth
//! session); the count of pushes that break it says how often such an
//! iteration would have to start again.

use sokoshard::model::board::Board;
use sokoshard::model::bounds::{LowerBounds, UNREACHABLE};
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::{for_each_push, Pruning, Scratch};
use sokoshard::model::xorshift::XorShift;

/// The walks' pushes: legal for the player's region, none onto a dead square.
const PUSHES: Pruning = Pruning { dead_squares: true, freeze: false, pi_corrals: false };

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: bound_consistency LEVELS.xsb N[,N...] WALKS");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("a readable level file");
    let walks: usize = args[3].parse().expect("a number of walks");
    for n in args[2].split(',').map(|x| x.parse::<usize>().expect("a level number")) {
        let level = split_collection(&text, &args[1]).into_iter().find(|l| l.index == n).expect("no such level");
        let board = Board::new(&level.parse().expect("a valid level")).expect("a valid board");
        let lb = LowerBounds::new(&board, true);
        let mut sc = Scratch::new(&board);
        let mut next: Vec<(Vec<u16>, u16)> = Vec::new();
        // xorshift seeded by the level: the same walks every run, whatever
        // other levels the run takes
        let mut random = XorShift::new(board.fingerprint());
        let (mut pushes, mut drops) = (0u64, 0u64);
        // drops by 2, 3, ..., 8 or more
        let mut by = [0u64; 7];
        for _ in 0..walks {
            let (mut boxes, mut player) = (board.start_boxes.clone(), board.start_player);
            for _ in 0..200 {
                let h = lb.estimate(&boxes, player, true);
                if h == UNREACHABLE {
                    break;
                }
                next.clear();
                for_each_push(&board, &mut sc, &boxes, player, PUSHES, |child, p, _| next.push((child.to_vec(), p)));
                next.retain(|(child, p)| {
                    let hc = lb.estimate(child, *p, true);
                    if hc == UNREACHABLE {
                        return false;
                    }
                    pushes += 1;
                    if h > hc + 1 {
                        drops += 1;
                        by[((h - hc - 2) as usize).min(6)] += 1;
                    }
                    true
                });
                if next.is_empty() {
                    break;
                }
                let pick = random.below(next.len());
                (boxes, player) = next.swap_remove(pick);
            }
        }
        println!(
            "level {n}: {pushes} pushes, the bound drops by more than one across {drops} ({:.3}%); by 2, 3, ..., 8+: {by:?}",
            100.0 * drops as f64 / pushes.max(1) as f64
        );
    }
}
