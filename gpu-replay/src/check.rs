//! The sampled CPU check of a device replay, for reads too large to replay twice.
//!
//! A full check replays the whole program on the CPU reference ([`crate::cpu`]) and compares
//! every output; it needs the program's K/V on the host (at most
//! [`CPU_POOL_BYTES_LIMIT`]) and costs as much CPU time as the read is long. The sampled check
//! ([`CpuCheck::Sampled`]) needs neither:
//!
//! - a [`SlotMap`] replays the program *symbolically*: each slot holds who wrote it and at
//!   which position (16 bytes, whatever the shape), or nothing (never written, zeroed). Every
//!   stored K/V value is a pure function of that ([`crate::values`], exact in every dtype),
//!   so the CPU can re-derive any token's stored bytes without holding the pools;
//! - of each read, the device's per-partition results (the flash-decoding split's max, sum
//!   and unnormalised accumulator per query head) are downloaded; a deterministic sample of
//!   partitions ([`sample_partitions`]: the first, the last and evenly strided ones between,
//!   offset by a hash of the read) is recomputed on the CPU from the slot map, in f64, for
//!   every query head, and compared;
//! - the merge of *all* partitions into the output is recomputed from the device's partials
//!   (f64) and compared with the device's output;
//! - the tokens read per writing tenant and the zero tokens are counted exactly from the slot
//!   map (as the full check counts them).
//!
//! What it cannot see: a fault confined to partitions outside the sample. The sample's size is
//! the caller's ([`CpuCheck::Sampled`]`{ partitions }`); the exact per-tenant *weights*
//! ([`crate::AttendResult::per_tenant`]) need every score and are left empty.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::GpuError;
use crate::program::{
    expand_block_table, AttnShape, Op, PoolSpec, Program, SlotRun, Writer, CPU_POOL_BYTES_LIMIT, MAX_TENANT,
};
use crate::values::{self, derive_query, effective_reserved, flag_dim};

/// Partitions a sampled check recomputes per read when none is named.
pub const DEFAULT_SAMPLED_PARTITIONS: u32 = 16;

/// How a device replay is checked against the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuCheck {
    /// The whole program on the CPU reference; every output is compared. The program's pools
    /// must fit [`CPU_POOL_BYTES_LIMIT`].
    Full,
    /// Of each read, `partitions` sampled partitions recomputed on the CPU, the whole merge
    /// recomputed from the device's partials, and the token counts (module doc).
    Sampled {
        /// Partitions recomputed per read (at least 2: the first and the last).
        partitions: u32,
    },
    /// `Full` when the program's pools fit [`CPU_POOL_BYTES_LIMIT`], otherwise `Sampled` with
    /// [`DEFAULT_SAMPLED_PARTITIONS`].
    Auto,
}

impl CpuCheck {
    /// The check a program gets: `Auto` resolved by the program's size.
    pub fn resolve(self, p: &Program) -> CpuCheck {
        match self {
            CpuCheck::Auto if p.pool_bytes() <= CPU_POOL_BYTES_LIMIT => CpuCheck::Full,
            CpuCheck::Auto => CpuCheck::Sampled { partitions: DEFAULT_SAMPLED_PARTITIONS },
            CpuCheck::Sampled { partitions } => CpuCheck::Sampled { partitions: partitions.max(2) },
            CpuCheck::Full => CpuCheck::Full,
        }
    }
}

impl std::str::FromStr for CpuCheck {
    type Err = String;

    /// `full`, `auto`, `sampled` or `sampled:N` (N partitions per read, at least 2).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "full" => Ok(CpuCheck::Full),
            "auto" => Ok(CpuCheck::Auto),
            "sampled" => Ok(CpuCheck::Sampled { partitions: DEFAULT_SAMPLED_PARTITIONS }),
            other => match other.strip_prefix("sampled:").map(str::parse::<u32>) {
                Some(Ok(n)) if n >= 2 => Ok(CpuCheck::Sampled { partitions: n }),
                _ => Err(format!("unknown CPU check {other:?}; expected full, auto, sampled or sampled:N (N >= 2)")),
            },
        }
    }
}

