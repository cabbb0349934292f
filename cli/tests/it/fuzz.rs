//! Fuzzing campaigns and shrinking: determinism across jobs and shards, resume after kill -9,
//! the blind campaign finds the stub leak, and the incident shrinks to its minimal form.

use std::path::Path;
use std::process::Command;

fn kvsim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kvsim")).args(args).output().unwrap()
}

fn table(corpus: &str) -> serde_json::Value {
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(corpus).join("campaign.json")).unwrap()).unwrap();
    c["table"].clone()
}

fn saved(corpus: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(corpus).unwrap().flatten() {
        if let Ok(t) = std::fs::read_to_string(e.path().join("failure.json")) {
            let f: serde_json::Value = serde_json::from_str(&t).unwrap();
            out.push((f["signature"].as_str().unwrap().to_string(), f["seed"].as_u64().unwrap()));
        }
    }
    out.sort();
    out
}

const RUNS: &str = "400";

/// The campaign's stderr lines that announce a signature.
fn announced(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("fuzz: signature "))
        .map(String::from)
        .collect()
}

#[test]
fn shards_and_jobs_give_the_same_signatures() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let whole = tmp("whole");
    let out = kvsim(&["fuzz", "--runs", RUNS, "--corpus", &whole, "--no-shrink", "--seed-start", "7000"]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let t = table(&whole);
    assert!(t.as_object().unwrap().len() >= 3, "a blind campaign of {RUNS} runs finds several signatures: {t}");
    // Each signature is announced on stderr once, as it is counted: numbered, with its first seed.
    let lines = announced(&out);
    assert_eq!(lines.len(), t.as_object().unwrap().len(), "{lines:?}");
    for (i, l) in lines.iter().enumerate() {
        let sig = l.split(": ").nth(2).unwrap().split([' ', ',']).next().unwrap();
        let seed = t[sig]["first_seed"].as_u64().unwrap();
        // No known-bugs file (a blind campaign): no triage, only the hardware label.
        let label = if sig.ends_with("/visibility_lag") { " [hardware]" } else { "" };
        let folder = Path::new(&whole).join(sig.replace('/', "--"));
        let want = format!(
            "fuzz: signature {}: {sig}{label}, first seed {seed} (run {}); examples in {}",
            i + 1,
            seed - 7000 + 1,
            folder.display()
        );
        assert_eq!(l, &want);
        assert!(folder.is_dir(), "the announced folder holds the signature's examples: {l}");
    }
    let jobs = tmp("jobs");
    let out = kvsim(&["fuzz", "--runs", RUNS, "--corpus", &jobs, "--no-shrink", "--seed-start", "7000", "--jobs", "3"]);
    assert_eq!(table(&jobs), t, "--jobs 3 differs from --jobs 1");
    let jobs_lines: Vec<String> = announced(&out).iter().map(|l| l.replace(&jobs, &whole)).collect();
    assert_eq!(jobs_lines, lines, "the announcements follow the seed order, whatever --jobs");
    assert_eq!(saved(&jobs), saved(&whole));
    let mut shards = Vec::new();
    for i in 0..3 {
        let d = tmp(&format!("shard{i}"));
        let sh = format!("{i}/3");
        kvsim(&["fuzz", "--runs", RUNS, "--corpus", &d, "--no-shrink", "--seed-start", "7000", "--shard", &sh]);
        shards.push(d);
    }
    let merged = tmp("merged");
    let mut args = vec!["corpus", "merge"];
    args.extend(shards.iter().map(String::as_str));
    args.extend(["--into", &merged]);
    let merge = kvsim(&args);
    assert_eq!(merge.status.code(), out.status.code(), "the merge exits as the unsharded campaign");
    assert_eq!(table(&merged), t, "merged shards differ from the unsharded campaign");
    assert_eq!(saved(&merged), saved(&whole));
}

