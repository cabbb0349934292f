//! The `kvsim` command: argument parsing, files, threads and progress around the pure `kvsim`
//! library. Every failure prints how to reproduce it; exit statuses:
//! 0 clean, 2 bad input, 3 replay divergence / backend unavailable, 10 safety, 11 liveness,
//! 12 the fast and the reference oracle disagreed (`--check-oracle`; a kvsim bug), 13 inconclusive
//! (the event limit was reached; liveness not judged), 14 a model invariant broke (a kvsim bug).

use clap::{Parser, Subcommand};
use kvsim::config::{self, SimConfig};
use kvsim::report::{exit, Report};
use kvsim::scenario::{Overrides, Scenario, ScenarioError};
use kvsim::tracefile::{Filter, Footer, Header};
use std::io::BufWriter;

mod audit;
mod bench;
mod check;
mod confirm;
mod explore;
mod fuzz;
mod reach;
mod shrink;
mod tracefile;

#[derive(Parser)]
#[command(
    name = "kvsim",
    version = kvsim::VERSION_LINE,
    about = "Deterministic simulator and fuzzer for disaggregated LLM serving: finds cross-tenant KV reads"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunOpts {
    /// Root seed (default: the scenario's `seed`, else 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Engine profile (default: the scenario's `profile`, else sglang-0.5.16).
    #[arg(long)]
    pub profile: Option<String>,
    /// Override a knob: --set page_size=64 (repeatable).
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    pub set: Vec<String>,
    /// Liveness mode: after the faults heal, every request must end within BOUND (500ms, 30s,
    /// 10m) of the heal, its arrival or its own last progress, else the run stops with
    /// `request_hang/after_heal/<what it waits for>[/<why>]`; a quiescent run stops early. Same as
    /// `[faults] liveness_after_heal_ms`.
    #[arg(long, value_name = "BOUND")]
    pub liveness: Option<String>,
}

/// A campaign's saved folders, resolved to one of their files (`trace.jsonl` for `replay` and
/// `confirm`, `scenario.toml` for `run`): a seed folder (`<corpus>/<signature>/seed-N`) to its
/// own, a signature folder (`<corpus>/<signature>`, whose `failure.json` names its first
/// example's seed) to that seed's, and a `failure.json` to its folder's. A corpus root is
/// refused with what to give instead; anything else is returned as given.
pub fn saved_file(input: &str, file: &str) -> Result<String, String> {
    saved_file_of(input, &[file])
}

/// `saved_file` with candidates in order of preference: the first a folder holds is taken
/// (`confirm` takes `shrunk.jsonl` before `trace.jsonl`, the trace the campaign confirmed).
pub fn saved_file_of(input: &str, files: &[&str]) -> Result<String, String> {
    let file = files[0];
    use std::path::Path;
    let p = Path::new(input);
    let dir = if p.is_dir() {
        p
    } else if p.file_name().is_some_and(|n| n == "failure.json") && p.is_file() {
        p.parent().unwrap_or(Path::new("."))
    } else {
        return Ok(input.to_string());
    };
    let shown = |q: &Path| q.to_string_lossy().into_owned();
    if dir.join("campaign.json").is_file() {
        let mut sigs: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.path().join("failure.json").is_file())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        sigs.sort();
        let listed = if sigs.is_empty() {
            "it holds none yet".to_string()
        } else {
            let more = if sigs.len() > 3 { format!(", … ({} in all)", sigs.len()) } else { String::new() };
            format!("it holds {}{more}", sigs.iter().take(3).cloned().collect::<Vec<_>>().join(", "))
        };
        return Err(format!(
            "{input}: a campaign's corpus; give one of its signature folders ({input}/<signature>, {listed}) or seed \
             folders ({input}/<signature>/seed-N)"
        ));
    }
    if let Some(own) = files.iter().map(|f| dir.join(f)).find(|p| p.is_file()) {
        return Ok(shown(&own));
    }
    let own = dir.join(file);
    let fj = dir.join("failure.json");
    if !fj.is_file() {
        // A signature folder that lost its failure.json (which names its first example): its seed
        // folders are named, to give one of (it said only "a folder without scenario.toml").
        let mut seeds: Vec<(u64, String)> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let n = name.strip_prefix("seed-")?.parse().ok()?;
                        e.path().join(file).is_file().then_some((n, name))
                    })
                    .collect()
            })
            .unwrap_or_default();
        seeds.sort();
        if !seeds.is_empty() {
            let names: Vec<String> = seeds.iter().map(|(_, n)| shown(&dir.join(n))).collect();
            return Err(format!(
                "{}: a signature folder without its failure.json (which names its first example); give one of its seed folders: {}",
                shown(dir),
                names.join(", ")
            ));
        }
        return Err(format!("{}: a folder without {file} (nor a campaign's failure.json)", shown(dir)));
    }
    let f = read_failure(&fj)?;
    let seed_dir = format!("seed-{}", f.seed);
    if dir.file_name().is_some_and(|n| *n == *seed_dir) {
        return Err(format!("{}: missing from this saved example", shown(&own)));
    }
    match files.iter().map(|f| dir.join(&seed_dir).join(f)).find(|p| p.is_file()) {
        Some(theirs) => Ok(shown(&theirs)),
        None => Err(format!(
            "{}: names seed {}, but {} is missing",
            shown(&fj),
            f.seed,
            shown(&dir.join(&seed_dir).join(file))
        )),
    }
}

/// A campaign's `failure.json` (a signature folder's or a seed folder's); errors name the file.
pub fn read_failure(path: &std::path::Path) -> Result<kvsim::campaign::Failure, String> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| kvsim::formats::from_json(&t))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `--liveness BOUND`: `500ms`, `30s`, `10m`, `2h` (a bare number is refused), in ms. The
/// message names no flag: callers say which (it read "--liveness: `60`: --liveness 60: no unit").
pub fn parse_bound(s: &str) -> Result<u64, String> {
    let (num, mul, unit) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1, "ms")
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000, "s")
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000, "m")
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3_600_000, "h")
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        // A bare number is refused rather than read in some unit: `[faults]
        // liveness_after_heal_ms` is milliseconds, so "30" would be ambiguous.
        return Err(format!("no unit; write it with one, e.g. {s}s, {s}ms or {s}m"));
    } else {
        // Another unit (`10d`, `1H`): the hint above read "e.g. 10ds, 10dms or 10dm".
        return Err("unknown unit: write a whole number with ms, s, m or h, e.g. 500ms, 30s or 10m".to_string());
    };
    let n: u64 = num.trim().parse().map_err(|_| {
        if num.contains('.') && num.trim().parse::<f64>().is_ok_and(|x| x > 0.0) {
            // A positive duration, but not a whole number of its unit.
            format!("not a whole number of {unit}: write it in a smaller unit (1.5s as 1500ms)")
        } else {
            "expected a positive duration such as 500ms, 30s or 10m".to_string()
        }
    })?;
    match n.checked_mul(mul) {
        Some(0) => Err("expected a positive duration such as 500ms, 30s or 10m".to_string()),
        Some(ms) if ms <= kvsim::scenario::MAX_TIME_MS => Ok(ms),
        _ => Err(format!("too long (at most {} h)", kvsim::scenario::MAX_TIME_MS / 3_600_000)),
    }
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct TraceOpts {
    /// Write the trace as JSON Lines (header, one line per record, footer), streaming.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<String>,
    /// Keep only the records that touch violating requests and the pages they read (runs twice).
    #[arg(long, requires = "trace")]
    pub trace_filter: bool,
    /// Write Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing).
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<String>,
    /// Write an SVG page map: time on x, pages on y, allocations coloured by tenant.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<String>,
    /// Check every read of the fast oracle against the reference oracle (a per-slot shadow of
    /// every pool); exit 12 on any disagreement.
    #[arg(long)]
    pub check_oracle: bool,
}

