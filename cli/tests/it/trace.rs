//! Trace files: write, replay byte for byte, detect divergence, refuse other versions, filter.

use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_kvsim")
}

fn scen(rel: &str) -> String {
    crate::scenarios_dir().join(rel).to_string_lossy().into_owned()
}

/// The stub-leak scenario's trace, written to `t`: its path and text.
fn stub_trace(t: std::path::PathBuf) -> (std::path::PathBuf, String) {
    let out = Command::new(bin())
        .args(["run", &scen("small/stub-leak.toml"), "--trace", t.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10));
    let text = std::fs::read_to_string(&t).unwrap();
    (t, text)
}

#[test]
fn trace_replays_and_detects_divergence() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let (t, text) = stub_trace(tmp("stub.jsonl"));
    let lines: Vec<&str> = text.lines().collect();
    let header: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(header["kind"], "header");
    assert_eq!(header["config"]["knobs"]["reject_mode"], "stub_pending", "every knob is in the header");
    let footer: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(footer["kind"], "footer");
    assert_eq!(footer["records"].as_u64().unwrap() as usize, lines.len() - 2);
    // The memory log is complete: allocations, writes, copies and reads are there.
    for op in ["\"op\":\"alloc\"", "\"op\":\"write\"", "\"op\":\"copy\"", "\"op\":\"read\"", "\"op\":\"free\""] {
        assert!(text.contains(op), "{op} missing");
    }
    let out = Command::new(bin()).args(["replay", t.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(footer["trace_hash"].as_str().unwrap()));

    // Change one record: the replay names the first differing line with both versions.
    let mut changed: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    changed[30] = changed[30].replacen("\"t\":", "\"t\":1", 1);
    let bad = tmp("stub-bad.jsonl");
    std::fs::write(&bad, changed.join("\n") + "\n").unwrap();
    let out = Command::new(bin()).args(["replay", bad.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":31") && err.contains("recorded:") && err.contains("replayed:"), "{err}");

    // A footer re-serialised with other spacing (`json.dumps`) is still the footer: it matches.
    let mut spaced: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    let last = spaced.len() - 1;
    spaced[last] = serde_json::to_string_pretty(&footer).unwrap().replace('\n', " ");
    let re = tmp("stub-spaced.jsonl");
    std::fs::write(&re, spaced.join("\n") + "\n").unwrap();
    let out = Command::new(bin()).args(["replay", re.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));

    // A file cut short (no footer) is bad input, as `confirm` says it, not a divergence.
    let cut = tmp("stub-cut.jsonl");
    std::fs::write(&cut, lines[..30].join("\n") + "\n").unwrap();
    // Both name the line where the file ends (confirm said "no footer" with no line).
    for cmd in ["replay", "confirm"] {
        let out = Command::new(bin()).args([cmd, cut.to_str().unwrap()]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(":30: the file ends without its footer (the trace was cut short)"), "{cmd}: {err}");
    }

    // CRLF line ends (an editor's rewrite) read as the same lines: the replay matches.
    let crlf = tmp("stub-crlf.jsonl");
    std::fs::write(&crlf, lines.join("\r\n") + "\r\n").unwrap();
    let out = Command::new(bin()).args(["replay", crlf.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("replay matches"));

    // A field the format does not have, in the header, its configuration or the footer, is bad
    // input naming the line and the field (an edited knob name was ignored, so the replay ran
    // another configuration than the reader meant).
    for (line, from, to) in [
        (0, "\"seed\":", "\"sead\":0,\"seed\":"),
        (0, "\"reject_mode\":", "\"reject_mod\":0,\"reject_mode\":"),
        (lines.len() - 1, "\"records\":", "\"record\":0,\"records\":"),
    ] {
        let mut edited: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        assert!(edited[line].contains(from), "{from}");
        edited[line] = edited[line].replacen(from, to, 1);
        let f = tmp("stub-field.jsonl");
        std::fs::write(&f, edited.join("\n") + "\n").unwrap();
        let out = Command::new(bin()).args(["replay", f.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {err}");
        let field = to.split('"').nth(1).unwrap();
        assert!(err.contains(&format!(":{}", line + 1)) && err.contains(&format!("unknown field `{field}`")), "{err}");
    }

    // Another version is refused unless --force.
    let other = tmp("stub-other.jsonl");
    std::fs::write(&other, text.replacen("\"kvsim_version\":\"", "\"kvsim_version\":\"9.", 1)).unwrap();
    let out = Command::new(bin()).args(["replay", other.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    let out = Command::new(bin()).args(["replay", other.to_str().unwrap(), "--force"]).output().unwrap();
    assert_eq!(out.status.code(), Some(10));

    // A trace of an earlier format (/1: its hash was FNV over `derive(Hash)`; /2: a read and a
    // write per decode token instead of one decode-step record per batch; /3: no `lock` records
    // for cached prefix blocks) is refused even with --force: exit 2, naming the version it found
    // and what to do.
    assert!(text.contains("\"format\":\"kvsim-trace/4\""));
    for (v, why) in [(1, "XXH3-64"), (2, "decode_step"), (3, "`lock` record")] {
        let old = tmp(&format!("stub-format{v}.jsonl"));
        std::fs::write(&old, text.replacen("kvsim-trace/4", &format!("kvsim-trace/{v}"), 1)).unwrap();
        for force in [false, true] {
            let mut args = vec!["replay", old.to_str().unwrap()];
            if force {
                args.push("--force");
            }
            let out = Command::new(bin()).args(&args).output().unwrap();
            assert_eq!(out.status.code(), Some(2));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(&format!("stub-format{v}.jsonl:1")), "{err}");
            assert!(err.contains(&format!("`kvsim-trace/{v}` is no longer read")), "{err}");
            assert!(err.contains(why) && err.contains("record the trace again"), "{err}");
        }
    }

    // Garbage is bad input, not a panic.
    let junk = tmp("junk.jsonl");
    std::fs::write(&junk, "hello\n").unwrap();
    let out = Command::new(bin()).args(["replay", junk.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A header edited after the run (the profile's name alone: every record still matches) replays
/// as a difference of the footer's configuration digest, and `shrink` refuses what `replay`
/// refuses: an edited, cut or other-version trace (it shrank the edited configuration's bug, and
/// read a cut file's header alone). Blank lines carry nothing and are skipped.
#[test]
fn edited_headers_diverge_and_shrink_checks_its_trace_as_replay_does() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let (t, text) = stub_trace(tmp("hdr.jsonl"));
    assert!(text.contains("\"profile\":\"sglang-0.5.16\""));
    let relabelled = tmp("hdr-profile.jsonl");
    std::fs::write(&relabelled, text.replacen("\"profile\":\"sglang-0.5.16\"", "\"profile\":\"vllm-nixl\"", 1))
        .unwrap();
    let out = Command::new(bin()).args(["replay", relabelled.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("config (digest of the header's configuration)"));
    let shrink = |input: &std::path::Path, extra: &[&str]| {
        let o = tmp("hdr-shrunk.toml");
        let mut args =
            vec!["shrink", input.to_str().unwrap(), "--out", o.to_str().unwrap(), "--force", "--budget", "30"];
        args.extend_from_slice(extra);
        let out = Command::new(bin()).args(&args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = shrink(&relabelled, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not its own configuration's run"), "{err}");
    let lines: Vec<&str> = text.lines().collect();
    let cut = tmp("hdr-cut.jsonl");
    std::fs::write(&cut, lines[..20].join("\n") + "\n").unwrap();
    let (code, err) = shrink(&cut, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cut short"), "{err}");
    let other = tmp("hdr-other.jsonl");
    std::fs::write(&other, text.replacen("\"kvsim_version\":\"", "\"kvsim_version\":\"9.", 1)).unwrap();
    let (code, err) = shrink(&other, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--any-version"), "{err}");
    assert_eq!(shrink(&other, &["--any-version"]).0, Some(10));
    // --any-version skips the comparison of records, not the check that the file is a whole trace.
    let other_lines: Vec<String> = std::fs::read_to_string(&other).unwrap().lines().map(String::from).collect();
    let other_cut = tmp("hdr-other-cut.jsonl");
    std::fs::write(&other_cut, other_lines[..20].join("\n") + "\n").unwrap();
    let (code, err) = shrink(&other_cut, &["--any-version"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cut short"), "{err}");
    let other_junk = tmp("hdr-other-junk.jsonl");
    std::fs::write(&other_junk, format!("{}\ngarbage{{{{{{\n", other_lines[0])).unwrap();
    let (code, err) = shrink(&other_junk, &["--any-version"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(":2: not a trace record"), "{err}");
    assert_eq!(shrink(&t, &[]).0, Some(10), "the trace itself shrinks");
    // Blank lines, in the middle and after the footer, are skipped: the replay matches.
    let mut spaced: Vec<&str> = lines.clone();
    spaced.insert(10, "");
    spaced.push("");
    let blank = tmp("hdr-blank.jsonl");
    std::fs::write(&blank, spaced.join("\n") + "\n\n").unwrap();
    let out = Command::new(bin()).args(["replay", blank.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A footer without the configuration digest (a trace written before it existed, or one whose
/// digest was deleted along with an edit of the header) still replays, but says that a header
/// edit could not show (it passed silently, exit 10, "replay matches").
#[test]
fn a_footer_without_its_digest_says_what_replay_cannot_check() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let (_, text) = stub_trace(tmp("nodigest.jsonl"));
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.len() - 1;
    let mut footer: serde_json::Value = serde_json::from_str(lines[last]).unwrap();
    assert!(footer.as_object_mut().unwrap().remove("config").is_some());
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    out[last] = footer.to_string();
    out[0] = out[0].replacen("\"name\":\"stub-leak\"", "\"name\":\"totally-different\"", 1);
    assert_ne!(out[0], lines[0]);
    let p = tmp("nodigest-edited.jsonl");
    std::fs::write(&p, out.join("\n") + "\n").unwrap();
    let o = Command::new(bin()).args(["replay", p.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(10));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the footer has no `config` digest") && err.contains("would not show"), "{err}");
    // With its digest, no note.
    let (t, _) = stub_trace(tmp("digest.jsonl"));
    let o = Command::new(bin()).args(["replay", t.to_str().unwrap()]).output().unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("digest"));
}

/// Standard output that cannot be written (a full disk) is one error line and exit 2, as a file
/// output that cannot be written is: it was a panic's backtrace and exit 101, and `replay` lost
/// its verdict's status.
#[test]
fn an_unwritable_standard_output_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else { return };
    for args in [&["profiles"][..], &["run", &scen("small/stub-leak.toml")][..]] {
        let o = Command::new(bin()).args(args).stdout(full.try_clone().unwrap()).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("error: cannot write to standard output") && !err.contains("panicked"), "{err}");
    }
}

/// A header or footer field of the wrong JSON type is bad input naming the field (serde_json's own
/// message gave only a column: "invalid type: integer `5`, expected a string at line 1 column 2843").
#[test]
fn a_mistyped_header_or_footer_field_is_named() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let (_, text) = stub_trace(tmp("typed.jsonl"));
    let lines: Vec<&str> = text.lines().collect();
    let edit = |name: &str, at: usize, f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(lines[at]).unwrap();
        f(&mut v);
        let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        out[at] = v.to_string();
        let p = tmp(name);
        std::fs::write(&p, out.join("\n") + "\n").unwrap();
        let o = Command::new(bin()).args(["replay", p.to_str().unwrap()]).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let last = lines.len() - 1;
    for (name, at, field, f) in [
        (
            "t-choices.jsonl",
            0,
            "field `choices`",
            (&|v: &mut serde_json::Value| v["choices"] = 5.into()) as &dyn Fn(&mut serde_json::Value),
        ),
        ("t-seed.jsonl", 0, "field `config.seed`", &|v| v["config"]["seed"] = "x".into()),
        ("t-knob.jsonl", 0, "field `config.knobs.page_size`", &|v| v["config"]["knobs"]["page_size"] = (-1).into()),
        ("t-footer.jsonl", last, "field `records`", &|v| v["records"] = "a".into()),
    ] {
        let (code, err) = edit(name, at, f);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(err.contains(field), "{name}: {err}");
        assert!(err.contains(&format!("{name}:{}:", at + 1)), "{name}: the line is named: {err}");
    }
}

#[test]
fn filtered_trace_keeps_the_violation_and_replays() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let full = tmp("mixed.jsonl");
    let filt = tmp("mixed-filtered.jsonl");
    let s = scen("small/mixed-faults.toml");
    Command::new(bin()).args(["run", &s, "--trace", full.to_str().unwrap()]).output().unwrap();
    let out =
        Command::new(bin()).args(["run", &s, "--trace", filt.to_str().unwrap(), "--trace-filter"]).output().unwrap();
    assert_eq!(out.status.code(), Some(10));
    let (a, b) = (std::fs::read_to_string(&full).unwrap(), std::fs::read_to_string(&filt).unwrap());
    assert!(b.lines().count() < a.lines().count());
    let fa: serde_json::Value = serde_json::from_str(a.lines().last().unwrap()).unwrap();
    let fb: serde_json::Value = serde_json::from_str(b.lines().last().unwrap()).unwrap();
    assert_eq!(fa["trace_hash"], fb["trace_hash"], "the hash covers the whole run either way");
    let out = Command::new(bin()).args(["replay", filt.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn check_determinism_flag_for_every_shipped_scenario() {
    for s in crate::all_scenarios() {
        let out = Command::new(bin()).args(["run", &scen(&s), "--check-determinism", "--json"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("determinism check passed"), "{s}: {err}");
        assert_ne!(out.status.code(), Some(3), "{s}");
    }
}

#[test]
fn pictures_are_written() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let (p, s) = (tmp("stub.perfetto.json"), tmp("stub.svg"));
    let out = Command::new(bin())
        .args(["run", &scen("small/stub-leak.toml"), "--perfetto", p.to_str().unwrap(), "--svg", s.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    assert!(evs.iter().any(|e| e["ph"] == "i" && e["name"].as_str().unwrap_or("").contains("cross_tenant_read")));
    let svg = std::fs::read_to_string(&s).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // The command line draws request lanes from the run's phase records: the violating reader
    // (r2) has its lane, with the violation marked on it.
    assert!(svg.contains("request lanes") && svg.contains(r#"data-r="2" data-row="decode""#), "r2's lanes");
    assert!(svg.contains(r#"data-violation-r="2""#), "r2's violation mark");
}

#[test]
fn every_record_line_reads_back_exactly() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let t = tmp("roundtrip.jsonl");
    Command::new(bin())
        .args(["run", &scen("small/mixed-faults.toml"), "--trace", t.to_str().unwrap()])
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&t).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let _: kvsim::tracefile::Header = serde_json::from_str(lines[0]).unwrap();
    let _: kvsim::tracefile::Footer = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    for (i, l) in lines[1..lines.len() - 1].iter().enumerate() {
        let line: kvsim::tracefile::Line =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}: {l}", i + 2));
        assert_eq!(kvsim::tracefile::line_json(kvsim::types::Instant(line.t), &line.rec), *l, "line {}", i + 2);
    }
}

#[test]
fn per_request_records_and_latency_in_json_csv_and_footer() {
    let scratch = crate::Scratch::new("trace");
    let tmp = |n: &str| scratch.join(n);
    let t = tmp("latency.jsonl");
    let c = tmp("latency.csv");
    let run = |extra: &[&str]| {
        let mut args = vec!["run".to_string(), scen("small/stub-leak.toml")];
        args.extend(extra.iter().map(|s| s.to_string()));
        Command::new(bin()).args(&args).output().unwrap()
    };
    let plain = run(&["--json"]);
    let out = run(&["--json", "--trace", t.to_str().unwrap(), "--csv", c.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(10));
    let a: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Collecting the records changes nothing: the same hash with and without a trace sink.
    assert_eq!(a["trace_hash"], b["trace_hash"]);
    let reqs = b["per_request"].as_array().unwrap();
    assert_eq!(reqs.len() as u64, b["requests"].as_u64().unwrap());
    // The stub-leak story: request 2 got a 200 while reading other tenants' KV, far sooner
    // than an honest prefill of its 6,000 tokens would have allowed.
    let leak = &reqs[2];
    assert_eq!((leak["status"].as_u64(), leak["prompt_tokens"].as_u64()), (Some(200), Some(6000)));
    assert_eq!(leak["violations"], serde_json::json!(["cross_tenant_read", "wrong_status"]));
    assert!(leak["ttft_ns"].as_u64().unwrap() < reqs[0]["ttft_ns"].as_u64().unwrap());
    let o = &b["latency"]["overall"];
    assert_eq!(o["ok"].as_u64(), Some(3));
    for m in ["ttft", "itl", "e2e"] {
        let d = &o[m];
        let (p50, p90, p99, max) = (
            d["p50_ns"].as_u64().unwrap(),
            d["p90_ns"].as_u64().unwrap(),
            d["p99_ns"].as_u64().unwrap(),
            d["max_ns"].as_u64().unwrap(),
        );
        assert!(p50 <= p90 && p90 <= p99 && p99 <= max, "{m}: {d}");
    }
    // The trace footer carries the same records and summaries.
    let text = std::fs::read_to_string(&t).unwrap();
    let footer: kvsim::tracefile::Footer = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(serde_json::to_value(&footer.requests).unwrap(), b["per_request"]);
    assert_eq!(serde_json::to_value(&footer.latency).unwrap(), b["latency"]);
    // CSV: a header and one line per request; --format csv prints the same table.
    let csv = std::fs::read_to_string(&c).unwrap();
    assert_eq!(csv.lines().count(), reqs.len() + 1);
    assert!(csv.lines().nth(3).unwrap().ends_with(",cross_tenant_read;wrong_status"), "{csv}");
    assert_eq!(String::from_utf8_lossy(&run(&["--format", "csv"]).stdout), csv);
    // The text report prints the table.
    let txt = String::from_utf8_lossy(&run(&[]).stdout).into_owned();
    assert!(txt.contains("latency over the 3 request(s) answered 200"), "{txt}");
}

#[test]
fn latency_follows_the_cost_model_on_the_blis_workload() {
    // sim/bench-scenarios/blis-fair-10k.toml with default costs: a 512-token prefill is
    // 5 ms + 512 × 30 µs = 20.36 ms, the transfer 0.5 ms + 35.84 MB / 25 GB/s = 1.9336 ms, three
    // 0.2 ms messages before decode has the KV; a decode step is 25 ms + ⌊KV/1000⌋ × 2 µs.
    let path = format!("{}/../sim/bench-scenarios/blis-fair-10k.toml", crate::manifest_dir().display());
    let text = std::fs::read_to_string(&path).unwrap();
    let cfg = kvsim::scenario::Scenario::parse(&path, &text).unwrap().resolve(&Default::default()).unwrap();
    let w = kvsim::simulate(cfg, None, false);
    let r = kvsim::report::Report::build(&w, String::new());
    assert_eq!(r.latency.overall.ok, 10_000);
    let kv_lands = 200_000 + 200_000 + 20_360_000 + 1_933_600 + 200_000;
    assert!(r.per_request.iter().all(|q| q.ttft_ns.unwrap() >= kv_lands), "no first token before the KV lands");
    let itl = r.latency.overall.itl.unwrap();
    assert!((25_000_000..25_100_000).contains(&itl.mean_ns) && itl.max_ns < 25_100_000, "{itl:?}");
    // E2E − TTFT is 127 steps (and the router's answer) for every request.
    assert!(r.per_request.iter().all(|q| {
        let body = q.e2e_ns.unwrap() - q.ttft_ns.unwrap();
        (127 * 25_000_000..127 * 25_100_000).contains(&body)
    }));
}
