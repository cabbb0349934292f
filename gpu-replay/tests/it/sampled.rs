//! The sampled CPU check (kvsim_gpu::check) on the CPU backend: the slot map's counts equal the
//! full reference's, partials computed from the slot map merge to the reference's output, and
//! the check flags a corrupted sampled partition and a corrupted merge.

use kvsim_gpu::bench::{bench_programs, full_scale_read};
use kvsim_gpu::check::{sample_partitions, DeviceRead, ReadCheck, ReadSpec, SlotMap};
use kvsim_gpu::cuda::kernels::KernelConfig;
use kvsim_gpu::cuda::max_abs_diff;
use kvsim_gpu::{replay_outputs, AttnShape, Dtype, GpuError, Op, Program};

/// Every read of `p` with its slot map state at the read, in op order.
fn reads(p: &Program) -> Vec<(ReadSpec<'_>, SlotMap)> {
    let mut map = SlotMap::new(p).expect("slot map");
    let mut out = Vec::new();
    for op in &p.ops {
        if let Op::Attend { id, pool, reader, block_table, seq_len } = op {
            let spec = ReadSpec { id: *id, pool: *pool, reader: *reader, block_table, seq_len: *seq_len };
            out.push((spec, map.clone()));
        }
        map.apply(op);
    }
    out
}

fn split(p: &Program, read: &ReadSpec<'_>, sms: u32) -> (u32, u32) {
    let page_size = p.pool(read.pool).expect("pool").page_size;
    KernelConfig::new(&p.shape, page_size).split(read.seq_len as u32, sms)
}

fn programs() -> Vec<(String, Program)> {
    let mut v: Vec<(String, Program)> =
        bench_programs(false).into_iter().map(|b| (b.name.to_string(), b.program)).collect();
    v.push((
        "g16-hd128".into(),
        full_scale_read(4_096, AttnShape { heads: 16, kv_heads: 1, head_dim: 128, dtype: Dtype::F16 }),
    ));
    v
}

#[test]
fn slot_map_counts_equal_the_full_reference() {
    for (name, p) in programs() {
        let reference = replay_outputs(&p).expect("valid");
        for ((read, map), r) in reads(&p).iter().zip(&reference) {
            let (tenants, zeros) = map.counts(read.pool, read.block_table, read.seq_len);
            assert_eq!(tenants, r.tokens_per_tenant, "{name}");
            assert_eq!(zeros, r.zero_tokens, "{name}");
        }
    }
}

#[test]
fn partials_from_the_slot_map_merge_to_the_reference_output_and_pass_the_check() {
    for (name, p) in programs() {
        let reference = replay_outputs(&p).expect("valid");
        for ((read, map), r) in reads(&p).iter().zip(&reference) {
            for sms in [1, 132] {
                let (n, part) = split(&p, read, sms);
                let dev = map.partials_on_cpu(read, n, part);
                let diff = max_abs_diff(&dev.output, &r.output);
                assert!(diff < 1e-5, "{name} ({sms} SMs): slot-map partials vs the CPU reference {diff}");
                let check = map.check_read(read, &dev, 8).expect("well-formed");
                assert!(check.max_diff() < 1e-6, "{name}: {check:?}");
                assert_eq!(check.partitions, sample_partitions(n, 8, read.id ^ read.seq_len.rotate_left(32)));
                assert_eq!(
                    (check.tokens_per_tenant.clone(), check.zero_tokens),
                    (r.tokens_per_tenant.clone(), r.zero_tokens)
                );
            }
        }
    }
}

fn long_read() -> (Program, u32, u32) {
    let p = full_scale_read(32_768, AttnShape::default_small());
    let (read, _) = reads(&p).into_iter().next().expect("a read");
    let (n, part) = split(&p, &read, 132);
    assert!(n > 20, "a split of many partitions: {n}");
    (p, n, part)
}

fn check_with(p: &Program, n: u32, part: u32, corrupt: impl Fn(&mut DeviceRead, &[u32])) -> ReadCheck {
    let (read, map) = reads(p).into_iter().next().expect("a read");
    let mut dev = map.partials_on_cpu(&read, n, part);
    let sample = sample_partitions(n, 6, read.id ^ read.seq_len.rotate_left(32));
    corrupt(&mut dev, &sample);
    map.check_read(&read, &dev, 6).expect("well-formed")
}

#[test]
fn a_corrupted_sampled_partition_or_merge_is_caught() {
    let (p, n, part) = long_read();
    let heads = p.shape.heads as usize;
    let hd = p.shape.head_dim as usize;
    let clean = check_with(&p, n, part, |_, _| {});
    assert!(clean.max_diff() < 1e-6, "{clean:?}");
    // An interior sampled partition's accumulator of head 5: the partition check sees the full
    // error, the merge only its share of the read.
    let acc = check_with(&p, n, part, |d, s| {
        let row = s[2] as usize * heads + 5;
        d.part_acc[row * hd + 7] += 0.05 * d.part_l[row];
    });
    assert!(acc.max_partition_diff > 0.04 && acc.max_merge_diff > 1e-4, "{acc:?}");
    // A max score off by 0.01 in the last partition.
    let m = check_with(&p, n, part, |d, s| d.part_m[*s.last().expect("sample") as usize * heads] += 0.01);
    assert!(m.max_partition_diff > 0.009, "{m:?}");
    // A NaN anywhere fails the check (f64::max would have dropped it).
    let nan_part = check_with(&p, n, part, |d, s| d.part_acc[s[1] as usize * heads * hd + 3] = f32::NAN);
    assert!(nan_part.max_partition_diff.is_infinite(), "{nan_part:?}");
    let nan_out = check_with(&p, n, part, |d, _| d.output[0] = f32::NAN);
    assert!(nan_out.max_merge_diff.is_infinite(), "{nan_out:?}");
    assert!(max_abs_diff(&[0.0, f32::NAN], &[0.0, 0.0]).is_infinite());
    assert!(max_abs_diff(&[0.0], &[0.0, 0.0]).is_infinite());
    // A wrong merge: the output's foreign dim of head 0 off by 0.01.
    let out = check_with(&p, n, part, |d, _| d.output[hd - 1] += 0.01);
    assert!(out.max_merge_diff > 0.009 && out.max_partition_diff < 1e-6, "{out:?}");
}

#[test]
fn malformed_device_results_are_an_error_not_a_pass() {
    let (p, n, part) = long_read();
    let (read, map) = reads(&p).into_iter().next().expect("a read");
    let good = map.partials_on_cpu(&read, n, part);
    let mut short = good.clone();
    short.part_acc.pop();
    let mut uncovered = good.clone();
    uncovered.part_tokens -= 64;
    for bad in [short, uncovered] {
        assert!(matches!(map.check_read(&read, &bad, 4), Err(GpuError::InvalidProgram(_))));
    }
}
