//! An interval map over `u64` keys: the representation behind slot ownership and page holders.
//! Cost grows with the number of runs touched, never with the number of tokens in them.

use std::cell::Cell;
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
#[derive(Clone, Default)]
pub struct IntervalMap<V> {
    runs: BTreeMap<u64, (u64, V)>,
    /// The keys `[lo, hi]` that `set` and `clear` have changed since `invariants` last checked
    /// (`None`: nothing), so that it checks the runs there and their neighbours instead of the
    /// whole map. Not part of the map's value (`Debug` leaves it out).
    dirty: Cell<Option<(u64, u64)>>,
}

/// What `derive(Debug)` showed before `dirty` existed: the runs (explore's state digest hashes it).
impl<V: std::fmt::Debug> std::fmt::Debug for IntervalMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntervalMap").field("runs", &self.runs).finish()
    }
}

impl<V: RunValue> IntervalMap<V> {
    pub fn new() -> Self {
        IntervalMap { runs: BTreeMap::new(), dirty: Cell::new(None) }
    }

    /// Notes that keys `[start, end]` may have changed (`invariants`).
    #[inline]
    fn touched(&self, start: u64, end: u64) {
        let (lo, hi) = self.dirty.get().map_or((start, end), |(lo, hi)| (lo.min(start), hi.max(end)));
        self.dirty.set(Some((lo, hi)));
    }

    pub fn len_runs(&self) -> usize {
        self.runs.len()
    }

