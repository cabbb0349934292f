//! Fault injection: transfer failures, delay spikes, visibility lag and node crashes, each with an
//! integer probability (drawn from the `faults` generator) or scripted. Random faults stop at
//! `heal_at_ms`; after that the run must reach quiescence (the liveness phase).

use crate::config::ScriptedFault;
use crate::event::Ev;
use crate::types::{DecodeIdx, Duration, Instant, PrefillIdx, RequestId};
use crate::world::World;

/// What the fault plan says about one transfer batch.
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchFaults {
    pub fail: bool,
    pub extra_delay: Duration,
    pub visibility_lag: Duration,
}

impl World {
    /// Scripted delay of `r`'s metadata row behind its status message.
    pub(crate) fn metadata_lag(&mut self, r: RequestId) -> Duration {
        let found = self.cfg.faults.script.iter().enumerate().find_map(|(i, s)| match *s {
            ScriptedFault::MetadataLag { request, lag_ms } if request == r.0 => Some((i, lag_ms)),
            _ => None,
        });
        let Some((i, lag_ms)) = found else { return Duration::default() };
        self.script_seen[i].1 = true;
        if lag_ms > 0 {
            self.reqs[r.idx()].metadata_lag_applied();
        }
        Duration::from_ms(lag_ms)
    }

