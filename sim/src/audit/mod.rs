//! `kvsim audit`: measure, don't assume. Reads engine start-up logs (see `parse`), reports each
//! node's KV pool against the context length under its engine's own admission rule, and the band
//! of prompt lengths that the front door admits but the pool cannot serve; then builds a scenario
//! from the measured numbers so the simulator can say what that gap means under an engine
//! profile. Pure: text in, text out.
//!
//! Roles: a node whose log names no disaggregation role (the common case: one server's log) is
//! audited as a node that could serve either role. A pool gap leaks on the prefill side, so it is
//! placed there, against the worst partner the context admits: a decode node whose pool holds the
//! whole context (plus sglang's reserved decode tokens), so a stub's reservation always covers
//! stale pages. Roles given with `--role` or found in the log narrow this. The report states every
//! assumption it made.
//!
//! Ranks: the TP/PP/EP/DP ranks of one launch are one node unless they disagree on a fact (pool,
//! context, page size, role); ranks that disagree are audited separately.

pub mod parse;

use crate::report::thousands;
use parse::{Engine, NodeFacts, Role};
use serde::Serialize;
use std::fmt::Write as _;

/// Smallest pool (tokens) an engine starts with: below 7, sglang's `max_req_input_len`
/// (`min(context - 1, pool - 1) - 5`) is 0 and the server refuses to start.
pub const MIN_POOL_TOKENS: u64 = 7;
/// Smallest context length, for the same reason.
pub const MIN_CONTEXT_LEN: u64 = 7;
/// Largest context length audited (2^30 tokens, a thousand times today's longest contexts):
/// the generated scenario must stay within the scenario's page limit even at page size 1.
pub const MAX_CONTEXT_LEN: u64 = 1 << 30;
/// Largest page size, the scenario's `page_size` knob limit.
pub const MAX_PAGE_SIZE: u64 = 1 << 16;
/// Largest pool in pages: a scenario's pool must have fewer than `u32::MAX / 2` pages.
pub const MAX_POOL_PAGES: u64 = (u32::MAX / 2) as u64 - 1;
/// Most nodes audited at once (after merging ranks that agree): bounds the generated scenario.
pub const MAX_NODES: usize = 1024;
/// Each probe is sent this many times at most (once per prefill node, round robin, up to this).
pub const MAX_PROBE_COPIES: usize = 16;
/// Decode's `num_reserved_decode_tokens` in sglang (512): the assumed decode partner holds the
/// whole context plus these.
pub const RESERVED_DECODE_TOKENS: u64 = 512;

/// A log value outside what an engine can run with: names the log file, line and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditError {
    pub file: String,
    pub line: usize,
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for AuditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: `{}`: {}", self.file, self.line, self.field, self.message)
    }
}

impl std::error::Error for AuditError {}

/// How a node's role was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleSource {
    /// Printed in the log (`disaggregation_mode`, `kv_role`).
    Log,
    /// Given with `--role`.
    Flag,
    /// Not known: the node could serve either role.
    Either,
}

/// The engine's admission rule applied to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Longest prompt the engine admits and can serve from this pool.
    pub max_accepted: u64,
    /// `[lo, hi)`: admitted at the front door, but the pool cannot serve them.
    pub band: Option<(u64, u64)>,
    /// The rule, in words.
    pub rule: String,
    /// What happens to a prompt in the band.
    pub band_means: &'static str,
}

/// One audited node: the last launch of each file, its ranks merged unless they disagree.
#[derive(Debug, Clone)]
pub struct AuditNode {
    pub facts: NodeFacts,
    /// Rank labels merged into this node (empty when the log names none).
    pub ranks: Vec<String>,
    /// Effective role: `Unknown` means "either".
    pub role: Role,
    pub role_source: RoleSource,
    pub admission: Option<Admission>,
}

impl AuditNode {
    /// The engine whose rule applies (sglang's when the log does not say).
    pub fn engine(&self) -> Engine {
        self.facts.engine.unwrap_or(Engine::Sglang)
    }
    /// Whether this node may serve as prefill.
    pub fn prefill_capable(&self) -> bool {
        self.role != Role::Decode
    }
}

#[derive(Debug, Clone)]
pub struct Audit {
    pub nodes: Vec<AuditNode>,
    pub context_len: Option<u64>,
    pub page_size: u64,
    pub page_size_known: bool,
    pub notes: Vec<String>,
}

impl Audit {
    /// Whether any node has a band.
    pub fn has_gap(&self) -> bool {
        self.nodes.iter().any(|n| n.admission.as_ref().is_some_and(|a| a.band.is_some()))
    }
    /// Whether every node is a vLLM node.
    /// A vLLM node has a band (`VLLM_BAND_NOTE` applies under the `vllm-nixl` profile).
    pub fn vllm_band(&self) -> bool {
        self.nodes.iter().any(|n| n.engine() == Engine::Vllm && n.admission.as_ref().is_some_and(|a| a.band.is_some()))
    }

    pub fn all_vllm(&self) -> bool {
        !self.nodes.is_empty() && self.nodes.iter().all(|n| n.facts.engine == Some(Engine::Vllm))
    }

    /// The engine profile the gap is simulated under when `--profile` is not given, and why:
    /// the build the logs name, mapped to the shipped profile that behaves as it does.
    /// - vLLM logs: `vllm-nixl`.
    /// - sglang 0.5.21 and later: `sglang-0.5.22`. 0.5.21 is the first release that retires a
    ///   prompt rejected at intake before it is bootstrapped (`disaggregation/prefill.py`
    ///   `PrefillBootstrapQueue.add` → `is_unadmitted_reject`; absent from the 0.5.16–0.5.20
    ///   wheels, present in 0.5.21–0.5.23), and decode gained its door check in the same release.
    /// - sglang before 0.5.21: `sglang-0.5.16` (the stub walks on: `set_finish_with_abort` leaves
    ///   a one-token prompt and nothing retires it at intake).
    /// - No sglang version in the logs: `sglang-0.5.16`, the worst case, said as an assumption.
    pub fn default_profile(&self) -> (&'static str, String) {
        if self.all_vllm() {
            return ("vllm-nixl", "the logs are vLLM's".to_string());
        }
        // Each sglang node's release and the version as the log gave it (`>=0.5.23` when only
        // 0.5.23's small-pool warning dates the build); `None` when any node has none. The
        // prefill side decides: a rejected prompt is retired (or walks on as a stub) at prefill's
        // intake (`disaggregation/prefill.py`), so an older decode behind a fixed prefill does not
        // make the gap leak (it called a fixed prefill's gap a leak). Decode-only logs decide
        // when no prefill-capable node is logged.
        let sglang = |n: &&AuditNode| n.engine() == Engine::Sglang;
        let prefill_side: Vec<&AuditNode> = self.nodes.iter().filter(sglang).filter(|n| n.prefill_capable()).collect();
        let deciding: Vec<&AuditNode> =
            if prefill_side.is_empty() { self.nodes.iter().filter(sglang).collect() } else { prefill_side };
        let versions: Option<Vec<(Release, &str)>> =
            deciding.iter().map(|n| n.facts.version.as_deref().and_then(|v| Some((release(v)?, v)))).collect();
        // Said when the builds differ: which nodes run which, and that the profile applies to all.
        let mut builds: Vec<String> = self
            .nodes
            .iter()
            .filter(sglang)
            .filter_map(|n| Some(format!("{} {}", n.facts.source, n.facts.version.as_deref()?)))
            .collect();
        builds.dedup();
        let distinct: std::collections::BTreeSet<&str> =
            self.nodes.iter().filter(sglang).filter_map(|n| n.facts.version.as_deref()).collect();
        let mixed = if distinct.len() > 1 {
            format!(
                "; the nodes run different builds ({}): the prefill side's picks the profile, which every node is simulated with",
                builds.join(", ")
            )
        } else {
            String::new()
        };
        match versions.and_then(|vs| vs.into_iter().min()) {
            Some((oldest, shown)) => {
                if oldest >= INTAKE_RETIRES_REJECTS {
                    let why = format!(
                        "sglang {shown} retires a prompt rejected at intake before bootstrap (0.5.21 and later){mixed}"
                    );
                    ("sglang-0.5.22", why)
                } else {
                    let why = format!(
                        "sglang {shown} predates 0.5.21: a prompt rejected at intake walks on as a one-token stub{mixed}"
                    );
                    ("sglang-0.5.16", why)
                }
            }
            None => {
                let without: Vec<&str> = self
                    .nodes
                    .iter()
                    .filter(|n| n.engine() == Engine::Sglang && n.facts.version.as_deref().and_then(release).is_none())
                    .map(|n| n.facts.source.as_str())
                    .collect();
                let with = self.nodes.iter().filter(|n| n.engine() == Engine::Sglang).count() - without.len();
                let why = if with == 0 {
                    "ASSUMED: no sglang version in the logs, so a build before 0.5.21's intake fix, the worst case"
                        .to_string()
                } else {
                    let mut files = without.clone();
                    files.dedup();
                    format!(
                        "ASSUMED: {} sglang node(s) give no version ({}), so a build before 0.5.21's intake fix, the worst case; add the version to their logs, or as `python -m sglang.check_env` output in a log of its own",
                        without.len(),
                        files.join(", ")
                    )
                };
                ("sglang-0.5.16", why)
            }
        }
    }
}

