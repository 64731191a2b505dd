//! The MCP server: `tools/list`, `tools/call` and the tasks extension's `tasks/get` and
//! `tasks/cancel`, for both transports. A `deliberate` call is one session of the use
//! case, its deliberation lines sent as `notifications/progress` when the client asked for
//! progress (and a line at least every [`HEARTBEAT`] while the panel is quiet, for clients
//! that wait only as long as progress comes). The request's cancellation (its POST closed
//! over HTTP, `notifications/cancelled`, stdin closed over stdio) drops the session's
//! steps, which cancels its upstream calls.
//!
//! Long deliberations and short client timeouts: a call with a `deadline_seconds` (or,
//! when it asked for no progress, the server's `--mcp-deadline-seconds`) presents its best
//! answer at the deadline. A client that declares the tasks extension (SEP-2663) gets a
//! task instead of waiting: the deliberation runs on, its id is the task's, and
//! `tasks/get` reads its state from the session records (so any replica on the shared
//! database answers it), `tasks/cancel` stops it on the replica that runs it.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, DetailedTask, GetTaskParams, GetTaskResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Task,
    TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;

use super::calls::Calls;
use super::tools::{self, DELIBERATE, LIST_PANELS};
use std::sync::Arc;

use crate::app::{App, Ask, Caller};
use crate::server::doors::session::{self, Opened, Step};
use crate::server::error::ApiError;

/// The longest a client asking for progress goes without a notification.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// How often a task's client is told to poll.
const POLL_INTERVAL_MS: u64 = 1_000;
/// The scope tasks are registered under in [`Calls`] (no session id looks like it).
const TASKS: &str = "tasks";

/// The MCP server (HTTP makes one per message, stdio one per process).
#[derive(Clone)]
pub struct McpServer {
    app: Arc<App>,
    /// Cancelled when the client is gone (stdio: its end of stdin closed). The SDK lets
    /// running calls finish then; nobody would read their answers.
    gone: CancellationToken,
    /// The calls and tasks running in this process, for `notifications/cancelled`,
    /// `DELETE /mcp` and `tasks/cancel`, which arrive on requests of their own.
    calls: Calls,
}

impl McpServer {
    /// A server for one HTTP message, its calls registered in `calls`.
    pub(super) fn on_http(app: Arc<App>, calls: Calls) -> Self {
        Self {
            app,
            gone: CancellationToken::new(),
            calls,
        }
    }

    /// A server whose running calls and tasks are cancelled with `gone`.
    pub fn until(app: Arc<App>, gone: CancellationToken) -> Self {
        Self {
            app,
            gone,
            calls: Calls::default(),
        }
    }

    /// Registers the call of `context` under its `Mcp-Session-Id` and request id, so a
    /// later `notifications/cancelled` or `DELETE` finds it: the token that cancels it,
    /// and the registration (forgotten when dropped).
    fn register(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> (CancellationToken, Option<super::calls::Registered>) {
        let session = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get(super::calls::SESSION_HEADER))
            .and_then(|v| v.to_str().ok());
        match session {
            Some(session) => {
                let id = serde_json::to_string(&context.id).unwrap_or_default();
                let (token, registered) = self.calls.register(session, id);
                (token, Some(registered))
            }
            None => (CancellationToken::new(), None),
        }
    }

    /// `deliberate`'s session: its arguments read, the POST's body share given to it, the
    /// server's default deadline applied to a call that asked for no progress and set none.
    async fn open(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        progress: bool,
    ) -> Result<Opened, ApiError> {
        let mut ask: Ask = tools::deliberate_ask(caller(context), request.arguments.as_ref())?;
        if ask.overrides.deadline.is_none() && !progress {
            ask.overrides.deadline = Some(self.app.settings().mcp_deadline);
        }
        // The POST's share of the body budget is the session's to hold until its
        // coordination ends (over stdio there is none).
        ask.hold =
            call_share(context).map(|share| Box::new(share) as Box<dyn std::any::Any + Send>);
        session::open(&self.app, ask).await
    }