#[test]
fn an_interrupted_campaign_resumes_without_loss_or_repeats() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let fresh = tmp("fresh");
    kvsim(&["fuzz", "--runs", "3000", "--corpus", &fresh, "--no-shrink", "--seed-start", "500"]);
    let resumed = tmp("resumed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["fuzz", "--runs", "3000", "--corpus", &resumed, "--no-shrink", "--seed-start", "500"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it mid-run: once its checkpoint shows finished runs, and (checked below) before all.
    let ckpt = std::path::Path::new(&resumed).join("campaign.json");
    let done = |path: &std::path::Path| -> Option<u64> {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        v["next_k"].as_u64()
    };
    let t0 = std::time::Instant::now();
    while done(&ckpt).unwrap_or(0) == 0 && t0.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL: nothing gets to clean up
    child.wait().unwrap();
    let at_kill = done(&ckpt).expect("the killed campaign left a readable checkpoint");
    assert!(0 < at_kill && at_kill < 3000, "the kill landed mid-run: {at_kill} of 3000 runs checkpointed");
    // Every example the checkpoint lists still has its folder: an example pushed out by runs the
    // checkpoint had not counted yet is removed only once a checkpoint without it is on disk
    // (it was removed at once, and a killed campaign's checkpoint listed folders that were gone).
    let listed: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&ckpt).unwrap()).unwrap();
    for (sig, list) in listed["examples"].as_object().unwrap() {
        for e in list.as_array().unwrap() {
            let dir = Path::new(&resumed).join(sig.replace('/', "--")).join(format!("seed-{}", e["seed"]));
            assert!(dir.join("scenario.toml").is_file(), "{dir:?} is listed but gone");
        }
    }
    let out = kvsim(&["fuzz", "--runs", "3000", "--corpus", &resumed, "--no-shrink", "--seed-start", "500"]);
    assert_eq!(table(&resumed), table(&fresh));
    assert_eq!(saved(&resumed), saved(&fresh));
    // The resume announces only what the checkpoint had not counted.
    let total = table(&fresh).as_object().unwrap().len();
    assert!(announced(&out).len() <= total, "{:?}", announced(&out));
    assert!(
        announced(&out).iter().all(|l| {
            let seed: u64 = l.split("first seed ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            seed >= 500 + at_kill
        }),
        "a signature the killed run had counted is announced again: {:?}",
        announced(&out)
    );
    // Another campaign's corpus is refused.
    let out = kvsim(&["fuzz", "--runs", "10", "--corpus", &resumed, "--seed-start", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_blind_campaign_finds_the_stub_leak() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("blind");
    let out =
        kvsim(&["fuzz", "--runs", "10000", "--corpus", &c, "--no-shrink", "--until", "cross_tenant_read/stub_commit"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("until: `cross_tenant_read/stub_commit` found after"), "{text}");
    // The same command again runs nothing: the checkpoint has the signature (it ran one more run
    // and said "found after N + 1 runs").
    let runs = checkpoint(&c)["runs_done"].as_u64().unwrap();
    let out =
        kvsim(&["fuzz", "--runs", "10000", "--corpus", &c, "--no-shrink", "--until", "cross_tenant_read/stub_commit"]);
    let again = String::from_utf8_lossy(&out.stdout);
    assert_eq!(checkpoint(&c)["runs_done"].as_u64(), Some(runs), "{again}");
    let first = text.split("found after ").nth(1).and_then(|t| t.split(' ').next()).unwrap();
    assert!(
        again.contains(&format!("found after {first} runs, by an earlier invocation (the checkpoint has it)")),
        "{again}"
    );
    let saved = saved(&c);
    let (_, seed) = saved.iter().find(|(s, _)| s == "cross_tenant_read/stub_commit").unwrap();
    // The saved scenario reproduces the failure.
    let dir = format!("{c}/cross_tenant_read--stub_commit/seed-{seed}/scenario.toml");
    let out = kvsim(&["run", &dir, "--json"]);
    assert_eq!(out.status.code(), Some(10));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cross_tenant_read"));

    // `run`, `replay` and `confirm` take the saved folders and `failure.json` as they are: the
    // signature folder and its `failure.json` stand for its first example's seed folder.
    let sig = format!("{c}/cross_tenant_read--stub_commit");
    let seed_dir = format!("{sig}/seed-{seed}");
    for input in [sig.clone(), format!("{sig}/failure.json"), seed_dir.clone(), format!("{seed_dir}/failure.json")] {
        let out = kvsim(&["run", &input]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(10), "run {input}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(&format!("reproduce: kvsim run {seed_dir}/scenario.toml")), "{text}");
        let out = kvsim(&["replay", &input]);
        assert_eq!(out.status.code(), Some(10), "replay {input}: {}", String::from_utf8_lossy(&out.stderr));
        let out = kvsim(&["confirm", &input, "--backend", "cpu"]);
        assert!(matches!(out.status.code(), Some(0 | 10)), "confirm {input}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The corpus itself is refused, naming what to give instead.
    for cmd in ["run", "replay", "confirm", "shrink"] {
        let out = kvsim(&[cmd, &c]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd} {c}: {err}");
        assert!(err.contains("a campaign's corpus") && err.contains("it holds cross_"), "{err}");
    }
}

/// A trace is recognised by its content, whatever its name (as `replay` and `confirm` do), and
/// the overrides its header's configuration cannot take are refused, not dropped.
#[test]
fn shrink_takes_a_trace_of_any_name_and_refuses_overrides_of_it() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let scen = crate::scenarios_dir().join("small/stub-leak.toml");
    let trace = tmp("leak.trace");
    let out = kvsim(&["run", scen.to_str().unwrap(), "--trace", &trace]);
    assert_eq!(out.status.code(), Some(10));
    let shrunk = tmp("leak-shrunk.toml");
    let out = kvsim(&["shrink", &trace, "--out", &shrunk, "--budget", "300"]);
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&shrunk).unwrap().contains("# Signature: cross_tenant_read/"));
    for flags in [&["--set", "page_tags=on"][..], &["--seed", "9"], &["--profile", "sglang-0.5.22"]] {
        let out = kvsim(&[&["shrink", trace.as_str(), "--out", &shrunk][..], flags].concat());
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("so {} cannot change it", flags[0])), "{err}");
    }
}

/// A budget spent before the knobs are judged leaves them "not judged", never "necessary" (an
/// attempt the spent budget refused used to count as the knob being needed).
#[test]
fn knobs_the_budget_leaves_untried_are_not_called_necessary() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let scen = crate::scenarios_dir().join("small/mixed-faults.toml");
    let out = kvsim(&["shrink", scen.to_str().unwrap(), "--out", &tmp("budget.toml"), "--budget", "20"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap();
    assert!(
        line.contains(
            "necessary knobs (against sglang-0.5.22): not known: the run budget was spent before these were judged"
        ),
        "{line}"
    );
    assert!(line.contains("pd_admission_check=\"finished_only\""), "{line}");
}

#[test]
fn the_incident_shrinks_to_its_minimal_form_deterministically() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let scen = crate::scenarios_dir().join("glm53-incident.toml");
    let (a, b) = (tmp("shrunk-a.toml"), tmp("shrunk-b.toml"));
    let out = kvsim(&["shrink", scen.to_str().unwrap(), "--out", &a]);
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    kvsim(&["shrink", scen.to_str().unwrap(), "--out", &b]);
    let text = std::fs::read_to_string(&a).unwrap();
    assert_eq!(text, std::fs::read_to_string(&b).unwrap(), "shrinking is deterministic");
    assert!(text.contains("# Signature: cross_tenant_read/stub_commit"), "{text}");
    let cfg = crate::load_path(&a);
    assert!(cfg.requests.len() <= 3, "{} requests", cfg.requests.len());
    let tenants: std::collections::BTreeSet<u32> = cfg.requests.iter().map(|r| r.tenant).collect();
    assert!(tenants.len() <= 2);
    assert_eq!((cfg.prefill.len(), cfg.decode.len()), (1, 1));
    // Issue 15: only the knobs that differ from the profile are written (and read back, the case
    // keeps its signature, asserted below).
    let file: toml::Table = text.parse().unwrap();
    let profile = kvsim::config::profile(&cfg.profile).expect("a shipped profile");
    let base = toml::Table::try_from((profile.knobs)()).unwrap();
    let knobs = file.get("knobs").and_then(|k| k.as_table()).cloned().unwrap_or_default();
    assert!(knobs.len() < base.len() / 2, "{knobs:?}");
    for (k, v) in &knobs {
        assert_ne!(base.get(k), Some(v), "{k} = {v} is the profile's own value");
    }
    let w = kvsim::simulate(cfg, None, true);
    assert!(kvsim::fuzz::signatures(&w).contains("cross_tenant_read/stub_commit"));
}

#[test]
fn merge_refuses_overlapping_corpora_and_relocates_failures() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let mut shards = Vec::new();
    for i in 0..2 {
        let d = tmp(&format!("ov-shard{i}"));
        let sh = format!("{i}/2");
        let out =
            kvsim(&["fuzz", "--runs", "300", "--corpus", &d, "--no-shrink", "--seed-start", "9100", "--shard", &sh]);
        assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
        shards.push(d);
    }
    // A folder that is not there, or is no corpus, is named as such.
    let missing = tmp("ov-missing");
    let out = kvsim(&["corpus", "merge", &missing, &shards[1], "--into", &tmp("ov-none")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such folder"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let empty = tmp("ov-empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = kvsim(&["corpus", "merge", &empty, &shards[1], "--into", &tmp("ov-none")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a campaign's corpus"));
    // The same corpus twice: refused (its runs would be counted twice).
    let twice = tmp("ov-twice");
    let out = kvsim(&["corpus", "merge", &shards[0], &shards[0], "--into", &twice]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("overlap"), "{}", String::from_utf8_lossy(&out.stderr));
    // A merged corpus with one of its own shards: refused.
    let merged = tmp("ov-merged");
    let out = kvsim(&["corpus", "merge", &shards[0], &shards[1], "--into", &merged]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("partial"), "{}", String::from_utf8_lossy(&out.stderr));
    let again = tmp("ov-again");
    let out = kvsim(&["corpus", "merge", &merged, &shards[1], "--into", &again]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    // A shard whose campaign still runs (its lock held) is not merged half done.
    let lock = std::fs::OpenOptions::new().write(true).open(Path::new(&shards[0]).join("campaign.lock")).unwrap();
    lock.try_lock().unwrap();
    let running = tmp("ov-running");
    let out = kvsim(&["corpus", "merge", &shards[0], &shards[1], "--into", &running]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a campaign is running in this corpus"), "{err}");
    assert!(!Path::new(&running).exists());
    drop(lock);
    // Every merged failure points into the merged corpus, and its command runs.
    let mut checked = 0;
    for e in std::fs::read_dir(&merged).unwrap().flatten() {
        let Ok(t) = std::fs::read_to_string(e.path().join("failure.json")) else { continue };
        let f: serde_json::Value = serde_json::from_str(&t).unwrap();
        let repro = f["reproduce"].as_str().unwrap();
        assert!(repro.contains(&merged) && !repro.contains("ov-shard"), "{repro}");
        let scen = repro.strip_prefix("kvsim run ").unwrap();
        let out = kvsim(&["run", scen]);
        assert!(matches!(out.status.code(), Some(10) | Some(11)), "{repro}");
        checked += 1;
    }
    assert!(checked >= 2, "merged failures: {checked}");
    // A shard stopped while it saved its examples (one has no failure.json yet): the merge is
    // partial, says why, and cannot be resumed (it exited 10 as a whole merge, its examples lost).
    let cut = tmp("ov-cut");
    assert!(Command::new("cp").args(["-r", &shards[1], &cut]).status().unwrap().success());
    let seed = std::fs::read_dir(&cut)
        .unwrap()
        .flatten()
        .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-")) && p.join("failure.json").is_file()
        })
        .expect("a saved example");
    std::fs::remove_file(seed.join("failure.json")).unwrap();
    let cut_merged = tmp("ov-cut-merged");
    let out = kvsim(&["corpus", "merge", &shards[0], &cut, "--into", &cut_merged]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{err}");
    assert!(err.contains("a partial merge (examples not completed: 1 in"), "{err}");
    let ckpt: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&cut_merged).join("campaign.json")).unwrap()).unwrap();
    assert!(ckpt["partial"].as_str().is_some_and(|p| p.contains("examples not completed")), "{ckpt}");
}

#[test]
fn leftovers_of_a_killed_campaign_are_cleaned_and_never_merged() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("leftovers");
    let out = kvsim(&["fuzz", "--runs", "200", "--corpus", &c, "--no-shrink", "--seed-start", "9300"]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)));
    let sig_dir =
        std::fs::read_dir(&c).unwrap().flatten().find(|e| e.path().join("failure.json").exists()).unwrap().path();
    // What kill -9 leaves at each step of a save and of a checkpoint write.
    let junk = [sig_dir.join(".tmp-seed-9301-4242"), sig_dir.join("seed-999999"), Path::new(&c).join(".tmp-seed-1-1")];
    for d in &junk {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("scenario.toml"), "half written").unwrap();
    }
    let files = [Path::new(&c).join("campaign.tmp4242"), sig_dir.join("failure.tmp4242")];
    for f in &files {
        std::fs::write(f, "{").unwrap();
    }
    // Merging does not copy them.
    let merged = tmp("leftovers-merged");
    let out = kvsim(&["corpus", "merge", &c, "--into", &merged]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let merged_sig = Path::new(&merged).join(sig_dir.file_name().unwrap());
    let names: Vec<String> = std::fs::read_dir(&merged_sig)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let sig = std::fs::read_to_string(sig_dir.join("failure.json")).unwrap();
    let sig: serde_json::Value = serde_json::from_str(&sig).unwrap();
    let ckpt: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&c).join("campaign.json")).unwrap()).unwrap();
    let kept = ckpt["examples"][sig["signature"].as_str().unwrap()].as_array().unwrap().len();
    assert_eq!(names.len(), 1 + kept, "failure.json and the {kept} examples' folders: {names:?}");
    // Resuming cleans them up and keeps everything committed.
    let before = saved(&c);
    let out = kvsim(&["fuzz", "--runs", "200", "--corpus", &c, "--no-shrink", "--seed-start", "9300"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("leftover"), "{}", String::from_utf8_lossy(&out.stderr));
    for p in junk.iter().chain(files.iter()) {
        assert!(!p.exists(), "{} survived", p.display());
    }
    assert_eq!(saved(&c), before);
}

/// A known-bugs file listing `sigs`, each tied to a catalogue row.
fn known_file(at: &str, profile: &str, sigs: &[&String]) -> String {
    let mut t = format!("profile = \"{profile}\"\n");
    for s in sigs {
        // A row the signature is a symptom of (the file is refused otherwise).
        let rows = kvsim::triage::catalogue_rows();
        let row = std::iter::once(&"rdma-visibility-lag")
            .chain(&rows)
            .find(|r| kvsim::triage::is_symptom(r, s))
            .expect("a row with this symptom");
        t.push_str(&format!(
            "\n[[known]]\nsignature = \"{s}\"\nrow = \"{row}\"\nreference = \"test\"\nnote = \"test\"\n"
        ));
    }
    let p = format!("{at}.toml");
    std::fs::write(&p, t).unwrap();
    p
}

