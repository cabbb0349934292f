//! Exhaustive small-scope exploration: every random draw of a run (message latencies, fault
//! decisions, random router picks, the order of simultaneous events) becomes a choice point with
//! a small finite domain, and the explorer walks the tree of choice sequences depth first.
//!
//! - **Choices.** A run under exploration carries a [`Chooser`] (`World::chooser`). Each choice
//!   point asks it for a value in `0..domain`; it answers from a prefix (the path being explored)
//!   and then with `0`, recording every `(value, domain)` on its trail. Ordinary runs have no
//!   chooser and draw from the seeded generators exactly as before (their trace hashes are
//!   unchanged). Under exploration the scenario's *random* faults are replaced by the explored
//!   ones (at most `max_faults` per run, one per transfer batch or arrival); its scripted faults
//!   stay.
//! - **Search.** Stateless re-execution (as loom and shuttle do): a schedule is run from the
//!   start with its choice prefix; backtracking increments the deepest choice that has an
//!   untried value. State hashing prunes: after every event, once the run is past its prefix,
//!   the model state's digest (`World::state_digest`) is looked up; a state already seen has had
//!   its whole future explored, so the schedule stops there.
//! - **Partial-order reduction (budget subsumption).** Two orders of commuting simultaneous
//!   events reach the same model state, but the out-of-order one has spent a reordering, so an
//!   exact state table keeps them apart and explores the reordered state's whole future again.
//!   With `Spec::por` the table is keyed by the model state *without* the explorer's budgets and
//!   keeps, per state, the (faults used, reorderings used) pairs it was explored with; a state
//!   reached again with at least as much of both budgets used as an explored visit is pruned.
//!   That is sound by monotonicity: with less budget used every choice point of the other visit
//!   exists with the same default (value 0 is always "no fault, sequence order"), so every
//!   schedule from the pruned visit is a schedule from the explored one with the same events.
//!   Independence is thereby judged exactly (both orders must reach the same state, pending
//!   events in queue order included), never assumed. Textbook sleep sets (Godefroid), which skip
//!   a commuting event *before* running it on a static independence relation, are not used: under
//!   a reordering bound they are unsound (three simultaneous events a, b, c in sequence order
//!   with a and c dependent, b independent of both, one reordering allowed: after c runs first, b
//!   sleeps, and the schedule c·a·b (one reordering) is skipped in favour of b·c·a, which needs
//!   two), and two commuting events that each send a message due at the same instant leave the
//!   queue in different orders, which decides later defaults. Identical simultaneous events are
//!   never reordered among themselves.
//! - **Parallel and deterministic.** The tree is cut into subtrees at a depth chosen from the
//!   tree alone ([`plan`]), never from the number of workers; each subtree is explored with its
//!   own state table ([`explore_subtree`]) and the results are merged in subtree order
//!   ([`merge`]), so any number of workers gives the same answer, counts included.
//!
//! A counterexample is its choice string ([`ChoiceString`]), which `kvsim run --choices`
//! replays; [`shrink_choices`] shortens it first (fewer and smaller non-default choices).

use crate::check::oracle::Violation;
use crate::check::Kind;
use crate::config::SimConfig;
use crate::trace::Tracer;
use crate::world::World;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A fault the explorer may place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A transfer batch fails.
    TransferFail,
    /// A transfer batch is delayed by the scenario's `delay_spike_ms`.
    Delay,
    /// A batch's data lands `visibility_lag_ms` after its success is reported.
    VisibilityLag,
    /// At an arrival, a node crashes (and restarts after `crash_restart_ms`).
    Crash,
}

impl FaultKind {
    pub const ALL: [FaultKind; 4] =
        [FaultKind::TransferFail, FaultKind::Delay, FaultKind::VisibilityLag, FaultKind::Crash];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::TransferFail => "transfer_fail",
            FaultKind::Delay => "delay",
            FaultKind::VisibilityLag => "visibility_lag",
            FaultKind::Crash => "crash",
        }
    }

    pub fn parse(s: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Why `name` is no fault kind: "unknown fault `crsh`; did you mean `crash`? (known: …)",
    /// the known list ending with `extra` (`, none` where `--faults` takes it).
    pub fn unknown(name: &str, extra: &str) -> String {
        let names = FaultKind::ALL.map(FaultKind::name);
        let hint =
            crate::scenario::did_you_mean(name, names).map(|m| format!("; did you mean `{m}`?")).unwrap_or_default();
        format!("unknown fault `{name}`{hint} (known: {}{extra})", names.join(", "))
    }
}

/// What kind of draw a choice point replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    Latency,
    Fault,
    Crash,
    Route,
    Order,
}

