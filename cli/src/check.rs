//! `kvsim check PATH…` (the command engine teams put in CI) and `kvsim matrix PATH…` (which
//! defence would have stopped which bug). Both run scenarios' `[[expect]]` entries.

use kvsim::config::SimConfig;
use kvsim::report::exit;
use kvsim::scenario::{Overrides, Scenario};
use std::path::{Path, PathBuf};

/// The scenario files the arguments name, sorted: a file named explicitly is a scenario whatever
/// its extension (its parse says so when it is not one), a directory gives every `.toml` under it.
/// An argument that gives no file is an error, not an empty run: a CI job pointing `kvsim check`
/// at a mistyped or emptied directory must not pass with "0 failed".
pub fn collect(paths: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if !Path::new(p).exists() {
            return Err(format!("{p}: no such file or directory"));
        }
        let root = PathBuf::from(p);
        if !root.is_dir() {
            out.push(root);
            continue;
        }
        let before = out.len();
        let mut stack = vec![root];
        while let Some(x) = stack.pop() {
            if x.is_dir() {
                for e in std::fs::read_dir(&x).map_err(|e| format!("{}: {e}", x.display()))?.flatten() {
                    // A link to a folder is not followed (a link to `.` would loop forever).
                    if e.file_type().is_ok_and(|t| t.is_symlink()) && e.path().is_dir() {
                        continue;
                    }
                    stack.push(e.path());
                }
            } else if x.extension().is_some_and(|e| e == "toml") {
                out.push(x);
            }
        }
        if out.len() == before {
            return Err(format!("{p}: no scenario files (*.toml) in this directory"));
        }
    }
    out.sort();
    out.dedup();
    // One file by two names (a link, `./x` beside `x`) is checked once, by the first name.
    let mut kept: Vec<PathBuf> = Vec::with_capacity(out.len());
    for p in out {
        if !kept.iter().any(|k| super::same_file(k, &p)) {
            kept.push(p);
        }
    }
    Ok(kept)
}

/// Parses a scenario file.
pub fn parse(path: &Path) -> Result<Scenario, String> {
    let name = path.to_string_lossy().into_owned();
    // Read and named as `kvsim run` reads them (an empty file, a trace).
    let text = super::scenario_text(&name).map_err(|e| format!("{name}: {e}"))?;
    Scenario::parse(&name, &text).map_err(|e| e.to_string())
}

/// Resolves an expectation's configuration.
pub fn resolve(sc: &Scenario, profile: Option<String>, set: Vec<(String, String)>) -> Result<SimConfig, String> {
    sc.resolve_with(&Overrides { profile, seed: None, set }, Some(&super::read_file)).map_err(|e| e.to_string())
}

/// The `i`-th `[[expect]]` entry of `sc` resolved with its `profile` and `set`; an error names the
/// file, the entry's line and its field (`profile`, `set`), not the command-line flags that
/// `kvsim run` would take for them.
fn resolve_expectation(sc: &Scenario, f: &Path, i: usize) -> Result<SimConfig, String> {
    let e = &sc.spec.expect[i];
    let o = Overrides { profile: e.profile.clone(), seed: None, set: e.set_pairs() };
    sc.resolve_with(&o, Some(&super::read_file)).map_err(|err| {
        // A file that fails on its own is the file's error, named at its own line, whatever the
        // entry's overrides made of it (a pool out of range was blamed on an entry's `profile`
        // line, through the override that resolving with the entry calls `--profile`).
        if let Err(own) = sc.resolve_with(&Overrides::default(), Some(&super::read_file)) {
            return own.to_string();
        }
        let (key, what) = match err.file.as_str() {
            "--set" => ("set", format!("`{}`: {}", err.key.trim_start_matches("knobs."), err.message)),
            "--profile" => ("profile", err.message.clone()),
            // The file's line, caused by the entry's page size (resolving calls the entry's
            // overrides `--set` and `--profile`): the entry is at fault, named as such.
            _ if err.message.contains("(page_size ") && (e.profile.is_some() || !o.set.is_empty()) => {
                let m = err.to_string().replace("`--set page_size`", "the entry's `set`");
                let m = match &e.profile {
                    Some(p) => m.replace(&format!("from `--profile {p}`"), "from the entry's `profile`"),
                    None => m,
                };
                // The hint in an entry's terms: `set = { page_size = N }`, not the flag.
                let m = match m.split_once("with `--set page_size=") {
                    Some((head, tail)) => match tail.split_once('`') {
                        Some((n, rest)) => format!("{head}with `set = {{ page_size = {n} }}` in the entry{rest}"),
                        None => m.clone(),
                    },
                    None => m,
                };
                let key = if m.contains("the entry's `set`") { "set" } else { "profile" };
                return expectation_error(sc, f, i, key, &m);
            }
            _ => return format!("{err} (with [[expect]] `{}`)", e.name),
        };
        expectation_error(sc, f, i, key, &what)
    })
}

