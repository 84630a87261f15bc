//! The k-PG deadlock database file (`.kdb`): the tables of one level, saved so
//! they are built once and reused. A collection's databases are a directory of
//! them, each named by its level's fingerprint ([`level_file`]).
//!
//! The file is the shared [envelope](super::envelope) (magic `SKKPGDB\0`,
//! format version, body length and checksum) around this body
//! (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | level fingerprint ([`Board::fingerprint`]) |
//! | 4 | floor squares |
//! | 4 | number of k tables |
//! | 4 + n | level text (XSB, for `deadlocks show`) |
//! | ... | per k: `k`, then forward and backward sets: entry count, then per entry `k` squares (u16), a tag (0 any player, 1 player list) and for a list its length (u16) and squares |
//! | 1 + ... | pair penalties of the bounded search (version 2): tag 0 none, 1 kept; then `floor²` forward and `floor²` backward bytes, and per side the per-region entries (count, 8 bytes each) and the pairs that use one (count, then pair index and entry as u32) |
//!
//! The envelope is verified before anything is parsed (a file cut short says
//! so by its length), every count is bounded by the bytes left, and a file is
//! read only once its magic bytes are right and only up to the length its
//! header states, so a corrupt or foreign file is refused, never half-used,
//! and a device such as `/dev/zero` is not read without end.

use super::envelope::{self, EnvelopeError, Kind, HEADER};
use crate::engine::kpg::{unpack, DeadPlayers, DeadlockTables, KTable, Packed, PatternSet, MAX_K};
use crate::model::board::Board;
use crate::model::pairs::{PairParts, PairPenalties, MAX_REGIONS};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// 2: the pair penalties of the bounded search follow the k tables. 3: the
/// shared envelope (a length in the header, the checksum beside it).
pub const KDB_VERSION: u32 = 3;

/// The envelope of a database file.
pub const KDB: Kind = Kind { magic: *b"SKKPGDB\0", version: KDB_VERSION, what: "sokoshard deadlock database" };

/// The largest database read: 16 GiB, far past the tables of any level
/// (each k's are bounded by the work limit of the build).
pub const MAX_KDB_BYTES: u64 = 16 << 30;

/// Deadlock database failures, each naming the file.
#[derive(Debug, thiserror::Error)]
pub enum KdbError {
    #[error("{op} {}: {source}", path.display())]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error("{}: not a sokoshard deadlock database (bad magic bytes)", path.display())]
    BadMagic { path: PathBuf },
    #[error("{}: deadlock database format version {found} is not supported (this build reads version {expected}); build it again with `sokoshard deadlocks build`", path.display())]
    UnsupportedVersion { path: PathBuf, found: u32, expected: u32 },
    #[error("{}: deadlock database cut short: {len} bytes{}", path.display(), stated.map_or(String::new(), |s| format!(" where its header says {s}")))]
    Truncated { path: PathBuf, len: u64, stated: Option<u64> },
    #[error("{}: checksum mismatch: stored {stored:#018x}, contents hash to {computed:#018x}; the file is corrupt", path.display())]
    ChecksumMismatch { path: PathBuf, stored: u64, computed: u64 },
    #[error("{}: corrupt deadlock database: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("{}: this deadlock database was built for another level ({why})", path.display())]
    WrongLevel { path: PathBuf, why: String },
}

/// A database as read from disk, before it is matched to a board.
#[derive(Clone)]
pub struct KdbFile {
    pub fingerprint: u64,
    pub floor: usize,
    pub level_text: String,
    pub tables: Vec<KTable>,
    pub pairs: Option<PairParts>,
}

/// Serializes tables with the level text they belong to.
pub fn encode(tables: &DeadlockTables, level_text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&tables.board.fingerprint().to_le_bytes());
    out.extend_from_slice(&(tables.board.floor_count() as u32).to_le_bytes());
    out.extend_from_slice(&(tables.tables.len() as u32).to_le_bytes());
    out.extend_from_slice(&(level_text.len() as u32).to_le_bytes());
    out.extend_from_slice(level_text.as_bytes());
    for t in &tables.tables {
        encode_table(&mut out, t);
    }
    match &tables.pairs {
        None => out.push(0),
        Some(p) => {
            out.push(1);
            let parts = p.parts();
            out.extend_from_slice(&parts.forward);
            out.extend_from_slice(&parts.backward);
            for side in 0..2 {
                out.extend_from_slice(&(parts.regional[side].len() as u32).to_le_bytes());
                for r in &parts.regional[side] {
                    out.extend_from_slice(r);
                }
                let used: Vec<(usize, u32)> =
                    parts.regional_at[side].iter().copied().enumerate().filter(|e| e.1 != 0).collect();
                out.extend_from_slice(&(used.len() as u32).to_le_bytes());
                for (pair, i) in used {
                    out.extend_from_slice(&(pair as u32).to_le_bytes());
                    out.extend_from_slice(&i.to_le_bytes());
                }
            }
        }
    }
    envelope::seal(&KDB, &out)
}

