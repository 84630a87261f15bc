//! The disk store's shard readers: opening them, and keeping them open (one
//! file descriptor and a block index each) while the partition's share and the
//! descriptor cap allow.

use super::*;

/// Bytes an open reader costs beyond its block index (struct, path, buffers).
pub(super) const READER_BASE: u64 = 512;
/// Readers of small shards (a few blocks) cached outside the partitions' shares.
/// A tiny budget leaves no room in a partition's share for any reader, so
/// without this pool every lookup of a deep level's many small shards reopened
/// its file (measured on Microban #139 at a 0.82 MiB budget: 70,000 opens, most
/// of the spilled run's extra time). Part of the fixed overhead in docs/benchmarks.md:
/// at most `SMALL_READERS * SMALL_READER_BYTES` = 1 MiB.
pub(super) const SMALL_READERS: usize = 1024;
/// Largest reader cost the small-reader pool takes.
pub(super) const SMALL_READER_BYTES: u64 = 1024;

pub(super) enum Reader<K: StateKey> {
    Plain(ShardReader<K>),
    Tagged(ShardReader<TagKey<K>>),
}

impl<K: StateKey> Reader<K> {
    pub(super) fn cost(&self) -> u64 {
        let (blocks, limbs) = match self {
            Reader::Plain(r) => (r.blocks(), K::LIMBS),
            Reader::Tagged(r) => (r.blocks(), K::LIMBS + 1),
        };
        // the parsed index entry plus its raw bytes (kept for the checksum)
        READER_BASE + blocks as u64 * (2 * limbs as u64 * 8 + 64)
    }
}

/// Counts one more on `counter` if it is below `limit`; whether it did.
pub(super) fn take_below(counter: &AtomicUsize, limit: usize) -> bool {
    counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1)).is_ok()
}

/// What a disk run says about a batch of sorted keys: the indices found, with
/// the layer offset each was found at.
pub(super) fn probe<K: StateKey>(
    r: &Reader<K>,
    keys: &[K],
    mut hit: impl FnMut(usize, u8),
) -> Result<(), StorageError> {
    match r {
        Reader::Plain(x) => x.find_in_ranges(keys.len(), |i| (keys[i], keys[i]), |i, _| hit(i, 0)),
        Reader::Tagged(x) => x.find_in_ranges(
            keys.len(),
            |i| (TagKey { key: keys[i], offset: 0 }, TagKey { key: keys[i], offset: u8::MAX }),
            |i, t| hit(i, t.offset),
        ),
    }
}

impl<K: StateKey> DiskStore<K> {
    /// Keeps `r` open in `shard` if its index fits the partition's share and a
    /// descriptor is free; otherwise it is dropped (closed) here.
    pub(super) fn cache_reader(&self, shard: &mut Shard<K>, mem: &mut u64, r: Reader<K>) {
        let cost = r.cost();
        if *mem + cost > self.part_share {
            if cost <= SMALL_READER_BYTES && self.take_small_reader() {
                shard.pooled = true;
                shard.reader = Some(Box::new(r));
            }
            return;
        }
        if take_below(&self.open_readers, self.opts.max_open_shards) {
            *mem += cost;
            shard.reader_mem = cost;
            shard.reader = Some(Box::new(r));
        }
    }

    /// Reserves a small-reader pool slot and a descriptor.
    pub(super) fn take_small_reader(&self) -> bool {
        if !take_below(&self.small_readers, SMALL_READERS) {
            return false;
        }
        let fd = take_below(&self.open_readers, self.opts.max_open_shards);
        if !fd {
            self.small_readers.fetch_sub(1, Ordering::AcqRel);
        }
        fd
    }

    /// Opens a run's shard and checks that it is the one the store wrote.
    pub(super) fn open_reader(
        &self,
        side: Side,
        p: usize,
        run_first: usize,
        len: u64,
        file: FileName,
    ) -> Result<Reader<K>, StorageError> {
        let path = file.path(&self.dir, side, p);
        let (r, got_len) = if file.tagged() {
            let r = ShardReader::<TagKey<K>>::open(&path)?;
            self.check_meta(&path, r.meta(), side, run_first, p)?;
            let n = r.len();
            (Reader::Tagged(r), n)
        } else {
            let r = ShardReader::<K>::open(&path)?;
            self.check_meta(&path, r.meta(), side, run_first, p)?;
            let n = r.len();
            (Reader::Plain(r), n)
        };
        if got_len != len {
            return Err(StorageError::Misplaced {
                path,
                reason: format!("it holds {got_len} keys, the store wrote {len}"),
            });
        }
        Ok(r)
    }

    /// Runs `f` on a disk run's reader, opening (and maybe caching) it.
    pub(super) fn with_reader<R, E: From<StorageError>>(
        &self,
        run: &mut Run<K>,
        mem: &mut u64,
        side: Side,
        p: usize,
        f: impl FnOnce(&Reader<K>) -> Result<R, E>,
    ) -> Result<R, E> {
        let (first, len) = (run.first, run.len());
        let Some(shard) = run.shard.as_mut() else {
            return Err(StorageError::Misplaced {
                path: shard_path(&self.dir, side, first, p),
                reason: "the store lost track of this run's file".into(),
            }
            .into());
        };
        if let Some(r) = &shard.reader {
            return f(r);
        }
        let r = self.open_reader(side, p, first, len, shard.file)?;
        let out = f(&r)?;
        self.cache_reader(shard, mem, r);
        Ok(out)
    }
}
