//! The resolved configuration: every engine knob explicit, no `Default`. Engine profiles are
//! named knob sets; a scenario's `[knobs]` table and `--set` overrides are merged over the
//! profile and the result must name every knob exactly once (unknown knobs are errors).

use crate::types::Ratio;
use serde::{Deserialize, Serialize};

macro_rules! knob_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vm])* $var),+ }
    };
}

knob_enum!(
    /// How the scheduler rejects an over-long prompt.
    RejectMode { StubPending, FinishNow }
);
knob_enum!(
    /// Which requests a PD gate retires: only finished ones, or also ones with a pending abort.
    AbortCheck { FinishedOnly, AbortedToo }
);
knob_enum!(
    /// Decode's check before committing a transferred request.
    CommitCheck { RoomOnly, Coverage, AssertCrash }
);
/// Off/on switch: `"on"`/`"off"`, also `"yes"`/`"no"`, `"true"`/`"false"` and a TOML boolean
/// (`kv_checksum = true`, `--set kv_checksum=true`). Written as `"on"`/`"off"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOff {
    Off,
    On,
}

/// The words an [`OnOff`] knob takes (a boolean too).
const ON_OFF_WORDS: [&str; 6] = ["off", "on", "no", "yes", "false", "true"];

impl schemars::JsonSchema for OnOff {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OnOff".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Off/on switch: `\"on\"`/`\"off\"`, also `\"yes\"`/`\"no\"`, `\"true\"`/`\"false\"` and a boolean.",
            "anyOf": [
                {"type": "string", "enum": ON_OFF_WORDS},
                {"type": "boolean"}
            ]
        })
    }
}

impl<'de> Deserialize<'de> for OnOff {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = OnOff;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("one of `on`, `off` (or `yes`/`no`, `true`/`false`, a boolean)")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<OnOff, E> {
                Ok(if b { OnOff::On } else { OnOff::Off })
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<OnOff, E> {
                match s {
                    "on" | "yes" | "true" => Ok(OnOff::On),
                    "off" | "no" | "false" => Ok(OnOff::Off),
                    _ => Err(E::unknown_variant(s, &ON_OFF_WORDS)),
                }
            }
        }
        d.deserialize_any(V)
    }
}
/// A boolean knob read as an [`OnOff`] one (`zero_on_free`, a boolean since before the on/off
/// words: `--set zero_on_free=on` was "expected a boolean").
fn on_off_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    OnOff::deserialize(d).map(|v| v == OnOff::On)
}

knob_enum!(
    /// KV canary: a per-slot side record verified on every read.
    Canary { Off, Log, Raise }
);
knob_enum!(
    /// When decode frees the pages of a request aborted during transfer.
    DecodeRelease { Immediate, Deferred }
);
knob_enum!(
    /// What decode's abort does to a request whose KV has fully arrived but is not committed yet
    /// (the waiting queue): `leak` forgets it with its pages and slot still held (sglang #9817).
    TransferredAbort { Leak, Free }
);
knob_enum!(
    /// How often prefill releases the KV of a request rejected while its transfer is in flight:
    /// `twice` (at the rejection, and again when the transfer ends: sglang #30937) or `once`.
    RejectedRelease { Twice, Once }
);
knob_enum!(
    /// Where prefill looks for rooms decode marked Failed: only its bootstrap and inflight queues
    /// (a waiting-queue entry is orphaned: sglang #28236) or every queue.
    FailedCheck { BootstrapAndInflight, EveryQueue }
);
knob_enum!(
    /// What a client cancel does to a request whose KV transfer is in flight: `leak` tears the
    /// transfer down and never frees its source blocks (Dynamo #7489), `free` releases them.
    CancelMidTransfer { Leak, Free }
);
knob_enum!(
    /// What decode does when its running batch cannot get a page for the next token: `stall` (the
    /// request waits a step and tries again: no released engine does this), `retract_to_host`
    /// (sglang: retract the requests with the fewest output tokens, back their KV up to host
    /// memory, restore it later), `retract_abort` (sglang with no retraction backup: the retracted
    /// requests are aborted with 503), `preempt_recompute` (vLLM: preempt the last-admitted request,
    /// free its blocks, recompute it later).
    DecodeOutOfPages { Stall, RetractToHost, RetractAbort, PreemptRecompute }
);
knob_enum!(
    /// What decode asks of its pool before it preallocates a request: `pages_and_reserve` (the
    /// prompt's pages plus the reserved decode tokens of it and of every admitted request, each
    /// reserve shrinking as its request generates: vLLM, which reserves nothing), or
    /// `max_new_tokens` (sglang: also the prompt plus `min(max_new_tokens, 4096)` less the running
    /// batch's tokens, against the free tokens less the larger of a flat reserve per admitted
    /// request and the largest running request's remaining need).
    DecodeAdmission { PagesAndReserve, MaxNewTokens }
);
knob_enum!(
    /// Whether a request decode preallocated holds one of `max_running_requests` slots while its
    /// KV transfers: `on` (sglang: preallocated, in transfer and running requests together fill
    /// the decode request pool), `off` (vLLM: an asynchronous KV load takes no running slot; a
    /// landed load is promoted only while the running batch has one free).
    LoadsHoldSlots { On, Off }
);
knob_enum!(
    /// What a client abort does to a request decode retracted to host memory: `leak` answers the
    /// client but keeps the host copy (sglang #18701, #21652), `discard` drops it.
    RetractedAbort { Leak, Discard }
);
knob_enum!(
    /// Where sglang's decode retraction backs a request's KV up: `unbounded` (a CPU copy per
    /// request, sglang 0.5.16) or `sized` (0.5.22's host pool, bounded; a backup that does not fit
    /// aborts the request with 500).
    RetractionHostPool { Unbounded, Sized }
);
knob_enum!(
    /// Whether prefill's KV sender sends a last chunk that has no pages (decode already holds every
    /// page of the prompt): `skip` never sends it, so the request never concludes (sglang #28652),
    /// `send` sends it with the metadata row.
    ZeroPageLastChunk { Skip, Send }
);
knob_enum!(
    /// Which pipeline stages of a prefill instance (`pp_stages > 1`) write the request's row into
    /// decode's metadata slot: `every_stage` (each stage sends its own aux write to the same slot;
    /// sglang #22716), `last_stage` (only the last stage writes it).
    PpMetadataWriter { EveryStage, LastStage }
);
knob_enum!(
    /// How a pipeline stage of a prefill instance (`pp_stages > 1`) applies the bootstrap
    /// consensus: `local_repoll` (each stage polls its own sender again when it pops, so an abort
    /// landing between two stages' pops diverges their queues; sglang #26912, #34572),
    /// `follow_rank0` (every stage applies the first stage's poll).
    PpBootstrapConsensus { LocalRepoll, FollowRank0 }
);
knob_enum!(
    /// When prefill frees the source pages of an aborted request, and when it acknowledges
    /// decode's abort.
    PrefillRelease { Immediate, HoldSourceUntilDrained, AckAfterDrain }
);
knob_enum!(
    /// What a transfer call that times out does with writes still in flight.
    TimeoutSemantics { ReturnsWhileWriting, Quiesced }
);
knob_enum!(
    /// Free-list reuse order of the paged allocator.
    FreeListPolicy { SortedOnMerge, Lifo, Fifo, Lru, LruUnhashedFirst }
);
knob_enum!(
    /// Whether prefill keeps released pages in a radix cache.
    PrefillCache { Radix, Chunk }
);
knob_enum!(
    /// What prefill's radix cache does with a block the request computed that another request
    /// indexed meanwhile, when the request's chunk is checkpointed: `tree_copy` (sglang) frees the
    /// request's copy and reads and sends the tree's from then on; `own_copy` keeps the request's.
    CheckpointDuplicates { TreeCopy, OwnCopy }
);
knob_enum!(
    /// The rules of decode's prefix cache (with `decode_radix_cache = on`): sglang's `radix_tree`
    /// or vLLM's `block_pool`.
    DecodePrefixRules { RadixTree, BlockPool }
);
knob_enum!(
    /// Which position a request's first decode step writes: `after_prompt` (sglang: the first
    /// output token came from prefill, and decode computes it at the position after the prompt)
    /// or `last_prompt_token` (vLLM: decode recomputes the loaded prompt's last position).
    DecodeFirstWrite { AfterPrompt, LastPromptToken }
);
knob_enum!(
    /// Behind vLLM's sequential proxy, how long decode heartbeats prefill's source lease for a
    /// request aborted while its read is in flight: `stop` at the abort (vLLM 0.34.0), or
    /// `until_read_ends` (the read's blocks stay leased until decode stops reading).
    AbortHeartbeat { Stop, UntilReadEnds }
);
knob_enum!(
    /// What the router does when the prefill leg fails first (the three released routers).
    RouterOnPrefillError { ReturnDecodeLeg, CancelDecode, CancelDecodeWhenStreaming }
);
knob_enum!(
    /// Concurrent legs with a bootstrap room (sglang), or prefill first then decode (vLLM proxy).
    RouterMode { Concurrent, Sequential }
);
knob_enum!(
    /// Prefix-cache scope: shared by all tenants, salted per tenant, or shared only for the blocks a
    /// request marks public.
    PrefixCacheScope { Global, PerTenant, PublicOnly }
);
knob_enum!(
    /// How long a prefix-cache hit takes: the compute it saves, or as long as a miss.
    PrefixHitTiming { AsComputed, PaddedToMiss }
);
knob_enum!(
    /// Pair selection policy of the router.
    RouterPolicy { RoundRobin, Random, LeastLoaded }
);

