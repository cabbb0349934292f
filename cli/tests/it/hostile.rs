//! Hostile inputs: every number read from a file or flag is range-checked at the boundary, with an
//! error naming file, line (or flag) and key; nothing allocates in proportion to an unchecked
//! number; scenarios are written back through the TOML serializer. One test per defect found by
//! throwing ~42,000 hostile inputs at every command.

use kvsim::config::SimConfig;
use kvsim::scenario::{self, Overrides, Scenario, ScenarioError, MAX_TIME_MS};

use crate::bad_input::GOOD;

fn resolve(text: &str, o: &Overrides) -> Result<SimConfig, ScenarioError> {
    Scenario::parse("h.toml", text)?.resolve(o)
}

fn err(text: &str) -> ScenarioError {
    resolve(text, &Overrides::default()).expect_err("must be refused")
}

/// A scratch folder for one test (removed when it passes).
fn scratch(tag: &str) -> crate::Scratch {
    crate::Scratch::new(tag)
}

/// The 1-based line of the first line of `text` that starts with `prefix`.
fn line_of(text: &str, prefix: &str) -> usize {
    text.lines().position(|l| l.starts_with(prefix)).expect("line present") + 1
}

#[test]
fn metadata_slots_are_bounded_before_anything_is_allocated() {
    for (key, v) in [("metadata_slots", "4294967295"), ("max_running_requests", "4294967295")] {
        let text = GOOD.replace("pool_tokens = 8192", &format!("pool_tokens = 8192\n{key} = {v}"));
        let e = err(&text);
        assert_eq!(e.key, format!("decode[0].{key}"), "{e}");
        assert_eq!(e.line, Some(line_of(&text, key)), "{e}");
    }
    // Many nodes each with many slots: bounded in total.
    let text = GOOD.replace("pool_tokens = 8192", "pool_tokens = 8192\ncount = 1024\nmetadata_slots = 1048576");
    assert!(err(&text).message.contains("metadata slots over all"), "{}", err(&text));
    let text = GOOD.replace(
        "[[decode]]",
        "[[decode]]\ncount = 1000\npool_tokens = 16\n[[decode]]\ncount = 1000\npool_tokens = 16\n[[decode]]",
    );
    assert!(err(&text).key.ends_with("count"), "{}", err(&text));
}

#[test]
#[allow(clippy::disallowed_methods)] // a guard against drawing (minutes and gigabytes), not a benchmark
fn a_header_generator_is_validated_without_drawing_it() {
    let mut cfg = resolve(GOOD, &Overrides::default()).unwrap();
    cfg.generator = Some(kvsim::config::GeneratorConfig {
        requests: u32::MAX,
        tenants: 2,
        mean_interarrival_us: 1000,
        prompt_tokens: vec![kvsim::config::Bucket { weight: 1, min: 10, max: 20 }],
        output_tokens: vec![kvsim::config::Bucket { weight: 1, min: 1, max: 2 }],
        client_abort: kvsim::types::Ratio::NEVER,
        abort_within_ms: 1000,
        start_ms: 0,
    });
    let e = scenario::validate_config(&cfg, "t.jsonl").unwrap_err();
    assert!(e.file.contains("t.jsonl") && e.key.contains("requests"), "{e}");
    // A valid 10M-request generator (plus the one explicit request) is accepted at once
    // (drawing it would take gigabytes).
    cfg.generator.as_mut().unwrap().requests = 9_999_999;
    let started = std::time::Instant::now();
    scenario::validate_config(&cfg, "t.jsonl").unwrap();
    assert!(started.elapsed().as_secs() < 5, "validation drew the generator: {:?}", started.elapsed());
}

#[test]
fn cost_values_are_range_checked_not_wrapped() {
    let huge = 1u64 << 62;
    for key in [
        "prefill_base_us",
        "decode_step_base_us",
        "transfer_latency_us",
        "message_latency_us",
        "prefill_ns_per_token",
        "prefill_ns_per_token_per_kctx",
        "decode_ns_per_kkv",
        "kv_bytes_per_token",
        "transfer_bytes_per_us",
    ] {
        let text = format!("{GOOD}\n[cost]\n{key} = {huge}\n");
        let e = err(&text);
        assert_eq!(e.key, format!("cost.{key}"), "{e}");
        assert_eq!(e.line, Some(line_of(&text, key)), "{e}");
        assert!(e.message.contains("out of range"), "{e}");
    }
    let e = err(&format!("{GOOD}\n[cost]\ntransfer_bytes_per_us = 0\n"));
    assert_eq!(e.key, "cost.transfer_bytes_per_us", "{e}");
    // The largest accepted costs run to the end without wrapping time back to the start.
    let text = format!(
        "{GOOD}\n[cost]\ndecode_step_base_us = {}\nprefill_ns_per_token = {}\nkv_bytes_per_token = {}\n",
        scenario::MAX_TIME_MS,
        scenario::MAX_NS_PER_UNIT,
        scenario::MAX_BYTES
    );
    let cfg = resolve(&text, &Overrides::default()).unwrap();
    let w = kvsim::simulate(cfg, None, true);
    assert!(w.now().0 >= 1_000_000_000, "a huge cost took {} ns", w.now().0);
}

