//! The prefill node, queue by queue (lifecycle reference, section 3): bootstrap queue (capacity
//! check, sender creation, metadata slots), waiting queue with chunked prefill and a forward-time
//! cost model, the transfer sender's page count, the inflight queue, and release (radix-cached or
//! freed). Aborts fail the sender locally only; in-flight transfers are not cancelled.

use crate::check::oracle::{equal_content, summarize};
use crate::config::{
    AbortCheck, AbortHeartbeat, CancelMidTransfer, FailedCheck, Knobs, NodeConfig, PrefillCache, PrefillRelease,
    RouterMode, ZeroPageLastChunk,
};
use crate::engine::incarnation::Incarnation;
use crate::event::{DstInfo, Ev, TimeoutKind};
use crate::lifecycle::{Lane, Phase};
use crate::metadata::MetaSlots;
use crate::pool::{pages_in, push_run, slice_pages, Holder, Pool, Run};
use crate::trace::MemOp;
use crate::transfer::TransferJob;
use crate::types::{Duration, Instant, PrefillIdx, RequestId, Role};
use crate::world::{common_chain_tokens, LegIntake, World};
use std::collections::{BTreeMap, VecDeque};

/// The KV sender's state for one room. Ordered: Failed lowest, Success highest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SenderState {
    Failed,
    Bootstrapping,
    WaitingForInput,
    Success,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PPhase {
    Bootstrap,
    Waiting,
    Inflight,
    /// Sequential (vLLM) mode: computed, source blocks held for decode's read.
    Held,
    /// Aborted; source pages held until in-flight transfers drain.
    Draining,
    /// Forgotten by the scheduler with its pages and metadata slot still held, in no queue and
    /// never released: a waiting-queue entry whose room decode failed, where only the bootstrap
    /// and inflight queues are polled (`prefill_failed_check = bootstrap_and_inflight`, sglang
    /// #28236), or a request whose transfer a client cancel tore down (`cancel_mid_transfer =
    /// leak`, Dynamo #7489).
    Orphaned,
}

/// One request on a prefill node. Its fields are private: this module's handlers write it,
/// and the two other components that change a prefill request do it through the named methods
/// below — the transfer engine (`job_submitted`, `land_handled`, `lands_skipped`, `job_ended`,
/// `room_failed`, `room_succeeded`) and the radix cache (`reuse_prefix`). Everyone else reads.
#[derive(Clone, Debug)]
pub struct PReq {
    len: u64,
    pending_abort: Option<u16>,
    phase: PPhase,
    sender: SenderState,
    dst: Option<DstInfo>,
    meta_slot: Option<u32>,
    num_pages: u64,
    pages: Vec<Run>,
    prefilled: u64,
    sent_pages: u64,
    jobs_in_flight: u32,
    lands_pending: u32,
    /// Transfer jobs submitted and not yet ended (for skipping queued batches on an abort).
    jobs: Vec<crate::types::JobId>,
    ack_decode: bool,
    entered: Instant,
    /// Prefix blocks reused from the radix cache (their pages start the block table).
    borrowed: Vec<crate::prefix::BlockKey>,
    /// Tokens whose KV came from the radix cache (shared prefix).
    reused_tokens: u64,
    /// With `prefix_hit_timing = padded_to_miss`: reused tokens not yet charged as compute (the
    /// forward passes charge them as a miss would, then compute the rest).
    pad_left: u64,
    /// Prompt positions below this hold KV fixed by the request's prefix chain (0 for a stub).
    chain_upto: u64,
}

impl PReq {
    /// Its phase in the node's queues.
    #[inline]
    pub fn phase(&self) -> PPhase {
        self.phase
    }

    /// The KV sender's state for its room.
    #[inline]
    pub fn sender(&self) -> SenderState {
        self.sender
    }

    /// An abort that arrived while it could not yet be acted on (its status code).
    #[inline]
    pub fn pending_abort(&self) -> Option<u16> {
        self.pending_abort
    }

    /// Decode's page list for it, once decode has sent it.
    #[inline]
    pub fn dst(&self) -> Option<&DstInfo> {
        self.dst.as_ref()
    }

    /// Its block table (borrowed prefix blocks first).
    #[inline]
    pub fn pages(&self) -> &[Run] {
        &self.pages
    }

    /// Prefix blocks reused from the radix cache (their pages start the block table).
    #[inline]
    pub fn borrowed(&self) -> &[crate::prefix::BlockKey] {
        &self.borrowed
    }

    /// When it entered the node (its prefill leg arrived).
    #[inline]
    pub fn entered(&self) -> Instant {
        self.entered
    }

    /// Prompt tokens whose KV is computed (or reused from the radix cache).
    #[inline]
    pub fn prefilled(&self) -> u64 {
        self.prefilled
    }

    /// The prompt tokens a release keeps in the radix cache (`World::prefill_release`): all of
    /// them (`u64::MAX`) once the forward computed the whole prompt, else the chunks computed so
    /// far. A request whose sender fails after its forward (a failed or aborted transfer in the
    /// inflight queue) is released as a finished one is: sglang 0.5.22 `prefill.py`
    /// `handle_inflight_transfer_failure` → `mem_cache/common.py` `release_kv_cache(...,
    /// checkpoint=True)` → `radix_cache.py` `checkpoint`; 0.5.16 the same handler →
    /// `release_kv_cache(req, tree_cache)` with `is_insert` true → `cache_finished_req` (a client
    /// abort reaches it too: `scheduler.py` `abort_request` → `disagg_kv_sender.abort()`, then
    /// the poll sees Failed). Before that,
    /// both wheels insert each finished chunk into the tree before the next one runs (0.5.22
    /// `prefill.py` `process_prefill_chunk` → `checkpoint_disagg_prefill` → `checkpoint_kv_cache`,
    /// which sets `cache_protected_len`; 0.5.16 `maybe_cache_unfinished_req(chunked=True)`), and an
    /// abort frees only past the protected length (`release_kv_cache`: "The protected prefix is
    /// not this req's to free"): the chunk being computed. So an early-sent chunk still in flight
    /// reads cached KV, not freed pages (a false `use_after_free/transfer_read_of_a_source_page`
    /// before the thirty-eighth session), unless an eviction frees it.
    pub fn checkpointed(&self) -> u64 {
        if self.prefilled >= self.len {
            u64::MAX
        } else {
            self.prefilled
        }
    }

    /// Transfer jobs submitted and not yet ended.
    #[inline]
    pub fn jobs(&self) -> &[crate::types::JobId] {
        &self.jobs
    }

    /// Scheduled lands of its batches not yet handled (its source pages are still read).
    #[inline]
    pub fn lands_pending(&self) -> u32 {
        self.lands_pending
    }

    /// Prompt positions below this hold KV fixed by the request's prefix chain.
    #[inline]
    pub fn chain_upto(&self) -> u64 {
        self.chain_upto
    }

    /// The transfer engine queued job `id` for it, with `lands` land events scheduled.
    pub(crate) fn job_submitted(&mut self, id: crate::types::JobId, lands: u32) {
        self.jobs_in_flight += 1;
        self.lands_pending += lands;
        self.jobs.push(id);
    }

    /// One of its batches' land events was handled (the source pages were read).
    pub(crate) fn land_handled(&mut self) {
        self.lands_pending -= 1;
    }

    /// `n` of its batches' lands were skipped after an abort: they will never read.
    pub(crate) fn lands_skipped(&mut self, n: u32) {
        self.lands_pending -= n;
    }