impl OnOff {
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

/// Every behaviour knob of the modelled engine (section 9 of the lifecycle reference), plus the
/// mitigations and timeouts. Buggy value first in each enum.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Knobs {
    /// How the scheduler rejects a prompt longer than `max_req_input_len`: `stub_pending` marks it to
    /// finish with a 400 later and replaces its input with a one-token stub (sglang
    /// `set_finish_with_abort`, the incident); `finish_now` finishes it at once (`prepare_abort`).
    pub reject_mode: RejectMode,
    /// Which requests the prefill bootstrap/admission gates retire: `finished_only` (a pending abort
    /// walks on) or `aborted_too` (sglang PR #38935).
    pub pd_admission_check: AbortCheck,
    /// Whether prefill checks for a pending abort after the forward pass, before sending KV (sglang PR
    /// #36988).
    pub prefill_post_forward_abort_check: OnOff,
    /// Whether a transfer that succeeds keeps a request's pending abort instead of reporting success
    /// (sglang #33507).
    pub inflight_success_keeps_abort: OnOff,
    /// Which requests decode's prealloc sweep retires: `finished_only` or `aborted_too`.
    pub decode_prealloc_abort_check: AbortCheck,
    /// Decode's check before committing a transferred request: `room_only` (the metadata row's room id
    /// matches), `coverage` (every reserved page was written; sglang PR #38704, open), `assert_crash`
    /// (vLLM: an assertion fails the request loudly).
    pub decode_commit_check: CommitCheck,
    /// Mitigation: a checksum of each transferred page verified at commit (fails the request with 500).
    pub kv_checksum: OnOff,
    /// Mitigation: a per-slot canary verified on every read: `log` records it, `raise` fails the
    /// request.
    pub kv_canary: Canary,
    /// Mitigation: every page tagged with its owning request, verified on read.
    pub page_tags: OnOff,
    /// When decode frees the pages of a request aborted during transfer: `immediate`, or `deferred`
    /// until the transfer acknowledges or `deferred_release_timeout_ms` passes (sglang PR #35049, vLLM
    /// PR #32255).
    pub decode_abort_release: DecodeRelease,
    /// When prefill releases the source pages of an aborted request (to the free list, or with the
    /// radix cache, once its forward computed the prompt, into the cache: sglang's
    /// `handle_inflight_transfer_failure` checkpoints it) and acknowledges decode's abort:
    /// `immediate` (both at once, while the transfer worker may still be writing), `ack_after_drain`
    /// (the pages at once, the acknowledgement once the worker's batches in flight have ended, and
    /// never after a failed send, whose batch may still be writing: decode then frees at its
    /// deferred-release timeout; sglang 0.5.22), or `hold_source_until_drained` (both then: sglang
    /// PR #38961, open).
    pub prefill_abort_release: PrefillRelease,
    /// What a transfer call that times out does with writes in flight: `returns_while_writing` (the
    /// writes land later: Mooncake #4247) or `quiesced`.
    pub transfer_timeout_semantics: TimeoutSemantics,
    /// Pages per transfer batch; 0 = unbounded (sglang PR #32758, 0.5.21+, default unbounded).
    /// Tokens-scale limit `MAX_TOKENS`. Not applied to decode's pulls behind the sequential router
    /// (a NIXL read is one transfer).
    #[schemars(range(max = crate::scenario::MAX_TOKENS))]
    pub max_transfer_batch_pages: u64,
    /// Reuse order of the paged allocator's free list, which decides whose stale page a new request
    /// gets: `sorted_on_merge` (sglang), `lifo`, `fifo`, `lru` (vLLM ≤0.11: every freed block to the
    /// tail, tail first), `lru_unhashed_first` (later vLLM: blocks without a prefix hash to the head,
    /// reused first; hashed ones to the tail).
    pub free_list_policy: FreeListPolicy,
    /// Whether freed pages are zeroed (a stale read then reads zeros, never another tenant's KV).
    /// Takes the words every on/off knob takes (`on`/`off`, `yes`/`no`, a boolean); written as a
    /// boolean.
    #[serde(deserialize_with = "on_off_bool")]
    #[schemars(with = "OnOff")]
    pub zero_on_free: bool,
    /// Tokens per KV page (sglang `--page-size`, vLLM `--block-size`): 1 to 65,536; pools must be
    /// multiples of it.
    #[schemars(range(min = 1, max = 65536))]
    pub page_size: u64,
    /// Whether prefill keeps released pages in a radix (prefix) cache (`radix`) or frees them (`chunk`,
    /// sglang `--disable-radix-cache`).
    pub prefill_cache: PrefillCache,
    /// Prefix-cache sharing: `global` (any tenant hits any tenant's blocks: a timing side channel),
    /// `per_tenant` (every block salted with its tenant, like vLLM's per-request `cache_salt`), or
    /// `public_only` (selective sharing: the leading `public_blocks` of a request, the ones its
    /// client marks public, are shared by every tenant; the rest is salted per tenant).
    pub prefix_cache_scope: PrefixCacheScope,
    /// Mitigation: what a prefix-cache hit costs. `as_computed`: the prefill forward charges only the
    /// tokens it computes, so a hit answers sooner (the timing channel). `padded_to_miss`: the
    /// prefill node is charged exactly what a miss would cost (same chunks, same forward passes,
    /// same time): the GPU is held for the skipped compute, so other requests queue behind it as
    /// they would behind a miss. Only the pool pages the hit shares are saved, not throughput or
    /// TTFT. (Delaying only the response would leave the queueing channel open: a hit frees the
    /// node sooner and the requests behind it see that.)
    pub prefix_hit_timing: PrefixHitTiming,
    /// With `prefill_cache = radix`: what a chunk's checkpoint does with a computed block another
    /// request indexed meanwhile. `tree_copy` (sglang 0.5.16 `radix_cache.py`
    /// `cache_unfinished_req`; 0.5.22 `unified_radix_cache.py` `checkpoint_into_tree`): the
    /// request's copy is freed at once, its block table takes the tree's copy (locked), later
    /// chunks read it and prefill sends it, and the request's later blocks are indexed after it;
    /// a block any page of which was already sent keeps the request's copy and ends the checkpoint
    /// (the engine checkpoints page by page before each send and never frees a sent page).
    /// `own_copy` (vLLM 0.34.0 `v1/core/block_pool.py` `cache_full_blocks` keeps the request's
    /// block, a second cached copy under the same hash): the request keeps its copy, and the
    /// model's one-copy-per-key index stops the checkpoint there; the later blocks join the index
    /// at release. At release a duplicate still held (one the checkpoint could not swap) is freed
    /// at once under `tree_copy` (sglang's release checkpoint frees "the duplicates that were
    /// already in the tree") and stays cached, evictable, under `own_copy`.
    pub prefill_checkpoint_duplicates: CheckpointDuplicates,
    /// `concurrent` legs with a bootstrap room (sglang router), or `sequential`: prefill first, then
    /// decode (vLLM proxy).
    pub router_mode: RouterMode,
    /// What the router answers when the prefill leg fails first (lifecycle reference §5, §10):
    /// `return_decode_leg` (sglang-router 0.3.2 `mini_lb`: the client gets decode's status, a 500
    /// after decode's waiting timeout for a non-streaming request), `cancel_decode` (sglang's Rust
    /// gateway, PR #29017: prefill's 400 at once, decode leg aborted), `cancel_decode_when_streaming`
    /// (SMG: cancels the decode leg only for a streaming request, `[[request]] streaming = true`;
    /// otherwise as `return_decode_leg`).
    pub router_on_prefill_error: RouterOnPrefillError,
    /// Whether prefill's abort tells decode at once (sglang PR #38704, open: no release has it, so
    /// every shipped profile has `off`; a what-if switch).
    pub prefill_abort_notifies_decode: OnOff,
    /// Whether a released metadata slot's row is zeroed (sglang PR #27374).
    pub metadata_zero_on_free: OnOff,
    /// What decode's abort does to a request whose KV has arrived but is not committed yet: `leak`
    /// forgets it with pages and slot held (sglang #9817), `free` releases them.
    pub decode_transferred_abort: TransferredAbort,
    /// How often prefill releases the KV of a request rejected while its transfer is in flight:
    /// `twice` frees it at the rejection and again at the transfer's terminal cleanup (a double
    /// free: sglang #30937, #25805), `once` only once.
    pub prefill_rejected_release: RejectedRelease,
    /// Which prefill queues are polled for rooms decode marked Failed: `bootstrap_and_inflight`
    /// leaves a waiting-queue entry holding its metadata slot and pages forever (sglang #28236),
    /// `every_queue` retires it.
    pub prefill_failed_check: FailedCheck,
    /// What a client cancel does to a request whose KV transfer is in flight: `leak` tears the
    /// transfer RPC down and never frees the request's source blocks (Dynamo #7489), `free`
    /// releases them as an ordinary abort does.
    pub cancel_mid_transfer: CancelMidTransfer,
    /// Behind vLLM's sequential proxy (`router_mode = sequential`): whether decode's rejection of
    /// a request before admission (an over-length prompt) tells prefill to release the source
    /// blocks it holds for decode's read. `off` strands them until `source_lease_ms` (vLLM #41269,
    /// the pre-admission-reject-strands-prefill row); `on` frees them one message later (vLLM
    /// 0.33.0: `entrypoints/generate/base/serving.py` `_with_kv_transfer_rejection_cleanup` →
    /// `v1/engine/async_llm.py` `notify_kv_transfer_request_rejected` submits a pre-aborted request
    /// whose `nixl/pull_scheduler.py` `request_finished` sends prefill an empty read notice). The
    /// model delivers it as prefill's lease ending early (the trace shows the `source_lease` timer
    /// one message latency after decode's 4xx). The same notice follows an abort of a request
    /// decode has not scheduled yet (the same `request_finished` branch). No effect on sglang's
    /// concurrent legs.
    pub decode_reject_releases_prefill: OnOff,
    /// Tokens decode reserves beyond the prompt when it allocates for remote KV (vLLM's speculative
    /// lookahead, `num_lookahead_tokens`): a reservation past the prompt's last block asks for more
    /// blocks than prefill exposes, which vLLM's NIXL connector asserts against (a loud failure,
    /// never a stale read). A what-if of older releases and of synchronous loads: vLLM 0.34.0
    /// reserves no lookahead for an asynchronous load such as NIXL's (`v1/core/sched/scheduler.py`
    /// `schedule`: `limit_lookahead_tokens` when `load_kv_async`, PRs #43733 and #46694) and adds it
    /// when the loaded request is promoted; a synchronous load still over-reserves (PR #50173,
    /// open). Every profile has 0. Tokens-scale limit `MAX_TOKENS`.
    #[schemars(range(max = crate::scenario::MAX_TOKENS))]
    pub decode_lookahead_tokens: u64,
    /// What decode does when a running request needs a page for its next token and none is free:
    /// `stall` (it waits: a model artefact kept as the what-if value), `retract_to_host` (sglang
    /// `retract_decode`: fewest output tokens first, longest prompt on ties, KV backed up to host
    /// and restored without recompute before any new admission; the last request that still does
    /// not fit is aborted with 500), `retract_abort` (the same, with no host backup: 503),
    /// `preempt_recompute` (vLLM: the last-admitted running request is preempted, its blocks freed,
    /// and it is recomputed from the front of the waiting queue; the batch gets its pages before
    /// any admission, which leaves them free, and a pass that preempted admits nothing).
    pub decode_out_of_pages: DecodeOutOfPages,
    /// How decode decides that a request fits before it preallocates it: `pages_and_reserve` (its
    /// prompt's pages and the reserved decode tokens, each admitted request's reserve shrinking as
    /// it generates) or `max_new_tokens` (sglang 0.5.16 and 0.5.22 `disaggregation/decode.py`
    /// `pop_preallocated`: `_required_admission_tokens` is the larger of the pages plus the reserve
    /// and the prompt less its cached prefix plus `min(max_new_tokens, 4096)` less the running
    /// batch's tokens; `_allocatable_token_budgets` is the free tokens (plus decode's evictable
    /// radix cache) less the larger of the reserve times the admitted requests and the largest
    /// running request's prompt plus `min(max_new_tokens, 4096)` less the running batch's tokens).
    /// Under `max_new_tokens` a request whose prompt and output alone exceed an idle pool is never
    /// preallocated (nothing turns it away: `_check_if_req_exceed_kv_capacity` looks at the prompt
    /// only), and two requests never over-commit decode. The client's `max_new_tokens` is the
    /// request's `output_tokens`.
    pub decode_admission: DecodeAdmission,
    /// Whether a preallocated request holds a request slot while its KV transfers. `on` (sglang's
    /// decode request pool): decode preallocates only while requests in transfer and running
    /// number fewer than `max_running_requests` plus the extra slots, and a landed transfer joins
    /// the running batch while it has fewer than `max_running_requests`. The extra slots are both
    /// wheels' default `disaggregation_decode_extra_slots` (0.5.16 and 0.5.22
    /// `arg_groups/pd_disaggregation_hook.py`): twice `max_running_requests` when it is at most 32
    /// (per worker), else none, so above 32 a landed transfer always finds its slot. `off` (vLLM 0.34.0 `v1/core/sched/scheduler.py` `schedule`):
    /// loads start while the running batch has room however many are in flight ("async KV loads
    /// take neither [a running slot nor token budget] until their KV has arrived"), landed loads
    /// (`kv_holding_waiting`) are promoted first, before preempted and new requests, and only
    /// while a running slot is free (`loads_only` scans nothing else); the others keep their pages
    /// and wait.
    pub decode_loads_hold_slots: LoadsHoldSlots,
    /// What a client abort does to a request retracted to host memory: `leak` answers the client and
    /// keeps its host copy (and metadata slot) forever (sglang #18701, #21652), `discard` drops it.
    pub retracted_abort: RetractedAbort,
    /// With `decode_out_of_pages = retract_to_host`: whether the host memory the retracted
    /// requests' KV is backed up to is bounded. `unbounded`: each backup is a CPU copy of its own
    /// (sglang 0.5.16 `managers/schedule_batch.py` `offload_kv_cache` → `get_cpu_copy`).
    /// `sized`: sglang 0.5.22 backs up to a host pool (`--disaggregation-decode-retraction-backup`
    /// resolves to `host_pool` when decode's radix cache is off) of `max(0.2 × pool,
    /// ceil_align(min(context − 1, pool), page))` tokens (`mem_cache/kv_cache_builder.py`
    /// `resolve_decode_retraction_backup`, `decode_retraction_max_tokens`), shared by every
    /// backup still held; a retraction whose backup does not fit aborts the request with 500
    /// (`managers/schedule_batch.py` `retract_decode`: "Retraction host KV pool exhausted"). With
    /// decode's radix cache on, 0.5.22 falls back to CPU copies: unbounded.
    pub retraction_host_pool: RetractionHostPool,
    /// Decode-side radix (prefix) cache (sglang `--disaggregation-decode-enable-radix-cache`,
    /// default off in the 0.5.16 and 0.5.22 wheels): a request's full 512-token prompt blocks stay
    /// cached on decode after it finishes; a later request whose leading blocks match reuses those
    /// pages, reserves only the rest and reports the matched length to prefill
    /// (`decode_prefix_len`), which sends only from there.
    pub decode_radix_cache: OnOff,
    /// With `decode_radix_cache = on`, whose rules decode's prefix cache follows. `radix_tree`
    /// (sglang `disaggregation/decode.py` `_match_prefix_and_lock`): every full prompt block may
    /// match, a lookup refreshes the blocks it matched (an admission that did not fit too), and a
    /// request's blocks are indexed at its release. `block_pool` (vLLM 0.34.0, prefix caching on
    /// by default): a hit is capped at the prompt less one token (`kv_cache_manager.py`
    /// `get_computed_blocks`), a lookup refreshes nothing (a block's age is when it was last freed),
    /// and a loaded request's full prompt blocks are indexed when its KV has arrived
    /// (`sched/scheduler.py` `_update_waiting_for_remote_kv` → `cache_blocks`), so a request
    /// arriving while it decodes can hit them.
    pub decode_prefix_rules: DecodePrefixRules,
    /// Which position a request's first decode step writes once its KV has landed, and so where
    /// every later step writes and where its page boundaries fall. `after_prompt` (sglang 0.5.16
    /// and 0.5.22 `disaggregation/decode.py`: the prefill's first output token arrives with the KV
    /// and is decode's first input): step j writes the position after the prompt plus j − 1.
    /// `last_prompt_token` (vLLM 0.34.0 `v1/core/sched/scheduler.py`
    /// `_update_waiting_for_remote_kv`: a load that brought the whole prompt sets
    /// `num_computed_tokens = num_tokens - 1`, so the first step recomputes the prompt's last
    /// position before it samples): step j writes one position earlier, the first step rewrites the
    /// request's own loaded token (with the prompt's content), and the last output token's position
    /// is never written, so a request whose last token would start a page never takes that page.
    /// Under `last_prompt_token` decode's prefix-cache hit leaves that position to compute whatever
    /// `decode_prefix_rules` says (vLLM's own cap, `get_computed_blocks`): the rewrite lands in a
    /// page of the request's own. In both a step reads the positions before the one it writes
    /// (that one is the reader's own).
    pub decode_first_write: DecodeFirstWrite,
    /// Whether prefill sends a last chunk with zero pages (decode's reported prefix covers the
    /// whole prompt): `skip` never sends it and the request sits in prefill's inflight queue
    /// (sglang #28652: `BaseKVSender.should_send_kv_chunk` is `num_pages > 0`), `send` sends the
    /// metadata row and concludes (`CommonKVSender.should_send_kv_chunk` adds `or last_chunk`).
    pub zero_page_last_chunk: ZeroPageLastChunk,
    /// Which stages of a pipeline-parallel prefill instance (`[[prefill]] pp_stages > 1`) write
    /// the metadata row into decode's slot: `every_stage` (sglang #22716: every stage's last chunk
    /// sends its aux write to the same `dst_aux_index`; decode commits on the first row that shows
    /// its room, and a later stage's row may land after the slot was freed and given to the next
    /// request), `last_stage` (only the last stage writes it). No effect with one stage.
    pub pp_metadata_writer: PpMetadataWriter,
    /// How the stages of a pipeline-parallel prefill instance (`[[prefill]] pp_stages > 1`) pop
    /// the bootstrap queue after the ring consensus: `local_repoll` (each stage polls its own
    /// sender again; an abort that lands after the first stage popped a request and before the
    /// last stage did makes the later stages drop it while the first schedules it: the stages'
    /// queues diverge and the instance deadlocks; sglang #26912, #34572), `follow_rank0` (every
    /// stage applies the first stage's poll). No effect with one stage.
    pub pp_bootstrap_consensus: PpBootstrapConsensus,
    /// Tokens decode reserves beyond the prompt for generated output (per request).
    #[schemars(range(max = crate::scenario::MAX_TOKENS))]
    pub reserved_decode_tokens: u64,
    /// Tokens the tokenizer/template adds to every prompt before admission checks.
    #[schemars(range(max = crate::scenario::MAX_TOKENS))]
    pub tokenizer_reserved_tokens: u64,
    /// Largest prefill chunk in tokens (sglang `--chunked-prefill-size`): at least 1.
    #[schemars(range(min = 1, max = crate::scenario::MAX_TOKENS))]
    pub chunked_prefill_size: u64,
    /// How long prefill waits for decode's bootstrap before failing the request (sglang default 300 s).
    #[schemars(range(max = crate::scenario::MAX_TIME_MS))]
    pub bootstrap_timeout_ms: u64,
    /// How long decode waits for a transfer to finish before failing the request (sglang default 300
    /// s). Not armed behind the sequential router (vLLM times no load out).
    #[schemars(range(max = crate::scenario::MAX_TIME_MS))]
    pub waiting_timeout_ms: u64,
    /// Interval of the prefill↔decode heartbeat (default 5 s).
    #[schemars(range(min = 1, max = crate::scenario::MAX_TIME_MS))]
    pub heartbeat_interval_ms: u64,
    /// Missed heartbeats after which the peer is declared dead (default 2).
    #[schemars(range(min = 1))]
    pub heartbeat_failures: u64,
    /// With `decode_abort_release = deferred`: the longest decode holds an aborted request's pages
    /// (default 30 s).
    #[schemars(range(max = crate::scenario::MAX_TIME_MS))]
    pub deferred_release_timeout_ms: u64,
    /// Behind vLLM's sequential proxy: how long prefill keeps a finished request's source blocks
    /// for decode's read when no read notice comes (NIXL's `kv_lease_duration`, 30 s in vLLM
    /// 0.33.0 and 0.34.0; decode's heartbeats extend it while it still waits to load). The sglang
    /// profiles carry 480 s and never use it (their router is concurrent).
    #[schemars(range(max = crate::scenario::MAX_TIME_MS))]
    pub source_lease_ms: u64,
    /// Behind vLLM's sequential proxy: whether decode keeps heartbeating prefill's source lease
    /// for a request aborted while its KV read is in flight. `stop` (vLLM 0.34.0
    /// `nixl/pull_scheduler.py` `request_finished` calls `_stop_heartbeat` for every finished
    /// request, aborted ones included, while `v1/core/sched/scheduler.py` `finish_requests` keeps
    /// the load's blocks and its read running: `delay_free_blocks`): prefill frees the source
    /// blocks when the lease runs out (`nixl/base_worker.py` `_reap_expired_send_leases`) and a
    /// read still in flight reads freed, possibly reused blocks (catalogue row
    /// lease-expires-mid-read). `until_read_ends`: decode heartbeats the request until its read
    /// ends, as it does for a request it still waits to load. The sglang profiles never use it
    /// (their router is concurrent and has no lease).
    pub decode_abort_heartbeat: AbortHeartbeat,
    /// How long a synchronous transfer call waits before returning a timeout (default 60 s). Not
    /// applied to decode's pulls behind the sequential router (a NIXL read has no timeout).
    #[schemars(range(max = crate::scenario::MAX_TIME_MS))]
    pub transfer_sync_timeout_ms: u64,
}

