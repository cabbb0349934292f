//! Clients and tenants: the synthetic workload generator (arrival process, bucketed prompt and
//! output lengths with a long-context tail, client aborts) merged with explicit request lists.
//! Requests are numbered in arrival order; ties keep list order.

use crate::config::{Bucket, GeneratorConfig, RequestSpec, SimConfig};
use crate::event::Ev;
use crate::rng::Prng;
use crate::types::{Duration, Instant, RequestId};
use crate::world::{Req, World};

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

/// The generator's requests, drawn one at a time in arrival order (the draws `generate` makes,
/// in the same order): a long workload is never held whole (BENCHMARKS.md, issue 14).
pub struct Generated {
    rng: Prng,
    t: Instant,
    left: u32,
    g: GeneratorConfig,
}

impl Generated {
    pub fn new(seed: u64, g: &GeneratorConfig) -> Generated {
        Generated {
            rng: Prng::child(seed, "workload"),
            t: Instant(0) + Duration::from_ms(g.start_ms),
            left: g.requests,
            g: g.clone(),
        }
    }
}

impl Iterator for Generated {
    type Item = RequestSpec;
    fn next(&mut self) -> Option<RequestSpec> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (g, rng) = (&self.g, &mut self.rng);
        self.t = self.t + rng.exponential(Duration::from_us(g.mean_interarrival_us));
        let t = self.t;
        let tenant = rng.below(u64::from(g.tenants)) as u32;
        let prompt_tokens = draw(rng, &g.prompt_tokens);
        let output_tokens = draw(rng, &g.output_tokens).max(1);
        let abort_at_ns = rng
            .chance(g.client_abort)
            .then(|| t.0.saturating_add(rng.between(1, g.abort_within_ms.max(1)) * 1_000_000));
        Some(RequestSpec {
            at_ns: t.0,
            tenant,
            prompt_tokens,
            output_tokens,
            abort_at_ns,
            prefix_blocks: vec![],
            streaming: false,
            public_blocks: 0,
        })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// Draws the generator's requests.
pub fn generate(seed: u64, g: &GeneratorConfig) -> Vec<RequestSpec> {
    Generated::new(seed, g).collect()
}

/// Every request of a configuration in id order, one at a time: the explicit requests (sorted
/// stably by arrival) merged with the generator's stream, an explicit request first on equal
/// arrival times — exactly the order of `in_id_order`'s stable sort, without holding the
/// generator's requests.
pub struct InIdOrder {
    explicit: std::iter::Peekable<std::vec::IntoIter<RequestSpec>>,
    generated: Option<std::iter::Peekable<Generated>>,
}

impl InIdOrder {
    pub fn new(cfg: &SimConfig) -> InIdOrder {
        let mut explicit = cfg.requests.clone();
        explicit.sort_by_key(|s| s.at_ns);
        let generated = cfg.generator.as_ref().map(|g| Generated::new(cfg.seed, g).peekable());
        InIdOrder { explicit: explicit.into_iter().peekable(), generated }
    }
}

impl Iterator for InIdOrder {
    type Item = RequestSpec;
    fn next(&mut self) -> Option<RequestSpec> {
        let gen_at = self.generated.as_mut().and_then(|g| g.peek()).map(|g| g.at_ns);
        match (self.explicit.peek(), gen_at) {
            (Some(e), Some(g)) if g < e.at_ns => self.generated.as_mut()?.next(),
            (Some(_), _) => self.explicit.next(),
            (None, _) => self.generated.as_mut()?.next(),
        }
    }
}

/// Every request of a configuration in the order the model numbers them (`RequestId` = index):
/// the explicit requests and the generator's, by arrival time; the sort is stable, so explicit
/// requests come first among equal arrival times, in file order. The one definition of request
/// order: the world (through `InIdOrder`, the same order streamed), the shrinker, the scenario
/// writer and the pictures all use it.
pub fn in_id_order(cfg: &SimConfig) -> Vec<RequestSpec> {
    InIdOrder::new(cfg).collect()
}

/// The sequence numbers of the events queued before the run starts. Arrivals and client aborts
/// come first, numbered in id order (a request's arrival, then its abort), as if every one were
/// queued up front; a scripted crash comes after all of them and every event scheduled while
/// running after those. Only the relative order of sequence numbers is observable (it breaks
/// ties between events due at the same time; no trace record or digest holds the numbers), so
/// these fixed bases give exactly the order that queuing the whole workload first gave, without
/// knowing its size in advance.
pub(crate) const CRASH_SEQ_BASE: u64 = 1 << 62;
/// The sequence number after which events scheduled while running are numbered.
pub(crate) const RUN_SEQ_BASE: u64 = 1 << 63;

/// Arrivals not yet due: the workload in id order, each request's `Req` created and its client
/// abort queued only when its arrival is taken (`World::step` merges this stream with the event
/// queue by `(time, sequence)`), so that neither the workload nor its arrival events are held
/// whole (BENCHMARKS.md, issue 14).
/// An event's time and sequence number.
type Timed = (Instant, u64);

/// At most this many requests' specs are kept from the pass that measures the workload (a
/// fuzzer-sized run's few), so the run's arrivals need not draw the generator again; a larger
/// workload is drawn again as it runs (memory bounded by what is in flight, not by the workload).
const KEPT_SPECS: usize = 1024;

/// The workload in id order: kept from the measuring pass, or drawn again.
enum Specs {
    Kept(std::vec::IntoIter<RequestSpec>),
    /// Boxed: only a workload of more than `KEPT_SPECS` requests draws again.
    Drawn(Box<InIdOrder>),
}

impl Iterator for Specs {
    type Item = RequestSpec;
    #[inline]
    fn next(&mut self) -> Option<RequestSpec> {
        match self {
            Specs::Kept(k) => k.next(),
            Specs::Drawn(d) => d.next(),
        }
    }
}

pub(crate) struct Arrivals {
    specs: std::iter::Peekable<Specs>,
    /// The id and sequence number of the next arrival.
    next_id: u32,
    next_seq: u64,
}

impl Arrivals {
    /// The next arrival's `(time, sequence)`, the key it is ordered by against queued events.
    pub(crate) fn head(&mut self) -> Option<(Instant, u64)> {
        let seq = self.next_seq;
        self.specs.peek().map(|s| (Instant(s.at_ns), seq))
    }

