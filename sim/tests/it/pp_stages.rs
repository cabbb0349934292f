//! Pipeline-parallel prefill stages (`[[prefill]] pp_stages`, `kvsim::pp`): the two catalogue
//! rows they carry (metadata-slot-collision, sglang #22716; pp-bootstrap-divergence, #26912 /
//! #34572), each knob's mechanism under its buggy and fixed value, the window the divergence
//! needs, the profiles' values, and that one stage is the model without stages.

use kvsim::check::Kind;
use kvsim::config::{PpBootstrapConsensus, PpMetadataWriter};
use kvsim::scenario::{Overrides, Scenario};
use kvsim::trace::{TraceRecord, Tracer};
use kvsim::types::Instant;
use kvsim::world::World;

fn catalogue(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/catalogue/{name}.toml"));
    std::fs::read_to_string(p).expect("catalogue scenario")
}

fn resolve(text: &str, profile: &str, set: &[(&str, &str)]) -> Result<kvsim::config::SimConfig, String> {
    let o = Overrides {
        profile: Some(profile.to_string()),
        seed: None,
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    Scenario::parse("pp.toml", text).and_then(|s| s.resolve(&o)).map_err(|e| e.to_string())
}

fn run(text: &str, profile: &str, set: &[(&str, &str)]) -> World {
    // Every component's invariants after every event; the trace kept in memory.
    let mut w = World::new(resolve(text, profile, set).unwrap_or_else(|e| panic!("{e}")), Tracer::collecting(None));
    w.check_invariants = true;
    w.run();
    w
}

fn status(w: &World, i: usize) -> Option<u16> {
    w.reqs[i].response().map(|r| r.status)
}

fn meta_lands(w: &World, r: u32) -> usize {
    let recs = w.tracer.collected.as_ref().expect("collected");
    recs.iter()
        .filter(|(_, x)| matches!(x, TraceRecord::Event(kvsim::event::Ev::MetaLand { r: q, .. }) if q.0 == r))
        .count()
}

#[test]
fn the_profiles_pp_values_are_the_wheels() {
    let k16 = (kvsim::config::profile("sglang-0.5.16").expect("profile").knobs)();
    let k22 = (kvsim::config::profile("sglang-0.5.22").expect("profile").knobs)();
    // Mooncake sends the aux row from every PP rank in both wheels (#22716 open).
    assert_eq!(k16.pp_metadata_writer, PpMetadataWriter::EveryStage);
    assert_eq!(k22.pp_metadata_writer, PpMetadataWriter::EveryStage);
    // 0.5.16 polls each stage's sender again; 0.5.22 hands rank 0's polls on.
    assert_eq!(k16.pp_bootstrap_consensus, PpBootstrapConsensus::LocalRepoll);
    assert_eq!(k22.pp_bootstrap_consensus, PpBootstrapConsensus::FollowRank0);
}

/// With one stage neither knob changes a run: the catalogue setups without `pp_stages` give the
/// same trace under both values of each.
#[test]
fn one_stage_is_the_model_without_stages() {
    for (name, knob, values) in [
        ("metadata-slot-collision", "pp_metadata_writer", ["every_stage", "last_stage"]),
        ("pp-bootstrap-divergence", "pp_bootstrap_consensus", ["local_repoll", "follow_rank0"]),
    ] {
        let text = catalogue(name).replace("pp_stages = 2\n", "");
        let hashes: Vec<String> = values
            .iter()
            .map(|v| {
                let w = run(&text, "sglang-0.5.16", &[(knob, v)]);
                assert_eq!(w.prefill[0].pp().stages, 1);
                assert!(w.prefill[0].pp().wedged_at.is_none(), "{name} {v}");
                w.tracer.hash_hex()
            })
            .collect();
        assert_eq!(hashes[0], hashes[1], "{name}: {knob} changed a one-stage run");
    }
}

/// `every_stage`: both stages write request 0's row; decode commits on the second stage's (on
/// time) while the first stage's is 145 ms late, lands in the slot request 1 now holds after
/// request 1's rows, and request 1's commit check reads request 0's room (500, room mismatch).
/// `last_stage`: one row per request; decode waits for request 0's late row and both answer 200.
#[test]
fn every_stage_rows_let_a_late_row_land_in_the_next_requests_slot() {
    let text = catalogue("metadata-slot-collision");
    let buggy = run(&text, "sglang-0.5.22", &[("pp_metadata_writer", "every_stage")]);
    assert_eq!(meta_lands(&buggy, 0), 2, "two stages, two rows");
    assert_eq!(meta_lands(&buggy, 1), 2);
    assert_eq!(status(&buggy, 0), Some(200));
    assert_eq!(status(&buggy, 1), Some(500));
    assert!(buggy.reqs[1].room_mismatch(), "request 1 read request 0's row");
    assert!(!buggy.reqs[0].room_mismatch());
    // Request 0 was answered before its late row landed (145 ms after its transfer ended).
    let r0_end = buggy.reqs[0].response().expect("answered").at;
    assert!(r0_end < Instant(183_000_000), "{r0_end}");

    let fixed = run(&text, "sglang-0.5.22", &[("pp_metadata_writer", "last_stage")]);
    assert_eq!(meta_lands(&fixed, 0), 1, "only the last stage writes");
    assert!(fixed.oracle.violations.is_empty(), "{:?}", fixed.oracle.violations);
    assert_eq!((status(&fixed, 0), status(&fixed, 1)), (Some(200), Some(200)));
    // Decode waited for request 0's one (late) row.
    assert!(fixed.reqs[0].response().expect("answered").at > Instant(183_000_000));
}

/// `local_repoll`: the client's abort (at prefill 2.2 ms) lands after the first stage popped
/// request 0 (0.4 ms) and before the second does (5.4 ms): the stages diverge and the instance is
/// wedged from then on — request 0's forward pass never ends, request 1 is never bootstrapped,
/// prefill's bootstrap timer is never handled, and decode answers request 1 500 at its 300 s
/// waiting timer (no heartbeat was lost). `follow_rank0`: no divergence, request 1 answers 200.
#[test]
fn an_abort_between_two_stages_pops_wedges_the_instance() {
    let text = catalogue("pp-bootstrap-divergence");
    let buggy = run(&text, "sglang-0.5.16", &[]);
    let p = &buggy.prefill[0];
    assert_eq!(p.pp().wedged_at, Some(Instant(2_200_000)));
    assert!(p.alive() && p.busy(), "alive, its forward pass never ends");
    assert!(p.reqs().contains_key(&kvsim::types::RequestId(0)) && p.bootstrap() == [kvsim::types::RequestId(1)]);
    assert_eq!(status(&buggy, 0), Some(499));
    assert_eq!(status(&buggy, 1), Some(500));
    assert!(buggy.reqs[1].timed_out(), "decode's waiting timer answered it");
    assert!(!buggy.reqs[1].fault_touched(), "no heartbeat loss, no crash");
    let leaks: Vec<_> = buggy.oracle.violations.iter().filter(|v| v.kind == Kind::PageLeak).collect();
    assert_eq!(leaks.len(), 1, "{:?}", buggy.oracle.violations);

    let fixed = run(&text, "sglang-0.5.16", &[("pp_bootstrap_consensus", "follow_rank0")]);
    assert!(fixed.prefill[0].pp().wedged_at.is_none());
    assert!(fixed.oracle.violations.is_empty(), "{:?}", fixed.oracle.violations);
    assert_eq!((status(&fixed, 0), status(&fixed, 1)), (Some(499), Some(200)));
    // vLLM has no per-stage bootstrap queue (one scheduler plans every stage): its profile does
    // not wedge (it carried 0.5.16's `local_repoll` until the thirty-eighth session and reported
    // sglang's deadlock on `pp_stages = 2`).
    let vllm = run(&text, "vllm-nixl", &[]);
    assert!(vllm.prefill[0].pp().wedged_at.is_none());
    assert!(
        !vllm.oracle.violations.iter().any(|v| v.kind == Kind::PageLeak || v.kind == Kind::RequestHang),
        "{:?}",
        vllm.oracle.violations
    );
}

/// The divergence needs the abort inside the window between the first and the last stage's pop:
/// before the first pop (still bootstrapping: every stage sees Failed) or after the last (every
/// stage has it in its waiting queue) the stages agree. Four stages widen the window to three
/// iterations (15 ms).
#[test]
fn only_an_abort_inside_the_pop_window_diverges_the_stages() {
    let text = catalogue("pp-bootstrap-divergence");
    let at = |abort_ms: &str, stages: &str| {
        let t = text
            .replace("abort_at_ms = 2\n", &format!("abort_at_ms = {abort_ms}\n"))
            .replace("pp_stages = 2\n", &format!("pp_stages = {stages}\n"));
        run(&t, "sglang-0.5.16", &[]).prefill[0].pp().wedged_at.is_some()
    };
    assert!(!at("0", "2"), "aborted before the first pop");
    assert!(at("2", "2"));
    assert!(at("5", "2"), "prefill hears it at 5.2 ms, the second stage pops at 5.4 ms");
    assert!(!at("6", "2"), "after the second stage popped");
    assert!(at("12", "4"), "the fourth stage pops at 15.4 ms");
    assert!(!at("16", "4"));
}

#[test]
fn pp_stages_is_a_prefill_setting_within_its_range() {
    let text = catalogue("pp-bootstrap-divergence");
    let on_decode = text.replace("[[decode]]\npool_tokens = 8192\n", "[[decode]]\npool_tokens = 8192\npp_stages = 2\n");
    let e = resolve(&on_decode, "sglang-0.5.16", &[]).expect_err("decode has one stage");
    assert!(e.contains("pp_stages") && e.contains("decode"), "{e}");
    let nine = text.replace("pp_stages = 2\n", "pp_stages = 9\n");
    let e = resolve(&nine, "sglang-0.5.16", &[]).expect_err("at most 8");
    assert!(e.contains("pp_stages") && e.contains("1..=8"), "{e}");
    // One stage is written out only when above 1: the file image round-trips.
    let cfg = resolve(&text, "sglang-0.5.16", &[]).expect("valid");
    assert_eq!(cfg.prefill[0].pp_stages, 2);
    let back = toml::to_string(&kvsim::scenario::to_file(&cfg, false)).expect("serialise");
    assert!(back.contains("pp_stages = 2"), "{back}");
}
