//! The JSON Lines trace format: a header (kvsim version, seed, the fully resolved configuration,
//! the filter if any), one line per record (`t` = virtual ns, then the record), and a footer with
//! the counts, the trace hash and the violations. Pure: formatting and filtering only; the binary
//! owns the files.

use crate::config::SimConfig;
use crate::event::Ev;
use crate::pool::Run;
use crate::report::ViolationOut;
use crate::trace::{DecodeEntry, MemOp, TraceRecord};
use crate::types::{Instant, PoolId, RequestId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The trace file format. `/3`: a decode batch step is one `decode_step` record (variant 6 of
/// `trace::encode`) instead of a `read` and a `write` per request. `/2` (a read and a write per
/// request-token) and `/1` (FNV-1a over `derive(Hash)`) files carry hashes of other record
/// streams that this kvsim can neither recompute nor compare, so they are refused with a message
/// saying to record them again.
pub const FORMAT: &str = "kvsim-trace/4";

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub kind: String,
    pub format: String,
    pub kvsim_version: String,
    pub seed: u64,
    pub config: SimConfig,
    /// Present when only the records touching these requests and pages were kept.
    pub filter: Option<Filter>,
    /// The run compared every read with the reference oracle (`--check-oracle`): a replay does
    /// the same, so a recorded disagreement replays as one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check_oracle: bool,
    /// The explored schedule the run followed (`kvsim run --choices`: a choice string, as
    /// `explore::ChoiceString` writes it): a replay follows it too. Absent for a seeded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<String>,
    /// The run was also judged by the noninterference check (`kvsim run --check
    /// noninterference`, a channel's example in a campaign): its findings are not records of the
    /// run (the footer is the run's own), so a replay runs the check again and exits as the run
    /// did, and shrink keeps the check. Absent when the run had no such check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noninterference: Option<NoninterferenceCheck>,
}

/// `Header::noninterference`: the check's secret tenant, when one was named (`--secret-tenant`;
/// absent: every tenant that sends prefix blocks, in turn).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NoninterferenceCheck {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_tenant: Option<u32>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Footer {
    pub kind: String,
    pub records: u64,
    pub written: u64,
    pub events: u64,
    pub trace_hash: String,
    pub exit_code: i32,
    pub violations: Vec<ViolationOut>,
    /// Latency summaries (absent in traces written before they existed).
    #[serde(default)]
    pub latency: crate::latency::Latency,
    /// One record per request (absent in traces written before they existed).
    #[serde(default)]
    pub requests: Vec<crate::latency::RequestRecord>,
    /// The run's configuration as it ran (`config_digest`): a header edited after the run (its
    /// profile's name, a knob) replays as a difference here, since the records may not show it.
    /// Absent in traces written before it existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config: String,
}

/// A digest of a configuration: xxh3-64 (seed 0) of its JSON, in hex.
pub fn config_digest(cfg: &SimConfig) -> String {
    let json = serde_json::to_string(cfg).expect("a configuration serialises");
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(json.as_bytes()))
}

/// One record line.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Line {
    pub t: u64,
    #[serde(flatten)]
    pub rec: TraceRecord,
}

impl Header {
    pub fn new(cfg: &SimConfig, filter: Option<Filter>) -> Header {
        Header {
            kind: "header".into(),
            format: FORMAT.into(),
            kvsim_version: env!("CARGO_PKG_VERSION").into(),
            seed: cfg.seed,
            config: cfg.clone(),
            filter,
            check_oracle: false,
            choices: None,
            noninterference: None,
        }
    }

    /// The schedule the run followed, parsed (`None` for a seeded run).
    pub fn schedule(&self) -> Result<Option<crate::explore::ChoiceString>, String> {
        self.choices.as_deref().map(|c| c.parse().map_err(|e| format!("header field `choices`: {e}"))).transpose()
    }
}

pub fn line_json(at: Instant, rec: &TraceRecord) -> String {
    serde_json::to_string(&Line { t: at.0, rec: rec.clone() }).expect("records serialise")
}

/// The `kind` of a JSON object line (`"header"`, `"footer"`), if it is one and has one.
pub fn line_kind(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    serde_json::from_str::<Kind>(text).ok().and_then(|k| k.kind)
}

