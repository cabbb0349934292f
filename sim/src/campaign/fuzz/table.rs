//! The one draw table: every value a drawn scenario may take, for both ways kvsim draws
//! scenarios — the campaign's swarm draw from a seed (`fuzz::draw`, the *swarm*) and the cargo-fuzz
//! targets' decoding of bytes (`fuzz_targets::FuzzInput::build`, the *bytes*). Each value is written
//! once, with the draws that use it ([`Use`]); neither draw keeps a list of its own.
//!
//! The two draws stay different on purpose: the swarm draws from a seed and samples evenly (its
//! results for a seed range are pinned by `fuzz::tests::draws_are_pinned`), the bytes let a
//! coverage-guided fuzzer reach edges the swarm skips (a 512-token context, one metadata slot, one
//! running request) and give every committed corpus input a fixed meaning (pinned by
//! `fuzz_targets::tests::decoding_is_pinned`). A value added for one draw is marked for that draw
//! only, so the other one's draws do not move.

use crate::config::{self, Knobs, PrefixCacheScope, RouterPolicy};
use crate::rng::Prng;
use crate::types::Ratio;
use serde::Deserialize;
use std::sync::OnceLock;

/// Which draws use a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Only the campaign's swarm draw.
    Swarm,
    /// Only the cargo-fuzz targets' byte decoding.
    Bytes,
    /// Both.
    Both,
}

use Use::{Both, Bytes, Swarm};

impl Use {
    pub fn swarm(self) -> bool {
        self != Bytes
    }
    pub fn bytes(self) -> bool {
        self != Swarm
    }
}

/// One dimension of a drawn scenario: its values (in the order both draws index them), each with
/// the draws that use it.
pub struct Column<T: 'static> {
    pub rows: &'static [(T, Use)],
}

impl<T: Copy> Column<T> {
    /// The values the swarm draws from, in order.
    pub fn swarm_values(&self) -> impl Iterator<Item = T> + '_ {
        self.rows.iter().filter(|(_, u)| u.swarm()).map(|(v, _)| *v)
    }

    /// The values the bytes reach, in order.
    pub fn byte_values(&self) -> impl Iterator<Item = T> + '_ {
        self.rows.iter().filter(|(_, u)| u.bytes()).map(|(v, _)| *v)
    }

    /// The smallest value of the column (swarm's and bytes' rows alike).
    pub fn min_value(&self) -> T
    where
        T: Ord,
    {
        self.rows.iter().map(|r| r.0).min().expect("a column has rows")
    }

    /// The largest value of the column (swarm's and bytes' rows alike).
    pub fn max_value(&self) -> T
    where
        T: Ord,
    {
        self.rows.iter().map(|r| r.0).max().expect("a column has rows")
    }

    /// The swarm's draw: uniform among its values (one `below(n)`; no draw when there is one value).
    pub fn pick(&self, rng: &mut Prng) -> T {
        let n = self.swarm_values().count();
        let i = rng.below(n as u64) as usize;
        self.swarm_values().nth(i).expect("the swarm uses a value of every column it draws")
    }

    /// The bytes' choice: value `b % n` of the values the bytes reach.
    pub fn at(&self, b: u8) -> T {
        let n = self.byte_values().count();
        self.byte_values().nth(usize::from(b) % n).expect("the bytes reach a value of every column they decode")
    }
}

// The deployment.

/// Context length in tokens.
pub const CONTEXT_LEN: Column<u64> = Column {
    rows: &[(512, Bytes), (1024, Bytes), (2048, Both), (4096, Both), (8192, Both), (16384, Both), (32768, Both)],
};
/// Page size in tokens (also the `page_size` knob: the deployment's, not drawn with the knobs).
pub const PAGE_SIZE: Column<u64> = Column { rows: &[(1, Both), (4, Both), (16, Both), (64, Both)] };
/// Prefill pool size in eighths of the context: the incident's shape (pool < context) and larger.
pub const PREFILL_POOL_EIGHTHS: Column<u64> =
    Column { rows: &[(2, Bytes), (3, Both), (4, Both), (6, Both), (8, Both), (12, Both), (16, Both)] };
