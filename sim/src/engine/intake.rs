//! Intake, per role: the tokenizer's context check, the scheduler's `max_req_input_len` check,
//! and the capacity check, with `reject_mode` deciding whether a scheduler rejection finishes the
//! request at once or leaves a pending abort with a one-token stub that walks on.

use crate::config::{Knobs, RejectMode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intake {
    /// Admitted with this many prompt tokens.
    Accept(u64),
    /// Marked "to be finished with an abort (status)", input replaced by a one-token stub.
    Stub { status: u16, reason: &'static str },
    /// Finished at once with `status`.
    Reject { status: u16, reason: &'static str },
}

/// sglang's rule: `max_req_len = min(context_len - 1, pool_tokens - 1)`, and the scheduler
/// rejects `len >= max_req_len - 5`.
pub fn max_req_input_len(context_len: u64, pool_tokens: u64) -> u64 {
    context_len.saturating_sub(1).min(pool_tokens.saturating_sub(1)).saturating_sub(5)
}

pub fn intake(k: &Knobs, context_len: u64, pool_tokens: u64, len: u64) -> Intake {
    if len + k.tokenizer_reserved_tokens >= context_len {
        return Intake::Reject { status: 400, reason: "tokenizer: prompt longer than the context" };
    }
    if len >= max_req_input_len(context_len, pool_tokens) {
        let reason = "scheduler: prompt reaches max_req_input_len";
        return match k.reject_mode {
            RejectMode::StubPending => Intake::Stub { status: 400, reason },
            RejectMode::FinishNow => Intake::Reject { status: 400, reason },
        };
    }
    if len > pool_tokens {
        return Intake::Reject { status: 400, reason: "capacity: prompt larger than the KV pool" };
    }
    Intake::Accept(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incident_threshold() {
        assert_eq!(max_req_input_len(1_048_576, 681_280), 681_274);
        let k = (crate::config::profile("sglang-0.5.16").unwrap().knobs)();
        assert_eq!(intake(&k, 1_048_576, 681_280, 681_273), Intake::Accept(681_273));
        assert!(matches!(intake(&k, 1_048_576, 681_280, 681_274), Intake::Stub { .. }));
        assert!(matches!(intake(&k, 1_048_576, 681_280, 1_048_575), Intake::Stub { .. }));
        assert!(matches!(intake(&k, 1_048_576, 681_280, 1_048_576), Intake::Reject { .. }));
    }
}
