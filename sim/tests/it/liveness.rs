//! Liveness mode (issue 15, `check::liveness`): after the faults heal, every request must end
//! within a bound, else the run stops with a hang naming what the request waits for; a
//! quiescent run stops early, without hiding anything the ordinary run finds.

use crate::{load, FUZZ_COST};
use kvsim::config::SimConfig;
use kvsim::fuzz::{draw, signatures, Space};
use kvsim::report::{exit, Report};

/// Runs a scenario given as text (named `file` in errors), as `kvsim run` does.
fn simulate_text(file: &str, text: &str) -> kvsim::world::World {
    let cfg = kvsim::scenario::Scenario::parse(file, text)
        .and_then(|s| s.resolve(&kvsim::scenario::Overrides::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    kvsim::simulate(cfg, None, true)
}

fn with_bound(mut cfg: SimConfig, ms: u64) -> SimConfig {
    cfg.faults.liveness_after_heal_ms = Some(ms);
    cfg
}

/// The over-long request of router-waits-for-decode is answered only by decode's 300 s waiting
/// timeout: with a 60 s bound it is a liveness failure at 60 s, naming its wait (decode holds its
/// reservation and waits for KV that prefill, having rejected it, never sends).
#[test]
fn a_request_open_past_its_deadline_fails_naming_what_it_waits_for() {
    let cfg = load("catalogue/router-waits-for-decode.toml", None, &[]);
    let ordinary = kvsim::simulate(cfg.clone(), None, true);
    assert!(ordinary.reqs.iter().all(|r| r.response().is_some()), "the ordinary run answers it (at 300 s)");
    assert!(!signatures(&ordinary).iter().any(|s| s.starts_with("request_hang/")));

    let w = kvsim::simulate(with_bound(cfg.clone(), 60_000), None, true);
    let sigs = signatures(&w);
    // The hang names what it waits for and why that does not come: prefill already failed it.
    assert_eq!(
        sigs.iter().filter(|s| s.starts_with("request_hang/")).collect::<Vec<_>>(),
        ["request_hang/after_heal/kv_arrival/prefill_failed"]
    );
    let v = w.oracle.violations.iter().find(|v| v.cause == "after_heal/kv_arrival/prefill_failed").unwrap();
    assert!(v.at.0 >= 60_000_000_000 && v.at.0 < 61_000_000_000, "judged at its deadline: {}", v.at);
    assert!(v.detail.contains("waits for kv_arrival") && v.detail.contains("decode leg pending"), "{}", v.detail);
    assert!(v.detail.contains("its prefill leg already failed (400)"), "{}", v.detail);
    assert!(w.now().0 < 300_000_000_000, "the run stopped at the missed deadline, not at the 300 s timer: {}", w.now());
    assert_eq!(Report::build(&w, String::new()).exit_code, exit::LIVENESS);
    // A bound past the timer: answered in time, nothing judged a hang.
    let w = kvsim::simulate(with_bound(cfg, 400_000), None, true);
    assert!(!signatures(&w).iter().any(|s| s.starts_with("request_hang/")), "{:?}", signatures(&w));
}

/// A healthy run passes and stops once quiescent (every request answered, nothing held, nothing
/// in flight) instead of running its remaining timers to the horizon. Since issue 14 an ordinary
/// run stops there too (timers whose request moved on are dropped, `World::moot`), so liveness
/// mode is no longer shorter, only never longer.
#[test]
fn a_healthy_run_passes_and_stops_once_quiescent() {
    let cfg =
        load("catalogue/stub-admission.toml", Some("sglang-0.5.22"), &[("router_on_prefill_error", "cancel_decode")]);
    let ordinary = kvsim::simulate(cfg.clone(), None, true);
    assert!(signatures(&ordinary).is_empty(), "{:?}", signatures(&ordinary));
    let w = kvsim::simulate(with_bound(cfg, 60_000), None, true);
    assert!(signatures(&w).is_empty(), "{:?}", signatures(&w));
    let l = w.liveness.as_ref().unwrap();
    assert!(!l.failed && l.quiescent_at.is_some(), "{l:?}");
    assert!(
        w.events() <= ordinary.events() && w.now() <= ordinary.now(),
        "{} <= {} events",
        w.events(),
        ordinary.events()
    );
    assert!(
        ordinary.now().0 < 300_000_000_000,
        "the ordinary run ends with its last answer, not its 300 s timers: {}",
        ordinary.now()
    );
    assert_eq!(Report::build(&w, String::new()).exit_code, exit::CLEAN);
}

/// Stopping at quiescence hides nothing: over drawn runs, with a bound as long as the ordinary
/// horizon, liveness mode finds exactly the ordinary run's safety signatures, and a request is
/// overdue only where the ordinary run reports it hung or answered it after the bound.
#[test]
fn quiescence_never_hides_a_violation_over_drawn_runs() {
    let mut quiescent = 0;
    for seed in 0..300u64 {
        let space = if seed % 2 == 0 { Space::Blind } else { Space::Profile("sglang-0.5.22".into()) };
        let cfg = draw(seed, &space);
        let bound_ms = cfg.liveness_bound_s * 1000;
        let ordinary = kvsim::simulate(cfg.clone(), None, false);
        let live = kvsim::simulate(with_bound(cfg.clone(), bound_ms), None, false);
        let safety = |w: &kvsim::world::World| -> Vec<String> {
            signatures(w).into_iter().filter(|s| kvsim::fuzz::is_safety(s)).collect()
        };
        let (a, b) = (safety(&ordinary), safety(&live));
        let l = live.liveness.as_ref().unwrap();
        if !l.failed {
            assert_eq!(a, b, "seed {seed}: safety signatures differ");
        } else {
            // Stopped on a missed deadline: what it found until then, the ordinary run found too.
            assert!(b.iter().all(|s| a.contains(s)), "seed {seed}: {b:?} not in {a:?}");
            let late =
                ordinary.reqs.iter().enumerate().any(|(i, r)| {
                    r.response().is_none_or(|resp| resp.at > l.deadline(kvsim::types::RequestId(i as u32)))
                });
            assert!(late, "seed {seed}: a liveness failure where the ordinary run answered every request in time");
        }
        if l.quiescent_at.is_some() {
            // Ordinary runs end with their last effective event (issue 14), so a quiescent stop
            // is never later than the ordinary end.
            assert!(
                live.now() <= ordinary.now(),
                "seed {seed}: quiescent at {} after the ordinary end {}",
                live.now(),
                ordinary.now()
            );
            quiescent += 1;
        }
    }
    assert!(quiescent > 100, "quiescence ends most drawn runs: {quiescent} of 300");
}

/// A decode leg's 500 already travelling to the router when the horizon passes is not a hang.
/// Campaign seed 189,770 on `sglang-0.5.22` (shrunk): prefill's one-page pool rejects every
/// request, decode's two metadata slots let one rejected request wait out the 300 s waiting timer
/// at a time, so request 3's timer fires just inside the horizon (1,200.0014 s) and its 500 lands
/// just after it. Judged there, the run reported `request_hang/router_never_answered` and, for the
/// pages decode holds until prefill acknowledges the abort, `page_leak/decode`: both false.
#[test]
fn a_leg_result_in_flight_at_the_horizon_is_not_a_hang() {
    let text = &[
        r#"
name = "leg-result-at-the-horizon"
seed = 189770
profile = "sglang-0.5.22"
context_len = 2048
liveness_bound_s = 1200
[[prefill]]
pool_tokens = 16
metadata_slots = 2
[[decode]]
pool_tokens = 1024
metadata_slots = 2
[router]
policy = "least_loaded"
[[request]]
tenant = 0
at_ns = 0
prompt_tokens = 10
output_tokens = 1
[[request]]
tenant = 0
at_ns = 172691
prompt_tokens = 497
output_tokens = 1
[[request]]
tenant = 0
at_ns = 612471
prompt_tokens = 1
output_tokens = 1
[[request]]
tenant = 0
at_ns = 1583891
prompt_tokens = 497
output_tokens = 1
[knobs]
chunked_prefill_size = 1024
page_size = 16
"#,
        FUZZ_COST,
    ]
    .concat();
    let w = simulate_text("leg-result-at-the-horizon.toml", text);
    let sigs = signatures(&w);
    assert!(!sigs.iter().any(|s| s.starts_with("request_hang/") || s.starts_with("page_leak/")), "{sigs:?}");
    // Every request is answered: 500 after decode's waiting timer (the stub-admission row's
    // documented outcome on this build), the last one past the first horizon.
    assert!(
        w.reqs.iter().all(|r| r.response().as_ref().is_some_and(|a| a.status == 500)),
        "{:?}",
        w.reqs.iter().map(|r| r.response().as_ref().map(|a| a.status)).collect::<Vec<_>>()
    );
    assert!(w.reqs[3].response().as_ref().unwrap().at.0 > 1_200_001_583_891, "answered after the first horizon");
}

/// An answered request's abort cleanup still travelling when the horizon passes is not a leak.
/// Campaign seed 309,065 on `sglang-0.5.22` (shrunk): prefill's 64-token pool rejects every
/// request, decode's waiting timers answer them 300 s apart, and request 3's 500 reaches the client
/// at 1,200.0016 s, 4 µs inside the horizon; the 77 pages decode holds until prefill acknowledges the
/// abort were judged there as `page_leak/decode`.
#[test]
fn an_abort_ack_in_flight_at_the_horizon_is_not_a_leak() {
    let text = &[
        r#"
name = "abort-ack-at-the-horizon"
seed = 309065
profile = "sglang-0.5.22"
context_len = 32768
liveness_bound_s = 1200
[[prefill]]
pool_tokens = 64
metadata_slots = 64
max_running_requests = 64
[[decode]]
pool_tokens = 19520
metadata_slots = 64
max_running_requests = 64
[router]
policy = "random"
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 58
output_tokens = 1
[[request]]
at_ns = 97137
tenant = 0
prompt_tokens = 18945
output_tokens = 1
[[request]]
at_ns = 1119486
tenant = 0
prompt_tokens = 14081
output_tokens = 1
[[request]]
at_ns = 1604027
tenant = 0
prompt_tokens = 4865
output_tokens = 1
[knobs]
chunked_prefill_size = 1024
page_size = 64
"#,
        FUZZ_COST,
    ]
    .concat();
    let w = simulate_text("abort-ack-at-the-horizon.toml", text);
    let sigs = signatures(&w);
    assert!(!sigs.iter().any(|s| s.starts_with("request_hang/") || s.starts_with("page_leak/")), "{sigs:?}");
    // Request 3 is answered 4 µs inside the horizon (1,200.001604027 s); its pages are freed when
    // the ack lands after it.
    assert_eq!(w.reqs[3].response().as_ref().map(|a| (a.status, a.at.0)), Some((500, 1_200_001_600_000)));
    assert!(w.decode.iter().all(|d| d.leaks().is_none()), "decode holds nothing at the end");
}

/// Decode's deferred-release fallback still armed at the horizon is not a leak. Guided campaign
/// seed 700,132,987 on `sglang-0.5.22` (shrunk): request 2's transfer, queued behind two delayed
/// ones, starts at 30 s, is delayed 60 s and fails at its 60 s sync timeout at 90 s while still
/// writing; the failed send poisons prefill's drain ack, so decode keeps the request's pages until
/// its 30 s fallback, due 4 ms after the 120 s horizon. Judged there they were `page_leak/decode`.
#[test]
fn a_deferred_release_fallback_armed_at_the_horizon_is_not_a_leak() {
    let text = &[
        r#"
name = "fallback-at-the-horizon"
seed = 13157553958243586140
profile = "sglang-0.5.22"
context_len = 2048
liveness_bound_s = 120
[[prefill]]
pool_tokens = 954
metadata_slots = 8
[[decode]]
pool_tokens = 1459
metadata_slots = 8
[router]
policy = "least_loaded"
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 906
output_tokens = 1
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 947
output_tokens = 1
[[request]]
at_ns = 1876622
tenant = 0
prompt_tokens = 361
output_tokens = 1
[knobs]
chunked_prefill_size = 4096
max_transfer_batch_pages = 64
[[faults.script]]
kind = "delay"
request = 2
delay_ms = 60000
[[faults.script]]
kind = "delay"
request = 0
batch = 4
delay_ms = 9917
[[faults.script]]
kind = "delay"
request = 1
delay_ms = 20000
"#,
        FUZZ_COST,
    ]
    .concat();
    let w = simulate_text("fallback-at-the-horizon.toml", text);
    let sigs = signatures(&w);
    assert!(!sigs.iter().any(|s| s.starts_with("request_hang/") || s.starts_with("page_leak/")), "{sigs:?}");
    // The failed send's source went into prefill's radix cache (its forward had computed it), so
    // the batch still reads the request's own KV; the fallback freed decode's pages 30 s after
    // the failure, past the first horizon.
    assert!(!sigs.iter().any(|s| s.starts_with("use_after_free/transfer_read_of_a_source_page")), "{sigs:?}");
    assert_eq!(w.reqs[2].response().as_ref().map(|a| a.status), Some(500));
    assert!(w.ended_at().0 > 120_000_000_000, "ended at {:?}", w.ended_at());
    assert!(w.decode.iter().all(|d| d.leaks().is_none()), "decode holds nothing at the end");
}

/// Random faults stop at `heal_at` for every batch, not only for jobs submitted before it: a job's
/// batches are scheduled when it is submitted, and each draws its faults for its own start time.
/// One request, 20 four-page batches, every batch drawn a 1 s delay until the heal at 2.5 s: the
/// three batches that start before it are delayed, the 17 after it are not, so the request is
/// answered a little after 3 s. (Before, all 20 drew the delay at submission and the request was
/// answered after 20 s, faults long past the heal: campaign seed 464,114's `page_leak/prefill`.)
#[test]
fn batches_that_start_after_the_heal_draw_no_faults() {
    let text = r#"
name = "heal-mid-job"
context_len = 8192
[[prefill]]
pool_tokens = 4096
[[decode]]
pool_tokens = 4096
[knobs]
page_size = 4
max_transfer_batch_pages = 4
chunked_prefill_size = 4096
[[request]]
at_ms = 0
tenant = 1
prompt_tokens = 320
output_tokens = 2
[faults]
delay_spike = "1/1"
delay_spike_ms = 1000
heal_at_ms = 2500
"#;
    let w = simulate_text("heal-mid-job.toml", text);
    let resp = w.reqs[0].response().expect("answered");
    assert_eq!(resp.status, 200);
    assert!(
        (3_000_000_000..5_000_000_000).contains(&resp.at.0),
        "answered at {} ns: three delayed batches, none after the heal",
        resp.at.0
    );
}

/// A one-request scenario on `sglang-0.5.22` (the fuzz cost model), with its request and pools.
fn one_request(decode_tokens: u64, prefill_tokens: u64, prompt: u64, output: u64, bound_ms: u64) -> String {
    [
        &format!(
            r#"
name = "one-request"
profile = "sglang-0.5.22"
context_len = 32768
[[prefill]]
pool_tokens = {prefill_tokens}
[[decode]]
pool_tokens = {decode_tokens}
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = {prompt}
output_tokens = {output}
[knobs]
page_size = 16
[faults]
liveness_after_heal_ms = {bound_ms}
"#
        ),
        FUZZ_COST,
    ]
    .concat()
}

/// Liveness is progress: a request still decoding is slow, not hung. 3,000 tokens take about 30 s
/// of decode steps (10 ms each under the fuzz cost model); with a 5 s bound the run used to stop
/// at 5 s with `request_hang/after_heal/decode_steps` (as vllm-nixl and sglang campaigns' slow
/// draws did). Each token is progress, so the deadline moves with it.
#[test]
fn a_request_that_keeps_decoding_is_not_a_hang() {
    let text = one_request(65_536, 32_768, 26_485, 3_000, 5_000);
    let w = simulate_text("slow-decode.toml", &text);
    let sigs = signatures(&w);
    assert!(sigs.is_empty(), "{sigs:?}");
    let resp = w.reqs[0].response().expect("answered");
    assert!(resp.status == 200 && resp.at.0 > 20_000_000_000, "answered at {} after > 20 s of steps", resp.at);
    assert!(!w.liveness.as_ref().unwrap().failed);
}

/// A request retracted behind a long output waits for room the running batch frees when it
/// finishes: while that batch gets tokens it is not a hang (with a 5 s bound it was one at 7 s,
/// though it resumed and was answered at 25 s).
#[test]
fn a_retracted_request_waiting_for_room_is_not_a_hang() {
    let text = |bound_ms: u64| {
        format!(
            "name = \"retracted-wait\"\nseed = 17\nprofile = \"sglang-0.5.22\"\ncontext_len = 8192\n\n\
             [faults]\nliveness_after_heal_ms = {bound_ms}\n\n\
             [[prefill]]\npool_tokens = 8192\n\n[[decode]]\npool_tokens = 2048\n\n\
             [knobs]\npage_size = 16\nreserved_decode_tokens = 16\ndecode_admission = \"pages_and_reserve\"\n\n\
             [[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 940\noutput_tokens = 1000\n\n\
             [[request]]\nat_ms = 1\ntenant = 2\nprompt_tokens = 950\noutput_tokens = 300\n"
        )
    };
    let cfg = kvsim::scenario::Scenario::parse("retracted-wait.toml", &text(5_000))
        .and_then(|s| s.resolve(&kvsim::scenario::Overrides::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    let w = kvsim::simulate_collect(cfg, true);
    assert!(signatures(&w).is_empty(), "{:?}", signatures(&w));
    let (r0, r1) = (w.reqs[0].response().expect("answered"), w.reqs[1].response().expect("answered"));
    assert_eq!((r0.status, r1.status), (200, 200));
    // Request 1 was retracted, and waited in the retracted queue longer than the bound.
    let phases = w.lifecycle.as_deref().unwrap();
    let retracted =
        phases.iter().find(|p| p.r.0 == 1 && p.phase == kvsim::lifecycle::Phase::Retracted).expect("retracted");
    let resumed = phases.iter().find(|p| p.r.0 == 1 && p.seq > retracted.seq).expect("resumed");
    assert!(resumed.at.0 - retracted.at.0 > 5_000_000_000, "retracted {} resumed {}", retracted.at, resumed.at);
    assert!(!w.liveness.as_ref().unwrap().failed);
}

/// A request that can never be preallocated (prealloc-never-fits: the page-aligned prompt plus
/// decode's 512 reserved tokens exceed the whole pool) hangs after the bound with nothing else in
/// the cluster moving, and its hang says why: `never_fits`, with the numbers.
#[test]
fn a_prealloc_that_never_fits_is_named() {
    // 9,153 tokens on a 9,216-token decode pool: 9,168 page-aligned + 512 > 9,216. Prefill's pool
    // holds the prompt, so prefill waits in bootstrap for decode (300 s timer, mini_lb waits on).
    let text = one_request(9_216, 16_384, 9_153, 1, 30_000);
    let w = simulate_text("never-fits.toml", &text);
    let sigs = signatures(&w);
    assert_eq!(sigs.iter().collect::<Vec<_>>(), ["request_hang/after_heal/decode_prealloc/never_fits"]);
    let v = w.oracle.violations.iter().find(|v| v.kind.name() == "request_hang").unwrap();
    assert!(
        v.detail.contains("needs 9680 tokens to preallocate") && v.detail.contains("the pool holds 9216"),
        "{}",
        v.detail
    );
    // Judged the bound after the cluster's last progress (its admission, in the first second).
    assert_eq!(v.at, w.liveness.as_ref().unwrap().deadline(kvsim::types::RequestId(0)));
    assert!((30_000_000_000..31_000_000_000).contains(&v.at.0), "{}", v.at);
}

/// A valid request queued behind reservations decode holds for rejected requests (prefill's 400
/// never reaches decode, which waits out its 300 s timer: router-waits-for-decode's held capacity)
/// is `behind_prefill_failed`; the rejected one is `prefill_failed`. Campaign seed 1,262 on
/// `sglang-0.5.22`, shrunk: two metadata slots, a 64-token prefill pool, a 576-token decode pool.
#[test]
fn a_request_behind_a_rejected_ones_reservation_is_named() {
    let text = [
        r#"
name = "behind-prefill-failed"
seed = 1262
profile = "sglang-0.5.22"
context_len = 4096
[[prefill]]
pool_tokens = 64
metadata_slots = 2
[[decode]]
pool_tokens = 576
metadata_slots = 2
[router]
policy = "random"
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 58
output_tokens = 1
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 1
output_tokens = 1
[knobs]
chunked_prefill_size = 1024
page_size = 64
[faults]
liveness_after_heal_ms = 30000
"#,
        FUZZ_COST,
    ]
    .concat();
    let w = simulate_text("behind-prefill-failed.toml", &text);
    let sigs = signatures(&w);
    assert_eq!(
        sigs.iter().collect::<Vec<_>>(),
        [
            "request_hang/after_heal/decode_prealloc/behind_prefill_failed",
            "request_hang/after_heal/kv_arrival/prefill_failed"
        ]
    );
    let v = w.oracle.violations.iter().find(|v| v.cause.ends_with("behind_prefill_failed")).unwrap();
    assert!(v.detail.contains("holds reservations for request(s) [0]"), "{}", v.detail);
    // With the router that cancels decode's leg (the row's fix) neither hangs.
    let fixed = text.replace("[knobs]\n", "[knobs]\nrouter_on_prefill_error = \"cancel_decode\"\n");
    let w = simulate_text("behind-prefill-failed-fixed.toml", &fixed);
    assert!(!signatures(&w).iter().any(|s| s.starts_with("request_hang/")), "{:?}", signatures(&w));
}

/// Work in flight for a request is progress: its KV arriving batch by batch over a slow link
/// (a 2,000-token prompt at 4 bytes/µs: 35 s of transfer), or one forward pass longer than the
/// bound, is not a hang (both were, with the deadline moved only by phase changes, tokens and
/// answers). A request stuck while other tenants' traffic progresses is still one: liveness is
/// the request's own progress, not the cluster's.
#[test]
fn work_in_flight_is_progress_and_other_traffic_is_not() {
    let base = |knobs: &str, cost: &str, requests: &str, bound: &str| {
        format!(
            "name = \"w\"\nprofile = \"sglang-0.5.22\"\ncontext_len = 8192\n[[prefill]]\npool_tokens = 8192\n\
             [[decode]]\npool_tokens = 16384\n[knobs]\npage_size = 16\n{knobs}[cost]\n{cost}{requests}\
             [faults]\nliveness_after_heal_ms = {bound}\n"
        )
    };
    let one = "[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 2000\noutput_tokens = 4\n";
    let slow_link = base("", "transfer_bytes_per_us = 4\n", one, "10000");
    let w = simulate_text("slow-link.toml", &slow_link);
    let resp = w.reqs[0].response().expect("answered");
    assert!(resp.status == 200 && resp.at.0 > 30_000_000_000, "the KV takes > 30 s: {}", resp.at);
    assert!(signatures(&w).is_empty(), "{:?}", signatures(&w));
    // One 2,000-token chunk at 1 ms a token: a 2 s forward pass against a 500 ms bound.
    let long_pass = base("", "prefill_ns_per_token = 1000000\n", one, "500");
    let w = simulate_text("long-pass.toml", &long_pass);
    assert!(signatures(&w).is_empty() && w.reqs[0].response().is_some_and(|r| r.status == 200), "{:?}", signatures(&w));
    // router-waits-for-decode's rejected prompt (6,000 tokens on a 4,096-token prefill pool,
    // sglang-0.5.16 behind mini_lb) while another tenant's requests arrive every 20 s and finish:
    // decode's 300 s timer answers it, far past the 30 s bound, whatever the others do.
    let mut busy = String::from("[[request]]\nat_ms = 0\ntenant = 2\nprompt_tokens = 6000\noutput_tokens = 4\n");
    for k in 0..8 {
        busy.push_str(&format!(
            "[[request]]\nat_ms = {}\ntenant = 3\nprompt_tokens = 500\noutput_tokens = 8\n",
            1000 + 20_000 * k
        ));
    }
    let text = base("pd_admission_check = \"aborted_too\"\n", "", &busy, "30000")
        .replace("sglang-0.5.22", "sglang-0.5.16")
        .replace("pool_tokens = 8192\n[[decode]]", "pool_tokens = 4096\n[[decode]]");
    let w = simulate_text("busy.toml", &text);
    let sigs = signatures(&w);
    assert!(sigs.contains("request_hang/after_heal/kv_arrival/prefill_failed"), "{sigs:?}");
    let v = w.oracle.violations.iter().find(|v| v.kind.name() == "request_hang").unwrap();
    assert_eq!(v.request, Some(kvsim::types::RequestId(0)), "{}", v.detail);
    assert!(v.at.0 < 35_000_000_000, "judged 30 s after its own last progress: {}", v.at);
    // The run stopped there: the later requests are reported as not arrived, not unanswered.
    let r = Report::build(&w, String::new());
    assert_eq!(r.outcomes.get("not arrived"), Some(&6), "{:?}", r.outcomes);
    assert_eq!(r.outcomes.get("none"), Some(&1), "{:?}", r.outcomes);
}

/// Where a run ends does not depend on `liveness_bound_s` when the run itself does not: a run
/// whose only events past the horizon are moot (timers of requests that moved on) ends with its
/// last event. (Every request of this 2P4D deployment is answered by 2.7 s with its 300 s timers
/// pending: the report said 3.1 s, 102.1 s or 302.1 s for bounds of 1, 100 and 300 s.)
#[test]
fn the_reported_end_does_not_move_with_the_bound_when_the_run_does_not() {
    let text = "name = \"acme\"\nseed = 42\nprofile = \"sglang-0.5.16\"\ncontext_len = 131072\n\
        [[prefill]]\ncount = 2\npool_tokens = 98304\n[[decode]]\ncount = 4\npool_tokens = 262144\n\
        [knobs]\npage_size = 16\n\
        [[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 60000\noutput_tokens = 32\n\
        [[request]]\nat_ms = 10\ntenant = 2\nprompt_tokens = 20000\noutput_tokens = 32\n\
        [[request]]\nat_ms = 2000\ntenant = 3\nprompt_tokens = 120000\noutput_tokens = 16\n\
        [[request]]\nat_ms = 2100\ntenant = 4\nprompt_tokens = 5000\noutput_tokens = 16\n";
    let base = kvsim::scenario::Scenario::parse("acme.toml", text)
        .and_then(|s| s.resolve(&kvsim::scenario::Overrides::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    let run = |bound_s: u64| kvsim::simulate(SimConfig { liveness_bound_s: bound_s, ..base.clone() }, None, false);
    let long = run(3_600);
    assert!(long.reqs.iter().all(|r| r.response().is_some()));
    for bound_s in [1, 100, 300] {
        let w = run(bound_s);
        assert_eq!(w.tracer.hash_hex(), long.tracer.hash_hex(), "the same run");
        assert_eq!(w.ended_at(), long.ended_at(), "bound {bound_s} s");
    }
    assert!(long.ended_at().0 < 3_000_000_000, "{}", long.ended_at());
}

fn liveness_data(name: &str) -> SimConfig {
    let path = crate::common::sim_data().join("liveness").join(name);
    crate::load_path(path.to_str().unwrap())
}

/// Legitimate waits longer than the bound are not hangs (each was one before; found by an
/// adversarial walkthrough, `sim/tests/data/liveness/`). Each ordinary run answers every request;
/// in liveness mode at the bound given, nothing is a hang and nothing a leak:
/// - a backlog of long prompts at prefill, where sglang's decode already holds the room (the
///   request reads `kv_arrival`): prefill's forward passes are its queue's progress;
/// - one long chunked prompt ahead (chunk after chunk, no admission meanwhile);
/// - decode's prealloc queue behind room held for a request whose KV prefill is computing;
/// - vLLM's prefill queue behind a pool held until decode, busy with long outputs, reads it;
/// - a request behind room a failed send's deferred-release fallback frees after 30 s;
/// - a prealloc queue behind a running request's finish, which resumed a retracted one (only
///   taking a request out of prealloc counted as the queue's movement; a campaign's seed 453);
/// - a prealloc queue behind room held for a request still queued at a busy prefill node;
/// - a request whose metadata write lags 8 s (a lagged `MetaLand` is its KV's arrival in flight);
/// - a request stalled for a page (`decode_out_of_pages = stall`) its batch frees as it finishes;
/// - a failing slow batch, whose only pending event is its `TransferDone` (the check ran without
///   the event about to run, so the batch looked idle), and whose decode pages the fallback frees
///   after the leak deadline (a `page_leak` before).
#[test]
fn legitimate_long_waits_are_not_hangs() {
    for (name, bound_ms) in [
        ("prefill-backlog.toml", 5_000),
        ("chunked-prompt-ahead.toml", 3_000),
        ("prealloc-behind-computing-room.toml", 5_000),
        ("vllm-prefill-pool-held-for-decode.toml", 3_000),
        ("prealloc-behind-deferred-release.toml", 5_000),
        ("failing-slow-transfer.toml", 2_000),
        ("failing-slow-transfer.toml", 9_000),
        ("resumed-behind-a-finish.toml", 5_000),
        ("room-holder-queued-at-prefill.toml", 5_000),
        ("metadata-lag.toml", 5_000),
        ("stalled-for-a-page.toml", 5_000),
    ] {
        let cfg = liveness_data(name);
        let ordinary = kvsim::simulate(cfg.clone(), None, false);
        assert!(ordinary.reqs.iter().all(|r| r.response().is_some()), "{name}: the ordinary run answers all");
        assert!(signatures(&ordinary).is_empty(), "{name}: {:?}", signatures(&ordinary));
        let w = kvsim::simulate(with_bound(cfg, bound_ms), None, false);
        assert!(signatures(&w).is_empty(), "{name} at {bound_ms} ms: {:?}", signatures(&w));
        assert!(!w.liveness.as_ref().unwrap().failed, "{name}");
    }
}

/// The other side: a real deadlock (vLLM decode stalled for pages it never gets) is still a
/// hang, however the queues' progress is counted.
#[test]
fn a_stalled_decode_is_still_a_hang() {
    let path = crate::common::sim_data().join("liveness/retract-chain.toml");
    let o = kvsim::scenario::Overrides {
        profile: Some("vllm-nixl".into()),
        set: vec![("decode_out_of_pages".into(), "stall".into())],
        ..Default::default()
    };
    let cfg = kvsim::scenario::Scenario::parse(path.to_str().unwrap(), &std::fs::read_to_string(&path).unwrap())
        .and_then(|s| s.resolve(&o))
        .unwrap_or_else(|e| panic!("{e}"));
    let w = kvsim::simulate(with_bound(cfg, 3_000), None, false);
    assert!(signatures(&w).iter().any(|s| s.starts_with("request_hang/after_heal/")), "{:?}", signatures(&w));
    assert!(w.liveness.as_ref().unwrap().failed);
}

/// What a request with no final status holds itself (its pages, host copy, metadata slot) is
/// held for its hang, judged as `request_hang`, not as a `page_leak` too (an ordinary run
/// reported both for the same pages before the fifty-fourth session). A leak beside a hang is
/// still one, and names the hung request's share apart.
#[test]
fn a_hung_requests_own_pages_are_its_hang_not_a_leak() {
    let w = kvsim::simulate(liveness_data("hang-holds-its-pages.toml"), None, true);
    assert!(w.reqs[1].response().is_none());
    let sigs: Vec<String> = signatures(&w).into_iter().collect();
    assert_eq!(sigs, ["request_hang/decode_leg_pending"]);
    // The pages are still held at the end (the node's plain leak count, as liveness mode's
    // quiescence test reads it): held for the hang.
    assert!(w.prefill.iter().any(|p| p.leaks().is_some_and(|l| l.pages > 0 && l.holders == [1])));
    assert_eq!(Report::build(&w, String::new()).exit_code, exit::LIVENESS);

    let w = kvsim::simulate(liveness_data("leak-beside-a-hang.toml"), None, true);
    let sigs: Vec<String> = signatures(&w).into_iter().collect();
    assert_eq!(sigs, ["page_leak/prefill", "request_hang/both_legs_pending"]);
    let leak = w.oracle.violations.iter().find(|v| v.kind == kvsim::check::Kind::PageLeak).unwrap();
    assert_eq!(leak.holders, [kvsim::types::RequestId(0)], "{}", leak.detail);
    assert!(
        leak.detail.contains("1 metadata slot(s) still held at the end by request(s) [0]")
            && leak.detail.contains("besides 0 page(s) and 1 metadata slot(s) held by request(s) [1]"),
        "{}",
        leak.detail
    );
}