/// Issue 15: triage. Signatures listed in the known-bugs file are `known (<row>)` and leave the
/// exit status at 0; a new safety signature exits 10, a new liveness one alone 11; a malformed
/// file or one for another profile is refused with exit 2 and the file, line and field.
#[test]
fn triage_exits_0_on_known_signatures_only_and_non_zero_on_new_ones() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let args = |corpus: &str, known: &str| -> Vec<String> {
        ["fuzz", "--profile", "sglang-0.5.22", "--runs", "30", "--no-shrink", "--confirm", "off", "--corpus", corpus]
            .iter()
            .map(|s| s.to_string())
            .chain(["--known".to_string(), known.to_string()])
            .collect()
    };
    let run = |name: &str, known: &str| {
        let c = tmp(name);
        let a = args(&c, known);
        let out = kvsim(&a.iter().map(String::as_str).collect::<Vec<_>>());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            c,
        )
    };
    let (code, out, err, corpus) = run("triage-none", "none");
    assert_eq!(code, Some(10), "{out}{err}");
    // No triage line; the status column is there and says `untriaged` on every row (it was left
    // out, so a CI parser could not rely on it).
    let header = out.lines().find(|l| l.starts_with("signature")).expect("a table header");
    assert!(header.contains(" status ") && !out.contains("triage against"), "{out}");
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("signature"))
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .take_while(|l| l.contains("kvsim run"))
        .collect();
    assert!(!rows.is_empty() && rows.iter().all(|l| l.contains(" untriaged")), "{out}");
    let t = table(&corpus);
    let sigs: Vec<&String> = t.as_object().unwrap().keys().collect();
    let safety: Vec<&String> =
        sigs.iter().copied().filter(|s| !s.starts_with("page_leak/") && !s.starts_with("request_hang/")).collect();
    assert!(safety.len() >= 2 && safety.len() < sigs.len(), "30 runs find safety and liveness signatures: {sigs:?}");

    let all = known_file(&tmp("known-all"), "sglang-0.5.22", &sigs);
    let (code, out, err, _) = run("triage-all", &all);
    assert_eq!(code, Some(0), "only known signatures: {out}{err}");
    // Announced as found, triaged: the log of a nightly job says what is new before the table.
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("fuzz: signature ")).collect();
    assert_eq!(lines.len(), sigs.len(), "{err}");
    assert!(lines.iter().all(|l| l.contains(" [known (")), "{err}");
    assert!(out.contains(&format!("{} known, 0 new (exit 0)", sigs.len())), "{out}");
    assert!(out.lines().filter(|l| l.contains(" known (")).count() == sigs.len(), "{out}");

    let (code, out, _, _) = run("triage-liveness", &known_file(&tmp("known-safety"), "sglang-0.5.22", &safety));
    assert_eq!(code, Some(11), "only liveness signatures are new: {out}");
    let new = sigs.len() - safety.len();
    assert!(out.contains(&format!("{} known, {new} new", safety.len())), "{out}");
    assert!(
        out.lines().any(|l| (l.starts_with("page_leak/") || l.starts_with("request_hang/")) && l.contains(" new ")),
        "{out}"
    );

    let (code, out, err, _) = run("triage-safety", &known_file(&tmp("known-one"), "sglang-0.5.22", &sigs[1..]));
    assert_eq!(code, Some(if safety.contains(&sigs[0]) { 10 } else { 11 }), "{} is new: {out}", sigs[0]);
    let new_line = format!(": {} [new", sigs[0]);
    assert_eq!(err.lines().filter(|l| l.starts_with("fuzz: signature ") && l.contains(&new_line)).count(), 1, "{err}");
    assert_eq!(err.lines().filter(|l| l.contains(" [new")).count(), 1, "{err}");

    // Bad files: exit 2, file:line: field: what, and no campaign run.
    let bad = known_file(&tmp("known-bad"), "sglang-0.5.22", &sigs[..1]).replace(".toml", "-bad.toml");
    let text: String = std::fs::read_to_string(bad.replace("-bad.toml", ".toml"))
        .unwrap()
        .lines()
        .map(|l| if l.starts_with("row = ") { "row = \"rdma-lag\"\n".to_string() } else { format!("{l}\n") })
        .collect();
    std::fs::write(&bad, text).unwrap();
    let (code, out, err, _) = run("triage-bad", &bad);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains(&format!("{bad}:5: known[0].row: `rdma-lag` is not a row")), "{err}");
    assert!(!err.contains("panicked") && out.is_empty(), "{out}{err}");
    let (code, _, err, _) = run("triage-other", &known_file(&tmp("known-other"), "vllm-nixl", &sigs));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the file is for profile vllm-nixl, the campaign runs sglang-0.5.22"), "{err}");
    let (code, _, err, _) = run("triage-missing", "/nonexistent/known.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--known /nonexistent/known.toml"), "{err}");
}

/// Issue 15: `--known` defaults to the shipped file of the profile, and `corpus merge` triages
/// the merged table the same way (exit 0 when only known, 10/11 on new; 0 with `--known none`).
#[test]
fn the_shipped_known_bugs_file_is_the_default_and_merge_triages() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("shipped");
    let out = kvsim(&[
        "fuzz",
        "--profile",
        "sglang-0.5.22",
        "--runs",
        "30",
        "--no-shrink",
        "--confirm",
        "off",
        "--corpus",
        &c,
    ]);
    let (fuzz_code, text) = (out.status.code(), String::from_utf8_lossy(&out.stdout));
    assert!(
        text.contains("triage against kvsim's built-in known-bugs/sglang-0.5.22.toml (profile sglang-0.5.22)"),
        "{text}"
    );
    // No hardware fault in a profile's campaign (issue 13): the 5xx is router-waits-for-decode, a known row.
    assert!(text.contains("known (router-waits-for-decode)"), "{text}");
    let merged = tmp("shipped-merged");
    let out = kvsim(&["corpus", "merge", &c, "--into", &merged]);
    let m = String::from_utf8_lossy(&out.stdout);
    assert!(m.contains("triage against kvsim's built-in known-bugs/sglang-0.5.22.toml"), "{m}");
    assert_eq!(out.status.code(), fuzz_code, "the merge of one corpus exits like its campaign: {m}");
    let t = table(&c);
    let sigs: Vec<&String> = t.as_object().unwrap().keys().collect();
    let all = known_file(&tmp("shipped-all"), "sglang-0.5.22", &sigs);
    let merged2 = tmp("shipped-merged2");
    let out = kvsim(&["corpus", "merge", &c, "--into", &merged2, "--known", &all]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let merged3 = tmp("shipped-merged3");
    let out = kvsim(&["corpus", "merge", &c, "--into", &merged3, "--known", "none"]);
    // Untriaged, every signature counts, as in a campaign with `--known none`: the 5xx is a
    // safety violation (wrong_status).
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stdout));
    // No triage line (the table's status column says `untriaged`).
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.lines().any(|l| l.starts_with("triage")) && text.contains("untriaged"), "{text}");
}

