//! A KV pool: `pages` pages of `page_size` slots, a paged allocator with the engines' free-list
//! orders, and the ownership map the oracle reads (who last wrote every slot, as runs).
//! Pools start as zeros (every slot "never written"); freeing does not clear unless
//! `zero_on_free`. Page 0 is reserved and never handed out.

use crate::config::FreeListPolicy;
use crate::engine::reqmap::ReqMap;
use crate::extent::{IntervalMap, RunValue};
use crate::types::{Instant, PoolId, RequestId, TenantId};
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// A run of consecutive pages `[first, first+count)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Run {
    pub first: u32,
    pub count: u32,
}

impl Run {
    pub fn end(self) -> u32 {
        self.first + self.count
    }

    /// Extends this run by `next` when `next` starts where it ends (the one rule by which lists
    /// of runs coalesce: `push_run`, the free list's pushes at either end and its merge, a free's
    /// released runs); false, and nothing changed, otherwise.
    #[inline(always)]
    pub fn absorb(&mut self, next: Run) -> bool {
        let joins = self.end() == next.first;
        if joins {
            self.count += next.count;
        }
        joins
    }
}

/// Total pages in a list of runs.
pub fn pages_in(runs: &[Run]) -> u64 {
    runs.iter().map(|r| u64::from(r.count)).sum()
}

/// Whether any page of `a` is a page of `b` (runs in any order; for short lists on cold paths).
pub fn runs_overlap(a: &[Run], b: &[Run]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.first < y.end() && y.first < x.end()))
}

/// The pages in both `a` and `b`, as runs (in `a`'s order).
pub fn runs_intersect(a: &[Run], b: &[Run]) -> Vec<Run> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let (first, end) = (x.first.max(y.first), x.end().min(y.end()));
            if first < end {
                out.push(Run { first, count: end - first });
            }
        }
    }
    out
}

/// The first `n` pages of a block table, as runs.
pub fn prefix_pages(runs: &[Run], n: u64) -> Vec<Run> {
    let mut out = Vec::new();
    let mut left = n;
    for r in runs {
        if left == 0 {
            break;
        }
        let take = u64::from(r.count).min(left) as u32;
        out.push(Run { first: r.first, count: take });
        left -= u64::from(take);
    }
    out
}

/// Pages `[from, from+n)` of a block table (by logical page index), as runs.
pub fn slice_pages(runs: &[Run], from: u64, n: u64) -> Vec<Run> {
    let mut out = Vec::new();
    slice_pages_into(runs, from, n, &mut out);
    out
}

/// `slice_pages` appended to `out` (a caller's reused buffer), unmerged with what `out` holds.
pub fn slice_pages_into(runs: &[Run], from: u64, n: u64, out: &mut Vec<Run>) {
    let mut skip = from;
    let mut left = n;
    for r in runs {
        if left == 0 {
            break;
        }
        let c = u64::from(r.count);
        if skip >= c {
            skip -= c;
            continue;
        }
        let take = (c - skip).min(left);
        out.push(Run { first: r.first + skip as u32, count: take as u32 });
        left -= take;
        skip = 0;
    }
}

/// A block table read front to back in consecutive slices: `take_into(n, out)` appends the next
/// `n` pages as runs, what `slice_pages(runs, from, n)` gives with `from` the pages taken so far,
/// in one walk of the table for all the slices (a transfer's batches) instead of one walk each.
pub struct PageCursor<'a> {
    runs: &'a [Run],
    /// Pages of `runs[0]` already taken.
    skip: u32,
}

impl<'a> PageCursor<'a> {
    pub fn new(runs: &'a [Run]) -> Self {
        PageCursor { runs, skip: 0 }
    }

    /// Appends the next `n` pages (fewer at the end of the table) to `out`.
    pub fn take_into(&mut self, n: u64, out: &mut Vec<Run>) {
        let mut left = n;
        while left > 0 {
            let Some((r, rest)) = self.runs.split_first() else { break };
            let avail = u64::from(r.count - self.skip);
            let take = avail.min(left) as u32;
            out.push(Run { first: r.first + self.skip, count: take });
            left -= u64::from(take);
            if u64::from(take) == avail {
                self.runs = rest;
                self.skip = 0;
            } else {
                self.skip += take;
            }
        }
    }
}

/// Whether a page held by `h` may be written or read by `writer` (`Pool::foreign_pages`): its
/// own page, or a cache entry of its own or of a request it borrowed from (`cached`).
#[inline(always)]
fn holder_ok(h: Option<&Holder>, writer: RequestId, cached: (Option<RequestId>, &[RequestId])) -> bool {
    match h {
        Some(Holder::Req(x)) => *x == writer,
        Some(Holder::Cache(x)) => cached.0 == Some(*x) || cached.1.contains(x),
        None => false,
    }
}

/// Appends `r` to a block table, merging with the last run when contiguous.
pub fn push_run(runs: &mut Vec<Run>, r: Run) {
    if !runs.last_mut().is_some_and(|last| last.absorb(r)) {
        runs.push(r);
    }
}

/// `runs` sorted, with overlapping and adjacent runs merged: each page once. (A write reported
/// piece by piece — a transfer's copy pairs, two of which may end and start inside one page —
/// names a page once per piece.)
pub fn merge_runs(runs: &mut Vec<Run>) {
    runs.retain(|r| r.count > 0);
    runs.sort_unstable_by_key(|r| r.first);
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    for r in runs.drain(..) {
        match out.last_mut() {
            Some(last) if last.end() >= r.first => {
                let end = last.end().max(r.end());
                last.count = end - last.first;
            }
            _ => out.push(r),
        }
    }
    *runs = out;
}

/// Who last wrote a slot: tenant, request, the token position written there, the write epoch (a
/// pool-wide write counter) with its virtual time, and `chain_upto`: positions below it hold
/// prompt KV whose content is fixed by the writer's prefix chain (full 512-token prompt blocks;
/// 0 for generated tokens and stubs), so another request with the same chain up to that block
/// would have written the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Writer {
    pub tenant: TenantId,
    pub request: RequestId,
    pub pos: u64,
    pub epoch: u64,
    pub at: Instant,
    pub chain_upto: u64,
}

impl RunValue for Writer {
    fn advanced(&self, by: u64) -> Self {
        Writer { pos: self.pos + by, ..*self }
    }
    fn continued_by(&self, by: u64, next: &Self) -> bool {
        self.tenant == next.tenant
            && self.request == next.request
            && self.pos + by == next.pos
            && self.chain_upto == next.chain_upto
    }
}

/// Who holds a page now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Holder {
    Req(RequestId),
    /// Released into prefill's radix cache by this request: still allocated, evictable. The
    /// request names the cache entry (a request releases once), so a page evicted, reused and
    /// cached again by another request has another holder.
    Cache(RequestId),
}

impl RunValue for Holder {
    fn advanced(&self, _by: u64) -> Self {
        *self
    }
}

/// Slots a transfer's land left as zeros over KV written there before: the land copied its
/// source's never-written slots (`Pool::land_copy`), e.g. a lagged transfer landing a page's
/// unwritten tail over the tokens decode had appended meanwhile. The request is the transfer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LandedZeros(pub RequestId);

