//! Micro-benchmarks of kvsim's hot paths (`cargo bench -p kvsim`; see BENCHMARKS.md):
//! - `event_queue`: World's (time, sequence) heap through the public API: events scheduled with
//!   `World::at` and popped by `World::run` (each pop also hashes the event into the trace and
//!   dispatches it; `Tick` of an idle node is the cheapest handler), and a whole tiny scenario;
//! - `alloc`: `Pool::alloc` + `Pool::free` churn under each free-list policy;
//! - `ownership`: `Pool::write` (a decode token, a prefill chunk), `page_contents` + `land_copy`
//!   (a transfer batch), `Pool::read` of page runs;
//! - `oracle`: `check::oracle::summarize`, clean and crossing tenants, and its independence of the
//!   number of tokens in a run.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use kvsim::check::oracle::summarize;
use kvsim::config::{FreeListPolicy, SimConfig};
use kvsim::event::Ev;
use kvsim::pool::{push_run, Holder, Pool, Run};
use kvsim::scenario::Scenario;
use kvsim::trace::Tracer;
use kvsim::types::{Instant, NodeId, RequestId, Role, TenantId};
use kvsim::world::World;
use std::hint::black_box;

const STUB_LEAK: &str = include_str!("../../scenarios/small/stub-leak.toml");

fn stub_leak() -> SimConfig {
    Scenario::parse("scenarios/small/stub-leak.toml", STUB_LEAK)
        .and_then(|s| s.resolve(&Default::default()))
        .expect("stub-leak resolves")
}

/// A deterministic stream of numbers (benchmarks must not depend on OS randomness either).
#[derive(Clone)]
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn decode_pool(tokens: u64, page_size: u64, policy: FreeListPolicy) -> Pool {
    Pool::new(NodeId { role: Role::Decode, index: 0 }, tokens, page_size, policy, false)
}

/// A world with no requests: `n` events at pseudo-random times are scheduled, then popped.
fn event_queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("event_queue");
    let mut empty = stub_leak();
    empty.requests.clear();
    empty.generator = None;
    for n in [1_000u64, 100_000] {
        g.throughput(Throughput::Elements(n));
        g.bench_with_input(BenchmarkId::new("schedule_pop_idle_tick", n), &n, |b, &n| {
            b.iter_batched(
                || World::new(empty.clone(), Tracer::new(None)),
                |mut w| {
                    let mut rng = Lcg(7);
                    // Within the liveness horizon (an empty world's horizon is liveness_bound_s).
                    let span = w.cfg.liveness_bound_s * 1_000_000_000;
                    for i in 0..n {
                        let node = NodeId { role: if i % 2 == 0 { Role::Prefill } else { Role::Decode }, index: 0 };
                        w.at(Instant(rng.below(span)), Ev::Tick { node });
                    }
                    w.run();
                    assert_eq!(w.events(), n);
                    w
                },
                BatchSize::LargeInput,
            )
        });
    }
    let cfg = stub_leak();
    let events = kvsim::simulate(cfg.clone(), None, false).events();
    g.throughput(Throughput::Elements(events));
    g.bench_function(BenchmarkId::new("simulate_stub_leak", events), |b| {
        b.iter(|| kvsim::simulate(black_box(cfg.clone()), None, false))
    });
    g.finish();
}

/// Allocator churn: 64 live allocations of 1..=256 pages; a step frees the oldest and allocates a
/// new one. The state is warmed up by `warm` steps once, then each sample runs 1,000 steps on a
/// fresh clone of it, so that every sample measures the same stretch: `lifo` and `lru` never
/// coalesce their free lists, which fragment further the longer a pool churns (BENCHMARKS.md).
#[derive(Clone)]
struct Churn {
    pool: Pool,
    live: std::collections::VecDeque<(u32, Vec<Run>)>,
    rng: Lcg,
    next: u32,
}

impl Churn {
    fn new(policy: FreeListPolicy, warm: u32) -> Churn {
        let pool = decode_pool(16 * 65_536, 16, policy);
        let mut c = Churn { pool, live: Default::default(), rng: Lcg(1), next: 0 };
        for _ in 0..warm {
            c.step();
        }
        c
    }

    fn step(&mut self) {
        if self.live.len() >= 64 {
            let (r, runs) = self.live.pop_front().expect("non-empty");
            let bad = self.pool.free(&runs, Holder::Req(RequestId(r)));
            debug_assert!(bad.is_empty());
        }
        let n = 1 + self.rng.below(256);
        let runs = self.pool.alloc(n, Holder::Req(RequestId(self.next))).expect("pool large enough");
        self.live.push_back((self.next, runs));
        self.next += 1;
    }
}

