//! The CPU reference backend: the specification of the arithmetic.
//!
//! Pools are host arrays in the engine layout (page-major, then slot, KV head, head dim),
//! separate K and V, stored in the program's dtype and zeroed at creation. Writes store the
//! derived values; copies move whole pages; `Zero` clears whole pages; frees do nothing.
//!
//! Attention (per KV head, for each query head of its GQA group), all in f32:
//! `q' = q * (1/sqrt(head_dim))`, `s_t = Σ_d q'_d k_t,d` (eight interleaved partial sums),
//! then a softmax-weighted sum of the *effective* values (the stored values with the three
//! reserved dimensions turned into `[flag, own, foreign]`). Tokens are taken in chunks of
//! [`CHUNK_TOKENS`]: an exact softmax inside each chunk, chunks merged with the running
//! max — the flash-decoding split the CUDA kernel also uses.
//!
//! A second pass over the kept scores gives the exact per-tenant weight shares (f64).
//!
//! **Threads.** [`replay_outputs_with`] spreads a replay over `threads` OS threads
//! (`std::thread::scope`): a write's values are derived in parallel batches; a read's
//! chunks are computed in parallel (each chunk's softmax state, scores and writer tags are
//! chunk-local) and merged in token order on one thread; the per-token weights of the second
//! pass are computed in parallel and summed in token order. Every float is produced by the same
//! operations in the same order as with one thread, so the results are bit-identical for every
//! thread count (the `threads` tests assert it).

use std::collections::BTreeMap;

use crate::error::GpuError;
use crate::program::{
    expand_block_table, AttnShape, Op, PoolSpec, Program, SlotRun, Writer, CPU_POOL_BYTES_LIMIT, MAX_TENANT,
};
use crate::store::Store;
use crate::values::{self, derive_query, effective_reserved, flag_dim};
use crate::{AttendResult, Backend};

/// Tokens per chunk of the CPU reduction.
pub const CHUNK_TOKENS: usize = 256;
/// A read of fewer chunks than this runs on one thread (spawning costs more than it saves).
pub const MIN_PARALLEL_CHUNKS: usize = 4;
/// Tokens whose K/V a write derives per parallel batch.
const WRITE_BATCH_TOKENS: usize = 4096;
/// A write batch of fewer tokens is derived on one thread (the many short writes of a lowered
/// trace would spend more on spawning than on hashing).
const MIN_PARALLEL_WRITE_TOKENS: usize = 1024;

/// The threads a CPU replay uses by default: the machine's available parallelism, at most 16.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16)
}

/// Splits `items` into at most `threads` contiguous parts, runs `f` on each part on its own
/// thread (the first part on the caller's), and returns the parts' results in order.
fn par_parts<I: Send, T: Send>(threads: usize, items: &mut [I], f: impl Fn(&mut [I]) -> T + Sync) -> Vec<T> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return vec![f(items)];
    }
    let per = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let mut parts = items.chunks_mut(per);
        let first = parts.next();
        let handles: Vec<_> = parts.map(|part| scope.spawn(move || f(part))).collect();
        let mut out = Vec::with_capacity(threads);
        if let Some(first) = first {
            out.push(f(first));
        }
        for h in handles {
            // A panic on a worker is a bug of this module; re-raise it on the caller.
            out.push(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        out
    })
}

/// The raw outcome of one `Attend`: the attention output itself and the exact per-tenant
/// weight shares from the CPU's second pass.
#[derive(Debug, Clone, PartialEq)]
pub struct AttendOutput {
    /// The op's id.
    pub id: u64,
    /// Tokens read.
    pub seq_len: u64,
    /// Attention output, `heads * head_dim`, f32; provenance in the reserved dimensions.
    pub output: Vec<f32>,
    /// Weight share of each writing tenant (averaged over heads), sorted by tenant.
    pub per_tenant: Vec<(u32, f64)>,
    /// Tokens read per writing tenant, from the stored provenance dimensions, sorted by tenant.
    pub tokens_per_tenant: Vec<(u32, u64)>,
    /// Tokens read that hold zeros (never written, or cleared by `Zero`).
    pub zero_tokens: u64,
}

/// One pool on the host.
struct CpuPool {
    spec: PoolSpec,
    k: Store,
    v: Store,
}

/// The state of a CPU replay: the pools of one program.
struct CpuReplay {
    shape: AttnShape,
    pools: BTreeMap<u32, CpuPool>,
    threads: usize,
}