impl RunValue for LandedZeros {
    fn advanced(&self, _by: u64) -> Self {
        *self
    }
}

/// Pushes a run at the head, merging with the head run when contiguous (same reuse order, fewer
/// runs: without it a churned LIFO list decays towards one entry per page).
fn push_front_merged(q: &mut VecDeque<Run>, mut r: Run) {
    if let Some(h) = q.front_mut() {
        if r.absorb(*h) {
            *h = r;
            return;
        }
    }
    q.push_front(r);
}

/// Pushes a run at the tail, merging with the tail run when contiguous.
fn push_back_merged(q: &mut VecDeque<Run>, r: Run) {
    if !q.back_mut().is_some_and(|t| t.absorb(r)) {
        q.push_back(r);
    }
}

/// The paged allocator's free structures.
#[derive(Clone, Debug)]
struct Allocator {
    policy: FreeListPolicy,
    free: VecDeque<Run>,
    parked: Vec<Run>,
    free_pages: u64,
    parked_pages: u64,
}

impl Allocator {
    fn new(policy: FreeListPolicy, pages: u32) -> Allocator {
        let mut free = VecDeque::new();
        if pages > 1 {
            free.push_back(Run { first: 1, count: pages - 1 });
        }
        Allocator { policy, free, parked: Vec::new(), free_pages: u64::from(pages.saturating_sub(1)), parked_pages: 0 }
    }

    fn available(&self) -> u64 {
        self.free_pages + self.parked_pages
    }

    /// sglang's `merge_and_sort_free`: parked and free pages merged, sorted ascending, coalesced.
    /// In the free list's own buffer (the deque turned into a vector and back, no copy), the
    /// parked list emptied but kept: no list allocated per merge. (The stable sort, as before,
    /// and `Run::absorb`'s coalescing, pair by pair, as `push_run` did it.)
    fn merge_and_sort(&mut self) {
        let mut all = Vec::from(std::mem::take(&mut self.free));
        all.extend_from_slice(&self.parked);
        self.parked.clear();
        all.sort_by_key(|r| r.first);
        all.dedup_by(|r, last| last.absorb(*r));
        self.free = all.into();
        self.free_pages += self.parked_pages;
        self.parked_pages = 0;
    }

    /// `n` pages into `out` (empty), or false with nothing taken.
    fn alloc_into(&mut self, n: u64, out: &mut Vec<Run>) -> bool {
        if n > self.available() {
            return false;
        }
        if n > self.free_pages {
            self.merge_and_sort();
        }
        let mut left = n;
        while left > 0 {
            let head = self.free.front_mut().expect("free_pages counts the free list");
            let take = u64::from(head.count).min(left) as u32;
            push_run(out, Run { first: head.first, count: take });
            head.first += take;
            head.count -= take;
            if head.count == 0 {
                self.free.pop_front();
            }
            left -= u64::from(take);
        }
        self.free_pages -= n;
        true
    }

    /// One page: what `alloc(1)` gives, without a list.
    fn alloc_page(&mut self) -> Option<u32> {
        if self.available() == 0 {
            return None;
        }
        if self.free_pages == 0 {
            self.merge_and_sort();
        }
        let head = self.free.front_mut().expect("free_pages counts the free list");
        let page = head.first;
        head.first += 1;
        head.count -= 1;
        if head.count == 0 {
            self.free.pop_front();
        }
        self.free_pages -= 1;
        Some(page)
    }

    /// Frees `runs` (block-table order); the pages in `unhashed` (also table order, after `runs`
    /// in the table) hold no prefix hash. Only `lru_unhashed_first` tells the two apart.
    /// (`all`: a caller's reused list, for the two as one table.)
    fn free_split(&mut self, runs: &[Run], unhashed: &[Run], all: &mut Vec<Run>) {
        if self.policy != FreeListPolicy::LruUnhashedFirst {
            if unhashed.is_empty() {
                return self.free(runs);
            }
            all.clear();
            all.extend_from_slice(runs);
            for r in unhashed {
                push_run(all, *r);
            }
            return self.free(all);
        }
        // vLLM frees a request's blocks tail first; blocks without a hash are prepended (the
        // table's last one ends at the head, reused first), hashed ones appended to the tail.
        unhashed.iter().for_each(|r| push_front_merged(&mut self.free, *r));
        runs.iter().rev().for_each(|r| push_back_merged(&mut self.free, *r));
        self.free_pages += pages_in(runs) + pages_in(unhashed);
    }

    fn free(&mut self, runs: &[Run]) {
        let n = pages_in(runs);
        match self.policy {
            FreeListPolicy::SortedOnMerge => {
                self.parked.extend_from_slice(runs);
                self.parked_pages += n;
                return;
            }
            // Prepend so the first freed run is reused first (paged allocator outside PD).
            FreeListPolicy::Lifo => runs.iter().rev().for_each(|r| push_front_merged(&mut self.free, *r)),
            FreeListPolicy::Fifo => runs.iter().for_each(|r| push_back_merged(&mut self.free, *r)),
            // vLLM frees a request's blocks in reverse order to the tail of the LRU queue.
            FreeListPolicy::Lru | FreeListPolicy::LruUnhashedFirst => {
                runs.iter().rev().for_each(|r| push_back_merged(&mut self.free, *r))
            }
        }
        self.free_pages += n;
    }
}

/// What a write or copy found in the pages it touched.
#[derive(Debug, Default)]
pub struct WriteReport {
    /// Pages written although not held by the writer: (pages, holder now, or None = free).
    pub foreign: Vec<(Run, Option<Holder>)>,
    /// What a `write` wrote: `(slot, len, first position)` pieces, for the memory log.
    pub slots: Vec<(u64, u64, u64)>,
    /// What an `append` on its fast path wrote instead: one `(slot, position)`, kept out of
    /// `slots` so a decode token allocates nothing (`WriteReport::pieces` has both).
    pub token: Option<(u64, u64)>,
}

impl WriteReport {
    /// Every `(slot, len, first position)` piece written: `slots`, or the one appended token.
    pub fn pieces(&self) -> Vec<(u64, u64, u64)> {
        match self.token {
            Some((slot, pos)) => vec![(slot, 1, pos)],
            None => self.slots.clone(),
        }
    }
}

/// What the caller of `Pool::append` knows, so the pool need not look it up.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    /// Pages in the block table (`pages_in(table)`; a decode request keeps the count).
    pub table_pages: u64,
    /// The page the token lands in was allocated to the writer just before (a decode step's page
    /// growth; with one-token pages, every token): its holder is not looked up.
    pub fresh: bool,
}

/// A free of pages that the freer does not hold.
#[derive(Debug)]
pub struct BadFree {
    pub pages: Run,
    pub holder: Option<Holder>,
}

/// A request's decode tokens appended since its last materialisation: slots `[start, end)` hold
/// its consecutive positions from `writer.pos` on (`writer` is the first token's, as the merged run
/// of the ownership map keeps it). `page` is the last page checked to be held by the writer; an open
/// append is materialised (and closed) before pages it covers may leave their holder (`free`,
/// `rehold`), so the check stays valid while the entry is open.
#[derive(Clone, Copy, Debug)]
struct OpenAppend {
    start: u64,
    end: u64,
    writer: Writer,
    page: u64,
}

