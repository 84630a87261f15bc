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
pub mod xorshift;

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
        let mut rng = super::xorshift::XorShift::new(0);
        move |n| rng.below(n)
    }
}
