//! The world: every component's state, the single event queue ordered by (time, sequence), and
//! the loop that pops it. Only the loop advances time. Component behaviour lives in the module
//! of each component (`router`, `prefill`, `decode`, `transfer`, `client`) as `impl World` blocks:
//! the transfer engine writes across two nodes' pools and the oracle watches every memory
//! operation, so components share one owner instead of passing messages through a bus.

use crate::check::oracle::{Oracle, ReadCtx, Violation};
use crate::check::Kind;
use crate::config::{ScriptedFault, SimConfig};
use crate::decode::DecodeNode;
use crate::pool::{Run, WriteReport};
use crate::prefill::PrefillNode;
use crate::rng::Prng;
use crate::router::Router;
use crate::trace::{DecodeEntry, MemOp, PageListOp, TraceRecord, Tracer};
use crate::types::{DecodeIdx, Duration, Instant, NodeId, NodeIdx, PoolId, PrefillIdx, RequestId, Role, TenantId};
// The event enum lives in `event` (trace and world both use it, neither imports the other).
use crate::engine::queue::{EventQueue, Scheduled};
use crate::event::{Ev, TimeoutKind};
use serde::{Deserialize, Serialize};

/// What `World::note_foreign_writes` is told when a transfer reads source pages its request no
/// longer holds: a use after free, but a read, which changes nothing in the pages.
pub(crate) const SOURCE_READ: &str = "transfer read of a source page";
/// A transfer batch landing its pages (`note_foreign_writes`' `what`).
pub(crate) const TRANSFER_WRITE: &str = "transfer write";
/// A decode step's token (`note_foreign_writes`' `what`).
pub(crate) const DECODE_WRITE: &str = "decode write";
/// A retracted request's KV restored into new pages (`note_foreign_writes`' `what`).
pub(crate) const DECODE_RESTORE: &str = "decode restore";
/// A prefill chunk's KV (`note_foreign_writes`' `what`).
pub(crate) const PREFILL_WRITE: &str = "prefill write";
/// Every write `note_foreign_writes` is told of (the mechanisms of `use_after_free` besides
/// [`SOURCE_READ`], `fuzz::mechanisms`).
pub(crate) const WRITES: [&str; 4] = [TRANSFER_WRITE, DECODE_WRITE, DECODE_RESTORE, PREFILL_WRITE];

/// A mitigation that stopped a request before it read foreign KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mitigation {
    KvChecksum,
    KvCanary,
    PageTags,
    CoverageCheck,
    AssertCrash,
}

impl Mitigation {
    pub fn name(self) -> &'static str {
        match self {
            Mitigation::KvChecksum => "kv_checksum",
            Mitigation::KvCanary => "kv_canary",
            Mitigation::PageTags => "page_tags",
            Mitigation::CoverageCheck => "coverage_check",
            Mitigation::AssertCrash => "decode_commit_check=assert_crash",
        }
    }
}

/// What the client finally got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub status: u16,
    pub at: Instant,
    pub tokens: u64,
}

/// A client request and everything the run learned about it. Its fields are private: `world`
/// writes them, and the other components change a request only through the named methods below
/// (`route`, `answer_leg`, `record_response`, `time_out`, `token_out`, `caught`, ...); every
/// module reads through getters named after the fields.
#[derive(Clone, Debug)]
pub struct Req {
    id: RequestId,
    tenant: TenantId,
    arrival: Instant,
    prompt_tokens: u64,
    output_tokens: u64,
    abort_at: Option<Instant>,
    prefix_blocks: Vec<u64>,
    /// The client streams the response (the router's `cancel_decode_when_streaming` reads it).
    streaming: bool,
    /// How many leading prefix blocks the client marks public (`RequestSpec::public_blocks`).
    public_blocks: u32,
    /// The chain identity of each prefix block (`prefix::chain_ids`).
    chain: Vec<u64>,
    prefill: PrefillIdx,
    decode: DecodeIdx,
    room: u64,
    /// The first engine rejection or abort: (status, node, reason).
    rejected: Option<(u16, NodeId, &'static str)>,
    client_aborted: bool,
    fault_touched: bool,
    /// A scripted metadata lag delayed its row (report only: a lag alone fails nothing in a
    /// correct engine, so it is no `fault_touched`; the story says it was there).
    metadata_lagged: bool,
    /// A bootstrap, waiting or transfer sync timer failed it, or decode aborted it for want of pages
    /// (a retraction without host backup, or a request that alone outgrows the pool): capacity, not
    /// a bug by itself.
    timed_out: bool,
    /// Which late writers (another request's write landed in pages this request held or read):
    /// one whose transfer was acknowledged before its data was visible
    /// (`.0`), one that outlived its pages for another reason (`.1`). Only the fuzz signature
    /// reads it (`fuzz::signatures`), to name the chain behind a `late_write` read.
    late_writers: (bool, bool),
    /// A late writer, not lagged, whose batch kept writing after its synchronous call had
    /// returned on the timeout (`outlived_call`): counted here instead of in `late_writers.1`,
    /// so its reads are named `…/late_write/sync_timeout`, whether the write landed in the
    /// request's own pages or in a cached block it locked later (the block keeps which writer it
    /// was: `prefix::LateWrites::timed_out`). Label only.
    late_by_timed_out: bool,
    /// The pages those late writes landed in, by pool: a bad read of this request is named
    /// `late_write` only when its bad slots lie in them, or when none of them is in the pool read
    /// (the late-written KV came from another pool). Label only.
    late_pages: Vec<(PoolId, Run)>,
    /// Those of them where the late write copied zeros (`prefix::LateWrites::zeroed`): a bad
    /// read's uninitialized slots are named `late_write` only there. Label only.
    late_zero_pages: Vec<(PoolId, Run)>,
    /// Decode failed it because its metadata slot held another request's room (sglang 0.5.22
    /// `srt/disaggregation/decode.py`: "Metadata corruption detected - bootstrap_room mismatch",
    /// HTTP 500). Only the fuzz signature reads it.
    room_mismatch: bool,
    /// A transfer of this request was acknowledged before its data was visible.
    lagged: bool,
    /// A batch of this request read its source after its synchronous call had returned: the call
    /// timed out and the batch kept writing (`transfer_timeout_semantics = returns_while_writing`).
    /// Label only: its use-after-free signatures are named `…/sync_timeout` (`fuzz::signatures`).
    outlived_call: bool,
    /// Its scripted `delay` has been applied (to its first transfer batch: the fault makes the
    /// request's transfer `delay_ms` longer, once; `World::batch_faults`).
    delay_spent: bool,
    /// `prefill_abort_release = ack_after_drain`: the prefill incarnation (its epoch) whose
    /// transfer backend cannot prove this request's transfer drained, because a submitted batch
    /// failed (a sync timeout may return with the batch still writing): it never acknowledges
    /// decode's abort, and decode frees at its deferred-release timeout instead (sglang 0.5.22
    /// wheel, `disaggregation/mooncake/conn.py` `_poison_unsettled_send` on every failed send;
    /// `common/conn.py` `poison_deferred_ack_room`, `_maybe_ack_drained_abort`). A restarted
    /// prefill is a new transfer manager, which knows nothing of the room.
    ack_poisoned: Option<u32>,
    /// Transfer batches scheduled for it so far (`World::batch_faults`; the one-batch scripted
    /// faults name a batch by this index).
    batches: u32,
    prefill_leg: Option<u16>,
    decode_leg: Option<u16>,
    decode_tokens: u64,
    /// When decode produced this request's first and latest output token (report only: never
    /// traced, hashed or read by the model).
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    /// A digest of every output token's time, in order (report only, like the token times: the
    /// noninterference check compares it to see inter-token times, not just their mean).
    token_times_digest: u64,
    /// Prompt tokens the prefix cache served at this request's (latest) prefill match, and the
    /// owner of the deepest block it reused (report only: never traced, hashed or read).
    prefix_reused: u64,
    prefix_hit_owner: Option<(RequestId, TenantId)>,
    /// Prompt tokens decode already holds in its radix cache (`decode_radix_cache = on`), set at
    /// decode's preallocation: the `decode_prefix_len` decode's bootstrap info carries to prefill
    /// (sglang `disaggregation/common/conn.py` `pop_decode_prefix_len`), which sends KV only from
    /// there. Kept on the request rather than in `DstInfo` so the trace encoding is unchanged.
    decode_prefix_tokens: u64,
    /// The owner of the deepest block decode's radix cache served it (report only, as
    /// `prefix_hit_owner`).
    decode_prefix_owner: Option<(RequestId, TenantId)>,
    /// Prompt tokens decode's radix cache served it when it resumed after a preemption, over
    /// all its resumptions (`decode_prefix_rules = block_pool`: vLLM's preempted request hits the
    /// cache before it recomputes), and the owner of the deepest block of the latest such hit
    /// (report only, as `prefix_hit_owner`: the noninterference check and the read's mechanism).
    resumed_prefix_tokens: u64,
    resumed_prefix_owner: Option<(RequestId, TenantId)>,
    response: Option<Response>,
    caught_by: Option<Mitigation>,
    detected_by: Option<Mitigation>,
    /// Queued events that name it (`Ev::request`), arrival included: while any is pending it is
    /// not folded (`World::maybe_fold`). Bookkeeping only: never traced, hashed or digested.
    pending_events: u32,
}

/// How a request's state changes from outside `world`: one method per thing that happens to it
/// (its fields are private; `world` writes the rest itself).
impl Req {
    /// A request as it arrives (nothing learned about it yet).
    pub fn new(id: RequestId, s: crate::config::RequestSpec) -> Req {
        Req {
            id,
            tenant: TenantId(s.tenant),
            arrival: Instant(s.at_ns),
            prompt_tokens: s.prompt_tokens,
            output_tokens: s.output_tokens,
            abort_at: s.abort_at_ns.map(Instant),
            chain: crate::prefix::chain_ids(&s.prefix_blocks),
            prefix_blocks: s.prefix_blocks,
            streaming: s.streaming,
            public_blocks: s.public_blocks,
            prefill: PrefillIdx(0),
            decode: DecodeIdx(0),
            room: 0,
            rejected: None,
            client_aborted: false,
            fault_touched: false,
            metadata_lagged: false,
            timed_out: false,
            late_writers: (false, false),
            late_by_timed_out: false,
            late_pages: Vec::new(),
            late_zero_pages: Vec::new(),
            room_mismatch: false,
            lagged: false,
            outlived_call: false,
            delay_spent: false,
            ack_poisoned: None,
            batches: 0,
            prefill_leg: None,
            decode_leg: None,
            decode_tokens: 0,
            first_token_at: None,
            last_token_at: None,
            token_times_digest: 0,
            prefix_reused: 0,
            prefix_hit_owner: None,
            decode_prefix_tokens: 0,
            decode_prefix_owner: None,
            resumed_prefix_tokens: 0,
            resumed_prefix_owner: None,
            response: None,
            caught_by: None,
            detected_by: None,
            pending_events: 0,
        }
    }

    /// The router chose its pair and bootstrap room.
    pub(crate) fn route(&mut self, prefill: PrefillIdx, decode: DecodeIdx, room: u64) {
        self.prefill = prefill;
        self.decode = decode;
        self.room = room;
    }

