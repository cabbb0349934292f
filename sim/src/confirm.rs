//! Lowering a trace's KV memory log to a `kvsim_gpu::Program`: only what the violating reads
//! depend on — the pages they read and the history of those pages, following copies back to
//! their source pages — with pages renumbered compactly, so full-scale traces stay small.

use crate::config::SimConfig;
use crate::pool::Run;
use crate::report::ViolationOut;
use crate::trace::MemOp;
use crate::types::{PoolId, Role};
use kvsim_gpu::{AttnShape, Op, PoolSpec, Program, SlotRun, Writer};
use std::collections::{BTreeMap, BTreeSet};

/// A read to confirm.
#[derive(Debug, Clone)]
pub struct ReadTarget {
    pub id: u64,
    pub kind: String,
    pub pool: PoolId,
    pub request: u32,
    pub tenant: u32,
    pub seq_len: u64,
    pub at_ns: u64,
}

/// The lowered program and what it replays.
#[derive(Debug)]
pub struct Lowered {
    pub program: Program,
    pub targets: Vec<ReadTarget>,
    pub pages_kept: u64,
    pub ops_kept: usize,
    pub ops_total: usize,
}

/// Which reads to confirm.
pub enum Select<'a> {
    /// The violating reads of these kinds (first `max` by time).
    Violations { violations: &'a [ViolationOut], max: usize },
    /// The last read of each of these requests (any pool), violating or not.
    Requests(&'a [u32]),
}

/// Most pages a log may allocate or copy in all (a full-scale incident trace: about 10^6).
pub const MAX_LOWERED_PAGES: u64 = 1 << 30;

const READ_KINDS: [&str; 3] = ["cross_tenant_read", "cross_request_read", "uninitialized_read"];

fn parse_pool(s: &str) -> Option<PoolId> {
    let (role, idx) = s.rsplit_once('-')?;
    let role = match role {
        "prefill" => Role::Prefill,
        "decode" => Role::Decode,
        _ => return None,
    };
    Some(PoolId { role, index: idx.parse().ok()? })
}

/// The page count of every pool at the start of a run: `pool_tokens / page_size + 1` (page 0 is
/// reserved), as `Pool::new` sizes them.
pub fn initial_pools(cfg: &SimConfig) -> BTreeMap<PoolId, u64> {
    let ps = cfg.knobs.page_size.max(1);
    let mut pools = BTreeMap::new();
    for (role, nodes) in [(Role::Prefill, &cfg.prefill), (Role::Decode, &cfg.decode)] {
        for (i, n) in nodes.iter().enumerate().take(usize::from(u16::MAX) + 1) {
            pools.insert(PoolId { role, index: i as u16 }, n.pool_tokens / ps + 1);
        }
    }
    pools
}

/// Checks that a memory log is one a run of `cfg` could have written, which is what
/// `confirm::lower` (and `Filter::keeps`) assume: `1 <= page_size <= 65536`; every op names a
/// pool of the configuration (sized `pool_tokens / page_size + 1` pages, at most 2^31) or one a
/// `reset` re-created; every page run, copied run and slot run lies inside its pool (so no
/// `first + count` or `slot + len` overflows and no page index passes `u32`); write positions do
/// not overflow.
pub fn validate_mem_log(mem: &[(u64, MemOp)], cfg: &SimConfig) -> Result<(), String> {
    let page_size = cfg.knobs.page_size;
    if page_size == 0 || page_size > 1 << 16 {
        return Err(format!("page_size {page_size} outside 1..=65536"));
    }
    let mut pools = initial_pools(cfg);
    let pages_of = |pools: &BTreeMap<PoolId, u64>, p: &PoolId, i: usize| -> Result<u64, String> {
        match pools.get(p) {
            Some(&n) if n <= 1 << 31 => Ok(n),
            Some(n) => Err(format!("op {i}: {p} has {n} pages (limit 2^31)")),
            None => Err(format!("op {i}: no pool {p} in the configuration")),
        }
    };
    let inside = |first: u32, count: u32, pages: u64| u64::from(first) + u64::from(count) <= pages;
    for (i, (_, op)) in mem.iter().enumerate() {
        match op {
            MemOp::Reset { pool, pages, page_size: ps } => {
                pages_of(&pools, pool, i)?;
                if *ps != page_size {
                    return Err(format!("op {i}: reset of {pool} with page size {ps}, the run's is {page_size}"));
                }
                pools.insert(*pool, u64::from(*pages));
            }
            MemOp::Alloc { pool, pages, .. } | MemOp::Free { pool, pages, .. } => {
                let n = pages_of(&pools, pool, i)?;
                if let Some(r) = pages.iter().find(|r| !inside(r.first, r.count, n)) {
                    return Err(format!("op {i}: pages {}+{} outside {pool} ({n} pages)", r.first, r.count));
                }
            }
            MemOp::Write { pool, slots, .. } => {
                let n = pages_of(&pools, pool, i)? * page_size;
                for &(s, l, pos) in slots {
                    if s.checked_add(l).is_none_or(|e| e > n) || pos.checked_add(l).is_none() {
                        return Err(format!("op {i}: slots {s}+{l} (position {pos}) outside {pool} ({n} slots)"));
                    }
                }
            }
            MemOp::Copy { src, dst, pages, .. } => {
                let (ns, nd) = (pages_of(&pools, src, i)?, pages_of(&pools, dst, i)?);
                if let Some(&(s, d, c)) = pages.iter().find(|&&(s, d, c)| !inside(s, c, ns) || !inside(d, c, nd)) {
                    return Err(format!("op {i}: copy {s}->{d} of {c} pages outside {src} ({ns}) or {dst} ({nd})"));
                }
            }
            MemOp::Read { pool, .. } => {
                pages_of(&pools, pool, i)?;
            }
        }
    }
    Ok(())
}

/// Rejects memory records whose numbers a well-formed trace never has (a hand-edited or corrupt
/// trace must give an error, not a panic or a silently different program).
fn validate(mem: &[(u64, MemOp)], page_size: u64) -> Result<(), String> {
    if page_size == 0 || page_size > 1 << 16 {
        return Err(format!("page size {page_size} out of range"));
    }
    let max_slot = u64::from(u32::MAX) * page_size;
    let runs_ok = |runs: &[Run]| runs.iter().all(|r| r.first.checked_add(r.count).is_some());
    for (i, (_, op)) in mem.iter().enumerate() {
        let ok = match op {
            MemOp::Reset { .. } | MemOp::Read { .. } => true,
            MemOp::Alloc { pages, .. } | MemOp::Free { pages, .. } => runs_ok(pages),
            MemOp::Write { slots, .. } => slots
                .iter()
                .all(|&(s, l, p)| s.checked_add(l).is_some_and(|e| e <= max_slot) && p.checked_add(l).is_some()),
            MemOp::Copy { pages, .. } => {
                pages.iter().all(|&(a, b, c)| a.checked_add(c).is_some() && b.checked_add(c).is_some())
            }
        };
        if !ok {
            return Err(format!("memory record {} has out-of-range page or slot numbers", i + 1));
        }
    }
    // Lowering walks copied pages one by one: bound the work a (corrupt) log can ask for.
    let copied: u64 = mem
        .iter()
        .map(|(_, op)| match op {
            MemOp::Copy { pages, .. } => pages.iter().map(|p| u64::from(p.2)).sum(),
            MemOp::Alloc { pages, .. } => crate::pool::pages_in(pages),
            _ => 0,
        })
        .sum();
    if copied > MAX_LOWERED_PAGES {
        return Err(format!(
            "the memory log allocates or copies {copied} pages; confirm handles at most {MAX_LOWERED_PAGES}"
        ));
    }
    Ok(())
}

/// `mem` holds the memory log in order: `(t_ns, op)`. `page_size` is the run's page size.
pub fn lower(mem: &[(u64, MemOp)], page_size: u64, select: Select, shape: AttnShape) -> Result<Lowered, String> {
    validate(mem, page_size)?;
    // 1. Find each target's read op and the reader's block table at that moment.
    let mut wanted: Vec<(PoolId, u32, Option<u64>, String)> = Vec::new();
    match &select {
        Select::Violations { violations, max } => {
            let mut seen = BTreeSet::new();
            let mut vs: Vec<&ViolationOut> =
                violations.iter().filter(|v| READ_KINDS.contains(&v.kind.as_str())).collect();
            // Cross-tenant reads first (the leaks to confirm), then by time.
            vs.sort_by_key(|v| (READ_KINDS.iter().position(|k| *k == v.kind), v.at_ns, v.request));
            for v in vs {
                let (Some(r), Some(pool)) = (v.request, v.pool.as_deref().and_then(parse_pool)) else { continue };
                if seen.insert((pool, r, v.at_ns)) && wanted.len() < *max {
                    wanted.push((pool, r, Some(v.at_ns), v.kind.clone()));
                }
            }
        }
        Select::Requests(rs) => {
            for r in *rs {
                wanted.push((PoolId { role: Role::Decode, index: u16::MAX }, *r, None, "requested".into()));
            }
        }
    }
    let mut tables: BTreeMap<(PoolId, u32), Vec<Run>> = BTreeMap::new();
    // (op index, target) for every target found.
    let mut found: Vec<(usize, ReadTarget, Vec<Run>)> = Vec::new();
    let mut last_read: BTreeMap<u32, (usize, ReadTarget, Vec<Run>)> = BTreeMap::new();
    for (i, (t, op)) in mem.iter().enumerate() {
        match op {
            MemOp::Reset { pool, .. } => tables.retain(|(p, _), _| p != pool),
            MemOp::Alloc { pool, r, pages } => {
                let tab = tables.entry((*pool, r.0)).or_default();
                for p in pages {
                    crate::pool::push_run(tab, *p);
                }
            }
            MemOp::Free { pool, r, .. } => {
                tables.remove(&(*pool, r.0));
            }
            MemOp::Read { pool, r, tenant, seq_len } => {
                let mk = |kind: &str| ReadTarget {
                    id: 0,
                    kind: kind.to_string(),
                    pool: *pool,
                    request: r.0,
                    tenant: tenant.0,
                    seq_len: *seq_len,
                    at_ns: *t,
                };
                let table = tables.get(&(*pool, r.0)).cloned().unwrap_or_default();
                if let Some(w) = wanted.iter().find(|w| w.0 == *pool && w.1 == r.0 && w.2 == Some(*t)) {
                    if !found.iter().any(|f| f.1.pool == *pool && f.1.request == r.0 && f.1.at_ns == *t) {
                        found.push((i, mk(&w.3), table.clone()));
                    }
                }
                if wanted.iter().any(|w| w.2.is_none() && w.1 == r.0) {
                    last_read.insert(r.0, (i, mk("requested"), table));
                }
            }
            _ => {}
        }
    }
    found.extend(last_read.into_values());
    found.sort_by_key(|f| f.0);
    for (n, f) in found.iter_mut().enumerate() {
        f.1.id = n as u64;
    }
    if found.is_empty() {
        return Err("no matching attention read in the trace's memory log".into());
    }
    // 2. Reverse pass: the pages each read depends on, and every op that shaped them.
    let last = found.iter().map(|f| f.0).max().expect("non-empty");
    let mut needed: BTreeMap<PoolId, BTreeSet<u32>> = BTreeMap::new();
    let mut keep = vec![false; last + 1];
    let mut targets_at: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, f) in found.iter().enumerate() {
        targets_at.entry(f.0).or_default().push(k);
    }
    let table_pages = |table: &[Run], seq_len: u64| -> Vec<u32> {
        crate::pool::prefix_pages(table, seq_len.div_ceil(page_size)).iter().flat_map(|r| r.first..r.end()).collect()
    };
    for i in (0..=last).rev() {
        if let Some(ks) = targets_at.get(&i) {
            for k in ks {
                let f = &found[*k];
                needed.entry(f.1.pool).or_default().extend(table_pages(&f.2, f.1.seq_len));
            }
        }
        match &mem[i].1 {
            MemOp::Write { pool, slots, .. } => {
                if let Some(set) = needed.get(pool) {
                    keep[i] = slots.iter().any(|&(s, l, _)| {
                        set.range((s / page_size) as u32..(s + l).div_ceil(page_size) as u32).next().is_some()
                    });
                }
            }
            MemOp::Copy { src, dst, pages, .. } => {
                let mut srcs = Vec::new();
                if let Some(set) = needed.get(dst) {
                    for &(s, d, c) in pages {
                        for k in 0..c {
                            if set.contains(&(d + k)) {
                                srcs.push(s + k);
                            }
                        }
                    }
                }
                if !srcs.is_empty() {
                    keep[i] = true;
                    needed.entry(*src).or_default().extend(srcs);
                }
            }
            _ => {}
        }
    }
    // 3. Compact page ids per pool (page 0 stays reserved) and emit the program in order.
    let pool_ids: BTreeMap<PoolId, u32> = needed.keys().enumerate().map(|(i, p)| (*p, i as u32)).collect();
    let maps: BTreeMap<PoolId, BTreeMap<u32, u32>> = needed
        .iter()
        .map(|(p, set)| (*p, set.iter().enumerate().map(|(i, pg)| (*pg, i as u32 + 1)).collect()))
        .collect();
    let ps = page_size as u32;
    let pools = needed
        .iter()
        .map(|(p, set)| PoolSpec { pool: pool_ids[p], pages: set.len() as u32 + 1, page_size: ps })
        .collect();
    let mut ops = Vec::new();
    for i in 0..=last {
        if keep[i] {
            match &mem[i].1 {
                MemOp::Write { pool, r, tenant, slots } => {
                    let map = &maps[pool];
                    let mut runs: Vec<SlotRun> = Vec::new();
                    for &(s, l, pos) in slots {
                        for (&pg, &np) in map.range((s / page_size) as u32..(s + l).div_ceil(page_size) as u32) {
                            let lo = s.max(u64::from(pg) * page_size);
                            let hi = (s + l).min(u64::from(pg + 1) * page_size);
                            let start = u64::from(np) * page_size + (lo - u64::from(pg) * page_size);
                            let first_pos = pos + (lo - s);
                            match runs.last_mut() {
                                Some(x) if x.start_slot + x.len == start && x.first_pos + x.len == first_pos => {
                                    x.len += hi - lo
                                }
                                _ => runs.push(SlotRun { start_slot: start, len: hi - lo, first_pos }),
                            }
                        }
                    }
                    ops.push(Op::Write {
                        pool: pool_ids[pool],
                        slots: runs,
                        writer: Writer { tenant: tenant.0, request: r.0 },
                    });
                }
                MemOp::Copy { src, dst, pages, .. } => {
                    let (sm, dm) = (&maps[src], &maps[dst]);
                    let mut out: Vec<(u32, u32, u32)> = Vec::new();
                    for &(s, d, c) in pages {
                        for k in 0..c {
                            if let (Some(&a), Some(&b)) = (sm.get(&(s + k)), dm.get(&(d + k))) {
                                match out.last_mut() {
                                    Some(x) if x.0 + x.2 == a && x.1 + x.2 == b => x.2 += 1,
                                    _ => out.push((a, b, 1)),
                                }
                            }
                        }
                    }
                    ops.push(Op::Copy { src_pool: pool_ids[src], dst_pool: pool_ids[dst], pages: out });
                }
                _ => {}
            }
        }
        if let Some(ks) = targets_at.get(&i) {
            for k in ks {
                let f = &found[*k];
                let map = &maps[&f.1.pool];
                let mut table: Vec<(u32, u32)> = Vec::new();
                for pg in table_pages(&f.2, f.1.seq_len) {
                    let np = map[&pg];
                    match table.last_mut() {
                        Some(x) if x.0 + x.1 == np => x.1 += 1,
                        _ => table.push((np, 1)),
                    }
                }
                ops.push(Op::Attend {
                    id: f.1.id,
                    pool: pool_ids[&f.1.pool],
                    reader: Writer { tenant: f.1.tenant, request: f.1.request },
                    block_table: table,
                    seq_len: f.1.seq_len,
                });
            }
        }
    }
    let pages_kept = needed.values().map(|s| s.len() as u64).sum();
    let ops_kept = keep.iter().filter(|k| **k).count();
    Ok(Lowered {
        program: Program { pools, ops, shape },
        targets: found.into_iter().map(|f| f.1).collect(),
        pages_kept,
        ops_kept,
        ops_total: mem.len(),
    })
}
