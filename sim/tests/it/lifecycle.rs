//! The model's lifecycle-phase records (`kvsim::lifecycle`): every lane of every request is a
//! well-formed sequence of phases in the engine's order, an ordinary request passes through every
//! phase of both legs, a request failed in prefill's waiting queue never reaches decode's running
//! batch, and the records change nothing in the trace.

use crate::load;
use kvsim::lifecycle::{Lane, Phase, PhaseRecord};
use kvsim::types::RequestId;
use std::collections::BTreeMap;

/// Runs a shipped scenario with the phase log on; returns the log and each request's status.
fn phases(rel: &str, set: &[(&str, &str)]) -> (Vec<PhaseRecord>, BTreeMap<u32, u16>) {
    let cfg = load(rel, None, set);
    let w = kvsim::simulate_collect(cfg, false);
    let statuses = w.reqs.iter().filter_map(|r| Some((r.id().0, r.response().as_ref()?.status))).collect();
    (w.lifecycle.expect("on with a collecting tracer"), statuses)
}

/// The place of a leg's phase in the engine's order (a lane's phases never go back, except a
/// retracted decode request coming back to the running batch, which is the same place).
fn rank(p: Phase) -> Option<u8> {
    Some(match p {
        Phase::Bootstrap | Phase::Prealloc => 0,
        Phase::Waiting | Phase::Transfer => 1,
        Phase::Prefill { .. } | Phase::Running | Phase::Retracted => 2,
        Phase::Inflight | Phase::Held | Phase::Releasing | Phase::Leaked => 3,
        Phase::Draining | Phase::Orphaned => 4,
        Phase::Arrived | Phase::Answered { .. } | Phase::Left | Phase::Responded { .. } => return None,
    })
}

/// Each request's records per lane, in order.
fn lanes(log: &[PhaseRecord]) -> BTreeMap<(u32, Lane), Vec<PhaseRecord>> {
    let mut out: BTreeMap<(u32, Lane), Vec<PhaseRecord>> = BTreeMap::new();
    for p in log {
        out.entry((p.r.0, p.lane)).or_default().push(*p);
    }
    out
}

/// Structural checks on a whole log: positions and times never go back; the router's lane is
/// `Arrived` first and at most one `Responded` last; a leg's lane opens with a phase, its phases
/// keep the engine's order, and nothing but its answer follows `Left`.
fn check_well_formed(rel: &str, log: &[PhaseRecord]) {
    for w in log.windows(2) {
        assert!(w[0].seq <= w[1].seq && w[0].at <= w[1].at, "{rel}: out of order: {w:?}");
    }
    for ((r, lane), recs) in lanes(log) {
        let names: Vec<Phase> = recs.iter().map(|p| p.phase).collect();
        match lane {
            Lane::Router => {
                assert_eq!(names[0], Phase::Arrived, "{rel}: r{r} router lane {names:?}");
                let responded = names.iter().filter(|p| matches!(p, Phase::Responded { .. })).count();
                assert!(responded <= 1, "{rel}: r{r} answered twice: {names:?}");
                assert!(responded == 0 || matches!(names.last(), Some(Phase::Responded { .. })), "{rel}: {names:?}");
            }
            _ => {
                // A leg turned away at the door (`LegIntake::Rejected`) is only its answer.
                let only_answer = names.len() == 1 && matches!(names[0], Phase::Answered { .. });
                assert!(rank(names[0]).is_some() || only_answer, "{rel}: r{r} {lane:?} opens with {names:?}");
                let mut last = 0;
                let mut left = false;
                for p in &names {
                    if left {
                        assert!(
                            matches!(p, Phase::Answered { .. }),
                            "{rel}: r{r} {lane:?} {p:?} after it left: {names:?}"
                        );
                    }
                    match rank(*p) {
                        Some(k) => {
                            assert!(k >= last, "{rel}: r{r} {lane:?} goes back: {names:?}");
                            last = k;
                        }
                        None => left |= *p == Phase::Left,
                    }
                }
                let answers = names.iter().filter(|p| matches!(p, Phase::Answered { .. })).count();
                assert!(answers <= 1, "{rel}: r{r} {lane:?} answered twice: {names:?}");
            }
        }
    }
}

#[test]
fn every_lane_of_every_shipped_scenario_is_well_formed() {
    for rel in crate::all_scenarios() {
        if rel.starts_with("glm53") || rel.starts_with("mooncake") {
            continue; // full-scale incidents: minutes in a debug build; the catalogue covers their paths
        }
        let (log, _) = phases(&rel, &[]);
        assert!(!log.is_empty(), "{rel}: no phase records");
        check_well_formed(&rel, &log);
    }
}

