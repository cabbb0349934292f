//! Production request traces → request lists: the Mooncake JSON Lines traces and the CSV traces that
//! other serving simulators replay (Vidur / Splitwise style). Pure: text in, requests out. Reading
//! the file is the caller's job (the binary's); it reports an unreadable file as
//! `TraceError::new(path, 0, TraceErrorKind::Unreadable(io_error.to_string()))`, and picks the format with
//! [`detect_format`] (which makes the "unknown format" error) or from a flag.
//!
//! # Formats
//!
//! * [`TraceFormat::MooncakeJsonl`]: one JSON object per line,
//!   `{"timestamp": <ms>, "input_length": n, "output_length": n, "hash_ids": [id, ...]}`, where
//!   `hash_ids` are the prompt's 512-token block hashes (equal ids at the same position = shared
//!   prefix). All four fields are required; `timestamp` and the ids are non-negative integers, the
//!   lengths positive integers (`5.0` is not an integer here). Any further field is kept in
//!   [`TraceRequest::columns`] (a string value as is, anything else as compact JSON), so nothing is
//!   dropped; a field given twice is an error. The length of `hash_ids` is not checked against
//!   `input_length` (both Mooncake traces do match `ceil(input_length / MOONCAKE_BLOCK_TOKENS)`).
//! * [`TraceFormat::Csv`]: a header row, then one request per row. Required columns `arrived_at`
//!   (seconds, decimal, e.g. `12.5`, `0.000001`, `1e-3`), `num_prefill_tokens` and
//!   `num_decode_tokens` (positive integers); every other column (e.g. `tenant`,
//!   `conversation_id`) is kept as a string in [`TraceRequest::columns`], in header order. Quoting is
//!   the minimal RFC 4180 subset: a field may be wrapped in `"..."`, with `""` for a quote inside it
//!   and commas allowed inside it; no embedded newlines. Spaces around a field are trimmed (quote it
//!   to keep them). Every row must have as many fields as the header; column names must be unique.
//!
//! Both: lines end with `\n` or `\r\n`; a leading UTF-8 byte order mark is ignored. Blank lines are
//! allowed only at the end of the file: a blank line followed by a non-blank one is an error.
//!
//! # Time
//!
//! Every timestamp becomes integer nanoseconds once, at parse: Mooncake milliseconds × 10⁶ (exact);
//! CSV seconds are parsed as a decimal string by this module, not through `f64`, and rounded half up
//! to the nanosecond (`0.0000000015` → 2 ns), so the result is exact and the same on every platform.
//! Timestamps must not go backwards (equal is fine); this is checked on every line of the file.
//!
//! The window is measured from the *first request of the file* (its timestamp is the origin, so a
//! CSV with absolute epoch times works the same as Mooncake's from-zero times): a request is kept
//! when `origin + window_start_ms ≤ t < origin + window_start_ms + window_ms` (no upper bound when
//! `window_ms` is `None`), and only the first `limit` kept requests are kept. A kept request's
//! arrival is `round_half_up((t − window start) × time_scale_permille / 1000)` in u128 arithmetic:
//! 1000 replays as recorded, 500 twice as fast, 2000 half as fast; 0 is an error. A window holding no
//! request is not an error (the result is empty), but a file holding none is. Requests outside the
//! window or past the limit are still fully validated: a malformed line anywhere is an error.
//!
//! # Errors
//!
//! [`TraceError`] carries the file name, the 1-based line (the CSV header is line 1) and the kind
//! of fault ([`TraceErrorKind`], for callers that match on it); it prints as `file:line: message`.
//! Line 0 means "not tied to one line" (unreadable file, bad option, tenant assignment) and prints
//! as `file: message`.
//!
//! # Tenants
//!
//! [`assign_tenants`] numbers tenants densely from 0 in order of first appearance.
//!
//! * [`TenantAssign::Conversation`]: two requests belong to the same conversation (tenant) when they
//!   have the same block id at position 1 of `hash_ids` ([`CONVERSATION_BLOCK`]); a request with
//!   fewer than two blocks (every CSV request: they have no ids) is a tenant of its own. Position 0
//!   is skipped because it is a global system prompt: in `conversation_trace.jsonl` block id 0 is
//!   the first block of all 12,031 requests, while position 1 has 7,373 distinct ids. Grouping on
//!   it gives 7,373 tenants: 5,114 with one request, 2,259 with 2 to 43 (6,917 requests; 1,311 with
//!   2 requests, 464 with 3, 200 with 4; mean 1.63 requests per tenant). The groups look like
//!   multi-turn chats: the later requests extend the earlier ones (3,947 of 4,658 consecutive pairs
//!   within a group share all but at most the last block of the earlier request), prompts grow turn
//!   by turn, and a group spans minutes (median 246 s). Under this rule the only block sent by two
//!   tenants at the same position is id 0, everyone's system prompt. (Grouping
//!   on positions 1..=2 instead would give 7,900 tenants, splitting 433 of these chats at their
//!   first reply.) On `synthetic_trace.jsonl`, whose first block is not shared by all, the rule gives
//!   2,245 tenants (1,107 of its requests have a single block).
//! * [`TenantAssign::RoundRobin`]`(n)`: request `i` (index in the slice) → tenant `i % n`.
//! * [`TenantAssign::Column`]`(name)`: the value of that column (CSV column or extra JSON field);
//!   a request without it, or with an empty value, is an error.
//!
//! Which blocks are public (reusable across tenants without a side channel) is the model's
//! decision, made in `prefix::public_blocks` from the resolved requests.

use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;

/// Tokens per Mooncake `hash_ids` block.
pub const MOONCAKE_BLOCK_TOKENS: u64 = 512;

/// The `hash_ids` position whose id identifies a conversation ([`TenantAssign::Conversation`]).
pub const CONVERSATION_BLOCK: usize = 1;

const NS_PER_MS: u64 = 1_000_000;

/// The trace file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Mooncake (FAST '25) JSON Lines.
    MooncakeJsonl,
    /// A CSV with `arrived_at`, `num_prefill_tokens`, `num_decode_tokens` columns.
    Csv,
}

impl TraceFormat {
    /// The format of a file from its first line, else from its extension: a first line starting with
    /// `{` is JSON Lines, a first line with an `arrived_at` field is CSV; otherwise `.jsonl`, `.json`,
    /// `.ndjson` → JSON Lines and `.csv` → CSV (case-insensitive). `None` when neither tells.
    pub fn detect(path: &str, first_line: &str) -> Option<TraceFormat> {
        let line = first_line.strip_prefix('\u{feff}').unwrap_or(first_line).trim();
        if line.starts_with('{') {
            return Some(TraceFormat::MooncakeJsonl);
        }
        if split_csv_line(line).is_ok_and(|fields| fields.iter().any(|f| f == "arrived_at")) {
            return Some(TraceFormat::Csv);
        }
        let ext = std::path::Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "json" | "ndjson" => Some(TraceFormat::MooncakeJsonl),
            "csv" => Some(TraceFormat::Csv),
            _ => None,
        }
    }
}

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// Arrival, ns from the window start, after scaling.
    pub arrival_ns: u64,
    /// Prompt tokens (`input_length` / `num_prefill_tokens`), ≥ 1.
    pub input_tokens: u64,
    /// Tokens to generate (`output_length` / `num_decode_tokens`), ≥ 1.
    pub output_tokens: u64,
    /// Mooncake block hashes (512 tokens each); empty for CSV.
    pub hash_ids: Vec<u64>,
    /// The other columns (CSV) or fields (JSON), name → value, in file order.
    pub columns: Vec<(String, String)>,
}

/// A trace that could not be read: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub file: String,
    /// 1-based; 0 when the error is not tied to a line.
    pub line: usize,
    pub kind: TraceErrorKind,
}

impl TraceError {
    /// An error at `line` of `file` (0: not tied to a line, e.g. the file cannot be read).
    pub fn new(file: &str, line: usize, kind: TraceErrorKind) -> TraceError {
        TraceError { file: file.to_string(), line, kind }
    }

    /// What is wrong, as printed after the location.
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.kind)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.kind)
        }
    }
}

