//! An interval map over `u64` keys: the representation behind slot ownership and page holders.
//! Cost grows with the number of runs touched, never with the number of tokens in them.

use foldhash::fast::FixedState;
use std::cell::Cell;
use std::collections::BTreeMap;
// Never iterated (ordered walks go through `Dense`'s bitmaps), and its hasher is fixed: the
// house rule against hash maps is about iteration order.
#[allow(clippy::disallowed_types)]
use std::collections::HashMap;

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
///
/// Two representations of the same runs: a B-tree keyed by run start (`new`: any keys), and, for a
/// map whose keys lie below a bound known when it is made (`with_universe`: a pool's slots or
/// pages), a bit per key marking where runs start, with summary levels above it, so that
/// finding the run before or after a key is a few word operations instead of a B-tree walk
/// (`Dense`; its large levels keep only their non-zero words, so memory follows the runs).
/// Every operation leaves the same runs in both (`sim/tests/it/pool_model.rs` runs the same
/// operations on both and on the reference formulation).
#[derive(Clone, Default)]
pub struct IntervalMap<V> {
    repr: Repr<V>,
    /// The keys `[lo, hi]` that `set` and `clear` have changed since `invariants` last checked
    /// (`None`: nothing), so that it checks the runs there and their neighbours instead of the
    /// whole map. Not part of the map's value (`Debug` leaves it out).
    dirty: Cell<Option<(u64, u64)>>,
    /// The dense run `[start, end)` that `covering` or `visit` last found, or `set` last wrote;
    /// `clear` forgets it, and a `set` replaces it. A lookup of a key inside it, and the run
    /// before a write that starts right after it, need not walk the levels (`Dense::pred_from`):
    /// consecutive transfer batches read, check and write the pages of one run one batch after
    /// another. Not part of the map's value.
    found: Cell<Option<(u64, u64)>>,
}

#[derive(Clone)]
enum Repr<V> {
    Tree(BTreeMap<u64, (u64, V)>),
    Dense(Dense<V>),
}

impl<V> Default for Repr<V> {
    fn default() -> Self {
        Repr::Tree(BTreeMap::new())
    }
}

/// A level of `Dense`'s bitmaps kept as a plain array up to this many words (512 KB); a larger
/// level keeps only its non-zero words, by index, so that memory follows the runs, not the keys
/// (a pool with a thousand times the slots costs no more bits).
const FLAT_MAX_WORDS: u64 = 1 << 16;

/// One level of `Dense`'s bitmaps: word `i` has a bit per item `64 i .. 64 i + 63` of the level
/// below (of the keys, at level 0).
#[derive(Clone)]
#[allow(clippy::disallowed_types)]
enum Level {
    Flat(Vec<u64>),
    Sparse(HashMap<u64, u64, FixedState>),
}

impl Level {
    #[allow(clippy::disallowed_types)]
    fn new(words: u64) -> Level {
        if words <= FLAT_MAX_WORDS {
            Level::Flat(vec![0; words as usize])
        } else {
            Level::Sparse(HashMap::with_hasher(FixedState::default()))
        }
    }

    #[inline(always)]
    fn word(&self, i: u64) -> u64 {
        match self {
            Level::Flat(v) => v.get(i as usize).copied().unwrap_or(0),
            Level::Sparse(m) => Level::sparse_word(m, i),
        }
    }

    /// A sparse level's word, out of line: a flat level is every pool's below 4M slots, and
    /// inlining the hash lookup into `Dense::pred` and `succ` made every call save and restore
    /// the registers it needs (callgrind, the swarm row: `pred`'s entry and exit were 17.7 M of
    /// its own 67.4 M instructions; moving the lookups out took 58 M off the row).
    #[cold]
    #[inline(never)]
    #[allow(clippy::disallowed_types)]
    fn sparse_word(m: &HashMap<u64, u64, FixedState>, i: u64) -> u64 {
        m.get(&i).copied().unwrap_or(0)
    }

