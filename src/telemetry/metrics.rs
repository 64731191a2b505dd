//! The Prometheus metrics of the process (`GET /metrics`). Names follow Prometheus
//! conventions: `massgen_` prefix, `_seconds` for durations, `_total` for counters.

use std::sync::LazyLock;
use std::time::Duration;

use massgen_core::provider::{ProviderErrorKind, Usage};
use prometheus::{
    CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, Opts, Registry, TextEncoder,
};

/// Buckets for whole sessions and upstream calls: 50 ms … 30 min.
const SLOW: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// Buckets for what the server itself adds: 100 µs … 5 s.
const FAST: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Buckets for counts per session (votes, restarts).
const COUNTS: &[f64] = &[0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0];

pub struct Metrics {
    registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_request_duration: HistogramVec,
    pub active_sessions: IntGauge,
    pub open_connections: IntGauge,
    pub session_duration: HistogramVec,
    pub time_to_first_byte: Histogram,
    pub server_overhead: Histogram,
    pub upstream_duration: HistogramVec,
    pub upstream_ttft: HistogramVec,
    pub upstream_errors: IntCounterVec,
    pub upstream_retries: IntCounterVec,
    pub input_tokens: IntCounterVec,
    pub output_tokens: IntCounterVec,
    pub total_tokens: IntCounterVec,
    pub cost_usd: CounterVec,
    pub agents_failed: IntCounterVec,
    pub calls_cancelled: IntCounterVec,
    pub votes_per_session: Histogram,
    pub restarts_per_session: Histogram,
    pub rejected: IntCounterVec,
    pub tool_calls: IntCounterVec,
    pub tool_call_duration: HistogramVec,
    pub response_cache: IntCounterVec,
    /// Sessions started, by door (`chat_completions`, `responses`, `messages`, `mcp`).
    pub sessions_started: IntCounterVec,
    /// Failed writes to the records database (each failed attempt of a batch or timer).
    pub records_write_failures: IntCounter,
    /// Finished records dropped from memory before the database took them.
    pub records_unsaved_dropped: IntCounter,
    /// 1 while the records database takes writes, 0 while they fail.
    pub records_store_up: IntGauge,
    /// PostgreSQL notifications of other replicas' commits received.
    pub records_notifications: IntCounter,
    /// The soft open-file limit `serve` budgets by (0: no budget).
    pub descriptor_limit: IntGauge,
    /// What running sessions may hold for their upstream calls.
    pub descriptor_session_budget: IntGauge,
    /// What running sessions hold now for their upstream calls.
    pub descriptors_reserved: IntGauge,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let histogram_vec = |name: &str,
                             help: &str,
                             labels: &[&str],
                             buckets: &[f64]|
         -> Result<HistogramVec, prometheus::Error> {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let histogram =
            |name: &str, help: &str, buckets: &[f64]| -> Result<Histogram, prometheus::Error> {
                let h =
                    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
                registry.register(Box::new(h.clone()))?;
                Ok(h)
            };
        let cost_usd = CounterVec::new(
            Opts::new(
                "massgen_cost_usd_total",
                "USD spent on upstream calls with a known price, by the agent's backend type and configured model.",
            ),
            &["agent_backend", "model"],
        )?;
        registry.register(Box::new(cost_usd.clone()))?;
        let active_sessions = IntGauge::new(
            "massgen_active_sessions",
            "Coordination sessions running now.",
        )?;
        registry.register(Box::new(active_sessions.clone()))?;
        let open_connections = IntGauge::new(
            "massgen_open_connections",
            "Client connections open now (HTTP/1 and HTTP/2).",
        )?;
        registry.register(Box::new(open_connections.clone()))?;
        let plain_counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let records_write_failures = plain_counter(
            "massgen_records_write_failures_total",
            "Failed writes to the session records database (retried).",
        )?;
        let records_unsaved_dropped = plain_counter(
            "massgen_records_unsaved_dropped_total",
            "Finished session records dropped from memory before the records database took them.",
        )?;
        let records_store_up = IntGauge::new(
            "massgen_records_store_up",
            "1 while the session records store takes writes (always with memory), 0 while they fail.",
        )?;
        records_store_up.set(1);
        let records_notifications = plain_counter(
            "massgen_records_notifications_total",
            "PostgreSQL notifications received that a session changed in the records database (they wake readers following it here).",
        )?;
        registry.register(Box::new(records_store_up.clone()))?;
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let descriptor_limit = gauge(
            "massgen_descriptor_limit",
            "The soft open-file limit (RLIMIT_NOFILE) after start-up raised it to the hard one; 0 without a descriptor budget.",
        )?;
        let descriptor_session_budget = gauge(
            "massgen_descriptor_session_budget",
            "Descriptors running sessions may hold for their upstream calls: the open-file limit less the reserve and --max-connections.",
        )?;
        let descriptors_reserved = gauge(
            "massgen_descriptors_reserved",
            "Descriptors running sessions hold now for their upstream calls (one per agent on an HTTP/1.1 upstream).",
        )?;
        Ok(Self {
            descriptor_limit,
            descriptor_session_budget,
            descriptors_reserved,
            records_write_failures,
            records_unsaved_dropped,
            records_store_up,
            records_notifications,
            sessions_started: counter(
                "massgen_sessions_started_total",
                "Sessions started, by the door (client API) that started them.",
                &["door"],
            )?,
            http_requests: counter(
                "massgen_http_requests_total",
                "HTTP requests by route, method and status.",
                &["route", "method", "status"],
            )?,
            http_request_duration: histogram_vec(
                "massgen_http_request_duration_seconds",
                "Time to the response headers, by route.",
                &["route", "method"],
                SLOW,
            )?,
            active_sessions,
            open_connections,
            session_duration: histogram_vec(
                "massgen_session_duration_seconds",
                "Wall time of a session, by outcome.",
                &["outcome"],
                SLOW,
            )?,
            time_to_first_byte: histogram(
                "massgen_time_to_first_byte_seconds",
                "From request arrival to the first SSE byte of a streamed response.",
                FAST,
            )?,
            server_overhead: histogram(
                "massgen_server_overhead_seconds",
                "Session wall time minus the time at least one upstream call of the session was in flight.",
                FAST,
            )?,
            upstream_duration: histogram_vec(
                "massgen_upstream_call_duration_seconds",
                "Upstream call latency (start to end of stream), by provider, model and outcome.",
                &["provider", "model", "outcome"],
                SLOW,
            )?,
            upstream_ttft: histogram_vec(
                "massgen_upstream_time_to_first_token_seconds",
                "Upstream time to the first streamed token, by provider and model.",
                &["provider", "model"],
                SLOW,
            )?,
            upstream_errors: counter(
                "massgen_upstream_errors_total",
                "Failed upstream calls, by provider and error kind.",
                &["provider", "kind"],
            )?,
            response_cache: counter(
                "massgen_response_cache_total",
                "Response cache lookups and stores (--cache-ttl-seconds): hit, miss, stored.",
                &["result"],
            )?,
            upstream_retries: counter(
                "massgen_upstream_retries_total",
                "Upstream attempts retried, by provider and reason.",
                &["provider", "reason"],
            )?,
            input_tokens: counter(
                "massgen_upstream_input_tokens_total",
                "Input tokens reported by upstreams, by provider and model.",
                &["provider", "model"],
            )?,
            output_tokens: counter(
                "massgen_upstream_output_tokens_total",
                "Output tokens reported by upstreams, by provider and model.",
                &["provider", "model"],
            )?,
            total_tokens: counter(
                "massgen_upstream_tokens_total",
                "Total tokens reported by upstreams, by provider and model.",
                &["provider", "model"],
            )?,
            cost_usd,
            agents_failed: counter(
                "massgen_agents_failed_total",
                "Agents that dropped out of a session, by reason.",
                &["kind"],
            )?,
            calls_cancelled: counter(
                "massgen_upstream_calls_cancelled_total",
                "Upstream calls the engine cancelled, by reason (restart: a newer answer made the turn stale; quorum, budget, timeout: the deliberation ended).",
                &["reason"],
            )?,
            votes_per_session: histogram(
                "massgen_session_votes",
                "Counted votes per finished session.",
                COUNTS,
            )?,
            restarts_per_session: histogram(
                "massgen_session_restarts",
                "Agent restarts (turns after an agent's first) per finished session.",
                COUNTS,
            )?,
            rejected: counter(
                "massgen_rejected_requests_total",
                "Requests refused by access control or limits, by reason.",
                &["reason"],
            )?,
            tool_calls: counter(
                "massgen_tool_calls_total",
                "MCP tool calls made by agents, by tool and outcome (ok, error).",
                &["tool", "outcome"],
            )?,
            tool_call_duration: histogram_vec(
                "massgen_tool_call_duration_seconds",
                "MCP tool call duration, by tool.",
                &["tool"],
                SLOW,
            )?,
            registry,
        })
    }

