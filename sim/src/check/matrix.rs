//! The mitigation matrix: for each scenario with a `buggy` expectation, whether each defence
//! prevents the bug, detects it (fails the request with an error status), or misses it. `kvsim
//! matrix` reads the files and prints [`Matrix::text`].

use crate::expect::Expectation;
use crate::scenario::{FileReader, Overrides, Scenario, ScenarioError};
use crate::world::Mitigation as Stop;
use std::fmt;

/// A defence, as the knob settings that switch it on: a matrix column.
///
/// The defences the model implements as a check that stops a request are the model's own
/// `world::Mitigation` (what `Req::caught_by` names), so a column and the report's "caught by"
/// share one name and one string; the others are knob settings with no stop of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mitigation {
    /// A check in the model that fails a request before it reads foreign KV (`kv_checksum`,
    /// `kv_canary`, `page_tags`, `coverage_check`).
    Stop(Stop),
    DeferredRelease,
    BoundedBatches,
    /// The prefix cache salted per tenant (vLLM `cache_salt`, one salt per tenant).
    PerTenantSalt,
    /// Selective sharing: only blocks a request marks public are shared across tenants.
    PublicOnly,
    /// Cache-hit timing padding: a prefix-cache hit takes as long as a miss.
    HitPadding,
}

impl Mitigation {
    /// Every mitigation, in the matrix's default column order.
    pub const ALL: [Mitigation; 9] = [
        Mitigation::Stop(Stop::KvChecksum),
        Mitigation::Stop(Stop::KvCanary),
        Mitigation::Stop(Stop::PageTags),
        Mitigation::Stop(Stop::CoverageCheck),
        Mitigation::DeferredRelease,
        Mitigation::BoundedBatches,
        Mitigation::PerTenantSalt,
        Mitigation::PublicOnly,
        Mitigation::HitPadding,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mitigation::Stop(m) => m.name(),
            Mitigation::DeferredRelease => "deferred_release",
            Mitigation::BoundedBatches => "bounded_batches",
            Mitigation::PerTenantSalt => "per_tenant_salt",
            Mitigation::PublicOnly => "public_only",
            Mitigation::HitPadding => "hit_padding",
        }
    }

    pub fn parse(name: &str) -> Option<Mitigation> {
        Mitigation::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The knob settings that switch it on.
    pub fn knobs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Mitigation::Stop(Stop::KvChecksum) => &[("kv_checksum", "on")],
            Mitigation::Stop(Stop::KvCanary) => &[("kv_canary", "raise")],
            Mitigation::Stop(Stop::PageTags) => &[("page_tags", "on")],
            Mitigation::Stop(Stop::CoverageCheck) => &[("decode_commit_check", "coverage")],
            Mitigation::Stop(Stop::AssertCrash) => &[("decode_commit_check", "assert_crash")],
            Mitigation::DeferredRelease => {
                &[("decode_abort_release", "deferred"), ("prefill_abort_release", "hold_source_until_drained")]
            }
            Mitigation::BoundedBatches => {
                &[("max_transfer_batch_pages", "64"), ("transfer_timeout_semantics", "quiesced")]
            }
            Mitigation::PerTenantSalt => &[("prefix_cache_scope", "per_tenant")],
            Mitigation::PublicOnly => &[("prefix_cache_scope", "public_only")],
            Mitigation::HitPadding => &[("prefix_hit_timing", "padded_to_miss")],
        }
    }

    /// A `--mitigations` list, in the order given: each named once (a repeated one is one
    /// column), at least one, no empty element.
    pub fn parse_list(list: &str) -> Result<Vec<Mitigation>, UnknownMitigation> {
        let mut out: Vec<Mitigation> = Vec::new();
        for m in list.split(',').map(str::trim) {
            // An empty element (`a,,b`, a trailing comma) names nothing: refused, not skipped.
            let m = Mitigation::parse(m).ok_or_else(|| UnknownMitigation(m.to_string()))?;
            if !out.contains(&m) {
                out.push(m);
            }
        }
        if out.is_empty() {
            return Err(UnknownMitigation(String::new()));
        }
        Ok(out)
    }
}

/// A `--mitigations` entry that names no mitigation (empty: the list names none at all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownMitigation(pub String);

impl fmt::Display for UnknownMitigation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = Mitigation::ALL.iter().map(|m| m.name()).collect();
        if self.0.is_empty() {
            return write!(
                f,
                "--mitigations: an empty name (nothing given, two commas together, or one at an end) (known: {})",
                known.join(",")
            );
        }
        let hint = crate::scenario::did_you_mean(&self.0, known.iter().copied())
            .map(|m| format!(": did you mean `{m}`?"))
            .unwrap_or_default();
        write!(f, "--mitigations: unknown `{}`{hint} (known: {})", self.0, known.join(","))
    }
}