    /// Sets bit `b` of word `i`; returns whether the word was zero before.
    #[inline(always)]
    fn set(&mut self, i: u64, b: u64) -> bool {
        let w = match self {
            Level::Flat(v) => &mut v[i as usize],
            Level::Sparse(m) => return Level::sparse_set(m, i, b),
        };
        let was_zero = *w == 0;
        *w |= 1 << b;
        was_zero
    }

    /// `set` on a sparse level, out of line (as `sparse_word`).
    #[cold]
    #[inline(never)]
    #[allow(clippy::disallowed_types)]
    fn sparse_set(m: &mut HashMap<u64, u64, FixedState>, i: u64, b: u64) -> bool {
        let w = m.entry(i).or_insert(0);
        let was_zero = *w == 0;
        *w |= 1 << b;
        was_zero
    }

    /// Clears bit `b` of word `i`; returns whether the word is zero now.
    #[inline(always)]
    fn clear(&mut self, i: u64, b: u64) -> bool {
        match self {
            Level::Flat(v) => {
                let w = &mut v[i as usize];
                *w &= !(1 << b);
                *w == 0
            }
            Level::Sparse(m) => Level::sparse_clear(m, i, b),
        }
    }

    /// `clear` on a sparse level, out of line (as `sparse_word`).
    #[cold]
    #[inline(never)]
    #[allow(clippy::disallowed_types)]
    fn sparse_clear(m: &mut HashMap<u64, u64, FixedState>, i: u64, b: u64) -> bool {
        let Some(w) = m.get_mut(&i) else { return true };
        *w &= !(1 << b);
        let zero = *w == 0;
        if zero {
            m.remove(&i);
        }
        zero
    }
}

/// Runs keyed by start over keys `0..universe`: `levels[0]` has a bit per key (a run starts
/// there) and each level above a bit per word of the one below (that word is not zero), up to a
/// single word, so finding the run before or after a key is a few word operations; `runs` holds
/// each run's end and value by its start (a hash map: memory follows the runs, not the keys; it is
/// never iterated, so its order is not the map's).
#[derive(Clone)]
#[allow(clippy::disallowed_types)]
struct Dense<V> {
    levels: Vec<Level>,
    /// Keys are below this.
    universe: u64,
    runs: HashMap<u64, (u64, V), FixedState>,
}

/// Room for this many runs in a new dense map's run table. A pool's two maps reach tens of runs
/// in a fuzzer-sized run, and growing the table from empty rehashed it about a dozen times a run
/// (0.9% of `fuzz-small`'s instructions, callgrind). The table then has 64 buckets: about
/// 1.6 KB for a holder map (24-byte entries) and 3.7 KB for an owner map (56-byte entries).
const DENSE_RUNS_AT_START: usize = 32;

/// The index of the highest set bit of a non-zero word.
#[inline(always)]
fn top(w: u64) -> u64 {
    63 - u64::from(w.leading_zeros())
}

/// The index of the lowest set bit of a non-zero word.
#[inline(always)]
fn low(w: u64) -> u64 {
    u64::from(w.trailing_zeros())
}

impl<V: RunValue> Dense<V> {
    #[allow(clippy::disallowed_types)]
    fn new(universe: u64) -> Self {
        let universe = universe.max(2);
        let mut levels = Vec::new();
        let mut items = universe;
        while items > 1 {
            let words = items.div_ceil(64);
            levels.push(Level::new(words));
            items = words;
        }
        Dense { levels, universe, runs: HashMap::with_capacity_and_hasher(DENSE_RUNS_AT_START, FixedState::default()) }
    }

    #[inline]
    fn run(&self, k: u64) -> &(u64, V) {
        self.runs.get(&k).expect("a run starts at a marked key")
    }

    /// The run starting at `k`, if one does.
    #[inline]
    fn starting_at(&self, k: u64) -> Option<&(u64, V)> {
        self.runs.get(&k)
    }

    #[inline]
    fn run_mut(&mut self, k: u64) -> &mut (u64, V) {
        self.runs.get_mut(&k).expect("a run starts at a marked key")
    }

