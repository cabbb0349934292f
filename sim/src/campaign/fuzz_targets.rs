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
//! Every value a decoded scenario may take comes from the draw table the campaign's swarm draw
//! uses too (`fuzz::table`), each value marked for the draws that use it.
//!
//! Bytes are decoded with `arbitrary::Unstructured` into [`FuzzInput`]; short input decodes to
//! zeros (the first choice of everything), so every byte string is a scenario. The layout:
//! every field in declaration order, `u8` as one byte, `u16`/`i16` as two bytes little-endian,
//! `bool` as the low bit of a byte, `Option` as a byte (low bit: `Some`) then the value, an enum
//! as a `u32` (four bytes little-endian) whose range picks the variant (`(x * variants) >> 32`),
//! then its fields, and a `Vec` as a byte before each element (low bit: one more element).
//! Fields added later come last (`FuzzInput::more_script`), so older inputs keep their meaning.

use crate::check::Kind;
use crate::config::{self, CostConfig, FaultConfig, NodeConfig, RequestSpec, ScriptedFault, SimConfig};
use crate::confirm::{self, Select};
use crate::fuzz::table;
use crate::trace::MemOp;
use crate::tracefile::{ReadOptions, TraceReader};
use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeSet;

/// At most this many requests per decoded scenario.
pub const MAX_REQUESTS: usize = 12;
/// At most this many scripted faults per decoded scenario, in each of `FuzzInput::script` and
/// `FuzzInput::more_script`.
pub const MAX_SCRIPT: usize = 4;
/// A one-batch fault names one of a request's first this many transfer batches.
pub const MAX_BATCH: u8 = 16;
/// The profile `cross_tenant` pins when not told otherwise.
pub const DEFAULT_PROFILE: &str = "sglang-0.5.16";

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
    /// Pool sizes as fractions of the context (`table::PREFILL_POOL_EIGHTHS`, `DECODE_POOL_EIGHTHS`).
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
    /// Knob `i` (in `fuzz::table::byte_order`: `config::knob_names` order, knobs added later
    /// last): 0 keeps the profile's value, `c > 0` takes
    /// value `(c - 1) % n` of the knob's byte values in the draw table (`fuzz::table::knobs`).
    pub knobs: Vec<u8>,
    pub faults: FuzzFaults,
    pub script: Vec<FuzzScript>,
    pub requests: Vec<FuzzRequest>,
    /// The scripted faults added after `FuzzScript`'s four (a metadata lag, the one-batch
    /// faults), as a list of their own after `requests`: an input written before them ends with
    /// the requests' list, decodes this list empty and so keeps its meaning.
    pub more_script: Vec<FuzzScriptMore>,
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

/// A scripted fault of `FuzzInput::more_script`; requests are taken modulo what exists, a batch
/// modulo `MAX_BATCH` (0-based, in the order the request's transfer batches are scheduled).
#[derive(Arbitrary, Debug, Clone)]
pub enum FuzzScriptMore {
    MetadataLag { request: u8, lag: u8 },
    TransferFailAt { request: u8, batch: u8 },
    DelayAt { request: u8, batch: u8, delay: u8 },
    VisibilityLagAt { request: u8, batch: u8, lag: u8 },
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

impl FuzzInput {
    /// Decodes bytes the way libfuzzer-sys hands them over; never fails (short input is zeros).
    pub fn decode(data: &[u8]) -> FuzzInput {
        FuzzInput::arbitrary(&mut Unstructured::new(data)).unwrap_or_default()
    }

