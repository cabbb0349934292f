//! Triage of a campaign's signatures against a profile's known bugs.
//!
//! A known-bugs file (`known-bugs/<profile>.toml`) lists the signatures a profile is expected to
//! show because the engine it models really has the bug: each entry names the row of
//! `docs/reference/bug-catalogue.md` that explains it and says how that was checked. A campaign
//! reports every signature as `new` or `known (<row>)`, and its exit status counts only the new
//! ones, so a nightly job on a fixed engine exits 0 when it finds nothing but known rows.
//!
//! The shipped files are embedded, so `kvsim fuzz --profile P` uses them from any folder. An
//! oracle disagreement (a kvsim bug) is never known: a file that lists one is refused.

use crate::check::Kind;
use crate::report::exit;
use serde::Deserialize;

/// One entry of a known-bugs file: a signature and the catalogue row that explains it.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RawBug {
    signature: toml::Spanned<String>,
    row: toml::Spanned<String>,
    reference: toml::Spanned<String>,
    note: toml::Spanned<String>,
    #[serde(default)]
    hardware: Option<toml::Spanned<bool>>,
}

#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RawFile {
    profile: toml::Spanned<String>,
    #[serde(default)]
    known: Vec<RawBug>,
}

/// A known signature: the catalogue row, the public issue behind it, and why the row explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownBug {
    pub signature: String,
    /// The row id in `docs/reference/bug-catalogue.md`.
    pub row: String,
    /// The public issue or pull request behind the row.
    pub reference: String,
    /// Why the row explains this signature (how it was checked).
    pub note: String,
    /// Found only with the hardware faults drawn (`kvsim fuzz --hardware-faults`), although its
    /// signature names none (`hardware = true`; e.g. a noninterference channel whose runs need
    /// the visibility lag). A signature that names one (`fuzz::hardware_fault`) is hardware
    /// without it.
    pub hardware: bool,
}

/// A known-bugs file: the signatures a profile is expected to show, each tied to a catalogue row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KnownBugs {
    /// Where it came from (a path, or `known-bugs/<profile>.toml` for a shipped one).
    pub source: String,
    pub profile: String,
    pub known: Vec<KnownBug>,
}

/// The shipped known-bugs files, by profile.
pub const SHIPPED: &[(&str, &str)] = &[
    ("sglang-0.5.22", include_str!("../../../known-bugs/sglang-0.5.22.toml")),
    ("vllm-nixl", include_str!("../../../known-bugs/vllm-nixl.toml")),
];

const CATALOGUE: &str = include_str!("../../../docs/reference/bug-catalogue.md");

/// The row ids of `docs/reference/bug-catalogue.md` (the first column of its table).
pub fn catalogue_rows() -> Vec<&'static str> {
    CATALOGUE
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .filter(|id| !id.is_empty() && *id != "id" && id.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect()
}

/// What the oracle sees of a catalogue row (its violation kinds, or signatures and their
/// `/`-prefixes): the row's `reach::Row::kinds`; for the rows found by kvsim, which reach does not
/// measure, written here. A known-bugs entry's signature must be one of its row's symptoms.
pub fn row_symptoms(row: &str) -> Option<&'static [&'static str]> {
    match row {
        "prealloc-never-fits" => Some(&["request_hang"]),
        _ => crate::reach::row(row).map(|r| r.kinds),
    }
}

/// Whether `sig` is one of `row`'s symptoms (its kind, or the signature or one of its
/// `/`-prefixes, is listed; `row_symptoms`). A row without a list accepts any signature.
pub fn is_symptom(row: &str, sig: &str) -> bool {
    row_symptoms(row).is_none_or(|kinds| {
        kinds.iter().any(|k| sig == *k || sig.strip_prefix(k).is_some_and(|rest| rest.starts_with('/')))
    })
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// A known-bugs file that does not read: `<file>:<line>: <field>: <what>` (no field for a TOML
/// syntax or shape error, whose message names the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownBugsError {
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// `profile`, `known[i].signature`, …
    pub field: Option<String>,
    pub message: String,
}

impl std::fmt::Display for KnownBugsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line)?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for KnownBugsError {}

