//! A session ends on its own clock (issue 36, finding 3): a client that never reads its
//! stream does not keep the session's slot, or its record `running`, past the session's
//! end. The real binary on the simulator; the client never reads a byte of its stream:
//! HTTP/2 with a window of 0, so nothing it is sent can be absorbed by socket buffers (the
//! finding's HTTP/1.1 client with a 4 KiB receive buffer is the same once the server's
//! send buffer is full, which a debug build does not reach within the session's time).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{self, Setup, get_json, post};

/// The orchestrator's timeout of the panel the unread stream runs on.
const SESSION_TIMEOUT_S: u64 = 6;

#[tokio::test]
async fn a_never_read_stream_frees_its_slot_and_ends_its_record_with_the_session() {
    // Three agents that stream 40,000 words of text each (as fast as the server reads
    // them: thousands of events a second, shown with `deliberation: full`); the session
    // times out first. `fast` is a quick panel for the probes.
    let long = "long:words=40000,token_ms=0,ttft_ms=1,policy=no_tool";
    let setup = Setup::start(|mock, dir| {
        let team = support::write(
            dir,
            "team.yaml",
            &support::panel_yaml(
                mock,
                &[long, long, long],
                &format!(
                    "timeout_settings:\n  orchestrator_timeout_seconds: {SESSION_TIMEOUT_S}\n"
                ),
            ),
        );
        let named = dir.join("panels");
        std::fs::create_dir_all(&named).unwrap();
        support::write(
            &named,
            "fast.yaml",
            &support::panel_yaml(mock, &support::FAST, ""),
        );
        vec![
            "--config".into(),
            team.display().to_string(),
            "--configs-dir".into(),
            named.display().to_string(),
            "--max-sessions".into(),
            "1".into(),
            // Far beyond the session's end: what frees the slot must be the session's end.
            "--client-stall-timeout-seconds".into(),
            "120".into(),
        ]
    });
    let url = &setup.server.url;
    let unread = json!({
        "model": "massgen",
        "stream": true,
        "massgen": {"deliberation": "full"},
        "messages": [{"role": "user", "content": "Write at length."}]
    });
    let started = Instant::now();
    let stalled = reqwest::Client::builder()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(Some(0))
        .http2_initial_connection_window_size(Some(0))
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let held = stalled
        .post(format!("{url}/v1/chat/completions"))
        .json(&unread)
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    let probe = json!({"model": "massgen/fast", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    // Wait until the unread session runs (the probe is refused while it holds the slot).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(url, "/v1/chat/completions", None, &probe).await;
        if r.status() == 429 {
            break;
        }
        drop(r);
        assert!(
            Instant::now() < deadline,
            "the unread session never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Soon after the session's timeout (2 s, and more for a loaded machine) the slot is
    // free again and the record says how the session ended; before, both waited for the
    // client to be dropped (`--client-stall-timeout-seconds`).
    let deadline = started + Duration::from_secs(SESSION_TIMEOUT_S + 12);
    loop {
        let r = post(url, "/v1/chat/completions", None, &probe).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 429);
        assert!(
            Instant::now() < deadline,
            "the unread stream still held the only session slot {:?} after it started",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sessions = get_json(&format!("{url}/v1/sessions")).await;
    let unread_record = sessions["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["model"] == "massgen")
        .unwrap_or_else(|| panic!("no record of the unread session: {sessions}"))
        .clone();
    assert_ne!(unread_record["status"], "running", "{unread_record}");
    drop(held);
}
