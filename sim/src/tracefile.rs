//! The JSON Lines trace format: a header (kvsim version, seed, the fully resolved configuration,
//! the filter if any), one line per record (`t` = virtual ns, then the record), and a footer with
//! the counts, the trace hash and the violations. Pure: formatting and filtering only; the binary
//! owns the files.

use crate::config::SimConfig;
use crate::pool::Run;
use crate::report::ViolationOut;
use crate::trace::{MemOp, TraceRecord};
use crate::types::{Instant, PoolId, RequestId};
use crate::world::Ev;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub const FORMAT: &str = "kvsim-trace/1";

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Header {
    pub kind: String,
    pub format: String,
    pub kvsim_version: String,
    pub seed: u64,
    pub config: SimConfig,
    /// Present when only the records touching these requests and pages were kept.
    pub filter: Option<Filter>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Footer {
    pub kind: String,
    pub records: u64,
    pub written: u64,
    pub events: u64,
    pub trace_hash: String,
    pub exit_code: i32,
    pub violations: Vec<ViolationOut>,
    /// Latency summaries (absent in traces written before they existed).
    #[serde(default)]
    pub latency: crate::latency::Latency,
    /// One record per request (absent in traces written before they existed).
    #[serde(default)]
    pub requests: Vec<crate::latency::RequestRecord>,
}

/// One record line.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Line {
    pub t: u64,
    #[serde(flatten)]
    pub rec: TraceRecord,
}

impl Header {
    pub fn new(cfg: &SimConfig, filter: Option<Filter>) -> Header {
        Header {
            kind: "header".into(),
            format: FORMAT.into(),
            kvsim_version: env!("CARGO_PKG_VERSION").into(),
            seed: cfg.seed,
            config: cfg.clone(),
            filter,
        }
    }
}

pub fn line_json(at: Instant, rec: &TraceRecord) -> String {
    serde_json::to_string(&Line { t: at.0, rec: rec.clone() }).expect("records serialise")
}

/// `--trace-filter`: the violating requests and, per pool, the pages their violations name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Filter {
    pub requests: BTreeSet<u32>,
    pub pages: BTreeMap<String, Vec<(u32, u32)>>,
}

fn overlaps(runs: &[(u32, u32)], pages: &[Run]) -> bool {
    pages
        .iter()
        .any(|p| runs.iter().any(|&(f, c)| p.first < f.saturating_add(c) && f < p.first.saturating_add(p.count)))
}

impl Filter {
    pub fn from_violations(vs: &[crate::check::Violation]) -> Filter {
        let mut f = Filter::default();
        for v in vs {
            if let Some(r) = v.request {
                f.requests.insert(r.0);
            }
            if let (Some(pool), false) = (v.pool, v.page_runs.is_empty()) {
                let e = f.pages.entry(pool.to_string()).or_default();
                e.extend(v.page_runs.iter().map(|r| (r.first, r.count)));
                e.sort();
                e.dedup();
            }
            if let Some(c) = v.culprit {
                f.requests.insert(c.request.0);
            }
        }
        f
    }

    fn req(&self, r: RequestId) -> bool {
        self.requests.contains(&r.0)
    }

    fn pages_hit(&self, pool: PoolId, pages: &[Run]) -> bool {
        self.pages.get(&pool.to_string()).is_some_and(|runs| overlaps(runs, pages))
    }

    fn slots_hit(&self, pool: PoolId, page_size: u64, slots: &[(u64, u64, u64)]) -> bool {
        let page_size = page_size.max(1);
        let pages: Vec<Run> = slots
            .iter()
            .map(|&(s, l, _)| {
                let (p0, p1) = (s / page_size, s.saturating_add(l).div_ceil(page_size));
                Run { first: p0 as u32, count: (p1 - p0) as u32 }
            })
            .collect();
        self.pages_hit(pool, &pages)
    }

    /// Whether a record touches a violating request or the pages the violations read.
    pub fn keeps(&self, rec: &TraceRecord, page_size: u64) -> bool {
        match rec {
            TraceRecord::Response { r, .. } => self.req(*r),
            TraceRecord::Event(ev) => match ev {
                Ev::Arrive { r }
                | Ev::ClientAbort { r }
                | Ev::LegArrive { r, .. }
                | Ev::DstInfo { r, .. }
                | Ev::MetaLand { r, .. }
                | Ev::Status { r, .. }
                | Ev::LegResult { r, .. }
                | Ev::AbortAt { r, .. }
                | Ev::AbortAck { r, .. }
                | Ev::Timeout { r, .. } => self.req(*r),
                Ev::Crash { .. } | Ev::Restart { .. } | Ev::HeartbeatLost { .. } => true,
                _ => false,
            },
            TraceRecord::Mem(op) => match op {
                MemOp::Reset { .. } => true,
                MemOp::Alloc { pool, r, pages } | MemOp::Free { pool, r, pages } => {
                    self.req(*r) || self.pages_hit(*pool, pages)
                }
                MemOp::Write { pool, r, slots, .. } => self.req(*r) || self.slots_hit(*pool, page_size, slots),
                MemOp::Copy { src, dst, r, pages } => {
                    let s: Vec<Run> = pages.iter().map(|&(a, _, c)| Run { first: a, count: c }).collect();
                    let d: Vec<Run> = pages.iter().map(|&(_, b, c)| Run { first: b, count: c }).collect();
                    self.req(*r) || self.pages_hit(*src, &s) || self.pages_hit(*dst, &d)
                }
                MemOp::Read { r, .. } => self.req(*r),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Role, TenantId};

    #[test]
    fn lines_round_trip() {
        let pool = PoolId { role: Role::Decode, index: 1 };
        for rec in [
            TraceRecord::Event(Ev::Tick { node: pool }),
            TraceRecord::Event(Ev::DstInfo {
                r: RequestId(3),
                prefill: 0,
                dst: Box::new(crate::world::DstInfo {
                    decode: 1,
                    epoch: 0,
                    pages: vec![Run { first: 1, count: 2 }],
                    meta_slot: 4,
                }),
            }),
            TraceRecord::Mem(MemOp::Write { pool, r: RequestId(2), tenant: TenantId(9), slots: vec![(64, 10, 0)] }),
            TraceRecord::Response { r: RequestId(2), status: 200, tokens: 5 },
        ] {
            let s = line_json(Instant(42), &rec);
            let back: Line = serde_json::from_str(&s).unwrap();
            assert_eq!(back.rec, rec, "{s}");
            assert_eq!(back.t, 42);
        }
    }
}
