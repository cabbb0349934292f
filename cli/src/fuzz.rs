//! `kvsim fuzz`: swarm campaigns over a seed range, in parallel, sharded, resumable. Each new
//! signature is saved to the corpus directory (seed, resolved scenario, trace, shrunk scenario,
//! optional GPU confirmation), written atomically; the campaign's checkpoint keeps the exact
//! signature table for the contiguous prefix of finished seeds, so an interrupted campaign
//! (Ctrl-C, kill -9) resumes without losing or double-counting anything.
//!
//! Determinism: run `k` of a campaign uses seed `seed_start + k`; shard `I/N` takes the runs with
//! `k % N == I`. A signature's first seed is the smallest seed that shows it, so the table for a
//! seed range is the same for any `--jobs` and any split into shards (`kvsim corpus merge`).

use kvsim::campaign::{self as camp_lib, Accounting, Campaign, Entry, ExampleChange, Failure, Merger, RunFacts};
use kvsim::config::SimConfig;
use kvsim::fuzz::guided::{Candidate, Guided};
use kvsim::fuzz::{draw, Space};
use kvsim::report::exit;
use kvsim::tracefile::Filter;
use kvsim::triage::KnownBugs;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

#[derive(clap::Args, Debug, Clone)]
pub struct FuzzOpts {
    /// Fuzz around this scenario (its cluster, pools and knobs kept): each run re-seeds its
    /// workload and faults and, seven runs in eight, changes one to three of its requests, faults
    /// or timings.
    #[arg(long)]
    pub base: Option<String>,
    /// Pin the engine knobs to this profile (deployment and workload still drawn).
    #[arg(long)]
    pub profile: Option<String>,
    /// Number of runs in the campaign's seed range (default 1000 unless --time; at least 1).
    #[arg(long, conflicts_with = "time", value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: Option<u64>,
    /// Run for this long instead: 30s, 10m, 2h.
    #[arg(long)]
    pub time: Option<String>,
    /// Worker threads (1 to 1024; `--threads` is the same).
    #[arg(long, visible_alias = "threads", default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub jobs: usize,
    #[arg(long, default_value = "kvsim-corpus")]
    pub corpus: String,
    #[arg(long, default_value_t = 0)]
    pub seed_start: u64,
    /// This machine's part of the range: I/N (runs with k % N == I).
    #[arg(long)]
    pub shard: Option<String>,
    /// Confirm each new read signature's shrunk trace on a KV backend: auto (CUDA where a driver
    /// is present, else the CPU reference), cpu, cuda or off. A read whose replayed memory does
    /// not hold what the model saw is reported as a model/replay DISAGREEMENT.
    #[arg(long, value_enum, default_value = "auto")]
    pub confirm: super::confirm::ConfirmArg,
    /// Simulation runs each shrink may use (at least 1; `--no-shrink` turns shrinking off).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(1..))]
    pub shrink_budget: u32,
    #[arg(long)]
    pub no_shrink: bool,
    /// Stop as soon as a signature starting with this is found (e.g. cross_tenant_read/stub_commit);
    /// reports how many runs and how long it took. A resume whose checkpoint has it runs nothing.
    #[arg(long)]
    pub until: Option<String>,
    /// Check every run's reads against the reference oracle (by default one run in 64, chosen by
    /// a hash of its seed); a disagreement is signature `oracle_disagreement/<read>`, exit 12.
    #[arg(long)]
    pub check_oracle: bool,
    /// Draw prefix-heavy workloads: explicit requests sharing prefix chains, radix cache on.
    #[arg(long, conflicts_with = "base")]
    pub prefix_heavy: bool,
    /// Draw the hardware faults (`visibility_lag`: a write acknowledged before it is visible)
    /// in a profile's campaign too. Off by default there: the released engine is judged on what
    /// the engine decides; blind campaigns always draw them, a base scenario keeps its own.
    #[arg(long, conflicts_with = "base")]
    pub hardware_faults: bool,
    /// Known-bugs file (`known-bugs/<profile>.toml` format): its signatures are reported as
    /// `known (<row>)` and do not make the exit status non-zero. Default: the shipped file of
    /// `--profile` when there is one; `--known none` turns triage off.
    #[arg(long)]
    pub known: Option<String>,
    /// `noninterference`: also check every run for content channels (a second run per tenant that
    /// sends prefix blocks, with its block ids replaced); findings are `timing_channel/<mechanism>`
    /// and `status_channel/<mechanism>`. `invariants`: check every run's invariants after every
    /// event (without it, one run in 16 does); findings are `invariant_broken/<what>`.
    #[arg(long, value_enum, value_name = "CHECK")]
    pub check: Option<super::PropertyCheck>,
    /// Write the campaign's HTML report here (default: `report.html` in the corpus folder):
    /// signatures, new/known, counts, first seeds, KV replay confirmation (`--confirm`), the new-signature curve, and
    /// each example's reproduce command with links to its scenario, trace, Perfetto and SVG.
    #[arg(long, value_name = "FILE")]
    pub html: Option<String>,
    /// Liveness mode in every run: after the faults heal (60 s into a drawn run), every request
    /// must end within BOUND (500ms, 30s, 10m) of the heal, its arrival or its own last
    /// progress, else `request_hang/after_heal/<what it waits for>[/<why>]`; quiescent runs stop
    /// early. The saved scenarios carry it (`[faults] liveness_after_heal_ms`).
    #[arg(long, value_name = "BOUND")]
    pub liveness: Option<String>,
    /// Pin a knob on every drawn (or base) configuration: --set prefix_cache_scope=per_tenant
    /// (repeatable; checked as `kvsim run --set` checks it). The pins are part of the campaign's
    /// space (a resume with other pins is refused) and the saved scenarios carry them.
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    pub set: Vec<String>,
    /// Coverage-guided: keep a corpus of runs that reached new model coverage (lifecycle
    /// transitions, node queue/pool shapes, violations) and mutate it, libFuzzer-style; between
    /// a quarter and three quarters of the runs (by which mode has been adding coverage) are the
    /// swarm's draws, in the swarm's order. Deterministic for any --jobs (epochs of 64 runs
    /// planned from the corpus as of the epoch's start); the corpus is in the checkpoint, so a
    /// resumed campaign continues it. Each --shard evolves its own corpus.
    #[arg(long)]
    pub guided: bool,
    /// Keep up to N examples per signature: its N smallest distinct runs (fewer requests, then
    /// fewer events, then the smaller seed; runs with the same trace are one example), each saved
    /// and shrunk in `<corpus>/<signature>/seed-<s>/`. Part of the campaign: a resume or merge
    /// with another N is refused.
    #[arg(long, default_value_t = kvsim::campaign::DEFAULT_EXAMPLES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
    pub examples: usize,
}

/// The largest drawn case (in requests) whose pictures a campaign writes when it has no shrunk
/// case; a full-scale base scenario's Perfetto file would be hundreds of megabytes.
const PICTURE_MAX_REQUESTS: usize = 256;

/// Writes the Perfetto JSON and the SVG page map of `cfg` into `dir` (`perfetto.json`,
/// `pagemap.svg`), from one run that keeps its records in memory.
fn write_pictures(cfg: &SimConfig, dir: &Path) -> Result<(), String> {
    let w = kvsim::simulate_collect(cfg.clone(), false);
    let records = w.tracer.collected.as_deref().unwrap_or_default();
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    let phases = w.lifecycle.as_deref().unwrap_or_default();
    let v = kvsim::picture::perfetto::perfetto_json(cfg, records, phases, &w.oracle.violations);
    std::fs::write(dir.join("perfetto.json"), serde_json::to_string(&v).expect("json")).map_err(io)?;
    let svg = kvsim::picture::svg::page_map_svg(cfg, records, phases, &w.oracle.violations, None);
    std::fs::write(dir.join("pagemap.svg"), svg).map_err(io)
}

/// The number of requests a configuration runs (explicit ones, or the generator's).
pub(crate) fn case_requests(cfg: &SimConfig) -> usize {
    cfg.requests.len() + cfg.generator.as_ref().map_or(0, |g| g.requests as usize)
}

