//! The disk store against the in-memory one, and every kind of damage to its files.

use super::*;
use crate::engine::partition::Partitioner;
use crate::storage::mem::MemStore;
use proptest::prelude::*;

const SIDES: [Side; 2] = [Side::Forward, Side::Backward];

/// Layers per side, each a list of random keys. A side's layers are disjoint,
/// as in a BFS (the in-memory store merges old layers and relies on it); the
/// two sides overlap freely.
fn layers_strategy() -> impl Strategy<Value = [Vec<Vec<u64>>; 2]> {
    let layer = proptest::collection::vec(0u64..5000, 0..400);
    let side = proptest::collection::vec(layer, 1..12).prop_map(|mut side| {
        let mut seen = std::collections::HashSet::new();
        for l in &mut side {
            l.retain(|k| seen.insert(*k));
        }
        side
    });
    (side.clone(), side).prop_map(|(f, b)| [f, b])
}

fn split(keys: &[u64], parts: Partitioner) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); parts.count()];
    for &k in keys {
        out[parts.of(&k)].push(k);
    }
    for v in &mut out {
        v.sort_unstable();
        v.dedup();
    }
    out
}

fn fill(store: &dyn PartitionStore<u64>, layers: &[Vec<Vec<u64>>; 2], parts: Partitioner) {
    let n = layers[0].len().max(layers[1].len());
    for l in 0..n {
        for side in SIDES {
            if let Some(keys) = layers[side.index()].get(l) {
                for (p, v) in split(keys, parts).into_iter().enumerate() {
                    store.push_layer(side, p, v).unwrap();
                }
                store.seal_layer(side).unwrap();
            }
        }
    }
}

fn chunks(store: &dyn PartitionStore<u64>, side: Side, layer: usize, p: usize) -> Result<Vec<u64>, StorageError> {
    let mut v = Vec::new();
    store
        .for_each_chunk(side, layer, p, &mut |c| {
            assert!(c.windows(2).all(|w| w[0] < w[1]));
            v.extend_from_slice(c);
            Ok(())
        })
        .map_err(|e| StorageError::from_seam(e).unwrap())?;
    Ok(v)
}

/// Every read the engine makes gives the same answer on both stores.
fn assert_same(a: &dyn PartitionStore<u64>, b: &dyn PartitionStore<u64>, parts: Partitioner, probes: &[u64]) {
    for side in SIDES {
        assert_eq!(a.layers(side), b.layers(side));
        for layer in 0..a.layers(side) {
            for p in 0..parts.count() {
                assert_eq!(a.layer_len(side, layer, p), b.layer_len(side, layer, p));
                assert_eq!(chunks(a, side, layer, p).unwrap(), chunks(b, side, layer, p).unwrap());
            }
        }
        for (p, cands) in split(probes, parts).into_iter().enumerate() {
            let (mut x, mut y) = (cands.clone(), cands.clone());
            a.retain_unseen(side, p, &mut x).unwrap();
            b.retain_unseen(side, p, &mut y).unwrap();
            assert_eq!(x, y);
            assert_eq!(a.find_any(side, p, &cands).unwrap(), b.find_any(side, p, &cands).unwrap());
            for k in &cands {
                for layer in 0..a.layers(side) {
                    assert_eq!(a.contains(side, layer, p, k).unwrap(), b.contains(side, layer, p, k).unwrap());
                }
            }
        }
    }
}

