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
//! tests, snapshot runs, sampled fuzz runs and `--check-oracle`, never for the fast path. One
//! memo keeps a decode step's re-read from costing every slot again. Pages are grouped in blocks
//! of about `BLOCK_SLOTS` slots, and each block carries the generation of the last operation that
//! changed a slot or a holder in it (a reset changes every block). A read goes through the table
//! in chunks, each the pages of one table run that lie in one block and are read whole; a chunk
//! this reader read last time at the same position, in a block unchanged since, counts as it
//! counted then (its verdict, all ok, all unwritten, all one victim's or its tally, and its slots
//! in pages the reader did not hold). That is a cache of a pure function of the chunk's slots and
//! holders, the reader, the position and the reader's chain bound, all in its key; a reader's
//! memo of a pool goes when it frees pages there. `Reference::verify_memo` checks it against the
//! plain read (`read`) on every read (test `memoised_reads_equal_plain_reads`).

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
    /// Generations: `gen` counts the operations that changed a slot or a page's holder;
    /// `block_gen[b]` is the generation of the last such change in block `b` (pages
    /// `b * block_pages ..`): the read memo's validity.
    gen: u64,
    block_pages: u32,
    block_gen: Vec<u64>,
}

impl RefPool {
    /// A pool of never-written slots; every block changed at generation `gen` (a reset's pool
    /// invalidates every memo of the pool it replaces).
    fn new(role: Role, pages: u32, page_size: u64, zero_on_free: bool, gen: u64) -> RefPool {
        let block_pages = (BLOCK_SLOTS / page_size.max(1)).clamp(1, u64::from(u32::MAX)) as u32;
        RefPool {
            role,
            page_size,
            zero_on_free,
            holders: vec![None; pages as usize],
            slots: vec![None; pages as usize * page_size as usize],
            gen,
            block_pages,
            block_gen: vec![gen; pages.div_ceil(block_pages) as usize],
        }
    }

    fn page_slots(&self, page: u32) -> std::ops::Range<usize> {
        let ps = self.page_size as usize;
        page as usize * ps..(page as usize + 1) * ps
    }

    /// Slots `[first, first + len)` are about to change: a new generation for their blocks.
    fn changing(&mut self, first: u64, len: u64) {
        if len == 0 {
            return;
        }
        let ps = self.page_size;
        self.changing_pages(first / ps, (first + len - 1) / ps + 1);
    }

    /// The pages of `runs` are about to change (their holder).
    fn changing_runs(&mut self, runs: &[Run]) {
        for run in runs {
            self.changing_pages(u64::from(run.first), u64::from(run.end()));
        }
    }

    /// Pages `[first, end)` are about to change (a slot of them, or their holder).
    fn changing_pages(&mut self, first: u64, end: u64) {
        if first >= end {
            return;
        }
        self.gen += 1;
        let bp = u64::from(self.block_pages);
        for block in first / bp..=(end - 1) / bp {
            self.block_gen[block as usize] = self.gen;
        }
    }
}

/// What a reader's last memoised read of a pool found (`Reference::read_memo`).
#[derive(Clone, Debug, Default)]
struct Memo {
    /// The pool's generation at that read.
    at_gen: u64,
    /// The reader's chain bound then.
    chain_upto: u64,
    /// The chunks read whole, in table order.
    chunks: Vec<Chunk>,
}

/// Pages `[page, page + pages)` of one block, read whole from table position `pos` on, and what
/// they held for the reader.
#[derive(Clone, Debug)]
struct Chunk {
    page: u32,
    pages: u32,
    pos: u64,
    verdict: ChunkVerdict,
    /// Slots of those pages the reader did not hold.
    not_held: u64,
}

/// What a chunk's slots held for its reader.
#[derive(Clone, Debug)]
enum ChunkVerdict {
    /// Every slot ok.
    Ok,
    /// Every slot never written.
    Uninit,
    /// Every slot another tenant's (a stale page of one victim, the incident's reads).
    Victim(TenantId),
    /// Anything else, its tally.
    Other(Box<Tally>),
}

