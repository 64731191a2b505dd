//! A panel of one is a plain call (docs/protocol.md, "A panel of one"): the session's agent
//! is asked what the client asked, the way the client would have asked that model itself:
//! its messages as they came (system text first, the conversation, the question with its
//! images, the turns after it), its tools and `tool_choice`, its output format, token
//! bound, stops and sampling, and whether it streams. No coordination prompt, no workflow
//! tool, one upstream call. What the model streams goes out as it arrives: text as the
//! answer ([`EventKind::FinalDelta`]), its reasoning as reasoning
//! ([`EventKind::ReasoningDelta`]), tool calls as the answer's tool calls. The session is
//! otherwise a session like any: the same events around the call (usage and cost, the end
//! in `session_completed` / `session_failed`), so records, metrics, budgets and the doors
//! need nothing of their own.
//!
//! When the client asked for structured output the answer is checked, as a coordination's
//! is: held until it passes when the client does not stream, else checked after it
//! streamed; one that does not fit gets one corrective call (not streamed), then fails.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::emit::{ClientGone, Emitter};
use super::events::{
    AgentError, AgentErrorKind, AgentRef, AgentSummary, CallPhase, ConsensusReason, EventKind,
    PresentationMode, SessionError, SessionErrorKind, SessionEvent, SessionSummary,
};
use super::spec::{Clock, Rejection, SessionAgent, SessionInput, SessionSpec};
use super::structured;
use super::watch::{Next, Watch};
use crate::provider::{
    FinishReason, Message, ProviderChunk, ProviderError, ProviderRequest, ToolCall, Usage,
};

/// Whether a session of `spec` is a plain call: one agent takes part (a panel of one, or
/// `skip_coordination_rounds`) and nothing asks for the protocol around it: not
/// `single_agent_coordination`, no agent tools of its own (their loop runs in coordination
/// turns), no planning mode, no post-evaluation.
pub fn is_plain(spec: &SessionSpec) -> bool {
    let taking_part = if spec.options.skip_coordination_rounds {
        spec.agents.len().min(1)
    } else {
        spec.agents.len()
    };
    taking_part == 1
        && !spec.options.single_agent_coordination
        && spec.agents.first().is_some_and(|a| a.tools.is_none())
        && !spec.options.planning_mode
        && spec.options.max_orchestration_restarts == 0
}

/// Runs a plain call to its end: see the module's comment. Every event goes to `events`
/// (the last one is `session_completed` or `session_failed`).
pub async fn run_plain(
    spec: SessionSpec,
    events: mpsc::Sender<Box<SessionEvent>>,
    cancel: CancellationToken,
    clock: Arc<dyn Clock>,
) -> Result<SessionSummary, SessionError> {
    let started = Instant::now();
    let mut em = Emitter::new(
        events,
        spec.session_id.clone(),
        clock.clone(),
        cancel.clone(),
    );
    let mut call = Plain::new(spec, started);
    let outcome = call.run(&mut em, &cancel).await;
    let last = match &outcome {
        Ok(summary) => EventKind::SessionCompleted {
            summary: Box::new(summary.clone()),
        },
        Err(error) => EventKind::SessionFailed {
            error: error.clone(),
        },
    };
    let cancelled = matches!(&outcome, Err(e) if e.kind == SessionErrorKind::Cancelled);
    if cancelled || cancel.is_cancelled() {
        em.emit_now(last);
    } else {
        let _ = em.emit(last).await;
    }
    outcome
}

struct Plain {
    agent: SessionAgent,
    who: AgentRef,
    input: SessionInput,
    deadline: Instant,
    started: Instant,
    max_cost_usd: Option<f64>,
    usage: Usage,
    cost: f64,
    unpriced: bool,
    calls: u32,
}

/// What one call gave.
#[derive(Default)]
struct Reply {
    text: String,
    calls: Vec<ToolCall>,
    finish: Option<FinishReason>,
}

impl Plain {
    fn new(spec: SessionSpec, started: Instant) -> Self {
        let SessionSpec {
            agents,
            options,
            input,
            ..
        } = spec;
        let agent = agents
            .into_iter()
            .next()
            .unwrap_or_else(|| unreachable!("is_plain checked the agent"));
        let who = AgentRef {
            agent_id: agent.id.clone(),
            label: "agent1".into(),
        };
        Self {
            agent,
            who,
            input,
            deadline: started + options.session_timeout,
            started,
            max_cost_usd: options.max_cost_usd,
            usage: Usage::default(),
            cost: 0.0,
            unpriced: false,
            calls: 0,
        }
    }

