//! Helpers shared by the library's integration tests (`sim/tests/it`) and the command's
//! (`cli/tests/it`, which includes this file by path). Both crates sit one folder below the
//! repository root, so every path here is relative to the running crate's folder.
#![allow(dead_code)] // each test binary uses its own subset

use kvsim::config::SimConfig;
use kvsim::scenario::{Overrides, Scenario};
use std::path::PathBuf;

/// File access for scenarios that name other files (trace workloads).
pub fn read(path: &str) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// The crate's folder, read at run time: `cargo test` sets `CARGO_MANIFEST_DIR` for the test run,
/// and the compile-time value is stale when one target folder serves two checkouts (CI's fresh-clone
/// stage reuses the in-place build when the sources are identical).
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The library's test data (`sim/tests/data/`): fixtures its unit tests and these tests share.
pub fn sim_data() -> PathBuf {
    manifest_dir().join("../sim/tests/data")
}

/// The repository's `scenarios/` folder.
pub fn scenarios_dir() -> PathBuf {
    manifest_dir().join("../scenarios")
}

/// Loads and resolves a shipped scenario with optional profile and overrides.
pub fn load(rel: &str, profile: Option<&str>, set: &[(&str, &str)]) -> SimConfig {
    let path = scenarios_dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let sc = Scenario::parse(&path.to_string_lossy(), &text).unwrap_or_else(|e| panic!("{e}"));
    let o = Overrides {
        profile: profile.map(str::to_string),
        seed: None,
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    sc.resolve_with(&o, Some(&read)).unwrap_or_else(|e| panic!("{e}"))
}

/// Loads and resolves any scenario file by path.
pub fn load_path(path: &str) -> SimConfig {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Scenario::parse(path, &text)
        .and_then(|s| s.resolve_with(&Overrides::default(), Some(&read)))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every `.toml` under `scenarios/`, relative paths, sorted.
pub fn all_scenarios() -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![scenarios_dir()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p.strip_prefix(scenarios_dir()).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Runs `cfg` with invariants checked and returns every transfer job of request `r` as last seen,
/// by job id: a finished job leaves `World::jobs` (`transfer_retire`), so they are read while the
/// run goes.
pub fn run_with_jobs_of(
    cfg: SimConfig,
    r: kvsim::types::RequestId,
) -> (kvsim::world::World, Vec<kvsim::transfer::TransferJob>) {
    let mut w = kvsim::world::World::new(cfg, kvsim::trace::Tracer::new(None));
    w.check_invariants = true;
    let mut seen = std::collections::BTreeMap::new();
    while w.step() {
        for id in w.jobs.ids() {
            if let Some(j) = w.jobs.get(id).filter(|j| j.request() == r) {
                seen.insert(id, j.clone());
            }
        }
    }
    w.finish();
    (w, seen.into_values().collect())
}

/// The cost model of drawn campaign runs (`fuzz::fuzz_cost`) as a scenario's `[cost]` table: the
/// shrunk cases inlined in tests carry it. Appended to a scenario's text (a TOML table may follow
/// the arrays of tables).
pub const FUZZ_COST: &str = "
[cost]
prefill_base_us = 1000
prefill_ns_per_token = 20000
prefill_ns_per_token_per_kctx = 20
decode_step_base_us = 10000
decode_ns_per_kkv = 2000
kv_bytes_per_token = 70000
transfer_latency_us = 500
transfer_bytes_per_us = 25000
message_latency_us = 200
";
