//! The KV page program format and its validation.
//!
//! A [`Program`] is what the simulator lowers a run into: pools of pages, writes of KV
//! values into slots, whole-page copies, frees, zeroing of pages (`Zero`: a free under
//! `zero_on_free`, a node restart), and decode reads (`Attend`) through a block table. It knows pages, slots and values, and nothing of scheduling. Everything is serde
//! (JSON-friendly; ops are tagged `{"op": "write", …}`).
//!
//! Guarantee: [`Program::validate`] accepts a program only if every backend can replay it
//! without an out-of-range access: every page, slot and position is checked here, once,
//! with the op index in the message, and every size is checked against the named limits
//! below. Backends rely on it and assert nothing else about the input.

use serde::{Deserialize, Serialize};

use crate::error::GpuError;

/// Largest tenant id a writer or reader may carry. The tenant is stored in two value
/// dimensions as base-256 digits, which every storage dtype (bf16 included) holds exactly.
pub const MAX_TENANT: u32 = 65_535;
/// Smallest head dimension: three dimensions are reserved for provenance, one is left for data.
pub const MIN_HEAD_DIM: u32 = 4;
/// Largest head dimension the kernels are built for.
pub const MAX_HEAD_DIM: u32 = 256;
/// Largest number of query heads sharing one KV head (GQA group); bounds kernel registers.
pub const MAX_GROUP: u32 = 16;
/// Largest number of KV heads.
pub const MAX_KV_HEADS: u32 = 64;
/// Largest page size in slots.
pub const MAX_PAGE_SIZE: u32 = 4_096;
/// Longest read (tokens) of one `Attend`; keeps every token index inside `u32` on the device.
pub const MAX_SEQ_LEN: u64 = 1 << 26;
/// Total bytes of K and V storage over all pools that a CPU replay may allocate (8 GiB).
pub const CPU_POOL_BYTES_LIMIT: u64 = 8 << 30;

/// Storage type of K and V in the pools. Arithmetic is always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE binary32.
    F32,
}

impl Dtype {
    /// Bytes per stored element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }

    /// Lower-case name, as in the JSON format.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
        }
    }
}

/// Attention shape shared by every pool of a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttnShape {
    /// Query heads.
    pub heads: u32,
    /// KV heads; `heads` must be a multiple of it (GQA).
    pub kv_heads: u32,
    /// Elements per head; the last three value dimensions carry provenance.
    pub head_dim: u32,
    /// Storage type of K and V.
    pub dtype: Dtype,
}

impl AttnShape {
    /// The small default shape used for long reads: 8 heads over 2 KV heads, head_dim 64,
    /// f16. A 1M-token read at this shape is 512 MiB of K and V.
    pub fn default_small() -> Self {
        AttnShape { heads: 8, kv_heads: 2, head_dim: 64, dtype: Dtype::F16 }
    }

    /// Query heads per KV head.
    pub fn group(&self) -> u32 {
        self.heads / self.kv_heads.max(1)
    }

    /// Elements of K (or of V) per slot: `kv_heads * head_dim`.
    pub fn slot_elems(&self) -> u64 {
        u64::from(self.kv_heads) * u64::from(self.head_dim)
    }

    /// Bytes of K plus V per slot.
    pub fn slot_bytes(&self) -> u64 {
        2 * self.slot_elems() * self.dtype.bytes()
    }

    /// Checks the shape against the limits above.
    pub fn validate(&self) -> Result<(), GpuError> {
        let bad = |why: String| {
            Err(GpuError::InvalidProgram(format!(
                "shape (heads {}, kv_heads {}, head_dim {}, {}): {why}",
                self.heads,
                self.kv_heads,
                self.head_dim,
                self.dtype.name()
            )))
        };
        if self.kv_heads == 0 || self.kv_heads > MAX_KV_HEADS {
            return bad(format!("kv_heads must be in 1..={MAX_KV_HEADS}"));
        }
        if self.heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad("heads must be a non-zero multiple of kv_heads".into());
        }
        if self.group() > MAX_GROUP {
            return bad(format!("heads / kv_heads must be at most {MAX_GROUP}"));
        }
        if !(MIN_HEAD_DIM..=MAX_HEAD_DIM).contains(&self.head_dim) {
            return bad(format!(
                "head_dim must be in {MIN_HEAD_DIM}..={MAX_HEAD_DIM} \
                 (three value dims are reserved for provenance)"
            ));
        }
        Ok(())
    }
}

/// Creates a pool. Pools are zeroed at creation (as engines do) and afterwards only by an
/// explicit [`Op::Zero`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// Pool id, unique within the program.
    pub pool: u32,
    /// Number of pages.
    pub pages: u32,
    /// Slots per page.
    pub page_size: u32,
}

