//! An SVG page map of a run: one panel per KV pool, virtual time on x and page id on y. Every
//! allocation (an `alloc` record's page runs, from its time to the matching `free` by the same
//! request, a pool `reset`, or the end of the run) is a rectangle per page run, filled with the
//! colour of the request's tenant; violations on a pool are drawn in red over the page runs they
//! name, at their time. Written by hand as text (no dependencies), bounded in size: a panel with
//! more rectangles than `MAX_RECTS` is rasterised to its pixel grid and drawn as merged spans.
//!
//! Under the pools, on the same time axis, request lanes (`super::lanes`): for every request a
//! violation names and a few others (`lanes::MAX_OTHER_LANES`, said in the legend), a router
//! row (arrival to response) and a row per leg with a rectangle per lifecycle phase, coloured by
//! phase, drawn from the model's phase records (never from the memory log), with each violation
//! marked on the row of its pool. Each span carries its request, row, node, phase and times as
//! `data-` attributes, so a test reads the lanes back and checks them against the records.
//!
//! Prefill pages kept in the radix cache stay drawn as their request's until evicted (the record
//! has no line for entering the cache; eviction is a `free` in the request's name).
//!
//! The run-level bookkeeping here (`PageTracker`, `request_tenants`, `pool_list`) is shared with
//! the Perfetto exporter.

use super::lanes::{self, Row};
use crate::check::oracle::{Kind, Violation};
use crate::config::SimConfig;
use crate::lifecycle::PhaseRecord;
use crate::pool::Run;
use crate::trace::{MemOp, TraceRecord};
use crate::types::{Instant, NodeId, PoolId, RequestId, Role};
use crate::xml::escape as esc;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// A page run held by a request from `since` to `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub first: u32,
    pub count: u32,
    pub r: RequestId,
    pub since: Instant,
    pub until: Instant,
}

#[derive(Clone, Copy, Debug)]
struct Open {
    end: u32,
    r: RequestId,
    since: Instant,
}

/// Which request holds which page runs of one pool, rebuilt from `alloc`/`free`/`reset`
/// records. Runs are kept as intervals, never page by page. A free only returns pages the freeing
/// request holds (as the model's allocator does with a bad free); an allocation over pages still
/// held (which the model never does) ends the previous holder's run.
#[derive(Debug, Default)]
pub(crate) struct PageTracker {
    open: BTreeMap<u32, Open>,
    /// Pages held now.
    pub held: u64,
}

impl PageTracker {
    /// Ends the parts of held runs inside `[a, b)` whose holder satisfies `pred`.
    fn cut(&mut self, a: u32, b: u32, at: Instant, pred: impl Fn(RequestId) -> bool, out: &mut Vec<Held>) {
        let hits: Vec<(u32, Open)> = self
            .open
            .range(..b)
            .rev()
            .take_while(|(_, o)| o.end > a)
            .filter(|(_, o)| pred(o.r))
            .map(|(f, o)| (*f, *o))
            .collect();
        for (f, o) in hits.into_iter().rev() {
            self.open.remove(&f);
            let (lo, hi) = (f.max(a), o.end.min(b));
            out.push(Held { first: lo, count: hi - lo, r: o.r, since: o.since, until: at });
            self.held -= u64::from(hi - lo);
            if f < lo {
                self.open.insert(f, Open { end: lo, ..o });
            }
            if hi < o.end {
                self.open.insert(hi, o);
            }
        }
    }

    pub fn alloc(&mut self, r: RequestId, runs: &[Run], at: Instant, out: &mut Vec<Held>) {
        for run in runs.iter().filter(|x| x.count > 0) {
            self.cut(run.first, run.end(), at, |_| true, out);
            self.open.insert(run.first, Open { end: run.end(), r, since: at });
            self.held += u64::from(run.count);
        }
    }

    pub fn free(&mut self, r: RequestId, runs: &[Run], at: Instant, out: &mut Vec<Held>) {
        for run in runs.iter().filter(|x| x.count > 0) {
            self.cut(run.first, run.end(), at, |h| h == r, out);
        }
    }

    /// Ends every held run (a pool reset, or the end of the run).
    pub fn reset(&mut self, at: Instant, out: &mut Vec<Held>) {
        for (f, o) in std::mem::take(&mut self.open) {
            out.push(Held { first: f, count: o.end - f, r: o.r, since: o.since, until: at });
        }
        self.held = 0;
    }
}

/// Every pool of the deployment, prefill first, with its usable pages (page 0 is reserved).
pub(crate) fn pool_list(cfg: &SimConfig) -> Vec<(PoolId, u64)> {
    let ps = cfg.knobs.page_size.max(1);
    let node = |role, i: usize| NodeId { role, index: i as u16 };
    let p = cfg.prefill.iter().enumerate().map(|(i, n)| {
        let id = node(Role::Prefill, i);
        (id, n.pool_tokens / ps)
    });
    let d = cfg.decode.iter().enumerate().map(|(i, n)| {
        let id = node(Role::Decode, i);
        (id, n.pool_tokens / ps)
    });
    p.chain(d).collect()
}

/// The pool's position in `pool_list`.
pub(crate) fn pool_index(cfg: &SimConfig, pool: PoolId) -> Option<usize> {
    let i = usize::from(pool.index);
    match pool.role {
        Role::Prefill => (i < cfg.prefill.len()).then_some(i),
        Role::Decode => (i < cfg.decode.len()).then_some(cfg.prefill.len() + i),
    }
}

/// The tenant of every request, by request id: the workload rebuilt from the configuration as
/// the world builds it, overridden by the tenants that `write` and `read` records carry.
pub(crate) fn request_tenants(cfg: &SimConfig, records: &[(Instant, TraceRecord)]) -> Vec<Option<u32>> {
    let specs = crate::client::in_id_order(cfg);
    let mut out: Vec<Option<u32>> = specs.iter().map(|s| Some(s.tenant)).collect();
    for (_, rec) in records {
        if let TraceRecord::Mem(MemOp::Write { r, tenant, .. } | MemOp::Read { r, tenant, .. }) = rec {
            if out.len() <= r.idx() {
                out.resize(r.idx() + 1, None);
            }
            out[r.idx()] = Some(tenant.0);
        }
    }
    out
}

/// Above this many rectangles a panel is rasterised to its pixel grid.
pub const MAX_RECTS: usize = 20_000;
/// Legend entries for tenants before "…".
const LEGEND_TENANTS: usize = 20;
/// Violations labelled in text per panel (all are drawn, with a hover title), in rows.
const MAX_LABELS: usize = 12;
const LABEL_ROWS: usize = 3;

const LEFT: f64 = 78.0;
const PLOT_W: f64 = 1000.0;
const PANEL_H: f64 = 180.0;
const PANEL_GAP: f64 = 64.0;
const TOP: f64 = 64.0;
const LEGEND_W: f64 = 250.0;
const FREE_FILL: &str = "#f3f3f3";
const RED: &str = "#e00000";

/// A tenant's fill colour: hues a golden angle apart, three lightness levels.
pub fn tenant_colour(t: Option<u32>) -> String {
    let Some(t) = t else {
        return "#9a9a9a".to_string();
    };
    let h = (f64::from(t) * 137.507_764) % 360.0;
    let l = [0.55, 0.40, 0.68][(t % 3) as usize];
    let s = 0.62;
    let c = (1.0 - (2.0 * l - 1.0_f64).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let to = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    format!("#{:02x}{:02x}{:02x}", to(r), to(g), to(b))
}

/// A step of 1, 2 or 5 times a power of ten giving about `target` ticks over `range`.
fn nice_step(range: f64, target: f64) -> f64 {
    let raw = (range / target).max(f64::MIN_POSITIVE);
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let k = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    k * p
}

fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{v:.decimals$}")
}

/// Thousands separators for page counts (also the campaign report's).
pub(crate) fn group(n: u64) -> String {
    let s = n.to_string();
    let mut o = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    o
}

/// One panel's geometry.
struct Panel {
    top: f64,
    pages: u64,
    t_end: f64,
}