/// Whether a line that is not a record is the footer: a JSON object whose `kind` is `"footer"`.
fn is_footer(text: &str) -> bool {
    text.contains("footer") && line_kind(text).as_deref() == Some("footer")
}

/// The footer a run writes after its records: counts, hash, exit status and violations.
impl Footer {
    pub fn of(w: &crate::world::World, report: &crate::report::Report, written: u64) -> Footer {
        Footer {
            kind: "footer".into(),
            records: w.tracer.records,
            written,
            events: w.events,
            trace_hash: w.tracer.hash_hex(),
            exit_code: report.exit_code,
            violations: report.violations.clone(),
            latency: report.latency.clone(),
            requests: report.per_request.clone(),
            config: config_digest(&w.cfg),
        }
    }

    /// The fields in which `replayed` differs from this (recorded) footer, as `name: recorded →
    /// replayed` lines; empty when they agree.
    pub fn differences(&self, replayed: &Footer) -> Vec<String> {
        let mut d = Vec::new();
        let mut field = |name: &str, a: String, b: String| {
            if a != b {
                d.push(format!("{name}: recorded {a}, replayed {b}"));
            }
        };
        if !self.config.is_empty() {
            field("config (digest of the header's configuration)", self.config.clone(), replayed.config.clone());
        }
        field("trace_hash", self.trace_hash.clone(), replayed.trace_hash.clone());
        field("records", self.records.to_string(), replayed.records.to_string());
        field("written", self.written.to_string(), replayed.written.to_string());
        field("events", self.events.to_string(), replayed.events.to_string());
        field("exit_code", self.exit_code.to_string(), replayed.exit_code.to_string());
        field("violations (count)", self.violations.len().to_string(), replayed.violations.len().to_string());
        if let Some((i, (a, b))) =
            self.violations.iter().zip(&replayed.violations).enumerate().find(|(_, (a, b))| a != b)
        {
            let j = |v: &ViolationOut| serde_json::to_string(v).expect("violations serialise");
            field(&format!("violations[{i}]"), j(a), j(b));
        }
        let json = |v: &dyn erased::Json| v.json();
        field("latency", json(&self.latency), json(&replayed.latency));
        field("requests (count)", self.requests.len().to_string(), replayed.requests.len().to_string());
        if let Some((i, (a, b))) = self.requests.iter().zip(&replayed.requests).enumerate().find(|(_, (a, b))| a != b) {
            field(&format!("requests[{i}]"), json(a), json(b));
        }
        d
    }
}

mod erased {
    /// A value shown as its JSON in a footer difference.
    pub trait Json {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).expect("footer fields serialise")
        }
    }
}

/// A bad trace file (exit status 2): the file, the 1-based line (0 = the file as a whole) and
/// what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file, self.message),
            l => write!(f, "{}:{l}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for TraceError {}

/// How strictly to read a header.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    /// Accept a trace written by another kvsim version (`replay --force`; `confirm` and
    /// `shrink`, which do not compare records, always do).
    pub any_version: bool,
}

/// One item after the header.
#[derive(Debug, Clone)]
pub enum Item {
    /// A record line, as written and as read.
    Record {
        text: String,
        line: Line,
    },
    Footer(Box<Footer>),
}

/// The one reader of trace files, for every command that reads one (`replay`, `shrink`,
/// `confirm`, `fuzz`) and for the `parse_trace` fuzz target. Streaming: memory is one line.
/// Why a trace of another format is refused, and what to do about it.
fn format_refusal(found: &str) -> String {
    if found == "kvsim-trace/3" {
        format!(
            "trace format `kvsim-trace/3` is no longer read (this kvsim reads `{FORMAT}`: a request that reuses \
             radix-cached prefix blocks now has a `lock` record naming their pages, which start its block table, so \
             a /3 file's records and hash cannot be compared); record the trace again with this kvsim \
             (`kvsim run SCENARIO --seed N --trace FILE`)"
        )
    } else if found == "kvsim-trace/2" {
        format!(
            "trace format `kvsim-trace/2` is no longer read (this kvsim reads `{FORMAT}`: a decode batch step is now \
             one `decode_step` record, not a read and a write per request, so a /2 file's records and hash cannot be \
             compared); record the trace again with this kvsim (`kvsim run SCENARIO --seed N --trace FILE`)"
        )
    } else if found == "kvsim-trace/1" {
        format!(
            "trace format `kvsim-trace/1` is no longer read (this kvsim reads `{FORMAT}`: the trace hash is now \
             XXH3-64 over a byte-for-byte record encoding, so a /1 file's hash cannot be compared); \
             record the trace again with this kvsim (`kvsim run SCENARIO --seed N --trace FILE`)"
        )
    } else {
        format!("trace format `{found}`, this kvsim reads `{FORMAT}`; record the trace again with this kvsim")
    }
}

