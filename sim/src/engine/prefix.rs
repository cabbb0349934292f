//! The prefill radix cache's prefix index: full 512-token prompt blocks (identified by the
//! workload's block hashes, e.g. Mooncake `hash_ids`) whose KV stays in the pool after their
//! request finishes, reused by later requests with the same prefix. `prefix_cache_scope` decides
//! whether the index is shared by all tenants (`global`) or salted per tenant (`per_tenant`).
//! Reusing a block that only other tenants sent is `cross_tenant_prefix_hit`: the timing side
//! channel a missing salt opens, unless the client declared the block public
//! (`RequestSpec::public_blocks`; a Mooncake trace's shared system prompt is declared as it is
//! read, `mark_public`).
//! A block is identified by its chain — the block ids before it and its own — not by (position,
//! id): the KV of a block depends on every token before it.

use crate::check::{Kind, Violation};
use crate::config::PrefixCacheScope;
use crate::pool::{pages_in, push_run, slice_pages, Holder, Run};
use crate::trace::MemOp;
use crate::types::{DecodeIdx, PrefillIdx, RequestId, TenantId};
use crate::world::World;
use std::collections::{BTreeMap, BTreeSet};

/// Tokens per prefix block (Mooncake's block size).
pub const BLOCK_TOKENS: u64 = 512;

#[derive(Clone, Debug)]
pub struct CachedBlock {
    pub pages: Vec<Run>,
    pub tenant: TenantId,
    pub request: RequestId,
    /// Every tenant that sent this block to this node (computed it or reused it): a hit by one of
    /// them reveals nothing about the others.
    pub senders: BTreeSet<TenantId>,
    /// Requests currently using the block (never evicted while > 0).
    pub refs: u32,
    /// The request that cached it marked it public (`RequestSpec::public_blocks`): another
    /// tenant's hit on it is no side channel. Kept here, since that request may be folded away.
    pub public: bool,
    pub last_use: u64,
    /// The block before it in its chain (`None` for a chain's first block): while this block is
    /// cached, that one is not a leaf (`PrefixIndex::kids`).
    pub parent: Option<BlockKey>,
    /// Writes by requests that no longer held the pages, landed in this block while the cache
    /// held it. A request that locks the block later reads what they left, so it is late-written
    /// too (`World::prefix_take`, `World::decode_prefix_lock`).
    pub late: LateWrites,
}

/// Late writes (by requests that no longer held the pages) that landed in some pages: which kinds
/// of writer, and the pages they hit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LateWrites {
    /// A transfer acknowledged before its data was visible (`visibility_lag`).
    pub lagged: bool,
    /// A batch, not lagged, that kept writing after its synchronous call had returned on the
    /// timeout (`Req::outlived_call`: the sync-timeout-still-writing chain).
    pub timed_out: bool,
    /// A writer that outlived its pages for another reason.
    pub other: bool,
    pub pages: Vec<Run>,
    /// Those of `pages` where a late transfer copied slots never written at its source (zeros:
    /// the unwritten tail of its last page), over whatever was there. Only these pages can make
    /// a reader's uninitialized slots the late write's; elsewhere a late write leaves written
    /// slots, so unwritten ones there are the reader's own (e.g. its lagged batch).
    pub zeroed: Vec<Run>,
}

impl LateWrites {
    /// One late write into `pages`, by a lagged transfer, else by a batch that outlived its
    /// timed-out call (`timed_out`), else by another writer that outlived its pages.
    pub fn new(lagged: bool, timed_out: bool, pages: Vec<Run>) -> LateWrites {
        let timed_out = timed_out && !lagged;
        LateWrites { lagged, timed_out, other: !lagged && !timed_out, pages, zeroed: Vec::new() }
    }

    /// The same, with the pages among `zeros` where the write copied zeros.
    pub fn with_zeros(mut self, zeros: &[Run]) -> LateWrites {
        self.zeroed = crate::pool::runs_intersect(&self.pages, zeros);
        self
    }

    pub fn any(&self) -> bool {
        self.lagged || self.timed_out || self.other
    }

    /// Adds `o`'s writers and pages.
    pub fn add(&mut self, o: &LateWrites) {
        self.lagged |= o.lagged;
        self.timed_out |= o.timed_out;
        self.other |= o.other;
        self.pages.extend_from_slice(&o.pages);
        self.zeroed.extend_from_slice(&o.zeroed);
    }
}

/// Key: (salt, position, chain); the salt is 0 under `global`, tenant + 1 under `per_tenant`; the
/// chain identifies the block with every block before it (`chain_ids`).
pub type BlockKey = (u64, u32, u64);

/// The chain identity of each block of a prompt: block `i`'s is a hash of block `i - 1`'s chain
/// identity, `i` and its own id, so the same id after a different prefix is another block.
pub fn chain_ids(blocks: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut prev = 0u64;
    for (i, b) in blocks.iter().enumerate() {
        let mut h = crate::types::StableHasher::default();
        std::hash::Hash::hash(&(prev, i as u64, *b), &mut h);
        prev = std::hash::Hasher::finish(&h);
        out.push(prev);
    }
    out
}

#[derive(Clone, Debug, Default)]
pub struct PrefixIndex {
    pub blocks: BTreeMap<BlockKey, CachedBlock>,
    /// Least recently used first: (last use, key).
    lru: BTreeSet<(u64, BlockKey)>,
    /// How many cached blocks follow each key in their chain (`CachedBlock::parent`), counted
    /// whether or not the key itself is cached (a parent may be indexed after its child, e.g.
    /// after a crash cleared a borrower's blocks). Only a block with none is evictable.
    kids: BTreeMap<BlockKey, u32>,
    clock: u64,
}

impl PrefixIndex {
    pub fn cached_pages(&self) -> u64 {
        self.blocks.values().map(|b| pages_in(&b.pages)).sum()
    }

    fn touch(&mut self, key: BlockKey) {
        self.clock += 1;
        let b = self.blocks.get_mut(&key).expect("cached");
        self.lru.remove(&(b.last_use, key));
        b.last_use = self.clock;
        self.lru.insert((self.clock, key));
    }

