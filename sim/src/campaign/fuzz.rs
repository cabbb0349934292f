//! Swarm fuzzing: each run draws a whole scenario from its seed — cluster shape, pool sizes
//! relative to the context, page size, allocator, workload shape and tenants, which faults are on
//! and how often, and (unless pinned by a profile or a base scenario) every engine knob. Failures
//! are grouped by a signature (violation kind plus mechanism), not by seed.
//!
//! Every value a draw picks from is in the draw table ([`table`]), which the cargo-fuzz targets'
//! byte decoding (`fuzz_targets`) reads too; the draws for a seed range are pinned by a test.

use crate::check::Kind;
use crate::config::{self, Bucket, CostConfig, FaultConfig, GeneratorConfig, NodeConfig, SimConfig};
use crate::rng::Prng;
use crate::types::Ratio;
use crate::world::World;
use std::collections::BTreeSet;

pub mod guided;
pub mod table;

/// Which part of the space a campaign draws from.
#[derive(Clone, Debug)]
pub enum Space {
    /// Everything drawn, knobs included.
    Blind,
    /// Knobs from this profile; deployment and workload drawn.
    Profile(String),
    /// This scenario with the run's seed (its generator and random faults re-drawn), and, in
    /// seven runs in eight, one to three changes to its workload, faults and timings
    /// (`guided::vary_base`); its deployment and knobs are the user's and stay.
    Base(Box<SimConfig>),
    /// Prefix-heavy: the deployment and knobs of the inner space (`Blind` or `Profile`), the
    /// radix cache on, and explicit requests whose prompts share prefix chains (`draw_prefix_requests`).
    Prefix(Box<Space>),
    /// The inner space with the hardware faults ([`HARDWARE_FAULTS`]) drawn even where it leaves
    /// them off (a profile's campaign): `kvsim fuzz --hardware-faults`.
    Hardware(Box<Space>),
}

impl Space {
    /// Whether the knobs come from an engine profile (a profile's campaign, prefix-heavy or not).
    pub fn from_profile(&self) -> bool {
        match self {
            Space::Profile(_) => true,
            Space::Prefix(inner) | Space::Hardware(inner) => inner.from_profile(),
            Space::Blind | Space::Base(_) => false,
        }
    }

    /// Whether the swarm draws the hardware faults: on in blind draws and under `Hardware`, off
    /// in a profile's campaign (the released engine is judged on what the engine decides; how
    /// long a completed write takes to become visible is a question about the NIC and the
    /// fabric, with no engine fix). A base scenario keeps its own fault ratios.
    pub fn draws_hardware_faults(&self) -> bool {
        matches!(self, Space::Hardware(_)) || !self.from_profile()
    }
}

/// Faults that are questions about the hardware, not about the engine: `visibility_lag` (a
/// transfer acknowledged before its data is visible in remote memory, the rdma-visibility-lag
/// row, which no engine setting closes). Transfer failures, delays, crashes and metadata
/// reordering stay in every campaign: each exercises an engine path (its error handling, timers,
/// recovery or the metadata sentinel check, which sglang fixed in #27374). They are still faults:
/// scenarios and blind campaigns draw them, and a profile's campaign does with
/// `--hardware-faults`.
pub const HARDWARE_FAULTS: &[&str] = &["visibility_lag"];

/// The hardware fault a signature's chain names (`…/visibility_lag`), if any: campaign tables
/// label such a signature `hardware`.
pub fn hardware_fault(sig: &str) -> Option<&'static str> {
    HARDWARE_FAULTS.iter().copied().find(|f| sig.split('/').skip(1).any(|part| part == *f))
}

/// The swarm's draw of a fault ratio: one in a [`table::FAULT_ONE_IN`] value when `on`.
fn ratio(rng: &mut Prng, on: bool) -> Ratio {
    if on {
        Ratio { num: 1, den: table::FAULT_ONE_IN.pick(rng) }
    } else {
        Ratio::NEVER
    }
}

pub use table::{draw_knobs, CATALOGUE_KNOB_VALUES};

/// The cost model of drawn scenarios (faster forwards than the shipped default, so small runs
/// stay short in virtual time).
pub fn fuzz_cost() -> CostConfig {
    CostConfig {
        prefill_base_us: 1_000,
        prefill_ns_per_token: 20_000,
        prefill_ns_per_token_per_kctx: 20,
        decode_step_base_us: 10_000,
        decode_ns_per_kkv: 2_000,
        kv_bytes_per_token: 70_000,
        transfer_latency_us: 500,
        transfer_bytes_per_us: 25_000,
        message_latency_us: 200,
    }
}

/// A prefix-heavy workload: 4–24 requests of 1–4 tenants whose prompts are whole 512-token blocks
/// (plus, sometimes, a partial tail block) drawn from a small alphabet — three "system prompts"
/// for the first block, six ids after it — so chains are shared across tenants and requests, the
/// same id follows different prefixes, and tenants re-send blocks they sent before.
pub fn draw_prefix_requests(rng: &mut Prng, context_len: u64) -> Vec<config::RequestSpec> {
    let n = rng.between(4, 24);
    let tenants = rng.between(1, 4);
    let gap_us = table::PREFIX_GAP_US.pick(rng);
    let max_blocks = (context_len / crate::prefix::BLOCK_TOKENS).saturating_sub(1).clamp(1, 8);
    let mut at = 0u64;
    let mut out = Vec::new();
    for _ in 0..n {
        at += rng.below(2 * gap_us + 1) * 1_000;
        let k = rng.between(1, max_blocks);
        let mut blocks = vec![rng.between(1, 3)];
        for _ in 1..k {
            blocks.push(rng.between(1, 6));
        }
        let tail = if rng.below(2) == 0 { 0 } else { rng.between(1, 511) };
        if tail > 0 && rng.below(2) == 0 {
            blocks.push(rng.between(1, 6));
        }
        out.push(config::RequestSpec {
            at_ns: at,
            tenant: rng.below(tenants) as u32,
            prompt_tokens: k * crate::prefix::BLOCK_TOKENS + tail,
            output_tokens: rng.between(1, 40),
            abort_at_ns: (rng.below(8) == 0).then(|| at + rng.between(1, 300) * 1_000_000),
            prefix_blocks: blocks,
            streaming: false,
            public_blocks: 0,
        });
    }
    out
}

/// Turns a drawn case into a prefix-heavy one: radix cache on, its knobs' cache scope (or, when
/// `draw_scope`, a drawn one), explicit requests sharing prefix chains instead of the generator.
/// The scope is drawn either way, so the requests' draws do not depend on `draw_scope`.
fn make_prefix_heavy(c: &mut SimConfig, seed: u64, draw_scope: bool) {
    let mut rng = Prng::child(seed, "prefix");
    c.knobs.prefill_cache = config::PrefillCache::Radix;
    let scope = table::PREFIX_CACHE_SCOPE.pick(&mut rng);
    if draw_scope {
        c.knobs.prefix_cache_scope = scope;
    }
    c.generator = None;
    c.requests = draw_prefix_requests(&mut rng, c.context_len);
    c.name = format!("fuzz-prefix-seed{seed}");
    if draw_scope {
        draw_content_mitigations(c, seed);
    }
}

/// The prefix space's draw of the content-channel mitigations (issue 19), so that a campaign
/// over it exercises them too: selective sharing one run in [`table::PREFIX_PUBLIC_ONLY_ONE_IN`]
/// (every request then marks its leading `n` blocks public, `n` drawn once per run: an operator's
/// shared system prompt; only those are shared across tenants, and the noninterference check
/// never varies them), and hit padding one run
/// in [`table::PREFIX_PADDED_TO_MISS_ONE_IN`] (drawn here for both inner spaces, replacing the
/// blind knob draw's value, so that `prefix:blind` and `prefix:<profile>` draw it alike). A
/// generator of its own: the scope and request draws before it are unchanged, and blind and
/// profile runs that are prefix-heavy (`draw_scope` false) draw nothing here.
///
/// Why one `n` per run, not one per request: the check varies the secret tenant's blocks at the
/// positions its requests do not mark public, so the marking must be a function of the position
/// for the variation to keep which of the tenant's own requests share a prefix. Drawn per request
/// (`[1,2]` marking one block public, a later `[1,2]` none), the varied run breaks the tenant's
/// own second hit, which changes its load, not its content: a false `timing_channel` (seen in
/// 1 of 2,000 runs with `public_only` pinned before this rule).
fn draw_content_mitigations(c: &mut SimConfig, seed: u64) {
    let mut rng = Prng::child(seed, "prefix-mitigations");
    if rng.below(table::PREFIX_PUBLIC_ONLY_ONE_IN) == 0 {
        c.knobs.prefix_cache_scope = config::PrefixCacheScope::PublicOnly;
        let public = rng.between(1, table::PREFIX_PUBLIC_BLOCKS_MAX);
        for r in &mut c.requests {
            r.public_blocks = public.min(r.prefix_blocks.len() as u64) as u32;
        }
    }
    c.knobs.prefix_hit_timing = if rng.below(table::PREFIX_PADDED_TO_MISS_ONE_IN) == 0 {
        config::PrefixHitTiming::PaddedToMiss
    } else {
        config::PrefixHitTiming::AsComputed
    };
}