    /// A leg's final answer reached the router; false when that leg had answered already (the
    /// first answer stands).
    pub(crate) fn answer_leg(&mut self, role: Role, status: u16) -> bool {
        let slot = match role {
            Role::Prefill => &mut self.prefill_leg,
            Role::Decode => &mut self.decode_leg,
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(status);
        true
    }

    /// The client got its response; false when it had one already (the first stands).
    pub(crate) fn record_response(&mut self, resp: Response) -> bool {
        if self.response.is_some() {
            return false;
        }
        self.response = Some(resp);
        true
    }

    /// The client gave up on it.
    pub(crate) fn client_gave_up(&mut self) {
        self.client_aborted = true;
    }

    /// A timer failed it, or decode aborted it for want of pages (capacity, not a bug by itself).
    pub(crate) fn time_out(&mut self) {
        self.timed_out = true;
    }

    /// A scripted metadata lag delayed its row.
    pub(crate) fn metadata_lag_applied(&mut self) {
        self.metadata_lagged = true;
    }

    /// A fault (crash, heartbeat loss, failed transfer) touched it.
    pub(crate) fn touched_by_fault(&mut self) {
        self.fault_touched = true;
    }

    /// A transfer of it was acknowledged before its data was visible.
    pub(crate) fn acked_before_visible(&mut self) {
        self.lagged = true;
    }

    /// A batch of it read its source after its synchronous call had returned (`outlived_call`).
    pub(crate) fn outlived_its_call(&mut self) {
        self.outlived_call = true;
    }

    /// Whether a batch of it kept writing after its call returned on the sync timeout.
    pub fn outlived_call(&self) -> bool {
        self.outlived_call
    }

    /// Late writes landed in its pages of `pool`, or in cached blocks it locked there.
    pub(crate) fn note_late_writes(&mut self, late: &crate::prefix::LateWrites, pool: PoolId) {
        if late.any() {
            self.late_by_timed_out |= late.timed_out;
            self.late_writers = (self.late_writers.0 | late.lagged, self.late_writers.1 | late.other);
            self.late_pages.extend(late.pages.iter().map(|p| (pool, *p)));
            self.late_zero_pages.extend(late.zeroed.iter().map(|p| (pool, *p)));
        }
    }

    /// The pages of `pool` late writes landed in (`late_pages`) and, of those, where they copied
    /// zeros (`late_zero_pages`).
    pub(crate) fn late_pages_in(&self, pool: PoolId) -> (Vec<Run>, Vec<Run>) {
        let of = |pages: &[(PoolId, Run)]| pages.iter().filter(|(p, _)| *p == pool).map(|(_, r)| *r).collect();
        (of(&self.late_pages), of(&self.late_zero_pages))
    }

    /// Takes its scripted `delay` for the batch being scheduled: true the first time only.
    pub(crate) fn spend_delay(&mut self) -> bool {
        !std::mem::replace(&mut self.delay_spent, true)
    }

    /// Prefill incarnation `epoch` can no longer acknowledge decode's abort of this request
    /// (`ack_poisoned`).
    pub(crate) fn poison_abort_ack(&mut self, epoch: u32) {
        self.ack_poisoned = Some(epoch);
    }

    /// Whether prefill incarnation `epoch` withholds its acknowledgement of decode's abort.
    pub(crate) fn abort_ack_poisoned(&self, epoch: u32) -> bool {
        self.ack_poisoned == Some(epoch)
    }

    /// The index of the transfer batch being scheduled (0 for its first), counted.
    pub(crate) fn next_batch(&mut self) -> u32 {
        let b = self.batches;
        self.batches = b.saturating_add(1);
        b
    }

    /// Decode failed it for a metadata room mismatch.
    pub(crate) fn room_mismatched(&mut self) {
        self.room_mismatch = true;
    }

    /// The prefix cache's (latest) match for it: tokens served and the deepest block's owner.
    pub(crate) fn note_prefix_match(&mut self, reused: u64, owner: Option<(RequestId, TenantId)>) {
        self.prefix_reused = reused;
        self.prefix_hit_owner = owner;
    }

    /// Prompt tokens decode already holds in its radix cache, set at preallocation.
    pub(crate) fn note_decode_prefix(&mut self, tokens: u64, owner: Option<(RequestId, TenantId)>) {
        self.decode_prefix_tokens = tokens;
        self.decode_prefix_owner = owner;
    }

    /// Decode's radix cache served `tokens` of its prompt when it resumed (report only).
    pub(crate) fn note_resumed_prefix(&mut self, tokens: u64, owner: Option<(RequestId, TenantId)>) {
        self.resumed_prefix_tokens += tokens;
        self.resumed_prefix_owner = owner;
    }

    /// Decode produced an output token at `now` (report only).
    pub(crate) fn token_out(&mut self, now: Instant) {
        self.first_token_at.get_or_insert(now);
        self.last_token_at = Some(now);
        self.token_times_digest = crate::check::noninterference::mix(self.token_times_digest, now.0);
    }

    /// Decode has generated `tokens` output tokens for it.
    pub(crate) fn note_decode_tokens(&mut self, tokens: u64) {
        self.decode_tokens = tokens;
    }

    /// A mitigation stopped it (the first one to do so is kept).
    pub(crate) fn caught(&mut self, m: Mitigation) {
        self.caught_by.get_or_insert(m);
    }

    /// vLLM's assert crashed the decode worker to stop it (this names the crash as what caught
    /// it, over any earlier mitigation).
    pub(crate) fn caught_by_crash(&mut self) {
        self.caught_by = Some(Mitigation::AssertCrash);
    }

    /// A mitigation detected it (the first one to do so is kept).
    pub(crate) fn detected(&mut self, m: Mitigation) {
        self.detected_by.get_or_insert(m);
    }

    /// An event naming it was queued (its arrival: `World::count_event` does the rest).
    pub(crate) fn note_event_queued(&mut self) {
        self.pending_events += 1;
    }

    /// Its prefix chain, taken when it is folded (`Reqs` keeps it for the oracle).
    pub(crate) fn take_chain(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.chain)
    }
}

/// Reads of a request's state, for every module (its fields are private: `world` and the named
/// methods above write them). Each getter returns the field of the same name (documented there).
impl Req {
    #[inline]
    pub fn id(&self) -> RequestId {
        self.id
    }

    #[inline]
    pub fn tenant(&self) -> TenantId {
        self.tenant
    }

    #[inline]
    pub fn arrival(&self) -> Instant {
        self.arrival
    }

    #[inline]
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens
    }

    #[inline]
    pub fn output_tokens(&self) -> u64 {
        self.output_tokens
    }

    #[inline]
    pub fn abort_at(&self) -> Option<Instant> {
        self.abort_at
    }

    #[inline]
    pub fn prefix_blocks(&self) -> &[u64] {
        &self.prefix_blocks
    }

    #[inline]
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    #[inline]
    pub fn public_blocks(&self) -> u32 {
        self.public_blocks
    }

    #[inline]
    pub fn chain(&self) -> &[u64] {
        &self.chain
    }

    #[inline]
    pub fn prefill(&self) -> PrefillIdx {
        self.prefill
    }

    #[inline]
    pub fn decode(&self) -> DecodeIdx {
        self.decode
    }

    #[inline]
    pub fn room(&self) -> u64 {
        self.room
    }

    #[inline]
    pub fn rejected(&self) -> Option<(u16, NodeId, &'static str)> {
        self.rejected
    }

    #[inline]
    pub fn client_aborted(&self) -> bool {
        self.client_aborted
    }

    #[inline]
    pub fn fault_touched(&self) -> bool {
        self.fault_touched
    }

    #[inline]
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    #[inline]
    pub fn late_written(&self) -> bool {
        self.chain_facts().late_written()
    }

    /// Whether a late writer of it had outlived its timed-out call (`late_by_timed_out`).
    #[inline]
    pub fn late_write_timed_out(&self) -> bool {
        self.late_by_timed_out
    }

    #[inline]
    pub fn late_writers(&self) -> (bool, bool) {
        self.late_writers
    }

    #[inline]
    pub fn room_mismatch(&self) -> bool {
        self.room_mismatch
    }

    /// What its violations' signatures name of it (kept when it is folded).
    pub fn chain_facts(&self) -> crate::reqs::ChainFacts {
        crate::reqs::ChainFacts {
            outlived_call: self.outlived_call,
            lagged: self.lagged,
            room_mismatch: self.room_mismatch,
            late_writers: self.late_writers,
            late_write_timed_out: self.late_by_timed_out,
        }
    }

    #[inline]
    pub fn lagged(&self) -> bool {
        self.lagged
    }

    #[inline]
    pub fn prefill_leg(&self) -> Option<u16> {
        self.prefill_leg
    }

    #[inline]
    pub fn decode_leg(&self) -> Option<u16> {
        self.decode_leg
    }

    #[inline]
    pub fn decode_tokens(&self) -> u64 {
        self.decode_tokens
    }

    #[inline]
    pub fn first_token_at(&self) -> Option<Instant> {
        self.first_token_at
    }

    #[inline]
    pub fn last_token_at(&self) -> Option<Instant> {
        self.last_token_at
    }

    #[inline]
    pub fn token_times_digest(&self) -> u64 {
        self.token_times_digest
    }

    #[inline]
    pub fn prefix_reused(&self) -> u64 {
        self.prefix_reused
    }

    #[inline]
    pub fn prefix_hit_owner(&self) -> Option<(RequestId, TenantId)> {
        self.prefix_hit_owner
    }

    #[inline]
    pub fn decode_prefix_tokens(&self) -> u64 {
        self.decode_prefix_tokens
    }

    /// The owner of the deepest block decode's radix cache served it (report only).
    #[inline]
    pub fn decode_prefix_owner(&self) -> Option<(RequestId, TenantId)> {
        self.decode_prefix_owner
    }

    /// Prompt tokens decode's radix cache served it at its resumptions, and the owner of the
    /// deepest block of the latest (report only).
    pub fn resumed_prefix(&self) -> (u64, Option<(RequestId, TenantId)>) {
        (self.resumed_prefix_tokens, self.resumed_prefix_owner)
    }

    #[inline]
    pub fn response(&self) -> Option<Response> {
        self.response
    }

    #[inline]
    pub fn caught_by(&self) -> Option<Mitigation> {
        self.caught_by
    }

    #[inline]
    pub fn detected_by(&self) -> Option<Mitigation> {
        self.detected_by
    }
}

/// What a leg's intake decided.
pub(crate) enum LegIntake {
    /// Queued with this many tokens (1 for a stub) and maybe a pending abort.
    Admitted { len: u64, pending_abort: Option<u16> },
    /// Finished at once with this status (the leg is answered).
    Rejected(u16),
    /// The node is down (the leg is answered 503).
    NodeDown,
}

/// Named limits of a run: a run that processes `event_limit(cfg)` events stops and its verdict
/// is `event_limit` (inconclusive: liveness is not judged), not a hang. The limit guards against
/// a runaway run (a livelock that keeps re-arming timers); it is not a bound a correct run comes
/// near, so it grows with the workload: `MAX_EVENTS` plus `EVENTS_PER_REQUEST` per request.
/// (A fixed 200M cut the 10M-request bench off about halfway: it ran to 379.9M events, ≈ 38
/// per request, once the limit grew.)
pub const MAX_EVENTS: u64 = 200_000_000;
/// See [`MAX_EVENTS`]: the limit's share per request of the workload.
pub const EVENTS_PER_REQUEST: u64 = 1_000;

/// Requests held at once at most: in flight (arrived, not yet finished and folded) in a run that
/// folds finished requests (`fold_finished`: `kvsim run`, `kvsim bench`), every arrived one in a
/// run that keeps them all (a trace, a check, a campaign draw). A run past it stops
/// as at its event limit (inconclusive, exit 13) and says why. A live request holds about a
/// kilobyte of state, so this bounds a run's memory near a gigabyte: 10M requests arriving at once
/// (a generator with a mean inter-arrival time of 0) aborted the process when allocation failed.
pub const MAX_IN_FLIGHT: usize = 1_000_000;

