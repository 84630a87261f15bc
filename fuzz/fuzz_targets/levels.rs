//! Fuzz target: any text as a level collection. Splitting, parsing, the
//! board analysis and a replay of the text's last line as a solution must
//! return errors, never panic; a parsed level written back reads the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sokoshard::model::board::Board;
use sokoshard::model::level::{parse_one, split_collection};
use sokoshard::model::solution::verify;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lurd = text.lines().last().unwrap_or("");
    for block in split_collection(&text, "fuzz") {
        let Ok(level) = block.parse() else { continue };
        let again = parse_one(&level.to_xsb(), "again").expect("a parsed level written back parses");
        assert_eq!((&again.walls, &again.goals, &again.boxes, again.player), (&level.walls, &level.goals, &level.boxes, level.player));
        let _ = Board::new(&level);
        let _ = verify(&level, lurd);
    }
});