/// A named engine profile.
pub struct Profile {
    pub name: &'static str,
    pub summary: &'static str,
    pub knobs: fn() -> Knobs,
    /// The fixed build of the same engine: the shrinker calls a knob "necessary" when setting
    /// it to this profile's value makes the failure go away (`shrink::fix_knobs`). A fixed
    /// profile names itself, so a campaign on it is judged against the profile under test.
    pub fixed: &'static str,
}

fn sglang_0_5_16() -> Knobs {
    Knobs {
        reject_mode: RejectMode::StubPending,
        pd_admission_check: AbortCheck::FinishedOnly,
        prefill_post_forward_abort_check: OnOff::Off,
        inflight_success_keeps_abort: OnOff::Off,
        decode_prealloc_abort_check: AbortCheck::FinishedOnly,
        decode_commit_check: CommitCheck::RoomOnly,
        kv_checksum: OnOff::Off,
        kv_canary: Canary::Off,
        page_tags: OnOff::Off,
        decode_abort_release: DecodeRelease::Immediate,
        prefill_abort_release: PrefillRelease::Immediate,
        transfer_timeout_semantics: TimeoutSemantics::ReturnsWhileWriting,
        max_transfer_batch_pages: 0,
        free_list_policy: FreeListPolicy::SortedOnMerge,
        zero_on_free: false,
        page_size: 1,
        prefill_cache: PrefillCache::Radix,
        prefix_cache_scope: PrefixCacheScope::Global,
        prefix_hit_timing: PrefixHitTiming::AsComputed,
        // sglang 0.5.16 `mem_cache/radix_cache.py` `cache_unfinished_req` frees the duplicate
        // slots (`kv_indices[cache_protected_len:new_prefix_len]`) and rewrites the request's
        // `req_to_token` row to the tree's; 0.5.22's default tree (`unified_radix_cache.py`
        // `checkpoint_into_tree`) does the same through `FreeDeviceKV` and the row rewrite.
        prefill_checkpoint_duplicates: CheckpointDuplicates::TreeCopy,
        router_mode: RouterMode::Concurrent,
        router_on_prefill_error: RouterOnPrefillError::ReturnDecodeLeg,
        prefill_abort_notifies_decode: OnOff::Off,
        metadata_zero_on_free: OnOff::Off,
        decode_transferred_abort: TransferredAbort::Free,
        // sglang 0.5.16 and 0.5.22 wheels, `disaggregation/prefill.py`
        // `process_batch_result_disagg_prefill`: a request rejected after its last chunk was sent
        // goes to the inflight queue and is released once, at its terminal poll (0.5.22 retires
        // aborted results through `_retire_aborted_prefill_result`). The double release of #30937
        // is the what-if value.
        prefill_rejected_release: RejectedRelease::Once,
        // Both wheels poll the waiting queue for Failed rooms before admission
        // (`resolve_waiting_queue_bootstrap` → `handle_bootstrap_failure`): #28236's gap is closed.
        prefill_failed_check: FailedCheck::EveryQueue,
        // The engines' own routers (mini_lb, the sglang gateway, vLLM's proxy) abort through the
        // scheduler, which releases the request; the transport teardown of Dynamo #7489 (fixed
        // there) is the what-if value.
        cancel_mid_transfer: CancelMidTransfer::Free,
        // sglang's prefill holds nothing for a decode that rejects (concurrent legs): the knob
        // does nothing there; `off` is the value before vLLM's fix.
        decode_reject_releases_prefill: OnOff::Off,
        // No speculative decoding in any shipped profile: decode reserves the prompt only.
        decode_lookahead_tokens: 0,
        // sglang 0.5.16 and 0.5.22 wheels, `managers/schedule_batch.py` `retract_decode` (fewest
        // `output_ids` first, longest `origin_input_ids` on ties; always keeps one request and aborts
        // it with 500 if it still does not fit) and `release_req` (in decode disaggregation the
        // retracted KV is offloaded to host: `offload_kv_cache` / `backup_kv_cache`);
        // `disaggregation/decode.py` `resume_retracted_reqs` restores it (`load_kv_cache` /
        // `restore_kv_cache`) before any new request is preallocated. Lifecycle reference §4.4.
        decode_out_of_pages: DecodeOutOfPages::RetractToHost,
        decode_admission: DecodeAdmission::MaxNewTokens,
        decode_loads_hold_slots: LoadsHoldSlots::On,
        // Both wheels' `managers/scheduler.py` abort handler walks
        // `disagg_decode_prealloc_queue.retracted_queue` and discards the aborted request's backup
        // (0.5.22: `discard_kv_cache_backup`): the #18701 / #21652 leak is the what-if value.
        retracted_abort: RetractedAbort::Discard,
        // 0.5.16 copies a retracted request's KV to a CPU tensor of its own
        // (`managers/schedule_batch.py` `offload_kv_cache`): no shared bound.
        retraction_host_pool: RetractionHostPool::Unbounded,
        // `--disaggregation-decode-enable-radix-cache` defaults to False (0.5.16 wheel
        // `server_args.py`, 0.5.22 wheel `arg_groups/fields/disagg.py`).
        decode_radix_cache: OnOff::Off,
        decode_prefix_rules: DecodePrefixRules::RadixTree,
        decode_first_write: DecodeFirstWrite::AfterPrompt,
        decode_abort_heartbeat: AbortHeartbeat::Stop,
        // Both wheels' real senders (Mooncake, NIXL, Mori, Ascend) inherit
        // `disaggregation/common/conn.py` `CommonKVSender.should_send_kv_chunk` (`num_pages > 0 or
        // last_chunk`): a zero-page last chunk is sent (#28652's fix). Only the base class
        // (`base/conn.py`, `num_pages > 0`) skips it — the 0.5.16 fake sender inherits that, and the
        // fake backend is documented incompatible with the decode radix cache; 0.5.22's fake sender
        // sends it too ("A zero-page last chunk must still send: poll() only concludes after
        // send()"). The skip is the what-if value.
        zero_page_last_chunk: ZeroPageLastChunk::Send,
        // Mooncake (the default `--disaggregation-transfer-backend`) sends the aux row from every
        // PP rank's last chunk to the same `dst_aux_index` (0.5.16 and 0.5.22 wheels,
        // `disaggregation/mooncake/conn.py` transfer worker: "Only the last chunk we need to send
        // the aux data", not gated on the PP rank; sglang #22716 is open). Only the Mori sender
        // gates it on `self.pp_group.is_last_rank` (`disaggregation/mori/conn.py`, both wheels):
        // that is `last_stage`.
        pp_metadata_writer: PpMetadataWriter::EveryStage,
        // 0.5.16 wheel `disaggregation/prefill.py` `pop_bootstrapped(rids_to_check=…)`: a stage
        // pops the consensus rids but polls its own sender again, and a local Failed wins (the
        // #27028 drain of local failures, from #26912, is in); `managers/scheduler_pp_mixin.py`
        // `process_bootstrapped_queue` applies it one stage after another (#31030 / #31869).
        pp_bootstrap_consensus: PpBootstrapConsensus::LocalRepoll,
        reserved_decode_tokens: 512,
        tokenizer_reserved_tokens: 0,
        chunked_prefill_size: 8192,
        bootstrap_timeout_ms: 300_000,
        waiting_timeout_ms: 300_000,
        heartbeat_interval_ms: 5_000,
        heartbeat_failures: 2,
        deferred_release_timeout_ms: 30_000,
        source_lease_ms: 480_000,
        transfer_sync_timeout_ms: 60_000,
    }
}

