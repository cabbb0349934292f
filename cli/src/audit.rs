//! `kvsim audit LOG… [--role prefill|decode]… [--profile NAME] [--scenario-out FILE]`.
//! Exit 0: no gap; 10: a gap that leaks under the profile (or the simulated deployment breaks
//! memory safety otherwise); 11: a gap that does not leak (the requests are refused); 13: the
//! generated scenario did not run as meant (a warm-up failed, a probe got no answer), so it cannot
//! tell; 2: bad input (the message names the log, line and field).

use kvsim::audit::{self, parse};
use kvsim::check::Kind;
use kvsim::report::exit;
use kvsim::scenario::{Overrides, Scenario};

pub fn run(logs: &[String], roles: &[String], profile: Option<&str>, out: Option<&str>, force: bool) -> i32 {
    let bad = |m: String| {
        eprintln!("error: {m}");
        exit::BAD_INPUT
    };
    if !roles.is_empty() && roles.len() != 1 && roles.len() != logs.len() {
        return bad(format!(
            "--role given {} times for {} logs: give it once for all, or once per log in order",
            roles.len(),
            logs.len()
        ));
    }
    // Options first, before any of the report is printed.
    if let Some(p) = profile.filter(|p| kvsim::config::profile(p).is_none()) {
        return bad(format!("--profile {p}: unknown profile{}", kvsim::config::unknown_profile_hint(p)));
    }
    if let Some(o) = out.filter(|o| std::path::Path::new(o).is_dir()) {
        return bad(format!("--scenario-out {o}: a folder; give a file name"));
    }
    let same = |a: &str, b: &str| super::same_file(a, b);
    if let Some(o) = out.filter(|o| logs.iter().any(|l| same(o, l))) {
        return bad(format!("--scenario-out {o}: that is one of the logs; write the scenario elsewhere"));
    }
    if let Some(o) = out.filter(|o| !force && std::path::Path::new(o).exists()) {
        return bad(format!("--scenario-out {o}: exists; give another name, or --force to overwrite it"));
    }
    let mut files = Vec::new();
    for (i, path) in logs.iter().enumerate() {
        if let Some(first) = logs[..i].iter().find(|l| same(l, path)) {
            println!("note: {path} is {first} again: each copy is audited as a node of its own");
        }
        let role = match roles.get(if roles.len() == 1 { 0 } else { i }).map(String::as_str) {
            None => None,
            Some("prefill") => Some(parse::Role::Prefill),
            Some("decode") => Some(parse::Role::Decode),
            Some(r) => return bad(format!("--role {r}: expected prefill or decode")),
        };
        let bytes = match super::read_log_bytes(path) {
            Ok(b) => b,
            Err(e) => return bad(format!("{path}: cannot read: {e}")),
        };
        // Compressed or UTF-16 logs would read as "no start-up lines": say what they are.
        if bytes.starts_with(&[0x1f, 0x8b]) || bytes.starts_with(b"BZh") || bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        {
            return bad(format!(
                "{path}: a compressed file (gzip, bzip2 or zstd): decompress it first (e.g. `zcat {path} > log.txt`)"
            ));
        }
        if bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]) {
            return bad(format!("{path}: UTF-16 text (as Windows PowerShell writes it): convert it to UTF-8 first (e.g. `iconv -f UTF-16 -t UTF-8`)"));
        }
        let text = String::from_utf8_lossy(&bytes);
        // A log cut off mid-line may end in half a number (`context_len=10485` of 10485760).
        if let Some(tail) = parse::cut_number_tail(&text) {
            println!(
                "note: {path}: its last line has no line end and ends in a number (`…{tail}`): if the log was cut off there, that number may be cut short too"
            );
        }
        match parse::parse_log(path, &text) {
            Ok(f) => files.push((path.clone(), f, role)),
            Err(e) if e.kind == parse::ParseErrorKind::NoStartupLines => {
                // Say what the input is when that is why nothing was found: empty, or bytes no
                // log holds (random data, UTF-16 without a byte-order mark). Only then: a real
                // log may hold a run of NUL bytes where a crashed writer left a hole.
                let what = if bytes.iter().all(u8::is_ascii_whitespace) {
                    " (an empty file)"
                } else if bytes.contains(&0) {
                    " (it holds NUL bytes: binary data, or UTF-16 text without a byte-order mark; save a log as UTF-8)"
                } else {
                    ""
                };
                return bad(format!("{e}{what}"));
            }
            Err(e) => return bad(e.to_string()),
        }
    }
    let a = match audit::analyse(&files) {
        Ok(a) => a,
        Err(e) => return bad(e.to_string()),
    };
    print!("{}", audit::node_table(&a));
    for n in &a.notes {
        println!("note: {n}");
    }
    if !a.has_gap() && out.is_some() {
        // Said first: every way out of this branch writes nothing.
        println!("note: --scenario-out not written: a scenario is generated only for a gap, to simulate it");
    }
    if !a.has_gap() {
        if let Some(n) = a.nodes.iter().find(|n| n.admission.is_none()) {
            // Name the log and what it lacks (a zero or inconsistent block count leaves the pool
            // unknown as surely as a missing line).
            let f = &n.facts;
            let missing: Vec<&str> = [
                (f.pool_tokens.is_none(), "KV pool size (sglang `#tokens: N`, vLLM `GPU KV cache size: N tokens` or a non-zero `# GPU blocks: N`)"),
                (f.context_len.is_none(), "context length (`context_len` / `max_model_len`)"),
            ]
            .into_iter()
            .filter_map(|(m, what)| m.then_some(what))
            .collect();
            let what = if missing.is_empty() { "admission rule".to_string() } else { missing.join(" and ") };
            return bad(format!("{}: no usable {what} in this log: cannot tell whether there is a gap", f.source));
        }
        if a.nodes.iter().all(|n| n.facts.refused_start.is_some()) {
            println!("verdict: no gap served — the engine refused to start with this pool (exit 0)");
            return exit::CLEAN;
        }
        println!("verdict: no gap — every pool holds any prompt the context admits (exit 0)");
        return exit::CLEAN;
    }
    let profile = match profile {
        Some(p) => p.to_string(),
        None => {
            let (p, why) = a.default_profile();
            println!("profile: {p} ({why}; --profile to choose another)");
            p.to_string()
        }
    };
    // The profile's engine against the logs': simulating a vLLM node under an sglang profile (or
    // the reverse) applies the other engine's lifecycle.
    let profile_engine = if profile.starts_with("vllm") { "vllm" } else { "sglang" };
    let other: Vec<&str> =
        a.nodes.iter().filter(|n| n.engine().to_string() != profile_engine).map(|n| n.facts.source.as_str()).collect();
    if !other.is_empty() {
        println!(
            "note: profile {profile} models {profile_engine}, but {} {} from the other engine: its lifecycle is simulated as {profile_engine}'s",
            other.join(", "),
            if other.len() == 1 { "is" } else { "are" }
        );
    }
    if profile == "vllm-nixl" && a.vllm_band() {
        println!("note: {}", audit::VLLM_BAND_NOTE);
    }
    let sources = logs.join(", ");
    let Some(arranged) = audit::scenarios(&a, &sources, &profile) else {
        return bad("pools or context length unknown: cannot build a scenario".into());
    };
    for s in &arranged[0].assumptions {
        println!("assumption: {s}");
    }
    if arranged.len() > 1 {
        println!(
            "note: {} arrangements of the decode nodes simulated, so that the probes meet every (prefill, decode) pair; the first that leaks, else the first, is the scenario",
            arranged.len()
        );
    }
    let name = out.unwrap_or("<generated scenario>");
    // Each arrangement simulated in order; the first whose probes leak is the verdict's.
    let mut chosen = None;
    for generated in &arranged {
        let sc = match Scenario::parse(name, &generated.toml) {
            Ok(s) => s,
            Err(e) => return bad(format!("generated scenario is invalid (a kvsim bug): {e}")),
        };
        let cfg = match sc.resolve(&Overrides { profile: Some(profile.clone()), ..Default::default() }) {
            Ok(c) => c,
            Err(e) => return bad(e.to_string()),
        };
        let w = kvsim::simulate(cfg.clone(), None, false);
        let leaks = w.oracle.violations.iter().any(is_leak);
        let first = chosen.is_none();
        if leaks || first {
            chosen = Some((generated, cfg, w));
        }
        if leaks {
            break;
        }
    }
    let (generated, cfg, w) = chosen.expect("at least one arrangement");
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &generated.toml) {
                return bad(format!("{path}: cannot write: {e}"));
            }
            println!("scenario written to {path}");
            println!(
                "reproduce: kvsim run {} --seed {} --profile {}",
                kvsim::shell_path_str(path),
                cfg.seed,
                cfg.profile
            );
        }
        None => {
            // A log read from a pipe (`audit <(zcat node.log.gz)` names `/dev/fd/63`) cannot be
            // read again: the command names a file to save it to instead (it named the pipe).
            let piped: Vec<&str> = logs
                .iter()
                .filter(|l| !std::fs::metadata(l.as_str()).is_ok_and(|m| m.is_file()))
                .map(String::as_str)
                .collect();
            let saved_as = |l: &str| piped.iter().position(|p| *p == l).map(|i| format!("saved-log-{}.txt", i + 1));
            let mut cmd = String::from("kvsim audit");
            for l in logs {
                cmd.push(' ');
                cmd.push_str(&saved_as(l).unwrap_or_else(|| kvsim::shell_path_str(l)));
            }
            for r in roles {
                cmd.push_str(" --role ");
                cmd.push_str(&kvsim::shell_word(r));
            }
            cmd.push_str(&format!(
                " --profile {} --scenario-out kvsim-audit-scenario.toml",
                kvsim::shell_word(&profile)
            ));
            // The command must run as printed: a second audit in the same folder finds the file.
            if std::path::Path::new("kvsim-audit-scenario.toml").exists() {
                cmd.push_str(" --force");
            }
            if piped.is_empty() {
                println!("scenario not written; to write it: {cmd}");
            } else {
                let saves: Vec<String> =
                    piped.iter().map(|p| format!("{p} as {}", saved_as(p).unwrap_or_default())).collect();
                println!(
                    "scenario not written; to write it, save {} (read from a pipe, it cannot be read again) and run: {cmd}",
                    saves.join(", ")
                );
            }
        }
    }
    let leaked: Vec<_> = w.oracle.violations.iter().filter(|v| is_leak(v)).collect();
    let count = |vs: &[&kvsim::check::Violation]| -> String {
        let m: std::collections::BTreeMap<String, usize> = vs.iter().fold(Default::default(), |mut m, v| {
            *m.entry(format!("{}/{}", v.kind.name(), v.cause)).or_default() += 1;
            m
        });
        m.iter().map(|(k, n)| format!("{k} × {n}")).collect::<Vec<_>>().join(", ")
    };
    // What the probes (tenant 1) got, counted: a probe at one node's band edge may fit another
    // node and be answered 200, which is not a leak either.
    let answers = |tenant: u32| {
        let mut statuses: std::collections::BTreeMap<String, u64> = Default::default();
        for r in w.reqs.iter().filter(|r| r.tenant().0 == tenant) {
            *statuses.entry(r.response().map_or("none".to_string(), |x| x.status.to_string())).or_default() += 1;
        }
        statuses
    };
    let shown = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(s, n)| format!("{s} × {n}")).collect::<Vec<_>>().join(", ")
    };
    let probes = answers(1);
    let probes_text = shown(&probes);
    if !leaked.is_empty() {
        // Per kind, the requests it touched (a warm-up rejected and answered 200 is not a stale
        // read: the kinds say which is which).
        let mut by_kind: std::collections::BTreeMap<&str, std::collections::BTreeSet<u32>> = Default::default();
        for v in &leaked {
            by_kind.entry(v.kind.name()).or_default().extend(v.request.map(|r| r.0));
        }
        let kinds: Vec<String> = by_kind.iter().map(|(k, rs)| format!("{k} × {} request(s)", rs.len())).collect();
        println!(
            "verdict: GAP LEAKS under {profile}: {} (probes answered HTTP {probes_text}) (exit 10)",
            kinds.join(", ")
        );
        // The scenario's run counts every violation; the verdict only the leaks: say the rest.
        let others: Vec<_> = w.oracle.violations.iter().filter(|v| !is_leak(v)).collect();
        if !others.is_empty() {
            println!(
                "note: `kvsim run` of the scenario also reports {} (not stale reads, not a rejected prompt answered 200)",
                count(&others)
            );
        }
        return exit::SAFETY;
    }
    // Memory safety broken otherwise (KV written into pages another request holds, a double
    // free): not a probe's stale read, but not safe either.
    let unsafe_: Vec<_> = w.oracle.violations.iter().filter(|v| is_memory_safety(v)).collect();
    if !unsafe_.is_empty() {
        println!(
            "verdict: UNSAFE under {profile}: no probe read stale KV, but the simulated deployment breaks memory safety: {} (probes answered HTTP {probes_text}) (exit 10)",
            count(&unsafe_)
        );
        return exit::SAFETY;
    }
    // "Does not leak" only when the scenario did what it is for: every warm-up served (decode's
    // pools hold tenant 0's KV) and every probe answered (it reached the admission check).
    let warm = answers(0);
    let warm_failed: u64 = warm.iter().filter(|(s, _)| *s != "200").map(|(_, n)| n).sum();
    // A probe left waiting because its decode node can never preallocate it (the
    // prealloc-never-fits row: the prompt with decode's reserved tokens exceeds the pool) is what
    // the engine does with it: an answer of its own, not a scenario that failed.
    let never_fits: Vec<String> = w
        .reqs
        .iter()
        .filter(|r| r.tenant().0 == 1 && r.response().is_none())
        .filter_map(|r| w.hang_why(r.id(), "decode_prealloc").filter(|(why, _)| *why == "never_fits"))
        .map(|(_, detail)| detail)
        .collect();
    let unanswered = probes.get("none").copied().unwrap_or(0) - never_fits.len() as u64;
    if let Some(why) = never_fits.first() {
        println!(
            "note: {} probe(s) are never answered: decode cannot preallocate them and waits forever (the prealloc-never-fits row; sglang rejects at decode only a prompt longer than the pool): {why}",
            never_fits.len()
        );
    }
    if warm_failed > 0 || unanswered > 0 {
        println!(
            "verdict: INCONCLUSIVE under {profile}: the generated scenario did not run as meant (warm-ups answered HTTP {}; probes answered HTTP {probes_text}), so it cannot tell whether the gap leaks; run the scenario (--scenario-out) and read its stories (exit {})",
            shown(&warm),
            exit::INCONCLUSIVE
        );
        if !w.oracle.violations.is_empty() {
            println!("note: the scenario's own run finds {}", count(&w.oracle.violations.iter().collect::<Vec<_>>()));
        }
        return exit::INCONCLUSIVE;
    }
    println!(
        "verdict: GAP, but it does not leak under {profile}: no probe read another tenant's KV and no rejected prompt was answered 200 (probes answered HTTP {probes_text}) (exit 11)"
    );
    let other: Vec<_> = w.oracle.violations.iter().collect();
    if !other.is_empty() {
        println!(
            "note: the scenario's own run finds {} (a refusal, not a leak: `kvsim run` of the scenario reports it and exits 10)",
            count(&other)
        );
    }
    exit::LIVENESS
}

/// KV memory safety broken without a stale read: a write into pages another request holds, a
/// double free, a request's own KV at the wrong position.
fn is_memory_safety(v: &kvsim::check::Violation) -> bool {
    matches!(v.kind, Kind::UseAfterFree | Kind::DoubleFree | Kind::OwnKvMisplaced)
}

/// A leak: a stale read, or a rejected prompt answered 200. A rejected prompt answered 500 after
/// decode's waiting timeout (a fixed build behind mini_lb) is refused, not leaked.
fn is_leak(v: &kvsim::check::Violation) -> bool {
    matches!(v.kind, Kind::CrossTenantRead | Kind::UninitializedRead | Kind::CrossRequestRead)
        || (v.kind == Kind::WrongStatus && v.cause == "rejected_answered_200")
}
