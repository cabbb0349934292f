//! Swarm fuzzing: each run draws a whole scenario from its seed — cluster shape, pool sizes
//! relative to the context, page size, allocator, workload shape and tenants, which faults are on
//! and how often, and (unless pinned by a profile or a base scenario) every engine knob. Failures
//! are grouped by a signature (violation kind plus mechanism), not by seed.

use crate::check::Kind;
use crate::config::{
    self, Bucket, CostConfig, FaultConfig, GeneratorConfig, Knobs, NodeConfig, RouterPolicy, SimConfig,
};
use crate::rng::Prng;
use crate::types::Ratio;
use crate::world::World;
use std::collections::BTreeSet;

/// Which part of the space a campaign draws from.
#[derive(Clone, Debug)]
pub enum Space {
    /// Everything drawn, knobs included.
    Blind,
    /// Knobs from this profile; deployment and workload drawn.
    Profile(String),
    /// This scenario with the run's seed (its generator and random faults re-drawn).
    Base(Box<SimConfig>),
    /// Prefix-heavy: the deployment and knobs of the inner space (`Blind` or `Profile`), the
    /// radix cache on, and explicit requests whose prompts share prefix chains (`draw_prefix_requests`).
    Prefix(Box<Space>),
}

fn pick<T: Copy>(rng: &mut Prng, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize]
}

fn ratio(rng: &mut Prng, on: bool) -> Ratio {
    if on {
        Ratio { num: 1, den: pick(rng, &[5, 20, 50, 200]) }
    } else {
        Ratio::NEVER
    }
}

/// Draws every knob from its values, independently.
pub fn draw_knobs(rng: &mut Prng, base: &Knobs) -> Knobs {
    let table = toml::Table::try_from(base).expect("knobs serialise");
    // Enum knobs: pick among the values the profiles use (buggy and fixed).
    let mut variants: Vec<(String, Vec<toml::Value>)> = Vec::new();
    for name in table.keys() {
        let mut vals: Vec<toml::Value> = Vec::new();
        for p in config::PROFILES {
            let t = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
            let v = t[name].clone();
            if !vals.contains(&v) {
                vals.push(v);
            }
        }
        variants.push((name.clone(), vals));
    }
    let mut t = table;
    for (name, vals) in variants {
        let v = match name.as_str() {
            "kv_checksum" | "page_tags" => toml::Value::String(pick(rng, &["off", "off", "off", "on"]).into()),
            "kv_canary" => toml::Value::String(pick(rng, &["off", "off", "off", "log", "raise"]).into()),
            "decode_commit_check" => {
                toml::Value::String(pick(rng, &["room_only", "room_only", "coverage", "assert_crash"]).into())
            }
            "free_list_policy" => toml::Value::String(pick(rng, &["sorted_on_merge", "lifo", "fifo", "lru"]).into()),
            "zero_on_free" => toml::Value::Boolean(rng.below(8) == 0),
            "page_size" | "chunked_prefill_size" | "transfer_sync_timeout_ms" | "max_transfer_batch_pages" => continue,
            _ => vals[rng.below(vals.len() as u64) as usize].clone(),
        };
        t.insert(name, v);
    }
    t.try_into().expect("every drawn value is one a profile uses")
}

/// The cost model of drawn scenarios (faster forwards than the shipped default, so small runs
/// stay short in virtual time).
pub fn fuzz_cost() -> CostConfig {
    CostConfig {
        prefill_base_us: 1_000,
        prefill_ns_per_token: 20_000,
        prefill_ns_per_token_per_kctx: 20,
        decode_step_base_us: 10_000,
        decode_ns_per_kkv: 2_000,
        kv_bytes_per_token: 70_000,
        transfer_latency_us: 500,
        transfer_bytes_per_us: 25_000,
        message_latency_us: 200,
    }
}