/// The larger of two differences, where a NaN difference (a NaN on the device) counts as
/// infinite: `f64::max` would drop it and let a broken result pass.
pub fn worse(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::INFINITY
    } else {
        a.max(b)
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The partitions of a read of `n_parts` a sampled check recomputes: all of them when
/// `k >= n_parts`; otherwise the first, the last, and `k - 2` evenly strided between them,
/// offset by `salt`'s hash. Sorted, distinct, a pure function of its arguments.
pub fn sample_partitions(n_parts: u32, k: u32, salt: u64) -> Vec<u32> {
    let k = k.max(2);
    if k >= n_parts {
        return (0..n_parts).collect();
    }
    // Interior candidates 1..n_parts-1 (`inner` of them), `picks` of them.
    let (inner, picks) = (u64::from(n_parts - 2), u64::from(k - 2));
    let offset = splitmix64(salt) % inner;
    let mut out = vec![0];
    // (i * inner + offset) / picks is strictly increasing in i (inner >= picks) and < inner.
    out.extend((0..picks).map(|i| 1 + ((i * inner + offset) / picks) as u32));
    out.push(n_parts - 1);
    out
}

/// A slot's content: who wrote it, at which position; `tenant == EMPTY` for zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    tenant: u32,
    request: u32,
    pos: u64,
}

const EMPTY: u32 = u32::MAX;
const ZERO_SLOT: Slot = Slot { tenant: EMPTY, request: 0, pos: 0 };

/// The program's pools replayed symbolically: per slot, the writer and position of the K/V it
/// holds (module doc). Writes, copies and `Zero` change it; frees do not.
#[derive(Debug, Clone)]
pub struct SlotMap {
    shape: AttnShape,
    pools: BTreeMap<u32, (PoolSpec, Vec<Slot>)>,
}

impl SlotMap {
    /// Empty (all-zero) pools of a program. The program must have passed validation.
    pub fn new(p: &Program) -> Result<Self, GpuError> {
        let mut pools = BTreeMap::new();
        for spec in &p.pools {
            let too_large = || GpuError::TooLarge {
                what: format!("the slot map of pool {}", spec.pool),
                bytes: spec.slots().saturating_mul(std::mem::size_of::<Slot>() as u64),
                limit_bytes: isize::MAX as u64,
            };
            let n = usize::try_from(spec.slots()).map_err(|_| too_large())?;
            let mut slots = Vec::new();
            slots.try_reserve_exact(n).map_err(|_| too_large())?;
            slots.resize(n, ZERO_SLOT);
            pools.insert(spec.pool, (*spec, slots));
        }
        Ok(SlotMap { shape: p.shape, pools })
    }

    fn pool(&self, id: u32) -> &(PoolSpec, Vec<Slot>) {
        self.pools.get(&id).unwrap_or_else(|| panic!("pool {id} passed validation but was never created"))
    }

    fn pool_mut(&mut self, id: u32) -> &mut (PoolSpec, Vec<Slot>) {
        self.pools.get_mut(&id).unwrap_or_else(|| panic!("pool {id} passed validation but was never created"))
    }

    /// Applies one op of a validated program (`Attend` and `Free` change nothing).
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Write { pool, slots, writer } => self.write(*pool, slots, *writer),
            Op::Copy { src_pool, dst_pool, pages } => {
                let ps = self.pool(*src_pool).0.page_size as usize;
                for &(s, d, count) in pages {
                    let (s, d, n) = (s as usize * ps, d as usize * ps, count as usize * ps);
                    if src_pool == dst_pool {
                        self.pool_mut(*src_pool).1.copy_within(s..s + n, d);
                    } else {
                        let src: Vec<Slot> = self.pool(*src_pool).1[s..s + n].to_vec();
                        self.pool_mut(*dst_pool).1[d..d + n].copy_from_slice(&src);
                    }
                }
            }
            Op::Zero { pool, pages } => {
                let (spec, slots) = self.pool_mut(*pool);
                let ps = spec.page_size as usize;
                for &(first, count) in pages {
                    slots[first as usize * ps..(first + count) as usize * ps].fill(ZERO_SLOT);
                }
            }
            Op::Free { .. } | Op::Attend { .. } => {}
        }
    }

    fn write(&mut self, pool: u32, runs: &[SlotRun], writer: Writer) {
        let slots = &mut self.pool_mut(pool).1;
        for run in runs {
            for i in 0..run.len {
                slots[(run.start_slot + i) as usize] =
                    Slot { tenant: writer.tenant, request: writer.request, pos: run.first_pos + i };
            }
        }
    }

    /// The writer and position of a slot's K/V, `None` for zeros.
    pub fn writer_at(&self, pool: u32, slot: u64) -> Option<(Writer, u64)> {
        let s = self.pool(pool).1[slot as usize];
        (s.tenant != EMPTY).then_some((Writer { tenant: s.tenant, request: s.request }, s.pos))
    }

    /// Tokens read per writing tenant (sorted) and zero tokens of a read of `seq_len` tokens
    /// through `block_table` of `pool`.
    pub fn counts(&self, pool: u32, block_table: &[(u32, u32)], seq_len: u64) -> (Vec<(u32, u64)>, u64) {
        let (spec, slots) = self.pool(pool);
        let ps = u64::from(spec.page_size);
        let pages = expand_block_table(block_table, spec.page_size, seq_len);
        let mut per = vec![0u64; MAX_TENANT as usize + 1];
        let mut zeros = 0;
        for t in 0..seq_len {
            let slot = slots[(u64::from(pages[(t / ps) as usize]) * ps + t % ps) as usize];
            match slot.tenant {
                EMPTY => zeros += 1,
                tenant => per[tenant as usize] += 1,
            }
        }
        let tenants = per.iter().enumerate().filter(|(_, n)| **n > 0).map(|(t, n)| (t as u32, *n)).collect();
        (tenants, zeros)
    }
}

