//! What the cargo-fuzz targets in `fuzz/` call, on stable Rust; `cargo test` calls the same
//! functions on every committed corpus and regression input (`sim/tests/it/fuzz_corpus.rs`).
//!
//! - [`scenario_run`]: bytes → a small scenario (every choice bounded, valid by construction) →
//!   a run with the model's invariants checked after every event. A panic is a kvsim bug.
//! - [`cross_tenant`]: the same scenarios with the engine knobs of one profile; true when a
//!   request reads another tenant's KV (the target reports that as its finding).
//! - [`parse_scenario`]: bytes as a TOML scenario file; parsing and resolving never panic.
//! - [`parse_trace`]: bytes as a JSON Lines trace, read by the one trace reader every command uses;
//!   then the replay filter and `confirm::lower` on its memory log, CPU-side only.
//! - [`parse_audit_log`]: bytes as an engine start-up log, through `kvsim audit`'s parser and
//!   analysis; a generated scenario must resolve.
//!
//! Bytes are decoded with `arbitrary::Unstructured` into [`FuzzInput`]; short input decodes to
//! zeros (the first choice of everything), so every byte string is a scenario. The layout:
//! every field in declaration order, `u8` as one byte, `u16`/`i16` as two bytes little-endian,
//! `bool` as the low bit of a byte, `Option` as a byte (low bit: `Some`) then the value, an enum
//! as a `u32` (four bytes little-endian) whose range picks the variant (`(x * variants) >> 32`),
//! then its fields, and a `Vec` as a byte before each element (low bit: one more element).

use crate::check::Kind;
use crate::config::{
    self, CostConfig, FaultConfig, Knobs, NodeConfig, RequestSpec, RouterPolicy, ScriptedFault, SimConfig,
};
use crate::confirm::{self, Select};
use crate::trace::MemOp;
use crate::tracefile::{ReadOptions, TraceReader};
use crate::types::Ratio;
use arbitrary::{Arbitrary, Unstructured};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// At most this many requests per decoded scenario.
pub const MAX_REQUESTS: usize = 12;
/// At most this many scripted faults per decoded scenario.
pub const MAX_SCRIPT: usize = 4;
/// The profile `cross_tenant` pins when not told otherwise.
pub const DEFAULT_PROFILE: &str = "sglang-0.5.16";

const CONTEXTS: [u64; 7] = [512, 1024, 2048, 4096, 8192, 16384, 32768];
const PAGES: [u64; 4] = [1, 4, 16, 64];
/// Pool sizes in eighths of the context: the incident's shape (pool < context) and larger.
const PREFILL_EIGHTHS: [u64; 7] = [2, 3, 4, 6, 8, 12, 16];
const DECODE_EIGHTHS: [u64; 8] = [3, 4, 6, 8, 12, 16, 24, 32];
const META_SLOTS: [u32; 4] = [1, 2, 8, 64];
const MAX_RUNNING: [u32; 4] = [1, 2, 8, 64];
const ROUTERS: [RouterPolicy; 3] = [RouterPolicy::RoundRobin, RouterPolicy::Random, RouterPolicy::LeastLoaded];
const CHUNKED_PREFILL: [u64; 4] = [256, 1024, 4096, 8192];
const TRANSFER_BATCH: [u64; 5] = [0, 1, 4, 64, 4096];
const TRANSFER_SYNC_TIMEOUT_MS: [u64; 3] = [500, 5_000, 60_000];
const RATIOS: [Ratio; 8] = [
    Ratio::NEVER,
    Ratio::NEVER,
    Ratio::NEVER,
    Ratio { num: 1, den: 2 },
    Ratio { num: 1, den: 5 },
    Ratio { num: 1, den: 20 },
    Ratio { num: 1, den: 50 },
    Ratio { num: 1, den: 200 },
];
const DELAY_MS: [u64; 3] = [100, 10_000, 90_000];
const LAG_MS: [u64; 3] = [1, 5, 50];
const RESTART_MS: [u64; 3] = [100, 2_000, 30_000];
const HEAL_MS: [u64; 3] = [1_000, 10_000, 60_000];
const SCRIPT_DELAY_MS: [u64; 5] = [1, 100, 1_000, 10_000, 90_000];
/// Knobs `draw_knobs` leaves to the deployment draw: chosen by their own fields, not `knobs`.
const DEPLOYMENT_KNOBS: [&str; 4] =
    ["page_size", "chunked_prefill_size", "max_transfer_batch_pages", "transfer_sync_timeout_ms"];

