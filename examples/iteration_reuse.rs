//! A measurement, not part of the solver: what a bound iteration at `U2`
//! would save by keeping the layers of the iteration at `U1 < U2` rather than
//! searching again from the start, and how often it could not (a state found
//! at a smaller depth than the layer the last iteration put it in).
//!
//! ```text
//! cargo run --release --example iteration_reuse -- LEVELS.xsb N U1 U2 [K]
//! ```
//!
//! Runs the level's bidirectional search bounded by `U1`, then by `U2` (the
//! matching plus the pair penalties, the k-PG tables of k = 1..=K, K = 2 by
//! default, PI-corrals as the solver's sample decides, no probe), each in its
//! own in-memory store, and compares their layers side by side:
//!
//! - `earlier`: states of the `U1` layer `i` that the `U2` search found at a
//!   depth `j < i`. With a consistent bound there are none (docs/benchmarks.md,
//!   thirty-eighth session); each one would send an iteration that keeps the
//!   last one's layers back to a fresh start.
//! - `kept again`: states the `U2` search expanded that the `U1` search had
//!   expanded at the same depth, which an iteration keeping the layers (and
//!   the states the bound dropped, with their `d + h`) would not expand again.
//! - `dropped within U2`: successors the `U1` search dropped with
//!   `d + h <= U2` (an upper count: `h` above the iteration's cap is a lower
//!   bound), the states such an iteration would have to keep between
//!   iterations.

use rayon::prelude::*;
use sokoshard::engine::partition::{LocalExchange, PartitionStore, Partitioner};
use sokoshard::engine::search::{bidirectional, LocalBackend, Limits, NoProgress, SearchEnd, SearchStats};
use sokoshard::engine::driver::seeds;
use sokoshard::engine::{on_threads, Bound, LowerBound, PatternCheck, Problem, Side};
use sokoshard::model::board::Board;
use sokoshard::model::bounds::LowerBounds;
use sokoshard::model::key::{BitKey, KeyWidth, StateKey};
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::{CorralShare, Pruning};
use sokoshard::storage::mem::MemStore;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

const PARTITIONS: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 || args.len() > 6 {
        eprintln!("usage: iteration_reuse LEVELS.xsb N U1 U2 [K]");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("a readable level file");
    let n: usize = args[2].parse().expect("a level number");
    let u1: u32 = args[3].parse().expect("a bound U1");
    let u2: u32 = args[4].parse().expect("a bound U2");
    assert!(u1 < u2, "U1 must be below U2");
    let k: usize = args.get(5).map_or(2, |a| a.parse().expect("a k"));
    let level = split_collection(&text, &args[1]).into_iter().find(|l| l.index == n).expect("no such level");
    let board = Arc::new(Board::new(&level.parse().expect("a valid level")).expect("a valid board"));
    let cancel = AtomicBool::new(false);
    let (tables, _) =
        sokoshard::solve::build_tables(board.clone(), k, PARTITIONS, &cancel, &NoProgress).expect("the tables");
    let tables = Arc::new(tables);
    let lower = Arc::new(LowerBounds::with_kept_pairs_joined(&board, true, tables.pairs.as_deref(), &on_threads));
    let pi_corrals = CorralShare::sample(&board).pays();
    let pruning = Pruning { pi_corrals, ..Pruning::SOLVE };
    println!("level {n}: k = 1..={k}, pi-corrals {pi_corrals}");
    let patterns = tables as Arc<dyn PatternCheck>;
    let lower = lower as Arc<dyn LowerBound>;
    match board.keyspace.width {
        KeyWidth::U64 => compare::<u64>(&board, pruning, &patterns, &lower, u1, u2),
        KeyWidth::U128 => compare::<u128>(&board, pruning, &patterns, &lower, u1, u2),
        KeyWidth::Bits256 => compare::<BitKey<4>>(&board, pruning, &patterns, &lower, u1, u2),
        KeyWidth::Bits1024 => compare::<BitKey<16>>(&board, pruning, &patterns, &lower, u1, u2),
    }
}

