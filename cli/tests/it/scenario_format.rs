//! The scenario format's reference and schema: generated from the serde types, shipped in docs/,
//! never stale; every shipped scenario carries the `#:schema` directive and validates; `kvsim new`
//! writes scenarios that run and validate.

use std::path::PathBuf;

fn repo() -> PathBuf {
    crate::manifest_dir().join("..")
}

fn schema() -> jsonschema::Validator {
    let v: serde_json::Value = serde_json::from_str(&kvsim::scenario_doc::schema_json()).unwrap();
    jsonschema::validator_for(&v).unwrap()
}

/// TOML text as the JSON value a schema validator checks (what taplo does with `#:schema`).
fn as_json(text: &str) -> serde_json::Value {
    let t: toml::Table = toml::from_str(text).unwrap();
    serde_json::to_value(t).unwrap()
}

#[test]
fn shipped_schema_and_reference_are_up_to_date() {
    let regen = "regenerate: target/release/kvsim schema > docs/scenario.schema.json && target/release/kvsim schema --markdown > docs/scenario-format.md";
    let shipped = std::fs::read_to_string(repo().join("docs/scenario.schema.json")).unwrap();
    assert!(shipped == kvsim::scenario_doc::schema_json(), "docs/scenario.schema.json is stale; {regen}");
    let shipped = std::fs::read_to_string(repo().join("docs/scenario-format.md")).unwrap();
    assert!(shipped == kvsim::scenario_doc::format_reference_md(), "docs/scenario-format.md is stale; {regen}");
    // The reference names every key the parser accepts, in every section.
    let md = kvsim::scenario_doc::format_reference_md();
    for key in [
        "`pool_tokens`",
        "`prefill_base_us`",
        "`decode_ns_per_kkv`",
        "`mean_interarrival_ms`",
        "`time_scale_permille`",
        "`heal_at_ms`",
        "`restart_after_ms`",
        "`clean`",
        "`free_list_policy`",
        "`prefix_blocks`",
        "[[faults.script]]",
        "MAX_TIME_MS",
    ] {
        assert!(md.contains(key), "the reference lacks {key}");
    }
    for k in kvsim::config::knob_names() {
        assert!(md.contains(&format!("| `{k}` |")), "the reference lacks knob {k}");
    }
}

#[test]
fn every_shipped_scenario_has_the_directive_and_validates() {
    let v = schema();
    let mut n = 0;
    for rel in crate::all_scenarios() {
        let path = crate::scenarios_dir().join(&rel);
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap();
        let target =
            first.strip_prefix("#:schema ").unwrap_or_else(|| panic!("{rel}: no #:schema directive on line 1"));
        let resolved = path.parent().unwrap().join(target).canonicalize().unwrap();
        assert_eq!(resolved, repo().join("docs/scenario.schema.json").canonicalize().unwrap(), "{rel}");
        let errors: Vec<String> =
            v.iter_errors(&as_json(&text)).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{rel}: {errors:?}");
        n += 1;
    }
    assert!(n >= 20, "{n} scenarios");
}

#[test]
fn the_schema_rejects_what_the_parser_rejects() {
    let v = schema();
    let good = "context_len = 8192\n[[prefill]]\npool_tokens = 4096\n[[decode]]\npool_tokens = 8192\n[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 10\noutput_tokens = 1\n";
    let errors: Vec<String> = v.iter_errors(&as_json(good)).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:?}");
    for bad in [
        good.replace("pool_tokens = 8192", "pool_tokenz = 8192"),
        good.replace("context_len = 8192", "context_len = 1"),
        format!("{good}[knobs]\nfree_list_policy = \"random\"\n"),
        format!("{good}[knobs]\npage_size = 0\n"),
        format!("{good}[knobs]\nno_such_knob = 1\n"),
        format!("{good}[faults]\n[[faults.script]]\nkind = \"explode\"\n"),
        good.replace("prompt_tokens = 10", "prompt_tokens = 0"),
    ] {
        assert!(!v.is_valid(&as_json(&bad)), "the schema accepts:\n{bad}");
        let parsed = kvsim::scenario::Scenario::parse("b.toml", &bad).and_then(|s| s.resolve(&Default::default()));
        assert!(parsed.is_err(), "the parser accepts:\n{bad}");
    }
}

