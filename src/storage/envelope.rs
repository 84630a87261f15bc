//! The shared envelope of sokoshard's whole-file records (the moves pass's
//! tape files, durable layer packs, `.kdb` databases, the cluster's job
//! records and checkpoints): `magic (8) |
//! version u32 | body length u64 | xxh3-64 of the body u64 | body`, all
//! little-endian. [`open`] checks each part in that order and says which one
//! failed, so a torn, foreign or corrupted file is reported, never half-read.
//! The shard and manifest formats predate it and keep their own layouts
//! (magic, version and checksum all the same).

use xxhash_rust::xxh3::xxh3_64;

/// Bytes before the body.
pub const HEADER: usize = 28;

/// What is wrong with an envelope; the caller adds the file's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("truncated: {found} bytes, fewer than the {HEADER}-byte header")]
    Truncated { found: usize },
    #[error("bad magic bytes: not a sokoshard {what}")]
    BadMagic { what: &'static str },
    #[error("format version {found} is not supported (this build reads version {expected})")]
    Version { found: u32, expected: u32 },
    #[error("the body is {found} bytes where the header says {stated}")]
    Length { found: u64, stated: u64 },
    #[error("checksum mismatch: stored {stored:#018x}, the body hashes to {computed:#018x}")]
    Checksum { stored: u64, computed: u64 },
}

/// The kind of file an envelope holds: its magic bytes, its version and
/// what to call it in an error.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub magic: [u8; 8],
    pub version: u32,
    pub what: &'static str,
}

/// The header of `body` in an envelope of `kind`.
pub fn header(kind: &Kind, body: &[u8]) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&kind.magic);
    h[8..12].copy_from_slice(&kind.version.to_le_bytes());
    h[12..20].copy_from_slice(&(body.len() as u64).to_le_bytes());
    h[20..28].copy_from_slice(&xxh3_64(body).to_le_bytes());
    h
}

/// `body` in an envelope of `kind`.
pub fn seal(kind: &Kind, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&header(kind, body));
    out.extend_from_slice(body);
    out
}

/// The body of an envelope of `kind`, once its magic, version, length and
/// checksum are right.
pub fn open<'a>(kind: &Kind, bytes: &'a [u8]) -> Result<&'a [u8], EnvelopeError> {
    if bytes.len() < HEADER {
        // a file cut inside its magic still reads as truncated, not foreign
        if bytes.len() >= 8 && bytes[..8] != kind.magic {
            return Err(EnvelopeError::BadMagic { what: kind.what });
        }
        return Err(EnvelopeError::Truncated { found: bytes.len() });
    }
    if bytes[..8] != kind.magic {
        return Err(EnvelopeError::BadMagic { what: kind.what });
    }
    let le64 = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != kind.version {
        return Err(EnvelopeError::Version { found: version, expected: kind.version });
    }
    let (stated, stored) = (le64(12), le64(20));
    let body = &bytes[HEADER..];
    if body.len() as u64 != stated {
        return Err(EnvelopeError::Length { found: body.len() as u64, stated });
    }
    let computed = xxh3_64(body);
    if computed != stored {
        return Err(EnvelopeError::Checksum { stored, computed });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: Kind = Kind { magic: *b"SKTEST\0\0", version: 3, what: "test file" };

    #[test]
    fn a_sealed_body_opens_as_it_was() {
        for body in [&b""[..], b"x", &[7u8; 1000]] {
            assert_eq!(open(&KIND, &seal(&KIND, body)).unwrap(), body);
        }
    }

    #[test]
    fn each_kind_of_corruption_is_named() {
        let good = seal(&KIND, b"the body of the file");
        // cut short: inside the header, and inside the body
        assert_eq!(open(&KIND, &good[..5]), Err(EnvelopeError::Truncated { found: 5 }));
        assert!(matches!(open(&KIND, &good[..HEADER + 3]), Err(EnvelopeError::Length { found: 3, stated: 20 })));
        // another kind of file
        let other = Kind { magic: *b"SKOTHER\0", ..KIND };
        assert_eq!(open(&other, &good), Err(EnvelopeError::BadMagic { what: "test file" }));
        assert_eq!(open(&KIND, b"PK\x03\x04 a zip file, not ours"), Err(EnvelopeError::BadMagic { what: "test file" }));
        // a newer version
        let newer = Kind { version: 4, ..KIND };
        assert_eq!(open(&newer, &good), Err(EnvelopeError::Version { found: 3, expected: 4 }));
        // bytes appended
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(open(&KIND, &long), Err(EnvelopeError::Length { found: 21, stated: 20 })));
        // any flipped bit of the body, or of the stored checksum
        for at in [HEADER, HEADER + 10, good.len() - 1, 20, 27] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert!(matches!(open(&KIND, &bad), Err(EnvelopeError::Checksum { .. })), "flip at {at}");
        }
    }
}
