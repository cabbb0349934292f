//! Scenario files: the serde image of a TOML scenario, validated with errors that name the file,
//! line and key, and resolved (with the engine profile and `--set` overrides) into a `SimConfig`
//! in which every knob is explicit. Parsing takes text, not paths: the caller reads the file.

use crate::config::{
    self, Bucket, CostConfig, FaultConfig, GeneratorConfig, Knobs, NodeConfig, RequestSpec, RouterPolicy,
    ScriptedFault, SimConfig,
};
use crate::types::Ratio;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The engine profile of a scenario that names none (`profile` absent).
pub const DEFAULT_PROFILE: &str = "sglang-0.5.16";

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

/// A kvsim scenario: a disaggregated (prefill/decode) deployment, its workload, the engine's
/// behaviour knobs, faults and expectations. Times are virtual; nothing here touches a GPU.
#[derive(Serialize, Deserialize, Debug, Clone, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "kvsim scenario")]
pub struct ScenarioFile {
    /// Shown in reports and reproduce commands. Default: the file name without `.toml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free text for people; kvsim ignores it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Root seed of every random draw (workload, router, faults). Default 1; `--seed` overrides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Engine profile whose knob values are the starting point (`kvsim profiles` lists them):
    /// `sglang-0.5.16` (default), `sglang-0.5.22`, `vllm-nixl`. `--profile` overrides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The model's advertised context length in tokens (sglang `--context-length`, vLLM
    /// `--max-model-len`). Required.
    #[schemars(range(min = 2, max = MAX_TOKENS))]
    pub context_len: u64,
    /// After the last arrival, how long every request may take to reach a final status before it
    /// counts as a hang (liveness); a request whose engine timer (bootstrap, waiting for KV) is
    /// still armed then is given until that timer plus this bound again. Seconds, at least 1 (with
    /// 0 a request that arrives last would count as a hang before it could start); default 3,600.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TIME_MS / 1000))]
    pub liveness_bound_s: Option<u64>,
    /// Prefill node groups (at least one; at most 1,024 nodes in all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefill: Vec<NodeGroup>,
    /// Decode node groups (at least one; at most 1,024 nodes in all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode: Vec<NodeGroup>,
    /// How the router picks a (prefill, decode) pair. Default: round robin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterSection>,
    /// The forward-pass and transfer cost model (virtual time). Every key optional.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostSection>,
    /// A synthetic workload generator (Poisson arrivals, bucketed lengths, client aborts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadSection>,
    /// Explicit requests, numbered with the generated ones in arrival order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request: Vec<RequestEntry>,
    /// A production request trace as the workload (Mooncake JSON Lines or CSV).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSection>,
    /// Knob overrides over the profile (section 9 of `docs/reference/sglang-pd-lifecycle.md`);
    /// `--set KNOB=VALUE` overrides these. Unknown knobs are errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "knobs_schema")]
    pub knobs: Option<toml::Table>,
    /// Random and scripted faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultSection>,
    /// Expectations for `kvsim check`: one entry per (profile, knob settings) to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<crate::expect::Expectation>,
}

/// The schema of `[knobs]`: every knob of `config::Knobs`, each optional.
fn knobs_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut s = Knobs::json_schema(g);
    s.remove("required");
    s.insert("description".into(), "Knob overrides over the profile; every knob optional.".into());
    s
}

/// `count` identical nodes of one role.
#[derive(Serialize, Deserialize, Debug, Clone, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// How many nodes of this shape. Default 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub count: Option<u16>,
    /// The node's KV pool in tokens: sglang `--max-total-tokens` (the "KV Cache is allocated.
    /// #tokens" line), vLLM `--num-gpu-blocks-override` × block size. A multiple of `page_size`;
    /// at most 2^31 − 2 pages. Required.
    #[schemars(range(min = 1, max = MAX_TOKENS))]
    pub pool_tokens: u64,
    /// Metadata buffer slots (sglang's disaggregation metadata rows; one per request in flight).
    /// Default 1,024; at most 2^20 per node and 2^24 over all nodes of a role.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SLOTS_PER_NODE))]
    pub metadata_slots: Option<u32>,
    /// Requests decoding (or in transfer) at once (sglang `--max-running-requests`). Default 256.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SLOTS_PER_NODE))]
    pub max_running_requests: Option<u32>,
    /// Pipeline-parallel stages of a prefill instance (sglang `--pp-size`): each stage writes its
    /// own metadata row and keeps its own bootstrap queue (knobs `pp_metadata_writer`,
    /// `pp_bootstrap_consensus`). Default 1; at most 8; `[[prefill]]` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub pp_stages: Option<u16>,
}

/// The router.
#[derive(Serialize, Deserialize, Debug, Clone, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouterSection {
    /// Pair selection: `round_robin`, `random` (seeded) or `least_loaded`.
    pub policy: RouterPolicy,
}

/// The cost model. Defaults are a large model on H200-class hardware with RDMA transfers.
#[derive(Serialize, Deserialize, Debug, Clone, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CostSection {
    /// Fixed cost of a prefill forward pass, µs. Default 5,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub prefill_base_us: Option<u64>,
    /// Prefill cost per prompt token, ns. Default 30,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_NS_PER_UNIT))]
    pub prefill_ns_per_token: Option<u64>,
    /// Extra prefill cost per token per 1,000 tokens of context (attention's quadratic part), ns.
    /// Default 20. A chunk of `c` tokens starting after `f` tokens costs `c × ⌊(f + c/2) / 1000⌋`
    /// times this: the context its tokens see on average (half the chunk's own), in whole
    /// thousands (so a one-chunk prompt of 2,000 tokens is charged 2,000 × 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_NS_PER_UNIT))]
    pub prefill_ns_per_token_per_kctx: Option<u64>,
    /// Fixed cost of a decode step over the running batch, µs. Default 25,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub decode_step_base_us: Option<u64>,
    /// Decode step cost per 1,000 KV tokens attended over the batch, ns. Default 2,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_NS_PER_UNIT))]
    pub decode_ns_per_kkv: Option<u64>,
    /// Bytes of KV cache per token (all layers, K and V), for transfer times. Default 70,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_BYTES))]
    pub kv_bytes_per_token: Option<u64>,
    /// Fixed latency of one transfer batch, µs. Default 500.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub transfer_latency_us: Option<u64>,
    /// Transfer bandwidth, bytes per µs (25,000 = 25 GB/s, the default). At least 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_BYTES))]
    pub transfer_bytes_per_us: Option<u64>,
    /// Latency of a control message (router ↔ nodes, status, heartbeats), µs. Default 200.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub message_latency_us: Option<u64>,
}

/// The synthetic workload: Poisson arrivals from `start_ms`, lengths drawn from weighted buckets,
/// tenants drawn uniformly.
#[derive(Serialize, Deserialize, Debug, Clone, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    /// How many requests to generate (with explicit and trace requests: at most 10,000,000).
    #[schemars(range(max = MAX_REQUESTS))]
    pub requests: u32,
    /// How many tenants the requests are spread over (at least 1).
    #[schemars(range(min = 1, max = u32::MAX))]
    pub tenants: u32,
    /// Mean time between arrivals, ms; `mean_interarrival_us` for finer values (give exactly one).
    /// `requests` × mean must fit in the time bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub mean_interarrival_ms: Option<u64>,
    /// Mean time between arrivals, µs (instead of `mean_interarrival_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub mean_interarrival_us: Option<u64>,
    /// Prompt lengths: weighted buckets, each uniform in `min..=max` tokens.
    pub prompt_tokens: Vec<Bucket>,
    /// Output lengths: weighted buckets, each uniform in `min..=max` tokens.
    pub output_tokens: Vec<Bucket>,
    /// Probability that a client aborts its request, as an integer ratio `"N/D"` (e.g. `"1/20"`).
    /// Default `"0/1"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\s*\d+\s*(/\s*\d+\s*)?$"))]
    pub client_abort: Option<String>,
    /// An aborting client aborts uniformly within this many ms after arrival. Default 60,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub abort_within_ms: Option<u64>,
    /// Virtual time of the first arrival's process start, ms. Default 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub start_ms: Option<u64>,
}

/// One explicit request.
#[derive(Serialize, Deserialize, Debug, Clone, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestEntry {
    /// Arrival, ms (give exactly one of `at_ms` and `at_ns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub at_ms: Option<u64>,
    /// Arrival, ns (exact times, as `kvsim shrink` and the fuzzer write them).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_NS))]
    pub at_ns: Option<u64>,
    /// The tenant, 0 to 4,294,967,295 (tenants are compared, never interpreted).
    #[schemars(range(max = u32::MAX))]
    pub tenant: u32,
    /// Prompt length in tokens, as tokenized (at least 1).
    #[schemars(range(min = 1, max = MAX_TOKENS))]
    pub prompt_tokens: u64,
    /// Tokens to generate (at least 1).
    #[schemars(range(min = 1, max = MAX_TOKENS))]
    pub output_tokens: u64,
    /// The client aborts at this time, ms (at most one of `abort_at_ms` and `abort_at_ns`; not
    /// before arrival).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub abort_at_ms: Option<u64>,
    /// The client aborts at this time, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_NS))]
    pub abort_at_ns: Option<u64>,
    /// The prompt as 512-token block hashes: equal ids at the same position (after equal
    /// predecessors) are a shared prefix the prefill radix cache can hit. Optional.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefix_blocks: Vec<u64>,
    /// The client asked for a streamed response (`stream: true`). Only the router reads it: SMG
    /// (`router_on_prefill_error = "cancel_decode_when_streaming"`) cancels the decode leg of a
    /// streaming request when prefill fails, so the client gets prefill's 400 at once; a
    /// non-streaming request waits for decode's answer. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streaming: bool,
    /// How many leading `prefix_blocks` the client marks public (0 to their count; default 0):
    /// under `prefix_cache_scope = public_only` only these are shared across tenants (a shared
    /// system prompt), the rest is salted per tenant. Under any scope, another tenant's hit on
    /// them is not `cross_tenant_prefix_hit` (they are not this client's secret); a hit on an
    /// undeclared block is, whoever else sent it. Requests read from a `[trace]` of three or more
    /// tenants get the leading blocks every tenant of the trace sends (Mooncake's system-prompt
    /// block 0); with two tenants nothing (a block both send is what a probe looks like).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub public_blocks: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// A production request trace. Its times are measured from its first request's timestamp (the
