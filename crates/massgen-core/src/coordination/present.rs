//! The final presentation (protocol: "Winner and final presentation").

use futures::StreamExt;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;

use super::call::Gathered;
use super::emit::Emitter;
use super::engine::Session;
use super::events::{AnswerContent, CallPhase, EventKind, PresentationMode, SessionError};
use super::prompt;
use super::validate::{Action, Rules, validate};
use crate::provider::{FinishReason, Message, ProviderRequest, ToolCall};

pub(super) struct Presented {
    pub text: String,
    pub finish: FinishReason,
    pub mode: PresentationMode,
    /// Client tool calls returned instead of (or after) the text.
    pub calls: Vec<ToolCall>,
}

impl Session {
    /// Streams the final answer as `final_delta` events. Any failure of the call falls back
    /// to the winner's stored answer; only cancellation is an error.
    pub(super) async fn present(
        &mut self,
        winner: usize,
        em: &mut Emitter,
        cancel: &CancellationToken,
    ) -> Result<Presented, SessionError> {
        let stored_calls =
            self.agents[winner]
                .latest
                .and_then(|i| match &self.answers[i].content {
                    AnswerContent::ToolCalls { calls } => Some(calls.clone()),
                    AnswerContent::Text { .. } => None,
                });
        if let Some(calls) = stored_calls {
            if self.options.present_tool_calls && !self.options.skip_final_presentation {
                return self.present_calls(winner, calls, em, cancel).await;
            }
            return self
                .return_calls(em, calls, PresentationMode::Skipped)
                .await;
        }
        let stored = self.agents[winner]
            .latest
            .map(|i| self.answers[i].content.as_text())
            .unwrap_or_default();
        if self.options.skip_final_presentation {
            self.final_delta(em, stored.clone()).await?;
            return Ok(Presented {
                text: stored,
                finish: FinishReason::Stop,
                mode: PresentationMode::Skipped,
                calls: Vec::new(),
            });
        }
        let who = self.agents[winner].who.clone();
        let (gathered, failure) = self
            .presentation_call(winner, None, ProviderRequest::default(), true, em, cancel)
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
        self.send(
            em,
            EventKind::PresentationFailed {
                agent: who,
                message,
            },
        )
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
        self.final_delta(em, tail.clone()).await?;
        Ok(Presented {
            text: gathered.text + &tail,
            finish: FinishReason::Stop,
            mode: PresentationMode::Fallback,
            calls: Vec::new(),
        })
    }

    async fn return_calls(
        &mut self,
        em: &mut Emitter,
        calls: Vec<ToolCall>,
        mode: PresentationMode,
    ) -> Result<Presented, SessionError> {
        self.send(
            em,
            EventKind::FinalToolCalls {
                calls: calls.clone(),
            },
        )
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
    async fn present_calls(
        &mut self,
        winner: usize,
        stored: Vec<ToolCall>,
        em: &mut Emitter,
        cancel: &CancellationToken,
    ) -> Result<Presented, SessionError> {
        let who = self.agents[winner].who.clone();
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
            .presentation_call(winner, Some(instruction), request, false, em, cancel)
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
                        return self
                            .return_calls(em, calls, PresentationMode::Presented)
                            .await;
                    }
                    Ok(_) => "the presentation did not call the client's tools".to_string(),
                    Err(invalid) => invalid.message,
                }
            }
            None if !gathered.text.trim().is_empty() && !rules.call_required => {
                self.final_delta(em, gathered.text.clone()).await?;
                return Ok(Presented {
                    text: gathered.text,
                    finish: gathered.finish.unwrap_or(FinishReason::Stop),
                    mode: PresentationMode::Presented,
                    calls: Vec::new(),
                });
            }
            None => "the presentation made no tool call".to_string(),
        };
        self.send(
            em,
            EventKind::PresentationFailed {
                agent: who,
                message,
            },
        )
        .await?;
        self.return_calls(em, stored, PresentationMode::Fallback)
            .await
    }

    /// The presentation call both kinds of answer share: the started event, the prompt (the
    /// winner's own system message, the presentation instructions, then `instruction`), the
    /// call under `presentation_timeout`, and its usage. With `stream_text` the reply's text
    /// reaches the client as it arrives. Returns what was gathered and, if the call failed,
    /// why.
    async fn presentation_call(
        &mut self,
        winner: usize,
        instruction: Option<&str>,
        mut request: ProviderRequest,
        stream_text: bool,
        em: &mut Emitter,
        cancel: &CancellationToken,
    ) -> Result<(Gathered, Option<String>), SessionError> {
        let who = self.agents[winner].who.clone();
        self.send(em, EventKind::PresentationStarted { agent: who.clone() })
            .await?;
        let votes: Vec<(String, String, String)> = self
            .counted_votes()
            .into_iter()
            .map(|v| (v.voter.label, v.target_label, v.reason))
            .collect();
        let mut system = prompt::presentation_system(
            self.agents[winner].spec.system_message.as_deref(),
            self.input.extra_system.as_deref(),
            &who.label,
            self.clock.now(),
        );
        if let Some(instruction) = instruction {
            system = format!("{system}\n{instruction}");
        }
        let user =
            prompt::presentation_user(&self.input, &self.shown_answers(), &who.label, &votes);
        request.messages = vec![Message::system(system), Message::user(user)];
        let mut stream = self.agents[winner].spec.provider.stream(request);
        let deadline = Instant::now() + self.options.presentation_timeout;
        let mut gathered = Gathered::default();
        let failure = loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(self.cancelled()),
                _ = em.closed() => return Err(self.cancelled()),
                next = timeout_at(deadline, stream.next()) => next,
            };
            match next {
                Err(_) => {
                    break Some(format!(
                        "the presentation took longer than presentation_timeout ({}s)",
                        self.options.presentation_timeout.as_secs()
                    ));
                }
                Ok(None) => break None,
                Ok(Some(Err(e))) => break Some(e.to_string()),
                Ok(Some(Ok(chunk))) => {
                    if let Some(text) = gathered.absorb(chunk).filter(|_| stream_text) {
                        self.final_delta(em, text).await?;
                    }
                }
            }
        };
        drop(stream);
        if let Some(usage) = gathered.usage {
            self.record_usage(winner, CallPhase::Presentation, usage, em)
                .await?;
        }
        Ok((gathered, failure))
    }

    async fn final_delta(&mut self, em: &mut Emitter, text: String) -> Result<(), SessionError> {
        if text.is_empty() {
            return Ok(());
        }
        self.send(em, EventKind::FinalDelta { text }).await
    }
}
