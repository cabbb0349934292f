//! Start-up log parser for `kvsim audit`.
//!
//! Reads the log of one or more sglang / vLLM server launches and extracts the
//! KV-pool facts each engine prints while it starts: pool size in tokens, context
//! length, page size, scheduler limits, disaggregation role and version. The
//! result is one [`NodeFacts`] per (launch, DP rank) found in the file.
//!
//! Lines recognised (formats checked against the upstream sources):
//!
//! * sglang scheduler summary (`scheduler.py`):
//!   `max_total_num_tokens=…, chunked_prefill_size=…, max_prefill_tokens=…,
//!   max_running_requests=…, context_len=…, available_gpu_mem=… GB`
//!   (older releases print a subset of these keys);
//! * sglang memory pool (`memory_pool.py`): `KV Cache is allocated. #tokens: N, …`;
//! * sglang `server_args=ServerArgs(…)` dump: `context_length=`, `page_size=`,
//!   `chunked_prefill_size=`, `max_prefill_tokens=`, `disaggregation_mode=`;
//! * sglang version lines: `sglang version: X`, `sglang: X`, and pip's
//!   `Name: sglang` / `Version: X` pair (a bare `Version: X` only sets the version);
//! * vLLM: `vLLM API server version X`, `non-default args: {…}` /
//!   `args: Namespace(…)` (`max_model_len`, `block_size`, `kv_role`),
//!   `Initializing a V1 LLM engine (vX) with config: … max_seq_len=N`,
//!   `Using max model len N`, `Chunked prefill is enabled with max_num_batched_tokens=N`,
//!   `GPU KV cache size: N tokens` (also `XPU …`, `CPU …`, `GPU + host …`),
//!   `Maximum concurrency for N tokens per request: F x`;
//! * vLLM's V0 engine (`Initializing an LLM engine with config: … max_seq_len=N` before 0.7,
//!   `Initializing a V0 LLM engine (vX) with config: …` from 0.7; printed once per launch, so a
//!   second one opens a new launch), the pool in
//!   blocks (`# GPU blocks: N, # CPU blocks: M`: tokens = blocks × block size, the block size
//!   deduced from the concurrency line when no argument dump gives it), and the start-up refusal
//!   `The model's max seq len (C) is larger than the maximum number of tokens that can be stored
//!   in KV cache (P)` (V1: `To serve at least one request with the models's max seq len (C)`);
//! * vLLM ≥ 0.10's ASCII-art banner `… version X`;
//! * sglang's scheduler error `Input length (L tokens) exceeds the maximum allowed length
//!   (N tokens)`: N is `max_req_input_len`, which pins the pool at N + 6 when that is below the
//!   context;
//! * sglang 0.5.23's `KV pool holds N tokens, fewer than --context-length C`: the pool it serves
//!   with (page-interleave widening included) and the context, and a build of 0.5.23 or later;
//! * the launch command (`python -m sglang.launch_server …`, `vllm serve …`, continued over
//!   lines ending in `\`): `--context-length`, `--page-size`, `--disaggregation-mode`,
//!   `--max-model-len`, `--block-size`, `--max-total-tokens`, and `kv_role` in
//!   `--kv-transfer-config`;
//! * server arguments dumped one per line as `key=value` or `key: value` (a pretty-printed
//!   `ServerArgs(` repr, a debug dump, a YAML config): `context_length`, `page_size`,
//!   `disaggregation_mode`, `max_model_len`, `block_size`, `max_total_num_tokens`,
//!   `max_total_tokens`.
//!
//! sglang's `max_total_tokens` (`--max-total-tokens`) caps the profiled pool; it is taken as the
//! pool, said to be assumed, only when no pool is printed (a launch command checked before the
//! server starts): the pool is at most the cap.
//!
//! Rules: ANSI colour escapes are stripped first; numbers may carry thousands
//! separators (`681,280`); `None` and `-1` ("unset" / "disabled" in both engines'
//! argument dumps) read as missing. Lines from different ranks may be interleaved:
//! sglang's `[date time DP0 TP0 …]` prefix and vLLM's `(EngineCore_DP0 pid=…)`
//! tag pick the rank, ranks are grouped by their DP index and PP stage (the TP/EP ranks of
//! one group share one pool; `kvsim audit` then merges groups that agree), and lines without a rank fill in for every rank of their
//! launch. When a fact is reported more than once the more authoritative source
//! wins (scheduler summary > allocation / resolved config > argument dump), then
//! the rank-specific line, then the earlier line. Nothing is inferred: a fact the
//! log does not print stays `None`.
//!
//! A new launch starts at a `server_args=ServerArgs(` dump, a vLLM argument dump,
//! an engine version line or a `Starting sglang|vllm …` banner, once the current
//! launch has already seen that kind of line or has got past its argument dumps — unless the
//! marker's timestamp is earlier than that launch's latest line: the log is out of order, and the
//! marker belongs to the launch it predates. Launches are numbered in time order when each prints
//! times (logs joined newest first), else in the file's order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

/// Serving engine that wrote the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// sglang (`python -m sglang.launch_server`).
    Sglang,
    /// vLLM (`vllm serve`).
    Vllm,
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Sglang => "sglang",
            Engine::Vllm => "vllm",
        })
    }
}

/// Disaggregation role of a node: from sglang's `disaggregation_mode` or vLLM's
/// `kv_role` (`kv_producer` = prefill, `kv_consumer` = decode), or given by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Prefill node (`disaggregation_mode='prefill'`, `kv_role='kv_producer'`).
    Prefill,
    /// Decode node (`disaggregation_mode='decode'`, `kv_role='kv_consumer'`).
    Decode,
    /// Not disaggregated, `kv_both`, or not printed.
    Unknown,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Unknown => "unknown",
        })
    }
}

/// KV-pool facts of one (launch, DP rank) found in a log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeFacts {
    /// File name given by the caller.
    pub source: String,
    /// 0-based index of the launch within the file.
    pub launch: u32,
    /// Rank prefix, e.g. `"DP0 TP0"` (sglang) or `"DP0"` (vLLM engine core).
    pub rank: Option<String>,
    /// Engine whose start-up lines were found.
    pub engine: Option<Engine>,
    /// The other engine, and its line, when this launch's lines are of both (two logs joined so
    /// that one's lines fell into the other's launch): refused by the audit.
    #[serde(skip)]
    pub other_engine: Option<(Engine, usize)>,
    /// Engine version, e.g. `"0.5.16"`.
    pub version: Option<String>,
    /// Disaggregation role; `Unknown` when not printed.
    pub role: Role,
    /// sglang `page_size`, vLLM `block_size`.
    pub page_size: Option<u64>,
    /// sglang `max_total_num_tokens` (else `KV Cache is allocated. #tokens`),
    /// vLLM `GPU KV cache size`.
    pub pool_tokens: Option<u64>,
    /// sglang `context_len` (else `context_length`), vLLM `max_model_len`.
    pub context_len: Option<u64>,
    /// sglang `chunked_prefill_size`, vLLM `max_num_batched_tokens` of its
    /// `Chunked prefill is enabled with …` line.
    pub chunked_prefill_size: Option<u64>,
    /// sglang `max_prefill_tokens`.
    pub max_prefill_tokens: Option<u64>,
    /// sglang `max_running_requests` of the scheduler summary.
    pub max_running_requests: Option<u64>,
    /// sglang `available_gpu_mem` (GB) of the scheduler summary.
    pub available_gpu_mem_gb: Option<f64>,
    /// vLLM `Maximum concurrency for N tokens per request: F x`.
    pub vllm_max_concurrency: Option<f64>,
    /// vLLM `# GPU blocks: N` (older releases print blocks, not tokens).
    pub gpu_blocks: Option<u64>,
    /// sglang's `max_req_input_len` as printed in an `Input length (…) exceeds the maximum
    /// allowed length (N tokens)` error.
    pub max_req_input_len: Option<u64>,
    /// 1-based line that provided `pool_tokens`, else the first fact's line.
    pub line: usize,
    /// 1-based line of the engine's refusal to start because the pool cannot hold one request of
    /// the context length (vLLM's `max seq len … is larger than … KV cache` errors).
    pub refused_start: Option<usize>,
    /// 1-based line that provided `context_len`.
    pub context_line: Option<usize>,
    /// 1-based line that provided `page_size`.
    pub page_size_line: Option<usize>,
    /// 1-based line that provided `max_req_input_len`.
    pub max_req_input_line: Option<usize>,
    /// How a value that the log does not print directly was obtained (blocks × block size,
    /// a block size deduced from the concurrency line, a pool from an error message).
    pub derived: Vec<String>,
}

/// Said under a node whose log gives `disaggregation_mode='null'` (`NodeFacts::derived`).
pub const STANDALONE_NOTE: &str =
    "disaggregation_mode='null': a standalone server, neither prefill nor decode; as it runs, a \
     prompt it rejects is answered 400 and no KV moves: it is audited as the prefill/decode node it could become";

/// Why a log could not be parsed. `line` is 1-based; 0 means the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParseError {
    /// File name given by the caller.
    pub source: String,
    /// 1-based line, or 0 for the whole file.
    pub line: usize,
    /// What is wrong (serialised as its message, the field's name before it was typed).
    #[serde(rename = "message")]
    pub kind: ParseErrorKind,
}

/// The kinds of fault a log can have, for callers that match on them; each prints as the
/// message the command shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// Not one sglang or vLLM start-up line in the whole file (`line` 0).
    NoStartupLines,
    /// A recognised line carries a number that does not parse: the token as written, and the
    /// value it was for (a summary key such as `max_total_num_tokens`, or a server argument).
    MalformedNumber { token: String, what: String },
    /// A recognised line names a value no engine runs with: the value as written, the field, and
    /// the values the engine knows.
    UnknownValue { value: String, what: &'static str, known: &'static str },
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseErrorKind::NoStartupLines => f.write_str("no sglang or vLLM start-up lines found"),
            // A well-formed count too large for any engine (past 64 bits) is out of range, not
            // malformed (a 26-digit pool read "malformed number").
            ParseErrorKind::MalformedNumber { token, what } if well_formed_count(token) => {
                write!(f, "number {token:?} for {what} is out of range: it does not fit in 64 bits")
            }
            ParseErrorKind::MalformedNumber { token, what } => write!(f, "malformed number {token:?} for {what}"),
            ParseErrorKind::UnknownValue { value, what, known } => {
                write!(f, "unknown {what} {value:?} (the engine knows {known})")
            }
        }
    }
}

impl Serialize for ParseErrorKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl ParseError {
    /// What is wrong, as printed after the location.
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.source, self.kind)
        } else {
            write!(f, "{}:{}: {}", self.source, self.line, self.kind)
        }
    }
}

impl std::error::Error for ParseError {}

/// sglang's `max_req_input_len`: `min(context_len - 1, pool_tokens - 1) - 5`
/// (saturating). The scheduler rejects a prompt of this length or longer.
pub fn max_req_input_len(context_len: u64, pool_tokens: u64) -> u64 {
    crate::intake::max_req_input_len(context_len, pool_tokens)
}

/// Longest prompt sglang's scheduler accepts: it rejects `len >= max_req_input_len`,
/// so this is `min(context_len - 1, pool_tokens - 1) - 6` (saturating; 0 also when
/// `max_req_input_len` is 0 and nothing is accepted, which sglang refuses to start with).
pub fn max_accepted_prompt(context_len: u64, pool_tokens: u64) -> u64 {
    max_req_input_len(context_len, pool_tokens).saturating_sub(1)
}

/// Prompt lengths `lo..hi` (lo inclusive, hi exclusive) that sglang's tokenizer
/// admits (it rejects `len >= context_len`) but the prefill scheduler rejects:
/// `max_accepted_prompt + 1 .. context_len`, i.e. `lo = min(ctx - 1, pool - 1) - 5`.
/// `None` when the band is empty.
pub fn rejection_band(context_len: u64, pool_tokens: u64) -> Option<(u64, u64)> {
    let lo = max_req_input_len(context_len, pool_tokens);
    (lo < context_len).then_some((lo, context_len))
}