    /// The scenario, valid by construction. `pinned`: the knobs of that profile, as
    /// `fuzz::draw` does for `Space::Profile` (only the deployment knobs are chosen).
    pub fn build(&self, pinned: Option<&str>) -> SimConfig {
        let context_len = table::CONTEXT_LEN.at(self.context);
        let page_size = table::PAGE_SIZE.at(self.page);
        let round = |t: u64| (t / page_size).max(2) * page_size;
        let node = |eighths: u64| NodeConfig {
            pool_tokens: round(context_len * eighths / 8),
            metadata_slots: table::METADATA_SLOTS.at(self.metadata_slots),
            max_running_requests: table::MAX_RUNNING_REQUESTS.at(self.max_running),
            pp_stages: 1,
        };
        let prefill =
            vec![node(table::PREFILL_POOL_EIGHTHS.at(self.prefill_pool)); 1 + usize::from(self.prefill_nodes % 2)];
        let decode =
            vec![node(table::DECODE_POOL_EIGHTHS.at(self.decode_pool)); 1 + usize::from(self.decode_nodes % 2)];
        let (profile, mut knobs) = match pinned.and_then(config::profile) {
            Some(p) => (p.name.to_string(), (p.knobs)()),
            None => {
                let p = &config::PROFILES[usize::from(self.profile) % config::PROFILES.len()];
                (p.name.to_string(), table::choose_knobs(&(p.knobs)(), &self.knobs))
            }
        };
        knobs.page_size = page_size;
        knobs.chunked_prefill_size = table::CHUNKED_PREFILL_SIZE.at(self.chunked_prefill);
        knobs.max_transfer_batch_pages = table::MAX_TRANSFER_BATCH_PAGES.at(self.transfer_batch);
        knobs.transfer_sync_timeout_ms = table::TRANSFER_SYNC_TIMEOUT_MS.at(self.transfer_sync_timeout);
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
        // A request byte names an existing request; a batch byte one of the first `MAX_BATCH`.
        let req = |r: u8| u32::from(r) % n;
        let at = |b: u8| u32::from(b % MAX_BATCH);
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
                    ScriptedFault::Crash {
                        at_ms: u64::from(at_ms),
                        node,
                        restart_after_ms: table::CRASH_RESTART_MS.at(restart),
                    }
                }
                FuzzScript::TransferFail { request } => ScriptedFault::TransferFail { request: req(request) },
                FuzzScript::Delay { request, delay } => {
                    ScriptedFault::Delay { request: req(request), delay_ms: table::SCRIPTED_DELAY_MS.at(delay) }
                }
                FuzzScript::VisibilityLag { request, lag } => {
                    ScriptedFault::VisibilityLag { request: req(request), lag_ms: table::VISIBILITY_LAG_MS.at(lag) }
                }
            })
            .chain(self.more_script.iter().take(MAX_SCRIPT).map(|s| match *s {
                FuzzScriptMore::MetadataLag { request, lag } => {
                    ScriptedFault::MetadataLag { request: req(request), lag_ms: table::METADATA_LAG_MS.at(lag) }
                }
                FuzzScriptMore::TransferFailAt { request, batch } => {
                    ScriptedFault::TransferFailAt { request: req(request), batch: at(batch) }
                }
                FuzzScriptMore::DelayAt { request, batch, delay } => ScriptedFault::DelayAt {
                    request: req(request),
                    batch: at(batch),
                    delay_ms: table::SCRIPTED_DELAY_MS.at(delay),
                },
                FuzzScriptMore::VisibilityLagAt { request, batch, lag } => ScriptedFault::VisibilityLagAt {
                    request: req(request),
                    batch: at(batch),
                    lag_ms: table::VISIBILITY_LAG_MS.at(lag),
                },
            }))
            .collect();
        let f = &self.faults;
        let faults = FaultConfig {
            transfer_fail: table::fault_ratio_at(f.transfer_fail),
            delay_spike: table::fault_ratio_at(f.delay_spike),
            delay_spike_ms: table::DELAY_SPIKE_MS.at(f.delay_spike_ms),
            visibility_lag: table::fault_ratio_at(f.visibility_lag),
            visibility_lag_ms: table::VISIBILITY_LAG_MS.at(f.visibility_lag_ms),
            node_crash: table::fault_ratio_at(f.node_crash),
            crash_restart_ms: table::CRASH_RESTART_MS.at(f.crash_restart_ms),
            heal_at_ms: table::HEAL_AT_MS.at(f.heal_at_ms),
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
            router_policy: table::ROUTER_POLICY.at(self.router),
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
            let _ = f.kept(&line.rec, page_size);
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
/// build a scenario, that scenario must parse and resolve under the profile the audit picks for
/// the log (a generated scenario that does not is a kvsim bug: this panics). Never panics
/// otherwise.
pub fn parse_audit_log(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(facts) = crate::audit::parse::parse_log("fuzz.log", &text) else { return };
    let files = vec![("fuzz.log".to_string(), facts, None)];
    let Ok(a) = crate::audit::analyse(&files) else { return };
    let _ = crate::audit::node_table(&a);
    if let Some(generated) = crate::audit::scenario(&a, "fuzz.log", a.default_profile().0) {
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

    /// The decoding is pinned: a digest of the scenarios 2,000 byte strings decode to, free and
    /// pinned to a profile. A change here changes what every committed corpus and regression
    /// input means; make it on purpose (and say so) or not at all.
    #[test]
    fn decoding_is_pinned() {
        let mut got = Vec::new();
        for pinned in [None, Some(DEFAULT_PROFILE)] {
            let mut h = crate::types::StableHasher::default();
            for seed in 0..2_000 {
                let data = bytes(seed, (seed as usize * 13) % 200);
                std::hash::Hash::hash(&FuzzInput::decode(&data).build(pinned), &mut h);
            }
            got.push(format!("{pinned:?}: {:016x}", std::hash::Hasher::finish(&h)));
        }
        assert_eq!(got, PINNED_DECODING, "the fuzz targets' decoding changed");
    }

    // Re-pinned for issue 13: the knobs gained four fields, then two more (decode_out_of_pages,
    // retracted_abort), then decode_reject_releases_prefill (the configuration's hash changed);
    // the bytes index the new knobs after every older one (`table::BYTES_APPENDED_KNOBS`), so a
    // committed input's bytes choose the same values for the knobs it was written against.
    // Re-pinned for decode_radix_cache, zero_page_last_chunk and decode_reject_releases_prefill (three
    // more fields, appended to the bytes' order the same way).
    // Re-pinned for pp_metadata_writer and pp_bootstrap_consensus (two more fields, appended to the
    // bytes' order the same way) and the nodes' pp_stages (the bytes keep one stage).
    // Re-pinned for `more_script` (a metadata lag and the one-batch faults, a list after the
    // requests): a byte string with bytes left after its requests' list now scripts them. The
    // committed inputs end with that list and decode as before (`fuzz_corpus` checks it).
    // Re-pinned when `vllm-nixl` took NIXL's default 30 s source lease: `source_lease_ms` gained
    // that value, so a byte choosing among its values can choose another (the committed inputs'
    // pinned fields do not move: `fuzz_corpus`). Then when sglang-0.5.22 took the released
    // room-only commit: `coverage` is no profile's value any more, so the bytes order the
    // `decode_commit_check` values differently. Then when `prefill_abort_release` gained
    // `ack_after_drain` (sglang-0.5.22's): a byte choosing among its values has three. Then when
    // sglang-0.5.22 took `transfer_timeout_semantics = returns_while_writing`: the bytes order that
    // knob's values by the profiles that use them, and `quiesced` is now only vllm-nixl's. Then
    // when `vllm-nixl` took `pp_bootstrap_consensus = follow_rank0` and `pp_metadata_writer =
    // last_stage`: the bytes order those knobs' values by the profiles that use them. Then for
    // `decode_admission` (one more field, appended to the bytes' order: `BYTES_APPENDED_KNOBS`), and
    // for `decode_loads_hold_slots` likewise, and for `prefill_checkpoint_duplicates`, and for
    // `decode_prefix_rules` (and `vllm-nixl`'s `decode_radix_cache = on`), and for
    // `retraction_host_pool`, and for `decode_first_write`, and for `decode_abort_heartbeat`.
    const PINNED_DECODING: [&str; 2] = ["None: f9fae3f9e16be78e", "Some(\"sglang-0.5.16\"): 0923ae0f82bb369b"];

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
