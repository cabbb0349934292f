//! The explorer itself: schedule counts against the analytic count, a planted bug that one
//! schedule in thousands shows, the incident (buggy: counterexample; fixed: verified), replay of
//! choice strings, and the same answer for any number of workers.

use kvsim::check::Kind;
use kvsim::explore::{self, Bounds, ChoiceString, Ending, FaultKind, Spec};
use kvsim::world::World;
use std::process::Command;
use std::sync::OnceLock;

fn data(name: &str) -> String {
    super::sim_data().join("explore").join(name).to_string_lossy().into_owned()
}

fn spec(bounds: Bounds, kinds: Vec<Kind>, prune: bool) -> Spec {
    Spec { bounds, kinds, max_states: 1_000_000, prune, por: prune, subtrees: 64, check: None }
}

fn latencies_only(lat: Vec<u64>) -> Bounds {
    Bounds { max_faults: 0, fault_kinds: vec![], latencies_us: lat, max_reorders: 0 }.normalised()
}

#[test]
fn schedule_count_equals_the_analytic_count() {
    // One request's lifecycle sends 6 messages (two legs, decode's destination info, the transfer
    // status, two leg results): with k latencies per message and nothing else explored, k^6
    // schedules; two such requests, k^12. Pruning off, so every schedule runs to its end.
    let one = super::load_path(&data("one-request.toml"));
    let two = super::load_path(&data("two-requests.toml"));
    for (cfg, lat, want) in
        [(&one, vec![200, 2000], 64u64), (&one, vec![100, 200, 300], 729), (&two, vec![200, 2000], 4096)]
    {
        let s = explore::explore(cfg, &spec(latencies_only(lat.clone()), vec![], false));
        assert!(s.verified(), "{lat:?}: {s:?}");
        assert_eq!(s.schedules, want, "{} with latencies {lat:?}", cfg.name);
        assert_eq!(s.pruned, 0);
    }
    // Sequence order and no latency choice: the single schedule of an ordinary run.
    let s = explore::explore(&two, &spec(latencies_only(vec![]), vec![], false));
    assert_eq!(s.schedules, 1);
}

/// The planted bugs' triggers, taken from one particular schedule: its whole trace hash (a
/// property of the history: one schedule shows it), and the responses' statuses and times (a
/// property of the final state, which state hashing must keep).
static TRACE: OnceLock<String> = OnceLock::new();
static RESPONSES: OnceLock<Vec<Option<(u16, u64)>>> = OnceLock::new();

fn responses(w: &World) -> Vec<Option<(u16, u64)>> {
    w.reqs.iter().map(|r| r.response().map(|x| (x.status, x.at.0))).collect()
}

fn planted_in_history(w: &World) -> bool {
    TRACE.get().is_some_and(|t| *t == w.tracer.hash_hex())
}

fn planted_in_state(w: &World) -> bool {
    RESPONSES.get().is_some_and(|t| *t == responses(w))
}

#[test]
fn a_planted_bug_that_one_schedule_in_thousands_shows_is_found() {
    let cfg = super::load_path(&data("two-requests.toml"));
    let bounds = latencies_only(vec![200, 2000]);
    let chosen = [1u32, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1];
    let e = explore::execute(&cfg, &spec(bounds.clone(), vec![], false), &chosen, None, false);
    assert_eq!(e.trail.len(), chosen.len());
    TRACE.set(e.world.tracer.hash_hex()).unwrap();
    RESPONSES.set(responses(&e.world)).unwrap();
    // Which of the 4,096 schedules show each: enumerate them all.
    let (mut in_history, mut in_state) = (Vec::new(), Vec::new());
    for bits in 0u32..4096 {
        let c: Vec<u32> = (0..12).map(|i| (bits >> (11 - i)) & 1).collect();
        let e = explore::execute(&cfg, &spec(bounds.clone(), vec![], false), &c, None, false);
        if planted_in_history(&e.world) {
            in_history.push(c.clone());
        }
        if planted_in_state(&e.world) {
            in_state.push(c);
        }
    }
    assert_eq!(in_history, vec![chosen.to_vec()], "the history plant needs exactly one schedule");
    assert!(in_state.contains(&chosen.to_vec()) && in_state.len() <= 40, "{} schedules", in_state.len());
    // Without state hashing the explorer finds the one schedule (a property of the history is
    // not one state hashing may prune by).
    let s = explore::explore(&cfg, &Spec { check: Some(planted_in_history), ..spec(bounds.clone(), vec![], false) });
    assert_eq!(s.found.expect("the planted bug is found").choices, chosen.to_vec());
    assert!(s.schedules > 1000, "found after {} schedules", s.schedules);
    // With state hashing, the state plant is found, at one of the schedules that show it, with
    // and without the partial-order reduction; and with reorderings and faults in the bound too.
    let wider = Bounds { max_faults: 1, fault_kinds: vec![FaultKind::TransferFail], max_reorders: 1, ..bounds.clone() };
    for por in [false, true] {
        let sp = Spec { por, check: Some(planted_in_state), ..spec(bounds.clone(), vec![], true) };
        let s = explore::explore(&cfg, &sp);
        assert!(in_state.contains(&s.found.expect("found with pruning").choices), "por {por}");
        let sp = Spec { por, check: Some(planted_in_state), ..spec(wider.clone(), vec![], true) };
        let s = explore::explore(&cfg, &sp);
        let f = s.found.expect("found in the wider bound");
        assert!(planted_in_state(&explore::execute(&cfg, &sp, &f.choices, None, false).world), "por {por}");
    }
    // Without a plant the same bound is verified: the plant is what was found.
    let s = explore::explore(&cfg, &spec(bounds, vec![], true));
    assert!(s.verified(), "{s:?}");
}

