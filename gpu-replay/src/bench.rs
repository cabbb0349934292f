//! Bench programs and the bandwidth check.
//!
//! [`bench_programs`] is the fixed set the device check replays on CUDA and on the CPU:
//! own-only, stale-foreign, never-written, copy-then-free, zeroed-on-free, a wide GQA shape
//! with page size 1, 32k-token reads (every dtype, GQA group 16) and (when asked) a
//! full-scale 1M-token read. Each carries the shares it must show,
//! so the same set is an end-to-end test on the CPU here.
//!
//! [`bandwidth_check`] measures device copy bandwidth and the attention kernels' read
//! bandwidth on a long read; it needs CUDA and answers [`GpuError::Unavailable`] without.

use crate::cuda::CudaBackend;
use crate::error::GpuError;
use crate::program::{AttnShape, Dtype, Op, PoolSpec, Program, SlotRun, Writer};
use crate::Backend;

/// The length of the full-scale read (2^20 tokens).
pub const FULL_SCALE_TOKENS: u64 = 1 << 20;

/// A named program and the shares its read must show.
#[derive(Debug, Clone)]
pub struct BenchProgram {
    /// Short name for the table.
    pub name: &'static str,
    /// The program (one `Attend`, id 0).
    pub program: Program,
    /// Inclusive bounds on the foreign share.
    pub foreign: (f64, f64),
    /// Inclusive bounds on the zeros share.
    pub zeros: (f64, f64),
    /// The share of the device's measured copy bandwidth the read must reach on CUDA
    /// (issue 16's targets: 80% on the 1M-token read, 60% on 32k-token reads), if any.
    pub bandwidth_target: Option<f64>,
}