/// Random metadata lag (one run in four): scripted `metadata_lag` entries for a drawn subset of
/// the run's requests, each with a drawn lag (the stale-metadata-room reordering). Scripted, so a
/// shrunk case keeps them as they are.
fn draw_metadata_lag(c: &mut SimConfig, seed: u64) {
    let mut rng = Prng::child(seed, "metadata-lag");
    if rng.below(4) != 0 {
        return;
    }
    let n = match &c.generator {
        Some(g) => g.requests as u64,
        None => c.requests.len() as u64,
    };
    let every = table::METADATA_LAG_EVERY.pick(&mut rng);
    for r in 0..n {
        if rng.below(every) == 0 {
            let lag_ms = table::METADATA_LAG_MS.pick(&mut rng);
            c.faults.script.push(config::ScriptedFault::MetadataLag { request: r as u32, lag_ms });
        }
    }
}

/// Draws a whole scenario for run `seed`. Swarm draws (blind, profile, prefix-heavy) also draw
/// random metadata lag; blind and profile draws are prefix-heavy one run in four.
pub fn draw(seed: u64, space: &Space) -> SimConfig {
    let mut c = draw_space(seed, space);
    if !space.draws_hardware_faults() {
        // Drawn (the generator moved on as before) and then switched off, so every other value
        // of the run is the one the space with hardware faults draws.
        c.faults.visibility_lag = Ratio::NEVER;
    }
    c
}

fn draw_space(seed: u64, space: &Space) -> SimConfig {
    if let Space::Hardware(inner) = space {
        return draw_space(seed, inner);
    }
    if let Space::Base(b) = space {
        let mut c = (**b).clone();
        c.seed = seed;
        c.name = format!("{}-seed{seed}", b.name);
        guided::vary_base(&mut c, seed);
        return c;
    }
    let mut c = match space {
        Space::Prefix(inner) => {
            let mut c = draw_swarm(seed, inner);
            make_prefix_heavy(&mut c, seed, true);
            c
        }
        _ => {
            let mut c = draw_swarm(seed, space);
            if Prng::child(seed, "reach").below(4) == 0 {
                // The blind draw already drew the cache scope among every value; a profile keeps its own.
                make_prefix_heavy(&mut c, seed, false);
            }
            c
        }
    };
    draw_metadata_lag(&mut c, seed);
    draw_liveness_bound(&mut c, seed);
    draw_long_outputs(&mut c, seed);
    if space.from_profile() {
        draw_release_fallback(&mut c, seed);
        draw_source_lease(&mut c, seed);
    }
    c
}

/// A profile's deferred-release fallback (issue 15, reach): where decode defers an aborted
/// request's release and frees at a fallback timer (`decode_abort_release = deferred` behind the
/// concurrent router: sglang 0.5.22, whose `disaggregation/decode.py` `resolve_deferred_releases`
/// frees after `SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT`, 30 s by default in
/// `environ.py`, an operator's setting), half the runs keep the profile's value and half a shorter
/// one from [`table::SHORT_DEFERRED_RELEASE_TIMEOUT_MS`], from a generator of their own so that
/// no other value of the run moves. With only the 30 s default the swarm's delays (10 s at most)
/// never outlast the fallback, so the decode-free-before-late-write row the release keeps (a
/// transfer slower than the fallback lands in freed pages) was reachable only by guided nudges.
fn draw_release_fallback(c: &mut SimConfig, seed: u64) {
    let k = &mut c.knobs;
    if k.decode_abort_release != config::DecodeRelease::Deferred || k.router_mode != config::RouterMode::Concurrent {
        return;
    }
    if let Some(ms) = half_shorter(seed, "release-fallback", &table::SHORT_DEFERRED_RELEASE_TIMEOUT_MS) {
        k.deferred_release_timeout_ms = ms;
    }
}

/// A shorter operator setting for half the runs: from a generator of its own (`stream`), one
/// run in two takes a value of `shorter` (else `None`: the run keeps its profile's value).
fn half_shorter(seed: u64, stream: &str, shorter: &table::Column<u64>) -> Option<u64> {
    let mut rng = Prng::child(seed, stream);
    (rng.below(2) == 1).then(|| shorter.pick(&mut rng))
}

/// A profile's source lease (reach): where prefill leases a finished request's source blocks for
/// decode's read (behind the sequential router: vLLM's NIXL `kv_lease_duration`, 30 s by default
/// in `nixl/base_scheduler.py`, an operator's setting in `kv_connector_extra_config`), half the
/// runs keep the profile's value and half a shorter one from [`table::SHORT_SOURCE_LEASE_MS`], from
/// a generator of their own so that no other value of the run moves. With only the 30 s default
/// the swarm's delays (10 s at most) never outlast the lease, so the lease-expires-mid-read row (an
/// aborted request's read still stalled when its lease runs out) was reachable only by guided
/// nudges.
fn draw_source_lease(c: &mut SimConfig, seed: u64) {
    let k = &mut c.knobs;
    if k.router_mode != config::RouterMode::Sequential {
        return;
    }
    if let Some(ms) = half_shorter(seed, "source-lease", &table::SHORT_SOURCE_LEASE_MS) {
        k.source_lease_ms = ms;
    }
}

/// Long outputs (issue 15, reach): one generated run in [`table::LONG_OUTPUT_ONE_IN`] has its
/// largest output length raised to [`table::LONG_OUTPUT_TOKENS`], from a generator of its own, so
/// decode batches outgrow their pool and retract, and a client abort can find a request retracted.
/// Explicit requests (a prefix-heavy run's) keep their lengths.
fn draw_long_outputs(c: &mut SimConfig, seed: u64) {
    if Prng::child(seed, "long-outputs").below(table::LONG_OUTPUT_ONE_IN) != 0 {
        return;
    }
    if let Some(g) = c.generator.as_mut() {
        for b in &mut g.output_tokens {
            b.max = b.max.max(table::LONG_OUTPUT_TOKENS);
        }
    }
}

/// The swarm's liveness bound: [`table::LIVENESS_BOUND_S`], or one run in
/// [`table::SHORT_LIVENESS_BOUND_ONE_IN`] the short [`table::SHORT_LIVENESS_BOUND_S`], from a
/// generator of its own (issue 15, reach: with only the long bound, pages a 480 s lease holds are
/// freed inside every run's horizon, so the lease rows of the catalogue were never reached). The
/// horizon still moves past an engine timer that will answer a request (`World::step`), so the
/// short bound judges held pages, not requests that a 300 s timer ends.
fn draw_liveness_bound(c: &mut SimConfig, seed: u64) {
    if Prng::child(seed, "liveness-bound").below(table::SHORT_LIVENESS_BOUND_ONE_IN) == 0 {
        c.liveness_bound_s = table::SHORT_LIVENESS_BOUND_S;
    }
}

