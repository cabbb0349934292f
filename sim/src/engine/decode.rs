//! The decode node, queue by queue (lifecycle reference, section 4): the prealloc queue
//! (full-prompt reservation plus reserved decode tokens, head-of-line blocking, abort sweep), the
//! transfer queue (status polling: Failed wins, status only rises; the commit check), the prebuilt
//! batch whose first read covers the whole reservation, running decode steps with page growth,
//! retraction / preemption when the running batch cannot get a page (`decode_out_of_pages`), and
//! release (immediate, or deferred until prefill acknowledges the abort or a timeout).

use crate::check::oracle::{equal_content, summarize, Tally};
use crate::config::{
    AbortCheck, Canary, CommitCheck, DecodeAdmission, DecodeFirstWrite, DecodeOutOfPages, DecodeRelease, Knobs,
    LoadsHoldSlots, NodeConfig, RetractedAbort, RetractionHostPool, RouterMode, TransferredAbort,
};
use crate::engine::incarnation::Incarnation;
use crate::event::{DstInfo, Ev, TimeoutKind};
use crate::lifecycle::{Lane, Phase};
use crate::metadata::MetaSlots;
use crate::pool::{pages_in, push_run, Holder, Known, Pool, Run, WriteReport};
use crate::trace::{DecodeEntry, MemOp, PageListOp};
use crate::types::{DecodeIdx, Duration, Instant, PrefillIdx, RequestId, Role};
use crate::world::{common_chain_tokens, LegIntake, Mitigation, World};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DPhase {
    Prealloc,
    Transfer,
    Running,
    /// Aborted during transfer; pages held until prefill acknowledges or the timer fires.
    Releasing,
    /// Aborted after its KV arrived, and forgotten with its pages still held
    /// (`decode_transferred_abort = leak`), or aborted while retracted and forgotten with its host
    /// copy still held (`retracted_abort = leak`).
    Leaked,
    /// Taken out of the running batch because it could not get a page (`decode_out_of_pages`):
    /// its device pages are freed; it waits in `retracted` (sglang: KV backed up on the host;
    /// vLLM: to be recomputed) and comes back before any new request is admitted.
    Retracted,
}

/// One request on a decode node. Its fields are private: this module's handlers write it;
/// the one write from elsewhere — a foreign write or the request's own late land into its pages
/// (the transfer engine, `World`'s oracle wiring) — is `foreign_write`. Everyone else reads.
#[derive(Clone, Debug)]
pub struct DReq {
    len: u64,
    pending_abort: Option<u16>,
    phase: DPhase,
    pages: Vec<Run>,
    meta_slot: Option<u32>,
    /// Polled KV status: None = still waiting, Some(false) = Failed (wins), Some(true) = Success.
    status_ok: Option<bool>,
    status_pages: u64,
    seq_len: u64,
    generated: u64,
    entered: Instant,
    /// A foreign write landed in this request's pages: re-check the whole range on next read.
    dirty: bool,
    read_upto: u64,
    /// Pages in `pages` (kept so a decode step never walks the table to count).
    page_count: u64,
    /// Leading tokens that are a shared prefix (reused by prefill from its radix cache).
    shared_tokens: u64,
    /// Prompt positions below this hold KV fixed by the request's prefix chain (0 for a stub).
    chain_upto: u64,
    /// The verdict on positions `[0, read_upto)`, kept only under the differential check so each
    /// incremental read can be compared, whole, with the reference oracle.
    seen: Option<Box<Tally>>,
    /// The prefill incarnation (epoch) this request's KV comes from: the prefill's epoch when the
    /// decode leg arrived, or the crashed one's (`epoch - 1`) when the prefill was down then. A
    /// heartbeat loss fails only requests bound to an incarnation older than the one it reports.
    prefill_epoch: u32,
    /// Pages of this request's KV backed up in host memory (retracted with
    /// `decode_out_of_pages = retract_to_host`; still counted after a leaking abort).
    host_pages: u64,
    /// Decode-side radix-cache blocks this request locked (`decode_radix_cache = on`): at
    /// admission, and its own when its KV arrived under `decode_prefix_rules = block_pool`; their
    /// pages start its block table and belong to the cache, not to the request.
    borrowed: Vec<crate::prefix::BlockKey>,
    /// It joined the running batch while a decode step was running: that step's batch was formed
    /// (and its cost computed) without it, so it gets no token when that step ends; it joins the
    /// next one. sglang 0.5.22 `disaggregation/decode.py` `event_loop_normal_disagg_decode`:
    /// `process_decode_queue` (transferred requests leave the transfer queue), then
    /// `get_next_disagg_decode_batch_to_run` forms the batch, then `run_batch`; a request whose
    /// KV lands during `run_batch` is taken up by the next iteration's `process_decode_queue` and
    /// first decoded in the batch formed after it.
    late: bool,
    /// Its landed KV passed the commit (sglang `pop_transferred` → `_commit_transfer_to_req`) and
    /// it waits, still in `transfer`, for a running slot. sglang 0.5.22 commits every request
    /// whose status is Success when it polls, running batch full or not, frees its metadata slot
    /// then, and moves it to the scheduler's waiting queue (`disaggregation/decode.py`
    /// `pop_transferred`, `process_decode_queue`): its receiver is concluded, so no waiting
    /// timeout, no prefill failure and no later status touches it (`common/conn.py`
    /// `CommonKVReceiver._poll` returns `conclude_state`; `_handle_node_failure` skips Success
    /// rooms). Never set under `decode_loads_hold_slots = off` (vLLM commits at promotion).
    committed: bool,
}

impl DReq {
    /// Whether every page of `runs` is in the request's block table now (a late batch landing
    /// into pages the request still attends over, whoever else holds them too: vLLM's cache
    /// indexes a loaded block at once).
    /// (`runs` disjoint, as the table's runs are.)
    pub(crate) fn table_holds(&self, runs: &[Run]) -> bool {
        crate::pool::pages_in(&crate::pool::runs_intersect(runs, &self.pages)) == crate::pool::pages_in(runs)
    }

    /// Its progress once its token at `seq_len` is written: the sequence, the running batch's KV
    /// (`running_kv`) and its output grow by one, and it has read everything up to the new token
    /// (`seen`: what the differential oracle's read found, if it ran).
    #[inline(always)]
    fn token_done(&mut self, running_kv: &mut u64, seen: Option<Box<Tally>>) {
        self.seq_len += 1;
        *running_kv += 1;
        self.generated += 1;
        self.read_upto = self.seq_len;
        self.dirty = false;
        if seen.is_some() {
            self.seen = seen;
        }
    }

    /// Its phase in the node's queues.
    #[inline]
    pub fn phase(&self) -> DPhase {
        self.phase
    }

    /// Polled KV status: None = still waiting, Some(false) = Failed, Some(true) = Success.
    #[inline]
    pub fn status_ok(&self) -> Option<bool> {
        self.status_ok
    }

    /// Its KV status is Success: its transfer is over, whatever it still waits for.
    #[inline]
    fn landed(&self) -> bool {
        self.status_ok == Some(true)
    }

    /// An abort that arrived while it could not yet be acted on (its status code).
    #[inline]
    pub fn pending_abort(&self) -> Option<u16> {
        self.pending_abort
    }

    /// Its tokens on decode (the prompt; 1 for a stub).
    #[inline]
    pub fn len_tokens(&self) -> u64 {
        self.len
    }

    /// Its block table (locked radix-cache blocks first).
    #[inline]
    pub fn pages(&self) -> &[Run] {
        &self.pages
    }

    /// Decode-side radix-cache blocks it locked at admission (and, under `decode_prefix_rules =
    /// block_pool`, its own blocks indexed when its KV arrived).
    #[inline]
    pub fn borrowed(&self) -> &[crate::prefix::BlockKey] {
        &self.borrowed
    }

    /// Its own next prompt blocks `keys` joined decode's prefix index, which it keeps locked
    /// (`World::decode_prefix_index_loaded`): they join its borrowed blocks.
    pub(crate) fn borrow_more(&mut self, keys: &[crate::prefix::BlockKey]) {
        self.borrowed.extend_from_slice(keys);
    }

    /// A write landed in its pages since decode last read them.
    #[inline]
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Prompt positions below this hold KV fixed by the request's prefix chain.
    #[inline]
    pub fn chain_upto(&self) -> u64 {
        self.chain_upto
    }

    /// A write landed in its pages (another request's, or its own lagged land): the next read
    /// re-checks the whole range.
    pub(crate) fn foreign_write(&mut self) {
        self.dirty = true;
    }
}

#[derive(Debug)]
pub struct DecodeNode {
    index: DecodeIdx,
    pool_tokens: u64,
    pool: Pool,
    meta: MetaSlots,
    meta_slots: u32,
    meta_zero: bool,
    max_running: u32,
    life: Incarnation,
    prealloc: VecDeque<RequestId>,
    transfer: Vec<RequestId>,
    running: Vec<RequestId>,
    /// The KV the running batch holds: the sum of `seq_len` over `running`, which a decode
    /// step's cost is priced by. Kept as requests join, leave and grow (instead of summed with a
    /// lookup per running request at every step); `invariants` holds it to the sum.
    running_kv: u64,
    /// Retracted (sglang) or preempted (vLLM) requests waiting to come back, in the order they
    /// come back: sglang appends to `retracted_queue`, vLLM prepends to its waiting queue.
    retracted: VecDeque<RequestId>,
    reqs: crate::engine::reqmap::ReqMap<DReq>,
    busy: bool,
    /// The decode-side radix cache (`decode_radix_cache = on`; empty otherwise).
    prefix: crate::prefix::PrefixIndex,
}

impl DecodeNode {
    pub fn new(index: DecodeIdx, c: &NodeConfig, k: &Knobs) -> DecodeNode {
        let id = index.node();
        DecodeNode {
            index,
            pool_tokens: c.pool_tokens,
            pool: Pool::new(id, c.pool_tokens, k.page_size, k.free_list_policy, k.zero_on_free),
            meta: MetaSlots::new(c.metadata_slots, k.metadata_zero_on_free.on()),
            meta_slots: c.metadata_slots,
            meta_zero: k.metadata_zero_on_free.on(),
            max_running: c.max_running_requests,
            life: Incarnation::default(),
            prealloc: VecDeque::new(),
            transfer: Vec::new(),
            running: Vec::new(),
            running_kv: 0,
            retracted: VecDeque::new(),
            reqs: crate::engine::reqmap::ReqMap::new(),
            busy: false,
            prefix: Default::default(),
        }
    }

    /// A tick would do nothing: the node is down, or nothing waits for admission or KV and a step
    /// is running or there is nothing to step (`decode_tick`'s four parts).
    pub fn tick_idle(&self) -> bool {
        !self.life.alive() || (self.nothing_waits() && (self.busy || self.running.is_empty()))
    }

    /// Running slots taken: by the running batch, and by the requests in transfer when loads
    /// hold slots (`decode_loads_hold_slots`).
    #[inline]
    fn slots_taken(&self, loads_hold_slots: bool) -> usize {
        self.running.len() + if loads_hold_slots { self.transfer.len() } else { 0 }
    }

