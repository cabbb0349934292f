//! The knobs issue 13 added for catalogue rows (double-release, orphan-in-prefill-waiting,
//! cancel-mid-transfer): each buggy value shows its mechanism (what is freed twice, what is held,
//! by whom), the profiles' value does not. The catalogue scenarios under `scenarios/catalogue/` are
//! the same setups with `[[expect]]` entries. vLLM's short-prefill assertion is a conformance test
//! (`conformance::s7_…`).

use kvsim::check::Kind;
use kvsim::config::{CancelMidTransfer, FailedCheck, OnOff, RejectedRelease, ZeroPageLastChunk, PROFILES};
use kvsim::scenario::{Overrides, Scenario};
use kvsim::simulate;
use kvsim::world::World;

fn run(text: &str, profile: &str, set: &[(&str, &str)]) -> World {
    let o = Overrides {
        profile: Some(profile.to_string()),
        seed: None,
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let cfg = Scenario::parse("knobs.toml", text).and_then(|s| s.resolve(&o)).unwrap_or_else(|e| panic!("{e}"));
    // Every component's invariants after every event: a double free must not corrupt the pool.
    simulate(cfg, None, true)
}

/// As `run`, and every transfer job of request `r` as last seen (`crate::run_with_jobs_of`).
fn run_with_jobs_of(
    text: &str,
    profile: &str,
    set: &[(&str, &str)],
    r: kvsim::types::RequestId,
) -> (World, Vec<kvsim::transfer::TransferJob>) {
    let o = Overrides {
        profile: Some(profile.to_string()),
        seed: None,
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let cfg = Scenario::parse("knobs.toml", text).and_then(|s| s.resolve(&o)).unwrap_or_else(|e| panic!("{e}"));
    crate::run_with_jobs_of(cfg, r)
}

/// The pages of `pool` a radix cache holds (evictable: no request holds them).
fn cached_pages(pool: &kvsim::pool::Pool) -> u64 {
    (0..pool.usable_pages() as u32)
        .filter(|p| matches!(pool.holder_of(*p), Some(kvsim::pool::Holder::Cache(_))))
        .count() as u64
}

fn of_kind(w: &World, k: Kind) -> Vec<&kvsim::check::Violation> {
    w.oracle.violations.iter().filter(|v| v.kind == k).collect()
}

/// Request 0's (2,000 tokens, 125 pages of 16) transfer is delayed 5 s; its client cancels at 1 s,
/// while the last chunk is being written.
const CANCEL_DURING_TRANSFER: &str = r#"
name = "cancel-during-transfer"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 2000
output_tokens = 4
abort_at_ms = 1000
[[faults.script]]
kind = "delay"
request = 0
delay_ms = 5000
"#;

#[test]
fn every_profile_keeps_todays_behaviour_for_the_new_knobs() {
    for p in PROFILES {
        let k = (p.knobs)();
        assert_eq!(k.prefill_rejected_release, RejectedRelease::Once, "{}", p.name);
        assert_eq!(k.prefill_failed_check, FailedCheck::EveryQueue, "{}", p.name);
        assert_eq!(k.cancel_mid_transfer, CancelMidTransfer::Free, "{}", p.name);
        assert_eq!(k.decode_lookahead_tokens, 0, "{}", p.name);
        // vLLM caches prefixes on decode (forty-second session); sglang's decode cache is opt-in.
        let decode_cache = if p.name == "vllm-nixl" { OnOff::On } else { OnOff::Off };
        assert_eq!(k.decode_radix_cache, decode_cache, "{}", p.name);
        assert_eq!(k.zero_page_last_chunk, ZeroPageLastChunk::Send, "{}", p.name);
    }
}

/// The zero-page-last-chunk row's scenario: request 1 repeats request 0's 1,024-token prompt after
/// request 0 finished, with decode's radix cache on.
fn zero_page() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/catalogue/zero-page-last-chunk.toml");
    std::fs::read_to_string(p).expect("catalogue scenario")
}

/// Decode's radix cache holds request 0's whole prompt, so decode reports it all
/// (`decode_prefix_len` = 1,024) and reserves pages only past it; prefill's own cache hit stops a
/// token short (one 512-token block reused, the other computed again), and it sends from decode's
/// prefix: its last chunk has no pages. `skip` never sends it (no transfer job, no metadata row, no
/// status): request 1 stays in prefill's inflight queue with its pages and slot, and decode gives
/// up at its waiting timer. `send` sends a job with an empty batch that carries the metadata row,
/// and request 1 is answered 200 reading request 0's cached KV (same prefix chain: no violation).
#[test]
fn a_zero_page_last_chunk_is_never_sent_by_a_sender_that_skips_empty_chunks() {
    let text = zero_page();
    let r1 = kvsim::types::RequestId(1);
    let (w, jobs) = run_with_jobs_of(&text, "sglang-0.5.16", &[("zero_page_last_chunk", "skip")], r1);
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 1024);
    assert_eq!(w.reqs[1].prefix_reused(), 512, "prefill's own match stops at len - 1");
    assert!(jobs.is_empty(), "no chunk of request 1 was ever sent");
    assert_eq!(w.prefill[0].inflight(), [r1]);
    assert_eq!(w.reqs[1].prefill_leg(), None);
    assert_eq!(w.reqs[1].response().map(|r| r.status), Some(500));
    assert!(w.reqs[1].timed_out(), "decode's waiting timer ended it");
    let leaks = of_kind(&w, Kind::PageLeak);
    assert_eq!(leaks.len(), 1, "{:?}", w.oracle.violations);
    assert_eq!(leaks[0].slots, 1);

    let (fixed, jobs) = run_with_jobs_of(&text, "sglang-0.5.16", &[], r1);
    assert!(fixed.oracle.violations.is_empty(), "{:?}", fixed.oracle.violations);
    assert_eq!(fixed.reqs[1].response().map(|r| r.status), Some(200));
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].is_last() && jobs[0].sender_pages() == 0, "one empty last chunk: {:?}", jobs[0]);
    assert!(fixed.prefill[0].inflight().is_empty() && fixed.prefill[0].meta().in_use() == 0);
    // Request 0's prompt blocks stay cached on decode (evictable: not a leak).
    assert_eq!(fixed.decode[0].prefix().cached_pages(), 64);

    // Without decode's radix cache the whole prompt is sent.
    let (off, off_jobs) = run_with_jobs_of(
        &text,
        "sglang-0.5.16",
        &[("zero_page_last_chunk", "skip"), ("decode_radix_cache", "off")],
        r1,
    );
    assert!(off.oracle.violations.is_empty(), "{:?}", off.oracle.violations);
    assert_eq!(off.reqs[1].decode_prefix_tokens(), 0);
    let sent: u64 = off_jobs.iter().map(|j| j.sender_pages()).max().unwrap_or(0);
    assert_eq!(sent, 64);
}

