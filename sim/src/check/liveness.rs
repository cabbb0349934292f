//! Liveness mode (issue 15; TigerBeetle's "liveness mode"): once the faults have healed, every
//! request must reach a final status within a bound. `[faults] liveness_after_heal_ms = B` (or
//! `kvsim run/fuzz --liveness B`) turns it on:
//!
//! - Each request's deadline is `max(heal, arrival) + B`, where `heal` is `heal_at_ms` when random
//!   faults are on, else the end of the last scripted crash (its restart), else 0; it moves to the
//!   request's own last progress plus `B` (`World::progress_of`: liveness is progress, so a slow
//!   request is not a hang and a stuck one is, however busy the others keep the cluster).
//! - When the clock passes the deadline of a request that is still open, the run stops and each
//!   overdue request (every open one whose deadline passed before the next event) is a
//!   `request_hang` whose cause names what it waits for,
//!   `after_heal/<what>` (e.g. `after_heal/kv_arrival`: decode holds its pages and waits for KV
//!   that will not come). The state named is the state at the deadline: nothing happens between
//!   the deadline and the next event. Page leaks are not judged then (the hung request holds its
//!   pages); a hang is the verdict.
//! - Once every request has its final status and no node holds a page or a metadata slot, the
//!   run is quiescent and stops there (checked at most once per virtual second), instead of
//!   running the remaining timers and heartbeats to the horizon.
//! - Pages still held `B` after the last deadline are judged as leaks as in an ordinary run (the
//!   run stops there).
//!
//! A run in liveness mode is another run than the ordinary one of the same scenario (it stops
//! earlier), so its trace hash differs; without the setting nothing here runs and no hash moves.
//! The hooks in `world.rs` are two calls, in `World::step` and `World::check_liveness`.

use crate::config::{FaultConfig, ScriptedFault};
use crate::decode::DPhase;
use crate::event::Ev;
use crate::lifecycle::{Lane, Phase};
use crate::prefill::PPhase;
use crate::types::{Duration, Instant, RequestId};
use crate::world::World;

use super::{Kind, Violation};

/// How often (virtual time) the quiescence check runs at most.
const QUIESCENCE_CHECK: Duration = Duration::from_s(1);

/// The state of liveness mode in one run.
#[derive(Debug, Clone)]
pub struct Liveness {
    pub bound: Duration,
    /// When the faults have healed.
    pub heal: Instant,
    /// Each request's deadline, by request index.
    deadlines: Vec<Instant>,
    /// The earliest deadline of a request not known to be answered (a lower bound).
    next_deadline: Instant,
    /// After it, pages still held are leaks (the last deadline plus the bound).
    leak_deadline: Instant,
    next_quiescence_check: Instant,
    /// How many more times the leak deadline may move to a pending event that frees pages (each
    /// owed to a distinct event; the cap only guards a livelock re-arming them).
    leak_extensions_left: u64,
    /// A request missed its deadline (the run stopped on it).
    pub failed: bool,
    /// The latest deadline of the requests found overdue together: where the run stopped (the
    /// report's virtual end; nothing happened between the earliest and it).
    pub missed_at: Option<Instant>,
    /// The run stopped because it was quiescent, at this time.
    pub quiescent_at: Option<Instant>,
    /// Each request's last own progress (`phase_changed`, `progressed`), by request index.
    progress: Vec<Option<Instant>>,
    /// When each prefill node's queues last moved (`phase_changed`).
    prefill_admitted: Vec<Option<Instant>>,
    /// When each decode node's queues last moved (`phase_changed`).
    decode_admitted: Vec<Option<Instant>>,
}

/// When the faults of `cfg` have healed: `heal_at_ms` when any random fault is on, else the end of
/// the last scripted crash (its restart), else 0. Other scripted faults belong to a request's
/// transfer and are covered by the deadline counted from its arrival.
pub fn heal_time(f: &FaultConfig) -> Instant {
    let random = [f.transfer_fail, f.delay_spike, f.visibility_lag, f.node_crash].iter().any(|r| r.num > 0);
    if random {
        return Instant(0) + Duration::from_ms(f.heal_at_ms);
    }
    let last_crash = f
        .script
        .iter()
        .filter_map(|s| match s {
            ScriptedFault::Crash { at_ms, restart_after_ms, .. } => Some(at_ms.saturating_add(*restart_after_ms)),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    Instant(0) + Duration::from_ms(last_crash)
}

/// Whether liveness mode can judge `cfg`: with random faults on, they must heal at some time
/// (`heal_at_ms` set; its default is never).
pub fn validate(f: &FaultConfig) -> Result<(), NeverHeals> {
    if f.liveness_after_heal_ms.is_some()
        && heal_time(f) >= Instant(0) + Duration::from_ms(crate::scenario::MAX_TIME_MS)
    {
        return Err(NeverHeals);
    }
    Ok(())
}

/// Liveness mode asked for on random faults that never heal (`faults.heal_at_ms` unset): no
/// deadline could ever start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeverHeals;

impl std::fmt::Display for NeverHeals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "liveness mode needs the random faults to heal: set faults.heal_at_ms below {} (its default, and that \
             maximum, mean never)",
            crate::scenario::MAX_TIME_MS
        )
    }
}

