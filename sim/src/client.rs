//! Clients and tenants: the synthetic workload generator (arrival process, bucketed prompt and
//! output lengths with a long-context tail, client aborts) merged with explicit request lists.
//! Requests are numbered in arrival order; ties keep list order.

use crate::config::{Bucket, GeneratorConfig, RequestSpec, SimConfig};
use crate::rng::Prng;
use crate::types::{Duration, Instant, RequestId, TenantId};
use crate::world::{Ev, Req, World};

fn draw(rng: &mut Prng, buckets: &[Bucket]) -> u64 {
    let total: u64 = buckets.iter().map(|b| b.weight).sum();
    let mut x = rng.below(total);
    for b in buckets {
        if x < b.weight {
            return rng.between(b.min, b.max);
        }
        x -= b.weight;
    }
    unreachable!("weights validated non-zero in total")
}

/// Draws the generator's requests.
pub fn generate(seed: u64, g: &GeneratorConfig) -> Vec<RequestSpec> {
    let mut rng = Prng::child(seed, "workload");
    let mut t = Instant(0) + Duration::from_ms(g.start_ms);
    let mut out = Vec::with_capacity(g.requests as usize);
    for _ in 0..g.requests {
        t = t + rng.exponential(Duration::from_us(g.mean_interarrival_us));
        let tenant = rng.below(u64::from(g.tenants)) as u32;
        let prompt_tokens = draw(&mut rng, &g.prompt_tokens);
        let output_tokens = draw(&mut rng, &g.output_tokens).max(1);
        let abort_at_ns = rng
            .chance(g.client_abort)
            .then(|| t.0.saturating_add(rng.between(1, g.abort_within_ms.max(1)) * 1_000_000));
        out.push(RequestSpec {
            at_ns: t.0,
            tenant,
            prompt_tokens,
            output_tokens,
            abort_at_ns,
            prefix_blocks: vec![],
            streaming: false,
            public_blocks: 0,
        });
    }
    out
}

/// Every request of a configuration in the order the model numbers them (`RequestId` = index):
/// the explicit requests and the generator's, by arrival time; the sort is stable, so explicit
/// requests come first among equal arrival times, in file order. The one definition of request
/// order: the world, the shrinker, the scenario writer and the pictures all use it.
pub fn in_id_order(cfg: &SimConfig) -> Vec<RequestSpec> {
    let mut specs = cfg.requests.clone();
    if let Some(g) = &cfg.generator {
        specs.extend(generate(cfg.seed, g));
    }
    specs.sort_by_key(|s| s.at_ns);
    specs
}

impl World {
    pub(crate) fn build_workload(&mut self) {
        let specs = in_id_order(&self.cfg);
        // Exactly as many as there are: growing by doubling would leave up to half of the
        // largest allocation of a long run unused (every request is kept; BENCHMARKS.md, issue 14).
        // (Not the event queue: it holds every arrival at first and more once the first ones
        // start, so an exact reservation would be doubled at the first event.)
        self.reqs.reserve_exact(specs.len());
        for (i, s) in specs.into_iter().enumerate() {
            let id = RequestId(i as u32);
            self.reqs.push(Req {
                id,
                tenant: TenantId(s.tenant),
                arrival: Instant(s.at_ns),
                prompt_tokens: s.prompt_tokens,
                output_tokens: s.output_tokens,
                abort_at: s.abort_at_ns.map(Instant),
                chain: crate::prefix::chain_ids(&s.prefix_blocks),
                prefix_blocks: s.prefix_blocks,
                streaming: s.streaming,
                public_blocks: s.public_blocks,
                prefill: 0,
                decode: 0,
                room: 0,
                rejected: None,
                client_aborted: false,
                fault_touched: false,
                timed_out: false,
                late_written: false,
                late_writers: (false, false),
                room_mismatch: false,
                lagged: false,
                prefill_leg: None,
                decode_leg: None,
                decode_tokens: 0,
                first_token_at: None,
                last_token_at: None,
                token_times_digest: 0,
                prefix_reused: 0,
                prefix_hit_owner: None,
                decode_prefix_tokens: 0,
                response: None,
                caught_by: None,
                detected_by: None,
            });
            self.at(Instant(s.at_ns), Ev::Arrive { r: id });
            if let Some(a) = s.abort_at_ns {
                self.at(Instant(a), Ev::ClientAbort { r: id });
            }
        }
    }
}

