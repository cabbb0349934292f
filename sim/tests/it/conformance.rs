//! Conformance with the lifecycle reference (`docs/reference/sglang-pd-lifecycle.md`): one test
//! per behaviour, named after its section and item, asserting the engine's outcome (status,
//! timing, pages). ARCHITECTURE.md ("Conformance") maps each reference item to its test and says
//! where kvsim simplifies on purpose. The profile values each test relies on are cited in
//! `sim/src/config.rs` (released version and file, reference section 11).

use crate::FUZZ_COST;
use kvsim::check::Kind;
use kvsim::config::{OnOff, SimConfig, PROFILES};
use kvsim::scenario::{Overrides, Scenario};
use kvsim::simulate;
use kvsim::types::RequestId;
use kvsim::world::World;

const S: u64 = 1_000_000_000;

fn cfg(text: &str, profile: &str, set: &[(&str, &str)]) -> SimConfig {
    let o = Overrides {
        profile: Some(profile.to_string()),
        seed: None,
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    Scenario::parse("conformance.toml", text).and_then(|s| s.resolve(&o)).unwrap_or_else(|e| panic!("{e}"))
}

fn run(text: &str, profile: &str, set: &[(&str, &str)]) -> World {
    simulate(cfg(text, profile, set), None, true)
}

/// (status, answered at ns)
fn answer(w: &World, r: u32) -> (u16, u64) {
    let resp = w.reqs[r as usize].response().unwrap_or_else(|| panic!("request {r} unanswered"));
    (resp.status, resp.at.0)
}

fn kinds(w: &World) -> Vec<&'static str> {
    let mut k: Vec<_> = w.oracle.violations.iter().map(|v| v.kind.name()).collect();
    k.sort();
    k.dedup();
    k
}

/// Prefill's pool is below the prompt, decode's holds it: prefill rejects, decode accepts
/// (reference §10). Request 1 streams.
const OVER_LENGTH: &str = r#"
name = "over-length"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 6000
output_tokens = 4
[[request]]
at_ms = 1
tenant = 2
prompt_tokens = 6000
output_tokens = 4
streaming = true
"#;

#[test]
fn s3_aborts_no_release_notifies_decode_of_a_prefill_abort() {
    // PR #38704 is open: no shipped profile may send the notice.
    for p in PROFILES {
        assert_eq!((p.knobs)().prefill_abort_notifies_decode, OnOff::Off, "{}", p.name);
    }
}

#[test]
fn s10_fixed_build_with_mini_lb_answers_500_after_decode_waiting_timeout() {
    // sglang-0.5.22 with mini_lb (the profile's router): prefill's 400 is dropped, decode holds its
    // reservation until its 300 s waiting timeout; no stale read.
    let w = run(OVER_LENGTH, "sglang-0.5.22", &[]);
    for r in 0..2 {
        let (status, at) = answer(&w, r);
        assert_eq!(status, 500, "request {r}");
        assert!(at >= 300 * S, "request {r} answered at {at} ns, before decode's waiting timeout");
        assert!(w.oracle.has(Kind::WrongStatus, RequestId(r)), "router-waits-for-decode row");
    }
    assert_eq!(kinds(&w), ["wrong_status"], "{:?}", w.oracle.violations.first());
    assert!(w.oracle.violations.iter().all(|v| v.cause == "rejected_answered_5xx"));
}

#[test]
fn s5_router_that_cancels_the_decode_leg_answers_400_promptly() {
    // sglang's Rust gateway (PR #29017).
    let w = run(OVER_LENGTH, "sglang-0.5.22", &[("router_on_prefill_error", "cancel_decode")]);
    for r in 0..2 {
        let (status, at) = answer(&w, r);
        assert_eq!(status, 400, "request {r}");
        assert!(at < S, "request {r} answered at {at} ns");
    }
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

#[test]
fn s5_smg_cancels_the_decode_leg_only_when_streaming() {
    let w = run(OVER_LENGTH, "sglang-0.5.22", &[("router_on_prefill_error", "cancel_decode_when_streaming")]);
    let (status, at) = answer(&w, 0);
    assert_eq!(status, 500, "non-streaming: decode's answer");
    assert!(at >= 300 * S);
    let (status, at) = answer(&w, 1);
    assert_eq!(status, 400, "streaming: prefill's 400");
    assert!(at < S);
    assert!(!w.oracle.has(Kind::WrongStatus, RequestId(1)));
}

#[test]
fn s5_mini_lb_returns_the_decode_leg_even_when_streaming() {
    let w = run(OVER_LENGTH, "sglang-0.5.22", &[("router_on_prefill_error", "return_decode_leg")]);
    assert_eq!(answer(&w, 1).0, 500);
}

/// Decode's pool is below the prompt, prefill's holds it: decode itself marks the request
/// pending-abort (a one-token stub), prefill accepts it.
const DECODE_LIMIT: &str = r#"
name = "decode-limit"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 3000
output_tokens = 4
[[request]]
at_ms = 1000
tenant = 2
prompt_tokens = 4500
output_tokens = 4
"#;

#[test]
fn s4_1_decode_own_pending_abort_is_promoted_after_the_prebuilt_step_on_0_5_16() {
    let w = run(DECODE_LIMIT, "sglang-0.5.16", &[]);
    assert_eq!(answer(&w, 0).0, 200);
    let (status, at) = answer(&w, 1);
    assert_eq!(status, 400, "decode's own abort reaches the client");
    assert!(at < 300 * S);
    assert_eq!(w.reqs[1].decode_tokens(), 0, "no generated tokens");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

#[test]
fn s4_1_decode_door_turns_its_own_over_length_prompt_away_at_once_on_0_5_22() {
    let w = run(DECODE_LIMIT, "sglang-0.5.22", &[]);
    assert_eq!(answer(&w, 0).0, 200);
    let (status, at) = answer(&w, 1);
    assert_eq!(status, 400);
    assert!(at < S + S / 10, "answered at {at} ns: not at the door");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

#[test]
fn s4_1_both_pools_equal_the_context_no_200_for_a_rejected_request() {
    // Both roles stub the prompt (both pools equal the context).
    let text = DECODE_LIMIT.replace("pool_tokens = 8192", "pool_tokens = 4096").replace("4500", "4092");
    for p in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = run(&text.replace("context_len = 8192", "context_len = 4096"), p, &[]);
        assert_ne!(answer(&w, 1).0, 200, "{p}");
        assert!(!w.oracle.violations.iter().any(|v| v.cause == "rejected_answered_200"), "{p}");
        assert!(!w.oracle.violations.iter().any(|v| v.kind.name().contains("read")), "{p}");
    }
}

/// Request 0 is slow to prefill (60 s forward); request 1 waits in decode's prealloc queue
/// behind it (decode's pool holds one of them).
const CRASH: &str = r#"
name = "crash"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 16
reserved_decode_tokens = 16
[cost]
prefill_ns_per_token = 20000000
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 3000
output_tokens = 4
[[request]]
at_ms = 10
tenant = 2
prompt_tokens = 3000
output_tokens = 4
[[faults.script]]
kind = "crash"
at_ms = 1000
node = "prefill-0"
restart_after_ms = 600000
"#;

#[test]
fn s4_1_heartbeat_loss_fails_requests_waiting_in_decode_prealloc() {
    let w = run(CRASH, "sglang-0.5.16", &[]);
    // Detected after 2 × 5 s of lost heartbeats.
    for r in 0..2 {
        let (status, at) = answer(&w, r);
        assert_eq!(status, 500, "request {r}");
        assert!((11 * S..12 * S).contains(&at), "request {r} answered at {at} ns, not at the heartbeat loss");
    }
    assert!(!w.oracle.violations.iter().any(|v| v.kind == Kind::RequestHang));
}

#[test]
fn s4_2_stale_heartbeat_loss_spares_requests_admitted_after_a_restart() {
    // Prefill crashes at 1 s and is back at 2 s; the loss is reported at 11 s. Request 2 arrives
    // after the restart and is still in transfer at 11 s: it must finish with 200.
    let text = CRASH.replace("restart_after_ms = 600000", "restart_after_ms = 1000")
        + "[[request]]\nat_ms = 3000\ntenant = 3\nprompt_tokens = 400\noutput_tokens = 4\n";
    let text = text.replace("pool_tokens = 4096", "pool_tokens = 8192");
    let w = run(&text, "sglang-0.5.16", &[]);
    let (status, at) = answer(&w, 2);
    assert_eq!(status, 200, "answered {status} at {at} ns");
    assert!(at > 11 * S, "the request was still in transfer at the loss");
}

#[test]
fn s3_2_prefill_request_without_a_metadata_slot_is_skipped_and_stays_queued() {
    let text = r#"
name = "meta-slots"
context_len = 8192
[[prefill]]
pool_tokens = 8192
metadata_slots = 1
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1000
output_tokens = 4
[[request]]
at_ms = 0
tenant = 2
prompt_tokens = 1000
output_tokens = 4
[[request]]
at_ms = 0
tenant = 3
prompt_tokens = 6000
output_tokens = 4
"#;
    for p in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = run(text, p, &[]);
        for r in 0..3 {
            assert_eq!(answer(&w, r).0, 200, "{p}: request {r}");
        }
        assert!(w.oracle.violations.is_empty(), "{p}: {:?}", w.oracle.violations.first());
    }
}

#[test]
fn s2_timeouts_a_request_the_engine_ends_at_its_waiting_timeout_is_no_hang() {
    // The liveness bound (60 s) is shorter than decode's 300 s waiting timer: the released 0.5.22
    // behind mini_lb answers both prompts 500 when that timer fires, so the run goes on to it and
    // reports slow 500s, not hangs, and no pages held at the end.
    let text = OVER_LENGTH.replace("context_len = 8192", "context_len = 8192\nliveness_bound_s = 60");
    let w = run(&text, "sglang-0.5.22", &[]);
    for r in 0..2 {
        let (status, at) = answer(&w, r);
        assert_eq!(status, 500, "request {r}");
        assert!(at >= 300 * S, "request {r} answered at {at} ns");
    }
    assert_eq!(kinds(&w), ["wrong_status"], "{:?}", w.oracle.violations.first());
}

/// Reference §2 (timeouts) and the liveness horizon: a transfer still in flight holds its
/// sender's pages until it ends, so the run goes on to its end. One 2,000-token prompt over a
/// 5 bytes/µs link (a 28 s transfer), decode's waiting timer at 5 s, a 10 s liveness bound:
/// decode answers 500 at 5 s and the transfer ends at 28 s. On the fixed builds nothing is held at
/// the end; on 0.5.16 decode freed its pages at the timeout and the transfer writes into them (the
/// catalogue's decode-free-before-late-write). vLLM has no waiting timer: it answers 200 after the
/// read. (Before, the run stopped at the 10 s horizon and
/// reported prefill's in-flight pages, and on 0.5.22 and vLLM decode's deferred ones, as leaks:
/// false alarms on the fixed builds, and 0.5.16's use after free was never reached.)
const TRANSFER_PAST_HORIZON: &str = r#"
name = "slow-transfer"
context_len = 8192
liveness_bound_s = 10
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[cost]
transfer_bytes_per_us = 5
kv_bytes_per_token = 70000
[knobs]
page_size = 16
waiting_timeout_ms = 5000
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 4
"#;

#[test]
fn s2_timeouts_pages_under_a_transfer_in_flight_at_the_horizon_are_no_leak() {
    for profile in ["sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"] {
        let w = run(TRANSFER_PAST_HORIZON, profile, &[]);
        let (status, at) = answer(&w, 0);
        if profile == "vllm-nixl" {
            // vLLM's decode times no load out (`s4_2_vllm_a_slow_read_is_not_timed_out`).
            assert_eq!(status, 200, "{profile}");
            assert!(at > 28 * S, "{profile}: answered at {at} ns, after the read");
            assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
            assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile}");
            assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{profile}");
            continue;
        }
        assert_eq!(status, 500, "{profile}");
        assert!(at < 6 * S, "{profile}: answered at {at} ns, at decode's waiting timer");
        assert!(w.now().0 > 28 * S, "{profile}: the run stopped at {} ns, before the transfer ended", w.now().0);
        assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile}: prefill holds pages at the end");
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{profile}: decode holds pages at the end");
        // 0.5.16: decode freed at its timeout and the transfer writes into the pages. 0.5.22:
        // decode's timeout aborts the request on prefill too, which releases the computed
        // source into its radix cache (not the free list) while the 28 s chunk still reads it,
        // and decode's pages wait for the drain ack: nothing. With the chunk cache the release
        // frees the source under the chunk (the source half of deferred-release-defeated).
        let want: &[&str] = if profile == "sglang-0.5.16" { &["use_after_free"] } else { &[] };
        assert_eq!(kinds(&w), want, "{profile}: {:?}", w.oracle.violations.first());
        if profile == "sglang-0.5.22" {
            let chunk = run(TRANSFER_PAST_HORIZON, profile, &[("prefill_cache", "chunk")]);
            assert_eq!(kinds(&chunk), ["use_after_free"], "{profile}, chunk cache");
            assert!(chunk.oracle.violations.iter().all(|v| v.cause == "transfer_read_of_a_source_page"));
        }
    }
}

#[test]
fn s6_vllm_reuses_unhashed_blocks_first_and_hashed_blocks_last() {
    use kvsim::pool::{Holder, Pool, Run};
    use kvsim::types::{NodeId, Role};
    // vLLM 0.33.0 (`v1/core/block_pool.py` `free_blocks`, tail first): a finished request's full
    // (hashed) blocks go to the tail, its partial last block and a reservation that never got its
    // KV go to the head — the next allocation reuses those first.
    let profile = PROFILES.iter().find(|p| p.name == "vllm-nixl").expect("profile");
    let k = (profile.knobs)();
    let mut p = Pool::new(NodeId { role: Role::Decode, index: 0 }, 64, 4, k.free_list_policy, k.zero_on_free);
    let (r0, r1) = (Holder::Req(RequestId(0)), Holder::Req(RequestId(1)));
    let a = p.alloc(4, r0).unwrap();
    let b = p.alloc(2, r1).unwrap();
    assert!(p.free_hashed(&a, r0, 3).is_empty());
    assert!(p.free_hashed(&b, r1, 0).is_empty());
    let next = p.alloc(3, Holder::Req(RequestId(2))).unwrap();
    assert_eq!(next, vec![Run { first: 5, count: 2 }, Run { first: 4, count: 1 }]);
    let rest = p.alloc(13, Holder::Req(RequestId(3))).unwrap();
    assert_eq!(rest.last(), Some(&Run { first: 1, count: 3 }), "hashed blocks reused last");
}

/// One 4,000-token prompt whose KV moves in 25 batches of 10 pages, 16 ms each. Prefill runs
/// the chunk cache (`--disable-radix-cache`), whose release frees the request's pages: a source
/// read after an abort then shows as a use after free, the probe the tests below count batches
/// with. (With the radix cache the released KV stays cached and the read is the request's own:
/// `s3_sglang_a_failed_sends_source_goes_to_the_radix_cache_not_the_free_list`.)
const SLOW_TRANSFER: &str = r#"
name = "slow-transfer"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
max_transfer_batch_pages = 10
prefill_cache = "chunk"
[cost]
kv_bytes_per_token = 100
transfer_bytes_per_us = 100
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 4000
output_tokens = 4
"#;

/// Runs `text` as `run` does and returns the last transfer job as it was last seen with its page
/// lists, and as it was last seen at all: a finished job drops them and then leaves `World::jobs`
/// (`transfer_retire`), so they are read while it runs.
fn run_watching_last_job(text: &str) -> (World, kvsim::transfer::TransferJob, kvsim::transfer::TransferJob) {
    let mut w = World::new(cfg(text, "sglang-0.5.22", &[]), kvsim::trace::Tracer::new(None));
    w.check_invariants = true;
    let (mut seen, mut last) = (None, None);
    while w.step() {
        if let Some(j) = w.jobs.last_id().and_then(|id| w.jobs.get(id)) {
            if !j.batches().is_empty() {
                seen = Some(j.clone());
            }
            last = Some(j.clone());
        }
    }
    w.finish();
    let job = seen.expect("a transfer");
    assert!(w.jobs.last_id().and_then(|id| w.jobs.get(id)).is_none(), "a finished job has left");
    (w, job, last.expect("a transfer"))
}

/// An abort while batch 10 of a one-chunk, 25-batch transfer is written: the chunk is sent to
/// its last batch (sglang 0.5.22 wheel, `disaggregation/mooncake/conn.py` `send_kvcache`: the
/// bounded-batch loop stops only on a batch's error, never on the room's status; the worker checks
/// for Failed between chunks, `transfer_worker`), so nothing is skipped and the job ends with its
/// last batch. Before the thirty-ninth session the abort dropped batches 11..25. A later chunk
/// still queued is skipped whole (`s3_aborts_a_failed_chunk_skips_the_requests_queued_chunks`).
#[test]
fn s3_aborts_the_chunk_being_written_is_sent_to_its_last_batch() {
    let (_, job, _) = run_watching_last_job(SLOW_TRANSFER);
    assert_eq!(job.batches().len(), 25);
    let (start, _) = job.batches()[10].span.expect("scheduled");
    let (_, last_ret) = job.batches()[24].span.expect("scheduled");
    // The client aborts while batch 10 is being written (the abort reaches prefill within it).
    let text = SLOW_TRANSFER.replace("output_tokens = 4", &format!("output_tokens = 4\nabort_at_ns = {}", start.0 + 1));
    let (w, job, done) = run_watching_last_job(&text);
    assert!(done.is_aborted() && done.is_done());
    let skipped: Vec<bool> = job.batches().iter().map(|b| b.skipped).collect();
    assert!(skipped.iter().all(|s| !*s), "no batch of the chunk being written is skipped: {skipped:?}");
    assert_eq!(job.batches()[24].span.map(|(_, r)| r), Some(last_ret), "the last batch keeps its time");
    assert_eq!(answer(&w, 0).0, 499);
    // Batch 10 is the first to read the source pages after the abort, which the chunk cache freed
    // then (deferred-release-defeated's source half); the first violation names its 10 pages.
    let uaf: Vec<_> = w.oracle.violations.iter().map(|v| (v.kind.name(), v.cause.as_str(), v.pages)).collect();
    assert_eq!(uaf, [("use_after_free", "transfer_read_of_a_source_page", 10)]);
}