/// The ownership map plus the open appends not yet written into it. Decode progress is kept as a
/// watermark per request (`open`) and materialised — `IntervalMap::set` of the whole appended range,
/// which leaves exactly the map the per-token sets would (each token continues the run of the one
/// before it: see `IntervalMap::set`'s merge) — before an operation reads or changes the slots
/// it covers or touches (`touch`), or when the whole map is shown or checked (`map`).
/// Open ranges lie in pages their writers hold (checked per page, and an open range is materialised
/// before its pages change holder), so they are disjoint and the order in which they are
/// materialised does not matter.
#[derive(Clone)]
struct Owners {
    map: IntervalMap<Writer>,
    /// The open appends by writer, in request order (the order does not matter: open ranges are
    /// disjoint), looked up on every decode token.
    open: ReqMap<OpenAppend>,
}

impl Owners {
    /// The materialised map.
    fn map(&mut self) -> &mut IntervalMap<Writer> {
        if !self.open.is_empty() {
            for (_, o) in self.open.drain() {
                self.map.set(o.start, o.end, o.writer);
            }
        }
        &mut self.map
    }

    /// The map, with the open appends that overlap or touch slots `[start, end)` materialised: what
    /// an operation on those slots may read or merge with (`IntervalMap::set` looks at the run
    /// ending at its start; an open append that starts at `end` would look at this operation's).
    /// Open appends elsewhere stay open: their sets commute with this operation's.
    fn touch(&mut self, start: u64, end: u64) -> &mut IntervalMap<Writer> {
        if self.open.values().any(|o| o.start <= end && o.end >= start) {
            self.materialise(start, end);
        }
        &mut self.map
    }

    /// `touch` when an open append meets `[start, end]`: out of line (as `Pool::foreign_walk`).
    #[cold]
    #[inline(never)]
    fn materialise(&mut self, start: u64, end: u64) {
        let hit = |o: &OpenAppend| o.start <= end && o.end >= start;
        let mut due = Vec::new();
        self.open.retain(|o| {
            let h = hit(o);
            if h {
                due.push(*o);
            }
            !h
        });
        for o in due {
            self.map.set(o.start, o.end, o.writer);
        }
    }

    /// Materialises `request`'s open append, if any (and only it).
    fn settle(&mut self, request: RequestId) {
        if let Some(o) = self.open.remove(&request) {
            self.map.set(o.start, o.end, o.writer);
        }
    }

    /// `touch` of the slots of whole pages.
    fn touch_pages(&mut self, pages: &[Run], page_size: u64) -> &mut IntervalMap<Writer> {
        for r in pages {
            self.touch(u64::from(r.first) * page_size, u64::from(r.end()) * page_size);
        }
        &mut self.map
    }
}

/// One KV pool.
#[derive(Clone)]
pub struct Pool {
    pub id: PoolId,
    pub page_size: u64,
    pub pages: u32,
    zero_on_free: bool,
    alloc: Allocator,
    /// Interior mutability only to materialise open appends on a read (`read`, `page_contents`,
    /// `Debug`): the map a reader sees is always the one per-token writes would have built.
    owners: RefCell<Owners>,
    holders: IntervalMap<Holder>,
    /// Absent slots of `owners` that a land zeroed over written KV (`LandedZeros`), for the story
    /// of an uninitialised read only: "never written" would be false there. Cleared where a
    /// free zeroes the slots (`zero_on_free`); a write leaves it (the slot is then present, and
    /// only a later land, which sets it again, can make it absent without a free). Not in the
    /// state image (`Debug`): no verdict reads it.
    landed_zeros: IntervalMap<LandedZeros>,
    held_pages: u64,
    write_epoch: u64,
    /// The invariants held when last checked and nothing has changed since (`invariants` skips
    /// the walk): cleared by every change, the materialisation of open appends included. Under
    /// `--check invariants` a step usually changes one pool of several.
    checked: Cell<bool>,
    /// Reused buffers of `free_hashed` (no state: empty between calls, left out of `Debug`).
    spare_ok: Vec<Run>,
    spare_cut: Vec<Run>,
    /// The list a `write` reports its pieces in (`WriteReport::slots`), handed back by a caller
    /// done with it (`reuse_pieces`): a prefill chunk's write allocated a fresh one every time.
    spare_pieces: Vec<(u64, u64, u64)>,
}

/// The same image as a derived `Debug` of the materialised pool (the explorer's state digest
/// hashes it, so open appends never make two equal states look different).
impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.checked.set(false);
        let mut o = self.owners.borrow_mut();
        f.debug_struct("Pool")
            .field("id", &self.id)
            .field("page_size", &self.page_size)
            .field("pages", &self.pages)
            .field("zero_on_free", &self.zero_on_free)
            .field("alloc", &self.alloc)
            .field("owners", o.map())
            .field("holders", &self.holders)
            .field("held_pages", &self.held_pages)
            .field("write_epoch", &self.write_epoch)
            .finish()
    }
}

impl Pool {
    pub fn new(id: PoolId, pool_tokens: u64, page_size: u64, policy: FreeListPolicy, zero_on_free: bool) -> Pool {
        // sglang sizes the token pool as `max_total_num_tokens + page_size`: page 0 is the extra,
        // reserved page, so `pool_tokens` tokens remain usable.
        let pages = u32::try_from(pool_tokens / page_size + 1).expect("validated: pool pages fit u32");
        Pool {
            id,
            page_size,
            pages,
            zero_on_free,
            alloc: Allocator::new(policy, pages),
            owners: RefCell::new(Owners {
                map: IntervalMap::with_universe(u64::from(pages) * page_size),
                open: ReqMap::new(),
            }),
            holders: IntervalMap::with_universe(u64::from(pages)),
            landed_zeros: IntervalMap::new(),
            held_pages: 0,
            write_epoch: 0,
            checked: Cell::new(false),
            spare_ok: Vec::new(),
            spare_cut: Vec::new(),
            spare_pieces: Vec::new(),
        }
    }

    /// A node restart: a fresh process allocates a fresh, zeroed pool.
    pub fn reset(&mut self) {
        *self = Pool::new(
            self.id,
            u64::from(self.pages - 1) * self.page_size,
            self.page_size,
            self.alloc.policy,
            self.zero_on_free,
        );
    }

    pub fn free_pages(&self) -> u64 {
        self.alloc.available()
    }

    /// The pages requests can hold: the pool's `pool_tokens / page_size` (page 0 is reserved).
    pub fn usable_pages(&self) -> u64 {
        u64::from(self.pages - 1)
    }

    pub fn held_pages(&self) -> u64 {
        self.held_pages
    }

    /// How many pages of `runs` `h` holds.
    pub fn held_by(&self, runs: &[Run], h: Holder) -> u64 {
        let mut n = 0;
        for r in runs {
            self.holders.visit(u64::from(r.first), u64::from(r.end()), |s, e, x| {
                if x == Some(&h) {
                    n += e - s;
                }
            });
        }
        n
    }

    pub fn ownership_runs(&self) -> usize {
        self.checked.set(false);
        self.owners.borrow_mut().map().len_runs()
    }

