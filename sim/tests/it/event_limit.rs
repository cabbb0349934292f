//! A run that reaches the event limit is inconclusive about liveness: its verdict is
//! `event_limit` (exit 13), never a hang or a leak of requests the cut left in flight.

use kvsim::check::Kind;
use kvsim::report::{exit, exit_status, Report};
use kvsim::trace::Tracer;
use kvsim::world::World;

fn run(limit: Option<u64>, rel: &str, profile: &str) -> World {
    let cfg = crate::load(rel, Some(profile), &[]);
    let mut w = World::new(cfg, Tracer::new(None));
    if let Some(n) = limit {
        w.max_events = n;
    }
    w.run();
    w
}

#[test]
fn a_cut_run_is_inconclusive_not_a_hang() {
    // The fixed deployment ends clean when it runs to completion...
    let whole = run(None, "glm53-fixed-config.toml", "sglang-0.5.22");
    assert!(!whole.event_limit_hit());
    assert_eq!(Report::build(&whole, String::new()).exit_code, exit::CLEAN);
    assert_eq!(exit_status(&whole), exit::CLEAN, "the bench's status without the report agrees");
    assert!(whole.events() > 2_000, "the run needs more events than the limit below: {}", whole.events());

    // ...and cut after 2,000 events, with requests still in flight, it is neither clean nor a hang.
    let cut = run(Some(2_000), "glm53-fixed-config.toml", "sglang-0.5.22");
    assert!(cut.event_limit_hit());
    assert_eq!(cut.events(), 2_000);
    assert!(cut.reqs.iter().any(|r| r.response().is_none()), "the cut leaves requests unanswered");
    assert!(
        !cut.oracle.violations.iter().any(|v| matches!(v.kind, Kind::RequestHang | Kind::PageLeak)),
        "no hang or leak is judged on a cut run: {:?}",
        cut.oracle.violations.iter().map(|v| v.kind.name()).collect::<Vec<_>>()
    );
    let report = Report::build(&cut, String::new());
    assert_eq!(report.exit_code, exit::INCONCLUSIVE);
    assert_eq!(exit_status(&cut), exit::INCONCLUSIVE);
    assert_eq!(report.event_limit, Some(2_000));
    assert!(report.text().contains("INCONCLUSIVE"), "{}", report.text());
    assert!(kvsim::fuzz::signatures(&cut).contains(kvsim::fuzz::EVENT_LIMIT));
}

#[test]
fn safety_found_before_the_cut_still_counts() {
    // The vulnerable build leaks within its first events; a cut after the first leaked read keeps it.
    let whole = run(None, "glm53-incident.toml", "sglang-0.5.16");
    let first_read = whole
        .oracle
        .violations
        .iter()
        .filter(|v| v.kind == Kind::CrossTenantRead)
        .map(|v| v.at)
        .min()
        .expect("the incident leaks on 0.5.16");
    let mut limit = 1_000;
    let cut = loop {
        let w = run(Some(limit), "glm53-incident.toml", "sglang-0.5.16");
        if w.oracle.violations.iter().any(|v| v.kind == Kind::CrossTenantRead) {
            break w;
        }
        limit *= 2;
        assert!(limit < whole.events(), "the leak appears before the run ends");
    };
    assert!(cut.event_limit_hit());
    assert!(cut.now() >= first_read);
    assert_eq!(Report::build(&cut, String::new()).exit_code, exit::SAFETY);
    assert_eq!(exit_status(&cut), exit::SAFETY);
}

#[test]
fn the_event_limit_grows_with_the_workload() {
    // A guard against runaway runs, not a cap on long workloads: the 10M-request bench needs
    // 379.9M events (≈ 38 per request, measured), which a fixed 200M limit cut off about halfway.
    use kvsim::world::{event_limit, EVENTS_PER_REQUEST, MAX_EVENTS};
    let mut cfg = crate::load("glm53-fixed-config.toml", Some("sglang-0.5.22"), &[]);
    let explicit = cfg.requests.len() as u64 + cfg.generator.as_ref().map_or(0, |g| u64::from(g.requests));
    assert_eq!(event_limit(&cfg), MAX_EVENTS + EVENTS_PER_REQUEST * explicit);
    assert_eq!(World::new(cfg.clone(), Tracer::new(None)).max_events, event_limit(&cfg));
    cfg.requests.clear();
    cfg.generator.as_mut().expect("the scenario draws its requests").requests = 10_000_000;
    assert!(event_limit(&cfg) > 100 * 10_000_000, "{}", event_limit(&cfg));
}

/// More requests in flight at once than the in-flight limit stops the run as the event limit does
/// (inconclusive, exit 13), and says why; the requests that had not arrived are not created (10M
/// arrivals at once aborted the process when allocation failed).
#[test]
fn too_many_requests_in_flight_stop_the_run_inconclusive() {
    let mut cfg = crate::load("glm53-fixed-config.toml", Some("sglang-0.5.22"), &[]);
    let g = cfg.generator.as_mut().expect("the incident's workload is generated");
    g.mean_interarrival_us = 0;
    let many = g.requests;
    let mut w = World::new(cfg.clone(), Tracer::new(None));
    w.fold_finished = true;
    w.max_in_flight = 100;
    w.run();
    assert!(w.in_flight_limit_hit() && w.event_limit_hit());
    assert_eq!(w.reqs.len(), 101, "the arrivals past the limit are not created ({many} in the workload)");
    let report = Report::build(&w, String::new());
    assert_eq!(report.exit_code, exit::INCONCLUSIVE);
    assert_eq!(report.in_flight_limit, Some(100));
    assert!(report.text().contains("in-flight limit: more than 100 requests were held at once"), "{}", report.text());
    // The same workload spread out stays under the limit.
    let mut w = World::new(crate::load("glm53-fixed-config.toml", Some("sglang-0.5.22"), &[]), Tracer::new(None));
    w.fold_finished = true;
    w.max_in_flight = 100;
    w.run();
    assert!(!w.in_flight_limit_hit(), "the shipped arrivals keep fewer than 100 in flight");
    // A run that keeps every request holds them all: the same bound on what it holds (a run
    // with --trace or a check took 9 GB on 10M arrivals at once).
    let mut w = World::new(cfg, Tracer::new(None));
    w.max_in_flight = 100;
    w.run();
    assert!(w.in_flight_limit_hit());
    assert_eq!(w.reqs.len(), 101);
}