/// origin: a CSV of absolute epoch seconds works as one from zero): a kept request arrives at its
/// offset from the window's start (the origin plus `window_start_ms`), times
/// `time_scale_permille` / 1000, at most `MAX_TIME_NS`.
#[derive(Serialize, Deserialize, Debug, Clone, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceSection {
    /// Path of the trace, relative to the scenario file. Required.
    pub file: String,
    /// `mooncake` (JSON Lines: `timestamp`, `input_length`, `output_length`, `hash_ids`) or `csv`
    /// (`arrived_at` seconds, `num_prefill_tokens`, `num_decode_tokens`, optional tenant column).
    /// Default: from the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(mooncake|csv)$"))]
    pub format: Option<String>,
    /// Time scale in ‰: 1000 = as recorded, 500 = twice as fast. Default 1000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub time_scale_permille: Option<u64>,
    /// Skip arrivals before this long after the trace's first request, ms (not an absolute time
    /// of the file: a CSV whose first row is at 5.0 s keeps a row at 6.5 s with 1000, not with
    /// 6000). Default 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_start_ms: Option<u64>,
    /// Keep only arrivals within this long a window, ms. Default: to the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
    /// Keep at most this many requests. Default: all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Tenant assignment: `conversation` (default: requests sharing a first block are one tenant),
    /// `round_robin:N` or `column:NAME` (CSV).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(conversation|round_robin:[1-9][0-9]*|column:.+)$"))]
    pub tenants: Option<String>,
}

/// Random faults (integer probabilities `"N/D"` with `D` ≥ 1 and `N` ≤ `D`, or `"0"` and `"1"`, drawn per transfer
/// batch or per arrival) and a script of exact ones. Random faults stop at `heal_at_ms`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    /// Probability that a transfer batch fails. Default `"0/1"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\s*\d+\s*(/\s*\d+\s*)?$"))]
    pub transfer_fail: Option<String>,
    /// Probability that a transfer batch is delayed by `delay_spike_ms`. Default `"0/1"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\s*\d+\s*(/\s*\d+\s*)?$"))]
    pub delay_spike: Option<String>,
    /// Length of a delay spike, ms. Default 90,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub delay_spike_ms: Option<u64>,
    /// Probability that a completed write becomes visible `visibility_lag_ms` late (a hardware
    /// question: RDMA completion before visibility). Default `"0/1"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\s*\d+\s*(/\s*\d+\s*)?$"))]
    pub visibility_lag: Option<String>,
    /// How late a lagged write becomes visible, ms. Default 5.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub visibility_lag_ms: Option<u64>,
    /// Probability, drawn at each request's arrival until the faults heal, that one node (any
    /// prefill or decode node, drawn uniformly) crashes then; a crash of a node that is down does
    /// nothing. So the expected number of crashes grows with the number of requests: `"1/100"`
    /// over 1,000 arrivals crashes about 10 times. Default `"0/1"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\s*\d+\s*(/\s*\d+\s*)?$"))]
    pub node_crash: Option<String>,
    /// How long a crashed node stays down, ms. Default 30,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub crash_restart_ms: Option<u64>,
    /// Random faults stop at this time, ms. Default: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub heal_at_ms: Option<u64>,
    /// Liveness mode: after the faults heal (`heal_at_ms` with random faults, else the end of the
    /// last scripted crash), every request must reach a final status within this many ms of the
    /// heal, its arrival or its own last progress (a phase change, a token, its KV moving, its
    /// queue moving), whichever is last, else the run stops with a `request_hang` naming what the
    /// request waits for and, when known, why (`after_heal/<what>[/<why>]`); a quiescent run stops
    /// early. Default: off. Same as `kvsim run --liveness`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TIME_MS))]
    pub liveness_after_heal_ms: Option<u64>,
    /// Exact faults, one table each (`[[faults.script]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub script: Vec<ScriptEntry>,
}

/// What a scripted fault does.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScriptKind {
    /// Node `node` crashes at `at_ms` and restarts `restart_after_ms` later (its pool comes back
    /// empty, its requests fail).
    Crash,
    /// Every transfer batch of `request` fails (with `batch`, only that one).
    TransferFail,
    /// `request`'s transfer takes `delay_ms` longer, once: its first transfer batch takes that
    /// much longer (failing if it outlives `transfer_sync_timeout_ms`) and the batches behind it
    /// move with it; several delays of one request add up. With `batch`, that batch is delayed
    /// instead of the first.
    Delay,
    /// `request`'s KV writes become visible `lag_ms` after they complete (with `batch`, only
    /// that batch's).
    VisibilityLag,
    /// `request`'s metadata row becomes visible `lag_ms` after its status message.
    MetadataLag,
}

impl ScriptKind {
    pub const ALL: [ScriptKind; 5] = [
        ScriptKind::Crash,
        ScriptKind::TransferFail,
        ScriptKind::Delay,
        ScriptKind::VisibilityLag,
        ScriptKind::MetadataLag,
    ];

    /// The kind's name, its required fields and its optional ones: what the parser checks an
    /// entry against (`Scenario::script`) and what the schema's per-kind rules say
    /// (`scenario_doc::schema_json`), from this one table.
    pub fn fields(self) -> (&'static str, &'static [&'static str], &'static [&'static str]) {
        match self {
            ScriptKind::Crash => ("crash", &["node", "at_ms", "restart_after_ms"], &[]),
            ScriptKind::TransferFail => ("transfer_fail", &["request"], &["batch"]),
            ScriptKind::Delay => ("delay", &["request", "delay_ms"], &["batch"]),
            ScriptKind::VisibilityLag => ("visibility_lag", &["request", "lag_ms"], &["batch"]),
            ScriptKind::MetadataLag => ("metadata_lag", &["request", "lag_ms"], &[]),
        }
    }
}

/// Every field of a `[[faults.script]]` entry but `kind`.
pub const SCRIPT_FIELDS: [&str; 7] = ["node", "at_ms", "restart_after_ms", "request", "batch", "delay_ms", "lag_ms"];

/// One `[[faults.script]]` entry as written: a flat table, so that a bad or missing field is
/// reported at its own line and key (an internally tagged enum would lose the field's position).
#[derive(Serialize, Deserialize, Debug, Clone, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptEntry {
    /// What happens; decides which of the other fields are required.
    pub kind: ScriptKind,
    /// `crash`: the node, `prefill-I` or `decode-I` (0-based over all groups of the role).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(prefill|decode)-[0-9]+$"))]
    pub node: Option<String>,
    /// `crash`: when, ms. A scripted crash is work of the run: the run goes on to it even when
    /// every request has its response by then (the report says so in a `note:` line), unless it
    /// is past the run's horizon (the last arrival plus `liveness_bound_s`) or the run stops
    /// earlier (a liveness stop, the event limit): then it never happens, and a `note:` line says
    /// that instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub at_ms: Option<u64>,
    /// `crash`: how long the node stays down, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub restart_after_ms: Option<u64>,
    /// `transfer_fail`, `delay`, `visibility_lag`, `metadata_lag`: the request (0-based, arrival
    /// order).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = u32::MAX))]
    pub request: Option<u32>,
    /// `transfer_fail`, `delay`, `visibility_lag`, optional: only the request's `batch`-th
    /// transfer batch (0-based, in the order its batches are scheduled, retries included) is hit,
    /// not every batch (a failure or a lag) or the first (a delay). What the shrinker writes for a
    /// random fault that fired on one batch when the case needs that batch. An entry that never
    /// applies (a batch its request never schedules, a request that never transfers) changes
    /// nothing, and the run's report says so in a `note:` line.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = u32::MAX))]
    pub batch: Option<u32>,
    /// `delay`: extra transfer time, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub delay_ms: Option<u64>,
    /// `visibility_lag`, `metadata_lag`: how late the write becomes visible, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TIME_MS))]
    pub lag_ms: Option<u64>,
}

impl ScriptEntry {
    /// The entry a resolved fault is written as.
    pub fn of(f: &ScriptedFault) -> ScriptEntry {
        let mut e = ScriptEntry {
            kind: ScriptKind::Crash,
            node: None,
            at_ms: None,
            restart_after_ms: None,
            request: None,
            batch: f.batch(),
            delay_ms: None,
            lag_ms: None,
        };
        // A one-batch fault is written as its whole-request kind with its `batch`.
        match f {
            ScriptedFault::Crash { at_ms, node, restart_after_ms } => {
                e.node = Some(node.clone());
                e.at_ms = Some(*at_ms);
                e.restart_after_ms = Some(*restart_after_ms);
            }
            ScriptedFault::TransferFail { request } | ScriptedFault::TransferFailAt { request, .. } => {
                e.kind = ScriptKind::TransferFail;
                e.request = Some(*request);
            }
            ScriptedFault::Delay { request, delay_ms } | ScriptedFault::DelayAt { request, delay_ms, .. } => {
                e.kind = ScriptKind::Delay;
                e.request = Some(*request);
                e.delay_ms = Some(*delay_ms);
            }
            ScriptedFault::VisibilityLag { request, lag_ms }
            | ScriptedFault::VisibilityLagAt { request, lag_ms, .. } => {
                e.kind = ScriptKind::VisibilityLag;
                e.request = Some(*request);
                e.lag_ms = Some(*lag_ms);
            }
            ScriptedFault::MetadataLag { request, lag_ms } => {
                e.kind = ScriptKind::MetadataLag;
                e.request = Some(*request);
                e.lag_ms = Some(*lag_ms);
            }
        }
        e
    }
}

/// The longest virtual time a scenario may name (about 146 years, and the default `heal_at_ms`):
/// every time value (`*_ms`, `*_ns`, `*_us`) is checked against it so that conversions to
/// nanoseconds and the timers added to it never overflow.
pub const MAX_TIME_MS: u64 = u64::MAX / 4_000_000;
/// [`MAX_TIME_MS`] in nanoseconds (for `at_ns`, `abort_at_ns`).
pub const MAX_TIME_NS: u64 = MAX_TIME_MS * 1_000_000;
/// The largest token count anywhere (context, prompts, outputs, pools, knobs counted in tokens):
/// 2^40, about 10^12, so that token × cost products stay far inside 64 bits.
pub const MAX_TOKENS: u64 = 1 << 40;
/// Nodes per role, over all groups.
pub const MAX_NODES: usize = 1024;
/// Metadata slots and running requests per node (both are allocated per node at start-up).
pub const MAX_SLOTS_PER_NODE: u32 = 1 << 20;
/// A node group's `max_running_requests` when the file leaves it out.
pub const DEFAULT_MAX_RUNNING_REQUESTS: u32 = 256;
/// Metadata slots over all nodes of a role (bounds the start-up allocation).
pub const MAX_SLOTS_TOTAL: u64 = 1 << 24;
/// Requests in one scenario (generated plus explicit plus trace).
pub const MAX_REQUESTS: u64 = 10_000_000;
/// A per-token or per-1000-KV-tokens cost (`*_ns_per_*`): at most 1,000 s.
pub const MAX_NS_PER_UNIT: u64 = 1_000_000_000_000;
/// Bytes of KV per token, and the transfer bandwidth in bytes per µs.
pub const MAX_BYTES: u64 = 1 << 40;

/// Reads a file named by a scenario (the library itself never touches files): the binary passes
/// `std::fs::read_to_string`; an error is reported as `<path>: cannot read: <error>` at `[trace]`.
pub type FileReader<'a> = &'a dyn Fn(&str) -> std::io::Result<String>;

/// Where the knob values came from, for error messages.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub profile: Option<String>,
    pub seed: Option<u64>,
    /// `--set KNOB=VALUE` pairs, in order.
    pub set: Vec<(String, String)>,
}