impl PoolSpec {
    /// Slots in the pool: `pages * page_size`.
    pub fn slots(&self) -> u64 {
        u64::from(self.pages) * u64::from(self.page_size)
    }
}

/// A run of consecutive slots written with consecutive positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotRun {
    /// First slot (`page * page_size + offset`).
    pub start_slot: u64,
    /// Number of slots.
    pub len: u64,
    /// Position of the first slot's token; positions increase by one along the run.
    pub first_pos: u64,
}

/// Who writes (or reads): the KV values are derived from `(tenant, request, position)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Writer {
    /// Tenant id, at most [`MAX_TENANT`].
    pub tenant: u32,
    /// Request id within the tenant.
    pub request: u32,
}

/// One step of a program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Writes K and V for each slot of each run.
    Write {
        /// Pool written.
        pool: u32,
        /// Slot runs.
        slots: Vec<SlotRun>,
        /// Writer whose `(tenant, request, position)` determines the values.
        writer: Writer,
    },
    /// Copies whole pages, run by run in order: `(src_page, dst_page, count)`.
    Copy {
        /// Source pool.
        src_pool: u32,
        /// Destination pool; must have the source's page size.
        dst_pool: u32,
        /// Page runs `(src_page, dst_page, count)`.
        pages: Vec<(u32, u32, u32)>,
    },
    /// Returns pages to the allocator. Does NOT clear them: a no-op for the data, kept for
    /// fidelity with the engine.
    Free {
        /// Pool.
        pool: u32,
        /// Page runs `(first, count)`.
        pages: Vec<(u32, u32)>,
    },
    /// Clears whole pages (K and V) to zeros: what an engine's free does under
    /// `zero_on_free`, and what a restarted node's fresh pool holds. A read of a zeroed slot
    /// sees a never-written slot (flag 0, no tenant).
    Zero {
        /// Pool.
        pool: u32,
        /// Page runs `(first, count)`.
        pages: Vec<(u32, u32)>,
    },
    /// A decode query of `reader` over the first `seq_len` slots of the block table.
    Attend {
        /// Caller's id for the read, echoed in the result.
        id: u64,
        /// Pool read.
        pool: u32,
        /// Reader; the query is derived from `(tenant, request, seq_len)`.
        reader: Writer,
        /// Page runs `(first_page, count)` in logical order.
        block_table: Vec<(u32, u32)>,
        /// Tokens read, at least 1 and at most the table's slots.
        seq_len: u64,
    },
}

/// A whole KV page program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// Pools, created (zeroed) before the first op.
    pub pools: Vec<PoolSpec>,
    /// Ops, replayed in order.
    pub ops: Vec<Op>,
    /// Attention shape of every pool.
    pub shape: AttnShape,
}

impl Program {
    /// Bytes of K and V storage that the program's pools need (saturating).
    pub fn pool_bytes(&self) -> u64 {
        self.pools.iter().map(|p| p.slots().saturating_mul(self.shape.slot_bytes())).fold(0u64, u64::saturating_add)
    }

    /// Number of `Attend` ops (and so of results).
    pub fn attend_count(&self) -> usize {
        self.ops.iter().filter(|op| matches!(op, Op::Attend { .. })).count()
    }

