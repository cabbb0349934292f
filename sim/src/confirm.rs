//! Lowering a trace's KV memory log to a `kvsim_gpu::Program`: only what the violating reads
//! depend on — the pages they read and the history of those pages, following copies back to
//! their source pages — with pages renumbered compactly, so full-scale traces stay small.
//!
//! Exactness: every page the engine clears becomes an `Op::Zero` — a free under `zero_on_free`
//! (only the pages the freer held, as `Pool::free` clears them) and a node restart (`reset`: the
//! pool comes back as zeros). In the reverse pass a zeroed page, and a page a whole-page copy
//! overwrites, stops depending on anything before that op. So at every kept read, each page it
//! reads holds in the program exactly what the model's pool holds: the writer's KV, or zeros.

use crate::config::SimConfig;
use crate::extent::IntervalMap;
use crate::pool::{push_run, Holder, Run};
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
    /// Every page the replayed reads depend on, per pool of the run (the pages of the program,
    /// before renumbering): what `--trace-filter` must keep the history of.
    pub depends_on: BTreeMap<PoolId, BTreeSet<u32>>,
    pub targets: Vec<ReadTarget>,
    pub pages_kept: u64,
    pub ops_kept: usize,
    pub ops_total: usize,
    /// The run's tenant id of each of the program's, where they differ (`compact_tenants`): a
    /// backend's per-tenant results name the program's ids.
    pub tenants: Option<Vec<u32>>,
}

/// Which reads to confirm.
pub enum Select<'a> {
    /// The violating reads of these kinds (first `max` by time).
    Violations { violations: &'a [ViolationOut], max: usize },
    /// The last read of each of these requests (any pool), violating or not.
    Requests(&'a [u32]),
}

/// The engine's memory semantics the lowering needs from the run's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemModel {
    /// Slots per page.
    pub page_size: u64,
    /// Whether a free clears the pages it returns (`zero_on_free`).
    pub zero_on_free: bool,
}

impl MemModel {
    pub fn of(cfg: &SimConfig) -> MemModel {
        MemModel { page_size: cfg.knobs.page_size, zero_on_free: cfg.knobs.zero_on_free }
    }
}

/// Why a memory log cannot be lowered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LowerError {
    /// The log breaks a rule a run never breaks, or is over a limit; `op` is the index into the
    /// log of the record at fault, when one is.
    Invalid { op: Option<usize>, why: String },
    /// The log is valid but holds no read that the selection asks for.
    NoRead(String),
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LowerError::Invalid { why, .. } | LowerError::NoRead(why) => f.write_str(why),
        }
    }
}

fn invalid(op: Option<usize>, why: String) -> LowerError {
    LowerError::Invalid { op, why }
}

/// Most pages a log may allocate or copy in all (a full-scale incident trace: about 10^6).
pub const MAX_LOWERED_PAGES: u64 = 1 << 30;

const READ_KINDS: [&str; 3] = ["cross_tenant_read", "cross_request_read", "uninitialized_read"];