fn sglang_0_5_22() -> Knobs {
    Knobs {
        // 0.5.22 backs retractions up to a bounded host pool (`mem_cache/kv_cache_builder.py`
        // `resolve_decode_retraction_backup`; the knob's doc gives its size).
        retraction_host_pool: RetractionHostPool::Sized,
        pd_admission_check: AbortCheck::AbortedToo,
        prefill_post_forward_abort_check: OnOff::On,
        inflight_success_keeps_abort: OnOff::On,
        decode_prealloc_abort_check: AbortCheck::AbortedToo,
        // The commit checks the metadata row's room and nothing else: sglang 0.5.22 wheel,
        // `disaggregation/decode.py` `_commit_transfer_to_req` (room 0: not ready; another room:
        // 500 "Context corruption detected") after `pop_transferred` saw Success. No release
        // compares the pages written with the pages reserved (PR #38704, open); the stub that
        // wrote one page is kept out by the aborted-too gates instead.
        decode_commit_check: CommitCheck::RoomOnly,
        decode_abort_release: DecodeRelease::Deferred,
        // sglang 0.5.22 wheel: an abort marks the room Failed (`common/conn.py`
        // `CommonKVSender.abort`), the sender's poll concludes Failed at once (`mooncake/conn.py`
        // `_poll_with_status` holds back only Success while chunks are outstanding), and
        // `prefill.py` `handle_inflight_transfer_failure` releases the source pages then (into the
        // radix tree, `release_kv_cache(checkpoint=True)`; see `PReq::forward_done`), while the
        // chunk the transfer worker is writing still reads them (the worker drops only the
        // chunks it dequeues after: `transfer_worker`). Decode's abort is acknowledged only once
        // that chunk ended (`_maybe_ack_drained_abort`: "Bootstrap thread defers the ABORT ack
        // until the transfer worker drains"). Holding the source too is PR #38961, open.
        prefill_abort_release: PrefillRelease::AckAfterDrain,
        // sglang 0.5.22 wheel, `disaggregation/mooncake/conn.py` `_poison_unsettled_send`:
        // "batch_transfer_sync returns -1 on its wall-clock timeout with the batch still running
        // (freeBatchID refuses a busy batch and the handle is dropped)", so a failed send may still
        // be writing decode's pages; the release withholds decode's abort ack for it instead (the
        // poison of `prefill_abort_release = ack_after_drain`), and decode frees at its 30 s
        // fallback. (Before the twenty-ninth session this profile carried `quiesced`.)
        transfer_timeout_semantics: TimeoutSemantics::ReturnsWhileWriting,
        // sglang 0.5.22 wheel, `srt/environ.py`: `SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES`
        // defaults to 0, and `mooncake/conn.py` `send_kvcache` then sends every layer's pages in
        // one `batch_transfer_sync` ("Preserve this legacy path unless users explicitly opt in to
        // bounded index batches"); only the draft model's sliced path falls back to 4096 indices
        // (`process_sliced_draft`). (Before the twenty-ninth session the profile carried 4096.)
        max_transfer_batch_pages: 0,
        // No release sends a prefill→decode abort notice (PR #38704 is open): checked against the
        // sglang 0.5.22 wheel, `disaggregation/prefill.py` (the sender's abort marks the room Failed
        // locally) — lifecycle reference §3 and §11. The router is mini_lb (sglang-router 0.3.2,
        // `mini_lb.py` returns the decode leg), so an over-length prompt gets 500 at ~300 s.
        prefill_abort_notifies_decode: OnOff::Off,
        router_on_prefill_error: RouterOnPrefillError::ReturnDecodeLeg,
        metadata_zero_on_free: OnOff::On,
        // 0.5.22 wheel `disaggregation/prefill.py` `pop_bootstrapped`: with `pp_size > 1` the
        // polls are `disaggregation/utils.py` `poll_and_all_reduce_prefill_pp` — rank 0 polls and
        // `pp_sync_polls` hands its polls to every other rank, which do not poll again (#31869).
        pp_bootstrap_consensus: PpBootstrapConsensus::FollowRank0,
        ..sglang_0_5_16()
    }
}

