//! kvsim's integration tests: one binary, a module per area.

mod audit;
mod bad_input;
mod confirm;
mod confirm_props;
mod determinism;
mod explore;
mod fuzz;
mod fuzz_corpus;
mod hostile;
mod incident;
mod invariants;
mod oracle;
mod scenario_format;
mod self_contained;
mod snapshots;
mod trace;
mod workload_trace;

use kvsim::config::SimConfig;
use kvsim::scenario::{Overrides, Scenario};
use std::path::PathBuf;

/// File access for scenarios that name other files (trace workloads).
pub fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))
}

/// The crate's folder, read at run time: `cargo test` sets `CARGO_MANIFEST_DIR` for the test run,
/// and the compile-time value is stale when one target folder serves two checkouts (CI's fresh-clone
/// stage reuses the in-place build when the sources are identical).
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
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
