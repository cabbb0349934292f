//! Compile-checks the CUDA kernels with NVRTC and reads ptxas's resource report (no GPU
//! needed, but libnvrtc must be loadable). Ignored by default: a machine without libnvrtc
//! cannot run them, and a skipped check must not pass silently. Run with e.g.
//! `pip install --target /work/nvrtc13 nvidia-cuda-nvrtc==13.0.88` then
//! `LD_LIBRARY_PATH=/work/nvrtc13/nvidia/cu13/lib cargo test -p kvsim-gpu --test it nvrtc -- --ignored --nocapture`.

use kvsim_gpu::cuda::kernels::{kernel_source, nvrtc_compile, nvrtc_resources, KernelConfig, Output};
use kvsim_gpu::cuda::nvrtc_present;
use kvsim_gpu::{AttnShape, Dtype};

const NEEDS: &str = "libnvrtc not loadable: set LD_LIBRARY_PATH to an NVRTC (see the module doc)";

fn shapes() -> Vec<(AttnShape, u32)> {
    let s = |heads, kv_heads, head_dim, dtype| AttnShape { heads, kv_heads, head_dim, dtype };
    vec![
        (AttnShape::default_small(), 64),
        (s(32, 8, 128, Dtype::Bf16), 1),
        (s(4, 4, 32, Dtype::F32), 16),
        (s(16, 1, 256, Dtype::F16), 16),
        (s(16, 1, 256, Dtype::F32), 7),
        (s(3, 1, 4, Dtype::F16), 1),
        (s(6, 2, 12, Dtype::Bf16), 3),
        (s(2, 2, 40, Dtype::F32), 64),
    ]
}

#[test]
#[ignore = "needs libnvrtc (LD_LIBRARY_PATH); run with --ignored"]
fn kernels_compile_for_sm90() {
    assert!(nvrtc_present(), "{NEEDS}");
    for (shape, page_size) in shapes() {
        let cfg = KernelConfig::new(&shape, page_size);
        let src = kernel_source(&cfg);
        let cubin = nvrtc_compile(&src, "sm_90", Output::Cubin).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        assert!(cubin.starts_with(b"\x7fELF"), "{cfg:?}: CUBIN is not an ELF image");
        let ptx = nvrtc_compile(&src, "compute_90", Output::Ptx).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        let ptx = String::from_utf8(ptx).expect("PTX is text");
        for k in ["kv_write", "attn_partial", "attn_reduce"] {
            assert!(ptx.contains(&format!(".entry {k}")), "{cfg:?}: no entry {k}");
        }
    }
}

/// Issue 16's register target: no spills at head_dim <= 128 for every dtype and GQA group
/// 1..=16, and the occupancy `__launch_bounds__` asks for is met (registers within the cap
/// `65536 / (min_blocks * threads)`). Prints the table: registers, lanes per token, vector width,
/// the `__launch_bounds__` minimum blocks, threads per block, the blocks per SM the registers
/// allow (sm_90: 64K registers, allocated per warp in units of 256; at most 64 warps) and the
/// resulting occupancy, and the spill stores/loads in bytes.
#[test]
#[ignore = "needs libnvrtc (LD_LIBRARY_PATH); run with --ignored"]
fn no_spills_at_head_dim_128_and_below() {
    assert!(nvrtc_present(), "{NEEDS}");
    println!(
        "{:<6} {:>3} {:>3} {:>3} {:>4} {:>3} {:>6} {:>5} {:>4} {:>6} {:>5} {:>7}",
        "dtype", "hd", "G", "kvh", "regs", "LPT", "vec", "minB", "thr", "blk/SM", "occ", "spill"
    );
    let mut wide_spills = Vec::new();
    for dtype in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
        for head_dim in [64, 128, 256] {
            for group in [1, 2, 4, 8, 16] {
                let shape = AttnShape { heads: 2 * group, kv_heads: 2, head_dim, dtype };
                let cfg = KernelConfig::new(&shape, 16);
                let res = nvrtc_resources(&kernel_source(&cfg), "sm_90").unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                let p = res.iter().find(|r| r.kernel == "attn_partial").expect("attn_partial report");
                let per_warp = (p.registers * 32).div_ceil(256) * 256;
                let blocks = (65_536 / (per_warp * cfg.warps)).min(64 / cfg.warps);
                assert!(blocks >= cfg.min_blocks, "{cfg:?}: {blocks} blocks per SM < min_blocks");
                println!(
                    "{:<6} {head_dim:>3} {group:>3} {:>3} {:>4} {:>3} {:>6} {:>5} {:>4} {:>6} {:>4}% {:>3}/{:<3}",
                    dtype.name(),
                    2,
                    p.registers,
                    cfg.lanes_per_token,
                    cfg.vec,
                    cfg.min_blocks,
                    cfg.warps * 32,
                    blocks,
                    100 * blocks * cfg.warps / 64,
                    p.spill_stores,
                    p.spill_loads
                );
                let cap = 65_536 / (cfg.min_blocks * cfg.warps * 32);
                assert!(p.registers <= cap.min(255), "{cfg:?}: {} registers over the cap {cap}", p.registers);
                if head_dim <= 128 {
                    assert_eq!((p.spill_stores, p.spill_loads), (0, 0), "{cfg:?} spills");
                } else if p.spill_stores > 0 {
                    wide_spills.push(group);
                }
                for r in &res {
                    if r.kernel != "attn_partial" {
                        assert_eq!((r.spill_stores, r.spill_loads), (0, 0), "{cfg:?}: {} spills", r.kernel);
                    }
                }
            }
        }
    }
    println!("head_dim 256 spills at GQA groups {wide_spills:?}");
}
