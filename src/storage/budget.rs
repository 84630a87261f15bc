//! The memory budget of a disk-backed solve: parsing `--mem` sizes, the default
//! budget, and how one budget is split between the parts of the engine that hold
//! keys, plus the partition count and routing batch derived from it.
//!
//! # The split
//!
//! A layer step has two phases that never overlap, so their working memory can
//! share one slice of the budget `B`:
//!
//! | holder                                   | share  | bounded by                                  |
//! |------------------------------------------|--------|---------------------------------------------|
//! | sealed and pending layers, shard indexes  | `B/2`  | [`DiskStore`] writes layers that do not fit |
//! | successor buffers between the phases      | `B/4`  | [`SpillExchange`] spills sorted runs        |
//! | expand: per-thread routing buckets        | `B/4`  | the routing batch size                      |
//! | merge: one chunk per thread                | `B/4`  | the merge chunk ([`MemoryBudget::merge_chunk_keys`]) |
//!
//! A merge streams a partition's candidates from the exchange in sorted chunks
//! and appends each to the new layer after checking it against the stored ones,
//! so it holds one chunk (about twice: the chunk and the keys read for it), not
//! the partition. The partition count is therefore free of the budget: it is
//! sized for the threads (4 per thread by default, see `solve --partitions`),
//! and few partitions keep each partition's keys dense on disk (hash
//! partitioning widens the gaps the shard codec pays for, see
//! [`Partitioner`](crate::engine::partition::Partitioner)) and the number of
//! files small (creating a file is what dominated spilled runs of deep levels:
//! Microban #139 wrote 4,300 layer shards at 64 partitions).
//!
//! Not counted: the process itself (code, thread stacks, allocator slack, the
//! per-level board and rules tables), the fixed overhead documented in docs/benchmarks.md.
//!
//! [`DiskStore`]: crate::storage::disk::DiskStore
//! [`SpillExchange`]: crate::storage::spill::SpillExchange

/// Routing batch of the in-memory exchange (keys per destination per send).
pub const MAX_ROUTE_BATCH: usize = crate::engine::partition::DEFAULT_ROUTE_BATCH;
/// Smallest routing batch: below this the exchange's per-batch bookkeeping
/// costs more than the keys.
pub const MIN_ROUTE_BATCH: usize = 16;
/// Budget used when none is given and the machine's memory is unknown.
pub const FALLBACK_BUDGET: u64 = 1 << 30;

/// A `--mem` value that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason} (examples: 512MiB, 8GiB, 1.5GB, 1000000)")]
pub struct SizeError {
    pub input: String,
    pub reason: &'static str,
}

/// Parses a byte size: a number (decimals allowed with a unit) and an optional
/// unit. `K`/`M`/`G`/`T` and `KiB`/`MiB`/`GiB`/`TiB` are powers of 1024, `KB`/`MB`/
/// `GB`/`TB` powers of 1000, `B` or nothing is bytes. Case-insensitive; blanks
/// between number and unit are allowed.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |reason| SizeError { input: input.to_string(), reason };
    let s = input.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(err("no number"));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(err("unknown unit")),
    };
    let bytes = if let Ok(n) = num.parse::<u64>() {
        n.checked_mul(mult).ok_or_else(|| err("too large"))?
    } else {
        let f: f64 = num.parse().map_err(|_| err("not a number"))?;
        let b = (f * mult as f64).round();
        if !b.is_finite() || b >= u64::MAX as f64 {
            return Err(err("too large"));
        }
        b as u64
    };
    if bytes == 0 {
        return Err(err("must be more than zero bytes"));
    }
    Ok(bytes)
}

/// The default budget: half of the memory the process may use (the machine's
/// physical memory, or its control group's limit: [`total_memory_bytes`]),
/// leaving the other half to the page cache (which the shard reads live on)
/// and everything else.
///
/// [`total_memory_bytes`]: crate::sys::total_memory_bytes
pub fn default_budget() -> u64 {
    crate::sys::total_memory_bytes().map_or(FALLBACK_BUDGET, |t| t / 2)
}

