//! Liveness mode (issue 15, `check::liveness`): after the faults heal, every request must end
//! within a bound, else the run stops with a hang naming what the request waits for; a
//! quiescent run stops early, without hiding anything the ordinary run finds.

use crate::load;
use kvsim::config::SimConfig;
use kvsim::fuzz::{draw, signatures, Space};
use kvsim::report::{exit, Report};

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
    assert!(ordinary.reqs.iter().all(|r| r.response.is_some()), "the ordinary run answers it (at 300 s)");
    assert!(!signatures(&ordinary).iter().any(|s| s.starts_with("request_hang/")));

    let w = kvsim::simulate(with_bound(cfg.clone(), 60_000), None, true);
    let sigs = signatures(&w);
    assert_eq!(
        sigs.iter().filter(|s| s.starts_with("request_hang/")).collect::<Vec<_>>(),
        ["request_hang/after_heal/kv_arrival"]
    );
    let v = w.oracle.violations.iter().find(|v| v.cause == "after_heal/kv_arrival").unwrap();
    assert_eq!(v.at.0, 60_000_000_000, "judged at its deadline");
    assert!(v.detail.contains("waits for kv_arrival") && v.detail.contains("decode leg pending"), "{}", v.detail);
    assert!(w.now.0 < 300_000_000_000, "the run stopped at the missed deadline, not at the 300 s timer: {}", w.now);
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
    assert!(w.events <= ordinary.events && w.now <= ordinary.now, "{} <= {} events", w.events, ordinary.events);
    assert!(
        ordinary.now.0 < 300_000_000_000,
        "the ordinary run ends with its last answer, not its 300 s timers: {}",
        ordinary.now
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
                    r.response.is_none_or(|resp| resp.at > l.deadline(kvsim::types::RequestId(i as u32)))
                });
            assert!(late, "seed {seed}: a liveness failure where the ordinary run answered every request in time");
        }
        if l.quiescent_at.is_some() {
            // Ordinary runs end with their last effective event (issue 14), so a quiescent stop
            // is never later than the ordinary end.
            assert!(
                live.now <= ordinary.now,
                "seed {seed}: quiescent at {} after the ordinary end {}",
                live.now,
                ordinary.now
            );
            quiescent += 1;
        }
    }
    assert!(quiescent > 100, "quiescence ends most drawn runs: {quiescent} of 300");
}