/// The kinds of fault a trace can have. Each prints as the message the command shows; `what`
/// names a field or column as written in the message (with its backquotes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceErrorKind {
    /// The caller could not read the file (the I/O error's text).
    Unreadable(String),
    /// Neither a Mooncake nor a CSV trace by name or first line.
    UnknownFormat,
    /// `time_scale_permille` is 0.
    ZeroTimeScale,
    /// A blank line with content after it.
    BlankLine,
    /// A CSV trace without even a header row.
    NoHeader,
    /// The file holds no request at all.
    NoRequest,
    /// More requests than `u32` tenant ids.
    TooManyRequests(usize),
    /// Round-robin tenants over 0 tenants.
    RoundRobinOverZero,
    /// Tenants from a column a request does not have (request index, column, the columns it has).
    NoTenantColumn { request: usize, column: String, have: Vec<String> },
    /// Tenants from a column that is empty on a request.
    EmptyTenant { request: usize, column: String },
    /// A request earlier than the one before it (both in the file's unit).
    Backwards { at: String, previous: String },
    /// A kept request's arrival (from the window's start, scaled) past `scenario::MAX_TIME_NS`.
    ArrivalOverflow,
    /// A Mooncake line that is not a JSON object of the expected shape (serde's message).
    InvalidJson(String),
    /// A required Mooncake field is missing.
    MissingField(&'static str),
    /// A negative number (`what`, the value as written).
    Negative { what: String, value: String },
    /// A JSON number that is not an integer below 2^64.
    NotU64 { what: String, value: String },
    /// A CSV count that is not an integer.
    NotInteger { what: String, value: String },
    /// A CSV count too large for u64.
    CountOverflow { what: String, value: String },
    /// An empty CSV count.
    EmptyCount(String),
    /// A token count of 0.
    ZeroTokens(String),
    /// A token count above the scenario format's limit (`scenario::MAX_TOKENS`, which a
    /// `[[request]]`'s counts are held to as well).
    TooManyTokens { what: String, value: u64 },
    /// A Mooncake `timestamp` (ms) that overflows u64 ns.
    TimestampOverflow(u64),
    /// A CSV header that does not split into fields.
    BadHeader(CsvSyntax),
    /// A CSV header column without a name (1-based).
    UnnamedColumn(usize),
    /// A CSV header naming a column twice.
    DuplicateColumn(String),
    /// A required CSV column is missing (the header's columns).
    MissingColumn { column: &'static str, have: Vec<String> },
    /// A CSV row with another number of fields than the header has columns.
    FieldCount { fields: usize, columns: usize },
    /// A CSV row that does not split into fields.
    Syntax(CsvSyntax),
    /// A CSV `arrived_at` that is not a number of seconds in range.
    BadArrival(SecondsFault),
}

/// Why a CSV line does not split into fields (`field` is 1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvSyntax {
    UnterminatedQuote { field: usize },
    AfterClosingQuote { field: usize, c: char },
    QuoteInUnquoted { field: usize },
}

/// Why a CSV `arrived_at` is refused (the value as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecondsFault {
    NotDecimal(String),
    Negative(String),
    TooLarge(String),
}

impl fmt::Display for TraceErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TraceErrorKind as K;
        match self {
            K::Unreadable(e) => write!(f, "cannot read: {e}"),
            K::UnknownFormat => f.write_str(
                "unknown trace format: neither Mooncake JSON Lines (a `{` first line, or .jsonl) \
                 nor CSV (an `arrived_at` column, or .csv)",
            ),
            K::ZeroTimeScale => f.write_str("time_scale_permille must be positive (1000 = as recorded)"),
            K::BlankLine => f.write_str("blank line before the end of the file"),
            K::NoHeader => f.write_str("empty CSV trace: no header row"),
            K::NoRequest => f.write_str("the trace holds no request"),
            K::TooManyRequests(n) => write!(f, "{n} requests: more than u32 tenant ids"),
            K::RoundRobinOverZero => f.write_str("round-robin over 0 tenants"),
            K::NoTenantColumn { request, column, have } => {
                let have: Vec<&str> = have.iter().map(String::as_str).collect();
                write!(f, "request #{request} has no column `{column}` (it has: {})", list_or_none(&have))
            }
            K::EmptyTenant { request, column } => write!(f, "request #{request} has an empty `{column}`"),
            K::Backwards { at, previous } => {
                write!(f, "timestamp goes backwards: {at} after {previous} on the previous request")
            }
            K::ArrivalOverflow => write!(
                f,
                "arrival time (from the trace's first request, scaled) past the scenario limit of {} ns",
                crate::scenario::MAX_TIME_NS
            ),
            K::InvalidJson(m) => write!(f, "invalid JSON: {m}"),
            K::MissingField(name) => write!(f, "missing field `{name}`"),
            K::Negative { what, value } => write!(f, "{what} is negative ({value})"),
            K::NotU64 { what, value } => write!(f, "{what} is not an integer below 2^64 ({value})"),
            K::NotInteger { what, value } => write!(f, "{what} is not an integer ({value})"),
            K::CountOverflow { what, value } => write!(f, "{what} {value} does not fit in u64"),
            K::EmptyCount(what) => write!(f, "{what} is empty"),
            K::ZeroTokens(what) => write!(f, "{what} is 0: a request must have at least one token"),
            K::TooManyTokens { what, value } => {
                write!(f, "{what} {value} is out of range: 1..={}", crate::scenario::MAX_TOKENS)
            }
            K::TimestampOverflow(ms) => write!(f, "`timestamp` {ms} ms overflows u64 ns"),
            K::BadHeader(e) => write!(f, "bad CSV header: {e}"),
            K::UnnamedColumn(n) => write!(f, "bad CSV header: column {n} has no name"),
            K::DuplicateColumn(name) => write!(f, "bad CSV header: duplicate column `{name}`"),
            K::MissingColumn { column, have } => {
                write!(f, "missing column `{column}` in the CSV header (it has: {})", have.join(", "))
            }
            K::FieldCount { fields, columns } => write!(f, "{fields} fields, but the header has {columns} columns"),
            K::Syntax(e) => e.fmt(f),
            K::BadArrival(e) => write!(f, "`arrived_at` {e}"),
        }
    }
}

impl fmt::Display for CsvSyntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CsvSyntax::UnterminatedQuote { field } => write!(f, "field {field}: unterminated quoted field"),
            CsvSyntax::AfterClosingQuote { field, c } => write!(f, "field {field}: `{c}` after a closing quote"),
            CsvSyntax::QuoteInUnquoted { field } => write!(f, "field {field}: a quote inside an unquoted field"),
        }
    }
}

impl fmt::Display for SecondsFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecondsFault::NotDecimal(s) => write!(f, "is not a decimal number of seconds ({s:?})"),
            SecondsFault::Negative(s) => write!(f, "is negative ({s})"),
            SecondsFault::TooLarge(s) => write!(f, "is too large ({s}): more than u64 ns"),
        }
    }
}

impl std::error::Error for TraceError {}

/// Which part of a trace to replay, and how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Arrival-time scale in thousandths: 1000 = as recorded, 500 = twice as fast. Must be > 0.
    pub time_scale_permille: u64,
    /// Window start, ms after the first request of the file.
    pub window_start_ms: u64,
    /// Window length in ms; `None` = to the end of the file.
    pub window_ms: Option<u64>,
    /// Keep at most this many requests (the first ones in the window).
    pub limit: Option<u64>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { time_scale_permille: 1000, window_start_ms: 0, window_ms: None, limit: None }
    }
}

/// The format of a trace from its name and text ([`TraceFormat::detect`] on its first line), or
/// the "unknown format" error (line 1).
pub fn detect_format(file: &str, text: &str) -> Result<TraceFormat, TraceError> {
    let first_line = text.lines().next().unwrap_or("");
    TraceFormat::detect(file, first_line).ok_or_else(|| TraceError::new(file, 1, TraceErrorKind::UnknownFormat))
}

