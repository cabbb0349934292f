//! What a prefill node and a decode node share: each owns a KV pool, a radix-cache prefix
//! index, its requests by id and an incarnation, and offers the same accessors for them to the
//! components that read or update them. [`node_parts!`] says those accessors once; each node's
//! `impl` block invokes it with its request type.
//!
//! A macro rather than a shared inner struct (`NodeCore<R>`): the state digest hashes each
//! node's derived `Debug` image (`World::state_digest`), and moving the shared fields into a
//! nested struct would change that image (exploration's answers with it) unless each node wrote
//! its `Debug` by hand — and a hand-written image that forgets a field added later would drop
//! that state from the digest without a test failing. The derive stays; the accessors are
//! written once.

/// The accessors every node type defines over its `index`, `life`, `reqs`, `pool` and `prefix`
/// fields; `$req` is the node's per-request type (`PReq`, `DReq`).
macro_rules! node_parts {
    ($req:ty) => {
        /// The node's id in memory operations and the trace.
        pub fn id(&self) -> crate::types::NodeId {
            self.index.node()
        }

        /// Requests on the node (the router's load measure).
        pub fn load(&self) -> usize {
            self.reqs.len()
        }

        /// The node is up (`Incarnation::alive`).
        pub fn alive(&self) -> bool {
            self.life.alive()
        }

        /// The node's restart count (`Incarnation::epoch`).
        pub fn epoch(&self) -> u32 {
            self.life.epoch()
        }

        /// Crash, restart and tick bookkeeping, for `World`'s wiring.
        pub(crate) fn life_mut(&mut self) -> &mut crate::engine::incarnation::Incarnation {
            &mut self.life
        }

        /// The node's requests by id.
        pub fn reqs(&self) -> &crate::engine::reqmap::ReqMap<$req> {
            &self.reqs
        }

        /// One of the node's requests, for another component's handler to update through the
        /// request's named methods (the transfer engine's job counts, the prefix cache's
        /// blocks, a foreign write into decode's pages).
        pub(crate) fn req_mut(&mut self, r: crate::types::RequestId) -> Option<&mut $req> {
            self.reqs.get_mut(&r)
        }

        /// The node's KV pool.
        pub fn pool(&self) -> &crate::pool::Pool {
            &self.pool
        }

        /// The pool, for the components that write into it besides the node's own handlers (the
        /// transfer engine lands pages, the prefix cache holds and frees blocks, `World` wires
        /// the oracle's memory operations).
        pub(crate) fn pool_mut(&mut self) -> &mut crate::pool::Pool {
            &mut self.pool
        }

        /// The node's radix-cache prefix index.
        pub fn prefix(&self) -> &crate::prefix::PrefixIndex {
            &self.prefix
        }

        /// The prefix index, for `prefix`'s insert and eviction rules.
        pub(crate) fn prefix_mut(&mut self) -> &mut crate::prefix::PrefixIndex {
            &mut self.prefix
        }
    };
}

pub(crate) use node_parts;

/// What a node still holds at the end of a run (`PrefillNode::leaks`, `DecodeNode::leaks`):
/// device pages (radix-cached ones excluded), host-memory pages (the KV backups of retracted
/// requests, decode only: their device pages were freed at the retraction), metadata slots, and
/// the requests holding any of them. With `leaks_besides`, what requests still open hold
/// themselves is counted apart (`open_pages`, `open_holders`) and left out of the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    pub node: crate::types::NodeId,
    pub pages: u64,
    pub host_pages: u64,
    pub slots: u64,
    pub holders: Vec<u32>,
    /// Pages of their own block tables, and host copies, that requests still open hold.
    pub open_pages: u64,
    /// Metadata slots that requests still open hold.
    pub open_slots: u64,
    /// The requests still open that hold pages, a host copy or a slot here.
    pub open_holders: Vec<u32>,
}

/// One holder of what a node holds at the end: whether it is still open (a request with no final
/// status, judged as `request_hang`), and, when it is, its share: the pages of its table it holds
/// itself (`own`, 0 for a holder not open: only an open one's share is counted), its host copy
/// and whether it holds a metadata slot.
pub(crate) struct HolderShare {
    pub r: crate::types::RequestId,
    pub open: bool,
    pub own: u64,
    pub host: u64,
    pub slot: bool,
}

/// A node's `Leak` from what it holds (`pages` device pages less radix-cached ones, `host_pages`,
/// `slots`) and its holders' shares: an open holder holds its share for its hang, not as a leak,
/// so that share is counted apart and the leak is what is left (`None` when nothing is).
pub(crate) fn leak_of(
    node: crate::types::NodeId,
    pages: u64,
    host_pages: u64,
    slots: u64,
    shares: impl Iterator<Item = HolderShare>,
) -> Option<Leak> {
    let (mut holders, mut open_holders) = (Vec::new(), Vec::new());
    let (mut open_own, mut open_host, mut open_slots) = (0u64, 0u64, 0u64);
    for s in shares {
        if s.open {
            open_own += s.own;
            open_host += s.host;
            open_slots += u64::from(s.slot);
            open_holders.push(s.r.0);
        } else {
            holders.push(s.r.0);
        }
    }
    let (pages, host_pages) = (pages.saturating_sub(open_own), host_pages.saturating_sub(open_host));
    let slots = slots.saturating_sub(open_slots);
    (pages + host_pages > 0 || slots > 0).then(|| Leak {
        node,
        pages,
        host_pages,
        slots,
        holders,
        open_pages: open_own + open_host,
        open_slots,
        open_holders,
    })
}
