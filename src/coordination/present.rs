//! The final presentation (protocol: "Winner and final presentation").

use futures::StreamExt;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;

use super::call::Gathered;
use super::emit::Emitter;
use super::engine::Session;
use super::events::{CallPhase, EventKind, PresentationMode, SessionError};
use super::prompt;
use crate::providers::{FinishReason, Message, ProviderRequest};

pub(super) struct Presented {
    pub text: String,
    pub finish: FinishReason,
    pub mode: PresentationMode,
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
            });
        }
        let who = self.agents[winner].who.clone();
        self.send(em, EventKind::PresentationStarted { agent: who.clone() })
            .await?;
        let votes: Vec<(String, String, String)> = self
            .counted_votes()
            .into_iter()
            .map(|v| (v.voter.label, v.target_label, v.reason))
            .collect();
        let system = prompt::presentation_system(
            self.agents[winner].spec.system_message.as_deref(),
            self.input.extra_system.as_deref(),
            &who.label,
            self.clock.now(),
        );
        let user =
            prompt::presentation_user(&self.input, &self.shown_answers(), &who.label, &votes);
        let request = ProviderRequest {
            messages: vec![Message::system(system), Message::user(user)],
            ..Default::default()
        };
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
                    if let Some(text) = gathered.absorb(chunk) {
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
        })
    }

    async fn final_delta(&mut self, em: &mut Emitter, text: String) -> Result<(), SessionError> {
        if text.is_empty() {
            return Ok(());
        }
        self.send(em, EventKind::FinalDelta { text }).await
    }
}
