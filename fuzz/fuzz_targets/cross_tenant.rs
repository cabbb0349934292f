//! libFuzzer as a bug finder for one engine profile: a finding is a scenario in which a request
//! reads another tenant's KV. The profile is `KVSIM_FUZZ_PROFILE` at run time, else the value it
//! had at build time, else sglang-0.5.16 (where the stub leak is found within seconds). A finding
//! prints the scenario as a TOML file that `kvsim run` reproduces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn profile() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| {
        let p = std::env::var("KVSIM_FUZZ_PROFILE")
            .ok()
            .or_else(|| option_env!("KVSIM_FUZZ_PROFILE").map(str::to_string))
            .unwrap_or_else(|| kvsim::fuzz_targets::DEFAULT_PROFILE.to_string());
        if kvsim::config::profile(&p).is_none() {
            eprintln!("KVSIM_FUZZ_PROFILE={p}: unknown profile (known: {})", kvsim::config::profile_names());
            std::process::exit(2);
        }
        p
    })
}

fuzz_target!(|data: &[u8]| {
    let p = profile();
    if kvsim::fuzz_targets::cross_tenant(data, p) {
        if let Some(cfg) = kvsim::fuzz_targets::cross_tenant_scenario_of(data, p) {
            let note = format!("cross_tenant finding under {p}; run: kvsim run THIS.toml");
            eprintln!("{}", kvsim::scenario::to_toml(&cfg, &note));
        }
        panic!("cross_tenant_read under profile {p}");
    }
});