#[test]
fn double_release_frees_the_source_pages_again_when_the_transfer_ends() {
    let w = run(CANCEL_DURING_TRANSFER, "sglang-0.5.16", &[("prefill_rejected_release", "twice")]);
    let d = of_kind(&w, Kind::DoubleFree);
    assert_eq!(d.len(), 1, "{:?}", w.oracle.violations);
    let v = d[0];
    assert_eq!(v.request.map(|r| r.0), Some(0));
    assert_eq!(v.pool.map(|p| p.to_string()), Some("prefill-0".to_string()));
    assert_eq!(v.pages, 125, "the whole last chunk's source pages, freed at the cancel, are freed again");
    // At the transfer's end (the 5 s delay), not at the cancel (1 s).
    assert!(v.at.0 > 5_000_000_000, "{}", v.at);
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(499));
    // Released once: no double free (the immediate release's use after free stays: another row).
    let once = run(CANCEL_DURING_TRANSFER, "sglang-0.5.16", &[]);
    assert!(of_kind(&once, Kind::DoubleFree).is_empty(), "{:?}", once.oracle.violations);
    // Held until drained (sglang PR #38961), the second release cannot happen: the request is
    // still held when its transfer ends and is released once, then.
    let held = run(
        CANCEL_DURING_TRANSFER,
        "sglang-0.5.22",
        &[("prefill_rejected_release", "twice"), ("prefill_abort_release", "hold_source_until_drained")],
    );
    assert!(of_kind(&held, Kind::DoubleFree).is_empty(), "{:?}", held.oracle.violations);
}

