//! `kvsim bench`: whole-run benchmarks. Each scenario runs in a child process of this binary (the
//! hidden `--one NAME`), sequentially, one thread, so that its peak resident memory (VmHWM) is its
//! own; the parent prints one table and optionally writes it as JSON. Wall time is measured here,
//! in the binary: the `kvsim` library never reads a clock.
//!
//! Scenarios (the TOML files are compiled in, so the binary can run from anywhere):
//! - `glm53-incident`: `scenarios/glm53-incident.toml` as shipped (the full-scale incident);
//! - `mixed-10k`: `sim/bench-scenarios/mixed-10k.toml`, 10,000 mixed requests on 8P8D;
//! - `mixed-10k-x1000`: the same requests with every prompt length x1,000, and the context, pools
//!   and chunk size x1,000 with per-token costs /1,000 so that the virtual timeline stays the same
//!   (see `kvsim::client::scale_prompts`);
//! - `fuzz-small`: `sim/bench-scenarios/fuzz-small.toml` (fuzzer-sized) run many times with seeds
//!   1, 2, 3, …; reported as runs per second;
//! - `blis-fair-10k`: `sim/bench-scenarios/blis-fair-10k.toml`, the peer simulator's workload
//!   (10,000 requests, Poisson 8/s, 512/128 tokens, 2P2D, fixed `sglang-0.5.22` profile);
//! - `blis-fair-1m`: the same workload with 1,000,000 requests (built in code);
//! - `blis-fair-10m`: 10,000,000 requests, a memory check run only when named with `--only`;
//! - `swarm-0.5.16`: a pinned-profile swarm campaign's runs (`kvsim fuzz --profile
//!   sglang-0.5.16`): its draws for seeds 0, 1, 2, …, each run as the campaign runs it (the
//!   reference oracle and the invariant checks on the runs its seed samples), signatures
//!   collected; not the campaign's accounting and saved examples (another thread, idle once a
//!   long campaign's examples settle). Reported as runs per second of CPU.

use kvsim::config::SimConfig;
use kvsim::scenario::{Overrides, Scenario};
use serde::{Deserialize, Serialize};
use std::process::Command;

const INCIDENT_TOML: &str = include_str!("../../scenarios/glm53-incident.toml");
const MIXED_TOML: &str = include_str!("../../sim/bench-scenarios/mixed-10k.toml");
const FUZZ_TOML: &str = include_str!("../../sim/bench-scenarios/fuzz-small.toml");
const BLIS_TOML: &str = include_str!("../../sim/bench-scenarios/blis-fair-10k.toml");

#[derive(clap::Args, Debug, Clone)]
pub struct BenchOpts {
    /// Write the results table as JSON here.
    #[arg(long)]
    pub json: Option<String>,
    /// Run only these scenarios (repeatable): glm53-incident, mixed-10k, mixed-10k-x1000, fuzz-small,
    /// blis-fair-10k, blis-fair-1m, swarm-0.5.16, blis-fair-10m (the last only when named).
    #[arg(long = "only", value_name = "NAME")]
    pub only: Vec<String>,
    /// Timed repetitions of each measurement (the table shows the median).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Runs of the fuzzer-sized scenario (seeds 1..=N) and of the swarm (seeds 0..N) per repetition.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub fuzz_runs: u64,
    /// Run every scenario under this engine profile instead of its own (e.g. vllm-nixl: LRU
    /// free list, sequential router); the targets are judged on the scenarios as shipped only.
    #[arg(long)]
    pub profile: Option<String>,
    /// Cut generated workloads to this many requests (for profiling under callgrind; the table's
    /// targets are judged on full runs only).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub requests: Option<u32>,
    /// Internal: measure one scenario in this process and print its row as JSON.
    #[arg(long, hide = true, value_name = "NAME")]
    pub one: Option<String>,
}

