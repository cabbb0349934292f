//! Coverage-guided campaigns (`kvsim fuzz --guided`): a corpus of inputs that reached new model
//! coverage (`crate::coverage`) is mutated, as libFuzzer evolves its corpus by code coverage.
//!
//! An input is a [`Recipe`]: a swarm draw (`draw(root, space)`) and a list of mutation seeds, each
//! applied in turn by [`mutate`] (re-seed the run, one knob, one fault, the workload, the
//! deployment, a scripted fault, a nudge of one duration, a splice from another draw). Recipes
//! are small and rebuild the same scenario on any machine, so the corpus lives in the campaign's
//! checkpoint.
//!
//! Determinism (same table for any `--jobs`): runs are grouped in epochs of [`EPOCH_RUNS`] runs
//! of the shard. Every run of epoch `e` is planned ([`Guided::plan`]) from the corpus as it was
//! when epoch `e - 1` ended, and from its own run number; the runs' new features are folded into
//! the corpus in run order when the epoch's last run is counted ([`Guided::fold`]). A worker
//! that reaches a run of the next epoch waits for that fold. Every run of the first
//! [`WARMUP_EPOCHS`] epochs, and a share of later ones set by how much new coverage each mode
//! has been adding ([`Guided::fresh_share`]), is a fresh draw: the swarm's next run not yet run
//! (the fresh runs are the swarm's sequence without holes, [`Guided::plan`]), so a guided
//! campaign keeps exploring where the corpus has not been.

use super::{draw, draw_prefix_requests, table, Space};
use crate::config::{self, ScriptedFault, SimConfig};
use crate::rng::Prng;
use crate::types::Ratio;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Runs per epoch (of the shard): the corpus is fixed while an epoch runs.
pub const EPOCH_RUNS: u64 = 64;
/// Epochs whose runs are all the swarm's own draws: a corpus of the first few hundred runs is
/// mostly queue shapes every draw reaches, and mutating it only delayed the swarm's early finds
/// (the guided curve was behind the swarm's up to ~500 runs on every profile, BENCHMARKS.md).
pub const WARMUP_EPOCHS: u64 = 4;
/// The fresh share of a mutating epoch, in 1/[`SHARE_DEN`]: at least [`FRESH_MIN`], at most
/// [`FRESH_MAX`], set by [`Guided::fresh_share`] from which mode has been adding coverage.
pub const SHARE_DEN: u64 = 16;
pub const FRESH_MIN: u64 = 4;
pub const FRESH_MAX: u64 = 12;
/// A recipe has at most this many mutations: a parent at the cap gives its children its
/// ancestor's mutations (deeper ones would cost as much to rebuild as to run). 16 stopped the
/// planted seven-stage climb (each stage adds 1–3 mutations).
pub const MAX_DEPTH: usize = 32;
/// What a new signature edge (`coverage::is_signature_edge`) is worth to [`Guided::fresh_share`]'s
/// bandit, in model edges: the campaign counts signatures, and a mode that finds new ones should
/// win runs even while the other adds more queue shapes. With every edge worth one, the blind
/// bandit sat at its mutating floor (mutated runs added 3x the features per run of fresh draws)
/// while fresh draws found the signatures, and guided trailed the swarm on blind (BENCHMARKS.md).
pub const SIGNATURE_WEIGHT: u64 = 16;

/// Of the mutated runs, one in this many takes its parent among the entries that reached the
/// campaign's rarest edges ([`Guided::rare_entries`]), as FairFuzz targets rare branches; the
/// others take the rarest of three uniform picks. Measured over 5 seeds x 5,000 runs
/// (BENCHMARKS.md, "Guided campaigns"): one in two was ahead of one in three and of always.
pub const RARE_FOCUS: u64 = 2;

/// A guided input: the swarm draw of `root`, then each mutation in turn.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Recipe {
    pub root: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutations: Vec<u64>,
}

impl Recipe {
    /// The scenario of this recipe in `space`. A mutation whose result fails the cheap checks of
    /// [`plausible`] is skipped. (The full check, `scenario::validate_config`, is a TOML round trip
    /// that costs more than a run; the tests hold every mutation to it instead.)
    pub fn build(&self, space: &Space) -> SimConfig {
        let c = draw(self.root, space);
        if self.mutations.is_empty() {
            return c;
        }
        self.build_from(c, 0, space)
    }

    /// The scenario of this recipe from `c`, the scenario of its root with its first `done`
    /// mutations applied (before the final renaming): what [`Recipe::build`] computes, started
    /// from a prefix already built ([`Guided::build`]).
    fn build_from(&self, c: SimConfig, done: usize, space: &Space) -> SimConfig {
        let name = format!("{}-guided{}", c.name, self.mutations.len());
        let mut c = self.apply(c, done, space);
        c.name = name;
        c
    }

    /// `c` with this recipe's mutations from the `done`-th on applied (its name kept: no
    /// mutation changes it).
    fn apply(&self, mut c: SimConfig, done: usize, space: &Space) -> SimConfig {
        for &m in &self.mutations[done..] {
            let mut next = c.clone();
            mutate(&mut next, m, space);
            if !space.draws_hardware_faults() {
                // A space that leaves the hardware faults off (a profile's campaign) leaves them
                // off in its mutations too; else the guided table of a profile holds
                // `…/visibility_lag` signatures its swarm cannot draw (found by the issue 15
                // re-run of the swarm-vs-guided table).
                drop_hardware_faults(&mut next);
            }
            if plausible(&next) {
                c = next;
            }
        }
        c
    }
}

/// The checks a mutated case can fail: it has requests, its pools are whole pages (at least
/// two), its chunk and transfer sizes are what the swarm draws.
fn plausible(c: &SimConfig) -> bool {
    let page = c.knobs.page_size;
    let has_requests = c.generator.as_ref().map_or(!c.requests.is_empty(), |g| g.requests > 0 && c.requests.is_empty());
    has_requests
        && page > 0
        && c.prefill.iter().chain(&c.decode).all(|n| n.pool_tokens % page == 0 && n.pool_tokens >= 2 * page)
        && !c.prefill.is_empty()
        && !c.decode.is_empty()
        // Liveness mode needs faults that heal: a variant turning a random fault on in a base
        // whose faults never heal could not be judged, nor saved (the scenario is refused).
        && crate::check::liveness::validate(&c.faults).is_ok()
}

/// A corpus entry: the recipe and the run that added it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub recipe: Recipe,
    /// The run (`k`) that found it.
    pub run: u64,
    /// Features it added to the corpus when folded.
    pub added: u32,
    /// The edges it added (what `added` counts), to rate how rare what it reached is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<u32>,
}

/// A run of the current epoch that saw features the corpus had not (at the epoch's start).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub run: u64,
    pub recipe: Recipe,
    pub features: Vec<u32>,
    /// Every edge the run visited, for [`Guided::hits`]; counted (and emptied) when the run is,
    /// so the checkpoint's pending candidates do not carry them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<u32>,
}

impl Candidate {
    /// Run `run` of recipe `recipe` visited `edges`; `g` is the corpus it was planned from.
    pub fn new(g: &Guided, run: u64, recipe: Recipe, edges: Vec<u32>) -> Candidate {
        Candidate { run, recipe, features: g.novel(&edges), edges }
    }
}

/// How many runs of the campaign visited each edge (see [`Guided::hits`]).
pub type EdgeHits = BTreeMap<u32, u32>;

/// A guided campaign's state, kept in its checkpoint: the corpus and the features it covers as
/// of the last folded epoch, and the candidates of the epoch in progress (runs already counted),
/// so a resumed campaign folds exactly what the uninterrupted one would.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Guided {
    pub epochs_folded: u64,
    pub corpus: Vec<Entry>,
    pub seen: BTreeSet<u32>,
    pub pending: Vec<Candidate>,
    /// How many runs visited each edge, as of the last folded epoch: the rarer the edges an entry
    /// added, the more often it is mutated ([`Guided::plan`]). Counts commute, so folding them
    /// at the epoch's end keeps the plan independent of the order workers finish in.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hits: EdgeHits,
    /// The counts of the epoch in progress (runs already counted), folded into `hits` with it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending_hits: EdgeHits,
    /// What each mode has been worth, as of the last folded epoch: `[fresh, mutated]` runs and
    /// the corpus features they added, each decayed by 1/8 per epoch (so the share follows the
    /// campaign's phase), in 1/256 units so the checkpoint holds exact integers.
    #[serde(default)]
    pub yield_runs: [u64; 2],
    #[serde(default)]
    pub yield_gain: [u64; 2],
    /// Runs of the epoch in progress by mode (counted runs), folded into `yield_runs`.
    #[serde(default)]
    pub pending_runs: [u64; 2],
    /// Fresh runs of the folded epochs: the next epoch's first fresh run draws the shard's
    /// swarm run of this index ([`Guided::plan`]).
    #[serde(default)]
    pub fresh_runs: u64,
    /// [`Guided::rare_entries`] of this corpus and these counts, worked out once per epoch.
    #[serde(skip)]
    rare: RareEntries,
    /// The scenarios of corpus entries already built ([`Guided::build`]), shared by every clone
    /// (the snapshots workers plan from), and where a child's recipe finds its parent.
    #[serde(skip)]
    built: Built,
}

