//! The CUDA backend: pools in device memory, writes and paged attention as kernels.
//!
//! Each pool is one device allocation for K and one for V, zeroed once at creation
//! (`alloc_zeros`) and afterwards only by a `Zero` op (`cuMemsetD8Async` over the page
//! runs). Writes run `kv_write`, which derives the values on the device with the same hash
//! as [`crate::values`]; copies are `memcpy_dtod` of whole page runs; frees do nothing. An
//! `Attend` runs `attn_partial` (one block per partition and KV head, GQA heads sharing each
//! K/V load; the split fills the device's SMs, see [`KernelConfig::split`]) and `attn_reduce`
//! (merges the partitions, in parallel over them), timed with CUDA events.
//!
//! Every run is checked on the CPU ([`CudaBackend::set_cpu_check`]): by default
//! ([`CpuCheck::Auto`]) a program whose pools fit the CPU's limit is replayed whole on the
//! (multi-threaded) CPU reference and the largest absolute difference of the output vectors is
//! reported; a larger one gets the sampled check of [`crate::check`] instead (sampled
//! partitions recomputed from a symbolic slot map, the merge recomputed from the device's
//! partials), and may then use the device's free memory rather than the CPU's 8 GiB limit. The
//! verdict always uses the device's output.
//!
//! Guarantee: nothing here panics for want of CUDA. [`cuda_probe`] checks for libcuda, a
//! device and libnvrtc before any context is made (cudarc's dynamic loader panics if a
//! library is missing), and every driver or NVRTC result is mapped into a [`GpuError`].

pub mod kernels;

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

use crate::check::{CpuCheck, DeviceRead, ReadCheck, ReadSpec, SlotMap};
use crate::cpu::{self, AttendOutput};
use crate::error::GpuError;
use crate::program::{expand_block_table, AttnShape, Op, PoolSpec, Program, SlotRun, Writer, CPU_POOL_BYTES_LIMIT};
use crate::values::derive_query;
use crate::{AttendResult, Backend};

use kernels::{KernelConfig, Output, REDUCE_THREADS};

/// Checks, without panicking, that a CUDA driver, at least one device and NVRTC can be
/// used. `Err` holds the reason for a [`GpuError::Unavailable`].
pub fn cuda_probe() -> Result<(), String> {
    // SAFETY: only tries to open the library; loads no symbol.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("libcuda (the NVIDIA driver library) was not found".into());
    }
    let count = std::panic::catch_unwind(CudaContext::device_count)
        .map_err(|_| "the CUDA driver library could not be used (missing symbols?)".to_string())?;
    match count {
        Ok(n) if n > 0 => {}
        Ok(_) => return Err("the CUDA driver reports no device".into()),
        Err(e) => return Err(format!("cuInit/cuDeviceGetCount failed: {e}")),
    }
    // SAFETY: only tries to open the library; loads no symbol.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("libnvrtc was not found; put the directory holding libnvrtc.so.13 \
                    (system CUDA, or the nvidia-cuda-nvrtc wheel's nvidia/cu13/lib) \
                    on LD_LIBRARY_PATH before starting the program"
            .into());
    }
    Ok(())
}

/// Whether libnvrtc can be loaded (NVRTC compiles without a GPU, so this alone allows
/// compile-checking the kernels).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library; loads no symbol.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn driver(what: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Cuda(format!("{what}: {e}"))
}

/// Device time of one `Attend` (the partial and reduce kernels), best of the repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttendTiming {
    /// The op's id.
    pub id: u64,
    /// Tokens read.
    pub seq_len: u64,
    /// Milliseconds between events recorded around the two kernels.
    pub kernel_ms: f64,
    /// Bytes the kernels must read: K and V of every token, the page list and the query.
    pub bytes_read: u64,
}

impl AttendTiming {
    /// Bytes read per second of kernel time, in GB/s (10^9 bytes).
    pub fn gbps(&self) -> f64 {
        self.bytes_read as f64 / (self.kernel_ms * 1e-3) / 1e9
    }
}

struct Kernels {
    cfg: KernelConfig,
    /// Blocks of `attn_partial` the device keeps resident per SM (the driver's occupancy
    /// answer): the split's waves are sized by it.
    resident: u32,
    write: CudaFunction,
    partial: CudaFunction,
    reduce: CudaFunction,
}

