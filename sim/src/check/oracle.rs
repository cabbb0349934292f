//! Isolation and lifecycle properties. Reads are checked as runs of slots: the cost of a check
//! grows with the number of ownership runs it crosses, not with tokens.

use crate::pool::{push_run, Pool, Run, Writer};
use crate::types::{Instant, PoolId, RequestId, TenantId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Violation kinds, safety first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    CrossTenantRead,
    CrossRequestRead,
    UninitializedRead,
    WrongStatus,
    UseAfterFree,
    DoubleFree,
    CrossTenantPrefixHit,
    /// The reader's own KV at another position than the one it reads (corruption of its own
    /// context, not another request's data).
    OwnKvMisplaced,
    PageLeak,
    RequestHang,
    /// What another tenant observes (time to first token, inter-token times, response time,
    /// tokens) depends on the content of a secret-holding tenant's prompts (the noninterference
    /// check, `check::noninterference`).
    TimingChannel,
    /// The HTTP status another tenant gets depends on a secret-holding tenant's prompt content.
    StatusChannel,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::CrossTenantRead => "cross_tenant_read",
            Kind::CrossRequestRead => "cross_request_read",
            Kind::UninitializedRead => "uninitialized_read",
            Kind::WrongStatus => "wrong_status",
            Kind::UseAfterFree => "use_after_free",
            Kind::DoubleFree => "double_free",
            Kind::CrossTenantPrefixHit => "cross_tenant_prefix_hit",
            Kind::OwnKvMisplaced => "own_kv_misplaced",
            Kind::PageLeak => "page_leak",
            Kind::RequestHang => "request_hang",
            Kind::TimingChannel => "timing_channel",
            Kind::StatusChannel => "status_channel",
        }
    }
    pub fn is_liveness(self) -> bool {
        matches!(self, Kind::PageLeak | Kind::RequestHang)
    }
    pub fn parse(s: &str) -> Option<Kind> {
        ALL_KINDS.iter().copied().find(|k| k.name() == s)
    }
}

pub const ALL_KINDS: [Kind; 12] = [
    Kind::CrossTenantRead,
    Kind::CrossRequestRead,
    Kind::UninitializedRead,
    Kind::WrongStatus,
    Kind::UseAfterFree,
    Kind::DoubleFree,
    Kind::CrossTenantPrefixHit,
    Kind::OwnKvMisplaced,
    Kind::PageLeak,
    Kind::RequestHang,
    Kind::TimingChannel,
    Kind::StatusChannel,
];

/// The first foreign write found under a read: who put the data there, and when the writer's run
/// of contiguous writes holding it began (an ownership run continues across a request's chunks
/// and tokens, so this is not the slot's own write time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Culprit {
    pub request: RequestId,
    pub tenant: TenantId,
    pub at: Instant,
}

/// One recorded violation (the first of its kind for a request; later ones are counted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub kind: Kind,
    pub request: Option<RequestId>,
    pub tenant: Option<TenantId>,
    pub victim_tenants: Vec<TenantId>,
    pub pool: Option<PoolId>,
    /// Distinct pages holding the offending slots.
    pub pages: u64,
    pub page_runs: Vec<Run>,
    pub slots: u64,
    pub at: Instant,
    /// Pages the read covered in all (reads only).
    pub pages_read: u64,
    pub seq_len: u64,
    pub culprit: Option<Culprit>,
    /// The mechanism, for fuzzing signatures: e.g. `stub_commit`, `late_write`, `visibility_lag`.
    pub cause: String,
    pub detail: String,
    /// For `timing_channel` / `status_channel`: the largest difference in what the observer saw
    /// between the two runs (ns of virtual time), of the times both runs have (0 when every
    /// difference is a time in one run only); absent for every other kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_ns: Option<u64>,
    /// For `uninitialized_read`: of `slots`, those a transfer's land zeroed over KV written
    /// there before (its source's never-written slots); the rest were never written. Absent
    /// when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub landed_zeros: u64,
    /// The transfer (its request) that landed the first of `landed_zeros`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed_by: Option<RequestId>,
    /// For `page_leak`: of `pages`, those of host memory (retracted requests' KV backups).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_pages: u64,
    /// For `page_leak`: the requests that hold its pages or slots at the end, when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<RequestId>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a read found, slot by slot, as counts.
