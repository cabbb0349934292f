//! Metadata slots: the small per-node buffer whose row (bootstrap room, first token) travels
//! with the KV. Slots are reused FIFO and, unless `metadata_zero_on_free`, keep their old row.

use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaRow {
    /// 0 = never written (the commit check keeps polling).
    pub room: u64,
}

#[derive(Clone, Debug)]
pub struct MetaSlots {
    rows: Vec<MetaRow>,
    free: VecDeque<u32>,
    zero_on_free: bool,
}

impl MetaSlots {
    pub fn new(n: u32, zero_on_free: bool) -> MetaSlots {
        MetaSlots { rows: vec![MetaRow::default(); n as usize], free: (0..n).collect(), zero_on_free }
    }
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop_front()
    }
    pub fn release(&mut self, slot: u32) {
        assert!(!self.free.contains(&slot), "metadata slot {slot} released twice");
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