/// The swarm's draw of deployment, workload, faults and (blind) knobs.
fn draw_swarm(seed: u64, space: &Space) -> SimConfig {
    let mut rng = Prng::child(seed, "swarm");
    let context_len = table::CONTEXT_LEN.pick(&mut rng);
    let page_size = table::PAGE_SIZE.pick(&mut rng);
    let round = |t: u64| (t / page_size).max(2) * page_size;
    // Pools relative to the context: sometimes smaller (the incident's shape), sometimes larger.
    let pf = table::PREFILL_POOL_EIGHTHS.pick(&mut rng);
    let df = table::DECODE_POOL_EIGHTHS.pick(&mut rng);
    let nprefill = rng.between(1, 2) as usize;
    let ndecode = rng.between(1, 2) as usize;
    let meta = table::METADATA_SLOTS.pick(&mut rng);
    let max_running = table::MAX_RUNNING_REQUESTS.pick(&mut rng);
    let mut prefill = vec![
        NodeConfig {
            pool_tokens: round(context_len * pf / 8),
            metadata_slots: meta,
            max_running_requests: max_running,
            pp_stages: 1,
        };
        nprefill
    ];
    let decode = vec![
        NodeConfig {
            pool_tokens: round(context_len * df / 8),
            metadata_slots: meta,
            max_running_requests: max_running,
            pp_stages: 1,
        };
        ndecode
    ];
    let base = match space {
        Space::Profile(p) => (config::profile(p).expect("validated profile").knobs)(),
        _ => (config::PROFILES[0].knobs)(),
    };
    let mut knobs = match space {
        Space::Blind => {
            let k = draw_knobs(&mut rng, &base);
            let mut own = Prng::child(seed, "swarm-own-stream-knobs");
            let k = table::draw_own_stream_knobs(&mut own, &k);
            // Pipeline stages of the prefill instances, from the same generator of their own
            // after its knobs (drawn after them, so the knobs' draws do not move).
            let stages = table::PP_STAGES.pick(&mut own);
            for p in &mut prefill {
                p.pp_stages = stages;
            }
            k
        }
        _ => base,
    };
    knobs.page_size = page_size;
    knobs.chunked_prefill_size = table::CHUNKED_PREFILL_SIZE.pick(&mut rng);
    knobs.max_transfer_batch_pages = if rng.below(2) == 0 { 0 } else { table::MAX_TRANSFER_BATCH_PAGES.pick(&mut rng) };
    knobs.transfer_sync_timeout_ms = table::TRANSFER_SYNC_TIMEOUT_MS.pick(&mut rng);
    let w = |rng: &mut Prng| table::PROMPT_BUCKET_WEIGHT.pick(rng);
    let mut prompt = vec![
        Bucket { weight: w(&mut rng), min: 1, max: (context_len / 16).max(1) },
        Bucket { weight: w(&mut rng), min: (context_len / 16).max(1), max: context_len / 2 },
        Bucket { weight: w(&mut rng), min: context_len / 2, max: context_len + context_len / 8 },
    ];
    if prompt.iter().all(|b| b.weight == 0) {
        prompt[0].weight = 1;
    }
    let requests = table::REQUESTS.pick(&mut rng);
    let faults_on = [rng.below(3) == 0, rng.below(3) == 0, rng.below(4) == 0, rng.below(6) == 0];
    let aborts_on = rng.below(3) == 0;
    let generator = GeneratorConfig {
        requests,
        tenants: rng.between(1, 4) as u32,
        mean_interarrival_us: table::MEAN_INTERARRIVAL_US.pick(&mut rng),
        prompt_tokens: prompt,
        output_tokens: vec![Bucket { weight: 1, min: 1, max: table::MAX_OUTPUT_TOKENS.pick(&mut rng) }],
        client_abort: ratio(&mut rng, aborts_on),
        abort_within_ms: table::ABORT_WITHIN_MS.pick(&mut rng),
        start_ms: 0,
    };
    let faults = FaultConfig {
        transfer_fail: ratio(&mut rng, faults_on[0]),
        delay_spike: ratio(&mut rng, faults_on[1]),
        delay_spike_ms: table::DELAY_SPIKE_MS.pick(&mut rng),
        visibility_lag: ratio(&mut rng, faults_on[2]),
        visibility_lag_ms: table::VISIBILITY_LAG_MS.pick(&mut rng),
        node_crash: ratio(&mut rng, faults_on[3]),
        crash_restart_ms: table::CRASH_RESTART_MS.pick(&mut rng),
        heal_at_ms: table::HEAL_AT_MS.pick(&mut rng),
        script: vec![],
        liveness_after_heal_ms: None,
    };
    SimConfig {
        name: format!("fuzz-seed{seed}"),
        seed,
        profile: match space {
            Space::Profile(p) => p.clone(),
            _ => "sglang-0.5.16".into(),
        },
        knobs,
        context_len,
        prefill,
        decode,
        router_policy: table::ROUTER_POLICY.pick(&mut rng),
        cost: fuzz_cost(),
        generator: Some(generator),
        requests: vec![],
        faults,
        liveness_bound_s: table::LIVENESS_BOUND_S,
    }
}

/// A violation's signature: kind and mechanism, e.g. `cross_tenant_read/stub_commit`; a
/// disagreement of the two oracles (a kvsim bug) is `oracle_disagreement/<read>`.
///
/// The mechanism names the chain behind the foreign data where the run knows it, so two
/// mechanisms do not share one signature:
/// - a use after free whose request had a transfer acknowledged before its data was visible
///   ends in `/visibility_lag` (the rdma-visibility-lag chain: decode freed the pages a lagged
///   write then landed in; a read of a source page never, since the lag does not delay it);
///   otherwise one whose batch kept writing after its synchronous call had returned on the
///   timeout ends in `/sync_timeout` (the sync-timeout-still-writing chain: the sender was told
///   the batch failed, so prefill freed the source it still read, or decode freed the pages it
///   still wrote); without either (`use_after_free/transfer_write`) the write outlived its pages
///   for another reason (an abort, a release timeout);
/// - a read whose cause is `late_write` (another request's write landed in the reader's pages)
///   says whose write: `…/late_write/visibility_lag` when a lagged writer's,
///   `…/late_write/sync_timeout` when a writer's whose batch outlived its timed-out call,
///   `…/late_write` when another one's; a reader hit by several counts for each;
/// - a valid request that decode failed because its metadata slot held another request's room
///   (a false corruption abort, the stale-metadata-room symptom) is
///   `wrong_status/valid_request_failed/room_mismatch`.
pub fn signatures(w: &World) -> BTreeSet<String> {
    let mut s: BTreeSet<String> = BTreeSet::new();
    for v in &w.oracle.violations {
        violation_signatures(w, v, &mut s);
    }
    if let Some(rf) = &w.reference {
        s.extend(rf.signatures());
    }
    if w.event_limit_hit {
        s.insert(EVENT_LIMIT.to_string());
    }
    s
}

/// The signatures one violation of `w` counts for (`signatures`), added to `s`.
pub fn violation_signatures(w: &World, v: &crate::check::oracle::Violation, s: &mut BTreeSet<String>) {
    let base = format!("{}/{}", v.kind.name(), v.cause);
    // Live or folded (`kvsim run` folds finished requests): the facts the chain names.
    let req = v.request.map(|r| w.reqs.chain_facts(r.idx()));
    match (v.kind, v.cause.as_str(), req) {
        (Kind::UseAfterFree, "transfer_read_of_a_source_page", Some(r)) => {
            // A source page is read when the batch's wire time ends, lagged or not (the lag
            // delays only the data's visibility at decode), so the lag never puts a source
            // read after the free: the chain is the timed-out call that kept reading, or
            // else a free that raced a batch within its call (an abort). Of 321 source reads
            // a 30,000-run --hardware-faults campaign labelled `/visibility_lag` before, 298
            // stayed without the lag.
            s.insert(if r.outlived_call { format!("{base}/sync_timeout") } else { base });
        }
        (Kind::UseAfterFree, _, Some(r)) if r.lagged => {
            s.insert(format!("{base}/visibility_lag"));
        }
        (Kind::UseAfterFree, _, Some(r)) if r.outlived_call => {
            // A batch kept writing after its call returned on the sync timeout (the
            // sync-timeout-still-writing row), not a free racing a batch within its call.
            s.insert(format!("{base}/sync_timeout"));
        }
        (Kind::WrongStatus, "valid_request_failed", Some(r)) if r.room_mismatch => {
            s.insert(format!("{base}/room_mismatch"));
        }
        (_, "late_write", Some(r)) if r.late_written() => {
            if r.late_writers.0 {
                s.insert(format!("{base}/visibility_lag"));
            }
            if r.late_write_timed_out {
                s.insert(format!("{base}/sync_timeout"));
            }
            if r.late_writers.1 {
                s.insert(base);
            }
        }
        _ => {
            s.insert(base);
        }
    }
}

