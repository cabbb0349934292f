//! The campaign report a person looks at: one self-contained HTML page (no script, no external
//! style, font or image) with the campaign's summary, the new-signature curve over runs as inline
//! SVG, the signature table (new / known against the profile's known bugs, runs, first seed,
//! whether GPU confirmation confirmed it) and, for every saved example, the exact command that
//! reproduces it and links to its files (scenario, trace, Perfetto JSON, SVG page map).
//!
//! Every piece of text that comes from a run, a file or a path is escaped; hrefs are also
//! percent-encoded. The page is well-formed XML (XHTML syntax), so a plain XML parser reads it —
//! the tests check it that way.

use super::{Campaign, Confirmation, Failure};
use crate::triage::KnownBugs;
use crate::xml::escape as esc;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One saved example of a signature, as the page links it.
#[derive(Debug, Clone)]
pub struct Example<'a> {
    pub failure: &'a Failure,
    /// The example's seed folder as a path relative to the page (ends with `/`; percent-encoded
    /// by the page).
    pub folder_href: String,
    /// The names of the files present in the folder (`scenario.toml`, `shrunk.toml`,
    /// `trace.jsonl`, `shrunk.jsonl`, `perfetto.json`, `pagemap.svg`).
    pub files: Vec<String>,
}

/// What the page shows.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// The corpus folder as given on the command line (shown, not linked).
    pub corpus: &'a str,
    pub camp: &'a Campaign,
    /// Saved examples by signature (a signature without one, e.g. found while its save failed,
    /// still has its table row).
    pub examples: BTreeMap<String, Vec<Example<'a>>>,
    pub known: Option<&'a KnownBugs>,
    /// The exit status the campaign (or merge) returns.
    pub exit: i32,
}