/// `open` reads and validates the header (format, version, the configuration — exactly one a
/// scenario resolves to — and the filter); `next` yields records up to the footer.
pub struct TraceReader<R: std::io::BufRead> {
    src: R,
    file: String,
    line: usize,
    pub header: Header,
    done: bool,
}

impl<R: std::io::BufRead> TraceReader<R> {
    pub fn open(file: &str, mut src: R, opts: ReadOptions) -> Result<TraceReader<R>, TraceError> {
        let e = |line: usize, message: String| TraceError { file: file.to_string(), line, message };
        // Not text at all (gzip, UTF-16, a device such as /dev/zero, whose first line never
        // ends): said from the first bytes, before a line is read.
        if let Some(what) = src.fill_buf().ok().and_then(crate::sniff) {
            return Err(e(1, format!("cannot read: {what}")));
        }
        // The header is the first line that is not blank (blank lines are skipped everywhere).
        let mut first = String::new();
        let mut at = 0;
        loop {
            first.clear();
            at += 1;
            match src.read_line(&mut first) {
                Ok(0) => return Err(e(at, "empty trace".into())),
                Ok(_) if first.trim().is_empty() => continue,
                Ok(_) => break,
                Err(x) => return Err(e(at, format!("cannot read: {x}"))),
            }
        }
        if !first.trim_start().starts_with('{') {
            return Err(e(
                at,
                "not a kvsim trace: its first line is not JSON (a scenario? `kvsim run` takes a scenario)".into(),
            ));
        }
        // The format is checked before the header is read as this version's `Header`: an older
        // file is refused for its format, not for a field this version added or renamed.
        if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(first.trim_end()) {
            if let Some(serde_json::Value::String(f)) = m.get("format") {
                if f != FORMAT {
                    return Err(e(at, format_refusal(f)));
                }
            }
        }
        let header: Header =
            super::from_json(first.trim_end()).map_err(|x| e(at, format!("not a kvsim trace header: {x}")))?;
        if header.kind != "header" {
            return Err(e(at, format!("the first line is a `{}` line, not the header", header.kind)));
        }
        if header.format != FORMAT {
            return Err(e(at, format_refusal(&header.format)));
        }
        let mine = env!("CARGO_PKG_VERSION");
        if header.kvsim_version != mine && !opts.any_version {
            return Err(e(
                1,
                format!(
                    "written by kvsim {}, this is kvsim {mine}; a different model version may legitimately diverge (`kvsim replay --force` compares it anyway; `kvsim confirm` takes this version's traces only: run its scenario again with `--trace`)",
                    header.kvsim_version
                ),
            ));
        }
        if header.seed != header.config.seed {
            return Err(e(
                1,
                format!("header seed {} differs from its configuration's {}", header.seed, header.config.seed),
            ));
        }
        crate::scenario::validate_config(&header.config, file).map_err(|x| e(at, x.to_string()))?;
        if let Some(f) = &header.filter {
            f.validate().map_err(|m| e(at, m.to_string()))?;
        }
        header.schedule().map_err(|m| e(at, m))?;
        Ok(TraceReader { src, file: file.to_string(), line: at, header, done: false })
    }