fn opts(memory_bytes: u64, policy: SpillPolicy) -> DiskOptions {
    DiskOptions { memory_bytes, policy, ..DiskOptions::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// A layer streamed in chunks (push, appends, end) is the layer pushed
    /// whole, whatever fits in RAM when.
    #[test]
    fn layers_appended_in_chunks_answer_like_whole_layers(
        layers in layers_strategy(),
        chunk in 1usize..400,
        budget in prop_oneof![Just(0u64), 1000u64..20_000, Just(1u64 << 30)],
        policy in prop_oneof![Just(SpillPolicy::KeepOldest), Just(SpillPolicy::KeepNewest), Just(SpillPolicy::AllToDisk)],
        durable in any::<bool>(),
    ) {
        let parts = Partitioner::new(4);
        let dir = tempfile::tempdir().unwrap();
        let mem = MemStore::<u64>::new(4);
        let disk = DiskStore::<u64>::create(dir.path(), 4, DiskOptions { durable, ..opts(budget, policy) }).unwrap();
        fill(&mem, &layers, parts);
        for side in SIDES {
            for layer in &layers[side.index()] {
                for (p, keys) in split(layer, parts).into_iter().enumerate() {
                    let mut pieces = keys.chunks(chunk);
                    disk.push_layer(side, p, pieces.next().unwrap_or(&[]).to_vec()).unwrap();
                    for piece in pieces {
                        disk.append_layer(side, p, piece.to_vec()).unwrap();
                    }
                    disk.end_layer(side, p).unwrap();
                }
                disk.seal_layer(side).unwrap();
            }
        }
        let probes: Vec<u64> = (0..6000).step_by(7).collect();
        assert_same(&mem, &disk, parts, &probes);
        if durable {
            // a non-empty layer of a partition has a file of its own or is in
            // its layer's pack (or both: a packed layer that RAM later lost
            // was written to its own file then); an empty one has neither; a
            // pack is there exactly where the manifest names one
            let m = read_manifest(&dir.path().join(MANIFEST_NAME), 1).unwrap();
            for side in SIDES {
                for layer in 0..disk.layers(side) {
                    let pack = pack_path(dir.path(), side, layer).exists();
                    prop_assert_eq!(pack, m.packs[side.index()].get(layer), "{:?} layer {}", side, layer);
                    for p in 0..4 {
                        let own = shard_path(dir.path(), side, layer, p).exists();
                        let len = disk.layer_len(side, layer, p);
                        prop_assert!(!own || len > 0, "{:?} layer {} partition {}: a file for an empty layer", side, layer, p);
                        prop_assert!(len == 0 || own || pack, "{:?} layer {} partition {}: keys in no file", side, layer, p);
                    }
                }
            }
            drop(disk);
            let reopened = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).unwrap();
            assert_same(&mem, &reopened, parts, &probes);
        }
    }
}

#[test]
fn small_shards_keep_readers_open_when_no_share_is_left() {
    // regression: with a budget too small for any reader, every lookup of a
    // deep level's small shards reopened its file (Microban #139)
    let parts = Partitioner::new(4);
    let layers: [Vec<Vec<u64>>; 2] =
        [(0..6u64).map(|l| (l * 100..l * 100 + 40).collect()).collect(), vec![vec![9_999]]];
    for max_open in [0usize, 3, 1000] {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskStore::<u64>::create(
            dir.path(),
            4,
            DiskOptions { max_open_shards: max_open, ..opts(0, SpillPolicy::AllToDisk) },
        )
        .unwrap();
        fill(&disk, &layers, parts);
        for (p, keys) in split(&(0..600).collect::<Vec<u64>>(), parts).into_iter().enumerate() {
            assert!(disk.find_any(Side::Forward, p, &keys).unwrap().is_some());
        }
        assert!(disk.open_shards() <= max_open);
        assert_eq!(disk.open_shards() > 0, max_open > 0, "max_open {max_open}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn disk_store_answers_like_mem_store(
        layers in layers_strategy(),
        probes in proptest::collection::vec(0u64..5200, 0..300),
        budget in prop_oneof![Just(0u64), 1000u64..20_000, Just(1u64 << 30)],
        policy in prop_oneof![Just(SpillPolicy::KeepOldest), Just(SpillPolicy::KeepNewest), Just(SpillPolicy::AllToDisk)],
        max_open in prop_oneof![Just(0usize), Just(3), Just(1000)],
    ) {
        let parts = Partitioner::new(4);
        let dir = tempfile::tempdir().unwrap();
        let mem = MemStore::<u64>::new(4);
        let disk = DiskStore::<u64>::create(dir.path(), 4, DiskOptions { max_open_shards: max_open, ..opts(budget, policy) }).unwrap();
        fill(&mem, &layers, parts);
        fill(&disk, &layers, parts);
        assert_same(&mem, &disk, parts, &probes);
        // layer records are charged but cannot be spilled
        let records = (disk.layers(Side::Forward) + disk.layers(Side::Backward)) as u64 * 4 * RUN_RECORD;
        let bytes = disk.bytes();
        prop_assert!(bytes.memory <= budget + records, "{} > {budget} + {records}", bytes.memory);
        prop_assert!(disk.open_shards() <= max_open);
        if policy == SpillPolicy::AllToDisk {
            let stored: u64 = SIDES.iter().flat_map(|&s| (0..disk.layers(s)).flat_map(move |l| (0..4).map(move |p| (s, l, p)))).map(|(s, l, p)| disk.layer_len(s, l, p)).sum();
            prop_assert_eq!(disk.disk_keys(), stored);
        }
    }
}

fn sample_layers() -> [Vec<Vec<u64>>; 2] {
    let layer = |seed: u64, n: u64| {
        (0..n).map(|i| xxh3_64(&(seed * 1_000_003 + i).to_le_bytes()) % 1_000_000).collect::<Vec<_>>()
    };
    let disjoint = |mut side: Vec<Vec<u64>>| {
        let mut seen = std::collections::HashSet::new();
        for l in &mut side {
            l.retain(|k| seen.insert(*k));
        }
        side
    };
    [disjoint(vec![layer(1, 3000), layer(2, 5000), layer(3, 8000)]), disjoint(vec![layer(4, 2000), layer(5, 6000)])]
}

/// The sample layers over `partitions` partitions, and an in-memory store
/// holding them to compare with.
fn sampled(partitions: usize) -> (Partitioner, [Vec<Vec<u64>>; 2], MemStore<u64>) {
    let (parts, layers) = (Partitioner::new(partitions), sample_layers());
    let reference = MemStore::<u64>::new(partitions);
    fill(&reference, &layers, parts);
    (parts, layers, reference)
}

#[test]
fn abort_drops_the_pending_layer_and_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::<u64>::create(dir.path(), 2, opts(0, SpillPolicy::AllToDisk)).unwrap();
    store.push_layer(Side::Forward, 0, vec![1, 2, 3]).unwrap();
    store.seal_layer(Side::Forward).unwrap();
    let before = store.bytes();
    store.push_layer(Side::Forward, 0, vec![4, 5]).unwrap();
    store.end_layer(Side::Forward, 0).unwrap();
    store.push_layer(Side::Forward, 1, vec![7]).unwrap(); // still being written
    assert!(shard_path(dir.path(), Side::Forward, 1, 0).exists());
    store.abort_layer(Side::Forward);
    assert!(!shard_path(dir.path(), Side::Forward, 1, 0).exists());
    assert!(!shard_path(dir.path(), Side::Forward, 1, 1).exists());
    assert_eq!(store.bytes(), before);
    assert_eq!(store.layers(Side::Forward), 1);
    assert_eq!(store.disk_keys(), 3);
}