/// Decode pool size in eighths of the context.
pub const DECODE_POOL_EIGHTHS: Column<u64> =
    Column { rows: &[(3, Bytes), (4, Bytes), (6, Both), (8, Both), (12, Both), (16, Both), (24, Both), (32, Both)] };
/// Metadata slots per node.
pub const METADATA_SLOTS: Column<u32> = Column { rows: &[(1, Bytes), (2, Both), (8, Both), (64, Both)] };
/// Pipeline stages of every prefill instance (`pp_stages`): the blind swarm draws them from the
/// generator of [`OWN_STREAM_KNOBS`], after those knobs: two runs in three with stages; the bytes
/// keep one stage.
pub const PP_STAGES: Column<u16> = Column { rows: &[(1, Both), (2, Swarm), (4, Swarm)] };
/// `max_running_requests` per node (the swarm keeps 64).
pub const MAX_RUNNING_REQUESTS: Column<u32> = Column { rows: &[(1, Bytes), (2, Bytes), (8, Bytes), (64, Both)] };
/// The router's pair selection.
pub const ROUTER_POLICY: Column<RouterPolicy> = Column {
    rows: &[(RouterPolicy::RoundRobin, Both), (RouterPolicy::Random, Both), (RouterPolicy::LeastLoaded, Both)],
};
/// `chunked_prefill_size` (a deployment knob).
pub const CHUNKED_PREFILL_SIZE: Column<u64> =
    Column { rows: &[(256, Both), (1024, Both), (4096, Both), (8192, Bytes)] };
/// `max_transfer_batch_pages` (a deployment knob; 0 = unbatched: the swarm tosses a coin for 0
/// before drawing among the rest).
pub const MAX_TRANSFER_BATCH_PAGES: Column<u64> =
    Column { rows: &[(0, Bytes), (1, Bytes), (4, Both), (64, Both), (4096, Bytes)] };
/// `transfer_sync_timeout_ms` (a deployment knob).
pub const TRANSFER_SYNC_TIMEOUT_MS: Column<u64> =
    Column { rows: &[(500, Both), (2_000, Swarm), (5_000, Both), (60_000, Both)] };
/// A shorter `deferred_release_timeout_ms` that half of a profile's runs take where decode's
/// deferred release has a fallback timer (`fuzz::draw_release_fallback`; sglang 0.5.22's
/// `SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT`, 30 s by default): shorter than
/// the swarm's 10 s delay spike, and shorter than its transfer sync timeouts of 2 s and more.
pub const SHORT_DEFERRED_RELEASE_TIMEOUT_MS: Column<u64> = Column { rows: &[(1_000, Swarm), (5_000, Swarm)] };
/// A shorter `source_lease_ms` that half of a profile's runs take where prefill leases a finished
/// request's source blocks for decode's read (`fuzz::draw_source_lease`; vLLM's NIXL
/// `kv_lease_duration`, 30 s by default, an operator's setting): shorter than the swarm's 10 s
/// delay spike.
pub const SHORT_SOURCE_LEASE_MS: Column<u64> = Column { rows: &[(5_000, Swarm)] };
/// The knobs drawn with the deployment (from the columns above), never with the other knobs.
pub const DEPLOYMENT_KNOBS: [&str; 4] =
    ["page_size", "chunked_prefill_size", "max_transfer_batch_pages", "transfer_sync_timeout_ms"];

// Faults.