    /// Adds the run `[k, end)` (no run starts at `k`).
    #[inline]
    fn insert(&mut self, k: u64, end: u64, v: V) {
        assert!(k < self.universe, "key {k} beyond the map's universe {}", self.universe);
        self.runs.insert(k, (end, v));
        let mut i = k;
        for l in &mut self.levels {
            if !l.set(i >> 6, i & 63) {
                break;
            }
            i >>= 6;
        }
    }

    /// Removes the run starting at `k` (there is one).
    #[inline]
    fn remove(&mut self, k: u64) {
        self.runs.remove(&k);
        self.unmark(k);
    }

    /// Removes the run that is exactly `[k, end)`, if there is one: one lookup of the run table
    /// where `starting_at` then `remove` made two (a freed page that is a run of its own).
    #[inline]
    fn remove_exact(&mut self, k: u64, end: u64) -> bool {
        match self.runs.entry(k) {
            std::collections::hash_map::Entry::Occupied(o) if o.get().0 == end => {
                o.remove();
            }
            _ => return false,
        }
        self.unmark(k);
        true
    }

    /// Clears key `k`'s bit, and each summary bit above it whose word became empty.
    #[inline]
    fn unmark(&mut self, k: u64) {
        let mut i = k;
        for l in &mut self.levels {
            if !l.clear(i >> 6, i & 63) {
                break;
            }
            i >>= 6;
        }
    }

    /// The largest run start at or below `k`.
    #[inline]
    fn pred(&self, k: u64) -> Option<u64> {
        let k = k.min(self.universe - 1);
        let m = self.levels[0].word(k >> 6) & (u64::MAX >> (63 - (k & 63)));
        if m != 0 {
            return Some((k & !63) | top(m));
        }
        self.pred_above(k >> 6)
    }

    /// The largest run start in a level-0 word below word `w`: up the levels to the first word
    /// with a bit below the one on the path, then down each level's highest bit.
    fn pred_above(&self, w: u64) -> Option<u64> {
        let mut i = w;
        for (l, level) in self.levels.iter().enumerate().skip(1) {
            let m = level.word(i >> 6) & ((1u64 << (i & 63)) - 1);
            if m != 0 {
                let mut j = (i & !63) | top(m);
                for below in self.levels[..l].iter().rev() {
                    j = (j << 6) | top(below.word(j));
                }
                return Some(j);
            }
            i >>= 6;
        }
        None
    }

    /// The smallest run start at or above `k`.
    #[inline]
    fn succ(&self, k: u64) -> Option<u64> {
        if k >= self.universe {
            return None;
        }
        let m = self.levels[0].word(k >> 6) & (u64::MAX << (k & 63));
        if m != 0 {
            return Some((k & !63) | low(m));
        }
        self.succ_above(k >> 6)
    }

    /// The smallest run start in a level-0 word above word `w` (`pred_above` mirrored).
    fn succ_above(&self, w: u64) -> Option<u64> {
        let mut i = w;
        for (l, level) in self.levels.iter().enumerate().skip(1) {
            let b = i & 63;
            let m = if b == 63 { 0 } else { level.word(i >> 6) & (u64::MAX << (b + 1)) };
            if m != 0 {
                let mut j = (i & !63) | low(m);
                for below in self.levels[..l].iter().rev() {
                    j = (j << 6) | low(below.word(j));
                }
                return Some(j);
            }
            i >>= 6;
        }
        None
    }

    /// The smallest run start in `[k, end)`: `succ` that does not climb the levels when `k`'s
    /// own word shows that none lies before `end` (a page-sized range in one word of level 0, the
    /// usual `set` and `clear`), nor past a start found beyond `end`.
    #[inline]
    fn succ_before(&self, k: u64, end: u64) -> Option<u64> {
        if k >= end || k >= self.universe {
            return None;
        }
        let m = self.levels[0].word(k >> 6) & (u64::MAX << (k & 63));
        if m != 0 {
            let s = (k & !63) | low(m);
            return (s < end).then_some(s);
        }
        if end - 1 <= k | 63 {
            return None; // the rest of `k`'s word is all of `[k, end)`
        }
        self.succ_above(k >> 6).filter(|&s| s < end)
    }