fn vllm_nixl() -> Knobs {
    Knobs {
        reject_mode: RejectMode::FinishNow,
        pd_admission_check: AbortCheck::AbortedToo,
        prefill_post_forward_abort_check: OnOff::On,
        inflight_success_keeps_abort: OnOff::On,
        decode_prealloc_abort_check: AbortCheck::AbortedToo,
        decode_commit_check: CommitCheck::AssertCrash,
        decode_abort_release: DecodeRelease::Deferred,
        prefill_abort_release: PrefillRelease::HoldSourceUntilDrained,
        transfer_timeout_semantics: TimeoutSemantics::Quiesced,
        // vLLM 0.33.0 wheel, `v1/core/block_pool.py` `free_blocks` (called tail first by
        // `single_type_kv_cache_manager.py` `free`): blocks without a hash are prepended (reused
        // first), hashed ones appended (0.11.0 appended every block: `lru`). Reference §6.
        free_list_policy: FreeListPolicy::LruUnhashedFirst,
        page_size: 16,
        prefill_cache: PrefillCache::Radix,
        // vLLM 0.34.0 `v1/core/block_pool.py` `cache_full_blocks`: a request's full block is
        // cached under its hash even when another block has it (`BlockHashToBlockMap` keeps
        // both); the request keeps reading and sending its own.
        prefill_checkpoint_duplicates: CheckpointDuplicates::OwnCopy,
        router_mode: RouterMode::Sequential,
        reserved_decode_tokens: 0,
        // vLLM `v1/core/sched/scheduler.py` `schedule`: when `allocate_slots` fails for a running
        // request, the last request of `self.running` is popped and preempted
        // (`_preempt_request`: blocks freed by `kv_cache_manager.free`, tail first;
        // `num_computed_tokens = 0`; `waiting.prepend_request`), and recomputed when scheduled
        // again. Lifecycle reference §4.4.
        decode_out_of_pages: DecodeOutOfPages::PreemptRecompute,
        // vLLM `v1/core/sched/scheduler.py` allocates a remote-KV request's blocks for its prompt
        // (`allocate_slots`) with no reserve and no output term: it preempts when decode runs out.
        decode_admission: DecodeAdmission::PagesAndReserve,
        decode_loads_hold_slots: LoadsHoldSlots::Off,
        // vLLM 0.33.0 `entrypoints/generate/base/serving.py` `_with_kv_transfer_rejection_cleanup`
        // and `nixl/pull_scheduler.py` `request_finished` (the `do_remote_prefill` branch: "To
        // avoid stranding the prefill blocks in the prefill instance"): a request decode's
        // serving layer rejects still notifies prefill, which frees its blocks (#41269 fixed).
        decode_reject_releases_prefill: OnOff::On,
        // vLLM 0.33.0 and 0.34.0 `distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py`
        // `__init__`: `kv_lease_duration` from `kv_connector_extra_config`, default 30 s;
        // `pull_scheduler.py` `request_finished` leases a finished prefill's blocks for it and
        // `base_worker.py` `_reap_expired_send_leases` frees them when it runs out. (Before the
        // twenty-eighth session this was 480 s, read from `VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT`,
        // which is the Mooncake connector's: no NIXL variable of that name exists.)
        source_lease_ms: 30_000,
        // vLLM has no per-stage bootstrap queue and no metadata row: one scheduler plans every
        // pipeline stage (so the stages cannot disagree on what to run), and with PP > 1 each
        // producer stage pushes its own layers' KV and notifies decode (vLLM 0.34.0
        // `nixl/base_worker.py`: "PP>1 (push mode): this worker holds a contiguous layer slice";
        // a decode with PP > 1 is refused). sglang's stage divergence (#26912, #34572) and shared
        // metadata slot (#22716) are not vLLM's: the profile carries their fixed values. (Before
        // the thirty-eighth session it inherited 0.5.16's, and a `pp_stages = 2` run on this
        // profile reported sglang's deadlock.)
        pp_bootstrap_consensus: PpBootstrapConsensus::FollowRank0,
        pp_metadata_writer: PpMetadataWriter::LastStage,
        // vLLM 0.34.0 caches prefixes on decode too (`enable_prefix_caching` defaults on; the
        // NIXL connector pulls only the blocks not hit locally: `nixl/pull_scheduler.py`
        // `get_num_new_matched_tokens` counts from `num_computed_tokens`), under the block pool's
        // rules. Before the forty-second session the profile kept decode's cache off.
        decode_radix_cache: OnOff::On,
        decode_prefix_rules: DecodePrefixRules::BlockPool,
        // vLLM 0.34.0 `v1/core/sched/scheduler.py` `_update_waiting_for_remote_kv`: a finished
        // load of the whole prompt leaves `num_computed_tokens = num_tokens - 1`.
        decode_first_write: DecodeFirstWrite::LastPromptToken,
        // vLLM 0.34.0 `nixl/pull_scheduler.py` `request_finished`: "Stop heartbeating for aborted
        // requests that never reached finished_recving" — at the abort, while the read goes on
        // (`v1/core/sched/scheduler.py` `finish_requests`, `delay_free_blocks`). Found by kvsim's
        // guided campaigns (forty-seventh session); no upstream report.
        decode_abort_heartbeat: AbortHeartbeat::Stop,
        ..sglang_0_5_16()
    }
}

