//! `IntervalMap` and `Pool` against plain per-key / per-slot models. The model stores ownership as
//! runs (cost follows runs, not tokens); these tests hold it to the obvious representation — one
//! entry per key, one holder per page, one writer per slot — over random operation sequences
//! (proptest shrinks a failure to its shortest sequence).

use kvsim::config::FreeListPolicy;
use kvsim::extent::{IntervalMap, RunValue};
use kvsim::pool::{pages_in, Holder, Known, Pool, Run, Writer};
use kvsim::types::{Instant, NodeId, RequestId, Role, TenantId};
use proptest::prelude::*;

/// A run value like ownership's: an owner and the position of the run's first key.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Own(u8, u64);

impl RunValue for Own {
    fn advanced(&self, by: u64) -> Self {
        Own(self.0, self.1 + by)
    }
}

/// A fixed seed (the same cases on every machine and every run, like the simulator) and no
/// regression files written into the source tree.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x006b_7673_696d),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[derive(Clone, Debug)]
enum MapOp {
    Set(u64, u64, u8, u64),
    Clear(u64, u64),
}

const KEYS: u64 = 48;

fn map_op() -> impl Strategy<Value = MapOp> {
    let range = (0..=KEYS, 0..=KEYS).prop_map(|(a, b)| (a.min(b), a.max(b)));
    prop_oneof![
        3 => (range.clone(), 0u8..3, 0u64..100).prop_map(|((s, e), o, p)| MapOp::Set(s, e, o, p)),
        1 => range.prop_map(|(s, e)| MapOp::Clear(s, e)),
    ]
}

proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn interval_map_matches_a_per_key_model(ops in prop::collection::vec(map_op(), 1..40)) {
        let mut map = IntervalMap::new();
        // The dense form (a pool's), held to the B-tree form piece for piece.
        let mut dense = IntervalMap::with_universe(KEYS);
        let mut model: Vec<Option<Own>> = vec![None; KEYS as usize];
        for op in &ops {
            match *op {
                MapOp::Set(s, e, o, p) => {
                    map.set(s, e, Own(o, p));
                    dense.set(s, e, Own(o, p));
                    for k in s..e {
                        model[k as usize] = Some(Own(o, p + (k - s)));
                    }
                }
                MapOp::Clear(s, e) => {
                    map.clear(s, e);
                    dense.clear(s, e);
                    for k in s..e {
                        model[k as usize] = None;
                    }
                }
            }
            map.invariants();
            dense.invariants();
            // Every sub-range reads back key by key as the model has it, gaps included.
            for (lo, hi) in [(0, KEYS), (3, 17), (17, 18), (20, KEYS)] {
                prop_assert_eq!(dense.pieces(lo, hi), map.pieces(lo, hi), "dense [{}, {}) after {:?}", lo, hi, op);
                let mut covered = lo;
                for (s, e, v) in map.pieces(lo, hi) {
                    prop_assert_eq!(s, covered, "pieces are contiguous from {}", lo);
                    prop_assert!(s < e);
                    for k in s..e {
                        prop_assert_eq!(v.map(|v| v.advanced(k - s)), model[k as usize], "key {} after {:?}", k, op);
                    }
                    covered = e;
                }
                prop_assert_eq!(covered, hi);
            }
        }
        // Runs never outnumber the model's maximal runs by more than the splits that clears leave
        // (a run per distinct (owner, position-continuing) stretch at most): cost follows runs.
        let stretches = (0..KEYS as usize)
            .filter(|&k| model[k].is_some() && (k == 0 || model[k - 1].map(|p| p.advanced(1)) != model[k]))
            .count();
        prop_assert!(map.len_runs() <= stretches.max(1) * 2 + ops.len(), "{} runs for {} stretches", map.len_runs(), stretches);
    }
}

