//! The closed set of events the loop dispatches (`World::dispatch`), the timers they arm and the
//! transfer destination they carry. Kept apart from `world` so that the trace (which records and
//! encodes events) and the world (which schedules and handles them) both depend on this module and
//! not on each other.
//!
//! Node indices are typed by role (`PrefillIdx`, `DecodeIdx`) where the event's role is fixed, and
//! a `NodeId` (role + index) where it is not. The typed indices serialise, hash and print (`Debug`)
//! as their bare `u16`, so the JSON trace, the trace encoding (`trace::encode`, pinned by
//! `trace::tests::the_trace_hash_is_xxh3_64_of_the_encoding`) and `World::state_digest` are the
//! same bytes as when these fields were raw `u16`.

use crate::pool::Run;
use crate::types::{DecodeIdx, JobId, NodeId, PrefillIdx, RequestId, Role};
use serde::{Deserialize, Serialize};

/// Why a timer was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutKind {
    Bootstrap,
    Waiting,
    DeferredRelease,
    SourceLease,
}

/// Destination of a transfer: decode's reservation for the request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DstInfo {
    pub decode: DecodeIdx,
    pub epoch: u32,
    pub pages: Vec<Run>,
    pub meta_slot: u32,
}

/// The closed set of events. Node events carry the node's epoch (restart count) so that
/// events addressed to a crashed incarnation are dropped.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Ev {
    Arrive {
        r: RequestId,
    },
    ClientAbort {
        r: RequestId,
    },
    LegArrive {
        r: RequestId,
        role: Role,
    },
    Tick {
        node: NodeId,
    },
    ForwardDone {
        node: PrefillIdx,
        epoch: u32,
    },
    StepDone {
        node: DecodeIdx,
        epoch: u32,
    },
    DstInfo {
        r: RequestId,
        prefill: PrefillIdx,
        dst: Box<DstInfo>,
    },
    /// A lagged batch's wire time ends: its source pages are read now, and the data lands at
    /// `TransferLand` (only scheduled when the land comes later: `visibility_lag`).
    TransferRead {
        job: JobId,
        batch: u32,
    },
    TransferLand {
        job: JobId,
        batch: u32,
    },
    TransferDone {
        job: JobId,
        ok: bool,
    },
    MetaLand {
        r: RequestId,
        decode: DecodeIdx,
        epoch: u32,
        slot: u32,
        room: u64,
    },
    Status {
        r: RequestId,
        decode: DecodeIdx,
        epoch: u32,
        ok: bool,
        pages: u64,
        prefix: u64,
    },
    LegResult {
        r: RequestId,
        role: Role,
        status: u16,
    },
    AbortAt {
        r: RequestId,
        role: Role,
        status: u16,
        from_decode: bool,
    },
    AbortAck {
        r: RequestId,
        decode: DecodeIdx,
        epoch: u32,
    },
    Timeout {
        r: RequestId,
        timer: TimeoutKind,
        node: NodeId,
        epoch: u32,
    },
    Crash {
        node: NodeId,
        restart_after_ms: u64,
    },
    Restart {
        node: NodeId,
    },
    HeartbeatLost {
        prefill: PrefillIdx,
        epoch: u32,
    },
}

impl Ev {
    /// The request an event names, if any (transfer events name a job, not a request).
    pub fn request(&self) -> Option<RequestId> {
        match *self {
            Ev::Arrive { r }
            | Ev::ClientAbort { r }
            | Ev::LegArrive { r, .. }
            | Ev::DstInfo { r, .. }
            | Ev::MetaLand { r, .. }
            | Ev::Status { r, .. }
            | Ev::LegResult { r, .. }
            | Ev::AbortAt { r, .. }
            | Ev::AbortAck { r, .. }
            | Ev::Timeout { r, .. } => Some(r),
            Ev::Tick { .. }
            | Ev::ForwardDone { .. }
            | Ev::StepDone { .. }
            | Ev::TransferRead { .. }
            | Ev::TransferLand { .. }
            | Ev::TransferDone { .. }
            | Ev::Crash { .. }
            | Ev::Restart { .. }
            | Ev::HeartbeatLost { .. } => None,
        }
    }
}
