//! The pending events, in `(time, sequence)` order: a binary heap plus FIFO lanes for timers.
//!
//! Most events are due soon (a step's end, a message); the engines' timeouts are due long after
//! (300 s of sglang's bootstrap and waiting timers), and nearly every request arms one or two that
//! are dropped unprocessed when they fire (`World::moot`). In one heap they made it thousands deep
//! (`blis-fair-10k`: about 4,800 pending timers against about 100 other events), and every event
//! paid for that depth twice. A timer is armed `delay` after the current time, which never goes
//! back, and with a larger sequence number than any before it: the timers armed with one delay
//! come due in the order they were armed. So each delay gets a lane, a FIFO that is sorted by
//! construction, and the queue's head is the smallest of the heap's head and the lanes' fronts.
//!
//! The order is the total order of `(at, seq)` (sequence numbers are unique), whichever container
//! an event waits in: moving events between the heap and the lanes cannot change which event comes
//! next, so the lanes change no trace. A timer that would break its lane's order (never, with time
//! monotone; the check is what makes that an assumption the code does not rely on) goes to the heap.

use crate::event::Ev;
use crate::types::{Duration, Instant};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// An event and when it is due; `seq` (unique, increasing as events are queued) breaks ties.
#[derive(Clone, Debug)]
pub(crate) struct Scheduled {
    pub at: Instant,
    pub seq: u64,
    pub ev: Ev,
}

impl Scheduled {
    fn key(&self) -> (Instant, u64) {
        (self.at, self.seq)
    }
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key().cmp(&o.key())
    }
}

/// At most this many timer delays get a lane (a run has four timer kinds); timers of any other
/// delay wait in the heap.
const MAX_LANES: usize = 8;

#[derive(Clone, Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Reverse<Scheduled>>,
    /// `(delay, timers armed with it)`, each sorted by `(at, seq)`.
    lanes: Vec<(Duration, VecDeque<Scheduled>)>,
    /// The lane whose front is the smallest of the lanes' fronts (`None`: every lane is empty).
    /// A lane's front changes only when the lane was empty and a timer joins it, or when its
    /// front is taken, so this is kept up to date there, and finding the queue's head compares
    /// the heap's head with one lane front instead of walking every lane (the head is found
    /// before every event, more than once while arrivals are pending).
    first_lane: Option<usize>,
}

/// Where the queue's head waits.
#[derive(Clone, Copy)]
enum Head {
    Heap,
    Lane(usize),
}

impl EventQueue {
    /// Queues an event.
    pub fn push(&mut self, s: Scheduled) {
        self.heap.push(Reverse(s));
    }

    /// Queues a timer armed `delay` from now (`s.at` is now plus `delay`): into the lane of its
    /// delay while that keeps the lane sorted.
    pub fn push_timer(&mut self, delay: Duration, s: Scheduled) {
        let i = match self.lanes.iter().position(|(d, _)| *d == delay) {
            Some(i) => i,
            None if self.lanes.len() < MAX_LANES => {
                self.lanes.push((delay, VecDeque::new()));
                self.lanes.len() - 1
            }
            None => return self.push(s),
        };
        let lane = &mut self.lanes[i].1;
        if lane.back().is_some_and(|b| b.key() > s.key()) {
            return self.push(s);
        }
        let key = s.key();
        let was_empty = lane.is_empty();
        lane.push_back(s);
        if was_empty && self.first_lane.is_none_or(|f| self.lanes[f].1.front().is_none_or(|x| key < x.key())) {
            self.first_lane = Some(i);
        }
    }

    /// The lane with the smallest front, found by walking them (after the first lane's front was
    /// taken).
    fn find_first_lane(&self) -> Option<usize> {
        let mut best: Option<(usize, (Instant, u64))> = None;
        for (i, (_, lane)) in self.lanes.iter().enumerate() {
            if let Some(f) = lane.front() {
                if best.is_none_or(|(_, b)| f.key() < b) {
                    best = Some((i, f.key()));
                }
            }
        }
        best.map(|(i, _)| i)
    }