    /// Request slots past `max_running_requests` for preallocated and in-transfer requests, when
    /// loads hold slots (sglang): `disaggregation_decode_extra_slots`, which both wheels default to
    /// twice the per-worker running batch when `max_running_requests` is given and at most 32, else
    /// 0 (0.5.16 and 0.5.22 `arg_groups/pd_disaggregation_hook.py`); the decode request pool is
    /// `max_running_requests` plus them (`_get_num_req_slots`), preallocation stops when it is
    /// empty (`pop_preallocated`: `req_to_token_pool.available_size() <= 0`), and the running
    /// batch still takes at most `max_running_requests` (`_get_new_prebuilt_batch`), so a landed
    /// request can wait for a running slot. Before the forty-first session the model had no
    /// extra slots, and a small deployment preallocated less than the engine does.
    #[inline]
    fn extra_slots(&self, loads_hold_slots: bool) -> usize {
        if loads_hold_slots && self.max_running <= 32 {
            2 * self.max_running as usize
        } else {
            0
        }
    }

    /// Whether the decode request pool is full: the slots taken (`slots_taken`) reach
    /// `max_running_requests` plus the extra slots (`extra_slots`). Preallocation and resumption
    /// both stop there.
    #[inline]
    fn request_pool_full(&self, loads_hold_slots: bool) -> bool {
        self.slots_taken(loads_hold_slots) >= self.max_running as usize + self.extra_slots(loads_hold_slots)
    }

    /// The pages the running batch's next tokens take: one for each request whose last page is
    /// full. Only the step's batch writes a token (a `late` joiner waits for the next step).
    fn step_need(&self, ps: u64) -> u64 {
        let full = |r: &RequestId| self.reqs.get(r).is_some_and(|d| !d.late && d.seq_len == d.page_count * ps);
        self.running.iter().filter(|r| full(r)).count() as u64
    }

    /// The pages the running batch takes before a request admitted now first runs: at a step
    /// boundary, its next tokens' (`step_need`); during a step, that step's tokens and the next
    /// step's too (a mid-step admission stands for the engine's next scheduling pass, which gives
    /// the batch its slots for that step before it admits anyone: vLLM 0.34.0 `schedule`), and a
    /// `late` joiner's first token.
    fn batch_need(&self, ps: u64) -> u64 {
        if !self.busy {
            return self.step_need(ps);
        }
        let need = |d: &DReq| {
            let tokens = d.seq_len + if d.late { 1 } else { 2 };
            tokens.div_ceil(ps).saturating_sub(d.page_count)
        };
        self.running.iter().filter_map(|r| self.reqs.get(r)).map(need).sum()
    }

    /// Nothing waits for admission, KV or resumption (a tick's parts 1-3 have nothing to do).
    fn nothing_waits(&self) -> bool {
        self.prealloc.is_empty() && self.transfer.is_empty() && self.retracted.is_empty()
    }

    crate::engine::node::node_parts!(DReq);

    /// A decode step is running (written only by this module's handlers).
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// Whether request `r` is in the decode step now running and will get its token there: not
    /// when its last page is full and the pool has none free (it stalls this step,
    /// `decode_out_of_pages = stall`). `ps`: the page size.
    pub fn stepping(&self, r: RequestId, ps: u64) -> bool {
        let stalls = |d: &DReq| d.seq_len == d.page_count * ps && self.pool.free_pages() == 0;
        self.busy && self.running.contains(&r) && self.reqs.get(&r).is_some_and(|d| !stalls(d))
    }

    /// The prealloc queue: requests waiting for pages and a metadata slot, in admission order.
    pub fn prealloc(&self) -> &VecDeque<RequestId> {
        &self.prealloc
    }

    /// The transfer queue: admitted requests waiting for their KV.
    pub fn transfer_queue(&self) -> &[RequestId] {
        &self.transfer
    }

    /// The running batch.
    pub fn running(&self) -> &[RequestId] {
        &self.running
    }

    /// Retracted (preempted) requests waiting to come back, in the order they come back.
    pub fn retracted(&self) -> &VecDeque<RequestId> {
        &self.retracted
    }

    pub fn invariants(&self, now: Instant) {
        self.pool.invariants();
        self.meta.invariants();
        self.prefix.invariants(&format_args!("decode-{}", self.index));
        let ps = self.pool.page_size;
        // One pass over the request table: pages held and borrowed, requests queued, and the
        // first request out of its own bounds (asserted last, as the separate walks did).
        enum OutOfBounds {
            SeqLen,
            /// `Pool::append` finds a token's slot from the kept count: (kept, held).
            PageCount(u64, u64),
        }
        let (mut pages, mut borrowed, mut tracked, mut bad) = (0u64, 0u64, 0usize, None);
        for d in self.reqs.values() {
            let held = pages_in(&d.pages);
            pages += held;
            borrowed += d.borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS / ps;
            tracked += usize::from(!matches!(d.phase, DPhase::Releasing | DPhase::Leaked));
            if bad.is_none() && !matches!(d.phase, DPhase::Retracted | DPhase::Leaked) {
                if d.seq_len > held * ps {
                    bad = Some(OutOfBounds::SeqLen);
                } else if d.phase == DPhase::Running && d.page_count != held {
                    bad = Some(OutOfBounds::PageCount(d.page_count, held));
                }
            }
        }
        let owned = pages - borrowed;
        let cached = self.prefix.cached_pages();
        assert_eq!(owned + cached, self.pool.held_pages(), "decode-{} at {now}: page accounting", self.index);
        let kv: u64 = self.running.iter().map(|r| self.reqs[r].seq_len).sum();
        assert_eq!(self.running_kv, kv, "decode-{} at {now}: the running batch's KV", self.index);
        let queued = self.prealloc.len() + self.transfer.len() + self.running.len() + self.retracted.len();
        assert_eq!(queued, tracked, "decode-{} at {now}: queues and request table disagree", self.index);
        match bad {
            Some(OutOfBounds::SeqLen) => panic!("decode-{} at {now}: seq_len beyond pages", self.index),
            Some(OutOfBounds::PageCount(kept, held)) => {
                assert_eq!(kept, held, "decode-{} at {now}: page count", self.index)
            }
            None => {}
        }
    }

    /// What the node still holds at the end. Host copies are held memory too (a leaked backup
    /// is memory nobody frees), counted apart from the device pages. Radix-cached pages are not
    /// (the cache holds them on purpose, evictable).
    pub fn leaks(&self) -> Option<crate::engine::node::Leak> {
        self.leaks_besides(|_| false)
    }

    /// `leaks`, less what requests still open (`open`) hold themselves: their pages, host copy
    /// and slot are their hang's (`crate::engine::node::leak_of`).
    pub fn leaks_besides(&self, open: impl Fn(RequestId) -> bool) -> Option<crate::engine::node::Leak> {
        let host_pages = self.reqs.values().map(|d| d.host_pages).sum::<u64>();
        let pages = self.pool.held_pages() - self.prefix.cached_pages();
        let slots = self.meta.in_use() as u64;
        // The holders are the requests that hold pages, a host copy or a slot (not every request
        // the node still knows).
        // An open holder's own pages are counted (a walk of its table's holders), the others'
        // need not be.
        let shares =
            self.reqs.iter().filter(|(_, d)| !d.pages.is_empty() || d.host_pages > 0 || d.meta_slot.is_some()).map(
                |(r, d)| {
                    let open = open(*r);
                    crate::engine::node::HolderShare {
                        r: *r,
                        open,
                        own: if open { self.pool.held_by(&d.pages, Holder::Req(*r)) } else { 0 },
                        host: d.host_pages,
                        slot: d.meta_slot.is_some(),
                    }
                },
            );
        crate::engine::node::leak_of(self.id(), pages, host_pages, slots, shares)
    }
}

impl World {
    fn dnode(&mut self, n: DecodeIdx) -> &mut DecodeNode {
        &mut self.decode[n.at()]
    }

    pub(crate) fn decode_leg_arrive(&mut self, r: RequestId) {
        let n = self.reqs[r.idx()].decode();
        let node_id = n.node();
        let (pool_tokens, alive) = (self.decode[n.at()].pool_tokens, self.decode[n.at()].life.alive());
        let (len, pending_abort) = match self.leg_intake(r, node_id, pool_tokens, alive) {
            LegIntake::Admitted { len, pending_abort } => (len, pending_abort),
            LegIntake::Rejected(_) => {
                self.decode_reject_notifies_prefill(r);
                return;
            }
            LegIntake::NodeDown => return,
        };
        let now = self.now;
        let chain_upto = self.chain_upto(r, len, pending_abort.is_some());
        let p = &self.prefill[self.reqs[r.idx()].prefill().at()];
        let prefill_epoch = if p.alive() { p.epoch() } else { p.epoch().saturating_sub(1) };
        let node = self.dnode(n);
        node.reqs.insert(
            r,
            DReq {
                len,
                pending_abort,
                phase: DPhase::Prealloc,
                pages: Vec::new(),
                meta_slot: None,
                status_ok: None,
                committed: false,
                status_pages: 0,
                seq_len: 0,
                generated: 0,
                entered: now,
                dirty: false,
                read_upto: 0,
                page_count: 0,
                shared_tokens: 0,
                chain_upto,
                seen: None,
                prefill_epoch,
                host_pages: 0,
                borrowed: Vec::new(),
                late: false,
            },
        );
        node.prealloc.push_back(r);
        self.phase(r, Lane::Decode(n), Phase::Prealloc);
        self.tick(node_id);
    }

    /// Decode turned the request away before admission, or it was aborted before decode scheduled
    /// it: behind vLLM's sequential proxy, with `decode_reject_releases_prefill`, prefill hears of
    /// it one message later and frees the source blocks it holds for decode's read, as if their
    /// lease had ended (see the knob).
    fn decode_reject_notifies_prefill(&mut self, r: RequestId) {
        let k = &self.cfg.knobs;
        if k.router_mode != RouterMode::Sequential || !k.decode_reject_releases_prefill.on() {
            return;
        }
        let p = &self.prefill[self.reqs[r.idx()].prefill().at()];
        if !p.alive() {
            return;
        }
        let (node, epoch) = (p.id(), p.epoch());
        let lat = self.msg_latency();
        self.after(lat, Ev::Timeout { r, timer: TimeoutKind::SourceLease, node, epoch });
    }

    /// Tokens promised to admitted requests for their future decode pages.
    fn outstanding_reserve(&self, n: DecodeIdx) -> u64 {
        let k = self.cfg.knobs.reserved_decode_tokens;
        self.admitted(n).map(|d| k.saturating_sub(d.generated)).sum()
    }

    /// Node `n`'s admitted requests: preallocated (receiving KV) or running.
    fn admitted(&self, n: DecodeIdx) -> impl Iterator<Item = &DReq> {
        self.decode[n.at()].reqs.values().filter(|d| matches!(d.phase, DPhase::Transfer | DPhase::Running))
    }