/// How many distinct violating reads a footer's violations name (what `--max-reads` selects
/// from).
pub fn violating_reads(violations: &[ViolationOut]) -> usize {
    violations
        .iter()
        .filter(|v| READ_KINDS.contains(&v.kind.as_str()))
        .filter_map(|v| Some((v.pool.as_deref()?, v.request?, v.at_ns)))
        .collect::<BTreeSet<_>>()
        .len()
}

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
///
/// Decode steps are checked as the records they stand for (`trace::expand_log`); an op index in
/// an error counts those records (as `TraceMemLog::mem` and its `lines` do).
pub fn validate_mem_log(mem: &[(u64, MemOp)], cfg: &SimConfig) -> Result<(), LowerError> {
    let mem = &*crate::trace::expand_log(mem);
    let (mem, wire_pages) = wires_as_copies(mem)?;
    let mem = &*mem;
    let page_size = cfg.knobs.page_size;
    if page_size == 0 || page_size > 1 << 16 {
        return Err(invalid(None, format!("page_size {page_size} outside 1..=65536")));
    }
    let mut pools = initial_pools(cfg);
    if wire_pages > 1 {
        pools.insert(WIRE, wire_pages);
    }
    let pages_of = |pools: &BTreeMap<PoolId, u64>, p: &PoolId, i: usize| -> Result<u64, LowerError> {
        match pools.get(p) {
            Some(&n) if n <= 1 << 31 => Ok(n),
            Some(n) => Err(invalid(Some(i), format!("{p} has {n} pages (limit 2^31)"))),
            None => Err(invalid(Some(i), format!("no pool {p} in the configuration"))),
        }
    };
    let inside = |first: u32, count: u32, pages: u64| u64::from(first) + u64::from(count) <= pages;
    for (i, (_, op)) in mem.iter().enumerate() {
        match op {
            MemOp::Reset { pool, pages, page_size: ps } => {
                pages_of(&pools, pool, i)?;
                if *ps != page_size {
                    return Err(invalid(
                        Some(i),
                        format!("reset of {pool} with page size {ps}, the run's is {page_size}"),
                    ));
                }
                pools.insert(*pool, u64::from(*pages));
            }
            MemOp::Alloc { pool, pages, .. } | MemOp::Free { pool, pages, .. } | MemOp::Lock { pool, pages, .. } => {
                let n = pages_of(&pools, pool, i)?;
                if let Some(r) = pages.iter().find(|r| !inside(r.first, r.count, n)) {
                    return Err(invalid(Some(i), format!("pages {}+{} outside {pool} ({n} pages)", r.first, r.count)));
                }
            }
            MemOp::Write { pool, slots, .. } => {
                let n = pages_of(&pools, pool, i)? * page_size;
                for &(s, l, pos) in slots {
                    if s.checked_add(l).is_none_or(|e| e > n) || pos.checked_add(l).is_none() {
                        return Err(invalid(
                            Some(i),
                            format!("slots {s}+{l} (position {pos}) outside {pool} ({n} slots)"),
                        ));
                    }
                }
            }
            MemOp::Copy { src, dst, pages, .. } => {
                let (ns, nd) = (pages_of(&pools, src, i)?, pages_of(&pools, dst, i)?);
                if let Some(&(s, d, c)) = pages.iter().find(|&&(s, d, c)| !inside(s, c, ns) || !inside(d, c, nd)) {
                    return Err(invalid(
                        Some(i),
                        format!("copy {s}->{d} of {c} pages outside {src} ({ns}) or {dst} ({nd})"),
                    ));
                }
            }
            MemOp::Read { pool, .. } => {
                pages_of(&pools, pool, i)?;
            }
            // Expanded and translated above.
            MemOp::DecodeStep { .. } | MemOp::Send { .. } | MemOp::Land { .. } => {}
        }
    }
    check_volume(mem)
}

/// A memory log, borrowed or rewritten.
type MemLog<'a> = std::borrow::Cow<'a, [(u64, MemOp)]>;

/// The pool a lowered program keeps lagged batches' data in flight in (`MemOp::Send` until its
/// `Land`): no configuration has this many prefill nodes (`scenario::MAX_NODES`).
pub const WIRE: PoolId = PoolId { role: Role::Prefill, index: u16::MAX };

