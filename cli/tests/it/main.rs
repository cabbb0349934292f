//! The `kvsim` command's integration tests: they run the binary (exit codes, files, output) and
//! snapshot what it prints; a module per area. The library's own integration tests are in
//! `sim/tests/it`.

#[path = "../../../sim/tests/it/common.rs"]
mod common;
pub use common::*;

mod audit;
mod bad_input;
mod confirm;
mod deploy;
mod explore;
mod fuzz;
mod hostile;
mod oracle;
mod reach;
mod scenario_format;
mod snapshots;
mod trace;
mod workload_trace;