    pub fn alloc(&mut self, n: u64, holder: Holder) -> Option<Vec<Run>> {
        let mut runs = Vec::new();
        self.alloc_into(n, holder, &mut runs).then_some(runs)
    }

    /// `alloc` into `out` (empty: a caller's reused list); false, and nothing taken, when the
    /// pages are not there.
    pub fn alloc_into(&mut self, n: u64, holder: Holder, out: &mut Vec<Run>) -> bool {
        debug_assert!(out.is_empty(), "alloc_into fills an empty list");
        self.checked.set(false);
        if !self.alloc.alloc_into(n, out) {
            return false;
        }
        for r in out.iter() {
            self.holders.set(u64::from(r.first), u64::from(r.end()), holder);
        }
        self.held_pages += n;
        true
    }

    /// One page for `holder`: what `alloc(1, holder)` gives, without a list (a decode step's
    /// page at a page boundary; with one-token pages, every token).
    pub fn alloc_page(&mut self, holder: Holder) -> Option<u32> {
        self.checked.set(false);
        let page = self.alloc.alloc_page()?;
        self.holders.set(u64::from(page), u64::from(page) + 1, holder);
        self.held_pages += 1;
        Some(page)
    }

    /// Changes the holder of pages (a request's pages entering or leaving the radix cache).
    pub fn rehold(&mut self, runs: &[Run], holder: Holder) {
        self.checked.set(false);
        // Open appends are checked against the holders they saw.
        self.owners.get_mut().touch_pages(runs, self.page_size);
        for r in runs {
            self.holders.set(u64::from(r.first), u64::from(r.end()), holder);
        }
    }

    /// Returns pages to the allocator. Pages the freer does not hold are not freed (the model
    /// never corrupts its own free list) and come back as `BadFree` for the oracle.
    pub fn free(&mut self, runs: &[Run], by: Holder) -> Vec<BadFree> {
        self.free_hashed(runs, by, u64::MAX)
    }

    /// Frees `runs` (block-table order) of which the first `hashed` pages carry a prefix hash
    /// (full pages of computed KV under prefix caching) and the rest do not: the reuse order of
    /// `lru_unhashed_first` depends on it.
    pub fn free_hashed(&mut self, runs: &[Run], by: Holder, hashed: u64) -> Vec<BadFree> {
        self.checked.set(false);
        let total = pages_in(runs);
        let mut bad = Vec::new();
        // The freed runs, hashed ones then unhashed ones from `split` on, in the pool's reused
        // buffers (a free is several a request; fresh lists were a fifth of a fuzzer-sized run's
        // allocations).
        let mut ok = std::mem::take(&mut self.spare_ok);
        ok.clear();
        let split = if hashed >= total {
            // Every page hashed (the usual free, and `free`): the runs as they are.
            self.release_held(runs, by, &mut bad, &mut ok);
            ok.len()
        } else {
            let mut cut = std::mem::take(&mut self.spare_cut);
            cut.clear();
            slice_pages_into(runs, 0, hashed, &mut cut);
            let head = cut.len();
            slice_pages_into(runs, hashed, total - hashed, &mut cut);
            self.release_held(&cut[..head], by, &mut bad, &mut ok);
            let split = ok.len();
            self.release_held(&cut[head..], by, &mut bad, &mut ok);
            self.spare_cut = cut;
            split
        };
        self.held_pages -= pages_in(&ok);
        self.alloc.free_split(&ok[..split], &ok[split..], &mut self.spare_cut);
        self.spare_ok = ok;
        bad
    }

    /// Clears the holder of the pages of `runs` that `by` holds (appended to `ok` as runs, merged
    /// with each other but not with what `ok` held before); the rest are bad frees.
    fn release_held(&mut self, runs: &[Run], by: Holder, bad: &mut Vec<BadFree>, ok: &mut Vec<Run>) {
        let base = ok.len();
        let push = |ok: &mut Vec<Run>, r: Run| {
            if !ok[base..].last_mut().is_some_and(|last| last.absorb(r)) {
                ok.push(r);
            }
        };
        // Open appends are checked against the holders they saw: materialise them before a page
        // can change hands (a freed page reused by another request must not be overwritten by a
        // stale open append later). Only the freer's pages change hands, and an open append lies
        // in pages its own writer holds (`Owners`), so the freer's own open append is the only
        // one there: settle it, without scanning every open append per run (`touch_pages`). The
        // others stay open: a holder change writes no slot, their sets look only at the run
        // ending where they start, and every operation that changes a slot (`write`, `land_copy`,
        // a zeroing free) first materialises the open appends it overlaps or touches — so they
        // leave the map per-token sets would.
        if let Holder::Req(r) = by {
            self.owners.get_mut().settle(r);
        }
        for r in runs {
            // Usually the run is one holder run of its own (a page a decode step took): no walk.
            if self.holders.exact(u64::from(r.first), u64::from(r.end())) == Some(&by) {
                push(ok, *r);
                continue;
            }
            self.holders.visit(u64::from(r.first), u64::from(r.end()), |s, e, h| {
                let run = Run { first: s as u32, count: (e - s) as u32 };
                if h == Some(&by) {
                    push(ok, run);
                } else {
                    bad.push(BadFree { pages: run, holder: h.copied() });
                }
            });
        }
        for r in &ok[base..] {
            self.holders.clear(u64::from(r.first), u64::from(r.end()));
            if self.zero_on_free {
                let ps = self.page_size;
                self.owners
                    .get_mut()
                    .touch(u64::from(r.first) * ps, u64::from(r.end()) * ps)
                    .clear(u64::from(r.first) * ps, u64::from(r.end()) * ps);
                if self.landed_zeros.len_runs() > 0 {
                    self.landed_zeros.clear(u64::from(r.first) * ps, u64::from(r.end()) * ps);
                }
            }
        }
    }

    /// The slot holding position `pos` of a block table of `table_pages` pages (`pages_in(table)`,
    /// which the caller keeps), or `None` past its end. A decode token lands in the table's last
    /// run: found there without walking the table; any other position as `map_positions` finds it.
    #[inline(always)]
    fn slot_of(&self, table: &[Run], table_pages: u64, pos: u64) -> Option<u64> {
        debug_assert_eq!(table_pages, pages_in(table), "the caller's page count is the table's");
        let ps = self.page_size;
        if let Some(last) = table.last() {
            let start = (table_pages - u64::from(last.count)) * ps;
            if pos >= start && pos < table_pages * ps {
                return Some(u64::from(last.first) * ps + (pos - start));
            }
        }
        self.slot_of_walked(table, pos)
    }

    /// `slot_of` of a position before the table's last run (or past its end): out of line, so
    /// the decode step inlines only the common case.
    #[inline(never)]
    fn slot_of_walked(&self, table: &[Run], pos: u64) -> Option<u64> {
        let mut slot = None;
        self.map_positions(table, pos, pos + 1, |_, s, _| slot = Some(s));
        slot
    }