/// The bound of an exploration: the domains of its choice points. Part of every choice string,
/// so a replay has the same choice points.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bounds {
    /// Faults placed per run, at most.
    pub max_faults: u32,
    /// Which faults may be placed (ascending, distinct).
    pub fault_kinds: Vec<FaultKind>,
    /// Each message's latency is one of these (µs, ascending, distinct); empty = the cost
    /// model's constant (no choice).
    pub latencies_us: Vec<u64>,
    /// Simultaneous distinct events may run out of sequence order at most this many times per
    /// schedule (a reordering bound, as in context bounding; 0: always sequence order).
    pub max_reorders: u32,
}

impl Bounds {
    /// Sorted, deduplicated domains.
    pub fn normalised(mut self) -> Bounds {
        self.fault_kinds.sort();
        self.fault_kinds.dedup();
        self.latencies_us.sort();
        self.latencies_us.dedup();
        self
    }

    /// What a taken choice chose, in words (`transfer batch fault: delay`, `message latency
    /// 2000 µs`), for the printed schedule.
    pub fn describe(&self, c: &Choice) -> String {
        let v = c.value as usize;
        match c.point {
            Point::Latency => match self.latencies_us.get(v) {
                Some(l) => format!("message latency {l} µs"),
                None => format!("latency {v} of {}", c.domain),
            },
            Point::Fault => match v.checked_sub(1).and_then(|i| self.batch_kinds().get(i).copied()) {
                Some(k) => format!("transfer batch fault: {}", k.name()),
                None => "no transfer batch fault".into(),
            },
            Point::Crash => match v.checked_sub(1) {
                Some(n) => format!("crash node #{n} at this arrival (prefill nodes first, then decode)"),
                None => "no crash".into(),
            },
            Point::Route => format!("router picks instance #{v} of {}", c.domain),
            Point::Order => format!("simultaneous events: the #{v} of {} in sequence order runs first", c.domain),
        }
    }

    fn batch_kinds(&self) -> Vec<FaultKind> {
        self.fault_kinds.iter().copied().filter(|k| *k != FaultKind::Crash).collect()
    }
}

/// One choice taken: its value, its domain size and what it replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    pub value: u32,
    pub domain: u32,
    pub point: Point,
}

/// The source of every draw of a run under exploration (see the module doc).
#[derive(Clone, Debug)]
pub struct Chooser {
    pub bounds: Bounds,
    prefix: Vec<u32>,
    /// Every choice taken, in order.
    pub trail: Vec<Choice>,
    /// Faults placed so far (part of the state digest).
    pub faults_used: u32,
    /// Simultaneous events run out of sequence order so far (part of the state digest).
    pub reorders_used: u32,
    /// A prefix value outside its point's domain (a choice string for another scenario or bound).
    pub misfit: Option<(usize, u32, u32)>,
}

impl Chooser {
    pub fn new(bounds: Bounds, prefix: Vec<u32>) -> Chooser {
        Chooser { bounds, prefix, trail: Vec::new(), faults_used: 0, reorders_used: 0, misfit: None }
    }

    /// After a run that followed a string of `given` choices: whether each fitted its point.
    pub fn fits(&self, given: usize) -> Result<(), Misfit> {
        if let Some((index, value, domain)) = self.misfit {
            return Err(Misfit::Domain { index, value, domain });
        }
        if self.trail.len() < given {
            return Err(Misfit::TooMany { given, points: self.trail.len() });
        }
        Ok(())
    }

    /// Whether every prefix choice has been taken (the run is in new territory).
    pub fn past_prefix(&self) -> bool {
        self.trail.len() >= self.prefix.len()
    }

    /// A value in `0..domain`: the prefix's, then 0. Domains of one are not choices.
    pub fn choose(&mut self, point: Point, domain: u32) -> u32 {
        if domain <= 1 {
            return 0;
        }
        let i = self.trail.len();
        let mut value = self.prefix.get(i).copied().unwrap_or(0);
        if value >= domain {
            self.misfit.get_or_insert((i, value, domain));
            value = 0;
        }
        self.trail.push(Choice { value, domain, point });
        value
    }

    /// Which of `n` simultaneous distinct events (in sequence order) runs now, while the
    /// reordering budget lasts.
    pub fn order(&mut self, n: u32) -> u32 {
        if self.reorders_used >= self.bounds.max_reorders {
            return 0;
        }
        let i = self.choose(Point::Order, n);
        if i > 0 {
            self.reorders_used += 1;
        }
        i
    }