#[test]
fn durable_store_reopens_at_the_last_sealed_layer() {
    let dir = tempfile::tempdir().unwrap();
    let (parts, layers, reference) = sampled(8);
    {
        let store = DiskStore::<u64>::create(
            dir.path(),
            8,
            DiskOptions { durable: true, memory_bytes: 1 << 20, ..DiskOptions::default() },
        )
        .unwrap();
        fill(&store, &layers, parts);
        // an unfinished step: pushed, never sealed (large enough for a file
        // of its own: a small layer waits for the seal's pack)
        let big: Vec<u64> = (0..100_000).map(|i| 5_000_000 + 8 * i + 3).filter(|k| parts.of(k) == 3).collect();
        assert!(big.len() * 8 > PACK_MAX as usize);
        store.push_layer(Side::Forward, 3, big).unwrap();
        store.end_layer(Side::Forward, 3).unwrap();
        assert!(shard_path(dir.path(), Side::Forward, 3, 3).exists());
    }
    // a second create on the same directory is refused
    let e = DiskStore::<u64>::create(dir.path(), 8, DiskOptions::default()).err().unwrap();
    assert!(matches!(e, StorageError::BadManifest { .. }), "{e}");

    let store = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).unwrap();
    assert_eq!(store.partitions(), 8);
    assert_eq!([store.layers(Side::Forward), store.layers(Side::Backward)], [3, 2]);
    assert!(!shard_path(dir.path(), Side::Forward, 3, 3).exists(), "the unsealed layer's file is gone");
    let probes: Vec<u64> = (0..3000).map(|i| i * 331).collect();
    assert_same(&reference, &store, parts, &probes);

    // the search goes on from there, and a second reopen sees the new layer
    let next: Vec<u64> = (0..500).map(|i| 2_000_000 + i).collect();
    for (p, v) in split(&next, parts).into_iter().enumerate() {
        store.push_layer(Side::Backward, p, v.clone()).unwrap();
        reference.push_layer(Side::Backward, p, v).unwrap();
    }
    store.seal_layer(Side::Backward).unwrap();
    reference.seal_layer(Side::Backward).unwrap();
    drop(store);
    let store =
        DiskStore::<u64>::open(dir.path(), DiskOptions { memory_bytes: 0, ..DiskOptions::default() }, None).unwrap();
    assert_eq!(store.layers(Side::Backward), 3);
    assert_same(&reference, &store, parts, &probes);

    // opened for the wrong key width
    let e = DiskStore::<u128>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
    assert!(matches!(e, StorageError::BadManifest { ref reason, .. } if reason.contains("1-limb")), "{e}");
}

