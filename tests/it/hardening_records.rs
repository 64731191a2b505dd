//! Issue 11's bounds on session records: what a finished record costs, what it keeps of a
//! huge question, and what the readers of `/v1/sessions/{id}/events` may hold.

use std::time::Duration;

use serde_json::json;

use crate::support::{FAST, Setup, client, get, panel_yaml, question};

fn fast(extra: &[&str]) -> Setup {
    Setup::with_panel(|url| panel_yaml(url, &FAST, ""), extra)
}

/// VmRSS of `pid` in bytes.
#[cfg(target_os = "linux")]
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Runs `n` non-streamed sessions, `at_once` at a time, and returns their ids.
async fn sessions(url: &str, n: usize, at_once: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    let http = client();
    for batch in 0..n.div_ceil(at_once) {
        let runs = (0..at_once.min(n - batch * at_once)).map(|_| {
            let http = http.clone();
            async move {
                let r = http
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&question(false))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let id = r.headers()["x-massgen-session-id"].to_str().unwrap();
                id.to_string()
            }
        });
        ids.extend(futures::future::join_all(runs).await);
    }
    ids
}

/// A finished record used to keep a live-event buffer of 1,024 events (~200 KB) for as
/// long as the record lived: 233 KB of RSS per record whose events serialise to 15 KB.
/// The server's resident memory now grows by about that size per record kept (25 KB;
/// measured over 300 records, after warm-up sessions have grown the allocator's arenas).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn finished_records_cost_about_their_serialised_size() {
    let setup = fast(&["--records-max", "2000"]);
    let url = &setup.server.url;
    let pid = setup.server.pid();
    sessions(url, 60, 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss(pid);
    let n = 300;
    let ids = sessions(url, n, 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = rss(pid);
    let mut serialised = 0;
    for id in ids.iter().step_by(30) {
        let events = get(&format!("{url}/v1/sessions/{id}/events"), None).await;
        serialised += events.bytes().await.unwrap().len();
    }
    let serialised = serialised as u64 / ids.iter().step_by(30).count() as u64;
    let per_record = after.saturating_sub(before) / n as u64;
    assert!(
        per_record < 3 * serialised,
        "each finished record costs {per_record} B of RSS; its events serialise to {serialised} B"
    );
}

#[tokio::test]
async fn a_huge_question_is_kept_as_a_prefix_with_its_size_and_hash() {
    use sha2::Digest;
    let setup = fast(&[]);
    let url = &setup.server.url;
    let question = "why? ".repeat(400_000);
    let body = json!({"model": "massgen", "messages": [{"role": "user", "content": question}]});
    let r = client()
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-massgen-session-id"].to_str().unwrap();
    let record: serde_json::Value = get(&format!("{url}/v1/sessions/{id}"), None)
        .await
        .json()
        .await
        .unwrap();
    let kept = record["question"].as_str().unwrap();
    assert_eq!(kept.len(), massgen::app::records::QUESTION_KEPT_BYTES);
    assert!(question.starts_with(kept));
    assert_eq!(record["question_bytes"], question.len());
    assert_eq!(record["question_truncated"], true);
    let hash = format!("{:x}", sha2::Sha256::digest(question.as_bytes()));
    assert_eq!(record["question_sha256"], hash);
}
