//! The one error type of the crate.
//!
//! Every fallible path — program validation, size limits, CUDA driver calls, NVRTC
//! compilation — ends in a [`GpuError`]; no CUDA result is ever unwrapped. A caller that
//! asked for CUDA on a machine without a driver or device gets [`GpuError::Unavailable`]
//! (the CLI maps it to exit code 3), never a panic.

use std::fmt;

/// Why a replay could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// The requested backend cannot run here (no CUDA driver, no device, no NVRTC).
    /// The string says which piece is missing.
    Unavailable(String),
    /// The program breaks a rule of the format (an unknown pool, a page out of range, …).
    /// The string names the op index and the offending value.
    InvalidProgram(String),
    /// The program asks for more memory than the backend's limit.
    TooLarge {
        /// What was being sized ("pools", "pool 3", …).
        what: String,
        /// Bytes the program asked for.
        bytes: u64,
        /// The limit that was exceeded.
        limit_bytes: u64,
    },
    /// A CUDA driver call failed; the string names the call and the driver's error.
    Cuda(String),
    /// NVRTC failed to compile the kernels; the string holds the compiler log.
    Compile(String),
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::Unavailable(why) => write!(f, "backend unavailable: {why}"),
            GpuError::InvalidProgram(why) => write!(f, "invalid KV page program: {why}"),
            GpuError::TooLarge { what, bytes, limit_bytes } => write!(
                f,
                "{what} need {bytes} bytes, over the limit of {limit_bytes} bytes; \
                 compact the pages of the program (renumber only the pages that are read) \
                 or use a smaller shape"
            ),
            GpuError::Cuda(why) => write!(f, "CUDA error: {why}"),
            GpuError::Compile(log) => write!(f, "NVRTC compilation failed: {log}"),
        }
    }
}

impl std::error::Error for GpuError {}