    /// One message's latency (µs), or `None` when latencies are not explored.
    pub fn latency(&mut self) -> Option<u64> {
        match self.bounds.latencies_us.len() {
            0 => None,
            n => {
                let i = self.choose(Point::Latency, n as u32) as usize;
                Some(self.bounds.latencies_us[i])
            }
        }
    }

    /// A transfer batch's fault, while the budget lasts and random faults have not healed.
    pub fn batch_fault(&mut self, healed: bool) -> Option<FaultKind> {
        let kinds = self.bounds.batch_kinds();
        if healed || kinds.is_empty() || self.faults_used >= self.bounds.max_faults {
            return None;
        }
        match self.choose(Point::Fault, kinds.len() as u32 + 1) {
            0 => None,
            i => {
                self.faults_used += 1;
                Some(kinds[i as usize - 1])
            }
        }
    }

    /// At an arrival: the index of the node to crash (prefill nodes first), if any.
    pub fn crash(&mut self, healed: bool, nodes: u32) -> Option<u32> {
        if healed || !self.bounds.fault_kinds.contains(&FaultKind::Crash) || self.faults_used >= self.bounds.max_faults
        {
            return None;
        }
        match self.choose(Point::Crash, nodes + 1) {
            0 => None,
            i => {
                self.faults_used += 1;
                Some(i - 1)
            }
        }
    }
}

/// A schedule written out: the bound and the choices (`kvsim run --choices`). Text form:
/// `v1/f=K/k=transfer_fail+crash/l=50+500/o=R/c=0.1.0.2` (trailing zero choices dropped).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChoiceString {
    pub bounds: Bounds,
    pub choices: Vec<u32>,
}

impl std::fmt::Display for ChoiceString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.bounds;
        let kinds: Vec<&str> = b.fault_kinds.iter().map(|k| k.name()).collect();
        let lats: Vec<String> = b.latencies_us.iter().map(|l| l.to_string()).collect();
        let mut c = self.choices.clone();
        while c.last() == Some(&0) {
            c.pop();
        }
        let cs: Vec<String> = c.iter().map(|v| v.to_string()).collect();
        write!(
            f,
            "v1/f={}/k={}/l={}/o={}/c={}",
            b.max_faults,
            kinds.join("+"),
            lats.join("+"),
            b.max_reorders,
            cs.join(".")
        )
    }
}

impl std::str::FromStr for ChoiceString {
    type Err = ChoiceStringError;

    fn from_str(s: &str) -> Result<ChoiceString, ChoiceStringError> {
        use ChoiceStringError as E;
        let mut parts = s.trim().split('/');
        if parts.next() != Some("v1") {
            return Err(E::NoVersion(s.to_string()));
        }
        let (mut f, mut k, mut l, mut o, mut c) = (None, None, None, None, None);
        for p in parts {
            let (key, val) = p.split_once('=').ok_or_else(|| E::NotKeyValue(p.to_string()))?;
            let slot = match key {
                "f" => &mut f,
                "k" => &mut k,
                "l" => &mut l,
                "o" => &mut o,
                "c" => &mut c,
                _ => return Err(E::UnknownField(key.to_string())),
            };
            if slot.replace(val).is_some() {
                return Err(E::Twice(key.to_string()));
            }
        }
        fn need<'a>(v: Option<&'a str>, key: &'static str) -> Result<&'a str, ChoiceStringError> {
            v.ok_or(ChoiceStringError::Missing(key))
        }
        let max_faults: u32 = need(f, "f")?.parse().map_err(|_| E::BadFaultCount(f.unwrap_or("").to_string()))?;
        let mut fault_kinds = Vec::new();
        for name in need(k, "k")?.split('+').filter(|x| !x.is_empty()) {
            fault_kinds.push(FaultKind::parse(name).ok_or_else(|| E::UnknownFault(name.to_string()))?);
        }
        let mut latencies_us = Vec::new();
        for v in need(l, "l")?.split('+').filter(|x| !x.is_empty()) {
            let us: u64 = v.parse().map_err(|_| E::BadLatency(v.to_string()))?;
            if us > crate::scenario::MAX_TIME_MS.saturating_mul(1000) {
                return Err(E::LatencyTooLong(us));
            }
            latencies_us.push(us);
        }
        let max_reorders: u32 = need(o, "o")?.parse().map_err(|_| E::BadReorderCount(o.unwrap_or("").to_string()))?;
        let mut choices = Vec::new();
        let c = need(c, "c")?;
        // `c=` is the empty schedule (every choice 0); otherwise no element may be empty (`0..1`,
        // `0.`: a hand-edited string, whose choices would silently shift).
        for v in c.split('.').filter(|_| !c.is_empty()) {
            // Plain decimal only: `00` or `+2` would read as another spelling of a choice.
            let plain = v.bytes().all(|b| b.is_ascii_digit()) && !(v.len() > 1 && v.starts_with('0'));
            choices.push(v.parse().ok().filter(|_| plain).ok_or_else(|| E::BadChoice(v.to_string()))?);
        }
        if choices.len() > MAX_CHOICES {
            return Err(E::TooManyChoices(choices.len()));
        }
        let bounds = Bounds { max_faults, fault_kinds, latencies_us, max_reorders };
        if bounds.clone().normalised() != bounds {
            return Err(E::NotAscending);
        }
        Ok(ChoiceString { bounds, choices })
    }
}

