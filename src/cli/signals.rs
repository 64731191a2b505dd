//! Shutdown signals: the first Ctrl-C / SIGTERM stops gracefully, the second at once.

use tokio::sync::watch;

use super::fatal::Fatal;

/// Resolves once `stop` turns true (or its sender is gone).
pub(super) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// First Ctrl-C / SIGTERM: graceful shutdown (the server applies its grace period).
/// Second: exit at once. The handlers are installed before this returns, so a signal sent
/// right after the address line is printed is never lost to the default (killing) action.
pub(super) fn spawn_signal_watcher(stop: watch::Sender<bool>) -> Result<(), Fatal> {
    let mut signals = Signals::install()
        .map_err(|e| Fatal::runtime(format!("cannot listen for shutdown signals: {e}")))?;
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("shutting down (send the signal again to exit at once)");
        let _ = stop.send(true);
        signals.next().await;
        eprintln!("massgen: second signal, exiting now");
        std::process::exit(130);
    });
    Ok(())
}

#[cfg(unix)]
pub(super) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    pub(super) fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    pub(super) async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(not(unix))]
pub(super) struct Signals;

#[cfg(not(unix))]
impl Signals {
    pub(super) fn install() -> std::io::Result<Self> {
        Ok(Self)
    }

    pub(super) async fn next(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
