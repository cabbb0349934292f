//! The serving model: the components of a disaggregated deployment (client, router, prefill
//! and decode nodes, the transfer worker, radix caches, pipeline stages), the memory they own
//! (`pool`, `extent`, `metadata`), the faults injected into them and `World`, the
//! discrete-event scheduler that wires them together. Pure: no files, threads or clock.
//!
//! No float decides anything in the model (probabilities are integer ratios, times integer
//! nanoseconds): a float computation here is refused by the lint below.

#![deny(clippy::float_arithmetic)]

pub mod client;
pub mod decode;
pub mod event;
pub mod extent;
pub mod faults;
pub mod incarnation;
pub mod intake;
pub mod latency;
pub mod lifecycle;
pub mod metadata;
pub mod node;
pub mod pool;
pub mod pp;
pub mod prefill;
pub mod prefix;
pub mod queue;
pub mod reqmap;
pub mod reqs;
pub mod rng;
pub mod router;
pub mod transfer;
pub mod world;
