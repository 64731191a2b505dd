//! The MCP door: the panel as an MCP tool (`deliberate`, `list_panels`) for coding agents
//! and assistants, over Streamable HTTP at `/mcp` (POST, and the GET and DELETE of the
//! transport's sessions) and over stdio (`massgen mcp`). The SDK's server side stays
//! behind this module. Its sessions are the use case's like any door's: the same auth,
//! limits and budgets (the edge's layers run before the transport), the door name `mcp`
//! in records and metrics. Unlike the other doors it is not a [`Door`](super::door::Door):
//! the transport, not a request body, frames its calls.

mod handler;
pub mod tools;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

pub use handler::McpServer;

use crate::server::error::ApiError;
use crate::server::{AppState, bodies};

/// The door's name in records, metrics labels and `GET /v1/sessions`.
pub const NAME: &str = "mcp";
/// Where the Streamable HTTP transport is served.
pub const PATH: &str = "/mcp";

/// `/mcp`: the Streamable HTTP transport, behind the `Origin` check.
pub fn route(state: &AppState) -> MethodRouter<AppState> {
    let settings = &state.settings;
    let config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(Some(settings.keepalive))
        .with_max_request_body_bytes(settings.max_body_bytes)
        // Host and Origin are checked here, against the server's own settings: the SDK's
        // default admits loopback hosts only, which would refuse every deployment behind
        // a name.
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let for_sessions = state.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let service: StreamableHttpService<McpServer, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(McpServer::new(for_sessions.clone())),
        Arc::clone(&sessions),
        config,
    );
    any(move |State(state): State<AppState>, request: Request| {
        let service = service.clone();
        let sessions = Arc::clone(&sessions);
        async move {
            if let Some(refusal) = refuse_origin(&state, &request) {
                return refusal;
            }
            let max = state.settings.production.max_connections;
            if opens_a_session(&request) && sessions.sessions.read().await.len() >= max {
                return too_many_sessions(max);
            }
            // Read here, as every door reads its body: within the body timeout and the
            // body budget (the transport would read it with neither). The share stays with
            // the response, so a `tools/call`'s share is given back when its deliberation's
            // stream ends, as on the other doors.
            let (parts, body) = request.into_parts();
            let share = parts.extensions.get::<bodies::ShareSlot>().cloned();
            let settings = &state.settings;
            let within = settings.production.body_read_timeout;
            let read = tokio::time::timeout(
                within,
                bodies::read_body(
                    &parts.headers,
                    share.as_ref(),
                    body,
                    settings.max_body_bytes,
                    &state.production.bodies,
                ),
            )
            .await
            .map_err(|_| ApiError::BodyTimeout { within });
            let body = match read {
                Ok(Ok(body)) => body,
                Ok(Err(error)) | Err(error) => return error.into_response(),
            };
            let request = Request::from_parts(parts, axum::body::Body::from(body));
            match service.oneshot(request).await {
                Ok(response) => response.into_response(),
                Err(never) => match never {},
            }
        }
    })
}

/// A request that starts an MCP session: a POST without `Mcp-Session-Id` (its
/// `initialize`).
fn opens_a_session(request: &Request) -> bool {
    request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id")
}

/// 503 when `--max-connections` MCP sessions are open: each holds a task and a channel
/// until its client ends it or it sits idle for five minutes, so a client opening them
/// in a loop must not hold more.
fn too_many_sessions(max: usize) -> Response {
    tracing::warn!(max, "mcp: session refused: at the limit");
    let body = json!({"error": {
        "message": format!("The server holds its maximum of {max} MCP sessions (--max-connections); end an unused one (DELETE /mcp) or retry shortly"),
        "type": "server_error",
        "param": null,
        "code": "too_many_mcp_sessions",
    }});
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("5"),
    );
    response
}

/// A 403 for a request whose `Origin` the CORS settings (`--cors-origins`) do not allow.
/// The specification asks servers to check it: a page on another site (or one that
/// rebound its name to this address) must not drive a local server. Clients that are not
/// browsers send none, and pass.
fn refuse_origin(state: &AppState, request: &Request) -> Option<Response> {
    let origin = request.headers().get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or_default();
    if origin_allowed(&state.settings.production.cors_origins, origin) {
        return None;
    }
    tracing::info!(origin = %origin.chars().take(200).collect::<String>(), "mcp: request refused: origin not allowed");
    let body = json!({"error": {
        "message": format!("Origin '{}' is not allowed to use /mcp: add it to --cors-origins (MASSGEN_SERVER_CORS_ORIGINS)", origin.chars().take(200).collect::<String>()),
        "type": "permission_error",
        "param": null,
        "code": "origin_not_allowed",
    }});
    Some((StatusCode::FORBIDDEN, axum::Json(body)).into_response())
}

/// Whether `origin` is one of `allowed` (`*` allows any), compared as browsers send it:
/// scheme, host and port, case-insensitively, without a trailing slash.
fn origin_allowed(allowed: &[String], origin: &str) -> bool {
    let norm = |s: &str| s.trim().trim_end_matches('/').to_ascii_lowercase();
    let origin = norm(origin);
    !origin.is_empty() && allowed.iter().any(|a| a == "*" || norm(a) == origin)
}

/// Serves MCP over stdin and stdout until the client closes stdin (or `stop` resolves).
/// A closed stdin cancels the calls still running.
pub async fn serve_stdio(
    state: AppState,
    stop: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let gone = CancellationToken::new();
    let stdin = OnEof {
        inner: tokio::io::stdin(),
        gone: gone.clone(),
    };
    let service = McpServer::until(state, gone)
        .serve((stdin, tokio::io::stdout()))
        .await
        .map_err(|e| anyhow::anyhow!("the MCP client did not initialize: {e}"))?;
    let cancel = service.cancellation_token();
    tokio::select! {
        ended = service.waiting() => {
            ended.map_err(|e| anyhow::anyhow!("the MCP session failed: {e}"))?;
        }
        () = stop => cancel.cancel(),
    }
    Ok(())
}

/// A reader that cancels `gone` at its end of input (or on a read error).
struct OnEof<R> {
    inner: R,
    gone: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for OnEof<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() == before => self.gone.cancel(),
            Poll::Ready(Err(_)) => self.gone.cancel(),
            _ => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_the_cors_list() {
        let list = vec!["https://app.example.com".to_string()];
        assert!(origin_allowed(&list, "https://APP.example.com/"));
        assert!(!origin_allowed(&list, "https://evil.example"));
        assert!(!origin_allowed(&list, "null"));
        assert!(!origin_allowed(&[], "http://localhost:3000"));
        assert!(origin_allowed(&["*".into()], "http://localhost:3000"));
    }

    #[tokio::test]
    async fn the_end_of_stdin_means_the_client_is_gone() {
        use tokio::io::AsyncReadExt;
        let gone = CancellationToken::new();
        let mut reader = OnEof {
            inner: &b"{}\n"[..],
            gone: gone.clone(),
        };
        let mut buf = Vec::new();
        reader.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"{}\n");
        assert!(gone.is_cancelled());
    }
}
