//! The cluster room: the gRPC protocol (tonic/prost), the coordinator and the
//! workers. Prost types stay inside this module.
pub mod proto {
    tonic::include_proto!("sokoshard.v1");
}