#[derive(Clone, Debug, Default)]
pub struct ReadSummary {
    /// The reader's own KV at its position, or KV of equal content (same position, same prefix
    /// chain: a shared prefix).
    pub own: u64,
    pub uninit: u64,
    /// Of `uninit`, the slots a transfer's land zeroed over KV written there before
    /// (`Pool::landed_zeros_within`): not "never written" in the story.
    pub uninit_landed: u64,
    /// The transfer (its request) that landed the first of them.
    pub uninit_landed_by: Option<RequestId>,
    pub cross_request: u64,
    pub foreign: u64,
    /// The reader's own KV found at another position.
    pub misplaced: u64,
    pub victims: BTreeMap<TenantId, u64>,
    pub foreign_pages: Vec<Run>,
    pub uninit_pages: Vec<Run>,
    pub other_request_pages: Vec<Run>,
    pub misplaced_pages: Vec<Run>,
    pub culprit: Option<Culprit>,
    pub same_tenant_culprit: Option<Culprit>,
}

impl ReadSummary {
    pub fn clean(&self) -> bool {
        self.uninit == 0 && self.cross_request == 0 && self.foreign == 0 && self.misplaced == 0
    }

    /// The counts, for comparison with the reference oracle.
    pub fn tally(&self) -> Tally {
        Tally {
            ok: self.own,
            uninit: self.uninit,
            cross_request: self.cross_request,
            misplaced: self.misplaced,
            victims: self.victims.clone(),
        }
    }
}

/// A read's verdict as slot counts: what the fast and the reference oracle must agree on.
/// `victims` holds the cross-tenant slots by the tenant that wrote them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Own KV at its position, or equal content (shared prefix).
    pub ok: u64,
    pub uninit: u64,
    pub cross_request: u64,
    pub misplaced: u64,
    pub victims: BTreeMap<TenantId, u64>,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.ok += o.ok;
        self.uninit += o.uninit;
        self.cross_request += o.cross_request;
        self.misplaced += o.misplaced;
        for (t, n) in &o.victims {
            *self.victims.entry(*t).or_default() += n;
        }
    }

    pub fn foreign(&self) -> u64 {
        self.victims.values().sum()
    }

    pub fn slots(&self) -> u64 {
        self.ok + self.uninit + self.cross_request + self.misplaced + self.foreign()
    }

    /// The violation kinds this verdict records.
    pub fn kinds(&self) -> Vec<Kind> {
        let mut k = Vec::new();
        if self.foreign() > 0 {
            k.push(Kind::CrossTenantRead);
        }
        if self.cross_request > 0 {
            k.push(Kind::CrossRequestRead);
        }
        if self.uninit > 0 {
            k.push(Kind::UninitializedRead);
        }
        if self.misplaced > 0 {
            k.push(Kind::OwnKvMisplaced);
        }
        k
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v: Vec<String> = self.victims.iter().map(|(t, n)| format!("{}:{n}", t.0)).collect();
        write!(
            f,
            "ok {} · uninit {} · cross_request {} · misplaced {} · cross_tenant {} [{}]",
            self.ok,
            self.uninit,
            self.cross_request,
            self.misplaced,
            self.foreign(),
            v.join(" ")
        )
    }
}

fn note_pages(runs: &mut Vec<Run>, slot: u64, len: u64, ps: u64) {
    let (p0, p1) = (slot / ps, (slot + len).div_ceil(ps));
    if let Some(last) = runs.last() {
        if u64::from(last.end()) > p0 {
            // The page was already noted (same page, next piece).
            if u64::from(last.end()) >= p1 {
                return;
            }
            let p0 = u64::from(last.end());
            push_run(runs, Run { first: p0 as u32, count: (p1 - p0) as u32 });
            return;
        }
    }
    push_run(runs, Run { first: p0 as u32, count: (p1 - p0) as u32 });
}

