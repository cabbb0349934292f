//! Request storage: every request by id, whole while it is in flight and folded into a compact
//! record once it is finished, so a long run's memory is bounded by what is in flight plus the
//! record each request leaves for the report (BENCHMARKS.md, issue 14).
//!
//! Model code indexes it as before (`w.reqs[r.idx()]`): only live requests are ever indexed, and
//! indexing a folded one panics (a kvsim bug: something still pointed at a finished request).
//! Folding is off unless the caller switches it on (`World::fold_finished`, set by `kvsim run`
//! and `kvsim bench`); runs whose callers read finished requests whole afterwards (the fuzzer's
//! signatures, the noninterference check, tests) keep every request. Post-run readers that must
//! work either way (the report, per-request latency, scenario expectations) read `summary`.

use crate::types::{Instant, RequestId, TenantId};
use crate::world::{Mitigation, Req, Response};
use std::collections::BTreeMap;

/// What the report keeps of a finished request once its state is dropped: its outcome and the
/// times its latency is computed from (64 bytes; `u64::MAX` for a token time that never came).
#[derive(Clone, Copy, Debug)]
pub struct Folded {
    arrival: u64,
    end: u64,
    tokens: u64,
    first_token_at: u64,
    last_token_at: u64,
    prompt_tokens: u64,
    output_tokens: u64,
    tenant: TenantId,
    status: u16,
    caught_by: Option<Mitigation>,
    detected_by: Option<Mitigation>,
}

/// What a request's violations' signatures name of it (`fuzz::signatures`), kept when it is
/// folded, so that a folded run (`kvsim run`) names the same signatures as a whole one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainFacts {
    pub outlived_call: bool,
    pub lagged: bool,
    pub room_mismatch: bool,
    pub late_writers: (bool, bool),
    pub late_write_timed_out: bool,
}

impl ChainFacts {
    /// Late writes landed in its pages (`Req::late_written`).
    pub fn late_written(&self) -> bool {
        self.late_writers != (false, false) || self.late_write_timed_out
    }
}

const NONE: u64 = u64::MAX;

enum Slot {
    Live(Box<Req>),
    Folded(Folded),
}

/// A request as the report reads it, live or folded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub id: RequestId,
    pub tenant: TenantId,
    pub arrival: Instant,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub response: Option<Response>,
    pub first_token_at: Option<Instant>,
    pub last_token_at: Option<Instant>,
    pub caught_by: Option<Mitigation>,
    pub detected_by: Option<Mitigation>,
}

/// Every request of a run, by id (`RequestId` = index; created in id order as they arrive).
#[derive(Default)]
pub struct Reqs {
    slots: Vec<Slot>,
    folded: usize,
    /// The prefix chains of folded requests that had one: the oracle still compares a reader's
    /// chain with the chain of the request that wrote a slot (`world::common_chain_tokens`),
    /// and that writer may have finished.
    chains: BTreeMap<u32, Vec<u64>>,
    /// The chain facts of folded requests that had any (`ChainFacts`; the rest have none).
    facts: BTreeMap<u32, ChainFacts>,
}

impl Reqs {
    /// How many requests have arrived (live and folded).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// How many are folded.
    pub fn folded(&self) -> usize {
        self.folded
    }

    pub(crate) fn push(&mut self, r: Req) {
        self.slots.push(Slot::Live(Box::new(r)));
    }