/// One k's section of the file: `k`, then the forward and the backward set.
fn encode_table(out: &mut Vec<u8>, t: &KTable) {
    out.extend_from_slice(&(t.k as u32).to_le_bytes());
    for set in [&t.forward, &t.backward] {
        // sorted for a deterministic file
        let mut entries: Vec<(&Packed, &DeadPlayers)> = set.map.iter().collect();
        entries.sort_unstable_by_key(|e| *e.0);
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (packed, dead) in entries {
            for s in unpack(*packed, t.k) {
                out.extend_from_slice(&s.to_le_bytes());
            }
            match dead {
                DeadPlayers::Any => out.push(0),
                DeadPlayers::Squares(v) => {
                    out.push(1);
                    out.extend_from_slice(&(v.len() as u16).to_le_bytes());
                    for p in v {
                        out.extend_from_slice(&p.to_le_bytes());
                    }
                }
            }
        }
    }
}

/// Bytes one k's table takes in the file (the build report gives it per k).
pub fn table_bytes(t: &KTable) -> u64 {
    let mut out = Vec::new();
    encode_table(&mut out, t);
    out.len() as u64
}

/// Writes a database atomically (temporary name, then rename).
pub fn save(path: &Path, tables: &DeadlockTables, level_text: &str) -> Result<u64, KdbError> {
    let bytes = encode(tables, level_text);
    super::files::write_whole(path, &bytes).map_err(|source| KdbError::Io {
        path: path.to_path_buf(),
        op: "writing",
        source,
    })?;
    Ok(bytes.len() as u64)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], KdbError> {
        if self.buf.len() - self.pos < n {
            return Err(KdbError::Corrupt {
                path: self.path.to_path_buf(),
                reason: format!("record runs past the end at byte {}", self.pos),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, KdbError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, KdbError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, KdbError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, KdbError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

/// The database error for an envelope that does not open.
fn envelope_error(path: &Path, e: EnvelopeError) -> KdbError {
    let path = path.to_path_buf();
    match e {
        EnvelopeError::BadMagic { .. } => KdbError::BadMagic { path },
        EnvelopeError::Version { found, expected } => KdbError::UnsupportedVersion { path, found, expected },
        EnvelopeError::Truncated { found } => KdbError::Truncated { path, len: found as u64, stated: None },
        EnvelopeError::Length { found, stated } if found < stated => {
            KdbError::Truncated { path, len: found + HEADER as u64, stated: Some(stated + HEADER as u64) }
        }
        EnvelopeError::Length { found, stated } => KdbError::Corrupt {
            path,
            reason: format!("{} bytes where its header says {}", found + HEADER as u64, stated + HEADER as u64),
        },
        EnvelopeError::Checksum { stored, computed } => KdbError::ChecksumMismatch { path, stored, computed },
    }
}

/// Parses and validates a database from bytes.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<KdbFile, KdbError> {
    let corrupt = |reason: String| KdbError::Corrupt { path: path.to_path_buf(), reason };
    // a few bytes that do not begin the magic are another file, not a cut one
    if !KDB.magic.starts_with(&bytes[..bytes.len().min(8)]) {
        return Err(KdbError::BadMagic { path: path.to_path_buf() });
    }
    let body = envelope::open(&KDB, bytes).map_err(|e| envelope_error(path, e))?;
    let mut r = Reader { buf: body, pos: 0, path };
    let fingerprint = r.u64()?;
    let floor = r.u32()? as usize;
    let nk = r.u32()? as usize;
    if nk > MAX_K {
        return Err(corrupt(format!("{nk} tables, at most {MAX_K} are possible")));
    }
    let text_len = r.u32()? as usize;
    let level_text =
        String::from_utf8(r.take(text_len)?.to_vec()).map_err(|_| corrupt("level text is not UTF-8".into()))?;
    let mut tables = Vec::new();
    for i in 0..nk {
        let k = r.u32()? as usize;
        if k != i + 1 {
            return Err(corrupt(format!("table {} has k = {k}", i + 1)));
        }
        let mut sets = Vec::new();
        for _ in 0..2 {
            let n = r.u32()? as usize;
            if floor > crate::model::key::MAX_FLOOR_SQUARES {
                return Err(corrupt(format!("{floor} floor squares is over the limit")));
            }
            let mut set = PatternSet::new(floor);
            for _ in 0..n {
                let mut boxes = Vec::with_capacity(k);
                for _ in 0..k {
                    let s = r.u16()?;
                    if s as usize >= floor {
                        return Err(corrupt(format!("square {s} outside the {floor} floor squares")));
                    }
                    boxes.push(s);
                }
                if boxes.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(corrupt("pattern squares are not sorted".into()));
                }
                let dead = match r.u8()? {
                    0 => DeadPlayers::Any,
                    1 => {
                        let m = r.u16()? as usize;
                        let mut v = Vec::with_capacity(m.min(floor));
                        for _ in 0..m {
                            v.push(r.u16()?);
                        }
                        DeadPlayers::Squares(v)
                    }
                    t => return Err(corrupt(format!("unknown player tag {t}"))),
                };
                set.insert(&boxes, dead);
            }
            sets.push(set);
        }
        let backward = sets.pop().expect("two sets");
        let forward = sets.pop().expect("two sets");
        tables.push(KTable { k, forward, backward });
    }
    let pairs = match r.u8()? {
        0 => None,
        1 => Some(read_pairs(&mut r, floor)?),
        t => return Err(corrupt(format!("unknown pair-table tag {t}"))),
    };
    if r.pos != body.len() {
        return Err(corrupt(format!("{} trailing bytes", body.len() - r.pos)));
    }
    Ok(KdbFile { fingerprint, floor, level_text, tables, pairs })
}

/// The pair-penalty section, its sizes checked against the floor.
fn read_pairs(r: &mut Reader<'_>, floor: usize) -> Result<PairParts, KdbError> {
    let corrupt = |reason: String| KdbError::Corrupt { path: r.path.to_path_buf(), reason };
    if floor > crate::model::pairs::MAX_FLOOR {
        return Err(corrupt(format!("pair tables for {floor} floor squares, over the limit")));
    }
    let forward = r.take(floor * floor)?.to_vec();
    let backward = r.take(floor * floor)?.to_vec();
    let pairs = floor * floor.saturating_sub(1) / 2;
    let mut regional = [Vec::new(), Vec::new()];
    let mut regional_at = [vec![0u32; pairs], vec![0u32; pairs]];
    for side in 0..2 {
        let n = r.u32()? as usize;
        if n > pairs {
            return Err(corrupt(format!("{n} per-region pair entries for {pairs} pairs")));
        }
        for _ in 0..n {
            let mut e = [0u8; MAX_REGIONS];
            e.copy_from_slice(r.take(MAX_REGIONS)?);
            regional[side].push(e);
        }
        let used = r.u32()? as usize;
        if used > pairs {
            return Err(corrupt(format!("{used} pairs with per-region entries, the board has {pairs}")));
        }
        for _ in 0..used {
            let (pair, i) = (r.u32()? as usize, r.u32()?);
            if pair >= pairs || i == 0 || i as usize > n {
                return Err(corrupt(format!("per-region entry {i} of pair {pair} is out of range")));
            }
            regional_at[side][pair] = i;
        }
    }
    Ok(PairParts { forward, backward, regional, regional_at })
}

/// Whether a database read from `path` holds the tables of `board`'s level:
/// [`KdbError::WrongLevel`], saying how they differ (and the title kept in
/// the file, if any), if not.
pub fn check_level(path: &Path, file: &KdbFile, board: &Board) -> Result<(), KdbError> {
    let expected = board.fingerprint();
    let why = if file.floor != board.floor_count() {
        Some(format!("its level has {} floor squares, this one {}", file.floor, board.floor_count()))
    } else if file.fingerprint != expected {
        Some(format!(
            "its walls, goals, boxes or player differ: fingerprint {:#018x}, this level's {expected:#018x}",
            file.fingerprint
        ))
    } else {
        None
    };
    if let Some(why) = why {
        let title = file.level_text.lines().find_map(|l| l.strip_prefix("Title: "));
        let why = match title {
            Some(t) => format!("\"{t}\": {why}"),
            None => why,
        };
        return Err(KdbError::WrongLevel { path: path.to_path_buf(), why });
    }
    Ok(())
}

/// Binds a database read from `path` to `board`: refuses one built for
/// another level, derives the tables' index and restores the pair penalties.
pub fn bind(path: &Path, file: KdbFile, board: Arc<Board>) -> Result<DeadlockTables, KdbError> {
    check_level(path, &file, &board)?;
    let pairs = match file.pairs {
        None => None,
        Some(parts) => Some(Arc::new(
            PairPenalties::from_parts(&board, parts)
                .map_err(|reason| KdbError::Corrupt { path: path.to_path_buf(), reason })?,
        )),
    };
    Ok(DeadlockTables::new(board, file.tables).with_pairs(pairs))
}

/// Reads a database file.
pub fn read(path: &Path) -> Result<KdbFile, KdbError> {
    let io = |source| KdbError::Io { path: path.to_path_buf(), op: "reading", source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    // the header first: a foreign file is refused after its first bytes, and
    // the rest is read only up to the length the header states
    let mut bytes = Vec::with_capacity(HEADER);
    (&mut file).take(HEADER as u64).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() < HEADER {
        return decode(path, &bytes);
    }
    if bytes[..8] != KDB.magic {
        return Err(KdbError::BadMagic { path: path.to_path_buf() });
    }
    // the version before the length: in a file of an earlier format these
    // bytes are no length at all
    let found = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if found != KDB_VERSION {
        return Err(KdbError::UnsupportedVersion { path: path.to_path_buf(), found, expected: KDB_VERSION });
    }
    let stated = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    if stated > MAX_KDB_BYTES {
        return Err(KdbError::Corrupt {
            path: path.to_path_buf(),
            reason: format!(
                "its header states {stated} bytes, over the {} GiB a database may take",
                MAX_KDB_BYTES >> 30
            ),
        });
    }
    // one byte past the stated length, to tell a longer file
    file.take(stated + 1).read_to_end(&mut bytes).map_err(io)?;
    decode(path, &bytes)
}

/// Where a directory of databases (`deadlocks build --all -o DIR`) keeps the
/// one of `board`'s level: a file named by the level's fingerprint, so that a
/// solve finds it without reading the others, whatever order or collection
/// the level comes in.
pub fn level_file(dir: &Path, board: &Board) -> PathBuf {
    dir.join(format!("{:016x}.kdb", board.fingerprint()))
}

/// Reads a database and binds it to `board`, refusing one built for another level.
pub fn load_for(path: &Path, board: Arc<Board>) -> Result<DeadlockTables, KdbError> {
    bind(path, read(path)?, board)
}

/// A database error crosses the engine's seams boxed, like every storage error.
impl From<KdbError> for crate::engine::EngineError {
    fn from(e: KdbError) -> Self {
        crate::engine::EngineError::seam(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::search::NoProgress;
    use crate::model::level::parse_one;
    use crate::solve::build_tables;
    use std::sync::atomic::AtomicBool;

    const LEVEL: &str = "#######\n#.  $ #\n# $@  #\n#.    #\n#######\n";
    const OTHER: &str = "#######\n#.  $ #\n# $ @ #\n#.    #\n#######\n";

    /// Tables with the pair penalties kept, so that every test covers both.
    fn tables(text: &str) -> DeadlockTables {
        let board = Arc::new(Board::new(&parse_one(text, "t").unwrap()).unwrap());
        let t = build_tables(board, 2, 4, &AtomicBool::new(false), &NoProgress).unwrap().0.with_level_pairs();
        assert!(t.pairs.is_some(), "the test level has pair penalties");
        t
    }

    fn board(text: &str) -> Arc<Board> {
        Arc::new(Board::new(&parse_one(text, "t").unwrap()).unwrap())
    }

    #[test]
    fn roundtrip() {
        let t = tables(LEVEL);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.kdb");
        save(&p, &t, LEVEL).unwrap();
        let back = load_for(&p, board(LEVEL)).unwrap();
        assert_eq!(back.tables, t.tables);
        assert_eq!(back.pairs.as_ref().unwrap().parts(), t.pairs.as_ref().unwrap().parts());
        // and without pair penalties
        let none = t.clone().with_pairs(None);
        save(&p, &none, LEVEL).unwrap();
        assert!(load_for(&p, board(LEVEL)).unwrap().pairs.is_none());
        assert_eq!(read(&p).unwrap().level_text, LEVEL);
    }

    #[test]
    fn a_file_of_the_format_before_the_envelope_is_read_as_an_older_version() {
        // its bytes 12..20 are the level fingerprint, which `read` once took
        // for the body's length and refused as over the size limit
        let t = tables(LEVEL);
        let mut old = Vec::new();
        old.extend_from_slice(&KDB.magic);
        old.extend_from_slice(&2u32.to_le_bytes());
        old.extend_from_slice(&u64::MAX.to_le_bytes());
        old.extend_from_slice(&encode(&t, LEVEL)[HEADER + 8..]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v2.kdb");
        std::fs::write(&p, &old).unwrap();
        let e = read(&p).err().unwrap();
        assert!(matches!(e, KdbError::UnsupportedVersion { found: 2, .. }), "{e}");
        assert!(e.to_string().contains("build it again"), "{e}");
    }

    #[test]
    fn every_kind_of_corruption_is_refused() {
        let t = tables(LEVEL);
        let good = encode(&t, LEVEL);
        let p = Path::new("x.kdb");
        // bad magic
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(decode(p, &b), Err(KdbError::BadMagic { .. })));
        // unsupported version
        let mut b = good.clone();
        b[8] = 99;
        assert!(matches!(decode(p, &b), Err(KdbError::UnsupportedVersion { found: 99, .. })));
        // a version 1 file (before the pair penalties) is refused, saying what to do
        let mut b = good.clone();
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let e = decode(p, &b).err().unwrap();
        assert!(
            e.to_string().contains("version 1 is not supported") && e.to_string().contains("deadlocks build"),
            "{e}"
        );
        // truncated at every length: always an error, never a panic
        for cut in 0..good.len() {
            assert!(decode(p, &good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(matches!(decode(p, &good[..4]), Err(KdbError::Truncated { .. })));
        // cut inside the body: said to be cut short, with both lengths
        let e = decode(p, &good[..good.len() - 3]).err().unwrap();
        assert!(matches!(e, KdbError::Truncated { .. }), "{e}");
        assert!(
            e.to_string().contains(&format!("{} bytes where its header says {}", good.len() - 3, good.len())),
            "{e}"
        );
        // a version 2 file (before the envelope) is refused, saying what to do
        let mut b = good.clone();
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(decode(p, &b).err().unwrap().to_string().contains("version 2 is not supported"));
        // a few bytes of another file are not a cut database
        assert!(matches!(decode(p, b"abc"), Err(KdbError::BadMagic { .. })));
        // any flipped byte past the version is caught by the checksum
        for i in 12..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x40;
            assert!(decode(p, &b).is_err(), "flip at {i}");
        }
        let mut b = good.clone();
        let mid = good.len() / 2;
        b[mid] ^= 1;
        assert!(matches!(decode(p, &b), Err(KdbError::ChecksumMismatch { .. })));
        // a pair section cut short, under a checksum that matches: corrupt, by
        // the section's own sizes
        let b = envelope::seal(&KDB, &good[HEADER..good.len() - 5]);
        assert!(matches!(decode(p, &b), Err(KdbError::Corrupt { .. })), "{:?}", decode(p, &b).err());
        // pair tables whose two orders of a pair differ (which only a file
        // made by hand could hold under a good checksum) are refused
        let mut parts = t.pairs.as_ref().unwrap().parts();
        let floor = board(LEVEL).floor_count();
        parts.forward[1] = parts.forward[floor] ^ 1;
        let e = PairPenalties::from_parts(&board(LEVEL), parts).err().unwrap();
        assert!(e.contains("forward pair table differs between squares 0, 1"), "{e}");
        // a database for another level is refused
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.kdb");
        save(&f, &t, LEVEL).unwrap();
        assert!(matches!(load_for(&f, board(OTHER)), Err(KdbError::WrongLevel { .. })));
        // a missing file names the path
        let e = load_for(&dir.path().join("missing.kdb"), board(LEVEL)).err().unwrap();
        assert!(e.to_string().contains("missing.kdb"));
    }
}