/// A merge exits as the unsharded campaign does (a blind one too: exit 10 when it found a safety
/// violation, not 0). A shard missing gives a partial merge: a warning, and a checkpoint no
/// resume continues (it would skip the missing shard's seeds). `--into` must be new or empty.
#[test]
fn merges_exit_like_the_unsharded_campaign_and_partial_ones_say_so() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let args = |corpus: &str, shard: &str| {
        let mut a = vec!["fuzz", "--runs", "300", "--no-shrink", "--confirm", "off", "--seed-start", "9500"];
        a.extend(["--corpus", corpus]);
        if !shard.is_empty() {
            a.extend(["--shard", shard]);
        }
        kvsim(&a)
    };
    let whole = tmp("exit-whole");
    let unsharded = args(&whole, "").status.code();
    assert!(matches!(unsharded, Some(10) | Some(11)), "a blind campaign of 300 runs finds violations");
    let shards: Vec<String> = (0..2)
        .map(|i| {
            let d = tmp(&format!("exit-shard{i}"));
            args(&d, &format!("{i}/2"));
            d
        })
        .collect();
    let merged = tmp("exit-merged");
    let out = kvsim(&["corpus", "merge", &shards[0], &shards[1], "--into", &merged]);
    assert_eq!(out.status.code(), unsharded, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(table(&merged), table(&whole));
    // Into a folder that is not empty: refused, the folder unchanged.
    let before = std::fs::read_to_string(Path::new(&merged).join("campaign.json")).unwrap();
    let out = kvsim(&["corpus", "merge", &shards[0], &shards[1], "--into", &merged]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(Path::new(&merged).join("campaign.json")).unwrap(), before);
    // One shard of two: a partial merge, said so, and not resumable.
    let part = tmp("exit-partial");
    let out = kvsim(&["corpus", "merge", &shards[0], "--into", &part]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("partial merge (shard(s) 1/2 missing)"), "{err}");
    let out = args(&part, "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be resumed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `--base` campaign runs its base's profile: a known-bugs file of another profile is refused,
/// as with `--profile`.
#[test]
fn a_known_bugs_file_must_match_a_base_scenarios_profile() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let base = crate::scenarios_dir().join("small/stub-leak.toml");
    let known = crate::scenarios_dir().join("../known-bugs/sglang-0.5.22.toml");
    let c = tmp("known-base");
    let out = kvsim(&[
        "fuzz",
        "--runs",
        "5",
        "--base",
        base.to_str().unwrap(),
        "--known",
        known.to_str().unwrap(),
        "--corpus",
        &c,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the file is for profile sglang-0.5.22, the campaign runs sglang-0.5.16"), "{err}");
    assert!(!Path::new(&c).exists(), "nothing written");
}

/// A campaign never takes a folder for its own corpus when it is not: a checkpoint it cannot
/// read, or a non-empty folder without one, is refused (exit 2) and nothing in it is removed (a
/// resume removes the examples its checkpoint does not list). A corpus copied elsewhere and
/// resumed there reports commands that point at the copy.
#[test]
fn a_folder_that_is_not_the_campaigns_corpus_is_refused_and_left_as_it_is() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("own");
    let args = |corpus: &str| {
        kvsim(&["fuzz", "--runs", "200", "--no-shrink", "--confirm", "off", "--seed-start", "9700", "--corpus", corpus])
    };
    // A folder of someone's files: refused before anything is made in it (it kept a lock file).
    let other = tmp("someones");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(Path::new(&other).join("x"), b"mine").unwrap();
    let out = args(&other);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a campaign's corpus"));
    let left: Vec<_> = std::fs::read_dir(&other).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("x")], "left as it is");
    args(&c);
    let before = saved(&c);
    assert!(!before.is_empty());
    let ckpt = Path::new(&c).join("campaign.json");
    let good = std::fs::read(&ckpt).unwrap();
    std::fs::write(&ckpt, b"\xff\xfe not utf-8").unwrap();
    let out = args(&c);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the campaign's checkpoint"));
    assert_eq!(saved(&c), before, "nothing removed");
    std::fs::remove_file(&ckpt).unwrap();
    let out = args(&c);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a campaign's corpus"));
    assert_eq!(saved(&c), before, "nothing removed");
    std::fs::write(&ckpt, good).unwrap();
    // Copied, resumed there: the table's commands name the copy.
    let copy = tmp("own-copy");
    assert!(Command::new("cp").args(["-r", &c, &copy]).status().unwrap().success());
    let out = args(&copy);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("kvsim run {copy}/")), "{text}");
    assert!(!text.contains(&format!("kvsim run {c}/")), "{text}");
    // The corpus itself is not a case to shrink: the message says which folders are.
    let out = kvsim(&["shrink", &copy]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a campaign's corpus; give one of its signature folders"));
    // A signature folder that lost its failure.json names its seed folders (it said "a folder
    // without scenario.toml").
    let (sig, seed) = first_example(&copy);
    let sig_dir = Path::new(&copy).join(sig.replace('/', "--"));
    std::fs::remove_file(sig_dir.join("failure.json")).unwrap();
    let out = kvsim(&["run", sig_dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a signature folder without its failure.json") && err.contains(&format!("seed-{seed}")),
        "{err}"
    );
}

/// Issue 15: `kvsim shrink` accepts a signature folder of a corpus and keeps that folder's
/// signature (not the first cross-tenant one the run also shows).
#[test]
fn shrink_accepts_a_signature_folder_and_keeps_its_signature() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("shrink-folder");
    let out = kvsim(&[
        "fuzz",
        "--profile",
        "sglang-0.5.16",
        "--runs",
        "20",
        "--no-shrink",
        "--confirm",
        "off",
        "--corpus",
        &c,
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    let sig = "uninitialized_read/stub_commit";
    let folder = Path::new(&c).join(sig.replace('/', "--"));
    assert!(folder.join("failure.json").is_file(), "20 runs save {sig}: {:?}", saved(&c));
    let shrunk = format!("{}.toml", tmp("shrink-folder-out"));
    let out = kvsim(&["shrink", folder.to_str().unwrap(), "--out", &shrunk, "--budget", "400"]);
    assert!(out.status.success() || out.status.code() == Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&shrunk).unwrap();
    assert!(text.contains(&format!("# Signature: {sig}\n")), "{text}");
    let w = kvsim::simulate(crate::load_path(&shrunk), None, false);
    assert!(kvsim::fuzz::signatures(&w).contains(sig));
    // One of its seed folders too (it holds a `failure.json` of its own), with its signature.
    let seed = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-")))
        .expect("a seed folder");
    std::fs::remove_file(&shrunk).unwrap();
    let out = kvsim(&["shrink", seed.to_str().unwrap(), "--out", &shrunk, "--budget", "400"]);
    assert!(out.status.success() || out.status.code() == Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&shrunk).unwrap();
    assert!(text.contains(&format!("# Signature: {sig}\n")), "{text}");
    // A folder that is neither a seed nor a signature folder is bad input.
    let out = kvsim(&["shrink", &c, "--out", &shrunk]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 13: `visibility_lag` is a hardware fault. A profile's campaign leaves it off (no
/// signature whose chain names it), `--hardware-faults` draws it (another campaign: space
/// `profile:P+hardware`), and the table labels those signatures `hardware`.
#[test]
fn a_profile_campaign_draws_the_hardware_fault_only_with_hardware_faults() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let run = |name: &str, extra: &[&str]| {
        let c = tmp(name);
        let mut args = vec!["fuzz", "--profile", "sglang-0.5.22", "--runs", "60", "--no-shrink", "--confirm", "off"];
        args.extend(["--corpus", &c]);
        args.extend(extra);
        let out = kvsim(&args);
        assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), c)
    };
    let (plain, c) = run("hw-off", &[]);
    let t = table(&c);
    let sigs: Vec<&String> = t.as_object().unwrap().keys().collect();
    assert!(sigs.iter().all(|s| !s.contains("visibility_lag")), "{sigs:?}");
    assert!(!plain.contains("hardware"), "{plain}");
    let (asked, c) = run("hw-on", &["--hardware-faults"]);
    let t = table(&c);
    let lagged: Vec<&String> = t.as_object().unwrap().keys().filter(|s| s.ends_with("/visibility_lag")).collect();
    assert!(!lagged.is_empty(), "60 runs with the hardware fault find its signatures: {asked}");
    for sig in lagged {
        let line = asked.lines().find(|l| l.starts_with(sig.as_str())).unwrap_or_else(|| panic!("{sig}: {asked}"));
        assert!(line.contains("known (rdma-visibility-lag), hardware"), "{line}");
    }
    let ckpt: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{c}/campaign.json")).unwrap()).unwrap();
    assert_eq!(ckpt["space"], "profile:sglang-0.5.22+hardware", "{ckpt}");
}

/// Issue 15: the campaign's HTML report. Written into the corpus by default and where `--html`
/// says; well-formed; names every signature with its triage status and reproduce command; every
/// link resolves to a file the campaign wrote (the Perfetto JSON and SVG page map included).
#[test]
fn the_campaign_writes_an_html_report_whose_links_resolve() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("html");
    let elsewhere = tmp("html-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let page2 = format!("{elsewhere}/page.html");
    for html in [None, Some(page2.as_str())] {
        let mut args = vec!["fuzz", "--profile", "sglang-0.5.22", "--runs", "40", "--confirm", "cpu", "--corpus", &c];
        args.extend(["--shrink-budget", "200"]);
        if let Some(h) = html {
            args.extend(["--html", h]);
        }
        let out = kvsim(&args);
        assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
        let path = html.map(String::from).unwrap_or(format!("{c}/report.html"));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("report: {path}")));
        let page = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse_with_options(
            &page,
            roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() },
        )
        .unwrap_or_else(|e| panic!("{path} is not well-formed: {e}"));
        let text: String = doc.descendants().filter_map(|n| n.text()).collect();
        let t = table(&c);
        let sigs: Vec<&String> = t.as_object().unwrap().keys().collect();
        assert!(sigs.len() >= 2, "{sigs:?}");
        for (sig, f) in saved(&c) {
            assert!(text.contains(&sig), "{sig} missing");
            let folder = Path::new(&c).join(sig.replace('/', "--")).join(format!("seed-{f}"));
            let shrunk = format!("kvsim run {}", folder.join("shrunk.toml").display());
            assert!(text.contains(&shrunk), "{shrunk} missing");
            assert!(folder.join("perfetto.json").is_file() && folder.join("pagemap.svg").is_file(), "{folder:?}");
        }
        // A profile's campaign draws no hardware fault (issue 13): rdma-visibility-lag is not found.
        assert!(text.contains("known (router-waits-for-decode)"), "triaged against the shipped file");
        let base = Path::new(&path).parent().unwrap();
        let mut links = 0;
        for h in doc.descendants().filter_map(|n| n.attribute("href")).filter(|h| !h.starts_with('#')) {
            let target = base.join(h.replace("%20", " "));
            assert!(target.is_file(), "{path}: link {h} does not resolve ({})", target.display());
            links += 1;
        }
        assert!(links >= 4 * sigs.len().min(saved(&c).len()), "{links} links");
        assert!(doc.descendants().any(|n| n.has_tag_name("circle")), "the curve has its dots");
    }
}

