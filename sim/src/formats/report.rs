//! Reports: outcomes by HTTP status, violations grouped by kind with the first of each told as a
//! story, the trace hash, and the exact command that reproduces the run. Text and JSON.

use crate::check::{Kind, Violation};
use crate::pool::Run;
use crate::world::World;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Exit statuses of `kvsim run` and friends.
pub mod exit {
    pub const CLEAN: i32 = 0;
    pub const BAD_INPUT: i32 = 2;
    pub const DIVERGED: i32 = 3;
    /// `confirm`: the GPU failed while replaying (CUDA driver error such as out of memory or a
    /// failed launch, or an NVRTC compile error) — neither bad input nor a missing backend.
    pub const GPU_RUNTIME: i32 = 4;
    pub const SAFETY: i32 = 10;
    pub const LIVENESS: i32 = 11;
    /// The fast and the reference oracle disagreed on a read (a kvsim bug).
    pub const ORACLE_DISAGREEMENT: i32 = 12;
    /// Inconclusive: a bound was reached with no violation found — a run's event limit (liveness,
    /// hangs and leaks, not judged; signature `event_limit` in a campaign) or `kvsim explore`'s
    /// state bound (not verified).
    pub const INCONCLUSIVE: i32 = 13;
    /// A component's invariant broke (`--check invariants`, or a sampled campaign run): a kvsim bug.
    pub const INVARIANT_BROKEN: i32 = 14;
}

/// The differential check's outcome (runs with the reference oracle on).
#[derive(Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OracleCheck {
    pub reads: u64,
    pub slots: u64,
    pub disagreements: u64,
    /// The first disagreements, described.
    pub first: Vec<String>,
}

/// The JSON form of a violation.
#[derive(Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ViolationOut {
    pub kind: String,
    pub request: Option<u32>,
    pub tenant: Option<u32>,
    pub victim_tenants: Vec<u32>,
    pub pool: Option<String>,
    pub pages: u64,
    pub page_runs: Vec<(u32, u32)>,
    pub slots: u64,
    pub at_ns: u64,
    pub prompt_tokens: Option<u64>,
    pub status: Option<u16>,
    pub culprit_request: Option<u32>,
    pub culprit_tenant: Option<u32>,
    /// When the culprit's run of contiguous writes holding the first offending slot began (its
    /// chunks and tokens continue one run), not the slot's own write time; for a
    /// `cross_tenant_prefix_hit`, the hit's time (a cached block keeps no write time).
    pub culprit_at_ns: Option<u64>,
    pub detail: String,
    /// The mechanism (`stub_commit`, `late_write`, `prefix_hit`): the second part of the
    /// violation's signature. Absent in traces written before it was reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cause: String,
    /// `timing_channel`, `content_channel`: the size of the difference the observer saw between
    /// the runs, ns of virtual time; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_ns: Option<u64>,
    /// `uninitialized_read`: of `slots`, those a transfer's land zeroed over KV written there
    /// before, and that transfer's request (the rest were never written); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed_zeros: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed_by_request: Option<u32>,
    /// `page_leak`: of `pages`, those of host memory (retracted requests' KV backups; `slots`
    /// are then metadata slots); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pages: Option<u64>,
    /// `page_leak`: the requests that still hold its pages or slots at the end (a leak is its
    /// pool's, so `request` is null); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<u32>,
}