/// The shipped profile that models sglang release `version` (as `Audit::default_profile` picks
/// it from a log's version), and why; `None` when `version` names no release.
pub fn sglang_profile_for(version: &str) -> Option<(&'static str, &'static str)> {
    Some(if release(version)? >= INTAKE_RETIRES_REJECTS {
        ("sglang-0.5.22", "0.5.21 and later retire a prompt rejected at intake")
    } else {
        ("sglang-0.5.16", "before 0.5.21 a prompt rejected at intake walks on as a one-token stub")
    })
}

/// A release as (major, minor, patch).
type Release = (u32, u32, u32);

/// The first sglang release that retires a prompt rejected at intake (see `default_profile`).
const INTAKE_RETIRES_REJECTS: Release = (0, 5, 21);

/// A version string's release triple: `0.5.23` and `v0.5.10.post1` name their release. A
/// pre-release or development build (`0.5.21rc1`, `0.5.21.dev3+g1a2b`) may lack what its release
/// has, so it counts as the release before it (0.5.20), the worse case for the audit.
fn release(v: &str) -> Option<Release> {
    // `>=X`: a lower bound the log implies (`parse::SMALL_POOL_WARNING_SINCE`), read as X.
    let v = v.trim().trim_start_matches(">=").trim_start_matches(['v', 'V']);
    let parts: Vec<&str> = v.split(['.', '+']).collect();
    let number = |p: &str| -> Option<(u32, bool)> {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        Some((digits.parse().ok()?, digits.len() < p.len()))
    };
    let (major, _) = number(parts.first()?)?;
    let (minor, _) = number(parts.get(1)?)?;
    let (patch, suffixed) = number(parts.get(2)?)?;
    let pre = suffixed || parts.get(3).is_some_and(|p| p.starts_with("dev"));
    Some(if pre { (major, minor, patch.checked_sub(1)?) } else { (major, minor, patch) })
}

/// sglang: the scheduler rejects `L >= min(ctx - 1, pool - 1) - 5`; the tokenizer admits `L < ctx`.
/// vLLM: the OpenAI server rejects `L + max_tokens > max_model_len` (and `L >= max_model_len` when
/// `max_tokens` is unset), so with at least one output token it admits `L <= ctx - 1`
/// (`_validate_prompt_and_tokenize` in
/// <https://github.com/vllm-project/vllm/blob/0030b9ffce2b2e8b8e9f04a7b108f5877193cec0/vllm/entrypoints/openai/serving_engine.py>;
/// later releases keep the rule in `_validate_input`); a prompt longer than the whole pool is
/// admitted but can never be scheduled (<https://github.com/vllm-project/vllm/issues/39734>).
pub fn admission(engine: Engine, context_len: u64, pool_tokens: u64) -> Admission {
    match engine {
        Engine::Sglang => {
            let m = parse::max_req_input_len(context_len, pool_tokens);
            Admission {
                max_accepted: m.saturating_sub(1),
                band: if pool_tokens < context_len { parse::rejection_band(context_len, pool_tokens) } else { None },
                rule: format!(
                    "sglang: max_req_input_len = min(context - 1, pool - 1) - 5 = {}; the scheduler rejects L >= it, the tokenizer admits L < context",
                    thousands(m)
                ),
                band_means: "pass the tokenizer and fall into the scheduler's rejection path",
            }
        }
        Engine::Vllm => {
            let admitted = context_len.saturating_sub(1);
            let band = (pool_tokens < admitted).then_some((pool_tokens + 1, context_len));
            Admission {
                max_accepted: admitted.min(pool_tokens),
                band,
                rule: format!(
                    "vLLM: the API server admits L + max_tokens <= max_model_len, so L <= {} with one output token; the pool holds {} tokens",
                    thousands(admitted),
                    thousands(pool_tokens)
                ),
                band_means: "are admitted but can never be scheduled (the request waits; vLLM #39734)",
            }
        }
    }
}

/// Range-checks what a log said against the limits above.
fn check_ranges(n: &NodeFacts) -> Result<(), AuditError> {
    let err =
        |line: usize, field: &'static str, message: String| AuditError { file: n.source.clone(), line, field, message };
    if let Some(ps) = n.page_size {
        if ps == 0 || ps > MAX_PAGE_SIZE {
            return Err(err(
                n.page_size_line.unwrap_or(n.line),
                "page_size",
                format!("{ps}: a page size must be between 1 and {MAX_PAGE_SIZE} tokens"),
            ));
        }
    }
    if let Some(ctx) = n.context_len {
        if !(MIN_CONTEXT_LEN..=MAX_CONTEXT_LEN).contains(&ctx) {
            return Err(err(
                n.context_line.unwrap_or(n.line),
                "context_len",
                format!(
                    "{} tokens: outside what an engine runs with ({MIN_CONTEXT_LEN} to {} tokens)",
                    thousands(ctx),
                    thousands(MAX_CONTEXT_LEN)
                ),
            ));
        }
    }
    // sglang's maximum allowed length is min(context - 1, pool - 1) - 5: never above the
    // context less 6 (0.5.10 srt/managers/scheduler.py). One above it is not this context's
    // server (lines of two launches joined); it read as "no usable KV pool size".
    if let (Some(m), Some(ctx)) = (n.max_req_input_len, n.context_len) {
        if n.engine != Some(Engine::Vllm) && m.saturating_add(6) > ctx {
            return Err(err(
                n.max_req_input_line.unwrap_or(n.line),
                "max_req_input_len",
                format!(
                    "the maximum allowed length {} tokens is impossible with the context of {} tokens (line {}): sglang's \
                     is min(context - 1, pool - 1) - 5, at most {}; are these lines of two launches?",
                    thousands(m),
                    thousands(ctx),
                    n.context_line.unwrap_or(n.line),
                    thousands(ctx.saturating_sub(6))
                ),
            ));
        }
    }
    if let Some(pool) = n.pool_tokens {
        let ps = n.page_size.unwrap_or(1);
        if pool < MIN_POOL_TOKENS.max(ps) {
            return Err(err(
                n.line,
                "pool_tokens",
                match n.engine {
                    // vLLM: no KV cache, no engine (it said sglang's rule to a vLLM log).
                    Some(Engine::Vllm) => format!(
                        "{} tokens: too small to be a started vLLM server's KV cache (vLLM refuses to start without \
                         room for one request's KV; the audit takes pools of at least {} tokens)",
                        thousands(pool),
                        MIN_POOL_TOKENS.max(ps)
                    ),
                    _ => format!(
                        "{} tokens: smaller than any pool sglang starts with (at least {} tokens: sglang refuses to start when max_req_input_len = min(context - 1, pool - 1) - 5 is 0, and a pool holds at least one page)",
                        thousands(pool),
                        MIN_POOL_TOKENS.max(ps)
                    ),
                },
            ));
        }
        if pool / ps > MAX_POOL_PAGES {
            return Err(err(
                n.line,
                "pool_tokens",
                format!("{} tokens: more than {} pages of {ps} tokens", thousands(pool), thousands(MAX_POOL_PAGES)),
            ));
        }
    }
    Ok(())
}

