//! Compiles proto/sokoshard.proto into the cluster's gRPC types with tonic/prost,
//! using the protoc shipped by `protoc-bin-vendored` (no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // build scripts run single-threaded before the crate compiles
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/sokoshard.proto");
    // plain prost types: they never leave src/cluster, and the job log keeps
    // the project's own types (cluster::coordinator::record)
    tonic_prost_build::configure().compile_protos(&["proto/sokoshard.proto"], &["proto"])?;
    Ok(())
}
