//! The transfer engine: page-granular copies from a prefill pool into the first pages of
//! decode's reservation, split into synchronous batches (`max_transfer_batch_pages`), with a
//! latency + bandwidth cost: pushed by prefill, one queue and worker per destination decode node
//! (sglang), or pulled by decode, each request's read issued at once beside the others in flight
//! (vLLM). A batch that outlives the sync timeout
//! returns failed while its writes continue (`returns_while_writing`) or is quiesced; data lands
//! (becomes visible) after an optional visibility lag. Source pages are read when the data lands,
//! so a source page freed and reused meanwhile carries its new owner's KV. After an abort, the
//! job's queued batches are skipped; only the batch being written keeps writing, and when it ends
//! the job ends (the last chunk's end tells decode Failed: sglang 0.5.22 wheel,
//! `disaggregation/mooncake/conn.py` `transfer_worker` skips chunks of a Failed room,
//! `common/conn.py` `conclude_transfer` turns the last chunk's Success into Failed; reference §3).
//! A failed batch marks the room Failed too, with the same effect on the request's queued chunks.
//! Skipped batches take no time: the batches queued behind them move up
//! (`World::transfer_pull_forward`).
//! Behind vLLM's proxy decode pulls (its worker issues the reads), so a dead decode reads nothing
//! more (`transfer_reader_died`).

use crate::config::{PrefillRelease, RouterMode, TimeoutSemantics};
use crate::event::Ev;
use crate::pool::{pages_in, PageCursor, Run};
use crate::trace::MemOp;
use crate::types::{DecodeIdx, Duration, Instant, JobId, PrefillIdx, RequestId};
use crate::world::World;

/// One synchronous batch of a job. Its source and destination pages are ranges of the job's
/// page lists (`TransferJob::batch_src`, `batch_dst`): a job's batches share two lists, so a job
/// of hundreds of batches (one-token pages sent four at a time) allocates two, not two per batch.
#[derive(Clone)]
pub struct Batch {
    /// `[start, end)` of `TransferJob::src` and of `TransferJob::dst`.
    src: (u32, u32),
    dst: (u32, u32),
    /// When the worker starts it and when its call returns (`None`: never scheduled, the job
    /// failed before it).
    pub span: Option<(Instant, Instant)>,
    /// A land event was scheduled for it.
    pub lands: bool,
    /// Skipped after an abort: queued when the request was aborted; its land does nothing.
    pub skipped: bool,
    /// A lagged batch's data in flight: its source pages' contents as read when its wire time
    /// ended (`transfer_read`), landed as they were then (`land_batch`).
    pub wire: Option<Box<Contents>>,
    /// When its `TransferRead` and `TransferLand` are due (`None`: not scheduled). A batch moved
    /// earlier by `transfer_pull_forward` gets new events; the ones queued for its old times find
    /// these changed and do nothing. Not in the state digest's image (the queue holds the events).
    read_at: Option<Instant>,
    land_at: Option<Instant>,
}

impl Batch {
    /// Whether reading its source at `now` comes after its call returned: the call timed out and
    /// the batch kept writing (`returns_while_writing`).
    fn outlives_its_call(&self, now: Instant) -> bool {
        self.span.is_some_and(|(_, ret)| now > ret)
    }
}

/// Page contents as `Pool::page_contents` gives them and `Pool::land_copy` takes them.
pub type Contents = Vec<(u64, u64, Option<crate::pool::Writer>)>;

/// The part `[start, end)` of a job's page list that is one batch's.
#[inline]
fn part(list: &[Run], (start, end): (u32, u32)) -> &[Run] {
    &list[start as usize..end as usize]
}

/// A batch as its job shows it: the image `derive(Debug)` gave when a batch held its own page
/// lists and before `wire` existed, plus `wire` while data is in flight, so `World::state_digest`
/// (which hashes it) is what it was for every run without a lag.
struct BatchImage<'a>(&'a TransferJob, usize);

impl std::fmt::Debug for BatchImage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (job, b) = (self.0, self.1);
        let batch = &job.batches[b];
        let mut d = f.debug_struct("Batch");
        d.field("src", &job.batch_src(b))
            .field("dst", &job.batch_dst(b))
            .field("span", &batch.span)
            .field("lands", &batch.lands)
            .field("skipped", &batch.skipped);
        if let Some(w) = &batch.wire {
            d.field("wire", w);
        }
        d.finish()
    }
}

/// A job's batches as the list `derive(Debug)` of a `Vec<Batch>` showed.
struct BatchesImage<'a>(&'a TransferJob);

impl std::fmt::Debug for BatchesImage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..self.0.batches.len()).map(|b| BatchImage(self.0, b))).finish()
    }
}

/// A transfer job. Its page lists (`batches`, `lenders`) are what costs memory; they are
/// dropped once nothing can read them any more (`retire`), so a finished job keeps only its
/// identifying scalars (memory bounded by jobs in flight, not by every request ever seen).
///
/// Its fields are private: prefill builds a job with [`TransferJob::new`] and hands it to
/// `transfer_submit`; from then on only this module writes it. Everyone else (the coverage
/// probe, tests) reads it through the accessors below.
#[derive(Clone)]
pub struct TransferJob {
    r: RequestId,
    prefill: PrefillIdx,
    prefill_epoch: u32,
    decode: DecodeIdx,
    decode_epoch: u32,
    batches: Vec<Batch>,
    /// The batches' source and destination pages, batch after batch (`Batch::src`, `dst`).
    src: Vec<Run>,
    dst: Vec<Run>,
    last: bool,
    meta: Option<(u32, u64)>,
    /// Pages the sender reports for the request (its `num_pages`).
    sender_pages: u64,
    /// Leading tokens whose KV is a shared prefix from prefill's radix cache.
    prefix_tokens: u64,
    /// The requests whose cached prefix blocks this request borrowed (their cache entries).
    lenders: Vec<RequestId>,
    /// The request was aborted while the job was queued or in flight.
    aborted: bool,
    /// The job has ended (its first `TransferDone` was handled; a later one is stale).
    done: bool,
    /// `prefill_abort_release = ack_after_drain`: decode's abort is acknowledged when the last
    /// such job of the request ends (the source pages were freed at the abort already). In the
    /// state digest only when set, so every other run's digests are what they were.
    ack_on_end: bool,
    /// Land events scheduled for it and not yet handled: while any is pending its batches are
    /// still read (`transfer_land`). Report-free bookkeeping, left out of `Debug` (the state
    /// digest), since the pending lands themselves are digested with the queue.
    lands_left: u32,
    /// The outcome its scheduled `TransferDone` carries (a job moved earlier by
    /// `transfer_pull_forward` gets another with the same). Left out of `Debug` like `lands_left`.
    done_ok: bool,
}

/// The image `derive(Debug)` gave before `lands_left` existed, so `World::state_digest` (which
/// hashes it) and exploration's pruning are what they were.
impl std::fmt::Debug for TransferJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("TransferJob");
        d.field("r", &self.r)
            .field("prefill", &self.prefill)
            .field("prefill_epoch", &self.prefill_epoch)
            .field("decode", &self.decode)
            .field("decode_epoch", &self.decode_epoch)
            .field("batches", &BatchesImage(self))
            .field("last", &self.last)
            .field("meta", &self.meta)
            .field("sender_pages", &self.sender_pages)
            .field("prefix_tokens", &self.prefix_tokens)
            .field("lenders", &self.lenders)
            .field("aborted", &self.aborted)
            .field("done", &self.done);
        if self.ack_on_end {
            d.field("ack_on_end", &true);
        }
        d.finish()
    }
}