    /// Room for `n` requests in all (the workload's size, known before the first arrival), so
    /// that the table is never copied as it grows. Grown by doubling, a 10M-request run's table
    /// (at most 72 bytes a slot, `a_finished_request_costs_at_most_72_bytes`) was copied at each
    /// doubling and, at the last, held old and new at once: with an allocator that copies on
    /// `realloc` (mimalloc, the command's), `blis-fair-10m` peaked at 1,089 MB, where glibc,
    /// which remaps a large block, peaked at about 650 MB. The room is address space only: its
    /// pages become resident as slots are written.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.slots.reserve_exact(n);
    }

    /// The request whole, while it is live.
    pub fn get(&self, i: usize) -> Option<&Req> {
        match self.slots.get(i)? {
            Slot::Live(r) => Some(r),
            Slot::Folded(_) => None,
        }
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut Req> {
        match self.slots.get_mut(i)? {
            Slot::Live(r) => Some(r),
            Slot::Folded(_) => None,
        }
    }

    /// Every request whole, in id order. Only for runs that fold nothing (panics otherwise:
    /// read `summaries` instead).
    pub fn iter(&self) -> impl Iterator<Item = &Req> {
        assert_eq!(self.folded, 0, "Reqs::iter on a run that folded finished requests (read summaries)");
        self.slots.iter().filter_map(|s| match s {
            Slot::Live(r) => Some(&**r),
            Slot::Folded(_) => None,
        })
    }

    /// The request's tenant, live or folded.
    pub fn tenant(&self, i: usize) -> TenantId {
        match &self.slots[i] {
            Slot::Live(r) => r.tenant(),
            Slot::Folded(f) => f.tenant,
        }
    }

    /// The request's prefix chain, live or folded.
    pub fn chain(&self, i: usize) -> &[u64] {
        match &self.slots[i] {
            Slot::Live(r) => r.chain(),
            Slot::Folded(_) => self.chains.get(&(i as u32)).map_or(&[], |c| c),
        }
    }

    /// Request `i`'s chain facts, live or folded.
    pub fn chain_facts(&self, i: usize) -> ChainFacts {
        match &self.slots[i] {
            Slot::Live(r) => r.chain_facts(),
            Slot::Folded(_) => self.facts.get(&(i as u32)).copied().unwrap_or_default(),
        }
    }

    /// What the report reads of request `i`, live or folded.
    pub fn summary(&self, i: usize) -> Summary {
        let at = |t: u64| (t != NONE).then_some(Instant(t));
        match &self.slots[i] {
            Slot::Live(r) => Summary {
                id: r.id(),
                tenant: r.tenant(),
                arrival: r.arrival(),
                prompt_tokens: r.prompt_tokens(),
                output_tokens: r.output_tokens(),
                response: r.response(),
                first_token_at: r.first_token_at(),
                last_token_at: r.last_token_at(),
                caught_by: r.caught_by(),
                detected_by: r.detected_by(),
            },
            Slot::Folded(f) => Summary {
                id: RequestId(i as u32),
                tenant: f.tenant,
                arrival: Instant(f.arrival),
                prompt_tokens: f.prompt_tokens,
                output_tokens: f.output_tokens,
                response: Some(Response { status: f.status, at: Instant(f.end), tokens: f.tokens }),
                first_token_at: at(f.first_token_at),
                last_token_at: at(f.last_token_at),
                caught_by: f.caught_by,
                detected_by: f.detected_by,
            },
        }
    }

    /// Every request's summary, in id order.
    pub fn summaries(&self) -> impl Iterator<Item = Summary> + '_ {
        (0..self.slots.len()).map(|i| self.summary(i))
    }

    /// Drops request `i`'s state, keeping its summary (and its prefix chain, if any). The caller
    /// (`World::maybe_fold`) has checked that it is answered and that nothing points at it.
    pub(crate) fn fold(&mut self, i: usize) {
        let Slot::Live(r) = &mut self.slots[i] else { return };
        let resp = r.response().expect("only an answered request is folded");
        let f = Folded {
            arrival: r.arrival().0,
            end: resp.at.0,
            tokens: resp.tokens,
            first_token_at: r.first_token_at().map_or(NONE, |t| t.0),
            last_token_at: r.last_token_at().map_or(NONE, |t| t.0),
            prompt_tokens: r.prompt_tokens(),
            output_tokens: r.output_tokens(),
            tenant: r.tenant(),
            status: resp.status,
            caught_by: r.caught_by(),
            detected_by: r.detected_by(),
        };
        let facts = r.chain_facts();
        if facts != ChainFacts::default() {
            // Few requests have any (a fault or a late write touched them): kept beside the
            // 64-byte records, not in each.
            self.facts.insert(i as u32, facts);
        }
        if !r.chain().is_empty() {
            self.chains.insert(i as u32, r.take_chain());
        }
        self.slots[i] = Slot::Folded(f);
        self.folded += 1;
    }
}