    /// The next tick of the index's clock (a plain cache entry's age, `World::evict_cache_for`).
    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Refreshes the indexed blocks among `keys`, in their order (a request's chain: its first
    /// block ends oldest).
    fn touch_indexed(&mut self, keys: &[BlockKey]) {
        for key in keys {
            if self.blocks.contains_key(key) {
                self.touch(*key);
            }
        }
    }

    /// The least recently used leaf nobody is using: (last use, key). Only a chain's last cached
    /// block is evictable, as in both engines: sglang's radix tree evicts leaves, and a parent
    /// joins the heap once its last child is gone (0.5.22 wheel, `mem_cache/radix_cache.py`
    /// `RadixCache.evict` over `evictable_leaves`); vLLM frees a request's blocks tail first onto
    /// the free queue's tail (`v1/core/block_pool.py` `free_blocks` of the reversed block list,
    /// `kv_cache_manager.py` `free`), and a parent cannot be free while a child is in use, so its
    /// LRU queue also reaches a chain's child before its parent. Before, the model evicted the
    /// oldest unused block, which was a chain's first (a hit touches blocks in chain order), and
    /// the later blocks stayed cached but unreachable.
    fn lru_unused(&self) -> Option<(u64, BlockKey)> {
        self.lru.iter().find(|(_, k)| self.blocks[k].refs == 0 && !self.kids.contains_key(k)).copied()
    }

    /// Pages of the blocks nobody is using: what evicting could free. Every such block is
    /// evictable in turn (leaves first): a request locks the chain it matched from its first
    /// block, so a block in use has no unused ancestor, and an unused block no used descendant.
    pub fn unused_pages(&self) -> u64 {
        self.blocks.values().filter(|b| b.refs == 0).map(|b| pages_in(&b.pages)).sum()
    }

    /// The index's own invariant behind `unused_pages`: a block in use has its cached parent in
    /// use too (a request locks the chain it matched from its first block), so every unused
    /// block can be evicted, leaves first.
    /// `node` names the node in a failure's message (a `Display`, formatted only on failure: the
    /// checked campaign runs call this after every event).
    pub fn invariants(&self, node: &dyn std::fmt::Display) {
        for (k, b) in self.blocks.iter().filter(|(_, b)| b.refs > 0) {
            if let Some(p) = b.parent.and_then(|p| self.blocks.get(&p)) {
                assert!(p.refs > 0, "{node}: block {k:?} in use under an unused parent");
            }
        }
    }

    /// The last use of the least recently used block nobody is using.
    pub fn oldest_evictable(&self) -> Option<u64> {
        self.lru_unused().map(|(t, _)| t)
    }

    /// The least recently used block nobody is using, removed from the index.
    pub fn evict_one(&mut self) -> Option<CachedBlock> {
        let (_, key) = self.lru_unused()?;
        let b = self.blocks.remove(&key).expect("indexed");
        self.lru.remove(&(b.last_use, key));
        if let Some(p) = b.parent {
            let n = self.kids.get_mut(&p).expect("counted");
            *n -= 1;
            if *n == 0 {
                self.kids.remove(&p);
            }
        }
        Some(b)
    }

    pub fn clear(&mut self) {
        *self = PrefixIndex::default();
    }

    /// A late write (`lagged`: by a transfer whose data became visible after its acknowledgement;
    /// `timed_out`: by a batch that outlived its timed-out call) landed in `runs`: every block with
    /// a page among them remembers it, and which writer it was.
    pub fn mark_late_written(&mut self, runs: &[Run], lagged: bool, timed_out: bool, zeros: &[Run]) {
        for b in self.blocks.values_mut().filter(|b| crate::pool::runs_overlap(&b.pages, runs)) {
            let late = LateWrites::new(lagged, timed_out, crate::pool::runs_intersect(&b.pages, runs));
            b.late.add(&late.with_zeros(zeros));
        }
    }

    /// A request of `tenant` reuses the blocks `keys`: each block adds it to its senders, and the
    /// blocks it had never sent, unless the tenant that cached them declared them public, are a
    /// `cross_tenant_prefix_hit`: their tokens by cacher tenant, and the first such block's
    /// cacher (both radix caches: `World::prefix_take`, `World::decode_prefix_commit`). Public is
    /// what the client declares (`RequestSpec::public_blocks`; a Mooncake trace's shared system
    /// prompt is marked when it is read, `mark_public`), which every block shared under
    /// `public_only` (salt 0) is; never a set derived from what tenants send: with two tenants
    /// every probe would make the probed block "sent by every tenant" (before the thirty-eighth
    /// session, a two-tenant hit was never reported).
    fn note_senders(
        &mut self,
        keys: &[BlockKey],
        tenant: TenantId,
        now: crate::types::Instant,
    ) -> (BTreeMap<TenantId, u64>, Option<crate::check::oracle::Culprit>) {
        let mut victims: BTreeMap<TenantId, u64> = BTreeMap::new();
        let mut culprit = None;
        for key in keys {
            let Some(b) = self.blocks.get_mut(key) else { continue };
            let sent_before = !b.senders.insert(tenant);
            if !sent_before && !b.public {
                *victims.entry(b.tenant).or_default() += BLOCK_TOKENS;
                culprit.get_or_insert(crate::check::oracle::Culprit { request: b.request, tenant: b.tenant, at: now });
            }
        }
        (victims, culprit)
    }

    /// The one insert rule of both radix caches: a released request's own full blocks (`keys`,
    /// from its first unborrowed block to its last full one) each take the next `per` pages of
    /// `own` while whole blocks of pages remain. A block already indexed under its key keeps its
    /// older pages and adds `tenant` to its senders (the request's copy goes to `Inserted::dup`);
    /// a new block is indexed with a clock tick, held by `r` (its pages go to `Inserted::cached`).
    /// The pages past the last indexed block are `Inserted::tail`. Prefill and decode differ only
    /// in what they do with the three (`World::prefix_release`, `World::decode_prefix_insert`).
    /// `public`: how many leading blocks the request marks public (`CachedBlock::public`).
    /// `parent`: the key of the block before `keys[0]` in the request's chain.
    fn insert_own(
        &mut self,
        keys: &[BlockKey],
        parent: Option<BlockKey>,
        own: &[Run],
        per: u64,
        (tenant, r, public): (TenantId, RequestId, u32),
    ) -> Inserted {
        let own_pages = pages_in(own);
        let mut out = Inserted::default();
        let mut page = 0u64;
        let mut parent = parent;
        for &key in keys {
            if page + per > own_pages {
                break;
            }
            let pages = slice_pages(own, page, per);
            if self.blocks.contains_key(&key) {
                // The insert walks the existing node and refreshes it (sglang 0.5.22
                // `unified_tree_core.py` `_insert_walk_step` → `_touch_node`; vLLM's freed copy
                // goes to the free queue's tail: recently used either way).
                self.touch(key);
                self.blocks.get_mut(&key).expect("indexed").senders.insert(tenant);
                out.dup.extend(pages);
            } else {
                self.clock += 1;
                let t = self.clock;
                out.cached.extend(pages.iter().copied());
                let senders = BTreeSet::from([tenant]);
                let block = CachedBlock {
                    pages,
                    tenant,
                    request: r,
                    senders,
                    refs: 0,
                    last_use: t,
                    parent,
                    late: LateWrites::default(),
                    public: key.1 < public,
                };
                self.blocks.insert(key, block);
                self.lru.insert((t, key));
                if let Some(p) = parent {
                    *self.kids.entry(p).or_default() += 1;
                }
            }
            parent = Some(key);
            page += per;
        }
        out.tail = slice_pages(own, page, own_pages - page);
        out
    }
}

/// Where `PrefixIndex::insert_own` put a released request's own pages.
#[derive(Default)]
struct Inserted {
    /// Pages of blocks the index already held under the same key: given back by the caller.
    dup: Vec<Run>,
    /// Pages of the blocks newly indexed (now the cache's).
    cached: Vec<Run>,
    /// Pages past the last full block.
    tail: Vec<Run>,
}

/// Marks, on requests read from a trace, the leading blocks every tenant of the workload sends
/// (the operator's shared system prompt: block 0 of every Mooncake conversation request) as
/// public (`RequestSpec::public_blocks`). A property of the trace as a whole, fixed before any run.
pub fn mark_public(specs: &mut [crate::config::RequestSpec]) {
    let mut tenants: BTreeSet<u32> = BTreeSet::new();
    let mut by_block: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for r in specs.iter().filter(|r| !r.prefix_blocks.is_empty()) {
        tenants.insert(r.tenant);
        for b in chain_ids(&r.prefix_blocks) {
            by_block.entry(b).or_default().insert(r.tenant);
        }
    }
    // With two tenants a block both send is exactly what a probe of the other's prompt looks
    // like: nothing is inferred public (a trace of two tenants reported no hit on a probe). With
    // three or more, one tenant alone cannot make a block "sent by every tenant".
    if tenants.len() < 3 {
        return;
    }
    for r in specs.iter_mut() {
        let n = chain_ids(&r.prefix_blocks).iter().take_while(|b| by_block[b].len() == tenants.len()).count();
        r.public_blocks = n as u32;
    }
}

impl World {
    /// The index salt of block `pos` of a tenant's prompt (`public` leading blocks marked public):
    /// 0 where the block is shared by every tenant, tenant + 1 where it is the tenant's own.
    /// Selective sharing (`public_only`) follows SafeKV (arXiv 2508.08438: share what is not
    /// sensitive, keep the rest private); `per_tenant` is vLLM's per-request `cache_salt` with one
    /// salt per tenant (vLLM 0.19.1, `vllm/v1/core/kv_cache_utils.py`,
    /// `generate_block_hash_extra_keys`: the salt is an extra hash key of the block at token 0
    /// only, and `hash_block_tokens` hashes every later block with its parent's hash, so the whole
    /// chain is private to requests with the same salt; the model salts every position, which
    /// keys the same chains).
    fn salt(&self, tenant: TenantId, pos: usize, public: u32) -> u64 {
        match self.cfg.knobs.prefix_cache_scope {
            PrefixCacheScope::Global => 0,
            PrefixCacheScope::PerTenant => u64::from(tenant.0) + 1,
            PrefixCacheScope::PublicOnly if pos < public as usize => 0,
            PrefixCacheScope::PublicOnly => u64::from(tenant.0) + 1,
        }
    }

