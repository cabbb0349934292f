//! `kvsim confirm` on the CPU reference backend: a confirmed leak, a clean read, zeros only, and
//! a clean "unavailable" for CUDA where there is no GPU.

use std::process::Command;

fn kvsim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim")).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn trace_of(scenario: &str, extra: &[&str]) -> String {
    let t =
        std::env::temp_dir().join(format!("kvsim-confirm-{}-{}.jsonl", std::process::id(), scenario.replace('/', "_")));
    let s = crate::scenarios_dir().join(scenario);
    let mut args = vec!["run", s.to_str().unwrap(), "--trace", t.to_str().unwrap()];
    args.extend_from_slice(extra);
    kvsim(&args);
    t.to_string_lossy().into_owned()
}

fn share(out: &str, what: &str) -> f64 {
    let i = out.find(&format!("{what} ")).unwrap_or_else(|| panic!("no {what} in {out}"));
    out[i + what.len() + 1..].split('%').next().unwrap().parse().unwrap()
}

#[test]
fn the_stub_leak_is_confirmed_on_real_kv_arithmetic() {
    let t = trace_of("small/stub-leak.toml", &[]);
    let (code, out, err) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("CONFIRMED"), "{out}");
    assert!(share(&out, "foreign") > 50.0, "{out}");
    assert!(out.contains("tenant 1 "), "the victim tenant is named: {out}");
}

#[test]
fn the_fixed_profile_reads_only_its_own_kv() {
    let t = trace_of("small/stub-leak.toml", &["--profile", "sglang-0.5.22"]);
    let (code, out, _) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("nothing to confirm"), "{out}");
    let (code, out, _) = kvsim(&["confirm", &t, "--backend", "cpu", "--request", "0", "--request", "1"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(share(&out, "foreign"), 0.0, "{out}");
    assert!(share(&out, "own") > 99.0, "{out}");
}

#[test]
fn never_written_slots_are_zeros_only() {
    let t = trace_of("small/stub-cold.toml", &[]);
    let (code, out, _) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(share(&out, "zeros"), 100.0, "{out}");
    assert!(out.contains("zeros only") || out.contains("foreign 0.0%"), "{out}");
}

#[test]
fn cuda_without_a_gpu_is_a_clean_exit_3_and_bad_input_is_2() {
    let t = trace_of("small/stub-leak.toml", &[]);
    let gpu = Command::new("nvidia-smi").output().is_ok_and(|o| o.status.success());
    let (code, _, err) = kvsim(&["confirm", &t, "--backend", "cuda"]);
    if gpu {
        assert_eq!(code, Some(10), "{err}");
    } else {
        assert_eq!(code, Some(3), "{err}");
        assert!(err.contains("unavailable"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, _) = kvsim(&["confirm", &t, "--backend", "tpu"]);
    assert_eq!(code, Some(2));
    let (code, _, _) = kvsim(&["confirm", "/nonexistent.jsonl"]);
    assert_eq!(code, Some(2));
    let (code, _, _) = kvsim(&["confirm", &t, "--heads", "3", "--kv-heads", "2"]);
    assert_eq!(code, Some(2));
}

#[test]
fn the_incidents_shrunk_trace_is_a_confirmed_leak() {
    let dir = std::env::temp_dir().join(format!("kvsim-confirm-shrunk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (shrunk, trace) = (dir.join("shrunk.toml"), dir.join("shrunk.jsonl"));
    let scen = crate::scenarios_dir().join("glm53-incident.toml");
    let (code, out, err) = kvsim(&["shrink", scen.to_str().unwrap(), "--out", shrunk.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{out}{err}");
    let (code, _, _) = kvsim(&["run", shrunk.to_str().unwrap(), "--trace", trace.to_str().unwrap()]);
    assert_eq!(code, Some(10));
    let (code, out, err) = kvsim(&["confirm", trace.to_str().unwrap(), "--backend", "cpu"]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(share(&out, "foreign") > 25.0, "{out}");
}
