//! The router: picks a (prefill, decode) pair and a bootstrap room, sends the two legs
//! (concurrently, as sglang's routers do, or prefill first as vLLM's proxy does), and decides
//! which leg's answer the client gets (`router_on_prefill_error`).

use crate::config::{RouterMode, RouterOnPrefillError, RouterPolicy};
use crate::event::Ev;
use crate::lifecycle::{Lane, Phase};
use crate::rng::Prng;
use crate::trace::TraceRecord;
use crate::types::{DecodeIdx, Duration, PrefillIdx, RequestId, Role};
use crate::world::{Response, World};

pub struct Router {
    policy: RouterPolicy,
    rng: Prng,
    next_prefill: usize,
    next_decode: usize,
}

impl Router {
    pub fn new(seed: u64, policy: RouterPolicy) -> Router {
        Router { policy, rng: Prng::child(seed, "router"), next_prefill: 0, next_decode: 0 }
    }

    /// The round-robin counters (part of the state digest; the generator's position follows from
    /// the rooms drawn so far).
    pub fn counters(&self) -> (usize, usize) {
        (self.next_prefill, self.next_decode)
    }
}

impl World {
    fn pick(&mut self, role: Role) -> u16 {
        let n = match role {
            Role::Prefill => self.prefill.len(),
            Role::Decode => self.decode.len(),
        };
        let idx = match self.router.policy {
            RouterPolicy::RoundRobin => {
                let c = match role {
                    Role::Prefill => &mut self.router.next_prefill,
                    Role::Decode => &mut self.router.next_decode,
                };
                let i = *c % n;
                *c += 1;
                i
            }
            RouterPolicy::Random => match self.chooser.as_mut() {
                Some(c) => c.choose(crate::explore::Point::Route, n as u32) as usize,
                None => self.router.rng.below(n as u64) as usize,
            },
            RouterPolicy::LeastLoaded => match role {
                Role::Prefill => (0..n).min_by_key(|&i| (self.prefill[i].load(), i)).unwrap_or(0),
                Role::Decode => (0..n).min_by_key(|&i| (self.decode[i].load(), i)).unwrap_or(0),
            },
        };
        idx as u16
    }

    pub(crate) fn on_arrive(&mut self, r: RequestId) {
        self.phase(r, Lane::Router, Phase::Arrived);
        let p = PrefillIdx(self.pick(Role::Prefill));
        let d = DecodeIdx(self.pick(Role::Decode));
        let room = loop {
            let room = self.router.rng.next_u64() >> 1;
            if room != 0 {
                break room;
            }
        };
        self.reqs[r.idx()].route(p, d, room);
        let lat = self.msg_latency();
        self.after(lat, Ev::LegArrive { r, role: Role::Prefill });
        if self.cfg.knobs.router_mode == RouterMode::Concurrent {
            // Under exploration each leg is its own message with its own latency.
            let lat = if self.chooser.is_some() { self.msg_latency() } else { lat };
            self.after(lat, Ev::LegArrive { r, role: Role::Decode });
        }
        self.maybe_random_crash();
    }

    /// A leg's final answer reached the router.
    pub(crate) fn leg_result(&mut self, r: RequestId, role: Role, status: u16) {
        let req = &mut self.reqs[r.idx()];
        if !req.answer_leg(role, status) {
            return;
        }
        let lane = match role {
            Role::Prefill => Lane::Prefill(req.prefill()),
            Role::Decode => Lane::Decode(req.decode()),
        };
        self.phase(r, lane, Phase::Answered { status });
        let lat = self.msg_latency();
        self.after(lat, Ev::LegResult { r, role, status });
    }

    pub(crate) fn on_leg_result(&mut self, r: RequestId, role: Role, status: u16) {
        let k = &self.cfg.knobs;
        match (role, k.router_mode) {
            (Role::Decode, _) => {
                let tokens = if status == 200 { self.reqs[r.idx()].decode_tokens() } else { 0 };
                self.respond(r, status, tokens);
            }
            (Role::Prefill, RouterMode::Sequential) => {
                if self.reqs[r.idx()].client_aborted() {
                    // The client is gone: it was answered 499 and both legs were aborted
                    // (`on_client_abort`). A sequential proxy awaits prefill inside the client's
                    // handler (vLLM's disaggregated proxy examples issue the decode request from
                    // the same request task after prefill returns), so a cancelled handler never
                    // starts the decode leg; starting it here left decode holding pages for a
                    // request prefill had already freed (`page_leak/decode` on vllm-nixl, seeds
                    // 8,455 and 9,999 of a 20,000-seed campaign).
                } else if status == 200 {
                    self.after(Duration(0), Ev::LegArrive { r, role: Role::Decode });
                } else {
                    self.respond(r, status, 0);
                }
            }
            (Role::Prefill, RouterMode::Concurrent) => {
                // Lifecycle reference §5: mini_lb returns the decode leg; sglang's gateway (PR #29017)
                // cancels it; SMG cancels it only for a streaming request.
                let cancel = match k.router_on_prefill_error {
                    RouterOnPrefillError::ReturnDecodeLeg => false,
                    RouterOnPrefillError::CancelDecode => true,
                    RouterOnPrefillError::CancelDecodeWhenStreaming => self.reqs[r.idx()].streaming(),
                };
                if status != 200 && cancel {
                    self.respond(r, status, 0);
                    let lat = self.msg_latency();
                    self.after(lat, Ev::AbortAt { r, role: Role::Decode, status, from_decode: false });
                }
            }
        }
    }

    pub(crate) fn respond(&mut self, r: RequestId, status: u16, tokens: u64) {
        let now = self.now;
        if !self.reqs[r.idx()].record_response(Response { status, at: now, tokens }) {
            return;
        }
        self.responses += 1;
        self.last_response_at = now;
        self.tracer.record(now, TraceRecord::Response { r, status, tokens });
        self.phase(r, Lane::Router, Phase::Responded { status, tokens });
    }

    /// The client gives up: it gets nothing more (499 is recorded), and both legs are aborted.
    pub(crate) fn on_client_abort(&mut self, r: RequestId) {
        if self.reqs[r.idx()].response().is_some() {
            return;
        }
        self.reqs[r.idx()].client_gave_up();
        self.respond(r, 499, 0);
        let lat = self.msg_latency();
        self.after(lat, Ev::AbortAt { r, role: Role::Prefill, status: 499, from_decode: false });
        let lat = if self.chooser.is_some() { self.msg_latency() } else { lat };
        self.after(lat, Ev::AbortAt { r, role: Role::Decode, status: 499, from_decode: false });
    }
}
