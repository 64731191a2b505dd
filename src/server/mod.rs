//! The HTTP edge: routes, OpenAI wire types, SSE rendering, errors as OpenAI JSON.

use std::future::Future;

use tokio::net::TcpListener;

use crate::config::{PanelCatalog, ServerSettings};

/// Serves the API on `listener` until `shutdown` resolves, then lets running sessions
/// finish for up to `settings.shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    catalog: PanelCatalog,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let _ = (listener, catalog, settings);
    shutdown.await;
    Ok(())
}