/// Where a knob's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KnobOrigin {
    /// The scenario's `[knobs]` table. Its line is found only when an error names it
    /// (`KnobOrigins::err`): `locate` parses the whole file again, and a saved campaign scenario
    /// sets every knob, so locating each one up front cost a parse per knob per load.
    File,
    /// A `--set KNOB=VALUE` flag.
    Set,
}

/// The origin of every knob that is not the profile's value.
struct KnobOrigins<'s> {
    file: &'s str,
    /// The scenario's text, to locate a `File` knob's line when an error names it.
    text: &'s str,
    profile: String,
    from: BTreeMap<String, KnobOrigin>,
}

impl KnobOrigins<'_> {
    /// An error about knob `k`, placed where its value came from: the scenario line, `--set`, or
    /// the profile (a profile's own values are always valid, so that last case names it plainly).
    fn err(&self, k: &str, message: &str) -> ScenarioError {
        let (file, line) = match self.from.get(k) {
            Some(KnobOrigin::File) => (self.file.to_string(), locate(self.text, "knobs", 0, k)),
            Some(KnobOrigin::Set) => ("--set".to_string(), None),
            None => (format!("{} (profile {})", self.file, self.profile), None),
        };
        ScenarioError { file, line, key: format!("knobs.{k}"), message: message.to_string() }
    }

    /// Whether knob `k` was given (by the scenario or `--set`), not left at the profile's value.
    fn given(&self, k: &str) -> bool {
        self.from.contains_key(k)
    }
}

fn unknown_knob(k: &str) -> String {
    let names = config::knob_names();
    let hint =
        did_you_mean(k, names.iter().map(String::as_str)).map(|m| format!(": did you mean `{m}`?")).unwrap_or_default();
    format!("unknown knob `{k}`{hint} (known: {})", names.join(", "))
}

/// The value of one `--set KNOB=VALUE` pair, parsed as TOML (a bare word is a string), with an
/// unknown knob refused by name with a did-you-mean. `knobs` is the table it will go into (every
/// knob name is a key of it). Shared by `kvsim run --set` ([`Scenario::resolve`]) and the
/// campaign's pins ([`KnobPins`]), so both accept and refuse the same things.
fn set_value(k: &str, v: &str, knobs: &toml::Table) -> Result<toml::Value, ScenarioError> {
    if !knobs.contains_key(k) {
        return Err(ScenarioError { file: "--set".into(), line: None, key: k.to_string(), message: unknown_knob(k) });
    }
    match toml::from_str::<toml::Table>(&format!("v = {v}")).ok().and_then(|mut t| t.remove("v")) {
        Some(value) => Ok(value),
        // An integer TOML cannot hold (above i64's range) read as a string, and was refused as
        // a wrong type ("invalid type: string, expected u64").
        None if integer_literal(v) => {
            Err(ScenarioError { file: "--set".into(), line: None, key: format!("knobs.{k}"), message: past_64_bits(v) })
        }
        None => Ok(toml::Value::String(v.to_string())),
    }
}

/// Whether `v` is written as a decimal integer (a sign, digits, `_` between them).
fn integer_literal(v: &str) -> bool {
    let digits = v.trim().trim_start_matches(['+', '-']);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_') && !digits.starts_with('_')
}

/// Why a `[knobs]` entry or a `--set` pin is refused, for callers that match on it. Each keeps
/// the deserialiser's message (it lists what is allowed) and prints as that message with the
/// did-you-mean `with_suggestion` adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KnobFault {
    /// No knob of that name ("unknown field `x`, expected one of ..."); the closest name, if any.
    UnknownKnob { message: String, suggestion: Option<String> },
    /// Not one of the knob's values ("unknown variant `x`, expected one of ..."); the closest
    /// value, if any.
    UnknownValue { message: String, suggestion: Option<String> },
    /// Any other value the knob does not take (a wrong type, a number out of its type's range).
    BadValue { message: String },
}

impl KnobFault {
    /// Sorts the deserialiser's `message` into its kind and finds the suggestion.
    fn from_message(message: &str) -> KnobFault {
        let suggestion = |what: &str| {
            let rest = message.strip_prefix(what)?;
            let (word, tail) = rest.split_once('`')?;
            let allowed: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
            did_you_mean(word, allowed.iter().copied()).map(str::to_string)
        };
        let message = beyond_64_bits(message).unwrap_or_else(|| message.to_string());
        if message.starts_with(UNKNOWN_FIELD) {
            KnobFault::UnknownKnob { suggestion: suggestion(UNKNOWN_FIELD), message }
        } else if message.starts_with(UNKNOWN_VARIANT) {
            KnobFault::UnknownValue { suggestion: suggestion(UNKNOWN_VARIANT), message }
        } else {
            KnobFault::BadValue { message }
        }
    }
}

impl std::fmt::Display for KnobFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KnobFault::UnknownKnob { message, suggestion } | KnobFault::UnknownValue { message, suggestion } => {
                f.write_str(message)?;
                match suggestion {
                    Some(m) => write!(f, " (did you mean `{m}`?)"),
                    None => Ok(()),
                }
            }
            KnobFault::BadValue { message } => f.write_str(message),
        }
    }
}

const UNKNOWN_FIELD: &str = "unknown field `";
const UNKNOWN_VARIANT: &str = "unknown variant `";

/// Whether `v` is a valid value of knob `k`: `filler` with that one knob replaced must
/// deserialise (why not, otherwise).
fn check_knob(filler: &Knobs, k: &str, v: &toml::Value) -> Result<(), KnobFault> {
    let mut one = toml::Table::try_from(filler).expect("knobs serialise");
    // A knob whose values are words, given another type (`kv_canary = true`): the deserialiser
    // said "invalid type: unit variant, expected string only", naming neither the value nor the
    // words. Its words are what a word it does not know lists.
    let worded = one.get(k).is_some_and(toml::Value::is_str);
    one.insert(k.to_string(), v.clone());
    let fault = match Knobs::deserialize(one) {
        Ok(_) => return Ok(()),
        Err(e) => KnobFault::from_message(e.message().trim()),
    };
    match fault {
        KnobFault::BadValue { .. } if worded && !v.is_str() => {
            let probe = toml::Value::String("\u{1}".into());
            match check_knob(filler, k, &probe) {
                Err(KnobFault::UnknownValue { message, .. }) => {
                    let words = message.split_once("expected ").map_or(message.as_str(), |(_, w)| w);
                    Err(KnobFault::BadValue {
                        message: format!(
                            "`{v}` is {} {}, not one of the knob's words: expected {words}",
                            if v.type_str().starts_with(['a', 'i']) { "an" } else { "a" },
                            v.type_str()
                        ),
                    })
                }
                _ => Err(fault),
            }
        }
        fault => Err(fault),
    }
}

/// Splits `--set KNOB=VALUE` flags into pairs (a flag without `=` is an error naming it). A knob
/// given twice takes its last value, as a later flag overrides an earlier one (a script appends
/// its override to a base command); [`set_twice`] says so.
pub fn parse_set_flags(flags: &[String]) -> Result<Vec<(String, String)>, ScenarioError> {
    flags
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => Err(ScenarioError {
                file: "--set".into(),
                line: None,
                key: s.clone(),
                message: "expected KNOB=VALUE".into(),
            }),
        })
        .collect()
}

/// A note for each knob `--set` gives more than once: which value won (it won without a word).
pub fn set_twice(flags: &[String]) -> Vec<String> {
    let pairs = parse_set_flags(flags).unwrap_or_default();
    let mut out = Vec::new();
    for (i, (k, _)) in pairs.iter().enumerate() {
        let values: Vec<&str> = pairs.iter().filter(|(x, _)| x == k).map(|(_, v)| v.as_str()).collect();
        if values.len() > 1 && pairs[..i].iter().all(|(x, _)| x != k) {
            out.push(format!(
                "--set gives knob `{k}` {} times ({}): the last, `{}`, is used",
                values.len(),
                values.join(", "),
                values[values.len() - 1]
            ));
        }
    }
    out
}

/// Knobs pinned on every configuration a campaign draws (`kvsim fuzz --set KNOB=VALUE`), checked
/// once, up front, by the same code as `kvsim run --set` (unknown knob: did-you-mean; bad value:
/// the knob named), so that a pin that would be refused by `run` is refused by `fuzz` too, and a
/// saved case (which carries its knobs) reproduces with a plain `kvsim run`. Later pins of the same
/// knob win, as with `run`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnobPins {
    /// Knob name to value, one per knob (the last given).
    values: BTreeMap<String, toml::Value>,
}