/// sglang 0.5.16 and 0.5.22 wheels: a request whose send fails after its forward computed the
/// prompt (an abort or a failed transfer in the inflight queue) is released through
/// `handle_inflight_transfer_failure`, which with the radix cache puts its KV into the tree
/// (0.5.22 `release_kv_cache(checkpoint=True)`, 0.5.16 `cache_finished_req`): cached, unlocked,
/// evictable, not freed. So the batch still being written after the abort reads the request's own
/// KV, and nothing is reported, until something evicts those pages under it: request 1 of
/// another tenant, arriving just after the abort, needs the whole pool, its allocation evicts the
/// cached pages and writes its prompt there, and the batch then reads them. (The model used to
/// free at once whatever the cache, a false `use_after_free/transfer_read_of_a_source_page` on
/// every abort during a transfer on the fixed build: 8,574 runs of a 45,000-run campaign.)
#[test]
fn s3_sglang_a_failed_sends_source_goes_to_the_radix_cache_not_the_free_list() {
    let radix = SLOW_TRANSFER.replace("prefill_cache = \"chunk\"\n", "");
    assert_ne!(radix, SLOW_TRANSFER);
    let (_, job, _) = run_watching_last_job(&radix);
    let (start, _) = job.batches()[10].span.expect("scheduled");
    let aborted = radix.replace("output_tokens = 4", &format!("output_tokens = 4\nabort_at_ns = {}", start.0 + 1));
    let (w, _, _) = run_watching_last_job(&aborted);
    assert_eq!(answer(&w, 0).0, 499);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    let pool = w.prefill[0].pool();
    let cached = (0..pool.usable_pages() as u32)
        .filter(|p| matches!(pool.holder_of(*p), Some(kvsim::pool::Holder::Cache(RequestId(0)))))
        .count();
    assert_eq!(cached, 250, "request 0's 250 pages are cached at the end");
    // Evicted under the batch: request 0's one chunk (2,000 tokens) is delayed 5 s and aborted
    // at 1 s; request 1 of another tenant arrives at 1.1 s with a prompt that fits prefill's pool
    // only once the cached pages are evicted.
    let evicting = |cache: &str, bystander: bool| {
        let request_1 = if bystander {
            "[[request]]\nat_ms = 1100\ntenant = 2\nprompt_tokens = 3000\noutput_tokens = 4\n"
        } else {
            ""
        };
        format!(
            r#"
name = "evicted-under-the-batch"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
prefill_cache = "{cache}"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 4
abort_at_ms = 1000
{request_1}[[faults.script]]
kind = "delay"
request = 0
delay_ms = 5000
"#
        )
    };
    for cache in ["radix", "chunk"] {
        let w = run(&evicting(cache, true), "sglang-0.5.22", &[]);
        assert_eq!(answer(&w, 0).0, 499, "{cache}");
        assert_eq!(answer(&w, 1).0, 200, "{cache}");
        let uaf: Vec<_> = w.oracle.violations.iter().map(|v| (v.kind.name(), v.cause.as_str(), v.request)).collect();
        assert_eq!(uaf, [("use_after_free", "transfer_read_of_a_source_page", Some(RequestId(0)))], "{cache}");
    }
    // Without request 1 nothing evicts: clean with the radix cache.
    let w = run(&evicting("radix", false), "sglang-0.5.22", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
}

/// The campaigns' cost model (`FUZZ_COST`) with a link ten times slower (2,500 bytes per µs) and
/// no attention term: a 1,024-token chunk takes ~29 ms on the wire.
const SLOW_LINK_COST: &str = "[cost]\nprefill_base_us = 1000\nprefill_ns_per_token = 20000\nprefill_ns_per_token_per_kctx = 0\ndecode_step_base_us = 10000\ndecode_ns_per_kkv = 2000\nkv_bytes_per_token = 70000\ntransfer_latency_us = 500\ntransfer_bytes_per_us = 2500\nmessage_latency_us = 200\n";

/// sglang 0.5.16 and 0.5.22: each finished chunk of a chunked prefill goes into the radix tree
/// before the next one runs (0.5.22 `process_prefill_chunk` → `checkpoint_disagg_prefill`, which
/// sets `cache_protected_len`; 0.5.16 `maybe_cache_unfinished_req(chunked=True)`), and an abort
/// frees only past the protected length (`release_kv_cache`: "The protected prefix is not this
/// req's to free"). Request 0 (1,500 tokens, 1,024-token chunks) is aborted at 30 ms, while its
/// first chunk, sent early, is still being written: that chunk reads its own cached KV, and only
/// the second chunk's pages are freed. With the chunk cache every page is freed under it. (The
/// model freed every page whatever the cache: a false `use_after_free/transfer_read_of_a_source_page`
/// behind most of that signature's runs on sglang-0.5.22.)
#[test]
fn s3_sglang_an_aborted_chunking_requests_sent_chunks_stay_cached() {
    let text = &[
        r#"
name = "chunk-abort"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 8192
[knobs]
chunked_prefill_size = 1024
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 1500
output_tokens = 4
abort_at_ms = 30
"#,
        SLOW_LINK_COST,
    ]
    .concat();
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(text, profile, &[]);
        assert_eq!(answer(&w, 0).0, 499, "{profile}");
        // (0.5.16's decode frees its pages at once under the write: that is another row,
        // decode-free-before-late-write.)
        let source = w.oracle.violations.iter().any(|v| v.cause == "transfer_read_of_a_source_page");
        assert!(!source, "{profile}: {:?}", w.oracle.violations);
        let pool = w.prefill[0].pool();
        let cached = (0..pool.usable_pages() as u32)
            .filter(|p| matches!(pool.holder_of(*p), Some(kvsim::pool::Holder::Cache(RequestId(0)))))
            .count();
        assert_eq!(cached, 1024, "{profile}: the first chunk's pages are the cache's");
        assert_eq!(pool.held_pages(), 1024, "{profile}: the chunk being computed was freed");
    }
    let w = collect(text, "sglang-0.5.22", &[("prefill_cache", "chunk")]);
    assert!(
        w.oracle.violations.iter().any(|v| v.cause == "transfer_read_of_a_source_page"),
        "the chunk cache frees under the chunk: {:?}",
        w.oracle.violations
    );
}

/// sglang's radix cache evicts its least recently used leaves (`LRUStrategy` over
/// `evictable_device_leaves`). Request 0's two cached blocks (released at ~51 ms) are older than
/// request 1's pages (2,048 tokens without prefix blocks, aborted after its forward at 160 ms and
/// cached while its transfer still reads them); request 2 needs about 1,000 tokens of eviction:
/// request 0's older blocks go, request 1's stay under its transfer. (The model emptied its plain
/// cache before the prefix blocks: a false use after free, 2,000 pages then request 2's.)
#[test]
fn s3_sglang_eviction_takes_the_least_recently_used_cache_entry_first() {
    let text = &[
        r#"
name = "evict-order"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 32768
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 1024
output_tokens = 1
prefix_blocks = [1, 2]
[[request]]
at_ms = 100
tenant = 0
prompt_tokens = 2048
output_tokens = 4
abort_at_ms = 160
[[request]]
at_ms = 165
tenant = 1
prompt_tokens = 2000
output_tokens = 1
"#,
        SLOW_LINK_COST,
    ]
    .concat();
    let w = run(text, "sglang-0.5.22", &[]);
    assert_eq!(answer(&w, 1).0, 499);
    assert_eq!(answer(&w, 2).0, 200);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
}

/// Reference §3 (aborts): a failed chunk marks the room Failed, and the transfer worker skips
/// every queued chunk of a Failed room (sglang 0.5.16 and 0.5.22 wheels,
/// `disaggregation/mooncake/conn.py` `transfer_worker`), so the request's source pages drain with
/// the chunk being written. Request 0's 16 chunks (256 tokens, 16 pages each) are all computed
/// within 0.25 s and queued; each transfer outlives the 500 ms sync timeout (a scripted 1 s
/// delay). The first fails at ~0.5 s; the worker dequeues the next only after marking the room
/// Failed, so none of the other 15 is written. Prefill runs the chunk cache, so the release frees
/// the source (see `SLOW_TRANSFER`). (Before: each queued chunk still ran to its own
/// timeout and prefill held the pages for 8 s; in a campaign, a 7,353-token request in 4-page
/// batches kept writing past the 1,200 s horizon, `page_leak/prefill` on sglang-0.5.22, and
/// decode's 30 s fallback freed the pages under the queued chunks: `use_after_free/transfer_write`.)
const FAILED_CHUNK: &str = r#"
name = "failed-chunk"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
chunked_prefill_size = 256
transfer_sync_timeout_ms = 500
prefill_cache = "chunk"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 4096
output_tokens = 4
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 1000
"#;

/// When prefill frees request 0's pages (ns), and how many of its batches landed on decode.
fn prefill_free_and_copies(w: &World) -> (u64, usize) {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let recs = w.tracer.collected.as_ref().expect("collected");
    let freed = recs
        .iter()
        .find_map(|(t, rec)| match rec {
            TraceRecord::Mem(MemOp::Free { pool, r, .. }) if pool.role == Role::Prefill && r.0 == 0 => Some(t.0),
            _ => None,
        })
        .expect("prefill frees request 0's pages");
    (freed, copies_of_request_0(w))
}

/// How many of request 0's batches landed (its `copy` records).
fn copies_of_request_0(w: &World) -> usize {
    use kvsim::trace::{MemOp, TraceRecord};
    let recs = w.tracer.collected.as_ref().expect("collected");
    recs.iter().filter(|(_, rec)| matches!(rec, TraceRecord::Mem(MemOp::Copy { r, .. }) if r.0 == 0)).count()
}

#[test]
fn s3_aborts_a_failed_chunk_skips_the_requests_queued_chunks() {
    // Quiesced at the timeout (a what-if: no release's Mooncake call does it): nothing lands, and
    // prefill frees as the call returns.
    let w = collect(FAILED_CHUNK, "sglang-0.5.22", &[("transfer_timeout_semantics", "quiesced")]);
    assert_eq!(answer(&w, 0).0, 500);
    assert_eq!(w.jobs.len(), 16, "every chunk was computed and handed to the worker before the failure");
    let (freed, copies) = prefill_free_and_copies(&w);
    assert!(freed < 600_000_000, "prefill freed request 0's pages at {freed} ns, not with the failed chunk");
    assert_eq!(copies, 0);
    assert!(w.prefill.iter().all(|p| p.leaks().is_none()));
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    // 0.5.16 and 0.5.22: the failed batch keeps writing after its call returned (Mooncake #4247;
    // 0.5.22 `mooncake/conn.py` `_poison_unsettled_send` says so) and lands alone; prefill freed
    // its source at the failure (the chunk cache frees it; PR #38961, open, would hold it), so that one landing reads a
    // freed page: the released build's own use after free, named for the timeout, not the
    // queued chunks'. 0.5.16's decode frees its pages at the Failed status, so the write lands
    // in freed pages too; 0.5.22's failed send poisons the drain ack and decode holds its pages
    // for the 30 s fallback, long after the landing.
    let read = "use_after_free/transfer_read_of_a_source_page/sync_timeout";
    let write = "use_after_free/transfer_write/sync_timeout";
    for (profile, want) in [("sglang-0.5.16", vec![read, write]), ("sglang-0.5.22", vec![read])] {
        let w = collect(FAILED_CHUNK, profile, &[]);
        assert_eq!(answer(&w, 0).0, 500, "{profile}");
        let (freed, copies) = prefill_free_and_copies(&w);
        assert!(freed < 600_000_000, "{profile}: prefill freed request 0's pages at {freed} ns");
        assert_eq!(copies, 1, "{profile}: only the chunk being written lands");
        let sigs = kvsim::fuzz::signatures(&w);
        let uaf: Vec<&str> = sigs.iter().map(String::as_str).filter(|s| s.starts_with("use_after_free")).collect();
        assert_eq!(uaf, want, "{profile}");
    }
}

/// Reference §3 (aborts): the transfer worker drops a Failed room's queued chunks as it dequeues
/// them and takes the next chunk at once (sglang 0.5.16 and 0.5.22 wheels,
/// `disaggregation/mooncake/conn.py` `transfer_worker`: "Skipping chunk for room …", then
/// `continue`), so another request's chunks queued behind them move up. `FAILED_CHUNK` plus
/// request 1 (another tenant, one chunk) arriving 10 ms later: its job is queued behind request
/// 0's sixteen. Request 0's first chunk fails at ~0.5 s; request 1's chunk is written right
/// after, lands once, and request 1 is answered 200 within a second. (Before, the worker stayed
/// booked for the sixteen chunks' 0.5 s timeouts: request 1's chunk started at ~8 s; with a 90 s
/// delay on twenty chunks it started past the 1,200 s horizon, a `page_leak/prefill` on
/// `sglang-0.5.22` that a guided campaign found.)
#[test]
fn s3_aborts_the_workers_queue_moves_up_after_a_failed_rooms_chunks_are_skipped() {
    let text = format!("{FAILED_CHUNK}\n[[request]]\nat_ms = 10\ntenant = 2\nprompt_tokens = 200\noutput_tokens = 2\n");
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(&text, profile, &[]);
        assert_eq!(answer(&w, 0).0, 500, "{profile}");
        let (status, at) = answer(&w, 1);
        assert_eq!(status, 200, "{profile}");
        assert!(at < 1_000_000_000, "{profile}: request 1 answered at {at} ns, behind the skipped chunks' booked time");
        use kvsim::trace::{MemOp, TraceRecord};
        let recs = w.tracer.collected.as_ref().expect("collected");
        let copies: Vec<u64> = recs
            .iter()
            .filter_map(|(t, rec)| matches!(rec, TraceRecord::Mem(MemOp::Copy { r, .. }) if r.0 == 1).then_some(t.0))
            .collect();
        assert_eq!(copies.len(), 1, "{profile}: request 1's one chunk lands once (its old land event does nothing)");
        assert!(copies[0] < 1_000_000_000, "{profile}: landed at {} ns", copies[0]);
        assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile}");
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{profile}");
        // The failed chunk keeps writing after its call returned and lands on request 0's freed
        // source (its own use after free, `s3_aborts_a_failed_chunk_skips_the_requests_queued_chunks`);
        // nothing else is reported on either version.
        let others: Vec<_> = w
            .oracle
            .violations
            .iter()
            .filter(|v| !(v.kind.name() == "use_after_free" && v.request.is_some_and(|r| r.0 == 0)))
            .collect();
        assert!(others.is_empty(), "{profile}: {:?}", others.first());
    }
}

/// Reference §7 (vLLM): decode issues each request's read when it is scheduled, asynchronously,
/// beside the reads already in flight (vLLM 0.33.0 `distributed/kv_transfer/kv_connector/v1/
/// nixl/pull_worker.py` `start_load_kv` -> `_read_blocks`: `make_prepped_xfer`, then
/// `transfer(handle)`, completion polled in later steps), while sglang's Mooncake
/// `transfer_worker` sends the chunks of its queue one by one. Request 0's transfer carries a
/// scripted 5 s delay; request 1 (another tenant) comes 10 ms later. Behind vLLM's proxy request 1
/// is answered within 0.2 s (before: 5.1 s, queued behind request 0's read on one serial worker,
/// which in guided `vllm-nixl` campaigns pushed reads past the horizon: `page_leak/decode`,
/// `request_hang/decode_leg_pending`); on sglang 0.5.22 it still waits for request 0's chunk.
const DELAYED_READ: &str = r#"
name = "delayed-read"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1024
output_tokens = 2
[[request]]
at_ms = 10
tenant = 2
prompt_tokens = 200
output_tokens = 2
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 5000
"#;

#[test]
fn s7_vllm_decode_reads_are_in_flight_together_sglang_chunks_queue_on_one_worker() {
    let w = collect(DELAYED_READ, "vllm-nixl", &[]);
    let ((s0, at0), (s1, at1)) = (answer(&w, 0), answer(&w, 1));
    assert_eq!((s0, s1), (200, 200));
    assert!(at1 < 200_000_000, "vllm-nixl: request 1 answered at {at1} ns, behind request 0's read");
    assert!(at0 > 5_000_000_000, "request 0's read takes its 5 s delay: answered at {at0} ns");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let w = collect(DELAYED_READ, "sglang-0.5.22", &[]);
    let ((s0, at0), (s1, at1)) = (answer(&w, 0), answer(&w, 1));
    assert_eq!((s0, s1), (200, 200));
    assert!(at1 > at0, "sglang-0.5.22: request 1's chunk waits for request 0's on the worker ({at1} <= {at0})");
}

/// Reference §3 (transfer queues): sglang's Mooncake sender shards chunks over its transfer
/// queues by the destination session (0.5.22 `disaggregation/mooncake/conn.py`
/// `add_transfer_request`: `shard_idx = session_port_sum % len(self.transfer_queues)`, 4 queues
/// by default), one worker thread each: chunks to one decode node queue behind each other, chunks
/// to another do not. Request 0 (to decode-0) carries a scripted 5 s delay (`DELAYED_READ`);
/// request 1 goes to decode-1 (round robin) and is answered within 0.2 s (before: 5.1 s, behind
/// request 0 on the one queue kvsim gave a prefill node); request 2 goes to decode-0 again and
/// still waits.
#[test]
fn s3_sglang_chunks_to_another_decode_do_not_queue_behind_a_delayed_chunk() {
    // `DELAYED_READ` with a second decode node, round robin, and a third request.
    let second = "[[decode]]\npool_tokens = 8192\n[router]\npolicy = \"round_robin\"\n[knobs]";
    let text = DELAYED_READ.replace("[knobs]", second)
        + "[[request]]\nat_ms = 20\ntenant = 3\nprompt_tokens = 200\noutput_tokens = 2\n";
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(&text, profile, &[]);
        let at: Vec<u64> = (0..3)
            .map(|r| answer(&w, r))
            .map(|(status, at)| {
                assert_eq!(status, 200, "{profile}");
                at
            })
            .collect();
        assert!(at[1] < 200_000_000, "{profile}: request 1 (decode-1) answered at {} ns", at[1]);
        assert!(at[2] > at[0], "{profile}: request 2 (decode-0) waits for request 0's chunk: {at:?}");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
    }
}

/// Reference §3 (transfer queues) across a prefill restart: the transfer workers and their queues
/// live in the prefill process (sglang 0.5.22 `disaggregation/mooncake/conn.py`: the sender's
/// `transfer_queues` and their worker threads are made when the manager starts), so a restarted
/// prefill starts with empty queues. Request 0's chunk carries a scripted 5 s delay
/// (`DELAYED_READ`); prefill-0 crashes at 1 s and is back at 1.5 s; request 1 arrives at 2 s and
/// is answered within 0.5 s. (Before, the dead incarnation's booking of the queue to decode-0
/// held request 1's chunk until about 5 s.)
#[test]
fn s3_a_restarted_prefill_starts_with_empty_transfer_queues() {
    let text = DELAYED_READ.replace("at_ms = 10\n", "at_ms = 2000\n")
        + "[[faults.script]]\nkind = \"crash\"\nat_ms = 1000\nnode = \"prefill-0\"\nrestart_after_ms = 500\n";
    assert!(text.contains("at_ms = 2000"));
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(&text, profile, &[]);
        assert_ne!(answer(&w, 0).0, 200, "{profile}: request 0 died with prefill-0");
        let (status, at) = answer(&w, 1);
        assert_eq!(status, 200, "{profile}");
        assert!(at < 2_500_000_000, "{profile}: request 1 answered at {at} ns, behind the dead incarnation's chunk");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
    }
}

/// A scripted `delay` makes the request's transfer `delay_ms` longer, once
/// (docs/scenario-format.md): it lands on the request's first batch and the batches behind it
/// move with it. Request 0's 4,096 tokens go as 16 chunks (16 pages each) in 4-page batches,
/// 64 batches; with a 1 s delay it is answered at most 1 s later than without (0.85 s: the
/// worker's idle time between chunks absorbs some). (Before, every
/// batch carried the delay: 63.85 s later; a guided campaign on sglang-0.5.16 turned a 10 s delay
/// on a 3,472-page transfer in 4-page batches into 2.4 hours of transfer and a prefill
/// `page_leak` at the horizon.)
#[test]
fn scripted_delay_lengthens_the_requests_transfer_once() {
    let delayed = FAILED_CHUNK.replace("transfer_sync_timeout_ms = 500\n", "max_transfer_batch_pages = 4\n");
    assert!(delayed.contains("max_transfer_batch_pages = 4"));
    let plain = delayed.replace("delay_ms = 1000", "delay_ms = 0");
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let (w, base) = (collect(&delayed, profile, &[]), collect(&plain, profile, &[]));
        assert_eq!(copies_of_request_0(&w), 64, "{profile}: 64 batches landed");
        let ((status, at), (base_status, base_at)) = (answer(&w, 0), answer(&base, 0));
        assert_eq!((status, base_status), (200, 200), "{profile}");
        let later = at - base_at;
        // At most the delay (the queue had idle time between chunks that absorbs some of it).
        assert!((500_000_000..=1_000_000_000).contains(&later), "{profile}: answered {later} ns later, not up to 1 s");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
    }
}