    /// The 1-based number of the last line read.
    pub fn line(&self) -> usize {
        self.line
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    fn err(&self, message: String) -> TraceError {
        TraceError { file: self.file.clone(), line: self.line, message }
    }

    /// The next record or the footer; `None` at the end of the file (after the footer, or where
    /// a cut-short trace ends). Text after the footer is an error.
    pub fn next_item(&mut self) -> Result<Option<Item>, TraceError> {
        let mut text = String::new();
        // Blank lines (an editor's trailing newline, a paste) carry nothing: skipped wherever they
        // are, as `\r\n` line ends are read as `\n` (a trailing blank line was "text after the
        // footer", one in the middle "EOF while parsing a value").
        loop {
            text.clear();
            let n = self
                .src
                .read_line(&mut text)
                .map_err(|x| self.err(format!("cannot read line {}: {x}", self.line + 1)))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if !text.trim().is_empty() {
                break;
            }
        }
        if self.done {
            return Err(self.err("text after the footer".into()));
        }
        // A line ends with `\n`, or `\r\n` where an editor or a Windows tool rewrote the file (the
        // `\r` would otherwise show as a divergence between two lines that look the same).
        let text = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t)).to_string();
        match super::from_json::<Line>(&text) {
            Ok(line) => Ok(Some(Item::Record { text, line })),
            // The footer by its `kind`, however the line is spaced (a footer re-serialised with
            // `json.dumps`' spaces read as "missing field `t`").
            Err(e) if is_footer(&text) => {
                let f: Footer = super::from_json(&text).map_err(|x| self.err(format!("bad footer: {x}")))?;
                if f.kind != "footer" {
                    return Err(self.err(format!("not a trace record: {e}")));
                }
                self.done = true;
                Ok(Some(Item::Footer(Box::new(f))))
            }
            Err(e) => Err(self.err(format!("not a trace record: {}", with_key(&text, &e)))),
        }
    }

    /// Reads to the end, checking that every line is a record and the footer is there (what a
    /// reader that uses only the header, such as `shrink --any-version`, still owes the file).
    pub fn read_to_footer(mut self) -> Result<Footer, TraceError> {
        let mut footer = None;
        while let Some(item) = self.next_item()? {
            if let Item::Footer(f) = item {
                footer = Some(*f);
            }
        }
        footer.ok_or_else(|| self.cut_short())
    }

    fn cut_short(&self) -> TraceError {
        TraceError {
            file: self.file.clone(),
            line: self.line,
            message: "the file ends without its footer (the trace was cut short)".into(),
        }
    }

    /// Reads to the end: the memory operations (time, op) and the footer, which must be there.
    pub fn mem_log(mut self) -> Result<TraceMemLog, TraceError> {
        let mut mem = Vec::new();
        let mut lines = Vec::new();
        let mut footer = None;
        while let Some(item) = self.next_item()? {
            match item {
                // A decode step as the records it stands for, each on the step's line.
                Item::Record {
                    line: Line { t, rec: TraceRecord::Mem(MemOp::DecodeStep { pool, entries }) }, ..
                } => {
                    for e in &entries {
                        for op in e.expand(pool) {
                            mem.push((t, op));
                            lines.push(self.line);
                        }
                    }
                }
                Item::Record { line: Line { t, rec: TraceRecord::Mem(op) }, .. } => {
                    mem.push((t, op));
                    lines.push(self.line);
                }
                Item::Record { .. } => {}
                Item::Footer(f) => footer = Some(*f),
            }
        }
        let footer = footer.ok_or_else(|| self.cut_short())?;
        Ok(TraceMemLog { header: self.header, mem, lines, footer })
    }
}

/// What `confirm` needs of a trace file.
#[derive(Debug, Clone)]
pub struct TraceMemLog {
    pub header: Header,
    /// The memory operations, decode steps expanded (`trace::expand_log`).
    pub mem: Vec<(u64, MemOp)>,
    /// The file line of each memory operation, for messages.
    pub lines: Vec<usize>,
    pub footer: Footer,
}

/// `--trace-filter`: the violating requests and, per pool, the pages their violations name and
/// every page their violating reads depend on (see [`Filter::for_run`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    pub requests: BTreeSet<u32>,
    pub pages: BTreeMap<String, Vec<(u32, u32)>>,
}

/// Whether any page of `pages` lies in `runs` (sorted, disjoint: see [`normalize`]).
fn overlaps(runs: &[(u32, u32)], pages: &[Run]) -> bool {
    pages.iter().any(|p| {
        // The first run that ends after the page run starts; it overlaps if it starts before
        // the page run ends.
        let i = runs.partition_point(|&(f, c)| u64::from(f) + u64::from(c) <= u64::from(p.first));
        runs.get(i).is_some_and(|&(f, _)| u64::from(f) < u64::from(p.first) + u64::from(p.count))
    })
}