impl KnownBugs {
    /// Parses a known-bugs file. Errors read `<name>:<line>: <field>: <what>`.
    pub fn parse(name: &str, text: &str) -> Result<KnownBugs, KnownBugsError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            // A missing or unknown key of an entry: name the entry (`known[I].row`), as the
            // checks below do, from the `[[known]]` tables before the error's position.
            let at = e.span().map_or(0, |s| s.start.min(text.len()));
            let message = e.message().trim_end().to_string();
            let here = usize::from(text[at..].starts_with("[[known]]"));
            let entry = (text[..at].matches("[[known]]").count() + here).checked_sub(1);
            // (`profile` is the file's own key, never an entry's: a file without it was reported
            // as `known[0].profile`.)
            let key =
                message.strip_prefix("missing field `").and_then(|m| m.split('`').next()).filter(|k| *k != "profile");
            KnownBugsError {
                file: name.to_string(),
                line: e.span().map_or(1, |_| line_of(text, at)),
                field: entry.zip(key).map(|(i, k)| format!("known[{i}].{k}")),
                message,
            }
        })?;
        let err = |s: &std::ops::Range<usize>, field: String, message: String| KnownBugsError {
            file: name.to_string(),
            line: line_of(text, s.start),
            field: Some(field),
            message,
        };
        let profile = raw.profile.get_ref();
        if crate::config::profile(profile).is_none() {
            return Err(err(
                &raw.profile.span(),
                "profile".into(),
                format!("`{profile}` is not a profile{}", crate::config::unknown_profile_hint(profile)),
            ));
        }
        let rows = catalogue_rows();
        let mut known = Vec::new();
        for (i, b) in raw.known.iter().enumerate() {
            let f = |field: &str| format!("known[{i}].{field}");
            let sig = b.signature.get_ref();
            if crate::fuzz::is_disagreement(sig) {
                return Err(err(
                    &b.signature.span(),
                    f("signature"),
                    format!("`{sig}`: an oracle disagreement is a kvsim bug, never known"),
                ));
            }
            let mut parts = sig.split('/');
            let kind = parts.next().and_then(Kind::parse);
            // Every part is a word: an empty one (a trailing `/`) or one with spaces never matches
            // a signature a run reports, and the entry would be "not found" forever.
            let word = |p: &str| {
                !p.is_empty()
                    && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'=' || b == b'-')
            };
            if kind.is_none() || parts.next().is_none_or(|m| !word(m)) || !sig.split('/').all(word) {
                return Err(err(
                    &b.signature.span(),
                    f("signature"),
                    format!("`{sig}`: not a signature (<kind>/<mechanism>, e.g. use_after_free/transfer_write)"),
                ));
            }
            // A mechanism no run can report (a typo) would never match: the campaign would call
            // the bug the entry means `new`.
            if let Some(why) = crate::fuzz::signature_error(sig) {
                return Err(err(&b.signature.span(), f("signature"), why));
            }
            if let Some(first) = raw.known[..i].iter().position(|x| x.signature.get_ref() == sig) {
                let at = line_of(text, raw.known[first].signature.span().start);
                return Err(err(
                    &b.signature.span(),
                    f("signature"),
                    format!("`{sig}` is listed twice (first as known[{first}], line {at})"),
                ));
            }
            if !rows.contains(&b.row.get_ref().as_str()) {
                return Err(err(
                    &b.row.span(),
                    f("row"),
                    format!("`{}` is not a row of docs/reference/bug-catalogue.md", b.row.get_ref()),
                ));
            }
            if !is_symptom(b.row.get_ref(), sig) {
                let symptoms = row_symptoms(b.row.get_ref()).unwrap_or_default();
                return Err(err(
                    &b.signature.span(),
                    f("signature"),
                    format!(
                        "`{sig}` is not a symptom of row `{}` (its symptoms: {}; sim/src/campaign/reach.rs)",
                        b.row.get_ref(),
                        symptoms.join(", ")
                    ),
                ));
            }
            for (field, v) in [("reference", &b.reference), ("note", &b.note)] {
                if v.get_ref().trim().is_empty() {
                    return Err(err(&v.span(), f(field), "must not be empty".into()));
                }
            }
            if let Some(h) = &b.hardware {
                if *h.get_ref() && crate::fuzz::hardware_fault(sig).is_some() {
                    return Err(err(
                        &h.span(),
                        f("hardware"),
                        format!("`{sig}` names its hardware fault already: drop `hardware = true`"),
                    ));
                }
            }
            known.push(KnownBug {
                signature: sig.clone(),
                row: b.row.get_ref().clone(),
                reference: b.reference.get_ref().clone(),
                note: b.note.get_ref().clone(),
                hardware: b.hardware.as_ref().is_some_and(|h| *h.get_ref()),
            });
        }
        Ok(KnownBugs { source: name.to_string(), profile: profile.clone(), known })
    }

    /// The shipped file of a profile, if there is one.
    pub fn shipped(profile: &str) -> Option<KnownBugs> {
        SHIPPED.iter().find(|(p, _)| *p == profile).map(|(p, text)| {
            // Named as kvsim's own copy: a `known-bugs/` folder in the working directory, edited,
            // is not what this reads (the line named that path for both, with two verdicts).
            KnownBugs::parse(&format!("kvsim's built-in known-bugs/{p}.toml"), text)
                .expect("shipped known-bugs files parse (tested)")
        })
    }

    /// The catalogue row of a known signature.
    pub fn row(&self, sig: &str) -> Option<&str> {
        self.known.iter().find(|b| b.signature == sig).map(|b| b.row.as_str())
    }

    /// Whether a known signature is found only with the hardware faults drawn (its entry's
    /// `hardware = true`; `KnownBug::hardware`).
    pub fn hardware(&self, sig: &str) -> bool {
        self.known.iter().any(|b| b.signature == sig && b.hardware)
    }
}