/// `kvsim run --check`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertyCheck {
    Noninterference,
    /// Every component's invariants after every event (a checked run, about 5x a plain one on the incident, then the plain run); a broken one exits 14.
    Invariants,
}

/// `kvsim run --format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Csv,
}

#[derive(Subcommand)]
enum CorpusCmd {
    /// Merge shard corpora into one.
    Merge {
        #[arg(required = true)]
        dirs: Vec<String>,
        #[arg(long)]
        into: String,
        /// Known-bugs file to triage the merged table against (default: the shipped file of the
        /// campaign's profile; `none` turns triage off). With one, the merge exits like the
        /// campaign: 0 when only known signatures, else 10/11/12.
        #[arg(long)]
        known: Option<String>,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario and report outcomes and violations.
    Run {
        scenario: String,
        #[command(flatten)]
        opts: RunOpts,
        /// Print one JSON object instead of the text report (same as --format json).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Report format on stdout: text, json, or csv (the per-request table).
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Also write the per-request table as CSV to FILE.
        #[arg(long, value_name = "FILE")]
        csv: Option<String>,
        /// Run twice in this process and compare the trace hashes.
        #[arg(long)]
        check_determinism: bool,
        /// Also run a property check: `noninterference` runs the scenario again with a secret
        /// tenant's prompt content (its prefix block ids) replaced and compares what every other
        /// tenant observes (status, TTFT, inter-token times, tokens); a difference is a
        /// `timing_channel` or `status_channel` violation (exit 10). `invariants` checks every
        /// component's invariants after every event; a broken one is a kvsim bug (exit 14).
        #[arg(long, value_enum, value_name = "CHECK")]
        check: Option<PropertyCheck>,
        /// The secret-holding tenant for `--check noninterference` (default: every tenant that
        /// sends prefix blocks in turn, at most 8, one extra run each).
        #[arg(long, value_name = "N", requires = "check")]
        secret_tenant: Option<u32>,
        #[command(flatten)]
        trace: TraceOpts,
        /// Confirm the run's violating reads on a KV backend (as `kvsim confirm` on its trace):
        /// auto (the default when no value is given), cpu or cuda.
        #[arg(long, value_enum, value_name = "BACKEND", num_args = 0..=1, default_missing_value = "auto")]
        confirm: Option<confirm::BackendArg>,
        /// Replay one schedule found by `kvsim explore` (its choice string). Takes the outputs
        /// (--trace, --svg, --perfetto, --csv), --confirm, --check-oracle and
        /// --check-determinism as a seeded run does; a trace records the string, so `kvsim
        /// replay` and `kvsim confirm` follow it too. Not with --check (its extra runs would
        /// meet other choice points).
        #[arg(long, value_name = "STRING", conflicts_with_all = ["check", "secret_tenant"])]
        choices: Option<String>,
    },
    /// Re-run a trace file's configuration and compare it record by record (exit 3 on divergence; on a match, the run's own exit status, e.g. 10 for a leaking run).
    Replay {
        trace: String,
        /// Replay a trace written by another kvsim version.
        #[arg(long)]
        force: bool,
    },
    /// List every engine profile and its knob values.
    Profiles,
    /// Print the JSON Schema of scenario files (shipped as docs/scenario.schema.json), or with
    /// --markdown the format reference (docs/scenario-format.md).
    Schema {
        #[arg(long)]
        markdown: bool,
    },
    /// Write a commented starting scenario: every section present, every value explained.
    New {
        /// The scenario's name; written to NAME.toml unless --out.
        name: String,
        /// Start from a shipped scenario's deployment and workload.
        #[arg(long, value_enum, default_value = "small", conflicts_with = "from_log")]
        like: LikeArg,
        /// Start from the deployment these engine start-up logs describe (as `kvsim audit` reads them).
        #[arg(long = "from-log", value_name = "LOG", num_args = 1..)]
        from_log: Vec<String>,
        #[arg(long)]
        out: Option<String>,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Replay a trace's violating reads on real KV memory with a paged-attention kernel and
    /// measure whose KV reached the output (exit 10 confirmed, 0 none, 3 no backend, 4 GPU failure, 2 bad input).
    Confirm(confirm::ConfirmOpts),
    /// Whole-run benchmarks: one table (events/s, requests/s, peak memory), also as JSON.
    Bench(bench::BenchOpts),
    /// Reduce a failing scenario, trace or saved failure to a minimal scenario with the same signature.
    Shrink(shrink::ShrinkOpts),
    /// Run every scenario's [[expect]] entries and print a pass/fail table (exit 1 on any mismatch).
    Check {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Run each scenario's `buggy` expectation with each mitigation alone: prevented / detected / missed.
    Matrix {
        #[arg(required = true)]
        paths: Vec<String>,
        /// Comma-separated mitigations, in column order (default: every one: kv_checksum, kv_canary,
        /// page_tags, coverage_check, deferred_release, bounded_batches, per_tenant_salt,
        /// public_only, hit_padding).
        #[arg(long)]
        mitigations: Option<String>,
    },
    /// Swarm fuzzing campaign: draw scenarios from seeds, group failures by signature, shrink,
    /// save to a corpus; parallel, sharded and resumable.
    Fuzz(fuzz::FuzzOpts),
    /// Exhaustive small-scope exploration: every schedule of latencies, faults, router picks
    /// and simultaneous-event orders within a bound; a counterexample (exit 10/11) or verified.
    Explore(explore::ExploreOpts),
    /// Which catalogue rows a plain swarm campaign reaches, and at which run: each run with
    /// signatures is attributed to a row when the row's fix alone makes one vanish; stops once
    /// every row the space measures is reached (exit 1 when one is not).
    Reach(reach::ReachOpts),
    /// Corpus tools.
    Corpus {
        #[command(subcommand)]
        cmd: CorpusCmd,
    },
    /// Check real engine start-up logs: each node's KV pool against the context length, and
    /// whether the gap leaks under a profile (exit 0 no gap, 10 leaks, 11 refused, 13 inconclusive, 2 bad input).
    Audit {
        #[arg(required = true)]
        logs: Vec<String>,
        /// Role of each log, in order (or once for all): prefill or decode. A role the log
        /// states is replaced, and the report says so.
        #[arg(long)]
        role: Vec<String>,
        /// Engine profile to simulate the gap under (default: vllm-nixl for vLLM logs; for
        /// sglang the build the logs name: sglang-0.5.22 for 0.5.21 and later, sglang-0.5.16
        /// before it or when no version is given).
        #[arg(long)]
        profile: Option<String>,
        /// Write the generated scenario to FILE (nothing is written without it; an existing
        /// FILE only with --force).
        #[arg(long, value_name = "FILE")]
        scenario_out: Option<String>,
        /// Overwrite the --scenario-out file if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// Reads and resolves a scenario file; errors are printed with file, line and key.
pub fn load(path: &str, opts: &RunOpts) -> Result<SimConfig, ScenarioError> {
    let text = scenario_text(path).map_err(|message| ScenarioError {
        file: path.to_string(),
        line: None,
        key: String::new(),
        message,
    })?;
    let sc = Scenario::parse(path, &text)?;
    let set = kvsim::scenario::parse_set_flags(&opts.set)?;
    let set_names: Vec<String> = set.iter().map(|(k, _)| k.clone()).collect();
    // A file the scenario names by a relative path (`[trace] file`) is the scenario's own
    // folder's: through a symbolic link, the folder of the file it points to (the library joins
    // the path to the link's folder; read from there it was another file, or none).
    let given_dir = std::path::Path::new(path).parent().map(|d| d.to_path_buf()).unwrap_or_default();
    let real_dir = std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.file_type().is_symlink())
        .then(|| std::fs::canonicalize(path).ok().and_then(|p| p.parent().map(|d| d.to_path_buf())))
        .flatten();
    let read = |p: &str| -> std::io::Result<String> {
        match (&real_dir, std::path::Path::new(p).strip_prefix(&given_dir)) {
            (Some(real), Ok(rest)) => read_file(&real.join(rest).to_string_lossy()),
            _ => read_file(p),
        }
    };
    let mut cfg = sc.resolve_with(&Overrides { profile: opts.profile.clone(), seed: opts.seed, set }, Some(&read))?;
    // Not when `--profile` is the file's own (every reproduce line kvsim prints names it): its
    // `[knobs]` then change that profile on purpose.
    let own = sc.spec.profile.as_deref().unwrap_or(kvsim::scenario::DEFAULT_PROFILE);
    if let Some(p) = opts.profile.as_ref().filter(|p| p.as_str() != own) {
        // The file's own `[knobs]` win over `--profile`: say which, so a "does the fixed build fix
        // it?" run does not silently keep the old engine's behaviour.
        let kept: Vec<String> = kvsim::scenario::knobs_differing_from(&cfg, p)
            .into_iter()
            .filter(|(k, _)| !set_names.contains(k))
            .map(|(_, text)| text)
            .collect();
        if !kept.is_empty() {
            let shown = kept.iter().take(6).cloned().collect::<Vec<_>>().join(", ");
            let more = if kept.len() > 6 { format!(", and {} more", kept.len() - 6) } else { String::new() };
            eprintln!(
                "note: {path}'s [knobs] keep {} knob(s) at values --profile {p} does not have (the file's values win): \
                 {shown}{more}",
                kept.len()
            );
        }
    }
    if let Some(b) = &opts.liveness {
        let flag = |message: String| ScenarioError { file: "--liveness".into(), line: None, key: b.clone(), message };
        cfg.faults.liveness_after_heal_ms = Some(parse_bound(b).map_err(flag)?);
        kvsim::check::liveness::validate(&cfg.faults).map_err(|e| flag(e.to_string()))?;
    }
    Ok(cfg)
}

/// File access for scenarios that name other files (trace workloads).
pub fn read_file(path: &str) -> std::io::Result<String> {
    read_text(path)
}

/// The most an input file may hold: scenarios and workload traces are text well under it, and a
/// device (`/dev/zero`) or a stray huge file is refused instead of read until memory runs out.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// An input file's bytes, at most [`MAX_INPUT_BYTES`]: its first 4 KiB are read first and
/// `refuse` may name what they are not (a device or a binary file is refused before the rest is
/// read: `/dev/zero` was read until memory ran out).
fn read_bounded(path: &str, refuse: impl Fn(&[u8]) -> Option<&'static str>) -> std::io::Result<Vec<u8>> {
    // A pipe or a terminal (`cat S | kvsim run /dev/stdin`, `kvsim run <(…)`) can be read once,
    // and kvsim reads an input more than once (its header's notes, then the scenario): the first
    // read is kept for the process (it said "an empty file" the second time), whatever that reader
    // refuses, since the next one may take it (`read_head` refuses nothing) — all of it, unless
    // its head is refused or only NUL bytes (a device: its head is enough to refuse it).
    use std::collections::BTreeMap;
    static STREAMS: std::sync::Mutex<BTreeMap<String, Vec<u8>>> = std::sync::Mutex::new(BTreeMap::new());
    let bytes = if is_stream(path) {
        let mut streams = STREAMS.lock().expect("lock");
        if !streams.contains_key(path) {
            let nul = |h: &[u8]| !h.is_empty() && h.iter().all(|&b| b == 0);
            streams.insert(path.to_string(), read_up_to(path, |h| refuse(h).is_some() || nul(h))?);
        }
        streams[path].clone()
    } else {
        read_up_to(path, |h| refuse(h).is_some())?
    };
    if let Some(what) = refuse(&bytes[..bytes.len().min(HEAD_BYTES)]) {
        return Err(std::io::Error::other(what));
    }
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB: not an input kvsim reads",
            MAX_INPUT_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// What `read_bounded` reads first and judges an input by.
const HEAD_BYTES: usize = 4096;

/// An input's first [`HEAD_BYTES`], then the rest up to one byte past [`MAX_INPUT_BYTES`] unless
/// `stop` says the head is enough.
fn read_up_to(path: &str, stop: impl Fn(&[u8]) -> bool) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path)?.take(MAX_INPUT_BYTES + 1);
    let mut bytes = Vec::new();
    (&mut f).take(HEAD_BYTES as u64).read_to_end(&mut bytes)?;
    if !stop(&bytes) {
        f.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// Whether `path` is a stream (a pipe, a terminal, a device), whose contents no later command can
/// read again: a reproduce line naming it reproduces nothing.
pub fn is_stream(path: &str) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// A stream's bytes (at most [`MAX_INPUT_BYTES`]), read once for the process: a trace piped into
/// `confirm` or `shrink`, which read it more than once (a second read of the pipe gave nothing:
/// "empty trace").
pub fn read_stream(path: &str) -> std::io::Result<Vec<u8>> {
    read_bounded(path, |_| None)
}

/// Says on stderr, when the scenario `path` is a stream, that the reproduce line printed for it
/// names something no later command can read again (`what`: what to reproduce, and how).
pub fn note_if_stream(path: &str, what: &str) {
    if is_stream(path) {
        eprintln!(
            "note: {path} is a stream (a pipe, a terminal or a device), which no later command can read again: save the \
             scenario to a file to reproduce {what}"
        );
    }
}

/// Reads a log's bytes (`audit`, `new --from-log`, which decode them leniently and name gzip and
/// UTF-16 themselves): only a device that gives NUL bytes alone is refused.
pub fn read_log_bytes(path: &str) -> std::io::Result<Vec<u8>> {
    read_bounded(path, |head| {
        (!head.is_empty() && head.iter().all(|&b| b == 0)).then_some("binary data (only NUL bytes), not a log")
    })
}

/// Reads an input file as UTF-8 text, naming what it is when it is not: gzip, UTF-16, binary
/// (`kvsim::sniff`), over [`MAX_INPUT_BYTES`] (it said "stream did not contain valid UTF-8").
pub fn read_text(path: &str) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, kvsim::sniff)?).map_err(|e| {
        // The line too (a byte offset alone sent a user counting bytes in an editor).
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        std::io::Error::other(format!("not UTF-8 text (invalid bytes on line {line}, at byte {at}): save it as UTF-8"))
    })
}

/// A scenario file's text, or why it is none: unreadable, empty, or a trace (JSON Lines) where a
/// scenario is wanted ("missing field `context_len`", "invalid key-value pair" before). Shared by
/// `kvsim run` and the catalogue commands.
pub fn scenario_text(path: &str) -> Result<String, String> {
    let text = read_text(path).map_err(|e| format!("cannot read: {e}"))?;
    if text.trim().is_empty() {
        return Err("an empty file: no scenario in it (`kvsim new FILE` writes a starting one)".into());
    }
    if text.trim_start().starts_with('{') {
        // A trace's first line is its header; any other JSON (a `run --json` report, a
        // checkpoint) is not one, and `kvsim replay` would refuse it too.
        let first = text.trim_start().lines().next().unwrap_or_default();
        let header = kvsim::tracefile::line_kind(first).as_deref() == Some("header");
        return Err(if header {
            "a kvsim trace (JSON Lines), not a scenario: `kvsim replay`, `kvsim confirm` and `kvsim shrink` take a trace"
                .into()
        } else {
            "JSON, not a scenario (a TOML file; `kvsim new FILE` writes a starting one)".into()
        });
    }
    Ok(text)
}

/// `--like`: the library's [`Like`](kvsim::scenario_doc::Like) as a clap choice (the library has no
/// clap dependency).
#[derive(Debug, Clone, Copy)]
struct LikeArg(kvsim::scenario_doc::Like);

impl clap::ValueEnum for LikeArg {
    fn value_variants<'a>() -> &'a [Self] {
        use kvsim::scenario_doc::Like;
        &[LikeArg(Like::Small), LikeArg(Like::Incident), LikeArg(Like::Mooncake)]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()).help(self.0.about()))
    }
}