/// Parse one log file. `source` names it in the results and errors.
///
/// Errors only when no sglang or vLLM start-up line is found at all, or when a
/// recognised line carries a malformed number.
pub fn parse_log(source: &str, text: &str) -> Result<Vec<NodeFacts>, ParseError> {
    let p = patterns();
    let mut launches = vec![Launch::default()];
    let mut prev_name: Option<String> = None;
    // A launch command continued over several lines with a trailing `\`.
    let mut command: Option<Engine> = None;

    for (idx, raw) in text.lines().enumerate() {
        let line_no = idx + 1;
        let stripped = p.ansi.replace_all(raw, "");
        let line: &str = &stripped;
        if line.trim().is_empty() {
            continue;
        }
        let scope = rank_scope(p, line);
        let msg = message(p, line);
        let at = |kind| ParseError { source: source.to_string(), line: line_no, kind };
        let mut info = classify(p, line, msg, prev_name.as_deref()).map_err(at)?;
        if let Some(engine) = command.filter(|_| p.launch_cmd.find(line).is_none()) {
            info.engine(engine, false);
            for f in p.cli_flag.captures_iter(line) {
                arg_fact(&mut info, &f[1].replace('-', "_"), &f[2]).map_err(at)?;
            }
        }
        let continued = line.trim_end().ends_with('\\');
        command = match p.launch_cmd.captures(line) {
            Some(c) if continued => Some(if c[1].starts_with("sglang") { Engine::Sglang } else { Engine::Vllm }),
            _ if continued => command,
            _ => None,
        };
        prev_name = p.pip_name.captures(msg).map(|c| c[1].to_ascii_lowercase());

        let at_time = stamp(p, line);
        if let Some(marker) = info.marker {
            // A marker past the current launch's progress opens a new launch, unless its time is
            // earlier than that launch's latest line: the log is out of order (ranks or processes
            // interleaved by a collector, or pasted out of order), and the marker belongs to the
            // launch it predates. A marker the launch has already seen always opens a new one.
            let starts_new = launches.last().is_some_and(|l| {
                l.seen.contains(&marker)
                    || (marker.ends_progressed_launch()
                        && l.progressed
                        && !matches!((at_time, l.latest), (Some(t), Some(last)) if earlier(t, last)))
            });
            if starts_new {
                launches.push(Launch::default());
            }
        }
        let Some(launch) = launches.last_mut() else {
            continue;
        };
        if let Some(marker) = info.marker {
            launch.seen.insert(marker);
        }
        launch.progressed |= info.progressed;
        if let Some(t) = at_time.filter(|_| info.recognized) {
            launch.latest = Some(launch.latest.map_or(t, |last| if earlier(last, t) { t } else { last }));
            launch.earliest = Some(launch.earliest.map_or(t, |first| if earlier(t, first) { t } else { first }));
        }
        if info.recognized {
            launch.recognized = true;
            launch.first_line.get_or_insert(line_no);
        }
        for (fact, prio) in info.facts {
            launch.record(scope.as_ref(), fact, prio, line_no);
        }
    }

    // Launches are numbered in time order, so that "the last launch" is the server that runs now:
    // two logs joined newest first hold two launches out of time order. When every launch prints
    // times, they are ordered by their earliest line (stable: equal or unordered times keep the
    // file's order); without times, by the file's order.
    launches.retain(|l| l.recognized);
    let stamps: Option<Vec<Stamp>> = launches.iter().map(|l| l.earliest).collect();
    if let Some(stamps) = stamps {
        // One kind of stamp throughout (with a year, or all without one): a total order. Mixed
        // kinds cannot be ordered reliably, and keep the file's order.
        let with_year = stamps.iter().filter(|t| t.0 != 0).count();
        if with_year == stamps.len() || with_year == 0 {
            let mut keyed: Vec<(Stamp, Launch)> = stamps.into_iter().zip(launches).collect();
            keyed.sort_by_key(|(t, _)| *t);
            launches = keyed.into_iter().map(|(_, l)| l).collect();
        }
    }
    let mut out = Vec::new();
    for (index, launch) in (0u32..).zip(launches) {
        launch.emit(source, index, &mut out);
    }
    if out.is_empty() {
        return Err(ParseError { source: source.to_string(), line: 0, kind: ParseErrorKind::NoStartupLines });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Facts and their sources

/// The version a log with sglang's small-pool warning has at least (the warning is new in
/// 0.5.23): a lower bound, which `audit::default_profile` reads as that release.
pub const SMALL_POOL_WARNING_SINCE: &str = ">=0.5.23";

/// Argument dumps: what the user asked for.
const P_ARGS: u8 = 1;
/// Values the engine resolved or allocated (KV allocation, engine config, version lines).
const P_RESOLVED: u8 = 2;
/// The engine's own summary of the pool it runs with.
const P_SUMMARY: u8 = 3;
/// The capacity the engine serves with, after every widening (sglang 0.5.23's small-pool
/// warning: `managers/tp_worker.py` `get_worker_info` multiplies the logical pool by the
/// page-interleave shard size, which the scheduler summary's `max_total_num_tokens` does not).
const P_SERVED: u8 = 4;

#[derive(Debug, Clone, PartialEq)]
enum Fact {
    Engine(Engine),
    Version(String),
    Role(Role),
    PageSize(u64),
    Pool(u64),
    Context(u64),
    Chunk(u64),
    MaxPrefill(u64),
    MaxRunning(u64),
    AvailMem(f64),
    Concurrency(f64),
    Blocks(u64),
    MaxReqInput(u64),
    /// sglang `--max-total-tokens`: a cap on the profiled pool (`model_runner.py` takes the
    /// smaller of the two), so the pool holds at most this many tokens.
    PoolCap(u64),
    RefusedStart,
    /// sglang `disaggregation_mode='null'`: a server that is neither prefill nor decode.
    Standalone,
}

#[derive(Debug, Clone)]
struct Entry<T> {
    val: T,
    prio: u8,
    line: usize,
    /// The first other value offered, and its line, and whether a more authoritative source
    /// outranked it (else it was offered at the same priority: two pools in one rank's launch):
    /// kept out, and named in a note (`Slot::clash_note`).
    clash: Option<(T, usize, bool)>,
    /// Two values at the same priority and the smaller kept (`Slot::offer_smallest`).
    smaller_kept: bool,
}

#[derive(Debug, Clone)]
struct Slot<T>(Option<Entry<T>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(None)
    }
}

impl<T: Clone + PartialEq> Slot<T> {
    /// Keep the higher-priority value; on a tie keep the one already there (and remember the
    /// first different one).
    fn offer(&mut self, val: T, prio: u8, line: usize) {
        match &mut self.0 {
            None => self.0 = Some(Entry { val, prio, line, clash: None, smaller_kept: false }),
            Some(e) if val == e.val => {
                if prio > e.prio {
                    (e.prio, e.line) = (prio, line);
                }
            }
            Some(e) if prio > e.prio => {
                // A more authoritative source outranks a different value: the value it replaces
                // is named (a log whose argument dump and scheduler summary disagree was once
                // audited at the summary's value without a word).
                let old = (line != e.line).then(|| (e.val.clone(), e.line, true));
                self.0 = Some(Entry { val, prio, line, clash: old, smaller_kept: false });
            }
            Some(e) if line != e.line => {
                e.clash.get_or_insert((val, line, prio < e.prio));
            }
            Some(_) => {}
        }
    }

    /// `offer` of a pool size: of two at the same priority the smaller is kept (the other named
    /// in the note). The tensor-parallel ranks of one group serve one pool no larger than the
    /// smallest rank's (sglang sizes it from the least free memory across them), and of two
    /// pools one rank printed, keeping the first passed a log whose later line showed a gap (the
    /// verdict then hung on the order the ranks' lines were logged in).
    fn offer_smallest(&mut self, val: T, prio: u8, line: usize)
    where
        T: PartialOrd,
    {
        if let Some(e) = self.0.as_mut().filter(|e| prio == e.prio && val != e.val && line != e.line) {
            e.smaller_kept = true;
            if val < e.val {
                let old = (std::mem::replace(&mut e.val, val), std::mem::replace(&mut e.line, line), false);
                e.clash = Some(old);
                return;
            }
        }
        self.offer(val, prio, line);
    }

    /// "`what` …: line A gives X, line B gives Y; the first is audited", when two lines differed.
    fn clash_note(&self, what: &str) -> Option<String>
    where
        T: std::fmt::Display,
    {
        let e = self.0.as_ref()?;
        let (other, at, outranked) = e.clash.as_ref()?;
        let why = if *outranked {
            "the first is audited: its line outranks the other (sglang's served-pool warning > scheduler summary > allocation or resolved config > argument dump)".to_string()
        } else if e.smaller_kept {
            format!(
                "the smaller, line {}'s, is audited (a tensor-parallel group serves no more than its smallest rank's pool; if the other is the serving value, audit the log cut there)",
                e.line
            )
        } else {
            "the first is audited (if the other is the serving value, audit the log cut there)".to_string()
        };
        Some(format!("{what}: line {} gives {}, line {at} gives {other}; {why}", e.line, e.val))
    }

    fn absorb(&mut self, other: &Slot<T>) {
        if let Some(e) = &other.0 {
            self.offer(e.val.clone(), e.prio, e.line);
        }
    }

    /// `own` (rank-specific) wins ties against `fill` (launch-wide).
    fn merged(own: &Slot<T>, fill: &Slot<T>) -> Slot<T> {
        match (&own.0, &fill.0) {
            (Some(a), Some(b)) if b.prio > a.prio => fill.clone(),
            (Some(_), _) => own.clone(),
            (None, _) => fill.clone(),
        }
    }

    fn value(&self) -> Option<T> {
        self.0.as_ref().map(|e| e.val.clone())
    }

    fn line(&self) -> Option<usize> {
        self.0.as_ref().map(|e| e.line)
    }

    /// The first other value offered, and its line (`Entry::clash`).
    fn clash(&self) -> Option<(T, usize)> {
        self.0.as_ref()?.clash.as_ref().map(|(v, l, _)| (v.clone(), *l))
    }
}

#[derive(Debug, Clone, Default)]
struct Facts {
    engine: Slot<Engine>,
    version: Slot<String>,
    role: Slot<Role>,
    page_size: Slot<u64>,
    pool: Slot<u64>,
    context: Slot<u64>,
    chunk: Slot<u64>,
    max_prefill: Slot<u64>,
    max_running: Slot<u64>,
    avail_mem: Slot<f64>,
    concurrency: Slot<f64>,
    blocks: Slot<u64>,
    max_req_input: Slot<u64>,
    pool_cap: Slot<u64>,
    refused: Slot<()>,
    standalone: Slot<()>,
}

impl Facts {
    fn record(&mut self, fact: Fact, prio: u8, line: usize) {
        match fact {
            Fact::Engine(v) => self.engine.offer(v, prio, line),
            Fact::Version(v) => self.version.offer(v, prio, line),
            Fact::Role(v) => self.role.offer(v, prio, line),
            Fact::PageSize(v) => self.page_size.offer(v, prio, line),
            Fact::Pool(v) => self.pool.offer_smallest(v, prio, line),
            Fact::Context(v) => self.context.offer(v, prio, line),
            Fact::Chunk(v) => self.chunk.offer(v, prio, line),
            Fact::MaxPrefill(v) => self.max_prefill.offer(v, prio, line),
            Fact::MaxRunning(v) => self.max_running.offer(v, prio, line),
            Fact::AvailMem(v) => self.avail_mem.offer(v, prio, line),
            Fact::Concurrency(v) => self.concurrency.offer(v, prio, line),
            Fact::Blocks(v) => self.blocks.offer(v, prio, line),
            Fact::MaxReqInput(v) => self.max_req_input.offer(v, prio, line),
            Fact::PoolCap(v) => self.pool_cap.offer(v, prio, line),
            Fact::RefusedStart => self.refused.offer((), prio, line),
            Fact::Standalone => self.standalone.offer((), prio, line),
        }
    }

    fn absorb(&mut self, o: &Facts) {
        self.engine.absorb(&o.engine);
        self.version.absorb(&o.version);
        self.role.absorb(&o.role);
        self.standalone.absorb(&o.standalone);
        self.page_size.absorb(&o.page_size);
        self.pool.absorb(&o.pool);
        self.context.absorb(&o.context);
        self.chunk.absorb(&o.chunk);
        self.max_prefill.absorb(&o.max_prefill);
        self.max_running.absorb(&o.max_running);
        self.avail_mem.absorb(&o.avail_mem);
        self.concurrency.absorb(&o.concurrency);
        self.blocks.absorb(&o.blocks);
        self.max_req_input.absorb(&o.max_req_input);
        self.pool_cap.absorb(&o.pool_cap);
        self.refused.absorb(&o.refused);
    }

    fn merged(own: &Facts, fill: &Facts) -> Facts {
        Facts {
            engine: Slot::merged(&own.engine, &fill.engine),
            version: Slot::merged(&own.version, &fill.version),
            role: Slot::merged(&own.role, &fill.role),
            page_size: Slot::merged(&own.page_size, &fill.page_size),
            pool: Slot::merged(&own.pool, &fill.pool),
            context: Slot::merged(&own.context, &fill.context),
            chunk: Slot::merged(&own.chunk, &fill.chunk),
            max_prefill: Slot::merged(&own.max_prefill, &fill.max_prefill),
            max_running: Slot::merged(&own.max_running, &fill.max_running),
            avail_mem: Slot::merged(&own.avail_mem, &fill.avail_mem),
            concurrency: Slot::merged(&own.concurrency, &fill.concurrency),
            blocks: Slot::merged(&own.blocks, &fill.blocks),
            max_req_input: Slot::merged(&own.max_req_input, &fill.max_req_input),
            pool_cap: Slot::merged(&own.pool_cap, &fill.pool_cap),
            refused: Slot::merged(&own.refused, &fill.refused),
            standalone: Slot::merged(&own.standalone, &fill.standalone),
        }
    }

    fn first_line(&self) -> Option<usize> {
        [
            self.engine.line(),
            self.version.line(),
            self.role.line(),
            self.page_size.line(),
            self.pool.line(),
            self.context.line(),
            self.chunk.line(),
            self.max_prefill.line(),
            self.max_running.line(),
            self.avail_mem.line(),
            self.concurrency.line(),
            self.blocks.line(),
            self.max_req_input.line(),
            self.pool_cap.line(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn node(&self, source: &str, launch: u32, rank: Option<String>, fallback: usize) -> NodeFacts {
        let mut derived = Vec::new();
        let mut pool = self.pool.value();
        let mut pool_line = self.pool.line();
        let mut page_size = self.page_size.value();
        let mut page_size_line = self.page_size.line();
        let context = self.context.value();
        let engine = self.engine.value();
        if let (None, Some(blocks)) = (pool, self.blocks.value()) {
            if page_size.is_none() {
                // vLLM prints `Maximum concurrency for C tokens per request: F x`
                // (`concurrency_fits`): only one power-of-two block size may fit, else it stays
                // unknown.
                if let (Some(f), Some(c), Some(line)) = (self.concurrency.value(), context, self.concurrency.line()) {
                    let fits: Vec<u64> =
                        (0..=10).map(|e| 1u64 << e).filter(|&b| concurrency_fits(f, blocks, b, c)).collect();
                    match fits[..] {
                        [b] => {
                            page_size = Some(b);
                            page_size_line = Some(line);
                            derived.push(format!(
                                "block size {b} deduced from `# GPU blocks: {blocks}` and `Maximum concurrency for {c} tokens per request: {f:.2}x`"
                            ));
                        }
                        // A factor no block size gives (lines of two launches, an edited log)
                        // was dropped without a word, and the pool taken at the default block
                        // size: said, with what a factor below 1 means.
                        [] => derived.push(format!(
                            "CHECK: line {line} says `Maximum concurrency for {} tokens per request: {f:.2}x`, which no \
                             block size gives with {blocks} GPU blocks{}; are these lines of one launch?",
                            crate::report::thousands(c),
                            if f < 1.0 { " (below 1x: by this line one request of the context does not fit the pool)" } else { "" }
                        )),
                        _ => {}
                    }
                }
            }
            if let Some(ps) = page_size {
                if let Some(tokens) = blocks.checked_mul(ps) {
                    pool = Some(tokens);
                    pool_line = self.blocks.line();
                    derived.push(format!("pool = {blocks} GPU blocks × block size {ps} = {tokens} tokens"));
                }
            }
        }
        if let (None, Some(m), Some(c)) = (pool, self.max_req_input.value(), context) {
            // sglang: max_req_input_len = min(context_len - 1, pool - 1) - 5; below the
            // context's own limit the printed value pins the pool exactly.
            if m.saturating_add(6) < c {
                pool = Some(m + 6);
                pool_line = self.max_req_input.line();
                derived.push(format!(
                    "pool = {} tokens: the scheduler's maximum allowed length {m} is min(context - 1, pool - 1) - 5",
                    m + 6
                ));
            } else if m.saturating_add(6) == c {
                // The context's own limit: the pool holds at least the context, which is all the
                // audit needs (any larger pool serves the same prompts). It said "no usable KV
                // pool size".
                pool = Some(c);
                pool_line = self.max_req_input.line();
                derived.push(format!(
                    "pool ≥ {} tokens: the scheduler's maximum allowed length {m} is the context's own limit \
                     (min(context - 1, pool - 1) - 5 with pool ≥ context); audited as {}, as any larger pool admits the same prompts",
                    crate::report::thousands(c),
                    crate::report::thousands(c)
                ));
            }
        }
        if let (None, Some(cap), Some(Engine::Sglang) | None) = (pool, self.pool_cap.value(), engine) {
            // sglang caps the profiled pool at `--max-total-tokens` (0.5.22 srt/model_executor/
            // model_runner.py: `max_total_num_tokens = min(profiled, server_args.max_total_tokens)`),
            // so a log that prints no pool still bounds it: at most the cap. Taken as the pool:
            // a smaller profiled pool only widens the gap.
            pool = Some(cap);
            pool_line = self.pool_cap.line();
            let n = crate::report::thousands(cap);
            derived.push(format!(
                "ASSUMED: pool = {n} tokens from `--max-total-tokens {cap}`: the log prints no pool, and sglang caps the \
                 profiled pool there, so it holds at most {n} (a smaller one only widens the gap); the started \
                 server's `max_total_num_tokens=` line gives the real one"
            ));
        }
        if self.standalone.line().is_some() && self.role.value().is_none_or(|r| r == Role::Unknown) {
            derived.push(STANDALONE_NOTE.to_string());
        }
        // vLLM's concurrency factor against the pool, where the pool is `# GPU blocks` × a logged
        // block size (the blocks are counted in the engine's block size, whatever the log's
        // argument dump says): a factor that does not fit says the logged block size is not the
        // one the blocks were counted in (lines of two launches). Not checked against a `GPU KV
        // cache size` pool: a hybrid model's layers (sliding window, mamba) make both that line
        // and the factor follow other rules.
        if let (Some(f), Some(c), Some(b), Some(ps), Some(line)) =
            (self.concurrency.value(), context, self.blocks.value(), page_size, self.concurrency.line())
        {
            if pool_line == self.blocks.line() && !concurrency_fits(f, b, ps, c) {
                let fits = (f * c as f64 / b.max(1) as f64).round() as u64;
                derived.push(format!(
                    "CHECK: line {line} says `Maximum concurrency for {} tokens per request: {f:.2}x`, but {b} GPU \
                     blocks × block size {ps} give {:.2}x; the factor fits a block size of about {fits}: is \
                     the logged block size this launch's? (the audit uses {b} × {ps})",
                    crate::report::thousands(c),
                    b.saturating_mul(ps) as f64 / c.max(1) as f64,
                ));
            }
        }
        derived.extend(
            [
                self.pool.clash_note("two pools"),
                self.context.clash_note("two context lengths"),
                self.page_size.clash_note("two page sizes"),
            ]
            .into_iter()
            .flatten(),
        );
        NodeFacts {
            source: source.to_string(),
            launch,
            rank,
            engine,
            other_engine: self.engine.clash().filter(|(e, _)| Some(*e) != engine),
            version: self.version.value(),
            role: self.role.value().unwrap_or(Role::Unknown),
            page_size,
            pool_tokens: pool,
            context_len: context,
            chunked_prefill_size: self.chunk.value(),
            max_prefill_tokens: self.max_prefill.value(),
            max_running_requests: self.max_running.value(),
            available_gpu_mem_gb: self.avail_mem.value(),
            vllm_max_concurrency: self.concurrency.value(),
            gpu_blocks: self.blocks.value(),
            max_req_input_len: self.max_req_input.value(),
            line: pool_line.or_else(|| self.first_line()).unwrap_or(fallback),
            refused_start: self.refused.line(),
            context_line: self.context.line(),
            page_size_line,
            max_req_input_line: self.max_req_input.line(),
            derived,
        }
    }
}

// ---------------------------------------------------------------------------
// Launches and ranks

/// Lines that open a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Marker {
    Banner,
    Version,
    ServerArgs,
    VllmArgs,
    /// vLLM's V0 `LLMEngine` start (`Initializing an LLM engine` / `a V0 LLM engine`): printed
    /// once per launch, after the argument dump and the config lines (a chunked-prefill line
    /// comes before it), so only a second one opens a new launch (V1's line is printed by every
    /// DP engine core: not a marker).
    V0EngineInit,
}

impl Marker {
    /// Whether a launch past its argument dumps (`Launch::progressed`) is ended by this marker.
    /// V0's engine line comes after lines that count as progress, so it ends a launch only
    /// when that launch has printed one already.
    fn ends_progressed_launch(self) -> bool {
        !matches!(self, Marker::V0EngineInit)
    }
}

/// Rank of a line: its DP index (None for a TP-only prefix), the prefix text and
/// its numbers for ordering.
#[derive(Debug, Clone)]
struct Scope {
    dp: Option<u32>,
    /// Pipeline stage (`PP1`): stages hold different layers, so each has its own pool.
    pp: Option<u32>,
    label: String,
    order: Vec<u32>,
}

#[derive(Debug, Default)]
struct Group {
    facts: Facts,
    label: Option<(Vec<u32>, String)>,
    /// The rank that printed each recorded line: a node is named by the rank of the line it
    /// cites (it read "TP1 (line 12)" of a line TP5 printed).
    line_labels: BTreeMap<usize, String>,
}

#[derive(Debug, Default)]
struct Launch {
    general: Facts,
    /// Keyed by (DP index, PP stage): the TP/EP ranks of one group share a pool.
    groups: BTreeMap<(Option<u32>, Option<u32>), Group>,
    seen: BTreeSet<Marker>,
    /// Past its argument dumps: a further launch marker opens a new launch.
    progressed: bool,
    recognized: bool,
    first_line: Option<usize>,
    /// The time of its latest recognised line (`stamp`), when lines print one.
    latest: Option<Stamp>,
    /// The time of its earliest recognised line: launches are numbered in this order.
    earliest: Option<Stamp>,
}

impl Launch {
    fn record(&mut self, scope: Option<&Scope>, fact: Fact, prio: u8, line: usize) {
        match scope {
            Some(s) if !matches!(fact, Fact::Engine(_)) => {
                let group = self.groups.entry((s.dp, s.pp)).or_default();
                group.facts.record(fact, prio, line);
                group.line_labels.entry(line).or_insert_with(|| s.label.clone());
                if group.label.as_ref().is_none_or(|(o, _)| s.order < *o) {
                    group.label = Some((s.order.clone(), s.label.clone()));
                }
            }
            _ => self.general.record(fact, prio, line),
        }
    }

    fn emit(mut self, source: &str, index: u32, out: &mut Vec<NodeFacts>) {
        let fallback = self.first_line.unwrap_or(1);
        // TP-only prefixes next to DP-prefixed ones cannot be tied to one DP rank:
        // treat their facts as launch-wide.
        if self.groups.keys().any(|k| *k != (None, None)) {
            if let Some(g) = self.groups.remove(&(None, None)) {
                self.general.absorb(&g.facts);
            }
        }
        if self.groups.is_empty() {
            out.push(self.general.node(source, index, None, fallback));
            return;
        }
        for group in self.groups.values() {
            let facts = Facts::merged(&group.facts, &self.general);
            let rank = group.label.as_ref().map(|(_, l)| l.clone());
            let mut node = facts.node(source, index, rank, fallback);
            if let Some(l) = group.line_labels.get(&node.line) {
                node.rank = Some(l.clone());
            }
            out.push(node);
        }
    }
}

// ---------------------------------------------------------------------------
// Line classification

#[derive(Debug, Default)]
struct LineInfo {
    /// An sglang / vLLM start-up line.
    recognized: bool,
    /// A line printed after the argument dumps of a launch.
    progressed: bool,
    marker: Option<Marker>,
    facts: Vec<(Fact, u8)>,
}

impl LineInfo {
    fn engine(&mut self, engine: Engine, progressed: bool) {
        self.recognized = true;
        self.progressed |= progressed;
        self.facts.push((Fact::Engine(engine), P_ARGS));
    }

    fn push(&mut self, fact: Option<Fact>, prio: u8) {
        if let Some(f) = fact {
            self.facts.push((f, prio));
        }
    }
}

struct Patterns {
    ansi: Regex,
    sgl_rank: Regex,
    vllm_tag: Regex,
    vllm_tag_dp: Regex,
    lead_sgl: Regex,
    /// A line's time: sglang `[2026-03-02 10:11:12…]`, vLLM `INFO 03-02 10:11:12`.
    stamp: Regex,
    lead_level: Regex,
    kv_alloc: Regex,
    sgl_small_pool_pool: Regex,
    sgl_small_pool_context: Regex,
    sgl_version: Regex,
    sgl_check_env: Regex,
    pip_name: Regex,
    pip_version: Regex,
    banner: Regex,
    vllm_version: Regex,
    vllm_engine_init: Regex,
    vllm_max_model_len: Regex,
    vllm_chunked: Regex,
    vllm_kv_size: Regex,
    vllm_concurrency: Regex,
    disagg_mode: Regex,
    kv_role: Regex,
    max_total_num_tokens: Regex,
    max_total_tokens: Regex,
    chunked_prefill_size: Regex,
    max_prefill_tokens: Regex,
    max_running_requests: Regex,
    context_len: Regex,
    available_gpu_mem: Regex,
    context_length: Regex,
    page_size: Regex,
    max_model_len: Regex,
    block_size: Regex,
    max_seq_len: Regex,
    vllm_blocks: Regex,
    vllm_v0_too_small: Regex,
    vllm_v1_too_small: Regex,
    /// V1's refusal goes on with the longest model length the free KV memory holds.
    vllm_v1_estimated: Regex,
    vllm_banner_version: Regex,
    sgl_too_long: Regex,
    arg_line: Regex,
    cli_flag: Regex,
    launch_cmd: Regex,
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("audit log pattern compiles")
}

/// `key=value`, `key: value` or `'key': value`; the value starts at the match end.
fn key(name: &str) -> Regex {
    re(&format!(r#"\b{name}['"]?\s*[:=]\s*"#))
}

fn patterns() -> &'static Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS.get_or_init(|| Patterns {
        ansi: re(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"),
        sgl_rank: re(
            r"\[\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)?((?:\s+[A-Z][A-Z_]*\d+)+)\]",
        ),
        vllm_tag: re(r"^\s*\(([A-Za-z][A-Za-z0-9_]*)(?:\s+rank=\d+)?\s+pid=\d+\)\s*"),
        vllm_tag_dp: re(r"(?:^|_)DP(\d+)(?:_|$)|^EngineCore_(\d+)$"),
        lead_sgl: re(r"^\s*\[\d{4}-\d{2}-\d{2}[^\]]*\]\s*"),
        stamp: re(r"^\s*(?:\([^)]*\)\s*)?(?:\[(\d{4})-|[A-Z]+\s+)(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})"),
        lead_level: re(
            r"^(?:INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL)\s+(?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+)?(?:\[[^\]]*\]|[\w.\-/]+\.py:\d+\]|[\w.\-/]+\.py:\d+:)\s*",
        ),
        kv_alloc: re(r"KV Cache is allocated\.[^#]*#tokens:\s*"),
        sgl_small_pool_pool: re(r"\bKV pool holds\s+"),
        sgl_small_pool_context: re(r"tokens, fewer than --context-length\s+"),
        sgl_version: re(r"(?i)\bsglang\s+version\s*[:=]?\s*v?(\d+\.\d+[\w.+\-]*)"),
        // `python -m sglang.check_env` (`sglang: 0.5.22`), `pip freeze` (`sglang==0.5.22`,
        // `sglang[all]==0.5.22`) and `pip list` (`sglang   0.5.22`).
        sgl_check_env: re(r"(?i)^sglang(?:\[[\w,\-]+\])?\s*(?::|==|\s)\s*v?(\d+\.\d+[\w.+\-]*)\s*$"),
        pip_name: re(r"^\s*Name:\s*(\S+)\s*$"),
        pip_version: re(r"^\s*Version:\s*v?(\d+\.\d+[\w.+\-]*)\s*$"),
        banner: re(r"(?i)^[\s=#*>\-]*starting\s+(?:the\s+)?(sglang|vllm)\b"),
        vllm_version: re(r"\bvLLM API server version\s+v?(\S+)"),
        vllm_engine_init: re(r"\bInitializing an? (V[01] )?LLM engine (?:\(v([^)\s]+)\) )?with config:"),
        vllm_max_model_len: re(r"\bUsing max model len\s+"),
        vllm_chunked: re(r"\bChunked prefill is enabled with max_num_batched_tokens="),
        // vLLM 0.33/0.34 `v1/core/kv_cache_utils.py` `update_kv_cache_capacity`: the pool's
        // device (`GPU` for CUDA, else the device type upper-cased: `XPU`, `CPU`, …), with
        // ` + host` when HiSparse keeps KV in host memory too.
        vllm_kv_size: re(r"\b[A-Z]{2,5}(?: \+ host)? KV cache size:\s*"),
        vllm_concurrency: re(r"\bMaximum concurrency for\s+(\S+)\s+tokens per request:\s*(\S+)"),
        disagg_mode: re(
            r#"\bdisaggregation_mode\s*=\s*['"]?(?:DisaggregationMode\.)?([A-Za-z_]+)"#,
        ),
        kv_role: re(r#"\bkv_role['"]?\s*[:=]\s*['"]?(kv_producer|kv_consumer|kv_both)\b"#),
        max_total_num_tokens: key("max_total_num_tokens"),
        max_total_tokens: key("max_total_tokens"),
        chunked_prefill_size: key("chunked_prefill_size"),
        max_prefill_tokens: key("max_prefill_tokens"),
        max_running_requests: key("max_running_requests"),
        context_len: key("context_len"),
        available_gpu_mem: key("available_gpu_mem"),
        context_length: key("context_length"),
        page_size: key("page_size"),
        max_model_len: key("max_model_len"),
        block_size: key("block_size"),
        max_seq_len: key("max_seq_len"),
        vllm_blocks: re(r"#\s*(?:GPU|gpu|cuda)\s+blocks:\s*"),
        vllm_v0_too_small: re(
            r"max seq len \(([^)]*)\) is larger than the maximum number of tokens that can be stored in KV cache \(([^)]*)\)",
        ),
        vllm_v1_too_small: re(r"To serve at least one request with the models?'s max seq len \(([^)]*)\)"),
        vllm_v1_estimated: re(r"the estimated maximum model length is (\S*?)\.?(?:\s|$)"),
        vllm_banner_version: re(r"[\u{2580}-\u{259F}].*\bversion\s+v?(\d+\.\d+[\w.+\-]*)"),
        sgl_too_long: re(r"Input length \(([^)]*?) tokens\) exceeds the maximum allowed length \(([^)]*?) tokens\)"),
        arg_line: re(
            r#"^\s*['"]?(context_length|page_size|disaggregation_mode|max_model_len|block_size|max_total_num_tokens|max_total_tokens)['"]?\s*[:=]\s*(.*?)\s*,?\s*$"#,
        ),
        cli_flag: re(
            r#"(?:^|\s)--(context-length|page-size|disaggregation-mode|max-model-len|block-size|max-total-tokens)(?:=|\s+)['"]?([^\s'"]+)"#,
        ),
        launch_cmd: re(r"\b(sglang\.launch_server|sglang\s+serve|vllm\s+serve|vllm\.entrypoints\.openai\.api_server)\b"),
    })
}

/// The rank a line was printed by, if its prefix names one.
fn rank_scope(p: &Patterns, line: &str) -> Option<Scope> {
    if let Some(c) = p.vllm_tag.captures(line) {
        let dp = p
            .vllm_tag_dp
            .captures(&c[1])
            .and_then(|d| d.get(1).or_else(|| d.get(2)))
            .and_then(|m| m.as_str().parse::<u32>().ok())?;
        return Some(Scope { dp: Some(dp), pp: None, label: format!("DP{dp}"), order: vec![dp] });
    }
    let c = p.sgl_rank.captures(line)?;
    let mut dp = None;
    let mut pp = None;
    let mut order = Vec::new();
    let mut label = Vec::new();
    for token in c[1].split_whitespace() {
        let split = token.find(|ch: char| ch.is_ascii_digit())?;
        let (name, num) = token.split_at(split);
        let n = num.parse::<u32>().ok()?;
        if name == "DP" {
            dp = Some(n);
        }
        if name == "PP" {
            pp = Some(n);
        }
        order.push(n);
        label.push(token);
    }
    Some(Scope { dp, pp, label: label.join(" "), order })
}

/// The message of a line: without its process tag, timestamp prefix and level header.
fn message<'a>(p: &Patterns, line: &'a str) -> &'a str {
    let mut rest = line;
    for lead in [&p.vllm_tag, &p.lead_sgl, &p.lead_level] {
        if let Some(m) = lead.find(rest) {
            rest = &rest[m.end()..];
        }
    }
    rest
}

/// A line's time as (year, month, day, hour, minute, second); the year is 0 where the line
/// does not print one (vLLM), and two times compare without years when either lacks one.
type Stamp = (u32, u32, u32, u32, u32, u32);

fn stamp(p: &Patterns, line: &str) -> Option<Stamp> {
    let c = p.stamp.captures(line)?;
    let n = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
    Some((n(1).unwrap_or(0), n(2)?, n(3)?, n(4)?, n(5)?, n(6)?))
}

/// Whether `a` is strictly earlier than `b`.
fn earlier(a: Stamp, b: Stamp) -> bool {
    if a.0 == 0 || b.0 == 0 {
        (a.1, a.2, a.3, a.4, a.5) < (b.1, b.2, b.3, b.4, b.5)
    } else {
        a < b
    }
}

fn classify(p: &Patterns, line: &str, msg: &str, prev_name: Option<&str>) -> Result<LineInfo, ParseErrorKind> {
    let mut info = LineInfo::default();

    // sglang scheduler summary.
    // (Any line with a key only the summary prints, the pool or `context_len` (the argument dump
    // says `context_length`), and one other key of the summary: releases differ in which keys
    // they print, the README gives the short form `max_total_num_tokens=…, context_len=…`, and a
    // summary wrapped over two lines, by a terminal or a log shipper, gives each half: the second
    // half's `context_len` was lost.)
    let summary_keys = [
        "max_total_num_tokens=",
        "max_prefill_tokens=",
        "context_len=",
        "chunked_prefill_size=",
        "max_running_requests=",
        "available_gpu_mem=",
    ];
    if (line.contains("max_total_num_tokens=") || line.contains("context_len="))
        && summary_keys.iter().filter(|k| line.contains(*k)).count() >= 2
    {
        info.engine(Engine::Sglang, true);
        let pool = count(line, &p.max_total_num_tokens, "max_total_num_tokens")?;
        info.push(pool.map(Fact::Pool), P_SUMMARY);
        let chunk = count(line, &p.chunked_prefill_size, "chunked_prefill_size")?;
        info.push(chunk.map(Fact::Chunk), P_SUMMARY);
        let prefill = count(line, &p.max_prefill_tokens, "max_prefill_tokens")?;
        info.push(prefill.map(Fact::MaxPrefill), P_SUMMARY);
        let running = count(line, &p.max_running_requests, "max_running_requests")?;
        info.push(running.map(Fact::MaxRunning), P_SUMMARY);
        let ctx = count(line, &p.context_len, "context_len")?;
        info.push(ctx.map(Fact::Context), P_SUMMARY);
        let mem = gigabytes(line, &p.available_gpu_mem, "available_gpu_mem")?;
        info.push(mem.map(Fact::AvailMem), P_SUMMARY);
    }

    // sglang memory pool.
    if line.contains("KV Cache is allocated") {
        info.engine(Engine::Sglang, true);
        let pool = count(line, &p.kv_alloc, "#tokens")?;
        info.push(pool.map(Fact::Pool), P_RESOLVED);
    }

    // sglang 0.5.23's warning when the served pool is below the context (`managers/tp_worker.py`
    // `get_worker_info`: "KV pool holds N tokens, fewer than --context-length C. …"): the pool
    // the engine serves with and its context, and a build of 0.5.23 or later (no earlier wheel
    // has the warning), which a version line, if any, overrides.
    if line.contains("KV pool holds") && line.contains("fewer than --context-length") {
        info.engine(Engine::Sglang, true);
        let pool = count(line, &p.sgl_small_pool_pool, "KV pool holds")?;
        info.push(pool.map(Fact::Pool), P_SERVED);
        let ctx = count(line, &p.sgl_small_pool_context, "--context-length")?;
        info.push(ctx.map(Fact::Context), P_SERVED);
        info.push(Some(Fact::Version(SMALL_POOL_WARNING_SINCE.to_string())), P_ARGS);
    }

    // sglang argument dump.
    if line.contains("ServerArgs(") {
        info.engine(Engine::Sglang, false);
        info.marker = Some(Marker::ServerArgs);
        let ctx = count(line, &p.context_length, "context_length")?;
        info.push(ctx.map(Fact::Context), P_ARGS);
        let page = count(line, &p.page_size, "page_size")?;
        info.push(page.map(Fact::PageSize), P_ARGS);
        let chunk = count(line, &p.chunked_prefill_size, "chunked_prefill_size")?;
        info.push(chunk.map(Fact::Chunk), P_ARGS);
        let prefill = count(line, &p.max_prefill_tokens, "max_prefill_tokens")?;
        info.push(prefill.map(Fact::MaxPrefill), P_ARGS);
        let cap = count(line, &p.max_total_tokens, "max_total_tokens")?;
        info.push(cap.map(Fact::PoolCap), P_ARGS);
    }

    if line.contains("The server is fired up and ready to roll") {
        info.engine(Engine::Sglang, true);
    }

    // Version lines.
    if let Some(c) = p.sgl_version.captures(msg).or_else(|| p.sgl_check_env.captures(msg)) {
        info.engine(Engine::Sglang, false);
        info.marker = Some(Marker::Version);
        info.push(Some(Fact::Version(c[1].to_string())), P_RESOLVED);
    } else if let Some(c) = p.pip_version.captures(msg) {
        let version = Some(Fact::Version(c[1].to_string()));
        match prev_name {
            Some("sglang") => {
                info.engine(Engine::Sglang, false);
                info.marker = Some(Marker::Version);
                info.push(version, P_RESOLVED);
            }
            Some("vllm") => {
                info.engine(Engine::Vllm, false);
                info.marker = Some(Marker::Version);
                info.push(version, P_RESOLVED);
            }
            Some(_) => {}
            None => {
                info.marker = Some(Marker::Version);
                info.push(version, P_ARGS);
            }
        }
    }

    // vLLM.
    if let Some(c) = p.vllm_version.captures(line) {
        info.engine(Engine::Vllm, false);
        info.marker = Some(Marker::Version);
        info.push(Some(Fact::Version(c[1].to_string())), P_RESOLVED);
    }
    if line.contains("non-default args:") || (line.contains("args: Namespace(") && line.contains("max_model_len")) {
        info.engine(Engine::Vllm, false);
        info.marker = Some(Marker::VllmArgs);
        let ctx = count(line, &p.max_model_len, "max_model_len")?;
        info.push(ctx.map(Fact::Context), P_ARGS);
        let page = count(line, &p.block_size, "block_size")?;
        info.push(page.map(Fact::PageSize), P_ARGS);
    }
    if let Some(c) = p.vllm_engine_init.captures(line) {
        info.engine(Engine::Vllm, true);
        // vLLM 0.7–0.10 print `a V0 LLM engine` (engine/llm_engine.py), 0.8+ `a V1 LLM engine`
        // (v1/engine/core.py, once per DP engine core), before 0.7 `an LLM engine` (V0).
        if c.get(1).is_none_or(|v| v.as_str() == "V0 ") {
            info.marker = Some(Marker::V0EngineInit);
        }
        info.push(c.get(2).map(|v| Fact::Version(v.as_str().to_string())), P_ARGS);
        let ctx = count(line, &p.max_seq_len, "max_seq_len")?;
        info.push(ctx.map(Fact::Context), P_RESOLVED);
    }
    if p.vllm_max_model_len.is_match(line) {
        info.engine(Engine::Vllm, true);
        let ctx = count(line, &p.vllm_max_model_len, "max model len")?;
        info.push(ctx.map(Fact::Context), P_RESOLVED);
    }
    if p.vllm_chunked.is_match(line) {
        info.engine(Engine::Vllm, true);
        let chunk = count(line, &p.vllm_chunked, "max_num_batched_tokens")?;
        info.push(chunk.map(Fact::Chunk), P_RESOLVED);
    }
    if p.vllm_kv_size.is_match(line) {
        info.engine(Engine::Vllm, true);
        let pool = count(line, &p.vllm_kv_size, "GPU KV cache size")?;
        info.push(pool.map(Fact::Pool), P_SUMMARY);
    }
    if let Some(c) = p.vllm_concurrency.captures(line) {
        info.engine(Engine::Vllm, true);
        let ctx = parse_count(&c[1]).ok_or_else(|| malformed(&c[1], "tokens per request"))?;
        info.push(ctx.map(Fact::Context), P_SUMMARY);
        let raw = c[2].trim_end_matches(['.', ',']);
        let factor = raw.strip_suffix('x').unwrap_or(raw);
        let conc = parse_float(factor).ok_or_else(|| malformed(&c[2], "maximum concurrency"))?;
        info.push(Some(Fact::Concurrency(conc)), P_SUMMARY);
    }
    if line.contains("Starting vLLM API server") {
        info.engine(Engine::Vllm, true);
    }

    // vLLM before 0.8 prints the pool in blocks: `# GPU blocks: N, # CPU blocks: M`.
    if p.vllm_blocks.is_match(line) {
        info.engine(Engine::Vllm, true);
        let blocks = count(line, &p.vllm_blocks, "# GPU blocks")?;
        info.push(blocks.map(Fact::Blocks), P_RESOLVED);
    }
    // vLLM's start-up refusal when the pool cannot hold one max-length request: the only place
    // some logs print the pool in tokens (`… max seq len (C) is larger than … KV cache (P)`).
    if let Some(c) = p.vllm_v0_too_small.captures(line) {
        info.engine(Engine::Vllm, true);
        let ctx = parse_count(c[1].trim()).ok_or_else(|| malformed(&c[1], "max seq len"))?;
        info.push(ctx.map(Fact::Context), P_RESOLVED);
        let pool = parse_count(c[2].trim()).ok_or_else(|| malformed(&c[2], "tokens in KV cache"))?;
        info.push(pool.map(Fact::Pool), P_SUMMARY);
        info.push(Some(Fact::RefusedStart), P_SUMMARY);
    } else if let Some(c) = p.vllm_v1_too_small.captures(line) {
        info.engine(Engine::Vllm, true);
        let ctx = parse_count(c[1].trim()).ok_or_else(|| malformed(&c[1], "max seq len"))?;
        info.push(ctx.map(Fact::Context), P_RESOLVED);
        info.push(Some(Fact::RefusedStart), P_SUMMARY);
        // V1 gives no pool in tokens, but the longest request the free KV memory holds
        // ("Based on the available memory, the estimated maximum model length is N", vLLM 0.10
        // `v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory` / `estimate_max_model_len`;
        // left out when it is 0): what the pool would have held of one request. Without it the
        // refused launch was "no usable KV pool size", bad input.
        if let Some(e) = p.vllm_v1_estimated.captures(line) {
            let pool = parse_count(e[1].trim()).ok_or_else(|| malformed(&e[1], "estimated maximum model length"))?;
            info.push(pool.filter(|&n| n > 0).map(Fact::Pool), P_SUMMARY);
        }
    }
    // vLLM ≥ 0.10's ASCII-art banner: `▄▄ ▄█ █ … version 0.19.1`.
    if let Some(c) = p.vllm_banner_version.captures(msg) {
        info.engine(Engine::Vllm, false);
        info.marker = Some(Marker::Version);
        info.push(Some(Fact::Version(c[1].to_string())), P_RESOLVED);
    }
    // sglang's scheduler refusing a prompt prints its `max_req_input_len`.
    if let Some(c) = p.sgl_too_long.captures(line) {
        info.engine(Engine::Sglang, true);
        let m = parse_count(c[2].trim()).ok_or_else(|| malformed(&c[2], "maximum allowed length"))?;
        info.push(m.map(Fact::MaxReqInput), P_RESOLVED);
    }
    // The launch command itself: `python -m sglang.launch_server … --context-length N`,
    // `vllm serve … --max-model-len N --block-size 16`.
    if let Some(c) = p.launch_cmd.captures(line) {
        let engine = if c[1].starts_with("sglang") { Engine::Sglang } else { Engine::Vllm };
        info.engine(engine, false);
        for f in p.cli_flag.captures_iter(line) {
            arg_fact(&mut info, &f[1].replace('-', "_"), &f[2])?;
        }
    }
    // A server-argument dump with one `key=value` (or `key: value`) per line: a pretty-printed
    // `ServerArgs(` repr, a debug dump, a YAML config.
    if !info.recognized {
        if let Some(c) = p.arg_line.captures(msg) {
            let engine = match &c[1] {
                "max_model_len" | "block_size" => Engine::Vllm,
                _ => Engine::Sglang,
            };
            info.engine(engine, false);
            arg_fact(&mut info, &c[1], c[2].trim_end_matches(','))?;
        }
    }

    // Roles, wherever they are printed.
    if let Some(c) = p.disagg_mode.captures(line) {
        let role = disaggregation_role(&c[1])?;
        if role == Role::Unknown {
            info.push(Some(Fact::Standalone), P_RESOLVED);
        }
        info.push(Some(Fact::Role(role)), P_RESOLVED);
    }
    if let Some(c) = p.kv_role.captures(line) {
        let role = match &c[1] {
            "kv_producer" => Role::Prefill,
            "kv_consumer" => Role::Decode,
            _ => Role::Unknown,
        };
        info.push(Some(Fact::Role(role)), P_RESOLVED);
    }

    // A wrapper's banner, e.g. `=== Starting sglang (decode) ===`.
    if info.marker.is_none() && p.banner.is_match(msg) && !line.contains("API server") {
        info.marker = Some(Marker::Banner);
    }

    Ok(info)
}

/// One server argument given as `key` and its raw value (a dump line or a command-line flag).
fn arg_fact(info: &mut LineInfo, key: &str, raw: &str) -> Result<(), ParseErrorKind> {
    let raw = raw.trim().trim_matches(['\'', '"']);
    let number = |what: &str| {
        let token = scan_value(raw);
        if let Some(spaced) = spaced_number(raw, token) {
            return Err(malformed(spaced, what));
        }
        parse_count(token).ok_or_else(|| malformed(raw, what))
    };
    match key {
        "max_model_len" => {
            let v = match human_readable(scan_value(raw)) {
                Some(v) => Some(v),
                None => number(key)?,
            };
            info.push(v.map(Fact::Context), P_ARGS)
        }
        "context_length" => info.push(number(key)?.map(Fact::Context), P_ARGS),
        "page_size" | "block_size" => info.push(number(key)?.map(Fact::PageSize), P_ARGS),
        "max_total_num_tokens" => info.push(number(key)?.map(Fact::Pool), P_RESOLVED),
        "max_total_tokens" => info.push(number(key)?.map(Fact::PoolCap), P_ARGS),
        "disaggregation_mode" => {
            let role = disaggregation_role(raw.trim_start_matches("DisaggregationMode."))?;
            if role == Role::Unknown {
                info.push(Some(Fact::Standalone), P_ARGS);
            }
            info.push(Some(Fact::Role(role)), P_ARGS);
        }
        _ => {}
    }
    Ok(())
}

/// sglang's `disaggregation_mode` as a role (`Role::Unknown`: `null`, a standalone server). Any
/// other value is refused: sglang's `DisaggregationMode` has only these three (0.5.x
/// `srt/disaggregation/utils.py`), and a typo once read as "no role in the log".
fn disaggregation_role(mode: &str) -> Result<Role, ParseErrorKind> {
    match mode.to_ascii_lowercase().as_str() {
        "prefill" => Ok(Role::Prefill),
        "decode" => Ok(Role::Decode),
        "null" | "none" => Ok(Role::Unknown),
        _ => Err(ParseErrorKind::UnknownValue {
            value: mode.to_string(),
            what: "disaggregation_mode",
            known: "prefill, decode and null",
        }),
    }
}

// ---------------------------------------------------------------------------
// Numbers

/// Whether vLLM prints `Maximum concurrency for {tokens} tokens per request: {factor}x` for
/// `blocks` GPU blocks of `block_size` tokens, by either of its formulas, to 2 decimals: V0's
/// blocks × block size / tokens (0.6–0.7 `executor/executor_base.py` `initialize_cache`) or v1's
/// blocks / ⌈tokens / block size⌉ (0.11 `v1/core/kv_cache_utils.py`
/// `get_max_concurrency_for_kv_cache_config`, full attention).
fn concurrency_fits(factor: f64, blocks: u64, block_size: u64, tokens: u64) -> bool {
    let near = |x: f64| (x - factor).abs() <= 0.005 + 1e-9;
    near(blocks.saturating_mul(block_size) as f64 / tokens.max(1) as f64)
        || near(blocks as f64 / tokens.div_ceil(block_size.max(1)).max(1) as f64)
}

/// The end of a log's last line (its last 24 characters) when the log has no final line end and
/// the line ends in a number (`context_len=10485`, of 10485760 when the log was cut off mid-line),
/// for the audit's note. A word that ends in a digit (`TP0`, `llama3`) is not a number.
pub fn cut_number_tail(text: &str) -> Option<String> {
    let last = text.lines().last().filter(|_| !text.ends_with('\n'))?.trim_end();
    let before = last.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, ',' | '.' | '_'));
    let number = &last[before.len()..];
    if !number.contains(|c: char| c.is_ascii_digit()) || before.ends_with(|c: char| c.is_alphanumeric()) {
        return None;
    }
    Some(last.chars().rev().take(24).collect::<Vec<_>>().into_iter().rev().collect())
}

