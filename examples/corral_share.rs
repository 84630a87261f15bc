//! A measurement, not part of the solver: the share of pushes the PI-corral
//! restriction drops on a sample of a level's forward states, and which
//! levels of a collection a solve could search without it.
//!
//! ```text
//! cargo run --release --example corral_share -- LEVELS.xsb
//! ```
//!
//! Random walks from the start (up to 256 walks of up to 64 pushes, under
//! dead squares and freeze tests, a seed taken from the level's fingerprint)
//! count at each state the pushes with and without the restriction. The walk
//! stops early once at least 256 states show 2% of the pushes dropped (the
//! restriction pays there), else at 4,096 states; a level whose sample shows
//! under 0.1% dropped is printed as one the restriction does not pay on. On
//! such levels it costs its search in every forward expansion and saves
//! about nothing (Microban II #131: each bound iteration 1.7 times as long
//! for 0.4% fewer states; docs/benchmarks.md, thirty-eighth session). A short
//! sample is no proof: on XSokoban #83 the first 1,024 states show 0.5%,
//! all 4,096 show 9%, and the restriction halves its states.

use sokoshard::model::board::Board;
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::{for_each_push, is_solved, Pruning, Scratch};

/// Pushes counted with and without the restriction.
#[derive(Default)]
struct Sample {
    states: u64,
    pushes: u64,
    kept: u64,
}

impl Sample {
    fn dropped(&self) -> f64 {
        if self.pushes == 0 {
            0.0
        } else {
            1.0 - self.kept as f64 / self.pushes as f64
        }
    }
}

fn sample(board: &Board) -> Sample {
    let mut sc = Scratch::new(board);
    let mut out = Sample::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ board.fingerprint();
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut next: Vec<(Vec<u16>, u16)> = Vec::new();
    for _ in 0..256 {
        let (mut boxes, mut player) = (board.start_boxes.clone(), board.start_player);
        for _ in 0..64 {
            if out.states >= 4096 || is_solved(board, &boxes) {
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
            let pick = (random() % next.len() as u64) as usize;
            (boxes, player) = next.swap_remove(pick);
        }
        if out.states >= 4096 || out.pushes == 0 || (out.states >= 256 && out.dropped() >= 0.02) {
            break;
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 2 {
        eprintln!("usage: corral_share LEVELS.xsb");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("a readable level file");
    let started = std::time::Instant::now();
    let mut off = Vec::new();
    for level in split_collection(&text, &args[1]) {
        let Ok(parsed) = level.parse() else { continue };
        let Ok(board) = Board::new(&parsed) else { continue };
        let s = sample(&board);
        println!("level {}: {} states sampled, {:.4} of their pushes dropped", level.index, s.states, s.dropped());
        if s.pushes > 0 && s.dropped() < 0.001 {
            off.push(level.index);
        }
    }
    println!("under 0.1%: {off:?}; {:.1} ms in all", started.elapsed().as_secs_f64() * 1e3);
}