/// The exact command that reproduces a run.
pub fn reproduce_cmd(path: &str, cfg: &SimConfig, opts: &RunOpts) -> String {
    use kvsim::shell_word as w;
    let mut s = format!("kvsim run {} --seed {} --profile {}", kvsim::shell_path_str(path), cfg.seed, w(&cfg.profile));
    for kv in &opts.set {
        s.push_str(&format!(" --set {}", w(kv)));
    }
    if let Some(b) = &opts.liveness {
        s.push_str(&format!(" --liveness {}", w(b)));
    }
    s
}

/// The command's heap is mimalloc's, not glibc's: a fuzzer-sized run makes about 200 allocations
/// (dhat), and a campaign millions, and glibc's `malloc.c` was about 9% of such a run's
/// instructions. Nothing in the model reads an address (its maps use a fixed hasher), so traces and
/// hashes do not depend on the allocator. Built as mimalloc v2 with transparent huge pages off for
/// the process: with them on (this VM's default, `always`), mimalloc's eagerly committed arena
/// became resident in 2 MiB pages and `blis-fair-10k`'s peak RSS went from 12.8 MB to 31.9 MB,
/// over issue 14's 20 MB (BENCHMARKS.md, "Fifty-sixth session"). The library crate (`kvsim`)
/// and its tests keep the system allocator.
#[global_allocator]
static HEAP: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    restore_sigpipe();
    quiet_output_failures();
    std::process::exit(run());
}