fn run<K: StateKey>(problem: &Problem<K>, limit: u32) -> (MemStore<K>, SearchEnd<K>, SearchStats, f64) {
    let cancel = AtomicBool::new(false);
    let store = MemStore::<K>::new(PARTITIONS);
    let exchange = LocalExchange::<K>::new(PARTITIONS);
    let partitioner = Partitioner::for_space(PARTITIONS, &problem.space);
    let (starts, goals) = seeds(problem);
    let t0 = Instant::now();
    let (end, stats) = {
        let mut backend = LocalBackend { problem, partitioner, store: &store, exchange: &exchange, cancel: &cancel };
        let limits = Limits { cancel: &cancel, max_states: None, bound: Some(limit) };
        bidirectional(&mut backend, &starts, &goals, &limits, &NoProgress).expect("the search")
    };
    (store, end, stats, t0.elapsed().as_secs_f64())
}

fn compare<K: StateKey>(
    board: &Arc<Board>,
    pruning: Pruning,
    patterns: &Arc<dyn PatternCheck>,
    lower: &Arc<dyn LowerBound>,
    u1: u32,
    u2: u32,
) {
    let problem = |limit| {
        Problem::<K>::full(board.clone(), pruning, Some(patterns.clone()))
            .with_bound(Some(Bound { lower: lower.clone(), limit }))
    };
    let mut runs = Vec::new();
    for u in [u1, u2] {
        let (store, end, stats, seconds) = run(&problem(u), u);
        let end = match end {
            SearchEnd::Met { forward, backward, .. } => format!("met at {forward} + {backward}"),
            SearchEnd::Beyond { bound } => format!("no solution within {bound}"),
            other => format!("{other:?}"),
        };
        println!(
            "U = {u}: {end}; layers {} forward, {} backward; {} stored, {} expanded, {} generated, {:.2} s",
            stats.layers[0], stats.layers[1], stats.stored, stats.expanded, stats.generated, seconds
        );
        runs.push((store, stats));
    }
    let (s1, st1) = &runs[0];
    let (s2, st2) = &runs[1];
    let within: u64 = st1.excess.iter().take((u2 - u1) as usize).sum();
    println!(
        "U = {u1} dropped {} successors, {within} of them with d + h <= {u2} ({:.2} per state it stored)",
        st1.bound_pruned(),
        within as f64 / st1.stored.max(1) as f64
    );
    let (mut earlier, mut missing, mut kept_again, mut expanded2) = (0u64, 0u64, 0u64, 0u64);
    for side in [Side::Forward, Side::Backward] {
        let (l1, l2) = (s1.layers(side), s2.layers(side));
        // the last layer of a side is its frontier, never expanded
        for i in 0..l2.saturating_sub(1) {
            expanded2 += (0..PARTITIONS).map(|p| s2.layer_len(side, i, p)).sum::<u64>();
        }
        let mut side_earlier = 0;
        for i in 0..l1.min(l2) {
            let counts: Vec<(u64, u64, u64)> = (0..PARTITIONS)
                .into_par_iter()
                .map(|p| {
                    let (mut e, mut m, mut same) = (0, 0, 0);
                    s1.for_each_chunk(side, i, p, &mut |chunk| {
                        for key in chunk {
                            if s2.contains(side, i, p, key)? {
                                same += 1;
                            } else if (0..i).rev().try_fold(false, |f, j| Ok::<_, sokoshard::engine::SeamError>(f || s2.contains(side, j, p, key)?))? {
                                e += 1;
                            } else {
                                m += 1;
                            }
                        }
                        Ok(())
                    })
                    .expect("the layer");
                    (e, m, same)
                })
                .collect();
            let (e, m, same) = counts.iter().fold((0, 0, 0), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2));
            side_earlier += e;
            missing += m;
            // expanded in both: below both searches' last layers
            if i + 1 < l1 && i + 1 < l2 {
                kept_again += same;
            }
        }
        earlier += side_earlier;
        println!("{}: {side_earlier} states found earlier at U = {u2} than at U = {u1}", side.name());
    }
    println!(
        "U = {u2} expanded {expanded2} states, {kept_again} of them ({:.1}%) expanded at the same depth at U = {u1}; \
         {earlier} found earlier, {missing} not found (must be 0); stored {} against {}",
        100.0 * kept_again as f64 / expanded2.max(1) as f64,
        st2.stored,
        st1.stored
    );
}
