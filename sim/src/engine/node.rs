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
        pub fn reqs(&self) -> &crate::engine::node::ReqMap<$req> {
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

/// A node's requests by id: a vector sorted by id, with the BTreeMap methods the nodes use and
/// the same `Debug` image (`{id: request, ...}`: the state digest hashes it). A decode step looks
/// up each request of its batch in admission order, which is mostly id order, so a lookup first
/// tries the entry after the last one found (one compare), then a binary search over contiguous
/// entries; the B-tree it replaces walked its nodes on every request-token. New requests have the
/// largest id so far in the usual case, so an insert is a push; a removal shifts the entries after
/// it (a node holds tens of requests).
#[derive(Clone)]
pub struct ReqMap<V> {
    items: Vec<(crate::types::RequestId, V)>,
    /// Where the last successful lookup ended (a hint only: any value is correct).
    hint: std::cell::Cell<usize>,
}

impl<V> Default for ReqMap<V> {
    fn default() -> Self {
        ReqMap { items: Vec::new(), hint: std::cell::Cell::new(0) }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for ReqMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.items.iter().map(|(k, v)| (k, v))).finish()
    }
}

impl<V> ReqMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline(always)]
    fn find(&self, k: &crate::types::RequestId) -> Result<usize, usize> {
        let h = self.hint.get();
        for i in [h, h + 1] {
            if self.items.get(i).is_some_and(|(x, _)| x == k) {
                self.hint.set(i);
                return Ok(i);
            }
        }
        let found = self.items.binary_search_by(|(x, _)| x.cmp(k));
        if let Ok(i) = found {
            self.hint.set(i);
        }
        found
    }

    #[inline]
    pub fn get(&self, k: &crate::types::RequestId) -> Option<&V> {
        self.find(k).ok().map(|i| &self.items[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, k: &crate::types::RequestId) -> Option<&mut V> {
        self.find(k).ok().map(|i| &mut self.items[i].1)
    }

    pub fn contains_key(&self, k: &crate::types::RequestId) -> bool {
        self.find(k).is_ok()
    }

    /// Inserts or replaces (returning the old value), as `BTreeMap::insert`.
    pub fn insert(&mut self, k: crate::types::RequestId, v: V) -> Option<V> {
        if self.items.last().is_none_or(|(x, _)| *x < k) {
            self.items.push((k, v));
            return None;
        }
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.items[i].1, v)),
            Err(i) => {
                self.items.insert(i, (k, v));
                None
            }
        }
    }

    pub fn remove(&mut self, k: &crate::types::RequestId) -> Option<V> {
        let i = self.find(k).ok()?;
        Some(self.items.remove(i).1)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// In id order, as the B-tree's.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&crate::types::RequestId, &V)> + '_ {
        self.items.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&crate::types::RequestId, &mut V)> + '_ {
        self.items.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &crate::types::RequestId> + '_ {
        self.items.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + '_ {
        self.items.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> + '_ {
        self.items.iter_mut().map(|(_, v)| v)
    }
}

impl<V> std::ops::Index<&crate::types::RequestId> for ReqMap<V> {
    type Output = V;
    fn index(&self, k: &crate::types::RequestId) -> &V {
        self.get(k).expect("no such request on the node")
    }
}

impl<'a, V> IntoIterator for &'a ReqMap<V> {
    type Item = (&'a crate::types::RequestId, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (crate::types::RequestId, V)>,
        fn(&'a (crate::types::RequestId, V)) -> (&'a crate::types::RequestId, &'a V),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::ReqMap;
    use crate::types::RequestId;
    use std::collections::BTreeMap;

    /// `ReqMap` answers as the `BTreeMap` it replaced under random inserts (mostly increasing
    /// ids, some below), replacements, removals and lookups in a shuffled order (the hint's
    /// misses): the same values, the same order, the same `Debug` image (the state digest).
    #[test]
    fn req_map_answers_as_a_btree_map() {
        let mut next = crate::engine::rng::test_draws(0x9e37_79b9_7f4a_7c15u64);
        let (mut m, mut b) = (ReqMap::new(), BTreeMap::new());
        let mut top = 0u32;
        for i in 0..20_000u64 {
            let k = RequestId(match next(4) {
                0 => next(u64::from(top) + 1) as u32,
                _ => {
                    top += 1 + next(3) as u32;
                    top
                }
            });
            match next(5) {
                0 | 1 => assert_eq!(m.insert(k, i), b.insert(k, i)),
                2 => assert_eq!(m.remove(&k), b.remove(&k)),
                3 => {
                    if let (Some(a), Some(c)) = (m.get_mut(&k), b.get_mut(&k)) {
                        *a += 1;
                        *c += 1;
                    }
                }
                _ => assert_eq!(m.contains_key(&k), b.contains_key(&k)),
            }
            assert_eq!(m.get(&k), b.get(&k));
            assert_eq!(m.len(), b.len());
            if i % 500 == 0 {
                assert!(m.iter().eq(b.iter()));
                assert_eq!(format!("{m:?}"), format!("{b:?}"));
                if next(4) == 0 {
                    m.clear();
                    b.clear();
                }
            }
        }
        assert!(m.keys().eq(b.keys()) && m.values().eq(b.values()));
    }
}
