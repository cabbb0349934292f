//! Campaign accounting, corpus merge and the campaign's reports (issue 17 item 3: this logic was
//! in the binary and could only be tested by shelling out). The `kvsim fuzz` command keeps the
//! arguments, the files, the threads and the progress bar; everything that decides what a
//! campaign *says* is here: the checkpoint's signature table (`Campaign`), the order-independent
//! counting of finished runs (`Accounting`), what a saved failure records (`Failure`), the merge
//! of disjoint shards (`Merger`), the text table, triage lines and the HTML report (`html`).
//!
//! Determinism: run `k` of a campaign uses seed `seed_start + k`; shard `I/N` takes the runs with
//! `k % N == I`. A signature's first seed is the smallest seed that shows it, so the table for a
//! seed range is the same for any `--jobs` and any split into shards.

pub mod coverage;
mod error;
pub mod fuzz;
pub mod fuzz_targets;
pub mod html;
pub mod reach;
pub mod shrink;
pub mod triage;

use crate::triage::KnownBugs;
pub use error::{CampaignError, CampaignKey};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The corpus format a campaign writes and a merge reads. `/2`: up to N examples per signature
/// (`Campaign::examples`, one `seed-<s>/failure.json` each); `/1` kept one (the first seed).
pub const CORPUS_FORMAT: &str = "kvsim-corpus/2";

/// Examples kept per signature unless `--examples` says otherwise.
pub const DEFAULT_EXAMPLES: usize = 3;

/// What makes one example of a signature smaller than another: fewer requests, then fewer
/// events, then the smaller seed (the field order is the comparison order). `hash` (the run's
/// trace hash) makes examples distinct: two runs with the same trace are one example, the
/// smaller one kept.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExampleKey {
    pub requests: u64,
    pub events: u64,
    pub seed: u64,
    pub hash: String,
}

impl ExampleKey {
    fn measure(&self) -> (u64, u64, u64) {
        (self.requests, self.events, self.seed)
    }
}

/// Offers `key` to a signature's list of its `n` smallest distinct examples (sorted, smallest
/// first). Returns whether it was admitted and the example it pushed out, if any. The list is
/// always the `n` smallest distinct keys of everything offered so far, whatever the order of
/// the offers (a hash keeps its smallest key), so a seed-ordered campaign, any `--jobs`, and the
/// merge of shards' lists all give the same list.
pub fn offer_example(list: &mut Vec<ExampleKey>, key: ExampleKey, n: usize) -> (bool, Vec<ExampleKey>) {
    let mut out = Vec::new();
    if let Some(i) = list.iter().position(|e| e.hash == key.hash) {
        if list[i].measure() <= key.measure() {
            return (false, out);
        }
        out.push(list.remove(i));
    }
    let at = list.partition_point(|e| e.measure() < key.measure());
    if at >= n {
        // Nothing was removed above: a removed same-hash example sat before index `n`, and
        // `key` is smaller than it.
        return (false, out);
    }
    list.insert(at, key);
    while list.len() > n {
        out.extend(list.pop());
    }
    (true, out)
}

/// What one counted run says about itself, for the example lists: its size and trace hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub requests: u64,
    pub events: u64,
    pub hash: String,
}

/// A change to a signature's example list, for the runner to act on (write the example's
/// scenario and queue its shrink; remove a pushed-out example's folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExampleChange {
    Added { sig: String, seed: u64 },
    Removed { sig: String, seed: u64 },
}

/// One signature's line of the table: how many runs showed it and the smallest seed that did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub count: u64,
    pub first_seed: u64,
}

/// The checkpoint: what the contiguous prefix of finished runs found.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Campaign {
    pub format: String,
    pub space: String,
    pub seed_start: u64,
    pub shard: (u64, u64),
    /// Runs `k < next_k` (of this shard) are finished and counted in `table`.
    pub next_k: u64,
    pub runs_done: u64,
    pub table: BTreeMap<String, Entry>,
    /// How many examples per signature this campaign keeps (`--examples`; part of what a resume
    /// or a merge must match: another N would keep other examples).
    #[serde(default)]
    pub examples_per_signature: usize,
    /// Per signature, its smallest distinct examples among the counted runs (`offer_example`).
    #[serde(default)]
    pub examples: BTreeMap<String, Vec<ExampleKey>>,
    /// A guided campaign's corpus (`fuzz::guided`): kept with the table, so a resumed campaign
    /// continues from the corpus it had. `None` for a swarm campaign (and for a merge: shards
    /// evolve their own corpora, the merge keeps the union of their tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided: Option<crate::fuzz::guided::Guided>,
    /// A merge of shards whose runs are no prefix of the seed range (a shard missing, or shards
    /// stopped at different runs: a nightly job's timed-out shard): why. Its table is the union
    /// of the runs done, and it cannot be resumed (`check_resumes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// How the campaign shrinks its examples (`--no-shrink`, `--shrink-budget N`): a resume must match, or its
    /// corpus would mix shrunk and unshrunk examples no uninterrupted campaign writes. `None` in
    /// checkpoints written before it was recorded (a resume then records its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink: Option<String>,
    /// The model that judged the counted runs (`crate::MODEL`): a resume or merge by another
    /// model is refused (`CampaignError::OtherModel`). `None` in checkpoints written before it was
    /// recorded, whose model is unknown: refused too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A base campaign's profile (the base scenario's, `--profile` applied): its space names the
    /// base, not the profile, and a merge of its shards triages by this profile's shipped
    /// known-bugs file as the campaign did. `None` for other spaces (their name says) and in
    /// base checkpoints written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_profile: Option<String>,
    /// The end of the seed range this invocation was asked to run (`--runs N`: runs `k < N`),
    /// when it knows one (not with `--time`, not in a merge); not kept in the checkpoint, a
    /// resume may ask for more. `seeds_text` reads it.
    #[serde(skip)]
    pub planned_end: Option<u64>,
}

impl Campaign {
    /// A campaign with no run finished.
    pub fn new(space: &str, seed_start: u64, shard: (u64, u64)) -> Campaign {
        Campaign {
            format: CORPUS_FORMAT.into(),
            space: space.to_string(),
            seed_start,
            shard,
            next_k: shard.0,
            runs_done: 0,
            table: BTreeMap::new(),
            examples_per_signature: DEFAULT_EXAMPLES,
            examples: BTreeMap::new(),
            guided: None,
            partial: None,
            shrink: None,
            model: Some(crate::MODEL.to_string()),
            base_profile: None,
            planned_end: None,
        }
    }

    /// The same campaign keeping `n` examples per signature.
    pub fn with_examples(mut self, n: usize) -> Campaign {
        self.examples_per_signature = n.max(1);
        self
    }

    /// Whether a checkpoint found in `corpus` belongs to this campaign (same space, seed start and
    /// shard); resuming another campaign's corpus would mix two tables.
    pub fn check_resumes(
        &self,
        corpus: &str,
        space: &str,
        seed_start: u64,
        shard: (u64, u64),
    ) -> Result<(), CampaignError> {
        if self.format != CORPUS_FORMAT {
            return Err(CampaignError::OlderCorpus { corpus: corpus.to_string(), format: self.format.clone() });
        }
        if let Some(why) = &self.partial {
            return Err(CampaignError::PartialMerge { corpus: corpus.to_string(), why: why.clone() });
        }
        self.check_model(corpus)?;
        if self.space != space || self.seed_start != seed_start || self.shard != shard {
            return Err(CampaignError::OtherCampaign {
                corpus: corpus.to_string(),
                space: self.space.clone(),
                seed_start: self.seed_start,
                shard: self.shard,
                asked: Box::new((space.to_string(), seed_start, shard)),
            });
        }
        Ok(())
    }

    /// Whether the checkpoint's runs were judged by this kvsim's model (`crate::MODEL`).
    pub fn check_model(&self, corpus: &str) -> Result<(), CampaignError> {
        if self.model.as_deref() != Some(crate::MODEL) {
            return Err(CampaignError::OtherModel { corpus: corpus.to_string(), model: self.model.clone() });
        }
        Ok(())
    }

    /// Whether a resume keeps as many examples per signature as the checkpoint did.
    pub fn check_examples(&self, corpus: &str, n: usize) -> Result<(), CampaignError> {
        if self.examples_per_signature != n {
            return Err(CampaignError::OtherExamples {
                corpus: corpus.to_string(),
                keeps: self.examples_per_signature,
                asked: n,
            });
        }
        Ok(())
    }

    /// Whether the checkpoint agrees with itself, as every checkpoint a campaign writes does: a
    /// shard `(i, n)` that reached `next_k` did the runs `k < next_k` with `k ≡ i (mod n)`, and
    /// each signature was seen in at most that many runs, first at one of their seeds. A partial
    /// merge's runs are no such prefix: only its signatures are checked. Refused (an edited
    /// `runs_done = 999` merged into "1199 runs" of a 400-seed campaign).
    pub fn check_counts(&self, corpus: &str) -> Result<(), CampaignError> {
        let bad = |why: String| Err(CampaignError::Inconsistent { corpus: corpus.to_string(), why });
        let (i, n) = self.shard;
        if n == 0 || i >= n {
            return bad(format!("shard {i}/{n}"));
        }
        let expected = if self.next_k > i { (self.next_k - i - 1) / n + 1 } else { 0 };
        if self.partial.is_none() && self.runs_done != expected {
            return bad(format!(
                "runs_done {} where shard {i}/{n} up to run {} did {expected}",
                self.runs_done, self.next_k
            ));
        }
        for (sig, e) in &self.table {
            let k = e.first_seed.checked_sub(self.seed_start);
            if e.count == 0 || e.count > self.runs_done {
                return bad(format!("`{sig}` counted in {} of {} run(s)", e.count, self.runs_done));
            }
            if k.is_none_or(|k| k >= self.next_k || (self.partial.is_none() && k % n != i)) {
                return bad(format!("`{sig}` first seen at seed {}, which is not one of its runs", e.first_seed));
            }
        }
        Ok(())
    }

