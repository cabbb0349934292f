//! What kvsim reads and writes: scenario files and their schema, the trace (records, hash,
//! JSONL reader and writer), workload traces, the run report and the XML/HTML escaper.

pub mod report;
pub mod scenario;
pub mod scenario_doc;
pub mod trace;
pub mod tracefile;
pub mod workload_trace;
pub mod xml;

/// JSON text read as `T`, for every JSON file kvsim reads back (trace lines, campaign and
/// checkpoint files, saved failures): an error names the field it is in (`config.knobs.page_size:
/// invalid type…`), which serde_json's own message does not (it gives a column). The path is only
/// worked out when the plain parse fails, so good input costs one parse.
pub fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|plain| {
        let mut de = serde_json::Deserializer::from_str(text);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Err(e) if e.path().to_string() != "." => format!("field `{}`: {}", e.path(), e.inner()),
            _ => plain.to_string(),
        }
    })
}