/// Sorts page runs and merges overlapping and adjacent ones (ends clamped to `u32::MAX`).
fn normalize(runs: &mut Vec<(u32, u32)>) {
    runs.retain(|r| r.1 > 0);
    runs.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(runs.len());
    for &(f, c) in runs.iter() {
        let end = (u64::from(f) + u64::from(c)).min(u64::from(u32::MAX));
        match out.last_mut() {
            Some(last) if u64::from(last.0) + u64::from(last.1) >= u64::from(f) => {
                last.1 = (end.max(u64::from(last.0) + u64::from(last.1)) - u64::from(last.0)) as u32;
            }
            _ => out.push((f, (end - u64::from(f)) as u32)),
        }
    }
    *runs = out;
}

/// Sorted pages as `(first, count)` runs.
fn pages_to_runs(pages: BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for p in pages {
        match runs.last_mut() {
            Some(r) if r.0 + r.1 == p => r.1 += 1,
            _ => runs.push((p, 1)),
        }
    }
    runs
}

/// A trace sink that keeps only the memory log (for [`Filter::for_run`]), decode steps expanded.
#[derive(Default)]
pub struct MemLog(pub std::rc::Rc<std::cell::RefCell<Vec<(u64, MemOp)>>>);

impl crate::trace::TraceSink for MemLog {
    fn record(&mut self, at: Instant, rec: &TraceRecord) {
        if let TraceRecord::Mem(op) = rec {
            let mut log = self.0.borrow_mut();
            match op {
                MemOp::DecodeStep { pool, entries } => {
                    log.extend(entries.iter().flat_map(|e| e.expand(*pool)).map(|o| (at.0, o)))
                }
                op => log.push((at.0, op.clone())),
            }
        }
    }
}

/// What a filter keeps of one record.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept {
    /// The whole record.
    All,
    /// Nothing.
    None,
    /// A decode step partly kept: these records instead, in order (the kept entries as decode
    /// steps, an entry of which only the page or the write is kept as those plain records), so
    /// that the result, expanded, is what the filter keeps of the step's expansion.
    Rewritten(Vec<TraceRecord>),
}

/// A filter read from a file whose page run ends beyond `u32` (`Filter::keeps` computes
/// `first + count`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub pool: String,
    pub first: u32,
    pub count: u32,
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "filter: pages {}+{} of {} overflow", self.first, self.count, self.pool)
    }
}

impl std::error::Error for FilterError {}

impl Filter {
    /// A filter read from a file: page runs whose end fits in a `u32` (`keeps` computes
    /// `first + count`).
    pub fn validate(&self) -> Result<(), FilterError> {
        for (pool, runs) in &self.pages {
            if let Some(&(first, count)) = runs.iter().find(|(a, c)| a.checked_add(*c).is_none()) {
                return Err(FilterError { pool: pool.clone(), first, count });
            }
        }
        Ok(())
    }

    pub fn from_violations(vs: &[crate::check::Violation]) -> Filter {
        let mut f = Filter::default();
        for v in vs {
            if let Some(r) = v.request {
                f.requests.insert(r.0);
            }
            if let (Some(pool), false) = (v.pool, v.page_runs.is_empty()) {
                let e = f.pages.entry(pool.to_string()).or_default();
                e.extend(v.page_runs.iter().map(|r| (r.first, r.count)));
                normalize(e);
            }
            if let Some(c) = v.culprit {
                f.requests.insert(c.request.0);
            }
        }
        f
    }

