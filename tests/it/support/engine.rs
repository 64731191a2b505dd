//! A scripted [`Provider`] and helpers for the engine tests: each call's behaviour is a
//! closure of the request (so it can react to the offered tools and the answers shown),
//! every request is recorded, and a drop guard counts the streams still alive.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use massgen_core::coordination::*;
use massgen_core::provider::*;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
    pub fn requests(&self) -> Vec<ProviderRequest> {
        self.0.requests.lock().unwrap().clone()
    }
    /// Streams created and not yet dropped.
    pub fn live_streams(&self) -> usize {
        self.0.live.load(Ordering::SeqCst)
    }
}

struct LiveGuard(Arc<Inner>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
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
            let mut requests = self.0.requests.lock().unwrap();
            requests.push(request.clone());
            requests.len() - 1
        };
        let steps = (self.0.behaviour)(&request, n);
        self.0.live.fetch_add(1, Ordering::SeqCst);
        let guard = LiveGuard(self.0.clone());
        Box::pin(async_stream::stream! {
            let _guard = guard;
            for step in steps {
                match step {
                    Step::Chunk(c) => yield Ok(c),
                    Step::Sleep(d) => tokio::time::sleep(d).await,
                    Step::Hang => futures::future::pending::<()>().await,
                    Step::Fail(e) => {
                        yield Err(e);
                        return;
                    }
                }
            }
        })
    }
}

// ---- request inspection ----

pub fn user_text(req: &ProviderRequest) -> String {
    req.messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}
pub fn system_text(req: &ProviderRequest) -> String {
    req.messages
        .iter()
        .find(|m| m.role == Role::System)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}
pub fn tool_names(req: &ProviderRequest) -> Vec<String> {
    req.tools.iter().map(|t| t.name.clone()).collect()
}
pub fn vote_enum(req: &ProviderRequest) -> Vec<String> {
    req.tools
        .iter()
        .find(|t| t.name == "vote")
        .and_then(|t| {
            t.parameters["properties"]["agent_id"]["enum"]
                .as_array()
                .cloned()
        })
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}
/// Whether the request shows `label`'s answer (`agent2`).
pub fn shows(req: &ProviderRequest, label: &str) -> bool {
    user_text(req).contains(&format!("<answer label=\"{label}\">"))
}
pub fn is_presentation(req: &ProviderRequest) -> bool {
    req.tools.is_empty()
}

// ---- scripts ----

pub const CALL_USAGE: Usage = Usage {
    input_tokens: 10,
    output_tokens: 5,
    total_tokens: 15,
    cached_input_tokens: 1,
    reasoning_tokens: 2,
};

/// The model begins a call to `name` (its arguments still to come).
pub fn begins(name: &str) -> Step {
    Step::Chunk(ProviderChunk::ToolCallStarted { name: name.into() })
}

pub fn tool_call(name: &str, args: &str) -> Step {
    Step::Chunk(ProviderChunk::ToolCall(ToolCall {
        id: format!("call_{name}"),
        name: name.into(),
        arguments: args.into(),
        opaque: None,
    }))
}
fn end(reason: FinishReason) -> [Step; 2] {
    [
        Step::Chunk(ProviderChunk::Usage(CALL_USAGE)),
        Step::Chunk(ProviderChunk::Finish(reason)),
    ]
}
pub fn answer(text: &str) -> Vec<Step> {
    let args = serde_json::json!({ "content": text }).to_string();
    let mut steps = vec![tool_call("new_answer", &args)];
    steps.extend(end(FinishReason::ToolCalls));
    steps
}
pub fn vote(label: &str, reason: &str) -> Vec<Step> {
    let args = serde_json::json!({ "agent_id": label, "reason": reason }).to_string();
    let mut steps = vec![tool_call("vote", &args)];
    steps.extend(end(FinishReason::ToolCalls));
    steps
}
/// A call that streams `chunks` as text and calls the given tools.
pub fn text_then(chunks: &[&str], calls: Vec<Step>) -> Vec<Step> {
    let mut steps: Vec<Step> = chunks
        .iter()
        .map(|c| Step::Chunk(ProviderChunk::Text(c.to_string())))
        .collect();
    steps.extend(calls);
    steps.extend(end(FinishReason::Stop));
    steps
}
pub fn present(chunks: &[&str]) -> Vec<Step> {
    text_then(chunks, Vec::new())
}
pub fn after(secs: u64, steps: Vec<Step>) -> Vec<Step> {
    let mut out = vec![Step::Sleep(Duration::from_secs(secs))];
    out.extend(steps);
    out
}
pub fn upstream_error(status: u16) -> ProviderError {
    let mut e = ProviderError::new(ProviderErrorKind::Server, "scripted", "upstream is down");
    e.status = Some(status);
    e
}

/// The usual panel member: answers `text` (after `delay` s) while no answer exists, then
/// votes for `target` when it can (else for the first label offered); presents `final`.
pub fn member(name: &str, text: &'static str, delay: u64, target: &'static str) -> Scripted {
    Scripted::new(name, move |req, _| {
        if is_presentation(req) {
            return present(&["Final ", "answer"]);
        }
        let labels = vote_enum(req);
        if labels.is_empty() {
            return after(delay, answer(text));
        }
        let to = if labels.iter().any(|l| l == target) {
            target.to_string()
        } else {
            labels[0].clone()
        };
        vote(&to, &format!("{to} is best"))
    })
}

// ---- running ----

pub struct FixedClock;
pub const FIXED_MS: u64 = 1_700_000_000_000;

impl Clock for FixedClock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(FIXED_MS)
    }
}

pub fn spec(agents: &[(&str, &Scripted)], options: OrchestratorOptions) -> SessionSpec {
    SessionSpec {
        session_id: "sess_test".into(),
        agents: agents
            .iter()
            .map(|(id, p)| SessionAgent {
                id: id.to_string(),
                system_message: None,
                provider: Arc::new((*p).clone()),
                tools: None,
                price: None,
                vision: false,
            })
            .collect(),
        options,
        input: SessionInput {
            history: Vec::new(),
            question: "What is 2+2?".into(),
            extra_system: None,
            ..SessionInput::default()
        },
        stream_agent_text: false,
    }
}

pub struct Run {
    pub result: Result<SessionSummary, SessionError>,
    pub events: Vec<SessionEvent>,
}

impl Run {
    pub fn kinds(&self) -> Vec<&EventKind> {
        self.events.iter().map(|e| &e.kind).collect()
    }
    pub fn summary(&self) -> &SessionSummary {
        self.result.as_ref().expect("session completed")
    }
    pub fn error(&self) -> &SessionError {
        self.result.as_ref().expect_err("session failed")
    }
    /// The `check` of every `turn_invalid` event of `label`, in order.
    pub fn invalid_checks(&self, label: &str) -> Vec<String> {
        self.kinds()
            .into_iter()
            .filter_map(|k| match k {
                EventKind::TurnInvalid { agent, check, .. } if agent.label == label => {
                    Some(check.clone())
                }
                _ => None,
            })
            .collect()
    }
}

pub async fn run(spec: SessionSpec) -> Run {
    run_with(spec, CancellationToken::new()).await
}

pub async fn run_with(spec: SessionSpec, cancel: CancellationToken) -> Run {
    let (tx, mut rx) = mpsc::channel(4096);
    let result = run_session(spec, tx, cancel, Arc::new(FixedClock)).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(*e);
    }
    Run { result, events }
}
