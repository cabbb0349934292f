//! Bytes as an engine start-up log through `kvsim audit`'s parser and analysis; a scenario the
//! audit generates must resolve. Never panics otherwise.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kvsim::fuzz_targets::parse_audit_log(data);
});