    /// The filter of a finished run: [`Filter::from_violations`] plus every page the violating
    /// reads depend on, as `confirm::lower` traces them back (through copies to their source
    /// pages, up to the frees and restarts that cleared them). Every record that touches one of
    /// those pages is kept, so the history of each page a kept read reads — the prefill writes
    /// behind a copy, another request's allocation and free of a page that `zero_on_free`
    /// clears — is in the filtered trace, and `kvsim confirm` on it lowers the same program as on
    /// the full trace. `mem` is the run's whole memory log.
    pub fn for_run(w: &crate::world::World, mem: &[(u64, MemOp)]) -> Filter {
        let mut f = Filter::from_violations(&w.oracle.violations);
        let report = crate::report::Report::build(w, String::new());
        let select = crate::confirm::Select::Violations { violations: &report.violations, max: usize::MAX };
        let shape = kvsim_gpu::AttnShape::default_small();
        // A run's own log always lowers; without a violating read there is nothing to add.
        if let Ok(l) = crate::confirm::lower(mem, crate::confirm::MemModel::of(&w.cfg), select, shape) {
            for (pool, pages) in l.depends_on {
                let e = f.pages.entry(pool.to_string()).or_default();
                e.extend(pages_to_runs(pages));
                normalize(e);
            }
        }
        f
    }

    /// The same filter with every pool's page runs sorted and merged, as `keeps` expects (the
    /// constructors produce that; a filter read from a file goes through here).
    pub fn normalized(mut self) -> Filter {
        self.pages.values_mut().for_each(normalize);
        self
    }

    fn req(&self, r: RequestId) -> bool {
        self.requests.contains(&r.0)
    }

    fn pages_hit(&self, pool: PoolId, pages: &[Run]) -> bool {
        self.pages.get(&pool.to_string()).is_some_and(|runs| overlaps(runs, pages))
    }

    fn slots_hit(&self, pool: PoolId, page_size: u64, slots: &[(u64, u64, u64)]) -> bool {
        let page_size = page_size.max(1);
        let pages: Vec<Run> = slots
            .iter()
            .map(|&(s, l, _)| {
                let (p0, p1) = (s / page_size, s.saturating_add(l).div_ceil(page_size));
                Run { first: p0 as u32, count: (p1 - p0) as u32 }
            })
            .collect();
        self.pages_hit(pool, &pages)
    }

    /// What a filter keeps of a record: [`Filter::keeps`] for the plain ones; a decode step keeps
    /// each entry's read, page allocation and write as it would keep those records.
    pub fn kept(&self, rec: &TraceRecord, page_size: u64) -> Kept {
        let TraceRecord::Mem(MemOp::DecodeStep { pool, entries }) = rec else {
            return if self.keeps(rec, page_size) { Kept::All } else { Kept::None };
        };
        let mut out = Vec::new();
        let mut whole: Vec<DecodeEntry> = Vec::new();
        let mut all = true;
        for e in entries {
            if self.req(e.r) {
                whole.push(*e);
                continue;
            }
            all = false;
            // Not a kept request: its read is dropped; its page and its write are kept when
            // they touch the filter's pages.
            let parts: Vec<MemOp> =
                e.expand(*pool).filter(|op| self.keeps(&TraceRecord::Mem(op.clone()), page_size)).collect();
            if !parts.is_empty() {
                if !whole.is_empty() {
                    out.push(TraceRecord::Mem(MemOp::DecodeStep { pool: *pool, entries: std::mem::take(&mut whole) }));
                }
                out.extend(parts.into_iter().map(TraceRecord::Mem));
            }
        }
        if all {
            return Kept::All;
        }
        if !whole.is_empty() {
            out.push(TraceRecord::Mem(MemOp::DecodeStep { pool: *pool, entries: whole }));
        }
        if out.is_empty() {
            Kept::None
        } else {
            Kept::Rewritten(out)
        }
    }

    /// Whether a record touches a violating request or the pages the violations read (a decode
    /// step: whether any of it is kept, see [`Filter::kept`]).
    pub fn keeps(&self, rec: &TraceRecord, page_size: u64) -> bool {
        match rec {
            TraceRecord::Response { r, .. } => self.req(*r),
            TraceRecord::Event(ev) => match (ev.request(), ev) {
                (Some(r), _) => self.req(r),
                (None, Ev::Crash { .. } | Ev::Restart { .. } | Ev::HeartbeatLost { .. }) => true,
                (None, _) => false,
            },
            TraceRecord::Mem(op) => match op {
                MemOp::Reset { .. } => true,
                MemOp::Alloc { pool, r, pages } | MemOp::Free { pool, r, pages } | MemOp::Lock { pool, r, pages } => {
                    self.req(*r) || self.pages_hit(*pool, pages)
                }
                MemOp::Write { pool, r, slots, .. } => self.req(*r) || self.slots_hit(*pool, page_size, slots),
                MemOp::Copy { src, dst, r, pages } => {
                    let s: Vec<Run> = pages.iter().map(|&(a, _, c)| Run { first: a, count: c }).collect();
                    let d: Vec<Run> = pages.iter().map(|&(_, b, c)| Run { first: b, count: c }).collect();
                    self.req(*r) || self.pages_hit(*src, &s) || self.pages_hit(*dst, &d)
                }
                MemOp::Read { r, .. } => self.req(*r),
                // A lagged batch's data in flight: rare, and a kept read may depend on it through
                // pages the filter names in neither pool, so every one is kept.
                MemOp::Send { .. } | MemOp::Land { .. } => true,
                MemOp::DecodeStep { .. } => self.kept(rec, page_size) != Kept::None,
            },
        }
    }
}

