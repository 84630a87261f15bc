//! sokoshard: a push-optimal Sokoban solver. Rooms: `model` (pure rules), `engine`
//! (partitioned BFS on rayon), `storage` (in-memory and on-disk layer sets), `solve`
//! (local mode), and the CLI in the binary.
pub mod cluster;
pub mod engine;
pub mod model;
pub mod page;
pub mod solve;
pub mod storage;
pub mod sys;
