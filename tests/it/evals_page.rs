//! `massgen eval`'s runs on the real binary: runs and items written to a records database
//! through `RecordDb` (as `massgen eval --records-db` writes them), then read by a server
//! on that database: `GET /v1/evals` (the caller's own runs, newest first, with each
//! arm's headline numbers), `GET /v1/evals/{id}` (report and pages of items), 404 for an
//! unknown or someone else's run and, with the reason, for a server whose records are in
//! memory; and the page's evals view. SQLite, then the same on a throwaway PostgreSQL.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use massgen::app::Owner;
use massgen::app::evals::{ArmInfo, ArmKind, ItemResult};
use massgen::app::store::RecordDb;
use massgen::app::store::evals::EvalRun;
use massgen::config::RecordsDb;
use serde_json::{Value, json};

use crate::support::postgres::PgServer;
use crate::support::{self, Proc, get, panel_yaml, write};

const KEY: &str = "sk-mg-evals-page-1c4b7e20";
const ITEMS: usize = 12;

fn arms() -> Vec<ArmInfo> {
    let arm = |name: &str, kind, samples| ArmInfo {
        name: name.into(),
        kind,
        samples,
        models: vec!["openai/sim-a".into(), "openai/sim-b".into()],
    };
    // Not in name order: the items come back in this order within each item.
    vec![
        arm("panel", ArmKind::Panel, 1),
        arm("agent:a", ArmKind::Agent, 1),
        arm("sc3:a", ArmKind::SelfConsistency, 3),
    ]
}

fn report() -> Value {
    let arm = |name: &str, kind: &str, accuracy: f64, vs_panel: Value| {
        json!({
            "name": name, "kind": kind, "samples": 1, "models": ["openai/sim-a"],
            "n": ITEMS, "correct": 9, "accuracy": accuracy, "ci95": [accuracy - 0.2, accuracy + 0.1],
            "cost_usd": 0.12, "cost_per_item_usd": 0.01, "input_tokens": 1000,
            "output_tokens": 200, "latency_p50_s": 1.5, "latency_p95_s": 3.0,
            "failures": 1, "judge_cost_usd": null, "vs_panel": vs_panel,
        })
    };
    let vs = json!({"against": "panel", "pairs": ITEMS, "wins": 1, "ties": 9, "losses": 2,
        "p_value": 0.62, "test": "sign"});
    json!({"arms": [
        arm("panel", "panel", 0.75, Value::Null),
        arm("agent:a", "agent", 0.5, vs.clone()),
        arm("sc3:a", "self_consistency", 0.6, vs),
    ]})
}

fn run(id: &str, owner: &str, created_ms: i64, report: Option<Value>) -> EvalRun {
    EvalRun {
        id: id.into(),
        owner: owner.into(),
        created_ms,
        updated_ms: created_ms + 60_000,
        status: if report.is_some() {
            "finished"
        } else {
            "running"
        }
        .into(),
        data: "questions.jsonl".into(),
        grader: "exact".into(),
        arms: arms(),
        report,
    }
}

fn item(n: usize, arm: &ArmInfo) -> ItemResult {
    ItemResult {
        item: n.to_string(),
        arm: arm.name.clone(),
        kind: arm.kind,
        correct: right(n, &arm.name),
        failed: (n == 7).then(|| "every session failed".to_string()),
        answer: Some(format!("Item {n}: the answer is {n}.")),
        extracted: Some(n.to_string()),
        samples: Vec::new(),
        cost_usd: (n != 3).then_some(0.01),
        judge_cost_usd: None,
        input_tokens: 100,
        output_tokens: 20,
        latency_s: 1.25,
        session_ids: vec![format!("sess_{n}_{}", arm.name.replace(':', "_"))],
        judge_session_ids: Vec::new(),
        fingerprint: String::new(),
        ..ItemResult::default()
    }
}

/// Whether `arm` got item `n` right: every arm the even items, except that the agent also
/// gets 3 and 9 (the panel wrong, a member right) and self-consistency misses 4, so the
/// arms disagree on 3, 4 and 9 alone. Item 7 fails on every arm.
fn right(n: usize, arm: &str) -> bool {
    match arm {
        "agent:a" => n.is_multiple_of(2) || n == 3 || n == 9,
        "sc3:a" => n.is_multiple_of(2) && n != 4,
        _ => n.is_multiple_of(2),
    }
}