/// The log with every `Send` a copy from its source into the wire pool and every `Land` a copy
/// from there into its destination (borrowed when there is none), so the lowering's passes see
/// plain copies: each wire gets its own pages, numbered from 1 in the order the sends come.
/// Also the wire pool's page count (1 when there is no wire). A land without its send, or of a
/// different page count, is an invalid log.
fn wires_as_copies(mem: &[(u64, MemOp)]) -> Result<(MemLog<'_>, u64), LowerError> {
    if !mem.iter().any(|(_, op)| matches!(op, MemOp::Send { .. } | MemOp::Land { .. })) {
        return Ok((std::borrow::Cow::Borrowed(mem), 1));
    }
    let mut base: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    let mut next: u64 = 1;
    let mut out = Vec::with_capacity(mem.len());
    for (i, (t, op)) in mem.iter().enumerate() {
        let op = match op {
            MemOp::Send { src, r, wire, pages } => {
                let count: u64 = pages.iter().map(|p| u64::from(p.count)).sum();
                if next + count > 1 << 31 || base.contains_key(wire) {
                    return Err(invalid(Some(i), format!("send of wire {wire} repeated or past 2^31 wire pages")));
                }
                let first = next as u32;
                base.insert(*wire, (first, count as u32));
                next += count;
                let mut at = first;
                let mut copied = Vec::with_capacity(pages.len());
                for p in pages {
                    copied.push((p.first, at, p.count));
                    at += p.count;
                }
                MemOp::Copy { src: *src, dst: WIRE, r: *r, pages: copied }
            }
            MemOp::Land { dst, r, wire, pages, .. } => {
                let count: u64 = pages.iter().map(|p| u64::from(p.count)).sum();
                let Some(&(first, sent)) = base.get(wire) else {
                    return Err(invalid(Some(i), format!("land of wire {wire} that was never sent")));
                };
                if u64::from(sent) != count {
                    return Err(invalid(Some(i), format!("land of {count} pages from wire {wire} of {sent}")));
                }
                let mut at = first;
                let mut copied = Vec::with_capacity(pages.len());
                for p in pages {
                    copied.push((at, p.first, p.count));
                    at += p.count;
                }
                MemOp::Copy { src: WIRE, dst: *dst, r: *r, pages: copied }
            }
            op => op.clone(),
        };
        out.push((*t, op));
    }
    Ok((std::borrow::Cow::Owned(out), next))
}

/// Lowering walks copied and allocated pages one by one: bounds the work a (corrupt) log can ask
/// for.
fn check_volume(mem: &[(u64, MemOp)]) -> Result<(), LowerError> {
    let mut total = 0u64;
    for (i, (_, op)) in mem.iter().enumerate() {
        total = total.saturating_add(match op {
            MemOp::Copy { pages, .. } => pages.iter().map(|p| u64::from(p.2)).sum(),
            MemOp::Alloc { pages, .. } => crate::pool::pages_in(pages),
            _ => 0,
        });
        if total > MAX_LOWERED_PAGES {
            return Err(invalid(
                Some(i),
                format!(
                    "the memory log allocates or copies more than {MAX_LOWERED_PAGES} pages (the limit of confirm)"
                ),
            ));
        }
    }
    Ok(())
}

/// Rejects memory records whose numbers a well-formed trace never has (a hand-edited or corrupt
/// trace must give an error, not a panic or a silently different program).
fn validate(mem: &[(u64, MemOp)], page_size: u64) -> Result<(), LowerError> {
    if page_size == 0 || page_size > 1 << 16 {
        return Err(invalid(None, format!("page size {page_size} out of range")));
    }
    let max_slot = u64::from(u32::MAX) * page_size;
    let runs_ok = |runs: &[Run]| runs.iter().all(|r| r.first.checked_add(r.count).is_some());
    for (i, (_, op)) in mem.iter().enumerate() {
        let ok = match op {
            MemOp::Reset { .. } | MemOp::Read { .. } => true,
            MemOp::Alloc { pages, .. } | MemOp::Free { pages, .. } | MemOp::Lock { pages, .. } => runs_ok(pages),
            MemOp::Write { slots, .. } => slots
                .iter()
                .all(|&(s, l, p)| s.checked_add(l).is_some_and(|e| e <= max_slot) && p.checked_add(l).is_some()),
            MemOp::Copy { pages, .. } => {
                pages.iter().all(|&(a, b, c)| a.checked_add(c).is_some() && b.checked_add(c).is_some())
            }
            // `lower` expands decode steps and translates wires before it validates.
            MemOp::DecodeStep { .. } | MemOp::Send { .. } | MemOp::Land { .. } => false,
        };
        if !ok {
            return Err(invalid(Some(i), "out-of-range page or slot numbers".into()));
        }
    }
    check_volume(mem)
}

/// What one record of the log clears.
enum Zeroes {
    /// Nothing.
    None,
    /// These pages (a free under `zero_on_free`).
    Pages(Vec<Run>),
    /// The whole pool (a node restart).
    Pool,
}

