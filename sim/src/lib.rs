//! kvsim: a deterministic discrete-event model of disaggregated (prefill/decode) LLM serving,
//! with an oracle that knows who wrote every KV slot and flags reads that cross tenants.
//!
//! The library is pure: no wall clock, no threads, no file I/O. The `kvsim` binary does the I/O
//! around it. See ARCHITECTURE.md for the code map and invariants.

pub mod audit;
pub mod campaign;
pub mod check;
pub mod client;
pub mod config;
pub mod confirm;
pub mod coverage;
pub mod decode;
pub mod event;
pub mod expect;
pub mod explore;
pub mod extent;
pub mod faults;
pub mod fuzz;
pub mod fuzz_targets;
pub mod intake;
pub mod latency;
pub mod lifecycle;
pub mod metadata;
pub mod picture;
pub mod pool;
pub mod pp;
pub mod prefill;
pub mod prefix;
pub mod reach;
pub mod report;
pub mod reqs;
pub mod rng;
pub mod router;
pub mod scenario;
pub mod scenario_doc;
pub mod shrink;
pub mod trace;
pub mod tracefile;
pub mod transfer;
pub mod triage;
pub mod types;
pub mod workload_trace;
pub mod world;
pub mod xml;

use config::SimConfig;
use trace::{TraceSink, Tracer};
use world::World;

/// Runs a configuration to the end and returns the finished world.
pub fn simulate(cfg: SimConfig, sink: Option<Box<dyn TraceSink>>, check_invariants: bool) -> World {
    let mut w = World::new(cfg, Tracer::new(sink));
    w.check_invariants = check_invariants;
    w.run();
    w
}

/// Like `simulate`, with the differential check on: the reference oracle shadows every pool and
/// every read's verdict is compared with the fast oracle's (`w.reference`).
pub fn simulate_checked(cfg: SimConfig, sink: Option<Box<dyn TraceSink>>, check_invariants: bool) -> World {
    let mut w = World::new(cfg, Tracer::new(sink));
    w.check_invariants = check_invariants;
    w.enable_reference();
    w.run();
    w
}

/// Like `simulate`, keeping every trace record in memory (`w.tracer.collected`).
pub fn simulate_collect(cfg: SimConfig, check_invariants: bool) -> World {
    let mut w = World::new(cfg, Tracer::collecting(None));
    w.check_invariants = check_invariants;
    w.run();
    w
}

/// The crate's folder as the test run sees it. `cargo test` sets `CARGO_MANIFEST_DIR` at run time;
/// the compile-time value can be stale when one target folder serves two checkouts (CI's fresh-clone
/// stage reuses the build of the in-place stage when the sources are identical).
#[cfg(test)]
pub(crate) fn test_manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string())
}