/// Digits, grouped by commas in threes or not at all: a count `parse_count` rejects only for
/// its size.
fn well_formed_count(token: &str) -> bool {
    let mut groups = token.split(',');
    let first = groups.next().unwrap_or_default();
    let digits = |g: &str| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit());
    digits(first) && (!token.contains(',') || first.len() <= 3) && groups.all(|g| g.len() == 3 && digits(g))
}

fn malformed(token: &str, what: &str) -> ParseErrorKind {
    ParseErrorKind::MalformedNumber { token: token.to_string(), what: what.to_string() }
}

/// The raw value after a key: up to whitespace, a closing bracket or quote, `;`,
/// or a comma / full stop that is not followed by a digit (so `681,280` and `11.84`
/// stay whole while a sentence's closing `.` is dropped).
fn scan_value(s: &str) -> &str {
    let s = s.trim_start_matches(['\'', '"']);
    let bytes = s.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        let stop = match bytes[end] {
            b',' | b'.' => !bytes.get(end + 1).is_some_and(u8::is_ascii_digit),
            b')' | b']' | b'}' | b';' | b'\'' | b'"' => true,
            c => c.is_ascii_whitespace(),
        };
        if stop {
            break;
        }
        end += 1;
    }
    &s[..end]
}

/// A token count: digits, optionally grouped by thousands separators. `None`,
/// `null` and `-1` mean "unset" and read as `Some(None)`; anything else is `None`.
fn parse_count(token: &str) -> Option<Option<u64>> {
    if matches!(token, "None" | "null" | "-1") {
        return Some(None);
    }
    if !well_formed_count(token) {
        return None;
    }
    token.replace(',', "").parse::<u64>().ok().map(Some)
}