#[test]
fn cancel_mid_transfer_tears_the_transfer_down_and_never_frees_the_source_blocks() {
    let w = run(CANCEL_DURING_TRANSFER, "sglang-0.5.22", &[("cancel_mid_transfer", "leak")]);
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(499));
    let leaks = of_kind(&w, Kind::PageLeak);
    assert_eq!(leaks.len(), 1, "{:?}", w.oracle.violations);
    assert_eq!(leaks[0].pool.map(|p| p.to_string()), Some("prefill-0".to_string()));
    assert_eq!(leaks[0].pages, 125);
    assert_eq!(w.prefill[0].pool().held_pages(), 125);
    // Decode was told Failed when the torn-down transfer ended, and released its reservation.
    assert_eq!(w.decode[0].pool().held_pages(), 0);
    // Through the engine's cleanup the blocks are released (with the source held until the
    // worker drains, PR #38961): into the radix cache, evictable, since the forward had computed
    // the prompt (no request holds them); with the chunk cache, to the free list.
    for (cache, cached) in [("radix", 125), ("chunk", 0)] {
        let fixed = run(
            CANCEL_DURING_TRANSFER,
            "sglang-0.5.22",
            &[("prefill_abort_release", "hold_source_until_drained"), ("prefill_cache", cache)],
        );
        assert!(fixed.oracle.violations.is_empty(), "{cache}: {:?}", fixed.oracle.violations);
        let pool = fixed.prefill[0].pool();
        assert_eq!(pool.held_pages(), cached, "{cache}");
        assert_eq!(cached_pages(pool), cached, "{cache}: the held pages are the cache's");
    }
    // A cancel before any transfer started goes through the engine's cleanup either way.
    let early = CANCEL_DURING_TRANSFER.replace("abort_at_ms = 1000", "abort_at_ms = 1");
    let w = run(&early, "sglang-0.5.22", &[("cancel_mid_transfer", "leak")]);
    assert!(of_kind(&w, Kind::PageLeak).is_empty(), "{:?}", w.oracle.violations);
}

/// Prefill computes request 0 (8,000 tokens, ~246 ms) while request 1, bootstrapped, waits in its
/// queue; decode's 100 ms waiting timer fails both. Also conformance §3.3's scenario.
pub(crate) const ORPHAN: &str = r#"
name = "orphan"
context_len = 16384
[[prefill]]
pool_tokens = 16384
[[decode]]
pool_tokens = 16384
[knobs]
page_size = 16
waiting_timeout_ms = 100
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 8000
output_tokens = 4
[[request]]
at_ms = 1
tenant = 2
prompt_tokens = 500
output_tokens = 4
"#;

#[test]
fn a_failed_room_left_in_the_waiting_queue_keeps_its_metadata_slot_unless_every_queue_is_polled() {
    let w = run(ORPHAN, "sglang-0.5.22", &[("prefill_failed_check", "bootstrap_and_inflight")]);
    // Both got decode's 500; request 0 (in the forward) was retired at its Failed poll, request 1's
    // prefill leg never answers.
    assert_eq!(w.reqs[1].prefill_leg(), None);
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(500));
    assert_eq!(w.reqs[1].response().map(|r| r.status), Some(500));
    assert_eq!(w.prefill[0].meta().in_use(), 1, "request 1's slot is held");
    assert_eq!(w.prefill[0].reqs().keys().map(|r| r.0).collect::<Vec<_>>(), [1]);
    let leaks = of_kind(&w, Kind::PageLeak);
    assert_eq!(leaks.len(), 1, "{:?}", w.oracle.violations);
    assert_eq!(leaks[0].slots, 1);
    // Prefill never acknowledged request 1's abort: decode released its pages only at the 30 s
    // fallback, so nothing is held on decode at the end.
    assert_eq!(w.decode[0].pool().held_pages(), 0);
    let fixed = run(ORPHAN, "sglang-0.5.22", &[]);
    assert!(fixed.oracle.violations.is_empty(), "{:?}", fixed.oracle.violations);
    assert_eq!(fixed.prefill[0].meta().in_use(), 0);
    assert!(fixed.prefill[0].reqs().is_empty());
}