impl TransferJob {
    /// A job for request `r` sending from `prefill` (node, epoch at submission) to `decode`
    /// (node, epoch of its reservation). `meta` is the metadata row (slot, room) the last chunk
    /// writes, so a job with `meta` is the request's last; `sender_pages` is the sender's
    /// `num_pages`, `prefix_tokens` the leading tokens from prefill's radix cache and `lenders`
    /// the requests whose cached prefix blocks the request borrowed. Its batches are added by
    /// `transfer_submit`.
    pub(crate) fn new(
        r: RequestId,
        (prefill, prefill_epoch): (PrefillIdx, u32),
        (decode, decode_epoch): (DecodeIdx, u32),
        meta: Option<(u32, u64)>,
        sender_pages: u64,
        prefix_tokens: u64,
        lenders: Vec<RequestId>,
    ) -> Self {
        TransferJob {
            r,
            prefill,
            prefill_epoch,
            decode,
            decode_epoch,
            batches: Vec::new(),
            src: Vec::new(),
            dst: Vec::new(),
            last: meta.is_some(),
            meta,
            sender_pages,
            prefix_tokens,
            lenders,
            aborted: false,
            ack_on_end: false,
            done: false,
            lands_left: 0,
            done_ok: false,
        }
    }

    /// One of its batches failed (a sync timeout or a transfer error) and was not skipped: the
    /// failed batch is the last one scheduled (`transfer_schedule` stops at it), and a batch
    /// still queued at an abort was skipped and never ran.
    fn failed_a_batch(&self) -> bool {
        !self.done_ok && self.batches.iter().rev().find(|b| b.span.is_some()).is_some_and(|b| !b.skipped)
    }

    /// The request whose KV the job sends.
    #[inline]
    pub fn request(&self) -> RequestId {
        self.r
    }

    /// The sending prefill node.
    #[inline]
    pub fn prefill(&self) -> PrefillIdx {
        self.prefill
    }

    /// The receiving decode node.
    #[inline]
    pub fn decode(&self) -> DecodeIdx {
        self.decode
    }

    /// Its batches in send order (empty once the job is retired).
    #[inline]
    pub fn batches(&self) -> &[Batch] {
        &self.batches
    }

    /// Batch `b`'s source pages.
    #[inline]
    pub fn batch_src(&self, b: usize) -> &[Run] {
        part(&self.src, self.batches[b].src)
    }

    /// Batch `b`'s destination pages.
    #[inline]
    pub fn batch_dst(&self, b: usize) -> &[Run] {
        part(&self.dst, self.batches[b].dst)
    }

    /// Adds a batch of the pages `take` appends to the job's source and destination lists.
    fn push_batch(&mut self, take: impl FnOnce(&mut Vec<Run>, &mut Vec<Run>)) {
        let (s0, d0) = (self.src.len() as u32, self.dst.len() as u32);
        take(&mut self.src, &mut self.dst);
        let (src, dst) = ((s0, self.src.len() as u32), (d0, self.dst.len() as u32));
        self.batches.push(Batch {
            src,
            dst,
            span: None,
            lands: false,
            skipped: false,
            wire: None,
            read_at: None,
            land_at: None,
        });
    }

    /// It carries the request's last chunk (and the metadata row).
    #[inline]
    pub fn is_last(&self) -> bool {
        self.last
    }

    /// Pages the sender reports for the request (its `num_pages`).
    #[inline]
    pub fn sender_pages(&self) -> u64 {
        self.sender_pages
    }

    /// The request was aborted while the job was queued or in flight.
    #[inline]
    pub fn is_aborted(&self) -> bool {
        self.aborted
    }

    /// The job has ended (its first `TransferDone` was handled).
    #[inline]
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// Transfer jobs by id (`Ev::TransferLand`/`TransferDone` carry it), in flight only: a job
/// leaves once nothing can read it any more (`World::transfer_retire`: its `TransferDone`s and
/// lands were all handled), so memory is bounded by the jobs in flight, not by every request
/// ever seen (BENCHMARKS.md, issue 14). Ids are handed out in order and never reused.
#[derive(Clone, Default)]
pub struct Jobs {
    live: Window<JobEntry>,
    next: u32,
    /// Retired jobs' page and batch lists, emptied, for the next jobs (a job's two page lists
    /// and its batch list were fresh allocations: about a sixth of a fuzzer-sized run's). No
    /// state: never read but to be refilled, and not in `Debug` (the state digest).
    spare_runs: Vec<Vec<Run>>,
    spare_batches: Vec<Vec<Batch>>,
}

/// The jobs held, by id: one slot per id from the oldest held job's (`base`) to the last handed
/// out, an emptied slot for each job that left in between. Ids are handed out in order and a job
/// leaves once its events are handled, so the window spans the jobs submitted during the
/// longest-lived held job's life (a job held 300 s at 8 requests a second: about 2,400 slots).
/// It was a `BTreeMap`, whose insert and remove cost about 180 and 420 instructions a job (2% of
/// a fuzzer-sized run, callgrind); a slot here is an index. Iteration is in id order,
/// as the map's was (`transfer_reader_died`, `transfer_pull_forward`, the state digest).
#[derive(Clone)]
struct Window<T> {
    /// The id of `slots[0]`.
    base: u32,
    slots: std::collections::VecDeque<Option<T>>,
    /// How many slots are held.
    held: usize,
}

impl<T> Default for Window<T> {
    fn default() -> Self {
        Window { base: 0, slots: Default::default(), held: 0 }
    }
}

impl<T> Window<T> {
    #[inline]
    fn slot(&self, id: JobId) -> Option<usize> {
        id.0.checked_sub(self.base).map(|i| i as usize).filter(|&i| i < self.slots.len())
    }

    #[inline]
    fn get(&self, id: JobId) -> Option<&T> {
        self.slot(id).and_then(|i| self.slots[i].as_ref())
    }

    #[inline]
    fn get_mut(&mut self, id: JobId) -> Option<&mut T> {
        self.slot(id).and_then(|i| self.slots[i].as_mut())
    }

    /// Holds the job with the next id (`base` plus the window's length).
    /// (Once nothing is held, `remove` has emptied the window and moved `base` to the next id.)
    fn push(&mut self, id: JobId, e: T) {
        debug_assert_eq!(u64::from(self.base) + self.slots.len() as u64, u64::from(id.0), "ids in order");
        self.slots.push_back(Some(e));
        self.held += 1;
    }

    /// The job leaves; the window's front moves past the slots emptied before it.
    fn remove(&mut self, id: JobId) -> Option<T> {
        let i = self.slot(id)?;
        let e = self.slots[i].take()?;
        self.held -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(e)
    }

    fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().flatten()
    }

    /// `(id, job)` in id order.
    fn iter(&self) -> impl Iterator<Item = (JobId, &T)> {
        let base = self.base;
        self.slots.iter().enumerate().filter_map(move |(i, e)| e.as_ref().map(|e| (JobId(base + i as u32), e)))
    }

    fn len(&self) -> usize {
        self.held
    }
}