#[test]
fn kvsim_new_writes_commented_scenarios_that_run_and_validate() {
    let v = schema();
    let dir = crate::Scratch::new("new");
    // `new foo.toml` writes foo.toml (not foo.toml.toml); an empty name is refused.
    let new_in = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(args).current_dir(&dir).output().unwrap()
    };
    let _ = std::fs::remove_file(dir.join("named.toml"));
    assert_eq!(new_in(&["new", "named.toml"]).status.code(), Some(0));
    assert!(std::fs::read_to_string(dir.join("named.toml")).unwrap().contains("name = \"named\""));
    assert!(!dir.join("named.toml.toml").exists());
    let o = new_in(&["new", ""]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("NAME is empty"));
    assert!(!dir.join(".toml").exists());
    for like in ["small", "incident", "mooncake"] {
        let out = dir.join(format!("{like}.toml"));
        let _ = std::fs::remove_file(&out);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
            .args(["new", "mine", "--like", like, "--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        // The mooncake template's trace path is relative to the file: written elsewhere than
        // scenarios/, `new` says it must be re-pointed (it said "run it", which then failed).
        let said = String::from_utf8_lossy(&o.stdout);
        assert_eq!(said.contains("is not there from"), like == "mooncake", "{like}: {said}");
        let mut text = std::fs::read_to_string(&out).unwrap();
        for section in ["[[prefill]]", "[[decode]]", "[router]", "[cost]", "[knobs]", "[faults]"] {
            assert!(text.contains(section), "{like}: no {section}");
        }
        // The sections its source does not use are there as commented examples, valid as written.
        if like == "small" {
            assert!(text.contains("\n# [[faults.script]]\n") && text.contains("\n# [[expect]]\n"), "{text}");
            assert!(text.contains("# [workload] (requests drawn from distributions)"), "{text}");
            // Uncomment each example: the lines after "For example:" up to the blank line.
            let mut in_example = false;
            let mut uncommented = Vec::new();
            for l in text.lines() {
                if l.is_empty() {
                    in_example = false;
                }
                uncommented.push(if in_example { l.trim_start_matches("# ").to_string() } else { l.to_string() });
                in_example |= l.ends_with("For example:");
            }
            let uncommented = uncommented.join("\n");
            let ex = dir.join("examples.toml");
            std::fs::write(&ex, uncommented).unwrap();
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
                .args(["check", ex.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(String::from_utf8_lossy(&o.stdout).contains("2 expectation(s) in 1 scenario(s): 2 passed"));
        }
        assert!(text.contains("\n# Tokens per KV page") || text.contains("page_size"), "{like}: knobs unexplained");
        // The header names the file written (it said `kvsim run mine.toml` for --out small.toml).
        assert!(
            text.contains(&format!("kvsim run {}", out.display())) || text.contains(&format!("{like}.toml`")),
            "{text}"
        );
        // The list of every knob sits inside [knobs]: a line uncommented there is a knob (above
        // the header it was a key of the [[request]] before it).
        let knob =
            text.lines().find(|l| l.starts_with("#   ") && l.contains(" = ")).expect("a commented knob").to_string();
        let at = text.find(&knob).unwrap();
        assert!(
            text[..at].rfind("\n[").is_some_and(|h| text[h..].starts_with("\n[knobs]")),
            "{like}: {knob} is not under [knobs]"
        );
        let tried = dir.join(format!("{like}-knob.toml"));
        std::fs::write(&tried, text.replacen(&knob, knob.trim_start_matches("#   "), 1)).unwrap();
        if like != "mooncake" {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
                .args(["run", tried.to_str().unwrap()])
                .output()
                .unwrap();
            assert_ne!(o.status.code(), Some(2), "{like}: {}", String::from_utf8_lossy(&o.stderr));
        }
        let comments = text.lines().filter(|l| l.starts_with('#')).count();
        let keys = text.lines().filter(|l| l.contains(" = ") && !l.starts_with('#')).count();
        assert!(comments >= keys, "{like}: {comments} comment lines for {keys} keys");
        let errors: Vec<String> = v.iter_errors(&as_json(&text)).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{like}: {errors:?}");
        if like == "mooncake" {
            let data = repo().join("data/mooncake/conversation_trace.jsonl");
            text =
                text.replace("\"../data/mooncake/conversation_trace.jsonl\"", &format!("{:?}", data.to_str().unwrap()));
            std::fs::write(&out, &text).unwrap();
        }
        let cfg = crate::load_path(out.to_str().unwrap());
        assert_eq!(cfg.name, "mine");
        // Every value written out is the shipped scenario's: same verdict.
        let shipped = crate::load(
            match like {
                "small" => "small/stub-leak.toml",
                "incident" => "glm53-incident.toml",
                _ => "mooncake-conversation.toml",
            },
            None,
            &[],
        );
        assert_eq!(
            (cfg.requests.len(), &cfg.knobs, &cfg.cost, &cfg.prefill),
            (shipped.requests.len(), &shipped.knobs, &shipped.cost, &shipped.prefill),
            "{like}"
        );
    }
    // Never overwrites unasked.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["new", "mine", "--out", dir.join("small.toml").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    // A folder is named as one, `--force` or not (it suggested `--force`, which then failed).
    for force in [false, true] {
        let mut args = vec!["new", "mine", "--out", dir.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("a folder; give a file name") && !err.contains("--force"), "{err}");
    }
}

/// `kvsim new NAME --from-log <fixture> --out <dir>/<out>` (an earlier file of that name removed).
fn new_from_log(dir: &std::path::Path, name: &str, fixture: &str, out: &str) -> (std::process::Output, PathBuf) {
    let path = dir.join(out);
    let _ = std::fs::remove_file(&path);
    let log = repo().join("sim/tests/data/audit").join(fixture);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["new", name, "--from-log", log.to_str().unwrap(), "--out", path.to_str().unwrap()])
        .output()
        .unwrap();
    (o, path)
}

#[test]
fn kvsim_new_from_a_log_uses_the_measured_deployment() {
    let dir = crate::Scratch::new("new-log");
    let (o, out) = new_from_log(&dir, "glm", "glm_prefill_gap.log", "from-log.toml");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("assumption:"), "the assumption the audit made is stated");
    assert!(schema().is_valid(&as_json(&text)));
    let cfg = crate::load_path(out.to_str().unwrap());
    // The measured numbers of the log: a 681,280-token prefill pool, a 1,048,576-token context, pages of 64.
    assert_eq!((cfg.prefill[0].pool_tokens, cfg.context_len, cfg.knobs.page_size), (681_280, 1_048_576, 64));
    // And the node's logged max_running_requests=64 (it was dropped: the scenario's default 256).
    assert_eq!(cfg.prefill[0].max_running_requests, 64);
    // No version in the log: the worst case (the vulnerable build), said in the header.
    assert_eq!(cfg.profile, "sglang-0.5.16");
    // (The header is wrapped where the log's path puts it: read it as one line.)
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).map(|l| l[1..].trim()).collect();
    assert!(header.join(" ").contains("profile sglang-0.5.16: ASSUMED: no sglang version in the logs"), "{text}");
    let w = kvsim::simulate(cfg, None, false);
    assert!(w.oracle.violations.iter().any(|v| v.kind == kvsim::check::Kind::CrossTenantRead), "the gap leaks");
    // A vLLM log gives a vLLM scenario: run alone it simulates vLLM (before, the file said
    // sglang-0.5.16, and running it reported leaks the audit of the same log does not).
    let (o, vllm) = new_from_log(&dir, "v", "vllm_pool_below_context_issue39734.log", "from-vllm.toml");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let cfg = crate::load_path(vllm.to_str().unwrap());
    assert_eq!(cfg.profile, "vllm-nixl");
    let w = kvsim::simulate(cfg, None, false);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    // A launch whose engine refused to start with its pool served nothing: no scenario of it
    // serving is written (it wrote one), and the refusal's line is named.
    let (o, refused) = new_from_log(&dir, "r", "vllm_v0_error_issue2418.log", "refused.toml");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!refused.exists(), "a scenario was written for a launch that never started");
    assert!(err.contains("vllm_v0_error_issue2418.log:4: the engine refused to start with this pool"), "{err}");
    // A log with nothing in it is bad input naming the log.
    let (o, _) = new_from_log(&dir, "g", "garbage.log", "g.toml");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("garbage.log"));
}

