//! The program format: JSON round trip, validation messages, size limits.

use kvsim_gpu::program::{CPU_POOL_BYTES_LIMIT, MAX_TENANT};
use kvsim_gpu::{bench, AttnShape, Backend, CpuBackend, Dtype, GpuError, Op, PoolSpec, Program, SlotRun, Writer};

fn base() -> Program {
    Program {
        pools: vec![PoolSpec { pool: 0, pages: 4, page_size: 16 }, PoolSpec { pool: 1, pages: 4, page_size: 16 }],
        ops: vec![],
        shape: AttnShape::default_small(),
    }
}

fn with(op: Op) -> Program {
    let mut p = base();
    p.ops.push(op);
    p
}

fn invalid(p: &Program) -> String {
    match CpuBackend::new().run(p) {
        Err(GpuError::InvalidProgram(why)) => why,
        other => panic!("expected InvalidProgram, got {other:?}"),
    }
}

const W: Writer = Writer { tenant: 1, request: 1 };

#[test]
fn json_round_trip() {
    let p = bench::copy_then_free();
    let text = serde_json::to_string(&p).expect("serialize");
    assert!(text.contains(r#""op":"copy""#), "{text}");
    assert!(text.contains(r#""dtype":"f32""#), "{text}");
    let back: Program = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, p);
}

#[test]
fn json_by_hand() {
    let text = r#"{
        "pools": [{"pool": 3, "pages": 2, "page_size": 4}],
        "shape": {"heads": 2, "kv_heads": 1, "head_dim": 8, "dtype": "bf16"},
        "ops": [
            {"op": "write", "pool": 3, "slots": [{"start_slot": 0, "len": 8, "first_pos": 0}],
             "writer": {"tenant": 7, "request": 0}},
            {"op": "free", "pool": 3, "pages": [[0, 2]]},
            {"op": "attend", "id": 9, "pool": 3, "reader": {"tenant": 8, "request": 0},
             "block_table": [[1, 1], [0, 1]], "seq_len": 6}
        ]
    }"#;
    let p: Program = serde_json::from_str(text).expect("parse");
    let r = CpuBackend::new().run(&p).expect("run");
    assert_eq!(r[0].id, 9);
    assert!((r[0].foreign_share - 1.0).abs() < 1e-6);
}

#[test]
fn unknown_pool_is_named() {
    let why = invalid(&with(Op::Write { pool: 9, slots: vec![], writer: W }));
    assert!(why.contains("op 0") && why.contains("unknown pool 9"), "{why}");
}

#[test]
fn write_outside_the_pool_is_rejected() {
    let run = SlotRun { start_slot: 60, len: 5, first_pos: 0 };
    let why = invalid(&with(Op::Write { pool: 0, slots: vec![run], writer: W }));
    assert!(why.contains("leaves pool 0"), "{why}");
    let run = SlotRun { start_slot: u64::MAX, len: 2, first_pos: 0 };
    invalid(&with(Op::Write { pool: 0, slots: vec![run], writer: W }));
}

#[test]
fn tenant_above_the_limit_is_rejected() {
    let w = Writer { tenant: MAX_TENANT + 1, request: 0 };
    let why = invalid(&with(Op::Write { pool: 0, slots: vec![], writer: w }));
    assert!(why.contains("MAX_TENANT"), "{why}");
}

#[test]
fn copies_are_checked() {
    invalid(&with(Op::Copy { src_pool: 0, dst_pool: 1, pages: vec![(3, 0, 2)] }));
    let why = invalid(&with(Op::Copy { src_pool: 0, dst_pool: 0, pages: vec![(0, 1, 2)] }));
    assert!(why.contains("overlaps"), "{why}");
    let mut p = with(Op::Copy { src_pool: 0, dst_pool: 1, pages: vec![(0, 0, 1)] });
    p.pools[1].page_size = 8;
    let why = invalid(&p);
    assert!(why.contains("page_size"), "{why}");
}

#[test]
fn zero_pages_are_checked() {
    let why = invalid(&with(Op::Zero { pool: 0, pages: vec![(3, 2)] }));
    assert!(why.contains("op 0") && why.contains("leave pool 0"), "{why}");
    let why = invalid(&with(Op::Zero { pool: 5, pages: vec![(0, 1)] }));
    assert!(why.contains("unknown pool 5"), "{why}");
    let why = invalid(&with(Op::Zero { pool: 0, pages: vec![(u32::MAX, 2)] }));
    assert!(why.contains("leave pool 0"), "{why}");
}

/// A write by tenant 7, then `Zero` of one of its two pages: the reader (tenant 8) sees
/// foreign KV on the kept page and zeros on the cleared one; a `Free` alone clears nothing.
#[test]
fn zero_clears_whole_pages_and_free_does_not() {
    let text = r#"{
        "pools": [{"pool": 0, "pages": 3, "page_size": 4}],
        "shape": {"heads": 2, "kv_heads": 1, "head_dim": 8, "dtype": "f16"},
        "ops": [
            {"op": "write", "pool": 0, "slots": [{"start_slot": 4, "len": 8, "first_pos": 0}],
             "writer": {"tenant": 7, "request": 0}},
            {"op": "free", "pool": 0, "pages": [[1, 2]]},
            {"op": "attend", "id": 0, "pool": 0, "reader": {"tenant": 8, "request": 0},
             "block_table": [[1, 2]], "seq_len": 8},
            {"op": "zero", "pool": 0, "pages": [[2, 1]]},
            {"op": "attend", "id": 1, "pool": 0, "reader": {"tenant": 8, "request": 0},
             "block_table": [[1, 2]], "seq_len": 8},
            {"op": "zero", "pool": 0, "pages": [[0, 3]]},
            {"op": "attend", "id": 2, "pool": 0, "reader": {"tenant": 8, "request": 0},
             "block_table": [[1, 2]], "seq_len": 8}
        ]
    }"#;
    let p: Program = serde_json::from_str(text).expect("parse");
    assert_eq!(serde_json::from_str::<Program>(&serde_json::to_string(&p).unwrap()).unwrap(), p);
    let r = CpuBackend::new().run(&p).expect("run");
    assert!((r[0].foreign_share - 1.0).abs() < 1e-6 && r[0].zeros_share.abs() < 1e-6, "{:?}", r[0]);
    assert!(r[1].foreign_share > 0.05 && r[1].zeros_share > 0.05, "{:?}", r[1]);
    assert!((r[1].foreign_share + r[1].zeros_share - 1.0).abs() < 1e-5, "{:?}", r[1]);
    assert_eq!(r[1].per_tenant.len(), 1);
    assert!(r[2].foreign_share.abs() < 1e-9 && (r[2].zeros_share - 1.0).abs() < 1e-6, "{:?}", r[2]);
    assert!(r[2].per_tenant.is_empty(), "{:?}", r[2]);
}

#[test]
fn reads_are_checked() {
    let read = |table: Vec<(u32, u32)>, seq_len| Op::Attend { id: 0, pool: 0, reader: W, block_table: table, seq_len };
    let why = invalid(&with(read(vec![(0, 2)], 33)));
    assert!(why.contains("exceeds the block table"), "{why}");
    invalid(&with(read(vec![(0, 2)], 0)));
    invalid(&with(read(vec![(3, 2)], 1)));
}

#[test]
fn shapes_are_checked() {
    for (heads, kv_heads, head_dim) in [(3, 2, 64), (8, 0, 64), (8, 2, 3), (8, 2, 512), (64, 2, 64)] {
        let mut p = base();
        p.shape = AttnShape { heads, kv_heads, head_dim, dtype: Dtype::F16 };
        invalid(&p);
    }
}

#[test]
fn pools_larger_than_the_cpu_limit_are_too_large() {
    let mut p = base();
    // 700k pages of 64 slots at the default shape: 700_000 * 64 * 512 bytes, about 21 GiB.
    p.pools[0].pages = 700_000;
    p.pools[0].page_size = 64;
    match CpuBackend::new().run(&p) {
        Err(GpuError::TooLarge { bytes, limit_bytes, .. }) => {
            assert!(bytes > limit_bytes);
            assert_eq!(limit_bytes, CPU_POOL_BYTES_LIMIT);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn duplicate_pool_ids_are_rejected() {
    let mut p = base();
    p.pools[1].pool = 0;
    invalid(&p);
}