impl Panel {
    fn x(&self, t: Instant) -> f64 {
        LEFT + (t.0 as f64).min(self.t_end) / self.t_end * PLOT_W
    }
    fn y(&self, page: u64) -> f64 {
        self.top + PANEL_H - page as f64 / self.pages as f64 * PANEL_H
    }
}

/// A rectangle in pixels with its tenant.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rect {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    tenant: Option<u32>,
}

/// Exact rectangles, one per held page run, with edges snapped to whole pixels (shared edges
/// snap alike, so neighbours leave no seams) and at least a pixel wide and tall so short or
/// small allocations still show.
fn exact_rects(p: &Panel, held: &[Held], tenants: &[Option<u32>]) -> Vec<Rect> {
    held.iter()
        .map(|s| {
            let (x0, x1) = (p.x(s.since).round(), p.x(s.until).round());
            let (y0, y1) = (p.y(u64::from(s.first) + u64::from(s.count)).round(), p.y(u64::from(s.first)).round());
            Rect {
                x: x0,
                y: y0.min(p.top + PANEL_H - 1.0),
                w: (x1 - x0).max(1.0),
                h: (y1 - y0).max(1.0),
                tenant: tenants.get(s.r.idx()).copied().flatten(),
            }
        })
        .collect()
}

/// Rasterises held runs onto the panel's pixel grid (each pixel takes the tenant covering most
/// of it, and stays free when less than half of it is held), then emits horizontal spans of one
/// tenant merged with identical spans in the rows below.
fn raster_rects(p: &Panel, held: &[Held], tenants: &[Option<u32>]) -> Vec<Rect> {
    const NONE: u32 = u32::MAX;
    const UNKNOWN: u32 = u32::MAX - 1;
    let (w, h) = (PLOT_W as usize, PANEL_H as usize);
    let mut best = vec![(NONE, 0f32, 0f32); w * h];
    for s in held {
        let t = tenants.get(s.r.idx()).copied().flatten().unwrap_or(UNKNOWN);
        let x0 = p.x(s.since) - LEFT;
        let x1 = p.x(s.until) - LEFT;
        let y0 = p.y(u64::from(s.first) + u64::from(s.count)) - p.top;
        let y1 = p.y(u64::from(s.first)) - p.top;
        let (cx0, cx1) = (x0.floor() as usize, (x1.ceil() as usize).min(w));
        let (cy0, cy1) = (y0.floor() as usize, (y1.ceil() as usize).min(h));
        for cy in cy0..cy1 {
            let fy = (y1.min(cy as f64 + 1.0) - y0.max(cy as f64)).max(0.0);
            for cx in cx0..cx1 {
                let fx = (x1.min(cx as f64 + 1.0) - x0.max(cx as f64)).max(0.0);
                let a = (fx * fy) as f32;
                let c = &mut best[cy * w + cx];
                c.2 += a;
                if a > c.1 {
                    c.0 = t;
                    c.1 = a;
                }
            }
        }
    }
    // Horizontal spans per row, then vertical merging of identical spans.
    let mut open: BTreeMap<(usize, usize, u32), (usize, usize)> = BTreeMap::new(); // -> (top row, rows)
    let mut out = Vec::new();
    let emit = |out: &mut Vec<Rect>, (x0, x1, t): (usize, usize, u32), (top, rows): (usize, usize)| {
        out.push(Rect {
            x: LEFT + x0 as f64,
            y: p.top + top as f64,
            w: (x1 - x0) as f64,
            h: rows as f64,
            tenant: (t != UNKNOWN).then_some(t),
        });
    };
    for cy in 0..=h {
        let mut row = Vec::new();
        if cy < h {
            let mut cx = 0;
            while cx < w {
                let c = best[cy * w + cx];
                let t = if c.2 >= 0.5 { c.0 } else { NONE };
                let mut e = cx + 1;
                while e < w {
                    let d = best[cy * w + e];
                    let td = if d.2 >= 0.5 { d.0 } else { NONE };
                    if td != t {
                        break;
                    }
                    e += 1;
                }
                if t != NONE {
                    row.push((cx, e, t));
                }
                cx = e;
            }
        }
        let row_set: BTreeSet<(usize, usize, u32)> = row.iter().copied().collect();
        let ended: Vec<(usize, usize, u32)> = open.keys().filter(|k| !row_set.contains(k)).copied().collect();
        for k in ended {
            let v = open.remove(&k).expect("present");
            emit(&mut out, k, v);
        }
        for k in row {
            open.entry(k).or_insert((cy, 0)).1 += 1;
        }
    }
    out
}

fn rects_for(p: &Panel, held: &[Held], tenants: &[Option<u32>], max_rects: usize) -> (Vec<Rect>, bool) {
    if held.len() <= max_rects {
        (exact_rects(p, held, tenants), false)
    } else {
        (raster_rects(p, held, tenants), true)
    }
}

/// The SVG page map of a run: a panel per pool (time on x, page id on y), a rectangle per held
/// page run coloured by tenant, violations in red at their time over their page runs, a legend.
/// Below the pools, request lanes (`super::lanes`) drawn from `phases`, the run's lifecycle log
/// (`World::lifecycle`; empty draws no lanes), on the same time axis. `schedule`: the choice
/// string of an explored schedule the run followed (`kvsim run --choices`), named in the title.
pub fn page_map_svg(
    cfg: &SimConfig,
    records: &[(Instant, TraceRecord)],
    phases: &[PhaseRecord],
    violations: &[Violation],
    schedule: Option<&str>,
) -> String {
    page_map_svg_with(cfg, records, phases, violations, schedule, MAX_RECTS)
}