    /// `pred(k)`, answered by `found` (a run of this map) when it covers `k`: no other run starts
    /// between its start and `k`, as runs do not overlap.
    #[inline(always)]
    fn pred_from(&self, found: Option<(u64, u64)>, k: u64) -> Option<u64> {
        match found {
            Some((s, e)) if s <= k && k < e => Some(s),
            _ => self.pred(k),
        }
    }

    /// `IntervalMap::cut` (see there) over the dense runs.
    /// `found`: the map's kept run from before this change (`IntervalMap::found`), which is the
    /// run before `start` when it covers `start - 1` (the runs removed first start at or after
    /// `start`). Returns the start of the run before `start` when it was extended over the range.
    fn cut(&mut self, start: u64, end: u64, merge_with: Option<&V>, found: Option<(u64, u64)>) -> Option<u64> {
        let mut tail: Option<(u64, V)> = None;
        // The runs starting inside `[start, end)`: removed; the last may reach beyond `end`.
        let mut k = self.succ_before(start, end);
        while let Some(s) = k {
            let (e, v) = self.run(s);
            let last = *e >= end; // runs do not overlap: the next starts at or after `end`
            if *e > end {
                tail = Some((*e, v.advanced(end - s)));
            }
            self.remove(s);
            if last {
                break;
            }
            k = self.succ_before(s + 1, end);
        }
        // The run before `start`: cut back to `start`, then perhaps extended over `[start, end)`.
        let mut merged = None;
        if let Some(p) = start.checked_sub(1).and_then(|b| self.pred_from(found, b)) {
            let (e, v) = self.run_mut(p);
            if *e > start {
                if *e > end {
                    tail = Some((*e, v.advanced(end - p)));
                }
                *e = start;
            }
            if let Some(m) = merge_with {
                if *e == start && v.continued_by(start - p, m) {
                    *e = end;
                    merged = Some(p);
                }
            }
        }
        if let Some((e, v)) = tail {
            self.insert(end, e, v);
        }
        merged
    }
}

/// The runs as `derive(Debug)` of the B-tree showed them: `{start: (end, value), ...}`.
struct RunsDebug<'a, V>(&'a IntervalMap<V>);

impl<V: RunValue + std::fmt::Debug> std::fmt::Debug for RunsDebug<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.runs().map(|(s, e, v)| (s, (e, v)))).finish()
    }
}

/// What `derive(Debug)` showed before `dirty` existed: the runs (explore's state digest hashes it).
impl<V: RunValue + std::fmt::Debug> std::fmt::Debug for IntervalMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntervalMap").field("runs", &RunsDebug(self)).finish()
    }
}

impl<V: RunValue> IntervalMap<V> {
    /// A map over any `u64` keys (a B-tree).
    pub fn new() -> Self {
        IntervalMap { repr: Repr::Tree(BTreeMap::new()), dirty: Cell::new(None), found: Cell::new(None) }
    }

    /// A map whose keys all lie below `universe` (a pool's slots or pages): the dense form. A run
    /// starting at or beyond `universe` is a model bug (it panics).
    pub fn with_universe(universe: u64) -> Self {
        IntervalMap { repr: Repr::Dense(Dense::new(universe)), dirty: Cell::new(None), found: Cell::new(None) }
    }

    /// Notes that keys `[start, end]` may have changed (`invariants`).
    #[inline]
    fn touched(&self, start: u64, end: u64) {
        let (lo, hi) = self.dirty.get().map_or((start, end), |(lo, hi)| (lo.min(start), hi.max(end)));
        self.dirty.set(Some((lo, hi)));
        self.found.set(None);
    }

    pub fn len_runs(&self) -> usize {
        match &self.repr {
            Repr::Tree(t) => t.len(),
            Repr::Dense(d) => d.runs.len(),
        }
    }