    /// The index keys of the request's prompt blocks `from..to` (`to` at most the chain's length).
    fn block_keys(&self, r: RequestId, from: usize, to: usize) -> Vec<BlockKey> {
        let q = &self.reqs[r.idx()];
        (from..to).map(|i| (self.salt(q.tenant(), i, q.public_blocks()), i as u32, q.chain()[i])).collect()
    }

    /// The index key of the block before block `pos` of the request's chain (`None` for the first).
    fn parent_key(&self, r: RequestId, pos: usize) -> Option<BlockKey> {
        pos.checked_sub(1).and_then(|p| self.block_keys(r, p, pos).pop())
    }

    /// The request's leading blocks found in the index (always leaving at least one token to
    /// compute), without touching them: a lookup, as sglang's and vLLM's schedulers do for every
    /// waiting request they consider (`prefix_pin` / `prefix_take` take them).
    pub(crate) fn prefix_lookup(&self, n: PrefillIdx, r: RequestId, len: u64) -> Vec<BlockKey> {
        let ps = self.page_size();
        if !BLOCK_TOKENS.is_multiple_of(ps) || self.reqs[r.idx()].prefix_blocks().is_empty() {
            return Vec::new();
        }
        let tenant = self.reqs[r.idx()].tenant();
        let public = self.reqs[r.idx()].public_blocks();
        let max_blocks = (len.saturating_sub(1) / BLOCK_TOKENS) as usize;
        let idx = self.prefill[n.at()].prefix();
        let mut keys = Vec::new();
        for (i, b) in self.reqs[r.idx()].chain().iter().take(max_blocks).enumerate() {
            let key = (self.salt(tenant, i, public), i as u32, *b);
            if !idx.blocks.contains_key(&key) {
                break;
            }
            keys.push(key);
        }
        keys
    }

    /// Pins looked-up blocks (`refs`) while the scheduler finds pages for the rest of the
    /// request, so that eviction cannot take them; `prefix_unpin` gives them back when the
    /// request does not fit after all. Nothing else about the blocks changes.
    pub(crate) fn prefix_pin(&mut self, n: PrefillIdx, keys: &[BlockKey], pin: bool) {
        let idx = self.prefill[n.at()].prefix_mut();
        for key in keys {
            let b = idx.blocks.get_mut(key).expect("looked up");
            if pin {
                b.refs += 1;
            } else {
                b.refs -= 1;
            }
        }
    }