    /// Job `id` has ended (its `TransferDone`). Returns whether the room had already failed.
    pub(crate) fn job_ended(&mut self, id: crate::types::JobId) -> bool {
        self.jobs_in_flight -= 1;
        self.jobs.retain(|x| *x != id);
        self.sender == SenderState::Failed
    }

    /// The room is Failed (a failed batch, or the chunk being written at an abort ended).
    pub(crate) fn room_failed(&mut self) {
        self.sender = SenderState::Failed;
    }

    /// The last chunk was sent: the room is Success.
    pub(crate) fn room_succeeded(&mut self) {
        self.sender = SenderState::Success;
    }

    /// The radix cache matched `keys` for it: `table` (the blocks' pages) starts its block table,
    /// and `reused` tokens count as prefilled; `padded` (`prefix_hit_timing = padded_to_miss`)
    /// charges them as compute anyway.
    pub(crate) fn reuse_prefix(
        &mut self,
        table: Vec<Run>,
        keys: Vec<crate::prefix::BlockKey>,
        reused: u64,
        padded: bool,
    ) {
        self.pages = table;
        self.borrowed = keys;
        self.prefilled = reused;
        self.reused_tokens = reused;
        self.pad_left = if padded { reused } else { 0 };
    }

    /// Its next computed blocks `keys` were checkpointed into the radix cache, which it keeps
    /// locked (`World::prefix_checkpoint`): they join its borrowed blocks.
    pub(crate) fn checkpoint_blocks(&mut self, keys: &[crate::prefix::BlockKey]) {
        self.borrowed.extend_from_slice(keys);
    }

    /// Pages of its block table already handed to the transfer engine (from the table's start).
    #[inline]
    pub fn sent_pages(&self) -> u64 {
        self.sent_pages
    }

    /// Its block table's `count` pages from page `at` become `tree` (the radix cache's copy of a
    /// block it computed too, `World::prefix_checkpoint`): returns its own pages they replace.
    pub(crate) fn take_tree_copy(&mut self, at: u64, count: u64, tree: &[Run]) -> Vec<Run> {
        let all = pages_in(&self.pages);
        let own = slice_pages(&self.pages, at, count);
        let mut table = slice_pages(&self.pages, 0, at);
        for run in tree.iter().chain(&slice_pages(&self.pages, at + count, all - at - count)) {
            push_run(&mut table, *run);
        }
        self.pages = table;
        own
    }
}

#[derive(Debug)]
pub struct PrefillNode {
    index: PrefillIdx,
    pool_tokens: u64,
    pool: Pool,
    meta: MetaSlots,
    meta_slots: u32,
    meta_zero: bool,
    life: Incarnation,
    bootstrap: Vec<RequestId>,
    waiting: VecDeque<RequestId>,
    inflight: Vec<RequestId>,
    reqs: crate::engine::reqmap::ReqMap<PReq>,
    pending_dst: BTreeMap<RequestId, DstInfo>,
    busy: bool,
    batch: Vec<(RequestId, u64, u64)>,
    cache: VecDeque<(u64, RequestId, Vec<Run>)>,
    prefix: crate::prefix::PrefixIndex,
    /// When each transfer queue is free (the last queued batch's call returns), by destination
    /// decode node: sglang's Mooncake sender shards chunks over its queues by the destination
    /// session (0.5.22 `disaggregation/mooncake/conn.py` `add_transfer_request`: `shard_idx =
    /// session_port_sum % len(self.transfer_queues)`, 4 queues by default,
    /// `SGLANG_DISAGGREGATION_QUEUE_SIZE`), one worker thread each, so chunks to one decode
    /// queue behind each other and chunks to another decode do not (kvsim gives each decode node
    /// a queue of its own: the ports' residues are not modelled).
    xfer_free_at: Vec<Instant>,
    /// Pipeline-parallel stages (`pp_stages`; `crate::pp`).
    pp: crate::pp::PpStages,
}

impl PrefillNode {
    pub fn new(index: PrefillIdx, c: &NodeConfig, k: &Knobs) -> PrefillNode {
        let id = index.node();
        PrefillNode {
            index,
            pool_tokens: c.pool_tokens,
            pool: Pool::new(id, c.pool_tokens, k.page_size, k.free_list_policy, k.zero_on_free),
            meta: MetaSlots::new(c.metadata_slots, k.metadata_zero_on_free.on()),
            meta_slots: c.metadata_slots,
            meta_zero: k.metadata_zero_on_free.on(),
            life: Incarnation::default(),
            bootstrap: Vec::new(),
            waiting: VecDeque::new(),
            inflight: Vec::new(),
            reqs: crate::engine::reqmap::ReqMap::new(),
            pending_dst: BTreeMap::new(),
            busy: false,
            batch: Vec::new(),
            cache: VecDeque::new(),
            prefix: Default::default(),
            xfer_free_at: Vec::new(),
            pp: crate::pp::PpStages::new(c.pp_stages),
        }
    }

    /// A tick would do nothing: the node is down, or its bootstrap and inflight queues are empty
    /// and a forward pass is running or nothing waits for one (`prefill_tick`'s three parts).
    pub fn tick_idle(&self) -> bool {
        !self.life.alive()
            || self.pp.wedged()
            || (self.bootstrap.is_empty() && self.inflight.is_empty() && (self.busy || self.waiting.is_empty()))
    }

    crate::engine::node::node_parts!(PReq);

    /// When the node's transfer queue to decode node `d` is free (the last queued batch's call
    /// returns).
    pub fn xfer_free_at(&self, d: crate::types::DecodeIdx) -> Instant {
        self.xfer_free_at.get(d.at()).copied().unwrap_or(Instant(0))
    }

    /// The transfer queue to decode node `d` is busy until `t` (a job was queued on it,
    /// `World::transfer_submit`).
    pub(crate) fn book_transfer_worker(&mut self, d: crate::types::DecodeIdx, t: Instant) {
        if self.xfer_free_at.len() <= d.at() {
            self.xfer_free_at.resize(d.at() + 1, Instant(0));
        }
        self.xfer_free_at[d.at()] = t;
    }

    /// The pipeline-parallel stages (`crate::pp`).
    pub fn pp(&self) -> &crate::pp::PpStages {
        &self.pp
    }

    /// The stages, for `pp`'s hooks.
    pub(crate) fn pp_mut(&mut self) -> &mut crate::pp::PpStages {
        &mut self.pp
    }

    /// A forward pass is running (written only by this module's handlers).
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// Whether request `r` has a chunk in the forward pass now running.
    pub fn computing(&self, r: RequestId) -> bool {
        self.busy && self.batch.iter().any(|(x, _, _)| *x == r)
    }

    /// The metadata slots (rows decode reads the request's bootstrap room from).
    pub fn meta(&self) -> &MetaSlots {
        &self.meta
    }

    /// The bootstrap queue: requests waiting for decode's destination.
    pub fn bootstrap(&self) -> &[RequestId] {
        &self.bootstrap
    }

    /// The waiting queue: bootstrapped requests waiting for a forward pass.
    pub fn waiting(&self) -> &VecDeque<RequestId> {
        &self.waiting
    }

    /// The inflight queue: computed requests whose KV is being sent.
    pub fn inflight(&self) -> &[RequestId] {
        &self.inflight
    }

