//! Reach: which catalogue rows a campaign reaches, and at which run (issue 15: "every catalogue
//! row the model expresses is reached blind within 1M runs on the profile that has it").
//!
//! A signature names the violation and its chain, not the knob behind it: a `page_leak/…` may be
//! the leak-abort-in-waiting row or the cancel-mid-transfer row. So a found run is attributed to a
//! row by an ablation of that row's knobs alone: the run is *the row's* when it has the row's
//! buggy knob values ([`Row::buggy`]) and re-running the same case with the row's fix applied
//! ([`Row::fix`], only those knobs) makes one of its signatures of the row's kinds ([`Row::kinds`])
//! vanish. The table [`ROWS`] has one entry per row of `docs/reference/bug-catalogue.md` that has
//! a scenario under `scenarios/catalogue/` (the row id is the file name); a test resolves each
//! scenario's `buggy` and `fixed` expectations and checks them against the entry (buggy values
//! hold in `buggy`, the fix's values in `fixed`, the expected kinds are the row's), and that the
//! scenario's buggy run is attributed to its row — so the two cannot drift. A new row is one
//! entry here and its scenario.
//!
//! Which space measures a row ([`Row::home`]): every profile whose knob values include the row's
//! buggy values "has" it and measures it; a row no profile has is measured on the blind swarm
//! (every knob drawn). `kvsim reach` runs the campaign ([`Reach`]) and prints the table.

use crate::config::{self, ScriptedFault, SimConfig};
use crate::fuzz::{self, Space};
use crate::types::Ratio;
use serde::Deserialize;
use std::collections::BTreeSet;

/// How a row is fixed: the knob values of its fix, or (a hardware row, no engine fix) no
/// visibility lag at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// These knobs set to these values (and nothing else changed).
    Knobs(&'static [(&'static str, &'static str)]),
    /// Random and scripted visibility lag removed (the rdma-visibility-lag row: a question about
    /// the fabric, which no engine knob closes).
    NoVisibilityLag,
}

/// One catalogue row as the model expresses it.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// The row id of `docs/reference/bug-catalogue.md` (and the stem of its scenario under
    /// `scenarios/catalogue/`).
    pub id: &'static str,
    /// The knob values that make the row: all hold in a run that can have it (the row's buggy
    /// setting, and what it needs to show at all, e.g. the router mode whose legs it is about).
    pub buggy: &'static [(&'static str, &'static str)],
    /// The row's fix.
    pub fix: Fix,
    /// The row's symptoms: violation kinds (`wrong_status`), or signatures and their prefixes
    /// (`wrong_status/rejected_answered_5xx`) where a kind is shared with other mechanisms that a
    /// row's fix also moves. A signature of one of them vanishing under the fix attributes the
    /// run to the row.
    pub kinds: &'static [&'static str],
    /// The row needs a prefill instance with more than one pipeline stage: a node setting
    /// (`pp_stages`), not a knob, that only the blind swarm draws (`fuzz::table::PP_STAGES`); a
    /// profile's campaign runs single-stage instances only, so the blind swarm measures these
    /// rows even where a profile has their knob values.
    pub needs_pp_stages: bool,
    /// Released partial fixes that keep the row's mechanism: other knob values that have the row,
    /// each with what closes it there. A run has the row when its knobs hold [`Row::buggy`] or
    /// one partial's values; its fix is then that setting's.
    pub partial: &'static [Partial],
}

/// A released partial fix of a row: knob values that still have the row's mechanism, and the
/// knob values that close it under them (the row's own fix would not: it is what they carry).
/// Each entry in [`ROWS`] says which release carries it and where its code says so.
#[derive(Clone, Copy, Debug)]
pub struct Partial {
    pub buggy: &'static [(&'static str, &'static str)],
    pub fix: &'static [(&'static str, &'static str)],
}

const READS_AND_UAF: &[&str] = &["cross_tenant_read", "cross_request_read", "uninitialized_read", "use_after_free"];
/// A late write can also land a reader's own KV at another position (`own_kv_misplaced`): the
/// rows whose writes land late (a lagged or an outlived transfer) have that symptom too.
const LATE_WRITES: &[&str] =
    &["cross_tenant_read", "cross_request_read", "uninitialized_read", "use_after_free", "own_kv_misplaced"];
const HELD: &[&str] = &["page_leak", "request_hang"];