/// The schema refuses in the editor what `kvsim check` refuses in `[[expect]]`: an unknown
/// violation kind or fault, a status that is neither an HTTP status nor 0.
#[test]
fn the_schema_knows_expectation_kinds_and_statuses() {
    let v = schema();
    let base = std::fs::read_to_string(crate::scenarios_dir().join("catalogue/stub-admission.toml")).unwrap();
    let (head, _) = base.split_once("[[expect]]").unwrap();
    let with = |entry: &str| as_json(&format!("{head}[[expect]]\nname = \"x\"\n{entry}\n"));
    for good in [
        "violations = [\"wrong_status\"]",
        "status = { \"0\" = 0, \"1\" = 200 }",
        "requests = { \"0\" = [\"cross_tenant_read\"] }",
        "clean = true\nexplore_faults = [\"crash\"]",
    ] {
        assert!(v.is_valid(&with(good)), "{good}");
    }
    for bad in [
        "violations = [\"wrong_stat\"]",
        "absent = [\"leak\"]",
        "requests = { \"0\" = [\"cross_tenant_reed\"] }",
        "status = { \"0\" = 99 }",
        "status = { \"0\" = 600 }",
        "clean = true\nexplore_faults = [\"crsh\"]",
        "requests = { \"0\" = [\"page_leak\"] }",
        "status = { \"00\" = 200 }",
    ] {
        assert!(!v.is_valid(&with(bad)), "{bad}");
    }
    let unnamed = as_json(&format!("{head}[[expect]]\nname = \"\"\nclean = true\n"));
    assert!(!v.is_valid(&unnamed));
}