/// A `--choices` string that does not read; each variant holds the text at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChoiceStringError {
    /// Does not start with `v1/` (the whole string).
    NoVersion(String),
    /// A part without `=`.
    NotKeyValue(String),
    UnknownField(String),
    Twice(String),
    Missing(&'static str),
    /// `f=` is not a count.
    BadFaultCount(String),
    /// A `k=` entry that names no fault kind.
    UnknownFault(String),
    /// An `l=` entry that is not a number of µs.
    BadLatency(String),
    /// An `l=` entry (µs) past `scenario::MAX_TIME_MS`.
    LatencyTooLong(u64),
    /// `o=` is not a count.
    BadReorderCount(String),
    /// A `c=` entry that is not a choice index.
    BadChoice(String),
    /// More than `MAX_CHOICES` choices.
    TooManyChoices(usize),
    /// `k` or `l` out of order or repeated (a choice string is written normalised).
    NotAscending,
}

impl fmt::Display for ChoiceStringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ChoiceStringError as E;
        match self {
            E::NoVersion(s) => write!(f, "`{s}`: a choice string starts with `v1/`"),
            E::NotKeyValue(p) => write!(f, "`{p}`: expected KEY=VALUE"),
            E::UnknownField(key) => write!(f, "`{key}`: unknown field (known: f, k, l, o, c)"),
            E::Twice(key) => write!(f, "`{key}` given twice"),
            E::Missing(key) => write!(f, "missing field `{key}=`"),
            E::BadFaultCount(v) => write!(f, "f={v}: not a fault count"),
            E::UnknownFault(name) => write!(f, "k: {}", FaultKind::unknown(name, "")),
            E::BadLatency(v) => write!(f, "l: `{v}` is not a latency in µs"),
            E::LatencyTooLong(us) => write!(f, "l: {us} µs is over the longest time a scenario may name"),
            E::BadReorderCount(v) => write!(f, "o={v}: not a reorder count"),
            E::BadChoice(v) if v.is_empty() => write!(f, "c: an empty choice (two dots together, or one at an end)"),
            E::BadChoice(v) => write!(f, "c: `{v}` is not a choice"),
            E::TooManyChoices(n) => write!(f, "c: {n} choices (limit {MAX_CHOICES})"),
            E::NotAscending => f.write_str("k and l must be ascending and distinct"),
        }
    }
}

impl std::error::Error for ChoiceStringError {}

/// The longest choice string accepted.
pub const MAX_CHOICES: usize = 1_000_000;

/// What the explorer looks for and how far it may go.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    pub bounds: Bounds,
    /// The property: no violation of these kinds (empty: of any kind).
    pub kinds: Vec<Kind>,
    /// Distinct states per subtree, at most (the state table's bound).
    pub max_states: u64,
    /// State hashing on (off: every schedule runs to its end; for counting).
    pub prune: bool,
    /// Partial-order reduction by budget subsumption (see the module doc); only with `prune`.
    pub por: bool,
    /// Cut the tree into at least this many subtrees where it has them (`plan`).
    pub subtrees: usize,
    /// An extra property over each finished schedule's world: `true` is a violation (for
    /// properties the oracle does not state; the tests plant bugs with it).
    #[serde(skip)]
    pub check: Option<fn(&World) -> bool>,
}

/// How one schedule ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Complete,
    /// Reached a state explored before.
    Pruned,
    /// Reached a state explored before with less of the fault or reordering budget used (the
    /// partial-order reduction; see the module doc).
    Subsumed,
    Violation,
    /// Stopped at its first choice point past the prefix (planning).
    Frontier(u32),
}

/// One schedule's run.
pub struct Exec {
    pub trail: Vec<Choice>,
    pub ending: Ending,
    pub world: World,
    /// A prefix value that did not fit its domain: (position, value, domain).
    pub misfit: Option<(usize, u32, u32)>,
}