fn incident_spec(kinds: Vec<Kind>) -> Spec {
    let b = Bounds {
        max_faults: 1,
        fault_kinds: vec![FaultKind::TransferFail, FaultKind::Crash],
        latencies_us: vec![200, 2000],
        max_reorders: 0,
    };
    spec(b, kinds, true)
}

#[test]
fn the_shrunk_incident_leaks_on_the_buggy_profile_and_is_verified_on_the_fixed_one() {
    let path = data("incident-shrunk.toml");
    let load = |profile: &str| {
        let text = std::fs::read_to_string(&path).unwrap();
        kvsim::scenario::Scenario::parse(&path, &text)
            .unwrap()
            .resolve(&kvsim::scenario::Overrides { profile: Some(profile.into()), ..Default::default() })
            .unwrap()
    };
    let kinds = vec![Kind::CrossTenantRead];
    let buggy = explore::explore(&load("sglang-0.5.16"), &incident_spec(kinds.clone()));
    let found = buggy.found.expect("sglang-0.5.16 leaks");
    assert!(found.violations.iter().all(|v| v.kind == Kind::CrossTenantRead) && !found.violations.is_empty());
    let fixed = explore::explore(&load("sglang-0.5.22"), &incident_spec(kinds));
    assert!(fixed.verified(), "sglang-0.5.22: {fixed:?}");
    assert!(fixed.schedules > 10_000 && fixed.states > 10_000, "{fixed:?}");
    assert!(fixed.pruned > 0, "state hashing merged schedules");
}