    /// The free tokens decode wants before it preallocates request `r` under
    /// `decode_admission = max_new_tokens` (sglang 0.5.16 and 0.5.22 wheels,
    /// `disaggregation/decode.py` `pop_preallocated`): `_required_admission_tokens` (the larger of
    /// the `alloc_tokens` it allocates plus the reserve, and its prompt less the `prefix_tokens` it
    /// locked plus `min(max_new_tokens, CLIP_MAX_NEW_TOKEN)` less the running batch's tokens) plus
    /// what `_allocatable_token_budgets` holds back (the larger of the reserve times the admitted
    /// requests, `_active_reserved_tokens`, and `_need_space_for_single_req`: the largest running
    /// request's prompt plus its clipped `max_new_tokens`, less the running batch's tokens).
    fn sglang_admission_want(&self, n: DecodeIdx, r: RequestId, alloc_tokens: u64, prefix_tokens: u64) -> u64 {
        /// sglang `managers/schedule_policy.py` `CLIP_MAX_NEW_TOKEN` (its default).
        const CLIP_MAX_NEW_TOKEN: u64 = 4096;
        let reserved = self.cfg.knobs.reserved_decode_tokens;
        let node = &self.decode[n.at()];
        let max_new = |x: RequestId| self.reqs[x.idx()].output_tokens().min(CLIP_MAX_NEW_TOKEN);
        let retractable: u64 = node.running.iter().map(|x| node.reqs[x].len + node.reqs[x].generated).sum();
        let len = node.reqs[&r].len;
        let required =
            (alloc_tokens + reserved).max((len.saturating_sub(prefix_tokens) + max_new(r)).saturating_sub(retractable));
        let single = node
            .running
            .iter()
            .map(|x| (node.reqs[x].len + max_new(*x)).saturating_sub(retractable))
            .max()
            .unwrap_or(0);
        let admitted = self.admitted(n).count() as u64;
        required.saturating_add(reserved.saturating_mul(admitted).max(single))
    }

    /// Whether decode `n` has `want` tokens free, counting the unused blocks of its radix cache
    /// (evicted on demand; walked only when the free pages alone fall short).
    fn decode_has_room(&self, n: DecodeIdx, want: u64) -> bool {
        let (ps, node) = (self.page_size(), &self.decode[n.at()]);
        // vLLM allocates the running batch's slots before a waiting request's
        // (`decode_room_before_admission`): the pages the batch's next tokens take (`batch_need`)
        // are not free for an admission or a resumption. sglang checks its running batch only at the
        // retraction, after admission (its reserve covers the batch's growth instead).
        let batch = if self.cfg.knobs.decode_out_of_pages == DecodeOutOfPages::PreemptRecompute {
            node.batch_need(ps)
        } else {
            0
        };
        let want = want + batch * ps;
        let room = |evictable: u64| (node.pool.free_pages() + evictable) * ps >= want;
        room(0) || (self.cfg.knobs.decode_radix_cache.on() && room(node.prefix().unused_pages()))
    }

    /// `count` new pages for request `r`, evicting the radix cache's least recently used unused
    /// blocks for the shortfall only; `None` when even that falls short (never after
    /// `decode_has_room`: every unused block is evictable, `PrefixIndex::unused_pages`).
    fn decode_alloc_evicting(&mut self, n: DecodeIdx, count: u64, r: RequestId) -> Option<Vec<Run>> {
        while self.decode[n.at()].pool.free_pages() < count && self.decode_prefix_evict_one(n) {}
        self.dnode(n).pool.alloc(count, Holder::Req(r))
    }

    pub(crate) fn decode_tick(&mut self, n: DecodeIdx) {
        self.dnode(n).life.disarm_tick();
        let node = &self.decode[n.at()];
        if !node.life.alive() {
            return;
        }
        // vLLM gives the running batch its pages before it looks at a waiting request, and a pass
        // that preempted schedules no waiting request at all (0.34.0 `v1/core/sched/scheduler.py`
        // `schedule`: the RUNNING loop's `allocate_slots`, preempting `self.running.pop()` until it
        // succeeds, then the WAITING requests only `if not preempted_reqs`). Before the forty-fifth
        // session the model admitted first and made room at the step's end, so a request it had
        // just admitted or promoted could take the pages the batch needed and be preempted for
        // them in the same pass. With the batch emptied, the engine's next pass comes at once, with
        // nothing to run: the tick goes on.
        let preempted = self.decode_room_before_admission(n) && !self.decode[n.at()].running.is_empty();
        let node = &self.decode[n.at()];
        if node.nothing_waits() || preempted {
            // The usual tick, after a decode step: nothing waits for admission, KV or resumption
            // (or, after a preemption, nothing may be admitted), so parts 1-3 below have nothing to
            // do; only the next step starts.
            self.decode_start_step(n);
            return;
        }
        let k = self.cfg.knobs.clone();
        // 1. Prealloc abort sweep (the queue is copied only when the sweep has work: a tick per
        //    decode step would otherwise copy it every step).
        let node = &self.decode[n.at()];
        let sweep = k.decode_prealloc_abort_check == AbortCheck::AbortedToo
            && node.prealloc.iter().any(|r| node.reqs[r].pending_abort.is_some());
        if sweep {
            for r in self.decode[n.at()].prealloc.clone() {
                if let Some(status) = self.decode[n.at()].reqs[&r].pending_abort {
                    self.decode_finish(n, r, status, None);
                }
            }
        }
        // Under `decode_loads_hold_slots = off` (vLLM) the landed loads are promoted first
        // (`kv_holding_waiting` is drained before the waiting queue), while running slots last.
        let loads_hold_slots = k.decode_loads_hold_slots == LoadsHoldSlots::On;
        if !loads_hold_slots && !self.decode_poll_transfers(n, &k) {
            return;
        }
        // 2. Retracted or preempted requests come back first (sglang 0.5.22
        // `disaggregation/decode.py`: `resume_retracted_reqs`, then "if there are still retracted
        // requests, we do not allocate new requests"; vLLM: a preempted request is prepended to
        // the waiting queue, which is scheduled in order). Then admission in FIFO order; the first
        // request that does not fit blocks the rest.
        self.decode_resume(n);
        let ps = self.page_size();
        while let Some(&r) = self.decode[n.at()].prealloc.front() {
            let node = &self.decode[n.at()];
            if !node.retracted.is_empty() || node.request_pool_full(loads_hold_slots) {
                break;
            }
            let need = self.prealloc_pages(node.reqs[&r].len);
            // The decode-side radix cache: lock the cached blocks the prompt starts with; only the
            // rest is allocated (and evicted for, least recently used first).
            let (borrowed, pages) = if k.decode_radix_cache.on() && node.reqs[&r].pending_abort.is_none() {
                let len = node.reqs[&r].len;
                self.decode_prefix_lock(n, r, len)
            } else {
                (Vec::new(), Vec::new())
            };
            let new = need - pages_in(&pages);
            let want = match k.decode_admission {
                DecodeAdmission::PagesAndReserve => new * ps + k.reserved_decode_tokens + self.outstanding_reserve(n),
                DecodeAdmission::MaxNewTokens => self.sglang_admission_want(n, r, new * ps, pages_in(&pages) * ps),
            };
            // Cached blocks nobody uses count as free (they are evicted on demand), and only the
            // allocation's shortfall is evicted, once the request is admitted: sglang 0.5.22
            // `disaggregation/decode.py` `_allocatable_token_budgets` adds the tree's
            // `evictable_size()`, a request that does not fit breaks the loop with nothing evicted,
            // and `_pre_alloc` evicts `required − available` tokens (0.5.16 the same); vLLM
            // 0.34.0 `allocate_slots` counts cached free blocks as free and evicts one per block
            // it takes. Before, the model evicted up to the whole budget before the check, on a
            // refusal too, and kept fewer blocks cached than the engine.
            if !self.decode_has_room(n, want) {
                self.decode_prefix_unlock(n, &borrowed);
                break;
            }
            let Some(slot) = self.dnode(n).meta.take() else {
                self.decode_prefix_unlock(n, &borrowed);
                break;
            };
            let Some(fresh) = self.decode_alloc_evicting(n, new, r) else {
                // Never after `decode_has_room`; the request waits, as when it does not fit.
                self.dnode(n).meta.untake(slot);
                self.decode_prefix_unlock(n, &borrowed);
                break;
            };
            let pool = self.decode[n.at()].id();
            if !borrowed.is_empty() {
                let owner = self.decode_prefix_owner(n, &borrowed);
                self.reqs[r.idx()].note_decode_prefix(borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS, owner);
                self.decode_prefix_commit(n, r, &borrowed, pages_in(&pages));
            }
            let pages = self.decode_table(pool, r, pages, fresh);
            let now = self.now;
            let epoch = self.decode[n.at()].life.epoch();
            let node = self.dnode(n);
            node.prealloc.pop_front();
            node.transfer.push(r);
            let d = node.reqs.get_mut(&r).expect("queued");
            d.pages = pages.clone();
            d.page_count = need;
            d.meta_slot = Some(slot);
            d.phase = DPhase::Transfer;
            d.entered = now;
            d.borrowed = borrowed;
            self.phase(r, Lane::Decode(n), Phase::Transfer);
            let prefill = self.reqs[r.idx()].prefill();
            let lat = self.msg_latency();
            let dst = DstInfo { decode: n, epoch, pages, meta_slot: slot };
            self.after(lat, Ev::DstInfo { r, prefill, dst: Box::new(dst) });
            // sglang's waiting timeout (`SGLANG_DISAGGREGATION_WAITING_TIMEOUT`). vLLM's decode
            // times no load out: a request in WAITING_FOR_REMOTE_KVS waits until its read is
            // reported received or failed (0.34.0 `v1/core/sched/scheduler.py`
            // `_handle_blocked_waiting_request`), and a read from a dead prefill fails.
            if !self.decode_pulls() {
                let t = Duration::from_ms(k.waiting_timeout_ms);
                self.after(t, Ev::Timeout { r, timer: TimeoutKind::Waiting, node: pool, epoch });
            }
        }
        // 3. Transfer queue: poll, then commit (vLLM's were promoted above).
        if loads_hold_slots && !self.decode_poll_transfers(n, &k) {
            return;
        }
        // 4. A decode step over the running batch.
        self.decode_start_step(n);
    }

    /// The block table of request `r`'s allocation on decode pool `pool` (an admission or a
    /// resumption): the pages of the cached blocks it locked (`locked`) first, then the pages it
    /// took (`fresh`), with their memory records: `Lock` of the locked pages (the replay's reads
    /// need them), then `Alloc` of the pages taken (always, when it locked nothing).
    fn decode_table(
        &mut self,
        pool: crate::types::PoolId,
        r: RequestId,
        locked: Vec<Run>,
        fresh: Vec<Run>,
    ) -> Vec<Run> {
        if locked.is_empty() {
            self.mem_page_list(PageListOp::Alloc, pool, r, &fresh);
            return fresh;
        }
        self.mem_page_list(PageListOp::Lock, pool, r, &locked);
        let mut pages = locked;
        for run in &fresh {
            push_run(&mut pages, *run);
        }
        if pages_in(&fresh) > 0 {
            self.mem(MemOp::Alloc { pool, r, pages: fresh });
        }
        pages
    }

