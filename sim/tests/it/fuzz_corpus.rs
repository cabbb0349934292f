//! The cargo-fuzz targets' committed inputs on stable: every file under `fuzz/corpus/<target>/`
//! and `fuzz/regressions/<target>/` goes through the same `kvsim::fuzz_targets` function the
//! libFuzzer target calls (bytes decoded with `arbitrary::Unstructured`, as libfuzzer-sys hands
//! them over). A panic fails the test and names the file.

use kvsim::fuzz_targets;
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    crate::manifest_dir().join("../fuzz")
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
    let mut failed = Vec::new();
    for (p, bytes) in &all {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(p, bytes))).is_err() {
            failed.push(p.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} input(s) panicked (messages above):\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
}

#[test]
fn scenario_run_corpus_and_regressions() {
    each("scenario_run", 4, |_, b| fuzz_targets::scenario_run(b));
}

/// Every input runs; every input named `stub-leak*` (the hand-written reproducer of
/// scenarios/small/stub-leak.toml and the one libFuzzer found from the other seeds) leaks by the
/// stub commit under sglang-0.5.16 and not under the fixed sglang-0.5.22.
#[test]
fn cross_tenant_corpus_and_the_stub_leak_reproducers() {
    each("cross_tenant", 3, |_, b| {
        fuzz_targets::cross_tenant(b, fuzz_targets::DEFAULT_PROFILE);
    });
    let leaks: Vec<_> = inputs("cross_tenant")
        .into_iter()
        .filter(|(p, _)| p.file_name().unwrap().to_string_lossy().starts_with("stub-leak"))
        .collect();
    assert!(leaks.len() >= 2, "the stub-leak reproducers are missing from fuzz/corpus/cross_tenant");
    for (p, b) in &leaks {
        let sigs = fuzz_targets::cross_tenant_signatures(b, "sglang-0.5.16");
        assert!(sigs.contains("cross_tenant_read/stub_commit"), "{}: {sigs:?}", p.display());
        assert!(fuzz_targets::cross_tenant(b, "sglang-0.5.16"), "{}", p.display());
        assert!(!fuzz_targets::cross_tenant(b, "sglang-0.5.22"), "{}: leaks under the fixed profile", p.display());
    }
    let repro = std::fs::read(fuzz_dir().join("corpus/cross_tenant/stub-leak")).unwrap();
    let cfg = fuzz_targets::cross_tenant_scenario_of(&repro, "sglang-0.5.16").unwrap();
    assert_eq!((cfg.context_len, cfg.prefill[0].pool_tokens, cfg.decode[0].pool_tokens), (8192, 4096, 8192));
    let prompts: Vec<u64> = cfg.requests.iter().map(|r| r.prompt_tokens).collect();
    assert_eq!(prompts, [4000, 3900, 6000], "the hand-written bytes no longer decode to stub-leak.toml's requests");
}

/// `FuzzInput::more_script` (a metadata lag and the one-batch faults) was appended after the
/// requests' list, so every input written before it must decode it empty and keep its meaning;
/// `one-batch-faults` (written by fuzz/seeds.py) must decode to its four faults, which pins the
/// script's layout of them to `FuzzInput`'s.
#[test]
fn appended_script_faults_leave_older_inputs_alone_and_decode_as_seeds_py_writes_them() {
    use kvsim::config::ScriptedFault::*;
    let mut seen = false;
    for target in ["scenario_run", "cross_tenant"] {
        for (p, b) in inputs(target) {
            let input = fuzz_targets::FuzzInput::decode(&b);
            if p.file_name().unwrap() != "one-batch-faults" {
                assert!(input.more_script.is_empty(), "{}: {:?}", p.display(), input.more_script);
                continue;
            }
            seen = true;
            let script = input.build(None).faults.script;
            let want = [
                TransferFailAt { request: 0, batch: 1 },
                DelayAt { request: 1, batch: 2, delay_ms: 10_000 },
                VisibilityLagAt { request: 2, batch: 1, lag_ms: 50 },
                MetadataLag { request: 3, lag_ms: 500 },
            ];
            assert_eq!(script, want, "{}", p.display());
            // Each fault reaches a batch (or metadata row) that exists: alone, it changes the run.
            let hash = |script: Vec<kvsim::config::ScriptedFault>| {
                let mut cfg = input.build(None);
                cfg.faults.script = script;
                kvsim::simulate(cfg, None, false).tracer.hash_hex()
            };
            let none = hash(Vec::new());
            for f in want {
                assert_ne!(hash(vec![f.clone()]), none, "{}: {f:?} changes nothing", p.display());
            }
        }
    }
    assert!(seen, "fuzz/corpus/scenario_run/one-batch-faults is missing (python3 fuzz/seeds.py)");
}