/// Everything a run reports.
#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub kvsim_version: &'static str,
    pub scenario: String,
    pub seed: u64,
    pub profile: String,
    pub trace_hash: String,
    pub events: u64,
    pub records: u64,
    pub requests: u64,
    pub virtual_end_ns: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub caught_by: BTreeMap<String, u64>,
    pub detected_by: BTreeMap<String, u64>,
    pub violation_counts: BTreeMap<String, u64>,
    pub violations: Vec<ViolationOut>,
    pub stories: Vec<String>,
    /// The run's signatures as a campaign names them (`fuzz::signatures`: kind, mechanism and the
    /// chain the run knows), so that a reproduce command can be checked against the table.
    pub signatures: Vec<String>,
    pub reproduce: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_check: Option<OracleCheck>,
    /// The event limit, when the run reached it (the run is inconclusive about liveness).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_limit: Option<u64>,
    /// The in-flight limit (`world::MAX_IN_FLIGHT`), when the run stopped at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_limit: Option<usize>,
    /// `faults.script` entries that never applied (`World::unapplied_script`), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unapplied_faults: Vec<String>,
    pub exit_code: i32,
    /// TTFT, ITL and E2E over the requests answered 200, overall and per tenant.
    pub latency: crate::latency::Latency,
    /// One record per request, in id order.
    pub per_request: Vec<crate::latency::RequestRecord>,
}

fn runs_text(runs: &[Run], total: u64) -> String {
    let shown: Vec<String> = runs
        .iter()
        .take(4)
        .map(|r| if r.count == 1 { format!("{}", r.first) } else { format!("{}..{}", r.first, r.end() - 1) })
        .collect();
    let more = if runs.len() > 4 { format!(" and {} more run(s)", runs.len() - 4) } else { String::new() };
    format!(
        "page{} {}{more} ({} page{})",
        if total == 1 { "" } else { "s" },
        shown.join(", "),
        total,
        if total == 1 { "" } else { "s" }
    )
}

/// Thousands separators for human-facing numbers.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A time as every output writes it: seconds with three decimals, truncated (not rounded), so that
/// one event never shows two times (a story's 2.890s was `confirm`'s 2.891s).
pub fn secs(ns: u64) -> String {
    format!("{}.{:03}s", ns / 1_000_000_000, ns / 1_000_000 % 1000)
}

/// The violation told as a story: who read what, whose KV it was, how it got there.
pub fn story(w: &World, v: &Violation) -> String {
    let mut s = String::new();
    let Some(r) = v.request else {
        return format!("{}: {}", v.kind.name(), v.detail);
    };
    // A folded request (`reqs::Reqs`) is never named by a violation other than `wrong_status`
    // (`World::maybe_fold` keeps those whole), which does not read `rejected`.
    let req = w.reqs.summary(r.idx());
    let rejected = w.reqs.get(r.idx()).and_then(|q| q.rejected());
    let status = req.response.map_or("no response".to_string(), |x| format!("HTTP {}", x.status));
    let _ = write!(
        s,
        "{}: request {} of tenant {}, prompt {} tokens, got {status}",
        v.kind.name(),
        r.0,
        req.tenant.0,
        thousands(req.prompt_tokens)
    );
    let pool = v.pool.map(|p| p.to_string()).unwrap_or_default();
    match v.kind {
        Kind::CrossTenantRead | Kind::CrossRequestRead | Kind::UninitializedRead | Kind::OwnKvMisplaced => {
            let whose = match v.kind {
                Kind::CrossTenantRead => {
                    let t: Vec<String> = v.victim_tenants.iter().take(5).map(|t| t.0.to_string()).collect();
                    let more = if v.victim_tenants.len() > 5 {
                        format!(" and {} more", v.victim_tenants.len() - 5)
                    } else {
                        String::new()
                    };
                    format!(
                        "last written by tenant{} {}{more}",
                        if v.victim_tenants.len() == 1 { "" } else { "s" },
                        t.join(", ")
                    )
                }
                Kind::CrossRequestRead => "last written by other requests of the same tenant".to_string(),
                Kind::OwnKvMisplaced => "its own KV of other positions (corrupted context)".to_string(),
                // Zeros a land copied over KV written there (a lagged transfer landing its
                // source's unwritten tail over decode's tokens) were written: not "never".
                _ if v.landed_zeros > 0 => {
                    let by = v.landed_by.map_or("a transfer".to_string(), |b| {
                        if b == r {
                            "its own transfer".to_string()
                        } else {
                            format!("request {}'s transfer", b.0)
                        }
                    });
                    let landed =
                        format!("that {by} landed over KV written there before (slots its source never wrote)");
                    match v.slots.saturating_sub(v.landed_zeros) {
                        0 => format!("zeros {landed}"),
                        never => {
                            format!("zeros: {} {landed}, {} never written", thousands(v.landed_zeros), thousands(never))
                        }
                    }
                }
                _ => "never written (zeros)".to_string(),
            };
            let _ = write!(
                s,
                "; {pool} attended over {} pages ({} tokens), of which {} slots on {} were {whose}",
                thousands(v.pages_read),
                thousands(v.seq_len),
                thousands(v.slots),
                runs_text(&v.page_runs, v.pages)
            );
            if let Some(c) = v.culprit {
                let _ = write!(
                    s,
                    // `Culprit::at` is when the culprit's run of contiguous writes holding the
                    // slot began (a prefill's chunks and a decode's tokens continue one run), not
                    // the slot's own write: said so (it read as the slot's time, up to a chunk off).
                    "; the first such slot was written by request {} of tenant {}, in a run of its writes that began at {}",
                    c.request.0,
                    c.tenant.0,
                    secs(c.at.0)
                );
            }
            let _ = write!(s, " (read at {})", secs(v.at.0));
        }
        _ => {
            let _ = write!(s, "; {}", v.detail);
        }
    }
    if let (Some((st, node, why)), false) = (rejected, v.kind == Kind::WrongStatus) {
        let _ = write!(s, ". {node} had rejected it ({why}, {st})");
    }
    if let Some(m) = req.caught_by {
        let _ = write!(s, ". Caught by {}", m.name());
    }
    s.push('.');
    s
}

