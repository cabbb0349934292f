//! An interval map over `u64` keys: the representation behind slot ownership and page holders.
//! Cost grows with the number of runs touched, never with the number of tokens in them.

use std::collections::BTreeMap;

/// A value that can describe a sub-range of the run it belongs to.
pub trait RunValue: Clone + PartialEq {
    /// The value for the part of a run that starts `by` keys after the run's start.
    fn advanced(&self, by: u64) -> Self;
    /// Whether `next`, placed `by` keys after this run's start, continues this run.
    fn continued_by(&self, by: u64, next: &Self) -> bool {
        self.advanced(by) == *next
    }
}

/// Non-overlapping half-open runs `[start, end)` each carrying a value; keys without a run are
/// "absent" (for ownership: never written).
#[derive(Clone, Debug, Default)]
pub struct IntervalMap<V> {
    runs: BTreeMap<u64, (u64, V)>,
}

impl<V: RunValue> IntervalMap<V> {
    pub fn new() -> Self {
        IntervalMap { runs: BTreeMap::new() }
    }

    pub fn len_runs(&self) -> usize {
        self.runs.len()
    }

    /// Splits the run containing `at` (if any) so that a run boundary falls on `at`.
    fn split_at(&mut self, at: u64) {
        let Some((&s, (e, v))) = self.runs.range_mut(..at).next_back() else {
            return;
        };
        if *e > at {
            let tail = (*e, v.advanced(at - s));
            *e = at;
            self.runs.insert(at, tail);
        }
    }

    /// Removes everything in `[start, end)`.
    pub fn clear(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        self.split_at(start);
        self.split_at(end);
        while let Some(k) = self.runs.range(start..end).next().map(|(k, _)| *k) {
            self.runs.remove(&k);
        }
    }

    /// Sets `[start, end)` to `v` (the value at `start`), merging with a run that ends at
    /// `start` when it continues seamlessly.
    pub fn set(&mut self, start: u64, end: u64, v: V) {
        if start >= end {
            return;
        }
        // Fast path (a decode token appended right after its own previous token): the run before
        // `start` ends there and continues into `v`. Extend it, then drop or trim what starts in
        // [start, end) — the same map `clear` + merge would leave, with fewer B-tree walks.
        if let Some((&ps, (pe, pv))) = self.runs.range_mut(..start).next_back() {
            if *pe == start && pv.continued_by(start - ps, &v) {
                *pe = end;
                while let Some(k) = self.runs.range(start..end).next().map(|(k, _)| *k) {
                    let (e, vk) = self.runs.remove(&k).expect("run just found");
                    if e > end {
                        self.runs.insert(end, (e, vk.advanced(end - k)));
                    }
                }
                return;
            }
        }
        self.clear(start, end);
        if let Some((&ps, (pe, pv))) = self.runs.range_mut(..start).next_back() {
            if *pe == start && pv.continued_by(start - ps, &v) {
                *pe = end;
                return;
            }
        }
        self.runs.insert(start, (end, v));
    }

    /// Calls `f(start, end, value)` for each covered piece of `[start, end)` and
    /// `f(start, end, None)` for each gap, in key order.
    pub fn visit(&self, start: u64, end: u64, mut f: impl FnMut(u64, u64, Option<&V>)) {
        if start >= end {
            return;
        }
        let mut cursor = start;
        let first =
            self.runs.range(..=start).next_back().filter(|(_, (e, _))| *e > start).map(|(s, _)| *s).unwrap_or(start);
        for (&s, (e, v)) in self.runs.range(first..end) {
            if s > cursor {
                f(cursor, s, None);
            }
            let lo = s.max(cursor);
            let hi = (*e).min(end);
            if lo < hi {
                if lo == s {
                    f(lo, hi, Some(v));
                } else {
                    let adv = v.advanced(lo - s);
                    f(lo, hi, Some(&adv));
                }
            }
            cursor = hi.max(cursor);
        }
        if cursor < end {
            f(cursor, end, None);
        }
    }

    /// The pieces of `[start, end)` as owned values (gaps as `None`).
    pub fn pieces(&self, start: u64, end: u64) -> Vec<(u64, u64, Option<V>)> {
        let mut out = Vec::new();
        self.visit(start, end, |s, e, v| out.push((s, e, v.cloned())));
        out
    }

    /// Checks the structural invariant: runs sorted, non-empty, non-overlapping.
    pub fn invariants(&self) {
        let mut prev_end = 0u64;
        for (&s, &(e, _)) in &self.runs {
            assert!(s < e, "empty run at {s}");
            assert!(s >= prev_end, "overlapping runs at {s} (previous ends {prev_end})");
            prev_end = e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct P(u64, u64); // (owner, first position)
    impl RunValue for P {
        fn advanced(&self, by: u64) -> Self {
            P(self.0, self.1 + by)
        }
    }

    #[test]
    fn set_splits_and_merges() {
        let mut m = IntervalMap::new();
        m.set(0, 100, P(1, 0));
        m.set(40, 60, P(2, 0));
        m.invariants();
        let p = m.pieces(0, 120);
        assert_eq!(
            p,
            vec![(0, 40, Some(P(1, 0))), (40, 60, Some(P(2, 0))), (60, 100, Some(P(1, 60))), (100, 120, None)]
        );
        m.set(60, 70, P(2, 20));
        assert_eq!(m.len_runs(), 3, "continuation merges");
        m.clear(0, 1000);
        assert_eq!(m.len_runs(), 0);
    }

    #[test]
    fn visit_mid_run() {
        let mut m = IntervalMap::new();
        m.set(10, 20, P(7, 100));
        assert_eq!(m.pieces(15, 25), vec![(15, 20, Some(P(7, 105))), (20, 25, None)]);
        assert_eq!(m.pieces(0, 5), vec![(0, 5, None)]);
    }
}