    /// Polls the transfer queue and commits the landed requests, fails the failed ones; false
    /// when the node died meanwhile (nothing more to do this tick). Only the requests whose
    /// status has come are copied out (usually none): a status arrives by event, never while this
    /// loop runs, and the others stay queued untouched. Under sglang's retraction nothing is
    /// polled while a retracted request waits to resume: `process_decode_queue` returns after
    /// `resume_retracted_reqs` when the retracted queue is not empty, before `pop_transferred`
    /// (0.5.16 and 0.5.22 wheels, `disaggregation/decode.py`), so a landed transfer is committed,
    /// and a failed one failed, only after the resumption. (vLLM's preempted request heads the
    /// waiting queue instead; its transfers are still polled.) Under `decode_loads_hold_slots =
    /// off` a landed load is promoted only while the running batch has a free slot: vLLM 0.34.0
    /// `schedule` scans no waiting queue once it is full (`loads_only`), so the load keeps its
    /// pages and waits. A failed load is failed at once all the same: under the default
    /// `kv_load_failure_policy = "fail"` `update_from_output` finishes it with an error
    /// (`_handle_failed_recving` → `finish_requests`), outside the waiting queue's scan.
    #[inline]
    fn decode_poll_transfers(&mut self, n: DecodeIdx, k: &Knobs) -> bool {
        let mut polled = std::mem::take(&mut self.poll_scratch);
        polled.clear();
        let node = &self.decode[n.at()];
        let sglang_retraction =
            matches!(k.decode_out_of_pages, DecodeOutOfPages::RetractToHost | DecodeOutOfPages::RetractAbort);
        if sglang_retraction && !node.retracted.is_empty() {
            return true;
        }
        // A landed load waits for a running slot where loads do not hold one (vLLM) or where
        // extra request slots let more requests in transfer than the running batch takes (sglang).
        let loads_hold_slots = k.decode_loads_hold_slots == LoadsHoldSlots::On;
        let bounded = !loads_hold_slots || node.extra_slots(loads_hold_slots) > 0;
        polled.extend(node.transfer.iter().filter_map(|r| node.reqs[r].status_ok.map(|ok| (*r, ok))));
        // By index: the list goes back to `World::poll_scratch` on every way out.
        for i in 0..polled.len() {
            let (r, ok) = polled[i];
            let node = &self.decode[n.at()];
            if !node.life.alive() {
                self.poll_scratch = polled;
                return false;
            }
            if ok {
                // sglang commits what landed at once and it waits for a running slot committed
                // (`DReq::committed`); vLLM's landed load waits uncommitted.
                let committed = node.reqs[&r].committed;
                if loads_hold_slots && !committed && !self.decode_commit(n, r) {
                    continue;
                }
                let node = &self.decode[n.at()];
                if bounded && node.running.len() >= node.max_running as usize {
                    continue;
                }
                if !loads_hold_slots && !self.decode_commit(n, r) {
                    continue;
                }
                self.decode_promote(n, r);
            } else {
                self.decode_transfer_failed(n, r, 500);
            }
        }
        self.poll_scratch = polled;
        true
    }

    /// `World::run_step_tick`'s shortcut for the usual tick after a decode step: no tick is
    /// pending, the node is up and nothing waits for admission, KV or resumption. Arming the tick,
    /// `moot` and `decode_tick` would then start the next step (when the node is idle and has a
    /// batch) and leave the tick disarmed, as it is: this does only that. False, and nothing done,
    /// when the tick must take the full path.
    #[inline]
    pub(crate) fn decode_usual_tick(&mut self, n: DecodeIdx) -> bool {
        let node = &self.decode[n.at()];
        if node.life.tick_pending() || !node.life.alive() || !node.nothing_waits() {
            return false;
        }
        // As `decode_tick` does (nothing waits, so a preemption gates nothing).
        self.decode_room_before_admission(n);
        self.decode_start_step(n);
        true
    }

    /// Under `decode_out_of_pages = preempt_recompute` (vLLM), at a step boundary: the pages the
    /// next step's batch needs, made before any admission (`decode_make_room`). Whether it
    /// preempted a request. Under the other values (sglang admits first: 0.5.22
    /// `event_loop_normal_disagg_decode` runs `process_decode_queue` before
    /// `update_running_batch` retracts) room is made at the step's end only.
    #[inline]
    fn decode_room_before_admission(&mut self, n: DecodeIdx) -> bool {
        let node = &self.decode[n.at()];
        if self.cfg.knobs.decode_out_of_pages != DecodeOutOfPages::PreemptRecompute
            || node.busy
            || node.running.len() as u64 <= node.pool.free_pages()
        {
            return false;
        }
        self.decode_make_room(n)
    }

    /// The pages decode preallocates for a `len`-token prompt (before its reserved decode tokens,
    /// which it also wants free): with `decode_lookahead_tokens` (vLLM's speculative lookahead)
    /// the reservation reaches past the prompt, possibly a block more than prefill exposes.
    #[inline]
    pub(crate) fn prealloc_pages(&self, len: u64) -> u64 {
        self.pages_for(len.saturating_add(self.cfg.knobs.decode_lookahead_tokens))
    }

    /// Starts a decode step over node `n`'s running batch, when it is up, idle and has one.
    fn decode_start_step(&mut self, n: DecodeIdx) {
        let node = &self.decode[n.at()];
        if node.life.alive() && !node.busy && !node.running.is_empty() {
            let kv = node.running_kv;
            let c = &self.cfg.cost;
            let cost = c
                .decode_step_base_us
                .saturating_mul(1000)
                .saturating_add((kv / 1000).saturating_mul(c.decode_ns_per_kkv));
            let epoch = node.life.epoch();
            self.dnode(n).busy = true;
            self.after(Duration(cost), Ev::StepDone { node: n, epoch });
        }
    }

    /// The commit of request `r`'s landed KV: the room, coverage and checksum checks and decode's
    /// own pending abort. True when it passed and waits to run; false when it was finished, its
    /// node crashed, or its metadata row is still to come (polled again). Under sglang
    /// (`decode_loads_hold_slots = on`) a passed commit frees the request's metadata slot, as
    /// `pop_transferred` does for every request it removes from the transfer queue (0.5.22
    /// `disaggregation/decode.py`; the room is reset to 0 for the next owner), so a running
    /// request holds no slot; a late row of a later PP stage then lands in a slot that may have a
    /// new owner (sglang #22716).
    fn decode_commit(&mut self, n: DecodeIdx, r: RequestId) -> bool {
        let k = self.cfg.knobs.clone();
        let d = &self.decode[n.at()].reqs[&r];
        // The bootstrap-room check exists only on sglang's concurrent path, where decode learns
        // whose KV landed from the metadata row prefill writes into its slot. Behind vLLM's
        // sequential proxy decode pulls with the transfer parameters the proxy hands it from
        // prefill's answer (vLLM 0.33.0 `distributed/kv_transfer/kv_connector/v1/nixl/
        // pull_scheduler.py` `request_finished`: `remote_block_ids`, `remote_engine_id`,
        // `remote_request_id`; no room, no metadata buffer) and the load is done when its own
        // read completes (`v1/core/sched/scheduler.py` `_update_from_kv_xfer_finished`), so a
        // late or stale row cannot fail it.
        if k.router_mode == RouterMode::Concurrent {
            let row = self.decode[n.at()].meta.row(d.meta_slot.expect("admitted"));
            if row.room == 0 {
                return false; // metadata not written yet: keep polling
            }
            if row.room != self.reqs[r.idx()].room() {
                self.reqs[r.idx()].room_mismatched();
                self.decode_finish(n, r, 500, None);
                return false;
            }
        }
        let reserved = self.pages_for(d.len.saturating_add(k.decode_lookahead_tokens));
        // Pages decode already held from its radix cache were never to be sent.
        let held = d.borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS / self.page_size();
        if d.status_pages + held < reserved {
            match k.decode_commit_check {
                CommitCheck::Coverage => {
                    self.decode_finish(n, r, 500, Some(Mitigation::CoverageCheck));
                    return false;
                }
                CommitCheck::AssertCrash => {
                    // vLLM asserts: the decode worker dies loudly instead of reading stale blocks.
                    self.reqs[r.idx()].caught_by_crash();
                    let restart_after_ms = self.cfg.faults.crash_restart_ms;
                    self.crash(n.node(), restart_after_ms);
                    return false;
                }
                CommitCheck::RoomOnly => {}
            }
        }
        if k.kv_checksum.on() {
            // Prefill digests what it sent; decode digests its whole reserved prompt range.
            let tenant = self.reqs[r.idx()].tenant();
            let (upto, reqs) = (d.chain_upto, &self.reqs);
            let s = summarize(&self.decode[n.at()].pool, &d.pages, 0, d.len, r, tenant, &|w, pos, len| {
                equal_content(w, pos, len, upto, common_chain_tokens(reqs, w.request, r))
            });
            if self.reference.is_some() {
                let (table, len) = (d.pages.clone(), d.len);
                let pool = self.decode[n.at()].id();
                self.differential_read(pool, r, &table, len, upto, &s.tally(), "kv_checksum");
            }
            if !s.clean() {
                self.decode_finish(n, r, 500, Some(Mitigation::KvChecksum));
                return false;
            }
        }
        if let Some(status) = self.decode[n.at()].reqs[&r].pending_abort {
            // Decode's own pending abort (its limit reached: a one-token stub). ≤0.5.16 has no door
            // check (`decode_prealloc_abort_check = finished_only`): the request is preallocated,
            // transferred and reaches the prebuilt step, where `check_finished` promotes the
            // pending abort: the client gets 400, no decode step reads the stub's reservation
            // (sglang 0.5.16 wheel, `disaggregation/decode.py` prebuilt path and
            // `managers/schedule_batch.py` `to_finish`; lifecycle reference §4.1, §11). ≥0.5.21
            // (`aborted_too`) turned it away at the door in the prealloc sweep.
            self.decode_finish(n, r, status, None);
            return false;
        }
        if k.decode_loads_hold_slots == LoadsHoldSlots::On {
            let node = self.dnode(n);
            let d = node.reqs.get_mut(&r).expect("present");
            d.committed = true;
            if let Some(s) = d.meta_slot.take() {
                // The prealloc queue sees the slot at its next tick, as sglang's next
                // `process_decode_queue` does (`pop_preallocated` runs before `pop_transferred`);
                // one always comes: the batch this request joins or waits behind steps.
                node.meta.release(s);
            }
        }
        true
    }