impl KnobPins {
    /// Parses and checks `--set` flags against the knob set (the checks do not depend on which
    /// profile fills the other knobs: each knob deserialises on its own).
    pub fn parse(flags: &[String]) -> Result<KnobPins, ScenarioError> {
        let filler = (config::profile("sglang-0.5.16").expect("a shipped profile").knobs)();
        let table = toml::Table::try_from(&filler).expect("knobs serialise");
        let mut values = BTreeMap::new();
        for (k, v) in parse_set_flags(flags)? {
            let value = set_value(&k, &v, &table)?;
            check_knob(&filler, &k, &value).map_err(|fault| ScenarioError {
                file: "--set".into(),
                line: None,
                key: format!("knobs.{k}"),
                message: fault.to_string(),
            })?;
            values.insert(k, value);
        }
        Ok(KnobPins { values })
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The pinned knob names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// `knobs` with the pins applied.
    pub fn apply(&self, knobs: &Knobs) -> Knobs {
        if self.values.is_empty() {
            return knobs.clone();
        }
        let mut t = toml::Table::try_from(knobs).expect("knobs serialise");
        for (k, v) in &self.values {
            t.insert(k.clone(), v.clone());
        }
        Knobs::deserialize(t).expect("each pin was checked on its own, and knobs are independent")
    }

    /// The pins as `k=v,k2=v2` (sorted by knob; TOML values, strings unquoted): part of a
    /// campaign's space name, so a pinned campaign's table is never mixed with another's.
    pub fn label(&self) -> String {
        let show = |v: &toml::Value| match v {
            toml::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        self.values.iter().map(|(k, v)| format!("{k}={}", show(v))).collect::<Vec<_>>().join(",")
    }
}

/// The closest of `candidates` to a misspelt `word`, when it is close enough to be the intended
/// one (edit distance at most a third of the word, at least 1; or the same word in another case
/// or with `-` for `_`).
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let budget = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (if norm(c) == norm(word) { 0 } else { strsim::damerau_levenshtein(word, c) }, c))
        .filter(|(d, _)| *d <= budget)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

/// Adds "did you mean" to serde's unknown-field and unknown-variant messages ("unknown field
/// `x`, expected one of `a`, `b`"), which already list what is allowed.
pub fn with_suggestion(message: &str) -> String {
    if let Some(m) = beyond_64_bits(message) {
        return m;
    }
    for what in [UNKNOWN_FIELD, UNKNOWN_VARIANT] {
        let Some(rest) = message.strip_prefix(what) else { continue };
        let Some((word, tail)) = rest.split_once('`') else { continue };
        let allowed: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
        if let Some(m) = did_you_mean(word, allowed.iter().copied()) {
            return format!("{message} (did you mean `{m}`?)");
        }
    }
    message.to_string()
}

/// The deserialiser's message for an integer literal beyond 64 bits ("invalid type: integer `X`
/// as i128, expected u64"), said as the range error it is (it read as a wrong type).
fn beyond_64_bits(message: &str) -> Option<String> {
    let rest = message.strip_prefix("invalid type: integer `")?;
    let (value, want) = rest.split_once("` as i128, expected ")?;
    if !matches!(want.trim(), "u64" | "u32" | "u16" | "u8" | "i64") {
        return None;
    }
    Some(past_64_bits(value))
}

/// The message for a number no 64-bit integer holds. It names no bound: the field's own limit
/// (far lower: 2^40 tokens, a pool's page count, …) is checked once the number is read, and the
/// type's (2^64 − 1 in a file, 2^63 − 1 in `--set`) is not one a user can write to, so quoting
/// it gave one key three different "at most" values as the input grew.
fn past_64_bits(value: &str) -> String {
    format!("{value} is out of range: larger than any limit (each field's is in docs/scenario-format.md)")
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

/// The line of `key` in table `table` (a dotted path, `""` = top level; `nth` picks the element
/// when the last segment is an array of tables, `[[faults.script]]`), from the spans of the `toml`
/// crate's own parse (the parser that read the file: it keeps integers as text, so a value out of
/// range is still found); the table's header line when the key is absent, `None` when the table is.
pub fn locate(text: &str, table: &str, nth: usize, key: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    fn find<'i>(t: &DeTable<'i>, name: &str) -> Option<(std::ops::Range<usize>, toml::Spanned<DeValue<'i>>)> {
        t.iter().find(|(k, _)| k.get_ref().as_ref() == name).map(|(k, v)| (k.span(), v.clone()))
    }
    let mut t: DeTable = doc.into_inner();
    let mut header = None;
    for seg in table.split('.').filter(|s| !s.is_empty()) {
        let (kspan, v) = find(&t, seg)?;
        header = Some(line_of(text, kspan.start));
        t = match v.into_inner() {
            DeValue::Table(x) => x,
            DeValue::Array(a) => {
                let e = a.into_iter().nth(nth)?;
                header = Some(line_of(text, e.span().start));
                match e.into_inner() {
                    DeValue::Table(x) => x,
                    _ => return None,
                }
            }
            _ => return None,
        };
    }
    if key.is_empty() {
        return header;
    }
    find(&t, key).map(|(k, _)| line_of(text, k.start)).or(header)
}

/// The tables of a scenario that are arrays of tables (`[[request]]`): an error in one names the
/// element's index (`request[1].at_ms`). `faults.script` and `expect` name theirs in their own
/// checks.
const ARRAY_TABLES: [&str; 3] = ["prefill", "decode", "request"];

/// The dotted key (`knobs.page_size`; an array of tables' element with its index,
/// `request[1].tenant`) of the entry at byte `at`, for naming where a parse error is: the deepest key whose entry (key to the
/// end of its value) or whose line (a value that did not parse, a table's header) holds `at`. Read from the spans of the `toml` crate's own parse, recovering past a
/// syntax error so that its key is named too; empty when `at` is in no entry (a blank line).
pub fn key_at(text: &str, at: usize) -> String {
    use toml::de::{DeTable, DeValue};
    /// Whether the entry (its key to the end of its value) holds `at`; with `same_line`, also
    /// whether it starts on `at`'s line (a value that did not parse, a table's header).
    fn holds(
        text: &str,
        k: &toml::Spanned<std::borrow::Cow<'_, str>>,
        v: &toml::Spanned<DeValue<'_>>,
        at: usize,
        same_line: bool,
    ) -> bool {
        let (from, to) = (k.span().start, v.span().end.max(k.span().end));
        (from <= at && at < to) || (same_line && line_of(text, from) == line_of(text, at))
    }
    /// The tables a value holds: itself (no index), or an array's table elements with their
    /// index and span.
    fn tables<'a, 'i>(v: &'a DeValue<'i>) -> Vec<(Option<usize>, std::ops::Range<usize>, &'a DeTable<'i>)> {
        match v {
            DeValue::Table(t) => vec![(None, 0..0, t)],
            DeValue::Array(a) => a
                .iter()
                .enumerate()
                .filter_map(|(i, e)| match e.get_ref() {
                    DeValue::Table(t) => Some((Some(i), e.span(), t)),
                    _ => None,
                })
                .collect(),
            _ => vec![],
        }
    }
    /// `name`, with the index of the array element when there is one (`request[1]`).
    fn named(name: &str, i: Option<usize>) -> String {
        i.map_or_else(|| name.to_string(), |i| format!("{name}[{i}]"))
    }
    fn find(text: &str, t: &DeTable<'_>, at: usize) -> Option<Vec<String>> {
        for (k, v) in t.iter() {
            let name = k.get_ref();
            let subs = tables(v.get_ref());
            // An element whose span holds `at` first: an inline array's elements share a line,
            // and the line alone named the first element (`[{…}, {min = -16}]` reported as
            // element 0's last key). A `[[request]]` element's span is its header: an error
            // there (a missing field) names the element.
            if let Some((i, _, sub)) = subs.iter().find(|(i, span, _)| i.is_some() && span.contains(&at)) {
                let mut inner = find(text, sub, at).unwrap_or_default();
                inner.insert(0, named(name, *i));
                return Some(inner);
            }
            if let Some((i, mut inner)) = subs.iter().find_map(|(i, _, sub)| Some((*i, find(text, sub, at)?))) {
                inner.insert(0, named(name, i));
                return Some(inner);
            }
        }
        // The entry that holds `at` itself first: an inline table's entries share one line, and
        // the line alone named its last key (`min = -16` reported as `weight`).
        t.iter()
            .find(|(k, v)| holds(text, k, v, at, false))
            .or_else(|| t.iter().rfind(|(k, v)| holds(text, k, v, at, true)))
            .map(|(k, _)| vec![k.get_ref().to_string()])
    }
    let (doc, _) = DeTable::parse_recoverable(text);
    let found = find(text, doc.get_ref(), at).unwrap_or_default().join(".");
    if !found.is_empty() {
        return found;
    }
    // An entry the recovering parse dropped (a duplicate key): the bare key written at `at`.
    let bare: String = text
        .get(at..)
        .unwrap_or("")
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    bare
}

impl Scenario {
    pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let spec: ScenarioFile = toml::from_str(text).map_err(|e| {
            // Lone carriage returns (classic Mac OS line ends): TOML reads the whole file as one
            // line, and the error named whichever key that line began with.
            if let Some(at) = text.match_indices('\r').map(|(i, _)| i).find(|&i| !text[i + 1..].starts_with('\n')) {
                return ScenarioError {
                    file: file.to_string(),
                    line: Some(line_of(text, at)),
                    key: String::new(),
                    message: "line ends are lone carriage returns (CR, as classic Mac OS wrote them); TOML needs LF or CRLF: convert the file, e.g. `tr '\\r' '\\n' < old.toml > new.toml`".into(),
                };
            }
            let line = e.span().map(|s| line_of(text, s.start));
            let key = e.span().map(|s| key_at(text, s.start)).unwrap_or_default();
            ScenarioError { file: file.to_string(), line, key, message: with_suggestion(e.message().trim()) }
        })?;
        Ok(Scenario { file: file.to_string(), text: text.to_string(), spec })
    }

    fn err(&self, table: &str, nth: usize, key: &str, message: impl Into<String>) -> ScenarioError {
        // An array of tables' element by its index (`request[1].at_ms`), as parse errors,
        // `faults.script[i]` and `expect[i]` name theirs.
        let indexed = if ARRAY_TABLES.contains(&table) { format!("{table}[{nth}]") } else { table.to_string() };
        let shown = match (table, key) {
            ("", k) => k.to_string(),
            (_, "") => table.to_string(),
            (_, k) => format!("{indexed}.{k}"),
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
            Some(s) => Ratio::parse(s).map_err(|m| self.err(table, 0, key, m.to_string())),
        }
    }

    /// Where `--profile` or the scenario's `profile` names an unknown profile.
    fn profile_err(&self, o: &Overrides, profile: &str) -> ScenarioError {
        let message = format!("unknown profile `{profile}`{}", config::unknown_profile_hint(profile));
        match &o.profile {
            Some(_) => ScenarioError { file: "--profile".into(), line: None, key: profile.into(), message },
            None => self.err("", 0, "profile", message),
        }
    }