impl ChunkVerdict {
    fn of(pt: Tally, slots: u64) -> ChunkVerdict {
        if pt.ok == slots {
            ChunkVerdict::Ok
        } else if pt.uninit == slots {
            ChunkVerdict::Uninit
        } else if let (1, Some((&v, &n))) = (pt.victims.len(), pt.victims.iter().next()) {
            if n == slots {
                ChunkVerdict::Victim(v)
            } else {
                ChunkVerdict::Other(Box::new(pt))
            }
        } else {
            ChunkVerdict::Other(Box::new(pt))
        }
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

/// The memo's unit: a block of pages of about this many slots (one page at least), whose
/// generation says whether any slot or holder in it changed.
const BLOCK_SLOTS: u64 = 256;

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
    /// Each reader's last memoised read, by pool and reader (`read_memo`).
    memos: BTreeMap<(PoolId, RequestId), Memo>,
    /// Check every memoised read against the plain read (`read`) and panic on a difference
    /// (tests).
    pub verify_memo: bool,
    /// Pages the memo answered for without classifying their slots.
    pub memo_pages_served: u64,
}

impl Reference {
    /// `pools`: (id, pages, page size, zero_on_free) of every pool, as created (all zeros).
    pub fn new(pools: &[(PoolId, u32, u64, bool)], reqs: Vec<(TenantId, Vec<u64>)>) -> Reference {
        Reference {
            pools: pools.iter().map(|&(id, pages, ps, z)| (id, RefPool::new(id.role, pages, ps, z, 0))).collect(),
            reqs,
            disagreements: Vec::new(),
            disagreement_count: 0,
            reads: 0,
            slots_read: 0,
            decode_radix_cache: false,
            wires: BTreeMap::new(),
            memos: BTreeMap::new(),
            verify_memo: false,
            memo_pages_served: 0,
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
                let old = self.pool(*pool);
                let (z, gen) = (old.zero_on_free, old.gen + 1);
                *self.pool(*pool) = RefPool::new(pool.role, *pages, *page_size, z, gen);
            }
            MemOp::Alloc { pool, r, pages } => {
                let p = self.pool(*pool);
                p.changing_runs(pages);
                for page in pages_of(pages) {
                    p.holders[page as usize] = Some(Holder::Req(*r));
                }
            }
            // The cache keeps holding the pages; the world passes the reader's table to `read`.
            MemOp::Lock { .. } => {}
            MemOp::Free { pool, r, pages } => {
                // Its pages go: what it read of this pool is not read again through this table
                // (a memo is only a cache; dropping it costs nothing but a re-read).
                self.memos.remove(&(*pool, *r));
                let p = self.pool(*pool);
                p.changing_runs(pages);
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
                    p.changing(slot, len);
                    for i in 0..len {
                        p.slots[(slot + i) as usize] =
                            Some(Slot { tenant: *tenant, request: *r, pos: pos + i, chain_upto });
                    }
                }
            }
            MemOp::Copy { src, dst, pages, .. } => {
                // Each `(s, d, c)`: `c` pages from page `s` of the source to page `d` of the
                // destination, as one slice (both pools have the deployment's page size).
                let mut data: Vec<Option<Slot>> = Vec::new();
                for &(s, d, c) in pages {
                    if c == 0 {
                        continue;
                    }
                    let sp = self.pool(*src);
                    data.clear();
                    data.extend_from_slice(&sp.slots[sp.page_slots(s).start..sp.page_slots(s + c - 1).end]);
                    let dp = self.pool(*dst);
                    dp.changing_pages(u64::from(d), u64::from(d) + u64::from(c));
                    let range = dp.page_slots(d).start..dp.page_slots(d + c - 1).end;
                    dp.slots[range].copy_from_slice(&data);
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
                            dp.changing(range.start as u64, n as u64);
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
        p.changing_runs(pages);
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
            if !self.holds(p, page, reader) {
                not_held += end - pos;
            }
            self.classify(p, page, pos, end, reader, tenant, chain_upto, &mut t);
            pos = end;
        }
        // Positions beyond the table.
        not_held += seq_len - pos.min(seq_len);
        (t, not_held)
    }

    /// Whether `reader` may read `page`: it holds it, or the page is radix-cached and readable
    /// there (prefill reads the cached prefix blocks it borrowed; decode those it locked in its
    /// own radix cache, `decode_radix_cache = on`: only then does decode cache).
    #[inline(always)]
    fn holds(&self, p: &RefPool, page: u32, reader: RequestId) -> bool {
        match p.holders[page as usize] {
            Some(Holder::Req(x)) => x == reader,
            Some(Holder::Cache(_)) => p.role == Role::Prefill || self.decode_radix_cache,
            None => false,
        }
    }