/// A random fault that is on happens one time in this many (the bytes: see [`fault_ratio_at`]).
pub const FAULT_ONE_IN: Column<u64> = Column { rows: &[(2, Bytes), (5, Both), (20, Both), (50, Both), (200, Both)] };
/// How many of eight byte values leave a random fault off (the rest pick from [`FAULT_ONE_IN`]).
pub const FAULT_OFF_EIGHTHS: usize = 3;
/// A delay spike's length.
pub const DELAY_SPIKE_MS: Column<u64> = Column { rows: &[(100, Both), (10_000, Both), (90_000, Bytes)] };
/// A visibility lag (random, and the bytes' scripted one).
pub const VISIBILITY_LAG_MS: Column<u64> = Column { rows: &[(1, Both), (5, Bytes), (50, Both)] };
/// A crashed node's restart delay (the swarm keeps 2 s).
pub const CRASH_RESTART_MS: Column<u64> = Column { rows: &[(100, Bytes), (2_000, Both), (30_000, Bytes)] };
/// When random faults heal (the swarm keeps 60 s).
pub const HEAL_AT_MS: Column<u64> = Column { rows: &[(1_000, Bytes), (10_000, Bytes), (60_000, Both)] };
/// A scripted delay (the bytes script delays; the swarm does not).
pub const SCRIPTED_DELAY_MS: Column<u64> =
    Column { rows: &[(1, Bytes), (100, Bytes), (1_000, Bytes), (10_000, Bytes), (90_000, Bytes)] };
/// Scripted metadata lag: one request in this many lagged (the swarm's `draw_metadata_lag`).
pub const METADATA_LAG_EVERY: Column<u64> = Column { rows: &[(1, Swarm), (2, Swarm), (4, Swarm)] };
/// A scripted metadata lag's length (the swarm's `draw_metadata_lag`; the bytes' `MetadataLag`).
pub const METADATA_LAG_MS: Column<u64> = Column { rows: &[(1, Both), (20, Both), (50, Both), (500, Both)] };

/// A random fault's ratio from a byte: off for `FAULT_OFF_EIGHTHS` of eight values, else one in
/// a [`FAULT_ONE_IN`] value.
pub fn fault_ratio_at(b: u8) -> Ratio {
    let i = usize::from(b) % 8;
    if i < FAULT_OFF_EIGHTHS {
        Ratio::NEVER
    } else {
        Ratio { num: 1, den: FAULT_ONE_IN.at((i - FAULT_OFF_EIGHTHS) as u8) }
    }
}

// The swarm's workload (the bytes give explicit requests, arithmetic from their fields).

/// Generated requests per run.
pub const REQUESTS: Column<u32> = Column { rows: &[(2, Swarm), (4, Swarm), (8, Swarm), (16, Swarm), (32, Swarm)] };
/// The generator's mean interarrival.
pub const MEAN_INTERARRIVAL_US: Column<u64> = Column { rows: &[(1_000, Swarm), (50_000, Swarm), (500_000, Swarm)] };
/// The weight of each of the three prompt-length buckets (short, medium, around the context).
pub const PROMPT_BUCKET_WEIGHT: Column<u64> = Column { rows: &[(0, Swarm), (1, Swarm), (3, Swarm), (10, Swarm)] };
/// The largest output length.
pub const MAX_OUTPUT_TOKENS: Column<u64> = Column { rows: &[(1, Swarm), (8, Swarm), (64, Swarm)] };
/// One swarm run in [`LONG_OUTPUT_ONE_IN`] that uses the generator draws its largest output length
/// as [`LONG_OUTPUT_TOKENS`] instead: decode batches that grow past their pool and retract
/// (`decode_out_of_pages`), long enough for a client abort to land while a request is retracted
/// (leak-abort-retracted: not reached in 110,000 blind runs with outputs of at most 64 tokens).
/// Drawn from a generator of its own (`fuzz::draw_long_outputs`).
pub const LONG_OUTPUT_TOKENS: u64 = 512;
pub const LONG_OUTPUT_ONE_IN: u64 = 8;
/// How soon a client abort comes.
pub const ABORT_WITHIN_MS: Column<u64> = Column { rows: &[(5, Swarm), (200, Swarm), (2_000, Swarm)] };
/// The mean gap between prefix-heavy requests.
pub const PREFIX_GAP_US: Column<u64> = Column { rows: &[(1_000, Swarm), (20_000, Swarm), (200_000, Swarm)] };
/// The prefix-cache scope of a prefix-heavy run (a blind draw keeps it; a profile draw sets it).
pub const PREFIX_CACHE_SCOPE: Column<PrefixCacheScope> =
    Column { rows: &[(PrefixCacheScope::Global, Swarm), (PrefixCacheScope::PerTenant, Swarm)] };