/// A full disk or a closed descriptor under standard output or error (`kvsim run S > /dev/full`)
/// ends kvsim as a file output that cannot be written does: one line and exit 2, not a panic's
/// backtrace and exit 101 (`println!` panics when its write fails; a broken pipe never gets here,
/// see `restore_sigpipe`). What a campaign found is already on disk (atomic checkpoints).
fn quiet_output_failures() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        for (prefix, stream) in
            [("failed printing to stdout: ", "standard output"), ("failed printing to stderr: ", "standard error")]
        {
            if let Some(why) = msg.strip_prefix(prefix) {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "error: cannot write to {stream}: {why}");
                std::process::exit(exit::BAD_INPUT);
            }
        }
        default(info);
    }));
}

/// A reader that stops reading (`kvsim profiles | head`) ends kvsim as it ends any Unix tool,
/// quietly, by SIGPIPE. Rust's runtime ignores the signal, so every `print!` after the reader
/// left would panic instead ("failed printing to stdout: Broken pipe"). Whatever a campaign
/// found is already on disk (atomic checkpoints), so nothing is lost.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: resets one signal's disposition to the default before any thread is spawned or
    // any output written; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { exit::BAD_INPUT } else { exit::CLEAN };
        }
    };
    // A knob `--set` twice takes its last value: said once, whatever reads the flags after.
    let set: &[String] = match &cli.cmd {
        Cmd::Run { opts, .. } => &opts.set,
        Cmd::Explore(o) => &o.opts.set,
        Cmd::Shrink(o) => &o.opts.set,
        Cmd::Fuzz(o) => &o.set,
        _ => &[],
    };
    for note in kvsim::scenario::set_twice(set) {
        eprintln!("note: {note}");
    }
    match cli.cmd {
        Cmd::Explore(o) => explore::run(&o),
        Cmd::Reach(o) => reach::run(&o),
        Cmd::Run {
            scenario,
            opts,
            json,
            format,
            csv,
            check_determinism,
            check,
            secret_tenant,
            trace,
            confirm,
            choices,
        } => {
            let format = if json { Format::Json } else { format };
            if secret_tenant.is_some() && check != Some(PropertyCheck::Noninterference) {
                // clap requires some --check; another check would drop the tenant without a word.
                eprintln!("error: --secret-tenant is the secret-holding tenant of `--check noninterference`, not of `--check invariants`");
                return exit::BAD_INPUT;
            }
            if check == Some(PropertyCheck::Invariants) {
                if let Some(code) = check_invariants(&scenario, &opts) {
                    return code;
                }
            }
            let ni = (check == Some(PropertyCheck::Noninterference)).then_some(secret_tenant);
            // The path given (a `failure.json`, a folder's file) is an input too.
            let given = scenario.clone();
            let scenario = match saved_file(&scenario, "scenario.toml") {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    return exit::BAD_INPUT;
                }
            };
            let outputs = [
                ("--csv", csv.as_deref()),
                ("--trace", trace.trace.as_deref()),
                ("--perfetto", trace.perfetto.as_deref()),
                ("--svg", trace.svg.as_deref()),
            ];
            if let Err(e) = outputs_apart(&scenario, &given, &outputs) {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
            saved_for_a_check(&scenario, check, trace.check_oracle, choices.is_some());
            note_if_stream(&scenario, "this run (`kvsim run FILE`)");
            let run = RunFlags { format, csv: csv.as_deref(), check_determinism, noninterference: ni, confirm };
            cmd_run(&scenario, &opts, &run, &trace, choices.as_deref())
        }
        Cmd::Replay { trace, force } => cmd_replay(&trace, force),
        Cmd::Profiles => cmd_profiles(),
        Cmd::Schema { markdown } => {
            if markdown {
                print!("{}", kvsim::scenario_doc::format_reference_md());
            } else {
                print!("{}", kvsim::scenario_doc::schema_json());
            }
            exit::CLEAN
        }
        Cmd::New { name, like, from_log, out, force } => cmd_new(&name, like.0, &from_log, out.as_deref(), force),
        Cmd::Confirm(o) => confirm::run(&o),
        Cmd::Bench(o) => bench::run(&o),
        Cmd::Shrink(o) => shrink::run(&o),
        Cmd::Check { paths } => check::run_check(&paths),
        Cmd::Matrix { paths, mitigations } => check::run_matrix(&paths, mitigations.as_deref()),
        Cmd::Fuzz(o) => fuzz::run(&o),
        Cmd::Corpus { cmd: CorpusCmd::Merge { dirs, into, known } } => fuzz::merge(&dirs, &into, known.as_deref()),
        Cmd::Audit { logs, role, profile, scenario_out, force } => {
            audit::run(&logs, &role, profile.as_deref(), scenario_out.as_deref(), force)
        }
    }
}

/// Runs `cfg`, writing the trace file when asked. Returns the world and report. Finished requests
/// are folded into their compact records (`kvsim::reqs::Reqs`; memory bounded by what is in
/// flight) only when nothing reads them whole afterwards: not under `noninterference` (`--check
/// noninterference`, with its secret tenant if one was named), which compares every request of
/// two runs, and which the trace's header records; a traced run keeps them too.
fn run_with_trace(
    cfg: &SimConfig,
    repro: &str,
    t: &TraceOpts,
    noninterference: Option<Option<u32>>,
    sched: Schedule,
) -> Result<(kvsim::world::World, Report), String> {
    let fold = noninterference.is_none();
    let pictures = t.perfetto.is_some() || t.svg.is_some();
    let tracer = |sink: Option<Box<dyn kvsim::trace::TraceSink>>| {
        if pictures {
            kvsim::trace::Tracer::collecting(sink)
        } else {
            kvsim::trace::Tracer::new(sink)
        }
    };
    let (w, report) = match &t.trace {
        None => {
            let mut w = world_of(cfg, tracer(None), sched);
            if t.check_oracle {
                w.enable_reference();
            }
            w.fold_finished = fold;
            w.run();
            let r = Report::build(&w, repro.to_string());
            (w, r)
        }
        Some(path) => write_trace(cfg, repro, t, path, &tracer, noninterference, sched)?,
    };
    if let Some(records) = &w.tracer.collected {
        if let Some(p) = &t.perfetto {
            let phases = w.lifecycle.as_deref().unwrap_or_default();
            let v = kvsim::picture::perfetto::perfetto_json(cfg, records, phases, &w.oracle.violations);
            std::fs::write(p, serde_json::to_string(&v).expect("json")).map_err(|e| format!("{p}: {e}"))?;
        }
        if let Some(p) = &t.svg {
            let phases = w.lifecycle.as_deref().unwrap_or_default();
            let cs = sched.map(|c| c.to_string());
            let s = kvsim::picture::svg::page_map_svg(cfg, records, phases, &w.oracle.violations, cs.as_deref());
            std::fs::write(p, s).map_err(|e| format!("{p}: {e}"))?;
        }
    }
    Ok((w, report))
}

