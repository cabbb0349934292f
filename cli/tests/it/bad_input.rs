//! Bad scenario files and overrides: a clear error naming file, line and key; never a panic.

use kvsim::scenario::{Overrides, Scenario};

/// A small valid scenario (1P1D, one request) that the bad-input tests break one key at a time.
pub const GOOD: &str = r#"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 100
output_tokens = 4
"#;

fn resolve(text: &str, set: &[(&str, &str)]) -> Result<kvsim::config::SimConfig, kvsim::scenario::ScenarioError> {
    let sc = Scenario::parse("bad.toml", text)?;
    let o = Overrides { set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() };
    sc.resolve(&o)
}

#[test]
fn good_file_resolves() {
    resolve(GOOD, &[]).unwrap();
}

#[test]
fn unknown_key_names_line_and_key() {
    let e = resolve(&GOOD.replace("pool_tokens = 8192", "pool_tokens = 8192\npool_tokenz = 3"), &[]).unwrap_err();
    assert_eq!(e.file, "bad.toml");
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.to_string().contains("pool_tokenz"), "{e}");
}

#[test]
fn wrong_type_names_line() {
    let e = resolve(&GOOD.replace("prompt_tokens = 100", "prompt_tokens = \"many\""), &[]).unwrap_err();
    assert_eq!(e.line, Some(12), "{e}");
    assert!(e.to_string().contains("prompt_tokens"), "{e}");
}

#[test]
fn page_size_zero_is_refused() {
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 0"), &[]).unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.key.contains("page_size"), "{e}");
}

#[test]
fn pool_smaller_than_a_page_is_refused() {
    let e = resolve(&GOOD.replace("pool_tokens = 4096", "pool_tokens = 8"), &[]).unwrap_err();
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().contains("smaller than one page"), "{e}");
}

#[test]
fn unknown_knob_and_bad_values() {
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nreject_mod = \"x\""), &[]).unwrap_err();
    assert_eq!(e.line, Some(9), "{e}");
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nreject_mode = \"sometimes\""), &[]).unwrap_err();
    assert_eq!(e.line, Some(9), "{e}");
    assert!(e.key.contains("reject_mode"), "{e}");
    let e = resolve(GOOD, &[("no_such_knob", "1")]).unwrap_err();
    assert_eq!(e.file, "--set");
    let e = resolve(GOOD, &[("free_list_policy", "random")]).unwrap_err();
    assert_eq!(e.file, "--set", "{e}");
    let e = resolve(GOOD, &[("page_size", "-3")]).unwrap_err();
    assert!(e.key.contains("page_size"), "{e}");
}

/// An on/off knob takes `on`/`off`, `yes`/`no`, `true`/`false` and a TOML boolean, in a scenario
/// and in `--set` (the error message lists them all); any other word is refused.
#[test]
fn on_off_knobs_take_the_words_and_booleans_their_message_lists() {
    for v in ["true", "\"true\"", "\"yes\"", "\"on\""] {
        let c = resolve(&GOOD.replace("page_size = 16", &format!("page_size = 16\nkv_checksum = {v}")), &[]).unwrap();
        assert_eq!(c.knobs.kv_checksum, kvsim::config::OnOff::On, "{v}");
    }
    let c = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nkv_checksum = false"), &[]).unwrap();
    assert_eq!(c.knobs.kv_checksum, kvsim::config::OnOff::Off);
    for v in ["true", "yes", "on"] {
        assert_eq!(resolve(GOOD, &[("kv_checksum", v)]).unwrap().knobs.kv_checksum, kvsim::config::OnOff::On, "{v}");
    }
    let e = resolve(GOOD, &[("kv_checksum", "ON")]).unwrap_err();
    assert!(e.to_string().contains("expected one of `off`, `on`, `no`, `yes`, `false`, `true`"), "{e}");
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nkv_checksum = 1"), &[]).unwrap_err();
    assert!(e.key.contains("kv_checksum"), "{e}");
}