/// How a scenario is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One simulation per repetition.
    Whole,
    /// `fuzz_runs` simulations per repetition, seeds 1..=N.
    Many,
    /// `fuzz_runs` runs of a profile's swarm campaign per repetition, seeds 0..N
    /// (`measure_swarm`; the case's configuration is not used).
    Swarm,
}

struct Case {
    name: &'static str,
    source: &'static str,
    mode: Mode,
    build: fn(&Overrides) -> Result<SimConfig, String>,
    /// Run only when named with `--only` (too long or too large for the default table).
    on_request: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "glm53-incident",
        source: "scenarios/glm53-incident.toml",
        mode: Mode::Whole,
        build: incident,
        on_request: false,
    },
    Case {
        name: "mixed-10k",
        source: "sim/bench-scenarios/mixed-10k.toml",
        mode: Mode::Whole,
        build: mixed,
        on_request: false,
    },
    Case {
        name: "mixed-10k-x1000",
        source: "sim/bench-scenarios/mixed-10k.toml, prompts x1000",
        mode: Mode::Whole,
        build: mixed_x1000,
        on_request: false,
    },
    Case {
        name: "fuzz-small",
        source: "sim/bench-scenarios/fuzz-small.toml",
        mode: Mode::Many,
        build: fuzz_small,
        on_request: false,
    },
    Case {
        name: "blis-fair-10k",
        source: "sim/bench-scenarios/blis-fair-10k.toml",
        mode: Mode::Whole,
        build: blis_10k,
        on_request: false,
    },
    Case {
        name: "blis-fair-1m",
        source: "sim/bench-scenarios/blis-fair-10k.toml, 1,000,000 requests",
        mode: Mode::Whole,
        build: blis_1m,
        on_request: false,
    },
    Case {
        name: "swarm-0.5.16",
        source: "kvsim fuzz --profile: its draws, seeds 0..N, run as the campaign runs them",
        mode: Mode::Swarm,
        build: fuzz_small, // not used: `measure_swarm` draws each run's configuration
        on_request: false,
    },
    Case {
        name: "blis-fair-10m",
        source: "sim/bench-scenarios/blis-fair-10k.toml, 10,000,000 requests",
        mode: Mode::Whole,
        build: blis_10m,
        on_request: true,
    },
];

fn parse(file: &str, text: &str, o: &Overrides) -> Result<SimConfig, String> {
    Scenario::parse(file, text).and_then(|s| s.resolve(o)).map_err(|e| e.to_string())
}

fn incident(o: &Overrides) -> Result<SimConfig, String> {
    parse("scenarios/glm53-incident.toml", INCIDENT_TOML, o)
}

fn mixed(o: &Overrides) -> Result<SimConfig, String> {
    parse("sim/bench-scenarios/mixed-10k.toml", MIXED_TOML, o)
}

fn mixed_x1000(o: &Overrides) -> Result<SimConfig, String> {
    kvsim::client::scale_prompts(mixed(o)?, 1000).map_err(|e| e.to_string())
}

fn fuzz_small(o: &Overrides) -> Result<SimConfig, String> {
    parse("sim/bench-scenarios/fuzz-small.toml", FUZZ_TOML, o)
}

fn blis_10k(o: &Overrides) -> Result<SimConfig, String> {
    parse("sim/bench-scenarios/blis-fair-10k.toml", BLIS_TOML, o)
}

/// The peer's workload with `n` generated requests (same arrival rate, lengths and deployment).
fn blis_requests(o: &Overrides, n: u32) -> Result<SimConfig, String> {
    let mut c = blis_10k(o)?;
    let g = c.generator.as_mut().ok_or("blis-fair-10k.toml has no [workload] generator")?;
    g.requests = n;
    Ok(c)
}

fn blis_1m(o: &Overrides) -> Result<SimConfig, String> {
    blis_requests(o, 1_000_000)
}

fn blis_10m(o: &Overrides) -> Result<SimConfig, String> {
    blis_requests(o, 10_000_000)
}