/// At most this many spare lists of each kind are kept (about the jobs in flight at once).
const SPARE_LISTS: usize = 8;

#[derive(Clone)]
struct JobEntry {
    job: TransferJob,
    /// `TransferDone` events scheduled for it and not yet handled (one at submit, one more per
    /// abort): a stale one still reads `done`, so the job stays until it is handled.
    dones_left: u32,
}

impl Jobs {
    /// An empty page list, a retired job's when there is one.
    pub(crate) fn spare_run_list(&mut self) -> Vec<Run> {
        self.spare_runs.pop().unwrap_or_default()
    }

    /// Keeps `list`'s buffer (emptied) for `spare_run_list`.
    pub(crate) fn give_back_runs(&mut self, mut list: Vec<Run>) {
        if list.capacity() > 0 && self.spare_runs.len() < SPARE_LISTS {
            list.clear();
            self.spare_runs.push(list);
        }
    }

    /// An empty batch list, a retired job's when there is one.
    fn spare_batch_list(&mut self) -> Vec<Batch> {
        self.spare_batches.pop().unwrap_or_default()
    }

    /// Keeps `list`'s buffer (emptied) for `spare_batch_list`.
    fn give_back_batches(&mut self, mut list: Vec<Batch>) {
        if list.capacity() > 0 && self.spare_batches.len() < SPARE_LISTS {
            list.clear();
            self.spare_batches.push(list);
        }
    }

    /// Keeps a retired job's lists (emptied) for the next jobs.
    fn give_back_lists(&mut self, job: &mut TransferJob) {
        self.give_back_runs(std::mem::take(&mut job.src));
        self.give_back_runs(std::mem::take(&mut job.dst));
        self.give_back_batches(std::mem::take(&mut job.batches));
    }

    /// How many jobs were ever submitted (the next job's id).
    pub fn len(&self) -> usize {
        self.next as usize
    }

    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    /// Every id handed out so far, in order (held or left: `get` tells which).
    pub fn ids(&self) -> impl Iterator<Item = JobId> {
        (0..self.next).map(JobId)
    }

    /// The last id handed out (`None` before the first job).
    pub fn last_id(&self) -> Option<JobId> {
        self.next.checked_sub(1).map(JobId)
    }

    /// The job, while it is in flight (`None` once it has left).
    pub fn get(&self, id: JobId) -> Option<&TransferJob> {
        self.live.get(id).map(|e| &e.job)
    }

    pub fn get_mut(&mut self, id: JobId) -> Option<&mut TransferJob> {
        self.live.get_mut(id).map(|e| &mut e.job)
    }

    /// The jobs still held, in id order (every job ever submitted under exploration, which
    /// retires none).
    pub fn iter(&self) -> impl Iterator<Item = &TransferJob> {
        self.live.values().map(|e| &e.job)
    }

    /// `iter`, mutably.
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut TransferJob> {
        self.live.values_mut().map(|e| &mut e.job)
    }

    /// How many jobs are held now.
    pub fn held(&self) -> usize {
        self.live.len()
    }

    /// The jobs held for request `r` (in flight: at most a few).
    pub fn any_for(&self, r: RequestId) -> bool {
        self.live.values().any(|e| e.job.r == r)
    }

    /// The id the next `push` hands out.
    fn next_id(&self) -> JobId {
        JobId(self.next)
    }

    fn push(&mut self, job: TransferJob) -> JobId {
        let id = self.next_id();
        self.next += 1;
        self.live.push(id, JobEntry { job, dones_left: 1 });
        id
    }

    fn entry(&mut self, id: JobId) -> &mut JobEntry {
        self.live.get_mut(id).unwrap_or_else(|| panic!("transfer job {id} has left (an event outlived it)"))
    }
}

impl std::ops::Index<JobId> for Jobs {
    type Output = TransferJob;
    fn index(&self, id: JobId) -> &TransferJob {
        self.get(id).unwrap_or_else(|| panic!("transfer job {id} has left (an event outlived it)"))
    }
}

impl std::ops::IndexMut<JobId> for Jobs {
    fn index_mut(&mut self, id: JobId) -> &mut TransferJob {
        &mut self.entry(id).job
    }
}

/// A list of the jobs held, as `Vec<TransferJob>`'s `Debug` printed them, so
/// `World::state_digest` (exploration, which retires no job) is what it was.
impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The name of a lagged batch's data in flight (`MemOp::Send`/`MemOp::Land`): the job in the
/// high 32 bits, the batch in the low.
fn wire_id(job: JobId, batch: u32) -> u64 {
    (u64::from(job.0) << 32) | u64::from(batch)
}

/// A batch's source and destination runs paired page for page, as (src, dst, count) runs (walked
/// run by run, not page by page; adjacent pairs merged): the pages of a `MemOp::Copy`.
/// (Into `pairs`, cleared first: `land_batch` reuses one buffer.)
fn page_pairs_into(src: &[Run], dst: &[Run], pairs: &mut Vec<(u32, u32, u32)>) {
    pairs.clear();
    let (mut si, mut di, mut so, mut dof) = (0usize, 0usize, 0u32, 0u32);
    while si < src.len() && di < dst.len() {
        let (s, d) = (src[si], dst[di]);
        let n = (s.count - so).min(d.count - dof);
        let (sp, dp) = (s.first + so, d.first + dof);
        if n > 0 {
            match pairs.last_mut() {
                Some((ls, ld, c)) if *ls + *c == sp && *ld + *c == dp => *c += n,
                _ => pairs.push((sp, dp, n)),
            }
        }
        so += n;
        dof += n;
        if so == s.count {
            si += 1;
            so = 0;
        }
        if dof == d.count {
            di += 1;
            dof = 0;
        }
    }
}

/// Buffers `land_batch` reuses from batch to batch (on the world: a transfer-heavy run lands
/// hundreds of batches, and each used to allocate its source contents and its trace record's page
/// list and free them again). Contents are cleared before each use; nothing is read across uses.
#[derive(Default)]
pub(crate) struct LandScratch {
    contents: Vec<(u64, u64, Option<crate::pool::Writer>)>,
    pairs: Vec<(u32, u32, u32)>,
    runs: Vec<Run>,
}

/// The identifying fields of a job, copied out so handlers need not clone its page lists.
struct JobIds {
    r: RequestId,
    prefill_epoch: u32,
    decode_epoch: u32,
    prefill: PrefillIdx,
    decode: DecodeIdx,
}