    /// Looks up a pool by id.
    pub fn pool(&self, id: u32) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| p.pool == id)
    }

    /// Checks every rule of the format and the memory limit `limit_bytes`.
    pub fn validate(&self, limit_bytes: u64) -> Result<(), GpuError> {
        self.shape.validate()?;
        self.validate_pools(limit_bytes)?;
        for (index, op) in self.ops.iter().enumerate() {
            self.validate_op(index, op)?;
        }
        Ok(())
    }

    fn validate_pools(&self, limit_bytes: u64) -> Result<(), GpuError> {
        for (i, p) in self.pools.iter().enumerate() {
            if self.pools[..i].iter().any(|q| q.pool == p.pool) {
                return invalid(format!("pool id {} declared twice", p.pool));
            }
            if p.pages == 0 || p.page_size == 0 || p.page_size > MAX_PAGE_SIZE {
                return invalid(format!(
                    "pool {}: pages must be >= 1 and page_size in 1..={MAX_PAGE_SIZE} (got {} pages of {})",
                    p.pool, p.pages, p.page_size
                ));
            }
        }
        let bytes = self.pool_bytes();
        if bytes > limit_bytes {
            return Err(GpuError::TooLarge {
                what: format!("the {} pools of the program", self.pools.len()),
                bytes,
                limit_bytes,
            });
        }
        Ok(())
    }

    fn pool_at(&self, index: usize, id: u32) -> Result<&PoolSpec, GpuError> {
        self.pool(id).ok_or_else(|| GpuError::InvalidProgram(format!("op {index}: unknown pool {id}")))
    }

    fn validate_op(&self, index: usize, op: &Op) -> Result<(), GpuError> {
        match op {
            Op::Write { pool, slots, writer } => {
                let spec = self.pool_at(index, *pool)?;
                check_tenant(index, *writer)?;
                for run in slots {
                    let end = run.start_slot.checked_add(run.len);
                    if end.is_none_or(|e| e > spec.slots()) {
                        return invalid(format!(
                            "op {index}: write run {run:?} leaves pool {pool} ({} slots)",
                            spec.slots()
                        ));
                    }
                    if run.first_pos.checked_add(run.len).is_none() {
                        return invalid(format!("op {index}: positions of {run:?} overflow u64"));
                    }
                }
                Ok(())
            }
            Op::Copy { src_pool, dst_pool, pages } => self.validate_copy(index, *src_pool, *dst_pool, pages),
            Op::Free { pool, pages } | Op::Zero { pool, pages } => {
                let spec = self.pool_at(index, *pool)?;
                for &(first, count) in pages {
                    check_pages(index, spec, first, count)?;
                }
                Ok(())
            }
            Op::Attend { pool, reader, block_table, seq_len, .. } => {
                self.validate_attend(index, *pool, *reader, block_table, *seq_len)
            }
        }
    }

    fn validate_copy(
        &self,
        index: usize,
        src_pool: u32,
        dst_pool: u32,
        pages: &[(u32, u32, u32)],
    ) -> Result<(), GpuError> {
        let src = self.pool_at(index, src_pool)?;
        let dst = self.pool_at(index, dst_pool)?;
        if src.page_size != dst.page_size {
            return invalid(format!(
                "op {index}: copy from pool {src_pool} (page_size {}) to pool {dst_pool} (page_size {})",
                src.page_size, dst.page_size
            ));
        }
        for &(s, d, count) in pages {
            check_pages(index, src, s, count)?;
            check_pages(index, dst, d, count)?;
            let overlap =
                u64::from(s) < u64::from(d) + u64::from(count) && u64::from(d) < u64::from(s) + u64::from(count);
            if src_pool == dst_pool && count > 0 && overlap {
                return invalid(format!("op {index}: copy run ({s}, {d}, {count}) overlaps itself in pool {src_pool}"));
            }
        }
        Ok(())
    }

    fn validate_attend(
        &self,
        index: usize,
        pool: u32,
        reader: Writer,
        block_table: &[(u32, u32)],
        seq_len: u64,
    ) -> Result<(), GpuError> {
        let spec = self.pool_at(index, pool)?;
        check_tenant(index, reader)?;
        if seq_len == 0 || seq_len > MAX_SEQ_LEN {
            return invalid(format!("op {index}: seq_len {seq_len} must be in 1..={MAX_SEQ_LEN}"));
        }
        let mut table_slots = 0u64;
        for &(first, count) in block_table {
            check_pages(index, spec, first, count)?;
            table_slots += u64::from(count) * u64::from(spec.page_size);
        }
        if table_slots < seq_len {
            return invalid(format!("op {index}: seq_len {seq_len} exceeds the block table's {table_slots} slots"));
        }
        Ok(())
    }
}

fn invalid<T>(why: String) -> Result<T, GpuError> {
    Err(GpuError::InvalidProgram(why))
}

fn check_tenant(index: usize, who: Writer) -> Result<(), GpuError> {
    if who.tenant > MAX_TENANT {
        return invalid(format!("op {index}: tenant {} exceeds MAX_TENANT {MAX_TENANT}", who.tenant));
    }
    Ok(())
}

fn check_pages(index: usize, spec: &PoolSpec, first: u32, count: u32) -> Result<(), GpuError> {
    if u64::from(first) + u64::from(count) > u64::from(spec.pages) {
        return invalid(format!(
            "op {index}: pages {first}..{} leave pool {} ({} pages)",
            u64::from(first) + u64::from(count),
            spec.pool,
            spec.pages
        ));
    }
    Ok(())
}

/// Expands a block table into the page of each logical page index, keeping only the pages
/// that hold one of the first `seq_len` tokens.
pub fn expand_block_table(block_table: &[(u32, u32)], page_size: u32, seq_len: u64) -> Vec<u32> {
    let needed = seq_len.div_ceil(u64::from(page_size.max(1)));
    block_table
        .iter()
        .flat_map(|&(first, count)| first..first.saturating_add(count))
        .take(usize::try_from(needed).unwrap_or(usize::MAX))
        .collect()
}