    /// Takes the request's matched leading blocks (`prefix_lookup`, pinned by `prefix_pin`):
    /// their pages start its block table. Called when the scheduler first schedules the request
    /// (`World::prefill_start_forward`), not while it waits: sglang matches and locks a prefix
    /// when it forms the prefill batch (0.5.22 wheel, `managers/schedule_policy.py`
    /// `PrefillAdder.add_one_req` → `_commit_prefill_admission` locks `req.last_node`, once the
    /// request fits), vLLM when it allocates the request's slots (0.33.0 wheel,
    /// `v1/core/kv_cache_manager.py` `allocate_slots`: `allocate_new_computed_blocks` touches the
    /// cached blocks only after the free-block check passed). Returns the tokens reused.
    pub(crate) fn prefix_take(&mut self, n: PrefillIdx, r: RequestId, keys: Vec<BlockKey>) -> u64 {
        let tenant = self.reqs[r.idx()].tenant();
        let idx = self.prefill[n.at()].prefix_mut();
        if keys.is_empty() {
            self.reqs[r.idx()].note_prefix_match(0, None);
            return 0;
        }
        let mut table = Vec::new();
        let mut late = LateWrites::default();
        for key in &keys {
            idx.touch(*key);
            let b = idx.blocks.get_mut(key).expect("matched");
            late.add(&b.late);
            for p in &b.pages {
                push_run(&mut table, *p);
            }
        }
        let (victims, culprit) = idx.note_senders(&keys, tenant, self.now);
        let reused = keys.len() as u64 * BLOCK_TOKENS;
        let deepest = keys.last().and_then(|k| idx.blocks.get(k)).map(|b| (b.request, b.tenant));
        self.reqs[r.idx()].note_prefix_match(reused, deepest);
        // A block a late write landed in while cached: the request reads what it left.
        let pool = self.prefill[n.at()].id();
        self.reqs[r.idx()].note_late_writes(&late, pool);
        let pages = crate::pool::pages_in(&table);
        // The matched blocks' pages start its block table (the replay's reads need them).
        self.mem_page_list(crate::trace::PageListOp::Lock, pool, r, &table);
        let padded = self.cfg.knobs.prefix_hit_timing == crate::config::PrefixHitTiming::PaddedToMiss;
        let pr = self.prefill[n.at()].req_mut(r).expect("matching a queued request");
        pr.reuse_prefix(table, keys, reused, padded);
        self.record_prefix_hit(r, pool, (pages, reused), victims, culprit);
        reused
    }

    /// `cross_tenant_prefix_hit` (when `victims` is not empty: `PrefixIndex::note_senders`):
    /// request `r` reused `reused` tokens of cached blocks, `pages` pages, in `pool`, blocks only
    /// other tenants had sent there. The cause names the mechanism, a prefix cache shared without
    /// a per-tenant salt, whichever radix cache (prefill's or decode's) it was.
    fn record_prefix_hit(
        &mut self,
        r: RequestId,
        pool: crate::types::NodeId,
        (pages, reused): (u64, u64),
        victims: BTreeMap<TenantId, u64>,
        culprit: Option<crate::check::oracle::Culprit>,
    ) {
        if victims.is_empty() {
            return;
        }
        let tenant = self.reqs[r.idx()].tenant();
        let slots = victims.values().sum();
        self.oracle.record(
            Violation::new(Kind::CrossTenantPrefixHit, "global_prefix_cache", self.now)
                .request(r, tenant)
                .victims(victims.keys().copied().collect())
                .pool(pool)
                .page_count(pages)
                .slots(slots)
                .read(pages, reused)
                .culprit(culprit)
                .detail(format!(
                    "reused {} cached prefix block(s) that only other tenants had sent to this node",
                    slots / BLOCK_TOKENS
                )),
        );
    }

    /// At release: borrowed blocks are given back; the request's own full blocks join the index
    /// (pages already indexed under the same key are freed); the rest goes to the plain cache.
    /// Returns the pages that should go to the plain cache.
    pub(crate) fn prefix_release(&mut self, n: PrefillIdx, r: RequestId, pr: &crate::prefill::PReq) -> Vec<Run> {
        let ps = self.page_size();
        let borrowed_pages = pr.borrowed().len() as u64 * BLOCK_TOKENS / ps;
        let (tenant, public) = (self.reqs[r.idx()].tenant(), self.reqs[r.idx()].public_blocks());
        let chain_len = self.reqs[r.idx()].chain().len();
        let own = slice_pages(pr.pages(), borrowed_pages, pages_in(pr.pages()).saturating_sub(borrowed_pages));
        let node = &mut self.prefill[n.at()];
        for key in pr.borrowed() {
            if let Some(b) = node.prefix_mut().blocks.get_mut(key) {
                b.refs -= 1;
            }
        }
        // The release refreshes the whole path the request used, its borrowed blocks first (sglang:
        // `release_kv_cache` checkpoints, and the insert walk touches every node it passes; vLLM
        // 0.34.0 `kv_cache_manager.py` `free` puts the request's blocks on the free queue's tail).
        // Before the forty-first session a borrowed block kept the age of its last match.
        node.prefix_mut().touch_indexed(pr.borrowed());
        node.pool_mut().rehold(&own, Holder::Cache(r));
        if let Some(rf) = self.reference.as_mut() {
            rf.rehold(node.id(), &own, Holder::Cache(r));
        }
        if !BLOCK_TOKENS.is_multiple_of(ps) || chain_len == 0 {
            return own;
        }
        let full = ((pr.prefilled() / BLOCK_TOKENS) as usize).min(chain_len);
        let from = pr.borrowed().len().min(full);
        let (keys, parent) = (self.block_keys(r, from, full), self.parent_key(r, from));
        let ins =
            self.prefill[n.at()].prefix_mut().insert_own(&keys, parent, &own, BLOCK_TOKENS / ps, (tenant, r, public));
        self.carry_late_writes(self.prefill[n.at()].id(), r, &ins.cached);
        // The whole of `own` is already the cache's (reheld above): the tail goes to the plain
        // cache. The pages of blocks indexed before (a duplicate the last checkpoint could not
        // swap: one with a page already sent, or any under `own_copy`) are freed at once under
        // `tree_copy` (sglang 0.5.16 `mem_cache/radix_cache.py` `cache_finished_req` and 0.5.22
        // `_insert_cache`, called by the release's `checkpoint`: the row's slice from the protected
        // prefix to the tree's match is freed as "the duplicates that were already in the tree");
        // vLLM keeps its copy as a cached block on the free queue (`own_copy`: the plain cache).
        // Before the forty-second session they went to the plain cache on every profile.
        let mut rest = ins.tail;
        if self.cfg.knobs.prefill_checkpoint_duplicates == crate::config::CheckpointDuplicates::TreeCopy {
            if !ins.dup.is_empty() {
                let node = &mut self.prefill[n.at()];
                let bad = node.pool_mut().free(&ins.dup, Holder::Cache(r));
                assert!(bad.is_empty(), "prefill-{n}: a released duplicate's pages were not held by the cache");
                let pool = node.id();
                self.mem(MemOp::Free { pool, r, pages: ins.dup });
            }
        } else {
            rest.extend(ins.dup);
        }
        rest
    }

