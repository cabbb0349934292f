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

/// Registers of one SM (every architecture the kernels target: sm_70 to sm_90).
const SM_REGISTERS: u32 = 65_536;
/// Fewest loop iterations a partition gets (amortises the query load and the block merge).
const MIN_ITERATIONS_PER_PART: u32 = 4;
/// Threads per block of the reduce kernel (must match `RED_THREADS` in `kernels.cu`).
pub const REDUCE_THREADS: u32 = 256;
/// Shared memory the partial kernel may use for its cross-warp merge, in bytes.
const SMEM_BUDGET_BYTES: u32 = 40 * 1024;

/// Dims of each head a lane holds: `ceil(chunks / lanes_per_token) * vec`.
fn dims_per_lane(head_dim: u32, vec: u32) -> u32 {
    let chunks = head_dim / vec;
    let lanes = (1..=5).map(|k| 1u32 << k).chain([1]).filter(|&l| l <= chunks).max().unwrap_or(1);
    chunks.div_ceil(lanes) * vec
}

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
    /// Tokens each lane group keeps in flight per loop iteration (all their loads are issued
    /// before any is converted).
    pub unroll: u32,
    /// Blocks per SM `__launch_bounds__` asks the register allocator to allow.
    pub min_blocks: u32,
}

impl KernelConfig {
    /// The configuration for a validated shape and a pool's page size.
    ///
    /// Tiling: a lane holds `dims_per_lane` dims of each of the `group` query heads (query and
    /// accumulator registers), so 16-byte loads are kept while `group * dims_per_lane <= 32`
    /// and the load narrows (more lanes per token) until it is at most 64 where the head is
    /// wide enough — GQA group 16 at head_dim 128 has 4 dims per lane instead of 8, which is
    /// what keeps it out of spills. Four tokens per lane group are in flight when the lane's
    /// footprint is small, two otherwise. `min_blocks` is the register estimate's occupancy.
    pub fn new(shape: &AttnShape, page_size: u32) -> Self {
        let elem_bytes = shape.dtype.bytes() as u32;
        let group = shape.group();
        let hd = shape.head_dim;
        let mut vec = 16 / elem_bytes;
        while !hd.is_multiple_of(vec) {
            vec /= 2;
        }
        while vec > 1 && hd / vec < 32 && group * dims_per_lane(hd, vec) > 32 && hd.is_multiple_of(vec / 2) {
            vec /= 2;
        }
        let chunks = hd / vec;
        let mut lanes_per_token = 32;
        while lanes_per_token > chunks {
            lanes_per_token /= 2;
        }
        let per_warp_smem = (group * hd + 2 * group) * 4;
        let mut warps = 4;
        while warps > 1 && warps * per_warp_smem > SMEM_BUDGET_BYTES {
            warps /= 2;
        }
        let dims = dims_per_lane(hd, vec);
        let unroll = if group * dims <= 16 { 4 } else { 2 };
        // Registers per thread: query and accumulator (2 * group * dims); per token in
        // flight its raw K and V (2 * dims * elem_bytes / 4), 3 provenance dims and a 64-bit
        // slot; the converted K and V of the current token (2 * dims); softmax state (3 *
        // group); ~48 for indices and addresses; rounded up to the allocation granule of 8.
        let raw = (2 * dims * elem_bytes).div_ceil(4) + 5;
        let regs = (2 * group * dims + unroll * raw + 2 * dims + 3 * group + 48).div_ceil(8) * 8;
        let min_blocks = (SM_REGISTERS / (regs.min(255) * warps * 32)).clamp(1, 8);
        KernelConfig {
            dtype: shape.dtype,
            head_dim: hd,
            group,
            kv_heads: shape.kv_heads,
            page_size,
            vec,
            lanes_per_token,
            warps,
            unroll,
            min_blocks,
        }
    }

    /// Tokens one block processes per loop iteration: lane groups per block times `unroll`.
    pub fn tokens_per_iteration(&self) -> u32 {
        self.warps * (32 / self.lanes_per_token) * self.unroll
    }

