//! The model's own coverage: which (event, state) pairs a run visited, for coverage-guided
//! campaigns (`fuzz::guided`). libFuzzer steers by the edges of compiled code; a kvsim run's
//! "edges" are the lifecycle transitions of its requests and the queue/pool shapes of its nodes,
//! each taken by some event: for every event the world dispatches, the subject request's phase
//! before and after (prefill leg phase and sender state, decode leg phase and status, final
//! status, abort/lag/late-write flags), the subject node's shape before and after (alive, busy,
//! queue lengths and free pages, bucketed) and every violation the event raised. Three edges come
//! from inside the model, where the event alone does not say it: whose pages a late write landed
//! in and that holder's phase (`World::cover_foreign_write`), which classes of slot a
//! late-written request's read found (`World::decode_step_done`), and whose metadata slot a row
//! landed in (free, its own request's, or another's with its phase) over a stale row or not
//! (`World::cover_meta_land`). Which knob
//! branch the engine took shows up as the transition it produced (`decode_transferred_abort =
//! leak` is the only way to reach a `Leaked` decode leg, `metadata_zero_on_free = off` the only
//! way to a room mismatch).
//!
//! Coverage is observation only: it never enters the trace, its hash or `World::state_digest`,
//! and the model never reads it, so every trace hash stays what it was. It is off unless a guided
//! campaign asks for it (`World::coverage` is `None`: `World::step` skips the probe), since
//! nothing else reads it and the probe runs on every event.

use crate::event::Ev;
use crate::types::{DecodeIdx, JobId, NodeId, NodeIdx, PrefillIdx, RequestId, Role};
use crate::world::World;

/// Slots of the hit-count map (a power of two). Collisions merge two edges, as in libFuzzer's
/// 8-bit counters; 16k slots keep them rare for the few thousand edges a campaign sees.
const SLOTS: usize = 1 << 14;
/// Slots after [`SLOTS`] for the run's signatures ([`Coverage::hit_signatures`]), so a guided
/// campaign can tell a signature edge from a model edge ([`is_signature_edge`]).
const SIGNATURE_SLOTS: usize = 1 << 12;

/// Whether edge `e` (of [`Coverage::edge_set`]) is one of the run's signatures, not a model edge.
pub fn is_signature_edge(e: u32) -> bool {
    e as usize >= SLOTS
}

/// Per-run hit counts of hashed edges. A feature is a slot with its count's bucket (1, 2–3,
/// 4–15, 16+): a run that takes an edge more often than any earlier run is new coverage too, as
/// in libFuzzer, but coarser (finer buckets made almost every larger run "new", and a corpus
/// that keeps everything steers nothing).
#[derive(Clone)]
pub struct Coverage {
    counts: Box<[u8]>,
}

impl Default for Coverage {
    fn default() -> Self {
        Coverage { counts: vec![0u8; SLOTS + SIGNATURE_SLOTS].into_boxed_slice() }
    }
}

impl std::fmt::Debug for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Coverage({} edges)", self.counts.iter().filter(|c| **c > 0).count())
    }
}