    /// Resolves knobs: profile, then the scenario's `[knobs]`, then `--set`. Returns where each
    /// knob's value came from, so that a later range check blames the right place.
    fn knobs(&self, o: &Overrides, profile: &str) -> Result<(Knobs, KnobOrigins<'_>), ScenarioError> {
        let p = config::profile(profile).ok_or_else(|| self.profile_err(o, profile))?;
        let mut table = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
        let mut origins =
            KnobOrigins { file: &self.file, text: &self.text, profile: profile.to_string(), from: BTreeMap::new() };
        for (k, v) in self.spec.knobs.clone().unwrap_or_default() {
            if !table.contains_key(&k) {
                return Err(self.err("knobs", 0, &k, unknown_knob(&k)));
            }
            origins.from.insert(k.clone(), KnobOrigin::File);
            table.insert(k, v);
        }
        for (k, v) in &o.set {
            table.insert(k.clone(), set_value(k, v, &table)?);
            origins.from.insert(k.clone(), KnobOrigin::Set);
        }
        // The whole table deserialises once; only when it does not is it checked knob by knob, so
        // that the bad value names its knob and where it came from. (Checking every knob up front
        // serialised and deserialised the whole profile once per knob: 3.4 M instructions, about
        // 1 ms, on every resolve.)
        match Knobs::deserialize(table.clone()) {
            Ok(knobs) => Ok((knobs, origins)),
            Err(whole) => {
                let filler = (p.knobs)();
                for (k, v) in &table {
                    check_knob(&filler, k, v).map_err(|fault| origins.err(k, &fault.to_string()))?;
                }
                // Every knob is valid on its own, so no knob is to blame: say what failed.
                Err(self.err("knobs", 0, "", whole.message().trim().to_string()))
            }
        }
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
        let text = read(&shown).map_err(|e| self.err("trace", 0, "file", format!("{shown}: cannot read: {e}")))?;
        let tr = |e: wt::TraceError| ScenarioError {
            file: e.file.clone(),
            line: (e.line > 0).then_some(e.line),
            key: String::new(),
            message: e.kind.to_string(),
        };
        let format = match t.format.as_deref() {
            None => wt::detect_format(&shown, &text).map_err(tr)?,
            Some("mooncake") => TraceFormat::MooncakeJsonl,
            Some("csv") => TraceFormat::Csv,
            Some(f) => return Err(self.err("trace", 0, "format", format!("`{f}`: expected mooncake or csv"))),
        };
        if t.time_scale_permille == Some(0) {
            // The scenario's key, not the trace file, is at fault.
            return Err(self.err("trace", 0, "time_scale_permille", "must be positive (1000 = as recorded)"));
        }
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
        // The scenario's `tenants` asked for what the trace lacks: named at the key, with the file.
        let tenants = wt::assign_tenants(&reqs, &how, &shown).map_err(|e| {
            let asked = t.tenants.as_deref().unwrap_or("conversation");
            self.err("trace", 0, "tenants", format!("`{asked}`: {}: {}", e.file, e.kind))
        })?;
        let mut specs: Vec<RequestSpec> = reqs
            .into_iter()
            .zip(tenants)
            .map(|(r, tenant)| RequestSpec {
                at_ns: r.arrival_ns,
                tenant,
                prompt_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                abort_at_ns: None,
                prefix_blocks: r.hash_ids,
                streaming: false,
                public_blocks: 0,
            })
            .collect();
        crate::prefix::mark_public(&mut specs);
        Ok(specs)
    }

    /// Checks that `value` lies in `lo..=hi`; the error names the table entry and key.
    #[allow(clippy::too_many_arguments)]
    fn in_range(
        &self,
        table: &str,
        nth: usize,
        key: &str,
        value: u64,
        lo: u64,
        hi: u64,
        unit: &str,
    ) -> Result<u64, ScenarioError> {
        if value < lo || value > hi {
            return Err(self.err(table, nth, key, format!("{value}{unit} is out of range: {lo}..={hi}{unit}")));
        }
        Ok(value)
    }

    /// The knobs' own limits (numbers a profile never violates).
    fn check_knobs(&self, knobs: &Knobs, origins: &KnobOrigins<'_>) -> Result<(), ScenarioError> {
        let ps = knobs.page_size;
        if ps == 0 || ps > 1 << 16 {
            return Err(origins.err("page_size", "page size must be between 1 and 65536"));
        }
        let tokens = [
            ("chunked_prefill_size", knobs.chunked_prefill_size, 1),
            ("reserved_decode_tokens", knobs.reserved_decode_tokens, 0),
            ("tokenizer_reserved_tokens", knobs.tokenizer_reserved_tokens, 0),
            ("max_transfer_batch_pages", knobs.max_transfer_batch_pages, 0),
            ("decode_lookahead_tokens", knobs.decode_lookahead_tokens, 0),
        ];
        for (k, v, lo) in tokens {
            if v < lo || v > MAX_TOKENS {
                return Err(origins.err(k, &format!("{v} is out of range: {lo}..={MAX_TOKENS}")));
            }
        }
        if knobs.heartbeat_failures == 0 || knobs.heartbeat_interval_ms == 0 {
            let k = if knobs.heartbeat_failures == 0 { "heartbeat_failures" } else { "heartbeat_interval_ms" };
            return Err(origins.err(k, "heartbeats need an interval and a failure count of at least 1"));
        }
        let times = [
            ("bootstrap_timeout_ms", knobs.bootstrap_timeout_ms),
            ("waiting_timeout_ms", knobs.waiting_timeout_ms),
            ("heartbeat_interval_ms", knobs.heartbeat_interval_ms),
            ("deferred_release_timeout_ms", knobs.deferred_release_timeout_ms),
            ("source_lease_ms", knobs.source_lease_ms),
            ("transfer_sync_timeout_ms", knobs.transfer_sync_timeout_ms),
        ];
        if let Some((k, _)) = times.iter().find(|(_, v)| *v > MAX_TIME_MS) {
            return Err(origins.err(k, &format!("at most {MAX_TIME_MS} ms")));
        }
        // The time to declare a peer dead is the two together: named as such, on the knob the
        // file or --set gave (the profile's own values are always within it).
        let dead_after = knobs.heartbeat_interval_ms.saturating_mul(knobs.heartbeat_failures);
        if dead_after > MAX_TIME_MS {
            let k = match (origins.given("heartbeat_failures"), origins.given("heartbeat_interval_ms")) {
                (true, false) => "heartbeat_failures",
                _ => "heartbeat_interval_ms",
            };
            return Err(origins.err(
                k,
                &format!(
                    "heartbeat_interval_ms × heartbeat_failures ({} × {}, the time to declare a peer dead) is more than {MAX_TIME_MS} ms",
                    knobs.heartbeat_interval_ms, knobs.heartbeat_failures
                ),
            ));
        }
        Ok(())
    }

    /// The nodes of one role.
    fn nodes(&self, groups: &[NodeGroup], table: &str, ps: u64) -> Result<Vec<NodeConfig>, ScenarioError> {
        if groups.is_empty() {
            // Absent, or given as an empty array (`prefill = []`: named by its line, which the
            // error lacked, there being no element to point at).
            let mut e = self.err(table, 0, "", format!("at least one [[{table}]] group is required"));
            e.line = locate(&self.text, "", 0, table);
            return Err(e);
        }
        let mut out = Vec::new();
        let mut slots_total = 0u64;
        for (i, g) in groups.iter().enumerate() {
            if g.pool_tokens < ps {
                return Err(self.err(
                    table,
                    i,
                    "pool_tokens",
                    format!(
                        "pool of {} token(s) is smaller than one page ({ps} token{})",
                        g.pool_tokens,
                        if ps == 1 { "" } else { "s" }
                    ),
                ));
            }
            if g.pool_tokens % ps != 0 {
                return Err(self.err(table, i, "pool_tokens", format!("{} is not a multiple of page_size {ps} (engines round the pool down at start-up; write the rounded value)", g.pool_tokens)));
            }
            if g.pool_tokens / ps >= u64::from(u32::MAX) / 2 {
                let msg = format!(
                    "pool of {} pages (page_size {ps}) is too large: at most {} pages (2^31 − 2)",
                    g.pool_tokens / ps,
                    u64::from(u32::MAX) / 2 - 1
                );
                return Err(self.err(table, i, "pool_tokens", msg));
            }
            self.in_range(table, i, "pool_tokens", g.pool_tokens, ps, MAX_TOKENS, " tokens")?;
            let count = usize::from(g.count.unwrap_or(1));
            if count == 0 || out.len() + count > MAX_NODES {
                return Err(self.err(
                    table,
                    i,
                    "count",
                    format!("between 1 and {MAX_NODES} {table} nodes in all groups"),
                ));
            }
            let hi = u64::from(MAX_SLOTS_PER_NODE);
            let slots =
                self.in_range(table, i, "metadata_slots", g.metadata_slots.map_or(1024, u64::from), 1, hi, "")?;
            let running = self.in_range(
                table,
                i,
                "max_running_requests",
                g.max_running_requests.map_or(u64::from(DEFAULT_MAX_RUNNING_REQUESTS), u64::from),
                1,
                hi,
                "",
            )?;
            let stages = g.pp_stages.map_or(1, u64::from);
            if table != "prefill" && stages != 1 {
                return Err(self.err(
                    table,
                    i,
                    "pp_stages",
                    "pipeline stages are a [[prefill]] setting (decode has 1)",
                ));
            }
            let stages = self.in_range(table, i, "pp_stages", stages, 1, 8, "")?;
            slots_total += slots * count as u64;
            if slots_total > MAX_SLOTS_TOTAL {
                return Err(self.err(
                    table,
                    i,
                    "metadata_slots",
                    format!("{slots_total} metadata slots over all {table} nodes (limit {MAX_SLOTS_TOTAL})"),
                ));
            }
            for _ in 0..count {
                out.push(NodeConfig {
                    pool_tokens: g.pool_tokens,
                    metadata_slots: slots as u32,
                    max_running_requests: running as u32,
                    pp_stages: stages as u16,
                });
            }
        }
        Ok(out)
    }

    /// The cost model: every value within its named limit, so that µs→ns conversions and
    /// token × cost products never wrap.
    fn cost(&self) -> Result<CostConfig, ScenarioError> {
        let c = self.spec.cost.clone().unwrap_or_default();
        let us = MAX_TIME_MS; // any single cost in µs is at most a thousandth of the time bound
        let get = |key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64, unit: &str| {
            self.in_range("cost", 0, key, v.unwrap_or(default), lo, hi, unit)
        };
        Ok(CostConfig {
            prefill_base_us: get("prefill_base_us", c.prefill_base_us, 5_000, 0, us, " µs")?,
            prefill_ns_per_token: get(
                "prefill_ns_per_token",
                c.prefill_ns_per_token,
                30_000,
                0,
                MAX_NS_PER_UNIT,
                " ns",
            )?,
            prefill_ns_per_token_per_kctx: get(
                "prefill_ns_per_token_per_kctx",
                c.prefill_ns_per_token_per_kctx,
                20,
                0,
                MAX_NS_PER_UNIT,
                " ns",
            )?,
            decode_step_base_us: get("decode_step_base_us", c.decode_step_base_us, 25_000, 0, us, " µs")?,
            decode_ns_per_kkv: get("decode_ns_per_kkv", c.decode_ns_per_kkv, 2_000, 0, MAX_NS_PER_UNIT, " ns")?,
            kv_bytes_per_token: get("kv_bytes_per_token", c.kv_bytes_per_token, 70_000, 0, MAX_BYTES, " B")?,
            transfer_latency_us: get("transfer_latency_us", c.transfer_latency_us, 500, 0, us, " µs")?,
            transfer_bytes_per_us: get(
                "transfer_bytes_per_us",
                c.transfer_bytes_per_us,
                25_000,
                1,
                MAX_BYTES,
                " B/µs",
            )?,
            message_latency_us: get("message_latency_us", c.message_latency_us, 200, 0, us, " µs")?,
        })
    }