    #[inline]
    fn head(&self) -> Option<(Head, &Scheduled)> {
        let heap = self.heap.peek().map(|Reverse(s)| (Head::Heap, s));
        let Some(i) = self.first_lane else { return heap };
        let Some(f) = self.lanes[i].1.front() else { return heap };
        match heap {
            Some((_, h)) if h.key() < f.key() => heap,
            _ => Some((Head::Lane(i), f)),
        }
    }

    /// The next event by `(at, seq)`, left queued.
    pub fn peek(&self) -> Option<&Scheduled> {
        self.head().map(|(_, s)| s)
    }

    /// Takes the next event by `(at, seq)` if it comes no later than `key` (else `None`, the queue
    /// unchanged): `pop` when `peek` is not after `key`, with the head found once (`World` asks
    /// this before every event while arrivals are pending, and finding the head walks the lanes).
    #[inline(always)]
    pub fn pop_not_after(&mut self, key: (Instant, u64)) -> Option<Scheduled> {
        match self.head()? {
            (h, s) if s.key() <= key => self.take(h),
            _ => None,
        }
    }

    /// Takes the next event by `(at, seq)`.
    pub fn pop(&mut self) -> Option<Scheduled> {
        let h = self.head()?.0;
        self.take(h)
    }

    fn take(&mut self, h: Head) -> Option<Scheduled> {
        match h {
            Head::Heap => self.heap.pop().map(|Reverse(s)| s),
            Head::Lane(i) => self.take_from_lane(i),
        }
    }

    /// `take` of a lane's front. Out of line: timers come due a few times a request, the heap's
    /// events every step, and the lane walk inlined made every `take` save and restore the
    /// registers it needs.
    #[inline(never)]
    fn take_from_lane(&mut self, i: usize) -> Option<Scheduled> {
        let s = self.lanes[i].1.pop_front();
        self.first_lane = self.find_first_lane();
        s
    }

    /// Every pending event, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Scheduled> + '_ {
        self.heap.iter().map(|Reverse(s)| s).chain(self.lanes.iter().flat_map(|(_, l)| l.iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RequestId;

    fn ev(i: u32) -> Ev {
        Ev::Arrive { r: RequestId(i) }
    }

    /// Timers in lanes, other events in the heap, and a timer that would break its lane's order:
    /// popped in exactly the order one heap holding them all gives.
    #[test]
    fn pops_in_the_order_of_one_heap() {
        let mut q = EventQueue::default();
        let mut all = BinaryHeap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut now = 0u64;
        let mut popped_before_key = [0u32; 2];
        for i in 0..5_000u32 {
            let seq = u64::from(i) + 1;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += x % 50;
            let (delay, timer) = match x % 7 {
                0 => (300_000, true),
                1 => (60_000, true),
                2 => (x % 1_000, true),
                _ => (x % 5_000, false),
            };
            // Now and then time appears to go back for a timer (a lane must not trust it).
            let at = if x.is_multiple_of(97) { now.saturating_sub(1_000) + delay } else { now + delay };
            let s = Scheduled { at: Instant(at), seq, ev: ev(i) };
            all.push(Reverse(s.clone()));
            if timer {
                q.push_timer(Duration(delay), s);
            } else {
                q.push(s);
            }
            if x.is_multiple_of(3) {
                let a = q.pop().map(|s| s.key());
                let b = all.pop().map(|Reverse(s)| s.key());
                assert_eq!(a, b);
            } else if x.is_multiple_of(5) {
                // Popped only when not after a key near the head (an arrival's, in `World`).
                let head = all.peek().map(|Reverse(s)| s.key());
                let key = (Instant(now.saturating_sub(x % 400) + x % 300), x % 9_000);
                let a = q.pop_not_after(key).map(|s| s.key());
                let b = if head.is_some_and(|h| h <= key) { all.pop().map(|Reverse(s)| s.key()) } else { None };
                assert_eq!(a, b);
                popped_before_key[usize::from(a.is_some())] += 1;
            }
            assert_eq!(q.iter().count(), all.len());
        }
        assert!(popped_before_key.iter().all(|n| *n > 10), "both answers of pop_not_after: {popped_before_key:?}");
        while let Some(Reverse(b)) = all.pop() {
            assert_eq!(q.peek().map(Scheduled::key), Some(b.key()));
            assert_eq!(q.pop().map(|s| s.key()), Some(b.key()));
        }
        assert!(q.pop().is_none());
    }
}
