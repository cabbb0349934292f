//! Kernel configuration, source generation and NVRTC compilation.
//!
//! The kernels in `kernels.cu` are specialised at run time: a [`KernelConfig`] (dtype,
//! head_dim, GQA group, kv_heads, page size and the derived tiling) becomes a block of
//! `#define`s in front of the source, so every loop bound is a compile-time constant.
//!
//! Compilation never needs a GPU: [`kernel_source`] and [`nvrtc_compile`] work wherever
//! libnvrtc can be loaded, which is how the source is compile-checked on CPU machines.
//! The preferred output is a CUBIN for the device's real architecture (`sm_XY`): a
//! CUBIN loads on any driver of the same major version, while PTX from a newer NVRTC is
//! refused by an older driver. PTX for `compute_XY` is the fallback.

use std::ffi::{c_char, CString};

use crate::error::GpuError;
use crate::program::{AttnShape, Dtype};

/// The kernel source, without the configuration's `#define`s.
pub const KERNELS_CU: &str = include_str!("kernels.cu");

/// Tokens per flash-decoding partition (one block per partition and KV head).
pub const PART_TOKENS: u32 = 256;
/// Tokens each lane group keeps in flight per loop iteration.
pub const UNROLL: u32 = 2;
/// Threads per block of the reduce kernel (must match `RED_THREADS` in `kernels.cu`).
pub const REDUCE_THREADS: u32 = 256;
/// Shared memory the partial kernel may use for its cross-warp merge, in bytes.
const SMEM_BUDGET_BYTES: u32 = 40 * 1024;

/// Everything that specialises one compiled module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelConfig {
    /// Storage dtype.
    pub dtype: Dtype,
    /// Elements per head.
    pub head_dim: u32,
    /// Query heads per KV head.
    pub group: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Slots per page.
    pub page_size: u32,
    /// Elements per vector load (divides `head_dim`; at most 16 bytes).
    pub vec: u32,
    /// Lanes cooperating on one token (a power of two, at most 32).
    pub lanes_per_token: u32,
    /// Warps per block of the partial kernel.
    pub warps: u32,
}

impl KernelConfig {
    /// The configuration for a validated shape and a pool's page size.
    pub fn new(shape: &AttnShape, page_size: u32) -> Self {
        let elem_bytes = shape.dtype.bytes() as u32;
        let mut vec = 16 / elem_bytes;
        while shape.head_dim % vec != 0 {
            vec /= 2;
        }
        let chunks = shape.head_dim / vec;
        let mut lanes_per_token = 32;
        while lanes_per_token > chunks {
            lanes_per_token /= 2;
        }
        let group = shape.group();
        let per_warp_smem = (group * shape.head_dim + 2 * group) * 4;
        let mut warps = 4;
        while warps > 1 && warps * per_warp_smem > SMEM_BUDGET_BYTES {
            warps /= 2;
        }
        KernelConfig {
            dtype: shape.dtype,
            head_dim: shape.head_dim,
            group,
            kv_heads: shape.kv_heads,
            page_size,
            vec,
            lanes_per_token,
            warps,
        }
    }

    /// Bytes of one vector load.
    pub fn vec_bytes(&self) -> u32 {
        self.vec * self.dtype.bytes() as u32
    }

    /// The `#define` block for this configuration.
    pub fn defines(&self) -> String {
        let store = match self.dtype {
            Dtype::F16 => "STORE_F16",
            Dtype::Bf16 => "STORE_BF16",
            Dtype::F32 => "STORE_F32",
        };
        format!(
            "#define {store} 1\n#define HD {}\n#define G {}\n#define KVH {}\n#define PAGE_SIZE {}u\n\
             #define VEC {}\n#define VBYTES {}\n#define LPT {}\n#define NW {}\n#define PART {}u\n\
             #define UNROLL {}\n",
            self.head_dim,
            self.group,
            self.kv_heads,
            self.page_size,
            self.vec,
            self.vec_bytes(),
            self.lanes_per_token,
            self.warps,
            PART_TOKENS,
            UNROLL,
        )
    }
}

/// The full source for one configuration.
pub fn kernel_source(cfg: &KernelConfig) -> String {
    format!("// kvsim-gpu kernels for {cfg:?}\n{}\n{KERNELS_CU}", cfg.defines())
}

/// What NVRTC should produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Machine code for a real architecture (`arch` = `sm_XY`).
    Cubin,
    /// PTX text (`arch` = `compute_XY`).
    Ptx,
}

fn log_string(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `src` for `arch` with NVRTC. Returns the CUBIN image or the PTX text's bytes
/// (without a trailing NUL). The caller must have checked that libnvrtc is present
/// (`cudarc::nvrtc::sys::is_culib_present`), or this panics inside cudarc's loader.
pub fn nvrtc_compile(src: &str, arch: &str, output: Output) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::result;
    let c_src = CString::new(src).map_err(|_| GpuError::Compile("kernel source holds a NUL byte".into()))?;
    let prog =
        result::create_program(&c_src, None).map_err(|e| GpuError::Compile(format!("nvrtcCreateProgram: {e}")))?;
    let compiled = compile_program(prog, arch, output);
    // SAFETY: `prog` came from nvrtcCreateProgram above and is destroyed exactly once.
    let destroyed = unsafe { result::destroy_program(prog) };
    let bytes = compiled?;
    destroyed.map_err(|e| GpuError::Compile(format!("nvrtcDestroyProgram: {e}")))?;
    Ok(bytes)
}

fn compile_program(prog: cudarc::nvrtc::sys::nvrtcProgram, arch: &str, output: Output) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::{result, sys};
    let opts = [format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    // SAFETY: `prog` is a live program; the options outlive the call.
    if let Err(e) = unsafe { result::compile_program(prog, &opts) } {
        // SAFETY: as above; the log is read before the program is destroyed.
        let log = unsafe { result::get_program_log(prog) }
            .map(|raw| log_string(&raw))
            .unwrap_or_else(|e2| format!("(no log: {e2})"));
        return Err(GpuError::Compile(format!("{e} for {arch} with {opts:?}:\n{log}")));
    }
    match output {
        Output::Cubin => {
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
            unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(|e| GpuError::Compile(format!("nvrtcGetCUBINSize for {arch}: {e}")))?;
            if size == 0 {
                return Err(GpuError::Compile(format!("NVRTC produced no CUBIN for {arch}")));
            }
            let mut buf = vec![0u8; size];
            // SAFETY: `buf` has the `size` bytes NVRTC asked for.
            unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()) }
                .result()
                .map_err(|e| GpuError::Compile(format!("nvrtcGetCUBIN for {arch}: {e}")))?;
            Ok(buf)
        }
        Output::Ptx => {
            // SAFETY: `prog` compiled successfully.
            let raw = unsafe { result::get_ptx(prog) }
                .map_err(|e| GpuError::Compile(format!("nvrtcGetPTX for {arch}: {e}")))?;
            Ok(log_string(&raw).into_bytes())
        }
    }
}
