//! The final presentation (docs/protocol.md, "Winner and final presentation"): the winner
//! writes the final answer in one more call, or its stored answer is returned as it stands.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::agent_tools::{AgentTools, ToolCallRecord};
use super::call::{AttemptTools, CallError, Gathered, Progress, Report, Side, attempt};
use super::emit::Emitter;
use super::events::{AnswerContent, CallPhase, EventKind, PresentationMode, SessionError};
use super::options::{FinalAnswerStrategy, OrchestratorOptions};
use super::prompt;
use super::spec::{Clock, SessionAgent, SessionInput};
use super::state::SessionState;
use super::validate::{Action, Rules, validate};
use super::watch::{Next, Watch};
use crate::provider::{FinishReason, Message, ProviderRequest, ToolCall, ToolChoice, ToolSpec};

pub(super) struct Presented {
    pub text: String,
    pub finish: FinishReason,
    pub mode: PresentationMode,
    /// Client tool calls returned instead of (or after) the text.
    pub calls: Vec<ToolCall>,
}

/// The presentation of one session's winner, with what it needs of the session.
pub(super) struct Presenter<'a> {
    pub state: &'a mut SessionState,
    /// The winner's index and spec.
    pub winner: usize,
    pub agent: &'a SessionAgent,
    /// The agent's own tools offered to the plain-text presentation (planning mode: all
    /// of them; otherwise none), run by the same tool loop as in turns.
    pub own_tools: Vec<Arc<ToolSpec>>,
    /// Of those, the ones held back during coordination (named in the instruction).
    pub held_tools: Vec<String>,
    pub options: &'a OrchestratorOptions,
    pub input: &'a SessionInput,
    pub clock: &'a dyn Clock,
    pub em: &'a mut Emitter,
    pub cancel: &'a CancellationToken,
}