/// Whether two ranks of one launch say the same (unknown values agree with anything).
fn agree(a: &NodeFacts, b: &NodeFacts) -> bool {
    fn same<T: PartialEq>(x: &Option<T>, y: &Option<T>) -> bool {
        match (x, y) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        }
    }
    same(&a.pool_tokens, &b.pool_tokens)
        && same(&a.context_len, &b.context_len)
        && same(&a.page_size, &b.page_size)
        && same(&a.engine, &b.engine)
        && (a.role == b.role || a.role == Role::Unknown || b.role == Role::Unknown)
}

/// Fills `a`'s unknown facts from `b`.
fn fill(a: &mut NodeFacts, b: &NodeFacts) {
    if a.pool_tokens.is_none() {
        a.pool_tokens = b.pool_tokens;
        a.line = b.line;
    }
    if a.context_len.is_none() {
        a.context_len = b.context_len;
        a.context_line = b.context_line;
    }
    if a.page_size.is_none() {
        a.page_size = b.page_size;
        a.page_size_line = b.page_size_line;
    }
    if a.role == Role::Unknown {
        a.role = b.role;
    }
    a.refused_start = a.refused_start.or(b.refused_start);
    a.engine = a.engine.or(b.engine);
    if a.version.is_none() {
        a.version.clone_from(&b.version);
    }
    for d in &b.derived {
        if !a.derived.contains(d) {
            a.derived.push(d.clone());
        }
    }
}

/// The nodes of one file's last launch: ranks merged when they agree.
fn merge_ranks(name: &str, facts: Vec<NodeFacts>, notes: &mut Vec<String>) -> Vec<(NodeFacts, Vec<String>)> {
    let all_agree = facts.iter().enumerate().all(|(i, x)| facts[i + 1..].iter().all(|y| agree(x, y)));
    if facts.len() > 1 && all_agree {
        let ranks: Vec<String> = facts.iter().filter_map(|f| f.rank.clone()).collect();
        let mut it = facts.into_iter();
        let mut first = it.next().expect("more than one");
        for f in it {
            fill(&mut first, &f);
        }
        notes.push(format!(
            "{name}: {} ranks ({}) agree on pool, context and page size: one node",
            ranks.len(),
            ranks.join(", ")
        ));
        first.rank = None;
        return vec![(first, ranks)];
    }
    if facts.len() > 1 {
        notes.push(format!(
            "{name}: the ranks disagree (pool, context, page size or role): each audited as its own node"
        ));
    }
    facts
        .into_iter()
        .map(|f| {
            let r = f.rank.clone().into_iter().collect();
            (f, r)
        })
        .collect()
}

/// A launch's role as the node lines say it ("either" for one whose log states none: it read
/// "unknown" in a note beside a node line saying "either (no role in the log)").
fn role_of(f: &NodeFacts) -> String {
    match f.role {
        Role::Unknown => "either role: none in the log".to_string(),
        r => r.to_string(),
    }
}

/// Facts that name a version and nothing about a server (a `check_env` or `pip show` dump).
fn version_only(f: &NodeFacts) -> bool {
    f.version.is_some()
        && f.role == Role::Unknown
        && f.pool_tokens.is_none()
        && f.context_len.is_none()
        && f.page_size.is_none()
        && f.gpu_blocks.is_none()
        && f.chunked_prefill_size.is_none()
        && f.max_prefill_tokens.is_none()
        && f.max_running_requests.is_none()
        && f.max_req_input_len.is_none()
        && f.refused_start.is_none()
        && f.rank.is_none()
}

/// The launches of one file to audit, in file order: the last launch, and before it the last
/// launch of each stated role the later ones do not have (a restart replaces the server that
/// launched before it; a launch of another role is another server).
fn chosen_launches(facts: &[NodeFacts]) -> Vec<u32> {
    let last = facts.iter().map(|f| f.launch).max().unwrap_or(0);
    let roles_of = |l: u32| -> std::collections::BTreeSet<Role> {
        facts.iter().filter(|f| f.launch == l && f.role != Role::Unknown).map(|f| f.role).collect()
    };
    let mut covered = roles_of(last);
    let mut chosen = vec![last];
    for l in (0..last).rev() {
        let roles = roles_of(l);
        if !covered.is_empty() && roles.iter().any(|r| !covered.contains(r)) {
            covered.extend(roles);
            chosen.push(l);
        }
    }
    chosen.reverse();
    chosen
}

/// Logs of both engines are not one deployment: sglang's and vLLM's KV transfers do not
/// interoperate, and one simulation applies one engine's lifecycle, context and admission to
/// every node (a vLLM node audited with an sglang node's context and warm-ups sized to it gave a
/// leak verdict no deployment can have). Refused before anything else is worked out of them,
/// whether the engines are in two files or joined in one, over every launch (the earlier engine's
/// launch in one file was dropped as a restart of the later one's: a leaking sglang prefill node
/// vanished behind a vLLM launch) and every line of a launch (`NodeFacts::other_engine`: one's
/// lines fell into the other's launch and lent it sglang's page size). The error names the first
/// start-up of the engine met second, and the first of the other. A version dump alone is no
/// server (an older version of the other engine beside the logs gets its own note).
fn one_engine(files: &[(String, Vec<NodeFacts>, Option<Role>)]) -> Result<(), AuditError> {
    let mut seen: Vec<(usize, usize, Engine, &str)> = Vec::new();
    for (i, (name, facts, _)) in files.iter().enumerate() {
        for f in facts.iter().filter(|f| !version_only(f)) {
            for (e, line) in f.engine.map(|e| (e, f.line)).into_iter().chain(f.other_engine) {
                seen.push((i, line, e, name));
            }
        }
    }
    seen.sort_by_key(|&(i, line, _, _)| (i, line));
    let Some(&(_, line0, first, file0)) = seen.first() else { return Ok(()) };
    let Some(&(_, line, other, file)) = seen.iter().find(|x| x.2 != first) else { return Ok(()) };
    Err(AuditError {
        file: file.to_string(),
        line,
        field: "engine",
        message: format!(
            "this log is {other}'s, while {file0} (line {line0}) is {first}'s: one prefill/decode deployment runs one engine \
             (their KV transfers do not interoperate), and the audit simulates one; audit each engine's logs on their own"
        ),
    })
}

