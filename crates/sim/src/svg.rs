//! `sim --format svg`: the split as a picture. Per listener and acceleration region, one bar
//! 0–100 % stacked with each group's share in priority order, the first pass solid and the
//! leftover hatched in the group's colour; under `--compare` the bar under the old config
//! beside it; under `--verify` a thin bar of the observed shares beneath. Every number comes
//! from the same reports the table and JSON print, and the output is a pure function of them
//! (no clock, no randomness), so a golden file can hold it.
//!
//! Each bar segment carries `data-listener`, `data-region`, `data-group`, `data-part`
//! (`first-pass`, `leftover`, `observed`) and `data-value` (percent, 6 decimals), for tests
//! and for anyone scripting over the picture; the visible widths are `value × 5.2` px.

use std::fmt::Write as _;

use gtd_core::split::Mode;

use super::render::Output;
use super::report::{ListenerReport, RegionReport};

/// Width of a full (100 %) bar, px.
const BAR_W: f64 = 520.0;
/// Left of the bar: the region's name and mode.
const LABEL_W: f64 = 150.0;
/// One column: label, bar and a margin.
const COL_W: f64 = LABEL_W + BAR_W + 30.0;
const BAR_H: f64 = 24.0;
const OBSERVED_H: f64 = 8.0;
const LINE_H: f64 = 16.0;
const MARGIN: f64 = 16.0;

/// Okabe–Ito colours (distinguishable with the common colour-vision deficiencies), in the
/// order a listener's groups first appear.
const COLOURS: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

/// The picture being drawn: its elements, the fill patterns they use, and the height so far.
struct Canvas {
    body: String,
    patterns: String,
    y: f64,
}

/// The picture of `o`, drawn from `config`; `before` is `--compare`'s old config (its path as
/// given) and its reports.
pub(crate) fn svg(
    o: &Output<'_>,
    config: &str,
    before: Option<(&str, &[ListenerReport])>,
) -> String {
    let (old_config, before) = before.unzip();
    let columns = if before.is_some() { 2.0 } else { 1.0 };
    let width = MARGIN * 2.0 + COL_W * columns;
    let mut canvas = Canvas {
        body: String::new(),
        patterns: String::new(),
        y: MARGIN,
    };
    let verify = o
        .reports
        .iter()
        .any(|l| l.regions.iter().any(|r| r.verify.is_some()));
    let graded = o.reports.iter().any(|l| {
        l.regions
            .iter()
            .any(|r| r.groups.iter().any(|g| g.graded.is_some()))
    });
    // Under --compare, the heads of the two columns: the old config and the new.
    let heads = before.map(|_| (old_config.unwrap_or_default(), config));
    for (li, l) in o.reports.iter().enumerate() {
        let old = before.and_then(|b| b.iter().find(|x| x.name == l.name));
        let names = group_names(l, old);
        group_patterns(&mut canvas.patterns, li, names.len(), graded);
        draw_listener(&mut canvas, li, l, old, &names, heads, verify);
    }
    draw_key(&mut canvas, graded, verify);
    document(width, &canvas)
}

/// The fill patterns of listener `li`'s groups: the leftover's hatching and (graceful) the
/// spill's dots, in each group's colour.
fn group_patterns(patterns: &mut String, li: usize, groups: usize, graded: bool) {
    for gi in 0..groups {
        let c = colour(gi);
        let _ = write!(
            patterns,
            r#"<pattern id="leftover-{li}-{gi}" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)"><rect width="6" height="6" fill="{c}" fill-opacity="0.3"/><rect width="3" height="6" fill="{c}"/></pattern>"#
        );
        if graded {
            let _ = write!(
                patterns,
                r#"<pattern id="spill-{li}-{gi}" patternUnits="userSpaceOnUse" width="5" height="5"><rect width="5" height="5" fill="{c}" fill-opacity="0.3"/><circle cx="2.5" cy="2.5" r="1.4" fill="{c}"/></pattern>"#
            );
        }
    }
}