/// The split-then-remove formulation `IntervalMap` had before its one-walk `cut` (kept here as the
/// definition of the run structure: explore's state digest hashes the runs through `Debug`, so two
/// formulations that store the same values as different runs would change exploration).
struct RefMap<V> {
    runs: std::collections::BTreeMap<u64, (u64, V)>,
}

impl<V: RunValue> RefMap<V> {
    fn split_at(&mut self, at: u64) {
        let Some((&s, (e, v))) = self.runs.range_mut(..at).next_back() else {
            return;
        };
        if *e > at {
            let tail = (*e, v.advanced(at - s));
            *e = at;
            self.runs.insert(at, tail);
        }
    }

    fn clear(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        self.split_at(start);
        self.split_at(end);
        while let Some(k) = self.runs.range(start..end).next().map(|(k, _)| *k) {
            self.runs.remove(&k);
        }
    }

    fn set(&mut self, start: u64, end: u64, v: V) {
        if start >= end {
            return;
        }
        self.clear(start, end);
        if let Some((&ps, (pe, pv))) = self.runs.range_mut(..start).next_back() {
            if *pe == start && pv.continued_by(start - ps, &v) {
                *pe = end;
                return;
            }
        }
        self.runs.insert(start, (end, v));
    }
}

/// Short ranges mostly (many small runs, so a later long op finds several runs inside its range,
/// more than `cut`'s inline list holds), with long ones among them.
fn fragmenting_map_op() -> impl Strategy<Value = MapOp> {
    let short = (0..KEYS, 1u64..4).prop_map(|(a, l)| (a, (a + l).min(KEYS)));
    let long = (0..=KEYS, 0..=KEYS).prop_map(|(a, b)| (a.min(b), a.max(b)));
    let range = prop_oneof![3 => short, 1 => long];
    prop_oneof![
        3 => (range.clone(), 0u8..3, 0u64..100, any::<bool>())
            // Half the sets continue position-wise from their start key, so that merges happen.
            .prop_map(|((s, e), o, p, cont)| MapOp::Set(s, e, o, if cont { s } else { p })),
        1 => range.prop_map(|(s, e)| MapOp::Clear(s, e)),
    ]
}

/// A long set and a long clear over more runs than `cut`'s inline list (four keys) holds, with a
/// run reaching into the range from before it and one reaching out of it.
#[test]
fn interval_map_cuts_through_many_runs_like_the_reference() {
    for (start, end, dense) in
        [(3, 30), (4, 29), (0, 48), (5, 6), (2, 40)].into_iter().flat_map(|(s, e)| [(s, e, false), (s, e, true)])
    {
        let mut map = if dense { IntervalMap::with_universe(KEYS) } else { IntervalMap::new() };
        let mut reference = RefMap { runs: std::collections::BTreeMap::new() };
        for k in (0..40).step_by(3) {
            map.set(k, k + 2, Own((k % 3) as u8, k));
            reference.set(k, k + 2, Own((k % 3) as u8, k));
        }
        let mut m2 = map.clone();
        let mut r2 = RefMap { runs: reference.runs.clone() };
        map.set(start, end, Own(1, 7));
        reference.set(start, end, Own(1, 7));
        m2.clear(start, end);
        r2.clear(start, end);
        for (m, r) in [(&map, &reference), (&m2, &r2)] {
            m.invariants();
            let got: Vec<(u64, u64, Own)> = m.runs().map(|(s, e, v)| (s, e, *v)).collect();
            let want: Vec<(u64, u64, Own)> = r.runs.iter().map(|(&s, &(e, v))| (s, e, v)).collect();
            assert_eq!(got, want, "[{start}, {end})");
        }
    }
}