/// Forward pass: the pages each record leaves as zeros. A free clears only the pages the
/// freeing request holds (as `Pool::free` does: a bad free clears nothing); holders follow the
/// `alloc` records of the log, and a `reset` drops them all.
fn zeroing(mem: &[(u64, MemOp)], m: MemModel) -> Vec<Zeroes> {
    let mut holders: BTreeMap<PoolId, IntervalMap<Holder>> = BTreeMap::new();
    mem.iter()
        .map(|(_, op)| match op {
            MemOp::Reset { pool, .. } => {
                holders.remove(pool);
                Zeroes::Pool
            }
            MemOp::Alloc { pool, r, pages } => {
                let h = holders.entry(*pool).or_insert_with(IntervalMap::new);
                for p in pages {
                    h.set(u64::from(p.first), u64::from(p.end()), Holder::Req(*r));
                }
                Zeroes::None
            }
            MemOp::Free { pool, r, pages } => {
                let h = holders.entry(*pool).or_insert_with(IntervalMap::new);
                let mut ok: Vec<Run> = Vec::new();
                for p in pages {
                    for (s, e, who) in h.pieces(u64::from(p.first), u64::from(p.end())) {
                        if who == Some(Holder::Req(*r)) {
                            push_run(&mut ok, Run { first: s as u32, count: (e - s) as u32 });
                        }
                    }
                }
                for p in &ok {
                    h.clear(u64::from(p.first), u64::from(p.end()));
                }
                if m.zero_on_free && !ok.is_empty() {
                    Zeroes::Pages(ok)
                } else {
                    Zeroes::None
                }
            }
            _ => Zeroes::None,
        })
        .collect()
}

/// A read `lower` looks for: its pool and request, when (`None`: the request's last read, any
/// pool) and the kind it is replayed as.
struct Wanted {
    pool: PoolId,
    request: u32,
    at_ns: Option<u64>,
    kind: String,
}

/// A read found in the log: the index of its op, the target, and the reader's block table then.
struct Found {
    op: usize,
    target: ReadTarget,
    table: Vec<Run>,
}

/// `mem` holds the memory log in order: `(t_ns, op)`; `m` is the run's memory semantics.
///
/// The steps: the reads `select` names ([`wanted_reads`]), found in the log with their block
/// tables ([`find_reads`]); a reverse pass that keeps every op the reads' pages depend on
/// ([`dependencies`]); the kept pages renumbered compactly ([`Renumbering`]); the program emitted
/// in log order ([`emit`]).
///
/// Decode steps are lowered as the records they stand for (`trace::expand_log`): op indices and
/// `ops_total` count those records.
pub fn lower(mem: &[(u64, MemOp)], m: MemModel, select: Select, shape: AttnShape) -> Result<Lowered, LowerError> {
    let mem = &*crate::trace::expand_log(mem);
    let (mem, _) = wires_as_copies(mem)?;
    let mem = &*mem;
    validate(mem, m.page_size)?;
    let found = find_reads(mem, &wanted_reads(&select));
    if found.is_empty() {
        return Err(LowerError::NoRead("no matching attention read in the trace's memory log".into()));
    }
    let last = found.iter().map(|f| f.op).max().expect("non-empty");
    let zeroes = zeroing(&mem[..=last], m);
    let (keep, needed) = dependencies(mem, m.page_size, &found, &zeroes);
    let numbers = Renumbering::of(&needed, m.page_size);
    let mut ops = emit(mem, m.page_size, &found, &zeroes, &keep, &numbers);
    let tenants = compact_tenants(&mut ops)?;
    let pages_kept = needed.values().map(|s| s.len() as u64).sum();
    let ops_kept = keep.iter().filter(|k| **k).count();
    Ok(Lowered {
        program: Program { pools: numbers.pools, ops, shape },
        depends_on: needed,
        targets: found.into_iter().map(|f| f.target).collect(),
        pages_kept,
        ops_kept,
        ops_total: mem.len(),
        tenants,
    })
}