/// A spilled store with every layer on disk and no cached readers, so each
/// access opens its file.
fn spilled(dir: &Path) -> DiskStore<u64> {
    let store = DiskStore::<u64>::create(dir, 4, DiskOptions { max_open_shards: 0, ..opts(0, SpillPolicy::AllToDisk) })
        .unwrap();
    fill(&store, &sample_layers(), Partitioner::new(4));
    store
}

fn retain_all(store: &DiskStore<u64>, side: Side) -> Result<(), StorageError> {
    for p in 0..4 {
        let mut c: Vec<u64> = (0..1_000_000).step_by(97).filter(|k| Partitioner::new(4).of(k) == p).collect();
        store.retain_unseen(side, p, &mut c).map_err(|e| StorageError::from_seam(e).unwrap())?;
    }
    Ok(())
}

#[test]
fn deleted_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = spilled(dir.path());
    let victim = shard_path(dir.path(), Side::Forward, 1, 2);
    fs::remove_file(&victim).unwrap();
    let e = retain_all(&store, Side::Forward).unwrap_err();
    assert!(matches!(e, StorageError::Io { ref path, op: "opening", .. } if *path == victim), "{e}");
    assert!(e.to_string().contains(&*victim.to_string_lossy()), "{e}");
    // other partitions and the other side still answer
    retain_all(&store, Side::Backward).unwrap();
}

#[test]
fn truncated_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = spilled(dir.path());
    let victim = shard_path(dir.path(), Side::Backward, 0, 1);
    let len = fs::metadata(&victim).unwrap().len();
    fs::OpenOptions::new().write(true).open(&victim).unwrap().set_len(len / 2).unwrap();
    let e = retain_all(&store, Side::Backward).unwrap_err();
    assert!(matches!(e, StorageError::Truncated { ref path, .. } if *path == victim), "{e}");
    let e = chunks(&store, Side::Backward, 0, 1).unwrap_err();
    assert!(matches!(e, StorageError::Truncated { .. }), "{e}");
}

#[test]
fn corrupt_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = spilled(dir.path());
    let victim = shard_path(dir.path(), Side::Forward, 2, 0);
    let mut bytes = fs::read(&victim).unwrap();
    bytes[100] ^= 0x40; // inside the first block
    fs::write(&victim, &bytes).unwrap();
    let e = chunks(&store, Side::Forward, 2, 0).unwrap_err();
    assert!(matches!(e, StorageError::CorruptBlock { ref path, block: 0, .. } if *path == victim), "{e}");
    let e = retain_all(&store, Side::Forward).unwrap_err();
    assert!(matches!(e, StorageError::CorruptBlock { .. }), "{e}");
}

#[test]
fn shard_in_the_wrong_place_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = spilled(dir.path());
    let (a, b) = (shard_path(dir.path(), Side::Backward, 0, 0), shard_path(dir.path(), Side::Backward, 0, 1));
    fs::copy(&a, &b).unwrap();
    let e = chunks(&store, Side::Backward, 0, 1).unwrap_err();
    assert!(
        matches!(e, StorageError::Misplaced { ref path, ref reason } if *path == b && reason.contains("partition 0")),
        "{e}"
    );
}

#[test]
fn cached_reader_sees_corruption_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::<u64>::create(dir.path(), 4, opts(1 << 20, SpillPolicy::AllToDisk)).unwrap();
    fill(&store, &sample_layers(), Partitioner::new(4));
    retain_all(&store, Side::Forward).unwrap();
    assert!(store.open_shards() > 0);
    let victim = shard_path(dir.path(), Side::Forward, 1, 3);
    // rewrite in place, so the open descriptor sees the damage
    let f = fs::OpenOptions::new().write(true).open(&victim).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xff; 16], 80).unwrap();
    let e = chunks(&store, Side::Forward, 1, 3).unwrap_err();
    assert!(matches!(e, StorageError::CorruptBlock { ref path, .. } if *path == victim), "{e}");
    f.set_len(70).unwrap();
    let e = chunks(&store, Side::Forward, 1, 3).unwrap_err();
    assert!(matches!(e, StorageError::Truncated { ref path, .. } if *path == victim), "{e}");
}