/// The exit status of a campaign's signatures: 12 on any oracle disagreement, else 10 / 11 for a
/// new safety / liveness signature, else 0 (nothing, or only known signatures).
pub fn exit_status<'a>(sigs: impl IntoIterator<Item = &'a String>, known: Option<&KnownBugs>) -> i32 {
    let new: Vec<&String> = sigs.into_iter().filter(|s| known.and_then(|k| k.row(s)).is_none()).collect();
    if new.iter().any(|s| crate::fuzz::is_disagreement(s)) {
        exit::ORACLE_DISAGREEMENT
    } else if new.iter().any(|s| crate::fuzz::is_model_bug(s)) {
        exit::INVARIANT_BROKEN
    } else if new.iter().any(|s| crate::fuzz::is_safety(s)) {
        exit::SAFETY
    } else if new.is_empty() {
        exit::CLEAN
    } else if new.iter().all(|s| *s == crate::fuzz::EVENT_LIMIT) {
        exit::INCONCLUSIVE
    } else {
        exit::LIVENESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"profile = "sglang-0.5.22"

[[known]]
signature = "cross_tenant_prefix_hit/global_prefix_cache"
row = "cross-tenant-prefix-hit"
reference = "sglang #37160"
note = "prefix_cache_scope = global in the profile"
"#;

    #[test]
    fn catalogue_rows_are_the_table_ids() {
        let rows = catalogue_rows();
        assert!(rows.contains(&"rdma-visibility-lag") && rows.contains(&"stub-admission"), "{rows:?}");
        assert!(!rows.contains(&"id") && !rows.iter().any(|r| r.contains(' ')), "{rows:?}");
        // Every catalogue scenario is named after its row (the channel scenario is not a row).
        let dir = std::path::Path::new(&crate::test_manifest_dir()).join("../scenarios/catalogue");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("catalogue folder") {
            let name = e.expect("entry").file_name().to_string_lossy().into_owned();
            if let Some(row) = name.strip_suffix(".toml").filter(|r| *r != "prefix-timing-channel") {
                assert!(rows.contains(&row), "{row} is not parsed as a row: {rows:?}");
                n += 1;
            }
        }
        assert!(n >= 14 && rows.len() > n, "{n} scenarios, {} rows", rows.len());
    }

    /// A `--hardware-faults` campaign on `vllm-nixl` reported `own_kv_misplaced/visibility_lag` as
    /// new (14 runs in 419,731): decode committed on an early Success, was preempted and recomputed,
    /// and the lagged landing wrote its own KV over blocks it held again at other positions: the
    /// rdma-visibility-lag row. Seed 484,039's signatures are all known, and it needs the lag.
    /// (Seed 212,397 was the test's until the forty-second session: with decode's prefix cache on,
    /// as vLLM has it, its preempted request's prompt blocks stay cached, and the lagged landing
    /// now meets them as a `use_after_free` and a cross-tenant read, both known, instead of its own
    /// recomputed blocks. Seed 350,695 was until the forty-fourth: a read is one transfer since, not
    /// batches landing one after another, and its landing no longer outlasts the preemption; a
    /// scan of seeds 400,000..600,000 found three, 419,308, 456,751 and 541,761, and 456,751 has
    /// the fewest signatures. Until the forty-sixth session: since vLLM's decode writes one
    /// position earlier, `decode_first_write = last_prompt_token`, the same scan finds only
    /// 484,039.)
    #[test]
    fn vllm_nixl_hardware_seed_484039_is_known_and_needs_the_lag() {
        use crate::fuzz::{draw, run_case, Space};
        let space = Space::Hardware(Box::new(Space::Profile("vllm-nixl".into())));
        let cfg = draw(484_039, &space);
        let (_, sigs) = run_case(cfg.clone());
        assert!(sigs.contains("own_kv_misplaced/visibility_lag"), "{sigs:?}");
        let known = KnownBugs::shipped("vllm-nixl").expect("shipped");
        assert_eq!(exit_status(&sigs, Some(&known)), 0, "{sigs:?}");
        let mut no_lag = cfg;
        no_lag.faults.visibility_lag = crate::types::Ratio::NEVER;
        let (_, sigs) = run_case(no_lag);
        assert!(!sigs.iter().any(|s| s.starts_with("own_kv_misplaced")), "{sigs:?}");
    }

    #[test]
    fn shipped_files_parse_and_name_their_profile() {
        for (p, _) in SHIPPED {
            let k = KnownBugs::shipped(p).expect("shipped");
            assert_eq!(k.profile, *p);
            assert!(!k.known.is_empty(), "{p}: the shipped file lists the profile's catalogue rows");
        }
        assert!(KnownBugs::shipped("sglang-0.5.16").is_none());
    }

    #[test]
    fn a_good_file_parses() {
        let k = KnownBugs::parse("k.toml", GOOD).expect("parses");
        assert_eq!(k.row("cross_tenant_prefix_hit/global_prefix_cache"), Some("cross-tenant-prefix-hit"));
        assert_eq!(k.row("cross_tenant_read/stub_commit"), None);
    }

    /// Every malformed file is refused with `file:line: field: what`, the line of the bad value.
    #[test]
    fn malformed_files_name_file_line_and_field() {
        let cases: &[(&str, &str, &str)] = &[
            (r#"row = "x""#, "k.toml:5: known[0].row: `x` is not a row", "row"),
            (r#"signature = "oracle_disagreement/read""#, "k.toml:4: known[0].signature: `oracle_disagreement", "sig"),
            (r#"signature = "leak/x""#, "k.toml:4: known[0].signature: `leak/x`: not a signature", "sig"),
            (r#"signature = "page_leak""#, "k.toml:4: known[0].signature: `page_leak`: not a signature", "sig"),
            // An empty part (a trailing slash) or a space never matches a reported signature.
            (
                r#"signature = "cross_tenant_prefix_hit/global_prefix_cache/""#,
                "k.toml:4: known[0].signature: `cross_tenant_prefix_hit/global_prefix_cache/`: not a signature",
                "sig",
            ),
            (
                r#"signature = "cross_tenant_prefix_hit/global prefix""#,
                "k.toml:4: known[0].signature: `cross_tenant_prefix_hit/global prefix`: not a signature",
                "sig",
            ),
            // A mechanism no run reports: a typo (with its correction), or another kind's.
            (
                r#"signature = "cross_tenant_prefix_hit/global_prefx_cache""#,
                "k.toml:4: known[0].signature: `global_prefx_cache` is not a mechanism of cross_tenant_prefix_hit (did \
                 you mean `cross_tenant_prefix_hit/global_prefix_cache`? its mechanisms: global_prefix_cache)",
                "sig",
            ),
            (
                r#"signature = "cross_tenant_prefix_hit/late_write""#,
                "k.toml:4: known[0].signature: `late_write` is not a mechanism of cross_tenant_prefix_hit (its \
                 mechanisms: global_prefix_cache)",
                "sig",
            ),
            (r#"note = " ""#, "k.toml:7: known[0].note: must not be empty", "note"),
            (r#"rwo = "x""#, "k.toml:4: unknown field `rwo`", "unknown"),
            // A real signature under a row that cannot produce it (a leak is no prefix hit).
            (
                r#"signature = "page_leak/decode""#,
                "k.toml:4: known[0].signature: `page_leak/decode` is not a symptom of row `cross-tenant-prefix-hit`",
                "kind",
            ),
        ];
        for (replacement, want, _) in cases {
            let key = replacement.split(' ').next().unwrap();
            let text: String = GOOD
                .lines()
                .map(|l| if l.starts_with(&format!("{key} ")) { replacement.to_string() } else { l.to_string() })
                .collect::<Vec<_>>()
                .join("\n");
            // An unknown key replaces nothing: put it on line 4.
            let text =
                if key == "rwo" { GOOD.replacen("signature", &format!("{replacement}\nsignature"), 1) } else { text };
            let e = KnownBugs::parse("k.toml", &text).expect_err(replacement).to_string();
            assert!(e.starts_with(want), "{replacement}: {e}");
        }
        let e = KnownBugs::parse("k.toml", &GOOD.replace("sglang-0.5.22", "sglang-9")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (1, Some("profile")), "{e}");
        let e = e.to_string();
        assert!(e.starts_with("k.toml:1: profile: `sglang-9` is not a profile"), "{e}");
        let twice = format!("{GOOD}\n{}", GOOD.lines().skip(1).collect::<Vec<_>>().join("\n"));
        let e = KnownBugs::parse("k.toml", &twice).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "k.toml:11: known[1].signature: `cross_tenant_prefix_hit/global_prefix_cache` is listed twice (first as \
                 known[0], line 4)"
            ),
            "{e}"
        );
        let e =
            KnownBugs::parse("k.toml", "profile = \"sglang-0.5.22\"\n[[known]]\nsignature = \"a/b\"\n").unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (2, Some("known[0].row")), "{e}");
        let e = e.to_string();
        assert!(e.starts_with("k.toml:2: known[0].row: missing field `row`"), "{e}");
        let e = KnownBugs::parse("k.toml", "profile = \n").unwrap_err().to_string();
        assert!(e.starts_with("k.toml:1: "), "{e}");
        // The file's own `profile` missing is the file's, not its first entry's.
        let e = KnownBugs::parse(
            "k.toml",
            "[[known]]\nsignature = \"a/b\"\nrow = \"x\"\nreference = \"r\"\nnote = \"n\"\n",
        )
        .unwrap_err();
        assert_eq!(e.field, None, "{e}");
        assert!(e.to_string().contains("missing field `profile`"), "{e}");
    }

    #[test]
    fn exit_status_counts_only_new_signatures() {
        let k = KnownBugs::parse("k.toml", GOOD).unwrap();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let known_only = s(&["cross_tenant_prefix_hit/global_prefix_cache"]);
        assert_eq!(exit_status(&known_only, Some(&k)), exit::CLEAN);
        assert_eq!(exit_status(&known_only, None), exit::SAFETY);
        assert_eq!(exit_status(&s(&[]), Some(&k)), exit::CLEAN);
        let with_leak = s(&["cross_tenant_prefix_hit/global_prefix_cache", "page_leak/decode"]);
        assert_eq!(exit_status(&with_leak, Some(&k)), exit::LIVENESS);
        let with_read = s(&["cross_tenant_prefix_hit/global_prefix_cache", "page_leak/decode", "cross_tenant_read/x"]);
        assert_eq!(exit_status(&with_read, Some(&k)), exit::SAFETY);
        let with_dis = s(&["cross_tenant_read/x", "oracle_disagreement/read"]);
        assert_eq!(exit_status(&with_dis, Some(&k)), exit::ORACLE_DISAGREEMENT);
    }

    #[test]
    fn hardware_is_a_flag_for_signatures_that_name_no_hardware_fault() {
        let with = |sig: &str, row: &str| {
            format!("profile = \"vllm-nixl\"\n\n[[known]]\nsignature = \"{sig}\"\nrow = \"{row}\"\nreference = \"r\"\nnote = \"n\"\nhardware = true\n")
        };
        let k = KnownBugs::parse("k.toml", &with("timing_channel/memory_safety", "cross-tenant-prefix-hit")).unwrap();
        assert!(k.known[0].hardware && k.hardware("timing_channel/memory_safety"));
        let e =
            KnownBugs::parse("k.toml", &with("cross_request_read/visibility_lag", "rdma-visibility-lag")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (8, Some("known[0].hardware")), "{e}");
        assert!(e.message.contains("names its hardware fault already"), "{e}");
        let e = KnownBugs::parse(
            "k.toml",
            &with("timing_channel/memory_safety", "cross-tenant-prefix-hit").replace("= true", "= \"yes\""),
        )
        .unwrap_err();
        assert_eq!(e.line, 8, "{e}");
        assert!(!KnownBugs::parse("k.toml", GOOD).unwrap().known[0].hardware);
    }
}
