//! The run's record: every processed event and every KV memory operation, in order. The trace
//! hash is computed over all of them, always, whether or not a sink writes them out; sinks are
//! supplied by the caller (the library does no I/O).
//!
//! Rebuilding memory from the log alone: a request's block table on a pool is the concatenation,
//! in order, of the `alloc` records for (pool, request) since the pool's last `reset`; `free`
//! returns pages (contents are kept); `write` names physical slots; `copy` moves whole pages.

use crate::pool::Run;
use crate::types::{Instant, PoolId, RequestId, StableHasher, TenantId};
use crate::world::Ev;
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// A KV memory operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MemOp {
    /// A pool (re)created as zeros: at start and at a node restart.
    Reset {
        pool: PoolId,
        pages: u32,
        page_size: u64,
    },
    Alloc {
        pool: PoolId,
        r: RequestId,
        pages: Vec<Run>,
    },
    Free {
        pool: PoolId,
        r: RequestId,
        pages: Vec<Run>,
    },
    /// Positions `pos..pos+len` of request `r` written at physical slots `slot..slot+len`.
    Write {
        pool: PoolId,
        r: RequestId,
        tenant: TenantId,
        slots: Vec<(u64, u64, u64)>,
    },
    /// Whole pages copied from one pool into another (pages as (src, dst, count) runs).
    Copy {
        src: PoolId,
        dst: PoolId,
        r: RequestId,
        pages: Vec<(u32, u32, u32)>,
    },
    /// An attention read of positions `0..seq_len` of `r`'s block table.
    Read {
        pool: PoolId,
        r: RequestId,
        tenant: TenantId,
        seq_len: u64,
    },
}

/// One line of the run's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceRecord {
    Event(Ev),
    Mem(MemOp),
    Response { r: RequestId, status: u16, tokens: u64 },
}

/// Hashed before an event so events and other records never collide.
const EVENT_TAG: u64 = 0x4556_454e_5400_0000;

/// Receives every record with its virtual time.
pub trait TraceSink {
    fn record(&mut self, at: Instant, rec: &TraceRecord);
}

/// Hashes every record; forwards to a sink when one is attached.
pub struct Tracer {
    hasher: StableHasher,
    pub records: u64,
    sink: Option<Box<dyn TraceSink>>,
    /// Records kept in memory when built with `Tracer::collecting` (pictures, tests).
    pub collected: Option<Vec<(Instant, TraceRecord)>>,
}

impl Tracer {
    pub fn new(sink: Option<Box<dyn TraceSink>>) -> Tracer {
        Tracer { hasher: StableHasher::default(), records: 0, sink, collected: None }
    }

    /// A tracer that also keeps every record in memory.
    pub fn collecting(sink: Option<Box<dyn TraceSink>>) -> Tracer {
        Tracer { collected: Some(Vec::new()), ..Tracer::new(sink) }
    }

    /// Records a processed event without cloning it unless a sink or collector wants it.
    pub fn record_event(&mut self, at: Instant, ev: &Ev) {
        if self.sink.is_some() || self.collected.is_some() {
            self.record(at, TraceRecord::Event(ev.clone()));
            return;
        }
        at.hash(&mut self.hasher);
        // The same bytes `TraceRecord::Event(ev).hash` feeds: the variant's index, then the event.
        EVENT_TAG.hash(&mut self.hasher);
        ev.hash(&mut self.hasher);
        self.records += 1;
    }

    pub fn record(&mut self, at: Instant, rec: TraceRecord) {
        at.hash(&mut self.hasher);
        match &rec {
            TraceRecord::Event(ev) => {
                EVENT_TAG.hash(&mut self.hasher);
                ev.hash(&mut self.hasher);
            }
            other => other.hash(&mut self.hasher),
        }
        self.records += 1;
        if let Some(s) = self.sink.as_mut() {
            s.record(at, &rec);
        }
        if let Some(c) = self.collected.as_mut() {
            c.push((at, rec));
        }
    }

    pub fn hash_hex(&self) -> String {
        format!("{:016x}", self.hasher.finish())
    }

    pub fn take_sink(&mut self) -> Option<Box<dyn TraceSink>> {
        self.sink.take()
    }
}