/// Builds the audit from parsed logs. `role` (per file) overrides the role found in the log.
pub fn analyse(files: &[(String, Vec<NodeFacts>, Option<Role>)]) -> Result<Audit, AuditError> {
    let mut nodes: Vec<AuditNode> = Vec::new();
    let mut notes = Vec::new();
    let mut deployment_versions: Vec<NodeFacts> = Vec::new();
    one_engine(files)?;
    for (name, facts, role) in files {
        let chosen = chosen_launches(facts);
        let count = facts.iter().map(|f| f.launch).max().unwrap_or(0) + 1;
        // Launches are numbered in time order (`parse_log`); a file that holds them out of it
        // (two logs joined newest first) is said to, with the line the audited one starts at.
        let first_line = |l: u32| facts.iter().filter(|f| f.launch == l).map(|f| f.line).min().unwrap_or(0);
        let reordered = (1..count).any(|l| first_line(l) < first_line(l - 1));
        if count > 1 && chosen.len() == 1 && reordered {
            notes.push(format!(
                "{name}: {count} launches found, out of time order in the file (ordered by their timestamps); \
                 auditing the latest one (line {})",
                first_line(chosen[0])
            ));
        } else if count > 1 && chosen.len() == 1 {
            notes.push(format!("{name}: {count} launches found; auditing the last one"));
        } else if count > 1 {
            // Launches with different roles in one file are different servers (two logs joined,
            // or one log of a whole deployment), not restarts of one.
            let which: Vec<String> = chosen
                .iter()
                .map(|&l| {
                    let f = facts.iter().find(|f| f.launch == l).expect("a chosen launch has facts");
                    format!("{} (line {})", role_of(f), f.line)
                })
                .collect();
            notes.push(format!(
                "{name}: {count} launches found; auditing the last of each role (another role's launch is another server): {}",
                which.join(", ")
            ));
        }
        // A dropped launch is taken for a restart of the server that launched after it. Had it a
        // gap, say so: joined logs of two servers of one role cannot be told from a restart.
        // Once per launch and pool: the ranks of one launch that agree said it once each.
        let mut told = std::collections::BTreeSet::new();
        for f in facts.iter().filter(|f| !chosen.contains(&f.launch)) {
            if !told.insert((f.launch, f.pool_tokens, f.refused_start.is_some())) {
                continue;
            }
            // A launch that refused to start served nothing: no gap to tell of (it said "had a
            // GAP" of a launch that, audited alone, "refused to start").
            if let Some(line) = f.refused_start {
                notes.push(format!(
                    "{name} (line {}): an earlier launch ({}) refused to start with its pool (line {line}) and served nothing; not audited",
                    f.line,
                    role_of(f)
                ));
                continue;
            }
            let ctx = f.context_len.or_else(|| facts.iter().filter_map(|g| g.context_len).max());
            if let (Some(ctx), Some(pool)) = (ctx, f.pool_tokens) {
                if let Some((lo, hi)) = admission(f.engine.unwrap_or(Engine::Sglang), ctx, pool).band {
                    notes.push(format!(
                        "{name} (line {}): an earlier launch ({}, pool {} tokens) had a GAP ({} <= L < {}) and is not audited, as a restart of the later one; if it is another server, audit its log on its own",
                        f.line,
                        role_of(f),
                        thousands(pool),
                        thousands(lo),
                        thousands(hi)
                    ));
                }
            }
        }
        let mut picked = Vec::new();
        for &l in &chosen {
            let launch: Vec<NodeFacts> = facts.iter().filter(|f| f.launch == l).cloned().collect();
            for f in &launch {
                check_ranges(f)?;
            }
            picked.extend(merge_ranks(name, launch, &mut notes));
        }
        for (f, ranks) in picked {
            if version_only(&f) {
                // `python -m sglang.check_env` or `pip show sglang` output given as a log of its
                // own: the deployment's version, not a node.
                // Its note is written once the nodes are known: it says which nodes took it (a
                // vLLM version said "applied to every node whose log gives no version" beside
                // an sglang node line saying "version unknown").
                deployment_versions.push(f);
                continue;
            }
            let (role, role_source) = match (role, f.role) {
                (Some(r), stated) => {
                    if stated != Role::Unknown && stated != *r {
                        notes.push(format!(
                            "{name} (line {}): --role {r} replaces the role the log states ({stated})",
                            f.line
                        ));
                    }
                    (*r, RoleSource::Flag)
                }
                (None, Role::Unknown) => (Role::Unknown, RoleSource::Either),
                (None, r) => (r, RoleSource::Log),
            };
            if nodes.len() == MAX_NODES {
                return Err(AuditError {
                    file: f.source.clone(),
                    line: f.line,
                    field: "rank",
                    message: format!("more than {MAX_NODES} nodes in the logs (ranks that disagree count one each)"),
                });
            }
            nodes.push(AuditNode { facts: f, ranks, role, role_source, admission: None });
        }
    }
    // The oldest of the deployment-wide versions, for every node of its engine that has none.
    let oldest = |engine: Engine| {
        deployment_versions
            .iter()
            .filter(|f| f.engine.unwrap_or(Engine::Sglang) == engine)
            .filter_map(|f| Some((release(f.version.as_deref()?)?, f.version.clone()?)))
            .min()
            .map(|(_, v)| v)
    };
    for f in &deployment_versions {
        let engine = f.engine.unwrap_or(Engine::Sglang);
        let v = f.version.as_deref().unwrap_or_default();
        let bare = |e: Engine| nodes.iter().filter(|n| n.facts.version.is_none() && n.engine() == e).count();
        let took = if oldest(engine).as_deref() == Some(v) { bare(engine) } else { 0 };
        let what = match took {
            0 if bare(engine) > 0 => format!("not applied: an older {engine} version given beside it is"),
            0 if nodes.iter().all(|n| n.engine() != engine) => {
                let without: Vec<&AuditNode> = nodes.iter().filter(|n| n.facts.version.is_none()).collect();
                match without.first() {
                    None => format!("not applied: no node is {engine}'s"),
                    Some(n) => format!(
                        "not applied: no node is {engine}'s (the {} node(s) whose log gives no version are {}'s)",
                        without.len(),
                        n.engine()
                    ),
                }
            }
            0 => {
                // Named, so a conflict shows (a version file of 0.5.16 beside a log whose lines
                // imply a later build decides between a leaking and a fixed profile).
                let mut theirs: Vec<&str> =
                    nodes.iter().filter(|n| n.engine() == engine).filter_map(|n| n.facts.version.as_deref()).collect();
                theirs.sort();
                theirs.dedup();
                let differ = if theirs.iter().any(|t| *t != v) {
                    ", which differs: check which is the deployment's"
                } else {
                    ""
                };
                format!(
                    "not applied: every {engine} node's log gives or implies its own ({}){differ}",
                    theirs.join(", ")
                )
            }
            k => format!("applied to the {k} {engine} node(s) whose log gives no version"),
        };
        notes.push(format!("{}: a {engine} version ({v}) and no server facts: {what}", f.source));
    }
    for n in &mut nodes {
        if n.facts.version.is_none() {
            n.facts.version = oldest(n.engine());
        }
    }
    if nodes.is_empty() {
        let (file, line) = deployment_versions.first().map_or((String::new(), 1), |f| (f.source.clone(), f.line));
        return Err(AuditError {
            file,
            line,
            field: "version",
            message: "only a version in the logs, no server's start-up facts: give the servers' logs too".into(),
        });
    }
    let context_len = nodes.iter().filter_map(|n| n.facts.context_len).max();
    let contexts: std::collections::BTreeSet<u64> = nodes.iter().filter_map(|n| n.facts.context_len).collect();
    if contexts.len() > 1 {
        notes.push(format!(
            "the logs give different context lengths ({}); a node whose log gives none uses the largest",
            contexts.iter().map(|c| thousands(*c)).collect::<Vec<_>>().join(", ")
        ));
    }
    let sizes: Vec<u64> = nodes.iter().filter_map(|n| n.facts.page_size).collect();
    let page_size_known = !sizes.is_empty();
    let all_vllm = !nodes.is_empty() && nodes.iter().all(|n| n.facts.engine == Some(Engine::Vllm));
    let distinct_sizes: std::collections::BTreeSet<u64> = sizes.iter().copied().collect();
    if distinct_sizes.len() > 1 {
        notes.push(format!(
            "the logs give different page sizes ({}); the generated scenario uses the largest for every node",
            distinct_sizes.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    let page_size = match sizes.iter().copied().max() {
        Some(ps) => ps,
        None if all_vllm => {
            notes.push("block size not found in any log; using 16 (vLLM's default)".into());
            16
        }
        None => {
            notes.push("page size not found in any log; using 1 (sglang's default)".into());
            1
        }
    };
    // A node whose log gives no context length or page size is audited with the other logs'
    // (the logs are taken as one deployment's): said, naming where they come from (the node read
    // "page size unknown" beside a note rounding its pool to another log's 64-token pages).
    let from = |has: &dyn Fn(&NodeFacts) -> bool| {
        let mut files: Vec<&str> = nodes.iter().filter(|n| has(&n.facts)).map(|n| n.facts.source.as_str()).collect();
        files.dedup();
        files.join(", ")
    };
    let (ctx_from, ps_from) = (from(&|f| f.context_len.is_some()), from(&|f| f.page_size.is_some()));
    for n in &nodes {
        let f = &n.facts;
        if let (None, Some(c)) = (f.context_len, context_len) {
            notes.push(format!(
                "{} (line {}): its log gives no context length: audited with {} from {ctx_from} (the logs are taken as one deployment's)",
                f.source,
                f.line,
                thousands(c)
            ));
        }
        if f.page_size.is_none() && page_size_known {
            notes.push(format!(
                "{} (line {}): its log gives no page size: audited with {page_size} from {ps_from} (the logs are taken as one deployment's)",
                f.source, f.line
            ));
        }
    }
    for n in &mut nodes {
        // vLLM's `# GPU blocks: N` with no block size in any log: the pool is N × the block size
        // just assumed (vLLM's default 16), said as an assumption (it read "no usable KV pool size"
        // right after the note that 16 was used).
        if let (None, Some(blocks), None, Engine::Vllm) =
            (n.facts.pool_tokens, n.facts.gpu_blocks.filter(|&b| b > 0), n.facts.page_size, n.engine())
        {
            if let Some(tokens) = blocks.checked_mul(page_size) {
                n.facts.pool_tokens = Some(tokens);
                n.facts.derived.push(format!(
                    "ASSUMED: pool = {blocks} GPU blocks × block size {page_size} = {tokens} tokens (no log gives the block size; vLLM's default)"
                ));
            }
        }
        // The engines align the pool to whole pages at start-up (sglang 0.5.10
        // srt/model_executor/model_runner_kv_cache_mixin.py: `capacity // page_size * page_size`,
        // `--max-total-tokens` included; vLLM counts whole blocks). A logged pool is aligned
        // already; a pool taken from the launch flag may not be.
        // By the node's own page size where its log gives one (the deployment's otherwise).
        let ps = n.facts.page_size.unwrap_or(page_size);
        if let Some(pool) = n.facts.pool_tokens.filter(|&p| p >= ps && p % ps != 0) {
            let aligned = pool / ps * ps;
            notes.push(format!(
                "{} (line {}): pool {} tokens is not a whole number of {ps}-token pages: audited as {} (the engine rounds it down at start-up)",
                n.facts.source,
                n.facts.line,
                thousands(pool),
                thousands(aligned)
            ));
            n.facts.pool_tokens = Some(aligned);
        }
        let ctx = n.facts.context_len.or(context_len);
        if let (Some(ctx), Some(pool)) = (ctx, n.facts.pool_tokens) {
            let mut adm = admission(n.engine(), ctx, pool);
            if let Some(line) = n.facts.refused_start {
                // The engine refused to start with this pool: nothing was served with it.
                adm.band = None;
                adm.rule = format!(
                    "{}; the engine REFUSED TO START with this pool (line {line}): no request was served",
                    adm.rule
                );
            }
            n.admission = Some(adm);
        }
    }
    // An sglang decode node preallocates a prompt with its reserved decode tokens; one that
    // passes decode's door check (`input_len > capacity` only, 0.5.22 disaggregation/decode.py)
    // but not the preallocation waits at the head of its queue forever (prealloc-never-fits).
    for n in nodes.iter().filter(|n| n.role == Role::Decode && n.engine() == Engine::Sglang) {
        let (Some(pool), Some(adm)) = (n.facts.pool_tokens, n.admission.as_ref()) else { continue };
        let ps = n.facts.page_size.unwrap_or(page_size).max(1);
        let fits = pool.saturating_sub(RESERVED_DECODE_TOKENS) / ps * ps;
        let longest = adm.max_accepted.min(pool);
        if fits < longest {
            notes.push(format!(
                "{} (line {}): decode prompts of {} to {} tokens pass its admission but never fit its preallocation (the pool less sglang's {RESERVED_DECODE_TOKENS} reserved decode tokens, whole {ps}-token pages): decode waits for them forever, and for every request queued behind (the prealloc-never-fits row)",
                n.facts.source,
                n.facts.line,
                thousands(fits + 1),
                thousands(longest)
            ));
        }
    }
    if let Some(ctx) = context_len {
        let sglang_no_band = nodes
            .iter()
            .any(|n| n.engine() == Engine::Sglang && n.admission.as_ref().is_some_and(|a| a.band.is_none()));
        if sglang_no_band {
            notes.push(format!(
                "sglang's scheduler also rejects {} <= L < {} (max_req_len - 5) on every node whatever its pool; the tokenizer admits them unless it reserves tokens for the output",
                thousands(ctx.saturating_sub(6)),
                thousands(ctx)
            ));
        }
    }
    Ok(Audit { nodes, context_len, page_size, page_size_known, notes })
}

/// What the `vllm-nixl` profile does with a vLLM node's band, said when a verdict simulates one
/// under it (`Audit::vllm_band`).
pub const VLLM_BAND_NOTE: &str = "the simulator's vllm-nixl profile applies the scheduler's pool rule at prefill admission, so it refuses these prompts (400) where vLLM itself keeps them waiting: the verdict says whether the gap leaks, not how long a request waits";

fn unknown<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |x| x.to_string())
}

fn num(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".to_string(), thousands)
}

/// The per-node table.
pub fn node_table(a: &Audit) -> String {
    let mut s = String::new();
    for n in &a.nodes {
        let f = &n.facts;
        let rank = match n.ranks.len() {
            0 => String::new(),
            1 => format!(" {}", n.ranks[0]),
            k => format!(" ({k} ranks)"),
        };
        let role = match n.role_source {
            RoleSource::Either if n.facts.derived.iter().any(|d| d == parse::STANDALONE_NOTE) => {
                "either (standalone in the log)".to_string()
            }
            RoleSource::Either => "either (no role in the log)".to_string(),
            RoleSource::Flag => format!("{} (--role)", n.role),
            RoleSource::Log => n.role.to_string(),
        };
        let _ = writeln!(
            s,
            "{}{rank} (line {}): {} {} · role {role} · pool {} tokens · context {} · page size {}",
            f.source,
            f.line,
            unknown(f.engine),
            f.version.clone().unwrap_or_else(|| "version unknown".into()),
            num(f.pool_tokens),
            match (f.context_len, a.context_len) {
                (None, Some(c)) => format!("{} (another log's)", thousands(c)),
                (c, _) => num(c),
            },
            match f.page_size {
                None if a.page_size_known => format!("{} (another log's)", a.page_size),
                ps => num(ps),
            },
        );
        for d in &f.derived {
            let _ = writeln!(s, "    {d}");
        }
        match &n.admission {
            None => {
                let _ = writeln!(s, "    cannot compute the admission limit: pool or context unknown");
            }
            Some(adm) => {
                let _ = writeln!(s, "    rule: {}", adm.rule);
                match adm.band {
                    None if f.refused_start.is_some() => {
                        let _ = writeln!(
                            s,
                            "    no gap served: the pool is smaller than one request of the context, and the engine refused to start"
                        );
                    }
                    None if adm.max_accepted == 0 => {
                        // A node that accepts no prompt at all said "no gap" and nothing more.
                        let _ = writeln!(
                            s,
                            "    largest prompt accepted 0 tokens: this node serves no prompt at all (its scheduler rejects every one, 400, before any KV moves); no gap: the pool holds the whole context"
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "    largest prompt accepted {} tokens; no gap: the pool holds any prompt the context admits",
                            thousands(adm.max_accepted)
                        );
                    }
                    Some((lo, hi)) => {
                        let _ = writeln!(
                            s,
                            "    largest prompt accepted {} tokens; GAP: prompts {} <= L < {} {}",
                            thousands(adm.max_accepted),
                            thousands(lo),
                            thousands(hi),
                            adm.band_means
                        );
                    }
                }
            }
        }
    }
    s
}

/// Rounds a pool down to a whole number of pages, as the engines do at start-up.
fn round(pool: u64, ps: u64) -> u64 {
    (pool / ps).max(1) * ps
}

#[derive(Serialize)]
struct GenGroup {
    pool_tokens: u64,
    /// The node's logged `max_running_requests`; the scenario's default when the log has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_running_requests: Option<u64>,
}

#[derive(Serialize)]
struct GenKnobs {
    page_size: u64,
}

#[derive(Serialize)]
struct GenRequest {
    at_ms: u64,
    tenant: u32,
    prompt_tokens: u64,
    output_tokens: u64,
}

/// The generated scenario, serialised with the `toml` crate (field names are the scenario's keys).
#[derive(Serialize)]
struct GenScenario {
    name: String,
    description: String,
    seed: u64,
    profile: String,
    context_len: u64,
    liveness_bound_s: u64,
    prefill: Vec<GenGroup>,
    decode: Vec<GenGroup>,
    knobs: GenKnobs,
    request: Vec<GenRequest>,
}

/// The generated scenario and the assumptions it made.
pub struct Generated {
    pub toml: String,
    pub assumptions: Vec<String>,
    /// How many arrangements of the decode nodes the probes need (`scenarios`).
    pub arrangements: usize,
}

/// A scenario reproducing the measured deployment: warm-up traffic from tenant 0 fills decode's
/// pool with KV, then tenant 1 sends probes at both edges of each node's band. Nodes with no role
/// take the prefill side; a missing side is the worst partner the context admits. Returns `None`
/// when the context or every pool is unknown. The scenario names `profile` (the audit's
/// `--profile`, or `Audit::default_profile`), so that running it alone simulates the same engine.
pub fn scenario(a: &Audit, sources: &str, profile: &str) -> Option<Generated> {
    scenario_arranged(a, sources, profile, 0)
}

/// Every arrangement of the generated scenario that the probes need: round robin pairs request
/// `k` with prefill `k mod P` and decode `k mod D`, which reaches pair (i, j) only when
/// i ≡ j (mod gcd(P, D)). With the decode nodes rotated by 0..gcd the arrangements reach every
/// pair between them, so a prefill node with a gap meets every decode node (a gap that leaks only
/// with a large decode pool was missed, or not, by the order the logs were given in). One
/// arrangement when gcd(P, D) = 1.
pub fn scenarios(a: &Audit, sources: &str, profile: &str) -> Option<Vec<Generated>> {
    let first = scenario_arranged(a, sources, profile, 0)?;
    let n = first.arrangements;
    let mut out = vec![first];
    for r in 1..n {
        out.push(scenario_arranged(a, sources, profile, r)?);
    }
    Some(out)
}

/// Output tokens of a warm-up request.
const WARM_OUTPUT: u64 = 16;

/// Tokens of a decode pool a request of `prompt` and `output` tokens needs at once: its
/// preallocation (prompt and lookahead, whole pages; `World::prealloc_pages`), the reserved
/// decode tokens decode keeps free beside it (`decode_admit`), and its output with a page of
/// slack.
pub fn decode_footprint(cfg: &crate::config::SimConfig, prompt: u64, output: u64) -> u64 {
    let ps = cfg.knobs.page_size.max(1);
    prompt
        .saturating_add(cfg.knobs.decode_lookahead_tokens)
        .div_ceil(ps)
        .saturating_mul(ps)
        .saturating_add(cfg.knobs.reserved_decode_tokens)
        .saturating_add(output)
        .saturating_add(ps)
}

/// The longest prompt whose `decode_footprint` fits a decode pool of `pool` tokens (0 if none).
pub fn largest_fitting(cfg: &crate::config::SimConfig, output: u64, pool: u64) -> u64 {
    let ps = cfg.knobs.page_size.max(1);
    let room = pool.saturating_sub(cfg.knobs.reserved_decode_tokens.saturating_add(output).saturating_add(ps));
    (room / ps * ps).saturating_sub(cfg.knobs.decode_lookahead_tokens)
}

/// The configuration a generated scenario resolves to (its profile's knobs, default costs).
fn resolved(gen: &GenScenario) -> Option<crate::config::SimConfig> {
    let text = toml::to_string(gen).ok()?;
    let sc = crate::scenario::Scenario::parse("audit", &text).ok()?;
    sc.resolve(&crate::scenario::Overrides { profile: Some(gen.profile.clone()), ..Default::default() }).ok()
}

/// How long one request of `tokens` prompt and `output` tokens takes on idle nodes of `cfg`, in
/// ms rounded up: its prefill (`prefill::solo_prefill_ns`), its KV's transfer, its decode steps
/// and the messages between.
fn solo_ms(cfg: &crate::config::SimConfig, tokens: u64, output: u64) -> u64 {
    let c = &cfg.cost;
    let prefill = crate::prefill::solo_prefill_ns(c, cfg.knobs.chunked_prefill_size, tokens);
    let wire =
        u128::from(tokens) * u128::from(c.kv_bytes_per_token) * 1000 / u128::from(c.transfer_bytes_per_us.max(1));
    let transfer = u64::try_from(wire).unwrap_or(u64::MAX).saturating_add(c.transfer_latency_us.saturating_mul(1000));
    let step =
        c.decode_step_base_us.saturating_mul(1000).saturating_add((tokens / 1000).saturating_mul(c.decode_ns_per_kkv));
    let messages = c.message_latency_us.saturating_mul(1000).saturating_mul(8);
    prefill
        .saturating_add(transfer)
        .saturating_add(step.saturating_mul(output))
        .saturating_add(messages)
        .div_ceil(1_000_000)
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `scenario` with the decode nodes rotated left by `rotate`.
fn scenario_arranged(a: &Audit, sources: &str, profile: &str, rotate: usize) -> Option<Generated> {
    let ctx = a.context_len?;
    let ps = a.page_size;
    let mut assumptions = Vec::new();
    // Each measured node: its pool and its logged `max_running_requests` (sglang's cap on the
    // requests it runs at once; the scenario's default, 256, when the log does not say).
    let node = |n: &AuditNode| Some((n.facts.pool_tokens?, n.facts.max_running_requests));
    let mut prefill: Vec<(u64, Option<u64>)> =
        a.nodes.iter().filter(|n| n.prefill_capable()).filter_map(node).collect();
    let mut decode: Vec<(u64, Option<u64>)> =
        a.nodes.iter().filter(|n| n.role == Role::Decode).filter_map(node).collect();
    if prefill.is_empty() && decode.is_empty() {
        return None;
    }
    let either = a.nodes.iter().filter(|n| n.role_source == RoleSource::Either).count();
    if either > 0 {
        assumptions.push(format!(
            "{either} node(s) with no role in the log: audited as either role, placed on the prefill side, where a pool gap can leak (as a decode node the same band applies at its door)"
        ));
    }
    if prefill.is_empty() {
        let pool = ctx.div_ceil(ps) * ps;
        assumptions.push(format!(
            "no prefill-capable node measured: ASSUMED a prefill partner whose pool holds the whole context ({} tokens)",
            thousands(pool)
        ));
        prefill.push((pool, None));
    }
    if decode.is_empty() {
        // vLLM reserves no decode tokens beside the prompt (its profile's `reserved_decode_tokens`
        // is 0); sglang 512.
        let reserved = if a.all_vllm() { 0 } else { RESERVED_DECODE_TOKENS };
        let pool = (ctx + reserved).div_ceil(ps) * ps;
        assumptions.push(format!(
            "no decode node measured: ASSUMED the worst partner the context admits, a decode node whose pool holds the whole context{} ({} tokens)",
            if reserved > 0 { format!(" plus sglang's {reserved} reserved decode tokens") } else { String::new() },
            thousands(pool)
        ));
        decode.push((pool, None));
    }
    let cap = u64::from(crate::scenario::MAX_SLOTS_PER_NODE);
    if let Some(big) = prefill.iter().chain(&decode).filter_map(|&(_, r)| r).filter(|&r| r > cap).max() {
        assumptions.push(format!(
            "max_running_requests={} simulated as {} (the most a scenario runs at once on a node)",
            thousands(big),
            thousands(cap)
        ));
    }
    let group = |(pool, running): (u64, Option<u64>)| GenGroup {
        pool_tokens: round(pool, ps),
        max_running_requests: running.map(|r| r.clamp(1, cap)),
    };
    let prefill: Vec<GenGroup> = prefill.into_iter().map(group).collect();
    let mut decode: Vec<GenGroup> = decode.into_iter().map(group).collect();
    let arrangements = gcd(prefill.len(), decode.len());
    let nd = decode.len();
    decode.rotate_left(rotate % nd);
    // Most requests any decode node runs at once (its logged cap; the scenario's default else).
    let default_running = u64::from(crate::scenario::DEFAULT_MAX_RUNNING_REQUESTS);
    let decode_running =
        decode.iter().map(|g| g.max_running_requests.unwrap_or(default_running)).min().unwrap_or(default_running);
    let prefill_pools: Vec<u64> = prefill.iter().map(|g| g.pool_tokens).collect();
    let decode_pools: Vec<u64> = decode.iter().map(|g| g.pool_tokens).collect();
    // Warm-up: enough accepted prompts to cover every decode pool once more than its size.
    let accepted =
        a.nodes.iter().filter_map(|n| n.admission.as_ref().map(|x| x.max_accepted)).min().unwrap_or(1).max(1);
    // The warm-up must be served by the simulation, whose admission applies sglang's pool rule
    // on every profile (vllm-nixl included): a vLLM pool's largest accepted prompt would be
    // refused there, and the pools would stay cold.
    let simulated = a
        .nodes
        .iter()
        .filter_map(|n| Some(crate::intake::max_req_input_len(ctx, n.facts.pool_tokens?).saturating_sub(1)))
        .min()
        .unwrap_or(accepted);
    // (Never above `accepted`: sglang's rule is the nodes' own, and vLLM admits more.)
    let mut warm = simulated.min(ctx / 2).max(1);
    let mut gen = GenScenario {
        name: "audit".into(),
        description: String::new(),
        seed: 1,
        profile: profile.to_string(),
        context_len: ctx,
        liveness_bound_s: 3600,
        prefill,
        decode,
        knobs: GenKnobs { page_size: ps },
        request: vec![GenRequest { at_ms: 0, tenant: 0, prompt_tokens: warm, output_tokens: 16 }],
    };
    // The cost model and knobs the scenario will run with (its profile's, default costs), to
    // space the traffic so that no request waits behind another: a warm-up queued behind the
    // previous one would reach decode's waiting timeout, and the probes behind them would time
    // out in the queue without reaching the admission check they probe (a 3M-token warm-up takes
    // minutes to prefill; a fixed 30 µs a token underestimated it by half).
    let cfg = resolved(&gen)?;
    // A warm-up must also fit every decode node's preallocation (its prompt, reserved decode
    // tokens and output, in whole pages), or it waits there forever and warms nothing.
    let smallest_decode = decode_pools.iter().copied().min().unwrap_or(0);
    let fit = largest_fitting(&cfg, WARM_OUTPUT, smallest_decode);
    if fit < warm {
        assumptions.push(format!(
            "warm-up prompts of {} tokens, not {}: decode's smallest pool ({} tokens) must hold a warm-up with its reserved decode tokens and output",
            thousands(fit.max(1)),
            thousands(warm),
            thousands(smallest_decode)
        ));
        warm = fit.max(1);
    }
    let timeout_ms = cfg.knobs.waiting_timeout_ms.min(cfg.knobs.bootstrap_timeout_ms);
    if solo_ms(&cfg, warm, WARM_OUTPUT) > timeout_ms / 2 {
        // Even alone the largest accepted prompt would not finish in half the timeout: warm with
        // the largest that does (more of them, up to the cap).
        let (mut lo, mut hi) = (1, warm);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if solo_ms(&cfg, mid, WARM_OUTPUT) <= timeout_ms / 2 {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        assumptions.push(format!(
            "warm-up prompts of {} tokens, not the largest accepted ({}): a longer one takes more than half of the {} s timeout to prefill and transfer under the default cost model",
            thousands(lo),
            thousands(warm),
            timeout_ms / 1000
        ));
        warm = lo;
    }
    // The router goes round robin over each role (the scenario's default): every decode node
    // gets one request in `decode_pools.len()`, so each gets enough to cover the largest pool.
    let largest_decode = decode_pools.iter().copied().max().unwrap_or(0);
    let count =
        (decode_pools.len() as u64 * (largest_decode.div_ceil(warm) + 1)).max(prefill_pools.len() as u64 * 2).min(400);
    // One at a time on each prefill node, and on each decode node no more than its pool holds
    // (nor its `max_running_requests` allows) at once (decode preallocates when the request arrives and holds it to the end): the
    // next round-robin turn of a node comes `np` (`nd`) requests later.
    let np = prefill_pools.len() as u64;
    let nd = decode_pools.len() as u64;
    let at_once = (smallest_decode / decode_footprint(&cfg, warm, WARM_OUTPUT).max(1)).clamp(1, decode_running.max(1));
    let spacing_ms = (solo_ms(&cfg, warm, WARM_OUTPUT) + 2_000).div_ceil(np.min(nd.saturating_mul(at_once)).max(1));
    let mut request = Vec::new();
    let mut at = 0;
    for _ in 0..count {
        request.push(GenRequest { at_ms: at, tenant: 0, prompt_tokens: warm, output_tokens: WARM_OUTPUT });
        at += spacing_ms;
    }
    // The last warm-up finishes before the first probe.
    at += solo_ms(&cfg, warm, WARM_OUTPUT);
    let mut probes = std::collections::BTreeSet::new();
    for n in &a.nodes {
        if let Some((lo, hi)) = n.admission.as_ref().and_then(|x| x.band) {
            probes.insert(lo);
            probes.insert(hi - 1);
        }
    }
    if probes.is_empty() {
        probes.insert(accepted);
    }
    // Copies of each probe: round robin pairs request i with prefill i mod P and decode i mod D,
    // so lcm(P, D) consecutive probes reach every node of both roles (the band of a decode
    // node's gap is probed on that node, not only on whichever node the first copy meets).
    let (np, nd) = (prefill_pools.len(), decode_pools.len());
    let copies = (np / gcd(np, nd) * nd).min(MAX_PROBE_COPIES);
    // A probe another node admits is served in full: the next one waits for it.
    let admitted_somewhere = |p: u64| prefill_pools.iter().any(|&pool| crate::intake::max_req_input_len(ctx, pool) > p);
    for p in probes {
        let gap = if admitted_somewhere(p) { solo_ms(&cfg, p, 8) + 1_000 } else { 1_000 };
        for _ in 0..copies {
            request.push(GenRequest { at_ms: at, tenant: 1, prompt_tokens: p, output_tokens: 8 });
            at += gap;
        }
    }
    let mut description = format!(
        "Generated by kvsim audit from {sources}. Pools as measured; tenant 0 warms the decode pools, tenant 1 probes both edges of each band."
    );
    for s in &assumptions {
        description.push(' ');
        description.push_str(s);
        description.push('.');
    }
    gen.description = description;
    gen.request = request;
    let toml = toml::to_string(&gen).expect("the generated scenario serialises");
    Some(Generated { toml, assumptions, arrangements })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_names_its_release_and_a_pre_release_the_one_before() {
        assert_eq!(release("0.5.23"), Some((0, 5, 23)));
        assert_eq!(release("v0.5.10.post1"), Some((0, 5, 10)));
        assert_eq!(release("0.5.21rc1"), Some((0, 5, 20)));
        assert_eq!(release("0.5.21.dev3+g1a2b"), Some((0, 5, 20)));
        assert_eq!(release("0.19.1rc1.dev301+g60995c05b"), Some((0, 19, 0)));
        assert_eq!(release(">=0.5.23"), Some((0, 5, 23)));
        assert_eq!(release("0.5"), None);
        assert_eq!(release("unknown"), None);
    }

    /// The profile follows the sglang build the logs name (worst case when they name none).
    #[test]
    fn the_default_profile_follows_the_logged_sglang_build() {
        let summary = "[2026-03-02 10:11:12] max_total_num_tokens=681280, chunked_prefill_size=8192, \
            max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, available_gpu_mem=11.84 GB\n";
        let profile = |version: Option<&str>| {
            let log = match version {
                Some(v) => format!("sglang version: {v}\n{summary}"),
                None => summary.to_string(),
            };
            let facts = parse::parse_log("s.log", &log).unwrap();
            let a = analyse(&[("s.log".into(), facts, None)]).unwrap();
            assert!(a.has_gap());
            a.default_profile()
        };
        assert_eq!(profile(Some("0.5.23")).0, "sglang-0.5.22");
        assert_eq!(profile(Some("0.5.21")).0, "sglang-0.5.22");
        assert!(profile(Some("0.5.21")).1.contains("sglang 0.5.21 retires"), "{:?}", profile(Some("0.5.21")));
        assert_eq!(profile(Some("0.5.21rc2")).0, "sglang-0.5.16");
        assert_eq!(profile(Some("0.5.20")).0, "sglang-0.5.16");
        assert_eq!(profile(Some("0.5.10.post1")).0, "sglang-0.5.16");
        let (p, why) = profile(None);
        assert_eq!(p, "sglang-0.5.16");
        assert!(why.starts_with("ASSUMED"), "{why}");
    }

    fn node(source: &str, pool: Option<u64>, ctx: Option<u64>) -> NodeFacts {
        let mut f =
            parse::parse_log(source, "[2026-03-02 10:00:00] KV Cache is allocated. #tokens: 1000, K size: 0.01 GB")
                .expect("parses")
                .remove(0);
        f.pool_tokens = pool;
        f.context_len = ctx;
        f
    }

    #[test]
    fn out_of_range_values_name_the_log_line_and_field() {
        let log = "[2026-03-02 10:11:11] Load weight end.\n\
            [2026-03-02 10:11:12] max_total_num_tokens=3, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=4096\n";
        let facts = parse::parse_log("tiny.log", log).unwrap();
        let err = analyse(&[("tiny.log".into(), facts, None)]).unwrap_err();
        assert_eq!((err.file.as_str(), err.line, err.field), ("tiny.log", 2, "pool_tokens"), "{err}");
        assert!(err.to_string().starts_with("tiny.log:2: `pool_tokens`: 3 tokens"), "{err}");

        let log = "[2026-03-02 10:11:10] server_args=ServerArgs(context_length=18446744073709551615, page_size=1)\n\
            [2026-03-02 10:11:12] KV Cache is allocated. #tokens: 681280, K size: 1.00 GB\n";
        let facts = parse::parse_log("huge.log", log).unwrap();
        let err = analyse(&[("huge.log".into(), facts, None)]).unwrap_err();
        assert_eq!((err.line, err.field), (1, "context_len"), "{err}");

        let log = "[2026-03-02 10:11:10] server_args=ServerArgs(context_length=4096, page_size=0)\n\
            [2026-03-02 10:11:12] KV Cache is allocated. #tokens: 681280, K size: 1.00 GB\n";
        let err = analyse(&[("ps.log".into(), parse::parse_log("ps.log", log).unwrap(), None)]).unwrap_err();
        assert_eq!((err.line, err.field), (1, "page_size"), "{err}");

        let log = "[2026-03-02 10:11:10] server_args=ServerArgs(context_length=4096, page_size=1)\n\
            [2026-03-02 10:11:12] KV Cache is allocated. #tokens: 9999999999999, K size: 1.00 GB\n";
        let err = analyse(&[("big.log".into(), parse::parse_log("big.log", log).unwrap(), None)]).unwrap_err();
        assert_eq!((err.line, err.field), (2, "pool_tokens"), "{err}");
    }

    #[test]
    fn every_value_in_range_gives_a_scenario_the_scenario_parser_accepts() {
        // The edges of the limits: the generated scenario must parse and resolve.
        for (pool, ctx, ps) in [
            (MIN_POOL_TOKENS, MAX_CONTEXT_LEN, 1),
            (MAX_POOL_PAGES, MAX_CONTEXT_LEN, 1),
            (MIN_POOL_TOKENS.max(64), MIN_CONTEXT_LEN, 64),
            (MAX_PAGE_SIZE * 3, MAX_CONTEXT_LEN, MAX_PAGE_SIZE),
        ] {
            let mut f = node("edge.log", Some(pool), Some(ctx));
            f.page_size = Some(ps);
            let a = analyse(&[("edge.log".into(), vec![f], None)]).unwrap();
            let g = scenario(&a, "edge.log", a.default_profile().0).unwrap();
            let sc =
                crate::scenario::Scenario::parse("gen.toml", &g.toml).unwrap_or_else(|e| panic!("{e}\n{}", g.toml));
            sc.resolve(&crate::scenario::Overrides::default()).unwrap_or_else(|e| panic!("{pool} {ctx} {ps}: {e}"));
        }
    }

    #[test]
    fn strange_file_names_cannot_break_the_generated_toml() {
        let f = node("we\"ird\nname ' = [x].log", Some(1000), Some(4096));
        let a = analyse(&[("we\"ird\nname ' = [x].log".into(), vec![f], None)]).unwrap();
        let g = scenario(&a, "we\"ird\nname ' = [x].log", "sglang-0.5.16").unwrap();
        let sc = crate::scenario::Scenario::parse("gen.toml", &g.toml).unwrap();
        assert!(sc.spec.description.unwrap().contains("we\"ird\nname ' = [x].log"));
    }

    #[test]
    fn a_node_without_a_role_is_either_and_gets_the_worst_decode_partner() {
        let f = node("one.log", Some(1000), Some(4096));
        let a = analyse(&[("one.log".into(), vec![f], None)]).unwrap();
        assert_eq!(a.nodes[0].role_source, RoleSource::Either);
        assert!(a.has_gap());
        let g = scenario(&a, "one.log", "sglang-0.5.22").unwrap();
        let sc = crate::scenario::Scenario::parse("gen.toml", &g.toml).unwrap();
        // The scenario names the profile it was generated for: run alone, it simulates that engine.
        assert_eq!(sc.spec.profile.as_deref(), Some("sglang-0.5.22"));
        assert_eq!(sc.spec.prefill[0].pool_tokens, 1000);
        assert_eq!(sc.spec.decode[0].pool_tokens, 4096 + RESERVED_DECODE_TOKENS);
        assert!(g.assumptions.iter().any(|s| s.contains("ASSUMED the worst partner")), "{:?}", g.assumptions);
        // Told it is a decode node: the prefill side is the assumed partner instead.
        let f = node("one.log", Some(1000), Some(4096));
        let a = analyse(&[("one.log".into(), vec![f], Some(Role::Decode))]).unwrap();
        let g = scenario(&a, "one.log", "sglang-0.5.16").unwrap();
        let sc = crate::scenario::Scenario::parse("gen.toml", &g.toml).unwrap();
        assert_eq!((sc.spec.prefill[0].pool_tokens, sc.spec.decode[0].pool_tokens), (4096, 1000));
    }

    #[test]
    fn ranks_that_agree_are_one_node_and_ranks_that_disagree_are_not() {
        let mut a0 = node("r.log", Some(1000), Some(4096));
        a0.rank = Some("DP0 TP0".into());
        let mut a1 = node("r.log", Some(1000), None);
        a1.rank = Some("DP1 TP1".into());
        let a = analyse(&[("r.log".into(), vec![a0.clone(), a1.clone()], None)]).unwrap();
        assert_eq!(a.nodes.len(), 1);
        assert_eq!(a.nodes[0].ranks, vec!["DP0 TP0".to_string(), "DP1 TP1".to_string()]);
        a1.pool_tokens = Some(990);
        let a = analyse(&[("r.log".into(), vec![a0, a1], None)]).unwrap();
        assert_eq!(a.nodes.len(), 2);
        assert!(a.notes.iter().any(|n| n.contains("disagree")), "{:?}", a.notes);
    }

    #[test]
    fn node_count_is_bounded() {
        let many: Vec<NodeFacts> = (0..=MAX_NODES as u64)
            .map(|i| {
                let mut f = node("many.log", Some(1000 + i), Some(4096));
                f.rank = Some(format!("DP{i}"));
                f
            })
            .collect();
        let err = analyse(&[("many.log".into(), many[..MAX_NODES].to_vec(), None)]).map(|a| a.nodes.len());
        assert_eq!(err, Ok(MAX_NODES));
        let err = analyse(&[("many.log".into(), many, None)]).unwrap_err();
        assert_eq!((err.file.as_str(), err.field), ("many.log", "rank"));
    }

    #[test]
    fn engine_rules_differ() {
        // sglang: min(ctx - 1, pool - 1) - 5 is the first rejected length.
        let s = admission(Engine::Sglang, 1_048_576, 681_280);
        assert_eq!((s.max_accepted, s.band), (681_273, Some((681_274, 1_048_576))));
        let s = admission(Engine::Sglang, 32_768, 400_000);
        assert_eq!((s.max_accepted, s.band), (32_761, None));
        // vLLM: L + max_tokens <= max_model_len; a pool below that leaves prompts that never run.
        let v = admission(Engine::Vllm, 32_768, 400_000);
        assert_eq!((v.max_accepted, v.band), (32_767, None));
        let v = admission(Engine::Vllm, 262_144, 76_640);
        assert_eq!((v.max_accepted, v.band), (76_640, Some((76_641, 262_144))));
    }
}
