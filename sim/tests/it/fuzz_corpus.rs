//! The cargo-fuzz targets' committed inputs on stable: every file under `fuzz/corpus/<target>/`
//! and `fuzz/regressions/<target>/` goes through the same `kvsim::fuzz_targets` function the
//! libFuzzer target calls (bytes decoded with `arbitrary::Unstructured`, as libfuzzer-sys hands
//! them over). A panic fails the test and names the file.

use kvsim::fuzz_targets;
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// Every input file of a target (README files excluded), sorted, with its bytes.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(kind).join(target);
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_lowercase();
            if p.is_file() && !name.starts_with("readme") && !name.starts_with('.') {
                let bytes = std::fs::read(&p).unwrap();
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

fn each(target: &str, min_seeds: usize, f: impl Fn(&Path, &[u8])) {
    let all = inputs(target);
    assert!(all.len() >= min_seeds, "fuzz/corpus/{target}: {} inputs, expected at least {min_seeds}", all.len());
    for (p, bytes) in &all {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(p, bytes)));
        assert!(r.is_ok(), "{target}: {} panicked (see the message above)", p.display());
    }
}

#[test]
fn scenario_run_corpus_and_regressions() {
    each("scenario_run", 4, |_, b| fuzz_targets::scenario_run(b));
}

#[test]
fn cross_tenant_corpus_and_the_stub_leak_reproducer() {
    each("cross_tenant", 3, |_, b| {
        fuzz_targets::cross_tenant(b, fuzz_targets::DEFAULT_PROFILE);
    });
    let repro = std::fs::read(fuzz_dir().join("corpus/cross_tenant/stub-leak")).unwrap();
    assert!(fuzz_targets::cross_tenant(&repro, "sglang-0.5.16"), "the stub-leak reproducer no longer leaks");
    // The fixed profile answers the same scenario without a cross-tenant read.
    assert!(!fuzz_targets::cross_tenant(&repro, "sglang-0.5.22"));
    let cfg = fuzz_targets::cross_tenant_scenario_of(&repro, "sglang-0.5.16").unwrap();
    assert!(cfg
        .requests
        .iter()
        .any(|r| r.prompt_tokens > cfg.prefill[0].pool_tokens && r.prompt_tokens < cfg.context_len));
}

#[test]
fn parse_scenario_corpus_and_regressions() {
    each("parse_scenario", 5, |_, b| fuzz_targets::parse_scenario(b));
}

#[test]
fn parse_trace_corpus_and_regressions() {
    each("parse_trace", 5, |_, b| fuzz_targets::parse_trace(b));
}

/// The real trace in the corpus reads (the footer, every memory operation), its memory log is
/// valid and it lowers: the corpus exercises `confirm::lower`, not only the error paths.
#[test]
fn the_real_trace_in_the_parse_trace_corpus_reads_and_lowers() {
    let text = std::fs::read_to_string(fuzz_dir().join("corpus/parse_trace/stub-leak.jsonl")).unwrap();
    let t = fuzz_targets::read_trace(&text).unwrap_or_else(|e| panic!("stub-leak.jsonl:{e}"));
    let footer = t.footer.expect("footer");
    let mem: Vec<_> = t
        .lines
        .iter()
        .filter_map(|l| match &l.rec {
            kvsim::trace::TraceRecord::Mem(op) => Some((l.t, op.clone())),
            _ => None,
        })
        .collect();
    fuzz_targets::validate_mem_log(&mem, &t.header.config).unwrap();
    let ps = t.header.config.knobs.page_size;
    let shape = kvsim_gpu::AttnShape { heads: 8, kv_heads: 2, head_dim: 64, dtype: kvsim_gpu::Dtype::F16 };
    let select = kvsim::confirm::Select::Violations { violations: &footer.violations, max: 8 };
    let lowered = kvsim::confirm::lower(&mem, ps, select, shape).unwrap();
    assert!(!lowered.targets.is_empty());
}

/// Every line kvsim writes reads back as a `tracefile::Line`. (Fails while `Ev::Timeout`'s field
/// `kind` collides with the record tag `kind`: `{"kind":"event","ev":"timeout",...,"kind":"bootstrap"}`
/// is "duplicate field `kind`".)
#[test]
fn every_line_of_a_real_trace_reads_back() {
    for name in ["stub-leak.jsonl", "stub-cold.jsonl", "stub-leak-filtered.jsonl"] {
        let text = std::fs::read_to_string(fuzz_dir().join("corpus/parse_trace").join(name)).unwrap();
        let t = fuzz_targets::read_trace(&text).unwrap_or_else(|e| panic!("{name}:{e}"));
        assert!(t.footer.is_some(), "{name}: no footer");
        if let Some((line, e)) = t.unreadable.first() {
            panic!("{name}:{line}: {e} ({} unreadable lines)", t.unreadable.len());
        }
    }
}
