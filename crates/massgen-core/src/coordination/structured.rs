//! Structured output: the client asks for JSON (any object, or a value valid against its
//! JSON Schema). The agents deliberate as usual but are told the format, so their answers
//! compare like for like; their coordination turns carry no native format (a schema on a
//! tool-calling turn suppresses the tool calls the protocol needs). The presentation call
//! carries it in the provider's native form. The answer is checked by the caller's
//! [`AnswerCheck`](super::AnswerCheck) (the engine knows no JSON Schema crate; the seam and
//! the [`StructuredOutput`] it belongs to are in `spec.rs`, with the rest of the session's
//! input); a failed check gets one corrective presentation call that names the problem, and
//! a second failure fails the session (`invalid_output`) instead of returning prose. An
//! answer the check could not judge ([`Rejection::Unchecked`]: out of its time budget)
//! fails it at once.

use super::events::{EventKind, PresentationMode, SessionError, SessionErrorKind};
use super::present::{Presented, Presenter};
use super::spec::{Rejection, SessionInput, StructuredOutput};
use crate::provider::{FinishReason, OutputFormat, ProviderRequest};

/// Longest excerpt of a rejected reply quoted back in the corrective call.
const MAX_QUOTED_CHARS: usize = 2_000;

/// Tells every agent (and the presenter) the required format, in the extra system text.
pub(super) fn tell_agents(input: &mut SessionInput) {
    let Some(output) = &input.output else {
        return;
    };
    let note = instruction(&output.format);
    input.extra_system = Some(match input.extra_system.take() {
        Some(extra) if !extra.trim().is_empty() => format!("{extra}\n\n{note}"),
        _ => note,
    });
}

/// The format in words.
pub fn instruction(format: &OutputFormat) -> String {
    const BARE: &str = "and nothing else: no prose before or after it, no Markdown code fences";
    match format {
        OutputFormat::JsonObject => {
            format!("Required answer format: the answer must be one JSON object {BARE}.")
        }
        OutputFormat::JsonSchema {
            name,
            description,
            schema,
            ..
        } => {
            let about = description
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            format!(
                "Required answer format: the answer must be one JSON value valid against the JSON \
                 Schema `{name}`{about} below, {BARE}.\n<json_schema>\n{schema}\n</json_schema>"
            )
        }
    }
}

pub(super) fn corrective(problem: &str, reply: &str) -> String {
    let quoted: String = reply.chars().take(MAX_QUOTED_CHARS).collect();
    format!(
        "A previous final answer was rejected because it is not in the required format: \
         {problem}\nThe rejected answer was:\n<rejected>\n{quoted}\n</rejected>\nWrite the final \
         answer again, exactly in the required format."
    )
}

impl Presenter<'_> {
    /// The final answer as structured output: the stored answer under `winner_reuse` (and
    /// `skip_final_presentation`) (checked; a corrective presentation call if it fails the check), or a
    /// presentation call with the native format, checked, with one corrective call.
    pub(super) async fn present_structured(
        &mut self,
        output: &StructuredOutput,
        stored: String,
    ) -> Result<Presented, SessionError> {
        let mut rejected = None;
        let mut calls_left = 2;
        if self.reuse() {
            match output.check.check(&stored).await {
                Ok(()) => {
                    self.final_delta(stored.clone()).await?;
                    return Ok(Presented {
                        text: stored,
                        finish: FinishReason::Stop,
                        mode: PresentationMode::Skipped,
                        calls: Vec::new(),
                    });
                }
                Err(Rejection::Unchecked(reason)) => return Err(self.unchecked(&reason)),
                Err(Rejection::Mismatch(problem)) => {
                    self.rejected(&problem).await?;
                    if self.state.budget_spent().is_some() {
                        // A spent budget allows no further call.
                        return Err(self.invalid(&problem));
                    }
                    rejected = Some((problem, stored));
                    calls_left = 1;
                }
            }
        }
        // A provider may refuse its own native format (an older model): after a failed
        // call the corrective one asks in words only.
        let mut native = true;
        while calls_left > 0 {
            calls_left -= 1;
            let instruction = rejected.as_ref().map(|(p, r)| corrective(p, r));
            let request = ProviderRequest {
                output_format: native.then(|| output.format.clone()),
                ..ProviderRequest::default()
            };
            let (gathered, failure) = self
                .presentation_call(instruction.as_deref(), request, output.streamed, false)
                .await?;
            let finish = gathered.finish.unwrap_or(FinishReason::Stop);
            let problem = match failure {
                Some(failure) => {
                    native = false;
                    format!("the presentation call failed: {failure}")
                }
                // Cut by a token limit: returned as it is, unchecked (as OpenAI does, with
                // finish_reason "length").
                None if finish == FinishReason::Length => String::new(),
                None => match output.check.check(&gathered.text).await {
                    Ok(()) => String::new(),
                    Err(Rejection::Mismatch(problem)) => problem,
                    Err(Rejection::Unchecked(reason)) => return Err(self.unchecked(&reason)),
                },
            };
            if problem.is_empty() {
                if !output.streamed {
                    self.final_delta(gathered.text.clone()).await?;
                }
                return Ok(Presented {
                    text: gathered.text,
                    finish,
                    mode: PresentationMode::Presented,
                    calls: Vec::new(),
                });
            }
            self.rejected(&problem).await?;
            if output.streamed && !gathered.text.is_empty() {
                // The client already holds this text: nothing sent after it can fix it.
                return Err(self.invalid(&problem));
            }
            rejected = Some((problem, gathered.text));
        }
        let problem = rejected.map(|(p, _)| p).unwrap_or_default();
        Err(self.invalid(&problem))
    }

    async fn rejected(&mut self, problem: &str) -> Result<(), SessionError> {
        let agent = self.state.who(self.winner).clone();
        self.send(EventKind::PresentationFailed {
            agent,
            message: format!("the answer is not in the required format: {problem}"),
        })
        .await
    }

    fn unchecked(&self, reason: &str) -> SessionError {
        let message = format!(
            "the final answer could not be checked against the requested response format: \
             {reason}"
        );
        self.state.error(SessionErrorKind::InvalidOutput, message)
    }

    fn invalid(&self, problem: &str) -> SessionError {
        self.state.error(
            SessionErrorKind::InvalidOutput,
            format!("the final answer is not in the requested response format: {problem}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_instruction_carries_the_schema_and_the_correction_quotes_a_bounded_reply() {
        let format = OutputFormat::JsonSchema {
            name: "person".into(),
            description: Some("who".into()),
            schema: json!({"type": "object", "required": ["name"]}),
            strict: true,
        };
        let text = instruction(&format);
        assert!(text.contains("`person` (who)"), "{text}");
        assert!(
            text.contains(r#"{"required":["name"],"type":"object"}"#),
            "{text}"
        );
        assert!(instruction(&OutputFormat::JsonObject).contains("one JSON object"));
        let long = "x".repeat(MAX_QUOTED_CHARS * 2);
        let c = corrective("missing name", &long);
        assert!(c.contains("missing name"));
        assert!(c.len() < MAX_QUOTED_CHARS + 400);
        let mut input = SessionInput {
            extra_system: Some("Be brief.".into()),
            ..SessionInput::default()
        };
        tell_agents(&mut input);
        assert_eq!(input.extra_system.as_deref(), Some("Be brief."));
    }
}