/// The event limit of a run of `cfg` (see [`MAX_EVENTS`]).
pub fn event_limit(cfg: &SimConfig) -> u64 {
    let requests = cfg.requests.len() as u64 + cfg.generator.as_ref().map_or(0, |g| u64::from(g.requests));
    MAX_EVENTS.saturating_add(EVENTS_PER_REQUEST.saturating_mul(requests))
}

/// The whole simulated deployment.
pub struct World {
    pub cfg: SimConfig,
    /// Virtual time: only `step` moves it (the event queue's order); outside the crate it is
    /// read through `now()`.
    pub(crate) now: Instant,
    queue: EventQueue,
    seq: u64,
    /// Arrivals not yet taken, merged with `queue` by `(time, sequence)` (`client::Arrivals`);
    /// `None` once the workload is queued whole (`materialize_arrivals`) or drained.
    pub(crate) arrivals: Option<crate::client::Arrivals>,
    pub reqs: crate::reqs::Reqs,
    pub prefill: Vec<PrefillNode>,
    pub decode: Vec<DecodeNode>,
    pub jobs: crate::transfer::Jobs,
    pub(crate) router: Router,
    pub(crate) rng_faults: Prng,
    pub oracle: Oracle,
    pub tracer: Tracer,
    pub check_invariants: bool,
    /// The scheduler's own state, read outside the crate through `events()`, `horizon()`,
    /// `ended_at()` and `event_limit_hit()`; written only by `World` (the liveness horizon
    /// through `extend_horizon`).
    pub(crate) events: u64,
    pub(crate) horizon: Instant,
    pub(crate) ended_at: Instant,
    /// Responses given so far and the time of the latest (report only: never traced, hashed or
    /// read by the model): a scripted crash after the last one changed no response.
    pub(crate) responses: u64,
    pub(crate) last_response_at: Instant,
    pub(crate) event_limit_hit: bool,
    /// The run stopped because more than [`MAX_IN_FLIGHT`] requests were in flight (then
    /// `event_limit_hit` too: the same inconclusive verdict).
    pub(crate) in_flight_limit_hit: bool,
    /// The in-flight limit of this run ([`MAX_IN_FLIGHT`] unless a test lowers it).
    pub max_in_flight: usize,
    /// The event limit of this run (`event_limit(&cfg)` unless a test lowers it).
    pub max_events: u64,
    /// How many more times the liveness horizon may move to a pending engine timer (set when the
    /// horizon is first reached; see `run`).
    horizon_extensions_left: Option<u64>,
    /// The run stopped because its next event lies past the horizon (`step`).
    past_horizon: bool,
    /// When `Some`, every attention read is also audited whole (see `ReadAudit`); off by default.
    /// Not part of the trace or its hash.
    pub read_audit: Option<Vec<crate::check::oracle::ReadAudit>>,
    /// The reference oracle, when the differential check is on (`enable_reference`).
    pub reference: Option<Box<crate::check::reference::Reference>>,
    /// Every prefix-cache eviction: (time, node, the evicted block's owner), prefill's radix cache
    /// and decode's — report only (never traced, hashed or read by the model), for the
    /// noninterference check's attribution.
    pub(crate) prefix_evictions: Vec<(Instant, NodeId, TenantId)>,
    /// Exhaustive exploration (`explore`): when `Some`, every random draw of the run (message
    /// latencies, fault decisions, random router picks, the order of simultaneous events) is a
    /// choice taken from this chooser instead of the seeded generators. `None` in every ordinary
    /// run, whose draws and trace hash are exactly those of the generators.
    pub chooser: Option<Box<crate::explore::Chooser>>,
    /// Liveness mode (`[faults] liveness_after_heal_ms`; `check::liveness`), `None` otherwise.
    pub liveness: Option<crate::check::liveness::Liveness>,
    /// Fold a finished request into its compact record once nothing points at it any more
    /// (`maybe_fold`; `reqs::Reqs`). Off by default; `kvsim run` and `kvsim bench` switch it on
    /// before `run`. Never under exploration, liveness mode or the reference oracle (they read
    /// every request).
    pub fold_finished: bool,
    /// Requests named by a violation (`oracle.violations[..violations_seen]`): kept whole, since
    /// the report's stories and the fuzzer's signatures read them.
    violators: std::collections::BTreeSet<RequestId>,
    /// Scratch for `decode_step_done`: the batch of the step being ended, its buffer reused.
    pub(crate) decode_batch: Vec<RequestId>,
    /// Scratch for `transfer::land_batch`: a batch's source contents and its traced page lists,
    /// their buffers reused from batch to batch (cleared before each use).
    pub(crate) land_scratch: crate::transfer::LandScratch,
    /// Scratch for a walk over a snapshot of a queue of requests (`prefill_tick`'s bootstrap and
    /// waiting queues): taken, filled, put back; cleared before each use.
    pub(crate) req_scratch: Vec<RequestId>,
    /// Scratch for a page list used and dropped in one handler (a prefill chunk's fresh pages):
    /// taken, filled, put back; cleared before each use.
    pub(crate) runs_scratch: Vec<Run>,
    /// Scratch for `decode_poll_transfers`' snapshot of the statuses come: likewise.
    pub(crate) poll_scratch: Vec<(RequestId, bool)>,
    /// The node whose step the event being handled ended (`tick_after_step`): it ticks next.
    step_tick: Option<NodeId>,
    violations_seen: usize,
    /// `wrong_status` verdicts of folded requests, judged when they were folded and recorded at
    /// the end in id order with the others (`check_statuses`).
    folded_statuses: std::collections::BTreeMap<u32, Violation>,
    /// The (event, state) edges this run visited, for coverage-guided campaigns (`coverage`);
    /// `None` (the probe skipped: no cost per event, no 16 KiB map) unless the caller switched it
    /// on before `run` — only guided campaigns read it (`fuzz::run_case_full`). Observation only:
    /// never traced, hashed, digested or read by the model, so it cannot change a run.
    pub coverage: Option<crate::coverage::Coverage>,
    /// Every random fault the seeded draws fired, as the scripted fault that reproduces it
    /// (`faults::World::batch_faults`, `maybe_random_crash`), deduplicated per request and
    /// kind, in the order they fired. Observation only (never traced, hashed or read by the
    /// model): the shrinker turns a case's random faults into a script with it.
    pub fired_faults: Vec<ScriptedFault>,
    /// Per `faults.script` entry naming a request: how many transfer batches that request
    /// scheduled (`None`: none), and whether the entry applied to one of them. Observation only
    /// (never traced, hashed or read by the model): the report names an entry that never applied
    /// (`World::unapplied_script`), such as a one-batch fault on a batch the request never had.
    pub(crate) script_seen: Vec<(Option<u32>, bool)>,
    /// Every lifecycle phase the model entered (`lifecycle`), for the pictures. Observation
    /// only: never traced, hashed, digested or read by the model. On (`Some`) when the tracer
    /// keeps its records in memory (`Tracer::collecting`), or when a caller sets it before `run`;
    /// `None` otherwise, where noting a phase is one branch (`World::phase`).
    pub lifecycle: Option<crate::lifecycle::PhaseLog>,
}

/// Tokens of the prefix blocks two requests' chains share (their KV there is the same content).
/// Either may have finished (a slot's writer often has): chains outlive folding.
pub fn common_chain_tokens(reqs: &crate::reqs::Reqs, a: RequestId, b: RequestId) -> u64 {
    let (ca, cb) = (reqs.chain(a.idx()), reqs.chain(b.idx()));
    let n = ca.iter().zip(cb).take_while(|(x, y)| x == y).count() as u64;
    n * crate::prefix::BLOCK_TOKENS
}

impl World {
    /// Every prefix-cache eviction so far: (time, node, the evicted block's cacher tenant), prefill's
    /// and decode's, oldest first (report only).
    pub fn prefix_evictions(&self) -> &[(Instant, NodeId, TenantId)] {
        &self.prefix_evictions
    }

    /// Virtual time: the time of the event being handled (of the last one, after the run).
    #[inline]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Events processed so far.
    #[inline]
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The liveness horizon: the last arrival plus the bound, moved to a pending engine timer
    /// (see `run`).
    pub fn horizon(&self) -> Instant {
        self.horizon
    }

    /// When the run ended (the last event's time).
    pub fn ended_at(&self) -> Instant {
        self.ended_at
    }

    /// The run stopped with more than [`MAX_IN_FLIGHT`] requests in flight (and so at its event
    /// limit: `event_limit_hit` is true too).
    pub fn in_flight_limit_hit(&self) -> bool {
        self.in_flight_limit_hit
    }

    /// The run stopped at its event limit (`max_events`): an inconclusive verdict.
    pub fn event_limit_hit(&self) -> bool {
        self.event_limit_hit
    }

    /// Moves the liveness horizon to `t` if that is later (liveness mode's heal bound).
    pub(crate) fn extend_horizon(&mut self, t: Instant) {
        self.horizon = self.horizon.max(t);
    }

    pub fn new(cfg: SimConfig, tracer: Tracer) -> World {
        let k = &cfg.knobs;
        let prefill =
            (0..cfg.prefill.len()).map(|i| PrefillNode::new(PrefillIdx(i as u16), &cfg.prefill[i], k)).collect();
        let decode = (0..cfg.decode.len()).map(|i| DecodeNode::new(DecodeIdx(i as u16), &cfg.decode[i], k)).collect();
        let max_events = event_limit(&cfg);
        let mut w = World {
            router: Router::new(cfg.seed, cfg.router_policy),
            rng_faults: Prng::child(cfg.seed, "faults"),
            fired_faults: Vec::new(),
            script_seen: vec![(None, false); cfg.faults.script.len()],
            cfg,
            now: Instant(0),
            queue: EventQueue::default(),
            seq: crate::client::RUN_SEQ_BASE,
            arrivals: None,
            reqs: Default::default(),
            prefill,
            decode,
            jobs: Default::default(),
            oracle: Oracle::default(),
            tracer,
            check_invariants: false,
            events: 0,
            horizon: Instant(0),
            ended_at: Instant(0),
            responses: 0,
            last_response_at: Instant(0),
            event_limit_hit: false,
            max_events,
            in_flight_limit_hit: false,
            max_in_flight: MAX_IN_FLIGHT,
            horizon_extensions_left: None,
            past_horizon: false,
            read_audit: None,
            reference: None,
            prefix_evictions: Vec::new(),
            chooser: None,
            liveness: None,
            coverage: None,
            fold_finished: false,
            violators: Default::default(),
            decode_batch: Vec::new(),
            land_scratch: Default::default(),
            req_scratch: Vec::new(),
            runs_scratch: Vec::new(),
            poll_scratch: Vec::new(),
            step_tick: None,
            violations_seen: 0,
            folded_statuses: Default::default(),
            lifecycle: None,
        };
        if w.tracer.collected.is_some() {
            w.lifecycle = Some(Vec::new());
        }
        let last = w.build_workload();
        // Only explicit requests carry prefix blocks (the generator's have none).
        w.horizon = last + Duration::from_s(w.cfg.liveness_bound_s);
        if w.cfg.faults.liveness_after_heal_ms.is_some() {
            // Liveness mode reads every request's deadline from the start.
            w.materialize_arrivals();
        }
        w.liveness = crate::check::liveness::Liveness::new(&mut w);
        let mut crash_seq = crate::client::CRASH_SEQ_BASE;
        for f in w.cfg.faults.script.clone() {
            if let ScriptedFault::Crash { at_ms, node, restart_after_ms } = f {
                let node = w.parse_node(&node).expect("validated node name");
                crash_seq += 1;
                w.push_event(Instant(0) + Duration::from_ms(at_ms), crash_seq, Ev::Crash { node, restart_after_ms });
            }
        }
        w
    }