/// `page_map_svg` with the number of rectangles above which a panel is rasterised.
fn page_map_svg_with(
    cfg: &SimConfig,
    records: &[(Instant, TraceRecord)],
    phases: &[PhaseRecord],
    violations: &[Violation],
    schedule: Option<&str>,
    max_rects: usize,
) -> String {
    // Decode steps as the reads, page allocations and writes they stand for.
    let expanded = crate::trace::expand_records(records);
    let records = &*expanded;
    let pools = pool_list(cfg);
    let tenants = request_tenants(cfg, records);
    let mut trackers: Vec<PageTracker> = pools.iter().map(|_| PageTracker::default()).collect();
    let mut held: Vec<Vec<Held>> = pools.iter().map(|_| Vec::new()).collect();
    let mut resets: Vec<Vec<Instant>> = pools.iter().map(|_| Vec::new()).collect();
    let mut t_end = Instant(0);
    for (at, rec) in records {
        let TraceRecord::Mem(op) = rec else {
            if let TraceRecord::Response { .. } = rec {
                t_end = t_end.max(*at);
            }
            continue;
        };
        t_end = t_end.max(*at);
        let i = match op {
            MemOp::Alloc { pool, .. } | MemOp::Free { pool, .. } | MemOp::Reset { pool, .. } => pool_index(cfg, *pool),
            _ => None,
        };
        let Some(i) = i else {
            continue;
        };
        match op {
            MemOp::Alloc { r, pages, .. } => trackers[i].alloc(*r, pages, *at, &mut held[i]),
            MemOp::Free { r, pages, .. } => trackers[i].free(*r, pages, *at, &mut held[i]),
            _ => {
                trackers[i].reset(*at, &mut held[i]);
                resets[i].push(*at);
            }
        }
    }
    if t_end.0 == 0 {
        t_end = records.last().map_or(Instant(1), |r| r.0).max(Instant(1));
    }
    for (i, t) in trackers.iter_mut().enumerate() {
        t.reset(t_end, &mut held[i]);
    }
    let runs: Vec<usize> = held.iter().map(Vec::len).collect();
    let after = split_at_responses(records, &mut held);
    // A little room on the right for markers at the very end.
    let t_scale = t_end.0 as f64 * 1.02;

    // Legend order: readers of foreign KV, then victims, then by page-time held.
    let mut area: BTreeMap<Option<u32>, f64> = BTreeMap::new();
    for (i, hs) in held.iter().enumerate() {
        let pages = (pools[i].1 + 1) as f64;
        for s in hs.iter().chain(&after[i]) {
            let t = tenants.get(s.r.idx()).copied().flatten();
            *area.entry(t).or_default() += f64::from(s.count) / pages * (s.until.0 - s.since.0) as f64;
        }
    }
    // Readers: tenants of requests that read another tenant's KV; victims: whose KV was read.
    let mut readers: BTreeSet<u32> = BTreeSet::new();
    let mut victims: BTreeSet<u32> = BTreeSet::new();
    for v in violations.iter().filter(|v| v.kind == Kind::CrossTenantRead) {
        readers.extend(v.tenant.map(|t| t.0));
        victims.extend(v.victim_tenants.iter().map(|t| t.0));
    }
    let rank = |t: Option<u32>| match t {
        Some(t) if readers.contains(&t) => 0,
        Some(t) if victims.contains(&t) => 1,
        _ => 2,
    };
    let mut order: Vec<(Option<u32>, f64)> = area.into_iter().collect();
    order.sort_by(|a, b| rank(a.0).cmp(&rank(b.0)).then(b.1.total_cmp(&a.1)).then(a.0.cmp(&b.0)));
    let roles: Vec<(Option<u32>, &str)> = order
        .iter()
        .map(|(t, _)| {
            let role = match (t.is_some_and(|t| readers.contains(&t)), t.is_some_and(|t| victims.contains(&t))) {
                (true, true) => "read foreign KV · victim",
                (true, false) => "read foreign KV",
                (false, true) => "victim",
                (false, false) => "",
            };
            (*t, role)
        })
        .collect();

    let n = pools.len().max(1);
    // A leak's holders first (a `page_leak` names no request: its holders are whose lanes show
    // it), then the holders of the pages the other violations covered.
    let mut victims: Vec<RequestId> = Vec::new();
    for h in violations.iter().flat_map(|v| &v.holders).chain(&victim_requests(cfg, &held, violations)) {
        if !victims.contains(h) {
            victims.push(*h);
        }
    }
    // No lifecycle log (an exporter that did not keep one), no lanes.
    let (lane_reqs, named) = match phases.is_empty() {
        true => (Vec::new(), 0),
        false => lanes::pick(phases, violations, &victims, lanes::MAX_OTHER_LANES),
    };
    let lanes_top = TOP + 18.0 + n as f64 * (PANEL_H + PANEL_GAP);
    let width = LEFT + PLOT_W + 24.0 + LEGEND_W;
    let legend_h = TOP + 40.0 + 18.0 * (order.len().min(LEGEND_TENANTS) as f64 + 10.0);
    let lanes_h = if lane_reqs.is_empty() { 0.0 } else { lanes_height(lane_reqs.len()) + PANEL_GAP };
    let height = (TOP + n as f64 * (PANEL_H + PANEL_GAP) + 10.0 + lanes_h).max(legend_h);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{width:.0}" height="{height:.0}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">KV page map · {} · profile {} · seed {}{}</text>"#,
        esc(&cfg.name),
        esc(&cfg.profile),
        cfg.seed,
        schedule.map(|c| format!(" · explored schedule {}", esc(c))).unwrap_or_default()
    );
    let safety = violations.iter().filter(|v| v.pool.is_some() && !v.page_runs.is_empty()).count();
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="40" fill="#444">x: virtual time (s) · y: page id · colour: tenant holding the page · {} violation(s) on pools, {} with pages</text>"##,
        violations.iter().filter(|v| v.pool.is_some()).count(),
        safety
    );

    for (i, (pool, usable)) in pools.iter().enumerate() {
        let p = Panel { top: TOP + 18.0 + i as f64 * (PANEL_H + PANEL_GAP), pages: usable + 1, t_end: t_scale };
        let (rects, raster) = rects_for(&p, &held[i], &tenants, max_rects);
        let (after_rects, after_raster) = rects_for(&p, &after[i], &tenants, max_rects);
        let raster = raster || after_raster;
        let pool_v: Vec<&Violation> = violations.iter().filter(|v| v.pool == Some(*pool)).collect();
        let labels = place_labels(&p, &pool_v);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}" font-size="12" font-weight="bold">{pool} pool · {} pages × {} tokens · {} allocation run(s){}{}</text>"#,
            p.top - 6.0,
            group(*usable),
            cfg.knobs.page_size,
            runs[i],
            if raster { " (rasterised)" } else { "" },
            match (pool_v.len(), labels.iter().flatten().count()) {
                (0, _) => String::new(),
                (n, l) if l < n => format!(" · {n} violation(s), {l} labelled (hover a marker for details)"),
                (n, _) => format!(" · {n} violation(s)"),
            }
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{:.1}" width="{PLOT_W}" height="{PANEL_H}" fill="{FREE_FILL}" stroke="#888" stroke-width="0.5"/>"##,
            p.top
        );
        // Rectangles grouped by tenant.
        // Rectangles grouped by tenant; pages still held after their request's response lighter.
        let _ = writeln!(s, r#"<g shape-rendering="crispEdges">"#);
        let lighter = format!(r#" fill-opacity="{AFTER_OPACITY}""#);
        for (rects, opacity) in [(&rects, ""), (&after_rects, lighter.as_str())] {
            let mut by_tenant: BTreeMap<Option<u32>, Vec<&Rect>> = BTreeMap::new();
            for r in rects {
                by_tenant.entry(r.tenant).or_default().push(r);
            }
            for (t, rs) in by_tenant {
                let _ = writeln!(s, r#"<g fill="{}"{opacity}>"#, tenant_colour(t));
                for r in rs {
                    let _ =
                        writeln!(s, r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}"/>"#, r.x, r.y, r.w, r.h);
                }
                s.push_str("</g>\n");
            }
        }
        s.push_str("</g>\n");
        axes(&mut s, &p, t_end);
        for at in &resets[i] {
            let x = p.x(*at);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333" stroke-width="1" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#333" font-size="9" stroke="white" stroke-width="2.5" paint-order="stroke">reset</text>"##,
                p.top,
                p.top + PANEL_H,
                x + 2.0,
                p.top + PANEL_H - 3.0
            );
        }
        violation_marks(&mut s, &p, &pool_v, labels);
    }
    legend(&mut s, &roles, LEFT + PLOT_W + 24.0);
    if !lane_reqs.is_empty() {
        let p = Panel { top: lanes_top, pages: 1, t_end: t_scale };
        let lanes: Vec<(RequestId, Vec<lanes::Span>)> =
            lane_reqs.iter().map(|r| (*r, lanes::spans_of(phases, *r, t_end))).collect();
        request_lanes(&mut s, &p, t_end, &lanes, phases, &tenants, violations);
        // The lanes of a leak's holders are marked too (`request_lanes`), and counted apart.
        let holding = lane_reqs
            .iter()
            .filter(|r| violations.iter().all(|v| v.request != Some(**r)))
            .filter(|r| violations.iter().any(|v| v.holders.contains(r)))
            .count();
        lane_legend(&mut s, LEFT + PLOT_W + 24.0, lanes_top, lane_reqs.len(), named, holding);
    }
    s.push_str("</svg>\n");
    s
}

fn axes(s: &mut String, p: &Panel, t_end: Instant) {
    let bottom = p.top + PANEL_H;
    time_axis(s, p, t_end, bottom);
    let pstep = nice_step(p.pages as f64, 5.0).max(1.0);
    let mut v = 0.0;
    while v < p.pages as f64 {
        let y = p.y(v as u64);
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{LEFT}" y2="{y:.1}" stroke="#555"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#333">{}</text>"##,
            LEFT - 4.0,
            LEFT - 6.0,
            y + 3.5,
            group(v as u64)
        );
        v += pstep;
    }
    let cy = p.top + PANEL_H / 2.0;
    let _ = writeln!(
        s,
        r##"<text x="14" y="{cy:.1}" transform="rotate(-90 14 {cy:.1})" text-anchor="middle" fill="#333">page id</text>"##
    );
}