impl std::error::Error for NeverHeals {}

impl Liveness {
    /// Liveness mode for a world whose workload is built, when its configuration asks for it.
    /// The ordinary horizon moves out to the leak deadline, so it never ends the run before a
    /// request's deadline.
    pub fn new(w: &mut World) -> Option<Liveness> {
        let bound = Duration::from_ms(w.cfg.faults.liveness_after_heal_ms?);
        let heal = heal_time(&w.cfg.faults);
        let deadlines: Vec<Instant> = w.reqs.iter().map(|r| r.arrival().max(heal) + bound).collect();
        let next_deadline = deadlines.iter().copied().min().unwrap_or(heal + bound);
        let last = deadlines.iter().copied().max().unwrap_or(heal + bound);
        w.extend_horizon(last + bound);
        Some(Liveness {
            bound,
            heal,
            deadlines,
            next_deadline,
            leak_deadline: last + bound,
            next_quiescence_check: heal,
            leak_extensions_left: 4 * w.reqs.len() as u64 + 16,
            failed: false,
            missed_at: None,
            quiescent_at: None,
            progress: vec![None; w.reqs.len()],
            prefill_admitted: vec![None; w.prefill.len()],
            decode_admitted: vec![None; w.decode.len()],
        })
    }

    /// A request moved to another lifecycle phase (`World::phase`): its own progress, and that
    /// of its node's queues when the move is one along them (taken out of a queue, computed,
    /// started or resumed, retracted or released, answered, forgotten): each can make room or a
    /// turn for the requests queued behind it. Joining a queue is not (a stream of arrivals
    /// must not keep a stuck queue alive), nor is a move into a state that never frees anything
    /// (orphaned, leaked). (Taking a request out of prealloc alone missed a running request's
    /// finish that resumed a retracted one: the request behind them was a hang at 79.8 s and
    /// answered at 89 s; guided campaign on a liveness base, seed 453.)
    pub(crate) fn phase_changed(&mut self, r: RequestId, lane: Lane, phase: Phase, now: Instant) {
        self.progress[r.idx()] = Some(now);
        let along =
            !matches!(phase, Phase::Arrived | Phase::Bootstrap | Phase::Prealloc | Phase::Orphaned | Phase::Leaked);
        match lane {
            Lane::Prefill(p) if along => self.prefill_admitted[p.at()] = Some(now),
            Lane::Decode(d) if along => self.decode_admitted[d.at()] = Some(now),
            _ => {}
        }
    }

    /// A batch of request `r`'s transfer was read, landed or done.
    pub(crate) fn progressed(&mut self, r: Option<RequestId>, now: Instant) {
        if let Some(p) = r.and_then(|r| self.progress.get_mut(r.idx())) {
            *p = Some(now);
        }
    }

    /// A request's deadline.
    pub fn deadline(&self, r: RequestId) -> Instant {
        self.deadlines[r.idx()]
    }
}

impl World {
    /// Liveness mode, before the event due at `at` runs: `true` when the run stops here (a
    /// request missed its deadline, the run is quiescent, or the leak deadline passed).
    pub fn liveness_stop(&mut self, at: Instant) -> bool {
        let Some(mut l) = self.liveness.take() else { return false };
        let stop = self.liveness_stop_with(&mut l, at);
        self.liveness = Some(l);
        stop
    }

