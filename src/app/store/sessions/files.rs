//! A finished session as files, in the spirit of MassGen's log directory:
//! `<dir>/log_<YYYYMMDD_HHMMSS>_<session id>/` with `coordination_events.json` (every
//! event), `vote.json` (counted and ignored votes, tally, winner), `agent_outputs/<agent>.txt`
//! (each agent's answers in order), `final_answer.txt` and `session.json` (the record).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use massgen_core::coordination::{EventKind, SessionEvent};
use serde_json::{Value, json};

pub fn write(
    dir: &Path,
    id: &str,
    events: &[Arc<SessionEvent>],
    record: &Value,
) -> std::io::Result<PathBuf> {
    let stamp = events.first().map_or(0, |e| e.at_ms / 1000);
    let root = dir.join(format!("log_{}_{id}", utc_stamp(stamp)));
    let outputs = root.join("agent_outputs");
    create_private_dirs(&outputs)?;
    write_private(
        &root.join("coordination_events.json"),
        to_json(&json!(events)),
    )?;
    let mut per_agent: std::collections::BTreeMap<String, String> = Default::default();
    let mut ignored = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::Answer { answer } => {
                let text = per_agent.entry(answer.agent.agent_id.clone()).or_default();
                text.push_str(&format!(
                    "=== {} ===\n{}\n\n",
                    answer.answer_label,
                    answer.content.as_text()
                ));
            }
            EventKind::VoteIgnored { vote, why } => ignored.push(json!({"vote": vote, "why": why})),
            _ => {}
        }
    }
    for (agent, text) in &per_agent {
        // Agent ids come from the operator's config; keep the file name plain anyway.
        let name: String = agent
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        write_private(&outputs.join(format!("{name}.txt")), text)?;
    }
    let vote = json!({
        "votes": record["votes"], "ignored_votes": ignored,
        "consensus": record["consensus"], "winner": record["winner"],
    });
    write_private(&root.join("vote.json"), to_json(&vote))?;
    if let Some(answer) = record["final_answer"].as_str() {
        write_private(&root.join("final_answer.txt"), answer)?;
    }
    write_private(&root.join("session.json"), to_json(record))?;
    Ok(root)
}

// Records hold whole prompts and answers: only the server's user may read them (0700
// folders, 0600 files on unix; elsewhere the folder's own permissions apply).

fn create_private_dirs(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

fn write_private(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(contents.as_ref())
}

fn to_json(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// `YYYYMMDD_HHMMSS` in UTC from Unix seconds.
fn utc_stamp(secs: u64) -> String {
    let (y, m, d) = crate::app::quota::civil_date(secs / 86_400);
    let rem = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}_{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_stamp_matches_known_dates() {
        assert_eq!(super::utc_stamp(0), "19700101_000000");
        assert_eq!(super::utc_stamp(1_700_000_000), "20231114_221320");
        assert_eq!(super::utc_stamp(951_782_400), "20000229_000000");
    }
}