impl CpuReplay {
    fn new(p: &Program, threads: usize) -> Result<Self, GpuError> {
        let mut pools = BTreeMap::new();
        for spec in &p.pools {
            let elems = spec.slots() * p.shape.slot_elems();
            let len = usize::try_from(elems).map_err(|_| GpuError::TooLarge {
                what: format!("pool {}", spec.pool),
                bytes: elems,
                limit_bytes: usize::MAX as u64,
            })?;
            let what = format!("pool {}", spec.pool);
            let pool = CpuPool {
                spec: *spec,
                k: Store::zeros(p.shape.dtype, len, &what)?,
                v: Store::zeros(p.shape.dtype, len, &what)?,
            };
            pools.insert(spec.pool, pool);
        }
        Ok(CpuReplay { shape: p.shape, pools, threads: threads.max(1) })
    }

    fn pool(&self, id: u32) -> &CpuPool {
        self.pools.get(&id).unwrap_or_else(|| panic!("pool {id} passed validation but was never created"))
    }

    fn pool_mut(&mut self, id: u32) -> &mut CpuPool {
        self.pools.get_mut(&id).unwrap_or_else(|| panic!("pool {id} passed validation but was never created"))
    }

    fn write(&mut self, pool: u32, runs: &[SlotRun], writer: Writer) {
        let shape = self.shape;
        let hd = shape.head_dim as usize;
        let slot_elems = shape.slot_elems() as usize;
        let threads = self.threads;
        // (slot, position) of every token, in the op's order (a later run wins a shared slot).
        let tokens: Vec<(u64, u64)> =
            runs.iter().flat_map(|r| (0..r.len).map(move |i| (r.start_slot + i, r.first_pos + i))).collect();
        let p = self.pool_mut(pool);
        let derive = |batch: &mut [(u64, &mut [f32], &mut [f32])]| {
            for (pos, k, v) in batch.iter_mut() {
                for g in 0..shape.kv_heads {
                    let r = g as usize * hd..(g as usize + 1) * hd;
                    values::key_into(&shape, writer, *pos, g, &mut k[r.clone()]);
                    values::value_into(&shape, writer, *pos, g, &mut v[r]);
                }
            }
        };
        let batch_len = WRITE_BATCH_TOKENS.min(tokens.len());
        let (mut kflat, mut vflat) = (vec![0.0f32; batch_len * slot_elems], vec![0.0f32; batch_len * slot_elems]);
        for batch in tokens.chunks(WRITE_BATCH_TOKENS) {
            let mut work: Vec<(u64, &mut [f32], &mut [f32])> = batch
                .iter()
                .zip(kflat.chunks_mut(slot_elems).zip(vflat.chunks_mut(slot_elems)))
                .map(|(&(_, pos), (k, v))| (pos, k, v))
                .collect();
            // Deriving the values is the cost; storing them stays in order on this thread.
            if threads > 1 && work.len() >= MIN_PARALLEL_WRITE_TOKENS {
                par_parts(threads, &mut work, derive);
            } else {
                derive(&mut work);
            }
            for (i, &(slot, _)) in batch.iter().enumerate() {
                let (off, r) = (slot as usize * slot_elems, i * slot_elems..(i + 1) * slot_elems);
                p.k.write(off, &kflat[r.clone()]);
                p.v.write(off, &vflat[r]);
            }
        }
    }

    fn copy(&mut self, src_pool: u32, dst_pool: u32, runs: &[(u32, u32, u32)]) {
        let page_elems = self.pool(src_pool).spec.page_size as usize * self.shape.slot_elems() as usize;
        for &(s, d, count) in runs {
            let (so, dof, len) = (s as usize * page_elems, d as usize * page_elems, count as usize * page_elems);
            if src_pool == dst_pool {
                let p = self.pool_mut(src_pool);
                p.k.copy_within(so, dof, len);
                p.v.copy_within(so, dof, len);
            } else {
                // Two pools of one map: take the destination out for the copy.
                let mut dst = self
                    .pools
                    .remove(&dst_pool)
                    .unwrap_or_else(|| panic!("pool {dst_pool} passed validation but was never created"));
                let src = self.pool(src_pool);
                dst.k.copy_from(dof, &src.k, so, len);
                dst.v.copy_from(dof, &src.v, so, len);
                self.pools.insert(dst_pool, dst);
            }
        }
    }

