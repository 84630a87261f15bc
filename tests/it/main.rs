//! The one integration-test binary: the CLI end to end, the rules as properties,
//! the engine against a plain forward BFS, and the deployment files.
mod cli;
mod common;
mod deploy;
mod engine;
mod kpg;
mod rules;