    /// The plain (non-prefix) cache of released requests' pages, oldest first, each with its age
    /// on the prefix index's clock.
    pub fn cache(&self) -> &VecDeque<(u64, RequestId, Vec<Run>)> {
        &self.cache
    }

    pub fn invariants(&self, now: Instant) {
        self.pool.invariants();
        self.meta.invariants();
        self.prefix.invariants(&format_args!("prefill-{}", self.index));
        let queued = self.bootstrap.len() + self.waiting.len() + self.inflight.len();
        let ps = self.pool.page_size;
        // One pass over the request table: requests queued, pages held and borrowed.
        let (mut tracked, mut pages, mut borrowed) = (0usize, 0u64, 0u64);
        for p in self.reqs.values() {
            tracked += usize::from(!matches!(p.phase, PPhase::Held | PPhase::Draining | PPhase::Orphaned));
            pages += pages_in(&p.pages);
            borrowed += p.borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS / ps;
        }
        assert_eq!(queued, tracked, "prefill-{} at {now}: queues and request table disagree", self.index);
        let cached: u64 = self.cache.iter().map(|(_, _, r)| pages_in(r)).sum::<u64>() + self.prefix.cached_pages();
        let owned = pages - borrowed;
        assert_eq!(cached + owned, self.pool.held_pages(), "prefill-{} at {now}: page accounting", self.index);
    }

    /// What the node still holds at the end, radix-cached pages excluded.
    pub fn leaks(&self) -> Option<crate::engine::node::Leak> {
        self.leaks_besides(|_| false)
    }

    /// `leaks`, less what requests still open (`open`) hold themselves: their pages and slot are
    /// their hang's (`crate::engine::node::leak_of`).
    pub fn leaks_besides(&self, open: impl Fn(RequestId) -> bool) -> Option<crate::engine::node::Leak> {
        let cached: u64 = self.cache.iter().map(|(_, _, r)| pages_in(r)).sum::<u64>() + self.prefix.cached_pages();
        let pages = self.pool.held_pages() - cached;
        let slots = self.meta.in_use() as u64;
        // The holders are the requests that hold pages or a slot, not every request the node still
        // knows (one that waits in the bootstrap queue holds nothing).
        // An open holder's own pages are counted (a walk of its table's holders); the others'
        // need not be (`leaks` at every quiescence test of liveness mode walks none).
        let shares = self.reqs.iter().filter(|(_, p)| !p.pages.is_empty() || p.meta_slot.is_some()).map(|(r, p)| {
            let open = open(*r);
            crate::engine::node::HolderShare {
                r: *r,
                open,
                own: if open { self.pool.held_by(&p.pages, Holder::Req(*r)) } else { 0 },
                host: 0,
                slot: p.meta_slot.is_some(),
            }
        });
        crate::engine::node::leak_of(self.id(), pages, 0, slots, shares)
    }
}

impl World {
    fn pnode(&mut self, n: PrefillIdx) -> &mut PrefillNode {
        &mut self.prefill[n.at()]
    }

    pub(crate) fn prefill_leg_arrive(&mut self, r: RequestId) {
        let n = self.reqs[r.idx()].prefill();
        let node_id = n.node();
        let (pool_tokens, alive) = (self.prefill[n.at()].pool_tokens, self.prefill[n.at()].life.alive());
        let (len, pending_abort) = match self.leg_intake(r, node_id, pool_tokens, alive) {
            LegIntake::Admitted { len, pending_abort } => (len, pending_abort),
            LegIntake::Rejected(status) => {
                self.notify_decode_of_abort(r, status);
                return;
            }
            LegIntake::NodeDown => return,
        };
        let dst = self.pnode(n).pending_dst.remove(&r);
        let sender = if dst.is_some() { SenderState::WaitingForInput } else { SenderState::Bootstrapping };
        let now = self.now;
        let epoch = self.prefill[n.at()].life.epoch();
        let chain_upto = self.chain_upto(r, len, pending_abort.is_some());
        let sent_pages = if dst.is_some() { self.decode_prefix_pages(r) } else { 0 };
        let node = self.pnode(n);
        node.reqs.insert(
            r,
            PReq {
                len,
                pending_abort,
                phase: PPhase::Bootstrap,
                sender,
                dst,
                meta_slot: None,
                num_pages: 0,
                pages: Vec::new(),
                prefilled: 0,
                sent_pages,
                jobs_in_flight: 0,
                jobs: Vec::new(),
                lands_pending: 0,
                ack_decode: false,
                entered: now,
                borrowed: Vec::new(),
                reused_tokens: 0,
                pad_left: 0,
                chain_upto,
            },
        );
        node.bootstrap.push(r);
        // Behind a sequential proxy there is no bootstrap handshake to wait for (vLLM): the leg
        // waits for a metadata slot and the scheduler only, so its first phase is `Waiting`.
        let first = match self.cfg.knobs.router_mode {
            RouterMode::Concurrent => Phase::Bootstrap,
            RouterMode::Sequential => Phase::Waiting,
        };
        self.phase(r, Lane::Prefill(n), first);
        let t = Duration::from_ms(self.cfg.knobs.bootstrap_timeout_ms);
        self.after(t, Ev::Timeout { r, timer: TimeoutKind::Bootstrap, node: node_id, epoch });
        self.tick(node_id);
    }

    fn notify_decode_of_abort(&mut self, r: RequestId, status: u16) {
        if self.cfg.knobs.prefill_abort_notifies_decode.on() {
            let lat = self.msg_latency();
            self.after(lat, Ev::AbortAt { r, role: Role::Decode, status, from_decode: false });
        }
    }

    pub(crate) fn prefill_dst_info(&mut self, r: RequestId, n: PrefillIdx, dst: DstInfo) {
        if !self.prefill[n.at()].life.alive() {
            return;
        }
        let leg_arrived = self.reqs[r.idx()].prefill_leg().is_some() || self.prefill[n.at()].reqs.contains_key(&r);
        let node = self.pnode(n);
        let Some(pr) = node.reqs.get_mut(&r) else {
            if !leg_arrived {
                node.pending_dst.insert(r, dst);
            }
            return;
        };
        if pr.sender == SenderState::Bootstrapping {
            pr.sender = SenderState::WaitingForInput;
        }
        pr.dst = Some(dst);
        // Nothing was sent before decode's page list came: sending starts at the prefix decode
        // reports it already holds.
        let start = self.decode_prefix_pages(r);
        let pr = self.pnode(n).reqs.get_mut(&r).expect("present");
        pr.sent_pages = pr.sent_pages.max(start);
        if pr.phase == PPhase::Held {
            let (from, to) = (pr.sent_pages, pr.num_pages);
            self.prefill_send(n, r, from, to, true);
        }
        self.tick(n.node());
    }

    /// Retires a request with an error: its leg answers, pages and slot are released. `protected`:
    /// the prompt tokens already checkpointed into the radix tree (see `PReq::checkpointed`), which
    /// stay cached.
    fn prefill_retire(&mut self, n: PrefillIdx, r: RequestId, status: u16, protected: u64) {
        self.prefill_remove_from_queues(n, r);
        if let Some(pr) = self.pnode(n).reqs.get_mut(&r) {
            pr.sender = SenderState::Failed;
        }
        self.transfer_abort(n, r);
        self.prefill_release(n, r, protected);
        self.leg_result(r, Role::Prefill, status);
        self.notify_decode_of_abort(r, status);
    }