#[test]
fn every_time_value_has_the_time_bound() {
    let big_ns = u64::MAX - 5;
    for (from, to, key) in [
        ("at_ms = 0", format!("at_ns = {big_ns}"), "request[0].at_ns"),
        ("output_tokens = 4", format!("output_tokens = 4\nabort_at_ns = {big_ns}"), "request[0].abort_at_ns"),
        ("at_ms = 0", format!("at_ms = {}", MAX_TIME_MS + 1), "request[0].at_ms"),
    ] {
        let text = GOOD.replace(from, &to);
        let e = err(&text);
        assert_eq!(e.key, key, "{e}");
        assert_eq!(e.line, Some(line_of(&text, key.split('.').nth(1).unwrap())), "{e}");
    }
    let workload = |extra: &str| {
        format!(
            "{GOOD}\n[workload]\nrequests = 3\ntenants = 2\nmean_interarrival_ms = 10\nprompt_tokens = [{{ weight = 1, min = 10, max = 20 }}]\noutput_tokens = [{{ weight = 1, min = 1, max = 2 }}]\n{extra}\n"
        )
    };
    resolve(&workload(""), &Overrides::default()).unwrap();
    for key in ["start_ms", "abort_within_ms", "mean_interarrival_ms"] {
        let text = workload(&format!("{key} = {}", u64::MAX)).replace(
            "mean_interarrival_ms = 10\n",
            if key == "mean_interarrival_ms" { "" } else { "mean_interarrival_ms = 10\n" },
        );
        let e = err(&text);
        assert_eq!(e.key, format!("workload.{key}"), "{e}");
        assert_eq!(e.line, Some(line_of(&text, key)), "{e}");
    }
    // The arrival process as a whole must fit too.
    let text = workload("")
        .replace("requests = 3", "requests = 10000000")
        .replace("mean_interarrival_ms = 10", &format!("mean_interarrival_ms = {}", MAX_TIME_MS / 1000));
    assert!(err(&text).message.contains("past the time bound"), "{}", err(&text));
}

#[test]
fn a_healthy_request_at_the_time_bound_is_not_a_leak_or_a_hang() {
    let text = GOOD.replace("at_ms = 0", &format!("at_ns = {}", scenario::MAX_TIME_NS));
    let cfg = resolve(&text, &Overrides::default()).unwrap();
    let w = kvsim::simulate(cfg, None, true);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(200));
}

#[test]
fn strings_are_written_back_as_toml() {
    let names = [
        "cafe\u{301}",
        "zero\u{200b}width",
        "nul\u{0}byte",
        "del\u{7f}",
        "esc\u{1b}[31m",
        "quote\"back\\slash",
        "new\nline",
    ];
    for name in names {
        let mut cfg = resolve(GOOD, &Overrides::default()).unwrap();
        cfg.name = name.to_string();
        let text = scenario::to_toml(&cfg, &format!("origin: {name}\nsecond line\u{7}"));
        let back = resolve(&text, &Overrides::default()).unwrap_or_else(|e| panic!("{name:?}: {e}\n{text}"));
        assert_eq!(back, cfg, "{name:?}");
        scenario::validate_config(&cfg, "t.jsonl").unwrap_or_else(|e| panic!("{name:?}: {e}"));
    }
}

#[test]
fn script_errors_name_the_key() {
    let with = |entry: &str| format!("{GOOD}\n[faults]\n[[faults.script]]\n{entry}\n");
    let text = with("kind = \"crash\"\nnode = \"prefill-9\"\nat_ms = 5\nrestart_after_ms = 10");
    let e = err(&text);
    assert_eq!(e.key, "faults.script[0].node", "{e}");
    assert_eq!(e.line, Some(line_of(&text, "node")), "{e}");
    let text = with("kind = \"delay\"\nrequest = 0");
    let e = err(&text);
    assert!(e.message.contains("needs `delay_ms`"), "{e}");
    let text = with("kind = \"transfer_fail\"\nrequest = 7");
    let e = err(&text);
    assert_eq!((e.key.as_str(), e.line), ("faults.script[0].request", Some(line_of(&text, "request = 7"))), "{e}");
    let text = with("kind = \"transfer_fail\"\nrequest = 0\nlag_ms = 3");
    let e = err(&text);
    assert_eq!((e.key.as_str(), e.line), ("faults.script[0].lag_ms", Some(line_of(&text, "lag_ms"))), "{e}");
    let text = with("kind = \"visibility_lag\"\nrequest = 0\nlag_ms = \"soon\"");
    let e = err(&text);
    assert_eq!(e.line, Some(line_of(&text, "lag_ms")), "{e}");
    assert!(e.key.contains("lag_ms"), "{e}");
    let text = with(&format!("kind = \"visibility_lag\"\nrequest = 0\nlag_ms = {}", MAX_TIME_MS + 1));
    let e = err(&text);
    assert_eq!((e.key.as_str(), e.line), ("faults.script[0].lag_ms", Some(line_of(&text, "lag_ms"))), "{e}");
}

