//! Trace workloads: the Mooncake traces and CSV replay, tenants, prefix reuse, and bad traces.

use std::process::Command;

fn kvsim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim")).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scenario_with(trace_section: &str) -> crate::ScratchFile {
    scenario_with_decodes(trace_section, 1)
}

/// The same scenario with `decodes` decode nodes.
fn scenario_with_decodes(trace_section: &str, decodes: u32) -> crate::ScratchFile {
    let p = crate::ScratchFile::new("wt", "s.toml");
    std::fs::write(
        &p,
        format!(
            "context_len = 131072\n[[prefill]]\ncount = 4\npool_tokens = 98304\n[[decode]]\ncount = {decodes}\npool_tokens = 262144\n[knobs]\npage_size = 64\n[trace]\n{trace_section}\n"
        ),
    )
    .unwrap();
    p
}

fn mooncake_dir() -> String {
    format!("{}/../data/mooncake", crate::manifest_dir().display())
}

#[test]
fn the_mooncake_hour_leaks_on_the_vulnerable_profile_only() {
    let cfg = crate::load("mooncake-conversation.toml", None, &[]);
    assert_eq!(cfg.requests.len(), 12_031, "the whole conversation trace");
    let tenants: std::collections::BTreeSet<u32> = cfg.requests.iter().map(|r| r.tenant).collect();
    assert!(tenants.len() > 1000, "conversations are tenants: {}", tenants.len());
    let w = kvsim::simulate(cfg, None, false);
    let leaks: Vec<_> = w.oracle.violations.iter().filter(|v| v.kind == kvsim::check::Kind::CrossTenantRead).collect();
    assert!(!leaks.is_empty());
    for v in &leaks {
        let r = &w.reqs[v.request.unwrap().idx()];
        assert!(
            r.prompt_tokens() >= 98_298,
            "only prompts the 98,304-token prefill pool rejects leak: {}",
            r.prompt_tokens()
        );
        assert_eq!(r.response().unwrap().status, 200);
    }
    let fixed = kvsim::simulate(
        crate::load(
            "mooncake-conversation.toml",
            Some("sglang-0.5.22"),
            &[("router_on_prefill_error", "cancel_decode")],
        ),
        None,
        false,
    );
    assert!(fixed.oracle.violations.is_empty(), "{:?}", fixed.oracle.violations.first());
}

#[test]
fn csv_traces_replay_with_a_tenant_column() {
    let csv = format!("{}/traces/vidur_tenants_crlf.csv", crate::sim_data().display());
    let s = scenario_with(&format!("file = {csv:?}\ntenants = \"column:tenant\""));
    let (code, out, err) = kvsim(&["run", &s, "--json"]);
    assert!(matches!(code, Some(0) | Some(10) | Some(11)), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 6);
}

