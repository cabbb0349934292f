//! Regression snapshots: every scenario under `scenarios/` rendered as its canonical text report
//! (outcomes, violations with their stories, trace hash), and the mitigation matrix of the
//! catalogue, compared with `snapshots/` at the repository root. CI runs with `CI=true`, so a
//! changed or missing snapshot fails. To review and accept a change, see README.md ("Snapshots").

use std::path::Path;

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots"));
    s.set_prepend_module_to_snapshot(false);
    s
}

#[test]
fn every_scenario_report() {
    for rel in crate::all_scenarios() {
        let cfg = crate::load(&rel, None, &[]);
        let repro = format!("kvsim run scenarios/{rel} --seed {} --profile {}", cfg.seed, cfg.profile);
        let w = kvsim::simulate(cfg, None, false);
        let text = kvsim::report::Report::build(&w, repro).text();
        let name = format!("report__{}", rel.trim_end_matches(".toml").replace('/', "__"));
        settings().bind(|| insta::assert_snapshot!(name, text));
    }
}

#[test]
fn mitigation_matrix() {
    let dir = crate::scenarios_dir().join("catalogue").to_string_lossy().into_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["matrix", &dir]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    settings().bind(|| insta::assert_snapshot!("mitigation_matrix", String::from_utf8_lossy(&out.stdout)));
}

#[test]
fn catalogue_expectations_hold() {
    let dir = crate::scenarios_dir().to_string_lossy().into_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim")).args(["check", &dir]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
    // A wrong expectation makes `kvsim check` fail with exit 1.
    let bad = std::env::temp_dir().join(format!("kvsim-check-{}.toml", std::process::id()));
    let src = std::fs::read_to_string(crate::scenarios_dir().join("catalogue/stub-admission.toml")).unwrap();
    std::fs::write(&bad, src.replace("\"2\" = 400 }", "\"2\" = 200 }")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["check", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL: request 2: expected HTTP 200, got 400"));
}