/// The path of `to` relative to the folder `from` (both made absolute first), for links in the
/// HTML report; `to` as given when there is no common root.
fn relative_to(from: &Path, to: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (f, t) = (abs(from), abs(to));
    let fc: Vec<_> = f.components().collect();
    let tc: Vec<_> = t.components().collect();
    let common = fc.iter().zip(&tc).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return to.display().to_string();
    }
    let mut parts: Vec<String> = vec!["..".to_string(); fc.len() - common];
    parts.extend(tc[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    parts.join("/")
}

/// Writes the campaign's HTML report to `path` (links relative to its folder).
/// `--html` names a file that exists: only an earlier campaign report is replaced (a nightly job
/// writes to the same path every night). Anything else is kept and the path refused: the report
/// replaced another corpus's `campaign.json` (that campaign could no longer resume) and the
/// shipped known-bugs file left at its default.
fn report_replaceable(h: &str) -> Result<(), String> {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(h) else { return Ok(()) };
    let mut head = Vec::new();
    let _ = f.take(512).read_to_end(&mut head);
    if camp_lib::html::is_report(&head) {
        return Ok(());
    }
    Err(format!(
        "--html {h}: an existing file that is not a kvsim campaign report; an earlier report is replaced, \
         anything else is kept: remove it or name another file"
    ))
}

pub fn write_report(
    path: &Path,
    corpus: &Path,
    corpus_name: &str,
    camp: &Campaign,
    known: Option<&KnownBugs>,
    exit: i32,
) -> Result<(), String> {
    let failures = saved_examples(corpus);
    let page_dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut examples = BTreeMap::new();
    for (sig, fs) in &failures {
        let mut shown = Vec::new();
        for f in fs {
            let folder = corpus.join(slug(sig)).join(format!("seed-{}", f.seed));
            let mut files: Vec<String> = std::fs::read_dir(&folder)
                .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            files.sort();
            let folder_href = format!("{}/", relative_to(page_dir, &folder));
            shown.push(camp_lib::html::Example { failure: f, folder_href, files });
        }
        examples.insert(sig.clone(), shown);
    }
    let page = camp_lib::html::render(&camp_lib::html::Report { corpus: corpus_name, camp, examples, known, exit });
    write_atomic(path, page.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
}

/// The base scenario of a `--base` campaign's space, if it is one.
fn base_config(space: &Space) -> Option<&SimConfig> {
    match space {
        Space::Base(c) => Some(c),
        Space::Prefix(inner) | Space::Hardware(inner) => base_config(inner),
        Space::Blind | Space::Profile(_) => None,
    }
}

/// The known-bugs file a campaign uses: `--known FILE`, `--known none`, or (by default) the
/// shipped file of `--profile` when it has one. A file for another profile than `--profile` is
/// refused: its rows say what that engine has, not this one.
fn load_known(o: &FuzzOpts) -> Result<Option<KnownBugs>, String> {
    let k = match o.known.as_deref() {
        Some("none") => return Ok(None),
        Some(path) => {
            // Bounded and checked as every input is (`--known /dev/zero` read until memory ran out).
            let text = super::read_text(path).map_err(|e| format!("--known {path}: {e}"))?;
            KnownBugs::parse(path, &text).map_err(|e| e.to_string())?
        }
        None => match o.profile.as_deref().and_then(KnownBugs::shipped) {
            Some(k) => k,
            None => return Ok(None),
        },
    };
    camp_lib::check_known_profile(&k, o.profile.as_deref()).map_err(|e| e.to_string())?;
    Ok(Some(k))
}

pub use camp_lib::slug;

fn parse_time(s: &str) -> Result<std::time::Duration, String> {
    let (num, mul) = match s.chars().last() {
        Some('s') => (&s[..s.len() - 1], 1),
        Some('m') => (&s[..s.len() - 1], 60),
        Some('h') => (&s[..s.len() - 1], 3600),
        // No unit: refused, as `--liveness` refuses one (a user meaning 5 minutes got 5 seconds).
        _ if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(format!("--time {s}: no unit; write it with one, e.g. {s}s, {s}m or {s}h"))
        }
        _ => (s, 1),
    };
    let bad = || format!("--time {s}: expected e.g. 30s, 10m or 2h, more than 0 and at most 10000h");
    let n: u64 = num.parse().map_err(|_| bad())?;
    // 0 is refused as `--runs 0` is: a campaign of no time ran a varying handful of runs.
    let secs = n.checked_mul(mul).filter(|&x| x > 0 && x <= 10_000 * 3600).ok_or_else(bad)?;
    Ok(std::time::Duration::from_secs(secs))
}

fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("--shard {s}: expected I/N with 0 <= I < N");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (i.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// `v` as pretty JSON, written atomically (`write_atomic`); an error names the file.
fn write_json(path: &Path, v: &impl serde::Serialize) -> Result<(), String> {
    write_atomic(path, serde_json::to_string_pretty(v).expect("json").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `bytes` to `path` atomically (a temporary file in the same folder, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        // No scratch left beside a file that could not be written (`--html` naming a folder
        // left `adir.tmp21353` in the working folder).
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Confirms a saved failure's violating reads on `backend` when its signature is a read kind.
/// A read whose replayed memory does not hold what the model saw is a DISAGREEMENT between model
/// and replay: reported, never dropped. A cross-tenant read whose foreign KV is in the replayed
/// memory but under the leak threshold agrees with the model (not confirmed, not a disagreement).
fn confirm_signature(sig: &str, trace: &Path, backend: super::confirm::BackendArg) -> Option<String> {
    if !camp_lib::is_confirmable(sig) {
        return None;
    }
    // `kvsim confirm`'s own default read count, so that `kvsim confirm <seed folder>` (which
    // reads the same trace) gives the same verdict.
    let o = super::confirm::ConfirmOpts::defaults(
        trace.to_string_lossy().into_owned(),
        backend,
        super::confirm::DEFAULT_MAX_READS,
    );
    let replay = super::confirm::confirm(&o).map(|v| camp_lib::ReplayCounts {
        reads: v.reads as u64,
        confirmed: v.confirmed as u64,
        disagreements: v.disagreements as u64,
        backend: v.backend,
    });
    Some(camp_lib::confirm_summary(sig, replay))
}

/// A saved example's trace: `check` (a disagreement: the reference oracle on), and a channel's
/// (`channel`) with the noninterference check in its header, so that its replay and shrink judge
/// it as the campaign did.
fn write_trace_file(
    cfg: &SimConfig,
    path: &Path,
    filter: Option<Filter>,
    check: bool,
    channel: bool,
) -> Result<(), String> {
    let path = path.to_string_lossy();
    let checks = super::TraceChecks { check_oracle: check, noninterference: channel.then_some(None) };
    super::trace_to_file(cfg, "", &path, filter, &kvsim::trace::Tracer::new, checks, None).map(|_| ())
}

/// Work for the shrink worker, in the order the accounting decided it.
enum Job {
    /// Complete example `seed` of `sig` from its saved scenario: trace, shrunk case, pictures,
    /// confirmation, then its `failure.json` (the commit point).
    Save { sig: String, seed: u64 },
    /// Example `seed` of `sig` was pushed out by smaller ones: remove its folder.
    Remove { sig: String, seed: u64 },
}

/// The examples a checkpoint keeps: signature → seed → (requests, events).
type Wanted = BTreeMap<String, BTreeMap<u64, (u64, u64)>>;

struct Ctx {
    corpus: PathBuf,
    space: Space,
    space_name: String,
    opts: FuzzOpts,
    /// The examples the checkpoint keeps: signature → seed → (requests, events). A save job for
    /// an example pushed out meanwhile is skipped.
    wanted: Mutex<Wanted>,
    /// Jobs sent to the shrink worker and not yet done (for the progress line).
    jobs_left: AtomicU64,
}

/// The folder of example `seed` of `sig`.
fn seed_dir(corpus: &Path, sig: &str, seed: u64) -> PathBuf {
    corpus.join(slug(sig)).join(format!("seed-{seed}"))
}

/// The examples a checkpoint keeps, as the shrink worker looks them up.
fn wanted_of(camp: &Campaign) -> Wanted {
    camp.examples
        .iter()
        .map(|(sig, l)| (sig.clone(), l.iter().map(|e| (e.seed, (e.requests, e.events))).collect()))
        .collect()
}

impl Ctx {
    /// Writes a new example's drawn scenario (by the accounting thread, before the checkpoint
    /// lists the example: every example a checkpoint lists has its scenario on disk, so a resumed
    /// campaign can finish what was pending).
    fn write_scenario(&self, sig: &str, seed: u64, cfg: &SimConfig) -> Result<(), String> {
        let dir = seed_dir(&self.corpus, sig, seed);
        let io = |e: std::io::Error| format!("{}: {e}", dir.display());
        std::fs::create_dir_all(&dir).map_err(io)?;
        let header = format!(
            "Found by kvsim fuzz (space {}), seed {seed}.\nSignature: {sig}\nReproduce: kvsim run <this file>{}",
            self.space_name,
            kvsim::campaign::run_flags(sig)
        );
        write_atomic(&dir.join("scenario.toml"), kvsim::scenario::to_toml_against_profile(cfg, &header).as_bytes())
            .map_err(io)
    }

    /// Completes an example (the shrink worker): everything is made from its saved scenario, so
    /// the files are the same whichever run, job count or resume wrote it.
    fn complete(&self, sig: &str, seed: u64) -> Result<(), String> {
        let Some((requests, events)) = self.wanted.lock().expect("lock").get(sig).and_then(|m| m.get(&seed)).copied()
        else {
            return Ok(());
        };
        let dir = seed_dir(&self.corpus, sig, seed);
        let io = |e: std::io::Error| format!("{}: {e}", dir.display());
        let scenario = dir.join("scenario.toml");
        let cfg = super::load(&scenario.to_string_lossy(), &super::RunOpts::default()).map_err(|e| e.to_string())?;
        let check = kvsim::fuzz::is_disagreement(sig);
        // A disagreement's trace is kept whole: the bug is in the oracle, not in given requests.
        let filter = (!check).then(|| super::filter_for(&cfg, None).1);
        let channel = kvsim::fuzz::is_channel(sig);
        write_trace_file(&cfg, &dir.join("trace.jsonl"), filter, check, channel)?;
        let mut failure = Failure::new(sig, seed, &self.space_name, &dir);
        failure.requests = requests;
        failure.events = events;
        let mut shrunk_cfg = None;
        if !self.opts.no_shrink {
            // The campaign's `--set` pins are part of its space: its shrunk cases keep them.
            let pinned = kvsim::shrink::pinned_knobs(&self.space_name);
            let (text, s) = super::shrink::shrink_to_text(
                &cfg,
                sig,
                self.opts.shrink_budget,
                &format!("fuzz seed {seed}"),
                &pinned,
            );
            std::fs::write(dir.join("shrunk.toml"), text).map_err(io)?;
            // Named as `shrunk.toml` names it (the trace's header and page map said the drawn
            // scenario's name).
            let named = SimConfig { name: format!("{}-shrunk", cfg.name), ..s.cfg.clone() };
            write_trace_file(&named, &dir.join("shrunk.jsonl"), None, check, channel)?;
            failure.shrunk = Some(Failure::shrunk_command(sig, &dir));
            failure.shrunk_requests = Some(s.cfg.requests.len());
            // Knobs the shrink budget left unjudged are listed apart, not as necessary.
            failure.necessary_knobs = s.necessary_knobs;
            failure.unjudged_knobs = s.unjudged_knobs;
            shrunk_cfg = Some(named);
        }
        // Pictures of the case a person runs first: the shrunk one, else the drawn one if small.
        if let Some(case) = shrunk_cfg.as_ref().or((case_requests(&cfg) <= PICTURE_MAX_REQUESTS).then_some(&cfg)) {
            write_pictures(case, &dir)?;
        }
        if let Some(backend) = self.opts.confirm.0 {
            let trace = if dir.join("shrunk.jsonl").exists() { "shrunk.jsonl" } else { "trace.jsonl" };
            failure.confirm = confirm_signature(sig, &dir.join(trace), backend);
        }
        write_atomic(&dir.join("failure.json"), serde_json::to_string_pretty(&failure).expect("json").as_bytes())
            .map_err(io)?;
        write_best(&self.corpus, sig)
    }

    /// Queues the shrink worker's jobs for the accounting's example changes: an added example's
    /// scenario is written now (from `cfgs`, the finished runs' configurations) and saved, shrunk
    /// and pictured by the worker; a removed one is deleted by it, but only once a checkpoint
    /// that no longer lists it is on disk (`removals`, sent by `send_removals`): the checkpoint
    /// lags the accounting, and an interrupted campaign's checkpoint must not list an example
    /// whose folder is gone. Returns the write errors.
    fn queue_changes(
        &self,
        acc: &mut Accounting,
        cfgs: &BTreeMap<u64, SimConfig>,
        job_tx: &mpsc::Sender<Job>,
        removals: &mut Vec<Job>,
    ) -> Vec<String> {
        let changes = acc.take_changes();
        if !changes.is_empty() {
            *self.wanted.lock().expect("lock") = wanted_of(&acc.camp);
        }
        let mut errors = Vec::new();
        for c in changes {
            let job = match c {
                ExampleChange::Added { sig, seed } => {
                    let k = seed.wrapping_sub(self.opts.seed_start);
                    let keep = acc.camp.examples.get(&sig).is_some_and(|l| l.iter().any(|e| e.seed == seed));
                    let Some(cfg) = cfgs.get(&k).filter(|_| keep) else { continue };
                    if let Err(e) = self.write_scenario(&sig, seed, cfg) {
                        errors.push(e);
                        continue;
                    }
                    Job::Save { sig, seed }
                }
                ExampleChange::Removed { sig, seed } => {
                    removals.push(Job::Remove { sig, seed });
                    continue;
                }
            };
            self.jobs_left.fetch_add(1, Ordering::Relaxed);
            let _ = job_tx.send(job);
        }
        errors
    }

    /// Hands the worker the removals a checkpoint just written no longer lists.
    fn send_removals(&self, removals: &mut Vec<Job>, job_tx: &mpsc::Sender<Job>) {
        for job in removals.drain(..) {
            self.jobs_left.fetch_add(1, Ordering::Relaxed);
            let _ = job_tx.send(job);
        }
    }

    /// Does one job of the shrink worker.
    fn work(&self, job: Job) {
        let done = match &job {
            Job::Save { sig, seed } => {
                self.complete(sig, *seed).map_err(|e| format!("could not save {sig} (seed {seed}): {e}"))
            }
            Job::Remove { sig, seed } => {
                let _ = std::fs::remove_dir_all(seed_dir(&self.corpus, sig, *seed));
                write_best(&self.corpus, sig).map_err(|e| format!("{sig}: {e}"))
            }
        };
        if let Err(e) = done {
            eprintln!("warning: {e}");
        }
        self.jobs_left.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Points `<corpus>/<slug>/failure.json` at the signature's smallest saved example (the one
/// `kvsim shrink <signature folder>` and older readers use), or removes it when none is saved.
fn write_best(corpus: &Path, sig: &str) -> Result<(), String> {
    let dir = corpus.join(slug(sig));
    let best = signature_examples(&dir).into_iter().next();
    let path = dir.join("failure.json");
    match best {
        Some(f) => write_json(&path, &f),
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("{}: {e}", path.display())),
            _ => Ok(()),
        },
    }
}

/// The committed examples in a signature folder (`seed-<s>/failure.json`), smallest first, their
/// reproduce commands pointing into `dir` as given (a corpus copied, moved or resumed from
/// another directory keeps the commands it was saved with in its files).
fn signature_examples(dir: &Path) -> Vec<Failure> {
    let mut out: Vec<Failure> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
                .filter_map(|e| std::fs::read_to_string(e.path().join("failure.json")).ok())
                .filter_map(|t| serde_json::from_str::<Failure>(&t).ok())
                .map(|mut f| {
                    f.relocate(dir);
                    f
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(Failure::measure);
    out
}

/// Every signature's committed examples in a corpus, smallest first.
pub fn saved_examples(corpus: &Path) -> BTreeMap<String, Vec<Failure>> {
    let mut out = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(corpus) {
        for e in rd.flatten() {
            let ex = signature_examples(&e.path());
            if let Some(f) = ex.first() {
                out.insert(f.signature.clone(), ex);
            }
        }
    }
    out
}

/// Removes what a killed campaign left behind: scratch files and folders, and example folders
/// the checkpoint `camp` does not list (an example of a run counted after the last checkpoint,
/// or one pushed out and not yet removed); a signature folder left with no example goes too.
/// Listed examples are kept, committed or not (a pending one is completed on resume). Returns
/// what was removed, for the log line.
pub fn clean_corpus(corpus: &Path, camp: &Campaign) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let mut remove = |p: PathBuf| {
        let ok = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        if ok.is_ok() {
            removed.push(p);
        }
    };
    let kept: BTreeMap<String, BTreeSet<String>> = camp
        .examples
        .iter()
        .map(|(sig, l)| (slug(sig), l.iter().map(|e| format!("seed-{}", e.seed)).collect()))
        .collect();
    let Ok(rd) = std::fs::read_dir(corpus) else { return removed };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if camp_lib::is_scratch(&name) {
            remove(path);
            continue;
        }
        if !path.is_dir() {
            continue;
        }
        let seeds = kept.get(&name);
        let Ok(inner) = std::fs::read_dir(&path) else { continue };
        let mut stale_sig = false;
        for e in inner.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if camp_lib::is_scratch(&n) || (n.starts_with("seed-") && !seeds.is_some_and(|s| s.contains(&n))) {
                remove(e.path());
            } else if n == "failure.json" && seeds.is_none() {
                stale_sig = true;
            }
        }
        if stale_sig {
            remove(path.join("failure.json"));
            if std::fs::read_dir(&path).is_ok_and(|mut rd| rd.next().is_none()) {
                let _ = std::fs::remove_dir(&path);
            }
        }
    }
    removed
}

/// The campaign's `--set` pins, checked up front (a pinned configuration must still be one a
/// scenario file resolves to), and its space name with them: a pinned campaign's table is
/// another campaign's. Deployment knobs are drawn with the pools they must divide, so only a
/// `--base` campaign may pin them.
fn pin_knobs(set: &[String], space: &Space, name: String) -> Result<(kvsim::scenario::KnobPins, String), String> {
    let pins = kvsim::scenario::KnobPins::parse(set).map_err(|e| e.to_string())?;
    if pins.is_empty() {
        return Ok((pins, name));
    }
    if !matches!(space, Space::Base(_)) {
        if let Some(k) = pins.names().find(|k| kvsim::fuzz::table::DEPLOYMENT_KNOBS.contains(k)) {
            return Err(format!(
                "--set {k}: drawn with the deployment (pools are multiples of it); pin it with --base"
            ));
        }
    }
    let mut first = draw(0, space);
    first.knobs = pins.apply(&first.knobs);
    // Said as what it is: the pins make the base (or a drawn configuration) invalid. It read
    // "--set (header configuration): …", the wording for a trace's header.
    kvsim::scenario::validate_config(&first, "--set").map_err(|e| {
        let what = if matches!(space, Space::Base(_)) { "the --base scenario" } else { "a drawn configuration" };
        format!("--set {}: with it, {what} is invalid: `{}`: {}", pins.label(), e.key, e.message)
    })?;
    let name = format!("{name}+set:{}", pins.label());
    Ok((pins, name))
}

/// The guided corpus run `k` is planned from: the snapshot once it holds every epoch before
/// `k`'s (`Ok(None)` for a swarm campaign; `Err` when the campaign stops while waiting).
fn wait_for_epoch(
    snapshot: &Mutex<Option<std::sync::Arc<Guided>>>,
    epoch_done: &std::sync::Condvar,
    stop: &AtomicBool,
    k: u64,
    shard: (u64, u64),
) -> Result<Option<std::sync::Arc<Guided>>, ()> {
    let epoch = Guided::epoch_of(k, shard);
    let mut g = snapshot.lock().expect("lock");
    loop {
        match &*g {
            None => return Ok(None),
            Some(s) if s.epochs_folded >= epoch => return Ok(Some(s.clone())),
            Some(_) => {}
        }
        if stop.load(Ordering::Relaxed) {
            return Err(());
        }
        g = epoch_done.wait_timeout(g, std::time::Duration::from_millis(50)).expect("lock").0;
    }
}

pub fn run(o: &FuzzOpts) -> i32 {
    match campaign(o) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            exit::BAD_INPUT
        }
    }
}

#[allow(clippy::disallowed_methods)] // the campaign runner measures wall time (progress, --time); the model never does
fn campaign(o: &FuzzOpts) -> Result<i32, String> {
    let shard = o.shard.as_deref().map(parse_shard).transpose()?.unwrap_or((0, 1));
    let deadline = o.time.as_deref().map(parse_time).transpose()?;
    let mut known = load_known(o)?;
    let (space, space_name, liveness, pins) = campaign_space(o)?;
    // A base scenario's campaign runs the base's profile: a known-bugs file for another is refused
    // as it is for `--profile` (its rows would triage another engine's signatures), and without
    // `--known` that profile's shipped file triages it, as `--profile` would (a base naming
    // `profile = "sglang-0.5.22"` exited 10 on known rows unless `--profile` repeated it).
    let base_profile = base_config(&space).map(|b| b.profile.clone());
    if let Some(p) = &base_profile {
        match &known {
            Some(k) => camp_lib::check_known_profile(k, Some(p)).map_err(|e| e.to_string())?,
            None if o.known.is_none() => known = KnownBugs::shipped(p),
            None => {}
        }
    }
    // A GPU backend asked for by name is there before any run (as `kvsim confirm`: exit 3), not
    // a "confirm failed" in every row of the table, which a resume would keep.
    if let Some(b) = o.confirm.0.filter(|b| b.0 == kvsim_gpu::BackendChoice::Cuda) {
        if let Err(e) = kvsim_gpu::select(b.0) {
            eprintln!("error: --confirm cuda: {e}; give --confirm cpu (or auto) to confirm on the CPU reference");
            return Ok(exit::DIVERGED);
        }
    }
    // Seeds past the last u64 wrapped to 0 silently ("seeds 18446744073709551615..9"): a
    // campaign has the runs `k < seed_room` (seed `seed_start + k`), a `--time` one stops there.
    let seed_room = (u64::MAX - o.seed_start).saturating_add(1);
    if deadline.is_none() {
        let n = o.runs.unwrap_or(1000);
        if n > seed_room {
            return Err(format!(
                "--seed-start {} with --runs {n}: the seeds would pass {} (the largest); start lower",
                o.seed_start,
                u64::MAX
            ));
        }
    }
    if let Some(u) = o.until.as_deref() {
        // The signature's kind must be one a run can name (a typo ran the whole campaign and
        // said "not found").
        let kind = u.split('/').next().unwrap_or("");
        let mut names: Vec<&str> = kvsim::check::oracle::ALL_KINDS.iter().map(|k| k.name()).collect();
        names.extend([kvsim::fuzz::EVENT_LIMIT, kvsim::fuzz::INVARIANT_BROKEN, "oracle_disagreement"]);
        let fits: Vec<&str> =
            names.iter().copied().filter(|n| if u.contains('/') { *n == kind } else { n.starts_with(kind) }).collect();
        // A channel is seen only by the noninterference check: without it the campaign ran to its
        // end and said "not found".
        if !fits.is_empty()
            && fits.iter().all(|n| n.ends_with("_channel"))
            && o.check != Some(super::PropertyCheck::Noninterference)
        {
            return Err(format!(
                "--until {u}: a channel is seen only by the noninterference check: add --check noninterference"
            ));
        }
        if kind.is_empty() || fits.is_empty() {
            let hint = kvsim::scenario::did_you_mean(kind, names.iter().copied())
                .map(|m| format!("did you mean `{m}`? "))
                .unwrap_or_default();
            return Err(format!(
                "--until {u}: no signature starts with `{kind}`: {hint}(a signature is KIND/mechanism…, KIND one of {})",
                names.join(", ")
            ));
        }
        // Past the kind, the mechanism too (`kvsim::fuzz::mechanisms`: a typo there also ran the
        // whole campaign and said "not found").
        if let Some(k) = kvsim::check::Kind::parse(kind).filter(|_| u.contains('/')) {
            let sigs: Vec<String> = kvsim::fuzz::mechanisms(k).iter().map(|m| format!("{kind}/{m}")).collect();
            if !sigs.iter().any(|s| s.starts_with(u)) {
                let hint = kvsim::scenario::did_you_mean(u, sigs.iter().map(String::as_str))
                    .map(|m| format!("did you mean `{m}`? "))
                    .unwrap_or_default();
                return Err(format!(
                    "--until {u}: no signature starts with it: {hint}(those of {kind}: {})",
                    sigs.join(", ")
                ));
            }
        }
        // Signatures this campaign's flags cannot produce (each ran the whole campaign and said
        // "not found"): a mechanism of `event_limit`, which has none; a hang after the faults heal
        // without `--liveness`; a hardware-only fault in a profile campaign without
        // `--hardware-faults` (a `--base` scenario may set either itself).
        let parts: Vec<&str> = u.split('/').collect();
        let needs = if kind == kvsim::fuzz::EVENT_LIMIT && parts.len() > 1 {
            Some(format!("`{}` names no mechanism: --until {}", kvsim::fuzz::EVENT_LIMIT, kvsim::fuzz::EVENT_LIMIT))
        } else if o.base.is_none() && parts.get(1) == Some(&"after_heal") && o.liveness.is_none() {
            Some("a hang after the faults heal is seen only in liveness mode: add --liveness BOUND".to_string())
        } else if o.base.is_none()
            && o.profile.is_some()
            && !o.hardware_faults
            && parts.iter().skip(1).any(|p| *p == "visibility_lag")
        {
            Some(
                "a profile campaign draws the hardware-only fault `visibility_lag` only with --hardware-faults"
                    .to_string(),
            )
        } else {
            None
        };
        if let Some(why) = needs {
            return Err(format!("--until {u}: this campaign never shows it: {why}"));
        }
    }
    if let Some(h) = o.html.as_deref() {
        // Checked before the campaign, not after it (the report is written at the end, and a
        // report that cannot be written was a warning after the whole campaign, exit 0).
        if h.trim().is_empty() {
            return Err("--html: an empty path; give the report's file name".to_string());
        }
        let dir = Path::new(h).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if Path::new(h).is_dir() || h.ends_with('/') || super::same_file(h, &o.corpus) {
            return Err(format!(
                "--html {h}: a folder; give the report's file name (e.g. {}/report.html)",
                h.trim_end_matches('/')
            ));
        }
        // The page replaces what is there: never an input of the campaign (the known-bugs file,
        // the base scenario) or a file the campaign keeps (its checkpoint and lock, its examples'
        // folders): `--html CORPUS/campaign.json` lost the whole campaign at the next resume.
        for (flag, input) in [("--known", o.known.as_deref()), ("--base", o.base.as_deref())] {
            if let Some(i) = input.filter(|i| super::same_file(h, i)) {
                return Err(format!(
                    "--html {h}: that is the campaign's {flag} file ({i}); write the report elsewhere"
                ));
            }
        }
        let below_corpus = std::iter::successors(dir.parent(), |d| d.parent().filter(|p| !p.as_os_str().is_empty()))
            .any(|d| super::same_file(d, &o.corpus));
        let name = Path::new(h).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let owned = name == "campaign.json" || name == LOCK_FILE || camp_lib::is_scratch(&name);
        if below_corpus || (super::same_file(dir, &o.corpus) && owned) {
            return Err(format!(
                "--html {h}: a file the campaign keeps (its checkpoint, its lock, its examples' folders); give \
                 the report another name (default: report.html in the corpus folder)"
            ));
        }
        // The corpus folder itself is made by the campaign: a report inside it is fine (checked
        // for writing once the corpus exists).
        if super::same_file(dir, &o.corpus) {
            super::replaceable_file_ok("--html", h)?;
        } else {
            super::output_file_ok("--html", h)?;
        }
        report_replaceable(h)?;
    }
    if o.corpus.trim().is_empty() {
        // An empty path wrote the campaign into the working folder, beside whatever it held.
        return Err("--corpus: an empty path; give the corpus folder".to_string());
    }
    if Path::new(&o.corpus).exists() && !Path::new(&o.corpus).is_dir() {
        return Err(format!("--corpus {}: a file, not a folder; give the corpus folder", o.corpus));
    }
    // A blind campaign's cases run every profile: one engine's rows cannot triage them.
    if let Some(k) = &known {
        camp_lib::check_known_blind(k, &space_name).map_err(|e| e.to_string())?;
    }
    let corpus = PathBuf::from(&o.corpus);
    let ckpt_path = corpus.join("campaign.json");
    // A folder that is no corpus is refused before the lock is made in it (it was refused after,
    // and kept the lock file: not "left as it is"). Checked again under the lock.
    if !ckpt_path.exists() {
        if let Some(other) = foreign_entry(&corpus) {
            return Err(not_a_corpus(&corpus, &other));
        }
    }
    std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    // Held until the campaign ends (the OS drops it if the process dies).
    let _lock = lock_corpus(&corpus)?;
    say_how_to_resume_when_interrupted(&o.corpus);
    let mut camp = open_campaign(o, &corpus, &ckpt_path, &space_name, shard)?;
    // Recorded for a merge of its shards, which triages by it (the space names the base alone).
    camp.base_profile = base_profile;
    let resumed_jobs = resumed_jobs(o, &corpus, &mut camp)?;
    // The report is written when the campaign ends. An earlier run's page would outlive an
    // interruption of this one: stale (its counts, its exit status), its links into example
    // folders this run replaces broken. It goes now; the end writes the new one.
    let html = o.html.as_ref().map(PathBuf::from).unwrap_or_else(|| corpus.join("report.html"));
    if html.is_file() {
        std::fs::remove_file(&html)
            .map_err(|e| format!("{}: cannot replace the earlier report: {e}", html.display()))?;
    }
    let runs_before = camp.runs_done;
    // The corpus the runs of the current epoch are planned from (guided campaigns), published
    // by the accounting thread at each epoch's end; a worker waits for its run's epoch.
    let snapshot = Mutex::new(camp.guided.clone().map(std::sync::Arc::new));
    let epoch_done = std::sync::Condvar::new();
    let range_end = if deadline.is_some() { seed_room } else { o.runs.unwrap_or(1000) };
    let ctx = Ctx {
        corpus: corpus.clone(),
        space,
        space_name,
        opts: o.clone(),
        wanted: Mutex::new(wanted_of(&camp)),
        jobs_left: AtomicU64::new(0),
    };
    let next = AtomicU64::new(camp.next_k);
    let stop = AtomicBool::new(false);
    let started = std::time::Instant::now();
    let (tx, rx) = mpsc::channel::<Found>();
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    ctx.jobs_left.store(resumed_jobs.len() as u64, Ordering::Relaxed);
    for j in resumed_jobs {
        job_tx.send(j).expect("the receiver is alive");
    }
    let mut progress =
        Progress::new(deadline, range_end.saturating_sub(camp.next_k).div_ceil(shard.1), known.as_ref(), &corpus);
    progress.seen(&camp);
    let mut acc = Accounting::new(camp, o.until.clone());
    let mut errors = Vec::new();
    let mut found_after: Option<(u64, std::time::Duration)> = None;
    // A resume of a campaign that `--until` already stopped runs nothing more (it ran one run and
    // said "found after 21 runs" of a signature its checkpoint had at run 20).
    let until_in_checkpoint = acc.found_after.is_some();
    if until_in_checkpoint {
        found_after = acc.found_after.map(|runs| (runs, std::time::Duration::ZERO));
        stop.store(true, Ordering::Relaxed);
    }
    let mut runs_wall = std::time::Duration::ZERO;
    std::thread::scope(|s| {
        // The shrink worker: saves, shrinks, pictures and confirms examples off the runs'
        // critical path, in the order the accounting queued them (so the files do not depend
        // on --jobs), while the campaign keeps finding.
        {
            let ctx = &ctx;
            s.spawn(move || {
                for job in job_rx {
                    ctx.work(job);
                }
            });
        }
        for _ in 0..o.jobs.max(1) {
            let tx = tx.clone();
            let (ctx, next, stop, pins, snapshot, epoch_done) = (&ctx, &next, &stop, &pins, &snapshot, &epoch_done);
            s.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let k = next.fetch_add(shard.1, Ordering::Relaxed);
                if k >= range_end {
                    break;
                }
                // Guided: the corpus as of the start of run k's epoch (wait for the fold).
                let plan = match wait_for_epoch(snapshot, epoch_done, stop, k, shard) {
                    Err(()) => break,
                    Ok(g) => g.map(|g| (g.plan(o.seed_start, k, shard), g)),
                };
                if tx.send(run_k(o, ctx, pins, liveness, k, plan)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut last_save = std::time::Instant::now();
        let mut finished = 0u64;
        // Configurations of finished runs with signatures, until they are counted.
        let mut cfgs: BTreeMap<u64, SimConfig> = BTreeMap::new();
        // Example folders to remove once the next checkpoint is written (`queue_changes`).
        let mut removals: Vec<Job> = Vec::new();
        for (k, sigs, cand, found) in rx.iter() {
            finished += 1;
            let folded = acc.camp.guided.as_ref().map(|g| g.epochs_folded);
            let facts = found.map(|(facts, cfg)| {
                cfgs.insert(k, cfg);
                facts
            });
            if acc.finished_with(k, sigs, cand, facts) {
                found_after = acc.found_after.map(|runs| (runs, started.elapsed()));
                stop.store(true, Ordering::Relaxed);
            }
            let failed = ctx.queue_changes(&mut acc, &cfgs, &job_tx, &mut removals);
            if !failed.is_empty() {
                errors.extend(failed);
                stop.store(true, Ordering::Relaxed);
            }
            let next_k = acc.camp.next_k;
            cfgs.retain(|kk, _| *kk >= next_k);
            if let Some(g) = acc.camp.guided.as_ref().filter(|g| Some(g.epochs_folded) != folded) {
                *snapshot.lock().expect("lock") = Some(std::sync::Arc::new(g.clone()));
                epoch_done.notify_all();
            }
            let elapsed = started.elapsed();
            if deadline.is_some_and(|d| elapsed >= d) {
                stop.store(true, Ordering::Relaxed);
            }
            let jobs = ctx.jobs_left.load(Ordering::Relaxed);
            // A signature is announced once it is in the checkpoint on disk: an interruption
            // within the half second between checkpoints lost announced signatures (a resume
            // removed their examples as leftovers and announced them again).
            if progress.unannounced(&acc.camp) || last_save.elapsed().as_millis() >= 500 {
                match write_json(&ckpt_path, &acc.camp) {
                    Ok(()) => ctx.send_removals(&mut removals, &job_tx),
                    Err(e) => {
                        errors.push(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                last_save = std::time::Instant::now();
            }
            progress.announce(&acc.camp);
            progress.tick(elapsed, finished, acc.camp.runs_done, acc.camp.table.len(), jobs);
        }
        runs_wall = started.elapsed();
        // The last removals go once the final accounting is on disk (written again below, after
        // the worker has finished: it changes no counted state).
        match write_json(&ckpt_path, &acc.camp) {
            Ok(()) => ctx.send_removals(&mut removals, &job_tx),
            Err(e) => errors.push(e),
        }
        drop(job_tx);
        let left = ctx.jobs_left.load(Ordering::Relaxed);
        if left > 0 {
            eprintln!("fuzz: runs done; finishing {left} queued example job(s) (saving, shrinking)");
        }
    });
    progress.finish();
    write_json(&ckpt_path, &acc.camp)?;
    if let Some(e) = errors.first() {
        return Err(e.clone());
    }
    let ran = Ran { runs_wall, found_after, until_in_checkpoint, started, runs_before };
    // The summary and the report say the seed range asked for, when there is one (`--runs`).
    acc.camp.planned_end = deadline.is_none().then_some(range_end);
    Ok(print_summary(o, &corpus, &acc.camp, known.as_ref(), &ran))
}

/// What a worker sends the accounting for run `k`: its signatures, its guided candidate, and its
/// size and configuration when it failed.
type Found = (u64, BTreeSet<String>, Option<Candidate>, Option<(RunFacts, SimConfig)>);

/// The campaign's draw space and its table name (everything that changes what a run means names
/// another campaign, so that tables of different campaigns never merge), with the liveness bound
/// and the pinned knobs.
fn campaign_space(o: &FuzzOpts) -> Result<(Space, String, Option<u64>, kvsim::scenario::KnobPins), String> {
    let (space, space_name) = match (&o.base, &o.profile) {
        (None, p) if o.prefix_heavy => {
            let inner = match p {
                Some(p) if kvsim::config::profile(p).is_none() => {
                    return Err(format!("--profile {p}: unknown profile{}", kvsim::config::unknown_profile_hint(p)))
                }
                Some(p) => Space::Profile(p.clone()),
                None => Space::Blind,
            };
            let name = format!("prefix:{}", p.as_deref().unwrap_or("blind"));
            (Space::Prefix(Box::new(inner)), name)
        }
        (Some(b), _) => {
            let cfg = super::load(b, &super::RunOpts { profile: o.profile.clone(), ..Default::default() })
                .map_err(|e| e.to_string())?;
            // Named by its content, not by the path it was given by: `./b.toml`, `$PWD/b.toml` or
            // a link to it are one campaign, and an edited base is another (a resume drew the
            // edited base's variants into the old table). `base_legacy_space` reads the
            // path-named corpora of earlier builds.
            let shown: String = cfg.name.chars().map(|c| if matches!(c, '+' | '@') { '_' } else { c }).collect();
            let name = format!("base:{shown}@{}", &kvsim::tracefile::config_digest(&cfg)[..12]);
            (Space::Base(Box::new(cfg)), name)
        }
        (None, Some(p)) => {
            if kvsim::config::profile(p).is_none() {
                return Err(format!("--profile {p}: unknown profile{}", kvsim::config::unknown_profile_hint(p)));
            }
            (Space::Profile(p.clone()), format!("profile:{p}"))
        }
        (None, None) => (Space::Blind, "blind".to_string()),
    };
    // A profile's campaign leaves the hardware faults off unless asked; asking makes it another
    // campaign (its own table name, so shards of the two never merge).
    let (space, space_name) = if o.hardware_faults && space.from_profile() {
        (Space::Hardware(Box::new(space)), format!("{space_name}+hardware"))
    } else if o.hardware_faults {
        // As `kvsim reach` refuses it: the flag was accepted and did nothing.
        return Err("--hardware-faults needs --profile (the blind swarm draws them anyway)".to_string());
    } else {
        (space, space_name)
    };
    let liveness =
        o.liveness.as_deref().map(|b| super::parse_bound(b).map_err(|e| format!("--liveness {b}: {e}"))).transpose()?;
    let mut space = space;
    if let (Some(ms), Space::Base(b)) = (liveness, &mut space) {
        let faults = kvsim::config::FaultConfig { liveness_after_heal_ms: Some(ms), ..b.faults.clone() };
        kvsim::check::liveness::validate(&faults).map_err(|e| format!("--liveness with --base: {e}"))?;
        // On the base itself, so that its variants are drawn under it: one that turns a random
        // fault on where the faults never heal is redrawn (`guided::vary_base`), not run unjudged
        // and then refused when saved.
        b.faults = faults;
    }
    // Liveness mode judges runs differently: its table is another campaign's.
    let space_name = match liveness {
        Some(ms) => format!("{space_name}+liveness={ms}ms"),
        None => space_name,
    };
    // A guided campaign's run k is not the swarm's seed k: another campaign too.
    let space_name = if o.guided { format!("{space_name}+guided") } else { space_name };
    let (pins, space_name) = pin_knobs(&o.set, &space, space_name)?;
    // A property check changes what every run reports: its table is another campaign's.
    let space_name = match o.check {
        Some(c) => {
            let name = clap::ValueEnum::to_possible_value(&c).map(|v| v.get_name().to_string()).unwrap_or_default();
            format!("{space_name}+check:{name}")
        }
        None => space_name,
    };
    // So does checking every run against the reference oracle: a sampled campaign's table holds
    // only the disagreements of one run in 64 (a resume or merge mixed the two without a word).
    let space_name = if o.check_oracle { format!("{space_name}+check-oracle") } else { space_name };
    Ok((space, space_name, liveness, pins))
}

/// What an interrupted campaign says as it ends (set once, before the handlers are installed).
static INTERRUPTED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// On SIGINT or SIGTERM a campaign ends as before (exit 128 + the signal: 130, 143), and now says
/// that its checkpoint holds everything counted and that the same command resumes it (it ended
/// silently). The handler only writes prepared bytes and exits: both async-signal-safe.
fn say_how_to_resume_when_interrupted(corpus: &str) {
    say_when_interrupted(format!(
        "\nkvsim fuzz: interrupted; every signature announced is in {corpus}/campaign.json, with the runs counted up to its last checkpoint (at most half a second ago): run the same command again to resume\n"
    ));
}

/// On SIGINT or SIGTERM the process prints `text` to stderr and exits 128 + the signal (`kvsim
/// fuzz`, `kvsim explore`).
pub fn say_when_interrupted(text: String) {
    #[cfg(unix)]
    {
        if INTERRUPTED.set(text.into_bytes()).is_err() {
            return;
        }
        extern "C" fn on_signal(sig: libc::c_int) {
            if let Some(b) = INTERRUPTED.get() {
                // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is never
                // written again once set.
                unsafe {
                    libc::write(2, b.as_ptr().cast(), b.len());
                }
            }
            // SAFETY: as above.
            unsafe { libc::_exit(128 + sig) }
        }
        // SAFETY: installs a handler that runs no Rust code beyond the above.
        unsafe {
            libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
            libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// The file a running campaign holds an exclusive lock on, in its corpus.
pub const LOCK_FILE: &str = "campaign.lock";

/// Takes the corpus's lock, or says that another campaign holds it. Two campaigns in one corpus
/// (an overlapping cron run, a duplicated pod) each removed what the other was writing, as an
/// interrupted campaign's leftovers, and lost saved examples. The lock file stays (it is the
/// lock, not its holder); an advisory lock of the OS (`File::try_lock`), released when its
/// process ends, however it ends.
fn lock_corpus(corpus: &Path) -> Result<std::fs::File, String> {
    let path = corpus.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "{}: another campaign is running in this corpus ({} is locked); wait for it to end, or give another --corpus",
            corpus.display(),
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("{}: cannot lock: {e}", path.display())),
    }
}

/// Something in `corpus` that a new campaign did not put there (a scratch file of an interrupted
/// write, or the lock, is its own), if any.
fn foreign_entry(corpus: &Path) -> Option<PathBuf> {
    let rd = std::fs::read_dir(corpus).ok()?;
    rd.flatten()
        .map(|e| e.path())
        .find(|p| !p.file_name().is_some_and(|n| n == LOCK_FILE || camp_lib::is_scratch(&n.to_string_lossy())))
}

/// Why a folder with no checkpoint and `other` in it is not taken as a corpus.
fn not_a_corpus(corpus: &Path, other: &Path) -> String {
    format!(
        "{}: not a campaign's corpus (no campaign.json) and not empty ({} is in it): give an empty or new folder; \
         a corpus whose campaign.json was lost cannot be resumed",
        corpus.display(),
        other.display()
    )
}

/// The space name earlier builds gave a `--base` campaign (`base:<path as given>`, then the
/// same suffixes), for resuming their corpora.
fn base_legacy_space(o: &FuzzOpts, space_name: &str) -> Option<String> {
    let b = o.base.as_ref()?;
    let rest = space_name.strip_prefix("base:")?;
    let suffix = rest.find('+').map_or("", |i| &rest[i..]);
    Some(format!("base:{b}{suffix}"))
}

/// How a campaign shrinks its examples, as its checkpoint records it (`Campaign::shrink`).
fn shrink_setting(o: &FuzzOpts) -> String {
    if o.no_shrink {
        "--no-shrink".to_string()
    } else {
        format!("--shrink-budget {}", o.shrink_budget)
    }
}

/// The campaign to run: the checkpoint's (checked to be this campaign's) or a new one, with the
/// scratch an interrupted campaign left removed.
fn open_campaign(
    o: &FuzzOpts,
    corpus: &Path,
    ckpt_path: &Path,
    space_name: &str,
    shard: (u64, u64),
) -> Result<Campaign, String> {
    std::fs::create_dir_all(corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let camp = match std::fs::read_to_string(ckpt_path) {
        Ok(text) => {
            let mut c: Campaign =
                kvsim::formats::from_json(&text).map_err(|e| format!("{}: {e}", ckpt_path.display()))?;
            // A base corpus of a build that named its space by the base's path: resumed under
            // that name (its base cannot be checked for edits).
            if base_legacy_space(o, space_name).is_some_and(|l| l == c.space) {
                eprintln!(
                    "note: {}: a base campaign named by its path ({}), as earlier builds named it: resumed as it is, but an edit of the base since cannot be detected",
                    o.corpus, c.space
                );
                c.space = space_name.to_string();
            }
            c.check_resumes(&o.corpus, space_name, o.seed_start, shard).map_err(|e| e.to_string())?;
            c.check_examples(&o.corpus, o.examples).map_err(|e| e.to_string())?;
            c.check_shrink(&o.corpus, &shrink_setting(o)).map_err(|e| e.to_string())?;
            if o.guided && c.guided.is_none() && c.runs_done > 0 {
                // A merge of guided shards keeps no guided corpus: resumed, it would plan from an
                // empty one, a campaign neither the shards nor an unsharded run would be.
                return Err(format!(
                    "{}: a merge of guided shards keeps no guided corpus, so it cannot be resumed as a guided campaign; resume the shards, then merge again",
                    o.corpus
                ));
            }
            eprintln!("resuming {}: {} runs done, {} signature(s)", o.corpus, c.runs_done, c.table.len());
            c
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // No checkpoint: a new campaign, in a folder that holds nothing of anyone's (the
            // clean-up below removes what the checkpoint does not list, so a folder of other
            // files, or a corpus whose checkpoint was lost, would lose them).
            if let Some(other) = foreign_entry(corpus) {
                return Err(not_a_corpus(corpus, &other));
            }
            let mut c = Campaign::new(space_name, o.seed_start, shard).with_examples(o.examples);
            c.guided = o.guided.then(Default::default);
            c.shrink = Some(shrink_setting(o));
            // Checkpointed at once, so a campaign killed before its first checkpoint leaves a
            // corpus that resumes (its leftovers removed against this empty one).
            write_json(ckpt_path, &c)?;
            c
        }
        // Unreadable (not UTF-8, a folder, no permission): never taken for a missing one.
        Err(e) => return Err(format!("{}: cannot read the campaign's checkpoint: {e}", ckpt_path.display())),
    };
    let scratch = clean_corpus(corpus, &camp);
    if !scratch.is_empty() {
        eprintln!("{}: removed {} leftover(s) of an interrupted campaign", o.corpus, scratch.len());
    }
    Ok(camp)
}

/// Whether an example's `scenario.toml` still shows `sig`, run with the checks the signature
/// needs (the oracle's reference for a disagreement, the noninterference check for a channel,
/// the invariants for a broken one), as the campaign's run that found it did.
fn scenario_shows(dir: &Path, sig: &str) -> Result<(), String> {
    let path = dir.join("scenario.toml");
    let cfg = super::load(&path.to_string_lossy(), &super::RunOpts::default())
        .map_err(|e| format!("its scenario.toml does not read ({e})"))?;
    let invariants = sig.starts_with("invariant_broken/");
    let check = kvsim::fuzz::is_disagreement(sig);
    let (_, sigs) = kvsim::fuzz::run_case_full(cfg, check, kvsim::fuzz::is_channel(sig), invariants, false);
    if sigs.contains(sig) {
        Ok(())
    } else {
        Err(format!("its scenario.toml no longer shows {sig} (edited since it was saved?)"))
    }
}

/// Whether a saved example's folder holds every file its `failure.json` names (its trace, and
/// its shrunk case when it was shrunk): what a resume and a merge take as completed.
fn example_whole(dir: &Path, f: &Failure) -> bool {
    let has = |name: &str| dir.join(name).is_file();
    (f.shrunk.is_none() || (has("shrunk.toml") && has("shrunk.jsonl"))) && has("trace.jsonl")
}

/// Examples the checkpoint lists but an interrupted campaign had not completed: shrunk first.
/// Each signature's `failure.json` is rewritten too (it may name an example pushed out before
/// the interruption). An example whose folder lost the scenario it was saved from (deleted by hand) cannot be
/// completed: it is dropped from its list, with a warning, and a later run that shows its
/// signature may take its place.
fn resumed_jobs(o: &FuzzOpts, corpus: &Path, camp: &mut Campaign) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    let (mut gone, mut reconfirm, mut damaged) = (0, 0, 0);
    for (sig, list) in camp.examples.iter_mut() {
        list.retain(|e| {
            let dir = seed_dir(corpus, sig, e.seed);
            // A completed example: its `failure.json` reads, and the files it names are there.
            // One damaged by hand (a cut `failure.json`, a deleted `shrunk.toml`) is completed
            // again from its scenario, with a warning (it was dropped from the table silently, or
            // kept with a command naming a missing file).
            let failure = std::fs::read_to_string(dir.join("failure.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Failure>(&t).ok());
            let has = |f: &str| dir.join(f).is_file();
            let (saved, scenario) = (has("failure.json"), has("scenario.toml"));
            let whole = failure.as_ref().is_some_and(|f| example_whole(&dir, f));
            // Its scenario is what everything else is made from: without it the example cannot
            // be completed again (its table line named files that were gone). One completed again
            // from its scenario must still show the signature (an edited `scenario.toml` was
            // shrunk, "0 accepted", and its table line kept a command that ran clean).
            let unusable = if saved && !scenario {
                Some(" lost its scenario.toml".to_string())
            } else if (saved && !whole) || (!saved && scenario) {
                scenario_shows(&dir, sig).err().map(|why| format!(": {why}"))
            } else {
                None
            };
            if let Some(why) = unusable {
                eprintln!(
                    "warning: {}: example seed {} of {sig}{why}: dropped from the list (and its folder removed)",
                    o.corpus, e.seed
                );
                // As the clean-up removes an example the checkpoint does not list.
                let _ = std::fs::remove_dir_all(&dir);
                gone += 1;
                return false;
            }
            if saved && !whole {
                eprintln!(
                    "warning: {}: example seed {} of {sig} was damaged (its failure.json does not read, or a file it names is missing): completed again from its scenario",
                    o.corpus, e.seed
                );
                jobs.push(Job::Save { sig: sig.clone(), seed: e.seed });
                damaged += 1;
                return true;
            }
            if let Some(f) = failure.as_ref().filter(|_| saved) {
                // A corpus moved, copied or named another way since (`--corpus $PWD/c/`): the
                // example's commands point at it as given now, as the new examples' do (the
                // examples finished before the interruption kept the old path).
                let mut moved = f.clone();
                moved.relocate(&corpus.join(slug(sig)));
                if moved != *f {
                    if let Err(e) = write_json(&dir.join("failure.json"), &moved) {
                        eprintln!("warning: {e}");
                    }
                }
            }
            if saved {
                // A confirmation that failed (no backend then) is tried again when this campaign
                // confirms: the example is completed anew, as it was found.
                let failed = o.confirm.0.is_some()
                    && failure.is_some_and(|f| {
                        camp_lib::Confirmation::of(f.confirm.as_deref()) == camp_lib::Confirmation::Failed
                    });
                if failed {
                    reconfirm += 1;
                    jobs.push(Job::Save { sig: sig.clone(), seed: e.seed });
                }
                return true;
            }
            if scenario {
                jobs.push(Job::Save { sig: sig.clone(), seed: e.seed });
                return true;
            }
            eprintln!(
                "warning: {}: example seed {} of {sig} is missing from the corpus (its folder was removed): dropped from the list",
                o.corpus, e.seed
            );
            gone += 1;
            false
        });
        write_best(corpus, sig)?;
    }
    camp.examples.retain(|_, l| !l.is_empty());
    // Damaged examples were warned about one by one: they are not "found before the
    // interruption" (a re-run that repaired two said so, with nothing interrupted).
    let undone = jobs.len() - reconfirm - damaged;
    if undone > 0 {
        let what = if o.no_shrink { "saved" } else { "saved and shrunk" };
        // An example whose failure.json is not written yet (an interruption while saving) and
        // one whose failure.json was removed look alike: the message names both (it spoke of an
        // interruption to an operator who had deleted the files).
        eprintln!(
            "{}: {undone} example(s) without their failure.json (not completed before an interruption, or the file removed) are {what} now from their scenario.toml",
            o.corpus
        );
    }
    if reconfirm > 0 {
        eprintln!("{}: {reconfirm} example(s) whose confirmation failed are confirmed again", o.corpus);
    }
    if gone > 0 {
        let ckpt = corpus.join("campaign.json");
        write_json(&ckpt, camp)?;
    }
    Ok(jobs)
}

/// Run `k` of the campaign: its configuration (the guided plan's recipe, else the swarm's draw),
/// the pins and the liveness bound applied, run with the checks its seed samples.
fn run_k(
    o: &FuzzOpts,
    ctx: &Ctx,
    pins: &kvsim::scenario::KnobPins,
    liveness: Option<u64>,
    k: u64,
    plan: Option<(kvsim::fuzz::guided::Recipe, std::sync::Arc<Guided>)>,
) -> Found {
    let seed = o.seed_start.wrapping_add(k);
    let mut cfg = match &plan {
        Some((recipe, g)) => g.build(recipe, &ctx.space),
        None => draw(seed, &ctx.space),
    };
    cfg.knobs = pins.apply(&cfg.knobs);
    if liveness.is_some() {
        cfg.faults.liveness_after_heal_ms = liveness;
    }
    // A guided fresh run is the swarm's draw of its root (`Guided::plan`): the same checks too.
    let sample = match &plan {
        Some((r, _)) if r.mutations.is_empty() => r.root,
        _ => seed,
    };
    let check = o.check_oracle || kvsim::fuzz::sampled_for_check(sample);
    let ni = o.check == Some(super::PropertyCheck::Noninterference);
    let invariants = o.check == Some(super::PropertyCheck::Invariants) || kvsim::fuzz::sampled_for_invariants(sample);
    // Only a guided run (one with a plan) records coverage: nothing else reads it.
    let guided = plan.is_some();
    let (w, sigs) = kvsim::fuzz::run_case_full(cfg.clone(), check, ni, invariants, guided);
    let edges = w.coverage.as_ref().map(|c| c.edge_set()).unwrap_or_default();
    let cand = plan.map(|(recipe, g)| Candidate::new(&g, k, recipe, edges));
    // A failing run may become an example: its size, trace hash and configuration
    // go to the accounting, which keeps each signature's smallest (in seed order).
    let found = (!sigs.is_empty()).then(|| {
        let facts = RunFacts { requests: case_requests(&cfg) as u64, events: w.events(), hash: w.tracer.hash_hex() };
        (facts, cfg)
    });
    drop(w);
    (k, sigs, cand, found)
}

/// The campaign's progress: a bar on a terminal, else a line every 10 s on stderr; and a line
/// for each signature as the accounting counts it (in seed order, so the same lines for any
/// `--jobs`), triaged when there is a known-bugs file: a nightly job's log says what is new as
/// soon as it is found, not only in the final table.
struct Progress<'k> {
    bar: Option<indicatif::ProgressBar>,
    deadline: Option<std::time::Duration>,
    /// Runs this invocation has left (for the time estimate without a deadline).
    total_left: u64,
    last_line: std::time::Instant,
    known: Option<&'k KnownBugs>,
    /// Where each signature's examples are saved (`<corpus>/<slug>/`, a folder `kvsim shrink`
    /// takes).
    corpus: &'k Path,
    /// The signatures already announced (or found before a resume), and how many are new.
    announced: BTreeSet<String>,
    new: usize,
}

#[allow(clippy::disallowed_methods)] // progress is wall time; the model never reads it
impl<'k> Progress<'k> {
    fn new(
        deadline: Option<std::time::Duration>,
        total_left: u64,
        known: Option<&'k KnownBugs>,
        corpus: &'k Path,
    ) -> Progress<'k> {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(deadline.map_or(total_left, |d| d.as_secs()));
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                    .expect("template")
                    .progress_chars("=> "),
            );
            b
        });
        Progress {
            bar,
            deadline,
            total_left,
            last_line: std::time::Instant::now(),
            known,
            corpus,
            announced: BTreeSet::new(),
            new: 0,
        }
    }

    /// Signatures a resumed campaign had already found: counted, not announced again.
    fn seen(&mut self, camp: &Campaign) {
        for sig in camp.table.keys() {
            self.note(sig);
        }
    }

    /// Marks a signature announced, counting it when the known-bugs file does not know it.
    fn note(&mut self, sig: &str) {
        self.announced.insert(sig.to_string());
        self.new += usize::from(self.known.is_some_and(|k| k.row(sig).is_none()));
    }

    /// Whether the table holds a signature not announced yet (`announce` would print it).
    fn unannounced(&self, camp: &Campaign) -> bool {
        camp.table.len() != self.announced.len()
    }

    /// One line per signature the table gained since the last call.
    fn announce(&mut self, camp: &Campaign) {
        let table = &camp.table;
        if table.len() == self.announced.len() {
            return; // the table only grows: nothing new (the common case, one comparison)
        }
        // One call may count several runs (a later run finished first, with --jobs): in seed
        // order, then by name (one run's signatures), as one job would announce them.
        let mut fresh: Vec<(&String, &Entry)> = table.iter().filter(|(s, _)| !self.announced.contains(*s)).collect();
        fresh.sort_by_key(|(sig, e)| (e.first_seed, *sig));
        for (sig, e) in fresh {
            self.note(sig);
            let label = camp_lib::triage_label(sig, self.known);
            let label = if label.is_empty() { String::new() } else { format!(" [{label}]") };
            let line = format!(
                "fuzz: signature {}: {sig}{label}, first seed {} (run {}); examples in {}",
                self.announced.len(),
                e.first_seed,
                camp.run_number(e.first_seed),
                self.corpus.join(slug(sig)).display()
            );
            match &self.bar {
                Some(b) => b.println(line),
                None => eprintln!("{line}"),
            }
        }
    }

    /// One more run finished (`finished` in this invocation, `runs_done` in the campaign).
    fn tick(&mut self, elapsed: std::time::Duration, finished: u64, runs_done: u64, signatures: usize, jobs: u64) {
        let rate = finished as f64 / elapsed.as_secs_f64().max(1e-9);
        let left = match self.deadline {
            Some(d) => d.saturating_sub(elapsed).as_secs(),
            None => ((self.total_left.saturating_sub(finished)) as f64 / rate.max(1e-9)) as u64,
        };
        let new = if self.known.is_some() { format!(" ({} new)", self.new) } else { String::new() };
        let msg = format!(
            "{rate:.0} runs/s · {signatures} signature(s){new} · {jobs} example job(s) queued · {left}s of runs left"
        );
        if let Some(b) = &self.bar {
            if self.deadline.is_some() {
                b.set_position(elapsed.as_secs());
            } else {
                b.inc(1);
            }
            // With --time the bar counts seconds, so the runs are said in words.
            b.set_message(if self.deadline.is_some() { format!("{runs_done} runs · {msg}") } else { msg });
        } else if self.last_line.elapsed().as_secs() >= 10 {
            eprintln!("fuzz: {runs_done} runs · {msg}");
            self.last_line = std::time::Instant::now();
        }
    }

    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// How the runs of this invocation went, for the summary.
struct Ran {
    runs_wall: std::time::Duration,
    /// `--until`: the runs and time to the first find.
    found_after: Option<(u64, std::time::Duration)>,
    /// `--until`'s signature was in the checkpoint: nothing was run.
    until_in_checkpoint: bool,
    started: std::time::Instant,
    /// Runs the checkpoint had counted before this invocation (a resume's).
    runs_before: u64,
}

/// Prints the summary line, the signature table, `--until`'s answer and the triage line, writes
/// the HTML report, and returns the exit status (non-zero on anything not known).
fn print_summary(o: &FuzzOpts, corpus: &Path, camp: &Campaign, known: Option<&KnownBugs>, ran: &Ran) -> i32 {
    let secs = ran.runs_wall.as_secs_f64();
    // A resume's rate is of the runs it did itself, not of the checkpoint's total.
    let now = camp.runs_done.saturating_sub(ran.runs_before);
    let resumed = if ran.runs_before > 0 {
        format!(" ({} from the checkpoint, {now} now)", ran.runs_before)
    } else {
        String::new()
    };
    if let Some(asked) = o.runs.filter(|&r| ran.runs_before >= r && ran.runs_before > 0) {
        // `--runs` counts from the start of the seed range, not from the checkpoint.
        eprintln!(
            "note: --runs {asked}: the checkpoint already has {} runs, so nothing was run; give a larger --runs to go on",
            ran.runs_before
        );
    }
    println!(
        "{} runs{resumed} in {:.1}s ({:.0} runs/s, {} job(s)); {}; corpus {}; examples done {:.1}s after the start",
        camp.runs_done,
        secs,
        now as f64 / secs.max(1e-9),
        o.jobs.max(1),
        camp.seeds_text(),
        o.corpus,
        ran.started.elapsed().as_secs_f64()
    );
    print!("{}", camp_lib::table_text(&camp.table, &saved_examples(corpus), known));
    if let Some(u) = &o.until {
        // The signature that matched, when `--until` named a prefix of it (the line read as if
        // the prefix itself was found): the first found, by seed.
        let matched = camp
            .table
            .iter()
            .filter(|(s, _)| s.starts_with(u.as_str()))
            .min_by_key(|(_, e)| e.first_seed)
            .filter(|(s, _)| *s != u)
            .map_or(String::new(), |(s, e)| format!("; the signature found: `{s}` (seed {})", e.first_seed));
        match ran.found_after {
            Some((runs, _)) if ran.until_in_checkpoint => {
                println!("until: `{u}` found after {runs} runs, by an earlier invocation (the checkpoint has it); nothing was run{matched}")
            }
            Some((runs, t)) => println!("until: `{u}` found after {runs} runs in {:.2}s{matched}", t.as_secs_f64()),
            None => println!("until: `{u}` not found in {} runs", camp.runs_done),
        }
    }
    if let Some(k) = known {
        print!("{}", camp_lib::triage_line(&camp.table, k));
    }
    let code = kvsim::triage::exit_status(camp.table.keys(), known);
    let html = o.html.as_ref().map(PathBuf::from).unwrap_or_else(|| corpus.join("report.html"));
    match write_report(&html, corpus, &o.corpus, camp, known, code) {
        Ok(()) => println!("report: {}", html.display()),
        Err(e) => eprintln!("warning: the HTML report was not written: {e}"),
    }
    code
}

/// `kvsim corpus merge DIR… --into OUT`: the union of the shards of one campaign. The corpora
/// must be disjoint shards of the same split (same space, seed start and shard count, distinct
/// shard indices): merging a corpus twice, or overlapping ones, would count runs twice and is
/// refused. Only committed failures are copied (scratch of an interrupted campaign is not), and
/// their reproduce commands are rewritten to point into the merged corpus.
///
/// Triage as in a campaign: with `--known FILE`, or by default the shipped known-bugs file of the
/// campaign's profile (space `profile:P` or `prefix:P`), the table gets its new/known column and
/// the merge exits like the campaign (0 when only known signatures, else 10/11/12); without a
/// known-bugs file (`--known none`, a blind campaign) every signature counts, as in the campaign.
/// Shards missing or stopped at different runs (a nightly job's timed-out shard) still merge, as
/// a partial merge: a warning says so, its table is the union of the runs done, and its
/// checkpoint cannot be resumed (`Campaign::partial`). `--into` must be a new or empty folder.
pub fn merge(dirs: &[String], into: &str, known: Option<&str>) -> i32 {
    match merge_corpora(dirs, into, known) {
        Ok((text, code)) => {
            print!("{text}");
            code
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::BAD_INPUT
        }
    }
}

/// The known-bugs file of a merge: `--known FILE`, `--known none`, or the shipped file of the
/// campaign space's profile.
fn merge_known(space: &str, base_profile: Option<&str>, known: Option<&str>) -> Result<Option<KnownBugs>, String> {
    let given = match known {
        Some("none") => return Ok(None),
        Some(path) => {
            // Bounded and checked as every input is (`--known /dev/zero` read until memory ran out).
            let text = super::read_text(path).map_err(|e| format!("--known {path}: {e}"))?;
            Some(KnownBugs::parse(path, &text).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    camp_lib::merge_known(space, base_profile, given).map_err(|e| e.to_string())
}

fn merge_corpora(dirs: &[String], into: &str, known: Option<&str>) -> Result<(String, i32), String> {
    let mut m = Merger::default();
    let out = Path::new(into);
    let out_real = std::fs::canonicalize(out).ok();
    // Each shard's lock, held while it is read: a shard whose campaign is still running would be
    // merged half done (and its examples reported as never completed).
    let mut _locks = Vec::new();
    let mut locked = std::collections::BTreeSet::new();
    for d in dirs {
        let lock = Path::new(d).join(LOCK_FILE);
        // A folder given twice is refused below, not taken for a running campaign.
        if !locked.insert(std::fs::canonicalize(d).unwrap_or_else(|_| PathBuf::from(d))) {
            continue;
        }
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&lock) {
            match f.try_lock() {
                Ok(()) => _locks.push(f),
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "{d}: a campaign is running in this corpus ({} is locked); merge once it has ended",
                        lock.display()
                    ))
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(format!("{}: cannot lock: {e}", lock.display())),
            }
        }
    }
    for d in dirs {
        // Say what the folder is before what its file is not ("nonexist/campaign.json: No such
        // file or directory" read as a missing file of an existing corpus).
        if !Path::new(d).is_dir() {
            return Err(if Path::new(d).exists() {
                format!("{d}: a file, not a campaign's corpus folder (give the folders `kvsim fuzz --corpus` wrote)")
            } else {
                format!("{d}: no such folder (give the folders `kvsim fuzz --corpus` wrote)")
            });
        }
        let p = Path::new(d).join("campaign.json");
        if !p.is_file() {
            return Err(format!("{d}: not a campaign's corpus (it has no campaign.json)"));
        }
        let c: Campaign = std::fs::read_to_string(&p)
            .map_err(|e| e.to_string())
            .and_then(|t| kvsim::formats::from_json(&t))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        Merger::check_format(&c, &p.display().to_string()).map_err(|e| e.to_string())?;
        if out_real.is_some() && std::fs::canonicalize(d).ok() == out_real {
            return Err(format!("{d}: the output corpus cannot be one of the inputs"));
        }
        m.add(d, c).map_err(|e| e.to_string())?;
    }
    let mut merged = m.campaign().map_err(|e| e.to_string())?;
    let known = merge_known(&merged.space, merged.base_profile.as_deref(), known)?;
    if into.trim().is_empty() {
        // It merged into the working folder, beside whatever it held.
        return Err("--into: an empty path; give the merged corpus's folder".to_string());
    }
    if out.exists() && !out.is_dir() {
        return Err(format!("--into {into}: a file, not a folder; merge into a new or empty folder"));
    }
    // Not inside an input: the merged corpus would be written into a shard's folder.
    let out_parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for d in dirs {
        if std::iter::successors(Some(out_parent), |p| p.parent().filter(|q| !q.as_os_str().is_empty()))
            .any(|p| super::same_file(p, d))
        {
            return Err(format!("--into {into}: inside the input corpus {d}; merge into a folder outside the inputs"));
        }
    }
    // A new folder: merging over a corpus would replace its signatures' examples and checkpoint.
    if std::fs::read_dir(out).is_ok_and(|mut rd| rd.next().is_some()) {
        let why = if out.join("campaign.json").is_file() {
            "the folder is not empty".to_string()
        } else {
            // What an interrupted merge leaves: examples copied, no checkpoint yet.
            "the folder is not empty, and holds no campaign.json (a merge interrupted before its end leaves such a folder: remove it, then merge again)".to_string()
        };
        return Err(format!("--into {into}: {why}; merge into a new or empty folder"));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{into}: {e}"))?;
    // Each signature's N smallest examples of all shards (the unsharded campaign's), copied from
    // the shard that found each. One its shard had not completed is reported, not copied, and
    // makes the merge partial: the unsharded campaign would hold it, and the merged corpus cannot
    // complete it (a merge of a shard stopped while saving its examples read as whole). The next
    // smallest examples that other shards saved whole take its place (they were dropped, and a
    // signature lost its reproduction although a shard held one).
    let mut incomplete: BTreeMap<String, usize> = BTreeMap::new();
    for (sig, top) in &m.examples {
        let dst = out.join(slug(sig));
        let _ = std::fs::remove_dir_all(&dst);
        // Every shard's example of `sig` that its shard saved whole, each `failure.json` read once.
        let mut whole: BTreeMap<u64, (PathBuf, Failure)> = m
            .candidates(sig)
            .iter()
            .filter_map(|key| {
                let src = seed_dir(Path::new(m.origin(key.seed)?), sig, key.seed);
                std::fs::read_to_string(src.join("failure.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str::<Failure>(&t).ok())
                    .filter(|f| example_whole(&src, f))
                    .map(|f| (key.seed, (src, f)))
            })
            .collect();
        for key in top.iter().filter(|k| !whole.contains_key(&k.seed)) {
            let Some(d) = m.origin(key.seed) else { continue };
            // Not completed, or damaged since (a file its failure.json names is gone: its
            // command named a missing file): the shard's resume completes it again.
            eprintln!(
                "warning: {d}: example seed {} of {sig} was not completed, or a file of it is missing (resume that shard first)",
                key.seed
            );
            *incomplete.entry(d.to_string()).or_default() += 1;
        }
        // The merged checkpoint names only examples it holds.
        let list = m.complete_examples(sig, |k| whole.contains_key(&k.seed));
        for key in &list {
            let (src, mut f) = whole.remove(&key.seed).expect("complete");
            let to = seed_dir(out, sig, key.seed);
            copy_dir(&src, &to).map_err(|e| format!("copying {}: {e}", src.display()))?;
            f.relocate(&dst);
            write_atomic(&to.join("failure.json"), serde_json::to_string_pretty(&f).expect("json").as_bytes())
                .map_err(|e| format!("{}: {e}", to.display()))?;
        }
        merged.examples.insert(sig.clone(), list);
        write_best(out, sig)?;
    }
    merged.examples.retain(|_, l| !l.is_empty());
    // A campaign lists an example for every signature it counts: one listed by no shard (an
    // edited checkpoint) would show with an empty reproduce column and nothing said.
    for sig in merged.table.keys().filter(|s| m.examples.get(*s).is_none_or(|l| l.is_empty())) {
        eprintln!("warning: {sig}: no shard's checkpoint lists an example of it (an edited or damaged campaign.json?): nothing reproduces it");
    }
    let runs_partial = merged.partial.is_some();
    if !incomplete.is_empty() {
        let shards: Vec<String> = incomplete.iter().map(|(d, n)| format!("{n} in {d}")).collect();
        let why = format!("{}: {}", camp_lib::EXAMPLES_NOT_COMPLETED, shards.join(", "));
        merged.partial = Some(match merged.partial.take() {
            Some(p) => format!("{p}; {why}"),
            None => why,
        });
    }
    write_atomic(&out.join("campaign.json"), serde_json::to_string_pretty(&merged).expect("json").as_bytes())
        .map_err(|e| format!("{into}: {e}"))?;
    if let Some(why) = &merged.partial {
        if runs_partial {
            eprintln!(
                "warning: a partial merge ({why}): the table is the union of the runs the shards did, \
                 not the campaign's first N runs, and {into} cannot be resumed (resume the shards, then merge again)"
            );
        } else {
            eprintln!(
                "warning: a partial merge ({why}): the table is whole, but signatures lack the examples those \
                 shards had not saved, and {into} cannot be resumed (resume the shards, then merge again)"
            );
        }
    }
    // A partial merge says so on stdout too, where a nightly job reads the result (it was on
    // stderr and in the HTML banner only; the exit status stays the unsharded campaign's).
    let partial = merged.partial.as_ref().map_or(String::new(), |why| format!(" (PARTIAL: {why})"));
    let mut text = format!(
        "merged {} {}: {} runs, {} signature(s) into {into}{partial}\n{}",
        dirs.len(),
        if dirs.len() == 1 { "corpus" } else { "corpora" },
        merged.runs_done,
        merged.table.len(),
        camp_lib::table_text(&merged.table, &saved_examples(out), known.as_ref())
    );
    if let Some(k) = &known {
        text.push_str(&camp_lib::triage_line(&merged.table, k));
    }
    let code = kvsim::triage::exit_status(merged.table.keys(), known.as_ref());
    let html = out.join("report.html");
    match write_report(&html, out, into, &merged, known.as_ref(), code) {
        Ok(()) => text.push_str(&format!("report: {}\n", html.display())),
        Err(e) => eprintln!("warning: the HTML report was not written: {e}"),
    }
    Ok((text, code))
}

fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        if camp_lib::is_scratch(&e.file_name().to_string_lossy()) {
            continue;
        }
        let to = dst.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &to)?;
        } else {
            std::fs::copy(e.path(), to)?;
        }
    }
    Ok(())
}
