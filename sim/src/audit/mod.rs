//! `kvsim audit`: measure, don't assume. Reads engine start-up logs (see `parse`), reports each
//! node's KV pool against the context length and the band of prompt lengths that fall into the
//! scheduler's rejection path, then builds a scenario from the measured numbers so the simulator
//! can say what that gap means under an engine profile. Pure: text in, text out.

pub mod parse;

use crate::report::thousands;
use parse::{NodeFacts, Role};
use std::fmt::Write as _;

/// One audited node: the last launch of each (file, rank), with its effective role.
#[derive(Debug, Clone)]
pub struct AuditNode {
    pub facts: NodeFacts,
    pub role: Role,
    /// Prompts of this length or longer are rejected by the scheduler.
    pub max_req_input_len: Option<u64>,
    /// `[lo, hi)`: admitted by the tokenizer, rejected by the prefill scheduler.
    pub band: Option<(u64, u64)>,
}

#[derive(Debug, Clone)]
pub struct Audit {
    pub nodes: Vec<AuditNode>,
    pub context_len: Option<u64>,
    pub page_size: u64,
    pub page_size_known: bool,
    pub notes: Vec<String>,
}

impl Audit {
    pub fn prefill(&self) -> impl Iterator<Item = &AuditNode> {
        self.nodes.iter().filter(|n| n.role == Role::Prefill)
    }
    pub fn decode(&self) -> impl Iterator<Item = &AuditNode> {
        self.nodes.iter().filter(|n| n.role == Role::Decode)
    }
    /// Whether any prefill node has a rejection band.
    pub fn has_gap(&self) -> bool {
        self.prefill().any(|n| n.band.is_some())
    }
}

/// Builds the audit from parsed logs. `roles[i]` overrides the role of file `i`'s nodes.
pub fn analyse(files: &[(String, Vec<NodeFacts>, Option<Role>)]) -> Audit {
    let mut nodes: Vec<AuditNode> = Vec::new();
    let mut notes = Vec::new();
    for (name, facts, role) in files {
        let last = facts.iter().map(|f| f.launch).max().unwrap_or(0);
        if last > 0 {
            notes.push(format!("{name}: {} launches found; auditing the last one", last + 1));
        }
        for f in facts.iter().filter(|f| f.launch == last) {
            let role = role.unwrap_or(f.role);
            nodes.push(AuditNode { facts: f.clone(), role, max_req_input_len: None, band: None });
        }
    }
    let context_len = nodes.iter().filter_map(|n| n.facts.context_len).max();
    let sizes: Vec<u64> = nodes.iter().filter_map(|n| n.facts.page_size).collect();
    let page_size_known = !sizes.is_empty();
    let page_size = sizes.iter().copied().max().unwrap_or(1);
    if !page_size_known {
        notes.push("page size not found in any log; using 1 (sglang's default)".into());
    }
    for n in &mut nodes {
        let ctx = n.facts.context_len.or(context_len);
        if let (Some(ctx), Some(pool)) = (ctx, n.facts.pool_tokens) {
            n.max_req_input_len = Some(parse::max_req_input_len(ctx, pool));
            // The gap the pool opens. With a pool at least as large as the context, sglang still
            // rejects the last 6 tokens below the context (`ctx - 6 <= L < ctx`), on every node,
            // whatever its pool: noted once below, not counted as a pool gap.
            n.band = if pool < ctx { parse::rejection_band(ctx, pool) } else { None };
        }
    }
    if let Some(ctx) = context_len {
        if nodes.iter().any(|n| n.band.is_none() && n.max_req_input_len.is_some()) {
            notes.push(format!(
                "sglang's scheduler also rejects {} <= L < {} (max_req_len - 5) on every node whatever its pool; the tokenizer admits them unless it reserves tokens for the output",
                thousands(ctx.saturating_sub(6)),
                thousands(ctx)
            ));
        }
    }
    Audit { nodes, context_len, page_size, page_size_known, notes }
}

fn unknown<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |x| x.to_string())
}

fn num(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".to_string(), thousands)
}