    fn prefill_remove_from_queues(&mut self, n: PrefillIdx, r: RequestId) {
        let node = self.pnode(n);
        node.bootstrap.retain(|x| *x != r);
        node.waiting.retain(|x| *x != r);
        node.inflight.retain(|x| *x != r);
    }

    /// Frees or caches a request's pages and its metadata slot, and forgets it.
    /// `cached`: the prompt tokens whose KV goes into the radix cache (`u64::MAX`: all of it, a
    /// finished request's); the pages past them are freed. Without the radix cache every page is
    /// freed.
    fn prefill_release(&mut self, n: PrefillIdx, r: RequestId, cached: u64) {
        let radix = self.cfg.knobs.prefill_cache == PrefillCache::Radix;
        let Some(mut pr) = self.pnode(n).reqs.remove(&r) else {
            return;
        };
        self.phase(r, Lane::Prefill(n), Phase::Left);
        self.tick(n.node());
        if let Some(s) = pr.meta_slot {
            self.pnode(n).meta.release(s);
        }
        if pr.pages.is_empty() {
            return;
        }
        let ps = self.page_size();
        let borrowed_pages = pr.borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS / ps;
        let all = pages_in(&pr.pages);
        // Whole pages of checkpointed KV (a chunk ends on a page boundary), and always the
        // borrowed blocks (the tree's own).
        let keep = if cached == u64::MAX { all } else { (cached / ps).max(borrowed_pages).min(all) };
        let to_cache = radix && (cached == u64::MAX || keep > borrowed_pages);
        if to_cache && keep < all {
            // Part of it checkpointed: the rest (the chunk being computed, or the last chunk a
            // post-forward abort retires) is freed, the part goes to the cache.
            let tail = slice_pages(&pr.pages, keep, all - keep);
            let hashed = self.hashed_pages(pr.prefilled).saturating_sub(keep);
            let bad = self.pnode(n).pool.free_hashed(&tail, Holder::Req(r), hashed);
            let pool = self.prefill[n.at()].id();
            self.mem(MemOp::Free { pool, r, pages: tail });
            self.note_bad_frees(pool, r, bad);
            pr.pages = slice_pages(&pr.pages, 0, keep);
            pr.prefilled = pr.prefilled.min(keep * ps);
        }
        if to_cache {
            // The pages past the request's last full block are a leaf below its blocks: aged
            // before them, so an eviction takes them first (the clock ticks again for each block
            // `prefix_release` indexes).
            let tick = self.pnode(n).prefix.tick();
            let rest = self.prefix_release(n, r, &pr);
            if !rest.is_empty() {
                self.pnode(n).cache.push_back((tick, r, rest));
            }
        } else {
            for key in &pr.borrowed {
                if let Some(b) = self.pnode(n).prefix.blocks.get_mut(key) {
                    b.refs -= 1;
                }
            }
            let own = slice_pages(&pr.pages, borrowed_pages, pages_in(&pr.pages).saturating_sub(borrowed_pages));
            let hashed = self.hashed_pages(pr.prefilled).saturating_sub(borrowed_pages);
            let bad = self.pnode(n).pool.free_hashed(&own, Holder::Req(r), hashed);
            let pool = self.prefill[n.at()].id();
            self.mem(MemOp::Free { pool, r, pages: own });
            self.note_bad_frees(pool, r, bad);
        }
    }

    /// Pages eviction could free: the plain cache's entries and the prefix index's unused blocks.
    fn prefill_evictable_pages(&self, n: PrefillIdx) -> u64 {
        let node = &self.prefill[n.at()];
        node.cache.iter().map(|(_, _, pages)| pages_in(pages)).sum::<u64>() + node.prefix.unused_pages()
    }

    /// Frees cached pages, least recently used first, until `need` pages are free: the plain
    /// cache's entries and the prefix index's unused blocks in one order (sglang's radix cache
    /// evicts its least recently used leaves, `LRUStrategy` over `evictable_device_leaves`). Before
    /// the thirty-eighth session the plain cache was emptied first, so a request released a moment
    /// ago lost its pages before blocks unused for minutes (a false use after free when a transfer
    /// still read them).
    fn evict_cache_for(&mut self, n: PrefillIdx, need: u64) {
        while self.prefill[n.at()].pool.free_pages() < need {
            let node = &self.prefill[n.at()];
            let plain = node.cache.front().map(|(t, _, _)| *t);
            let block = node.prefix.oldest_evictable();
            if block.is_some_and(|b| plain.is_none_or(|p| b < p)) {
                self.prefix_evict_one(n);
                continue;
            }
            let Some((_, owner, pages)) = self.pnode(n).cache.pop_front() else {
                return;
            };
            let bad = self.pnode(n).pool.free(&pages, Holder::Cache(owner));
            assert!(bad.is_empty(), "prefill-{n}: evicted cache pages were not held by the cache");
            let pool = self.prefill[n.at()].id();
            self.mem(MemOp::Free { pool, r: owner, pages });
        }
    }

    pub(crate) fn prefill_tick(&mut self, n: PrefillIdx) {
        self.pnode(n).life.disarm_tick();
        // Stages whose queues diverged are blocked in their P2P schedule (`crate::pp`).
        if !self.prefill[n.at()].life.alive() || self.prefill[n.at()].pp.wedged() {
            return;
        }
        let k = self.cfg.knobs.clone();
        // 1. Bootstrap queue, in order. A request that finds no free metadata slot is skipped this
        //    round and stays queued; the requests behind it are still looked at (their aborts
        //    retired, a slot freed by a retirement taken): no head-of-line stop (sglang 0.5.16 and
        //    0.5.22 wheels, `disaggregation/prefill.py` `pop_bootstrapped`; lifecycle reference §3.2).
        //    The queue is walked as it was when the walk began, copied into `World::req_scratch`
        //    (taken and put back: no buffer per tick).
        let mut queue = std::mem::take(&mut self.req_scratch);
        queue.clear();
        queue.extend_from_slice(&self.prefill[n.at()].bootstrap);
        for &r in &queue {
            let pr = &self.prefill[n.at()].reqs[&r];
            if k.pd_admission_check == AbortCheck::AbortedToo {
                if let Some(status) = pr.pending_abort {
                    let protected = pr.prefilled;
                    self.prefill_retire(n, r, status, protected);
                    continue;
                }
            }
            let ready = k.router_mode == RouterMode::Sequential || pr.dst.is_some();
            if !ready {
                continue;
            }
            let Some(slot) = self.pnode(n).meta.take() else {
                continue;
            };
            let len = self.prefill[n.at()].reqs[&r].len;
            let num_pages = self.pages_for(len);
            let node = self.pnode(n);
            let pr = node.reqs.get_mut(&r).expect("in bootstrap queue");
            pr.meta_slot = Some(slot);
            pr.num_pages = num_pages;
            pr.phase = PPhase::Waiting;
            node.bootstrap.retain(|x| *x != r);
            node.waiting.push_back(r);
            self.phase(r, Lane::Prefill(n), Phase::Waiting);
            self.pp_first_stage_popped(n, r);
        }
        self.req_scratch = queue;
        // 2. Inflight queue: release on Success (the finish reason becomes "length"), 500 on Failed.
        //    Only the requests whose sender has ended are copied out (a sender ends by event,
        //    never while this loop runs); the others stay queued untouched.
        let mut ended = std::mem::take(&mut self.req_scratch);
        ended.clear();
        let node = &self.prefill[n.at()];
        ended.extend(
            node.inflight.iter().filter(|r| matches!(node.reqs[*r].sender, SenderState::Success | SenderState::Failed)),
        );
        for &r in &ended {
            let pr = &self.prefill[n.at()].reqs[&r];
            match pr.sender {
                SenderState::Success => {
                    let status = match pr.pending_abort {
                        Some(s) if k.inflight_success_keeps_abort.on() => s,
                        _ => 200,
                    };
                    self.prefill_remove_from_queues(n, r);
                    self.prefill_release(n, r, u64::MAX);
                    self.leg_result(r, Role::Prefill, status);
                }
                SenderState::Failed => {
                    self.prefill_remove_from_queues(n, r);
                    self.leg_result(r, Role::Prefill, 500);
                    self.prefill_release_or_drain(n, r, false);
                }
                _ => {}
            }
        }
        self.req_scratch = ended;
        // 3. Forward: chunked prefill over the waiting queue.
        if !self.prefill[n.at()].busy && !self.prefill[n.at()].waiting.is_empty() {
            self.prefill_start_forward(n);
        }
    }

