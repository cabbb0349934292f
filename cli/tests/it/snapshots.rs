//! Regression snapshots: every scenario under `scenarios/` rendered as its canonical text report
//! (outcomes, violations with their stories, trace hash), and the mitigation matrix of the
//! catalogue, compared with `snapshots/` at the repository root. CI runs with `CI=true`, so a
//! changed or missing snapshot fails. To review and accept a change, see README.md ("Snapshots").

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(crate::manifest_dir().join("../snapshots"));
    s.set_prepend_module_to_snapshot(false);
    s
}

/// Scenarios too large for the reference oracle in a test run (it re-reads every read's whole
/// block table slot by slot: the full-scale incident and an hour of Mooncake traffic would take
/// hours). Their reports are still pinned; `kvsim run --check-oracle` checks them on demand.
const TOO_LARGE_TO_CHECK: [&str; 3] = ["glm53-fixed-config.toml", "glm53-incident.toml", "mooncake-conversation.toml"];

#[test]
fn every_scenario_report() {
    let mut checked = 0;
    for rel in crate::all_scenarios() {
        let cfg = crate::load(&rel, None, &[]);
        let repro = format!("kvsim run scenarios/{rel} --seed {} --profile {}", cfg.seed, cfg.profile);
        // Every component's invariants after every event, except on the hour of Mooncake traffic
        // (1.4M events; `kvsim run --check invariants` checks it on demand).
        let invariants = rel != "mooncake-conversation.toml";
        let mut w = if TOO_LARGE_TO_CHECK.contains(&rel.as_str()) {
            kvsim::simulate(cfg, None, invariants)
        } else {
            // The differential check: the fast and the reference oracle agree on every read.
            checked += 1;
            kvsim::simulate_checked(cfg, None, invariants)
        };
        if let Some(rf) = w.reference.take() {
            assert_eq!(rf.disagreement_count, 0, "{rel}: {:?}", rf.disagreements.first().map(|d| d.to_string()));
        }
        let text = kvsim::report::Report::build(&w, repro).text();
        let name = format!("report__{}", rel.trim_end_matches(".toml").replace('/', "__"));
        settings().bind(|| insta::assert_snapshot!(name, text));
    }
    assert!(checked >= 15, "{checked} scenario(s) checked");
}

#[test]
fn mitigation_matrix() {
    let dir = crate::scenarios_dir().join("catalogue").to_string_lossy().into_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["matrix", &dir]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    settings().bind(|| insta::assert_snapshot!("mitigation_matrix", String::from_utf8_lossy(&out.stdout)));
}