/// A record's parse error with the key it is at, when the error names none: a record's kinds are
/// told apart by their fields (no path through them), so serde's message gave only a column
/// (`invalid type: string "x", expected u64 at line 1 column 104`). The key is the last `"key":`
/// before that column.
fn with_key(text: &str, e: &str) -> String {
    if e.starts_with("field `") {
        return e.to_string();
    }
    let col = e.rsplit_once(" column ").and_then(|(_, c)| c.trim().parse::<usize>().ok());
    let key = col.and_then(|c| {
        let before = text.get(..c.min(text.len()))?;
        let colon = before.rfind("\":")?;
        let open = before[..colon].rfind('"')?;
        Some(&before[open + 1..colon])
    });
    match key {
        Some(k) if !k.is_empty() => format!("field `{k}`: {e}"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Role, TenantId};

    /// A wrongly typed value in a record is named by its key (it was a column only).
    #[test]
    fn a_bad_record_value_is_named_by_its_key() {
        let text = r#"{"t":5,"kind":"mem","op":"alloc","pool":"decode-0","r":0,"pages":"x"}"#;
        let e = "invalid type: string \"x\", expected u64 at line 1 column 69";
        assert_eq!(with_key(text, e), format!("field `pages`: {e}"));
        assert_eq!(with_key(text, "field `a`: bad"), "field `a`: bad");
        assert_eq!(with_key("{}", "EOF while parsing at line 1 column 99"), "EOF while parsing at line 1 column 99");
    }

    #[test]
    fn a_filter_whose_pages_overflow_is_a_typed_error() {
        let mut f = Filter::default();
        f.pages.insert("decode-0".into(), vec![(0, 4), (u32::MAX, 1)]);
        let e = f.validate().unwrap_err();
        assert_eq!(e, FilterError { pool: "decode-0".into(), first: u32::MAX, count: 1 });
        assert_eq!(e.to_string(), "filter: pages 4294967295+1 of decode-0 overflow");
        f.pages.insert("decode-0".into(), vec![(u32::MAX - 1, 1)]);
        assert_eq!(f.validate(), Ok(()));
    }

    /// A decode step filtered, then expanded, is the step's expansion filtered record by record:
    /// a kept request's entry stays whole, another's page and write stay when they touch the
    /// filter's pages (its read never does), and nothing else stays.
    #[test]
    fn a_filtered_decode_step_is_its_expansion_filtered() {
        let pool = PoolId { role: Role::Decode, index: 0 };
        let mut f = Filter::default();
        f.requests.insert(7);
        f.pages.insert(pool.to_string(), vec![(4, 1)]);
        let f = f.normalized();
        let e = |r: u32, seq_len: u64, page: Option<u32>, slot: u64| DecodeEntry {
            r: RequestId(r),
            tenant: TenantId(r),
            seq_len,
            page,
            slot,
        };
        let expand = |recs: &[TraceRecord]| -> Vec<MemOp> {
            recs.iter()
                .flat_map(|r| match r {
                    TraceRecord::Mem(op) => op.expanded(),
                    _ => panic!("not a memory record"),
                })
                .collect()
        };
        let cases = [
            // Every entry a kept request's: kept whole.
            (vec![e(7, 16, Some(9), 144), e(7, 3, None, 35)], Some(Kept::All)),
            // No entry kept: dropped.
            (vec![e(1, 16, Some(9), 144), e(2, 5, None, 37)], Some(Kept::None)),
            // Mixed: request 7's entries whole, request 8's page 4 and its write in it, request
            // 9's write into page 4 (no page taken), request 1 dropped.
            (
                vec![
                    e(7, 16, Some(9), 144),
                    e(1, 5, None, 37),
                    e(8, 32, Some(4), 64),
                    e(7, 17, None, 145),
                    e(9, 35, None, 67),
                ],
                None,
            ),
        ];
        for (entries, want) in cases {
            let rec = TraceRecord::Mem(MemOp::DecodeStep { pool, entries });
            let got = f.kept(&rec, 16);
            if let Some(w) = want {
                assert_eq!(got, w);
            }
            let kept: Vec<TraceRecord> = match got {
                Kept::All => vec![rec.clone()],
                Kept::None => vec![],
                Kept::Rewritten(v) => v,
            };
            let TraceRecord::Mem(op) = &rec else { unreachable!() };
            let want: Vec<MemOp> =
                op.expanded().into_iter().filter(|o| f.keeps(&TraceRecord::Mem(o.clone()), 16)).collect();
            assert_eq!(expand(&kept), want);
            assert_eq!(f.keeps(&rec, 16), !want.is_empty());
        }
        // The mixed case rewrites into: step [7], alloc 4 + write (8), step [7], write (9).
        let rec = TraceRecord::Mem(MemOp::DecodeStep {
            pool,
            entries: vec![
                e(7, 16, Some(9), 144),
                e(1, 5, None, 37),
                e(8, 32, Some(4), 64),
                e(7, 17, None, 145),
                e(9, 35, None, 67),
            ],
        });
        let Kept::Rewritten(v) = f.kept(&rec, 16) else { panic!("partly kept") };
        let kinds: Vec<&str> = v
            .iter()
            .map(|r| match r {
                TraceRecord::Mem(MemOp::DecodeStep { .. }) => "step",
                TraceRecord::Mem(MemOp::Alloc { .. }) => "alloc",
                TraceRecord::Mem(MemOp::Write { .. }) => "write",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["step", "alloc", "write", "step", "write"]);
    }

    #[test]
    fn page_runs_normalize_and_overlap() {
        let mut runs = vec![(10, 5), (0, 2), (12, 10), (2, 1), (40, 0), (u32::MAX - 1, 5)];
        normalize(&mut runs);
        assert_eq!(runs, vec![(0, 3), (10, 12), (u32::MAX - 1, 1)]);
        let hit = |first, count| overlaps(&runs, &[Run { first, count }]);
        assert!(hit(2, 1) && hit(21, 9) && hit(5, 6) && hit(u32::MAX - 1, 1));
        assert!(!hit(3, 7) && !hit(22, 100) && !hit(5, 0));
    }

    #[test]
    fn lines_round_trip() {
        let pool = PoolId { role: Role::Decode, index: 1 };
        for rec in [
            TraceRecord::Event(Ev::Tick { node: pool }),
            TraceRecord::Event(Ev::DstInfo {
                r: RequestId(3),
                prefill: crate::types::PrefillIdx(0),
                dst: Box::new(crate::event::DstInfo {
                    decode: crate::types::DecodeIdx(1),
                    epoch: 0,
                    pages: vec![Run { first: 1, count: 2 }],
                    meta_slot: 4,
                }),
            }),
            TraceRecord::Mem(MemOp::Write { pool, r: RequestId(2), tenant: TenantId(9), slots: vec![(64, 10, 0)] }),
            TraceRecord::Response { r: RequestId(2), status: 200, tokens: 5 },
            TraceRecord::Mem(MemOp::DecodeStep {
                pool,
                entries: vec![
                    DecodeEntry { r: RequestId(2), tenant: TenantId(9), seq_len: 16, page: Some(3), slot: 48 },
                    DecodeEntry { r: RequestId(5), tenant: TenantId(1), seq_len: 7, page: None, slot: 23 },
                ],
            }),
        ] {
            let s = line_json(Instant(42), &rec);
            let back: Line = serde_json::from_str(&s).unwrap();
            assert_eq!(back.rec, rec, "{s}");
            assert_eq!(back.t, 42);
        }
    }
}