/// One read on the device, as the sampled check needs it: the split and the partial results,
/// laid out as `attn_partial` writes them (row `partition * heads + head`; `acc` has
/// `head_dim` floats per row), and the final output (`heads * head_dim`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRead {
    /// Partitions of the split.
    pub n_parts: u32,
    /// Tokens per partition (the last may hold fewer).
    pub part_tokens: u32,
    /// Max score per row.
    pub part_m: Vec<f32>,
    /// Sum of `exp(score - max)` per row.
    pub part_l: Vec<f32>,
    /// Unnormalised accumulator per row.
    pub part_acc: Vec<f32>,
    /// The read's output.
    pub output: Vec<f32>,
}

/// One read of a program: what the check recomputes from.
#[derive(Debug, Clone, Copy)]
pub struct ReadSpec<'a> {
    /// The op's id (salts the sample).
    pub id: u64,
    /// Pool read.
    pub pool: u32,
    /// Reader.
    pub reader: Writer,
    /// Block table.
    pub block_table: &'a [(u32, u32)],
    /// Tokens read.
    pub seq_len: u64,
}

/// What the sampled check of one read found.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadCheck {
    /// Partitions of the device's split.
    pub n_parts: u32,
    /// The partitions recomputed on the CPU.
    pub partitions: Vec<u32>,
    /// Largest difference over the sampled partitions of every query head: of the max score,
    /// of the partition's normalised output (`acc / sum`), and the relative difference of the
    /// sum (brought to a common max).
    pub max_partition_diff: f64,
    /// Largest difference between the device's output and the merge of its partials.
    pub max_merge_diff: f64,
    /// Tokens read per writing tenant (exact, from the slot map), sorted by tenant.
    pub tokens_per_tenant: Vec<(u32, u64)>,
    /// Zero tokens read (exact).
    pub zero_tokens: u64,
}

impl ReadCheck {
    /// The larger of the two differences.
    pub fn max_diff(&self) -> f64 {
        self.max_partition_diff.max(self.max_merge_diff)
    }
}