struct DevPool {
    spec: PoolSpec,
    k: CudaSlice<u8>,
    v: CudaSlice<u8>,
}

/// The CUDA backend. One context on device 0, one stream.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    device_name: String,
    compute_capability: (i32, i32),
    /// Multiprocessors of the device (the flash-decoding split fills them).
    sms: u32,
    kernels: BTreeMap<KernelConfig, Arc<Kernels>>,
    notes: Vec<String>,
    timings: Vec<AttendTiming>,
    reference: Vec<AttendResult>,
    checks: Vec<ReadCheck>,
    cpu_check: CpuCheck,
    cpu_threads: usize,
    repetitions: u32,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device_name", &self.device_name)
            .field("compute_capability", &self.compute_capability)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Opens device 0, or [`GpuError::Unavailable`] if [`cuda_probe`] fails.
    pub fn new() -> Result<Self, GpuError> {
        cuda_probe().map_err(GpuError::Unavailable)?;
        let ctx = CudaContext::new(0).map_err(driver("cuCtx for device 0"))?;
        let stream = ctx.default_stream();
        let device_name = ctx.name().map_err(driver("cuDeviceGetName"))?;
        let compute_capability = ctx.compute_capability().map_err(driver("compute capability"))?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("cuDeviceGetAttribute (multiprocessors)"))?;
        Ok(CudaBackend {
            sms: u32::try_from(sms).unwrap_or(1).max(1),
            ctx,
            stream,
            device_name,
            compute_capability,
            kernels: BTreeMap::new(),
            notes: Vec::new(),
            timings: Vec::new(),
            reference: Vec::new(),
            checks: Vec::new(),
            cpu_check: CpuCheck::Auto,
            cpu_threads: cpu::default_threads(),
            repetitions: 1,
        })
    }

    /// The device's name and compute capability, e.g. `NVIDIA H200 (sm_90)`.
    pub fn device(&self) -> String {
        let (major, minor) = self.compute_capability;
        format!("{} (sm_{major}{minor})", self.device_name)
    }

    /// Notes on how the kernels were built (e.g. a PTX fallback).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Launch every `Attend` `n` times (at least once) and keep the fastest time.
    pub fn set_repetitions(&mut self, n: u32) {
        self.repetitions = n.max(1);
    }

    /// Device timings of the last run's reads, in op order.
    pub fn last_timings(&self) -> &[AttendTiming] {
        &self.timings
    }

    /// The CPU reference's results for the last run, in op order (empty after a sampled check).
    pub fn last_reference(&self) -> &[AttendResult] {
        &self.reference
    }

    /// The sampled checks of the last run's reads, in op order (empty after a full check).
    pub fn last_checks(&self) -> &[ReadCheck] {
        &self.checks
    }

    /// Threads of the full CPU check (the results do not depend on it).
    pub fn set_cpu_threads(&mut self, threads: usize) {
        self.cpu_threads = threads.max(1);
    }

    /// Bytes of device memory free now: the pool limit of a sampled-check run.
    pub fn free_memory(&self) -> Result<u64, GpuError> {
        let (free, _) = self.ctx.mem_get_info().map_err(driver("cuMemGetInfo"))?;
        Ok(free as u64)
    }

    fn kernels_for(&mut self, shape: &AttnShape, page_size: u32) -> Result<Arc<Kernels>, GpuError> {
        let cfg = KernelConfig::new(shape, page_size);
        if let Some(k) = self.kernels.get(&cfg) {
            return Ok(Arc::clone(k));
        }
        let src = kernels::kernel_source(&cfg);
        let (major, minor) = self.compute_capability;
        let sm = format!("sm_{major}{minor}");
        let compute = format!("compute_{major}{minor}");
        // A CUBIN for the real architecture first: it loads on any driver of the same
        // major version. PTX (JIT-compiled by the driver) only if that fails.
        let cubin = kernels::nvrtc_compile(&src, &sm, Output::Cubin).and_then(|image| {
            self.ctx
                .load_module(Ptx::from_binary(image))
                .map_err(|e| GpuError::Cuda(format!("cuModuleLoadData (CUBIN for {sm}): {e}")))
        });
        let module = match cubin {
            Ok(m) => m,
            Err(first) => {
                let ptx = kernels::nvrtc_compile(&src, &compute, Output::Ptx).map_err(|second| {
                    GpuError::Compile(format!("CUBIN for {sm}: {first}\nPTX for {compute}: {second}"))
                })?;
                let ptx = String::from_utf8_lossy(&ptx).into_owned();
                let m = self.ctx.load_module(Ptx::from_src(ptx)).map_err(|e| {
                    GpuError::Cuda(format!(
                        "CUBIN for {sm}: {first}; cuModuleLoadData (PTX for {compute}): {e} \
                         (the driver refuses PTX newer than itself: use an NVRTC no newer \
                         than the driver's CUDA version)"
                    ))
                })?;
                self.notes.push(format!("CUBIN for {sm} failed ({first}); loaded PTX for {compute}"));
                m
            }
        };
        let load = |name: &'static str| module.load_function(name).map_err(driver(name));
        let partial = load("attn_partial")?;
        let resident = partial
            .occupancy_max_active_blocks_per_multiprocessor(cfg.warps * 32, 0, None)
            .map_err(driver("cuOccupancyMaxActiveBlocksPerMultiprocessor (attn_partial)"))?
            .max(1);
        self.notes.push(format!(
            "attn_partial for {} head_dim {} G {} page {}: {resident} blocks of {} threads resident per SM \
             (__launch_bounds__ min {})",
            cfg.dtype.name(),
            cfg.head_dim,
            cfg.group,
            cfg.page_size,
            cfg.warps * 32,
            cfg.min_blocks
        ));
        let k = Arc::new(Kernels { cfg, resident, write: load("kv_write")?, partial, reduce: load("attn_reduce")? });
        self.kernels.insert(cfg, Arc::clone(&k));
        Ok(k)
    }

    /// Measures device-to-device copy bandwidth: `reps` copies of a `bytes` buffer, timed
    /// with events after one warm-up. Counts bytes read plus bytes written, in GB/s.
    pub fn copy_bandwidth(&self, bytes: usize, reps: u32) -> Result<f64, GpuError> {
        let src = self.stream.alloc_zeros::<u8>(bytes).map_err(driver("alloc copy source"))?;
        let mut dst = self.stream.alloc_zeros::<u8>(bytes).map_err(driver("alloc copy target"))?;
        self.stream.memcpy_dtod(&src, &mut dst).map_err(driver("warm-up copy"))?;
        let (start, end) = self.events()?;
        start.record(&self.stream).map_err(driver("record start"))?;
        for _ in 0..reps.max(1) {
            self.stream.memcpy_dtod(&src, &mut dst).map_err(driver("memcpy_dtod"))?;
        }
        end.record(&self.stream).map_err(driver("record end"))?;
        let ms = f64::from(start.elapsed_ms(&end).map_err(driver("event elapsed"))?);
        Ok(2.0 * bytes as f64 * f64::from(reps.max(1)) / (ms * 1e-3) / 1e9)
    }

    fn events(&self) -> Result<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent), GpuError> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok((
            self.ctx.new_event(flags).map_err(driver("cuEventCreate"))?,
            self.ctx.new_event(flags).map_err(driver("cuEventCreate"))?,
        ))
    }

    /// Replays `p` on the device; returns the raw outputs and the timings. With `sampled =
    /// Some(k)`, a slot map follows the device op by op and each read gets the sampled check
    /// of `k` partitions (kept in `self.checks`).
    fn replay(&mut self, p: &Program, sampled: Option<u32>) -> Result<(Vec<Vec<f32>>, Vec<AttendTiming>), GpuError> {
        let mut map = match sampled {
            Some(_) => Some(SlotMap::new(p)?),
            None => None,
        };
        self.checks.clear();
        let mut pools = BTreeMap::new();
        for spec in &p.pools {
            let bytes = usize::try_from(spec.slots() * p.shape.slot_bytes() / 2).map_err(|_| GpuError::TooLarge {
                what: format!("pool {}", spec.pool),
                bytes: spec.slots() * p.shape.slot_bytes(),
                limit_bytes: usize::MAX as u64,
            })?;
            let k = self.stream.alloc_zeros::<u8>(bytes).map_err(driver("alloc pool K"))?;
            let v = self.stream.alloc_zeros::<u8>(bytes).map_err(driver("alloc pool V"))?;
            pools.insert(spec.pool, DevPool { spec: *spec, k, v });
        }
        let (mut outputs, mut timings) = (Vec::new(), Vec::new());
        for op in &p.ops {
            match op {
                Op::Write { pool, slots, writer } => {
                    let dev = pools.get_mut(pool).ok_or_else(|| missing(*pool))?;
                    let k = self.kernels_for(&p.shape, dev.spec.page_size)?;
                    self.write(&k, dev, slots, *writer)?;
                }
                Op::Copy { src_pool, dst_pool, pages } => {
                    self.copy(&p.shape, &mut pools, *src_pool, *dst_pool, pages)?
                }
                // Freeing a page does not clear it, in the engine or here.
                Op::Free { .. } => {}
                Op::Zero { pool, pages } => {
                    let dev = pools.get_mut(pool).ok_or_else(|| missing(*pool))?;
                    self.zero(&p.shape, dev, pages)?;
                }
                Op::Attend { id, pool, reader, block_table, seq_len } => {
                    let dev = pools.get(pool).ok_or_else(|| missing(*pool))?;
                    let k = self.kernels_for(&p.shape, dev.spec.page_size)?;
                    let read = Read { id: *id, reader: *reader, block_table, seq_len: *seq_len };
                    let (out, timing, partials) = self.attend(&p.shape, &k, dev, &read, map.is_some())?;
                    if let (Some(map), Some(mut dev_read), Some(k)) = (&map, partials, sampled) {
                        dev_read.output = out.clone();
                        let spec = ReadSpec { id: *id, pool: *pool, reader: *reader, block_table, seq_len: *seq_len };
                        self.checks.push(map.check_read(&spec, &dev_read, k)?);
                    }
                    outputs.push(out);
                    timings.push(timing);
                }
            }
            if let Some(map) = map.as_mut() {
                map.apply(op);
            }
        }
        self.stream.synchronize().map_err(driver("stream synchronize"))?;
        Ok((outputs, timings))
    }

    fn write(&self, k: &Kernels, dev: &mut DevPool, runs: &[SlotRun], writer: Writer) -> Result<(), GpuError> {
        let (mut slots, mut pos) = (Vec::new(), Vec::new());
        for run in runs {
            slots.extend(run.start_slot..run.start_slot + run.len);
            pos.extend(run.first_pos..run.first_pos + run.len);
        }
        if slots.is_empty() {
            return Ok(());
        }
        let d_slots = self.stream.clone_htod(&slots).map_err(driver("upload write slots"))?;
        let d_pos = self.stream.clone_htod(&pos).map_err(driver("upload write positions"))?;
        let n_tok = slots.len() as u64;
        let total = n_tok * u64::from(k.cfg.kv_heads) * u64::from(k.cfg.head_dim);
        let blocks = total.div_ceil(256).min(65_535 * 16) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(&k.write);
        b.arg(&mut dev.k)
            .arg(&mut dev.v)
            .arg(&d_slots)
            .arg(&d_pos)
            .arg(&n_tok)
            .arg(&writer.tenant)
            .arg(&writer.request);
        // SAFETY: the argument list matches kv_write's signature; every slot was validated
        // to lie inside the pool, so all stores stay inside `dev.k`/`dev.v`.
        unsafe { b.launch(cfg) }.map_err(driver("launch kv_write"))?;
        Ok(())
    }

    /// Clears whole page runs of K and V with `cuMemsetD8Async` (stream-ordered).
    fn zero(&self, shape: &AttnShape, dev: &mut DevPool, runs: &[(u32, u32)]) -> Result<(), GpuError> {
        let page_bytes = dev.spec.page_size as usize * (shape.slot_bytes() / 2) as usize;
        for &(first, count) in runs {
            if count == 0 {
                continue;
            }
            let (off, len) = (first as usize * page_bytes, count as usize * page_bytes);
            self.stream.memset_zeros(&mut dev.k.slice_mut(off..off + len)).map_err(driver("memset K page run"))?;
            self.stream.memset_zeros(&mut dev.v.slice_mut(off..off + len)).map_err(driver("memset V page run"))?;
        }
        Ok(())
    }

    fn copy(
        &self,
        shape: &AttnShape,
        pools: &mut BTreeMap<u32, DevPool>,
        src_pool: u32,
        dst_pool: u32,
        runs: &[(u32, u32, u32)],
    ) -> Result<(), GpuError> {
        let page_size = pools.get(&src_pool).ok_or_else(|| missing(src_pool))?.spec.page_size;
        let page_bytes = page_size as usize * (shape.slot_bytes() / 2) as usize;
        for &(s, d, count) in runs {
            if count == 0 {
                continue;
            }
            let (so, dof, len) = (s as usize * page_bytes, d as usize * page_bytes, count as usize * page_bytes);
            if src_pool == dst_pool {
                let dev = pools.get_mut(&src_pool).ok_or_else(|| missing(src_pool))?;
                self.copy_within(&mut dev.k, so, dof, len)?;
                self.copy_within(&mut dev.v, so, dof, len)?;
            } else {
                let mut dst = pools.remove(&dst_pool).ok_or_else(|| missing(dst_pool))?;
                let copied = match pools.get(&src_pool) {
                    Some(src) => self
                        .stream
                        .memcpy_dtod(&src.k.slice(so..so + len), &mut dst.k.slice_mut(dof..dof + len))
                        .and_then(|()| {
                            self.stream.memcpy_dtod(&src.v.slice(so..so + len), &mut dst.v.slice_mut(dof..dof + len))
                        })
                        .map_err(driver("memcpy_dtod page run")),
                    None => Err(missing(src_pool)),
                };
                pools.insert(dst_pool, dst);
                copied?;
            }
        }
        Ok(())
    }

    /// Copies `len` bytes from `src` to `dst` inside one buffer; the ranges do not overlap
    /// (checked by validation), so the buffer is split between them.
    fn copy_within(&self, buf: &mut CudaSlice<u8>, src: usize, dst: usize, len: usize) -> Result<(), GpuError> {
        if src < dst {
            let (lo, mut hi) = buf.split_at_mut(dst);
            self.stream
                .memcpy_dtod(&lo.slice(src..src + len), &mut hi.slice_mut(0..len))
                .map_err(driver("memcpy_dtod within a pool"))
        } else {
            let (mut lo, hi) = buf.split_at_mut(src);
            self.stream
                .memcpy_dtod(&hi.slice(0..len), &mut lo.slice_mut(dst..dst + len))
                .map_err(driver("memcpy_dtod within a pool"))
        }
    }

    fn attend(
        &self,
        shape: &AttnShape,
        k: &Kernels,
        dev: &DevPool,
        read: &Read<'_>,
        want_partials: bool,
    ) -> Result<(Vec<f32>, AttendTiming, Option<DeviceRead>), GpuError> {
        let pages = expand_block_table(read.block_table, dev.spec.page_size, read.seq_len);
        let query = derive_query(shape, read.reader, read.seq_len);
        let d_pages = self.stream.clone_htod(&pages).map_err(driver("upload block table"))?;
        let d_q = self.stream.clone_htod(&query).map_err(driver("upload query"))?;
        let seq_len = read.seq_len as u32;
        let (n_parts, part_tokens) = k.cfg.split_resident(seq_len, self.sms, k.resident);
        let heads = shape.heads as usize;
        let hd = shape.head_dim as usize;
        let rows = n_parts as usize * heads;
        let mut part_m = self.stream.alloc_zeros::<f32>(rows).map_err(driver("alloc part_m"))?;
        let mut part_l = self.stream.alloc_zeros::<f32>(rows).map_err(driver("alloc part_l"))?;
        let mut part_acc = self.stream.alloc_zeros::<f32>(rows * hd).map_err(driver("alloc part_acc"))?;
        let mut out = self.stream.alloc_zeros::<f32>(heads * hd).map_err(driver("alloc output"))?;
        let scale = 1.0f32 / (hd as f32).sqrt();
        let partial_cfg = LaunchConfig {
            grid_dim: (n_parts, shape.kv_heads, 1),
            block_dim: (k.cfg.warps * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let reduce_cfg =
            LaunchConfig { grid_dim: (shape.heads, 1, 1), block_dim: (REDUCE_THREADS, 1, 1), shared_mem_bytes: 0 };
        let (start, end) = self.events()?;
        let mut best_ms = f64::INFINITY;
        for _ in 0..self.repetitions {
            start.record(&self.stream).map_err(driver("record start"))?;
            let mut b = self.stream.launch_builder(&k.partial);
            b.arg(&dev.k)
                .arg(&dev.v)
                .arg(&d_pages)
                .arg(&d_q)
                .arg(&mut part_m)
                .arg(&mut part_l)
                .arg(&mut part_acc)
                .arg(&seq_len)
                .arg(&part_tokens)
                .arg(&read.reader.tenant)
                .arg(&scale);
            // SAFETY: arguments match attn_partial; the page list covers seq_len tokens and
            // every page was validated to lie inside the pool; the partial buffers hold
            // n_parts * heads rows.
            unsafe { b.launch(partial_cfg) }.map_err(driver("launch attn_partial"))?;
            let mut r = self.stream.launch_builder(&k.reduce);
            r.arg(&part_m).arg(&part_l).arg(&part_acc).arg(&mut out).arg(&n_parts);
            // SAFETY: arguments match attn_reduce; grid = heads, buffers sized above.
            unsafe { r.launch(reduce_cfg) }.map_err(driver("launch attn_reduce"))?;
            end.record(&self.stream).map_err(driver("record end"))?;
            let ms = f64::from(start.elapsed_ms(&end).map_err(driver("event elapsed"))?);
            best_ms = best_ms.min(ms);
        }
        let output = self.stream.clone_dtoh(&out).map_err(driver("download output"))?;
        let partials = if want_partials {
            Some(DeviceRead {
                n_parts,
                part_tokens,
                part_m: self.stream.clone_dtoh(&part_m).map_err(driver("download part_m"))?,
                part_l: self.stream.clone_dtoh(&part_l).map_err(driver("download part_l"))?,
                part_acc: self.stream.clone_dtoh(&part_acc).map_err(driver("download part_acc"))?,
                output: Vec::new(),
            })
        } else {
            None
        };
        let bytes_read = read.seq_len * shape.slot_bytes() + 4 * pages.len() as u64 + 4 * query.len() as u64;
        let timing = AttendTiming { id: read.id, seq_len: read.seq_len, kernel_ms: best_ms, bytes_read };
        Ok((output, timing, partials))
    }
}

struct Read<'a> {
    id: u64,
    reader: Writer,
    block_table: &'a [(u32, u32)],
    seq_len: u64,
}

