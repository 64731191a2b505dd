//! A [`Provider`] wrapper that measures every upstream call (latency, time to first token,
//! errors, tokens, cost), opens its trace span with GenAI attributes, keeps the session's
//! in-flight time, and enforces the session's upstream call budget. The engine cannot
//! know the budget, so a spent budget surfaces as a fast [`ProviderError`] on the call.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use massgen_core::provider::{
    ChunkStream, FinishReason, Price, Provider, ProviderChunk, ProviderError, ProviderErrorKind,
    ProviderRequest, Usage,
};
use tracing::Span;
use tracing::field::Empty;

use super::metrics::{error_kind, metrics};
use super::tracker::{InFlight, SessionTracker};

#[derive(Debug)]
pub struct InstrumentedProvider {
    inner: Arc<dyn Provider>,
    agent_id: String,
    tracker: Arc<SessionTracker>,
    meter: CallMeter,
}

/// How one agent's calls count in the metrics: the label values, taken from the server's
/// config only (a model a request chose is not a label value: it would make the label set
/// unbounded), and the price for `massgen_cost_usd_total`.
#[derive(Debug, Clone)]
pub struct CallMeter {
    price: Option<Price>,
    backend: String,
    model: String,
}

impl CallMeter {
    /// `model_from_request`: the request replaced the configured model
    /// (`massgen/model:<model>`), so the label says so instead of naming it.
    pub fn new(
        backend_type: &str,
        model: &str,
        price: Option<Price>,
        model_from_request: bool,
    ) -> Self {
        Self {
            price,
            backend: backend_type.to_string(),
            model: if model_from_request {
                "(set by request)".to_string()
            } else {
                model.to_string()
            },
        }
    }
}

/// Wraps `inner` for one agent of the session that `tracker` follows.
pub fn instrument(
    inner: Arc<dyn Provider>,
    agent_id: &str,
    tracker: &Arc<SessionTracker>,
    meter: CallMeter,
) -> Arc<dyn Provider> {
    Arc::new(InstrumentedProvider {
        inner,
        agent_id: agent_id.to_string(),
        tracker: tracker.clone(),
        meter,
    })
}

impl Provider for InstrumentedProvider {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        let provider = self.inner.provider_name().to_string();
        let model = self.inner.model().to_string();
        if !self.tracker.take_call() {
            let budget = self.tracker.budget().unwrap_or_default();
            if let Some(m) = metrics() {
                m.rejected
                    .with_label_values(&["upstream_call_budget"])
                    .inc();
            }
            tracing::warn!(session_id = %self.tracker.session_id, agent = %self.agent_id, budget, "upstream call budget spent");
            let error = ProviderError::new(
                ProviderErrorKind::InvalidRequest,
                provider,
                format!(
                    "upstream call budget spent: a session may make at most {budget} upstream calls (--max-upstream-calls)"
                ),
            );
            return Box::pin(futures::stream::once(async move { Err(error) }));
        }
        let span = tracing::info_span!(
            "chat",
            "otel.name" = %format_args!("chat {model}"),
            "otel.kind" = "client",
            "otel.status_code" = Empty,
            "gen_ai.operation.name" = "chat",
            "gen_ai.provider.name" = %provider,
            "gen_ai.request.model" = %model,
            "gen_ai.usage.input_tokens" = Empty,
            "gen_ai.usage.output_tokens" = Empty,
            "gen_ai.response.finish_reasons" = Empty,
            "error.type" = Empty,
            "massgen.session_id" = %self.tracker.session_id,
            "massgen.agent_id" = %self.agent_id,
        );
        // Created in the caller's span context, so the upstream call's own logs (retries) nest in it.
        let inner = InSpan {
            inner: span.in_scope(|| self.inner.stream(request)),
            span: span.clone(),
        };
        let tracker = self.tracker.clone();
        let meter = self.meter.clone();
        Box::pin(async_stream::stream! {
            // Runs on first poll: the call starts when the engine first polls it.
            let mut call = Call {
                provider,
                meter,
                started: Instant::now(),
                first_token: None,
                ended: None,
                usage: None,
                finish: None,
                error: None,
                busy: tracker.enter(),
                span,
            };
            let mut inner = inner;
            while let Some(item) = inner.next().await {
                call.observe(&item);
                yield item;
            }
            call.end();
        })
    }
}

/// Polls the inner stream inside the call's span.
struct InSpan {
    inner: ChunkStream,
    span: Span,
}

impl Stream for InSpan {
    type Item = Result<ProviderChunk, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        this.inner.as_mut().poll_next(cx)
    }
}

/// One upstream call's measurements, recorded once when it ends or is dropped.
struct Call {
    provider: String,
    meter: CallMeter,
    started: Instant,
    first_token: Option<Duration>,
    ended: Option<Duration>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    error: Option<ProviderErrorKind>,
    busy: InFlight,
    span: Span,
}

impl Call {
    fn observe(&mut self, item: &Result<ProviderChunk, ProviderError>) {
        match item {
            Ok(
                ProviderChunk::Text(_)
                | ProviderChunk::Reasoning(_)
                | ProviderChunk::ToolCallStarted { .. }
                | ProviderChunk::ToolCall(_),
            ) => {
                if self.first_token.is_none() {
                    self.first_token = Some(self.started.elapsed());
                }
            }
            Ok(ProviderChunk::Usage(u)) => self.usage = Some(*u),
            Ok(ProviderChunk::Finish(r)) => {
                self.finish = Some(*r);
                self.end();
            }
            Err(e) => {
                self.error = Some(e.kind);
                self.end();
            }
        }
    }

    /// The upstream is done (the engine may still hold the stream a little longer).
    fn end(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(self.started.elapsed());
        }
        self.busy.end();
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.busy.end();
        let outcome = match (self.error, self.ended) {
            (Some(_), _) => "error",
            (None, Some(_)) => "ok",
            (None, None) => "cancelled",
        };
        let elapsed = self.ended.unwrap_or_else(|| self.started.elapsed());
        if let Some(m) = metrics() {
            let labels = [self.provider.as_str(), self.meter.model.as_str()];
            m.upstream_duration
                .with_label_values(&[&self.provider, &self.meter.model, outcome])
                .observe(elapsed.as_secs_f64());
            if let Some(ttft) = self.first_token {
                m.upstream_ttft
                    .with_label_values(&labels)
                    .observe(ttft.as_secs_f64());
            }
            if let Some(kind) = self.error {
                m.upstream_errors
                    .with_label_values(&[&self.provider, error_kind(kind)])
                    .inc();
            }
            if let Some(usage) = &self.usage {
                m.record_usage(&self.provider, &self.meter.model, usage);
                // Usage reported before a cancel counts too: the upstream bills it.
                if let Some(price) = self.meter.price {
                    m.cost_usd
                        .with_label_values(&[&self.meter.backend, &self.meter.model])
                        .inc_by(price.cost(usage));
                }
            }
        }
        if let Some(usage) = &self.usage {
            // OpenTelemetry integers are i64 (a u64 would be exported as a string).
            let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.span
                .record("gen_ai.usage.input_tokens", int(usage.input_tokens));
            self.span
                .record("gen_ai.usage.output_tokens", int(usage.output_tokens));
        }
        if let Some(reason) = self.finish {
            self.span
                .record("gen_ai.response.finish_reasons", finish_name(reason));
        }
        if let Some(kind) = self.error {
            self.span.record("error.type", error_kind(kind));
            self.span.record("otel.status_code", "ERROR");
        } else if outcome == "cancelled" {
            self.span.record("error.type", "cancelled");
        }
    }
}

fn finish_name(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}