#[test]
fn a_counterexample_shrinks_and_replays_through_the_binary() {
    let path = data("incident-shrunk.toml");
    let cfg = super::load_path(&path);
    // A schedule with a fault placed that still leaks; the shrinker drops what is not needed.
    let sp = incident_spec(vec![Kind::CrossTenantRead]);
    let e = explore::execute(&cfg, &sp, &[], None, false);
    let mut long: Vec<u32> = e.trail.iter().map(|c| c.value).collect();
    long.iter_mut().zip(&e.trail).take(6).for_each(|(v, c)| *v = c.domain - 1);
    if explore::violates_with(&cfg, &sp, &long) {
        let short = explore::shrink_choices(&cfg, &sp, &long);
        assert!(short.iter().filter(|&&c| c != 0).count() <= long.iter().filter(|&&c| c != 0).count());
        assert!(explore::violates_with(&cfg, &sp, &short));
    }
    let cs = ChoiceString { bounds: sp.bounds.clone(), choices: explore::shrink_choices(&cfg, &sp, &long) };
    let text = cs.to_string();
    assert_eq!(text.parse::<ChoiceString>().unwrap(), cs);
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let out = Command::new(bin).args(["run", &path, "--choices", &text]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cross_tenant_read"));
    // A choice string of another bound, and a malformed one: bad input.
    let out = Command::new(bin).args(["run", &path, "--choices", "v1/f=0/k=/l=/o=0/c=5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin).args(["run", &path, "--choices", "v2/c=1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("v1/"));
}

#[test]
fn any_number_of_workers_gives_the_same_answer_and_a_checkpoint_resumes() {
    let path = data("two-requests.toml");
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let run = |extra: &[&str]| {
        let mut args = vec!["explore", &path, "--json", "--faults", "transfer_fail,crash", "--max-reorders", "1"];
        args.extend_from_slice(extra);
        let out = Command::new(bin).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["summary"].clone()
    };
    let one = run(&["--jobs", "1"]);
    assert_eq!(run(&["--jobs", "3"]), one);
    assert!(one["schedules"].as_u64().unwrap() > 100, "{one}");
    let dir = crate::Scratch::new("explore-ckpt");
    let ck = dir.join("ck.json");
    let ck = ck.to_str().unwrap();
    assert_eq!(run(&["--checkpoint", ck]), one);
    assert_eq!(run(&["--checkpoint", ck, "--jobs", "2"]), one, "resumed from a finished checkpoint");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ordinary_runs_have_no_chooser_and_explored_runs_are_deterministic() {
    let cfg = super::load_path(&data("two-requests.toml"));
    let a = kvsim::simulate(cfg.clone(), None, true);
    assert!(a.chooser.is_none());
    let sp = incident_spec(vec![]);
    let x = explore::execute(&cfg, &sp, &[1, 0, 1], None, false);
    let y = explore::execute(&cfg, &sp, &[1, 0, 1], None, false);
    assert_eq!(x.world.tracer.hash_hex(), y.world.tracer.hash_hex());
    assert_eq!(x.world.state_digest(), y.world.state_digest());
    assert_ne!(x.ending, Ending::Pruned);
}

/// One complete schedule's outcome: every response (status, time) and every violation (kind,
/// request, time), in order.
type Outcome = (Vec<Option<(u16, u64)>>, Vec<(Kind, Option<u32>, u64)>);

thread_local! {
    static OUTCOMES: std::cell::RefCell<std::collections::BTreeSet<Outcome>> = Default::default();
}

/// A `Spec::check` that records the outcome of every schedule that runs to its end and never
/// calls it a violation.
fn record_outcome(w: &World) -> bool {
    let o = (responses(w), w.oracle.violations.iter().map(|v| (v.kind, v.request.map(|r| r.0), v.at.0)).collect());
    OUTCOMES.with(|s| s.borrow_mut().insert(o));
    false
}

/// Explores with a property that never fails (`timing_channel` needs the noninterference check,
/// which exploration does not run) and returns the summary and every outcome reached.
fn outcomes(
    cfg: &kvsim::config::SimConfig,
    bounds: &Bounds,
    prune: bool,
    por: bool,
) -> (explore::Summary, std::collections::BTreeSet<Outcome>) {
    OUTCOMES.with(|s| s.borrow_mut().clear());
    let sp = Spec { por, check: Some(record_outcome), ..spec(bounds.clone(), vec![Kind::TimingChannel], prune) };
    let s = explore::explore(cfg, &sp);
    assert!(s.verified(), "{s:?}");
    (s, OUTCOMES.with(|s| s.take()))
}

#[test]
fn partial_order_reduction_keeps_every_outcome_and_verdict_and_prunes_more() {
    let incident = |profile: &str| {
        let path = data("incident-shrunk.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        kvsim::scenario::Scenario::parse(&path, &text)
            .unwrap()
            .resolve(&kvsim::scenario::Overrides { profile: Some(profile.into()), ..Default::default() })
            .unwrap()
    };
    let all_faults = vec![FaultKind::TransferFail, FaultKind::Delay, FaultKind::VisibilityLag, FaultKind::Crash];
    let cases = [
        (
            super::load_path(&data("one-request.toml")),
            Bounds { max_faults: 2, fault_kinds: all_faults, latencies_us: vec![200, 2000], max_reorders: 2 },
        ),
        (
            incident("sglang-0.5.16"),
            Bounds {
                max_faults: 1,
                fault_kinds: vec![FaultKind::TransferFail, FaultKind::Crash],
                latencies_us: vec![],
                max_reorders: 1,
            },
        ),
    ];
    for (cfg, bounds) in &cases {
        // Every schedule to its end; exact state hashing; state hashing with the reduction.
        let (all, every) = outcomes(cfg, bounds, false, false);
        let (exact, by_exact) = outcomes(cfg, bounds, true, false);
        let (por, by_por) = outcomes(cfg, bounds, true, true);
        assert!(every.len() > 10, "{}: {} outcomes", cfg.name, every.len());
        assert_eq!(by_exact, every, "{}: exact state hashing lost or invented an outcome", cfg.name);
        assert_eq!(by_por, every, "{}: the partial-order reduction lost or invented an outcome", cfg.name);
        // It prunes: fewer schedules and states than exact hashing, which has fewer than all.
        assert!(por.subsumed > 0 && exact.subsumed == 0, "{por:?} {exact:?}");
        assert!(por.schedules < exact.schedules && exact.schedules < all.schedules, "{por:?} {exact:?} {all:?}");
        assert!(por.states < exact.states, "{por:?} {exact:?}");
        // Verdicts: each kind that some schedule shows is found with and without the
        // reduction, at a schedule that replays to it; a kind none shows is verified by both.
        let shown: std::collections::BTreeSet<Kind> = every.iter().flat_map(|o| o.1.iter().map(|v| v.0)).collect();
        for k in kvsim::check::oracle::ALL_KINDS.iter().copied().filter(|k| *k != Kind::TimingChannel) {
            for por in [false, true] {
                let sp = Spec { por, ..spec(bounds.clone(), vec![k], true) };
                let s = explore::explore(cfg, &sp);
                match &s.found {
                    Some(f) => {
                        assert!(shown.contains(&k), "{}: {k:?} found but no schedule shows it", cfg.name);
                        assert!(explore::violates_with(cfg, &sp, &f.choices), "{}: {k:?} does not replay", cfg.name);
                    }
                    None => {
                        assert!(s.verified() && !shown.contains(&k), "{}: {k:?} missed (por {por})", cfg.name)
                    }
                }
            }
        }
    }
    // The buggy incident shows its leak in some schedule (the comparison above is not vacuous).
    let (_, buggy) = (0, outcomes(&cases[1].0, &cases[1].1, true, true).1);
    assert!(buggy.iter().any(|o| o.1.iter().any(|v| v.0 == Kind::CrossTenantRead)));
}

fn catalogue(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/catalogue")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_counterexample_is_written_as_a_shrunk_scenario_that_replays_its_violation() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = crate::Scratch::new("explore-out");
    let out = dir.join("cex.toml");
    let src = catalogue("abort-after-forward.toml");
    let r = Command::new(bin)
        .args(["explore", &src, "--set", "prefill_post_forward_abort_check=off", "--kinds", "cross_tenant_read"])
        .args(["--max-reorders", "0", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.status.code(), Some(10), "{text}{}", String::from_utf8_lossy(&r.stderr));
    assert!(text.contains("scenario shrunk: 3 -> "), "{text}");
    // The written file is a scenario with the choice string in its header; replaying it with
    // that string shows the violation again.
    let file = std::fs::read_to_string(&out).unwrap();
    let cs = file.lines().find_map(|l| l.strip_prefix("# Choice string: ")).expect("choice string in the header");
    let sc = kvsim::scenario::Scenario::parse(out.to_str().unwrap(), &file).unwrap();
    let cfg = sc.resolve(&Default::default()).unwrap();
    assert!(cfg.requests.len() <= 3 && !cfg.requests.is_empty());
    let r = Command::new(bin).args(["run", out.to_str().unwrap(), "--choices", cs]).output().unwrap();
    assert_eq!(r.status.code(), Some(10), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stdout).contains("cross_tenant_read"));
    // Its header's reproduce line, pasted (the path quoted), is that command.
    let line = file.lines().find_map(|l| l.strip_prefix("# Reproduce: ")).expect("reproduce line");
    let words = shlex::split(line).unwrap();
    assert_eq!(words[..3], ["kvsim", "run", out.to_str().unwrap()]);
    let r = Command::new(bin).args(&words[1..]).output().unwrap();
    assert_eq!(r.status.code(), Some(10), "{}", String::from_utf8_lossy(&r.stderr));
    // Run without its schedule, a note names it; shrink (seeded schedules) refuses it, naming
    // the command that shows it, rather than calling it clean.
    let r = Command::new(bin).args(["run", out.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&r.stderr).contains("is a counterexample of kvsim explore"));
    // A counterexample whose seeded run is clean (its use after free needs an explored fault).
    let out = dir.join("cex2.toml");
    let r = Command::new(bin)
        .args(["explore", &catalogue("cancel-mid-transfer.toml"), "--set", "cancel_mid_transfer=free"])
        .args(["--faults", "transfer_fail,delay,visibility_lag,crash", "--max-faults", "2", "--max-states", "20000"])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(10), "{}", String::from_utf8_lossy(&r.stderr));
    let r = Command::new(bin).args(["run", out.to_str().unwrap()]).output().unwrap();
    assert_eq!(r.status.code(), Some(0), "seeded, it is clean");
    let shrunk = dir.join("s.toml");
    let r =
        Command::new(bin).args(["shrink", out.to_str().unwrap(), "--out", shrunk.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("--choices") && err.contains("kvsim explore --out"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A counterexample found before any branch point's state was counted says so (it read
/// "counterexample after 0 distinct states", as if nothing had run).
#[test]
fn a_counterexample_before_any_counted_state_says_so() {
    let r = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["explore", &catalogue("double-release.toml"), "--set", "prefill_rejected_release=once"])
        .args(["--latencies", "200"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("counterexample after 1 schedule(s), before any branch point's state was counted"),
        "{text}"
    );
    assert!(!text.contains("after 0 distinct states"), "{text}");
}

/// Flags a mode would silently ignore, or that would clash, are refused before anything runs.
#[test]
fn explore_refuses_flags_it_would_ignore_or_that_clash() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let row = catalogue("double-release.toml");
    let run = |args: &[&str]| {
        let r = Command::new(bin).args(args).output().unwrap();
        (r.status.code(), String::from_utf8_lossy(&r.stderr).into_owned())
    };
    for extra in [&["--set", "page_tags=on"][..], &["--profile", "sglang-0.5.22"], &["--json"], &["--seed", "3"]] {
        let mut args = vec!["explore", &row, "--catalogue"];
        args.extend_from_slice(extra);
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains(&format!("--catalogue takes no {}", extra[0])), "{err}");
    }
    // The printed schedule says what each non-default choice chose, not "Fault 2 of 4".
    let r = Command::new(bin)
        .args(["explore", &catalogue("cancel-mid-transfer.toml"), "--set", "cancel_mid_transfer=free"])
        .args(["--faults", "transfer_fail,delay,visibility_lag,crash", "--max-faults", "2", "--max-states", "20000"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("choice ") && l.ends_with("transfer batch fault: delay")),
        "{text}"
    );
    let (code, err) = run(&["explore", &row, "--faults", "none,crash"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("`none` stands alone"), "{err}");
    let ck_dir = crate::Scratch::new("explore-ck");
    let ck = ck_dir.join("ck.json");
    let ck = ck.to_str().unwrap();
    let (code, err) = run(&["explore", &row, "--out", ck, "--checkpoint", ck]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--checkpoint names the same file"), "{err}");
    assert!(!std::path::Path::new(ck).exists());
    let (code, _) = run(&["explore", &row, "--shrink-budget", "5"]);
    assert_eq!(code, Some(2), "--shrink-budget needs --out");
    for bad in ["0..1", "0.", ".1"] {
        let cs = format!("v1/f=0/k=/l=/o=0/c={bad}");
        let (code, err) = run(&["run", &row, "--choices", &cs]);
        assert_eq!(code, Some(2), "{bad}");
        assert!(err.contains("an empty choice"), "{err}");
    }
    for bad in ["00", "+1", "0.01"] {
        let cs = format!("v1/f=0/k=/l=/o=0/c={bad}");
        let (code, err) = run(&["run", &row, "--choices", &cs]);
        assert_eq!(code, Some(2), "{bad}");
        assert!(err.contains("is not a choice"), "{err}");
    }
    for faults in ["", "crash,", ",crash"] {
        let (code, err) = run(&["explore", &row, "--faults", faults]);
        assert_eq!(code, Some(2), "--faults {faults:?}");
        assert!(err.contains("an empty name"), "{err}");
    }
    // An --out it could not write lost the whole exploration at its end: refused up front.
    let (code, err) = run(&["explore", &row, "--out", "no-such-folder/x.toml"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("the folder no-such-folder does not exist"), "{err}");
    // A dangling symbolic link to the checkpoint: refused (a link is never an --out, which is
    // written whole and renamed into place; it was refused as the checkpoint itself).
    let d = crate::Scratch::new("explore-link");
    std::os::unix::fs::symlink("real.json", d.join("link")).unwrap();
    let (link, real) = (d.join("link"), d.join("real.json"));
    let (code, err) = run(&["explore", &row, "--out", link.to_str().unwrap(), "--checkpoint", real.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a symbolic link"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn catalogue_mode_tells_buggy_found_fixed_verified_and_the_bound_reached() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let row = catalogue("router-waits-for-decode.toml");
    let r = Command::new(bin).args(["explore", &row, "--catalogue"]).output().unwrap();
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&r.stderr));
    let line = text.lines().find(|l| l.starts_with("| router-waits-for-decode |")).expect("the row");
    assert!(line.contains("| wrong_status after ") && line.contains("| verified "), "{line}");
    // A state bound too small to finish: the fixed setting is not claimed verified (exit 13).
    let r = Command::new(bin).args(["explore", &row, "--catalogue", "--max-states", "3"]).output().unwrap();
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.status.code(), Some(13), "{text}");
    assert!(text.contains("**not verified**: bound reached") && !text.contains("| verified "), "{text}");
    // A channel row is listed as not explored, not as verified.
    let r =
        Command::new(bin).args(["explore", &catalogue("prefix-timing-channel.toml"), "--catalogue"]).output().unwrap();
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.status.code(), Some(0), "{text}");
    assert!(text.contains("not explored"), "{text}");
    // Flags that do not apply: bad input.
    let r = Command::new(bin).args(["explore", &row, "--catalogue", "--kinds", "page_leak"]).output().unwrap();
    assert_eq!(r.status.code(), Some(2));
    // An entry's own fault kinds replace --faults for it, and the table says so: the fixed
    // pre-admission row is explored without crashes (a crash under its 480 s lease is the
    // held-blocks-leak row), so the catalogue has no mismatch.
    let pre = catalogue("pre-admission-reject-strands-prefill.toml");
    let r = Command::new(bin).args(["explore", &pre, "--catalogue"]).output().unwrap();
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(r.status.code(), Some(0), "{text}");
    assert!(text.contains("| verified ") && text.contains("(the entry's explore_faults: transfer_fail)"), "{text}");
    let dir = crate::Scratch::new("explore-faults");
    let bad = dir.join("bad.toml");
    let src = std::fs::read_to_string(&pre).unwrap();
    std::fs::write(&bad, src.replace("explore_faults = [\"transfer_fail\"]", "explore_faults = [\"meteor\"]")).unwrap();
    // Refused with the entry's line, before the table's header, and by `check` too (it accepted
    // the entry and ran it).
    for cmd in [&["explore", bad.to_str().unwrap(), "--catalogue"][..], &["check", bad.to_str().unwrap()]] {
        let r = Command::new(bin).args(cmd).output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(err.contains("bad.toml:") && err.contains(".explore_faults` (`"), "{cmd:?}: {err}");
        assert!(err.contains("unknown fault `meteor`"), "{err}");
        assert!(r.stdout.is_empty(), "{cmd:?}: {}", String::from_utf8_lossy(&r.stdout));
    }
}

/// The printed reproduce command is the exploration's own run (seed, profile, liveness bound and
/// the shrunk schedule), so pasted as it is it gives the same verdict; `--json` carries that
/// command (not the story); a content-channel kind, which one run per schedule cannot show, is
/// refused instead of "verified".
#[test]
fn the_reproduce_command_replays_the_explored_run() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let row = catalogue("router-waits-for-decode.toml");
    let r = Command::new(bin).args(["explore", &row, "--liveness", "60s", "--seed", "9", "--json"]).output().unwrap();
    assert_eq!(r.status.code(), Some(11), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let cmd = v["reproduce"].as_str().expect("a command");
    assert!(cmd.starts_with("kvsim run ") && cmd.contains(" --seed 9 ") && cmd.contains(" --liveness 60s "), "{cmd}");
    let words = shlex::split(cmd).expect("a shell line");
    let r = Command::new(bin).args(&words[1..]).output().unwrap();
    assert_eq!(r.status.code(), Some(11), "{cmd}: {}", String::from_utf8_lossy(&r.stdout));
    // The same replay as the per-request CSV (`--format csv`), not the text report.
    let r = Command::new(bin).args(&words[1..]).args(["--format", "csv"]).output().unwrap();
    assert!(String::from_utf8_lossy(&r.stdout).starts_with("id,tenant,"), "{}", String::from_utf8_lossy(&r.stdout));
    let r = Command::new(bin)
        .args(["explore", &catalogue("prefix-timing-channel.toml"), "--kinds", "timing_channel"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("exploration cannot check it"));
}

/// Without `--kinds`, `explore --out` shrinks the scenario keeping the counterexample's own
/// violation kind: stub-admission's cross-tenant read stays one (the shrinker used to set the
/// admission knobs back to the fixed build and write a case whose only violation was another
/// row's 500 after decode's 300 s timer).
#[test]
fn explore_out_keeps_the_counterexamples_kind() {
    let src = super::scenarios_dir().join("catalogue/stub-admission.toml");
    let dir = crate::Scratch::new("explore-kind");
    let out = dir.join("cex.toml");
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let o =
        Command::new(bin).args(["explore", src.to_str().unwrap(), "--out", out.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(10), "{text}{}", String::from_utf8_lossy(&o.stderr));
    // The story is the written case's, and says so (it read as the original's).
    assert!(
        text.contains(&format!("first violation: (of the shrunk case, {}) cross_tenant_read", out.display())),
        "{text}"
    );
    let written = std::fs::read_to_string(&out).unwrap();
    let choices = written.lines().find_map(|l| l.strip_prefix("# Choice string: ")).expect("choice string line");
    let run = Command::new(bin).args(["run", out.to_str().unwrap(), "--choices", choices]).output().unwrap();
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(report.contains("cross_tenant_read/"), "the written case is the same bug: {report}");
}

/// `explore --out` keeps the command's `--set` pins in the shrunk case (the shrinker set
/// `prefill_abort_notifies_decode` back to the fixed build's value and wrote another mechanism's
/// 500), and never writes over the scenario explored, nor over another file without `--force`.
#[test]
fn explore_out_keeps_the_pins_and_the_input() {
    let src = super::scenarios_dir().join("catalogue/stub-admission.toml");
    let src = src.to_str().unwrap();
    let dir = crate::Scratch::new("explore-pins");
    let out = dir.join("ce.toml");
    let _ = std::fs::remove_file(&out);
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let explore = |extra: &[&str]| {
        Command::new(bin)
            .args(["explore", src, "--profile", "sglang-0.5.22", "--set", "prefill_abort_notifies_decode=on"])
            .args(["--kinds", "wrong_status"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = explore(&["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10), "{}", String::from_utf8_lossy(&o.stderr));
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("prefill_abort_notifies_decode = \"on\""), "{written}");
    // The default "never heals" is left out, not written as the time limit's sentinel.
    assert!(!written.contains("heal_at_ms"), "{written}");
    // An existing file: refused without --force, replaced with it.
    let o = explore(&["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the file exists"));
    assert_eq!(explore(&["--out", out.to_str().unwrap(), "--force"]).status.code(), Some(10));
    // The scenario explored: refused, --force or not, and left as it was.
    let copy = dir.join("mine.toml");
    std::fs::copy(src, &copy).unwrap();
    let before = std::fs::read_to_string(&copy).unwrap();
    let o = Command::new(bin)
        .args(["explore", copy.to_str().unwrap(), "--out", copy.to_str().unwrap(), "--force"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("that is the scenario explored"));
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), before);
}

/// Exploration checks one run per schedule: on a scenario with prompt content, its verdict says
/// that content channels were not explored, with the command that checks them.
#[test]
fn a_verdict_says_content_channels_are_not_explored() {
    let src = super::scenarios_dir().join("catalogue/prefix-timing-channel.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        // Salted per tenant: the oracle finds nothing (on `global` the probes' hits are
        // `cross_tenant_prefix_hit`, a counterexample), and the channels are still unexplored.
        .args([
            "explore",
            src.to_str().unwrap(),
            "--max-states",
            "200",
            "--max-faults",
            "0",
            "--max-reorders",
            "0",
            "--set",
            "prefix_cache_scope=per_tenant",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("note: content channels (timing_channel, status_channel) are not explored"), "{text}");
    let plain = super::scenarios_dir().join("small/stub-leak.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["explore", plain.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("content channels"), "{text}");
    // The replay stops at the first violation: the reader had no response *yet* (it said "got no
    // response", while `run --choices` shows its 200).
    assert!(text.contains("had no response yet when the schedule stopped at this violation"), "{text}");
}

/// An interrupted exploration says what it kept and how to resume (it ended silently, exit 130).
#[test]
fn an_interrupted_exploration_says_how_to_resume() {
    let src = super::scenarios_dir().join("catalogue/prefix-timing-channel.toml");
    let ck_dir = crate::Scratch::new("explore-int");
    let ck = ck_dir.join("ck.json");
    let child = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args([
            "explore",
            src.to_str().unwrap(),
            "--max-states",
            "100000000",
            "--checkpoint",
            ck.to_str().unwrap(),
            // No counterexample to stop at (on `global` the probes' hits are one).
            "--set",
            "prefix_cache_scope=per_tenant",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "kvsim explore: interrupted; {} keeps every subtree finished so far (it is written when the first one finishes: none yet if it does not exist)",
            ck.display()
        )),
        "{err}"
    );
}

/// `run --choices` takes a seeded run's outputs: the trace records the string, so replay and
/// confirm follow the schedule (a header without it replays another run, a difference); the
/// picture and confirmation are the schedule's; shrink refuses the trace; a string that does not
/// fit writes nothing.
#[test]
fn a_chosen_schedule_is_traced_drawn_confirmed_and_replayed() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = crate::Scratch::new("choices-out");
    let at = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let src = catalogue("abort-after-forward.toml");
    let run = |choices: &str, extra: &[&str]| {
        let cs = format!("v1/f=1/k=transfer_fail+crash/l=200+2000/o=1/c={choices}");
        let mut args = vec!["run", &src, "--set", "prefill_post_forward_abort_check=off", "--choices", &cs];
        args.extend_from_slice(extra);
        Command::new(bin).args(&args).output().unwrap()
    };
    let (trace, svg) = (at("t.jsonl"), at("t.svg"));
    let r = run("1.1.0.1", &["--trace", &trace, "--svg", &svg, "--confirm", "cpu", "--check-determinism"]);
    let (out, err) = (String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&r.stderr));
    assert_eq!(r.status.code(), Some(10), "{out}{err}");
    assert!(err.contains("schedule: 38 choice points") && err.contains("4 given"), "{err}");
    assert!(err.contains("determinism check passed"), "{err}");
    assert!(out.contains("CONFIRMED") && out.contains("--choices v1/f=1/"), "{out}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.contains("cross_tenant_read") && picture.contains("explored schedule v1/f=1/"),
        "the title names it"
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["choices"], "v1/f=1/k=transfer_fail+crash/l=200+2000/o=1/c=1.1.0.1");
    let replay = Command::new(bin).args(["replay", &trace]).output().unwrap();
    assert_eq!(replay.status.code(), Some(10), "{}", String::from_utf8_lossy(&replay.stderr));
    assert!(String::from_utf8_lossy(&replay.stdout).contains("replay matches"));
    let confirm = Command::new(bin).args(["confirm", &trace, "--backend", "cpu"]).output().unwrap();
    assert_eq!(confirm.status.code(), Some(10), "{}", String::from_utf8_lossy(&confirm.stderr));
    // The schedule is part of the run: without it the header names another run.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut h = header.clone();
    h.as_object_mut().unwrap().remove("choices");
    lines[0] = h.to_string();
    let cut = at("cut.jsonl");
    std::fs::write(&cut, lines.join("\n")).unwrap();
    let replay = Command::new(bin).args(["replay", &cut]).output().unwrap();
    assert_eq!(replay.status.code(), Some(3), "{}", String::from_utf8_lossy(&replay.stdout));
    // A string that does not fit its header's run is bad input naming the field.
    h["choices"] = "v1/f=1/k=transfer_fail+crash/l=200+2000/o=1/c=9".into();
    lines[0] = h.to_string();
    std::fs::write(&cut, lines.join("\n")).unwrap();
    let replay = Command::new(bin).args(["replay", &cut]).output().unwrap();
    assert_eq!(replay.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&replay.stderr).contains("header field `choices`"));
    // Shrinking runs seeded schedules: the trace is refused, not shrunk as its default schedule.
    let shrink = Command::new(bin).args(["shrink", &trace, "--out", &at("s.toml")]).output().unwrap();
    assert_eq!(shrink.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&shrink.stderr).contains("kvsim explore"));
    assert!(!dir.join("s.toml").exists());
    // A string of another bound: exit 2 before any output is written.
    let (trace2, svg2) = (at("t2.jsonl"), at("t2.svg"));
    let r = run("9", &["--trace", &trace2, "--svg", &svg2]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("choice 0 is 9"));
    assert!(!dir.join("t2.jsonl").exists() && !dir.join("t2.svg").exists());
    // A check's extra runs would meet other choice points.
    assert_eq!(run("", &["--check", "invariants"]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--out` keeps the counterexample's mechanism, not only its kind: rdma-visibility-lag's
/// cross-tenant read through a lagged transfer was written as a case whose read came through a
/// stub commit (its knobs shrunk into another bug with the same kind).
#[test]
fn a_written_counterexample_keeps_its_signature() {
    let bin = env!("CARGO_BIN_EXE_kvsim");
    let dir = crate::Scratch::new("explore-sig");
    let out = dir.join("cex.toml");
    let r = Command::new(bin)
        .args(["explore", &catalogue("rdma-visibility-lag.toml"), "--max-reorders", "0", "--shrink-budget", "100"])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(10), "{}", String::from_utf8_lossy(&r.stderr));
    let file = std::fs::read_to_string(&out).unwrap();
    let cs = file.lines().find_map(|l| l.strip_prefix("# Choice string: ")).expect("choice string");
    let r = Command::new(bin).args(["run", out.to_str().unwrap(), "--choices", cs]).output().unwrap();
    let text = String::from_utf8_lossy(&r.stdout);
    let sigs = text.lines().find_map(|l| l.strip_prefix("signatures (as a campaign names them): ")).unwrap();
    assert!(sigs.split(", ").any(|s| s == "cross_tenant_read/visibility_lag"), "{sigs}");
    assert!(!sigs.contains("stub_commit"), "{sigs}");
    std::fs::remove_dir_all(&dir).unwrap();
}
