//! TTFT against the cost model (BENCHMARKS.md, "Latency against the cost model"): a request's
//! first token needs its KV to land on decode, then the end of the step already running there,
//! then one full step of its own. A request that commits while a step runs is not in that step's
//! batch (`decode::DReq::late`).

use kvsim::scenario::{Overrides, Scenario};

/// 1P1D under sglang-0.5.22 with the default costs: request 0 alone at 0 ms (8 output tokens),
/// request 1 at `second_ms` (2 output tokens), both 512-token prompts of one tenant.
fn run(second_ms: u64) -> kvsim::world::World {
    let text = format!(
        r#"
name = "ttft"
seed = 1
profile = "sglang-0.5.22"
context_len = 32768
[[prefill]]
pool_tokens = 38400
[[decode]]
pool_tokens = 38400
[knobs]
page_size = 16
[[request]]
at_ms = 0
tenant = 0
prompt_tokens = 512
output_tokens = 8
[[request]]
at_ms = {second_ms}
tenant = 0
prompt_tokens = 512
output_tokens = 2
"#
    );
    let cfg = Scenario::parse("ttft.toml", &text)
        .and_then(|s| s.resolve(&Overrides::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    kvsim::simulate(cfg, None, false)
}

fn ttft(w: &kvsim::world::World, i: usize) -> u64 {
    let r = &w.reqs[i];
    r.first_token_at().expect("answered").0 - r.arrival().0
}

/// The default cost model, in ns (`Scenario::resolve`): a 512-token prompt's KV lands on decode
/// 200 µs (leg) + 200 µs (destination info) + 20.360 ms (forward: 5,000 µs + 512 × 30,000 ns) +
/// 1.934 ms (transfer: 500 µs + 35,840,000 B / 25,000 B/µs) + 200 µs (status) after arrival; a
/// decode step costs 25,000 µs + ⌊batch KV tokens / 1000⌋ × 2,000 ns.
const LAND: u64 = 22_893_600;
fn step(kv: u64) -> u64 {
    25_000_000 + kv / 1000 * 2_000
}

#[test]
fn the_first_token_costs_the_kv_landing_and_one_decode_step() {
    // Alone: it lands on an idle decode node, a step starts at once over its 512 tokens.
    let w = run(10_000);
    assert_eq!(ttft(&w, 0), LAND + step(512));
    assert_eq!(w.reqs[0].response().as_ref().map(|x| x.status), Some(200));
}

#[test]
fn a_request_landing_during_a_step_waits_for_it_and_then_one_step_of_its_own() {
    // Request 0's steps end at LAND + 25 ms, LAND + 50 ms, ...; request 1 (arriving at 30 ms)
    // lands at 30 ms + LAND, 20 ms into request 0's second step. Its first token comes at the end
    // of the step after that one, whose batch holds both (514 + 512 KV tokens): not when the step
    // it landed in ends (which would make its TTFT 25 ms shorter than any step).
    let w = run(30);
    let second_ends = LAND + 2 * step(512);
    assert!(30_000_000 + LAND < second_ends && 30_000_000 + LAND > second_ends - step(512));
    let first = second_ends + step(514 + 512);
    assert_eq!(w.reqs[1].first_token_at().expect("answered").0, first);
    assert_eq!(ttft(&w, 1), first - 30_000_000);
    assert!(ttft(&w, 1) >= LAND + step(512), "no first token cheaper than a landing and a step");
    assert!(w.reqs.iter().all(|r| r.response().as_ref().map(|x| x.status) == Some(200)));
}