impl World {
    /// Queues a job on the prefill node's transfer worker and schedules its batches.
    pub(crate) fn transfer_submit(&mut self, mut job: TransferJob, src: Vec<Run>, dst: Vec<Run>) {
        let n = pages_in(&src);
        // Batches are sglang's (the Mooncake sender's `SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES`).
        // A NIXL read is one transfer of every block (vLLM 0.34.0 `nixl/pull_worker.py`
        // `_read_blocks`: one `make_prepped_xfer` and `transfer(handle)` per remote rank), so a
        // pull is one batch whatever the knob says.
        let most = if self.decode_pulls() { 0 } else { self.cfg.knobs.max_transfer_batch_pages };
        let per = if most == 0 { n.max(1) } else { most };
        // A job always has at least one batch: an empty last chunk still carries the metadata row.
        let batches = n.div_ceil(per).max(1) as usize;
        debug_assert!(job.batches.is_empty() && job.src.is_empty() && job.dst.is_empty());
        job.batches = self.jobs.spare_batch_list();
        job.batches.reserve_exact(batches);
        // The cursor below drops empty runs and cuts `dst` to `n` pages: lists it would copy
        // unchanged are taken as they are.
        let no_empty = |runs: &[Run]| runs.iter().all(|r| r.count > 0);
        if n <= per && pages_in(&dst) == n && no_empty(&src) && no_empty(&dst) {
            // One batch of the whole lists (the usual, unbatched job): they are its page lists
            // as they are, with no slice to copy.
            job.push_batch(|s, d| {
                *s = src;
                *d = dst;
            });
            return self.transfer_schedule(job);
        }
        // Each batch's cut splits at most one run of each list: the lists' room, reserved once
        // (they grew by doubling, batch by batch: 72,288 times over the 6,411 batched jobs of the
        // swarm row's 500 runs).
        job.src = self.jobs.spare_run_list();
        job.dst = self.jobs.spare_run_list();
        job.src.reserve_exact(src.len() + batches);
        job.dst.reserve_exact(dst.len() + batches);
        let (mut src_at, mut dst_at) = (PageCursor::new(&src), PageCursor::new(&dst));
        let mut off = 0;
        loop {
            let c = per.min(n - off);
            job.push_batch(|s, d| {
                src_at.take_into(c, s);
                dst_at.take_into(c, d);
            });
            off += c;
            if off >= n {
                break;
            }
        }
        self.jobs.give_back_runs(src);
        self.jobs.give_back_runs(dst);
        self.transfer_schedule(job);
    }

    /// Schedules a submitted job's batches on its prefill node's transfer worker, with their
    /// faults, lands and the job's end, and files the job.
    fn transfer_schedule(&mut self, mut job: TransferJob) {
        let semantics = self.cfg.knobs.transfer_timeout_semantics;
        let id = self.jobs.next_id(); // the id `push` hands out below
        let r = job.r;
        let node = job.prefill.at();
        let reader = &self.decode[job.decode.at()];
        if self.decode_pulls() && !(reader.alive() && reader.epoch() == job.decode_epoch) {
            // Decode pulls, and the incarnation that would read is gone: no read is ever issued
            // (`transfer_reader_died`); the job ends failed at once.
            for b in job.batches.iter_mut() {
                b.skipped = true;
            }
            self.at(self.now, Ev::TransferDone { job: id, ok: false });
            if let Some(pr) = self.prefill[node].req_mut(r) {
                pr.job_submitted(id, 0);
            }
            let pushed = self.jobs.push(job);
            debug_assert_eq!(pushed, id);
            return;
        }
        // Under push the job queues on the prefill's transfer queue to its decode node (sglang's
        // Mooncake `transfer_worker` takes chunks from its queue one by one; `xfer_free_at`).
        // Behind vLLM's proxy decode issues each request's read when it is scheduled,
        // asynchronously, with others in flight
        // (vLLM 0.33.0 `distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py`
        // `start_load_kv` -> `_read_blocks`: `make_prepped_xfer`, then `transfer(handle)`, "Begin
        // async xfer", completion polled in later steps): the read starts now, behind nothing.
        // (Sharing of the link's bandwidth between reads in flight is not modelled.)
        let pulls = self.decode_pulls();
        let mut t = if pulls { self.now } else { self.now.max(self.prefill[node].xfer_free_at(job.decode)) };
        // The sync timeout is sglang's (Mooncake's `batch_transfer_sync` returns on its wall-clock
        // timeout). A NIXL read has none: vLLM 0.34.0 `nixl/base_worker.py` `_pop_done_transfers`
        // only asks each handle's state (done, in progress, or an error), the one NIXL timer is
        // prefill's send lease (`_reap_expired_send_leases`), and the scheduler keeps a load
        // waiting until it is reported received or failed (`v1/core/sched/scheduler.py`
        // `_handle_blocked_waiting_request`). A slow read is slow, not failed.
        let timeout =
            if pulls { Duration(u64::MAX) } else { Duration::from_ms(self.cfg.knobs.transfer_sync_timeout_ms) };
        let bytes_per_page = self.page_size().saturating_mul(self.cfg.cost.kv_bytes_per_token);
        // Prefill pushes into a decode incarnation that is already gone (it died after sending
        // its destination): the first write fails like any failed batch (the room goes Failed and
        // its later chunks are dropped, `job_done`). See `transfer_reader_died`.
        let dst_gone = !(reader.alive() && reader.epoch() == job.decode_epoch);
        let mut ok = true;
        let mut lands = 0u32;
        for (b, batch) in job.batches.iter_mut().enumerate() {
            let mut f = self.batch_faults(r, t);
            f.fail |= dst_gone;
            let bytes = u128::from(pages_in(part(&job.src, batch.src))) * u128::from(bytes_per_page);
            let wire_ns = (bytes * 1000 / u128::from(self.cfg.cost.transfer_bytes_per_us.max(1)))
                .min(u128::from(u64::MAX)) as u64;
            let d = Duration(
                self.cfg
                    .cost
                    .transfer_latency_us
                    .saturating_mul(1000)
                    .saturating_add(wire_ns)
                    .saturating_add(f.extra_delay.0),
            );
            let (ret, land) = if d > timeout {
                ok = false;
                // The request fails by its own configured timer (`transfer_sync_timeout_ms`), as
                // a bootstrap or waiting timeout fails it: a 5xx then is capacity or
                // configuration, not a wrong status (`wrong_status`; it read
                // `valid_request_failed` on the catalogue's own "fixed" sync-timeout run).
                self.reqs[r.idx()].time_out();
                let land = match semantics {
                    TimeoutSemantics::ReturnsWhileWriting => Some(t + d + f.visibility_lag),
                    TimeoutSemantics::Quiesced => None,
                };
                (t + timeout, land)
            } else if f.fail {
                ok = false;
                (t + d, None)
            } else {
                (t + d, Some(t + d + f.visibility_lag))
            };
            if let Some(at) = land {
                lands += 1;
                batch.lands = true;
                if f.visibility_lag.0 > 0 {
                    // The source is read while the write runs (RDMA reads it before the
                    // completion); only its visibility at decode lags.
                    self.at(t + d, Ev::TransferRead { job: id, batch: b as u32 });
                    batch.read_at = Some(t + d);
                }
                self.at(at, Ev::TransferLand { job: id, batch: b as u32 });
                batch.land_at = Some(at);
            }
            batch.span = Some((t, ret));
            t = ret;
            if !ok {
                break;
            }
        }
        job.lands_left = lands;
        job.done_ok = ok;
        if !pulls {
            self.prefill[node].book_transfer_worker(job.decode, t);
        }
        self.at(t, Ev::TransferDone { job: id, ok });
        if let Some(pr) = self.prefill[node].req_mut(r) {
            pr.job_submitted(id, lands);
        }
        let pushed = self.jobs.push(job);
        debug_assert_eq!(pushed, id);
    }

    /// The request was aborted on prefill: each of its unfinished jobs skips the batches still
    /// queued (their lands no longer count), and ends when the batch being written ends — now, if
    /// none is. The worker's queue then moves up (`transfer_pull_forward`).
    pub(crate) fn transfer_abort(&mut self, n: PrefillIdx, r: RequestId) {
        self.transfer_skip_queued(n, r, false);
    }

