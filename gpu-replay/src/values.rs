//! Deterministic KV and query values, and the provenance dimensions.
//!
//! Every value is a pure function of `(kind, tenant, request, position, head, dim)`, so the
//! CPU, the CUDA write kernel (which carries a line-for-line copy of [`elem_seed`] and
//! [`elem_value`] in `kernels.cu`) and a test can all re-derive it anywhere.
//!
//! Values are multiples of 1/64 in [-0.5, 0.484375]; every storage dtype holds them
//! exactly, so rounding to the dtype changes nothing and only the attention arithmetic can
//! differ between backends.
//!
//! Provenance: the last three value dimensions of every KV head are reserved.
//! In storage: `FLAG` = 1.0 for every written slot (0 in a never-written, zeroed slot),
//! `TENANT_HI`/`TENANT_LO` = the writer's tenant as two base-256 digits (exact in bf16).
//! The attention kernels turn them into the *effective* values
//! `[flag, own, foreign]` (see [`effective_reserved`]), so the attention output itself
//! reads: `out[FLAG]` = weight share of written slots, `out[OWN]` = share of the reader's
//! tenant, `out[FOREIGN]` = share of other tenants, and `1 - out[FLAG]` = share of zeros.

use half::{bf16, f16};

use crate::program::{AttnShape, Dtype, Writer};

/// Value dimensions reserved for provenance at the end of every head.
pub const RESERVED_DIMS: u32 = 3;

/// Which tensor a value belongs to; part of the hash input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Keys.
    Key = 0,
    /// Values.
    Value = 1,
    /// Queries.
    Query = 2,
}

/// Index of the written-flag dimension of a head (`head_dim - 3`).
pub fn flag_dim(head_dim: u32) -> usize {
    (head_dim - 3) as usize
}

/// Index of the stored high tenant digit / the output's own-tenant share (`head_dim - 2`).
pub fn own_dim(head_dim: u32) -> usize {
    (head_dim - 2) as usize
}

/// Index of the stored low tenant digit / the output's foreign share (`head_dim - 1`).
pub fn foreign_dim(head_dim: u32) -> usize {
    (head_dim - 1) as usize
}

const SEED: u32 = 0x6b76_7369; // "kvsi"

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

fn murmur_step(h: u32, k: u32) -> u32 {
    let k = k.wrapping_mul(0xcc9e_2d51).rotate_left(15).wrapping_mul(0x1b87_3593);
    (h ^ k).rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64)
}

/// The per-(token, head) seed: MurmurHash3 (x86_32 body) over the six words
/// `[kind, tenant, request, pos_lo, pos_hi, head]`, seeded with `0x6b767369`.
pub fn elem_seed(kind: Kind, who: Writer, pos: u64, head: u32) -> u32 {
    let words = [kind as u32, who.tenant, who.request, pos as u32, (pos >> 32) as u32, head];
    let h = words.iter().fold(SEED, |h, &w| murmur_step(h, w));
    fmix32(h ^ 24)
}

/// The value of dimension `dim` under `seed`: a multiple of 1/64 in [-0.5, 0.484375].
pub fn elem_value(seed: u32, dim: u32) -> f32 {
    let x = fmix32(seed ^ dim.wrapping_add(1).wrapping_mul(0x9e37_79b9));
    ((x >> 26) as i32 - 32) as f32 / 64.0
}

/// Rounds `x` to the storage dtype and back (round to nearest even).
pub fn round_to(dtype: Dtype, x: f32) -> f32 {
    match dtype {
        Dtype::F16 => f16::from_f32(x).to_f32(),
        Dtype::Bf16 => bf16::from_f32(x).to_f32(),
        Dtype::F32 => x,
    }
}

/// Fills `out` (`head_dim` long) with the stored key of one KV head of one token.
pub fn key_into(shape: &AttnShape, who: Writer, pos: u64, kv_head: u32, out: &mut [f32]) {
    let seed = elem_seed(Kind::Key, who, pos, kv_head);
    for (d, o) in out.iter_mut().enumerate() {
        *o = elem_value(seed, d as u32);
    }
    debug_assert_eq!(out.len(), shape.head_dim as usize);
}

/// Fills `out` (`head_dim` long) with the stored value of one KV head of one token,
/// reserved dimensions included (flag 1.0, tenant digits).
pub fn value_into(shape: &AttnShape, who: Writer, pos: u64, kv_head: u32, out: &mut [f32]) {
    let hd = shape.head_dim;
    let seed = elem_seed(Kind::Value, who, pos, kv_head);
    let data = (hd - RESERVED_DIMS) as usize;
    for (d, o) in out[..data].iter_mut().enumerate() {
        *o = elem_value(seed, d as u32);
    }
    out[flag_dim(hd)] = 1.0;
    out[own_dim(hd)] = (who.tenant >> 8) as f32;
    out[foreign_dim(hd)] = (who.tenant & 0xff) as f32;
}

/// Stored K and V of every KV head of one token, `kv_heads * head_dim` each, exactly as a
/// write leaves them (already exact in every dtype).
pub fn derive_kv(shape: &AttnShape, who: Writer, pos: u64) -> (Vec<f32>, Vec<f32>) {
    let hd = shape.head_dim as usize;
    let n = shape.slot_elems() as usize;
    let (mut k, mut v) = (vec![0.0; n], vec![0.0; n]);
    for g in 0..shape.kv_heads {
        let r = g as usize * hd..(g as usize + 1) * hd;
        key_into(shape, who, pos, g, &mut k[r.clone()]);
        value_into(shape, who, pos, g, &mut v[r]);
    }
    (k, v)
}