    pub fn parse_node(&self, s: &str) -> Option<NodeId> {
        let (role, idx) = s.rsplit_once('-')?;
        let index: u16 = idx.parse().ok()?;
        let (role, n) = match role {
            "prefill" => (Role::Prefill, self.cfg.prefill.len()),
            "decode" => (Role::Decode, self.cfg.decode.len()),
            _ => return None,
        };
        (usize::from(index) < n).then_some(NodeId { role, index })
    }

    /// Schedules `ev` at absolute time `at` (never in the past).
    #[inline(always)]
    pub fn at(&mut self, at: Instant, ev: Ev) {
        let at = at.max(self.now);
        self.count_pending(&ev);
        self.seq += 1;
        self.queue.push(Scheduled { at, seq: self.seq, ev });
    }

    /// Counts a queued event on the request it names (`Req::pending_events`).
    #[inline(always)]
    pub(crate) fn count_pending(&mut self, ev: &Ev) {
        if let Some(r) = ev.request() {
            match self.reqs.get_mut(r.idx()) {
                Some(q) => q.pending_events += 1,
                None => debug_assert!(false, "an event for request {} after it was folded: {ev:?}", r.0),
            }
        }
    }

    /// Queues `ev` with a given sequence number (the workload's arrivals and aborts, scripted
    /// crashes: `client::CRASH_SEQ_BASE`; the caller counted it).
    pub(crate) fn push_event(&mut self, at: Instant, seq: u64, ev: Ev) {
        self.queue.push(Scheduled { at, seq, ev });
    }

    /// The next event by `(time, sequence)`: the queue's first or the next arrival, whichever
    /// comes first (an arrival taken here has its `Req` created and its abort queued).
    fn pop_next(&mut self) -> Option<Scheduled> {
        let head = self.arrivals.as_mut().and_then(|a| a.head());
        if let Some(key) = head {
            // The queue's head unless the arrival comes first (the queue empty, or `key` before it).
            if let Some(s) = self.queue.pop_not_after(key) {
                return Some(s);
            }
            let (at, seq, ev) = self.take_arrival().expect("a head to take");
            return Some(Scheduled { at, seq, ev });
        } else if self.arrivals.is_some() {
            self.arrivals = None;
        }
        self.queue.pop()
    }

    pub fn after(&mut self, d: Duration, ev: Ev) {
        if let Ev::Timeout { .. } = ev {
            // A timer: into the queue's lane for its delay (`queue`), which keeps the heap shallow.
            self.count_pending(&ev);
            self.seq += 1;
            self.queue.push_timer(d, Scheduled { at: self.now + d, seq: self.seq, ev });
        } else {
            self.at(self.now + d, ev);
        }
    }

    /// A leg reaching its node: a dead node answers 503; otherwise the intake checks run against
    /// the node's pool. Rejections are recorded on the request and answer the leg.
    pub(crate) fn leg_intake(&mut self, r: RequestId, node: NodeId, pool_tokens: u64, alive: bool) -> LegIntake {
        if !alive {
            self.reqs[r.idx()].fault_touched = true;
            self.leg_result(r, node.role, 503);
            return LegIntake::NodeDown;
        }
        match crate::intake::intake(
            &self.cfg.knobs,
            self.cfg.context_len,
            pool_tokens,
            self.reqs[r.idx()].prompt_tokens,
        ) {
            crate::intake::Intake::Accept(len) => LegIntake::Admitted { len, pending_abort: None },
            crate::intake::Intake::Stub { status, reason } => {
                self.reqs[r.idx()].rejected.get_or_insert((status, node, reason));
                LegIntake::Admitted { len: 1, pending_abort: Some(status) }
            }
            crate::intake::Intake::Reject { status, reason } => {
                self.reqs[r.idx()].rejected.get_or_insert((status, node, reason));
                self.leg_result(r, node.role, status);
                LegIntake::Rejected(status)
            }
        }
    }

    /// One message's latency: the cost model's constant, or under exploration a choice among
    /// the explored latencies (one choice per message).
    pub fn msg_latency(&mut self) -> Duration {
        if let Some(c) = self.chooser.as_mut() {
            if let Some(us) = c.latency() {
                return Duration::from_us(us);
            }
        }
        Duration::from_us(self.cfg.cost.message_latency_us)
    }

    pub fn page_size(&self) -> u64 {
        self.cfg.knobs.page_size
    }