/// One prefix-space run in this many shares selectively (`prefix_cache_scope = public_only`,
/// each request marking a drawn number of its leading blocks public), instead of the scope above.
/// Drawn from a generator of its own, so the scope and requests above draw as before (see
/// `fuzz::draw_content_mitigations`).
pub const PREFIX_PUBLIC_ONLY_ONE_IN: u64 = 3;
/// The most leading blocks a `public_only` run's requests mark public (drawn from 1 once per run).
pub const PREFIX_PUBLIC_BLOCKS_MAX: u64 = 3;
/// One prefix-space run in this many pads cache hits to a miss's cost
/// (`prefix_hit_timing = padded_to_miss`); the others charge what they compute (`as_computed`).
pub const PREFIX_PADDED_TO_MISS_ONE_IN: u64 = 4;

/// The liveness bound of a swarm run (`liveness_bound_s`: the horizon is the last arrival plus it).
pub const LIVENESS_BOUND_S: u64 = 1_200;
/// One swarm run in [`SHORT_LIVENESS_BOUND_ONE_IN`] is judged [`SHORT_LIVENESS_BOUND_S`] after
/// its last arrival instead (the catalogue's lease scenarios' 2 minutes): a leak that lasts until a
/// 480 s lease (held-blocks-leak, pre-admission-reject-strands-prefill: the lease their scenarios
/// configure) ends inside a 1,200 s horizon and is never seen there. Drawn from a generator of its own (`fuzz::draw_liveness_bound`),
/// so every other value of a run is drawn as before.
pub const SHORT_LIVENESS_BOUND_S: u64 = 120;
pub const SHORT_LIVENESS_BOUND_ONE_IN: u64 = 4;

// The engine knobs.

/// Knob values no profile uses but a catalogue row's scenario does (as its buggy or its fixed
/// setting): the swarm draws them too, so the blind swarm reaches every row the model expresses
/// (`router_on_prefill_error = cancel_decode` for abort-lost-on-success and router-waits-for-decode,
/// `decode_transferred_abort = leak` for leak-abort-in-waiting, `prefix_cache_scope = per_tenant`
/// for cross-tenant-prefix-hit, the content-channel mitigations `public_only` and `padded_to_miss`
/// of prefix-timing-channel, the 10 s and 480 s leases of held-blocks-leak and
/// pre-admission-reject-strands-prefill (the fix, and the long lease a deployment configures:
/// `vllm-nixl` carries NIXL's default 30 s; the sglang profiles' unused 480 s gives the value
/// too), the 16-token decode reserve of the small catalogue scenarios, the double release of double-release, the orphaning waiting-queue poll of
/// orphan-in-prefill-waiting and its 100 ms waiting timer, the transfer teardown of cancel-mid-transfer, the one-token
/// lookahead of the vLLM short-prefill scenario, the leaked host copy of leak-abort-retracted, the
/// decode-side radix cache and the skipped zero-page last chunk of zero-page-last-chunk — those two
/// drawn from a stream of their own, [`OWN_STREAM_KNOBS`]). A test checks every value the catalogue uses
/// against blind draws.
pub const CATALOGUE_KNOB_VALUES: &[(&str, &str)] = &[
    ("router_on_prefill_error", "cancel_decode"),
    ("decode_transferred_abort", "leak"),
    ("prefill_rejected_release", "twice"),
    ("prefill_failed_check", "bootstrap_and_inflight"),
    ("waiting_timeout_ms", "100"),
    ("cancel_mid_transfer", "leak"),
    ("decode_lookahead_tokens", "1"),
    ("retracted_abort", "leak"),
    ("decode_radix_cache", "on"),
    ("zero_page_last_chunk", "skip"),
    ("pp_metadata_writer", "last_stage"),
    ("pp_bootstrap_consensus", "local_repoll"),
    ("prefix_cache_scope", "per_tenant"),
    ("prefix_cache_scope", "public_only"),
    ("prefix_hit_timing", "padded_to_miss"),
    ("source_lease_ms", "10000"),
    ("source_lease_ms", "480000"),
    ("reserved_decode_tokens", "16"),
    ("decode_abort_heartbeat", "until_read_ends"),
];

