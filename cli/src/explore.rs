//! `kvsim explore SCENARIO`: exhaustive small-scope exploration (the engine is
//! `kvsim::explore`). (`kvsim run SCENARIO --choices STRING`, which replays one schedule, is
//! `run`'s, in `main.rs`.)
//! Subtrees run on `--jobs` worker threads and merge in subtree order, so the answer is the
//! same for any number of workers; `--checkpoint FILE` makes a long exploration resumable.

use kvsim::check::Kind;
use kvsim::config::SimConfig;
use kvsim::explore::{self, Bounds, ChoiceString, FaultKind, Spec, SubtreeResult};
use kvsim::report::exit;
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(clap::Args, Debug, Clone)]
pub struct ExploreOpts {
    pub scenario: String,
    #[command(flatten)]
    pub opts: super::RunOpts,
    /// Faults placed per schedule, at most.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=8))]
    pub max_faults: u32,
    /// Faults the explorer may place: transfer_fail, delay, visibility_lag, crash (comma list;
    /// `none` for none).
    #[arg(long, default_value = "transfer_fail,crash")]
    pub faults: String,
    /// Each message's latency is one of these, in µs (comma list; `none`: the cost model's
    /// constant). Default: the scenario's message latency and ten times it.
    #[arg(long, value_name = "MIN,MAX")]
    pub latencies: Option<String>,
    /// Simultaneous events may run out of sequence order at most this many times per schedule
    /// (0: always in sequence order).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub max_reorders: u32,
    /// The property: no violation of these kinds (comma list; default: no violation at all).
    #[arg(long, value_name = "KIND,...")]
    pub kinds: Option<String>,
    /// The state table's bound in each subtree (the tree is cut into about 64): a subtree stops at
    /// the end of the first schedule after which it holds this many distinct states (one schedule
    /// visits several, so it may pass the bound by that many).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_states: u64,
    /// Turn state hashing off: every schedule runs to its end (for counting schedules).
    #[arg(long)]
    pub no_prune: bool,
    /// Turn the partial-order reduction off: a state reached again is pruned only when it was
    /// explored with exactly the same fault and reordering budgets used (for comparison).
    #[arg(long)]
    pub no_por: bool,
    /// Worker threads (the answer does not depend on it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub jobs: u16,
    /// Write the counterexample (shrunk) as a scenario file replayable with `--choices` (never
    /// over SCENARIO; over another existing file only with `--force`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<String>,
    /// With `--out`: overwrite an existing file.
    #[arg(long, requires = "out")]
    pub force: bool,
    /// Keep finished subtrees' results here and skip them when run again (resume).
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// With `--out`: at most this many explorations while shrinking the scenario.
    #[arg(long, default_value_t = 300, requires = "out")]
    pub shrink_budget: u32,
    /// SCENARIO is a catalogue (one folder of scenarios with `[[expect]]` entries, or one such file): explore
    /// each row's `buggy` and `fixed` setting with the property = the `buggy` entry's violation
    /// kinds, and print the table (buggy: counterexample after N states; fixed: verified, or the
    /// bound reached).
    #[arg(long)]
    pub catalogue: bool,
}

/// Fault kinds by name (`--faults`, which also takes `none`, or an entry's `explore_faults`, where
/// an empty list is none); `what` names the source in an error.
fn fault_kinds<'a>(names: impl IntoIterator<Item = &'a str>, what: &str) -> Result<Vec<FaultKind>, String> {
    let none = if what == "--faults" { ", none" } else { "" };
    names
        .into_iter()
        .map(|name| {
            FaultKind::parse(name).ok_or_else(|| match name {
                "none" if what == "--faults" => {
                    "--faults: `none` stands alone (no fault explored); it cannot be listed with faults".to_string()
                }
                "" => format!("{what}: an empty name (nothing given, two commas together, or one at an end)"),
                _ => format!("{what}: {}", FaultKind::unknown(name, none)),
            })
        })
        .collect()
}

