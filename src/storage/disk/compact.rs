//! Compaction: older disk layers merged, eight at a time, into runs whose keys
//! carry their layer as a one-byte offset ([`TagKey`]), and older RAM layers
//! merged in RAM, two at a time, as the in-memory store does.

use super::*;

/// A key of a merged run: the state key with its layer's offset in the run in the
/// low 8 bits, i.e. `key * 256 + offset` over one more limb. Layers of a side are
/// disjoint, so consecutive stored values differ by a key step times 256: one
/// byte per state more than a plain shard, and the run answers "which layer" for
/// every key. Ordered like that number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct TagKey<K> {
    pub key: K,
    pub offset: u8,
}

impl<K: StateKey> StateKey for TagKey<K> {
    const LIMBS: usize = K::LIMBS + 1;
    const NAME: &'static str = "tagged";
    #[inline]
    fn limb(&self, i: usize) -> u64 {
        let k = |j: usize| if j < K::LIMBS { self.key.limb(j) } else { 0 };
        if i == 0 {
            (k(0) << 8) | self.offset as u64
        } else {
            (k(i) << 8) | (k(i - 1) >> 56)
        }
    }
    #[inline]
    fn from_limbs(limbs: &[u64]) -> Self {
        let mut k = [0u64; 16];
        let at = |j: usize| limbs.get(j).copied().unwrap_or(0);
        for (j, x) in k.iter_mut().enumerate().take(K::LIMBS) {
            *x = (at(j) >> 8) | (at(j + 1) << 56);
        }
        TagKey { key: K::from_limbs(&k[..K::LIMBS]), offset: (at(0) & 0xff) as u8 }
    }
    fn partition_hash(&self, shift: u32) -> u64 {
        self.key.partition_hash(shift)
    }
    fn encode(space: &crate::model::key::KeySpace, boxes: &[u16], player: u16) -> Self {
        TagKey { key: K::encode(space, boxes, player), offset: 0 }
    }
    fn decode(&self, space: &crate::model::key::KeySpace, boxes: &mut Vec<u16>) -> u16 {
        self.key.decode(space, boxes)
    }
}

/// Runs merged at once.
pub(super) const MERGE_FANIN: usize = 8;
/// Longest layer span of a merged run (the offset is one byte).
pub(super) const MAX_SPAN: usize = u8::MAX as usize;
/// Widest key a merged run can tag (the shard format holds 16 limbs).
pub(super) const TAG_MAX_LIMBS: usize = 15;

/// A pull source of tagged keys for merging two runs.
pub(super) struct Source<'a, K: StateKey> {
    pub(super) cursor: Cursor<'a, K>,
    /// Added to every offset: where the source's first layer sits in the output.
    pub(super) base: u8,
    pub(super) buf: Vec<TagKey<K>>,
    pub(super) pos: usize,
    pub(super) path: &'a Path,
}

pub(super) fn source<K: StateKey>(r: &Reader<K>, base: usize) -> Source<'_, K> {
    let (cursor, path) = match r {
        Reader::Plain(x) => (Cursor::Plain(x.block_cursor()), x.path()),
        Reader::Tagged(x) => (Cursor::Tagged(x.block_cursor()), x.path()),
    };
    Source { cursor, base: base as u8, buf: Vec::new(), pos: 0, path }
}

pub(super) enum Cursor<'a, K: StateKey> {
    Plain(crate::storage::shard::Blocks<'a, K>),
    Tagged(crate::storage::shard::Blocks<'a, TagKey<K>>),
}

impl<K: StateKey> Source<'_, K> {
    pub(super) fn peek(&mut self) -> Result<Option<TagKey<K>>, StorageError> {
        while self.pos >= self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            let base = self.base;
            match &mut self.cursor {
                Cursor::Plain(c) => match c.next_block()? {
                    Some(b) => self.buf.extend(b.iter().map(|&key| TagKey { key, offset: base })),
                    None => return Ok(None),
                },
                Cursor::Tagged(c) => match c.next_block()? {
                    Some(b) => {
                        for t in b {
                            let Some(offset) = t.offset.checked_add(base) else {
                                return Err(StorageError::Misplaced {
                                    path: self.path.to_path_buf(),
                                    reason: format!("a key's layer offset {} runs past the merged span", t.offset),
                                });
                            };
                            self.buf.push(TagKey { key: t.key, offset });
                        }
                    }
                    None => return Ok(None),
                },
            }
        }
        Ok(Some(self.buf[self.pos]))
    }
}

