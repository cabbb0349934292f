//! Command-line front end. Every failure prints how to reproduce it; exit statuses:
//! 0 clean, 2 bad input, 3 replay divergence / backend unavailable, 10 safety, 11 liveness.

use clap::{Parser, Subcommand};
use kvsim::config::{self, SimConfig};
use kvsim::report::{exit, Report};
use kvsim::scenario::{Overrides, Scenario, ScenarioError};

#[derive(Parser)]
#[command(
    name = "kvsim",
    version,
    about = "Deterministic simulator and fuzzer for disaggregated LLM serving: finds cross-tenant KV reads"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunOpts {
    /// Root seed (default: the scenario's `seed`, else 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Engine profile (default: the scenario's `profile`, else sglang-0.5.16).
    #[arg(long)]
    pub profile: Option<String>,
    /// Override a knob: --set page_size=64 (repeatable).
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    pub set: Vec<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario and report outcomes and violations.
    Run {
        scenario: String,
        #[command(flatten)]
        opts: RunOpts,
        /// Print one JSON object instead of the text report.
        #[arg(long)]
        json: bool,
        /// Run twice in this process and compare the trace hashes.
        #[arg(long)]
        check_determinism: bool,
    },
    /// List every engine profile and its knob values.
    Profiles,
}

/// Reads and resolves a scenario file; errors are printed with file, line and key.
pub fn load(path: &str, opts: &RunOpts) -> Result<SimConfig, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: path.to_string(),
        line: None,
        key: String::new(),
        message: format!("cannot read: {e}"),
    })?;
    let sc = Scenario::parse(path, &text)?;
    let mut set = Vec::new();
    for s in &opts.set {
        let Some((k, v)) = s.split_once('=') else {
            return Err(ScenarioError {
                file: "--set".into(),
                line: None,
                key: s.clone(),
                message: "expected KNOB=VALUE".into(),
            });
        };
        set.push((k.trim().to_string(), v.trim().to_string()));
    }
    sc.resolve(&Overrides {
        profile: opts.profile.clone(),
        seed: opts.seed,
        set,
    })
}

/// The exact command that reproduces a run.
pub fn reproduce_cmd(path: &str, cfg: &SimConfig, opts: &RunOpts) -> String {
    let mut s = format!(
        "kvsim run {path} --seed {} --profile {}",
        cfg.seed, cfg.profile
    );
    for kv in &opts.set {
        s.push_str(&format!(" --set {kv}"));
    }
    s
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::BAD_INPUT
            } else {
                exit::CLEAN
            };
        }
    };
    match cli.cmd {
        Cmd::Run {
            scenario,
            opts,
            json,
            check_determinism,
        } => cmd_run(&scenario, &opts, json, check_determinism),
        Cmd::Profiles => cmd_profiles(),
    }
}

fn cmd_run(path: &str, opts: &RunOpts, json: bool, check_determinism: bool) -> i32 {
    let cfg = match load(path, opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let repro = reproduce_cmd(path, &cfg, opts);
    let w = kvsim::simulate(cfg.clone(), None, false);
    let report = Report::build(&w, repro.clone());
    if check_determinism {
        let again = kvsim::simulate(cfg, None, false);
        let h2 = again.tracer.hash_hex();
        if h2 != report.trace_hash || again.events != report.events {
            eprintln!(
                "determinism check FAILED: first run {} ({} events), second run {} ({} events)\nreproduce: {repro} --check-determinism",
                report.trace_hash, report.events, h2, again.events
            );
            return exit::DIVERGED;
        }
        eprintln!(
            "determinism check passed: both runs hashed {} over {} events",
            h2, again.events
        );
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serialises")
        );
    } else {
        print!("{}", report.text());
    }
    report.exit_code
}

fn cmd_profiles() -> i32 {
    for p in config::PROFILES {
        println!("{}  — {}", p.name, p.summary);
        let t = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
        for (k, v) in t {
            println!("    {k:<34} {v}");
        }
        println!();
    }
    exit::CLEAN
}