    fn liveness_stop_with(&mut self, l: &mut Liveness, at: Instant) -> bool {
        if at > l.next_deadline {
            // No open request is overdue while it progresses: its deadline moves to its last
            // progress plus the bound (`progress_deadlines`).
            self.progress_deadlines(l, at);
            // Every open request whose deadline passed before `at` is overdue.
            let overdue: Vec<usize> =
                (0..self.reqs.len()).filter(|&i| self.reqs[i].response().is_none() && l.deadlines[i] < at).collect();
            if !overdue.is_empty() {
                // Nothing happened before `at`, after every one of these deadlines: the run was
                // watched up to the latest (it reported the earliest as its end, and hangs dated
                // after it).
                l.missed_at = overdue.iter().map(|&i| l.deadlines[i]).max();
                for i in overdue {
                    self.record_overdue(l, i, l.deadlines[i]);
                }
                l.failed = true;
                return true;
            }
            l.next_deadline = (0..self.reqs.len())
                .filter(|&i| self.reqs[i].response().is_none())
                .map(|i| l.deadlines[i])
                .min()
                .unwrap_or(Instant(u64::MAX));
        }
        if at > l.leak_deadline {
            // Something pending still ends a request or frees pages (an armed deferred-release
            // fallback, a transfer in flight, an abort's ack): not yet a leak, as at the ordinary
            // horizon (`World::step`); judged the bound after it instead.
            match self.pending_ending_event() {
                Some(t) if l.leak_extensions_left > 0 => {
                    l.leak_extensions_left -= 1;
                    l.leak_deadline = t + l.bound;
                    self.extend_horizon(l.leak_deadline);
                }
                _ => return true,
            }
        }
        if at >= l.next_quiescence_check {
            l.next_quiescence_check = at + QUIESCENCE_CHECK;
            if self.quiescent() {
                l.quiescent_at = Some(self.now());
                return true;
            }
        }
        false
    }

    /// Every request answered, nothing held on any node, and no work in flight: the only pending
    /// events are ticks, timers, heartbeat losses and crashes/restarts (a pending land, status,
    /// leg or abort could still write into a free page or allocate one, so it is waited for).
    fn quiescent(&self) -> bool {
        self.reqs.iter().all(|r| r.response().is_some())
            && self.prefill.iter().all(|p| p.leaks().is_none())
            && self.decode.iter().all(|d| d.leaks().is_none())
            && !self.any_pending(|e| {
                !matches!(
                    e,
                    Ev::Tick { .. }
                        | Ev::Timeout { .. }
                        | Ev::HeartbeatLost { .. }
                        | Ev::Crash { .. }
                        | Ev::Restart { .. }
                )
            })
    }

    /// Liveness mode at the end of the run: every request still open is overdue (the queue
    /// drained, or the leak deadline passed). Returns `true` when liveness failed, so hangs and
    /// leaks are not judged again.
    pub fn liveness_finish(&mut self) -> bool {
        let Some(mut l) = self.liveness.take() else { return false };
        if !l.failed {
            let now = self.now();
            self.progress_deadlines(&mut l, now);
            let open: Vec<usize> = (0..self.reqs.len()).filter(|&i| self.reqs[i].response().is_none()).collect();
            for &i in &open {
                let at = self.now().max(l.deadlines[i]);
                self.record_overdue(&l, i, at);
            }
            l.failed = !open.is_empty();
        }
        let failed = l.failed;
        self.liveness = Some(l);
        failed
    }

    /// Request `r`'s last progress before the event due at `at`, as liveness mode counts it:
    /// its own (a phase change, a batch of its transfer, a token), work for
    /// it in flight (a chunk of it in the running forward pass, it in the running decode step, a
    /// batch of its transfer still pending: progress now, at `at`), and, while it waits in a queue, the queue's
    /// (`prefill_queue_progress` for prefill's queues, also when sglang's decode already holds
    /// the room and says `kv_arrival`; on decode: its node took one out of the prealloc queue, a
    /// request running there got a token, a transfer into room the node holds is in flight, a
    /// room holder's KV is being computed, or a deferred-release fallback is armed: room will
    /// free; the same for a retracted request, which waits for room too). A request
    /// waiting for what never comes has none of these; one decoding, transferring over a slow
    /// link or queued behind work the node is doing has.
    fn progress_of(&self, l: &Liveness, r: RequestId, at: Instant) -> Option<(Instant, &'static str)> {
        self.progress_with(l, r, at, &self.transferring())
    }