/// Tenant ids above what a program carries (`kvsim_gpu::MAX_TENANT`: a scenario's go to
/// 4,294,967,295) numbered densely in the program, in order, so that such a run confirms (it was
/// refused as "an invalid KV page program"). Returns the program's ids' run ids, or `None` where
/// every id fits and the program keeps the run's own (its KV values, which derive from the id,
/// and so its numbers stay what they were).
fn compact_tenants(ops: &mut [Op]) -> Result<Option<Vec<u32>>, LowerError> {
    let who = |op: &Op| match op {
        Op::Write { writer, .. } => Some(writer.tenant),
        Op::Attend { reader, .. } => Some(reader.tenant),
        _ => None,
    };
    if ops.iter().filter_map(who).all(|t| t <= kvsim_gpu::MAX_TENANT) {
        return Ok(None);
    }
    let ids: Vec<u32> = ops.iter().filter_map(who).collect::<BTreeSet<u32>>().into_iter().collect();
    if ids.len() > kvsim_gpu::MAX_TENANT as usize + 1 {
        return Err(LowerError::Invalid {
            op: None,
            why: format!(
                "the replayed reads depend on KV of {} tenants; a program carries at most {}",
                ids.len(),
                kvsim_gpu::MAX_TENANT as usize + 1
            ),
        });
    }
    let dense = |t: u32| ids.binary_search(&t).expect("every id listed") as u32;
    for op in ops.iter_mut() {
        match op {
            Op::Write { writer, .. } => writer.tenant = dense(writer.tenant),
            Op::Attend { reader, .. } => reader.tenant = dense(reader.tenant),
            _ => {}
        }
    }
    Ok(Some(ids))
}

/// Step 1: the reads to look for. Violating reads: cross-tenant ones first (the leaks to
/// confirm), then by time, each (pool, request, time) once, at most `max`.
fn wanted_reads(select: &Select) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    match select {
        Select::Violations { violations, max } => {
            let mut seen = BTreeSet::new();
            let mut vs: Vec<&ViolationOut> =
                violations.iter().filter(|v| READ_KINDS.contains(&v.kind.as_str())).collect();
            vs.sort_by_key(|v| (READ_KINDS.iter().position(|k| *k == v.kind), v.at_ns, v.request));
            for v in vs {
                let (Some(r), Some(pool)) = (v.request, v.pool.as_deref().and_then(parse_pool)) else { continue };
                if seen.insert((pool, r, v.at_ns)) && wanted.len() < *max {
                    wanted.push(Wanted { pool, request: r, at_ns: Some(v.at_ns), kind: v.kind.clone() });
                }
            }
        }
        Select::Requests(rs) => {
            for r in *rs {
                let pool = PoolId { role: Role::Decode, index: u16::MAX };
                wanted.push(Wanted { pool, request: *r, at_ns: None, kind: "requested".into() });
            }
        }
    }
    wanted
}

/// Step 2: a forward pass keeping each request's block table per pool; every wanted read found
/// (each once), plus the last read of each wanted request, in log order and numbered in it.
fn find_reads(mem: &[(u64, MemOp)], wanted: &[Wanted]) -> Vec<Found> {
    let mut tables: BTreeMap<(PoolId, u32), Vec<Run>> = BTreeMap::new();
    let mut found: Vec<Found> = Vec::new();
    let mut last_read: BTreeMap<u32, Found> = BTreeMap::new();
    for (i, (t, op)) in mem.iter().enumerate() {
        match op {
            MemOp::Reset { pool, .. } => tables.retain(|(p, _), _| p != pool),
            // Locked cached pages start the table; its own allocations follow.
            MemOp::Alloc { pool, r, pages } | MemOp::Lock { pool, r, pages } => {
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
                if let Some(w) = wanted.iter().find(|w| w.pool == *pool && w.request == r.0 && w.at_ns == Some(*t)) {
                    let seen = |f: &Found| f.target.pool == *pool && f.target.request == r.0 && f.target.at_ns == *t;
                    if !found.iter().any(seen) {
                        found.push(Found { op: i, target: mk(&w.kind), table: table.clone() });
                    }
                }
                if wanted.iter().any(|w| w.at_ns.is_none() && w.request == r.0) {
                    last_read.insert(r.0, Found { op: i, target: mk("requested"), table });
                }
            }
            _ => {}
        }
    }
    found.extend(last_read.into_values());
    found.sort_by_key(|f| f.op);
    for (n, f) in found.iter_mut().enumerate() {
        f.target.id = n as u64;
    }
    found
}

/// The pages a read covers: its block table's first `ceil(seq_len / page_size)` pages.
fn table_pages(table: &[Run], seq_len: u64, page_size: u64) -> Vec<u32> {
    crate::pool::prefix_pages(table, seq_len.div_ceil(page_size)).iter().flat_map(|r| r.first..r.end()).collect()
}