/// decode-free-before-late-write through the fix's own timeout (`known-bugs/sglang-0.5.22.toml`):
/// sglang 0.5.22 defers an aborted request's release until prefill acknowledges the drain, but
/// `disaggregation/decode.py` `resolve_deferred_releases` releases device pages anyway after
/// `SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT` (30 s, `srt/environ.py`). A transfer
/// slower than that lands in freed pages. A quiesced call would stop it at the 60 s sync timeout,
/// but 0.5.22's call returns on the timeout with the batch still writing (`mooncake/conn.py`
/// `_poison_unsettled_send`), so every transfer slower than 30 s lands under the fallback, and
/// past 60 s it is the sync-timeout-still-writing chain (`…/sync_timeout`). The case is a guided
/// campaign's shrunk find (seed 60,171,634, its 45 s delay a nudge of the table's 90 s); under a
/// quiesced call (`--set transfer_timeout_semantics=quiesced`) the window is 30 to 60 s, so the
/// swarm's scripted delays (10 s, 90 s) fall on either side of it.
#[test]
fn the_deferred_release_fallback_frees_under_a_transfer_slower_than_30_seconds() {
    let case = |delay_ms: u64| {
        format!(
            r#"
name = "fallback-window"
context_len = 4096
[[prefill]]
pool_tokens = 8
metadata_slots = 2
[[decode]]
pool_tokens = 513
metadata_slots = 2
[knobs]
chunked_prefill_size = 4096
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 1
output_tokens = 1
abort_at_ms = 150
[[faults.script]]
kind = "delay"
request = 0
delay_ms = {delay_ms}
"#
        )
    };
    for (delay_ms, freed_under) in [
        (10_000, false),
        (29_000, false),
        (31_000, true),
        (45_000, true),
        (59_000, true),
        (61_000, true),
        (90_000, true),
    ] {
        let w = run(&case(delay_ms), "sglang-0.5.22", &[]);
        let causes: Vec<&str> = of_kind(&w, Kind::UseAfterFree).iter().map(|v| v.cause.as_str()).collect();
        assert_eq!(causes.contains(&"transfer_write"), freed_under, "delay {delay_ms} ms: {:?}", w.oracle.violations);
        // Prefill released the source at the abort, but into its radix cache (the forward had
        // computed the prompt: `handle_inflight_transfer_failure` checkpoints it), where nothing
        // evicts it here: the chunk in flight reads the request's own KV. Nothing else.
        assert!(!causes.contains(&"transfer_read_of_a_source_page"), "delay {delay_ms} ms: {causes:?}");
        assert_eq!(w.oracle.violations.len(), causes.len(), "nothing else: {:?}", w.oracle.violations);
        // Past the 60 s sync timeout the call had returned: the chain names it.
        let sigs = kvsim::fuzz::signatures(&w);
        let timed_out = sigs.contains("use_after_free/transfer_write/sync_timeout");
        assert_eq!(timed_out, delay_ms > 60_000, "delay {delay_ms} ms: {sigs:?}");
        assert_eq!(sigs.contains("use_after_free/transfer_write"), freed_under && delay_ms < 60_000, "{sigs:?}");
        // Quiesced at the timeout (what the profile carried before it was checked against the
        // wheel): the window closes at 60 s and a timed-out chunk reads nothing.
        let q = run(&case(delay_ms), "sglang-0.5.22", &[("transfer_timeout_semantics", "quiesced")]);
        let qc: Vec<&str> = of_kind(&q, Kind::UseAfterFree).iter().map(|v| v.cause.as_str()).collect();
        assert_eq!(qc.contains(&"transfer_write"), freed_under && delay_ms < 60_000, "quiesced, delay {delay_ms} ms");
        assert!(!qc.contains(&"transfer_read_of_a_source_page"), "quiesced, delay {delay_ms} ms");
        // The fix's knob: without the fallback (vLLM's rule, which holds until the read stops) the
        // pages are never freed under the write.
        let held = run(&case(delay_ms), "sglang-0.5.22", &[("deferred_release_timeout_ms", "600000")]);
        let late = of_kind(&held, Kind::UseAfterFree).iter().filter(|v| v.cause == "transfer_write").count();
        assert_eq!(late, 0, "delay {delay_ms} ms, no fallback");
    }
}