    /// Takes the next arrival: its request, its sequence number, and its client abort with the
    /// abort's sequence number.
    fn take(&mut self) -> Option<(Req, u64, Option<Timed>)> {
        let s = self.specs.next()?;
        let (id, seq) = (RequestId(self.next_id), self.next_seq);
        self.next_id += 1;
        self.next_seq += 1;
        let abort = s.abort_at_ns.map(|a| {
            self.next_seq += 1;
            (Instant(a), seq + 1)
        });
        Some((Req::new(id, s), seq, abort))
    }
}

impl World {
    /// Sets up the workload as a stream of arrivals, and returns the last arrival time (the
    /// liveness horizon's base). One pass over the workload measures it; up to `KEPT_SPECS`
    /// requests it keeps what it drew for the run's arrivals, beyond that it keeps nothing and the
    /// generator is drawn again, in the same order, as the run takes its arrivals. A workload
    /// with a client abort before its request's arrival (never from the generator; the scenario
    /// parser refuses it too) is queued whole instead, where the abort keeps its place.
    pub(crate) fn build_workload(&mut self) -> Instant {
        let mut last = Instant(0);
        let mut early_abort = false;
        let total = self.cfg.requests.len() + self.cfg.generator.as_ref().map_or(0, |g| g.requests as usize);
        let mut kept = (total <= KEPT_SPECS).then(|| Vec::with_capacity(total));
        // A configuration built in code is not validated against the scenario limit; past it
        // the table grows as before.
        self.reqs.reserve(total.min(crate::scenario::MAX_REQUESTS as usize));
        for s in InIdOrder::new(&self.cfg) {
            last = last.max(Instant(s.at_ns));
            early_abort |= s.abort_at_ns.is_some_and(|a| a < s.at_ns);
            if let Some(k) = kept.as_mut() {
                k.push(s);
            }
        }
        let specs = match kept {
            Some(k) => Specs::Kept(k.into_iter()),
            None => Specs::Drawn(Box::new(InIdOrder::new(&self.cfg))),
        };
        self.arrivals = Some(Arrivals { specs: specs.peekable(), next_id: 0, next_seq: 1 });
        if early_abort {
            self.materialize_arrivals();
        }
        last
    }

    /// Takes the next arrival from the stream: creates its `Req`, queues its client abort, and
    /// returns its arrival event with the arrival's sequence number.
    pub(crate) fn take_arrival(&mut self) -> Option<(Instant, u64, Ev)> {
        let (req, seq, abort) = self.arrivals.as_mut()?.take()?;
        let (r, at) = (req.id(), req.arrival());
        debug_assert_eq!(r.idx(), self.reqs.len(), "requests are created in id order");
        self.reqs.push(req);
        self.reqs[r.idx()].note_event_queued(); // its arrival, queued or about to be handled
        if self.reqs.len() - self.reqs.folded() > self.max_in_flight {
            // Stops at the next event, as the event limit does (no check on the event path). A
            // run that keeps every request (a trace, a check, a campaign draw) holds them all,
            // finished or not: the same bound on what it holds.
            self.in_flight_limit_hit = true;
            self.max_events = self.events;
        }
        if let Some((a, aseq)) = abort {
            let ev = Ev::ClientAbort { r };
            self.count_pending(&ev);
            self.push_event(a, aseq, ev);
        }
        Some((at, seq, Ev::Arrive { r }))
    }

    /// Creates every request not yet arrived and queues its arrival (and abort) with the
    /// sequence numbers the stream would have given: the whole workload queued up front, as
    /// exploration, liveness mode, the reference oracle and a run cut short need (they read every
    /// request or every pending event). The order of events is the same either way.
    pub fn materialize_arrivals(&mut self) {
        while let Some((at, seq, ev)) = self.take_arrival() {
            self.push_event(at, seq, ev);
        }
        self.arrivals = None;
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
        let text = include_str!("../../bench-scenarios/mixed-10k.toml");
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