    /// Request `r`, committed, joins the running batch.
    fn decode_promote(&mut self, n: DecodeIdx, r: RequestId) {
        let k = &self.cfg.knobs;
        let block_pool =
            k.decode_radix_cache.on() && k.decode_prefix_rules == crate::config::DecodePrefixRules::BlockPool;
        let first_write = k.decode_first_write;
        let node = self.dnode(n);
        node.transfer.retain(|x| *x != r);
        node.running.push(r);
        let busy = node.busy;
        let d = node.reqs.get_mut(&r).expect("present");
        d.late = busy;
        d.phase = DPhase::Running;
        // Where its first step writes (`decode_first_write`): after the prompt (sglang), or over
        // the prompt's last position (vLLM's `num_computed_tokens = num_tokens - 1`).
        d.seq_len = match first_write {
            DecodeFirstWrite::AfterPrompt => d.len,
            DecodeFirstWrite::LastPromptToken => d.len.saturating_sub(1),
        };
        d.read_upto = 0;
        d.dirty = true;
        node.running_kv += d.seq_len;
        self.phase(r, Lane::Decode(n), Phase::Running);
        if block_pool {
            self.decode_prefix_index_loaded(n, r);
        }
    }

    pub(crate) fn decode_step_done(&mut self, n: DecodeIdx, epoch: u32) {
        if self.decode[n.at()].life.epoch() != epoch {
            return;
        }
        self.dnode(n).busy = false;
        self.decode_make_room(n);
        let pool_id = self.decode[n.at()].id();
        // The batch as the step began (a finish leaves `running` meanwhile), copied into a
        // buffer kept on the world (not the node: explore's state digest shows nodes whole) so a
        // step allocates nothing.
        let mut batch = std::mem::take(&mut self.decode_batch);
        batch.clear();
        batch.extend_from_slice(&self.decode[n.at()].running);
        let (ps, now, check) = (self.page_size(), self.now, self.check_invariants.then_some(n));
        // Differential, coverage and audited runs read every token's context (below); the
        // others take the usual token's path when nothing new is to be read. Known for the step.
        let plain = self.reference.is_none() && self.coverage.is_none() && self.read_audit.is_none();
        // Whether the step's trace record is open with nothing traced since (the usual token's
        // entry then goes straight in): false again after anything that may trace other records.
        let mut in_step = false;
        for &r in &batch {
            // The request is looked up once for its tenant and its client's token.
            let q = &mut self.reqs[r.idx()];
            let tenant = q.tenant();
            let DecodeNode { pool, reqs, running_kv, .. } = &mut self.decode[n.at()];
            let Some(d) = reqs.get_mut(&r) else { continue };
            if d.late {
                // Not in this step's batch (`DReq::late`): its first step is the next one.
                d.late = false;
                continue;
            }
            let from = if d.dirty { 0 } else { d.read_upto };
            let (seq_len, table_pages) = (d.seq_len, d.page_count);
            if plain && from >= seq_len {
                // Nothing new to read (the usual step: the previous step read everything up to
                // its own token, and no write landed since): the summary of an empty read is
                // clean and `check_read` records nothing for it, so neither is built, and the
                // token is written with the request looked up once. Differential, coverage and
                // audited runs take the path below, which does the same with an empty summary.
                // The usual token (`token_usual`, fused here with the fields it needs borrowed
                // apart: no reference oracle to feed, the pool's id known for the step).
                match write_token(pool, d, running_kv, r, tenant, ps, now, None, check) {
                    TokenWrite::Usual { page, slot, generated } => {
                        q.token_out(now);
                        let last = generated >= q.output_tokens();
                        if !in_step {
                            self.tracer.enter_decode_step(now, pool_id);
                            in_step = true;
                        }
                        self.tracer.decode_entry_in_step(DecodeEntry { r, tenant, seq_len, page, slot });
                        if last {
                            self.token_finished(n, r, generated);
                            in_step = false;
                        }
                    }
                    w => {
                        self.token_written_unusual(TokenOf { n, r, tenant, seq_len }, w);
                        in_step = false;
                    }
                }
                continue;
            }
            // The read and its token below may trace other records.
            in_step = false;
            // One lookup of the request for the read below (the map is keyed by request).
            let (d, node) = (&*d, &*pool);
            let (upto, reqs) = (d.chain_upto, &self.reqs);
            let s = summarize(node, &d.pages, from, seq_len, r, tenant, &|w, pos, len| {
                equal_content(w, pos, len, upto, common_chain_tokens(reqs, w.request, r))
            });
            let seen = if self.reference.is_some() { self.decode_differential(n, r, &s.tally()) } else { None };
            if !s.clean() {
                let k = &self.cfg.knobs;
                if k.page_tags.on() {
                    self.decode_finish(n, r, 500, Some(Mitigation::PageTags));
                    continue;
                }
                match k.kv_canary {
                    Canary::Raise => {
                        self.decode_finish(n, r, 500, Some(Mitigation::KvCanary));
                        continue;
                    }
                    Canary::Log => {
                        self.reqs[r.idx()].detected(Mitigation::KvCanary);
                    }
                    Canary::Off => {}
                }
                // A clean read records nothing: its context is built only here.
                let ctx = self.read_ctx(pool_id, r, seq_len, table_pages);
                self.oracle.check_read(&ctx, &s);
            }
            // Coverage is tested first: with it off (every run but a guided campaign's) the
            // request is not looked up on every decode token.
            if let Some(c) = self.coverage.as_mut().filter(|_| self.reqs[r.idx()].late_written()) {
                // Coverage (guided campaigns only): what a late-written request's read found,
                // by class, so a corpus entry whose late write reached a reader is kept even when
                // the read came out clean or as a class seen before (`cover_foreign_write`).
                let classes = [s.uninit, s.cross_request, s.foreign, s.misplaced];
                let bits = classes.iter().enumerate().fold(0u64, |b, (i, n)| b | u64::from(*n > 0) << i);
                c.hit(&[6, bits, u64::from(self.reqs[r.idx()].lagged())]);
            }
            if let Some(audit) = self.read_audit.as_mut() {
                let d = &self.decode[n.at()].reqs[&r];
                let (upto, reqs) = (d.chain_upto, &self.reqs);
                let same = |w: &crate::pool::Writer, pos: u64, len: u64| {
                    equal_content(w, pos, len, upto, common_chain_tokens(reqs, w.request, r))
                };
                let pool = &self.decode[n.at()].pool;
                let a = crate::check::oracle::audit_read(pool, &d.pages, seq_len, r, tenant, &same, self.now);
                audit.push(a);
            }
            self.decode_token(n, r, tenant, seq_len, seen);
        }
        self.decode_batch = batch;
        self.tracer.end_decode_step();
        self.tick_after_step(pool_id);
    }

    /// The token a decode step writes for running request `r` after its read (`seen`: what the
    /// differential oracle's read found): `write_token`, then `token_written`.
    fn decode_token(
        &mut self,
        n: DecodeIdx,
        r: RequestId,
        tenant: crate::types::TenantId,
        seq_len: u64,
        seen: Option<Box<Tally>>,
    ) {
        let (ps, now, check) = (self.page_size(), self.now, self.check_invariants.then_some(n));
        let DecodeNode { pool, reqs, running_kv, .. } = &mut self.decode[n.at()];
        let d = reqs.get_mut(&r).expect("running");
        let w = write_token(pool, d, running_kv, r, tenant, ps, now, seen, check);
        self.token_written(TokenOf { n, r, tenant, seq_len }, w);
    }

    /// What follows a decode token's write (`write_token`): its trace entry (the read, the page
    /// taken at a page boundary and the write, as one entry of the step's `MemOp::DecodeStep`
    /// record), the client's token, any foreign write, and the finish when it was the last token.
    /// The usual token's part is inlined into the step's loop (one call per request-token saved:
    /// callgrind, with `write_token` and `World::mem_decode` inlined too, 5–7% fewer instructions
    /// on the decode-heavy bench scenarios); the others are `token_written_unusual`'s.
    #[inline(always)]
    fn token_written(&mut self, t: TokenOf, w: TokenWrite) {
        match w {
            TokenWrite::Usual { page, slot, generated } => self.token_usual(t, page, slot, generated),
            w => self.token_written_unusual(t, w),
        }
    }

    /// The usual token (`TokenWrite::Usual`): the client's token, the step record's entry, and
    /// the finish when it was the last.
    #[inline(always)]
    fn token_usual(&mut self, t: TokenOf, page: Option<u32>, slot: u64, generated: u64) {
        let TokenOf { n, r, tenant, seq_len } = t;
        let pool_id = self.decode[n.at()].id();
        let last = self.client_token(r, generated);
        self.mem_decode(pool_id, DecodeEntry { r, tenant, seq_len, page, slot });
        if last {
            self.token_finished(n, r, generated);
        }
    }

    /// `token_written` of a stalled token or of a write with a report (a foreign page, a token
    /// beyond the table). Kept out of the step's loop: taking the stalled token here too measured
    /// 1% fewer instructions than handling it in `token_written`.
    #[inline(never)]
    fn token_written_unusual(&mut self, t: TokenOf, w: TokenWrite) {
        let TokenOf { n, r, tenant, seq_len } = t;
        let pool_id = self.decode[n.at()].id();
        let (grown, mut rep, generated) = match w {
            TokenWrite::Stalled => {
                // No page for the new token: the request stalls this step
                // (`decode_out_of_pages = stall`; the other values made room before the step).
                self.mem(MemOp::Read { pool: pool_id, r, tenant, seq_len });
                return;
            }
            TokenWrite::Usual { page, slot, generated } => {
                return self.token_usual(t, page, slot, generated);
            }
            TokenWrite::Written { grown, rep, generated } => (grown, rep, generated),
        };
        let last = self.client_token(r, generated);
        let one = rep.token.or(match rep.slots.as_slice() {
            &[(slot, 1, pos)] => Some((slot, pos)),
            _ => None,
        });
        match one {
            // One slot at position `seq_len` (`Pool::append`'s report), with a foreign write.
            Some((slot, pos)) if pos == seq_len => {
                self.mem_decode(pool_id, DecodeEntry { r, tenant, seq_len, page: grown, slot });
            }
            _ => {
                let slots = rep.pieces();
                rep.slots.clear();
                self.mem(MemOp::Read { pool: pool_id, r, tenant, seq_len });
                if let Some(page) = grown {
                    self.mem(MemOp::Alloc { pool: pool_id, r, pages: vec![Run { first: page, count: 1 }] });
                }
                self.mem(MemOp::Write { pool: pool_id, r, tenant, slots });
            }
        }
        self.note_foreign_writes(pool_id, r, rep, crate::world::DECODE_WRITE);
        if last {
            self.token_finished(n, r, generated);
        }
    }

    /// Request `r`'s token reaches its client (`generated` so far, this one included): whether it
    /// was its last. One lookup of the request for both.
    #[inline(always)]
    fn client_token(&mut self, r: RequestId, generated: u64) -> bool {
        let q = &mut self.reqs[r.idx()];
        q.token_out(self.now);
        generated >= q.output_tokens()
    }