/// Summarises a read of positions `[from, to)` of `table` by `reader`. `same(w, pos, len)` says
/// how many leading slots of a piece of `len` slots at positions `pos..` written by `w` (another
/// request, or the reader at another position) hold the same content as the reader's own KV
/// there (a shared prefix: same position, same prefix chain). The rest of the piece is
/// classified slot by slot: the reader's own KV at another position, another request of the
/// same tenant, another tenant.
#[inline]
pub fn summarize(
    pool: &Pool,
    table: &[Run],
    from: u64,
    to: u64,
    reader: RequestId,
    tenant: TenantId,
    same: &dyn Fn(&Writer, u64, u64) -> u64,
) -> ReadSummary {
    let ps = pool.page_size;
    let mut s = ReadSummary::default();
    pool.read(table, from, to, |pos, slot, len, w| match w {
        None => {
            s.uninit += len;
            let (landed, by) = pool.landed_zeros_within(slot, len);
            s.uninit_landed += landed;
            s.uninit_landed_by = s.uninit_landed_by.or(by);
            note_pages(&mut s.uninit_pages, slot, len, ps);
        }
        Some(w) if w.request == reader && w.pos == pos => s.own += len,
        Some(w) => {
            let eq = same(w, pos, len).min(len);
            s.own += eq;
            let (slot, len) = (slot + eq, len - eq);
            if len == 0 {
                return;
            }
            if w.request == reader {
                s.misplaced += len;
                note_pages(&mut s.misplaced_pages, slot, len, ps);
            } else if w.tenant == tenant {
                s.cross_request += len;
                note_pages(&mut s.other_request_pages, slot, len, ps);
                s.same_tenant_culprit.get_or_insert(Culprit { request: w.request, tenant: w.tenant, at: w.at });
            } else {
                s.foreign += len;
                *s.victims.entry(w.tenant).or_default() += len;
                note_pages(&mut s.foreign_pages, slot, len, ps);
                s.culprit.get_or_insert(Culprit { request: w.request, tenant: w.tenant, at: w.at });
            }
        }
    });
    s
}

/// Whether KV written by `w` at positions `pos..pos+len` equals the reader's own there, as a
/// count of leading slots: same position, a prompt token of both (below both `chain_upto`
/// bounds), and the same prefix chain up to the block holding it (`common_tokens`: the tokens of
/// the blocks the two requests' chains share).
pub fn equal_content(w: &Writer, pos: u64, len: u64, reader_chain_upto: u64, common_tokens: u64) -> u64 {
    if w.pos != pos {
        return 0;
    }
    let bound = w.chain_upto.min(reader_chain_upto).min(common_tokens);
    bound.saturating_sub(pos).min(len)
}

/// A whole read (positions `0..seq_len`) as the oracle sees it, slot by slot, as counts: what
/// `World::audit_reads` collects for tests that check a replay against the model (decode reads
/// are checked incrementally, so a violation's `slots` may cover only part of its read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadAudit {
    pub at: Instant,
    pub pool: PoolId,
    pub reader: RequestId,
    pub tenant: TenantId,
    pub seq_len: u64,
    /// Never-written (zero) slots: the oracle's `uninit`.
    pub zeros: u64,
    /// Slots written by the reader's tenant (any request).
    pub own_tenant: u64,
    /// Slots written by another tenant, legitimate shared prefixes included.
    pub other_tenant: u64,
    /// The oracle's verdict for the whole read: slots it calls foreign (`cross_tenant_read`).
    pub foreign: u64,
}

/// Audits positions `0..seq_len` of `table`; `same` as for [`summarize`].
pub fn audit_read(
    pool: &Pool,
    table: &[Run],
    seq_len: u64,
    reader: RequestId,
    tenant: TenantId,
    same: &dyn Fn(&Writer, u64, u64) -> u64,
    at: Instant,
) -> ReadAudit {
    let s = summarize(pool, table, 0, seq_len, reader, tenant, same);
    let (mut own_tenant, mut other_tenant) = (0, 0);
    pool.read(table, 0, seq_len, |_, _, len, w| match w {
        Some(w) if w.tenant == tenant => own_tenant += len,
        Some(_) => other_tenant += len,
        None => {}
    });
    ReadAudit {
        at,
        pool: pool.id,
        reader,
        tenant,
        seq_len,
        zeros: s.uninit,
        own_tenant,
        other_tenant,
        foreign: s.foreign,
    }
}

