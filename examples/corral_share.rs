//! A measurement, not part of the solver: the share of pushes the PI-corral
//! restriction drops on a sample of each level's forward states
//! (`model::rules::CorralShare`, the sample `solve` decides by), and the
//! levels of a collection it is turned off on.
//!
//! ```text
//! cargo run --release --example corral_share -- LEVELS.xsb
//! ```

use sokoshard::model::board::Board;
use sokoshard::model::level::split_collection;
use sokoshard::model::rules::CorralShare;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 2 {
        eprintln!("usage: corral_share LEVELS.xsb");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("a readable level file");
    let started = std::time::Instant::now();
    let mut off = Vec::new();
    for level in split_collection(&text, &args[1]) {
        let Ok(parsed) = level.parse() else { continue };
        let Ok(board) = Board::new(&parsed) else { continue };
        let s = CorralShare::sample(&board);
        println!("level {}: {} states sampled, {:.4} of their pushes dropped", level.index, s.states, s.dropped());
        if !s.pays() {
            off.push(level.index);
        }
    }
    println!("turned off: {off:?}; {:.1} ms in all", started.elapsed().as_secs_f64() * 1e3);
}
