//! Clients and tenants: the synthetic workload generator (arrival process, bucketed prompt and
//! output lengths with a long-context tail, client aborts) merged with explicit request lists.
//! Requests are numbered in arrival order; ties keep list order.

use crate::config::{Bucket, GeneratorConfig, RequestSpec};
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
        });
    }
    out
}

impl World {
    pub(crate) fn build_workload(&mut self) {
        let mut specs = self.cfg.requests.clone();
        if let Some(g) = &self.cfg.generator {
            specs.extend(generate(self.cfg.seed, g));
        }
        // Stable: explicit requests keep their order among equal arrival times.
        specs.sort_by_key(|s| s.at_ns);
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
                prefill: 0,
                decode: 0,
                room: 0,
                rejected: None,
                client_aborted: false,
                fault_touched: false,
                timed_out: false,
                late_written: false,
                lagged: false,
                prefill_leg: None,
                decode_leg: None,
                decode_tokens: 0,
                first_token_at: None,
                last_token_at: None,
                token_times_digest: 0,
                prefix_reused: 0,
                prefix_hit_owner: None,
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