/// Knobs the swarm draws with weights of its own instead of evenly among the profiles' and the
/// catalogue's values: mitigations mostly off, every allocator but the vLLM one, `zero_on_free`
/// one run in eight. Listed in draw order (a draw of `below(total)` walks them).
pub const SWARM_WEIGHTS: &[(&str, &[(&str, u32)])] = &[
    ("decode_commit_check", &[("room_only", 2), ("coverage", 1), ("assert_crash", 1)]),
    ("free_list_policy", &[("sorted_on_merge", 1), ("lifo", 1), ("fifo", 1), ("lru", 1)]),
    ("kv_canary", &[("off", 3), ("log", 1), ("raise", 1)]),
    ("kv_checksum", &[("off", 3), ("on", 1)]),
    ("page_tags", &[("off", 3), ("on", 1)]),
    ("zero_on_free", &[("true", 1), ("false", 7)]),
];

/// Extra values the bytes may give numeric knobs, next to the profiles' own: short timeouts and
/// small reservations reach the paths the shipped profiles never take.
fn numeric_extras(name: &str) -> &'static [i64] {
    match name {
        "reserved_decode_tokens" => &[0, 16, 4096],
        "tokenizer_reserved_tokens" => &[64],
        "bootstrap_timeout_ms" | "waiting_timeout_ms" => &[100, 5_000],
        "heartbeat_interval_ms" => &[1_000],
        "heartbeat_failures" => &[1],
        "deferred_release_timeout_ms" => &[10, 1_000],
        "source_lease_ms" => &[100, 5_000],
        "decode_lookahead_tokens" => &[1, 4],
        _ => &[],
    }
}

/// One knob's values.
#[derive(Debug)]
pub struct KnobValues {
    pub name: String,
    /// Every value a draw may give the knob, in the bytes' order: the profiles' values (in profile
    /// order), then every variant of an enum knob (in declaration order), both booleans, the
    /// `numeric_extras`, then catalogue values nothing above has. Empty for a deployment knob.
    pub values: Vec<(toml::Value, Use)>,
    /// The swarm's draw: (index into `values`, weight), in draw order.
    pub swarm: Vec<(usize, u32)>,
}

impl KnobValues {
    /// The values the bytes reach, in order.
    pub fn byte_values(&self) -> impl Iterator<Item = &toml::Value> + '_ {
        self.values.iter().filter(|(_, u)| u.bytes()).map(|(v, _)| v)
    }

    /// The values the swarm draws, in draw order (a value drawn with weight `w` once).
    pub fn swarm_values(&self) -> impl Iterator<Item = &toml::Value> + '_ {
        self.swarm.iter().map(|&(i, _)| &self.values[i].0)
    }

    /// The swarm's draw (one `below(total weight)`; none for a deployment knob or a single value).
    pub fn pick(&self, rng: &mut Prng) -> Option<toml::Value> {
        let total: u32 = self.swarm.iter().map(|&(_, w)| w).sum();
        if total == 0 {
            return None;
        }
        let mut x = rng.below(u64::from(total));
        for &(i, w) in &self.swarm {
            if x < u64::from(w) {
                return Some(self.values[i].0.clone());
            }
            x -= u64::from(w);
        }
        unreachable!("x < total weight")
    }

    /// The bytes' choice: 0 keeps the profile's value (`None`), `c > 0` takes value `(c - 1) % n`.
    pub fn at(&self, c: u8) -> Option<toml::Value> {
        let n = self.byte_values().count();
        if c == 0 || n == 0 {
            return None;
        }
        self.byte_values().nth((usize::from(c) - 1) % n).cloned()
    }
}

