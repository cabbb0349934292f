//! `kvsim confirm TRACE_OR_FAILURE`: replays the trace's memory log for the violating reads on a
//! KV page backend (CPU reference or CUDA) and measures whose KV reached the attention output.
//! Exit 10 when any leak is confirmed, 0 when none, 3 when the backend is unavailable, 2 on bad
//! input.

use kvsim::confirm::{lower, LowerError, MemModel, Select};
use kvsim::report::exit;
use kvsim::trace::TraceRecord;
use kvsim::tracefile::{Footer, Header, Line};
use kvsim_gpu::{AttnShape, BackendChoice, Dtype, GpuError};
use std::io::BufRead;

#[derive(clap::Args, Debug, Clone)]
pub struct ConfirmOpts {
    /// A trace file (`kvsim run --trace`) or a saved failure directory holding `trace.jsonl`.
    pub input: String,
    #[arg(long, default_value = "auto")]
    pub backend: String,
    #[arg(long, default_value_t = 8)]
    pub heads: u32,
    #[arg(long, default_value_t = 2)]
    pub kv_heads: u32,
    #[arg(long, default_value_t = 64)]
    pub head_dim: u32,
    #[arg(long, default_value = "f16")]
    pub dtype: String,
    /// Confirm at most this many violating reads (earliest first).
    #[arg(long, default_value_t = 8)]
    pub max_reads: usize,
    /// Verdict threshold: a read is a confirmed leak when the foreign share of its attention
    /// weight exceeds this fraction.
    #[arg(long, default_value_t = 0.01)]
    pub threshold: f64,
    /// Confirm the last read of these requests instead of the violating reads (repeatable).
    #[arg(long)]
    pub request: Vec<u32>,
}

/// Verdict of one confirm run, for `fuzz --confirm`.
pub struct Verdict {
    pub confirmed: usize,
    pub reads: usize,
    pub backend: String,
    pub text: String,
}

pub fn run(o: &ConfirmOpts) -> i32 {
    match confirm(o) {
        Ok(v) => {
            print!("{}", v.text);
            if v.confirmed > 0 {
                exit::SAFETY
            } else {
                exit::CLEAN
            }
        }
        Err((code, msg)) => {
            eprintln!("error: {msg}");
            code
        }
    }
}