    /// `prefill_abort_release = ack_after_drain`, and decode's abort of a vLLM read still running
    /// (`prefill_abort`): marks the request's jobs on `n` that have not ended, so that decode's
    /// abort is acknowledged when the last of them ends (`ack_when_drained`). False when none is
    /// left: the caller acknowledges now.
    pub(crate) fn transfer_ack_on_end(&mut self, n: PrefillIdx, r: RequestId) -> bool {
        let epoch = self.prefill[n.at()].epoch();
        let mut any = false;
        for j in self.jobs.iter_mut() {
            if j.r == r && j.prefill == n && j.prefill_epoch == epoch && !j.done {
                j.ack_on_end = true;
                any = true;
            }
        }
        any
    }

    /// A job marked by `transfer_ack_on_end` ended: when it was the request's last on `n`, the
    /// transfer worker has drained and prefill acknowledges decode's abort (sglang 0.5.22 wheel,
    /// `disaggregation/common/conn.py` `_maybe_ack_drained_abort`, called by
    /// `mooncake/conn.py` `transfer_worker` when the room's outstanding chunks reach zero).
    fn ack_when_drained(&mut self, n: PrefillIdx, r: RequestId) {
        if self.jobs.iter().any(|o| o.r == r && o.prefill == n && o.ack_on_end && !o.done) {
            return;
        }
        self.prefill_ack_abort(r);
    }

    /// Skips the request's queued batches (`transfer_abort`). `from_now`: a batch that starts at
    /// this very instant is skipped too — after a failed chunk, whose status the worker set before
    /// it dequeued the next one; an abort (another thread) leaves a batch starting now writing.
    fn transfer_skip_queued(&mut self, n: PrefillIdx, r: RequestId, from_now: bool) {
        let Some(pr) = self.prefill[n.at()].reqs().get(&r) else {
            return;
        };
        for id in pr.jobs().to_vec() {
            // Between chunks the worker checks the room's status; inside one it does not.
            self.job_skip_queued(id, from_now, true);
        }
        self.transfer_pull_forward(n);
    }

    /// One unfinished job skips its queued batches (their lands no longer count) and ends when
    /// the batch being written ends — now, if none is (`transfer_skip_queued`).
    /// `begun_runs_on`: a chunk whose first batch has begun is sent to its end (an abort or a
    /// failed room, which the worker checks only between chunks); false when the batch being
    /// written fails, which ends its chunk (`transfer_reader_died`).
    fn job_skip_queued(&mut self, id: JobId, from_now: bool, begun_runs_on: bool) {
        let now = self.now;
        // A job that has left was done.
        let Some(job) = self.jobs.get_mut(id) else { return };
        if job.done || job.aborted {
            return;
        }
        job.aborted = true;
        let (n, r) = (job.prefill, job.r);
        let mut end = now;
        let mut skipped_lands = 0;
        let queued = |start: Instant| start > now || (from_now && start == now);
        // A chunk whose first batch the worker has begun is sent to its end: the bounded-batch
        // loop checks each batch's return code, never the room's status (sglang 0.5.22 wheel,
        // `disaggregation/mooncake/conn.py` `send_kvcache`: `for start in range(0, …,
        // max_batch_indices)` returns only on `ret != 0`; the worker checks for Failed between
        // chunks). Before, an abort dropped the chunk's later batches, under-reporting their
        // source reads.
        let begun = begun_runs_on && job.batches.iter().any(|b| matches!(b.span, Some((start, _)) if !queued(start)));
        for b in job.batches.iter_mut() {
            if begun {
                if let Some((_, ret)) = b.span {
                    end = end.max(ret);
                }
                continue;
            }
            match b.span {
                Some((start, _)) if queued(start) && !b.skipped => {
                    // Dropped by the worker, landing or not (a timed-out, quiesced batch lands
                    // nothing but would have held the worker: `transfer_pull_forward`).
                    b.skipped = true;
                    skipped_lands += u32::from(b.lands);
                }
                Some((start, _)) if queued(start) => {}
                Some((_, ret)) => end = end.max(ret),
                _ => {}
            }
        }
        self.jobs.entry(id).dones_left += 1;
        self.at(end, Ev::TransferDone { job: id, ok: false });
        if let Some(pr) = self.pnode_mut(n).req_mut(r) {
            pr.lands_skipped(skipped_lands);
        }
    }

    /// Whether transfers are pulled by decode (vLLM's NIXL READs, behind the sequential proxy)
    /// rather than pushed by prefill's transfer worker (sglang's Mooncake writes).
    pub(crate) fn decode_pulls(&self) -> bool {
        self.cfg.knobs.router_mode == RouterMode::Sequential
    }

    /// Decode node `d` is dying. Behind vLLM's sequential proxy decode pulls the KV: its worker
    /// issues the NIXL READs (vLLM 0.33.0 `distributed/kv_transfer/kv_connector/v1/nixl/
    /// pull_worker.py` `_read_blocks`, called from decode's `start_load_kv`), so when decode dies
    /// its reads stop: each job still reading into this incarnation skips its queued batches, the
    /// batch being read lands nothing (`land_batch`), and the job ends when that batch's call
    /// would have returned. Prefill is not told; it holds the source blocks until its lease,
    /// which decode's heartbeats no longer extend.
    ///
    /// With prefill pushing (sglang's Mooncake writes) the batch being written when decode dies
    /// fails: its peer's memory registration is gone, so the transfer engine returns an error
    /// when the write would have completed (sglang 0.5.16 and 0.5.22 wheels,
    /// `disaggregation/mooncake/conn.py` `transfer_worker`: a non-zero `send_kvcache` return
    /// records the failure and marks the room Failed), and the worker then drops the room's
    /// queued chunks ("Skipping chunk for room … because it has already failed"). So the job
    /// skips its queued batches and ends failed when the batch being written returns; that batch
    /// lands nothing (`land_batch`: the incarnation it wrote to is gone). A restarted decode is a
    /// new incarnation with a new registration: later batches do not write into it either.
    pub(crate) fn transfer_reader_died(&mut self, d: DecodeIdx) {
        let epoch = self.decode[d.at()].epoch();
        let ids: Vec<JobId> = self
            .jobs
            .live
            .iter()
            .filter(|(_, e)| e.job.decode == d && e.job.decode_epoch == epoch && !e.job.done)
            .map(|(id, _)| id)
            .collect();
        let mut senders: Vec<PrefillIdx> = Vec::new();
        for id in ids {
            if let Some(j) = self.jobs.get(id) {
                if !senders.contains(&j.prefill) {
                    senders.push(j.prefill);
                }
            }
            // The batch being written fails (the peer is gone), which ends its chunk.
            self.job_skip_queued(id, false, false);
        }
        for n in senders {
            self.transfer_pull_forward(n);
        }
    }

