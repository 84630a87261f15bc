//! Fuzz target: a deadlock database whose envelope is right but whose body
//! is anything (a file written by another program, or crafted). Decoding and
//! binding it to its level return errors, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sokoshard::model::board::Board;
use sokoshard::model::level::parse_one;
use sokoshard::storage::envelope::seal;
use sokoshard::storage::kdb::{bind, decode, KDB};
use std::path::Path;
use std::sync::Arc;

const LEVEL: &str = "####\n# .#\n#  ###\n#*@  #\n#  $ #\n#  ###\n####\n";

fuzz_target!(|data: &[u8]| {
    let level = parse_one(LEVEL, "fuzz").expect("the fixed level parses");
    let board = Arc::new(Board::new(&level).expect("the fixed level is a board"));
    let mut body = Vec::new();
    // the right level most of the time, so that binding runs too
    if data.first().is_some_and(|b| b & 1 == 0) {
        body.extend_from_slice(&board.fingerprint().to_le_bytes());
        body.extend_from_slice(&(board.floor_count() as u32).to_le_bytes());
        body.extend_from_slice(&data[1..]);
    } else {
        body.extend_from_slice(data);
    }
    let body = seal(&KDB, &body);
    let path = Path::new("fuzz.kdb");
    if let Ok(file) = decode(path, &body) {
        let _ = bind(path, file, board);
    }
});
