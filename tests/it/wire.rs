//! The wire protocol as an outside client sees it: the types and stubs generated
//! from `proto/sokoshard.proto` by the build script, compiled here again so that
//! the tests speak the protocol without the library exposing its prost types.
#![allow(clippy::all, dead_code)]

tonic::include_proto!("sokoshard.v1");