/// Collects violations; one record per (kind, request, pool, mechanism) — per (kind, pool) for
/// records without a request (a page leak in each pool is its own record) — every occurrence
/// counted. A second mechanism on the same request (a decode-side late write after a prefill-side
/// transfer read of a freed page, both `use_after_free`) is its own record, not folded into the
/// first; "requests affected" still counts each request once per kind (`requests_affected`).
#[derive(Debug, Default)]
pub struct Oracle {
    pub violations: Vec<Violation>,
    seen: BTreeSet<(Kind, Option<RequestId>, Option<PoolId>, String)>,
    requests: BTreeSet<(Kind, RequestId)>,
    pub counts: BTreeMap<Kind, u64>,
}

/// A read's context for recording.
pub struct ReadCtx {
    pub at: Instant,
    pub pool: PoolId,
    pub reader: RequestId,
    pub tenant: TenantId,
    pub seq_len: u64,
    pub pages_read: u64,
    pub cause: &'static str,
    /// Under `cause = "late_write"`: the pages of this pool late writes landed in (empty when they
    /// landed in another pool, whose KV came here), and the mechanism of bad slots outside them.
    pub late: Vec<Run>,
    /// Those of `late` where a late transfer copied zeros (slots never written at its source),
    /// and whether it did so in any pool (for a late-written reader whose late-written KV came
    /// from another pool).
    pub late_zero: Vec<Run>,
    pub late_zero_anywhere: bool,
    pub fallback: &'static str,
}

impl Oracle {
    pub fn record(&mut self, v: Violation) {
        *self.counts.entry(v.kind).or_default() += 1;
        let key = (v.kind, v.request, v.pool, v.cause);
        if self.seen.contains(&key) {
            return;
        }
        let (kind, request, pool, cause) = key;
        if let Some(r) = request {
            self.requests.insert((kind, r));
        }
        self.violations.push(Violation { cause: cause.clone(), ..v });
        self.seen.insert((kind, request, pool, cause));
    }

    /// Whether a violation with this key (`record` keeps one per kind, request, pool and cause)
    /// is already kept; if so it is counted as `record` would count it, and the caller need not
    /// build it (its detail is formatted text).
    pub fn counted_again(&mut self, kind: Kind, request: RequestId, pool: PoolId, cause: &str) -> bool {
        let key = (kind, Some(request), Some(pool), cause.to_string());
        let again = self.seen.contains(&key);
        if again {
            *self.counts.entry(kind).or_default() += 1;
        }
        again
    }

    pub fn has(&self, kind: Kind, request: RequestId) -> bool {
        self.requests.contains(&(kind, request))
    }

    /// Per kind: the requests it affected (each once, whatever its mechanisms), plus one per
    /// record without a request (a leaking pool).
    pub fn requests_affected(&self) -> BTreeMap<Kind, u64> {
        let mut m: BTreeMap<Kind, u64> = BTreeMap::new();
        for (k, _) in &self.requests {
            *m.entry(*k).or_default() += 1;
        }
        for v in self.violations.iter().filter(|v| v.request.is_none()) {
            *m.entry(v.kind).or_default() += 1;
        }
        m
    }