/// Prefix caches match whole 512-token blocks: a page size that does not divide 512 with
/// requests that carry prefix blocks would silently cache nothing, so it is refused.
#[test]
fn a_page_size_no_prefix_block_divides_is_refused_with_prefix_blocks() {
    let src = std::fs::read_to_string(crate::scenarios_dir().join("catalogue/cross-tenant-prefix-hit.toml")).unwrap();
    let e = kvsim::scenario::Scenario::parse("p.toml", &src)
        .unwrap()
        .resolve(&kvsim::scenario::Overrides { set: vec![("page_size".into(), "1024".into())], ..Default::default() })
        .unwrap_err();
    assert!(e.key.contains("page_size") && e.message.contains("does not divide the 512-token prefix block"), "{e}");
    // Without prefix blocks any page size is fine.
    assert!(resolve(GOOD, &[("page_size", "1024")]).is_ok());
}

/// A parse error names the key it is about: inside an inline table (every entry on one line, the
/// line named its last key), and a duplicate key (which the parse drops, so nothing was named).
#[test]
fn parse_errors_name_the_key_in_inline_tables_and_duplicates() {
    let parse = |t: &str| kvsim::scenario::Scenario::parse("x.toml", t).err().unwrap_or_else(|| panic!("{t}"));
    let base = "context_len = 8192\n[[decode]]\npool_tokens = 8192\n";
    let e = parse(&format!("{base}[workload]\nprompt_tokens = [{{ weight = 8, min = -16, max = 8000 }}]\n"));
    assert_eq!(e.key, "workload.prompt_tokens[0].min", "{e}");
    let e = parse(&format!("prefill = [{{ pool_tokens = 4096, count = -1 }}]\n{base}"));
    assert_eq!(e.key, "prefill[0].count", "{e}");
    let e = parse(&format!("{base}[workload]\nprompt_tokens = [{{ weight = 1, min = 16, max = 80, bogus = 1 }}]\n"));
    assert!(e.key.ends_with(".bogus") || e.message.contains("bogus"), "{e}");
    let e = parse(&format!("context_len = 8192\ncontext_len = 4096\n{base}"));
    assert_eq!((e.line, e.key.as_str()), (Some(2), "context_len"), "{e}");
}

/// A trace whose window or limit selects none of its rows is named as such, not "add a
/// [workload] or [[request]] entries".
#[test]
fn a_trace_that_gives_no_requests_is_named() {
    let data = crate::scenarios_dir().join("../data/mooncake/conversation_trace.jsonl");
    let text = format!(
        "context_len = 8192\n[[prefill]]\npool_tokens = 4096\n[[decode]]\npool_tokens = 8192\n[trace]\nfile = {:?}\nlimit = 0\n",
        data.to_str().unwrap()
    );
    let dir = crate::Scratch::new("trace-none");
    let f = dir.join("s.toml");
    std::fs::write(&f, &text).unwrap();
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["run", f.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`trace`: the trace gives no requests"), "{err}");
    // A zero time scale is the scenario's key at fault, not the trace file.
    std::fs::write(&f, text.replace("limit = 0", "time_scale_permille = 0")).unwrap();
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["run", f.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":8: `trace.time_scale_permille`: must be positive"), "{err}");
}

/// Flags that would make a command do nothing, or one thing while asking two, are refused:
/// `fuzz --runs 0` ("no violations found", exit 0, before) and `run --json --format csv` (JSON).
#[test]
fn vacuous_or_contradictory_flags_are_refused() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let dir = crate::Scratch::new("runs0");
    let corpus = dir.join("corpus");
    for args in [
        vec!["fuzz", "--runs", "0", "--corpus", corpus.to_str().unwrap()],
        vec!["run", scen.to_str().unwrap(), "--json", "--format", "csv"],
    ] {
        let out = std::process::Command::new(bin).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    assert!(!corpus.exists());
}