/// Ticks of virtual time in seconds under a plot whose bottom edge is at `bottom`.
fn time_axis(s: &mut String, p: &Panel, t_end: Instant, bottom: f64) {
    let secs = p.t_end / 1e9;
    let step = nice_step(secs, 10.0);
    let mut k = 0.0;
    while k * step <= t_end.0 as f64 / 1e9 + step * 1e-9 {
        let v = k * step;
        let x = LEFT + v / secs * PLOT_W;
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#555"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text>"##,
            bottom + 4.0,
            bottom + 15.0,
            fmt_tick(v, step)
        );
        k += 1.0;
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#333">time (s)</text>"##,
        LEFT + PLOT_W,
        bottom + 28.0
    );
}

/// The width a label's character is given (10-pixel sans-serif text).
const LABEL_CHAR_W: f64 = 5.6;

/// Which violations of a panel get a text label: most severe kind first, then by time, each in
/// the first of `LABEL_ROWS` rows where it does not overlap a label already placed. Returns, per
/// violation, its (row, text x, anchor) if labelled.
fn place_labels(p: &Panel, vs: &[&Violation]) -> Vec<Option<(usize, f64, &'static str)>> {
    let mut idx: Vec<usize> = (0..vs.len()).collect();
    idx.sort_by_key(|&i| (vs[i].kind, vs[i].at));
    let mut rows: Vec<Vec<(f64, f64)>> = vec![Vec::new(); LABEL_ROWS];
    let mut out = vec![None; vs.len()];
    let mut placed = 0;
    for i in idx {
        if placed == MAX_LABELS {
            break;
        }
        let x = p.x(vs[i].at);
        let w = label_text(vs[i]).chars().count() as f64 * LABEL_CHAR_W;
        let (x0, x1, tx, anchor) = if x + 6.0 + w > LEFT + PLOT_W {
            (x - 6.0 - w, x - 6.0, x - 6.0, "end")
        } else {
            (x + 6.0, x + 6.0 + w, x + 6.0, "start")
        };
        if let Some(row) = rows.iter().position(|r| r.iter().all(|(a, b)| x1 + 8.0 < *a || x0 > *b + 8.0)) {
            rows[row].push((x0, x1));
            out[i] = Some((row, tx, anchor));
            placed += 1;
        }
    }
    out
}

fn label_text(v: &Violation) -> String {
    let mut t = match v.request {
        Some(r) => format!("{} r{}", v.kind.name(), r.0),
        None => v.kind.name().to_string(),
    };
    // Whose KV it read (`←`), or whose pages its write landed in (`→`, a use after free), so
    // that a printed or rasterised picture names the victim too (the hover title says more).
    if !v.victim_tenants.is_empty() {
        let list: Vec<String> = v.victim_tenants.iter().take(3).map(|x| format!("t{}", x.0)).collect();
        let more = if v.victim_tenants.len() > 3 { "…" } else { "" };
        let arrow = if v.kind == Kind::UseAfterFree { "→" } else { "←" };
        t.push_str(&format!(" {arrow} {}{more}", list.join(",")));
    }
    t
}

/// Red outlines over a violation's page runs at its time with a cross at their centre, or a
/// triangle on top of the panel for violations without pages; each with a hover title, and the
/// ones `place_labels` picks with a text label.
fn violation_marks(s: &mut String, p: &Panel, vs: &[&Violation], labels: Vec<Option<(usize, f64, &'static str)>>) {
    // The labels go after every marker, so that no later marker is drawn over an earlier label.
    let mut texts = String::new();
    for (v, label) in vs.iter().zip(labels) {
        let x = p.x(v.at);
        let tip = format!(
            "{}{} at {}: {} page(s){}{}",
            label_text(v),
            v.tenant.map_or(String::new(), |t| format!(" (tenant {})", t.0)),
            v.at,
            v.pages,
            if v.victim_tenants.is_empty() {
                String::new()
            } else {
                format!(", victims {}", v.victim_tenants.iter().map(|t| t.0.to_string()).collect::<Vec<_>>().join(","))
            },
            if v.detail.is_empty() { String::new() } else { format!(" — {}", v.detail) }
        );
        let _ = writeln!(s, "<g><title>{}</title>", esc(&tip));
        let mark_top = if v.page_runs.is_empty() {
            let _ = writeln!(s, r#"<path d="M{:.1} {:.1} l-5 -8 h10 z" fill="{RED}"/>"#, x, p.top);
            p.top
        } else {
            let (mut lo, mut hi) = (f64::MAX, f64::MIN);
            let mut boxes: Vec<(f64, f64)> = Vec::new();
            for r in &v.page_runs {
                let (y0, y1) = (p.y(u64::from(r.first) + u64::from(r.count)), p.y(u64::from(r.first)));
                let (y0, y1) = if y1 - y0 < 3.0 {
                    let c = (y0 + y1) / 2.0;
                    (c - 1.5, c + 1.5)
                } else {
                    (y0, y1)
                };
                lo = lo.min(y0);
                hi = hi.max(y1);
                match boxes.last_mut() {
                    Some(b) if y1 >= b.0 - 1.0 && y0 <= b.1 + 1.0 => {
                        b.0 = b.0.min(y0);
                        b.1 = b.1.max(y1);
                    }
                    _ => boxes.push((y0, y1)),
                }
            }
            for (y0, y1) in boxes {
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{y0:.1}" width="6" height="{:.1}" fill="none" stroke="{RED}" stroke-width="1.3"/>"#,
                    x - 3.0,
                    y1 - y0
                );
            }
            let cy = (lo + hi) / 2.0;
            let _ = writeln!(
                s,
                r#"<path d="M{:.1} {:.1} l8 8 m0 -8 l-8 8" stroke="{RED}" stroke-width="2"/>"#,
                x - 4.0,
                cy - 4.0
            );
            lo
        };
        if let Some((row, tx, anchor)) = label {
            let ly = p.top + 11.0 + row as f64 * 12.0;
            if mark_top > ly + 2.0 {
                let _ = writeln!(
                    s,
                    r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{RED}" stroke-width="0.6" stroke-dasharray="2 2"/>"#,
                    ly - 3.0,
                    mark_top
                );
                let _ = writeln!(
                    s,
                    r#"<line x1="{x:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="{RED}" stroke-width="0.6"/>"#,
                    ly - 3.0,
                    ly - 3.0
                );
            }
            // A light backing the width `place_labels` reserved, so that the leader lines of the
            // labels in the rows below and the pages under it do not run through the text (the
            // halo covers the glyphs only: a walkthrough read the incident's labels struck
            // through by their neighbours' leaders).
            let w = label_text(v).chars().count() as f64 * LABEL_CHAR_W;
            let bx = if anchor == "end" { tx - w } else { tx };
            let _ = writeln!(
                texts,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="12" fill="white" fill-opacity="0.85"/>"#,
                bx - 2.0,
                ly - 9.5,
                w + 4.0
            );
            let _ = writeln!(
                texts,
                r#"<text x="{tx:.1}" y="{ly:.1}" text-anchor="{anchor}" fill="{RED}" font-size="10" stroke="white" stroke-width="2.5" paint-order="stroke"><title>{}</title>{}</text>"#,
                esc(&tip),
                label_text(v)
            );
        }
        s.push_str("</g>\n");
    }
    s.push_str(&texts);
}

/// Height of one request's lanes: its router row, prefill row and decode row, and a gap.
const LANE_H: f64 = 26.0;
/// The rows' offsets and heights inside a request's lanes.
const ROUTER_ROW: (f64, f64) = (1.0, 3.0);
const PREFILL_ROW: (f64, f64) = (6.0, 8.0);
const DECODE_ROW: (f64, f64) = (15.0, 8.0);
/// Lines of the lanes' legend (its height in 16-pixel lines, to size the picture).
const LANE_LEGEND_LINES: usize = 14;
/// The router's row: arrival to response.
const ROUTER_FILL: &str = "#707070";

/// Each phase's fill (`lifecycle::Phase::label` names): prefill's queues in purples, sending in
/// blues, decode's in greens, the states that hold pages past their use in oranges and browns.
const PHASE_COLOURS: [(&str, &str); 13] = [
    ("bootstrap", "#cbc9e2"),
    ("waiting", "#9e9ac8"),
    ("prefill", "#6a51a3"),
    ("inflight", "#3182bd"),
    ("held", "#9ecae1"),
    ("draining", "#fdae6b"),
    ("orphaned", "#8c2d04"),
    ("prealloc", "#c7e9c0"),
    ("transfer", "#74c476"),
    ("running", "#238b45"),
    ("retracted", "#fdd0a2"),
    ("releasing", "#bdbdbd"),
    ("leaked", "#e6550d"),
];

fn phase_colour(phase: &str) -> &'static str {
    PHASE_COLOURS.iter().find(|(p, _)| *p == phase).map_or("#636363", |(_, c)| c)
}