    async fn deliberate(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let progress = context.meta.get_progress_token();
        let opened = match self.open(request, context, progress.is_some()).await {
            Ok(opened) => opened,
            Err(e) => return refused(&e),
        };
        let id = opened.id;
        let mut steps = opened.steps;
        let (by_client, _registered) = self.register(context);
        let mut sent = 0u32;
        let started = tokio::time::Instant::now();
        loop {
            let step = tokio::select! {
                step = steps.next() => step,
                // Quiet for a while: a client that waits only as long as progress comes
                // hears that the panel is still at work.
                () = tokio::time::sleep(HEARTBEAT), if progress.is_some() => Step::Reasoning(format!(
                    "still deliberating ({} s)",
                    started.elapsed().as_secs()
                )),
                () = cancelled(&context.ct, &self.gone, &by_client) => {
                    // Dropping the steps cancels the session's upstream calls; nobody reads
                    // this result.
                    tracing::debug!(session_id = %id, "mcp: the client cancelled the call");
                    drop(steps);
                    return CallToolResult::error(vec![ContentBlock::text(
                        "The call was cancelled: the deliberation and its upstream calls were stopped.",
                    )]);
                }
            };
            match step {
                Step::Reasoning(line) => {
                    let Some(token) = progress.clone() else {
                        continue;
                    };
                    sent += 1;
                    let note = ProgressNotificationParam::new(token, f64::from(sent))
                        .with_message(line.trim_end());
                    // A client that cannot take a notification still gets its result; one
                    // that stopped reading is dropped after the stall time, as on every
                    // door, so the session does not wait on it.
                    let stall = self.app.settings().production.client_stall_timeout;
                    match tokio::time::timeout(stall, context.peer.notify_progress(note)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(session_id = %id, error = %e, "mcp: progress not sent");
                        }
                        Err(_) => {
                            tracing::warn!(session_id = %id, "mcp: the client stopped reading: dropping it as a disconnect");
                            drop(steps);
                            return CallToolResult::error(vec![ContentBlock::text(
                                "The call was dropped: the client stopped reading its progress.",
                            )]);
                        }
                    }
                }
                Step::Text(_) | Step::ToolCalls(_) => {}
                Step::Completed(summary) => return answered(&id, &summary),
                Step::Failed(error) => return refused(&ApiError::Session(error)),
                Step::Lost => return refused(&ApiError::Internal),
            }
        }
    }

    /// `deliberate` as a task: the session starts, runs on after this request is
    /// answered (holding its places and share until it ends, as any session), and the
    /// client polls `tasks/get` with the session's id.
    async fn deliberate_as_task(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        // A task is polled, not waited on: no default deadline.
        let opened = match self.open(request, context, true).await {
            Ok(opened) => opened,
            Err(e) => return refused(&e).into(),
        };
        let id = opened.id;
        let mut steps = opened.steps;
        let (cancel, registered) = self.calls.register(TASKS, id.to_string());
        let gone = self.gone.clone();
        let task_id = id.clone();
        self.app.sessions().tasks().spawn(async move {
            let _registered = registered;
            loop {
                tokio::select! {
                    step = steps.next() => if step.ends() { break },
                    () = cancel.cancelled() => {
                        tracing::debug!(session_id = %task_id, "mcp: the client cancelled the task");
                        break;
                    }
                    () = gone.cancelled() => break,
                }
            }
            // Dropping the steps cancels a session that has not ended.
            drop(steps);
        });
        let now = rfc3339(self.app.sessions().now_ms());
        let task = Task::new(id.to_string(), TaskStatus::Working, now.clone(), now)
            .with_poll_interval_ms(POLL_INTERVAL_MS)
            .with_ttl_ms(ttl_ms(&self.app));
        CallToolResponse::Task(CreateTaskResult::new(task))
    }

    /// `tasks/get`: the task's state, read from its session's record (the caller's only).
    async fn task(&self, id: &str, caller: &Caller) -> Result<DetailedTask, ErrorData> {
        let records = self.app.sessions().records();
        let record = records
            .find(id, caller)
            .await
            .map_err(|_| ErrorData::internal_error("the session records cannot be read now", None))?
            .filter(|r| r.info.door == super::NAME)
            .ok_or_else(|| ErrorData::invalid_params(format!("no task '{}'", clip(id)), None))?;
        let summary = record.summary();
        let created = rfc3339(record.info.created_ms);
        let updated = rfc3339(
            summary
                .ended_ms
                .unwrap_or_else(|| self.app.sessions().now_ms()),
        );
        let base = Task::new(id.to_string(), TaskStatus::Working, created, updated)
            .with_poll_interval_ms(POLL_INTERVAL_MS)
            .with_ttl_ms(ttl_ms(&self.app));
        let last = record.events().last().map(|e| e.kind.clone());
        let payload = match (summary.status, last) {
            (
                "completed",
                Some(massgen_core::coordination::EventKind::SessionCompleted { summary }),
            ) => TaskPayload::Completed {
                result: result_object(answered(id, &summary)),
            },
            ("failed", Some(massgen_core::coordination::EventKind::SessionFailed { error }))
                if error.kind == massgen_core::coordination::SessionErrorKind::Cancelled =>
            {
                TaskPayload::Cancelled
            }
            ("failed", Some(massgen_core::coordination::EventKind::SessionFailed { error })) => {
                TaskPayload::Completed {
                    result: result_object(refused(&ApiError::Session(error))),
                }
            }
            ("running", _) => TaskPayload::Working,
            _ => TaskPayload::Failed {
                error: error_object(
                    "the deliberation did not end normally: the server that ran it stopped",
                ),
            },
        };
        Ok(DetailedTask::new(base, payload))
    }
}