/// A stable 64-bit mix (splitmix64 finaliser) of an edge's parts.
fn mix(parts: &[u64]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for &p in parts {
        h ^= p.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_add(h << 6).wrapping_add(h >> 2);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

/// The bucket of a hit count (0 for none).
fn bucket(c: u8) -> u32 {
    match c {
        0 => 0,
        1 => 1,
        2..=3 => 2,
        4..=15 => 3,
        _ => 4,
    }
}

impl Coverage {
    /// Records one visit of the edge named by `parts`.
    pub fn hit(&mut self, parts: &[u64]) {
        let i = (mix(parts) as usize) & (SLOTS - 1);
        self.counts[i] = self.counts[i].saturating_add(1);
    }

    /// Whether the run took the model edge of these parts (the parts a `hit` call named; for
    /// examples that ask what a run reached, e.g. `sim/examples/mutation_yield.rs`).
    pub fn was_hit(&self, parts: &[u64]) -> bool {
        self.counts[(mix(parts) as usize) & (SLOTS - 1)] > 0
    }

    /// The run's features, ascending: `slot * 16 + bucket` for every slot hit.
    pub fn features(&self) -> Vec<u32> {
        self.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| (i as u32) * 16 + bucket(*c)).collect()
    }

    /// The run's edges, ascending (slots hit, counts ignored): what a guided campaign steers by.
    /// With hit-count buckets (`features`), a third of all runs were "new" and the corpus
    /// steered nothing (measured: 1,030 entries of 3,000 blind runs, fewer signatures than the
    /// swarm); with edges alone the corpus keeps the runs that reached a transition first.
    pub fn edge_set(&self) -> Vec<u32> {
        self.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, _)| i as u32).collect()
    }

    /// Records the run's signatures as edges (slots of their own): every prefix of each mechanism chain
    /// (`cross_tenant_read`, `cross_tenant_read/late_write`, …) and each link of the chain alone.
    /// A run that shows a chain no earlier run showed is then new coverage, joins the corpus,
    /// and (its edge being the rarest the campaign has) parents many mutated runs, as AFL keeps
    /// and mutates the inputs that crashed. On the blind space the swarm's signatures come in
    /// families (one lagged late write read by three victim classes): the mutations of the run
    /// that met one member look for its siblings. Called after the run, on the signatures the
    /// campaign counts; like every edge it is observation only.
    pub fn hit_signatures<'a>(&mut self, sigs: impl IntoIterator<Item = &'a String>) {
        const SIGNATURE: u64 = 0x5167;
        let h = |s: &str| {
            let mut h = crate::types::StableHasher::default();
            std::hash::Hash::hash(s, &mut h);
            std::hash::Hasher::finish(&h)
        };
        let mut hit = |parts: &[u64]| {
            let i = SLOTS + (mix(parts) as usize & (SIGNATURE_SLOTS - 1));
            self.counts[i] = self.counts[i].saturating_add(1);
        };
        for sig in sigs {
            for (i, _) in sig.match_indices('/').chain(std::iter::once((sig.len(), ""))) {
                hit(&[SIGNATURE, 0, h(&sig[..i])]);
            }
            for link in sig.split('/') {
                hit(&[SIGNATURE, 1, h(link)]);
            }
        }
    }

    /// How many distinct edges the run visited.
    pub fn edges(&self) -> usize {
        self.counts.iter().filter(|c| **c > 0).count()
    }
}

/// What one event is about, taken before it is dispatched (the event itself moves into the
/// dispatch); `after` records its edges.
pub struct Probe {
    kind: u64,
    req: Option<RequestId>,
    node: Option<NodeId>,
    req_before: u64,
    node_before: u64,
    violations: usize,
}

/// The event's kind (a stable small number) and the request and node it is about.
fn subject(w: &World, ev: &Ev) -> (u64, Option<RequestId>, Option<NodeId>) {
    let p = |n: PrefillIdx| Some(n.node());
    let d = |n: DecodeIdx| Some(n.node());
    let job = |j: JobId| w.jobs.get(j);
    match ev {
        Ev::Arrive { r } => (1, Some(*r), None),
        Ev::ClientAbort { r } => (2, Some(*r), None),
        Ev::LegArrive { r, role: Role::Prefill } => (3, Some(*r), p(w.reqs[r.idx()].prefill())),
        Ev::LegArrive { r, role: Role::Decode } => (4, Some(*r), d(w.reqs[r.idx()].decode())),
        Ev::Tick { node } => (5, None, Some(*node)),
        Ev::ForwardDone { node, .. } => (6, None, Some(node.node())),
        Ev::StepDone { node, .. } => (7, None, Some(node.node())),
        Ev::DstInfo { r, prefill, .. } => (8, Some(*r), Some(prefill.node())),
        Ev::TransferLand { job: j, .. } => (9, job(*j).map(|x| x.request()), job(*j).and_then(|x| d(x.decode()))),
        Ev::TransferRead { job: j, .. } => (29, job(*j).map(|x| x.request()), job(*j).and_then(|x| p(x.prefill()))),
        Ev::TransferDone { job: j, ok } => {
            (10 + u64::from(*ok), job(*j).map(|x| x.request()), job(*j).and_then(|x| p(x.prefill())))
        }
        Ev::MetaLand { r, decode, .. } => (12, Some(*r), Some(decode.node())),
        Ev::Status { r, decode, ok, .. } => (13 + u64::from(*ok), Some(*r), Some(decode.node())),
        Ev::LegResult { r, role, status } => {
            (15 + (*role == Role::Decode) as u64 * 1000 + u64::from(*status), Some(*r), None)
        }
        Ev::AbortAt { r, role, from_decode, .. } => {
            let node = match role {
                Role::Prefill => p(w.reqs[r.idx()].prefill()),
                Role::Decode => d(w.reqs[r.idx()].decode()),
            };
            (16 + (*role == Role::Decode) as u64 * 2 + u64::from(*from_decode), Some(*r), node)
        }
        Ev::AbortAck { r, decode, .. } => (20, Some(*r), Some(decode.node())),
        Ev::Timeout { r, timer, node, .. } => (21 + *timer as u64, Some(*r), Some(*node)),
        Ev::Crash { node, .. } => (26, None, Some(*node)),
        Ev::Restart { node } => (27, None, Some(*node)),
        Ev::HeartbeatLost { prefill, .. } => (28, None, Some(prefill.node())),
    }
}