    /// After request `r`'s last token (`generated` in all): its decode leg ends with 200. Once
    /// per request: kept out of the step's loop.
    #[inline(never)]
    fn token_finished(&mut self, n: DecodeIdx, r: RequestId, generated: u64) {
        self.reqs[r.idx()].note_decode_tokens(generated);
        self.decode_finish(n, r, 200, None);
    }

    /// Before a decode step: if the running requests that need a new page this step (their last
    /// page is full) outnumber the free pages, take requests out of the batch until they fit
    /// (`decode_out_of_pages`; lifecycle reference §4.4), after evicting reclaimable cache. `stall`
    /// only evicts: the requests still without a page skip the step. Whether it preempted a
    /// request (`preempt_recompute`).
    fn decode_make_room(&mut self, n: DecodeIdx) -> bool {
        let mode = self.cfg.knobs.decode_out_of_pages;
        let ps = self.page_size();
        let mut preempted = false;
        loop {
            let node = &self.decode[n.at()];
            if node.running.len() as u64 <= node.pool.free_pages() {
                // At most every running request needs a page: room enough, without looking each up.
                return preempted;
            }
            let need = node.step_need(ps);
            if need <= node.pool.free_pages() || node.running.is_empty() {
                return preempted;
            }
            // Reclaimable cache goes before any request: sglang 0.5.22 `schedule_batch.py`
            // `check_decode_mem` → `mem_cache/allocator/base.py` `check_decode_capacity` ("fits
            // after evicting reclaimable cache"; the retract loop converges on the same check),
            // 0.5.16 `check_decode_mem` → `evict_from_tree_cache`. Before the thirty-eighth
            // session the model retracted (or aborted) with unlocked cached blocks on decode
            // (`decode_radix_cache = on`), and a request stayed retracted for good beside them.
            if self.decode_prefix_evict_one(n) {
                continue;
            }
            let node = &self.decode[n.at()];
            match mode {
                DecodeOutOfPages::Stall => return false,
                DecodeOutOfPages::PreemptRecompute => {
                    // vLLM `v1/core/sched/scheduler.py` `schedule`: `preempted_req =
                    // self.running.pop()` until `allocate_slots` succeeds (FCFS policy).
                    let victim = *node.running.last().expect("not empty");
                    let usable = u64::from(node.pool.pages) - 1;
                    if node.running.len() == 1 && self.pages_for(node.reqs[&victim].seq_len + 1) > usable {
                        // Alone and larger than the whole pool: it could never come back. vLLM
                        // refuses such a deployment or request up front
                        // (`check_enough_kv_cache_memory`, the max_model_len check); kvsim
                        // answers it as a capacity failure instead of a hang.
                        self.reqs[victim.idx()].time_out();
                        self.decode_finish(n, victim, 500, None);
                    } else {
                        self.decode_retract(n, victim, false);
                        preempted = true;
                    }
                }
                DecodeOutOfPages::RetractToHost | DecodeOutOfPages::RetractAbort => {
                    if node.running.len() == 1 {
                        // sglang `retract_decode` always keeps one request, and aborts it when it
                        // still does not fit: "Out of memory even after retracting all other
                        // requests" (HTTP 500; a capacity failure, not a bug).
                        let last = node.running[0];
                        self.reqs[last.idx()].time_out();
                        self.decode_finish(n, last, 500, None);
                        return false;
                    }
                    // sglang `_get_decode_retraction_order`: sorted by (output tokens, -prompt
                    // length), most preferred to keep first, stable; the loop pops the last: the
                    // fewest output tokens, the longest prompt on ties, the later batch position
                    // on full ties.
                    let victim = node
                        .running
                        .iter()
                        .enumerate()
                        .min_by_key(|(i, r)| {
                            let d = &node.reqs[*r];
                            (d.generated, std::cmp::Reverse(d.len), std::cmp::Reverse(*i))
                        })
                        .map(|(_, r)| *r)
                        .expect("not empty");
                    if mode == DecodeOutOfPages::RetractAbort {
                        // No retraction backup (`--disaggregation-decode-retraction-backup none`):
                        // "Retracted under decode memory pressure without a KV backup", 503.
                        self.reqs[victim.idx()].time_out();
                        self.decode_finish(n, victim, 503, None);
                    } else if !self.decode_host_backup_fits(n, victim) {
                        // sglang 0.5.22 `retract_decode`: the device KV is freed and no backup
                        // exists, "Retraction host KV pool exhausted. Aborting the request.", 500
                        // (capacity, not a wrong status).
                        self.reqs[victim.idx()].time_out();
                        self.decode_finish(n, victim, 500, None);
                    } else {
                        self.decode_retract(n, victim, true);
                    }
                }
            }
        }
    }

    /// Whether request `r`'s KV fits in decode `n`'s retraction host pool beside the backups it
    /// holds (retracted requests', and a leaked abort's): always under `retraction_host_pool =
    /// unbounded` or with decode's radix cache on (sglang 0.5.22 then copies to CPU tensors); else
    /// the pool holds `max(0.2 × pool, ceil_align(min(context − 1, pool), page))` tokens (the
    /// knob's doc).
    fn decode_host_backup_fits(&self, n: DecodeIdx, r: RequestId) -> bool {
        let k = &self.cfg.knobs;
        if k.retraction_host_pool == RetractionHostPool::Unbounded || k.decode_radix_cache.on() {
            return true;
        }
        let (ps, node) = (self.page_size(), &self.decode[n.at()]);
        let pool_tokens = u64::from(node.pool.pages) * ps;
        let one_request = self.cfg.context_len.saturating_sub(1).min(pool_tokens).div_ceil(ps) * ps;
        let host_pages = (pool_tokens / 5).max(one_request) / ps;
        let held: u64 = node.reqs.values().map(|d| d.host_pages).sum();
        held + node.reqs[&r].page_count <= host_pages
    }

    /// Takes a running request out of the batch and frees its device pages (block-table order,
    /// as a finish frees them). `to_host`: sglang backs the KV up to host memory first and the
    /// request joins the back of the retracted queue; otherwise (vLLM) it is recomputed later and
    /// goes to the front.
    fn decode_retract(&mut self, n: DecodeIdx, r: RequestId, to_host: bool) {
        let node = self.dnode(n);
        node.running.retain(|x| *x != r);
        node.running_kv -= node.reqs[&r].seq_len;
        if to_host {
            node.retracted.push_back(r);
        } else {
            node.retracted.push_front(r);
        }
        let d = node.reqs.get_mut(&r).expect("running");
        let mut pages = std::mem::take(&mut d.pages);
        let borrowed = std::mem::take(&mut d.borrowed);
        d.host_pages = if to_host { d.page_count } else { 0 };
        d.page_count = 0;
        d.phase = DPhase::Retracted;
        d.seen = None;
        d.read_upto = 0;
        d.dirty = true;
        let seq_len = d.seq_len;
        let mut hashed = self.hashed_pages(seq_len);
        if !borrowed.is_empty() {
            // Radix-cached blocks stay with the cache (unlocked); the request comes back with
            // pages of its own.
            let held = borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS / self.page_size();
            pages = crate::pool::slice_pages(&pages, held, pages_in(&pages).saturating_sub(held));
            hashed = hashed.saturating_sub(held);
            self.decode_prefix_unlock(n, &borrowed);
        }
        let bad = self.dnode(n).pool.free_hashed(&pages, Holder::Req(r), hashed);
        let pool = self.decode[n.at()].id();
        self.mem(MemOp::Free { pool, r, pages });
        self.note_bad_frees(pool, r, bad);
        self.phase(r, Lane::Decode(n), Phase::Retracted);
    }

    /// Brings retracted requests back, in queue order, while the head fits (pages for its
    /// sequence and the next token, plus the decode reserve every admitted request keeps): new
    /// pages, its KV written into them — sglang copies the host backup back (`load_kv_cache`, no
    /// recompute, no re-transfer), vLLM recomputes it — and it rejoins the running batch. The
    /// restored KV is the request's own at the same positions, so its next read is clean unless
    /// something else writes into its pages. kvsim simplifies: the restore takes no time, and a
    /// foreign write that landed in its device pages after its last read and before the retraction
    /// is not carried into the copy (every earlier read was checked).
    ///
    /// Under vLLM's decode prefix cache (`decode_radix_cache = on`, `decode_prefix_rules =
    /// block_pool`) a recomputed request first hits the cache like any waiting request: a
    /// preemption freed its blocks with their hashes kept (vLLM 0.34.0 `v1/core/sched/scheduler.py`
    /// `_preempt_request` → `kv_cache_manager.free`; `num_computed_tokens = 0`), the NIXL
    /// connector loads nothing more (`nixl/pull_scheduler.py` `update_state_after_alloc` cleared
    /// `do_remote_prefill` at the first load), so `schedule` takes `get_computed_blocks`' hit,
    /// capped at the sequence less one token, and recomputes only the rest. The request locks the
    /// cached prompt blocks its chain starts with (its own, or another request's under the same
    /// key), reads them as they are, and only the rest is allocated and written; the blocks it
    /// then computes are cached at once (`decode_prefix_index_loaded`), as vLLM caches what it
    /// computes. (kvsim indexes prompt blocks of a prefix chain only: a request's unique blocks
    /// and its generated ones are recomputed.)
    fn decode_resume(&mut self, n: DecodeIdx) {
        let ps = self.page_size();
        let reserve = self.cfg.knobs.reserved_decode_tokens;
        let loads_hold_slots = self.cfg.knobs.decode_loads_hold_slots == LoadsHoldSlots::On;
        while let Some(&r) = self.decode[n.at()].retracted.front() {
            let node = &self.decode[n.at()];
            // A resumed request runs at once: it needs a running slot as well as a request slot.
            if node.running.len() >= node.max_running as usize || node.request_pool_full(loads_hold_slots) {
                return;
            }
            let d = &node.reqs[&r];
            let (seq_len, generated, upto, prompt) = (d.seq_len, d.generated, d.chain_upto, d.len);
            let need = self.pages_for(seq_len + 1);
            let k = &self.cfg.knobs;
            let rehit = k.decode_radix_cache.on()
                && k.decode_prefix_rules == crate::config::DecodePrefixRules::BlockPool
                && d.host_pages == 0;
            // vLLM's hit is capped at the sequence less one token; kvsim's blocks are prompt
            // blocks, so the hit takes the prompt's full blocks only: a chain block the prompt
            // ends inside holds generated tokens past the prompt in this request, other content
            // than the cached block under that key (a 10-minute `vllm-nixl --hardware-faults
            // --prefix-heavy` campaign's fault-free `cross_request_read/decode_prefix_cache`, seed
            // 58,148,412, when the cap was the sequence's).
            // (Counted in the sequence's tokens, the prompt and the generated ones: under
            // `decode_first_write = last_prompt_token` the last of them has no KV yet.)
            let hit_len = prompt + generated.min(1);
            let (borrowed, locked) =
                if rehit { self.decode_prefix_lock(n, r, hit_len) } else { (Vec::new(), Vec::new()) };
            let new = need - pages_in(&locked);
            let want = match self.cfg.knobs.decode_admission {
                DecodeAdmission::PagesAndReserve => {
                    new * ps + reserve.saturating_sub(generated) + self.outstanding_reserve(n)
                }
                // sglang 0.5.16 and 0.5.22 `disaggregation/decode.py` `resume_retracted_reqs`: the
                // request's KV in whole pages plus the reserve (`_prealloc_required_tokens`),
                // against the free tokens less the reserve of every admitted request
                // (`_allocatable_token_budgets(count_retracted=False)`), a reserve that does not
                // shrink as they generate. With the shrinking reserve a request resumed beside a
                // long running one and was retracted again at once (a walkthrough's finding).
                DecodeAdmission::MaxNewTokens => {
                    new * ps + reserve + reserve.saturating_mul(self.admitted(n).count() as u64)
                }
            };
            // As for an admission (sglang's budget adds the tree's evictable size; the allocation
            // evicts the tree cache first: `alloc_token_slots`'s `evict`).
            if !self.decode_has_room(n, want) {
                self.decode_prefix_unlock(n, &borrowed);
                return;
            }
            let Some(fresh) = self.decode_alloc_evicting(n, new, r) else {
                self.decode_prefix_unlock(n, &borrowed);
                return;
            };
            let pool_id = self.decode[n.at()].id();
            let hit = borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS;
            if !borrowed.is_empty() {
                let owner = self.decode_prefix_owner(n, &borrowed);
                self.reqs[r.idx()].note_resumed_prefix(hit, owner);
                self.decode_prefix_commit(n, r, &borrowed, pages_in(&locked));
            }
            let pages = self.decode_table(pool_id, r, locked, fresh);
            let (tenant, now) = (self.reqs[r.idx()].tenant(), self.now);
            let node = self.dnode(n);
            let mut rep = node.pool.write(&pages, hit, seq_len, tenant, r, now, upto);
            node.retracted.pop_front();
            node.running.push(r);
            node.running_kv += seq_len;
            let busy = node.busy;
            let d = node.reqs.get_mut(&r).expect("retracted");
            d.late = busy;
            d.pages = pages;
            d.page_count = need;
            d.host_pages = 0;
            d.phase = DPhase::Running;
            d.read_upto = 0;
            d.dirty = true;
            d.borrowed = borrowed;
            let slots = std::mem::take(&mut rep.slots);
            self.mem(MemOp::Write { pool: pool_id, r, tenant, slots });
            self.note_foreign_writes(pool_id, r, rep, crate::world::DECODE_RESTORE);
            self.phase(r, Lane::Decode(n), Phase::Running);
            if rehit {
                self.decode_prefix_index_loaded(n, r);
            }
        }
    }