    fn prefill_start_forward(&mut self, n: PrefillIdx) {
        let k = self.cfg.knobs.clone();
        let mut budget = k.chunked_prefill_size;
        // The list `prefill_forward_done` emptied and left (a forward's batch was a fresh list
        // every pass), and the world's spare list for each chunk's pages.
        let mut batch = std::mem::take(&mut self.pnode(n).batch);
        debug_assert!(batch.is_empty(), "an idle node's batch was taken by its forward's end or a crash");
        batch.clear();
        let mut runs = std::mem::take(&mut self.runs_scratch);
        let cost = self.cfg.cost.clone();
        // Saturating: the inputs are range-checked (scenario limits), a product past the horizon stays there.
        let mut cost_ns = cost.prefill_base_us.saturating_mul(1000);
        let padded = k.prefix_hit_timing == crate::config::PrefixHitTiming::PaddedToMiss;
        // The waiting queue from its head, read in place: nothing in the walk changes it, and a
        // copy of the whole queue per pass (which stops after a budget's worth of requests) made
        // a long queue quadratic.
        let waiting = self.prefill[n.at()].waiting.len();
        for i in 0..waiting {
            debug_assert_eq!(self.prefill[n.at()].waiting.len(), waiting, "the forward walk leaves the queue as it is");
            let r = self.prefill[n.at()].waiting[i];
            let pr = &self.prefill[n.at()].reqs[&r];
            // First scheduled: its prefix is matched in the radix cache now, and taken only if the
            // rest of its first chunk fits (`World::prefix_take`). While it waits it holds no
            // cached block, so a waiting request never pins pages the queue's head needs.
            let first = k.prefill_cache == PrefillCache::Radix && pr.pages.is_empty() && pr.pending_abort.is_none();
            let keys = if first { self.prefix_lookup(n, r, pr.len) } else { Vec::new() };
            self.prefix_pin(n, &keys, true);
            let pr = &self.prefill[n.at()].reqs[&r];
            let reused = keys.len() as u64 * crate::prefix::BLOCK_TOKENS;
            // Cache-hit timing padding (`prefix_hit_timing = padded_to_miss`): the request is
            // chunked and charged from position 0 as a miss would be (`vfrom`); KV is written only
            // from where the cache left off (`from`). A chunk wholly inside the reused prefix
            // computes nothing but takes the time. The padding of PROMPTPEEK's and SafeKV's
            // discussions (NDSS 2025; arXiv 2508.08438): no released engine ships it.
            let (prefilled, pad, held) = if first {
                (reused, if padded { reused } else { 0 }, reused / self.page_size())
            } else {
                (pr.prefilled, pr.pad_left, pages_in(&pr.pages))
            };
            let vfrom = prefilled - pad;
            let chunk = (pr.len - vfrom).min(budget);
            if chunk == 0 {
                self.prefix_pin(n, &keys, false);
                break;
            }
            let (from, to) = (prefilled, (vfrom + chunk).max(prefilled));
            let need = self.pages_for(to) - held;
            // Cached pages nobody uses count as free, and are evicted only for a chunk that fits
            // with them: sglang 0.5.22 `managers/schedule_policy.py` `PrefillAdder` budgets the
            // allocator's available size plus the tree's evictable size and refuses the request
            // with nothing evicted, the allocation evicting only its shortfall; vLLM 0.34.0
            // `allocate_slots` returns None before it takes a block. Before, the model evicted the
            // whole cache for a chunk that then did not fit.
            let free = self.prefill[n.at()].pool.free_pages();
            if free < need && free + self.prefill_evictable_pages(n) < need {
                self.prefix_pin(n, &keys, false);
                break;
            }
            self.evict_cache_for(n, need);
            runs.clear();
            if !self.pnode(n).pool.alloc_into(need, Holder::Req(r), &mut runs) {
                self.prefix_pin(n, &keys, false);
                break;
            }
            if first {
                self.prefix_take(n, r, keys);
            }
            let pool = self.prefill[n.at()].id();
            if need > 0 {
                self.mem_page_list(crate::trace::PageListOp::Alloc, pool, r, &runs);
            }
            self.phase(r, Lane::Prefill(n), Phase::Prefill { from, to });
            let pr = self.pnode(n).reqs.get_mut(&r).expect("waiting");
            for run in &runs {
                push_run(&mut pr.pages, *run);
            }
            pr.pad_left = pad.saturating_sub(chunk);
            cost_ns = cost_ns.saturating_add(chunk_cost_ns(&cost, vfrom, chunk));
            batch.push((r, from, to));
            budget -= chunk;
            if vfrom + chunk < pr.len || budget == 0 {
                break;
            }
        }
        self.runs_scratch = runs;
        if batch.is_empty() {
            self.pnode(n).batch = batch;
            return;
        }
        let epoch = self.prefill[n.at()].life.epoch();
        let node = self.pnode(n);
        node.batch = batch;
        node.busy = true;
        self.after(Duration(cost_ns), Ev::ForwardDone { node: n, epoch });
    }

