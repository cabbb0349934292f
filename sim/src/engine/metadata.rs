//! Metadata slots: the small per-node buffer whose row (bootstrap room, first token) travels
//! with the KV. Slots are reused FIFO and, unless `metadata_zero_on_free`, keep their old row.

use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaRow {
    /// 0 = never written (the commit check keeps polling).
    pub room: u64,
}

#[derive(Clone)]
pub struct MetaSlots {
    rows: Vec<MetaRow>,
    free: VecDeque<u32>,
    /// Whether each slot is in `free`: a double release is caught without scanning the queue.
    /// `take` and `release` are the only changes to `free` and keep the two together (not
    /// re-checked in `invariants`, which runs after every event of a checked run: a walk of
    /// every slot there costs more than the scan it replaces).
    is_free: Vec<bool>,
    zero_on_free: bool,
}

/// Compact: the written rows with their slot, the free list as ascending runs (in FIFO order);
/// the exploration's state digest hashes this image.
impl std::fmt::Debug for MetaSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let written: Vec<(usize, u64)> =
            self.rows.iter().enumerate().filter(|(_, r)| r.room != 0).map(|(i, r)| (i, r.room)).collect();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &s in &self.free {
            match runs.last_mut() {
                Some((a, n)) if *a + *n == s => *n += 1,
                _ => runs.push((s, 1)),
            }
        }
        f.debug_struct("MetaSlots")
            .field("slots", &self.rows.len())
            .field("written", &written)
            .field("free_runs", &runs)
            .field("zero_on_free", &self.zero_on_free)
            .finish()
    }
}

impl MetaSlots {
    pub fn new(n: u32, zero_on_free: bool) -> MetaSlots {
        MetaSlots {
            rows: vec![MetaRow::default(); n as usize],
            free: (0..n).collect(),
            is_free: vec![true; n as usize],
            zero_on_free,
        }
    }
    pub fn take(&mut self) -> Option<u32> {
        let slot = self.free.pop_front()?;
        self.is_free[slot as usize] = false;
        Some(slot)
    }
    /// Gives back the slot `take` just returned, as if it had not been taken (it is taken first
    /// again).
    pub fn untake(&mut self, slot: u32) {
        assert!(!self.is_free[slot as usize], "metadata slot {slot} given back while free");
        self.is_free[slot as usize] = true;
        self.free.push_front(slot);
    }
    pub fn release(&mut self, slot: u32) {
        assert!(!self.is_free[slot as usize], "metadata slot {slot} released twice");
        self.is_free[slot as usize] = true;
        if self.zero_on_free {
            self.rows[slot as usize] = MetaRow::default();
        }
        self.free.push_back(slot);
    }
    pub fn write(&mut self, slot: u32, room: u64) {
        self.rows[slot as usize] = MetaRow { room };
    }
    pub fn row(&self, slot: u32) -> MetaRow {
        self.rows[slot as usize]
    }
    pub fn in_use(&self) -> usize {
        self.rows.len() - self.free.len()
    }
    pub fn invariants(&self) {
        assert!(self.free.len() <= self.rows.len(), "more free metadata slots than slots");
    }
}
