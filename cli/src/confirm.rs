//! `kvsim confirm TRACE_OR_FAILURE`: replays the trace's memory log for the violating reads on a
//! KV page backend (CPU reference or CUDA) and measures whose KV reached the attention output.
//! Exit 10 when any leak is confirmed, 0 when none, 3 when the backend is unavailable, 4 when the
//! GPU fails during the replay (CUDA error, out of memory, NVRTC compile error), 2 on bad input.
//!
//! Test hook: `KVSIM_INJECT_GPU_ERROR=cuda|compile|unavailable|too_large` makes the backend's run
//! fail with that error (after a successful selection), so the exit paths are tested without a
//! GPU.

use kvsim::campaign::ReplayFailure;
use kvsim::confirm::{lower, LowerError, MemModel, Select};
use kvsim::report::exit;
use kvsim::report::ViolationOut;
use kvsim::trace::MemOp;
use kvsim_gpu::{AttnShape, Backend, BackendChoice, Dtype, GpuError, Program};

/// The KV element type of a replay (`--dtype`): kvsim-gpu's `Dtype` as a clap choice, spelt by
/// its `name()` (the library has no clap dependency; `main.rs`'s `LikeArg` is the same pattern).
/// A misspelt one is refused with the choices listed (exit 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtypeArg(pub Dtype);

impl clap::ValueEnum for DtypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[DtypeArg(Dtype::F16), DtypeArg(Dtype::Bf16), DtypeArg(Dtype::F32)]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

/// The KV backend of a replay (`--backend`, `run --confirm`): kvsim-gpu's `BackendChoice` as a
/// clap choice, spelt by its `name()`. A misspelt one is refused with the choices listed (exit 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendArg(pub BackendChoice);

impl clap::ValueEnum for BackendArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [BackendArg; 3] =
            [BackendArg(BackendChoice::ALL[0]), BackendArg(BackendChoice::ALL[1]), BackendArg(BackendChoice::ALL[2])];
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

/// `fuzz --confirm`: a backend, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfirmArg(pub Option<BackendArg>);

impl clap::ValueEnum for ConfirmArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [ConfirmArg; 4] = [
            ConfirmArg(None),
            ConfirmArg(Some(BackendArg(BackendChoice::ALL[0]))),
            ConfirmArg(Some(BackendArg(BackendChoice::ALL[1]))),
            ConfirmArg(Some(BackendArg(BackendChoice::ALL[2]))),
        ];
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.map_or("off", |b| b.0.name())))
    }
}

/// `--cpu-check`, parsed by clap through `CpuCheck`'s own parser (its message names the forms).
fn parse_cpu_check(s: &str) -> Result<kvsim_gpu::CpuCheck, String> {
    s.parse()
}

/// `--threshold`: a fraction of the attention weight, 0 ≤ t < 1 (at 1 or more no read could be
/// confirmed, whatever reached it).
fn parse_threshold(s: &str) -> Result<f64, String> {
    let t: f64 = s.parse().map_err(|_| format!("`{s}`: expected a fraction such as 0.01"))?;
    if (0.0..1.0).contains(&t) {
        Ok(t)
    } else {
        Err(format!("`{s}`: a fraction of the attention weight, at least 0 and below 1"))
    }
}

/// How many violating reads `kvsim confirm` (and a campaign's confirmation) replays by default.
pub const DEFAULT_MAX_READS: usize = 8;

