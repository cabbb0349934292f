//! End-to-end scenarios on the CPU reference: whose bytes reach the output, and how much.

use kvsim_gpu::bench::{self, bench_programs};
use kvsim_gpu::{AttendResult, AttnShape, Backend, CpuBackend, Dtype, Op, PoolSpec, Program, SlotRun, Writer};

fn who(tenant: u32, request: u32) -> Writer {
    Writer { tenant, request }
}

fn run(p: &Program) -> Vec<AttendResult> {
    CpuBackend::new().run(p).expect("valid program")
}

fn write(pool: u32, start_slot: u64, len: u64, writer: Writer) -> Op {
    Op::Write { pool, slots: vec![SlotRun { start_slot, len, first_pos: 0 }], writer }
}

#[test]
fn own_writes_only_show_no_foreign_weight() {
    let r = &run(&bench::own_only())[0];
    assert_eq!(r.foreign_share, 0.0, "{r:?}");
    assert!((r.own_share - 1.0).abs() < 1e-6, "{r:?}");
    assert!(r.zeros_share.abs() < 1e-6, "{r:?}");
    assert_eq!(r.per_tenant.len(), 1);
    assert_eq!(r.per_tenant[0].0, 5);
    assert!((r.per_tenant[0].1 - 1.0).abs() < 1e-5, "{r:?}");
    assert_eq!(r.max_abs_diff_vs_cpu, None);
}

#[test]
fn stale_pages_of_another_tenant_dominate_the_read() {
    let r = &run(&bench::stale_foreign())[0];
    assert!(r.foreign_share > 0.5, "{r:?}");
    assert!((r.foreign_share - 7.0 / 8.0).abs() < 0.05, "{r:?}");
    assert!((r.foreign_share + r.own_share + r.zeros_share - 1.0).abs() < 1e-5, "{r:?}");
    let tenants: Vec<u32> = r.per_tenant.iter().map(|t| t.0).collect();
    assert_eq!(tenants, vec![3, 9]);
    // The kernel-output shares agree with the exact CPU second pass.
    assert!((r.per_tenant[1].1 - r.foreign_share).abs() < 1e-5, "{r:?}");
    assert!((r.per_tenant[0].1 - r.own_share).abs() < 1e-5, "{r:?}");
}

#[test]
fn never_written_slots_are_all_zeros_share() {
    let r = &run(&bench::never_written())[0];
    assert_eq!(r.zeros_share, 1.0, "{r:?}");
    assert_eq!(r.foreign_share, 0.0);
    assert_eq!(r.own_share, 0.0);
    assert!(r.per_tenant.is_empty());
}

#[test]
fn copy_then_free_then_read_shows_the_copied_writer() {
    let r = &run(&bench::copy_then_free())[0];
    assert_eq!(r.per_tenant.len(), 1, "{r:?}");
    assert_eq!(r.per_tenant[0].0, 1, "the prefill writer's bytes were copied");
    assert!((r.foreign_share - 1.0).abs() < 1e-6, "{r:?}");
}

#[test]
fn zero_keys_still_take_softmax_weight() {
    // Half written by the reader, half never written: zero keys score 0, weight ~1/2.
    let p = Program {
        pools: vec![PoolSpec { pool: 0, pages: 4, page_size: 16 }],
        ops: vec![
            write(0, 0, 32, who(4, 0)),
            Op::Attend { id: 42, pool: 0, reader: who(4, 0), block_table: vec![(0, 4)], seq_len: 64 },
        ],
        shape: AttnShape::default_small(),
    };
    let r = &run(&p)[0];
    assert_eq!(r.id, 42);
    assert!((r.zeros_share - 0.5).abs() < 0.1, "{r:?}");
    assert!((r.own_share + r.zeros_share - 1.0).abs() < 1e-5, "{r:?}");
    assert_eq!(r.foreign_share, 0.0);
}