/// One measured scenario.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Row {
    pub scenario: String,
    pub source: String,
    /// Simulations per repetition (1 for a whole run).
    pub runs: u64,
    /// Model events per repetition (all runs).
    pub events: u64,
    /// Simulated client requests per repetition (all runs).
    pub requests: u64,
    /// Median wall time of a repetition: per run, a clone of the resolved configuration, the
    /// simulation and dropping the world (no parsing, no report).
    pub wall_s: f64,
    /// Every repetition's wall time, in order.
    pub wall_s_all: Vec<f64>,
    /// Median on-CPU time of a repetition (this thread's CPU clock, `CLOCK_THREAD_CPUTIME_ID`):
    /// close to `wall_s` on an idle machine, and the fairer number on a loaded one.
    pub cpu_s: Option<f64>,
    pub events_per_s: f64,
    pub requests_per_s: f64,
    pub runs_per_s: f64,
    /// Parse and resolve of the scenario (once).
    pub load_s: f64,
    /// Peak resident memory of the measuring process (VmHWM), KiB; None where /proc is missing.
    pub peak_rss_kib: Option<u64>,
    /// VmHWM before the scenario was loaded (the binary itself), KiB.
    pub baseline_rss_kib: Option<u64>,
    /// Virtual time at the end of the (last) run, seconds.
    pub virtual_s: f64,
    /// Trace hash of the (last) run: the run is the one `kvsim run` gives.
    pub trace_hash: String,
    /// Ownership-map runs over all pools at the end of the (last) run: the state the hot paths
    /// search (every `Pool::write`/`read` is a few B-tree searches over one pool's map).
    pub ownership_runs_end: u64,
    pub exit_code: i32,
}

/// The machine the table was measured on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Machine {
    pub cpu: String,
    pub logical_cpus: usize,
    pub os: String,
}

/// A target of the benchmark issue and whether this table meets it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Target {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// What `--json` writes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Table {
    pub kvsim_version: String,
    pub machine: Machine,
    pub repeat: u32,
    pub rows: Vec<Row>,
    pub targets: Vec<Target>,
}

/// Wall-clock time of `f`, seconds.
#[allow(clippy::disallowed_methods)] // the benchmark harness measures wall time; the model never does
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t0 = std::time::Instant::now();
    let out = f();
    (out, t0.elapsed().as_secs_f64())
}

/// This thread's time on a CPU so far, seconds (`CLOCK_THREAD_CPUTIME_ID`), if available.
/// Not `/proc/thread-self/schedstat`, which it read before: a VM whose scheduler accounts run
/// time at its ticks advances that counter in whole ticks (4 ms on the 2-vCPU VM of the
/// fifty-first session), so a 30 ms run measured as 28 or 32 ms; the clock adds the time since
/// the last tick (microsecond steps there).
fn cpu_time_s() -> Option<f64> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (rc == 0).then(|| t.tv_sec as f64 + t.tv_nsec as f64 / 1e9)
}

/// `VmHWM` (peak resident set) of this process, KiB.
fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Measures one scenario in this process.
fn measure(name: &str, source: &str, mode: Mode, cfg: SimConfig, load_s: f64, repeat: u32, runs: u64) -> Row {
    let baseline = vm_hwm_kib();
    let runs = if mode == Mode::Whole { 1 } else { runs.max(1) };
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    let (mut events, mut requests) = (0u64, 0u64);
    let mut last = None;
    for _ in 0..repeat.max(1) {
        // A repetition: for each run, clone the configuration (a fuzzer builds one per case),
        // simulate, count, and drop the world (all but the last, kept for the row's details).
        drop(last.take()); // the previous repetition's world must not inflate this one's peak memory
        let cpu0 = cpu_time_s();
        let ((ev, rq, w), wall) = timed(|| {
            let (mut ev, mut rq, mut keep) = (0u64, 0u64, None);
            for i in 0..runs {
                let mut c = cfg.clone();
                if mode == Mode::Many {
                    c.seed = i + 1;
                }
                // As `kvsim run` runs it: finished requests folded (`kvsim::reqs::Reqs`).
                let mut w = kvsim::world::World::new(c, kvsim::trace::Tracer::new(None));
                w.fold_finished = true;
                w.run();
                ev += w.events();
                rq += w.reqs.len() as u64;
                if i + 1 == runs {
                    keep = Some(w);
                }
            }
            (ev, rq, keep)
        });
        let cpu1 = cpu_time_s();
        walls.push(wall);
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            cpus.push(b - a);
        }
        (events, requests, last) = (ev, rq, w);
    }
    let w = last.expect("at least one run");
    let pools = w.prefill.iter().map(|p| p.pool()).chain(w.decode.iter().map(|d| d.pool()));
    let ownership_runs_end = pools.map(|p| p.ownership_runs() as u64).sum();
    let counts = Counts { runs, events, requests, walls, cpus };
    row(name, source.to_string(), counts, load_s, baseline, &w, ownership_runs_end)
}