/// Issue 15: liveness mode from the command line. `kvsim run --liveness` fails a request still
/// open past its deadline, naming its wait (exit 11); the reproduce command carries the flag; a
/// bad bound, or liveness with random faults that never heal, is bad input naming the key. A
/// liveness campaign saves scenarios that carry the bound, so they reproduce without the flag.
#[test]
fn liveness_mode_from_the_command_line() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let scen = crate::scenarios_dir().join("catalogue/router-waits-for-decode.toml");
    let scen = scen.to_str().unwrap();
    let out = kvsim(&["run", scen, "--liveness", "60s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(11), "{text}");
    assert!(text.contains("waits for kv_arrival") && text.contains("--liveness 60s"), "{text}");
    // The run stopped at the missed deadline, and says so (it said 0.000s: its last event's time).
    assert!(text.contains("7 events over 60.000s of virtual time"), "{text}");
    assert_eq!(
        kvsim(&["run", scen, "--liveness", "10m"]).status.code(),
        Some(10),
        "answered in time: its 5xx is the finding"
    );
    // A bare number has no unit: refused, not read as seconds (the TOML key is milliseconds).
    let out = kvsim(&["run", scen, "--liveness", "30"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no unit") && err.matches("--liveness").count() == 1, "{err}");
    // A unit kvsim does not know is named as such (the hint read "e.g. 10ds, 10dms or 10dm").
    let out = kvsim(&["run", scen, "--liveness", "10d"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown unit") && !err.contains("10ds"), "{err}");
    // A fraction is a positive duration, in a unit too large: said so.
    let out = kvsim(&["run", scen, "--liveness", "1.5s"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1500ms"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kvsim(&["run", scen, "--liveness", "99999999999h"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("too long"), "{}", String::from_utf8_lossy(&out.stderr));
    for bad in ["0s", "soon", "-5s"] {
        let flag = format!("--liveness={bad}");
        let out = kvsim(&["run", scen, &flag]);
        assert_eq!(out.status.code(), Some(2), "--liveness {bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--liveness"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let never_heals = format!("{}.toml", tmp("never-heals"));
    let text = std::fs::read_to_string(scen).unwrap();
    std::fs::write(&never_heals, format!("{text}\n[faults]\ndelay_spike = \"1/10\"\nliveness_after_heal_ms = 60000\n"))
        .unwrap();
    let out = kvsim(&["run", &never_heals]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("liveness_after_heal_ms") && err.contains("heal_at_ms"), "{err}");

    let c = tmp("liveness-campaign");
    // A liveness campaign over `space`, without shrinking or confirmation.
    let campaign = |space: &[&str], runs: &str, corpus: &str, bound: &str| {
        let rest = ["--runs", runs, "--no-shrink", "--confirm", "off", "--corpus", corpus, "--liveness", bound];
        kvsim(&[&["fuzz"][..], space, &rest].concat())
    };
    let out = campaign(&["--profile", "sglang-0.5.22"], "60", &c, "30s");
    // Its hangs are the profile's known rows (router-waits-for-decode's 300 s timer past the 30 s
    // bound, prealloc-never-fits), so the campaign exits 0.
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("request_hang/after_heal/kv_arrival/prefill_failed")
            && text.contains("known (router-waits-for-decode)"),
        "{text}"
    );
    let hangs: Vec<(String, u64)> =
        saved(&c).into_iter().filter(|(s, _)| s.starts_with("request_hang/after_heal/")).collect();
    assert!(!hangs.is_empty(), "60 runs with a 30 s bound find an overdue request: {:?}", saved(&c));
    for (sig, seed) in hangs {
        let scen = format!("{c}/{}/seed-{seed}/scenario.toml", sig.replace('/', "--"));
        assert!(std::fs::read_to_string(&scen).unwrap().contains("liveness_after_heal_ms = 30000"));
        let w = kvsim::simulate(crate::load_path(&scen), None, false);
        assert!(kvsim::fuzz::signatures(&w).contains(&sig), "{scen} reproduces {sig}");
    }
    let camp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&c).join("campaign.json")).unwrap()).unwrap();
    assert_eq!(camp["space"], "profile:sglang-0.5.22+liveness=30000ms");

    // A base without random faults: its variants that turn one on (which never heals) are
    // redrawn, so every signature has its saved example (they could not be saved before).
    let base = crate::scenarios_dir().join("small/stub-leak.toml");
    let c = tmp("liveness-base");
    let out = campaign(&["--base", base.to_str().unwrap()], "100", &c, "5s");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("could not save"), "{err}");
    assert_eq!(saved(&c).len(), table(&c).as_object().unwrap().len(), "{err}");
}

/// A liveness campaign on the fixed profile triages its hangs by what they wait for and why
/// (`known-bugs/sglang-0.5.22.toml`), and a campaign's `--set` pins survive shrinking: the shrunk
/// case and `kvsim shrink` of its folder keep `router_on_prefill_error = "cancel_decode"`, which
/// the failure does not need (the shrinker set it back to the profile's value before).
#[test]
fn liveness_hangs_are_triaged_and_shrunk_cases_keep_the_pins() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("liveness-pinned");
    let out = kvsim(&[
        "fuzz",
        "--profile",
        "sglang-0.5.22",
        "--runs",
        "40",
        "--confirm",
        "off",
        "--liveness",
        "30s",
        "--set",
        "router_on_prefill_error=cancel_decode",
        "--corpus",
        &c,
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "only known signatures: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("request_hang/after_heal/decode_prealloc/never_fits")
            && text.contains("known (prealloc-never-fits)"),
        "{text}"
    );
    let hangs: Vec<(String, u64)> = saved(&c).into_iter().filter(|(s, _)| s.starts_with("request_hang/")).collect();
    assert!(!hangs.is_empty(), "{text}");
    for (sig, seed) in hangs {
        let dir = format!("{c}/{}/seed-{seed}", sig.replace('/', "--"));
        // The saved scenario lists only the knobs that differ from its profile (the pin among
        // them), so `--profile` on it runs the other engine; the knobs it keeps are named.
        let scen = std::fs::read_to_string(format!("{dir}/scenario.toml")).unwrap();
        assert!(
            scen.contains("router_on_prefill_error = \"cancel_decode\"") && !scen.contains("reject_mode"),
            "{scen}"
        );
        let other = kvsim(&["run", &format!("{dir}/scenario.toml"), "--profile", "sglang-0.5.16"]);
        let err = String::from_utf8_lossy(&other.stderr);
        assert!(
            err.contains("knob(s) at values --profile sglang-0.5.16 does not have")
                && err.contains("router_on_prefill_error = \"cancel_decode\" (sglang-0.5.16: \"return_decode_leg\")"),
            "{err}"
        );
        // `--profile` naming the file's own profile (as every reproduce line does): no note.
        let own = kvsim(&["run", &format!("{dir}/scenario.toml"), "--profile", "sglang-0.5.22"]);
        assert!(!String::from_utf8_lossy(&own.stderr).contains("note:"), "{}", String::from_utf8_lossy(&own.stderr));
        let shrunk = std::fs::read_to_string(format!("{dir}/shrunk.toml")).unwrap();
        assert!(
            shrunk.contains("router_on_prefill_error = \"cancel_decode\""),
            "{dir}: the pin was shrunk away\n{shrunk}"
        );
        let again_dir = tmp("liveness-pinned-again");
        std::fs::create_dir_all(&again_dir).unwrap();
        let again = format!("{again_dir}/again.toml");
        let out = kvsim(&["shrink", &dir, "--out", &again]);
        assert_eq!(out.status.code(), Some(11), "{}", String::from_utf8_lossy(&out.stderr));
        let again = std::fs::read_to_string(&again).unwrap();
        assert!(
            again.contains("router_on_prefill_error = \"cancel_decode\""),
            "kvsim shrink dropped the pin:\n{again}"
        );
    }
}

/// `kvsim fuzz --set` pins knobs through the same checks as `kvsim run --set` (unknown knob:
/// did-you-mean, exit 2; bad value: the knob named, exit 2); a pinned campaign's space names
/// its pins, its saved cases carry the pinned knob and reproduce with their commands, and a
/// resume with other pins is refused.
#[test]
fn pinned_campaigns_carry_their_pins_and_refuse_other_pins() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let scen = crate::scenarios_dir().join("catalogue/prefix-timing-channel.toml");
    for (flag, says) in [
        ("prefix_cache_scop=per_tenant", "did you mean `prefix_cache_scope`"),
        ("prefix_cache_scope=everyone", "prefix_cache_scope"),
        ("prefix_cache_scope", "expected KNOB=VALUE"),
    ] {
        let c = tmp("bad-pin");
        let out = kvsim(&["fuzz", "--prefix-heavy", "--runs", "1", "--corpus", &c, "--set", flag]);
        assert_eq!(out.status.code(), Some(2), "--set {flag}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(err.contains(says) && err.contains("--set"), "--set {flag}: {err}");
        // The same flag is refused the same way by `kvsim run`: one knob-resolution code.
        let run = kvsim(&["run", scen.to_str().unwrap(), "--set", flag]);
        assert_eq!(run.status.code(), Some(2), "run --set {flag}");
        let run_err = String::from_utf8_lossy(&run.stderr);
        let line = err.lines().find(|l| l.contains(says)).unwrap();
        assert!(run_err.contains(line.trim_start_matches("error: ")), "run: {run_err}\nfuzz: {err}");
        assert!(!Path::new(&c).join("campaign.json").exists(), "no campaign was started");
    }
    let out = kvsim(&["fuzz", "--runs", "1", "--corpus", &tmp("pin-page"), "--set", "page_size=64"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--base"), "{}", String::from_utf8_lossy(&out.stderr));
    // A pin that makes the --base scenario invalid says so (it read "--set (header configuration)").
    let base = crate::scenarios_dir().join("small/stub-leak.toml");
    let out = kvsim(&[
        "fuzz",
        "--base",
        base.to_str().unwrap(),
        "--runs",
        "1",
        "--corpus",
        &tmp("pin-base-page"),
        "--set",
        "page_size=3",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--set page_size=3: with it, the --base scenario is invalid: `prefill[0].pool_tokens`"),
        "{err}"
    );

    let c = tmp("pinned");
    let args = |set: &[&'static str]| {
        let mut a =
            vec!["fuzz", "--prefix-heavy", "--runs", "120", "--no-shrink", "--confirm", "off", "--known", "none"];
        a.extend(["--corpus", c.as_str()]);
        for s in set {
            a.extend(["--set", s]);
        }
        a
    };
    let out = kvsim(&args(&["prefix_cache_scope=global", "prefix_cache_scope=per_tenant"]));
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let camp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&c).join("campaign.json")).unwrap()).unwrap();
    assert_eq!(camp["space"], "prefix:blind+set:prefix_cache_scope=per_tenant", "the last pin wins, as with run");
    let failures = saved(&c);
    assert!(!failures.is_empty(), "120 prefix-heavy runs find something to save");
    for e in std::fs::read_dir(&c).unwrap().flatten() {
        let Ok(t) = std::fs::read_to_string(e.path().join("failure.json")) else { continue };
        let f: serde_json::Value = serde_json::from_str(&t).unwrap();
        let dir = e.path().join(format!("seed-{}", f["seed"]));
        let toml = std::fs::read_to_string(dir.join("scenario.toml")).unwrap();
        assert!(toml.contains("prefix_cache_scope = \"per_tenant\""), "{}: the pin is not saved", dir.display());
        // The reproduce command reproduces the signature.
        let cmd = f["reproduce"].as_str().unwrap();
        let words: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let run = kvsim(&words);
        let sig = f["signature"].as_str().unwrap();
        let head = sig.split('/').next().unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(run.status.code() != Some(0) && text.contains(head), "`{cmd}` does not show {sig}: {text}");
    }
    // Resuming with other pins (or none) is refused; with the same pins it resumes.
    for other in [&["prefix_cache_scope=global"][..], &[][..]] {
        let out = kvsim(&args(other));
        assert_eq!(out.status.code(), Some(2), "resume with {other:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("made by another campaign"));
    }
    let mut more = args(&["prefix_cache_scope=per_tenant"]);
    more[3] = "160";
    let out = kvsim(&more);
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)));
    // The property check is part of the campaign too: a noninterference campaign's table is another's.
    let mut checked = args(&["prefix_cache_scope=per_tenant"]);
    checked.extend(["--check", "noninterference"]);
    let out = kvsim(&checked);
    assert_eq!(out.status.code(), Some(2), "resume with another --check");
    assert!(String::from_utf8_lossy(&out.stderr).contains("made by another campaign"));
    // And so is every run checked against the reference oracle (mixed without a word before).
    let mut oracle = args(&["prefix_cache_scope=per_tenant"]);
    oracle.push("--check-oracle");
    let out = kvsim(&oracle);
    assert_eq!(out.status.code(), Some(2), "resume with --check-oracle");
    assert!(String::from_utf8_lossy(&out.stderr).contains("made by another campaign"));
}

fn guided_state(corpus: &str) -> serde_json::Value {
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(corpus).join("campaign.json")).unwrap()).unwrap();
    c["guided"].clone()
}