    /// The runs in key order, as `(start, end, value at start)`: the structure itself, which
    /// `Debug` (and so explore's state digest) shows.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64, &V)> + '_ {
        self.runs_from(0)
    }

    /// The runs starting at or after `k`, in key order.
    fn runs_from(&self, k: u64) -> impl Iterator<Item = (u64, u64, &V)> + '_ {
        // One of the two walks, the other empty.
        let (mut tree, dense) = match &self.repr {
            Repr::Tree(t) => (Some(t.range(k..)), None),
            Repr::Dense(d) => (None, Some((d, d.succ(k)))),
        };
        let tree = std::iter::from_fn(move || tree.as_mut()?.next()).map(|(&s, (e, v))| (s, *e, v));
        let dense = dense.into_iter().flat_map(|(d, first)| {
            std::iter::successors(first, move |&s| d.succ(s + 1)).map(move |s| {
                let (e, v) = d.run(s);
                (s, *e, v)
            })
        });
        tree.chain(dense)
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
    /// Returns the key of that run before `start` when it was extended (`None`: the caller
    /// inserts the new run). `found` is the kept run from before the change (`found`).
    fn cut(&mut self, start: u64, end: u64, merge_with: Option<&V>, found: Option<(u64, u64)>) -> Option<u64> {
        match &mut self.repr {
            Repr::Tree(t) => tree_cut(t, start, end, merge_with),
            Repr::Dense(d) => d.cut(start, end, merge_with, found),
        }
    }

    /// Removes everything in `[start, end)`.
    pub fn clear(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let found = self.found.get();
        self.touched(start, end);
        // The common case (a freed page that is a run of its own): one removal, no walk.
        match &mut self.repr {
            Repr::Tree(t) => {
                if t.get(&start).is_some_and(|(e, _)| *e == end) {
                    t.remove(&start);
                    return;
                }
            }
            Repr::Dense(d) => {
                if d.remove_exact(start, end) {
                    return;
                }
            }
        }
        self.cut(start, end, None, found);
    }

    /// The value of the run that is exactly `[start, end)`, if there is one (no run is cut).
    pub fn exact(&self, start: u64, end: u64) -> Option<&V> {
        match &self.repr {
            Repr::Tree(t) => t.get(&start).filter(|(e, _)| *e == end).map(|(_, v)| v),
            Repr::Dense(d) => d.starting_at(start).filter(|(e, _)| *e == end).map(|(_, v)| v),
        }
    }

    /// Sets `[start, end)` to `v` (the value at `start`), merging with a run that ends at
    /// `start` when it continues seamlessly (a decode token appended right after its own previous
    /// token extends that run).
    pub fn set(&mut self, start: u64, end: u64, v: V) {
        if start >= end {
            return;
        }
        let found = self.found.get();
        self.touched(start, end);
        let first = match self.cut(start, end, Some(&v), found) {
            Some(p) => p,
            None => {
                match &mut self.repr {
                    Repr::Tree(t) => {
                        t.insert(start, (end, v));
                    }
                    Repr::Dense(d) => d.insert(start, end, v),
                }
                start
            }
        };
        // The run just written is the one the next write, often the range after this one (the
        // next batch of a transfer into contiguous pages), finds before its start.
        self.found.set(Some((first, end)));
    }

    /// The run that covers all of `[start, end)`, if one does: its start and value (the value at
    /// its start; a caller whose values advance with the key advances it). A query that `visit`
    /// would answer with one piece, answered with one lookup.
    #[inline]
    pub fn covering(&self, start: u64, end: u64) -> Option<(u64, &V)> {
        if start >= end {
            return None;
        }
        match &self.repr {
            Repr::Tree(t) => t.range(..=start).next_back().filter(|(_, (e, _))| *e >= end).map(|(&s, (_, v))| (s, v)),
            Repr::Dense(d) => {
                let p = d.pred_from(self.found.get(), start)?;
                let (e, v) = d.run(p);
                if *e > start {
                    self.found.set(Some((p, *e)));
                }
                (*e >= end).then_some((p, v))
            }
        }
    }

    /// Calls `f(start, end, value)` for each covered piece of `[start, end)` and
    /// `f(start, end, None)` for each gap, in key order.
    pub fn visit(&self, start: u64, end: u64, mut f: impl FnMut(u64, u64, Option<&V>)) {
        if start >= end {
            return;
        }
        let mut cursor = start;
        let mut piece = |s: u64, e: u64, v: &V| {
            if s > cursor {
                f(cursor, s, None);
            }
            let lo = s.max(cursor);
            let hi = e.min(end);
            if lo < hi {
                if lo == s {
                    f(lo, hi, Some(v));
                } else {
                    let adv = v.advanced(lo - s);
                    f(lo, hi, Some(&adv));
                }
            }
            cursor = hi.max(cursor);
        };
        match &self.repr {
            Repr::Tree(t) => {
                let first =
                    t.range(..=start).next_back().filter(|(_, (e, _))| *e > start).map(|(s, _)| *s).unwrap_or(start);
                for (&s, (e, v)) in t.range(first..end) {
                    piece(s, *e, v);
                }
            }
            Repr::Dense(d) => {
                // The run covering `start`, else the first starting inside the range.
                let covers = d.pred_from(self.found.get(), start).map(|p| (p, d.run(p).0)).filter(|&(_, e)| e > start);
                if covers.is_some() {
                    self.found.set(covers);
                }
                let mut k = covers.map(|(p, _)| p).or_else(|| d.succ_before(start, end));
                while let Some(s) = k {
                    let (e, v) = d.run(s);
                    piece(s, *e, v);
                    if *e >= end {
                        break; // runs do not overlap: the next starts at or after `end`
                    }
                    k = d.succ_before(s + 1, end);
                }
            }
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
        let from = match &self.repr {
            Repr::Tree(t) => t.range(..lo).next_back().map_or(lo, |(k, _)| *k),
            Repr::Dense(d) => lo.checked_sub(1).and_then(|b| d.pred(b)).unwrap_or(lo),
        };
        let mut prev_end = 0u64;
        for (s, e, _) in self.runs_from(from) {
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

/// `IntervalMap::cut` over the B-tree: one walk to find the runs involved.
fn tree_cut<V: RunValue>(
    runs: &mut BTreeMap<u64, (u64, V)>,
    start: u64,
    end: u64,
    merge_with: Option<&V>,
) -> Option<u64> {
    // Keys of the runs starting inside `[start, end)`, largest first (usually none or one).
    let mut inside = [0u64; 4];
    let mut n_inside = 0usize;
    let mut overflow = false;
    let mut tail: Option<(u64, (u64, V))> = None;
    let mut merged = None;
    for (&k, (e, v)) in runs.range_mut(..end).rev() {
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
                merged = Some(k);
            }
        }
        break;
    }
    if overflow {
        // Many runs inside: remove them one by one, then deal with the run before `start`
        // (none of the runs removed is it, so the pass above did not reach it).
        while let Some(k) = runs.range(start..end).next().map(|(k, _)| *k) {
            runs.remove(&k);
        }
        if let Some((&k, (e, v))) = runs.range_mut(..start).next_back() {
            *e = (*e).min(start);
            if let Some(m) = merge_with {
                if *e == start && v.continued_by(start - k, m) {
                    *e = end;
                    merged = Some(k);
                }
            }
        }
    } else {
        for k in &inside[..n_inside] {
            runs.remove(k);
        }
    }
    if let Some((k, r)) = tail {
        runs.insert(k, r);
    }
    merged
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

    /// Test access to the runs themselves, to break them on purpose.
    impl<V: RunValue> IntervalMap<V> {
        fn raw_insert(&mut self, k: u64, e: u64, v: V) {
            match &mut self.repr {
                Repr::Tree(t) => {
                    t.insert(k, (e, v));
                }
                Repr::Dense(d) => d.insert(k, e, v),
            }
        }
        fn raw_remove(&mut self, k: u64) {
            match &mut self.repr {
                Repr::Tree(t) => {
                    t.remove(&k);
                }
                Repr::Dense(d) => d.remove(k),
            }
        }
        fn raw_end(&mut self, k: u64) -> &mut u64 {
            match &mut self.repr {
                Repr::Tree(t) => &mut t.get_mut(&k).expect("run").0,
                Repr::Dense(d) => &mut d.run_mut(k).0,
            }
        }
    }

    fn both() -> [IntervalMap<P>; 2] {
        [IntervalMap::new(), IntervalMap::with_universe(1 << 20)]
    }

    #[test]
    fn set_splits_and_merges() {
        for mut m in both() {
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
    }

    /// The whole-map check the windowed `invariants` stands for.
    fn whole_map_holds(m: &IntervalMap<P>) -> bool {
        let mut prev_end = 0;
        m.runs().all(|(s, e, _)| {
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
        for mut m in both() {
            let mut next = crate::engine::rng::test_draws(0x9e37_79b9_7f4a_7c15u64);
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
            m.raw_insert(105, 105, P(9, 5));
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.invariants()));
            assert!(found.is_err(), "an empty run inside the window");
            m.raw_remove(105);
            m.invariants();
            // ...and so is an overlap with the run after the window.
            m.clear(200, 400);
            m.invariants();
            m.set(300, 310, P(1, 0));
            m.raw_insert(320, 330, P(1, 0));
            *m.raw_end(300) = 325;
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.invariants()));
            assert!(found.is_err(), "the changed run overlaps the one after it");
        }
    }

    #[test]
    fn visit_mid_run() {
        for mut m in both() {
            m.set(10, 20, P(7, 100));
            assert_eq!(m.pieces(15, 25), vec![(15, 20, Some(P(7, 105))), (20, 25, None)]);
            assert_eq!(m.pieces(0, 5), vec![(0, 5, None)]);
            assert_eq!(m.covering(12, 20), Some((10, &P(7, 100))));
            assert_eq!(m.covering(10, 21), None, "beyond the run");
            assert_eq!(m.covering(9, 12), None, "before the run");
            assert_eq!(m.covering(12, 12), None, "empty");
        }
    }

    /// The run `covering` and `visit` last found, or `set` last wrote, answers the next lookup
    /// inside it, and a `clear` forgets it: lookups after a change see the change.
    #[test]
    fn a_found_run_is_forgotten_when_the_map_changes() {
        let mut m = IntervalMap::with_universe(1 << 20);
        m.set(1_000, 5_000, P(1, 1_000));
        assert_eq!(m.covering(1_200, 1_300), Some((1_000, &P(1, 1_000))));
        assert_eq!(m.found.get(), Some((1_000, 5_000)), "the run is kept");
        assert_eq!(m.covering(4_000, 4_100), Some((1_000, &P(1, 1_000))), "answered from it");
        m.clear(3_000, 3_500);
        assert_eq!(m.found.get(), None);
        assert_eq!(m.covering(3_100, 3_200), None, "the cleared hole");
        assert_eq!(m.covering(3_600, 3_700), Some((3_500, &P(1, 3_500))), "the run after the hole");
        assert_eq!(m.pieces(3_550, 3_560), vec![(3_550, 3_560, Some(P(1, 3_550)))]);
        assert_eq!(m.found.get(), Some((3_500, 5_000)), "`visit` keeps the run it starts in");
        m.set(3_600, 3_610, P(2, 0));
        assert_eq!(
            m.pieces(3_590, 3_620),
            vec![(3_590, 3_600, Some(P(1, 3_590))), (3_600, 3_610, Some(P(2, 0))), (3_610, 3_620, Some(P(1, 3_610))),]
        );
        assert_eq!(m.covering(3_605, 3_606), Some((3_600, &P(2, 0))));
        // A `set` keeps the run it wrote (merged or not): the next write after it finds it.
        m.set(3_610, 3_615, P(2, 10));
        assert_eq!(m.found.get(), Some((3_600, 3_615)), "merged into the run before");
        m.set(3_615, 3_618, P(3, 0));
        assert_eq!(m.found.get(), Some((3_615, 3_618)));
        assert_eq!(
            m.pieces(3_598, 3_621),
            vec![
                (3_598, 3_600, Some(P(1, 3_598))),
                (3_600, 3_615, Some(P(2, 0))),
                (3_615, 3_618, Some(P(3, 0))),
                (3_618, 3_621, Some(P(1, 3_618))),
            ]
        );
        m.invariants();
    }

    /// `succ_before(k, end)` is `succ(k)` when that is below `end`, else `None`: for ranges inside
    /// one word, across words, and across empty stretches of every level, both sides of a start.
    #[test]
    fn succ_before_is_succ_bounded() {
        let mut next = crate::engine::rng::test_draws(0x5851_f42d_4c95_7f2du64);
        for universe in [64u64, 1 << 20, 1 << 34] {
            let mut m: IntervalMap<P> = IntervalMap::with_universe(universe);
            let span = universe.min(1 << 22);
            for _ in 0..300 {
                let s = next(span - 8);
                m.set(s, s + 1 + next(6), P(1, s));
            }
            let Repr::Dense(d) = &m.repr else { panic!("dense") };
            let starts: Vec<u64> = m.runs().map(|(s, _, _)| s).collect();
            for i in 0..4_000u64 {
                let k = match i % 3 {
                    0 => next(span),
                    _ => starts[next(starts.len() as u64) as usize] + next(3),
                }
                .saturating_sub(u64::from(i % 5 == 0));
                let k = k.min(universe - 1);
                let end = k + 1 + [next(4), next(64), next(5_000), next(span)][(i % 4) as usize];
                assert_eq!(d.succ_before(k, end), d.succ(k).filter(|&s| s < end), "[{k}, {end})");
            }
        }
    }

    /// The dense form keeps the B-tree's runs, pieces, exact lookups and `Debug` image under
    /// random sets and clears, short and long, dense and sparse: keys up to 2^20, so runs sit in
    /// different words of every summary level (one `l2` bit covers 2^18 keys), and searches
    /// cross empty stretches of each level both ways.
    #[test]
    fn dense_keeps_the_trees_runs() {
        let mut next = crate::engine::rng::test_draws(0x2545_f491_4f6c_dd1du64);
        for round in 0..48u64 {
            // Universes of one, three and four flat levels, and one whose two lowest levels are
            // sparse (2^34 keys: 2^28 words at level 0, 2^22 at level 1).
            let (universe, span) = [
                (64, 64),
                (1 << 20, 5_000),
                (1 << 20, 300_000),
                (1 << 20, 1 << 20),
                (1 << 34, 1 << 34),
                (1 << 34, 1 << 18),
            ][(round % 6) as usize];
            let (mut tree, mut dense) = (IntervalMap::new(), IntervalMap::with_universe(universe));
            for _ in 0..400 {
                let start = next(span);
                let len = match next(4) {
                    0 => 1 + next(span / 2 + 1),
                    _ => 1 + next(20),
                };
                let end = (start + len).min(universe);
                if next(3) == 0 {
                    tree.clear(start, end);
                    dense.clear(start, end);
                } else {
                    // Half the sets continue position-wise from their start, so that merges happen.
                    let v = P(next(3), if next(2) == 0 { start } else { next(50) });
                    tree.set(start, end, v.clone());
                    dense.set(start, end, v);
                }
                let (a, b) = (next(span), next(span));
                let (lo, hi) = (a.min(b), a.max(b) + 1);
                assert_eq!(tree.pieces(lo, hi), dense.pieces(lo, hi));
                assert_eq!(tree.exact(start, end), dense.exact(start, end));
                // `covering` is `visit` when it gives one covered piece: the run's start and value.
                for m in [&tree, &dense] {
                    let pieces = m.pieces(lo, hi);
                    let one = match pieces.as_slice() {
                        [(_, _, Some(v))] => Some(v.clone()),
                        _ => None,
                    };
                    let cov = m.covering(lo, hi).map(|(s, v)| v.advanced(lo - s));
                    assert_eq!(cov, one, "[{lo}, {hi})");
                }
            }
            tree.invariants();
            dense.invariants();
            assert_eq!(tree.len_runs(), dense.len_runs());
            assert_eq!(format!("{tree:?}"), format!("{dense:?}"));
            assert!(matches!(dense.repr, Repr::Dense(_)) && matches!(tree.repr, Repr::Tree(_)));
        }
    }
}
