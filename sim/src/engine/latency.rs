//! Per-request records and latency summaries, gathered from the finished world in the report
//! path: nothing here is traced, hashed or read back by the model, so adding it changes neither
//! the trace nor its hash. Memory: one record per request.
//!
//! Definitions (integer nanoseconds of virtual time):
//! - time to first token (TTFT) = the end of the decode step that produced the request's first
//!   output token − arrival;
//! - inter-token latency (ITL) of a request = (its last token's step end − its first token's step
//!   end) / (tokens − 1), integer division; requests with one token have none;
//! - end-to-end (E2E) = the router's response − arrival.
//!
//! Token times are those of the decode steps; the router's message latency is in E2E only.
//! Summaries are over the requests answered HTTP 200, overall and per tenant: the mean is the
//! floor of the sum over the count; percentile p (of 50, 90, 99) is the nearest-rank value: the
//! sorted values' element at index ⌈p·n/100⌉ − 1; max is the largest value.

use crate::world::World;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One request as the run saw it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub id: u32,
    pub tenant: u32,
    pub arrival_ns: u64,
    /// The HTTP status the client got; `None` when it got no answer.
    pub status: Option<u16>,
    pub ttft_ns: Option<u64>,
    /// Mean inter-token latency of this request.
    pub itl_ns: Option<u64>,
    /// When the client got its answer.
    pub end_ns: Option<u64>,
    pub e2e_ns: Option<u64>,
    pub prompt_tokens: u64,
    /// Output tokens requested.
    pub output_tokens: u64,
    /// Output tokens in the response.
    pub generated_tokens: u64,
    /// Violation kinds recorded against this request (a `page_leak` against each request that
    /// holds its pages or slots at the end).
    pub violations: Vec<String>,
}

/// A distribution's summary.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dist {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// The nearest-rank percentile `p` (0 < p ≤ 100) of sorted values.
pub fn percentile(sorted: &[u64], p: u64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    let rank = (p * n).div_ceil(100).max(1);
    Some(sorted[(rank - 1) as usize])
}

impl Dist {
    /// Summarises `values` (any order); `None` when empty.
    pub fn of(mut values: Vec<u64>) -> Option<Dist> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
        let n = values.len() as u64;
        Some(Dist {
            count: n,
            mean_ns: (sum / u128::from(n)) as u64,
            p50_ns: percentile(&values, 50)?,
            p90_ns: percentile(&values, 90)?,
            p99_ns: percentile(&values, 99)?,
            max_ns: *values.last()?,
        })
    }
}

/// TTFT, ITL and E2E of one group of requests.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Requests answered HTTP 200 in the group.
    pub ok: u64,
    pub ttft: Option<Dist>,
    pub itl: Option<Dist>,
    pub e2e: Option<Dist>,
}

impl Summary {
    fn of<'a>(records: impl Iterator<Item = &'a RequestRecord>) -> Summary {
        let ok: Vec<&RequestRecord> = records.filter(|r| r.status == Some(200)).collect();
        Summary {
            ok: ok.len() as u64,
            ttft: Dist::of(ok.iter().filter_map(|r| r.ttft_ns).collect()),
            itl: Dist::of(ok.iter().filter_map(|r| r.itl_ns).collect()),
            e2e: Dist::of(ok.iter().filter_map(|r| r.e2e_ns).collect()),
        }
    }
}

/// Latency summaries, overall and per tenant.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Latency {
    pub overall: Summary,
    pub per_tenant: BTreeMap<u32, Summary>,
}

impl Latency {
    pub fn of(records: &[RequestRecord]) -> Latency {
        let tenants: BTreeSet<u32> = records.iter().map(|r| r.tenant).collect();
        Latency {
            overall: Summary::of(records.iter()),
            per_tenant: tenants
                .into_iter()
                .map(|t| (t, Summary::of(records.iter().filter(|r| r.tenant == t))))
                .collect(),
        }
    }
}

/// One record per request, in id order.
pub fn records(w: &World) -> Vec<RequestRecord> {
    let mut kinds: BTreeMap<u32, BTreeSet<&'static str>> = BTreeMap::new();
    for v in &w.oracle.violations {
        // A leak names no request but its holders: it is recorded against each (the CSV's row of
        // the request that holds a leaked page said nothing of it).
        for r in v.request.iter().chain(&v.holders) {
            kinds.entry(r.0).or_default().insert(v.kind.name());
        }
    }
    w.reqs
        .summaries()
        .map(|r| {
            let arrival = r.arrival.0;
            let first = r.first_token_at.map(|t| t.0);
            let last = r.last_token_at.map(|t| t.0);
            let tokens = r.response.map_or(0, |x| x.tokens);
            let itl = match (first, last) {
                (Some(f), Some(l)) if tokens >= 2 => Some((l - f) / (tokens - 1)),
                _ => None,
            };
            let end = r.response.map(|x| x.at.0);
            RequestRecord {
                id: r.id.0,
                tenant: r.tenant.0,
                arrival_ns: arrival,
                status: r.response.map(|x| x.status),
                ttft_ns: first.map(|f| f.saturating_sub(arrival)),
                itl_ns: itl,
                end_ns: end,
                e2e_ns: end.map(|e| e.saturating_sub(arrival)),
                prompt_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                generated_tokens: tokens,
                violations: kinds.get(&r.id.0).map(|k| k.iter().map(|s| s.to_string()).collect()).unwrap_or_default(),
            }
        })
        .collect()
}

