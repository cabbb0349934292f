//! A small arbitrary scenario, run with the model's invariants checked after every event: a
//! panic is a kvsim bug. See `kvsim::fuzz_targets::scenario_run`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kvsim::fuzz_targets::scenario_run(data);
});
