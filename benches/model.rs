//! Micro-benchmarks of the model room: state key encode/decode per key width, and
//! the k-PG pattern check per generated state. Run with `cargo bench --bench model`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sokoshard::engine::search::NoProgress;
use sokoshard::engine::{PatternCheck, Problem, Side};
use sokoshard::model::board::Board;
use sokoshard::model::key::{BitKey, KeySpace, StateKey};
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::{Pruning, Scratch};
use sokoshard::solve::build_tables;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn sample_boxes(floor: usize, boxes: usize, seed: u64) -> Vec<u16> {
    let mut x = seed | 1;
    let mut v: Vec<u16> = Vec::new();
    while v.len() < boxes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let s = (x % floor as u64) as u16;
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v.sort_unstable();
    v
}

fn keys<K: StateKey>(c: &mut Criterion, name: &str, floor: usize, boxes: usize) {
    let space = KeySpace::new(floor, boxes).unwrap();
    let sets: Vec<Vec<u16>> = (0..256).map(|i| sample_boxes(floor, boxes, i + 1)).collect();
    let encoded: Vec<K> = sets.iter().map(|b| K::encode(&space, b, 3)).collect();
    c.bench_function(&format!("encode {name} ({floor} floor, {boxes} boxes)"), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 255;
            black_box(K::encode(&space, black_box(&sets[i]), 3))
        })
    });
    c.bench_function(&format!("decode {name} ({floor} floor, {boxes} boxes)"), |b| {
        let mut out = Vec::new();
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & 255;
            black_box(black_box(&encoded[i]).decode(&space, &mut out))
        })
    });
}

fn key_benches(c: &mut Criterion) {
    keys::<u64>(c, "u64", 64, 10);
    keys::<u128>(c, "u128", 200, 20);
    keys::<BitKey<4>>(c, "bits256", 240, 60);
    keys::<BitKey<16>>(c, "bits1024", 1000, 100);
}

/// The cost of the k-PG check per generated successor: Microban I #144 at
/// k <= 1..3, and #153 at k <= 3 and 5 (where the forward table holds about
/// 2 * 10^4 patterns).
fn pattern_benches(c: &mut Criterion) {
    pattern_bench(c, 144, &[1, 2, 3]);
    pattern_bench(c, 153, &[3, 5]);
}

fn pattern_bench(c: &mut Criterion, index: usize, ks: &[usize]) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/levels/Microban_155.xsb")).unwrap();
    let level = split_collection(&text, "mb").swap_remove(index - 1).parse().unwrap();
    let board = Arc::new(Board::new(&level).unwrap());
    let problem = Problem::<u64>::full(board.clone(), Pruning::ALL, None);
    // a few hundred real states near the start, with their moves
    let mut sc = Scratch::new(&board);
    let start = sokoshard::solve::seeds(&problem).0[0];
    let mut frontier = vec![start];
    let mut states = Vec::new();
    while states.len() < 400 && !frontier.is_empty() {
        let mut next = Vec::new();
        for k in &frontier {
            problem.expand(Side::Forward, k, &mut sc, 0, &mut [0; sokoshard::engine::EXCESS_BINS], |s: u64, m| {
                next.push(s);
                states.push((s, board.neighbour(m.from, m.dir as usize)));
            });
        }
        frontier = next;
    }
    for &k in ks {
        let (tables, _) = build_tables(board.clone(), k, 4, &AtomicBool::new(false), &NoProgress).unwrap();
        c.bench_function(&format!("k-PG check per state, k<={k} (Microban {index})"), |b| {
            let mut boxes = Vec::new();
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % states.len();
                let (key, moved) = states[i];
                let player = problem.decode(&key, &mut boxes);
                black_box(tables.is_deadlock(Side::Forward, &boxes, moved, player))
            })
        });
    }
}

criterion_group!(benches, key_benches, pattern_benches);
criterion_main!(benches);