fn lanes_height(lanes: usize) -> f64 {
    (lanes as f64 * LANE_H).max(LANE_LEGEND_LINES as f64 * 16.0)
}

/// Per violation with pages, the request other than its own that took the pages it covered
/// last before it (whose KV the read most likely found), in violation order: the lanes show
/// these first among the requests no violation names.
fn victim_requests(cfg: &SimConfig, held: &[Vec<Held>], violations: &[Violation]) -> Vec<RequestId> {
    let mut out: Vec<RequestId> = Vec::new();
    for v in violations {
        let Some(hs) = v.pool.and_then(|pool| pool_index(cfg, pool)).and_then(|i| held.get(i)) else {
            continue;
        };
        let covers =
            |h: &&Held| v.page_runs.iter().any(|run| run.first < h.first + h.count && h.first < run.first + run.count);
        let last = hs
            .iter()
            .filter(|h| h.since <= v.at && Some(h.r) != v.request)
            .filter(covers)
            .max_by_key(|h| (h.since, std::cmp::Reverse(h.r)));
        if let Some(h) = last.filter(|h| !out.contains(&h.r)) {
            out.push(h.r);
        }
    }
    out
}

/// The request lanes under the pools, on the pools' time axis: per request its label (red when
/// a violation names it), its router row in its tenant's colour, its legs' phase spans (each a
/// rectangle carrying its request, row, node, phase and times as `data-` attributes, with a
/// hover title), and a red mark where a violation names it, on the row of the violation's pool.
fn request_lanes(
    s: &mut String,
    p: &Panel,
    t_end: Instant,
    lanes: &[(RequestId, Vec<lanes::Span>)],
    phases: &[PhaseRecord],
    tenants: &[Option<u32>],
    violations: &[Violation],
) {
    let h = lanes.len() as f64 * LANE_H;
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{:.1}" font-size="12" font-weight="bold">request lanes · {} request(s) · rows: router, prefill leg, decode leg · from the model's lifecycle-phase records</text>"#,
        p.top - 6.0,
        lanes.len()
    );
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{:.1}" width="{PLOT_W}" height="{h:.1}" fill="#fcfcfc" stroke="#888" stroke-width="0.5"/>"##,
        p.top
    );
    for (i, (r, spans)) in lanes.iter().enumerate() {
        let y0 = p.top + i as f64 * LANE_H;
        let tenant = tenants.get(r.idx()).copied().flatten();
        // Named by a violation, or holding a leak's pages at the end: its label is red and the
        // violation is marked on its lane.
        let of_r = |v: &&Violation| v.request == Some(*r) || v.holders.contains(r);
        let named = violations.iter().any(|v| of_r(&v));
        if i > 0 {
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{y0:.1}" x2="{:.1}" y2="{y0:.1}" stroke="#e4e4e4"/>"##,
                LEFT + PLOT_W
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="10" fill="{}">r{}{}</text><rect x="{:.1}" y="{:.1}" width="5" height="16" fill="{}"/>"##,
            LEFT - 8.0,
            y0 + 15.0,
            if named { RED } else { "#333" },
            r.0,
            tenant.map_or(String::new(), |t| format!(" · t{t}")),
            LEFT - 6.0,
            y0 + PREFILL_ROW.0,
            tenant_colour(tenant)
        );
        for sp in spans {
            let (dy, rh, fill) = match sp.row {
                Row::Router => (ROUTER_ROW.0, ROUTER_ROW.1, ROUTER_FILL.to_string()),
                Row::Prefill => (PREFILL_ROW.0, PREFILL_ROW.1, phase_colour(sp.phase).to_string()),
                Row::Decode => (DECODE_ROW.0, DECODE_ROW.1, phase_colour(sp.phase).to_string()),
            };
            let (x0, x1) = (p.x(sp.from).round(), p.x(sp.to).round());
            let node = sp.node.map_or(String::new(), |n| n.to_string());
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.0}" y="{:.1}" width="{:.0}" height="{rh:.0}" fill="{fill}" data-r="{}" data-row="{}" data-node="{node}" data-phase="{}" data-from="{}" data-to="{}"><title>r{} {} {} {}–{}</title></rect>"#,
                y0 + dy,
                (x1 - x0).max(1.0),
                sp.r.0,
                sp.row.name(),
                sp.phase,
                sp.from.0,
                sp.to.0,
                sp.r.0,
                if node.is_empty() { sp.row.name() } else { &node },
                sp.phase,
                sp.from,
                sp.to
            );
        }
        for v in violations.iter().filter(of_r) {
            let row = match v.pool.map(|n| n.role) {
                Some(crate::types::Role::Prefill) => PREFILL_ROW,
                Some(crate::types::Role::Decode) => DECODE_ROW,
                None => ROUTER_ROW,
            };
            let (x, cy) = (p.x(v.at), y0 + row.0 + row.1 / 2.0);
            let _ = writeln!(
                s,
                r#"<g data-violation-r="{}"><title>{}{} at {}{}</title><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{RED}" stroke-width="1"/><path d="M{:.1} {:.1} l7 7 m0 -7 l-7 7" stroke="{RED}" stroke-width="2"/></g>"#,
                r.0,
                esc(&label_text(v)),
                if v.request == Some(*r) { "" } else { " (it holds the leaked pages at the end)" },
                v.at,
                if v.detail.is_empty() { String::new() } else { format!(" — {}", esc(&v.detail)) },
                y0,
                y0 + LANE_H - 2.0,
                x - 3.5,
                cy - 3.5
            );
        }
        // After the spans and marks, so that nothing is drawn over it; clear of both.
        let marks: Vec<Instant> = violations.iter().filter(of_r).map(|v| v.at).collect();
        lane_summary(s, p, y0, spans, &marks, phases.iter().filter(|x| x.r == *r));
    }
    time_axis(s, p, t_end, p.top + h);
}

/// A lane's text beside it (right of its last span, or left of its first near the right edge):
/// the response's status and the time from arrival to response, as the router's records say —
/// a lane at this scale is often a few pixels wide.
fn lane_summary<'a>(
    s: &mut String,
    p: &Panel,
    y0: f64,
    spans: &[lanes::Span],
    marks: &[Instant],
    recs: impl Iterator<Item = &'a PhaseRecord>,
) {
    use crate::lifecycle::Phase;
    let (Some(first), Some(last)) = (spans.iter().map(|x| x.from).min(), spans.iter().map(|x| x.to).max()) else {
        return;
    };
    // A violation mark (7 px wide) after the last span or before the first pushes the text out.
    let first = marks.iter().copied().fold(first, Instant::min);
    let last = marks.iter().copied().fold(last, Instant::max);
    let mut arrived = None;
    let mut text = "no response".to_string();
    for rec in recs {
        match rec.phase {
            Phase::Arrived => arrived = Some(rec.at),
            Phase::Responded { status, .. } => {
                // Truncated as every other output writes times (the tooltip's end said 2.065 s
                // where this label, rounded, said 2.066 s).
                let took = arrived.map_or(String::new(), |a| {
                    let s = crate::report::secs(rec.at.0 - a.0);
                    format!(" after {} s", s.trim_end_matches('s'))
                });
                text = format!("{status}{took}");
            }
            _ => {}
        }
    }
    let w = text.chars().count() as f64 * 5.0;
    // Right of the lane, else left of it, else (a lane as wide as the plot) inside it at the
    // right edge, on a light halo: never over the row labels left of the plot.
    let (x, anchor) = if p.x(last) + 8.0 + w <= LEFT + PLOT_W {
        (p.x(last) + 8.0, "start")
    } else if p.x(first) - 8.0 - w >= LEFT + 2.0 {
        (p.x(first) - 8.0, "end")
    } else {
        // Inside the lane: ending left of the violation marks near the right edge (a mark's
        // line ran through the text).
        let mut xs: Vec<f64> = marks.iter().map(|m| p.x(*m)).collect();
        xs.sort_by(|a, b| b.total_cmp(a));
        let mut x = LEFT + PLOT_W - 3.0;
        for m in xs {
            if m - 6.0 < x && m + 6.0 > x - w && m - 7.0 - w >= LEFT + 2.0 {
                x = m - 7.0;
            }
        }
        (x, "end")
    };
    let _ = writeln!(
        s,
        r##"<text x="{x:.1}" y="{:.1}" text-anchor="{anchor}" font-size="9" fill="#555" stroke="#fcfcfc" stroke-width="3" paint-order="stroke">{}</text>"##,
        y0 + 15.0,
        esc(&text)
    );
}

