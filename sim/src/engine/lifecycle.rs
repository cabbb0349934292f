//! Lifecycle-phase records: the model says, at the transition it makes, which phase a request
//! entered on which lane (the router, its prefill node, its decode node). The pictures draw a
//! request's lanes from these records (`picture::perfetto`) instead of rebuilding them from the
//! memory log, which would be a second state machine drifting from the model's.
//!
//! The records are observation only: they are kept apart from the trace (never encoded, hashed or
//! digested, never read by the model), so a run's trace and hash are the same with the log on or
//! off. The log is off (`World::lifecycle` is `None`: one branch per transition, no allocation)
//! unless an exporter asks; `World::new` switches it on with a tracer that keeps its records in
//! memory (`Tracer::collecting`: the pictures' runs and the tests).
//!
//! Each record carries its place in the trace (`seq`: the trace records before it), so a reader
//! walking the trace meets it between the same records the model traced around it.

use crate::types::{DecodeIdx, Instant, PrefillIdx, RequestId};
use serde::Serialize;

/// Where a phase runs: the router (the client's request), or the node of one leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    Router,
    Prefill(PrefillIdx),
    Decode(DecodeIdx),
}

impl Lane {
    /// The node of a leg's lane (`None` for the router).
    pub fn node(self) -> Option<crate::types::NodeId> {
        match self {
            Lane::Router => None,
            Lane::Prefill(n) => Some(n.node()),
            Lane::Decode(n) => Some(n.node()),
        }
    }
}

/// A phase a request enters on a lane. Names follow the engine's queues (sglang 0.5.22
/// `disaggregation/prefill.py`: bootstrap, waiting, inflight queues; `disaggregation/decode.py`:
/// prealloc, transfer queues, the running batch, retracted requests); `prefill::PPhase` and
/// `decode::DPhase` are the model states they mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Router: the request arrived; its legs are sent.
    Arrived,
    /// Prefill: the leg was admitted to the bootstrap queue (it waits for decode's page list,
    /// under the concurrent router, and for a metadata slot).
    Bootstrap,
    /// Prefill: popped from the bootstrap queue with a metadata slot, in the waiting queue.
    Waiting,
    /// Prefill: a chunk `[from, to)` of the prompt scheduled in a forward pass (one record per
    /// chunk).
    Prefill { from: u64, to: u64 },
    /// Prefill: computed, its KV being sent (inflight queue).
    Inflight,
    /// Prefill, behind a sequential proxy: computed and answered, source pages held for decode's
    /// read.
    Held,
    /// Prefill: aborted or failed with transfers in flight; its source pages are held until they
    /// drain.
    Draining,
    /// Prefill: forgotten by the scheduler with its pages still held (`PPhase::Orphaned`).
    Orphaned,
    /// Decode: the leg is in the prealloc queue.
    Prealloc,
    /// Decode: pages reserved, the page list sent to prefill, waiting for the KV (transfer queue).
    Transfer,
    /// Decode: committed into the running batch (also when a retracted request comes back).
    Running,
    /// Decode: retracted out of the running batch, its device pages freed.
    Retracted,
    /// Decode: answered, its pages held until a deferred release (`DPhase::Releasing`).
    Releasing,
    /// Decode: answered with its pages never to be released (`DPhase::Leaked`).
    Leaked,
    /// A leg's answer to the router left its node with `status` (the node may still hold the
    /// request: see `Left`).
    Answered { status: u16 },
    /// The node forgot the request (released, or lost in a crash): the leg's lane ends.
    Left,
    /// Router: the client got its response.
    Responded { status: u16, tokens: u64 },
}

impl Phase {
    /// The phase's name as the pictures label it; `None` for the records that end or mark a lane
    /// rather than start a phase (`Arrived`, `Answered`, `Left`, `Responded`).
    pub fn label(self) -> Option<&'static str> {
        Some(match self {
            Phase::Bootstrap => "bootstrap",
            Phase::Waiting => "waiting",
            Phase::Prefill { .. } => "prefill",
            Phase::Inflight => "inflight",
            Phase::Held => "held",
            Phase::Draining => "draining",
            Phase::Orphaned => "orphaned",
            Phase::Prealloc => "prealloc",
            Phase::Transfer => "transfer",
            Phase::Running => "running",
            Phase::Retracted => "retracted",
            Phase::Releasing => "releasing",
            Phase::Leaked => "leaked",
            Phase::Arrived | Phase::Answered { .. } | Phase::Left | Phase::Responded { .. } => return None,
        })
    }
}

/// One record: request `r` entered `phase` on `lane` at virtual time `at`, after the first `seq`
/// records of the trace (a decode step still open when the phase was noted counts as traced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseRecord {
    pub at: Instant,
    pub seq: u64,
    pub r: RequestId,
    pub lane: Lane,
    pub phase: Phase,
}

/// The records of a run, in the order the model made the transitions (so `seq` and `at` never
/// decrease).
pub type PhaseLog = Vec<PhaseRecord>;

/// The records of one request, in order.
pub fn of_request(log: &[PhaseRecord], r: RequestId) -> impl Iterator<Item = &PhaseRecord> {
    log.iter().filter(move |p| p.r == r)
}
