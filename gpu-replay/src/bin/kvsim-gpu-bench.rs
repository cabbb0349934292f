//! `kvsim-gpu-bench`: replays the bench programs on CUDA (or the CPU) and prints one table.
//!
//! For each program: tokens read, foreign share on the device and on the CPU reference,
//! the largest output difference, the attention kernels' time and read bandwidth, the
//! device copy bandwidth and the kernel's share of it; then PASS or FAIL against the shares
//! the program must show, the tolerance against the CPU and, for the long reads, the
//! bandwidth target (a share of the measured copy bandwidth).
//!
//! With the full set, the 1M-token read is also replayed with the sampled CPU check
//! (`full-1M-sampled`: sampled partitions recomputed from the slot map, the merge from the
//! device's partials; on the CPU backend the partials come from the slot map itself, which
//! dry-runs the check). `--cpu-threads N` sets the CPU reference's threads (default: all cores,
//! at most 16; the results do not depend on it).
//!
//! `--cpu-speedup` first times the CPU reference on the 1M-token program with one thread and
//! with `--cpu-threads`, and fails unless the two results are bit-identical.
//!
//! Usage: `kvsim-gpu-bench [--backend cuda|cpu|auto] [--no-full] [--reps N] [--cpu-threads N]
//! [--sampled-partitions N] [--cpu-speedup]`
//! Exit codes: 0 all passed, 1 a check failed, 2 bad arguments or an error,
//! 3 the backend is unavailable (no CUDA driver/device/NVRTC).

use std::process::ExitCode;
use std::time::Instant;

use kvsim_gpu::bench::{bench_programs, full_scale_read, BenchProgram, COPY_BYTES, FULL_SCALE_TOKENS};
use kvsim_gpu::check::{ReadSpec, SlotMap};
use kvsim_gpu::cuda::kernels::KernelConfig;
use kvsim_gpu::{
    default_threads, replay_outputs_with, select, AttnShape, Backend, BackendChoice, CpuBackend, CpuCheck, CudaBackend,
    GpuError, Op,
};

/// Largest output difference from the CPU reference the device may show.
const MAX_DIFF: f64 = 1e-3;
/// Largest foreign-share difference from the CPU reference the device may show.
const MAX_SHARE_DIFF: f64 = 1e-4;

struct Args {
    backend: BackendChoice,
    full: bool,
    reps: u32,
    cpu_threads: usize,
    sampled_partitions: u32,
    cpu_speedup: bool,
}