/// vLLM's `--max-model-len` with a size suffix, as its argument parser reads it
/// (`human_readable_int`, `vllm/engine/arg_utils.py`, vLLM 0.9–0.11): `k`/`m`/`g`/`t` are powers
/// of 1,000 and take a decimal (`25.6k` = 25,600, truncated), `K`/`M`/`G`/`T` powers of 1,024 and
/// only a whole number (`1K` = 1,024). `None` for anything else (a plain count is read as one).
fn human_readable(token: &str) -> Option<u64> {
    let suffix = token.chars().last()?;
    let number = &token[..token.len() - suffix.len_utf8()];
    let (base, binary) = match suffix {
        'k' | 'm' | 'g' | 't' => (1000u64, false),
        'K' | 'M' | 'G' | 'T' => (1024u64, true),
        _ => return None,
    };
    let power = "kmgt".find(suffix.to_ascii_lowercase())? as u32 + 1;
    let mult = base.checked_pow(power)?;
    if binary {
        // Whole numbers only (`parse` alone would take a sign).
        if !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return number.parse::<u64>().ok()?.checked_mul(mult);
    }
    let x = parse_float(number)?;
    let v = x * mult as f64;
    (v.is_finite() && v < u64::MAX as f64).then_some(v as u64)
}

/// A plain decimal: digits with an optional fractional part.
fn parse_float(token: &str) -> Option<f64> {
    let (int, frac) = token.split_once('.').unwrap_or((token, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    token.parse::<f64>().ok()
}

/// The count after the first match of `key` in `line`, if the key is present.
fn count(line: &str, key: &Regex, what: &str) -> Result<Option<u64>, ParseErrorKind> {
    let Some(m) = key.find(line) else {
        return Ok(None);
    };
    let after = &line[m.end()..];
    let token = scan_value(after);
    if let Some(spaced) = spaced_number(after, token) {
        return Err(malformed(spaced, what));
    }
    parse_count(token).ok_or_else(|| malformed(token, what))
}

/// The whole number when `token` (what `scan_value` took from `s`) is the first group of a number
/// whose thousands are separated by spaces (`200 000`, `1 048 576`, with a plain, no-break or
/// thin space): `scan_value` stops at the space, and reading the first group alone would audit a
/// pool a thousand times smaller. Neither engine prints such a number; a log that has one was
/// edited or converted, so it is malformed, not read.
fn spaced_number<'a>(s: &'a str, token: &str) -> Option<&'a str> {
    let start = (token.as_ptr() as usize).checked_sub(s.as_ptr() as usize)?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(token) || token.len() > 3 || start + token.len() > s.len() {
        return None;
    }
    let mut end = start + token.len();
    loop {
        let rest = &s[end..];
        let Some(sep) = rest.chars().next().filter(|c| matches!(c, ' ' | '\u{a0}' | '\u{202f}' | '\u{2009}')) else {
            break;
        };
        let group = &rest[sep.len_utf8()..];
        let three = group.get(..3).is_some_and(digits);
        if !three || group.as_bytes().get(3).is_some_and(u8::is_ascii_digit) {
            break;
        }
        end += sep.len_utf8() + 3;
    }
    (end > start + token.len()).then(|| &s[start..end])
}

