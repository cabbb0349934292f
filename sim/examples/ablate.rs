//! Fault ablation of a swarm's signatures: which fault class each signature needs.
//!
//! For every seed of `0..RUNS` drawn from SPACE (`blind` or a profile name) that has signatures,
//! re-runs the same case with one fault class switched off at a time (random transfer failures,
//! delay spikes, visibility lag, node crashes, client aborts, the scripted faults — in swarm
//! draws these are the random metadata lag — and finally all of them) and counts, per signature,
//! the runs where it vanished. A signature that vanishes in every run without one class is that
//! class's mechanism; one that survives with every fault off (listed by seed) is fault-free.
//! This is how the entries of `known-bugs/*.toml` were tied to catalogue rows.
//!
//! ```sh
//! cargo run --release -p kvsim --example ablate -- sglang-0.5.22 20000
//! ```

use kvsim::config::SimConfig;
use kvsim::fuzz::{draw, run_case, Space};
use kvsim::types::Ratio;
use std::collections::BTreeMap;

const CLASSES: [&str; 7] =
    ["transfer_fail", "delay_spike", "visibility_lag", "node_crash", "client_abort", "script", "all"];

/// The case with fault class `i` of `CLASSES` switched off.
fn without(cfg: &SimConfig, i: usize) -> SimConfig {
    let mut c = cfg.clone();
    let all = i == CLASSES.len() - 1;
    let f = &mut c.faults;
    if i == 0 || all {
        f.transfer_fail = Ratio::NEVER;
    }
    if i == 1 || all {
        f.delay_spike = Ratio::NEVER;
    }
    if i == 2 || all {
        f.visibility_lag = Ratio::NEVER;
    }
    if i == 3 || all {
        f.node_crash = Ratio::NEVER;
    }
    if i == 5 || all {
        f.script.clear();
    }
    if i == 4 || all {
        if let Some(g) = c.generator.as_mut() {
            g.client_abort = Ratio::NEVER;
        }
        for r in c.requests.iter_mut() {
            r.abort_at_ns = None;
        }
    }
    c
}

#[derive(Default)]
struct Row {
    runs: u64,
    first: Option<u64>,
    vanished: [u64; CLASSES.len()],
    fault_free: Vec<u64>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(space), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse::<u64>())) else {
        eprintln!("usage: ablate blind|<profile> RUNS");
        std::process::exit(2);
    };
    let space = match space.as_str() {
        "blind" => Space::Blind,
        // The ablation asks which fault class each signature needs, the hardware ones included:
        // draw them as `kvsim fuzz --profile P --hardware-faults` does.
        p if kvsim::config::profile(p).is_some() => Space::Hardware(Box::new(Space::Profile(p.to_string()))),
        p => {
            eprintln!("{p}: not a profile{}", kvsim::config::unknown_profile_hint(p));
            std::process::exit(2);
        }
    };
    let mut table: BTreeMap<String, Row> = BTreeMap::new();
    for seed in 0..n {
        let cfg = draw(seed, &space);
        let (_, sigs) = run_case(cfg.clone());
        if sigs.is_empty() {
            continue;
        }
        let ablated: Vec<_> = (0..CLASSES.len()).map(|i| run_case(without(&cfg, i)).1).collect();
        for s in &sigs {
            let row = table.entry(s.clone()).or_default();
            row.runs += 1;
            row.first.get_or_insert(seed);
            for (i, a) in ablated.iter().enumerate() {
                if !a.contains(s) {
                    row.vanished[i] += 1;
                } else if i == CLASSES.len() - 1 && row.fault_free.len() < 3 {
                    row.fault_free.push(seed);
                }
            }
        }
    }
    let w = table.keys().map(String::len).max().unwrap_or(0).max(9);
    println!("{:<w$} {:>6} {:>6}  vanished without: {}", "signature", "runs", "first", CLASSES.join(" "));
    for (s, r) in &table {
        println!(
            "{s:<w$} {:>6} {:>6}  {:?} fault-free seeds {:?}",
            r.runs,
            r.first.unwrap_or_default(),
            r.vanished,
            r.fault_free
        );
    }
}
