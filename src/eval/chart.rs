//! `chart.svg`: each arm's accuracy (with its 95% interval) against what an item cost it,
//! so "is the panel worth its price" can be read at a glance. A standalone SVG: no
//! scripts, no fonts or images from elsewhere, so it opens the same in any browser.

use std::fmt::Write as _;

use super::report::{ArmReport, Report};
use crate::app::evals::ArmKind;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 500.0;
/// The plot area; the right margin holds the legend, the bottom the axis label and notes.
const LEFT: f64 = 70.0;
const RIGHT: f64 = 560.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 400.0;

const PANEL_COLOUR: &str = "#1f77b4";
const AGENT_COLOUR: &str = "#ff7f0e";
const SC_COLOUR: &str = "#2ca02c";

fn colour(kind: ArmKind) -> &'static str {
    match kind {
        ArmKind::Panel => PANEL_COLOUR,
        ArmKind::Agent => AGENT_COLOUR,
        ArmKind::SelfConsistency => SC_COLOUR,
    }
}

/// Text made safe for XML content and attribute values.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters even as references.
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate: a report read back from JSON may hold anything, and an SVG with NaN in
/// it does not render.
fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "0".to_string()
    }
}

fn unit(v: f64) -> f64 {
    if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// The cost per item an arm is plotted at; `None` when it has none to plot.
fn priced(arm: &ArmReport) -> Option<f64> {
    arm.cost_per_item_usd.filter(|c| c.is_finite() && *c >= 0.0)
}

/// A round step (1, 2 or 5 times a power of ten) that cuts `span` into about five.
fn nice_step(span: f64) -> f64 {
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let k = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    k * mag
}

/// How the x axis maps cost to pixels.
enum XScale {
    /// `0..max` USD across the plot.
    Cost { max: f64, step: f64 },
    /// No cost to scale by: every arm on one column in the middle.
    Column,
}

impl XScale {
    fn of(report: &Report) -> Self {
        let max = report
            .arms
            .iter()
            .filter_map(priced)
            .fold(0.0_f64, f64::max);
        // `priced` keeps finite costs >= 0 only, so this is "no cost above 0".
        if max <= 0.0 {
            return Self::Column;
        }
        // A little headroom so the largest point and its label are not on the edge.
        let step = nice_step(max * 1.1);
        let max = (max * 1.1 / step).ceil() * step;
        if !step.is_finite() || step <= 0.0 || !max.is_finite() {
            return Self::Column;
        }
        Self::Cost { max, step }
    }

    fn x(&self, cost: Option<f64>) -> f64 {
        match (self, cost) {
            (Self::Cost { max, .. }, Some(c)) => LEFT + (RIGHT - LEFT) * (c / max).min(1.0),
            (Self::Cost { .. }, None) => LEFT,
            (Self::Column, _) => (LEFT + RIGHT) / 2.0,
        }
    }
}

fn y(accuracy: f64) -> f64 {
    BOTTOM - (BOTTOM - TOP) * unit(accuracy)
}

fn text(out: &mut String, x: f64, y: f64, attrs: &str, body: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}"{attrs}>{}</text>"#,
        num(x),
        num(y),
        xml_escape(body)
    );
}