#[test]
fn override_errors_blame_the_override_not_a_valid_file_line() {
    let o = |set: &[(&str, &str)], profile: Option<&str>| Overrides {
        profile: profile.map(str::to_string),
        seed: None,
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    // The file's page_size = 16 is valid; --set page_size=0 is not.
    let e = resolve(GOOD, &o(&[("page_size", "0")], None)).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("--set", None), "{e}");
    assert_eq!(e.key, "knobs.page_size");
    let e = resolve(GOOD, &o(&[("chunked_prefill_size", "0")], None)).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("--set", None), "{e}");
    let e = resolve(GOOD, &o(&[("bootstrap_timeout_ms", &u64::MAX.to_string())], None)).unwrap_err();
    assert_eq!(e.file, "--set", "{e}");
    // A bad --profile is the flag's fault, even when the file names a valid profile.
    let text = format!("profile = \"sglang-0.5.22\"\n{GOOD}");
    let e = resolve(&text, &o(&[], Some("sglang-9"))).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("--profile", None), "{e}");
    // A bad value in the file is still placed at its line.
    let text = GOOD.replace("page_size = 16", "page_size = 0");
    let e = resolve(&text, &o(&[], None)).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("h.toml", Some(line_of(&text, "page_size"))), "{e}");
    let text = "profile = \"nope\"\n".to_string() + GOOD;
    let e = resolve(&text, &o(&[], None)).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("h.toml", Some(1)), "{e}");
}

#[test]
fn the_binary_never_aborts_on_huge_numbers() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = scratch("hostile");
    for (i, text) in [
        GOOD.replace("pool_tokens = 8192", "pool_tokens = 8192\nmetadata_slots = 4294967295"),
        GOOD.replace("context_len = 8192", &format!("context_len = {}", u64::MAX)),
        GOOD.replace("prompt_tokens = 100", &format!("prompt_tokens = {}", u64::MAX)),
        format!("{GOOD}\n[cost]\ndecode_step_base_us = {}\n", 1u64 << 62),
    ]
    .iter()
    .enumerate()
    {
        let f = dir.join(format!("h{i}.toml"));
        std::fs::write(&f, text).unwrap();
        let out = std::process::Command::new(bin).args(["run", f.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{i}: {stderr}");
        assert!(stderr.contains(&format!("h{i}.toml:")), "{i}: {stderr}");
    }
}

fn kvsim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A trace of scenarios/small/stub-leak.toml (a leak: exit 10), recorded at `at`.
fn stub_trace(at: &str) -> (String, Vec<String>) {
    let t = at.to_string();
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let (code, _, err) = kvsim(&["run", scen.to_str().unwrap(), "--trace", &t]);
    assert_eq!(code, Some(10), "{err}");
    let lines = std::fs::read_to_string(&t).unwrap().lines().map(str::to_string).collect();
    (t, lines)
}

#[test]
fn replay_compares_the_footer_too() {
    let scratch = crate::Scratch::new("hostile-cli");
    let tmp = |n: &str| scratch.at(n);
    let (_, lines) = stub_trace(&tmp("footer.jsonl"));
    let mut footer: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    footer["exit_code"] = 0.into();
    footer["violations"] = serde_json::Value::Array(vec![]);
    let mut edited = lines.clone();
    *edited.last_mut().unwrap() = serde_json::to_string(&footer).unwrap();
    let f = tmp("footer-edited.jsonl");
    std::fs::write(&f, edited.join("\n") + "\n").unwrap();
    let (code, out, err) = kvsim(&["replay", &f]);
    assert_eq!(code, Some(3), "an edited footer must not replay: {out}{err}");
    assert!(err.contains("exit_code: recorded 0, replayed 10") && err.contains("violations"), "{err}");
    // Text after the footer is bad input.
    std::fs::write(&f, lines.join("\n") + "\n{\"t\":1}\n").unwrap();
    let (code, _, err) = kvsim(&["replay", &f]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!(":{}:", lines.len() + 1)), "{err}");
}

#[test]
#[allow(clippy::disallowed_methods)] // a guard against drawing 2^32 requests, not a benchmark
fn headers_with_huge_generators_are_refused_at_once_by_every_reader() {
    let scratch = crate::Scratch::new("hostile-cli");
    let tmp = |n: &str| scratch.at(n);
    let (_, lines) = stub_trace(&tmp("gen.jsonl"));
    let mut header: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    header["config"]["generator"] = serde_json::json!({
        "requests": u32::MAX, "tenants": 2, "mean_interarrival_us": 1000,
        "prompt_tokens": [{"weight": 1, "min": 10, "max": 20}],
        "output_tokens": [{"weight": 1, "min": 1, "max": 2}],
        "client_abort": {"num": 0, "den": 1}, "abort_within_ms": 1000, "start_ms": 0
    });
    let mut edited = lines.clone();
    edited[0] = serde_json::to_string(&header).unwrap();
    let f = tmp("gen-huge.jsonl");
    std::fs::write(&f, edited.join("\n") + "\n").unwrap();
    for cmd in
        [vec!["replay", f.as_str()], vec!["shrink", f.as_str(), "--out", "/dev/null"], vec!["confirm", f.as_str()]]
    {
        let started = std::time::Instant::now();
        let (code, _, err) = kvsim(&cmd);
        assert_eq!(code, Some(2), "{cmd:?}: {err}");
        assert!(err.contains("gen-huge.jsonl") && err.contains("requests"), "{cmd:?}: {err}");
        assert!(started.elapsed().as_secs() < 10, "{cmd:?} took {:?}", started.elapsed());
    }
}