    /// Records the read violations a summary shows.
    pub fn check_read(&mut self, c: &ReadCtx, s: &ReadSummary) {
        let base = |kind, slots, runs: &Vec<Run>, victims: Vec<TenantId>, culprit| {
            // Bad slots of a late-written reader away from every page the late writes hit here
            // are not theirs. A late write leaves its own KV where it lands, so the reader's
            // unwritten slots are the late write's only where it copied zeros (its source's
            // unwritten tail); elsewhere they are the reader's own (its lagged batch, say).
            let theirs = match kind {
                Kind::UninitializedRead if c.late.is_empty() => c.late_zero_anywhere,
                Kind::UninitializedRead => crate::pool::runs_overlap(runs, &c.late_zero),
                _ => c.late.is_empty() || crate::pool::runs_overlap(runs, &c.late),
            };
            let cause = if c.cause != "late_write" || theirs { c.cause } else { c.fallback };
            Violation::new(kind, cause, c.at)
                .request(c.reader, c.tenant)
                .victims(victims)
                .pool(c.pool)
                .runs(runs)
                .slots(slots)
                .read(c.pages_read, c.seq_len)
                .culprit(culprit)
        };
        if s.foreign > 0 {
            let victims = s.victims.keys().copied().collect();
            self.record(base(Kind::CrossTenantRead, s.foreign, &s.foreign_pages, victims, s.culprit));
        }
        if s.cross_request > 0 {
            self.record(base(
                Kind::CrossRequestRead,
                s.cross_request,
                &s.other_request_pages,
                vec![c.tenant],
                s.same_tenant_culprit,
            ));
        }
        if s.uninit > 0 {
            let v = base(Kind::UninitializedRead, s.uninit, &s.uninit_pages, vec![], None);
            self.record(v.landed_zeros(s.uninit_landed, s.uninit_landed_by));
        }
        if s.misplaced > 0 {
            self.record(base(Kind::OwnKvMisplaced, s.misplaced, &s.misplaced_pages, vec![], None));
        }
    }