#[derive(clap::Args, Debug, Clone)]
pub struct ConfirmOpts {
    /// A trace file (`kvsim run --trace`), or a campaign's seed folder, signature folder (its first
    /// example) or `failure.json`, whose `shrunk.jsonl` (else `trace.jsonl`) is read: the trace
    /// the campaign confirmed.
    pub input: String,
    /// The KV backend: auto (CUDA where a driver, a device and NVRTC are found, else the CPU
    /// reference, with a note), cpu, or cuda (exit 3 when it is unavailable).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendArg,
    #[arg(long, default_value_t = 8)]
    pub heads: u32,
    #[arg(long, default_value_t = 2)]
    pub kv_heads: u32,
    #[arg(long, default_value_t = 64)]
    pub head_dim: u32,
    #[arg(long, value_enum, default_value = "f16")]
    pub dtype: DtypeArg,
    /// Confirm at most this many violating reads (earliest first; at least 1).
    #[arg(long, default_value_t = DEFAULT_MAX_READS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_reads: usize,
    /// Verdict threshold: a read is a confirmed leak when the foreign share of its attention
    /// weight exceeds this fraction (0 ≤ threshold < 1).
    #[arg(long, default_value_t = 0.01, value_parser = parse_threshold)]
    pub threshold: f64,
    /// Confirm the last read of these requests instead of the violating reads (repeatable).
    #[arg(long)]
    pub request: Vec<u32>,
    // --- issue 16 (kvsim-gpu's sampled CPU check) ---
    /// How a CUDA replay is checked on the CPU: `full` (the whole program on the CPU
    /// reference), `sampled` or `sampled:N` (N sampled partitions of each read recomputed, the
    /// merge recomputed from the device's partials: for replays too large for the CPU), `auto`
    /// (full up to 8 GiB of pools, sampled above). The CPU backend ignores it.
    #[arg(long, default_value = "auto", value_parser = parse_cpu_check)]
    pub cpu_check: kvsim_gpu::CpuCheck,
    // --- end issue 16 ---
    /// Print the verdict as one JSON object (docs/report-format.md, "The confirmation") instead of
    /// text; the exit status is the same.
    #[arg(long)]
    pub json: bool,
}

impl ConfirmOpts {
    /// The defaults of `kvsim confirm` (the attention shape, 1% threshold) on `backend`.
    pub fn defaults(input: String, backend: BackendArg, max_reads: usize) -> ConfirmOpts {
        ConfirmOpts {
            input,
            backend,
            heads: 8,
            kv_heads: 2,
            head_dim: 64,
            dtype: DtypeArg(Dtype::F16),
            max_reads,
            threshold: 0.01,
            request: vec![],
            cpu_check: kvsim_gpu::CpuCheck::Auto,
            json: false,
        }
    }
}

/// Verdict of one confirm run: its text, and its fields for `--json`, `run --confirm --json` and
/// `fuzz --confirm` (docs/report-format.md, "The confirmation").
#[derive(serde::Serialize)]
pub struct Verdict {
    /// Reads confirmed as cross-tenant leaks (foreign share over the threshold).
    pub confirmed: usize,
    /// Reads replayed.
    #[serde(rename = "replayed")]
    pub reads: usize,
    /// The trace's violating reads, of which the first `replayed` were replayed (`--max-reads`).
    pub violating_reads: usize,
    /// Reads whose replay does not show what the model saw (see `confirm_log`).
    pub disagreements: usize,
    pub backend: String,
    /// The verdict threshold: a read is confirmed when its foreign share exceeds it.
    pub threshold: f64,
    /// One record per replayed read, in replay order.
    pub reads_replayed: Vec<ReadVerdict>,
    /// Why nothing was replayed, when nothing was (`nothing to confirm: …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nothing: Option<String>,
    #[serde(skip)]
    pub text: String,
}

/// One replayed read's measurement (a `read N:` block of the text).
#[derive(serde::Serialize)]
pub struct ReadVerdict {
    pub read: u64,
    pub request: u32,
    pub tenant: u32,
    pub pool: String,
    pub seq_len: u64,
    pub at_ns: u64,
    /// The violation kind the model reported for the read (or `requested`, for `--request`).
    pub kind: String,
    /// Shares of the read's attention weight: other tenants', the reader's own, never-written
    /// (zero) slots'.
    pub foreign_share: f64,
    pub own_share: f64,
    pub zeros_share: f64,
    pub largest_foreign_tenant_share: f64,
    pub confirmed: bool,
    /// What the model saw that the replayed memory does not hold, when they disagree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagreement: Option<String>,
    /// The CUDA output's largest difference from the CPU reference (CUDA backend only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_abs_diff_vs_cpu: Option<f64>,
}