impl SlotMap {
    /// Checks one read's device results against the slot map (module doc), recomputing
    /// `partitions` sampled partitions. `dev` must have the layout of [`DeviceRead`] for this
    /// shape; a malformed `dev` is an `InvalidProgram` error.
    pub fn check_read(&self, read: &ReadSpec<'_>, dev: &DeviceRead, partitions: u32) -> Result<ReadCheck, GpuError> {
        let shape = self.shape;
        let (heads, hd) = (shape.heads as usize, shape.head_dim as usize);
        let rows = dev.n_parts as usize * heads;
        let covers = u64::from(dev.n_parts) * u64::from(dev.part_tokens) >= read.seq_len
            && u64::from(dev.n_parts.max(1) - 1) * u64::from(dev.part_tokens) < read.seq_len;
        if !covers
            || dev.part_m.len() != rows
            || dev.part_l.len() != rows
            || dev.part_acc.len() != rows * hd
            || dev.output.len() != heads * hd
        {
            return Err(GpuError::InvalidProgram(format!(
                "read {}: device results do not match {} partitions of {} tokens over {} heads of {}",
                read.id, dev.n_parts, dev.part_tokens, heads, hd
            )));
        }
        let sample = sample_partitions(dev.n_parts, partitions, read.id ^ read.seq_len.rotate_left(32));
        let mut part_diff = 0.0f64;
        for &p in &sample {
            for g in 0..shape.kv_heads {
                for (j, cpu) in self.partition(read, p, dev.part_tokens, g).iter().enumerate() {
                    let row = p as usize * heads + g as usize * shape.group() as usize + j;
                    let (m, l) = (f64::from(dev.part_m[row]), f64::from(dev.part_l[row]));
                    part_diff = worse(part_diff, (m - cpu.max).abs());
                    part_diff = worse(part_diff, (l * (m - cpu.max).exp() / cpu.sum - 1.0).abs());
                    for (d, a) in cpu.acc.iter().enumerate() {
                        part_diff = worse(part_diff, (f64::from(dev.part_acc[row * hd + d]) / l - a / cpu.sum).abs());
                    }
                }
            }
        }
        let merged = merge(dev, heads, hd);
        let merge_diff = merged.iter().zip(&dev.output).map(|(a, b)| (a - f64::from(*b)).abs()).fold(0.0f64, worse);
        let (tokens_per_tenant, zero_tokens) = self.counts(read.pool, read.block_table, read.seq_len);
        Ok(ReadCheck {
            n_parts: dev.n_parts,
            partitions: sample,
            max_partition_diff: part_diff,
            max_merge_diff: merge_diff,
            tokens_per_tenant,
            zero_tokens,
        })
    }

    /// Partition `p` of KV head `g`, recomputed in f64 from the slot map: per query head of the
    /// group, the max score, the sum of `exp(score - max)` and the unnormalised accumulator of the
    /// effective values.
    fn partition(&self, read: &ReadSpec<'_>, p: u32, part_tokens: u32, g: u32) -> Vec<PartState> {
        let shape = self.shape;
        let (hd, group) = (shape.head_dim as usize, shape.group() as usize);
        let (spec, _) = self.pool(read.pool);
        let ps = u64::from(spec.page_size);
        let pages = expand_block_table(read.block_table, spec.page_size, read.seq_len);
        let query = derive_query(&shape, read.reader, read.seq_len);
        let scale = 1.0 / (hd as f32).sqrt();
        let first_head = g as usize * group;
        // The kernel's query: the stored query times the f32 scale, rounded to f32.
        let q: Vec<f64> =
            query[first_head * hd..(first_head + group) * hd].iter().map(|x| f64::from(x * scale)).collect();
        let start = u64::from(p) * u64::from(part_tokens);
        let end = (start + u64::from(part_tokens)).min(read.seq_len);
        let (mut k, mut v) = (vec![0.0f32; hd], vec![0.0f32; hd]);
        let mut tokens: Vec<(Vec<f64>, Vec<f64>)> = Vec::new();
        for t in start..end {
            let slot = u64::from(pages[(t / ps) as usize]) * ps + t % ps;
            match self.writer_at(read.pool, slot) {
                Some((who, pos)) => {
                    values::key_into(&shape, who, pos, g, &mut k);
                    values::value_into(&shape, who, pos, g, &mut v);
                }
                None => {
                    k.fill(0.0);
                    v.fill(0.0);
                }
            }
            let f = flag_dim(shape.head_dim);
            let eff = effective_reserved([v[f], v[f + 1], v[f + 2]], read.reader.tenant);
            v[f..].copy_from_slice(&eff);
            let scores = (0..group).map(|j| (0..hd).map(|d| q[j * hd + d] * f64::from(k[d])).sum()).collect();
            tokens.push((scores, v.iter().map(|x| f64::from(*x)).collect()));
        }
        (0..group)
            .map(|j| {
                let max = tokens.iter().map(|(s, _)| s[j]).fold(f64::NEG_INFINITY, f64::max);
                let mut st = PartState { max, sum: 0.0, acc: vec![0.0; hd] };
                for (s, v) in &tokens {
                    let w = (s[j] - max).exp();
                    st.sum += w;
                    for (a, x) in st.acc.iter_mut().zip(v) {
                        *a += w * x;
                    }
                }
                st
            })
            .collect()
    }
}