    /// After a forward pass of request `r` on prefill `n`: its full prompt blocks computed so far
    /// join the radix cache, locked by it, before any later request is matched (sglang 0.5.22
    /// wheel, `disaggregation/prefill.py`: `process_prefill_chunk` and, after the last chunk,
    /// `process_batch_result_disagg_prefill` call `checkpoint_disagg_prefill` →
    /// `mem_cache/common.py` `checkpoint_kv_cache` → the tree's `checkpoint`; 0.5.16
    /// `maybe_cache_unfinished_req(chunked=True)`; vLLM 0.34.0 `v1/core/kv_cache_manager.py`
    /// `allocate_slots` → `cache_blocks` as each chunk is scheduled). So a request arriving while
    /// it still chunks, or while its KV is sent, hits them; before the thirty-ninth session the
    /// model indexed a request's blocks only at its release, and missed those hits (and their
    /// `cross_tenant_prefix_hit`). A block someone else indexed meanwhile is a duplicate:
    /// `prefill_checkpoint_duplicates = tree_copy` (sglang) frees the request's copy, puts the
    /// tree's in its block table (locked, as a matched prefix is) and goes on indexing the blocks
    /// after it (`checkpoint_tree_copy`); a duplicate with a page already sent, or any duplicate
    /// under `own_copy`, ends the checkpoint there (the request keeps its copy; the rest is
    /// indexed at release, `prefix_release`). Before the forty-first session every duplicate
    /// ended it, and an sglang request kept reading and sending its own copy. Nothing under the
    /// chunk cache.
    pub(crate) fn prefix_checkpoint(&mut self, n: PrefillIdx, r: RequestId) {
        let ps = self.page_size();
        if self.cfg.knobs.prefill_cache != crate::config::PrefillCache::Radix || !BLOCK_TOKENS.is_multiple_of(ps) {
            return;
        }
        let chain_len = self.reqs[r.idx()].chain().len();
        let Some(pr) = self.prefill[n.at()].reqs().get(&r) else { return };
        let full = ((pr.prefilled() / BLOCK_TOKENS) as usize).min(chain_len);
        // Pages handed to the transfer engine: from decode's reported prefix (never sent) to
        // `sent_pages`.
        let (sent_from, sent_to) = (self.reqs[r.idx()].decode_prefix_tokens() / ps, pr.sent_pages());
        let from = pr.borrowed().len();
        if full <= from {
            return;
        }
        let tenant = self.reqs[r.idx()].tenant();
        let computed = self.block_keys(r, from, full);
        let idx = self.prefill[n.at()].prefix_mut();
        // A block someone else indexed meanwhile was computed by this request too: its tenant
        // sent it (as `insert_own` notes for a duplicate at release). Without this, a request of
        // the same tenant matched before the release was charged a cross-tenant hit on blocks its
        // own tenant had computed (a walkthrough's false alarm, `self-sent-block-in-flight.toml`).
        for key in &computed {
            if let Some(b) = idx.blocks.get_mut(key) {
                b.senders.insert(tenant);
            }
        }
        let tree_copy = self.cfg.knobs.prefill_checkpoint_duplicates == crate::config::CheckpointDuplicates::TreeCopy;
        let per = BLOCK_TOKENS / ps;
        let mut keys: Vec<BlockKey> = Vec::new();
        // The request's own blocks indexed as new, a run at a time (`insert_own` over the run).
        let mut new_from = from;
        let mut swapped = false;
        for (pos, key) in (from..).zip(computed) {
            if !self.prefill[n.at()].prefix().blocks.contains_key(&key) {
                keys.push(key);
                continue;
            }
            let first = pos as u64 * per;
            if !tree_copy || (first < sent_to && first + per > sent_from) {
                break;
            }
            self.checkpoint_own_blocks(n, r, new_from, &keys[new_from - from..]);
            self.checkpoint_tree_copy(n, r, first, key);
            keys.push(key);
            new_from = pos + 1;
            swapped = true;
        }
        self.checkpoint_own_blocks(n, r, new_from, &keys[new_from - from..]);
        if keys.is_empty() {
            return;
        }
        self.prefill[n.at()].req_mut(r).expect("present").checkpoint_blocks(&keys);
        if swapped {
            // The replay's block table: its own duplicate pages were freed (`MemOp::Free` ends
            // the table there), so the whole new table is stated again, the tree's copies in place.
            let pool = self.prefill[n.at()].id();
            let table = self.prefill[n.at()].reqs()[&r].pages().to_vec();
            self.mem(MemOp::Lock { pool, r, pages: table });
        }
    }

    /// `prefix_checkpoint`'s new blocks `keys`, blocks `at..` of request `r`'s chain: indexed
    /// with its own pages, held by the cache and locked by it.
    fn checkpoint_own_blocks(&mut self, n: PrefillIdx, r: RequestId, at: usize, keys: &[BlockKey]) {
        if keys.is_empty() {
            return;
        }
        let per = BLOCK_TOKENS / self.page_size();
        let node = &self.prefill[n.at()];
        let own = slice_pages(node.reqs()[&r].pages(), at as u64 * per, keys.len() as u64 * per);
        self.index_own_locked(node.id(), r, at, keys, &own);
    }

