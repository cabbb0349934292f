//! Pictures of a run: Chrome trace-event JSON for Perfetto, and an SVG page map.

pub mod perfetto;
pub mod svg;