    async fn run(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
    ) -> Result<SessionSummary, SessionError> {
        self.send(
            em,
            EventKind::SessionStarted {
                agents: vec![self.who.clone()],
            },
        )
        .await?;
        let output = self.input.output.clone();
        // A structured answer the client does not stream is held until it passed.
        let hold = output.as_ref().is_some_and(|o| !o.streamed);
        let request = self.request(None, self.input.streamed);
        let mut reply = self.call(em, cancel, request, !hold).await?;
        // An answer cut by its token limit is returned as it is, unchecked (as OpenAI does,
        // with finish_reason "length").
        let cut = reply.finish == Some(FinishReason::Length);
        if let Some(output) = output.filter(|_| reply.calls.is_empty() && !cut) {
            let verdict = output.check.check(&reply.text).await;
            let mismatch = match verdict {
                Ok(()) => None,
                Err(Rejection::Unchecked(why)) => return Err(self.invalid_output(why)),
                Err(Rejection::Mismatch(why)) => Some(why),
            };
            if let Some(why) = mismatch {
                if !hold {
                    // Streamed already: it cannot be taken back or asked again.
                    return Err(self.invalid_output(why));
                }
                if let Some(limit) = self.max_cost_usd.filter(|limit| self.cost >= *limit) {
                    // The corrective call is a second payment: not past the session's limit.
                    let spent = self.cost;
                    self.send(
                        em,
                        EventKind::BudgetExhausted {
                            spent_usd: spent,
                            max_cost_usd: limit,
                        },
                    )
                    .await?;
                    return Err(self.error(
                        SessionErrorKind::BudgetExhausted,
                        format!(
                            "the session spent ${spent:.6} of its ${limit} limit (max_cost_usd) on an answer that did not match the schema ({why})"
                        ),
                        None,
                    ));
                }
                let fix = structured::corrective(&why, &reply.text);
                let request = self.request(Some(fix), false);
                reply = self.call(em, cancel, request, false).await?;
                if let Err(Rejection::Mismatch(why) | Rejection::Unchecked(why)) =
                    output.check.check(&reply.text).await
                {
                    return Err(self.invalid_output(why));
                }
            }
            if hold {
                let text = reply.text.clone();
                self.send(em, EventKind::FinalDelta { text }).await?;
            }
        }
        if !reply.calls.is_empty() {
            let calls = reply.calls.clone();
            self.send(em, EventKind::FinalToolCalls { calls }).await?;
        }
        Ok(self.summary(reply))
    }

    /// The client's request as the model gets it; `correction`: what to fix in a rejected
    /// answer (it quotes it), for the corrective call; `stream`: ask the upstream for a
    /// stream, else for one whole response.
    fn request(&self, correction: Option<String>, stream: bool) -> ProviderRequest {
        let input = &self.input;
        let mut messages = Vec::with_capacity(input.history.len() + input.followup.len() + 3);
        let system: Vec<&str> = [
            self.agent.system_message.as_deref(),
            input.extra_system.as_deref(),
        ]
        .into_iter()
        .flatten()
        .filter(|s| !s.trim().is_empty())
        .collect();
        if !system.is_empty() {
            messages.push(Message::system(system.join("\n\n")));
        }
        let before = input.history.len().saturating_sub(input.after_question);
        messages.extend(input.history[..before].iter().cloned());
        let mut question = Message::user(input.question.clone());
        question.images.clone_from(&input.question_images);
        messages.push(question);
        messages.extend(input.history[before..].iter().cloned());
        messages.extend(input.followup.iter().cloned());
        if !self.agent.vision {
            // A model that cannot see images is told where they were instead of failing.
            for message in &mut messages {
                if !message.images.is_empty() {
                    let n = message.images.len();
                    message.images.clear();
                    message.content.push_str(&format!(
                        "\n\n[{n} image(s) attached here: this model cannot see images]"
                    ));
                }
            }
        }
        if let Some(fix) = correction {
            messages.push(Message::user(fix));
        }
        let tools = &input.tools;
        ProviderRequest {
            messages: Arc::new(messages),
            tools: tools.tools.clone(),
            tool_choice: tools.choice.clone(),
            parallel_tool_calls: tools.parallel,
            output_format: input.output.as_ref().map(|o| o.format.clone()),
            max_output_tokens: input.answer_bounds.max_output_tokens,
            stop: input.answer_bounds.stop.clone(),
            sampling: input.sampling,
            whole: !stream,
        }
    }

    /// One upstream call to its end, its text streamed out when `stream_text`, its
    /// reasoning always, its usage counted.
    async fn call(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
        request: ProviderRequest,
        stream_text: bool,
    ) -> Result<Reply, SessionError> {
        self.calls += 1;
        let mut stream = self.agent.provider.stream(request);
        let mut reply = Reply::default();
        let mut usage = None;
        // A reader that left cancels the call (dropping the stream aborts it): a whole
        // call or a held answer would otherwise send nothing that notices.
        let mut watch = Watch::new(cancel, em, self.deadline);
        let failure = loop {
            let next = match watch.next(&mut stream).await {
                Next::Gone => return Err(self.gone(em, usage)),
                Next::Elapsed => Err(()),
                Next::Item(item) => Ok(item),
            };
            match next {
                Err(()) => {
                    drop(stream);
                    self.count(em, usage.take()).await?;
                    return Err(self.error(
                        SessionErrorKind::Timeout,
                        "the model did not answer within the session's time (orchestrator_timeout_seconds)".into(),
                        None,
                    ));
                }
                Ok(None) => break None,
                Ok(Some(Err(e))) => break Some(e),
                Ok(Some(Ok(chunk))) => match chunk {
                    ProviderChunk::Text(text) => {
                        reply.text.push_str(&text);
                        if stream_text && em.emit(EventKind::FinalDelta { text }).await.is_err() {
                            return Err(self.gone(em, usage));
                        }
                    }
                    ProviderChunk::Reasoning(text) => {
                        let agent = self.who.clone();
                        let event = EventKind::ReasoningDelta { agent, text };
                        if em.emit(event).await.is_err() {
                            return Err(self.gone(em, usage));
                        }
                    }
                    ProviderChunk::ToolCallStarted { .. } => {}
                    ProviderChunk::ToolCall(call) => reply.calls.push(call),
                    ProviderChunk::Usage(u) => usage = Some(u),
                    ProviderChunk::Finish(reason) => reply.finish = Some(reason),
                },
            }
        };
        drop(stream);
        self.count(em, usage).await?;
        match failure {
            None => Ok(reply),
            Some(e) => {
                let message = e.to_string();
                Err(self.error(SessionErrorKind::UpstreamFailed, message, Some(&e)))
            }
        }
    }

