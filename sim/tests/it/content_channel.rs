//! The mitigations of the prefix-cache timing channel (issue 19): cache-hit timing padding,
//! selective sharing of public blocks, and the mitigation matrix's row for the attacker scenario.

use crate::common::load;
use kvsim::check::matrix::{Cell, Matrix, Mitigation};
use kvsim::config::{PrefixCacheScope, RequestSpec, SimConfig};
use kvsim::scenario::Scenario;

const ATTACK: &str = "catalogue/prefix-timing-channel.toml";

fn ttft(w: &kvsim::world::World, i: usize) -> u64 {
    let r = &w.reqs[i];
    r.first_token_at().expect("answered").0 - r.arrival().0
}

/// Padding: the attacker's right guess (request 2, a one-block hit on the victim's block) is
/// answered exactly as late as its wrong guess (request 1, a miss of the same length), while the
/// cache still serves the hit (the pages are shared; only the time is padded). Without padding
/// the hit is faster.
#[test]
fn padding_makes_a_hit_as_slow_as_a_miss_for_the_observer() {
    let plain = kvsim::simulate(load(ATTACK, None, &[("prefix_cache_scope", "global")]), None, false);
    assert_eq!((plain.reqs[1].prefix_reused(), plain.reqs[2].prefix_reused()), (0, 512));
    assert!(ttft(&plain, 2) < ttft(&plain, 1), "unpadded, the hit is faster");
    let cfg = load(ATTACK, None, &[("prefix_cache_scope", "global"), ("prefix_hit_timing", "padded_to_miss")]);
    let padded = kvsim::simulate(cfg.clone(), None, false);
    assert_eq!(padded.reqs[2].prefix_reused(), 512, "still a hit");
    assert_eq!(ttft(&padded, 2), ttft(&padded, 1), "hit and miss TTFT equal");
    assert_eq!(ttft(&padded, 1), ttft(&plain, 1), "the miss itself is unchanged");
    // The two-block probes: the right one (6) hits both blocks, the wrong ones (5, 7) one.
    assert_eq!(ttft(&padded, 6), ttft(&padded, 5));
    assert_eq!(ttft(&padded, 6), ttft(&padded, 7));
    assert!(kvsim::check::noninterference::check(&cfg, &padded, None).is_empty());
}

fn two_tenants(scope: &str, public: u32) -> SimConfig {
    let mut c = load(ATTACK, None, &[("prefix_cache_scope", scope)]);
    let req = |at_ms: u64, tenant: u32| RequestSpec {
        at_ns: at_ms * 1_000_000,
        tenant,
        prompt_tokens: 1025,
        output_tokens: 2,
        abort_at_ns: None,
        prefix_blocks: vec![5, 6],
        public_blocks: public,
        streaming: false,
    };
    c.requests = vec![req(0, 1), req(2000, 2), req(4000, 1)];
    c
}

/// `public_only` shares the blocks a request marks public across tenants and nothing else:
/// tenant 2 reuses tenant 1's public first block but not its private second one, which tenant 1
/// itself reuses later. `global` shares both, `per_tenant` neither.
#[test]
fn public_only_shares_public_blocks_across_tenants_but_not_private_ones() {
    let reused = |scope: &str, public: u32| {
        let w = kvsim::simulate(two_tenants(scope, public), None, false);
        (
            w.reqs[1].prefix_reused(),
            w.reqs[2].prefix_reused(),
            w.oracle.counts.keys().map(|k| k.name()).collect::<Vec<_>>(),
        )
    };
    let (cross, own, kinds) = reused("public_only", 1);
    assert_eq!((cross, own), (512, 1024), "public block shared, private block only within the tenant");
    assert!(kinds.is_empty(), "a block marked public is no cross-tenant hit: {kinds:?}");
    assert_eq!(reused("public_only", 0).0, 0, "nothing marked: nothing shared across tenants");
    assert_eq!(reused("per_tenant", 1).0, 0);
    assert_eq!(reused("global", 1).0, 1024);
    assert_eq!(two_tenants("public_only", 1).knobs.prefix_cache_scope, PrefixCacheScope::PublicOnly);
}

/// The noninterference check treats marked-public content as not secret (it is not varied), and
/// under `public_only` varying the private rest changes nothing another tenant observes.
#[test]
fn public_only_is_noninterferent_for_the_private_blocks() {
    let c = two_tenants("public_only", 1);
    let v = kvsim::check::noninterference::vary(&c, 1).expect("tenant 1 has private blocks");
    for (a, b) in c.requests.iter().zip(&v.requests).filter(|(a, _)| a.tenant == 1) {
        assert_eq!(a.prefix_blocks[0], b.prefix_blocks[0], "public block kept");
        assert_ne!(a.prefix_blocks[1], b.prefix_blocks[1], "private block varied");
    }
    let w = kvsim::simulate(c.clone(), None, false);
    assert!(kvsim::check::noninterference::check(&c, &w, Some(1)).is_empty());
    // The same under `global` leaks the private block to tenant 2.
    let g = two_tenants("global", 1);
    let wg = kvsim::simulate(g.clone(), None, false);
    let found = kvsim::check::noninterference::check(&g, &wg, Some(1));
    assert!(found.iter().any(|x| x.request.map(|r| r.0) == Some(1) && x.cause == "prefix_hit"), "{found:?}");
}

