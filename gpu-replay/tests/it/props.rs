//! Property tests: the paged CPU kernel equals dense attention over the gathered slots.
//!
//! The oracle is independent of the replay: it tracks which `(writer, position)` each slot
//! holds by itself (writes, page copies and zeroed pages), re-derives the K/V values, builds the
//! effective provenance values from its own owner map, and runs [`dense_reference`] in f64.

use std::collections::BTreeSet;

use kvsim_gpu::values::{derive_kv, derive_query, flag_dim, foreign_dim, own_dim};
use kvsim_gpu::{dense_reference, replay_outputs, AttnShape, Dtype, Op, PoolSpec, Program, SlotRun, Writer};
use proptest::prelude::*;

const SHAPES: [(u32, u32, u32); 7] = [(1, 1, 4), (2, 1, 8), (4, 2, 16), (8, 2, 64), (6, 3, 12), (4, 4, 32), (16, 2, 8)];
const PAGE_SIZES: [u32; 3] = [1, 16, 64];
const DTYPES: [Dtype; 3] = [Dtype::F16, Dtype::Bf16, Dtype::F32];

#[derive(Debug, Clone)]
struct Case {
    shape: usize,
    dtype: usize,
    page_size: usize,
    pages: u32,
    /// (pool, tenant, request, start, len, first_pos), start and len reduced modulo the pool.
    writes: Vec<(u32, u32, u32, u64, u64, u64)>,
    /// (src_page, dst_page, count) from pool 0 to pool 1, reduced modulo the pool.
    copies: Vec<(u32, u32, u32)>,
    /// (pool, first_page, count) cleared after the copy, reduced modulo the pool.
    zeros: Vec<(u32, u32, u32)>,
    read_pool: u32,
    reader: (u32, u32),
    table: Vec<u32>,
    seq_len: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0..SHAPES.len(),
        0..DTYPES.len(),
        0..PAGE_SIZES.len(),
        1u32..=8,
        prop::collection::vec((0u32..2, 0u32..4, 0u32..3, any::<u64>(), any::<u64>(), 0u64..1 << 40), 0..6),
        prop::collection::vec((any::<u32>(), any::<u32>(), any::<u32>()), 0..3),
        prop::collection::vec((0u32..2, any::<u32>(), any::<u32>()), 0..3),
        0u32..2,
        (0u32..4, 0u32..3),
        prop::collection::vec(any::<u32>(), 1..=8),
        any::<u64>(),
    )
        .prop_map(|(shape, dtype, page_size, pages, writes, copies, zeros, read_pool, reader, table, seq)| Case {
            shape,
            dtype,
            page_size,
            pages,
            writes,
            copies,
            zeros,
            read_pool,
            reader,
            table,
            seq_len: seq,
        })
}

fn shape_of(c: &Case) -> AttnShape {
    let (heads, kv_heads, head_dim) = SHAPES[c.shape];
    AttnShape { heads, kv_heads, head_dim, dtype: DTYPES[c.dtype] }
}

/// Lowers a case into a valid program.
fn program(c: &Case) -> Program {
    let ps = PAGE_SIZES[c.page_size];
    let slots = u64::from(c.pages) * u64::from(ps);
    let mut ops = Vec::new();
    for &(pool, tenant, request, start, len, first_pos) in &c.writes {
        let start = start % slots;
        let len = len % (slots - start + 1);
        ops.push(Op::Write {
            pool,
            slots: vec![SlotRun { start_slot: start, len, first_pos }],
            writer: Writer { tenant, request },
        });
    }
    let copies = c
        .copies
        .iter()
        .map(|&(s, d, n)| {
            let s = s % c.pages;
            let d = d % c.pages;
            let n = n % (c.pages - s.max(d) + 1);
            (s, d, n)
        })
        .collect();
    ops.push(Op::Copy { src_pool: 0, dst_pool: 1, pages: copies });
    ops.push(Op::Free { pool: 0, pages: vec![(0, c.pages)] });
    for &(pool, first, count) in &c.zeros {
        let first = first % c.pages;
        let count = count % (c.pages - first + 1);
        ops.push(Op::Zero { pool, pages: vec![(first, count)] });
    }
    let table: Vec<(u32, u32)> = c.table.iter().map(|&p| (p % c.pages, 1)).collect();
    let table_slots = table.len() as u64 * u64::from(ps);
    ops.push(Op::Attend {
        id: 7,
        pool: c.read_pool,
        reader: Writer { tenant: c.reader.0, request: c.reader.1 },
        block_table: table,
        seq_len: 1 + c.seq_len % table_slots,
    });
    Program {
        pools: vec![
            PoolSpec { pool: 0, pages: c.pages, page_size: ps },
            PoolSpec { pool: 1, pages: c.pages, page_size: ps },
        ],
        ops,
        shape: shape_of(c),
    }
}

