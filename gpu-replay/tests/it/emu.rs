//! The CUDA kernels' own source, run on the host under `tests/emu/emu.h` (one thread per
//! CUDA thread, real warp shuffles and block barriers), must match the CPU reference.
//!
//! This checks the kernels' indexing, vector loads, provenance transform, online softmax
//! and partition merges on machines with no GPU, for tilings that differ in vector width,
//! lanes per token, chunks per lane, warps per block and GQA group. It needs a C++20
//! compiler (`c++`, as building Rust on Linux does); without one the tests fail and say so.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kvsim_gpu::check::{DeviceRead, ReadSpec, SlotMap};
use kvsim_gpu::cuda::kernels::{kernel_source, KernelConfig};
use kvsim_gpu::cuda::max_abs_diff;
use kvsim_gpu::program::expand_block_table;
use kvsim_gpu::values::{derive_query, shares_from_output};
use kvsim_gpu::{replay_outputs, AttnShape, Dtype, Op, PoolSpec, Program, SlotRun, Writer};

fn compiler() -> Option<&'static str> {
    ["c++", "g++", "clang++"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// The harness input for a one-pool program of writes, frees and reads, split as on a device
/// with `sms` multiprocessors.
fn harness_input(p: &Program, sms: u32) -> String {
    let cfg = KernelConfig::new(&p.shape, p.pools[0].page_size);
    let pool = &p.pools[0];
    let mut s = format!("{}\n", pool.slots());
    let writes: Vec<_> = p.ops.iter().filter(|o| matches!(o, Op::Write { .. })).collect();
    let _ = writeln!(s, "{}", writes.len());
    for op in writes {
        let Op::Write { slots, writer, .. } = op else { unreachable!() };
        let n: u64 = slots.iter().map(|r| r.len).sum();
        let _ = writeln!(s, "{} {} {n}", writer.tenant, writer.request);
        for r in slots {
            for i in 0..r.len {
                let _ = write!(s, "{} {} ", r.start_slot + i, r.first_pos + i);
            }
        }
        s.push('\n');
    }
    let reads: Vec<_> = p.ops.iter().filter(|o| matches!(o, Op::Attend { .. })).collect();
    let _ = writeln!(s, "{}", reads.len());
    for op in reads {
        let Op::Attend { reader, block_table, seq_len, .. } = op else { unreachable!() };
        let pages = expand_block_table(block_table, pool.page_size, *seq_len);
        let (_, part_tokens) = cfg.split(*seq_len as u32, sms);
        let _ = write!(s, "{} {seq_len} {part_tokens} {} ", reader.tenant, pages.len());
        for pg in pages {
            let _ = write!(s, "{pg} ");
        }
        let _ = write!(s, "\n{} ", p.shape.heads);
        for x in derive_query(&p.shape, *reader, *seq_len) {
            let _ = write!(s, "{x:e} ");
        }
        s.push('\n');
    }
    assert!(
        p.pools.len() == 1 && p.ops.iter().all(|o| !matches!(o, Op::Copy { .. } | Op::Zero { .. })),
        "the harness replays one pool without copies or zeroed pages"
    );
    s
}

fn build(cxx: &str, dir: &Path, cfg: &KernelConfig) -> PathBuf {
    std::fs::create_dir_all(dir).expect("temp dir");
    std::fs::write(dir.join("kernel.cu"), kernel_source(cfg)).expect("write kernel.cu");
    // Read at run time: the compile-time value is stale when one target folder serves two checkouts.
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let emu = manifest.join("tests/emu");
    let exe = dir.join("harness");
    let out = Command::new(cxx)
        .args(["-std=c++20", "-O1", "-pthread", "-fno-strict-aliasing", "-DKVSIM_EMU", "-w"])
        .arg("-I")
        .arg(dir)
        .arg("-I")
        .arg(&emu)
        .arg(emu.join("harness.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C++ compiler");
    assert!(out.status.success(), "harness for {cfg:?} did not compile:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// Builds the harness for `p`'s configuration and runs it once per SM count.
fn emulate(cxx: &str, p: &Program, tag: &str, sms: &[u32]) -> Vec<Vec<DeviceRead>> {
    let cfg = KernelConfig::new(&p.shape, p.pools[0].page_size);
    let dir = std::env::temp_dir().join(format!("kvsim-gpu-emu-{}-{tag}", std::process::id()));
    let exe = build(cxx, &dir, &cfg);
    let outs = sms.iter().map(|&n| run_harness(&exe, p, n)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    outs
}

/// Each read's output and partials, as a device returns them.
fn run_harness(exe: &Path, p: &Program, sms: u32) -> Vec<DeviceRead> {
    let mut child = Command::new(exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start harness");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(harness_input(p, sms).as_bytes()).expect("feed harness");
    }
    let out = child.wait_with_output().expect("harness output");
    assert!(out.status.success(), "harness {} failed: {:?}", exe.display(), out.status);
    let vals: Vec<f32> =
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(|x| x.parse().expect("a float")).collect();
    let cfg = KernelConfig::new(&p.shape, p.pools[0].page_size);
    let (heads, hd) = (p.shape.heads as usize, p.shape.head_dim as usize);
    let mut rest = vals.as_slice();
    let mut take = |n: usize| {
        let (a, b) = rest.split_at(n);
        rest = b;
        a.to_vec()
    };
    let mut reads = Vec::new();
    for op in &p.ops {
        if let Op::Attend { seq_len, .. } = op {
            let (n_parts, part_tokens) = cfg.split(*seq_len as u32, sms);
            let rows = n_parts as usize * heads;
            let output = take(heads * hd);
            let (part_m, part_l, part_acc) = (take(rows), take(rows), take(rows * hd));
            reads.push(DeviceRead { n_parts, part_tokens, part_m, part_l, part_acc, output });
        }
    }
    assert!(rest.is_empty(), "harness printed {} extra values", rest.len());
    reads
}

fn who(tenant: u32, request: u32) -> Writer {
    Writer { tenant, request }
}

/// A pool of `pages` pages; tenant 300 fills it, is freed; the reader (tenant 2) rewrites a
/// third of the slots; a sixth of the table's pages were never written; a scattered table.
fn mixed(shape: AttnShape, page_size: u32, pages: u32, seq_len: u64) -> Program {
    let slots = u64::from(pages) * u64::from(page_size);
    let written_pages = pages - pages / 6;
    let run = |start_slot, len| vec![SlotRun { start_slot, len, first_pos: 5 }];
    let table = (0..pages).map(|i| ((i * 7 + 3) % pages, 1)).collect();
    Program {
        pools: vec![PoolSpec { pool: 0, pages, page_size }],
        ops: vec![
            Op::Write { pool: 0, slots: run(0, u64::from(written_pages) * u64::from(page_size)), writer: who(300, 1) },
            Op::Free { pool: 0, pages: vec![(0, pages)] },
            Op::Write { pool: 0, slots: run(slots / 4, slots / 3), writer: who(2, 9) },
            Op::Attend { id: 0, pool: 0, reader: who(2, 9), block_table: table, seq_len },
        ],
        shape,
    }
}

/// Emulates `p` split for a 1-SM device (few, long partitions) and a 132-SM one (an H200:
/// many short partitions) and checks both against the CPU reference.
fn check(tag: &str, p: Program) {
    let cxx = compiler().expect("the kernel emulation needs a C++20 compiler (c++, g++ or clang++)");
    let reference = replay_outputs(&p).expect("valid program");
    for (sms, emulated) in [1, 132].into_iter().zip(emulate(cxx, &p, tag, &[1, 132])) {
        assert_eq!(emulated.len(), reference.len());
        // The sampled CPU check of kvsim_gpu::check on the kernel's own partials: every
        // partition recomputed from the slot map, and the merge, agree with the kernel.
        let mut map = SlotMap::new(&p).expect("slot map");
        let mut reads = emulated.iter();
        for op in &p.ops {
            if let Op::Attend { id, pool, reader, block_table, seq_len } = op {
                let dev = reads.next().expect("one result per read");
                let spec = ReadSpec { id: *id, pool: *pool, reader: *reader, block_table, seq_len: *seq_len };
                let c = map.check_read(&spec, dev, u32::MAX).expect("well-formed partials");
                assert_eq!(c.partitions.len() as u32, dev.n_parts, "every partition checked");
                assert!(c.max_diff() < 1e-4, "{tag} ({sms} SMs): sampled check {c:?}");
            }
            map.apply(op);
        }
        for (e, r) in emulated.iter().map(|d| &d.output).zip(&reference) {
            let diff = max_abs_diff(e, &r.output);
            assert!(diff < 1e-4, "{tag} ({sms} SMs): kernel vs CPU max |diff| {diff}");
            let (se, sr) = (shares_from_output(&p.shape, e), shares_from_output(&p.shape, &r.output));
            assert!((se.foreign - sr.foreign).abs() < 1e-5, "{tag} ({sms} SMs): {se:?} vs {sr:?}");
            assert!((se.zeros - sr.zeros).abs() < 1e-5, "{tag} ({sms} SMs): {se:?} vs {sr:?}");
            assert!(sr.foreign > 0.2 && sr.own > 0.1 && sr.zeros > 0.05, "{tag}: a mixed read: {sr:?}");
        }
    }
}

fn shape(heads: u32, kv_heads: u32, head_dim: u32, dtype: Dtype) -> AttnShape {
    AttnShape { heads, kv_heads, head_dim, dtype }
}

#[test]
fn emulated_kernels_default_shape_f16() {
    // VEC 8 (16-byte loads), 8 lanes per token, 4 warps, 4 partitions.
    check("default", mixed(AttnShape::default_small(), 16, 64, 1000));
}

#[test]
fn emulated_kernels_wide_gqa_bf16_page1() {
    // 32 heads over 8 KV heads, head_dim 128: 16 lanes per token; page size 1.
    check("wide", mixed(shape(32, 8, 128, Dtype::Bf16), 1, 600, 600));
}

#[test]
fn emulated_kernels_f32_page64() {
    // f32: VEC 4, 8 lanes per token; a partial last page.
    check("f32", mixed(shape(4, 4, 32, Dtype::F32), 64, 12, 700));
}

#[test]
fn emulated_kernels_odd_head_dim() {
    // head_dim 12, f16: VEC 4, 3 chunks on 2 lanes (2 chunks per lane, one lane idle), the
    // reserved dims straddle two chunks; page size 3.
    check("odd", mixed(shape(6, 2, 12, Dtype::F16), 3, 200, 590));
}

#[test]
fn emulated_kernels_group16_head_dim256() {
    // 16 heads on one KV head, head_dim 256: 2 warps (shared-memory budget), 32 lanes.
    check("g16", mixed(shape(16, 1, 256, Dtype::Bf16), 16, 24, 300));
}

#[test]
fn emulated_kernels_tiny_head_dim() {
    // head_dim 4, f32: one chunk per token, 1 lane per token, 32 tokens per warp.
    check("tiny", mixed(shape(3, 1, 4, Dtype::F32), 7, 90, 600));
}