    pub fn pages_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.page_size())
    }

    pub fn tick(&mut self, node: NodeId) {
        if self.arm_tick(node) {
            self.after(Duration(0), Ev::Tick { node });
        }
    }

    /// Arms the node's tick; `false` when one is pending already.
    fn arm_tick(&mut self, node: NodeId) -> bool {
        match node.idx() {
            NodeIdx::Prefill(p) => self.prefill[p.at()].life_mut().arm_tick(),
            NodeIdx::Decode(d) => self.decode[d.at()].life_mut().arm_tick(),
        }
    }

    /// A node's step ended (a decode step, a prefill forward pass) and it ticks again now. When
    /// nothing else is due at this instant the tick runs at once, without being queued: queued, it
    /// would be the very next event (queued last, and nothing else due before it), so the state it
    /// leaves is the same, minus a queue round trip and a `Tick` record (issue 14: no event for a
    /// node whose step simply starts the next). Its coverage probe and invariant check run as for
    /// a queued tick, so guided campaigns see the same edges. A tick already queued runs as queued;
    /// under exploration (which reorders the events due at one instant) and at the event limit the
    /// tick is queued as before. Liveness mode's check before each event (`liveness_stop`) cannot
    /// stop the run at a tick due at the instant of the event it just let through (its deadlines
    /// are strict, its quiescence check moves past that instant), so liveness mode inlines too.
    pub(crate) fn tick_after_step(&mut self, node: NodeId) {
        // Run once the step's event is fully handled (its coverage probe and invariants), where the
        // queued tick would have been popped: `step` takes it from here.
        debug_assert!(self.step_tick.is_none(), "one step ends per event");
        self.step_tick = Some(node);
    }

    /// The tick of `tick_after_step`, after its step's event: run at once or queued.
    fn run_step_tick(&mut self, node: NodeId) {
        let inline =
            self.chooser.is_none() && self.events + 1 < self.max_events && self.next_due().is_none_or(|t| t > self.now);
        if !inline {
            return self.tick(node);
        }
        if self.coverage.is_none() && !self.check_invariants {
            // No probe or check to run around the tick: a decode node's usual tick is only the
            // next step's start (`decode_usual_tick`).
            if let NodeIdx::Decode(d) = node.idx() {
                if self.decode_usual_tick(d) {
                    return;
                }
            }
        }
        if !self.arm_tick(node) {
            return; // a tick is queued: it runs in its turn
        }
        let ev = Ev::Tick { node };
        // A tick that finds the node idle does what a queued one does (`moot`): nothing, and the
        // next change re-arms it.
        if !self.moot(&ev, self.now) {
            self.handle(ev);
        }
    }

    /// When the next event is due: the queue's head or the next arrival, whichever is first.
    fn next_due(&mut self) -> Option<Instant> {
        let arrival = self.arrivals.as_mut().and_then(|a| a.head()).map(|(at, _)| at);
        match (arrival, self.queue.peek().map(|s| s.at)) {
            (Some(a), Some(q)) => Some(a.min(q)),
            (a, q) => a.or(q),
        }
    }

    pub fn mem(&mut self, op: MemOp) {
        if self.reference.is_some() {
            self.mem_reference(&op);
        }
        self.tracer.record(self.now, TraceRecord::Mem(op));
    }

    /// `mem` of `op.with(pool, r, pages)` from borrowed pages: copied only where something keeps
    /// the operation (a reference oracle, a trace sink or collector), hashed in place otherwise.
    #[inline]
    pub(crate) fn mem_page_list(&mut self, op: PageListOp, pool: PoolId, r: RequestId, pages: &[Run]) {
        if self.reference.is_some() {
            return self.mem(op.with(pool, r, pages.to_vec()));
        }
        self.tracer.record_page_list(self.now, op, pool, r, pages);
    }

    /// `mem`, handing the operation back when the trace only hashes it (every run without a
    /// sink or collector), so a hot caller reuses its page lists (`transfer::land_batch`).
    /// (`mem` written as a call of this measured 0.4% more instructions on every bench row.)
    #[inline]
    pub(crate) fn mem_returning(&mut self, op: MemOp) -> Option<MemOp> {
        if self.reference.is_some() {
            self.mem_reference(&op);
        }
        match self.tracer.record_returning(self.now, TraceRecord::Mem(op)) {
            Some(TraceRecord::Mem(op)) => Some(op),
            _ => None,
        }
    }

    /// Notes that `r` entered `phase` on `lane` now (`lifecycle`); nothing when the log is off.
    #[inline]
    pub(crate) fn phase(&mut self, r: RequestId, lane: crate::lifecycle::Lane, phase: crate::lifecycle::Phase) {
        if let Some(l) = self.liveness.as_mut() {
            l.phase_changed(r, lane, phase, self.now);
        }
        if let Some(log) = self.lifecycle.as_mut() {
            log.push(crate::lifecycle::PhaseRecord { at: self.now, seq: self.tracer.position(), r, lane, phase });
        }
    }

    /// One request's token of the decode step under way (see `MemOp::DecodeStep`): the reference
    /// oracle sees the records it stands for at once, the trace one batch record per step.
    #[inline(always)]
    pub fn mem_decode(&mut self, pool: PoolId, e: DecodeEntry) {
        if self.reference.is_some() {
            for op in e.expand(pool) {
                self.mem_reference(&op);
            }
        }
        self.tracer.decode_entry(self.now, pool, e);
    }

    /// Feeds a memory operation to the reference oracle (off the fast path).
    #[cold]
    #[inline(never)]
    fn mem_reference(&mut self, op: &MemOp) {
        let chain_upto = match op {
            MemOp::Write { pool, r, .. } => match pool.idx() {
                NodeIdx::Prefill(p) => self.prefill[p.at()].reqs().get(r).map_or(0, |x| x.chain_upto()),
                // A retracted request's restored KV (`decode::decode_resume`) keeps its chain bound;
                // decode tokens lie past it, so the bound changes nothing for them.
                NodeIdx::Decode(d) => self.decode[d.at()].reqs().get(r).map_or(0, |x| x.chain_upto()),
            },
            _ => 0,
        };
        let now = self.now;
        if let Some(rf) = self.reference.as_mut() {
            rf.apply(now, op, chain_upto);
        }
    }

    /// Tokens of a leg of `len` prompt tokens whose KV its prefix chain fixes: its full 512-token
    /// prefix blocks (none for a one-token stub, whose KV is not the prompt's).
    pub fn chain_upto(&self, r: RequestId, len: u64, stub: bool) -> u64 {
        if stub {
            return 0;
        }
        let blocks = self.reqs[r.idx()].prefix_blocks.len() as u64;
        blocks.min(len / crate::prefix::BLOCK_TOKENS) * crate::prefix::BLOCK_TOKENS
    }

    /// Turns the differential check on: a reference oracle shadows every pool from now on (call
    /// before `run`).
    pub fn enable_reference(&mut self) {
        let pools: Vec<(PoolId, u32, u64, bool)> = self
            .prefill
            .iter()
            .map(|p| (p.id(), p.pool().pages, p.pool().page_size))
            .chain(self.decode.iter().map(|d| (d.id(), d.pool().pages, d.pool().page_size)))
            .map(|(id, pages, ps)| (id, pages, ps, self.cfg.knobs.zero_on_free))
            .collect();
        // The reference is told every request up front.
        self.materialize_arrivals();
        let reqs = self.reqs.iter().map(|r| (r.tenant, r.prefix_blocks.clone())).collect();
        let mut rf = crate::check::reference::Reference::new(&pools, reqs);
        rf.decode_radix_cache = self.cfg.knobs.decode_radix_cache.on();
        self.reference = Some(Box::new(rf));
    }

    /// Compares the fast oracle's verdict on a whole read (`fast`, positions `[0, seq_len)` of
    /// `table`) with the reference's; a difference is recorded as a disagreement.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    pub(crate) fn differential_read(
        &mut self,
        pool: PoolId,
        r: RequestId,
        table: &[Run],
        seq_len: u64,
        chain_upto: u64,
        fast: &crate::check::oracle::Tally,
        what: &'static str,
    ) {
        let now = self.now;
        if let Some(rf) = self.reference.as_mut() {
            rf.compare_read(now, pool, r, table, seq_len, chain_upto, fast, what);
        }
    }

    /// The pages of `runs` in `pool` that hold a slot never written (zeros).
    fn pages_with_zeros(&self, pool: PoolId, runs: &[Run]) -> Vec<Run> {
        let p = match pool.idx() {
            NodeIdx::Decode(n) => self.decode[n.at()].pool(),
            NodeIdx::Prefill(n) => self.prefill[n.at()].pool(),
        };
        let ps = p.page_size;
        let mut out = Vec::new();
        for (s, e, w) in p.page_contents(runs) {
            if w.is_none() {
                let first = (s / ps) as u32;
                let end = e.div_ceil(ps) as u32;
                crate::pool::push_run(&mut out, Run { first, count: end - first });
            }
        }
        out
    }

    /// Records use-after-free for writes that landed in pages the writer does not hold, and
    /// marks the current holders for a full re-check of their next read.
    #[inline]
    pub fn note_foreign_writes(&mut self, pool: PoolId, writer: RequestId, rep: WriteReport, what: &str) {
        // Every decode token comes here; nearly every write is clean.
        if !rep.foreign.is_empty() {
            self.note_foreign_writes_found(pool, writer, rep, what);
        }
    }

    #[cold]
    #[inline(never)]
    fn note_foreign_writes_found(&mut self, pool: PoolId, writer: RequestId, rep: WriteReport, what: &str) {
        let mut victims = Vec::new();
        let mut runs = Vec::new();
        let mut cached = Vec::new();
        // Each victim's pages the write landed in.
        let mut landed: Vec<(RequestId, Run)> = Vec::new();
        for (run, holder) in &rep.foreign {
            runs.push(*run);
            match holder {
                Some(crate::pool::Holder::Req(v)) => {
                    victims.push(*v);
                    landed.push((*v, *run));
                }
                Some(crate::pool::Holder::Cache(_)) => cached.push(*run),
                None => {}
            }
        }
        // Pages a radix cache holds are read by the requests that locked their blocks
        // (`borrowed`: the pages start their block tables, but the cache holds them). A write
        // landing there changes what those requests read, as it does for a holder: they are
        // victims too, and a decode reader's next read must re-read the whole range (without the
        // flag the fast oracle kept the verdict of the read before the write while the reference
        // re-read it: `oracle_disagreement/decode_read`, blind seed 9,035,506). The blocks
        // remember the write, so that a request locking them later is late-written as well. A
        // transfer's read of a source page changes nothing there.
        crate::pool::merge_runs(&mut runs);
        crate::pool::merge_runs(&mut cached);
        let wrote = what != SOURCE_READ;
        let lagged_writer = self.reqs[writer.idx()].lagged;
        let timed_out_writer = self.reqs[writer.idx()].outlived_call;
        // A transfer lands whole pages, so right after it every unwritten slot of a page it landed
        // in is one it copied (the unwritten tail of its last source page): those pages are
        // where its late write can make a reader's slots uninitialized.
        let zeros = if what == TRANSFER_WRITE { self.pages_with_zeros(pool, &runs) } else { Vec::new() };
        let locked = match pool.idx() {
            _ if !wrote || cached.is_empty() => Vec::new(),
            NodeIdx::Decode(n) => {
                let node = &mut self.decode[n.at()];
                node.prefix_mut().mark_late_written(&cached, lagged_writer, timed_out_writer, &zeros);
                locked_pages_hit(node.reqs(), |d| (d.borrowed(), d.pages()), &cached)
            }
            NodeIdx::Prefill(n) => {
                let node = &mut self.prefill[n.at()];
                node.prefix_mut().mark_late_written(&cached, lagged_writer, timed_out_writer, &zeros);
                locked_pages_hit(node.reqs(), |p| (p.borrowed(), p.pages()), &cached)
            }
        };
        let readers: Vec<RequestId> = locked.iter().filter(|(_, p)| !p.is_empty()).map(|(r, _)| *r).collect();
        // Pages a request holds outright (before the cache's readers are added), each once.
        let held = {
            let mut runs: Vec<Run> = landed.iter().map(|(_, r)| *r).collect();
            crate::pool::merge_runs(&mut runs);
            crate::pool::pages_in(&runs)
        };
        landed.extend(locked.into_iter().flat_map(|(r, pages)| pages.into_iter().map(move |p| (r, p))));
        victims.extend_from_slice(&readers);
        victims.sort();
        victims.dedup();
        if self.coverage.is_some() {
            self.cover_foreign_write(pool, writer, &victims, lagged_writer);
        }
        // A source read changes nothing in the pages it read: their holders are the violation's
        // victims (whose KV it read), not late-written (a `--hardware-faults` vllm-nixl campaign's
        // seed 59,688: request 0's stalled read of a source page request 1 then held marked
        // request 1 late-written, and its decode read of stale KV under its own visibility lag
        // was named `cross_tenant_read/late_write` instead of `…/visibility_lag`).
        let late_written: &[RequestId] = if wrote { &victims } else { &[] };
        for v in late_written {
            // A holder that has finished and been folded (its pages leaked) keeps no flags.
            if let Some(q) = self.reqs.get_mut(v.idx()) {
                let pages = landed.iter().filter(|(r, _)| r == v).map(|(_, p)| *p).collect();
                let late = crate::prefix::LateWrites::new(lagged_writer, timed_out_writer, pages).with_zeros(&zeros);
                q.note_late_writes(&late, pool);
            }
            if let NodeIdx::Decode(n) = pool.idx() {
                if let Some(d) = self.decode[n.at()].req_mut(*v) {
                    d.foreign_write();
                }
            }
        }
        // A transfer landing only in pages the writer still attends over, some of which decode's
        // cache indexed already, is its own KV arriving late, not a write into memory it gave up:
        // vLLM 0.34.0 caches a loaded block when the load is reported done
        // (`v1/core/kv_cache_manager.py` `cache_blocks`), and a lagged batch lands after. The
        // requests that hit those blocks meanwhile are told above (their reads judge what they
        // saw); no use after free is recorded (a `--hardware-faults` campaign's shrunk
        // `use_after_free/transfer_write/visibility_lag`, one request alone, which then read its
        // own KV).
        if what == TRANSFER_WRITE && held == 0 {
            if let NodeIdx::Decode(n) = pool.idx() {
                if self.decode[n.at()].reqs().get(&writer).is_some_and(|d| d.table_holds(&runs)) {
                    return;
                }
            }
        }
        let cause = what.replace(' ', "_");
        if self.oracle.counted_again(Kind::UseAfterFree, writer, pool, &cause) {
            return;
        }
        let req = &self.reqs[writer.idx()];
        let victim_tenants = {
            let mut t: Vec<TenantId> = victims.iter().map(|v| self.reqs.tenant(v.idx())).collect();
            t.sort();
            t.dedup();
            t
        };
        let total = crate::pool::pages_in(&runs);
        // A source read lands nowhere: it read pages the request gave up.
        let verb = if what == SOURCE_READ { ": it read" } else { " landed in" };
        let detail = format!(
            "{what} by request {}{verb} {total} page(s) it no longer holds{}",
            writer.0,
            where_it_landed(&victims, &readers, (held, crate::pool::pages_in(&cached), total), pool.role_name())
        );
        self.oracle.record(
            Violation::new(Kind::UseAfterFree, cause, self.now)
                .request(writer, req.tenant)
                .victims(victim_tenants)
                .pool(pool)
                .runs(&runs)
                .detail(detail),
        );
    }

    /// Coverage (guided campaigns only) of a write that landed in pages its writer no longer
    /// holds: whose pages they are now (free, the writer's own again, a request of the writer's
    /// tenant, another tenant's) and that holder's decode phase. A late write is the first step
    /// of the `late_write` family; which request it hits, and in which phase, is the step a
    /// corpus climbs next (a holder that will still read is the one that turns it into a bad
    /// read), and the event's own edges do not name the victim.
    fn cover_foreign_write(&mut self, pool: PoolId, writer: RequestId, victims: &[RequestId], lagged: bool) {
        let role = (pool.role == Role::Decode) as u64;
        let writer_tenant = self.reqs.tenant(writer.idx());
        let mut edges: Vec<[u64; 5]> = victims
            .iter()
            .map(|v| {
                let class = if *v == writer {
                    0
                } else if self.reqs.tenant(v.idx()) == writer_tenant {
                    1
                } else {
                    2
                };
                let phase = match pool.idx() {
                    NodeIdx::Decode(n) => self.decode[n.at()].reqs().get(v).map_or(0, |d| 1 + d.phase() as u64),
                    NodeIdx::Prefill(n) => self.prefill[n.at()].reqs().get(v).map_or(0, |p| 1 + p.phase() as u64),
                };
                [5, role, class, phase, lagged as u64]
            })
            .collect();
        if victims.is_empty() {
            edges.push([5, role, 3, 0, lagged as u64]);
        }
        if let Some(c) = self.coverage.as_mut() {
            for e in &edges {
                c.hit(e);
            }
        }
    }

    pub fn note_bad_frees(&mut self, pool: PoolId, by: RequestId, bad: Vec<crate::pool::BadFree>) {
        if bad.is_empty() {
            return;
        }
        let runs: Vec<Run> = bad.iter().map(|b| b.pages).collect();
        self.oracle.record(
            Violation::new(Kind::DoubleFree, "release", self.now)
                .request(by, self.reqs[by.idx()].tenant)
                .pool(pool)
                .all_runs(runs)
                .detail(format!("request {} freed pages it did not hold", by.0)),
        );
    }

    pub fn read_ctx(&self, pool: PoolId, reader: RequestId, seq_len: u64, pages_read: u64) -> ReadCtx {
        let r = &self.reqs[reader.idx()];
        // The mechanism behind a bad read, most specific first.
        let cause = if r.rejected.is_some() {
            "stub_commit"
        } else if r.late_written() {
            "late_write"
        } else {
            Self::cause_but_late_write(r)
        };
        // A late-written reader's bad slots outside the pages the late writes hit in this pool
        // have the mechanism it would have without them.
        let (late, late_zero, fallback) = if cause == "late_write" {
            let (late, zero) = r.late_pages_in(pool);
            (late, zero, Self::cause_but_late_write(r))
        } else {
            (Vec::new(), Vec::new(), cause)
        };
        let late_zero_anywhere = !r.late_zero_pages.is_empty();
        ReadCtx {
            at: self.now,
            pool,
            reader,
            tenant: r.tenant,
            seq_len,
            pages_read,
            cause,
            late,
            late_zero,
            late_zero_anywhere,
            fallback,
        }
    }

    /// A read's mechanism after `stub_commit` and `late_write` (`read_ctx`). A reader whose
    /// locked cached blocks a lagged transfer writes into (`late_writers.0`) reads there what the
    /// lag has not made visible yet, as a lagged reader does in its own pages: vLLM's decode
    /// caches a loaded request's blocks when the connector reports the load done
    /// (`decode_prefix_index_loaded`), so a request hitting them before the data is visible reads
    /// zeros or stale KV; before the forty-second session such a read was `decode_prefix_cache`.
    fn cause_but_late_write(r: &Req) -> &'static str {
        if r.lagged || r.late_writers.0 {
            "visibility_lag"
        } else if r.decode_prefix_tokens > 0 || r.resumed_prefix_tokens > 0 {
            // Its prefix came from decode's radix cache (`decode_radix_cache = on`), which holds
            // what the blocks' first request left there: a stub-committed request's blocks were
            // never written (blind campaign seed 1,000,363: three readers of zeros and a
            // neighbour's slot, labelled `other` before).
            "decode_prefix_cache"
        } else {
            "other"
        }
    }

    /// Runs until the queue drains or the horizon passes, then checks liveness.
    ///
    /// The horizon is the last arrival plus `liveness_bound_s`. A request still open there whose
    /// engine has armed a timer that ends it (prefill's bootstrap timer, decode's waiting-for-KV
    /// timer: 300 s each in sglang, `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` /
    /// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, sglang 0.5.22 wheel `environ.py`) is not a hang:
    /// the released engine answers it when the timer fires. The horizon then moves to that timer
    /// plus the bound again, so a queue that drains one timeout at a time (decode reservations
    /// nobody will fill, held 300 s each behind a router that waits for decode) runs to its end.
    /// A leg's result already in flight to the router counts the same way, and so does a transfer
    /// still in flight (its `TransferDone`: the sender holds its pages until then, so they are not
    /// a leak at the horizon). A request with neither
    /// is judged at the horizon as before; one that moved it is judged again at the new horizon,
    /// so moving it never hides a hang.
    pub fn run(&mut self) {
        while self.step() {}
        self.finish();
    }

    /// Processes the next event; `false` when the queue is drained, the horizon passed or the
    /// event limit was hit (then call `finish`). Under exploration with event ordering on, the
    /// event is a choice among the distinct events due at the earliest time.
    pub fn step(&mut self) -> bool {
        if self.chooser.is_some() && self.arrivals.is_some() {
            // Exploration reorders among every event due at one time and digests the pending
            // ones: the workload is queued whole.
            self.materialize_arrivals();
        }
        let Some(mut s) = self.pop_next() else {
            return false;
        };
        // Liveness mode (check::liveness): a missed deadline, quiescence or the leak deadline,
        // judged with this event still pending (a failing batch's only event, its `TransferDone`,
        // is work in flight; a land about to run is not quiescence). Liveness mode queues the
        // workload whole, so the queue gives the same event back.
        if self.liveness.is_some() {
            let at = s.at;
            self.queue.push(s);
            if self.liveness_stop(at) {
                return false;
            }
            s = self.queue.pop().expect("the event just queued");
        }
        if s.at > self.horizon {
            if self.moot_past_horizon(&s) {
                return true;
            }
            self.queue.push(s);
            self.past_horizon = true;
            // Each extension is owed to a distinct pending timer; the cap only guards a livelock
            // that keeps re-arming timers without ending anything.
            let left = *self.horizon_extensions_left.get_or_insert(4 * self.reqs.len() as u64 + 16);
            if left > 0 {
                if let Some(t) = self.pending_ending_event() {
                    self.horizon_extensions_left = Some(left - 1);
                    self.horizon = t + Duration::from_s(self.cfg.liveness_bound_s);
                    self.past_horizon = false;
                    return true;
                }
            }
            return false;
        }
        if self.events >= self.max_events {
            self.event_limit_hit = true;
            return false;
        }
        if self.chooser.as_ref().is_some_and(|c| c.reorders_used < c.bounds.max_reorders) {
            s = self.choose_simultaneous(s);
        }
        let named = s.ev.request();
        let job_req = self.job_request(&s.ev);
        if self.moot(&s.ev, s.at) {
            self.consumed(named, job_req);
            return true;
        }
        self.now = s.at;
        self.events += 1;
        self.tracer.record_event(self.now, &s.ev);
        self.handle(s.ev);
        if let Some(l) = self.liveness.as_mut() {
            // Liveness is progress: a batch of a request's transfer read, landed or done (other
            // events naming a request, such as polls and timers, are not).
            l.progressed(job_req, self.now);
        }
        self.consumed(named, job_req);
        if let Some(node) = self.step_tick.take() {
            self.run_step_tick(node);
        }
        true
    }

    /// An event past the horizon that would do nothing (a timer whose request moved on, an idle
    /// node's tick, a job's stale end) is consumed as `step` consumes a moot event, and is no
    /// reason to stop watching: a run whose only events left are such ends with its last event,
    /// not at the horizon (its reported end moved with `liveness_bound_s`, the run unchanged). The
    /// state it is judged against is the one it would meet later: no event comes before it.
    fn moot_past_horizon(&mut self, s: &crate::engine::queue::Scheduled) -> bool {
        // A stale `TransferDone`'s request, read before `moot` retires its job: it may fold then.
        let job_req = self.job_request(&s.ev);
        if !self.moot(&s.ev, s.at) {
            return false;
        }
        self.consumed(s.ev.request(), job_req);
        true
    }

    /// A transfer event's request, for folding it once the event is consumed (read before it is
    /// handled: the job may leave meanwhile); `None` when nothing folds.
    #[inline(always)]
    fn job_request(&self, ev: &Ev) -> Option<RequestId> {
        match *ev {
            Ev::TransferRead { job, .. } | Ev::TransferLand { job, .. } | Ev::TransferDone { job, .. }
                if self.fold_finished || self.liveness.is_some() =>
            {
                self.jobs.get(job).map(|j| j.request())
            }
            _ => None,
        }
    }

    /// Handles an event that is not moot: its coverage probe (guided campaigns), its handler, and
    /// under `--check invariants` every component's invariants after it.
    #[inline(always)]
    fn handle(&mut self, ev: Ev) {
        let probe = self.coverage.is_some().then(|| crate::coverage::Probe::before(self, &ev));
        self.dispatch(ev);
        if let Some(probe) = probe {
            probe.after(self);
        }
        if self.check_invariants {
            self.invariants();
        }
    }

    /// An event was handled or dropped: it no longer pends on its request, which may now fold.
    #[inline(always)]
    fn consumed(&mut self, named: Option<RequestId>, job_req: Option<RequestId>) {
        if let Some(r) = named {
            if let Some(q) = self.reqs.get_mut(r.idx()) {
                q.pending_events -= 1;
            }
        }
        if self.fold_finished {
            for r in named.into_iter().chain(job_req) {
                self.maybe_fold(r);
            }
        }
    }

    /// Folds request `r` (`reqs::Reqs::fold`) when it is answered and nothing can read it whole
    /// any more: no queued event names it, no node holds it, no transfer job of it is in flight,
    /// and no violation names it (the report's stories read those whole). Its `wrong_status`
    /// verdict is judged now, from what `check_statuses` would read at the end (all of it final:
    /// the router answers once), and recorded then in its place. Every request's last event
    /// names it (its answer, a late abort or timer, or its transfer's), so each is looked at
    /// again after its last event; one that still fails a condition then stays whole.
    fn maybe_fold(&mut self, r: RequestId) {
        if self.chooser.is_some() || self.liveness.is_some() || self.reference.is_some() {
            return;
        }
        let Some(q) = self.reqs.get(r.idx()) else { return };
        if q.response.is_none() || q.pending_events > 0 {
            return;
        }
        let held = self.prefill.get(q.prefill.at()).is_some_and(|p| p.reqs().contains_key(&r))
            || self.decode.get(q.decode.at()).is_some_and(|d| d.reqs().contains_key(&r));
        if held || self.jobs.any_for(r) {
            return;
        }
        for v in &self.oracle.violations[self.violations_seen..] {
            if let Some(x) = v.request {
                self.violators.insert(x);
            }
        }
        self.violations_seen = self.oracle.violations.len();
        if self.violators.contains(&r) {
            return;
        }
        if let Some(v) = wrong_status(q) {
            self.folded_statuses.insert(r.0, v);
        }
        self.reqs.fold(r.idx());
    }

    /// An event that would change nothing if processed: a timer whose request has moved on (left
    /// the node, changed phase, or belongs to a crashed incarnation), a tick of a node with no
    /// work, or the second end of a transfer job that already ended. It is dropped unprocessed:
    /// not traced, not counted, and it does not move the clock, so virtual time ends with the last
    /// event that did something. Each predicate lives beside its handler, which uses it too, so
    /// the two cannot drift apart. Such events stay queued until popped (lazy cancellation), so
    /// the horizon's view of armed timers (`pending_ending_event`) is what it was.
    #[inline(always)]
    fn moot(&mut self, ev: &Ev, at: Instant) -> bool {
        match *ev {
            Ev::Timeout { r, timer, node, epoch } => match node.idx() {
                NodeIdx::Prefill(p) => self.prefill_timeout_moot(r, timer, p, epoch),
                NodeIdx::Decode(d) => self.decode_timeout_moot(r, timer, d, epoch, at),
            },
            Ev::Tick { node } => {
                let idle = match node.idx() {
                    NodeIdx::Prefill(p) => self.prefill[p.at()].tick_idle(),
                    NodeIdx::Decode(d) => self.decode[d.at()].tick_idle(),
                };
                if idle {
                    // What the tick would have done: let the next change schedule a tick again.
                    match node.idx() {
                        NodeIdx::Prefill(p) => self.prefill[p.at()].life_mut().disarm_tick(),
                        NodeIdx::Decode(d) => self.decode[d.at()].life_mut().disarm_tick(),
                    }
                }
                idle
            }
            // A job already ended (an abort ended it, or an earlier `TransferDone` at the same
            // instant did): its other scheduled end does nothing but count itself off the job,
            // which `transfer_done` does. Handled here, it is not traced: a trace showed the job
            // ending twice, `ok: true` then a stale `ok: false`.
            Ev::TransferDone { job, ok } if self.jobs.get(job).is_some_and(|j| j.is_done()) => {
                self.transfer_done(job, ok);
                true
            }
            _ => false,
        }
    }

    /// Under exploration: the events due at `first.at`, distinct by content, in sequence order;
    /// one is chosen, the others go back to the queue.
    fn choose_simultaneous(&mut self, first: Scheduled) -> Scheduled {
        let mut same = vec![first];
        while self.queue.peek().is_some_and(|n| n.at == same[0].at) {
            let Some(n) = self.queue.pop() else { break };
            same.push(n);
        }
        let mut distinct: Vec<usize> = Vec::new();
        for i in 0..same.len() {
            // A transfer's completion is never reported before its data lands at the same
            // instant (every ordinary run orders them so; data visible after the report is the
            // `visibility_lag` fault, explored as a fault).
            let waits_for_land = matches!(same[i].ev, Ev::TransferDone { job, .. }
                if same.iter().any(|o| matches!(o.ev, Ev::TransferLand { job: j, .. } | Ev::TransferRead { job: j, .. } if j == job)));
            if !waits_for_land && !distinct.iter().any(|&j| same[j].ev == same[i].ev) {
                distinct.push(i);
            }
        }
        let pick = match self.chooser.as_mut() {
            Some(c) => distinct[c.order(distinct.len() as u32) as usize],
            None => 0,
        };
        let chosen = same.swap_remove(pick);
        for n in same {
            self.queue.push(n);
        }
        chosen
    }

    /// Whether the end of the run judges anything: a request without a response, or a node
    /// still holding pages or metadata slots (a leak).
    fn judged_at_horizon(&self) -> bool {
        (0..self.reqs.len()).any(|i| self.reqs.get(i).is_some_and(|r| r.response.is_none()))
            || self.prefill.iter().any(|p| p.leaks().is_some())
            || self.decode.iter().any(|d| d.leaks().is_some())
    }

    /// Ends the run: records the end time and checks liveness.
    pub fn finish(&mut self) {
        // A liveness-mode run that stopped on a missed deadline ends there (the clock passed it;
        // the next event, after it, was not run).
        let missed = self.liveness.as_ref().and_then(|l| l.missed_at);
        self.ended_at = missed.map_or(self.now, |d| d.max(self.now));
        if self.past_horizon && self.judged_at_horizon() {
            // Stopped with events left after the horizon and something judged there: the run
            // was watched up to it (a request judged there had no final status by then, pages
            // still held were held until then, not only at its last event's time). With every
            // request answered and nothing held, what was left (a scripted fault due later,
            // which the report notes as never applied) changed nothing: the run ended with its
            // last event.
            self.ended_at = self.ended_at.max(self.horizon);
        }
        // A run cut short (event limit, liveness mode) still reports every request of its
        // workload, arrived or not; not one stopped for having too many in flight, whose
        // not-yet-arrived requests are what would not fit (10M of them took 5.9 GB here).
        if self.in_flight_limit_hit {
            self.arrivals = None;
        } else {
            self.materialize_arrivals();
        }
        self.check_liveness();
    }

    /// Leading pages of a block table that carry a prefix hash once `computed` tokens of KV are in
    /// them: the full ones, under prefix caching (`prefill_cache = radix`); none without it. vLLM
    /// hashes full blocks of computed tokens only with prefix caching on (vLLM 0.33.0 wheel,
    /// `v1/core/block_pool.py` `free_blocks`: `block_hash is None or not enable_caching` → reused first).
    pub(crate) fn hashed_pages(&self, computed: u64) -> u64 {
        if self.cfg.knobs.prefill_cache == crate::config::PrefillCache::Radix {
            computed / self.page_size()
        } else {
            0
        }
    }

    /// Whether any pending event matches `pred` (liveness mode's quiescence, `check::liveness`).
    /// Liveness mode queues the workload whole (`World::new`), so no arrival is left out.
    /// Every pending event, in no particular order (liveness mode: the workload is queued whole).
    pub(crate) fn queue_events(&self) -> impl Iterator<Item = &Ev> {
        debug_assert!(self.arrivals.is_none(), "liveness mode queues the workload whole");
        self.queue.iter().map(|s| &s.ev)
    }

    pub(crate) fn any_pending(&self, pred: impl Fn(&Ev) -> bool) -> bool {
        debug_assert!(self.arrivals.is_none(), "liveness mode queues the workload whole");
        self.queue.iter().any(|s| pred(&s.ev))
    }

    /// The earliest pending event that will end a request still without a final status: a
    /// bootstrap or waiting timer of the node's current incarnation, or a leg's result in flight.
    /// Arrivals not yet taken (`arrivals`) are neither, so the queue alone answers.
    pub(crate) fn pending_ending_event(&self) -> Option<Instant> {
        self.queue
            .iter()
            .filter_map(|s| match &s.ev {
                Ev::Timeout { r, timer: TimeoutKind::Bootstrap | TimeoutKind::Waiting, node, epoch } => {
                    let current = match node.idx() {
                        NodeIdx::Prefill(p) => self.prefill[p.at()].epoch(),
                        NodeIdx::Decode(d) => self.decode[d.at()].epoch(),
                    };
                    (self.reqs[r.idx()].response.is_none() && current == *epoch).then_some(s.at)
                }
                // A leg's answer already on its way to the router: the request is not stuck, its
                // message just lands after the horizon (a waiting timer that fires just inside
                // it, then decode's 500 travelling back). Judging it there would report a hang
                // and the pages decode holds until prefill acknowledges the abort as a leak.
                Ev::LegResult { r, .. } => self.reqs[r.idx()].response.is_none().then_some(s.at),
                // The cleanup of a request answered just inside the horizon, still travelling: decode
                // keeps its pages until prefill acknowledges the abort (a waiting timer's 500 4 µs
                // inside the horizon, sglang-0.5.22 campaign seed 309,065). Judged
                // there, those pages would count as a leak; they are freed when the ack lands.
                Ev::AbortAt { r, .. } | Ev::AbortAck { r, .. } => self.reqs[r.idx()].response.is_some().then_some(s.at),
                // Decode's deferred-release fallback, still armed: the pages of a request whose
                // abort prefill will never acknowledge (a failed send poisoned the ack, sglang
                // 0.5.22 `mooncake/conn.py` `_poison_unsettled_send`) are freed when it fires, 30 s
                // after the failure (guided campaign seed 700,132,987: a transfer that failed at
                // 90 s, its fallback due 4 ms after the 120 s horizon, judged a decode leak).
                Ev::Timeout { r, timer: TimeoutKind::DeferredRelease, node, epoch } => match node.idx() {
                    NodeIdx::Decode(d) => {
                        (!self.decode_timeout_moot(*r, TimeoutKind::DeferredRelease, d, *epoch, s.at)).then_some(s.at)
                    }
                    NodeIdx::Prefill(_) => None,
                },
                // A transfer still in flight: the sender's pages (and the room's metadata slot)
                // are held until it ends, so pages held at the horizon are not yet a leak (a
                // queue of slow chunks to one decode node can outlast the bound).
                Ev::TransferDone { job, .. } => self.jobs.get(*job).filter(|j| !j.is_done()).map(|_| s.at),
                _ => None,
            })
            .min()
    }

    /// A digest of the model state that decides the rest of a run: every node (pools, ownership,
    /// holders, metadata, queues, prefix index), every request, every transfer job, the oracle's
    /// records, the clock, the router's counters, the pending events and the explorer's fault
    /// and reordering budgets. Deterministic (ordered containers only, `Debug` images hashed
    /// word by word). Pending events are hashed in queue order (their relative sequence order
    /// decides which simultaneous event is the default, so it is state; the numbers are not).
    ///
    /// Exploration, its only caller, queues the workload whole (`step`), so every pending
    /// arrival is in the queue.
    pub fn state_digest(&self) -> u64 {
        debug_assert!(self.arrivals.is_none(), "state_digest needs the workload queued whole");
        use std::fmt::Write as _;
        use std::hash::Hasher as _;
        /// `Debug` images streamed into a word-at-a-time hash (no intermediate string).
        struct Sink(crate::types::StableHasher, u64);
        impl std::fmt::Write for Sink {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                let mut chunks = s.as_bytes().chunks_exact(8);
                for c in &mut chunks {
                    let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                    self.1 = (self.1 ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
                }
                for &b in chunks.remainder() {
                    self.1 = (self.1 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
                }
                Ok(())
            }
        }
        let mut img = Sink(crate::types::StableHasher::default(), 0xcbf2_9ce4_8422_2325);
        let _ = write!(
            img,
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|",
            self.now, self.horizon, self.horizon_extensions_left, self.prefill, self.decode, self.jobs
        );
        let one_batch_faults = self.cfg.faults.script.iter().any(|f| f.batch().is_some());
        for r in &self.reqs {
            let _ = write!(
                img,
                "{:?}{:?}{:?}{:?}{}{}{}{}{}{:?}{:?}{}{:?}{:?}{:?}{};",
                r.prefill,
                r.decode,
                r.room,
                r.rejected,
                r.client_aborted,
                r.fault_touched,
                r.timed_out,
                r.late_written(),
                r.lagged,
                r.prefill_leg,
                r.decode_leg,
                r.decode_tokens,
                r.response,
                r.caught_by,
                r.detected_by,
                r.decode_prefix_tokens
            );
            if r.delay_spent {
                // Only when set, so the digests of runs without a scripted delay stay as they were.
                let _ = write!(img, "delay_spent;");
            }
            if r.outlived_call {
                // Only when set, as above.
                let _ = write!(img, "outlived_call;");
            }
            if let Some(e) = r.ack_poisoned {
                // Only when set, as above.
                let _ = write!(img, "ack_poisoned{e};");
            }
            if one_batch_faults {
                // The batch count decides which batch a one-batch fault hits; only in runs that
                // script one, so the other runs' digests stay as they were.
                let _ = write!(img, "batches={};", r.batches);
            }
        }
        let _ = write!(img, "|{:?}|{:?}|", self.oracle, self.router.counters());
        if let Some(c) = &self.chooser {
            let _ = write!(img, "{}|{}|", c.faults_used, c.reorders_used);
        }
        let mut pending: Vec<(Instant, u64, &Ev)> = self.queue.iter().map(|s| (s.at, s.seq, &s.ev)).collect();
        pending.sort_by_key(|a| (a.0, a.1));
        for (at, _, ev) in &pending {
            let _ = write!(img, "{at:?}{ev:?};");
        }
        img.0.write_u64(img.1);
        img.0.finish()
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive { r } => self.on_arrive(r),
            Ev::ClientAbort { r } => self.on_client_abort(r),
            Ev::LegArrive { r, role: Role::Prefill } => self.prefill_leg_arrive(r),
            Ev::LegArrive { r, role: Role::Decode } => self.decode_leg_arrive(r),
            Ev::Tick { node } => match node.idx() {
                NodeIdx::Prefill(p) => self.prefill_tick(p),
                NodeIdx::Decode(d) => self.decode_tick(d),
            },
            Ev::ForwardDone { node, epoch } => self.prefill_forward_done(node, epoch),
            Ev::StepDone { node, epoch } => self.decode_step_done(node, epoch),
            Ev::DstInfo { r, prefill, dst } => self.prefill_dst_info(r, prefill, *dst),
            Ev::TransferRead { job, batch } => self.transfer_read(job, batch),
            Ev::TransferLand { job, batch } => self.transfer_land(job, batch),
            Ev::TransferDone { job, ok } => self.transfer_done(job, ok),
            Ev::MetaLand { r, decode, epoch, slot, room } => self.decode_meta_land(r, decode, epoch, slot, room),
            Ev::Status { r, decode, epoch, ok, pages, prefix } => {
                self.decode_status(r, decode, epoch, ok, pages, prefix)
            }
            Ev::LegResult { r, role, status } => self.on_leg_result(r, role, status),
            Ev::AbortAt { r, role: Role::Prefill, status, from_decode } => self.prefill_abort(r, status, from_decode),
            Ev::AbortAt { r, role: Role::Decode, status, .. } => self.decode_abort(r, status),
            Ev::AbortAck { r, decode, epoch } => self.decode_abort_ack(r, decode, epoch),
            Ev::Timeout { r, timer, node, epoch } => match node.idx() {
                NodeIdx::Prefill(p) => self.prefill_timeout(r, timer, p, epoch),
                NodeIdx::Decode(d) => self.decode_timeout(r, timer, d, epoch),
            },
            Ev::Crash { node, restart_after_ms } => self.crash(node, restart_after_ms),
            Ev::Restart { node } => self.restart(node),
            Ev::HeartbeatLost { prefill, epoch } => self.heartbeat_lost(prefill, epoch),
        }
    }

    pub(crate) fn crash(&mut self, node: NodeId, restart_after_ms: u64) {
        let alive = match node.idx() {
            NodeIdx::Prefill(p) => self.prefill[p.at()].alive(),
            NodeIdx::Decode(d) => self.decode[d.at()].alive(),
        };
        if !alive {
            return;
        }
        match node.idx() {
            NodeIdx::Prefill(p) => self.prefill_crash(p),
            NodeIdx::Decode(d) => {
                self.transfer_reader_died(d);
                self.decode_crash(d);
            }
        }
        self.after(Duration::from_ms(restart_after_ms), Ev::Restart { node });
    }

    fn restart(&mut self, node: NodeId) {
        match node.idx() {
            NodeIdx::Prefill(p) => self.prefill[p.at()].life_mut().restart(),
            NodeIdx::Decode(d) => self.decode[d.at()].life_mut().restart(),
        }
        self.tick(node);
    }

    fn heartbeat_lost(&mut self, prefill: PrefillIdx, epoch: u32) {
        for d in 0..self.decode.len() as u16 {
            self.decode_prefill_lost(DecodeIdx(d), prefill, epoch);
        }
    }

    /// Every component's invariants (run after every event in tests).
    pub fn invariants(&self) {
        for p in &self.prefill {
            p.invariants(self.now);
        }
        for d in &self.decode {
            d.invariants(self.now);
        }
    }

    /// Where a request sits now, for hang reports.
    pub fn whereabouts(&self, r: RequestId) -> String {
        let req = &self.reqs[r.idx()];
        let leg = |s: Option<u16>| s.map_or("pending".to_string(), |x| x.to_string());
        let p = &self.prefill[req.prefill.at()];
        let d = &self.decode[req.decode.at()];
        let pstate = p.reqs().get(&r).map_or("gone".to_string(), |x| format!("{:?}/{:?}", x.phase(), x.sender()));
        let dstate = d.reqs().get(&r).map_or("gone".to_string(), |x| {
            format!(
                "{:?} (KV status {}, {} of {} prealloc ahead)",
                x.phase(),
                // sglang's `KVPoll` names: the poll of its transfer has not ended, failed, or
                // succeeded.
                match x.status_ok() {
                    None => "still polled",
                    Some(false) => "Failed",
                    Some(true) => "Success",
                },
                d.prealloc().iter().position(|y| *y == r).unwrap_or(0),
                d.prealloc().len()
            )
        });
        format!(
            "prefill leg {} on {} [{pstate}], decode leg {} on {} [{dstate}; {} free pages, {} transferring, {} running]",
            leg(req.prefill_leg),
            p.id(),
            leg(req.decode_leg),
            d.id(),
            d.pool().free_pages(),
            d.transfer_queue().len(),
            d.running().len()
        )
    }

    fn check_liveness(&mut self) {
        let end = self.ended_at;
        if self.event_limit_hit {
            // The run was cut short: an unanswered request or a held page says nothing about the
            // engine, so neither hangs nor leaks are judged (the verdict is `event_limit`).
            self.check_statuses();
            return;
        }
        // Liveness mode (check::liveness): open requests were judged against their deadlines.
        if self.liveness_finish() {
            self.check_statuses();
            return;
        }
        for i in 0..self.reqs.len() {
            // A folded request was answered.
            if let Some(r) = self.reqs.get(i).filter(|r| r.response.is_none()) {
                let hang_cause = match (r.prefill_leg, r.decode_leg) {
                    (None, None) => "both_legs_pending",
                    (None, Some(_)) => "prefill_leg_pending",
                    (Some(_), None) => "decode_leg_pending",
                    (Some(_), Some(_)) => "router_never_answered",
                };
                let v = Violation::new(Kind::RequestHang, hang_cause, end)
                    .request(r.id, r.tenant)
                    .detail(format!("no final status by {end}: {}", self.whereabouts(r.id)));
                self.oracle.record(v);
            }
        }
        // What a request with no final status holds itself (its pages, host copy and metadata
        // slot) is held for its hang, judged above: a leak is what is held besides.
        let open = |r: RequestId| self.reqs.get(r.idx()).is_some_and(|q| q.response.is_none());
        let mut leaks = Vec::new();
        for p in &self.prefill {
            leaks.extend(p.leaks_besides(open));
        }
        for d in &self.decode {
            leaks.extend(d.leaks_besides(open));
        }
        for crate::engine::node::Leak {
            node: pool,
            pages,
            host_pages,
            slots,
            holders,
            open_pages,
            open_slots,
            open_holders,
        } in leaks
        {
            // A retracted request's host backup is named as such: the trace shows its device
            // pages freed at the retraction, so "N page(s)" of the pool alone read as a miscount.
            let host = if host_pages > 0 {
                format!(
                    ", {host_pages} page(s) of host memory (KV backed up at a retraction, whose device pages were freed then)"
                )
            } else {
                String::new()
            };
            let besides = if open_holders.is_empty() {
                String::new()
            } else {
                format!(
                    " (besides {open_pages} page(s) and {open_slots} metadata slot(s) held by request(s) {open_holders:?}, which got no final status: judged as request_hang)"
                )
            };
            let detail = format!(
                "{pool}: {pages} page(s){host} and {slots} metadata slot(s) still held at the end{}{besides}",
                if holders.is_empty() { String::new() } else { format!(" by request(s) {holders:?}") }
            );
            let holders = holders.iter().map(|&r| RequestId(r)).collect();
            self.oracle.record(
                Violation::new(Kind::PageLeak, pool.role_name(), end)
                    .pool(pool)
                    .page_count(pages + host_pages)
                    .slots(slots)
                    .host_pages(host_pages)
                    .holders(holders)
                    .detail(detail),
            );
        }
        self.check_statuses();
    }

    /// `wrong_status`: a rejected or aborted request answered 200 with output, or a valid request
    /// that no fault touched answered with an error.
    fn check_statuses(&mut self) {
        for i in 0..self.reqs.len() {
            let v = match self.reqs.get(i) {
                Some(r) => wrong_status(r),
                // Judged when it was folded.
                None => self.folded_statuses.remove(&(i as u32)),
            };
            if let Some(v) = v {
                self.oracle.record(v);
            }
        }
    }
}

