//! The multi-threaded CPU reference is bit-identical to the single-threaded one.

use kvsim_gpu::bench::{bench_programs, full_scale_read};
use kvsim_gpu::{replay_outputs, replay_outputs_with, AttendOutput, AttnShape, Dtype, Op, PoolSpec, Program, SlotRun};
use kvsim_gpu::{Backend, CpuBackend, Writer};

/// A read's output, shares and counts, every float as its bits.
type Bits = (u64, u64, Vec<u32>, Vec<(u32, u64)>, Vec<(u32, u64)>, u64);

/// Every float compared by its bits (0.0 and -0.0 differ, as a different order could make them).
fn bits(outs: &[AttendOutput]) -> Vec<Bits> {
    outs.iter()
        .map(|o| {
            (
                o.id,
                o.seq_len,
                o.output.iter().map(|x| x.to_bits()).collect(),
                o.per_tenant.iter().map(|&(t, w)| (t, w.to_bits())).collect(),
                o.tokens_per_tenant.clone(),
                o.zero_tokens,
            )
        })
        .collect()
}

fn assert_identical(name: &str, p: &Program) {
    let serial = bits(&replay_outputs(p).expect("valid program"));
    assert!(!serial.is_empty(), "{name}: a read");
    for threads in [2, 3, 7] {
        let parallel = bits(&replay_outputs_with(p, threads).expect("valid program"));
        assert!(serial == parallel, "{name}: {threads} threads differ from one");
    }
}

#[test]
fn every_bench_program_is_bit_identical_on_2_3_and_7_threads() {
    for bp in bench_programs(false) {
        assert_identical(bp.name, &bp.program);
    }
}

#[test]
fn long_reads_of_every_dtype_and_wide_groups_are_bit_identical() {
    // 5,000 tokens: 20 chunks, split unevenly over 3 and 7 threads; a read of a partial chunk.
    for shape in [
        AttnShape { heads: 16, kv_heads: 1, head_dim: 128, dtype: Dtype::F16 },
        AttnShape { heads: 6, kv_heads: 3, head_dim: 12, dtype: Dtype::Bf16 },
        AttnShape { heads: 4, kv_heads: 4, head_dim: 32, dtype: Dtype::F32 },
    ] {
        let mut p = full_scale_read(5_120, shape);
        if let Some(Op::Attend { seq_len, .. }) = p.ops.last_mut() {
            *seq_len = 5_000;
        }
        assert_identical(&format!("{shape:?}"), &p);
    }
}

#[test]
fn overlapping_runs_of_a_long_write_keep_the_later_run() {
    // Two runs of one write overlap (the later wins, as with one thread); the write spans
    // several derive batches.
    let w = Writer { tenant: 4, request: 1 };
    let p = Program {
        pools: vec![PoolSpec { pool: 0, pages: 160, page_size: 64 }],
        ops: vec![
            Op::Write {
                pool: 0,
                slots: vec![
                    SlotRun { start_slot: 0, len: 9_000, first_pos: 0 },
                    SlotRun { start_slot: 4_000, len: 6_000, first_pos: 50_000 },
                ],
                writer: w,
            },
            Op::Attend {
                id: 3,
                pool: 0,
                reader: Writer { tenant: 5, request: 0 },
                block_table: vec![(0, 160)],
                seq_len: 10_240,
            },
        ],
        shape: AttnShape::default_small(),
    };
    assert_identical("overlap", &p);
    let out = replay_outputs_with(&p, 4).expect("valid");
    assert_eq!(out[0].tokens_per_tenant, vec![(4, 10_000)]);
    assert_eq!(out[0].zero_tokens, 240);
}

#[test]
fn the_cpu_backend_results_do_not_depend_on_its_threads() {
    let p = full_scale_read(4_096, AttnShape::default_small());
    let one = CpuBackend::with_threads(1).run(&p).expect("run");
    let many = CpuBackend::with_threads(5).run(&p).expect("run");
    assert_eq!(one, many);
    assert!(CpuBackend::new().threads() >= 1);
}
