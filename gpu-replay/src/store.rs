//! Host storage of one K or V array in its dtype.
//!
//! A [`Store`] is a flat array in the engine layout (page-major, then slot, KV head, head
//! dim) holding f16, bf16 or f32 elements. Reads convert to f32 a slice at a time; writes
//! round to the dtype. It is zeroed at creation and then only by an explicit `Zero` op (a free
//! under `zero_on_free`, a node restart) — like an engine's pool.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::error::GpuError;
use crate::program::Dtype;

/// A flat array of stored elements.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
}

fn zeroed<T: Copy>(zero: T, len: usize, what: &str) -> Result<Vec<T>, GpuError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| GpuError::TooLarge {
        what: what.to_string(),
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        limit_bytes: 0,
    })?;
    v.resize(len, zero);
    Ok(v)
}

impl Store {
    /// A zeroed store of `len` elements; an allocation failure is a `TooLarge` error.
    pub(crate) fn zeros(dtype: Dtype, len: usize, what: &str) -> Result<Self, GpuError> {
        Ok(match dtype {
            Dtype::F16 => Store::F16(zeroed(f16::ZERO, len, what)?),
            Dtype::Bf16 => Store::Bf16(zeroed(bf16::ZERO, len, what)?),
            Dtype::F32 => Store::F32(zeroed(0.0f32, len, what)?),
        })
    }

    /// Converts `out.len()` elements starting at `offset` into `out`.
    pub(crate) fn read(&self, offset: usize, out: &mut [f32]) {
        let r = offset..offset + out.len();
        match self {
            Store::F16(v) => v[r].convert_to_f32_slice(out),
            Store::Bf16(v) => v[r].convert_to_f32_slice(out),
            Store::F32(v) => out.copy_from_slice(&v[r]),
        }
    }

    /// Stores `vals` (rounded to the dtype) starting at `offset`.
    pub(crate) fn write(&mut self, offset: usize, vals: &[f32]) {
        let r = offset..offset + vals.len();
        match self {
            Store::F16(v) => v[r].convert_from_f32_slice(vals),
            Store::Bf16(v) => v[r].convert_from_f32_slice(vals),
            Store::F32(v) => v[r].copy_from_slice(vals),
        }
    }

    /// Sets `len` elements starting at `offset` to zero.
    pub(crate) fn zero(&mut self, offset: usize, len: usize) {
        let r = offset..offset + len;
        match self {
            Store::F16(v) => v[r].fill(f16::ZERO),
            Store::Bf16(v) => v[r].fill(bf16::ZERO),
            Store::F32(v) => v[r].fill(0.0),
        }
    }

    /// Copies `len` elements from `src` to `dst` within this store (ranges must not overlap).
    pub(crate) fn copy_within(&mut self, src: usize, dst: usize, len: usize) {
        match self {
            Store::F16(v) => v.copy_within(src..src + len, dst),
            Store::Bf16(v) => v.copy_within(src..src + len, dst),
            Store::F32(v) => v.copy_within(src..src + len, dst),
        }
    }

    /// Copies `len` elements at `src_off` of `src` to `dst_off` of `self` (same dtype).
    pub(crate) fn copy_from(&mut self, dst_off: usize, src: &Store, src_off: usize, len: usize) {
        let (d, s) = (dst_off..dst_off + len, src_off..src_off + len);
        match (self, src) {
            (Store::F16(a), Store::F16(b)) => a[d].copy_from_slice(&b[s]),
            (Store::Bf16(a), Store::Bf16(b)) => a[d].copy_from_slice(&b[s]),
            (Store::F32(a), Store::F32(b)) => a[d].copy_from_slice(&b[s]),
            _ => panic!("copy between stores of different dtypes: every pool of a program shares one shape"),
        }
    }
}
