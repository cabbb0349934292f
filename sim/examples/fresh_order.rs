//! Would running the swarm's draws in an order that favours new combinations of configuration
//! values find a rare signature sooner (issue 15: a guided campaign's fresh runs are the swarm's
//! draws in order)? For each campaign seed, draws the profile's swarm runs `0..N`, runs each to
//! know whether it meets the signature, then compares the first meeting run in the swarm's
//! order with the first in a greedy reordering: each step takes, among the next `W` draws not yet
//! taken, the one whose flattened configuration (every field, numbers bucketed by powers of two)
//! has the most value pairs no earlier taken draw had (ties: the earliest). Every draw is still
//! run once; only the order changes.
//!
//! ```sh
//! cargo run --release -p kvsim --example fresh_order -- sglang-0.5.22 \
//!   wrong_status/valid_request_failed/room_mismatch 3000 8
//! ```
use kvsim::fuzz::{draw, run_case, Space};
use std::collections::BTreeSet;

/// The configuration as `path=bucket` features (arrays by element path without index).
fn features(v: &serde_json::Value, path: &str, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "name" || k == "seed" {
                    continue;
                }
                features(x, &format!("{path}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            out.insert(format!("{path}#len={}", 64 - (a.len() as u64).leading_zeros()));
            for x in a {
                features(x, &format!("{path}[]"), out);
            }
        }
        serde_json::Value::Number(n) => {
            let b = n.as_u64().map_or(99, |u| 64 - u.leading_zeros());
            out.insert(format!("{path}={b}"));
        }
        x => {
            out.insert(format!("{path}={x}"));
        }
    }
}

fn pairs(f: &BTreeSet<String>) -> Vec<(usize, usize)> {
    // Hash each feature to an index; pairs of indices (the set is small).
    let ids: Vec<usize> = f
        .iter()
        .map(|s| s.bytes().fold(1469598103934665603u64, |h, b| (h ^ u64::from(b)).wrapping_mul(1099511628211)) as usize)
        .collect();
    let mut p = Vec::with_capacity(ids.len() * ids.len() / 2);
    for i in 0..ids.len() {
        for j in i + 1..ids.len() {
            p.push((ids[i].min(ids[j]), ids[i].max(ids[j])));
        }
    }
    p
}

fn main() {
    let mut a = std::env::args().skip(1);
    let (Some(profile), Some(sig)) = (a.next(), a.next()) else {
        eprintln!("usage: fresh_order PROFILE SIGNATURE [RUNS] [WINDOW] [SEEDS]");
        std::process::exit(2);
    };
    let n: u64 = a.next().and_then(|x| x.parse().ok()).unwrap_or(3000);
    let w: usize = a.next().and_then(|x| x.parse().ok()).unwrap_or(8);
    let seeds: u64 = a.next().and_then(|x| x.parse().ok()).unwrap_or(5);
    let space = if profile == "blind" { Space::Blind } else { Space::Profile(profile) };
    let (mut sum_swarm, mut sum_reordered) = (0u64, 0u64);
    for k in 0..seeds {
        let start = k * 1_000_003;
        let mut hits = Vec::new();
        let mut feats = Vec::new();
        for j in 0..n {
            let c = draw(start + j, &space);
            let mut f = BTreeSet::new();
            features(&serde_json::to_value(&c).expect("serialisable"), "", &mut f);
            feats.push(pairs(&f));
            hits.push(run_case(c).1.contains(&sig));
        }
        let first_swarm = hits.iter().position(|&h| h).map_or(n, |p| p as u64 + 1);
        // Only asked and extended, never iterated: its order cannot reach the output.
        #[allow(clippy::disallowed_types)]
        let mut seen: std::collections::HashSet<(usize, usize)> = Default::default();
        let mut left: Vec<usize> = (0..n as usize).collect();
        let mut first_reordered = n;
        let mut pos = 0u64;
        while !left.is_empty() {
            let window = w.min(left.len());
            let best = (0..window)
                .max_by_key(|&i| {
                    let novel = feats[left[i]].iter().filter(|p| !seen.contains(p)).count();
                    (novel, std::cmp::Reverse(i))
                })
                .expect("non-empty");
            let d = left.remove(best);
            pos += 1;
            seen.extend(feats[d].iter().copied());
            if hits[d] {
                first_reordered = pos;
                break;
            }
        }
        let total: usize = hits.iter().filter(|&&h| h).count();
        println!(
            "seed {k}: {total} of {n} draws meet it; first in swarm order {first_swarm}, reordered {first_reordered}"
        );
        sum_swarm += first_swarm;
        sum_reordered += first_reordered;
    }
    println!(
        "mean first: swarm {:.0}, reordered {:.0}",
        sum_swarm as f64 / seeds as f64,
        sum_reordered as f64 / seeds as f64
    );
}