/// Reference §3 (aborts): a room already Failed takes no more chunks (`add_transfer_request`
/// returns for a Failed room: sglang 0.5.16 and 0.5.22 wheels, `disaggregation/mooncake/conn.py`).
/// Every transfer of request 0 fails at once (scripted): the first chunk's fails ~1 ms after it was
/// handed over, while the second chunk is still being computed, so the 15 chunks computed after it
/// are never queued; the request finishes its forward and is answered 500. (Before, each was
/// queued and failed on its own: 16 jobs.)
#[test]
fn s3_aborts_a_failed_room_takes_no_more_chunks() {
    let text =
        FAILED_CHUNK.replace("kind = \"delay\"\nrequest = 0\ndelay_ms = 1000", "kind = \"transfer_fail\"\nrequest = 0");
    assert_ne!(text, FAILED_CHUNK);
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(&text, profile, &[]);
        assert_eq!(answer(&w, 0).0, 500, "{profile}");
        assert_eq!(w.jobs.len(), 1, "{profile}: chunks handed to the worker");
        assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile}");
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{profile}");
    }
}

/// Reference §3 (aborts), a decode that dies while prefill pushes (sglang's Mooncake writes): the
/// chunk being written fails when its write returns (the peer's memory registration is gone; 0.5.16
/// and 0.5.22 wheels, `disaggregation/mooncake/conn.py` `transfer_worker` marks the room Failed on a
/// non-zero `send_kvcache`), and the worker drops the room's queued chunks. 45 pages go in 12
/// four-page chunks, each delayed 10 s (scripted); decode-0 dies at 1.234 s and restarts 2 s later.
/// Prefill (chunk cache) frees its source when the first chunk returns (~10.36 s), nothing lands in the
/// restarted decode, nothing leaks (before: all 12 chunks "landed" one every 10 s into the new
/// incarnation and prefill held its 45 pages past the 120 s liveness bound: `page_leak/prefill` on
/// `sglang-0.5.22`, campaign seed 464,114).
const DEAD_DECODE: &str = r#"
name = "dead-decode"
context_len = 16384
liveness_bound_s = 120
[[prefill]]
pool_tokens = 184
[[decode]]
pool_tokens = 692
[knobs]
page_size = 4
max_transfer_batch_pages = 4
prefill_cache = "chunk"
[[request]]
at_ms = 357
tenant = 0
prompt_tokens = 177
output_tokens = 1
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 10000
[[faults.script]]
kind = "crash"
node = "decode-0"
at_ms = 1234
restart_after_ms = 2000
"#;

#[test]
fn s3_aborts_a_dead_decode_fails_the_chunk_being_written_and_its_queued_chunks_are_skipped() {
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(DEAD_DECODE, profile, &[]);
        assert_eq!(answer(&w, 0).0, 503, "{profile}: the router answers when decode dies");
        let (freed, copies) = prefill_free_and_copies(&w);
        assert!(
            (10 * S..11 * S).contains(&freed),
            "{profile}: prefill freed request 0's pages at {freed} ns, not when the chunk being written failed"
        );
        assert_eq!(copies, 0, "{profile}: nothing lands in a dead or restarted decode");
        assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile}");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
    }
    // Prefill learns of the death only from its own write: a job submitted after decode died
    // fails on its first chunk. Decode dies before prefill's forward ends (at ~362 ms).
    let early = DEAD_DECODE.replace("at_ms = 1234", "at_ms = 358");
    assert_ne!(early, DEAD_DECODE);
    let w = collect(&early, "sglang-0.5.22", &[]);
    let (freed, copies) = prefill_free_and_copies(&w);
    assert!(freed < 11 * S, "prefill freed request 0's pages at {freed} ns");
    assert_eq!(copies, 0);
    assert!(w.prefill.iter().all(|p| p.leaks().is_none()));
}

/// Reference §7: decode reserves the whole prompt (here plus a one-token speculative lookahead,
/// `decode_lookahead_tokens`, vLLM's `num_lookahead_tokens`) and asserts it never holds more
/// blocks than prefill exposes (vLLM `nixl_connector.py` `update_state_after_alloc`:
/// `assert len(local_block_ids) <= len(remote_block_ids)`): a short prefill fails loudly.
/// 2,000 tokens fill 125 blocks of 16 exactly: a one-token lookahead makes decode reserve 126.
const SHORT_PREFILL: &str = r#"
name = "short-prefill"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 4096
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 4
"#;

#[test]
fn s7_vllm_decode_asserts_on_a_reservation_past_what_prefill_exposes_and_reads_nothing_stale() {
    let w = run(SHORT_PREFILL, "vllm-nixl", &[("decode_lookahead_tokens", "1")]);
    let resp = w.reqs[0].response().expect("answered");
    assert!(resp.status >= 500 && resp.tokens == 0, "{resp:?}");
    assert_eq!(w.reqs[0].caught_by(), Some(kvsim::world::Mitigation::AssertCrash));
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    // A lookahead that stays inside the prompt's last block asks for no extra block: answered 200.
    let inside = SHORT_PREFILL.replace("prompt_tokens = 2000", "prompt_tokens = 1999");
    let w = run(&inside, "vllm-nixl", &[("decode_lookahead_tokens", "1")]);
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(200));
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    // Without the assertion (sglang's room-only commit) the extra block is reserved and never read
    // before decode writes it: still no stale read, and the request is answered 200.
    let w = run(SHORT_PREFILL, "vllm-nixl", &[("decode_lookahead_tokens", "1"), ("decode_commit_check", "room_only")]);
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(200));
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
}

/// Reference §3.3 (waiting queue): a room decode marked Failed is retired from prefill's waiting
/// queue before admission (sglang 0.5.16 and 0.5.22 wheels, `disaggregation/prefill.py`
/// `resolve_waiting_queue_bootstrap` → `handle_bootstrap_failure`): its slot is released, its leg
/// answered, decode's deferred release acknowledged. Request 1 waits behind request 0's forward
/// when decode's 100 ms waiting timer fails it.
#[test]
fn s3_3_a_failed_room_in_the_waiting_queue_is_retired_before_admission() {
    // The orphan row's scenario (`catalogue_knobs::ORPHAN`), under the engines' own poll of every queue.
    let text = super::catalogue_knobs::ORPHAN;
    for p in ["sglang-0.5.16", "sglang-0.5.22"] {
        // 0.5.16 frees decode's pages at once and never tells prefill; deferred release (0.5.22's)
        // sends the abort that prefill must find in its waiting queue.
        let w = run(text, p, &[("decode_abort_release", "deferred")]);
        assert_eq!(w.reqs[1].prefill_leg(), Some(500), "{p}");
        assert_eq!(w.prefill[0].meta().in_use(), 0, "{p}");
        assert!(w.prefill[0].reqs().is_empty(), "{p}");
        assert!(w.oracle.violations.is_empty(), "{p}: {:?}", w.oracle.violations);
    }
}

/// Two requests whose prompts fit decode's pool together but whose outputs do not: request 0
/// (arrives first, 940 tokens) and request 1 (1 ms later, 950 tokens) on a 2,048-token decode pool
/// (128 pages of 16), 300 output tokens each. Both are admitted (decode reserves 16 tokens each),
/// then the running batch runs out of pages while both decode. Admitted by pages and reserve
/// (`decode_admission = pages_and_reserve`, vLLM's rule): sglang's budget would hold request 1
/// back until request 0 finished (two requests never over-commit under it; three do, as in the
/// catalogue's leak-abort-retracted), and these tests are about what happens once decode is
/// over-committed.
const OUT_OF_PAGES: &str = r#"
name = "out-of-pages"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 2048
[knobs]
page_size = 16
reserved_decode_tokens = 16
decode_admission = "pages_and_reserve"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 940
output_tokens = 300
[[request]]
at_ms = 1
tenant = 2
prompt_tokens = 950
output_tokens = 300
"#;

/// (request, pages) of every decode-pool free that the same request's later allocation follows:
/// its retractions and preemptions, in order.
fn early_frees(w: &World) -> Vec<(u32, u64)> {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let recs = kvsim::trace::expand_records(w.tracer.collected.as_ref().expect("collected"));
    let mut out = Vec::new();
    for (i, (_, rec)) in recs.iter().enumerate() {
        if let TraceRecord::Mem(MemOp::Free { pool, r, pages }) = rec {
            let again = recs[i + 1..]
                .iter()
                .any(|(_, x)| matches!(x, TraceRecord::Mem(MemOp::Alloc { pool: p, r: q, .. }) if p == pool && q == r));
            if pool.role == Role::Decode && again {
                out.push((r.0, kvsim::pool::pages_in(pages)));
            }
        }
    }
    out
}

/// The run of `text` under `profile`, checked against the reference oracle read by read: no
/// disagreement.
fn assert_oracles_agree(text: &str, profile: &str) {
    let checked = kvsim::simulate_checked(cfg(text, profile, &[]), None, true);
    let rf = checked.reference.as_ref().expect("checked");
    assert_eq!(rf.disagreement_count, 0, "{:?}", rf.disagreements.first());
}

fn collect(text: &str, profile: &str, set: &[(&str, &str)]) -> World {
    kvsim::simulate_collect(cfg(text, profile, set), true)
}

/// When request `r`'s pages on `role`'s pools were allocated (`free`: freed), from the collected
/// trace, in order.
fn mem_times(w: &World, role: kvsim::types::Role, r: u32, free: bool) -> Vec<u64> {
    use kvsim::trace::{MemOp, TraceRecord};
    let recs = w.tracer.collected.as_ref().expect("collected");
    recs.iter()
        .filter_map(|(t, rec)| match rec {
            TraceRecord::Mem(MemOp::Alloc { pool, r: q, .. }) if !free && pool.role == role && q.0 == r => Some(t.0),
            TraceRecord::Mem(MemOp::Free { pool, r: q, .. }) if free && pool.role == role && q.0 == r => Some(t.0),
            _ => None,
        })
        .collect()
}

/// sglang 0.5.16 and 0.5.22 wheels, `disaggregation/decode.py` `process_decode_queue`: while a
/// retracted request waits to resume, the scheduler returns right after `resume_retracted_reqs`,
/// before `pop_transferred`: a transfer that landed meanwhile is committed only after the
/// resumption. Two 900-token requests fill a 2,048-token decode pool and one is retracted at
/// ~2.4 s; request 2's KV (delayed 3 s) lands at ~3.2 s and waits. Before, it was committed at once
/// and answered its first token at ~3.2 s. (A walkthrough of the wheel found it.)
/// Each forward pass checkpoints the request's computed full blocks into prefill's radix cache,
/// locked by it, before the next request is matched (sglang 0.5.22 `disaggregation/prefill.py`
/// `checkpoint_disagg_prefill`, after every chunk and after the last; 0.5.16
/// `maybe_cache_unfinished_req`; vLLM `allocate_slots` → `cache_blocks`). Request 0 of tenant 1
/// (3,300 tokens in 1,024-token chunks) still chunks when request 1 of tenant 2 arrives with the
/// same first two blocks: request 1 reuses them, 1,024 tokens, and the hit is cross-tenant. Before
/// the thirty-ninth session blocks were indexed only at release, and request 1 computed all 1,100
/// tokens with nothing reported. Salted per tenant: no reuse, nothing reported. (A walkthrough of
/// the wheel found it.)
#[test]
fn s3_3_a_chunk_is_checkpointed_into_the_radix_cache_as_it_is_computed() {
    let text = r#"
name = "hit-while-chunking"
context_len = 16384
[[prefill]]
pool_tokens = 16384
[[decode]]
pool_tokens = 16384
[knobs]
page_size = 16
chunked_prefill_size = 1024
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 3300
output_tokens = 5
prefix_blocks = [11, 12, 13, 14, 15, 16, 17]
[[request]]
at_ms = 50
tenant = 2
prompt_tokens = 1100
output_tokens = 5
prefix_blocks = [11, 12, 99]
"#;
    for profile in ["sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"] {
        let w = run(text, profile, &[]);
        assert!((0..2).all(|r| answer(&w, r).0 == 200), "{profile}");
        assert_eq!(w.reqs[1].prefix_reused(), 1024, "{profile}: request 1 reuses request 0's checkpointed blocks");
        assert_eq!(kinds(&w), ["cross_tenant_prefix_hit"], "{profile}");
        assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile}");
        let salted = run(text, profile, &[("prefix_cache_scope", "per_tenant")]);
        assert_eq!(salted.reqs[1].prefix_reused(), 0, "{profile}");
        assert!(salted.oracle.violations.is_empty(), "{profile}: {:?}", salted.oracle.violations);
    }
}

/// Pages below decode's reported prefix (`decode_radix_cache = on`: `decode_prefix_len`) are never
/// sent, so a duplicate block there still takes the tree's copy at the checkpoint. Request 0's
/// blocks [1, 2] stay cached on decode after request 1 pushed them out of prefill's cache; requests
/// 2 and 3 lock them on decode and compute [1, 2, 3] side by side on prefill: request 3's
/// checkpoint finds request 2's three blocks and takes all three (its `sent_pages` already stood
/// at decode's prefix, which the model first read as sent).
#[test]
fn s3_3_a_duplicate_below_decodes_prefix_takes_the_trees_copy() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "checkpoint-duplicate-decode-prefix"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 16384
[knobs]
page_size = 16
decode_radix_cache = "on"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [1, 2]
[[request]]
at_ms = 200
tenant = 3
prompt_tokens = 4000
output_tokens = 2
[[request]]
at_ms = 2000
tenant = 1
prompt_tokens = 1700
output_tokens = 2
prefix_blocks = [1, 2, 3]
[[request]]
at_ms = 2000
tenant = 1
prompt_tokens = 1700
output_tokens = 2
prefix_blocks = [1, 2, 3]
"#;
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(text, profile, &[]);
        assert!((0..4).all(|r| answer(&w, r).0 == 200), "{profile}");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
        assert_eq!((w.reqs[2].decode_prefix_tokens(), w.reqs[3].decode_prefix_tokens()), (1024, 1024), "{profile}");
        assert_eq!(
            (w.reqs[2].prefix_reused(), w.reqs[3].prefix_reused()),
            (0, 0),
            "{profile}: prefill's cache lost them"
        );
        let recs = w.tracer.collected.as_ref().expect("collected");
        let freed_before_answer: u64 = recs
            .iter()
            .filter_map(|(t, rec)| match rec {
                TraceRecord::Mem(MemOp::Free { pool, r, pages })
                    if pool.role == Role::Prefill && r.0 == 3 && t.0 < answer(&w, 3).1 =>
                {
                    Some(kvsim::pool::pages_in(pages))
                }
                _ => None,
            })
            .sum();
        assert_eq!(freed_before_answer, 96, "{profile}: request 3's copies of the three blocks");
    }
}

/// A release refreshes the blocks the request used (sglang: its release checkpoint walks the
/// whole path and touches every node; vLLM: `free` puts its blocks on the free queue's tail), so
/// they outlive blocks cached while it ran. Request 1 of tenant 1 reuses request 0's two blocks
/// and releases them at ~2.1 s (its KV delayed 2 s); request 2 of tenant 2 cached its own two at
/// ~0.6 s (two decode nodes: its transfer does not queue behind request 1's). Request 3's prompt
/// needs more than the free pages: the first cached block evicted is
/// tenant 2's. Before the forty-first session a borrowed block kept the age of its match (0.1 s),
/// and tenant 1's went first.
#[test]
fn s3_3_a_release_refreshes_the_blocks_it_used() {
    let text = r#"
name = "release-refresh"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
count = 2
pool_tokens = 16384
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [1, 2]
[[request]]
at_ms = 100
tenant = 1
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [1, 2]
[[request]]
at_ms = 500
tenant = 2
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [5, 6]
[[request]]
at_ms = 3000
tenant = 3
prompt_tokens = 2000
output_tokens = 2
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 2000
"#;
    for profile in ["sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"] {
        let w = run(text, profile, &[]);
        assert!((0..4).all(|r| answer(&w, r).0 == 200), "{profile}");
        assert_eq!(w.reqs[1].prefix_reused(), 1024, "{profile}: request 1 reuses request 0's blocks");
        let first = w.prefix_evictions().first().unwrap_or_else(|| panic!("{profile}: request 3 evicts a block"));
        assert_eq!(first.2 .0, 2, "{profile}: tenant 2's block goes first: {:?}", w.prefix_evictions());
    }
}

/// Decode's radix cache refreshes at release too (`decode_radix_cache = on`, sglang: the
/// release checkpoint walks the request's path). Request 1 locks request 0's two cached blocks
/// at ~0.1 s and decodes for ~3 s; request 2 of tenant 2 caches its own two at ~0.6 s. Request 3
/// needs more than the free pages, and the first cached block evicted is request 2's. Before the
/// forty-first session request 0's blocks kept the age of request 1's lock and went first.
#[test]
fn s3_4_a_decode_release_refreshes_the_blocks_it_used() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "decode-release-refresh"
context_len = 8192
[[prefill]]
pool_tokens = 16384
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 16
decode_radix_cache = "on"
prefill_cache = "chunk"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [1, 2]
[[request]]
at_ms = 100
tenant = 1
prompt_tokens = 1100
output_tokens = 300
prefix_blocks = [1, 2]
[[request]]
at_ms = 500
tenant = 2
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [5, 6]
[[request]]
at_ms = 8000
tenant = 3
prompt_tokens = 3000
output_tokens = 2
"#;
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let w = collect(text, profile, &[]);
        assert!((0..4).all(|r| answer(&w, r).0 == 200), "{profile}");
        assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024, "{profile}: request 1 locks request 0's blocks");
        assert!(answer(&w, 1).1 > answer(&w, 2).1 + 1_000_000_000, "{profile}: request 1 outlives request 2");
        let recs = w.tracer.collected.as_ref().expect("collected");
        let first_evicted = recs.iter().find_map(|(t, rec)| match rec {
            TraceRecord::Mem(MemOp::Free { pool, r, .. }) if pool.role == Role::Decode && t.0 >= 8_000_000_000 => {
                Some(r.0)
            }
            _ => None,
        });
        assert_eq!(first_evicted, Some(2), "{profile}: request 2's cached block goes first");
    }
}