/// The per-node table.
pub fn node_table(a: &Audit) -> String {
    let mut s = String::new();
    for n in &a.nodes {
        let f = &n.facts;
        let rank = f.rank.clone().map(|r| format!(" {r}")).unwrap_or_default();
        let _ = writeln!(
            s,
            "{}{rank} (line {}): {} {} · role {} · pool {} tokens · context {} · page size {}",
            f.source,
            f.line,
            unknown(f.engine),
            f.version.clone().unwrap_or_else(|| "version unknown".into()),
            n.role,
            num(f.pool_tokens),
            num(f.context_len.or(a.context_len)),
            num(f.page_size),
        );
        match (n.max_req_input_len, n.band) {
            (None, _) => {
                let _ = writeln!(s, "    cannot compute the admission limit: pool or context unknown");
            }
            (Some(m), None) => {
                let _ = writeln!(
                    s,
                    "    largest prompt accepted {} tokens; no gap: the pool holds any prompt the context admits",
                    thousands(m.saturating_sub(1))
                );
            }
            (Some(m), Some((lo, hi))) => {
                let _ = writeln!(
                    s,
                    "    largest prompt accepted {} tokens (max_req_input_len {}); GAP: prompts {} <= L < {} pass the tokenizer and fall into the scheduler's rejection path",
                    thousands(m.saturating_sub(1)),
                    thousands(m),
                    thousands(lo),
                    thousands(hi)
                );
            }
        }
    }
    s
}

/// Rounds a pool down to a whole number of pages, as the engines do at start-up.
fn round(pool: u64, ps: u64) -> u64 {
    (pool / ps).max(1) * ps
}

/// A scenario reproducing the measured deployment: warm-up traffic from tenant 0 fills decode's
/// pool with KV, then tenant 1 sends probes at both edges of each prefill node's band.
/// Returns `None` when the pools or the context are unknown.
pub fn scenario(a: &Audit, sources: &str) -> Option<String> {
    let ctx = a.context_len?;
    let ps = a.page_size;
    let prefill: Vec<&AuditNode> = a.prefill().collect();
    if prefill.is_empty() || prefill.iter().any(|n| n.facts.pool_tokens.is_none()) {
        return None;
    }
    let decode: Vec<u64> = a.decode().filter_map(|n| n.facts.pool_tokens).collect();
    let mut s = String::new();
    let _ = writeln!(s, "# Generated by `kvsim audit` from {sources}.");
    let _ =
        writeln!(s, "# Pools as measured; tenant 0 warms the decode pools, tenant 1 probes each prefill node's band.");
    let _ = writeln!(s, "name = \"audit\"\nseed = 1\ncontext_len = {ctx}\nliveness_bound_s = 3600\n");
    for n in &prefill {
        let pool = n.facts.pool_tokens.expect("checked");
        let _ = writeln!(
            s,
            "# {} {}\n[[prefill]]\npool_tokens = {}\n",
            n.facts.source,
            n.facts.rank.clone().unwrap_or_default(),
            round(pool, ps)
        );
    }
    let decode_pools: Vec<u64> = if decode.is_empty() {
        let _ = writeln!(s, "# no decode log: decode pool ASSUMED (not measured) at twice the context");
        vec![round(2 * ctx, ps)]
    } else {
        decode.clone()
    };
    for d in &decode_pools {
        let _ = writeln!(s, "[[decode]]\npool_tokens = {}\n", round(*d, ps));
    }
    let _ = writeln!(s, "[knobs]\npage_size = {ps}\n");
    // Warm-up: enough accepted prompts to cover every decode pool once more than its size.
    let accepted = prefill.iter().filter_map(|n| n.max_req_input_len).min().unwrap_or(2).saturating_sub(1).max(1);
    let warm = accepted.min(ctx / 2).max(1);
    let total_decode: u64 = decode_pools.iter().sum();
    let count = (total_decode.div_ceil(warm) + 1).max(prefill.len() as u64 * 2).min(400);
    let spacing_ms = warm * 30 / 1000 + 2_000;
    let mut at = 0;
    for _ in 0..count {
        let _ = writeln!(s, "[[request]]\nat_ms = {at}\ntenant = 0\nprompt_tokens = {warm}\noutput_tokens = 16\n");
        at += spacing_ms;
    }
    let mut probes = Vec::new();
    for n in &prefill {
        if let Some((lo, hi)) = n.band {
            probes.push(lo);
            probes.push(hi - 1);
        }
    }
    if probes.is_empty() {
        probes.push(accepted);
    }
    for p in probes {
        for _ in 0..prefill.len() {
            let _ = writeln!(s, "[[request]]\nat_ms = {at}\ntenant = 1\nprompt_tokens = {p}\noutput_tokens = 8\n");
            at += 1_000;
        }
    }
    Some(s)
}
