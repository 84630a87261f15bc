//! The one integration-test binary: the CLI end to end, the rules as properties,
//! and the engine against a plain forward BFS.
mod cli;
mod common;
mod engine;
mod kpg;
mod rules;