fn axes(out: &mut String, scale: &XScale, all_unpriced: bool) {
    out.push_str("<g class=\"grid\" stroke=\"#dddddd\" stroke-width=\"1\">\n");
    for i in 0..=10 {
        let yy = y(f64::from(i) / 10.0);
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
            num(LEFT),
            num(yy),
            num(RIGHT),
            num(yy)
        );
    }
    if let XScale::Cost { max, step } = scale {
        let ticks = (max / step).round() as u32;
        for i in 0..=ticks {
            let xx = LEFT + (RIGHT - LEFT) * f64::from(i) * step / max;
            let _ = writeln!(
                out,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
                num(xx),
                num(TOP),
                num(xx),
                num(BOTTOM)
            );
        }
    }
    out.push_str("</g>\n");
    let _ = writeln!(
        out,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333333"/>"##,
        num(LEFT),
        num(TOP),
        num(RIGHT - LEFT),
        num(BOTTOM - TOP)
    );
    for i in 0..=5 {
        let v = f64::from(i) / 5.0;
        text(
            out,
            LEFT - 8.0,
            y(v) + 4.0,
            r#" text-anchor="end""#,
            &format!("{v:.1}"),
        );
    }
    let label = match scale {
        XScale::Cost { max, step } => {
            let decimals = (-step.log10().floor()).clamp(0.0, 8.0) as usize;
            let ticks = (max / step).round() as u32;
            for i in 0..=ticks {
                let v = f64::from(i) * step;
                let xx = LEFT + (RIGHT - LEFT) * v / max;
                text(
                    out,
                    xx,
                    BOTTOM + 18.0,
                    r#" text-anchor="middle""#,
                    &format!("{v:.decimals$}"),
                );
            }
            "cost per item (USD)"
        }
        XScale::Column if all_unpriced => "cost per item: cost unknown (no arm is priced)",
        XScale::Column => "cost per item: $0 for every priced arm",
    };
    text(
        out,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 40.0,
        r#" text-anchor="middle""#,
        label,
    );
    let _ = writeln!(
        out,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">accuracy (95% CI)</text>"#,
        num((TOP + BOTTOM) / 2.0),
        num((TOP + BOTTOM) / 2.0)
    );
}