fn violates(kinds: &[Kind], v: &Violation) -> bool {
    kinds.is_empty() || kinds.contains(&v.kind)
}

/// The explored states of one subtree: the model state's digest without the explorer's
/// budgets, and per state the (faults used, reorderings used) pairs it was explored with (with
/// `por`, only the pairs no other pair dominates).
#[derive(Default)]
pub struct StateTable {
    map: BTreeMap<u64, Vec<(u32, u32)>>,
    /// Visits inserted (distinct states explored).
    pub len: u64,
}

/// What a state lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    New,
    /// The same state with the same budgets.
    Seen,
    /// The same state, explored with no more of either budget used.
    Subsumed,
}

impl StateTable {
    /// Looks a state up and inserts it when new. With `por`, a visit with at least as much of
    /// both budgets used as an explored one is `Subsumed`, and a new visit replaces the ones it
    /// dominates (they can never prune anything it would not).
    pub fn visit(&mut self, digest: u64, faults_used: u32, reorders_used: u32, por: bool) -> Visit {
        let e = self.map.entry(digest).or_default();
        if e.contains(&(faults_used, reorders_used)) {
            return Visit::Seen;
        }
        if por {
            if e.iter().any(|&(f, r)| f <= faults_used && r <= reorders_used) {
                return Visit::Subsumed;
            }
            e.retain(|&(f, r)| !(faults_used <= f && reorders_used <= r));
        }
        e.push((faults_used, reorders_used));
        self.len += 1;
        Visit::New
    }
}

/// Builds the world of one schedule: `cfg` with a chooser following `choices`.
pub fn world_for(cfg: &SimConfig, bounds: &Bounds, choices: &[u32]) -> World {
    let mut w = World::new(cfg.clone(), Tracer::new(None));
    w.chooser = Some(Box::new(Chooser::new(bounds.clone(), choices.to_vec())));
    w
}

impl ChoiceString {
    /// Makes `w`, not yet run, follow this schedule: each draw a chooser replaces comes from
    /// the string (then 0). `kvsim run --choices` builds its traced, drawn or confirmed world
    /// so, and a trace's replay rebuilds it from the header's `choices`.
    pub fn follow_in(&self, w: &mut World) {
        w.chooser = Some(Box::new(Chooser::new(self.bounds.clone(), self.choices.clone())));
    }
}

/// How a choice string fits a scenario: the choice points its run met, by kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fit {
    /// `(kind, count)` in `Point` order; together every choice point of the run.
    pub points: Vec<(Point, usize)>,
    /// Choices the string gives (the rest of the run takes 0).
    pub given: usize,
}

impl Fit {
    pub fn total(&self) -> usize {
        self.points.iter().map(|(_, n)| n).sum()
    }
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |p: Point| self.points.iter().find(|(q, _)| *q == p).map_or(0, |(_, n)| *n);
        write!(
            f,
            "{} choice points (latency {}, fault {}, crash {}, route {}, order {}), {} given",
            self.total(),
            n(Point::Latency),
            n(Point::Fault),
            n(Point::Crash),
            n(Point::Route),
            n(Point::Order),
            self.given
        )
    }
}

/// Why a choice string does not fit a scenario (it was made for another scenario, profile or
/// bound): a run would silently take other choices than the string says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Misfit {
    /// Choice `index` is `value`, but that point has `domain` values in this run.
    Domain { index: usize, value: u32, domain: u32 },
    /// More choices than the run has choice points.
    TooMany { given: usize, points: usize },
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Domain { index, value, domain } => write!(
                f,
                "choice {index} is {value} but that choice point has {domain} values here (a choice string of another scenario, profile or bound)"
            ),
            Misfit::TooMany { given, points } => {
                write!(f, "{given} choices given but the run has {points} choice points")
            }
        }
    }
}

/// Runs `cfg` under `cs` once (no trace) and says whether every choice fits: a run that follows
/// the string is the schedule it names only then.
pub fn fit(cfg: &SimConfig, cs: &ChoiceString) -> Result<Fit, Misfit> {
    let mut w = world_for(cfg, &cs.bounds, &cs.choices);
    w.run();
    let c = w.chooser.as_ref().expect("explored world");
    c.fits(cs.choices.len())?;
    let kinds = [Point::Latency, Point::Fault, Point::Crash, Point::Route, Point::Order];
    let points = kinds.iter().map(|&p| (p, c.trail.iter().filter(|x| x.point == p).count())).collect();
    Ok(Fit { points, given: cs.choices.len() })
}