/// One fuzzed scenario. Every field is an index or a bounded number; `build` clamps the rest.
#[derive(Arbitrary, Debug, Clone, Default)]
pub struct FuzzInput {
    /// The run's root seed (router, faults).
    pub seed: u16,
    pub context: u8,
    pub page: u8,
    /// 1 or 2 nodes each.
    pub prefill_nodes: u8,
    pub decode_nodes: u8,
    /// Pool sizes as fractions of the context (`PREFILL_EIGHTHS`, `DECODE_EIGHTHS`).
    pub prefill_pool: u8,
    pub decode_pool: u8,
    pub metadata_slots: u8,
    pub max_running: u8,
    pub router: u8,
    pub chunked_prefill: u8,
    pub transfer_batch: u8,
    pub transfer_sync_timeout: u8,
    /// Transfers at 500 bytes/µs instead of 25,000: long transfers race the timeouts.
    pub slow_transfers: bool,
    /// The profile the knobs start from (`scenario_run`; `cross_tenant` pins its own).
    pub profile: u8,
    /// Knob `i` (in `config::knob_names` order): 0 keeps the profile's value, `c > 0` takes
    /// value `(c - 1) % n` of the values the profiles and `draw_knobs` use for it.
    pub knobs: Vec<u8>,
    pub faults: FuzzFaults,
    pub script: Vec<FuzzScript>,
    pub requests: Vec<FuzzRequest>,
}

/// Random fault probabilities and durations, as indices.
#[derive(Arbitrary, Debug, Clone, Default)]
pub struct FuzzFaults {
    pub transfer_fail: u8,
    pub delay_spike: u8,
    pub visibility_lag: u8,
    pub node_crash: u8,
    pub delay_spike_ms: u8,
    pub visibility_lag_ms: u8,
    pub crash_restart_ms: u8,
    pub heal_at_ms: u8,
}

/// A scripted fault; requests and nodes are taken modulo what exists.
#[derive(Arbitrary, Debug, Clone)]
pub enum FuzzScript {
    Crash { at_ms: u16, node: u8, restart: u8 },
    TransferFail { request: u8 },
    Delay { request: u8, delay: u8 },
    VisibilityLag { request: u8, lag: u8 },
}

/// One explicit request.
#[derive(Arbitrary, Debug, Clone, Default)]
pub struct FuzzRequest {
    /// Modulo 4.
    pub tenant: u8,
    pub prompt: Prompt,
    /// `1 + output % 64` tokens.
    pub output: u8,
    /// Arrives `gap × 100 µs` after the previous request.
    pub gap: u16,
    /// The client aborts `v × 100 µs` after arrival.
    pub abort: Option<u16>,
}

/// A prompt length: a share of the context or a distance from an edge (clamped to 1..=2×context).
#[derive(Arbitrary, Debug, Clone)]
pub enum Prompt {
    /// `share / 65536` of 1.25 × the context.
    Share(u16),
    /// The first prefill pool's size plus this many tokens.
    NearPrefillPool(i16),
    NearDecodePool(i16),
    NearContext(i16),
    /// `1 + n` tokens.
    Tokens(u8),
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt::Share(0)
    }
}

fn at<T: Copy>(xs: &[T], i: u8) -> T {
    xs[usize::from(i) % xs.len()]
}

impl FuzzInput {
    /// Decodes bytes the way libfuzzer-sys hands them over; never fails (short input is zeros).
    pub fn decode(data: &[u8]) -> FuzzInput {
        FuzzInput::arbitrary(&mut Unstructured::new(data)).unwrap_or_default()
    }