/// A guided campaign is deterministic: the same table, corpus and saved failures for --jobs 1
/// and --jobs 2, and for a campaign stopped mid-epoch (at 300 runs of 64-run epochs) and resumed
/// to 600 as for an uninterrupted 600-run one — the stop falls in the first epoch after the four
/// swarm warm-up epochs (256 runs), the first that mutates. Its corpus grows, and it holds
/// mutated entries (runs after the warm-up are partly mutations, not seeds).
#[test]
fn guided_campaigns_are_deterministic_across_jobs_and_resume() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let args = |c: &str, runs: &'static str, jobs: &'static str| {
        let mut a = vec!["fuzz", "--guided", "--runs", runs, "--no-shrink", "--confirm", "off", "--seed-start", "900"];
        a.extend(["--jobs", jobs, "--corpus"]);
        a.push(Box::leak(c.to_string().into_boxed_str()));
        a
    };
    let one = tmp("guided1");
    let out = kvsim(&args(&one, "600", "1"));
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let g = guided_state(&one);
    let corpus = g["corpus"].as_array().expect("a guided checkpoint holds its corpus");
    assert!(corpus.len() >= 10, "the corpus grew: {} entries", corpus.len());
    assert!(corpus.iter().any(|e| e["recipe"]["mutations"].as_array().is_some_and(|m| !m.is_empty())));
    assert_eq!(g["epochs_folded"], 9, "600 runs = 9 whole epochs of 64");
    let two = tmp("guided2");
    kvsim(&args(&two, "600", "2"));
    assert_eq!(table(&two), table(&one), "--jobs 2 differs from --jobs 1");
    assert_eq!(guided_state(&two), g);
    assert_eq!(saved(&two), saved(&one));
    let resumed = tmp("guided-resumed");
    kvsim(&args(&resumed, "300", "2"));
    assert_eq!(guided_state(&resumed)["epochs_folded"], 4);
    assert!(!guided_state(&resumed)["pending"].as_array().unwrap().is_empty(), "stopped mid-epoch");
    kvsim(&args(&resumed, "600", "1"));
    assert_eq!(table(&resumed), table(&one), "resumed differs from uninterrupted");
    assert_eq!(guided_state(&resumed), g);
    assert_eq!(saved(&resumed), saved(&one));
    // A merge keeps no guided corpus: it is not resumed as a guided campaign (it was, planning
    // from an empty corpus, a table neither the shards nor an unsharded run give).
    let merged = tmp("guided-merged");
    let out = kvsim(&["corpus", "merge", &one, "--into", &merged]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kvsim(&args(&merged, "700", "1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot be resumed as a guided campaign"), "{err}");
    // A swarm corpus is not resumed as a guided one.
    let swarm = tmp("guided-swarm");
    kvsim(&["fuzz", "--runs", "10", "--no-shrink", "--seed-start", "900", "--corpus", &swarm]);
    let out = kvsim(&args(&swarm, "20", "1"));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The `seed-*` folders of a corpus with the files that do not name the corpus (`failure.json`
/// names it in its commands: compared with the corpus path taken out).
fn example_files(corpus: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for sig in std::fs::read_dir(corpus).unwrap().flatten().filter(|e| e.path().is_dir()) {
        for ex in std::fs::read_dir(sig.path()).unwrap().flatten() {
            let name = format!("{}/{}", sig.file_name().to_string_lossy(), ex.file_name().to_string_lossy());
            if !ex.path().is_dir() {
                let text = std::fs::read_to_string(ex.path()).unwrap().replace(corpus, "CORPUS");
                out.insert(name, text);
                continue;
            }
            for f in ["failure.json", "scenario.toml", "shrunk.toml"] {
                let text = std::fs::read_to_string(ex.path().join(f)).unwrap_or_default();
                out.insert(format!("{name}/{f}"), text.replace(corpus, "CORPUS"));
            }
        }
    }
    out
}

/// Issue 15: each signature keeps its N (default 3) smallest distinct examples — fewer requests,
/// then fewer events, then the smaller seed — each saved and shrunk by the shrink worker; the
/// saved and shrunk files are the same for any --jobs; an example the checkpoint lists but an
/// interrupted campaign did not complete is completed on resume (the same files); another
/// --examples or a checkpoint of the one-example format is refused (exit 2).
#[test]
fn each_signature_keeps_its_smallest_examples_shrunk_off_the_critical_path() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let args = |c: &str, jobs: &str| -> Vec<String> {
        ["fuzz", "--runs", "160", "--seed-start", "7000", "--confirm", "off", "--shrink-budget", "40", "--jobs", jobs]
            .iter()
            .map(|s| s.to_string())
            .chain(["--corpus".to_string(), c.to_string()])
            .collect()
    };
    let run = |a: &[String]| kvsim(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let one = tmp("ex-one");
    let out = run(&args(&one, "1"));
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let ckpt: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&one).join("campaign.json")).unwrap()).unwrap();
    assert_eq!(ckpt["examples_per_signature"], 3);
    let examples = ckpt["examples"].as_object().unwrap();
    assert_eq!(examples.len(), table(&one).as_object().unwrap().len(), "every signature has examples");
    let mut several = 0;
    for (sig, list) in examples {
        let list = list.as_array().unwrap();
        assert!((1..=3).contains(&list.len()), "{sig}: {list:?}");
        let keys: Vec<(u64, u64, u64)> = list
            .iter()
            .map(|e| (e["requests"].as_u64().unwrap(), e["events"].as_u64().unwrap(), e["seed"].as_u64().unwrap()))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{sig}: smallest first, distinct: {keys:?}");
        let hashes: std::collections::BTreeSet<&str> = list.iter().map(|e| e["hash"].as_str().unwrap()).collect();
        assert_eq!(hashes.len(), list.len(), "{sig}: distinct traces");
        for (req, ev, seed) in &keys {
            let dir = Path::new(&one).join(sig.replace('/', "--")).join(format!("seed-{seed}"));
            let f: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("failure.json")).unwrap()).unwrap();
            assert_eq!((f["requests"].as_u64(), f["events"].as_u64()), (Some(*req), Some(*ev)), "{dir:?}");
            assert!(dir.join("shrunk.toml").is_file(), "{dir:?} is shrunk");
        }
        // The signature's failure.json is its smallest example.
        assert_eq!(saved(&one).iter().find(|(s, _)| s == sig).map(|(_, seed)| *seed), Some(keys[0].2));
        if list.len() > 1 {
            several += 1;
            assert!(stdout.contains(&format!("example 2 of {}: seed {}", list.len(), keys[1].2)), "{stdout}");
        }
    }
    assert!(several >= 2, "160 blind runs give several signatures more than one example");
    // --jobs 3: the same table, examples and files (shrunk cases included).
    let three = tmp("ex-three");
    run(&args(&three, "3"));
    assert_eq!(table(&three), table(&one));
    let files = example_files(&one);
    assert_eq!(example_files(&three), files, "--jobs 3 saved other files");
    // Interrupted before the worker completed two examples: the resume completes them, alike.
    let resumed = tmp("ex-resumed");
    assert!(Command::new("cp").args(["-r", &one, &resumed]).status().unwrap().success());
    let mut undone = 0;
    for (sig, list) in examples.iter().take(2) {
        let seed = list[0]["seed"].as_u64().unwrap();
        let dir = Path::new(&resumed).join(sig.replace('/', "--")).join(format!("seed-{seed}"));
        for f in ["failure.json", "shrunk.toml", "shrunk.jsonl", "trace.jsonl"] {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
        undone += 1;
    }
    let out = run(&args(&resumed, "1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{undone} example(s) without their failure.json (not completed before an interruption, or the file removed) are saved and shrunk now")),
        "{err}"
    );
    // (The copy's untouched files still name the corpus they were copied from.)
    let copied = |m: std::collections::BTreeMap<String, String>| {
        m.into_iter().map(|(k, v)| (k, v.replace(&one, "CORPUS"))).collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(copied(example_files(&resumed)), files, "the resumed corpus differs");
    // Another --examples, or a checkpoint of the one-example format: refused.
    let mut other = args(&one, "1");
    other.extend(["--examples".into(), "2".into()]);
    let out = run(&other);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("keeps 3 example(s) per signature, not --examples 2"));
    // Other shrink options: refused too (the corpus would mix shrunk and unshrunk examples).
    let budget41: Vec<String> = args(&one, "1").into_iter().map(|a| if a == "40" { "41".into() } else { a }).collect();
    let mut unshrunk: Vec<String> =
        args(&one, "1").into_iter().filter(|a| a != "--shrink-budget" && a != "40").collect();
    unshrunk.push("--no-shrink".into());
    for (other, asked) in [(budget41, "--shrink-budget 41"), (unshrunk, "--no-shrink")] {
        let out = run(&other);
        assert_eq!(out.status.code(), Some(2), "{asked}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("this campaign was run with --shrink-budget 40, not {asked}")), "{err}");
    }
    let ckpt_path = Path::new(&resumed).join("campaign.json");
    let text = std::fs::read_to_string(&ckpt_path).unwrap().replace("kvsim-corpus/2", "kvsim-corpus/1");
    std::fs::write(&ckpt_path, text).unwrap();
    let out = run(&args(&resumed, "1"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("made by an older kvsim"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kvsim(&["corpus", "merge", &resumed, "--into", &tmp("ex-merge-old")]);
    assert_eq!(out.status.code(), Some(2));
}

/// What a campaign refuses before any run, each once: a corpus another campaign holds (two
/// campaigns in one corpus removed each other's files as leftovers and lost examples), a
/// known-bugs file on a blind campaign (its cases run every profile), `--html` into a folder that
/// does not exist (found only after the whole campaign), and `--confirm cuda` without a GPU (exit
/// 3, as `kvsim confirm`; it was "confirm failed" in every row, kept by any resume).
#[test]
fn a_campaign_refuses_before_it_runs() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("locked");
    std::fs::create_dir_all(&c).unwrap();
    let lock = std::fs::File::create(Path::new(&c).join("campaign.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "20", "--corpus", &c]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("another campaign is running in this corpus"), "{err}");
    assert!(!Path::new(&c).join("campaign.json").exists(), "nothing written");
    lock.unlock().unwrap();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "20", "--corpus", &c]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(Path::new(&c).join("campaign.json").exists());

    let known = format!("{}/../known-bugs/sglang-0.5.22.toml", env!("CARGO_MANIFEST_DIR"));
    let b = tmp("blind-known");
    let out = kvsim(&["fuzz", "--runs", "10", "--known", &known, "--corpus", &b]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a blind campaign draws every profile"), "{err}");

    let h = tmp("html");
    let out =
        kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "10", "--corpus", &h, "--html", "no/such/r.html"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--html no/such/r.html: the folder no/such does not exist"), "{err}");
    assert!(!Path::new(&h).exists(), "refused before the corpus is made");
    // A folder as the report's file, and an empty corpus path, are refused up front (the first
    // was a warning after the whole campaign, exit 0, leaving `adir.tmpPID` behind; the second
    // wrote the campaign into the working folder).
    let folder = tmp("html-folder");
    std::fs::create_dir_all(&folder).unwrap();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "10", "--corpus", &h, "--html", &folder]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a folder; give the report's file name"), "{err}");
    assert!(!Path::new(&h).exists());
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "10", "--corpus", ""]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--corpus: an empty path"));
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "10", "--corpus", &h, "--html", ""]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--html: an empty path"));
    let out = kvsim(&["corpus", "merge", &h, "--into", ""]);
    assert_eq!(out.status.code(), Some(2));
    // A report inside the corpus the campaign makes is fine (it was "the folder does not exist").
    let inside = format!("{h}/report-here.html");
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "3", "--corpus", &h, "--html", &inside]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(Path::new(&inside).is_file());
    // Never over the campaign's own files or its inputs (`--html CORPUS/campaign.json` replaced the
    // checkpoint with the page, and the next resume failed).
    let known = tmp("html-known.toml");
    let shipped = std::fs::read_to_string(crate::manifest_dir().join("../known-bugs/sglang-0.5.22.toml")).unwrap();
    std::fs::write(&known, &shipped).unwrap();
    let ckpt_before = std::fs::read(format!("{h}/campaign.json")).unwrap();
    let hk = tmp("html-k");
    for (html, extra) in [
        (format!("{h}/campaign.json"), None),
        (format!("{h}/campaign.lock"), None),
        (known.clone(), Some(known.as_str())),
    ] {
        let mut args = vec!["fuzz", "--profile", "sglang-0.5.16", "--runs", "3", "--corpus", &h, "--html", &html];
        if let Some(k) = extra {
            args = vec!["fuzz", "--profile", "sglang-0.5.22", "--runs", "3", "--corpus", &hk, "--html", &html];
            args.extend(["--known", k]);
        }
        let out = kvsim(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{html}: {err}");
        assert!(err.contains(&format!("--html {html}:")), "{err}");
    }
    assert_eq!(std::fs::read(format!("{h}/campaign.json")).unwrap(), ckpt_before);
    assert_eq!(std::fs::read_to_string(&known).unwrap(), shipped);
    // Nor over any other file that is not an earlier report (another corpus's checkpoint was
    // replaced with the page, and that campaign could not resume); an earlier report is replaced.
    let other = tmp("html-other.json");
    std::fs::write(&other, "{\"not\": \"a report\"}").unwrap();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "3", "--corpus", &h, "--html", &other]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("an existing file that is not a kvsim campaign report"), "{err}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "{\"not\": \"a report\"}");
    let report = tmp("html-report.html");
    std::fs::copy(&inside, &report).unwrap();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "3", "--corpus", &h, "--html", &report]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    // A misspelt --until kind, and a --time without a unit, are refused (the first ran the whole
    // campaign and said "not found"; the second ran 5 seconds for a user meaning minutes).
    let typo = tmp("until-typo");
    let out = kvsim(&["fuzz", "--runs", "10", "--corpus", &typo, "--until", "cross_tenant_reed/stub_commit"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("did you mean `cross_tenant_read`?"), "{err}");
    assert!(!Path::new(&typo).exists());
    // A misspelt mechanism likewise; a mechanism's prefix is still a prefix of signatures.
    let out = kvsim(&["fuzz", "--runs", "10", "--corpus", &typo, "--until", "use_after_free/transfer_wirte"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("did you mean `use_after_free/transfer_write`?"), "{err}");
    assert!(!Path::new(&typo).exists());
    let out = kvsim(&["fuzz", "--runs", "2", "--corpus", &typo, "--until", "use_after_free/transfer_wr"]);
    assert_ne!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&typo).unwrap();
    // A channel kind without the check that shows channels could never be found.
    let out = kvsim(&["fuzz", "--runs", "10", "--corpus", &typo, "--until", "timing_channel"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("add --check noninterference"));
    let out = kvsim(&["fuzz", "--time", "5", "--corpus", &typo]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--time 5: no unit"));
    // Signatures the campaign's flags can never show are refused too (each ran the whole
    // campaign and said "not found").
    for (until, extra, says) in [
        ("event_limit/anything", &[][..], "`event_limit` names no mechanism"),
        ("request_hang/after_heal", &[][..], "add --liveness BOUND"),
        ("cross_tenant_read/visibility_lag", &["--profile", "vllm-nixl"][..], "only with --hardware-faults"),
    ] {
        let mut args = vec!["fuzz", "--runs", "10", "--corpus", &typo, "--until", until];
        args.extend_from_slice(extra);
        let out = kvsim(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{until}: {err}");
        assert!(err.contains("this campaign never shows it") && err.contains(says), "{until}: {err}");
        assert!(!Path::new(&typo).exists());
    }
    // A prefix found names the signature it matched (the line read as if the prefix was found).
    let out = kvsim(&[
        "fuzz",
        "--profile",
        "sglang-0.5.22",
        "--runs",
        "300",
        "--corpus",
        &typo,
        "--no-shrink",
        "--confirm",
        "off",
        "--until",
        "use_after_free/transfer_read_of_a_source_page",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("until: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("; the signature found: `use_after_free/transfer_read_of_a_source_page/"), "{line}");
    std::fs::remove_dir_all(&typo).unwrap();

    if kvsim_gpu::select(kvsim_gpu::BackendChoice::Cuda).is_err() {
        let g = tmp("cuda");
        let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "10", "--corpus", &g, "--confirm", "cuda"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("--confirm cuda: backend unavailable"), "{err}");
        assert!(!Path::new(&g).exists());
    }
}

/// Resuming says what it does: `--runs` at or below the checkpoint's runs is a note (it ran
/// nothing, silently), a corpus of another campaign names both campaigns (only the stored one
/// was named), and `--time 0s` is refused as `--runs 0` is.
#[test]
fn resuming_says_what_it_does() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("resume-note");
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "30", "--corpus", &c]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)));
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "20", "--corpus", &c]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("note: --runs 20: the checkpoint already has 30 runs, so nothing was run"), "{err}");
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--hardware-faults", "--runs", "20", "--corpus", &c]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("(space profile:sglang-0.5.16, seed start 0, shard 0/1); this one is space"), "{err}");
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--time", "0s", "--corpus", &tmp("time0")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--time 0s: expected"), "{err}");
}

/// A corpus records the model that judged its runs (`kvsim --version`'s stamp): a resume by
/// another model, or of a corpus that recorded none (every kvsim before the stamp, all "0.1.0"),
/// is refused with exit 2, and so is a merge of shards of two models. Before, a corpus of an
/// older model resumed silently, counting two models' verdicts in one table.
#[test]
fn a_corpus_of_another_model_is_not_resumed_or_merged() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let version = String::from_utf8_lossy(&kvsim(&["--version"]).stdout).into_owned();
    let model = version.trim().strip_prefix("kvsim 0.1.0 (model ").and_then(|m| m.strip_suffix(')')).expect("stamp");
    assert_eq!(model.len(), 16, "{version}");
    let (c, d) = (tmp("model-a"), tmp("model-b"));
    for (corpus, shard) in [(&c, "0/2"), (&d, "1/2")] {
        let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "20", "--shard", shard, "--corpus", corpus]);
        assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)));
        assert_eq!(checkpoint(corpus)["model"].as_str(), Some(model));
    }
    let path = Path::new(&c).join("campaign.json");
    let mut ck = checkpoint(&c);
    ck["model"] = serde_json::json!("0123456789abcdef");
    std::fs::write(&path, serde_json::to_string(&ck).unwrap()).unwrap();
    let resume = || kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "40", "--shard", "0/2", "--corpus", &c]);
    let out = resume();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("judged by model 0123456789abcdef; this kvsim is model {model}")), "{err}");
    let out = kvsim(&["corpus", "merge", &c, &d, "--into", &tmp("model-m")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Refused as the resume is: this build's known bugs would triage another model's runs.
    assert!(err.contains(&format!("judged by model 0123456789abcdef; this kvsim is model {model}")), "{err}");
    ck.as_object_mut().unwrap().remove("model");
    std::fs::write(&path, serde_json::to_string(&ck).unwrap()).unwrap();
    let out = resume();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("judged by a kvsim that did not record its model"), "{err}");
    assert_eq!(checkpoint(&c)["runs_done"], 10, "nothing was run or rewritten");
}

/// A corpus's checkpoint, as JSON.
fn checkpoint(corpus: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(Path::new(corpus).join("campaign.json")).unwrap()).unwrap()
}

/// The seeds a checkpoint lists as examples of `sig`.
fn listed_seeds(ck: &serde_json::Value, sig: &str) -> Vec<u64> {
    ck["examples"][sig].as_array().map(|l| l.iter().map(|e| e["seed"].as_u64().unwrap()).collect()).unwrap_or_default()
}

/// The largest seed is a campaign's last: `--runs` may reach it and not pass it, and a `--time`
/// campaign stops there. Before, `--seed-start MAX --runs 1` was refused (one seed too early), and
/// a `--time` campaign wrapped to seed 0 and ran another campaign's seeds.
#[test]
fn seeds_end_at_the_largest_seed() {
    let scratch = crate::Scratch::new("fuzz");
    let max = u64::MAX.to_string();
    let (c1, c2, c3) = (scratch.at("top1"), scratch.at("top2"), scratch.at("top3"));
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.22", "--runs", "1", "--seed-start", &max, "--corpus", &c1]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(checkpoint(&c1)["runs_done"].as_u64(), Some(1));
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.22", "--runs", "2", "--seed-start", &max, "--corpus", &c2]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the seeds would pass"));
    let start = (u64::MAX - 2).to_string();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.22", "--time", "60s", "--seed-start", &start, "--corpus", &c3]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(checkpoint(&c3)["runs_done"].as_u64(), Some(3), "{text}");
    assert!(text.contains(&format!("seeds {start}..={max}")), "{text}");
}

/// `--hardware-faults` without `--profile` is refused, as `kvsim reach` refuses it (it was
/// accepted and did nothing: the blind swarm draws the hardware faults anyway).
#[test]
fn hardware_faults_without_a_profile_is_refused() {
    let scratch = crate::Scratch::new("fuzz");
    let c = scratch.at("hw-blind");
    let out = kvsim(&["fuzz", "--hardware-faults", "--runs", "10", "--corpus", &c]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hardware-faults needs --profile"));
    assert!(!Path::new(&c).join("campaign.json").exists());
}

/// A corpus's first signature with examples, and its first example's seed.
fn first_example(corpus: &str) -> (String, u64) {
    let ck = checkpoint(corpus);
    let (sig, list) = ck["examples"].as_object().unwrap().iter().next().expect("an example");
    (sig.clone(), list[0]["seed"].as_u64().unwrap())
}

/// A merge lists only the examples it copied: one its shard had not completed (here, its
/// failure.json removed) is warned about and left out of the merged checkpoint, which named it
/// although no folder held it. The next smallest examples the shards saved whole take its place:
/// a partial merge once kept fewer examples than the shards held (a signature whose only merged
/// example was unfinished had none, while the other shard held three).
#[test]
fn a_merge_lists_only_the_examples_it_holds() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let (s0, s1, m) = (tmp("ms0"), tmp("ms1"), tmp("mm"));
    for (i, c) in [&s0, &s1].iter().enumerate() {
        let shard = format!("{i}/2");
        let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "60", "--shard", &shard, "--corpus", c]);
        assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)));
    }
    let (sig, seed) = first_example(&s0);
    let slug = sig.replace('/', "--");
    std::fs::remove_file(Path::new(&s0).join(&slug).join(format!("seed-{seed}")).join("failure.json")).unwrap();
    let out = kvsim(&["corpus", "merge", &s0, &s1, "--into", &m]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("example seed {seed} of {sig} was not completed")), "{err}");
    let listed = listed_seeds(&checkpoint(&m), &sig);
    assert!(!listed.contains(&seed), "{listed:?}");
    for s in &listed {
        assert!(Path::new(&m).join(&slug).join(format!("seed-{s}")).join("failure.json").exists());
    }
    // As many as the shards saved whole, up to N, of distinct runs.
    let n = checkpoint(&m)["examples_per_signature"].as_u64().unwrap() as usize;
    let whole: std::collections::BTreeSet<String> = [&s0, &s1]
        .iter()
        .flat_map(|c| checkpoint(c)["examples"][&sig].as_array().cloned().unwrap_or_default())
        .filter(|e| e["seed"].as_u64() != Some(seed))
        .map(|e| e["hash"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed.len(), n.min(whole.len()), "{listed:?} of {whole:?}");
    // A signature a shard's checkpoint counts but lists no example of (an edit) is warned about.
    let ckpt = Path::new(&s1).join("campaign.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&ckpt).unwrap()).unwrap();
    let first = v["seed_start"].as_u64().unwrap() + 1;
    v["table"]["page_leak/prefill_bogus"] = serde_json::json!({ "count": 1, "first_seed": first });
    std::fs::write(&ckpt, v.to_string()).unwrap();
    let out = kvsim(&["corpus", "merge", &s0, &s1, "--into", &tmp("mm2")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning: page_leak/prefill_bogus: no shard's checkpoint lists an example of it"), "{err}");
}

/// A resumed campaign whose corpus lost an example's folder (removed by hand) says so and drops
/// it from the list; it said the example was "found before the interruption" and then failed to
/// save it, leaving a row with no example and a checkpoint naming a missing folder.
#[test]
fn a_removed_example_is_dropped_on_resume() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("removed");
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "60", "--corpus", &c]);
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)));
    let (sig, seed) = first_example(&c);
    let dir = Path::new(&c).join(sig.replace('/', "--")).join(format!("seed-{seed}"));
    std::fs::remove_dir_all(&dir).unwrap();
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "60", "--corpus", &c]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("example seed {seed} of {sig} is missing from the corpus")), "{err}");
    assert!(!err.contains("could not save") && !err.contains("before the interruption"), "{err}");
    let listed = listed_seeds(&checkpoint(&c), &sig);
    assert!(!listed.contains(&seed), "{listed:?}");
}

/// SIGTERM (a pod's stop, a CI timeout) ends a campaign with 128 + 15 and a line saying that the
/// same command resumes it (it ended silently); the resume then runs (the lock went with it).
#[test]
fn an_interrupted_campaign_says_how_to_resume() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("sigterm");
    let args = ["fuzz", "--profile", "sglang-0.5.16", "--runs", "2000000", "--corpus", &c];
    let child = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ckpt = Path::new(&c).join("campaign.json");
    let t0 = std::time::Instant::now();
    while !ckpt.exists() && t0.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(
        err.contains("interrupted; every signature announced is in")
            && err.contains("run the same command again to resume"),
        "{err}"
    );
    let out = kvsim(&["fuzz", "--profile", "sglang-0.5.16", "--runs", "100", "--corpus", &c]);
    assert_ne!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A confirmation that failed (the backend was unavailable) is tried again by a resumed
/// campaign that confirms; it stayed "confirm failed" for good.
#[test]
fn a_failed_confirmation_is_tried_again_on_resume() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("reconfirm");
    let args = ["fuzz", "--profile", "sglang-0.5.16", "--runs", "100", "--confirm", "cpu", "--corpus", &c];
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .env("KVSIM_INJECT_GPU_ERROR", "unavailable")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("confirm failed"));
    let out = kvsim(&args);
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(se.contains("whose confirmation failed are confirmed again"), "{se}");
    assert!(!so.contains("confirm failed") && so.contains("[confirmed:"), "{so}");
}

/// An example damaged by hand (a cut `failure.json`, a deleted `shrunk.toml`) is completed again
/// from its scenario on resume, with a warning, to the same files (it was dropped from the table
/// silently, or kept with a command naming the missing file).
#[test]
fn a_damaged_example_is_completed_again_on_resume() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let c = tmp("damaged");
    let args = ["fuzz", "--profile", "sglang-0.5.16", "--runs", "60", "--confirm", "off", "--shrink-budget", "40"];
    let out = kvsim(&[&args[..], &["--corpus", &c]].concat());
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    let before = example_files(&c);
    let seeds: Vec<std::path::PathBuf> = std::fs::read_dir(&c)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|s| std::fs::read_dir(s.path()).unwrap().flatten().map(|e| e.path()))
        .filter(|p| p.join("shrunk.toml").is_file())
        .take(4)
        .collect();
    assert_eq!(seeds.len(), 4);
    std::fs::write(seeds[0].join("failure.json"), "{\"signature\": \"cr").unwrap();
    std::fs::remove_file(seeds[1].join("shrunk.toml")).unwrap();
    std::fs::remove_file(seeds[2].join("trace.jsonl")).unwrap();
    let out = kvsim(&[&args[..], &["--corpus", &c]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{err}");
    assert_eq!(err.matches("was damaged").count(), 3, "{err}");
    // Nothing was interrupted: the repairs are not "found before the interruption".
    assert!(!err.contains("before the interruption"), "{err}");
    assert_eq!(example_files(&c), before, "completed again to the same files");
    assert!(seeds[2].join("trace.jsonl").is_file());
    // Without its scenario an example cannot be made again: dropped, with a warning (the table
    // named its files, which were gone).
    std::fs::remove_file(seeds[3].join("scenario.toml")).unwrap();
    let out = kvsim(&[&args[..], &["--corpus", &c]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lost its scenario.toml: dropped from the list"), "{err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains(seeds[3].to_str().unwrap()), "{table}");
    // Nor from a scenario that no longer shows the signature (edited by hand): it was shrunk,
    // "0 accepted", and the table kept a reproduce command that ran clean. Dropped, with a warning.
    let clean = crate::scenarios_dir().join("glm53-fixed-config.toml");
    std::fs::copy(clean, seeds[0].join("scenario.toml")).unwrap();
    std::fs::remove_file(seeds[0].join("failure.json")).unwrap();
    let out = kvsim(&[&args[..], &["--corpus", &c]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no longer shows") && err.contains("dropped from the list"), "{err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains(seeds[0].to_str().unwrap()), "{table}");
}

/// A `--base` campaign is named by its base's content, not by the path it was given by: the same
/// file by another path resumes it, an edited base is another campaign (it resumed silently and
/// mixed the two bases' variants; the same file as `./b.toml` was refused). A corpus resumed from
/// another place points every example's commands at it, those finished before too.
#[test]
fn a_base_campaign_is_its_bases_content_and_a_moved_corpus_is_relocated() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let dir = std::path::PathBuf::from(tmp("base-content"));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("b.toml");
    std::fs::copy(crate::scenarios_dir().join("small/stub-leak.toml"), &base).unwrap();
    let c = dir.join("c");
    let go = |base: &str, corpus: &Path, runs: &str| {
        Command::new(env!("CARGO_BIN_EXE_kvsim"))
            .current_dir(&dir)
            .args(["fuzz", "--runs", runs, "--no-shrink", "--confirm", "off", "--base", base, "--corpus"])
            .arg(corpus)
            .output()
            .unwrap()
    };
    let out = go("b.toml", &c, "20");
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let space = |c: &Path| -> String {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(c.join("campaign.json")).unwrap()).unwrap();
        v["space"].as_str().unwrap().to_string()
    };
    let named = space(&c);
    assert!(named.starts_with("base:stub-leak@") && !named.contains("b.toml"), "{named}");
    // Another spelling of the same file: the same campaign, resumed.
    let out = go("./b.toml", &c, "30");
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(space(&c), named);
    // An edited base: another campaign, refused.
    let text = std::fs::read_to_string(&base).unwrap();
    std::fs::write(&base, text.replacen("seed = 7", "seed = 8", 1)).unwrap();
    let out = go(base.to_str().unwrap(), &c, "40");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("made by another campaign"));
    std::fs::write(&base, text).unwrap();
    // Moved, then resumed: every example's commands point into the new place.
    let moved = dir.join("moved");
    std::fs::rename(&c, &moved).unwrap();
    let out = go("b.toml", &moved, "40");
    assert!(matches!(out.status.code(), Some(0) | Some(10) | Some(11)), "{}", String::from_utf8_lossy(&out.stderr));
    let mut seen = 0;
    for sig in std::fs::read_dir(&moved).unwrap().flatten().filter(|e| e.path().is_dir()) {
        for ex in std::fs::read_dir(sig.path()).unwrap().flatten() {
            if let Ok(t) = std::fs::read_to_string(ex.path().join("failure.json")) {
                let f: serde_json::Value = serde_json::from_str(&t).unwrap();
                let cmd = f["reproduce"].as_str().unwrap();
                assert!(cmd.contains(&format!("{}/", moved.display())), "{cmd}");
                assert!(!cmd.contains(&format!("{}/", c.display())), "{cmd}");
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "the stub leak's campaign saved examples");
}

/// `--html` is written whole and renamed into place, which would replace a link or a device with
/// a regular file (`--html /dev/null` replaced the device): both are refused before any run.
#[test]
fn html_refuses_a_link_or_a_device() {
    let scratch = crate::Scratch::new("fuzz");
    let tmp = |n: &str| scratch.at(n);
    let dir = std::path::PathBuf::from(tmp("html-link"));
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("target.html");
    std::fs::write(&target, "mine").unwrap();
    let link = dir.join("link.html");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (path, says) in [(link.to_str().unwrap(), "a symbolic link"), ("/dev/null", "not a regular file")] {
        let c = dir.join("c");
        let out = kvsim(&["fuzz", "--runs", "2", "--corpus", c.to_str().unwrap(), "--html", path]);
        assert_eq!(out.status.code(), Some(2), "{path}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
    assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
}