/// What the repetitions of a measurement counted: runs, events and requests per repetition, and
/// each repetition's wall and CPU time.
struct Counts {
    runs: u64,
    events: u64,
    requests: u64,
    walls: Vec<f64>,
    cpus: Vec<f64>,
}

/// A measurement's row; `w` is the last run's world.
fn row(
    name: &str,
    source: String,
    c: Counts,
    load_s: f64,
    baseline: Option<u64>,
    w: &kvsim::world::World,
    ownership_runs_end: u64,
) -> Row {
    let wall_s = median(&c.walls);
    let per = |x: u64| if wall_s > 0.0 { x as f64 / wall_s } else { 0.0 };
    Row {
        scenario: name.to_string(),
        source,
        runs: c.runs,
        events: c.events,
        requests: c.requests,
        wall_s,
        cpu_s: (!c.cpus.is_empty()).then(|| median(&c.cpus)),
        wall_s_all: c.walls,
        events_per_s: per(c.events),
        requests_per_s: per(c.requests),
        runs_per_s: per(c.runs),
        load_s,
        peak_rss_kib: vm_hwm_kib(),
        baseline_rss_kib: baseline,
        virtual_s: w.ended_at().0 as f64 / 1e9,
        trace_hash: w.tracer.hash_hex(),
        ownership_runs_end,
        exit_code: kvsim::report::exit_status(w),
    }
}

/// Measures a profile's swarm campaign runs in this process: per repetition, `runs` draws of
/// `profile`'s space (seeds 0..runs), each run with the checks its seed samples, as `kvsim fuzz
/// --profile` runs them (`kvsim::fuzz::run_case_full`).
fn measure_swarm(name: &str, source: &str, profile: &str, repeat: u32, runs: u64) -> Row {
    use kvsim::fuzz::{draw, run_case_full, sampled_for_check, sampled_for_invariants, Space};
    let baseline = vm_hwm_kib();
    let space = Space::Profile(profile.to_string());
    let runs = runs.max(1);
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    let (mut events, mut requests, mut failing) = (0u64, 0u64, 0u64);
    let mut last = None;
    for _ in 0..repeat.max(1) {
        drop(last.take());
        let cpu0 = cpu_time_s();
        let ((ev, rq, bad, w), wall) = timed(|| {
            let (mut ev, mut rq, mut bad, mut keep) = (0u64, 0u64, 0u64, None);
            for seed in 0..runs {
                let cfg = draw(seed, &space);
                let (w, sigs) = run_case_full(cfg, sampled_for_check(seed), false, sampled_for_invariants(seed), false);
                ev += w.events();
                rq += w.reqs.len() as u64;
                bad += u64::from(!sigs.is_empty());
                if seed + 1 == runs {
                    keep = Some(w);
                }
            }
            (ev, rq, bad, keep)
        });
        let cpu1 = cpu_time_s();
        walls.push(wall);
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            cpus.push(b - a);
        }
        (events, requests, failing, last) = (ev, rq, bad, w);
    }
    let w = last.expect("at least one run");
    let source = format!("{source}, profile {profile} ({failing} of {runs} runs with signatures)");
    row(name, source, Counts { runs, events, requests, walls, cpus }, 0.0, baseline, &w, 0)
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    Machine {
        cpu,
        logical_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        os: std::env::consts::OS.to_string(),
    }
}

