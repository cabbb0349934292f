//! Why a campaign's corpus, known-bugs file or shards were refused. Each variant carries what its
//! message names (the corpus or file, the two campaigns' identities); the command line prints the
//! message and exits 2.

use std::fmt;

/// A corpus, known-bugs file or merge refused by campaign accounting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CampaignError {
    /// The checkpoint in `corpus` was made by a campaign of another space, seed start or shard
    /// (`Campaign::check_resumes`): resuming it would mix two tables.
    OtherCampaign {
        corpus: String,
        space: String,
        seed_start: u64,
        shard: (u64, u64),
        asked: Box<(String, u64, (u64, u64))>,
    },
    /// `--known` names a file for `file_profile`; the campaign runs `campaign_profile`.
    KnownForOtherProfile { source: String, file_profile: String, campaign_profile: String },
    /// `--known` names a file for `file_profile`; the merged campaign ran `space`.
    KnownForOtherSpace { source: String, file_profile: String, space: String },
    /// `--known` names a file for `file_profile`; the campaign is blind (it draws every profile).
    KnownForBlind { source: String, file_profile: String },
    /// The checkpoint at `path` has another corpus format.
    CorpusFormat { path: String, format: String },
    /// The checkpoint in `corpus` was made by an older kvsim (corpus `format`, one example per
    /// signature): this kvsim cannot continue it.
    OlderCorpus { corpus: String, format: String },
    /// The checkpoint in `corpus` was judged by another model (`model`; `None`: a kvsim that did
    /// not record it): resuming it would count runs of two models in one table.
    OtherModel { corpus: String, model: Option<String> },
    /// The checkpoint in `corpus` keeps `keeps` examples per signature; the resume asked `asked`.
    OtherExamples { corpus: String, keeps: usize, asked: usize },
    /// The checkpoint in `corpus` shrinks its examples as `keeps` says (`--no-shrink`, `--shrink-budget N`); the
    /// resume asked `asked`.
    OtherShrink { corpus: String, keeps: String, asked: String },
    /// Corpus `name` keeps `keeps` examples per signature, the first corpus `first` keeps `first_keeps`.
    ShardExamples { name: String, keeps: usize, first: String, first_keeps: usize },
    /// Corpus `name` shrinks its examples as `shrink` says, the first corpus `first` as
    /// `first_shrink`.
    ShardShrink { name: String, shrink: String, first: String, first_shrink: String },
    /// The checkpoint in `corpus` contradicts itself (`why`: its run count and the seed range it
    /// names, a signature counted in more runs than were done or first seen outside its runs):
    /// edited or damaged.
    Inconsistent { corpus: String, why: String },
    /// Corpus `name` is a shard of another campaign than `first` (the first corpus added).
    NotAShard { name: String, campaign: Box<CampaignKey>, first: String, first_campaign: Box<CampaignKey> },
    /// Corpus `name` is shard `shard` of `count`, already added as `other`.
    OverlappingShard { name: String, shard: u64, count: u64, other: String },
    /// `Merger::campaign` with nothing added.
    NoCorpora,
    /// The checkpoint in `corpus` is a partial merge (`why`): its runs are no prefix of the seed
    /// range, so no resume can continue it.
    PartialMerge { corpus: String, why: String },
    /// `corpus merge` of a partial merge with shards: a partial merge is merged again only alone
    /// (its table is the union of its shards' runs, which cannot be told apart again).
    PartialMergeWithShards { corpus: String, why: String },
}

/// What makes corpora shards of one campaign: the same space, seed start and shard count.
/// (Boxed in `CampaignError::NotAShard`, so the error stays small on the happy path.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CampaignKey {
    pub space: String,
    pub seed_start: u64,
    pub shard_count: u64,
}

