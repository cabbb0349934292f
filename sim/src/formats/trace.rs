//! The run's record: every processed event and every KV memory operation, in order. The trace
//! hash is computed over all of them, always, whether or not a sink writes them out; sinks are
//! supplied by the caller (the library does no I/O).
//!
//! Rebuilding memory from the log alone: a request's block table on a pool is the concatenation,
//! in order, of the `alloc` records for (pool, request) since the pool's last `reset`; `free`
//! returns pages (contents are kept); `write` names physical slots; `copy` moves whole pages.
//!
//! The trace hash is defined byte for byte (ARCHITECTURE.md, "The trace hash"): every record is
//! encoded by hand (`encode`: a kind byte, a variant byte, fixed-width little-endian integers,
//! `u32`-count-prefixed lists) and the concatenation of all records is hashed with XXH3-64
//! (seed 0, `xxhash-rust`'s streaming `Xxh3`). Nothing goes through `derive(Hash)`, whose byte
//! stream `std` does not promise to keep from one compiler to the next.

use crate::event::{Ev, TimeoutKind};
use crate::pool::Run;
use crate::types::{Instant, NodeId, PoolId, RequestId, Role, TenantId};
use serde::{Deserialize, Serialize};

/// The memory operations that are a pool, a request and a page list: traced from borrowed pages
/// by `Tracer::record_page_list` (a run that only hashes its trace then copies no list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageListOp {
    Alloc,
    Free,
    Lock,
}

impl PageListOp {
    /// Its `MemOp` variant byte in the trace's encoding.
    fn variant(self) -> u8 {
        match self {
            PageListOp::Alloc => 1,
            PageListOp::Free => 2,
            PageListOp::Lock => 9,
        }
    }

    /// The `MemOp` it is, with its own copy of the pages.
    pub fn with(self, pool: PoolId, r: RequestId, pages: Vec<Run>) -> MemOp {
        match self {
            PageListOp::Alloc => MemOp::Alloc { pool, r, pages },
            PageListOp::Free => MemOp::Free { pool, r, pages },
            PageListOp::Lock => MemOp::Lock { pool, r, pages },
        }
    }
}

/// A KV memory operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MemOp {
    /// A pool (re)created as zeros: at start and at a node restart.
    Reset {
        pool: PoolId,
        pages: u32,
        page_size: u64,
    },
    Alloc {
        pool: PoolId,
        r: RequestId,
        pages: Vec<Run>,
    },
    Free {
        pool: PoolId,
        r: RequestId,
        pages: Vec<Run>,
    },
    /// Cached prefix blocks' pages that start `r`'s block table (a radix-cache hit): the cache
    /// keeps holding them, `r` reads them. In block-table order, before the request's own
    /// `Alloc`s.
    Lock {
        pool: PoolId,
        r: RequestId,
        pages: Vec<Run>,
    },
    /// Positions `pos..pos+len` of request `r` written at physical slots `slot..slot+len`.
    Write {
        pool: PoolId,
        r: RequestId,
        tenant: TenantId,
        slots: Vec<(u64, u64, u64)>,
    },
    /// Whole pages copied from one pool into another (pages as (src, dst, count) runs).
    Copy {
        src: PoolId,
        dst: PoolId,
        r: RequestId,
        pages: Vec<(u32, u32, u32)>,
    },
    /// A batch whose data becomes visible after its write completed (`visibility_lag`): its
    /// source pages as read onto the wire when the write completed. Until its [`MemOp::Land`],
    /// `wire` (the job in the high 32 bits, the batch in the low) names that data in flight, page
    /// for page in the order of `pages`; the source pages may be freed and rewritten meanwhile.
    Send {
        src: PoolId,
        r: RequestId,
        wire: u64,
        pages: Vec<Run>,
    },
    /// The data of `wire` (its pages in `Send` order) becomes visible at `pages` of `dst`; `src`
    /// is the pool it was read from.
    Land {
        src: PoolId,
        dst: PoolId,
        r: RequestId,
        wire: u64,
        pages: Vec<Run>,
    },
    /// An attention read of positions `0..seq_len` of `r`'s block table.
    Read {
        pool: PoolId,
        r: RequestId,
        tenant: TenantId,
        seq_len: u64,
    },
    /// One decode batch step on `pool`: per request of the batch, in batch order, what used to be
    /// traced as a `Read` of its sequence, an `Alloc` of one page when the new token starts a page,
    /// and a one-token `Write` (see [`DecodeEntry::expand`]). Readers of the memory log expand it
    /// (`MemOp::expanded`, `expand_log`), so it means exactly those records in that order; a
    /// request whose step does anything else (a stall without a page, a write of another shape)
    /// is traced with the plain records between two batch records.
    DecodeStep {
        pool: PoolId,
        entries: Vec<DecodeEntry>,
    },
}

/// One request's token in a [`MemOp::DecodeStep`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DecodeEntry {
    pub r: RequestId,
    pub tenant: TenantId,
    /// The sequence read (positions `0..seq_len`); the new token is written at position `seq_len`.
    pub seq_len: u64,
    /// The page allocated for the new token first (its last page was full), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// The physical slot the new token was written at.
    pub slot: u64,
}

impl DecodeEntry {
    /// The records this entry stands for, in order: `Read { seq_len }`, `Alloc` of `page` (one
    /// page) when present, `Write` of one slot at position `seq_len`.
    pub fn expand(&self, pool: PoolId) -> impl Iterator<Item = MemOp> + '_ {
        let (r, tenant) = (self.r, self.tenant);
        let read = MemOp::Read { pool, r, tenant, seq_len: self.seq_len };
        let alloc = self.page.map(|p| MemOp::Alloc { pool, r, pages: vec![Run { first: p, count: 1 }] });
        let write = MemOp::Write { pool, r, tenant, slots: vec![(self.slot, 1, self.seq_len)] };
        std::iter::once(read).chain(alloc).chain(std::iter::once(write))
    }
}

