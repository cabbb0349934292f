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

/// `--trace-filter`: the violating requests and, per pool, the pages their violations name and
/// every page their violating reads depend on (see [`Filter::for_run`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Filter {
    pub requests: BTreeSet<u32>,
    pub pages: BTreeMap<String, Vec<(u32, u32)>>,
}

/// Whether any page of `pages` lies in `runs` (sorted, disjoint: see [`normalize`]).
fn overlaps(runs: &[(u32, u32)], pages: &[Run]) -> bool {
    pages.iter().any(|p| {
        // The first run that ends after the page run starts; it overlaps if it starts before
        // the page run ends.
        let i = runs.partition_point(|&(f, c)| u64::from(f) + u64::from(c) <= u64::from(p.first));
        runs.get(i).is_some_and(|&(f, _)| u64::from(f) < u64::from(p.first) + u64::from(p.count))
    })
}

/// Sorts page runs and merges overlapping and adjacent ones (ends clamped to `u32::MAX`).
fn normalize(runs: &mut Vec<(u32, u32)>) {
    runs.retain(|r| r.1 > 0);
    runs.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(runs.len());
    for &(f, c) in runs.iter() {
        let end = (u64::from(f) + u64::from(c)).min(u64::from(u32::MAX));
        match out.last_mut() {
            Some(last) if u64::from(last.0) + u64::from(last.1) >= u64::from(f) => {
                last.1 = (end.max(u64::from(last.0) + u64::from(last.1)) - u64::from(last.0)) as u32;
            }
            _ => out.push((f, (end - u64::from(f)) as u32)),
        }
    }
    *runs = out;
}

/// Sorted pages as `(first, count)` runs.
fn pages_to_runs(pages: BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for p in pages {
        match runs.last_mut() {
            Some(r) if r.0 + r.1 == p => r.1 += 1,
            _ => runs.push((p, 1)),
        }
    }
    runs
}

/// A trace sink that keeps only the memory log (for [`Filter::for_run`]).
#[derive(Default)]
pub struct MemLog(pub std::rc::Rc<std::cell::RefCell<Vec<(u64, MemOp)>>>);

impl crate::trace::TraceSink for MemLog {
    fn record(&mut self, at: Instant, rec: &TraceRecord) {
        if let TraceRecord::Mem(op) = rec {
            self.0.borrow_mut().push((at.0, op.clone()));
        }
    }
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
                normalize(e);
            }
            if let Some(c) = v.culprit {
                f.requests.insert(c.request.0);
            }
        }
        f
    }

    /// The filter of a finished run: [`Filter::from_violations`] plus every page the violating
    /// reads depend on, as `confirm::lower` traces them back (through copies to their source
    /// pages, up to the frees and restarts that cleared them). Every record that touches one of
    /// those pages is kept, so the history of each page a kept read reads — the prefill writes
    /// behind a copy, another request's allocation and free of a page that `zero_on_free`
    /// clears — is in the filtered trace, and `kvsim confirm` on it lowers the same program as on
    /// the full trace. `mem` is the run's whole memory log.
    pub fn for_run(w: &crate::world::World, mem: &[(u64, MemOp)]) -> Filter {
        let mut f = Filter::from_violations(&w.oracle.violations);
        let report = crate::report::Report::build(w, String::new());
        let select = crate::confirm::Select::Violations { violations: &report.violations, max: usize::MAX };
        let shape = kvsim_gpu::AttnShape::default_small();
        // A run's own log always lowers; without a violating read there is nothing to add.
        if let Ok(l) = crate::confirm::lower(mem, crate::confirm::MemModel::of(&w.cfg), select, shape) {
            for (pool, pages) in l.depends_on {
                let e = f.pages.entry(pool.to_string()).or_default();
                e.extend(pages_to_runs(pages));
                normalize(e);
            }
        }
        f
    }

    /// The same filter with every pool's page runs sorted and merged, as `keeps` expects (the
    /// constructors produce that; a filter read from a file goes through here).
    pub fn normalized(mut self) -> Filter {
        self.pages.values_mut().for_each(normalize);
        self
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
    fn page_runs_normalize_and_overlap() {
        let mut runs = vec![(10, 5), (0, 2), (12, 10), (2, 1), (40, 0), (u32::MAX - 1, 5)];
        normalize(&mut runs);
        assert_eq!(runs, vec![(0, 3), (10, 12), (u32::MAX - 1, 1)]);
        let hit = |first, count| overlaps(&runs, &[Run { first, count }]);
        assert!(hit(2, 1) && hit(21, 9) && hit(5, 6) && hit(u32::MAX - 1, 1));
        assert!(!hit(3, 7) && !hit(22, 100) && !hit(5, 0));
    }

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