/// The matrix row of the attacker scenario: only the content-channel mitigations stop it (its
/// `buggy` expectation names `timing_channel`, so the matrix runs the noninterference check).
#[test]
fn the_matrix_shows_which_mitigation_stops_the_timing_channel() {
    let path = crate::common::scenarios_dir().join(ATTACK);
    let sc = Scenario::parse(&path.to_string_lossy(), &std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut m = Matrix::new(Mitigation::ALL.to_vec());
    m.add("prefix-timing-channel", &sc, None).unwrap();
    let row: Vec<(&str, Cell)> =
        m.mitigations.iter().map(|x| x.name()).zip(m.rows[0].1.iter().map(|v| v.cell)).collect();
    for (name, cell) in row {
        let want = if ["per_tenant_salt", "public_only", "hit_padding"].contains(&name) {
            Cell::Prevented
        } else {
            Cell::Missed
        };
        assert_eq!(cell, want, "{name}");
    }
}

/// Marking more blocks public than the request sends is a clear error naming the field.
#[test]
fn public_blocks_beyond_the_prompt_is_an_error() {
    let text = "name = \"x\"\nprofile = \"sglang-0.5.22\"\ncontext_len = 8192\n[[prefill]]\npool_tokens = 16384\n[[decode]]\npool_tokens = 16384\n[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 600\noutput_tokens = 1\nprefix_blocks = [3]\npublic_blocks = 2\n";
    let sc = Scenario::parse("x.toml", text).unwrap();
    let e = sc.resolve_with(&kvsim::scenario::Overrides::default(), None).unwrap_err().to_string();
    assert!(e.contains("public_blocks") && e.contains("2 public block(s) but only 1"), "{e}");
}

/// More prefix blocks than the prompt has (ceil(prompt_tokens / 512)) is a clear error naming
/// the field and line; as many as that, the last partial, is a prompt.
#[test]
fn prefix_blocks_beyond_the_prompt_is_an_error() {
    let text = |blocks: &str| {
        format!("name = \"x\"\nprofile = \"sglang-0.5.22\"\ncontext_len = 8192\n[[prefill]]\npool_tokens = 16384\n[[decode]]\npool_tokens = 16384\n[[request]]\nat_ms = 0\ntenant = 1\nprompt_tokens = 600\noutput_tokens = 1\nprefix_blocks = {blocks}\n")
    };
    let resolve = |blocks: &str| {
        Scenario::parse("x.toml", &text(blocks)).unwrap().resolve_with(&kvsim::scenario::Overrides::default(), None)
    };
    let e = resolve("[3, 4, 5]").unwrap_err().to_string();
    assert!(
        e.contains("x.toml:13: `request[0].prefix_blocks`")
            && e.contains("3 prefix block(s) but a 600-token prompt has 2 block(s) of 512 tokens"),
        "{e}"
    );
    assert_eq!(resolve("[3, 4]").unwrap().requests[0].prefix_blocks, vec![3, 4]);
}

/// Requests read from a trace mark public the leading blocks every tenant sends (Mooncake's
/// system-prompt block 0), nothing else.
#[test]
fn trace_requests_mark_the_blocks_every_tenant_sends() {
    let spec = |tenant: u32, blocks: Vec<u64>| RequestSpec {
        at_ns: 0,
        tenant,
        prompt_tokens: 2048,
        output_tokens: 1,
        abort_at_ns: None,
        prefix_blocks: blocks,
        public_blocks: 0,
        streaming: false,
    };
    let mut s = vec![spec(0, vec![0, 7, 8]), spec(1, vec![0, 9]), spec(2, vec![0, 7]), spec(1, vec![5])];
    kvsim::prefix::mark_public(&mut s);
    assert_eq!(s.iter().map(|r| r.public_blocks).collect::<Vec<_>>(), vec![1, 1, 1, 0]);
}

/// A hit in decode's radix cache is a prefix hit too (vLLM caches prefixes on decode by default:
/// `vllm-nixl`'s `decode_radix_cache = on`). Tenant 0's request is on decode when tenant 1's
/// arrives there (two prefill nodes: the two prompts are prefilled apart, so only decode's cache
/// can hit), and tenant 1 pulls one block less: its TTFT depends on tenant 0's prompt content,
/// and the check names the decode hit and its cacher. Before the forty-second session the check
/// looked at prefill's cache only and named the difference `allocation` (shrunk from a 60 s
/// `vllm-nixl --check noninterference` campaign, seed 53,056,115, which reported it as new).
/// Salted per tenant, nothing differs.
#[test]
fn a_decode_prefix_hit_is_named_as_a_prefix_hit() {
    let text = r#"
name = "decode-prefix-channel"
profile = "vllm-nixl"
context_len = 16384
[[prefill]]
pool_tokens = 576
[[prefill]]
pool_tokens = 576
[[decode]]
pool_tokens = 576
[router]
policy = "least_loaded"
[cost]
prefill_base_us = 1000
prefill_ns_per_token = 20000
decode_step_base_us = 10000
kv_bytes_per_token = 70000
transfer_latency_us = 500
transfer_bytes_per_us = 25000
[knobs]
chunked_prefill_size = 1024
page_size = 64
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 512
output_tokens = 1
prefix_blocks = [2]
[[request]]
at_ns = 340000
tenant = 1
prompt_tokens = 513
output_tokens = 1
prefix_blocks = [2]
"#;
    let resolve = |set: &[(&str, &str)]| resolve_with("decode-prefix-channel.toml", text, set);
    let c = resolve(&[]);
    let w = kvsim::simulate(c.clone(), None, false);
    assert_eq!(w.reqs[1].decode_prefix_tokens(), 512, "tenant 1 hits tenant 0's block on decode");
    assert_eq!(w.reqs[1].prefix_reused(), 0, "and nothing on prefill");
    let found = kvsim::check::noninterference::check(&c, &w, Some(0));
    assert!(!found.is_empty(), "tenant 1's TTFT depends on tenant 0's prompt");
    for v in &found {
        assert_eq!((v.cause.as_str(), v.request.map(|r| r.0)), ("prefix_hit", Some(1)), "{v:?}");
        assert_eq!(v.culprit.map(|c| c.request.0), Some(0), "{v:?}");
        // Each cache's count apart (their sum counted the same prompt tokens twice).
        assert!(
            v.detail.contains("prefill's prefix cache served 0 vs 0 of its prompt tokens and decode's 512 vs 0"),
            "{}",
            v.detail
        );
    }
    let salted = resolve(&[("prefix_cache_scope", "per_tenant")]);
    let w = kvsim::simulate(salted.clone(), None, false);
    assert!(kvsim::check::noninterference::check(&salted, &w, Some(0)).is_empty());
}

/// `text` (named `name` in errors) resolved with the knobs `set`.
fn resolve_with(name: &str, text: &str, set: &[(&str, &str)]) -> SimConfig {
    let o = kvsim::scenario::Overrides {
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    Scenario::parse(name, text).and_then(|s| s.resolve(&o)).expect("resolves")
}

/// A hit at a preempted request's resumption (vLLM's rules: `decode_resume`) counts as a prefix
/// hit too. Shrunk from a 5-minute `vllm-nixl --check noninterference --prefix-heavy` campaign
/// (seed 59,101,697): tenant 0's request is preempted and, resuming, locks block [3] that tenant
/// 1's request cached on decode (no cache salt), so tenant 1's timing depends on tenant 0's
/// prompt. The first report named it `allocation` (the resumption's hit was not counted). Tenant
/// 1's prompt was 1,021 tokens until vLLM's decode wrote one position earlier
/// (`decode_first_write = last_prompt_token`, forty-sixth session): it needed its next page a
/// step later, after tenant 0's request had finished, and nobody was preempted.
#[test]
fn a_resumptions_decode_prefix_hit_is_named_as_a_prefix_hit() {
    let text = &[
        r#"
name = "resumed-prefix-channel"
profile = "vllm-nixl"
context_len = 4096
[[prefill]]
pool_tokens = 1088
[[prefill]]
pool_tokens = 1088
[[decode]]
pool_tokens = 2112
[router]
policy = "least_loaded"
[knobs]
chunked_prefill_size = 1024
page_size = 64
transfer_sync_timeout_ms = 500
[[request]]
at_ns = 0
tenant = 0
prompt_tokens = 1025
output_tokens = 3
prefix_blocks = [3]
[[request]]
at_ns = 589000
tenant = 1
prompt_tokens = 1022
output_tokens = 5
prefix_blocks = [3]
"#,
        crate::FUZZ_COST,
    ]
    .concat();
    let resolve = |set: &[(&str, &str)]| resolve_with("resumed-prefix-channel.toml", text, set);
    let c = resolve(&[]);
    let w = kvsim::simulate(c.clone(), None, false);
    let (tokens, owner) = w.reqs[0].resumed_prefix();
    assert_eq!(tokens, 512, "tenant 0's request hits block [3] when it resumes");
    assert_eq!(owner.map(|(r, t)| (r.0, t.0)), Some((1, 1)), "tenant 1's copy");
    let found = kvsim::check::noninterference::check(&c, &w, Some(0));
    assert!(!found.is_empty(), "tenant 1's timing depends on tenant 0's prompt");
    for v in &found {
        assert!(v.cause.starts_with("prefix_hit"), "{v:?}");
    }
    let salted = resolve(&[("prefix_cache_scope", "per_tenant")]);
    let w = kvsim::simulate(salted.clone(), None, false);
    assert!(kvsim::check::noninterference::check(&salted, &w, Some(0)).is_empty());
}
