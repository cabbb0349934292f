//! Bytes as a kvsim JSON Lines trace: header, records, footer, the replay filter and
//! `confirm::lower` on the memory log (no backend), never panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kvsim::fuzz_targets::parse_trace(data);
});