/// The issue's targets, judged on whichever rows the table has.
fn targets(rows: &[Row]) -> Vec<Target> {
    let get = |n: &str| rows.iter().find(|r| r.scenario == n);
    let mut out = Vec::new();
    if let Some(r) = get("glm53-incident") {
        let rss_mb = r.peak_rss_kib.map(|k| k as f64 * 1024.0 / 1e6);
        out.push(Target {
            target: "full-scale incident under 1 s wall, peak RSS under 256 MB".into(),
            measured: format!(
                "{:.3} s, {}",
                r.wall_s,
                rss_mb.map_or("peak RSS unknown".to_string(), |m| format!("{m:.1} MB peak RSS"))
            ),
            met: r.wall_s < 1.0 && rss_mb.is_some_and(|m| m < 256.0),
        });
    }
    if let (Some(a), Some(b)) = (get("mixed-10k"), get("mixed-10k-x1000")) {
        let ratio = if a.wall_s > 0.0 { b.wall_s / a.wall_s } else { f64::INFINITY };
        out.push(Target {
            target: "x1,000 prompt lengths within 2x the wall time of the original".into(),
            measured: format!("{:.3} s vs {:.3} s: {ratio:.2}x", b.wall_s, a.wall_s),
            met: ratio <= 2.0,
        });
    }
    if let Some(r) = get("mixed-10k") {
        out.push(Target {
            target: "at least 1,000,000 model events/s on the 10,000-request workload".into(),
            measured: format!("{:.0} events/s", r.events_per_s),
            met: r.events_per_s >= 1e6,
        });
    }
    if let Some(r) = get("fuzz-small") {
        out.push(Target {
            target: "at least 1,000 fuzzer-sized runs/s per core".into(),
            measured: format!("{:.0} runs/s", r.runs_per_s),
            met: r.runs_per_s >= 1000.0,
        });
    }
    out.extend(issue14_targets(rows));
    out
}

/// Peak RSS in MB (10^6 bytes).
fn rss_mb(r: &Row) -> Option<f64> {
    r.peak_rss_kib.map(|k| k as f64 * 1024.0 / 1e6)
}

/// CPU time (wall where the CPU clock is missing).
fn cpu(r: &Row) -> f64 {
    r.cpu_s.unwrap_or(r.wall_s)
}

