//! The reference oracle: the definition of a read's verdict, which the fast oracle
//! (`check::oracle` with its callers in `decode`, `prefill`, `pool`, `world`) optimises.
//!
//! It keeps a plain per-slot shadow of every pool — for each slot the tenant, request and
//! position that last wrote it and how far that write's prompt KV is fixed by its prefix chain,
//! or "never written" (also after a reset, or a free under `zero_on_free`); for each page its
//! holder — fed only by the memory operations the trace records (`MemOp`: reset, alloc, free,
//! write, copy) plus the radix cache's re-holding of released pages. For every read it re-reads
//! the reader's whole block table slot by slot and classifies each slot:
//!
//! - **ok**: written by the reader at this position, or written at this position by a request
//!   whose prompt has the same prefix chain up to this slot's block (equal content: a shared
//!   prefix, whoever wrote it);
//! - **misplaced**: the reader's own KV of another position;
//! - **cross-request** / **cross-tenant**: another request's KV, of the reader's tenant or not;
//! - **never written** (uninitialised);
//! - **not held**: a slot of a page the reader does not hold (a freed page, or another
//!   request's) — never expected of the model, so any is a disagreement.
//!
//! Cost is proportional to tokens (a `Vec` per pool, every read re-read whole): it is meant for
//! tests, snapshot runs, sampled fuzz runs and `--check-oracle`, never for the fast path.

use crate::check::oracle::Tally;
use crate::pool::{Holder, Run};
use crate::prefix::BLOCK_TOKENS;
use crate::trace::MemOp;
use crate::types::{Instant, PoolId, RequestId, Role, TenantId};
use std::collections::BTreeMap;

/// Who wrote a slot (the shadow's cell).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    tenant: TenantId,
    request: RequestId,
    pos: u64,
    /// Positions below this were prompt KV fixed by the writer's prefix chain.
    chain_upto: u64,
}

#[derive(Clone, Debug)]
struct RefPool {
    role: Role,
    page_size: u64,
    zero_on_free: bool,
    holders: Vec<Option<Holder>>,
    slots: Vec<Option<Slot>>,
}

impl RefPool {
    fn new(role: Role, pages: u32, page_size: u64, zero_on_free: bool) -> RefPool {
        RefPool {
            role,
            page_size,
            zero_on_free,
            holders: vec![None; pages as usize],
            slots: vec![None; pages as usize * page_size as usize],
        }
    }

    fn page_slots(&self, page: u32) -> std::ops::Range<usize> {
        let ps = self.page_size as usize;
        page as usize * ps..(page as usize + 1) * ps
    }
}

/// A read on which the two oracles differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    pub at: Instant,
    pub pool: PoolId,
    pub reader: RequestId,
    /// Which read: `prefill_read`, `decode_read`, `kv_checksum`.
    pub what: &'static str,
    pub seq_len: u64,
    pub fast: Tally,
    pub reference: Tally,
    /// Slots of pages the reader did not hold (the fast oracle assumes none).
    pub not_held: u64,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} by request {} on {} at {} (positions 0..{}): fast [{}], reference [{}]{}",
            self.what,
            self.reader.0,
            self.pool,
            self.at,
            self.seq_len,
            self.fast,
            self.reference,
            if self.not_held > 0 {
                format!(", {} slot(s) in pages the reader does not hold", self.not_held)
            } else {
                String::new()
            }
        )
    }
}

/// Disagreements kept in full (all are counted).
pub const KEPT: usize = 32;

/// The reference oracle's state.
#[derive(Clone, Debug)]
pub struct Reference {
    pools: BTreeMap<PoolId, RefPool>,
    /// Per request: tenant and prefix block ids.
    reqs: Vec<(TenantId, Vec<u64>)>,
    /// The first `KEPT` disagreements.
    pub disagreements: Vec<Disagreement>,
    pub disagreement_count: u64,
    /// Reads compared, and slots classified.
    pub reads: u64,
    pub slots_read: u64,
    /// Decode keeps a radix cache (`decode_radix_cache = on`): decode reads cache-held pages too.
    pub decode_radix_cache: bool,
    /// Lagged batches' data in flight (`MemOp::Send` until its `Land`), by wire.
    wires: BTreeMap<u64, Vec<Option<Slot>>>,
}