pub type MakeTracer<'a> = &'a dyn Fn(Option<Box<dyn kvsim::trace::TraceSink>>) -> kvsim::trace::Tracer;

/// An output file a long command writes at its end, checked before it starts (a missing folder
/// lost a whole exploration at the end): a file name, in a folder that exists and can be written
/// (a probe file is made and removed). `flag` names it in the message.
pub fn output_file_ok(flag: &str, path: &str) -> Result<(), String> {
    use std::path::Path;
    if path.trim().is_empty() {
        return Err(format!("{flag}: an empty path; give a file name"));
    }
    if Path::new(path).is_dir() || path.ends_with('/') {
        return Err(format!("{flag} {path}: a folder; give a file name (e.g. {}/out)", path.trim_end_matches('/')));
    }
    replaceable_file_ok(flag, path)?;
    let dir = Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(format!("{flag} {path}: the folder {} does not exist", dir.display()));
    }
    let probe = dir.join(format!(".kvsim-write-check-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("{flag} {path}: cannot write in {}: {e}", dir.display())),
    }
}

/// An output written whole and renamed into place (an interrupted write leaves the old one): the
/// rename would replace a link or a device there with a regular file (`--html /dev/full` replaced
/// the device), so neither is taken.
pub fn replaceable_file_ok(flag: &str, path: &str) -> Result<(), String> {
    let Ok(m) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if m.file_type().is_symlink() {
        return Err(format!(
            "{flag} {path}: a symbolic link, which writing it would replace with a file; give the path it points to"
        ));
    }
    if !m.is_file() {
        return Err(format!("{flag} {path}: not a regular file (a device or a pipe); give a file name"));
    }
    Ok(())
}

/// The explored schedule a run follows (`run --choices`), or `None` for a seeded run.
pub type Schedule<'a> = Option<&'a kvsim::explore::ChoiceString>;

/// The world of one run: `cfg` recording through `tracer`, following `sched` if given.
pub fn world_of(cfg: &SimConfig, tracer: kvsim::trace::Tracer, sched: Schedule) -> kvsim::world::World {
    let mut w = kvsim::world::World::new(cfg.clone(), tracer);
    if let Some(cs) = sched {
        cs.follow_in(&mut w);
    }
    w
}

/// Runs with the streaming JSON Lines writer: header, records, footer.
fn write_trace(
    cfg: &SimConfig,
    repro: &str,
    t: &TraceOpts,
    path: &str,
    tracer: MakeTracer,
    noninterference: Option<Option<u32>>,
    sched: Schedule,
) -> Result<(kvsim::world::World, Report), String> {
    let filter = if t.trace_filter { Some(filter_for(cfg, sched).1) } else { None };
    let checks = TraceChecks { check_oracle: t.check_oracle, noninterference };
    trace_to_file(cfg, repro, path, filter, tracer, checks, sched)
}

/// The checks a traced run is judged by beyond its own records, which its header records so that
/// a replay (and shrink) judges it the same way: `--check-oracle`, and `--check noninterference`
/// with its secret tenant if one was named.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceChecks {
    pub check_oracle: bool,
    pub noninterference: Option<Option<u32>>,
}

/// `--trace-filter`: runs `cfg` once keeping only its memory log, and returns the filter that
/// keeps the violating requests and the whole history of every page their reads depend on.
pub fn filter_for(cfg: &SimConfig, sched: Schedule) -> (kvsim::world::World, Filter) {
    let (w, mem) = mem_log_of(cfg, sched);
    let filter = Filter::for_run(&w, &mem);
    (w, filter)
}

/// Runs `cfg` keeping only its memory log (in memory).
pub fn mem_log_of(cfg: &SimConfig, sched: Schedule) -> (kvsim::world::World, Vec<(u64, kvsim::trace::MemOp)>) {
    let log = kvsim::tracefile::MemLog::default();
    let mem = log.0.clone();
    let mut w = world_of(cfg, kvsim::trace::Tracer::new(Some(Box::new(log))), sched);
    w.run();
    drop(w.tracer.take_sink());
    let mem = std::mem::take(&mut *mem.borrow_mut());
    (w, mem)
}

/// Runs `cfg` writing its trace to `path` (streaming; bounded memory): header, the records that
/// pass `filter`, then the footer with the counts, the hash and the violations.
pub fn trace_to_file(
    cfg: &SimConfig,
    repro: &str,
    path: &str,
    filter: Option<Filter>,
    tracer: MakeTracer,
    checks: TraceChecks,
    sched: Schedule,
) -> Result<(kvsim::world::World, Report), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("{path}: cannot create: {e}"))?;
    let mut out = BufWriter::new(file);
    let choices = sched.map(|cs| cs.to_string());
    let TraceChecks { check_oracle, noninterference } = checks;
    let noninterference = noninterference.map(|secret_tenant| kvsim::tracefile::NoninterferenceCheck { secret_tenant });
    let header = Header { check_oracle, choices, noninterference, ..Header::new(cfg, filter.clone()) };
    use std::io::Write as _;
    writeln!(out, "{}", serde_json::to_string(&header).expect("header serialises"))
        .map_err(|e| format!("{path}: {e}"))?;
    let (sink, state) = tracefile::JsonlWriter::new(out, filter, cfg.knobs.page_size);
    let mut w = world_of(cfg, tracer(Some(Box::new(sink))), sched);
    if check_oracle {
        w.enable_reference();
    }
    w.run();
    let report = Report::build(&w, repro.to_string());
    drop(w.tracer.take_sink());
    let st = state.borrow();
    if let Some(e) = &st.error {
        return Err(format!("{path}: write failed: {e}"));
    }
    let footer = Footer::of(&w, &report, st.written);
    let mut f = std::fs::OpenOptions::new().append(true).open(path).map_err(|e| format!("{path}: {e}"))?;
    writeln!(f, "{}", serde_json::to_string(&footer).expect("footer serialises"))
        .map_err(|e| format!("{path}: {e}"))?;
    drop(st);
    Ok((w, report))
}

/// `run --check invariants`: the run with every invariant checked after every event. `Some(exit
/// status)` when it cannot go on (bad input, or a broken invariant: a kvsim bug); `None` when every
/// invariant held and the run proper follows.
fn check_invariants(path: &str, opts: &RunOpts) -> Option<i32> {
    let cfg = match load(path, opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Some(exit::BAD_INPUT);
        }
    };
    let sig = match kvsim::fuzz::invariant_check(&cfg) {
        Ok(events) => {
            eprintln!("invariant check passed: every component's invariants held after each of {events} events");
            return None;
        }
        Err(sig) => sig,
    };
    println!(
        "verdict: INVARIANT BROKEN ({sig}; a kvsim bug, the panic message is above) (exit {})",
        exit::INVARIANT_BROKEN
    );
    println!("reproduce: {} --check invariants", reproduce_cmd(path, &cfg, opts));
    Some(exit::INVARIANT_BROKEN)
}