/// What an open request waits for, as a liveness hang names it (`World::waits_for`).
pub const HANG_WAITS: [&str; 14] = [
    "decode_prealloc",
    "kv_arrival",
    "decode_steps",
    "release_ack",
    "retracted",
    "decode_answer",
    "bootstrap",
    "prefill_queue",
    "kv_send",
    "decode_read",
    "transfer_drain",
    "orphaned",
    "prefill_answer",
    "router",
];

/// The mechanisms `kind`'s signatures can name: every signature [`signatures`] makes for a
/// violation of `kind` is `<kind>/<one of these>` (a test runs every profile's swarm, with
/// hardware faults and the noninterference check, and finds no other). A known-bugs entry naming
/// another mechanism (a typo: `late_wirte`) could never match, and the campaign would report the
/// bug it meant as `new`: `triage` refuses it with this list.
/// - reads: the read's cause (`World::read_ctx`), a late write's with the writer's chain;
/// - a use after free: the write or read that outlived its pages (`World::note_foreign_writes`'
///   `what`), with the chain `violation_signatures` names;
/// - a hang: the leg that never answered, or (liveness) `after_heal/<wait>[/<why>]`
///   (`World::waits_for`, `World::hang_why`);
/// - a channel: the noninterference check's cause (`noninterference::differences`).
pub fn mechanisms(kind: Kind) -> Vec<String> {
    let with = |heads: &[&str], tails: &[&str]| -> Vec<String> {
        heads
            .iter()
            .flat_map(|h| std::iter::once(h.to_string()).chain(tails.iter().map(move |t| format!("{h}/{t}"))))
            .collect()
    };
    let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match kind {
        Kind::CrossTenantRead | Kind::CrossRequestRead | Kind::UninitializedRead | Kind::OwnKvMisplaced => {
            let mut m = v(&["stub_commit", "visibility_lag", "decode_prefix_cache", "other"]);
            m.extend(with(&["late_write"], &["visibility_lag", "sync_timeout"]));
            m
        }
        Kind::UseAfterFree => {
            let writes = crate::world::WRITES.map(|w| w.replace(' ', "_"));
            let writes: Vec<&str> = writes.iter().map(String::as_str).collect();
            let mut m = with(&writes, &["visibility_lag", "sync_timeout"]);
            m.extend(with(&[crate::world::SOURCE_READ.replace(' ', "_").as_str()], &["sync_timeout"]));
            m
        }
        Kind::DoubleFree => v(&["release"]),
        Kind::WrongStatus => {
            let mut m = v(&["rejected_answered_200", "rejected_answered_5xx"]);
            m.extend(with(&["valid_request_failed"], &["room_mismatch"]));
            m
        }
        Kind::CrossTenantPrefixHit => v(&["global_prefix_cache"]),
        Kind::PageLeak => v(&["prefill", "decode"]),
        Kind::RequestHang => {
            let mut m = v(&["both_legs_pending", "prefill_leg_pending", "decode_leg_pending", "router_never_answered"]);
            let waits: Vec<String> = HANG_WAITS.iter().map(|w| format!("after_heal/{w}")).collect();
            let waits: Vec<&str> = waits.iter().map(String::as_str).collect();
            m.extend(with(&waits, &["never_fits", "prefill_failed", "behind_prefill_failed"]));
            m
        }
        Kind::TimingChannel | Kind::StatusChannel => {
            v(&["memory_safety", "prefix_hit", "prefix_hit_queueing", "prefix_eviction", "allocation"])
        }
    }
}

/// Why `sig` is no signature a run can report (`mechanisms`), or `None`. Model-bug signatures
/// (`invariant_broken/…`, `oracle_disagreement/…`) and `event_limit` are not judged here.
pub fn signature_error(sig: &str) -> Option<String> {
    let (kind, mechanism) = sig.split_once('/').unwrap_or((sig, ""));
    let Some(kind) = Kind::parse(kind) else {
        return Some(format!("`{kind}` is not a violation kind"));
    };
    let known = mechanisms(kind);
    if known.iter().any(|m| m == mechanism) {
        return None;
    }
    let hint = crate::scenario::did_you_mean(mechanism, known.iter().map(String::as_str))
        .map(|m| format!("did you mean `{}/{m}`? ", kind.name()))
        .unwrap_or_default();
    Some(format!("`{mechanism}` is not a mechanism of {} ({hint}its mechanisms: {})", kind.name(), known.join(", ")))
}

/// The signature of a run that reached the event limit (inconclusive about liveness).
pub const EVENT_LIMIT: &str = "event_limit";

/// Whether a signature is a disagreement between the fast and the reference oracle.
pub fn is_disagreement(sig: &str) -> bool {
    sig.starts_with("oracle_disagreement/")
}

/// The deterministic sample of runs a campaign checks differentially by default: one seed in 64,
/// chosen by a hash of the seed (not `seed % 64`, so any seed range is sampled evenly).
pub fn sampled_for_check(seed: u64) -> bool {
    let mut h = crate::types::StableHasher::default();
    std::hash::Hash::hash(&("check-oracle", seed), &mut h);
    std::hash::Hasher::finish(&h) % 64 == 0
}

/// Runs a configuration the way a signature needs: with the differential check when the
/// signature is an oracle disagreement.
pub fn simulate_for(cfg: SimConfig, sig: &str) -> World {
    if is_disagreement(sig) {
        crate::simulate_checked(cfg, None, false)
    } else if is_channel(sig) {
        let mut w = crate::simulate(cfg.clone(), None, false);
        crate::check::noninterference::apply(&cfg, &mut w, None);
        w
    } else {
        crate::simulate(cfg, None, false)
    }
}

/// Whether a signature is a finding of the noninterference check (`timing_channel/…`,
/// `status_channel/…`): reproducing it needs `--check noninterference`.
pub fn is_channel(sig: &str) -> bool {
    sig.starts_with("timing_channel/") || sig.starts_with("status_channel/")
}

/// Whether a signature names a safety violation (liveness ones are kept apart).
pub fn is_safety(sig: &str) -> bool {
    sig.split('/').next().and_then(Kind::parse).is_some_and(|k| !k.is_liveness())
}

/// Runs one drawn case.
pub fn run_case(cfg: SimConfig) -> (World, BTreeSet<String>) {
    run_case_checked(cfg, false)
}

/// Runs one drawn case, with the differential oracle check when `check`.
pub fn run_case_checked(cfg: SimConfig, check: bool) -> (World, BTreeSet<String>) {
    run_case_with(cfg, check, false)
}

/// Runs one drawn case, with the differential oracle check when `check` and the
/// noninterference check (every tenant that sends prefix blocks, in turn) when `noninterference`.
/// One run in `INVARIANT_SAMPLE` (chosen by a hash of the seed) also checks every component's
/// invariants after every event (see `run_case_full`).
pub fn run_case_with(cfg: SimConfig, check: bool, noninterference: bool) -> (World, BTreeSet<String>) {
    let invariants = sampled_for_invariants(cfg.seed);
    run_case_full(cfg, check, noninterference, invariants, false)
}

/// `run_case_with` with the invariant check chosen by the caller (`--check invariants`: every
/// run). The checked run is the run: only when an invariant breaks is the case run again without
/// the check, for its report, and `invariant_broken/<what>` joins its signatures. With
/// `coverage` the run records its model coverage (`World::coverage`, what a guided campaign
/// steers by); every other caller leaves it off, so the probe costs them nothing.
pub fn run_case_full(
    cfg: SimConfig,
    check: bool,
    noninterference: bool,
    invariants: bool,
    coverage: bool,
) -> (World, BTreeSet<String>) {
    let run = |inv: bool| {
        let mut w = World::new(cfg.clone(), crate::trace::Tracer::new(None));
        w.check_invariants = inv;
        if check {
            w.enable_reference();
        }
        if coverage {
            w.coverage = Some(crate::coverage::Coverage::default());
        }
        w.run();
        w
    };
    let (mut w, broken) = if invariants {
        match catch_invariant(|| run(true)) {
            Ok(w) => (w, None),
            Err(sig) => (run(false), Some(sig)),
        }
    } else {
        (run(false), None)
    };
    if noninterference {
        crate::check::noninterference::apply(&cfg, &mut w, None);
    }
    let mut s = signatures(&w);
    s.extend(broken);
    if let Some(cov) = w.coverage.as_mut() {
        // A guided campaign steers by the signatures too (`Coverage::hit_signatures`).
        cov.hit_signatures(&s);
    }
    (w, s)
}

