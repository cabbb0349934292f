//! The repository carries everything its scenarios, tests, benches and examples read: a user's
//! clone has nothing beside it. `.ci/run` also runs the whole suite from a fresh clone in an empty
//! folder; these tests name the offending file when that would fail.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    crate::manifest_dir().join("..").canonicalize().unwrap()
}

/// Every file of the repository that a clone holds (build outputs and git's own folder excluded).
fn repo_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "artifacts" | "out" | "device-carry") {
                repo_files(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

#[test]
fn no_file_refers_to_a_folder_beside_the_repository() {
    // Built from pieces so that this file does not match itself.
    let needles = [["..", "/shared"].concat(), ["shared", "/data/"].concat(), ["shared", "/reference/"].concat()];
    let root = repo_root();
    let mut files = Vec::new();
    repo_files(&root, &mut files);
    assert!(files.len() > 100, "walked the repository: {} files", files.len());
    let mut offenders = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        for (i, line) in text.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n.as_str())) {
                offenders.push(format!("{}:{}: {}", f.strip_prefix(&root).unwrap().display(), i + 1, line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "files that read outside the repository:\n{}", offenders.join("\n"));
}

#[test]
fn every_scenario_trace_file_lies_inside_the_repository() {
    let root = repo_root();
    let mut checked = 0;
    for rel in crate::all_scenarios() {
        let path = crate::scenarios_dir().join(&rel);
        let text = std::fs::read_to_string(&path).unwrap();
        let spec: toml::Table = toml::from_str(&text).unwrap();
        let Some(file) = spec.get("trace").and_then(|t| t.get("file")).and_then(|f| f.as_str()) else { continue };
        let target = path.parent().unwrap().join(file).canonicalize().unwrap_or_else(|e| panic!("{rel}: {file}: {e}"));
        assert!(target.starts_with(&root), "{rel}: trace file {} is outside the repository", target.display());
        checked += 1;
    }
    assert!(checked >= 1, "the Mooncake scenario names a trace file");
}
