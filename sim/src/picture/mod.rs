//! Pictures of a run: Chrome trace-event JSON for Perfetto, and an SVG page map with request
//! lanes.

pub mod lanes;
pub mod perfetto;
pub mod svg;