    /// The differential check of a decode read: the incremental verdict `new` (positions
    /// `[from, seq_len)`), completed with what earlier reads found, against the reference's reading
    /// of the whole table. Returns the verdict to keep once this step's token is written.
    #[cold]
    #[inline(never)]
    fn decode_differential(&mut self, n: DecodeIdx, r: RequestId, new: &Tally) -> Option<Box<Tally>> {
        let pool = self.decode[n.at()].id();
        let d = &self.decode[n.at()].reqs[&r];
        let mut whole = if d.dirty { Tally::default() } else { d.seen.as_deref().cloned().unwrap_or_default() };
        whole.add(new);
        let (table, seq_len, upto) = (d.pages.clone(), d.seq_len, d.chain_upto);
        self.differential_read(pool, r, &table, seq_len, upto, &whole, "decode_read");
        // The token this step writes is the reader's own at its position.
        whole.ok += 1;
        Some(Box::new(whole))
    }

    /// Ends a request on this node: pages freed at once, slot released, leg answered.
    fn decode_finish(&mut self, n: DecodeIdx, r: RequestId, status: u16, caught: Option<Mitigation>) {
        if let Some(m) = caught {
            self.reqs[r.idx()].caught(m);
        }
        let node = self.dnode(n);
        node.prealloc.retain(|x| *x != r);
        node.transfer.retain(|x| *x != r);
        if let Some(i) = node.running.iter().position(|x| *x == r) {
            node.running.remove(i);
            node.running_kv -= node.reqs[&r].seq_len;
        }
        node.retracted.retain(|x| *x != r);
        self.decode_release(n, r);
        self.leg_result(r, Role::Decode, status);
    }

    fn decode_release(&mut self, n: DecodeIdx, r: RequestId) {
        let Some(d) = self.dnode(n).reqs.remove(&r) else {
            return;
        };
        self.phase(r, Lane::Decode(n), Phase::Left);
        // Freed pages and slots may unblock the head of the prealloc queue.
        self.tick(n.node());
        if let Some(s) = d.meta_slot {
            self.dnode(n).meta.release(s);
        }
        let hashed = self.hashed_pages(d.seq_len);
        let (pages, hashed) = if self.cfg.knobs.decode_radix_cache.on() {
            // Committed KV goes to the decode-side radix cache (sglang `release_kv_cache` →
            // `cache_finished_req`, for a finished or an aborted running request alike); a
            // reservation that never got its KV only gives its locked blocks back.
            let held = d.borrowed.len() as u64 * crate::prefix::BLOCK_TOKENS / self.page_size();
            let pages = if d.phase == DPhase::Running {
                self.decode_prefix_insert(n, r, &d)
            } else {
                self.decode_prefix_unlock(n, &d.borrowed);
                crate::pool::slice_pages(&d.pages, held, pages_in(&d.pages).saturating_sub(held))
            };
            (pages, hashed.saturating_sub(held))
        } else {
            (d.pages, hashed)
        };
        if !pages.is_empty() {
            // Full pages of KV the request computed or loaded carry a prefix hash (under prefix
            // caching); a reservation still waiting for its KV has none.
            let bad = self.dnode(n).pool.free_hashed(&pages, Holder::Req(r), hashed);
            let pool = self.decode[n.at()].id();
            self.mem(MemOp::Free { pool, r, pages });
            self.note_bad_frees(pool, r, bad);
        }
    }

    /// The transfer failed or the request was aborted while waiting for KV.
    fn decode_transfer_failed(&mut self, n: DecodeIdx, r: RequestId, status: u16) {
        match self.cfg.knobs.decode_abort_release {
            DecodeRelease::Immediate => self.decode_finish(n, r, status, None),
            DecodeRelease::Deferred => {
                let node = self.dnode(n);
                node.transfer.retain(|x| *x != r);
                let epoch = node.life.epoch();
                node.reqs.get_mut(&r).expect("in transfer").phase = DPhase::Releasing;
                self.phase(r, Lane::Decode(n), Phase::Releasing);
                self.leg_result(r, Role::Decode, status);
                let lat = self.msg_latency();
                self.after(lat, Ev::AbortAt { r, role: Role::Prefill, status, from_decode: true });
                // sglang 0.5.22 `disaggregation/decode.py` `resolve_deferred_releases` releases
                // anyway after its 30 s fallback. vLLM has no fallback: an aborted request whose
                // load has started keeps its blocks until the read handles finish (vLLM 0.33.0
                // `v1/core/sched/scheduler.py` `finish_requests`: `delay_free_blocks` for a
                // request in WAITING_FOR_REMOTE_KVS, freed in `_update_from_kv_xfer_finished`;
                // `nixl/base_worker.py` `_pop_done_transfers` / `_try_release_xfer_handle` retain a
                // handle and its blocks until the backend has stopped). Here that is prefill's
                // acknowledgement, sent when the request's transfer has drained.
                if self.cfg.knobs.router_mode == RouterMode::Concurrent {
                    let t = Duration::from_ms(self.cfg.knobs.deferred_release_timeout_ms);
                    let node = self.decode[n.at()].id();
                    self.after(t, Ev::Timeout { r, timer: TimeoutKind::DeferredRelease, node, epoch });
                }
            }
        }
    }

    pub(crate) fn decode_abort(&mut self, r: RequestId, status: u16) {
        let n = self.reqs[r.idx()].decode();
        let Some(d) = self.decode[n.at()].reqs.get(&r) else {
            return;
        };
        match d.phase {
            DPhase::Prealloc => {
                // Behind vLLM's proxy an abort before decode scheduled the request notifies
                // prefill as a rejection does: `request_finished` finds `do_remote_prefill` still
                // set and queues an empty read, whose notice frees prefill's blocks (vLLM 0.34.0
                // `nixl/pull_scheduler.py`). Prefill ignores the client's abort of a request it
                // finished (`prefill_abort`), so without it the blocks would wait for the lease.
                self.decode_finish(n, r, status, None);
                self.decode_reject_notifies_prefill(r);
            }
            DPhase::Running => self.decode_finish(n, r, status, None),
            DPhase::Retracted if d.host_pages > 0 && self.cfg.knobs.retracted_abort == RetractedAbort::Leak => {
                // sglang #18701 / #21652: the abort answers the client but nothing discards the
                // request's host backup: it is held forever. (Its metadata slot went at the
                // commit under sglang's `decode_loads_hold_slots = on`: nothing else is held.)
                let node = self.dnode(n);
                node.retracted.retain(|x| *x != r);
                node.reqs.get_mut(&r).expect("present").phase = DPhase::Leaked;
                self.phase(r, Lane::Decode(n), Phase::Leaked);
                self.leg_result(r, Role::Decode, status);
            }
            DPhase::Retracted => self.decode_finish(n, r, status, None),
            DPhase::Transfer if d.landed() && self.cfg.knobs.decode_transferred_abort == TransferredAbort::Leak => {
                let node = self.dnode(n);
                node.transfer.retain(|x| *x != r);
                node.reqs.get_mut(&r).expect("present").phase = DPhase::Leaked;
                self.phase(r, Lane::Decode(n), Phase::Leaked);
                self.leg_result(r, Role::Decode, status);
            }
            // Committed, it is past the transfer queue (sglang's waiting queue): released at once.
            DPhase::Transfer if d.committed => self.decode_finish(n, r, status, None),
            DPhase::Transfer => self.decode_transfer_failed(n, r, status),
            DPhase::Releasing | DPhase::Leaked => {}
        }
    }

    pub(crate) fn decode_abort_ack(&mut self, r: RequestId, n: DecodeIdx, epoch: u32) {
        if self.decode[n.at()].life.epoch() != epoch {
            return;
        }
        if self.decode[n.at()].reqs.get(&r).map(|d| d.phase) == Some(DPhase::Releasing) {
            self.decode_release(n, r);
        }
    }

