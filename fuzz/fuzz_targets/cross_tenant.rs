//! libFuzzer as a bug finder for one engine profile: a finding is a scenario in which a request
//! reads another tenant's KV by a mechanism not on the ignore list. A finding prints the scenario
//! as a TOML file that `kvsim run` reproduces, then aborts with the signatures.
//!
//! `KVSIM_FUZZ_PROFILE`: the profile (default sglang-0.5.16, where the stub leak shows in
//! seconds). `KVSIM_FUZZ_IGNORE`: mechanisms not to report, comma-separated (e.g.
//! `visibility_lag`: no profile defends against RDMA visibility lag). Each is read at run time,
//! else taken from its value at build time (how .clusterfuzzlite/build.sh makes one binary per
//! profile).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Settings {
    profile: String,
    ignore: Vec<String>,
}

fn setting(name: &str, built: Option<&'static str>) -> Option<String> {
    std::env::var(name).ok().or_else(|| built.map(str::to_string))
}

fn settings() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| {
        let profile = setting("KVSIM_FUZZ_PROFILE", option_env!("KVSIM_FUZZ_PROFILE"))
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| kvsim::fuzz_targets::DEFAULT_PROFILE.to_string());
        if kvsim::config::profile(&profile).is_none() {
            eprintln!("KVSIM_FUZZ_PROFILE={profile}: unknown profile{}", kvsim::config::unknown_profile_hint(&profile));
            std::process::exit(2);
        }
        let ignore = setting("KVSIM_FUZZ_IGNORE", option_env!("KVSIM_FUZZ_IGNORE"))
            .unwrap_or_default()
            .split(',')
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect();
        Settings { profile, ignore }
    })
}

fuzz_target!(|data: &[u8]| {
    let s = settings();
    let found: Vec<String> = kvsim::fuzz_targets::cross_tenant_signatures(data, &s.profile)
        .into_iter()
        .filter(|sig| !s.ignore.iter().any(|m| sig.rsplit('/').next() == Some(m.as_str())))
        .collect();
    if !found.is_empty() {
        if let Some(cfg) = kvsim::fuzz_targets::cross_tenant_scenario_of(data, &s.profile) {
            let note = format!(
                "cross_tenant finding under {}: {}\nreproduce: kvsim run THIS.toml",
                s.profile,
                found.join(", ")
            );
            eprintln!("{}", kvsim::scenario::to_toml(&cfg, &note));
        }
        panic!("{} under profile {}", found.join(", "), s.profile);
    }
});