/// Every catalogue row the model expresses (one entry per row; `scenarios/catalogue/<id>.toml`
/// is its scenario). Knob values are written as in a scenario's `[knobs]`.
pub const ROWS: &[Row] = &[
    Row {
        id: "stub-admission",
        buggy: &[("reject_mode", "stub_pending"), ("pd_admission_check", "finished_only")],
        fix: Fix::Knobs(&[("pd_admission_check", "aborted_too"), ("decode_prealloc_abort_check", "aborted_too")]),
        kinds: &["cross_tenant_read", "cross_request_read", "uninitialized_read", "wrong_status"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "abort-lost-on-success",
        buggy: &[
            ("inflight_success_keeps_abort", "off"),
            ("router_mode", "concurrent"),
            ("router_on_prefill_error", "cancel_decode"),
        ],
        fix: Fix::Knobs(&[("inflight_success_keeps_abort", "on")]),
        kinds: &["cross_tenant_read", "cross_request_read", "uninitialized_read", "wrong_status"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "abort-after-forward",
        buggy: &[("prefill_post_forward_abort_check", "off")],
        fix: Fix::Knobs(&[("prefill_post_forward_abort_check", "on")]),
        kinds: &["cross_tenant_read", "cross_request_read", "uninitialized_read", "page_leak"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "decode-free-before-late-write",
        buggy: &[("decode_abort_release", "immediate")],
        fix: Fix::Knobs(&[
            ("decode_abort_release", "deferred"),
            ("prefill_abort_release", "hold_source_until_drained"),
        ]),
        kinds: READS_AND_UAF,
        needs_pp_stages: false,
        // sglang 0.5.22 defers the release but frees at a fallback timer anyway
        // (disaggregation/decode.py resolve_deferred_releases, 30 s by default): a transfer slower
        // than it lands in freed pages; closed here by a fallback longer than any transfer the
        // draws make (an hour).
        partial: &[Partial {
            buggy: &[("decode_abort_release", "deferred"), ("router_mode", "concurrent")],
            fix: &[("deferred_release_timeout_ms", "3600000")],
        }],
    },
    Row {
        id: "deferred-release-defeated",
        buggy: &[("decode_abort_release", "deferred"), ("prefill_abort_release", "immediate")],
        fix: Fix::Knobs(&[("prefill_abort_release", "hold_source_until_drained")]),
        kinds: READS_AND_UAF,
        needs_pp_stages: false,
        // sglang 0.5.22 withholds decode's abort acknowledgement until its worker drained, but
        // frees the source pages at the abort (disaggregation/prefill.py, mooncake/conn.py
        // _maybe_ack_drained_abort): a batch in flight still reads them.
        partial: &[Partial {
            buggy: &[("decode_abort_release", "deferred"), ("prefill_abort_release", "ack_after_drain")],
            fix: &[("prefill_abort_release", "hold_source_until_drained")],
        }],
    },
    Row {
        id: "sync-timeout-still-writing",
        buggy: &[("transfer_timeout_semantics", "returns_while_writing")],
        fix: Fix::Knobs(&[("transfer_timeout_semantics", "quiesced")]),
        kinds: LATE_WRITES,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "held-blocks-leak",
        buggy: &[("router_mode", "sequential"), ("source_lease_ms", "480000")],
        fix: Fix::Knobs(&[("source_lease_ms", "10000")]),
        kinds: HELD,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "pre-admission-reject-strands-prefill",
        buggy: &[("router_mode", "sequential"), ("decode_reject_releases_prefill", "off")],
        fix: Fix::Knobs(&[("decode_reject_releases_prefill", "on")]),
        kinds: HELD,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "success-without-write",
        // The model's partial write that reports Success is the stub's one page, which only the
        // finished-only gate lets through (sglang-0.5.22 commits room-only too, but its
        // aborted-too gates keep the stub out: it cannot have the row).
        buggy: &[("decode_commit_check", "room_only"), ("pd_admission_check", "finished_only")],
        fix: Fix::Knobs(&[("decode_commit_check", "coverage")]),
        kinds: &["cross_tenant_read", "cross_request_read", "uninitialized_read", "wrong_status"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "router-waits-for-decode",
        // Prefill's 400 must be an answer of its own: behind the finished-only gate of a stub
        // admission the over-length request is answered 200 instead (the stub-admission row).
        buggy: &[
            ("router_mode", "concurrent"),
            ("router_on_prefill_error", "return_decode_leg"),
            ("pd_admission_check", "aborted_too"),
        ],
        fix: Fix::Knobs(&[("router_on_prefill_error", "cancel_decode")]),
        // The liveness-mode hangs are the row's held capacity, judged against a bound shorter
        // than decode's 300 s timer (known-bugs/sglang-0.5.22.toml); reach's runs are not in
        // liveness mode, so they never arise there.
        kinds: &[
            "wrong_status/rejected_answered_5xx",
            "request_hang/after_heal/kv_arrival/prefill_failed",
            "request_hang/after_heal/decode_prealloc/prefill_failed",
            "request_hang/after_heal/decode_prealloc/behind_prefill_failed",
        ],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        // Found by kvsim (vLLM 0.34.0 `nixl/pull_scheduler.py` `request_finished`): decode stops
        // heartbeating an aborted request's lease while its read still runs.
        id: "lease-expires-mid-read",
        buggy: &[("router_mode", "sequential"), ("decode_abort_heartbeat", "stop")],
        fix: Fix::Knobs(&[("decode_abort_heartbeat", "until_read_ends")]),
        kinds: &["use_after_free/transfer_read_of_a_source_page"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "rdma-visibility-lag",
        buggy: &[],
        fix: Fix::NoVisibilityLag,
        kinds: LATE_WRITES,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "cross-tenant-prefix-hit",
        buggy: &[("prefill_cache", "radix"), ("prefix_cache_scope", "global")],
        fix: Fix::Knobs(&[("prefix_cache_scope", "per_tenant")]),
        // The channels are what `--check noninterference` sees of the row (reach's runs do not
        // run that check, so they never arise there).
        kinds: &["cross_tenant_prefix_hit", "timing_channel", "status_channel"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "leak-abort-in-waiting",
        buggy: &[("decode_transferred_abort", "leak")],
        fix: Fix::Knobs(&[("decode_transferred_abort", "free")]),
        kinds: HELD,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "leak-abort-retracted",
        buggy: &[("retracted_abort", "leak"), ("decode_out_of_pages", "retract_to_host")],
        fix: Fix::Knobs(&[("retracted_abort", "discard")]),
        kinds: HELD,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "stale-metadata-room",
        buggy: &[("metadata_zero_on_free", "off"), ("router_mode", "concurrent")],
        fix: Fix::Knobs(&[("metadata_zero_on_free", "on")]),
        kinds: &["wrong_status/valid_request_failed/room_mismatch"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "double-release",
        buggy: &[("prefill_rejected_release", "twice")],
        fix: Fix::Knobs(&[("prefill_rejected_release", "once")]),
        kinds: &["double_free"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "orphan-in-prefill-waiting",
        buggy: &[("prefill_failed_check", "bootstrap_and_inflight"), ("router_mode", "concurrent")],
        fix: Fix::Knobs(&[("prefill_failed_check", "every_queue")]),
        kinds: HELD,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "cancel-mid-transfer",
        buggy: &[("cancel_mid_transfer", "leak")],
        fix: Fix::Knobs(&[("cancel_mid_transfer", "free")]),
        kinds: HELD,
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        id: "zero-page-last-chunk",
        buggy: &[("zero_page_last_chunk", "skip"), ("decode_radix_cache", "on")],
        fix: Fix::Knobs(&[("zero_page_last_chunk", "send")]),
        kinds: &["page_leak", "request_hang", "wrong_status"],
        needs_pp_stages: false,
        partial: &[],
    },
    Row {
        // Needs a prefill node with `pp_stages` above 1 (a node setting, not a knob): with one
        // stage both writer values give the same run, so the ablation attributes nothing.
        id: "metadata-slot-collision",
        buggy: &[("pp_metadata_writer", "every_stage"), ("router_mode", "concurrent")],
        fix: Fix::Knobs(&[("pp_metadata_writer", "last_stage")]),
        kinds: &["wrong_status/valid_request_failed/room_mismatch"],
        needs_pp_stages: true,
        partial: &[],
    },
    Row {
        id: "pp-bootstrap-divergence",
        buggy: &[("pp_bootstrap_consensus", "local_repoll")],
        fix: Fix::Knobs(&[("pp_bootstrap_consensus", "follow_rank0")]),
        kinds: &["page_leak", "request_hang", "wrong_status"],
        needs_pp_stages: true,
        partial: &[],
    },
];

/// The row with this id.
pub fn row(id: &str) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.id == id)
}

/// A knob value as written in a scenario (integer, boolean or string), typed as TOML.
fn typed(v: &str) -> toml::Value {
    match (v.parse::<i64>(), v.parse::<bool>()) {
        (Ok(n), _) => toml::Value::Integer(n),
        (_, Ok(b)) => toml::Value::Boolean(b),
        _ => toml::Value::String(v.into()),
    }
}

/// Whether `knobs` holds every value of `pairs`.
fn holds(knobs: &config::Knobs, pairs: &[(&str, &str)]) -> bool {
    let t = toml::Table::try_from(knobs).expect("knobs serialise");
    pairs.iter().all(|(k, v)| t.get(*k) == Some(&typed(v)))
}

/// The kind a signature names (`kind/cause/…`).
pub fn kind_of(sig: &str) -> &str {
    sig.split('/').next().unwrap_or(sig)
}

impl Row {
    /// Whether a run of `cfg` can have the row: its knobs hold the buggy values (the hardware row:
    /// some visibility lag, random or scripted).
    pub fn applies(&self, cfg: &SimConfig) -> bool {
        self.setting(&cfg.knobs).is_some() && (self.fix != Fix::NoVisibilityLag || Self::lagged(cfg))
    }

    /// Which of the row's settings `knobs` hold: the row's own buggy values (`Some(None)`) or a
    /// partial fix's (`Some(Some(p))`); `None` when neither.
    fn setting(&self, knobs: &config::Knobs) -> Option<Option<&'static Partial>> {
        if holds(knobs, self.buggy) {
            return Some(None);
        }
        self.partial.iter().find(|p| holds(knobs, p.buggy)).map(Some)
    }

    /// Whether a run has some visibility lag, random or scripted.
    fn lagged(cfg: &SimConfig) -> bool {
        let lag =
            || {
                cfg.faults.visibility_lag != Ratio::NEVER
                    || cfg.faults.script.iter().any(|f| {
                        matches!(f, ScriptedFault::VisibilityLag { .. } | ScriptedFault::VisibilityLagAt { .. })
                    })
            };
        lag()
    }

    /// `cfg` with the row's fix applied (only that): a partial fix's own fix when `cfg` has the
    /// row through it.
    pub fn fixed(&self, cfg: &SimConfig) -> SimConfig {
        let mut c = cfg.clone();
        let fix = match self.setting(&cfg.knobs) {
            Some(Some(p)) => Fix::Knobs(p.fix),
            _ => self.fix,
        };
        match fix {
            Fix::Knobs(pairs) => {
                let mut t = toml::Table::try_from(&c.knobs).expect("knobs serialise");
                for (k, v) in pairs {
                    t.insert(k.to_string(), typed(v));
                }
                c.knobs = config::Knobs::deserialize(t).expect("a row's fix is valid knob values (tested)");
            }
            Fix::NoVisibilityLag => {
                c.faults.visibility_lag = Ratio::NEVER;
                c.faults.script.retain(|f| {
                    !matches!(f, ScriptedFault::VisibilityLag { .. } | ScriptedFault::VisibilityLagAt { .. })
                });
            }
        }
        c
    }

    /// Whether a signature is one of the row's symptoms (its kind, or the signature or one of its
    /// `/`-prefixes, is listed).
    pub fn symptom(&self, sig: &str) -> bool {
        self.kinds.iter().any(|k| sig == *k || sig.strip_prefix(*k).is_some_and(|rest| rest.starts_with('/')))
    }

    /// Whether profile `p`'s knob values include the row's buggy values or a partial fix's (a
    /// hardware row: no profile has it, since a profile's campaign draws no hardware faults).
    pub fn had_by_profile(&self, p: &config::Profile) -> bool {
        self.fix != Fix::NoVisibilityLag && !self.needs_pp_stages && self.setting(&(p.knobs)()).is_some()
    }

    /// The profiles that have the row (empty: the blind swarm measures it).
    pub fn home(&self) -> Vec<&'static str> {
        config::PROFILES.iter().filter(|p| self.had_by_profile(p)).map(|p| p.name).collect()
    }

    /// Whether the blind swarm can draw every buggy value of the row (the draw table's swarm
    /// values; deployment knobs come from their columns and are not row values).
    pub fn blind_drawable(&self) -> bool {
        self.buggy.iter().all(|(k, v)| {
            fuzz::table::knobs().iter().any(|kv| kv.name == *k && kv.swarm_values().any(|x| *x == typed(v)))
        })
    }

    /// Whether a campaign over `space` measures the row: a profile's when the profile has it
    /// (and, for the hardware row, only when the space draws hardware faults), the blind swarm's
    /// when no profile has it.
    pub fn measured_on(&self, space: &Space) -> bool {
        match space {
            Space::Blind => self.home().is_empty(),
            Space::Profile(p) => config::profile(p).is_some_and(|p| self.had_by_profile(p)),
            Space::Hardware(inner) => match &**inner {
                Space::Profile(p) if self.fix == Fix::NoVisibilityLag => config::profile(p).is_some(),
                inner => self.measured_on(inner),
            },
            Space::Prefix(inner) => self.measured_on(inner),
            Space::Base(_) => false,
        }
    }

    /// Whether a run drawn from `space` can have the row at all (reported, not waited for, when
    /// the space does not measure it).
    pub fn possible_on(&self, space: &Space) -> bool {
        match space {
            Space::Blind => self.blind_drawable(),
            Space::Profile(p) => config::profile(p).is_some_and(|p| self.had_by_profile(p)),
            // The hardware faults and the prefix-heavy workload add faults and prompts, not knob
            // values: a profile's space can have what the profile has (every blind-drawable row
            // read as "another profile has it", "not reached").
            Space::Hardware(inner) | Space::Prefix(inner) => self.measured_on(space) || self.possible_on(inner),
            Space::Base(b) => self.applies(b),
        }
    }
}

/// A row a run was attributed to, and the signatures of the row's kinds that vanished under its
/// fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    pub row: &'static str,
    pub vanished: Vec<String>,
}

/// The rows among `rows` that the run of `cfg` (with signatures `sigs`) is attributed to: for
/// each row that applies and has a signature of its kinds, the case is run again with the row's
/// fix alone; the row is attributed when one of those signatures is then absent. One extra run
/// per such row.
pub fn attribute<'a>(
    cfg: &SimConfig,
    sigs: &BTreeSet<String>,
    rows: impl IntoIterator<Item = &'a Row>,
) -> Vec<Attribution> {
    let mut out = Vec::new();
    for r in rows {
        if !r.applies(cfg) || !sigs.iter().any(|s| r.symptom(s)) {
            continue;
        }
        let (_, after) = fuzz::run_case(r.fixed(cfg));
        let vanished: Vec<String> = sigs.iter().filter(|s| r.symptom(s) && !after.contains(*s)).cloned().collect();
        if !vanished.is_empty() {
            out.push(Attribution { row: r.id, vanished });
        }
    }
    out
}

/// Where a row was first reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// How many runs the campaign had done (this one included).
    pub run: u64,
    pub seed: u64,
    /// The signatures that vanished under the row's fix.
    pub vanished: Vec<String>,
}

/// One row's line of a reach campaign.
#[derive(Clone, Debug)]
pub struct RowReach {
    pub row: &'static Row,
    /// The space measures the row (the campaign stops once every such row is reached).
    pub measured: bool,
    /// The space can draw the row's values (a row it cannot have is never attributed).
    pub possible: bool,
    pub found: Option<Found>,
}

/// A reach campaign over one space: runs seeds `seed_start..` in order, attributes each run with
/// signatures to the rows not reached yet, and stops once every row the space measures is
/// reached or after the last run. Deterministic: the same arguments give the same table.
pub struct Reach {
    pub space: Space,
    pub seed_start: u64,
    pub rows: Vec<RowReach>,
    /// Runs done so far.
    pub runs: u64,
    /// Runs with at least one signature.
    pub failing: u64,
    /// Extra runs spent on attribution (one per row tried on a failing run).
    pub ablation_runs: u64,
}

impl Reach {
    pub fn new(space: Space, seed_start: u64) -> Reach {
        let rows = ROWS
            .iter()
            .map(|r| RowReach { row: r, measured: r.measured_on(&space), possible: r.possible_on(&space), found: None })
            .collect();
        Reach { space, seed_start, rows, runs: 0, failing: 0, ablation_runs: 0 }
    }

    /// Whether every row the space measures is reached.
    pub fn done(&self) -> bool {
        self.rows.iter().filter(|r| r.measured).all(|r| r.found.is_some())
    }

    /// Runs the next seed. Returns the rows it reached first.
    pub fn step(&mut self) -> Vec<&'static str> {
        let seed = self.seed_start + self.runs;
        self.runs += 1;
        let cfg = fuzz::draw(seed, &self.space);
        let (_, sigs) = fuzz::run_case(cfg.clone());
        if sigs.is_empty() {
            return vec![];
        }
        self.failing += 1;
        let open: Vec<&'static Row> =
            self.rows.iter().filter(|r| r.possible && r.found.is_none()).map(|r| r.row).collect();
        self.ablation_runs +=
            open.iter().filter(|r| r.applies(&cfg) && sigs.iter().any(|s| r.symptom(s))).count() as u64;
        let mut firsts = vec![];
        for a in attribute(&cfg, &sigs, open) {
            let line = self.rows.iter_mut().find(|r| r.row.id == a.row).expect("an open row");
            line.found = Some(Found { run: self.runs, seed, vanished: a.vanished });
            firsts.push(a.row);
        }
        firsts
    }

    /// Runs until every measured row is reached or `max_runs` runs are done, calling `progress`
    /// after every run (the CLI prints from it; the library keeps no clock).
    pub fn run(&mut self, max_runs: u64, progress: &mut dyn FnMut(&Reach, &[&'static str])) {
        while self.runs < max_runs && !self.done() {
            let firsts = self.step();
            progress(self, &firsts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Overrides, Scenario};

    /// The hardware faults and the prefix-heavy workload add faults and prompts, not knob values:
    /// a profile's space with them can have what the profile has, and the hardware row besides
    /// (13 rows of `reach --profile sglang-0.5.16 --hardware-faults` read "another profile has
    /// it", "not reached").
    #[test]
    fn modes_over_a_profile_have_what_the_profile_has() {
        for p in ["sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"] {
            let plain = Space::Profile(p.to_string());
            for space in [Space::Hardware(Box::new(plain.clone())), Space::Prefix(Box::new(plain.clone()))] {
                for r in ROWS {
                    let hardware_row = r.fix == Fix::NoVisibilityLag && matches!(space, Space::Hardware(_));
                    assert_eq!(r.possible_on(&space), r.possible_on(&plain) || hardware_row, "{p}: {}", r.id);
                }
            }
        }
        assert_eq!(
            ROWS.iter().filter(|r| r.possible_on(&Space::Prefix(Box::new(Space::Blind)))).count(),
            ROWS.iter().filter(|r| r.possible_on(&Space::Blind)).count()
        );
    }

    fn scenario(id: &str) -> Scenario {
        let p = std::path::Path::new(&crate::test_manifest_dir()).join(format!("../scenarios/catalogue/{id}.toml"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        Scenario::parse(id, &text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn resolve(sc: &Scenario, name: &str) -> SimConfig {
        let e = sc.spec.expect.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{}: no `{name}`", sc.file));
        let o = Overrides { profile: e.profile.clone(), seed: None, set: e.set_pairs() };
        sc.resolve(&o).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every row's entry agrees with its scenario: the buggy expectation has the row's values
    /// and names only kinds of the row, the fixed one has the fix's values (and not all of the
    /// buggy ones), and the fix is valid knob values.
    #[test]
    fn every_row_matches_its_catalogue_scenario() {
        for r in ROWS {
            let sc = scenario(r.id);
            let buggy = resolve(&sc, "buggy");
            let fixed = resolve(&sc, "fixed");
            assert!(r.applies(&buggy), "{}: the buggy expectation lacks {:?}", r.id, r.buggy);
            let e = sc.spec.expect.iter().find(|e| e.name == "buggy").expect("buggy");
            for k in e.violations.iter().chain(e.requests.values().flatten()) {
                assert!(
                    r.kinds.iter().any(|x| kind_of(x) == k),
                    "{}: buggy expects `{k}`, not a kind of the row",
                    r.id
                );
            }
            match r.fix {
                Fix::Knobs(pairs) => {
                    assert!(holds(&fixed.knobs, pairs), "{}: the fixed expectation lacks {pairs:?}", r.id);
                    // (A partial fix's values may stay: the catalogue's fixed decode-free-before-
                    // late-write defers with sglang's 30 s fallback, which its short transfers never
                    // outlast.)
                    assert!(
                        !holds(&fixed.knobs, r.buggy),
                        "{}: the fixed expectation still has every buggy value",
                        r.id
                    );
                    assert!(holds(&r.fixed(&buggy).knobs, pairs), "{}", r.id);
                }
                Fix::NoVisibilityLag => assert!(!r.applies(&r.fixed(&buggy)), "{}", r.id),
            }
        }
    }

    /// Every row the catalogue's scenario README lists has an entry, and nothing else does.
    #[test]
    fn the_table_has_one_entry_per_catalogue_scenario() {
        let dir = std::path::Path::new(&crate::test_manifest_dir()).join("../scenarios/catalogue");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("catalogue dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".toml").map(str::to_string))
            .filter(|id| id != "prefix-timing-channel") // issue 19's channel, not a catalogue row
            .collect();
        files.sort();
        let mut ids: Vec<String> = ROWS.iter().map(|r| r.id.to_string()).collect();
        ids.sort();
        assert_eq!(ids, files);
        let unique: BTreeSet<&str> = ROWS.iter().map(|r| r.id).collect();
        assert_eq!(unique.len(), ROWS.len());
    }

    /// Each catalogue scenario's buggy run is attributed to its own row; its fixed run is not.
    #[test]
    fn a_catalogue_scenario_is_attributed_to_its_row() {
        for r in ROWS {
            let sc = scenario(r.id);
            let buggy = resolve(&sc, "buggy");
            let (_, sigs) = fuzz::run_case(buggy.clone());
            let got = attribute(&buggy, &sigs, ROWS);
            assert!(got.iter().any(|a| a.row == r.id), "{}: {sigs:?} attributed to {got:?}", r.id);
            // The hardware row's `fixed` expectation detects (page tags), it does not fix: its
            // fix is the lag removed.
            let fixed = match r.fix {
                Fix::Knobs(_) => resolve(&sc, "fixed"),
                Fix::NoVisibilityLag => r.fixed(&buggy),
            };
            let (_, sigs) = fuzz::run_case(fixed.clone());
            let got = attribute(&fixed, &sigs, ROWS);
            assert!(got.iter().all(|a| a.row != r.id), "{}: the fixed run {sigs:?} attributed to {got:?}", r.id);
        }
    }

    /// A row is attributed only through its own knobs and symptoms: the double-release
    /// scenario's buggy run is not the cancel-mid-transfer row (its knob is `free` there), and
    /// success-without-write's run (reads and a wrong status) is not cross-tenant-prefix-hit's,
    /// whose knobs it has (a global radix cache) but whose symptom it lacks.
    #[test]
    fn attribution_needs_the_rows_knobs_and_symptoms() {
        let buggy = resolve(&scenario("double-release"), "buggy");
        let (_, sigs) = fuzz::run_case(buggy.clone());
        let cancel = row("cancel-mid-transfer").expect("row");
        assert!(!cancel.applies(&buggy));
        assert!(attribute(&buggy, &sigs, [cancel]).is_empty());
        let sww = resolve(&scenario("success-without-write"), "buggy");
        let (_, sigs) = fuzz::run_case(sww.clone());
        let prefix = row("cross-tenant-prefix-hit").expect("row");
        assert!(prefix.applies(&sww) && !sigs.is_empty());
        assert!(!sigs.iter().any(|s| prefix.symptom(s)), "{sigs:?}");
        assert!(attribute(&sww, &sigs, [prefix]).is_empty());
    }

    /// Which space measures each row: the profiles that have its buggy values, else blind; the
    /// blind swarm can draw every row's values (issue 15: every catalogue value is drawable).
    #[test]
    fn homes_follow_the_profiles_knobs_and_blind_draws_every_row() {
        let home = |id: &str| row(id).expect("row").home();
        assert_eq!(home("stub-admission"), ["sglang-0.5.16"]);
        // `vllm-nixl` carries NIXL's default 30 s lease: the row's 480 s is a configured one.
        assert!(home("held-blocks-leak").is_empty());
        assert_eq!(home("router-waits-for-decode"), ["sglang-0.5.22"]);
        let rw = row("router-waits-for-decode").expect("row");
        assert!(rw.symptom("wrong_status/rejected_answered_5xx"));
        assert!(!rw.symptom("wrong_status/rejected_answered_200"));
        assert!(!rw.symptom("wrong_status/rejected_answered_5xxx"));
        assert_eq!(home("cross-tenant-prefix-hit"), ["sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"]);
        assert!(home("rdma-visibility-lag").is_empty());
        assert!(home("leak-abort-in-waiting").is_empty());
        for r in ROWS {
            assert!(r.blind_drawable(), "{}: the blind swarm cannot draw {:?}", r.id, r.buggy);
            assert_eq!(r.measured_on(&Space::Blind), r.home().is_empty(), "{}", r.id);
        }
    }

    /// A shipped known-bugs file and reach agree on what a profile has: every catalogue row a
    /// profile's file names (for a known signature of its own) is measured on that profile's space
    /// (the hardware row on the space with hardware faults), so a campaign's "known (row)" is a row
    /// `kvsim reach --profile` shows the profile reaching. The exceptions say why.
    #[test]
    fn known_bugs_rows_are_rows_reach_measures_on_their_profile() {
        // (profile, row): why reach cannot attribute it by a knob.
        let exceptions: &[(&str, &str, &str)] = &[(
            "sglang-0.5.22",
            "stale-metadata-room",
            "the release zeroes a freed metadata slot (PR #27374); what is left is an aborted \
             request's lagged row landing in the reused slot, which no knob of the release closes",
        )];
        for (p, _) in crate::triage::SHIPPED {
            let k = crate::triage::KnownBugs::shipped(p).expect("shipped");
            let rows: BTreeSet<&str> = k.known.iter().map(|b| b.row.as_str()).collect();
            // A row reach measures on the profile is one the file names.
            for r in ROWS.iter().filter(|r| r.measured_on(&Space::Profile(p.to_string()))) {
                assert!(rows.contains(r.id), "{p}: reach measures {}, its file does not name it", r.id);
            }
            // And every row the file names is one reach measures there.
            for id in rows {
                let Some(r) = row(id) else { continue }; // a kvsim-found row, no catalogue scenario
                if exceptions.iter().any(|(ep, er, _)| ep == p && *er == id) {
                    assert!(!r.measured_on(&Space::Profile(p.to_string())), "{p}/{id}: drop the exception");
                    continue;
                }
                let space = match r.fix {
                    Fix::NoVisibilityLag => Space::Hardware(Box::new(Space::Profile(p.to_string()))),
                    Fix::Knobs(_) => Space::Profile(p.to_string()),
                };
                assert!(r.measured_on(&space), "{p}: its known-bugs file names {id}, which reach does not measure");
            }
        }
    }

    /// A partial fix's run is the row's, and its own fix closes it: sglang 0.5.22's drain
    /// acknowledgement (the source freed at the abort) is deferred-release-defeated, closed by
    /// holding the source; its 30 s fallback is decode-free-before-late-write, closed by a fallback
    /// longer than the transfer.
    #[test]
    fn a_partial_fix_has_the_row_and_its_own_fix() {
        let p22 = config::profile("sglang-0.5.22").expect("profile");
        let cfg = fuzz::draw(0, &Space::Profile("sglang-0.5.22".into()));
        for id in ["deferred-release-defeated", "decode-free-before-late-write"] {
            let r = row(id).expect("row");
            assert!(r.had_by_profile(p22) && r.applies(&cfg), "{id}");
            let fixed = r.fixed(&cfg);
            assert!(holds(&fixed.knobs, r.partial[0].fix), "{id}: the partial's fix is applied");
            assert!(!holds(&fixed.knobs, r.buggy), "{id}");
        }
        let dr = row("deferred-release-defeated").expect("row");
        assert!(!dr.applies(&dr.fixed(&cfg)));
        // vLLM defers with no fallback timer (its proxy is sequential): not the row.
        let nixl = config::profile("vllm-nixl").expect("profile");
        assert!(!row("decode-free-before-late-write").expect("row").had_by_profile(nixl));
    }

    /// The campaign is deterministic and stops once its measured rows are reached.
    #[test]
    fn a_reach_campaign_is_deterministic() {
        let go = || {
            let mut c = Reach::new(Space::Profile("sglang-0.5.22".into()), 0);
            c.run(400, &mut |_, _| {});
            let found: Vec<_> = c.rows.iter().map(|r| r.found.clone()).collect();
            (c.runs, c.failing, found)
        };
        let a = go();
        assert_eq!(a, go());
        assert!(a.1 > 0, "no failing run in {} runs", a.0);
    }
}