/// The per-request table as CSV (RFC 4180; every field is a number, a kind name or empty;
/// violation kinds are joined with `;`).
pub fn csv(records: &[RequestRecord]) -> String {
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    let mut s = String::from(
        "id,tenant,arrival_ns,status,ttft_ns,itl_ns,end_ns,e2e_ns,prompt_tokens,output_tokens,generated_tokens,violations\n",
    );
    for r in records {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            r.id,
            r.tenant,
            r.arrival_ns,
            r.status.map(|x| x.to_string()).unwrap_or_default(),
            opt(r.ttft_ns),
            opt(r.itl_ns),
            opt(r.end_ns),
            opt(r.e2e_ns),
            r.prompt_tokens,
            r.output_tokens,
            r.generated_tokens,
            r.violations.join(";")
        );
    }
    s
}

fn ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, ns / 1_000 % 1_000)
}

/// The compact text table (overall): one line per metric, milliseconds.
pub fn table(l: &Latency) -> String {
    let mut s = String::new();
    if l.overall.ok == 0 {
        let _ = writeln!(s, "latency: no request answered HTTP 200");
        return s;
    }
    let _ = writeln!(
        s,
        "latency over the {} request(s) answered 200 (ms of virtual time; nearest-rank percentiles):",
        crate::report::thousands(l.overall.ok)
    );
    let _ = writeln!(s, "  {:<5} {:>12} {:>12} {:>12} {:>12} {:>12}", "", "mean", "p50", "p90", "p99", "max");
    for (name, d) in [("TTFT", l.overall.ttft), ("ITL", l.overall.itl), ("E2E", l.overall.e2e)] {
        match d {
            Some(d) => {
                let _ = writeln!(
                    s,
                    "  {name:<5} {:>12} {:>12} {:>12} {:>12} {:>12}",
                    ms(d.mean_ns),
                    ms(d.p50_ns),
                    ms(d.p90_ns),
                    ms(d.p99_ns),
                    ms(d.max_ns)
                );
            }
            None => {
                let _ = writeln!(s, "  {name:<5} {:>12}", "-");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50), Some(5));
        assert_eq!(percentile(&v, 90), Some(9));
        assert_eq!(percentile(&v, 99), Some(10));
        assert_eq!(percentile(&v, 100), Some(10));
        assert_eq!(percentile(&[7], 1), Some(7));
        assert_eq!(percentile(&[], 50), None);
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 99)), (Some(100), Some(198)));
        let d = Dist::of(vec![3, 1, 2, u64::MAX]).unwrap();
        assert_eq!((d.count, d.p50_ns, d.max_ns), (4, 2, u64::MAX));
        assert_eq!(d.mean_ns, ((u128::from(u64::MAX) + 6) / 4) as u64, "the sum cannot overflow");
        assert_eq!(Dist::of(vec![]), None);
    }

    fn rec(id: u32, tenant: u32, status: Option<u16>, ttft: u64, e2e: u64) -> RequestRecord {
        RequestRecord {
            id,
            tenant,
            arrival_ns: 0,
            status,
            ttft_ns: Some(ttft),
            itl_ns: Some(ttft / 10),
            end_ns: Some(e2e),
            e2e_ns: Some(e2e),
            prompt_tokens: 1,
            output_tokens: 2,
            generated_tokens: 2,
            violations: vec!["cross_tenant_read".into(), "wrong_status".into()],
        }
    }

    #[test]
    fn summaries_count_only_answered_200_and_split_by_tenant() {
        let rs = vec![rec(0, 0, Some(200), 10, 100), rec(1, 1, Some(200), 30, 300), rec(2, 1, Some(400), 1, 1)];
        let l = Latency::of(&rs);
        assert_eq!(l.overall.ok, 2);
        assert_eq!(l.overall.ttft.unwrap().mean_ns, 20);
        assert_eq!(l.per_tenant[&1].ok, 1);
        assert_eq!(l.per_tenant[&1].e2e.unwrap().max_ns, 300);
        let text = table(&l);
        assert!(text.contains("answered 200"), "{text}");
        assert!(text.lines().any(|x| x.trim_start().starts_with("TTFT")), "{text}");
        let c = csv(&rs);
        assert_eq!(c.lines().count(), 4);
        assert_eq!(c.lines().nth(3).unwrap(), "2,1,0,400,1,0,1,1,1,2,2,cross_tenant_read;wrong_status");
    }
}
