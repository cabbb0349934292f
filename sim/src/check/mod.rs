//! The oracle: checks every KV read, write and free the model performs, and the liveness of the
//! run at its end. A violation is data (an outcome of the modelled engine), never a panic.
//!
//! Every violation is built with [`Violation::new`] and the setters below (one constructor: the
//! defaults of the fields a kind leaves empty are written once, here).
//!
//! No float decides a verdict (shares are compared as integer ratios): refused by the lint below.

#![deny(clippy::float_arithmetic)]

pub mod expect;
pub mod explore;
pub mod liveness;
pub mod oracle;
pub use oracle::{Culprit, Kind, Oracle, ReadSummary, Tally, Violation};
pub mod matrix;
pub mod noninterference;
pub mod reference;
pub use reference::{Disagreement, Reference};

use crate::pool::Run;
use crate::types::{Instant, PoolId, RequestId, TenantId};

impl Violation {
    /// The page runs a violation keeps for its report (the page count covers them all).
    pub const KEPT_RUNS: usize = 64;

    /// A violation of `kind` by mechanism `cause` at `at`; every other field empty (no request,
    /// tenant, pool, pages, slots, read, culprit, detail or delta) until a setter fills it.
    pub fn new(kind: Kind, cause: impl Into<String>, at: Instant) -> Violation {
        Violation {
            kind,
            request: None,
            tenant: None,
            victim_tenants: vec![],
            pool: None,
            pages: 0,
            page_runs: vec![],
            slots: 0,
            at,
            pages_read: 0,
            seq_len: 0,
            culprit: None,
            cause: cause.into(),
            detail: String::new(),
            delta_ns: None,
            landed_zeros: 0,
            landed_by: None,
            host_pages: 0,
            holders: vec![],
        }
    }

    /// Of a leak's pages, those of host memory.
    pub fn host_pages(self, host_pages: u64) -> Violation {
        Violation { host_pages, ..self }
    }

    /// A leak's holders: the requests that still hold its pages or slots at the end (a leak is
    /// its pool's, and names no one request).
    pub fn holders(self, holders: Vec<RequestId>) -> Violation {
        Violation { holders, ..self }
    }

    /// Of an uninitialised read's slots, those a transfer's land zeroed over written KV, and
    /// the transfer (its request) that landed the first.
    pub fn landed_zeros(self, landed_zeros: u64, landed_by: Option<RequestId>) -> Violation {
        Violation { landed_zeros, landed_by, ..self }
    }

    /// The request it happened to, and its tenant.
    pub fn request(self, request: RequestId, tenant: TenantId) -> Violation {
        Violation { request: Some(request), tenant: Some(tenant), ..self }
    }

    /// The tenants whose KV (or whose cached blocks) it touched.
    pub fn victims(self, victim_tenants: Vec<TenantId>) -> Violation {
        Violation { victim_tenants, ..self }
    }

    pub fn pool(self, pool: PoolId) -> Violation {
        Violation { pool: Some(pool), ..self }
    }

    /// The pages involved, as runs: all counted, the first [`Violation::KEPT_RUNS`] kept.
    pub fn runs(self, runs: &[Run]) -> Violation {
        Violation {
            pages: crate::pool::pages_in(runs),
            page_runs: runs.iter().take(Self::KEPT_RUNS).copied().collect(),
            ..self
        }
    }

    /// The pages involved, as runs, every run kept.
    pub fn all_runs(self, page_runs: Vec<Run>) -> Violation {
        Violation { pages: crate::pool::pages_in(&page_runs), page_runs, ..self }
    }

    /// A page count without runs.
    pub fn page_count(self, pages: u64) -> Violation {
        Violation { pages, ..self }
    }

    /// The offending slots (or metadata slots, for a leak).
    pub fn slots(self, slots: u64) -> Violation {
        Violation { slots, ..self }
    }

    /// The read it was found in: pages the read covered and the reader's sequence length.
    pub fn read(self, pages_read: u64, seq_len: u64) -> Violation {
        Violation { pages_read, seq_len, ..self }
    }

    pub fn culprit(self, culprit: Option<Culprit>) -> Violation {
        Violation { culprit, ..self }
    }

    pub fn detail(self, detail: impl Into<String>) -> Violation {
        Violation { detail: detail.into(), ..self }
    }

    /// For `timing_channel` / `status_channel`: the largest difference the observer saw (ns).
    pub fn delta_ns(self, delta: u64) -> Violation {
        Violation { delta_ns: Some(delta), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{NodeId, Role};

    /// Every violation is built by `Violation::new`: no struct literal of its fields anywhere else
    /// in the library (an update of an existing one, `Violation { cause, ..v }`, is fine).
    #[test]
    fn violations_are_built_by_the_one_constructor() {
        let mut found = Vec::new();
        let mut stack = vec![std::path::Path::new(&crate::test_manifest_dir()).join("src")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).expect("source folder") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.extension().is_none_or(|x| x != "rs") || p.ends_with("check/mod.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).expect("source file");
                for (i, _) in text.match_indices("Violation {") {
                    if text[..i].ends_with("struct ") || text[..i].ends_with("-> ") {
                        continue;
                    }
                    let body = &text[i..text[i..].find('}').map_or(text.len(), |j| i + j)];
                    if !body.contains("..") {
                        found.push(format!("{}: {}", p.display(), body.lines().next().unwrap_or_default()));
                    }
                }
            }
        }
        assert!(found.is_empty(), "Violation struct literals (use Violation::new): {found:?}");
    }

    #[test]
    fn the_constructor_leaves_unset_fields_empty_and_keeps_64_runs() {
        let runs: Vec<Run> = (0..100).map(|i| Run { first: 2 * i, count: 1 }).collect();
        let pool = NodeId { role: Role::Decode, index: 1 };
        let v = Violation::new(Kind::UseAfterFree, "transfer_write", Instant(5)).pool(pool).runs(&runs);
        assert_eq!((v.pages, v.page_runs.len()), (100, 64));
        assert_eq!((v.request, v.tenant, v.culprit, v.delta_ns), (None, None, None, None));
        assert_eq!((v.slots, v.pages_read, v.seq_len, v.detail.as_str()), (0, 0, 0, ""));
        let w = Violation::new(Kind::DoubleFree, "release", Instant(5)).all_runs(runs);
        assert_eq!((w.pages, w.page_runs.len()), (100, 100));
        let r = Violation::new(Kind::RequestHang, "x", Instant(1)).request(RequestId(3), TenantId(2)).read(4, 9);
        assert_eq!((r.request, r.tenant, r.pages_read, r.seq_len), (Some(RequestId(3)), Some(TenantId(2)), 4, 9));
    }
}
