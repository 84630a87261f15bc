//! The one integration-test binary: the CLI end to end, the rules as properties,
//! the engine against an independent plain forward BFS, solving under a memory budget, the
//! cluster as separate processes, and the deployment files.
mod architecture;
mod bound;
mod browser;
mod cli;
mod cluster;
mod common;
mod deploy;
mod engine;
mod kpg;
mod moves;
mod probe;
mod reference;
mod rules;
mod storage;
mod wire;