    /// Counts one call's usage, and says what it cost.
    async fn count(&mut self, em: &mut Emitter, usage: Option<Usage>) -> Result<(), SessionError> {
        let Some(usage) = usage else {
            return Ok(());
        };
        let cost_usd = self.tally(&usage);
        let agent = self.who.clone();
        self.send(
            em,
            EventKind::Usage {
                agent,
                phase: CallPhase::Presentation,
                usage,
                cost_usd,
            },
        )
        .await
    }

    /// Adds one call's usage to the session's, and says what it cost.
    fn tally(&mut self, usage: &Usage) -> Option<f64> {
        self.usage.add(usage);
        let cost_usd = self.agent.price.map(|p| p.cost(usage));
        match cost_usd {
            Some(c) => self.cost += c,
            None => self.unpriced |= usage.total_tokens > 0 || usage.input_tokens > 0,
        }
        cost_usd
    }

    /// The client went away mid-call: what the call had used so far still counts (the
    /// record and the key's spend see it), sent without waiting for a reader.
    fn gone(&mut self, em: &mut Emitter, usage: Option<Usage>) -> SessionError {
        if let Some(usage) = usage {
            let cost_usd = self.tally(&usage);
            em.emit_now(EventKind::Usage {
                agent: self.who.clone(),
                phase: CallPhase::Presentation,
                usage,
                cost_usd,
            });
        }
        self.error(
            SessionErrorKind::Cancelled,
            "the client went away".into(),
            None,
        )
    }

    async fn send(&self, em: &mut Emitter, kind: EventKind) -> Result<(), SessionError> {
        em.emit(kind).await.map_err(|ClientGone| {
            self.error(
                SessionErrorKind::Cancelled,
                "the client went away".into(),
                None,
            )
        })
    }

    fn cost_usd(&self) -> Option<f64> {
        (!self.unpriced).then_some(self.cost)
    }

    fn agent_summary(&self, error: Option<AgentError>) -> AgentSummary {
        AgentSummary {
            agent: self.who.clone(),
            provider: self.agent.provider.provider_name().to_string(),
            model: self.agent.provider.model().to_string(),
            usage: self.usage,
            calls: self.calls,
            restarts: 0,
            cost_usd: self.agent.price.map(|_| self.cost),
            answers: u32::from(error.is_none()),
            failed: error.is_some(),
            error,
        }
    }

    fn summary(&self, reply: Reply) -> SessionSummary {
        let finish = reply.finish.unwrap_or(if reply.calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        });
        SessionSummary {
            winner: self.who.clone(),
            consensus_reason: ConsensusReason::SingleAgent,
            final_answer: if reply.calls.is_empty() {
                reply.text
            } else {
                String::new()
            },
            final_tool_calls: reply.calls,
            finish_reason: finish,
            presentation: PresentationMode::Presented,
            answers: Vec::new(),
            votes: Vec::new(),
            tally: Vec::new(),
            cut: Vec::new(),
            agents: vec![self.agent_summary(None)],
            usage: self.usage,
            cost_usd: self.cost_usd(),
            max_cost_usd: self.max_cost_usd,
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn invalid_output(&self, why: String) -> SessionError {
        self.error(
            SessionErrorKind::InvalidOutput,
            format!("the answer does not fit the requested output format: {why}"),
            None,
        )
    }

    fn error(
        &self,
        kind: SessionErrorKind,
        message: String,
        upstream: Option<&ProviderError>,
    ) -> SessionError {
        let agent_errors = upstream
            .map(|e| AgentError {
                agent: self.who.clone(),
                kind: AgentErrorKind::Upstream,
                message: message.clone(),
                provider: Some(e.provider.clone()),
                status: e.status,
                upstream_kind: Some(e.kind),
                retry_after_ms: e
                    .retry_after
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                retry_can_help: Some(e.retry_can_help()),
            })
            .into_iter()
            .collect();
        SessionError {
            kind,
            message,
            agent_errors,
            usage: self.usage,
            cost_usd: self.cost_usd(),
        }
    }
}
