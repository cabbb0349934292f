//! Where a profile swarm's simulation time goes, by the deployment knobs that size a run
//! (`page_size`, `max_transfer_batch_pages`): runs, events and wall time per class.
//!
//! ```sh
//! cargo run --release -p kvsim --example swarm_cost -- sglang-0.5.16 2000
//! # one class alone (to profile it): KVSIM_CLASS=page_size,batch_pages
//! KVSIM_CLASS=1,4 cargo run --release -p kvsim --example swarm_cost -- sglang-0.5.16 1000
//! ```
//! (`blind` as the profile draws the blind space.) Runs only the simulation: no reference oracle,
//! invariant checks or saved examples, which a campaign adds.

use kvsim::fuzz::{draw, Space};
use kvsim::trace::Tracer;
use kvsim::world::World;
use std::collections::BTreeMap;
use std::time::Instant;

#[allow(clippy::disallowed_methods)] // times real work; the virtual-time rule is the model's
fn main() {
    let mut args = std::env::args().skip(1);
    let profile = args.next().unwrap_or_else(|| "sglang-0.5.16".into());
    let n: u64 = args.next().and_then(|x| x.parse().ok()).unwrap_or(2000);
    // `KVSIM_CLASS=1,4` runs only that (page_size, batch_pages) class (to profile it alone).
    let only: Option<(u64, u64)> = std::env::var("KVSIM_CLASS").ok().and_then(|c| {
        let (a, b) = c.split_once(',')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    });
    let space = if profile == "blind" { Space::Blind } else { Space::Profile(profile) };
    let mut by: BTreeMap<(u64, u64), (u64, u64, f64)> = BTreeMap::new();
    let mut total = (0u64, 0f64);
    for seed in 0..n {
        let cfg = draw(seed, &space);
        let key = (cfg.knobs.page_size, cfg.knobs.max_transfer_batch_pages);
        if only.is_some_and(|o| o != key) {
            continue;
        }
        let t = Instant::now();
        let mut w = World::new(cfg, Tracer::new(None));
        let mut events = 0u64;
        while w.step() {
            events += 1;
        }
        let s = t.elapsed().as_secs_f64();
        let e = by.entry(key).or_default();
        e.0 += 1;
        e.1 += events;
        e.2 += s;
        total.0 += events;
        total.1 += s;
    }
    println!("{n} runs: {} events, {:.3} s ({:.0} runs/s)", total.0, total.1, n as f64 / total.1);
    println!("page_size batch_pages   runs    events  share_of_time  us/run");
    for ((ps, b), (runs, ev, s)) in by {
        println!("{ps:>9} {b:>11} {runs:>6} {ev:>9} {:>13.1}% {:>7.0}", 100.0 * s / total.1, 1e6 * s / runs as f64);
    }
}