/// The targets of issue 14 ("performance by design"), judged on CPU time (one core).
fn issue14_targets(rows: &[Row]) -> Vec<Target> {
    let get = |n: &str| rows.iter().find(|r| r.scenario == n);
    let mut out = Vec::new();
    let mut cpu_rss = |name: &str, max_cpu: Option<f64>, max_mb: f64| {
        if let Some(r) = get(name) {
            let mb = rss_mb(r);
            let mut limits: Vec<String> = max_cpu.map(|c| format!("<= {:.0} ms CPU", c * 1e3)).into_iter().collect();
            if max_mb.is_finite() {
                limits.push(format!("<= {max_mb:.0} MB peak RSS"));
            }
            out.push(Target {
                target: format!("{name}: {}", limits.join(" and ")),
                measured: format!(
                    "{:.3} s CPU, {}",
                    cpu(r),
                    mb.map_or("peak RSS unknown".to_string(), |m| format!("{m:.1} MB"))
                ),
                met: max_cpu.is_none_or(|c| cpu(r) <= c) && mb.is_some_and(|m| m <= max_mb),
            });
        }
    };
    cpu_rss("blis-fair-10k", Some(0.050), 20.0);
    cpu_rss("blis-fair-1m", Some(5.0), 100.0);
    cpu_rss("blis-fair-10m", None, 1000.0);
    cpu_rss("glm53-incident", Some(0.030), f64::INFINITY);
    if let Some(r) = get("mixed-10k") {
        out.push(Target {
            target: "mixed-10k: at least 10x faster than 3.8 s CPU (<= 0.38 s)".into(),
            measured: format!("{:.3} s CPU", cpu(r)),
            met: cpu(r) <= 0.38,
        });
    }
    if let (Some(a), Some(b)) = (get("mixed-10k"), get("mixed-10k-x1000")) {
        let ratio = cpu(b) / cpu(a).max(1e-9);
        out.push(Target {
            target: "x1,000 prompt lengths within 1.2x the CPU time of the original".into(),
            measured: format!("{:.3} s vs {:.3} s: {ratio:.2}x", cpu(b), cpu(a)),
            met: ratio <= 1.2,
        });
    }
    let runs_per_core = [
        ("fuzz-small", "at least 20,000 fuzzer-sized runs/s per core", 20_000.0),
        ("swarm-0.5.16", "pinned-profile swarm (sglang-0.5.16): at least 10,000 runs/s per core", 10_000.0),
    ];
    for (name, target, min) in runs_per_core {
        if let Some(r) = get(name) {
            let per_cpu = r.runs as f64 / cpu(r).max(1e-9);
            out.push(Target {
                target: target.into(),
                measured: format!("{per_cpu:.0} runs/s (CPU)"),
                met: per_cpu >= min,
            });
        }
    }
    out
}

/// The table as text.
pub fn render(t: &Table) -> String {
    let mut s = format!(
        "kvsim {} bench on {} ({} logical CPUs), median of {} repetition(s), one thread\n\n",
        t.kvsim_version, t.machine.cpu, t.machine.logical_cpus, t.repeat
    );
    s.push_str(&format!(
        "{:<16} {:>6} {:>11} {:>10} {:>10} {:>12} {:>14} {:>9} {:>10}\n",
        "scenario", "runs", "events", "wall", "cpu", "events/s", "sim req/s", "runs/s", "peak RSS"
    ));
    for r in &t.rows {
        let rss = r.peak_rss_kib.map_or("?".to_string(), |k| format!("{:.1} MB", k as f64 * 1024.0 / 1e6));
        let cpu = r.cpu_s.map_or("?".to_string(), |c| format!("{c:.3} s"));
        s.push_str(&format!(
            "{:<16} {:>6} {:>11} {:>8.3} s {:>10} {:>12.0} {:>14.0} {:>9.1} {:>10}\n",
            r.scenario, r.runs, r.events, r.wall_s, cpu, r.events_per_s, r.requests_per_s, r.runs_per_s, rss
        ));
    }
    if !t.targets.is_empty() {
        s.push('\n');
        for x in &t.targets {
            s.push_str(&format!("[{}] {}: {}\n", if x.met { "met" } else { "MISSED" }, x.target, x.measured));
        }
    }
    s
}

pub fn to_json(t: &Table) -> String {
    serde_json::to_string_pretty(t).expect("table serialises")
}

fn run_one(name: &str, o: &BenchOpts) -> i32 {
    let Some(case) = CASES.iter().find(|c| c.name == name) else {
        eprintln!("kvsim bench: no scenario `{name}`");
        return 2;
    };
    let over = Overrides { profile: o.profile.clone(), ..Overrides::default() };
    let (cfg, load_s) = timed(|| (case.build)(&over));
    let cfg = match cfg {
        Ok(mut c) => {
            if let Some(n) = o.requests {
                let keep = n as usize;
                if let Some(g) = c.generator.as_mut() {
                    g.requests = g.requests.min(n);
                }
                c.requests.truncate(keep);
            }
            c
        }
        Err(e) => {
            eprintln!("kvsim bench: {}: {e}", case.name);
            return 2;
        }
    };
    let row = if case.mode == Mode::Swarm {
        let profile = o.profile.as_deref().unwrap_or("sglang-0.5.16");
        measure_swarm(case.name, case.source, profile, o.repeat, o.fuzz_runs)
    } else {
        measure(case.name, case.source, case.mode, cfg, load_s, o.repeat, o.fuzz_runs)
    };
    println!("{}", serde_json::to_string(&row).expect("row serialises"));
    0
}