    /// The scenario, valid by construction. `pinned`: the knobs of that profile, as
    /// `fuzz::draw` does for `Space::Profile` (only the deployment knobs are chosen).
    pub fn build(&self, pinned: Option<&str>) -> SimConfig {
        let context_len = at(&CONTEXTS, self.context);
        let page_size = at(&PAGES, self.page);
        let round = |t: u64| (t / page_size).max(2) * page_size;
        let node = |eighths: u64| NodeConfig {
            pool_tokens: round(context_len * eighths / 8),
            metadata_slots: at(&META_SLOTS, self.metadata_slots),
            max_running_requests: at(&MAX_RUNNING, self.max_running),
        };
        let prefill = vec![node(at(&PREFILL_EIGHTHS, self.prefill_pool)); 1 + usize::from(self.prefill_nodes % 2)];
        let decode = vec![node(at(&DECODE_EIGHTHS, self.decode_pool)); 1 + usize::from(self.decode_nodes % 2)];
        let (profile, mut knobs) = match pinned.and_then(config::profile) {
            Some(p) => (p.name.to_string(), (p.knobs)()),
            None => {
                let p = &config::PROFILES[usize::from(self.profile) % config::PROFILES.len()];
                (p.name.to_string(), choose_knobs(&(p.knobs)(), &self.knobs))
            }
        };
        knobs.page_size = page_size;
        knobs.chunked_prefill_size = at(&CHUNKED_PREFILL, self.chunked_prefill);
        knobs.max_transfer_batch_pages = at(&TRANSFER_BATCH, self.transfer_batch);
        knobs.transfer_sync_timeout_ms = at(&TRANSFER_SYNC_TIMEOUT_MS, self.transfer_sync_timeout);
        let mut requests = Vec::new();
        let mut t = 0u64;
        for r in self.requests.iter().take(MAX_REQUESTS) {
            t += u64::from(r.gap) * 100_000;
            let (pf, dc) = (prefill[0].pool_tokens as i64, decode[0].pool_tokens as i64);
            let near = |x: i64, d: i16| (x + i64::from(d)).clamp(1, 2 * context_len as i64) as u64;
            let prompt_tokens = match r.prompt {
                Prompt::Share(s) => ((u64::from(s) * (context_len + context_len / 4)) >> 16).max(1),
                Prompt::NearPrefillPool(d) => near(pf, d),
                Prompt::NearDecodePool(d) => near(dc, d),
                Prompt::NearContext(d) => near(context_len as i64, d),
                Prompt::Tokens(n) => 1 + u64::from(n),
            };
            requests.push(RequestSpec {
                at_ns: t,
                tenant: u32::from(r.tenant % 4),
                prompt_tokens,
                output_tokens: 1 + u64::from(r.output % 64),
                abort_at_ns: r.abort.map(|a| t + u64::from(a) * 100_000),
                prefix_blocks: vec![],
                streaming: false,
                public_blocks: 0,
            });
        }
        if requests.is_empty() {
            requests.push(RequestSpec {
                at_ns: 0,
                tenant: 0,
                prompt_tokens: context_len / 2,
                output_tokens: 4,
                abort_at_ns: None,
                prefix_blocks: vec![],
                streaming: false,
                public_blocks: 0,
            });
        }
        let n = requests.len() as u32;
        let script = self
            .script
            .iter()
            .take(MAX_SCRIPT)
            .map(|s| match *s {
                FuzzScript::Crash { at_ms, node, restart } => {
                    let i = usize::from(node) % (prefill.len() + decode.len());
                    let node = if i < prefill.len() {
                        format!("prefill-{i}")
                    } else {
                        format!("decode-{}", i - prefill.len())
                    };
                    ScriptedFault::Crash { at_ms: u64::from(at_ms), node, restart_after_ms: at(&RESTART_MS, restart) }
                }
                FuzzScript::TransferFail { request } => ScriptedFault::TransferFail { request: u32::from(request) % n },
                FuzzScript::Delay { request, delay } => {
                    ScriptedFault::Delay { request: u32::from(request) % n, delay_ms: at(&SCRIPT_DELAY_MS, delay) }
                }
                FuzzScript::VisibilityLag { request, lag } => {
                    ScriptedFault::VisibilityLag { request: u32::from(request) % n, lag_ms: at(&LAG_MS, lag) }
                }
            })
            .collect();
        let f = &self.faults;
        let faults = FaultConfig {
            transfer_fail: at(&RATIOS, f.transfer_fail),
            delay_spike: at(&RATIOS, f.delay_spike),
            delay_spike_ms: at(&DELAY_MS, f.delay_spike_ms),
            visibility_lag: at(&RATIOS, f.visibility_lag),
            visibility_lag_ms: at(&LAG_MS, f.visibility_lag_ms),
            node_crash: at(&RATIOS, f.node_crash),
            crash_restart_ms: at(&RESTART_MS, f.crash_restart_ms),
            heal_at_ms: at(&HEAL_MS, f.heal_at_ms),
            script,
            liveness_after_heal_ms: None,
        };
        SimConfig {
            name: format!("fuzz-input-{}", self.seed),
            seed: u64::from(self.seed),
            profile,
            knobs,
            context_len,
            prefill,
            decode,
            router_policy: at(&ROUTERS, self.router),
            cost: CostConfig {
                transfer_bytes_per_us: if self.slow_transfers { 500 } else { 25_000 },
                ..crate::fuzz::fuzz_cost()
            },
            generator: None,
            requests,
            faults,
            liveness_bound_s: 1_200,
        }
    }
}