/// Runs one schedule: the prefix, then default choices. With `visited`, states past the prefix
/// are looked up and inserted (a state seen before ends the schedule); with `frontier`, the run
/// stops at its first choice point past the prefix. Stops at the first violation of `kinds`.
pub fn execute(
    cfg: &SimConfig,
    spec: &Spec,
    prefix: &[u32],
    mut visited: Option<&mut StateTable>,
    frontier: bool,
) -> Exec {
    let mut w = world_for(cfg, &spec.bounds, prefix);
    let mut seen_violations = 0;
    let mut ending = Ending::Complete;
    let mut choices_before = 0;
    loop {
        if !w.step() {
            w.finish();
            if !frontier
                && (w.oracle.violations.iter().any(|v| violates(&spec.kinds, v)) || spec.check.is_some_and(|f| f(&w)))
            {
                ending = Ending::Violation;
            }
            break;
        }
        let c = w.chooser.as_ref().expect("explored world");
        if frontier && c.trail.len() > prefix.len() {
            ending = Ending::Frontier(c.trail[prefix.len()].domain);
            break;
        }
        if !frontier && w.oracle.violations[seen_violations..].iter().any(|v| violates(&spec.kinds, v)) {
            ending = Ending::Violation;
            break;
        }
        seen_violations = w.oracle.violations.len();
        // States are looked up after the events that took a choice (between them the run is
        // deterministic, so two schedules that meet meet again at the next such boundary).
        let chose = c.trail.len() > choices_before;
        choices_before = c.trail.len();
        let (past, faults_used, reorders_used) = (c.past_prefix(), c.faults_used, c.reorders_used);
        if let Some(set) = visited.as_deref_mut() {
            if chose && past {
                // The model state without the budgets (the digest hashes them only when a
                // chooser is installed); the budgets are the table's second key.
                let chooser = w.chooser.take();
                let digest = w.state_digest();
                w.chooser = chooser;
                match set.visit(digest, faults_used, reorders_used, spec.por) {
                    Visit::New => {}
                    Visit::Seen => {
                        ending = Ending::Pruned;
                        break;
                    }
                    Visit::Subsumed => {
                        ending = Ending::Subsumed;
                        break;
                    }
                }
            }
        }
    }
    let c = w.chooser.as_ref().expect("explored world");
    Exec { trail: c.trail.clone(), misfit: c.misfit, ending, world: w }
}

/// A violation found: the schedule, the violations of the property it shows, and the state
/// count at which it was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    pub choices: Vec<u32>,
    pub violations: Vec<Violation>,
}

/// What exploring one subtree gave.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtreeResult {
    /// Distinct states (event boundaries past each schedule's prefix) in this subtree's table.
    pub states: u64,
    /// Schedules run (complete, pruned or violating).
    pub schedules: u64,
    /// Of them, ended at a state seen before (`subsumed` included).
    pub pruned: u64,
    /// Of the pruned, ended at a state seen before with less of the budgets used (the
    /// partial-order reduction).
    #[serde(default)]
    pub subsumed: u64,
    /// The longest choice sequence.
    pub max_depth: u64,
    /// The state table filled up before the subtree was done.
    pub truncated: bool,
    pub found: Option<Found>,
}

/// The subtree roots: choice prefixes, in depth-first order, cut at the shallowest depth where
/// there are at least `spec.subtrees` of them (or where the tree ends). Chosen from the tree
/// alone, so any number of workers explores the same subtrees.
pub fn plan(cfg: &SimConfig, spec: &Spec) -> Vec<Vec<u32>> {
    // (prefix, expandable)
    let mut frontier: Vec<(Vec<u32>, bool)> = vec![(Vec::new(), true)];
    for _depth in 0..64 {
        if frontier.len() >= spec.subtrees.max(1) || !frontier.iter().any(|f| f.1) {
            break;
        }
        let mut next = Vec::new();
        for (p, open) in frontier {
            if !open {
                next.push((p, false));
                continue;
            }
            let e = execute(cfg, spec, &p, None, true);
            match e.ending {
                Ending::Frontier(d) => {
                    for i in 0..d {
                        let mut q = p.clone();
                        q.push(i);
                        next.push((q, true));
                    }
                }
                _ => next.push((p, false)),
            }
        }
        frontier = next;
    }
    frontier.into_iter().map(|f| f.0).collect()
}