    /// Whether a resume shrinks as the checkpoint's campaign did (`shrink`);
    /// records `asked` in a checkpoint that has no record yet.
    pub fn check_shrink(&mut self, corpus: &str, asked: &str) -> Result<(), CampaignError> {
        match &self.shrink {
            Some(s) if s != asked => Err(CampaignError::OtherShrink {
                corpus: corpus.to_string(),
                keeps: s.clone(),
                asked: asked.to_string(),
            }),
            _ => {
                self.shrink = Some(asked.to_string());
                Ok(())
            }
        }
    }

    /// Counts one finished run (the next of this shard, seed `seed_start + next_k`); with its
    /// facts, offers it as an example of each of its signatures (a run with two mechanisms is
    /// an example of both) and appends what changed to `changes`.
    fn count(&mut self, sigs: BTreeSet<String>, facts: Option<&RunFacts>, changes: &mut Vec<ExampleChange>) {
        let seed = self.seed_start.wrapping_add(self.next_k);
        let n = self.examples_per_signature.max(1);
        for sig in sigs {
            if let Some(f) = facts {
                let key = ExampleKey { requests: f.requests, events: f.events, seed, hash: f.hash.clone() };
                let list = self.examples.entry(sig.clone()).or_default();
                let (added, removed) = offer_example(list, key, n);
                for r in removed {
                    changes.push(ExampleChange::Removed { sig: sig.clone(), seed: r.seed });
                }
                if added {
                    changes.push(ExampleChange::Added { sig: sig.clone(), seed });
                }
            }
            let e = self.table.entry(sig).or_insert(Entry { count: 0, first_seed: seed });
            e.count += 1;
            e.first_seed = e.first_seed.min(seed);
        }
        self.next_k += self.shard.1;
        self.runs_done += 1;
    }

    /// Which run of the seed range drew `seed` (the first run is run 1).
    pub fn run_number(&self, seed: u64) -> u64 {
        seed.wrapping_sub(self.seed_start) + 1
    }

    /// One past the last run of the seed range this campaign did: its runs are among
    /// `k < range_end()` (all of them unsharded; every n-th from its index for shard i/n, whose
    /// `next_k` is one step of n past its last run).
    pub fn range_end(&self) -> u64 {
        (self.next_k + 1).saturating_sub(self.shard.1.max(1))
    }

    /// The seeds this campaign ran, for a summary: `seeds 0..400`, and for shard i of n
    /// `seeds 0..400, one in 4 from 3 (shard 3/4)`.
    pub fn seeds_text(&self) -> String {
        let (i, n) = self.shard;
        // A shard's range rounded up to whole rounds of the n shards, so that the shards of one
        // campaign print the same range (shard 0/2 of 100,000 runs said 0..99999, 1/2 0..100000);
        // with the range asked for known, a shard that did every run of its own below it prints
        // that range, and no other shard goes past it (shard 0/3 of a 2-run campaign said 0..3).
        let end = match (n > 1, self.planned_end) {
            (false, _) => self.range_end(),
            (true, Some(p)) if self.next_k >= p => p,
            (true, p) => self.range_end().div_ceil(n).saturating_mul(n).min(p.unwrap_or(u64::MAX)),
        };
        // A range that ends at the largest seed is written with its last seed (its end, one past
        // it, wrapped to `..0`).
        let range = match self.seed_start.checked_add(end) {
            Some(e) => format!("seeds {}..{e}", self.seed_start),
            None => format!("seeds {}..={}", self.seed_start, self.seed_start.saturating_add(end.saturating_sub(1))),
        };
        if let Some(why) = &self.partial {
            return format!("{range}, PARTIAL: {} of them run ({why})", self.runs_done);
        }
        if n > 1 {
            format!("{range}, one in {n} from {} (shard {i}/{n})", self.seed_start.wrapping_add(i))
        } else {
            range
        }
    }

    /// The new-signature curve: after how many runs of the seed range (run `k` is the `k+1`-th)
    /// the table held 1, 2, … signatures, from each signature's first seed. The same for any
    /// `--jobs`, and for a merge of shards the curve of the unsharded campaign.
    pub fn curve(&self) -> Vec<(u64, usize)> {
        let mut firsts: Vec<u64> = self.table.values().map(|e| self.run_number(e.first_seed)).collect();
        firsts.sort_unstable();
        firsts.into_iter().enumerate().map(|(i, k)| (k, i + 1)).collect()
    }

    /// The seed range's length in runs (of every shard): what the curve's x axis spans.
    pub fn range_runs(&self) -> u64 {
        self.next_k.max(self.runs_done)
    }
}

/// Counts finished runs in seed order whatever order the workers finish them in: run `k`'s
/// signatures wait until every earlier run of the shard is counted, so the checkpoint always
/// holds the exact table of a contiguous prefix of the range.
#[derive(Debug, Clone)]
pub struct Accounting {
    pub camp: Campaign,
    #[allow(clippy::type_complexity)]
    pending: BTreeMap<u64, (BTreeSet<String>, Option<crate::fuzz::guided::Candidate>, Option<RunFacts>)>,
    /// Example-list changes of the runs counted so far, in counting order (`take_changes`).
    changes: Vec<ExampleChange>,
    /// `--until PREFIX`: stop once a signature starting with it is counted.
    until: Option<String>,
    /// Runs counted when `until` was first found.
    pub found_after: Option<u64>,
}

impl Accounting {
    /// A checkpoint that already holds `until`'s signature (a resumed campaign that had stopped
    /// on it) has found it: after the run of its first seed, counted in this shard's runs.
    pub fn new(camp: Campaign, until: Option<String>) -> Accounting {
        let first = until
            .as_deref()
            .and_then(|u| camp.table.iter().filter(|(s, _)| s.starts_with(u)).map(|(_, e)| e.first_seed).min());
        let found_after = first.map(|seed| seed.wrapping_sub(camp.seed_start) / camp.shard.1.max(1) + 1);
        Accounting { camp, pending: BTreeMap::new(), changes: Vec::new(), until, found_after }
    }

    /// Records that run `k` finished with `sigs`, and counts every run of the contiguous prefix
    /// that is now complete. Returns `true` when this call found `--until`'s signature.
    pub fn finished(&mut self, k: u64, sigs: BTreeSet<String>) -> bool {
        self.finished_run(k, sigs, None)
    }

    /// `finished` for a guided campaign: run `k`'s candidate (its features new to the corpus
    /// the run was planned from) joins the epoch's candidates when the run is counted, and the
    /// epoch is folded into the corpus when its last run is (`Guided::fold`, in run order).
    pub fn finished_run(
        &mut self,
        k: u64,
        sigs: BTreeSet<String>,
        cand: Option<crate::fuzz::guided::Candidate>,
    ) -> bool {
        self.finished_with(k, sigs, cand, None)
    }

    /// `finished_run` with the run's facts (size, trace hash), so that it can become one of its
    /// signatures' examples; the changes to the example lists are then in `take_changes`.
    pub fn finished_with(
        &mut self,
        k: u64,
        sigs: BTreeSet<String>,
        cand: Option<crate::fuzz::guided::Candidate>,
        facts: Option<RunFacts>,
    ) -> bool {
        if self.found_after.is_some() {
            // `--until` was found: the table stops at that run, whatever the workers had in
            // flight, so that it is the same for any `--jobs` (runs counted past it made the
            // table and the corpus vary from one campaign to the next).
            return false;
        }
        self.pending.insert(k, (sigs, cand, facts));
        let mut found = false;
        while let Some((sigs, cand, facts)) = self.pending.remove(&self.camp.next_k) {
            let k = self.camp.next_k;
            self.camp.count(sigs, facts.as_ref(), &mut self.changes);
            let shard = self.camp.shard;
            if let Some(g) = self.camp.guided.as_mut() {
                if let Some(c) = cand {
                    g.count_run(c);
                }
                if crate::fuzz::guided::Guided::ends_epoch(k, shard) {
                    g.fold();
                }
            }
            if let (Some(u), None) = (&self.until, self.found_after) {
                if self.camp.table.keys().any(|s| s.starts_with(u.as_str())) {
                    self.found_after = Some(self.camp.runs_done);
                    found = true;
                    break;
                }
            }
        }
        found
    }

    /// Runs finished but not yet counted (an earlier run of the shard is still running).
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// The example-list changes since the last call, in counting order.
    pub fn take_changes(&mut self) -> Vec<ExampleChange> {
        std::mem::take(&mut self.changes)
    }
}

