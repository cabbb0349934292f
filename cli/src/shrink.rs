//! `kvsim shrink INPUT`: reduce a failing scenario (a scenario file, a trace, or a saved failure
//! directory) to a small scenario with the same signature, written with a header comment that
//! says where it came from and how to reproduce it.

use kvsim::config::SimConfig;
use kvsim::report::exit;

#[derive(clap::Args, Debug, Clone)]
pub struct ShrinkOpts {
    /// A scenario file, a trace file (`--trace`) or a failure directory from `kvsim fuzz`.
    pub input: String,
    /// The signature to keep (default: the first cross-tenant one, else the first safety one).
    #[arg(long)]
    pub signature: Option<String>,
    /// Where to write the shrunk scenario.
    #[arg(long, default_value = "shrunk.toml")]
    pub out: String,
    /// At most this many simulation runs.
    #[arg(long, default_value_t = 3000)]
    pub budget: u32,
    #[command(flatten)]
    pub opts: super::RunOpts,
}

/// Loads a configuration from a scenario, a trace header or a failure directory.
pub fn load_any(input: &str, opts: &super::RunOpts) -> Result<SimConfig, String> {
    let p = std::path::Path::new(input);
    let path = if p.is_dir() { format!("{}/scenario.toml", input.trim_end_matches('/')) } else { input.to_string() };
    if path.ends_with(".jsonl") {
        let reader = super::tracefile::open(&path, kvsim::tracefile::ReadOptions { any_version: true })
            .map_err(|e| e.to_string())?;
        return Ok(reader.header.config);
    }
    super::load(&path, opts).map_err(|e| e.to_string())
}

/// Picks the signature to shrink for.
pub fn pick_signature(sigs: &std::collections::BTreeSet<String>) -> Option<String> {
    sigs.iter()
        .find(|s| s.starts_with("cross_tenant_read/"))
        .or_else(|| sigs.iter().find(|s| kvsim::fuzz::is_safety(s)))
        .or_else(|| sigs.iter().next())
        .cloned()
}

/// Shrinks and renders the output file; returns (text, summary line).
pub fn shrink_to_text(cfg: &SimConfig, sig: &str, budget: u32, origin: &str) -> (String, kvsim::shrink::Shrunk) {
    let s = kvsim::shrink::shrink(cfg, sig, budget);
    let tenants: std::collections::BTreeSet<u32> = s.cfg.requests.iter().map(|r| r.tenant).collect();
    let header = format!(
        "Shrunk by kvsim shrink from {origin} (seed {}, profile {}).\nSignature: {sig}\nNecessary knobs: {}\n{} request(s), {} tenant(s), {} prefill and {} decode node(s); {} runs, {} accepted.\nReproduce: kvsim run <this file>",
        cfg.seed,
        cfg.profile,
        if s.necessary_knobs.is_empty() { "none of the behaviour knobs".to_string() } else { s.necessary_knobs.join(", ") },
        s.cfg.requests.len(),
        tenants.len(),
        s.cfg.prefill.len(),
        s.cfg.decode.len(),
        s.runs,
        s.accepted
    );
    let mut out = s.cfg.clone();
    out.name = format!("{}-shrunk", cfg.name);
    (kvsim::scenario::to_toml(&out, &header), s)
}

pub fn run(o: &ShrinkOpts) -> i32 {
    let cfg = match load_any(&o.input, &o.opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let check = o.signature.as_deref().is_some_and(kvsim::fuzz::is_disagreement);
    let (_, sigs) = kvsim::fuzz::run_case_checked(cfg.clone(), check);
    let sig = match (&o.signature, pick_signature(&sigs)) {
        (Some(s), _) if sigs.contains(s) => s.clone(),
        (Some(s), _) => {
            eprintln!("error: {}: the run does not show signature `{s}` (it shows: {sigs:?})", o.input);
            return exit::BAD_INPUT;
        }
        (None, Some(s)) => s,
        (None, None) => {
            eprintln!("{}: the run is clean; nothing to shrink", o.input);
            return exit::CLEAN;
        }
    };
    let (text, s) = shrink_to_text(&cfg, &sig, o.budget, &o.input);
    if let Err(e) = std::fs::write(&o.out, &text) {
        eprintln!("error: {}: {e}", o.out);
        return exit::BAD_INPUT;
    }
    let tenants: std::collections::BTreeSet<u32> = s.cfg.requests.iter().map(|r| r.tenant).collect();
    println!(
        "shrunk `{sig}` to {} request(s), {} tenant(s), {} prefill + {} decode node(s) in {} runs; necessary knobs: {}",
        s.cfg.requests.len(),
        tenants.len(),
        s.cfg.prefill.len(),
        s.cfg.decode.len(),
        s.runs,
        if s.necessary_knobs.is_empty() { "none".to_string() } else { s.necessary_knobs.join(", ") }
    );
    println!("written to {}\nreproduce: kvsim run {}", o.out, o.out);
    let (_, after) = kvsim::fuzz::run_case_checked(s.cfg, check);
    if after.iter().any(|x| kvsim::fuzz::is_disagreement(x)) {
        exit::ORACLE_DISAGREEMENT
    } else if after.iter().any(|x| kvsim::fuzz::is_safety(x)) {
        exit::SAFETY
    } else {
        exit::LIVENESS
    }
}