/// The bound from the flags.
pub fn bounds_of(o: &ExploreOpts, cfg: &SimConfig) -> Result<Bounds, String> {
    let fault_kinds =
        if o.faults == "none" { Vec::new() } else { fault_kinds(o.faults.split(',').map(str::trim), "--faults")? };
    let l = cfg.cost.message_latency_us;
    let latencies_us = match o.latencies.as_deref() {
        None => vec![l, l.saturating_mul(10)],
        Some("none") => Vec::new(),
        Some(s) => {
            let mut v = Vec::new();
            for x in s.split(',').map(str::trim) {
                let us: u64 = x.parse().map_err(|_| format!("--latencies: `{x}` is not a latency in µs"))?;
                if us > 1_000_000_000 {
                    return Err(format!("--latencies: {us} µs is over 1,000 s"));
                }
                v.push(us);
            }
            if v.len() > 16 {
                return Err(format!("--latencies: {} values (at most 16)", v.len()));
            }
            v
        }
    };
    Ok(Bounds { max_faults: o.max_faults, fault_kinds, latencies_us, max_reorders: o.max_reorders }.normalised())
}

fn fingerprint(cfg: &SimConfig, spec: &Spec) -> String {
    use std::hash::Hasher as _;
    let mut h = kvsim::types::StableHasher::default();
    h.write(serde_json::to_string(cfg).expect("config serialises").as_bytes());
    h.write(serde_json::to_string(spec).expect("spec serialises").as_bytes());
    format!("{:016x}", h.finish())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Checkpoint {
    fingerprint: String,
    results: Vec<Option<SubtreeResult>>,
}

fn save_checkpoint(path: &str, c: &Checkpoint) -> Result<(), String> {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, serde_json::to_string(c).expect("checkpoint serialises"))
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{path}: cannot write the checkpoint: {e}"))
}