    /// Prefill `n`'s transfer queues after skipped batches: with prefill pushing (sglang's
    /// Mooncake writes) the worker drops a skipped chunk when it dequeues it and takes the next
    /// at once (sglang 0.5.16 and 0.5.22 wheels, `disaggregation/mooncake/conn.py`
    /// `transfer_worker`: "Skipping chunk for room … because it has already failed or been
    /// aborted", then `continue`), so the time the skipped batches had booked is free again. The
    /// batches still queued behind them (other requests' jobs, in queue order) move up to start
    /// when the batch being written returns, or now; each keeps its length, its faults (drawn
    /// when it was queued) and its land's lag, and gets new events (the old ones find the batch's
    /// times changed and do nothing: `transfer_read`, `land_batch`, `job_done`). The worker is
    /// then free when the last of them returns. Only the current incarnation's jobs hold the
    /// worker: a crashed prefill's queue died with it.
    ///
    /// Before this the queue was not pulled forward: a request whose chunks were skipped kept the
    /// worker booked for their whole length (a 90 s scripted delay on 20 chunks booked it 20
    /// minutes), so the jobs queued after it started past the horizon and their source pages
    /// were reported as a `page_leak/prefill` the engine does not have (found by a guided
    /// `sglang-0.5.22` campaign, BENCHMARKS.md). Behind vLLM's proxy decode pulls, and this
    /// worker is not the one that reads (`transfer_reader_died`): nothing moves.
    fn transfer_pull_forward(&mut self, n: PrefillIdx) {
        if self.decode_pulls() {
            return;
        }
        let epoch = self.prefill[n.at()].epoch();
        // One queue per destination decode node (`PrefillNode::xfer_free_at`).
        let mut dests: Vec<DecodeIdx> = Vec::new();
        for e in self.jobs.live.values() {
            let j = &e.job;
            if j.prefill == n && j.prefill_epoch == epoch && !j.done && !dests.contains(&j.decode) {
                dests.push(j.decode);
            }
        }
        dests.sort_unstable();
        for d in dests {
            self.transfer_pull_forward_queue(n, epoch, d);
        }
    }

    /// `transfer_pull_forward` for prefill `n`'s (incarnation `epoch`) queue to decode node `d`.
    fn transfer_pull_forward_queue(&mut self, n: PrefillIdx, epoch: u32, d: DecodeIdx) {
        let now = self.now;
        // The batch being written returns at `free` (now, if none is); the queued ones, in the
        // worker's order (jobs are laid one after another, so by start).
        let mut free = now;
        let mut queued: Vec<(Instant, JobId, usize)> = Vec::new();
        for (id, e) in self.jobs.live.iter() {
            let j = &e.job;
            if j.prefill != n || j.decode != d || j.prefill_epoch != epoch || j.done {
                continue;
            }
            for (b, batch) in j.batches.iter().enumerate() {
                match batch.span {
                    // Skipped: the worker drops it when it dequeues it, at no cost.
                    _ if batch.skipped => {}
                    Some((start, _)) if start > now => queued.push((start, id, b)),
                    Some((_, ret)) => free = free.max(ret),
                    None => {}
                }
            }
        }
        queued.sort_unstable();
        let mut moved_jobs: Vec<JobId> = Vec::new();
        for (start, id, b) in queued {
            let Some((_, ret)) = self.jobs[id].batches[b].span else { continue };
            if start <= free {
                // Nothing before it was freed: neither it nor anything after it moves.
                free = free.max(ret);
                continue;
            }
            let shift = Duration(start.0 - free.0);
            let batch = &mut self.jobs[id].batches[b];
            batch.span = Some((free, Instant(ret.0 - shift.0)));
            free = Instant(ret.0 - shift.0);
            let (read, land) =
                (batch.read_at.map(|t| Instant(t.0 - shift.0)), batch.land_at.map(|t| Instant(t.0 - shift.0)));
            batch.read_at = read;
            batch.land_at = land;
            if let Some(t) = read {
                self.at(t, Ev::TransferRead { job: id, batch: b as u32 });
            }
            if let Some(t) = land {
                self.at(t, Ev::TransferLand { job: id, batch: b as u32 });
                self.jobs[id].lands_left += 1;
            }
            if !moved_jobs.contains(&id) {
                moved_jobs.push(id);
            }
        }
        // A moved job ends when its last scheduled batch returns (its old `TransferDone` comes
        // later and finds it done).
        for id in moved_jobs {
            let j = &self.jobs[id];
            let Some(end) = j.batches.iter().filter_map(|b| b.span).map(|(_, ret)| ret).max() else { continue };
            let ok = j.done_ok;
            self.jobs.entry(id).dones_left += 1;
            self.at(end, Ev::TransferDone { job: id, ok });
        }
        self.prefill[n.at()].book_transfer_worker(d, free);
    }

    fn pnode_mut(&mut self, n: PrefillIdx) -> &mut crate::prefill::PrefillNode {
        &mut self.prefill[n.at()]
    }

    /// A batch's data becomes visible in decode's pool (`land_batch`); the job's page lists go
    /// once nothing can read them.
    pub(crate) fn transfer_land(&mut self, job: JobId, batch: u32) {
        self.land_batch(job, batch);
        let j = &mut self.jobs[job];
        j.lands_left = j.lands_left.saturating_sub(1);
        self.transfer_retire(job);
    }

    /// Drops a finished job's page lists once nothing can read them: its `TransferDone` was
    /// handled (a later, stale one returns before reading them; an abort skips a done job) and
    /// every land scheduled for it was handled (only `land_batch` reads the batches and lenders
    /// afterwards). The job itself leaves `World::jobs` once no event names it any more (every
    /// `TransferDone` scheduled for it handled too), so no handler or coverage probe ever looks
    /// for a job that has left. Not under exploration, whose state digest hashes every job's
    /// `Debug` whole.
    fn transfer_retire(&mut self, job: JobId) {
        if self.chooser.is_some() {
            return;
        }
        let e = self.jobs.entry(job);
        if e.job.done && e.job.lands_left == 0 {
            self.retire_job(job);
        }
    }

    /// `transfer_retire` of a job whose page lists nothing reads any more: out of line (once a
    /// job, against a check every land of every batch).
    #[inline(never)]
    fn retire_job(&mut self, job: JobId) {
        let e = self.jobs.entry(job);
        if e.dones_left == 0 {
            if let Some(mut e) = self.jobs.live.remove(job) {
                self.jobs.give_back_lists(&mut e.job);
            }
        } else {
            e.job.lenders = Vec::new();
            let (src, dst) = (std::mem::take(&mut e.job.src), std::mem::take(&mut e.job.dst));
            let batches = std::mem::take(&mut e.job.batches);
            self.jobs.give_back_runs(src);
            self.jobs.give_back_runs(dst);
            self.jobs.give_back_batches(batches);
        }
    }