/// The same workload with every prompt `f` times longer: the generator's requests are drawn once
/// and made explicit with `prompt_tokens * f` (same arrivals, tenants, outputs and aborts), and
/// every token-denominated size scales with them (context, pools, chunked-prefill budget) while
/// per-token costs are divided by `f`, so that forward passes, transfers and decode steps take the
/// same virtual time and the run processes (nearly) the same events over `f` times more tokens.
/// Decode-side token counts (outputs, `reserved_decode_tokens`) and the page size are unchanged.
pub fn scale_prompts(mut cfg: SimConfig, f: u64) -> Result<SimConfig, ScaleError> {
    let mut reqs = in_id_order(&cfg);
    cfg.generator = None;
    for r in &mut reqs {
        r.prompt_tokens *= f;
    }
    cfg.requests = reqs;
    cfg.name = format!("{}-x{f}", cfg.name);
    cfg.context_len *= f;
    for n in cfg.prefill.iter_mut().chain(cfg.decode.iter_mut()) {
        n.pool_tokens *= f;
    }
    cfg.knobs.chunked_prefill_size *= f;
    let c = &mut cfg.cost;
    if c.prefill_ns_per_token_per_kctx != 0 {
        return Err(ScaleError::ContextCost);
    }
    for (name, v) in [
        ("prefill_ns_per_token", &mut c.prefill_ns_per_token),
        ("decode_ns_per_kkv", &mut c.decode_ns_per_kkv),
        ("kv_bytes_per_token", &mut c.kv_bytes_per_token),
    ] {
        if *v % f != 0 {
            return Err(ScaleError::NotAMultiple { cost: name, value: *v, factor: f });
        }
        *v /= f;
    }
    Ok(cfg)
}

/// Why a configuration cannot be scaled by `scale_prompts` (integer costs only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleError {
    /// `prefill_ns_per_token_per_kctx` is not 0: a cost per token per thousand tokens of context
    /// would have to be divided by `f²`.
    ContextCost,
    /// A per-token cost that `f` does not divide.
    NotAMultiple { cost: &'static str, value: u64, factor: u64 },
}

impl std::fmt::Display for ScaleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScaleError::ContextCost => {
                f.write_str("scale_prompts: prefill_ns_per_token_per_kctx must be 0 (it cannot be scaled in integers)")
            }
            ScaleError::NotAMultiple { cost, value, factor } => {
                write!(f, "scale_prompts: cost `{cost}` = {value} is not a multiple of {factor}")
            }
        }
    }
}

impl std::error::Error for ScaleError {}

#[cfg(test)]
mod scale_tests {
    use super::*;

    #[test]
    fn x1000_scales_prompts_sizes_and_costs() {
        let text = include_str!("../bench-scenarios/mixed-10k.toml");
        let a = crate::scenario::Scenario::parse("mixed-10k.toml", text)
            .and_then(|s| s.resolve(&Default::default()))
            .expect("mixed-10k parses");
        let b = scale_prompts(a.clone(), 1000).expect("scales");
        let g = generate(a.seed, a.generator.as_ref().expect("generator"));
        assert!(b.generator.is_none());
        assert_eq!(b.requests.len(), g.len());
        for (x, y) in g.iter().zip(&b.requests) {
            assert_eq!(y.prompt_tokens, x.prompt_tokens * 1000);
            assert_eq!(
                (y.at_ns, y.tenant, y.output_tokens, y.abort_at_ns),
                (x.at_ns, x.tenant, x.output_tokens, x.abort_at_ns)
            );
        }
        assert_eq!(b.context_len, a.context_len * 1000);
        assert_eq!(b.decode[0].pool_tokens, a.decode[0].pool_tokens * 1000);
        assert_eq!(b.knobs.chunked_prefill_size, a.knobs.chunked_prefill_size * 1000);
        assert_eq!(b.knobs.page_size, a.knobs.page_size);
        assert_eq!(b.cost.prefill_ns_per_token * 1000, a.cost.prefill_ns_per_token);
    }
}