/// A scenario file's `[[expect]]` entries, checked as `kvsim check` checks them, for a command
/// that runs the file (`run`, `shrink`): an entry `check` refuses makes the file bad input there
/// too. A file that does not parse as a scenario with entries is the caller's to judge.
pub fn expectations_ok(path: &str) -> Result<(), String> {
    match parse(Path::new(path)).ok().filter(|sc| !sc.spec.expect.is_empty()) {
        Some(sc) => validate_expectations(&sc, Path::new(path)),
        None => Ok(()),
    }
}

/// Every `[[expect]]` entry of `sc` resolved and validated as `kvsim check` does (before `kvsim
/// explore --catalogue` prints anything: it printed its table's header, then an error without
/// the entry's line).
pub fn validate_expectations(sc: &Scenario, f: &Path) -> Result<(), String> {
    for (i, e) in sc.spec.expect.iter().enumerate() {
        // Entries are named in tables and picked by name (`matrix` and `explore --catalogue` read
        // `buggy`): two of one name could not be told apart (matrix took one of two `buggy`
        // entries without a word, and `run` and `shrink` accepted the file).
        if let Some(j) = sc.spec.expect[..i].iter().position(|x| x.name == e.name) {
            return Err(expectation_error(
                sc,
                f,
                i,
                "name",
                &format!("`expect[{j}]` has this name too: names must differ"),
            ));
        }
        let cfg = resolve_expectation(sc, f, i)?;
        e.validate(super::fuzz::case_requests(&cfg))
            .map_err(|err| expectation_error(sc, f, i, err.field(), &err.message()))?;
    }
    Ok(())
}

/// An error about field `key` of the `i`-th `[[expect]]` entry (its `name` line when `key` is
/// empty or not written).
fn expectation_error(sc: &Scenario, f: &Path, i: usize, key: &str, message: &str) -> String {
    let line = kvsim::scenario::locate(&sc.text, "expect", i, key)
        .or_else(|| kvsim::scenario::locate(&sc.text, "expect", i, "name"));
    let field = if key.is_empty() { String::new() } else { format!(".{key}") };
    format!(
        "{}{}: `expect[{i}]{field}` (`{}`): {message}",
        f.display(),
        line.map_or(String::new(), |l| format!(":{l}")),
        sc.spec.expect[i].name
    )
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
    // The command that shows each failed entry's run, as every other failure kvsim reports has one.
    let mut reproduce: Vec<(String, String)> = Vec::new();
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
            // Still a scenario: a broken one is bad input, not "nothing to check" (an unknown knob
            // hid behind that message).
            if let Err(e) = resolve(&sc, None, Vec::new()) {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
            skipped += 1;
            continue;
        }
        // Every entry checked (names, resolution, fields) before any runs, as `run`, `matrix`
        // and `explore --catalogue` check them.
        if let Err(err) = validate_expectations(&sc, f) {
            eprintln!("error: {err}");
            return exit::BAD_INPUT;
        }
        for (i, e) in sc.spec.expect.iter().enumerate() {
            let cfg = match resolve_expectation(&sc, f, i) {
                Ok(c) => c,
                Err(err) => {
                    eprintln!("error: {err}");
                    return exit::BAD_INPUT;
                }
            };
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
                let mut cmd = format!("kvsim run {} --profile {}", kvsim::shell_path(f), kvsim::shell_word(&profile));
                for s in &set {
                    cmd.push_str(&format!(" --set {}", kvsim::shell_word(s)));
                }
                if e.needs_noninterference() {
                    cmd.push_str(" --check noninterference");
                }
                reproduce.push((e.name.clone(), cmd));
                format!("FAIL: {}", miss.join("; "))
            };
            rows.push((f.display().to_string(), e.name.clone(), format!("{profile} {}", set.join(" ")), result));
        }
    }
    if rows.is_empty() {
        eprintln!(
            "error: {}: no [[expect]] entries in {} scenario file(s): nothing to check",
            paths.join(" "),
            files.len()
        );
        return exit::BAD_INPUT;
    }
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
    let w1 = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(6).max(6);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(7).max(7);
    println!("{:<w0$}  {:<w1$}  {:<w2$}  result", "scenario", "expect", "setting");
    for (s, e, p, r) in &rows {
        println!("{s:<w0$}  {e:<w1$}  {p:<w2$}  {r}");
    }
    println!(
        "{} expectation(s) in {} scenario(s): {} passed, {failed} failed{}",
        rows.len(),
        files.len() - skipped,
        rows.len() - failed,
        if skipped > 0 { format!("; {skipped} scenario(s) without [[expect]] skipped") } else { String::new() }
    );
    for (name, cmd) in &reproduce {
        println!("reproduce `{name}`: {cmd}");
    }
    if failed > 0 {
        1
    } else {
        exit::CLEAN
    }
}