    /// The text exposition format.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }

    pub fn record_usage(&self, provider: &str, model: &str, usage: &Usage) {
        let labels = [provider, model];
        self.input_tokens
            .with_label_values(&labels)
            .inc_by(usage.input_tokens);
        self.output_tokens
            .with_label_values(&labels)
            .inc_by(usage.output_tokens);
        self.total_tokens
            .with_label_values(&labels)
            .inc_by(usage.total_tokens);
    }
}

static METRICS: LazyLock<Option<Metrics>> = LazyLock::new(|| match Metrics::new() {
    Ok(m) => Some(m),
    Err(e) => {
        tracing::error!("metrics disabled: cannot register them: {e}");
        None
    }
});

/// The process-wide metrics; `None` only if registration failed (a bug a unit test guards).
pub fn metrics() -> Option<&'static Metrics> {
    METRICS.as_ref()
}

/// Called by providers at their retry site (one attempt failed and another follows).
pub fn record_retry(provider: &str, reason: ProviderErrorKind) {
    if let Some(m) = metrics() {
        m.upstream_retries
            .with_label_values(&[provider, error_kind(reason)])
            .inc();
    }
}

pub fn error_kind(kind: ProviderErrorKind) -> &'static str {
    match kind {
        ProviderErrorKind::RateLimited => "rate_limited",
        ProviderErrorKind::Authentication => "authentication",
        ProviderErrorKind::InvalidRequest => "invalid_request",
        ProviderErrorKind::ContextLength => "context_length",
        ProviderErrorKind::Server => "server",
        ProviderErrorKind::Connection => "connection",
        ProviderErrorKind::Timeout => "timeout",
        ProviderErrorKind::InvalidResponse => "invalid_response",
        ProviderErrorKind::Stream => "stream",
    }
}

pub fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        let m = Metrics::new().unwrap();
        m.record_usage(
            "openai",
            "gpt",
            &Usage {
                input_tokens: 3,
                output_tokens: 4,
                total_tokens: 7,
                ..Usage::default()
            },
        );
        m.server_overhead.observe(0.001);
        let text = m.render().unwrap();
        assert!(
            text.contains("massgen_upstream_tokens_total{model=\"gpt\",provider=\"openai\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("massgen_server_overhead_seconds_count 1"),
            "{text}"
        );
    }
}
