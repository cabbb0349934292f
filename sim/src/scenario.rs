//! Scenario files: the serde image of a TOML scenario, validated with errors that name the file,
//! line and key, and resolved (with the engine profile and `--set` overrides) into a `SimConfig`
//! in which every knob is explicit. Parsing takes text, not paths: the caller reads the file.

use crate::config::{
    self, Bucket, CostConfig, FaultConfig, GeneratorConfig, Knobs, NodeConfig, RequestSpec, RouterPolicy,
    ScriptedFault, SimConfig,
};
use crate::types::Ratio;
use serde::Deserialize;
use std::fmt;

/// A bad scenario, override or configuration: exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    pub line: Option<usize>,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: ", self.file, l)?,
            None => write!(f, "{}: ", self.file)?,
        }
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: Option<String>,
    pub description: Option<String>,
    pub seed: Option<u64>,
    pub profile: Option<String>,
    pub context_len: u64,
    pub liveness_bound_s: Option<u64>,
    #[serde(default)]
    pub prefill: Vec<NodeGroup>,
    #[serde(default)]
    pub decode: Vec<NodeGroup>,
    pub router: Option<RouterSection>,
    pub cost: Option<CostSection>,
    pub workload: Option<WorkloadSection>,
    #[serde(default)]
    pub request: Vec<RequestEntry>,
    /// A production request trace as the workload (Mooncake JSON Lines or CSV).
    pub trace: Option<TraceSection>,
    pub knobs: Option<toml::Table>,
    pub faults: Option<FaultSection>,
    /// Expectations for `kvsim check`: one entry per (profile, knob settings) to run.
    #[serde(default)]
    pub expect: Vec<crate::expect::Expectation>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    pub count: Option<u16>,
    pub pool_tokens: u64,
    pub metadata_slots: Option<u32>,
    pub max_running_requests: Option<u32>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RouterSection {
    pub policy: RouterPolicy,
}

#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct CostSection {
    pub prefill_base_us: Option<u64>,
    pub prefill_ns_per_token: Option<u64>,
    pub prefill_ns_per_token_per_kctx: Option<u64>,
    pub decode_step_base_us: Option<u64>,
    pub decode_ns_per_kkv: Option<u64>,
    pub kv_bytes_per_token: Option<u64>,
    pub transfer_latency_us: Option<u64>,
    pub transfer_bytes_per_us: Option<u64>,
    pub message_latency_us: Option<u64>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    pub requests: u32,
    pub tenants: u32,
    pub mean_interarrival_ms: u64,
    pub prompt_tokens: Vec<Bucket>,
    pub output_tokens: Vec<Bucket>,
    pub client_abort: Option<String>,
    pub abort_within_ms: Option<u64>,
    pub start_ms: Option<u64>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RequestEntry {
    /// Arrival in ms, or `at_ns` for exact times (written by `kvsim shrink` and the fuzzer).
    pub at_ms: Option<u64>,
    pub at_ns: Option<u64>,
    pub tenant: u32,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub abort_at_ms: Option<u64>,
    pub abort_at_ns: Option<u64>,
    /// The prompt as 512-token block hashes (shared prefixes), optional.
    #[serde(default)]
    pub prefix_blocks: Vec<u64>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TraceSection {
    /// Path relative to the scenario file.
    pub file: String,
    /// `mooncake` or `csv` (default: from the file).
    pub format: Option<String>,
    /// 1000 = as recorded, 500 = twice as fast.
    pub time_scale_permille: Option<u64>,
    pub window_start_ms: Option<u64>,
    pub window_ms: Option<u64>,
    pub limit: Option<u64>,
    /// `conversation` (default), `round_robin:N` or `column:NAME`.
    pub tenants: Option<String>,
}

#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    pub transfer_fail: Option<String>,
    pub delay_spike: Option<String>,
    pub delay_spike_ms: Option<u64>,
    pub visibility_lag: Option<String>,
    pub visibility_lag_ms: Option<u64>,
    pub node_crash: Option<String>,
    pub crash_restart_ms: Option<u64>,
    pub heal_at_ms: Option<u64>,
    #[serde(default)]
    pub script: Vec<ScriptedFault>,
}