/// Parses a whole trace (see the module doc for the rules). `file` is only used in errors.
pub fn parse_trace(
    file: &str,
    text: &str,
    format: TraceFormat,
    opts: &ReadOptions,
) -> Result<Vec<TraceRequest>, TraceError> {
    if opts.time_scale_permille == 0 {
        return Err(TraceError::new(file, 0, TraceErrorKind::ZeroTimeScale));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = content_lines(file, text)?;
    let mut window = Window::new(opts, format);
    match format {
        TraceFormat::MooncakeJsonl => {
            for &(line, content) in &lines {
                let (ts_ns, req) = parse_mooncake_line(content).map_err(|m| TraceError::new(file, line, m))?;
                window.push(ts_ns, req).map_err(|m| TraceError::new(file, line, m))?;
            }
        }
        TraceFormat::Csv => {
            let Some(&(header_line, header)) = lines.first() else {
                return Err(TraceError::new(file, 1, TraceErrorKind::NoHeader));
            };
            let header = CsvHeader::parse(header).map_err(|m| TraceError::new(file, header_line, m))?;
            for &(line, content) in &lines[1..] {
                let (ts_ns, req) = header.parse_row(content).map_err(|m| TraceError::new(file, line, m))?;
                window.push(ts_ns, req).map_err(|m| TraceError::new(file, line, m))?;
            }
        }
    }
    if window.seen == 0 {
        return Err(TraceError::new(file, 1, TraceErrorKind::NoRequest));
    }
    Ok(window.kept)
}

/// How to map requests to tenants (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantAssign {
    /// Same block id at [`CONVERSATION_BLOCK`] = same tenant; fewer blocks = a tenant of its own.
    Conversation,
    /// Request `i` → tenant `i % n`; `n` must be > 0.
    RoundRobin(u32),
    /// The value of this column, numbered densely in order of first appearance.
    Column(String),
}

/// One tenant per request, numbered densely from 0 in order of first appearance. `file` is only
/// used in errors, which have line 0 (a request list no longer knows its lines).
pub fn assign_tenants(reqs: &[TraceRequest], how: &TenantAssign, file: &str) -> Result<Vec<u32>, TraceError> {
    if u32::try_from(reqs.len()).is_err() {
        return Err(TraceError::new(file, 0, TraceErrorKind::TooManyRequests(reqs.len())));
    }
    match how {
        TenantAssign::RoundRobin(0) => Err(TraceError::new(file, 0, TraceErrorKind::RoundRobinOverZero)),
        TenantAssign::RoundRobin(n) => Ok((0..reqs.len()).map(|i| (i % *n as usize) as u32).collect()),
        TenantAssign::Conversation => {
            let mut dense = Dense::default();
            Ok(reqs.iter().map(|r| dense.id(r.hash_ids.get(CONVERSATION_BLOCK).copied())).collect())
        }
        TenantAssign::Column(name) => {
            let mut dense = Dense::default();
            let mut out = Vec::with_capacity(reqs.len());
            for (i, r) in reqs.iter().enumerate() {
                let Some((_, value)) = r.columns.iter().find(|(k, _)| k == name) else {
                    let have = r.columns.iter().map(|(k, _)| k.clone()).collect();
                    let kind = TraceErrorKind::NoTenantColumn { request: i, column: name.clone(), have };
                    return Err(TraceError::new(file, 0, kind));
                };
                if value.is_empty() {
                    let kind = TraceErrorKind::EmptyTenant { request: i, column: name.clone() };
                    return Err(TraceError::new(file, 0, kind));
                }
                out.push(dense.id(Some(value.as_str())));
            }
            Ok(out)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lines, window

/// The non-blank lines with their 1-based numbers (`\r` stripped); a blank line before a non-blank
/// one is an error.
fn content_lines<'a>(file: &str, text: &'a str) -> Result<Vec<(usize, &'a str)>, TraceError> {
    let mut out = Vec::new();
    let mut first_blank = None;
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            first_blank.get_or_insert(i + 1);
        } else if let Some(blank) = first_blank {
            return Err(TraceError::new(file, blank, TraceErrorKind::BlankLine));
        } else {
            out.push((i + 1, line));
        }
    }
    Ok(out)
}

/// A parsed request before windowing: everything but the arrival.
struct Pending {
    input_tokens: u64,
    output_tokens: u64,
    hash_ids: Vec<u64>,
    columns: Vec<(String, String)>,
}

struct Window {
    format: TraceFormat,
    scale: u128,
    window_start_ns: u64,
    window_ns: Option<u64>,
    limit: Option<u64>,
    /// (window start, window end) in absolute trace ns, fixed by the first request of the file.
    bounds: Option<(u64, Option<u64>)>,
    prev_ns: u64,
    seen: u64,
    kept: Vec<TraceRequest>,
}

impl Window {
    fn new(opts: &ReadOptions, format: TraceFormat) -> Window {
        Window {
            format,
            scale: u128::from(opts.time_scale_permille),
            window_start_ns: opts.window_start_ms.saturating_mul(NS_PER_MS),
            window_ns: opts.window_ms.map(|w| w.saturating_mul(NS_PER_MS)),
            limit: opts.limit,
            bounds: None,
            prev_ns: 0,
            seen: 0,
            kept: Vec::new(),
        }
    }

    fn push(&mut self, ts_ns: u64, req: Pending) -> Result<(), TraceErrorKind> {
        if self.seen > 0 && ts_ns < self.prev_ns {
            return Err(TraceErrorKind::Backwards { at: self.show(ts_ns), previous: self.show(self.prev_ns) });
        }
        self.seen += 1;
        self.prev_ns = ts_ns;
        let (start, end) = *self.bounds.get_or_insert_with(|| {
            let start = ts_ns.saturating_add(self.window_start_ns);
            (start, self.window_ns.map(|w| start.saturating_add(w)))
        });
        let in_window = ts_ns >= start && end.is_none_or(|e| ts_ns < e);
        let under_limit = self.limit.is_none_or(|l| (self.kept.len() as u64) < l);
        if !(in_window && under_limit) {
            return Ok(());
        }
        let arrival = (u128::from(ts_ns - start) * self.scale + 500) / 1000;
        // Held to the scenario format's time limit, as a `[[request]]`'s `at_ns` (an arrival near
        // 2^64 ns ran with the clock saturated, and its latencies came out wrong and clean).
        let arrival_ns = u64::try_from(arrival)
            .ok()
            .filter(|a| *a <= crate::scenario::MAX_TIME_NS)
            .ok_or(TraceErrorKind::ArrivalOverflow)?;
        self.kept.push(TraceRequest {
            arrival_ns,
            input_tokens: req.input_tokens,
            output_tokens: req.output_tokens,
            hash_ids: req.hash_ids,
            columns: req.columns,
        });
        Ok(())
    }

    /// A timestamp in the file's unit.
    fn show(&self, ns: u64) -> String {
        match self.format {
            TraceFormat::MooncakeJsonl => format!("{} ms", ns / NS_PER_MS),
            TraceFormat::Csv => {
                let frac = format!("{:09}", ns % 1_000_000_000);
                let frac = frac.trim_end_matches('0');
                let secs = ns / 1_000_000_000;
                if frac.is_empty() {
                    format!("{secs} s")
                } else {
                    format!("{secs}.{frac} s")
                }
            }
        }
    }
}

/// Dense ids in order of first appearance; `None` = a fresh id every time.
struct Dense<K> {
    ids: BTreeMap<K, u32>,
    next: u32,
}

impl<K> Default for Dense<K> {
    fn default() -> Self {
        Dense { ids: BTreeMap::new(), next: 0 }
    }
}

impl<K: Ord> Dense<K> {
    /// Callers bound the number of calls by u32 (checked in `assign_tenants`).
    fn id(&mut self, key: Option<K>) -> u32 {
        let fresh = self.next;
        let id = match key {
            Some(k) => *self.ids.entry(k).or_insert(fresh),
            None => fresh,
        };
        if id == fresh {
            self.next += 1;
        }
        id
    }
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

// ---------------------------------------------------------------------------------------------
// Mooncake JSON Lines

/// A line's object, fields still untyped enough to give precise messages.
#[derive(Default)]
struct RawMooncake {
    timestamp: Option<serde_json::Number>,
    input_length: Option<serde_json::Number>,
    output_length: Option<serde_json::Number>,
    hash_ids: Option<Vec<serde_json::Number>>,
    extra: Vec<(String, String)>,
}

impl<'de> Deserialize<'de> for RawMooncake {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RawMooncakeVisitor)
    }
}

