//! How the partitioning of a level's layers sets the shard bytes per state: solves
//! a Microban I level in memory, then writes every finished layer as shard files
//! split into P partitions by the engine's hash (`P = 1` is the unpartitioned
//! layer) and by a locality-preserving variant that hashes `key >> shift`, and
//! prints bytes per state and the largest partition of a layer against the mean.
//!
//! ```text
//! cargo run --release --example shard_density -- 93 14,18
//! ```
//!
//! Delta coding pays for the gap between consecutive keys of a shard. Hashing
//! spreads a partition's keys over the whole key space, so its gaps are P times
//! those of the layer; hashing `key >> shift` keeps runs of 2^shift neighbouring
//! keys together, at the price of less even partitions.

use sokoshard::engine::partition::{LocalExchange, PartitionStore, Partitioner};
use sokoshard::engine::search::{bidirectional, Limits, LocalBackend, NoProgress};
use sokoshard::engine::{Problem, Side};
use sokoshard::model::board::Board;
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::Pruning;
use sokoshard::solve::seeds;
use sokoshard::storage::mem::MemStore;
use sokoshard::storage::shard::ShardMeta;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let index: usize = args.next().ok_or("usage: shard_density LEVEL [SHIFT,SHIFT...]")?.parse()?;
    let shifts: Vec<u32> = match args.next() {
        Some(s) => s.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => vec![14, 18],
    };
    let text = std::fs::read_to_string("levels/Microban_155.xsb")?;
    let level =
        split_collection(&text, "Microban_155.xsb").get(index.wrapping_sub(1)).ok_or("no such level")?.parse()?;
    let board = Arc::new(Board::new(&level)?);
    if board.keyspace.width != sokoshard::model::key::KeyWidth::U64 {
        return Err("this experiment handles u64 keys only".into());
    }
    let problem = Problem::<u64>::full(board.clone(), Pruning::ALL, None);
    let store = MemStore::<u64>::new(1);
    let exchange = LocalExchange::<u64>::new(1);
    let cancel = AtomicBool::new(false);
    let mut backend = LocalBackend {
        problem: &problem,
        partitioner: Partitioner::new(1),
        store: &store,
        exchange: &exchange,
        cancel: &cancel,
    };
    let (starts, goals) = seeds(&problem);
    bidirectional(
        &mut backend,
        &starts,
        &goals,
        &Limits { cancel: &cancel, max_states: None, bound: None },
        &NoProgress,
    )?;
    let mut layers: Vec<Vec<u64>> = Vec::new();
    for side in [Side::Forward, Side::Backward] {
        for l in 0..store.layers(side) {
            let mut v = Vec::new();
            store.for_each_chunk(side, l, 0, &mut |c| {
                v.extend_from_slice(c);
                Ok(())
            })?;
            layers.push(v);
        }
    }
    let states: usize = layers.iter().map(Vec::len).sum();
    let key_bits = 64 - layers.iter().flatten().max().copied().unwrap_or(0).leading_zeros();
    println!("level {index}: {states} states in {} layers, keys of {key_bits} bits", layers.len());
    println!();
    print!("| partitions | engine hash |");
    for s in &shifts {
        print!(" hash of key >> {s} |");
    }
    println!();
    println!("|{}", "---|".repeat(2 + shifts.len()));
    let dir = std::env::temp_dir().join(format!("sokoshard-density-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bit_counts: Vec<u32> = match std::env::var("DENSITY_BITS") {
        Ok(s) => s.split(',').map(str::parse).collect::<Result<_, _>>()?,
        Err(_) => vec![0, 6, 7],
    };
    for bits in bit_counts {
        print!("| {} |", 1 << bits);
        for shift in std::iter::once(0).chain(shifts.iter().copied()) {
            let (mut bytes, mut worst) = (0u64, 1f64);
            let (mut rice, mut gamma) = (0u64, 0u64);
            for (li, layer) in layers.iter().enumerate() {
                let mut parts: Vec<Vec<u64>> = vec![Vec::new(); 1 << bits];
                for &k in layer {
                    // shift 0 is exactly the engine's partition hash
                    let h = if shift >= 100 {
                        let mut bx = Vec::new();
                        let _ = sokoshard::model::key::StateKey::decode(&k, &board.keyspace, &mut bx);
                        let d = (shift - 100) as usize;
                        let rest: Vec<u8> = bx[d.min(bx.len())..].iter().flat_map(|b| b.to_le_bytes()).collect();
                        xxhash_rust::xxh3::xxh3_64(&rest)
                    } else {
                        xxhash_rust::xxh3::xxh3_64(&(k >> shift).to_le_bytes())
                    };
                    let p = if bits == 0 { 0 } else { (h >> (64 - bits)) as usize };
                    parts[p].push(k);
                }
                if layer.len() >= 10_000 {
                    let largest = parts.iter().map(Vec::len).max().unwrap_or(0) as f64;
                    worst = worst.max(largest / (layer.len() as f64 / parts.len() as f64));
                }
                for (p, keys) in parts.iter().enumerate() {
                    if keys.is_empty() {
                        continue; // the disk store writes no file for an empty layer
                    }
                    rice += rice_bits(keys);
                    gamma += gamma_bits(keys);
                    let meta = ShardMeta { side: 0, partition: p as u32, layer: li as u32 };
                    let bk: u32 = std::env::var("DENSITY_BLOCK").ok().and_then(|v| v.parse().ok()).unwrap_or(4096);
                    let mut w = sokoshard::storage::shard::ShardWriter::<u64>::create_with_block_keys(
                        &dir.join("s.shard"),
                        meta,
                        bk,
                    )?
                    .unsynced();
                    for &k in keys {
                        w.push(k)?;
                    }
                    bytes += w.finish()?.bytes;
                }
            }
            print!(
                " {:.2} B/state (largest {worst:.2}x mean; rice {:.2} gamma {:.2}) |",
                bytes as f64 / states as f64,
                rice as f64 / 8.0 / states as f64,
                gamma as f64 / 8.0 / states as f64
            );
        }
        println!();
    }
    // merged runs: groups of G consecutive layers of one side, tagged with the offset
    let nfwd = store.layers(Side::Forward);
    for (g, tag_bits) in [(8usize, 8u32), (8, 3), (64, 6), (64, 8), (1000, 8)] {
        let mut bytes = 0u64;
        for (lo, hi) in [(0usize, nfwd), (nfwd, layers.len())] {
            let mut start = lo;
            while start < hi {
                let end = (start + g).min(hi);
                let mut parts: Vec<Vec<u64>> = vec![Vec::new(); 64];
                for (off, layer) in layers[start..end].iter().enumerate() {
                    for &k in layer {
                        let h = xxhash_rust::xxh3::xxh3_64(&k.to_le_bytes());
                        parts[(h >> 58) as usize].push((k << tag_bits) | off as u64);
                    }
                }
                for (p, mut keys) in parts.into_iter().enumerate() {
                    if keys.is_empty() {
                        continue;
                    }
                    keys.sort_unstable();
                    let meta = ShardMeta { side: 0, partition: p as u32, layer: start as u32 };
                    let mut w =
                        sokoshard::storage::shard::ShardWriter::<u64>::create(&dir.join("m.shard"), meta)?.unsynced();
                    for &k in &keys {
                        w.push(k)?;
                    }
                    bytes += w.finish()?.bytes;
                }
                start = end;
            }
        }
        println!(
            "merged runs of {g} layers, {tag_bits}-bit tags, 64 partitions: {:.2} B/state",
            bytes as f64 / states as f64
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
// appended estimation helpers
fn rice_bits(keys: &[u64]) -> u64 {
    let mut bits = 0u64;
    for block in keys.chunks(4096) {
        let gaps: Vec<u64> = block.windows(2).map(|w| w[1] - w[0]).collect();
        let mut best = u64::MAX;
        for k in 0..60u32 {
            let c: u64 = gaps.iter().map(|&g| (k as u64) + 1 + ((g - 1) >> k).min(1 << 20)).sum();
            best = best.min(c);
        }
        bits += best + 64;
    }
    bits
}
fn gamma_bits(keys: &[u64]) -> u64 {
    keys.windows(2)
        .map(|w| {
            let g = w[1] - w[0];
            let l = 64 - g.leading_zeros() as u64;
            2 * l - 1
        })
        .sum::<u64>()
        + 64
}
