//! Integration tests of kvsim-gpu: one binary, one module per area.

mod emu;
mod format;
mod nvrtc;
mod props;
mod sampled;
mod scenarios;
mod select;
mod threads;
