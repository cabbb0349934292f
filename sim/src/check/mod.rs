//! The oracle: checks every KV read, write and free the model performs, and the liveness of the
//! run at its end. A violation is data (an outcome of the modelled engine), never a panic.

pub mod liveness;
pub mod oracle;
pub use oracle::{Kind, Oracle, ReadSummary, Tally, Violation};
pub mod matrix;
pub mod noninterference;
pub mod reference;
pub use reference::{Disagreement, Reference};