/// A request's lifecycle phase: its prefill and decode legs' phases, sender and status, its
/// final status class and the flags the bug chains set.
fn req_phase(w: &World, r: RequestId) -> u64 {
    let q = &w.reqs[r.idx()];
    let pl = w.prefill.get(q.prefill().at()).and_then(|n| n.reqs().get(&r)).map_or(0, |x| {
        1 + x.phase() as u64
            + 8 * x.sender() as u64
            + 64 * (x.pending_abort().is_some() as u64
                + 2 * x.dst().is_some() as u64
                + 4 * (x.lands_pending() > 0) as u64)
    });
    let dl = w.decode.get(q.decode().at()).and_then(|n| n.reqs().get(&r)).map_or(0, |x| {
        1 + x.phase() as u64
            + 8 * x.status_ok().map_or(0, |ok| 1 + ok as u64)
            + 32 * (x.pending_abort().is_some() as u64 + 2 * x.dirty() as u64)
    });
    let flags = q.rejected().is_some() as u64
        | (q.client_aborted() as u64) << 1
        | (q.fault_touched() as u64) << 2
        | (q.timed_out() as u64) << 3
        | (q.late_written() as u64) << 4
        | (q.room_mismatch() as u64) << 5
        | (q.lagged() as u64) << 6
        | (q.caught_by().is_some() as u64) << 7
        | (q.detected_by().is_some() as u64) << 8;
    let status = q.response().map_or(0, |x| 1 + u64::from(x.status / 100));
    mix(&[pl, dl, flags, status])
}

/// A node's shape: alive, busy, which of its queues are non-empty, and whether its pool is
/// nearly full (under a quarter free).
fn node_shape(w: &World, n: NodeId) -> u64 {
    let low = |free: u64, held: u64| (free * 4 < free + held) as u64;
    match n.idx() {
        NodeIdx::Prefill(p) => w.prefill.get(p.at()).map_or(0, |x| {
            x.alive() as u64
                | (x.busy() as u64) << 1
                | (!x.bootstrap().is_empty() as u64) << 2
                | (!x.waiting().is_empty() as u64) << 3
                | (!x.inflight().is_empty() as u64) << 4
                | (!x.cache().is_empty() as u64) << 5
                | low(x.pool().free_pages(), x.pool().held_pages()) << 6
        }),
        NodeIdx::Decode(d) => w.decode.get(d.at()).map_or(0, |x| {
            1 << 8
                | x.alive() as u64
                | (x.busy() as u64) << 1
                | (!x.prealloc().is_empty() as u64) << 2
                | (!x.transfer_queue().is_empty() as u64) << 3
                | (!x.running().is_empty() as u64) << 4
                | low(x.pool().free_pages(), x.pool().held_pages()) << 6
        }),
    }
}

impl Probe {
    /// Takes the event's subject and its state before the dispatch.
    pub fn before(w: &World, ev: &Ev) -> Probe {
        let (kind, req, node) = subject(w, ev);
        Probe {
            kind,
            req,
            node,
            req_before: req.map_or(0, |r| req_phase(w, r)),
            node_before: node.map_or(0, |n| node_shape(w, n)),
            violations: w.oracle.violations.len(),
        }
    }

