//! Writes the scenario a `scenario_run` or `cross_tenant` input decodes to, as a TOML file that
//! `kvsim run` reproduces (same configuration, same trace hash):
//!
//!   cargo run --manifest-path fuzz/Cargo.toml --example to_scenario -- scenario_run INPUT > repro.toml
//!   cargo run --manifest-path fuzz/Cargo.toml --example to_scenario -- cross_tenant INPUT [PROFILE] > repro.toml
//!   kvsim run repro.toml

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (target, input) = match (args.first(), args.get(1)) {
        (Some(t), Some(i)) => (t.as_str(), i.as_str()),
        _ => {
            eprintln!("usage: to_scenario scenario_run|cross_tenant INPUT [PROFILE]");
            std::process::exit(2);
        }
    };
    let data = std::fs::read(input).unwrap_or_else(|e| {
        eprintln!("{input}: {e}");
        std::process::exit(2);
    });
    let cfg = match target {
        "scenario_run" => kvsim::fuzz_targets::scenario_of(&data),
        "cross_tenant" => {
            let p = args.get(2).map_or(kvsim::fuzz_targets::DEFAULT_PROFILE, String::as_str);
            kvsim::fuzz_targets::cross_tenant_scenario_of(&data, p).unwrap_or_else(|| {
                eprintln!("unknown profile {p}{}", kvsim::config::unknown_profile_hint(p));
                std::process::exit(2);
            })
        }
        t => {
            eprintln!("{t}: expected scenario_run or cross_tenant");
            std::process::exit(2);
        }
    };
    print!("{}", kvsim::scenario::to_toml(&cfg, &format!("{target} input {input}")));
}