/// The heartbeat's time to declare a peer dead (interval × failures) is checked under its own
/// name, on the knob that was given; the interval alone may be as long as any time.
#[test]
fn the_heartbeat_product_is_named_on_the_knob_given() {
    let e = resolve(GOOD, &[("heartbeat_failures", "9223372036854775807")]).unwrap_err();
    assert_eq!(e.key, "knobs.heartbeat_failures", "{e}");
    assert!(e.message.contains("the time to declare a peer dead"), "{e}");
    assert!(resolve(GOOD, &[("heartbeat_interval_ms", "4611686018427"), ("heartbeat_failures", "1")]).is_ok());
}

#[test]
fn impossible_configurations() {
    let e = resolve(&GOOD.replace("[[decode]]\npool_tokens = 8192\n", ""), &[]).unwrap_err();
    assert!(e.to_string().contains("decode"), "{e}");
    let e = resolve(&GOOD.replace("pool_tokens = 4096", "pool_tokens = 4100"), &[]).unwrap_err();
    assert!(e.to_string().contains("multiple of page_size"), "{e}");
    let e = resolve("context_len = 10\n", &[]).unwrap_err();
    assert!(e.to_string().contains("prefill"), "{e}");
    let e = resolve("context_len = \n", &[]).unwrap_err();
    assert_eq!(e.line, Some(1), "{e}");
    let e = resolve(&format!("{GOOD}\n[faults]\ntransfer_fail = \"3/2\"\n"), &[]).unwrap_err();
    assert!(e.to_string().contains("exceed"), "{e}");
    // Digits only, as the schema says (a sign passed the parser and failed in the editor); a
    // whole number is a ratio over 1 in both.
    for bad in ["+1/2", "1/+2", "-0/1"] {
        let e = resolve(&format!("{GOOD}\n[faults]\ntransfer_fail = \"{bad}\"\n"), &[]).unwrap_err();
        assert!(e.to_string().contains("is not a ratio"), "{bad}: {e}");
    }
    assert!(resolve(&format!("{GOOD}\n[faults]\ntransfer_fail = \"0\"\n"), &[]).is_ok());
    // A name is not empty or blank.
    for (name, want) in [("", "empty"), (" \t", "empty")] {
        let e = resolve(&format!("name = {name:?}\n{GOOD}"), &[]).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("name", Some(1)), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn cli_exit_codes() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = crate::Scratch::new("bad");
    let f = dir.join("bad.toml");
    std::fs::write(&f, GOOD.replace("page_size = 16", "page_size = 0")).unwrap();
    let out = std::process::Command::new(bin).args(["run", f.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:8:") && err.contains("page_size"), "{err}");
    let out = std::process::Command::new(bin).args(["run", "/nonexistent.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = std::process::Command::new(bin).args(["run", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let out = std::process::Command::new(bin).args(["run", scen.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(10));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("reproduce: kvsim run") && text.contains("--seed 7"), "{text}");
    let out = std::process::Command::new(bin).args(["run", scen.to_str().unwrap(), "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["seed", "profile", "trace_hash", "events", "requests", "outcomes", "violations"] {
        assert!(v.get(k).is_some(), "json lacks {k}");
    }
    assert_eq!(v["violations"][0]["kind"], "cross_tenant_read");
}

#[test]
fn misspellings_get_a_did_you_mean() {
    let e = resolve(&GOOD.replace("pool_tokens = 8192", "pool_tokenz = 8192"), &[]).unwrap_err();
    assert!(e.message.contains("did you mean `pool_tokens`?"), "{e}");
    assert_eq!(e.key, "decode[0].pool_tokenz", "{e}");
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nreject_mod = \"x\""), &[]).unwrap_err();
    assert!(e.message.contains("did you mean `reject_mode`?"), "{e}");
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nfree_list_policy = \"sorted-on-merge\""), &[])
        .unwrap_err();
    assert!(e.message.contains("did you mean `sorted_on_merge`?") && e.message.contains("lifo"), "{e}");
    let e = resolve(GOOD, &[("free_list_policy", "lifoo")]).unwrap_err();
    assert!(e.message.contains("did you mean `lifo`?"), "{e}");
    let e = resolve(GOOD, &[("zero_on_fre", "true")]).unwrap_err();
    assert!(e.message.contains("did you mean `zero_on_free`?"), "{e}");
    // Nothing close: no guess, but the allowed values are listed.
    let e = resolve(GOOD, &[("free_list_policy", "random")]).unwrap_err();
    assert!(!e.message.contains("did you mean") && e.message.contains("lru"), "{e}");
    let e = resolve(&format!("{GOOD}\n[router]\npolicy = \"round-robin\"\n"), &[]).unwrap_err();
    assert!(e.message.contains("did you mean `round_robin`?"), "{e}");
}

#[test]
fn check_invariants_runs_the_scenario_with_every_invariant_on() {
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["run", scen.to_str().unwrap(), "--check", "invariants"])
        .output()
        .unwrap();
    // Every invariant holds, so the verdict is the run's own: the stub leak (exit 10).
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SAFETY VIOLATION") && !text.contains("INVARIANT"), "{text}");
    // The check says that it ran, and over how much, as the determinism check does.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invariant check passed: every component's invariants held after each of 70 events"), "{err}");
}

/// A reader that leaves early (`kvsim profiles | head -1`) ends kvsim quietly, as it ends any
/// Unix tool (SIGPIPE), not with a panic and a backtrace on stderr. The pipe's read end is
/// closed before kvsim starts, so its first write meets a reader that is gone.
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_the_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    for args in [&["profiles"][..], &["run", "scenarios/small/stub-leak.toml"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
            .args(args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        // SIGPIPE is 13 on Linux and the BSDs.
        assert_eq!(out.status.signal(), Some(13), "{args:?}: ended by SIGPIPE, not {:?}", out.status);
    }
}

/// Limits say the number they enforce: the largest pool (2^31 − 2 pages: 2^31 − 1 is refused,
/// which "limit 2^31" did not say), and a workload whose arrivals overrun the time bound gives
/// its exact span, not a saturated 18446744073709551615.
#[test]
fn limits_name_their_real_numbers() {
    let text = GOOD.replace("pool_tokens = 4096", "pool_tokens = 34359738352");
    let e = resolve(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("pool of 2147483647 pages (page_size 16) is too large: at most 2147483646 pages"), "{e}");
    let ok = GOOD.replace("pool_tokens = 4096", "pool_tokens = 34359738336");
    resolve(&ok, &[]).unwrap();
    let w = "context_len = 8192\n[[prefill]]\npool_tokens = 4096\n[[decode]]\npool_tokens = 8192\n[workload]\nrequests = 10000000\ntenants = 1\nmean_interarrival_ms = 4611686018427\nprompt_tokens = [{ weight = 1, min = 10, max = 10 }]\noutput_tokens = [{ weight = 1, min = 1, max = 1 }]\n";
    let e = resolve(w, &[]).unwrap_err().to_string();
    assert!(
        e.contains("10000000 requests × a mean inter-arrival of 4611686018427 ms is 46116860184270000000 ms"),
        "{e}"
    );
}

/// Lone carriage returns (classic Mac OS line ends) are named as such; the file read as one line,
/// and the error named the key that line began with.
#[test]
fn lone_carriage_returns_are_named() {
    let e = resolve(&GOOD.replace('\n', "\r"), &[]).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (Some(1), ""), "{e}");
    assert!(e.message.contains("lone carriage returns"), "{e}");
    // CRLF reads as the same file.
    resolve(&GOOD.replace('\n', "\r\n"), &[]).unwrap();
}

/// A pool that is no whole number of pages because `--set` or `--profile` changed the page size
/// names that flag (the file's line alone was blamed, with "write the rounded value").
#[test]
fn a_page_size_from_a_flag_is_named_as_the_cause() {
    let text = GOOD.replace("page_size = 16\n", "").replace("pool_tokens = 4096", "pool_tokens = 4095");
    // The file's profile (sglang-0.5.16) has pages of 1: valid as written.
    resolve(&text, &[]).unwrap();
    let e = resolve(&text, &[("page_size", "16")]).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("bad.toml", Some(4)), "{e}");
    assert!(e.message.ends_with("(page_size 16 is `--set page_size`)"), "{e}");
    let sc = Scenario::parse("bad.toml", &text).unwrap();
    let e = sc.resolve(&Overrides { profile: Some("vllm-nixl".into()), ..Default::default() }).unwrap_err();
    assert!(
        e.message.contains("page_size 16 is profile vllm-nixl's, from `--profile vllm-nixl`; keep the file's page size with `--set page_size=1`"),
        "{e}"
    );
    // A page size the file sets is the file's: nothing added.
    let e = resolve(&GOOD.replace("pool_tokens = 4096", "pool_tokens = 4095"), &[]).unwrap_err();
    assert!(!e.message.contains("(page_size 16 is"), "{e}");
}

