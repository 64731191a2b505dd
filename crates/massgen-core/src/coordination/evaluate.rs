//! Post-evaluation (MassGen's `max_orchestration_restarts`): once the panel has chosen a
//! winner, and restarts remain, the winner checks the winning answer in one more call and
//! either submits it or asks for a new attempt with its critique. MassGen checks the
//! presented answer after it was shown; here the check comes before the presentation,
//! because a streamed answer cannot be taken back and a rejected answer should cost no
//! presentation call. A failed, timed-out or undecided check submits the answer, as
//! MassGen's does.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::call::Gathered;
use super::emit::Emitter;
use super::events::{CallPhase, EventKind, SessionError};
use super::prompt;
use super::spec::{Clock, SessionAgent, SessionInput};
use super::state::SessionState;
use super::watch::{Next, Watch};
use crate::provider::{Message, ProviderRequest, ToolChoice, ToolSpec};

/// The tool that accepts the answer.
const SUBMIT: &str = "submit";
/// The tool that asks for a new attempt.
const RESTART: &str = "restart_orchestration";

/// The reviewer's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Submit,
    Restart {
        reason: String,
        instructions: String,
    },
}

/// One post-evaluation call of the winner, with what it needs of the session.
pub(super) struct Evaluator<'a> {
    pub state: &'a mut SessionState,
    pub winner: usize,
    pub agent: &'a SessionAgent,
    pub input: &'a SessionInput,
    pub clock: &'a dyn Clock,
    pub em: &'a mut Emitter,
    pub cancel: &'a CancellationToken,
    /// The call's deadline (the presentation timeout, within the session's).
    pub deadline: Instant,
}

impl Evaluator<'_> {
    /// Asks the winner to check `answer`; only cancellation is an error.
    pub async fn evaluate(self, answer: &str) -> Result<Verdict, SessionError> {
        let who = self.state.who(self.winner).clone();
        let system = prompt::evaluation_system(
            self.agent.system_message.as_deref(),
            self.input.extra_system.as_deref(),
            &who.label,
            self.clock.now(),
        );
        let request = ProviderRequest {
            messages: Arc::new(vec![
                Message::system(system),
                prompt::user_turn(
                    prompt::evaluation_user(self.input, answer),
                    self.input,
                    self.agent.vision,
                ),
            ]),
            tools: tools(),
            tool_choice: Some(ToolChoice::Auto),
            // A check, not an answer: no output format, stops or token limit of the client's.
            sampling: self.input.sampling,
            ..ProviderRequest::default()
        };
        self.state.add_calls(self.winner, 1);
        let mut stream = self.agent.provider.stream(request);
        let mut gathered = Gathered::default();
        let mut watch = Watch::new(self.cancel, self.em, self.deadline);
        loop {
            let next = match watch.next(&mut stream).await {
                Next::Gone => return Err(self.state.cancelled()),
                Next::Elapsed => Err(()),
                Next::Item(item) => Ok(item),
            };
            match next {
                Ok(Some(Ok(chunk))) => {
                    gathered.absorb(chunk);
                }
                // Ended, failed or timed out: what was gathered decides.
                _ => break,
            }
        }
        drop(stream);
        if let Some(usage) = gathered.usage {
            self.em
                .usage(self.state, self.winner, CallPhase::PostEvaluation, usage)
                .await?;
        }
        let verdict = verdict(&gathered);
        let (restart, reason, instructions) = match &verdict {
            Verdict::Submit => (false, String::new(), String::new()),
            Verdict::Restart {
                reason,
                instructions,
            } => (true, reason.clone(), instructions.clone()),
        };
        let event = EventKind::PostEvaluation {
            agent: who,
            restart,
            reason,
            instructions,
        };
        self.em.send(self.state, event).await?;
        Ok(verdict)
    }
}

/// A `restart_orchestration` call with a reason restarts; anything else submits.
fn verdict(gathered: &Gathered) -> Verdict {
    let restart = gathered.tool_calls.iter().find(|c| c.name == RESTART);
    let args: Option<Value> = restart.and_then(|c| serde_json::from_str(&c.arguments).ok());
    let field = |name: &str| {
        args.as_ref()
            .and_then(|a| a.get(name))
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let reason = field("reason");
    if reason.is_empty() {
        return Verdict::Submit;
    }
    let instructions = field("instructions");
    Verdict::Restart {
        instructions: if instructions.is_empty() {
            reason.clone()
        } else {
            instructions
        },
        reason,
    }
}

fn tools() -> Vec<Arc<ToolSpec>> {
    vec![
        Arc::new(ToolSpec {
            name: SUBMIT.into(),
            description:
                "Accept the answer: it fully and correctly addresses the original message.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"confirmed": {"type": "boolean"}},
                "required": ["confirmed"]
            }),
        }),
        Arc::new(ToolSpec {
            name: RESTART.into(),
            description: "Reject the answer and start the deliberation again, with what is wrong \
                          and what the next attempt must do."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "reason": {"type": "string"},
                    "instructions": {"type": "string"}
                },
                "required": ["reason", "instructions"]
            }),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn with(calls: &[(&str, &str)]) -> Gathered {
        Gathered {
            tool_calls: calls
                .iter()
                .map(|(name, args)| ToolCall {
                    id: "c".into(),
                    name: name.to_string(),
                    arguments: args.to_string(),
                    opaque: None,
                })
                .collect(),
            ..Gathered::default()
        }
    }

    #[test]
    fn only_a_reasoned_restart_restarts() {
        assert_eq!(verdict(&with(&[])), Verdict::Submit);
        assert_eq!(
            verdict(&with(&[(SUBMIT, r#"{"confirmed":true}"#)])),
            Verdict::Submit
        );
        assert_eq!(verdict(&with(&[(RESTART, "not json")])), Verdict::Submit);
        assert_eq!(
            verdict(&with(&[(RESTART, r#"{"reason":" "}"#)])),
            Verdict::Submit
        );
        assert_eq!(
            verdict(&with(&[(RESTART, r#"{"reason":"misses Paul"}"#)])),
            Verdict::Restart {
                reason: "misses Paul".into(),
                instructions: "misses Paul".into()
            }
        );
        assert_eq!(
            verdict(&with(&[(
                RESTART,
                r#"{"reason":"r","instructions":"do i"}"#
            )])),
            Verdict::Restart {
                reason: "r".into(),
                instructions: "do i".into()
            }
        );
    }
}