/// Every shipped profile, in the order `kvsim profiles` lists them.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "sglang-0.5.16",
        summary: "vulnerable: stub admission, finished-only gates, room-only commit, immediate frees (the 0.5.16 wheel; 0.5.17-0.5.20 lack the intake retire too)",
        knobs: sglang_0_5_16,
        fixed: "sglang-0.5.22",
    },
    Profile {
        name: "sglang-0.5.22",
        summary: "fixed: aborted-too gates (#38935), post-forward check (#36988), deferred release (#35049); room-only commit (sglang 0.5.21-0.5.23 wheels)",
        knobs: sglang_0_5_22,
        fixed: "sglang-0.5.22",
    },
    Profile {
        name: "vllm-nixl",
        summary: "vLLM NixlConnector: reject before scheduling, sequential proxy, LRU blocks, assert on short prefill (vLLM 0.33.0, 0.34.0)",
        knobs: vllm_nixl,
        fixed: "vllm-nixl",
    },
];

pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// What follows "unknown profile `name`" in a message: the profile meant, when one is near
/// (`sglang-0.5.23`: a release, and the profile that models it, as `kvsim audit` picks it; a
/// misspelling: the closest name), then the known names.
pub fn unknown_profile_hint(name: &str) -> String {
    let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
    let release = name.strip_prefix("sglang-");
    let meant = match release.and_then(|v| Some((v, crate::audit::sglang_profile_for(v)?))) {
        Some((v, (p, why))) if p != name => Some(format!("; sglang {v} is modelled by `{p}` ({why})")),
        _ => crate::scenario::did_you_mean(name, names.iter().copied()).map(|m| format!("; did you mean `{m}`?")),
    };
    format!("{} (known: {})", meant.unwrap_or_default(), names.join(", "))
}

