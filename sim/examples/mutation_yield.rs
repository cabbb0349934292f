//! How often one guided mutation of a parent reaches a given signature, by what the parent is
//! (issue 15: why `--guided` does not find the last signature of `sglang-0.5.22` sooner than the
//! swarm). Draws the profile's swarm runs `0..N`; every run that meets the signature, every run
//! with the stale-metadata-room conditions (a scripted metadata lag of 500 ms or more, two
//! metadata slots, an aborted request), every run with a shorter lag and the other two, and one
//! in 20 of the rest is a parent of `M` one-mutation children (`Recipe { root, [m] }`, the
//! campaign's own mutations).
//!
//! ```sh
//! cargo run --release -p kvsim --example mutation_yield -- sglang-0.5.22 \
//!   wrong_status/valid_request_failed/room_mismatch 3000 30
//! ```
use kvsim::config::ScriptedFault;
use kvsim::fuzz::guided::Recipe;
use kvsim::fuzz::{draw, run_case, Space};

fn main() {
    let mut a = std::env::args().skip(1);
    let (Some(profile), Some(sig)) = (a.next(), a.next()) else {
        eprintln!("usage: mutation_yield PROFILE SIGNATURE [RUNS] [CHILDREN]");
        std::process::exit(2);
    };
    let n: u64 = a.next().and_then(|x| x.parse().ok()).unwrap_or(3000);
    let m: u64 = a.next().and_then(|x| x.parse().ok()).unwrap_or(30);
    let space = if profile == "blind" { Space::Blind } else { Space::Profile(profile) };
    // (parents, children, children that met the signature) per class.
    let mut classes = [(0u64, 0u64, 0u64); 4];
    let mut swarm_hits = 0;
    for seed in 0..n {
        let c = draw(seed, &space);
        let hit = run_case(c.clone()).1.contains(&sig);
        swarm_hits += u64::from(hit);
        let lag = |min: u64| {
            c.faults.script.iter().any(|f| matches!(f, ScriptedFault::MetadataLag { lag_ms, .. } if *lag_ms >= min))
        };
        let two_slots = c.decode.iter().all(|d| d.metadata_slots <= 2);
        let abort = c.requests.iter().any(|r| r.abort_at_ns.is_some())
            || c.generator.as_ref().is_some_and(|g| !g.client_abort.is_never());
        let class = match () {
            _ if hit => 0,
            _ if lag(500) && two_slots && abort => 1,
            _ if lag(0) && two_slots && abort => 2,
            _ => 3,
        };
        if class == 3 && seed % 20 != 0 {
            continue;
        }
        let e = &mut classes[class];
        e.0 += 1;
        for j in 0..m {
            let child = Recipe { root: seed, mutations: vec![seed * 1_000_003 + j] };
            e.1 += 1;
            e.2 += u64::from(run_case(child.build(&space)).1.contains(&sig));
        }
    }
    println!("swarm: {swarm_hits} of {n} draws meet {sig}");
    let names = ["meets it", "lag >= 500 ms, 2 slots, abort", "shorter lag, 2 slots, abort", "other (1 in 20)"];
    for (name, (p, c, h)) in names.iter().zip(classes) {
        println!(
            "{name:>30}: parents {p:>5}  children {c:>6}  meet it {h:>5}  ({:.3}%)",
            100.0 * h as f64 / c.max(1) as f64
        );
    }
}
