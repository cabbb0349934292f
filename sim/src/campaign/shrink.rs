//! Shrinking: reduce a failing configuration to a small one with the same signature. Removes
//! requests (delta debugging), nodes (any of them), faults and client aborts; closes idle gaps
//! between arrivals; cuts prefix blocks; merges tenants; shortens prompts, outputs, prefix-block
//! lists and pools by binary search (so thresholds that matter are kept exactly); switches each
//! behaviour knob to its fixed value when the failure does not need it. Every step is
//! deterministic: the same input and signature give the same output.

use crate::config::{self, ScriptedFault, SimConfig};
use crate::fuzz::signatures;
use crate::types::Ratio;

/// The shrunk configuration and how it was reached.
#[derive(Clone, Debug)]
pub struct Shrunk {
    pub cfg: SimConfig,
    pub runs: u32,
    pub accepted: u32,
    /// Behaviour knobs whose buggy value the failure needs (switching them to the value of
    /// `judged_against` makes it disappear).
    pub necessary_knobs: Vec<String>,
    /// Behaviour knobs that differ from `judged_against` but were not judged because the run
    /// budget was spent first (`name=value`): they may or may not be necessary.
    pub unjudged_knobs: Vec<String>,
    /// Whether shrinking stopped because a whole pass changed nothing, within the budget. When
    /// false the run budget (or the pass limit) ended it first, and shrinking the result again
    /// may shrink it further.
    pub converged: bool,
    /// The fixed profile the knobs were judged against: the configuration's own profile's fixed
    /// build (`config::Profile::fixed`; itself for a fixed profile), `sglang-0.5.22` for an
    /// unknown profile name.
    pub judged_against: &'static str,
}

/// The fixed profile a configuration's knobs are judged against (see `Shrunk::judged_against`).
pub fn fixed_profile_for(cfg: &SimConfig) -> &'static config::Profile {
    let name = config::profile(&cfg.profile).map_or("sglang-0.5.22", |p| p.fixed);
    config::profile(name).expect("a profile's fixed build is shipped")
}

/// Knobs the shrinker may switch to the fixed profile's value (`fixed_profile_for`): the
/// engine's behaviour, not the deployment's shape (`fuzz::table::DEPLOYMENT_KNOBS`:
/// `max_transfer_batch_pages` was listed, and "necessary against sglang-0.5.22" read as a fix
/// where both builds have the same value and the campaign drew another).
const BEHAVIOUR_KNOBS: &[&str] = &[
    "reject_mode",
    "pd_admission_check",
    "prefill_post_forward_abort_check",
    "inflight_success_keeps_abort",
    "decode_prealloc_abort_check",
    "decode_commit_check",
    "decode_abort_release",
    "prefill_abort_release",
    "transfer_timeout_semantics",
    "free_list_policy",
    "zero_on_free",
    "prefill_cache",
    "router_mode",
    "router_on_prefill_error",
    "prefill_abort_notifies_decode",
    "metadata_zero_on_free",
    "decode_transferred_abort",
    "prefill_rejected_release",
    "prefill_failed_check",
    "cancel_mid_transfer",
    "decode_lookahead_tokens",
    "decode_out_of_pages",
    "decode_admission",
    "decode_loads_hold_slots",
    "prefill_checkpoint_duplicates",
    "decode_prefix_rules",
    "decode_first_write",
    "decode_abort_heartbeat",
    "retracted_abort",
    "retraction_host_pool",
    "decode_radix_cache",
    "zero_page_last_chunk",
    "pp_metadata_writer",
    "pp_bootstrap_consensus",
    "decode_reject_releases_prefill",
    "kv_checksum",
    "kv_canary",
    "page_tags",
    // An operator's setting, not a deployment's shape, that a profile's campaign draws shorter
    // in half its runs (`fuzz::draw_release_fallback`): a case that needs the shorter fallback
    // says so ("necessary knobs: deferred_release_timeout_ms=1000"), one that does not is set back
    // to the release's 30 s.
    "deferred_release_timeout_ms",
    // Likewise the source lease of a profile behind the sequential router
    // (`fuzz::draw_source_lease`): set back to the profile's 30 s unless the case needs the 5 s.
    "source_lease_ms",
];