/// SMs the CPU dry run of the sampled check splits for (an H200).
const DRY_RUN_SMS: u32 = 132;

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        backend: BackendChoice::Cuda,
        full: true,
        reps: 5,
        cpu_threads: default_threads(),
        sampled_partitions: 16,
        cpu_speedup: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => args.backend = it.next().ok_or("--backend needs a value")?.parse()?,
            "--no-full" => args.full = false,
            "--cpu-speedup" => args.cpu_speedup = true,
            "--reps" => {
                args.reps = it.next().ok_or("--reps needs a value")?.parse().map_err(|e| format!("--reps: {e}"))?
            }
            "--cpu-threads" => {
                args.cpu_threads = it
                    .next()
                    .ok_or("--cpu-threads needs a value")?
                    .parse()
                    .map_err(|e| format!("--cpu-threads: {e}"))?
            }
            "--sampled-partitions" => {
                let n: u32 = it
                    .next()
                    .ok_or("--sampled-partitions needs a value")?
                    .parse()
                    .map_err(|e| format!("--sampled-partitions: {e}"))?;
                if n < 2 {
                    return Err("--sampled-partitions must be at least 2".into());
                }
                args.sampled_partitions = n;
            }
            "-h" | "--help" => {
                return Err("usage: kvsim-gpu-bench [--backend cuda|cpu|auto] [--no-full] [--reps N] \
                            [--cpu-threads N] [--sampled-partitions N] [--cpu-speedup]"
                    .into())
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let speedup_ok = !args.cpu_speedup || cpu_speedup(args.cpu_threads);
    let outcome = match args.backend {
        BackendChoice::Cpu => run_cpu(&args),
        BackendChoice::Cuda => run_cuda(&args),
        BackendChoice::Auto => match select(BackendChoice::Auto) {
            Ok((b, None)) if b.name() == "cuda" => run_cuda(&args),
            Ok((_, note)) => {
                if let Some(n) = note {
                    eprintln!("note: {n}");
                }
                run_cpu(&args)
            }
            Err(e) => Err(e),
        },
    };
    match outcome {
        Ok(true) if speedup_ok => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(GpuError::Unavailable(why)) => {
            eprintln!("CUDA unavailable: {why}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Times the CPU reference on the 1M-token program with one thread and with `threads`; true
/// when the two results are bit-identical.
fn cpu_speedup(threads: usize) -> bool {
    let p = full_scale_read(FULL_SCALE_TOKENS, AttnShape::default_small());
    let (one, t1) = timed(|| replay_outputs_with(&p, 1));
    let (many, tn) = timed(|| replay_outputs_with(&p, threads));
    let bits = |r: Result<Vec<kvsim_gpu::AttendOutput>, GpuError>| {
        r.map(|outs| {
            outs.into_iter()
                .map(|o| {
                    let out: Vec<u32> = o.output.iter().map(|x| x.to_bits()).collect();
                    let w: Vec<(u32, u64)> = o.per_tenant.iter().map(|&(t, x)| (t, x.to_bits())).collect();
                    (out, w, o.tokens_per_tenant, o.zero_tokens)
                })
                .collect::<Vec<_>>()
        })
        .map_err(|e| e.to_string())
    };
    let same = matches!((bits(one), bits(many)), (Ok(a), Ok(b)) if a == b);
    println!(
        "cpu reference, 1M-token program: 1 thread {t1:.2} s, {threads} threads {tn:.2} s, speed-up {:.2}x, bit-identical: {}",
        t1 / tn,
        if same { "yes" } else { "NO" }
    );
    same
}

fn header() {
    println!(
        "{:<15} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7}  verdict",
        "program", "seq_len", "foreign", "foreign", "max|diff|", "kernel", "kernel", "copy", "% of"
    );
    println!(
        "{:<15} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "", "", "cuda", "cpu", "", "ms", "GB/s", "GB/s", "copy"
    );
}

/// Wall-clock seconds of `f`. A benchmark times real work: the workspace's ban on the wall
/// clock protects the simulator's virtual time and does not apply to this binary.
#[allow(clippy::disallowed_methods)]
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

fn run_cuda(args: &Args) -> Result<bool, GpuError> {
    let mut cuda = CudaBackend::new()?;
    cuda.set_repetitions(args.reps);
    cuda.set_cpu_threads(args.cpu_threads);
    println!("device: {}", cuda.device());
    let copy_gbps = cuda.copy_bandwidth(COPY_BYTES, 10)?;
    header();
    let mut all_ok = true;
    for bp in bench_programs(args.full) {
        cuda.set_cpu_check(CpuCheck::Full);
        let (dev, wall) = timed(|| cuda.run(&bp.program));
        let dev = dev?;
        let (r, cpu, timing) = (&dev[0], &cuda.last_reference()[0], cuda.last_timings()[0]);
        let diff = r.max_abs_diff_vs_cpu.unwrap_or(f64::NAN);
        let ok = bp.accepts(r.foreign_share, r.zeros_share)
            && bp.accepts(cpu.foreign_share, cpu.zeros_share)
            && diff <= MAX_DIFF
            && (r.foreign_share - cpu.foreign_share).abs() <= MAX_SHARE_DIFF;
        let gbps = timing.gbps();
        let ratio = gbps / copy_gbps;
        // A read with a bandwidth target fails below it (the agreement with the CPU is the
        // other half of the verdict).
        let fast_enough = bp.bandwidth_target.is_none_or(|t| ratio >= t);
        let bw_note = match bp.bandwidth_target {
            Some(t) if !fast_enough => format!(" (bandwidth: {:.0}% < target {:.0}%)", 100.0 * ratio, 100.0 * t),
            Some(t) => format!(" (target {:.0}%)", 100.0 * t),
            None => String::new(),
        };
        let ok = ok && fast_enough;
        println!(
            "{:<15} {:>8} {:>10.6} {:>10.6} {:>9.2e} {:>9.4} {:>9.1} {:>9.1} {:>6.1}%  {}{}  [{wall:.1}s]",
            bp.name,
            bp.seq_len(),
            r.foreign_share,
            cpu.foreign_share,
            diff,
            timing.kernel_ms,
            gbps,
            copy_gbps,
            100.0 * ratio,
            verdict(ok),
            bw_note
        );
        all_ok &= ok;
        if bp.name == "full-1M" {
            all_ok &= sampled_row_cuda(&mut cuda, &bp, args.sampled_partitions, copy_gbps)?;
        }
    }
    for n in cuda.notes() {
        println!("note: {n}");
    }
    Ok(all_ok)
}

/// The 1M-token read again, checked by the sampled CPU check instead of the full reference.
fn sampled_row_cuda(cuda: &mut CudaBackend, bp: &BenchProgram, k: u32, copy_gbps: f64) -> Result<bool, GpuError> {
    cuda.set_cpu_check(CpuCheck::Sampled { partitions: k });
    let (dev, wall) = timed(|| cuda.run(&bp.program));
    let dev = dev?;
    let (r, timing) = (&dev[0], cuda.last_timings()[0]);
    let check = &cuda.last_checks()[0];
    let diff = check.max_diff();
    let ok = bp.accepts(r.foreign_share, r.zeros_share) && diff <= MAX_DIFF && !check.partitions.is_empty();
    let gbps = timing.gbps();
    println!(
        "{:<15} {:>8} {:>10.6} {:>10} {:>9.2e} {:>9.4} {:>9.1} {:>9.1} {:>6.1}%  {}  [{} of {} partitions; {wall:.1}s]",
        "full-1M-sampled",
        bp.seq_len(),
        r.foreign_share,
        "sampled",
        diff,
        timing.kernel_ms,
        gbps,
        copy_gbps,
        100.0 * gbps / copy_gbps,
        verdict(ok),
        check.partitions.len(),
        check.n_parts,
    );
    Ok(ok)
}

fn run_cpu(args: &Args) -> Result<bool, GpuError> {
    let mut cpu = CpuBackend::with_threads(args.cpu_threads);
    println!("device: CPU reference on {} thread(s) (kernel ms = whole replay, wall clock)", cpu.threads());
    header();
    let mut all_ok = true;
    for bp in bench_programs(args.full) {
        let (r, secs) = timed(|| cpu.run(&bp.program));
        let (r, ms) = (r?, secs * 1e3);
        let ok = check_cpu(&bp, r[0].foreign_share, r[0].zeros_share);
        println!(
            "{:<15} {:>8} {:>10} {:>10.6} {:>9} {:>9.1} {:>9} {:>9} {:>7}  {}",
            bp.name,
            bp.seq_len(),
            "-",
            r[0].foreign_share,
            "-",
            ms,
            "-",
            "-",
            "-",
            verdict(ok)
        );
        all_ok &= ok;
        if bp.name == "full-1M" {
            let (ok, secs) = timed(|| sampled_dry_run(&bp, &r[0], args.sampled_partitions));
            let (ok, text) = ok?;
            println!(
                "{:<15} {:>8} {:>10} {:>10} {:>9} {:>9.1} {:>9} {:>9} {:>7}  {}  [{text}]",
                "full-1M-sampled",
                bp.seq_len(),
                "-",
                "sampled",
                "-",
                secs * 1e3,
                "-",
                "-",
                "-",
                verdict(ok)
            );
            all_ok &= ok;
        }
    }
    Ok(all_ok)
}

/// The sampled check without a device: partials of the sampled partitions from the slot map
/// (split as on an H200), checked as a device's would be; the counts must equal the full
/// reference's.
fn sampled_dry_run(bp: &BenchProgram, full: &kvsim_gpu::AttendResult, k: u32) -> Result<(bool, String), GpuError> {
    let p = &bp.program;
    let mut map = SlotMap::new(p)?;
    for op in &p.ops {
        if let Op::Attend { id, pool, reader, block_table, seq_len } = op {
            let read = ReadSpec { id: *id, pool: *pool, reader: *reader, block_table, seq_len: *seq_len };
            let page_size = p.pool(*pool).map_or(1, |s| s.page_size);
            let (n, part) = KernelConfig::new(&p.shape, page_size).split(*seq_len as u32, DRY_RUN_SMS);
            let dev = map.partials_on_cpu(&read, n, part);
            let check = map.check_read(&read, &dev, k)?;
            let ok = check.max_diff() <= 1e-5
                && check.tokens_per_tenant == full.tokens_per_tenant
                && check.zero_tokens == full.zero_tokens;
            return Ok((
                ok,
                format!("dry run: {} of {n} partitions, max diff {:.1e}", check.partitions.len(), check.max_diff()),
            ));
        }
        map.apply(op);
    }
    Ok((false, "no read".into()))
}

fn check_cpu(bp: &BenchProgram, foreign: f64, zeros: f64) -> bool {
    bp.accepts(foreign, zeros)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}
