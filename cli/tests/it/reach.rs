//! `kvsim reach`: the table of catalogue rows a campaign reaches, its exit status, bad input.

use std::process::Command;

fn kvsim(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_kvsim")).args(args).output().expect("runs");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The table line of a row.
fn line<'a>(out: &'a str, row: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(&format!("| {row} |"))).unwrap_or_else(|| panic!("no line for {row}:\n{out}"))
}

/// sglang-0.5.22 has five rows (sync-timeout-still-writing since it took the released call that
/// returns on its timeout while writing; deferred-release-defeated and decode-free-before-late-write
/// through the release's partial fixes, its drain acknowledgement and its deferred release's
/// fallback); the campaign stops once all are reached (exit 0), names the run, seed and vanished
/// signature, and marks the rows it cannot have. The same arguments print the same table.
#[test]
fn a_profile_campaign_reaches_its_rows_and_stops() {
    let (code, out, err) = kvsim(&["reach", "--profile", "sglang-0.5.22", "--runs", "2000", "--progress", "0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let rw = line(&out, "router-waits-for-decode");
    assert!(rw.contains("| yes |") && rw.contains("wrong_status/rejected_answered_5xx"), "{rw}");
    assert!(line(&out, "cross-tenant-prefix-hit").contains("| yes |"), "{out}");
    let st = line(&out, "sync-timeout-still-writing");
    assert!(st.contains("| yes |") && st.contains("/sync_timeout"), "{st}");
    let dr = line(&out, "deferred-release-defeated");
    assert!(dr.contains("| yes |") && dr.contains("transfer_read_of_a_source_page"), "{dr}");
    let df = line(&out, "decode-free-before-late-write");
    assert!(df.contains("| yes |") && df.contains("use_after_free/transfer_write"), "{df}");
    assert!(line(&out, "stub-admission").contains("cannot have it"), "{out}");
    assert!(out.contains("5 of 5 measured row(s) reached"), "{out}");
    let runs: u64 =
        out.split(", ").nth(1).and_then(|x| x.split(' ').next()).and_then(|n| n.parse().ok()).expect("runs");
    assert!(runs < 2000, "stopped early: {out}");
    let again = kvsim(&["reach", "--profile", "sglang-0.5.22", "--runs", "2000", "--progress", "0"]).1;
    let table = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(table(&out), table(&again));
}

/// Too few runs to reach every row: exit 1, the open rows say so.
#[test]
fn an_unreached_row_fails_the_campaign() {
    let (code, out, err) = kvsim(&["reach", "--profile", "sglang-0.5.16", "--runs", "3", "--progress", "0"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(line(&out, "sync-timeout-still-writing").contains("not reached in 3 runs"), "{out}");
}

#[test]
fn an_unknown_profile_is_bad_input() {
    let (code, _, err) = kvsim(&["reach", "--profile", "sglang-9", "--runs", "1"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--profile sglang-9: unknown") && err.contains("sglang-0.5.22"), "{err}");
    let (code, _, err) = kvsim(&["reach", "--hardware-faults", "--runs", "1"]);
    assert_eq!(code, Some(2), "{err}");
}
