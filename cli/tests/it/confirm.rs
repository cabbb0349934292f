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

/// Records `scenario`'s trace (with `extra` flags) to a file in a scratch folder of its own:
/// tests run in parallel in one process, and two of them recording the same scenario with
/// different flags (`--profile sglang-0.5.22`, `--set zero_on_free=true`) into one path made a
/// reader see the other's trace (a flaky "nothing to confirm"). The folder goes when the returned
/// value drops.
fn trace_of(scenario: &str, extra: &[&str]) -> crate::ScratchFile {
    let t = crate::ScratchFile::new("confirm-trace", &format!("{}.jsonl", scenario.replace('/', "_")));
    let s = crate::scenarios_dir().join(scenario);
    let mut args = vec!["run", s.to_str().unwrap(), "--trace", &t];
    args.extend_from_slice(extra);
    kvsim(&args);
    t
}

/// `confirm` writes a read's time as the report's story writes it (truncated): it rounded, and
/// one read showed at 2.890s in the story and 2.891s in `confirm`.
#[test]
fn a_read_shows_the_same_time_in_confirm_as_in_the_report() {
    let t = trace_of("catalogue/sync-timeout-still-writing.toml", &[]);
    let s = crate::scenarios_dir().join("catalogue/sync-timeout-still-writing.toml");
    let (_, json, _) = kvsim(&["run", s.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let (_, out, err) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    let mut checked = 0;
    for v in report["violations"].as_array().unwrap().iter().filter(|v| v["request"].is_u64()) {
        let at = v["at_ns"].as_u64().unwrap();
        if at % 1_000_000 >= 500_000 {
            // Where rounding and truncation differ.
            let want = format!(" at {}.{:03}s ", at / 1_000_000_000, at / 1_000_000 % 1000);
            if out.contains(&format!("request {} ", v["request"])) {
                assert!(out.contains(&want), "{want}\n{out}{err}");
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no read where rounding differs: {out}");
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

/// Tenant ids past what a program carries (65,535; a scenario's go to 4,294,967,295) are numbered
/// densely in the program and named as the run's in the output (the trace was refused as "an
/// invalid KV page program").
#[test]
fn tenant_ids_past_a_programs_range_confirm_under_their_own_names() {
    let text = std::fs::read_to_string(crate::scenarios_dir().join("small/stub-leak.toml")).unwrap();
    let big = text.replace("tenant = 2", "tenant = 4000000000").replace("tenant = 1", "tenant = 70000");
    let dir = crate::Scratch::new("confirm-big");
    let s = dir.join("big.toml");
    std::fs::write(&s, big).unwrap();
    let t = dir.join("big.jsonl");
    let (code, _, _) = kvsim(&["run", s.to_str().unwrap(), "--trace", t.to_str().unwrap()]);
    assert_eq!(code, Some(10));
    let (code, out, err) = kvsim(&["confirm", t.to_str().unwrap(), "--backend", "cpu"]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("(tenant 4000000000)") && out.contains("tenant 70000 100.0%"), "{out}");
}

/// A threshold no share can exceed (≥ 1), or no read to confirm (`--max-reads 0`), is bad input,
/// not "0 confirmed" or "no matching read".
#[test]
fn thresholds_and_read_counts_that_confirm_nothing_are_refused() {
    let t = trace_of("small/stub-leak.toml", &[]);
    for (flag, v) in [("--threshold", "2"), ("--threshold", "1"), ("--threshold=-0.1", ""), ("--max-reads", "0")] {
        let args: Vec<&str> =
            ["confirm", &t, "--backend", "cpu", flag, v].into_iter().filter(|a| !a.is_empty()).collect();
        let (code, _, err) = kvsim(&args);
        assert_eq!(code, Some(2), "{flag} {v}: {err}");
        assert!(err.contains(flag.split('=').next().unwrap()), "{err}");
    }
    let (code, out, _) = kvsim(&["confirm", &t, "--backend", "cpu", "--threshold", "0.5"]);
    assert_eq!(code, Some(10), "{out}");
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

/// A read through blocks decode's radix cache holds replays over its whole block table: the
/// trace's `lock` record puts the cached pages before the request's own. Before it the replay
/// saw only the request's own pages and refused the read ("seq_len 513 exceeds the block table's
/// 1 slots", exit 2), so a campaign's confirm column said "confirm failed" for every read
/// through a prefix cache. Here request 2 reads request 3's cached blocks before request 3's
/// lagged data lands in them (stale: zeros for half of it) and after (its own chain's KV).
#[test]
fn reads_through_cached_prefix_blocks_replay_over_their_locked_pages() {
    let path = crate::sim_data().join("oracle/lag-into-decode-cache.toml");
    let t = trace_of(path.to_str().unwrap(), &[]);
    assert!(std::fs::read_to_string(&t).unwrap().contains(r#""op":"lock""#), "no lock record in {t}");
    let (code, out, err) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let read1 = out.split("read 1: ").nth(1).unwrap_or_else(|| panic!("{out}"));
    assert!(read1.starts_with("request 2 (tenant 0) on decode-0, 513 tokens"), "{out}");
    assert!(share(read1, "zeros") > 40.0 && share(read1, "foreign") == 0.0, "{out}");
    let (code, out, err) = kvsim(&["confirm", &t, "--backend", "cpu", "--request", "2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(share(&out, "own"), 100.0, "after the land it reads its chain's KV: {out}");
}

/// sglang's checkpoint hands a request the tree's copy of a block another request indexed first
/// (`prefill_checkpoint_duplicates = tree_copy`), and prefill sends that copy: in
/// `self-sent-block-in-flight.toml` request 1 (tenant 2) computed blocks [100, 101] beside request
/// 0 (tenant 1), so the KV decode receives for them is tenant 1's bytes (the same content: the
/// oracle calls the read clean, and the replay, which attributes KV to its writer, counts it as
/// foreign, as README's "GPU confirmation" says). Keeping its own copy, it reads only its own.
#[test]
fn a_checkpoints_tree_copy_is_what_prefill_sends() {
    let path = crate::sim_data().join("oracle/self-sent-block-in-flight.toml");
    for (value, foreign) in [("tree_copy", true), ("own_copy", false)] {
        let set = format!("prefill_checkpoint_duplicates={value}");
        let t = trace_of(path.to_str().unwrap(), &["--set", &set]);
        let (code, out, err) = kvsim(&["confirm", &t, "--backend", "cpu", "--request", "1"]);
        assert!(out.contains("request 1 (tenant 2) on decode-0, 1101 tokens"), "{value}: {out}{err}");
        assert_eq!(share(&out, "foreign") > 90.0, foreign, "{value}: {out}");
        assert_eq!(code, Some(if foreign { 10 } else { 0 }), "{value}: {out}{err}");
    }
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
    // `--backend`, `run --confirm` and `fuzz --confirm` are clap choices: a misspelt backend is
    // refused before anything runs, with the choices listed.
    for args in [
        vec!["confirm", &t, "--backend", "tpu"],
        vec!["run", "scenarios/small/stub-leak.toml", "--confirm", "tpu"],
        vec!["fuzz", "--runs", "1", "--confirm", "tpu", "--corpus", "/nonexistent/never-written"],
    ] {
        let (code, _, err) = kvsim(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("tpu") && err.contains("cpu") && err.contains("cuda"), "{args:?}: {err}");
    }
    // `--dtype` is a clap choice: a misspelt one is refused with the choices listed.
    let (code, _, err) = kvsim(&["confirm", &t, "--dtype", "f64"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("f16") && err.contains("bf16") && err.contains("f32"), "{err}");
    let (code, _, _) = kvsim(&["confirm", "/nonexistent.jsonl"]);
    assert_eq!(code, Some(2));
    let (code, _, _) = kvsim(&["confirm", &t, "--heads", "3", "--kv-heads", "2"]);
    assert_eq!(code, Some(2));
}

#[test]
fn the_incidents_shrunk_trace_is_a_confirmed_leak() {
    let dir = crate::Scratch::new("confirm-shrunk");
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

/// Issue 16: with `zero_on_free` the stale pages are cleared when freed; the simulator calls the
/// read `uninitialized_read` and the replay must read zeros, not the previous tenant's KV.
#[test]
fn zero_on_free_reads_zeros_and_is_not_confirmed() {
    let t = trace_of("small/stub-leak.toml", &["--set", "zero_on_free=true"]);
    let (code, out, err) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("[uninitialized_read]"), "{out}");
    assert!(!out.contains("CONFIRMED"), "{out}");
    assert!(share(&out, "zeros") > 99.9, "{out}");
    assert_eq!(share(&out, "foreign"), 0.0, "{out}");
}

/// Issue 16: a decode node restarted before the stub leak: its pool comes back as zeros, so the
/// leaking read sees only the one stale page the stub transfer copied in (15 of 6,000 slots), not
/// the pre-crash tenant's KV on the other 374 pages.
#[test]
fn a_restarted_nodes_pool_is_zeros_in_the_replay() {
    let dir = crate::Scratch::new("confirm-restart");
    let base = std::fs::read_to_string(crate::scenarios_dir().join("small/stub-leak.toml")).unwrap();
    let scen = dir.join("restart.toml");
    std::fs::write(
        &scen,
        format!(
            "{base}\n[faults]\ncrash_restart_ms = 100\n\n[[faults.script]]\nkind = \"crash\"\nat_ms = 1500\n\
             node = \"decode-0\"\nrestart_after_ms = 100\n"
        ),
    )
    .unwrap();
    let trace = dir.join("restart.jsonl");
    let (code, out, _) = kvsim(&["run", scen.to_str().unwrap(), "--trace", trace.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{out}");
    assert!(out.contains("5,984 slots") && out.contains("never written"), "{out}");
    let (code, out, err) = kvsim(&["confirm", trace.to_str().unwrap(), "--backend", "cpu"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(share(&out, "zeros") > 99.0, "{out}");
    let foreign = share(&out, "foreign");
    assert!(foreign > 0.0 && foreign < 1.0, "only the stub page is foreign: {out}");
    assert!(out.contains("not confirmed"), "{out}");
}

/// Issue 12 item 8: a memory log that fails validation or is over confirm's limit is bad input
/// (exit 2, naming the file and line), never "nothing to confirm".
#[test]
fn an_invalid_or_oversized_memory_log_is_bad_input_with_its_line() {
    let t = trace_of("small/stub-leak.toml", &[]);
    let text = std::fs::read_to_string(&t).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let first_alloc = lines.iter().position(|l| l.contains("\"op\":\"alloc\"")).unwrap();
    let dir = crate::Scratch::new("confirm-badlog");
    let write = |name: &str, lines: &[String]| {
        let p = dir.join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p.to_string_lossy().into_owned()
    };
    // A page run outside the pool (decode-0 has 513 pages).
    let mut bad: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    bad[first_alloc] = bad[first_alloc].replace("\"count\":250", "\"count\":9999");
    let p = write("outside.jsonl", &bad);
    let (code, out, err) = kvsim(&["confirm", &p, "--backend", "cpu"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains(&format!("{p}:{}:", first_alloc + 1)) && err.contains("outside"), "{err}");
    assert!(!out.contains("nothing to confirm"), "{out}");
    // Over the limit: a decode pool of 2^30 + 1 pages and an allocation of all of it; the run's
    // own allocations then pass the limit of 2^30 pages.
    let mut big: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    big[0] = big[0].replace(
        "\"decode\":[{\"pool_tokens\":8192,",
        &format!("\"decode\":[{{\"pool_tokens\":{},", (1u64 << 30) * 16),
    );
    assert_ne!(big[0], lines[0], "the header names the decode pool");
    big.insert(
        first_alloc,
        "{\"t\":0,\"kind\":\"mem\",\"op\":\"alloc\",\"pool\":{\"role\":\"decode\",\"index\":0},\"r\":9,\
         \"pages\":[{\"first\":1,\"count\":1073741824}]}"
            .to_string(),
    );
    let p = write("oversized.jsonl", &big);
    let (code, out, err) = kvsim(&["confirm", &p, "--backend", "cpu"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains(&format!("{p}:{}:", first_alloc + 2)) && err.contains("limit"), "{err}");
    assert!(!out.contains("nothing to confirm"), "{out}");
}

/// The per-read verdict lines of a confirm output (the header line names the file and counts the
/// trace's memory ops, which a filtered trace has fewer of).
fn verdict_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| !l.contains(".jsonl: scenario ")).collect()
}

/// Issue 12 item 6: `--trace-filter` keeps every record the violating reads depend on (the
/// prefill writes behind a kept copy, the frees that clear a page), so `confirm` on the filtered
/// trace says exactly what it says on the full one — `mixed-faults` confirmed 7 of 8 before.
#[test]
fn a_filtered_trace_confirms_exactly_like_the_full_one() {
    let cases: [(&str, &[&str]); 5] = [
        ("small/stub-leak.toml", &[]),
        ("small/mixed-faults.toml", &[]),
        ("small/mixed-faults.toml", &["--set", "zero_on_free=true"]),
        ("catalogue/rdma-visibility-lag.toml", &[]),
        ("catalogue/sync-timeout-still-writing.toml", &[]),
    ];
    for (i, (scenario, extra)) in cases.iter().enumerate() {
        let full = trace_of(scenario, extra);
        let tag = format!("filtered-{i}.jsonl");
        let filtered = full.replace(".jsonl", &tag);
        let s = crate::scenarios_dir().join(scenario);
        let mut args = vec!["run", s.to_str().unwrap(), "--trace", &filtered, "--trace-filter"];
        args.extend_from_slice(extra);
        kvsim(&args);
        let (la, lb) = (std::fs::read_to_string(&full).unwrap(), std::fs::read_to_string(&filtered).unwrap());
        assert!(lb.lines().count() < la.lines().count(), "{scenario}: the filter keeps everything");
        let (ca, a, _) = kvsim(&["confirm", &full, "--backend", "cpu", "--max-reads", "64"]);
        let (cb, b, _) = kvsim(&["confirm", &filtered, "--backend", "cpu", "--max-reads", "64"]);
        assert_eq!(ca, cb, "{scenario}");
        assert!(a.contains("read 0:"), "{scenario}: {a}");
        assert_eq!(verdict_lines(&a), verdict_lines(&b), "{scenario}\nfull:\n{a}\nfiltered:\n{b}");
        if *scenario == "small/mixed-faults.toml" && extra.is_empty() {
            // A request the filter dropped is named as dropped, not as one the run never read
            // for ("no attention read of it in the trace (its requests are 0 to 119)").
            let (cf, _, ef) = kvsim(&["confirm", &full, "--backend", "cpu", "--request", "0"]);
            assert_eq!(cf, Some(0), "{ef}");
            let (code, _, err) = kvsim(&["confirm", &filtered, "--backend", "cpu", "--request", "0"]);
            assert_eq!(code, Some(2), "{err}");
            assert!(err.contains("recorded with --trace-filter") && err.contains("without --trace-filter"), "{err}");
        }
    }
}

/// Issue 16: a GPU failure during the replay (CUDA error such as out of memory, NVRTC compile
/// error) has its own exit code, 4, distinct from bad input (2) and an unavailable backend (3).
/// The failures are injected into the real exit path with `KVSIM_INJECT_GPU_ERROR`.
#[test]
fn gpu_runtime_failures_exit_4_unlike_bad_input_and_unavailable() {
    let t = trace_of("small/stub-leak.toml", &[]);
    for (kind, code, says) in [
        ("cuda", 4, "CUDA_ERROR_OUT_OF_MEMORY"),
        ("compile", 4, "NVRTC compilation failed"),
        ("unavailable", 3, "unavailable"),
        ("too_large", 2, "over the limit"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kvsim"))
            .args(["confirm", &t, "--backend", "cpu"])
            .env("KVSIM_INJECT_GPU_ERROR", kind)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{kind}: {err}");
        assert!(err.contains(says) && !err.contains("panicked"), "{kind}: {err}");
        if code == 4 {
            assert!(err.contains("GPU failure while replaying") && err.contains(&*t), "{kind}: {err}");
        }
    }
}

/// Issue 16: `kvsim run --confirm` confirms the run's violating reads like `kvsim confirm` on its
/// trace; the run's exit code is kept.
#[test]
fn run_confirm_prints_a_verdict_per_read() {
    let s = crate::scenarios_dir().join("small/stub-leak.toml");
    let (code, out, err) = kvsim(&["run", s.to_str().unwrap(), "--confirm", "cpu"]);
    assert_eq!(code, Some(10), "{out}{err}");
    let tail = out.split("confirmation on KV memory:").nth(1).unwrap_or_else(|| panic!("{out}"));
    assert!(tail.contains("read 0: request 2 (tenant 2)") && tail.contains("CONFIRMED"), "{tail}");
    assert!(tail.contains("verdict: 1 of 1 read(s) confirmed"), "{tail}");
    let (code, out, _) = kvsim(&["run", s.to_str().unwrap(), "--set", "zero_on_free=true", "--confirm", "cpu"]);
    assert_eq!(code, Some(10), "the run's own verdict: {out}");
    assert!(out.contains("not confirmed") && !out.contains("CONFIRMED") && !out.contains("DISAGREEMENT"), "{out}");
    // The replay's verdict does not contradict the run's exit status (it read "(exit 0)").
    assert!(out.contains("confirmed as cross-tenant leaks (the run's exit status stands: 10)"), "{out}");
    let (code, _, err) = kvsim(&["run", s.to_str().unwrap(), "--confirm", "tpu"]);
    assert_eq!(code, Some(2), "{err}");
}

/// `run --confirm --json` carries the replay's verdict in the one object it prints
/// (`confirmation`; it went to stderr as text only), and `kvsim confirm --json` prints the same
/// object; the text goes to stderr beside the JSON, and the exit statuses are unchanged.
#[test]
fn confirm_verdicts_are_in_the_json() {
    let scratch = crate::Scratch::new("confirm-json");
    let s = crate::scenarios_dir().join("small/stub-leak.toml");
    let trace = scratch.join("leak.jsonl");
    let t = trace.to_str().unwrap();
    let (code, out, err) = kvsim(&["run", s.to_str().unwrap(), "--confirm", "cpu", "--json", "--trace", t]);
    assert_eq!(code, Some(10), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let c = &v["confirmation"];
    assert_eq!(
        (c["backend"].as_str(), c["confirmed"].as_u64(), c["replayed"].as_u64()),
        (Some("cpu"), Some(1), Some(1)),
        "{c}"
    );
    let read = &c["reads_replayed"][0];
    assert_eq!(
        (read["request"].as_u64(), read["tenant"].as_u64(), read["confirmed"].as_bool()),
        (Some(2), Some(2), Some(true)),
        "{read}"
    );
    let share = read["foreign_share"].as_f64().unwrap();
    assert!(share > c["threshold"].as_f64().unwrap() && share <= 1.0, "{read}");
    assert!(err.contains("confirmation on KV memory:") && err.contains("CONFIRMED"), "{err}");
    // `kvsim confirm --json` on the run's trace: the same verdict, alone.
    let (code, out, err) = kvsim(&["confirm", t, "--backend", "cpu", "--json"]);
    assert_eq!(code, Some(10), "{err}");
    let alone: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(alone["reads_replayed"], c["reads_replayed"], "{out}");
    // A confirmation that fails says so in the JSON too, with the command's exit status.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["run", s.to_str().unwrap(), "--confirm", "cpu", "--json"])
        .env("KVSIM_INJECT_GPU_ERROR", "unavailable")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["confirmation"]["exit_code"].as_i64(), Some(3), "{v}");
    assert!(v["confirmation"]["error"].as_str().is_some_and(|e| e.contains("unavailable")), "{v}");
    // A clean run: nothing replayed, and why.
    let clean = crate::scenarios_dir().join("small/vllm-short-prefill.toml");
    let (code, out, err) = kvsim(&["run", clean.to_str().unwrap(), "--confirm", "cpu", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(v["confirmation"]["replayed"].as_u64(), Some(0), "{out}");
    assert_eq!(v["confirmation"]["nothing"].as_str(), Some("the run has no violation"), "{out}");
}

/// Issue 16: `kvsim fuzz` confirms each new read signature by default (`--confirm auto`) and
/// shows the verdict per signature; `--confirm off` leaves it out.
#[test]
fn fuzz_confirms_read_signatures_by_default() {
    let scratch = crate::Scratch::new("fuzz-confirm");
    let corpus = scratch.join("corpus");
    let c = corpus.to_str().unwrap();
    let (code, out, err) = kvsim(&["fuzz", "--runs", "60", "--profile", "sglang-0.5.16", "--corpus", c]);
    assert_eq!(code, Some(10), "{out}{err}");
    let line = out.lines().find(|l| l.starts_with("cross_tenant_read/stub_commit")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("[confirmed: "), "{line}");
    let f = std::fs::read_to_string(corpus.join("cross_tenant_read--stub_commit/failure.json")).unwrap();
    let f: serde_json::Value = serde_json::from_str(&f).unwrap();
    assert!(f["confirm"].as_str().is_some_and(|s| s.starts_with("confirmed: ")), "{f}");
    assert!(!out.contains("DISAGREEMENT"), "{out}");
    let line = out.lines().find(|l| l.starts_with("uninitialized_read/stub_commit")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("[replay agrees: "), "{line}");
    let off = format!("{c}-off");
    let (_, out, _) =
        kvsim(&["fuzz", "--runs", "60", "--profile", "sglang-0.5.16", "--corpus", &off, "--confirm", "off"]);
    assert!(!out.contains("[confirmed"), "{out}");
}

#[test]
fn the_cpu_check_option_is_validated_and_the_cpu_backend_ignores_it() {
    let t = trace_of("small/stub-leak.toml", &[]);
    let (code, plain, _) = kvsim(&["confirm", &t, "--backend", "cpu"]);
    assert_eq!(code, Some(10), "{plain}");
    for check in ["full", "sampled", "sampled:4", "auto"] {
        let (code, out, err) = kvsim(&["confirm", &t, "--backend", "cpu", "--cpu-check", check]);
        assert_eq!((code, &out), (Some(10), &plain), "--cpu-check {check}: {err}");
    }
    for bad in ["sampled:1", "most"] {
        let (code, _, err) = kvsim(&["confirm", &t, "--backend", "cpu", "--cpu-check", bad]);
        assert_eq!(code, Some(2), "--cpu-check {bad}: {err}");
        assert!(err.contains("--cpu-check"), "{err}");
    }
}

/// A trace edited after the run (a record's tenant changed, a record deleted) is refused: its
/// configuration is re-run and compared as `kvsim replay` does (the edits changed the verdict,
/// 100% foreign to 33%, with no warning). A share next to the threshold is printed with the
/// digits that tell them apart.
#[test]
fn an_edited_trace_is_refused_and_close_shares_are_told_apart() {
    let t = trace_of("small/stub-leak.toml", &[]);
    let text = std::fs::read_to_string(&t).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let tenant_line = lines.iter().position(|l| l.contains("\"tenant\":1")).expect("a record naming tenant 1");
    for (name, edited) in [
        ("tenant", {
            let mut l = lines.clone();
            l[tenant_line] = l[tenant_line].replacen("\"tenant\":1", "\"tenant\":2", 1);
            l
        }),
        ("deleted", {
            let mut l = lines.clone();
            l.remove(lines.len() / 2);
            l
        }),
        // A page moved outside its pool: the memory log's own check fails too, and the message
        // says first that the trace was edited (it said only "invalid memory log").
        ("outside", {
            let mut l = lines.clone();
            let at = l.iter().position(|x| x.contains("\"op\":\"alloc\"")).expect("an alloc record");
            l[at] = l[at].replacen("\"first\":1,", "\"first\":99999,", 1);
            assert_ne!(l[at], lines[at]);
            l
        }),
    ] {
        let p = format!("{t}.{name}.jsonl");
        std::fs::write(&p, edited.join("\n") + "\n").unwrap();
        let (code, out, err) = kvsim(&["confirm", &p, "--backend", "cpu"]);
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(err.contains("the trace is not its own configuration's run") && err.contains("kvsim replay"), "{err}");
        if name == "outside" {
            assert!(err.contains("its memory log:") && err.contains("outside decode-0"), "{err}");
        }
    }
    let (code, out, _) = kvsim(&["confirm", &t, "--backend", "cpu", "--threshold", "0.99985"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("foreign 99.983%") && out.contains("foreign share > 99.985%"), "{out}");
    // Errors name the flags and the request range, not the library's structures.
    let (code, _, err) = kvsim(&["confirm", &t, "--backend", "cpu", "--heads", "0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--heads 0 --kv-heads 2: --heads must be a non-zero multiple") && !err.contains("AttnShape"),
        "{err}"
    );
    let (code, _, err) = kvsim(&["confirm", &t, "--backend", "cpu", "--request", "99"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--request 99: no attention read of it in the trace (its requests are 0 to 2)"), "{err}");
    let clean = trace_of("glm53-fixed-config.toml", &[]);
    let (code, out, _) = kvsim(&["confirm", &clean, "--backend", "cpu"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to confirm: the run has no violation"), "{out}");
}

/// `kvsim confirm` of a campaign's seed folder reads its shrunk trace, the one the campaign
/// confirmed (it read the drawn case's `trace.jsonl` and could disagree with the table).
#[test]
fn a_seed_folder_is_confirmed_on_its_shrunk_trace() {
    let scratch = crate::Scratch::new("confirm-folder");
    let dir = scratch.join("seed-7");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(trace_of("small/stub-leak.toml", &[]), dir.join("trace.jsonl")).unwrap();
    let (_, out, err) = kvsim(&["confirm", dir.to_str().unwrap(), "--backend", "cpu"]);
    assert!(out.starts_with(&format!("{}/trace.jsonl: ", dir.display())), "{out}{err}");
    std::fs::copy(trace_of("small/stub-leak.toml", &[]), dir.join("shrunk.jsonl")).unwrap();
    let (code, out, err) = kvsim(&["confirm", dir.to_str().unwrap(), "--backend", "cpu"]);
    assert_eq!(code, Some(10), "{err}");
    assert!(out.starts_with(&format!("{}/shrunk.jsonl: ", dir.display())), "{out}{err}");
}

/// `--max-reads` leaving reads out is said, with how many there are.
#[test]
fn reads_left_out_by_max_reads_are_counted() {
    let t = trace_of("glm53-incident.toml", &[]);
    let (code, out, _) = kvsim(&["confirm", &t, "--backend", "cpu", "--max-reads", "2"]);
    assert_eq!(code, Some(10), "{out}");
    let note =
        out.lines().find(|l| l.starts_with("note: the first 2 of the trace's ")).unwrap_or_else(|| panic!("{out}"));
    let all: usize = note.split_whitespace().nth(7).unwrap().parse().unwrap();
    assert!(all > 2 && note.ends_with(&format!("(--max-reads {all} to replay more)")), "{note}");
    // A trace with as many reads as --max-reads: no note.
    let small = trace_of("small/stub-leak.toml", &[]);
    let (_, out, _) = kvsim(&["confirm", &small, "--backend", "cpu", "--max-reads", "1"]);
    assert!(!out.contains("note: the first"), "{out}");
}