#[test]
fn parse_scenario_corpus_and_regressions() {
    each("parse_scenario", 5, |_, b| fuzz_targets::parse_scenario(b));
}

#[test]
fn parse_trace_corpus_and_regressions() {
    each("parse_trace", 5, |_, b| fuzz_targets::parse_trace(b));
}

/// The real traces in the corpus read completely in the current format (after a format change:
/// `python3 fuzz/seeds.py --traces target/release/kvsim`), and stub-leak.jsonl's memory log is
/// valid and lowers: the corpus exercises `confirm::lower`, not only the error paths.
#[test]
fn the_real_trace_in_the_parse_trace_corpus_reads_and_lowers() {
    let read = |name: &str| {
        let path = fuzz_dir().join("corpus/parse_trace").join(name);
        let f = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        kvsim::tracefile::TraceReader::open(name, f, kvsim::tracefile::ReadOptions { any_version: true })
            .and_then(|r| r.mem_log())
            .unwrap_or_else(|e| panic!("{e}: regenerate the trace seeds (python3 fuzz/seeds.py --traces KVSIM)"))
    };
    for name in ["stub-leak.jsonl", "stub-cold.jsonl", "stub-leak-filtered.jsonl"] {
        read(name);
    }
    let t = read("stub-leak.jsonl");
    let (footer, mem) = (t.footer, t.mem);
    kvsim::confirm::validate_mem_log(&mem, &t.header.config).unwrap();
    let model = kvsim::confirm::MemModel::of(&t.header.config);
    let shape = kvsim_gpu::AttnShape { heads: 8, kv_heads: 2, head_dim: 64, dtype: kvsim_gpu::Dtype::F16 };
    let select = kvsim::confirm::Select::Violations { violations: &footer.violations, max: 8 };
    let lowered = kvsim::confirm::lower(&mem, model, select, shape).unwrap();
    assert!(!lowered.targets.is_empty());
}

#[test]
fn parse_audit_log_corpus_and_regressions() {
    each("parse_audit_log", 8, |_, b| fuzz_targets::parse_audit_log(b));
}

/// A run that folds finished requests (`kvsim run`) names the same signatures as a whole run (a
/// campaign's): the facts a signature's chain names are kept when a request is folded, so the
/// report's `signatures` line can be checked against a campaign's table. On every shipped
/// scenario under its own profile and under sglang-0.5.16 (the leaking build).
#[test]
fn folded_runs_name_the_same_signatures() {
    let mut seen = 0;
    for rel in crate::common::all_scenarios() {
        if rel.contains("mooncake") {
            continue; // 12,031 requests: the same code path, minutes in a debug build
        }
        for profile in [None, Some("sglang-0.5.16")] {
            let cfg = crate::common::load(&rel, profile, &[]);
            let whole = kvsim::simulate(cfg.clone(), None, false);
            let mut w = kvsim::world::World::new(cfg, kvsim::trace::Tracer::new(None));
            w.fold_finished = true;
            w.run();
            assert_eq!(kvsim::fuzz::signatures(&w), kvsim::fuzz::signatures(&whole), "{rel} {profile:?}");
            seen += usize::from(!kvsim::fuzz::signatures(&w).is_empty());
        }
    }
    assert!(seen > 20, "{seen} runs with signatures");
}