    /// The runs in key order, as `(start, end, value at start)`: the structure itself, which
    /// `Debug` (and so explore's state digest) shows.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64, &V)> + '_ {
        self.runs.iter().map(|(&s, (e, v))| (s, *e, v))
    }

    /// Removes `[start, end)` from the runs and reports what an insertion at `start` needs to know:
    /// the run before `start` (the last whose key is below it) is cut back to end at `start` at
    /// most; the runs that start inside are removed; the part of the last run that reaches beyond
    /// `end` is kept, re-keyed at `end`. Returns whether the run before `start`, cut or not, ends
    /// exactly at `start` and continues into `merge_with` (then it was extended to `end`).
    ///
    /// The same runs the split-then-remove formulation left (split at `start`, split at `end`,
    /// remove every run keyed in `[start, end)`, then merge with the run ending at `start`), with
    /// one B-tree walk to find the runs involved instead of one per split, lookup and removal:
    /// `sim/tests/it/pool_model.rs` (`interval_map_keeps_the_reference_runs`) holds it to that
    /// formulation run for run (explore's state digest hashes the runs, not only their values).
    fn cut(&mut self, start: u64, end: u64, merge_with: Option<&V>) -> bool {
        // Keys of the runs starting inside `[start, end)`, largest first (usually none or one).
        let mut inside = [0u64; 4];
        let mut n_inside = 0usize;
        let mut overflow = false;
        let mut tail: Option<(u64, (u64, V))> = None;
        let mut merged = false;
        for (&k, (e, v)) in self.runs.range_mut(..end).rev() {
            if k >= start {
                if n_inside == 0 && *e > end {
                    tail = Some((end, (*e, v.advanced(end - k))));
                }
                if n_inside < inside.len() {
                    inside[n_inside] = k;
                    n_inside += 1;
                } else {
                    overflow = true;
                    break;
                }
                continue;
            }
            // The run before `start`: cut back to `start` (its part beyond `end`, if any, is the
            // tail: then no run starts inside).
            if *e > start {
                if *e > end {
                    tail = Some((end, (*e, v.advanced(end - k))));
                }
                *e = start;
            }
            if let Some(m) = merge_with {
                if *e == start && v.continued_by(start - k, m) {
                    *e = end;
                    merged = true;
                }
            }
            break;
        }
        if overflow {
            // Many runs inside: remove them one by one, then deal with the run before `start`
            // (none of the runs removed is it, so the pass above did not reach it).
            while let Some(k) = self.runs.range(start..end).next().map(|(k, _)| *k) {
                self.runs.remove(&k);
            }
            if let Some((&k, (e, v))) = self.runs.range_mut(..start).next_back() {
                *e = (*e).min(start);
                if let Some(m) = merge_with {
                    if *e == start && v.continued_by(start - k, m) {
                        *e = end;
                        merged = true;
                    }
                }
            }
        } else {
            for k in &inside[..n_inside] {
                self.runs.remove(k);
            }
        }
        if let Some((k, r)) = tail {
            self.runs.insert(k, r);
        }
        merged
    }

    /// Removes everything in `[start, end)`.
    pub fn clear(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        self.touched(start, end);
        // The common case (a freed page that is a run of its own): one B-tree removal, no walk.
        if self.runs.get(&start).is_some_and(|(e, _)| *e == end) {
            self.runs.remove(&start);
            return;
        }
        self.cut(start, end, None);
    }

    /// The value of the run that is exactly `[start, end)`, if there is one (no run is cut).
    pub fn exact(&self, start: u64, end: u64) -> Option<&V> {
        self.runs.get(&start).filter(|(e, _)| *e == end).map(|(_, v)| v)
    }

    /// Sets `[start, end)` to `v` (the value at `start`), merging with a run that ends at
    /// `start` when it continues seamlessly (a decode token appended right after its own previous
    /// token extends that run).
    pub fn set(&mut self, start: u64, end: u64, v: V) {
        if start >= end {
            return;
        }
        self.touched(start, end);
        if !self.cut(start, end, Some(&v)) {
            self.runs.insert(start, (end, v));
        }
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

    /// Checks the structural invariant: runs sorted, non-empty, non-overlapping — where it can
    /// have changed since the last check. A `set` or `clear` of `[start, end)` removes and inserts
    /// runs keyed in `[start, end]` and shortens or extends the run keyed before `start`; keys
    /// below the lowest `start` never change. So every run that changed, and every pair of
    /// neighbours of which one changed, lies between the last run keyed below the changed keys
    /// and the first run keyed above them, and only that window is walked (the whole map, while
    /// a `set` or `clear` had left it checked, held before).
    pub fn invariants(&self) {
        let Some((lo, hi)) = self.dirty.get() else { return };
        let from = self.runs.range(..lo).next_back().map_or(lo, |(k, _)| *k);
        let mut prev_end = 0u64;
        for (&s, &(e, _)) in self.runs.range(from..) {
            assert!(s < e, "empty run at {s}");
            assert!(s >= prev_end, "overlapping runs at {s} (previous ends {prev_end})");
            prev_end = e;
            if s > hi {
                break;
            }
        }
        self.dirty.set(None);
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

    /// The whole-map check the windowed `invariants` stands for.
    fn whole_map_holds(m: &IntervalMap<P>) -> bool {
        let mut prev_end = 0;
        m.runs.iter().all(|(&s, &(e, _))| {
            let ok = s < e && s >= prev_end;
            prev_end = e;
            ok
        })
    }

    /// `invariants` walks only the window `set` and `clear` changed: after thousands of random
    /// writes and clears (merges, splits, many runs inside one cut) it passes wherever the whole
    /// map holds, and a run broken inside the window of the latest change is found.
    #[test]
    fn windowed_invariants_see_every_change() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut m = IntervalMap::new();
        for i in 0..5_000u64 {
            let start = next(500);
            let end = start + 1 + next(if i % 7 == 0 { 200 } else { 8 });
            if next(3) == 0 {
                m.clear(start, end);
            } else {
                m.set(start, end, P(next(3), next(4)));
            }
            if next(4) == 0 {
                assert!(whole_map_holds(&m));
                m.invariants();
                assert!(m.dirty.get().is_none(), "a check leaves nothing to check");
            }
        }
        m.invariants();
        // A run made empty inside the window of the latest change is found...
        m.set(100, 110, P(9, 0));
        m.runs.insert(105, (105, P(9, 5)));
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.invariants()));
        assert!(found.is_err(), "an empty run inside the window");
        m.runs.remove(&105);
        m.invariants();
        // ...and so is an overlap with the run after the window.
        m.clear(200, 400);
        m.invariants();
        m.set(300, 310, P(1, 0));
        m.runs.insert(320, (330, P(1, 0)));
        m.runs.get_mut(&300).expect("set").0 = 325;
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.invariants()));
        assert!(found.is_err(), "the changed run overlaps the one after it");
    }

    #[test]
    fn visit_mid_run() {
        let mut m = IntervalMap::new();
        m.set(10, 20, P(7, 100));
        assert_eq!(m.pieces(15, 25), vec![(15, 20, Some(P(7, 105))), (20, 25, None)]);
        assert_eq!(m.pieces(0, 5), vec![(0, 5, None)]);
    }
}