    pub(crate) fn prefill_forward_done(&mut self, n: PrefillIdx, epoch: u32) {
        // Wedged stages never finish the pass (the next stage waits for a batch that never comes).
        if self.prefill[n.at()].life.epoch() != epoch || self.prefill[n.at()].pp.wedged() {
            return;
        }
        let k = self.cfg.knobs.clone();
        let mut batch = std::mem::take(&mut self.pnode(n).batch);
        self.pnode(n).busy = false;
        let pool_id = self.prefill[n.at()].id();
        for &(r, from, to) in &batch {
            let Some(pr) = self.prefill[n.at()].reqs.get(&r) else {
                continue;
            };
            if pr.phase != PPhase::Waiting {
                continue;
            }
            let tenant = self.reqs[r.idx()].tenant();
            let (len, pending) = (pr.len, pr.pending_abort);
            if from == to && to < len {
                // A padding chunk (`padded_to_miss`): time passed, nothing was computed.
                continue;
            }
            let now = self.now;
            let PrefillNode { pool, reqs, .. } = &mut self.prefill[n.at()];
            let upto = reqs[&r].chain_upto;
            let rep = pool.write(&reqs[&r].pages, from, to, tenant, r, now, upto);
            // Prefill attention over everything computed so far.
            let all = &self.reqs;
            let s = summarize(pool, &reqs[&r].pages, 0, to, r, tenant, &|w, pos, len| {
                equal_content(w, pos, len, upto, common_chain_tokens(all, w.request, r))
            });
            let mut rep = rep;
            let slots = std::mem::take(&mut rep.slots);
            if let Some(MemOp::Write { slots, .. }) =
                self.mem_returning(MemOp::Write { pool: pool_id, r, tenant, slots })
            {
                self.prefill[n.at()].pool.reuse_pieces(slots);
            }
            self.note_foreign_writes(pool_id, r, rep, crate::world::PREFILL_WRITE);
            // A clean read records nothing: its context is built only for one that is not.
            if !s.clean() {
                let ctx = self.read_ctx(pool_id, r, to, self.pages_for(to));
                self.oracle.check_read(&ctx, &s);
            }
            if let Some(audit) = self.read_audit.as_mut() {
                let pr = &self.prefill[n.at()].reqs[&r];
                let all = &self.reqs;
                let same = |w: &crate::pool::Writer, pos: u64, len: u64| {
                    equal_content(w, pos, len, upto, common_chain_tokens(all, w.request, r))
                };
                let pool = &self.prefill[n.at()].pool;
                let a = crate::check::oracle::audit_read(pool, &pr.pages, to, r, tenant, &same, self.now);
                audit.push(a);
            }
            self.mem(MemOp::Read { pool: pool_id, r, tenant, seq_len: to });
            if self.reference.is_some() {
                let table = self.prefill[n.at()].reqs[&r].pages.clone();
                self.differential_read(pool_id, r, &table, to, upto, &s.tally(), "prefill_read");
            }
            self.pnode(n).reqs.get_mut(&r).expect("present").prefilled = to;
            if to < len {
                self.prefix_checkpoint(n, r);
                let whole = to / self.page_size();
                let sent = self.prefill[n.at()].reqs[&r].sent_pages;
                if whole > sent && self.prefill[n.at()].reqs[&r].dst.is_some() {
                    self.prefill_send(n, r, sent, whole, false);
                }
                continue;
            }
            if let (Some(status), true) = (pending, k.prefill_post_forward_abort_check.on()) {
                // The chunks before this last one were checkpointed; this one is not
                // (`_retire_aborted_prefill_result`, checkpoint=False, frees it).
                self.prefill_retire(n, r, status, from);
                continue;
            }
            self.prefix_checkpoint(n, r);
            let node = self.pnode(n);
            node.waiting.retain(|x| *x != r);
            let pr = node.reqs.get_mut(&r).expect("present");
            if k.router_mode == RouterMode::Sequential {
                pr.phase = PPhase::Held;
                let has_dst = pr.dst.is_some();
                let (sent, num) = (pr.sent_pages, pr.num_pages);
                let status = pending.unwrap_or(200);
                self.phase(r, Lane::Prefill(n), Phase::Held);
                self.leg_result(r, Role::Prefill, status);
                let lease = Duration::from_ms(k.source_lease_ms);
                self.after(lease, Ev::Timeout { r, timer: TimeoutKind::SourceLease, node: pool_id, epoch });
                if has_dst {
                    self.prefill_send(n, r, sent, num, true);
                }
            } else {
                pr.phase = PPhase::Inflight;
                node.inflight.push(r);
                let (sent, num) = (pr.sent_pages, pr.num_pages);
                self.phase(r, Lane::Prefill(n), Phase::Inflight);
                self.prefill_send(n, r, sent, num, true);
            }
        }
        // The emptied list back for the next forward's batch (none can have started meanwhile:
        // the node's tick comes by event; if one had, its batch stays).
        let node = self.pnode(n);
        if node.batch.is_empty() {
            batch.clear();
            node.batch = batch;
        }
        self.tick_after_step(pool_id);
    }

    /// Pages at the start of the prompt decode reported it already holds (`decode_prefix_len`, in
    /// pages; 0 unless `decode_radix_cache = on`): prefill's `start_send_idx` begins there (sglang
    /// 0.5.16 and 0.5.22 wheels, `disaggregation/prefill.py` `finalize_bootstrap`), and the sender
    /// is told only the pages past it.
    fn decode_prefix_pages(&self, r: RequestId) -> u64 {
        self.reqs[r.idx()].decode_prefix_tokens() / self.page_size()
    }

    /// Hands pages `[from, to)` of the request to the transfer worker.
    fn prefill_send(&mut self, n: PrefillIdx, r: RequestId, from: u64, to: u64, last: bool) {
        let node = &self.prefill[n.at()];
        let pr = &node.reqs[&r];
        if pr.sender == SenderState::Failed {
            // A room already Failed (a failed chunk) takes no more chunks: `add_transfer_request`
            // returns before queueing ("Request with bootstrap_room=… already failed": sglang
            // 0.5.16 and 0.5.22 wheels, `disaggregation/mooncake/conn.py`). The request finishes
            // its forward and the inflight poll answers it 500.
            return;
        }
        let dst = pr.dst.as_ref().expect("sending requires decode's page list");
        let count = to.saturating_sub(from).min(pages_in(&dst.pages).saturating_sub(from));
        let decode_prefix = self.reqs[r.idx()].decode_prefix_tokens();
        if last && count == 0 && decode_prefix > 0 {
            // The last chunk has no pages: decode's reported prefix covers the prompt. `_send_kv_chunk`
            // returns before sending when the chunk ends before `start_send_idx` (a stub shorter
            // than decode's prefix, both wheels), and otherwise asks the sender's
            // `should_send_kv_chunk(0, last_chunk=True)`: `skip` (`BaseKVSender`, sglang #28652)
            // says no, so the metadata row and the status are never sent and the request sits in
            // the inflight queue; `send` (`CommonKVSender`) sends it.
            let skip = self.cfg.knobs.zero_page_last_chunk == ZeroPageLastChunk::Skip;
            if skip || pr.len < decode_prefix {
                return;
            }
        }
        let (mut src, mut dpages) = (self.jobs.spare_run_list(), self.jobs.spare_run_list());
        crate::pool::slice_pages_into(&pr.pages, from, count, &mut src);
        crate::pool::slice_pages_into(&dst.pages, from, count, &mut dpages);
        let room = self.reqs[r.idx()].room();
        // The cache entries whose pages this request may read: the prefix blocks it borrowed.
        let lenders: Vec<RequestId> =
            pr.borrowed.iter().filter_map(|k| node.prefix.blocks.get(k)).map(|b| b.request).collect();
        let job = TransferJob::new(
            r,
            (n, node.life.epoch()),
            (dst.decode, dst.epoch),
            last.then_some((dst.meta_slot, room)),
            pr.num_pages.saturating_sub(decode_prefix / self.page_size()),
            pr.reused_tokens,
            lenders,
        );
        self.pnode(n).reqs.get_mut(&r).expect("present").sent_pages = from + count;
        self.transfer_submit(job, src, dpages);
    }

