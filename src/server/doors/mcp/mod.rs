//! The MCP door: the panel as an MCP tool (`deliberate`, `list_panels`) for coding agents
//! and assistants, over Streamable HTTP at `/mcp` and over stdio (`massgen mcp`). The SDK's
//! server side stays behind this module. Its sessions are the use case's like any door's:
//! the same auth, limits, browser checks and budgets (the edge's layers run before the
//! transport), the door name `mcp` in records and metrics. Unlike the other doors it is not
//! a [`Door`](super::door::Door): the transport, not a request body, frames its calls.
//!
//! Streamable HTTP is served stateless: every POST is one JSON-RPC message answered on its
//! own response (an SSE stream for a call: its progress, then its result), and the server
//! keeps no MCP session. So no table of sessions can be filled, any replica answers any
//! call, and a call belongs to its POST: closing it cancels the deliberation, as on the
//! other doors. The `Mcp-Session-Id` clients expect is a token bound to the key that
//! opened it ([`calls`]), which is what lets `notifications/cancelled` and `DELETE` find
//! the calls they mean. `GET /mcp` (a server-initiated stream, which this server has no
//! use for) is 405, which clients expect of such a server.

mod calls;
mod handler;
pub mod tools;

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

pub use handler::McpServer;

use crate::app::Caller;
use crate::server::error::ApiError;
use crate::server::{AppState, bodies};

/// The door's name in records, metrics labels and `GET /v1/sessions`.
pub const NAME: &str = "mcp";
/// Where the Streamable HTTP transport is served.
pub const PATH: &str = "/mcp";

/// A call's share of the body budget, from its POST to the session it starts (which holds
/// it until its coordination ends); a call that starts none gives it back when it ends.
#[derive(Clone, Default)]
pub(crate) struct CallShare(Arc<Mutex<Option<bodies::Share>>>);

impl CallShare {
    pub(crate) fn take(&self) -> Option<bodies::Share> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// `/mcp`: the Streamable HTTP transport, stateless.
pub fn route(state: &AppState) -> MethodRouter<AppState> {
    let settings = &state.settings();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_sse_keep_alive(Some(settings.keepalive))
        .with_max_request_body_bytes(settings.max_body_bytes)
        // Host and Origin are checked for every route by the edge (`server::browsers`),
        // against the server's own settings: the SDK's default admits loopback hosts only,
        // which would refuse every deployment behind a name.
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let calls = calls::Calls::default();
    let for_calls = (Arc::clone(&state.app), calls.clone());
    let service: StreamableHttpService<McpServer, NeverSessionManager> = StreamableHttpService::new(
        move || Ok(McpServer::on_http(for_calls.0.clone(), for_calls.1.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    any(move |State(state): State<AppState>, request: Request| {
        let service = service.clone();
        let calls = calls.clone();
        async move {
            match serve(&state, &service, &calls, request).await {
                Ok(response) | Err(response) => response,
            }
        }
    })
}

/// One request to `/mcp`.
async fn serve(
    state: &AppState,
    service: &StreamableHttpService<McpServer, NeverSessionManager>,
    calls: &calls::Calls,
    request: Request,
) -> Result<Response, Response> {
    let caller = request
        .extensions()
        .get::<Caller>()
        .copied()
        .unwrap_or_default();
    let session = session_of(&request, &caller).map_err(IntoResponse::into_response)?;
    match *request.method() {
        Method::POST => {}
        Method::DELETE if session.is_some() => {
            // The session ends: its calls running here are cancelled; nothing else is kept.
            let ended = session.as_deref().map_or(0, |s| calls.end_session(s));
            tracing::debug!(calls = ended, "mcp: session ended by the client");
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        // Only a POST carries a message; anything else is answered by the transport (405)
        // without a byte of its body read.
        _ => return Ok(transport(service, request).await),
    }
    // Read here, as every door reads its body: within the body timeout and the body budget
    // (the transport would read it with neither). The share goes with the call, and with
    // the session a `deliberate` starts.
    let (mut parts, body) = request.into_parts();
    let slot = parts.extensions.get::<bodies::ShareSlot>().cloned();
    let settings = &state.settings();
    let within = settings.production.body_read_timeout;
    let body = tokio::time::timeout(
        within,
        bodies::read_body(
            &parts.headers,
            slot.as_ref(),
            body,
            settings.max_body_bytes,
            &state.edge.bodies,
        ),
    )
    .await
    .map_err(|_| ApiError::BodyTimeout { within }.into_response())?
    .map_err(IntoResponse::into_response)?;
    if let Some(slot) = slot {
        parts
            .extensions
            .insert(CallShare(Arc::new(Mutex::new(Some(slot.take())))));
    }
    let probe = calls::Probe::of(&body);
    if let (Some(session), Some(request_id)) = (&session, &probe.cancels) {
        let cancelled = calls.cancel(session, request_id);
        tracing::debug!(cancelled, "mcp: the client cancelled a call");
    }
    let mut response = transport(service, Request::from_parts(parts, body.into())).await;
    if probe.initialize
        && response.status().is_success()
        && let Ok(id) = HeaderValue::from_str(&calls::new_session(&caller))
    {
        response.headers_mut().insert(calls::SESSION_HEADER, id);
    }
    Ok(response)
}

async fn transport(
    service: &StreamableHttpService<McpServer, NeverSessionManager>,
    request: Request,
) -> Response {
    match service.clone().oneshot(request).await {
        Ok(response) => response.into_response(),
        Err(never) => match never {},
    }
}

/// The request's `Mcp-Session-Id`, when it has one; [`UnknownSession`] when it is not one
/// this server gave the caller's key.
fn session_of(request: &Request, caller: &Caller) -> Result<Option<String>, UnknownSession> {
    let Some(value) = request.headers().get(calls::SESSION_HEADER) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(token) if calls::owns(caller, token) => Ok(Some(token.to_string())),
        _ => Err(UnknownSession),
    }
}

/// 404, MCP's answer for a session the server does not know: the client starts a new one.
struct UnknownSession;

impl IntoResponse for UnknownSession {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
            "code": -32001,
            "message": "Session not found: this Mcp-Session-Id was not issued to this API key by this server; initialize a new session",
        }});
        (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
    }
}

/// Serves MCP over stdin and stdout until the client closes stdin (or `stop` resolves).
/// A closed stdin cancels the calls still running.
pub async fn serve_stdio(
    app: Arc<crate::app::App>,
    stop: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let gone = CancellationToken::new();
    let stdin = OnEof {
        inner: tokio::io::stdin(),
        gone: gone.clone(),
    };
    let service = McpServer::until(app, gone)
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