    fn zero(&mut self, pool: u32, runs: &[(u32, u32)]) {
        let page_elems = self.pool(pool).spec.page_size as usize * self.shape.slot_elems() as usize;
        let p = self.pool_mut(pool);
        for &(first, count) in runs {
            let (off, len) = (first as usize * page_elems, count as usize * page_elems);
            p.k.zero(off, len);
            p.v.zero(off, len);
        }
    }

    fn attend(&self, id: u64, pool: u32, reader: Writer, table: &[(u32, u32)], seq_len: u64) -> AttendOutput {
        let p = self.pool(pool);
        let pages = expand_block_table(table, p.spec.page_size, seq_len);
        let query = derive_query(&self.shape, reader, seq_len);
        let mut read = PagedRead {
            shape: self.shape,
            pool: p,
            pages: &pages,
            seq_len: seq_len as usize,
            reader_tenant: reader.tenant,
            threads: self.threads,
        };
        let (output, per_tenant, tags) = read.run(&query);
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        let mut zero_tokens = 0;
        for tag in tags {
            match tag.checked_sub(1) {
                Some(tenant) => *counts.entry(tenant).or_default() += 1,
                None => zero_tokens += 1,
            }
        }
        AttendOutput { id, seq_len, output, per_tenant, tokens_per_tenant: counts.into_iter().collect(), zero_tokens }
    }
}

/// One paged decode read on the host.
struct PagedRead<'a> {
    shape: AttnShape,
    pool: &'a CpuPool,
    pages: &'a [u32],
    seq_len: usize,
    reader_tenant: u32,
    threads: usize,
}

/// Running softmax state of one query head.
#[derive(Clone)]
struct Running {
    max: f32,
    sum: f32,
    acc: Vec<f32>,
}

impl Running {
    fn merge(&mut self, max: f32, sum: f32, acc: &[f32]) {
        let m = self.max.max(max);
        let a = if self.max == f32::NEG_INFINITY { 0.0 } else { (self.max - m).exp() };
        let b = (max - m).exp();
        self.sum = self.sum * a + sum * b;
        for (x, y) in self.acc.iter_mut().zip(acc) {
            *x = *x * a + *y * b;
        }
        self.max = m;
    }
}

/// Dot product with eight interleaved f32 partial sums (the reference's summation order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in ra.iter().zip(rb).enumerate() {
        lanes[i] += x * y;
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
}

