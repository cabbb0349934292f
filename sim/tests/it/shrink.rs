//! The shrinker's output: random faults become the scripted faults they fired as, and necessary
//! knobs are judged against the fixed build of the case's own engine.

use crate::load;
use kvsim::config::ScriptedFault;
use kvsim::fuzz::{run_case, signatures};
use kvsim::types::Ratio;

/// The rdma-visibility-lag row with its scripted lag replaced by a random one that fires on
/// every batch: the failure then depends on the fault draws.
fn random_lag_case(profile: &str) -> kvsim::config::SimConfig {
    let mut c = load("catalogue/rdma-visibility-lag.toml", Some(profile), &[]);
    c.faults.script.clear();
    c.faults.visibility_lag = Ratio::ALWAYS;
    c.faults.visibility_lag_ms = 200;
    c.faults.heal_at_ms = 60_000;
    c
}

#[test]
fn a_random_fault_the_case_needs_becomes_a_scripted_one() {
    let cfg = random_lag_case("sglang-0.5.16");
    let (_, sigs) = run_case(cfg.clone());
    let sig = "cross_tenant_read/visibility_lag";
    assert!(sigs.contains(sig), "the random-lag case shows {sig}: {sigs:?}");
    let s = kvsim::shrink::shrink(&cfg, sig, 2000);
    let f = &s.cfg.faults;
    assert!(
        [f.transfer_fail, f.delay_spike, f.visibility_lag, f.node_crash].iter().all(|r| r.is_never()),
        "no random fault left in the shrunk case: {f:?}"
    );
    assert!(
        f.script.iter().any(|x| matches!(x, ScriptedFault::VisibilityLag { lag_ms: 200, .. })),
        "the lag is scripted: {:?}",
        f.script
    );
    let w = kvsim::fuzz::simulate_for(s.cfg.clone(), sig);
    assert!(signatures(&w).contains(sig), "the shrunk case still fails the same way");
}

#[test]
fn a_random_crash_is_scripted_at_its_millisecond() {
    // Every arrival crashes a node: the world records each as a scripted crash.
    let mut cfg = load("catalogue/rdma-visibility-lag.toml", Some("sglang-0.5.22"), &[]);
    cfg.faults.node_crash = Ratio::ALWAYS;
    cfg.faults.crash_restart_ms = 500;
    cfg.faults.heal_at_ms = 60_000;
    let w = kvsim::fuzz::simulate_for(cfg.clone(), "");
    let crashes: Vec<_> = w.fired_faults.iter().filter(|f| matches!(f, ScriptedFault::Crash { .. })).collect();
    assert_eq!(crashes.len(), cfg.requests.len(), "one crash per arrival: {:?}", w.fired_faults);
    // The second request arrives at 1,000 ms: its crash is scripted at that millisecond.
    assert!(
        crashes.iter().any(|f| matches!(f, ScriptedFault::Crash { at_ms: 1000, restart_after_ms: 500, .. })),
        "{crashes:?}"
    );
}

#[test]
fn necessary_knobs_are_judged_against_the_engines_fixed_build() {
    use kvsim::shrink::fixed_profile_for;
    let mut cfg = random_lag_case("sglang-0.5.16");
    assert_eq!(fixed_profile_for(&cfg).name, "sglang-0.5.22");
    cfg.profile = "vllm-nixl".into();
    assert_eq!(fixed_profile_for(&cfg).name, "vllm-nixl");
    cfg.profile = "custom".into();
    assert_eq!(fixed_profile_for(&cfg).name, "sglang-0.5.22");

    // A vLLM case: knobs at vLLM's own values are never "necessary" (judged against sglang's
    // fixed build, vLLM's free order or preemption would be).
    let cfg = random_lag_case("vllm-nixl");
    let (_, sigs) = run_case(cfg.clone());
    let sig = sigs.iter().find(|s| s.ends_with("/visibility_lag")).expect("a lag signature").clone();
    let s = kvsim::shrink::shrink(&cfg, &sig, 2000);
    assert_eq!(s.judged_against, "vllm-nixl");
    let vllm = toml::Table::try_from((kvsim::config::profile("vllm-nixl").unwrap().knobs)()).unwrap();
    for k in &s.necessary_knobs {
        let (name, value) = k.split_once('=').unwrap();
        assert_ne!(vllm[name].to_string(), value, "{k} is vLLM's own value, not a deviation from it");
    }
}