/// A `N.NN GB` value after `key`, if present.
fn gigabytes(line: &str, key: &Regex, what: &str) -> Result<Option<f64>, ParseErrorKind> {
    let Some(m) = key.find(line) else {
        return Ok(None);
    };
    let token = scan_value(&line[m.end()..]);
    if token == "None" {
        return Ok(None);
    }
    let number = token.strip_suffix("GB").or_else(|| token.strip_suffix("GiB")).unwrap_or(token);
    parse_float(number).map(Some).ok_or_else(|| malformed(token, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFILL: &str = include_str!("../../tests/data/audit/sglang_prefill_single.log");
    const DECODE: &str = include_str!("../../tests/data/audit/sglang_decode_dp2_ansi.log");
    const DP_ATTN: &str = include_str!("../../tests/data/audit/sglang_dp_attention.log");
    const TWO: &str = include_str!("../../tests/data/audit/sglang_two_launches.log");
    const KV_ONLY: &str = include_str!("../../tests/data/audit/sglang_kv_only.log");
    const PRODUCER: &str = include_str!("../../tests/data/audit/vllm_producer.log");
    const CONSUMER: &str = include_str!("../../tests/data/audit/vllm_consumer.log");
    const GARBAGE: &str = include_str!("../../tests/data/audit/garbage.log");

    /// A node with every fact missing, to be filled in by each test.
    fn blank(source: &str, launch: u32, rank: Option<&str>, line: usize) -> NodeFacts {
        NodeFacts {
            source: source.to_string(),
            launch,
            rank: rank.map(str::to_string),
            engine: None,
            other_engine: None,
            version: None,
            role: Role::Unknown,
            page_size: None,
            pool_tokens: None,
            context_len: None,
            chunked_prefill_size: None,
            max_prefill_tokens: None,
            max_running_requests: None,
            available_gpu_mem_gb: None,
            vllm_max_concurrency: None,
            gpu_blocks: None,
            max_req_input_len: None,
            line,
            refused_start: None,
            context_line: None,
            page_size_line: None,
            max_req_input_line: None,
            derived: Vec::new(),
        }
    }

    fn parse(name: &str, text: &str) -> Vec<NodeFacts> {
        parse_log(name, text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// One fixture per form, each from a public issue thread (URL on its first line) or
    /// synthesized after the engine's format (said on its first line).
    #[test]
    fn fixtures_name_their_source() {
        for (name, text) in FORMS {
            let first = text.lines().next().unwrap_or_default();
            assert!(
                first.starts_with("# source: https://github.com/")
                    || first.starts_with("# synthesized after the format of"),
                "{name}: {first}"
            );
        }
    }

    const FORMS: [(&str, &str); 8] = [
        ("summary", include_str!("../../tests/data/audit/sglang_summary_issue29575.log")),
        ("small_pool", include_str!("../../tests/data/audit/sglang_small_pool_warning.log")),
        ("too_long", include_str!("../../tests/data/audit/sglang_input_too_long_issue4048.log")),
        ("v0_error", include_str!("../../tests/data/audit/vllm_v0_error_issue2418.log")),
        ("blocks", include_str!("../../tests/data/audit/vllm_blocks_concurrency_pr12569.log")),
        ("kv_size", include_str!("../../tests/data/audit/vllm_kv_cache_size_pr13596.log")),
        ("below", include_str!("../../tests/data/audit/vllm_pool_below_context_issue39734.log")),
        ("kv_dump", include_str!("../../tests/data/audit/sglang_kv_dump.log")),
    ];

    fn fixture(name: &str) -> &'static str {
        FORMS.iter().find(|(n, _)| *n == name).expect("fixture").1
    }

    fn form(name: &str) -> NodeFacts {
        let mut got = parse(name, fixture(name));
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        got.remove(0)
    }

    #[test]
    fn form_sglang_summary_line() {
        let f = form("summary");
        assert_eq!(
            (f.engine, f.pool_tokens, f.context_len, f.line),
            (Some(Engine::Sglang), Some(2_086_558), Some(256_000), 2)
        );
        assert_eq!((f.max_running_requests, f.available_gpu_mem_gb), (Some(33), Some(17.22)));
    }

    /// sglang 0.5.23 warns when the served pool is below the context; that pool (widened by
    /// page interleaving) wins over the summary's logical one, and the warning dates the build.
    #[test]
    fn form_sglang_small_pool_warning() {
        let f = form("small_pool");
        assert_eq!(
            (f.engine, f.pool_tokens, f.context_len, f.line),
            (Some(Engine::Sglang), Some(681_280), Some(1_048_576), 4)
        );
        assert_eq!(f.version.as_deref(), Some(SMALL_POOL_WARNING_SINCE));
        // A version line, where there is one, says more than the warning's lower bound.
        let text = format!("sglang version: 0.5.24\n{}", fixture("small_pool"));
        assert_eq!(parse("v.log", &text)[0].version.as_deref(), Some("0.5.24"));
    }

    #[test]
    fn form_sglang_pool_only_in_an_error_message_and_context_in_the_launch_command() {
        let f = form("too_long");
        // `--context-length 163840` on a continuation line of the command; max_req_input_len 59,862.
        assert_eq!((f.engine, f.context_len, f.context_line), (Some(Engine::Sglang), Some(163_840), Some(9)));
        assert_eq!((f.max_req_input_len, f.pool_tokens, f.line), (Some(59_862), Some(59_868), 12));
        // Named by the rank that printed line 12 (TP5), not the group's first rank (TP1).
        assert_eq!(f.rank.as_deref(), Some("TP5"));
        assert!(f.derived[0].contains("min(context - 1, pool - 1) - 5"), "{:?}", f.derived);
        // At the context's own limit the printed value bounds the pool from below only: at least
        // the context, audited as the context (any larger pool admits the same prompts; it was
        // "no usable KV pool size").
        let text = "python -m sglang.launch_server --context-length 4096
            [2025-03-03 06:49:28 TP0] Input length (5000 tokens) exceeds the maximum allowed length (4090 tokens). Use a shorter input.
";
        let f = parse("ctx.log", text).remove(0);
        assert_eq!((f.max_req_input_len, f.pool_tokens), (Some(4090), Some(4096)));
        assert!(f.derived.iter().any(|d| d.starts_with("pool ≥ 4,096 tokens")), "{:?}", f.derived);
        // A concurrency factor that no block size gives is said (it was dropped without a word,
        // and the pool taken at the default block size); below 1x, with what that means.
        let t = "INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 3000
INFO 01-30 03:19:14 kv_cache_utils.py:398] Maximum concurrency for 32768 tokens per request: 0.50x
";
        let f = parse("vc.log", t).remove(0);
        let d = f.derived.iter().find(|d| d.starts_with("CHECK: line 2")).unwrap_or_else(|| panic!("{:?}", f.derived));
        assert!(d.contains("which no block size gives with 3000 GPU blocks (below 1x"), "{d}");
    }

    #[test]
    fn form_vllm_v0_refusal_error_gives_pool_and_context() {
        let f = form("v0_error");
        assert_eq!((f.engine, f.version.as_deref()), (Some(Engine::Vllm), None));
        assert_eq!((f.context_len, f.pool_tokens, f.line, f.gpu_blocks), (Some(4096), Some(3664), 4, Some(229)));
        assert_eq!(f.refused_start, Some(4));
        let v1 = "ERROR 04-05 01:12:55 [core.py:390] ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.97 GiB).";
        let f = parse("v1.log", v1).remove(0);
        assert_eq!((f.engine, f.context_len, f.pool_tokens), (Some(Engine::Vllm), Some(1_048_576), None));
        assert_eq!(f.refused_start, Some(1));
        // With the estimate V1 adds when it can make one: the pool that held one request's worth.
        let est = format!("{v1} Based on the available memory, the estimated maximum model length is 51216. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.");
        let f = parse("v1.log", &est).remove(0);
        assert_eq!((f.context_len, f.pool_tokens, f.refused_start), (Some(1_048_576), Some(51_216), Some(1)));
    }

    #[test]
    fn a_cut_number_is_a_number_at_the_end_of_an_unended_last_line() {
        for (text, cut) in [
            ("context_len=10485", true),
            ("a\nmax_total_num_tokens: 1,048", true),
            ("12345", true),
            ("GPU KV cache size: 99,999", true),
            ("a\n[2025-03-03 06:49:28 TP0", false),
            ("model=llama3", false),
            ("context_len=10485\n", false),
            ("ends with a dot.", false),
            ("", false),
        ] {
            assert_eq!(cut_number_tail(text).is_some(), cut, "{text:?}");
        }
        assert_eq!(cut_number_tail("x\nthe pool holds 681280").as_deref(), Some("the pool holds 681280"));
    }

    #[test]
    fn form_vllm_blocks_with_block_size_deduced_from_concurrency() {
        let f = form("blocks");
        assert_eq!(
            (f.gpu_blocks, f.page_size, f.pool_tokens, f.context_len),
            (Some(1381), Some(16), Some(22_096), Some(2048))
        );
        assert_eq!(f.derived.len(), 2, "{:?}", f.derived);
        // The block size given: blocks × block size, nothing deduced.
        let text = "INFO 06-28 23:40:03 api_server.py:207] args: Namespace(max_model_len=29000, block_size=32)
            INFO 06-28 23:41:03 distributed_gpu_executor.py:45] # GPU blocks: 1478, # CPU blocks: 2048
";
        let f = parse("b.log", text).remove(0);
        assert_eq!((f.page_size, f.pool_tokens, f.line), (Some(32), Some(47_296), 2));
        assert_eq!(f.derived.len(), 1, "{:?}", f.derived);
        // A concurrency line that agrees with blocks × block size says nothing more; one that
        // fits another block size is said (it was passed over), and the pool stays the logged one.
        for (factor, check) in [("1.63x", false), ("0.82x", true)] {
            let t = format!(
                "{text}INFO 06-28 23:41:04 kv_cache_utils.py:398] Maximum concurrency for 29000 tokens per request: {factor}\n"
            );
            let f = parse("b.log", &t).remove(0);
            assert_eq!(f.pool_tokens, Some(47_296));
            let said = f.derived.iter().find(|d| d.starts_with("CHECK: line 3"));
            assert_eq!(said.is_some(), check, "{factor}: {:?}", f.derived);
            if let Some(d) = said {
                assert!(
                    d.contains("1478 GPU blocks × block size 32 give 1.63x") && d.contains("block size of about 16"),
                    "{d}"
                );
            }
        }
        // Blocks alone: the pool stays unknown.
        let f = parse(
            "c.log",
            "INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 127626
",
        )
        .remove(0);
        assert_eq!((f.gpu_blocks, f.pool_tokens), (Some(127_626), None));
    }

    #[test]
    fn form_vllm_kv_cache_size_and_concurrency() {
        let f = form("kv_size");
        assert_eq!((f.pool_tokens, f.context_len, f.vllm_max_concurrency), (Some(2_042_016), Some(2048), Some(997.08)));
    }

    #[test]
    fn vllm_max_model_len_takes_size_suffixes_as_vllm_does() {
        for (t, want) in [
            ("32k", Some(32_000)),
            ("25.6k", Some(25_600)),
            ("1K", Some(1024)),
            ("128K", Some(131_072)),
            ("1m", Some(1_000_000)),
            ("1M", Some(1_048_576)),
            ("1.5K", None),
            ("k", None),
            ("32", None),
            ("3x", None),
        ] {
            assert_eq!(human_readable(t), want, "{t}");
        }
        let facts = parse_log("v.log", "vllm serve m --max-model-len 32k\nINFO 03-05 09:14:30 [kv_cache_utils.py:1087] GPU KV cache size: 200,000 tokens\n").unwrap();
        assert_eq!(facts[0].context_len, Some(32_000));
    }

    /// `--max-total-tokens` caps sglang's pool: with no pool printed (a launch command checked
    /// before starting the server) it is taken as the pool, said to be assumed; a printed pool
    /// wins over it (sglang prints the capped value), and `max_total_tokens=None` caps nothing.
    #[test]
    fn max_total_tokens_caps_the_pool_when_no_pool_is_printed() {
        let launch = "python -m sglang.launch_server --model-path m --context-length 131072 --max-total-tokens 60000\n";
        let f = &parse_log("l.log", launch).unwrap()[0];
        assert_eq!((f.pool_tokens, f.context_len, f.line), (Some(60_000), Some(131_072), 1));
        assert!(
            f.derived.iter().any(|d| d.starts_with("ASSUMED: pool = 60,000 tokens from `--max-total-tokens 60000`")),
            "{:?}",
            f.derived
        );
        let printed = format!("{launch}[2026-01-01 00:00:00] max_total_num_tokens=50000, context_len=131072\n");
        let f = &parse_log("l.log", &printed).unwrap()[0];
        assert_eq!(f.pool_tokens, Some(50_000));
        assert!(f.derived.is_empty(), "{:?}", f.derived);
        let dump = "server_args=ServerArgs(model_path='m', context_length=8192, max_total_tokens=None, page_size=1)\n";
        assert_eq!(parse_log("d.log", dump).unwrap()[0].pool_tokens, None);
        let dump = dump.replace("max_total_tokens=None", "max_total_tokens=4096");
        assert_eq!(parse_log("d.log", &dump).unwrap()[0].pool_tokens, Some(4096));
        // A vLLM node has no such flag: nothing is taken from a stray key.
        let vllm = "vllm serve m --max-model-len 8192\nmax_total_tokens: 4096\n";
        assert_eq!(parse_log("v.log", vllm).unwrap()[0].pool_tokens, None);
    }

    #[test]
    fn form_vllm_banner_version_and_max_model_len() {
        let f = form("below");
        assert_eq!(f.version.as_deref(), Some("0.19.1rc1.dev301+g60995c05b"));
        assert_eq!(
            (f.engine, f.pool_tokens, f.context_len, f.context_line),
            (Some(Engine::Vllm), Some(76_640), Some(262_144), Some(3))
        );
    }

    #[test]
    fn form_server_args_one_key_value_per_line() {
        let f = form("kv_dump");
        assert_eq!((f.role, f.page_size, f.context_len), (Role::Prefill, Some(64), Some(1_048_576)));
        assert_eq!((f.pool_tokens, f.context_line, f.page_size_line), (Some(681_280), Some(4), Some(5)));
        // vLLM keys, YAML-style, and a command line with flags.
        let f = parse(
            "y.log",
            "max_model_len: 32768
block_size: 16
GPU KV cache size: 100,000 tokens
",
        )
        .remove(0);
        assert_eq!((f.engine, f.context_len, f.page_size), (Some(Engine::Vllm), Some(32_768), Some(16)));
        let f = parse(
            "cmd.log",
            "$ vllm serve m --max-model-len=8192 --block-size 32
GPU KV cache size: 9,000 tokens
",
        )
        .remove(0);
        assert_eq!((f.context_len, f.page_size, f.pool_tokens), (Some(8192), Some(32), Some(9000)));
        let f = parse(
            "r.log",
            "python3 -m sglang.launch_server --disaggregation-mode decode --page-size 64
",
        )
        .remove(0);
        assert_eq!((f.role, f.page_size), (Role::Decode, Some(64)));
        let err = parse_log(
            "bad.log",
            "  context_length=12x4
",
        )
        .unwrap_err();
        assert_eq!((err.line, err.message().as_str()), (1, "malformed number \"12x4\" for context_length"));
        let what = "context_length".to_string();
        assert_eq!(err.kind, ParseErrorKind::MalformedNumber { token: "12x4".to_string(), what });
    }

    #[test]
    fn sglang_prefill_single_rank() {
        let got = parse("sglang_prefill_single.log", PREFILL);
        let want = NodeFacts {
            engine: Some(Engine::Sglang),
            role: Role::Prefill,
            page_size: Some(64),
            pool_tokens: Some(413_696),
            context_len: Some(131_072),
            chunked_prefill_size: Some(8192),
            max_prefill_tokens: Some(16384),
            max_running_requests: Some(2048),
            available_gpu_mem_gb: Some(11.84),
            context_line: Some(22),
            page_size_line: Some(2),
            ..blank("sglang_prefill_single.log", 0, None, 22)
        };
        assert_eq!(got, vec![want]);
    }

    #[test]
    fn sglang_decode_two_dp_ranks_interleaved_with_ansi() {
        let got = parse("decode.log", DECODE);
        let base = NodeFacts {
            engine: Some(Engine::Sglang),
            role: Role::Decode,
            page_size: Some(64),
            context_len: Some(131_072),
            chunked_prefill_size: Some(8192),
            max_prefill_tokens: Some(16384),
            max_running_requests: Some(512),
            page_size_line: Some(2),
            ..blank("decode.log", 0, None, 0)
        };
        let dp0 = NodeFacts {
            rank: Some("DP0 TP0".to_string()),
            pool_tokens: Some(372_736),
            available_gpu_mem_gb: Some(9.87),
            line: 31,
            context_line: Some(31),
            ..base.clone()
        };
        let dp1 = NodeFacts {
            rank: Some("DP1 TP0".to_string()),
            pool_tokens: Some(371_200),
            available_gpu_mem_gb: Some(10.02),
            line: 30,
            context_line: Some(30),
            ..base
        };
        assert_eq!(got, vec![dp0, dp1]);
    }

    #[test]
    fn sglang_dp_attention_rank_without_summary_keeps_context_unknown() {
        let got = parse("dpa.log", DP_ATTN);
        let base = NodeFacts {
            engine: Some(Engine::Sglang),
            page_size: Some(1),
            pool_tokens: Some(226_816),
            chunked_prefill_size: Some(4096),
            max_prefill_tokens: Some(16384),
            page_size_line: Some(2),
            // `disaggregation_mode='null'` in its server arguments.
            derived: vec![STANDALONE_NOTE.to_string()],
            ..blank("dpa.log", 0, None, 0)
        };
        let dp0 = NodeFacts {
            rank: Some("DP0 TP0 EP0".to_string()),
            context_len: Some(163_840),
            max_running_requests: Some(2048),
            available_gpu_mem_gb: Some(31.15),
            line: 17,
            context_line: Some(17),
            ..base.clone()
        };
        // DP1 never prints the scheduler summary: its pool comes from the allocation
        // line and its context stays unknown (context_length=None in server_args).
        let dp1 = NodeFacts { rank: Some("DP1 TP1 EP1".to_string()), line: 9, ..base };
        assert_eq!(got, vec![dp0, dp1]);
    }

    #[test]
    fn a_summary_wrapped_over_two_lines_gives_both_halves() {
        // A terminal or a log shipper cut the summary after `max_prefill_tokens`: the second
        // line, with no stamp and no pool, still gives the context (it was lost).
        let text =
            "[2026-03-02 10:11:12] max_total_num_tokens=681280, chunked_prefill_size=8192, max_prefill_tokens=16384,\n\
            max_running_requests=128, context_len=1048576, available_gpu_mem=12.5 GB\n";
        let got = parse("wrapped.log", text);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].pool_tokens, got[0].context_len, got[0].max_running_requests),
            (Some(681_280), Some(1_048_576), Some(128))
        );
        // A line with one summary key alone is no half of a summary: another line that happens
        // to say `context_len=` gives no context.
        let stray = "[2026-03-02 10:11:12] max_total_num_tokens=681280, chunked_prefill_size=8192\n\
            [2026-03-02 10:12:00] decode batch context_len=999\n";
        let got = parse("stray.log", stray);
        assert_eq!((got[0].pool_tokens, got[0].context_len), (Some(681_280), None), "{got:?}");
    }

    #[test]
    fn a_launch_marker_printed_earlier_than_its_launch_progress_is_out_of_order_not_a_new_launch() {
        let summary = "[2026-03-02 10:11:12] max_total_num_tokens=681280, chunked_prefill_size=8192, \
            max_prefill_tokens=16384, max_running_requests=128, context_len=1048576\n";
        let args = |t: &str| {
            format!("[2026-03-02 {t}] server_args=ServerArgs(model_path='m', context_length=1048576, page_size=64)\n")
        };
        // The summary first, then the launch's own argument dump stamped before it: one launch
        // (it read as two, the second without a pool: exit 2).
        let got = parse("late.log", &format!("{summary}{}", args("10:11:00")));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].pool_tokens, got[0].page_size), (Some(681_280), Some(64)));
        // A dump stamped after the summary is a restart: two launches.
        assert_eq!(parse("restart.log", &format!("{summary}{}", args("10:20:00"))).len(), 2);
        // vLLM's stamps have no year; the rule is the same.
        let v = "INFO 03-02 10:11:12 [gpu_worker.py:1] GPU KV cache size: 50,000 tokens\n\
                 INFO 03-02 10:11:00 [api_server.py:1] vLLM API server version 0.11.0\n";
        assert_eq!(parse("v.log", v).len(), 1);
        assert_eq!(parse("v2.log", &v.replace("10:11:00", "10:30:00")).len(), 2);
    }

    #[test]
    fn values_that_disagree_across_sources_are_named_with_the_one_audited() {
        let text = "[2026-05-11 08:01:02 DP0 TP0] server_args=ServerArgs(model_path='m', context_length=65536, page_size=1)\n\
            [2026-05-11 08:03:44 DP0 TP0] KV Cache is allocated. #tokens: 200000, KV size: 24.87 GB\n\
            [2026-05-11 08:04:12 DP0 TP0] max_total_num_tokens=100000, chunked_prefill_size=16384, context_len=131072\n";
        let got = parse("c5.log", text);
        assert_eq!((got[0].context_len, got[0].pool_tokens), (Some(131_072), Some(100_000)));
        let outranks = "the first is audited: its line outranks the other";
        for want in [
            format!("two context lengths: line 3 gives 131072, line 1 gives 65536; {outranks}"),
            format!("two pools: line 3 gives 100000, line 2 gives 200000; {outranks}"),
        ] {
            assert!(got[0].derived.iter().any(|d| d.starts_with(&want)), "{want}\n{:?}", got[0].derived);
        }
        // The same value from two sources says nothing.
        let agree = text.replace("65536", "131072").replace("200000", "100000");
        assert!(parse("ok.log", &agree)[0].derived.is_empty());
    }

    #[test]
    fn an_unknown_disaggregation_mode_is_refused_not_read_as_no_role() {
        for line in [
            "[2026-05-11 08:01:02 DP0 TP0] server_args=ServerArgs(model_path='m', context_length=4096, disaggregation_mode='weird')",
            "  disaggregation_mode: prefil",
        ] {
            let err = parse_log("b.log", line).unwrap_err();
            assert_eq!(err.line, 1, "{line}");
            assert!(matches!(err.kind, ParseErrorKind::UnknownValue { what: "disaggregation_mode", .. }), "{err}");
            assert!(err.to_string().contains("(the engine knows prefill, decode and null)"), "{err}");
        }
    }

    #[test]
    fn launches_joined_newest_first_are_numbered_in_time_order() {
        let launch = |hour: &str, pool: u64| {
            format!(
                "[2026-05-11 {hour}:01:02 DP0 TP0] server_args=ServerArgs(model_path='m', context_length=131072, page_size=64)\n\
                 [2026-05-11 {hour}:04:12 DP0 TP0] max_total_num_tokens={pool}, chunked_prefill_size=16384, context_len=131072\n"
            )
        };
        // The newer launch (02:xx) first in the file: it was numbered 0, and the older one,
        // numbered 1, was audited as "the last launch".
        let got = parse("rev.log", &format!("{}{}", launch("02", 262_144), launch("01", 100_032)));
        let by_launch: Vec<(u32, Option<u64>, usize)> = got.iter().map(|f| (f.launch, f.pool_tokens, f.line)).collect();
        assert_eq!(by_launch, vec![(0, Some(100_032), 4), (1, Some(262_144), 2)]);
        // In time order already: the file's order.
        let got = parse("fwd.log", &format!("{}{}", launch("01", 100_032), launch("02", 262_144)));
        assert_eq!(got.iter().map(|f| f.pool_tokens).collect::<Vec<_>>(), vec![Some(100_032), Some(262_144)]);
    }

    #[test]
    fn sglang_two_launches_first_crashed() {
        let got = parse("two.log", TWO);
        let base = NodeFacts {
            rank: Some("TP0".to_string()),
            engine: Some(Engine::Sglang),
            version: Some("0.5.16".to_string()),
            page_size: Some(1),
            context_len: Some(32768),
            chunked_prefill_size: Some(8192),
            max_prefill_tokens: Some(16384),
            derived: vec![STANDALONE_NOTE.to_string()],
            ..blank("two.log", 0, None, 0)
        };
        let first = NodeFacts {
            pool_tokens: Some(813_440),
            line: 11,
            context_line: Some(3),
            page_size_line: Some(4),
            ..base.clone()
        };
        let second = NodeFacts {
            launch: 1,
            pool_tokens: Some(721_664),
            max_running_requests: Some(4096),
            available_gpu_mem_gb: Some(12.37),
            line: 45,
            context_line: Some(45),
            page_size_line: Some(30),
            ..base
        };
        assert_eq!(got, vec![first, second]);
    }

    #[test]
    fn sglang_kv_allocation_only_leaves_context_unknown() {
        let got = parse("kv.log", KV_ONLY);
        let want = NodeFacts {
            engine: Some(Engine::Sglang),
            version: Some("0.5.16".to_string()),
            pool_tokens: Some(338_741),
            ..blank("kv.log", 0, None, 20)
        };
        assert_eq!(got, vec![want]);
    }

    #[test]
    fn vllm_producer() {
        let got = parse("p.log", PRODUCER);
        let want = NodeFacts {
            rank: Some("DP0".to_string()),
            engine: Some(Engine::Vllm),
            version: Some("0.11.0".to_string()),
            role: Role::Prefill,
            page_size: Some(16),
            pool_tokens: Some(463_328),
            context_len: Some(32768),
            chunked_prefill_size: Some(8192),
            vllm_max_concurrency: Some(14.14),
            context_line: Some(26),
            page_size_line: Some(3),
            ..blank("p.log", 0, None, 25)
        };
        assert_eq!(got, vec![want]);
    }

    #[test]
    fn vllm_consumer_with_colours_and_tp_workers() {
        let got = parse("c.log", CONSUMER);
        let want = NodeFacts {
            rank: Some("DP0".to_string()),
            engine: Some(Engine::Vllm),
            version: Some("0.11.0".to_string()),
            role: Role::Decode,
            pool_tokens: Some(342_816),
            context_len: Some(32768),
            chunked_prefill_size: Some(8192),
            vllm_max_concurrency: Some(10.46),
            context_line: Some(23),
            ..blank("c.log", 0, None, 22)
        };
        assert_eq!(got, vec![want]);
    }

    #[test]
    fn garbage_is_an_error() {
        let err = parse_log("garbage.log", GARBAGE).unwrap_err();
        assert_eq!(
            err,
            ParseError { source: "garbage.log".to_string(), line: 0, kind: ParseErrorKind::NoStartupLines }
        );
        assert_eq!(err.to_string(), "garbage.log: no sglang or vLLM start-up lines found");
        assert!(parse_log("empty.log", "").is_err());
    }

    #[test]
    fn malformed_numbers_are_errors_with_their_line() {
        let text = "[2026-03-02 10:11:11] Memory pool end. avail mem=12.41 GB\n\
            [2026-03-02 10:11:12] max_total_num_tokens=68l280, chunked_prefill_size=8192, \
            max_prefill_tokens=16384, max_running_requests=128, context_len=1048576\n";
        let err = parse_log("bad.log", text).unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.to_string(), "bad.log:2: malformed number \"68l280\" for max_total_num_tokens");
        // Well formed but past 64 bits: out of range, not malformed.
        let huge = text.replace("68l280", "99,999,999,999,999,999,999,999,999");
        let err = parse_log("huge.log", &huge).unwrap_err();
        assert_eq!(
            err.to_string(),
            "huge.log:2: number \"99,999,999,999,999,999,999,999,999\" for max_total_num_tokens is out of range: it does not fit in 64 bits"
        );

        // A number grouped by spaces is not read as its first group (it was once: `200 000` read
        // as a 200-token pool).
        for (line, token, what) in [
            ("GPU KV cache size: 200 000 tokens", "200 000", "GPU KV cache size"),
            ("KV Cache is allocated. #tokens: 681\u{a0}280, KV size: 24.87 GB", "681\u{a0}280", "#tokens"),
            ("max_total_num_tokens=1 048 576, context_len=2048", "1 048 576", "max_total_num_tokens"),
            ("  context_length: 131 072", "131 072", "context_length"),
        ] {
            let err = parse_log("bad.log", line).unwrap_err();
            let want = ParseErrorKind::MalformedNumber { token: token.to_string(), what: what.to_string() };
            assert_eq!(err.kind, want, "{line}");
        }
        // A three-digit number and a word after it is still a number.
        let ok = parse("ok.log", "GPU KV cache size: 200 tokens\nmax_model_len: 100\n");
        assert_eq!(ok[0].pool_tokens, Some(200));

        for bad in [
            "GPU KV cache size: 1,23,456 tokens",
            "Maximum concurrency for 131,072 tokens per request: 9.4.1x",
            "KV Cache is allocated. #tokens: lots, K size: 1.00 GB, V size: 1.00 GB",
            "max_total_num_tokens=1, max_prefill_tokens=2, available_gpu_mem=nan GB",
        ] {
            let err = parse_log("bad.log", bad).unwrap_err();
            assert_eq!(err.line, 1, "{bad}");
            assert!(matches!(err.kind, ParseErrorKind::MalformedNumber { .. }), "{bad}");
            assert!(err.message().starts_with("malformed number"), "{bad}");
        }
    }

    #[test]
    fn thousands_separators_and_one_line_vllm_summary() {
        let text = "(EngineCore_DP0 pid=7) INFO 10-14 08:12:34 [kv_cache_utils.py:1087] \
            GPU KV cache size: 1,234,567 tokens, Maximum concurrency for 131,072 tokens per request: 9.41x\n";
        let got = parse("one.log", text);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].pool_tokens, Some(1_234_567));
        assert_eq!(got[0].context_len, Some(131_072));
        assert_eq!(got[0].vllm_max_concurrency, Some(9.41));
        assert_eq!(got[0].rank.as_deref(), Some("DP0"));
        // The same line on another device, or with HiSparse's host pool (vLLM 0.33/0.34 name the
        // pool's device; `GPU + host` when KV is kept in host memory as well).
        for device in ["XPU", "CPU", "GPU + host"] {
            let text = format!(
                "(EngineCore_DP0 pid=7) INFO 10-14 08:12:34 [kv_cache_utils.py:1168] \
                 {device} KV cache size: 812,032 tokens, Maximum concurrency for 131,072 tokens per request: 6.20x\n"
            );
            let got = parse("device.log", &text);
            assert_eq!(got.len(), 1, "{device}");
            assert_eq!(got[0].pool_tokens, Some(812_032), "{device}");
            assert_eq!(got[0].context_len, Some(131_072), "{device}");
            assert_eq!(got[0].engine, Some(Engine::Vllm), "{device}");
        }

        let text = "[2026-03-02 10:11:12 DP0 TP0] max_total_num_tokens=681,280, \
            chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, \
            context_len=1048576, available_gpu_mem=11.84 GB\n";
        let got = parse("sep.log", text);
        assert_eq!(got[0].pool_tokens, Some(681_280));
        assert_eq!(got[0].chunked_prefill_size, Some(8192));
        assert_eq!(got[0].context_len, Some(1_048_576));
        assert_eq!(got[0].rank.as_deref(), Some("DP0 TP0"));
    }

    #[test]
    fn unset_values_read_as_missing() {
        let text = "[2026-03-02 10:11:12] max_total_num_tokens=5000, chunked_prefill_size=-1, \
            max_prefill_tokens=16384, max_running_requests=None, context_len=4096\n";
        let got = parse("unset.log", text);
        assert_eq!(got[0].pool_tokens, Some(5000));
        assert_eq!(got[0].chunked_prefill_size, None);
        assert_eq!(got[0].max_running_requests, None);
        assert_eq!(got[0].available_gpu_mem_gb, None);
    }

    #[test]
    fn vllm_data_parallel_engines_are_separate_nodes() {
        let text = "\
(APIServer pid=1) INFO 10-14 08:12:30 [api_server.py:1839] vLLM API server version 0.11.0
(EngineCore_DP1 pid=3) INFO 10-14 08:12:34 [kv_cache_utils.py:1087] GPU KV cache size: 200,000 tokens
(EngineCore_DP0 pid=2) INFO 10-14 08:12:34 [kv_cache_utils.py:1087] GPU KV cache size: 210,000 tokens
(EngineCore_DP1 pid=3) INFO 10-14 08:12:34 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 24.41x
(EngineCore_DP0 pid=2) INFO 10-14 08:12:34 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 25.63x
";
        let got = parse("dp.log", text);
        let summary: Vec<_> = got
            .iter()
            .map(|n| (n.rank.as_deref(), n.pool_tokens, n.vllm_max_concurrency, n.version.as_deref(), n.line))
            .collect();
        assert_eq!(
            summary,
            vec![
                (Some("DP0"), Some(210_000), Some(25.63), Some("0.11.0"), 3),
                (Some("DP1"), Some(200_000), Some(24.41), Some("0.11.0"), 2),
            ]
        );
    }

    #[test]
    fn reprinted_vllm_version_starts_a_new_launch() {
        let text = "\
INFO 10-14 08:12:30 [api_server.py:1839] vLLM API server version 0.10.2
INFO 10-14 08:12:30 [utils.py:233] non-default args: {'model': 'm', 'max_model_len': 8192}
ERROR 10-14 08:12:40 [core.py:700] EngineCore failed to start.
INFO 10-14 08:13:30 [api_server.py:1839] vLLM API server version 0.10.2
INFO 10-14 08:13:30 [utils.py:233] non-default args: {'model': 'm', 'max_model_len': 4096}
INFO 10-14 08:13:50 [kv_cache_utils.py:1087] GPU KV cache size: 99,999 tokens
";
        let got = parse("relaunch.log", text);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].launch, got[0].pool_tokens), (0, None));
        assert_eq!((got[0].context_len, got[0].line), (Some(8192), 1));
        assert_eq!((got[1].launch, got[1].pool_tokens), (1, Some(99_999)));
        assert_eq!((got[1].context_len, got[1].line), (Some(4096), 6));
    }

    /// V0's engine line is printed once per launch: a second one opens a new launch (the second
    /// launch's refusal is its own, not the first's), while a chunked-prefill line before the
    /// first (a progress line) does not split a launch from its own engine line. 0.7's `a V0 LLM
    /// engine (vX)` form gives the version and the context too.
    #[test]
    fn a_second_v0_engine_line_opens_a_new_launch() {
        let text = "\
INFO 01-11 15:40:01 config.py:999] Chunked prefill is enabled with max_num_batched_tokens=512.
INFO 01-11 15:40:02 llm_engine.py:70] Initializing an LLM engine with config: model='m', max_seq_len=4096, seed=0)
INFO 01-11 15:40:18 llm_engine.py:275] # GPU blocks: 2000, # CPU blocks: 512
INFO 01-11 15:51:02 llm_engine.py:70] Initializing an LLM engine with config: model='m', max_seq_len=4096, seed=0)
INFO 01-11 15:51:18 llm_engine.py:275] # GPU blocks: 229, # CPU blocks: 512
ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
";
        let got = parse("v0_twice.log", text);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].launch, got[0].gpu_blocks, got[0].refused_start), (0, Some(2000), None));
        assert_eq!((got[0].chunked_prefill_size, got[0].context_len), (Some(512), Some(4096)));
        assert_eq!((got[1].launch, got[1].gpu_blocks, got[1].pool_tokens), (1, Some(229), Some(3664)));
        assert_eq!(got[1].refused_start, Some(6));
        let v07 = "INFO 03-11 02:12:12 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.3) with config: model='m', max_seq_len=8192, seed=0";
        let f = parse("v07.log", v07).remove(0);
        assert_eq!((f.engine, f.version.as_deref(), f.context_len), (Some(Engine::Vllm), Some("0.7.3"), Some(8192)));
        // V1's line is printed by every DP engine core of one launch: no new launch.
        let v1 = "\
(EngineCore_0 pid=1) INFO 05-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.9.0) with config: model='m', max_seq_len=8192
(EngineCore_1 pid=2) INFO 05-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.9.0) with config: model='m', max_seq_len=8192
";
        assert!(parse("v1_dp.log", v1).iter().all(|n| n.launch == 0));
    }

    #[test]
    fn pipeline_stages_are_their_own_groups_and_tp_ranks_share_one() {
        let text = "\
[2026-03-02 10:00:00 PP0 TP0] KV Cache is allocated. #tokens: 500000, K size: 1.00 GB
[2026-03-02 10:00:00 PP0 TP1] KV Cache is allocated. #tokens: 500000, K size: 1.00 GB
[2026-03-02 10:00:00 PP1 TP0] KV Cache is allocated. #tokens: 480000, K size: 1.00 GB
";
        let got = parse("pp.log", text);
        let pools: Vec<_> = got.iter().map(|n| (n.rank.as_deref(), n.pool_tokens)).collect();
        assert_eq!(pools, vec![(Some("PP0 TP0"), Some(500_000)), (Some("PP1 TP0"), Some(480_000))]);
    }

    #[test]
    fn rank_prefixes() {
        let p = patterns();
        let s = rank_scope(p, "[2026-03-02 10:11:12 DP3 ATTN_CP0 MOE_DP1 TP6 EP6] x").unwrap();
        assert_eq!(s.dp, Some(3));
        assert_eq!(s.label, "DP3 ATTN_CP0 MOE_DP1 TP6 EP6");
        let s = rank_scope(p, "[2026-03-02 10:11:12 MOE_DP1 TP6] x").unwrap();
        assert_eq!(s.dp, None);
        assert!(rank_scope(p, "[2026-03-02 10:11:12] x").is_none());
        assert!(rank_scope(p, "(APIServer pid=12) INFO x").is_none());
        assert!(rank_scope(p, "(Worker_TP1 pid=12) INFO x").is_none());
        assert_eq!(rank_scope(p, "(EngineCore_2 pid=9) INFO x").unwrap().dp, Some(2));
        assert_eq!(rank_scope(p, "(Worker_DP1_TP0 pid=9) x").unwrap().label, "DP1");
    }

    #[test]
    fn role_spellings() {
        let role = |line: &str| parse("r.log", line)[0].role;
        let kv = "[2026-03-02 10:00:00] KV Cache is allocated. #tokens: 10, K size: 0.01 GB";
        assert_eq!(role(&format!("{kv}, disaggregation_mode=DisaggregationMode.DECODE")), Role::Decode);
        assert_eq!(role(&format!("{kv}, disaggregation_mode='null'")), Role::Unknown);
        let args = "INFO 10-14 08:12:30 [utils.py:233] non-default args: {'kv_transfer_config': ";
        assert_eq!(
            role(&format!("{args}{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_consumer\"}}}}")),
            Role::Decode
        );
        assert_eq!(role(&format!("{args}KVTransferConfig(kv_role='kv_both')}}")), Role::Unknown);
    }

    #[test]
    fn start_banner_opens_a_launch() {
        let text = "\
=== Starting sglang (decode) ===
[2026-03-02 10:00:00] KV Cache is allocated. #tokens: 1000, K size: 0.01 GB, V size: 0.01 GB
=== Starting sglang (decode) ===
[2026-03-02 10:05:00] KV Cache is allocated. #tokens: 2000, K size: 0.02 GB, V size: 0.02 GB
";
        let got = parse("banner.log", text);
        let pools: Vec<_> = got.iter().map(|n| (n.launch, n.pool_tokens)).collect();
        assert_eq!(pools, vec![(0, Some(1000)), (1, Some(2000))]);
    }

    #[test]
    fn scan_and_number_helpers() {
        assert_eq!(scan_value("681,280, chunked"), "681,280");
        assert_eq!(scan_value("1048576, available"), "1048576");
        assert_eq!(scan_value("'32768', x"), "32768");
        assert_eq!(scan_value("16)"), "16");
        assert_eq!(scan_value("8192."), "8192");
        assert_eq!(scan_value("11.84 GB"), "11.84");
        assert_eq!(parse_count("681,280"), Some(Some(681_280)));
        assert_eq!(parse_count("1234"), Some(Some(1234)));
        assert_eq!(parse_count("None"), Some(None));
        assert_eq!(parse_count("1234,567"), None);
        assert_eq!(parse_count(""), None);
        assert_eq!(parse_count("99999999999999999999999"), None);
        assert_eq!(parse_float("11.84"), Some(11.84));
        assert_eq!(parse_float("12"), Some(12.0));
        assert_eq!(parse_float("1e3"), None);
        assert_eq!(parse_float(".5"), None);
    }

    #[test]
    fn admission_limits() {
        // Pool-bound: min(131071, 413695) - 5 = 131066 is the first rejected length.
        assert_eq!(max_req_input_len(131_072, 413_696), 131_066);
        assert_eq!(max_accepted_prompt(131_072, 413_696), 131_065);
        assert_eq!(rejection_band(131_072, 413_696), Some((131_066, 131_072)));
        // Pool smaller than the context: the band widens to the pool.
        assert_eq!(max_accepted_prompt(1_048_576, 681_280), 681_273);
        assert_eq!(rejection_band(1_048_576, 681_280), Some((681_274, 1_048_576)));
        // Saturating edges.
        assert_eq!(max_accepted_prompt(0, 0), 0);
        assert_eq!(rejection_band(0, 0), None);
        assert_eq!(rejection_band(6, 1_000), Some((0, 6)));
        assert_eq!(rejection_band(5, 1_000), Some((0, 5)));
        assert_eq!(rejection_band(1, 1_000), Some((0, 1)));
    }
}