impl<K: StateKey> DiskStore<K> {
    /// Merges the older RAM layers of one partition as the in-memory store
    /// does ([`crate::storage::mem`]): the frontier stays alone, and the two
    /// runs before it become one while the older is not more than twice the
    /// newer, so that a search that fits its budget checks O(log layers) runs
    /// as it would without a budget. A merge holds both copies for a moment,
    /// so it happens only while they fit the partition's share; the merged run
    /// costs a byte a key more (so a search that fills more than 8/9 of its
    /// share, with `u64` keys, spills a little sooner than it would unmerged).
    /// Only under [`SpillPolicy::KeepOldest`], where RAM layers stay in RAM:
    /// [`SpillPolicy::KeepNewest`] evicts the oldest run, and a merged one
    /// would take the room of many layers with it where one was needed.
    ///
    /// A durable store merges the RAM copies of its sealed layers too, once
    /// their checkpoint is written: their files stay as they are (a resume
    /// reads them, through the manifest), and the merged run forgets them,
    /// as nothing reads a layer's file while its keys are in RAM.
    pub(super) fn merge_ram(&self, part: &mut Part<K>, s: usize) {
        if self.opts.policy != SpillPolicy::KeepOldest {
            return;
        }
        let durable = self.opts.durable;
        let ram_only =
            |r: &Run<K>| r.keys.is_some() && r.shard.as_ref().is_none_or(|sh| durable && sh.reader.is_none());
        loop {
            let runs = &part.runs[s];
            let n = runs.len();
            if n < 3 {
                return;
            }
            let (a, b) = (&runs[n - 3], &runs[n - 2]);
            if !ram_only(a) || !ram_only(b) || a.len() > 2 * b.len().max(1) || b.last() - a.first > MAX_SPAN {
                return;
            }
            let merged = LayeredKeys::<K>::merged_bytes((a.len() + b.len()) as usize);
            if part.mem + merged > self.part_share {
                return;
            }
            let runs = &mut part.runs[s];
            let (Some(frontier), Some(b), Some(a)) = (runs.pop(), runs.pop(), runs.pop()) else { return };
            let before = a.ram_bytes() + b.ram_bytes() + RUN_RECORD;
            let (Some(ka), Some(kb)) = (a.keys, b.keys) else { return };
            let keys = LayeredKeys::merge(ka, kb, b.first - a.first);
            let mut lens = a.lens;
            lens.resize(b.first - a.first, 0);
            lens.extend(b.lens);
            part.mem = part.mem.saturating_sub(before) + keys.bytes();
            let run = Run { first: a.first, lens, keys: Some(keys), shard: None, seq: a.seq.min(b.seq), tier: a.tier };
            runs.push(run);
            runs.push(frontier);
        }
    }

    /// Merges disk runs of one partition, LSM-style, so that lookups visit
    /// O(log layers) files instead of one per layer: when the newest
    /// [`MERGE_FANIN`] disk runs before the frontier are all of one tier, they
    /// become one run of the next tier (the frontier stays alone, RAM layers stay
    /// as they are, a run spans at most [`MAX_SPAN`] layers). A fan-in of 8
    /// rather than a binary counter because creating files is what costs most on
    /// disk (about 0.1 ms each on ext4): a key is rewritten once per tier, about
    /// `log8(layers)` times, and the number of runs stays below `8 log8(layers)`.
    pub(super) fn compact(&self, side: Side, p: usize) -> Result<(), StorageError> {
        if self.opts.durable {
            return Ok(()); // checkpoints keep one file per layer
        }
        let s = side.index();
        let mut g = self.part(p);
        self.merge_ram(&mut g, s);
        if K::LIMBS > TAG_MAX_LIMBS {
            return Ok(()); // too wide to tag on disk
        }
        loop {
            let runs = &g.runs[s];
            let n = runs.len();
            let Some(end) = (0..n.saturating_sub(1)).rev().find(|&j| runs[j].on_disk_only()).map(|j| j + 1) else {
                return Ok(());
            };
            let Some(start) = end.checked_sub(MERGE_FANIN) else { return Ok(()) };
            let group = &runs[start..end];
            let tier = group[0].tier;
            if !group.iter().all(|r| r.on_disk_only() && r.tier == tier)
                || group[MERGE_FANIN - 1].last() - group[0].first > MAX_SPAN
            {
                return Ok(());
            }
            let merged = self.merge(side, p, group)?;
            let part = &mut *g;
            part.mem += RUN_RECORD;
            let old: Vec<Run<K>> = part.runs[s].splice(start..end, [merged]).collect();
            for r in old {
                self.discard(side, p, r, &mut part.mem);
            }
            self.merges.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes consecutive runs (oldest first) as one tagged run of the next tier.
    pub(super) fn merge(&self, side: Side, p: usize, group: &[Run<K>]) -> Result<Run<K>, StorageError> {
        let (first, last) = match (group.first(), group.last()) {
            (Some(a), Some(b)) => (a.first, b.last()),
            _ => return Err(StorageError::Misplaced { path: self.dir.clone(), reason: "merging no runs".into() }),
        };
        let file = FileName { first, last };
        let path = file.path(&self.dir, side, p);
        Self::ensure_parent(&path)?;
        let readers = group.iter().map(|r| self.open_for_merge(side, p, r)).collect::<Result<Vec<_>, _>>()?;
        let mut sources: Vec<Source<'_, K>> =
            readers.iter().zip(group).map(|(rd, r)| source(rd, r.first - first)).collect();
        let mut w = ShardWriter::<TagKey<K>>::create(&path, Self::meta(side, first, p))?.unsynced();
        loop {
            // the smallest head among at most MERGE_FANIN sources
            let mut best: Option<(TagKey<K>, usize)> = None;
            for (i, src) in sources.iter_mut().enumerate() {
                if let Some(k) = src.peek()? {
                    match best {
                        Some((b, _)) if b <= k => {}
                        _ => best = Some((k, i)),
                    }
                }
            }
            let Some((k, i)) = best else { break };
            sources[i].pos += 1;
            w.push(k)?;
        }
        let info = w.finish()?;
        self.account_written(info.bytes, info.keys);
        let mut lens = Vec::with_capacity(last - first + 1);
        for r in group {
            lens.resize(r.first - first, 0);
            lens.extend_from_slice(&r.lens);
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let shard = Shard { file, bytes: info.bytes, reader: None, reader_mem: 0, pooled: false };
        Ok(Run { first, lens, keys: None, shard: Some(shard), seq, tier: group[0].tier.saturating_add(1) })
    }

    /// A fresh reader for merging (the cached one stays untouched).
    pub(super) fn open_for_merge(&self, side: Side, p: usize, r: &Run<K>) -> Result<Reader<K>, StorageError> {
        match &r.shard {
            Some(s) => self.open_reader(side, p, r.first, r.len(), s.file),
            None => Err(StorageError::Misplaced {
                path: shard_path(&self.dir, side, r.first, p),
                reason: "the store lost track of this run's file".into(),
            }),
        }
    }
}