/// The item ids of a page by item, each once, in order; asserts every item comes whole
/// (all three arms, in the run's arm order, together).
fn whole_items(page: &Value) -> Vec<String> {
    let lines = page["items"].as_array().unwrap();
    assert_eq!(lines.len() % 3, 0, "{page}");
    lines
        .chunks(3)
        .map(|item| {
            let arms: Vec<&str> = item.iter().map(|i| i["arm"].as_str().unwrap()).collect();
            assert_eq!(arms, ["panel", "agent:a", "sc3:a"], "{page}");
            assert!(item.iter().all(|i| i["item"] == item[0]["item"]), "{page}");
            item[0]["item"].as_str().unwrap().to_string()
        })
        .collect()
}

/// `page_by=item`: pages of whole items, `filter` keeping the items the arms disagree on
/// or the panel got wrong and a member right; bad values refused.
async fn item_pages(url: &str) {
    let run = format!("{url}/v1/evals/eval_old");
    let first = json_of(&format!("{run}?page_by=item&limit=5"), None, 200).await;
    assert_eq!(first["items_page_by"], "item");
    assert_eq!(first["items_filter"], "all");
    assert_eq!(first["items_total"], ITEMS, "items, not lines");
    assert_eq!(first["items_has_more"], true);
    assert_eq!(whole_items(&first), ["1", "2", "3", "4", "5"]);
    let last = json_of(&format!("{run}?page_by=item&offset=10&limit=5"), None, 200).await;
    assert_eq!(whole_items(&last), ["11", "12"]);
    assert_eq!(last["items_has_more"], false);
    assert_eq!(last["items_offset"], 10);
    let default = json_of(&format!("{run}?page_by=item"), None, 200).await;
    assert_eq!(whole_items(&default).len(), ITEMS, "25 items by default");
    let lines = json_of(&format!("{run}?page_by=line&limit=5"), None, 200).await;
    assert_eq!(lines["items"].as_array().unwrap().len(), 5);
    assert_eq!(lines["items_filter"], Value::Null);

    let disagree = json_of(&format!("{run}?page_by=item&filter=disagree"), None, 200).await;
    assert_eq!(whole_items(&disagree), ["3", "4", "9"]);
    assert_eq!(disagree["items_total"], 3);
    let next = json_of(
        &format!("{run}?page_by=item&filter=disagree&offset=1&limit=1"),
        None,
        200,
    )
    .await;
    assert_eq!(whole_items(&next), ["4"]);
    assert_eq!(next["items_has_more"], true);
    let panel_wrong = json_of(
        &format!("{run}?page_by=item&filter=panel_wrong_member_right"),
        None,
        200,
    )
    .await;
    assert_eq!(whole_items(&panel_wrong), ["3", "9"]);
    assert_eq!(panel_wrong["items_total"], 2);

    for (bad, param) in [
        ("page_by=item&limit=101", "limit"),
        ("page_by=item&limit=0", "limit"),
        ("page_by=items", "page_by"),
        ("page_by=item&page_by=line", "page_by"),
        ("page_by=item&filter=wrong", "filter"),
        ("filter=disagree", "filter"),
        ("page_by=item&filter=disagree&filter=all", "filter"),
    ] {
        let body = json_of(&format!("{run}?{bad}"), None, 400).await;
        assert_eq!(body["error"]["param"], param, "{bad}");
        assert_eq!(body["error"]["code"], "invalid_value", "{bad}");
    }
}

/// Two keyless runs (one finished, one still running, newer) and one of `KEY`'s.
async fn seed(db: &RecordDb) {
    let t = 1_700_000_000_000;
    db.save_eval_run(&run("eval_old", "", t, Some(report())))
        .await
        .unwrap();
    db.save_eval_run(&run("eval_new", "", t + 500_000, None))
        .await
        .unwrap();
    db.save_eval_run(&run("eval_keyed", Owner::of_key(KEY).as_str(), t + 1, None))
        .await
        .unwrap();
    // Saved in no particular order: items come back by item (2 before 10), then arm.
    for arm in arms().iter().rev() {
        for n in (1..=ITEMS).rev() {
            db.save_eval_item("eval_old", "", &item(n, arm))
                .await
                .unwrap_or_else(|e| panic!("save_eval_item {n} {}: {e:?}", arm.name));
        }
    }
    db.save_eval_item(
        "eval_keyed",
        Owner::of_key(KEY).as_str(),
        &item(1, &arms()[0]),
    )
    .await
    .unwrap();
}