/// A cluster worker's checkpoint: only its own partitions, tagged with its
/// job, reopened at fewer layers than were sealed (the coordinator's last
/// complete layer), and refused under another tag or partition set.
#[test]
fn held_partitions_reopen_at_the_layers_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let parts = Partitioner::new(4);
    let held = vec![1, 3];
    let opts = DiskOptions { durable: true, held: Some(held.clone()), tag: 77, ..DiskOptions::default() };
    let layers = sample_layers();
    let reference = MemStore::<u64>::new(4);
    {
        let store = DiskStore::<u64>::create(dir.path(), 4, opts.clone()).unwrap();
        for (s, side) in SIDES.into_iter().enumerate() {
            for (l, layer) in layers[s].iter().enumerate() {
                for (p, v) in split(layer, parts).into_iter().enumerate() {
                    if held.contains(&p) {
                        store.push_layer(side, p, v.clone()).unwrap();
                        if l < 2 {
                            reference.push_layer(side, p, v).unwrap();
                        }
                    } else {
                        // the other partitions are another worker's: an
                        // empty start is nothing, keys are refused
                        store.push_layer(side, p, Vec::new()).unwrap();
                        if !v.is_empty() {
                            let e = StorageError::from_seam(store.push_layer(side, p, v).unwrap_err()).unwrap();
                            assert!(matches!(e, StorageError::Misplaced { .. }), "{e}");
                        }
                    }
                }
                store.seal_layer(side).unwrap();
                if l < 2 {
                    reference.seal_layer(side).unwrap();
                }
            }
        }
        // no file for a partition it does not hold
        assert!(!shard_path(dir.path(), Side::Forward, 0, 0).exists());
        assert!(shard_path(dir.path(), Side::Forward, 0, 1).exists());
    }
    let other = DiskStore::<u64>::open(dir.path(), DiskOptions { tag: 78, ..opts.clone() }, None).err().unwrap();
    assert!(matches!(other, StorageError::BadManifest { .. }), "{other}");
    let wrong = DiskOptions { held: Some(vec![1, 2]), ..opts.clone() };
    let e = DiskStore::<u64>::open(dir.path(), wrong, None).err().unwrap();
    assert!(matches!(e, StorageError::BadManifest { .. }), "{e}");
    let e = DiskStore::<u64>::open(dir.path(), opts.clone(), Some([4, 2])).err().unwrap();
    assert!(matches!(e, StorageError::BadManifest { ref reason, .. } if reason.contains("3 forward layers")), "{e}");
    let store = DiskStore::<u64>::open(dir.path(), opts.clone(), Some([2, 2])).unwrap();
    assert_eq!([store.layers(Side::Forward), store.layers(Side::Backward)], [2, 2]);
    let probes: Vec<u64> = (0..3000).map(|i| i * 331).filter(|k| held.contains(&parts.of(k))).collect();
    assert_same(&reference, &store, parts, &probes);
    drop(store);
    // the dropped layer is gone for good: the manifest says two
    let store = DiskStore::<u64>::open(dir.path(), opts, None).unwrap();
    assert_eq!(store.layers(Side::Forward), 2);
}

#[test]
fn manifest_damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store =
            DiskStore::<u64>::create(dir.path(), 4, DiskOptions { durable: true, ..DiskOptions::default() }).unwrap();
        fill(&store, &sample_layers(), Partitioner::new(4));
    }
    let path = dir.path().join(MANIFEST_NAME);
    let good = fs::read(&path).unwrap();
    // every layer of every partition has keys here: every bit set
    let all = |n: usize| {
        let mut b = Bits::default();
        (0..n).for_each(|_| b.push(true));
        b
    };
    // and with no RAM to keep a layer in, none is packed
    let none = |n: usize| {
        let mut b = Bits::default();
        (0..n).for_each(|_| b.push(false));
        b
    };
    assert_eq!(
        read_manifest(&path, 1).unwrap(),
        Manifest {
            partitions: 4,
            sealed: [3, 2],
            tag: 0,
            held: vec![0, 1, 2, 3],
            files: [all(12), all(8)],
            packs: [none(3), none(2)]
        }
    );
    for at in 0..good.len() {
        let mut b = good.clone();
        b[at] ^= 1;
        fs::write(&path, &b).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
        // a flip in a layer count or the partition count (bytes 20..32) says
        // the file should be longer or shorter than it is: from the bytes
        // alone that is a cut file, named as one
        let named = match e {
            StorageError::BadManifest { path: ref p, .. } => *p == path,
            StorageError::Truncated { path: ref p, .. } => (20..32).contains(&at) && *p == path,
            _ => false,
        };
        assert!(named, "flip at {at}: {e}");
    }
    for cut in 0..good.len() {
        fs::write(&path, &good[..cut]).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
        assert!(matches!(e, StorageError::Truncated { found, .. } if found == cut as u64), "cut at {cut}: {e}");
    }
    fs::remove_file(&path).unwrap();
    let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
    assert!(matches!(e, StorageError::Io { ref path, .. } if path.ends_with(MANIFEST_NAME)), "{e}");
    // a bit set past the last layer, under a checksum made to match: refused
    let mut forged = good.clone();
    let pad = MANIFEST_HEAD + 4 * 4 + 1; // the forward bits' second byte: layer 2's bits, then four unused
    forged[pad] |= 0x80;
    let n = forged.len();
    let h = xxh3_64(&forged[..n - 8]);
    forged[n - 8..].copy_from_slice(&h.to_le_bytes());
    fs::write(&path, &forged).unwrap();
    let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
    assert!(matches!(e, StorageError::BadManifest { ref reason, .. } if reason.contains("past the last")), "{e}");
    // a sealed layer's shard missing at reopen
    fs::write(&path, &good).unwrap();
    let victim = shard_path(dir.path(), Side::Backward, 1, 2);
    fs::remove_file(&victim).unwrap();
    let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
    assert!(matches!(e, StorageError::Io { ref path, .. } if *path == victim), "{e}");
}