    /// Visits the physical slot ranges behind logical positions `[from, to)` of a block table:
    /// `f(first_pos, slot_start, len)`.
    pub fn map_positions(&self, table: &[Run], from: u64, to: u64, mut f: impl FnMut(u64, u64, u64)) {
        let ps = self.page_size;
        // Decode steps touch the table's tail: when the range starts within the last runs, start
        // there instead of running the per-run loop below from the first run. Summing the table's
        // pages is still a pass over it, but a cheap one (callgrind: the loop without this shortcut
        // costs 17% more instructions on mixed-10k).
        let (mut start, mut run_pos) = (0usize, 0u64);
        if from > 0 && table.len() > 8 {
            let all = pages_in(table) * ps;
            let tail: u64 = table[table.len() - 8..].iter().map(|r| u64::from(r.count) * ps).sum();
            if all - tail <= from {
                (start, run_pos) = (table.len() - 8, all - tail);
            }
        }
        for r in &table[start..] {
            if run_pos >= to {
                break;
            }
            let run_len = u64::from(r.count) * ps;
            let (lo, hi) = (from.max(run_pos), to.min(run_pos + run_len));
            if lo < hi {
                f(lo, u64::from(r.first) * ps + (lo - run_pos), hi - lo);
            }
            run_pos += run_len;
        }
    }

    fn foreign_pages(
        &self,
        slot_start: u64,
        len: u64,
        writer: RequestId,
        cached: (Option<RequestId>, &[RequestId]),
        out: &mut WriteReport,
    ) {
        let ps = self.page_size;
        let (p0, p1) = (slot_start / ps, (slot_start + len).div_ceil(ps));
        // The usual case: one holder run covers the pages, and it is the writer's (one lookup,
        // no walk). Otherwise the walk reports the foreign pieces run by run.
        if self.holders.covering(p0, p1).is_some_and(|(_, h)| holder_ok(Some(h), writer, cached)) {
            return;
        }
        self.foreign_walk((p0, p1), writer, cached, out);
    }

    /// `foreign_pages` past its usual case: the holders of pages `[p0, p1)` walked piece by piece.
    /// Out of line, so the usual check does not save and restore the registers the walk needs.
    #[cold]
    #[inline(never)]
    fn foreign_walk(
        &self,
        (p0, p1): (u64, u64),
        writer: RequestId,
        cached: (Option<RequestId>, &[RequestId]),
        out: &mut WriteReport,
    ) {
        self.holders.visit(p0, p1, |s, e, h| {
            if !holder_ok(h, writer, cached) {
                out.foreign.push((Run { first: s as u32, count: (e - s) as u32 }, h.copied()));
            }
        });
    }

    /// Pages of `pages` held neither by `r`, nor by its own cache entry, nor by the cache entries of
    /// `lenders` (the requests whose cached blocks `r` borrowed) — for reads of
    /// source pages by a transfer: a request legitimately reads its own pages after releasing them
    /// into the radix cache, and the cached prefix blocks it borrowed — but not a page that was
    /// evicted, reused and cached again by someone else).
    pub fn not_held_by(&self, pages: &[Run], r: RequestId, lenders: &[RequestId]) -> WriteReport {
        let mut rep = WriteReport::default();
        for run in pages {
            self.foreign_pages(
                u64::from(run.first) * self.page_size,
                u64::from(run.count) * self.page_size,
                r,
                (Some(r), lenders),
                &mut rep,
            );
        }
        rep
    }