    /// The requests with a transfer batch, or their metadata write, still pending (sorted,
    /// deduplicated).
    fn transferring(&self) -> Vec<RequestId> {
        let mut v: Vec<RequestId> = self
            .queue_events()
            .filter_map(|e| match e {
                Ev::TransferRead { job, .. } | Ev::TransferLand { job, .. } | Ev::TransferDone { job, .. } => {
                    self.jobs.get(*job).map(|j| j.request())
                }
                // Its metadata write, still on its way (a lagged one): part of its KV's arrival.
                Ev::MetaLand { r, .. } => Some(*r),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// `progress_of`, with the requests whose transfer is pending computed once (`transferring`).
    fn progress_with(
        &self,
        l: &Liveness,
        r: RequestId,
        at: Instant,
        transferring: &[RequestId],
    ) -> Option<(Instant, &'static str)> {
        let req = &self.reqs[r.idx()];
        let (p, d) = (req.prefill(), req.decode());
        let in_flight = self.prefill[p.at()].computing(r)
            || self.decode[d.at()].stepping(r, self.page_size())
            || transferring.binary_search(&r).is_ok();
        if in_flight {
            return Some((at, "its KV being computed or sent"));
        }
        let own = [l.progress[r.idx()], req.last_token_at()].into_iter().flatten().max().map(|t| (t, "its own"));
        let queue = match self.waits_for(r) {
            "bootstrap" | "prefill_queue" => self.prefill_queue_progress(l, p, at, transferring),
            // Still queued at prefill, whatever decode's side says (sglang preallocates decode's
            // room first, so the request reads `kv_arrival` there while it waits in prefill's queue).
            "kv_arrival" if self.queued_at_prefill(r) => self.prefill_queue_progress(l, p, at, transferring),
            // A retracted request waits for the same thing as the prealloc queue: room, which
            // the running batch frees as it finishes (sglang resumes retracted requests before it
            // admits from prealloc; `decode_tick`). Without this, one retracted behind a long
            // output was a hang after the bound although it resumed and finished later.
            "decode_prealloc" | "retracted" => {
                let node = &self.decode[d.at()];
                if node.transfer_queue().iter().any(|h| transferring.binary_search(h).is_ok()) {
                    // Room held for a request whose KV is on its way: it will run and free it.
                    return Some((at, "its decode queue's (a transfer into the held room is in flight)"));
                }
                // Room held for a request whose KV prefill is computing now, or whose pages decode
                // frees when its deferred-release fallback fires (the abort of a failed send that
                // prefill never acknowledges: 30 s, sglang 0.5.22): room will free.
                if node.transfer_queue().iter().any(|h| self.prefill[self.reqs[h.idx()].prefill().at()].computing(*h))
                    || self.release_pending(d)
                {
                    return Some((at, "its decode queue's (room held for work in progress will free)"));
                }
                // Room held for a request still queued at its prefill node: that queue's progress
                // (a long chunked prompt ahead of the holder there).
                let upstream = node
                    .transfer_queue()
                    .iter()
                    .filter(|h| self.queued_at_prefill(**h))
                    .filter_map(|h| self.prefill_queue_progress(l, self.reqs[h.idx()].prefill(), at, transferring))
                    .map(|(t, _)| t)
                    .max();
                [self.decode_queue_progress(l, d), upstream]
                    .into_iter()
                    .flatten()
                    .max()
                    .map(|t| (t, "its decode queue's"))
            }
            // Running but not stepping (`decode_out_of_pages = stall`: it waits for a page the
            // batch frees as requests finish): the node's tokens and moves are its progress.
            "decode_steps" => self.decode_queue_progress(l, d).map(|t| (t, "its decode batch's")),
            _ => None,
        };
        [own, queue].into_iter().flatten().max_by_key(|(t, _)| *t)
    }

    /// The progress of prefill node `p`'s queues: a forward pass running (it works through the
    /// queue, chunk by chunk: a long chunked prompt ahead is progress), a request taken out of the
    /// bootstrap or waiting queue, or, for a pool held by requests whose KV decode has yet to take
    /// (vLLM holds the source blocks until decode's read), those requests' transfers in flight and
    /// their decode nodes' tokens (decode reads when room frees).
    fn prefill_queue_progress(
        &self,
        l: &Liveness,
        p: crate::types::PrefillIdx,
        at: Instant,
        transferring: &[RequestId],
    ) -> Option<(Instant, &'static str)> {
        let node = &self.prefill[p.at()];
        if node.busy() {
            return Some((at, "its prefill queue's (a forward pass is running)"));
        }
        let holders: Vec<RequestId> = node
            .reqs()
            .iter()
            .filter(|(_, x)| matches!(x.phase(), PPhase::Held | PPhase::Inflight | PPhase::Draining))
            .map(|(h, _)| *h)
            .collect();
        if holders.iter().any(|h| transferring.binary_search(h).is_ok()) {
            return Some((at, "its prefill queue's (a transfer out of its pool is in flight)"));
        }
        let tokens = holders
            .iter()
            .flat_map(|h| self.decode[self.reqs[h.idx()].decode().at()].running())
            .filter_map(|x| self.reqs[x.idx()].last_token_at())
            .max();
        [l.prefill_admitted[p.at()], tokens].into_iter().flatten().max().map(|t| (t, "its prefill queue's"))
    }

    /// Request `r` waits in its prefill node's bootstrap or waiting queue.
    fn queued_at_prefill(&self, r: RequestId) -> bool {
        let p = self.reqs[r.idx()].prefill();
        matches!(self.prefill[p.at()].reqs().get(&r).map(|x| x.phase()), Some(PPhase::Bootstrap | PPhase::Waiting))
    }

    /// Decode node `d`'s own movement: a request moved along its queues, or one running there got
    /// a token.
    fn decode_queue_progress(&self, l: &Liveness, d: crate::types::DecodeIdx) -> Option<Instant> {
        let tokens = self.decode[d.at()].running().iter().filter_map(|x| self.reqs[x.idx()].last_token_at()).max();
        [l.decode_admitted[d.at()], tokens].into_iter().flatten().max()
    }

    /// Decode node `d` holds pages of a request whose deferred-release fallback is still armed:
    /// they free when it fires.
    fn release_pending(&self, d: crate::types::DecodeIdx) -> bool {
        self.any_pending(|e| {
            matches!(e, Ev::Timeout { timer: crate::event::TimeoutKind::DeferredRelease, node, .. }
                if node.idx() == crate::types::NodeIdx::Decode(d))
        })
    }

    /// Moves the deadline of each open request whose deadline is before `at` to its last progress
    /// (`progress_of`) plus the bound when that is later: a request is overdue once it has not
    /// progressed for the bound after the heal or its arrival. The leak deadline and the horizon
    /// move with the latest deadline.
    fn progress_deadlines(&mut self, l: &mut Liveness, at: Instant) {
        let mut latest = None;
        let due: Vec<usize> =
            (0..self.reqs.len()).filter(|&i| l.deadlines[i] < at && self.reqs[i].response().is_none()).collect();
        if due.is_empty() {
            return;
        }
        let transferring = self.transferring();
        for i in due {
            let Some((t, _)) = self.progress_with(l, RequestId(i as u32), at, &transferring) else { continue };
            if l.deadlines[i] < t + l.bound {
                l.deadlines[i] = t + l.bound;
                latest = latest.max(Some(t + l.bound));
            }
        }
        if let Some(t) = latest {
            l.leak_deadline = l.leak_deadline.max(t + l.bound);
            self.extend_horizon(l.leak_deadline);
        }
    }

    fn record_overdue(&mut self, l: &Liveness, i: usize, deadline: Instant) {
        let r = &self.reqs[i];
        let waits = self.waits_for(r.id());
        let (why, because) = match self.hang_why(r.id(), waits) {
            Some((why, because)) => (format!("/{why}"), format!("; {because}")),
            None => (String::new(), String::new()),
        };
        let progress = match self.progress_of(l, r.id(), deadline) {
            Some((t, whose)) => format!(", {whose} last progress at {t}"),
            None => String::new(),
        };
        let detail = format!(
            "no final status within {} ms of max(heal at {}, arrival at {}{progress}) (deadline {deadline}): waits for \
             {waits}{because}; {}",
            l.bound.0 / 1_000_000,
            l.heal,
            r.arrival(),
            self.whereabouts(r.id())
        );
        let v = Violation::new(Kind::RequestHang, format!("after_heal/{waits}{why}"), deadline)
            .request(r.id(), r.tenant())
            .detail(detail);
        self.oracle.record(v);
    }

    /// Why what an open request waits for (`waits_for`) does not come, when the model knows, as a
    /// signature suffix and a sentence for the detail (issue 15: a signature names the mechanism,
    /// so a known-bugs row can name it without hiding another mechanism with the same wait):
    /// - `never_fits`: it waits in decode's prealloc queue, whose head needs more than the whole
    ///   pool (the page-aligned prompt, decode's lookahead and its reserved decode tokens; the
    ///   queue is FIFO, so nothing behind the head is admitted either: prealloc-never-fits);
    /// - `prefill_failed`: it waits on decode or the router while its prefill leg has already
    ///   failed (prefill's error never reaches decode: router-waits-for-decode);
    /// - `behind_prefill_failed`: it waits in decode's prealloc queue while decode holds
    ///   reservations for requests whose prefill leg failed (router-waits-for-decode's held
    ///   capacity).
    pub fn hang_why(&self, r: RequestId, waits: &str) -> Option<(&'static str, String)> {
        let req = &self.reqs[r.idx()];
        let d = &self.decode[req.decode().at()];
        if waits == "decode_prealloc" {
            if let Some(&head) = d.prealloc().front() {
                let k = &self.cfg.knobs;
                let len = d.reqs()[&head].len_tokens();
                let need = self.prealloc_pages(len) * self.page_size() + k.reserved_decode_tokens;
                let pool = d.pool().usable_pages() * self.page_size();
                if need > pool {
                    let who = if head == r { "it".to_string() } else { format!("request {}, ahead of it,", head.0) };
                    return Some((
                        "never_fits",
                        format!(
                            "the head of {}'s prealloc queue, {who} needs {need} tokens to preallocate (a {len}-token \
                             prompt, page-aligned, plus {} reserved) and the pool holds {pool}",
                            d.id(),
                            k.reserved_decode_tokens
                        ),
                    ));
                }
            }
        }
        let failed = |leg: Option<u16>| leg.filter(|s| *s != 200);
        // A request whose prefill leg answered waits on decode or the router (`waits_for`).
        if let Some(s) = failed(req.prefill_leg()) {
            return Some(("prefill_failed", format!("its prefill leg already failed ({s})")));
        }
        if waits == "decode_prealloc" {
            // Decode's room (pages, metadata slots, running slots) held for requests whose
            // prefill leg failed: they wait for KV that never comes until decode's timer.
            let holders: Vec<u32> = d
                .transfer_queue()
                .iter()
                .filter(|h| failed(self.reqs[h.idx()].prefill_leg()).is_some())
                .map(|h| h.0)
                .collect();
            if !holders.is_empty() {
                return Some((
                    "behind_prefill_failed",
                    format!(
                        "{} holds reservations for request(s) {holders:?}, whose prefill leg already failed, until its \
                         waiting timer",
                        d.id()
                    ),
                ));
            }
        }
        None
    }

    /// What an open request waits for, from the leg that has not answered: on decode, pages and a
    /// metadata slot (`decode_prealloc`), its KV (`kv_arrival`), decode steps (`decode_steps`),
    /// prefill's acknowledgement of an abort (`release_ack`); on prefill, decode's bootstrap
    /// (`bootstrap`), a forward pass (`prefill_queue`), the send of its KV (`kv_send`), decode's
    /// read of its held blocks (`decode_read`), in-flight transfers of an aborted request
    /// (`transfer_drain`); a leg that its node forgot (`decode_answer`, `prefill_answer`, e.g.
    /// after a crash or a leak) or, both legs answered, the router (`router`).
    pub fn waits_for(&self, r: RequestId) -> &'static str {
        let req = &self.reqs[r.idx()];
        let p = &self.prefill[req.prefill().at()];
        let d = &self.decode[req.decode().at()];
        let decode = || match d.reqs().get(&r).map(|x| x.phase()) {
            Some(DPhase::Prealloc) => "decode_prealloc",
            Some(DPhase::Transfer) => "kv_arrival",
            Some(DPhase::Running) => "decode_steps",
            Some(DPhase::Releasing) => "release_ack",
            Some(DPhase::Retracted) => "retracted",
            Some(DPhase::Leaked) | None => "decode_answer",
        };
        let prefill = || match p.reqs().get(&r).map(|x| x.phase()) {
            Some(PPhase::Bootstrap) => "bootstrap",
            Some(PPhase::Waiting) => "prefill_queue",
            Some(PPhase::Inflight) => "kv_send",
            Some(PPhase::Held) => "decode_read",
            Some(PPhase::Draining) => "transfer_drain",
            Some(PPhase::Orphaned) => "orphaned",
            None => "prefill_answer",
        };
        match (req.prefill_leg(), req.decode_leg()) {
            (Some(_), Some(_)) => "router",
            (Some(_), None) => decode(),
            (None, Some(_)) => prefill(),
            // Both pending: decode's wait when decode has the request, else prefill's.
            (None, None) if d.reqs().contains_key(&r) => decode(),
            (None, None) => prefill(),
        }
    }
}