pub fn confirm(o: &ConfirmOpts) -> Result<Verdict, (i32, String)> {
    let bad = |m: String| (exit::BAD_INPUT, m);
    let path = if std::path::Path::new(&o.input).is_dir() {
        format!("{}/trace.jsonl", o.input.trim_end_matches('/'))
    } else {
        o.input.clone()
    };
    let choice: BackendChoice = o.backend.parse().map_err(bad)?;
    let dtype = match o.dtype.as_str() {
        "f16" => Dtype::F16,
        "bf16" => Dtype::Bf16,
        "f32" => Dtype::F32,
        d => return Err(bad(format!("--dtype {d}: expected f16, bf16 or f32"))),
    };
    let shape = AttnShape { heads: o.heads, kv_heads: o.kv_heads, head_dim: o.head_dim, dtype };
    shape.validate().map_err(|e| bad(e.to_string()))?;
    let file = std::fs::File::open(&path).map_err(|e| bad(format!("{path}: cannot read: {e}")))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let first = lines.next().and_then(Result::ok).ok_or_else(|| bad(format!("{path}:1: empty trace")))?;
    let header: Header =
        serde_json::from_str(&first).map_err(|e| bad(format!("{path}:1: not a kvsim trace header: {e}")))?;
    let mut mem = Vec::new();
    // The file line of each memory record, for messages.
    let mut mem_lines: Vec<usize> = Vec::new();
    let mut footer: Option<Footer> = None;
    for (i, l) in lines.enumerate() {
        let l = l.map_err(|e| bad(format!("{path}:{}: {e}", i + 2)))?;
        if l.starts_with("{\"kind\":\"footer\"") {
            footer = Some(serde_json::from_str(&l).map_err(|e| bad(format!("{path}:{}: bad footer: {e}", i + 2)))?);
            break;
        }
        if !l.contains("\"kind\":\"mem\"") {
            continue;
        }
        let line: Line = serde_json::from_str(&l).map_err(|e| bad(format!("{path}:{}: {e}", i + 2)))?;
        if let TraceRecord::Mem(op) = line.rec {
            mem.push((line.t, op));
            mem_lines.push(i + 2);
        }
    }
    let footer = footer.ok_or_else(|| bad(format!("{path}: no footer (the trace was cut short)")))?;
    // A log that breaks a rule or a limit is bad input (exit 2), never "nothing to confirm".
    let at = |e: &LowerError| match e {
        LowerError::Invalid { op: Some(i), .. } => format!("{path}:{}", mem_lines.get(*i).copied().unwrap_or(0)),
        _ => path.clone(),
    };
    kvsim::confirm::validate_mem_log(&mem, &header.config)
        .map_err(|e| bad(format!("{}: invalid memory log: {e}", at(&e))))?;
    let select = if o.request.is_empty() {
        Select::Violations { violations: &footer.violations, max: o.max_reads }
    } else {
        Select::Requests(&o.request)
    };
    let mut out = String::new();
    let lowered = match lower(&mem, MemModel::of(&header.config), select, shape) {
        Ok(l) => l,
        Err(LowerError::NoRead(e)) if o.request.is_empty() => {
            out.push_str(&format!("{path}: nothing to confirm: {e}\n"));
            return Ok(Verdict { confirmed: 0, reads: 0, backend: "none".into(), text: out });
        }
        Err(e @ LowerError::Invalid { .. }) => return Err(bad(format!("{}: invalid memory log: {e}", at(&e)))),
        Err(e) => return Err(bad(format!("{path}: {e}"))),
    };
    let (mut backend, note) = kvsim_gpu::select(choice).map_err(|e| match e {
        GpuError::Unavailable(why) => (exit::DIVERGED, format!("backend {} unavailable: {why}", o.backend)),
        e => (exit::BAD_INPUT, e.to_string()),
    })?;
    if let Some(n) = note {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&format!(
        "{path}: scenario {}, seed {}, profile {}; replaying {} of {} memory ops over {} pages on the {} backend ({} heads, {} KV heads, head dim {}, {})\n",
        header.config.name,
        header.seed,
        header.config.profile,
        lowered.ops_kept,
        lowered.ops_total,
        lowered.pages_kept,
        backend.name(),
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        shape.dtype.name()
    ));
    let results = backend.run(&lowered.program).map_err(|e| match e {
        GpuError::Unavailable(why) => (exit::DIVERGED, format!("backend unavailable: {why}")),
        e => (exit::BAD_INPUT, format!("replay failed: {e}")),
    })?;
    let mut confirmed = 0;
    for (t, r) in lowered.targets.iter().zip(&results) {
        let verdict = if r.foreign_share > o.threshold {
            confirmed += 1;
            "CONFIRMED"
        } else {
            "not confirmed"
        };
        let mut shares: Vec<(u32, f64)> = r.per_tenant.clone();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let top: Vec<String> = shares.iter().take(6).map(|(t, s)| format!("tenant {t} {:.1}%", s * 100.0)).collect();
        let largest_foreign = shares.iter().filter(|(x, _)| *x != t.tenant).map(|(_, s)| *s).fold(0.0f64, f64::max);
        out.push_str(&format!(
            "read {}: request {} (tenant {}) on {}, {} tokens at {:.3}s [{}]\n  foreign {:.1}% · own {:.1}% · zeros {:.1}% · largest single foreign tenant {:.1}% · {}\n  {verdict} (threshold: foreign share > {:.1}%)",
            t.id,
            t.request,
            t.tenant,
            t.pool,
            t.seq_len,
            t.at_ns as f64 / 1e9,
            t.kind,
            r.foreign_share * 100.0,
            r.own_share * 100.0,
            r.zeros_share * 100.0,
            largest_foreign * 100.0,
            if top.is_empty() { "no tenant's KV (zeros only)".to_string() } else { top.join(", ") },
            o.threshold * 100.0
        ));
        if let Some(d) = r.max_abs_diff_vs_cpu {
            out.push_str(&format!("; max |cuda - cpu| = {d:.2e}"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "verdict: {confirmed} of {} read(s) confirmed as cross-tenant leaks (exit {})\n",
        results.len(),
        if confirmed > 0 { exit::SAFETY } else { exit::CLEAN }
    ));
    Ok(Verdict { confirmed, reads: results.len(), backend: backend.name().to_string(), text: out })
}