/// The exit status of a finished run (the report's `exit_code`), without building the report:
/// the report lists every request (O(requests): ≈ 1.5 GB at 10M requests), the status needs
/// only the verdicts (`kvsim bench` uses this, so that its process measures the run's memory).
pub fn exit_status(w: &World) -> i32 {
    if w.reference.as_ref().is_some_and(|rf| rf.disagreement_count > 0) {
        exit::ORACLE_DISAGREEMENT
    } else if w.oracle.has_safety() {
        exit::SAFETY
    } else if w.event_limit_hit {
        exit::INCONCLUSIVE
    } else if w.oracle.has_liveness() {
        exit::LIVENESS
    } else {
        exit::CLEAN
    }
}

impl Report {
    pub fn build(w: &World, reproduce: String) -> Report {
        let mut outcomes = BTreeMap::new();
        let mut caught_by = BTreeMap::new();
        let mut detected_by = BTreeMap::new();
        for r in w.reqs.summaries() {
            // A run stopped early (a liveness deadline, the event limit) may end before some
            // requests arrive: they are not unanswered, they never came.
            let unanswered = if r.arrival > w.now() { "not arrived" } else { "none" };
            let k = r.response.map_or(unanswered.to_string(), |x| x.status.to_string());
            *outcomes.entry(k).or_insert(0) += 1;
            if let Some(m) = r.caught_by {
                *caught_by.entry(m.name().to_string()).or_insert(0) += 1;
            }
            if let Some(m) = r.detected_by {
                *detected_by.entry(m.name().to_string()).or_insert(0) += 1;
            }
        }
        let violations: Vec<ViolationOut> = w
            .oracle
            .violations
            .iter()
            .map(|v| ViolationOut {
                kind: v.kind.name().to_string(),
                request: v.request.map(|r| r.0),
                tenant: v.tenant.map(|t| t.0),
                victim_tenants: v.victim_tenants.iter().map(|t| t.0).collect(),
                pool: v.pool.map(|p| p.to_string()),
                pages: v.pages,
                page_runs: v.page_runs.iter().map(|r| (r.first, r.count)).collect(),
                slots: v.slots,
                at_ns: v.at.0,
                prompt_tokens: v.request.map(|r| w.reqs.summary(r.idx()).prompt_tokens),
                status: v.request.and_then(|r| w.reqs.summary(r.idx()).response.map(|x| x.status)),
                culprit_request: v.culprit.map(|c| c.request.0),
                culprit_tenant: v.culprit.map(|c| c.tenant.0),
                culprit_at_ns: v.culprit.map(|c| c.at.0),
                detail: v.detail.clone(),
                cause: v.cause.clone(),
                delta_ns: v.delta_ns,
                landed_zeros: Some(v.landed_zeros).filter(|&n| n > 0),
                landed_by_request: v.landed_by.map(|r| r.0),
                host_pages: Some(v.host_pages).filter(|&n| n > 0),
                holders: v.holders.iter().map(|r| r.0).collect(),
            })
            .collect();
        let mut stories = Vec::new();
        let mut told = std::collections::BTreeSet::new();
        let mut told_cause = std::collections::BTreeSet::new();
        let mut sorted: Vec<&Violation> = w.oracle.violations.iter().collect();
        sorted.sort_by_key(|v| v.kind);
        for v in sorted {
            // The first of each kind, then the first of each further mechanism of that kind.
            if !told_cause.insert((v.kind, v.cause.as_str())) {
                continue;
            }
            if told.insert(v.kind) {
                stories.push(story(w, v));
            } else {
                let (k, st) = (v.kind.name(), story(w, v));
                stories.push(st.replacen(&format!("{k}:"), &format!("{k} (another mechanism: {}):", v.cause), 1));
            }
        }
        let oracle_check = w.reference.as_ref().map(|rf| OracleCheck {
            reads: rf.reads,
            slots: rf.slots_read,
            disagreements: rf.disagreement_count,
            first: rf.disagreements.iter().take(8).map(|d| d.to_string()).collect(),
        });
        let exit_code = exit_status(w);
        let violation_counts: BTreeMap<String, u64> =
            w.oracle.requests_affected().into_iter().map(|(k, n)| (k.name().to_string(), n)).collect();
        let per_request = crate::latency::records(w);
        let latency = crate::latency::Latency::of(&per_request);
        Report {
            kvsim_version: env!("CARGO_PKG_VERSION"),
            scenario: w.cfg.name.clone(),
            seed: w.cfg.seed,
            profile: w.cfg.profile.clone(),
            trace_hash: w.tracer.hash_hex(),
            events: w.events,
            records: w.tracer.records,
            requests: w.reqs.len() as u64,
            virtual_end_ns: w.ended_at.0,
            outcomes,
            caught_by,
            detected_by,
            violation_counts,
            violations,
            stories,
            signatures: crate::fuzz::signatures(w).into_iter().collect(),
            reproduce,
            oracle_check,
            event_limit: w.event_limit_hit.then_some(w.max_events),
            in_flight_limit: w.in_flight_limit_hit.then_some(w.max_in_flight),
            unapplied_faults: w.unapplied_script(),
            exit_code,
            latency,
            per_request,
        }
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "kvsim {} · scenario {} · profile {} · seed {}",
            self.kvsim_version, self.scenario, self.profile, self.seed
        );
        let _ = writeln!(
            s,
            "{} request{}, {} events over {} of virtual time; trace hash {}",
            thousands(self.requests),
            if self.requests == 1 { "" } else { "s" },
            thousands(self.events),
            secs(self.virtual_end_ns),
            self.trace_hash
        );
        let o: Vec<String> = self.outcomes.iter().map(|(k, v)| format!("{k} × {}", thousands(*v))).collect();
        let _ = writeln!(s, "outcomes (HTTP status × requests): {}", o.join(", "));
        if !self.caught_by.is_empty() {
            let c: Vec<String> = self.caught_by.iter().map(|(k, v)| format!("{k} × {v}")).collect();
            // The failed request's status is in the outcomes: a check fails it with 500, vLLM's
            // commit assert crashes decode (503).
            let _ =
                writeln!(s, "stopped by mitigations (the request failed instead of reading the KV): {}", c.join(", "));
        }
        if !self.detected_by.is_empty() {
            let c: Vec<String> = self.detected_by.iter().map(|(k, v)| format!("{k} × {v}")).collect();
            let _ = writeln!(s, "detected (logged only): {}", c.join(", "));
        }
        // One per request (a request read over by two mechanisms has two records).
        let mut leaked = std::collections::BTreeSet::new();
        let leaks: Vec<&ViolationOut> = self
            .violations
            .iter()
            .filter(|v| v.kind == "cross_tenant_read" && v.request.is_none_or(|r| leaked.insert(r)))
            .collect();
        if !leaks.is_empty() {
            let readers: std::collections::BTreeSet<u32> = leaks.iter().filter_map(|v| v.tenant).collect();
            let victims: std::collections::BTreeSet<u32> =
                leaks.iter().flat_map(|v| v.victim_tenants.clone()).collect();
            let ok = leaks.iter().filter(|v| v.status == Some(200)).count();
            let shown: Vec<String> = readers.iter().take(12).map(u32::to_string).collect();
            let _ = writeln!(
                s,
                "leaked responses: {} request(s) read other tenants' KV ({ok} answered HTTP 200), from {} reader tenant(s) [{}{}] over KV of {} victim tenant(s)",
                leaks.len(),
                readers.len(),
                shown.join(", "),
                if readers.len() > 12 { ", …" } else { "" },
                victims.len()
            );
        }
        if self.violation_counts.is_empty() {
            let _ = writeln!(s, "violations: none");
        } else {
            let _ = writeln!(s, "violations (requests affected):");
            for (k, v) in &self.violation_counts {
                let _ = writeln!(s, "  {k:<24} {}", thousands(*v));
            }
            let _ = writeln!(s, "first of each kind:");
            for st in &self.stories {
                let _ = writeln!(s, "  - {st}");
            }
        }
        if !self.signatures.is_empty() {
            let _ = writeln!(s, "signatures (as a campaign names them): {}", self.signatures.join(", "));
        }
        s.push_str(&crate::latency::table(&self.latency));
        if let Some(c) = &self.oracle_check {
            let _ = writeln!(
                s,
                "oracle check: {} read(s), {} slot(s) compared with the reference oracle; {} disagreement(s)",
                thousands(c.reads),
                thousands(c.slots),
                c.disagreements
            );
            for d in &c.first {
                let _ = writeln!(s, "  - {d}");
            }
        }
        if let Some(n) = self.in_flight_limit {
            let _ = writeln!(
                s,
                "in-flight limit: more than {} requests were held at once (in flight; or, with --trace or a check, which keep every request, arrived) (the run stopped after {} events, before every request ended; hangs and leaks are not judged): spread the arrivals, or split the workload",
                thousands(n as u64),
                thousands(self.event_limit.unwrap_or(0))
            );
        } else if let Some(n) = self.event_limit {
            let _ = writeln!(
                s,
                "event limit: the run stopped after {} events, before every request ended; hangs and leaks are not judged",
                thousands(n)
            );
        }
        for u in &self.unapplied_faults {
            let _ = writeln!(s, "note: {u}");
        }
        let verdict = match self.exit_code {
            exit::ORACLE_DISAGREEMENT => "ORACLE DISAGREEMENT (a kvsim bug)",
            exit::SAFETY => "SAFETY VIOLATION",
            exit::LIVENESS => "LIVENESS VIOLATION",
            exit::INCONCLUSIVE if self.in_flight_limit.is_some() => {
                "INCONCLUSIVE: in-flight limit reached, liveness not judged"
            }
            exit::INCONCLUSIVE => "INCONCLUSIVE: event limit reached, liveness not judged",
            _ => "clean",
        };
        let _ = writeln!(s, "verdict: {verdict} (exit {})", self.exit_code);
        let _ = writeln!(s, "reproduce: {}", self.reproduce);
        s
    }
}
