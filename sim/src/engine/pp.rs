//! Pipeline-parallel stages of a prefill instance (`[[prefill]] pp_stages`, sglang `--pp-size`),
//! modelled only as far as the two catalogue rows they carry need (lifecycle reference §3; bug
//! catalogue rows metadata-slot-collision and pp-bootstrap-divergence). One stage (the default) is
//! the model without stages: nothing here changes a run then.
//!
//! - Metadata rows: each stage's last chunk writes the request's row into decode's one slot
//!   (`pp_metadata_writer = every_stage`, the Mooncake sender of the 0.5.16 and 0.5.22 wheels) or
//!   only the last stage does (`last_stage`, the Mori sender's `pp_group.is_last_rank` gate).
//!   Decode commits on the first row that shows its room, so with several writers a row that
//!   lands late (a scripted or drawn `metadata_lag`, which delays the first stage that writes)
//!   can land after decode freed the slot and gave it to the next request (sglang #22716).
//! - Bootstrap consensus: the stages pop a bootstrapped request one event-loop iteration after
//!   another (0.5.16 wheel `managers/scheduler_pp_mixin.py` `process_bootstrapped_queue`, each
//!   stage handing the consensus rids to the next); the model takes one iteration as the forward
//!   pass's base cost (`prefill_base_us`). With `pp_bootstrap_consensus = local_repoll` each stage
//!   polls its own sender again when it pops (0.5.16 `disaggregation/prefill.py`
//!   `pop_bootstrapped(rids_to_check=…)`): an abort that lands after the first stage popped the
//!   request and before the last did makes the later stages drop it while the first schedules it.
//!   The stages' queue histories diverge, their fixed P2P send/recv schedule no longer pairs, and
//!   every scheduler blocks: the instance is wedged — no forward pass ends, no queue is polled,
//!   no abort or timer is handled — until it restarts, while its bootstrap server and heartbeats
//!   still answer (sglang #26912, #34572; PR #31030's pp_size = 2 walk-through). With
//!   `follow_rank0` (0.5.22 `disaggregation/utils.py` `poll_and_all_reduce_prefill_pp`: rank 0
//!   polls, `pp_sync_polls` hands its polls on) every stage applies the first stage's decision,
//!   and the abort is handled as without stages.

use crate::config::{PpBootstrapConsensus, PpMetadataWriter};
use crate::types::{Duration, Instant, PrefillIdx, RequestId};
use crate::world::World;
use std::collections::BTreeMap;

/// One prefill instance's stages: how many, when the last stage pops each request the first
/// stage popped, and whether their queues diverged.
#[derive(Clone, Debug)]
pub struct PpStages {
    pub stages: u16,
    /// Requests the first stage popped whose last stage has not popped them yet, with the time
    /// it will (pruned as time passes).
    last_pop: BTreeMap<RequestId, Instant>,
    /// When the stages' queues diverged (the instance is wedged from then on).
    pub wedged_at: Option<Instant>,
}

impl PpStages {
    pub fn new(stages: u16) -> PpStages {
        PpStages { stages, last_pop: BTreeMap::new(), wedged_at: None }
    }

    pub fn wedged(&self) -> bool {
        self.wedged_at.is_some()
    }

    /// A restart clears the divergence and the pops in progress.
    pub fn reset(&mut self) {
        self.last_pop.clear();
        self.wedged_at = None;
    }
}

impl World {
    /// The first stage popped `r` from the bootstrap queue now; the later stages pop it one
    /// event-loop iteration after another.
    pub(crate) fn pp_first_stage_popped(&mut self, n: PrefillIdx, r: RequestId) {
        let stages = self.prefill[n.at()].pp().stages;
        if stages <= 1 {
            return;
        }
        let now = self.now;
        let hop = self.cfg.cost.prefill_base_us.saturating_mul(1000);
        let last = now + Duration(hop.saturating_mul(u64::from(stages - 1)));
        let pp = self.prefill[n.at()].pp_mut();
        pp.last_pop.retain(|_, t| *t > now);
        pp.last_pop.insert(r, last);
    }

    /// An abort of `r` reaches prefill instance `n`: whether its stages' schedulers do not handle
    /// it — they are already blocked (wedged), or this abort is the one that diverges their
    /// queues (`local_repoll`, the first stage popped `r` and a later stage has not yet) and
    /// wedges them now.
    pub(crate) fn pp_abort_blocked(&mut self, n: PrefillIdx, r: RequestId) -> bool {
        let now = self.now;
        let repoll = self.cfg.knobs.pp_bootstrap_consensus == PpBootstrapConsensus::LocalRepoll;
        let pp = self.prefill[n.at()].pp_mut();
        if pp.wedged() {
            return true;
        }
        let diverges = repoll && pp.last_pop.get(&r).is_some_and(|t| *t > now);
        if diverges {
            pp.wedged_at = Some(now);
        }
        diverges
    }

    /// Delays after the transfer's end at which the stages' metadata rows land in decode's slot,
    /// `half` being a row's normal delay (half a message latency) and `lag` the request's
    /// metadata lag, which delays the first stage that writes a row. One stage: one row at
    /// `half + lag`, as without stages.
    /// (An iterator, not a list: one row per job at one stage was an allocation per job.)
    pub(crate) fn pp_meta_row_delays(
        &self,
        n: PrefillIdx,
        half: Duration,
        lag: Duration,
    ) -> impl Iterator<Item = Duration> {
        let stages = self.prefill[n.at()].pp().stages;
        let writers = match self.cfg.knobs.pp_metadata_writer {
            PpMetadataWriter::EveryStage => stages.max(1),
            PpMetadataWriter::LastStage => 1,
        };
        (0..writers).map(move |i| if i == 0 { Duration(half.0 + lag.0) } else { half })
    }
}
