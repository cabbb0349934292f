//! The incident expectations, pinned: the leak appears exactly in the rejection band, answered
//! 200, on the vulnerable profile; the fixed profile and the fixed pool show none.

use crate::load;
use kvsim::check::Kind;
use kvsim::simulate;

const BAND: std::ops::Range<u64> = 681_274..1_048_576;

#[test]
fn vulnerable_profile_leaks_only_in_the_band_with_http_200() {
    let w = simulate(load("glm53-incident.toml", None, &[]), None, false);
    let leaks: Vec<_> = w.oracle.violations.iter().filter(|v| v.kind == Kind::CrossTenantRead).collect();
    assert!(leaks.len() >= 10, "expected many cross-tenant reads, got {}", leaks.len());
    for v in &leaks {
        let r = &w.reqs[v.request.unwrap().idx()];
        assert!(
            BAND.contains(&r.prompt_tokens()),
            "request {} ({} tokens) leaked outside the band",
            r.id().0,
            r.prompt_tokens()
        );
        assert_eq!(r.response().unwrap().status, 200, "request {} leaked but was not answered 200", r.id().0);
        assert!(!v.victim_tenants.contains(&r.tenant()), "victims never include the reader");
    }
    // Every request in the band was stubbed by prefill and still answered 200 (wrong_status).
    let in_band: Vec<_> = w.reqs.iter().filter(|r| BAND.contains(&r.prompt_tokens())).collect();
    assert!(!in_band.is_empty());
    for r in &in_band {
        assert_eq!(r.response().unwrap().status, 200);
        assert!(w.oracle.has(Kind::WrongStatus, r.id()), "request {} in the band lacks wrong_status", r.id().0);
    }
    // No request below the band reads anything but its own KV.
    for v in &w.oracle.violations {
        if let Some(r) = v.request {
            assert!(BAND.contains(&w.reqs[r.idx()].prompt_tokens()), "{:?} outside the band", v.kind);
        }
    }
}

#[test]
fn fixed_profile_reads_no_stale_kv_and_mini_lb_answers_the_band_500_after_the_waiting_timeout() {
    // sglang-0.5.22 with mini_lb (the profile's router, lifecycle reference §10): prefill retires the
    // band with 400 at once, the router returns decode's leg, decode holds its reservation until
    // its 300 s waiting timeout: 500 (the router-waits-for-decode row), never a stale read.
    let w = simulate(load("glm53-incident.toml", Some("sglang-0.5.22"), &[]), None, false);
    let mut n = 0;
    for r in w.reqs.iter().filter(|r| BAND.contains(&r.prompt_tokens())) {
        let resp = r.response().unwrap();
        assert_eq!(resp.status, 500, "request {} in the band", r.id().0);
        assert!(resp.at.since(r.arrival()).0 >= 300_000_000_000, "request {} answered before the timeout", r.id().0);
        n += 1;
    }
    assert!(n > 0);
    for v in &w.oracle.violations {
        assert_eq!((v.kind, v.cause.as_str()), (Kind::WrongStatus, "rejected_answered_5xx"), "{v:?}");
        assert!(BAND.contains(&w.reqs[v.request.unwrap().idx()].prompt_tokens()));
    }
    // Outside the band: 200, or a capacity timeout (decode's reservations held for 300 s fill it).
    for r in w.reqs.iter().filter(|r| !BAND.contains(&r.prompt_tokens())) {
        let status = r.response().unwrap().status;
        assert!(status == 200 || (status == 500 && r.timed_out()), "request {} got {status}", r.id().0);
    }
}

#[test]
fn fixed_profile_with_a_cancelling_router_rejects_the_band_cleanly() {
    // sglang's Rust gateway (PR #29017) cancels the decode leg: 400 promptly, nothing flagged.
    let set = [("router_on_prefill_error", "cancel_decode")];
    let w = simulate(load("glm53-incident.toml", Some("sglang-0.5.22"), &set), None, false);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    let mut n = 0;
    for r in w.reqs.iter().filter(|r| BAND.contains(&r.prompt_tokens())) {
        assert_eq!(r.response().unwrap().status, 400, "request {} in the band", r.id().0);
        n += 1;
    }
    assert!(n > 0);
    assert!(w.reqs.iter().filter(|r| !BAND.contains(&r.prompt_tokens())).all(|r| r.response().unwrap().status == 200));
}

#[test]
fn fixed_pool_is_clean_even_on_the_vulnerable_profile() {
    let w = simulate(load("glm53-fixed-config.toml", None, &[]), None, false);
    assert!(w.oracle.violations.is_empty(), "{:?}", w.oracle.violations.first());
    assert!(w.reqs.iter().all(|r| r.response().unwrap().status == 200));
}

#[test]
fn each_mitigation_stops_the_small_leak_with_a_500() {
    for (knob, value, name) in [
        ("kv_checksum", "on", "kv_checksum"),
        ("kv_canary", "raise", "kv_canary"),
        ("page_tags", "on", "page_tags"),
        ("decode_commit_check", "coverage", "coverage_check"),
    ] {
        let w = simulate(load("small/stub-leak.toml", None, &[(knob, value)]), None, true);
        assert!(
            !w.oracle.violations.iter().any(|v| v.kind == Kind::CrossTenantRead),
            "{knob}={value} did not prevent the read"
        );
        let r = &w.reqs[2];
        assert_eq!(r.response().unwrap().status, 500, "{knob}");
        assert_eq!(r.caught_by().map(|m| m.name()), Some(name));
    }
    let w = simulate(load("small/stub-leak.toml", None, &[]), None, true);
    assert!(w.oracle.has(Kind::CrossTenantRead, kvsim::types::RequestId(2)));
}

#[test]
fn router_cancel_returns_the_prefill_error_promptly() {
    let set = [("pd_admission_check", "aborted_too"), ("router_on_prefill_error", "cancel_decode")];
    let w = simulate(load("small/stub-leak.toml", None, &set), None, true);
    let r = &w.reqs[2];
    assert_eq!(r.response().unwrap().status, 400);
    assert!(r.response().unwrap().at.0 < 2_100_000_000, "answered at {}", r.response().unwrap().at);
    // Returning the decode leg instead: decode holds its reservation until the 300 s timeout.
    let set = [("pd_admission_check", "aborted_too")];
    let w = simulate(load("small/stub-leak.toml", None, &set), None, true);
    let r = &w.reqs[2];
    assert_eq!(r.response().unwrap().status, 500);
    assert!(r.response().unwrap().at.0 >= 300_000_000_000);
}
