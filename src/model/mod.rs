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
