//! Compiles proto/sokoshard.proto into the cluster's gRPC types with tonic/prost,
//! using the protoc shipped by `protoc-bin-vendored` (no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // build scripts run single-threaded before the crate compiles
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/sokoshard.proto");
    tonic_prost_build::configure()
        // the coordinator's job log stores these as they are
        .type_attribute("sokoshard.v1.SolveResult", "#[derive(serde::Serialize, serde::Deserialize)]")
        .type_attribute("sokoshard.v1.JobOptions", "#[derive(serde::Serialize, serde::Deserialize)]")
        .compile_protos(&["proto/sokoshard.proto"], &["proto"])?;
    Ok(())
}