impl SlotMap {
    /// Every partition of a read computed on the CPU from the slot map, in the device's layout,
    /// and merged: what a correct device returns, up to rounding. The sampled check's own test
    /// oracle on the CPU backend (and a reference for a device's partials).
    pub fn partials_on_cpu(&self, read: &ReadSpec<'_>, n_parts: u32, part_tokens: u32) -> DeviceRead {
        let (heads, hd, group) = (self.shape.heads as usize, self.shape.head_dim as usize, self.shape.group() as usize);
        let rows = n_parts as usize * heads;
        let mut dev = DeviceRead {
            n_parts,
            part_tokens,
            part_m: vec![0.0; rows],
            part_l: vec![0.0; rows],
            part_acc: vec![0.0; rows * hd],
            output: Vec::new(),
        };
        for p in 0..n_parts {
            for g in 0..self.shape.kv_heads {
                for (j, st) in self.partition(read, p, part_tokens, g).iter().enumerate() {
                    let row = p as usize * heads + g as usize * group + j;
                    dev.part_m[row] = st.max as f32;
                    dev.part_l[row] = st.sum as f32;
                    for (d, a) in st.acc.iter().enumerate() {
                        dev.part_acc[row * hd + d] = *a as f32;
                    }
                }
            }
        }
        dev.output = merge(&dev, heads, hd).into_iter().map(|x| x as f32).collect();
        dev
    }
}

/// A partition's softmax state for one query head, in f64.
struct PartState {
    max: f64,
    sum: f64,
    acc: Vec<f64>,
}

/// The merge of every partition's partials into the output (what `attn_reduce` computes), in
/// f64: `out[h][d] = Σ_p acc_p[d] e^(m_p - M) / Σ_p l_p e^(m_p - M)`.
pub fn merge(dev: &DeviceRead, heads: usize, hd: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; heads * hd];
    for h in 0..heads {
        let rows = (0..dev.n_parts as usize).map(|p| p * heads + h);
        let big = rows.clone().map(|r| f64::from(dev.part_m[r])).fold(f64::NEG_INFINITY, f64::max);
        let mut l = 0.0;
        for r in rows {
            let e = (f64::from(dev.part_m[r]) - big).exp();
            l += f64::from(dev.part_l[r]) * e;
            for d in 0..hd {
                out[h * hd + d] += f64::from(dev.part_acc[r * hd + d]) * e;
            }
        }
        for x in &mut out[h * hd..(h + 1) * hd] {
            *x /= l;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_sorted_distinct_in_range_and_deterministic() {
        for n in 1..200u32 {
            for k in [0, 1, 2, 3, 5, 16, 64, 300] {
                for salt in [0u64, 1, 7, u64::MAX] {
                    let s = sample_partitions(n, k, salt);
                    assert_eq!(s, sample_partitions(n, k, salt), "deterministic");
                    assert_eq!(s.len() as u32, n.min(k.max(2)), "n {n} k {k}: {s:?}");
                    assert!(s.windows(2).all(|w| w[0] < w[1]), "sorted, distinct: {s:?}");
                    assert!(s.iter().all(|&p| p < n));
                    assert_eq!(s[0], 0, "the first partition");
                    assert_eq!(*s.last().expect("non-empty"), n - 1, "the last partition");
                }
            }
        }
        // The salt moves the interior picks: over many reads every partition gets sampled.
        let mut seen = vec![false; 1000];
        for salt in 0..400 {
            for p in sample_partitions(1000, 16, salt) {
                seen[p as usize] = true;
            }
        }
        let covered = seen.iter().filter(|&&x| x).count();
        assert!(covered > 950, "the salt spreads the sample: {covered} of 1000");
    }

    #[test]
    fn cpu_check_parses() {
        assert_eq!("full".parse(), Ok(CpuCheck::Full));
        assert_eq!("auto".parse(), Ok(CpuCheck::Auto));
        assert_eq!("sampled".parse(), Ok(CpuCheck::Sampled { partitions: DEFAULT_SAMPLED_PARTITIONS }));
        assert_eq!("sampled:40".parse(), Ok(CpuCheck::Sampled { partitions: 40 }));
        for bad in ["sampled:1", "sampled:x", "sample", ""] {
            assert!(bad.parse::<CpuCheck>().is_err(), "{bad}");
        }
    }
}