/// `massgen serve` on `records_db`, with `KEY` as its only key when `keyed`, and a panel
/// (it serves no question here: its upstream is a port where nothing listens) in `dir`.
fn serve(records_db: &str, keyed: bool, dir: &Path) -> Proc {
    let config = write(
        dir,
        "panel.yaml",
        &panel_yaml("http://127.0.0.1:9", &["a"], ""),
    );
    let mut cmd = Command::new(support::bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
        .arg(config)
        .env("MASSGEN_SERVER_RECORDS_DB", records_db)
        .env_remove("MASSGEN_SERVER_API_KEYS_FILE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    if keyed {
        cmd.env("MASSGEN_SERVER_API_KEYS", KEY);
    } else {
        cmd.env_remove("MASSGEN_SERVER_API_KEYS");
    }
    support::start(cmd, "massgen listening on")
}

async fn json_of(url: &str, key: Option<&str>, status: u16) -> Value {
    let response = get(url, key).await;
    assert_eq!(response.status(), status, "{url}");
    response.json().await.unwrap()
}

fn ids(list: &Value) -> Vec<&str> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect()
}

/// What a keyless server on the seeded database answers.
async fn keyless_reads(url: &str) {
    let list = json_of(&format!("{url}/v1/evals"), None, 200).await;
    assert_eq!(list["object"], "list");
    assert_eq!(
        ids(&list),
        ["eval_new", "eval_old"],
        "newest first, own only"
    );
    let old = &list["data"][1];
    assert_eq!(old["object"], "massgen.eval_run");
    assert_eq!(old["created"], 1_700_000_000);
    assert_eq!(old["status"], "finished");
    assert_eq!(old["data"], "questions.jsonl");
    assert_eq!(old["grader"], "exact");
    assert_eq!(old["arms"], serde_json::to_value(arms()).unwrap());
    let agent = &report()["arms"][1];
    let headline = ["name", "kind", "n", "accuracy", "ci95", "cost_usd"];
    let expected: serde_json::Map<String, Value> = headline
        .iter()
        .map(|k| (k.to_string(), agent[k].clone()))
        .collect();
    assert_eq!(old["summary"][1], Value::Object(expected));
    assert_eq!(old["summary"][1]["name"], "agent:a");
    assert_eq!(old["summary"].as_array().unwrap().len(), 3);
    assert_eq!(list["data"][0]["summary"], json!([]), "no report yet");
    assert_eq!(list["data"][0]["status"], "running");

    let one = json_of(&format!("{url}/v1/evals?limit=1"), None, 200).await;
    assert_eq!(ids(&one), ["eval_new"]);
    for bad in ["0", "1001", "x", "1&limit=2"] {
        let body = json_of(&format!("{url}/v1/evals?limit={bad}"), None, 400).await;
        assert_eq!(body["error"]["param"], "limit", "{bad}");
        assert_eq!(body["error"]["code"], "invalid_value", "{bad}");
    }

    let whole = json_of(&format!("{url}/v1/evals/eval_old"), None, 200).await;
    assert_eq!(whole["id"], "eval_old");
    assert_eq!(whole["report"], report());
    assert_eq!(whole["items_total"], ITEMS * 3);
    assert_eq!(whole["items_offset"], 0);
    assert_eq!(whole["items_has_more"], false);
    let items = whole["items"].as_array().unwrap();
    assert_eq!(items.len(), ITEMS * 3);
    let keys: Vec<(&str, &str)> = items[..6]
        .iter()
        .map(|i| (i["item"].as_str().unwrap(), i["arm"].as_str().unwrap()))
        .collect();
    assert_eq!(
        keys,
        [
            ("1", "panel"),
            ("1", "agent:a"),
            ("1", "sc3:a"),
            ("2", "panel"),
            ("2", "agent:a"),
            ("2", "sc3:a")
        ]
    );
    assert_eq!(items[ITEMS * 3 - 1]["item"], ITEMS.to_string());
    assert_eq!(
        items[3],
        serde_json::to_value(item(2, &arms()[0])).unwrap(),
        "an ItemResult as the runner made it"
    );
    assert_eq!(items[3]["session_ids"], json!(["sess_2_panel"]));
    assert_eq!(items[6 * 3]["failed"], "every session failed");
    assert_eq!(items[2 * 3]["cost_usd"], Value::Null);

    let page = json_of(&format!("{url}/v1/evals/eval_old?limit=5"), None, 200).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 5);
    assert_eq!(page["items_has_more"], true);
    let last = json_of(
        &format!("{url}/v1/evals/eval_old?offset={}&limit=5", ITEMS * 3 - 2),
        None,
        200,
    )
    .await;
    assert_eq!(last["items"].as_array().unwrap().len(), 2);
    assert_eq!(last["items_has_more"], false);
    assert_eq!(last["items_offset"], ITEMS * 3 - 2);
    for bad in ["limit=0", "limit=5001", "offset=-1", "offset=x"] {
        let body = json_of(&format!("{url}/v1/evals/eval_old?{bad}"), None, 400).await;
        assert_eq!(body["error"]["code"], "invalid_value", "{bad}");
    }

    // Unknown, and someone else's, look the same: as an unknown session does.
    for id in ["eval_nope", "eval_keyed"] {
        let response = get(&format!("{url}/v1/evals/{id}"), None).await;
        assert_eq!(response.status(), 404, "{id}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body,
            json!({"error": {"message": format!("No eval run '{id}'"),
                "type": "invalid_request_error", "param": null, "code": "eval_run_not_found"}})
        );
    }
}

