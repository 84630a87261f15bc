//! Fuzz target: a key batch as a peer sends it (count, bytes). Decoding
//! returns an error or strictly increasing keys that encode back the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sokoshard::cluster::codec::{decode_batch, encode_batch, keys_from_bytes};
use sokoshard::model::key::StateKey;

/// Decodes `body` as a batch of `count` keys of type `K`, and as plain key bytes.
fn check<K: StateKey>(count: u32, body: &[u8]) {
    if let Ok(mut keys) = decode_batch::<K>(count, body) {
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let back = keys.clone();
        let (n, bytes) = encode_batch(&mut keys);
        assert!(decode_batch::<K>(n, &bytes).expect("re-encoded") == back);
    }
    let _ = keys_from_bytes::<K>(body);
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let count = u32::from_le_bytes([data[1], data[2], data[3], data[4]]) % 4096;
    if data[0] & 1 == 1 {
        check::<u128>(count, &data[5..]);
    } else {
        check::<u64>(count, &data[5..]);
    }
});