    /// A lagged batch's wire time ended (`Ev::TransferRead`): its source pages are read now, as
    /// the NIC reads them before it reports the write complete, and travel as `Batch::wire` until
    /// the batch lands. Reading a page the request no longer holds is a use after free here, at
    /// the read; a page freed after it (the sender was told the write completed) is not.
    pub(crate) fn transfer_read(&mut self, job: JobId, batch: u32) {
        let Some(j) = self.jobs.get(job) else { return };
        let (r, p, prefill_epoch, prefill) = (j.r, j.prefill.at(), j.prefill_epoch, j.prefill);
        let Some(b) = j.batches.get(batch as usize) else { return };
        if b.read_at != Some(self.now) {
            return; // moved earlier (`transfer_pull_forward`): read at its new time
        }
        if b.skipped || self.prefill[p].epoch() != prefill_epoch {
            return; // never written, or the source died with its process (`land_batch`)
        }
        let (d, decode_epoch) = (j.decode.at(), j.decode_epoch);
        if self.decode_pulls() && !(self.decode[d].alive() && self.decode[d].epoch() == decode_epoch) {
            return; // decode issues the reads, and it died (`transfer_reader_died`)
        }
        let outlived = b.outlives_its_call(self.now);
        let src = j.batch_src(batch as usize).to_vec();
        let src_id = prefill.node();
        if outlived {
            self.reqs[r.idx()].outlived_its_call();
        }
        let rep = self.prefill[p].pool().not_held_by(&src, r, &self.jobs[job].lenders);
        self.note_foreign_writes(src_id, r, rep, crate::world::SOURCE_READ);
        let contents = self.prefill[p].pool().page_contents(&src);
        self.mem(MemOp::Send { src: src_id, r, wire: wire_id(job, batch), pages: src });
        self.jobs[job].batches[batch as usize].wire = Some(Box::new(contents));
    }

    fn land_batch(&mut self, job: JobId, batch: u32) {
        let j = &self.jobs[job];
        let (r, p, d, prefill_epoch, decode_epoch, prefill_idx, decode_idx) =
            (j.r, j.prefill.at(), j.decode.at(), j.prefill_epoch, j.decode_epoch, j.prefill, j.decode);
        if j.batches[batch as usize].land_at != Some(self.now) {
            return; // moved earlier (`transfer_pull_forward`): landed at its new time
        }
        if j.batches[batch as usize].skipped {
            return; // skipped after an abort: never written, its land was uncounted then
        }
        let j = JobIds { r, prefill_epoch, decode_epoch, prefill: prefill_idx, decode: decode_idx };
        if self.prefill[p].epoch() != j.prefill_epoch {
            return; // the source died with its process
        }
        if let Some(pr) = self.prefill[p].req_mut(j.r) {
            pr.land_handled();
        }
        let reader_alive = self.decode[d].epoch() == j.decode_epoch && self.decode[d].alive();
        if !reader_alive && self.decode_pulls() {
            // Decode pulls and died: nobody reads the source any more (`transfer_reader_died`).
            self.prefill_maybe_drained(j.prefill, j.r);
            return;
        }
        let src_id = j.prefill.node();
        let dst_id = j.decode.node();
        // What lands: a lagged batch's contents as read at the end of its wire time
        // (`transfer_read`), otherwise the source read now. Reading a source page the request no
        // longer holds is itself a use after free. Pages it released into the radix cache, and
        // the cached blocks it borrowed, are still its data while the same cache entry holds them.
        // The batch's page lists are read where they are (a batch lands once; no copy of them).
        // Landed at once, the source contents go through `land_scratch` (no buffer per batch).
        let mut scratch = std::mem::take(&mut self.land_scratch);
        let wire = self.jobs[job].batches[batch as usize].wire.take();
        let wired = wire.is_some();
        let contents = match wire {
            Some(c) => Some(*c),
            None => {
                let (jb, b) = (&self.jobs[job], batch as usize);
                if jb.batches[b].outlives_its_call(self.now) {
                    // The call returned on its timeout and the batch kept writing: it reads its
                    // source now, after the sender was told it failed.
                    self.reqs[j.r.idx()].outlived_its_call();
                }
                let src_rep = self.prefill[p].pool().not_held_by(jb.batch_src(b), j.r, &jb.lenders);
                self.note_foreign_writes(src_id, j.r, src_rep, crate::world::SOURCE_READ);
                reader_alive.then(|| {
                    let mut c = std::mem::take(&mut scratch.contents);
                    self.prefill[p].pool().page_contents_into(self.jobs[job].batch_src(batch as usize), &mut c);
                    c
                })
            }
        };
        if let Some(contents) = contents.filter(|_| reader_alive) {
            let (jb, b) = (&self.jobs[job], batch as usize);
            let (bsrc, bdst) = (jb.batch_src(b), jb.batch_dst(b));
            let rep = self.decode[d].pool_mut().land_copy(&contents, bdst, j.r);
            let op = if wired {
                let mut pages = std::mem::take(&mut scratch.runs);
                pages.clear();
                pages.extend_from_slice(bdst);
                MemOp::Land { src: src_id, dst: dst_id, r: j.r, wire: wire_id(job, batch), pages }
            } else {
                scratch.contents = contents; // read from the source just now: the buffer goes back
                let mut pages = std::mem::take(&mut scratch.pairs);
                page_pairs_into(bsrc, bdst, &mut pages);
                MemOp::Copy { src: src_id, dst: dst_id, r: j.r, pages }
            };
            match self.mem_returning(op) {
                Some(MemOp::Land { pages, .. }) => scratch.runs = pages,
                Some(MemOp::Copy { pages, .. }) => scratch.pairs = pages,
                _ => {}
            }
            self.note_foreign_writes(dst_id, j.r, rep, crate::world::TRANSFER_WRITE);
            // The request's own data landed: if decode already read these positions (the land
            // lagged), its next read must read them again.
            if let Some(dr) = self.decode[d].req_mut(j.r) {
                dr.foreign_write();
            }
        }
        self.land_scratch = scratch;
        self.prefill_maybe_drained(j.prefill, j.r);
    }

    /// `prefill_rejected_release = twice`: the request was released at its rejection while this
    /// job was in flight, and the transfer's terminal cleanup releases its source pages again
    /// (sglang #30937: a grammar rejection after the transfer started released the KV at once and
    /// again when the inflight poll reached a terminal state). The pool reports the pages it no
    /// longer holds for the request as a double free and does not apply it, so no memory
    /// operation is traced.
    fn transfer_release_again(&mut self, job: JobId, n: PrefillIdx, r: crate::types::RequestId) {
        let mut pages: Vec<Run> = Vec::new();
        // Every batch's source pages, batch after batch: the job's source list.
        for run in &self.jobs[job].src {
            crate::pool::push_run(&mut pages, *run);
        }
        if pages.is_empty() {
            return;
        }
        let bad = self.prefill[n.at()].pool_mut().free(&pages, crate::pool::Holder::Req(r));
        let pool = self.prefill[n.at()].id();
        self.note_bad_frees(pool, r, bad);
    }

    /// The job's last batch call returned (`job_done`); its page lists go once nothing can read
    /// them.
    pub(crate) fn transfer_done(&mut self, job: JobId, ok: bool) {
        let e = self.jobs.entry(job);
        e.dones_left = e.dones_left.saturating_sub(1);
        self.job_done(job, ok);
        self.transfer_retire(job);
    }