/// Request ids as a story lists them: `2, 5`.
fn ids(rs: &[RequestId]) -> String {
    rs.iter().map(|v| v.0.to_string()).collect::<Vec<_>>().join(", ")
}

/// Each request of a node that locked cached blocks (`locks` gives its locked blocks and block
/// table) with the pages of `cached` in its table: empty for one the write did not reach.
fn locked_pages_hit<V>(
    reqs: &crate::engine::reqmap::ReqMap<V>,
    locks: impl Fn(&V) -> (&[crate::prefix::BlockKey], &[Run]),
    cached: &[Run],
) -> Vec<(RequestId, Vec<Run>)> {
    reqs.iter()
        .filter_map(|(r, v)| {
            let (borrowed, pages) = locks(v);
            (!borrowed.is_empty()).then(|| (*r, crate::pool::runs_intersect(pages, cached)))
        })
        .collect()
}

/// Where a write by a request that no longer held the pages landed, as its story says it: the
/// requests now holding them (`victims` less `readers`), the pages a radix cache holds and the
/// requests reading those (`readers`), or free pages.
/// Whose the pages a late write landed in are now: `(held, cached, total)` pages, held by the
/// requests among `victims` that are not cache `readers`, by the radix cache, or free (the rest).
/// Each share is counted (a write of 125 pages, 20 of them a request's, said "now held by request
/// 1" of all 125).
fn where_it_landed(victims: &[RequestId], readers: &[RequestId], pages: (u64, u64, u64), role: &str) -> String {
    let (held, cached_pages, total) = pages;
    if victims.is_empty() && cached_pages == 0 {
        return " (free pages)".to_string();
    }
    let holders: Vec<RequestId> = victims.iter().filter(|v| !readers.contains(v)).copied().collect();
    let mut s = String::new();
    if !holders.is_empty() {
        let share = if held == total { String::new() } else { format!("{held} of them ") };
        s += &format!(", {share}now held by request(s) {}", ids(&holders));
    }
    if cached_pages > 0 {
        s += &format!(", {cached_pages} of them held by {role}'s radix cache");
        if !readers.is_empty() {
            s += &format!(" and read by request(s) {}", ids(readers));
        }
    }
    let free = total.saturating_sub(held + cached_pages);
    if free > 0 {
        s += &format!(", {free} free");
    }
    s
}