/// A memo of built corpus scenarios: a mutated run's recipe is its parent's recipe and one to
/// three more mutations, so [`Guided::build`] starts from the parent's scenario instead of
/// replaying the whole recipe from its root draw (a crossover re-draws a donor case and
/// round-trips both through JSON; replaying recipes of up to [`MAX_DEPTH`] mutations was about a
/// tenth of a guided campaign's CPU, BENCHMARKS.md). A recipe's scenario is a function of the
/// recipe and the campaign's space, so the memo is shared by every snapshot of one campaign's
/// corpus (one space) and is never part of the checkpoint's value (equal whether filled or not).
#[derive(Clone, Default)]
struct Built(std::sync::Arc<std::sync::Mutex<BuiltInner>>);

#[derive(Default)]
struct BuiltInner {
    /// Every corpus entry's recipe as `[root, mutations…]` ([`recipe_key`]), with its scenario
    /// before the final renaming ([`Recipe::apply`]) once built.
    entries: std::collections::BTreeMap<Vec<u64>, Option<std::sync::Arc<SimConfig>>>,
    /// How many corpus entries `entries` holds (the corpus's first entries).
    indexed: usize,
    /// How many of them hold a scenario.
    built: usize,
}

impl PartialEq for Built {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Built {}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Built")
    }
}

/// The most scenarios [`Built`] keeps; when full it drops them all and starts again (what it
/// holds never changes a result, only how much of a recipe is replayed). Measured: a blind
/// campaign's corpus held 1,735 entries after 20,000 runs and peak RSS rose by 2–7 MB; ten-minute
/// guided campaigns on the fixed profiles ended with 517 and 956 entries (BENCHMARKS.md).
const MEMO_SCENARIOS: usize = 4096;

/// A recipe as one vector, `[root, mutations…]`: its first `n + 1` elements are the key of the
/// recipe's prefix of `n` mutations in [`BuiltInner::entries`].
fn recipe_key(r: &Recipe) -> Vec<u64> {
    std::iter::once(r.root).chain(r.mutations.iter().copied()).collect()
}

/// A cache of [`Guided::rare_entries`]: emptied by [`Guided::fold`], the only change to the
/// corpus and the counts, so it is a function of the checkpoint and never part of its value
/// (equal whether filled or not).
#[derive(Clone, Debug, Default)]
struct RareEntries(std::sync::OnceLock<Vec<u32>>);

impl PartialEq for RareEntries {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for RareEntries {}

impl Guided {
    /// The epoch of run `k` of shard `(i, n)`.
    pub fn epoch_of(k: u64, shard: (u64, u64)) -> u64 {
        (k.saturating_sub(shard.0) / shard.1.max(1)) / EPOCH_RUNS
    }

    /// Whether run `k` is the last of its epoch.
    pub fn ends_epoch(k: u64, shard: (u64, u64)) -> bool {
        (k.saturating_sub(shard.0) / shard.1.max(1) + 1).is_multiple_of(EPOCH_RUNS)
    }

    /// Whether run `k` is a fresh draw (else a mutation of a corpus entry), and the generator the
    /// mutation's parent and seeds come from. Only the run's own seed and the epoch-start corpus
    /// decide, so any worker plans the same.
    fn fresh_draw(&self, seed_start: u64, k: u64) -> (bool, Prng) {
        let mut rng = Prng::child(seed_start.wrapping_add(k), "guided");
        let fresh =
            self.corpus.is_empty() || self.epochs_folded < WARMUP_EPOCHS || rng.below(SHARE_DEN) < self.fresh_share();
        (fresh, rng)
    }

    /// The input of run `k` of shard `shard` of a campaign starting at `seed_start`, from this
    /// (epoch-start) corpus.
    ///
    /// A fresh run is the shard's next swarm draw not yet run: the `j`-th fresh run of the
    /// shard draws the root the swarm's `j`-th run of the shard draws. So the fresh runs of a
    /// guided campaign are a prefix of the swarm's sequence, never a sample of it with holes
    /// where mutations ran: with the root `seed_start + k` instead, every mutated run skipped a
    /// swarm draw for good, and on blind (where the early swarm draws find a signature every ~150
    /// runs) guided trailed the swarm up to ~3,000 runs (BENCHMARKS.md).
    pub fn plan(&self, seed_start: u64, k: u64, shard: (u64, u64)) -> Recipe {
        let (fresh, mut rng) = self.fresh_draw(seed_start, k);
        if fresh {
            // Fresh runs before `k` in its epoch (the epoch starts at the shard's run
            // `epoch * EPOCH_RUNS`): each decided from its own seed, as `k` is.
            let n = shard.1.max(1);
            let epoch_start = Guided::epoch_of(k, shard) * EPOCH_RUNS * n + shard.0;
            let earlier = (epoch_start..k).step_by(n as usize).filter(|&k2| self.fresh_draw(seed_start, k2).0).count();
            let j = self.fresh_runs + earlier as u64;
            return Recipe {
                root: seed_start.wrapping_add(shard.0).wrapping_add(j.wrapping_mul(n)),
                mutations: vec![],
            };
        }
        let n = self.corpus.len() as u64;
        if rng.below(RARE_FOCUS) == 0 {
            // Rare-edge focus: an entry that reached one of the rarest edges, uniformly. On a
            // profile whose signatures the swarm has all found, the runs worth mutating are the
            // few that came near a rare chain (a late metadata row landing in a reused slot);
            // among hundreds of entries the rarest-of-three pick alone reached them too seldom
            // (BENCHMARKS.md, `mutation_yield`).
            let rare = self.rare_entries();
            let i = rare[rng.below(rare.len() as u64) as usize];
            return self.child_of(i as usize, &mut rng);
        }
        // The rarest of three picks (ties: the newest): every entry can be chosen, and the entries
        // that reached what few runs reach (an entry's rarity is its rarest added edge's run
        // count) most often, as libFuzzer's entropic schedule spends more on inputs with rare
        // features. The newest-of-three pick alone tied the swarm on `sglang-0.5.16` (14.6 vs
        // 14.6 signatures in 5,000 runs over 5 seeds, BENCHMARKS): the corpus's newest entries
        // are mostly new queue shapes, while the `late_write` rows sit behind rare edges.
        let i = (0..3)
            .map(|_| rng.below(n))
            .min_by_key(|&i| (self.rarity(&self.corpus[i as usize]), std::cmp::Reverse(i)))
            .unwrap_or(0);
        self.child_of(i as usize, &mut rng)
    }

    /// The scenario of `recipe` in `space`, the campaign's space: [`Recipe::build`]'s, started
    /// from the scenario of the longest prefix of the recipe that is a corpus entry (its parent,
    /// for a run [`Guided::plan`] made by mutating one), which is built once and kept.
    pub fn build(&self, recipe: &Recipe, space: &Space) -> SimConfig {
        if recipe.mutations.is_empty() {
            return recipe.build(space);
        }
        let key = recipe_key(recipe);
        let found = {
            let mut b = self.built.0.lock().unwrap_or_else(|e| e.into_inner());
            // A later snapshot sharing the memo may have indexed entries beyond this corpus:
            // the same entries, as the corpus only grows.
            for e in self.corpus.iter().skip(b.indexed) {
                b.entries.entry(recipe_key(&e.recipe)).or_default();
            }
            b.indexed = b.indexed.max(self.corpus.len());
            (1..=recipe.mutations.len()).rev().find_map(|n| Some((n, b.entries.get(&key[..=n])?.clone())))
        };
        let Some((n, memo)) = found else { return recipe.build(space) };
        let start = match memo {
            Some(c) => c,
            None => {
                let parent = Recipe { root: recipe.root, mutations: recipe.mutations[..n].to_vec() };
                let c = std::sync::Arc::new(parent.apply(draw(recipe.root, space), 0, space));
                let mut b = self.built.0.lock().unwrap_or_else(|e| e.into_inner());
                if b.built >= MEMO_SCENARIOS {
                    b.entries.values_mut().for_each(|v| *v = None);
                    b.built = 0;
                }
                if let Some(v @ None) = b.entries.get_mut(&key[..=n]) {
                    *v = Some(c.clone());
                    b.built += 1;
                }
                c
            }
        };
        recipe.build_from((*start).clone(), n, space)
    }