#[test]
fn bad_traces_name_the_file_and_line() {
    let s = scenario_with("file = \"/nonexistent/trace.jsonl\"");
    let (code, _, err) = kvsim(&["run", &s]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/trace.jsonl") && err.contains("cannot read"), "{err}");
    let bad = format!("{}/traces/vidur_backwards.csv", crate::sim_data().display());
    let (code, _, err) = kvsim(&["run", &scenario_with(&format!("file = {bad:?}"))]);
    assert_eq!(code, Some(2));
    assert!(err.contains("vidur_backwards.csv:5"), "{err}");
    let dir = crate::Scratch::new("wt-bad");
    let f = dir.join("t.jsonl");
    std::fs::write(&f, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n{\"timestamp\": 5, \"input_length\": -3, \"output_length\": 2, \"hash_ids\": [1]}\n").unwrap();
    let (code, _, err) = kvsim(&["run", &scenario_with(&format!("file = {:?}", f.to_string_lossy()))]);
    assert_eq!(code, Some(2));
    assert!(err.contains("t.jsonl:2"), "{err}");
    let (code, _, err) = kvsim(&[
        "run",
        &scenario_with(&format!("file = \"{}/conversation_trace.jsonl\"\ntenants = \"by_magic\"", mooncake_dir())),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("tenants"), "{err}");
    // A column the trace lacks is the scenario's `tenants` key's fault: named there, with the file
    // (the message named the trace file alone).
    let good = dir.join("g.jsonl");
    std::fs::write(&good, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n")
        .unwrap();
    let s = scenario_with(&format!("file = {:?}\ntenants = \"column:nope\"", good.to_string_lossy()));
    let (code, _, err) = kvsim(&["run", &s]);
    assert_eq!(code, Some(2));
    assert!(err.contains("s.toml:") && err.contains("trace.tenants") && err.contains("`column:nope`"), "{err}");
    assert!(err.contains("g.jsonl: request #0 has no column `nope`"), "{err}");
}

#[test]
fn prefix_reuse_crosses_tenants_only_without_a_salt() {
    let base =
        format!("file = \"{}/conversation_trace.jsonl\"\ntenants = \"round_robin:8\"\nlimit = 3000", mooncake_dir());
    // Two decode nodes keep up with these 3,000 prompts (every prompt prefill accepts is answered
    // 200, none waits near the 300 s timeouts), so the cross-tenant reuse below — request 2246 of
    // tenant 6 reusing the 8 blocks request 2226 of tenant 2 cached 5 s earlier, and 1535 reusing
    // 1491's — does not hang on queueing delay. With one decode node the decode queue is
    // saturated and the only reuse was of blocks cached by a request (2226) first answered 298.2 s
    // after its arrival, 1.8 s inside the 300 s timeout: one more decode step per request (the
    // TTFT fix) made it time out (HTTP 500), and 2246 found nothing of it to reuse.
    let s = scenario_with_decodes(&base, 2);
    // Both runs use a router that cancels decode's leg when prefill rejects (sglang's gateway), so
    // they differ in the salt alone. Behind mini_lb the released 0.5.22 holds each rejected
    // prompt's decode reservation for the 300 s waiting timeout, decode's queue drains one
    // timeout at a time and most prompts never reach a prefill forward (no prefix reuse to see).
    let (_, out, err) = kvsim(&[
        "run",
        &s,
        "--profile",
        "sglang-0.5.22",
        "--set",
        "prefix_cache_scope=global",
        "--set",
        "router_on_prefill_error=cancel_decode",
        "--json",
    ]);
    assert!(out.contains("cross_tenant_prefix_hit"), "{err}{out}");
    let (code, out, _) = kvsim(&[
        "run",
        &s,
        "--profile",
        "sglang-0.5.22",
        "--set",
        "prefix_cache_scope=per_tenant",
        "--set",
        "router_on_prefill_error=cancel_decode",
        "--json",
    ]);
    assert!(!out.contains("cross_tenant_prefix_hit"), "{out}");
    assert_eq!(code, Some(0), "{out}");
}

/// A trace declares no public blocks; kvsim infers the operator's shared system prompt from the
/// leading blocks every tenant sends, but only with three or more tenants: with two, a block both
/// send is exactly a probe of the other's prompt (a two-tenant trace's probe was never reported).
#[test]
fn a_two_tenant_traces_probe_is_a_cross_tenant_hit() {
    let dir = crate::Scratch::new("wt-probe");
    let lines = [
        r#"{"timestamp": 0, "input_length": 1600, "output_length": 4, "hash_ids": [100, 101, 102, 103]}"#,
        r#"{"timestamp": 6000, "input_length": 2000, "output_length": 4, "hash_ids": [100, 101, 102, 200]}"#,
        r#"{"timestamp": 9000, "input_length": 600, "output_length": 4, "hash_ids": [7, 8]}"#,
    ];
    let run = |n: usize, tenants: u32| {
        let t = dir.join(format!("probe{n}.jsonl"));
        std::fs::write(&t, lines[..n].join("\n") + "\n").unwrap();
        let s = dir.join(format!("probe{n}.toml"));
        std::fs::write(
            &s,
            format!("context_len = 8192\n[[prefill]]\npool_tokens = 8192\n[[decode]]\npool_tokens = 8192\n[knobs]\npage_size = 16\n[trace]\nfile = {:?}\ntenants = \"round_robin:{tenants}\"\n", t.to_string_lossy()),
        )
        .unwrap();
        kvsim(&["run", s.to_str().unwrap(), "--profile", "sglang-0.5.22"])
    };
    let (code, out, err) = run(2, 2);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("cross_tenant_prefix_hit/global_prefix_cache"), "{out}");
    let (_, out, _) = run(3, 3);
    assert!(
        out.contains("cross_tenant_prefix_hit/global_prefix_cache"),
        "a third tenant that does not send them: {out}"
    );
}