/// A prefix-heavy workload: 4–24 requests of 1–4 tenants whose prompts are whole 512-token blocks
/// (plus, sometimes, a partial tail block) drawn from a small alphabet — three "system prompts"
/// for the first block, six ids after it — so chains are shared across tenants and requests, the
/// same id follows different prefixes, and tenants re-send blocks they sent before.
pub fn draw_prefix_requests(rng: &mut Prng, context_len: u64) -> Vec<config::RequestSpec> {
    let n = rng.between(4, 24);
    let tenants = rng.between(1, 4);
    let gap_us = pick(rng, &[1_000u64, 20_000, 200_000]);
    let max_blocks = (context_len / crate::prefix::BLOCK_TOKENS).saturating_sub(1).clamp(1, 8);
    let mut at = 0u64;
    let mut out = Vec::new();
    for _ in 0..n {
        at += rng.below(2 * gap_us + 1) * 1_000;
        let k = rng.between(1, max_blocks);
        let mut blocks = vec![rng.between(1, 3)];
        for _ in 1..k {
            blocks.push(rng.between(1, 6));
        }
        let tail = if rng.below(2) == 0 { 0 } else { rng.between(1, 511) };
        if tail > 0 && rng.below(2) == 0 {
            blocks.push(rng.between(1, 6));
        }
        out.push(config::RequestSpec {
            at_ns: at,
            tenant: rng.below(tenants) as u32,
            prompt_tokens: k * crate::prefix::BLOCK_TOKENS + tail,
            output_tokens: rng.between(1, 40),
            abort_at_ns: (rng.below(8) == 0).then(|| at + rng.between(1, 300) * 1_000_000),
            prefix_blocks: blocks,
            public_blocks: 0,
        });
    }
    out
}

/// Draws a whole scenario for run `seed`.
pub fn draw(seed: u64, space: &Space) -> SimConfig {
    if let Space::Prefix(inner) = space {
        let mut c = draw(seed, inner);
        let mut rng = Prng::child(seed, "prefix");
        c.knobs.prefill_cache = config::PrefillCache::Radix;
        c.knobs.prefix_cache_scope =
            pick(&mut rng, &[config::PrefixCacheScope::Global, config::PrefixCacheScope::PerTenant]);
        c.generator = None;
        c.requests = draw_prefix_requests(&mut rng, c.context_len);
        c.name = format!("fuzz-prefix-seed{seed}");
        return c;
    }
    if let Space::Base(b) = space {
        let mut c = (**b).clone();
        c.seed = seed;
        c.name = format!("{}-seed{seed}", b.name);
        return c;
    }
    let mut rng = Prng::child(seed, "swarm");
    let context_len = pick(&mut rng, &[2048u64, 4096, 8192, 16384, 32768]);
    let page_size = pick(&mut rng, &[1u64, 4, 16, 64]);
    let round = |t: u64| (t / page_size).max(2) * page_size;
    // Pools relative to the context: sometimes smaller (the incident's shape), sometimes larger.
    let pf = pick(&mut rng, &[3u64, 4, 6, 8, 12, 16]);
    let df = pick(&mut rng, &[6u64, 8, 12, 16, 24, 32]);
    let nprefill = rng.between(1, 2) as usize;
    let ndecode = rng.between(1, 2) as usize;
    let meta = pick(&mut rng, &[2u32, 8, 64]);
    let prefill =
        vec![
            NodeConfig { pool_tokens: round(context_len * pf / 8), metadata_slots: meta, max_running_requests: 64 };
            nprefill
        ];
    let decode =
        vec![
            NodeConfig { pool_tokens: round(context_len * df / 8), metadata_slots: meta, max_running_requests: 64 };
            ndecode
        ];
    let base = match space {
        Space::Profile(p) => (config::profile(p).expect("validated profile").knobs)(),
        _ => (config::PROFILES[0].knobs)(),
    };
    let mut knobs = match space {
        Space::Blind => draw_knobs(&mut rng, &base),
        _ => base,
    };
    knobs.page_size = page_size;
    knobs.chunked_prefill_size = pick(&mut rng, &[256u64, 1024, 4096]);
    knobs.max_transfer_batch_pages = if rng.below(2) == 0 { 0 } else { pick(&mut rng, &[4u64, 64]) };
    knobs.transfer_sync_timeout_ms = pick(&mut rng, &[500u64, 5_000, 60_000]);
    let w = |rng: &mut Prng| pick(rng, &[0u64, 1, 3, 10]);
    let mut prompt = vec![
        Bucket { weight: w(&mut rng), min: 1, max: (context_len / 16).max(1) },
        Bucket { weight: w(&mut rng), min: (context_len / 16).max(1), max: context_len / 2 },
        Bucket { weight: w(&mut rng), min: context_len / 2, max: context_len + context_len / 8 },
    ];
    if prompt.iter().all(|b| b.weight == 0) {
        prompt[0].weight = 1;
    }
    let requests = pick(&mut rng, &[2u32, 4, 8, 16, 32]);
    let faults_on = [rng.below(3) == 0, rng.below(3) == 0, rng.below(4) == 0, rng.below(6) == 0];
    let aborts_on = rng.below(3) == 0;
    let generator = GeneratorConfig {
        requests,
        tenants: rng.between(1, 4) as u32,
        mean_interarrival_us: pick(&mut rng, &[1_000u64, 50_000, 500_000]),
        prompt_tokens: prompt,
        output_tokens: vec![Bucket { weight: 1, min: 1, max: pick(&mut rng, &[1u64, 8, 64]) }],
        client_abort: ratio(&mut rng, aborts_on),
        abort_within_ms: pick(&mut rng, &[5u64, 200, 2_000]),
        start_ms: 0,
    };
    let faults = FaultConfig {
        transfer_fail: ratio(&mut rng, faults_on[0]),
        delay_spike: ratio(&mut rng, faults_on[1]),
        delay_spike_ms: pick(&mut rng, &[100u64, 10_000]),
        visibility_lag: ratio(&mut rng, faults_on[2]),
        visibility_lag_ms: pick(&mut rng, &[1u64, 50]),
        node_crash: ratio(&mut rng, faults_on[3]),
        crash_restart_ms: 2_000,
        heal_at_ms: 60_000,
        script: vec![],
    };
    SimConfig {
        name: format!("fuzz-seed{seed}"),
        seed,
        profile: match space {
            Space::Profile(p) => p.clone(),
            _ => "sglang-0.5.16".into(),
        },
        knobs,
        context_len,
        prefill,
        decode,
        router_policy: pick(&mut rng, &[RouterPolicy::RoundRobin, RouterPolicy::Random, RouterPolicy::LeastLoaded]),
        cost: fuzz_cost(),
        generator: Some(generator),
        requests: vec![],
        faults,
        liveness_bound_s: 1_200,
    }
}

