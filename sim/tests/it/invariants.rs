//! Every component's invariants after every event (a panic fails the test), over small scenarios,
//! every profile and a fault mix, with the differential oracle check on (the fast and the
//! reference oracle agree on every read); then liveness: once faults heal, every request ends.

use crate::load;
use kvsim::check::Kind;
use kvsim::simulate_checked;

#[test]
fn invariants_hold_under_faults_and_every_profile() {
    for profile in ["sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"] {
        for set in
            [vec![], vec![("chunked_prefill_size", "512"), ("free_list_policy", "lifo")], vec![("page_size", "1")]]
        {
            for s in ["small/stub-leak.toml", "small/mixed-faults.toml"] {
                let w = simulate_checked(load(s, Some(profile), &set), None, true);
                assert!(w.events() > 0);
                let rf = w.reference.as_ref().expect("checked");
                assert!(rf.reads > 0);
                assert_eq!(rf.disagreement_count, 0, "{profile} {set:?} {s}: {:?}", rf.disagreements.first());
                assert!(
                    !w.oracle.counts.contains_key(&Kind::RequestHang),
                    "{profile} {set:?} {s}: {:?}",
                    w.oracle.violations.iter().find(|v| v.kind == Kind::RequestHang)
                );
                if profile != "sglang-0.5.16" {
                    // A fixed build behind mini_lb answers a prefill-rejected prompt with decode's 500
                    // (rejected_answered_5xx: the router-waits-for-decode row); nothing else.
                    assert!(
                        !w.oracle
                            .violations
                            .iter()
                            .any(|v| v.kind == Kind::WrongStatus && v.cause != "rejected_answered_5xx"),
                        "{profile} {set:?} {s}"
                    );
                }
            }
        }
    }
}

/// The reference oracle's read memo (`check::reference`) is a cache: on every catalogue and small
/// scenario (late writes into reused pages, lagged landings, stale reads, crashes), each with its
/// own profile and with the buggy profile `sglang-0.5.16`, every memoised read equals the plain
/// re-read of the whole table (`verify_memo` panics otherwise).
#[test]
fn memoised_reference_reads_equal_plain_reads_on_the_shipped_scenarios() {
    let (mut reads, mut served) = (0u64, 0u64);
    for rel in crate::all_scenarios().into_iter().filter(|s| s.starts_with("catalogue/") || s.starts_with("small/")) {
        for profile in [None, Some("sglang-0.5.16")] {
            let (r, s) = kvsim::check::reference::Reference::run_verified(load(&rel, profile, &[]));
            reads += r;
            served += s;
        }
    }
    assert!(reads > 1_000 && served > 1_000, "reads {reads}, pages served by the memo {served}");
}