    pub fn has_safety(&self) -> bool {
        self.counts.keys().any(|k| !k.is_liveness())
    }
    pub fn has_liveness(&self) -> bool {
        self.counts.keys().any(|k| k.is_liveness())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{NodeId, Role};

    fn leak(pool: PoolId) -> Violation {
        Violation::new(Kind::PageLeak, pool.role_name(), Instant(0)).pool(pool).page_count(3)
    }

    /// `counted_again` answers for exactly `record`'s key and counts as `record` would, so a
    /// caller that skips building a repeated violation leaves the same oracle behind.
    #[test]
    fn a_repeat_is_counted_as_record_counts_it() {
        let pool = PoolId { role: Role::Decode, index: 0 };
        let uaf = |cause: &str, r: u32| {
            Violation::new(Kind::UseAfterFree, cause, Instant(0)).request(RequestId(r), TenantId(1)).pool(pool)
        };
        let (mut built, mut skipping) = (Oracle::default(), Oracle::default());
        for (cause, r) in [("transfer_write", 1), ("transfer_write", 1), ("decode_write", 1), ("transfer_write", 2)] {
            built.record(uaf(cause, r).detail("a formatted detail"));
            if !skipping.counted_again(Kind::UseAfterFree, RequestId(r), pool, cause) {
                skipping.record(uaf(cause, r).detail("a formatted detail"));
            }
        }
        assert_eq!(built.counts, skipping.counts);
        assert_eq!(built.counts[&Kind::UseAfterFree], 4);
        assert_eq!(built.violations.len(), 3);
        assert_eq!(built.violations.len(), skipping.violations.len());
        assert!(!skipping.counted_again(Kind::UseAfterFree, RequestId(3), pool, "transfer_write"));
        assert_eq!(skipping.counts[&Kind::UseAfterFree], 4, "a new key is not counted by the question");
    }

    #[test]
    fn every_leaking_pool_is_named() {
        let mut o = Oracle::default();
        let p0 = NodeId { role: Role::Prefill, index: 0 };
        let d0 = NodeId { role: Role::Decode, index: 0 };
        let d1 = NodeId { role: Role::Decode, index: 1 };
        for p in [p0, d0, d1, d1] {
            o.record(leak(p));
        }
        let pools: Vec<PoolId> = o.violations.iter().filter_map(|v| v.pool).collect();
        assert_eq!(pools, vec![p0, d0, d1], "one record per leaking pool");
        assert_eq!(o.counts[&Kind::PageLeak], 4);
    }

    /// A late-written reader's bad slots are `late_write` on the pages the late writes hit in the
    /// pool read (or anywhere, when they hit another pool), and the fallback mechanism elsewhere.
    #[test]
    fn late_write_names_only_the_bad_slots_on_late_written_pages() {
        let d0 = NodeId { role: Role::Decode, index: 0 };
        let run = |first, count| Run { first, count };
        let s = ReadSummary {
            foreign: 3,
            foreign_pages: vec![run(10, 1)],
            uninit: 64,
            uninit_pages: vec![run(20, 1)],
            victims: BTreeMap::from([(TenantId(2), 3)]),
            ..Default::default()
        };
        let ctx = |late: Vec<Run>, late_zero: Vec<Run>, late_zero_anywhere| ReadCtx {
            at: Instant(5),
            pool: d0,
            reader: RequestId(1),
            tenant: TenantId(1),
            seq_len: 128,
            pages_read: 2,
            cause: "late_write",
            late,
            late_zero,
            late_zero_anywhere,
            fallback: "visibility_lag",
        };
        let causes = |late: Vec<Run>, zero: Vec<Run>, anywhere| {
            let mut o = Oracle::default();
            o.check_read(&ctx(late, zero, anywhere), &s);
            o.violations.iter().map(|v| (v.kind, v.cause.clone())).collect::<Vec<_>>()
        };
        let late = "late_write".to_string();
        let lag = "visibility_lag".to_string();
        assert_eq!(
            causes(vec![run(9, 2)], vec![], false),
            [(Kind::CrossTenantRead, late.clone()), (Kind::UninitializedRead, lag.clone())]
        );
        // Unwritten slots on a late-written page are the late write's only where it copied zeros.
        assert_eq!(
            causes(vec![run(20, 1)], vec![run(20, 1)], true),
            [(Kind::CrossTenantRead, lag.clone()), (Kind::UninitializedRead, late.clone())]
        );
        assert_eq!(
            causes(vec![run(20, 1)], vec![], false),
            [(Kind::CrossTenantRead, lag.clone()), (Kind::UninitializedRead, lag.clone())]
        );
        // Late-written KV from another pool: the whole read, unwritten slots only if zeros came.
        assert_eq!(
            causes(vec![], vec![], true),
            [(Kind::CrossTenantRead, late.clone()), (Kind::UninitializedRead, late.clone())]
        );
        assert_eq!(causes(vec![], vec![], false), [(Kind::CrossTenantRead, late), (Kind::UninitializedRead, lag)]);
    }

    #[test]
    fn a_second_mechanism_on_the_same_request_is_kept() {
        let mut o = Oracle::default();
        let p0 = NodeId { role: Role::Prefill, index: 0 };
        let d0 = NodeId { role: Role::Decode, index: 0 };
        let uaf = |pool, cause: &str| Violation {
            kind: Kind::UseAfterFree,
            request: Some(RequestId(7)),
            tenant: Some(TenantId(1)),
            cause: cause.to_string(),
            ..leak(pool)
        };
        o.record(uaf(p0, "transfer_read_of_a_source_page"));
        o.record(uaf(d0, "transfer_write"));
        o.record(uaf(d0, "transfer_write"));
        let causes: Vec<&str> = o.violations.iter().map(|v| v.cause.as_str()).collect();
        assert_eq!(causes, ["transfer_read_of_a_source_page", "transfer_write"], "both mechanisms reported");
        assert_eq!(o.counts[&Kind::UseAfterFree], 3);
        assert_eq!(o.requests_affected()[&Kind::UseAfterFree], 1, "one request affected");
        assert!(o.has(Kind::UseAfterFree, RequestId(7)));
        assert!(!o.has(Kind::UseAfterFree, RequestId(8)));
    }

    #[test]
    fn equal_content_needs_position_bounds_and_chain() {
        let w =
            Writer { tenant: TenantId(1), request: RequestId(0), pos: 100, epoch: 1, at: Instant(0), chain_upto: 1024 };
        assert_eq!(equal_content(&w, 100, 2000, 1536, 512), 412, "split at the common chain");
        assert_eq!(equal_content(&w, 100, 2000, 300, 1536), 200, "split at the reader's bound");
        assert_eq!(equal_content(&w, 100, 2000, 4096, 4096), 924, "split at the writer's bound");
        assert_eq!(equal_content(&w, 101, 10, 4096, 4096), 0, "another position");
        assert_eq!(equal_content(&w, 100, 10, 4096, 0), 0, "another chain");
    }
}