fn alloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc");
    g.throughput(Throughput::Elements(1000));
    for (name, policy, warm) in [
        ("sorted_on_merge", FreeListPolicy::SortedOnMerge, 10_000),
        ("lifo", FreeListPolicy::Lifo, 10_000),
        ("fifo", FreeListPolicy::Fifo, 10_000),
        ("lru", FreeListPolicy::Lru, 10_000),
        ("lru_after_100k", FreeListPolicy::Lru, 100_000),
    ] {
        let state = Churn::new(policy, warm);
        g.bench_function(BenchmarkId::new("alloc_free_1000_pairs", name), |b| {
            b.iter_batched(
                || state.clone(),
                |mut c| {
                    for _ in 0..1000 {
                        c.step();
                    }
                    c
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// A fragmented block table of `runs` runs of `pages_per_run` pages for request 1 (request 0 holds
/// the pages in between).
fn fragmented(p: &mut Pool, runs: u32, pages_per_run: u64) -> Vec<Run> {
    let mut table = Vec::new();
    for _ in 0..runs {
        p.alloc(1, Holder::Req(RequestId(0))).expect("space");
        for r in p.alloc(pages_per_run, Holder::Req(RequestId(1))).expect("space") {
            push_run(&mut table, r);
        }
    }
    table
}

fn ownership(c: &mut Criterion) {
    let mut g = c.benchmark_group("ownership");
    let (ps, tenant, me) = (16u64, TenantId(1), RequestId(1));
    // Decode's per-token write at the end of a 64-run, 1M-token sequence.
    {
        let mut p = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let table = fragmented(&mut p, 64, 1024);
        let len = 64 * 1024 * ps;
        p.write(&table, 0, len - 4096, tenant, me, Instant(0), 0);
        let mut pos = len - 4096;
        g.throughput(Throughput::Elements(1));
        g.bench_function("write_decode_token", |b| {
            b.iter(|| {
                let rep = p.write(&table, pos, pos + 1, tenant, me, Instant(pos), 0);
                pos = if pos + 1 == len { len - 4096 } else { pos + 1 };
                rep
            })
        });
    }
    // A prefill chunk of 8,192 tokens over 8 runs.
    {
        let mut p = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let table = fragmented(&mut p, 8, 64);
        g.throughput(Throughput::Elements(8192));
        g.bench_function("write_prefill_chunk_8192", |b| {
            b.iter(|| p.write(&table, 0, 8192, tenant, me, Instant(1), 0))
        });
    }
    // A transfer batch: 64 source runs (each with 2 writers) copied into 16 destination runs.
    {
        let mut src = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let st = fragmented(&mut src, 64, 16);
        let half = 64 * 16 * ps / 2;
        src.write(&st, 0, half, TenantId(2), RequestId(1), Instant(0), 0);
        src.write(&st, half, 2 * half, tenant, me, Instant(0), 0);
        let mut dst = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let dt = fragmented(&mut dst, 16, 64);
        g.throughput(Throughput::Elements(64 * 16));
        g.bench_function("page_contents_land_copy_1024_pages", |b| {
            b.iter(|| {
                let contents = src.page_contents(&st);
                dst.land_copy(&contents, &dt, me)
            })
        });
    }
    // Reads of page runs: a 1M-token table in 64 runs, with 1 or 4,096 ownership runs under it.
    for writers in [1u64, 4096] {
        let mut p = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let table = fragmented(&mut p, 64, 1024);
        let len = 64 * 1024 * ps;
        let step = len / writers;
        for i in 0..writers {
            p.write(&table, i * step, (i + 1) * step, TenantId(i as u32 % 3), RequestId(i as u32), Instant(0), 0);
        }
        g.throughput(Throughput::Elements(len));
        g.bench_with_input(BenchmarkId::new("read_1m_tokens_writers", writers), &writers, |b, _| {
            b.iter(|| {
                let mut n = 0u64;
                p.read(&table, 0, len, |_, _, l, w| n += l * u64::from(w.is_some()));
                n
            })
        });
    }
    g.finish();
}

fn oracle(c: &mut Criterion) {
    let mut g = c.benchmark_group("oracle_summarize");
    let (ps, tenant, me) = (16u64, TenantId(1), RequestId(1));
    // Token independence: one run of 1k or 1M tokens costs the same.
    for tokens in [1_024u64, 1_048_576] {
        let mut p = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let table = p.alloc(tokens / ps, Holder::Req(me)).expect("space");
        p.write(&table, 0, tokens, tenant, me, Instant(0), 0);
        g.bench_with_input(BenchmarkId::new("clean_one_run_tokens", tokens), &tokens, |b, &t| {
            b.iter(|| summarize(&p, &table, 0, t, me, tenant, &|_, _, _| 0))
        });
    }
    // Runs matter: a 64-run table, clean or with every other run written by another tenant.
    for foreign in [false, true] {
        let mut p = decode_pool(ps * 80_000, ps, FreeListPolicy::Fifo);
        let table = fragmented(&mut p, 64, 64);
        let len = 64 * 64 * ps;
        p.write(&table, 0, len, tenant, me, Instant(0), 0);
        if foreign {
            // Half of every other run overwritten by tenant 9 (as a late transfer write would).
            for i in (0..64u64).step_by(2) {
                p.write(&table, i * 64 * ps, (i * 64 + 32) * ps, TenantId(9), RequestId(9), Instant(0), 0);
            }
        }
        let name = if foreign { "64_runs_cross_tenant" } else { "64_runs_clean" };
        g.bench_function(name, |b| b.iter(|| summarize(&p, &table, 0, len, me, tenant, &|_, _, _| 0)));
    }
    g.finish();
}

criterion_group!(benches, event_queue, alloc, ownership, oracle);
criterion_main!(benches);