    /// Abort at the prefill leg (client gone, or decode asking): the sender fails locally.
    pub(crate) fn prefill_abort(&mut self, r: RequestId, status: u16, from_decode: bool) {
        let n = self.reqs[r.idx()].prefill();
        let ack = |w: &mut World| {
            if from_decode {
                w.prefill_ack_abort(r);
            }
        };
        if !self.prefill[n.at()].reqs.contains_key(&r) {
            // Already released. With `ack_after_drain` a chunk still being written holds the ack
            // back (the worker's count is per room, whoever freed the request).
            if !self.ack_deferred_to_drain(n, r, from_decode) {
                ack(self);
            }
            return;
        }
        if self.pp_abort_blocked(n, r) {
            return;
        }
        if self.decode_pulls() && self.prefill[n.at()].reqs[&r].phase == PPhase::Held {
            // Behind vLLM's proxy a request held for decode's read has finished on prefill, and an
            // abort of a finished request does nothing there (vLLM 0.34.0 `v1/core/sched/
            // scheduler.py` `finish_requests` skips `request.is_finished()`). Decode's abort sends
            // prefill nothing either (`nixl/pull_scheduler.py` `request_finished` stops the
            // request's heartbeat and returns no message for a request still loading). So the
            // source stays held until the read's notice or the lease, and the lease is no longer
            // pushed on (`decode_still_loads`): a read still running when it ends reads blocks
            // prefill freed (`_reap_expired_send_leases`). Decode keeps its blocks until its read
            // ends (`delay_free_blocks`), which the job's end stands for here.
            if from_decode && !self.transfer_ack_on_end(n, r) {
                ack(self);
            }
            return;
        }
        let pr = self.pnode(n).reqs.get_mut(&r).expect("present");
        pr.sender = SenderState::Failed;
        if matches!(pr.phase, PPhase::Draining | PPhase::Orphaned) {
            pr.ack_decode |= from_decode;
            return;
        }
        let (phase, jobs_in_flight) = (pr.phase, pr.jobs_in_flight);
        // Still in the waiting queue proper: no chunk computed or being computed (a chunked
        // request is the scheduler's `chunked_req`, outside the waiting queue).
        let queued = phase == PPhase::Waiting
            && pr.prefilled == pr.reused_tokens
            && !self.prefill[n.at()].batch.iter().any(|(x, _, _)| *x == r);
        let k = &self.cfg.knobs;
        if from_decode && queued && k.prefill_failed_check == FailedCheck::BootstrapAndInflight {
            // Decode's abort marks the room Failed, but only the bootstrap and inflight queues are
            // polled for Failed: the waiting-queue entry is never retired, answered or released and
            // keeps its metadata slot and pages (sglang #28236; the 0.5.16 and 0.5.22 wheels poll
            // the waiting queue too, `resolve_waiting_queue_bootstrap`). The model drops it from
            // scheduling at once.
            let node = self.pnode(n);
            node.reqs.get_mut(&r).expect("present").phase = PPhase::Orphaned;
            node.waiting.retain(|x| *x != r);
            self.phase(r, Lane::Prefill(n), Phase::Orphaned);
            return;
        }
        if !from_decode && jobs_in_flight > 0 && k.cancel_mid_transfer == CancelMidTransfer::Leak {
            // A client cancel tears the transfer RPC down under the engine (Dynamo #7489: the
            // context's kill reaches the prefill child and interrupts the KV transfer): the
            // transfer ends, the request is answered, and its source blocks are never freed.
            self.transfer_abort(n, r);
            self.prefill_remove_from_queues(n, r);
            self.leg_result(r, Role::Prefill, status);
            self.pnode(n).reqs.get_mut(&r).expect("present").phase = PPhase::Orphaned;
            self.phase(r, Lane::Prefill(n), Phase::Orphaned);
            return;
        }
        self.transfer_abort(n, r);
        self.prefill_remove_from_queues(n, r);
        self.leg_result(r, Role::Prefill, status);
        if !self.prefill_release_or_drain(n, r, from_decode) {
            ack(self);
        }
    }

    /// Releases a failed request's source pages now, or (with `hold_source_until_drained`) once
    /// its in-flight transfers have landed. Returns true when the ack to decode was deferred to
    /// the drain (with `ack_after_drain` the pages are released now and the ack waits for the
    /// request's transfer jobs to end: `World::transfer_ack_on_end`).
    fn prefill_release_or_drain(&mut self, n: PrefillIdx, r: RequestId, ack_decode: bool) -> bool {
        let knob = self.cfg.knobs.prefill_abort_release;
        let pr = self.pnode(n).reqs.get_mut(&r).expect("present");
        if knob == PrefillRelease::HoldSourceUntilDrained && (pr.jobs_in_flight > 0 || pr.lands_pending > 0) {
            pr.phase = PPhase::Draining;
            pr.ack_decode = ack_decode;
            self.phase(r, Lane::Prefill(n), Phase::Draining);
            return true;
        }
        let deferred = self.ack_deferred_to_drain(n, r, ack_decode);
        let cached = self.pnode(n).reqs[&r].checkpointed();
        self.prefill_release(n, r, cached);
        deferred
    }

    /// With `ack_after_drain`, whether decode's abort (`ack_decode`) waits for the request's
    /// unfinished transfer jobs on `n` (marked here: `World::transfer_ack_on_end`).
    fn ack_deferred_to_drain(&mut self, n: PrefillIdx, r: RequestId, ack_decode: bool) -> bool {
        ack_decode
            && self.cfg.knobs.prefill_abort_release == PrefillRelease::AckAfterDrain
            && self.transfer_ack_on_end(n, r)
    }

    /// Prefill acknowledges decode's abort of `r` (decode's deferred release then frees), unless
    /// a failed send poisoned the acknowledgement (`Req::ack_poisoned`: decode then frees at its
    /// deferred-release timeout).
    pub(crate) fn prefill_ack_abort(&mut self, r: RequestId) {
        let q = &self.reqs[r.idx()];
        let decode = q.decode();
        if q.abort_ack_poisoned(self.prefill[q.prefill().at()].epoch()) {
            return;
        }
        let epoch = self.decode[decode.at()].epoch();
        let lat = self.msg_latency();
        self.after(lat, Ev::AbortAck { r, decode, epoch });
    }

    pub(crate) fn prefill_maybe_drained(&mut self, n: PrefillIdx, r: RequestId) {
        let Some(pr) = self.prefill[n.at()].reqs.get(&r) else {
            return;
        };
        if pr.phase == PPhase::Draining && pr.jobs_in_flight == 0 && pr.lands_pending == 0 {
            let (ack, cached) = (pr.ack_decode, pr.checkpointed());
            self.prefill_release(n, r, cached);
            if ack {
                self.prefill_ack_abort(r);
            }
        } else if pr.phase == PPhase::Held && pr.sender == SenderState::Success && pr.jobs_in_flight == 0 {
            self.prefill_release(n, r, u64::MAX);
        }
    }

    /// Whether a prefill timer would do nothing (`World::moot` drops it unprocessed): the node
    /// restarted since, the request left it, or it left the phase the timer guards.
    pub(crate) fn prefill_timeout_moot(&self, r: RequestId, kind: TimeoutKind, n: PrefillIdx, epoch: u32) -> bool {
        let node = &self.prefill[n.at()];
        if node.life.epoch() != epoch {
            return true;
        }
        let Some(pr) = node.reqs.get(&r) else {
            return true;
        };
        !matches!(
            (kind, pr.phase),
            (TimeoutKind::Bootstrap, PPhase::Bootstrap) | (TimeoutKind::SourceLease, PPhase::Held)
        )
    }