/// A path's identity, whether the file exists yet or not: the canonical path, else the
/// canonical folder and the file's name, else (a folder not made yet: a campaign's corpus) the
/// absolute path with `.` and `..` resolved by name.
fn file_key(p: &std::path::Path) -> Option<std::path::PathBuf> {
    file_key_at(p, 8)
}

/// `file_key`, following at most `links` dangling symbolic links (a write through one creates its
/// target: `--out ck` where `ck` links to the missing `--checkpoint` file wrote over it).
fn file_key_at(p: &std::path::Path, links: u32) -> Option<std::path::PathBuf> {
    if let Ok(c) = p.canonicalize() {
        return Some(c);
    }
    if links > 0 {
        if let Ok(target) = std::fs::read_link(p) {
            let dir = p.parent().unwrap_or(std::path::Path::new(""));
            return file_key_at(&dir.join(target), links - 1);
        }
    }
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if let (Ok(d), Some(name)) = (dir.canonicalize(), p.file_name()) {
        return Some(d.join(name));
    }
    let abs = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().ok()?.join(p) };
    let mut out = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}

/// Whether two paths name the same file (an output that would replace an input: `run --csv`,
/// `shrink --out`, `explore --out`, `audit --scenario-out`, and a log given twice).
pub fn same_file(a: impl AsRef<std::path::Path>, b: impl AsRef<std::path::Path>) -> bool {
    // Two existing paths by device and inode: a hard link is the same file under another name.
    #[cfg(unix)]
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a.as_ref()), std::fs::metadata(b.as_ref())) {
        use std::os::unix::fs::MetadataExt as _;
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    file_key(a.as_ref()).is_some_and(|k| Some(k) == file_key(b.as_ref()))
}

/// A file kvsim saved for a signature only a check shows (its header's `Signature:` line: a
/// campaign's `scenario.toml`, a shrunk case), run without that check, would say "clean": a note
/// names the flag (a timing channel's seed folder ran clean, exit 0, with nothing said).
fn saved_for_a_check(path: &str, check: Option<PropertyCheck>, check_oracle: bool, choices: bool) {
    if let Some(cs) = saved_choices(path).filter(|_| !choices) {
        eprintln!(
            "note: {path} is a counterexample of kvsim explore: its violation was found under its schedule, which this run does not follow (the seeded run may show it too, or not): kvsim run {} --choices {}",
            kvsim::shell_path_str(path),
            kvsim::shell_word(&cs)
        );
    }
    let Some(sig) = saved_signature(path) else { return };
    let sig = sig.as_str();
    let flag = kvsim::campaign::run_flags(sig).trim();
    let given = match flag {
        "--check noninterference" => check == Some(PropertyCheck::Noninterference),
        "--check invariants" => check == Some(PropertyCheck::Invariants),
        "--check-oracle" => check_oracle,
        _ => true,
    };
    if !given {
        eprintln!(
            "note: {path} was saved for `{sig}`, which only {flag} shows; without it the run may say clean: kvsim run {} {flag}",
            kvsim::shell_path_str(path)
        );
    }
}

/// The signature a file kvsim saved names in its header (`# Signature: …`: a campaign's
/// `scenario.toml`, a shrunk case), if any.
pub fn saved_signature(path: &str) -> Option<String> {
    header_field(path, "Signature")
}

/// The choice string a counterexample `kvsim explore --out` wrote names in its header (`# Choice
/// string: …`), if any: its violation shows under that schedule (`run --choices`).
pub fn saved_choices(path: &str) -> Option<String> {
    header_field(path, "Choice string")
}

/// An input's first `n` bytes, without reading the rest (a trace given to `shrink` was read whole
/// for its header). A stream is read through the reader that keeps its bytes for the process
/// (`read_bounded`): what is looked at first is read again after.
pub fn read_head(path: &str, n: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    if is_stream(path) {
        let mut bytes = read_bounded(path, |_| None).ok()?;
        bytes.truncate(n as usize);
        return Some(bytes);
    }
    let mut head = Vec::new();
    std::fs::File::open(path).ok()?.take(n).read_to_end(&mut head).ok()?;
    Some(head)
}

/// `# KEY: value` in a file's leading comment lines (the header kvsim writes on the files it saves).
fn header_field(path: &str, key: &str) -> Option<String> {
    let head = read_head(path, 64 * 1024)?;
    if kvsim::sniff(&head).is_some() {
        return None;
    }
    let text = String::from_utf8_lossy(&head);
    text.lines().take_while(|l| l.starts_with('#')).find_map(|l| {
        let l = l.trim_start_matches('#').trim();
        l.strip_prefix(key).and_then(|r| r.strip_prefix(": ")).map(|s| s.trim().to_string())
    })
}

/// Output files must not be the input nor each other: `kvsim run s.toml --csv s.toml` replaced
/// the scenario with its own CSV, silently. (Other existing files are overwritten, as a CI job
/// writing `--trace t.jsonl` on every run expects.)
/// `as_given` is the path as given when it stood for `input` (a `failure.json`, a folder's file):
/// an input too (`--trace` over it replaced a campaign's `failure.json`).
fn outputs_apart(input: &str, as_given: &str, outputs: &[(&str, Option<&str>)]) -> Result<(), String> {
    let given: Vec<(&str, &str)> = outputs.iter().filter_map(|(f, o)| o.map(|o| (*f, o))).collect();
    if let Some((flag, _)) = given.iter().find(|(_, o)| o.trim().is_empty()) {
        return Err(format!("{flag}: an empty path; give the file to write"));
    }
    // The workload trace the scenario reads (`[trace] file`, beside the scenario) is an input too:
    // `--trace victim.jsonl` replaced it, and the next run failed on its own trace's header.
    let workload = read_text(input)
        .ok()
        .and_then(|text| Scenario::parse(input, &text).ok())
        .and_then(|sc| sc.spec.trace.map(|t| t.file))
        .map(|f| std::path::Path::new(input).parent().unwrap_or(std::path::Path::new("")).join(f));
    for (i, (flag, out)) in given.iter().enumerate() {
        if same_file(out, input) {
            return Err(format!("{flag} {out}: that is the scenario being run; write it elsewhere"));
        }
        if same_file(out, as_given) {
            return Err(format!("{flag} {out}: that is the input being run ({as_given}); write it elsewhere"));
        }
        if let Some(w) = workload.as_ref().filter(|w| same_file(out, w)) {
            return Err(format!(
                "{flag} {out}: that is the workload trace the scenario reads ({}); write it elsewhere",
                w.display()
            ));
        }
        if let Some((other, _)) = given[..i].iter().find(|(_, o)| same_file(o, out)) {
            return Err(format!("{flag} {out}: {other} writes the same file; give each output its own"));
        }
    }
    Ok(())
}

/// `--choices STRING` for `cfg`: parsed, and checked to fit the scenario by one untraced run (a
/// string of another scenario, profile or bound would silently take other choices); the fit is
/// printed to stderr.
fn choices_for(cfg: &SimConfig, text: &str) -> Result<kvsim::explore::ChoiceString, String> {
    let cs: kvsim::explore::ChoiceString = text.parse().map_err(|e| format!("{e}"))?;
    let fit = kvsim::explore::fit(cfg, &cs).map_err(|m| m.to_string())?;
    eprintln!("schedule: {fit}");
    Ok(cs)
}

/// What `kvsim run` does besides the run itself (the report's form, the extra checks).
struct RunFlags<'a> {
    format: Format,
    csv: Option<&'a str>,
    check_determinism: bool,
    /// `--check noninterference`, with its secret tenant if one was named.
    noninterference: Option<Option<u32>>,
    confirm: Option<confirm::BackendArg>,
}

