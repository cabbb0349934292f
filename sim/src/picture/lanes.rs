//! Request lanes: which requests get a lane on the SVG page map, and each request's phase spans,
//! laid out from the model's lifecycle-phase records (`crate::lifecycle`) — never rebuilt from the
//! memory log, which would be a second state machine. [`spans_of`] is the one place the pictures
//! turn records into spans: the SVG page map draws its lanes from it, and the Perfetto export
//! (`picture::perfetto`) its request and leg slices, so the two cannot draw a request differently.
//!
//! A request's lanes are three rows: the router's (arrival to response), its prefill leg's and its
//! decode leg's. On a leg's row each labelled phase record (`Phase::label`) starts a span of that
//! phase (per-chunk `prefill` records continue one span, as a `running` after `running` does), the
//! span ends at the next labelled record of another phase or when the node forgets the request
//! (`Phase::Left`), and a span still open (a leg that is `orphaned` or `leaked`, or a run cut
//! short) ends at the end of the run. A leg the model starts again on another node after it left
//! opens a new span there. The layout only reads the records; it decides nothing about phases.

use crate::check::oracle::Violation;
use crate::lifecycle::{Lane, Phase, PhaseRecord};
use crate::types::{Instant, NodeId, RequestId};
use std::collections::BTreeSet;

/// Lanes drawn besides the requests a violation names (which are all drawn): the requests whose
/// pages a violation's read covered first, then the earliest requests. Keeps the picture small.
pub const MAX_OTHER_LANES: usize = 8;

/// A request's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Row {
    Router,
    Prefill,
    Decode,
}

impl Row {
    pub fn name(self) -> &'static str {
        match self {
            Row::Router => "router",
            Row::Prefill => "prefill",
            Row::Decode => "decode",
        }
    }

    /// The row of a record's lane.
    pub fn of(lane: Lane) -> Row {
        match lane {
            Lane::Router => Row::Router,
            Lane::Prefill(_) => Row::Prefill,
            Lane::Decode(_) => Row::Decode,
        }
    }
}

/// One drawn span: request `r` was in `phase` on `row` (at `node` for a leg) from `from` to `to`.
/// The router's span is named `request`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub r: RequestId,
    pub row: Row,
    pub node: Option<NodeId>,
    pub phase: &'static str,
    pub from: Instant,
    pub to: Instant,
    /// Whether the span begins a stay on its row: nothing was open there before it (the row's
    /// first span, or the first after the node forgot the request), or what was open was on
    /// another node. A stay's spans are back to back; [`stays`] groups them (the Perfetto
    /// export draws a leg's stay as one slice with its phases nested inside).
    pub opens: bool,
    /// The record that ended the span: the next phase's, `Left`, the router's `Responded` (with
    /// the response's status and tokens); `None` when it was still open at the end of the run.
    pub closed_by: Option<Phase>,
}

/// The name of the router's span.
pub const REQUEST: &str = "request";