    /// The flash-decoding split of a read of `seq_len` tokens on a device with `sms`
    /// multiprocessors: `(n_parts, part_tokens)`. Enough partitions for two waves of
    /// `min_blocks` blocks per SM over the KV heads, but at least
    /// `MIN_ITERATIONS_PER_PART` loop iterations per partition; `part_tokens` is a multiple
    /// of the tokens per iteration and every partition holds at least one token.
    pub fn split(&self, seq_len: u32, sms: u32) -> (u32, u32) {
        self.split_resident(seq_len, sms, self.min_blocks)
    }

    /// [`KernelConfig::split`] for a device that keeps `blocks_per_sm` blocks of the partial
    /// kernel resident per SM (the driver's occupancy answer for the compiled kernel, which may
    /// exceed `min_blocks` when ptxas used fewer registers than the estimate).
    pub fn split_resident(&self, seq_len: u32, sms: u32, blocks_per_sm: u32) -> (u32, u32) {
        let seq_len = seq_len.max(1);
        let step = self.tokens_per_iteration();
        let wanted = (2 * sms.max(1) * blocks_per_sm.max(1)).div_ceil(self.kv_heads.max(1)).max(1);
        let most = seq_len.div_ceil(step * MIN_ITERATIONS_PER_PART).max(1);
        let n = wanted.min(most);
        let part_tokens = seq_len.div_ceil(n).div_ceil(step) * step;
        (seq_len.div_ceil(part_tokens), part_tokens)
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
             #define VEC {}\n#define VBYTES {}\n#define LPT {}\n#define NW {}\n#define MINB {}\n\
             #define UNROLL {}\n",
            self.head_dim,
            self.group,
            self.kv_heads,
            self.page_size,
            self.vec,
            self.vec_bytes(),
            self.lanes_per_token,
            self.warps,
            self.min_blocks,
            self.unroll,
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
    nvrtc_compile_with(src, arch, output, &[]).map(|(bytes, _)| bytes)
}

/// Per-kernel resources from ptxas: registers per thread and bytes of spill stores/loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    pub kernel: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Compiles `src` to a CUBIN for `arch` (`sm_XY`) with `--ptxas-options=-v` and parses the
/// ptxas report of every entry point. Same precondition as [`nvrtc_compile`].
pub fn nvrtc_resources(src: &str, arch: &str) -> Result<Vec<KernelResources>, GpuError> {
    let (_, log) = nvrtc_compile_with(src, arch, Output::Cubin, &["--ptxas-options=-v"])?;
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let kernel = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources { kernel, registers: 0, spill_stores: 0, spill_loads: 0 });
        } else if let Some(k) = out.last_mut() {
            let num_before = |text: &str, what: &str| -> Option<u32> {
                let i = text.find(what)?;
                text[..i].split_whitespace().last()?.parse().ok()
            };
            if let Some(n) = num_before(line, "bytes spill stores") {
                k.spill_stores = n;
                k.spill_loads = num_before(line, "bytes spill loads").unwrap_or(0);
            }
            if let Some(n) = num_before(line, "registers") {
                k.registers = n;
            }
        }
    }
    if out.is_empty() {
        return Err(GpuError::Compile(format!("no ptxas report in the NVRTC log:\n{log}")));
    }
    Ok(out)
}

fn nvrtc_compile_with(src: &str, arch: &str, output: Output, extra: &[&str]) -> Result<(Vec<u8>, String), GpuError> {
    use cudarc::nvrtc::result;
    let c_src = CString::new(src).map_err(|_| GpuError::Compile("kernel source holds a NUL byte".into()))?;
    let prog =
        result::create_program(&c_src, None).map_err(|e| GpuError::Compile(format!("nvrtcCreateProgram: {e}")))?;
    let compiled = compile_program(prog, arch, output, extra);
    // SAFETY: `prog` came from nvrtcCreateProgram above and is destroyed exactly once.
    let destroyed = unsafe { result::destroy_program(prog) };
    let bytes = compiled?;
    destroyed.map_err(|e| GpuError::Compile(format!("nvrtcDestroyProgram: {e}")))?;
    Ok(bytes)
}