fn cmd_run(path: &str, opts: &RunOpts, flags: &RunFlags, topts: &TraceOpts, choices: Option<&str>) -> i32 {
    let RunFlags { format, csv, check_determinism, noninterference, confirm: confirm_on } = *flags;
    let cfg = match load(path, opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    // The file's `[[expect]]` entries are part of it: one that `kvsim check` refuses (an unknown
    // knob in its `set`, an unknown kind or profile) is bad input here too, not a run that
    // passes over it (`run` checked only their types).
    if let Err(e) = check::expectations_ok(path) {
        eprintln!("error: {e}");
        return exit::BAD_INPUT;
    }
    let mut repro = reproduce_cmd(path, &cfg, opts);
    let sched = match choices.map(|c| choices_for(&cfg, c)).transpose() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: --choices: {e}");
            return exit::BAD_INPUT;
        }
    };
    if let Some(cs) = &sched {
        repro.push_str(&format!(" --choices {}", kvsim::shell_word(&cs.to_string())));
    }
    let sched = sched.as_ref();
    if topts.check_oracle {
        // A disagreement (exit 12) is found only with the reference oracle on.
        repro.push_str(" --check-oracle");
    }
    if let Some(secret) = noninterference {
        if let Some(t) = secret {
            if !kvsim::check::noninterference::content_tenants(&cfg).contains(&t) {
                eprintln!("error: --secret-tenant {t}: tenant {t} sends no prefix blocks (no content to vary)");
                return exit::BAD_INPUT;
            }
        }
        repro.push_str(" --check noninterference");
        if let Some(t) = secret {
            repro.push_str(&format!(" --secret-tenant {t}"));
        }
    }
    let (mut w, mut report) = match run_with_trace(&cfg, &repro, topts, noninterference, sched) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    if let Some(secret) = noninterference {
        let secrets = kvsim::check::noninterference::secrets(&cfg, secret);
        let found = kvsim::check::noninterference::apply(&cfg, &mut w, secret);
        report = Report::build(&w, repro.clone());
        let list: Vec<String> = secrets.iter().map(|t| t.to_string()).collect();
        eprintln!(
            "noninterference check: {} extra run(s), secret tenant(s) {}: {found} observer request(s) saw a difference",
            secrets.len(),
            if list.is_empty() { "none (no tenant sends prefix blocks)".to_string() } else { list.join(", ") }
        );
    }
    if check_determinism {
        let mut again = world_of(&cfg, kvsim::trace::Tracer::new(None), sched);
        again.run();
        let h2 = again.tracer.hash_hex();
        if h2 != report.trace_hash || again.events() != report.events {
            eprintln!(
                "determinism check FAILED: first run {} ({} events), second run {} ({} events)\nreproduce: {repro} --check-determinism",
                report.trace_hash, report.events, h2, again.events()
            );
            return exit::DIVERGED;
        }
        eprintln!("determinism check passed: both runs hashed {} over {} events", h2, again.events());
    }
    if let Some(file) = csv {
        if let Err(e) = std::fs::write(file, kvsim::latency::csv(&report.per_request)) {
            eprintln!("error: {file}: cannot write: {e}");
            return exit::BAD_INPUT;
        }
    }
    // With `--confirm` the replay runs before the report is printed, so that `--json` carries its
    // verdict (`confirmation`) in the one object it prints.
    let confirmed = confirm_on.map(|backend| confirm_run(&cfg, &report, backend, sched));
    match format {
        Format::Json => {
            let mut v = serde_json::to_value(&report).expect("report serialises");
            if let (Some(c), Some(m)) = (&confirmed, v.as_object_mut()) {
                // A confirmation that failed says so in the object too (a CI job that reads only
                // the JSON saw the run's exit code and no confirmation, while the command exited 3).
                let c = match c {
                    Ok(verdict) => serde_json::to_value(verdict).expect("verdict serialises"),
                    Err(e) => serde_json::json!({ "error": e.message, "exit_code": e.exit_code }),
                };
                m.insert("confirmation".into(), c);
            }
            println!("{}", serde_json::to_string_pretty(&v).expect("report serialises"))
        }
        Format::Csv => print!("{}", kvsim::latency::csv(&report.per_request)),
        Format::Text => print!("{}", report.text()),
    }
    match confirmed {
        None => report.exit_code,
        Some(Ok(v)) => {
            // The replay's text: after the text report, or on stderr beside the JSON and CSV
            // forms (whose stdout is the one document).
            let text = confirm_text(&v, report.exit_code);
            if format == Format::Text {
                print!("{text}");
            } else {
                eprint!("{text}");
            }
            report.exit_code
        }
        Some(Err(e)) => {
            eprintln!(
                "error: confirm: {e} (the run's verdict above is exit {}; the command exits {}: the confirmation failed)",
                report.exit_code, e.exit_code
            );
            e.exit_code
        }
    }
}

fn cmd_new(name: &str, like: kvsim::scenario_doc::Like, logs: &[String], out: Option<&str>, force: bool) -> i32 {
    // `kvsim new foo.toml` means the file foo.toml of the scenario foo (it wrote foo.toml.toml).
    let name = name.strip_suffix(".toml").unwrap_or(name);
    if name.trim().is_empty() {
        eprintln!("error: NAME is empty: give the scenario a name (it names the file NAME.toml and the scenario)");
        return exit::BAD_INPUT;
    }
    let path = out.map(str::to_string).unwrap_or_else(|| format!("{name}.toml"));
    // As `audit --scenario-out`: the file written is never one of the logs read, `--force` or not
    // (hard links included).
    if let Some(l) = logs.iter().find(|l| same_file(&path, l)) {
        eprintln!("error: {path}: that is the log {l}; write the scenario elsewhere (--out)");
        return exit::BAD_INPUT;
    }
    // A folder is no file to write, `--force` or not (it suggested `--force`, which then failed).
    if std::path::Path::new(&path).is_dir() {
        eprintln!("error: {path}: a folder; give a file name (--out FILE)");
        return exit::BAD_INPUT;
    }
    if std::path::Path::new(&path).exists() && !force {
        eprintln!("error: {path} exists (use --force to overwrite, or --out another file)");
        return exit::BAD_INPUT;
    }
    let text = if logs.is_empty() {
        kvsim::scenario_doc::starting_scenario(name, like, &kvsim::shell_path_str(&path))
    } else {
        let mut texts = Vec::new();
        for l in logs {
            match read_log_bytes(l) {
                Ok(b) => texts.push((l.clone(), String::from_utf8_lossy(&b).into_owned())),
                Err(e) => {
                    eprintln!("error: {l}: cannot read: {e}");
                    return exit::BAD_INPUT;
                }
            }
        }
        match kvsim::scenario_doc::starting_scenario_from_logs(name, &texts, &kvsim::shell_path_str(&path)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
        }
    };
    if let Err(e) = std::fs::write(&path, &text) {
        eprintln!("error: {path}: cannot write: {e}");
        return exit::BAD_INPUT;
    }
    // A `[trace]` file is read relative to the scenario: say so now if it is not there (the
    // mooncake template names the checkout's data/ folder), not at the first run.
    let missing_trace = kvsim::scenario::Scenario::parse(&path, &text).ok().and_then(|sc| {
        let t = sc.spec.trace.as_ref()?;
        let dir = std::path::Path::new(&path).parent().unwrap_or(std::path::Path::new("."));
        (!dir.join(&t.file).exists()).then(|| t.file.clone())
    });
    match missing_trace {
        Some(f) => println!(
            "wrote {path}; its [trace] file {f} is not there from {path}'s folder: point `trace.file` at your copy (a kvsim checkout's data/mooncake/conversation_trace.jsonl), then run `kvsim run {}`", kvsim::shell_path_str(&path)
        ),
        None => println!(
            "wrote {path}: run it with `kvsim run {}`; the keys are documented in docs/scenario-format.md",
            kvsim::shell_path_str(&path)
        ),
    }
    exit::CLEAN
}