/// Whether `v` is a valid value of knob `name` (checked by deserialising, as `resolve` does).
fn valid_knob(base: &toml::Table, name: &str, v: &toml::Value) -> bool {
    let mut t = base.clone();
    t.insert(name.to_string(), v.clone());
    Knobs::deserialize(t).is_ok()
}

/// A value written as text in this table, typed as the knob's (integer, boolean or string).
fn typed(v: &str) -> toml::Value {
    match (v.parse::<i64>(), v.parse::<bool>()) {
        (Ok(n), _) => toml::Value::Integer(n),
        (_, Ok(b)) => toml::Value::Boolean(b),
        _ => toml::Value::String(v.into()),
    }
}

/// The variants of a string knob, read from serde's "expected one of" message.
fn variants(base: &toml::Table, name: &str) -> Vec<toml::Value> {
    let mut t = base.clone();
    t.insert(name.to_string(), toml::Value::String("\u{1}".into()));
    let Err(e) = Knobs::deserialize(t) else { return vec![] };
    let msg = e.message().to_string();
    let expected = msg.split_once("expected").map_or("", |(_, x)| x);
    expected.split('`').skip(1).step_by(2).map(|v| toml::Value::String(v.to_string())).collect()
}

/// Every knob (in `config::knob_names` order, which is also the swarm's draw order) with its values.
pub fn knobs() -> &'static [KnobValues] {
    static TABLE: OnceLock<Vec<KnobValues>> = OnceLock::new();
    TABLE.get_or_init(|| config::knob_names().into_iter().map(knob_values).collect())
}

fn knob_values(name: String) -> KnobValues {
    if DEPLOYMENT_KNOBS.contains(&name.as_str()) {
        return KnobValues { name, values: vec![], swarm: vec![] };
    }
    let base = toml::Table::try_from((config::PROFILES[0].knobs)()).expect("knobs serialise");
    let mut values: Vec<(toml::Value, Use)> = Vec::new();
    let add =
        |v: toml::Value, u: Use, values: &mut Vec<(toml::Value, Use)>| match values.iter_mut().find(|(x, _)| *x == v) {
            Some((_, old)) if *old != u => *old = Both,
            Some(_) => {}
            None => values.push((v, u)),
        };
    for p in config::PROFILES {
        let t = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
        add(t[&name].clone(), Both, &mut values);
    }
    let profiles = values.len();
    let extras: Vec<toml::Value> = match base.get(&name) {
        Some(toml::Value::String(_)) => variants(&base, &name),
        Some(toml::Value::Boolean(_)) => vec![toml::Value::Boolean(false), toml::Value::Boolean(true)],
        Some(toml::Value::Integer(_)) => numeric_extras(&name).iter().map(|x| toml::Value::Integer(*x)).collect(),
        _ => vec![],
    };
    for v in extras {
        if valid_knob(&base, &name, &v) {
            add(v, Bytes, &mut values);
        }
    }
    let weighted = SWARM_WEIGHTS.iter().find(|(k, _)| *k == name).map(|(_, w)| *w);
    let mut swarm = Vec::new();
    match weighted {
        Some(weights) => {
            // The swarm draws only these; a profile value left out is the bytes' alone.
            for v in values.iter_mut() {
                v.1 = Bytes;
            }
            for (v, w) in weights {
                let v = typed(v);
                let i = values.iter().position(|(x, _)| *x == v).expect("a weighted value is a knob value");
                values[i].1 = Both;
                swarm.push((i, *w));
            }
        }
        None => {
            for (k, v) in CATALOGUE_KNOB_VALUES {
                if *k == name {
                    add(typed(v), Swarm, &mut values);
                }
            }
            // The profiles' values, then the catalogue's in the catalogue's order.
            swarm.extend((0..profiles).map(|i| (i, 1)));
            for (k, v) in CATALOGUE_KNOB_VALUES {
                if *k != name {
                    continue;
                }
                let i = values.iter().position(|(x, _)| *x == typed(v)).expect("added above");
                if !swarm.iter().any(|&(j, _)| j == i) {
                    swarm.push((i, 1));
                }
            }
        }
    }
    KnobValues { name, values, swarm }
}