/// One listener: its title, the columns' heads under --compare, and each region's bars
/// (before and after when `old` is the listener under the old config).
fn draw_listener(
    canvas: &mut Canvas,
    li: usize,
    l: &ListenerReport,
    old: Option<&ListenerReport>,
    names: &[String],
    heads: Option<(&str, &str)>,
    verify: bool,
) {
    let body = &mut canvas.body;
    let mut y = canvas.y;
    y += 18.0;
    let _ = writeln!(
        body,
        r#"<text x="{MARGIN}" y="{y}" class="title">listener {} — {} :{} · failover {} · fail_open {} · affinity {}</text>"#,
        esc(&l.name),
        l.protocol,
        l.port,
        l.failover,
        if l.fail_open { "on" } else { "off" },
        l.affinity
    );
    y += 8.0;
    if let Some((old_config, config)) = heads {
        y += LINE_H;
        let heads = [
            (0.0, format!("before: {old_config}")),
            (1.0, format!("after: {config}")),
        ];
        for (col, head) in heads {
            let x = MARGIN + col * COL_W + LABEL_W;
            let _ = writeln!(
                body,
                r#"<text x="{x}" y="{y}" class="head">{}</text>"#,
                esc(&head)
            );
        }
    }
    for r in &l.regions {
        y += 10.0;
        let mut lines = 0;
        let mut columns: Vec<(f64, &'static str, Option<&RegionReport>)> = Vec::new();
        if let Some(old) = old {
            columns.push((
                MARGIN,
                "before",
                old.regions.iter().find(|x| x.region == r.region),
            ));
            columns.push((MARGIN + COL_W, "after", Some(r)));
        } else {
            columns.push((MARGIN, "after", Some(r)));
        }
        for (x, view, region) in columns {
            let n = match region {
                Some(region) => draw_region(body, x, y, li, l, region, names, view, verify),
                None => {
                    let _ = writeln!(
                        body,
                        r#"<text x="{}" y="{}" class="note">{} does not serve {} in OLD</text>"#,
                        x + LABEL_W,
                        y + BAR_H * 0.7,
                        esc(&r.region),
                        esc(&l.name)
                    );
                    1
                }
            };
            lines = lines.max(n);
        }
        y += BAR_H + if verify { OBSERVED_H + 2.0 } else { 0.0 };
        y += LINE_H * lines as f64 + 4.0;
    }
    y += 12.0;
    canvas.y = y;
}

/// The key under the bars: what solid, hatched, dotted and thin bars stand for.
fn draw_key(canvas: &mut Canvas, graded: bool, verify: bool) {
    let Canvas { body, patterns, y } = canvas;
    *y += 4.0;
    let k = MARGIN;
    let _ = writeln!(
        body,
        r##"<rect x="{k}" y="{}" width="14" height="10" fill="#555"/><text x="{}" y="{}" class="note">first pass (each group's ratio of what the groups above it left)</text>"##,
        y,
        k + 20.0,
        *y + 9.0
    );
    *y += LINE_H;
    let _ = writeln!(
        body,
        r##"<rect x="{k}" y="{}" width="14" height="10" fill="url(#leftover-key)"/><text x="{}" y="{}" class="note">leftover (what the cascade left, split equally among the eligible groups)</text>"##,
        y,
        k + 20.0,
        *y + 9.0
    );
    patterns.push_str(r##"<pattern id="leftover-key" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)"><rect width="6" height="6" fill="#555" fill-opacity="0.3"/><rect width="3" height="6" fill="#555"/></pattern>"##);
    if graded {
        *y += LINE_H;
        let _ = writeln!(
            body,
            r##"<rect x="{k}" y="{}" width="14" height="10" fill="url(#spill-key)"/><text x="{}" y="{}" class="note">spill (failover = "graceful": what the groups above did not keep; every part × the group's keep, §3.3)</text>"##,
            y,
            k + 20.0,
            *y + 9.0
        );
        patterns.push_str(r##"<pattern id="spill-key" patternUnits="userSpaceOnUse" width="5" height="5"><rect width="5" height="5" fill="#555" fill-opacity="0.3"/><circle cx="2.5" cy="2.5" r="1.4" fill="#555"/></pattern>"##);
    }
    if verify {
        *y += LINE_H;
        let _ = writeln!(
            body,
            r##"<rect x="{k}" y="{}" width="14" height="5" fill="#555"/><text x="{}" y="{}" class="note">observed (--verify: decisions through the real selectors)</text>"##,
            *y + 3.0,
            k + 20.0,
            *y + 9.0
        );
    }
    *y += LINE_H;
    let _ = writeln!(
        body,
        r#"<text x="{k}" y="{}" class="note">percent of the traffic entering each node (docs/design.md §3.2)</text>"#,
        *y + 9.0
    );
    *y += LINE_H + MARGIN;
}

/// The SVG document around what `canvas` holds.
fn document(width: f64, canvas: &Canvas) -> String {
    let Canvas { body, patterns, y } = canvas;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" font-family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif" font-size="12">"#
    );
    out.push_str("<style>.title{font-size:14px;font-weight:600;fill:#1d2430}.head{font-weight:600;fill:#5c6777}.region{font-weight:600;fill:#1d2430}.mode{fill:#5c6777;font-size:11px}.bad{fill:#c62828;font-size:11px;font-weight:600}.note{fill:#5c6777}.in{fill:#fff;font-size:11px;font-weight:600}.cap{fill:#1d2430}</style>\n");
    let _ = writeln!(out, "<defs>{patterns}</defs>");
    let _ = writeln!(
        out,
        r##"<rect width="{width}" height="{y}" fill="#ffffff"/>"##
    );
    out.push_str(body);
    out.push_str("</svg>\n");
    out
}

/// Draws one region's bar at (`x`, `y`) and its captions; returns the caption lines used.
#[allow(clippy::too_many_arguments)]
fn draw_region(
    out: &mut String,
    x: f64,
    y: f64,
    li: usize,
    l: &ListenerReport,
    r: &RegionReport,
    names: &[String],
    view: &str,
    verify: bool,
) -> usize {
    let (mode, class) = match r.mode {
        Mode::Cascade => ("cascade", "mode"),
        Mode::Failover => ("FAILOVER", "bad"),
        Mode::FailOpen => ("FAIL-OPEN", "bad"),
        Mode::NoRoute => ("NO ROUTE", "bad"),
    };
    let _ = writeln!(
        out,
        r#"<text x="{x}" y="{}" class="region">{}</text><text x="{x}" y="{}" class="{class}">{mode}</text>"#,
        y + 10.0,
        esc(&r.region),
        y + 23.0
    );
    let bx = x + LABEL_W;
    let _ = writeln!(
        out,
        r##"<rect x="{bx}" y="{y}" width="{BAR_W}" height="{BAR_H}" fill="#eef1f5"/>"##
    );
    let data = |group: &str, part: &str, value: f64| {
        format!(
            r#"data-listener="{}" data-region="{}" data-view="{view}" data-group="{}" data-part="{part}" data-value="{value:.6}""#,
            esc(&l.name),
            esc(&r.region),
            esc(group)
        )
    };
    let mut at = bx;
    for g in &r.groups {
        let gi = names.iter().position(|n| *n == g.name).unwrap_or(0);
        let c = colour(gi);
        // Under graceful each part is drawn at what the group keeps of it, so that the
        // segments add up to the share; the spill from above is a third part.
        let [first, leftover, spill] = g.parts;
        let graded = g.graded.is_some();
        let parts = [
            Some(("first-pass", first, c.to_owned())),
            Some(("leftover", leftover, format!("url(#leftover-{li}-{gi})"))),
            graded.then(|| ("spill", spill, format!("url(#spill-{li}-{gi})"))),
        ];
        for (part, value, fill) in parts.into_iter().flatten() {
            let w = px(value);
            let _ = writeln!(
                out,
                r#"<rect x="{at:.3}" y="{y}" width="{w:.3}" height="{BAR_H}" fill="{fill}" {}><title>{}: {} {:.2} %</title></rect>"#,
                data(&g.name, part, value),
                esc(&g.name),
                part.replace('-', " "),
                value
            );
            at += w;
        }
        // The share written on the segment when it is wide enough to hold it.
        let w = px(g.share);
        if w >= 44.0 {
            let _ = writeln!(
                out,
                r#"<text x="{:.3}" y="{}" class="in" text-anchor="middle" paint-order="stroke" stroke="{c}" stroke-width="3">{:.1}</text>"#,
                at - w / 2.0,
                y + BAR_H * 0.68,
                g.share
            );
        }
    }
    let mut cy = y + BAR_H;
    if verify {
        let mut at = bx;
        cy += 2.0;
        for g in &r.groups {
            let value = g.observed.unwrap_or(0.0);
            let gi = names.iter().position(|n| *n == g.name).unwrap_or(0);
            let w = px(value);
            let _ = writeln!(
                out,
                r#"<rect x="{at:.3}" y="{cy}" width="{w:.3}" height="{OBSERVED_H}" fill="{}" {}><title>{}: observed {:.2} %</title></rect>"#,
                colour(gi),
                data(&g.name, "observed", value),
                esc(&g.name),
                value
            );
            at += w;
        }
        cy += OBSERVED_H;
    }
    // One caption line per group: its colour, name and numbers.
    let mut lines = 0;
    for g in &r.groups {
        let gi = names.iter().position(|n| *n == g.name).unwrap_or(0);
        let ly = cy + LINE_H * (lines as f64 + 1.0);
        let mut text = match g.graded {
            None => format!(
                "#{} {} {:.2} % = {:.2} first pass + {:.2} leftover · ratio {}",
                g.priority,
                esc(&g.name),
                g.share,
                g.first_pass,
                g.leftover,
                super::capacity::number(g.ratio)
            ),
            Some(graded) => format!(
                "#{} {} {:.2} % from ({:.2} first pass + {:.2} leftover + {:.2} spill) × {:.3} keeps (scaled up when some passed the last group) · usable {:.0} % · ratio {}",
                g.priority,
                esc(&g.name),
                g.share,
                g.first_pass,
                g.leftover,
                graded.spill,
                graded.keep,
                graded.usable * 100.0,
                super::capacity::number(g.ratio)
            ),
        };
        if !g.healthy {
            text.push_str(" · UNHEALTHY");
        }
        if let Some(obs) = g.observed {
            let _ = write!(text, " · observed {obs:.2}");
        }
        if let Some(b) = g.share_before.filter(|_| view == "after") {
            let _ = write!(text, " · was {b:.2} ({:+.2})", g.share - b);
        }
        let _ = writeln!(
            out,
            r#"<rect x="{bx}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{ly}" class="cap">{text}</text>"#,
            ly - 9.0,
            colour(gi),
            bx + 15.0
        );
        lines += 1;
    }
    if let Some((n, max)) = r.verify {
        let ly = cy + LINE_H * (lines as f64 + 1.0);
        let _ = writeln!(
            out,
            r#"<text x="{bx}" y="{ly}" class="note">verify: {n} decisions; largest deviation {max:.2} points</text>"#
        );
        lines += 1;
    }
    lines
}

/// The listener's group names in the order they first appear (after's regions, then the old
/// config's), which fixes each group's colour across its regions and both sides.
fn group_names(l: &ListenerReport, old: Option<&ListenerReport>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let all = l
        .regions
        .iter()
        .chain(old.into_iter().flat_map(|o| &o.regions));
    for r in all {
        for g in &r.groups {
            if !names.contains(&g.name) {
                names.push(g.name.clone());
            }
        }
    }
    names
}

fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// Percent to px along a bar.
fn px(percent: f64) -> f64 {
    percent.clamp(0.0, 100.0) * BAR_W / 100.0
}

/// Text and attribute values escaped for XML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
