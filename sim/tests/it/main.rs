//! The library's integration tests: the model run through its public API, no binary; a module per
//! area. Tests that run the `kvsim` command are in `cli/tests/it`.

mod common;
pub use common::*;

mod catalogue_knobs;
mod confirm_props;
mod conformance;
mod content_channel;
mod decode_latency;
mod determinism;
mod event_limit;
mod fuzz_corpus;
mod incident;
mod invariants;
mod lifecycle;
mod liveness;
mod pool_model;
mod pp_stages;
mod self_contained;
mod shrink;
