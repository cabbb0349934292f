//! How often one guided mutation of a parent reaches a given signature, by what the parent is
//! (issue 15: why `--guided` does not find the last signature of `sglang-0.5.22` sooner than the
//! swarm). Draws the profile's swarm runs `0..N`; every run that meets the signature, every run
//! of a rarer class, and one in 20 of the commonest class is a parent of `M` one-mutation
//! children (`Recipe { root, [m] }`, the campaign's own mutations).
//!
//! Classes, by default, from the scenario: the stale-metadata-room conditions (a scripted metadata
//! lag of 500 ms or more, two metadata slots, an aborted request), a shorter lag with the other
//! two, or neither. With `landing`, from the run's coverage: the rarest metadata-landing edge it
//! took (`World::cover_meta_land`: a row landing in a free slot (class 0), its own request's (1),
//! or a slot another request holds (2 + that holder's decode phase), over a row or not).
//!
//! ```sh
//! cargo run --release -p kvsim --example mutation_yield -- sglang-0.5.22 \
//!   wrong_status/valid_request_failed/room_mismatch 3000 30 [landing]
//! ```
use kvsim::config::{ScriptedFault, SimConfig};
use kvsim::fuzz::guided::Recipe;
use kvsim::fuzz::{draw, run_case_full, Space};
use std::collections::BTreeMap;

/// The scenario's class (`None`: the commonest, sampled one in 20).
fn by_scenario(c: &SimConfig) -> Option<&'static str> {
    let lag = |min: u64| {
        c.faults.script.iter().any(|f| matches!(f, ScriptedFault::MetadataLag { lag_ms, .. } if *lag_ms >= min))
    };
    let two_slots = c.decode.iter().all(|d| d.metadata_slots <= 2);
    let abort = c.requests.iter().any(|r| r.abort_at_ns.is_some())
        || c.generator.as_ref().is_some_and(|g| !g.client_abort.is_never());
    match () {
        _ if lag(500) && two_slots && abort => Some("lag >= 500 ms, 2 slots, abort"),
        _ if lag(0) && two_slots && abort => Some("shorter lag, 2 slots, abort"),
        _ => None,
    }
}

/// The run's metadata-landing edge of highest class (`None`: only rows landing in their own slot,
/// or none).
fn by_landing(cov: &kvsim::coverage::Coverage) -> Option<String> {
    (0..8u64)
        .filter(|class| *class != 1)
        .flat_map(|class| (0..2u64).map(move |stale| (class, stale)))
        .filter(|(class, stale)| cov.was_hit(&[7, *class, *stale]))
        .map(|(class, stale)| format!("landing class {class}, over a row: {}", stale == 1))
        .next_back()
}

fn main() {
    let mut a = std::env::args().skip(1);
    let (Some(profile), Some(sig)) = (a.next(), a.next()) else {
        eprintln!("usage: mutation_yield PROFILE SIGNATURE [RUNS] [CHILDREN] [landing]");
        std::process::exit(2);
    };
    let n: u64 = a.next().and_then(|x| x.parse().ok()).unwrap_or(3000);
    let m: u64 = a.next().and_then(|x| x.parse().ok()).unwrap_or(30);
    let landing = a.next().as_deref() == Some("landing");
    let space = if profile == "blind" { Space::Blind } else { Space::Profile(profile) };
    // (parents, children, children that met the signature) per class.
    let mut classes: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    let mut swarm_hits = 0;
    for seed in 0..n {
        let c = draw(seed, &space);
        let (w, sigs) = run_case_full(c.clone(), false, false, false, landing);
        let hit = sigs.contains(&sig);
        swarm_hits += u64::from(hit);
        let class = match () {
            _ if hit => Some("meets it".to_string()),
            _ if landing => by_landing(w.coverage.as_ref().expect("on")),
            _ => by_scenario(&c).map(str::to_string),
        };
        if class.is_none() && seed % 20 != 0 {
            continue;
        }
        let e = classes.entry(class.unwrap_or_else(|| "other (1 in 20)".into())).or_default();
        e.0 += 1;
        for j in 0..m {
            let child = Recipe { root: seed, mutations: vec![seed * 1_000_003 + j] };
            e.1 += 1;
            e.2 += u64::from(run_case_full(child.build(&space), false, false, false, false).1.contains(&sig));
        }
    }
    println!("swarm: {swarm_hits} of {n} draws meet {sig}");
    for (name, (p, c, h)) in classes {
        println!(
            "{name:>40}: parents {p:>5}  children {c:>6}  meet it {h:>5}  ({:.3}%)",
            100.0 * h as f64 / c.max(1) as f64
        );
    }
}