    /// Request `r`'s own new blocks `keys` (blocks `from..` of its chain, on pages `own`) join the
    /// prefix index of node `pool`, held by the cache and locked by the request (a prefill
    /// checkpoint, `checkpoint_own_blocks`; decode's index when a load arrives under `block_pool`,
    /// `decode_prefix_index_loaded`). The caller adds them to the request's borrowed blocks.
    fn index_own_locked(
        &mut self,
        pool: crate::types::PoolId,
        r: RequestId,
        from: usize,
        keys: &[BlockKey],
        own: &[Run],
    ) {
        let per = BLOCK_TOKENS / self.page_size();
        let parent = self.parent_key(r, from);
        let (tenant, public) = (self.reqs[r.idx()].tenant(), self.reqs[r.idx()].public_blocks());
        let idx = self.prefix_index_mut(pool);
        let ins = idx.insert_own(keys, parent, own, per, (tenant, r, public));
        debug_assert!(ins.dup.is_empty() && ins.tail.is_empty(), "whole new blocks only");
        for key in keys {
            idx.blocks.get_mut(key).expect("indexed").refs += 1;
        }
        match pool.idx() {
            crate::types::NodeIdx::Decode(d) => self.decode[d.at()].pool_mut().rehold(&ins.cached, Holder::Cache(r)),
            crate::types::NodeIdx::Prefill(p) => self.prefill[p.at()].pool_mut().rehold(&ins.cached, Holder::Cache(r)),
        }
        if let Some(rf) = self.reference.as_mut() {
            rf.rehold(pool, &ins.cached, Holder::Cache(r));
        }
        self.carry_late_writes(pool, r, &ins.cached);
    }

    /// The prefix index of node `pool` (prefill's or decode's radix cache).
    fn prefix_index_mut(&mut self, pool: crate::types::PoolId) -> &mut PrefixIndex {
        match pool.idx() {
            crate::types::NodeIdx::Decode(d) => self.decode[d.at()].prefix_mut(),
            crate::types::NodeIdx::Prefill(p) => self.prefill[p.at()].prefix_mut(),
        }
    }

    /// `prefix_checkpoint` under `tree_copy`: request `r` computed block `key` (its table's pages
    /// from `at`), which another request indexed meanwhile. Its own copy is freed, and the tree's
    /// takes its place in the block table, locked (`refs`) and touched as the insert walk touches
    /// every node it passes (sglang 0.5.22 `unified_cache/unified_tree_core.py`
    /// `_insert_walk_step`: `FreeDeviceKV` of the overlap, then `checkpoint_into_tree` rewrites
    /// `req_to_token` to the tree's indices and moves the lock). A late write the block holds is
    /// the request's to read from now on.
    fn checkpoint_tree_copy(&mut self, n: PrefillIdx, r: RequestId, at: u64, key: BlockKey) {
        let per = BLOCK_TOKENS / self.page_size();
        let idx = self.prefill[n.at()].prefix_mut();
        idx.touch(key);
        let b = idx.blocks.get_mut(&key).expect("indexed");
        b.refs += 1;
        let (tree, late) = (b.pages.clone(), b.late.clone());
        let node = &mut self.prefill[n.at()];
        let own = node.req_mut(r).expect("present").take_tree_copy(at, per, &tree);
        let bad = node.pool_mut().free(&own, Holder::Req(r));
        let pool = node.id();
        self.mem(MemOp::Free { pool, r, pages: own });
        self.note_bad_frees(pool, r, bad);
        self.reqs[r.idx()].note_late_writes(&late, pool);
    }

    /// Frees the least recently used unused block; false when none can be evicted.
    pub(crate) fn prefix_evict_one(&mut self, n: PrefillIdx) -> bool {
        let Some(b) = self.prefill[n.at()].prefix_mut().evict_one() else { return false };
        self.prefix_evictions.push((self.now, n.node(), b.tenant));
        let bad = self.prefill[n.at()].pool_mut().free(&b.pages, Holder::Cache(b.request));
        assert!(bad.is_empty(), "prefill-{n}: evicted prefix block pages were not held by the cache");
        let pool = self.prefill[n.at()].id();
        self.mem(MemOp::Free { pool, r: b.request, pages: b.pages });
        true
    }
}

/// The decode-side radix cache (`decode_radix_cache = on`; sglang
/// `--disaggregation-decode-enable-radix-cache`): the same block index as prefill's, on decode.
/// A request's full prompt blocks stay cached on decode when its committed KV is released; a later
/// request locks the cached blocks its prompt starts with (sglang 0.5.16 and 0.5.22 wheels,
/// `disaggregation/decode.py` `_match_prefix_and_lock`: the whole device match, with no
/// `len - 1` cap — that cap only bounds prefill's own match), reserves pages for the rest, and
/// reports the matched length to prefill as `decode_prefix_len`. Eviction frees the least recently
/// used unlocked block when an admission needs pages (`_pre_alloc`'s `tree_cache.evict`). Under
/// `decode_prefix_rules = block_pool` (vLLM 0.34.0) the match is capped at the prompt less one
/// token, refreshes nothing, and a loaded request's blocks are indexed when its KV has arrived
/// (`decode_prefix_index_loaded`).
impl World {
    /// Locks the cached blocks the request's prompt starts with (every full block of the prompt
    /// may match) and returns their keys and pages, in block-table order.
    pub(crate) fn decode_prefix_lock(&mut self, n: DecodeIdx, r: RequestId, len: u64) -> (Vec<BlockKey>, Vec<Run>) {
        let ps = self.page_size();
        if !BLOCK_TOKENS.is_multiple_of(ps) || self.reqs[r.idx()].prefix_blocks().is_empty() {
            return (Vec::new(), Vec::new());
        }
        let tenant = self.reqs[r.idx()].tenant();
        let public = self.reqs[r.idx()].public_blocks();
        // vLLM's hit leaves the prompt's last token to compute (`block_pool` rules); sglang's
        // decode match has no such cap. A decode that computes the prompt's last position itself
        // (`decode_first_write = last_prompt_token`) leaves it under either rules: its first step
        // writes there, in a page of its own, never in a block another request cached.
        let k = &self.cfg.knobs;
        let block_pool = k.decode_prefix_rules == crate::config::DecodePrefixRules::BlockPool;
        let capped = block_pool || k.decode_first_write == crate::config::DecodeFirstWrite::LastPromptToken;
        let max_blocks = (if capped { len.saturating_sub(1) } else { len } / BLOCK_TOKENS) as usize;
        let blocks: Vec<u64> = self.reqs[r.idx()].chain().iter().take(max_blocks).copied().collect();
        let salts: Vec<u64> = (0..blocks.len()).map(|i| self.salt(tenant, i, public)).collect();
        let idx = self.decode[n.at()].prefix_mut();
        let mut keys = Vec::new();
        let mut table = Vec::new();
        let mut late = LateWrites::default();
        for (i, b) in blocks.iter().enumerate() {
            let key = (salts[i], i as u32, *b);
            if !idx.blocks.contains_key(&key) {
                break;
            }
            if !block_pool {
                // sglang's `match_prefix` refreshes what it matched, whether or not the request
                // then fits; vLLM's lookup touches nothing (a block is refreshed when it is freed:
                // `decode_prefix_insert`).
                idx.touch(key);
            }
            let blk = idx.blocks.get_mut(&key).expect("matched");
            late.add(&blk.late);
            blk.refs += 1;
            for p in &blk.pages {
                push_run(&mut table, *p);
            }
            keys.push(key);
        }
        // A block a late write landed in while cached: the locker reads what it left.
        let pool = self.decode[n.at()].id();
        self.reqs[r.idx()].note_late_writes(&late, pool);
        (keys, table)
    }