impl std::error::Error for UnknownMitigation {}

/// What a mitigation did to a scenario's bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// The violation did not occur and no request failed.
    Prevented,
    /// It did not occur because the mitigation failed the request with this HTTP status.
    Detected(u16),
    /// It still occurred.
    Missed,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::Prevented => f.write_str("prevented"),
            Cell::Detected(s) => write!(f, "detected ({s})"),
            Cell::Missed => f.write_str("missed"),
        }
    }
}

/// A cell and the safety violations the mitigated run still had besides the ones the cell
/// judges (`still`, kind names): a read-side defence stops the read, not the late write behind
/// it (`use_after_free`), and failing a request can itself free pages a lagged transfer then
/// lands in. A cell with any is not a safe run (it exits 10), so the table names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub cell: Cell,
    pub still: Vec<String>,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.cell)?;
        for k in &self.still {
            write!(f, " + {k}")?;
        }
        Ok(())
    }
}

/// The violation kinds a mitigation must stop for a `buggy` expectation: its safety kinds other
/// than `wrong_status`, narrowed to the reads when it has any (the question is whether the leak
/// was stopped; the mechanism, a late write, may still happen under a read-side defence).
pub fn targets(buggy: &Expectation) -> Vec<String> {
    let mut targets: Vec<String> = buggy
        .violations
        .iter()
        .chain(buggy.requests.values().flatten())
        .filter(|k| crate::check::Kind::parse(k).is_some_and(|k| !k.is_liveness() && k.name() != "wrong_status"))
        .cloned()
        .collect();
    const READS: [&str; 3] = ["cross_tenant_read", "cross_request_read", "uninitialized_read"];
    if targets.iter().any(|k| READS.contains(&k.as_str())) {
        targets.retain(|k| READS.contains(&k.as_str()));
    }
    targets
}

/// Runs a scenario's `buggy` expectation with one mitigation switched on. An expectation that
/// names `timing_channel` or `status_channel` runs the noninterference check too (as `kvsim
/// check` does): those kinds exist only by comparing runs.
pub fn cell(
    sc: &Scenario,
    buggy: &Expectation,
    m: Mitigation,
    read: Option<FileReader>,
) -> Result<Verdict, ScenarioError> {
    let mut set = buggy.set_pairs();
    for &(k, v) in m.knobs() {
        set.retain(|(x, _)| x != k);
        set.push((k.to_string(), v.to_string()));
    }
    let o = Overrides { profile: buggy.profile.clone(), seed: None, set };
    let cfg = sc.resolve_with(&o, read)?;
    let mut w = crate::simulate(cfg.clone(), None, false);
    if buggy.needs_noninterference() {
        crate::check::noninterference::apply(&cfg, &mut w, None);
    }
    let occurred = |k: &String| w.oracle.counts.keys().any(|x| x.name() == k);
    let targets = targets(buggy);
    let missed = Verdict { cell: Cell::Missed, still: Vec::new() };
    // The safety violations (not `wrong_status`: a mitigation answers the requests it stops
    // with an error) the run still had, once the cell's own kinds did not occur.
    let still = || -> Vec<String> {
        let kinds = w.oracle.counts.keys().filter(|k| !k.is_liveness() && k.name() != "wrong_status");
        let mut names: Vec<String> = kinds.map(|k| k.name().to_string()).collect();
        names.sort();
        names
    };
    if targets.is_empty() {
        // A liveness bug: prevented when none of its kinds occurs.
        return Ok(if buggy.violations.iter().any(occurred) {
            missed
        } else {
            Verdict { cell: Cell::Prevented, still: still() }
        });
    }
    if targets.iter().any(occurred) {
        return Ok(missed);
    }
    let caught = w.reqs.iter().filter(|r| r.caught_by().is_some()).find_map(|r| r.response().map(|x| x.status));
    Ok(Verdict { cell: caught.map_or(Cell::Prevented, Cell::Detected), still: still() })
}

/// Runs a scenario's `buggy` expectation with no mitigation, as `kvsim check` runs it: what the
/// run got wrong against the entry (empty: the bug is there to mitigate).
pub fn baseline(sc: &Scenario, buggy: &Expectation, read: Option<FileReader>) -> Result<Vec<String>, ScenarioError> {
    let o = Overrides { profile: buggy.profile.clone(), seed: None, set: buggy.set_pairs() };
    let cfg = sc.resolve_with(&o, read)?;
    let mut w = crate::simulate(cfg.clone(), None, false);
    if buggy.needs_noninterference() {
        crate::check::noninterference::apply(&cfg, &mut w, None);
    }
    Ok(buggy.mismatches(&w))
}