/// Step 3: the reverse pass. The pages each read depends on (`live`), and every op that shaped
/// them (`keep`, indexed by op up to the last read). A page leaves `live` at an op that replaces
/// its whole content (a zeroing, a page copy); the returned set keeps every page ever live, the
/// pages of the program.
fn dependencies(
    mem: &[(u64, MemOp)],
    page_size: u64,
    found: &[Found],
    zeroes: &[Zeroes],
) -> (Vec<bool>, BTreeMap<PoolId, BTreeSet<u32>>) {
    let last = zeroes.len() - 1;
    let mut live: BTreeMap<PoolId, BTreeSet<u32>> = BTreeMap::new();
    let mut all: BTreeMap<PoolId, BTreeSet<u32>> = BTreeMap::new();
    let mut keep = vec![false; last + 1];
    let mut targets_at: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, f) in found.iter().enumerate() {
        targets_at.entry(f.op).or_default().push(k);
    }
    let mut make_live = |live: &mut BTreeMap<PoolId, BTreeSet<u32>>, pool: PoolId, pages: &[u32]| {
        live.entry(pool).or_default().extend(pages.iter().copied());
        all.entry(pool).or_default().extend(pages.iter().copied());
    };
    for i in (0..=last).rev() {
        for k in targets_at.get(&i).into_iter().flatten() {
            let f = &found[*k];
            make_live(&mut live, f.target.pool, &table_pages(&f.table, f.target.seq_len, page_size));
        }
        match (&mem[i].1, &zeroes[i]) {
            (MemOp::Reset { pool, .. }, Zeroes::Pool) => {
                keep[i] = live.remove(pool).is_some_and(|set| !set.is_empty());
            }
            (MemOp::Free { pool, .. }, Zeroes::Pages(runs)) => {
                if let Some(set) = live.get_mut(pool) {
                    for r in runs {
                        let hit: Vec<u32> = set.range(r.first..r.end()).copied().collect();
                        keep[i] |= !hit.is_empty();
                        for p in hit {
                            set.remove(&p);
                        }
                    }
                }
            }
            (MemOp::Write { pool, slots, .. }, _) => {
                if let Some(set) = live.get(pool) {
                    keep[i] = slots.iter().any(|&(s, l, _)| {
                        set.range((s / page_size) as u32..(s + l).div_ceil(page_size) as u32).next().is_some()
                    });
                }
            }
            (MemOp::Copy { src, dst, pages, .. }, _) => {
                // Runs land in order: walk them backwards, so a page a later run overwrote is no
                // longer live for an earlier one.
                let mut srcs = Vec::new();
                for &(s, d, c) in pages.iter().rev() {
                    for k in 0..c {
                        if live.get_mut(dst).is_some_and(|set| set.remove(&(d + k))) {
                            srcs.push(s + k);
                        }
                    }
                    if !srcs.is_empty() {
                        keep[i] = true;
                        make_live(&mut live, *src, &srcs);
                        srcs.clear();
                    }
                }
            }
            _ => {}
        }
    }
    (keep, all)
}

/// Step 4: page ids compacted per pool (page 0 stays reserved) and pools numbered in order.
struct Renumbering {
    pool_ids: BTreeMap<PoolId, u32>,
    /// Per pool of the run: its page → the program's page.
    maps: BTreeMap<PoolId, BTreeMap<u32, u32>>,
    pools: Vec<PoolSpec>,
}

impl Renumbering {
    fn of(needed: &BTreeMap<PoolId, BTreeSet<u32>>, page_size: u64) -> Renumbering {
        let pool_ids = needed.keys().enumerate().map(|(i, p)| (*p, i as u32)).collect();
        let maps = needed
            .iter()
            .map(|(p, set)| (*p, set.iter().enumerate().map(|(i, pg)| (*pg, i as u32 + 1)).collect()))
            .collect();
        let ps = page_size as u32;
        let pools = needed
            .iter()
            .enumerate()
            .map(|(i, (_, set))| PoolSpec { pool: i as u32, pages: set.len() as u32 + 1, page_size: ps })
            .collect();
        Renumbering { pool_ids, maps, pools }
    }
}

