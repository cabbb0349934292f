//! How often blind swarm runs that can have the leak-abort-retracted row (`decode_out_of_pages =
//! retract_to_host`, `retracted_abort = leak`) retract a decode request at all, and how often a
//! request ends `Leaked` (that phase is shared with leak-abort-in-waiting's leak). Issue 15's
//! reach measurement: the row was not reached in the blind campaign, and this says why.
//!
//! ```sh
//! cargo run --release -p kvsim --example retract_probe -- 3000
//! ```

use kvsim::config::{DecodeOutOfPages, RetractedAbort};
use kvsim::decode::DPhase;
use kvsim::fuzz::{draw, Space};
use kvsim::trace::Tracer;
use kvsim::world::World;

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|x| x.parse().ok()).unwrap_or(3000);
    let (mut eligible, mut retracting, mut aborts_on, mut leaked) = (0u64, 0u64, 0u64, 0u64);
    for seed in 0..n {
        let cfg = draw(seed, &Space::Blind);
        let k = &cfg.knobs;
        if k.decode_out_of_pages != DecodeOutOfPages::RetractToHost || k.retracted_abort != RetractedAbort::Leak {
            continue;
        }
        eligible += 1;
        let aborts = cfg.generator.as_ref().is_some_and(|g| g.client_abort.num > 0);
        let mut w = World::new(cfg, Tracer::new(None));
        let (mut retracted, mut leak) = (false, false);
        while w.step() {
            retracted |= w.decode.iter().any(|d| !d.retracted().is_empty());
            leak |= w.decode.iter().any(|d| d.reqs().values().any(|r| r.phase() == DPhase::Leaked));
        }
        w.finish();
        retracting += u64::from(retracted);
        aborts_on += u64::from(retracted && aborts);
        if leak {
            leaked += 1;
            println!("a request ends Leaked: seed {seed}");
        }
    }
    println!(
        "blind seeds 0..{n}: {eligible} can have the row, {retracting} retract a request \
         ({aborts_on} of them with client aborts on), {leaked} leak"
    );
}