/// Sixty layers of one side, 20 to 319 random keys each, disjoint.
fn deep_side(seed: u64) -> Vec<Vec<u64>> {
    let mut seen = std::collections::HashSet::new();
    (0..60u64)
        .map(|l| {
            let n = 20 + (xxh3_64(&(seed + l).to_le_bytes()) % 300);
            (0..n)
                .map(|i| xxh3_64(&(seed * 7919 + l * 1000 + i).to_le_bytes()) % 200_000)
                .filter(|k| seen.insert(*k))
                .collect()
        })
        .collect()
}

#[test]
fn deep_searches_merge_runs_and_answer_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let parts = Partitioner::new(2);
    let layers = [deep_side(1), deep_side(2)];
    let mem = MemStore::<u64>::new(2);
    let disk = DiskStore::<u64>::create(dir.path(), 2, opts(0, SpillPolicy::AllToDisk)).unwrap();
    fill(&mem, &layers, parts);
    fill(&disk, &layers, parts);
    assert!(disk.merges() >= 20, "{} merges", disk.merges());
    // 60 layers: 7 merged runs of 8, 3 single layers and the frontier
    let files = |side: &str| fs::read_dir(dir.path().join(side).join("p0")).unwrap().flatten().count();
    assert!(files("f") <= 12 && files("b") <= 12, "{} and {} runs", files("f"), files("b"));
    let probes: Vec<u64> = (0..200_000).step_by(37).collect();
    assert_same(&mem, &disk, parts, &probes);
    assert_eq!(disk.disk_keys(), layers.iter().flatten().map(|l| l.len() as u64).sum::<u64>());
    // a damaged merged run is named like any shard
    let merged = dir.path().join("f").join("p1").join("L8-15.shard");
    let mut b = fs::read(&merged).unwrap();
    b[70] ^= 0x22;
    fs::write(&merged, &b).unwrap();
    let mut c: Vec<u64> = probes.iter().copied().filter(|k| parts.of(k) == 1).collect();
    let e = StorageError::from_seam(disk.retain_unseen(Side::Forward, 1, &mut c).unwrap_err()).unwrap();
    assert!(matches!(e, StorageError::CorruptBlock { ref path, .. } if *path == merged), "{e}");
}

/// A full disk is an error naming the file being written, not a panic and
/// not a layer that silently lacks keys. /dev/full stands in for the device:
/// the writer's temporary file is a symlink to it.
#[test]
fn disk_full_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::<u64>::create(dir.path(), 2, opts(0, SpillPolicy::AllToDisk)).unwrap();
    let target = shard_path(dir.path(), Side::Forward, 0, 1);
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    let tmp = PathBuf::from(format!("{}.tmp", target.display()));
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
    store.push_layer(Side::Forward, 0, vec![1, 2, 3]).unwrap();
    let keys: Vec<u64> = (0..100_000).map(|i| i * 7).collect();
    // the writer reports the full disk when it writes, at the latest when the
    // partition's layer ends
    let e = store.push_layer(Side::Forward, 1, keys).and_then(|_| store.end_layer(Side::Forward, 1)).unwrap_err();
    let e = StorageError::from_seam(e).unwrap();
    assert!(e.is_disk_full(), "{e}");
    assert_eq!(e.path(), tmp);
    assert!(e.to_string().starts_with(&format!("disk full while writing {}", tmp.display())), "{e}");
    assert!(!target.exists());
    // the step is abandoned cleanly
    store.abort_layer(Side::Forward);
    assert_eq!(store.layers(Side::Forward), 0);
}

#[test]
fn keep_oldest_stays_within_its_share_and_writes_each_layer_once() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * 1024;
    let store = DiskStore::<u64>::create(dir.path(), 4, opts(budget, SpillPolicy::KeepOldest)).unwrap();
    fill(&store, &sample_layers(), Partitioner::new(4));
    let b = store.bytes();
    assert!(b.memory <= budget, "{} > {budget}", b.memory);
    assert!(b.disk > 0 && store.disk_keys() > 0);
    // the first layers are in RAM: nothing written for them
    assert!(!shard_path(dir.path(), Side::Forward, 0, 0).exists());
}