/// The moves pass's tape keeps this share of the memory budget (the given
/// one, else the default) in memory and writes the rest to disk: it reads
/// its depths back one at a time, so the disk costs it little.
pub fn tape_share(memory_budget: Option<u64>) -> u64 {
    memory_budget.unwrap_or_else(default_budget) / 4
}

/// One solve's budget and the sizes derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    /// Total bytes for keys, all holders together.
    pub total: u64,
    /// Worker threads (partitions merged at once).
    pub threads: usize,
    /// Bytes per key.
    pub key_bytes: usize,
}

impl MemoryBudget {
    pub fn new(total: u64, threads: usize, key_bytes: usize) -> Self {
        MemoryBudget { total, threads: threads.max(1), key_bytes: key_bytes.max(1) }
    }

    /// RAM for sealed and pending layers (the [`DiskStore`](crate::storage::disk::DiskStore)).
    pub fn store_bytes(&self) -> u64 {
        self.total / 2
    }

    /// RAM for successors waiting between expand and merge.
    pub fn exchange_bytes(&self) -> u64 {
        self.total / 4
    }

    /// RAM for the phase-local working set (routing buckets, or the partitions
    /// being merged).
    pub fn working_bytes(&self) -> u64 {
        self.total / 4
    }

    /// The partition count: `requested`, at least one per thread, a power of two
    /// up to 65536 (see the module comment).
    pub fn partitions(&self, requested: usize) -> usize {
        requested.max(self.threads).next_power_of_two().min(1 << 16)
    }

    /// Candidates (in keys) per merge chunk: one chunk per thread, held about
    /// twice, fits the working share.
    pub fn merge_chunk_keys(&self) -> u64 {
        self.working_bytes() / (2 * self.threads as u64 * self.key_bytes as u64)
    }

    /// Keys per routing batch such that every thread's buckets (one per partition,
    /// up to twice the batch in capacity) fit in the working share.
    pub fn route_batch(&self, partitions: usize) -> usize {
        let per = self.working_bytes() / (2 * self.threads as u64 * partitions.max(1) as u64 * self.key_bytes as u64);
        (per as usize).clamp(MIN_ROUTE_BATCH, MAX_ROUTE_BATCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("8g"), Ok(8 << 30));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("123456"), Ok(123_456));
        assert_eq!(parse_size("64kb"), Ok(64_000));
        assert_eq!(parse_size(" 2 M "), Ok(2 << 20));
        for bad in ["", "MiB", "12XB", "1..5G", "-5M", "0", "0.0001B", "99999999999999TiB", "1e3"] {
            let e = parse_size(bad).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains("512MiB"), "{e}");
        }
    }

    #[test]
    fn shares_and_partitions() {
        let b = MemoryBudget::new(8 << 20, 2, 8);
        assert_eq!(b.store_bytes() + b.exchange_bytes() + b.working_bytes(), 8 << 20);
        assert_eq!(b.partitions(64), 64);
        assert_eq!(b.partitions(16), 16);
        assert_eq!(b.partitions(1), 2);
        assert_eq!(b.partitions(1024), 1024);
        assert_eq!(b.partitions(100), 128);
        assert_eq!(MemoryBudget::new(1 << 30, 16, 8).partitions(8), 16);
        // two threads, each merging a chunk held twice, fit the working share
        assert_eq!(b.merge_chunk_keys(), (2 << 20) / (2 * 2 * 8));
        assert_eq!(b.route_batch(128), 512);
        assert_eq!(MemoryBudget::new(1000, 2, 8).route_batch(128), MIN_ROUTE_BATCH);
        assert_eq!(MemoryBudget::new(1 << 40, 2, 8).route_batch(128), MAX_ROUTE_BATCH);
    }
}