impl Reference {
    /// `pools`: (id, pages, page size, zero_on_free) of every pool, as created (all zeros).
    pub fn new(pools: &[(PoolId, u32, u64, bool)], reqs: Vec<(TenantId, Vec<u64>)>) -> Reference {
        Reference {
            pools: pools.iter().map(|&(id, pages, ps, z)| (id, RefPool::new(id.role, pages, ps, z))).collect(),
            reqs,
            disagreements: Vec::new(),
            disagreement_count: 0,
            reads: 0,
            slots_read: 0,
            decode_radix_cache: false,
            wires: BTreeMap::new(),
        }
    }

    fn pool(&mut self, id: PoolId) -> &mut RefPool {
        self.pools.get_mut(&id).expect("every pool is shadowed")
    }

    /// Applies one memory operation. `chain_upto` is the writer's bound for a `Write` (0 for
    /// other operations).
    pub fn apply(&mut self, _at: Instant, op: &MemOp, chain_upto: u64) {
        match op {
            MemOp::Reset { pool, pages, page_size } => {
                let z = self.pool(*pool).zero_on_free;
                *self.pool(*pool) = RefPool::new(pool.role, *pages, *page_size, z);
            }
            MemOp::Alloc { pool, r, pages } => {
                let p = self.pool(*pool);
                for page in pages_of(pages) {
                    p.holders[page as usize] = Some(Holder::Req(*r));
                }
            }
            MemOp::Free { pool, r, pages } => {
                let p = self.pool(*pool);
                for page in pages_of(pages) {
                    // A page the freer does not hold is not freed (a double free, reported by the
                    // fast oracle; the model never corrupts its free list).
                    if matches!(p.holders[page as usize], Some(Holder::Req(x)) | Some(Holder::Cache(x)) if x == *r) {
                        p.holders[page as usize] = None;
                        if p.zero_on_free {
                            let range = p.page_slots(page);
                            p.slots[range].fill(None);
                        }
                    }
                }
            }
            MemOp::Write { pool, r, tenant, slots } => {
                let p = self.pool(*pool);
                for &(slot, len, pos) in slots {
                    for i in 0..len {
                        p.slots[(slot + i) as usize] =
                            Some(Slot { tenant: *tenant, request: *r, pos: pos + i, chain_upto });
                    }
                }
            }
            MemOp::Copy { src, dst, pages, .. } => {
                for &(s, d, c) in pages {
                    for k in 0..c {
                        let sp = self.pool(*src);
                        let data: Vec<Option<Slot>> = sp.slots[sp.page_slots(s + k)].to_vec();
                        let dp = self.pool(*dst);
                        let range = dp.page_slots(d + k);
                        dp.slots[range].copy_from_slice(&data);
                    }
                }
            }
            MemOp::Send { src, wire, pages, .. } => {
                let sp = self.pool(*src);
                let mut data = Vec::new();
                for p in pages {
                    for k in 0..p.count {
                        data.extend_from_slice(&sp.slots[sp.page_slots(p.first + k)]);
                    }
                }
                self.wires.insert(*wire, data);
            }
            MemOp::Land { dst, wire, pages, .. } => {
                let data = self.wires.remove(wire).unwrap_or_default();
                let dp = self.pool(*dst);
                let mut off = 0usize;
                for p in pages {
                    for k in 0..p.count {
                        let range = dp.page_slots(p.first + k);
                        let n = range.len();
                        if let Some(src) = data.get(off..off + n) {
                            dp.slots[range].copy_from_slice(src);
                        }
                        off += n;
                    }
                }
            }
            MemOp::Read { .. } => {}
            // The records it stands for (the model feeds those one by one as the step runs,
            // `World::mem_decode`; this arm is for a log read back whole). A generated token lies
            // past its writer's chain, so `chain_upto` changes nothing for it.
            MemOp::DecodeStep { pool, entries } => {
                for e in entries {
                    for op in e.expand(*pool) {
                        self.apply(_at, &op, chain_upto);
                    }
                }
            }
        }
    }

    /// Pages changing holder without a memory operation (a request's pages entering the cache).
    pub fn rehold(&mut self, pool: PoolId, pages: &[Run], holder: Holder) {
        let p = self.pool(pool);
        for page in pages_of(pages) {
            p.holders[page as usize] = Some(holder);
        }
    }