/// A durable store's packs (its small layers, one file per layer) reopen as
/// they were written, and every kind of damage to one is named: deleted,
/// cut, a byte changed, another layer's pack in its place.
#[test]
fn damaged_pack_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (parts, layers, reference) = sampled(4);
    let opts = DiskOptions { durable: true, memory_bytes: 1 << 22, ..DiskOptions::default() };
    {
        let store = DiskStore::<u64>::create(dir.path(), 4, opts.clone()).unwrap();
        fill(&store, &layers, parts);
    }
    // every layer's partitions went into its pack: no file of their own
    for (side, n) in [(Side::Forward, 3), (Side::Backward, 2)] {
        for layer in 0..n {
            assert!(pack_path(dir.path(), side, layer).exists());
            assert!((0..4).all(|p| !shard_path(dir.path(), side, layer, p).exists()));
        }
    }
    let probes: Vec<u64> = (0..3000).map(|i| i * 331).collect();
    let store = DiskStore::<u64>::open(dir.path(), opts.clone(), None).unwrap();
    assert_same(&reference, &store, parts, &probes);
    drop(store);
    // reopened with no RAM to spare, the packed layers go to files of their own
    let tight = DiskStore::<u64>::open(dir.path(), DiskOptions { memory_bytes: 0, ..opts.clone() }, None).unwrap();
    assert_same(&reference, &tight, parts, &probes);
    assert!(shard_path(dir.path(), Side::Forward, 1, 2).exists());
    drop(tight);

    let victim = pack_path(dir.path(), Side::Forward, 1);
    let good = fs::read(&victim).unwrap();
    let reopen = || DiskStore::<u64>::open(dir.path(), opts.clone(), None).err().unwrap();
    fs::remove_file(&victim).unwrap();
    let e = reopen();
    assert!(matches!(e, StorageError::Io { ref path, .. } if *path == victim), "{e}");
    fs::write(&victim, &good[..good.len() - 5]).unwrap();
    let e = reopen();
    assert!(matches!(e, StorageError::Envelope { ref path, .. } if *path == victim), "{e}");
    let mut flipped = good.clone();
    let n = flipped.len();
    flipped[n - 3] ^= 0x10;
    fs::write(&victim, &flipped).unwrap();
    let e = reopen();
    assert!(matches!(e, StorageError::Envelope { ref path, .. } if *path == victim), "{e}");
    fs::copy(pack_path(dir.path(), Side::Forward, 2), &victim).unwrap();
    let e = reopen();
    assert!(
        matches!(e, StorageError::Misplaced { ref path, ref reason } if *path == victim && reason.contains("layer 2")),
        "{e}"
    );
    fs::write(&victim, &good).unwrap();
    let store = DiskStore::<u64>::open(dir.path(), opts, None).unwrap();
    assert_same(&reference, &store, parts, &probes);
}

/// Regression: reopening looked for `L{n}` folders under each side, which
/// the per-partition layout never makes, so an interrupted step's files
/// stayed behind. Now its shards, packs and their temporaries go.
#[test]
fn an_interrupted_steps_files_are_removed_at_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let parts = Partitioner::new(4);
    let opts = DiskOptions { durable: true, memory_bytes: 1 << 22, ..DiskOptions::default() };
    let stray = [
        pack_path(dir.path(), Side::Forward, 3),
        PathBuf::from(format!("{}.tmp", pack_path(dir.path(), Side::Forward, 4).display())),
        shard_path(dir.path(), Side::Forward, 3, 1),
    ];
    {
        let store = DiskStore::<u64>::create(dir.path(), 4, opts.clone()).unwrap();
        fill(&store, &sample_layers(), parts);
        // the next step began: a large layer streams to its own file
        let big: Vec<u64> = (0..100_000).map(|i| 7_000_000 + 4 * i).filter(|k| parts.of(k) == 1).collect();
        store.push_layer(Side::Forward, 1, big).unwrap();
        store.end_layer(Side::Forward, 1).unwrap();
        fs::copy(pack_path(dir.path(), Side::Forward, 2), &stray[0]).unwrap();
        fs::write(&stray[1], b"half a pack").unwrap();
    }
    assert!(stray.iter().all(|f| f.exists()));
    let store = DiskStore::<u64>::open(dir.path(), opts, None).unwrap();
    assert_eq!([store.layers(Side::Forward), store.layers(Side::Backward)], [3, 2]);
    for f in &stray {
        assert!(!f.exists(), "{} is still there", f.display());
    }
    // the sealed layers' files stay
    assert!(pack_path(dir.path(), Side::Forward, 2).exists());
}