/// `wrong_status`: a rejected or aborted request answered 200 with output, or a valid request
/// that no fault touched answered with an error.
fn wrong_status(r: &Req) -> Option<Violation> {
    let resp = r.response?;
    let mut cause = if r.rejected.is_some() { "rejected_answered_200" } else { "valid_request_failed" };
    let detail = match r.rejected {
        Some((status, node, why))
            if resp.status >= 500 && status < 500 && !r.fault_touched && !r.client_aborted && r.caught_by.is_none() =>
        {
            cause = "rejected_answered_5xx";
            format!("{node} rejected it ({why}, {status}) but the client got HTTP {} (at {})", resp.status, resp.at)
        }
        Some((status, node, why)) if resp.status == 200 => {
            let tokens = if resp.tokens == 1 { "1 token".to_string() } else { format!("{} tokens", resp.tokens) };
            format!("{node} rejected it ({why}, {status}) but the client got HTTP 200 with {tokens}")
        }
        None if resp.status != 200
            && !r.client_aborted
            && !r.fault_touched
            && !r.timed_out
            && r.caught_by.is_none() =>
        {
            if r.metadata_lagged {
                // The lag delayed its row; it fails nothing an engine that waits for the row.
                format!(
                    "a valid request failed with HTTP {}: no fault failed it (a scripted metadata lag delayed its metadata row, which the engine should wait for)",
                    resp.status
                )
            } else {
                format!("a valid request failed with HTTP {} and no fault touched it", resp.status)
            }
        }
        _ => return None,
    };
    Some(Violation::new(Kind::WrongStatus, cause, resp.at).request(r.id, r.tenant).detail(detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The story's part for where a late write landed: each kind of page it names, alone and
    /// together (the holders-only and free forms are the ones stories had before radix caches
    /// were named).
    #[test]
    fn where_a_late_write_landed_names_holders_caches_and_readers() {
        let r = |v: &[u32]| v.iter().map(|i| RequestId(*i)).collect::<Vec<_>>();
        assert_eq!(where_it_landed(&[], &[], (0, 0, 9), "decode"), " (free pages)");
        assert_eq!(where_it_landed(&r(&[3, 5]), &[], (9, 0, 9), "decode"), ", now held by request(s) 3, 5");
        assert_eq!(where_it_landed(&[], &[], (0, 70, 70), "prefill"), ", 70 of them held by prefill's radix cache");
        assert_eq!(
            where_it_landed(&r(&[2]), &r(&[2]), (0, 512, 512), "decode"),
            ", 512 of them held by decode's radix cache and read by request(s) 2"
        );
        assert_eq!(
            where_it_landed(&r(&[2, 4]), &r(&[2]), (4, 16, 20), "decode"),
            ", 4 of them now held by request(s) 4, 16 of them held by decode's radix cache and read by request(s) 2"
        );
        // A share of the pages held, the rest free: each counted (it said "now held by request(s)
        // 1" of all 125 pages, 20 of them request 1's).
        assert_eq!(
            where_it_landed(&r(&[1]), &[], (20, 0, 125), "decode"),
            ", 20 of them now held by request(s) 1, 105 free"
        );
    }
}
