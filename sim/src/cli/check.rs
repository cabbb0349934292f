//! `kvsim check PATH…` (the command engine teams put in CI) and `kvsim matrix PATH…` (which
//! defence would have stopped which bug). Both run scenarios' `[[expect]]` entries.

use kvsim::config::SimConfig;
use kvsim::report::exit;
use kvsim::scenario::{Overrides, Scenario};
use std::path::{Path, PathBuf};

/// Every `.toml` under the given files and directories, sorted.
pub fn collect(paths: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        let mut stack = vec![PathBuf::from(p)];
        if !Path::new(p).exists() {
            return Err(format!("{p}: no such file or directory"));
        }
        while let Some(x) = stack.pop() {
            if x.is_dir() {
                for e in std::fs::read_dir(&x).map_err(|e| format!("{}: {e}", x.display()))?.flatten() {
                    stack.push(e.path());
                }
            } else if x.extension().is_some_and(|e| e == "toml") {
                out.push(x);
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Parses a scenario file.
pub fn parse(path: &Path) -> Result<Scenario, String> {
    let name = path.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    Scenario::parse(&name, &text).map_err(|e| e.to_string())
}

/// Resolves an expectation's configuration.
pub fn resolve(sc: &Scenario, profile: Option<String>, set: Vec<(String, String)>) -> Result<SimConfig, String> {
    sc.resolve_with(&Overrides { profile, seed: None, set }, Some(&super::read_file)).map_err(|e| e.to_string())
}

pub fn run_check(paths: &[String]) -> i32 {
    let files = match collect(paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let mut rows = Vec::new();
    let (mut failed, mut skipped) = (0, 0);
    for f in &files {
        let sc = match parse(f) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
        };
        if sc.spec.expect.is_empty() {
            skipped += 1;
            continue;
        }
        for e in &sc.spec.expect {
            let cfg = match resolve(&sc, e.profile.clone(), e.set_pairs()) {
                Ok(c) => c,
                Err(err) => {
                    eprintln!("error: {} expectation `{}`: {err}", f.display(), e.name);
                    return exit::BAD_INPUT;
                }
            };
            let n = cfg.requests.len() + cfg.generator.as_ref().map_or(0, |g| g.requests as usize);
            if let Err(err) = e.validate(n) {
                eprintln!("error: {}: {err}", f.display());
                return exit::BAD_INPUT;
            }
            let profile = cfg.profile.clone();
            let mut w = kvsim::simulate(cfg.clone(), None, false);
            if e.needs_noninterference() {
                kvsim::check::noninterference::apply(&cfg, &mut w, None);
            }
            let miss = e.mismatches(&w);
            let set: Vec<String> = e.set_pairs().iter().map(|(k, v)| format!("{k}={v}")).collect();
            let result = if miss.is_empty() {
                "pass".to_string()
            } else {
                failed += 1;
                format!("FAIL: {}", miss.join("; "))
            };
            rows.push((f.display().to_string(), e.name.clone(), format!("{profile} {}", set.join(" ")), result));
        }
    }
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(7).max(7);
    println!("{:<w0$}  {:<10}  {:<w2$}  result", "scenario", "expect", "setting");
    for (s, e, p, r) in &rows {
        println!("{s:<w0$}  {e:<10}  {p:<w2$}  {r}");
    }
    println!(
        "{} expectation(s) in {} scenario(s): {} passed, {failed} failed{}",
        rows.len(),
        files.len() - skipped,
        rows.len() - failed,
        if skipped > 0 { format!("; {skipped} scenario(s) without [[expect]] skipped") } else { String::new() }
    );
    if failed > 0 {
        1
    } else {
        exit::CLEAN
    }
}

/// A mitigation as the knob settings that switch it on.
pub fn mitigation_knobs(name: &str) -> Option<Vec<(&'static str, &'static str)>> {
    Some(match name {
        "kv_checksum" => vec![("kv_checksum", "on")],
        "kv_canary" => vec![("kv_canary", "raise")],
        "page_tags" => vec![("page_tags", "on")],
        "coverage_check" => vec![("decode_commit_check", "coverage")],
        "deferred_release" => {
            vec![("decode_abort_release", "deferred"), ("prefill_abort_release", "hold_source_until_drained")]
        }
        "bounded_batches" => vec![("max_transfer_batch_pages", "64"), ("transfer_timeout_semantics", "quiesced")],
        _ => return None,
    })
}

pub const ALL_MITIGATIONS: &str = "kv_checksum,kv_canary,page_tags,coverage_check,deferred_release,bounded_batches";

/// The matrix as text: one row per scenario with a `buggy` expectation.
pub fn matrix_text(paths: &[String], mitigations: &str) -> Result<String, String> {
    let mits: Vec<&str> = mitigations.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    for m in &mits {
        if mitigation_knobs(m).is_none() {
            return Err(format!("--mitigations: unknown `{m}` (known: {ALL_MITIGATIONS})"));
        }
    }
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for f in collect(paths)? {
        let sc = parse(&f)?;
        let Some(buggy) = sc.spec.expect.iter().find(|e| e.name == "buggy") else { continue };
        let mut targets: Vec<String> = buggy
            .violations
            .iter()
            .chain(buggy.requests.values().flatten())
            .filter(|k| kvsim::check::Kind::parse(k).is_some_and(|k| !k.is_liveness() && k.name() != "wrong_status"))
            .cloned()
            .collect();
        // The question is whether the leak (the read) was stopped; the mechanism (a late write)
        // may still happen under a read-side defence.
        const READS: [&str; 3] = ["cross_tenant_read", "cross_request_read", "uninitialized_read"];
        if targets.iter().any(|k| READS.contains(&k.as_str())) {
            targets.retain(|k| READS.contains(&k.as_str()));
        }
        let name = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let mut cells = Vec::new();
        for m in &mits {
            let mut set = buggy.set_pairs();
            for (k, v) in mitigation_knobs(m).expect("checked") {
                set.retain(|(x, _)| x != k);
                set.push((k.to_string(), v.to_string()));
            }
            let cfg = resolve(&sc, buggy.profile.clone(), set)?;
            let w = kvsim::simulate(cfg, None, false);
            let still = targets.iter().any(|k| w.oracle.counts.keys().any(|x| x.name() == k));
            let caught: Vec<u16> =
                w.reqs.iter().filter(|r| r.caught_by.is_some()).filter_map(|r| r.response.map(|x| x.status)).collect();
            let cell = if targets.is_empty() {
                let liveness = buggy.violations.iter().all(|k| !w.oracle.counts.keys().any(|x| x.name() == k));
                if liveness {
                    "prevented".to_string()
                } else {
                    "missed".to_string()
                }
            } else if still {
                "missed".to_string()
            } else if let Some(s) = caught.first() {
                format!("detected ({s})")
            } else {
                "prevented".to_string()
            };
            cells.push(cell);
        }
        rows.push((name, cells));
    }
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
    let wc = mits.iter().map(|m| m.len()).max().unwrap_or(8).max(14);
    let mut s = format!("{:<w0$}", "bug");
    for m in &mits {
        s.push_str(&format!("  {m:<wc$}"));
    }
    s.push('\n');
    for (name, cells) in &rows {
        s.push_str(&format!("{name:<w0$}"));
        for c in cells {
            s.push_str(&format!("  {c:<wc$}"));
        }
        s.push('\n');
    }
    s.push_str("prevented: the violation did not occur and no request failed · detected (S): it did not occur because the mitigation failed the request with HTTP S · missed: it still occurred\n");
    Ok(s)
}

pub fn run_matrix(paths: &[String], mitigations: &str) -> i32 {
    match matrix_text(paths, mitigations) {
        Ok(t) => {
            print!("{t}");
            exit::CLEAN
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::BAD_INPUT
        }
    }
}
