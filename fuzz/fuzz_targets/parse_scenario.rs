//! Bytes as a TOML scenario file: `Scenario::parse` and `resolve` return errors, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kvsim::fuzz_targets::parse_scenario(data);
});