/// What a saved failure says about itself (`<corpus>/<slug>/failure.json`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub signature: String,
    pub seed: u64,
    pub space: String,
    pub reproduce: String,
    pub shrunk: Option<String>,
    pub shrunk_requests: Option<usize>,
    pub necessary_knobs: Vec<String>,
    /// Knobs the shrink budget left unjudged (neither necessary nor shown not to be).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unjudged_knobs: Vec<String>,
    pub confirm: Option<String>,
    /// The example's size (`ExampleKey`): requests and events of the drawn run.
    #[serde(default)]
    pub requests: u64,
    #[serde(default)]
    pub events: u64,
}

/// A signature as a folder name.
pub fn slug(sig: &str) -> String {
    sig.replace('/', "--")
}

/// The flag a reproduce command needs for a signature: `--check noninterference` for a channel,
/// `--check invariants` for a broken invariant (an oracle disagreement's trace carries its check).
pub fn reproduce_flags(sig: &str) -> &'static str {
    if crate::fuzz::is_channel(sig) {
        " --check noninterference"
    } else if crate::fuzz::is_model_bug(sig) && !crate::fuzz::is_disagreement(sig) {
        " --check invariants"
    } else {
        ""
    }
}

/// The check flag `kvsim run` needs to show a signature at all: `--check noninterference` for a
/// channel, `--check-oracle` for an oracle disagreement, `--check invariants` for a broken
/// invariant; empty for what every run reports. (For the header of a saved scenario, and the
/// note `run` prints when a file saved for such a signature is run without it.)
pub fn run_flags(sig: &str) -> &'static str {
    if crate::fuzz::is_disagreement(sig) {
        " --check-oracle"
    } else {
        reproduce_flags(sig)
    }
}

impl Failure {
    /// A failure saved in `seed_dir` (`<corpus>/<slug>/seed-<seed>`), before shrinking and
    /// confirmation fill their fields.
    pub fn new(sig: &str, seed: u64, space: &str, seed_dir: &Path) -> Failure {
        Failure {
            signature: sig.to_string(),
            seed,
            space: space.to_string(),
            reproduce: format!(
                "kvsim run {}{}",
                crate::shell_path(&seed_dir.join("scenario.toml")),
                reproduce_flags(sig)
            ),
            shrunk: None,
            shrunk_requests: None,
            necessary_knobs: vec![],
            unjudged_knobs: vec![],
            confirm: None,
            requests: 0,
            events: 0,
        }
    }

    /// The command that reproduces it on the shrunk case of `seed_dir`.
    pub fn shrunk_command(sig: &str, seed_dir: &Path) -> String {
        format!("kvsim run {}{}", crate::shell_path(&seed_dir.join("shrunk.toml")), reproduce_flags(sig))
    }

    /// Points the reproduce commands at the copy of this failure under `sig_dir` (a signature
    /// folder `<corpus>/<slug>`), e.g. after `kvsim corpus merge` copied it there.
    pub fn relocate(&mut self, sig_dir: &Path) {
        let seed_dir = sig_dir.join(format!("seed-{}", self.seed));
        let flags = reproduce_flags(&self.signature);
        self.reproduce = format!("kvsim run {}{flags}", crate::shell_path(&seed_dir.join("scenario.toml")));
        if self.shrunk.is_some() {
            self.shrunk = Some(Failure::shrunk_command(&self.signature, &seed_dir));
        }
    }

    /// Where it stands among its signature's examples: smaller first (`ExampleKey`'s order).
    pub fn measure(&self) -> (u64, u64, u64) {
        (self.requests, self.events, self.seed)
    }

    /// The command a person runs first: the shrunk case's when there is one.
    pub fn best_command(&self) -> &str {
        self.shrunk.as_deref().unwrap_or(&self.reproduce)
    }
}

/// Whether a corpus entry is scratch left by an interrupted writer: a `.tmp-seed-*` folder (a
/// failure being saved), a `*.tmp<pid>` file (an atomic write in progress).
pub fn is_scratch(name: &str) -> bool {
    name.starts_with(".tmp-")
        || name.rsplit_once(".tmp").is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// What GPU confirmation said about a signature's saved example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// The replay found the model's foreign KV in the attention output above the leak threshold.
    Confirmed,
    /// The replay agrees with the model but does not confirm a leak (under the threshold, or a
    /// read kind that is not cross-tenant).
    Agrees,
    /// The replay contradicts the model: to investigate (never silently dropped).
    Disagreement,
    /// The confirmation itself failed (no backend, a CUDA error).
    Failed,
    /// Not replayed: not a read signature, or `--confirm off`.
    NotReplayed,
}

impl Confirmation {
    /// The verdict of a saved failure's `confirm` line (written by [`confirm_summary`]).
    pub fn of(line: Option<&str>) -> Confirmation {
        match line {
            None => Confirmation::NotReplayed,
            Some(l) if l.starts_with("confirmed:") => Confirmation::Confirmed,
            Some(l) if l.starts_with("DISAGREEMENT") => Confirmation::Disagreement,
            Some(l) if l.starts_with("replay agrees") => Confirmation::Agrees,
            Some(_) => Confirmation::Failed,
        }
    }

    /// The report's column: `confirmed`, `not confirmed`, …
    pub fn label(self) -> &'static str {
        match self {
            Confirmation::Confirmed => "confirmed",
            Confirmation::Agrees => "not confirmed (replay agrees)",
            Confirmation::Disagreement => "DISAGREEMENT",
            Confirmation::Failed => "confirm failed",
            Confirmation::NotReplayed => "not replayed",
        }
    }
}

/// Whether a signature's saved example is replayed on KV memory (the read kinds).
pub fn is_confirmable(sig: &str) -> bool {
    let kind = sig.split('/').next().unwrap_or_default();
    ["cross_tenant_read", "cross_request_read", "uninitialized_read"].contains(&kind)
}

/// The replay's counts for one saved example (what `kvsim confirm` returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayCounts {
    pub reads: u64,
    pub confirmed: u64,
    pub disagreements: u64,
    pub backend: String,
}

/// Why a replay gave no verdict: the backend was unavailable (exit 3), the GPU failed at run time
/// (exit 4), or the log or the options were bad input (exit 2). `exit_code` is what `kvsim
/// confirm` exits with; `message` says what failed, naming the file and line where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayFailure {
    pub exit_code: i32,
    pub message: String,
}

impl ReplayFailure {
    /// Bad input (exit 2).
    pub fn bad_input(message: String) -> ReplayFailure {
        ReplayFailure { exit_code: crate::report::exit::BAD_INPUT, message }
    }
}

impl std::fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ReplayFailure {}

/// The `confirm` line of a saved failure from the replay's counts (or its error). A read whose
/// replayed memory does not hold what the model saw is a DISAGREEMENT between model and replay:
/// reported, never dropped. A cross-tenant read whose foreign KV is in the replayed memory but
/// under the leak threshold agrees with the model (not confirmed, not a disagreement).
pub fn confirm_summary(sig: &str, replay: Result<ReplayCounts, ReplayFailure>) -> String {
    let kind = sig.split('/').next().unwrap_or_default();
    match replay {
        Ok(v) if v.disagreements > 0 => format!(
            "DISAGREEMENT model/replay: {} of {} read(s) confirmed, {} contradict the model on {} — investigate",
            v.confirmed, v.reads, v.disagreements, v.backend
        ),
        Ok(v) if v.reads == 0 => {
            "DISAGREEMENT model/replay: the trace's memory log holds none of the violating reads — investigate"
                .to_string()
        }
        // No disagreement: every read's replayed memory holds another tenant's KV, as the model
        // saw, but its share of the attention is under the leak threshold (a read of 2 foreign
        // slots among 466). The replay agrees with the model; it is just not confirmed as a leak.
        Ok(v) if kind == "cross_tenant_read" && v.confirmed == 0 => format!(
            "replay agrees: {} violating read(s) replayed on {}, none with foreign KV over the leak threshold (not confirmed)",
            v.reads, v.backend
        ),
        Ok(v) if kind == "cross_tenant_read" => {
            format!("confirmed: {} of {} read(s) on {}", v.confirmed, v.reads, v.backend)
        }
        Ok(v) => format!("replay agrees: {} read(s) on {}", v.reads, v.backend),
        Err(e) => format!("confirm failed: {e}"),
    }
}

