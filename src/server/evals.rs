//! `GET /v1/evals` and `GET /v1/evals/{id}`: the runs of `massgen eval` kept in the
//! records database (`app::store::evals`), with the owner scoping of the session
//! records: a key reads the runs it made, a server without keys (and the CLI, which
//! writes owner "") the keyless ones. Also the page's evals script (`/ui/evals.js`).

use std::collections::HashMap;

use axum::extract::{Extension, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::Caller;
use super::error::{ApiError, PathId, SHOULD_RETRY};
use crate::app::App;
use crate::app::evals::{ArmKind, ItemResult};
use crate::app::store::RecordDb;
use crate::app::store::evals::{
    EvalRun, ItemFilter, MAX_ITEM_GROUPS_PAGE, MAX_ITEMS_PAGE, MAX_RUNS,
};

const EVALS_JS: &str = include_str!("ui/assets/evals.js");

/// Runs listed when the request names no `limit`.
const LIST_DEFAULT: usize = 50;
/// Items of a run returned when the request names no `limit`.
const ITEMS_DEFAULT: usize = 200;
/// Whole items returned with `page_by=item` when the request names no `limit`.
const ITEM_GROUPS_DEFAULT: usize = 25;

/// The caller's runs, newest first, each with its arms and their headline numbers.
pub async fn list_evals(
    State(app): State<std::sync::Arc<App>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, Refused> {
    let limit = number(&query, "limit", 1, MAX_RUNS)?.unwrap_or(LIST_DEFAULT);
    let db = database(&app)?;
    let data: Vec<Value> = db
        .eval_runs(Some(caller.owner()), limit)
        .await
        .map_err(|_| ApiError::RecordsUnavailable)?
        .iter()
        .map(run_json)
        .collect();
    Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
}

/// The caller's run `id` with its report and a page of its items (`offset`, `limit`):
/// item lines by default, or whole items with `page_by=item` (then `filter` may keep only
/// some items); someone else's looks like a missing one.
pub async fn get_eval(
    State(app): State<std::sync::Arc<App>>,
    Extension(caller): Extension<Caller>,
    PathId(id): PathId,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, Refused> {
    let by_item = one_of(&query, "page_by", &["line", "item"])? == Some("item");
    let filter = one_of(
        &query,
        "filter",
        &["all", "disagree", "panel_wrong_member_right"],
    )?;
    if filter.is_some() && !by_item {
        return Err(ApiError::invalid(
            "filter needs page_by=item (it keeps or drops whole items)",
            Some("filter"),
            "invalid_value",
        )
        .into());
    }
    let (max, default) = if by_item {
        (MAX_ITEM_GROUPS_PAGE, ITEM_GROUPS_DEFAULT)
    } else {
        (MAX_ITEMS_PAGE, ITEMS_DEFAULT)
    };
    let limit = number(&query, "limit", 1, max)?.unwrap_or(default);
    let offset = number(&query, "offset", 0, usize::MAX)?.unwrap_or(0);
    let db = database(&app)?;
    let run = db
        .eval_run(&id)
        .await
        .map_err(|_| ApiError::RecordsUnavailable)?
        .filter(|run| run.owner == caller.owner())
        .ok_or_else(|| Refused::not_found(&id))?;
    let (items, total, shown) = if by_item {
        let filter = item_filter(filter.unwrap_or("all"), &run);
        let (items, total) = tokio::try_join!(
            db.eval_items_by_item(&run.id, &filter, offset, limit),
            db.eval_item_group_count(&run.id, &filter)
        )
        .map_err(|_| ApiError::RecordsUnavailable)?;
        let mut ids: Vec<&str> = items.iter().map(|i| i.item.as_str()).collect();
        ids.dedup();
        let shown = offset.saturating_add(ids.len());
        (items, total, shown)
    } else {
        let (items, total) = tokio::try_join!(
            db.eval_items(&run.id, offset, limit),
            db.eval_item_count(&run.id)
        )
        .map_err(|_| ApiError::RecordsUnavailable)?;
        let shown = offset.saturating_add(items.len());
        (items, total, shown)
    };
    let items = in_arm_order(items, &run);
    let mut body = run_json(&run);
    let shown = u64::try_from(shown).unwrap_or(u64::MAX);
    body["report"] = run.report.clone().unwrap_or(Value::Null);
    body["items_page_by"] = if by_item { "item" } else { "line" }.into();
    body["items_filter"] = if by_item {
        filter.unwrap_or("all").into()
    } else {
        Value::Null
    };
    body["items_total"] = total.into();
    body["items_offset"] = offset.into();
    body["items_has_more"] = (shown < total).into();
    body["items"] = serde_json::to_value(&items).map_err(|_| ApiError::Internal)?;
    Ok(axum::Json(body).into_response())
}

/// The store's filter for `name`: "panel_wrong_member_right" reads the run's first panel
/// arm against its single-agent arms (none such: no item matches).
fn item_filter(name: &str, run: &EvalRun) -> ItemFilter {
    match name {
        "disagree" => ItemFilter::Disagree,
        "panel_wrong_member_right" => {
            let panel = run.arms.iter().find(|a| a.kind == ArmKind::Panel);
            let agents: Vec<String> = run
                .arms
                .iter()
                .filter(|a| a.kind == ArmKind::Agent)
                .map(|a| a.name.clone())
                .collect();
            match panel {
                Some(panel) => ItemFilter::PanelWrongAgentRight {
                    panel: panel.name.clone(),
                    agents,
                },
                None => ItemFilter::PanelWrongAgentRight {
                    panel: String::new(),
                    agents: Vec::new(),
                },
            }
        }
        _ => ItemFilter::All,
    }
}

/// The page's evals view (loaded by `/ui` before `app.js`).
pub async fn evals_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        EVALS_JS,
    )
        .into_response()
}

/// A run as listed: its arms, and per arm the report's headline numbers (none while
/// the run has no report).
fn run_json(run: &EvalRun) -> Value {
    let summary: Vec<Value> = run
        .report
        .as_ref()
        .and_then(|r| r.get("arms"))
        .and_then(Value::as_array)
        .map(|arms| {
            arms.iter()
                .map(|a| {
                    let field = |k: &str| a.get(k).cloned().unwrap_or(Value::Null);
                    json!({
                        "name": field("name"),
                        "kind": field("kind"),
                        "n": field("n"),
                        "accuracy": field("accuracy"),
                        "ci95": field("ci95"),
                        "cost_usd": field("cost_usd"),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "id": run.id,
        "object": "massgen.eval_run",
        "created": run.created_ms.div_euclid(1000),
        "updated": run.updated_ms.div_euclid(1000),
        "status": run.status,
        "data": run.data,
        "grader": run.grader,
        "arms": run.arms,
        "summary": summary,
    })
}

/// The page's items with each item's arms in the run's arm order (the database orders
/// them by name); items keep their order.
fn in_arm_order(items: Vec<ItemResult>, run: &EvalRun) -> Vec<ItemResult> {
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    let ranks: Vec<(usize, usize)> = items
        .iter()
        .map(|i| {
            let next = first_seen.len();
            let at = *first_seen.entry(i.item.clone()).or_insert(next);
            let arm = run.arms.iter().position(|a| a.name == i.arm);
            (at, arm.unwrap_or(usize::MAX))
        })
        .collect();
    let mut ranked: Vec<((usize, usize), ItemResult)> = ranks.into_iter().zip(items).collect();
    // Stable: arms the run does not list keep the database's order, after the others.
    ranked.sort_by_key(|(rank, _)| *rank);
    ranked.into_iter().map(|(_, item)| item).collect()
}

fn database(app: &App) -> Result<&std::sync::Arc<RecordDb>, Refused> {
    app.records().db().ok_or(Refused::NeedsDatabase)
}

/// Query parameter `name` as one of `allowed`, given at most once.
fn one_of<'a>(
    query: &'a [(String, String)],
    name: &'static str,
    allowed: &[&str],
) -> Result<Option<&'a str>, ApiError> {
    let mut given = query.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
    let (first, repeated) = (given.next(), given.next().is_some());
    let Some(raw) = first else {
        return Ok(None);
    };
    if repeated || !allowed.contains(&raw.as_str()) {
        return Err(ApiError::invalid(
            format!(
                "{name} must be given once, as one of: {}",
                allowed.join(", ")
            ),
            Some(name),
            "invalid_value",
        ));
    }
    Ok(Some(raw.as_str()))
}

/// Query parameter `name` as a whole number in `min..=max`, given at most once.
fn number(
    query: &[(String, String)],
    name: &'static str,
    min: usize,
    max: usize,
) -> Result<Option<usize>, ApiError> {
    let mut given = query.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
    let (first, repeated) = (given.next(), given.next().is_some());
    let Some(raw) = first else {
        return Ok(None);
    };
    raw.parse::<usize>()
        .ok()
        .filter(|n| !repeated && (min..=max).contains(n))
        .map(Some)
        .ok_or_else(|| {
            let range = if max == usize::MAX {
                format!("a whole number from {min}")
            } else {
                format!("a whole number from {min} to {max}")
            };
            ApiError::invalid(
                format!("{name} must be given once, as {range}"),
                Some(name),
                "invalid_value",
            )
        })
}

/// What these routes answer besides the server's shared errors, in the same shape
/// (`{"error":{"message","type","param","code"}}`, `x-should-retry: false`).
#[derive(Debug)]
pub enum Refused {
    Api(ApiError),
    /// 404: the server keeps records in memory, which holds no eval runs.
    NeedsDatabase,
    /// 404: no run with this id (or not the caller's).
    NotFound(String),
}

impl Refused {
    fn not_found(id: &str) -> Self {
        Self::NotFound(id.to_string())
    }
}

impl From<ApiError> for Refused {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

/// The message of [`Refused::NeedsDatabase`].
pub const NEEDS_DATABASE: &str = "Eval runs are kept in the records database, and this server keeps records in memory (--records-db memory): start it with --records-db sqlite://PATH (the default) or postgres://…, the database `massgen eval --records-db` writes to";

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let (code, message) = match self {
            Self::Api(e) => return e.into_response(),
            Self::NeedsDatabase => ("records_db_required", NEEDS_DATABASE.to_string()),
            Self::NotFound(id) => ("eval_run_not_found", format!("No eval run '{id}'")),
        };
        let body = json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": null,
            "code": code,
        }});
        let mut response = (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(SHOULD_RETRY, HeaderValue::from_static("false"));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::evals::{ArmInfo, ArmKind};

    fn run(report: Option<Value>) -> EvalRun {
        let arm = |name: &str, kind| ArmInfo {
            name: name.into(),
            kind,
            samples: 1,
            models: vec!["openai/gpt".into()],
        };
        EvalRun {
            id: "eval_1".into(),
            owner: String::new(),
            created_ms: 1_700_000_000_999,
            updated_ms: 1_700_000_100_000,
            status: "finished".into(),
            data: "q.jsonl".into(),
            grader: "exact".into(),
            arms: vec![
                arm("panel", ArmKind::Panel),
                arm("agent:gpt", ArmKind::Agent),
            ],
            report,
        }
    }

    fn item(id: &str, arm: &str) -> ItemResult {
        ItemResult {
            item: id.into(),
            arm: arm.into(),
            kind: ArmKind::Agent,
            correct: true,
            failed: None,
            answer: None,
            extracted: None,
            samples: Vec::new(),
            cost_usd: None,
            judge_cost_usd: None,
            input_tokens: 0,
            output_tokens: 0,
            latency_s: 0.0,
            session_ids: Vec::new(),
            judge_session_ids: Vec::new(),
            fingerprint: String::new(),
            ..ItemResult::default()
        }
    }

    #[test]
    fn a_run_lists_with_the_reports_headline_numbers_or_none() {
        let report = json!({"arms": [{"name": "panel", "kind": "panel", "n": 10, "correct": 8,
            "accuracy": 0.8, "ci95": [0.49, 0.94], "cost_usd": 0.5, "latency_p50_s": 3.0}]});
        let listed = run_json(&run(Some(report)));
        assert_eq!(listed["created"], 1_700_000_000);
        assert_eq!(listed["arms"][1]["kind"], "agent");
        assert_eq!(
            listed["summary"],
            json!([{"name": "panel", "kind": "panel", "n": 10, "accuracy": 0.8,
                "ci95": [0.49, 0.94], "cost_usd": 0.5}])
        );
        assert_eq!(run_json(&run(None))["summary"], json!([]));
    }

    #[test]
    fn items_follow_the_runs_arm_order_within_each_item() {
        let items = vec![
            item("1", "agent:gpt"),
            item("1", "panel"),
            item("2", "agent:gpt"),
            item("2", "unknown"),
            item("2", "panel"),
        ];
        let keys: Vec<(String, String)> = in_arm_order(items, &run(None))
            .into_iter()
            .map(|i| (i.item, i.arm))
            .collect();
        let expected = [
            ("1", "panel"),
            ("1", "agent:gpt"),
            ("2", "panel"),
            ("2", "agent:gpt"),
            ("2", "unknown"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(keys, expected);
    }

    #[test]
    fn numbers_in_the_query_are_checked() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(number(&q(&[]), "limit", 1, 10).unwrap(), None);
        assert_eq!(
            number(&q(&[("limit", "10")]), "limit", 1, 10).unwrap(),
            Some(10)
        );
        for bad in ["0", "11", "-1", "x", ""] {
            let e = number(&q(&[("limit", bad)]), "limit", 1, 10).unwrap_err();
            assert_eq!(e.param(), Some("limit"), "{bad}");
        }
        assert!(number(&q(&[("limit", "1"), ("limit", "2")]), "limit", 1, 10).is_err());
    }

    #[test]
    fn words_in_the_query_are_checked_and_filters_read_the_runs_arms() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let allowed = ["line", "item"];
        assert_eq!(one_of(&q(&[]), "page_by", &allowed).unwrap(), None);
        assert_eq!(
            one_of(&q(&[("page_by", "item")]), "page_by", &allowed).unwrap(),
            Some("item")
        );
        for bad in [
            &[("page_by", "items")][..],
            &[("page_by", "item"), ("page_by", "item")],
        ] {
            let e = one_of(&q(bad), "page_by", &allowed).unwrap_err();
            assert_eq!(e.param(), Some("page_by"));
        }
        assert_eq!(
            item_filter("panel_wrong_member_right", &run(None)),
            ItemFilter::PanelWrongAgentRight {
                panel: "panel".into(),
                agents: vec!["agent:gpt".into()]
            }
        );
        assert_eq!(item_filter("disagree", &run(None)), ItemFilter::Disagree);
        assert_eq!(item_filter("all", &run(None)), ItemFilter::All);
    }

    #[test]
    fn the_ui_evals_script_never_assigns_html_and_reads_the_evals_routes() {
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
        ] {
            assert!(!EVALS_JS.contains(banned), "evals.js uses {banned}");
        }
        assert!(EVALS_JS.contains("/v1/evals"));
        assert!(EVALS_JS.contains("createElementNS"), "the chart is SVG DOM");
    }
}