#[tokio::test]
async fn eval_runs_in_sqlite_are_listed_and_shown_to_their_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.db");
    let db = RecordDb::open(&RecordsDb::Sqlite(file.clone()))
        .await
        .unwrap();
    seed(&db).await;
    db.close().await;
    // The file's lock goes with it: the server is the only process on the file.
    drop(db);
    let url_of_db = format!("sqlite://{}", file.display());

    let mut server = serve(&url_of_db, false, dir.path());
    keyless_reads(&server.url).await;
    item_pages(&server.url).await;

    // The page: an Evals link in its header, the view, and its script, which reads the
    // evals routes and draws with SVG elements.
    let page = get(&format!("{}/ui", server.url), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"<script src="/ui/evals.js""#), "{page}");
    assert!(page.contains(r##"href="#/evals""##) && page.contains(r#"id="evals-view""#));
    let script = get(&format!("{}/ui/evals.js", server.url), None).await;
    assert_eq!(script.status(), 200);
    assert!(
        script.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    let script = script.text().await.unwrap();
    assert!(script.contains("/v1/evals") && script.contains("createElementNS"));
    assert!(script.contains("#/s/"), "items link to the session view");
    let app = get(&format!("{}/ui/app.js", server.url), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        app.contains("showEvals("),
        "the router opens the evals view"
    );
    assert!(server.terminate(Duration::from_secs(20)).is_some());

    // With keys: a key reads its own runs only, and nothing without a key.
    let keyed = serve(&url_of_db, true, dir.path());
    assert_eq!(
        get(&format!("{}/v1/evals", keyed.url), None).await.status(),
        401
    );
    let list = json_of(&format!("{}/v1/evals", keyed.url), Some(KEY), 200).await;
    assert_eq!(ids(&list), ["eval_keyed"]);
    let run = json_of(
        &format!("{}/v1/evals/eval_keyed", keyed.url),
        Some(KEY),
        200,
    )
    .await;
    assert_eq!(run["items_total"], 1);
    assert_eq!(run["report"], Value::Null);
    assert_eq!(
        get(&format!("{}/v1/evals/eval_old", keyed.url), Some(KEY))
            .await
            .status(),
        404
    );
}

#[tokio::test]
async fn a_server_keeping_records_in_memory_says_eval_runs_need_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve("memory", false, dir.path());
    for path in ["/v1/evals", "/v1/evals/eval_old"] {
        let response = get(&format!("{}{path}", server.url), None).await;
        assert_eq!(response.status(), 404, "{path}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "records_db_required", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("--records-db") && message.contains("memory"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn eval_runs_in_postgres_read_back_and_are_served() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let db = RecordDb::open(&RecordsDb::parse(&pg.url()).unwrap())
        .await
        .unwrap();
    seed(&db).await;
    // What PostgreSQL alone could get wrong: NUL in text, nulls of each type, the bound.
    let mut odd = item(1, &arms()[2]);
    odd.item = "q\0nul".into();
    odd.failed = Some("judge failed".into());
    odd.cost_usd = None;
    odd.samples = vec![None, Some("4".into())];
    db.save_eval_item("eval_new", "", &odd).await.unwrap();
    db.save_eval_item("eval_new", "", &odd).await.unwrap();
    assert_eq!(db.eval_items("eval_new", 0, 10).await.unwrap(), [odd]);
    assert_eq!(db.eval_item_count("eval_old").await.unwrap(), 36);
    let all: Vec<String> = db
        .eval_runs(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(all, ["eval_new", "eval_keyed", "eval_old"]);
    let old = db.eval_run("eval_old").await.unwrap().unwrap();
    assert_eq!(old, run("eval_old", "", 1_700_000_000_000, Some(report())));
    let page = db.eval_items("eval_old", 34, 10).await.unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[1].item, ITEMS.to_string());
    db.close().await;

    let dir = tempfile::tempdir().unwrap();
    let server = serve(&pg.url(), false, dir.path());
    let list = json_of(&format!("{}/v1/evals", server.url), None, 200).await;
    assert_eq!(ids(&list), ["eval_new", "eval_old"]);
    let new = json_of(&format!("{}/v1/evals/eval_new", server.url), None, 200).await;
    assert_eq!(new["items"][0]["item"], "q\0nul");
    item_pages(&server.url).await;
}
