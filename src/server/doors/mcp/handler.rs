//! The MCP server: `tools/list` and `tools/call` over the SDK's session, for both
//! transports. A `deliberate` call is one session of the use case, its deliberation lines
//! sent as `notifications/progress` when the client asked for progress; the request's
//! cancellation (its POST closed over HTTP, stdin closed or `notifications/cancelled` over
//! stdio) drops the session's steps, which cancels its upstream calls.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;

use super::tools::{self, DELIBERATE, LIST_PANELS};
use crate::app::Caller;
use crate::server::AppState;
use crate::server::doors::session::{self, Step};
use crate::server::error::ApiError;

/// The MCP server (HTTP makes one per message, stdio one per process).
#[derive(Clone)]
pub struct McpServer {
    state: AppState,
    /// Cancelled when the client is gone (stdio: its end of stdin closed). The SDK lets
    /// running calls finish then; nobody would read their answers.
    gone: CancellationToken,
    /// Over HTTP: the calls running in this process, for `notifications/cancelled` and
    /// `DELETE /mcp`, which arrive on requests of their own.
    calls: Option<super::calls::Calls>,
}

impl McpServer {
    /// A server for one HTTP message, its calls registered in `calls`.
    pub(super) fn on_http(state: AppState, calls: super::calls::Calls) -> Self {
        Self {
            state,
            gone: CancellationToken::new(),
            calls: Some(calls),
        }
    }

    /// A server whose running calls are cancelled with `gone`.
    pub fn until(state: AppState, gone: CancellationToken) -> Self {
        Self {
            state,
            gone,
            calls: None,
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
        match (&self.calls, session) {
            (Some(calls), Some(session)) => {
                let id = serde_json::to_string(&context.id).unwrap_or_default();
                let (token, registered) = calls.register(session, id);
                (token, Some(registered))
            }
            _ => (CancellationToken::new(), None),
        }
    }

    async fn deliberate(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut ask = match tools::deliberate_ask(caller(context), request.arguments.as_ref()) {
            Ok(ask) => ask,
            Err(e) => return refused(&e),
        };
        // The POST's share of the body budget is the session's to hold until its
        // coordination ends (over stdio there is none).
        ask.hold =
            call_share(context).map(|share| Box::new(share) as Box<dyn std::any::Any + Send>);
        let opened = match session::open(&self.state, ask).await {
            Ok(opened) => opened,
            Err(e) => return refused(&e),
        };
        let id = opened.id;
        let mut steps = opened.steps;
        let (by_client, _registered) = self.register(context);
        let progress = context.meta.get_progress_token();
        let mut sent = 0u32;
        loop {
            let step = tokio::select! {
                step = steps.next() => step,
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
                    let stall = self.state.settings.production.client_stall_timeout;
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
                Step::Completed(summary) => {
                    let mut result = CallToolResult::success(vec![ContentBlock::text(
                        summary.final_answer.clone(),
                    )]);
                    result.structured_content = Some(tools::outcome(&id, &summary));
                    return result;
                }
                Step::Failed(error) => return refused(&ApiError::Session(error)),
                Step::Lost => return refused(&ApiError::Internal),
            }
        }
    }
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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("massgen", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "MassGen runs a panel of LLM agents that answer, read each other's answers and vote. Call `deliberate` with one question (and any material in `context`) for the panel's answer; `list_panels` names the panels.",
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
            DELIBERATE => Ok(self.deliberate(&request, &context).await.into()),
            LIST_PANELS => {
                let panels = tools::panels(&self.state.catalog);
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
}
