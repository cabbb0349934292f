//! Expectations carried by scenarios (`[[expect]]`) and their evaluation: which violation kinds
//! must occur (overall or for named requests), which must not, or that the run is clean; and the
//! HTTP status named requests must get. `kvsim check` runs each entry under its profile and knob
//! settings; `kvsim matrix` runs the `buggy` entry with each mitigation switched on.

use crate::check::Kind;
use crate::world::World;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One expectation: run the scenario under `profile` with `set` overrides, then check.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// A short name shown in the table, e.g. `buggy` or `fixed`.
    pub name: String,
    /// Profile to run under (default: the scenario's).
    pub profile: Option<String>,
    /// Knob overrides, as `--set` would give them.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub set: BTreeMap<String, toml::Value>,
    /// `true`: the run has no violation at all. (`false` asserts nothing; to require violations,
    /// list them in `violations`.)
    #[serde(default)]
    pub clean: bool,
    /// Kinds that must occur.
    #[serde(default)]
    pub violations: Vec<String>,
    /// Kinds that must not occur.
    #[serde(default)]
    pub absent: Vec<String>,
    /// Request id → kinds that must occur for that request.
    #[serde(default)]
    pub requests: BTreeMap<String, Vec<String>>,
    /// Request id → the HTTP status its client must get (`0` = no response).
    #[serde(default)]
    pub status: BTreeMap<String, u16>,
    /// Catalogue exploration only (`kvsim explore --catalogue`): the fault kinds explored for
    /// this entry instead of `--faults` (`transfer_fail`, `delay`, `visibility_lag`, `crash`),
    /// where one of them shows another catalogue row's mechanism in this entry's deployment
    /// (pre-admission-reject-strands-prefill: a decode crash under its 480 s lease is
    /// held-blocks-leak). `kvsim check` ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explore_faults: Option<Vec<String>>,
}

/// An `[[expect]]` entry that names something the scenario does not have (a configuration
/// error: exit 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpectError {
    /// A violation kind kvsim does not know.
    UnknownKind { expectation: String, kind: String },
    /// A request key that is not an index below the scenario's request count.
    NoRequest { expectation: String, request: String, requests: usize },
    /// An entry that asserts nothing (no `clean`, `violations`, `absent`, `requests` or
    /// `status`): it would pass whatever the run did.
    Empty { expectation: String },
}

impl std::fmt::Display for ExpectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpectError::UnknownKind { expectation, kind } => {
                let known: Vec<&str> = crate::check::oracle::ALL_KINDS.iter().map(|k| k.name()).collect();
                write!(f, "expectation `{expectation}`: unknown violation kind `{kind}` (known: {})", known.join(", "))
            }
            ExpectError::NoRequest { expectation, request, requests } => {
                write!(f, "expectation `{expectation}`: no request `{request}` ({requests} requests)")
            }
            ExpectError::Empty { expectation } => write!(
                f,
                "expectation `{expectation}` asserts nothing (give `clean = true`, `violations`, `absent`, `requests` or `status`): it would pass whatever the run does"
            ),
        }
    }
}

impl std::error::Error for ExpectError {}

impl Expectation {
    /// Overrides in `--set` form. A string that `--set` would read as another type (`"32"`,
    /// `"true"`) stays a string, quoted, so that it is judged as the string it is in the file:
    /// `page_size = "32"` is refused as a string where a number is wanted, as in `[knobs]`.
    pub fn set_pairs(&self) -> Vec<(String, String)> {
        self.set
            .iter()
            .map(|(k, v)| {
                let bare_is_other = |s: &str| {
                    toml::from_str::<toml::Table>(&format!("v = {s}"))
                        .is_ok_and(|t| t.get("v").is_some_and(|x| !x.is_str()))
                };
                (
                    k.clone(),
                    match v {
                        toml::Value::String(s) if bare_is_other(s) => v.to_string(),
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                )
            })
            .collect()
    }

    /// Whether the entry names `timing_channel` or `status_channel` (as occurring or absent):
    /// then the run is followed by the noninterference check (every tenant that sends prefix
    /// blocks as the secret holder in turn).
    pub fn needs_noninterference(&self) -> bool {
        self.violations
            .iter()
            .chain(&self.absent)
            .chain(self.requests.values().flatten())
            .any(|k| k == Kind::TimingChannel.name() || k == Kind::StatusChannel.name())
    }

    /// Checks names before running: unknown kinds or request ids are configuration errors.
    pub fn validate(&self, requests: usize) -> Result<(), ExpectError> {
        if !self.clean
            && self.violations.is_empty()
            && self.absent.is_empty()
            && self.requests.is_empty()
            && self.status.is_empty()
        {
            return Err(ExpectError::Empty { expectation: self.name.clone() });
        }
        for k in self.violations.iter().chain(&self.absent).chain(self.requests.values().flatten()) {
            if Kind::parse(k).is_none() {
                return Err(ExpectError::UnknownKind { expectation: self.name.clone(), kind: k.clone() });
            }
        }
        for r in self.requests.keys().chain(self.status.keys()) {
            match r.parse::<usize>() {
                Ok(i) if i < requests => {}
                _ => {
                    return Err(ExpectError::NoRequest { expectation: self.name.clone(), request: r.clone(), requests })
                }
            }
        }
        Ok(())
    }

    /// What the run got wrong, one line each; empty when it met the expectation.
    pub fn mismatches(&self, w: &World) -> Vec<String> {
        let mut out = Vec::new();
        let has = |k: &str| w.oracle.counts.keys().any(|x| x.name() == k);
        if self.clean && !w.oracle.violations.is_empty() {
            let kinds: Vec<&str> = w.oracle.counts.keys().map(|k| k.name()).collect();
            out.push(format!("expected clean, got {}", kinds.join(", ")));
        }
        for k in &self.violations {
            if !has(k) {
                out.push(format!("expected {k}, none occurred"));
            }
        }
        for k in &self.absent {
            if has(k) {
                out.push(format!(
                    "{k} occurred ({} request(s))",
                    w.oracle.requests_affected().iter().find(|(x, _)| x.name() == k).map_or(0, |(_, n)| *n)
                ));
            }
        }
        for (r, kinds) in &self.requests {
            let id = crate::types::RequestId(r.parse().expect("validated"));
            for k in kinds {
                if !w.oracle.has(Kind::parse(k).expect("validated"), id) {
                    out.push(format!("expected {k} for request {r}"));
                }
            }
        }
        for (r, want) in &self.status {
            let got = w.reqs.summary(r.parse::<usize>().expect("validated")).response.map_or(0, |x| x.status);
            if got != *want {
                out.push(format!(
                    "request {r}: expected HTTP {want}, got {}",
                    if got == 0 { "no response".into() } else { got.to_string() }
                ));
            }
        }
        out
    }
}