    pub(crate) fn prefill_timeout(&mut self, r: RequestId, kind: TimeoutKind, n: PrefillIdx, epoch: u32) {
        // Wedged stages' schedulers never look at their timers (`crate::pp`).
        if self.prefill_timeout_moot(r, kind, n, epoch) || self.prefill[n.at()].pp.wedged() {
            return;
        }
        match kind {
            TimeoutKind::Bootstrap => {
                self.reqs[r.idx()].time_out();
                let protected = self.prefill[n.at()].reqs.get(&r).map_or(0, |p| p.prefilled);
                self.prefill_retire(n, r, 500, protected)
            }
            TimeoutKind::SourceLease if self.decode_still_loads(r) => {
                // vLLM 0.33.0 `nixl/base_scheduler.py` `on_new_request`: decode heartbeats the
                // prefill engine for every request it still waits to load (every
                // `kv_lease_duration / 6`, until `finished_recving` or `request_finished`), and
                // `nixl/base_worker.py` `_handle_heartbeat` pushes the lease to now + 2/3 of its
                // duration. So the lease runs out only once decode stopped waiting; the model
                // extends it by 2/3 of a lease when it finds decode still waiting.
                let lease = Duration::from_ms(self.cfg.knobs.source_lease_ms.saturating_mul(2) / 3);
                let node = self.prefill[n.at()].id();
                self.after(lease, Ev::Timeout { r, timer: TimeoutKind::SourceLease, node, epoch });
            }
            _ => self.prefill_release(n, r, 0),
        }
    }

    /// Behind vLLM's sequential proxy: whether the request's decode node (alive) still waits to
    /// load its KV (admission queue or transfer), i.e. still heartbeats prefill's lease. An
    /// aborted request whose read is still in flight (`Releasing`) is heartbeated only under
    /// `decode_abort_heartbeat = until_read_ends`: vLLM 0.34.0 stops at the abort.
    fn decode_still_loads(&self, r: RequestId) -> bool {
        use crate::decode::DPhase;
        if self.cfg.knobs.router_mode != RouterMode::Sequential {
            return false;
        }
        let until_read_ends = self.cfg.knobs.decode_abort_heartbeat == AbortHeartbeat::UntilReadEnds;
        let d = &self.decode[self.reqs[r.idx()].decode().at()];
        d.alive()
            && d.reqs().get(&r).is_some_and(|q| match q.phase() {
                DPhase::Prealloc | DPhase::Transfer => true,
                DPhase::Releasing => until_read_ends,
                _ => false,
            })
    }

    pub(crate) fn prefill_crash(&mut self, n: PrefillIdx) {
        let reqs: Vec<RequestId> = self.prefill[n.at()].reqs.keys().copied().collect();
        for r in reqs {
            self.reqs[r.idx()].touched_by_fault();
            self.leg_result(r, Role::Prefill, 503);
            self.phase(r, Lane::Prefill(n), Phase::Left);
        }
        let k = self.cfg.knobs.clone();
        let node = self.pnode(n);
        node.life.crash();
        node.busy = false;
        node.bootstrap.clear();
        node.waiting.clear();
        node.inflight.clear();
        node.reqs.clear();
        node.pending_dst.clear();
        node.batch.clear();
        node.cache.clear();
        node.prefix.clear();
        node.pool.reset();
        node.meta = MetaSlots::new(node.meta_slots, node.meta_zero);
        node.pp.reset();
        // The transfer queues and their worker threads live in the process (sglang 0.5.22
        // `disaggregation/mooncake/conn.py`: `MooncakeKVManager.__init__` makes `transfer_queues`
        // and starts a `transfer_worker` thread per queue): the new incarnation's queues are
        // empty, whatever the dead one had booked (its jobs end with it: `land_batch` and
        // `job_done` check the epoch).
        node.xfer_free_at.clear();
        let (pool, pages, page_size) = (node.id(), node.pool.pages, node.pool.page_size);
        let epoch = node.life.epoch();
        self.mem(MemOp::Reset { pool, pages, page_size });
        let detect = Duration::from_ms(k.heartbeat_interval_ms * k.heartbeat_failures);
        self.after(detect, Ev::HeartbeatLost { prefill: n, epoch });
    }
}

/// What one chunk of `chunk` prompt tokens, after `from` tokens already in the sequence, adds
/// to a prefill forward pass (which also costs `prefill_base_us` once): per token the base cost
/// plus the context cost at the chunk's middle.
pub fn chunk_cost_ns(cost: &crate::config::CostConfig, from: u64, chunk: u64) -> u64 {
    let ctx_k = (from + chunk / 2) / 1000;
    chunk.saturating_mul(
        cost.prefill_ns_per_token.saturating_add(ctx_k.saturating_mul(cost.prefill_ns_per_token_per_kctx)),
    )
}

/// How long a prompt of `tokens` takes to prefill on an otherwise idle node: one forward pass
/// per chunk of at most `chunk_size` tokens (`chunk_cost_ns`). Used to space generated traffic
/// (`audit::scenario`), not by the model.
pub fn solo_prefill_ns(cost: &crate::config::CostConfig, chunk_size: u64, tokens: u64) -> u64 {
    let chunk_size = chunk_size.max(1);
    let passes = tokens.div_ceil(chunk_size);
    if passes > 100_000 {
        // Too many passes to walk: the same sum in closed form, to within rounding (the context
        // cost grows linearly, so its sum is about b·L²/2,000).
        let (l, base) = (u128::from(tokens), u128::from(cost.prefill_base_us) * 1000);
        let t = u128::from(passes) * base
            + l * u128::from(cost.prefill_ns_per_token)
            + l * l / 2000 * u128::from(cost.prefill_ns_per_token_per_kctx);
        return u64::try_from(t).unwrap_or(u64::MAX);
    }
    let mut from = 0;
    let mut total = 0u64;
    while from < tokens {
        let chunk = (tokens - from).min(chunk_size);
        total = total
            .saturating_add(cost.prefill_base_us.saturating_mul(1000))
            .saturating_add(chunk_cost_ns(cost, from, chunk));
        from += chunk;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::{chunk_cost_ns, solo_prefill_ns};
    use crate::config::CostConfig;

    fn cost() -> CostConfig {
        CostConfig {
            prefill_base_us: 5_000,
            prefill_ns_per_token: 30_000,
            prefill_ns_per_token_per_kctx: 20,
            decode_step_base_us: 25_000,
            decode_ns_per_kkv: 2_000,
            kv_bytes_per_token: 70_000,
            transfer_latency_us: 0,
            transfer_bytes_per_us: 1,
            message_latency_us: 0,
        }
    }

    /// The pass-by-pass walk a lone prompt's forward passes take (what the closed form of
    /// `solo_prefill_ns` stands in for past 100,000 passes).
    fn walk(c: &CostConfig, chunk: u64, tokens: u64) -> u64 {
        let mut from = 0;
        let mut total = 0u64;
        while from < tokens {
            let n = (tokens - from).min(chunk);
            total += c.prefill_base_us * 1000 + chunk_cost_ns(c, from, n);
            from += n;
        }
        total
    }

    #[test]
    fn a_lone_prompt_costs_its_passes_and_the_closed_form_stays_close() {
        let c = cost();
        // Under 100,000 passes: exactly the passes (3 chunks: 8,192 + 8,192 + 3,616).
        assert_eq!(solo_prefill_ns(&c, 8192, 20_000), walk(&c, 8192, 20_000));
        assert_eq!(solo_prefill_ns(&c, 8192, 0), 0);
        // Over it (1M tokens in chunks of 8: 125,000 passes): the closed form, within 0.1%.
        let (exact, closed) = (walk(&c, 8, 1_000_000), solo_prefill_ns(&c, 8, 1_000_000));
        assert!(exact.abs_diff(closed) * 1000 < exact, "{closed} against {exact}");
    }
}