/// A block the request computed that another request checkpointed first (both were in one
/// forward batch): sglang frees the request's copy at its checkpoint, rewrites its block table to
/// the tree's copy, which it then reads and sends, and indexes its later blocks behind it (0.5.16
/// `radix_cache.py` `cache_unfinished_req`; 0.5.22 `unified_radix_cache.py`
/// `checkpoint_into_tree`: `prefill_checkpoint_duplicates = tree_copy`). Request 2 arrives while
/// request 1's KV is still in flight (delayed a second) and reuses its fourth block. Under
/// `own_copy` (vLLM keeps its own copy) request 1 keeps its pages, its checkpoint stops at the
/// first duplicate, and request 2 reuses only the three blocks request 0 indexed. Before the
/// forty-first session every profile behaved as `own_copy`.
#[test]
fn s3_3_a_checkpoint_takes_the_trees_copy_of_a_duplicate_block() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "checkpoint-duplicate"
context_len = 16384
[[prefill]]
pool_tokens = 16384
[[decode]]
pool_tokens = 16384
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1600
output_tokens = 5
prefix_blocks = [100, 101, 102]
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2100
output_tokens = 5
prefix_blocks = [100, 101, 102, 103]
[[request]]
at_ms = 500
tenant = 1
prompt_tokens = 2600
output_tokens = 5
prefix_blocks = [100, 101, 102, 103]
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 1000
"#;
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        for (value, reused) in [("tree_copy", 2048), ("own_copy", 1536)] {
            let w = collect(text, profile, &[("prefill_checkpoint_duplicates", value)]);
            assert!((0..3).all(|r| answer(&w, r).0 == 200), "{profile} {value}");
            assert!(w.oracle.violations.is_empty(), "{profile} {value}: {:?}", w.oracle.violations.first());
            assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile} {value}");
            assert_eq!(w.reqs[2].prefix_reused(), reused, "{profile} {value}: request 2's reuse");
            // Request 1's prefill pages: freed before its KV is even sent (its three duplicate
            // blocks) only under `tree_copy`, and its block table restated with request 0's pages.
            let recs = w.tracer.collected.as_ref().expect("collected");
            let prefill_op = |r: u32| {
                move |(_, rec): &&(kvsim::types::Instant, TraceRecord)| match rec {
                    TraceRecord::Mem(
                        MemOp::Alloc { pool, r: q, .. }
                        | MemOp::Free { pool, r: q, .. }
                        | MemOp::Lock { pool, r: q, .. },
                    ) => pool.role == Role::Prefill && q.0 == r,
                    _ => false,
                }
            };
            let zero: Vec<_> = recs.iter().filter(prefill_op(0)).collect();
            let one: Vec<_> = recs.iter().filter(prefill_op(1)).collect();
            let Some((_, TraceRecord::Mem(MemOp::Alloc { pages: zero_pages, .. }))) = zero.first() else {
                panic!("{profile} {value}: request 0's allocation first: {zero:?}")
            };
            let lock = one.iter().find_map(|(_, rec)| match rec {
                TraceRecord::Mem(MemOp::Lock { pages, .. }) => Some(pages.clone()),
                _ => None,
            });
            let freed_early = one
                .iter()
                .filter(|(t, rec)| matches!(rec, TraceRecord::Mem(MemOp::Free { .. })) && t.0 < answer(&w, 0).1);
            if value == "tree_copy" {
                let lock = lock.unwrap_or_else(|| panic!("{profile}: request 1's table restated: {one:?}"));
                let tree = kvsim::pool::slice_pages(zero_pages, 0, 96);
                assert_eq!(kvsim::pool::slice_pages(&lock, 0, 96), tree, "{profile}: request 0's three blocks lead");
                assert_eq!(kvsim::pool::pages_in(&lock), 132, "{profile}: and its own pages follow");
                assert_eq!(
                    freed_early
                        .map(|(_, rec)| match rec {
                            TraceRecord::Mem(MemOp::Free { pages, .. }) => kvsim::pool::pages_in(pages),
                            _ => 0,
                        })
                        .sum::<u64>(),
                    96,
                    "{profile}: its three duplicate blocks' pages"
                );
            } else {
                assert!(lock.is_none(), "{profile}: {one:?}");
                assert_eq!(freed_early.count(), 0, "{profile}: {one:?}");
            }
        }
    }
}

/// A duplicate block the checkpoint could not swap (a page of it already sent) is freed at the
/// release under `tree_copy`: sglang's release checkpoint frees the row's slice from the
/// protected prefix to the tree's match, "the duplicates that were already in the tree" (0.5.16
/// `radix_cache.py` `cache_finished_req`; 0.5.22 `_insert_cache`). vLLM keeps its copy as a cached
/// block on its free queue (`own_copy`: the plain cache, freed only by an eviction). Request 1's
/// prompt is exactly request 0's cached block, so the `len - 1` cap leaves it no match: it
/// recomputes the block in two 256-token chunks, the first of which is sent before the second
/// finds the block cached. Before the forty-second session the pages went to the plain cache on
/// every profile.
#[test]
fn s3_3_a_released_duplicate_is_freed_under_tree_copy() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "release-duplicate"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
chunked_prefill_size = 256
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 600
output_tokens = 2
prefix_blocks = [5]
[[request]]
at_ms = 2000
tenant = 1
prompt_tokens = 512
output_tokens = 2
prefix_blocks = [5]
"#;
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        for value in ["tree_copy", "own_copy"] {
            let w = collect(text, profile, &[("prefill_checkpoint_duplicates", value)]);
            assert!((0..2).all(|r| answer(&w, r).0 == 200), "{profile} {value}");
            assert!(w.oracle.violations.is_empty(), "{profile} {value}: {:?}", w.oracle.violations.first());
            assert!(w.prefill.iter().all(|p| p.leaks().is_none()), "{profile} {value}");
            assert_eq!(w.reqs[1].prefix_reused(), 0, "{profile} {value}: the len - 1 cap leaves no match");
            let recs = w.tracer.collected.as_ref().expect("collected");
            let freed: u64 = recs
                .iter()
                .filter_map(|(_, rec)| match rec {
                    TraceRecord::Mem(MemOp::Free { pool, r, pages }) if pool.role == Role::Prefill && r.0 == 1 => {
                        Some(kvsim::pool::pages_in(pages))
                    }
                    _ => None,
                })
                .sum();
            // Request 1 held 32 pages on prefill; request 0's block keeps its own pages cached.
            let expected = if value == "tree_copy" { 32 } else { 0 };
            assert_eq!(freed, expected, "{profile} {value}: request 1's prefill pages freed");
            if value == "tree_copy" {
                // The same pages the plain cache keeps under `own_copy` are free at the end.
                let own = collect(text, profile, &[("prefill_checkpoint_duplicates", "own_copy")]);
                let free = |w: &World| w.prefill[0].pool().free_pages();
                assert_eq!(free(&w), free(&own) + 32, "{profile}: 32 more pages free");
            }
        }
    }
}

/// Decode's radix cache (`decode_radix_cache = on`, sglang's
/// `--disaggregation-decode-enable-radix-cache`) shared without a per-tenant salt: request 1 of
/// tenant 2 locks the two prompt blocks request 0 of tenant 1 left there, and prefill sends only
/// the rest (`decode_prefix_len`), so its TTFT tells tenant 2 what tenant 1 sent: a
/// `cross_tenant_prefix_hit`, as on prefill. Prefill runs the chunk cache so that only decode's
/// cache can hit. Salted per tenant, or declared public by the cacher, nothing is reported.
/// Before the thirty-ninth session decode's cache never reported one.
#[test]
fn s3_4_decode_radix_cache_reports_a_cross_tenant_prefix_hit() {
    let text = r#"
name = "decode-prefix-hit"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
prefill_cache = "chunk"
decode_radix_cache = "on"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [7, 8]
[[request]]
at_ms = 2000
tenant = 2
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [7, 8]
"#;
    let w = run(text, "sglang-0.5.22", &[]);
    assert_eq!(kinds(&w), ["cross_tenant_prefix_hit"]);
    let v = &w.oracle.violations[0];
    assert_eq!((v.request.map(|r| r.0), v.slots), (Some(1), 1024), "{v:?}");
    assert!(v.pool.is_some_and(|p| p.role == kvsim::types::Role::Decode), "{v:?}");
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024);
    let salted = run(text, "sglang-0.5.22", &[("prefix_cache_scope", "per_tenant")]);
    assert!(salted.oracle.violations.is_empty(), "{:?}", salted.oracle.violations);
    let public = text.replace("prefix_blocks = [7, 8]\n", "prefix_blocks = [7, 8]\npublic_blocks = 2\n");
    let w = run(&public, "sglang-0.5.22", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024, "still a hit, on a declared public prompt");
}

/// Request 0 (`first_prompt` tokens over prefix blocks [7, 8], 2,000 output tokens) still decodes
/// when request 1 (1,100 tokens, the same blocks) arrives 2 s later; prefill runs the chunk cache,
/// so that only decode's cache can hit.
fn decode_prefix_while_running(first_prompt: u64) -> String {
    format!(
        r#"
name = "decode-prefix-while-running"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
prefill_cache = "chunk"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = {first_prompt}
output_tokens = 2000
prefix_blocks = [7, 8]
[[request]]
at_ms = 2000
tenant = 1
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [7, 8]
"#
    )
}

/// vLLM's decode prefix cache (`decode_prefix_rules = block_pool`, the `vllm-nixl` profile's;
/// vLLM 0.34.0 caches prefixes on decode by default) against sglang's (`radix_tree`). First: a
/// loaded request's blocks are indexed when its KV arrives (`_update_waiting_for_remote_kv` →
/// `cache_blocks`), so request 1, arriving while request 0 still decodes, hits them; sglang's
/// decode indexes them at release, so request 1 pulls its whole prompt. Second: vLLM's hit is
/// capped at the prompt less one token (`get_computed_blocks`), so a 1,024-token prompt over two
/// cached blocks reuses one; sglang's decode match takes both. Prefill runs the chunk cache so
/// that only decode's cache can hit. Before the forty-second session `vllm-nixl` kept decode's
/// cache off, and the one decode cache the model had followed sglang's rules. (`vllm-nixl` with
/// sglang's rules still leaves the last prompt token: its decode computes that position itself,
/// `decode_first_write = last_prompt_token`, since the forty-sixth session.)
#[test]
fn s3_4_vllm_decode_caches_a_loaded_prompt_at_once_and_leaves_the_last_token() {
    let running = &decode_prefix_while_running(1100);
    let exact = r#"
name = "decode-prefix-exact-blocks"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
prefill_cache = "chunk"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [7, 8]
[[request]]
at_ms = 2000
tenant = 1
prompt_tokens = 1024
output_tokens = 4
prefix_blocks = [7, 8]
"#;
    let cases = [
        ("vllm-nixl", "block_pool", 1024, 512),
        ("vllm-nixl", "radix_tree", 0, 512),
        ("sglang-0.5.22", "radix_tree", 0, 1024),
    ];
    for (profile, rules, while_running, exact_hit) in cases {
        let set = [("decode_radix_cache", "on"), ("decode_prefix_rules", rules)];
        let w = run(running, profile, &set);
        assert!((0..2).all(|r| answer(&w, r).0 == 200), "{profile} {rules}");
        assert!(w.oracle.violations.is_empty(), "{profile} {rules}: {:?}", w.oracle.violations.first());
        assert!(answer(&w, 0).1 > answer(&w, 1).1, "{profile} {rules}: request 0 still decodes");
        assert_eq!(w.reqs[1].decode_prefix_tokens(), while_running, "{profile} {rules}: request 1's decode hit");
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{profile} {rules}");
        let w = run(exact, profile, &set);
        assert!((0..2).all(|r| answer(&w, r).0 == 200), "{profile} {rules}");
        assert!(w.oracle.violations.is_empty(), "{profile} {rules}: {:?}", w.oracle.violations.first());
        assert_eq!(w.reqs[1].decode_prefix_tokens(), exact_hit, "{profile} {rules}: a prompt of two whole blocks");
    }
    // The profile itself: decode's cache on, under the block pool's rules.
    let w = run(running, "vllm-nixl", &[("prefill_cache", "chunk")]);
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024, "vllm-nixl caches prefixes on decode");
}

/// Request 0's KV (a 512-token prompt, prefix block [2]) is acknowledged 50 ms before it is
/// visible; request 1 (513 tokens, the same block) arrives `second_at_ms` later. `pool_tokens`
/// for both nodes.
fn lagged_block_then_a_hit(pool_tokens: u64, second_at_ms: u64) -> String {
    format!(
        r#"
name = "decode-cache-before-the-lag-lands"
context_len = 2048
[[prefill]]
pool_tokens = {pool_tokens}
[[decode]]
pool_tokens = {pool_tokens}
[cost]
prefill_base_us = 1000
prefill_ns_per_token = 20000
decode_step_base_us = 10000
transfer_latency_us = 500
transfer_bytes_per_us = 25000
kv_bytes_per_token = 70000
[knobs]
chunked_prefill_size = 256
page_size = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 512
output_tokens = 1
prefix_blocks = [2]
[[request]]
at_ms = {second_at_ms}
tenant = 0
prompt_tokens = 513
output_tokens = 1
prefix_blocks = [2]
[[faults.script]]
kind = "visibility_lag"
request = 0
lag_ms = 50
"#
    )
}

/// Request 1 of `lagged_block_then_a_hit`'s `text` hits request 0's block on decode and reads its
/// zeros, named after the lag (the rdma-visibility-lag row's known signature); without the lag the
/// run is clean and request 1 hits the same block.
fn assert_the_hit_reads_the_lag(text: &str, profile: &str, set: &[(&str, &str)]) {
    use kvsim::check::oracle::Kind;
    use kvsim::types::RequestId;
    let w = run(text, profile, set);
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 512, "{profile}: request 1 hits request 0's block on decode");
    assert!(w.oracle.has(Kind::UninitializedRead, RequestId(1)), "{profile}: request 1 reads the block's zeros");
    let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
    assert!(sigs.iter().all(|s| s.ends_with("/visibility_lag")), "{profile}: {sigs:?}");
    assert!(sigs.contains(&"uninitialized_read/visibility_lag".to_string()), "{profile}: {sigs:?}");
    let no_lag = text.replace("[[faults.script]]\nkind = \"visibility_lag\"\nrequest = 0\nlag_ms = 50\n", "");
    assert_ne!(no_lag, text);
    let w = run(&no_lag, profile, set);
    assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 512, "{profile}");
}

/// The rdma-visibility-lag row through vLLM's decode prefix cache (shrunk from a 60 s
/// `vllm-nixl --hardware-faults` campaign, seed 53,033,433, which reported it as the new
/// `uninitialized_read/decode_prefix_cache`): request 0's KV is acknowledged 50 ms before it is
/// visible, decode caches its block when the load is reported done, and request 1 hits the block
/// before the data lands. Its read of zeros is the lag's, named as the row's known signature; without
/// the lag nothing is wrong.
#[test]
fn s3_4_a_block_cached_before_its_lagged_data_lands_is_read_as_the_lags() {
    assert_the_hit_reads_the_lag(&lagged_block_then_a_hit(520, 0), "vllm-nixl", &[]);
}

/// The same row through sglang's decode radix cache (`decode_radix_cache = on`, `radix_tree`
/// rules), which indexes a request's blocks at its release rather than when its load is reported
/// done: request 0 decodes its one token over the zeros and is released, and its release caches
/// block [2] while the landing is still to come. Request 1 (30 ms later) hits that block on decode
/// before the data lands. The release-time marking (`carry_late_writes` at release) names its read
/// of zeros after the lag; without the marking the read would be `…/decode_prefix_cache`, a new
/// signature (checked by removing it).
#[test]
fn s3_4_a_block_cached_at_release_before_its_lagged_data_lands_is_read_as_the_lags() {
    let set = [("decode_radix_cache", "on"), ("decode_prefix_rules", "radix_tree")];
    assert_the_hit_reads_the_lag(&lagged_block_then_a_hit(1040, 30), "sglang-0.5.22", &set);
}

