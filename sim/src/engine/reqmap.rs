//! `ReqMap`: values by request id in a sorted vector (a node's requests, a pool's open appends).

use crate::types::RequestId;

/// Values by request id: a vector sorted by id, with the `BTreeMap` methods its users need and
/// the same `Debug` image (`{id: value, ...}`: the state digest hashes a node's requests). A
/// node's requests and a pool's open appends are looked up on every request-token, by a decode
/// step that goes through its batch in admission order, which is mostly id order: a lookup first
/// tries the entry after the one it last found, then that one (one or two compares), then a
/// binary search over contiguous entries, where a B-tree walked its nodes. A new request has the
/// largest id so far in the usual case, so an insert is a push; a removal shifts the entries
/// after it (tens of entries; thousands on a node with that many queued, which makes an
/// overloaded run quadratic: holes swept out later, or a ring buffer, were measured and cost 2–9%
/// more instructions on every bench row, whose maps are small, so they were not kept).
#[derive(Clone)]
pub struct ReqMap<V> {
    items: Vec<(RequestId, V)>,
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
    fn find(&self, k: &RequestId) -> Result<usize, usize> {
        // The entry after the last one found first: a decode step looks its batch up in order,
        // so that is the usual hit (tried second, it cost two compares a lookup, two lookups a
        // request-token); then the last one found again.
        let h = self.hint.get();
        for i in [h + 1, h] {
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
    pub fn get(&self, k: &RequestId) -> Option<&V> {
        self.find(k).ok().map(|i| &self.items[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, k: &RequestId) -> Option<&mut V> {
        self.find(k).ok().map(|i| &mut self.items[i].1)
    }

    pub fn contains_key(&self, k: &RequestId) -> bool {
        self.find(k).is_ok()
    }

    /// Inserts or replaces (returning the old value), as `BTreeMap::insert`.
    pub fn insert(&mut self, k: RequestId, v: V) -> Option<V> {
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

    pub fn remove(&mut self, k: &RequestId) -> Option<V> {
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

    /// Keeps the entries whose value passes `keep`, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.items.retain(|(_, v)| keep(v));
    }

    /// Takes every entry out, in id order.
    pub fn drain(&mut self) -> impl Iterator<Item = (RequestId, V)> + '_ {
        self.items.drain(..)
    }

    /// In id order, as the B-tree's.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&RequestId, &V)> + '_ {
        self.items.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &RequestId> + '_ {
        self.items.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + '_ {
        self.items.iter().map(|(_, v)| v)
    }
}

impl<V> std::ops::Index<&RequestId> for ReqMap<V> {
    type Output = V;
    fn index(&self, k: &RequestId) -> &V {
        self.get(k).expect("no such request on the node")
    }
}

#[cfg(test)]
mod tests {
    use super::ReqMap;
    use crate::types::RequestId;
    use std::collections::BTreeMap;

    /// `ReqMap` answers as the `BTreeMap` it replaced under random inserts (mostly increasing
    /// ids, some below), replacements, removals, retains, drains and lookups in a shuffled order (the hint's
    /// misses): the same values, the same order, the same `Debug` image (the state digest).
    #[test]
    fn req_map_answers_as_a_btree_map() {
        let mut next = crate::engine::rng::test_draws(0x9e37_79b9_7f4a_7c15u64);
        let (mut m, mut b) = (ReqMap::new(), BTreeMap::new());
        let mut top = 0u32;
        for i in 0..40_000u64 {
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
                // The oldest entry, as a queue's removals go.
                3 if i % 2 == 0 => {
                    let first = b.keys().next().copied();
                    if let Some(f) = first {
                        assert_eq!(m.remove(&f), b.remove(&f));
                    }
                }
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
                match next(4) {
                    0 => {
                        m.clear();
                        b.clear();
                    }
                    1 => {
                        m.retain(|v| v % 3 != 0);
                        b.retain(|_, v| *v % 3 != 0);
                    }
                    _ => {}
                }
            }
        }
        assert!(m.keys().eq(b.keys()) && m.values().eq(b.values()));
        assert!(m.drain().eq(std::mem::take(&mut b)));
        assert!(m.is_empty());
    }
}