    /// Classifies positions `[pos, end)`, the first slots of `page`, as read by `reader`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn classify(
        &self,
        p: &RefPool,
        page: u32,
        pos: u64,
        end: u64,
        reader: RequestId,
        tenant: TenantId,
        chain_upto: u64,
        t: &mut Tally,
    ) {
        let first = page as usize * p.page_size as usize;
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
    }

    /// `read`, with the memo (see the module's doc): the table is read in chunks, each the
    /// table's pages in one block read whole; a chunk that this reader read last time at the
    /// same position, in a block unchanged since, counts as it counted then, without its slots
    /// being classified or its holders looked up again.
    fn read_memo(
        &mut self,
        pool: PoolId,
        reader: RequestId,
        table: &[Run],
        seq_len: u64,
        chain_upto: u64,
    ) -> (Tally, u64) {
        let memo = self.memos.remove(&(pool, reader)).filter(|m| m.chain_upto == chain_upto);
        let p = &self.pools[&pool];
        let tenant = self.reqs[reader.idx()].0;
        let (ps, bp) = (p.page_size, p.block_pages);
        let mut t = Tally::default();
        let mut not_held = 0u64;
        let mut chunks = Vec::with_capacity(memo.as_ref().map_or(0, |m| m.chunks.len() + 1));
        let at_gen = memo.as_ref().map_or(0, |m| m.at_gen);
        let mut seen = memo.map(|m| m.chunks.into_iter().peekable());
        let mut served = 0u64;
        let mut victim_run: Option<(TenantId, u64)> = None;
        let mut pos = 0u64;
        'table: for run in table {
            let mut page = run.first;
            while page < run.end() {
                if pos >= seq_len {
                    break 'table;
                }
                let block = page / bp;
                // The run's pages in this block that the read covers whole.
                let whole = ((seq_len - pos) / ps).min(u64::from(run.end().min((block + 1) * bp) - page)) as u32;
                if whole == 0 {
                    // A page read in part (the table's last): classified, not memoised.
                    if !self.holds(p, page, reader) {
                        not_held += seq_len - pos;
                    }
                    self.classify(p, page, pos, seq_len, reader, tenant, chain_upto, &mut t);
                    pos = seq_len;
                    break 'table;
                }
                let slots = u64::from(whole) * ps;
                let unchanged = p.block_gen[block as usize] <= at_gen;
                let cached = seen.as_mut().and_then(|it| {
                    while it.next_if(|c| c.pos < pos).is_some() {}
                    it.next_if(|c| unchanged && c.page == page && c.pages == whole && c.pos == pos)
                });
                let chunk = match cached {
                    Some(c) => {
                        served += u64::from(whole);
                        c
                    }
                    None => {
                        let (mut ct, mut nh) = (Tally::default(), 0u64);
                        for (k, pg) in (page..page + whole).enumerate() {
                            let at = pos + k as u64 * ps;
                            if !self.holds(p, pg, reader) {
                                nh += ps;
                            }
                            self.classify(p, pg, at, at + ps, reader, tenant, chain_upto, &mut ct);
                        }
                        Chunk { page, pages: whole, pos, verdict: ChunkVerdict::of(ct, slots), not_held: nh }
                    }
                };
                not_held += chunk.not_held;
                match &chunk.verdict {
                    ChunkVerdict::Ok => t.ok += slots,
                    ChunkVerdict::Uninit => t.uninit += slots,
                    // Runs of one victim's chunks are counted in `victim_run` and added to the map once.
                    ChunkVerdict::Victim(v) => match victim_run.as_mut() {
                        Some((w, n)) if w == v => *n += slots,
                        _ => {
                            if let Some((w, n)) = victim_run.replace((*v, slots)) {
                                *t.victims.entry(w).or_default() += n;
                            }
                        }
                    },
                    ChunkVerdict::Other(ct) => t.add(ct),
                }
                chunks.push(chunk);
                pos += slots;
                page += whole;
            }
        }
        if let Some((w, n)) = victim_run {
            *t.victims.entry(w).or_default() += n;
        }
        not_held += seq_len - pos.min(seq_len);
        let at_gen = p.gen;
        self.memo_pages_served += served;
        self.memos.insert((pool, reader), Memo { at_gen, chain_upto, chunks });
        (t, not_held)
    }

    /// Runs `cfg` with the reference on and every memoised read checked against the plain read
    /// (`verify_memo`: a difference panics); returns the reads compared and the pages the memo
    /// served (the memo's tests, here and in `sim/tests`).
    pub fn run_verified(cfg: crate::config::SimConfig) -> (u64, u64) {
        let mut w = crate::world::World::new(cfg, crate::trace::Tracer::new(None));
        w.enable_reference();
        w.reference.as_mut().expect("enabled").verify_memo = true;
        w.run();
        let rf = w.reference.as_ref().expect("enabled");
        (rf.reads, rf.memo_pages_served)
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
        let (reference, not_held) = self.read_memo(pool, reader, table, seq_len, chain_upto);
        if self.verify_memo {
            let plain = self.read(pool, reader, table, seq_len, chain_upto);
            assert_eq!(
                (&reference, not_held),
                (&plain.0, plain.1),
                "memoised read of request {} on {pool} at {at} (positions 0..{seq_len}): memo, plain",
                reader.0
            );
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{draw, Space};

    /// Every operation that changes a slot or a holder invalidates the memo of the block it
    /// changes: request 0 reads its page clean (memoised), the operation changes the page, and
    /// the next read is the plain read's verdict, not the memo's.
    #[test]
    fn every_slot_change_invalidates_the_memo() {
        let (d, p) = (PoolId { role: Role::Decode, index: 0 }, PoolId { role: Role::Prefill, index: 0 });
        let (r0, r1) = (RequestId(0), RequestId(1));
        let (t0, t1) = (TenantId(0), TenantId(1));
        let page = |first| vec![Run { first, count: 1 }];
        let write = |pool, r, tenant, slot, pos| MemOp::Write { pool, r, tenant, slots: vec![(slot, 4, pos)] };
        let changes: Vec<(&str, Vec<MemOp>)> = vec![
            ("write", vec![write(d, r1, t1, 4, 0)]),
            ("copy", vec![write(p, r1, t1, 4, 0), MemOp::Copy { src: p, dst: d, r: r1, pages: vec![(1, 1, 1)] }]),
            (
                "land",
                vec![
                    write(p, r1, t1, 4, 0),
                    MemOp::Send { src: p, r: r1, wire: 7, pages: page(1) },
                    MemOp::Land { src: p, dst: d, r: r1, wire: 7, pages: page(1) },
                ],
            ),
            (
                "free (zero on free)",
                vec![MemOp::Free { pool: d, r: r0, pages: page(1) }, MemOp::Alloc { pool: d, r: r0, pages: page(1) }],
            ),
            (
                "reset",
                vec![MemOp::Reset { pool: d, pages: 4, page_size: 4 }, MemOp::Alloc { pool: d, r: r0, pages: page(1) }],
            ),
        ];
        for (what, ops) in changes {
            let mut rf = Reference::new(&[(d, 4, 4, true), (p, 4, 4, false)], vec![(t0, vec![]), (t1, vec![])]);
            rf.verify_memo = true;
            rf.apply(Instant(0), &MemOp::Alloc { pool: d, r: r0, pages: page(1) }, 0);
            rf.apply(Instant(0), &write(d, r0, t0, 4, 0), 0);
            let first = rf.read_memo(d, r0, &page(1), 4, 0);
            assert_eq!(first.0.ok, 4, "{what}: read clean first");
            for op in &ops {
                rf.apply(Instant(1), op, 0);
            }
            let again = rf.read_memo(d, r0, &page(1), 4, 0);
            assert_eq!(again, rf.read(d, r0, &page(1), 4, 0), "{what}");
            assert_eq!(again.0.ok, 0, "{what}: the page changed under the reader");
            assert_eq!(rf.memo_pages_served, 0, "{what}");
        }
        // A free that zeroes a page changes it for every reader: request 1 reads request 0's page
        // (not its own: a stale read), request 0 frees it, and request 1's next read finds it
        // unwritten.
        let mut rf = Reference::new(&[(d, 4, 4, true)], vec![(t0, vec![]), (t1, vec![])]);
        rf.apply(Instant(0), &MemOp::Alloc { pool: d, r: r0, pages: page(1) }, 0);
        rf.apply(Instant(0), &write(d, r0, t0, 4, 0), 0);
        assert_eq!(rf.read_memo(d, r1, &page(1), 4, 0).0.victims.get(&t0), Some(&4));
        rf.apply(Instant(1), &MemOp::Free { pool: d, r: r0, pages: page(1) }, 0);
        assert_eq!(rf.read_memo(d, r1, &page(1), 4, 0).0.uninit, 4, "zeroed under request 1's memo");
        // A holder's change invalidates the memo as a slot's does: the verdict counts the slots of
        // pages the reader does not hold. Request 0 reads its page, then the page leaves it (freed
        // without zeroing, or re-held by the radix cache): the slots are the same, the verdict not.
        for (what, op) in
            [("free (no zeroing)", Some(MemOp::Free { pool: d, r: r0, pages: page(1) })), ("rehold", None)]
        {
            let mut rf = Reference::new(&[(d, 4, 4, false)], vec![(t0, vec![])]);
            rf.verify_memo = true;
            rf.apply(Instant(0), &MemOp::Alloc { pool: d, r: r0, pages: page(1) }, 0);
            rf.apply(Instant(0), &write(d, r0, t0, 4, 0), 0);
            assert_eq!(rf.read_memo(d, r0, &page(1), 4, 0), (Tally { ok: 4, ..Tally::default() }, 0), "{what}");
            match op {
                Some(op) => rf.apply(Instant(1), &op, 0),
                None => rf.rehold(d, &page(1), Holder::Cache(r0)),
            }
            // (A free also drops the freer's memo; a re-hold leaves it to the block's generation.)
            let again = rf.read_memo(d, r0, &page(1), 4, 0);
            assert_eq!(again, rf.read(d, r0, &page(1), 4, 0), "{what}");
            assert_eq!(again.1, 4, "{what}: the reader no longer holds the page");
            assert_eq!(rf.memo_pages_served, 0, "{what}");
        }
        // A change elsewhere in the block invalidates it too (a block is the memo's unit), and a
        // change in another block does not: request 0 reads pages 0..2 of a pool of 128 one-slot
        // pages (blocks of 256 slots hold every page: one block) and a pool of 128 64-slot pages
        // (blocks of 4 pages).
        for (ps, other, served) in [(1u64, 100u32, 0u64), (64, 100, 2)] {
            let mut rf = Reference::new(&[(d, 128, ps, false)], vec![(t0, vec![]), (t1, vec![])]);
            let two = vec![Run { first: 0, count: 2 }];
            rf.apply(Instant(0), &MemOp::Alloc { pool: d, r: r0, pages: two.clone() }, 0);
            rf.apply(Instant(0), &MemOp::Write { pool: d, r: r0, tenant: t0, slots: vec![(0, 2 * ps, 0)] }, 0);
            let first = rf.read_memo(d, r0, &two, 2 * ps, 0);
            rf.apply(Instant(1), &MemOp::Alloc { pool: d, r: r1, pages: page(other) }, 0);
            assert_eq!(rf.read_memo(d, r0, &two, 2 * ps, 0), first, "page size {ps}");
            assert_eq!(rf.memo_pages_served, served, "page size {ps}: pages served by the memo");
        }
        // And an unchanged page is served by the memo.
        let mut rf = Reference::new(&[(d, 4, 4, false)], vec![(t0, vec![])]);
        rf.apply(Instant(0), &MemOp::Alloc { pool: d, r: r0, pages: page(1) }, 0);
        rf.apply(Instant(0), &write(d, r0, t0, 4, 0), 0);
        rf.read_memo(d, r0, &page(1), 4, 0);
        assert_eq!(rf.read_memo(d, r0, &page(1), 4, 0).0.ok, 4);
        assert_eq!(rf.memo_pages_served, 1);
    }

    /// The read memo is a cache, never a verdict of its own: over drawn runs of every space
    /// (page sizes 1 to 64, every fault, lagged landings, crashes and resets, prefix caches), every
    /// memoised read equals the plain read of the whole table (`verify_memo` panics otherwise),
    /// and the memo does serve reads.
    #[test]
    fn memoised_reads_equal_plain_reads() {
        let spaces = [
            (Space::Blind, 160u64),
            (Space::Prefix(Box::new(Space::Blind)), 60),
            (Space::Profile("sglang-0.5.16".into()), 60),
            (Space::Profile("vllm-nixl".into()), 40),
        ];
        let (mut reads, mut served) = (0u64, 0u64);
        for (space, runs) in spaces {
            for seed in 0..runs {
                let (r, s) = Reference::run_verified(draw(seed, &space));
                reads += r;
                served += s;
            }
        }
        assert!(reads > 10_000 && served > 10_000, "reads {reads}, pages served by the memo {served}");
    }
}
