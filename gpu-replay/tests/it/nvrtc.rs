//! Compile-checks the CUDA kernels with NVRTC where libnvrtc is present (no GPU needed).
//! Without it the test says so and passes; CI machines have no CUDA.

use kvsim_gpu::cuda::kernels::{kernel_source, nvrtc_compile, KernelConfig, Output};
use kvsim_gpu::cuda::nvrtc_present;
use kvsim_gpu::{AttnShape, Dtype};

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
fn kernels_compile_for_sm90_when_nvrtc_is_present() {
    if !nvrtc_present() {
        eprintln!("skipped: libnvrtc not found (set LD_LIBRARY_PATH to run this check)");
        return;
    }
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