type Owner = Option<(Writer, u64)>;

/// The oracle: its own slot-owner simulation, then dense attention.
fn oracle(p: &Program) -> (Vec<f32>, BTreeSet<u32>) {
    let ps = p.pools[0].page_size as usize;
    let slots = p.pools[0].slots() as usize;
    let mut owner: [Vec<Owner>; 2] = [vec![None; slots], vec![None; slots]];
    let shape = p.shape;
    for op in &p.ops {
        match op {
            Op::Write { pool, slots: runs, writer } => {
                for r in runs {
                    for i in 0..r.len {
                        owner[*pool as usize][(r.start_slot + i) as usize] = Some((*writer, r.first_pos + i));
                    }
                }
            }
            Op::Copy { pages, .. } => {
                for &(s, d, n) in pages {
                    for o in 0..n as usize * ps {
                        owner[1][d as usize * ps + o] = owner[0][s as usize * ps + o];
                    }
                }
            }
            Op::Free { .. } => {}
            Op::Zero { pool, pages } => {
                for &(first, count) in pages {
                    owner[*pool as usize][first as usize * ps..(first + count) as usize * ps].fill(None);
                }
            }
            Op::Attend { pool, reader, block_table, seq_len, .. } => {
                let slot_elems = shape.slot_elems() as usize;
                let hd = shape.head_dim;
                let (mut keys, mut vals) = (Vec::new(), Vec::new());
                let mut tenants = BTreeSet::new();
                let pages: Vec<u32> = block_table.iter().flat_map(|&(f, n)| f..f + n).collect();
                for t in 0..*seq_len as usize {
                    let slot = pages[t / ps] as usize * ps + t % ps;
                    match owner[*pool as usize][slot] {
                        None => {
                            keys.extend(std::iter::repeat_n(0.0, slot_elems));
                            vals.extend(std::iter::repeat_n(0.0, slot_elems));
                        }
                        Some((w, pos)) => {
                            tenants.insert(w.tenant);
                            let (k, mut v) = derive_kv(&shape, w, pos);
                            let own = w.tenant == reader.tenant;
                            for head in v.chunks_exact_mut(hd as usize) {
                                head[flag_dim(hd)] = 1.0;
                                head[own_dim(hd)] = if own { 1.0 } else { 0.0 };
                                head[foreign_dim(hd)] = if own { 0.0 } else { 1.0 };
                            }
                            keys.extend(k);
                            vals.extend(v);
                        }
                    }
                }
                let q = derive_query(&shape, *reader, *seq_len);
                return (dense_reference(&shape, &q, &keys, &vals), tenants);
            }
        }
    }
    unreachable!("every case ends with a read")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn paged_cpu_kernel_equals_dense_attention(c in case()) {
        let p = program(&c);
        let out = replay_outputs(&p).expect("the lowering yields valid programs");
        prop_assert_eq!(out.len(), 1);
        let (expected, tenants) = oracle(&p);
        let got = &out[0].output;
        prop_assert_eq!(got.len(), expected.len());
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            prop_assert!((a - b).abs() <= 2e-5, "dim {}: paged {} dense {}", i, a, b);
        }
        let seen: BTreeSet<u32> = out[0].per_tenant.iter().map(|t| t.0).collect();
        prop_assert_eq!(seen, tenants);
        let shares = kvsim_gpu::values::shares_from_output(&p.shape, got);
        let listed: f64 = out[0].per_tenant.iter().map(|t| t.1).sum();
        prop_assert!((listed - (1.0 - shares.zeros)).abs() < 1e-5, "listed {} zeros {}", listed, shares.zeros);
        let reader = c.reader.0;
        let own: f64 = out[0].per_tenant.iter().filter(|t| t.0 == reader).map(|t| t.1).sum();
        prop_assert!((own - shares.own).abs() < 1e-5, "own {} vs {}", own, shares.own);
    }
}