    /// An admission that fitted took the locked blocks `keys` (`pages` pages): each block adds the
    /// request's tenant to its senders, and blocks only other tenants had sent to this node are a
    /// `cross_tenant_prefix_hit`, as on prefill (`World::prefix_take`): the hit shortens what
    /// prefill sends (`decode_prefix_len`) and so the request's TTFT. Before the thirty-ninth
    /// session decode's radix cache never reported one. An attempt that did not fit reused
    /// nothing and notes nothing.
    pub(crate) fn decode_prefix_commit(&mut self, n: DecodeIdx, r: RequestId, keys: &[BlockKey], pages: u64) {
        let tenant = self.reqs[r.idx()].tenant();
        let (victims, culprit) = self.decode[n.at()].prefix_mut().note_senders(keys, tenant, self.now);
        let pool = self.decode[n.at()].id();
        self.record_prefix_hit(r, pool, (pages, keys.len() as u64 * BLOCK_TOKENS), victims, culprit);
    }

    /// The owner (request, tenant) of the deepest of the locked blocks `keys` (report only: the
    /// noninterference check's attribution, as prefill's `note_prefix_match`).
    pub(crate) fn decode_prefix_owner(&self, n: DecodeIdx, keys: &[BlockKey]) -> Option<(RequestId, TenantId)> {
        keys.last().and_then(|k| self.decode[n.at()].prefix().blocks.get(k)).map(|b| (b.request, b.tenant))
    }

    /// Gives locked blocks back (a finish, an abort, a retraction, or an admission that did not fit).
    pub(crate) fn decode_prefix_unlock(&mut self, n: DecodeIdx, keys: &[BlockKey]) {
        let idx = self.decode[n.at()].prefix_mut();
        for key in keys {
            if let Some(b) = idx.blocks.get_mut(key) {
                b.refs -= 1;
            }
        }
    }

    /// Under `decode_prefix_rules = block_pool`: request `r`'s KV has arrived on decode `n`, and
    /// its own full prompt blocks join the index now, as vLLM 0.34.0 caches a loaded request's
    /// blocks when it leaves `WAITING_FOR_REMOTE_KV` (`sched/scheduler.py`
    /// `_update_waiting_for_remote_kv` → `kv_cache_manager.cache_blocks`), not when it finishes:
    /// a request arriving while it decodes hits them. The new blocks are held by the cache and
    /// locked by the request (they join its `borrowed` blocks, which its release unlocks and
    /// refreshes). The index keeps one copy per key, so indexing stops at the first block someone
    /// else indexed meanwhile (vLLM keeps a second copy under the same hash); the rest is
    /// indexed at release (`decode_prefix_insert`), as before.
    pub(crate) fn decode_prefix_index_loaded(&mut self, n: DecodeIdx, r: RequestId) {
        let ps = self.page_size();
        let chain_len = self.reqs[r.idx()].chain().len();
        if !BLOCK_TOKENS.is_multiple_of(ps) || chain_len == 0 {
            return;
        }
        let Some(d) = self.decode[n.at()].reqs().get(&r) else { return };
        let full = ((d.len_tokens() / BLOCK_TOKENS) as usize).min(chain_len);
        let from = d.borrowed().len();
        if full <= from {
            return;
        }
        let per = BLOCK_TOKENS / ps;
        let keys: Vec<BlockKey> = {
            let idx = self.decode[n.at()].prefix();
            let all = self.block_keys(r, from, full);
            all.into_iter().take_while(|k| !idx.blocks.contains_key(k)).collect()
        };
        if keys.is_empty() {
            return;
        }
        let own = slice_pages(d.pages(), from as u64 * per, keys.len() as u64 * per);
        self.index_own_locked(self.decode[n.at()].id(), r, from, &keys, &own);
        self.decode[n.at()].req_mut(r).expect("present").borrow_more(&keys);
    }

    /// Pages of request `r` that just joined `pool`'s prefix index (`cached`) keep what late writes
    /// left in them while `r` held them: the new blocks are marked late-written, as a block a late
    /// write lands in while cached is, so a later locker's bad read is named after the late write,
    /// not after the cache (`…/decode_prefix_cache`: a campaign's new signature that was the known
    /// sync-timeout-still-writing row, surfacing through decode's radix cache).
    ///
    /// On decode, a request whose own load was acknowledged before its data was visible
    /// (`visibility_lag`) leaves the lag's doing in every page it caches: indexed when its load is
    /// reported done (`block_pool` rules), the data is still to land; indexed at release, a
    /// landing after a preemption may have left its KV at other positions there. Those blocks are
    /// marked as the lag's late write, so a request locking them is named after the lag (the
    /// rdma-visibility-lag row), not after the cache (a 60 s `vllm-nixl --hardware-faults`
    /// campaign's `…/decode_prefix_cache` reads, forty-second session; each needs the lag). A
    /// landing already done in place left the request's own KV there: nothing reads wrong, and
    /// the mark only names what a bad read there came from.
    fn carry_late_writes(&mut self, pool: crate::types::PoolId, r: RequestId, cached: &[Run]) {
        let q = &self.reqs[r.idx()];
        if cached.is_empty() {
            return;
        }
        if q.lagged() && matches!(pool.idx(), crate::types::NodeIdx::Decode(_)) {
            self.prefix_index_mut(pool).mark_late_written(cached, true, false, &[]);
        }
        let q = &self.reqs[r.idx()];
        if !q.late_written() {
            return;
        }
        let (late, zeros) = q.late_pages_in(pool);
        let hit = crate::pool::runs_intersect(&late, cached);
        if hit.is_empty() {
            return;
        }
        let (lagged, timed_out) = (q.late_writers().0, q.late_write_timed_out());
        self.prefix_index_mut(pool).mark_late_written(&hit, lagged, timed_out, &zeros);
    }