/// Extra values for numeric knobs, next to the profiles' own: short timeouts and small
/// reservations reach the paths the shipped profiles never take.
fn numeric_extras(name: &str) -> &'static [i64] {
    match name {
        "reserved_decode_tokens" => &[0, 16, 4096],
        "tokenizer_reserved_tokens" => &[64],
        "bootstrap_timeout_ms" | "waiting_timeout_ms" => &[100, 5_000],
        "heartbeat_interval_ms" => &[1_000],
        "heartbeat_failures" => &[1],
        "deferred_release_timeout_ms" => &[10, 1_000],
        "source_lease_ms" => &[100, 5_000],
        _ => &[],
    }
}

/// Whether `v` is a valid value of knob `name` (checked by deserialising, as `resolve` does).
fn valid_knob(base: &toml::Table, name: &str, v: &toml::Value) -> bool {
    let mut t = base.clone();
    t.insert(name.to_string(), v.clone());
    Knobs::deserialize(t).is_ok()
}

/// Every knob (in `config::knob_names` order) with the values a fuzzed scenario may give it: the
/// profiles' values, every variant of an enum knob (read from serde's "expected one of" message
/// and checked), both booleans, and `numeric_extras`.
pub fn knob_values() -> &'static [(String, Vec<toml::Value>)] {
    static VALUES: OnceLock<Vec<(String, Vec<toml::Value>)>> = OnceLock::new();
    VALUES.get_or_init(|| {
        let base = toml::Table::try_from((config::PROFILES[0].knobs)()).expect("knobs serialise");
        let mut out = Vec::new();
        for name in config::knob_names() {
            let mut vals: Vec<toml::Value> = Vec::new();
            let add = |v: toml::Value, vals: &mut Vec<toml::Value>| {
                if !vals.contains(&v) && valid_knob(&base, &name, &v) {
                    vals.push(v);
                }
            };
            for p in config::PROFILES {
                let t = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
                if let Some(v) = t.get(&name) {
                    add(v.clone(), &mut vals);
                }
            }
            match base.get(&name) {
                Some(toml::Value::String(_)) => {
                    let mut t = base.clone();
                    t.insert(name.clone(), toml::Value::String("\u{1}".into()));
                    if let Err(e) = Knobs::deserialize(t) {
                        let msg = e.message().to_string();
                        let expected = msg.split_once("expected").map_or("", |(_, x)| x);
                        for variant in expected.split('`').skip(1).step_by(2) {
                            add(toml::Value::String(variant.to_string()), &mut vals);
                        }
                    }
                }
                Some(toml::Value::Boolean(_)) => {
                    add(toml::Value::Boolean(false), &mut vals);
                    add(toml::Value::Boolean(true), &mut vals);
                }
                Some(toml::Value::Integer(_)) => {
                    for x in numeric_extras(&name) {
                        add(toml::Value::Integer(*x), &mut vals);
                    }
                }
                _ => {}
            }
            out.push((name, vals));
        }
        out
    })
}

/// The profile's knobs with the choices of `bytes` applied (deployment knobs excluded).
fn choose_knobs(base: &Knobs, bytes: &[u8]) -> Knobs {
    let Ok(mut t) = toml::Table::try_from(base) else { return base.clone() };
    for (i, (name, vals)) in knob_values().iter().enumerate() {
        let c = usize::from(bytes.get(i).copied().unwrap_or(0));
        if c == 0 || vals.is_empty() || DEPLOYMENT_KNOBS.contains(&name.as_str()) {
            continue;
        }
        t.insert(name.clone(), vals[(c - 1) % vals.len()].clone());
    }
    Knobs::deserialize(t).unwrap_or_else(|_| base.clone())
}

