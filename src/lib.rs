//! sokoshard: a push-optimal Sokoban solver.
pub mod model;
pub mod storage;