    /// The synthetic workload generator.
    fn generator(&self) -> Result<Option<GeneratorConfig>, ScenarioError> {
        let Some(w) = &self.spec.workload else { return Ok(None) };
        let t = "workload";
        if w.tenants == 0 {
            return Err(self.err(t, 0, "tenants", "at least one tenant"));
        }
        self.in_range(t, 0, "requests", u64::from(w.requests), 0, MAX_REQUESTS, "")?;
        for (key, b) in [("prompt_tokens", &w.prompt_tokens), ("output_tokens", &w.output_tokens)] {
            if b.iter().try_fold(0u64, |a, x| a.checked_add(x.weight)).is_none_or(|total| total == 0) {
                return Err(self.err(t, 0, key, "buckets need a positive total weight (that fits in 64 bits)"));
            }
            if let Some(x) = b.iter().find(|x| x.min > x.max || x.min == 0 || x.max > MAX_TOKENS) {
                return Err(self.err(
                    t,
                    0,
                    key,
                    format!("bucket {}..={} is empty, starts at 0 or ends past {MAX_TOKENS}", x.min, x.max),
                ));
            }
        }
        let mean_us = match (w.mean_interarrival_ms, w.mean_interarrival_us) {
            (Some(ms), None) => self.in_range(t, 0, "mean_interarrival_ms", ms, 0, MAX_TIME_MS, " ms")? * 1000,
            (None, Some(us)) => self.in_range(t, 0, "mean_interarrival_us", us, 0, MAX_TIME_MS * 1000, " µs")?,
            _ => {
                return Err(self.err(
                    t,
                    0,
                    "mean_interarrival_ms",
                    "give exactly one of mean_interarrival_ms and mean_interarrival_us",
                ))
            }
        };
        // The whole arrival process must fit in the time bound, or later timers would saturate.
        let span_ms = (mean_us / 1000).saturating_mul(u64::from(w.requests));
        if span_ms > MAX_TIME_MS {
            return Err(self.err(
                t,
                0,
                if w.mean_interarrival_ms.is_some() { "mean_interarrival_ms" } else { "mean_interarrival_us" },
                format!(
                    "{} requests × a mean inter-arrival of {} ms is {} ms, past the time bound of {MAX_TIME_MS} ms",
                    w.requests,
                    mean_us / 1000,
                    // Exact, where the saturated product printed 18446744073709551615.
                    u128::from(mean_us / 1000) * u128::from(w.requests)
                ),
            ));
        }
        Ok(Some(GeneratorConfig {
            requests: w.requests,
            tenants: w.tenants,
            mean_interarrival_us: mean_us,
            prompt_tokens: w.prompt_tokens.clone(),
            output_tokens: w.output_tokens.clone(),
            client_abort: self.ratio(t, "client_abort", &w.client_abort)?,
            abort_within_ms: self.in_range(
                t,
                0,
                "abort_within_ms",
                w.abort_within_ms.unwrap_or(60_000),
                0,
                MAX_TIME_MS,
                " ms",
            )?,
            start_ms: self.in_range(t, 0, "start_ms", w.start_ms.unwrap_or(0), 0, MAX_TIME_MS, " ms")?,
        }))
    }

    /// One time given as `<name>_ms` or `<name>_ns` (at most one; `required` says whether one must be).
    fn time_ns(&self, i: usize, name: &str, ms: Option<u64>, ns: Option<u64>) -> Result<Option<u64>, ScenarioError> {
        let (k_ms, k_ns) = (format!("{name}_ms"), format!("{name}_ns"));
        match (ms, ns) {
            (None, None) => Ok(None),
            (Some(ms), None) => Ok(Some(self.in_range("request", i, &k_ms, ms, 0, MAX_TIME_MS, " ms")? * 1_000_000)),
            (None, Some(ns)) => Ok(Some(self.in_range("request", i, &k_ns, ns, 0, MAX_TIME_NS, " ns")?)),
            (Some(_), Some(_)) => Err(self.err("request", i, &k_ms, format!("give at most one of {k_ms} and {k_ns}"))),
        }
    }

    /// The explicit `[[request]]` entries.
    fn requests(&self) -> Result<Vec<RequestSpec>, ScenarioError> {
        let mut out = Vec::with_capacity(self.spec.request.len());
        for (i, r) in self.spec.request.iter().enumerate() {
            self.in_range("request", i, "prompt_tokens", r.prompt_tokens, 1, MAX_TOKENS, "")?;
            self.in_range("request", i, "output_tokens", r.output_tokens, 1, MAX_TOKENS, "")?;
            let at_ns = self
                .time_ns(i, "at", r.at_ms, r.at_ns)?
                .ok_or_else(|| self.err("request", i, "at_ms", "give exactly one of at_ms and at_ns"))?;
            let abort_at_ns = self.time_ns(i, "abort_at", r.abort_at_ms, r.abort_at_ns)?;
            if abort_at_ns.is_some_and(|a| a < at_ns) {
                let k = if r.abort_at_ms.is_some() { "abort_at_ms" } else { "abort_at_ns" };
                return Err(self.err("request", i, k, "abort before arrival"));
            }
            // A prompt of `prompt_tokens` has ceil(prompt_tokens / 512) blocks, the last maybe
            // partial (Mooncake's `hash_ids`); ids past them would name KV the prompt never has.
            let blocks = r.prompt_tokens.div_ceil(crate::prefix::BLOCK_TOKENS);
            if r.prefix_blocks.len() as u64 > blocks {
                let msg = format!(
                    "{} prefix block(s) but a {}-token prompt has {blocks} block(s) of {} tokens (the last may be partial)",
                    r.prefix_blocks.len(),
                    r.prompt_tokens,
                    crate::prefix::BLOCK_TOKENS
                );
                return Err(self.err("request", i, "prefix_blocks", msg));
            }
            if r.public_blocks as usize > r.prefix_blocks.len() {
                let msg =
                    format!("{} public block(s) but only {} prefix block(s)", r.public_blocks, r.prefix_blocks.len());
                return Err(self.err("request", i, "public_blocks", msg));
            }
            out.push(RequestSpec {
                at_ns,
                tenant: r.tenant,
                prompt_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                abort_at_ns,
                prefix_blocks: r.prefix_blocks.clone(),
                streaming: r.streaming,
                public_blocks: r.public_blocks,
            });
        }
        Ok(out)
    }