/// One campaign run in this many checks the model's invariants after every event (measured on a
/// 4,000-run campaign: every run checked costs 1.6x the sampled default — BENCHMARKS.md).
pub const INVARIANT_SAMPLE: u64 = 16;

/// Whether run `seed` checks invariants (a hash of the seed, so any seed range samples evenly).
pub fn sampled_for_invariants(seed: u64) -> bool {
    let mut h = crate::types::StableHasher::default();
    std::hash::Hash::hash(&("check-invariants", seed), &mut h);
    std::hash::Hasher::finish(&h) % INVARIANT_SAMPLE == 0
}

/// Runs `f` (a run with invariants on); a broken invariant (a panic) becomes its signature.
fn catch_invariant<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|err| {
        let msg = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| err.downcast_ref::<&str>().copied())
            .unwrap_or("panic");
        invariant_signature(msg)
    })
}

/// Runs `cfg` with every invariant checked after every event; on a broken one, the signature
/// `invariant_broken/<what broke>` (the panic message's first word: the pool or node it names).
pub fn invariant_failure(cfg: &SimConfig) -> Option<String> {
    invariant_check(cfg).err()
}

/// `invariant_failure`, with the number of events checked when every invariant held.
pub fn invariant_check(cfg: &SimConfig) -> Result<u64, String> {
    catch_invariant(|| crate::simulate(cfg.clone(), None, true).events())
}

/// The signature of a broken invariant from its panic message: the message's first word (the pool
/// or node the invariant names, e.g. `decode-0` of "decode-0: held-page count drifted").
pub fn invariant_signature(msg: &str) -> String {
    let what: String = msg
        .split(|c: char| c == ':' || c.is_whitespace())
        .find(|w| !w.is_empty())
        .unwrap_or("panic")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    format!("{INVARIANT_BROKEN}/{}", if what.is_empty() { "panic" } else { &what })
}

/// The signature prefix of a broken model invariant (a kvsim bug, like an oracle disagreement).
pub const INVARIANT_BROKEN: &str = "invariant_broken";