/// The decode query of `reader` at `seq_len`: `heads * head_dim`, rounded to the dtype.
pub fn derive_query(shape: &AttnShape, reader: Writer, seq_len: u64) -> Vec<f32> {
    let hd = shape.head_dim;
    let mut q = Vec::with_capacity((shape.heads * hd) as usize);
    for h in 0..shape.heads {
        let seed = elem_seed(Kind::Query, reader, seq_len, h);
        q.extend((0..hd).map(|d| round_to(shape.dtype, elem_value(seed, d))));
    }
    q
}

/// The tenant a stored value's reserved dimensions name, or `None` for a never-written
/// (zero) slot. `stored` is one head's value vector.
pub fn stored_tenant(stored: &[f32]) -> Option<u32> {
    let hd = stored.len() as u32;
    if stored[flag_dim(hd)] != 1.0 {
        return None;
    }
    let hi = stored[own_dim(hd)] as u32;
    let lo = stored[foreign_dim(hd)] as u32;
    Some((hi << 8) | lo)
}

/// The effective values of the three reserved dimensions for a reader of tenant
/// `reader_tenant`, given one head's stored reserved values `[flag, hi, lo]`:
/// `[flag, own, foreign]` where `own` = written by the reader's tenant and `foreign` =
/// written by another tenant. This is the whole of the provenance transform; the CUDA
/// kernel does the same comparison on the stored bytes.
pub fn effective_reserved(stored: [f32; 3], reader_tenant: u32) -> [f32; 3] {
    let [flag, hi, lo] = stored;
    let written = flag == 1.0;
    let own = written && hi == (reader_tenant >> 8) as f32 && lo == (reader_tenant & 0xff) as f32;
    let foreign = written && !own;
    [flag, f32::from(u8::from(own)), f32::from(u8::from(foreign))]
}

/// Provenance shares read from an attention output (`heads * head_dim`), averaged over heads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    /// Weight on slots written by another tenant.
    pub foreign: f64,
    /// Weight on slots written by the reader's tenant.
    pub own: f64,
    /// Weight on never-written (zero) slots.
    pub zeros: f64,
}

/// Reads the provenance shares out of an attention output.
pub fn shares_from_output(shape: &AttnShape, out: &[f32]) -> Shares {
    let hd = shape.head_dim as usize;
    let heads = f64::from(shape.heads);
    let (mut foreign, mut own, mut written) = (0.0f64, 0.0f64, 0.0f64);
    for head in out.chunks_exact(hd) {
        written += f64::from(head[flag_dim(shape.head_dim)]);
        own += f64::from(head[own_dim(shape.head_dim)]);
        foreign += f64::from(head[foreign_dim(shape.head_dim)]);
    }
    Shares { foreign: foreign / heads, own: own / heads, zeros: 1.0 - written / heads }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: AttnShape = AttnShape { heads: 4, kv_heads: 2, head_dim: 16, dtype: Dtype::Bf16 };

    #[test]
    fn values_are_exact_sixty_fourths_in_every_dtype() {
        for pos in 0..64u64 {
            let (k, v) = derive_kv(&SHAPE, Writer { tenant: 3, request: 1 }, pos << 30);
            for x in k.iter().chain(&v[..13]) {
                assert!((-0.5..0.5).contains(x), "{x}");
                assert_eq!((x * 64.0).fract(), 0.0, "{x}");
                for dtype in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
                    assert_eq!(round_to(dtype, *x), *x);
                }
            }
        }
    }

    #[test]
    fn the_hash_is_pinned() {
        // The CUDA kernel carries a copy of this hash; these values pin the specification.
        let w = Writer { tenant: 1, request: 2 };
        assert_eq!(elem_seed(Kind::Key, w, 3, 0), elem_seed(Kind::Key, w, 3, 0));
        assert_ne!(elem_seed(Kind::Key, w, 3, 0), elem_seed(Kind::Value, w, 3, 0));
        assert_ne!(elem_seed(Kind::Key, w, 3, 0), elem_seed(Kind::Key, w, 3 + (1 << 32), 0));
        let pinned: Vec<f32> = (0..4).map(|d| elem_value(elem_seed(Kind::Key, w, 3, 0), d)).collect();
        assert_eq!(pinned, PINNED);
    }

    const PINNED: [f32; 4] = [-0.15625, -0.3125, 0.484375, 0.296875];

    #[test]
    fn tenant_digits_round_trip_and_drive_provenance() {
        for tenant in [0, 1, 255, 256, 0x1234, crate::program::MAX_TENANT] {
            let (_, v) = derive_kv(&SHAPE, Writer { tenant, request: 0 }, 0);
            let head = &v[..16];
            assert_eq!(stored_tenant(head), Some(tenant));
            let stored = [head[13], head[14], head[15]];
            assert_eq!(effective_reserved(stored, tenant), [1.0, 1.0, 0.0]);
            assert_eq!(effective_reserved(stored, tenant ^ 1), [1.0, 0.0, 1.0]);
            assert_eq!(effective_reserved(stored, tenant ^ 0x100), [1.0, 0.0, 1.0]);
        }
        assert_eq!(stored_tenant(&[0.0; 16]), None);
        assert_eq!(effective_reserved([0.0; 3], 0), [0.0, 0.0, 0.0]);
    }
}
