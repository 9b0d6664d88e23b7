//! The driver's `wire.rs`, compiled for the host so its formats are tested with `cargo test`
//! and fuzzed with `cargo fuzz` (`fuzz/`).

#[path = "../../../wire.rs"]
pub mod wire;

pub mod check;
