//! The scripted provider: each call's steps come from a closure of the request and the call's
//! number; requests are recorded and live streams counted.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::provider::{ChunkStream, Provider, ProviderChunk, ProviderError, ProviderRequest};

/// One step of a scripted upstream call.
#[derive(Debug, Clone)]
pub enum Step {
    Chunk(ProviderChunk),
    Sleep(Duration),
    Fail(ProviderError),
    /// Never ends (until the stream is dropped).
    Hang,
}

type Behaviour = dyn Fn(&ProviderRequest, usize) -> Vec<Step> + Send + Sync;

struct Inner {
    name: String,
    behaviour: Box<Behaviour>,
    requests: Mutex<Vec<ProviderRequest>>,
    live: AtomicUsize,
}

impl Inner {
    /// A test that panicked while holding the lock has failed already; the requests it
    /// recorded are still worth reading.
    fn requests(&self) -> MutexGuard<'_, Vec<ProviderRequest>> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A provider that plays a script: cheap to clone, every clone shares its record.
#[derive(Clone)]
pub struct Scripted(Arc<Inner>);

impl fmt::Debug for Scripted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scripted({})", self.0.name)
    }
}

impl Scripted {
    /// `behaviour(request, n)`: `n` counts this provider's calls from 0.
    pub fn new(
        name: &str,
        behaviour: impl Fn(&ProviderRequest, usize) -> Vec<Step> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(Inner {
            name: name.into(),
            behaviour: Box::new(behaviour),
            requests: Mutex::new(Vec::new()),
            live: AtomicUsize::new(0),
        }))
    }
    /// Every request made of this provider, in order.
    pub fn requests(&self) -> Vec<ProviderRequest> {
        self.0.requests().clone()
    }
    /// Streams created and not yet dropped.
    pub fn live_streams(&self) -> usize {
        self.0.live.load(Ordering::SeqCst)
    }
}

/// Counts a stream as live until the stream, and with it this guard, is dropped.
struct LiveGuard(Arc<Inner>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a call's stream holds between polls: the steps left and its guard; `failed` after
/// an error chunk, which ends the stream at the next poll.
struct Playing {
    steps: VecDeque<Step>,
    failed: bool,
    _guard: LiveGuard,
}

impl Provider for Scripted {
    fn provider_name(&self) -> &str {
        "scripted"
    }
    fn model(&self) -> &str {
        &self.0.name
    }
    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        let n = {
            let mut requests = self.0.requests();
            requests.push(request.clone());
            requests.len() - 1
        };
        let steps = (self.0.behaviour)(&request, n);
        self.0.live.fetch_add(1, Ordering::SeqCst);
        let playing = Playing {
            steps: steps.into(),
            failed: false,
            _guard: LiveGuard(self.0.clone()),
        };
        Box::pin(futures::stream::unfold(playing, |mut playing| async move {
            if playing.failed {
                return None;
            }
            loop {
                match playing.steps.pop_front()? {
                    Step::Chunk(c) => return Some((Ok(c), playing)),
                    Step::Sleep(d) => tokio::time::sleep(d).await,
                    Step::Hang => futures::future::pending::<()>().await,
                    Step::Fail(e) => {
                        playing.failed = true;
                        return Some((Err(e), playing));
                    }
                }
            }
        }))
    }
}