struct RawMooncakeVisitor;

fn set_once<T, E: serde::de::Error>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom(format!("duplicate field `{key}`")));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Visitor<'de> for RawMooncakeVisitor {
    type Value = RawMooncake;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Mooncake request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMooncake, A::Error> {
        let mut raw = RawMooncake::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "timestamp" => set_once(&mut raw.timestamp, &key, map.next_value()?)?,
                "input_length" => set_once(&mut raw.input_length, &key, map.next_value()?)?,
                "output_length" => set_once(&mut raw.output_length, &key, map.next_value()?)?,
                "hash_ids" => set_once(&mut raw.hash_ids, &key, map.next_value()?)?,
                _ => {
                    if raw.extra.iter().any(|(k, _)| *k == key) {
                        return Err(A::Error::custom(format!("duplicate field `{key}`")));
                    }
                    let value = match map.next_value::<serde_json::Value>()? {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    raw.extra.push((key, value));
                }
            }
        }
        Ok(raw)
    }
}

/// A JSON number as a u64, or why not.
fn json_u64(what: &str, n: &serde_json::Number) -> Result<u64, TraceErrorKind> {
    let (what, value) = (what.to_string(), n.to_string());
    match n.as_u64() {
        Some(v) => Ok(v),
        None if n.is_i64() => Err(TraceErrorKind::Negative { what, value }),
        None => Err(TraceErrorKind::NotU64 { what, value }),
    }
}

/// A token count in `1..=MAX_TOKENS`, as a `[[request]]`'s (a count of 10^14 ran, the request
/// answered 400, where the same count in the scenario was refused).
fn positive(what: &str, v: u64) -> Result<u64, TraceErrorKind> {
    if v == 0 {
        Err(TraceErrorKind::ZeroTokens(what.to_string()))
    } else if v > crate::scenario::MAX_TOKENS {
        Err(TraceErrorKind::TooManyTokens { what: what.to_string(), value: v })
    } else {
        Ok(v)
    }
}

fn parse_mooncake_line(line: &str) -> Result<(u64, Pending), TraceErrorKind> {
    let raw: RawMooncake = serde_json::from_str(line).map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let msg = full.strip_suffix(&suffix).unwrap_or(&full);
        TraceErrorKind::InvalidJson(match e.column() {
            0 => msg.to_string(),
            column => format!("{msg} (column {column})"),
        })
    })?;
    let missing = TraceErrorKind::MissingField;
    let ts_ms = json_u64("`timestamp`", raw.timestamp.as_ref().ok_or_else(|| missing("timestamp"))?)?;
    let input = json_u64("`input_length`", raw.input_length.as_ref().ok_or_else(|| missing("input_length"))?)?;
    let output = json_u64("`output_length`", raw.output_length.as_ref().ok_or_else(|| missing("output_length"))?)?;
    let ids = raw.hash_ids.ok_or_else(|| missing("hash_ids"))?;
    let input_tokens = positive("`input_length`", input)?;
    let output_tokens = positive("`output_length`", output)?;
    let ts_ns = ts_ms.checked_mul(NS_PER_MS).ok_or(TraceErrorKind::TimestampOverflow(ts_ms))?;
    let hash_ids =
        ids.iter().enumerate().map(|(i, n)| json_u64(&format!("`hash_ids[{i}]`"), n)).collect::<Result<_, _>>()?;
    Ok((ts_ns, Pending { input_tokens, output_tokens, hash_ids, columns: raw.extra }))
}

// ---------------------------------------------------------------------------------------------
// CSV

struct CsvHeader {
    names: Vec<String>,
    arrived_at: usize,
    prefill: usize,
    decode: usize,
}

impl CsvHeader {
    fn parse(line: &str) -> Result<CsvHeader, TraceErrorKind> {
        let names = split_csv_line(line).map_err(TraceErrorKind::BadHeader)?;
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() {
                return Err(TraceErrorKind::UnnamedColumn(i + 1));
            }
            if names[..i].contains(name) {
                return Err(TraceErrorKind::DuplicateColumn(name.clone()));
            }
        }
        let find = |column: &'static str| {
            names
                .iter()
                .position(|n| n == column)
                .ok_or_else(|| TraceErrorKind::MissingColumn { column, have: names.clone() })
        };
        Ok(CsvHeader {
            arrived_at: find("arrived_at")?,
            prefill: find("num_prefill_tokens")?,
            decode: find("num_decode_tokens")?,
            names,
        })
    }

    fn parse_row(&self, line: &str) -> Result<(u64, Pending), TraceErrorKind> {
        let mut fields = split_csv_line(line).map_err(TraceErrorKind::Syntax)?;
        if fields.len() != self.names.len() {
            return Err(TraceErrorKind::FieldCount { fields: fields.len(), columns: self.names.len() });
        }
        let ts_ns = parse_seconds_ns(&fields[self.arrived_at]).map_err(TraceErrorKind::BadArrival)?;
        let input_tokens = parse_count("`num_prefill_tokens`", &fields[self.prefill])?;
        let output_tokens = parse_count("`num_decode_tokens`", &fields[self.decode])?;
        let required = [self.arrived_at, self.prefill, self.decode];
        let columns = fields
            .drain(..)
            .enumerate()
            .filter(|(i, _)| !required.contains(i))
            .map(|(i, v)| (self.names[i].clone(), v))
            .collect();
        Ok((ts_ns, Pending { input_tokens, output_tokens, hash_ids: Vec::new(), columns }))
    }
}

/// Splits one CSV line into fields: `"..."` quoting with `""` escapes, spaces around fields trimmed.
fn split_csv_line(line: &str) -> Result<Vec<String>, CsvSyntax> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let n = fields.len() + 1;
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        let mut field = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    None => return Err(CsvSyntax::UnterminatedQuote { field: n }),
                    Some('"') if chars.next_if_eq(&'"').is_some() => field.push('"'),
                    Some('"') => break,
                    Some(c) => field.push(c),
                }
            }
            while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => return Err(CsvSyntax::AfterClosingQuote { field: n, c }),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field.trim_end().to_string());
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => return Err(CsvSyntax::QuoteInUnquoted { field: n }),
                    Some(c) => field.push(c),
                }
            }
            fields.push(field.trim_end().to_string());
        }
    }
}

/// A positive integer token count.
fn parse_count(what: &str, s: &str) -> Result<u64, TraceErrorKind> {
    let (w, value) = (|| what.to_string(), || s.to_string());
    if s.is_empty() {
        return Err(TraceErrorKind::EmptyCount(w()));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let v = s.parse::<u64>().map_err(|_| TraceErrorKind::CountOverflow { what: w(), value: value() })?;
        return positive(what, v);
    }
    if s.strip_prefix('-').is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit() || b == b'.')) {
        return Err(TraceErrorKind::Negative { what: w(), value: value() });
    }
    Err(TraceErrorKind::NotInteger { what: w(), value: value() })
}