/// A violation's signature: kind and mechanism, e.g. `cross_tenant_read/stub_commit`; a
/// disagreement of the two oracles (a kvsim bug) is `oracle_disagreement/<read>`.
pub fn signatures(w: &World) -> BTreeSet<String> {
    let mut s: BTreeSet<String> =
        w.oracle.violations.iter().map(|v| format!("{}/{}", v.kind.name(), v.cause)).collect();
    if let Some(rf) = &w.reference {
        s.extend(rf.signatures());
    }
    if w.event_limit_hit {
        s.insert(EVENT_LIMIT.to_string());
    }
    s
}

/// The signature of a run that reached the event limit (inconclusive about liveness).
pub const EVENT_LIMIT: &str = "event_limit";

/// Whether a signature is a disagreement between the fast and the reference oracle.
pub fn is_disagreement(sig: &str) -> bool {
    sig.starts_with("oracle_disagreement/")
}

/// The deterministic sample of runs a campaign checks differentially by default: one seed in 64,
/// chosen by a hash of the seed (not `seed % 64`, so any seed range is sampled evenly).
pub fn sampled_for_check(seed: u64) -> bool {
    let mut h = crate::types::StableHasher::default();
    std::hash::Hash::hash(&("check-oracle", seed), &mut h);
    std::hash::Hasher::finish(&h) % 64 == 0
}

/// Runs a configuration the way a signature needs: with the differential check when the
/// signature is an oracle disagreement.
pub fn simulate_for(cfg: SimConfig, sig: &str) -> World {
    if is_disagreement(sig) {
        crate::simulate_checked(cfg, None, false)
    } else if is_channel(sig) {
        let mut w = crate::simulate(cfg.clone(), None, false);
        crate::check::noninterference::apply(&cfg, &mut w, None);
        w
    } else {
        crate::simulate(cfg, None, false)
    }
}

/// Whether a signature is a finding of the noninterference check (`timing_channel/…`,
/// `status_channel/…`): reproducing it needs `--check noninterference`.
pub fn is_channel(sig: &str) -> bool {
    sig.starts_with("timing_channel/") || sig.starts_with("status_channel/")
}

/// Whether a signature names a safety violation (liveness ones are kept apart).
pub fn is_safety(sig: &str) -> bool {
    sig.split('/').next().and_then(Kind::parse).is_some_and(|k| !k.is_liveness())
}

/// Runs one drawn case.
pub fn run_case(cfg: SimConfig) -> (World, BTreeSet<String>) {
    run_case_checked(cfg, false)
}

/// Runs one drawn case, with the differential oracle check when `check`.
pub fn run_case_checked(cfg: SimConfig, check: bool) -> (World, BTreeSet<String>) {
    run_case_with(cfg, check, false)
}