/// The same row through a preemption: request 3's load is acknowledged 1.2 s before it is
/// visible; it decodes over the zeros (`uninitialized_read`) and is preempted meanwhile. Under vLLM's decode prefix cache its resumption hits the
/// cache like any waiting request (`decode_resume`): it locks the chain block [2] it cached when
/// the load was reported done and recomputes the rest into other pages, where the late landing
/// then writes its KV at other positions (`own_kv_misplaced`) and a source page's stale tail
/// (`cross_request_read`). Shrunk from a 60 s `vllm-nixl --hardware-faults --prefix-heavy`
/// campaign (seed 54,140,950, first reported as the new `cross_request_read/decode_prefix_cache`):
/// every signature is the lag's, request 5 hits the same clean block [2], and without the lag the
/// run is clean. (Before the forty-third session the resumption hit nothing and reallocated the
/// whole sequence; the release then cached the landing's mess as block [2] for request 5. Since the
/// forty-fourth session a read is one transfer, not 4-page batches landing one after another, so
/// the case needs a lag that outlasts the preemption: 300 ms, and 100 output tokens for requests 0
/// and 3, where the shrunk case had 50 ms and 5 and 6. Since the forty-fifth session vLLM's batch
/// gets its pages before an admission: the 300 ms case had request 3 admitted into the page
/// request 0 needed and preempted for it at once, which vLLM does not do; request 3 now waits for
/// room, and on a 5,632-token decode pool with a 1.2 s lag it is preempted when its own next page
/// does not fit.)
#[test]
fn s3_4_a_lagged_request_preempted_and_resumed_reads_the_lags() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "decode-cache-after-a-lagged-landing"
context_len = 8192
[[prefill]]
pool_tokens = 4672
[[decode]]
pool_tokens = 5632
[router]
policy = "least_loaded"
[cost]
prefill_base_us = 1000
prefill_ns_per_token = 20000
decode_step_base_us = 10000
kv_bytes_per_token = 70000
transfer_latency_us = 500
transfer_bytes_per_us = 25000
[knobs]
chunked_prefill_size = 1024
max_transfer_batch_pages = 4
page_size = 64
prefix_cache_scope = "public_only"
prefix_hit_timing = "padded_to_miss"
transfer_sync_timeout_ms = 5000
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 3971
output_tokens = 100
prefix_blocks = [1]
public_blocks = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 573
output_tokens = 4
prefix_blocks = [2]
public_blocks = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 577
output_tokens = 8
prefix_blocks = [1]
public_blocks = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 1473
output_tokens = 100
prefix_blocks = [2]
public_blocks = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 3073
output_tokens = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 513
output_tokens = 1
prefix_blocks = [2]
public_blocks = 1
[[faults.script]]
kind = "visibility_lag"
request = 3
lag_ms = 1200
"#;
    use kvsim::check::oracle::Kind;
    use kvsim::types::RequestId;
    let w = collect(text, "vllm-nixl", &[]);
    assert!(w.oracle.has(Kind::OwnKvMisplaced, RequestId(3)), "request 3's landing after its preemption");
    assert!(w.oracle.has(Kind::CrossRequestRead, RequestId(3)), "the landing's stale source tail");
    assert_eq!(w.reqs[5].decode_prefix_tokens(), 512);
    assert!(w.oracle.violations.iter().all(|v| v.request == Some(RequestId(3))), "{:?}", w.oracle.violations);
    let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
    assert!(sigs.iter().all(|s| s.ends_with("/visibility_lag")), "{sigs:?}");
    // Request 3 locks block [2] twice: at admission, and again at its resumption.
    let recs = w.tracer.collected.as_ref().expect("collected");
    let locks: Vec<&Vec<kvsim::pool::Run>> = recs
        .iter()
        .filter_map(|(_, rec)| match rec {
            TraceRecord::Mem(MemOp::Lock { pool, r, pages }) if pool.role == Role::Decode && r.0 == 3 => Some(pages),
            _ => None,
        })
        .collect();
    assert_eq!(locks.len(), 2, "{locks:?}");
    assert_eq!(locks[0], locks[1], "the same block's pages");
    let no_lag = text.replace("[[faults.script]]\nkind = \"visibility_lag\"\nrequest = 3\nlag_ms = 1200\n", "");
    assert_ne!(no_lag, text);
    let w = run(&no_lag, "vllm-nixl", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// The rdma-visibility-lag row over decode's own tokens (sglang 0.5.22; shrunk from a 10-minute
/// `--liveness 30s --prefix-heavy --hardware-faults` campaign, seed 57,543,351, which reported
/// `own_kv_misplaced/visibility_lag` as new): request 2's KV is acknowledged 50 ms before it is
/// visible; decode commits and writes its next tokens into the prompt's last page, and the lagged
/// landing copies that whole page over them. Prefill's source page was one a `tree_copy`
/// checkpoint freed and the request took again for its last token, so the page's tail still
/// holds the request's own KV of positions 1..3: decode then reads its own KV at other positions.
/// Without the lag the landing precedes decode's tokens and nothing is wrong.
#[test]
fn s3_4_a_lagged_last_page_lands_over_decodes_own_tokens() {
    let text = &[
        r#"
name = "lagged-last-page-over-decode-tokens"
context_len = 16384
[[prefill]]
pool_tokens = 5124
[[decode]]
pool_tokens = 5128
[router]
policy = "round_robin"
[knobs]
chunked_prefill_size = 4096
page_size = 4
prefix_cache_scope = "public_only"
transfer_sync_timeout_ms = 5000
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 2057
output_tokens = 1
prefix_blocks = [2, 6]
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 2045
output_tokens = 1
prefix_blocks = [3]
public_blocks = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 2053
output_tokens = 5
prefix_blocks = [3]
public_blocks = 1
[[faults.script]]
kind = "visibility_lag"
request = 2
lag_ms = 50
"#,
        FUZZ_COST,
    ]
    .concat();
    use kvsim::check::oracle::Kind;
    let w = run(text, "sglang-0.5.22", &[]);
    assert!(w.oracle.has(Kind::OwnKvMisplaced, RequestId(2)), "{:?}", w.oracle.violations);
    let misplaced = w.oracle.violations.iter().find(|v| v.kind == Kind::OwnKvMisplaced).expect("found");
    assert_eq!((misplaced.slots, misplaced.pages), (3, 1), "the three tokens decode wrote into the last page");
    let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
    assert!(sigs.contains(&"own_kv_misplaced/visibility_lag".to_string()), "{sigs:?}");
    assert!(sigs.iter().all(|s| s.ends_with("/visibility_lag")), "{sigs:?}");
    let no_lag = text.replace("[[faults.script]]\nkind = \"visibility_lag\"\nrequest = 2\nlag_ms = 50\n", "");
    let w = run(&no_lag, "sglang-0.5.22", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// A resumed request hits only the chain blocks its prompt fills: request 1's prompt (1,023
/// tokens, chain [7, 8]) ends inside block [8], so its positions 512..1,023 are its own prompt
/// tail and a generated token, not request 0's block [8] (vLLM hashes the tokens a block holds).
/// Request 0 keeps both blocks locked while request 1 is preempted and resumed; the resumption
/// locks block [7] again and nothing else. When the hit took the sequence's blocks it locked
/// block [8] too and read request 0's KV as its own (`cross_request_read/decode_prefix_cache`,
/// fault-free: a 10-minute `vllm-nixl --hardware-faults --prefix-heavy` campaign, seed
/// 58,148,412).
#[test]
fn s4_4_vllm_a_resumed_request_hits_no_block_its_prompt_ends_inside() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "vllm-resumed-request-hits-no-block-its-prompt-ends-in"
context_len = 4096
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 2592
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 700
prefix_blocks = [7, 8]
[[request]]
at_ms = 100
tenant = 1
prompt_tokens = 1023
output_tokens = 600
prefix_blocks = [7, 8]
"#;
    let w = collect(text, "vllm-nixl", &[]);
    assert!((0..2).all(|r| answer(&w, r).0 == 200));
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let recs = w.tracer.collected.as_ref().expect("collected");
    let locks: Vec<u64> = recs
        .iter()
        .filter_map(|(_, rec)| match rec {
            TraceRecord::Mem(MemOp::Lock { pool, r, pages }) if pool.role == Role::Decode && r.0 == 1 => {
                Some(kvsim::pool::pages_in(pages))
            }
            _ => None,
        })
        .collect();
    assert_eq!(locks, [32, 32], "block [7] at admission and at the resumption, never block [8]");
}

/// vLLM's preempted request hits decode's prefix cache when it is scheduled again (vLLM 0.34.0
/// `_preempt_request` frees its blocks with their hashes, `schedule` takes
/// `get_computed_blocks`' hit before it recomputes): request 1's chain blocks [7, 8] were cached
/// when its load arrived; request 0's growth preempts it, evicts block [8], and when request 0
/// finishes request 1 locks block [7]'s pages again, allocates the rest and recomputes from
/// position 512; the block it recomputes is cached at once. sglang's rules (`radix_tree`) keep the
/// recompute of the whole sequence.
#[test]
fn s4_4_vllm_a_preempted_request_rehits_its_cached_blocks_on_resumption() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let text = r#"
name = "vllm-preempted-request-rehits-its-blocks"
context_len = 4096
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 2048
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 500
output_tokens = 600
[[request]]
at_ms = 100
tenant = 1
prompt_tokens = 1100
output_tokens = 400
prefix_blocks = [7, 8]
"#;
    let decode_ops = |w: &World| -> Vec<MemOp> {
        let recs = w.tracer.collected.as_ref().expect("collected");
        recs.iter()
            .filter_map(|(_, rec)| match rec {
                TraceRecord::Mem(
                    op @ (MemOp::Alloc { pool, r, .. } | MemOp::Lock { pool, r, .. } | MemOp::Free { pool, r, .. }),
                ) if pool.role == Role::Decode && r.0 == 1 => Some(op.clone()),
                TraceRecord::Mem(op @ MemOp::Write { pool, r, .. }) if pool.role == Role::Decode && r.0 == 1 => {
                    Some(op.clone())
                }
                _ => None,
            })
            .collect()
    };
    for rules in ["block_pool", "radix_tree"] {
        let w = collect(text, "vllm-nixl", &[("decode_prefix_rules", rules)]);
        assert!((0..2).all(|r| answer(&w, r).0 == 200), "{rules}");
        assert!(w.oracle.violations.is_empty(), "{rules}: {:?}", w.oracle.violations.first());
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{rules}");
        let ops = decode_ops(&w);
        let first = match &ops[0] {
            MemOp::Alloc { pages, .. } => pages.clone(),
            op => panic!("{rules}: request 1's admission allocates first: {op:?}"),
        };
        // The resumption: the last allocation, after the preemption's free.
        let resumed = ops.iter().rposition(|op| matches!(op, MemOp::Alloc { .. })).expect("resumed");
        assert!(resumed > 1, "{rules}: preempted and resumed: {ops:?}");
        let written = ops[resumed + 1..].iter().find_map(|op| match op {
            MemOp::Write { slots, .. } => Some(slots.clone()),
            _ => None,
        });
        let written = written.unwrap_or_else(|| panic!("{rules}: the resumption writes: {ops:?}"));
        let write_from = written.iter().map(|&(_, _, pos)| pos).min();
        let seq_len = written.iter().map(|&(_, len, pos)| pos + len).max().expect("slots");
        if rules == "block_pool" {
            let MemOp::Lock { pages, .. } = &ops[resumed - 1] else {
                panic!("block_pool: the resumption locks its cached block first: {ops:?}")
            };
            assert_eq!(*pages, kvsim::pool::slice_pages(&first, 0, 32), "block [7]: its first 32 pages");
            let MemOp::Alloc { pages: fresh, .. } = &ops[resumed] else { unreachable!() };
            assert!(seq_len > 1100, "preempted while it decoded: {seq_len}");
            assert_eq!(kvsim::pool::pages_in(fresh), (seq_len + 1).div_ceil(16) - 32, "the rest of its sequence");
            assert_eq!(write_from, Some(512), "recomputed from block [8]");
            assert_eq!(w.decode[0].prefix().blocks.len(), 2, "block [8] is cached again");
        } else {
            assert!(!ops.iter().any(|op| matches!(op, MemOp::Lock { .. })), "radix_tree: {ops:?}");
            assert_eq!(write_from, Some(0), "radix_tree: the whole sequence recomputed");
        }
    }
}

#[test]
fn s4_4_sglang_commits_no_landed_transfer_while_a_retracted_request_waits() {
    let text = r#"
name = "retract-with-landing"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 2048
[knobs]
page_size = 16
reserved_decode_tokens = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 900
output_tokens = 300
[[request]]
at_ms = 1
tenant = 2
prompt_tokens = 900
output_tokens = 300
[[request]]
at_ms = 200
tenant = 3
prompt_tokens = 64
output_tokens = 20
[[faults.script]]
kind = "delay"
request = 2
delay_ms = 3000
"#;
    let w = run(text, "sglang-0.5.22", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    assert!((0..3).all(|r| answer(&w, r).0 == 200));
    let first = w.reqs[2].first_token_at().expect("request 2 decoded").0;
    assert!(first > 7_000_000_000, "request 2's first token at {first} ns, before the retracted request resumed");
}

#[test]
fn s4_4_without_retraction_the_running_batch_stalls_into_a_false_hang() {
    // The what-if value `stall` (kvsim before issue 13): no released engine does this.
    let w = run(OUT_OF_PAGES, "vllm-nixl", &[("decode_out_of_pages", "stall")]);
    assert!(kinds(&w).contains(&"request_hang"), "{:?}", kinds(&w));
}

#[test]
fn s4_4_vllm_preempts_the_last_admitted_request_and_recomputes_it() {
    let w = collect(OUT_OF_PAGES, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 200);
    assert_eq!(answer(&w, 1).0, 200);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let frees = early_frees(&w);
    assert!(!frees.is_empty(), "a preemption freed pages before the request finished");
    assert!(frees.iter().all(|(r, _)| *r == 1), "only the last-admitted request is preempted: {frees:?}");
    assert_eq!(w.reqs[1].decode_tokens(), 300, "the recomputed request still generates every token");
    assert!(answer(&w, 0).1 < answer(&w, 1).1, "request 1 waited for request 0's pages");
    assert_oracles_agree(OUT_OF_PAGES, "vllm-nixl");
}

/// vLLM gives the running batch its slots before it schedules anything else, preempting the
/// last-admitted request while one does not fit: the preemption is in the scheduling pass before
/// the step that needs the page, so the victim takes no part in that step, and the pass admits
/// nothing from the waiting queues (0.34.0 `v1/core/sched/scheduler.py` `schedule`: the RUNNING
/// loop, then the WAITING requests `if not preempted_reqs`). Until the forty-fifth session the
/// model made room at the end of that step: the victim was preempted one step after its last
/// token, having paid for a step it did not take part in.
#[test]
fn s4_4_vllm_preempts_in_the_pass_before_the_step_that_needs_the_page() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let w = collect(OUT_OF_PAGES, "vllm-nixl", &[]);
    let recs = kvsim::trace::expand_records(w.tracer.collected.as_ref().expect("collected"));
    let freed = recs.iter().position(|(_, rec)| {
        matches!(rec, TraceRecord::Mem(MemOp::Free { pool, r, .. }) if pool.role == Role::Decode && r.0 == 1)
    });
    let freed = freed.expect("request 1 is preempted");
    let last_token = recs[..freed].iter().rev().find_map(|(t, rec)| match rec {
        TraceRecord::Mem(MemOp::Write { pool, r, .. }) if pool.role == Role::Decode && r.0 == 1 => Some(t.0),
        _ => None,
    });
    let last_token = last_token.expect("request 1 decoded before its preemption");
    // Records are in time order: the same instant means no step ended in between.
    assert_eq!(recs[freed].0 .0, last_token, "preempted in the pass right after its last token");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    assert!((0..2).all(|r| answer(&w, r).0 == 200));
}

/// A waiting request is not given the page the running batch needs next: vLLM allocates the
/// batch's slots first, and the waiting request's `allocate_slots` fails on what is left, so it
/// waits (0.34.0 `v1/core/sched/scheduler.py` `schedule`). Request 0 (63 full pages) needs its
/// 64th page at its first decode step; request 1 (64 pages) reaches decode during that step, when
/// 64 pages are free. Until the forty-fifth session the model admitted request 1 into them, and
/// request 0, left without a page, preempted itself (its KV recomputed later).
#[test]
fn s4_4_vllm_a_waiting_request_does_not_take_the_running_batchs_next_page() {
    let text = r#"
name = "vllm-waiting-behind-the-batchs-page"
context_len = 4096
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 2048
[knobs]
decode_radix_cache = "off"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1008
output_tokens = 100
[[request]]
at_ms = 425
tenant = 3
prompt_tokens = 1024
output_tokens = 50
"#;
    let w = collect(text, "vllm-nixl", &[]);
    assert_eq!(early_frees(&w), vec![], "nobody is preempted");
    assert!((0..2).all(|r| answer(&w, r).0 == 200));
    let admitted = mem_times(&w, kvsim::types::Role::Decode, 1, false);
    let first_freed = mem_times(&w, kvsim::types::Role::Decode, 0, true);
    assert!(admitted[0] >= first_freed[0], "request 1 waits for request 0's pages: {admitted:?} {first_freed:?}");
}

/// The same during a step: a request that reaches decode mid-step is admitted by the engine's
/// next scheduling pass, which first gives the batch its slots for the coming step. Request 0
/// (24 tokens in 2 of the 3 pages) is writing position 31 when request 1 (one page, its load then
/// slow for 2 s) arrives; its next step writes position 32, in the last page. Before the
/// forty-fifth session the model admitted request 1 into it, and request 0 preempted itself and
/// was recomputed only after request 1's load ended (answered at 2.6 s instead of 0.5 s). (Request
/// 1 arrived 25 ms earlier, one step, until vLLM's decode wrote one position earlier,
/// `decode_first_write = last_prompt_token`: arriving then, it is admitted, as in vLLM, and
/// request 0 preempts itself a step later.)
#[test]
fn s4_4_vllm_a_request_reaching_decode_mid_step_leaves_the_batchs_next_page() {
    let text = r#"
name = "vllm-mid-step-arrival"
context_len = 4096
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 48
[knobs]
decode_radix_cache = "off"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 24
output_tokens = 20
[[request]]
at_ms = 205
tenant = 3
prompt_tokens = 16
output_tokens = 5
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 2000
"#;
    let w = collect(text, "vllm-nixl", &[]);
    assert_eq!(early_frees(&w), vec![], "nobody is preempted");
    assert!((0..2).all(|r| answer(&w, r).0 == 200));
    assert!(answer(&w, 0).1 < S, "request 0 is answered without waiting for request 1's slow load");
}

/// The positions of request `r`'s one-slot writes on decode (its decode tokens: a transfer lands
/// whole pages) and the pages decode allocated it, from the collected trace.
fn decode_positions_and_pages(w: &World, r: u32) -> (Vec<u64>, u64) {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let recs = kvsim::trace::expand_records(w.tracer.collected.as_ref().expect("collected"));
    let (mut positions, mut pages) = (Vec::new(), 0);
    for (_, rec) in recs.iter() {
        match rec {
            TraceRecord::Mem(MemOp::Write { pool, r: q, slots, .. }) if pool.role == Role::Decode && q.0 == r => {
                if let [(_, 1, pos)] = slots.as_slice() {
                    positions.push(*pos);
                }
            }
            TraceRecord::Mem(MemOp::Alloc { pool, r: q, pages: p }) if pool.role == Role::Decode && q.0 == r => {
                pages += kvsim::pool::pages_in(p);
            }
            _ => {}
        }
    }
    (positions, pages)
}

/// Where decode's steps write (`decode_first_write`). sglang's first decode input is the token
/// prefill sampled, so its steps write from the position after the prompt on. vLLM's finished
/// load leaves `num_computed_tokens = num_tokens - 1` (0.34.0 `v1/core/sched/scheduler.py`
/// `_update_waiting_for_remote_kv`): its first step computes the prompt's last position again,
/// and step j writes one position earlier than sglang's. A 32-token prompt with 17 output tokens:
/// vLLM writes positions 31..=47 in the three pages of 16 it has, sglang 32..=48 and takes a
/// fourth page for the last (pages of 16 tokens in both). On a decode pool of three pages vLLM
/// answers without preempting anyone. Until the forty-sixth session vLLM's steps wrote where
/// sglang's do: the last token took a fourth page, and the request, alone on decode, preempted
/// itself and was answered 500.
#[test]
fn s4_vllm_decode_recomputes_the_last_prompt_position_and_never_writes_the_last_tokens() {
    let text = |pool: u64| {
        format!(
            r#"
name = "first-decode-write"
context_len = 4096
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = {pool}
[knobs]
decode_radix_cache = "off"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 32
output_tokens = 17
"#
        )
    };
    for (profile, first, pages) in [("vllm-nixl", 31, 3), ("sglang-0.5.22", 32, 4)] {
        let w = collect(&text(4096), profile, &[("page_size", "16")]);
        assert_eq!(answer(&w, 0).0, 200, "{profile}");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
        let (positions, got) = decode_positions_and_pages(&w, 0);
        assert_eq!(positions, (first..first + 17).collect::<Vec<_>>(), "{profile}");
        assert_eq!(got, pages, "{profile}: decode's pages");
    }
    // Each profile's value set on the other gives the other's positions.
    let w = collect(&text(4096), "sglang-0.5.22", &[("page_size", "16"), ("decode_first_write", "last_prompt_token")]);
    assert_eq!(decode_positions_and_pages(&w, 0), ((31..48).collect(), 3));
    let w = collect(&text(48), "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 200, "three pages are enough for vLLM");
    assert_eq!(early_frees(&w), vec![], "nobody is preempted");
    assert_oracles_agree(&text(48), "vllm-nixl");
}

/// vLLM's first decode step writes the prompt's last position again, into a block its decode
/// prefix cache indexed when the load finished (`decode_prefix_rules = block_pool`): the request
/// still uses the block, the content is the same, and a request that hits the block reads it
/// clean. Request 0's 1,024-token prompt is two whole blocks, both indexed at its load, so its
/// first step writes position 1,023 into a page the cache holds; request 1 (the same blocks, more
/// prompt) arrives while request 0 decodes and hits both. A write there that counted the cache's
/// page as foreign would report request 0's token as a `use_after_free/decode_write`.
#[test]
fn s4_vllm_the_recomputed_last_prompt_position_is_the_requests_own_in_its_cached_block() {
    let text = &decode_prefix_while_running(1024);
    let w = collect(text, "vllm-nixl", &[]);
    assert!((0..2).all(|r| answer(&w, r).0 == 200));
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    assert!(answer(&w, 0).1 > answer(&w, 1).1, "request 0 still decodes");
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024, "request 1 hits both blocks");
    assert_eq!(decode_positions_and_pages(&w, 0).0.first(), Some(&1023));
    assert_oracles_agree(text, "vllm-nixl");
}

/// vLLM caches a loaded request's blocks on decode when its load is reported done
/// (`decode_prefix_rules = block_pool`); under a visibility lag the data lands after that. The
/// landing is the request's own KV into blocks it still attends over: no use after free (a
/// `--hardware-faults` campaign's shrunk `use_after_free/transfer_write/visibility_lag`, one
/// request alone, which then read its own KV). With decode's cache off the pages are the
/// request's alone, as before.
#[test]
fn s4_vllm_a_lagged_load_into_blocks_decode_cached_at_once_is_the_requests_own() {
    let text = r#"
context_len = 2048
[[prefill]]
pool_tokens = 576
[[decode]]
pool_tokens = 576
[knobs]
page_size = 64
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 512
output_tokens = 1
prefix_blocks = [3]
[[faults.script]]
kind = "visibility_lag"
request = 0
lag_ms = 1
"#;
    for set in [&[][..], &[("decode_radix_cache", "off")][..]] {
        let w = collect(text, "vllm-nixl", set);
        assert_eq!(answer(&w, 0).0, 200, "{set:?}");
        assert!(w.oracle.violations.is_empty(), "{set:?}: {:?}", w.oracle.violations.first());
    }
    assert_oracles_agree(text, "vllm-nixl");
    // Other requests hit those blocks before the land: they are still told of it, so their next
    // reads re-read what changed under them (the fast oracle agrees with the reference).
    let text = std::fs::read_to_string(crate::sim_data().join("lagged-land-into-cached-blocks.toml")).unwrap();
    assert_oracles_agree(&text, "vllm-nixl");
}

#[test]
fn s4_4_sglang_retracts_the_fewest_output_tokens_and_restores_from_host_without_recompute() {
    // Request 1 started decoding later: it has fewer output tokens when the pool runs out.
    let w = collect(OUT_OF_PAGES, "sglang-0.5.22", &[]);
    assert_eq!(answer(&w, 0).0, 200);
    assert_eq!(answer(&w, 1).0, 200);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let frees = early_frees(&w);
    assert!(!frees.is_empty() && frees.iter().all(|(r, _)| *r == 1), "{frees:?}");
    // Restored, not re-transferred: one transfer job per request (jobs leave `World::jobs` when
    // they end, so they are counted while the run goes).
    let mut v = World::new(cfg(OUT_OF_PAGES, "sglang-0.5.22", &[]), kvsim::trace::Tracer::new(None));
    let mut ids = std::collections::BTreeSet::new();
    while v.step() {
        ids.extend(v.jobs.ids().filter(|&id| v.jobs.get(id).is_some_and(|j| j.request() == RequestId(1))));
    }
    v.finish();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(v.events(), w.events());
    assert_oracles_agree(OUT_OF_PAGES, "sglang-0.5.22");
}

/// sglang 0.5.22 backs a retraction up to a bounded host pool (`retraction_host_pool = sized`:
/// `max(0.2 × pool, ceil_align(min(context − 1, pool), page))` = 4,096 tokens here, decode's radix
/// cache off): 12 requests of 1,500-2,000 prompt and 1,800-2,000 output tokens on a 16,384-token
/// decode pool retract several at once, and a retraction whose backup does not fit is aborted with
/// 500 ("Retraction host KV pool exhausted", `managers/schedule_batch.py` `retract_decode`), a
/// capacity failure and no wrong status. 0.5.16's per-request CPU copies, and 0.5.22 with decode's
/// radix cache on (CPU copies too), resume every one.
#[test]
fn s4_4_sglang_0_5_22_aborts_a_retraction_its_host_pool_cannot_hold() {
    let text = r#"
name = "retract-host"
seed = 1
context_len = 4096
[[prefill]]
pool_tokens = 32768
[[decode]]
pool_tokens = 16384
[knobs]
page_size = 16
[workload]
requests = 12
tenants = 3
mean_interarrival_ms = 50
prompt_tokens = [{ weight = 1, min = 1500, max = 2000 }]
output_tokens = [{ weight = 1, min = 1800, max = 2000 }]
"#;
    let w = run(text, "sglang-0.5.22", &[]);
    let failed: Vec<usize> = (0..12).filter(|&r| answer(&w, r as u32).0 != 200).collect();
    assert!(!failed.is_empty(), "some retraction does not fit the host pool");
    for &r in &failed {
        assert_eq!(answer(&w, r as u32).0, 500, "request {r}");
        assert!(w.reqs[r].timed_out(), "request {r}: a capacity failure");
    }
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    for (profile, set) in [
        ("sglang-0.5.16", vec![]),
        ("sglang-0.5.22", vec![("decode_radix_cache", "on")]),
        ("sglang-0.5.22", vec![("retraction_host_pool", "unbounded")]),
    ] {
        let w = run(text, profile, &set);
        assert!((0..12).all(|r| answer(&w, r).0 == 200), "{profile} {set:?}");
    }
}

/// Two requests whose KV lands 3 ms apart (one prefill node sends one transfer at a time) while
/// a small request (0) keeps the decode node stepping: both join the running batch during the
/// same step, so both are first decoded in the next one and decode in lockstep.
const TIE: &str = r#"
name = "out-of-pages-tie"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 2048
[knobs]
page_size = 16
reserved_decode_tokens = 16
decode_admission = "pages_and_reserve"
[[request]]
at_ms = 0
tenant = 3
prompt_tokens = 4
output_tokens = 8
[[request]]
at_ms = 1
tenant = 1
prompt_tokens = 950
output_tokens = 300
[[request]]
at_ms = 1
tenant = 2
prompt_tokens = 945
output_tokens = 300
"#;

#[test]
fn s4_4_sglang_retracts_the_longest_prompt_on_a_tie_of_output_tokens() {
    // Requests 1 and 2 decode in lockstep (equal output counts): the longer prompt (request 1)
    // is retracted; with the prompts swapped, request 2 is. (A request landing while a step runs
    // joins the next step, `DReq::late`: two requests landing during different steps would not tie.)
    let w = collect(TIE, "sglang-0.5.22", &[]);
    let f = early_frees(&w);
    assert!(!f.is_empty() && f.iter().all(|(r, _)| *r == 1), "{f:?}");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let swapped =
        TIE.replace("prompt_tokens = 945", "prompt_tokens = X").replace("prompt_tokens = 950", "prompt_tokens = 945");
    let swapped = swapped.replace("prompt_tokens = X", "prompt_tokens = 950");
    let w = collect(&swapped, "sglang-0.5.22", &[]);
    let f = early_frees(&w);
    assert!(!f.is_empty() && f.iter().all(|(r, _)| *r == 2), "{f:?}");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

#[test]
fn s4_4_sglang_without_a_host_backup_aborts_the_retracted_request_with_503() {
    let w = run(OUT_OF_PAGES, "sglang-0.5.22", &[("decode_out_of_pages", "retract_abort")]);
    assert_eq!(answer(&w, 0).0, 200);
    assert_eq!(answer(&w, 1).0, 503);
    assert!(w.oracle.violations.is_empty(), "a capacity abort is no bug: {:?}", w.oracle.violations.first());
}

/// Reference §4.4 with the decode-side radix cache (`decode_radix_cache = on`): decode evicts
/// reclaimable cache before it retracts or aborts a running request (sglang 0.5.22
/// `schedule_batch.py` `check_decode_mem` → `allocator/base.py` `check_decode_capacity`: "fits
/// after evicting reclaimable cache"; the prealloc budget counts the evictable blocks too). Six
/// finished 1,024-token prompts of six tenants stay cached on an 8,192-token decode pool; two long
/// requests then decode 3,000 tokens each. Before the thirty-eighth session the model retracted
/// beside the cached blocks: one long request answered 500 on sglang and, on vLLM, a preempted one
/// stayed retracted for good (`request_hang/decode_leg_pending`, `page_leak/decode`).
#[test]
fn s4_4_decode_evicts_its_radix_cache_before_retracting() {
    let mut text = String::from(
        "name = \"decode-cache-pressure\"\ncontext_len = 8192\nseed = 6\n[[prefill]]\npool_tokens = 16384\n[[decode]]\npool_tokens = 8192\n[knobs]\npage_size = 16\ndecode_radix_cache = \"on\"\n",
    );
    for i in 0..6 {
        text += &format!(
            "[[request]]\nat_ms = {}\ntenant = {}\nprompt_tokens = 1024\noutput_tokens = 3\nprefix_blocks = [{}, {}]\n",
            i * 100,
            i + 1,
            10 + i,
            20 + i
        );
    }
    text +=
        "[[request]]\nat_ms = 1000\ntenant = 9\nprompt_tokens = 1024\noutput_tokens = 3000\nprefix_blocks = [90, 91]\n";
    text += "[[request]]\nat_ms = 1001\ntenant = 8\nprompt_tokens = 1500\noutput_tokens = 3000\nprefix_blocks = [80, 81, 82]\n";
    for profile in ["sglang-0.5.22", "vllm-nixl"] {
        let w = run(&text, profile, &[]);
        for r in 0..8 {
            assert_eq!(answer(&w, r).0, 200, "{profile}: request {r}");
        }
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
        assert_eq!(w.reqs[7].decode_tokens(), 3000, "{profile}");
    }
}

#[test]
fn s4_4_sglang_aborts_the_last_request_with_500_when_it_alone_does_not_fit() {
    // One request that outgrows the whole pool, admitted by pages and reserve: retraction keeps
    // it, then aborts it.
    let alone = OUT_OF_PAGES.replace("output_tokens = 300", "output_tokens = 2000");
    let alone = alone.split("[[request]]").take(2).collect::<Vec<_>>().join("[[request]]");
    let w = run(&alone, "sglang-0.5.22", &[]);
    assert_eq!(answer(&w, 0).0, 500);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    // sglang's own budget never preallocates it: its prompt and `max_new_tokens` (2,940 tokens)
    // exceed the idle pool, and nothing turns it away (`_check_if_req_exceed_kv_capacity` looks
    // at the prompt only): the request hangs in decode's prealloc queue, as the released code
    // does (`pop_preallocated` → `_required_admission_tokens`). A walkthrough found it.
    let budget = alone.replace("decode_admission = \"pages_and_reserve\"\n", "");
    let w = run(&budget, "sglang-0.5.22", &[]);
    assert!(w.reqs[0].response().is_none(), "never admitted, so never aborted for want of pages");
    let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
    assert_eq!(sigs, ["request_hang/decode_leg_pending"]);
}

/// The vllm-nixl campaign's fault-free runs that reported `request_hang` / `page_leak` before
/// issue 13 (seeds 66, 203, 245 of `kvsim fuzz --profile vllm-nixl`, known-bugs/vllm-nixl.toml):
/// with the what-if `stall` they still do; with the profile's preemption none of them hangs or
/// leaks decode pages.
#[test]
fn s4_4_vllm_nixl_campaign_runs_that_stalled_no_longer_hang_or_leak() {
    use kvsim::fuzz::{draw, signatures, Space};
    let space = Space::Profile("vllm-nixl".into());
    // Decode's side only: prefill-side leaks and hangs on these seeds are another mechanism
    // (seed 203's and 245's shrunk examples: decode rejects, prefill's source blocks stay held),
    // triaged on their own.
    // A stalled running request leaves its decode leg open and its pages held.
    let liveness = |s: &String| s == "request_hang/decode_leg_pending" || s == "page_leak/decode";
    let mut stalled = 0;
    for seed in [66u64, 203, 245] {
        let cfg = draw(seed, &space);
        let mut stall = cfg.clone();
        stall.knobs.decode_out_of_pages = kvsim::config::DecodeOutOfPages::Stall;
        if signatures(&kvsim::simulate(stall, None, false)).iter().any(liveness) {
            stalled += 1;
        }
        let w = kvsim::simulate(cfg, None, true);
        let bad: Vec<_> = signatures(&w).into_iter().filter(liveness).collect();
        assert!(bad.is_empty(), "seed {seed}: {bad:?}");
    }
    assert!(stalled > 0, "the what-if stall reproduces the former false alarm on at least one seed");
}

#[test]
fn s10_0_5_16_answers_200_over_stale_kv() {
    // ≤0.5.16: the stub walks through every gate; decode commits on the room id alone and attends
    // over its whole reservation — page 0 is the stub's, the rest never written (a cold pool).
    let w = run(OVER_LENGTH, "sglang-0.5.16", &[]);
    for r in 0..2 {
        assert_eq!(answer(&w, r).0, 200, "request {r}");
        assert!(w.oracle.has(Kind::UninitializedRead, RequestId(r)), "request {r}: {:?}", w.oracle.violations);
    }
}

#[test]
fn s10_post_forward_abort_check_only_answers_500_after_the_waiting_timeout() {
    // Only the post-forward check (PR #36988): prefill retires the stub after its forward, locally
    // (no notice to decode); decode waits out its 300 s timer; nothing stale is read.
    let w = run(OVER_LENGTH, "sglang-0.5.16", &[("prefill_post_forward_abort_check", "on")]);
    for r in 0..2 {
        let (status, at) = answer(&w, r);
        assert_eq!(status, 500, "request {r}");
        assert!(at >= 300 * S, "request {r} answered at {at} ns");
        assert_eq!(w.reqs[r as usize].prefill_leg(), Some(400), "request {r}: prefill's own 400");
    }
    assert!(!w.oracle.violations.iter().any(|v| v.kind == Kind::UninitializedRead), "{:?}", w.oracle.violations);
}

#[test]
fn s3_5_inflight_success_overwrites_a_pending_abort_on_0_5_16() {
    // The stub's transfer succeeds; the inflight poll releases it and reports "length": prefill's
    // leg answers 200 for a request it rejected (sglang #33507). Keeping the abort answers 400.
    let w = run(OVER_LENGTH, "sglang-0.5.16", &[]);
    assert_eq!(w.reqs[0].prefill_leg(), Some(200));
    let kept = run(OVER_LENGTH, "sglang-0.5.16", &[("inflight_success_keeps_abort", "on")]);
    assert_eq!(kept.reqs[0].prefill_leg(), Some(400));
    // Released at once on Success: nothing held on prefill once the run is over (radix-cached
    // pages are not held by a request).
    assert!(kept.prefill[0].reqs().is_empty() && kept.prefill[0].meta().in_use() == 0);
}

#[test]
fn s3_4_a_last_chunk_with_zero_pages_is_still_sent_and_concludes() {
    // Decode's radix cache holds the repeated prompt whole (`decode_prefix_len` = the prompt):
    // prefill's last chunk has no pages and both wheels' `CommonKVSender` send it with the metadata
    // row (`should_send_kv_chunk`: `num_pages > 0 or last_chunk`); sglang #28652's skip is the
    // what-if `zero_page_last_chunk = skip` (catalogue row zero-page-last-chunk).
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/catalogue/zero-page-last-chunk.toml");
    let text = std::fs::read_to_string(p).expect("catalogue scenario");
    for profile in ["sglang-0.5.16", "sglang-0.5.22"] {
        let (w, jobs) = crate::run_with_jobs_of(cfg(&text, profile, &[]), RequestId(1));
        assert_eq!(answer(&w, 1).0, 200, "{profile}");
        assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024, "{profile}");
        let last: Vec<_> = jobs.iter().map(|j| (j.is_last(), j.sender_pages())).collect();
        assert_eq!(last, [(true, 0)], "{profile}: one empty last chunk");
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations);
    }
}