impl Presenter<'_> {
    /// Streams the final answer as `final_delta` events. Any failure of the call falls back
    /// to the winner's stored answer; only cancellation is an error.
    pub async fn present(mut self) -> Result<Presented, SessionError> {
        let latest = self.state.latest_answer(self.winner).map(|a| &a.content);
        let stored_calls = match latest {
            Some(AnswerContent::ToolCalls { calls }) => Some(calls.clone()),
            _ => None,
        };
        if let Some(calls) = stored_calls {
            if self.options.present_tool_calls && !self.reuse() {
                return self.present_calls(calls).await;
            }
            return self.return_calls(calls, PresentationMode::Skipped).await;
        }
        let stored = latest.map(AnswerContent::as_text).unwrap_or_default();
        if let Some(output) = self.input.output.clone() {
            return self.present_structured(&output, stored).await;
        }
        if self.reuse() {
            self.final_delta(stored.clone()).await?;
            return Ok(Presented {
                text: stored,
                finish: FinishReason::Stop,
                mode: PresentationMode::Skipped,
                calls: Vec::new(),
            });
        }
        let who = self.state.who(self.winner).clone();
        let (gathered, failure) = self
            .presentation_call(None, ProviderRequest::default(), true, true)
            .await?;
        let failure = failure.or_else(|| {
            gathered
                .text
                .trim()
                .is_empty()
                .then(|| "the presentation was empty".to_string())
        });
        let Some(message) = failure else {
            return Ok(Presented {
                text: gathered.text,
                finish: gathered.finish.unwrap_or(FinishReason::Stop),
                mode: PresentationMode::Presented,
                calls: Vec::new(),
            });
        };
        self.send(EventKind::PresentationFailed {
            agent: who,
            message,
        })
        .await?;
        // The client may already hold part of the presenter's text; it cannot be taken back,
        // so the complete stored answer follows it, after a note, to leave a whole answer.
        let tail = if gathered.text.trim().is_empty() {
            stored
        } else {
            format!(
                "\n\n(The answer above was interrupted; here is the complete answer.)\n\n{stored}"
            )
        };
        self.final_delta(tail.clone()).await?;
        Ok(Presented {
            text: gathered.text + &tail,
            finish: FinishReason::Stop,
            mode: PresentationMode::Fallback,
            calls: Vec::new(),
        })
    }

    async fn return_calls(
        &mut self,
        calls: Vec<ToolCall>,
        mode: PresentationMode,
    ) -> Result<Presented, SessionError> {
        self.send(EventKind::FinalToolCalls {
            calls: calls.clone(),
        })
        .await?;
        Ok(Presented {
            text: String::new(),
            finish: FinishReason::ToolCalls,
            mode,
            calls,
        })
    }

    /// `present_tool_calls`: the winner restates its calls with the client's tools offered.
    /// The reply is gathered whole (calls cannot be streamed before they are checked); valid
    /// calls, or text where the client did not demand calls, become the final answer, and
    /// anything else falls back to the stored calls.
    async fn present_calls(&mut self, stored: Vec<ToolCall>) -> Result<Presented, SessionError> {
        let who = self.state.who(self.winner).clone();
        let client = &self.input.tools;
        let request = ProviderRequest {
            tools: client.offered(),
            tool_choice: Some(client.upstream_choice()),
            parallel_tool_calls: client.parallel,
            ..ProviderRequest::default()
        };
        let names: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        let instruction = "The chosen answer is a set of calls to the client's tools. Make those \
             calls now, correcting the arguments if needed; answer in text only if no call is \
             needed.";
        let (gathered, failure) = self
            .presentation_call(Some(instruction), request, false, false)
            .await?;
        let rules = Rules {
            vote_labels: &[],
            answer_limit_reached: None,
            current: &[],
            novelty: self.options.answer_novelty_requirement,
            client_tools: &names,
            call_required: self.input.tools.call_required(),
            one_call_only: self.input.tools.one_call_only(),
        };
        let message = match failure {
            Some(message) => message,
            None if !gathered.tool_calls.is_empty() => {
                match validate(&rules, "", &gathered.tool_calls) {
                    Ok(Action::ToolCalls(calls)) => {
                        return self.return_calls(calls, PresentationMode::Presented).await;
                    }
                    Ok(_) => "the presentation did not call the client's tools".to_string(),
                    Err(invalid) => invalid.message,
                }
            }
            None if !gathered.text.trim().is_empty() && !rules.call_required => {
                self.final_delta(gathered.text.clone()).await?;
                return Ok(Presented {
                    text: gathered.text,
                    finish: gathered.finish.unwrap_or(FinishReason::Stop),
                    mode: PresentationMode::Presented,
                    calls: Vec::new(),
                });
            }
            None => "the presentation made no tool call".to_string(),
        };
        self.send(EventKind::PresentationFailed {
            agent: who,
            message,
        })
        .await?;
        self.return_calls(stored, PresentationMode::Fallback).await
    }

    /// The presentation call both kinds of answer share: the started event, the prompt (the
    /// winner's own system message, the presentation instructions, then `instruction`), the
    /// call under `presentation_timeout`, and its usage. With `stream_text` the reply's text
    /// reaches the client as it arrives. With `own_tools` (only where the presentation is
    /// made once: a retried call would repeat the tools' effects) the agent's tools in
    /// [`Self::own_tools`] are offered and run. Returns what was gathered and, if the call
    /// failed, why.
    pub(super) async fn presentation_call(
        &mut self,
        instruction: Option<&str>,
        mut request: ProviderRequest,
        stream_text: bool,
        own_tools: bool,
    ) -> Result<(Gathered, Option<String>), SessionError> {
        let tools = (self.agent.tools.clone()).filter(|_| own_tools && !self.own_tools.is_empty());
        let who = self.state.who(self.winner).clone();
        self.send(EventKind::PresentationStarted { agent: who.clone() })
            .await?;
        let votes: Vec<(String, String, String)> = self
            .state
            .counted_votes()
            .into_iter()
            .map(|v| (v.voter.label, v.target_label, v.reason))
            .collect();
        let (agent_system, extra) = (
            self.agent.system_message.as_deref(),
            self.input.extra_system.as_deref(),
        );
        let synthesize = self.options.final_answer() == FinalAnswerStrategy::Synthesize;
        let mut system = if synthesize {
            let had_votes = !votes.is_empty();
            prompt::synthesis_system(agent_system, extra, &who.label, had_votes, self.clock.now())
        } else {
            prompt::presentation_system(agent_system, extra, &who.label, self.clock.now())
        };
        // A synthesis without votes singles out no answer (MassGen does the same).
        let own_label = Some(who.label.as_str()).filter(|_| !synthesize || !votes.is_empty());
        if let Some(instruction) = instruction {
            system = format!("{system}\n{instruction}");
        }
        if tools.is_some() {
            let note = prompt::planning_presentation_note(&self.held_tools);
            system = format!("{system}\n{note}");
            request.tools.extend(self.own_tools.iter().cloned());
            request.tool_choice.get_or_insert(ToolChoice::Auto);
        }
        let shown = self.state.shown_answers();
        let user = prompt::presentation_user(self.input, &shown, own_label, &votes);
        let user = prompt::user_turn(user, self.input, self.agent.vision);
        request.messages = Arc::new(vec![Message::system(system), user]);
        request.max_output_tokens = self.input.answer_bounds.max_output_tokens;
        request.stop.clone_from(&self.input.answer_bounds.stop);
        request.sampling = self.input.sampling;
        let deadline = Instant::now() + self.options.presentation_timeout;
        if let Some(tools) = tools {
            return self.with_tools(request, tools, deadline, stream_text).await;
        }
        self.state.add_calls(self.winner, 1);
        let mut stream = self.agent.provider.stream(request);
        let mut gathered = Gathered::default();
        let mut watch = Watch::new(self.cancel, self.em, deadline);
        let failure = loop {
            let next = match watch.next(&mut stream).await {
                Next::Gone => return Err(self.state.cancelled()),
                Next::Elapsed => Err(()),
                Next::Item(item) => Ok(item),
            };
            match next {
                Err(()) => {
                    break Some(format!(
                        "the presentation took longer than presentation_timeout ({}s)",
                        self.options.presentation_timeout.as_secs()
                    ));
                }
                Ok(None) => break None,
                Ok(Some(Err(e))) => break Some(e.to_string()),
                Ok(Some(Ok(chunk))) => {
                    if let Some(text) = gathered.absorb(chunk).filter(|_| stream_text) {
                        self.final_delta(text).await?;
                    }
                }
            }
        };
        drop(stream);
        if let Some(usage) = gathered.usage {
            self.em
                .usage(self.state, self.winner, CallPhase::Presentation, usage)
                .await?;
        }
        Ok((gathered, failure))
    }

    /// The presentation call with the agent's own tools: the turns' tool loop (limits,
    /// timeouts, `tool_called` events) under `presentation_timeout`. The text of every
    /// round is the answer (it was streamed as it came), rounds apart by a blank line.
    async fn with_tools(
        &mut self,
        request: ProviderRequest,
        tools: Arc<dyn AgentTools>,
        deadline: Instant,
        stream_text: bool,
    ) -> Result<(Gathered, Option<String>), SessionError> {
        let (side_tx, mut side_rx) = mpsc::channel(64);
        let progress = Arc::new(Progress::new(Vec::new()));
        let report = Report {
            agent: self.winner,
            side: side_tx,
            stream_text: true,
            progress: progress.clone(),
        };
        let names: HashSet<String> = self.own_tools.iter().map(|t| t.name.clone()).collect();
        let rounds_left = tools.limits().max_rounds;
        let own = AttemptTools {
            tools,
            names,
            rounds_left,
        };
        let run = attempt(
            self.agent.provider.clone(),
            request,
            deadline,
            report,
            Some(own),
        );
        tokio::pin!(run);
        let mut text = String::new();
        let mut new_round = false;
        let done = loop {
            let side = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(self.state.cancelled()),
                _ = self.em.closed() => return Err(self.state.cancelled()),
                Some((_, side)) = side_rx.recv() => side,
                done = &mut run => break done,
            };
            self.on_side(side, &mut text, &mut new_round, stream_text)
                .await?;
        };
        // The attempt's last deltas may still sit in the channel.
        while let Ok((_, side)) = side_rx.try_recv() {
            self.on_side(side, &mut text, &mut new_round, stream_text)
                .await?;
        }
        self.state.add_calls(self.winner, progress.calls());
        let mut gathered = done.gathered;
        gathered.text = text;
        if let Some(usage) = gathered.usage {
            self.em
                .usage(self.state, self.winner, CallPhase::Presentation, usage)
                .await?;
        }
        let failure = match done.result {
            Ok(()) => None,
            Err(CallError::Provider(e)) => Some(e.to_string()),
            Err(CallError::TimedOut) => Some(format!(
                "the presentation took longer than presentation_timeout ({}s)",
                self.options.presentation_timeout.as_secs()
            )),
        };
        Ok((gathered, failure))
    }

    async fn on_side(
        &mut self,
        side: Side,
        text: &mut String,
        new_round: &mut bool,
        stream_text: bool,
    ) -> Result<(), SessionError> {
        match side {
            Side::Delta(mut delta) => {
                if std::mem::take(new_round) && !text.is_empty() {
                    delta.insert_str(0, "\n\n");
                }
                text.push_str(&delta);
                if stream_text {
                    self.final_delta(delta).await?;
                }
                Ok(())
            }
            Side::Tool(ToolCallRecord {
                tool,
                round,
                duration_ms,
                error,
            }) => {
                *new_round = true;
                let agent = self.state.who(self.winner).clone();
                self.send(EventKind::ToolCalled {
                    agent,
                    tool,
                    round,
                    duration_ms,
                    error,
                })
                .await
            }
        }
    }

    /// `winner_reuse`: the stored answer is the final answer, with no presentation call.
    pub(super) fn reuse(&self) -> bool {
        self.options.final_answer() == FinalAnswerStrategy::WinnerReuse
    }

    pub(super) async fn final_delta(&mut self, text: String) -> Result<(), SessionError> {
        if text.is_empty() {
            return Ok(());
        }
        self.send(EventKind::FinalDelta { text }).await
    }

    pub(super) async fn send(&mut self, kind: EventKind) -> Result<(), SessionError> {
        self.em.send(self.state, kind).await
    }
}
