//! A simulated OpenAI-compatible model server whose behaviour is chosen by the model name.

use std::future::Future;

use tokio::net::TcpListener;

/// Serves the simulator on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let _ = listener;
    shutdown.await;
    Ok(())
}