pub fn run(o: &BenchOpts) -> i32 {
    if let Some(name) = &o.one {
        return run_one(name, o);
    }
    if let Some(bad) = o.only.iter().find(|n| !CASES.iter().any(|c| c.name == n.as_str())) {
        let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        eprintln!("kvsim bench: no scenario `{bad}` (one of: {})", names.join(", "));
        return 2;
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("kvsim bench: cannot find this executable to measure scenarios in child processes: {e}");
            return 2;
        }
    };
    let mut rows = Vec::new();
    let chosen = |c: &&Case| if o.only.is_empty() { !c.on_request } else { o.only.iter().any(|n| n == c.name) };
    for case in CASES.iter().filter(chosen) {
        eprintln!("kvsim bench: {} …", case.name);
        let out = Command::new(&exe)
            .args(["bench", "--one", case.name, "--repeat", &o.repeat.to_string()])
            .args(["--fuzz-runs", &o.fuzz_runs.to_string()])
            .args(o.requests.map(|n| format!("--requests={n}")))
            .args(o.profile.as_ref().map(|p| format!("--profile={p}")))
            .output();
        let out = match out {
            Ok(x) if x.status.success() => x,
            Ok(x) => {
                eprintln!("kvsim bench: {} failed ({}): {}", case.name, x.status, String::from_utf8_lossy(&x.stderr));
                return 2;
            }
            Err(e) => {
                eprintln!("kvsim bench: cannot start {}: {e}", exe.display());
                return 2;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        match serde_json::from_str::<Row>(text.trim()) {
            Ok(r) => rows.push(r),
            Err(e) => {
                eprintln!("kvsim bench: {}: unreadable result ({e}): {text}", case.name);
                return 2;
            }
        }
    }
    let table = Table {
        kvsim_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: machine(),
        repeat: o.repeat.max(1),
        targets: if o.requests.is_some() || o.profile.is_some() { Vec::new() } else { targets(&rows) },
        rows,
    };
    print!("{}", render(&table));
    if let Some(path) = &o.json {
        if let Err(e) = std::fs::write(path, to_json(&table) + "\n") {
            eprintln!("kvsim bench: {path}: cannot write: {e}");
            return 2;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_required_fields() {
        let (cfg, load_s) = timed(|| fuzz_small(&Overrides::default()));
        let row = measure("fuzz-small", "test", Mode::Many, cfg.expect("fuzz-small parses"), load_s, 2, 3);
        assert_eq!(row.runs, 3);
        assert_eq!(row.wall_s_all.len(), 2);
        assert!(row.events > 0 && row.requests == 24 && row.wall_s > 0.0);
        let table = Table {
            kvsim_version: "test".into(),
            machine: machine(),
            repeat: 2,
            targets: targets(std::slice::from_ref(&row)),
            rows: vec![row],
        };
        let v: serde_json::Value = serde_json::from_str(&to_json(&table)).expect("valid JSON");
        let r = &v["rows"][0];
        for key in ["events", "requests", "runs"] {
            assert!(r[key].as_u64().is_some_and(|x| x > 0), "rows[0].{key}: {}", r[key]);
        }
        for key in ["wall_s", "events_per_s", "requests_per_s", "runs_per_s"] {
            assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "rows[0].{key}: {}", r[key]);
        }
        assert_eq!(r["scenario"], "fuzz-small");
        assert!(r.get("peak_rss_kib").is_some(), "peak memory field present (null only without /proc)");
        if cfg!(target_os = "linux") {
            assert!(r["peak_rss_kib"].as_u64().is_some_and(|k| k > 0));
        }
        assert!(v["machine"]["cpu"].is_string());
        assert!(v["targets"][0]["met"].is_boolean());
        assert!(render(&table).contains("fuzz-small"));
    }

    /// The swarm row runs the campaign's draws with the campaign's per-run checks: the same
    /// events, requests and last trace hash as `run_case_full` on those draws, and a target line.
    #[test]
    fn the_swarm_row_runs_the_campaigns_draws() {
        use kvsim::fuzz::{draw, run_case_full, sampled_for_check, sampled_for_invariants, Space};
        let row = measure_swarm("swarm-0.5.16", "test", "sglang-0.5.16", 1, 200);
        let space = Space::Profile("sglang-0.5.16".into());
        let (mut events, mut requests, mut failing, mut last) = (0, 0, 0, String::new());
        for seed in 0..200 {
            let (w, sigs) =
                run_case_full(draw(seed, &space), sampled_for_check(seed), false, sampled_for_invariants(seed), false);
            events += w.events();
            requests += w.reqs.len() as u64;
            failing += u64::from(!sigs.is_empty());
            last = w.tracer.hash_hex();
        }
        assert!(
            (0..200).any(sampled_for_check) && (0..200).any(sampled_for_invariants),
            "200 seeds sample both checks"
        );
        assert_eq!(
            (row.runs, row.events, row.requests, row.trace_hash.as_str()),
            (200, events, requests, last.as_str())
        );
        assert!(
            row.source.contains(&format!("profile sglang-0.5.16 ({failing} of 200 runs with signatures)")),
            "{}",
            row.source
        );
        let t = targets(std::slice::from_ref(&row));
        assert!(t.iter().any(|t| t.target.contains("pinned-profile swarm")), "{t:?}");
    }

    #[test]
    fn blis_variants_differ_only_in_request_count() {
        let o = Overrides::default();
        let base = blis_10k(&o).expect("blis-fair-10k parses");
        let big = blis_1m(&o).expect("blis-fair-1m builds");
        assert_eq!(base.generator.as_ref().map(|g| g.requests), Some(10_000));
        assert_eq!(big.generator.as_ref().map(|g| g.requests), Some(1_000_000));
        assert_eq!(blis_10m(&o).expect("builds").generator.map(|g| g.requests), Some(10_000_000));
        let mut same = big.clone();
        same.generator.as_mut().expect("generator").requests = 10_000;
        assert_eq!(same, base, "only the request count differs");
        // The 10M memory check runs only when named.
        let default: Vec<&str> = CASES.iter().filter(|c| !c.on_request).map(|c| c.name).collect();
        assert!(default.contains(&"blis-fair-1m") && !default.contains(&"blis-fair-10m"));
    }

    #[test]
    fn issue14_targets_are_judged_on_cpu_and_rss() {
        let row = |name: &str, cpu_s: f64, kib: u64| Row {
            scenario: name.into(),
            source: String::new(),
            runs: 1,
            events: 1,
            requests: 1,
            wall_s: 9.0,
            wall_s_all: vec![9.0],
            cpu_s: Some(cpu_s),
            events_per_s: 0.0,
            requests_per_s: 0.0,
            runs_per_s: 0.0,
            load_s: 0.0,
            peak_rss_kib: Some(kib),
            baseline_rss_kib: None,
            virtual_s: 0.0,
            trace_hash: String::new(),
            ownership_runs_end: 0,
            exit_code: 0,
        };
        let t = issue14_targets(&[row("blis-fair-10k", 0.04, 10_000), row("blis-fair-1m", 6.0, 10_000)]);
        assert_eq!(t.len(), 2);
        assert!(t[0].met, "{t:?}");
        assert!(!t[1].met, "6 s CPU misses the 5 s target: {t:?}");
        let t = issue14_targets(&[row("blis-fair-10k", 0.04, 30_000)]);
        assert!(!t[0].met, "30,000 KiB = 30.7 MB misses 20 MB: {t:?}");
    }
}