/// The known-bugs file for a campaign on `profile`: a file for another profile is refused (its
/// rows say what that engine has, not this one).
pub fn check_known_profile(k: &KnownBugs, profile: Option<&str>) -> Result<(), CampaignError> {
    match profile {
        Some(p) if p != k.profile => Err(CampaignError::KnownForOtherProfile {
            source: k.source.clone(),
            file_profile: k.profile.clone(),
            campaign_profile: p.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The engine profile a campaign space pins (`profile:P`, `prefix:P`, with any `+mode` suffix such
/// as `+liveness=60000ms`; `blind` and `base:` none).
pub fn space_profile(space: &str) -> Option<&str> {
    let space = space.split('+').next().unwrap_or(space);
    space.strip_prefix("profile:").or_else(|| space.strip_prefix("prefix:")).filter(|p| *p != "blind")
}

/// Whether a campaign space is blind (it draws every profile): `blind` or `prefix:blind`, with
/// any `+mode` suffix.
pub fn is_blind(space: &str) -> bool {
    matches!(space.split('+').next().unwrap_or(space), "blind" | "prefix:blind")
}

/// A known-bugs file names one profile; a blind space's cases run every profile, so its rows
/// cannot triage them.
pub fn check_known_blind(k: &KnownBugs, space: &str) -> Result<(), CampaignError> {
    if is_blind(space) {
        return Err(CampaignError::KnownForBlind { source: k.source.clone(), file_profile: k.profile.clone() });
    }
    Ok(())
}

/// The known-bugs file of a merge: `given` (read from `--known FILE`) must be for the merged
/// campaign's profile; without one, the shipped file of that profile, if any.
pub fn merge_known(
    space: &str,
    base_profile: Option<&str>,
    given: Option<KnownBugs>,
) -> Result<Option<KnownBugs>, CampaignError> {
    let profile = space_profile(space).or(base_profile);
    match given {
        Some(k) => match profile {
            Some(p) if p != k.profile => Err(CampaignError::KnownForOtherSpace {
                source: k.source,
                file_profile: k.profile,
                space: space.to_string(),
            }),
            _ => check_known_blind(&k, space).map(|()| Some(k)),
        },
        None => Ok(profile.and_then(KnownBugs::shipped)),
    }
}

/// The triage summary under a table: how many of its signatures are known and how many new.
/// (The known entries it did not find are listed in the HTML report, `unseen_known`: a count here
/// would read as an alarm, and whether a campaign could have found an entry depends on its bound,
/// its pins and luck.)
pub fn triage_line(table: &BTreeMap<String, Entry>, k: &KnownBugs) -> String {
    let n_new = table.keys().filter(|s| k.row(s).is_none()).count();
    format!(
        "triage against {} (profile {}): {} known, {} new (exit {})\n",
        k.source,
        k.profile,
        table.len() - n_new,
        n_new,
        // The campaign's exit status, whatever it is (it was said only when 0).
        crate::triage::exit_status(table.keys(), Some(k))
    )
}

/// The known-bugs entries whose signature a campaign's table lacks, each with why this campaign
/// (its space name) could not have found it: `Some(why)` when the signature needs a mode the
/// campaign did not run (`needs --hardware-faults`, `needs --liveness`, `needs --check
/// noninterference`) or one it cannot arise in (an ordinary run's hang in a liveness campaign,
/// whose hangs are `request_hang/after_heal/…`; a campaign that pins the row's fix with `--set`),
/// `None` when it may have (a long campaign that never finds such an entry suggests it is stale:
/// the model or the profile changed under it).
pub fn unseen_known<'k>(
    table: &BTreeMap<String, Entry>,
    k: &'k KnownBugs,
    space: &str,
) -> Vec<(&'k crate::triage::KnownBug, Option<&'static str>)> {
    let modes: Vec<&str> = space.split('+').skip(1).collect();
    let has = |m: &str| modes.iter().any(|x| *x == m || x.starts_with(&format!("{m}=")));
    let pins: Vec<&str> = modes.iter().filter_map(|m| m.strip_prefix("set:")).flat_map(|l| l.split(',')).collect();
    let fix_pinned = |row: &str| match crate::reach::row(row).map(|r| &r.fix) {
        Some(crate::reach::Fix::Knobs(fix)) => fix.iter().any(|(k, v)| pins.contains(&format!("{k}={v}").as_str())),
        _ => false,
    };
    k.known
        .iter()
        .filter(|b| !table.contains_key(&b.signature))
        .map(|b| {
            let sig = b.signature.as_str();
            let after_heal = sig.starts_with("request_hang/after_heal/");
            let hardware = crate::fuzz::hardware_fault(sig).is_some() || b.hardware;
            // Every mode the entry needs and the campaign lacks (a vLLM `memory_safety` channel
            // needs the hardware faults and the noninterference check: it named the first alone).
            let needs = (
                hardware && !has("hardware"),
                after_heal && !has("liveness"),
                crate::fuzz::is_channel(sig) && !has("check:noninterference"),
            );
            let why = if needs != (false, false, false) {
                Some(match needs {
                    (true, false, false) => "needs --hardware-faults",
                    (false, true, false) => "needs --liveness",
                    (false, false, true) => "needs --check noninterference",
                    (true, true, false) => "needs --hardware-faults and --liveness",
                    (true, false, true) => "needs --hardware-faults and --check noninterference",
                    (false, true, true) => "needs --liveness and --check noninterference",
                    _ => "needs --hardware-faults, --liveness and --check noninterference",
                })
            } else if sig.starts_with("request_hang/") && !after_heal && has("liveness") {
                Some("an ordinary run's hang: not in a --liveness campaign")
            } else if fix_pinned(&b.row) {
                Some("the campaign pins the row's fix (--set)")
            } else {
                None
            };
            (b, why)
        })
        .collect()
}

/// A signature's triage label: `new`, `known (<row>)`, or empty without a known-bugs file;
/// `, hardware` follows when the signature's chain names a hardware fault
/// (`fuzz::hardware_fault`: found only with those faults drawn) or its known entry says it needs
/// one (`KnownBugs::hardware`).
pub fn triage_label(sig: &str, known: Option<&KnownBugs>) -> String {
    let triage = match known.map(|k| k.row(sig)) {
        None => String::new(),
        Some(None) => "new".to_string(),
        Some(Some(row)) => format!("known ({row})"),
    };
    let hardware = crate::fuzz::hardware_fault(sig).is_some() || known.is_some_and(|k| k.hardware(sig));
    match (hardware, triage.is_empty()) {
        (true, true) => "hardware".to_string(),
        (true, false) => format!("{triage}, hardware"),
        (false, _) => triage,
    }
}

/// The final table: signature, count, first seed, reproduce command (of the signature's
/// smallest example), then one indented line per further example kept (`saved`: each signature's
/// saved examples, smallest first).
/// A status column says `new` or `known (<row>)` for each signature with a known-bugs file,
/// `untriaged` without one (`, hardware` added for a hardware-only fault's signature).
pub fn table_text(
    table: &BTreeMap<String, Entry>,
    saved: &BTreeMap<String, Vec<Failure>>,
    known: Option<&KnownBugs>,
) -> String {
    let mut s = String::new();
    if table.is_empty() {
        s.push_str("no violations found\n");
        return s;
    }
    // Without a known-bugs file a shown status (a hardware signature's) says `untriaged`, as the
    // HTML report does (the text left it blank, or said `hardware` alone).
    let label = |sig: &str| match (known, triage_label(sig, known)) {
        (None, l) if l.is_empty() => "untriaged".to_string(),
        (None, l) => format!("untriaged, {l}"),
        (Some(_), l) => l,
    };
    // Columns as wide as their longest entry (a chain signature is longer than a plain one).
    let w = table.keys().map(String::len).max().unwrap_or(0).max(48);
    let sw = table.keys().map(|k| label(k).len()).max().unwrap_or(0).max(6);
    // The status column, always (it was shown only with a known-bugs file or a `hardware`
    // signature, so a CI parser could not rely on it; README says `untriaged` without a file).
    let status = |sig: &str| format!("{:<sw$} ", label(sig));
    let head = format!("{:<sw$} ", "status");
    s.push_str(&format!("{:<w$} {:>8} {:>12}  {head}reproduce\n", "signature", "runs", "first seed"));
    for (sig, e) in table {
        let examples = saved.get(sig).map(Vec::as_slice).unwrap_or_default();
        let f = examples.first();
        let repro = f.map(|f| f.best_command().to_string()).unwrap_or_default();
        let extra = f.and_then(|f| f.confirm.clone()).map(|c| format!("  [{c}]")).unwrap_or_default();
        s.push_str(&format!("{sig:<w$} {:>8} {:>12}  {}{repro}{extra}\n", e.count, e.first_seed, status(sig)));
        if examples.len() > 1 {
            for (i, f) in examples.iter().enumerate() {
                s.push_str(&format!(
                    "    example {} of {}: seed {}, {} request(s), {} events: {}\n",
                    i + 1,
                    examples.len(),
                    f.seed,
                    f.requests,
                    f.events,
                    f.best_command()
                ));
            }
        }
    }
    s
}

/// The union of the disjoint shards of one campaign. Shards are added one by one; adding a
/// corpus of another campaign (space, seed start or shard count), or a shard already added
/// (the same runs would be counted twice), is refused.
#[derive(Debug, Default)]
pub struct Merger {
    table: BTreeMap<String, Entry>,
    runs: u64,
    first: Option<(String, Campaign)>,
    /// Shard index → its corpus, the run its seed range reached (`next_k`) and its runs done.
    shards_seen: BTreeMap<u64, (String, u64, u64)>,
    /// Per signature, the smallest distinct examples of every shard added (`offer_example`
    /// over the shards' lists: the unsharded campaign's list, whatever the order of adding).
    pub examples: BTreeMap<String, Vec<ExampleKey>>,
    /// Per signature, every example of every shard added (each shard's whole list): where a
    /// merge finds the next smallest saved example when one of `examples` was not completed.
    candidates: BTreeMap<String, Vec<ExampleKey>>,
    /// Which corpus holds each example seed (shards are disjoint: a seed is in one).
    origin: BTreeMap<u64, String>,
    pub corpora: usize,
    /// Inputs that are partial merges themselves, and why: a merge of one stays partial.
    partial_inputs: Vec<String>,
}

/// How a merge's `partial` reason begins when examples its shards had not completed are all that
/// is missing (`kvsim corpus merge`): the table is whole then.
pub const EXAMPLES_NOT_COMPLETED: &str = "examples not completed";

impl Merger {
    /// Checks a checkpoint's format (read from `path`).
    pub fn check_format(c: &Campaign, path: &str) -> Result<(), CampaignError> {
        if c.format != CORPUS_FORMAT {
            return Err(CampaignError::CorpusFormat { path: path.to_string(), format: c.format.clone() });
        }
        Ok(())
    }

    /// Adds corpus `name` (its checkpoint). Runs judged by another model than this kvsim's, or by
    /// a kvsim that did not record its model, are refused as a resume refuses them: the merge
    /// triages the table with this build's known bugs (it accepted them, exit 0).
    pub fn add(&mut self, name: &str, c: Campaign) -> Result<(), CampaignError> {
        c.check_model(name)?;
        if let Some((d0, c0)) = &self.first {
            if c.space == c0.space && c.seed_start == c0.seed_start && c.shard.1 != c0.shard.1 {
                // A partial merge (one corpus of the whole range) with a shard of the same
                // campaign: merge the shards themselves again instead.
                let partial = [(name, &c.partial), (d0.as_str(), &c0.partial)]
                    .into_iter()
                    .find_map(|(n, p)| p.as_ref().map(|why| (n.to_string(), why.clone())));
                if let Some((corpus, why)) = partial {
                    return Err(CampaignError::PartialMergeWithShards { corpus, why });
                }
            }
            if c.space != c0.space || c.seed_start != c0.seed_start || c.shard.1 != c0.shard.1 {
                return Err(CampaignError::NotAShard {
                    name: name.to_string(),
                    campaign: Box::new(CampaignKey {
                        space: c.space.clone(),
                        seed_start: c.seed_start,
                        shard_count: c.shard.1,
                    }),
                    first: d0.clone(),
                    first_campaign: Box::new(CampaignKey {
                        space: c0.space.clone(),
                        seed_start: c0.seed_start,
                        shard_count: c0.shard.1,
                    }),
                });
            }
            if c.examples_per_signature != c0.examples_per_signature {
                return Err(CampaignError::ShardExamples {
                    name: name.to_string(),
                    keeps: c.examples_per_signature,
                    first: d0.clone(),
                    first_keeps: c0.examples_per_signature,
                });
            }
            // As a resume refuses other shrink options (`Campaign::check_shrink`): the merged
            // corpus would record one setting over examples of both.
            // (A corpus that recorded none is taken as a resume takes it.)
            if let (Some(shrink), Some(first_shrink)) = (&c.shrink, &c0.shrink) {
                if shrink != first_shrink {
                    return Err(CampaignError::ShardShrink {
                        name: name.to_string(),
                        shrink: shrink.clone(),
                        first: d0.clone(),
                        first_shrink: first_shrink.clone(),
                    });
                }
            }
        }
        c.check_counts(name)?;
        if let Some((other, ..)) = self.shards_seen.insert(c.shard.0, (name.to_string(), c.next_k, c.runs_done)) {
            return Err(CampaignError::OverlappingShard {
                name: name.to_string(),
                shard: c.shard.0,
                count: c.shard.1,
                other,
            });
        }
        if let Some(why) = &c.partial {
            self.partial_inputs.push(format!("{name} is a partial merge ({why})"));
        }
        self.runs += c.runs_done;
        for (sig, e) in &c.table {
            let t = self.table.entry(sig.clone()).or_insert(Entry { count: 0, first_seed: e.first_seed });
            t.count += e.count;
            t.first_seed = t.first_seed.min(e.first_seed);
        }
        let n = c.examples_per_signature.max(1);
        for (sig, list) in &c.examples {
            let merged = self.examples.entry(sig.clone()).or_default();
            for key in list {
                self.origin.insert(key.seed, name.to_string());
                offer_example(merged, key.clone(), n);
            }
            self.candidates.entry(sig.clone()).or_default().extend(list.iter().cloned());
        }
        self.corpora += 1;
        self.first.get_or_insert((name.to_string(), c));
        Ok(())
    }

    /// Signature `sig`'s `n` smallest distinct examples among the shards' examples that
    /// `complete` accepts (an example its shard saved whole): `examples[sig]` when every one of
    /// those is complete, else the next smallest saved ones fill in for those that are not (a
    /// partial merge dropped them, and kept fewer examples than the shards had saved).
    pub fn complete_examples(&self, sig: &str, complete: impl Fn(&ExampleKey) -> bool) -> Vec<ExampleKey> {
        let n = self.first.as_ref().map_or(1, |(_, c)| c.examples_per_signature.max(1));
        let mut list = Vec::new();
        for key in self.candidates(sig).iter().filter(|k| complete(k)) {
            offer_example(&mut list, key.clone(), n);
        }
        list
    }

    /// Every shard's example of `sig`, each shard's list in turn.
    pub fn candidates(&self, sig: &str) -> &[ExampleKey] {
        self.candidates.get(sig).map_or(&[], Vec::as_slice)
    }

    /// The corpus that holds example `seed`.
    pub fn origin(&self, seed: u64) -> Option<&str> {
        self.origin.get(&seed).map(String::as_str)
    }

    /// The merged checkpoint: one unsharded campaign of every shard's runs. Shard `i` of `n`
    /// covers the runs `k < next_k_i` with `k ≡ i (mod n)`, so with every shard there the union is
    /// the prefix `k < R` of the seed range (what the checkpoint says, `next_k = R`, and a resume
    /// continues from) exactly when the shards' `next_k` lie within `n` of each other. Otherwise
    /// (a shard missing, or one stopped early: a nightly job's timed-out shard) the merge is
    /// `partial`: its table is the union of the runs done, and it says why.
    pub fn campaign(&self) -> Result<Campaign, CampaignError> {
        let (_, c0) = self.first.as_ref().ok_or(CampaignError::NoCorpora)?;
        let count = c0.shard.1;
        let missing: Vec<String> =
            (0..count).filter(|i| !self.shards_seen.contains_key(i)).map(|i| format!("{i}/{count}")).collect();
        let lo = self.shards_seen.values().map(|(_, k, _)| *k).min().unwrap_or(0);
        let hi = self.shards_seen.values().map(|(_, k, _)| *k).max().unwrap_or(0);
        let partial = if !self.partial_inputs.is_empty() {
            Some(self.partial_inputs.join("; "))
        } else if !missing.is_empty() {
            Some(format!("shard(s) {} missing", missing.join(", ")))
        } else if hi - lo >= count {
            // Where each stopped (its `next_k`: it did the runs below it of its residue class);
            // the run counts alone could be equal ("sh0 did 200 run(s), e1 did 200 run(s)"),
            // and a checkpoint whose counts disagree with its `next_k` is refused (`check_counts`).
            let ends: Vec<String> =
                self.shards_seen.values().map(|(d, k, n)| format!("{d} did {n} run(s), its next run {k}")).collect();
            Some(format!("the shards stopped at different runs: {}", ends.join(", ")))
        } else {
            None
        };
        // A partial merge spans the seed range its furthest shard reached (its curve and seed
        // line say so); a whole one is the prefix of `runs` runs.
        let next_k = if partial.is_some() { hi.max(self.runs) } else { self.runs };
        Ok(Campaign {
            format: CORPUS_FORMAT.into(),
            space: c0.space.clone(),
            seed_start: c0.seed_start,
            shard: (0, 1),
            next_k,
            runs_done: self.runs,
            table: self.table.clone(),
            examples_per_signature: c0.examples_per_signature,
            examples: self.examples.clone(),
            guided: None,
            partial,
            shrink: c0.shrink.clone(),
            model: c0.model.clone(),
            base_profile: c0.base_profile.clone(),
            planned_end: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What run `k` finds in these tests (a fixed, made-up pattern).
    fn found(k: u64) -> BTreeSet<String> {
        let mut s = BTreeSet::new();
        if k.is_multiple_of(3) {
            s.insert("page_leak/decode".to_string());
        }
        if k % 7 == 5 {
            s.insert("cross_tenant_read/stub_commit".to_string());
        }
        if k == 11 {
            s.insert("use_after_free/transfer_write".to_string());
        }
        s
    }

    /// Run `k`'s size and trace hash in these tests (made up; hashes repeat every 13 runs, so
    /// some runs are the same example).
    fn facts(k: u64) -> RunFacts {
        RunFacts { requests: (k * 7) % 5, events: 100 + k % 11, hash: format!("h{}", k % 13) }
    }

    fn in_order(n: u64, shard: (u64, u64)) -> Campaign {
        let mut a = Accounting::new(Campaign::new("blind", 100, shard), None);
        for k in (shard.0..n).step_by(shard.1 as usize) {
            a.finished_with(k, found(k), None, Some(facts(k)));
        }
        a.camp
    }

    #[test]
    fn runs_finished_out_of_order_are_counted_in_seed_order() {
        let want = in_order(20, (0, 1));
        assert_eq!(want.runs_done, 20);
        assert_eq!(want.table["page_leak/decode"], Entry { count: 7, first_seed: 100 });
        assert_eq!(want.table["cross_tenant_read/stub_commit"], Entry { count: 3, first_seed: 105 });
        assert_eq!(want.table["use_after_free/transfer_write"], Entry { count: 1, first_seed: 111 });
        // Reversed: nothing is counted until run 0 arrives, then everything at once.
        let mut a = Accounting::new(Campaign::new("blind", 100, (0, 1)), None);
        for k in (1..20).rev() {
            a.finished_with(k, found(k), None, Some(facts(k)));
            assert_eq!(a.camp.runs_done, 0, "run 0 is still running");
        }
        assert_eq!(a.waiting(), 19);
        a.finished_with(0, found(0), None, Some(facts(0)));
        assert_eq!(a.waiting(), 0);
        assert_eq!(a.camp, want);
    }

    #[test]
    fn until_stops_at_the_first_run_in_seed_order_that_shows_the_signature() {
        let mut a = Accounting::new(Campaign::new("blind", 100, (0, 1)), Some("cross_tenant_read/".into()));
        // Run 12 finishes first (it shows the signature), but run 5 is the first in order.
        assert!(!a.finished(12, found(12)), "not counted yet");
        for k in 0..5 {
            assert!(!a.finished(k, found(k)));
        }
        assert!(a.finished(5, found(5)));
        assert_eq!(a.found_after, Some(6));
        assert!(!a.finished(6, found(6)), "found once");
        // The table stops at the run that found it: run 12, in flight then, is not counted.
        assert_eq!((a.camp.runs_done, a.camp.next_k), (6, 6));
        for k in 7..20 {
            a.finished(k, found(k));
        }
        assert_eq!(a.camp.runs_done, 6, "runs finished after the find are not counted");
    }

    #[test]
    fn merged_shards_equal_the_unsharded_campaign() {
        let whole = in_order(30, (0, 1));
        let mut m = Merger::default();
        // Added in reverse: the merged example lists do not depend on the order.
        for i in (0..3).rev() {
            m.add(&format!("shard{i}"), in_order(30, (i, 3))).unwrap();
        }
        let merged = m.campaign().unwrap();
        assert_eq!((merged.table, merged.runs_done), (whole.table.clone(), 30));
        assert_eq!(merged.examples, whole.examples, "the N smallest examples of the union");
        let leak = &whole.examples["page_leak/decode"];
        assert_eq!(leak.len(), DEFAULT_EXAMPLES);
        assert_eq!(m.origin(leak[0].seed), Some(format!("shard{}", (leak[0].seed - 100) % 3).as_str()));
        // The same shard twice, or a shard of another campaign: refused.
        let e = m.add("again", in_order(30, (1, 3))).unwrap_err();
        assert!(matches!(e, CampaignError::OverlappingShard { shard: 1, count: 3, .. }), "{e}");
        assert!(e.to_string().contains("shard 1/3 is also shard1: the corpora overlap"), "{e}");
        let other = Campaign { seed_start: 5, ..in_order(30, (0, 3)) };
        let mut m2 = Merger::default();
        m2.add("a", in_order(30, (0, 3))).unwrap();
        let e = m2.add("b", other).unwrap_err().to_string();
        assert!(e.contains("not a shard of the same campaign as a"), "{e}");
        let e = m2.add("c", in_order(30, (1, 3)).with_examples(5)).unwrap_err().to_string();
        assert!(e.contains("keeps 5 example(s) per signature, a keeps 3"), "{e}");
        assert_eq!(Merger::default().campaign().unwrap_err(), CampaignError::NoCorpora);
        let old = Campaign { format: "kvsim-corpus/0".into(), ..whole };
        assert!(Merger::check_format(&old, "c/campaign.json").unwrap_err().to_string().contains("corpus format"));
    }

    /// Shards whose runs are the first N of the seed range merge whole, also when a `--runs` end
    /// leaves them a run apart (30 runs in 4 shards: 8, 8, 7, 7). A missing shard, or one stopped
    /// further back (a timed-out shard), gives a partial merge that no resume continues.
    #[test]
    fn a_merge_is_whole_only_when_its_shards_cover_a_prefix_of_the_seed_range() {
        let merge = |shards: &[(u64, u64)]| {
            let mut m = Merger::default();
            for &(i, runs) in shards {
                m.add(&format!("shard{i}"), in_order(runs, (i, 4))).unwrap();
            }
            m.campaign().unwrap()
        };
        let whole = merge(&[(0, 30), (1, 30), (2, 30), (3, 30)]);
        assert_eq!((whole.partial.as_deref(), whole.runs_done, whole.next_k), (None, 30, 30));
        assert_eq!(whole.table, in_order(30, (0, 1)).table);
        assert!(whole.check_resumes("m", "blind", 100, (0, 1)).is_ok());
        let missing = merge(&[(0, 30), (2, 30), (3, 30)]);
        assert_eq!(missing.partial.as_deref(), Some("shard(s) 1/4 missing"));
        // Merged again on its own, a partial merge stays partial (it was read as complete, and a
        // resume then skipped the missing shard's seeds).
        let mut again = Merger::default();
        again.add("m", missing.clone()).unwrap();
        let again = again.campaign().unwrap();
        assert_eq!(again.partial.as_deref(), Some("m is a partial merge (shard(s) 1/4 missing)"));
        // A partial merge merged with its missing shard: the shards are to be merged again.
        let mut with_shard = Merger::default();
        with_shard.add("m", missing.clone()).unwrap();
        let e = with_shard.add("s1", in_order(30, (1, 4))).unwrap_err().to_string();
        assert!(e.contains("m: a partial merge (shard(s) 1/4 missing) is merged only alone"), "{e}");
        assert!(e.contains("merge the shards it was made from"), "{e}");
        let e = missing.check_resumes("m", "blind", 100, (0, 1)).unwrap_err().to_string();
        assert!(e.contains("a partial merge (shard(s) 1/4 missing) cannot be resumed"), "{e}");
        // Each shard's reports give the seed range it covered every n-th of, not its next_k.
        assert_eq!(in_order(30, (3, 4)).range_end(), 28, "runs 3, 7, …, 27");
        assert_eq!(in_order(30, (0, 4)).range_end(), 29, "runs 0, 4, …, 28");
        assert_eq!((whole.range_end(), Campaign::new("blind", 100, (2, 4)).range_end()), (30, 0));
        assert_eq!(in_order(30, (3, 4)).seeds_text(), "seeds 100..128, one in 4 from 103 (shard 3/4)");
        // The shards of one campaign print one range (0/2 of 10 runs said 100..109, 1/2 100..110).
        assert_eq!(in_order(10, (0, 2)).seeds_text(), "seeds 100..110, one in 2 from 100 (shard 0/2)");
        assert_eq!(in_order(10, (1, 2)).seeds_text(), "seeds 100..110, one in 2 from 101 (shard 1/2)");
        assert_eq!(whole.seeds_text(), "seeds 100..130");
        // With the range asked for known (`--runs N`), a shard that did its part says that range
        // (not rounded past it), and an interrupted one stops at it too.
        let asked = |mut c: Campaign, p: u64| {
            c.planned_end = Some(p);
            c.seeds_text()
        };
        assert_eq!(asked(in_order(2, (0, 3)), 2), "seeds 100..102, one in 3 from 100 (shard 0/3)");
        assert_eq!(asked(in_order(2, (2, 3)), 2), "seeds 100..102, one in 3 from 102 (shard 2/3)");
        assert_eq!(in_order(2, (0, 3)).seeds_text(), "seeds 100..103, one in 3 from 100 (shard 0/3)");
        assert_eq!(asked(in_order(30, (0, 4)), 30), "seeds 100..130, one in 4 from 100 (shard 0/4)");
        assert_eq!(asked(in_order(30, (0, 4)), 1000), "seeds 100..132, one in 4 from 100 (shard 0/4)");
        // Up to the largest seed: its end, one past it, is not written as `..0`.
        let mut a = Accounting::new(Campaign::new("blind", u64::MAX - 2, (0, 1)), None);
        for k in 0..3 {
            a.finished_with(k, found(k), None, Some(facts(k)));
        }
        assert_eq!(a.camp.seeds_text(), format!("seeds {}..={}", u64::MAX - 2, u64::MAX));
        let ragged = merge(&[(0, 30), (1, 30), (2, 12), (3, 30)]);
        let why = ragged.partial.unwrap();
        assert!(why.starts_with("the shards stopped at different runs"), "{why}");
        assert!(why.contains("shard2 did 3 run(s), its next run 14"), "{why}");
        assert!(why.contains("shard0 did 8 run(s), its next run 32"), "{why}");
    }

    /// A checkpoint that contradicts itself (edited, damaged) is refused, as are shards that
    /// shrank differently: neither merged into impossible numbers or a mixed corpus.
    #[test]
    fn a_merge_refuses_an_inconsistent_checkpoint_and_shards_that_shrank_differently() {
        let refused = |c: Campaign| {
            let mut m = Merger::default();
            m.add("s0", in_order(30, (0, 2))).unwrap();
            m.add("s1", c).unwrap_err().to_string()
        };
        let e = refused(Campaign { runs_done: 999, ..in_order(30, (1, 2)) });
        assert!(
            e.contains("s1: its campaign.json contradicts itself (runs_done 999 where shard 1/2 up to run 31 did 15)"),
            "{e}"
        );
        let mut c = in_order(30, (1, 2));
        c.table.get_mut("page_leak/decode").unwrap().count = 5000;
        assert!(refused(c).contains("`page_leak/decode` counted in 5000 of 15 run(s)"));
        let mut c = in_order(30, (1, 2));
        c.table.insert("page_leak/prefill".into(), Entry { count: 1, first_seed: 102 });
        assert!(refused(c).contains("first seen at seed 102, which is not one of its runs"));
        let mut c = in_order(30, (1, 2));
        c.shrink = Some("--no-shrink".into());
        let mut m = Merger::default();
        m.add("s0", Campaign { shrink: Some("--shrink-budget 1500".into()), ..in_order(30, (0, 2)) }).unwrap();
        let e = m.add("s1", c).unwrap_err().to_string();
        assert!(e.contains("s1: was run with --no-shrink, s0 with --shrink-budget 1500"), "{e}");
        // Every checkpoint the campaign itself writes agrees with itself.
        for shard in [(0, 1), (0, 3), (1, 3), (2, 3)] {
            in_order(30, shard).check_counts("c").unwrap();
        }
    }

    #[test]
    fn the_curve_counts_signatures_by_their_first_run() {
        let c = in_order(20, (0, 1));
        assert_eq!(c.curve(), vec![(1, 1), (6, 2), (12, 3)]);
        assert_eq!(c.range_runs(), 20);
        // A merged campaign's curve is the unsharded one's.
        let mut m = Merger::default();
        for i in 0..2 {
            m.add(&i.to_string(), in_order(20, (i, 2))).unwrap();
        }
        assert_eq!(m.campaign().unwrap().curve(), c.curve());
    }

    /// Issue 15: up to N smallest distinct examples per signature, by (requests, events, seed),
    /// whatever order the runs finish in; a run with two signatures is an example of both.
    #[test]
    fn each_signature_keeps_its_n_smallest_distinct_examples() {
        let whole = in_order(60, (0, 1));
        // Brute force: per signature, the smallest key per hash, sorted, the first 3.
        for (sig, list) in &whole.examples {
            let mut best: BTreeMap<String, ExampleKey> = BTreeMap::new();
            for k in (0..60).filter(|k| found(*k).contains(sig)) {
                let f = facts(k);
                let key = ExampleKey { requests: f.requests, events: f.events, seed: 100 + k, hash: f.hash };
                let e = best.entry(key.hash.clone()).or_insert(key.clone());
                if key < *e {
                    *e = key;
                }
            }
            let mut want: Vec<ExampleKey> = best.into_values().collect();
            want.sort();
            want.truncate(DEFAULT_EXAMPLES);
            assert_eq!(list, &want, "{sig}");
        }
        assert_eq!(whole.examples["page_leak/decode"].len(), 3);
        assert_eq!(whole.examples["use_after_free/transfer_write"].len(), 1);
        // Run 12 shows two signatures: counted for both, an example of both.
        let both = |k: u64| found(k).len() == 2;
        let k = (0..60).find(|&k| both(k)).unwrap();
        assert!(found(k).iter().all(|s| whole.table[s].count > 0));
        // Out of order (reversed, as `--jobs` may deliver them): the same lists, and the changes
        // replayed on empty lists give them too.
        let mut a = Accounting::new(Campaign::new("blind", 100, (0, 1)), None);
        for k in (0..60).rev() {
            a.finished_with(k, found(k), None, Some(facts(k)));
        }
        assert_eq!(a.camp.examples, whole.examples);
        let mut kept: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for c in a.take_changes() {
            match c {
                ExampleChange::Added { sig, seed } => assert!(kept.entry(sig).or_default().insert(seed)),
                ExampleChange::Removed { sig, seed } => assert!(kept.get_mut(&sig).unwrap().remove(&seed)),
            }
        }
        let want: BTreeMap<String, BTreeSet<u64>> =
            whole.examples.iter().map(|(s, l)| (s.clone(), l.iter().map(|e| e.seed).collect())).collect();
        assert_eq!(kept, want);
        assert!(a.take_changes().is_empty());
        // N = 1 keeps only the smallest; a resume with another N is refused.
        let mut one = Accounting::new(Campaign::new("blind", 100, (0, 1)).with_examples(1), None);
        for k in 0..60 {
            one.finished_with(k, found(k), None, Some(facts(k)));
        }
        for (sig, list) in &one.camp.examples {
            assert_eq!(list.as_slice(), &whole.examples[sig][..1]);
        }
        assert!(one.camp.check_examples("c", 3).unwrap_err().to_string().contains("keeps 1 example(s) per signature"));
        // Two runs with the same trace are one example: the smaller kept.
        let key = |seed, hash: &str| ExampleKey { requests: 1, events: 1, seed, hash: hash.into() };
        let mut l = vec![];
        assert_eq!(offer_example(&mut l, key(9, "a"), 2), (true, vec![]));
        assert_eq!(offer_example(&mut l, key(12, "a"), 2), (false, vec![]));
        assert_eq!(offer_example(&mut l, key(3, "a"), 2), (true, vec![key(9, "a")]));
        assert_eq!(offer_example(&mut l, key(5, "b"), 2), (true, vec![]));
        assert_eq!(offer_example(&mut l, key(1, "c"), 2), (true, vec![key(5, "b")]));
        assert_eq!(l, vec![key(1, "c"), key(3, "a")]);
    }

    #[test]
    fn resume_is_refused_for_another_campaign() {
        let c = Campaign::new("blind", 7, (0, 1));
        assert!(c.check_resumes("corp", "blind", 7, (0, 1)).is_ok());
        let e = c.check_resumes("corp", "profile:sglang-0.5.22", 7, (0, 1)).unwrap_err().to_string();
        assert!(e.starts_with("corp: made by another campaign (space blind"), "{e}");
        assert!(c.check_resumes("corp", "blind", 8, (0, 1)).is_err());
        assert!(c.check_resumes("corp", "blind", 7, (0, 2)).is_err());
        // A checkpoint of the one-example format: refused with what to do.
        let old: Campaign = serde_json::from_str(
            r#"{"format":"kvsim-corpus/1","space":"blind","seed_start":7,"shard":[0,1],"next_k":3,"runs_done":3,"table":{}}"#,
        )
        .unwrap();
        let e = old.check_resumes("corp", "blind", 7, (0, 1)).unwrap_err().to_string();
        assert!(
            e.contains("made by an older kvsim (corpus format `kvsim-corpus/1`") && e.contains("use another --corpus"),
            "{e}"
        );
        // Runs judged by another model, or by a kvsim that did not record its model (version
        // 0.1.0 throughout): refused, since the table would count two models' verdicts.
        let mut other = c.clone();
        other.model = Some("0123456789abcdef".into());
        let e = other.check_resumes("corp", "blind", 7, (0, 1)).unwrap_err().to_string();
        assert!(e.contains("judged by model 0123456789abcdef; this kvsim is model") && e.contains(crate::MODEL), "{e}");
        let mut unrecorded = serde_json::to_value(&c).unwrap();
        unrecorded.as_object_mut().unwrap().remove("model");
        let unrecorded: Campaign = serde_json::from_value(unrecorded).unwrap();
        let e = unrecorded.check_resumes("corp", "blind", 7, (0, 1)).unwrap_err().to_string();
        assert!(e.contains("judged by a kvsim that did not record its model"), "{e}");
        // Corpora of another model, or of none recorded, are not merged either (they were, and
        // triaged with this build's known bugs); the merge keeps its shards' model.
        let (a, mut b) = (Campaign::new("blind", 7, (0, 2)), Campaign::new("blind", 7, (1, 2)));
        let mut m = Merger::default();
        m.add("a", a.clone()).unwrap();
        b.model = other.model.clone();
        let e = m.add("b", b).unwrap_err().to_string();
        assert!(e.contains("judged by model 0123456789abcdef; this kvsim is model"), "{e}");
        let e = Merger::default().add("u", unrecorded.clone()).unwrap_err().to_string();
        assert!(e.contains("judged by a kvsim that did not record its model"), "{e}");
        let mut m = Merger::default();
        m.add("a", a).unwrap();
        m.add("b", Campaign::new("blind", 7, (1, 2))).unwrap();
        assert_eq!(m.campaign().unwrap().model.as_deref(), Some(crate::MODEL));
    }

    #[test]
    fn scratch_names_are_recognised() {
        assert!(is_scratch(".tmp-seed-5-42") && is_scratch("campaign.tmp4242") && is_scratch("failure.tmp1"));
        assert!(!is_scratch("campaign.json") && !is_scratch("seed-5") && !is_scratch("x.tmp") && !is_scratch("a.tmpx"));
    }

    #[test]
    fn reproduce_commands_carry_the_check_the_signature_needs() {
        let d = Path::new("c/sig/seed-3");
        let f = Failure::new("timing_channel/prefix_hit", 3, "blind", d);
        assert_eq!(f.reproduce, "kvsim run c/sig/seed-3/scenario.toml --check noninterference");
        let f = Failure::new("invariant_broken/decode-0", 3, "blind", d);
        assert!(f.reproduce.ends_with(" --check invariants"));
        assert_eq!(
            Failure::new("oracle_disagreement/read", 3, "blind", d).reproduce,
            "kvsim run c/sig/seed-3/scenario.toml"
        );
        let mut f = Failure::new("cross_tenant_read/stub_commit", 3, "blind", d);
        f.shrunk = Some(Failure::shrunk_command(&f.signature, d));
        assert_eq!(f.best_command(), "kvsim run c/sig/seed-3/shrunk.toml");
        f.relocate(Path::new("merged/sig"));
        assert_eq!(f.best_command(), "kvsim run merged/sig/seed-3/shrunk.toml");
        assert_eq!(f.reproduce, "kvsim run merged/sig/seed-3/scenario.toml");
    }

    #[test]
    fn confirmation_lines_classify_as_written() {
        let counts =
            |reads, confirmed, disagreements| ReplayCounts { reads, confirmed, disagreements, backend: "cpu".into() };
        let sig = "cross_tenant_read/stub_commit";
        let cases = [
            (confirm_summary(sig, Ok(counts(2, 2, 0))), Confirmation::Confirmed),
            (confirm_summary(sig, Ok(counts(2, 0, 0))), Confirmation::Agrees),
            (confirm_summary(sig, Ok(counts(2, 1, 1))), Confirmation::Disagreement),
            (confirm_summary(sig, Ok(counts(0, 0, 0))), Confirmation::Disagreement),
            (confirm_summary("uninitialized_read/x", Ok(counts(1, 0, 0))), Confirmation::Agrees),
            (
                confirm_summary(sig, Err(ReplayFailure { exit_code: 3, message: "no driver".into() })),
                Confirmation::Failed,
            ),
        ];
        for (line, want) in cases {
            assert_eq!(Confirmation::of(Some(&line)), want, "{line}");
        }
        assert_eq!(Confirmation::of(None), Confirmation::NotReplayed);
        assert!(is_confirmable(sig) && !is_confirmable("page_leak/decode"));
    }

    #[test]
    fn the_table_always_has_a_status_column() {
        let k = KnownBugs::shipped("sglang-0.5.22").unwrap();
        // The shipped file's first entry is an rdma-visibility-lag signature: a hardware fault's.
        let known_sig = k.known[0].signature.clone();
        assert_eq!(crate::fuzz::hardware_fault(&known_sig), Some("visibility_lag"), "{known_sig}");
        let mut table = BTreeMap::new();
        table.insert("page_leak/decode".to_string(), Entry { count: 1, first_seed: 12 });
        // Without a known-bugs file and without a hardware signature too (it was left out, so a
        // CI parser could not rely on it).
        let plain = table_text(&table, &BTreeMap::new(), None);
        assert!(plain.starts_with("signature") && plain.lines().next().unwrap().contains(" status "), "{plain}");
        assert!(plain.lines().nth(1).unwrap().contains(" untriaged "), "{plain}");
        table.insert(known_sig.clone(), Entry { count: 4, first_seed: 9 });
        let labelled = table_text(&table, &BTreeMap::new(), None);
        assert!(labelled.lines().next().unwrap().contains("status"), "{labelled}");
        let hw_line = labelled.lines().find(|l| l.starts_with(&known_sig)).unwrap();
        assert!(hw_line.contains(" untriaged, hardware "), "{labelled}");
        // Untriaged, as the HTML report says: the status was blank.
        let leak_line = labelled.lines().find(|l| l.starts_with("page_leak/decode")).unwrap();
        assert!(!leak_line.contains("hardware") && leak_line.contains(" untriaged "), "{labelled}");
        let triaged = table_text(&table, &BTreeMap::new(), Some(&k));
        let row = &k.known[0].row;
        assert!(triaged.contains(&format!("known ({row}), hardware")) && triaged.contains(" new "), "{triaged}");
        assert_eq!(
            triage_line(&table, &k),
            format!("triage against {} (profile sglang-0.5.22): 1 known, 1 new (exit 11)\n", k.source)
        );
        // Every other entry is unseen, each with why this campaign could not find it, if so.
        let could = unseen_known(&table, &k, "profile:sglang-0.5.22").iter().filter(|(_, w)| w.is_none()).count();
        assert!(could > 0 && could < k.known.len() - 1, "{could}");
        let all = unseen_known(&table, &k, "profile:sglang-0.5.22+hardware+liveness=30000ms+check:noninterference");
        // With every mode on, only the ordinary run's hang (request_hang/decode_leg_pending) is out of reach.
        assert_eq!(all.len(), k.known.len() - 1);
        assert_eq!(
            all.iter().filter(|(_, w)| w.is_some()).map(|(b, _)| b.signature.as_str()).collect::<Vec<_>>(),
            ["request_hang/decode_leg_pending"]
        );
        let plain = unseen_known(&table, &k, "profile:sglang-0.5.22");
        let why = |sig: &str| plain.iter().find(|(b, _)| b.signature == sig).map(|(_, w)| *w);
        assert_eq!(why("request_hang/after_heal/decode_prealloc/never_fits"), Some(Some("needs --liveness")));
        assert_eq!(why("timing_channel/prefix_hit"), Some(Some("needs --check noninterference")));
        assert_eq!(why("cross_request_read/visibility_lag"), Some(Some("needs --hardware-faults")));
        assert_eq!(why("wrong_status/rejected_answered_5xx"), Some(None));
        assert_eq!(why("request_hang/decode_leg_pending"), Some(None));
        let live = unseen_known(&table, &k, "profile:sglang-0.5.22+liveness=30000ms");
        let why = |sig: &str| live.iter().find(|(b, _)| b.signature == sig).map(|(_, w)| *w);
        assert_eq!(
            why("request_hang/decode_leg_pending"),
            Some(Some("an ordinary run's hang: not in a --liveness campaign"))
        );
        assert_eq!(why("request_hang/after_heal/decode_prealloc/never_fits"), Some(None));
        let pinned = unseen_known(&table, &k, "profile:sglang-0.5.22+set:router_on_prefill_error=cancel_decode");
        let why = |sig: &str| pinned.iter().find(|(b, _)| b.signature == sig).map(|(_, w)| *w);
        assert_eq!(why("wrong_status/rejected_answered_5xx"), Some(Some("the campaign pins the row's fix (--set)")));
        assert_eq!(why("cross_tenant_read/late_write"), Some(None));
        assert_eq!(table_text(&BTreeMap::new(), &BTreeMap::new(), Some(&k)), "no violations found\n");

        // vllm-nixl's `memory_safety` channels name no hardware fault, but need the lag: their
        // entries say `hardware = true`, so they are labelled and listed as needing it.
        let v = KnownBugs::shipped("vllm-nixl").unwrap();
        let sig = "timing_channel/memory_safety";
        assert!(
            crate::fuzz::hardware_fault(sig).is_none() && v.hardware(sig) && !v.hardware("timing_channel/prefix_hit")
        );
        assert_eq!(triage_label(sig, Some(&v)), "known (cross-tenant-prefix-hit), hardware");
        assert_eq!(triage_label("timing_channel/prefix_hit", Some(&v)), "known (cross-tenant-prefix-hit)");
        let ni = unseen_known(&BTreeMap::new(), &v, "profile:vllm-nixl+check:noninterference");
        let why = |sig: &str| ni.iter().find(|(b, _)| b.signature == sig).map(|(_, w)| *w);
        assert_eq!(why(sig), Some(Some("needs --hardware-faults")));
        let plain = unseen_known(&BTreeMap::new(), &v, "profile:vllm-nixl");
        let why_plain = |sig: &str| plain.iter().find(|(b, _)| b.signature == sig).map(|(_, w)| *w);
        assert_eq!(why_plain(sig), Some(Some("needs --hardware-faults and --check noninterference")));
        assert_eq!(why("timing_channel/prefix_hit"), Some(None));
        // On sglang-0.5.22 the same signature arises without the lag: not hardware.
        assert!(!k.hardware(sig));
    }

    #[test]
    fn known_files_must_match_the_profile() {
        let k = KnownBugs::shipped("sglang-0.5.22").unwrap();
        assert!(check_known_profile(&k, Some("sglang-0.5.22")).is_ok() && check_known_profile(&k, None).is_ok());
        assert!(check_known_profile(&k, Some("vllm-nixl"))
            .unwrap_err()
            .to_string()
            .contains("the file is for profile sglang-0.5.22"));
        assert_eq!(merge_known("profile:vllm-nixl", None, None).unwrap().unwrap().profile, "vllm-nixl");
        assert_eq!(merge_known("prefix:blind", None, None).unwrap(), None);
        // A blind campaign draws every profile: one engine's rows would triage another's cases.
        let e = merge_known("blind", None, Some(k.clone())).unwrap_err().to_string();
        assert!(e.contains("a blind campaign draws every profile"), "{e}");
        assert!(merge_known("prefix:blind+check:noninterference", None, Some(k.clone())).is_err());
        assert_eq!(merge_known("base:x.toml", None, Some(k.clone())).unwrap(), Some(k.clone()));
        assert!(merge_known("profile:vllm-nixl", None, Some(k.clone())).is_err());
        // A base campaign's shards triage by its profile's shipped file, as the campaign did (the
        // merge skipped triage: exit 10 where the campaign exited 0), and refuse another's.
        assert_eq!(merge_known("base:x@0123", Some("sglang-0.5.22"), None).unwrap().unwrap().profile, "sglang-0.5.22");
        assert_eq!(merge_known("base:x@0123", None, None).unwrap(), None);
        assert!(merge_known("base:x@0123", Some("vllm-nixl"), Some(k)).is_err());
        assert_eq!(space_profile("base:x.toml"), None);
        assert_eq!(space_profile("profile:sglang-0.5.22+liveness=60000ms"), Some("sglang-0.5.22"));
    }
}