#[test]
fn s7_vllm_rejects_an_over_length_prompt_before_scheduling() {
    // vLLM has no stub path: a prompt prefill cannot hold is refused before scheduling (400), the
    // sequential proxy never calls decode, and nothing is read.
    let w = run(OVER_LENGTH, "vllm-nixl", &[]);
    for r in 0..2 {
        let (status, at) = answer(&w, r);
        assert_eq!(status, 400, "request {r}");
        assert!(at < S, "request {r} answered at {at} ns");
        assert_eq!(w.reqs[r as usize].decode_leg(), None, "request {r}: decode never called");
    }
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// Decode holds 4,096 tokens. Request 0 (3,000 tokens) is admitted; request 1 (2,000) does not fit
/// beside it (with the decode reserve); request 2 (16 tokens) would fit but is behind request 1.
const HEAD_OF_LINE: &str = r#"
name = "head-of-line"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 3000
output_tokens = 20
[[request]]
at_ms = 1
tenant = 1
prompt_tokens = 2000
output_tokens = 4
[[request]]
at_ms = 2
tenant = 1
prompt_tokens = 16
output_tokens = 4
"#;

#[test]
fn s2_decode_admission_stops_at_the_first_request_that_does_not_fit() {
    let w = run(HEAD_OF_LINE, "sglang-0.5.22", &[]);
    let (s0, t0) = answer(&w, 0);
    let (s2, t2) = answer(&w, 2);
    assert_eq!((s0, answer(&w, 1).0, s2), (200, 200, 200));
    // Request 2 fits from the start but waits behind request 1, which waits for request 0's pages.
    assert!(t2 > t0, "request 2 answered at {t2} ns, before request 0 freed its pages at {t0} ns");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// Reference §7 (vLLM NixlConnector): behind vLLM's sequential proxy decode pulls with the
/// transfer parameters the proxy hands it (vLLM 0.33.0 `nixl/pull_scheduler.py`
/// `request_finished`): there is no bootstrap room and no metadata row to check, so a late row
/// of an earlier request in a reused slot fails nothing. Request 2's row lags 20 ms and its slot
/// still holds request 0's room (no zeroing on free); sglang's concurrent path reads that stale
/// room and fails the request (the stale-metadata-room row, sglang #27374).
const LATE_METADATA_ROW: &str = r#"
name = "late-metadata-row"
context_len = 4096
[[prefill]]
pool_tokens = 64
metadata_slots = 2
[[decode]]
pool_tokens = 64
metadata_slots = 2
[knobs]
page_size = 1
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 1
output_tokens = 1
[[request]]
at_ms = 150
tenant = 0
prompt_tokens = 1
output_tokens = 1
[[request]]
at_ms = 390
tenant = 0
prompt_tokens = 1
output_tokens = 1
[[faults.script]]
kind = "metadata_lag"
request = 2
lag_ms = 20
"#;

#[test]
fn s7_vllm_decode_has_no_bootstrap_room_so_a_stale_metadata_row_fails_nothing() {
    let w = run(LATE_METADATA_ROW, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 2).0, 200);
    assert!(!w.reqs[2].room_mismatch());
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    // The same run on sglang's concurrent path: decode reads request 0's stale room.
    let w = run(LATE_METADATA_ROW, "vllm-nixl", &[("router_mode", "concurrent")]);
    assert_eq!(answer(&w, 2).0, 500);
    assert!(w.reqs[2].room_mismatch());
}

/// Reference §7: decode's heartbeats keep prefill's source lease alive while decode still waits
/// to load the request (vLLM 0.33.0 `nixl/base_scheduler.py` `on_new_request`,
/// `nixl/base_worker.py` `_handle_heartbeat`). Request 1 waits in decode's admission queue behind
/// request 0 (200 output tokens, about 5 s) far past a 1 s lease: its source blocks are still
/// there when decode admits it, and it is answered 200 (without the heartbeats the lease frees
/// them at 1 s, decode's pull never comes and the request fails 500 at its 300 s waiting timer).
const LEASE_WHILE_DECODE_WAITS: &str = r#"
name = "lease-while-decode-waits"
context_len = 4096
liveness_bound_s = 1200
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 1024
[knobs]
page_size = 16
source_lease_ms = 1000
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 800
output_tokens = 200
[[request]]
at_ms = 10
tenant = 2
prompt_tokens = 800
output_tokens = 4
"#;

#[test]
fn s7_vllm_decode_heartbeats_extend_the_source_lease_while_it_waits_to_load() {
    let w = run(LEASE_WHILE_DECODE_WAITS, "vllm-nixl", &[]);
    let (status, at) = answer(&w, 1);
    assert_eq!(status, 200);
    assert!(at > 5 * S && at < 6 * S, "answered at {at} ns");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    // Once decode stops waiting the lease runs out: nothing is held at the end.
    assert!(w.prefill.iter().all(|p| p.leaks().is_none()));
}

/// Reference §7: a request aborted while its load is in flight keeps its decode blocks until the
/// read ends (prefill's source does not: see the next test's lease); vLLM has no fallback timer (vLLM 0.33.0 `v1/core/sched/scheduler.py`
/// `finish_requests` → `delay_free_blocks`, freed in `_update_from_kv_xfer_finished`;
/// `nixl/base_worker.py` `_pop_done_transfers` retains a handle until it is released). Request 0's
/// one 56 s transfer batch is in flight when the client aborts at 2 s; request 1 (40 s) gets
/// decode blocks of its own. With sglang's 30 s fallback the blocks are freed at 32 s, handed to
/// request 1 and overwritten by request 0's late write (decode-free-before-late-write).
const ABORT_DURING_LOAD: &str = r#"
name = "abort-during-load"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[cost]
transfer_bytes_per_us = 5
[knobs]
page_size = 16
transfer_sync_timeout_ms = 600000
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 4000
output_tokens = 4
abort_at_ms = 2000
[[request]]
at_ms = 40000
tenant = 2
prompt_tokens = 4000
output_tokens = 4
"#;

#[test]
fn s7_vllm_decode_holds_an_aborted_loads_blocks_until_the_read_ends_with_no_fallback_timer() {
    use kvsim::types::Role;
    let w = run(ABORT_DURING_LOAD, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 499);
    assert_eq!(answer(&w, 1).0, 200);
    // Decode's side is clean. Prefill's is not: the abort stopped decode's heartbeats, the 30 s
    // lease freed the source under the 56 s read (`s4_2_vllm_an_aborted_requests_lease_ends_…`).
    assert!(!w.oracle.violations.is_empty());
    assert!(
        w.oracle
            .violations
            .iter()
            .all(|v| v.cause == "transfer_read_of_a_source_page" && v.pool.is_some_and(|p| p.role == Role::Prefill)),
        "{:?}",
        w.oracle.violations
    );
    assert!(w.decode.iter().all(|d| d.leaks().is_none()));
    // sglang's concurrent path keeps its 30 s fallback: the late write lands in request 1's blocks.
    let w = run(ABORT_DURING_LOAD, "vllm-nixl", &[("router_mode", "concurrent")]);
    assert!(kinds(&w).contains(&"use_after_free"), "{:?}", kinds(&w));
}

/// Reference §7: decode's serving layer rejects an over-length prompt before admission and, in
/// vLLM 0.33.0, still tells prefill (`entrypoints/generate/base/serving.py`
/// `_with_kv_transfer_rejection_cleanup`, `nixl/pull_scheduler.py` `request_finished`): prefill
/// frees the blocks it held for decode's read at once instead of at its lease (vLLM #41269, the
/// pre-admission-reject-strands-prefill row, is the build before that). The lease is NIXL's
/// `kv_lease_duration`, 30 s by default (`nixl/base_scheduler.py`), which a deployment can raise.
const DECODE_REJECTS: &str = r#"
name = "decode-rejects"
context_len = 8192
liveness_bound_s = 120
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 2048
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 4000
output_tokens = 4
"#;

#[test]
fn s7_vllm_decode_rejection_before_admission_frees_prefills_source_blocks_at_once() {
    let w = run(DECODE_REJECTS, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 400);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    assert!(w.prefill.iter().all(|p| p.leaks().is_none()));
    assert!(w.now().0 < S, "prefill's blocks are freed within the second, at {} ns", w.now().0);
    // Before the fix the blocks stay until the lease: the default 30 s frees them inside the
    // 2-minute bound (nothing waits to load, so no heartbeat extends it) ...
    let w = run(DECODE_REJECTS, "vllm-nixl", &[("decode_reject_releases_prefill", "off")]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    assert!((30 * S..31 * S).contains(&w.now().0), "freed at the 30 s lease, at {} ns", w.now().0);
    // ... and a configured 480 s lease holds them past it.
    let w =
        run(DECODE_REJECTS, "vllm-nixl", &[("decode_reject_releases_prefill", "off"), ("source_lease_ms", "480000")]);
    assert_eq!(kinds(&w), vec!["page_leak"]);
}

/// vLLM 0.34.0 `nixl/pull_scheduler.py` `request_finished`: a request aborted before decode
/// scheduled it (still `do_remote_prefill`) queues an empty read whose notice frees prefill's blocks
/// at once, as a rejection's does. Request 1 waits in decode's queue behind request 0 (decode holds
/// one prompt) and its client aborts at 1 s: prefill frees its source within the message latency,
/// not at the 30 s lease (prefill itself ignores the abort of a request it finished).
#[test]
fn s7_vllm_an_abort_in_decodes_queue_frees_prefills_source_at_once() {
    use kvsim::types::Role;
    let text = r#"
name = "abort-in-decode-queue"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 2560
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 400
[[request]]
at_ms = 10
tenant = 2
prompt_tokens = 2000
output_tokens = 4
abort_at_ms = 1000
"#;
    let w = collect(text, "vllm-nixl", &[]);
    assert_eq!((answer(&w, 0).0, answer(&w, 1).0), (200, 499));
    assert!(mem_times(&w, Role::Decode, 1, false).is_empty(), "request 1 never got decode pages");
    let freed = mem_times(&w, Role::Prefill, 1, true);
    assert_eq!(freed.len(), 1, "{freed:?}");
    assert!((S..S + S / 100).contains(&freed[0]), "prefill freed request 1's source at {} ns", freed[0]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// Reference §7 and §4.1: with no fallback timer, an aborted load whose prefill then dies is
/// released when decode learns of the death (the heartbeat loss): NIXL's read from a dead peer
/// ends failed and vLLM frees the blocks with it. Request 0 is aborted at 2 s during its 56 s
/// transfer, prefill crashes at 3 s (restarts 1 s later), the loss is detected at 13 s; request
/// 1 (40 s) is served from the freed pool and nothing is held at the end.
#[test]
fn s7_vllm_an_aborted_load_whose_prefill_died_is_released_at_the_heartbeat_loss() {
    let text = format!(
        "{ABORT_DURING_LOAD}\n[[faults.script]]\nkind = \"crash\"\nat_ms = 3000\nnode = \"prefill-0\"\nrestart_after_ms = 1000\n"
    );
    let w = run(&text, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 499);
    assert_eq!(answer(&w, 1).0, 200);
    assert!(w.decode.iter().all(|d| d.leaks().is_none()), "decode still holds request 0's blocks");
    assert!(!kinds(&w).contains(&"page_leak"), "{:?}", kinds(&w));
}

/// Reference §3.3 (waiting queue): a waiting request's prefix is matched in the radix cache, and
/// its cached blocks locked, only when the scheduler first schedules it — sglang when it forms the
/// prefill batch (0.5.22 wheel, `managers/schedule_policy.py` `PrefillAdder.add_one_req` →
/// `_commit_prefill_admission`), vLLM when the request's slots are allocated (0.33.0 wheel,
/// `v1/core/kv_cache_manager.py` `allocate_slots`, after its free-block check). Request 0 leaves two
/// prefix blocks cached; request 1 keeps prefill busy while requests 2 (3,500 tokens: fits only
/// once those blocks are evicted) and 3 (the same prefix) queue behind it. Before, request 3 locked
/// the blocks when it left the bootstrap queue, so the queue's head (2) could never be allocated
/// and 3 never ran behind it: on vllm-nixl a `request_hang` and a `page_leak/prefill` (campaign
/// seeds 6,728, 13,511, 5,165), on sglang-0.5.22 both answered 500 after 300 s.
const LOCKED_PREFIX: &str = r#"
name = "locked-prefix"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 16384
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [1, 2]
[[request]]
at_ms = 1000
tenant = 1
prompt_tokens = 2000
output_tokens = 2
[[request]]
at_ms = 1010
tenant = 1
prompt_tokens = 3500
output_tokens = 2
[[request]]
at_ms = 1020
tenant = 1
prompt_tokens = 1100
output_tokens = 2
prefix_blocks = [1, 2]
"#;

#[test]
fn s3_3_a_waiting_request_locks_its_cached_prefix_only_when_first_scheduled() {
    for profile in ["vllm-nixl", "sglang-0.5.22"] {
        let w = run(LOCKED_PREFIX, profile, &[]);
        for r in 0..4 {
            let (status, at) = answer(&w, r);
            assert_eq!(status, 200, "{profile}: request {r}");
            assert!(at < 2 * S, "{profile}: request {r} answered at {at} ns");
        }
        assert!(w.oracle.violations.is_empty(), "{profile}: {:?}", w.oracle.violations.first());
        // Request 2 needed the cached blocks' pages, so request 3 found its prefix evicted.
        assert_eq!(w.reqs[3].prefix_reused(), 0, "{profile}");
    }
    // Without request 2 in the way, request 3 does reuse the cached prefix (taken when scheduled).
    let without = LOCKED_PREFIX.replace("prompt_tokens = 3500", "prompt_tokens = 100");
    let w = run(&without, "vllm-nixl", &[]);
    assert_eq!(w.reqs[3].prefix_reused(), 1024);
}

/// Reference §7: behind vLLM's proxy decode pulls the KV — its worker issues the NIXL READs
/// (vLLM 0.33.0 `nixl/pull_worker.py` `_read_blocks`) — so when decode dies, its reads stop: the
/// batches still queued are never read and the one in flight lands nothing. Request 0's 48
/// four-page batches each take 10 s (a scripted delay); decode-0 crashes at 274 ms. Before, the
/// batches went on landing for 480 s and the last one read a source block prefill had freed at
/// its 480 s lease (`use_after_free/transfer_read_of_a_source_page`, campaign seed 596,662, shrunk).
const DEAD_READER: &str = r#"
name = "dead-reader"
context_len = 16384
[[prefill]]
pool_tokens = 3724
metadata_slots = 2
[[decode]]
pool_tokens = 3720
metadata_slots = 2
[knobs]
chunked_prefill_size = 256
max_transfer_batch_pages = 4
page_size = 4
[[request]]
at_ms = 69
tenant = 0
prompt_tokens = 753
output_tokens = 1
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 10000
[[faults.script]]
kind = "crash"
node = "decode-0"
at_ms = 274
restart_after_ms = 2000
"#;

#[test]
fn s7_vllm_a_dead_decode_reads_nothing_more() {
    use kvsim::trace::{MemOp, TraceRecord};
    let w = collect(DEAD_READER, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 503, "decode died with the request");
    let recs = w.tracer.collected.as_ref().expect("collected");
    assert!(!recs.iter().any(|(_, rec)| matches!(rec, TraceRecord::Mem(MemOp::Copy { .. }))), "nothing landed");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    assert!(w.prefill.iter().all(|p| p.leaks().is_none()));
}

/// One short prompt on the vLLM path; the client's abort time is filled in per run.
const ABORT_AROUND_PREFILL: &str = r#"
name = "abort-around-prefill"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
[knobs]
page_size = 16
[[request]]
at_ms = 1
tenant = 0
prompt_tokens = 96
output_tokens = 4
abort_at_ns = ABORT
"#;

/// Router, sequential path (vLLM's disaggregated proxies): the decode request follows prefill's
/// answer in the client's own handler, so once the client has gone (answered 499, both legs
/// aborted) no decode leg starts, even when prefill's 200 was already on its way. Before the fix
/// the router started it, decode reserved pages for a request prefill had freed, and they were
/// never released (`page_leak/decode` on vllm-nixl, seeds 8,455 and 9,999 of a 20,000-seed
/// campaign). The abort time sweeps across prefill's answer; at least one run must abort in the
/// window where prefill's 200 is already in flight.
#[test]
fn s5_sequential_router_starts_no_decode_leg_after_the_client_is_gone() {
    use kvsim::trace::{MemOp, TraceRecord};
    use kvsim::types::Role;
    let mut in_window = 0;
    for step in 0..200u64 {
        let abort = 1_000_000 + step * 50_000;
        let text = ABORT_AROUND_PREFILL.replace("ABORT", &abort.to_string());
        let w = collect(&text, "vllm-nixl", &[]);
        let (status, at) = answer(&w, 0);
        if status != 499 {
            continue;
        }
        if w.reqs[0].prefill_leg() == Some(200) {
            in_window += 1;
        }
        let recs = w.tracer.collected.as_ref().expect("collected");
        let late_decode = recs.iter().any(|(t, rec)| {
            t.0 > at && matches!(rec, TraceRecord::Mem(MemOp::Alloc { pool, .. }) if pool.role == Role::Decode)
        });
        assert!(!late_decode, "abort at {abort} ns: decode reserved pages after the client's 499");
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "abort at {abort} ns: {:?}", kinds(&w));
        assert!(!kinds(&w).contains(&"page_leak"), "abort at {abort} ns: {:?}", kinds(&w));
    }
    assert!(in_window > 0, "no run aborted while prefill's 200 was in flight");
}

/// Reference §3 and §11, sglang 0.5.22 (`prefill_abort_release = ack_after_drain`): request 0 is
/// aborted at 1 s while its one transfer chunk, delayed 5 s, is being written. Prefill releases
/// the source pages at the abort (`handle_inflight_transfer_failure` once the aborted sender
/// polls Failed): with the radix cache into the tree (`release_kv_cache(checkpoint=True)`:
/// cached, unlocked, evictable), with the chunk cache to the free list, so the chunk still being
/// written reads pages the request no longer holds: a use after free of the source. Prefill
/// acknowledges decode's abort only when that chunk has ended (`_maybe_ack_drained_abort`), so
/// decode keeps request 0's pages until then and request 1 of another tenant, admitted later,
/// never gets pages the late write lands in. Acknowledging at once as well (`immediate`: the
/// deferred-release-defeated row, sglang #38961) lets the write land in request 1's pages;
/// holding the source too (PR #38961, open) leaves nothing to find.
#[test]
fn s3_sglang_0_5_22_releases_an_aborted_requests_source_at_once_and_acknowledges_after_the_drain() {
    let text = include_str!("../../../scenarios/catalogue/deferred-release-defeated.toml");
    for cache in ["radix", "chunk"] {
        let w = run(text, "sglang-0.5.22", &[("prefill_cache", cache)]);
        assert_eq!(answer(&w, 0).0, 499, "{cache}");
        assert_eq!(answer(&w, 1).0, 200, "{cache}");
        let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
        if cache == "radix" {
            assert!(w.oracle.violations.is_empty(), "the chunk reads the cached KV: {:?}", w.oracle.violations);
        } else {
            assert_eq!(kinds(&w), vec!["use_after_free"]);
            assert_eq!(sigs, ["use_after_free/transfer_read_of_a_source_page"]);
        }
        assert!(w.decode.iter().all(|d| d.leaks().is_none()), "{cache}");
    }
    // Acknowledged at once: decode frees, request 1 gets the pages, the late write lands there.
    let w = run(text, "sglang-0.5.22", &[("prefill_abort_release", "immediate")]);
    assert_eq!(kinds(&w), vec!["cross_tenant_read", "use_after_free"]);
    // The source held until the worker drained: clean.
    let w = run(text, "sglang-0.5.22", &[("prefill_abort_release", "hold_source_until_drained")]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    assert_eq!(answer(&w, 1).0, 200);
}

/// sglang 0.5.22 wheel, `disaggregation/mooncake/conn.py` `send_kvcache`: with bounded batches
/// (`max_transfer_batch_pages`, `SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES`) a chunk is sent batch
/// by batch, and the loop stops only on a batch's error, never on the room's status; the worker
/// checks for Failed between chunks. Request 0 of deferred-release-defeated, in eight 16-page
/// batches, is aborted while its first (delayed) batch is written: all eight are still written,
/// and decode's abort is acknowledged (`ack_after_drain`) only after the last. Before, the abort
/// dropped the seven queued batches.
#[test]
fn s3_sglang_0_5_22_an_aborted_chunk_is_sent_to_its_last_bounded_batch() {
    let text = include_str!("../../../scenarios/catalogue/deferred-release-defeated.toml");
    let set = [("prefill_cache", "chunk"), ("max_transfer_batch_pages", "16")];
    let w = collect(text, "sglang-0.5.22", &set);
    assert_eq!(answer(&w, 0).0, 499);
    assert_eq!(copies_of_request_0(&w), 8, "every batch of the chunk being sent lands");
    // Decode frees request 0's pages only once the chunk has ended, so request 1 starts after the
    // last batch's landing.
    use kvsim::trace::{MemOp, TraceRecord};
    let recs = w.tracer.collected.as_ref().expect("collected");
    let last_copy = recs
        .iter()
        .filter_map(|(t, rec)| matches!(rec, TraceRecord::Mem(MemOp::Copy { r, .. }) if r.0 == 0).then_some(t.0))
        .max()
        .expect("copies");
    let first_alloc_1 = recs
        .iter()
        .filter_map(|(t, rec)| matches!(rec, TraceRecord::Mem(MemOp::Alloc { r, .. }) if r.0 == 1).then_some(t.0))
        .min()
        .expect("request 1 allocated");
    assert!(
        first_alloc_1 >= last_copy,
        "request 1 allocated at {first_alloc_1} ns, before the last batch at {last_copy}"
    );
    assert_eq!(answer(&w, 1).0, 200);
}

/// sglang 0.5.22 wheel, `disaggregation/mooncake/conn.py` `_poison_unsettled_send`: a send that
/// fails (here the synchronous call times out at 2 s while its 2,000-token batch keeps writing)
/// poisons the room's drain ack (`common/conn.py` `poison_deferred_ack_room`), so decode's abort
/// after the Failed status is never acknowledged and decode frees its reservation only at its
/// 30 s deferred-release timeout (`decode.py` `resolve_deferred_releases`). The late write lands
/// long before: request 1 of another tenant waits for the pages and reads only its own KV. What
/// is left is prefill's source, freed when the send failed and still read by the batch. The
/// poison buys the timeout and no more: with a 100 ms timeout decode frees under the write.
#[test]
fn s3_sglang_0_5_22_withholds_the_abort_ack_after_a_failed_send() {
    let text = include_str!("../../../scenarios/catalogue/sync-timeout-still-writing.toml");
    let still_writing = [("transfer_timeout_semantics", "returns_while_writing"), ("max_transfer_batch_pages", "0")];
    let w = run(text, "sglang-0.5.22", &still_writing);
    assert_eq!(answer(&w, 0).0, 500);
    assert_eq!(answer(&w, 1).0, 200);
    // With the radix cache the failed request's computed source went into the tree, where the
    // batch reads it: nothing is left (request 0's 500 is its own sync timer's: no wrong status).
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
    // With the chunk cache the source was freed: the source read after the call returned is
    // named for the timeout (not the abort race of deferred-release-defeated, whose signature
    // has no suffix).
    let chunk = run(text, "sglang-0.5.22", &[still_writing[0], still_writing[1], ("prefill_cache", "chunk")]);
    assert_eq!(kinds(&chunk), vec!["use_after_free"]);
    let sigs = kvsim::fuzz::signatures(&chunk);
    assert_eq!(
        sigs.iter().filter(|s| s.starts_with("use_after_free")).collect::<Vec<_>>(),
        ["use_after_free/transfer_read_of_a_source_page/sync_timeout"]
    );
    // Request 1 got decode's pages only after the 30 s fallback.
    let first = w.reqs[1].first_token_at().expect("request 1 decoded");
    assert!(first.0 >= 30_000_000_000, "first token at {first:?}");
    // Acknowledged when the failed job ended (no poison): decode frees under the write.
    let w = run(text, "sglang-0.5.22", &[still_writing[0], still_writing[1], ("prefill_abort_release", "immediate")]);
    assert_eq!(kinds(&w), vec!["cross_tenant_read", "use_after_free"]);
    let sigs = kvsim::fuzz::signatures(&w);
    assert!(sigs.contains("use_after_free/transfer_write/sync_timeout"), "{sigs:?}");
    // The poison bounds the exposure by the deferred-release timeout only.
    let short = [still_writing[0], still_writing[1], ("deferred_release_timeout_ms", "100")];
    let w = run(text, "sglang-0.5.22", &short);
    assert_eq!(kinds(&w), vec!["cross_tenant_read", "use_after_free"]);
    // Quiesced: nothing writes after the call returned, only the source read in flight at the
    // failure is gone too.
    let w =
        run(text, "sglang-0.5.22", &[("transfer_timeout_semantics", "quiesced"), ("max_transfer_batch_pages", "0")]);
    assert!(!kinds(&w).contains(&"cross_tenant_read"), "{:?}", kinds(&w));
}

/// A campaign's shrunk find on sglang 0.5.22 (seed 900,333,645): request 1's batch, delayed
/// 5.5 s, fails its 500 ms sync call and keeps writing; its computed source goes into prefill's
/// radix cache at the failure, decode frees request 1's pages at its 5 s fallback (the failed send
/// poisoned the drain ack) and gives them to request 3, whose prefill allocation evicts request
/// 1's cached pages and takes them too; at 5.5 s the batch reads request 3's prompt from the
/// reused source and writes it into request 3's decode pages, at request 1's positions. Request 3
/// reads its own KV out of place, and the read is named for the writer that outlived its
/// timed-out call; under a quiesced call nothing of this happens. (The thirtieth session's case,
/// seed 810,279,602, needed the model's old release, which freed a failed request's computed
/// source whatever the cache.)
#[test]
fn s3_sglang_0_5_22_a_write_that_outlived_its_call_names_the_reads_it_corrupts() {
    let text = &[
        r#"
name = "outlived-call"
profile = "sglang-0.5.22"
seed = 900333645
context_len = 4096
liveness_bound_s = 1200
[[prefill]]
pool_tokens = 1536
[[decode]]
pool_tokens = 2416
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 145
output_tokens = 1
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 865
output_tokens = 1
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 497
output_tokens = 1
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 1025
output_tokens = 1
[knobs]
chunked_prefill_size = 1024
deferred_release_timeout_ms = 5000
page_size = 16
transfer_sync_timeout_ms = 500
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 5523
"#,
        FUZZ_COST,
    ]
    .concat();
    let w = run(text, "sglang-0.5.22", &[]);
    assert!(w.reqs[1].outlived_call());
    let sigs = kvsim::fuzz::signatures(&w);
    assert!(sigs.contains("own_kv_misplaced/late_write/sync_timeout"), "{sigs:?}");
    assert!(sigs.contains("use_after_free/transfer_write/sync_timeout"), "{sigs:?}");
    assert!(!sigs.contains("own_kv_misplaced/late_write"), "{sigs:?}");
    let w = run(text, "sglang-0.5.22", &[("transfer_timeout_semantics", "quiesced")]);
    assert!(!kinds(&w).contains(&"own_kv_misplaced"), "{:?}", kinds(&w));
}

/// A transfer job ends once in the trace. An abort that ends a job while its own end is still
/// queued left that end to be handled later as a no-op, and the trace showed the job ending
/// twice at one instant (`ok: true`, then a stale `ok: false`). The stale end is dropped untraced
/// now, as other moot events are; the run is otherwise the same (its snapshot lost that event only).
#[test]
fn a_transfer_job_ends_once_in_the_trace() {
    use kvsim::event::Ev;
    use kvsim::trace::TraceRecord;
    let text = include_str!("../../../scenarios/catalogue/cancel-mid-transfer.toml");
    let w = collect(text, "sglang-0.5.22", &[]);
    let recs = w.tracer.collected.as_ref().expect("collected");
    let mut ends = std::collections::BTreeMap::<u32, u32>::new();
    for (_, rec) in recs {
        if let TraceRecord::Event(Ev::TransferDone { job, .. }) = rec {
            *ends.entry(job.0).or_default() += 1;
        }
    }
    assert!(!ends.is_empty(), "the scenario transfers");
    assert!(ends.values().all(|n| *n == 1), "jobs ending more than once: {ends:?}");
    // Request 0 was aborted while its job's end was queued (the case above; the previous model
    // traced job 0's end twice here).
    assert_eq!(answer(&w, 0).0, 499);
}

/// sglang 0.5.22 `disaggregation/decode.py` with decode's radix cache on: the prealloc budget
/// counts the tree's evictable blocks as available (`_allocatable_token_budgets` adds
/// `evictable_size()`), a request that does not fit is left waiting with nothing evicted, and
/// `_pre_alloc` evicts only the allocation's shortfall once it fits. Request 0's two prompt blocks
/// stay cached on decode; request 2 waits while request 1 runs, then is admitted. Before, the
/// model evicted cached blocks until the whole budget fitted, at each refused attempt too: request
/// 0's blocks went at request 2's first attempt, while it still did not fit.
#[test]
fn s4_1_decode_radix_cache_evicts_only_for_an_allocation_that_fits() {
    use kvsim::types::Role;
    let text = r#"
name = "decode-cache-evicts-at-allocation"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 16
prefill_cache = "chunk"
decode_radix_cache = "on"
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [7, 8]
[[request]]
at_ms = 2000
tenant = 2
prompt_tokens = 2600
output_tokens = 200
prefix_blocks = [50, 51, 52, 53, 54]
[[request]]
at_ms = 2500
tenant = 3
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [60, 61]
"#;
    let w = collect(text, "sglang-0.5.22", &[]);
    for r in 0..3 {
        assert_eq!(answer(&w, r).0, 200, "request {r}");
    }
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let admitted = |r: u32| mem_times(&w, Role::Decode, r, false)[0];
    // Request 2 waited while request 1 decoded (its 200 tokens take seconds), refused each tick.
    let (one_in, two_in) = (admitted(1), admitted(2));
    assert!(two_in > one_in + 1_000_000_000, "request 2 waited for request 1 ({two_in} ns, {one_in} ns)");
    // Request 0's cached blocks are freed (evicted) only as request 2's allocation needs them.
    let evicted: Vec<u64> = mem_times(&w, Role::Decode, 0, true).into_iter().filter(|t| *t > 1_000_000_000).collect();
    assert!(!evicted.is_empty(), "request 2's allocation needed request 0's blocks");
    assert!(evicted.iter().all(|t| *t == two_in), "evicted at {evicted:?}, request 2 admitted at {two_in}");
}

/// vLLM 0.34.0 `v1/core/sched/scheduler.py` `schedule` (`decode_loads_hold_slots = off`): an
/// asynchronous KV load takes no running slot, so with one running slot two requests arriving
/// together both start their loads (new loads start while the running batch has room), request 0
/// is promoted, and request 1's landed KV waits (holding its pages) until the slot frees. sglang
/// (`on`) shares its decode request pool between preallocated, in-transfer and running requests,
/// but with `max_running_requests` at most 32 the pool has twice as many extra slots
/// (`disaggregation_decode_extra_slots`, both wheels' default), so request 1 is preallocated
/// beside request 0 there too and waits for the running slot. Before, the model ran vLLM as
/// sglang (a run whose `max_running_requests` loads were stuck held every later request out of
/// preallocation, a hang the engine does not have), and gave sglang no extra slots.
#[test]
fn s4_2_vllm_loads_take_no_running_slot_until_promoted() {
    use kvsim::types::Role;
    let text = r#"
name = "vllm-load-slots"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
max_running_requests = 1
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 600
output_tokens = 100
[[request]]
at_ms = 1
tenant = 1
prompt_tokens = 600
output_tokens = 4
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 1000
"#;
    let alloc_at = |w: &World, r: u32| mem_times(w, Role::Decode, r, false)[0];
    let first_token = |w: &World, r: u32| w.reqs[r as usize].first_token_at().expect("a token").0;
    for (profile, value) in [("vllm-nixl", "off"), ("vllm-nixl", "on"), ("sglang-0.5.22", "on")] {
        let w = collect(text, profile, &[("decode_loads_hold_slots", value)]);
        assert_eq!((answer(&w, 0).0, answer(&w, 1).0), (200, 200), "{profile} {value}");
        assert!(w.oracle.violations.is_empty(), "{profile} {value}: {:?}", w.oracle.violations.first());
        // Request 0's transfer is delayed a second: request 1's load starts beside it.
        let one_in = alloc_at(&w, 1);
        assert!(
            one_in < first_token(&w, 0),
            "{profile} {value}: request 1's pages at {one_in} ns, during request 0's load"
        );
        // The two decode one after the other in the one running slot (whichever landed first).
        let (t0, t1) = (first_token(&w, 0), first_token(&w, 1));
        assert!(t0.max(t1) > t0.min(t1) + 30_000_000, "{profile} {value}: first tokens at {t0} and {t1} ns");
    }
}

/// sglang's decode request pool without extra slots (`max_running_requests` over 32: both wheels'
/// `disaggregation_decode_extra_slots` default is 0 there): preallocated, in-transfer and running
/// requests together fill `max_running_requests`. 34 requests arrive together on 33 slots, the
/// first 33 with their KV delayed a second; the last is preallocated only once one of them is gone.
/// vLLM (`off`) starts every load at once.
#[test]
fn s4_2_sglang_request_pool_without_extra_slots_is_shared_by_loads() {
    use kvsim::types::Role;
    let mut text = String::from(
        "name = \"request-pool\"\ncontext_len = 8192\n[[prefill]]\npool_tokens = 65536\n[[decode]]\npool_tokens = 65536\nmax_running_requests = 33\n",
    );
    for _ in 0..34 {
        text.push_str("[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 600\noutput_tokens = 4\n");
    }
    for r in 0..33 {
        text.push_str(&format!("[[faults.script]]\nkind = \"delay\"\nrequest = {r}\ndelay_ms = 1000\n"));
    }
    for (profile, waits) in [("sglang-0.5.16", true), ("sglang-0.5.22", true), ("vllm-nixl", false)] {
        let w = collect(&text, profile, &[]);
        assert!((0..34).all(|r| answer(&w, r).0 == 200), "{profile}");
        let last_in = mem_times(&w, Role::Decode, 33, false)[0];
        let first_done = (0..33).map(|r| answer(&w, r).1).min().expect("answered");
        assert_eq!(
            last_in >= first_done - 50_000_000,
            waits,
            "{profile}: request 33's pages at {last_in} ns, first answer at {first_done} ns"
        );
    }
}

/// sglang 0.5.22 commits a landed request at its first poll, running batch full or not, and it
/// waits for a running slot in the scheduler's waiting queue (`disaggregation/decode.py`
/// `pop_transferred` → `process_decode_queue`): its receiver is concluded, so the 300 s waiting
/// timeout (`common/conn.py` `CommonKVReceiver._poll` returns `conclude_state` first) and a lost
/// prefill (`_handle_node_failure` skips Success rooms) no longer touch it, and its metadata slot
/// is freed at the commit, not at its finish. Request 0 decodes for about 750 s on the only
/// running slot (or the only metadata slot); request 1 arrives at 1 s. Before, the model kept
/// request 1 uncommitted in the transfer queue and failed it with 500 at the timeout or at the
/// prefill's crash, and with one metadata slot preallocated it only after request 0 finished.
#[test]
fn s4_2_sglang_commits_a_landed_request_before_a_running_slot_frees() {
    let base = |decode: &str, fault: &str| {
        format!(
            "name = \"landed-waits\"\ncontext_len = 8192\n[[prefill]]\npool_tokens = 8192\n[[decode]]\n\
             pool_tokens = 65536\n{decode}\n[knobs]\npage_size = 16\n[[request]]\nat_ms = 0\ntenant = 1\n\
             prompt_tokens = 100\noutput_tokens = 30000\n[[request]]\nat_ms = 1000\ntenant = 2\n\
             prompt_tokens = 100\noutput_tokens = 4\n{fault}"
        )
    };
    let crash = "[[faults.script]]\nkind = \"crash\"\nat_ms = 5000\nnode = \"prefill-0\"\nrestart_after_ms = 600000\n";
    for (what, text) in [
        ("one running slot", base("max_running_requests = 1", "")),
        ("one running slot, prefill crashes", base("max_running_requests = 1", crash)),
    ] {
        let w = run(&text, "sglang-0.5.22", &[]);
        assert_eq!(answer(&w, 0).0, 200, "{what}");
        assert_eq!(answer(&w, 1).0, 200, "{what}: request 1's KV landed; it waits for the running slot");
        assert!(answer(&w, 1).1 > answer(&w, 0).1, "{what}: request 1 runs after request 0");
        assert!(answer(&w, 1).1 > 300_000_000_000, "{what}: past the waiting timeout");
    }
    let w = run(&base("metadata_slots = 1", ""), "sglang-0.5.22", &[]);
    assert_eq!((answer(&w, 0).0, answer(&w, 1).0), (200, 200));
    assert!(answer(&w, 1).1 < 5_000_000_000, "request 1 takes the slot request 0 freed at its commit");
    assert!(answer(&w, 0).1 > 300_000_000_000);
}

/// sglang 0.5.22 `managers/schedule_policy.py` `PrefillAdder` (vLLM 0.34.0 `allocate_slots`
/// alike): prefill budgets its free pages plus the radix cache's evictable ones, and a chunk that
/// does not fit even so is refused with nothing evicted. Request 0's two prompt blocks stay cached
/// on prefill while request 2 (2,500 tokens) waits for request 1's delayed transfer to give back
/// its pages; then request 2 fits beside them. Before, the model evicted request 0's blocks for
/// request 2's first attempt, which still did not fit.
#[test]
fn s3_prefill_evicts_its_radix_cache_only_for_a_chunk_that_fits() {
    use kvsim::types::Role;
    let text = r#"
name = "prefill-cache-evicts-at-allocation"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 16384
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 1100
output_tokens = 4
prefix_blocks = [7, 8]
[[request]]
at_ms = 1000
tenant = 2
prompt_tokens = 2000
output_tokens = 4
[[request]]
at_ms = 1500
tenant = 3
prompt_tokens = 2500
output_tokens = 4
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 3000
"#;
    let w = collect(text, "sglang-0.5.22", &[]);
    for r in 0..3 {
        assert_eq!(answer(&w, r).0, 200, "request {r}");
    }
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let freed_late: Vec<u64> =
        mem_times(&w, Role::Prefill, 0, true).into_iter().filter(|t| *t > 1_000_000_000).collect();
    // Request 2 first fits when request 1 has gone (its pages released into the cache, newer
    // than request 0's blocks, which go first): evicted then, for that allocation only.
    let two_in = mem_times(&w, Role::Prefill, 2, false)[0];
    assert!(two_in > 4_000_000_000, "request 2 waited for request 1's delayed transfer: {two_in} ns");
    assert!(
        freed_late.iter().all(|t| *t == two_in),
        "request 0's blocks evicted at {freed_late:?}, request 2 in at {two_in}"
    );
}

/// A NIXL read has no timeout (vLLM 0.34.0 `nixl/base_worker.py` `_pop_done_transfers` asks each
/// handle's state only; the scheduler keeps the load waiting until it is received or failed), and
/// vLLM's decode has no waiting timeout: a read delayed 10 s under a 5 s sync timeout is slow, and
/// the request is answered 200. sglang's Mooncake call returns at its sync timeout and the request
/// fails. Before, the model timed vLLM's reads out like sglang's pushes.
#[test]
fn s4_2_vllm_a_slow_read_is_not_timed_out() {
    let text = r#"
name = "nixl-slow-read"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 4096
[knobs]
transfer_sync_timeout_ms = 5000
waiting_timeout_ms = 8000
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 4
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 10000
"#;
    let w = run(text, "vllm-nixl", &[]);
    assert_eq!(answer(&w, 0).0, 200);
    assert!(answer(&w, 0).1 > 10_000_000_000, "answered after the slow read");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let w = run(text, "sglang-0.5.22", &[]);
    assert_eq!(answer(&w, 0).0, 500, "sglang's call returns at its sync timeout");
}

/// A NIXL read is one transfer of every block (vLLM 0.34.0 `nixl/pull_worker.py` `_read_blocks`:
/// one `make_prepped_xfer` per remote rank), so `max_transfer_batch_pages`, the Mooncake sender's
/// batch bound, does not split it. Before, the model read vLLM's KV in sequential batches, each
/// with its own delay spikes, and a 10-minute `vllm-nixl` campaign reported
/// `use_after_free/transfer_read_of_a_source_page` as new: aborted reads of 4- and 64-page batches
/// whose spikes added up past prefill's lease (three shrunk examples, each needing the bound).
#[test]
fn s7_vllm_a_read_is_one_transfer_whatever_the_batch_bound() {
    let text = "name = \"one-read\"\ncontext_len = 8192\n[[prefill]]\npool_tokens = 8192\n[[decode]]\n\
                pool_tokens = 8192\n[knobs]\npage_size = 16\nmax_transfer_batch_pages = 4\n[[request]]\n\
                at_ms = 0\ntenant = 1\nprompt_tokens = 2000\noutput_tokens = 4\n";
    for (profile, batches) in [("vllm-nixl", 1), ("sglang-0.5.22", 2000usize.div_ceil(16).div_ceil(4))] {
        let mut w = World::new(cfg(text, profile, &[]), kvsim::trace::Tracer::new(None));
        let mut most = 0;
        while w.step() {
            if let Some(j) = w.jobs.last_id().and_then(|id| w.jobs.get(id)) {
                most = most.max(j.batches().len());
            }
        }
        w.finish();
        assert_eq!(most, batches, "{profile}");
        assert_eq!(answer(&w, 0).0, 200, "{profile}");
    }
}

/// vLLM 0.34.0: once prefill finished a request and holds its blocks for decode's read, an abort
/// does nothing on prefill (`scheduler.py` `finish_requests` skips a finished request), and
/// decode's abort sends prefill nothing; it only stops the request's heartbeats
/// (`nixl/pull_scheduler.py` `request_finished`). The lease is then no longer pushed on and
/// prefill frees the blocks at its end (`nixl/base_worker.py` `_reap_expired_send_leases`) while
/// decode's read, delayed 45 s, still reads them: `use_after_free/transfer_read_of_a_source_page`.
/// Before, the model held the source until the read drained. Without the abort the heartbeats keep
/// the lease alive, and with a read that ends within the lease the abort frees nothing early.
#[test]
fn s4_2_vllm_an_aborted_requests_lease_ends_under_its_read() {
    let text = r#"
name = "nixl-abort-long-read"
context_len = 4096
[[prefill]]
pool_tokens = 2048
[[decode]]
pool_tokens = 4096
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 4
abort_at_ms = 3000
[[request]]
at_ms = 35000
tenant = 2
prompt_tokens = 2000
output_tokens = 4
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 45000
"#;
    let w = run(text, "vllm-nixl", &[]);
    let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
    assert_eq!(sigs, ["use_after_free/transfer_read_of_a_source_page"], "{:?}", w.oracle.violations);
    assert_eq!(answer(&w, 1).0, 200);
    // Request 1 (prefill's pool holds one prompt) is prefilled once the lease freed request 0's
    // blocks, before request 0's read ends at about 45 s.
    assert!(answer(&w, 1).1 < 45_000_000_000, "request 1 answered at {} ns", answer(&w, 1).1);
    let no_abort = text.replace("abort_at_ms = 3000\n", "");
    assert_ne!(no_abort, text);
    let w = run(&no_abort, "vllm-nixl", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    assert_eq!((answer(&w, 0).0, answer(&w, 1).0), (200, 200));
    let short = text.replace("delay_ms = 45000", "delay_ms = 15000");
    let w = run(&short, "vllm-nixl", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// vLLM 0.34.0 (`decode_loads_hold_slots = off`): a load that fails while the one running slot is
/// taken is failed at once (`update_from_output` finishes it under `kv_load_failure_policy =
/// "fail"`, outside the waiting queue's scan), not when the slot frees.
#[test]
fn s4_2_vllm_a_failed_load_fails_while_the_running_batch_is_full() {
    let text = r#"
name = "vllm-failed-load"
context_len = 8192
[[prefill]]
pool_tokens = 8192
[[decode]]
pool_tokens = 8192
max_running_requests = 1
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 600
output_tokens = 300
[[request]]
at_ms = 1
tenant = 1
prompt_tokens = 600
output_tokens = 4
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 300
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 1000
[[faults.script]]
kind = "transfer_fail"
request = 1
"#;
    let w = run(text, "vllm-nixl", &[]);
    assert_eq!((answer(&w, 0).0, answer(&w, 1).0), (200, 500));
    let (zero, one) = (w.reqs[0].response().expect("answered").at.0, w.reqs[1].response().expect("answered").at.0);
    assert!(one + 1_000_000_000 < zero, "request 1 failed at {one} ns, request 0 answered at {zero} ns");
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
}

/// vLLM: request 0's stalled read outlives its 5 s source lease and reads a freed source page
/// that request 1 (another tenant) holds by then; request 1's own load is lagged 50 ms, so its
/// decode step reads request 0's stale KV in its blocks (`--hardware-faults` campaign, seed
/// 59,688, shrunk). The source read changes nothing in request 1's pages: it is no late write into
/// them, so request 1's stale read is named after its own lag (the rdma-visibility-lag row, known),
/// not `…/late_write` (which made the campaign report it `new`).
#[test]
fn s7_vllm_a_source_read_of_a_held_page_is_no_late_write_into_its_holder() {
    let text = std::fs::read_to_string(crate::sim_data().join("source-read-of-a-held-page.toml")).unwrap();
    let w = collect(&text, "vllm-nixl", &[]);
    let sigs: Vec<String> = kvsim::fuzz::signatures(&w).into_iter().collect();
    assert!(sigs.contains(&"cross_tenant_read/visibility_lag".to_string()), "{sigs:?}");
    assert!(sigs.contains(&"use_after_free/transfer_read_of_a_source_page".to_string()), "{sigs:?}");
    assert!(!sigs.iter().any(|s| s.contains("late_write")), "{sigs:?}");
    // The source read still names request 1's tenant as a victim (request 0 read its KV).
    let uaf = w.oracle.violations.iter().find(|v| v.cause == "transfer_read_of_a_source_page").expect("read");
    assert_eq!(uaf.victim_tenants.iter().map(|t| t.0).collect::<Vec<_>>(), [1]);
}