/// The spans of request `r`, from its records in `log` (in the model's order; `log` may hold
/// other requests' records too, or only `r`'s), with spans still open ending at `end`. Rows in
/// the order router, prefill, decode; spans of a row in time order.
pub fn spans_of(log: &[PhaseRecord], r: RequestId, end: Instant) -> Vec<Span> {
    /// The span open on a row: (node, phase, from, opens).
    type Open = Option<(Option<NodeId>, &'static str, Instant, bool)>;
    let mut out = Vec::new();
    let mut open: [Open; 3] = [None; 3];
    let close = |out: &mut Vec<Span>, row: Row, o: &mut Open, at, by| {
        if let Some((node, phase, from, opens)) = o.take() {
            out.push(Span { r, row, node, phase, from, to: at, opens, closed_by: by });
        }
    };
    for p in crate::lifecycle::of_request(log, r) {
        let row = Row::of(p.lane);
        let slot = &mut open[row as usize];
        let label = match p.phase {
            Phase::Arrived => Some(REQUEST),
            Phase::Responded { .. } | Phase::Left => {
                close(&mut out, row, slot, p.at, Some(p.phase));
                continue;
            }
            ph => ph.label(),
        };
        let Some(label) = label else {
            continue;
        };
        let node = p.lane.node();
        if matches!(slot, Some((n, ph, _, _)) if *n == node && *ph == label) {
            continue;
        }
        let opens = !matches!(slot, Some((n, _, _, _)) if *n == node);
        close(&mut out, row, slot, p.at, Some(p.phase));
        *slot = Some((node, label, p.at, opens));
    }
    for (row, slot) in [Row::Router, Row::Prefill, Row::Decode].into_iter().zip(open.iter_mut()) {
        close(&mut out, row, slot, end, None);
    }
    out.sort_by_key(|s| (s.row, s.from, s.to));
    out
}

/// `spans` (as [`spans_of`] returns them) cut into stays: each run of back-to-back spans of one
/// row on one node, from a span that [`Span::opens`] to the next. Never empty.
pub fn stays(spans: &[Span]) -> impl Iterator<Item = &[Span]> {
    spans.chunk_by(|_, next| !next.opens)
}

/// The requests that get a lane, in id order: every request a violation names, then up to
/// `max_other` others — `victims` (the holders of the pages a violation covered, as the caller
/// found them) first, then the earliest requests with records. Returns the lanes and how many of
/// them a violation names.
pub fn pick(
    log: &[PhaseRecord],
    violations: &[Violation],
    victims: &[RequestId],
    max_other: usize,
) -> (Vec<RequestId>, usize) {
    let named: BTreeSet<RequestId> = violations.iter().filter_map(|v| v.request).collect();
    let with_records: BTreeSet<RequestId> = log.iter().map(|p| p.r).collect();
    let mut others: BTreeSet<RequestId> = BTreeSet::new();
    let candidates = victims.iter().copied().chain(with_records.iter().copied());
    for r in candidates {
        if others.len() == max_other {
            break;
        }
        if !named.contains(&r) && with_records.contains(&r) {
            others.insert(r);
        }
    }
    let n = named.len();
    (named.into_iter().chain(others).collect::<BTreeSet<_>>().into_iter().collect(), n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DecodeIdx, PrefillIdx};

    fn rec(at: u64, r: u32, lane: Lane, phase: Phase) -> PhaseRecord {
        PhaseRecord { at: Instant(at), seq: at, r: RequestId(r), lane, phase }
    }

    #[test]
    fn chunks_merge_left_closes_and_a_restart_opens_a_new_span() {
        let (p0, p1, d0) = (Lane::Prefill(PrefillIdx(0)), Lane::Prefill(PrefillIdx(1)), Lane::Decode(DecodeIdx(0)));
        let log = vec![
            rec(1, 7, Lane::Router, Phase::Arrived),
            rec(2, 7, p0, Phase::Bootstrap),
            rec(2, 7, d0, Phase::Prealloc),
            rec(3, 7, p0, Phase::Waiting),
            rec(4, 7, p0, Phase::Prefill { from: 0, to: 10 }),
            rec(5, 7, p0, Phase::Prefill { from: 10, to: 20 }),
            rec(5, 9, p0, Phase::Bootstrap), // another request: not drawn in r7's lanes
            rec(6, 7, p0, Phase::Left),      // a crash forgets it
            rec(7, 7, p1, Phase::Bootstrap), // started again on prefill-1
            rec(8, 7, d0, Phase::Transfer),
            rec(9, 7, d0, Phase::Leaked),
            rec(9, 7, d0, Phase::Answered { status: 200 }),
            rec(10, 7, Lane::Router, Phase::Responded { status: 200, tokens: 3 }),
        ];
        let spans = spans_of(&log, RequestId(7), Instant(20));
        let got: Vec<(Row, Option<String>, &str, u64, u64)> =
            spans.iter().map(|s| (s.row, s.node.map(|n| n.to_string()), s.phase, s.from.0, s.to.0)).collect();
        let p = |i: u16| Some(format!("prefill-{i}"));
        let d = Some("decode-0".to_string());
        assert_eq!(
            got,
            vec![
                (Row::Router, None, REQUEST, 1, 10),
                (Row::Prefill, p(0), "bootstrap", 2, 3),
                (Row::Prefill, p(0), "waiting", 3, 4),
                (Row::Prefill, p(0), "prefill", 4, 6),
                (Row::Prefill, p(1), "bootstrap", 7, 20),
                (Row::Decode, d.clone(), "prealloc", 2, 8),
                (Row::Decode, d.clone(), "transfer", 8, 9),
                (Row::Decode, d, "leaked", 9, 20),
            ]
        );
        // What began each stay and ended each span: the crash's `Left` ends the stay on
        // prefill-0, the restart on prefill-1 begins another; the response's record closes the
        // router's span, the run's end the spans still open.
        let opens: Vec<bool> = spans.iter().map(|s| s.opens).collect();
        assert_eq!(opens, vec![true, true, false, false, true, true, false, false]);
        let by: Vec<Option<Phase>> = spans.iter().map(|s| s.closed_by).collect();
        assert_eq!(
            by,
            vec![
                Some(Phase::Responded { status: 200, tokens: 3 }),
                Some(Phase::Waiting),
                Some(Phase::Prefill { from: 0, to: 10 }),
                Some(Phase::Left),
                None,
                Some(Phase::Transfer),
                Some(Phase::Leaked),
                None,
            ]
        );
        let stays: Vec<(Row, usize)> = stays(&spans).map(|st| (st[0].row, st.len())).collect();
        assert_eq!(stays, vec![(Row::Router, 1), (Row::Prefill, 3), (Row::Prefill, 1), (Row::Decode, 3)]);
        // Only r7's records given: the same spans.
        let own: Vec<PhaseRecord> = log.iter().filter(|p| p.r == RequestId(7)).copied().collect();
        assert_eq!(spans_of(&own, RequestId(7), Instant(20)), spans);
    }

    /// A record on another node while a span is open (no `Left` between) ends the stay there and
    /// begins one on the new node, even in the same phase.
    #[test]
    fn a_record_on_another_node_begins_a_new_stay() {
        let (p0, p1) = (Lane::Prefill(PrefillIdx(0)), Lane::Prefill(PrefillIdx(1)));
        let log = vec![rec(1, 3, p0, Phase::Bootstrap), rec(2, 3, p1, Phase::Bootstrap), rec(3, 3, p1, Phase::Waiting)];
        let spans = spans_of(&log, RequestId(3), Instant(9));
        let got: Vec<(u64, u64, bool)> = spans.iter().map(|s| (s.from.0, s.to.0, s.opens)).collect();
        assert_eq!(got, vec![(1, 2, true), (2, 3, true), (3, 9, false)]);
        assert_eq!(stays(&spans).count(), 2);
    }

    #[test]
    fn pick_keeps_every_named_request_and_caps_the_others() {
        let log: Vec<PhaseRecord> = (0..20).map(|r| rec(u64::from(r), r, Lane::Router, Phase::Arrived)).collect();
        let v = |r: u32| Violation {
            request: Some(RequestId(r)),
            ..Violation::new(crate::check::oracle::Kind::CrossTenantRead, "test", Instant(0))
        };
        let (lanes, named) = pick(&log, &[v(15), v(3), v(15)], &[RequestId(11), RequestId(3)], 3);
        assert_eq!(named, 2);
        let ids: Vec<u32> = lanes.iter().map(|r| r.0).collect();
        assert_eq!(ids, vec![0, 1, 3, 11, 15]); // victim 11 first, then the earliest (0, 1)
    }
}