/// A request answered 200 went through every phase of both legs, in order and back to back:
/// bootstrap (concurrent router) → waiting → prefill → inflight → left on prefill; prealloc →
/// transfer → running → left on decode; its response after decode's answer.
#[test]
fn an_ordinary_request_passes_every_phase_in_order() {
    let (log, statuses) = phases("small/stub-leak.toml", &[]);
    let ok: Vec<u32> = statuses.iter().filter(|(_, s)| **s == 200).map(|(r, _)| *r).collect();
    assert!(!ok.is_empty());
    let lanes = lanes(&log);
    for r in ok {
        let of = |want: fn(&Lane) -> bool| -> Vec<Phase> {
            lanes.iter().filter(|((x, l), _)| *x == r && want(l)).flat_map(|(_, v)| v.iter().map(|p| p.phase)).collect()
        };
        let mut prefill = of(|l| matches!(l, Lane::Prefill(_)));
        prefill.dedup_by(|a, b| matches!((a, b), (Phase::Prefill { .. }, Phase::Prefill { .. })));
        let prefill: Vec<&str> = prefill.iter().map(|p| p.label().unwrap_or("·")).collect();
        assert_eq!(prefill, ["bootstrap", "waiting", "prefill", "inflight", "·", "·"], "r{r} prefill");
        let decode: Vec<Phase> = of(|l| matches!(l, Lane::Decode(_)));
        assert_eq!(
            decode,
            [Phase::Prealloc, Phase::Transfer, Phase::Running, Phase::Left, Phase::Answered { status: 200 }],
            "r{r} decode"
        );
        let at = |lane: fn(&Lane) -> bool, p: Phase| {
            lanes
                .iter()
                .filter(|((x, l), _)| *x == r && lane(l))
                .flat_map(|(_, v)| v)
                .find(|x| x.phase == p)
                .map(|x| x.at)
        };
        let arrived = at(|l| *l == Lane::Router, Phase::Arrived).expect("arrived");
        let admitted = at(|l| matches!(l, Lane::Prefill(_)), Phase::Bootstrap).expect("bootstrap");
        let answered = at(|l| matches!(l, Lane::Decode(_)), Phase::Answered { status: 200 }).expect("answered");
        let resp = lanes[&(r, Lane::Router)].last().expect("router lane");
        assert!(matches!(resp.phase, Phase::Responded { status: 200, .. }), "r{r}: {resp:?}");
        assert!(arrived <= admitted && answered <= resp.at, "r{r}: {arrived:?} {admitted:?} {answered:?} {resp:?}");
    }
}

/// Catalogue row `orphan-in-prefill-waiting`: request 1 is failed by decode's waiting timer while
/// it sits in prefill's waiting queue. Its prefill lane never reaches `prefill` (orphaned under the
/// buggy poll, released under the fixed one) and its decode lane never reaches `running`.
#[test]
fn a_request_failed_in_the_waiting_queue_never_runs() {
    let r1 = RequestId(1);
    for (set, last) in [("bootstrap_and_inflight", Phase::Orphaned), ("every_queue", Phase::Left)] {
        let (log, _) = phases("catalogue/orphan-in-prefill-waiting.toml", &[("prefill_failed_check", set)]);
        check_well_formed("orphan-in-prefill-waiting", &log);
        let mine: Vec<&PhaseRecord> = kvsim::lifecycle::of_request(&log, r1).collect();
        let on = |f: fn(&Lane) -> bool| mine.iter().filter(|p| f(&p.lane)).map(|p| p.phase).collect::<Vec<_>>();
        let prefill = on(|l| matches!(l, Lane::Prefill(_)));
        let decode = on(|l| matches!(l, Lane::Decode(_)));
        assert!(prefill.contains(&Phase::Waiting), "{set}: {prefill:?}");
        assert!(!prefill.iter().any(|p| matches!(p, Phase::Prefill { .. })), "{set}: {prefill:?}");
        assert_eq!(
            prefill.iter().rev().find(|p| !matches!(p, Phase::Answered { .. })),
            Some(&last),
            "{set}: {prefill:?}"
        );
        assert!(decode.contains(&Phase::Transfer), "{set}: {decode:?}");
        assert!(!decode.contains(&Phase::Running), "{set}: {decode:?}");
    }
}

/// The log is observation only: a run's trace hash is the same with it on or off.
#[test]
fn the_phase_log_changes_no_trace_hash() {
    for rel in ["small/stub-leak.toml", "small/mixed-faults.toml", "catalogue/leak-abort-retracted.toml"] {
        let cfg = load(rel, None, &[]);
        let on = kvsim::simulate_collect(cfg.clone(), false);
        let mut off = kvsim::world::World::new(cfg, kvsim::trace::Tracer::new(None));
        assert!(off.lifecycle.is_none());
        off.run();
        assert!(!on.lifecycle.as_ref().expect("on").is_empty());
        assert_eq!(on.tracer.hash_hex(), off.tracer.hash_hex(), "{rel}");
    }
}