/// The longest virtual time a scenario may name (about 146 years, and the default `heal_at_ms`):
/// every `*_ms` value is checked against it so that conversions to nanoseconds never overflow.
pub const MAX_TIME_MS: u64 = u64::MAX / 4_000_000;

/// Reads a file named by a scenario (the library itself never touches files).
pub type FileReader<'a> = &'a dyn Fn(&str) -> Result<String, String>;

/// Where the knob values came from, for error messages.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub profile: Option<String>,
    pub seed: Option<u64>,
    /// `--set KNOB=VALUE` pairs, in order.
    pub set: Vec<(String, String)>,
}

/// The parsed file with its text (for locating keys).
pub struct Scenario {
    pub file: String,
    pub text: String,
    pub spec: ScenarioFile,
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

/// Finds the line of `key` inside the `nth` occurrence of table `table` (`""` = top level).
pub fn locate(text: &str, table: &str, nth: usize, key: &str) -> Option<usize> {
    let mut in_table = table.is_empty();
    let mut seen = 0usize;
    let mut table_line = None;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.starts_with('[') {
            let name = l.trim_start_matches('[').split(']').next().unwrap_or("").trim();
            in_table = false;
            if name == table {
                if seen == nth {
                    in_table = true;
                    table_line = Some(i + 1);
                }
                seen += 1;
            }
            continue;
        }
        if in_table {
            if key.is_empty() {
                return table_line;
            }
            if let Some((k, _)) = l.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    return Some(i + 1);
                }
            }
        }
    }
    table_line
}

