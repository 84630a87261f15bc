//! The one integration-test binary: the CLI end to end, the rules as properties,
//! the engine against a plain forward BFS, and solving under a memory budget.
mod cli;
mod common;
mod engine;
mod kpg;
mod rules;
mod storage;