    /// A child of corpus entry `i`: its mutations plus one to three more.
    fn child_of(&self, i: usize, rng: &mut Prng) -> Recipe {
        let parent = &self.corpus[i].recipe;
        let mut mutations = parent.mutations.clone();
        // Mostly one mutation (a child keeps what made its parent interesting), sometimes more.
        let add = [1, 1, 2, 3][rng.below(4) as usize];
        // A parent at the depth cap gives way to its ancestor (a mutated run stays a mutated
        // run, so the count of fresh runs is decided by the seeds alone).
        mutations.truncate(MAX_DEPTH - add);
        for _ in 0..add {
            mutations.push(rng.next_u64());
        }
        Recipe { root: parent.root, mutations }
    }

    /// The fresh share of this epoch's runs, in 1/[`SHARE_DEN`]: a two-armed bandit on the
    /// corpus features each mode added per run (fresh draws' yield against mutated runs'),
    /// clamped to [`FRESH_MIN`]..=[`FRESH_MAX`] so neither mode starves. Early on fresh draws
    /// add the most; once the corpus holds what draws reach, the climbs do. A fixed half share
    /// tied or trailed the swarm on `sglang-0.5.16` (BENCHMARKS.md).
    pub fn fresh_share(&self) -> u64 {
        let [rf, rm] = self.yield_runs;
        let [gf, gm] = self.yield_gain;
        // Rates with one added feature per 64 runs as a prior, so an unmeasured arm is tried.
        let rate = |g: u64, r: u64| (g + 4) * 1_000_000 / (r + 256);
        let (f, m) = (rate(gf, rf), rate(gm, rm));
        (SHARE_DEN * f / (f + m).max(1)).clamp(FRESH_MIN, FRESH_MAX)
    }

    /// The entries whose rarity ([`Guided::rarity`]) is at most the rarity cutoff: the smallest
    /// power of two at or above the corpus's lowest rarity (FairFuzz's cutoff), so the entries
    /// that reached the campaign's rarest edges and those nearly as rare. Never empty for a
    /// non-empty corpus.
    pub fn rare_entries(&self) -> &[u32] {
        self.rare.0.get_or_init(|| {
            let rarity: Vec<u32> = self.corpus.iter().map(|e| self.rarity(e)).collect();
            let cutoff =
                rarity.iter().copied().min().unwrap_or(0).max(1).checked_next_power_of_two().unwrap_or(u32::MAX);
            (0..rarity.len() as u32).filter(|&i| rarity[i as usize] <= cutoff).collect()
        })
    }

    /// How rare what `e` reached is: the run count of its rarest added edge (lower is rarer;
    /// an entry from a checkpoint without edges is the most common).
    fn rarity(&self, e: &Entry) -> u32 {
        e.edges.iter().map(|x| self.hits.get(x).copied().unwrap_or(0)).min().unwrap_or(u32::MAX)
    }

    /// Counts a run's edges (every edge it visited) towards [`Guided::hits`] at the epoch's end.
    pub fn count_edges(&mut self, edges: &[u32]) {
        for e in edges {
            *self.pending_hits.entry(*e).or_default() += 1;
        }
    }

    /// Counts run `c` (in run order): its edges ([`Guided::count_edges`]) and its mode, for
    /// [`Guided::fresh_share`]; it stays a candidate if it saw features the corpus had not.
    pub fn count_run(&mut self, mut c: Candidate) {
        self.count_edges(&std::mem::take(&mut c.edges));
        self.pending_runs[usize::from(!c.recipe.mutations.is_empty())] += 1;
        if !c.features.is_empty() {
            self.pending.push(c);
        }
    }

    /// The features of a run this corpus does not cover.
    pub fn novel(&self, features: &[u32]) -> Vec<u32> {
        features.iter().copied().filter(|f| !self.seen.contains(f)).collect()
    }