/// Knobs the blind swarm draws from a generator of their own ([`draw_own_stream_knobs`], after
/// every other knob), not from the swarm's: added after campaign tables were pinned, so every
/// other value of a blind run is drawn as before (the swarm's stream does not move).
pub const OWN_STREAM_KNOBS: &[&str] = &[
    "decode_radix_cache",
    "zero_page_last_chunk",
    "pp_metadata_writer",
    "pp_bootstrap_consensus",
    "decode_admission",
    "decode_loads_hold_slots",
    "prefill_checkpoint_duplicates",
    "decode_prefix_rules",
    "retraction_host_pool",
    "decode_first_write",
    "decode_abort_heartbeat",
];

/// The swarm's blind draw of every knob over `base` (deployment knobs kept: they come from their
/// columns; [`OWN_STREAM_KNOBS`] kept: [`draw_own_stream_knobs`] draws them).
pub fn draw_knobs(rng: &mut Prng, base: &Knobs) -> Knobs {
    let mut t = toml::Table::try_from(base).expect("knobs serialise");
    for k in knobs().iter().filter(|k| !OWN_STREAM_KNOBS.contains(&k.name.as_str())) {
        if let Some(v) = k.pick(rng) {
            t.insert(k.name.clone(), v);
        }
    }
    t.try_into().expect("every drawn value is a valid knob value")
}

/// The blind swarm's draw of [`OWN_STREAM_KNOBS`] over `knobs`, in their listed order, from `rng`
/// (a generator of their own: `fuzz::draw_swarm` gives it).
pub fn draw_own_stream_knobs(rng: &mut Prng, knobs: &Knobs) -> Knobs {
    let mut t = toml::Table::try_from(knobs).expect("knobs serialise");
    for name in OWN_STREAM_KNOBS {
        let k = self::knobs().iter().find(|k| k.name == *name).expect("an own-stream knob is a knob");
        if let Some(v) = k.pick(rng) {
            t.insert(k.name.clone(), v);
        }
    }
    t.try_into().expect("every drawn value is a valid knob value")
}

/// Knobs added after fuzz corpus inputs were committed (issue 13). The bytes index them after
/// every older knob ([`byte_order`]), so a committed input's bytes keep choosing the same values
/// for the knobs it was written against; the new knobs read bytes past those.
pub const BYTES_APPENDED_KNOBS: &[&str] = &[
    "prefill_rejected_release",
    "prefill_failed_check",
    "cancel_mid_transfer",
    "decode_lookahead_tokens",
    "decode_out_of_pages",
    "retracted_abort",
    "decode_radix_cache",
    "zero_page_last_chunk",
    "decode_reject_releases_prefill",
    "decode_admission",
    "decode_loads_hold_slots",
    "prefill_checkpoint_duplicates",
    "decode_prefix_rules",
    "retraction_host_pool",
    "decode_first_write",
    "decode_abort_heartbeat",
];

/// The knobs in the order the bytes index them: `config::knob_names` order without
/// [`BYTES_APPENDED_KNOBS`], then those in their listed order.
pub fn byte_order() -> impl Iterator<Item = &'static KnobValues> {
    let table = knobs();
    table
        .iter()
        .filter(|k| !BYTES_APPENDED_KNOBS.contains(&k.name.as_str()))
        .chain(BYTES_APPENDED_KNOBS.iter().filter_map(move |n| table.iter().find(|k| k.name == *n)))
}