    /// An error about field `key` of the `i`-th `[[faults.script]]` entry, at that key's line.
    fn script_err(&self, i: usize, key: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.clone(),
            line: locate(&self.text, "faults.script", i, key),
            key: format!("faults.script[{i}].{key}"),
            message: message.into(),
        }
    }

    /// The scripted faults: each entry's fields checked against its kind and the cluster.
    fn script(
        &self,
        script: &[ScriptEntry],
        prefill: usize,
        decode: usize,
        total: u64,
    ) -> Result<Vec<ScriptedFault>, ScenarioError> {
        let mut out = Vec::with_capacity(script.len());
        for (i, e) in script.iter().enumerate() {
            let present = [
                e.node.is_some(),
                e.at_ms.is_some(),
                e.restart_after_ms.is_some(),
                e.request.is_some(),
                e.batch.is_some(),
                e.delay_ms.is_some(),
                e.lag_ms.is_some(),
            ];
            let fields = SCRIPT_FIELDS.into_iter().zip(present);
            // The fields a kind needs, and those it may have without needing them.
            let (kind, wanted, optional) = e.kind.fields();
            for (k, present) in fields {
                if present && !wanted.contains(&k) && !optional.contains(&k) {
                    let all: Vec<&str> = wanted.iter().chain(optional).copied().collect();
                    return Err(self.script_err(
                        i,
                        k,
                        format!("not a field of a `{kind}` fault (its fields: {})", all.join(", ")),
                    ));
                }
                if !present && wanted.contains(&k) {
                    return Err(self.script_err(i, "kind", format!("a `{kind}` fault needs `{k}`")));
                }
            }
            let time = |k: &str, v: Option<u64>| -> Result<u64, ScenarioError> {
                let v = v.unwrap_or(0);
                if v > MAX_TIME_MS {
                    return Err(self.script_err(i, k, format!("{v} ms is out of range: 0..={MAX_TIME_MS} ms")));
                }
                Ok(v)
            };
            let request = || -> Result<u32, ScenarioError> {
                let r = e.request.unwrap_or(0);
                if u64::from(r) >= total {
                    return Err(self.script_err(
                        i,
                        "request",
                        format!("request {r} does not exist ({total} requests)"),
                    ));
                }
                Ok(r)
            };
            out.push(match e.kind {
                ScriptKind::Crash => {
                    let node = e.node.clone().unwrap_or_default();
                    let ok = node
                        .rsplit_once('-')
                        .and_then(|(role, idx)| Some((role, idx.parse::<usize>().ok()?)))
                        .is_some_and(|(role, idx)| match role {
                            "prefill" => idx < prefill,
                            "decode" => idx < decode,
                            _ => false,
                        });
                    if !ok {
                        return Err(self.script_err(
                            i,
                            "node",
                            format!("no node `{node}` (prefill-0..{}, decode-0..{})", prefill - 1, decode - 1),
                        ));
                    }
                    let at_ms = time("at_ms", e.at_ms)?;
                    let restart_after_ms = time("restart_after_ms", e.restart_after_ms)?;
                    if at_ms + restart_after_ms > MAX_TIME_MS {
                        return Err(self.script_err(
                            i,
                            "restart_after_ms",
                            format!("the restart falls past {MAX_TIME_MS} ms"),
                        ));
                    }
                    ScriptedFault::Crash { at_ms, node, restart_after_ms }
                }
                ScriptKind::TransferFail => match e.batch {
                    None => ScriptedFault::TransferFail { request: request()? },
                    Some(batch) => ScriptedFault::TransferFailAt { request: request()?, batch },
                },
                ScriptKind::Delay => {
                    let (request, delay_ms) = (request()?, time("delay_ms", e.delay_ms)?);
                    match e.batch {
                        None => ScriptedFault::Delay { request, delay_ms },
                        Some(batch) => ScriptedFault::DelayAt { request, batch, delay_ms },
                    }
                }
                ScriptKind::VisibilityLag => {
                    let (request, lag_ms) = (request()?, time("lag_ms", e.lag_ms)?);
                    match e.batch {
                        None => ScriptedFault::VisibilityLag { request, lag_ms },
                        Some(batch) => ScriptedFault::VisibilityLagAt { request, batch, lag_ms },
                    }
                }
                ScriptKind::MetadataLag => {
                    ScriptedFault::MetadataLag { request: request()?, lag_ms: time("lag_ms", e.lag_ms)? }
                }
            });
        }
        Ok(out)
    }

    /// Random faults and the script.
    fn faults(&self, prefill: usize, decode: usize, total: u64) -> Result<FaultConfig, ScenarioError> {
        let f = self.spec.faults.clone().unwrap_or_default();
        let time = |key: &str, v: Option<u64>, default: u64| {
            self.in_range("faults", 0, key, v.unwrap_or(default), 0, MAX_TIME_MS, " ms")
        };
        let fc = FaultConfig {
            transfer_fail: self.ratio("faults", "transfer_fail", &f.transfer_fail)?,
            delay_spike: self.ratio("faults", "delay_spike", &f.delay_spike)?,
            delay_spike_ms: time("delay_spike_ms", f.delay_spike_ms, 90_000)?,
            visibility_lag: self.ratio("faults", "visibility_lag", &f.visibility_lag)?,
            visibility_lag_ms: time("visibility_lag_ms", f.visibility_lag_ms, 5)?,
            node_crash: self.ratio("faults", "node_crash", &f.node_crash)?,
            crash_restart_ms: time("crash_restart_ms", f.crash_restart_ms, 30_000)?,
            heal_at_ms: time("heal_at_ms", f.heal_at_ms, MAX_TIME_MS)?,
            script: self.script(&f.script, prefill, decode, total)?,
            liveness_after_heal_ms: f
                .liveness_after_heal_ms
                .map(|v| self.in_range("faults", 0, "liveness_after_heal_ms", v, 1, MAX_TIME_MS, " ms"))
                .transpose()?,
        };
        crate::check::liveness::validate(&fc)
            .map_err(|e| self.err("faults", 0, "liveness_after_heal_ms", e.to_string()))?;
        Ok(fc)
    }

    /// The fully resolved configuration, reading a `[trace]` workload's file through `read`.
    /// Every number is range-checked here, at the boundary, against the named limits above.
    pub fn resolve_with(&self, o: &Overrides, read: Option<FileReader>) -> Result<SimConfig, ScenarioError> {
        let s = &self.spec;
        let profile = o.profile.clone().or_else(|| s.profile.clone()).unwrap_or_else(|| DEFAULT_PROFILE.into());
        let (knobs, origins) = self.knobs(o, &profile)?;
        self.check_knobs(&knobs, &origins)?;
        self.in_range("", 0, "context_len", s.context_len, 2, MAX_TOKENS, "")?;
        // A pool that is no whole number of pages is the file's line, but when the page size
        // came from `--set` or `--profile` the flag is the cause: say so (the file alone was
        // blamed, and a shrunk sglang case looked broken under `--profile vllm-nixl`).
        let ps_from = match origins.from.get("page_size") {
            Some(KnobOrigin::File) => None,
            Some(KnobOrigin::Set) => Some("`--set page_size`".to_string()),
            None if o.profile.is_some() && o.profile != s.profile => {
                let own =
                    config::profile(s.profile.as_deref().unwrap_or(DEFAULT_PROFILE)).map(|p| (p.knobs)().page_size);
                Some(format!(
                    "profile {profile}'s, from `--profile {profile}`{}",
                    own.filter(|&ps| ps != knobs.page_size)
                        .map(|ps| format!("; keep the file's page size with `--set page_size={ps}`"))
                        .unwrap_or_default()
                ))
            }
            None => None,
        };
        let blame = |mut e: ScenarioError| {
            if let Some(from) = ps_from.as_ref().filter(|_| e.message.contains("page")) {
                e.message.push_str(&format!(" (page_size {} is {from})", knobs.page_size));
            }
            e
        };
        let prefill = self.nodes(&s.prefill, "prefill", knobs.page_size).map_err(blame)?;
        let decode = self.nodes(&s.decode, "decode", knobs.page_size).map_err(blame)?;
        let cost = self.cost()?;
        let generator = self.generator()?;
        let mut requests = self.requests()?;
        if let Some(t) = &s.trace {
            requests.extend(self.trace_requests(t, read)?);
        }
        if !crate::prefix::BLOCK_TOKENS.is_multiple_of(knobs.page_size)
            && requests.iter().any(|r| !r.prefix_blocks.is_empty())
        {
            // The prefix caches match whole 512-token blocks of whole pages: with such a page size
            // they would match nothing, silently (a run with no prefix hits at all).
            return Err(origins.err(
                "page_size",
                &format!(
                    "{} does not divide the {}-token prefix block, and requests have prefix_blocks: no prefix \
                     cache could match them (use a page size that divides {})",
                    knobs.page_size,
                    crate::prefix::BLOCK_TOKENS,
                    crate::prefix::BLOCK_TOKENS
                ),
            ));
        }
        let total = requests.len() as u64 + generator.as_ref().map_or(0, |g| u64::from(g.requests));
        if total == 0 {
            if s.trace.is_some() && s.request.is_empty() && s.workload.is_none() {
                // The trace was read, but its window or limit selects none of its rows.
                return Err(self.err(
                    "trace",
                    0,
                    "",
                    "the trace gives no requests: its window or limit selects none of its rows",
                ));
            }
            return Err(self.err("", 0, "", "no requests: add a [workload] or [[request]] entries"));
        }
        if total > MAX_REQUESTS {
            return Err(self.err("", 0, "", format!("{total} requests in all (limit {MAX_REQUESTS})")));
        }
        let faults = self.faults(prefill.len(), decode.len(), total)?;
        let liveness_bound_s =
            self.in_range("", 0, "liveness_bound_s", s.liveness_bound_s.unwrap_or(3_600), 1, MAX_TIME_MS / 1000, " s")?;
        // An empty or blank name left a report header with nothing between its dots.
        if s.name.as_ref().is_some_and(|n| n.trim().is_empty()) {
            return Err(self.err(
                "",
                0,
                "name",
                "empty: give the scenario a name (or leave `name` out: the file's name)",
            ));
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
            liveness_bound_s,
        })
    }
}

/// The scenario file image of a resolved configuration: every knob, every node, the cost model
/// and faults written out; the generator kept as a `[workload]` or, with `expand`, drawn into
/// explicit requests. `Scenario::parse` + `resolve` give back the same configuration.
pub fn to_file(cfg: &SimConfig, expand: bool) -> ScenarioFile {
    let group = |n: &NodeConfig| NodeGroup {
        count: None,
        pool_tokens: n.pool_tokens,
        metadata_slots: Some(n.metadata_slots),
        max_running_requests: Some(n.max_running_requests),
        pp_stages: (n.pp_stages != 1).then_some(n.pp_stages),
    };
    let c = &cfg.cost;
    let f = &cfg.faults;
    let ratio = |r: Ratio| Some(r.to_string());
    // With `expand`, every request in the order the model numbers them.
    let specs = if expand { crate::client::in_id_order(cfg) } else { cfg.requests.clone() };
    let mut workload = None;
    if let Some(g) = &cfg.generator {
        if !expand {
            workload = Some(WorkloadSection {
                requests: g.requests,
                tenants: g.tenants,
                mean_interarrival_ms: None,
                mean_interarrival_us: Some(g.mean_interarrival_us),
                prompt_tokens: g.prompt_tokens.clone(),
                output_tokens: g.output_tokens.clone(),
                client_abort: ratio(g.client_abort),
                abort_within_ms: Some(g.abort_within_ms),
                start_ms: Some(g.start_ms),
            });
        }
    }
    ScenarioFile {
        name: Some(cfg.name.clone()),
        description: None,
        seed: Some(cfg.seed),
        profile: Some(cfg.profile.clone()),
        context_len: cfg.context_len,
        liveness_bound_s: Some(cfg.liveness_bound_s),
        prefill: cfg.prefill.iter().map(group).collect(),
        decode: cfg.decode.iter().map(group).collect(),
        router: Some(RouterSection { policy: cfg.router_policy }),
        cost: Some(CostSection {
            prefill_base_us: Some(c.prefill_base_us),
            prefill_ns_per_token: Some(c.prefill_ns_per_token),
            prefill_ns_per_token_per_kctx: Some(c.prefill_ns_per_token_per_kctx),
            decode_step_base_us: Some(c.decode_step_base_us),
            decode_ns_per_kkv: Some(c.decode_ns_per_kkv),
            kv_bytes_per_token: Some(c.kv_bytes_per_token),
            transfer_latency_us: Some(c.transfer_latency_us),
            transfer_bytes_per_us: Some(c.transfer_bytes_per_us),
            message_latency_us: Some(c.message_latency_us),
        }),
        workload,
        request: specs
            .iter()
            .map(|r| RequestEntry {
                at_ms: None,
                at_ns: Some(r.at_ns),
                tenant: r.tenant,
                prompt_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                abort_at_ms: None,
                abort_at_ns: r.abort_at_ns,
                prefix_blocks: r.prefix_blocks.clone(),
                streaming: r.streaming,
                public_blocks: r.public_blocks,
            })
            .collect(),
        trace: None,
        knobs: Some(toml::Table::try_from(&cfg.knobs).expect("knobs serialise")),
        faults: Some(FaultSection {
            transfer_fail: ratio(f.transfer_fail),
            delay_spike: ratio(f.delay_spike),
            delay_spike_ms: Some(f.delay_spike_ms),
            visibility_lag: ratio(f.visibility_lag),
            visibility_lag_ms: Some(f.visibility_lag_ms),
            node_crash: ratio(f.node_crash),
            crash_restart_ms: Some(f.crash_restart_ms),
            // The default ("never heals", the time limit) is left out: a reader saw a sentinel
            // `heal_at_ms = 4611686018427`.
            heal_at_ms: (f.heal_at_ms != MAX_TIME_MS).then_some(f.heal_at_ms),
            liveness_after_heal_ms: f.liveness_after_heal_ms,
            script: f.script.iter().map(ScriptEntry::of).collect(),
        }),
        expect: vec![],
    }
}

/// A comment block: each line prefixed `# `; characters TOML does not allow in a comment
/// (control characters other than tab) are written as `\u{…}` escapes.
pub fn comment_block(text: &str) -> String {
    let mut s = String::new();
    for l in text.lines() {
        s.push_str("# ");
        for ch in l.chars() {
            if ch.is_control() && ch != '\t' {
                s.push_str(&ch.escape_unicode().to_string());
            } else {
                s.push(ch);
            }
        }
        s.push('\n');
    }
    s
}

/// Writes a resolved configuration back as a scenario file that `Scenario::parse` reads to the
/// same configuration: every knob, every node, the generator expanded into explicit requests.
/// Serialised by the `toml` crate (strings are escaped as TOML, never by hand).
pub fn to_toml(cfg: &SimConfig, header_comment: &str) -> String {
    let body = toml::to_string(&to_file(cfg, true)).expect("a scenario image serialises");
    format!("{}{body}", comment_block(header_comment))
}