impl std::ops::Index<usize> for Reqs {
    type Output = Req;
    fn index(&self, i: usize) -> &Req {
        self.get(i).unwrap_or_else(|| panic!("request {i} is folded (finished) or unknown"))
    }
}

impl std::ops::IndexMut<usize> for Reqs {
    fn index_mut(&mut self, i: usize) -> &mut Req {
        self.get_mut(i).unwrap_or_else(|| panic!("request {i} is folded (finished) or unknown"))
    }
}

impl<'a> IntoIterator for &'a Reqs {
    type Item = &'a Req;
    type IntoIter = Box<dyn Iterator<Item = &'a Req> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::World;

    fn report_json(w: &World) -> String {
        serde_json::to_string(&crate::report::Report::build(w, String::new())).expect("serialises")
    }

    /// The peer's workload (`blis-fair-10k`) with `requests` generated requests.
    fn blis(requests: u32) -> crate::config::SimConfig {
        let text = include_str!("../../bench-scenarios/blis-fair-10k.toml");
        let mut cfg = crate::scenario::Scenario::parse("blis-fair-10k.toml", text)
            .and_then(|s| s.resolve(&Default::default()))
            .expect("parses");
        cfg.generator.as_mut().expect("generated").requests = requests;
        cfg
    }

    fn folding(cfg: crate::config::SimConfig) -> World {
        let mut w = World::new(cfg, crate::trace::Tracer::new(None));
        w.fold_finished = true;
        w.run();
        w
    }

    /// Folding finished requests changes nothing a report says (outcomes, violations, stories,
    /// latency, every per-request record) over drawn runs with faults, aborts and violations,
    /// and it folds most requests; the trace hash and event count are the same too.
    #[test]
    fn folding_changes_no_report() {
        let (mut folded, mut total) = (0, 0);
        for seed in 1..=60 {
            let cfg = crate::fuzz::draw(seed, &crate::fuzz::Space::Blind);
            let whole = crate::simulate(cfg.clone(), None, false);
            let w = folding(cfg);
            assert_eq!(whole.reqs.folded(), 0);
            assert_eq!((w.tracer.hash_hex(), w.events), (whole.tracer.hash_hex(), whole.events), "seed {seed}");
            assert_eq!(report_json(&w), report_json(&whole), "seed {seed}");
            folded += w.reqs.folded();
            total += w.reqs.len();
        }
        assert!(folded * 2 > total, "{folded} of {total} requests folded");
    }

    /// On a clean run every request folds and every transfer job leaves: what stays is one
    /// record per request.
    #[test]
    fn a_clean_run_folds_every_request_and_keeps_no_job() {
        let w = folding(blis(2_000));
        assert!(w.oracle.violations.is_empty());
        assert_eq!((w.reqs.len(), w.reqs.folded()), (2_000, 2_000));
        assert_eq!((w.jobs.is_empty(), w.jobs.held()), (false, 0));
        assert!(w.arrivals.is_none());
    }

    /// The table has room for the whole workload before the first arrival, and is never moved
    /// while the run fills it (`Reqs::reserve`: no doubling copies, no old and new table held at
    /// once).
    #[test]
    fn the_request_table_is_sized_to_the_workload() {
        let mut w = World::new(blis(3_000), crate::trace::Tracer::new(None)); // past `client::KEPT_SPECS`
        w.fold_finished = true;
        assert_eq!(w.reqs.len(), 0);
        assert!(w.reqs.slots.capacity() >= 3_000, "{}", w.reqs.slots.capacity());
        let table = w.reqs.slots.as_ptr();
        w.run();
        assert_eq!(w.reqs.len(), 3_000);
        assert_eq!(w.reqs.slots.as_ptr(), table, "the table moved");
    }

    /// A folded record is 64 bytes and a slot at most 72: what a finished request costs for the rest of
    /// the run (BENCHMARKS.md, issue 14).
    #[test]
    fn a_finished_request_costs_at_most_72_bytes() {
        assert_eq!(std::mem::size_of::<Folded>(), 64);
        assert!(std::mem::size_of::<Slot>() <= 72, "{}", std::mem::size_of::<Slot>());
    }
}