    /// Whether a decode timer firing at `at` would do nothing (`World::moot` drops it unprocessed):
    /// the node restarted since, the request left it, or it is no longer in the phase the timer
    /// guards (a waiting timer also needs the full wait since the request entered `Transfer`).
    pub(crate) fn decode_timeout_moot(
        &self,
        r: RequestId,
        kind: TimeoutKind,
        n: DecodeIdx,
        epoch: u32,
        at: Instant,
    ) -> bool {
        let node = &self.decode[n.at()];
        if node.life.epoch() != epoch {
            return true;
        }
        let Some(d) = node.reqs.get(&r) else {
            return true;
        };
        match (kind, d.phase) {
            // A request whose KV landed waits for no transfer: sglang's receiver checks the
            // waiting timeout only while the status is not Success (0.5.22 `common/conn.py`
            // `CommonKVReceiver._poll`: a concluded Success is returned before any timeout
            // check), and vLLM times no load out. It may still wait for a running slot.
            (TimeoutKind::Waiting, DPhase::Transfer) => {
                d.landed() || at.since(d.entered) < Duration::from_ms(self.cfg.knobs.waiting_timeout_ms)
            }
            (TimeoutKind::DeferredRelease, DPhase::Releasing) => false,
            _ => true,
        }
    }

    pub(crate) fn decode_timeout(&mut self, r: RequestId, kind: TimeoutKind, n: DecodeIdx, epoch: u32) {
        if self.decode_timeout_moot(r, kind, n, epoch, self.now) {
            return;
        }
        match kind {
            TimeoutKind::Waiting => {
                self.reqs[r.idx()].time_out();
                self.decode_transfer_failed(n, r, 500)
            }
            _ => self.decode_release(n, r),
        }
    }

    pub(crate) fn decode_meta_land(&mut self, r: RequestId, n: DecodeIdx, epoch: u32, slot: u32, room: u64) {
        if self.decode[n.at()].life.epoch() != epoch {
            return;
        }
        if self.coverage.is_some() {
            self.cover_meta_land(r, n, slot);
        }
        self.dnode(n).meta.write(slot, room);
        self.tick(n.node());
    }

    /// Coverage (guided campaigns only): where request `r`'s metadata row lands in slot `slot`
    /// of decode node `n`: a free slot, its own request's, or a slot another request holds now
    /// (with that request's phase), and whether a stale row is still there. A late row that
    /// lands in a reused slot is one step from `room_mismatch`, a step the event's own edges do
    /// not name (the slot count changes no transition before it); a corpus entry that reached
    /// it is worth mutating (`fuzz::guided::Guided::rare_entries`).
    #[cold]
    fn cover_meta_land(&mut self, r: RequestId, n: DecodeIdx, slot: u32) {
        let node = &self.decode[n.at()];
        let class = match node.reqs.iter().find(|(_, d)| d.meta_slot == Some(slot)) {
            None => 0,
            Some((h, _)) if *h == r => 1,
            Some((_, d)) => 2 + d.phase as u64,
        };
        let stale = u64::from(node.meta.row(slot).room != 0);
        if let Some(c) = self.coverage.as_mut() {
            c.hit(&[7, class, stale]);
        }
    }

    pub(crate) fn decode_status(&mut self, r: RequestId, n: DecodeIdx, epoch: u32, ok: bool, pages: u64, prefix: u64) {
        if self.decode[n.at()].life.epoch() != epoch {
            return;
        }
        let Some(d) = self.dnode(n).reqs.get_mut(&r) else {
            return;
        };
        if d.phase != DPhase::Transfer || d.committed {
            return;
        }
        // Failed wins; status only rises.
        if !ok {
            d.status_ok = Some(false);
        } else if d.status_ok.is_none() {
            d.status_ok = Some(true);
            d.status_pages = pages;
            d.shared_tokens = prefix;
        }
        self.tick(n.node());
    }

    /// Heartbeats to a crashed prefill failed: the rooms bound to the crashed incarnation (older
    /// than `epoch`, the prefill's epoch after that crash) are Failed — in the transfer queue
    /// (Failed wins at the next poll) and in the prealloc queue (the prealloc poll sees Failed
    /// and aborts with 500, sglang `disaggregation/decode.py` `pop_preallocatable`). Requests
    /// admitted after a restart are bound to the new incarnation and untouched (lifecycle
    /// reference §4.1–4.2).
    pub(crate) fn decode_prefill_lost(&mut self, n: DecodeIdx, prefill: PrefillIdx, epoch: u32) {
        let bound = |w: &World, r: &RequestId| {
            w.reqs[r.idx()].prefill() == prefill
                && w.decode[n.at()].reqs.get(r).is_some_and(|d| d.prefill_epoch < epoch)
        };
        let waiting: Vec<RequestId> = self.decode[n.at()].prealloc.iter().copied().filter(|r| bound(self, r)).collect();
        for r in waiting {
            self.reqs[r.idx()].touched_by_fault();
            self.decode_finish(n, r, 500, None);
        }
        // Only the rooms whose KV has not landed: sglang 0.5.22 `common/conn.py`
        // `_handle_node_failure` fails the affected rooms whose status is not Success, and a
        // vLLM read that completed is done whatever happens to its source afterwards.
        let landed = |w: &World, r: &RequestId| w.decode[n.at()].reqs.get(r).is_some_and(DReq::landed);
        let rs: Vec<RequestId> =
            self.decode[n.at()].transfer.iter().copied().filter(|r| bound(self, r) && !landed(self, r)).collect();
        let mut any = false;
        for r in rs {
            self.reqs[r.idx()].touched_by_fault();
            if let Some(d) = self.dnode(n).reqs.get_mut(&r) {
                d.status_ok = Some(false);
                any = true;
            }
        }
        // Behind vLLM's sequential proxy an aborted load has no fallback timer: its blocks wait
        // for the read to end, and a read from a dead peer ends failed (vLLM 0.33.0
        // `nixl/base_worker.py` `_pop_done_transfers`: a state other than DONE/PROC goes to
        // `_handle_failed_transfer`, which releases the handle; the scheduler then frees the
        // blocks). The crashed prefill will never acknowledge, and nothing of it lands any more
        // (`land_batch` drops a dead source's batches): release them now.
        if self.cfg.knobs.router_mode == RouterMode::Sequential {
            let releasing: Vec<RequestId> = self.decode[n.at()]
                .reqs
                .iter()
                .filter(|(_, d)| d.phase == DPhase::Releasing)
                .map(|(r, _)| *r)
                .filter(|r| bound(self, r))
                .collect();
            for r in releasing {
                self.reqs[r.idx()].touched_by_fault();
                self.decode_release(n, r);
            }
        }
        if any {
            self.tick(n.node());
        }
    }

    pub(crate) fn decode_crash(&mut self, n: DecodeIdx) {
        let reqs: Vec<RequestId> = self.decode[n.at()].reqs.keys().copied().collect();
        for r in reqs {
            self.reqs[r.idx()].touched_by_fault();
            self.leg_result(r, Role::Decode, 503);
            self.phase(r, Lane::Decode(n), Phase::Left);
        }
        let node = self.dnode(n);
        node.life.crash();
        node.busy = false;
        node.prealloc.clear();
        node.transfer.clear();
        node.running.clear();
        node.running_kv = 0;
        node.retracted.clear();
        node.reqs.clear();
        node.prefix.clear();
        node.pool.reset();
        node.meta = MetaSlots::new(node.meta_slots, node.meta_zero);
        let (pool, pages, page_size) = (node.id(), node.pool.pages, node.pool.page_size);
        self.mem(MemOp::Reset { pool, pages, page_size });
    }
}

/// Whose decode token it is: the node, the request and its tenant, and the position written
/// (the request's `seq_len` before the token).
#[derive(Clone, Copy)]
struct TokenOf {
    n: DecodeIdx,
    r: RequestId,
    tenant: crate::types::TenantId,
    seq_len: u64,
}

/// What writing a running request's next token did (`write_token`).
enum TokenWrite {
    /// Its last page is full and the pool has none to give: the request stalls this step.
    Stalled,
    /// The usual token: written at one slot, in the request's own page (`page`: the one page
    /// taken for it at a page boundary, if any), nothing foreign written; `generated`: the
    /// request's output tokens so far. Nothing to allocate or drop on the common path.
    Usual { page: Option<u32>, slot: u64, generated: u64 },
    /// Any other write: the page taken for it at a page boundary, if any, the pool's whole
    /// report, and the request's output tokens so far.
    Written { grown: Option<u32>, rep: WriteReport, generated: u64 },
}

/// `write_token` of a position inside the prompt (`decode_first_write = last_prompt_token`: a
/// request's first step after its KV landed, or after a resumption before its first token): vLLM
/// computes the prompt's last position again, with the prompt's content (its chain bound), in a
/// page the request already has. Its report is a plain write's: the token takes
/// `token_written`'s unusual path, once per request.
#[cold]
#[inline(never)]
fn rewrite_prompt_token(
    pool: &mut Pool,
    d: &mut DReq,
    running_kv: &mut u64,
    r: RequestId,
    tenant: crate::types::TenantId,
    now: Instant,
    seen: Option<Box<Tally>>,
) -> TokenWrite {
    let seq_len = d.seq_len;
    let rep = pool.write_checked(&d.pages, (seq_len, seq_len + 1), tenant, r, now, d.chain_upto, Some(r));
    d.token_done(running_kv, seen);
    TokenWrite::Written { grown: None, rep, generated: d.generated }
}

/// The pool side of running request `r`'s next token, at position `d.seq_len` of its block
/// table: a page taken at a page boundary, the append (`Pool::append`), and the request's
/// progress (and the running batch's KV, `DecodeNode::running_kv`). Takes the node's pool and
/// the request's state as the caller has them, so a decode step looks each request up once.
/// `check` (`--check invariants`, the node's index) asserts that a page taken here is the
/// writer's: `Pool::append` takes that without looking it up.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write_token(
    pool: &mut Pool,
    d: &mut DReq,
    running_kv: &mut u64,
    r: RequestId,
    tenant: crate::types::TenantId,
    ps: u64,
    now: Instant,
    seen: Option<Box<Tally>>,
    check: Option<DecodeIdx>,
) -> TokenWrite {
    let seq_len = d.seq_len;
    if seq_len < d.len {
        return rewrite_prompt_token(pool, d, running_kv, r, tenant, now, seen);
    }
    let mut grown = None;
    if seq_len == d.page_count * ps {
        let Some(page) = pool.alloc_page(Holder::Req(r)) else {
            return TokenWrite::Stalled;
        };
        if let Some(n) = check {
            assert_eq!(pool.holder_of(page), Some(Holder::Req(r)), "decode-{n} at {now}: the grown page's holder");
        }
        push_run(&mut d.pages, Run { first: page, count: 1 });
        d.page_count += 1;
        grown = Some(page);
    }
    if grown.is_none() {
        if let Some(slot) = pool.extend_open(&d.pages, d.page_count, seq_len, tenant, r) {
            d.token_done(running_kv, seen);
            return TokenWrite::Usual { page: None, slot, generated: d.generated };
        }
    }
    let known = Known { table_pages: d.page_count, fresh: grown.is_some() };
    let rep = pool.append(&d.pages, known, seq_len, tenant, r, now);
    d.token_done(running_kv, seen);
    match rep.token {
        Some((slot, pos)) if pos == seq_len && rep.foreign.is_empty() && rep.slots.is_empty() => {
            TokenWrite::Usual { page: grown, slot, generated: d.generated }
        }
        _ => TokenWrite::Written { grown, rep, generated: d.generated },
    }
}