#[allow(clippy::disallowed_methods)] // the command measures wall time (progress, the summary); the model never does
pub fn run(o: &ExploreOpts) -> i32 {
    if o.catalogue {
        return run_catalogue(o);
    }
    if let Some(out) = &o.out {
        // Refused before exploring (minutes): the file it would replace may be the scenario, and
        // a file it cannot write lost the whole exploration at the end.
        if let Err(e) = super::output_file_ok("--out", out) {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
        if super::same_file(out, &o.scenario) {
            eprintln!("error: --out {out}: that is the scenario explored; write the counterexample elsewhere");
            return exit::BAD_INPUT;
        }
        if o.checkpoint.as_deref().is_some_and(|c| super::same_file(out, c)) {
            eprintln!("error: --out {out}: --checkpoint names the same file; the counterexample would overwrite the checkpoint");
            return exit::BAD_INPUT;
        }
        if std::path::Path::new(out).exists() && !o.force {
            eprintln!("error: --out {out}: the file exists; give --force to overwrite it, or another --out");
            return exit::BAD_INPUT;
        }
    }
    let cfg = match super::load(&o.scenario, &o.opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    super::note_if_stream(&o.scenario, "a counterexample (its reproduce line with FILE for the stream)");
    let kinds = match o.kinds.as_deref() {
        // An empty list meant "any kind" without a word (--faults '' is refused as an empty name).
        Some(k) if k.trim().is_empty() => {
            Err("--kinds: an empty list; give violation kinds, or leave --kinds out for any violation".to_string())
        }
        k => explore::parse_kinds(k.unwrap_or("")).map_err(|e| format!("--kinds: {e}")),
    };
    let kinds = kinds.and_then(|ks| {
        // A content channel is judged by comparing two runs (the noninterference check), which a
        // schedule's one run cannot show: exploring for it alone would say "verified" vacuously.
        match ks.iter().find(|k| matches!(k, Kind::TimingChannel | Kind::StatusChannel)) {
            Some(k) => Err(format!(
                "--kinds {}: exploration cannot check it (it compares two runs per schedule, the noninterference \
                 check; use `kvsim run SCENARIO --check noninterference` or `kvsim fuzz --check noninterference`)",
                k.name()
            )),
            None => Ok(ks),
        }
    });
    let spec = match (bounds_of(o, &cfg), kinds) {
        (Ok(bounds), Ok(kinds)) => {
            Spec { bounds, kinds, max_states: 1, prune: !o.no_prune, por: !o.no_por, subtrees: 64, check: None }
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let t0 = std::time::Instant::now();
    let roots = explore::plan(&cfg, &spec);
    let spec = Spec { max_states: o.max_states, ..spec };
    let fp = fingerprint(&cfg, &spec);
    let mut results: Vec<Option<SubtreeResult>> = vec![None; roots.len()];
    // An interrupted exploration says what it kept (it ended silently, exit 130).
    super::fuzz::say_when_interrupted(match &o.checkpoint {
        Some(path) => format!(
            "\nkvsim explore: interrupted; {path} keeps every subtree finished so far (it is written when the first one finishes: \
             none yet if it does not exist): run the same command again to resume\n"
        ),
        None => "\nkvsim explore: interrupted; nothing kept (--checkpoint FILE makes an exploration resumable)\n".to_string(),
    });
    if let Some(path) = &o.checkpoint {
        if let Ok(text) = std::fs::read_to_string(path) {
            match kvsim::formats::from_json::<Checkpoint>(&text) {
                Ok(c) if c.fingerprint == fp && c.results.len() == roots.len() => {
                    results = c.results;
                    let done = results.iter().filter(|r| r.is_some()).count();
                    eprintln!("resuming from {path}: {done} of {} subtrees done", roots.len());
                }
                Ok(_) => {
                    eprintln!("error: {path}: a checkpoint of another exploration (scenario, profile or bound differ)");
                    return exit::BAD_INPUT;
                }
                Err(e) => {
                    eprintln!("error: {path}: not a checkpoint: {e}");
                    return exit::BAD_INPUT;
                }
            }
        }
    }
    let summary = match run_subtrees(o, &cfg, &spec, &roots, results, &fp, t0) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    report(o, &cfg, &spec, &summary, secs)
}

/// Runs the unfinished subtrees on `--jobs` workers; merges in subtree order.
#[allow(clippy::disallowed_methods)] // progress on a terminal uses wall time; the model never does
fn run_subtrees(
    o: &ExploreOpts,
    cfg: &SimConfig,
    spec: &Spec,
    roots: &[Vec<u32>],
    results: Vec<Option<SubtreeResult>>,
    fp: &str,
    t0: std::time::Instant,
) -> Result<explore::Summary, String> {
    // The first subtree (in order) with a violation: later ones need not run.
    let first_found = AtomicUsize::new(
        results.iter().position(|r| r.as_ref().is_some_and(|r| r.found.is_some())).unwrap_or(usize::MAX),
    );
    let todo: Vec<usize> = (0..roots.len()).filter(|&i| results[i].is_none()).collect();
    let next = AtomicUsize::new(0);
    let live_states = AtomicU64::new(0);
    let live_frontier = AtomicU64::new(0);
    let shared = Mutex::new((results, None::<String>));
    let tty = std::io::stderr().is_terminal();
    std::thread::scope(|s| {
        for _ in 0..o.jobs {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                let Some(&i) = todo.get(k) else { break };
                if i > first_found.load(Ordering::SeqCst) {
                    continue;
                }
                let mut last = std::time::Instant::now();
                let mut prev = 0u64;
                let r = explore::explore_subtree(cfg, spec, &roots[i], &mut |r, frontier| {
                    live_states.fetch_add(r.states - prev, Ordering::Relaxed);
                    prev = r.states;
                    live_frontier.store(frontier, Ordering::Relaxed);
                    if tty && last.elapsed().as_millis() >= 500 {
                        last = std::time::Instant::now();
                        let st = live_states.load(Ordering::Relaxed);
                        let el = t0.elapsed().as_secs_f64().max(1e-9);
                        eprint!(
                            "\rexplore: {st} states ({:.0}/s), subtree {}/{}, frontier {}   ",
                            st as f64 / el,
                            i + 1,
                            roots.len(),
                            live_frontier.load(Ordering::Relaxed)
                        );
                    }
                });
                if r.found.is_some() {
                    first_found.fetch_min(i, Ordering::SeqCst);
                }
                let mut g = shared.lock().expect("results lock");
                g.0[i] = Some(r);
                if let Some(path) = &o.checkpoint {
                    let c = Checkpoint { fingerprint: fp.to_string(), results: g.0.clone() };
                    if let Err(e) = save_checkpoint(path, &c) {
                        g.1.get_or_insert(e);
                    }
                }
            });
        }
    });
    if tty {
        eprintln!();
    }
    let (results, err) = shared.into_inner().expect("results lock");
    if let Some(e) = err {
        return Err(e);
    }
    Ok(explore::merge(&results))
}

fn report(o: &ExploreOpts, cfg: &SimConfig, spec: &Spec, s: &explore::Summary, secs: f64) -> i32 {
    let bound = describe_bound(spec);
    let Some(found) = &s.found else {
        let verdict = if s.verified() {
            format!(
                "verified: {} distinct states, {} schedules, no violation within the bound ({bound})",
                s.states, s.schedules
            )
        } else {
            format!(
                "not verified: the state bound was reached in {} of {} subtrees after {} distinct states, {} schedules, no violation found ({bound}; raise --max-states)",
                s.truncated, s.subtrees, s.states, s.schedules
            )
        };
        if o.json {
            let v = serde_json::json!({"verified": s.verified(), "summary": s, "bound": bound, "seconds": secs});
            println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        } else {
            println!("{verdict}");
            // A schedule is one run: content channels (two runs compared) are outside the check.
            if !kvsim::check::noninterference::content_tenants(cfg).is_empty() {
                println!(
                    "note: content channels (timing_channel, status_channel) are not explored: `kvsim run {} --check noninterference` checks them",
                    kvsim::shell_path_str(&o.scenario)
                );
            }
            println!(
                "{} subtrees, {} schedules ended at a state seen before ({} of them at one explored with less of the fault/reordering budget used), longest schedule {} choices, {secs:.2} s",
                s.subtrees, s.pruned, s.subsumed, s.max_depth
            );
        }
        return if s.verified() { exit::CLEAN } else { exit::INCONCLUSIVE };
    };
    let shrunk = explore::shrink_choices(cfg, spec, &found.choices);
    let cs = ChoiceString { bounds: spec.bounds.clone(), choices: shrunk.clone() };
    let replay = explore::execute(cfg, spec, &shrunk, None, false);
    let kinds: std::collections::BTreeSet<&str> = replay
        .world
        .oracle
        .violations
        .iter()
        .filter(|v| spec.kinds.is_empty() || spec.kinds.contains(&v.kind))
        .map(|v| v.kind.name())
        .collect();
    let safety = replay.world.oracle.violations.iter().any(|v| !v.kind.is_liveness());
    // States are counted at a schedule's branch points: a violation found before any state was
    // counted (one latency, no fault) is said so ("after 0 distinct states" read as if nothing ran).
    let after = match s.states {
        0 => format!("after {} schedule(s), before any branch point's state was counted", s.schedules),
        n => format!("after {n} distinct states, {} schedules", s.schedules),
    };
    let mut lines =
        vec![format!("counterexample {after}: {} ({secs:.2} s)", kinds.into_iter().collect::<Vec<_>>().join(", "))];
    lines.push(format!(
        "schedule: {} choices, shrunk to {} ({} not the default)",
        found.choices.len(),
        shrunk.len(),
        shrunk.iter().filter(|&&c| c != 0).count()
    ));
    for c in replay.trail.iter().take(shrunk.len()).enumerate().filter(|(_, c)| c.value != 0) {
        lines.push(format!("  choice {}: {}", c.0, spec.bounds.describe(c.1)));
    }
    // The first violation of the property (`--kinds`), as the summary line names its kinds.
    let first = |w: &kvsim::world::World| {
        let of_property = |v: &&kvsim::check::oracle::Violation| spec.kinds.is_empty() || spec.kinds.contains(&v.kind);
        w.oracle.violations.iter().find(of_property).map(|v| kvsim::report::story(w, v))
    };
    let mut story = first(&replay.world);
    // The run's own command (seed, profile, pins, liveness bound: what the exploration ran),
    // replaying the shrunk schedule.
    let reproduce =
        format!("{} --choices {}", super::reproduce_cmd(&o.scenario, cfg, &o.opts), kvsim::shell_word(&cs.to_string()));
    lines.push(format!("reproduce: {reproduce}"));
    let shrunk_reproduce = match &o.out {
        Some(out) => {
            // The scenario is shrunk too (the library's shrinker, each candidate kept only when
            // exploring it still finds a violation of the property).
            // The command's `--set` pins stay as given (as `kvsim shrink` keeps them).
            let pinned: Vec<String> =
                kvsim::scenario::parse_set_flags(&o.opts.set).unwrap_or_default().into_iter().map(|(k, _)| k).collect();
            let (mut c, cs) = match explore::shrink_scenario(cfg, spec, &shrunk, o.shrink_budget, 20_000, &pinned) {
                Some((sh, choices)) => {
                    lines.push(format!(
                        "scenario shrunk: {} -> {} request(s), {} prefill / {} decode node(s), {} tries ({} kept){}",
                        super::fuzz::case_requests(cfg),
                        sh.cfg.requests.len(),
                        sh.cfg.prefill.len(),
                        sh.cfg.decode.len(),
                        sh.runs,
                        sh.accepted,
                        if sh.necessary_knobs.is_empty() {
                            String::new()
                        } else {
                            format!("; needs {}", sh.necessary_knobs.join(", "))
                        }
                    ));
                    (sh.cfg, ChoiceString { bounds: spec.bounds.clone(), choices })
                }
                None => {
                    lines.push("scenario not shrunk: one subtree of 20000 states does not show the violation".into());
                    (cfg.clone(), cs.clone())
                }
            };
            let header = format!(
                "Counterexample found by kvsim explore from {} (profile {}).\nChoice string: {cs}\nReproduce: kvsim run {} --choices {}",
                o.scenario,
                cfg.profile,
                kvsim::shell_path_str(out),
                kvsim::shell_word(&cs.to_string())
            );
            c.name = format!("{}-counterexample", cfg.name);
            if let Err(e) = std::fs::write(out, kvsim::scenario::to_toml_against_profile(&c, &header)) {
                eprintln!("error: {out}: cannot write: {e}");
                return exit::BAD_INPUT;
            }
            lines.push(format!("wrote {out}"));
            let rep = explore::execute(&c, spec, &cs.choices, None, false);
            // The story of the case written, said as such: it followed the original's reproduce
            // line and gave the shrunk case's tenant and prompt without a word.
            story = first(&rep.world).map(|s| format!("(of the shrunk case, {out}) {s}"));
            let r =
                format!("kvsim run {} --choices {}", kvsim::shell_path_str(out), kvsim::shell_word(&cs.to_string()));
            lines.push(format!("reproduce (shrunk): {r}"));
            Some(r)
        }
        None => None,
    };
    if let Some(story) = story {
        // The schedule is replayed up to its first violation: a request "got no response" there
        // only because the replay stopped (`kvsim run … --choices` runs it to the end).
        let story =
            story.replacen("got no response", "had no response yet when the schedule stopped at this violation", 1);
        lines.push(format!("first violation: {story}"));
    }
    if o.json {
        let v = serde_json::json!({"verified": false, "summary": s, "bound": bound, "seconds": secs,
            "choices": cs.to_string(), "reproduce": reproduce, "reproduce_shrunk": shrunk_reproduce});
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        for l in lines {
            println!("{l}");
        }
    }
    if safety {
        exit::SAFETY
    } else {
        exit::LIVENESS
    }
}

fn describe_bound(spec: &Spec) -> String {
    let b = &spec.bounds;
    let kinds: Vec<&str> = b.fault_kinds.iter().map(|k| k.name()).collect();
    format!(
        "{}, latencies {} us, {}, {} states per subtree",
        if kinds.is_empty() || b.max_faults == 0 {
            "no faults".to_string()
        } else {
            format!("faults <= {} of {}", b.max_faults, kinds.join("/"))
        },
        if b.latencies_us.is_empty() {
            "fixed".to_string()
        } else {
            b.latencies_us.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("/")
        },
        if b.max_reorders == 0 {
            "simultaneous events in sequence order".to_string()
        } else {
            format!("reorders <= {}", b.max_reorders)
        },
        spec.max_states
    )
}

/// One catalogue cell's exploration.
struct Cell {
    summary: explore::Summary,
    secs: f64,
}

#[allow(clippy::disallowed_methods)] // the command measures wall time for the table; the model never does
fn explore_one(
    o: &ExploreOpts,
    cfg: &SimConfig,
    kinds: &[kvsim::check::Kind],
    faults: Option<&[String]>,
) -> Result<Cell, String> {
    let mut bounds = bounds_of(o, cfg)?;
    if let Some(fs) = faults {
        // The entry's own fault kinds (`Expectation::explore_faults`) replace --faults.
        bounds.fault_kinds = fault_kinds(fs.iter().map(String::as_str), "explore_faults")?;
        bounds = bounds.normalised();
    }
    let spec = Spec {
        bounds,
        kinds: kinds.to_vec(),
        max_states: 1,
        prune: !o.no_prune,
        por: !o.no_por,
        subtrees: 64,
        check: None,
    };
    let t0 = std::time::Instant::now();
    let roots = explore::plan(cfg, &spec);
    let spec = Spec { max_states: o.max_states, ..spec };
    let summary = run_subtrees(o, cfg, &spec, &roots, vec![None; roots.len()], "", t0)?;
    Ok(Cell { summary, secs: t0.elapsed().as_secs_f64() })
}

fn n(x: u64) -> String {
    let s = x.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `kvsim explore CATALOGUE --catalogue`: the table of README.md's "Exhaustive exploration".
/// Exit 0 when every buggy setting shows a counterexample and every fixed one is verified, 1
/// when a buggy setting shows none or a fixed one shows one, else 13 (a bound was reached).
pub fn run_catalogue(o: &ExploreOpts) -> i32 {
    if o.out.is_some() || o.checkpoint.is_some() || o.kinds.is_some() {
        eprintln!("error: --catalogue takes neither --out, --checkpoint nor --kinds (each row's property is its buggy entry's violations)");
        return exit::BAD_INPUT;
    }
    // Each setting is its entry's (profile, seed, `set`): these would be silently ignored.
    let r = &o.opts;
    let given: Vec<&str> = [
        ("--set", !r.set.is_empty()),
        ("--profile", r.profile.is_some()),
        ("--seed", r.seed.is_some()),
        ("--liveness", r.liveness.is_some()),
        ("--json", o.json),
    ]
    .into_iter()
    .filter_map(|(f, on)| on.then_some(f))
    .collect();
    if !given.is_empty() {
        eprintln!(
            "error: --catalogue takes no {}: each row runs its `buggy` and `fixed` entries' own profile and knobs (explore one file without --catalogue to vary them), and prints the table as text",
            given.join(", ")
        );
        return exit::BAD_INPUT;
    }
    // As a single exploration: an interruption says what it left (it died without a word, or,
    // started in the background with SIGINT ignored, ran on to its end).
    super::fuzz::say_when_interrupted(
        "\nkvsim explore --catalogue: interrupted; the rows printed above are complete, the rest were not explored\n"
            .to_string(),
    );
    let files = match super::check::collect(std::slice::from_ref(&o.scenario)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let mut any_buggy = false;
    for f in &files {
        let checked = super::check::parse(f).and_then(|sc| {
            any_buggy |= sc.spec.expect.iter().any(|e| e.name == "buggy");
            super::check::validate_expectations(&sc, f)
        });
        if let Err(e) = checked {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    }
    if !any_buggy {
        // Before the table's header (it printed the header, then this error).
        eprintln!("error: {}: no scenario with a `buggy` expectation: no catalogue row to explore", o.scenario);
        return exit::BAD_INPUT;
    }
    println!("| row | property | buggy: counterexample after | fixed: verified (distinct states / schedules, time) |");
    println!("|---|---|---|---|");
    let (mut mismatch, mut bound_reached, mut rows) = (0, 0, 0);
    for (f, row) in files.iter().zip(super::check::row_names(&files)) {
        let sc = match super::check::parse(f) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
        };
        let Some(buggy) = sc.spec.expect.iter().find(|e| e.name == "buggy") else { continue };
        let kinds = match explore::parse_kinds(&buggy.violations.join(",")) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("error: {}: {e}", f.display());
                return exit::BAD_INPUT;
            }
        };
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        if kinds.is_empty() || buggy.needs_noninterference() {
            println!(
                "| {row} | {} | not explored: the property needs the noninterference check (two runs per schedule), which exploration does not run | — |",
                if names.is_empty() { "—".to_string() } else { names.join(", ") }
            );
            continue;
        }
        rows += 1;
        let mut cells = Vec::new();
        for name in ["buggy", "fixed"] {
            let Some(e) = sc.spec.expect.iter().find(|e| e.name == name) else {
                cells.push("no entry".to_string());
                continue;
            };
            let cfg = match super::check::resolve(&sc, e.profile.clone(), e.set_pairs()) {
                Ok(c) => c,
                Err(err) => {
                    eprintln!("error: {} expectation `{name}`: {err}", f.display());
                    return exit::BAD_INPUT;
                }
            };
            let cell = match explore_one(o, &cfg, &kinds, e.explore_faults.as_deref()) {
                Ok(c) => c,
                Err(err) => {
                    eprintln!("error: {}: {err}", f.display());
                    return exit::BAD_INPUT;
                }
            };
            let s = &cell.summary;
            let t = cell.secs;
            let text = match (&s.found, name) {
                (Some(found), _) => {
                    let got: std::collections::BTreeSet<&str> =
                        found.violations.iter().map(|v| v.kind.name()).collect();
                    let got = got.into_iter().collect::<Vec<_>>().join(", ");
                    if name == "fixed" {
                        mismatch += 1;
                        format!(
                            "**counterexample** ({got}) after {} states / {} schedules, {t:.1} s",
                            n(s.states),
                            n(s.schedules)
                        )
                    } else {
                        format!("{got} after {} states / {} schedules, {t:.2} s", n(s.states), n(s.schedules))
                    }
                }
                (None, _) if s.verified() => {
                    if name == "buggy" {
                        mismatch += 1;
                        format!("**none**: verified {} / {}, {t:.2} s", n(s.states), n(s.schedules))
                    } else {
                        format!("verified {} / {}, {t:.2} s", n(s.states), n(s.schedules))
                    }
                }
                (None, _) => {
                    bound_reached += 1;
                    format!(
                        "**{}**: bound reached in {} of {} subtrees after {} / {}, no violation, {t:.1} s",
                        if name == "buggy" { "not found" } else { "not verified" },
                        s.truncated,
                        s.subtrees,
                        n(s.states),
                        n(s.schedules)
                    )
                }
            };
            let text = match &e.explore_faults {
                Some(fs) => format!(
                    "{text} (the entry's explore_faults: {})",
                    if fs.is_empty() { "none".into() } else { fs.join(", ") }
                ),
                None => text,
            };
            cells.push(text);
        }
        println!("| {row} | {} | {} | {} |", names.join(", "), cells[0], cells[1]);
    }
    let spec_bound = match files.first().map(|f| (f, super::check::parse(f))) {
        Some((_, Ok(sc))) => super::check::resolve(&sc, None, vec![])
            .ok()
            .and_then(|c| bounds_of(o, &c).ok())
            .map(|b| {
                describe_bound(&Spec {
                    bounds: b,
                    kinds: vec![],
                    max_states: o.max_states,
                    prune: true,
                    por: true,
                    subtrees: 64,
                    check: None,
                })
            })
            .unwrap_or_default(),
        _ => String::new(),
    };
    println!();
    println!(
        "{rows} row(s) explored: {mismatch} mismatch(es), {bound_reached} setting(s) where the bound was reached; bound: {spec_bound} (latencies: each row's message latency and ten times it unless --latencies)"
    );
    if mismatch > 0 {
        1
    } else if bound_reached > 0 {
        exit::INCONCLUSIVE
    } else {
        exit::CLEAN
    }
}