/// The result of a completed deliberation: its answer, and the outcome as structured
/// content.
fn answered(id: &str, summary: &massgen_core::coordination::SessionSummary) -> CallToolResult {
    let mut result =
        CallToolResult::success(vec![ContentBlock::text(summary.final_answer.clone())]);
    result.structured_content = Some(tools::outcome(id, summary));
    result
}

fn result_object(result: CallToolResult) -> rmcp::model::JsonObject {
    match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => rmcp::model::JsonObject::new(),
    }
}

fn error_object(message: &str) -> rmcp::model::JsonObject {
    let mut error = rmcp::model::JsonObject::new();
    error.insert("code".into(), (-32603).into());
    error.insert("message".into(), message.into());
    error
}

/// How long a task can be read back: as long as its session's record is kept.
fn ttl_ms(app: &App) -> u64 {
    u64::try_from(app.settings().production.records_max_age.as_millis()).unwrap_or(u64::MAX)
}

/// Unix milliseconds as RFC 3339 (`2026-11-28T22:53:19.879Z`).
fn rfc3339(ms: u64) -> String {
    let (y, m, d) = crate::app::quota::civil_date(ms / crate::app::quota::DAY_MS);
    let of_day = ms % crate::app::quota::DAY_MS;
    let (h, rest) = (of_day / 3_600_000, of_day % 3_600_000);
    let (min, rest) = (rest / 60_000, rest % 60_000);
    format!(
        "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{:02}.{:03}Z",
        rest / 1000,
        rest % 1000
    )
}

fn clip(text: &str) -> String {
    text.chars().take(100).collect()
}

/// Whether the request itself declared the tasks extension (a 2026-07-28 request's
/// `_meta` capabilities), so it takes a task handle. A declaration at `initialize` is not
/// enough: the MCP Inspector 2.12.0 makes one there and then reads a task handle as a
/// tool result without content.
fn wants_task(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

/// Resolves when the request is cancelled (by the transport, or by the client's own
/// message) or the client is gone.
async fn cancelled(
    request: &CancellationToken,
    gone: &CancellationToken,
    by_client: &CancellationToken,
) {
    tokio::select! {
        () = request.cancelled() => {}
        () = gone.cancelled() => {}
        () = by_client.cancelled() => {}
    }
}

/// The caller the HTTP edge authenticated (its request's parts come with the call); over
/// stdio, the process's own user.
fn caller(context: &RequestContext<RoleServer>) -> Caller {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .copied()
        .unwrap_or_default()
}

/// The body-budget share of the HTTP request that carried the call, taken.
fn call_share(context: &RequestContext<RoleServer>) -> Option<crate::server::bodies::Share> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<super::CallShare>())
        .and_then(super::CallShare::take)
}

/// A tool error the model reads: the HTTP doors' message for the same refusal or failure.
fn refused(error: &ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.message())])
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("massgen", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "MassGen runs a panel of LLM agents that answer, read each other's answers and vote. Call `deliberate` with one question (and any material in `context`) for the panel's answer; `list_panels` names the panels. A deliberation takes 30 s to a few minutes: set `deadline_seconds` below your tool timeout, or use a task.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            DELIBERATE if wants_task(&context) => {
                Ok(self.deliberate_as_task(&request, &context).await)
            }
            DELIBERATE => Ok(self.deliberate(&request, &context).await.into()),
            LIST_PANELS => {
                let panels = tools::panels(self.app.catalog());
                let mut result =
                    CallToolResult::success(vec![ContentBlock::text(tools::panels_text(&panels))]);
                result.structured_content = Some(panels);
                Ok(result.into())
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool '{other}': this server has {DELIBERATE} and {LIST_PANELS}"),
                None,
            )),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let task = self.task(&request.task_id, &caller(&context)).await?;
        Ok(GetTaskResult::new(task))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Only the caller's own task: another key's id is as unknown as a made-up one.
        self.task(&request.task_id, &caller(&context)).await?;
        self.calls.cancel(TASKS, &request.task_id);
        Ok(())
    }
}