/// vLLM behind its sequential proxy: `CANCEL_DURING_TRANSFER` with request 0's NIXL read stalled
/// `delay_ms` (the lease-expires-mid-read row, whose catalogue scenario adds a second tenant).
fn abort_during_stalled_read(delay_ms: u64) -> String {
    CANCEL_DURING_TRANSFER.replace("delay_ms = 5000", &format!("delay_ms = {delay_ms}"))
}

#[test]
fn decode_abort_heartbeat_stop_lets_the_lease_free_a_source_still_being_read() {
    // vLLM 0.34.0 stops heartbeating at the abort: prefill frees the source at the 30 s lease and
    // the read, still running, reads all 125 freed pages.
    assert_eq!(
        (kvsim::config::profile("vllm-nixl").expect("profile").knobs)().decode_abort_heartbeat,
        kvsim::config::AbortHeartbeat::Stop
    );
    let stalled = abort_during_stalled_read(60_000);
    let w = run(&stalled, "vllm-nixl", &[]);
    assert_eq!(w.reqs[0].response().map(|r| r.status), Some(499));
    let uaf = of_kind(&w, Kind::UseAfterFree);
    assert_eq!(uaf.len(), 1, "{:?}", w.oracle.violations);
    assert_eq!(uaf[0].pool.map(|p| p.to_string()), Some("prefill-0".to_string()));
    assert_eq!(uaf[0].pages, 125);
    // Heartbeating until the read ends keeps the lease: nothing read after its free. The read's
    // notice then frees the source into prefill's prefix cache (evictable: no request holds it),
    // and decode frees the aborted load's blocks.
    let fixed = run(&stalled, "vllm-nixl", &[("decode_abort_heartbeat", "until_read_ends")]);
    assert!(fixed.oracle.violations.is_empty(), "{:?}", fixed.oracle.violations);
    let pool = fixed.prefill[0].pool();
    assert_eq!((pool.held_pages(), cached_pages(pool)), (125, 125));
    assert_eq!(fixed.decode[0].pool().held_pages(), 0);
    // A read stalled less than the lease ends before it runs out: clean either way.
    let w = run(&abort_during_stalled_read(20_000), "vllm-nixl", &[]);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations);
}

/// leak-abort-retracted with the abort that forgets the host backup: the leak is told as host
/// memory (the trace shows the retracted request's device pages freed), counted apart from
/// device pages, and no metadata slot is held (sglang frees it when the KV lands); the released
/// abort (`discard`) leaks nothing.
#[test]
fn a_leaked_host_backup_is_told_as_host_memory_not_device_pages() {
    let text = std::fs::read_to_string(format!(
        "{}/../scenarios/catalogue/leak-abort-retracted.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let w = run(&text, "sglang-0.5.22", &[("retracted_abort", "leak")]);
    let leaks = of_kind(&w, Kind::PageLeak);
    assert_eq!(leaks.len(), 1, "{:?}", w.oracle.violations);
    let v = leaks[0];
    assert!(v.host_pages > 0 && v.pages == v.host_pages && v.slots == 0, "{v:?}");
    assert!(
        v.detail.starts_with(&format!("decode-0: 0 page(s), {} page(s) of host memory", v.host_pages)),
        "{}",
        v.detail
    );
    // The leak names its holder for JSON and the per-request table (`request` stays null: a leak
    // is its pool's): request 2, the retracted request whose abort kept the backup.
    assert!(v.request.is_none() && v.detail.ends_with("by request(s) [2]"), "{v:?}");
    assert_eq!(v.holders, vec![kvsim::types::RequestId(2)]);
    let records = kvsim::latency::records(&w);
    assert!(records[2].violations.contains(&"page_leak".to_string()), "{:?}", records[2]);
    assert!(records.iter().filter(|r| r.violations.iter().any(|k| k == "page_leak")).count() == 1);
    let fixed = run(&text, "sglang-0.5.22", &[("retracted_abort", "discard")]);
    assert!(of_kind(&fixed, Kind::PageLeak).is_empty(), "{:?}", fixed.oracle.violations);
}
