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
    /// list them in `violations`.) Content channels (`timing_channel`, `status_channel`) are
    /// checked only when an entry names one, since that takes a re-run per secret tenant: to
    /// pin "no channel", add `absent = ["timing_channel", "status_channel"]`.
    #[serde(default)]
    pub clean: bool,
    /// Kinds that must occur (each listed once).
    #[serde(default)]
    pub violations: Vec<String>,
    /// Kinds that must not occur (each listed once).
    #[serde(default)]
    pub absent: Vec<String>,
    /// Request id → kinds that must occur for that request (each listed once).
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

/// An `[[expect]]` entry that names something the scenario does not have, or asserts nothing
/// or the impossible (a configuration error: exit 2). Each names the entry's field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpectError {
    /// A violation kind kvsim does not know.
    UnknownKind { expectation: String, field: &'static str, kind: String },
    /// A request key that is not an index below the scenario's request count, written as
    /// `"0"`, `"1"`, … (`"00"` and `"+0"` would name request 0 twice).
    NoRequest { expectation: String, field: &'static str, request: String, requests: usize },
    /// An entry that asserts nothing (no `clean`, `violations`, `absent`, `requests` or
    /// `status`): it would pass whatever the run did.
    Empty { expectation: String },
    /// A part that asserts nothing, or contradicts another (it could never pass).
    Invalid { expectation: String, field: &'static str, message: String },
}

impl ExpectError {
    /// The entry's field at fault (`violations`, `requests`, …; empty for the whole entry).
    pub fn field(&self) -> &'static str {
        match self {
            ExpectError::UnknownKind { field, .. }
            | ExpectError::NoRequest { field, .. }
            | ExpectError::Invalid { field, .. } => field,
            ExpectError::Empty { .. } => "",
        }
    }

    /// What is wrong, without the entry's name (`Display` adds it).
    pub fn message(&self) -> String {
        match self {
            ExpectError::UnknownKind { kind, .. } => {
                let known: Vec<&str> = crate::check::oracle::ALL_KINDS.iter().map(|k| k.name()).collect();
                let hint = crate::scenario::did_you_mean(kind, known.iter().copied())
                    .map(|m| format!(": did you mean `{m}`?"))
                    .unwrap_or_default();
                format!("unknown violation kind `{kind}`{hint} (known: {})", known.join(", "))
            }
            ExpectError::NoRequest { request, requests, .. } => {
                format!("no request `{request}` (requests are \"0\" to \"{}\")", requests.saturating_sub(1))
            }
            ExpectError::Empty { .. } => "asserts nothing (give `clean = true`, `violations`, `absent`, `requests` or `status`): it would pass whatever the run does".into(),
            ExpectError::Invalid { message, .. } => message.clone(),
        }
    }
}

impl std::fmt::Display for ExpectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ExpectError::UnknownKind { expectation, .. }
        | ExpectError::NoRequest { expectation, .. }
        | ExpectError::Empty { expectation }
        | ExpectError::Invalid { expectation, .. }) = self;
        match self.field() {
            "" => write!(f, "expectation `{expectation}`: {}", self.message()),
            field => write!(f, "expectation `{expectation}`: {field}: {}", self.message()),
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

    /// Checks the entry before running: unknown kinds or request ids, a part that asserts
    /// nothing and parts that contradict each other are configuration errors.
    pub fn validate(&self, requests: usize) -> Result<(), ExpectError> {
        let expectation = || self.name.clone();
        let invalid = |field, message| Err(ExpectError::Invalid { expectation: expectation(), field, message });
        if self.name.trim().is_empty() {
            return invalid(
                "name",
                "an entry's name is empty: the table and its reproduce line name each entry".into(),
            );
        }
        if !self.clean
            && self.violations.is_empty()
            && self.absent.is_empty()
            && self.requests.is_empty()
            && self.status.is_empty()
        {
            return Err(ExpectError::Empty { expectation: expectation() });
        }
        let lists = [("violations", &self.violations), ("absent", &self.absent)];
        let per_request = self.requests.values().flatten().map(|k| ("requests", k));
        for (field, k) in lists.iter().flat_map(|(f, l)| l.iter().map(move |k| (*f, k))).chain(per_request) {
            if Kind::parse(k).is_none() {
                return Err(ExpectError::UnknownKind { expectation: expectation(), field, kind: k.clone() });
            }
        }
        let keys = self.requests.keys().map(|r| ("requests", r)).chain(self.status.keys().map(|r| ("status", r)));
        for (field, r) in keys {
            // Only the plain decimal form: "00" or "+0" would be request 0 under another key.
            match r.parse::<usize>() {
                Ok(i) if i < requests && *r == i.to_string() => {}
                _ => {
                    return Err(ExpectError::NoRequest {
                        expectation: expectation(),
                        field,
                        request: r.clone(),
                        requests,
                    })
                }
            }
        }
        // A kind listed twice in one list asserts nothing more the second time: a typo for
        // another kind, most likely (the forty-seventh session's walkthrough).
        // (`explore_faults` too: a fault kind named twice explores nothing more.)
        let per_request = self.requests.values().map(|l| ("requests", l));
        let faults = self.explore_faults.iter().map(|l| ("explore_faults", l));
        let lists = [("violations", &self.violations), ("absent", &self.absent)].into_iter();
        for (field, list) in lists.chain(per_request).chain(faults) {
            if let Some((_, k)) = list.iter().enumerate().find(|(i, k)| list[..*i].contains(k)) {
                return invalid(field, format!("`{k}` is listed twice: list each kind once"));
            }
        }
        if let Some((r, _)) = self.requests.iter().find(|(_, kinds)| kinds.is_empty()) {
            return invalid("requests", format!("request `{r}` lists no kind: it asserts nothing"));
        }
        // A leak is its pool's (what is still held at the end, whoever held it): no violation
        // of that kind names a request, so a per-request one could never pass.
        if let Some((r, _)) = self.requests.iter().find(|(_, kinds)| kinds.iter().any(|k| k == Kind::PageLeak.name())) {
            return invalid(
                "requests",
                format!(
                    "request `{r}`: `page_leak` is a pool's violation, never a request's (its detail names the holders): it could never pass; list it in `violations`"
                ),
            );
        }
        if let Some((r, s)) = self.status.iter().find(|(_, s)| **s != 0 && !(100..=599).contains(*s)) {
            return invalid(
                "status",
                format!("request `{r}`: {s} is not an HTTP status (100 to 599, or 0 for no response)"),
            );
        }
        let required: Vec<&String> = self.violations.iter().chain(self.requests.values().flatten()).collect();
        if self.clean {
            if let Some(k) = required.first() {
                return invalid("clean", format!("`clean = true` and `{k}` required: it could never pass"));
            }
        }
        if let Some(k) = self.absent.iter().find(|k| required.contains(k)) {
            return invalid("absent", format!("`{k}` is both required and absent: it could never pass"));
        }
        // Checked here, for `check` as for `explore` (`check` accepted an unknown fault, and
        // `explore --catalogue` refused it without the entry's line).
        if let Some(f) =
            self.explore_faults.iter().flatten().find(|f| crate::check::explore::FaultKind::parse(f).is_none())
        {
            return invalid("explore_faults", crate::check::explore::FaultKind::unknown(f, ""));
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
