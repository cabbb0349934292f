//! Regression snapshots: every scenario under `scenarios/` rendered as its canonical text report
//! (outcomes, violations with their stories, trace hash), and the mitigation matrix of the
//! catalogue, compared with `snapshots/` at the repository root. CI runs with `CI=true`, so a
//! changed or missing snapshot fails. To review and accept a change, see README.md ("Snapshots").

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(crate::manifest_dir().join("../snapshots"));
    s.set_prepend_module_to_snapshot(false);
    s
}

/// Scenarios too large for the reference oracle in a test run (it re-reads every read's whole
/// block table slot by slot: the full-scale incident and an hour of Mooncake traffic would take
/// hours). Their reports are still pinned; `kvsim run --check-oracle` checks them on demand.
const TOO_LARGE_TO_CHECK: [&str; 3] = ["glm53-fixed-config.toml", "glm53-incident.toml", "mooncake-conversation.toml"];

#[test]
fn every_scenario_report() {
    let mut checked = 0;
    for rel in crate::all_scenarios() {
        let cfg = crate::load(&rel, None, &[]);
        let repro = format!("kvsim run scenarios/{rel} --seed {} --profile {}", cfg.seed, cfg.profile);
        let mut w = if TOO_LARGE_TO_CHECK.contains(&rel.as_str()) {
            kvsim::simulate(cfg, None, false)
        } else {
            // The differential check: the fast and the reference oracle agree on every read.
            checked += 1;
            kvsim::simulate_checked(cfg, None, false)
        };
        if let Some(rf) = w.reference.take() {
            assert_eq!(rf.disagreement_count, 0, "{rel}: {:?}", rf.disagreements.first().map(|d| d.to_string()));
        }
        let text = kvsim::report::Report::build(&w, repro).text();
        let name = format!("report__{}", rel.trim_end_matches(".toml").replace('/', "__"));
        settings().bind(|| insta::assert_snapshot!(name, text));
    }
    assert!(checked >= 15, "{checked} scenario(s) checked");
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