/// `liveness_bound_s = 0` made the horizon the last arrival itself: a one-request run stopped at
/// its first event and reported a `request_hang` on nodes it called gone. It is refused (at least
/// one second), naming the key.
#[test]
fn a_zero_liveness_bound_is_refused() {
    let e = resolve(&format!("liveness_bound_s = 0\n{GOOD}"), &[]).unwrap_err();
    assert_eq!(e.line, Some(1), "{e}");
    assert!(e.to_string().contains("liveness_bound_s") && e.to_string().contains("1..="), "{e}");
    resolve(&format!("liveness_bound_s = 1\n{GOOD}"), &[]).unwrap();
}

/// `--secret-tenant` names the secret of `--check noninterference`; with `--check invariants` it
/// was dropped without a word (clap only required some `--check`).
#[test]
fn a_secret_tenant_without_the_noninterference_check_is_refused() {
    let src = crate::scenarios_dir().join("small/stub-leak.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["run", src.to_str().unwrap(), "--check", "invariants", "--secret-tenant", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--secret-tenant") && err.contains("noninterference"), "{err}");
}

/// A knob given twice with `--set` takes its last value, as a later flag overrides an earlier one,
/// and says so (it did without a word).
#[test]
fn a_knob_set_twice_takes_the_last_value_and_says_so() {
    let src = crate::scenarios_dir().join("small/stub-leak.toml");
    let run = |set: &[&str]| {
        let mut args = vec!["run", src.to_str().unwrap(), "--json"];
        for s in set {
            args.extend(["--set", s]);
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(&args).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["trace_hash"].clone(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (twice, err) = run(&["page_size=16", "page_size=32"]);
    assert!(err.contains("note: --set gives knob `page_size` 2 times (16, 32): the last, `32`, is used"), "{err}");
    let (once, err) = run(&["page_size=32"]);
    assert_eq!(twice, once);
    assert!(!err.contains("--set gives"), "{err}");
}

/// An empty array of node groups (`prefill = []`) names its line (the error had none: there is
/// no element to point at); a worded knob given a boolean names its words (it said "invalid
/// type: unit variant, expected string only").
#[test]
fn an_empty_group_list_and_a_worded_knob_given_a_boolean_are_named() {
    let text = GOOD
        .replace("[[prefill]]\npool_tokens = 4096\n", "")
        .replace("context_len = 8192", "context_len = 8192\nprefill = []");
    let e = resolve(&text, &[]).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (Some(3), "prefill"), "{e}");
    assert!(e.to_string().contains("at least one [[prefill]] group is required"), "{e}");
    let e = resolve(&GOOD.replace("page_size = 16", "page_size = 16\nkv_canary = true"), &[]).unwrap_err();
    assert_eq!(e.line, Some(9), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("`true` is a boolean, not one of the knob's words: expected one of `off`, `log`, `raise`"),
        "{m}"
    );
    let e = resolve(GOOD, &[("kv_canary", "3")]).unwrap_err().to_string();
    assert!(e.contains("`3` is an integer, not one of the knob's words"), "{e}");
}
