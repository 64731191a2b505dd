//! [`McpClient`] over the official Rust MCP SDK (`rmcp`): stdio child processes and
//! streamable HTTP.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};

use super::{
    McpClient, McpConnector, McpError, McpServerConfig, McpTransport, RemoteTool, ToolOutput,
};

/// A server that has not finished the MCP handshake by then is given up on (and tried
/// again on its next use).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, Default)]
pub struct RmcpConnector;

impl McpConnector for RmcpConnector {
    fn connect(
        &self,
        server: &McpServerConfig,
    ) -> BoxFuture<'static, Result<Arc<dyn McpClient>, McpError>> {
        let server = server.clone();
        Box::pin(async move {
            let name = server.name.clone();
            let connecting = async {
                match &server.transport {
                    McpTransport::Stdio {
                        command,
                        args,
                        env,
                        cwd,
                    } => {
                        let mut cmd = tokio::process::Command::new(command);
                        cmd.args(args);
                        for (key, value) in env {
                            cmd.env(key, value.expose());
                        }
                        if let Some(dir) = cwd {
                            cmd.current_dir(dir);
                        }
                        let (transport, _) = TokioChildProcess::builder(cmd)
                            .stderr(Stdio::inherit())
                            .spawn()
                            .map_err(|e| {
                                McpError::Failed(format!("cannot start `{command}`: {e}"))
                            })?;
                        ().serve(transport).await.map_err(|e| {
                            McpError::Failed(format!("MCP handshake with `{command}` failed: {e}"))
                        })
                    }
                    McpTransport::StreamableHttp { url, headers } => {
                        let mut config =
                            StreamableHttpClientTransportConfig::with_uri(url.as_str());
                        let mut custom = HashMap::new();
                        for (key, value) in headers {
                            let value = value.expose();
                            if let Some(token) = value
                                .strip_prefix("Bearer ")
                                .filter(|_| key.eq_ignore_ascii_case("authorization"))
                            {
                                config = config.auth_header(token.to_string());
                                continue;
                            }
                            let name = http::HeaderName::try_from(key.as_str()).map_err(|_| {
                                McpError::Failed(format!("invalid header name `{key}`"))
                            })?;
                            let value = http::HeaderValue::try_from(value).map_err(|_| {
                                McpError::Failed(format!("invalid value for header `{key}`"))
                            })?;
                            custom.insert(name, value);
                        }
                        let transport = StreamableHttpClientTransport::from_config(
                            config.custom_headers(custom),
                        );
                        ().serve(transport).await.map_err(|e| {
                            McpError::Failed(format!("MCP handshake with {url} failed: {e}"))
                        })
                    }
                }
            };
            let service = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
                .await
                .map_err(|_| {
                    McpError::Failed(format!(
                        "MCP server `{name}` did not answer within {}s",
                        CONNECT_TIMEOUT.as_secs()
                    ))
                })??;
            let peer = service.peer().clone();
            Ok(Arc::new(RmcpClient {
                service: tokio::sync::Mutex::new(Some(service)),
                peer,
            }) as Arc<dyn McpClient>)
        })
    }
}

/// One connected server. The peer is kept apart from the service so calls do not hold the
/// lock that shutdown takes.
pub struct RmcpClient {
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
    peer: Peer<RoleClient>,
}

impl std::fmt::Debug for RmcpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RmcpClient")
    }
}

fn service_error(e: ServiceError) -> McpError {
    match e {
        ServiceError::TransportSend(_) | ServiceError::TransportClosed => {
            McpError::Disconnected(e.to_string())
        }
        other => McpError::Failed(other.to_string()),
    }
}

/// The text of a tool result: text blocks joined; other blocks (images, resources) as JSON.
fn result_text(content: &[ContentBlock], structured: Option<&Value>) -> String {
    let mut parts: Vec<String> = content
        .iter()
        .map(|block| match block.as_text() {
            Some(t) => t.text.clone(),
            None => serde_json::to_string(block).unwrap_or_default(),
        })
        .collect();
    if let Some(v) = structured.filter(|_| parts.is_empty()) {
        parts.push(v.to_string());
    }
    parts.join("\n")
}

impl McpClient for RmcpClient {
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<RemoteTool>, McpError>> {
        Box::pin(async move {
            let tools = self.peer.list_all_tools().await.map_err(service_error)?;
            Ok(tools
                .into_iter()
                .map(|t| RemoteTool {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                    input_schema: Value::Object((*t.input_schema).clone()),
                    read_only_hint: t.annotations.as_ref().and_then(|a| a.read_only_hint),
                })
                .collect())
        })
    }

    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, McpError>> {
        Box::pin(async move {
            let mut params = CallToolRequestParams::new(name);
            params.arguments = Some(arguments);
            let response = self
                .peer
                .call_tool_once(params)
                .await
                .map_err(service_error)?;
            match response {
                rmcp::model::CallToolResponse::Complete(result) => Ok(ToolOutput {
                    text: result_text(&result.content, result.structured_content.as_ref()),
                    is_error: result.is_error.unwrap_or(false),
                }),
                _ => Err(McpError::Failed(
                    "the MCP server asked for input or started a task; neither is supported".into(),
                )),
            }
        })
    }

    fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(service) = self.service.lock().await.take() {
                // Closes stdin (a stdio server then exits; it is killed if it does not).
                let _ = service.cancel().await;
            }
        })
    }
}