impl PagedRead<'_> {
    fn slot_offset(&self, t: usize, kv_head: u32) -> usize {
        let ps = self.pool.spec.page_size as usize;
        let slot = self.pages[t / ps] as usize * ps + t % ps;
        slot * self.shape.slot_elems() as usize + kv_head as usize * self.shape.head_dim as usize
    }

    /// Returns the output (`heads * head_dim`), the per-tenant shares and each token's writer
    /// tag (tenant + 1, or 0 for zeros) as KV head 0 stores it (a write fills every head).
    fn run(&mut self, query: &[f32]) -> (Vec<f32>, Vec<(u32, f64)>, Vec<u32>) {
        let hd = self.shape.head_dim as usize;
        let group = self.shape.group() as usize;
        let mut output = vec![0.0f32; self.shape.heads as usize * hd];
        let mut tenant_weight = vec![0.0f64; MAX_TENANT as usize + 1];
        let mut tenant_seen = vec![false; MAX_TENANT as usize + 1];
        let mut head0_tags = Vec::new();
        for g in 0..self.shape.kv_heads {
            let first_head = g as usize * group;
            let q = &query[first_head * hd..(first_head + group) * hd];
            let (states, scores, tags) = self.kv_head(g, q);
            for (j, st) in states.iter().enumerate() {
                let out = &mut output[(first_head + j) * hd..(first_head + j + 1) * hd];
                for (o, a) in out.iter_mut().zip(&st.acc) {
                    *o = a / st.sum;
                }
            }
            // Each written token's weight over the group's heads (in parallel), then summed per
            // tenant in token order.
            let weight = |t: usize| -> f64 {
                states
                    .iter()
                    .enumerate()
                    .map(|(j, st)| f64::from((scores[t * group + j] - st.max).exp()) / f64::from(st.sum))
                    .sum()
            };
            let mut weights: Vec<(usize, f64)> = (0..self.seq_len).map(|t| (t, 0.0)).collect();
            let fill = |part: &mut [(usize, f64)]| {
                for (t, w) in part.iter_mut() {
                    if tags[*t] != 0 {
                        *w = weight(*t);
                    }
                }
            };
            if self.parallel() {
                par_parts(self.threads, &mut weights, fill);
            } else {
                fill(&mut weights);
            }
            for (t, &tag) in tags.iter().enumerate() {
                let Some(tenant) = tag.checked_sub(1) else {
                    continue;
                };
                tenant_weight[tenant as usize] += weights[t].1;
                tenant_seen[tenant as usize] = true;
            }
            if g == 0 {
                head0_tags = tags;
            }
        }
        let heads = f64::from(self.shape.heads);
        let per_tenant = (0..=MAX_TENANT)
            .filter(|&t| tenant_seen[t as usize])
            .map(|t| (t, tenant_weight[t as usize] / heads))
            .collect();
        (output, per_tenant, head0_tags)
    }

    /// Whether this read is long enough to spread over threads.
    fn parallel(&self) -> bool {
        self.threads > 1 && self.seq_len.div_ceil(CHUNK_TOKENS) >= MIN_PARALLEL_CHUNKS
    }

    /// One chunk of KV head `g` (tokens `start..start + tags.len()`): the chunk's softmax state
    /// per query head, its scores (`tags.len() * group`) and writer tags.
    fn chunk(&self, g: u32, q: &[f32], start: usize, scores: &mut [f32], tags: &mut [u32]) -> Vec<Running> {
        let hd = self.shape.head_dim as usize;
        let group = self.shape.group() as usize;
        let mut states = vec![Running { max: f32::NEG_INFINITY, sum: 0.0, acc: vec![0.0; hd] }; group];
        let (mut kbuf, mut vbuf) = (vec![0.0f32; hd], vec![0.0f32; hd]);
        for (i, row) in scores.chunks_exact_mut(group).enumerate() {
            self.pool.k.read(self.slot_offset(start + i, g), &mut kbuf);
            for (j, st) in states.iter_mut().enumerate() {
                let s = dot(&q[j * hd..(j + 1) * hd], &kbuf);
                row[j] = s;
                st.max = st.max.max(s);
            }
        }
        let f = flag_dim(hd as u32);
        for (i, (row, tag)) in scores.chunks_exact(group).zip(tags.iter_mut()).enumerate() {
            self.pool.v.read(self.slot_offset(start + i, g), &mut vbuf);
            *tag = values::stored_tenant(&vbuf).map_or(0, |x| x + 1);
            let eff = effective_reserved([vbuf[f], vbuf[f + 1], vbuf[f + 2]], self.reader_tenant);
            vbuf[f..].copy_from_slice(&eff);
            for (j, st) in states.iter_mut().enumerate() {
                let w = (row[j] - st.max).exp();
                st.sum += w;
                for (a, v) in st.acc.iter_mut().zip(&vbuf) {
                    *a += w * v;
                }
            }
        }
        states
    }

    /// One KV head: the running states of its query heads, all scores (`seq_len * group`)
    /// and each token's writer tag (tenant + 1, or 0 for a never-written slot). Chunks are
    /// computed independently (in parallel for a long read) and merged in token order.
    fn kv_head(&self, g: u32, q: &[f32]) -> (Vec<Running>, Vec<f32>, Vec<u32>) {
        let hd = self.shape.head_dim as usize;
        let group = self.shape.group() as usize;
        let scale = 1.0 / (hd as f32).sqrt();
        let q: Vec<f32> = q.iter().map(|x| x * scale).collect();
        let mut scores = vec![0.0f32; self.seq_len * group];
        let mut tags = vec![0u32; self.seq_len];
        let mut chunks: Vec<(usize, &mut [f32], &mut [u32])> = scores
            .chunks_mut(CHUNK_TOKENS * group)
            .zip(tags.chunks_mut(CHUNK_TOKENS))
            .enumerate()
            .map(|(c, (s, t))| (c * CHUNK_TOKENS, s, t))
            .collect();
        let run = |part: &mut [(usize, &mut [f32], &mut [u32])]| -> Vec<Vec<Running>> {
            part.iter_mut().map(|(start, s, t)| self.chunk(g, &q, *start, s, t)).collect()
        };
        let chunk_states: Vec<Vec<Running>> = if self.parallel() {
            par_parts(self.threads, &mut chunks, run).into_iter().flatten().collect()
        } else {
            run(&mut chunks)
        };
        let mut states = vec![Running { max: f32::NEG_INFINITY, sum: 0.0, acc: vec![0.0; hd] }; group];
        for chunk in &chunk_states {
            for (st, c) in states.iter_mut().zip(chunk) {
                st.merge(c.max, c.sum, &c.acc);
            }
        }
        (states, scores, tags)
    }
}