/// The bytes' knobs: `base` with the choice of `bytes[i]` applied to knob `i` of [`byte_order`]
/// (deployment knobs excluded).
pub fn choose_knobs(base: &Knobs, bytes: &[u8]) -> Knobs {
    let Ok(mut t) = toml::Table::try_from(base) else { return base.clone() };
    for (i, k) in byte_order().enumerate() {
        if let Some(v) = k.at(bytes.get(i).copied().unwrap_or(0)) {
            t.insert(k.name.clone(), v);
        }
    }
    Knobs::deserialize(t).unwrap_or_else(|_| base.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_but_the_deployments_has_values_for_both_draws() {
        let table = knobs();
        assert_eq!(table.len(), config::knob_names().len());
        for k in table {
            let deployment = DEPLOYMENT_KNOBS.contains(&k.name.as_str());
            assert_eq!(k.values.is_empty(), deployment, "{}", k.name);
            assert_eq!(k.swarm.is_empty(), deployment, "{}", k.name);
            // Every value the swarm draws is marked for it, and the marks say no more.
            let drawn: Vec<usize> = k.swarm.iter().map(|&(i, _)| i).collect();
            for (i, (v, u)) in k.values.iter().enumerate() {
                assert_eq!(u.swarm(), drawn.contains(&i), "{} = {v}", k.name);
            }
        }
        let get = |n: &str| table.iter().find(|k| k.name == n).expect("knob");
        assert_eq!(get("free_list_policy").byte_values().count(), 5);
        assert_eq!(get("free_list_policy").swarm_values().count(), 4);
        assert_eq!(get("decode_commit_check").byte_values().count(), 3);
        assert_eq!(get("kv_canary").byte_values().count(), 3);
        assert_eq!(get("zero_on_free").byte_values().count(), 2);
        // A catalogue value no profile or extra has is the swarm's alone.
        // Knobs added later are indexed by the bytes after every older one, each once.
        let order: Vec<&str> = byte_order().map(|k| k.name.as_str()).collect();
        assert_eq!(order.len(), table.len());
        assert_eq!(&order[order.len() - BYTES_APPENDED_KNOBS.len()..], BYTES_APPENDED_KNOBS);
        let lease = get("source_lease_ms");
        assert!(lease.values.contains(&(toml::Value::Integer(10_000), Swarm)), "{lease:?}");
    }

    #[test]
    fn weighted_draws_follow_their_weights() {
        let k = knobs().iter().find(|k| k.name == "zero_on_free").expect("knob");
        let mut rng = Prng::child(7, "table-test");
        let on = (0..8_000).filter(|_| k.pick(&mut rng) == Some(toml::Value::Boolean(true))).count();
        assert!((800..1200).contains(&on), "{on} of 8,000 draws with zero_on_free (expect ~1,000)");
    }

    #[test]
    fn columns_index_their_own_values() {
        assert_eq!(CONTEXT_LEN.swarm_values().collect::<Vec<_>>(), [2048, 4096, 8192, 16384, 32768]);
        assert_eq!(CONTEXT_LEN.at(0), 512);
        assert_eq!(CONTEXT_LEN.at(7), 512);
        assert_eq!(TRANSFER_SYNC_TIMEOUT_MS.byte_values().collect::<Vec<_>>(), [500, 5_000, 60_000]);
        assert_eq!(fault_ratio_at(2), Ratio::NEVER);
        assert_eq!(fault_ratio_at(3), Ratio { num: 1, den: 2 });
        assert_eq!(fault_ratio_at(15), Ratio { num: 1, den: 200 });
        let (mut a, mut b) = (Prng::child(1, "table-test"), Prng::child(1, "table-test"));
        // One value: no draw, the generator untouched.
        assert_eq!(MAX_RUNNING_REQUESTS.pick(&mut a), 64);
        assert_eq!(a.below(1 << 40), b.below(1 << 40));
    }
}