/// Runs one drawn case, with the differential oracle check when `check` and the
/// noninterference check (every tenant that sends prefix blocks, in turn) when `noninterference`.
///
/// One run in `INVARIANT_SAMPLE` (chosen by a hash of the seed) also checks every component's
/// invariants after every event; a broken invariant is a model bug and becomes the signature
/// `invariant_broken/<component>` (the run is repeated without the check for its report).
pub fn run_case_with(cfg: SimConfig, check: bool, noninterference: bool) -> (World, BTreeSet<String>) {
    let broken = if sampled_for_invariants(cfg.seed) { invariant_failure(&cfg) } else { None };
    let mut w = if check {
        crate::simulate_checked(cfg.clone(), None, false)
    } else {
        crate::simulate(cfg.clone(), None, false)
    };
    if noninterference {
        crate::check::noninterference::apply(&cfg, &mut w, None);
    }
    let mut s = signatures(&w);
    s.extend(broken);
    (w, s)
}

/// One campaign run in this many checks the model's invariants after every event (measured cost
/// of the check on campaign runs: 2.2x; sampled 1 in 16, +4.5% CPU — BENCHMARKS.md).
pub const INVARIANT_SAMPLE: u64 = 16;

/// Whether run `seed` checks invariants (a hash of the seed, so any seed range samples evenly).
pub fn sampled_for_invariants(seed: u64) -> bool {
    let mut h = crate::types::StableHasher::default();
    std::hash::Hash::hash(&("check-invariants", seed), &mut h);
    std::hash::Hasher::finish(&h) % INVARIANT_SAMPLE == 0
}

/// Runs `cfg` with every invariant checked after every event; on a broken one, the signature
/// `invariant_broken/<what broke>` (the panic message's first word: the pool or node it names).
pub fn invariant_failure(cfg: &SimConfig) -> Option<String> {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::simulate(cfg.clone(), None, true);
    }));
    let err = run.err()?;
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("panic");
    Some(invariant_signature(msg))
}

/// The signature of a broken invariant from its panic message: the message's first word (the pool
/// or node the invariant names, e.g. `decode-0` of "decode-0: held-page count drifted").
pub fn invariant_signature(msg: &str) -> String {
    let what: String = msg
        .split(|c: char| c == ':' || c.is_whitespace())
        .find(|w| !w.is_empty())
        .unwrap_or("panic")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    format!("{INVARIANT_BROKEN}/{}", if what.is_empty() { "panic" } else { &what })
}

/// The signature prefix of a broken model invariant (a kvsim bug, like an oracle disagreement).
pub const INVARIANT_BROKEN: &str = "invariant_broken";

/// Whether a signature says kvsim itself is wrong (oracle disagreement or broken invariant).
pub fn is_model_bug(sig: &str) -> bool {
    is_disagreement(sig) || sig.starts_with("invariant_broken/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invariants_are_sampled_evenly_and_named_by_what_broke() {
        let sampled = (0..16_000u64).filter(|&s| sampled_for_invariants(s)).count();
        assert!((800..1200).contains(&sampled), "{sampled} of 16,000 seeds sampled (expect ~1,000)");
        assert_eq!(invariant_signature("decode-0: held-page count drifted"), "invariant_broken/decode-0");
        assert_eq!(invariant_signature("overlapping runs at 5"), "invariant_broken/overlapping");
        assert_eq!(invariant_signature(": \u{1b}[31m"), "invariant_broken/31m");
        assert_eq!(invariant_signature(""), "invariant_broken/panic");
        assert!(is_model_bug("invariant_broken/decode-0") && !is_safety("invariant_broken/decode-0"));
    }

    #[test]
    fn drawn_scenarios_keep_their_invariants() {
        for seed in 0..64 {
            let cfg = draw(seed, &Space::Blind);
            assert_eq!(invariant_failure(&cfg), None, "seed {seed}");
        }
    }

    #[test]
    fn draws_are_deterministic_and_valid() {
        for seed in 0..200 {
            let a = draw(seed, &Space::Blind);
            assert_eq!(a, draw(seed, &Space::Blind));
            // The drawn scenario survives a round trip through the scenario file format.
            let text = crate::scenario::to_toml(&a, "test");
            let back = crate::scenario::Scenario::parse("drawn.toml", &text)
                .and_then(|s| s.resolve(&Default::default()))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
            let (wa, _) = run_case(a);
            let (wb, _) = run_case(back);
            assert_eq!(wa.tracer.hash_hex(), wb.tracer.hash_hex(), "seed {seed}");
        }
    }
}