impl Scenario {
    pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let spec: ScenarioFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            let key = line
                .and_then(|l| text.lines().nth(l - 1))
                .and_then(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
                .unwrap_or_default();
            ScenarioError { file: file.to_string(), line, key, message: e.message().trim().to_string() }
        })?;
        Ok(Scenario { file: file.to_string(), text: text.to_string(), spec })
    }

    fn err(&self, table: &str, nth: usize, key: &str, message: impl Into<String>) -> ScenarioError {
        let shown = match (table, key) {
            ("", k) => k.to_string(),
            (t, "") => t.to_string(),
            (t, k) => format!("{t}.{k}"),
        };
        ScenarioError {
            file: self.file.clone(),
            line: locate(&self.text, table, nth, key),
            key: shown,
            message: message.into(),
        }
    }

    fn ratio(&self, table: &str, key: &str, v: &Option<String>) -> Result<Ratio, ScenarioError> {
        match v {
            None => Ok(Ratio::NEVER),
            Some(s) => Ratio::parse(s).map_err(|m| self.err(table, 0, key, m)),
        }
    }

    /// Resolves knobs: profile, then the scenario's `[knobs]`, then `--set`.
    fn knobs(&self, profile: &str, set: &[(String, String)]) -> Result<Knobs, ScenarioError> {
        let p = config::profile(profile).ok_or_else(|| {
            self.err("", 0, "profile", format!("unknown profile `{profile}` (known: {})", config::profile_names()))
        })?;
        let mut table = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
        let mut origin: Vec<(String, Option<usize>)> = Vec::new();
        for (k, v) in self.spec.knobs.clone().unwrap_or_default() {
            if !table.contains_key(&k) {
                return Err(self.err(
                    "knobs",
                    0,
                    &k,
                    format!("unknown knob (known: {})", config::knob_names().join(", ")),
                ));
            }
            origin.push((k.clone(), locate(&self.text, "knobs", 0, &k)));
            table.insert(k, v);
        }
        for (k, v) in set {
            if !table.contains_key(k) {
                return Err(ScenarioError {
                    file: "--set".into(),
                    line: None,
                    key: k.clone(),
                    message: format!("unknown knob (known: {})", config::knob_names().join(", ")),
                });
            }
            let value = toml::from_str::<toml::Table>(&format!("v = {v}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(v.clone()));
            origin.retain(|(o, _)| o != k);
            table.insert(k.clone(), value);
        }
        // Deserialise knob by knob so that a bad value names its knob and where it came from.
        for (k, v) in &table {
            let mut one = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
            one.insert(k.clone(), v.clone());
            if let Err(e) = Knobs::deserialize(one) {
                let line = origin.iter().find(|(o, _)| o == k).and_then(|(_, l)| *l);
                let file = if line.is_some() || origin.iter().any(|(o, _)| o == k) {
                    self.file.clone()
                } else {
                    "--set".into()
                };
                return Err(ScenarioError {
                    file,
                    line,
                    key: format!("knobs.{k}"),
                    message: e.message().trim().to_string(),
                });
            }
        }
        Ok(Knobs::deserialize(table).expect("each knob checked"))
    }

    /// The fully resolved configuration (no file access: a `[trace]` workload is an error here;
    /// use `resolve_with`).
    pub fn resolve(&self, o: &Overrides) -> Result<SimConfig, ScenarioError> {
        self.resolve_with(o, None)
    }

    /// Reads a `[trace]` workload's file through `read` (path relative to the scenario's folder).
    fn trace_requests(&self, t: &TraceSection, read: Option<FileReader>) -> Result<Vec<RequestSpec>, ScenarioError> {
        use crate::workload_trace::{self as wt, ReadOptions, TenantAssign, TraceFormat};
        let path = std::path::Path::new(&self.file).parent().unwrap_or(std::path::Path::new("")).join(&t.file);
        let shown = path.to_string_lossy().into_owned();
        let Some(read) = read else {
            return Err(self.err(
                "trace",
                0,
                "file",
                "trace workloads are read by the kvsim binary (Scenario::resolve_with)",
            ));
        };
        let text = read(&shown).map_err(|e| self.err("trace", 0, "file", format!("{shown}: {e}")))?;
        let tr = |e: wt::TraceError| ScenarioError {
            file: e.file.clone(),
            line: (e.line > 0).then_some(e.line),
            key: String::new(),
            message: e.message,
        };
        let format = match t.format.as_deref() {
            None => wt::detect_format(&shown, &text).map_err(tr)?,
            Some("mooncake") => TraceFormat::MooncakeJsonl,
            Some("csv") => TraceFormat::Csv,
            Some(f) => return Err(self.err("trace", 0, "format", format!("`{f}`: expected mooncake or csv"))),
        };
        let opts = ReadOptions {
            time_scale_permille: t.time_scale_permille.unwrap_or(1000),
            window_start_ms: t.window_start_ms.unwrap_or(0),
            window_ms: t.window_ms,
            limit: t.limit,
        };
        let reqs = wt::parse_trace(&shown, &text, format, &opts).map_err(tr)?;
        let how = match t.tenants.as_deref().unwrap_or("conversation") {
            "conversation" => TenantAssign::Conversation,
            s if s.starts_with("round_robin:") => match s["round_robin:".len()..].parse::<u32>() {
                Ok(n) if n > 0 => TenantAssign::RoundRobin(n),
                _ => return Err(self.err("trace", 0, "tenants", format!("`{s}`: expected round_robin:N with N >= 1"))),
            },
            s if s.starts_with("column:") => TenantAssign::Column(s["column:".len()..].to_string()),
            s => {
                return Err(self.err(
                    "trace",
                    0,
                    "tenants",
                    format!("`{s}`: expected conversation, round_robin:N or column:NAME"),
                ))
            }
        };
        let tenants = wt::assign_tenants(&reqs, &how, &shown).map_err(tr)?;
        Ok(reqs
            .into_iter()
            .zip(tenants)
            .map(|(r, tenant)| RequestSpec {
                at_ns: r.arrival_ns,
                tenant,
                prompt_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                abort_at_ns: None,
                prefix_blocks: r.hash_ids,
            })
            .collect())
    }

    /// The fully resolved configuration, reading a `[trace]` workload's file through `read`.
    pub fn resolve_with(&self, o: &Overrides, read: Option<FileReader>) -> Result<SimConfig, ScenarioError> {
        let s = &self.spec;
        let profile = o.profile.clone().or_else(|| s.profile.clone()).unwrap_or_else(|| "sglang-0.5.16".into());
        let knobs = self.knobs(&profile, &o.set)?;
        let knob_err = |key: &str, m: &str| ScenarioError {
            file: self.file.clone(),
            line: locate(&self.text, "knobs", 0, key),
            key: format!("knobs.{key}"),
            message: m.to_string(),
        };
        let ps = knobs.page_size;
        if ps == 0 || ps > 1 << 16 {
            return Err(knob_err("page_size", "page size must be between 1 and 65536"));
        }
        if knobs.chunked_prefill_size == 0 {
            return Err(knob_err("chunked_prefill_size", "must be at least 1"));
        }
        if knobs.heartbeat_failures == 0 || knobs.heartbeat_interval_ms == 0 {
            return Err(knob_err(
                "heartbeat_failures",
                "heartbeats need an interval and a failure count of at least 1",
            ));
        }
        let times = [
            ("bootstrap_timeout_ms", knobs.bootstrap_timeout_ms),
            ("waiting_timeout_ms", knobs.waiting_timeout_ms),
            ("heartbeat_interval_ms", knobs.heartbeat_interval_ms.saturating_mul(knobs.heartbeat_failures)),
            ("deferred_release_timeout_ms", knobs.deferred_release_timeout_ms),
            ("source_lease_ms", knobs.source_lease_ms),
            ("transfer_sync_timeout_ms", knobs.transfer_sync_timeout_ms),
        ];
        if let Some((k, _)) = times.iter().find(|(_, v)| *v > MAX_TIME_MS) {
            return Err(knob_err(k, &format!("at most {MAX_TIME_MS} ms")));
        }
        if s.context_len < 2 {
            return Err(self.err("", 0, "context_len", "must be at least 2"));
        }
        let nodes = |groups: &[NodeGroup], table: &str| -> Result<Vec<NodeConfig>, ScenarioError> {
            if groups.is_empty() {
                return Err(self.err(table, 0, "", format!("at least one [[{table}]] group is required")));
            }
            let mut out = Vec::new();
            for (i, g) in groups.iter().enumerate() {
                if g.pool_tokens < ps {
                    return Err(self.err(
                        table,
                        i,
                        "pool_tokens",
                        format!("pool of {} tokens is smaller than one page ({ps} tokens)", g.pool_tokens),
                    ));
                }
                if g.pool_tokens % ps != 0 {
                    return Err(self.err(table, i, "pool_tokens", format!("{} is not a multiple of page_size {ps} (engines round the pool down at start-up; write the rounded value)", g.pool_tokens)));
                }
                if g.pool_tokens / ps >= u64::from(u32::MAX) / 2 {
                    return Err(self.err(table, i, "pool_tokens", "pool has too many pages (limit 2^31)"));
                }
                let count = g.count.unwrap_or(1);
                if count == 0 || count > 1024 {
                    return Err(self.err(table, i, "count", "between 1 and 1024 nodes per group"));
                }
                let slots = g.metadata_slots.unwrap_or(1024);
                let running = g.max_running_requests.unwrap_or(256);
                if slots == 0 || running == 0 {
                    return Err(self.err(
                        table,
                        i,
                        if slots == 0 { "metadata_slots" } else { "max_running_requests" },
                        "must be at least 1",
                    ));
                }
                for _ in 0..count {
                    out.push(NodeConfig {
                        pool_tokens: g.pool_tokens,
                        metadata_slots: slots,
                        max_running_requests: running,
                    });
                }
            }
            Ok(out)
        };
        let prefill = nodes(&s.prefill, "prefill")?;
        let decode = nodes(&s.decode, "decode")?;
        let c = s.cost.clone().unwrap_or_default();
        let cost = CostConfig {
            prefill_base_us: c.prefill_base_us.unwrap_or(5_000),
            prefill_ns_per_token: c.prefill_ns_per_token.unwrap_or(30_000),
            prefill_ns_per_token_per_kctx: c.prefill_ns_per_token_per_kctx.unwrap_or(20),
            decode_step_base_us: c.decode_step_base_us.unwrap_or(25_000),
            decode_ns_per_kkv: c.decode_ns_per_kkv.unwrap_or(2_000),
            kv_bytes_per_token: c.kv_bytes_per_token.unwrap_or(70_000),
            transfer_latency_us: c.transfer_latency_us.unwrap_or(500),
            transfer_bytes_per_us: c.transfer_bytes_per_us.unwrap_or(25_000),
            message_latency_us: c.message_latency_us.unwrap_or(200),
        };
        if cost.transfer_bytes_per_us == 0 {
            return Err(self.err("cost", 0, "transfer_bytes_per_us", "bandwidth must be positive"));
        }
        let generator = match &s.workload {
            None => None,
            Some(w) => {
                if w.tenants == 0 {
                    return Err(self.err("workload", 0, "tenants", "at least one tenant"));
                }
                if w.requests > 10_000_000 {
                    return Err(self.err("workload", 0, "requests", "at most 10,000,000 requests"));
                }
                for (key, b) in [("prompt_tokens", &w.prompt_tokens), ("output_tokens", &w.output_tokens)] {
                    if b.iter().map(|x| x.weight).sum::<u64>() == 0 {
                        return Err(self.err("workload", 0, key, "buckets need a positive total weight"));
                    }
                    if let Some(x) = b.iter().find(|x| x.min > x.max || x.min == 0) {
                        return Err(self.err(
                            "workload",
                            0,
                            key,
                            format!("bucket {}..={} is empty or starts at 0", x.min, x.max),
                        ));
                    }
                }
                Some(GeneratorConfig {
                    requests: w.requests,
                    tenants: w.tenants,
                    mean_interarrival_us: w
                        .mean_interarrival_ms
                        .checked_mul(1000)
                        .filter(|us| *us <= MAX_TIME_MS * 1000)
                        .ok_or_else(|| self.err("workload", 0, "mean_interarrival_ms", "too large"))?,
                    prompt_tokens: w.prompt_tokens.clone(),
                    output_tokens: w.output_tokens.clone(),
                    client_abort: self.ratio("workload", "client_abort", &w.client_abort)?,
                    abort_within_ms: w.abort_within_ms.unwrap_or(60_000),
                    start_ms: w.start_ms.unwrap_or(0),
                })
            }
        };
        let mut requests = Vec::new();
        for (i, r) in s.request.iter().enumerate() {
            if r.prompt_tokens == 0 || r.output_tokens == 0 {
                let key = if r.prompt_tokens == 0 { "prompt_tokens" } else { "output_tokens" };
                return Err(self.err("request", i, key, "must be at least 1"));
            }
            let at_ns = match (r.at_ms, r.at_ns) {
                (Some(ms), None) if ms <= MAX_TIME_MS => ms * 1_000_000,
                (Some(_), None) => return Err(self.err("request", i, "at_ms", format!("at most {MAX_TIME_MS} ms"))),
                (None, Some(ns)) => ns,
                _ => return Err(self.err("request", i, "at_ms", "give exactly one of at_ms and at_ns")),
            };
            let abort_at_ns = match (r.abort_at_ms, r.abort_at_ns) {
                (None, None) => None,
                (Some(ms), None) if ms <= MAX_TIME_MS => Some(ms * 1_000_000),
                (Some(_), None) => {
                    return Err(self.err("request", i, "abort_at_ms", format!("at most {MAX_TIME_MS} ms")))
                }
                (None, Some(ns)) => Some(ns),
                _ => {
                    return Err(self.err(
                        "request",
                        i,
                        "abort_at_ms",
                        "give at most one of abort_at_ms and abort_at_ns",
                    ))
                }
            };
            if abort_at_ns.is_some_and(|a| a < at_ns) {
                return Err(self.err("request", i, "abort_at_ms", "abort before arrival"));
            }
            requests.push(RequestSpec {
                at_ns,
                tenant: r.tenant,
                prompt_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                abort_at_ns,
                prefix_blocks: r.prefix_blocks.clone(),
            });
        }
        if let Some(t) = &s.trace {
            requests.extend(self.trace_requests(t, read)?);
        }
        let total = requests.len() as u64 + generator.as_ref().map_or(0, |g| u64::from(g.requests));
        if total == 0 {
            return Err(self.err("", 0, "", "no requests: add a [workload] or [[request]] entries"));
        }
        let f = s.faults.clone().unwrap_or_default();
        for (i, sf) in f.script.iter().enumerate() {
            let bad = match sf {
                ScriptedFault::Crash { node, .. } => {
                    let ok = node
                        .rsplit_once('-')
                        .and_then(|(role, idx)| Some((role, idx.parse::<usize>().ok()?)))
                        .is_some_and(|(role, idx)| match role {
                            "prefill" => idx < prefill.len(),
                            "decode" => idx < decode.len(),
                            _ => false,
                        });
                    (!ok).then(|| {
                        format!("no node `{node}` (prefill-0..{}, decode-0..{})", prefill.len() - 1, decode.len() - 1)
                    })
                }
                ScriptedFault::TransferFail { request }
                | ScriptedFault::Delay { request, .. }
                | ScriptedFault::VisibilityLag { request, .. }
                | ScriptedFault::MetadataLag { request, .. } => (u64::from(*request) >= total)
                    .then(|| format!("request {request} does not exist ({total} requests)")),
            };
            if let Some(m) = bad {
                return Err(ScenarioError {
                    file: self.file.clone(),
                    line: locate(&self.text, "faults.script", i, "kind"),
                    key: format!("faults.script[{i}]"),
                    message: m,
                });
            }
        }
        let faults = FaultConfig {
            transfer_fail: self.ratio("faults", "transfer_fail", &f.transfer_fail)?,
            delay_spike: self.ratio("faults", "delay_spike", &f.delay_spike)?,
            delay_spike_ms: f.delay_spike_ms.unwrap_or(90_000),
            visibility_lag: self.ratio("faults", "visibility_lag", &f.visibility_lag)?,
            visibility_lag_ms: f.visibility_lag_ms.unwrap_or(5),
            node_crash: self.ratio("faults", "node_crash", &f.node_crash)?,
            crash_restart_ms: f.crash_restart_ms.unwrap_or(30_000),
            heal_at_ms: f.heal_at_ms.unwrap_or(MAX_TIME_MS),
            script: f.script.clone(),
        };
        let fault_times = [
            ("delay_spike_ms", faults.delay_spike_ms),
            ("visibility_lag_ms", faults.visibility_lag_ms),
            ("crash_restart_ms", faults.crash_restart_ms),
            ("heal_at_ms", faults.heal_at_ms),
        ];
        if let Some((k, _)) = fault_times.iter().find(|(_, v)| *v > MAX_TIME_MS) {
            return Err(self.err("faults", 0, k, format!("at most {MAX_TIME_MS} ms")));
        }
        for (i, sf) in faults.script.iter().enumerate() {
            let t = match sf {
                ScriptedFault::Crash { at_ms, restart_after_ms, .. } => at_ms.saturating_add(*restart_after_ms),
                ScriptedFault::Delay { delay_ms, .. } => *delay_ms,
                ScriptedFault::VisibilityLag { lag_ms, .. } | ScriptedFault::MetadataLag { lag_ms, .. } => *lag_ms,
                ScriptedFault::TransferFail { .. } => 0,
            };
            if t > MAX_TIME_MS {
                return Err(self.err("faults.script", i, "kind", format!("times at most {MAX_TIME_MS} ms")));
            }
        }
        if s.liveness_bound_s.is_some_and(|b| b > MAX_TIME_MS / 1000) {
            return Err(self.err("", 0, "liveness_bound_s", format!("at most {} s", MAX_TIME_MS / 1000)));
        }
        let name = s.name.clone().unwrap_or_else(|| {
            std::path::Path::new(&self.file).file_stem().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default()
        });
        Ok(SimConfig {
            name,
            seed: o.seed.or(s.seed).unwrap_or(1),
            profile,
            knobs,
            context_len: s.context_len,
            prefill,
            decode,
            router_policy: s.router.as_ref().map_or(RouterPolicy::RoundRobin, |r| r.policy),
            cost,
            generator,
            requests,
            faults,
            liveness_bound_s: s.liveness_bound_s.unwrap_or(3_600),
        })
    }
}

/// Writes a resolved configuration back as a scenario file that `Scenario::parse` reads to the
/// same configuration: every knob, every node, the generator expanded into explicit requests.
pub fn to_toml(cfg: &SimConfig, header_comment: &str) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for l in header_comment.lines() {
        let _ = writeln!(s, "# {l}");
    }
    let _ = writeln!(s, "name = {:?}", cfg.name);
    let _ = writeln!(s, "seed = {}", cfg.seed);
    let _ = writeln!(s, "profile = {:?}", cfg.profile);
    let _ = writeln!(s, "context_len = {}", cfg.context_len);
    let _ = writeln!(s, "liveness_bound_s = {}\n", cfg.liveness_bound_s);
    for (table, nodes) in [("prefill", &cfg.prefill), ("decode", &cfg.decode)] {
        for n in nodes {
            let _ = writeln!(
                s,
                "[[{table}]]\npool_tokens = {}\nmetadata_slots = {}\nmax_running_requests = {}\n",
                n.pool_tokens, n.metadata_slots, n.max_running_requests
            );
        }
    }
    let policy = toml::Value::try_from(cfg.router_policy).expect("serialises");
    let _ = writeln!(s, "[router]\npolicy = {policy}\n");
    let cost = toml::to_string(&cfg.cost).expect("cost serialises");
    let _ = writeln!(s, "[cost]\n{cost}");
    let knobs = toml::to_string(&cfg.knobs).expect("knobs serialise");
    let _ = writeln!(s, "[knobs]\n{knobs}");
    let f = &cfg.faults;
    let _ = writeln!(
        s,
        "[faults]\ntransfer_fail = \"{}\"\ndelay_spike = \"{}\"\ndelay_spike_ms = {}\nvisibility_lag = \"{}\"\nvisibility_lag_ms = {}\nnode_crash = \"{}\"\ncrash_restart_ms = {}\nheal_at_ms = {}\n",
        f.transfer_fail, f.delay_spike, f.delay_spike_ms, f.visibility_lag, f.visibility_lag_ms, f.node_crash, f.crash_restart_ms, f.heal_at_ms
    );
    for sf in &f.script {
        let t = toml::to_string(sf).expect("fault serialises");
        let _ = writeln!(s, "[[faults.script]]\n{t}");
    }
    let mut reqs = cfg.requests.clone();
    if let Some(g) = &cfg.generator {
        reqs.extend(crate::client::generate(cfg.seed, g));
    }
    reqs.sort_by_key(|r| r.at_ns);
    for r in &reqs {
        let _ = write!(
            s,
            "[[request]]\nat_ns = {}\ntenant = {}\nprompt_tokens = {}\noutput_tokens = {}\n",
            r.at_ns, r.tenant, r.prompt_tokens, r.output_tokens
        );
        if let Some(a) = r.abort_at_ns {
            let _ = writeln!(s, "abort_at_ns = {a}");
        }
        if !r.prefix_blocks.is_empty() {
            let ids: Vec<String> = r.prefix_blocks.iter().map(u64::to_string).collect();
            let _ = writeln!(s, "prefix_blocks = [{}]", ids.join(", "));
        }
        s.push('\n');
    }
    s
}

/// Checks a configuration that did not come from a scenario file (a trace header): it must be
/// one that a scenario could resolve to. Returns the first problem found.
pub fn validate_config(cfg: &SimConfig, file: &str) -> Result<(), ScenarioError> {
    let text = to_toml(cfg, "validation");
    Scenario::parse(file, &text)?.resolve(&Overrides::default()).map(|_| ()).map_err(|mut e| {
        e.file = format!("{file} (header configuration)");
        e.line = None;
        e
    })
}