/// `to_toml`, with `[knobs]` holding only the knobs that differ from the configuration's profile
/// (the rest come from `profile = …` when the file is read back: the same configuration). So a
/// reader sees what the case changes, and `kvsim run FILE --profile OTHER` runs the other
/// profile's engine with only those changes, instead of every knob pinned to the first
/// profile's values. A configuration without a known profile keeps every knob.
pub fn to_toml_against_profile(cfg: &SimConfig, header_comment: &str) -> String {
    let mut f = to_file(cfg, true);
    if let Some(differing) = knob_values_differing(&cfg.knobs, &cfg.profile) {
        f.knobs = (!differing.is_empty()).then(|| differing.into_iter().map(|(k, v, _)| (k, v)).collect());
    }
    let body = toml::to_string(&f).expect("a scenario image serialises");
    format!("{}{body}", comment_block(header_comment))
}

/// The knobs whose values differ from profile `profile`'s, with the profile's value: (name,
/// value, the profile's value). `None` when `profile` is not a profile.
fn knob_values_differing(knobs: &Knobs, profile: &str) -> Option<Vec<(String, toml::Value, Option<toml::Value>)>> {
    let base = toml::Table::try_from((config::profile(profile)?.knobs)()).expect("knobs serialise");
    let mine = toml::Table::try_from(knobs).expect("knobs serialise");
    Some(
        mine.into_iter()
            .filter(|(k, v)| base.get(k) != Some(v))
            .map(|(k, v)| {
                let theirs = base.get(&k).cloned();
                (k, v, theirs)
            })
            .collect(),
    )
}

/// The knobs of `cfg` whose values differ from profile `profile`'s: (name, `name = value
/// (profile: value)`). What a scenario's own `[knobs]` (or `--set`) keep when `--profile` names
/// another profile.
pub fn knobs_differing_from(cfg: &SimConfig, profile: &str) -> Vec<(String, String)> {
    let differing = knob_values_differing(&cfg.knobs, profile).unwrap_or_default();
    differing
        .into_iter()
        .map(|(k, v, theirs)| {
            let text = format!("{k} = {v} ({profile}: {})", theirs.map_or("-".to_string(), |b| b.to_string()));
            (k, text)
        })
        .collect()
}

/// Checks a configuration that did not come from a scenario file (a trace header): it must be
/// one that a scenario resolves to, exactly. The generator is checked as a `[workload]`, never
/// drawn, so the check costs nothing proportional to the numbers it holds.
pub fn validate_config(cfg: &SimConfig, file: &str) -> Result<(), ScenarioError> {
    let relabel = |mut e: ScenarioError| {
        e.file = format!("{file} (header configuration)");
        e.line = None;
        e
    };
    if cfg.requests.len() as u64 > MAX_REQUESTS {
        return Err(relabel(ScenarioError {
            file: String::new(),
            line: None,
            key: "requests".into(),
            message: format!("{} requests (limit {MAX_REQUESTS})", cfg.requests.len()),
        }));
    }
    let text = toml::to_string(&to_file(cfg, false)).expect("a scenario image serialises");
    let back = Scenario::parse(file, &text).and_then(|s| s.resolve(&Overrides::default())).map_err(relabel)?;
    if back != *cfg {
        return Err(relabel(ScenarioError {
            file: String::new(),
            line: None,
            key: String::new(),
            message: "the configuration is not one a scenario file resolves to (a value outside its format)".into(),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod locate_tests {
    use super::locate;

    const TEXT: &str = r#"name = "t"
description = """
[decode]
pool_tokens = 1
"""
# pool_tokens = 2 (a comment, not the key)
[[decode]]
pool_tokens = 3

[[decode]]
"pool_tokens" = 4
knobs.page_size = 5

[faults]
[[faults.script]]
at_ms = 1
[[faults.script]]
kind = "crash"
at_ms = 2
"#;

    #[test]
    fn keys_are_found_by_the_parse_not_by_scanning_text() {
        assert_eq!(locate(TEXT, "", 0, "name"), Some(1));
        // A table header inside a multi-line string and a key in a comment are not keys.
        assert_eq!(locate(TEXT, "decode", 0, "pool_tokens"), Some(8));
        // Quoted keys; the nth element of an array of tables.
        assert_eq!(locate(TEXT, "decode", 1, "pool_tokens"), Some(11));
        // A dotted key inside an array element's table.
        assert_eq!(locate(TEXT, "decode.knobs", 1, "page_size"), Some(12));
        // Dotted table paths and array elements.
        assert_eq!(locate(TEXT, "faults.script", 1, "at_ms"), Some(19));
        assert_eq!(locate(TEXT, "faults.script", 1, "kind"), Some(18));
        // A missing key falls back to its table's header; a missing table is unknown.
        assert_eq!(locate(TEXT, "faults.script", 0, "kind"), Some(15));
        assert_eq!(locate(TEXT, "cost", 0, "x"), None);
        assert_eq!(locate("not = [valid", "", 0, "not"), None);
        // A value beyond i64 (the range check reports it, so it must be found).
        assert_eq!(locate("[[request]]\nat_ns = 18446744073709551610\n", "request", 0, "at_ns"), Some(2));
    }

    /// The key a parse error names, for syntax errors (the recovering parse) and shape errors
    /// alike: (text, the error's key, its line).
    #[test]
    fn a_parse_error_names_its_key_from_the_spans() {
        let parse = |text: &str| {
            let e = super::Scenario::parse("t.toml", text).err().expect("an error");
            (e.key, e.line)
        };
        let cases: [(&str, &str, usize); 14] = [
            // Syntax errors: the value did not parse; the key is on the error's line.
            ("name = \"t\"\n[[decode]]\npool_tokens = 12 34\n", "decode[0].pool_tokens", 3),
            ("name = \"t\"\n[[decode]]\npool_tokens = \n", "decode[0].pool_tokens", 3),
            (
                "name = \"t\"\n[[faults.script]]\nkind = \"crash\"\n[[faults.script]]\nat_ms = 1x\n",
                "faults.script[1].at_ms",
                5,
            ),
            // A key in a comment or a multi-line string is not a key (the old text scan named them).
            ("description = \"\"\"\n[decode]\n\"\"\"\n# prefill = 1\n[[prefill]]\nx = [1,\n", "prefill[0].x", 6),
            // Shape errors on a valid file: the wrong type, an unknown key, a quoted key, a header.
            ("name = \"t\"\n[[decode]]\npool_tokens = \"many\"\n", "decode[0].pool_tokens", 3),
            ("name = \"t\"\n[[decode]]\npool_tokenz = 1\n", "decode[0].pool_tokenz", 3),
            ("name = \"t\"\n[[decode]]\n\"pool_tokenz\" = 1\n", "decode[0].pool_tokenz", 3),
            ("name = \"t\"\n[decode]\npool_tokens = 1\n", "decode", 2),
            ("name = \"t\"\n[decoed]\npool_tokens = 1\n", "decoed", 2),
            ("name = 5\n", "name", 1),
            // An array of tables' element by its index: a key of the second `[[request]]`, a
            // field missing from it (the error's span is its header), and the second element of
            // an inline array on one line (named as the first element's last key before).
            ("[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 1\noutput_tokens = 1\n[[request]]\nat_ms = \"soon\"\n", "request[1].at_ms", 7),
            ("[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 1\noutput_tokens = 1\n[[request]]\nat_ms = 0\n", "request[1]", 6),
            ("[workload]\nprompt_tokens = [{min = 1, max = 2, weight = 1}, {min = -16, max = 2, weight = 1}]\n", "workload.prompt_tokens[1].min", 2),
            ("[[decode]]\npool_tokens = 1\n[[decode]]\npool_tokenz = 1\n", "decode[1].pool_tokenz", 4),
        ];
        for (text, key, line) in cases {
            assert_eq!(parse(text), (key.to_string(), Some(line)), "{text}");
        }
    }
}

#[cfg(test)]
mod knob_tests {
    use super::*;

    /// `check_knob` sorts a refused knob into its kind; each prints as the deserialiser's message
    /// with the did-you-mean.
    #[test]
    fn knob_faults_are_typed() {
        let filler = (config::profile("sglang-0.5.16").expect("shipped").knobs)();
        let s = |v: &str| toml::Value::String(v.to_string());
        let e = check_knob(&filler, "page_sise", &toml::Value::Integer(16)).unwrap_err();
        assert!(matches!(&e, KnobFault::UnknownKnob { suggestion: Some(m), .. } if m == "page_size"), "{e:?}");
        assert!(e.to_string().starts_with("unknown field `page_sise`"), "{e}");
        assert!(e.to_string().ends_with(" (did you mean `page_size`?)"), "{e}");
        let e = check_knob(&filler, "router_mode", &s("sequentail")).unwrap_err();
        assert!(matches!(&e, KnobFault::UnknownValue { suggestion: Some(m), .. } if m == "sequential"), "{e:?}");
        let e = check_knob(&filler, "page_size", &s("big")).unwrap_err();
        assert!(matches!(&e, KnobFault::BadValue { .. }), "{e:?}");
        assert!(!e.to_string().contains("did you mean"), "{e}");
        assert!(check_knob(&filler, "page_size", &toml::Value::Integer(16)).is_ok());
        // A worded knob given a boolean names its words (it said "invalid type: unit variant,
        // expected string only").
        let e = check_knob(&filler, "kv_canary", &toml::Value::Boolean(true)).unwrap_err().to_string();
        assert!(e.contains("`true` is a boolean, not one of the knob's words: expected one of `off`"), "{e}");
        assert!(e.contains("`raise`") && !e.contains("unit variant"), "{e}");
    }

    /// A number past 64 bits in a file, or past TOML's integers in `--set`, is said to be out of
    /// range (it read "invalid type: integer … as i128" and "invalid type: string").
    #[test]
    fn numbers_past_their_range_are_out_of_range() {
        let m = with_suggestion("invalid type: integer `99999999999999999999999` as i128, expected u64");
        let past = "is out of range: larger than any limit (each field's is in docs/scenario-format.md)";
        assert_eq!(m, format!("99999999999999999999999 {past}"));
        let table = toml::Table::try_from((config::profile("sglang-0.5.16").expect("shipped").knobs)()).unwrap();
        let e = set_value("waiting_timeout_ms", "18446744073709551615", &table).unwrap_err();
        assert_eq!(e.message, format!("18446744073709551615 {past}"));
        assert_eq!(set_value("waiting_timeout_ms", "5_000", &table).unwrap(), toml::Value::Integer(5000));
        assert_eq!(set_value("router_mode", "sequential", &table).unwrap(), toml::Value::String("sequential".into()));
        assert!(!integer_literal("_1") && !integer_literal("-") && integer_literal("-12") && !integer_literal("1e3"));
    }
}