proptest! {
    #![proptest_config(config(2048))]

    /// Run for run (not only key for key) the map the split-then-remove formulation leaves.
    #[test]
    fn interval_map_keeps_the_reference_runs(ops in prop::collection::vec(fragmenting_map_op(), 1..60)) {
        let mut map = IntervalMap::new();
        let mut dense = IntervalMap::with_universe(KEYS);
        let mut reference = RefMap { runs: std::collections::BTreeMap::new() };
        for op in &ops {
            match *op {
                MapOp::Set(s, e, o, p) => {
                    map.set(s, e, Own(o, p));
                    dense.set(s, e, Own(o, p));
                    reference.set(s, e, Own(o, p));
                }
                MapOp::Clear(s, e) => {
                    map.clear(s, e);
                    dense.clear(s, e);
                    reference.clear(s, e);
                }
            }
            map.invariants();
            dense.invariants();
            let got: Vec<(u64, u64, Own)> = map.runs().map(|(s, e, v)| (s, e, *v)).collect();
            let got_dense: Vec<(u64, u64, Own)> = dense.runs().map(|(s, e, v)| (s, e, *v)).collect();
            let want: Vec<(u64, u64, Own)> = reference.runs.iter().map(|(&s, &(e, v))| (s, e, v)).collect();
            prop_assert_eq!(&got_dense, &want, "dense, after {:?}", op);
            prop_assert_eq!(got, want, "after {:?}", op);
        }
    }
}

#[derive(Clone, Debug)]
enum PoolOp {
    /// Request `r` allocates `n` pages (if it holds none).
    Alloc(u8, u64),
    /// Request `r`'s pages are freed by `r` itself, or (a bug the oracle reports) by request `by`.
    Free(u8, Option<u8>),
    /// Request `r` writes positions `[from, from+len)` of its table.
    Write(u8, u64, u64),
    /// Request `dst`'s pages receive a copy of request `src`'s pages (a transfer, same pool).
    Copy(u8, u8),
}

const REQS: u8 = 4;

fn pool_op() -> impl Strategy<Value = PoolOp> {
    prop_oneof![
        3 => (0..REQS, 1u64..6).prop_map(|(r, n)| PoolOp::Alloc(r, n)),
        2 => (0..REQS, prop::option::weighted(0.2, 0..REQS)).prop_map(|(r, by)| PoolOp::Free(r, by)),
        4 => (0..REQS, 0u64..24, 1u64..16).prop_map(|(r, f, l)| PoolOp::Write(r, f, l)),
        1 => (0..REQS, 0..REQS).prop_map(|(s, d)| PoolOp::Copy(s, d)),
    ]
}

fn policy() -> impl Strategy<Value = FreeListPolicy> {
    prop_oneof![
        Just(FreeListPolicy::SortedOnMerge),
        Just(FreeListPolicy::Lifo),
        Just(FreeListPolicy::Fifo),
        Just(FreeListPolicy::Lru),
    ]
}

/// The per-page, per-slot model.
struct Model {
    page_size: u64,
    holder: Vec<Option<Holder>>,
    owner: Vec<Option<(u32, u64)>>, // (request, position) per slot
}

impl Model {
    fn slots(&self, table: &[Run]) -> Vec<u64> {
        table
            .iter()
            .flat_map(|r| r.first..r.end())
            .flat_map(|p| (0..self.page_size).map(move |i| u64::from(p) * self.page_size + i))
            .collect()
    }
}