/// Replays `p` on the host (one thread) and returns the raw output of every `Attend`, in op
/// order.
pub fn replay_outputs(p: &Program) -> Result<Vec<AttendOutput>, GpuError> {
    replay_outputs_with(p, 1)
}

/// [`replay_outputs`] on `threads` threads; bit-identical to it for every thread count.
pub fn replay_outputs_with(p: &Program, threads: usize) -> Result<Vec<AttendOutput>, GpuError> {
    p.validate(CPU_POOL_BYTES_LIMIT)?;
    let mut state = CpuReplay::new(p, threads)?;
    let mut outputs = Vec::with_capacity(p.attend_count());
    for op in &p.ops {
        match op {
            Op::Write { pool, slots, writer } => state.write(*pool, slots, *writer),
            Op::Copy { src_pool, dst_pool, pages } => state.copy(*src_pool, *dst_pool, pages),
            // Freeing a page does not clear it, in the engine or here.
            Op::Free { .. } => {}
            Op::Zero { pool, pages } => state.zero(*pool, pages),
            Op::Attend { id, pool, reader, block_table, seq_len } => {
                outputs.push(state.attend(*id, *pool, *reader, block_table, *seq_len))
            }
        }
    }
    Ok(outputs)
}

/// Builds the result of one read from its output; `max_abs_diff_vs_cpu` is passed through.
pub fn result_from_output(shape: &AttnShape, out: &AttendOutput, max_abs_diff_vs_cpu: Option<f64>) -> AttendResult {
    let shares = values::shares_from_output(shape, &out.output);
    AttendResult {
        id: out.id,
        foreign_share: shares.foreign,
        own_share: shares.own,
        zeros_share: shares.zeros,
        per_tenant: out.per_tenant.clone(),
        tokens_per_tenant: out.tokens_per_tenant.clone(),
        zero_tokens: out.zero_tokens,
        max_abs_diff_vs_cpu,
    }
}

/// The CPU reference backend.
#[derive(Debug)]
pub struct CpuBackend {
    threads: usize,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl CpuBackend {
    /// A CPU backend on [`default_threads`] threads; it holds no state between programs.
    pub fn new() -> Self {
        CpuBackend::with_threads(default_threads())
    }

    /// A CPU backend on `threads` threads (at least one). The results do not depend on it.
    pub fn with_threads(threads: usize) -> Self {
        CpuBackend { threads: threads.max(1) }
    }

    /// The threads a replay uses.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn run(&mut self, p: &Program) -> Result<Vec<AttendResult>, GpuError> {
        let outputs = replay_outputs_with(p, self.threads)?;
        Ok(outputs.iter().map(|o| result_from_output(&p.shape, o, None)).collect())
    }
}

/// Dense attention over a gathered K/V list (no pages), in f64: the property tests' oracle.
///
/// `query` is `heads * head_dim`; `keys` and `values` are `n * kv_heads * head_dim`
/// (token-major, one slot after another). `values` must already be the effective values
/// (reserved dimensions turned into `[flag, own, foreign]`). Returns `heads * head_dim`.
pub fn dense_reference(shape: &AttnShape, query: &[f32], keys: &[f32], values: &[f32]) -> Vec<f32> {
    let hd = shape.head_dim as usize;
    let slot = shape.slot_elems() as usize;
    assert_eq!(query.len(), shape.heads as usize * hd, "query must be heads * head_dim");
    assert_eq!(keys.len(), values.len(), "one value per key");
    assert_eq!(keys.len() % slot, 0, "keys must be n * kv_heads * head_dim");
    let n = keys.len() / slot;
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0.0f32; query.len()];
    for h in 0..shape.heads as usize {
        let g = h / shape.group() as usize;
        let q = &query[h * hd..(h + 1) * hd];
        let scores: Vec<f64> = (0..n)
            .map(|t| {
                let k = &keys[t * slot + g * hd..t * slot + (g + 1) * hd];
                q.iter().zip(k).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>() * scale
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let total: f64 = w.iter().sum();
        for d in 0..hd {
            let a: f64 = (0..n).map(|t| w[t] * f64::from(values[t * slot + g * hd + d])).sum();
            out[h * hd + d] = (a / total) as f32;
        }
    }
    out
}