/// A search that fits its budget keeps O(log layers) runs in RAM, as the
/// in-memory store does (each layer a run of its own made every step check
/// every layer: 4% of a budgeted #153's time went to it), and answers the same.
#[test]
fn ram_layers_merge_as_in_the_mem_store() {
    let dir = tempfile::tempdir().unwrap();
    let parts = Partitioner::new(2);
    let layers = [deep_side(1), deep_side(2)];
    let mem = MemStore::<u64>::new(2);
    let disk = DiskStore::<u64>::create(dir.path(), 2, opts(1 << 30, SpillPolicy::KeepOldest)).unwrap();
    fill(&mem, &layers, parts);
    fill(&disk, &layers, parts);
    for p in 0..2 {
        for s in 0..2 {
            let g = disk.part(p);
            // a binary counter over 60 layers of similar sizes, and the frontier
            assert!(g.runs[s].len() <= 10, "{} runs", g.runs[s].len());
            assert!(g.runs[s].iter().all(|r| r.shard.is_none()));
        }
    }
    assert_eq!(disk.disk_bytes(), 0);
    assert!(!dir.path().join("f").exists());
    let probes: Vec<u64> = (0..200_000).step_by(37).collect();
    assert_same(&mem, &disk, parts, &probes);
}

/// [`SpillPolicy::KeepNewest`] keeps a run per RAM layer: it evicts the
/// oldest run when a new layer needs room, and a merged one would take the
/// room of many layers with it.
#[test]
fn keep_newest_evicts_one_layer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let parts = Partitioner::new(1);
    let forward: Vec<Vec<u64>> = (0..6u64).map(|l| (0..100).map(|i| i * 6 + l).collect()).collect();
    let layers = [forward, vec![vec![]]];
    // room for about four layers of the six (their records stay charged)
    let budget = 4 * (100 * 8 + RUN_RECORD);
    let disk = DiskStore::<u64>::create(dir.path(), 1, opts(budget, SpillPolicy::KeepNewest)).unwrap();
    let mem = MemStore::<u64>::new(1);
    fill(&mem, &layers, parts);
    fill(&disk, &layers, parts);
    let mut files: Vec<String> = fs::read_dir(dir.path().join("f").join("p0"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // the oldest layers, each in a file of its own; the newest in RAM
    files.sort();
    assert!(files.len() >= 2 && files.len() < 6, "{files:?}");
    assert_eq!(files, (0..files.len()).map(|l| format!("L{l}.shard")).collect::<Vec<_>>());
    assert!(disk.bytes().memory <= budget);
    let probes: Vec<u64> = (0..700).collect();
    assert_same(&mem, &disk, parts, &probes);
}

/// A durable store (a cluster worker's checkpoint) merges the RAM copies of
/// its sealed layers too, and the files of every layer stay as written: the
/// store answers as the in-memory one before and after a reopen, which reads
/// them back layer by layer. Large layers (files of their own) and small
/// ones (the layers' packs) both.
#[test]
fn a_durable_store_merges_its_ram_copies_and_reopens_from_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let parts = Partitioner::new(2);
    let mut layers = [deep_side(3), deep_side(4)];
    // every tenth forward layer large enough for a file of its own
    for (l, layer) in layers[0].iter_mut().enumerate().filter(|(l, _)| l % 10 == 5) {
        layer.extend((0..20_000u64).map(|i| 1_000_000 + l as u64 * 100_000 + i));
    }
    let opts = DiskOptions { durable: true, memory_bytes: 1 << 30, ..DiskOptions::default() };
    let store = DiskStore::<u64>::create(dir.path(), 2, opts).unwrap();
    let mem = MemStore::<u64>::new(2);
    fill(&mem, &layers, parts);
    fill(&store, &layers, parts);
    for p in 0..2 {
        for s in 0..2 {
            let g = store.part(p);
            assert!(g.runs[s].len() <= 10, "{} runs", g.runs[s].len());
        }
    }
    assert!(shard_path(dir.path(), Side::Forward, 5, 0).exists());
    let probes: Vec<u64> = (0..200_000).step_by(37).chain((1_000_000..7_000_000).step_by(997)).collect();
    assert_same(&mem, &store, parts, &probes);
    drop(store);
    let store =
        DiskStore::<u64>::open(dir.path(), DiskOptions { memory_bytes: 0, ..DiskOptions::default() }, None).unwrap();
    assert_same(&mem, &store, parts, &probes);
}