#[test]
fn names_with_any_characters_replay() {
    let scratch = crate::Scratch::new("hostile-cli");
    let tmp = |n: &str| scratch.at(n);
    let text =
        GOOD.replacen("context_len", "name = \"cafe\u{301} \u{200b} \\u0000 \\u007f \\u001b[31m\"\ncontext_len", 1);
    let s = tmp("named.toml");
    std::fs::write(&s, text).unwrap();
    let t = tmp("named.jsonl");
    let (code, _, err) = kvsim(&["run", &s, "--trace", &t]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = kvsim(&["replay", &t]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("replay matches"), "{out}");
    let shrunk = tmp("named-shrunk.toml");
    // Read and run whole: the clean run is refused for what it is (nothing to shrink).
    let (code, _, err) = kvsim(&["shrink", &t, "--out", &shrunk]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the run is clean (no signature to keep)"), "{err}");
}

#[test]
fn campaign_flags_are_bounded() {
    let scratch = crate::Scratch::new("hostile-cli");
    let tmp = |n: &str| scratch.at(n);
    for args in [
        ["fuzz", "--jobs", "4294967295", "--runs", "1"],
        ["fuzz", "--jobs", "0", "--runs", "1"],
        ["fuzz", "--time", "99999999999999999h", "--runs", "1"],
    ] {
        let corpus = tmp("flags-corpus");
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--corpus", &corpus]);
        if a.contains(&"--time") {
            a.retain(|x| *x != "--runs" && *x != "1");
        }
        let (code, _, err) = kvsim(&a);
        assert_eq!(code, Some(2), "{a:?}: {err}");
    }
}

/// `kvsim shrink` never writes over its input, and over another existing file only with
/// `--force`: both are refused before any run (a user's case, or an earlier shrunk one, was
/// silently replaced).
#[test]
fn shrink_refuses_to_overwrite_its_input_or_an_existing_file() {
    let scratch = crate::Scratch::new("hostile-cli");
    let tmp = |n: &str| scratch.at(n);
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let input = tmp("shrink-input.toml");
    std::fs::copy(&scen, &input).unwrap();
    let before = std::fs::read_to_string(&input).unwrap();
    let (code, _, err) = kvsim(&["shrink", &input, "--out", &input]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("that is the input"), "{err}");
    let (code, _, err) = kvsim(&["shrink", &input, "--out", &input, "--force"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(std::fs::read_to_string(&input).unwrap(), before, "the input is untouched");
    let other = tmp("shrink-other.toml");
    std::fs::write(&other, "keep me\n").unwrap();
    let (code, _, err) = kvsim(&["shrink", &input, "--out", &other]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the file exists; give --force"), "{err}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep me\n");
    let (code, out, err) = kvsim(&["shrink", &input, "--out", &other, "--force", "--budget", "50"]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(std::fs::read_to_string(&other).unwrap().contains("[[request]]"), "overwritten with --force");
}

/// An output flag never replaces the scenario being run, and two outputs never share a file
/// (`kvsim run s.toml --csv s.toml` replaced the scenario with its CSV, exit 10, no warning).
#[test]
fn outputs_never_overwrite_the_scenario_or_each_other() {
    let dir = scratch("outputs");
    let scen = dir.join("s.toml");
    let text = std::fs::read_to_string(crate::scenarios_dir().join("small/stub-leak.toml")).unwrap();
    std::fs::write(&scen, &text).unwrap();
    let s = scen.to_str().unwrap();
    let other = format!("{}/../{}/s.toml", dir.display(), dir.file_name().unwrap().to_string_lossy());
    for flag in ["--csv", "--trace", "--svg", "--perfetto"] {
        for target in [s, other.as_str()] {
            let (code, _, err) = kvsim(&["run", s, flag, target]);
            assert_eq!(code, Some(2), "{flag} {target}: {err}");
            assert!(err.contains("that is the scenario being run"), "{err}");
        }
    }
    assert_eq!(std::fs::read_to_string(&scen).unwrap(), text, "the scenario is untouched");
    let pic = dir.join("p.out");
    let (code, _, err) = kvsim(&["run", s, "--svg", pic.to_str().unwrap(), "--perfetto", pic.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("writes the same file"), "{err}");
    // Another existing file is overwritten, as a CI job writing its trace on every run expects.
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, "old").unwrap();
    let (code, _, err) = kvsim(&["run", s, "--trace", trace.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{err}");
    assert!(std::fs::read_to_string(&trace).unwrap().starts_with("{\"kind\":\"header\""));
    // An empty output path names its flag.
    let (code, _, err) = kvsim(&["run", s, "--svg", ""]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--svg: an empty path"), "{err}");
    // A hard link to the scenario is the scenario (only another path to it was caught).
    let link = dir.join("link.toml");
    let _ = std::fs::remove_file(&link);
    std::fs::hard_link(&scen, &link).unwrap();
    let (code, _, err) = kvsim(&["run", s, "--trace", link.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("that is the scenario being run"), "{err}");
    // The workload trace a scenario reads is an input too: `--trace` replaced it.
    let mooncake = crate::scenarios_dir().join("mooncake-conversation.toml");
    let workload = crate::scenarios_dir().join("../data/mooncake/conversation_trace.jsonl");
    let before = std::fs::read(&workload).unwrap();
    for flag in ["--trace", "--csv"] {
        let (code, _, err) = kvsim(&["run", mooncake.to_str().unwrap(), flag, workload.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("that is the workload trace the scenario reads"), "{err}");
    }
    assert_eq!(std::fs::read(&workload).unwrap(), before, "the workload is untouched");
}

/// A run stopped at the horizon with events still to come was watched up to the horizon: its
/// virtual time and a hang's "no final status by" say the horizon, not its last event's time
/// (they said 0.000s when every message took longer than the horizon).
#[test]
fn a_run_cut_at_the_horizon_ends_there() {
    let dir = scratch("horizon");
    let scen = dir.join("slow.toml");
    std::fs::write(
        &scen,
        "context_len = 8192\nliveness_bound_s = 600\n[[prefill]]\npool_tokens = 4096\n[[decode]]\npool_tokens = 8192\n\
         [knobs]\npage_size = 16\n[cost]\nmessage_latency_us = 4000000000\n\
         [[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 100\noutput_tokens = 4\n",
    )
    .unwrap();
    let (code, out, err) = kvsim(&["run", scen.to_str().unwrap()]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("events over 600.000s of virtual time"), "{out}");
    assert!(out.contains("no final status by t=600.000s"), "{out}");
}

/// A timing channel's shrunk case says the check that shows it, in its header and its exit
/// status (it exited 11, as if it only hung), and running it without the check says so (it ran
/// clean, exit 0, with nothing said).
#[test]
fn a_channels_shrunk_case_names_its_check() {
    let dir = scratch("channel");
    let out = dir.join("tc.toml");
    let input = crate::scenarios_dir().join("catalogue/prefix-timing-channel.toml");
    let (code, stdout, err) = kvsim(&[
        "shrink",
        input.to_str().unwrap(),
        "--signature",
        "timing_channel/prefix_hit",
        "--out",
        out.to_str().unwrap(),
        "--force",
        "--budget",
        "200",
    ]);
    assert_eq!(code, Some(10), "{stdout}{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("# Reproduce: kvsim run <this file> --check noninterference"), "{text}");
    // Without the check the oracle still names the hit (`cross_tenant_prefix_hit`), but not the
    // channel the file was saved for: the note says how to see it.
    let (code, stdout, err) = kvsim(&["run", out.to_str().unwrap()]);
    assert_eq!(code, Some(10));
    assert!(
        stdout.contains("cross_tenant_prefix_hit/global_prefix_cache") && !stdout.contains("timing_channel"),
        "{stdout}"
    );
    assert!(err.contains("which only --check noninterference shows"), "{err}");
    let (code, _, err) = kvsim(&["run", out.to_str().unwrap(), "--check", "noninterference"]);
    assert_eq!(code, Some(10));
    assert!(!err.contains("which only"), "{err}");
    // Shrunk again as a file, it keeps the signature its header names (it read "the run is
    // clean; nothing to shrink", exit 0).
    let again = dir.join("tc2.toml");
    let (code, stdout, err) =
        kvsim(&["shrink", out.to_str().unwrap(), "--out", again.to_str().unwrap(), "--force", "--budget", "50"]);
    assert_eq!(code, Some(10), "{stdout}{err}");
    assert!(stdout.contains("shrunk `timing_channel/prefix_hit`"), "{stdout}");
}

/// A run traced with `--check noninterference` keeps the check in its trace's header: its replay
/// exits as the run did (it said "exit 0 as the run" of a run that exited 10), shrink of the trace
/// keeps the channel (it said "the run is clean"), and confirm says that a channel's findings are
/// no reads (it said "the run has no violation").
#[test]
fn a_traced_channel_replays_and_shrinks_with_its_check() {
    let dir = scratch("channel-trace");
    let trace = dir.join("tc.jsonl");
    let input = crate::scenarios_dir().join("catalogue/prefix-timing-channel.toml");
    let (code, _, err) =
        kvsim(&["run", input.to_str().unwrap(), "--check", "noninterference", "--trace", trace.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{err}");
    let (code, stdout, err) = kvsim(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{stdout}{err}");
    assert!(stdout.contains("exit 10 as the run") && err.contains("noninterference check (the header's)"), "{err}");
    let out = dir.join("s.toml");
    let (code, stdout, err) = kvsim(&[
        "shrink",
        trace.to_str().unwrap(),
        "--signature",
        "timing_channel/prefix_hit",
        "--out",
        out.to_str().unwrap(),
        "--budget",
        "50",
    ]);
    assert_eq!(code, Some(10), "{stdout}{err}");
    assert!(stdout.contains("shrunk `timing_channel/prefix_hit`"), "{stdout}");
    let (_, stdout, err) = kvsim(&["confirm", trace.to_str().unwrap()]);
    assert!(stdout.contains("nothing to confirm") && !stdout.contains("the run has no violation\n"), "{stdout}{err}");
    // The same run traced without the check replays as the plain run it was.
    let plain = dir.join("plain.jsonl");
    let (code, _, _) = kvsim(&["run", input.to_str().unwrap(), "--trace", plain.to_str().unwrap()]);
    let (again, _, err) = kvsim(&["replay", plain.to_str().unwrap()]);
    assert_eq!(again, code, "{err}");
    assert!(!err.contains("noninterference"), "{err}");
}

/// Liveness mode: the open requests whose deadlines all pass before the next event are hangs
/// together, and the run's end is the latest of those deadlines (it was the earliest, and hangs
/// were dated after the run's end).
#[test]
fn no_hang_is_dated_after_the_runs_end() {
    let dir = scratch("hang-end");
    let s = dir.join("s1.toml");
    std::fs::write(
        &s,
        "name = \"s1\"\nseed = 3\nprofile = \"sglang-0.5.16\"\ncontext_len = 16384\nliveness_bound_s = 600\n\
         [[prefill]]\ncount = 2\npool_tokens = 8192\nmetadata_slots = 64\nmax_running_requests = 32\n\
         [[decode]]\npool_tokens = 32768\nmetadata_slots = 64\nmax_running_requests = 32\n\
         [router]\npolicy = \"least_loaded\"\n\
         [workload]\nrequests = 20\ntenants = 3\nmean_interarrival_ms = 50\nstart_ms = 10\nclient_abort = \"1/5\"\nabort_within_ms = 2000\n\
         [[workload.prompt_tokens]]\nmin = 100\nmax = 2000\nweight = 3\n\
         [[workload.prompt_tokens]]\nmin = 9000\nmax = 12000\nweight = 1\n\
         [[workload.output_tokens]]\nmin = 1\nmax = 32\nweight = 1\n\
         [[request]]\nat_ms = 5000\ntenant = 7\nprompt_tokens = 10000\noutput_tokens = 5\n\
         [knobs]\npage_size = 16\n",
    )
    .unwrap();
    let (code, out, err) =
        kvsim(&["run", s.to_str().unwrap(), "--profile", "sglang-0.5.22", "--liveness", "60s", "--json"]);
    assert_eq!(code, Some(11), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let end = v["virtual_end_ns"].as_u64().unwrap();
    let hangs: Vec<u64> = v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "request_hang")
        .map(|x| x["at_ns"].as_u64().unwrap())
        .collect();
    assert!(hangs.len() >= 2, "{hangs:?}");
    assert!(hangs.iter().all(|&t| t <= end), "{hangs:?} after the end {end}");
    assert_eq!(hangs.iter().max(), Some(&end));
}

/// A clean input has nothing to shrink: bad input, and no `--out` file (it exited 0 and wrote
/// nothing, which a script took for success).
#[test]
fn shrinking_a_clean_run_is_refused() {
    let dir = scratch("clean-shrink");
    let out = dir.join("fx.toml");
    let input = crate::scenarios_dir().join("glm53-fixed-config.toml");
    let (code, stdout, err) = kvsim(&["shrink", input.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stdout}{err}");
    assert!(err.contains("the run is clean (no signature to keep): nothing to shrink"), "{err}");
    assert!(!out.exists());
}

/// The incident shrinks to a fixpoint within one command when the budget allows (16 passes ended
/// it after 1,530 runs whatever `--budget` said, and the message blamed the budget); a budget that
/// does end it is named; a budget of 0 is refused.
#[test]
fn shrinking_runs_to_a_fixpoint_within_the_budget() {
    let dir = scratch("fixpoint");
    let out = dir.join("inc.toml");
    let inc = crate::scenarios_dir().join("glm53-incident.toml");
    let shrink = |budget: &str| {
        kvsim(&["shrink", inc.to_str().unwrap(), "--out", out.to_str().unwrap(), "--force", "--budget", budget])
    };
    let (code, stdout, err) = shrink("100000");
    assert_eq!(code, Some(10), "{stdout}{err}");
    assert!(!stdout.contains("Not minimal yet"), "{stdout}");
    assert!(!std::fs::read_to_string(&out).unwrap().contains("Not minimal yet"));
    let (code, stdout, _) = shrink("100");
    assert_eq!(code, Some(10));
    assert!(stdout.contains("Not minimal yet: the run budget ended shrinking after 100 runs"), "{stdout}");
    let (code, _, err) = shrink("0");
    assert_eq!(code, Some(2), "{err}");
}

/// An input that is not a scenario's text is named for what it is: empty, a trace, gzip, UTF-16,
/// binary (a device such as /dev/zero was read until memory ran out; the others said "missing
/// field `context_len`", "invalid key-value pair" or "stream did not contain valid UTF-8").
#[test]
fn inputs_that_are_not_scenario_text_are_named() {
    let dir = scratch("not-text");
    let good = std::fs::read_to_string(crate::scenarios_dir().join("small/stub-leak.toml")).unwrap();
    let mut utf16 = vec![0xff, 0xfe];
    utf16.extend(good.encode_utf16().flat_map(u16::to_le_bytes));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.toml", b"\n  \n".to_vec(), "an empty file"),
        ("trace.jsonl", b"{\"kind\":\"header\"}\n".to_vec(), "a kvsim trace (JSON Lines), not a scenario"),
        ("report.json", b"{\n  \"scenario\": \"x\"\n}\n".to_vec(), "JSON, not a scenario"),
        ("s.toml.gz", vec![0x1f, 0x8b, 8, 0, 0, 0], "gzip-compressed"),
        ("u16.toml", utf16, "UTF-16 text"),
        ("bin.toml", vec![b'a', 0, b'b'], "binary data (a NUL byte)"),
        // A Latin-1 byte in a comment: named with its line, not only its byte offset.
        ("latin1.toml", [format!("{good}# caf").as_bytes(), &[0xe9]].concat(), "invalid bytes on line"),
    ];
    for (name, bytes, says) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        for cmd in ["run", "shrink", "check"] {
            let (code, _, err) = kvsim(&[cmd, p.to_str().unwrap()]);
            assert_eq!(code, Some(2), "{cmd} {name}: {err}");
            if cmd != "shrink" || !name.contains(".json") {
                assert!(err.contains(says), "{cmd} {name}: {err}");
            }
        }
        // The trace readers name them too (gzip and UTF-16 read as "not valid UTF-8").
        if !name.contains(".json") && name != "empty.toml" && name != "latin1.toml" {
            let (code, _, err) = kvsim(&["replay", p.to_str().unwrap()]);
            assert_eq!(code, Some(2), "replay {name}: {err}");
            assert!(err.contains(says), "replay {name}: {err}");
        }
    }
    // A scenario given to replay is named as not a trace.
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let (code, _, err) = kvsim(&["replay", scen.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not a kvsim trace: its first line is not JSON"), "{err}");
    if std::path::Path::new("/dev/zero").exists() {
        // Every reader refuses a device from its first bytes (they read until memory ran out).
        for cmd in [&["run"][..], &["replay"], &["confirm"], &["check"], &["matrix"], &["audit"]] {
            let (code, _, err) = kvsim(&[cmd, &["/dev/zero"]].concat());
            assert_eq!(code, Some(2), "{cmd:?}: {err}");
            assert!(err.contains("binary data"), "{cmd:?}: {err}");
        }
    }
}

/// Faults that apply but change nothing are said (a delay of 0 ms, random faults healed from the
/// start: the same trace hash as no fault, with nothing said).
#[test]
fn faults_that_change_nothing_are_noted() {
    let dir = scratch("noop-faults");
    let good = std::fs::read_to_string(crate::scenarios_dir().join("small/stub-leak.toml")).unwrap();
    let s = dir.join("noop.toml");
    std::fs::write(
        &s,
        format!(
            "{good}\n[faults]\ntransfer_fail = \"1/2\"\nheal_at_ms = 0\n\n[[faults.script]]\nkind = \"delay\"\nrequest = 0\ndelay_ms = 0\n"
        ),
    )
    .unwrap();
    let (code, out, _) = kvsim(&["run", s.to_str().unwrap()]);
    assert_eq!(code, Some(10));
    assert!(out.contains("note: faults.script[0] has delay_ms = 0: it changes nothing"), "{out}");
    assert!(
        out.contains("note: faults.heal_at_ms = 0: the random faults (transfer_fail) are healed from the start"),
        "{out}"
    );
    let (_, plain, _) = kvsim(&["run", crate::scenarios_dir().join("small/stub-leak.toml").to_str().unwrap()]);
    let hash =
        |t: &str| t.lines().find(|l| l.contains("trace hash")).map(|l| l.rsplit(' ').next().unwrap().to_string());
    assert_eq!(hash(&out), hash(&plain), "nothing changed the run");
}

/// Printed commands paste as they are: a name with a space is quoted (`kvsim new "a b"` said
/// `kvsim run a b.toml`), and a path that starts with `-` is written `./-…` (pasted, `kvsim run
/// -dash.toml` read it as flags).
#[test]
fn printed_commands_quote_names_and_guard_dash_paths() {
    let dir = scratch("paste");
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let out = std::process::Command::new(bin).current_dir(&dir).args(["new", "a b"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let cmd = text.split('`').nth(1).expect("a command in backquotes");
    assert_eq!(shlex::split(cmd).unwrap(), ["kvsim", "run", "a b.toml"], "{text}");
    let file = std::fs::read_to_string(dir.join("a b.toml")).unwrap();
    assert!(file.contains("`kvsim new 'a b' --like small`"), "{}", &file[..200]);
    let out = std::process::Command::new(bin).current_dir(&dir).args(["new", "--", "-n"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let header = std::fs::read_to_string(dir.join("-n.toml")).unwrap();
    let cmd = header.split('`').nth(3).expect("the command in the header");
    assert_eq!(shlex::split(cmd).unwrap(), ["kvsim", "new", "--like", "small", "--", "-n"], "{cmd}");
    // Written elsewhere than NAME.toml, the header's command says where.
    let out =
        std::process::Command::new(bin).current_dir(&dir).args(["new", "m", "--out", "o t.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let header = std::fs::read_to_string(dir.join("o t.toml")).unwrap();
    let cmd = header.split('`').nth(3).expect("the command in the header");
    assert_eq!(shlex::split(cmd).unwrap(), ["kvsim", "new", "m", "--like", "small", "--out", "o t.toml"], "{cmd}");
    let dash = dir.join("-dash.toml");
    std::fs::copy(dir.join("a b.toml"), &dash).unwrap();
    std::fs::write(
        &dash,
        std::fs::read_to_string(&dash).unwrap() + "\n[[expect]]\nname = \"x\"\nviolations = [\"double_free\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(bin).current_dir(&dir).args(["check", "--", "-dash.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find_map(|l| l.strip_prefix("reproduce `x`: ")).expect("a reproduce line");
    let words = shlex::split(line).unwrap();
    assert_eq!(words[2], "./-dash.toml", "{line}");
    let run = std::process::Command::new(bin).current_dir(&dir).args(&words[1..]).output().unwrap();
    assert_ne!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--profile` naming the profile a file without `profile =` runs anyway (the default, as every
/// printed reproduce line names it) changes nothing: no note about its `[knobs]`. Another
/// profile still gets the note.
#[test]
fn the_default_profile_named_gets_no_knobs_note() {
    let dir = scratch("default-profile");
    let f = dir.join("s.toml");
    std::fs::write(&f, crate::bad_input::GOOD.replace("page_size = 16", "page_size = 32")).unwrap();
    let f = f.to_str().unwrap();
    let (_, _, err) = kvsim(&["run", f, "--profile", kvsim::scenario::DEFAULT_PROFILE]);
    assert!(!err.contains("note:"), "{err}");
    let (_, _, err) = kvsim(&["run", f, "--profile", "vllm-nixl"]);
    assert!(err.contains("note:") && err.contains("page_size = 32"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// kvsim run with `bytes` written into its standard input.
fn piped_into(args: &[&str], bytes: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    child.wait_with_output().unwrap()
}

/// A scenario read from a pipe (`cat S | kvsim run /dev/stdin`) runs as the file does: kvsim
/// reads an input more than once (its header's notes, then the scenario), and a pipe gives its
/// bytes once ("an empty file", exit 2, before). The run (and an exploration) says its reproduce
/// line cannot work.
#[test]
fn a_scenario_from_a_pipe_runs_and_says_it_must_be_saved_to_reproduce() {
    let src = crate::scenarios_dir().join("small/stub-leak.toml");
    let text = std::fs::read(&src).unwrap();
    // kvsim with the scenario written into its standard input.
    let piped = |args: &[&str]| piped_into(args, &text);
    let out = piped(&["run", "/dev/stdin"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{err}");
    assert!(err.contains("is a stream") && err.contains("save the scenario to a file"), "{err}");
    let (_, from_file, _) = kvsim(&["run", src.to_str().unwrap()]);
    let hash = |s: &str| s.lines().find(|l| l.contains("trace hash")).map(str::to_string);
    assert_eq!(hash(&String::from_utf8_lossy(&out.stdout)), hash(&from_file));
    // `shrink` looks at its input's first bytes before it reads it (a trace or a scenario?).
    let shrink_dir = scratch("piped-shrink");
    let shrunk = shrink_dir.join("s.toml");
    let out = piped(&["shrink", "/dev/stdin", "--force", "--budget", "20", "--out", shrunk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(shrunk.is_file());
    // `explore` prints a reproduce line naming its scenario: the same note.
    let out = piped(&["explore", "/dev/stdin", "--max-states", "2000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("reproduce: kvsim run /dev/stdin"));
    assert!(err.contains("is a stream") && err.contains("save the scenario to a file"), "{err}");
}

/// A trace read from a pipe (`cat T | kvsim confirm /dev/stdin`) is read as the file is:
/// `confirm` and `shrink` read a trace more than once (its records against a re-run, then its
/// memory log or configuration), and the pipe's second read gave nothing ("empty trace", exit 2).
#[test]
fn a_trace_from_a_pipe_is_confirmed_and_shrunk_as_the_file_is() {
    let dir = scratch("piped-trace");
    let trace = dir.join("t.jsonl");
    let src = crate::scenarios_dir().join("small/stub-leak.toml");
    let (code, _, err) = kvsim(&["run", src.to_str().unwrap(), "--trace", trace.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{err}");
    let text = std::fs::read(&trace).unwrap();
    let piped = |args: &[&str]| piped_into(args, &text);
    let out = piped(&["confirm", "/dev/stdin", "--backend", "cpu"]);
    let (code, from_file, _) = kvsim(&["confirm", trace.to_str().unwrap(), "--backend", "cpu"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), code, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("CONFIRMED"), "{stdout}");
    let verdicts = |s: &str| s.lines().filter(|l| l.contains("CONFIRMED")).count();
    assert_eq!(verdicts(&stdout), verdicts(&from_file));
    let shrunk = dir.join("s.toml");
    let out = piped(&["shrink", "/dev/stdin", "--force", "--budget", "20", "--out", shrunk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(shrunk.is_file());
}

/// A scenario reached through a symbolic link reads the files it names by a relative path
/// (`[trace] file`) from its own folder, the link target's (it joined them to the link's folder:
/// the shipped Mooncake scenario, linked elsewhere, failed with "No such file").
#[test]
fn a_linked_scenario_reads_its_trace_from_its_own_folder() {
    let dir = scratch("linked");
    let real = dir.join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("w.csv"), "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,2\n0.01,200,2\n")
        .unwrap();
    let scenario = "context_len = 8192\n[[prefill]]\npool_tokens = 8192\n[[decode]]\npool_tokens = 8192\n[trace]\nfile = \"w.csv\"\n";
    std::fs::write(real.join("s.toml"), scenario).unwrap();
    let link = dir.join("link.toml");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(real.join("s.toml"), &link).unwrap();
    let (code, out, err) = kvsim(&["run", link.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("2 requests"), "{out}");
}

/// `shrink --signature` takes a kind that begins exactly one of the run's signatures (it refused
/// `wrong_status` beside `wrong_status/rejected_answered_200`), and a misspelt kind gets a
/// did-you-mean (it had none, and a stray colon).
#[test]
fn shrink_takes_a_kind_that_names_one_signature() {
    let dir = scratch("shrink-kind");
    let out = dir.join("k.toml");
    let input = crate::scenarios_dir().join("small/stub-leak.toml");
    let args = |sig: &'static str| {
        vec![
            "shrink".to_string(),
            input.to_str().unwrap().to_string(),
            "--signature".into(),
            sig.into(),
            "--out".into(),
            out.to_str().unwrap().to_string(),
            "--force".into(),
            "--budget".into(),
            "30".into(),
        ]
    };
    let run = |a: Vec<String>| kvsim(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, stdout, err) = run(args("wrong_status"));
    assert_eq!(code, Some(10), "{stdout}{err}");
    assert!(err.contains("note: --signature wrong_status: the run's signature `wrong_status/"), "{err}");
    let (code, _, err) = run(args("cross_tenant_reed"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("does not show signature `cross_tenant_reed`; did you mean `cross_tenant_read`? (it shows: "),
        "{err}"
    );
}