/// One row per scenario with a `buggy` expectation.
#[derive(Clone, Debug, Default)]
pub struct Matrix {
    pub mitigations: Vec<Mitigation>,
    pub rows: Vec<(String, Vec<Verdict>)>,
    /// Scenarios whose `buggy` entry does not hold without a mitigation, with what the run got
    /// wrong: no row (a mitigation cannot prevent a bug the run does not have; its cells would
    /// credit it with whatever else changed).
    pub unheld: Vec<(String, Vec<String>)>,
}

impl Matrix {
    pub fn new(mitigations: Vec<Mitigation>) -> Matrix {
        Matrix { mitigations, rows: Vec::new(), unheld: Vec::new() }
    }

    /// Adds the scenario's row (nothing when it has no `buggy` expectation).
    pub fn add(&mut self, name: &str, sc: &Scenario, read: Option<FileReader>) -> Result<(), ScenarioError> {
        let Some(buggy) = sc.spec.expect.iter().find(|e| e.name == "buggy") else { return Ok(()) };
        let miss = baseline(sc, buggy, read)?;
        if !miss.is_empty() {
            self.unheld.push((name.to_string(), miss));
            return Ok(());
        }
        let cells = self.mitigations.iter().map(|&m| cell(sc, buggy, m, read)).collect::<Result<Vec<_>, _>>()?;
        self.rows.push((name.to_string(), cells));
        Ok(())
    }

    /// The table with its legend.
    pub fn text(&self) -> String {
        if self.rows.is_empty() {
            return self.unheld_text();
        }
        let w0 = self.rows.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
        // Each column as wide as its name and its widest cell (a cell naming what the mitigated
        // run still had is wider than the others).
        let wc: Vec<usize> = (0..self.mitigations.len())
            .map(|i| {
                let cells = self.rows.iter().map(|r| r.1[i].to_string().len());
                cells.chain([self.mitigations[i].name().len(), 14]).max().unwrap_or(14)
            })
            .collect();
        let mut s = format!("{:<w0$}", "bug");
        for (m, w) in self.mitigations.iter().zip(&wc) {
            s.push_str(&format!("  {:<w$}", m.name()));
        }
        s.push('\n');
        for (name, cells) in &self.rows {
            s.push_str(&format!("{name:<w0$}"));
            for (c, w) in cells.iter().zip(&wc) {
                s.push_str(&format!("  {:<w$}", c.to_string()));
            }
            s.push('\n');
        }
        s.push_str("prevented: the violation did not occur and the mitigation failed no request (one may still fail for another reason) · detected (S): it did not occur because the mitigation failed the request with HTTP S · missed: it still occurred · + K: the mitigated run still had safety violation K (the late write behind a read that a read-side defence stopped, a lagged write into the pages a failed request freed, a prefix hit whose time padding hides): not a safe run\n");
        s + &self.unheld_text()
    }

    fn unheld_text(&self) -> String {
        self.unheld
            .iter()
            .map(|(name, miss)| {
                format!("{name}: no row: its `buggy` entry does not hold without a mitigation ({})\n", miss.join("; "))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_list_is_every_mitigation_once() {
        let all: Vec<&str> = Mitigation::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(Mitigation::parse_list(&all.join(",")).unwrap(), Mitigation::ALL.to_vec());
        let e = Mitigation::parse_list("kv_checksum, nope").unwrap_err();
        assert_eq!(e, UnknownMitigation("nope".into()));
        assert!(e.to_string().contains("unknown `nope`"));
        // A repeated name is one column; a list naming none is refused (it printed an empty table).
        assert_eq!(Mitigation::parse_list("kv_checksum,kv_checksum").unwrap(), vec![Mitigation::ALL[0]]);
        assert!(Mitigation::parse_list(" , ").unwrap_err().to_string().contains("an empty name"));
        // An empty element is refused, not skipped; a near miss is named.
        assert!(Mitigation::parse_list("kv_checksum,,page_tags").unwrap_err().to_string().contains("an empty name"));
        assert!(Mitigation::parse_list("page_tag").unwrap_err().to_string().contains("did you mean `page_tags`?"));
        for m in Mitigation::ALL {
            assert_eq!(Mitigation::parse(m.name()), Some(m));
            assert!(!m.knobs().is_empty());
        }
        // A column the model stops requests for is named as the model's report names the stop.
        for (m, s) in [("kv_checksum", Stop::KvChecksum), ("kv_canary", Stop::KvCanary), ("page_tags", Stop::PageTags)]
        {
            assert_eq!(Mitigation::parse(m), Some(Mitigation::Stop(s)));
            assert_eq!(s.name(), m);
        }
        assert_eq!(Mitigation::parse("coverage_check"), Some(Mitigation::Stop(Stop::CoverageCheck)));
    }
}