    /// The `faults.script` entries that never applied, one line each: a one-batch fault on a
    /// batch its request never scheduled, a fault on a request that never transferred
    /// (rejected, aborted or crashed before), a crash after the run's end; and faults that apply
    /// but change nothing (a delay or lag of 0 ms; random faults healed from the start). Such an
    /// entry changes nothing; the report says so rather than leave the user to think it was
    /// exercised.
    pub fn unapplied_script(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, (s, &(batches, applied))) in self.cfg.faults.script.iter().zip(&self.script_seen).enumerate() {
            if let ScriptedFault::Crash { at_ms, node, .. } = s {
                // Scheduled at the start; the run ends at quiescence, before a later crash.
                let at = Instant(0) + Duration::from_ms(*at_ms);
                if at > self.ended_at {
                    let end = self.ended_at.0;
                    out.push(format!(
                        "faults.script[{i}] (crash of {node} at {at_ms} ms) never applied: the run ended at {}.{:03} s",
                        end / 1_000_000_000,
                        end / 1_000_000 % 1000
                    ));
                    continue;
                }
                // A crash of a node another scripted crash keeps down does nothing (its restart
                // neither): the node is down from that crash's time until its restart.
                let down = self.cfg.faults.script.iter().enumerate().find(|(j, o)| match o {
                    ScriptedFault::Crash { at_ms: a, node: n, restart_after_ms: r } => {
                        n == node && (*a < *at_ms || (*a == *at_ms && *j < i)) && *at_ms < a.saturating_add(*r)
                    }
                    _ => false,
                });
                if let Some((j, ScriptedFault::Crash { at_ms: a, restart_after_ms: r, .. })) = down {
                    out.push(format!(
                        "faults.script[{i}] (crash of {node} at {at_ms} ms) never applied: {node} is down then, crashed by faults.script[{j}] from {a} ms until its restart at {} ms",
                        a.saturating_add(*r)
                    ));
                } else if self.responses == self.reqs.len() as u64 && at > self.last_response_at {
                    // Before the horizon the run goes on to a scripted crash, whose reset clears
                    // the pools; every response was given before it.
                    let last = self.last_response_at.0;
                    out.push(format!(
                        "faults.script[{i}] (crash of {node} at {at_ms} ms) came after every request had its response (the last at {}.{:03} s): the run went on to it, and it changed no response",
                        last / 1_000_000_000,
                        last / 1_000_000 % 1000
                    ));
                }
                continue;
            }
            let Some(request) = s.request() else { continue };
            if applied {
                continue;
            }
            let what = match s {
                ScriptedFault::TransferFail { .. } => "transfer_fail".to_string(),
                ScriptedFault::Delay { .. } => "delay".to_string(),
                ScriptedFault::VisibilityLag { .. } => "visibility_lag".to_string(),
                ScriptedFault::MetadataLag { .. } => "metadata_lag".to_string(),
                ScriptedFault::TransferFailAt { batch, .. } => format!("transfer_fail at batch {batch}"),
                ScriptedFault::DelayAt { batch, .. } => format!("delay at batch {batch}"),
                ScriptedFault::VisibilityLagAt { batch, .. } => format!("visibility_lag at batch {batch}"),
                ScriptedFault::Crash { .. } => continue,
            };
            let why = match (s, batches) {
                (ScriptedFault::MetadataLag { .. }, _) => {
                    format!("request {request}'s transfer never completed with a metadata row")
                }
                (_, None) => format!("request {request} never scheduled a transfer batch"),
                (_, Some(n)) => format!(
                    "request {request} scheduled {n} transfer batch{} (0..{})",
                    if n == 1 { "" } else { "es" },
                    n - 1
                ),
            };
            out.push(format!("faults.script[{i}] ({what} of request {request}) never applied: {why}"));
        }
        // Faults that apply but cannot change anything: a delay or lag of 0 ms, random faults
        // healed from the start (the same trace hash as no fault, with nothing said).
        for (i, s) in self.cfg.faults.script.iter().enumerate() {
            let zero = match s {
                ScriptedFault::Delay { delay_ms: 0, .. } | ScriptedFault::DelayAt { delay_ms: 0, .. } => "delay_ms",
                ScriptedFault::VisibilityLag { lag_ms: 0, .. }
                | ScriptedFault::VisibilityLagAt { lag_ms: 0, .. }
                | ScriptedFault::MetadataLag { lag_ms: 0, .. } => "lag_ms",
                _ => continue,
            };
            out.push(format!("faults.script[{i}] has {zero} = 0: it changes nothing"));
        }
        let f = &self.cfg.faults;
        let random: Vec<&str> = [
            ("transfer_fail", f.transfer_fail),
            ("delay_spike", f.delay_spike),
            ("visibility_lag", f.visibility_lag),
            ("node_crash", f.node_crash),
        ]
        .into_iter()
        .filter(|(_, r)| !r.is_never())
        .map(|(k, _)| k)
        .collect();
        if !random.is_empty() && f.heal_at_ms == 0 {
            out.push(format!(
                "faults.heal_at_ms = 0: the random faults ({}) are healed from the start; none fires",
                random.join(", ")
            ));
        } else {
            if !f.delay_spike.is_never() && f.delay_spike_ms == 0 {
                out.push("faults.delay_spike_ms = 0: a delay spike changes nothing".to_string());
            }
            if !f.visibility_lag.is_never() && f.visibility_lag_ms == 0 {
                out.push("faults.visibility_lag_ms = 0: a visibility lag changes nothing".to_string());
            }
        }
        out
    }

    fn healed(&self) -> bool {
        self.healed_at(self.now)
    }

    /// Whether faults have stopped by `t`. A job's batches are scheduled when the job is
    /// submitted, so each batch asks about its own start time: a batch that starts after
    /// `heal_at` carries no drawn fault, however early its job was queued.
    fn healed_at(&self, t: Instant) -> bool {
        t >= Instant(0) + Duration::from_ms(self.cfg.faults.heal_at_ms)
    }

    pub(crate) fn batch_faults(&mut self, r: RequestId, start: Instant) -> BatchFaults {
        let mut f = BatchFaults::default();
        let mut delay_ms = 0u64;
        // This batch's index among the request's batches (`ScriptedFault::TransferFailAt` and
        // the other one-batch faults name it; so do the random faults that fire on it).
        let batch = self.reqs[r.idx()].next_batch();
        let mut at_batch_delay = 0u64;
        for (s, seen) in self.cfg.faults.script.iter().zip(self.script_seen.iter_mut()) {
            if s.request() == Some(r.0) {
                seen.0 = Some(batch + 1);
            }
            let applied = match *s {
                ScriptedFault::TransferFail { request } if request == r.0 => {
                    f.fail = true;
                    true
                }
                // Applied to the request's first batch only (below).
                ScriptedFault::Delay { request, delay_ms: d } if request == r.0 => {
                    delay_ms = delay_ms.saturating_add(d);
                    true
                }
                ScriptedFault::VisibilityLag { request, lag_ms } if request == r.0 => {
                    f.visibility_lag = Duration::from_ms(lag_ms);
                    true
                }
                ScriptedFault::TransferFailAt { request, batch: b } if request == r.0 && b == batch => {
                    f.fail = true;
                    true
                }
                ScriptedFault::DelayAt { request, batch: b, delay_ms: d } if request == r.0 && b == batch => {
                    at_batch_delay = at_batch_delay.saturating_add(d);
                    true
                }
                ScriptedFault::VisibilityLagAt { request, batch: b, lag_ms } if request == r.0 && b == batch => {
                    f.visibility_lag = Duration::from_ms(lag_ms);
                    true
                }
                _ => false,
            };
            seen.1 |= applied;
        }
        // A scripted delay applies once per request, to its first batch ("`request`'s transfer
        // takes `delay_ms` longer", docs/scenario-format.md; two delays of one request add up):
        // the batches behind it in the queue move with it. Applied to every batch, it made a
        // transfer of 3,472 pages in 4-page batches take 868 delays (2.4 hours for 10 s), which a
        // guided campaign on sglang-0.5.16 reported as a prefill `page_leak` at the horizon.
        if delay_ms > 0 && self.reqs[r.idx()].spend_delay() {
            f.extra_delay = Duration::from_ms(delay_ms);
        }
        if at_batch_delay > 0 {
            f.extra_delay = Duration(f.extra_delay.0.saturating_add(Duration::from_ms(at_batch_delay).0));
        }
        if self.chooser.is_some() {
            // Exploration: at most one fault per batch, a choice while the budget lasts.
            let healed = self.healed_at(start);
            let fc = self.cfg.faults.clone();
            if let Some(c) = self.chooser.as_mut() {
                match c.batch_fault(healed) {
                    Some(crate::explore::FaultKind::TransferFail) => f.fail = true,
                    Some(crate::explore::FaultKind::Delay) => f.extra_delay = Duration::from_ms(fc.delay_spike_ms),
                    Some(crate::explore::FaultKind::VisibilityLag) => {
                        f.visibility_lag = Duration::from_ms(fc.visibility_lag_ms)
                    }
                    Some(crate::explore::FaultKind::Crash) | None => {}
                }
            }
        } else if !self.healed_at(start) {
            let fc = &self.cfg.faults;
            let request = r.0;
            let mut fired = [None, None, None];
            if self.rng_faults.chance(fc.transfer_fail) {
                f.fail = true;
                fired[0] = Some(ScriptedFault::TransferFailAt { request, batch });
            }
            if self.rng_faults.chance(fc.delay_spike) {
                f.extra_delay = Duration::from_ms(fc.delay_spike_ms);
                fired[1] = Some(ScriptedFault::DelayAt { request, batch, delay_ms: fc.delay_spike_ms });
            }
            if self.rng_faults.chance(fc.visibility_lag) {
                f.visibility_lag = Duration::from_ms(fc.visibility_lag_ms);
                fired[2] = Some(ScriptedFault::VisibilityLagAt { request, batch, lag_ms: fc.visibility_lag_ms });
            }
            for s in fired.into_iter().flatten() {
                // A request's batch index grows by one per batch (`Req::next_batch`), so a fault
                // naming (request, batch) is new unless the count is saturated: only then is the
                // list searched. (Searched always, the search was 3.7% of a pinned swarm's
                // instructions: runs with thousands of delayed batches.)
                if batch < u32::MAX || !self.fired_faults.contains(&s) {
                    self.fired_faults.push(s);
                }
            }
        }
        if f.visibility_lag.0 > 0 {
            self.reqs[r.idx()].acked_before_visible();
        }
        if f.fail || f.extra_delay.0 > 0 || f.visibility_lag.0 > 0 {
            self.reqs[r.idx()].touched_by_fault();
        }
        f
    }

    /// With probability `node_crash` per arrival, crash a random node.
    pub(crate) fn maybe_random_crash(&mut self) {
        let n = self.prefill.len() + self.decode.len();
        // Under exploration the crash is a choice; otherwise a draw (the same draws as always).
        let i = if self.chooser.is_some() {
            let healed = self.healed();
            match self.chooser.as_mut().and_then(|c| c.crash(healed, n as u32)) {
                Some(i) => i as usize,
                None => return,
            }
        } else {
            if self.healed() || !self.rng_faults.chance(self.cfg.faults.node_crash) {
                return;
            }
            let i = self.rng_faults.below(n as u64) as usize;
            // The script's equivalent: a crash at the first whole millisecond at or after now
            // (scripted crashes are in milliseconds; the shrinker keeps it only if the failure does).
            let p = self.prefill.len();
            let node = if i < p { format!("prefill-{i}") } else { format!("decode-{}", i - p) };
            let at_ms = self.now.0.div_ceil(1_000_000);
            let restart_after_ms = self.cfg.faults.crash_restart_ms;
            self.fired_faults.push(ScriptedFault::Crash { at_ms, node, restart_after_ms });
            i
        };
        let node = if i < self.prefill.len() {
            PrefillIdx(i as u16).node()
        } else {
            DecodeIdx((i - self.prefill.len()) as u16).node()
        };
        let restart_after_ms = self.cfg.faults.crash_restart_ms;
        self.after(Duration(0), Ev::Crash { node, restart_after_ms });
    }
}