/// Every knob name, for error messages and listings.
pub fn knob_names() -> Vec<String> {
    let t = toml::Table::try_from(sglang_0_5_16()).expect("knobs serialise");
    t.keys().cloned().collect()
}

/// One prefill or decode node of the deployment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub pool_tokens: u64,
    pub metadata_slots: u32,
    pub max_running_requests: u32,
    /// Pipeline-parallel stages of a prefill instance (sglang `--pp-size`); 1 for decode. Written
    /// only when above 1, so a configuration without pipeline stages serialises as before.
    #[serde(default = "one_stage", skip_serializing_if = "is_one_stage")]
    pub pp_stages: u16,
}

fn one_stage() -> u16 {
    1
}

fn is_one_stage(n: &u16) -> bool {
    *n == 1
}

/// The forward-pass and transfer cost model (virtual time only).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostConfig {
    pub prefill_base_us: u64,
    pub prefill_ns_per_token: u64,
    /// Extra prefill cost per token per 1,000 tokens of context already in the sequence.
    pub prefill_ns_per_token_per_kctx: u64,
    pub decode_step_base_us: u64,
    /// Decode step cost per 1,000 tokens of KV read across the batch.
    pub decode_ns_per_kkv: u64,
    pub kv_bytes_per_token: u64,
    pub transfer_latency_us: u64,
    pub transfer_bytes_per_us: u64,
    pub message_latency_us: u64,
}