/// Step 5: the program, in log order: each kept op renumbered, and each read where it happened.
fn emit(
    mem: &[(u64, MemOp)],
    page_size: u64,
    found: &[Found],
    zeroes: &[Zeroes],
    keep: &[bool],
    n: &Renumbering,
) -> Vec<Op> {
    let mut targets_at: BTreeMap<usize, Vec<&Found>> = BTreeMap::new();
    for f in found {
        targets_at.entry(f.op).or_default().push(f);
    }
    let mut ops = Vec::new();
    for (i, kept) in keep.iter().enumerate() {
        if *kept {
            match &mem[i].1 {
                MemOp::Write { pool, r, tenant, slots } => ops.push(Op::Write {
                    pool: n.pool_ids[pool],
                    slots: write_runs(slots, &n.maps[pool], page_size),
                    writer: Writer { tenant: tenant.0, request: r.0 },
                }),
                MemOp::Copy { src, dst, pages, .. } => ops.push(Op::Copy {
                    src_pool: n.pool_ids[src],
                    dst_pool: n.pool_ids[dst],
                    pages: copy_runs(pages, &n.maps[src], &n.maps[dst]),
                }),
                MemOp::Reset { pool, .. } | MemOp::Free { pool, .. } => {
                    ops.push(Op::Zero { pool: n.pool_ids[pool], pages: zeroed_runs(&zeroes[i], &n.maps[pool]) })
                }
                _ => {}
            }
        }
        for f in targets_at.get(&i).into_iter().flatten() {
            ops.push(attend(f, &n.maps[&f.target.pool], n.pool_ids[&f.target.pool], page_size));
        }
    }
    ops
}

/// A write's slot runs on the program's pages (only the mapped pages), merged where contiguous.
fn write_runs(slots: &[(u64, u64, u64)], map: &BTreeMap<u32, u32>, page_size: u64) -> Vec<SlotRun> {
    let mut runs: Vec<SlotRun> = Vec::new();
    for &(s, l, pos) in slots {
        for (&pg, &np) in map.range((s / page_size) as u32..(s + l).div_ceil(page_size) as u32) {
            let lo = s.max(u64::from(pg) * page_size);
            let hi = (s + l).min(u64::from(pg + 1) * page_size);
            let start = u64::from(np) * page_size + (lo - u64::from(pg) * page_size);
            let first_pos = pos + (lo - s);
            match runs.last_mut() {
                Some(x) if x.start_slot + x.len == start && x.first_pos + x.len == first_pos => x.len += hi - lo,
                _ => runs.push(SlotRun { start_slot: start, len: hi - lo, first_pos }),
            }
        }
    }
    runs
}

/// A page copy's runs between mapped pages, merged where contiguous.
fn copy_runs(pages: &[(u32, u32, u32)], sm: &BTreeMap<u32, u32>, dm: &BTreeMap<u32, u32>) -> Vec<(u32, u32, u32)> {
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
    out
}

/// Every mapped page an op cleared (all of the pool's on a reset), as runs.
fn zeroed_runs(zeroes: &Zeroes, map: &BTreeMap<u32, u32>) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut push = |np: u32| match out.last_mut() {
        Some(x) if x.0 + x.1 == np => x.1 += 1,
        _ => out.push((np, 1)),
    };
    match zeroes {
        Zeroes::Pool => map.values().for_each(|&np| push(np)),
        Zeroes::Pages(runs) => {
            for r in runs {
                map.range(r.first..r.end()).for_each(|(_, &np)| push(np));
            }
        }
        Zeroes::None => {}
    }
    out
}

/// A read replayed: the reader's block table on the program's pages.
fn attend(f: &Found, map: &BTreeMap<u32, u32>, pool: u32, page_size: u64) -> Op {
    let mut table: Vec<(u32, u32)> = Vec::new();
    for pg in table_pages(&f.table, f.target.seq_len, page_size) {
        let np = map[&pg];
        match table.last_mut() {
            Some(x) if x.0 + x.1 == np => x.1 += 1,
            _ => table.push((np, 1)),
        }
    }
    Op::Attend {
        id: f.target.id,
        pool,
        reader: Writer { tenant: f.target.tenant, request: f.target.request },
        block_table: table,
        seq_len: f.target.seq_len,
    }
}