/// Each file's row name: its stem, or, where two files share a stem (`a/full.toml`, `b/full.toml`),
/// its path without the extension, so that no two rows read alike.
pub fn row_names(files: &[std::path::PathBuf]) -> Vec<String> {
    let stem = |f: &std::path::PathBuf| {
        f.file_stem().map_or_else(|| f.display().to_string(), |s| s.to_string_lossy().into_owned())
    };
    let stems: Vec<String> = files.iter().map(stem).collect();
    files
        .iter()
        .zip(&stems)
        .map(|(f, s)| {
            if stems.iter().filter(|t| *t == s).count() > 1 {
                f.with_extension("").display().to_string()
            } else {
                s.clone()
            }
        })
        .collect()
}

/// The matrix as text: one row per scenario with a `buggy` expectation; every mitigation the
/// library knows unless `--mitigations` names some.
/// With the matrix's text, whether every `buggy` entry held without a mitigation.
pub fn matrix_text(paths: &[String], mitigations: Option<&str>) -> Result<(String, bool), String> {
    use kvsim::check::matrix::{Matrix, Mitigation};
    let mits =
        mitigations.map_or_else(|| Ok(Mitigation::ALL.to_vec()), Mitigation::parse_list).map_err(|e| e.to_string())?;
    let mut m = Matrix::new(mits);
    let files = collect(paths)?;
    let mut skipped = Vec::new();
    let mut reproduce = Vec::new();
    for (f, name) in files.iter().zip(row_names(&files)) {
        let sc = parse(f)?;
        // Every entry checked as `kvsim check` checks it, its line named.
        validate_expectations(&sc, f)?;
        if !sc.spec.expect.iter().any(|e| e.name == "buggy") {
            // No row, but still a scenario: a broken one is bad input, not silently dropped.
            resolve(&sc, None, Vec::new())?;
            skipped.push(f.display().to_string());
        }
        // The row's property is its `buggy` entry's kinds (checked above as `kvsim check` checks
        // them): it must name a violation (a mitigation "prevents" nothing else).
        if let Some(b) = sc.spec.expect.iter().find(|e| e.name == "buggy") {
            if b.violations.is_empty() && b.requests.values().all(Vec::is_empty) {
                return Err(format!(
                    "{}: expectation `buggy` names no violation kind (`violations` or `requests`): the matrix row would have no property",
                    f.display()
                ));
            }
        }
        let unheld = m.unheld.len();
        m.add(&name, &sc, Some(&super::read_file)).map_err(|e| e.to_string())?;
        if m.unheld.len() > unheld {
            reproduce.push(format!("reproduce `{name}`: kvsim check {}", kvsim::shell_path(f)));
        }
    }
    if m.rows.is_empty() && m.unheld.is_empty() {
        return Err(format!(
            "{}: no scenario with a `buggy` expectation in {} file(s): the matrix has no row",
            paths.join(" "),
            files.len()
        ));
    }
    if !skipped.is_empty() {
        let more = if skipped.len() > 3 { format!(", … ({} in all)", skipped.len()) } else { String::new() };
        eprintln!(
            "note: {} file(s) without a `buggy` expectation skipped: {}{more}",
            skipped.len(),
            skipped.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let mut text = m.text();
    for r in &reproduce {
        text.push_str(r);
        text.push('\n');
    }
    Ok((text, m.unheld.is_empty()))
}

pub fn run_matrix(paths: &[String], mitigations: Option<&str>) -> i32 {
    match matrix_text(paths, mitigations) {
        Ok((t, held)) => {
            print!("{t}");
            if held {
                exit::CLEAN
            } else {
                // As `kvsim check` on the entry: a mismatch.
                1
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::BAD_INPUT
        }
    }
}