/// One request of the workload, fully determined.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    pub at_ns: u64,
    pub tenant: u32,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// When the client gives up, if it does.
    pub abort_at_ns: Option<u64>,
    /// Prompt as 512-token block hashes (prefix sharing), empty when unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefix_blocks: Vec<u64>,
    /// The client asked for a streamed response (decides what `cancel_decode_when_streaming` does).
    #[serde(default, skip_serializing_if = "is_false")]
    pub streaming: bool,
    /// How many leading `prefix_blocks` the client marks public (shared across tenants under
    /// `prefix_cache_scope = public_only`; content it marks public is not its secret, so another
    /// tenant's hit on it is no `cross_tenant_prefix_hit` under any scope).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub public_blocks: u32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A weighted bucket of a length distribution: uniform in `min..=max`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    /// Relative weight of this bucket (the weights of a list must not all be 0).
    pub weight: u64,
    /// Smallest length in tokens (at least 1).
    #[schemars(range(min = 1, max = crate::scenario::MAX_TOKENS))]
    pub min: u64,
    /// Largest length in tokens (at least `min`).
    #[schemars(range(min = 1, max = crate::scenario::MAX_TOKENS))]
    pub max: u64,
}

/// The synthetic workload generator.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    pub requests: u32,
    pub tenants: u32,
    pub mean_interarrival_us: u64,
    pub prompt_tokens: Vec<Bucket>,
    pub output_tokens: Vec<Bucket>,
    pub client_abort: Ratio,
    pub abort_within_ms: u64,
    pub start_ms: u64,
}

/// Scripted fault kinds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScriptedFault {
    Crash {
        at_ms: u64,
        node: String,
        restart_after_ms: u64,
    },
    TransferFail {
        request: u32,
    },
    Delay {
        request: u32,
        delay_ms: u64,
    },
    VisibilityLag {
        request: u32,
        lag_ms: u64,
    },
    /// The metadata row of `request` becomes visible `lag_ms` after its status message (a write
    /// reordering, not a failure: it does not mark the request as touched by a fault).
    MetadataLag {
        request: u32,
        lag_ms: u64,
    },
    /// `TransferFail` of one transfer batch of `request`: its `batch`-th (0-based, in the order
    /// the request's batches are scheduled, retries included). What a random failure that fired
    /// on that batch is scripted as when failing every batch would not fail the case the same way.
    TransferFailAt {
        request: u32,
        batch: u32,
    },
    /// `Delay` of `request`'s `batch`-th transfer batch (not of its first).
    DelayAt {
        request: u32,
        batch: u32,
        delay_ms: u64,
    },
    /// `VisibilityLag` of `request`'s `batch`-th transfer batch only.
    VisibilityLagAt {
        request: u32,
        batch: u32,
        lag_ms: u64,
    },
}

impl ScriptedFault {
    /// The request a request fault names (`None` for a crash).
    pub fn request(&self) -> Option<u32> {
        match self {
            ScriptedFault::Crash { .. } => None,
            f => f.clone().request_mut().copied(),
        }
    }

    /// The request field of a request fault (`None` for a crash).
    pub fn request_mut(&mut self) -> Option<&mut u32> {
        match self {
            ScriptedFault::Crash { .. } => None,
            ScriptedFault::TransferFail { request }
            | ScriptedFault::Delay { request, .. }
            | ScriptedFault::VisibilityLag { request, .. }
            | ScriptedFault::MetadataLag { request, .. }
            | ScriptedFault::TransferFailAt { request, .. }
            | ScriptedFault::DelayAt { request, .. }
            | ScriptedFault::VisibilityLagAt { request, .. } => Some(request),
        }
    }

    /// The same fault naming request `to` instead.
    pub fn with_request(&self, to: u32) -> ScriptedFault {
        let mut f = self.clone();
        if let Some(r) = f.request_mut() {
            *r = to;
        }
        f
    }

    /// The transfer batch a one-batch fault names (`None` for any other fault).
    pub fn batch(&self) -> Option<u32> {
        match *self {
            ScriptedFault::TransferFailAt { batch, .. }
            | ScriptedFault::DelayAt { batch, .. }
            | ScriptedFault::VisibilityLagAt { batch, .. } => Some(batch),
            _ => None,
        }
    }

    /// A one-batch fault as the fault of the whole request (`TransferFailAt` as `TransferFail`,
    /// and so on); any other fault as it is.
    pub fn of_request(&self) -> ScriptedFault {
        match *self {
            ScriptedFault::TransferFailAt { request, .. } => ScriptedFault::TransferFail { request },
            ScriptedFault::DelayAt { request, delay_ms, .. } => ScriptedFault::Delay { request, delay_ms },
            ScriptedFault::VisibilityLagAt { request, lag_ms, .. } => ScriptedFault::VisibilityLag { request, lag_ms },
            ref f => f.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    pub transfer_fail: Ratio,
    pub delay_spike: Ratio,
    pub delay_spike_ms: u64,
    pub visibility_lag: Ratio,
    pub visibility_lag_ms: u64,
    pub node_crash: Ratio,
    pub crash_restart_ms: u64,
    /// Random faults stop at this virtual time (the liveness phase starts).
    pub heal_at_ms: u64,
    pub script: Vec<ScriptedFault>,
    /// Liveness mode (`check::liveness`): after the faults heal, every request must end within
    /// this bound. `None` (the default) is an ordinary run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_after_heal_ms: Option<u64>,
}

/// The fully resolved configuration of one run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    pub name: String,
    pub seed: u64,
    pub profile: String,
    pub knobs: Knobs,
    pub context_len: u64,
    pub prefill: Vec<NodeConfig>,
    pub decode: Vec<NodeConfig>,
    pub router_policy: RouterPolicy,
    pub cost: CostConfig,
    pub generator: Option<GeneratorConfig>,
    pub requests: Vec<RequestSpec>,
    pub faults: FaultConfig,
    /// After the last arrival, how long requests may take to reach a final status.
    pub liveness_bound_s: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `zero_on_free` takes the words the on/off knobs take (it took a boolean only:
    /// `--set zero_on_free=on` was "expected a boolean") and is still written as a boolean.
    #[test]
    fn zero_on_free_takes_on_off_words() {
        let base =
            toml::Table::try_from((profile("sglang-0.5.16").expect("shipped").knobs)()).expect("knobs serialise");
        for (word, want) in [("on", true), ("yes", true), ("true", true), ("off", false), ("no", false)] {
            let mut t = base.clone();
            t.insert("zero_on_free".into(), toml::Value::String(word.into()));
            let k: Knobs = t.try_into().expect(word);
            assert_eq!(k.zero_on_free, want, "{word}");
        }
        let mut t = base.clone();
        t.insert("zero_on_free".into(), toml::Value::Boolean(true));
        let k: Knobs = t.try_into().expect("a boolean");
        assert!(k.zero_on_free);
        assert_eq!(toml::Table::try_from(&k).expect("serialise")["zero_on_free"], toml::Value::Boolean(true));
        let mut t = base;
        t.insert("zero_on_free".into(), toml::Value::String("maybe".into()));
        assert!(t.try_into::<Knobs>().is_err());
    }

    #[test]
    fn profiles_serialise_every_knob() {
        let n = knob_names().len();
        for p in PROFILES {
            let t = toml::Table::try_from((p.knobs)()).unwrap();
            assert_eq!(t.len(), n, "{}", p.name);
            let back: Knobs = t.try_into().unwrap();
            assert_eq!(back, (p.knobs)());
        }
    }
}