/// Explores the subtree under `root` depth first, with its own state table. `progress` is
/// called after every schedule with the result so far and the depth-first stack's open
/// alternatives (the frontier).
pub fn explore_subtree(
    cfg: &SimConfig,
    spec: &Spec,
    root: &[u32],
    progress: &mut dyn FnMut(&SubtreeResult, u64),
) -> SubtreeResult {
    let mut res = SubtreeResult::default();
    let mut visited = StateTable::default();
    let mut prefix = root.to_vec();
    loop {
        let e = execute(cfg, spec, &prefix, spec.prune.then_some(&mut visited), false);
        res.schedules += 1;
        res.states = visited.len;
        res.max_depth = res.max_depth.max(e.trail.len() as u64);
        match e.ending {
            Ending::Pruned => res.pruned += 1,
            Ending::Subsumed => {
                res.pruned += 1;
                res.subsumed += 1;
            }
            Ending::Violation => {
                let choices: Vec<u32> = e.trail.iter().map(|c| c.value).collect();
                let violations =
                    e.world.oracle.violations.iter().filter(|v| violates(&spec.kinds, v)).cloned().collect();
                res.found = Some(Found { choices, violations });
                return res;
            }
            _ => {}
        }
        let open: u64 =
            e.trail[root.len().min(e.trail.len())..].iter().map(|c| u64::from(c.domain - 1 - c.value)).sum();
        progress(&res, open);
        if spec.prune && res.states >= spec.max_states {
            res.truncated = true;
            return res;
        }
        if !spec.prune && res.schedules >= spec.max_states {
            res.truncated = true;
            return res;
        }
        // Backtrack: the deepest choice past the root with an untried value.
        let Some(i) = (root.len()..e.trail.len()).rev().find(|&i| e.trail[i].value + 1 < e.trail[i].domain) else {
            return res;
        };
        prefix = e.trail[..i].iter().map(|c| c.value).collect();
        prefix.push(e.trail[i].value + 1);
    }
}

/// The whole exploration's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub subtrees: u64,
    /// Subtrees merged (all of them, or those up to the one with the first violation).
    pub merged: u64,
    pub states: u64,
    pub schedules: u64,
    pub pruned: u64,
    #[serde(default)]
    pub subsumed: u64,
    pub max_depth: u64,
    /// Subtrees whose state table filled up (the bound was reached there: not verified).
    pub truncated: u64,
    pub found: Option<Found>,
}

impl Summary {
    pub fn verified(&self) -> bool {
        self.found.is_none() && self.truncated == 0
    }
}

/// Merges subtree results in subtree order, up to and including the first with a violation.
/// `results[i]` is `None` for a subtree not explored (only allowed after a violation).
pub fn merge(results: &[Option<SubtreeResult>]) -> Summary {
    let mut s = Summary {
        subtrees: results.len() as u64,
        merged: 0,
        states: 0,
        schedules: 0,
        pruned: 0,
        subsumed: 0,
        max_depth: 0,
        truncated: 0,
        found: None,
    };
    for r in results {
        let Some(r) = r else { break };
        s.merged += 1;
        s.states += r.states;
        s.schedules += r.schedules;
        s.pruned += r.pruned;
        s.subsumed += r.subsumed;
        s.max_depth = s.max_depth.max(r.max_depth);
        s.truncated += u64::from(r.truncated);
        if r.found.is_some() {
            s.found = r.found.clone();
            break;
        }
    }
    s
}

/// Explores every subtree in order on this thread (the library never spawns threads; the CLI
/// runs subtrees on workers and merges the same way).
pub fn explore(cfg: &SimConfig, spec: &Spec) -> Summary {
    let roots = plan(cfg, spec);
    let mut results: Vec<Option<SubtreeResult>> = vec![None; roots.len()];
    for (i, root) in roots.iter().enumerate() {
        let r = explore_subtree(cfg, spec, root, &mut |_, _| {});
        let stop = r.found.is_some();
        results[i] = Some(r);
        if stop {
            break;
        }
    }
    merge(&results)
}

/// Replays a schedule and says whether it violates the property.
pub fn violates_with(cfg: &SimConfig, spec: &Spec, choices: &[u32]) -> bool {
    violates_as(cfg, spec, choices, None)
}

/// `violates_with`, and with `target` the run, stopped at its violation, shows one of these
/// signatures (`fuzz::signatures`): the mechanism, not only the kind.
fn violates_as(cfg: &SimConfig, spec: &Spec, choices: &[u32], target: Option<&BTreeSet<String>>) -> bool {
    let e = execute(cfg, spec, choices, None, false);
    e.ending == Ending::Violation
        && e.misfit.is_none()
        && target.is_none_or(|t| crate::fuzz::signatures(&e.world).iter().any(|s| t.contains(s)))
}