/// The scenario `scenario_run` runs for these bytes (to write it out: `scenario::to_toml`).
pub fn scenario_of(data: &[u8]) -> SimConfig {
    FuzzInput::decode(data).build(None)
}

/// The scenario `cross_tenant` runs for these bytes under `profile`; `None` for an unknown profile.
pub fn cross_tenant_scenario_of(data: &[u8], profile: &str) -> Option<SimConfig> {
    config::profile(profile)?;
    Some(FuzzInput::decode(data).build(Some(profile)))
}

/// Target `scenario_run`: a decoded scenario with invariants after every event. Panics only
/// when the model breaks one of its invariants (a kvsim bug).
pub fn scenario_run(data: &[u8]) {
    let w = crate::simulate(scenario_of(data), None, true);
    assert!(!w.event_limit_hit, "a {}-request scenario hit the event limit", w.reqs.len());
}

/// Target `cross_tenant`: true when the decoded scenario, with the knobs of `profile`, has a
/// request read another tenant's KV. An unknown profile reads nothing (false).
pub fn cross_tenant(data: &[u8], profile: &str) -> bool {
    !cross_tenant_signatures(data, profile).is_empty()
}

/// The signatures (`cross_tenant_read/<mechanism>`: `stub_commit`, `late_write`,
/// `visibility_lag`, `other`) of the cross-tenant reads `cross_tenant` finds, for a target that
/// reports only mechanisms not yet known under its profile.
pub fn cross_tenant_signatures(data: &[u8], profile: &str) -> BTreeSet<String> {
    let Some(cfg) = cross_tenant_scenario_of(data, profile) else { return BTreeSet::new() };
    let w = crate::simulate(cfg, None, false);
    let kind = Kind::CrossTenantRead.name();
    crate::fuzz::signatures(&w).into_iter().filter(|s| s.split('/').next() == Some(kind)).collect()
}

/// Target `parse_scenario`: bytes as a scenario file (lossy UTF-8); parse and resolve with no
/// overrides. Errors are expected; a panic is a bug.
pub fn parse_scenario(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = crate::scenario::Scenario::parse("fuzz.toml", &text) {
        if let Ok(cfg) = s.resolve(&Default::default()) {
            // What a resolved scenario writes into a trace header must read back (replay, shrink).
            if let Err(e) = crate::scenario::validate_config(&cfg, "fuzz.jsonl") {
                panic!("a resolved scenario fails header validation: {e}");
            }
        }
    }
}

/// The fuzzer's budget for `parse_trace` (time and memory; kvsim's own traces of small scenarios
/// are far inside it): pools of at most `MAX_POOL_PAGES` pages, at most `MAX_TOTAL_PAGES` pages
/// allocated or copied in all.
pub const MAX_POOL_PAGES: u64 = 1 << 16;
pub const MAX_TOTAL_PAGES: u64 = 1 << 20;

/// Whether a (valid) memory log fits the fuzzer's budget.
fn within_budget(mem: &[(u64, MemOp)], cfg: &SimConfig) -> bool {
    let mut total = 0u64;
    let pools_ok = confirm::initial_pools(cfg).values().all(|&n| n <= MAX_POOL_PAGES);
    pools_ok
        && mem.iter().all(|(_, op)| {
            total += match op {
                MemOp::Reset { pages, .. } if u64::from(*pages) > MAX_POOL_PAGES => return false,
                MemOp::Alloc { pages, .. } => pages.iter().map(|r| u64::from(r.count)).sum(),
                MemOp::Copy { pages, .. } => pages.iter().map(|r| u64::from(r.2)).sum(),
                _ => 0,
            };
            total <= MAX_TOTAL_PAGES
        })
}