fn compile_program(
    prog: cudarc::nvrtc::sys::nvrtcProgram,
    arch: &str,
    output: Output,
    extra: &[&str],
) -> Result<(Vec<u8>, String), GpuError> {
    use cudarc::nvrtc::{result, sys};
    let mut opts = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    opts.extend(extra.iter().map(|s| s.to_string()));
    // SAFETY: `prog` is a live program; the options outlive the call.
    if let Err(e) = unsafe { result::compile_program(prog, &opts) } {
        // SAFETY: as above; the log is read before the program is destroyed.
        let log = unsafe { result::get_program_log(prog) }
            .map(|raw| log_string(&raw))
            .unwrap_or_else(|e2| format!("(no log: {e2})"));
        return Err(GpuError::Compile(format!("{e} for {arch} with {opts:?}:\n{log}")));
    }
    // SAFETY: `prog` compiled successfully and is still live.
    let log = unsafe { result::get_program_log(prog) }.map(|raw| log_string(&raw)).unwrap_or_default();
    let bytes = match output {
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
            buf
        }
        Output::Ptx => {
            // SAFETY: `prog` compiled successfully.
            let raw = unsafe { result::get_ptx(prog) }
                .map_err(|e| GpuError::Compile(format!("nvrtcGetPTX for {arch}: {e}")))?;
            log_string(&raw).into_bytes()
        }
    };
    Ok((bytes, log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_covers_the_read_and_fills_the_device() {
        for (shape, page_size) in [
            (AttnShape::default_small(), 64),
            (AttnShape { heads: 32, kv_heads: 8, head_dim: 128, dtype: Dtype::Bf16 }, 1),
            (AttnShape { heads: 16, kv_heads: 1, head_dim: 256, dtype: Dtype::F32 }, 16),
        ] {
            let cfg = KernelConfig::new(&shape, page_size);
            let step = cfg.tokens_per_iteration();
            for sms in [1, 16, 132] {
                for seq_len in [1, 7, 255, 256, 1000, 32_768, 1 << 20, 1 << 26] {
                    for resident in [0, 1, cfg.min_blocks, 8, 32] {
                        let (n, part) = cfg.split_resident(seq_len, sms, resident);
                        assert!(n >= 1 && part % step == 0, "{cfg:?} {seq_len} {sms}: {n} x {part}");
                        assert!(u64::from(n) * u64::from(part) >= u64::from(seq_len), "covers");
                        assert!((n - 1) * part < seq_len, "every partition holds a token");
                    }
                    assert_eq!(cfg.split(seq_len, sms), cfg.split_resident(seq_len, sms, cfg.min_blocks));
                }
            }
            // More resident blocks, more partitions for a long read.
            assert!(cfg.split_resident(1 << 20, 132, 8).0 > cfg.split_resident(1 << 20, 132, 2).0);
            // Long reads fill an H200 (132 SMs): about two waves of resident blocks (rounding the
            // partition up to whole iterations may drop a few).
            let (n, _) = cfg.split(1 << 20, 132);
            assert!(10 * n * shape.kv_heads >= 19 * 132 * cfg.min_blocks, "{cfg:?}: {n} partitions");
            // Short reads keep at least MIN_ITERATIONS_PER_PART iterations per partition.
            let (_, part) = cfg.split(300, 132);
            assert!(part >= step * MIN_ITERATIONS_PER_PART.min(300u32.div_ceil(step)), "{part}");
        }
    }

    #[test]
    fn wide_gqa_groups_narrow_the_loads_to_stay_in_registers() {
        let g16 = KernelConfig::new(&AttnShape { heads: 16, kv_heads: 1, head_dim: 128, dtype: Dtype::F16 }, 16);
        assert_eq!((g16.vec, g16.lanes_per_token), (4, 32), "4 dims per lane at G 16, head_dim 128");
        let small = KernelConfig::new(&AttnShape::default_small(), 16);
        assert_eq!(small.vec, 8, "16-byte loads where the registers allow");
        assert!(small.min_blocks >= 2);
    }
}
