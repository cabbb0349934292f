//! `kvsim-gpu`: replays KV page programs on real attention kernels.
//!
//! The crate knows pages, slots, KV values and attention, and nothing of scheduling. Its
//! purpose is to show that a cross-tenant KV read found by the simulator really makes
//! another tenant's bytes flow into the reader's attention output, and with what weight.
//!
//! - [`program`]: the serde format ([`Program`], [`Op`], …) and its validation.
//! - [`values`]: the deterministic K/V/query values and the provenance dimensions.
//! - [`cpu`]: the CPU reference backend, the specification of the arithmetic, and
//!   [`dense_reference`], the property tests' oracle.
//! - [`cuda`]: the CUDA backend (cudarc, NVRTC-compiled kernels, run-time loaded driver).
//! - [`mod@bench`]: the bench programs and [`bandwidth_check`].
//!
//! **Architecture invariant:** the verdict ([`AttendResult::foreign_share`]) is read out of
//! the attention output itself — the kernel's softmax-weighted sum over the stored bytes —
//! never from a side table of who wrote what.
//!
//! **Architecture invariant:** with no CUDA driver, device or NVRTC, nothing panics:
//! [`select`] answers [`GpuError::Unavailable`] for [`BackendChoice::Cuda`] and falls back to
//! the CPU for [`BackendChoice::Auto`].

pub mod bench;
pub mod check;
pub mod cpu;
pub mod cuda;
pub mod error;
pub mod program;
mod store;
pub mod values;

use serde::{Deserialize, Serialize};

pub use bench::{bandwidth_check, BandwidthReport};
pub use check::CpuCheck;
pub use cpu::{default_threads, dense_reference, replay_outputs, replay_outputs_with, AttendOutput, CpuBackend};
pub use cuda::{cuda_probe, CudaBackend};
pub use error::GpuError;
pub use program::{AttnShape, Dtype, Op, PoolSpec, Program, SlotRun, Writer, MAX_TENANT};

/// The verdict on one `Attend` op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttendResult {
    /// The op's id.
    pub id: u64,
    /// Softmax weight on slots written by another tenant, read from the output's foreign
    /// dimension (mean over heads).
    pub foreign_share: f64,
    /// Weight on slots written by the reader's tenant, from the output's own dimension.
    pub own_share: f64,
    /// Weight on never-written (zero) slots: `1 - out[flag]`. Zero keys score 0, so their
    /// softmax weight is not zero — exactly the engine's behaviour.
    pub zeros_share: f64,
    /// Exact weight share of each writing tenant (CPU second pass), sorted by tenant. Empty
    /// after a device replay with the sampled CPU check ([`CpuCheck::Sampled`]): the weights need
    /// every score.
    pub per_tenant: Vec<(u32, f64)>,
    /// Tokens read per writing tenant, from the stored provenance dims (CPU second pass).
    pub tokens_per_tenant: Vec<(u32, u64)>,
    /// Tokens read that hold zeros (CPU second pass).
    pub zero_tokens: u64,
    /// For a device backend: the largest absolute difference between its output vector
    /// and the CPU reference's (full check), or the sampled check's largest difference
    /// ([`check::ReadCheck::max_diff`]). `None` on the CPU backend.
    pub max_abs_diff_vs_cpu: Option<f64>,
}

/// A replay engine.
pub trait Backend {
    /// Short name: `"cpu"` or `"cuda"`.
    fn name(&self) -> &'static str;
    /// Replays the whole program from fresh pools and returns one result per `Attend`,
    /// in op order.
    fn run(&mut self, p: &Program) -> Result<Vec<AttendResult>, GpuError>;
    /// How a device backend checks its replay on the CPU ([`CpuCheck`]; default `Auto`). The
    /// CPU backend *is* the reference and ignores it.
    fn set_cpu_check(&mut self, _check: CpuCheck) {}
}

/// Which backend the caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// CUDA if a driver, a device and NVRTC are found, else the CPU (with a note).
    Auto,
    /// The CPU reference.
    Cpu,
    /// CUDA, or [`GpuError::Unavailable`].
    Cuda,
}

impl BackendChoice {
    /// Every choice, in the order they are listed to a user.
    pub const ALL: [BackendChoice; 3] = [BackendChoice::Auto, BackendChoice::Cpu, BackendChoice::Cuda];

    /// Lower-case name: the one spelling of the choice (its serde name, `FromStr`, the
    /// command line's `--backend`).
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Cuda => "cuda",
        }
    }
}

impl std::str::FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown backend {s:?}; expected auto, cpu or cuda"))
    }
}

/// The note given when `Auto` falls back to the CPU.
pub const CPU_FALLBACK_NOTE: &str = "no CUDA driver/device found; using the CPU reference backend";

/// Picks a backend. `Auto` returns the CPU backend with [`CPU_FALLBACK_NOTE`] (plus the
/// reason) when CUDA is unavailable; `Cuda` returns [`GpuError::Unavailable`] then.
pub fn select(choice: BackendChoice) -> Result<(Box<dyn Backend>, Option<String>), GpuError> {
    match choice {
        BackendChoice::Cpu => Ok((Box::new(CpuBackend::new()), None)),
        BackendChoice::Cuda => Ok((Box::new(CudaBackend::new()?), None)),
        BackendChoice::Auto => match CudaBackend::new() {
            Ok(b) => Ok((Box::new(b), None)),
            Err(GpuError::Unavailable(why)) => {
                Ok((Box::new(CpuBackend::new()), Some(format!("{CPU_FALLBACK_NOTE} ({why})"))))
            }
            Err(e) => Err(e),
        },
    }
}