/// Every field `kvsim run --json` prints is named in docs/report-format.md (the JSON report had
/// no reference: `caught_by`, `culprit_at_ns` or `generated_tokens` were named nowhere). The runs
/// cover the optional fields: a landed-zeros read, a leak of host memory with its holder, the
/// reference oracle's check, an unapplied scripted fault, a confirmation.
#[test]
fn report_json_fields_are_documented() {
    let doc = std::fs::read_to_string(repo().join("docs/report-format.md")).unwrap();
    let scenarios = repo().join("scenarios");
    let runs: [(&str, &[&str]); 5] = [
        ("glm53-incident.toml", &["--check-oracle"]),
        ("small/stub-leak.toml", &["--confirm", "cpu"]),
        ("catalogue/leak-abort-retracted.toml", &["--set", "retracted_abort=leak"]),
        ("catalogue/rdma-visibility-lag.toml", &[]),
        ("catalogue/prefix-timing-channel.toml", &["--check", "noninterference"]),
    ];
    let mut keys = std::collections::BTreeSet::new();
    fn walk(v: &serde_json::Value, maps: bool, keys: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    // Maps keyed by data (status, tenant, kind, mitigation) are not fields.
                    let data = maps || k.parse::<u64>().is_ok();
                    if !data {
                        keys.insert(k.clone());
                    }
                    let keyed = ["outcomes", "caught_by", "detected_by", "violation_counts", "per_tenant"];
                    walk(x, keyed.contains(&k.as_str()), keys);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, false, keys)),
            _ => {}
        }
    }
    for (s, extra) in runs {
        let path = scenarios.join(s);
        let mut args = vec!["run", path.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(&args).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{s}: {e}"));
        walk(&v, false, &mut keys);
    }
    for want in [
        "holders",
        "host_pages",
        "landed_zeros",
        "oracle_check",
        "culprit_at_ns",
        "generated_tokens",
        "reads_replayed",
        "cause",
        "delta_ns",
    ] {
        assert!(keys.contains(want), "the runs no longer print `{want}`: {keys:?}");
    }
    let missing: Vec<&String> = keys.iter().filter(|k| !doc.contains(&format!("`{k}`"))).collect();
    assert!(missing.is_empty(), "docs/report-format.md does not name {missing:?}");
}

