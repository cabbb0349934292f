//! `kvsim-gpu-bench`: replays the bench programs on CUDA (or the CPU) and prints one table.
//!
//! For each program: tokens read, foreign share on the device and on the CPU reference,
//! the largest output difference, the attention kernels' time and read bandwidth, the
//! device copy bandwidth and the kernel's share of it; then PASS or FAIL against the shares
//! the program must show, the tolerance against the CPU and, for the long reads, the
//! bandwidth target (a share of the measured copy bandwidth).
//!
//! Usage: `kvsim-gpu-bench [--backend cuda|cpu|auto] [--no-full] [--reps N]`
//! Exit codes: 0 all passed, 1 a check failed, 2 bad arguments or an error,
//! 3 the backend is unavailable (no CUDA driver/device/NVRTC).

use std::process::ExitCode;
use std::time::Instant;

use kvsim_gpu::bench::{bench_programs, BenchProgram, COPY_BYTES};
use kvsim_gpu::{select, Backend, BackendChoice, CpuBackend, CudaBackend, GpuError};

/// Largest output difference from the CPU reference the device may show.
const MAX_DIFF: f64 = 1e-3;
/// Largest foreign-share difference from the CPU reference the device may show.
const MAX_SHARE_DIFF: f64 = 1e-4;

struct Args {
    backend: BackendChoice,
    full: bool,
    reps: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { backend: BackendChoice::Cuda, full: true, reps: 5 };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => args.backend = it.next().ok_or("--backend needs a value")?.parse()?,
            "--no-full" => args.full = false,
            "--reps" => {
                args.reps = it.next().ok_or("--reps needs a value")?.parse().map_err(|e| format!("--reps: {e}"))?
            }
            "-h" | "--help" => {
                return Err("usage: kvsim-gpu-bench [--backend cuda|cpu|auto] [--no-full] [--reps N]".into())
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
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
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
    println!("device: {}", cuda.device());
    let copy_gbps = cuda.copy_bandwidth(COPY_BYTES, 10)?;
    header();
    let mut all_ok = true;
    for bp in bench_programs(args.full) {
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
    }
    for n in cuda.notes() {
        println!("note: {n}");
    }
    Ok(all_ok)
}

fn run_cpu(args: &Args) -> Result<bool, GpuError> {
    let mut cpu = CpuBackend::new();
    println!("device: CPU reference (kernel ms = whole replay, wall clock)");
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
    }
    Ok(all_ok)
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
