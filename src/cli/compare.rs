//! `massgen eval compare DIR_A DIR_B`: two runs' folders read, compared
//! ([`crate::eval::compare`]) and printed (Markdown, or JSON with `--json`) on stdout;
//! the exit code says whether B is worse than A by more than `--fail-if-worse` points
//! (1) or the folders or flags were unusable (2).

use std::io::Write;

use super::fatal::Fatal;
use super::flags::CompareArgs;
use crate::eval::compare::{compare, markdown, read_run};

pub(super) fn run(args: &CompareArgs) -> Result<(), Fatal> {
    if let Some(points) = args.fail_if_worse.filter(|p| !(p.is_finite() && *p >= 0.0)) {
        return Err(Fatal::usage(format!(
            "--fail-if-worse must be a number of points of at least 0, got {points}"
        )));
    }
    let a = read_run(&args.a).map_err(|e| Fatal::usage(format!("DIR_A {e}")))?;
    let b = read_run(&args.b).map_err(|e| Fatal::usage(format!("DIR_B {e}")))?;
    let (a_name, b_name) = (args.a.display().to_string(), args.b.display().to_string());
    let comparison = compare(&a_name, &a, &b_name, &b).map_err(Fatal::usage)?;
    let text = if args.json {
        let mut json = serde_json::to_string_pretty(&comparison)
            .map_err(|e| Fatal::runtime(format!("cannot write the comparison: {e}")))?;
        json.push('\n');
        json
    } else {
        markdown(&comparison)
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Fatal::runtime(format!("stdout: {e}")))?;
    let Some(threshold) = args.fail_if_worse else {
        return Ok(());
    };
    let worse = comparison.worse_by_more_than(threshold);
    if worse.is_empty() {
        return Ok(());
    }
    let which: Vec<String> = worse.iter().map(|a| a.brief()).collect();
    eprintln!(
        "eval compare: B is worse than A by more than {threshold} points (p < 0.05) on {}",
        which.join("; ")
    );
    Err(Fatal::quiet(1))
}