impl fmt::Display for CampaignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CampaignError as E;
        match self {
            E::OtherCampaign { corpus, space, seed_start, shard, asked } => write!(
                f,
                "{corpus}: made by another campaign (space {space}, seed start {seed_start}, shard {}/{}); this one is space {}, seed start {}, shard {}/{}; use another --corpus, or the first campaign's options to resume it",
                shard.0, shard.1, asked.0, asked.1, asked.2 .0, asked.2 .1
            ),
            E::KnownForOtherProfile { source, file_profile, campaign_profile } => {
                write!(f, "--known {source}: the file is for profile {file_profile}, the campaign runs {campaign_profile}")
            }
            E::KnownForOtherSpace { source, file_profile, space } => {
                write!(f, "--known {source}: the file is for profile {file_profile}, the merged campaign ran {space}")
            }
            E::KnownForBlind { source, file_profile } => write!(
                f,
                "--known {source}: the file is for profile {file_profile}, and a blind campaign draws every profile: its signatures cannot be triaged against one engine's rows (a campaign: give --profile {file_profile}; a campaign or a merge: --known none)"
            ),
            E::CorpusFormat { path, format } => write!(
                f,
                "{path}: corpus format `{format}`, this kvsim merges `{}` (up to N examples per signature); a corpus of an older kvsim cannot be merged",
                super::CORPUS_FORMAT
            ),
            E::OlderCorpus { corpus, format } => write!(
                f,
                "{corpus}: made by an older kvsim (corpus format `{format}`, one example per signature); this kvsim keeps up to N examples per signature (`{}`) and cannot continue it: use another --corpus",
                super::CORPUS_FORMAT
            ),
            E::OtherModel { corpus, model } => write!(
                f,
                "{corpus}: its runs were judged by {}; this kvsim is model {} (the model changed since: resuming it would count runs of two models in one table, merging it would triage its runs by this model's known bugs); use another --corpus, or the kvsim that made it",
                model_name(model),
                crate::MODEL
            ),
            E::OtherExamples { corpus, keeps, asked } => write!(
                f,
                "{corpus}: this campaign keeps {keeps} example(s) per signature, not --examples {asked}; use another --corpus"
            ),
            E::OtherShrink { corpus, keeps, asked } => write!(
                f,
                "{corpus}: this campaign was run with {keeps}, not {asked} (a resume with other shrink options would mix shrunk and unshrunk examples); give the first campaign's --shrink-budget / --no-shrink, or use another --corpus"
            ),
            E::ShardExamples { name, keeps, first, first_keeps } => write!(
                f,
                "{name}: keeps {keeps} example(s) per signature, {first} keeps {first_keeps}; shards of one campaign keep the same number"
            ),
            E::ShardShrink { name, shrink, first, first_shrink } => write!(
                f,
                "{name}: was run with {shrink}, {first} with {first_shrink}; shards of one campaign shrink alike (a merge would mix shrunk and unshrunk examples)"
            ),
            E::Inconsistent { corpus, why } => write!(
                f,
                "{corpus}: its campaign.json contradicts itself ({why}): edited or damaged; a campaign's own checkpoint never does (resume it to rebuild, or use another corpus)"
            ),
            E::NotAShard { name, campaign: c, first, first_campaign: c0 } => write!(
                f,
                "{name}: campaign (space {}, seed start {}, shard count {}) is not a shard of the same campaign as {first} (space {}, seed start {}, shard count {}); only disjoint shards of one campaign can be merged",
                c.space, c.seed_start, c.shard_count, c0.space, c0.seed_start, c0.shard_count
            ),
            E::OverlappingShard { name, shard, count, other } => write!(
                f,
                "{name}: shard {shard}/{count} is also {other}: the corpora overlap (the same runs would be counted twice)"
            ),
            E::NoCorpora => f.write_str("no corpora to merge"),
            E::PartialMerge { corpus, why } => write!(
                f,
                "{corpus}: a partial merge ({why}) cannot be resumed: resume the shards themselves, then merge them again"
            ),
            E::PartialMergeWithShards { corpus, why } => write!(
                f,
                "{corpus}: a partial merge ({why}) is merged only alone, not with shards (its table is its shards' runs, \
                 which cannot be told apart again): merge the shards it was made from, with the missing ones, instead"
            ),
        }
    }
}

impl std::error::Error for CampaignError {}

/// A checkpoint's model as a message names it.
fn model_name(m: &Option<String>) -> String {
    match m {
        Some(m) => format!("model {m}"),
        None => "a kvsim that did not record its model".to_string(),
    }
}