/// Decimal seconds (`12`, `12.5`, `.5`, `1.5e3`, `2E-6`) → ns, exactly, rounded half up.
fn parse_seconds_ns(s: &str) -> Result<u64, SecondsFault> {
    let bad = || SecondsFault::NotDecimal(s.to_string());
    if s.starts_with('-') {
        return Err(SecondsFault::Negative(s.to_string()));
    }
    let body = s.strip_prefix('+').unwrap_or(s);
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (body, "0"),
    };
    let exp_digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if exp_digits.is_empty() || exp_digits.len() > 6 || !exp_digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let exp: i64 = exp.parse().map_err(|_| bad())?;
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_ok = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty()) || !digits_ok(int_part) || !digits_ok(frac_part) {
        return Err(bad());
    }
    // value = D × 10^(exp − |frac|) s = D × 10^shift ns, D = the mantissa's digits as an integer.
    let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0').skip_while(|d| *d == 0).collect();
    let shift = exp - frac_part.len() as i64 + 9;
    let too_large = || SecondsFault::TooLarge(s.to_string());
    let accumulate =
        |ds: &[u8]| ds.iter().try_fold(0u128, |acc, &d| acc.checked_mul(10).and_then(|a| a.checked_add(u128::from(d))));
    let ns: u128 = if digits.is_empty() {
        0
    } else if shift >= 0 {
        let pow = u32::try_from(shift).ok().and_then(|p| 10u128.checked_pow(p)).ok_or_else(too_large)?;
        accumulate(&digits).and_then(|d| d.checked_mul(pow)).ok_or_else(too_large)?
    } else {
        let dropped = usize::try_from(-shift).unwrap_or(usize::MAX);
        let keep = digits.len().saturating_sub(dropped);
        let whole = accumulate(&digits[..keep]).ok_or_else(too_large)?;
        // Half up: the first dropped digit decides (it is an implied 0 when all digits are dropped
        // and then some).
        let first_dropped = if dropped <= digits.len() { digits[keep] } else { 0 };
        whole + u128::from(first_dropped >= 5)
    };
    u64::try_from(ns).map_err(|_| too_large())
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    const CONVERSATION: &str = "conversation_trace.jsonl";
    const SYNTHETIC: &str = "synthetic_trace.jsonl";
    const GOOD_CSV: &str = include_str!("../../tests/data/traces/vidur_tenants_crlf.csv");
    const BAD_CSV: &str = include_str!("../../tests/data/traces/vidur_backwards.csv");

    /// The Mooncake traces are vendored in the repository: `<repo>/data/mooncake/`.
    fn mooncake(name: &str) -> (String, String) {
        let path = format!("{}/../data/mooncake/{name}", crate::test_manifest_dir());
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        (path, text)
    }

    fn parse_all(name: &str) -> Vec<TraceRequest> {
        let (path, text) = mooncake(name);
        parse_trace(&path, &text, TraceFormat::MooncakeJsonl, &ReadOptions::default()).unwrap()
    }

    fn jsonl(text: &str, opts: &ReadOptions) -> Result<Vec<TraceRequest>, TraceError> {
        parse_trace("t.jsonl", text, TraceFormat::MooncakeJsonl, opts)
    }

    fn csv(text: &str, opts: &ReadOptions) -> Result<Vec<TraceRequest>, TraceError> {
        parse_trace("t.csv", text, TraceFormat::Csv, opts)
    }

    /// The error of a failing parse, as (line, message).
    fn jsonl_err(text: &str) -> (usize, String) {
        let e = jsonl(text, &ReadOptions::default()).unwrap_err();
        assert_eq!(e.file, "t.jsonl");
        (e.line, e.message())
    }

    fn csv_err(text: &str) -> (usize, String) {
        let e = csv(text, &ReadOptions::default()).unwrap_err();
        assert_eq!(e.file, "t.csv");
        (e.line, e.message())
    }

    fn line(ts: u64, input: u64, output: u64, ids: &str) -> String {
        raw(&ts.to_string(), &input.to_string(), &output.to_string(), ids)
    }

    /// A Mooncake line with the values written as given.
    fn raw(ts: &str, input: &str, output: &str, ids: &str) -> String {
        format!(
            "{{\"timestamp\": {ts}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": [{ids}]}}"
        )
    }

    /// Four requests at 0, 1000, 2500 and 4000 ms.
    fn four() -> String {
        [line(0, 10, 1, "0"), line(1000, 20, 2, "0, 1"), line(2500, 30, 3, "0, 2"), line(4000, 40, 4, "0, 1, 3")]
            .join("\n")
            + "\n"
    }

    fn arrivals(reqs: &[TraceRequest]) -> Vec<u64> {
        reqs.iter().map(|r| r.arrival_ns).collect()
    }

    fn inputs(reqs: &[TraceRequest]) -> Vec<u64> {
        reqs.iter().map(|r| r.input_tokens).collect()
    }

    fn opts(permille: u64, start_ms: u64, window_ms: Option<u64>, limit: Option<u64>) -> ReadOptions {
        ReadOptions { time_scale_permille: permille, window_start_ms: start_ms, window_ms, limit }
    }

    #[test]
    fn conversation_trace_parses_fully() {
        let reqs = parse_all(CONVERSATION);
        assert_eq!(reqs.len(), 12_031);
        let first = &reqs[0];
        assert_eq!((first.arrival_ns, first.input_tokens, first.output_tokens), (0, 6758, 500));
        assert_eq!(first.hash_ids, (0..=13).collect::<Vec<u64>>());
        assert!(first.columns.is_empty());
        let last = reqs.last().unwrap();
        assert_eq!((last.arrival_ns, last.input_tokens, last.output_tokens), (3_536_999 * NS_PER_MS, 20774, 508));
        let mut ids = vec![0];
        ids.extend(182_750..=182_789);
        assert_eq!(last.hash_ids, ids);
        assert!(reqs.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
        assert!(reqs.iter().all(|r| r.hash_ids.len() as u64 == r.input_tokens.div_ceil(MOONCAKE_BLOCK_TOKENS)));
    }

    #[test]
    fn synthetic_trace_parses_fully() {
        let reqs = parse_all(SYNTHETIC);
        assert_eq!(reqs.len(), 3_993);
        let first = &reqs[0];
        assert_eq!((first.arrival_ns, first.input_tokens, first.output_tokens), (0, 40160, 6));
        assert_eq!(first.hash_ids, (0..=78).collect::<Vec<u64>>());
        let last = reqs.last().unwrap();
        assert_eq!((last.arrival_ns, last.input_tokens, last.output_tokens), (1_022_025 * NS_PER_MS, 18440, 83));
        let mut ids: Vec<u64> = (17_915..=17_950).collect();
        ids.push(43_923);
        assert_eq!(last.hash_ids, ids);
        assert!(reqs.iter().all(|r| r.hash_ids.len() as u64 == r.input_tokens.div_ceil(MOONCAKE_BLOCK_TOKENS)));
    }

    #[test]
    fn real_traces_window_scale_and_limit() {
        let (path, text) = mooncake(CONVERSATION);
        let all = parse_all(CONVERSATION);
        // Minute 10 to 11, replayed twice as fast.
        let got =
            parse_trace(&path, &text, TraceFormat::MooncakeJsonl, &opts(500, 600_000, Some(60_000), None)).unwrap();
        let want: Vec<&TraceRequest> =
            all.iter().filter(|r| (600_000 * NS_PER_MS..660_000 * NS_PER_MS).contains(&r.arrival_ns)).collect();
        assert!(!want.is_empty());
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.arrival_ns, (w.arrival_ns - 600_000 * NS_PER_MS) / 2);
            assert_eq!((g.input_tokens, &g.hash_ids), (w.input_tokens, &w.hash_ids));
        }
        let ten = parse_trace(&path, &text, TraceFormat::MooncakeJsonl, &opts(1000, 0, None, Some(10))).unwrap();
        assert_eq!(ten, all[..10]);
    }

    #[test]
    fn window_shifts_to_zero_and_is_half_open() {
        let got = jsonl(&four(), &opts(1000, 1000, Some(3000), None)).unwrap();
        assert_eq!(inputs(&got), [20, 30]); // 4000 = 1000 + 3000 is out
        assert_eq!(arrivals(&got), [0, 1_500 * NS_PER_MS]);
        let got = jsonl(&four(), &opts(1000, 1000, Some(3001), None)).unwrap();
        assert_eq!(inputs(&got), [20, 30, 40]);
        // The start need not fall on a request.
        let got = jsonl(&four(), &opts(1000, 500, None, None)).unwrap();
        assert_eq!(arrivals(&got), [500 * NS_PER_MS, 2_000 * NS_PER_MS, 3_500 * NS_PER_MS]);
        // Past the end: empty, not an error.
        assert_eq!(jsonl(&four(), &opts(1000, 9000, None, None)).unwrap(), []);
        assert_eq!(jsonl(&four(), &opts(1000, 0, Some(0), None)).unwrap(), []);
    }

    #[test]
    fn window_is_measured_from_the_first_request() {
        let text = format!("{}\n{}\n{}\n", line(5000, 1, 1, "1"), line(6000, 2, 1, "2"), line(9000, 3, 1, "3"));
        assert_eq!(
            arrivals(&jsonl(&text, &ReadOptions::default()).unwrap()),
            [0, 1_000 * NS_PER_MS, 4_000 * NS_PER_MS]
        );
        let got = jsonl(&text, &opts(1000, 1000, Some(1000), None)).unwrap();
        assert_eq!((inputs(&got), arrivals(&got)), (vec![2], vec![0]));
    }

    #[test]
    fn limit_keeps_the_first_kept_requests() {
        let got = jsonl(&four(), &opts(1000, 1000, None, Some(2))).unwrap();
        assert_eq!(inputs(&got), [20, 30]);
        assert_eq!(jsonl(&four(), &opts(1000, 0, None, Some(0))).unwrap(), []);
        assert_eq!(jsonl(&four(), &opts(1000, 0, None, Some(99))).unwrap().len(), 4);
    }

    #[test]
    fn time_scale() {
        let ms = |v: &[u64]| v.iter().map(|x| x * NS_PER_MS).collect::<Vec<_>>();
        assert_eq!(arrivals(&jsonl(&four(), &opts(500, 0, None, None)).unwrap()), ms(&[0, 500, 1250, 2000]));
        assert_eq!(arrivals(&jsonl(&four(), &opts(2000, 0, None, None)).unwrap()), ms(&[0, 2000, 5000, 8000]));
        // Rounded half up to the ns: 1 ns × 1.5 = 1.5 → 2, 1 ns × 0.499 → 0.
        let text = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n0.000000001,1,1\n";
        assert_eq!(arrivals(&csv(text, &opts(1500, 0, None, None)).unwrap()), [0, 2]);
        assert_eq!(arrivals(&csv(text, &opts(499, 0, None, None)).unwrap()), [0, 0]);
        let e = jsonl(&four(), &opts(0, 0, None, None)).unwrap_err();
        assert_eq!(
            (e.line, e.to_string().as_str()),
            (0, "t.jsonl: time_scale_permille must be positive (1000 = as recorded)")
        );
    }

    #[test]
    fn seconds_are_parsed_exactly() {
        for (s, ns) in [
            ("0", 0),
            ("0.0", 0),
            ("12", 12_000_000_000),
            ("12.5", 12_500_000_000),
            (".5", 500_000_000),
            ("5.", 5_000_000_000),
            ("+1.25", 1_250_000_000),
            ("0.000000001", 1),
            ("0.0000000015", 2), // half up
            ("0.0000000014999", 1),
            ("0.00000000049", 0),
            ("1.9999999995", 2_000_000_000),
            ("1e-3", 1_000_000),
            ("2.5E+2", 250_000_000_000),
            ("7E0", 7_000_000_000),
            ("1e-20", 0),
            ("6e-10", 1),
            ("0e999999", 0),
            ("000123.000", 123_000_000_000),
            ("1699999999.123456789", 1_699_999_999_123_456_789),
            ("0.1", 100_000_000), // f64 would give 0.1000000000000000055511151231257827
            ("18446744073.709551615", u64::MAX),
        ] {
            assert_eq!(parse_seconds_ns(s), Ok(ns), "{s}");
        }
        for s in ["", ".", "e3", "1e", "1e+", "abc", "1.2.3", "nan", "inf", "1 2", "0x10", "1e1234567"] {
            assert_eq!(parse_seconds_ns(s), Err(SecondsFault::NotDecimal(s.to_string())), "{s}");
            assert!(parse_seconds_ns(s).unwrap_err().to_string().starts_with("is not a decimal number"), "{s}");
        }
        assert_eq!(parse_seconds_ns("-1.5").map_err(|e| e.to_string()), Err("is negative (-1.5)".to_string()));
        for s in ["18446744073.709551616", "1e20", "99999999999999999999999999999999999999999"] {
            assert!(matches!(parse_seconds_ns(s), Err(SecondsFault::TooLarge(_))), "{s}");
            assert!(parse_seconds_ns(s).unwrap_err().to_string().starts_with("is too large"), "{s}");
        }
    }

    #[test]
    fn csv_fixture_with_tenants_and_crlf() {
        assert!(GOOD_CSV.contains("\r\n"));
        let reqs = parse_trace("vidur_tenants_crlf.csv", GOOD_CSV, TraceFormat::Csv, &ReadOptions::default()).unwrap();
        assert_eq!(reqs.len(), 6);
        assert_eq!(arrivals(&reqs), [0, 250_000_000, 250_000_000, 1_000_000_001, 2_500_000_000, 3_000_000_000]);
        assert_eq!(inputs(&reqs), [1024, 300, 4096, 77, 512, 2048]);
        assert_eq!(reqs.iter().map(|r| r.output_tokens).collect::<Vec<_>>(), [128, 20, 1, 500, 64, 256]);
        assert!(reqs.iter().all(|r| r.hash_ids.is_empty()));
        let cols = |i: usize| reqs[i].columns.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>();
        assert_eq!(cols(0), [("tenant", "acme"), ("conversation_id", "c1")]);
        assert_eq!(cols(1), [("tenant", "globex, inc"), ("conversation_id", "c2")]); // quoted comma
        assert_eq!(cols(2), [("tenant", "acme"), ("conversation_id", "say \"hi\"")]); // escaped quote
        assert_eq!(cols(3), [("tenant", " initech "), ("conversation_id", "c4")]); // quoted spaces kept
        let tenants = assign_tenants(&reqs, &TenantAssign::Column("tenant".into()), "f.csv").unwrap();
        assert_eq!(tenants, [0, 1, 0, 2, 1, 0]);
        let conv = assign_tenants(&reqs, &TenantAssign::Column("conversation_id".into()), "f.csv").unwrap();
        assert_eq!(conv, [0, 1, 2, 3, 1, 0]);
        // No ids: each request its own conversation; nothing public.
        let own = assign_tenants(&reqs, &TenantAssign::Conversation, "f.csv").unwrap();
        assert_eq!(own, [0, 1, 2, 3, 4, 5]);
        assert_eq!(TraceFormat::detect("x.txt", GOOD_CSV.lines().next().unwrap()), Some(TraceFormat::Csv));
    }

    #[test]
    fn csv_fixture_with_a_backwards_timestamp() {
        let e = parse_trace("vidur_backwards.csv", BAD_CSV, TraceFormat::Csv, &ReadOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "vidur_backwards.csv:5: timestamp goes backwards: 1.4999 s after 1.5 s on the previous request"
        );
    }

    #[test]
    fn csv_column_order_and_spacing_are_free() {
        let text = "tenant , num_decode_tokens,arrived_at,num_prefill_tokens\r\n a ,5, 0.5 ,7\r\nb,6,0.75,8\r\n\r\n";
        let reqs = csv(text, &ReadOptions::default()).unwrap();
        assert_eq!(arrivals(&reqs), [0, 250_000_000]);
        assert_eq!(inputs(&reqs), [7, 8]);
        assert_eq!(reqs[0].columns, [("tenant".to_string(), "a".to_string())]);
        assert_eq!(reqs[1].output_tokens, 6);
    }

    #[test]
    fn jsonl_extra_fields_are_kept() {
        let text = concat!(
            r#"{"hash_ids": [3], "tenant": "x", "output_length": 1, "prio": 2, "tags": [1, "a"], "#,
            r#""input_length": 9, "timestamp": 7}"#
        );
        let reqs = jsonl(text, &ReadOptions::default()).unwrap();
        let want = [("tenant", "x"), ("prio", "2"), ("tags", "[1,\"a\"]")];
        assert_eq!(reqs[0].columns, want.map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(assign_tenants(&reqs, &TenantAssign::Column("tenant".into()), "t").unwrap(), [0]);
    }

    #[test]
    fn jsonl_errors_have_exact_lines() {
        let ok = line(0, 10, 1, "0");
        let cases: Vec<(String, usize, &str)> = Vec::from([
            (format!("{ok}\n{{\"timestamp\": 1,\n"), 2, "invalid JSON: EOF while parsing a value (column 16)"),
            (format!("{ok}\n{ok}\nnot json\n"), 3, "invalid JSON: expected ident (column 2)"),
            (format!("{ok}\n[1, 2]\n"), 2, "invalid JSON: invalid type: sequence, expected a Mooncake request object"),
            (format!("{ok} {ok}\n"), 1, "invalid JSON: trailing characters (column 75)"),
            (
                format!("{ok}\n{{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}}\n"),
                2,
                "missing field `timestamp`",
            ),
            (
                format!("{ok}\n{{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": []}}\n"),
                2,
                "missing field `input_length`",
            ),
            (
                format!("{ok}\n{{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": []}}\n"),
                2,
                "missing field `output_length`",
            ),
            (
                format!("{ok}\n{{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}}\n"),
                2,
                "missing field `hash_ids`",
            ),
            (
                format!("{ok}\n{ok}\n{}\n", line(5, 0, 1, "0")),
                3,
                "`input_length` is 0: a request must have at least one token",
            ),
            (
                format!("{ok}\n{}\n", line(5, 1, 0, "0")),
                2,
                "`output_length` is 0: a request must have at least one token",
            ),
            (format!("{ok}\n{}\n", raw("5", "-4", "1", "0")), 2, "`input_length` is negative (-4)"),
            (format!("{ok}\n{}\n", raw("5", "1", "2.5", "0")), 2, "`output_length` is not an integer below 2^64 (2.5)"),
            (format!("{ok}\n{}\n", raw("5", "3.0", "1", "0")), 2, "`input_length` is not an integer below 2^64 (3.0)"),
            (
                format!("{ok}\n{}\n", raw("5", "\"1\"", "1", "0")),
                2,
                "invalid JSON: invalid type: string \"1\", expected a JSON number (column 36)",
            ),
            (format!("{ok}\n{}\n", line(5, 1, 1, "0, -7")), 2, "`hash_ids[1]` is negative (-7)"),
            (format!("{ok}\n{}\n", line(5, 1, 1, "0, 1.5")), 2, "`hash_ids[1]` is not an integer below 2^64 (1.5)"),
            (format!("{ok}\n{}\n", raw("-5", "1", "1", "0")), 2, "`timestamp` is negative (-5)"),
            (format!("{ok}\n{}\n", raw("5.5", "1", "1", "0")), 2, "`timestamp` is not an integer below 2^64 (5.5)"),
            (
                format!("{ok}\n{}\n", line(u64::MAX, 1, 1, "0")),
                2,
                "`timestamp` 18446744073709551615 ms overflows u64 ns",
            ),
            (
                format!("{ok}\n{{\"timestamp\": 1, \"timestamp\": 2}}\n"),
                2,
                "invalid JSON: duplicate field `timestamp` (column 32)",
            ),
            (format!("{ok}\n{{\"a\": 1, \"a\": 2}}\n"), 2, "invalid JSON: duplicate field `a` (column 12)"),
            (
                format!("{}\n{}\n{}\n", line(10, 1, 1, "0"), line(20, 1, 1, "0"), line(19, 1, 1, "0")),
                3,
                "timestamp goes backwards: 19 ms after 20 ms on the previous request",
            ),
            (format!("{ok}\n\n{ok}\n"), 2, "blank line before the end of the file"),
            (format!("{ok}\n\n  \r\n{ok}\n"), 2, "blank line before the end of the file"),
            (format!("\n{ok}\n"), 1, "blank line before the end of the file"),
            (String::new(), 1, "the trace holds no request"),
            ("\n\r\n  \n".to_string(), 1, "the trace holds no request"),
        ]);
        let wrong: Vec<String> = cases
            .iter()
            .filter_map(|(text, line, msg)| {
                let got = jsonl_err(text);
                (got != (*line, msg.to_string())).then(|| format!("{text:?}: got {got:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        // Errors past the window and the limit are still reported.
        let text = format!("{}\n{}\nbad\n", line(0, 1, 1, "0"), line(9999, 1, 1, "0"));
        let e = jsonl(&text, &opts(1000, 0, Some(1), Some(1))).unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn trailing_blank_lines_and_crlf_are_fine() {
        let text = four().replace('\n', "\r\n") + "\r\n\n   \n";
        assert_eq!(jsonl(&text, &ReadOptions::default()).unwrap().len(), 4);
        let no_final_newline = four().trim_end().to_string();
        assert_eq!(jsonl(&no_final_newline, &ReadOptions::default()).unwrap().len(), 4);
        let bom = format!("\u{feff}{}", four());
        assert_eq!(jsonl(&bom, &ReadOptions::default()).unwrap().len(), 4);
        // Equal timestamps are not backwards.
        let same = format!("{}\n{}\n", line(3, 1, 1, "0"), line(3, 2, 1, "0"));
        assert_eq!(arrivals(&jsonl(&same, &ReadOptions::default()).unwrap()), [0, 0]);
    }

    /// The kinds a caller matches on, with the line they are at.
    #[test]
    fn errors_have_typed_kinds() {
        let kind = |r: Result<Vec<TraceRequest>, TraceError>| {
            let e = r.unwrap_err();
            (e.line, e.kind)
        };
        let o = ReadOptions::default();
        let missing = "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n";
        assert_eq!(kind(jsonl(missing, &o)), (1, TraceErrorKind::MissingField("hash_ids")));
        let back = format!("{}\n{}\n", line(5, 1, 1, ""), line(4, 1, 1, ""));
        let (at, previous) = ("4 ms".to_string(), "5 ms".to_string());
        assert_eq!(kind(jsonl(&back, &o)), (2, TraceErrorKind::Backwards { at, previous }));
        let h = "arrived_at,num_prefill_tokens,num_decode_tokens";
        let quote = format!("{h}\n0,1,\"2\n");
        assert_eq!(kind(csv(&quote, &o)), (2, TraceErrorKind::Syntax(CsvSyntax::UnterminatedQuote { field: 3 })));
        let late = format!("{h}\n-1,1,1\n");
        assert_eq!(kind(csv(&late, &o)), (2, TraceErrorKind::BadArrival(SecondsFault::Negative("-1".into()))));
        let zero = format!("{h}\n0,0,1\n");
        assert_eq!(kind(csv(&zero, &o)), (2, TraceErrorKind::ZeroTokens("`num_prefill_tokens`".into())));
    }

    #[test]
    fn csv_errors_have_exact_lines() {
        let h = "arrived_at,num_prefill_tokens,num_decode_tokens";
        let cases: Vec<(String, usize, &str)> = Vec::from([
            (String::new(), 1, "empty CSV trace: no header row"),
            (format!("{h}\n"), 1, "the trace holds no request"),
            (
                "arrived_at,num_decode_tokens\n0,1\n".into(),
                1,
                "missing column `num_prefill_tokens` in the CSV header (it has: arrived_at, num_decode_tokens)",
            ),
            (
                "num_prefill_tokens,num_decode_tokens\n1,1\n".into(),
                1,
                "missing column `arrived_at` in the CSV header (it has: num_prefill_tokens, num_decode_tokens)",
            ),
            (
                "arrived_at,num_prefill_tokens\n0,1\n".into(),
                1,
                "missing column `num_decode_tokens` in the CSV header (it has: arrived_at, num_prefill_tokens)",
            ),
            (format!("{h},x,x\n"), 1, "bad CSV header: duplicate column `x`"),
            (format!("{h},,y\n"), 1, "bad CSV header: column 4 has no name"),
            (format!("{h},\"x\n"), 1, "bad CSV header: field 4: unterminated quoted field"),
            (format!("{h}\n0,1,1\n0.5,2\n"), 3, "2 fields, but the header has 3 columns"),
            (format!("{h}\n0,1,1\n0.5,2,3,4\n"), 3, "4 fields, but the header has 3 columns"),
            (format!("{h}\n0,1,1\n\"0.5,2,3\n"), 3, "field 1: unterminated quoted field"),
            (format!("{h}\n0,1,1\n\"0.5\"x,2,3\n"), 3, "field 1: `x` after a closing quote"),
            (format!("{h}\n0,1,1\n0.5,2\"2,3\n"), 3, "field 2: a quote inside an unquoted field"),
            (format!("{h}\n0,1,1\nabc,2,3\n"), 3, "`arrived_at` is not a decimal number of seconds (\"abc\")"),
            (format!("{h}\n0,1,1\n,2,3\n"), 3, "`arrived_at` is not a decimal number of seconds (\"\")"),
            (format!("{h}\n-0.5,1,1\n"), 2, "`arrived_at` is negative (-0.5)"),
            (format!("{h}\n0,1,1\n1,0,3\n"), 3, "`num_prefill_tokens` is 0: a request must have at least one token"),
            (format!("{h}\n0,1,1\n1,2,0\n"), 3, "`num_decode_tokens` is 0: a request must have at least one token"),
            (format!("{h}\n0,1,1\n1,-2,3\n"), 3, "`num_prefill_tokens` is negative (-2)"),
            (
                format!("{h}\n0,100,5\n18446744073,200,100\n"),
                3,
                "arrival time (from the trace's first request, scaled) past the scenario limit of 4611686018427000000 ns",
            ),
            (
                format!("{h}\n0,1,1\n1,99999999999999,3\n"),
                3,
                "`num_prefill_tokens` 99999999999999 is out of range: 1..=1099511627776",
            ),
            (
                format!("{h}\n0,1,1\n1,2,18446744073709551615\n"),
                3,
                "`num_decode_tokens` 18446744073709551615 is out of range: 1..=1099511627776",
            ),
            (format!("{h}\n0,1,1\n1,2,3.5\n"), 3, "`num_decode_tokens` is not an integer (3.5)"),
            (format!("{h}\n0,1,1\n1,2,3.0\n"), 3, "`num_decode_tokens` is not an integer (3.0)"),
            (format!("{h}\n0,1,1\n1,,3\n"), 3, "`num_prefill_tokens` is empty"),
            (
                format!("{h}\n0,1,1\n1,99999999999999999999,3\n"),
                3,
                "`num_prefill_tokens` 99999999999999999999 does not fit in u64",
            ),
            (
                format!("{h}\n0,1,1\n2,1,1\n1.999,1,1\n"),
                4,
                "timestamp goes backwards: 1.999 s after 2 s on the previous request",
            ),
            (format!("{h}\r\n0,1,1\r\n\r\n1,1,1\r\n"), 3, "blank line before the end of the file"),
            (format!("\n{h}\n0,1,1\n"), 1, "blank line before the end of the file"),
        ]);
        let wrong: Vec<String> = cases
            .iter()
            .filter_map(|(text, line, msg)| {
                let got = csv_err(text);
                (got != (*line, msg.to_string())).then(|| format!("{text:?}: got {got:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn error_display_and_missing_file() {
        let e = TraceError::new("traces/a.jsonl", 7, TraceErrorKind::MissingField("timestamp"));
        assert_eq!(e.to_string(), "traces/a.jsonl:7: missing field `timestamp`");
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert_eq!(boxed.to_string(), "traces/a.jsonl:7: missing field `timestamp`");
        // What the binary does with an unreadable file.
        let path = "/nonexistent/kvsim/trace.jsonl";
        let io = std::fs::read_to_string(path).unwrap_err();
        let e = TraceError::new(path, 0, TraceErrorKind::Unreadable(io.to_string()));
        assert_eq!(e.to_string(), format!("/nonexistent/kvsim/trace.jsonl: cannot read: {io}"));
        assert!(e.to_string().contains("No such file or directory"), "{e}");
    }

    #[test]
    fn detect_format_on_whole_files() {
        let (path, text) = mooncake(SYNTHETIC);
        assert_eq!(detect_format(&path, &text), Ok(TraceFormat::MooncakeJsonl));
        assert_eq!(detect_format("requests.txt", GOOD_CSV), Ok(TraceFormat::Csv)); // the header decides
        let e = detect_format("requests.log", "time,prompt\n1,2\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("requests.log", 1));
        assert!(e.to_string().starts_with("requests.log:1: unknown trace format: neither Mooncake"), "{e}");
        assert_eq!(detect_format("empty.log", "").unwrap_err().line, 1);
    }

    #[test]
    fn detect() {
        use TraceFormat::*;
        assert_eq!(TraceFormat::detect("a.txt", "{\"timestamp\": 0}"), Some(MooncakeJsonl));
        assert_eq!(TraceFormat::detect("a.csv", "  {\"timestamp\": 0}"), Some(MooncakeJsonl)); // content wins
        assert_eq!(TraceFormat::detect("a", "\u{feff}arrived_at,num_prefill_tokens,num_decode_tokens"), Some(Csv));
        assert_eq!(TraceFormat::detect("a.jsonl", "x,\"arrived_at\"\r"), Some(Csv));
        assert_eq!(TraceFormat::detect("dir/a.JSONL", ""), Some(MooncakeJsonl));
        assert_eq!(TraceFormat::detect("a.ndjson", ""), Some(MooncakeJsonl));
        assert_eq!(TraceFormat::detect("a.Csv", "time,prompt"), Some(Csv));
        assert_eq!(TraceFormat::detect("a.txt", "time,prompt"), None);
        assert_eq!(TraceFormat::detect("dir.csv/a", ""), None);
        assert_eq!(TraceFormat::detect("", ""), None);
    }

    #[test]
    fn conversation_tenants_on_the_real_trace() {
        let reqs = parse_all(CONVERSATION);
        let tenants = assign_tenants(&reqs, &TenantAssign::Conversation, CONVERSATION).unwrap();
        assert_eq!(tenants.len(), reqs.len());
        // Dense, in order of first appearance.
        let mut next = 0;
        for &t in &tenants {
            assert!(t <= next);
            if t == next {
                next += 1;
            }
        }
        assert_eq!(next, 7_373);
        let mut sizes = vec![0u32; next as usize];
        for &t in &tenants {
            sizes[t as usize] += 1;
        }
        assert_eq!(sizes.iter().filter(|&&s| s == 1).count(), 5_114);
        assert_eq!(sizes.iter().filter(|&&s| s == 2).count(), 1_311);
        assert_eq!(sizes.iter().filter(|&&s| s > 1).map(|&s| s as usize).sum::<usize>(), 6_917);
        assert_eq!(sizes.iter().max(), Some(&43));
        // The first block is everyone's system prompt; nothing else crosses conversations.
        assert!(reqs.iter().all(|r| r.hash_ids[0] == 0));

        let synthetic = parse_all(SYNTHETIC);
        let t = assign_tenants(&synthetic, &TenantAssign::Conversation, SYNTHETIC).unwrap();
        assert_eq!(t.iter().max().map(|m| m + 1), Some(2_245));
    }

    #[test]
    fn round_robin_and_column_tenants() {
        let reqs = jsonl(&four(), &ReadOptions::default()).unwrap();
        assert_eq!(assign_tenants(&reqs, &TenantAssign::RoundRobin(3), "t").unwrap(), [0, 1, 2, 0]);
        assert_eq!(assign_tenants(&reqs, &TenantAssign::RoundRobin(1), "t").unwrap(), [0, 0, 0, 0]);
        let e = assign_tenants(&reqs, &TenantAssign::RoundRobin(0), "t").unwrap_err();
        assert_eq!(e.to_string(), "t: round-robin over 0 tenants");
        let e = assign_tenants(&reqs, &TenantAssign::Column("tenant".into()), "t.jsonl").unwrap_err();
        assert_eq!(e.to_string(), "t.jsonl: request #0 has no column `tenant` (it has: none)");
        let text = "arrived_at,num_prefill_tokens,num_decode_tokens,tenant\n0,1,1,a\n1,1,1,\n";
        let reqs = csv(text, &ReadOptions::default()).unwrap();
        let e = assign_tenants(&reqs, &TenantAssign::Column("tenant".into()), "t.csv").unwrap_err();
        assert_eq!(e.to_string(), "t.csv: request #1 has an empty `tenant`");
        let e = assign_tenants(&reqs, &TenantAssign::Column("user".into()), "t.csv").unwrap_err();
        assert_eq!(e.to_string(), "t.csv: request #0 has no column `user` (it has: tenant)");
        assert_eq!(assign_tenants(&[], &TenantAssign::Conversation, "t").unwrap(), Vec::<u32>::new());
    }
}