struct Shrinker<'a> {
    sig: String,
    /// A property to keep instead of the signature of a plain run (`shrink_with`).
    custom: Option<&'a mut dyn FnMut(&SimConfig) -> bool>,
    runs: u32,
    accepted: u32,
    budget: u32,
    /// For read signatures: the shrunk read must still be at least this many permille foreign
    /// (`min_permille_for` the original's best), so shrinking keeps a leak a leak instead of
    /// one stray slot.
    min_permille: u64,
    /// Knobs never set back to the fixed build (`shrink_keeping`: a campaign's `--set` pins).
    keep_knobs: Vec<String>,
}

/// How foreign (permille of the read) a shrunk case's worst read of the signature must stay,
/// given the original's worst (`best`): as foreign as the original's, up to half the read. The
/// bound is its own fixed point (a case that meets it is held to the same bound, or a higher
/// one, when it is shrunk again), so an output shrunk until a pass changed nothing is one that
/// shrinking again leaves as it is. Half the original's share, the bound before, halved again
/// on every shrink of a shrink: a second shrink of `scenarios/small/stub-leak.toml`'s output
/// (29 of 58 slots foreign) cut it to 13 of 49.
fn min_permille_for(best: u64) -> u64 {
    best.min(500)
}

/// The largest share (permille of the read) of offending slots among `sig`'s violations.
fn best_permille(w: &crate::world::World, sig: &str) -> u64 {
    w.oracle
        .violations
        .iter()
        .filter(|v| format!("{}/{}", v.kind.name(), v.cause) == sig && v.seq_len > 0)
        .map(|v| v.slots.saturating_mul(1000) / v.seq_len)
        .max()
        .unwrap_or(0)
}

impl Shrinker<'_> {
    fn holds(&mut self, cfg: &SimConfig) -> bool {
        if self.runs >= self.budget {
            return false;
        }
        self.runs += 1;
        if let Some(f) = self.custom.as_mut() {
            let ok = f(cfg);
            self.accepted += u32::from(ok);
            return ok;
        }
        let w = crate::fuzz::simulate_for(cfg.clone(), &self.sig);
        let ok = signatures(&w).contains(&self.sig) && best_permille(&w, &self.sig) >= self.min_permille;
        self.accepted += u32::from(ok);
        ok
    }

    /// Tries `cand`; keeps it in `cur` when the signature holds.
    fn attempt(&mut self, cur: &mut SimConfig, cand: SimConfig) -> bool {
        if cand != *cur && self.holds(&cand) {
            *cur = cand;
            true
        } else {
            false
        }
    }
}

/// Expands the generator into explicit requests, so that requests can be removed one by one.
pub fn explicit(cfg: &SimConfig) -> SimConfig {
    let mut c = cfg.clone();
    c.requests = crate::client::in_id_order(cfg);
    c.generator = None;
    c
}

/// Removes the requests at `drop` (sorted indices), remapping scripted request faults.
fn without_requests(cfg: &SimConfig, drop: &[usize]) -> SimConfig {
    let mut c = cfg.clone();
    let keep: Vec<bool> = (0..cfg.requests.len()).map(|i| drop.binary_search(&i).is_err()).collect();
    c.requests = cfg.requests.iter().zip(&keep).filter(|(_, k)| **k).map(|(r, _)| r.clone()).collect();
    let mut new_id = vec![None; cfg.requests.len()];
    let mut n = 0u32;
    for (i, k) in keep.iter().enumerate() {
        if *k {
            new_id[i] = Some(n);
            n += 1;
        }
    }
    c.faults.script = cfg
        .faults
        .script
        .iter()
        .filter_map(|f| match f.request() {
            Some(r) => new_id.get(r as usize).copied().flatten().map(|to| f.with_request(to)),
            None => Some(f.clone()),
        })
        .collect();
    c
}