impl BenchProgram {
    /// Tokens read by the program's (single) `Attend`.
    pub fn seq_len(&self) -> u64 {
        self.program
            .ops
            .iter()
            .find_map(|op| match op {
                Op::Attend { seq_len, .. } => Some(*seq_len),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// Whether a result's shares lie inside the expected bounds.
    pub fn accepts(&self, foreign_share: f64, zeros_share: f64) -> bool {
        (self.foreign.0..=self.foreign.1).contains(&foreign_share)
            && (self.zeros.0..=self.zeros.1).contains(&zeros_share)
    }
}

fn who(tenant: u32, request: u32) -> Writer {
    Writer { tenant, request }
}

/// A write of `pages` pages starting at `first_page`, positions from `first_pos`.
pub fn write_pages(pool: u32, page_size: u32, first_page: u32, pages: u32, first_pos: u64, writer: Writer) -> Op {
    Op::Write {
        pool,
        slots: vec![SlotRun {
            start_slot: u64::from(first_page) * u64::from(page_size),
            len: u64::from(pages) * u64::from(page_size),
            first_pos,
        }],
        writer,
    }
}

fn attend(pool: u32, reader: Writer, block_table: Vec<(u32, u32)>, seq_len: u64) -> Op {
    Op::Attend { id: 0, pool, reader, block_table, seq_len }
}

fn shape(heads: u32, kv_heads: u32, head_dim: u32, dtype: Dtype) -> AttnShape {
    AttnShape { heads, kv_heads, head_dim, dtype }
}

/// The reader reads only its own writes: foreign share 0.
pub fn own_only() -> Program {
    let ps = 16;
    Program {
        pools: vec![PoolSpec { pool: 0, pages: 256, page_size: ps }],
        ops: vec![write_pages(0, ps, 0, 256, 0, who(5, 1)), attend(0, who(5, 1), vec![(0, 256)], 4096)],
        shape: AttnShape::default_small(),
    }
}

/// Another tenant's stale pages, freed but not cleared, then reused by the reader for
/// only its first eighth: foreign share about 7/8.
pub fn stale_foreign() -> Program {
    let ps = 64;
    Program {
        pools: vec![PoolSpec { pool: 0, pages: 64, page_size: ps }],
        ops: vec![
            write_pages(0, ps, 0, 64, 0, who(9, 1)),
            Op::Free { pool: 0, pages: vec![(0, 64)] },
            write_pages(0, ps, 0, 8, 0, who(3, 2)),
            attend(0, who(3, 2), vec![(0, 64)], 4096),
        ],
        shape: AttnShape::default_small(),
    }
}

/// A read over pages nobody wrote: zeros share exactly 1.
pub fn never_written() -> Program {
    Program {
        pools: vec![PoolSpec { pool: 0, pages: 64, page_size: 16 }],
        ops: vec![attend(0, who(2, 1), vec![(10, 54), (0, 10)], 1000)],
        shape: shape(8, 2, 64, Dtype::Bf16),
    }
}

/// Tenant 1 writes a prefill pool; pages are copied to a decode pool and the prefill pages
/// freed; tenant 2 then reads the copied pages: the copied writer shows, foreign share 1.
pub fn copy_then_free() -> Program {
    let ps = 16;
    Program {
        pools: vec![PoolSpec { pool: 0, pages: 32, page_size: ps }, PoolSpec { pool: 1, pages: 64, page_size: ps }],
        ops: vec![
            write_pages(0, ps, 4, 20, 0, who(1, 7)),
            Op::Copy { src_pool: 0, dst_pool: 1, pages: vec![(4, 40, 10), (14, 5, 10)] },
            Op::Free { pool: 0, pages: vec![(4, 20)] },
            attend(1, who(2, 3), vec![(40, 10), (5, 10)], 320),
        ],
        shape: shape(4, 4, 32, Dtype::F32),
    }
}

/// Another tenant's pages cleared by `Zero` (a free under `zero_on_free`) except the last
/// quarter; the reader wrote the first eighth: zeros ~5/8, foreign ~1/4 (the CUDA memset
/// path of the exactness fix).
pub fn zeroed_on_free() -> Program {
    let ps = 16;
    Program {
        pools: vec![PoolSpec { pool: 0, pages: 64, page_size: ps }],
        ops: vec![
            write_pages(0, ps, 0, 64, 0, who(9, 1)),
            Op::Free { pool: 0, pages: vec![(0, 48)] },
            Op::Zero { pool: 0, pages: vec![(0, 48)] },
            write_pages(0, ps, 0, 8, 0, who(3, 2)),
            attend(0, who(3, 2), vec![(0, 64)], 1024),
        ],
        shape: shape(8, 2, 64, Dtype::F16),
    }
}

/// A wide GQA shape (32 heads over 8 KV heads, head_dim 128, bf16) with page size 1 and a
/// scattered block table; 16 tenants each wrote 1/16 of the slots: foreign share ~15/16.
pub fn gqa_page1() -> Program {
    let slots = 8192u32;
    let mut ops = Vec::new();
    for t in 0..16u32 {
        ops.push(Op::Write {
            pool: 0,
            slots: vec![SlotRun { start_slot: u64::from(t * 512), len: 512, first_pos: 0 }],
            writer: who(100 + t, t),
        });
    }
    // Logical page i maps to physical page (i * 5) mod slots: a stride through every page.
    let table = (0..slots).map(|i| ((i * 5) % slots, 1)).collect();
    ops.push(attend(0, who(100, 0), table, u64::from(slots)));
    Program {
        pools: vec![PoolSpec { pool: 0, pages: slots, page_size: 1 }],
        ops,
        shape: shape(32, 8, 128, Dtype::Bf16),
    }
}

/// The full-scale read: `seq_len` tokens (a multiple of 64) in pages of 64. 512 other
/// tenants filled the pool earlier (stale, freed, never cleared); the reader then wrote the
/// first half of the pages; it reads all of them through a block table in reverse
/// 16-page runs. Foreign share about 1/2.
pub fn full_scale_read(seq_len: u64, shape: AttnShape) -> Program {
    let ps = 64u32;
    let pages = u32::try_from(seq_len / u64::from(ps)).unwrap_or(u32::MAX).max(16) & !15;
    let tenants = 512u32.min(pages / 16).max(1);
    let per_tenant = pages / tenants;
    let mut ops = Vec::new();
    for t in 0..tenants {
        let first = t * per_tenant;
        let count = if t + 1 == tenants { pages - first } else { per_tenant };
        ops.push(write_pages(0, ps, first, count, 0, who(1000 + t, t)));
    }
    ops.push(Op::Free { pool: 0, pages: vec![(0, pages)] });
    ops.push(write_pages(0, ps, 0, pages / 2, 0, who(7, 1)));
    let table = (0..pages / 16).rev().map(|r| (r * 16, 16)).collect();
    ops.push(attend(0, who(7, 1), table, u64::from(pages) * u64::from(ps)));
    Program { pools: vec![PoolSpec { pool: 0, pages, page_size: ps }], ops, shape }
}

/// The bench set; with `full_scale`, the 1M-token read is appended. The 32k-token reads
/// (every dtype, and GQA group 16 at head_dim 128) and the 1M-token read carry bandwidth
/// targets.
pub fn bench_programs(full_scale: bool) -> Vec<BenchProgram> {
    let small = |name, program, foreign, zeros| BenchProgram { name, program, foreign, zeros, bandwidth_target: None };
    let half = (0.45, 0.55);
    let none = (-1e-4, 1e-4);
    let read = |name, tokens, shape, target| BenchProgram {
        name,
        program: full_scale_read(tokens, shape),
        foreign: half,
        zeros: none,
        bandwidth_target: Some(target),
    };
    let mut v = vec![
        small("own-only", own_only(), (0.0, 0.0), (-1e-5, 1e-5)),
        small("stale-foreign", stale_foreign(), (0.8, 0.95), (-1e-5, 1e-5)),
        small("never-written", never_written(), (0.0, 0.0), (1.0, 1.0)),
        small("copy-then-free", copy_then_free(), (0.99999, 1.00001), (-1e-5, 1e-5)),
        small("zeroed-on-free", zeroed_on_free(), (0.15, 0.35), (0.5, 0.75)),
        small("gqa-page1-bf16", gqa_page1(), (0.9, 0.97), (-1e-5, 1e-5)),
        read("32k-f16", 1 << 15, AttnShape::default_small(), 0.6),
        read("32k-bf16", 1 << 15, shape(8, 2, 64, Dtype::Bf16), 0.6),
        read("32k-f32", 1 << 15, shape(8, 2, 64, Dtype::F32), 0.6),
        read("32k-g16-hd128", 1 << 15, shape(16, 1, 128, Dtype::F16), 0.6),
    ];
    if full_scale {
        v.push(read("full-1M", FULL_SCALE_TOKENS, AttnShape::default_small(), 0.8));
    }
    v
}

/// What [`bandwidth_check`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandwidthReport {
    /// Tokens of the timed read.
    pub seq_len: u64,
    /// Best kernel time of the read (partial + reduce), ms.
    pub kernel_ms: f64,
    /// Bytes the read must load over its kernel time, GB/s.
    pub kernel_gbps: f64,
    /// Device copy bandwidth (bytes read + written), GB/s.
    pub copy_gbps: f64,
    /// `kernel_gbps / copy_gbps`; the target is at least 0.6.
    pub ratio: f64,
    /// The read's largest difference from the CPU reference.
    pub max_abs_diff_vs_cpu: f64,
}

/// Bytes of the buffer the copy bandwidth is measured with (1 GiB).
pub const COPY_BYTES: usize = 1 << 30;

/// On CUDA: measures copy bandwidth (memcpy_dtod of [`COPY_BYTES`], 10 times) and times
/// the attention kernels on [`full_scale_read`] of `seq_len` tokens (best of 10).
/// Without CUDA: [`GpuError::Unavailable`].
pub fn bandwidth_check(shape: AttnShape, seq_len: u64) -> Result<BandwidthReport, GpuError> {
    let mut backend = CudaBackend::new()?;
    let copy_gbps = backend.copy_bandwidth(COPY_BYTES, 10)?;
    backend.set_repetitions(10);
    let program = full_scale_read(seq_len, shape);
    let results = backend.run(&program)?;
    let timing = *backend
        .last_timings()
        .first()
        .ok_or_else(|| GpuError::InvalidProgram("the full-scale program has no read".into()))?;
    let kernel_gbps = timing.gbps();
    Ok(BandwidthReport {
        seq_len: timing.seq_len,
        kernel_ms: timing.kernel_ms,
        kernel_gbps,
        copy_gbps,
        ratio: kernel_gbps / copy_gbps,
        max_abs_diff_vs_cpu: results.first().and_then(|r| r.max_abs_diff_vs_cpu).unwrap_or(f64::NAN),
    })
}