fn req(r: u8) -> Holder {
    Holder::Req(RequestId(u32::from(r)))
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn pool_matches_a_per_slot_model(
        page_size in 1u64..5,
        pages in 2u64..14,
        policy in policy(),
        zero_on_free in any::<bool>(),
        ops in prop::collection::vec(pool_op(), 1..48),
    ) {
        let id = NodeId { role: Role::Decode, index: 0 };
        let mut pool = Pool::new(id, pages * page_size, page_size, policy, zero_on_free);
        let total = pages as usize + 1; // page 0 is reserved
        let mut m = Model { page_size, holder: vec![None; total], owner: vec![None; total * page_size as usize] };
        let mut tables: Vec<Option<Vec<Run>>> = vec![None; REQS as usize];
        let at = Instant(7);
        for op in &ops {
            match *op {
                PoolOp::Alloc(r, n) => {
                    if tables[r as usize].is_some() {
                        continue;
                    }
                    let free = m.holder.iter().skip(1).filter(|h| h.is_none()).count() as u64;
                    match pool.alloc(n, req(r)) {
                        Some(runs) => {
                            prop_assert_eq!(pages_in(&runs), n);
                            for p in runs.iter().flat_map(|x| x.first..x.end()) {
                                prop_assert!(p != 0, "page 0 is reserved");
                                prop_assert_eq!(m.holder[p as usize], None, "page {} handed out twice", p);
                                m.holder[p as usize] = Some(req(r));
                            }
                            tables[r as usize] = Some(runs);
                        }
                        None => prop_assert!(free < n, "refused {} pages with {} free", n, free),
                    }
                }
                PoolOp::Free(r, by) => {
                    let Some(table) = tables[r as usize].clone() else { continue };
                    let freer = req(by.unwrap_or(r));
                    let bad = pool.free(&table, freer);
                    let mut expect_bad = 0u64;
                    for p in table.iter().flat_map(|x| x.first..x.end()) {
                        if m.holder[p as usize] == Some(freer) {
                            m.holder[p as usize] = None;
                            if zero_on_free {
                                for s in 0..page_size {
                                    m.owner[(u64::from(p) * page_size + s) as usize] = None;
                                }
                            }
                        } else {
                            expect_bad += 1;
                        }
                    }
                    prop_assert_eq!(bad.iter().map(|b| u64::from(b.pages.count)).sum::<u64>(), expect_bad);
                    if by.is_none() {
                        tables[r as usize] = None;
                    }
                }
                PoolOp::Write(r, from, len) => {
                    let Some(table) = tables[r as usize].clone() else { continue };
                    let cap = pages_in(&table) * page_size;
                    let (from, to) = (from.min(cap), (from + len).min(cap));
                    let rid = RequestId(u32::from(r));
                    let rep = pool.write(&table, from, to, TenantId(u32::from(r)), rid, at, 0);
                    let slots = m.slots(&table);
                    let mut foreign_pages = std::collections::BTreeSet::new();
                    for pos in from..to {
                        let slot = slots[pos as usize];
                        m.owner[slot as usize] = Some((u32::from(r), pos));
                        let page = slot / page_size;
                        if m.holder[page as usize] != Some(req(r)) {
                            foreign_pages.insert(page);
                        }
                    }
                    let reported: u64 = rep.foreign.iter().map(|(run, _)| u64::from(run.count)).sum();
                    prop_assert_eq!(reported, foreign_pages.len() as u64, "foreign pages of a write");
                }
                PoolOp::Copy(src, dst) => {
                    let (Some(st), Some(dt)) = (tables[src as usize].clone(), tables[dst as usize].clone()) else {
                        continue;
                    };
                    let contents = pool.page_contents(&st);
                    pool.land_copy(&contents, &dt, RequestId(u32::from(dst)));
                    let (ss, ds) = (m.slots(&st), m.slots(&dt));
                    let snapshot: Vec<_> = ss.iter().map(|&s| m.owner[s as usize]).collect();
                    for (i, &d) in ds.iter().enumerate().take(ss.len()) {
                        m.owner[d as usize] = snapshot[i];
                    }
                }
            }
            pool.invariants();
            let free = m.holder.iter().skip(1).filter(|h| h.is_none()).count() as u64;
            prop_assert_eq!(pool.free_pages(), free, "free pages after {:?}", op);
            prop_assert_eq!(pool.held_pages(), pages - free);
            for p in 1..total as u32 {
                prop_assert_eq!(pool.holder_of(p), m.holder[p as usize], "holder of page {}", p);
            }
            // Every live table reads back slot by slot as the model has it.
            for table in tables.iter().flatten() {
                let slots = m.slots(table);
                let mut seen = 0u64;
                pool.read(table, 0, slots.len() as u64, |pos, slot, len, w| {
                    for i in 0..len {
                        let got = w.map(|w: &Writer| (w.request.0, w.pos + i));
                        assert_eq!(slot + i, slots[(pos + i) as usize], "slot of position {}", pos + i);
                        assert_eq!(got, m.owner[(slot + i) as usize], "writer of slot {} after {:?}", slot + i, op);
                    }
                    seen += len;
                });
                prop_assert_eq!(seen, slots.len() as u64);
            }
        }
    }
}

