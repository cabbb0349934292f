//! An SVG page map of a run.
