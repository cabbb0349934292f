//! Perfetto / Chrome trace-event JSON of a run.

#[cfg(test)]
mod tests {
    use crate::scenario::{Overrides, Scenario};

    #[test]
    #[ignore]
    fn dump() {
        for rel in ["small/stub-leak.toml", "small/mixed-faults.toml", "glm53-incident.toml"] {
            let path = format!("{}/../scenarios/{rel}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let sc = Scenario::parse(rel, &text).unwrap();
            let o = Overrides { profile: None, seed: None, set: vec![] };
            let cfg = sc.resolve(&o).unwrap();
            let t = std::time::Instant::now();
            let w = crate::simulate_collect(cfg, false);
            let recs = w.tracer.collected.as_ref().unwrap();
            eprintln!("{rel}: {} records {:?} violations {}", recs.len(), t.elapsed(), w.oracle.violations.len());
            let mut s = String::new();
            for (at, r) in recs {
                s.push_str(&format!("{} {}\n", at.0, serde_json::to_string(r).unwrap()));
            }
            for v in &w.oracle.violations {
                s.push_str(&format!("V {}\n", serde_json::to_string(v).unwrap()));
            }
            std::fs::write(format!("/tmp/{}.jsonl", rel.replace('/', "_")), s).unwrap();
        }
    }
}
