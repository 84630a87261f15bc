//! The model and rules room: level parsing, board analysis, state keys, push/pull
//! generation and solution replay. Pure code: no I/O beyond reading a string, no async.
pub mod bitgrid;
pub mod board;
pub mod bounds;
pub mod key;
pub mod level;
pub mod pairs;
pub mod rules;
pub mod solution;
pub mod triples;

#[cfg(test)]
mod tests {
    use super::board::Board;

    /// Level `index` (1-based) of the collection `file` shipped in `levels/`,
    /// for the model's tests.
    pub(crate) fn shipped(file: &str, index: usize) -> Board {
        let text = std::fs::read_to_string(format!("{}/levels/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let level = super::level::split_collection(&text, file)[index - 1].parse().unwrap();
        Board::new(&level).unwrap()
    }

    /// A fixed stream of pseudo-random numbers (xorshift), for the model's
    /// tests: each call a number below its argument.
    pub(crate) fn below() -> impl FnMut(usize) -> usize {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        move |n| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        }
    }
}