/// `kvsim run --confirm`: replays the run's violating reads (up to 64) on `backend`, like
/// `kvsim confirm` on its trace. `cmd_run` prints the verdict (`confirm_text`; in `--json`, its
/// fields as `confirmation`). The exit code stays the run's, unless the confirmation itself fails
/// (2, 3 or 4).
fn confirm_run(
    cfg: &SimConfig,
    report: &Report,
    backend: confirm::BackendArg,
    sched: Schedule,
) -> Result<confirm::Verdict, kvsim::campaign::ReplayFailure> {
    let (_, mem) = mem_log_of(cfg, sched);
    let log = confirm::Log {
        label: format!("{} (seed {})", cfg.name, cfg.seed),
        format: String::new(),
        config: cfg.clone(),
        seed: cfg.seed,
        mem,
        lines: Vec::new(),
        violations: report.violations.clone(),
        filtered_to: None,
        noninterference: false,
    };
    let o = confirm::ConfirmOpts::defaults(String::new(), backend, 64);
    confirm::confirm_log(&log, &o)
}

/// The text of `run --confirm`'s verdict. The replay's verdict line ends with `kvsim confirm`'s
/// own exit status; here the run's stands (`exit`), and the line says which (it read "(exit 0)"
/// under "(exit 10)").
fn confirm_text(v: &confirm::Verdict, exit: i32) -> String {
    let text: Vec<String> = v
        .text
        .lines()
        .map(|l| match (l.starts_with("verdict:"), l.rfind(" (exit ")) {
            (true, Some(i)) => format!("{} (the run's exit status stands: {exit})", &l[..i]),
            _ => l.to_string(),
        })
        .collect();
    format!("\nconfirmation on KV memory:\n{}\n", text.join("\n"))
}

fn cmd_profiles() -> i32 {
    for p in config::PROFILES {
        println!("{}  — {}", p.name, p.summary);
        let t = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
        for (k, v) in t {
            println!("    {k:<34} {v}");
        }
        println!();
    }
    exit::CLEAN
}

/// Why a trace does not replay: bad input (exit 2), or a divergence (exit 3), with its lines.
pub enum ReplayProblem {
    Bad(String),
    Diverged(Vec<String>),
}

/// A trace that replayed to a match (`replay_trace`).
pub struct Replayed {
    pub world: kvsim::world::World,
    pub report: Report,
    /// How many records matched.
    pub compared: u64,
    pub cfg: SimConfig,
    /// The header's noninterference check, which the run was judged by too (its findings are no
    /// records of the run): `kvsim replay` runs it again; shrink and confirm, which only need the
    /// trace to be its run's, do not.
    pub noninterference: Option<kvsim::tracefile::NoninterferenceCheck>,
}

/// Re-runs a trace file's configuration and compares it record by record, then the footer field
/// by field (`kvsim replay`; `kvsim confirm` and `kvsim shrink` check their input with it).
pub fn replay_trace(path: &str, force: bool) -> Result<Replayed, ReplayProblem> {
    let bad = |m: String| ReplayProblem::Bad(m);
    let reader =
        tracefile::open(path, kvsim::tracefile::ReadOptions { any_version: force }).map_err(|e| bad(e.to_string()))?;
    let cfg = reader.header.config.clone();
    let check_oracle = reader.header.check_oracle;
    let noninterference = reader.header.noninterference;
    let sched = reader.header.schedule().map_err(|e| bad(format!("{path}:1: {e}")))?;
    let (sink, state) = tracefile::Comparer::new(reader);
    let mut w = world_of(&cfg, kvsim::trace::Tracer::new(Some(Box::new(sink))), sched.as_ref());
    if check_oracle {
        w.enable_reference();
    }
    w.run();
    let repro = format!("kvsim replay {path}");
    let report = Report::build(&w, repro);
    if let (Some(cs), Some(c)) = (&sched, &w.chooser) {
        // A string that does not fit ran other choices than it names: not this trace's run.
        c.fits(cs.choices.len()).map_err(|m| bad(format!("{path}:1: header field `choices`: {m}")))?;
    }
    drop(w.tracer.take_sink());
    let mut st = state.borrow_mut();
    if let Some(e) = st.error.take() {
        return Err(bad(e.to_string()));
    }
    if let Some((line, theirs, mine)) = st.divergence.clone() {
        return Err(ReplayProblem::Diverged(vec![
            format!("replay DIVERGED at {path}:{line} (after {} matching records)", st.compared),
            format!("  recorded: {theirs}"),
            format!("  replayed: {mine}"),
        ]));
    }
    let recorded = match st.reader.next_item() {
        Ok(Some(kvsim::tracefile::Item::Footer(f))) => *f,
        Ok(Some(kvsim::tracefile::Item::Record { text, .. })) => {
            return Err(ReplayProblem::Diverged(vec![
                format!(
                    "replay DIVERGED at {path}:{}: the recorded trace has more records than the replay",
                    st.reader.line()
                ),
                format!("  recorded: {text}"),
            ]));
        }
        Ok(None) => {
            return Err(bad(format!(
                "{path}:{}: the file ends without its footer (the trace was cut short)",
                st.reader.line()
            )))
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    if let Err(e) = st.reader.next_item() {
        return Err(bad(e.to_string()));
    }
    let replayed = kvsim::tracefile::Footer::of(&w, &report, st.compared);
    let diffs = recorded.differences(&replayed);
    if !diffs.is_empty() {
        let mut lines = vec![format!(
            "replay DIVERGED at {path}:{} (the footer; all {} records matched)",
            st.reader.line(),
            st.compared
        )];
        lines.extend(diffs.into_iter().map(|d| format!("  {d}")));
        return Err(ReplayProblem::Diverged(lines));
    }
    if recorded.config.is_empty() {
        // Traces written before the digest existed have none; nor has one whose digest was
        // deleted. Either way an edit of the header that changes no record cannot show.
        eprintln!(
            "note: {path}: the footer has no `config` digest (a trace written before kvsim recorded one, or an edited \
             one): the records and the footer matched, but an edit of the header's configuration that changes no \
             record would not show"
        );
    }
    let compared = st.compared;
    drop(st);
    Ok(Replayed { world: w, report, compared, cfg, noninterference })
}

fn cmd_replay(path: &str, force: bool) -> i32 {
    let path = match saved_file(path, "trace.jsonl") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    match replay_trace(&path, force) {
        Ok(Replayed { mut world, report, compared, cfg, noninterference }) => {
            // The run was also judged by the noninterference check: judged again, so the replay
            // exits as the run did (it said "exit 0 as the run" of a run that exited 10).
            let report = match noninterference {
                Some(ni) => {
                    let found = kvsim::check::noninterference::apply(&cfg, &mut world, ni.secret_tenant);
                    eprintln!("noninterference check (the header's): {found} observer request(s) saw a difference");
                    Report::build(&world, report.reproduce.clone())
                }
                None => report,
            };
            println!(
                "replay matches: {} records and the footer compared, trace hash {} (scenario {}, seed {}, profile {}); exit {} as the run",
                compared, report.trace_hash, cfg.name, cfg.seed, cfg.profile, report.exit_code
            );
            report.exit_code
        }
        Err(ReplayProblem::Bad(m)) => {
            eprintln!("error: {m}");
            exit::BAD_INPUT
        }
        Err(ReplayProblem::Diverged(lines)) => {
            for l in lines {
                eprintln!("{l}");
            }
            exit::DIVERGED
        }
    }
}