#[test]
fn another_request_of_the_same_tenant_is_own_not_foreign() {
    let p = Program {
        pools: vec![PoolSpec { pool: 0, pages: 2, page_size: 16 }],
        ops: vec![
            write(0, 0, 32, who(9, 1)),
            Op::Attend { id: 0, pool: 0, reader: who(9, 2), block_table: vec![(0, 2)], seq_len: 32 },
        ],
        shape: AttnShape { heads: 4, kv_heads: 1, head_dim: 16, dtype: Dtype::F32 },
    };
    let r = &run(&p)[0];
    assert!((r.own_share - 1.0).abs() < 1e-6, "{r:?}");
    assert_eq!(r.foreign_share, 0.0);
}

#[test]
fn tenants_with_equal_low_digit_are_told_apart() {
    // 0x0105 and 0x0205 share the low base-256 digit; 0x0105 and 0x0106 the high one.
    for (writer, reader) in [(0x0105, 0x0205), (0x0105, 0x0106), (65_535, 0)] {
        let p = Program {
            pools: vec![PoolSpec { pool: 0, pages: 1, page_size: 16 }],
            ops: vec![
                write(0, 0, 16, who(writer, 0)),
                Op::Attend { id: 0, pool: 0, reader: who(reader, 0), block_table: vec![(0, 1)], seq_len: 16 },
            ],
            shape: AttnShape { heads: 2, kv_heads: 2, head_dim: 8, dtype: Dtype::Bf16 },
        };
        let r = &run(&p)[0];
        assert!((r.foreign_share - 1.0).abs() < 1e-6, "writer {writer} reader {reader}: {r:?}");
        assert_eq!(r.per_tenant[0].0, writer);
    }
}

#[test]
fn results_come_in_op_order_and_reflect_state_at_the_read() {
    let p = Program {
        pools: vec![PoolSpec { pool: 0, pages: 1, page_size: 8 }],
        ops: vec![
            Op::Attend { id: 1, pool: 0, reader: who(1, 0), block_table: vec![(0, 1)], seq_len: 8 },
            write(0, 0, 8, who(2, 0)),
            Op::Attend { id: 2, pool: 0, reader: who(1, 0), block_table: vec![(0, 1)], seq_len: 8 },
            Op::Free { pool: 0, pages: vec![(0, 1)] },
            Op::Attend { id: 3, pool: 0, reader: who(2, 0), block_table: vec![(0, 1)], seq_len: 8 },
        ],
        shape: AttnShape { heads: 2, kv_heads: 1, head_dim: 8, dtype: Dtype::F16 },
    };
    let r = run(&p);
    assert_eq!(r.iter().map(|x| x.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(r[0].zeros_share, 1.0);
    assert!((r[1].foreign_share - 1.0).abs() < 1e-6);
    assert!((r[2].own_share - 1.0).abs() < 1e-6, "free does not clear: {:?}", r[2]);
}

#[test]
fn every_small_bench_program_shows_its_expected_shares_on_cpu() {
    for bp in bench_programs(false) {
        let r = &run(&bp.program)[0];
        assert!(bp.accepts(r.foreign_share, r.zeros_share), "{}: {r:?}", bp.name);
    }
}

#[test]
fn the_full_scale_program_is_well_formed_at_small_scale() {
    let p = bench::full_scale_read(1 << 14, AttnShape::default_small());
    let r = &run(&p)[0];
    assert!((0.45..=0.55).contains(&r.foreign_share), "{r:?}");
    assert!(r.per_tenant.len() > 2, "{r:?}");
}

/// Release-mode check that a 1M-token read is feasible on the CPU:
/// `cargo test --release -p kvsim-gpu --test it -- --ignored full_scale`.
#[test]
#[ignore = "slow in debug builds; run with --release"]
#[allow(clippy::disallowed_methods)] // times real work; the virtual-time rule is the model's
fn full_scale_read_runs_on_cpu() {
    let t = std::time::Instant::now();
    let p = bench::full_scale_read(bench::FULL_SCALE_TOKENS, AttnShape::default_small());
    let r = &run(&p)[0];
    eprintln!(
        "1M-token CPU replay: {:.2} s, foreign {:.4}, {} tenants",
        t.elapsed().as_secs_f64(),
        r.foreign_share,
        r.per_tenant.len()
    );
    assert!((0.45..=0.55).contains(&r.foreign_share), "{:?}", r.foreign_share);
}