fn missing(pool: u32) -> GpuError {
    GpuError::InvalidProgram(format!("pool {pool} was never created"))
}

/// Largest absolute difference between two output vectors; infinite when either holds a NaN
/// (a NaN must fail an agreement check, not vanish from it), or when their lengths differ.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).abs()).fold(0.0, crate::check::worse)
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn set_cpu_check(&mut self, check: CpuCheck) {
        self.cpu_check = check;
    }

    fn run(&mut self, p: &Program) -> Result<Vec<AttendResult>, GpuError> {
        p.shape.validate()?;
        let check = self.cpu_check.resolve(p);
        if let CpuCheck::Sampled { partitions } = check {
            // No K/V on the host: the pools need only fit the device.
            p.validate(self.free_memory()?)?;
            let (device, timings) = self.replay(p, Some(partitions))?;
            let results = device
                .into_iter()
                .zip(&self.checks)
                .map(|(output, c)| {
                    let out = AttendOutput {
                        id: 0,
                        seq_len: 0,
                        output,
                        per_tenant: Vec::new(),
                        tokens_per_tenant: c.tokens_per_tenant.clone(),
                        zero_tokens: c.zero_tokens,
                    };
                    cpu::result_from_output(&p.shape, &out, Some(c.max_diff()))
                })
                .zip(p.ops.iter().filter_map(|op| match op {
                    Op::Attend { id, .. } => Some(*id),
                    _ => None,
                }))
                .map(|(r, id)| AttendResult { id, ..r })
                .collect();
            self.reference.clear();
            self.timings = timings;
            return Ok(results);
        }
        p.validate(CPU_POOL_BYTES_LIMIT)?;
        let (device, timings) = self.replay(p, None)?;
        let reference: Vec<AttendOutput> = cpu::replay_outputs_with(p, self.cpu_threads)?;
        let results = device
            .iter()
            .zip(&reference)
            .map(|(out, cpu_out)| {
                let diff = max_abs_diff(out, &cpu_out.output);
                let dev_out = AttendOutput { output: out.clone(), ..cpu_out.clone() };
                cpu::result_from_output(&p.shape, &dev_out, Some(diff))
            })
            .collect();
        self.reference = reference.iter().map(|o| cpu::result_from_output(&p.shape, o, None)).collect();
        self.timings = timings;
        Ok(results)
    }
}