/// Two rows from files of the same name (`a/row.toml`, `b/row.toml`) are told apart by their
/// paths in `matrix` and `explore --catalogue` (both read `row` before); a unique stem stays the
/// row's name.
#[test]
fn matrix_rows_of_files_with_one_name_are_told_apart() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = crate::Scratch::new("matrix-names");
    let row = std::fs::read_to_string(crate::scenarios_dir().join("catalogue/stub-admission.toml")).unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::write(dir.join(sub).join("row.toml"), &row).unwrap();
    }
    std::fs::write(dir.join("alone.toml"), &row).unwrap();
    let a = dir.join("a/row.toml").to_string_lossy().into_owned();
    let b = dir.join("b/row.toml").to_string_lossy().into_owned();
    let alone = dir.join("alone.toml").to_string_lossy().into_owned();
    let out = std::process::Command::new(bin).args(["matrix", &a, &b, &alone]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for name in [a.trim_end_matches(".toml"), b.trim_end_matches(".toml")] {
        assert!(text.contains(&format!("\n{name} ")), "row {name}: {text}");
    }
    assert!(text.contains("\nalone "), "{text}");
    let d = dir.to_string_lossy().into_owned();
    let out =
        std::process::Command::new(bin).args(["explore", "--catalogue", &d, "--max-states", "2000"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [a.trim_end_matches(".toml"), b.trim_end_matches(".toml")] {
        assert!(text.contains(&format!("| {name} |")), "row {name}: {text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `kvsim check`, `matrix` and `explore --catalogue` given nothing to check are bad input (exit 2
/// naming the path), not a pass: a directory without scenarios, a file without `[[expect]]`, a
/// scenario without a `buggy` row. A file named explicitly is parsed whatever its extension.
#[test]
fn check_matrix_and_catalogue_refuse_an_empty_selection() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = crate::Scratch::new("check-empty");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/notes.txt"), "not a scenario").unwrap();
    let plain = dir.join("plain.scenario");
    std::fs::write(&plain, crate::bad_input::GOOD).unwrap();
    let empty = dir.join("sub").to_string_lossy().into_owned();
    let plain = plain.to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for cmd in [&["check"][..], &["matrix"], &["explore", "--catalogue"]] {
        let (code, err) = run(&[cmd, &[empty.as_str()]].concat());
        assert_eq!(code, Some(2), "{cmd:?} on a directory without scenarios: {err}");
        assert!(err.contains(&empty) && err.contains("no scenario files"), "{cmd:?}: {err}");
        // An explicit file is parsed (not skipped for its extension) and has nothing to check.
        let (code, err) = run(&[cmd, &[plain.as_str()]].concat());
        assert_eq!(code, Some(2), "{cmd:?} on a scenario without expectations: {err}");
        assert!(err.contains(&plain), "{cmd:?}: {err}");
    }
    let (_, err) = run(&["check", &plain]);
    assert!(err.contains("no [[expect]] entries"), "{err}");
    // The catalogue table's header is not printed before that error.
    let out = std::process::Command::new(bin).args(["explore", "--catalogue", &plain]).output().unwrap();
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    // A broken scenario without expectations is bad input naming its error, not "nothing to
    // check" (an unknown knob hid behind that message); the matrix names the files it skips.
    let broken = dir.join("broken.toml");
    std::fs::write(&broken, crate::bad_input::GOOD.replace("page_size = 16", "page_sise = 16")).unwrap();
    let broken = broken.to_string_lossy().into_owned();
    for cmd in ["check", "matrix"] {
        let (code, err) = run(&[cmd, &broken]);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(err.contains("unknown knob `page_sise`"), "{cmd}: {err}");
    }
    let row = crate::scenarios_dir().join("catalogue/stub-admission.toml").to_string_lossy().into_owned();
    let out = std::process::Command::new(bin).args(["matrix", &row, &plain]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("note: 1 file(s) without a `buggy` expectation skipped") && err.contains(&plain), "{err}");
    // A `buggy` entry that does not hold unmitigated gets no row (its cells credited whichever
    // mitigation stopped another violation with "detected"): a mismatch, exit 1, as `check`.
    let unheld = dir.join("unheld.toml");
    let text = std::fs::read_to_string(&row).unwrap();
    let (head, _) = text.split_once("[[expect]]").unwrap();
    std::fs::write(&unheld, format!("{head}[[expect]]\nname = \"buggy\"\nviolations = [\"double_free\"]\n")).unwrap();
    let unheld = unheld.to_string_lossy().into_owned();
    let out = std::process::Command::new(bin).args(["matrix", &row, &unheld]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("unheld: no row: its `buggy` entry does not hold without a mitigation (expected double_free, none occurred)"), "{text}");
    assert!(text.contains("\nstub-admission ") && text.contains(&format!("kvsim check {unheld}")), "{text}");
    // A file that is not a scenario at all is a parse error naming it, not silently skipped.
    let junk = dir.join("sub/notes.txt").to_string_lossy().into_owned();
    let (code, err) = run(&["check", &junk]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&junk), "{err}");
    // An entry that asserts nothing would pass whatever the run does: bad input for both.
    let vacuous = dir.join("vacuous.toml");
    std::fs::write(&vacuous, format!("{}\n[[expect]]\nname = \"buggy\"\n", crate::bad_input::GOOD)).unwrap();
    let vacuous = vacuous.to_string_lossy().into_owned();
    for cmd in ["check", "matrix"] {
        let (code, err) = run(&[cmd, &vacuous]);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(err.contains("asserts nothing"), "{cmd}: {err}");
    }
    // An entry's error names its line and field, not `kvsim run`'s flags.
    let prof = dir.join("prof.toml");
    std::fs::write(
        &prof,
        format!("{}\n[[expect]]\nname = \"p\"\nprofile = \"sglang-9\"\nclean = true\n", crate::bad_input::GOOD),
    )
    .unwrap();
    let (code, err) = run(&["check", prof.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("`expect[0].profile` (`p`): unknown profile `sglang-9`") && !err.contains("--profile"),
        "{err}"
    );
    // A knob's value keeps its TOML type: a number written as a string is refused as in
    // `[knobs]`, not read as the number.
    let typed = dir.join("typed.toml");
    std::fs::write(
        &typed,
        format!("{}\n[[expect]]\nname = \"t\"\nset = {{ page_size = \"32\" }}\nclean = true\n", crate::bad_input::GOOD),
    )
    .unwrap();
    let (code, err) = run(&["check", typed.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`expect[0].set` (`t`): `page_size`: invalid type: string \"32\""), "{err}");
    // `kvsim run` refuses the entries `check` refuses (it ran the file and passed over them).
    for (file, want) in [
        (&prof, "`expect[0].profile` (`p`): unknown profile `sglang-9`"),
        (&typed, "`expect[0].set` (`t`): `page_size`: invalid type"),
    ] {
        let (code, err) = run(&["run", file.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
    let knob = dir.join("knob.toml");
    let body = "\n[[expect]]\nname = \"x\"\nclean = true\nset = { page_sise = 16 }\n";
    std::fs::write(&knob, format!("{}{body}", crate::bad_input::GOOD)).unwrap();
    let (code, err) = run(&["run", knob.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`expect[0].set` (`x`): `page_sise`: unknown knob"), "{err}");
    // The matrix checks its `buggy` entry as `check` does: an unknown kind is bad input.
    let typo = dir.join("typo.toml");
    std::fs::write(
        &typo,
        format!("{}\n[[expect]]\nname = \"buggy\"\nviolations = [\"nope\"]\n", crate::bad_input::GOOD),
    )
    .unwrap();
    let (code, err) = run(&["matrix", typo.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown violation kind `nope`"), "{err}");
    // Entries that assert nothing in part, or could never pass, are bad input naming the line
    // and field at fault (the header line and no field before).
    let good_lines = crate::bad_input::GOOD.lines().count();
    for (body, field, what) in [
        ("requests = { \"0\" = [] }", "requests", "lists no kind"),
        ("status = { \"0\" = 200, \"00\" = 500 }", "status", "no request `00`"),
        ("status = { \"+0\" = 200 }", "status", "no request `+0`"),
        ("status = { \"0\" = 999 }", "status", "999 is not an HTTP status"),
        ("clean = true\nviolations = [\"cross_tenant_read\"]", "clean", "could never pass"),
        ("violations = [\"page_leak\"]\nabsent = [\"page_leak\"]", "absent", "both required and absent"),
        ("violations = [\"cross_tenant_reed\"]", "violations", "unknown violation kind `cross_tenant_reed`"),
        ("status = { \"5\" = 200 }", "status", "no request `5`"),
        ("requests = { \"0\" = [\"page_leak\"] }", "requests", "never a request's"),
        ("violations = [\"wrong_stat\"]", "violations", "did you mean `wrong_status`?"),
        ("violations = [\"page_leak\", \"page_leak\"]", "violations", "`page_leak` is listed twice"),
        ("absent = [\"wrong_status\", \"wrong_status\"]", "absent", "`wrong_status` is listed twice"),
        ("requests = { \"0\" = [\"use_after_free\", \"use_after_free\"] }", "requests", "is listed twice"),
        ("clean = true\nexplore_faults = [\"crash\", \"crash\"]", "explore_faults", "`crash` is listed twice"),
        ("clean = true\nexplore_faults = [\"crsh\"]", "explore_faults", "did you mean `crash`?"),
    ] {
        let f = dir.join("bad-expect.toml");
        std::fs::write(&f, format!("{}\n[[expect]]\nname = \"x\"\n{body}\n", crate::bad_input::GOOD)).unwrap();
        let (code, err) = run(&["check", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{body}: {err}");
        // GOOD, a blank line, the header, the name: then the body, where the field's line is.
        let line = good_lines + 4 + body.lines().position(|l| l.starts_with(field)).unwrap();
        let at = format!("bad-expect.toml:{line}: `expect[0].{field}` (`x`): ");
        assert!(err.contains(&at) && err.contains(what), "{body}: want {at}…{what}\n{err}");
    }
    // The file's own error is not blamed on an entry; an error the entry's page size causes is.
    let base = dir.join("base-error.toml");
    std::fs::write(
        &base,
        format!(
            "{}\n[[expect]]\nname = \"x\"\nclean = true\n",
            crate::bad_input::GOOD.replace("at_ms = 0", "at_ms = 4611686018428")
        ),
    )
    .unwrap();
    let (code, err) = run(&["check", base.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`request[0].at_ms`") && !err.contains("with [[expect]]"), "{err}");
    let ps = dir.join("entry-page-size.toml");
    std::fs::write(
        &ps,
        format!("{}\n[[expect]]\nname = \"p\"\nset = {{ page_size = 7 }}\nclean = true\n", crate::bad_input::GOOD),
    )
    .unwrap();
    let (code, err) = run(&["check", ps.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`expect[0].set` (`p`)") && err.contains("page_size 7 is the entry's `set`"), "{err}");
    assert!(!err.contains("--set"), "{err}");
    // An entry's profile whose page size breaks a pool: the hint is in the entry's terms.
    let prof_ps = dir.join("entry-profile-page-size.toml");
    let base = crate::bad_input::GOOD.replace("pool_tokens = 4096", "pool_tokens = 4100").replace("page_size = 16", "");
    std::fs::write(
        &prof_ps,
        format!(
            "profile = \"sglang-0.5.22\"\n{base}\n[[expect]]\nname = \"v\"\nprofile = \"vllm-nixl\"\nclean = true\n"
        ),
    )
    .unwrap();
    let (code, err) = run(&["check", prof_ps.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("`expect[0].profile` (`v`)") && err.contains("with `set = { page_size = 1 }` in the entry"),
        "{err}"
    );
    let unnamed = dir.join("unnamed.toml");
    std::fs::write(&unnamed, format!("{}\n[[expect]]\nname = \"\"\nclean = true\n", crate::bad_input::GOOD)).unwrap();
    let (code, err) = run(&["check", unnamed.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`expect[0].name`") && err.contains("name is empty"), "{err}");
    let twice = dir.join("twice.toml");
    std::fs::write(
        &twice,
        format!(
            "{}\n[[expect]]\nname = \"x\"\nclean = true\n[[expect]]\nname = \"x\"\nclean = true\n",
            crate::bad_input::GOOD
        ),
    )
    .unwrap();
    let (code, err) = run(&["check", twice.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`expect[1].name` (`x`): `expect[0]` has this name too"), "{err}");
    // Every command that reads the entries refuses them alike (matrix took one of two `buggy`
    // entries without a word; run and shrink accepted the file).
    let buggy = dir.join("buggy-twice.toml");
    let cat = std::fs::read_to_string(crate::scenarios_dir().join("catalogue/stub-admission.toml")).unwrap();
    std::fs::write(&buggy, cat.replace("name = \"fixed-mini-lb\"", "name = \"buggy\"")).unwrap();
    let b = buggy.to_str().unwrap();
    // A value the file itself breaks is named at its own line, not at an entry's `profile`.
    let big = dir.join("big-pool.toml");
    std::fs::write(&big, cat.replacen("pool_tokens = 8192", "pool_tokens = 1099511627776", 1)).unwrap();
    let (code, err) = run(&["check", big.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("big-pool.toml:15: `decode[0].pool_tokens`") && !err.contains("expect["), "{err}");
    for args in [vec!["matrix", b], vec!["run", b], vec!["shrink", b, "--out", "/dev/null"], vec!["check", b]] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("`expect[0]` has this name too"), "{args:?}: {err}");
    }
    // A link back to its own folder is not followed (it looped forever).
    let looped = dir.join("looped");
    std::fs::create_dir_all(&looped).unwrap();
    std::fs::copy(crate::scenarios_dir().join("catalogue/stub-admission.toml"), looped.join("a.toml")).unwrap();
    std::os::unix::fs::symlink(".", looped.join("self")).unwrap();
    let out = std::process::Command::new(bin).args(["check", looped.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("in 1 scenario(s)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // One file named directly and through a link is checked once (it ran twice).
    let link = dir.join("link.toml");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(looped.join("a.toml"), &link).unwrap();
    let out = std::process::Command::new(bin)
        .args(["check", link.to_str().unwrap(), looped.join("a.toml").to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("in 1 scenario(s)"), "{stdout}");
}

#[test]
fn catalogue_expectations_hold() {
    let dir = crate::scenarios_dir().to_string_lossy().into_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["check", &dir]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
    // A wrong expectation makes `kvsim check` fail with exit 1.
    let bad_dir = crate::Scratch::new("check");
    let bad = bad_dir.join("bad.toml");
    let src = std::fs::read_to_string(crate::scenarios_dir().join("catalogue/stub-admission.toml")).unwrap();
    std::fs::write(&bad, src.replace("\"2\" = 400 }", "\"2\" = 200 }")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["check", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FAIL: request 2: expected HTTP 200, got 400"), "{text}");
    // The failure says how to see its run, and that command shows the status the entry missed.
    let line = text.lines().find(|l| l.starts_with("reproduce `")).unwrap_or_else(|| panic!("{text}"));
    let cmd = line.split_once(": kvsim ").unwrap().1;
    assert!(cmd.starts_with("run ") && cmd.contains("--profile "), "{cmd}");
    let args: Vec<&str> = cmd.split(' ').collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(&args).arg("--json").output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r2 = report["per_request"].as_array().unwrap().iter().find(|r| r["id"] == 2).unwrap();
    assert_eq!(r2["status"], 400, "{r2}");
}