    /// Whether requests `a` and `b` have the same prefix chain up to and including block `blk`.
    fn same_chain(&self, a: RequestId, b: RequestId, blk: u64) -> bool {
        let n = blk as usize + 1;
        let (ba, bb) = (&self.reqs[a.idx()].1, &self.reqs[b.idx()].1);
        ba.len() >= n && bb.len() >= n && ba[..n] == bb[..n]
    }

    /// Classifies every slot of positions `[0, seq_len)` of `reader`'s block table `table`.
    /// `chain_upto`: the reader's own bound (positions below it are prompt KV fixed by its chain).
    /// Returns the verdict and the count of slots in pages the reader does not hold.
    pub fn read(&self, pool: PoolId, reader: RequestId, table: &[Run], seq_len: u64, chain_upto: u64) -> (Tally, u64) {
        let p = &self.pools[&pool];
        let tenant = self.reqs[reader.idx()].0;
        let ps = p.page_size;
        let mut t = Tally::default();
        let mut not_held = 0u64;
        // Page by page (position `pos` is slot `pos % ps` of the table's page `pos / ps`): the
        // holder is a property of the page, so it is looked up once per page, and the page's slots
        // are one slice. Every slot is still classified on its own (sampled campaign runs spend
        // most of their time here: a decode step re-reads every running request's whole table).
        let mut pos = 0u64;
        for page in pages_of(table) {
            if pos >= seq_len {
                break;
            }
            let end = (pos + ps).min(seq_len);
            let held = match p.holders[page as usize] {
                Some(Holder::Req(x)) => x == reader,
                // Prefill reads the radix-cached prefix blocks it borrowed; decode those it locked
                // in its own radix cache (`decode_radix_cache = on`: only then does decode cache).
                Some(Holder::Cache(_)) => p.role == Role::Prefill || self.decode_radix_cache,
                None => false,
            };
            if !held {
                not_held += end - pos;
            }
            let first = page as usize * ps as usize;
            for (pos, slot) in (pos..end).zip(&p.slots[first..first + (end - pos) as usize]) {
                match *slot {
                    None => t.uninit += 1,
                    Some(w) if w.request == reader && w.pos == pos => t.ok += 1,
                    Some(w)
                        if w.pos == pos
                            && pos < w.chain_upto
                            && pos < chain_upto
                            && self.same_chain(w.request, reader, pos / BLOCK_TOKENS) =>
                    {
                        t.ok += 1
                    }
                    Some(w) if w.request == reader => t.misplaced += 1,
                    Some(w) if w.tenant == tenant => t.cross_request += 1,
                    Some(w) => *t.victims.entry(w.tenant).or_default() += 1,
                }
            }
            pos = end;
        }
        // Positions beyond the table.
        not_held += seq_len - pos.min(seq_len);
        (t, not_held)
    }

    /// Reads as `read` does and compares with the fast oracle's verdict on the same read.
    #[allow(clippy::too_many_arguments)]
    pub fn compare_read(
        &mut self,
        at: Instant,
        pool: PoolId,
        reader: RequestId,
        table: &[Run],
        seq_len: u64,
        chain_upto: u64,
        fast: &Tally,
        what: &'static str,
    ) {
        let (reference, not_held) = self.read(pool, reader, table, seq_len, chain_upto);
        self.reads += 1;
        self.slots_read += seq_len;
        if reference != *fast || not_held > 0 {
            self.disagreement_count += 1;
            if self.disagreements.len() < KEPT {
                self.disagreements.push(Disagreement {
                    at,
                    pool,
                    reader,
                    what,
                    seq_len,
                    fast: fast.clone(),
                    reference,
                    not_held,
                });
            }
        }
    }

    /// Fuzzing signatures of the disagreements: `oracle_disagreement/<read>`.
    pub fn signatures(&self) -> Vec<String> {
        self.disagreements.iter().map(|d| format!("oracle_disagreement/{}", d.what)).collect()
    }
}

/// Every page of a list of runs, in order.
fn pages_of(runs: &[Run]) -> impl Iterator<Item = u32> + '_ {
    runs.iter().flat_map(|r| r.first..r.end())
}