/// A case of sglang-0.5.22 that needs a deferred-release fallback shorter than the release's
/// 30 s names it as necessary (swarm seed 500,007,570: a batch outlives its 5 s sync timeout and
/// lands after decode's 1 s fallback freed its pages; clean with the release's 30 s), and a case
/// that does not is set back to 30 s.
#[test]
fn a_shorter_release_fallback_is_judged_like_a_behaviour_knob() {
    let space = kvsim::fuzz::Space::Profile("sglang-0.5.22".into());
    let cfg = kvsim::fuzz::draw(500_007_570, &space);
    assert_eq!(cfg.knobs.deferred_release_timeout_ms, 1_000);
    let sig = "uninitialized_read/late_write/sync_timeout";
    assert!(run_case(cfg.clone()).1.contains(sig));
    let s = kvsim::shrink::shrink(&cfg, sig, 2000);
    assert!(
        s.necessary_knobs.iter().any(|k| k == "deferred_release_timeout_ms=1000"),
        "{:?} {:?} runs {} conv {} drt {}",
        s.necessary_knobs,
        s.unjudged_knobs,
        s.runs,
        s.converged,
        s.cfg.knobs.deferred_release_timeout_ms
    );
    assert!(run_case(s.cfg.clone()).1.contains(sig));
    // The source read of the drain acknowledgement does not need it: the first such run with a
    // shorter fallback shrinks to the release's 30 s. (With the chunk cache, whose release frees
    // the source at the failure; the radix cache keeps it cached.)
    let sig = "use_after_free/transfer_read_of_a_source_page";
    let chunk = |mut c: kvsim::config::SimConfig| {
        c.knobs.prefill_cache = kvsim::config::PrefillCache::Chunk;
        c
    };
    let cfg = (500_000_000..500_005_000)
        .map(|seed| chunk(kvsim::fuzz::draw(seed, &space)))
        .find(|c| c.knobs.deferred_release_timeout_ms != 30_000 && run_case(c.clone()).1.contains(sig))
        .expect("a source read with a shorter fallback in 5,000 runs");
    let s = kvsim::shrink::shrink(&cfg, sig, 2000);
    assert_eq!(s.cfg.knobs.deferred_release_timeout_ms, 30_000, "seed {}: {:?}", cfg.seed, s.necessary_knobs);
}

/// The cross-tenant prefix hit with padding the failure does not need: longer prefix-block
/// lists than the one shared block, an idle gap before the first arrival and 3 s between the
/// others, and a second prefill and decode node. The shrunk case keeps only the shared block of
/// the two requests that share it, one node of each role, and no idle time (before this
/// session's passes the shrinker kept every block and the 3 s gaps).
#[test]
fn prefix_blocks_and_idle_gaps_are_shrunk_away() {
    let mut cfg = load("catalogue/cross-tenant-prefix-hit.toml", None, &[("prefix_cache_scope", "global")]);
    let sig = "cross_tenant_prefix_hit/global_prefix_cache";
    cfg.prefill.insert(0, cfg.prefill[0].clone());
    cfg.decode.insert(0, cfg.decode[0].clone());
    cfg.requests[0].prefix_blocks.extend([104, 105]);
    cfg.requests[2].prefix_blocks.extend([201, 202]);
    for r in &mut cfg.requests {
        r.at_ns += 5_000_000_000;
    }
    let (_, sigs) = run_case(cfg.clone());
    assert!(sigs.contains(sig), "the padded case shows {sig}: {sigs:?}");
    let s = kvsim::shrink::shrink(&cfg, sig, 2000);
    let c = &s.cfg;
    assert_eq!((c.prefill.len(), c.decode.len()), (1, 1), "one node of each role");
    let sharing: Vec<_> = c.requests.iter().filter(|r| r.prefix_blocks.contains(&100)).collect();
    assert_eq!(sharing.len(), 2, "the two requests that share block 100 stay: {:?}", c.requests);
    for r in &sharing {
        assert_eq!(r.prefix_blocks, vec![100], "only the shared block is kept: {:?}", c.requests);
    }
    let last = c.requests.iter().map(|r| r.at_ns).max().unwrap();
    assert!(last < 6_000_000_000, "the idle gaps are closed: {:?}", c.requests);
    // Prompts shortened below their blocks lose the blocks past their end, so the shrunk case
    // is a scenario that reads back (more blocks than the prompt has is refused).
    for r in &c.requests {
        assert!(r.prefix_blocks.len() as u64 <= r.prompt_tokens.div_ceil(512), "{r:?}");
    }
    let text = kvsim::scenario::to_toml(c, "# shrunk\n");
    let back = kvsim::scenario::Scenario::parse("shrunk.toml", &text)
        .and_then(|sc| sc.resolve(&Default::default()))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back.requests, c.requests);
    let w = kvsim::fuzz::simulate_for(c.clone(), sig);
    assert!(signatures(&w).contains(sig), "the shrunk case still fails the same way");
}