pub fn run(o: &ConfirmOpts) -> i32 {
    match confirm(o) {
        Ok(v) => {
            if o.json {
                println!("{}", serde_json::to_string_pretty(&v).expect("verdict serialises"));
            } else {
                print!("{}", v.text);
            }
            if v.confirmed > 0 {
                exit::SAFETY
            } else {
                exit::CLEAN
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code
        }
    }
}

/// A memory log to confirm, with where it came from.
pub struct Log {
    /// The trace file's path, or what the log came from (`kvsim run`).
    pub label: String,
    /// The trace's format (`tracefile::FORMAT` for this build's; empty when not from a file).
    pub format: String,
    pub config: kvsim::config::SimConfig,
    pub seed: u64,
    pub mem: Vec<(u64, MemOp)>,
    /// The file line of each memory record (empty when the log did not come from a file).
    pub lines: Vec<usize>,
    pub violations: Vec<ViolationOut>,
    /// The requests a `--trace-filter` trace kept (`None`: the whole run's trace).
    pub filtered_to: Option<Vec<u32>>,
    /// The trace's run was judged by the noninterference check too (`Header::noninterference`).
    pub noninterference: bool,
}

pub fn confirm(o: &ConfirmOpts) -> Result<Verdict, ReplayFailure> {
    let log = read_log(&o.input)?;
    // The log's own checks first (a page outside its pool names its line), then the trace as a
    // whole. A log that fails its checks is first re-run too: when the trace is not its own run
    // (an edited record), that is what is said, with the check that failed after it (it said
    // only "invalid memory log", where `shrink` said the trace was edited).
    let verdict = match confirm_log(&log, o) {
        Ok(v) => v,
        Err(e) if e.exit_code == exit::BAD_INPUT => {
            verify_trace(&log).map_err(|d| ReplayFailure::bad_input(format!("{d}; its memory log: {e}")))?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    verify_trace(&log)?;
    Ok(verdict)
}

/// The trace must be its own run: its configuration is re-run and compared record by record, as
/// `kvsim replay` does (an edited tenant or a deleted record changed the verdict silently). A
/// trace of another format was written by another kvsim and cannot be re-run here.
fn verify_trace(log: &Log) -> Result<(), ReplayFailure> {
    let bad = ReplayFailure::bad_input;
    let path = &log.label;
    if log.format != kvsim::tracefile::FORMAT {
        return Ok(());
    }
    match super::replay_trace(path, false) {
        Ok(_) => Ok(()),
        Err(super::ReplayProblem::Bad(m)) => Err(bad(m)),
        Err(super::ReplayProblem::Diverged(lines)) => Err(bad(format!(
            "{path}: the trace is not its own configuration's run (edited, or written by another build): {}; `kvsim replay {path}` shows the difference",
            lines[0].trim_start_matches("replay ")
        ))),
    }
}

/// Why a log has no read to replay: no violation (a channel's run: its findings are differences
/// between runs, not reads), violations of kinds that are not foreign reads (own KV of other
/// positions, a leak: it said "no matching attention read" of a misplaced read the story tells),
/// or `e`, the lowering's own reason.
fn no_read_why(log: &Log, e: String) -> String {
    if log.violations.is_empty() {
        return if log.noninterference {
            "the run has no violation of its own; its noninterference check's findings (timing or status \
             channels) are differences between two runs, not reads of another tenant's KV, and are not replayed"
                .to_string()
        } else {
            "the run has no violation".to_string()
        };
    }
    if log.violations.iter().any(|v| kvsim::campaign::is_confirmable(&v.kind)) {
        return e;
    }
    let mut kinds: Vec<&str> = log.violations.iter().map(|v| v.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    format!(
        "its violations ({}) are not reads of foreign or unwritten KV; confirm replays cross_tenant_read, \
         cross_request_read and uninitialized_read",
        kinds.join(", ")
    )
}

/// Reads a trace file, or a campaign's saved example's (`super::saved_file`).
pub fn read_log(input: &str) -> Result<Log, ReplayFailure> {
    let bad = ReplayFailure::bad_input;
    // A saved example's shrunk trace first: the one its campaign confirmed.
    let path = super::saved_file_of(input, &["shrunk.jsonl", "trace.jsonl"]).map_err(bad)?;
    let log = super::tracefile::open(&path, kvsim::tracefile::ReadOptions { any_version: true })
        .and_then(|r| r.mem_log())
        .map_err(|e| bad(e.to_string()))?;
    Ok(Log {
        format: log.header.format.clone(),
        label: path,
        config: log.header.config,
        seed: log.header.seed,
        mem: log.mem,
        lines: log.lines,
        violations: log.footer.violations,
        filtered_to: log.header.filter.map(|f| f.requests.into_iter().collect()),
        noninterference: log.header.noninterference.is_some(),
    })
}

/// Lowers and replays a memory log's violating reads (or `o.request`'s last reads).
pub fn confirm_log(log: &Log, o: &ConfirmOpts) -> Result<Verdict, ReplayFailure> {
    let bad = ReplayFailure::bad_input;
    let path = &log.label;
    let dtype = o.dtype.0;
    let shape = AttnShape { heads: o.heads, kv_heads: o.kv_heads, head_dim: o.head_dim, dtype };
    // Named by its flags (the library's message shows the shape's Debug form).
    if o.kv_heads == 0 || o.heads == 0 || !o.heads.is_multiple_of(o.kv_heads) {
        return Err(bad(format!(
            "--heads {} --kv-heads {}: --heads must be a non-zero multiple of --kv-heads (grouped-query attention)",
            o.heads, o.kv_heads
        )));
    }
    // Named by the flags too (it printed the shape's Debug form, and no flag).
    shape
        .validate()
        .map_err(|e| bad(format!("--heads {} --kv-heads {} --head-dim {}: {e}", o.heads, o.kv_heads, o.head_dim)))?;
    // A log that breaks a rule or a limit is bad input (exit 2), never "nothing to confirm".
    let at = |e: &LowerError| match e {
        LowerError::Invalid { op: Some(i), .. } => match log.lines.get(*i) {
            Some(line) => format!("{path}:{line}"),
            None => format!("{path}: memory record {}", i + 1),
        },
        _ => path.clone(),
    };
    kvsim::confirm::validate_mem_log(&log.mem, &log.config)
        .map_err(|e| bad(format!("{}: invalid memory log: {e}", at(&e))))?;
    let select = if o.request.is_empty() {
        Select::Violations { violations: &log.violations, max: o.max_reads }
    } else {
        Select::Requests(&o.request)
    };
    let mut out = String::new();
    let lowered = match lower(&log.mem, MemModel::of(&log.config), select, shape) {
        Ok(l) => l,
        Err(LowerError::NoRead(e)) if o.request.is_empty() => {
            let why = no_read_why(log, e);
            out.push_str(&format!("{path}: nothing to confirm: {why}\n"));
            return Ok(Verdict {
                confirmed: 0,
                reads: 0,
                violating_reads: kvsim::confirm::violating_reads(&log.violations),
                disagreements: 0,
                backend: "none".into(),
                threshold: o.threshold,
                reads_replayed: Vec::new(),
                nothing: Some(why),
                text: out,
            });
        }
        Err(LowerError::NoRead(_)) => {
            let asked = o.request.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(" --request ");
            let them = if o.request.len() == 1 { "it" } else { "them" };
            return Err(bad(match &log.filtered_to {
                // A filtered trace holds the violating requests' records alone: another request's
                // reads were dropped, not missing from the run.
                Some(kept) if o.request.iter().any(|r| !kept.contains(r)) => format!(
                    "{path}: --request {asked}: no attention read of {them} in the trace: it was recorded with \
                     --trace-filter, which keeps the violating requests alone ({}); record the trace without \
                     --trace-filter to confirm another request",
                    if kept.is_empty() {
                        "none".to_string()
                    } else {
                        kept.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
                    }
                ),
                _ => format!(
                    "{path}: --request {asked}: no attention read of {them} in the trace (its requests are 0 to {})",
                    super::fuzz::case_requests(&log.config).saturating_sub(1)
                ),
            }));
        }
        Err(e @ LowerError::Invalid { .. }) => return Err(bad(format!("{}: invalid memory log: {e}", at(&e)))),
    };
    let (mut backend, note) =
        kvsim_gpu::select(o.backend.0).map_err(|e| gpu_error(o.backend.0.name(), "selecting the backend", e))?;
    backend.set_cpu_check(o.cpu_check);
    let mut backend = inject_failure(backend);
    if let Some(n) = note {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&format!(
        "{path}: scenario {}, seed {}, profile {}; replaying {} of {} memory ops over {} pages on the {} backend ({} heads, {} KV heads, head dim {}, {})\n",
        log.config.name,
        log.seed,
        log.config.profile,
        lowered.ops_kept,
        lowered.ops_total,
        lowered.pages_kept,
        backend.name(),
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        shape.dtype.name()
    ));
    let mut results =
        backend.run(&lowered.program).map_err(|e| gpu_error(o.backend.0.name(), &format!("replaying {path}"), e))?;
    // The program's tenant ids back to the run's, where the lowering numbered them densely.
    if let Some(ids) = &lowered.tenants {
        for r in &mut results {
            r.per_tenant.iter_mut().for_each(|(t, _)| *t = ids[*t as usize]);
            r.tokens_per_tenant.iter_mut().for_each(|(t, _)| *t = ids[*t as usize]);
        }
    }
    let (mut confirmed, mut disagreements) = (0, 0);
    let mut reads = Vec::with_capacity(results.len());
    for (t, r) in lowered.targets.iter().zip(&results) {
        let is_confirmed = r.foreign_share > o.threshold;
        let verdict = if is_confirmed {
            confirmed += 1;
            "CONFIRMED".to_string()
        } else {
            "not confirmed, below the threshold".to_string()
        };
        // Enough digits that the share and the threshold read as different numbers ("100.0%,
        // not over 100.0%" for 99.983% against 99.985%).
        let digits = (1..=6)
            .find(|&d| format!("{:.d$}", r.foreign_share * 100.0) != format!("{:.d$}", o.threshold * 100.0))
            .unwrap_or(1);
        // What the model said about this read must show in the replay's output.
        // What the model said about this read must show in the replayed memory: the tokens the
        // reader's attention read, by the tenant their stored provenance names.
        let (other, own) = r.tokens_per_tenant.iter().fold(
            (0, 0),
            |(o, w), &(x, n)| {
                if x == t.tenant {
                    (o, w + n)
                } else {
                    (o + n, w)
                }
            },
        );
        let disagreement = match t.kind.as_str() {
            "cross_tenant_read" if other == 0 => Some("the model saw another tenant's KV"),
            "uninitialized_read" if r.zero_tokens == 0 => Some("the model saw never-written (zero) slots"),
            "cross_request_read" if own == 0 => Some("the model saw another request of the tenant"),
            _ => None,
        };
        let mut shares: Vec<(u32, f64)> = r.per_tenant.clone();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let top: Vec<String> = shares.iter().take(6).map(|(t, s)| format!("tenant {t} {:.1}%", s * 100.0)).collect();
        let largest_foreign = shares.iter().filter(|(x, _)| *x != t.tenant).map(|(_, s)| *s).fold(0.0f64, f64::max);
        out.push_str(&format!(
            "read {}: request {} (tenant {}) on {}, {} tokens at {} [{}]\n  foreign {:.digits$}% · own {:.1}% · zeros {:.1}% · largest single foreign tenant {:.1}% · {}\n  {verdict} (threshold: foreign share > {:.digits$}%)",
            t.id,
            t.request,
            t.tenant,
            t.pool,
            t.seq_len,
            kvsim::report::secs(t.at_ns),
            t.kind,
            r.foreign_share * 100.0,
            r.own_share * 100.0,
            r.zeros_share * 100.0,
            largest_foreign * 100.0,
            match (top.is_empty(), r.tokens_per_tenant.is_empty()) {
                (false, _) => top.join(", "),
                (true, true) => "no tenant's KV (zeros only)".to_string(),
                // A sampled CPU check (issue 16) counts tokens but computes no per-tenant weights.
                (true, false) => r
                    .tokens_per_tenant
                    .iter()
                    .map(|(t, n)| format!("tenant {t} {n} tokens"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            o.threshold * 100.0
        ));
        if let Some(d) = r.max_abs_diff_vs_cpu {
            out.push_str(&format!("; max |cuda - cpu| = {d:.2e}"));
        }
        reads.push(ReadVerdict {
            read: t.id,
            request: t.request,
            tenant: t.tenant,
            pool: t.pool.to_string(),
            seq_len: t.seq_len,
            at_ns: t.at_ns,
            kind: t.kind.clone(),
            foreign_share: r.foreign_share,
            own_share: r.own_share,
            zeros_share: r.zeros_share,
            largest_foreign_tenant_share: largest_foreign,
            confirmed: is_confirmed,
            disagreement: disagreement.map(str::to_string),
            max_abs_diff_vs_cpu: r.max_abs_diff_vs_cpu,
        });
        if let Some(what) = disagreement {
            disagreements += 1;
            out.push_str(&format!(
                "\n  DISAGREEMENT between model and replay: {what}, the replayed memory holds none — investigate"
            ));
        }
        out.push('\n');
    }
    // Said when `--max-reads` left some out: "7 of 8" reads of a run with 82 is not the run.
    let all = kvsim::confirm::violating_reads(&log.violations);
    if o.request.is_empty() && all > results.len() {
        out.push_str(&format!(
            "note: the first {} of the trace's {all} violating reads replayed (--max-reads {} to replay more)\n",
            results.len(),
            all
        ));
    }
    out.push_str(&format!(
        "verdict: {confirmed} of {} read(s) confirmed as cross-tenant leaks{} (exit {})\n",
        results.len(),
        if disagreements > 0 { format!(", {disagreements} model/replay disagreement(s)") } else { String::new() },
        if confirmed > 0 { exit::SAFETY } else { exit::CLEAN }
    ));
    Ok(Verdict {
        confirmed,
        reads: results.len(),
        violating_reads: all,
        disagreements,
        backend: backend.name().to_string(),
        threshold: o.threshold,
        reads_replayed: reads,
        nothing: None,
        text: out,
    })
}

/// The exit code and message of a backend error: 3 when the backend is unavailable, 4 when the
/// GPU failed at run time (a CUDA driver error — out of memory, a failed launch — or an NVRTC
/// compile error), 2 when the program is invalid or over a size limit (bad input).
pub fn gpu_error(backend: &str, doing: &str, e: GpuError) -> ReplayFailure {
    let (exit_code, message) = match e {
        GpuError::Unavailable(why) => (exit::DIVERGED, format!("backend {backend} unavailable: {why}")),
        e @ (GpuError::Cuda(_) | GpuError::Compile(_)) => {
            (exit::GPU_RUNTIME, format!("GPU failure while {doing} on the {backend} backend: {e}"))
        }
        e @ (GpuError::InvalidProgram(_) | GpuError::TooLarge { .. }) => (exit::BAD_INPUT, format!("{doing}: {e}")),
    };
    ReplayFailure { exit_code, message }
}

/// A backend whose every run fails with one error (the `KVSIM_INJECT_GPU_ERROR` test hook).
struct Failing {
    name: &'static str,
    error: GpuError,
}

impl Backend for Failing {
    fn name(&self) -> &'static str {
        self.name
    }
    fn run(&mut self, _: &Program) -> Result<Vec<kvsim_gpu::AttendResult>, GpuError> {
        Err(self.error.clone())
    }
}

fn inject_failure(backend: Box<dyn Backend>) -> Box<dyn Backend> {
    let Ok(kind) = std::env::var("KVSIM_INJECT_GPU_ERROR") else { return backend };
    let error = match kind.as_str() {
        "cuda" => GpuError::Cuda("alloc pool K: CUDA_ERROR_OUT_OF_MEMORY (injected)".into()),
        "compile" => GpuError::Compile("kernels.cu(1): error: injected".into()),
        "unavailable" => GpuError::Unavailable("injected".into()),
        "too_large" => GpuError::TooLarge { what: "injected pools".into(), bytes: 2, limit_bytes: 1 },
        _ => return backend,
    };
    Box::new(Failing { name: backend.name(), error })
}