fn point(out: &mut String, arm: &ArmReport, scale: &XScale) {
    let cost = priced(arm);
    let (cx, cy) = (scale.x(cost), y(arm.accuracy));
    let (lo, hi) = (y(arm.ci95[0]), y(arm.ci95[1]));
    let c = colour(arm.kind);
    let cost_text = cost.map_or_else(|| "unpriced".to_string(), |v| format!("${v:.6}/item"));
    let _ = writeln!(out, r#"<g class="arm">"#);
    let _ = writeln!(
        out,
        "<title>{}</title>",
        xml_escape(&format!(
            "{} ({}): accuracy {:.3} [{:.3}, {:.3}], n={}, {cost_text}",
            arm.name,
            arm.kind.as_str(),
            unit(arm.accuracy),
            unit(arm.ci95[0]),
            unit(arm.ci95[1]),
            arm.n
        ))
    );
    let _ = writeln!(
        out,
        r#"<path d="M{x} {lo}V{hi}M{l} {lo}H{r}M{l} {hi}H{r}" stroke="{c}" stroke-width="1.5" fill="none"/>"#,
        x = num(cx),
        lo = num(lo),
        hi = num(hi),
        l = num(cx - 4.0),
        r = num(cx + 4.0),
    );
    let fill = if cost.is_some() { c } else { "#ffffff" };
    let _ = writeln!(
        out,
        r#"<circle cx="{}" cy="{}" r="5" fill="{fill}" stroke="{c}" stroke-width="2"/>"#,
        num(cx),
        num(cy)
    );
    // Labels of points on the right half go leftwards, clear of the legend.
    if cx > (LEFT + RIGHT) / 2.0 + 60.0 {
        text(out, cx - 9.0, cy + 4.0, r#" text-anchor="end""#, &arm.name);
    } else {
        text(out, cx + 9.0, cy + 4.0, "", &arm.name);
    }
    out.push_str("</g>\n");
}

fn legend(out: &mut String, any_unpriced: bool) {
    let x = RIGHT + 20.0;
    let mut entries = vec![
        (PANEL_COLOUR, PANEL_COLOUR, "panel"),
        (AGENT_COLOUR, AGENT_COLOUR, "agent alone"),
        (SC_COLOUR, SC_COLOUR, "self-consistency"),
    ];
    if any_unpriced {
        entries.push(("#ffffff", "#333333", "unpriced (hollow)"));
    }
    out.push_str("<g class=\"legend\">\n");
    for (i, (fill, stroke, label)) in entries.into_iter().enumerate() {
        let yy = TOP + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="10" height="10" fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>"#,
            num(x),
            num(yy - 9.0)
        );
        text(out, x + 16.0, yy, "", label);
    }
    out.push_str("</g>\n");
}

/// The report's arms as an accuracy-against-cost scatter plot, one circle per arm with its
/// interval as an error bar. Arms without a price sit at x = 0 with a hollow marker and are
/// named in a note; when no arm has a cost above 0, every arm sits on one column.
pub fn accuracy_cost_svg(report: &Report) -> String {
    let scale = XScale::of(report);
    let unpriced: Vec<&str> = report
        .arms
        .iter()
        .filter(|a| priced(a).is_none())
        .map(|a| a.name.as_str())
        .collect();
    let all_unpriced = !report.arms.is_empty() && unpriced.len() == report.arms.len();

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
        w = num(WIDTH),
        h = num(HEIGHT)
    );
    let _ = writeln!(
        out,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    text(
        &mut out,
        LEFT,
        28.0,
        r#" font-size="15""#,
        &format!("Accuracy vs cost per item: {}", report.run.run_id),
    );
    axes(&mut out, &scale, all_unpriced);
    for arm in &report.arms {
        point(&mut out, arm, &scale);
    }
    legend(&mut out, !unpriced.is_empty());
    let mut note_y = BOTTOM + 62.0;
    if report.arms.is_empty() {
        text(&mut out, LEFT, note_y, "", "No arm to plot.");
        note_y += 16.0;
    }
    if !unpriced.is_empty() {
        let where_ = if matches!(scale, XScale::Column) {
            "on the column"
        } else {
            "at x = 0"
        };
        let note = format!(
            "Unpriced, cost unknown (hollow, {where_}): {}",
            unpriced.join(", ")
        );
        text(&mut out, LEFT, note_y, r#" font-size="11""#, &note);
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report::RunInfo;

    fn arm(name: &str, kind: ArmKind, acc: f64, cost: Option<f64>) -> ArmReport {
        ArmReport {
            name: name.into(),
            kind,
            samples: 1,
            models: vec![],
            n: 10,
            correct: (acc * 10.0) as u64,
            accuracy: acc,
            ci95: [acc - 0.2, acc + 0.1],
            cost_usd: cost.map(|c| c * 10.0),
            cost_per_item_usd: cost,
            input_tokens: 0,
            output_tokens: 0,
            latency_p50_s: None,
            latency_p95_s: None,
            failures: 0,
            judge_cost_usd: None,
            vs_panel: None,
        }
    }

    fn report(arms: Vec<ArmReport>) -> Report {
        Report {
            run: RunInfo {
                run_id: "run<1>".into(),
                created: 0,
                data: "d".into(),
                grader: "exact".into(),
                questions: 10,
                max_cost_usd: None,
                stopped_by_budget: false,
                interrupted: false,
                ..RunInfo::default()
            },
            verdict: None,
            arms,
            total_cost_usd: None,
            judge_cost_usd: None,
            groups: None,
        }
    }

    /// Checks that every tag is closed in order and no raw `<` or `&` is left in text or
    /// attributes (the escaping a parser would reject).
    fn assert_well_formed(svg: &str) {
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            for (i, _) in text.match_indices('&') {
                let entity = &text[i..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                        .iter()
                        .any(|e| entity.starts_with(e)),
                    "raw & in text: {text}"
                );
            }
            let close = rest[open..].find('>').expect("unclosed tag") + open;
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "raw < inside a tag: {tag}");
            assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim()), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("empty tag");
                stack.push(name);
            }
            rest = &rest[close + 1..];
        }
        assert!(rest.trim().is_empty(), "text after the root: {rest}");
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        for bad in ["NaN", "inf", "<script", "href", "url("] {
            assert!(!svg.contains(bad), "{bad} in {svg}");
        }
    }

    #[test]
    fn one_circle_per_arm_with_escaped_names() {
        let svg = accuracy_cost_svg(&report(vec![
            arm("panel", ArmKind::Panel, 0.8, Some(0.02)),
            arm("a<b&c", ArmKind::Agent, 0.6, Some(0.004)),
            arm("sc5:'x\"", ArmKind::SelfConsistency, 0.7, Some(0.01)),
        ]));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains(">a&lt;b&amp;c</text>"), "{svg}");
        assert!(!svg.contains("a<b"));
        assert!(svg.contains("sc5:&apos;x&quot;"));
        assert!(svg.contains("run&lt;1&gt;"));
        for c in [PANEL_COLOUR, AGENT_COLOUR, SC_COLOUR] {
            assert!(svg.contains(&format!(r#"fill="{c}" stroke="{c}""#)), "{c}");
        }
        assert!(svg.contains("cost per item (USD)"));
        assert!(!svg.contains("Unpriced"));
        // The costliest arm stays inside the plot, short of its right edge.
        let cx: Vec<f64> = svg
            .match_indices("<circle cx=\"")
            .map(|(i, m)| {
                let s = &svg[i + m.len()..];
                s[..s.find('"').unwrap()].parse().unwrap()
            })
            .collect();
        assert!(cx.iter().all(|&x| (LEFT..RIGHT).contains(&x)), "{cx:?}");
        assert!(cx[1] < cx[2] && cx[2] < cx[0], "{cx:?}");
    }

    #[test]
    fn unpriced_arm_is_hollow_at_zero_and_noted() {
        let svg = accuracy_cost_svg(&report(vec![
            arm("panel", ArmKind::Panel, 0.8, None),
            arm("agent:a", ArmKind::Agent, 0.6, Some(0.004)),
        ]));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<circle").count(), 2);
        let hollow = format!(
            r##"<circle cx="{}" cy="{}" r="5" fill="#ffffff""##,
            num(LEFT),
            num(y(0.8))
        );
        assert!(svg.contains(&hollow), "{svg}");
        assert!(svg.contains("Unpriced, cost unknown (hollow, at x = 0): panel"));
        assert!(svg.contains("unpriced (hollow)"));
    }

    #[test]
    fn all_unpriced_or_free_use_one_column() {
        for (cost, label) in [
            (None, "cost unknown"),
            (Some(0.0), "$0 for every priced arm"),
        ] {
            let svg = accuracy_cost_svg(&report(vec![
                arm("panel", ArmKind::Panel, 0.8, cost),
                arm("agent:a", ArmKind::Agent, 1.0, cost),
            ]));
            assert_well_formed(&svg);
            assert!(svg.contains(label), "{svg}");
            let col = format!(r#"<circle cx="{}""#, num((LEFT + RIGHT) / 2.0));
            assert_eq!(svg.matches(&col).count(), 2, "{svg}");
        }
    }

    #[test]
    fn no_arms_and_bad_numbers_stay_finite() {
        let svg = accuracy_cost_svg(&report(vec![]));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<circle").count(), 0);
        assert!(svg.contains("No arm to plot."));

        let mut odd = arm("odd", ArmKind::Agent, f64::NAN, Some(f64::INFINITY));
        odd.ci95 = [f64::NEG_INFINITY, f64::NAN];
        let svg = accuracy_cost_svg(&report(vec![
            odd,
            arm("tiny", ArmKind::Agent, 0.5, Some(1e-9)),
        ]));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<circle").count(), 2);
    }

    #[test]
    #[should_panic(expected = "mismatched")]
    fn the_checker_catches_an_unclosed_tag() {
        assert_well_formed(r#"<svg xmlns="http://www.w3.org/2000/svg"><g></svg>"#);
    }

    #[test]
    #[should_panic(expected = "raw &")]
    fn the_checker_catches_a_raw_ampersand() {
        assert_well_formed(r#"<svg xmlns="http://www.w3.org/2000/svg"><text>a&b</text></svg>"#);
    }

    #[test]
    fn nice_steps_are_round() {
        for (span, step) in [(1.1, 0.5), (0.022, 0.005), (50.0, 10.0), (0.9, 0.2)] {
            let got = nice_step(span);
            assert!((got - step).abs() < step * 1e-9, "{span}: {got}");
        }
    }
}