    fn job_done(&mut self, job: JobId, ok: bool) {
        if self.jobs[job].done {
            return; // ended earlier by an abort
        }
        self.jobs[job].done = true;
        let aborted = self.jobs[job].aborted;
        let j = &self.jobs[job];
        let (p, last, meta, sender_pages, prefix) = (j.prefill.at(), j.last, j.meta, j.sender_pages, j.prefix_tokens);
        let j = JobIds {
            r: j.r,
            prefill_epoch: j.prefill_epoch,
            decode_epoch: j.decode_epoch,
            prefill: j.prefill,
            decode: j.decode,
        };
        if self.prefill[p].epoch() != j.prefill_epoch {
            return;
        }
        if self.cfg.knobs.prefill_abort_release == PrefillRelease::AckAfterDrain && self.jobs[job].failed_a_batch() {
            // A submitted batch failed: the backend cannot prove the room drained (a timed-out
            // call may return with the batch still writing), so prefill withholds decode's abort
            // ack for good (sglang 0.5.22 wheel, `disaggregation/mooncake/conn.py`
            // `transfer_worker` calls `_poison_unsettled_send` on any non-zero send result,
            // before the drain check `_maybe_ack_drained_abort`).
            self.reqs[j.r.idx()].poison_abort_ack(j.prefill_epoch);
        }
        if self.jobs[job].ack_on_end {
            self.ack_when_drained(j.prefill, j.r);
        }
        let decode_ok = self.decode[j.decode.at()].epoch() == j.decode_epoch && self.decode[j.decode.at()].alive();
        let Some(pr) = self.prefill[p].req_mut(j.r) else {
            if aborted && self.cfg.knobs.prefill_rejected_release == crate::config::RejectedRelease::Twice {
                self.transfer_release_again(job, j.prefill, j.r);
            }
            return;
        };
        let was_failed = pr.job_ended(job);
        if aborted {
            // The chunk being written at the abort has ended: a failed one, or the last chunk
            // (its Success concluded as Failed), tells decode Failed while the room still exists.
            pr.room_failed();
            if (last || !ok) && decode_ok {
                let lat = self.msg_latency();
                self.after(
                    lat,
                    Ev::Status { r: j.r, decode: j.decode, epoch: j.decode_epoch, ok: false, pages: 0, prefix: 0 },
                );
            }
        } else if !ok || !decode_ok {
            pr.room_failed();
            if !ok {
                // A failed batch marks the room Failed, and the transfer worker drops every chunk
                // of a Failed room it dequeues ("Skipping chunk for room … because it has already
                // failed or been aborted": sglang 0.5.16 and 0.5.22 wheels,
                // `disaggregation/mooncake/conn.py` `transfer_worker`; `add_transfer_request`
                // refuses later chunks, `World::prefill_send`): the request's chunks still queued
                // are skipped as after an abort, so its source pages drain with the chunk being
                // written (lifecycle reference §3).
                self.transfer_skip_queued(j.prefill, j.r, true);
            }
            if !was_failed {
                let lat = self.msg_latency();
                self.after(
                    lat,
                    Ev::Status { r: j.r, decode: j.decode, epoch: j.decode_epoch, ok: false, pages: 0, prefix: 0 },
                );
            }
        } else if last && !was_failed {
            pr.room_succeeded();
            let lat = self.msg_latency();
            if let Some((slot, room)) = meta {
                // The row normally lands before the status message; a scripted lag reorders them.
                // A pipeline-parallel prefill may write one row per stage (`crate::pp`).
                let lag = self.metadata_lag(j.r);
                for at in self.pp_meta_row_delays(j.prefill, Duration(lat.0 / 2), lag) {
                    self.after(at, Ev::MetaLand { r: j.r, decode: j.decode, epoch: j.decode_epoch, slot, room });
                }
            }
            self.after(
                lat,
                Ev::Status { r: j.r, decode: j.decode, epoch: j.decode_epoch, ok: true, pages: sender_pages, prefix },
            );
        }
        self.prefill_maybe_drained(j.prefill, j.r);
        self.tick(j.prefill.node());
    }
}

#[cfg(test)]
mod tests {
    use crate::fuzz::{draw, Space};

    /// The job window against a `BTreeMap` model: jobs pushed in id order and removed in any
    /// order (a pseudo-random one, and the window emptied and refilled), every lookup, the held
    /// count and the iteration in id order the same after every step; the window's slots never
    /// outnumber the ids from the oldest held to the last handed out.
    #[test]
    fn the_job_window_is_a_map_by_id() {
        use super::{JobId, Window};
        let mut w: Window<u64> = Window::default();
        let mut m = std::collections::BTreeMap::new();
        let (mut next, mut x) = (0u32, 0x2545_f491_4f6c_dd1du64);
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Bursts of pushes, then of removals, so that the window also empties.
            if (step / 500) % 2 == 0 && x % 3 != 0 {
                w.push(JobId(next), u64::from(next) * 7);
                m.insert(next, u64::from(next) * 7);
                next += 1;
            } else if !m.is_empty() {
                let keys: Vec<u32> = m.keys().copied().collect();
                let k = keys[(x % keys.len() as u64) as usize];
                assert_eq!(w.remove(JobId(k)), m.remove(&k));
                assert_eq!(w.remove(JobId(k)), None, "removed twice");
            }
            assert_eq!(w.len(), m.len());
            let a: Vec<(u32, u64)> = w.iter().map(|(id, v)| (id.0, *v)).collect();
            let b: Vec<(u32, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(a, b, "step {step}");
            if let Some(lo) = m.keys().next() {
                assert!(w.slots.len() <= (next - lo) as usize, "step {step}: {} slots", w.slots.len());
            } else {
                assert!(w.slots.is_empty());
            }
            for probe in [0, next / 2, next.saturating_sub(1), next, next + 5] {
                assert_eq!(w.get(JobId(probe)), m.get(&probe), "step {step}, id {probe}");
            }
        }
    }

    /// A job keeps its page lists exactly while something can still read them: once its
    /// `TransferDone` and every land scheduled for it were handled they are gone, and a job with
    /// a land still pending (a late write, a lagged batch) keeps them — its land reads them, so
    /// dropping them early would panic in `land_batch`, not pass silently. A job whose events
    /// were all handled has left `World::jobs` (an event naming a job that left would panic in
    /// its handler). Over drawn runs, late writes, lags and aborts included; under exploration
    /// nothing is dropped.
    #[test]
    fn finished_jobs_drop_their_page_lists_and_only_those() {
        let (mut left, mut kept) = (0, 0);
        for seed in 1..=60 {
            let w = crate::simulate(draw(seed, &Space::Blind), None, false);
            for j in w.jobs.iter() {
                if j.done && j.lands_left == 0 {
                    // Only a stale `TransferDone` (after an abort) still pending keeps it.
                    assert!(
                        j.batches.is_empty() && j.src.is_empty() && j.dst.is_empty() && j.lenders.is_empty(),
                        "seed {seed}: {j:?}"
                    );
                } else {
                    assert!(!j.batches.is_empty(), "seed {seed}: a live job lost its batches: {j:?}");
                }
                kept += 1;
            }
            left += w.jobs.len() - w.jobs.held();
        }
        assert!(left > 100, "{left} jobs left, {kept} kept");
    }

    /// Under exploration (a chooser) every job keeps its page lists: the state digest hashes them.
    #[test]
    fn exploration_keeps_every_jobs_page_lists() {
        let bounds =
            crate::explore::Bounds { max_faults: 0, fault_kinds: vec![], latencies_us: vec![], max_reorders: 0 };
        let mut jobs = 0;
        for seed in 1..=10 {
            let mut w = crate::explore::world_for(&draw(seed, &Space::Blind), &bounds, &[]);
            w.run();
            assert!(w.jobs.iter().all(|j| !j.batches.is_empty()), "seed {seed}");
            assert_eq!(w.jobs.held(), w.jobs.len(), "seed {seed}: exploration retires no job");
            jobs += w.jobs.len();
        }
        assert!(jobs > 0);
    }
}