/// Shrinks a violating schedule: the shortest prefix (defaults after it) that still violates,
/// then each choice set to 0, then lowered, while the property stays violated. Every candidate
/// is one replay; the result is a fixed point.
pub fn shrink_choices(cfg: &SimConfig, spec: &Spec, choices: &[u32]) -> Vec<u32> {
    shrink_choices_as(cfg, spec, choices, None)
}

/// `shrink_choices`, every candidate also showing one of `target`'s signatures.
fn shrink_choices_as(cfg: &SimConfig, spec: &Spec, choices: &[u32], target: Option<&BTreeSet<String>>) -> Vec<u32> {
    let violates_with = |c: &SimConfig, s: &Spec, ch: &[u32]| violates_as(c, s, ch, target);
    let mut best = choices.to_vec();
    while best.last() == Some(&0) {
        best.pop();
    }
    // Shortest violating prefix (binary search is unsound here: violation is not monotone in the
    // prefix length, so try lengths in order up to the current one).
    for len in 0..best.len() {
        if violates_with(cfg, spec, &best[..len]) {
            best.truncate(len);
            break;
        }
    }
    loop {
        let mut changed = false;
        for i in 0..best.len() {
            let orig = best[i];
            for v in 0..orig {
                best[i] = v;
                if violates_with(cfg, spec, &best) {
                    changed = true;
                    break;
                }
                best[i] = orig;
            }
        }
        while best.last() == Some(&0) {
            best.pop();
        }
        if !changed {
            return best;
        }
    }
}

/// Shrinks a counterexample's *scenario* through the library's shrinker (`shrink::shrink_with`):
/// a candidate (fewer requests, nodes, tenants, shorter prompts, knobs at their fixed values) is
/// kept when it still violates the property under exploration — first by replaying `choices`
/// on it, else by exploring it (one subtree, at most `states_per_try` states). Returns the
/// shrunk configuration and a shrunk violating schedule of it, or `None` when the original does
/// not violate within that bound. Every kept candidate was seen to violate, so the result does.
/// Without `--kinds` the property is narrowed to the counterexample's own violation kind (its
/// first violation's), and a candidate must show that violation's signature too: one that
/// violates only another way (its knobs set back to the fixed build, a stub-admission leak
/// turned into a router-waits-for-decode 500, a visibility-lag read turned into a stub commit's)
/// is another bug.
/// `keep`: knobs never set back to the fixed build (the command's `--set` pins): without them
/// the case could shrink into another mechanism with the same violation kind.
pub fn shrink_scenario(
    cfg: &SimConfig,
    spec: &Spec,
    choices: &[u32],
    budget: u32,
    states_per_try: u64,
    keep: &[String],
) -> Option<(crate::shrink::Shrunk, Vec<u32>)> {
    let mut sp = Spec { max_states: states_per_try, subtrees: 1, ..spec.clone() };
    let mut target = None;
    if sp.kinds.is_empty() {
        let w = execute(cfg, spec, choices, None, false).world;
        if let Some(v) = w.oracle.violations.first() {
            sp.kinds.push(v.kind);
            let mut sigs = BTreeSet::new();
            crate::fuzz::violation_signatures(&w, v, &mut sigs);
            target = Some(sigs);
        }
    }
    let target = target.as_ref();
    let find = |c: &SimConfig| -> Option<Vec<u32>> {
        if violates_as(c, &sp, choices, target) {
            return Some(choices.to_vec());
        }
        explore(c, &sp).found.map(|f| f.choices).filter(|f| violates_as(c, &sp, f, target))
    };
    find(cfg)?;
    let shrunk = crate::shrink::shrink_with_keeping(cfg, &mut |c: &SimConfig| find(c).is_some(), budget, keep);
    let found = find(&shrunk.cfg).expect("the shrinker keeps only violating candidates");
    let short = shrink_choices_as(&shrunk.cfg, &sp, &found, target);
    Some((shrunk, short))
}

/// The property's kinds from names (`cross_tenant_read,wrong_status`); empty = every kind.
pub fn parse_kinds(s: &str) -> Result<Vec<Kind>, UnknownKind> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        out.push(Kind::parse(name).ok_or_else(|| UnknownKind(name.to_string()))?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A violation kind's name that kvsim does not know (`--kinds`, a `buggy` expectation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKind(pub String);

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = crate::check::oracle::ALL_KINDS.iter().map(|k| k.name()).collect();
        let hint = crate::scenario::did_you_mean(&self.0, known.iter().copied())
            .map(|m| format!(": did you mean `{m}`?"))
            .unwrap_or_default();
        write!(f, "unknown violation kind `{}`{hint} (known: {})", self.0, known.join(", "))
    }
}

impl std::error::Error for UnknownKind {}