/// The lanes' legend beside them: the phases' colours in two columns, the rows, the violation
/// mark, and which requests have lanes (with the cap on the others).
fn lane_legend(s: &mut String, x: f64, top: f64, lanes: usize, named: usize, holding: usize) {
    let mut y = top + 4.0;
    let _ = writeln!(
        s,
        r#"<g class="lane-legend"><text x="{x:.1}" y="{y:.1}" font-size="12" font-weight="bold">Request lanes</text>"#
    );
    y += 16.0;
    for pair in PHASE_COLOURS.chunks(2) {
        for (k, (phase, colour)) in pair.iter().enumerate() {
            let cx = x + k as f64 * 120.0;
            let _ = writeln!(
                s,
                r#"<rect x="{cx:.1}" y="{:.1}" width="14" height="10" fill="{colour}"/><text x="{:.1}" y="{y:.1}">{phase}</text>"#,
                y - 9.0,
                cx + 20.0
            );
        }
        y += 16.0;
    }
    let _ = writeln!(
        s,
        r#"<path d="M{:.1} {:.1} l7 7 m0 -7 l-7 7" stroke="{RED}" stroke-width="2"/><text x="{:.1}" y="{y:.1}">violation, on its pool's row</text>"#,
        x + 3.0,
        y - 8.0,
        x + 20.0
    );
    y += 16.0;
    let _ = writeln!(s, r##"<text x="{x:.1}" y="{y:.1}" fill="#444">grey top row: arrival → response</text>"##);
    y += 16.0;
    let _ = writeln!(
        s,
        r##"<text x="{x:.1}" y="{y:.1}" fill="#444">{named} named by a violation (all), {}{} other(s)</text>"##,
        if holding > 0 { format!("{holding} holding a leak, ") } else { String::new() },
        lanes - named - holding
    );
    y += 16.0;
    let _ = writeln!(
        s,
        r##"<text x="{x:.1}" y="{y:.1}" fill="#444">(others: up to {}, victims first)</text></g>"##,
        lanes::MAX_OTHER_LANES
    );
}

/// How opaque a page run is drawn after its request's response.
const AFTER_OPACITY: &str = "0.4";

/// Splits every held run at its request's response: the part before stays in `held`, the part
/// after (pages a radix cache keeps once the request ended, or leaked) is returned, per pool. A
/// radix-cached prefill page looked like a page its request still held for minutes (an operator
/// took three requests' cached prefixes for a leak).
fn split_at_responses(records: &[(Instant, TraceRecord)], held: &mut [Vec<Held>]) -> Vec<Vec<Held>> {
    let mut responded: BTreeMap<RequestId, Instant> = BTreeMap::new();
    for (at, rec) in records {
        if let TraceRecord::Response { r, .. } = rec {
            responded.entry(*r).or_insert(*at);
        }
    }
    held.iter_mut()
        .map(|hs| {
            let mut after = Vec::new();
            let mut kept = Vec::with_capacity(hs.len());
            for h in hs.drain(..) {
                match responded.get(&h.r) {
                    Some(&t) if t < h.until => {
                        if h.since < t {
                            kept.push(Held { until: t, ..h });
                        }
                        after.push(Held { since: t.max(h.since), ..h });
                    }
                    _ => kept.push(h),
                }
            }
            *hs = kept;
            after
        })
        .collect()
}

fn legend(s: &mut String, order: &[(Option<u32>, &str)], x: f64) {
    let mut y = TOP + 18.0;
    let _ = writeln!(s, r#"<text x="{x:.1}" y="{y:.1}" font-size="12" font-weight="bold">Legend</text>"#);
    y += 16.0;
    let _ = writeln!(
        s,
        r##"<g class="legend"><rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="{FREE_FILL}" stroke="#888" stroke-width="0.5"/><text x="{:.1}" y="{y:.1}">free page</text>"##,
        y - 9.0,
        x + 20.0
    );
    y += 16.0;
    let _ = writeln!(
        s,
        r##"<rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="#666" fill-opacity="{AFTER_OPACITY}"/><text x="{:.1}" y="{y:.1}">lighter: held after its request's response</text>"##,
        y - 9.0,
        x + 20.0
    );
    y += 14.0;
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{y:.1}" fill="#555" font-size="10">(a prefix cache keeps it, or it leaked)</text>"##,
        x + 20.0
    );
    for (t, role) in order.iter().take(LEGEND_TENANTS) {
        y += 16.0;
        let name = match (t, role.is_empty()) {
            (Some(t), true) => format!("tenant {t}"),
            (Some(t), false) => format!("tenant {t} ({role})"),
            (None, _) => "tenant unknown".to_string(),
        };
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="{}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
            y - 9.0,
            tenant_colour(*t),
            x + 20.0,
            name
        );
    }
    if order.len() > LEGEND_TENANTS {
        y += 16.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{y:.1}">… {} more tenant(s)</text>"#,
            x + 20.0,
            order.len() - LEGEND_TENANTS
        );
    }
    y += 22.0;
    let _ = writeln!(
        s,
        r#"<rect x="{:.1}" y="{:.1}" width="6" height="12" fill="none" stroke="{RED}" stroke-width="1.3"/><path d="M{:.1} {:.1} l8 8 m0 -8 l-8 8" stroke="{RED}" stroke-width="2"/><text x="{:.1}" y="{y:.1}">violation over its pages</text>"#,
        x + 4.0,
        y - 10.0,
        x + 3.0,
        y - 8.0,
        x + 20.0
    );
    y += 16.0;
    let _ = writeln!(
        s,
        r#"<path d="M{:.1} {:.1} l-5 -8 h10 z" fill="{RED}"/><text x="{:.1}" y="{y:.1}">violation without pages</text>"#,
        x + 7.0,
        y + 1.0,
        x + 20.0
    );
    y += 16.0;
    let _ = writeln!(
        s,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="4 3"/><text x="{:.1}" y="{y:.1}">pool reset (node crash)</text></g>"##,
        x + 7.0,
        y - 11.0,
        x + 7.0,
        y + 2.0,
        x + 20.0
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::scenario::{Overrides, Scenario};

    /// A run's configuration, trace records, lifecycle-phase records and violations.
    pub(crate) type Ran = (SimConfig, Vec<(Instant, TraceRecord)>, Vec<crate::lifecycle::PhaseRecord>, Vec<Violation>);

    /// Runs a shipped scenario under `profile` (the scenario's own when `None`), with a scripted
    /// crash of node `crash` at 20 s when given.
    pub(crate) fn run_phased(rel: &str, profile: Option<&str>, crash: Option<&str>) -> Ran {
        let path = format!("{}/../scenarios/{rel}", crate::test_manifest_dir());
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let sc = Scenario::parse(rel, &text).unwrap_or_else(|e| panic!("{e}"));
        let o = Overrides { profile: profile.map(str::to_string), ..Overrides::default() };
        let mut cfg = sc.resolve(&o).unwrap_or_else(|e| panic!("{e}"));
        if let Some(node) = crash {
            cfg.faults.script.push(crate::config::ScriptedFault::Crash {
                at_ms: 20_000,
                node: node.to_string(),
                restart_after_ms: 5_000,
            });
        }
        let mut w = crate::simulate_collect(cfg.clone(), false);
        let recs = w.tracer.collected.take().expect("collecting tracer");
        let phases = w.lifecycle.take().expect("on with a collecting tracer");
        (cfg, recs, phases, std::mem::take(&mut w.oracle.violations))
    }

    /// A run held past its request's response is split there: the part after is drawn lighter
    /// (a radix-cached prefix looked like a page its request still held: an operator read it as a
    /// leak); runs freed before the response, and runs of requests with none, are kept whole.
    #[test]
    fn held_runs_split_at_their_requests_response() {
        let h = |r: u32, since: u64, until: u64| Held {
            first: 1,
            count: 4,
            r: RequestId(r),
            since: Instant(since),
            until: Instant(until),
        };
        let records = vec![
            (Instant(10), TraceRecord::Response { r: RequestId(1), status: 200, tokens: 1 }),
            (Instant(30), TraceRecord::Response { r: RequestId(1), status: 500, tokens: 0 }),
            (Instant(50), TraceRecord::Response { r: RequestId(2), status: 200, tokens: 1 }),
        ];
        let mut held = vec![vec![h(1, 0, 40), h(1, 12, 20), h(2, 0, 50), h(3, 0, 90)]];
        let after = split_at_responses(&records, &mut held);
        assert_eq!(held, vec![vec![h(1, 0, 10), h(2, 0, 50), h(3, 0, 90)]], "the first response counts");
        assert_eq!(after, vec![vec![h(1, 10, 40), h(1, 12, 20)]]);
        let (cfg, recs, phases, vs) = run_phased("small/stub-leak.toml", None, None);
        let svg = page_map_svg(&cfg, &recs, &phases, &vs, None);
        assert!(
            svg.contains(&format!("fill-opacity=\"{AFTER_OPACITY}\""))
                && svg.contains("held after its request's response")
        );
    }

    #[test]
    fn tracker_splits_and_frees_by_holder() {
        let mut t = PageTracker::default();
        let mut out = Vec::new();
        let run = |first, count| Run { first, count };
        t.alloc(RequestId(1), &[run(1, 10)], Instant(5), &mut out);
        t.alloc(RequestId(2), &[run(11, 5)], Instant(6), &mut out);
        assert_eq!(t.held, 15);
        // A free by the wrong request returns nothing.
        t.free(RequestId(2), &[run(1, 4)], Instant(7), &mut out);
        assert!(out.is_empty());
        t.free(RequestId(1), &[run(3, 4)], Instant(8), &mut out);
        assert_eq!(out, vec![Held { first: 3, count: 4, r: RequestId(1), since: Instant(5), until: Instant(8) }]);
        assert_eq!(t.held, 11);
        t.reset(Instant(9), &mut out);
        assert_eq!(t.held, 0);
        let firsts: Vec<u32> = out.iter().map(|h| h.first).collect();
        assert_eq!(firsts, vec![3, 1, 7, 11]);
    }

    fn check_svg(s: &str) -> usize {
        assert!(s.starts_with("<svg "), "starts with <svg");
        assert!(s.trim_end().ends_with("</svg>"), "ends with </svg>");
        assert!(s.contains("Legend"));
        // Tags balance (every opened g/text/title closes).
        for tag in ["g", "text", "title"] {
            let open = s.matches(&format!("<{tag}>")).count() + s.matches(&format!("<{tag} ")).count();
            let close = s.matches(&format!("</{tag}>")).count();
            assert_eq!(open, close, "<{tag}> balanced");
        }
        assert_eq!(s.matches('<').count(), s.matches('>').count());
        s.matches("<rect ").count()
    }

    /// A drawn lane span, from its `data-` attributes.
    #[derive(Debug)]
    struct Drawn {
        r: u32,
        row: String,
        node: String,
        phase: String,
        from: u64,
        to: u64,
        x: f64,
        w: f64,
    }

    /// The lane spans an SVG draws, read back from its text.
    fn drawn_spans(s: &str) -> Vec<Drawn> {
        s.lines()
            .filter(|l| l.starts_with("<rect ") && l.contains(" data-r="))
            .map(|l| {
                let attr = |k: &str| {
                    let pat = format!(" {k}=\"");
                    let i = l.find(&pat).unwrap_or_else(|| panic!("{k} in {l}")) + pat.len();
                    l[i..i + l[i..].find('"').expect("closing quote")].to_string()
                };
                let num = |k: &str| attr(k).parse::<f64>().unwrap_or_else(|e| panic!("{k} in {l}: {e}"));
                Drawn {
                    r: attr("data-r").parse().expect("request"),
                    row: attr("data-row"),
                    node: attr("data-node"),
                    phase: attr("data-phase"),
                    from: attr("data-from").parse().expect("from"),
                    to: attr("data-to").parse().expect("to"),
                    x: num("x"),
                    w: num("width"),
                }
            })
            .collect()
    }

    /// Every lane drawn matches the phase records: a span starts at a record of its phase on its
    /// row and node, and ends at the next record on that row that leaves the phase (another
    /// phase or node, `Left`, the response), or at the end of the run when none does; every
    /// labelled record of a drawn request lies in a drawn span of its phase; spans stay on the
    /// time axis; every request a violation names has a lane and a violation mark. Returns the
    /// number of spans.
    fn check_lanes(s: &str, phases: &[PhaseRecord], vs: &[Violation]) -> usize {
        use crate::lifecycle::Phase;
        let spans = drawn_spans(s);
        let name = |p: &PhaseRecord| match p.phase {
            Phase::Arrived => Some(lanes::REQUEST),
            ph => ph.label(),
        };
        let node = |p: &PhaseRecord| p.lane.node().map_or(String::new(), |n| n.to_string());
        let end = spans.iter().map(|d| d.to).max().unwrap_or(0);
        for d in &spans {
            assert!(d.x >= LEFT - 0.5 && d.x + d.w <= LEFT + PLOT_W + 0.5, "off the axis: {d:?}");
            let recs: Vec<&PhaseRecord> =
                phases.iter().filter(|p| p.r.0 == d.r && Row::of(p.lane).name() == d.row).collect();
            let start = recs
                .iter()
                .position(|p| p.at.0 == d.from && name(p) == Some(d.phase.as_str()) && node(p) == d.node)
                .unwrap_or_else(|| panic!("no record starts {d:?}"));
            let leaves = recs[start + 1..].iter().find(|p| match name(p) {
                Some(n) => n != d.phase || node(p) != d.node,
                None => matches!(p.phase, Phase::Left | Phase::Responded { .. }),
            });
            assert_eq!(leaves.map_or(end, |p| p.at.0), d.to, "{d:?} ends where its phase does");
        }
        let drawn: BTreeSet<u32> = spans.iter().map(|d| d.r).collect();
        for p in phases.iter().filter(|p| drawn.contains(&p.r.0)) {
            let Some(n) = name(p) else { continue };
            let row = Row::of(p.lane).name();
            assert!(
                spans.iter().any(|d| d.r == p.r.0
                    && d.row == row
                    && d.phase == n
                    && d.from <= p.at.0
                    && p.at.0 <= d.to),
                "record not drawn: {p:?}"
            );
        }
        for r in vs.iter().filter_map(|v| v.request) {
            assert!(
                drawn.contains(&r.0) || !phases.iter().any(|p| p.r == r),
                "r{} named by a violation has no lane",
                r.0
            );
            assert!(s.contains(&format!("data-violation-r=\"{}\"", r.0)), "r{} violation mark", r.0);
        }
        spans.len()
    }

    #[test]
    fn stub_leak_page_map() {
        let (cfg, recs, phases, vs) = run_phased("small/stub-leak.toml", None, None);
        let s = page_map_svg(&cfg, &recs, &phases, &vs, None);
        let rects = check_svg(&s);
        assert!(rects < 200, "{rects} rectangles");
        assert!(s.contains("decode-0 pool"));
        assert!(s.contains("prefill-0 pool"));
        assert!(s.contains("cross_tenant_read r2 ← t1"), "violation label, naming whose KV it read");
        // On a backing as wide as the label, drawn just before its text: no leader line or page
        // runs through the words.
        let label = s.find("</title>cross_tenant_read r2 ← t1").expect("the label's text");
        let at = s[..label].rfind("<text ").expect("its text element");
        let backing = s[..at].rfind("<rect ").expect("a rect before the label");
        assert!(s[backing..at].contains(r#"fill="white" fill-opacity="0.85""#), "{}", &s[backing..at]);
        assert!(s.contains(&format!("stroke=\"{RED}\" stroke-width=\"1.3\"/>")));
        assert!(s.contains(&tenant_colour(Some(1))) && s.contains(&tenant_colour(Some(2))));
        // The violating read's request has its lanes, drawn from the phase records.
        let spans = check_lanes(&s, &phases, &vs);
        assert!(spans > 0);
        let reader = vs.iter().find(|v| v.kind == Kind::CrossTenantRead).and_then(|v| v.request).expect("a reader");
        let lane = drawn_spans(&s).into_iter().filter(|d| d.r == reader.0).map(|d| d.phase).collect::<Vec<_>>();
        assert!(lane.iter().any(|p| p == "running") && lane.iter().any(|p| p == "prefill"), "{lane:?}");
        assert!(s.contains(&format!("data-violation-r=\"{}\"", reader.0)));
        // No records, no lanes.
        let bare = page_map_svg(&cfg, &recs, &[], &vs, None);
        assert!(drawn_spans(&bare).is_empty() && !bare.contains("request lanes"));
    }

    /// A use after free's label points from the writer to the tenant whose pages its write
    /// landed in (it read "r0 ← t2", as a read's does, backwards); a read's still points from
    /// the tenant it read.
    #[test]
    fn a_use_after_free_label_points_at_whose_pages_it_wrote() {
        let (cfg, recs, phases, vs) = run_phased("catalogue/decode-free-before-late-write.toml", None, None);
        let uaf =
            vs.iter().find(|v| v.kind == Kind::UseAfterFree && !v.victim_tenants.is_empty()).expect("a use after free");
        let s = page_map_svg(&cfg, &recs, &phases, &vs, None);
        let (r, t) = (uaf.request.expect("its writer").0, uaf.victim_tenants[0].0);
        assert!(s.contains(&format!("use_after_free r{r} → t{t}")), "{}", label_text(uaf));
        assert!(!s.contains(&format!("use_after_free r{r} ←")));
    }

    /// A leak names no request: the lanes of the requests holding its pages at the end come first
    /// among the others, are marked on the leaked pool's row and labelled red, and the legend
    /// counts them.
    #[test]
    fn a_leaks_holders_are_marked_in_their_lanes() {
        let path = format!("{}/../scenarios/catalogue/leak-abort-retracted.toml", crate::test_manifest_dir());
        let text = std::fs::read_to_string(&path).unwrap();
        let sc = Scenario::parse(&path, &text).unwrap();
        let mut o = Overrides::default();
        o.set.push(("retracted_abort".into(), "leak".into()));
        let cfg = sc.resolve(&o).unwrap_or_else(|e| panic!("{e}"));
        let mut w = crate::simulate_collect(cfg.clone(), false);
        let recs = w.tracer.collected.take().unwrap();
        let phases = w.lifecycle.take().unwrap();
        let vs = std::mem::take(&mut w.oracle.violations);
        let leak = vs.iter().find(|v| v.kind == Kind::PageLeak).expect("a leak");
        assert!(leak.request.is_none() && !leak.holders.is_empty(), "{leak:?}");
        let s = page_map_svg(&cfg, &recs, &phases, &vs, None);
        for h in &leak.holders {
            assert!(s.contains(&format!("data-violation-r=\"{}\"", h.0)), "r{} holds the leak: no mark", h.0);
            assert!(s.contains(&format!("fill=\"{RED}\">r{} ·", h.0)), "r{}'s label is not red", h.0);
        }
        assert!(s.contains(&format!("{} holding a leak", leak.holders.len())), "legend");
    }

    /// A lane as wide as the plot keeps its status text inside the plot (it was drawn over the
    /// row label left of it), and violation labels come after every marker (a later marker was
    /// drawn over an earlier label).
    #[test]
    fn lane_text_and_labels_are_not_drawn_over() {
        let (cfg, recs, phases, vs) = run_phased("small/vllm-short-prefill.toml", None, None);
        let s = page_map_svg(&cfg, &recs, &phases, &vs, None);
        let status = s.lines().find(|l| l.contains(">503 after ")).expect("the lane's status text");
        let x: f64 = status.split("x=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        let w = "503 after 0.072 s".len() as f64 * 5.0;
        assert!(x - w >= LEFT, "{status}");
        let (cfg, recs, phases, vs) = run_phased("small/mixed-faults.toml", None, None);
        let s = page_map_svg(&cfg, &recs, &phases, &vs, None);
        assert!(s.contains(&format!("stroke=\"{RED}\" stroke-width=\"1.3\"/>")), "markers drawn");
        let first_label = s.find(&format!("fill=\"{RED}\" font-size=\"10\"")).unwrap();
        let panel_end = s[first_label..].find(" pool · ").map_or(s.len(), |i| first_label + i);
        assert!(s[first_label..panel_end].matches("stroke-width=\"1.3\"/>").count() == 0, "a marker after a label");
    }

    #[test]
    fn mixed_faults_page_map() {
        let (cfg, recs, phases, vs) = run_phased("small/mixed-faults.toml", None, Some("decode-1"));
        let s = page_map_svg(&cfg, &recs, &phases, &vs, None);
        let rects = check_svg(&s);
        assert!(rects < 4 * MAX_RECTS + 100, "{rects} rectangles");
        assert!(s.contains(">reset</text>"), "crash resets drawn");
        let lanes = check_lanes(&s, &phases, &vs);
        assert!(lanes > 0, "lanes drawn");
        assert!(s.len() < 10_000_000);
    }

    #[test]
    fn raster_bounds_rectangles() {
        let p = Panel { top: 0.0, pages: 50_001, t_end: 1e9 };
        let held: Vec<Held> = (0..30_000u32)
            .map(|i| Held {
                first: 1 + i,
                count: 1,
                r: RequestId(i % 7),
                since: Instant(u64::from(i) * 10_000),
                until: Instant(u64::from(i) * 10_000 + 400_000_000),
            })
            .collect();
        let tenants: Vec<Option<u32>> = (0..7).map(Some).collect();
        let (rects, raster) = rects_for(&p, &held, &tenants, MAX_RECTS);
        assert!(raster);
        assert!(rects.len() <= MAX_RECTS, "{} rectangles", rects.len());
        assert!(!rects.is_empty());
    }

    /// The full incident's page map stays small, exact and rasterised (slow in debug builds:
    /// `cargo test -p kvsim --lib picture -- --ignored`). With `KVSIM_PICTURES_OUT=DIR` set, the
    /// maps are also written there, for looking at.
    #[test]
    #[ignore]
    fn incident_page_map() {
        let runs = [
            ("small/stub-leak.toml", None, MAX_RECTS, ""),
            ("small/mixed-faults.toml", Some("decode-1"), MAX_RECTS, ""),
            ("glm53-incident.toml", None, MAX_RECTS, ""),
            ("glm53-incident.toml", None, 1_000, "-raster"),
        ];
        for (rel, crash, max_rects, suffix) in runs {
            let (cfg, recs, phases, vs) = run_phased(rel, None, crash);
            let s = page_map_svg_with(&cfg, &recs, &phases, &vs, None, max_rects);
            check_lanes(&s, &phases, &vs);
            check_svg(&s);
            assert!(s.len() < 10_000_000, "{} bytes", s.len());
            assert!(s.matches("<rect ").count() < 4 * max_rects.max(3_000) + 500);
            if let Some(dir) = std::env::var_os("KVSIM_PICTURES_OUT") {
                let out = std::path::Path::new(&dir).join(format!("pagemap-{}{suffix}.svg", cfg.name));
                std::fs::write(&out, &s).unwrap();
                eprintln!("{}: {} bytes, {} rects", out.display(), s.len(), s.matches("<rect ").count());
            }
        }
    }
}