    /// Ends an epoch: each candidate, in run order, joins the corpus if it still adds a feature.
    pub fn fold(&mut self) {
        for x in self.yield_runs.iter_mut().chain(self.yield_gain.iter_mut()) {
            *x -= *x / 8;
        }
        self.fresh_runs += self.pending_runs[0];
        for (r, n) in self.yield_runs.iter_mut().zip(std::mem::take(&mut self.pending_runs)) {
            *r += n * 256;
        }
        for c in std::mem::take(&mut self.pending) {
            let new: Vec<u32> = c.features.into_iter().filter(|f| !self.seen.contains(f)).collect();
            let worth: u64 =
                new.iter().map(|e| if crate::coverage::is_signature_edge(*e) { SIGNATURE_WEIGHT } else { 1 }).sum();
            self.yield_gain[usize::from(!c.recipe.mutations.is_empty())] += worth * 256;
            if !new.is_empty() {
                self.seen.extend(new.iter().copied());
                self.corpus.push(Entry { recipe: c.recipe, run: c.run, added: new.len() as u32, edges: new });
            }
        }
        for (e, n) in std::mem::take(&mut self.pending_hits) {
            *self.hits.entry(e).or_default() += n;
        }
        self.rare = RareEntries::default();
        self.epochs_folded += 1;
    }
}

/// Whether the space draws knobs (blind, or prefix-heavy over blind): only then may a mutation
/// change one. A profile's knobs are what the campaign tests; a base scenario's are the user's.
fn draws_knobs(space: &Space) -> bool {
    match space {
        Space::Blind => true,
        Space::Prefix(inner) => matches!(**inner, Space::Blind),
        _ => false,
    }
}

/// A fault ratio: off, or one in a drawn `FAULT_ONE_IN`.
fn toggle(rng: &mut Prng, r: &mut Ratio) {
    *r = if r.is_never() { Ratio { num: 1, den: table::FAULT_ONE_IN.pick(rng) } } else { Ratio::NEVER };
}

/// The number of requests a case runs.
fn requests_of(c: &SimConfig) -> u32 {
    c.generator.as_ref().map_or(c.requests.len() as u32, |g| g.requests)
}

/// Applies mutation `m` to `c`: one change, drawn from `m`, that keeps what `space` pins
/// (a profile's knobs; a base scenario's deployment and knobs).
pub fn mutate(c: &mut SimConfig, m: u64, space: &Space) {
    let mut rng = Prng::child(m, "mutate");
    let base = matches!(space, Space::Base(_));
    match rng.below(14) {
        0 => c.seed = rng.next_u64(),
        1..=4 => crossover(c, &mut rng, space),
        5 if draws_knobs(space) => knob(c, &mut rng),
        5 | 6 => fault(c, &mut rng),
        7 | 8 => workload(c, &mut rng),
        9 if !base => deployment(c, &mut rng),
        9 | 10 => script(c, &mut rng),
        11 | 12 => nudge(c, &mut rng),
        _ => splice(c, &mut rng, space),
    }
    fix_references(c);
}

/// Uniform crossover with a fresh draw of the space: each gene of the case (every knob, every
/// fault setting, every generator setting, the run seed, the router, the requests, the node
/// lists, the deployment's shape) is taken from the donor with probability 1/16, 1/8 or 1/4
/// (drawn).
/// This is the swarm's own distribution applied to a few dimensions at a time: a child keeps
/// most of what made its parent interesting and re-draws the rest, so conditions that the swarm
/// meets only jointly (one in thousands of draws) are met one after another. A result that does
/// not deserialise (a knob value out of its page size's range) leaves the case unchanged.
fn crossover(c: &mut SimConfig, rng: &mut Prng, space: &Space) {
    use serde_json::Value;
    let donor = draw(rng.next_u64(), space);
    let (Ok(mut a), Ok(b)) = (serde_json::to_value(&*c), serde_json::to_value(&donor)) else { return };
    let one_in = [16u64, 8, 4][rng.below(3) as usize];
    let take = |rng: &mut Prng| rng.below(one_in) == 0;
    // The deployment's shape: the context, the page size and both node lists, together.
    if take(rng) {
        for key in ["context_len", "prefill", "decode"] {
            a[key] = b[key].clone();
        }
        a["knobs"]["page_size"] = b["knobs"]["page_size"].clone();
    }
    for key in ["seed", "router_policy", "prefill", "decode"] {
        if take(rng) {
            a[key] = b[key].clone();
        }
    }
    // The workload: the generator's settings one by one when both cases have one, else the
    // whole workload (generator and explicit requests together).
    if !(a["generator"].is_object() && b["generator"].is_object()) && take(rng) {
        for key in ["generator", "requests", "context_len"] {
            a[key] = b[key].clone();
        }
    }
    for group in ["knobs", "faults", "generator"] {
        if let (Value::Object(x), Value::Object(y)) = (&mut a[group], &b[group]) {
            for (k, v) in y {
                if k != "page_size" && k != "liveness_after_heal_ms" && take(rng) {
                    x.insert(k.clone(), v.clone());
                }
            }
        }
    }
    if let Ok(next) = serde_json::from_value::<SimConfig>(a) {
        let name = std::mem::take(&mut c.name);
        *c = next;
        c.name = name;
    }
}

/// One knob re-drawn among the values the swarm draws.
fn knob(c: &mut SimConfig, rng: &mut Prng) {
    let ks = table::knobs();
    let k = &ks[rng.below(ks.len() as u64) as usize];
    let Some(v) = k.pick(rng) else { return };
    let Ok(mut t) = toml::Table::try_from(&c.knobs) else { return };
    t.insert(k.name.clone(), v);
    if let Ok(knobs) = t.try_into() {
        c.knobs = knobs;
    }
}

/// One fault turned on or off, or one fault magnitude re-drawn.
fn fault(c: &mut SimConfig, rng: &mut Prng) {
    let f = &mut c.faults;
    match rng.below(8) {
        0 => toggle(rng, &mut f.transfer_fail),
        1 => toggle(rng, &mut f.delay_spike),
        2 => toggle(rng, &mut f.visibility_lag),
        3 => toggle(rng, &mut f.node_crash),
        4 => f.delay_spike_ms = table::DELAY_SPIKE_MS.pick(rng),
        5 => f.visibility_lag_ms = table::VISIBILITY_LAG_MS.pick(rng),
        6 => f.crash_restart_ms = table::CRASH_RESTART_MS.pick(rng),
        _ => f.heal_at_ms = table::HEAL_AT_MS.pick(rng),
    }
}

/// One workload change: the generator's numbers, or one explicit request changed, copied or
/// dropped (times kept in order).
fn workload(c: &mut SimConfig, rng: &mut Prng) {
    if let Some(g) = c.generator.as_mut() {
        match rng.below(7) {
            0 => g.requests = table::REQUESTS.pick(rng),
            1 => g.mean_interarrival_us = table::MEAN_INTERARRIVAL_US.pick(rng),
            2 => g.tenants = rng.between(1, 4) as u32,
            3 => toggle(rng, &mut g.client_abort),
            4 => g.abort_within_ms = table::ABORT_WITHIN_MS.pick(rng),
            5 => g.output_tokens[0].max = table::MAX_OUTPUT_TOKENS.pick(rng),
            _ => {
                let i = rng.below(g.prompt_tokens.len() as u64) as usize;
                g.prompt_tokens[i].weight = table::PROMPT_BUCKET_WEIGHT.pick(rng);
                if g.prompt_tokens.iter().all(|b| b.weight == 0) {
                    g.prompt_tokens[i].weight = 1;
                }
            }
        }
        return;
    }
    let n = c.requests.len();
    if n == 0 {
        return;
    }
    let i = rng.below(n as u64) as usize;
    match rng.below(6) {
        0 => c.requests[i].tenant = rng.below(4) as u32,
        1 => c.requests[i].output_tokens = rng.between(1, 64),
        2 => {
            let r = &mut c.requests[i];
            r.abort_at_ns = match r.abort_at_ns {
                Some(_) => None,
                None => Some(r.at_ns + rng.between(1, 300) * 1_000_000),
            };
        }
        3 if n > 1 => {
            c.requests.remove(i);
        }
        4 if (n as u64) < 64 => {
            // A copy of request i right after it, for another tenant (a prefix or a slot reused).
            let mut r = c.requests[i].clone();
            r.tenant = rng.below(4) as u32;
            let next = c.requests.get(i + 1).map_or(r.at_ns + 2_000_000, |x| x.at_ns);
            let at = r.at_ns + (next - r.at_ns) / 2;
            r.abort_at_ns = r.abort_at_ns.map(|a| a - r.at_ns + at);
            r.at_ns = at;
            c.requests.insert(i + 1, r);
        }
        _ => {
            // Request i's prompt replaced by a drawn prefix-sharing one (its time kept).
            let mut drawn = draw_prefix_requests(rng, c.context_len);
            let mut r = drawn.swap_remove(0);
            let old = &c.requests[i];
            r.abort_at_ns = r.abort_at_ns.map(|a| a - r.at_ns + old.at_ns);
            r.at_ns = old.at_ns;
            r.tenant = old.tenant;
            c.requests[i] = r;
        }
    }
}

/// One deployment change: pool sizes, node counts, metadata slots, batch limits, router, and the
/// transfer and chunking sizes every swarm draw picks.
fn deployment(c: &mut SimConfig, rng: &mut Prng) {
    let page = c.knobs.page_size.max(1);
    let round = |t: u64| (t / page).max(2) * page;
    match rng.below(9) {
        0 => {
            let t = round(c.context_len * table::PREFILL_POOL_EIGHTHS.pick(rng) / 8);
            c.prefill.iter_mut().for_each(|n| n.pool_tokens = t);
        }
        1 => {
            let t = round(c.context_len * table::DECODE_POOL_EIGHTHS.pick(rng) / 8);
            c.decode.iter_mut().for_each(|n| n.pool_tokens = t);
        }
        2 => {
            let n = rng.between(1, 2) as usize;
            let first = c.prefill[0].clone();
            c.prefill.resize(n, first);
        }
        3 => {
            let n = rng.between(1, 2) as usize;
            let first = c.decode[0].clone();
            c.decode.resize(n, first);
        }
        4 => {
            let m = table::METADATA_SLOTS.pick(rng);
            c.prefill.iter_mut().chain(c.decode.iter_mut()).for_each(|n| n.metadata_slots = m);
        }
        5 => {
            let m = table::MAX_RUNNING_REQUESTS.pick(rng);
            c.prefill.iter_mut().chain(c.decode.iter_mut()).for_each(|n| n.max_running_requests = m);
        }
        6 => c.router_policy = table::ROUTER_POLICY.pick(rng),
        7 => c.knobs.chunked_prefill_size = table::CHUNKED_PREFILL_SIZE.pick(rng),
        _ => {
            c.knobs.max_transfer_batch_pages =
                if rng.below(2) == 0 { 0 } else { table::MAX_TRANSFER_BATCH_PAGES.pick(rng) };
        }
    }
}

/// One scripted fault added on a drawn request (the targeted form of a random fault), or one
/// removed.
fn script(c: &mut SimConfig, rng: &mut Prng) {
    let n = requests_of(c);
    if n == 0 {
        return;
    }
    if !c.faults.script.is_empty() && rng.below(4) == 0 {
        let i = rng.below(c.faults.script.len() as u64) as usize;
        c.faults.script.remove(i);
        return;
    }
    if c.faults.script.len() >= 64 {
        return;
    }
    let request = rng.below(u64::from(n)) as u32;
    let s = match rng.below(4) {
        0 => ScriptedFault::MetadataLag { request, lag_ms: table::METADATA_LAG_MS.pick(rng) },
        1 => ScriptedFault::VisibilityLag { request, lag_ms: table::VISIBILITY_LAG_MS.pick(rng) },
        2 => ScriptedFault::TransferFail { request },
        _ => {
            // The swarm scripts no delays; the bytes' values (cargo-fuzz targets) are the table's.
            let values: Vec<u64> = table::SCRIPTED_DELAY_MS.byte_values().collect();
            ScriptedFault::Delay { request, delay_ms: values[rng.below(values.len() as u64) as usize] }
        }
    };
    c.faults.script.push(s);
}

/// The hardware fault (`visibility_lag`, random and scripted) taken out of a case whose space
/// leaves it off.
fn drop_hardware_faults(c: &mut SimConfig) {
    c.faults.visibility_lag = Ratio::NEVER;
    c.faults.script.retain(|f| !matches!(f, ScriptedFault::VisibilityLag { .. }));
}

/// Run `seed` of a base campaign (`kvsim fuzz --base S.toml`): the base scenario as it is in one
/// run in eight, else with one to three changes drawn from the seed, each one of the mutations
/// that keep a base's deployment and knobs: its requests or generator ([`workload`]), one
/// duration ([`nudge`]), a scripted fault ([`script`]) or a random fault ([`fault`]). Without
/// them, a base of explicit requests and no random faults ran the same case on every seed
/// (20,000 runs, one signature). A hardware fault (`visibility_lag`) is only varied where the
/// base has one: a scenario that leaves it off is judged without it, as a profile's campaign is.
pub fn vary_base(c: &mut SimConfig, seed: u64) {
    let mut rng = Prng::child(seed, "base-variant");
    let changes = [0, 1, 1, 1, 2, 2, 3, 3][rng.below(8) as usize];
    let hardware = !c.faults.visibility_lag.is_never()
        || c.faults.script.iter().any(|f| matches!(f, ScriptedFault::VisibilityLag { .. }));
    for _ in 0..changes {
        // A draw that changes nothing (a nudge of an abort the request does not have, a hardware
        // fault taken back) is drawn again, a few times, so a run's changes are changes.
        for _ in 0..4 {
            let mut next = c.clone();
            let mut m = Prng::child(rng.next_u64(), "mutate");
            match m.below(4) {
                0 => workload(&mut next, &mut m),
                1 => nudge(&mut next, &mut m),
                2 => script(&mut next, &mut m),
                _ => fault(&mut next, &mut m),
            }
            fix_references(&mut next);
            if !hardware {
                drop_hardware_faults(&mut next);
            }
            if next != *c && plausible(&next) {
                *c = next;
                break;
            }
        }
    }
}

/// The factors [`nudge`] scales a duration by, as (numerator, denominator).
const NUDGE: [(u64, u64); 8] = [(1, 2), (2, 3), (3, 4), (7, 8), (8, 7), (4, 3), (3, 2), (2, 1)];

/// One duration of the case scaled by a factor near one ([`NUDGE`]): a scripted fault's lag or
/// delay, a random fault's magnitude, the generator's mean gap or abort window, or an explicit
/// request's abort delay or gap to the request before it (kept in order), staying within the
/// field's table range (the gap within the next request's time). The other mutations
/// re-draw a value from the swarm's table (a scripted delay is 1 ms, 100 ms, 1 s, 10 s or 90 s),
/// so a run that came near a race could only jump past the window, not move into it; libFuzzer's
/// and AFL's arithmetic mutations do this for the bytes of an input. The first find: on
/// `sglang-0.5.22`, a transfer delayed 45 s (90 s halved), between decode's 30 s deferred-release
/// fallback and the 60 s sync timeout, lands in pages the fallback freed
/// (`known-bugs/sglang-0.5.22.toml`, `use_after_free/transfer_write`).
fn nudge(c: &mut SimConfig, rng: &mut Prng) {
    let (num, den) = NUDGE[rng.below(NUDGE.len() as u64) as usize];
    // Scaled within the field's table range (or as far as the value already lies outside it):
    // repeated nudges over a recipe's generations would otherwise take a gap or a window far
    // past anything the swarm draws, one factor of two at a time.
    let scale = |x: u64, (lo, hi): (u64, u64)| {
        let y = (x.saturating_mul(num) / den).max(1);
        if y > x {
            y.min(hi.max(x))
        } else {
            y.max(lo.min(x))
        }
    };
    let range = |col: &table::Column<u64>| (col.min_value(), col.max_value());
    let scripted = c.faults.script.len() as u64;
    let explicit = c.requests.len() as u64;
    // Scripted faults first (half the nudges when the case has any): they are where a shrunk or
    // mutated case keeps the timing of its race.
    let pick =
        if scripted > 0 && rng.below(2) == 0 { rng.below(scripted) } else { scripted + rng.below(6 + 2 * explicit) };
    if pick < scripted {
        match &mut c.faults.script[pick as usize] {
            ScriptedFault::MetadataLag { lag_ms, .. } => *lag_ms = scale(*lag_ms, range(&table::METADATA_LAG_MS)),
            ScriptedFault::VisibilityLag { lag_ms, .. } | ScriptedFault::VisibilityLagAt { lag_ms, .. } => {
                *lag_ms = scale(*lag_ms, range(&table::VISIBILITY_LAG_MS))
            }
            ScriptedFault::Delay { delay_ms, .. } | ScriptedFault::DelayAt { delay_ms, .. } => {
                *delay_ms = scale(*delay_ms, range(&table::SCRIPTED_DELAY_MS))
            }
            ScriptedFault::Crash { at_ms, restart_after_ms, .. } => {
                if rng.below(2) == 0 {
                    *at_ms = scale(*at_ms, range(&table::HEAL_AT_MS));
                } else {
                    *restart_after_ms = scale(*restart_after_ms, range(&table::CRASH_RESTART_MS));
                }
            }
            ScriptedFault::TransferFail { .. } | ScriptedFault::TransferFailAt { .. } => {}
        }
        return;
    }
    let f = &mut c.faults;
    match pick - scripted {
        0 => f.delay_spike_ms = scale(f.delay_spike_ms, range(&table::DELAY_SPIKE_MS)),
        1 => f.visibility_lag_ms = scale(f.visibility_lag_ms, range(&table::VISIBILITY_LAG_MS)),
        2 => f.crash_restart_ms = scale(f.crash_restart_ms, range(&table::CRASH_RESTART_MS)),
        3 => f.heal_at_ms = scale(f.heal_at_ms, range(&table::HEAL_AT_MS)),
        4 | 5 => {
            if let Some(g) = c.generator.as_mut() {
                if pick - scripted == 4 {
                    g.mean_interarrival_us = scale(g.mean_interarrival_us, range(&table::MEAN_INTERARRIVAL_US));
                } else {
                    g.abort_within_ms = scale(g.abort_within_ms, range(&table::ABORT_WITHIN_MS));
                }
            }
        }
        x => {
            let i = ((x - 6) / 2) as usize;
            if x % 2 == 0 {
                let r = &mut c.requests[i];
                if let Some(a) = r.abort_at_ns.as_mut() {
                    let ms = scale(a.saturating_sub(r.at_ns) / 1_000_000, (1, table::ABORT_WITHIN_MS.max_value()));
                    *a = r.at_ns + ms * 1_000_000;
                }
            } else {
                // The gap to the request before, within the gap to the one after: order kept.
                let prev = if i == 0 { 0 } else { c.requests[i - 1].at_ns };
                let next = c.requests.get(i + 1).map_or(u64::MAX, |r| r.at_ns);
                let r = &mut c.requests[i];
                let at =
                    (prev + scale(r.at_ns.saturating_sub(prev), (0, next.saturating_sub(prev)))).min(next).max(prev);
                r.abort_at_ns = r.abort_at_ns.map(|a| a.saturating_sub(r.at_ns) + at);
                r.at_ns = at;
            }
        }
    }
}

/// The workload or the random faults of another draw of the same space.
fn splice(c: &mut SimConfig, rng: &mut Prng, space: &Space) {
    let donor = draw(rng.next_u64(), space);
    if rng.below(2) == 0 {
        c.generator = donor.generator;
        c.requests = donor.requests;
        if !c.requests.is_empty() && c.context_len != donor.context_len {
            // Explicit prompts were drawn for the donor's context.
            c.context_len = donor.context_len;
            c.requests.retain(|r| r.prompt_tokens <= donor.context_len);
        }
    } else {
        let (script, live) = (std::mem::take(&mut c.faults.script), c.faults.liveness_after_heal_ms);
        c.faults = config::FaultConfig { script, liveness_after_heal_ms: live, ..donor.faults };
    }
}

/// Drops scripted faults that name a request or node the case no longer has.
fn fix_references(c: &mut SimConfig) {
    let n = requests_of(c);
    let (np, nd) = (c.prefill.len(), c.decode.len());
    c.faults.script.retain(|s| match s {
        ScriptedFault::Crash { node, .. } => match node.rsplit_once('-') {
            Some(("prefill", i)) => i.parse::<usize>().is_ok_and(|i| i < np),
            Some(("decode", i)) => i.parse::<usize>().is_ok_and(|i| i < nd),
            _ => false,
        },
        f => f.request().is_some_and(|r| r < n),
    });
}

/// A whole campaign run in one thread, in run order (the library's reference for what the CLI
/// runner computes with any number of workers): `runs` runs from `seed_start`, guided when
/// `guided`, each run's signatures and coverage features from `exec`.
pub fn run_sequential(
    space: &Space,
    seed_start: u64,
    runs: u64,
    guided: bool,
    mut exec: impl FnMut(&SimConfig) -> (BTreeSet<String>, Vec<u32>),
) -> crate::campaign::Campaign {
    let mut camp = crate::campaign::Campaign::new("test", seed_start, (0, 1));
    if guided {
        camp.guided = Some(Guided::default());
    }
    let mut acc = crate::campaign::Accounting::new(camp, None);
    for k in 0..runs {
        let (recipe, snap) = match &acc.camp.guided {
            Some(g) => (g.plan(seed_start, k, (0, 1)), Some(g)),
            None => (Recipe { root: seed_start + k, mutations: vec![] }, None),
        };
        let cfg = snap.map_or_else(|| recipe.build(space), |g| g.build(&recipe, space));
        let (sigs, features) = exec(&cfg);
        let cand = snap.map(|g| Candidate::new(g, k, recipe, features));
        acc.finished_run(k, sigs, cand);
    }
    acc.camp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutated_recipes_build_valid_scenarios_in_every_space() {
        let spaces = [
            Space::Blind,
            Space::Profile("sglang-0.5.22".into()),
            Space::Prefix(Box::new(Space::Blind)),
            Space::Prefix(Box::new(Space::Profile("vllm-nixl".into()))),
        ];
        for space in &spaces {
            let mut changed = 0;
            for root in 0..40u64 {
                let r = Recipe { root, mutations: (0..12).map(|i| root * 1000 + i).collect() };
                let c = r.build(space);
                crate::scenario::validate_config(&c, "t").unwrap_or_else(|e| panic!("{space:?} {r:?}: {e}"));
                let mut plain = draw(root, space);
                plain.name = c.name.clone();
                changed += (c != plain) as u32;
                assert_eq!(c, r.build(space), "a recipe builds the same case every time");
                if let Space::Profile(p) = space {
                    let want = (config::profile(p).expect("profile").knobs)();
                    assert_eq!(c.knobs.decode_transferred_abort, want.decode_transferred_abort);
                    assert_eq!(c.knobs.router_on_prefill_error, want.router_on_prefill_error);
                }
            }
            assert!(changed >= 30, "{space:?}: only {changed} of 40 recipes changed their case");
        }
        // Every single mutation of many cases, held to the full check (what `plausible` stands in for).
        for space in &spaces {
            for root in 0..300u64 {
                let mut c = draw(root, space);
                for m in 0..4u64 {
                    let mut next = c.clone();
                    mutate(&mut next, root * 7 + m, space);
                    if plausible(&next) {
                        crate::scenario::validate_config(&next, "t")
                            .unwrap_or_else(|e| panic!("{space:?} root {root} m {m}: {e}"));
                        c = next;
                    }
                }
            }
        }
    }

    #[test]
    fn epochs_and_plans_are_per_shard_and_deterministic() {
        assert_eq!(Guided::epoch_of(63, (0, 1)), 0);
        assert_eq!(Guided::epoch_of(64, (0, 1)), 1);
        assert!(Guided::ends_epoch(63, (0, 1)) && !Guided::ends_epoch(64, (0, 1)));
        // Shard 1/2 runs k = 1, 3, 5…: its 64th run is k = 127.
        assert!(Guided::ends_epoch(127, (1, 2)) && Guided::epoch_of(129, (1, 2)) == 1);
        let g = Guided::default();
        assert_eq!(
            g.plan(10, 5, (0, 1)),
            Recipe { root: 15, mutations: vec![] },
            "an empty corpus plans the swarm's draw"
        );
        let mut g = Guided { pending: vec![], ..Default::default() };
        g.pending.push(Candidate {
            run: 0,
            recipe: Recipe { root: 1, mutations: vec![] },
            features: vec![1, 2],
            edges: vec![],
        });
        g.pending.push(Candidate {
            run: 1,
            recipe: Recipe { root: 2, mutations: vec![] },
            features: vec![2],
            edges: vec![],
        });
        g.pending.push(Candidate {
            run: 2,
            recipe: Recipe { root: 3, mutations: vec![] },
            features: vec![2, 3],
            edges: vec![],
        });
        g.fold();
        assert_eq!(g.corpus.iter().map(|e| (e.run, e.added)).collect::<Vec<_>>(), vec![(0, 2), (2, 1)]);
        assert_eq!(g.epochs_folded, 1);
        assert!((0..64).all(|k| g.plan(0, k, (0, 1)).mutations.is_empty()), "the warm-up epochs are the swarm's draws");
        g.epochs_folded = WARMUP_EPOCHS;
        let plans: Vec<Recipe> = (0..64).map(|k| g.plan(0, k, (0, 1))).collect();
        assert!(plans.iter().any(|r| !r.mutations.is_empty()) && plans.iter().any(|r| r.mutations.is_empty()));
        assert_eq!(plans, (0..64).map(|k| g.plan(0, k, (0, 1))).collect::<Vec<_>>());
    }

    /// Blind draw `root` with `n` explicit requests `gap_ns` apart (tenant `i % 4`, 300-token
    /// prompts, 8 output tokens), request `i` aborted `abort_after(i)` ns after it arrives.
    fn explicit_case(root: u64, n: u64, gap_ns: u64, abort_after: impl Fn(u64) -> Option<u64>) -> SimConfig {
        let mut c = draw(root, &Space::Blind);
        c.generator = None;
        c.requests = (0..n)
            .map(|i| config::RequestSpec {
                at_ns: i * gap_ns,
                tenant: (i % 4) as u32,
                prompt_tokens: 300,
                output_tokens: 8,
                abort_at_ns: abort_after(i).map(|a| i * gap_ns + a),
                prefix_blocks: vec![],
                streaming: false,
                public_blocks: 0,
            })
            .collect();
        c
    }

    /// A nudge scales one duration by a factor near one: a scripted metadata lag of 50 ms
    /// reaches values between the table's rows (the table has 1, 20, 50 and 500) and never grows
    /// past the table's largest, an explicit request moves within its neighbours' times (order
    /// kept) and keeps its abort delay's sign, and every nudged case passes the full scenario
    /// check.
    #[test]
    fn a_nudge_moves_one_duration_a_little_and_keeps_the_case_valid() {
        // Six requests 10 ms apart, the even ones aborted 5 ms after they arrive.
        let mut base = explicit_case(3, 6, 10_000_000, |i| (i % 2 == 0).then_some(5_000_000));
        base.faults.script = vec![ScriptedFault::MetadataLag { request: 1, lag_ms: 50 }];
        let mut lags = BTreeSet::new();
        let mut moved_requests = 0;
        for m in 0..400u64 {
            let mut c = base.clone();
            nudge(&mut c, &mut Prng::child(m, "nudge-test"));
            let ScriptedFault::MetadataLag { lag_ms, .. } = c.faults.script[0] else { panic!("{:?}", c.faults.script) };
            lags.insert(lag_ms);
            assert!(c.requests.windows(2).all(|w| w[0].at_ns <= w[1].at_ns), "order kept: {:?}", c.requests);
            assert!(c.requests.iter().all(|r| r.abort_at_ns.is_none_or(|a| a >= r.at_ns)));
            let changed = (c.requests != base.requests) as u32
                + (c.faults != base.faults) as u32
                + (c.generator != base.generator) as u32;
            assert!(changed <= 1, "one duration per nudge");
            moved_requests += (c.requests != base.requests) as u32;
            crate::scenario::validate_config(&c, "t").unwrap_or_else(|e| panic!("m {m}: {e}"));
        }
        assert_eq!(lags, BTreeSet::from([25, 33, 37, 43, 50, 57, 66, 75, 100]));
        // Never above the table's largest lag (500 ms) by a nudge: a case at the cap only shrinks.
        let mut at_cap = base.clone();
        at_cap.faults.script = vec![ScriptedFault::MetadataLag { request: 1, lag_ms: 500 }];
        let mut below = 0;
        for m in 0..200u64 {
            let mut c = at_cap.clone();
            nudge(&mut c, &mut Prng::child(m, "nudge-test"));
            let ScriptedFault::MetadataLag { lag_ms, .. } = c.faults.script[0] else { panic!() };
            assert!(lag_ms <= 500, "m {m}: {lag_ms}");
            below += u32::from(lag_ms < 500);
        }
        assert!(below > 20, "{below}");
        assert!(moved_requests > 50, "explicit requests' times are nudged too ({moved_requests} of 400)");
    }

    /// A base campaign's runs vary the base: most change its requests, faults or timings, one in
    /// eight runs it as it is, and none changes its deployment or knobs or turns on a hardware
    /// fault the base leaves off; every variant passes the full scenario check.
    #[test]
    fn a_base_campaign_varies_requests_faults_and_timings_and_keeps_the_deployment() {
        let mut base = explicit_case(5, 4, 50_000_000, |_| None);
        base.faults = config::FaultConfig {
            transfer_fail: Ratio::NEVER,
            delay_spike: Ratio::NEVER,
            visibility_lag: Ratio::NEVER,
            node_crash: Ratio::NEVER,
            script: vec![],
            ..base.faults.clone()
        };
        let space = Space::Base(Box::new(base.clone()));
        let (mut same, mut requests, mut scripted, mut random) = (0, 0, 0, 0);
        for seed in 0..400u64 {
            let c = draw(seed, &space);
            assert_eq!(c, draw(seed, &space), "a function of the seed");
            crate::scenario::validate_config(&c, "t").unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(
                (&c.knobs, &c.prefill, &c.decode, c.context_len),
                (&base.knobs, &base.prefill, &base.decode, base.context_len)
            );
            assert!(c.faults.visibility_lag.is_never(), "seed {seed}: a hardware fault the base leaves off");
            assert!(!c.faults.script.iter().any(|f| matches!(f, ScriptedFault::VisibilityLag { .. })));
            let plain = config::SimConfig { seed: base.seed, name: base.name.clone(), ..c.clone() };
            same += u32::from(plain == base);
            requests += u32::from(c.requests != base.requests);
            scripted += u32::from(!c.faults.script.is_empty());
            random += u32::from(
                !c.faults.transfer_fail.is_never()
                    || !c.faults.delay_spike.is_never()
                    || !c.faults.node_crash.is_never(),
            );
        }
        assert!((30..=90).contains(&same), "about one run in eight is the base as it is: {same} of 400");
        assert!(
            requests > 100 && scripted > 60 && random > 20,
            "requests {requests}, scripted {scripted}, random {random}"
        );
    }

    /// A guided campaign's fresh runs are the swarm's runs of its shard, in order and without
    /// holes, whatever share of each epoch mutations take: the `j`-th fresh run of shard `(i, n)`
    /// draws the root the swarm's `j`-th run of that shard draws (`seed_start + i + j n`).
    #[test]
    fn fresh_runs_are_a_prefix_of_the_swarms_runs() {
        for shard in [(0, 1), (1, 3)] {
            let seed_start = 7_000;
            let mut g = Guided::default();
            let (mut roots, mut mutated) = (vec![], 0);
            for k in (shard.0..3_000).step_by(shard.1 as usize) {
                let r = g.plan(seed_start, k, shard);
                assert_eq!(r, g.plan(seed_start, k, shard), "a plan is a function of the corpus and k");
                if r.mutations.is_empty() {
                    roots.push(r.root);
                } else {
                    mutated += 1;
                }
                // Every run adds a feature of its own (the corpus grows, so mutations are planned).
                g.count_run(Candidate::new(&g, k, r, vec![k as u32 % 500]));
                if Guided::ends_epoch(k, shard) {
                    g.fold();
                }
            }
            let want: Vec<u64> = (0..roots.len() as u64).map(|j| seed_start + shard.0 + j * shard.1).collect();
            assert_eq!(roots, want, "shard {shard:?}");
            assert!(mutated > 0 && roots.len() > 4 * EPOCH_RUNS as usize, "shard {shard:?}: {mutated} mutated");
            assert_eq!(g.fresh_runs + g.pending_runs[0], roots.len() as u64, "folded and pending fresh runs");
        }
    }

    /// The parent of a mutated run is the rarest of three picks: an entry whose added edge few
    /// runs visited is mutated far more often than the newest-of-three pick would (7/8 for the
    /// newer of two entries), and the counts come in only when an epoch is folded.
    #[test]
    fn entries_that_reached_rare_edges_are_mutated_most() {
        let mut g = Guided::default();
        g.pending.push(Candidate::new(&g, 0, Recipe { root: 1, mutations: vec![] }, vec![7]));
        g.pending.push(Candidate::new(&g, 1, Recipe { root: 2, mutations: vec![] }, vec![8]));
        g.count_edges(&[7]);
        for _ in 0..50 {
            g.count_edges(&[8]);
        }
        assert!(g.hits.is_empty(), "counted at the epoch's end");
        g.fold();
        assert_eq!((g.hits[&7], g.hits[&8]), (1, 50));
        g.epochs_folded = WARMUP_EPOCHS;
        assert_eq!(g.corpus.iter().map(|e| e.edges.clone()).collect::<Vec<_>>(), vec![vec![7], vec![8]]);
        let roots: Vec<u64> =
            (0..2_000).map(|k| g.plan(0, k, (0, 1))).filter(|r| !r.mutations.is_empty()).map(|r| r.root).collect();
        let rare = roots.iter().filter(|r| **r == 1).count();
        assert!(rare * 8 > roots.len() * 6, "the rare entry is the parent of {rare} of {} mutated runs", roots.len());
        assert_eq!(g.rare_entries(), &[0], "the cutoff (1) keeps only the entry whose edge one run visited");
        // A checkpoint written before the counts existed still loads (no counts: every entry ties).
        let old: Guided = serde_json::from_str(r#"{"epochs_folded":1,"corpus":[],"seen":[],"pending":[]}"#).unwrap();
        assert!(old.hits.is_empty() && old.pending_hits.is_empty());
    }

    /// Rare-edge focus: among a hundred entries, the three that reached the rarest edges (three
    /// runs each, and one reached by four: within the power-of-two cutoff of 4) are the
    /// parents of about half the mutated runs plus their rarest-of-three share, where uniform
    /// picks would give them 3%; the cache is emptied when the counts change.
    #[test]
    fn entries_that_reached_the_rarest_edges_parent_half_the_mutated_runs() {
        let mut g = Guided::default();
        for i in 0..100u32 {
            g.pending.push(Candidate::new(&g, u64::from(i), Recipe { root: u64::from(i), mutations: vec![] }, vec![i]));
            let visits = match i {
                10 | 20 => 3,
                30 => 4,
                _ => 40 + i,
            };
            for _ in 0..visits {
                g.count_edges(&[i]);
            }
        }
        g.fold();
        g.epochs_folded = WARMUP_EPOCHS;
        assert_eq!(g.rare_entries(), &[10, 20, 30]);
        let roots: Vec<u64> =
            (0..4_000).map(|k| g.plan(0, k, (0, 1))).filter(|r| !r.mutations.is_empty()).map(|r| r.root).collect();
        let rare = roots.iter().filter(|r| [10, 20, 30].contains(*r)).count();
        assert!(rare * 2 > roots.len(), "the rarest entries parent {rare} of {} mutated runs", roots.len());
        // Folding new counts recomputes the set: with the three visited 200 times more, entry
        // 0's edge (40 runs) is the rarest, and the cutoff 64 keeps entries 0..=24 but 10 and 20.
        for i in [10, 20, 30] {
            for _ in 0..200 {
                g.count_edges(&[i]);
            }
        }
        g.fold();
        let want: Vec<u32> = (0..=24).filter(|i| *i != 10 && *i != 20).collect();
        assert_eq!(g.rare_entries(), want.as_slice());
    }

    /// The fresh share follows which mode adds coverage: fresh draws that add features and
    /// mutated runs that add none push it to its ceiling, the reverse to its floor, and only
    /// counted runs (folded at the epoch's end) move it.
    #[test]
    fn the_fresh_share_follows_the_mode_that_adds_coverage() {
        let fresh = |k: u64| Recipe { root: k, mutations: vec![] };
        let mutated = |k: u64| Recipe { root: k, mutations: vec![k] };
        let epoch = |g: &mut Guided, fresh_gains: bool| {
            for k in 0..64u64 {
                let r = if k % 2 == 0 { fresh(k) } else { mutated(k) };
                let gains = (k % 2 == 0) == fresh_gains;
                let f = g.epochs_folded as u32 * 1000 + k as u32;
                g.count_run(Candidate::new(g, k, r, if gains { vec![f] } else { vec![] }));
            }
            g.fold();
        };
        let mut g = Guided::default();
        let start = g.fresh_share();
        epoch(&mut g, true);
        assert_eq!(g.fresh_share(), FRESH_MAX, "fresh draws added everything");
        assert_eq!(g.corpus.len(), 32);
        for _ in 0..30 {
            epoch(&mut g, false);
        }
        assert_eq!(g.fresh_share(), FRESH_MIN, "mutated runs added everything for 30 epochs");
        assert!((FRESH_MIN..=FRESH_MAX).contains(&start));
        // The checkpoint round-trips the counts exactly (resume plans what the run would have).
        let back: Guided = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
        assert_eq!(back, g);
    }

    /// A new signature edge is worth [`SIGNATURE_WEIGHT`] model edges to the bandit: fresh draws
    /// that add four edges against mutated runs that add sixteen lose the runs when the four
    /// are model edges and win them when they are signatures.
    #[test]
    fn the_bandit_weighs_signature_edges_above_model_edges() {
        let share = |fresh_edge_base: u32| {
            let mut g = Guided::default();
            for k in 0..64u64 {
                let mutations = if k % 2 == 0 { vec![] } else { vec![k] };
                let edges = match (k % 2, k) {
                    (0, 0..=7) => vec![fresh_edge_base + k as u32],
                    (1, 0..=31) => vec![1000 + k as u32],
                    _ => vec![],
                };
                g.count_run(Candidate::new(&g, k, Recipe { root: k, mutations }, edges));
            }
            g.fold();
            g.fresh_share()
        };
        let signature_base = 1 << 14;
        assert!(crate::coverage::is_signature_edge(signature_base) && !crate::coverage::is_signature_edge(0));
        assert_eq!((share(0), share(signature_base)), (FRESH_MIN, FRESH_MAX));
    }

    /// A planted rare branch: a synthetic target whose "bug" needs seven conditions of the drawn
    /// case at once (a knob value, the lag fault on and long, crashes on, the largest workload,
    /// two metadata slots, round-robin routing: about one swarm draw in 9,000), and whose
    /// coverage rewards each condition met in order, as a branch nested in branches does. The
    /// swarm must meet all seven in one draw; the guided campaign climbs one at a time. Both get
    /// the same budget. Measured with a fixed fresh share of 1/4 and depth 32 (6,000 runs, 9
    /// seeds): guided 191–896 runs, swarm 1,091–5,493 or none; with a fixed half share and depth
    /// 16 neither found it in 6,000 runs on 5 seeds. Ignored until it passes with the shipped
    /// warm-up and bandit share (BENCHMARKS.md, "Guided campaigns", says where it stands).
    #[test]
    #[ignore = "the controlled experiment of BENCHMARKS.md: run with --include-ignored"]
    fn guided_finds_a_planted_rare_branch_sooner_than_the_swarm() {
        let stages = |c: &SimConfig| -> usize {
            let conds = [
                c.knobs.decode_transferred_abort == config::TransferredAbort::Leak,
                !c.faults.visibility_lag.is_never(),
                c.faults.visibility_lag_ms == 50,
                !c.faults.node_crash.is_never(),
                requests_of(c) == 32,
                c.decode.first().is_some_and(|d| d.metadata_slots == 2),
            ];
            conds.iter().take_while(|x| **x).count()
        };
        let exec = |c: &SimConfig| {
            let n = stages(c);
            let sigs: BTreeSet<String> = (n == 7).then(|| "planted/branch".to_string()).into_iter().collect();
            ((sigs), (0..n as u32).collect::<Vec<u32>>())
        };
        let budget = 6_000;
        let first = |guided: bool, seed: u64| {
            let camp = run_sequential(&Space::Blind, seed, budget, guided, exec);
            camp.table.get("planted/branch").map_or(budget + 1, |e| e.first_seed - seed + 1)
        };
        let (mut g, mut s) = (vec![], vec![]);
        for seed in [0, 100_000, 200_000, 300_000, 400_000] {
            g.push(first(true, seed));
            s.push(first(false, seed));
        }
        eprintln!("runs to find the planted branch: guided {g:?}, swarm {s:?} (budget {budget})");
        g.sort_unstable();
        s.sort_unstable();
        assert!(g[2] <= budget, "guided did not find the planted branch in {budget} runs (median): {g:?}");
        assert!(g[2] * 2 < s[2], "guided (runs to find: {g:?}) not twice as fast as the swarm ({s:?})");
    }

    /// [`Guided::build`] starts a child from its parent's memoised scenario; it must build
    /// exactly what replaying the recipe from its root does ([`Recipe::build`]), in every space,
    /// whether the memo was filled by this snapshot, by another sharing it, or not at all.
    #[test]
    fn building_from_the_parents_scenario_is_replaying_the_recipe() {
        let base = explicit_case(7, 6, 20_000_000, |i| (i % 3 == 0).then_some(5_000_000));
        let spaces = [
            Space::Blind,
            Space::Profile("sglang-0.5.22".into()),
            Space::Prefix(Box::new(Space::Blind)),
            Space::Hardware(Box::new(Space::Profile("vllm-nixl".into()))),
            Space::Base(Box::new(base)),
        ];
        // Coverage that a mutation moves often, so that the corpus grows deep recipes.
        let exec = |c: &SimConfig| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            format!("{:?}{:?}", c.knobs, c.faults).hash(&mut h);
            let x = h.finish();
            (BTreeSet::new(), vec![(x % 4096) as u32, requests_of(c) + 5000])
        };
        for space in &spaces {
            let camp = run_sequential(space, 1_000, 600, true, exec);
            let g = camp.guided.expect("a guided campaign");
            assert!(g.corpus.iter().any(|e| e.recipe.mutations.len() >= 2), "{space:?}: no deep entry");
            let cold: Guided = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
            let (mut from_parent, mut checked) = (0, 0);
            for k in 600..900 {
                let r = g.plan(1_000, k, (0, 1));
                let want = r.build(space);
                assert_eq!(g.build(&r, space), want, "{space:?} run {k}: {r:?} (memo filled)");
                assert_eq!(cold.build(&r, space), want, "{space:?} run {k}: {r:?} (memo cold)");
                assert_eq!(cold.build(&r, space), want, "{space:?} run {k}: {r:?} (memo filled by the last call)");
                checked += 1;
                from_parent += usize::from(r.mutations.len() > 1);
            }
            assert!(checked == 300 && from_parent > 50, "{space:?}: {from_parent} deep plans of {checked}");
        }
    }

    /// A profile's campaign leaves the hardware faults off (issue 13); its guided mutations must
    /// too, or the guided table holds signatures the swarm of the same space cannot draw.
    #[test]
    fn mutations_in_a_profile_space_draw_no_hardware_fault() {
        let space = Space::Profile("sglang-0.5.16".into());
        assert!(!space.draws_hardware_faults());
        let mut rng = Prng::child(0x15d, "test");
        let mut faults_mutated = 0;
        for root in 0..300u64 {
            let mutations: Vec<u64> = (0..8).map(|_| rng.next_u64()).collect();
            let c = Recipe { root, mutations }.build(&space);
            assert!(c.faults.visibility_lag.is_never(), "root {root}: {:?}", c.faults);
            assert!(!c.faults.script.iter().any(|f| matches!(f, ScriptedFault::VisibilityLag { .. })), "root {root}");
            faults_mutated += usize::from(!c.faults.script.is_empty());
        }
        assert!(faults_mutated > 0, "the mutations still script other faults");
        // A blind space still mutates them in.
        let lagged = (0..300u64).any(|root| {
            let mutations: Vec<u64> = (0..8).map(|_| rng.next_u64()).collect();
            let c = Recipe { root, mutations }.build(&Space::Blind);
            !c.faults.visibility_lag.is_never()
                || c.faults.script.iter().any(|f| matches!(f, ScriptedFault::VisibilityLag { .. }))
        });
        assert!(lagged);
    }
}
