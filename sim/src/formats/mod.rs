//! What kvsim reads and writes: scenario files and their schema, the trace (records, hash,
//! JSONL reader and writer), workload traces, the run report and the XML/HTML escaper.

pub mod report;
pub mod scenario;
pub mod scenario_doc;
pub mod trace;
pub mod tracefile;
pub mod workload_trace;
pub mod xml;