    /// Records the event's edges in `w.coverage` (when it is on): the request's transition, the
    /// node's, and each violation it raised.
    pub fn after(self, w: &mut World) {
        let req_now = self.req.map(|r| req_phase(w, r));
        let node_now = self.node.map(|n| node_shape(w, n));
        let raised: Vec<[u64; 4]> = w.oracle.violations[self.violations..]
            .iter()
            .map(|v| [4, self.kind, v.kind as u64, mix(&v.cause.bytes().map(u64::from).collect::<Vec<_>>())])
            .collect();
        let Some(c) = w.coverage.as_mut() else { return };
        if let Some(now) = req_now {
            c.hit(&[1, self.kind, self.req_before, now]);
        }
        if let Some(now) = node_now {
            c.hit(&[2, self.kind, self.node_before, now]);
        }
        if self.req.is_none() && self.node.is_none() {
            c.hit(&[3, self.kind]);
        }
        for edge in &raised {
            c.hit(edge);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_bucket_hit_counts_and_runs_differ_in_coverage() {
        let mut c = Coverage::default();
        assert!(c.features().is_empty());
        c.hit(&[1, 2]);
        let one = c.features();
        c.hit(&[1, 2]);
        let two = c.features();
        assert_eq!(one.len(), 1);
        assert_ne!(one, two, "a second visit of the same edge is another bucket");
        assert_eq!(one[0] / 16, two[0] / 16, "same slot");
        for _ in 0..300 {
            c.hit(&[1, 2]);
        }
        assert_eq!(c.features()[0] % 16, 4);
        assert_eq!(c.edges(), 1);
    }

    /// A signature's chain is coverage: a new link or a new chain adds edges, the same
    /// signature again adds none, and a chain shares its prefix's edges with its parent chain.
    #[test]
    fn signatures_are_edges_by_chain_prefix_and_link() {
        let edges = |sigs: &[&str]| {
            let mut c = Coverage::default();
            c.hit_signatures(sigs.iter().map(|s| s.to_string()).collect::<Vec<_>>().iter());
            c.edge_set()
        };
        let a = edges(&["cross_tenant_read/late_write"]);
        assert_eq!(a.len(), 4, "two prefixes and two links: {a:?}");
        assert_eq!(a, edges(&["cross_tenant_read/late_write", "cross_tenant_read/late_write"]));
        let b = edges(&["cross_tenant_read/late_write/visibility_lag"]);
        assert!(a.iter().all(|e| b.contains(e)) && b.len() == 6, "{a:?} {b:?}");
        let sibling = edges(&["uninitialized_read/late_write"]);
        assert!(sibling.iter().any(|e| !a.contains(e)) && sibling.iter().any(|e| a.contains(e)));
        assert!(edges(&[]).is_empty());
        assert!(a.iter().all(|e| is_signature_edge(*e)));
        let mut model = Coverage::default();
        model.hit(&[1, 2]);
        assert!(model.edge_set().iter().all(|e| !is_signature_edge(*e)));
    }

    /// Two different drawn runs visit different edges; the same run the same ones.
    #[test]
    fn coverage_is_deterministic_and_tells_runs_apart() {
        let run = |seed| {
            let cfg = crate::fuzz::draw(seed, &crate::fuzz::Space::Blind);
            let (w, _) = crate::fuzz::run_case_full(cfg, false, false, false, true);
            w.coverage.expect("switched on").features()
        };
        let (a, b) = (run(3), run(4));
        assert_eq!(a, run(3));
        assert_ne!(a, b);
        assert!(a.len() > 10, "{} features", a.len());
    }

    /// Off unless asked for: an ordinary run has no map and the same trace hash as a probed one
    /// (coverage is observation only).
    #[test]
    fn coverage_is_off_by_default_and_never_changes_a_run() {
        let cfg = crate::fuzz::draw(5, &crate::fuzz::Space::Blind);
        let plain = crate::simulate(cfg.clone(), None, false);
        assert!(plain.coverage.is_none());
        let (probed, _) = crate::fuzz::run_case_full(cfg, false, false, false, true);
        assert!(probed.coverage.as_ref().is_some_and(|c| c.edges() > 0));
        assert_eq!(plain.tracer.hash_hex(), probed.tracer.hash_hex());
        assert_eq!(plain.events, probed.events);
    }
}