/// Percent-encodes a path for an href (every byte outside the unreserved set and `/`).
pub fn href(path: &str) -> String {
    let mut o = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#1a1a1a}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1em;font-family:ui-monospace,'DejaVu Sans Mono',monospace;margin-bottom:.3em}
.summary{color:#444}.verdict{font-weight:600}
table{border-collapse:collapse;width:100%;font-size:.9em}th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:.85em}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.4em .6em;overflow-x:auto;white-space:pre-wrap;word-break:break-all;margin:.2em 0}
.new{color:#fff;background:#c0392b;padding:.05em .4em;border-radius:3px;font-weight:600}
.known{color:#1e5e2e;background:#d8f0dc;padding:.05em .4em;border-radius:3px}
.confirmed{color:#8a1c1c;font-weight:600}.disagreement{color:#fff;background:#8e44ad;padding:.05em .4em;border-radius:3px}
.muted{color:#777}section.example{margin:1em 0 1.4em 0;padding-left:.8em;border-left:3px solid #ddd}
section.example.isnew{border-left-color:#c0392b}ul.files{margin:.3em 0;padding-left:1.2em}
svg text{font-family:system-ui,'DejaVu Sans',sans-serif;font-size:11px;fill:#333}";

/// How every report begins, up to its title.
const REPORT_HEAD: &str =
    "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";

/// Whether a file beginning with `head` (its first bytes, 512 are enough) is a report `render`
/// wrote: one `kvsim fuzz --html` may replace.
pub fn is_report(head: &[u8]) -> bool {
    let title = b"<title>kvsim campaign: ";
    head.starts_with(REPORT_HEAD.as_bytes()) && head[REPORT_HEAD.len()..].starts_with(title)
}

/// Renders the report page.
pub fn render(r: &Report) -> String {
    let c = r.camp;
    let mut o = String::new();
    o.push_str(REPORT_HEAD);
    let _ = writeln!(o, "<title>kvsim campaign: {} ({} runs)</title>", esc(&c.space), c.runs_done);
    let _ = writeln!(o, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(o, "<h1>kvsim fuzz campaign — {}</h1>", esc(&c.space));
    let (n_known, n_new) = match r.known {
        Some(k) => {
            let n = c.table.keys().filter(|s| k.row(s).is_none()).count();
            (c.table.len() - n, n)
        }
        None => (0, c.table.len()),
    };
    if let Some(why) = &c.partial {
        // Only examples missing (the shards' runs whole): the table is whole, as the command
        // says (the page said "the union of the runs done" of all 400 runs).
        let what = if why.starts_with(super::EXAMPLES_NOT_COMPLETED) {
            "the table is whole, but signatures lack the examples those shards had not saved"
        } else {
            "the table is the union of the runs done, not the whole seed range"
        };
        let _ = writeln!(
            o,
            "<p class=\"verdict\">PARTIAL merge: {} — {what}, and the campaign cannot be resumed.</p>",
            esc(why)
        );
    }
    let _ = writeln!(
        o,
        "<p class=\"summary\">Corpus <code>{}</code> · {} · <b>{}</b> runs · <b>{}</b> signature(s)</p>",
        esc(r.corpus),
        esc(&c.seeds_text()),
        c.runs_done,
        c.table.len()
    );
    let verdict = match r.known {
        Some(k) => format!(
            "Triage against <code>{}</code> (profile {}): {n_known} known, {n_new} new — exit {}{}",
            esc(&k.source),
            esc(&k.profile),
            r.exit,
            if n_new == 0 { " (nothing new)" } else { "" }
        ),
        None => format!("No known-bugs file: every signature counts — exit {}", r.exit),
    };
    let _ = writeln!(o, "<p class=\"verdict\">{verdict}</p>");

    o.push_str("<h2>Signatures found over runs</h2>\n");
    o.push_str(&curve_svg(c));

    o.push_str("<h2>Signatures</h2>\n");
    if c.table.is_empty() {
        o.push_str("<p>No violations found.</p>\n");
    } else {
        o.push_str("<table>\n<tr><th>signature</th><th>status</th><th>runs</th><th>first seed</th><th>KV replay (--confirm)</th><th>examples</th></tr>\n");
        for sig in ordered(r) {
            let e = &c.table[sig];
            let ex = r.examples.get(sig).map(Vec::as_slice).unwrap_or_default();
            let conf = confirmation(sig, ex);
            let _ = writeln!(
                o,
                "<tr><td><a href=\"#{}\"><code>{}</code></a></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
                href(&super::slug(sig)),
                esc(sig),
                status_html(sig, r.known),
                e.count,
                e.first_seed,
                conf,
                ex.len()
            );
        }
        o.push_str("</table>\n");
    }

    if let Some(k) = r.known {
        let unseen = super::unseen_known(&c.table, k, &c.space);
        if !unseen.is_empty() {
            let _ = writeln!(
                o,
                "<h2>Known entries not found</h2>\n<p class=\"muted\">Entries of <code>{}</code> this campaign did not \
                 find. One that needs a mode the campaign did not run cannot appear; one it could have found but a long \
                 campaign never finds may be stale (the model or the profile changed under it): re-check its note.</p>\n\
                 <table>\n<tr><th>signature</th><th>row</th><th>why not found</th></tr>",
                esc(&k.source)
            );
            for (b, why) in unseen {
                let why = esc(why.unwrap_or("could have been found"));
                let _ = writeln!(
                    o,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{why}</td></tr>",
                    esc(&b.signature),
                    esc(&b.row)
                );
            }
            o.push_str("</table>\n");
        }
    }

    if !c.table.is_empty() {
        o.push_str(
            "<h2>Examples</h2>\n<p class=\"muted\">Each command runs from the folder the campaign ran in. \
            Open a Perfetto file at ui.perfetto.dev (Open trace file) or chrome://tracing; the page map is an SVG \
            (time × page, coloured by tenant, violations marked).</p>\n",
        );
    }
    for sig in ordered(r) {
        let is_new = r.known.is_some_and(|k| k.row(sig).is_none());
        let _ = writeln!(
            o,
            "<section class=\"example{}\" id=\"{}\">\n<h3>{}</h3>",
            if is_new { " isnew" } else { "" },
            href(&super::slug(sig)),
            esc(sig)
        );
        let _ = writeln!(o, "<p>{}", status_html(sig, r.known));
        if let Some(b) = r.known.and_then(|k| k.known.iter().find(|b| b.signature == *sig)) {
            let _ = write!(o, " — {} · {}", esc(&b.reference), esc(&b.note));
        }
        o.push_str("</p>\n");
        let ex = r.examples.get(sig).map(Vec::as_slice).unwrap_or_default();
        if ex.is_empty() {
            o.push_str("<p class=\"muted\">No saved example.</p>\n");
        }
        for x in ex {
            example_html(&mut o, x);
        }
        o.push_str("</section>\n");
    }
    o.push_str("</body>\n</html>\n");
    o
}

/// Signatures in the order a person reads them: new ones first, then by name.
fn ordered<'a>(r: &'a Report) -> Vec<&'a String> {
    let mut v: Vec<&String> = r.camp.table.keys().collect();
    v.sort_by_key(|s| (r.known.is_some_and(|k| k.row(s).is_some()), s.as_str()));
    v
}

fn status_html(sig: &str, known: Option<&KnownBugs>) -> String {
    let triage = match known.map(|k| k.row(sig)) {
        None => "<span class=\"muted\">untriaged</span>".into(),
        Some(None) => "<span class=\"new\">new</span>".into(),
        Some(Some(row)) => format!("<span class=\"known\">known ({})</span>", esc(row)),
    };
    // A signature only a hardware fault produces (found only with those faults drawn).
    match crate::fuzz::hardware_fault(sig) {
        Some(_) => format!("{triage}, <span class=\"muted\">hardware</span>"),
        None => triage,
    }
}

/// The KV replay column (`--confirm`, on whichever backend ran): the first example's verdict (a disagreement anywhere wins).
fn confirmation(sig: &str, ex: &[Example]) -> String {
    if !super::is_confirmable(sig) {
        // `own_kv_misplaced` is a read too (its own KV at a wrong position), but no other
        // tenant's or request's KV reaches the output: nothing for a replay to confirm.
        let why = if sig.starts_with("own_kv_misplaced/") { "own KV: not replayed" } else { "not a read" };
        return format!("<span class=\"muted\">{why}</span>");
    }
    let all: Vec<Confirmation> = ex.iter().map(|x| Confirmation::of(x.failure.confirm.as_deref())).collect();
    let v = if all.contains(&Confirmation::Disagreement) {
        Confirmation::Disagreement
    } else {
        all.first().copied().unwrap_or(Confirmation::NotReplayed)
    };
    let class = match v {
        Confirmation::Confirmed => "confirmed",
        Confirmation::Disagreement => "disagreement",
        _ => "muted",
    };
    format!("<span class=\"{class}\">{}</span>", esc(v.label()))
}

fn example_html(o: &mut String, x: &Example) {
    let f = x.failure;
    let mut facts = vec![format!("seed {}", f.seed)];
    if f.events > 0 {
        // The example's size (`ExampleKey`: examples are kept smallest first).
        facts.push(format!("{} request(s), {} events as found", f.requests, f.events));
    }
    if let Some(n) = f.shrunk_requests {
        facts.push(format!("shrunk to {n} request(s)"));
    }
    if !f.necessary_knobs.is_empty() {
        facts.push(format!("necessary knobs: {}", f.necessary_knobs.join(", ")));
    }
    if !f.unjudged_knobs.is_empty() {
        facts.push(format!("knobs not judged (the shrink budget was spent): {}", f.unjudged_knobs.join(", ")));
    }
    let _ = writeln!(o, "<p>{}</p>", esc(&facts.join(" · ")));
    if let Some(s) = &f.shrunk {
        let _ = writeln!(o, "<div>Reproduce (shrunk):</div>\n<pre>{}</pre>", esc(s));
    }
    let _ = writeln!(o, "<div>Reproduce (as found):</div>\n<pre>{}</pre>", esc(&f.reproduce));
    if let Some(cl) = &f.confirm {
        let _ = writeln!(o, "<p>KV replay: {}</p>", esc(cl));
    }
    const NAMES: &[(&str, &str)] = &[
        ("pagemap.svg", "SVG page map"),
        ("perfetto.json", "Perfetto trace (ui.perfetto.dev)"),
        ("shrunk.toml", "shrunk scenario"),
        ("scenario.toml", "scenario as drawn"),
        ("shrunk.jsonl", "trace of the shrunk case"),
        ("trace.jsonl", "trace as drawn (filtered)"),
    ];
    let links: Vec<String> = NAMES
        .iter()
        .filter(|(n, _)| x.files.iter().any(|f| f == n))
        .map(|(n, what)| {
            format!(
                "<li><a href=\"{}\">{}</a> <code>{}</code></li>",
                esc(&href(&format!("{}{n}", x.folder_href))),
                what,
                n
            )
        })
        .collect();
    if !links.is_empty() {
        let _ = writeln!(o, "<ul class=\"files\">\n{}\n</ul>", links.join("\n"));
    }
}

/// The new-signature curve: signatures found (y) after each number of runs (x, logarithmic when
/// the campaign is long), one dot per signature with its name as a tooltip.
pub fn curve_svg(c: &Campaign) -> String {
    let pts = c.curve();
    let (w, h, ml, mr, mt, mb) = (720.0f64, 240.0f64, 48.0f64, 16.0f64, 12.0f64, 36.0f64);
    let max_x = c.range_runs().max(pts.last().map_or(1, |p| p.0)).max(1) as f64;
    let log = max_x >= 100.0;
    let max_y = (pts.len().max(1)) as f64;
    let sx = |k: f64| -> f64 {
        let f = if log { (k.max(1.0)).log10() / max_x.log10() } else { k / max_x };
        ml + f * (w - ml - mr)
    };
    let sy = |n: f64| -> f64 { mt + (1.0 - n / max_y) * (h - mt - mb) };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"signatures found over runs\">"
    );
    let _ = writeln!(
        o,
        "<rect x=\"{ml}\" y=\"{mt}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#fbfbfb\" stroke=\"#ccc\"/>",
        w - ml - mr,
        h - mt - mb
    );
    // x ticks: powers of ten (log) or five even steps.
    let mut xt: Vec<f64> = Vec::new();
    if log {
        let mut t = 1.0;
        while t <= max_x {
            xt.push(t);
            t *= 10.0;
        }
    } else {
        xt.extend((0..=5).map(|i| (max_x * i as f64 / 5.0).round()));
    }
    for t in xt {
        let x = sx(t);
        // A label near the right edge ends there (centred, "100,000" was cut to "100,00").
        let anchor = if x > w - mr - 24.0 { "end" } else { "middle" };
        let _ = writeln!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{mt}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
            h - mb,
            if anchor == "end" { x.min(w - 2.0) } else { x },
            h - mb + 14.0,
            thousands(t as u64)
        );
    }
    let ystep = ((max_y / 5.0).ceil()).max(1.0);
    let mut t = 0.0;
    while t <= max_y {
        let y = sy(t);
        let _ = writeln!(
            o,
            "<line x1=\"{ml}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - mr,
            ml - 6.0,
            y + 4.0,
            t as u64
        );
        t += ystep;
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">runs of the seed range{}</text>",
        ml + (w - ml - mr) / 2.0,
        h - 4.0,
        if log { " (log scale)" } else { "" }
    );
    let _ = writeln!(
        o,
        "<text x=\"12\" y=\"{:.1}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">signatures</text>",
        mt + (h - mt - mb) / 2.0,
        mt + (h - mt - mb) / 2.0
    );
    // The step line: flat until a signature's first run, then one up.
    let mut d = format!("M{:.1},{:.1}", sx(1.0), sy(0.0));
    for &(k, n) in &pts {
        let _ = write!(d, " H{:.1} V{:.1}", sx(k as f64), sy(n as f64));
    }
    let _ = write!(d, " H{:.1}", sx(max_x));
    let _ = writeln!(o, "<path d=\"{d}\" fill=\"none\" stroke=\"#2c6fbb\" stroke-width=\"2\"/>");
    let mut by_first: Vec<(&String, u64)> =
        c.table.iter().map(|(s, e)| (s, e.first_seed.wrapping_sub(c.seed_start) + 1)).collect();
    by_first.sort_by_key(|&(s, k)| (k, s.clone()));
    for (i, (sig, k)) in by_first.iter().enumerate() {
        let _ = writeln!(
            o,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#2c6fbb\"><title>{} — first at run {}</title></circle>",
            sx(*k as f64),
            sy((i + 1) as f64),
            esc(sig),
            thousands(*k)
        );
    }
    o.push_str("</svg>\n");
    if let Some(&(k, n)) = pts.last() {
        let _ = writeln!(
            o,
            "<p class=\"muted\">{n} signature(s); the last first found at run {} of {}{}.</p>",
            thousands(k),
            // Runs are numbered along the seed range (`Campaign::run_number`), which a shard
            // covers every n-th of.
            thousands(c.range_end().max(c.runs_done)),
            if c.shard.1 > 1 {
                format!(" of the seed range (this shard did {} of them)", thousands(c.runs_done))
            } else {
                String::new()
            }
        );
    }
    o
}

/// 1234567 → "1,234,567" (the page map's grouping).
fn thousands(n: u64) -> String {
    crate::picture::svg::group(n)
}

#[cfg(test)]
mod tests {
    use super::super::{Accounting, Entry};
    use super::*;
    use std::path::Path;

    fn campaign() -> Campaign {
        let mut a = Accounting::new(Campaign::new("profile:sglang-0.5.22", 0, (0, 1)), None);
        for k in 0..500u64 {
            let mut s = std::collections::BTreeSet::new();
            if k % 5 == 3 {
                s.insert("cross_tenant_read/late_write/visibility_lag".to_string());
            }
            if k == 170 {
                s.insert("page_leak/<decode>&\"x\"".to_string());
            }
            a.finished(k, s);
        }
        a.camp
    }

    #[test]
    fn the_page_is_well_formed_escaped_and_says_what_the_campaign_found() {
        let c = campaign();
        let k = KnownBugs::shipped("sglang-0.5.22").unwrap();
        assert!(k.row("cross_tenant_read/late_write/visibility_lag").is_some(), "the test relies on a known row");
        let dir = Path::new("corp <1>/cross_tenant_read--late_write--visibility_lag/seed-3");
        let mut f = Failure::new("cross_tenant_read/late_write/visibility_lag", 3, "profile:sglang-0.5.22", dir);
        f.shrunk = Some(Failure::shrunk_command(&f.signature, dir));
        f.confirm = Some("confirmed: 1 of 1 read(s) on cpu".into());
        let leak =
            Failure::new("page_leak/<decode>&\"x\"", 170, "profile:sglang-0.5.22", Path::new("corp <1>/p/seed-170"));
        let examples = BTreeMap::from([
            (
                f.signature.clone(),
                vec![Example {
                    failure: &f,
                    folder_href: "corp <1>/cross_tenant_read--late_write--visibility_lag/seed-3/".into(),
                    files: vec!["perfetto.json".into(), "pagemap.svg".into(), "shrunk.toml".into()],
                }],
            ),
            (
                leak.signature.clone(),
                vec![Example { failure: &leak, folder_href: "p/seed-170/".into(), files: vec![] }],
            ),
        ]);
        let page = render(&Report { corpus: "corp <1>", camp: &c, examples, known: Some(&k), exit: 11 });
        let doc = roxmltree::Document::parse_with_options(
            &page,
            roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() },
        )
        .unwrap_or_else(|e| panic!("not well-formed: {e}\n{page}"));
        let text: String = doc.descendants().filter(|n| n.is_text()).map(|n| n.text().unwrap()).collect();
        // The raw text comes back whole from the parser: every special character was escaped.
        assert!(text.contains("page_leak/<decode>&\"x\""), "{text}");
        // (The command is shell-quoted: the path has a space and `<`.)
        assert!(text.contains("kvsim run 'corp <1>/cross_tenant_read--late_write--visibility_lag/seed-3/shrunk.toml'"));
        assert!(text.contains("known (rdma-visibility-lag)") && text.contains("1 known, 1 new — exit 11"), "{text}");
        // The known entries not found, with why: a mode the campaign did not run, or none.
        assert!(text.contains("Known entries not found"), "{text}");
        assert!(text.contains("request_hang/after_heal/decode_prealloc/never_fitsprealloc-never-fitsneeds --liveness"));
        assert!(text.contains("wrong_status/rejected_answered_5xxrouter-waits-for-decodecould have been found"));
        // The table: the new signature first, its KV replay column, counts.
        let rows: Vec<Vec<String>> = doc
            .descendants()
            .filter(|n| n.has_tag_name("tr"))
            .map(|tr| {
                tr.children()
                    .filter(|n| n.is_element())
                    .map(|td| td.descendants().filter(|t| t.is_text()).filter_map(|t| t.text()).collect())
                    .collect()
            })
            .collect();
        assert_eq!(rows[1][0], "page_leak/<decode>&\"x\"");
        assert_eq!(rows[1][1], "new");
        assert_eq!(
            rows[2][..5],
            [
                "cross_tenant_read/late_write/visibility_lag",
                "known (rdma-visibility-lag), hardware",
                "100",
                "3",
                "confirmed"
            ]
        );
        assert_eq!(rows[1][4], "not a read");
        // Links: percent-encoded, only to files that exist.
        let hrefs: Vec<&str> = doc.descendants().filter_map(|n| n.attribute("href")).collect();
        assert!(
            hrefs.contains(&"corp%20%3C1%3E/cross_tenant_read--late_write--visibility_lag/seed-3/perfetto.json"),
            "{hrefs:?}"
        );
        assert!(!hrefs.iter().any(|h| h.ends_with("trace.jsonl")), "{hrefs:?}");
        // The curve: one dot per signature, at its first run.
        let dots: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("circle"))
            .map(|n| n.descendants().filter(|t| t.is_text()).filter_map(|t| t.text()).collect())
            .collect();
        assert_eq!(
            dots,
            [
                "cross_tenant_read/late_write/visibility_lag — first at run 4",
                "page_leak/<decode>&\"x\" — first at run 171"
            ]
        );
    }

    /// A partial merge says so above its table, and its seed line counts the runs done.
    #[test]
    fn a_partial_merge_says_so() {
        let mut c = Campaign::new("blind", 1000, (0, 1));
        c.next_k = 20_000;
        c.runs_done = 6_667;
        c.partial = Some("shard(s) 1/3, 2/3 missing".into());
        let page = render(&Report { corpus: "m0", camp: &c, examples: BTreeMap::new(), known: None, exit: 0 });
        assert!(page.contains("PARTIAL merge: shard(s) 1/3, 2/3 missing"), "{page}");
        assert!(page.contains("seeds 1000..21000, PARTIAL: 6667 of them run"), "{page}");
        assert!(page.contains("the table is the union of the runs done"), "{page}");
        // Only examples missing: the table is whole, as the command says.
        c.partial = Some(format!("{}: 1 in d1", super::super::EXAMPLES_NOT_COMPLETED));
        let page = render(&Report { corpus: "m0", camp: &c, examples: BTreeMap::new(), known: None, exit: 0 });
        assert!(page.contains("the table is whole, but signatures lack the examples"), "{page}");
        c.partial = None;
        let page = render(&Report { corpus: "m0", camp: &c, examples: BTreeMap::new(), known: None, exit: 0 });
        assert!(!page.contains("PARTIAL"));
    }

    #[test]
    fn an_empty_campaign_renders() {
        let c = Campaign::new("blind", 5, (0, 1));
        let page = render(&Report { corpus: "c", camp: &c, examples: BTreeMap::new(), known: None, exit: 0 });
        roxmltree::Document::parse_with_options(
            &page,
            roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() },
        )
        .expect("well-formed");
        assert!(page.contains("No violations found.") && page.contains("every signature counts — exit 0"));
        let mut c = c;
        c.table.insert("x/y".into(), Entry { count: 1, first_seed: 5 });
        c.runs_done = 1;
        c.next_k = 1;
        assert!(curve_svg(&c).contains("the last first found at run 1 of 1"));
    }

    #[test]
    fn helpers() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(esc("a<b>&\"'\u{1}"), "a&lt;b&gt;&amp;&quot;&#39;\u{fffd}");
        assert_eq!(href("a b/ü#?"), "a%20b/%C3%BC%23%3F");
    }
}
