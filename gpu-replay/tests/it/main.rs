//! Integration tests of kvsim-gpu: one binary, one module per area.

mod format;
mod nvrtc;
mod props;
mod scenarios;
mod select;