/// Target `parse_trace`: bytes as a trace (lossy UTF-8), read by the one trace reader every
/// command uses (`tracefile::TraceReader`: header validation included). Every record as
/// `kvsim replay` reads it (the header's filter applied to each), then the memory log as
/// `kvsim confirm` reads it: validated (`validate_mem_log`) and lowered with
/// `confirm::lower` for the footer's violating reads and for the last read of the first readers
/// (as `kvsim confirm --request` does). No backend runs. Never panics.
pub fn parse_trace(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(mut reader) = TraceReader::open("fuzz.jsonl", text.as_bytes(), ReadOptions { any_version: true }) else {
        return;
    };
    let filter = reader.header.filter.clone();
    let page_size = reader.header.config.knobs.page_size;
    while let Ok(Some(item)) = reader.next_item() {
        if let (Some(f), crate::tracefile::Item::Record { line, .. }) = (&filter, &item) {
            let _ = f.keeps(&line.rec, page_size);
        }
    }
    let Ok(log) =
        TraceReader::open("fuzz.jsonl", text.as_bytes(), ReadOptions { any_version: true }).and_then(|r| r.mem_log())
    else {
        return;
    };
    let cfg = &log.header.config;
    if confirm::validate_mem_log(&log.mem, cfg).is_err() || !within_budget(&log.mem, cfg) {
        return;
    }
    let model = confirm::MemModel::of(cfg);
    let shape = kvsim_gpu::AttnShape { heads: 8, kv_heads: 2, head_dim: 64, dtype: kvsim_gpu::Dtype::F16 };
    let _ = confirm::lower(&log.mem, model, Select::Violations { violations: &log.footer.violations, max: 8 }, shape);
    let mut readers: Vec<u32> = log
        .mem
        .iter()
        .filter_map(|(_, op)| match op {
            MemOp::Read { r, .. } => Some(r.0),
            _ => None,
        })
        .collect();
    readers.sort_unstable();
    readers.dedup();
    readers.truncate(4);
    if !readers.is_empty() {
        let _ = confirm::lower(&log.mem, model, Select::Requests(&readers), shape);
    }
}

/// Target `parse_audit_log`: bytes as an engine start-up log (lossy UTF-8), read by the parser
/// `kvsim audit` uses, analysed as `kvsim audit` does (roles from the log). When the audit can
/// build a scenario, that scenario must parse and resolve under the default profile (a generated
/// scenario that does not is a kvsim bug: this panics). Never panics otherwise.
pub fn parse_audit_log(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(facts) = crate::audit::parse::parse_log("fuzz.log", &text) else { return };
    let files = vec![("fuzz.log".to_string(), facts, None)];
    let Ok(a) = crate::audit::analyse(&files) else { return };
    let _ = crate::audit::node_table(&a);
    if let Some(generated) = crate::audit::scenario(&a, "fuzz.log") {
        let text = generated.toml;
        let resolved = crate::scenario::Scenario::parse("audit-scenario.toml", &text)
            .and_then(|s| s.resolve(&crate::scenario::Overrides::default()));
        if let Err(e) = resolved {
            panic!("the audit wrote a scenario that does not resolve: {e}\n{text}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Prng;

    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut rng = Prng::child(seed, "fuzz-targets-test");
        (0..n).map(|_| rng.below(256) as u8).collect()
    }

    #[test]
    fn every_knob_has_values_and_enums_have_all_variants() {
        let vals = knob_values();
        assert_eq!(vals.len(), config::knob_names().len());
        for (name, v) in vals {
            assert!(!v.is_empty(), "{name}");
        }
        let get = |n: &str| &vals.iter().find(|(k, _)| k == n).unwrap().1;
        assert_eq!(get("free_list_policy").len(), 5);
        assert_eq!(get("decode_commit_check").len(), 3);
        assert_eq!(get("kv_canary").len(), 3);
        assert_eq!(get("zero_on_free").len(), 2);
    }

    #[test]
    fn decoded_scenarios_are_valid_and_round_trip_through_toml() {
        for seed in 0..150 {
            let data = bytes(seed, (seed as usize * 7) % 160);
            for pinned in [None, Some(DEFAULT_PROFILE)] {
                let cfg = FuzzInput::decode(&data).build(pinned);
                assert!(cfg.requests.len() <= MAX_REQUESTS && cfg.context_len <= 32768);
                let text = crate::scenario::to_toml(&cfg, "test");
                let back = crate::scenario::Scenario::parse("fuzzed.toml", &text)
                    .and_then(|s| s.resolve(&Default::default()))
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
                assert_eq!(back, cfg, "seed {seed}");
            }
        }
    }

    #[test]
    fn short_and_empty_input_decode() {
        for n in 0..40 {
            let _ = scenario_of(&bytes(n, n as usize));
        }
        parse_scenario(b"");
        parse_trace(b"");
        assert!(!cross_tenant(b"", "no-such-profile"));
    }
}