/// An operation of the decode-append differential test.
#[derive(Clone, Debug)]
enum AppendOp {
    Alloc(u8, u64),
    Free(u8, Option<u8>),
    /// Request `r`'s next decode token (its position counter, wherever its table is).
    Token(u8),
    Write(u8, u64, u64),
    Copy(u8, u8),
    /// Compare the two pools (materialises the open appends of one of them).
    Look,
}

fn append_op() -> impl Strategy<Value = AppendOp> {
    prop_oneof![
        2 => (0..REQS, 1u64..6).prop_map(|(r, n)| AppendOp::Alloc(r, n)),
        1 => (0..REQS, prop::option::weighted(0.2, 0..REQS)).prop_map(|(r, by)| AppendOp::Free(r, by)),
        8 => (0..REQS).prop_map(AppendOp::Token),
        1 => (0..REQS, 0u64..24, 1u64..16).prop_map(|(r, f, l)| AppendOp::Write(r, f, l)),
        1 => (0..REQS, 0..REQS).prop_map(|(s, d)| AppendOp::Copy(s, d)),
        1 => Just(AppendOp::Look),
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    /// `Pool::append` (a decode token kept as a watermark, materialised lazily) leaves exactly the
    /// pool, reports and reads that `Pool::write` of the one token does, whatever happens between
    /// tokens (frees by the writer or by another request, reallocation, copies, other writes).
    #[test]
    fn append_is_write_of_one_token(
        page_size in 1u64..5,
        pages in 2u64..14,
        policy in policy(),
        zero_on_free in any::<bool>(),
        ops in prop::collection::vec(append_op(), 1..64),
    ) {
        let id = NodeId { role: Role::Decode, index: 0 };
        let mut a = Pool::new(id, pages * page_size, page_size, policy, zero_on_free);
        let mut b = a.clone();
        let mut tables: Vec<Option<Vec<Run>>> = vec![None; REQS as usize];
        let mut next = [0u64; REQS as usize];
        for (i, op) in ops.iter().enumerate() {
            let at = Instant(i as u64);
            match *op {
                AppendOp::Alloc(r, n) => {
                    if tables[r as usize].is_none() {
                        let (x, y) = (a.alloc(n, req(r)), b.alloc(n, req(r)));
                        prop_assert_eq!(&x, &y);
                        tables[r as usize] = x;
                        next[r as usize] = 0;
                    }
                }
                AppendOp::Free(r, by) => {
                    let Some(t) = tables[r as usize].clone() else { continue };
                    let freer = req(by.unwrap_or(r));
                    prop_assert_eq!(a.free(&t, freer).len(), b.free(&t, freer).len());
                    if by.is_none() {
                        tables[r as usize] = None;
                    }
                }
                AppendOp::Token(r) => {
                    // A stale table after a free by another request is kept on purpose: its
                    // tokens land in pages the writer no longer holds (a late write).
                    let Some(t) = tables[r as usize].clone() else { continue };
                    let (pos, rid, tenant) = (next[r as usize], RequestId(u32::from(r)), TenantId(u32::from(r)));
                    let x = a.write(&t, pos, pos + 1, tenant, rid, at, 0);
                    let y = b.append(&t, Known { table_pages: pages_in(&t), fresh: false }, pos, tenant, rid, at);
                    prop_assert_eq!(&x.slots, &y.pieces(), "slots of token {} of {}", pos, r);
                    prop_assert_eq!(format!("{:?}", x.foreign), format!("{:?}", y.foreign));
                    next[r as usize] += 1;
                }
                AppendOp::Write(r, from, len) => {
                    let Some(t) = tables[r as usize].clone() else { continue };
                    let (rid, tenant) = (RequestId(u32::from(r)), TenantId(u32::from(r)));
                    let x = a.write(&t, from, from + len, tenant, rid, at, 0);
                    let y = b.write(&t, from, from + len, tenant, rid, at, 0);
                    prop_assert_eq!(format!("{x:?}"), format!("{y:?}"));
                }
                AppendOp::Copy(s, d) => {
                    let (Some(st), Some(dt)) = (tables[s as usize].clone(), tables[d as usize].clone()) else {
                        continue;
                    };
                    let (ca, cb) = (a.page_contents(&st), b.page_contents(&st));
                    prop_assert_eq!(&ca, &cb);
                    let x = a.land_copy(&ca, &dt, RequestId(u32::from(d)));
                    let y = b.land_copy(&cb, &dt, RequestId(u32::from(d)));
                    prop_assert_eq!(format!("{x:?}"), format!("{y:?}"));
                }
                AppendOp::Look => {
                    for t in tables.iter().flatten() {
                        let (mut ra, mut rb) = (Vec::new(), Vec::new());
                        a.read(t, 0, pages_in(t) * page_size, |p, s, l, w| ra.push((p, s, l, w.copied())));
                        b.read(t, 0, pages_in(t) * page_size, |p, s, l, w| rb.push((p, s, l, w.copied())));
                        prop_assert_eq!(ra, rb);
                    }
                }
            }
        }
        // The whole state, materialised: same map (runs, writers, epochs), holders, allocator.
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        b.invariants();
        prop_assert_eq!(a.ownership_runs(), b.ownership_runs());
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// `merge_runs` keeps exactly the pages of its input, each once, as sorted disjoint runs that
    /// do not touch (a violation's page list: a page named by two pieces of one write is one page).
    #[test]
    fn merged_runs_name_each_page_once(runs in proptest::collection::vec((0u32..200, 0u32..20), 0..12)) {
        let mut v: Vec<Run> = runs.iter().map(|&(first, count)| Run { first, count }).collect();
        let pages: std::collections::BTreeSet<u32> = v.iter().flat_map(|r| r.first..r.end()).collect();
        kvsim::pool::merge_runs(&mut v);
        let got: Vec<u32> = v.iter().flat_map(|r| r.first..r.end()).collect();
        prop_assert_eq!(got, pages.iter().copied().collect::<Vec<_>>());
        prop_assert!(v.windows(2).all(|w| w[0].end() < w[1].first), "{:?}", v);
        prop_assert_eq!(pages_in(&v), pages.len() as u64);
    }
}

/// A transfer's write into pages its request no longer holds names each page once: the
/// rdma-visibility-lag row's lagged write (94 pages, reported by copy pairs two of which share
/// a page) was `95 page(s)` with runs `[1, 94], [94, 1]`.
#[test]
fn a_late_write_names_each_page_once() {
    let cfg = crate::load("catalogue/rdma-visibility-lag.toml", None, &[("page_tags", "on")]);
    let w = kvsim::simulate(cfg, None, false);
    let uaf: Vec<_> = w.oracle.violations.iter().filter(|v| v.kind.name() == "use_after_free").collect();
    assert!(!uaf.is_empty());
    for v in uaf {
        assert!(v.page_runs.windows(2).all(|x| x[0].end() < x[1].first), "{:?}", v.page_runs);
        assert_eq!(v.pages, pages_in(&v.page_runs), "{}", v.detail);
        assert!(v.detail.contains(&format!("landed in {} page(s)", v.pages)), "{}", v.detail);
    }
}