/// The schema refuses what the parser refuses, and accepts what it accepts, where the two
/// disagreed: `pp_stages` on a decode group, a `public_blocks` past u32, a signed or a whole
/// ratio.
#[test]
fn the_schema_agrees_with_the_parser_on_its_edges() {
    let v = schema();
    let good = crate::bad_input::GOOD;
    let cases = [
        (good.replace("[[decode]]\npool_tokens = 8192", "[[decode]]\npool_tokens = 8192\npp_stages = 2"), false),
        (good.replace("[[prefill]]\npool_tokens = 4096", "[[prefill]]\npool_tokens = 4096\npp_stages = 2"), true),
        (good.replace("output_tokens = 4", "output_tokens = 4\npublic_blocks = 4294967296"), false),
        (format!("{good}\n[faults]\ntransfer_fail = \"+1/2\"\n"), false),
        (format!("{good}\n[faults]\ntransfer_fail = \"0\"\n"), true),
        (format!("{good}\n[faults]\ntransfer_fail = \"1 / 2\"\n"), true),
        (format!("name = \"\"\n{good}"), false),
        (format!("name = \"  \"\n{good}"), false),
        (format!("name = \"a b\"\n{good}"), true),
    ];
    for (text, valid) in cases {
        assert_eq!(v.is_valid(&as_json(&text)), valid, "schema: {text}");
        let parsed = kvsim::scenario::Scenario::parse("s.toml", &text)
            .and_then(|sc| sc.resolve(&kvsim::scenario::Overrides::default()).map(|_| ()));
        assert_eq!(parsed.is_ok(), valid, "parser: {text}: {parsed:?}");
    }
}

/// The schema's per-kind rules for `[[faults.script]]` agree with the parser on every set of
/// fields of every kind (the editor accepted a `crash` without `node`, or a `transfer_fail` with
/// `lag_ms`, which `kvsim run` refuses).
#[test]
fn the_schema_checks_each_script_kinds_fields_as_the_parser_does() {
    let v = schema();
    let good = crate::bad_input::GOOD;
    let values = [
        ("node", "\"prefill-0\""),
        ("at_ms", "1"),
        ("restart_after_ms", "1"),
        ("request", "0"),
        ("batch", "0"),
        ("delay_ms", "1"),
        ("lag_ms", "1"),
    ];
    assert_eq!(values.map(|(k, _)| k), kvsim::scenario::SCRIPT_FIELDS);
    let (mut accepted, mut refused) = (0, 0);
    for kind in kvsim::scenario::ScriptKind::ALL {
        let (name, _, _) = kind.fields();
        for set in 0u32..1 << values.len() {
            let mut entry = format!("[[faults.script]]\nkind = \"{name}\"\n");
            for (i, (k, val)) in values.iter().enumerate() {
                if set & 1 << i != 0 {
                    entry.push_str(&format!("{k} = {val}\n"));
                }
            }
            let text = format!("{good}{entry}");
            let parsed = kvsim::scenario::Scenario::parse("s.toml", &text)
                .and_then(|sc| sc.resolve(&kvsim::scenario::Overrides::default()));
            assert_eq!(v.is_valid(&as_json(&text)), parsed.is_ok(), "{entry}{:?}", parsed.err());
            if parsed.is_ok() {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
    }
    // Every kind accepts its required fields with and without its optional ones: 3 kinds with
    // `batch` (2 each), 2 without (1 each).
    assert_eq!((accepted, refused), (8, 5 * 128 - 8));
}