    /// At release of a request whose KV was committed: its locked blocks are given back and its own
    /// full prompt blocks join the index (held by the cache from now on; a block already indexed
    /// under the same key keeps the older pages). Returns the request's own pages that are not
    /// cached (to be freed).
    pub(crate) fn decode_prefix_insert(&mut self, n: DecodeIdx, r: RequestId, d: &crate::decode::DReq) -> Vec<Run> {
        let ps = self.page_size();
        self.decode_prefix_unlock(n, d.borrowed());
        // Refreshed as on prefill (`prefix_release`): decode's release checkpoint walks the path.
        self.decode[n.at()].prefix_mut().touch_indexed(d.borrowed());
        let borrowed_pages = d.borrowed().len() as u64 * BLOCK_TOKENS / ps;
        let own = slice_pages(d.pages(), borrowed_pages, pages_in(d.pages()).saturating_sub(borrowed_pages));
        let (tenant, public) = (self.reqs[r.idx()].tenant(), self.reqs[r.idx()].public_blocks());
        let chain_len = self.reqs[r.idx()].chain().len();
        if !BLOCK_TOKENS.is_multiple_of(ps) || chain_len == 0 {
            return own;
        }
        let full = ((d.len_tokens() / BLOCK_TOKENS) as usize).min(chain_len);
        let from = d.borrowed().len().min(full);
        let (keys, parent) = (self.block_keys(r, from, full), self.parent_key(r, from));
        let ins =
            self.decode[n.at()].prefix_mut().insert_own(&keys, parent, &own, BLOCK_TOKENS / ps, (tenant, r, public));
        self.carry_late_writes(self.decode[n.at()].id(), r, &ins.cached);
        let node = &mut self.decode[n.at()];
        node.pool_mut().rehold(&ins.cached, Holder::Cache(r));
        if let Some(rf) = self.reference.as_mut() {
            rf.rehold(node.id(), &ins.cached, Holder::Cache(r));
        }
        let mut free = ins.dup;
        free.extend(ins.tail);
        free
    }

    /// Frees decode's least recently used unlocked cached block; false when none can be evicted.
    pub(crate) fn decode_prefix_evict_one(&mut self, n: DecodeIdx) -> bool {
        let Some(b) = self.decode[n.at()].prefix_mut().evict_one() else { return false };
        self.prefix_evictions.push((self.now, n.node(), b.tenant));
        let bad = self.decode[n.at()].pool_mut().free(&b.pages, Holder::Cache(b.request));
        assert!(bad.is_empty(), "decode-{n}: evicted prefix block pages were not held by the cache");
        let pool = self.decode[n.at()].id();
        self.mem(MemOp::Free { pool, r: b.request, pages: b.pages });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A late write is one kind of writer, the lag first: a lagged batch that also outlived its
    /// timed-out call is the lag's; a block keeps every kind that hit it, so a request locking it
    /// later is named after each (`fuzz::signatures`).
    #[test]
    fn a_late_write_is_one_kind_and_a_block_keeps_every_kind() {
        let run = Run { first: 1, count: 2 };
        let kinds = |l: &LateWrites| (l.lagged, l.timed_out, l.other);
        assert_eq!(kinds(&LateWrites::new(true, true, vec![run])), (true, false, false));
        assert_eq!(kinds(&LateWrites::new(false, true, vec![run])), (false, true, false));
        assert_eq!(kinds(&LateWrites::new(false, false, vec![run])), (false, false, true));
        assert!(!LateWrites::default().any());
        let mut block = LateWrites::default();
        block.add(&LateWrites::new(false, true, vec![run]));
        assert!(block.any() && block.timed_out && !block.other, "{block:?}");
        block.add(&LateWrites::new(false, false, vec![Run { first: 5, count: 1 }]));
        assert_eq!(kinds(&block), (false, true, true));
        assert_eq!(block.pages, vec![run, Run { first: 5, count: 1 }]);
    }

    /// Only a chain's last cached block is evicted, however old its parent: a chain of three
    /// touched first to last (its first block the oldest) goes last to first, and a parent with
    /// two children waits for both. A parent indexed after its child (`kids` counts by key) is
    /// not a leaf either. Before, the oldest unused block went first: the chain's head, leaving
    /// its tail cached and unreachable.
    #[test]
    fn eviction_takes_leaves_only() {
        let key = |pos: u32, chain: u64| (0u64, pos, chain);
        let page = |i: u32| vec![Run { first: i, count: 1 }];
        let who = (TenantId(1), RequestId(0), 0);
        let mut idx = PrefixIndex::default();
        idx.insert_own(&[key(0, 10), key(1, 11), key(2, 12)], None, &[Run { first: 0, count: 3 }], 1, who);
        idx.insert_own(&[key(2, 22)], Some(key(1, 11)), &page(3), 1, who);
        let order: Vec<_> = std::iter::from_fn(|| idx.evict_one().map(|b| b.pages[0].first)).collect();
        assert_eq!(order, vec![2, 3, 1, 0], "leaves in LRU order, each parent after its last child");
        assert!(idx.blocks.is_empty() && idx.kids.is_empty());
        // The child first, then its parent: the parent still waits for the child.
        idx.insert_own(&[key(1, 11)], Some(key(0, 10)), &page(5), 1, who);
        idx.insert_own(&[key(0, 10)], None, &page(4), 1, who);
        assert_eq!(idx.evict_one().map(|b| b.pages[0].first), Some(5));
        assert_eq!(idx.evict_one().map(|b| b.pages[0].first), Some(4));
        // A block in use is no leaf to take, and its parent waits for it.
        idx.insert_own(&[key(0, 10), key(1, 11)], None, &[Run { first: 6, count: 2 }], 1, who);
        idx.blocks.get_mut(&key(1, 11)).unwrap().refs = 1;
        assert!(idx.evict_one().is_none() && idx.oldest_evictable().is_none());
    }
}