/// Shortening a prompt takes the prefix blocks past its new end with it: a case that needs two
/// blocks keeps a prompt of two blocks (513 tokens, the second partial), not a one-token prompt
/// with two blocks, which a scenario refuses.
#[test]
fn a_shortened_prompt_keeps_no_block_past_its_end() {
    let mut cfg = load("catalogue/cross-tenant-prefix-hit.toml", None, &[]);
    cfg.requests[0].prefix_blocks = vec![7, 8, 9];
    cfg.requests[0].prompt_tokens = 1500;
    let mut holds = |c: &kvsim::config::SimConfig| c.requests.first().is_some_and(|r| r.prefix_blocks.len() >= 2);
    let s = kvsim::shrink::shrink_with(&cfg, &mut holds, 500);
    let r = &s.cfg.requests[0];
    assert_eq!((s.cfg.requests.len(), r.prompt_tokens, r.prefix_blocks.len()), (1, 513, 2), "{:?}", s.cfg.requests);
}

/// A campaign example (`sim/tests/data/shrink/late-write-delay-spikes.toml`: a late write after
/// the 30 s deferred-release fallback on `sglang-0.5.22`) that needs its random delay spikes
/// (`delay_spike = "1/200"` of 10 s): scripted as one delay of the request's first batch they do
/// not fail it the same way, scripted on the batches they fired on they do, and merged into one
/// delay and shortened they show the threshold. Before the one-batch faults the shrunk case kept
/// the random spikes (its failure still depended on the fault draws).
#[test]
fn random_delay_spikes_become_one_scripted_delay_at_the_threshold() {
    let path = crate::sim_data().join("shrink/late-write-delay-spikes.toml");
    let cfg = crate::load_path(&path.to_string_lossy());
    let sig = "cross_tenant_read/late_write";
    let (_, sigs) = run_case(cfg.clone());
    assert!(sigs.contains(sig), "the example shows {sig}: {sigs:?}");
    let s = kvsim::shrink::shrink(&cfg, sig, 1500);
    let f = &s.cfg.faults;
    assert!(
        [f.transfer_fail, f.delay_spike, f.visibility_lag, f.node_crash].iter().all(|r| r.is_never()),
        "no random fault left: {f:?}"
    );
    let delays: Vec<u64> = f
        .script
        .iter()
        .filter_map(|x| match *x {
            ScriptedFault::Delay { delay_ms, .. } | ScriptedFault::DelayAt { delay_ms, .. } => Some(delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 1, "the spikes merged into one delay: {:?}", f.script);
    // The fallback frees after 30 s (`deferred_release_timeout_ms`): the shortest delay that still
    // fails the case lies just above it.
    assert!((30_000..31_000).contains(&delays[0]), "the delay is cut to the 30 s threshold: {delays:?}");
    let w = kvsim::fuzz::simulate_for(s.cfg.clone(), sig);
    assert!(signatures(&w).contains(sig), "the shrunk case still fails the same way");
}

/// A one-batch fault hits only its batch: a failure scripted on a batch the request never
/// schedules changes nothing (the same trace hash as no fault), on its first batch it fails the
/// request like a failure of every batch; a scenario's `batch` field is read and written back.
#[test]
fn a_one_batch_fault_hits_only_its_batch() {
    use kvsim::scenario::{Scenario, ScriptEntry};
    let text = |script: &str| {
        format!(
            "name = \"one-batch\"\nprofile = \"sglang-0.5.22\"\ncontext_len = 4096\n[[prefill]]\npool_tokens = 4096\n\
             [[decode]]\npool_tokens = 4096\n[knobs]\npage_size = 16\nmax_transfer_batch_pages = 2\n\
             [[request]]\nat_ms = 0\ntenant = 0\nprompt_tokens = 200\noutput_tokens = 4\n{script}"
        )
    };
    let run = |script: &str| {
        let cfg = Scenario::parse("one-batch.toml", &text(script))
            .and_then(|s| s.resolve(&Default::default()))
            .unwrap_or_else(|e| panic!("{e}"));
        (kvsim::simulate(cfg.clone(), None, true), cfg)
    };
    let (clean, _) = run("");
    let (never, cfg) = run("[[faults.script]]\nkind = \"transfer_fail\"\nrequest = 0\nbatch = 99\n");
    assert_eq!(cfg.faults.script, vec![ScriptedFault::TransferFailAt { request: 0, batch: 99 }]);
    assert_eq!(ScriptEntry::of(&cfg.faults.script[0]).batch, Some(99), "written back with its batch");
    assert_eq!(never.tracer.hash_hex(), clean.tracer.hash_hex(), "a batch never scheduled: nothing happens");
    let status = |w: &kvsim::world::World| w.reqs[0].response().map(|r| r.status);
    assert_eq!(status(&clean), Some(200));
    let (first, _) = run("[[faults.script]]\nkind = \"transfer_fail\"\nrequest = 0\nbatch = 0\n");
    let (every, _) = run("[[faults.script]]\nkind = \"transfer_fail\"\nrequest = 0\n");
    assert_ne!(status(&first), Some(200), "its first batch failed");
    assert_eq!(status(&first), status(&every));
    // The report names the entry that changed nothing, and how many batches its request had;
    // an entry that applied is not named.
    let unapplied = never.unapplied_script();
    assert_eq!(unapplied.len(), 1, "{unapplied:?}");
    assert!(
        unapplied[0] == ("faults.script[0] (transfer_fail at batch 99 of request 0) never applied: request 0 scheduled 7 transfer batches (0..6)"),
        "{}",
        unapplied[0]
    );
    let report = kvsim::report::Report::build(&never, String::new());
    assert!(report.text().contains("note: faults.script[0] (transfer_fail at batch 99"), "{}", report.text());
    assert!(first.unapplied_script().is_empty() && every.unapplied_script().is_empty());
    assert!(!kvsim::report::Report::build(&first, String::new()).text().contains("note:"));
    // So is a crash scheduled after the run's end (the run ends at quiescence, before it).
    let (late, _) =
        run("[[faults.script]]\nkind = \"crash\"\nnode = \"decode-0\"\nat_ms = 90000000\nrestart_after_ms = 10\n");
    assert_eq!(late.tracer.hash_hex(), clean.tracer.hash_hex());
    let end = late.ended_at().0;
    assert_eq!(
        late.unapplied_script(),
        vec![format!(
            "faults.script[0] (crash of decode-0 at 90000000 ms) never applied: the run ended at {}.{:03} s",
            end / 1_000_000_000,
            end / 1_000_000 % 1000
        )]
    );
    let (early, _) =
        run("[[faults.script]]\nkind = \"crash\"\nnode = \"decode-0\"\nat_ms = 1\nrestart_after_ms = 10\n");
    assert!(early.unapplied_script().is_empty(), "{:?}", early.unapplied_script());
    // Before the horizon the run goes on to a crash after every response; the note says it
    // changed none (the docs said "a crash after that never happens", and no note came).
    let (idle, _) =
        run("[[faults.script]]\nkind = \"crash\"\nnode = \"prefill-0\"\nat_ms = 999999\nrestart_after_ms = 10\n");
    assert_eq!(status(&idle), Some(200));
    assert!(idle.ended_at().0 >= 999_999_000_000, "the run went on to the crash");
    let notes = idle.unapplied_script();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("faults.script[0] (crash of prefill-0 at 999999 ms) came after every request had its response (the last at 0.")
            && notes[0].ends_with("it changed no response"),
        "{}",
        notes[0]
    );
    // A crash of a node an earlier scripted crash keeps down does nothing, and says so.
    let crash = |at: u64, back: u64| {
        format!("[[faults.script]]\nkind = \"crash\"\nnode = \"decode-0\"\nat_ms = {at}\nrestart_after_ms = {back}\n")
    };
    let (overlap, _) = run(&format!("{}{}", crash(0, 1000), crash(500, 10)));
    assert_eq!(
        overlap.unapplied_script(),
        vec!["faults.script[1] (crash of decode-0 at 500 ms) never applied: decode-0 is down then, crashed by faults.script[0] from 0 ms until its restart at 1000 ms".to_string()]
    );
    let (after, _) = run(&format!("{}{}", crash(0, 100), crash(500, 10)));
    // The second crash applies (decode-0 is back by then): not "never applied". The first one
    // failed the request at once, so the second came after its response, and says so.
    assert_eq!(
        after.unapplied_script(),
        vec!["faults.script[1] (crash of decode-0 at 500 ms) came after every request had its response (the last at 0.000 s): the run went on to it, and it changed no response".to_string()]
    );
    // `batch` is a field of request faults only.
    let bad = Scenario::parse(
        "one-batch.toml",
        &text("[[faults.script]]\nkind = \"metadata_lag\"\nrequest = 0\nlag_ms = 5\nbatch = 1\n"),
    )
    .and_then(|s| s.resolve(&Default::default()));
    let e = bad.expect_err("batch on a metadata lag").to_string();
    assert!(e.contains("faults.script[0].batch"), "{e}");
}

/// Shrinks `cfg` keeping `sig` as `kvsim shrink` does (`shrink::shrink`, with its read-share
/// bound), then shrinks the result again: the second shrink must accept nothing.
fn assert_fixpoint(cfg: &kvsim::config::SimConfig, sig: &str, what: &str) {
    let once = kvsim::shrink::shrink(cfg, sig, 3000);
    let twice = kvsim::shrink::shrink(&once.cfg, sig, 3000);
    assert!(once.runs < 3000, "{what}: the budget ran out");
    assert!(once.converged && twice.converged, "{what}: a pass that changed nothing ended both");
    assert_eq!(twice.cfg, once.cfg, "{what}, {sig}: shrinking again changed the case");
    assert_eq!(twice.accepted, 0, "{what}, {sig}");
}

/// A shrunk case is a fixpoint: shrinking it again, keeping the same failure, changes nothing.
/// (Before the passes ran until nothing changed, the last passes — closing idle gaps, dropping
/// prefix blocks — could free a request that only a further pass removed; and while a read's
/// shrunk share had to stay at half the original's, every shrink of a shrink halved the bound
/// again.) Checked on the first blind draws that fail, through `shrink::shrink` itself.
#[test]
fn shrinking_a_shrunk_case_changes_nothing() {
    let mut checked = 0;
    for seed in 1..400u64 {
        let cfg = kvsim::fuzz::draw(seed, &kvsim::fuzz::Space::Blind);
        let (_, sigs) = run_case(cfg.clone());
        let Some(sig) = sigs.iter().find(|s| !s.starts_with("event_limit")).cloned() else { continue };
        assert_fixpoint(&cfg, &sig, &format!("seed {seed}"));
        // A budget that ends shrinking first says so (the case may shrink further).
        let mut holds = |c: &kvsim::config::SimConfig| run_case(c.clone()).1.contains(&sig);
        let short = kvsim::shrink::shrink_with(&cfg, &mut holds, 3);
        assert!(!short.converged && short.runs <= 3, "seed {seed}: {} runs", short.runs);
        checked += 1;
        if checked == 6 {
            break;
        }
    }
    assert_eq!(checked, 6, "six failing draws in 400 seeds");
}

/// The case a walkthrough shrank twice: `stub-leak`'s cross-tenant read, 29 of 58 slots foreign
/// after one shrink, was cut to 13 of 49 by a second while the bound was half the input's share.
#[test]
fn shrinking_a_shrunk_read_keeps_its_share() {
    let cfg = load("small/stub-leak.toml", None, &[]);
    assert_fixpoint(&cfg, "cross_tenant_read/stub_commit", "stub-leak");
}