fn remove_requests(s: &mut Shrinker, cur: &mut SimConfig) {
    let mut chunk = cur.requests.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        while i < cur.requests.len() && cur.requests.len() > 1 {
            let end = (i + chunk).min(cur.requests.len());
            let drop: Vec<usize> = (i..end).collect();
            if !s.attempt(cur, without_requests(cur, &drop)) {
                i += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
}

/// `cfg` without node `index` of `role` ("prefill" or "decode"): its scripted crashes go, and
/// the crashes of the nodes after it follow their node to its new name (`prefill-2` becomes
/// `prefill-1` when `prefill-0` goes).
fn without_node(cfg: &SimConfig, role: &str, index: usize) -> SimConfig {
    let mut c = cfg.clone();
    if role == "prefill" {
        c.prefill.remove(index);
    } else {
        c.decode.remove(index);
    }
    let renamed = |node: &str| -> Option<String> {
        let i: usize = node.strip_prefix(role)?.strip_prefix('-')?.parse().ok()?;
        Some(if i > index { format!("{role}-{}", i - 1) } else { node.to_string() })
    };
    c.faults.script.retain(|f| !matches!(f, ScriptedFault::Crash { node, .. } if *node == format!("{role}-{index}")));
    for f in &mut c.faults.script {
        if let ScriptedFault::Crash { node, .. } = f {
            if let Some(n) = renamed(node) {
                *node = n;
            }
        }
    }
    c
}

/// Removes nodes of either role, any of them (not only the last: a case can need the second
/// decode node's pool and not the first's), the last first.
fn remove_nodes(s: &mut Shrinker, cur: &mut SimConfig) {
    for role in ["prefill", "decode"] {
        let count = |c: &SimConfig| if role == "prefill" { c.prefill.len() } else { c.decode.len() };
        // From the last down: a removal shifts only the nodes after `i`, which were tried.
        for i in (0..count(cur)).rev() {
            if count(cur) > 1 {
                s.attempt(cur, without_node(cur, role, i));
            }
        }
    }
}

fn remove_faults(s: &mut Shrinker, cur: &mut SimConfig) {
    for i in 0..5 {
        let mut c = cur.clone();
        let r = match i {
            0 => &mut c.faults.transfer_fail,
            1 => &mut c.faults.delay_spike,
            2 => &mut c.faults.visibility_lag,
            3 => &mut c.faults.node_crash,
            _ => {
                if let Some(g) = c.generator.as_mut() {
                    g.client_abort = Ratio::NEVER;
                }
                &mut c.faults.node_crash
            }
        };
        if !r.is_never() || i == 4 {
            *r = Ratio::NEVER;
            s.attempt(cur, c);
        }
    }
    // Scripted faults by delta debugging, as requests: a case whose random faults were scripted
    // batch by batch can list dozens (every delay spike that fired), of which it needs a few.
    let mut chunk = cur.faults.script.len().div_ceil(2).max(1);
    while !cur.faults.script.is_empty() {
        let mut i = 0;
        while i < cur.faults.script.len() {
            let end = (i + chunk).min(cur.faults.script.len());
            let mut c = cur.clone();
            c.faults.script.drain(i..end);
            if !s.attempt(cur, c) {
                i += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    for i in 0..cur.requests.len() {
        if cur.requests[i].abort_at_ns.is_some() {
            let mut c = cur.clone();
            c.requests[i].abort_at_ns = None;
            s.attempt(cur, c);
        }
    }
}

/// Turns the random faults a case still needs into the scripted faults they fired as
/// (`World::fired_faults`): the probabilities go to zero and each fired fault becomes a script
/// entry naming its request (or node and millisecond), so the shrunk case fails the same way
/// without depending on the fault draws, and `remove_faults` can then drop the entries it does
/// not need one by one. Kept only when the failure still holds: a scripted fault applies to
/// every batch of its request, a random one to the batch it was drawn for.
fn script_random_faults(s: &mut Shrinker, cur: &mut SimConfig) -> bool {
    let f = &cur.faults;
    if [f.transfer_fail, f.delay_spike, f.visibility_lag, f.node_crash].iter().all(|r| r.is_never()) {
        return false;
    }
    let w = crate::fuzz::simulate_for(cur.clone(), &s.sig);
    let mut c = cur.clone();
    for r in
        [&mut c.faults.transfer_fail, &mut c.faults.delay_spike, &mut c.faults.visibility_lag, &mut c.faults.node_crash]
    {
        *r = Ratio::NEVER;
    }
    let scripted = |fired: &mut dyn Iterator<Item = ScriptedFault>| {
        let mut c = c.clone();
        for f in fired {
            if !c.faults.script.contains(&f) {
                c.faults.script.push(f);
            }
        }
        c
    };
    // First each fault as a fault of its whole request (the shorter script: a failure or lag of
    // every batch, a delay of the first), then, when the case needs the draws' own batches, each
    // on the batch it fired on.
    let whole = scripted(&mut w.fired_faults.iter().map(ScriptedFault::of_request));
    if s.attempt(cur, whole) {
        return true;
    }
    let by_batch = scripted(&mut w.fired_faults.iter().cloned());
    s.attempt(cur, by_batch)
}

/// Merges the scripted delays of each request (a case whose delay spikes were scripted batch by
/// batch can need dozens of them only for their sum: a transfer that outlives a timeout) into one
/// delay of their sum, first of the request's first batch, else of the batch the first of them
/// named; then shortens each delay by binary search (the threshold it crosses is kept exactly).
fn merge_delays(s: &mut Shrinker, cur: &mut SimConfig) {
    let delay_of = |f: &ScriptedFault| match *f {
        ScriptedFault::Delay { request, delay_ms } => Some((request, None, delay_ms)),
        ScriptedFault::DelayAt { request, batch, delay_ms } => Some((request, Some(batch), delay_ms)),
        _ => None,
    };
    let mut requests: Vec<u32> = cur.faults.script.iter().filter_map(|f| delay_of(f).map(|d| d.0)).collect();
    requests.sort_unstable();
    requests.dedup();
    for r in requests {
        let delays: Vec<(Option<u32>, u64)> =
            cur.faults.script.iter().filter_map(|f| delay_of(f).filter(|d| d.0 == r).map(|d| (d.1, d.2))).collect();
        if delays.len() > 1 {
            let sum = delays.iter().fold(0u64, |a, d| a.saturating_add(d.1));
            let merged = |cur: &SimConfig, one: ScriptedFault| {
                let mut c = cur.clone();
                let at = c.faults.script.iter().position(|f| delay_of(f).is_some_and(|d| d.0 == r)).expect("listed");
                c.faults.script.retain(|f| delay_of(f).is_none_or(|d| d.0 != r));
                // Every delay of `r` was at `at` or after it: the entries before it stay put.
                c.faults.script.insert(at, one);
                c
            };
            let first = merged(cur, ScriptedFault::Delay { request: r, delay_ms: sum });
            if !s.attempt(cur, first) {
                if let Some(batch) = delays[0].0 {
                    let c = merged(cur, ScriptedFault::DelayAt { request: r, batch, delay_ms: sum });
                    s.attempt(cur, c);
                }
            }
        }
    }
    for i in 0..cur.faults.script.len() {
        let Some((_, _, d)) = delay_of(&cur.faults.script[i]) else { continue };
        bisect(s, cur, 1, d, &|c, v| {
            let mut c = c.clone();
            if let ScriptedFault::Delay { delay_ms, .. } | ScriptedFault::DelayAt { delay_ms, .. } =
                &mut c.faults.script[i]
            {
                *delay_ms = v;
            }
            c
        });
    }
}

/// Moves the first arrival to time 0. Not with a scripted crash (its time is absolute).
fn compress_time(s: &mut Shrinker, cur: &mut SimConfig) {
    if cur.requests.is_empty() || cur.faults.script.iter().any(|f| matches!(f, ScriptedFault::Crash { .. })) {
        return;
    }
    let first = cur.requests.iter().map(|r| r.at_ns).min().expect("not empty");
    let c = shifted(cur, first, first);
    s.attempt(cur, c);
}

/// `cfg` with every request arriving at or after `from` moved `by` earlier, its client abort
/// with it.
fn shifted(cfg: &SimConfig, from: u64, by: u64) -> SimConfig {
    let mut c = cfg.clone();
    for r in c.requests.iter_mut().filter(|r| r.at_ns >= from) {
        r.at_ns -= by;
        r.abort_at_ns = r.abort_at_ns.map(|a| a.saturating_sub(by));
    }
    c
}

/// Closes the idle gap before each arrival after the first (in arrival order) where the failure
/// does not need it: the request and every later one move earlier by the gap. Run once the
/// rounds have removed what they can: closing a gap first can make a request that only filled
/// it necessary (measured on 100 campaign examples: three kept one request more). Not with a
/// scripted crash.
fn close_gaps(s: &mut Shrinker, cur: &mut SimConfig) {
    if cur.faults.script.iter().any(|f| matches!(f, ScriptedFault::Crash { .. })) {
        return;
    }
    let mut i = 1;
    loop {
        let mut at: Vec<u64> = cur.requests.iter().map(|r| r.at_ns).collect();
        at.sort_unstable();
        at.dedup();
        let Some((&prev, &next)) = at.get(i - 1).zip(at.get(i)) else { break };
        let c = shifted(cur, next, next - prev);
        s.attempt(cur, c);
        i += 1;
    }
}

/// Clears each request's prefix blocks where the failure does not need them, else keeps only
/// as many leading blocks as it needs (binary search), and marks none public where it can.
fn shrink_prefixes(s: &mut Shrinker, cur: &mut SimConfig) {
    for i in 0..cur.requests.len() {
        let n = cur.requests[i].prefix_blocks.len() as u64;
        if n == 0 {
            continue;
        }
        bisect(s, cur, 0, n, &|c, v| {
            let mut c = c.clone();
            let r = &mut c.requests[i];
            r.prefix_blocks.truncate(v as usize);
            r.public_blocks = r.public_blocks.min(v as u32);
            c
        });
        if cur.requests[i].public_blocks > 0 {
            let mut c = cur.clone();
            c.requests[i].public_blocks = 0;
            s.attempt(cur, c);
        }
    }
}

fn merge_tenants(s: &mut Shrinker, cur: &mut SimConfig) {
    let mut tenants: Vec<u32> = cur.requests.iter().map(|r| r.tenant).collect();
    tenants.sort();
    tenants.dedup();
    // Renumber densely in order of first appearance: tenant 0, 1, …
    let mut order: Vec<u32> = Vec::new();
    for r in &cur.requests {
        if !order.contains(&r.tenant) {
            order.push(r.tenant);
        }
    }
    let mut c = cur.clone();
    for r in &mut c.requests {
        r.tenant = order.iter().position(|t| *t == r.tenant).expect("listed") as u32;
    }
    s.attempt(cur, c);
    for t in 1..order.len() as u32 {
        for into in 0..t {
            let mut c = cur.clone();
            let mut changed = false;
            for r in &mut c.requests {
                if r.tenant == t {
                    r.tenant = into;
                    changed = true;
                }
            }
            if changed && s.attempt(cur, c) {
                break;
            }
        }
    }
}

/// Smallest value in `lo..=cur` for which `make(v)` keeps the signature (binary search).
fn bisect(s: &mut Shrinker, cur: &mut SimConfig, lo: u64, hi: u64, make: &dyn Fn(&SimConfig, u64) -> SimConfig) {
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if s.attempt(cur, make(cur, mid)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
}

fn shorten(s: &mut Shrinker, cur: &mut SimConfig) {
    for i in 0..cur.requests.len() {
        let p = cur.requests[i].prompt_tokens;
        bisect(s, cur, 1, p, &|c, v| {
            let mut c = c.clone();
            let r = &mut c.requests[i];
            r.prompt_tokens = v;
            // The prompt's blocks go with its tokens (a scenario refuses more blocks than the
            // prompt has); the model never reads the blocks past a prompt's end, so the run is
            // the same with or without them.
            r.prefix_blocks.truncate(v.div_ceil(crate::prefix::BLOCK_TOKENS) as usize);
            r.public_blocks = r.public_blocks.min(r.prefix_blocks.len() as u32);
            c
        });
        let o = cur.requests[i].output_tokens;
        bisect(s, cur, 1, o, &|c, v| {
            let mut c = c.clone();
            c.requests[i].output_tokens = v;
            c
        });
    }
    let ps = cur.knobs.page_size;
    for role in 0..2 {
        let n = if role == 0 { cur.prefill.len() } else { cur.decode.len() };
        for i in 0..n {
            let pages = if role == 0 { cur.prefill[i].pool_tokens } else { cur.decode[i].pool_tokens } / ps;
            bisect(s, cur, 1, pages, &|c, v| {
                let mut c = c.clone();
                let node = if role == 0 { &mut c.prefill[i] } else { &mut c.decode[i] };
                node.pool_tokens = v * ps;
                c
            });
        }
    }
}

/// Each behaviour knob that differs from the fixed build, switched to the fixed value where the
/// failure stays: (necessary, not judged). A knob the spent budget leaves untried is not judged
/// (a refused attempt would otherwise call it necessary).
fn fix_knobs(s: &mut Shrinker, cur: &mut SimConfig) -> (Vec<String>, Vec<String>) {
    let fixed = toml::Table::try_from((fixed_profile_for(cur).knobs)()).expect("serialise");
    let (mut necessary, mut unjudged) = (Vec::new(), Vec::new());
    for name in BEHAVIOUR_KNOBS {
        let mine = toml::Table::try_from(&cur.knobs).expect("serialise");
        if mine[*name] == fixed[*name] || s.keep_knobs.iter().any(|k| k == name) {
            continue;
        }
        if s.runs >= s.budget {
            unjudged.push(format!("{name}={}", mine[*name]));
            continue;
        }
        let mut t = mine.clone();
        t.insert(name.to_string(), fixed[*name].clone());
        let mut c = cur.clone();
        c.knobs = t.try_into().expect("profile values are valid");
        if !s.attempt(cur, c) {
            necessary.push(format!("{name}={}", mine[*name]));
        }
    }
    (necessary, unjudged)
}

/// Shrinks `cfg` keeping `sig`, within `budget` runs.
pub fn shrink(cfg: &SimConfig, sig: &str, budget: u32) -> Shrunk {
    shrink_keeping(cfg, sig, budget, &[])
}

/// `shrink`, never setting the knobs named in `keep` back to the fixed build: a campaign's
/// `--set` pins (`pinned_knobs`) are part of its space, so its shrunk cases keep them, whether
/// or not the failure needs them (they are not judged as necessary knobs either).
pub fn shrink_keeping(cfg: &SimConfig, sig: &str, budget: u32, keep: &[String]) -> Shrunk {
    let cur = explicit(cfg);
    let original = crate::fuzz::simulate_for(cur.clone(), sig);
    let min_permille = min_permille_for(best_permille(&original, sig));
    let s = Shrinker {
        sig: sig.to_string(),
        custom: None,
        runs: 0,
        accepted: 0,
        budget,
        min_permille,
        keep_knobs: keep.to_vec(),
    };
    run_shrinker(s, cur)
}

/// The knobs a campaign's space name pins (`…+set:k=v,k2=v2`, `KnobPins::label`), by name.
pub fn pinned_knobs(space_name: &str) -> Vec<String> {
    let Some((_, rest)) = space_name.split_once("+set:") else { return Vec::new() };
    let label = rest.split('+').next().unwrap_or_default();
    label.split(',').filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string())).collect()
}

/// Shrinks `cfg` keeping `holds` (e.g. "exploration still finds a violation"), within `budget`
/// calls of it; the same steps as `shrink`.
pub fn shrink_with(cfg: &SimConfig, holds: &mut dyn FnMut(&SimConfig) -> bool, budget: u32) -> Shrunk {
    shrink_with_keeping(cfg, holds, budget, &[])
}

/// `shrink_with`, never setting the knobs named in `keep` back to the fixed build (the
/// command's `--set` pins, as `shrink_keeping`).
pub fn shrink_with_keeping(
    cfg: &SimConfig,
    holds: &mut dyn FnMut(&SimConfig) -> bool,
    budget: u32,
    keep: &[String],
) -> Shrunk {
    let s = Shrinker {
        sig: String::new(),
        custom: Some(holds),
        runs: 0,
        accepted: 0,
        budget,
        min_permille: 0,
        keep_knobs: keep.to_vec(),
    };
    run_shrinker(s, explicit(cfg))
}

/// Passes of `run_shrinker` at most (a pass that changes nothing ends it sooner). Every pass that
/// changes something costs at least one run, so the run budget bounds the passes; this is a
/// backstop. (At 16 the incident's shrink stopped after 1,530 runs whatever the budget, and
/// said the budget had ended it.)
pub const MAX_PASSES: u32 = 1000;

fn run_shrinker(mut s: Shrinker<'_>, mut cur: SimConfig) -> Shrunk {
    let (mut necessary, mut unjudged) = (Vec::new(), Vec::new());
    let mut converged = false;
    // Until a whole pass changes nothing (or the budget is spent), so that shrinking the result
    // again finds nothing more to do. A pass that changes something accepted at least one
    // candidate, which cost a run, so the budget bounds the loop; `MAX_PASSES` bounds it too.
    for _pass in 0..MAX_PASSES {
        let before = cur.clone();
        remove_requests(&mut s, &mut cur);
        remove_nodes(&mut s, &mut cur);
        remove_faults(&mut s, &mut cur);
        if script_random_faults(&mut s, &mut cur) {
            remove_faults(&mut s, &mut cur);
        }
        merge_delays(&mut s, &mut cur);
        compress_time(&mut s, &mut cur);
        merge_tenants(&mut s, &mut cur);
        shorten(&mut s, &mut cur);
        let (now_necessary, now_unjudged) = fix_knobs(&mut s, &mut cur);
        // A knob an earlier pass found necessary, left unjudged now that the budget is spent,
        // stays necessary: it was, at its last judgment (the last pass's leftovers read as "not
        // judged" once the passes ran on to the budget).
        let (earlier, left): (Vec<String>, Vec<String>) = now_unjudged.into_iter().partition(|k| necessary.contains(k));
        necessary = now_necessary.into_iter().chain(earlier).collect();
        unjudged = left;
        if s.runs >= s.budget {
            break;
        }
        if cur != before {
            continue;
        }
        // Last, what only makes the case easier to read: no idle time, no prefix block it does
        // not need. Either can free a request, a node or a knob, so the passes above run again
        // after a change here.
        close_gaps(&mut s, &mut cur);
        shrink_prefixes(&mut s, &mut cur);
        if cur == before || s.runs >= s.budget {
            // A candidate refused for want of budget was not judged: not converged then.
            converged = cur == before && s.runs < s.budget;
            break;
        }
    }
    let judged_against = fixed_profile_for(&cur).name;
    Shrunk {
        cfg: cur,
        runs: s.runs,
        accepted: s.accepted,
        necessary_knobs: necessary,
        unjudged_knobs: unjudged,
        converged,
        judged_against,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Necessary knobs" are the engine's behaviour (README): no deployment knob is judged, and
    /// every judged name is a knob.
    #[test]
    fn necessary_knobs_are_behaviour_knobs_only() {
        let knobs =
            toml::Table::try_from((config::profile("sglang-0.5.16").expect("shipped").knobs)()).expect("serialise");
        for k in BEHAVIOUR_KNOBS {
            assert!(!crate::fuzz::table::DEPLOYMENT_KNOBS.contains(k), "{k} is the deployment's shape");
            assert!(knobs.contains_key(*k), "{k} is not a knob");
        }
    }

    #[test]
    fn pinned_knobs_are_read_from_a_space_name() {
        assert_eq!(
            pinned_knobs("profile:sglang-0.5.22+liveness=30000ms+set:prefix_cache_scope=per_tenant,router_on_prefill_error=cancel_decode"),
            ["prefix_cache_scope", "router_on_prefill_error"]
        );
        assert_eq!(pinned_knobs("prefix:blind+set:zero_on_free=true+check:invariants"), ["zero_on_free"]);
        assert!(pinned_knobs("profile:sglang-0.5.22+liveness=30000ms").is_empty());
    }

    /// Removing a node takes its scripted crashes with it, and the crashes of the nodes after
    /// it follow them to their new names; the other role's crashes are untouched.
    #[test]
    fn removing_a_node_renames_the_crashes_of_the_nodes_after_it() {
        let mut cfg = crate::fuzz::draw(1, &crate::fuzz::Space::Blind);
        cfg.prefill = vec![cfg.prefill[0].clone(); 3];
        cfg.decode = vec![cfg.decode[0].clone(); 2];
        let crash = |node: &str| ScriptedFault::Crash { at_ms: 5, node: node.into(), restart_after_ms: 9 };
        cfg.faults.script = vec![crash("prefill-0"), crash("prefill-1"), crash("prefill-2"), crash("decode-1")];
        let c = without_node(&cfg, "prefill", 1);
        assert_eq!(c.prefill.len(), 2);
        assert_eq!(c.faults.script, vec![crash("prefill-0"), crash("prefill-1"), crash("decode-1")]);
        let c = without_node(&cfg, "decode", 0);
        assert_eq!(c.decode.len(), 1);
        assert_eq!(
            c.faults.script,
            vec![crash("prefill-0"), crash("prefill-1"), crash("prefill-2"), crash("decode-0")]
        );
    }
}
