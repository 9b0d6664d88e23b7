//! The driver's `wire.rs`, compiled for the host so its formats are tested with `cargo test`.

#[path = "../../../wire.rs"]
pub mod wire;