/// Whether a signature says kvsim itself is wrong (oracle disagreement or broken invariant).
pub fn is_model_bug(sig: &str) -> bool {
    is_disagreement(sig) || sig.starts_with("invariant_broken/")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every signature a run reports is in the vocabulary a known-bugs file is checked against
    /// (`mechanisms`): a known-bugs entry naming a real signature is never refused. The swarm of
    /// every space (blind, each profile, prefix-heavy, hardware faults) with the noninterference
    /// check; every row's symptom and every shipped known-bugs signature too.
    #[test]
    fn every_reported_signature_is_in_the_mechanism_vocabulary() {
        let mut spaces = vec![Space::Blind, Space::Prefix(Box::new(Space::Blind))];
        for p in config::PROFILES {
            let profile = Space::Profile(p.name.to_string());
            spaces.push(Space::Hardware(Box::new(profile.clone())));
            spaces.push(Space::Prefix(Box::new(profile)));
        }
        let mut seen = BTreeSet::new();
        for (i, space) in spaces.iter().enumerate() {
            for seed in 0..150u64 {
                let (_, sigs) = run_case_with(draw(seed + 1_000 * i as u64, space), false, seed % 3 == 0);
                for sig in sigs.into_iter().filter(|s| !is_model_bug(s) && s != EVENT_LIMIT) {
                    assert_eq!(signature_error(&sig), None, "space {i}, seed {seed}");
                    seen.insert(sig);
                }
            }
        }
        // The runs reached reads, uses after free, hangs and channels, so the check had teeth.
        for kind in ["cross_tenant_read/", "use_after_free/", "request_hang/", "timing_channel/"] {
            assert!(seen.iter().any(|s| s.starts_with(kind)), "no {kind} in {seen:?}");
        }
        for row in crate::reach::ROWS {
            for sig in row.kinds.iter().filter(|k| k.contains('/')) {
                assert_eq!(signature_error(sig), None, "row {}", row.id);
            }
        }
        for (profile, text) in crate::triage::SHIPPED {
            let k = crate::triage::KnownBugs::parse(profile, text).expect("the shipped file parses");
            assert!(!k.known.is_empty(), "{profile}");
        }
        assert_eq!(signature_error("page_leak/decode"), None);
        assert!(signature_error("page_leak/decoder").is_some_and(|e| e.contains("did you mean `page_leak/decode`?")));
        assert!(signature_error("request_hang/after_heal/kv_arival").is_some());
        assert!(signature_error("use_after_free/transfer_read_of_a_source_page/visibility_lag").is_some());
    }

    #[test]
    fn invariants_are_sampled_evenly_and_named_by_what_broke() {
        let sampled = (0..16_000u64).filter(|&s| sampled_for_invariants(s)).count();
        assert!((800..1200).contains(&sampled), "{sampled} of 16,000 seeds sampled (expect ~1,000)");
        assert_eq!(invariant_signature("decode-0: held-page count drifted"), "invariant_broken/decode-0");
        assert_eq!(invariant_signature("overlapping runs at 5"), "invariant_broken/overlapping");
        assert_eq!(invariant_signature(": \u{1b}[31m"), "invariant_broken/31m");
        assert_eq!(invariant_signature(""), "invariant_broken/panic");
        assert!(is_model_bug("invariant_broken/decode-0") && !is_safety("invariant_broken/decode-0"));
    }

    /// A read of blocks that came from decode's radix cache is labelled by that chain: blind seed
    /// 1,000,363 (prefix-heavy, `decode_radix_cache = on`) has over-length requests stub-committed on
    /// decode, whose never-written blocks decode then caches and later requests of the same prefix
    /// read (zeros and a neighbour's slot). Its reads were `…/other` before.
    #[test]
    fn a_read_through_decodes_radix_cache_names_it() {
        let (_, sigs) = run_case(draw(1_000_363, &Space::Blind));
        assert!(sigs.contains("uninitialized_read/decode_prefix_cache"), "{sigs:?}");
        assert!(sigs.contains("cross_request_read/decode_prefix_cache"), "{sigs:?}");
        assert!(!sigs.iter().any(|s| s.ends_with("/other")), "{sigs:?}");
    }

    #[test]
    fn drawn_scenarios_keep_their_invariants() {
        for seed in 0..64 {
            let cfg = draw(seed, &Space::Blind);
            assert_eq!(invariant_failure(&cfg), None, "seed {seed}");
        }
    }

    /// The campaign's draws are pinned: a digest of the scenarios drawn for the first 2,000 seeds
    /// of each space. A change here changes every campaign's results for a fixed seed range; make
    /// it on purpose (and say so) or not at all.
    fn pinned_spaces() -> [(&'static str, Space); 4] {
        [
            ("blind", Space::Blind),
            ("sglang-0.5.22", Space::Profile("sglang-0.5.22".into())),
            ("prefix", Space::Prefix(Box::new(Space::Blind))),
            ("vllm-nixl prefix", Space::Prefix(Box::new(Space::Profile("vllm-nixl".into())))),
        ]
    }

    #[test]
    fn draws_are_pinned() {
        let mut got = Vec::new();
        for (name, space) in &pinned_spaces() {
            let mut h = crate::types::StableHasher::default();
            for seed in 0..2_000 {
                std::hash::Hash::hash(&draw(seed, space), &mut h);
            }
            got.push(format!("{name}: {:016x}", std::hash::Hasher::finish(&h)));
        }
        assert_eq!(got, PINNED_DRAWS, "the campaign's draws changed");
    }

    // Re-pinned for issue 13: the knobs gained prefill_rejected_release, prefill_failed_check,
    // cancel_mid_transfer and decode_lookahead_tokens (the blind swarm draws their catalogue
    // values, and a 100 ms waiting timer), and a profile's campaign no longer draws the hardware
    // fault visibility_lag (`Space::draws_hardware_faults`). The prefix rows also moved for issue 19:
    // the prefix space draws the content mitigations (`draw_content_mitigations`). Re-pinned again
    // for issue 13's decode_out_of_pages and retracted_abort (the configuration's hash gained two
    // fields; the blind swarm draws the profiles' two values of the first and `leak` of the second).
    // Re-pinned at the merge of issue 13's three knobs (decode_radix_cache and zero_page_last_chunk,
    // drawn from a generator of their own, `table::OWN_STREAM_KNOBS`; decode_reject_releases_prefill,
    // drawn by the blind swarm among the other knobs): the configuration's hash gained three fields.
    // Re-pinned for pipeline stages (`crate::pp`, issue 13): the knobs gained pp_metadata_writer
    // and pp_bootstrap_consensus and every node pp_stages (drawn from the own-stream generator, so
    // every other drawn value is what it was: `own_stream_knobs_leave_the_swarm_stream_alone`); and
    // for issue 15 (reach): one swarm run in four is judged 120 s after its last arrival
    // (`draw_liveness_bound`) and one generated run in eight has outputs up to 512 tokens
    // (`draw_long_outputs`), each from a generator of its own; with both set back the draws hash
    // to the digests before (`the_short_liveness_bound_and_long_outputs_are_drawn_on_their_own`).
    // Re-pinned when `vllm-nixl` took NIXL's default 30 s source lease (it carried 480 s): the
    // profile's draws carry the new value, and the blind swarm draws `source_lease_ms` among three
    // values (480 s, 30 s, 10 s) instead of two; sglang-0.5.22's draws do not move. Then again
    // when sglang-0.5.22 took the released room-only commit check (it carried `coverage`, PR
    // #38704, which no release has): that profile's draws carry it; the blind swarm's weighted
    // draw of the knob does not move. Then when sglang-0.5.22 took the released
    // `prefill_abort_release = ack_after_drain` (it carried PR #38961's hold): its draws carry it,
    // and the blind swarm draws the knob among three values instead of two. Then when
    // sglang-0.5.22 took the released `transfer_timeout_semantics = returns_while_writing` (it
    // carried `quiesced`): its draws carry it; the blind swarm's draws do not move. Then when
    // half of sglang-0.5.22's runs took a shorter deferred-release fallback (1 or 5 s,
    // `draw_release_fallback`, a generator of its own: with it set back the draws meet
    // `PINNED_DRAWS_BEFORE_THE_SHORT_BOUND`'s digest as before); no other space moves. Then when
    // `vllm-nixl` took the fixed pipeline-stage values (`follow_rank0`, `last_stage`: vLLM has
    // neither sglang's per-stage bootstrap queue nor its metadata row): that profile's draws carry
    // them; no other space moves. Then for `decode_admission` (thirty-ninth session): the
    // configuration's hash gained a field; the blind swarm draws it from the own-stream generator
    // after the others (`table::OWN_STREAM_KNOBS`), so no other drawn value moves. Then for
    // `decode_loads_hold_slots` (fortieth session), likewise, and for
    // `prefill_checkpoint_duplicates` (forty-first session). Then for `decode_prefix_rules`
    // (forty-second session; own stream as well), when `vllm-nixl` also took `decode_radix_cache =
    // on`: that profile's draws carry both. Then for `retraction_host_pool` (forty-fourth session,
    // own stream), and for `decode_first_write` (forty-sixth session, own stream; `vllm-nixl`'s
    // draws carry its `last_prompt_token`). Then for `decode_abort_heartbeat` (forty-eighth
    // session, own stream; the blind swarm draws both values, every profile carries `stop`). Then
    // when half of `vllm-nixl`'s runs took a 5 s source lease (`draw_source_lease`, a generator of
    // its own: with it set back the draws meet `PINNED_DRAWS_BEFORE_THE_SHORT_BOUND`'s digest as
    // before); no other space moves.
    const PINNED_DRAWS: [&str; 4] = [
        "blind: be74ac23f9019027",
        "sglang-0.5.22: 398f522d3372903f",
        "prefix: 278ea1942a6258fd",
        "vllm-nixl prefix: 8243f338cba8696f",
    ];

    /// The knobs drawn from their own generator leave the swarm's stream alone: a blind draw with
    /// them set back to the base profile's values is the draw of a swarm that never knew them (the
    /// knobs, `knobs::draw_knobs` without them, then the rest of the run from the same generator),
    /// and the blind swarm draws both values of each.
    #[test]
    fn own_stream_knobs_leave_the_swarm_stream_alone() {
        let base = (config::PROFILES[0].knobs)();
        let mut seen: std::collections::BTreeSet<(String, String)> = std::collections::BTreeSet::new();
        let mut stages = std::collections::BTreeSet::new();
        for seed in 0..300 {
            let mut c = draw(seed, &Space::Blind);
            let t = toml::Table::try_from(&c.knobs).expect("knobs serialise");
            for k in table::OWN_STREAM_KNOBS {
                seen.insert((k.to_string(), t[*k].to_string()));
            }
            // The swarm's own generator, advanced past the deployment draws as `draw_swarm` does,
            // gives the same knobs without the own-stream ones.
            let mut rng = Prng::child(seed, "swarm");
            let _ = (table::CONTEXT_LEN.pick(&mut rng), table::PAGE_SIZE.pick(&mut rng));
            let _ = (table::PREFILL_POOL_EIGHTHS.pick(&mut rng), table::DECODE_POOL_EIGHTHS.pick(&mut rng));
            let _ = (rng.between(1, 2), rng.between(1, 2));
            let _ = (table::METADATA_SLOTS.pick(&mut rng), table::MAX_RUNNING_REQUESTS.pick(&mut rng));
            let mut want = draw_knobs(&mut rng, &base);
            // Drawn after the knobs (deployment columns) or set by a prefix-heavy run.
            want.page_size = c.knobs.page_size;
            want.chunked_prefill_size = c.knobs.chunked_prefill_size;
            want.max_transfer_batch_pages = c.knobs.max_transfer_batch_pages;
            want.transfer_sync_timeout_ms = c.knobs.transfer_sync_timeout_ms;
            want.prefix_cache_scope = c.knobs.prefix_cache_scope;
            want.prefix_hit_timing = c.knobs.prefix_hit_timing;
            c.knobs.decode_radix_cache = base.decode_radix_cache;
            c.knobs.zero_page_last_chunk = base.zero_page_last_chunk;
            c.knobs.pp_metadata_writer = base.pp_metadata_writer;
            c.knobs.pp_bootstrap_consensus = base.pp_bootstrap_consensus;
            c.knobs.decode_admission = base.decode_admission;
            c.knobs.decode_loads_hold_slots = base.decode_loads_hold_slots;
            c.knobs.prefill_checkpoint_duplicates = base.prefill_checkpoint_duplicates;
            c.knobs.decode_prefix_rules = base.decode_prefix_rules;
            c.knobs.retraction_host_pool = base.retraction_host_pool;
            c.knobs.decode_first_write = base.decode_first_write;
            c.knobs.decode_abort_heartbeat = base.decode_abort_heartbeat;
            assert_eq!(c.knobs, want, "seed {seed}");
            // Every prefill instance of a run has the same stages; decode has one.
            stages.insert(c.prefill[0].pp_stages);
            assert!(c.prefill.iter().all(|p| p.pp_stages == c.prefill[0].pp_stages), "seed {seed}");
            assert!(c.decode.iter().all(|d| d.pp_stages == 1), "seed {seed}");
        }
        assert_eq!(seen.len(), 22, "{seen:?}");
        assert_eq!(stages.into_iter().collect::<Vec<_>>(), [1, 2, 4]);
    }

    #[test]
    fn a_profile_campaign_draws_hardware_faults_only_when_asked() {
        let (mut off, mut on) = (0, 0);
        for p in ["sglang-0.5.22", "vllm-nixl"] {
            for inner in [Space::Profile(p.into()), Space::Prefix(Box::new(Space::Profile(p.into())))] {
                let asked = Space::Hardware(Box::new(inner.clone()));
                for seed in 0..200 {
                    let (a, b) = (draw(seed, &inner), draw(seed, &asked));
                    assert_eq!(a.faults.visibility_lag, Ratio::NEVER, "{p} seed {seed}");
                    on += u32::from(b.faults.visibility_lag != Ratio::NEVER);
                    off += 1;
                    // Everything else is the same draw.
                    let mut b = b;
                    b.faults.visibility_lag = Ratio::NEVER;
                    assert_eq!(a, b, "{p} seed {seed}");
                }
            }
        }
        assert!(on > off / 8, "{on} of {off} asked-for draws have visibility lag on");
        // Blind draws keep them (a blind campaign explores the whole space).
        assert!((0..200).any(|seed| draw(seed, &Space::Blind).faults.visibility_lag != Ratio::NEVER));
        assert_eq!(hardware_fault("use_after_free/transfer_write/visibility_lag"), Some("visibility_lag"));
        assert_eq!(hardware_fault("uninitialized_read/visibility_lag"), Some("visibility_lag"));
        assert_eq!(hardware_fault("cross_tenant_read/late_write"), None);
        assert_eq!(hardware_fault("page_leak/decode"), None);
    }

    /// The short liveness bound and the long outputs come from generators of their own: one swarm
    /// run in about four gets the bound, one generated run in about eight the long outputs, and
    /// nothing else of any run moves — with both set back, the draws of every pinned space hash to
    /// the digests pinned before they were drawn.
    #[test]
    fn the_short_liveness_bound_and_long_outputs_are_drawn_on_their_own() {
        let (mut short, mut long_runs) = (0, 0);
        let mut got = Vec::new();
        for (name, space) in pinned_spaces() {
            let mut h = crate::types::StableHasher::default();
            for seed in 0..2_000 {
                let mut c = draw(seed, &space);
                let drawn_short = Prng::child(seed, "liveness-bound").below(table::SHORT_LIVENESS_BOUND_ONE_IN) == 0;
                let want = if drawn_short { table::SHORT_LIVENESS_BOUND_S } else { table::LIVENESS_BOUND_S };
                assert_eq!(c.liveness_bound_s, want, "{name} seed {seed}");
                short += u32::from(drawn_short);
                c.liveness_bound_s = table::LIVENESS_BOUND_S;
                // The long outputs, set back (a long run's largest output was drawn before).
                let long = Prng::child(seed, "long-outputs").below(table::LONG_OUTPUT_ONE_IN) == 0;
                if let (true, Some(g)) = (long, c.generator.as_mut()) {
                    assert_eq!(g.output_tokens[0].max, table::LONG_OUTPUT_TOKENS, "{name} seed {seed}");
                    g.output_tokens[0].max = drawn_output_max(seed, &space);
                    long_runs += 1;
                }
                // The release fallback and the source lease (drawn after them, each on its own),
                // set back to the profile's.
                if space.from_profile() {
                    c.knobs.deferred_release_timeout_ms = 30_000;
                    if c.knobs.router_mode == config::RouterMode::Sequential {
                        c.knobs.source_lease_ms = 30_000;
                    }
                }
                std::hash::Hash::hash(&c, &mut h);
            }
            got.push(format!("{name}: {:016x}", std::hash::Hasher::finish(&h)));
        }
        assert_eq!(got, PINNED_DRAWS_BEFORE_THE_SHORT_BOUND);
        assert!((1_800..2_200).contains(&short), "{short} of 8,000 draws have the short bound (expect ~2,000)");
        // 4,000 blind and profile draws, three in four generated: ~375 with long outputs.
        assert!((250..500).contains(&long_runs), "{long_runs} generated draws with long outputs (expect ~375)");
        // A base scenario keeps its own bound.
        let mut base = draw(3, &Space::Blind);
        base.liveness_bound_s = 777;
        assert!((0..50).all(|seed| draw(seed, &Space::Base(Box::new(base.clone()))).liveness_bound_s == 777));
    }

    /// The largest output length the swarm's own generator drew for `seed` (as `draw_swarm`
    /// draws it, after the deployment, knobs, prompts, request count, fault switches and tenants).
    fn drawn_output_max(seed: u64, space: &Space) -> u64 {
        let c = draw_swarm(seed, space);
        c.generator.expect("a generated run").output_tokens[0].max
    }

    /// Over seeds 0..400 of `space`, the knob `of` takes exactly the values `seen` (the
    /// profile's 30 s and the shorter ones), a shorter one in about half the runs.
    fn half_drawn_shorter(space: &Space, of: impl Fn(&config::Knobs) -> u64, seen: &[u64]) {
        let drawn: Vec<u64> = (0..400).map(|seed| of(&draw(seed, space).knobs)).collect();
        assert_eq!(drawn.iter().copied().collect::<BTreeSet<u64>>(), seen.iter().copied().collect());
        let shorter = drawn.iter().filter(|ms| **ms < 30_000).count();
        assert!((160..240).contains(&shorter), "{shorter} of 400 shorter (expect ~200)");
    }

    /// Half of a profile's runs whose decode frees at a deferred-release fallback take a shorter
    /// one, from a generator of their own (`draw_release_fallback`); every other value of the run
    /// is the one drawn before (`the_short_liveness_bound_and_long_outputs_are_drawn_on_their_own`
    /// sets it back and meets the digests pinned before). A profile whose decode has no fallback
    /// timer, and the blind swarm, keep their values.
    #[test]
    fn a_profile_with_a_release_fallback_draws_shorter_ones() {
        let p22 = Space::Profile("sglang-0.5.22".into());
        half_drawn_shorter(&p22, |k| k.deferred_release_timeout_ms, &[1_000, 5_000, 30_000]);
        let nixl = Space::Profile("vllm-nixl".into());
        assert!((0..200).all(|s| draw(s, &nixl).knobs.deferred_release_timeout_ms == 30_000));
        assert!((0..200).all(|s| draw(s, &Space::Blind).knobs.deferred_release_timeout_ms == 30_000));
    }

    /// Half of a profile's runs whose prefill leases its source blocks for decode's read (vLLM's
    /// NIXL) take a shorter lease, from a generator of their own (`draw_source_lease`); a profile
    /// behind the concurrent router (no lease) and the blind swarm keep their values.
    #[test]
    fn a_profile_with_a_source_lease_draws_shorter_ones() {
        let nixl = Space::Profile("vllm-nixl".into());
        half_drawn_shorter(&nixl, |k| k.source_lease_ms, &[5_000, 30_000]);
        let p22 = Space::Profile("sglang-0.5.22".into());
        assert!((0..200).all(|s| draw(s, &p22).knobs.source_lease_ms == 480_000));
    }

    /// `PINNED_DRAWS` without the short liveness bound and the long outputs (as pinned at the
    /// merge of the pipeline-stage knobs, before issue 15 drew them; re-pinned with `PINNED_DRAWS`
    /// for `vllm-nixl`'s 30 s lease and sglang-0.5.22's room-only commit, ack after the drain and
    /// timeout that returns while writing, and `vllm-nixl`'s fixed pipeline-stage values, and for
    /// the `decode_admission`, `decode_loads_hold_slots`, `prefill_checkpoint_duplicates`,
    /// `decode_prefix_rules`, `retraction_host_pool`, `decode_first_write` and
    /// `decode_abort_heartbeat` fields, and `vllm-nixl`'s decode prefix cache).
    const PINNED_DRAWS_BEFORE_THE_SHORT_BOUND: [&str; 4] = [
        "blind: 7caaa12cbab85a54",
        "sglang-0.5.22: 3297680737afc865",
        "prefix: 5e7ffa5d0e50b14e",
        "vllm-nixl prefix: 75a6b5cd4cf1a886",
    ];

    #[test]
    fn draws_are_deterministic_and_valid() {
        for seed in 0..200 {
            let a = draw(seed, &Space::Blind);
            assert_eq!(a, draw(seed, &Space::Blind));
            // The drawn scenario survives a round trip through the scenario file format.
            let text = crate::scenario::to_toml(&a, "test");
            let back = crate::scenario::Scenario::parse("drawn.toml", &text)
                .and_then(|s| s.resolve(&Default::default()))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
            let (wa, _) = run_case(a);
            let (wb, _) = run_case(back);
            assert_eq!(wa.tracer.hash_hex(), wb.tracer.hash_hex(), "seed {seed}");
        }
    }
}

#[cfg(test)]
mod reach_tests {
    use super::*;

    /// Every (knob, value) a catalogue scenario sets, in `[knobs]` or an `[[expect]]`'s `set`.
    fn catalogue_knob_values() -> BTreeSet<(String, String)> {
        let dir = std::path::Path::new(&crate::test_manifest_dir()).join("../scenarios/catalogue");
        let mut out = BTreeSet::new();
        let mut add = |t: &toml::Table| {
            for (k, v) in t {
                out.insert((k.clone(), v.to_string()));
            }
        };
        for e in std::fs::read_dir(&dir).expect("catalogue folder") {
            let p = e.expect("entry").path();
            if p.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let t: toml::Table = std::fs::read_to_string(&p).expect("read").parse().expect("toml");
            if let Some(k) = t.get("knobs").and_then(|k| k.as_table()) {
                add(k);
            }
            for x in t.get("expect").and_then(|x| x.as_array()).into_iter().flatten() {
                if let Some(s) = x.get("set").and_then(|s| s.as_table()) {
                    add(s);
                }
            }
        }
        out
    }

    #[test]
    fn blind_draws_reach_every_knob_value_the_catalogue_uses() {
        let mut want = catalogue_knob_values();
        assert!(want.len() > 20, "{want:?}");
        for seed in 0..400 {
            let c = draw(seed, &Space::Blind);
            let t = toml::Table::try_from(&c.knobs).expect("knobs serialise");
            want.retain(|(k, v)| t.get(k).map(|x| x.to_string()).as_ref() != Some(v));
            if want.is_empty() {
                return;
            }
        }
        panic!("not drawn in 400 blind seeds: {want:?}");
    }

    #[test]
    fn swarm_draws_reach_metadata_lag_and_prefix_workloads() {
        for space in [Space::Blind, Space::Profile("sglang-0.5.22".into()), Space::Profile("vllm-nixl".into())] {
            let (mut lag, mut prefix) = (0, 0);
            for seed in 0..200 {
                let c = draw(seed, &space);
                lag += c.faults.script.iter().any(|s| matches!(s, config::ScriptedFault::MetadataLag { .. })) as u32;
                prefix += c.requests.iter().any(|r| !r.prefix_blocks.is_empty()) as u32;
                // Scripted lag names requests the run has.
                let n = c.generator.as_ref().map_or(c.requests.len() as u64, |g| g.requests as u64);
                for s in &c.faults.script {
                    if let config::ScriptedFault::MetadataLag { request, .. } = s {
                        assert!((*request as u64) < n, "seed {seed}: {s:?} of {n} requests");
                    }
                }
            }
            assert!((25..=75).contains(&lag), "{space:?}: {lag} of 200 draws with metadata lag");
            assert!((25..=75).contains(&prefix), "{space:?}: {prefix} of 200 draws prefix-heavy");
        }
    }

    /// The prefix space draws the content-channel mitigations (selective sharing with requests
    /// marking blocks public, and hit padding) in about their share of runs, for both inner
    /// spaces; every other space's draws never mark a block public.
    #[test]
    fn prefix_draws_pick_the_content_mitigations() {
        use config::{PrefixCacheScope, PrefixHitTiming};
        for space in
            [Space::Prefix(Box::new(Space::Blind)), Space::Prefix(Box::new(Space::Profile("vllm-nixl".into())))]
        {
            let (mut public_only, mut marked, mut padded, mut global, mut per_tenant) = (0, 0, 0, 0, 0);
            for seed in 0..600 {
                let c = draw(seed, &space);
                match c.knobs.prefix_cache_scope {
                    PrefixCacheScope::PublicOnly => public_only += 1,
                    PrefixCacheScope::Global => global += 1,
                    PrefixCacheScope::PerTenant => per_tenant += 1,
                }
                padded += (c.knobs.prefix_hit_timing == PrefixHitTiming::PaddedToMiss) as u32;
                for r in &c.requests {
                    assert!(r.public_blocks as usize <= r.prefix_blocks.len(), "seed {seed}: {r:?}");
                    if r.public_blocks > 0 {
                        assert_eq!(c.knobs.prefix_cache_scope, PrefixCacheScope::PublicOnly, "seed {seed}");
                        marked += 1;
                    }
                }
                crate::scenario::validate_config(&c, "draw").unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            }
            assert!((150..=250).contains(&public_only), "{space:?}: {public_only} of 600 public_only (expect ~200)");
            assert!(marked > 100, "{space:?}: {marked} requests mark blocks public");
            assert!((100..=200).contains(&padded), "{space:?}: {padded} of 600 padded_to_miss (expect ~150)");
            assert!(global > 100 && per_tenant > 100, "{space:?}: {global} global, {per_tenant} per_tenant");
        }
        for space in [Space::Blind, Space::Profile("sglang-0.5.22".into())] {
            for seed in 0..300 {
                assert!(draw(seed, &space).requests.iter().all(|r| r.public_blocks == 0), "{space:?} seed {seed}");
            }
        }
    }

    #[test]
    fn profile_draws_keep_the_profiles_knobs() {
        for seed in 0..100 {
            let c = draw(seed, &Space::Profile("sglang-0.5.22".into()));
            let p = (config::profile("sglang-0.5.22").expect("profile").knobs)();
            assert_eq!(c.knobs.router_on_prefill_error, p.router_on_prefill_error);
            assert_eq!(c.knobs.decode_transferred_abort, p.decode_transferred_abort);
            assert_eq!(c.knobs.prefix_cache_scope, p.prefix_cache_scope, "seed {seed}");
        }
    }
}

#[cfg(test)]
mod signature_tests {
    use super::*;
    use crate::scenario::{Overrides, Scenario};

    fn catalogue(name: &str, set: &[(&str, &str)]) -> SimConfig {
        let p = std::path::Path::new(&crate::test_manifest_dir()).join(format!("../scenarios/catalogue/{name}.toml"));
        let text = std::fs::read_to_string(&p).expect("catalogue scenario");
        let o =
            Overrides { set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() };
        Scenario::parse(name, &text).expect("parses").resolve(&o).expect("resolves")
    }

    /// The rdma-visibility-lag chain is named by its lag; the decode-free-before-late-write chain
    /// (decode frees an aborted request's pages at once, its transfer writes later) is a plain
    /// `late_write`: the two rows never share a read signature.
    #[test]
    fn late_write_reads_name_the_writers_chain() {
        let (_, lag) = run_case(catalogue("rdma-visibility-lag", &[]));
        assert!(lag.contains("cross_tenant_read/visibility_lag"), "{lag:?}");
        let (_, free) = run_case(catalogue("decode-free-before-late-write", &[]));
        assert!(free.contains("cross_tenant_read/late_write"), "{free:?}");
        assert!(free.iter().all(|x| !x.ends_with("/visibility_lag")), "{free:?}");
    }

    /// The same late write, once lagged and once not: only the lagged one carries the suffix,
    /// on the write's use after free and on the victim's read (never on a read of a source
    /// page, which the lag does not delay).
    #[test]
    fn a_lagged_late_writer_splits_the_signature() {
        let base = catalogue("decode-free-before-late-write", &[]);
        let writer = base.requests.iter().position(|r| r.abort_at_ns.is_some()).expect("an aborted writer") as u32;
        let mut lagged = base.clone();
        lagged.faults.script.push(config::ScriptedFault::VisibilityLag { request: writer, lag_ms: 1 });
        let (w, sigs) = run_case(lagged);
        assert!(w.reqs[writer as usize].lagged());
        assert!(sigs.contains("cross_tenant_read/late_write/visibility_lag"), "{sigs:?}");
        assert!(!sigs.contains("cross_tenant_read/late_write"), "{sigs:?}");
        assert!(sigs.contains("use_after_free/transfer_write/visibility_lag"), "{sigs:?}");
        assert!(
            sigs.iter()
                .filter(|x| x.starts_with("use_after_free/"))
                .all(|x| x.ends_with("/visibility_lag") != x.contains("source_page")),
            "{sigs:?}"
        );
        let (w, sigs) = run_case(base);
        assert!(!w.reqs[writer as usize].lagged());
        assert!(sigs.iter().all(|x| !x.ends_with("/visibility_lag")), "{sigs:?}");
    }

    /// A false corruption abort (decode reads another request's room in its metadata slot) is
    /// named as such; the fixed setting of the row has no such signature.
    #[test]
    fn a_room_mismatch_names_the_false_corruption_abort() {
        let (_, buggy) = run_case(catalogue("stale-metadata-room", &[("metadata_zero_on_free", "off")]));
        assert!(buggy.contains("wrong_status/valid_request_failed/room_mismatch"), "{buggy:?}");
        assert!(!buggy.contains("wrong_status/valid_request_failed"), "{buggy:?}");
        let (_, fixed) = run_case(catalogue("stale-metadata-room", &[("metadata_zero_on_free", "on")]));
        assert!(fixed.iter().all(|x| !x.ends_with("/room_mismatch")), "{fixed:?}");
    }
}