    /// Writes the KV of positions `[from, to)` of `request` into its block table (`chain_upto`:
    /// see `Writer`).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        table: &[Run],
        from: u64,
        to: u64,
        tenant: TenantId,
        request: RequestId,
        at: Instant,
        chain_upto: u64,
    ) -> WriteReport {
        self.write_checked(table, (from, to), tenant, request, at, chain_upto, None)
    }

    /// `write`, with the pages the prefix cache holds for `cached_own` (if any) counted as the
    /// writer's. `Some(request)` is a rewrite of positions `request` computed again with the same
    /// content (`decode_first_write = last_prompt_token`: vLLM's decode recomputes the last
    /// loaded prompt position): a page of its own that the prefix cache holds under its name
    /// (vLLM cached the loaded block, which the request keeps using) is not a foreign page.
    #[allow(clippy::too_many_arguments)]
    pub fn write_checked(
        &mut self,
        table: &[Run],
        (from, to): (u64, u64),
        tenant: TenantId,
        request: RequestId,
        at: Instant,
        chain_upto: u64,
        cached_own: Option<RequestId>,
    ) -> WriteReport {
        self.checked.set(false);
        let mut rep = WriteReport::default();
        self.write_epoch += 1;
        let epoch = self.write_epoch;
        let mut pieces = std::mem::take(&mut self.spare_pieces);
        pieces.clear();
        self.map_positions(table, from, to, |pos, slot, len| pieces.push((slot, len, pos)));
        for &(slot, len, _) in &pieces {
            self.foreign_pages(slot, len, request, (cached_own, &[]), &mut rep);
        }
        let owners = self.owners.get_mut();
        for &(slot, len, _) in &pieces {
            owners.touch(slot, slot + len);
        }
        let owners = &mut owners.map;
        for &(slot, len, pos) in &pieces {
            owners.set(slot, slot + len, Writer { tenant, request, pos, epoch, at, chain_upto });
        }
        rep.slots = pieces;
        rep
    }

    /// Takes back a `WriteReport::slots` list its caller is done with, for the next `write`.
    pub fn reuse_pieces(&mut self, pieces: Vec<(u64, u64, u64)>) {
        self.spare_pieces = pieces;
    }

    /// `append`'s common token, alone and inlined into the decode step: when position `pos` (in a
    /// page the caller did not just take) is the slot right after
    /// `request`'s open append, in the page that append last checked, and continues its run, the
    /// append is extended and the slot returned — exactly what `append` does and reports for it
    /// (a report with only `token`). `None`: nothing was changed; `append` takes the token.
    /// Kept apart from `append` so the step's loop does not pay `append`'s prologue and report
    /// for every token (callgrind: ≈ 130 instructions a token in `append`, most of them the call,
    /// its saved registers and the two-vector report built and dropped).
    #[inline(always)]
    pub fn extend_open(
        &mut self,
        table: &[Run],
        table_pages: u64,
        pos: u64,
        tenant: TenantId,
        request: RequestId,
    ) -> Option<u64> {
        let slot = self.slot_of(table, table_pages, pos)?;
        let ps = self.page_size;
        let o = self.owners.get_mut().open.get_mut(&request)?;
        // The append's last token lies in `o.page` (it moves there with the token that enters
        // it), so the slot after it is in that page exactly when it is below the page's end: no
        // division.
        if o.end != slot || slot >= (o.page + 1) * ps {
            return None;
        }
        debug_assert_eq!(slot / ps, o.page, "the open append's next slot is in its page");
        // The open append is `request`'s own (keyed by it: `append` opens it with the request, its
        // tenant and chain bound 0, as every decode token has), so the token continues it (the
        // writer's `continued_by`) exactly when it continues its positions.
        debug_assert!(
            o.writer.request == request && o.writer.tenant == tenant && o.writer.chain_upto == 0,
            "an open append is its request's, of its tenant, with chain bound 0"
        );
        if o.writer.pos + (o.end - o.start) != pos {
            return None;
        }
        o.end += 1;
        self.write_epoch += 1;
        self.checked.set(false);
        Some(slot)
    }

    /// A decode token: position `pos` of `request` (a generated token: `chain_upto` 0) written into
    /// its block table. The same effect, report and write epoch as `write(table, pos, pos + 1, …)`,
    /// but the token only extends the request's open append (a watermark) while it is the next slot
    /// after the previous one in a page the request still holds; the ownership map is materialised
    /// when anything else touches it. A token in a page the writer does not hold takes `write`'s path.
    /// `known`: what the caller knows of the table (its page count) and of the page the token lands in.
    pub fn append(
        &mut self,
        table: &[Run],
        known: Known,
        pos: u64,
        tenant: TenantId,
        request: RequestId,
        at: Instant,
    ) -> WriteReport {
        self.checked.set(false);
        let Known { table_pages, fresh } = known;
        let Some(slot) = self.slot_of(table, table_pages, pos) else {
            // Beyond the table: `write` writes nothing either (but counts the epoch).
            return self.write(table, pos, pos + 1, tenant, request, at, 0);
        };
        // The common token (`extend_open`, which the decode step calls itself first). Never a
        // `fresh` page's: its first slot is not the next one of an append in another page.
        if !fresh {
            if let Some(slot) = self.extend_open(table, table_pages, pos, tenant, request) {
                return WriteReport { foreign: Vec::new(), slots: Vec::new(), token: Some((slot, pos)) };
            }
        }
        let ps = self.page_size;
        let page = slot / ps;
        let open = self.owners.get_mut().open.get(&request).map(|o| o.page);
        debug_assert!(
            !fresh || self.holder_of(page as u32) == Some(Holder::Req(request)),
            "a fresh page is the writer's"
        );
        if open != Some(page) && !fresh {
            // A page not checked while this append is open: is it the writer's? (Not asked of
            // a `fresh` page: the caller allocated it to the writer just before this token, as a
            // decode step does at a page boundary — with one-token pages, on every token.)
            let mut rep = WriteReport::default();
            self.foreign_pages(slot, 1, request, (None, &[]), &mut rep);
            if !rep.foreign.is_empty() {
                return self.write(table, pos, pos + 1, tenant, request, at, 0);
            }
        }
        self.write_epoch += 1;
        let writer = Writer { tenant, request, pos, epoch: self.write_epoch, at, chain_upto: 0 };
        let owners = self.owners.get_mut();
        match owners.open.get_mut(&request) {
            Some(o) => {
                if o.end == slot && o.writer.continued_by(o.end - o.start, &writer) {
                    o.end += 1;
                    o.page = page;
                } else {
                    let old = std::mem::replace(o, OpenAppend { start: slot, end: slot + 1, writer, page });
                    owners.map.set(old.start, old.end, old.writer);
                }
            }
            None => {
                owners.open.insert(request, OpenAppend { start: slot, end: slot + 1, writer, page });
            }
        }
        WriteReport { foreign: Vec::new(), slots: Vec::new(), token: Some((slot, pos)) }
    }

    /// The ownership pieces of the slots of `pages` (for a copy out of this pool).
    pub fn page_contents(&self, pages: &[Run]) -> Vec<(u64, u64, Option<Writer>)> {
        let mut out = Vec::new();
        self.page_contents_into(pages, &mut out);
        out
    }

    /// `page_contents` into `out` (cleared first): a caller that lands the contents at once
    /// reuses one buffer instead of allocating one per transfer batch.
    pub fn page_contents_into(&self, pages: &[Run], out: &mut Vec<(u64, u64, Option<Writer>)>) {
        out.clear();
        let ps = self.page_size;
        self.checked.set(false);
        let mut owners = self.owners.borrow_mut();
        let owners = owners.touch_pages(pages, ps);
        for r in pages {
            owners.visit(u64::from(r.first) * ps, u64::from(r.end()) * ps, |s, e, w| out.push((s, e, w.cloned())));
        }
    }

    /// Lands copied page contents (from `page_contents` of the source) into `dst` pages, whole
    /// pages, in order. `copier` is the request the transfer belongs to.
    pub fn land_copy(
        &mut self,
        contents: &[(u64, u64, Option<Writer>)],
        dst: &[Run],
        copier: RequestId,
    ) -> WriteReport {
        self.checked.set(false);
        let ps = self.page_size;
        let mut rep = WriteReport::default();
        // Destination pages as slot ranges, walked in step with the contents.
        let mut dst_slots = dst.iter().map(|r| (u64::from(r.first) * ps, u64::from(r.count) * ps));
        let mut cur: Option<(u64, u64)> = dst_slots.next();
        self.owners.get_mut().touch_pages(dst, ps);
        for &(s, e, w) in contents {
            let mut piece_at = s;
            while piece_at < e {
                let Some((dslot, dlen)) = cur else { return rep };
                let n = (e - piece_at).min(dlen);
                self.foreign_pages(dslot, n, copier, (None, &[]), &mut rep);
                let owners = &mut self.owners.get_mut().map;
                match w {
                    Some(w) => owners.set(dslot, dslot + n, w.advanced(piece_at - s)),
                    None => {
                        // Zeros landing over written KV: noted for the story (`landed_zeros`).
                        let landed = &mut self.landed_zeros;
                        owners.visit(dslot, dslot + n, |a, b, w| {
                            if w.is_some() {
                                landed.set(a, b, LandedZeros(copier));
                            }
                        });
                        owners.clear(dslot, dslot + n);
                    }
                }
                piece_at += n;
                cur = if dlen > n { Some((dslot + n, dlen - n)) } else { dst_slots.next() };
            }
        }
        rep
    }

    /// Visits the writers behind positions `[from, to)` of a block table:
    /// `f(first_pos, slot_start, len, writer)`.
    pub fn read(&self, table: &[Run], from: u64, to: u64, mut f: impl FnMut(u64, u64, u64, Option<&Writer>)) {
        if from >= to {
            return; // nothing read: the open appends stay open
        }
        self.checked.set(false);
        let mut owners = self.owners.borrow_mut();
        if !owners.open.is_empty() {
            self.map_positions(table, from, to, |_, slot, len| {
                owners.touch(slot, slot + len);
            });
        }
        let owners = &owners.map;
        self.map_positions(table, from, to, |pos, slot, len| {
            owners.visit(slot, slot + len, |s, e, w| f(pos + (s - slot), s, e - s, w));
        });
    }

    /// How many of the absent slots `[slot, slot + len)` a land zeroed over written KV
    /// (`landed_zeros`), and the first one's transfer.
    pub fn landed_zeros_within(&self, slot: u64, len: u64) -> (u64, Option<RequestId>) {
        let (mut n, mut by) = (0, None);
        if self.landed_zeros.len_runs() > 0 {
            self.landed_zeros.visit(slot, slot + len, |a, b, z| {
                if let Some(LandedZeros(r)) = z {
                    n += b - a;
                    by.get_or_insert(*r);
                }
            });
        }
        (n, by)
    }

    /// The page's current holder.
    pub fn holder_of(&self, page: u32) -> Option<Holder> {
        self.holders.covering(u64::from(page), u64::from(page) + 1).map(|(_, h)| *h)
    }

    /// Allocator and map invariants; panics name the pool.
    pub fn invariants(&self) {
        if self.checked.get() {
            return; // unchanged since they last held
        }
        self.owners.borrow_mut().map().invariants();
        self.holders.invariants();
        let mut held = 0u64;
        self.holders.visit(0, u64::from(self.pages), |s, e, h| {
            if h.is_some() {
                held += e - s;
            }
        });
        assert_eq!(held, self.held_pages, "{}: held-page count drifted", self.id);
        assert_eq!(
            held + self.alloc.available() + 1,
            u64::from(self.pages),
            "{}: held + free + reserved page 0 != pages",
            self.id
        );
        assert!(self.holder_of(0).is_none(), "{}: page 0 was handed out", self.id);
        self.checked.set(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Role;

    /// A run absorbs only the run that starts where it ends; the free list's merge coalesces
    /// with that rule after sorting, and its pushes at the head and the tail use it too.
    #[test]
    fn a_run_absorbs_only_the_run_that_follows_it() {
        let run = |first, count| Run { first, count };
        let mut r = run(4, 3);
        assert!(!r.absorb(run(8, 2)), "a gap");
        assert!(!r.absorb(run(2, 2)), "before it");
        assert_eq!(r, run(4, 3), "unchanged when not absorbed");
        assert!(r.absorb(run(7, 5)));
        assert_eq!(r, run(4, 8));
        let mut a = Allocator::new(FreeListPolicy::SortedOnMerge, 20);
        assert_eq!(a.free, [run(1, 19)]);
        let mut taken = Vec::new();
        assert!(a.alloc_into(19, &mut taken));
        a.free(&[run(12, 3), run(3, 2), run(15, 1), run(5, 4)]);
        a.merge_and_sort();
        assert_eq!(a.free, [run(3, 6), run(12, 4)]);
        assert_eq!(a.free_pages, 10);
        assert!(a.parked.is_empty());
        // The free list's pushes at either end, by the same rule.
        let mut q = VecDeque::from([run(5, 3)]);
        push_front_merged(&mut q, run(2, 3));
        push_front_merged(&mut q, run(0, 1));
        push_back_merged(&mut q, run(8, 2));
        push_back_merged(&mut q, run(11, 1));
        assert_eq!(q, [run(0, 1), run(2, 8), run(11, 1)]);
    }

    #[test]
    fn runs_intersect_keeps_the_common_pages() {
        let run = |first, count| Run { first, count };
        assert_eq!(runs_intersect(&[run(0, 10), run(20, 5)], &[run(8, 14)]), [run(8, 2), run(20, 2)]);
        assert_eq!(runs_intersect(&[run(0, 4)], &[run(4, 4)]), []);
        assert!(runs_overlap(&[run(3, 2)], &runs_intersect(&[run(0, 10)], &[run(4, 1)])));
    }

    fn pool(policy: FreeListPolicy) -> Pool {
        Pool::new(PoolId { role: Role::Decode, index: 0 }, 64, 4, policy, false)
    }

    /// A land that copies never-written source slots over written KV leaves zeros that were
    /// written before (`landed_zeros`): counted by `landed_zeros_within` with the lander; zeros
    /// landed over never-written slots are not; a free under `zero_on_free` clears the note.
    #[test]
    fn zeros_landed_over_written_kv_are_told_apart_from_never_written_ones() {
        for zero_on_free in [false, true] {
            let mut p = Pool::new(PoolId { role: Role::Decode, index: 0 }, 64, 4, FreeListPolicy::Lifo, zero_on_free);
            let (reader, lander, t, at) = (RequestId(1), RequestId(2), TenantId(1), Instant(0));
            let dst = p.alloc(2, Holder::Req(reader)).expect("pages");
            // The reader writes 6 of its 8 slots; the land brings 2 written and 6 unwritten slots.
            p.write(&dst, 0, 6, t, reader, at, 0);
            let base = u64::from(dst[0].first) * 4;
            let w = Writer { tenant: t, request: lander, pos: 0, epoch: 1, at, chain_upto: 0 };
            let contents = [(0, 2, Some(w)), (2, 8, None)];
            p.land_copy(&contents, &dst, lander);
            // Slots 2..6 were the reader's and are zeros now; 6..8 were never written.
            assert_eq!(p.landed_zeros_within(base, 8), (4, Some(lander)));
            assert_eq!(p.landed_zeros_within(base + 6, 2), (0, None));
            let s = crate::check::oracle::summarize(&p, &dst, 0, 8, reader, t, &|_, _, _| 0);
            assert_eq!((s.uninit, s.uninit_landed, s.uninit_landed_by), (6, 4, Some(lander)));
            // Freed: a zeroing free clears the note, a plain one keeps it (the zeros stay).
            p.free(&dst, Holder::Req(reader));
            let kept = if zero_on_free { 0 } else { 4 };
            assert_eq!(p.landed_zeros_within(base, 8).0, kept, "zero_on_free {zero_on_free}");
        }
    }

    /// `invariants` skips a pool unchanged since its invariants last held, and walks it again
    /// after any change: every mutating call and every read that materialises open appends.
    #[test]
    fn invariants_are_walked_again_after_every_change() {
        let mut p = pool(FreeListPolicy::SortedOnMerge);
        let (r, t, at) = (RequestId(1), TenantId(1), Instant(0));
        let h = Holder::Req(r);
        let step = |p: &mut Pool, what: &str, f: &dyn Fn(&mut Pool)| {
            p.invariants();
            assert!(p.checked.get(), "{what}: checked after a walk");
            f(p);
            assert!(!p.checked.get(), "{what}: a change clears it");
        };
        let table = p.alloc(3, h).unwrap();
        step(&mut p, "write", &|p| {
            p.write(&table, 0, 5, t, r, at, 0);
        });
        step(&mut p, "append", &|p| {
            p.append(&table, Known { table_pages: 3, fresh: false }, 5, t, r, at);
        });
        step(&mut p, "read", &|p| p.read(&table, 0, 6, |_, _, _, _| {}));
        step(&mut p, "page_contents", &|p| {
            p.page_contents(&table);
        });
        step(&mut p, "alloc_page", &|p| {
            p.alloc_page(h);
        });
        step(&mut p, "rehold", &|p| p.rehold(&table, Holder::Cache(r)));
        step(&mut p, "free", &|p| {
            p.free(&table, Holder::Cache(r));
        });
        p.invariants();
        let _ = (p.free_pages(), p.held_pages(), p.holder_of(1));
        assert!(p.checked.get(), "lookups change nothing");
        // A drift the next change leaves in place is caught by the walk after it.
        p.held_pages += 1;
        p.alloc_page(h);
        let walk = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.invariants()));
        assert!(walk.is_err(), "the held-page drift is found");
    }

    /// A cursor's consecutive slices are `slice_pages` at the running offset, for every slice
    /// width, across run boundaries and past the end of the table.
    #[test]
    fn page_cursor_slices_like_slice_pages() {
        let table = [
            Run { first: 3, count: 1 },
            Run { first: 9, count: 5 },
            Run { first: 20, count: 2 },
            Run { first: 40, count: 7 },
        ];
        for per in 1..=16u64 {
            let mut c = PageCursor::new(&table);
            let mut off = 0;
            let take = |c: &mut PageCursor, n| {
                let mut out = Vec::new();
                c.take_into(n, &mut out);
                out
            };
            while off < 20 {
                assert_eq!(take(&mut c, per), slice_pages(&table, off, per), "width {per} at {off}");
                off += per;
            }
            assert!(take(&mut c, per).is_empty());
        }
    }

    /// `alloc_page` is `alloc(1)` without the list: the same page and the same pool after it,
    /// under every free-list policy, through frees, a merge of parked pages and an empty pool.
    #[test]
    fn alloc_page_is_alloc_of_one() {
        use FreeListPolicy::*;
        for policy in [SortedOnMerge, Lifo, Fifo, Lru, LruUnhashedFirst] {
            let (mut a, mut b) = (pool(policy), pool(policy));
            let h = |i: u32| Holder::Req(RequestId(i));
            for p in [&mut a, &mut b] {
                let x = p.alloc(6, h(0)).unwrap();
                p.alloc(3, h(1)).unwrap();
                p.free(&x, h(0));
            }
            let mut taken = std::collections::VecDeque::new();
            for i in 0..40u32 {
                let one = a.alloc(1, h(2 + i % 3)).map(|r| {
                    assert_eq!(r.len(), 1);
                    r[0].first
                });
                assert_eq!(one, b.alloc_page(h(2 + i % 3)), "{policy:?}, page {i}");
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{policy:?}, after page {i}");
                if let Some(page) = one {
                    taken.push_back((page, h(2 + i % 3)));
                }
                if i % 5 == 4 {
                    // Free the two oldest pages: free-list order, parking and merging come in.
                    for (page, by) in taken.drain(..2.min(taken.len())) {
                        let run = [Run { first: page, count: 1 }];
                        assert_eq!(a.free(&run, by).len(), b.free(&run, by).len());
                    }
                }
            }
            a.invariants();
            b.invariants();
        }
    }

    #[test]
    fn sorted_on_merge_reuses_lowest_after_merge() {
        let mut p = pool(FreeListPolicy::SortedOnMerge);
        let a = p.alloc(5, Holder::Req(RequestId(0))).unwrap();
        assert_eq!(a, vec![Run { first: 1, count: 5 }]);
        let b = p.alloc(5, Holder::Req(RequestId(1))).unwrap();
        assert!(p.free(&a, Holder::Req(RequestId(0))).is_empty());
        // Parked pages are not reused while the free list suffices.
        let c = p.alloc(5, Holder::Req(RequestId(2))).unwrap();
        assert_eq!(c, vec![Run { first: 11, count: 5 }]);
        // Now the free list is short: merge and sort, lowest first.
        let d = p.alloc(3, Holder::Req(RequestId(3))).unwrap();
        assert_eq!(d, vec![Run { first: 1, count: 3 }]);
        let _ = (b, d);
        p.invariants();
    }

    #[test]
    fn lifo_and_fifo_orders() {
        let mut p = pool(FreeListPolicy::Lifo);
        let a = p.alloc(2, Holder::Req(RequestId(0))).unwrap();
        p.free(&a, Holder::Req(RequestId(0)));
        assert_eq!(p.alloc(1, Holder::Req(RequestId(1))).unwrap(), vec![Run { first: 1, count: 1 }]);
        let mut q = pool(FreeListPolicy::Fifo);
        let a = q.alloc(2, Holder::Req(RequestId(0))).unwrap();
        q.free(&a, Holder::Req(RequestId(0)));
        assert_eq!(q.alloc(1, Holder::Req(RequestId(1))).unwrap(), vec![Run { first: 3, count: 1 }]);
        q.invariants();
    }

    #[test]
    fn vllm_reuses_unhashed_blocks_first_and_hashed_ones_last() {
        // 16 free pages (1..=16). Request 0 holds 1..=4 (3 full, hashed; page 4 partial); request 1
        // holds 5..=6 (a reservation that never got its KV: unhashed).
        for policy in [FreeListPolicy::Lru, FreeListPolicy::LruUnhashedFirst] {
            let mut p = pool(policy);
            let a = p.alloc(4, Holder::Req(RequestId(0))).unwrap();
            let b = p.alloc(2, Holder::Req(RequestId(1))).unwrap();
            assert!(p.free_hashed(&a, Holder::Req(RequestId(0)), 3).is_empty());
            assert!(p.free_hashed(&b, Holder::Req(RequestId(1)), 0).is_empty());
            let next = p.alloc(3, Holder::Req(RequestId(2))).unwrap();
            if policy == FreeListPolicy::Lru {
                // vLLM 0.11.0: every freed block to the tail; the never-used pages come first.
                assert_eq!(next, vec![Run { first: 7, count: 3 }]);
            } else {
                // vLLM 0.33.0: request 1's pages, then request 0's partial last page, at the head.
                assert_eq!(next, vec![Run { first: 5, count: 2 }, Run { first: 4, count: 1 }]);
                // The hashed pages come last, after the never-used ones.
                let rest = p.alloc(10, Holder::Req(RequestId(3))).unwrap();
                assert_eq!(rest, vec![Run { first: 7, count: 10 }]);
                assert_eq!(p.alloc(3, Holder::Req(RequestId(4))).unwrap(), vec![Run { first: 1, count: 3 }]);
            }
            p.invariants();
        }
    }

    #[test]
    fn double_free_is_reported_not_applied() {
        let mut p = pool(FreeListPolicy::Fifo);
        let a = p.alloc(2, Holder::Req(RequestId(0))).unwrap();
        assert!(p.free(&a, Holder::Req(RequestId(0))).is_empty());
        let bad = p.free(&a, Holder::Req(RequestId(0)));
        assert_eq!(bad.len(), 1);
        p.invariants();
    }

    #[test]
    fn stale_data_survives_free_and_copy_carries_tails() {
        let mut p = pool(FreeListPolicy::Lifo);
        let a = p.alloc(2, Holder::Req(RequestId(0))).unwrap();
        p.write(&a, 0, 8, TenantId(7), RequestId(0), Instant(5), 0);
        p.free(&a, Holder::Req(RequestId(0)));
        let b = p.alloc(2, Holder::Req(RequestId(1))).unwrap();
        p.write(&b, 0, 1, TenantId(1), RequestId(1), Instant(9), 0);
        let mut seen = Vec::new();
        p.read(&b, 0, 8, |pos, _, len, w| seen.push((pos, len, w.map(|w| w.tenant.0))));
        assert_eq!(seen, vec![(0, 1, Some(1)), (1, 7, Some(7))]);
        let contents = p.page_contents(&b[..1]);
        let c = p.alloc(1, Holder::Req(RequestId(2))).unwrap();
        let rep = p.land_copy(&contents, &c, RequestId(2));
        assert!(rep.foreign.is_empty());
        let mut tail = Vec::new();
        p.read(&c, 0, 4, |_, _, len, w| tail.push((len, w.map(|w| w.tenant.0))));
        assert_eq!(tail, vec![(1, Some(1)), (3, Some(7))]);
        p.invariants();
    }
}