impl MemOp {
    /// The plain records this operation stands for: a decode step's entries expanded in order,
    /// any other operation itself.
    pub fn expanded(&self) -> Vec<MemOp> {
        match self {
            MemOp::DecodeStep { pool, entries } => entries.iter().flat_map(|e| e.expand(*pool)).collect(),
            op => vec![op.clone()],
        }
    }
}

/// A memory log with every decode step expanded into the records it stands for (borrowed when
/// there is none): what `confirm` and the other log readers walk.
pub fn expand_log(mem: &[(u64, MemOp)]) -> std::borrow::Cow<'_, [(u64, MemOp)]> {
    if !mem.iter().any(|(_, op)| matches!(op, MemOp::DecodeStep { .. })) {
        return std::borrow::Cow::Borrowed(mem);
    }
    let mut out = Vec::with_capacity(mem.len());
    for (t, op) in mem {
        match op {
            MemOp::DecodeStep { pool, entries } => {
                out.extend(entries.iter().flat_map(|e| e.expand(*pool)).map(|o| (*t, o)))
            }
            op => out.push((*t, op.clone())),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The same for a whole trace (pictures, tests).
pub fn expand_records(records: &[(Instant, TraceRecord)]) -> std::borrow::Cow<'_, [(Instant, TraceRecord)]> {
    if !records.iter().any(|(_, r)| matches!(r, TraceRecord::Mem(MemOp::DecodeStep { .. }))) {
        return std::borrow::Cow::Borrowed(records);
    }
    let mut out = Vec::with_capacity(records.len());
    for (t, rec) in records {
        match rec {
            TraceRecord::Mem(MemOp::DecodeStep { pool, entries }) => {
                out.extend(entries.iter().flat_map(|e| e.expand(*pool)).map(|o| (*t, TraceRecord::Mem(o))))
            }
            rec => out.push((*t, rec.clone())),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One line of the run's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceRecord {
    Event(Ev),
    Mem(MemOp),
    Response { r: RequestId, status: u16, tokens: u64 },
}

/// The byte-for-byte encoding of trace records that the trace hash is defined over. Each
/// function appends one value; the layout is ARCHITECTURE.md's table, and a change to it is a
/// change of every trace hash (and of `tracefile::FORMAT`).
pub mod encode {
    use super::*;

    /// Record kind bytes.
    pub const EVENT: u8 = b'E';
    pub const MEM: u8 = b'M';
    pub const RESPONSE: u8 = b'R';

    /// Where a record's bytes go: the trace's buffer, or a fixed `Head` for a record with no
    /// list (written whole, then appended to the buffer at once).
    trait Out {
        fn put(&mut self, x: &[u8]);
        fn byte(&mut self, v: u8);
    }

    impl Out for Vec<u8> {
        #[inline(always)]
        fn put(&mut self, x: &[u8]) {
            self.extend_from_slice(x);
        }
        #[inline(always)]
        fn byte(&mut self, v: u8) {
            self.push(v);
        }
    }

    /// A record's bytes laid out in place. Its fields' offsets are constants of each variant, so
    /// writing them is a few stores and the record is one append: an event's fields appended one
    /// by one each checked the buffer's room (callgrind, `fuzz-small`: about 66 instructions an
    /// event in `event`).
    struct Head {
        x: [u8; 48],
        n: usize,
    }

    impl Out for Head {
        #[inline(always)]
        fn put(&mut self, x: &[u8]) {
            self.x[self.n..self.n + x.len()].copy_from_slice(x);
            self.n += x.len();
        }
        #[inline(always)]
        fn byte(&mut self, v: u8) {
            self.x[self.n] = v;
            self.n += 1;
        }
    }

    #[inline(always)]
    fn u16_(b: &mut impl Out, v: u16) {
        b.put(&v.to_le_bytes());
    }
    #[inline(always)]
    fn u32_(b: &mut impl Out, v: u32) {
        b.put(&v.to_le_bytes());
    }
    #[inline(always)]
    fn u64_(b: &mut impl Out, v: u64) {
        b.put(&v.to_le_bytes());
    }
    #[inline(always)]
    fn bool_(b: &mut impl Out, v: bool) {
        b.byte(u8::from(v));
    }
    #[inline(always)]
    fn role(b: &mut impl Out, r: Role) {
        b.byte(role_byte(r));
    }
    #[inline]
    fn role_byte(r: Role) -> u8 {
        match r {
            Role::Prefill => 0,
            Role::Decode => 1,
        }
    }
    /// A node (and so a pool): its role byte, then its index as `u16`.
    #[inline(always)]
    fn node(b: &mut impl Out, n: NodeId) {
        role(b, n.role);
        u16_(b, n.index);
    }
    /// A list's length as `u32` (lists in a record are far shorter than 2^32 entries).
    #[inline]
    fn len(b: &mut impl Out, n: usize) {
        u32_(b, u32::try_from(n).expect("a trace list shorter than 2^32"));
    }
    fn runs(b: &mut impl Out, rs: &[Run]) {
        len(b, rs.len());
        for r in rs {
            u32_(b, r.first);
            u32_(b, r.count);
        }
    }
    #[inline(always)]
    fn timer(b: &mut impl Out, t: TimeoutKind) {
        b.byte(match t {
            TimeoutKind::Bootstrap => 0,
            TimeoutKind::Waiting => 1,
            TimeoutKind::DeferredRelease => 2,
            TimeoutKind::SourceLease => 3,
        });
    }

    /// `at`, `EVENT`, the event's variant byte, its fields in declaration order.
    pub fn event(b: &mut Vec<u8>, at: Instant, ev: &Ev) {
        if let Ev::DstInfo { .. } = ev {
            // The one event with a list.
            return event_into(b, at, ev);
        }
        let mut h = Head { x: [0; 48], n: 0 };
        event_into(&mut h, at, ev);
        b.extend_from_slice(&h.x[..h.n]);
    }

    #[inline(always)]
    fn event_into(b: &mut impl Out, at: Instant, ev: &Ev) {
        u64_(b, at.0);
        b.byte(EVENT);
        match ev {
            Ev::Arrive { r } => {
                b.byte(0);
                u32_(b, r.0);
            }
            Ev::ClientAbort { r } => {
                b.byte(1);
                u32_(b, r.0);
            }
            Ev::LegArrive { r, role: ro } => {
                b.byte(2);
                u32_(b, r.0);
                role(b, *ro);
            }
            Ev::Tick { node: n } => {
                b.byte(3);
                node(b, *n);
            }
            Ev::ForwardDone { node: n, epoch } => {
                b.byte(4);
                u16_(b, n.0);
                u32_(b, *epoch);
            }
            Ev::StepDone { node: n, epoch } => {
                b.byte(5);
                u16_(b, n.0);
                u32_(b, *epoch);
            }
            Ev::DstInfo { r, prefill, dst } => {
                b.byte(6);
                u32_(b, r.0);
                u16_(b, prefill.0);
                u16_(b, dst.decode.0);
                u32_(b, dst.epoch);
                runs(b, &dst.pages);
                u32_(b, dst.meta_slot);
            }
            Ev::TransferRead { job, batch } => {
                b.byte(18);
                u32_(b, job.0);
                u32_(b, *batch);
            }
            Ev::TransferLand { job, batch } => {
                b.byte(7);
                u32_(b, job.0);
                u32_(b, *batch);
            }
            Ev::TransferDone { job, ok } => {
                b.byte(8);
                u32_(b, job.0);
                bool_(b, *ok);
            }
            Ev::MetaLand { r, decode, epoch, slot, room } => {
                b.byte(9);
                u32_(b, r.0);
                u16_(b, decode.0);
                u32_(b, *epoch);
                u32_(b, *slot);
                u64_(b, *room);
            }
            Ev::Status { r, decode, epoch, ok, pages, prefix } => {
                b.byte(10);
                u32_(b, r.0);
                u16_(b, decode.0);
                u32_(b, *epoch);
                bool_(b, *ok);
                u64_(b, *pages);
                u64_(b, *prefix);
            }
            Ev::LegResult { r, role: ro, status } => {
                b.byte(11);
                u32_(b, r.0);
                role(b, *ro);
                u16_(b, *status);
            }
            Ev::AbortAt { r, role: ro, status, from_decode } => {
                b.byte(12);
                u32_(b, r.0);
                role(b, *ro);
                u16_(b, *status);
                bool_(b, *from_decode);
            }
            Ev::AbortAck { r, decode, epoch } => {
                b.byte(13);
                u32_(b, r.0);
                u16_(b, decode.0);
                u32_(b, *epoch);
            }
            Ev::Timeout { r, timer: t, node: n, epoch } => {
                b.byte(14);
                u32_(b, r.0);
                timer(b, *t);
                node(b, *n);
                u32_(b, *epoch);
            }
            Ev::Crash { node: n, restart_after_ms } => {
                b.byte(15);
                node(b, *n);
                u64_(b, *restart_after_ms);
            }
            Ev::Restart { node: n } => {
                b.byte(16);
                node(b, *n);
            }
            Ev::HeartbeatLost { prefill, epoch } => {
                b.byte(17);
                u16_(b, prefill.0);
                u32_(b, *epoch);
            }
        }
    }

    /// `at`, `MEM`, the operation's variant byte, its fields in declaration order.
    pub fn mem(b: &mut Vec<u8>, at: Instant, op: &MemOp) {
        u64_(b, at.0);
        b.push(MEM);
        match op {
            MemOp::Reset { pool, pages, page_size } => {
                b.push(0);
                node(b, *pool);
                u32_(b, *pages);
                u64_(b, *page_size);
            }
            MemOp::Alloc { pool, r, pages } => page_list_body(b, PageListOp::Alloc, *pool, *r, pages),
            MemOp::Free { pool, r, pages } => page_list_body(b, PageListOp::Free, *pool, *r, pages),
            MemOp::Write { pool, r, tenant, slots } => {
                b.push(3);
                node(b, *pool);
                u32_(b, r.0);
                u32_(b, tenant.0);
                len(b, slots.len());
                for &(slot, pos, n) in slots {
                    u64_(b, slot);
                    u64_(b, pos);
                    u64_(b, n);
                }
            }
            MemOp::Copy { src, dst, r, pages } => {
                b.push(4);
                node(b, *src);
                node(b, *dst);
                u32_(b, r.0);
                len(b, pages.len());
                for &(s, d, n) in pages {
                    u32_(b, s);
                    u32_(b, d);
                    u32_(b, n);
                }
            }
            MemOp::Read { pool, r, tenant, seq_len } => {
                b.push(5);
                node(b, *pool);
                u32_(b, r.0);
                u32_(b, tenant.0);
                u64_(b, *seq_len);
            }
            MemOp::DecodeStep { pool, entries } => decode_step(b, at, *pool, entries, false),
            MemOp::Send { src, r, wire, pages } => {
                b.push(7);
                node(b, *src);
                u32_(b, r.0);
                u64_(b, *wire);
                runs(b, pages);
            }
            MemOp::Land { src, dst, r, wire, pages } => {
                b.push(8);
                node(b, *src);
                node(b, *dst);
                u32_(b, r.0);
                u64_(b, *wire);
                runs(b, pages);
            }
            MemOp::Lock { pool, r, pages } => page_list_body(b, PageListOp::Lock, *pool, *r, pages),
        }
    }

    /// The body of an `Alloc`, `Free` or `Lock` (after `at` and the kind byte).
    #[inline]
    fn page_list_body(b: &mut Vec<u8>, op: PageListOp, pool: PoolId, r: RequestId, pages: &[Run]) {
        b.push(op.variant());
        node(b, pool);
        u32_(b, r.0);
        runs(b, pages);
    }

    /// `mem` of `op.with(pool, r, pages)`, from borrowed pages.
    pub fn page_list(b: &mut Vec<u8>, at: Instant, op: PageListOp, pool: PoolId, r: RequestId, pages: &[Run]) {
        u64_(b, at.0);
        b.push(MEM);
        page_list_body(b, op, pool, r, pages);
    }

    /// A decode step (variant 6): pool, a `u32` count, then per entry r u32, tenant u32,
    /// seq_len u64, a page flag byte (1: a page was allocated, and its number follows as u32),
    /// slot u64. `with_head`: `at` and the kind byte are written first (the tracer's own path).
    pub fn decode_step(b: &mut Vec<u8>, at: Instant, pool: PoolId, entries: &[DecodeEntry], with_head: bool) {
        let count_at = decode_step_head(b, at, pool, with_head);
        b.reserve(entries.len() * 29);
        for e in entries {
            decode_entry(b, e);
        }
        set_count(b, count_at, entries.len());
    }

    /// A decode step's head, its entry count left at 0: where that count is, for `set_count`
    /// (the tracer writes a step's entries as they come, then the count).
    /// The head is laid out in a fixed buffer and appended once (the same bytes as writing its
    /// fields one by one: `at`, the kind byte, variant 6, the pool's role byte and index, a zero
    /// count), as `decode_entry` does: a step record per decode step made it a cost per step.
    #[inline]
    pub fn decode_step_head(b: &mut Vec<u8>, at: Instant, pool: PoolId, with_head: bool) -> usize {
        let mut x = [0u8; 17];
        x[0..8].copy_from_slice(&at.0.to_le_bytes());
        x[8] = MEM;
        x[9] = 6;
        x[10] = role_byte(pool.role);
        x[11..13].copy_from_slice(&pool.index.to_le_bytes());
        // x[13..17]: the entry count, 0 until `set_count`.
        let head = if with_head { &x[..] } else { &x[9..] };
        b.extend_from_slice(head);
        b.len() - 4
    }

    /// Writes a list's `u32` count at `at` (`decode_step_head`).
    pub fn set_count(b: &mut [u8], at: usize, n: usize) {
        let n = u32::try_from(n).expect("a trace list shorter than 2^32");
        b[at..at + 4].copy_from_slice(&n.to_le_bytes());
    }

    /// One decode-step entry, laid out in a fixed buffer and appended once (the same bytes as
    /// writing its fields one by one: r, tenant, seq_len, the page's tag and value, slot).
    #[inline]
    pub fn decode_entry(b: &mut Vec<u8>, e: &DecodeEntry) {
        let mut x = [0u8; 33];
        x[0..4].copy_from_slice(&e.r.0.to_le_bytes());
        x[4..8].copy_from_slice(&e.tenant.0.to_le_bytes());
        x[8..16].copy_from_slice(&e.seq_len.to_le_bytes());
        // Two fixed lengths (not one computed length), so each append is an inlined copy.
        match e.page {
            Some(p) => {
                x[16] = 1;
                x[17..21].copy_from_slice(&p.to_le_bytes());
                x[21..29].copy_from_slice(&e.slot.to_le_bytes());
                b.extend_from_slice(&x[..29]);
            }
            None => {
                x[17..25].copy_from_slice(&e.slot.to_le_bytes());
                b.extend_from_slice(&x[..25]);
            }
        }
    }

    /// Any record.
    pub fn record(b: &mut Vec<u8>, at: Instant, rec: &TraceRecord) {
        match rec {
            TraceRecord::Event(ev) => event(b, at, ev),
            TraceRecord::Mem(op) => mem(b, at, op),
            TraceRecord::Response { r, status, tokens } => {
                u64_(b, at.0);
                b.push(RESPONSE);
                u32_(b, r.0);
                u16_(b, *status);
                u64_(b, *tokens);
            }
        }
    }
}

/// Receives every record with its virtual time.
pub trait TraceSink {
    fn record(&mut self, at: Instant, rec: &TraceRecord);
}

/// Encoded bytes are handed to the hash in chunks of about this size (the hash of the
/// concatenation does not depend on where it is cut; fewer, larger updates are faster).
const HASH_CHUNK: usize = 16 * 1024;

/// Hashes every record; forwards to a sink when one is attached.
pub struct Tracer {
    hasher: xxhash_rust::xxh3::Xxh3,
    /// Encoded records not yet handed to `hasher`.
    buf: Vec<u8>,
    pub records: u64,
    sink: Option<Box<dyn TraceSink>>,
    /// Records kept in memory when built with `Tracer::collecting` (pictures, tests).
    pub collected: Option<Vec<(Instant, TraceRecord)>>,
    /// The decode step being traced (its time and pool), written as one record when any other
    /// record comes or `end_decode_step` is called. With a sink or a collector `decode_entry`
    /// appends to `step_entries`; without (every run but a traced one) the entries are encoded
    /// into `buf` as they come, after the step's head, and `step_count_at` is where the step's
    /// entry count goes once it is known (`step_len`). `step_direct`: which of the two the open
    /// step does, fixed when it opens (a collector taken meanwhile cannot split a step).
    step: Option<(Instant, PoolId)>,
    step_entries: Vec<DecodeEntry>,
    step_direct: bool,
    step_count_at: usize,
    step_len: usize,
}

impl Tracer {
    pub fn new(sink: Option<Box<dyn TraceSink>>) -> Tracer {
        Tracer {
            hasher: xxhash_rust::xxh3::Xxh3::new(),
            buf: Vec::with_capacity(HASH_CHUNK + 256),
            records: 0,
            sink,
            collected: None,
            step: None,
            step_entries: Vec::new(),
            step_direct: false,
            step_count_at: 0,
            step_len: 0,
        }
    }

    /// Whether records are only hashed (no sink, no collector): then a decode step's entries
    /// are encoded as they come.
    #[inline]
    fn hash_only(&self) -> bool {
        self.sink.is_none() && self.collected.is_none()
    }

    /// A tracer that also keeps every record in memory.
    pub fn collecting(sink: Option<Box<dyn TraceSink>>) -> Tracer {
        Tracer { collected: Some(Vec::new()), ..Tracer::new(sink) }
    }

    #[inline]
    fn flush_if_full(&mut self) {
        if self.buf.len() >= HASH_CHUNK {
            self.flush();
        }
    }

    /// Hands `buf` to the hash. Out of line, as are the collecting paths below: inlined into the
    /// per-step `end_decode_step`, the hash's streaming update made every call save and restore
    /// the registers it needs (callgrind, the incident: `end_decode_step`'s own instructions
    /// 6.98 M with it inlined, 3.10 M without).
    #[cold]
    #[inline(never)]
    fn flush(&mut self) {
        self.hasher.update(&self.buf);
        self.buf.clear();
    }

    /// Adds one request's token to the decode step of `pool` at `at` (a new step record when the
    /// open one is of another time or pool).
    /// Inlined into the decode step's loop (one call per request-token saved); opening a step
    /// record is `open_decode_step`'s, once per step.
    #[inline(always)]
    pub fn decode_entry(&mut self, at: Instant, pool: PoolId, e: DecodeEntry) {
        self.enter_decode_step(at, pool);
        self.decode_entry_in_step(e);
    }

    /// Opens the decode step record for `pool` at `at` unless it is the open one (a step's loop
    /// calls this once, then `decode_entry_in_step` for its tokens until another record may
    /// have ended it).
    #[inline(always)]
    pub fn enter_decode_step(&mut self, at: Instant, pool: PoolId) {
        if self.step != Some((at, pool)) {
            self.open_decode_step(at, pool);
        }
    }

    /// `decode_entry` in the step record `enter_decode_step` opened (nothing traced since).
    #[inline(always)]
    pub fn decode_entry_in_step(&mut self, e: DecodeEntry) {
        debug_assert!(self.step.is_some(), "a step record is open");
        if self.step_direct {
            encode::decode_entry(&mut self.buf, &e);
            self.step_len += 1;
        } else {
            self.collect_entry(e);
        }
    }

    /// Ends the open decode step record, if any, and opens one for `pool` at `at`.
    #[inline(never)]
    fn open_decode_step(&mut self, at: Instant, pool: PoolId) {
        self.end_decode_step();
        self.step = Some((at, pool));
        self.step_direct = self.hash_only();
        if self.step_direct {
            self.step_count_at = encode::decode_step_head(&mut self.buf, at, pool, true);
            self.step_len = 0;
        }
    }

    /// `decode_entry` with a sink or a collector: the entry is kept for the step's record.
    #[cold]
    #[inline(never)]
    fn collect_entry(&mut self, e: DecodeEntry) {
        self.step_entries.push(e);
    }

    /// Writes the open decode step, if any, as one `MemOp::DecodeStep` record.
    pub fn end_decode_step(&mut self) {
        let Some((at, pool)) = self.step.take() else { return };
        if self.step_direct {
            // Its head and entries are in `buf` already (`decode_entry`): only the count is left.
            encode::set_count(&mut self.buf, self.step_count_at, self.step_len);
            self.records += 1;
            self.flush_if_full();
        } else {
            self.record_collected_step(at, pool);
        }
    }

    /// `end_decode_step` with a sink or a collector: the kept entries as one record.
    #[cold]
    #[inline(never)]
    fn record_collected_step(&mut self, at: Instant, pool: PoolId) {
        let entries = std::mem::take(&mut self.step_entries);
        self.record(at, TraceRecord::Mem(MemOp::DecodeStep { pool, entries }));
    }

    /// Records a processed event without cloning it unless a sink or collector wants it.
    #[inline(always)]
    pub fn record_event(&mut self, at: Instant, ev: &Ev) {
        if self.step.is_some() {
            self.end_decode_step();
        }
        if self.sink.is_some() || self.collected.is_some() {
            self.record(at, TraceRecord::Event(ev.clone()));
            return;
        }
        encode::event(&mut self.buf, at, ev);
        self.records += 1;
        self.flush_if_full();
    }

    /// A record's part of the hash: after the open decode step, if any (`record` and
    /// `record_returning`).
    #[inline]
    fn hash_record(&mut self, at: Instant, rec: &TraceRecord) {
        if self.step.is_some() {
            self.end_decode_step();
        }
        encode::record(&mut self.buf, at, rec);
        self.records += 1;
        self.flush_if_full();
    }

    /// `record`, handing the record back when nothing keeps it (no sink, no collector: it is
    /// only hashed), so a caller can reuse the buffers it owns. `None` when it was kept.
    #[inline]
    pub fn record_returning(&mut self, at: Instant, rec: TraceRecord) -> Option<TraceRecord> {
        if !self.hash_only() {
            self.record(at, rec);
            return None;
        }
        self.hash_record(at, &rec);
        Some(rec)
    }

    /// `record` of `TraceRecord::Mem(op.with(pool, r, pages))`, the pages copied only when a
    /// sink or a collector keeps the record: the same bytes hashed. Its hashing steps are
    /// `hash_record`'s and `record_event`'s, written out in each (one helper taking the encoder
    /// as a closure cost 0.3–0.7% more instructions on every bench row, callgrind).
    #[inline]
    pub fn record_page_list(&mut self, at: Instant, op: PageListOp, pool: PoolId, r: RequestId, pages: &[Run]) {
        if !self.hash_only() {
            return self.record(at, TraceRecord::Mem(op.with(pool, r, pages.to_vec())));
        }
        if self.step.is_some() {
            self.end_decode_step();
        }
        encode::page_list(&mut self.buf, at, op, pool, r, pages);
        self.records += 1;
        self.flush_if_full();
    }

    pub fn record(&mut self, at: Instant, rec: TraceRecord) {
        self.hash_record(at, &rec);
        if let Some(s) = self.sink.as_mut() {
            s.record(at, &rec);
        }
        if let Some(c) = self.collected.as_mut() {
            c.push((at, rec));
        }
    }

    /// The number of records traced so far, a decode step still open counted (the place of a
    /// `lifecycle::PhaseRecord` noted now: after these records, before the next).
    #[inline]
    pub fn position(&self) -> u64 {
        self.records + u64::from(self.step.is_some())
    }

    /// XXH3-64 (seed 0) of every record's encoding so far, as 16 lowercase hex digits.
    pub fn hash_hex(&self) -> String {
        let mut h = self.hasher.clone();
        // A decode step still open is part of the trace so far.
        match self.step {
            Some(_) if self.step_direct => {
                // Its bytes end `buf`, all but its entry count.
                let mut b = self.buf.clone();
                encode::set_count(&mut b, self.step_count_at, self.step_len);
                h.update(&b);
            }
            Some((at, pool)) => {
                h.update(&self.buf);
                let mut b = Vec::new();
                encode::decode_step(&mut b, at, pool, &self.step_entries, true);
                h.update(&b);
            }
            None => h.update(&self.buf),
        }
        format!("{:016x}", h.digest())
    }

    pub fn take_sink(&mut self) -> Option<Box<dyn TraceSink>> {
        self.end_decode_step();
        self.sink.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::DstInfo;
    use crate::types::{DecodeIdx, PrefillIdx};

    const P0: NodeId = NodeId { role: Role::Prefill, index: 0 };
    const D1: NodeId = NodeId { role: Role::Decode, index: 1 };

    /// A small fixed sequence covering every list kind, and the bytes ARCHITECTURE.md's table
    /// says it encodes to, written out by hand.
    fn fixed() -> (Vec<(Instant, TraceRecord)>, Vec<u8>) {
        let recs = vec![
            (Instant(1), TraceRecord::Event(Ev::Arrive { r: RequestId(7) })),
            (Instant(2), TraceRecord::Event(Ev::Tick { node: D1 })),
            (
                Instant(3),
                TraceRecord::Event(Ev::DstInfo {
                    r: RequestId(7),
                    prefill: PrefillIdx(0),
                    dst: Box::new(DstInfo {
                        decode: DecodeIdx(1),
                        epoch: 2,
                        pages: vec![Run { first: 5, count: 3 }],
                        meta_slot: 9,
                    }),
                }),
            ),
            (
                Instant(4),
                TraceRecord::Mem(MemOp::Write {
                    pool: P0,
                    r: RequestId(7),
                    tenant: TenantId(2),
                    slots: vec![(80, 0, 16)],
                }),
            ),
            (Instant(5), TraceRecord::Response { r: RequestId(7), status: 200, tokens: 1 }),
            (
                Instant(6),
                TraceRecord::Mem(MemOp::DecodeStep {
                    pool: D1,
                    entries: vec![
                        DecodeEntry { r: RequestId(7), tenant: TenantId(2), seq_len: 17, page: Some(4), slot: 64 },
                        DecodeEntry { r: RequestId(8), tenant: TenantId(3), seq_len: 5, page: None, slot: 21 },
                    ],
                }),
            ),
        ];
        #[rustfmt::skip]
        let bytes: Vec<u8> = [
            // t=1, event, Arrive(0), r=7
            &[1u8, 0, 0, 0, 0, 0, 0, 0][..], &[b'E', 0], &[7, 0, 0, 0],
            // t=2, event, Tick(3), node decode(1) index 1
            &[2, 0, 0, 0, 0, 0, 0, 0], &[b'E', 3], &[1, 1, 0],
            // t=3, event, DstInfo(6), r=7, prefill=0, decode=1, epoch=2, 1 run (5, 3), meta_slot=9
            &[3, 0, 0, 0, 0, 0, 0, 0], &[b'E', 6], &[7, 0, 0, 0], &[0, 0], &[1, 0], &[2, 0, 0, 0],
            &[1, 0, 0, 0], &[5, 0, 0, 0], &[3, 0, 0, 0], &[9, 0, 0, 0],
            // t=4, mem, Write(3), pool prefill(0) index 0, r=7, tenant=2, 1 slot run (80, 0, 16)
            &[4, 0, 0, 0, 0, 0, 0, 0], &[b'M', 3], &[0, 0, 0], &[7, 0, 0, 0], &[2, 0, 0, 0],
            &[1, 0, 0, 0], &[80, 0, 0, 0, 0, 0, 0, 0], &[0; 8], &[16, 0, 0, 0, 0, 0, 0, 0],
            // t=5, response, r=7, status=200, tokens=1
            &[5, 0, 0, 0, 0, 0, 0, 0], b"R", &[7, 0, 0, 0], &[200, 0], &[1, 0, 0, 0, 0, 0, 0, 0],
            // t=6, mem, DecodeStep(6), pool decode(1) index 1, 2 entries:
            &[6, 0, 0, 0, 0, 0, 0, 0], &[b'M', 6], &[1, 1, 0], &[2, 0, 0, 0],
            // r=7, tenant=2, seq_len=17, page flag 1, page 4, slot 64
            &[7, 0, 0, 0], &[2, 0, 0, 0], &[17, 0, 0, 0, 0, 0, 0, 0], &[1], &[4, 0, 0, 0], &[64, 0, 0, 0, 0, 0, 0, 0],
            // r=8, tenant=3, seq_len=5, page flag 0, slot 21
            &[8, 0, 0, 0], &[3, 0, 0, 0], &[5, 0, 0, 0, 0, 0, 0, 0], &[0], &[21, 0, 0, 0, 0, 0, 0, 0],
        ]
        .concat();
        (recs, bytes)
    }

    #[test]
    fn records_encode_to_the_documented_bytes() {
        let (recs, bytes) = fixed();
        let mut got = Vec::new();
        for (at, rec) in &recs {
            encode::record(&mut got, *at, rec);
        }
        assert_eq!(got, bytes);
    }

    #[test]
    fn the_trace_hash_is_xxh3_64_of_the_encoding() {
        let (recs, bytes) = fixed();
        let mut t = Tracer::new(None);
        for (at, rec) in recs {
            match rec {
                TraceRecord::Event(ev) => t.record_event(at, &ev),
                other => t.record(at, other),
            }
        }
        assert_eq!(t.records, 6);
        let spec = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes));
        assert_eq!(t.hash_hex(), spec);
        // Pinned: XXH3-64 of these 208 bytes is a property of the XXH3 specification, so a
        // change here means the encoding or the hash function changed (cross-checked with
        // Python's `xxhash` 3.x binding of the C reference: `xxh3_64_hexdigest`).
        assert_eq!(bytes.len(), 208);
        assert_eq!(spec, "ec5432b98a166dec");
    }

    /// A page list traced from borrowed pages (`record_page_list`) is the record `record` traces
    /// for the same operation, hashed and kept alike, and closes an open decode step first.
    #[test]
    fn a_borrowed_page_list_traces_as_its_mem_op() {
        let pages = [Run { first: 3, count: 2 }, Run { first: 9, count: 1 }];
        let entry = DecodeEntry { r: RequestId(4), tenant: TenantId(1), seq_len: 17, page: None, slot: 70 };
        for op in [PageListOp::Alloc, PageListOp::Free, PageListOp::Lock] {
            let (mut by_op, mut borrowed) = (Tracer::collecting(None), Tracer::new(None));
            let mut hashed = Tracer::new(None);
            for t in [&mut by_op, &mut borrowed, &mut hashed] {
                t.decode_entry(Instant(5), D1, entry);
            }
            by_op.record(Instant(6), TraceRecord::Mem(op.with(P0, RequestId(4), pages.to_vec())));
            borrowed.record_page_list(Instant(6), op, P0, RequestId(4), &pages);
            hashed.record(Instant(6), TraceRecord::Mem(op.with(P0, RequestId(4), pages.to_vec())));
            assert_eq!(borrowed.hash_hex(), hashed.hash_hex(), "{op:?}");
            assert_eq!(borrowed.hash_hex(), by_op.hash_hex(), "{op:?}");
            assert_eq!((borrowed.records, by_op.records), (2, 2), "{op:?}");
            // With a collector the record is kept, as `record` keeps it.
            let mut kept = Tracer::collecting(None);
            kept.record_page_list(Instant(6), op, P0, RequestId(4), &pages);
            let got = kept.collected.as_ref().map(|c| c.last().cloned());
            assert_eq!(got, Some(Some((Instant(6), TraceRecord::Mem(op.with(P0, RequestId(4), pages.to_vec()))))));
        }
    }

    #[test]
    fn decode_entries_hash_as_the_decode_step_record_they_form() {
        // The tracer's own path (entries appended, the step written when another record comes or
        // the step ends) gives the bytes of the `DecodeStep` record, and a change of pool or time
        // starts a new step.
        let e = |r: u32, seq_len: u64, page: Option<u32>| DecodeEntry {
            r: RequestId(r),
            tenant: TenantId(r % 3),
            seq_len,
            page,
            slot: 100 + u64::from(r),
        };
        let d0 = NodeId { role: Role::Decode, index: 0 };
        let mut fast = Tracer::new(None);
        let mut slow = Tracer::collecting(None);
        for t in [&mut fast, &mut slow] {
            t.decode_entry(Instant(5), D1, e(1, 16, Some(9)));
            t.decode_entry(Instant(5), D1, e(2, 7, None));
            t.decode_entry(Instant(5), d0, e(3, 7, None));
            t.record_event(Instant(5), &Ev::Tick { node: D1 });
            t.decode_entry(Instant(6), d0, e(4, 8, None));
            t.decode_entry(Instant(7), d0, e(5, 9, None));
            t.end_decode_step();
            t.end_decode_step();
        }
        assert_eq!(fast.records, 5);
        assert_eq!(fast.hash_hex(), slow.hash_hex());
        let recs = slow.collected.take().unwrap();
        let steps: Vec<usize> = recs
            .iter()
            .filter_map(|(_, r)| match r {
                TraceRecord::Mem(MemOp::DecodeStep { entries, .. }) => Some(entries.len()),
                _ => None,
            })
            .collect();
        assert_eq!(steps, [2, 1, 1, 1]);
        let mut bytes = Vec::new();
        for (at, rec) in &recs {
            encode::record(&mut bytes, *at, rec);
        }
        assert_eq!(fast.hash_hex(), format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes)));
        // A step still open is in the hash.
        let mut open = Tracer::new(None);
        open.decode_entry(Instant(5), D1, e(1, 16, Some(9)));
        let mut one = Vec::new();
        encode::decode_step(&mut one, Instant(5), D1, &[e(1, 16, Some(9))], true);
        assert_eq!(open.hash_hex(), format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&one)));
        // The same with two entries, hashed only (entries encoded as they come, the count
        // written last) and collected (entries kept, encoded at the end): the same bytes.
        let mut collected = Tracer::collecting(None);
        collected.decode_entry(Instant(5), D1, e(1, 16, Some(9)));
        for t in [&mut open, &mut collected] {
            t.decode_entry(Instant(5), D1, e(2, 40, None));
        }
        let mut two = Vec::new();
        encode::decode_step(&mut two, Instant(5), D1, &[e(1, 16, Some(9)), e(2, 40, None)], true);
        let want = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&two));
        assert_eq!((open.hash_hex(), collected.hash_hex()), (want.clone(), want));
    }

    #[test]
    fn a_decode_entry_expands_into_the_read_alloc_and_write_it_replaces() {
        let e = DecodeEntry { r: RequestId(4), tenant: TenantId(2), seq_len: 32, page: Some(11), slot: 176 };
        let ops: Vec<MemOp> = e.expand(D1).collect();
        assert_eq!(
            ops,
            [
                MemOp::Read { pool: D1, r: RequestId(4), tenant: TenantId(2), seq_len: 32 },
                MemOp::Alloc { pool: D1, r: RequestId(4), pages: vec![Run { first: 11, count: 1 }] },
                MemOp::Write { pool: D1, r: RequestId(4), tenant: TenantId(2), slots: vec![(176, 1, 32)] },
            ]
        );
        let e = DecodeEntry { page: None, slot: 177, seq_len: 33, ..e };
        let step = MemOp::DecodeStep { pool: D1, entries: vec![e, e] };
        let ops = step.expanded();
        assert_eq!(ops.len(), 4);
        assert!(matches!(ops[0], MemOp::Read { seq_len: 33, .. }) && matches!(ops[3], MemOp::Write { .. }));
        let log = vec![(1, MemOp::Reset { pool: D1, pages: 3, page_size: 16 }), (2, step)];
        let x = expand_log(&log);
        assert_eq!(x.len(), 5);
        assert!(x[1..].iter().all(|(t, _)| *t == 2));
        let plain = vec![(1, MemOp::Reset { pool: D1, pages: 3, page_size: 16 })];
        assert!(matches!(expand_log(&plain), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn the_hash_does_not_depend_on_chunking() {
        // More than one `HASH_CHUNK` of records: the streamed hash equals the one-shot hash.
        let mut t = Tracer::new(None);
        let mut all = Vec::new();
        for i in 0..5000u32 {
            let rec = TraceRecord::Mem(MemOp::Read { pool: D1, r: RequestId(i), tenant: TenantId(1), seq_len: 9 });
            encode::record(&mut all, Instant(u64::from(i)), &rec);
            t.record(Instant(u64::from(i)), rec);
        }
        assert!(all.len() > 2 * HASH_CHUNK);
        assert_eq!(t.hash_hex(), format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&all)));
    }

    /// `record_returning` hashes what `record` hashes, in order with an open decode step, and
    /// hands the record back only when nothing keeps it (`transfer::land_batch` reuses its lists).
    #[test]
    fn a_returned_record_is_hashed_as_a_kept_one() {
        let copy =
            || TraceRecord::Mem(MemOp::Copy { src: P0, dst: D1, r: RequestId(4), pages: vec![(3, 9, 2), (7, 20, 1)] });
        let entry = DecodeEntry { r: RequestId(1), tenant: TenantId(1), seq_len: 5, page: None, slot: 77 };
        let (mut returning, mut kept) = (Tracer::new(None), Tracer::collecting(None));
        for t in [&mut returning, &mut kept] {
            t.decode_entry(Instant(2), D1, entry);
        }
        let back = returning.record_returning(Instant(3), copy());
        assert_eq!(back, Some(copy()), "only hashed: handed back whole");
        assert_eq!(kept.record_returning(Instant(3), copy()), None, "collected: kept");
        assert_eq!(kept.collected.as_ref().map(Vec::len), Some(2), "the open step, then the copy");
        assert_eq!((returning.records, returning.hash_hex()), (kept.records, kept.hash_hex()));
        let mut plain = Tracer::new(None);
        plain.decode_entry(Instant(2), D1, entry);
        plain.record(Instant(3), copy());
        assert_eq!(plain.hash_hex(), returning.hash_hex());
    }
}
