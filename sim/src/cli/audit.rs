//! `kvsim audit LOG… [--role prefill|decode]… [--profile NAME] [--scenario-out FILE]`.
//! Exit 0: no gap; 10: a gap that leaks under the profile; 11: a gap that does not leak
//! (the requests are refused); 2: bad input.

use kvsim::audit::{self, parse};
use kvsim::check::Kind;
use kvsim::report::exit;
use kvsim::scenario::{Overrides, Scenario};

pub fn run(logs: &[String], roles: &[String], profile: &str, out: &str) -> i32 {
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
    let mut files = Vec::new();
    for (i, path) in logs.iter().enumerate() {
        let role = match roles.get(if roles.len() == 1 { 0 } else { i }).map(String::as_str) {
            None => None,
            Some("prefill") => Some(parse::Role::Prefill),
            Some("decode") => Some(parse::Role::Decode),
            Some(r) => return bad(format!("--role {r}: expected prefill or decode")),
        };
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return bad(format!("{path}: cannot read: {e}")),
        };
        let text = String::from_utf8_lossy(&bytes);
        match parse::parse_log(path, &text) {
            Ok(f) => files.push((path.clone(), f, role)),
            Err(e) => return bad(e.to_string()),
        }
    }
    let a = audit::analyse(&files);
    print!("{}", audit::node_table(&a));
    for n in &a.notes {
        println!("note: {n}");
    }
    let unknown_roles = a.nodes.iter().filter(|n| n.role == parse::Role::Unknown).count();
    if unknown_roles > 0 {
        println!(
            "note: {unknown_roles} node(s) with no disaggregation role in the log; pass --role prefill|decode per file"
        );
    }
    if a.prefill().next().is_none() {
        return bad("no prefill node found: pass --role prefill for the prefill logs".into());
    }
    if !a.has_gap() {
        if a.prefill().any(|n| n.band.is_none() && n.max_req_input_len.is_none()) {
            return bad("a prefill node's pool or context length is unknown: cannot tell whether there is a gap".into());
        }
        println!("verdict: no gap — every prefill pool holds any prompt the context admits (exit 0)");
        return exit::CLEAN;
    }
    let sources = logs.join(", ");
    let Some(text) = audit::scenario(&a, &sources) else {
        return bad("pools or context length unknown: cannot build a scenario".into());
    };
    if let Err(e) = std::fs::write(out, &text) {
        return bad(format!("{out}: cannot write: {e}"));
    }
    let sc = match Scenario::parse(out, &text) {
        Ok(s) => s,
        Err(e) => return bad(format!("generated scenario is invalid (a kvsim bug): {e}")),
    };
    let cfg = match sc.resolve(&Overrides { profile: Some(profile.to_string()), ..Default::default() }) {
        Ok(c) => c,
        Err(e) => return bad(e.to_string()),
    };
    let w = kvsim::simulate(cfg.clone(), None, false);
    let leaked: Vec<_> = w
        .oracle
        .violations
        .iter()
        .filter(|v| matches!(v.kind, Kind::CrossTenantRead | Kind::UninitializedRead | Kind::WrongStatus))
        .collect();
    println!("scenario written to {out}");
    println!("reproduce: kvsim run {out} --seed {} --profile {}", cfg.seed, cfg.profile);
    if leaked.is_empty() {
        let statuses: std::collections::BTreeSet<u16> =
            w.reqs.iter().filter(|r| r.tenant.0 == 1).filter_map(|r| r.response.map(|x| x.status)).collect();
        println!(
            "verdict: GAP, but it does not leak under {profile}: the probes were refused (HTTP {statuses:?}) (exit 11)"
        );
        return exit::LIVENESS;
    }
    let kinds: std::collections::BTreeSet<&str> = leaked.iter().map(|v| v.kind.name()).collect();
    println!(
        "verdict: GAP LEAKS under {profile}: {} violation(s) ({}) for prompts in the band (exit 10)",
        leaked.len(),
        kinds.into_iter().collect::<Vec<_>>().join(", ")
    );
    exit::SAFETY
}
