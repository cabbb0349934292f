//! A node's incarnation: whether it is up, its restart count (the epoch) and whether a tick is
//! queued for it. One rule for both node kinds: a crash takes the node down and starts a new
//! epoch, so every event that carries the old epoch is addressed to the dead incarnation and is
//! dropped; a restart brings it back up in that new epoch; a node has at most one tick queued.

/// See the module documentation. Part of `PrefillNode` and `DecodeNode` (and so of their
/// `Debug` image, which the explorer's state digest hashes).
#[derive(Clone, Debug)]
pub struct Incarnation {
    alive: bool,
    epoch: u32,
    tick_pending: bool,
}

impl Default for Incarnation {
    fn default() -> Self {
        Incarnation { alive: true, epoch: 0, tick_pending: false }
    }
}

impl Incarnation {
    /// The node is up: not crashed, or restarted since.
    pub fn alive(&self) -> bool {
        self.alive
    }

    /// The restart count: an event carrying an older epoch is addressed to a crashed incarnation.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The node crashes: down, in a new epoch.
    pub(crate) fn crash(&mut self) {
        self.alive = false;
        self.epoch += 1;
    }

    /// Comes back up after a crash (`World::restart`); the crash already advanced the epoch.
    pub(crate) fn restart(&mut self) {
        self.alive = true;
    }

    /// Marks a tick pending; true when none was (the caller schedules it, `World::tick`).
    pub(crate) fn arm_tick(&mut self) -> bool {
        !std::mem::replace(&mut self.tick_pending, true)
    }

    /// Whether a tick is pending (armed and not yet run).
    pub(crate) fn tick_pending(&self) -> bool {
        self.tick_pending
    }

    /// The pending tick ran, or found nothing to do: the next change schedules one again.
    pub(crate) fn disarm_tick(&mut self) {
        self.tick_pending = false;
    }
}

#[cfg(test)]
mod tests {
    use super::Incarnation;

    #[test]
    fn a_crash_starts_a_new_epoch_and_a_restart_keeps_it() {
        let mut life = Incarnation::default();
        assert!(life.alive() && life.epoch() == 0);
        life.crash();
        assert!(!life.alive() && life.epoch() == 1, "events of epoch 0 are now addressed to the dead incarnation");
        life.restart();
        assert!(life.alive() && life.epoch() == 1);
    }

    #[test]
    fn at_most_one_tick_is_queued() {
        let mut life = Incarnation::default();
        assert!(life.arm_tick(), "the first change schedules a tick");
        assert!(!life.arm_tick(), "a second change finds it queued");
        life.disarm_tick();
        assert!(life.arm_tick());
    }
}
