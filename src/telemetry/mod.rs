//! Observability: Prometheus metrics ([`metrics`]), logs and OpenTelemetry traces
//! ([`init`]), and the instrumented provider wrapper that measures upstream calls
//! ([`provider`]) with the per-session [`tracker`].

mod fields;
pub mod metrics;
pub mod provider;
pub mod tracker;

pub use metrics::{metrics, record_retry};
pub use provider::{CallMeter, instrument};
pub use tracker::SessionTracker;

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes it.
#[must_use]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes pending spans. Blocking (the OTLP exporter uses a blocking HTTP client):
    /// call it outside the async runtime, or from `spawn_blocking`.
    pub fn shutdown(self) {
        if let Some(provider) = self.traces
            && let Err(e) = provider.shutdown()
        {
            eprintln!("massgen: flushing traces failed: {e}");
        }
    }
}

/// Logs to stderr (human-readable, or JSON with `MASSGEN_LOG_FORMAT=json`) filtered by
/// `RUST_LOG`, else by `default_filter` (the command's); and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `_TRACES_ENDPOINT`) is set, spans exported over
/// OTLP/HTTP (protobuf) with W3C trace-context propagation. The trace export has its own
/// filter (massgen's spans at info), so `RUST_LOG=warn` quiets logs without losing traces.
pub fn init(default_filter: &str, env: &crate::config::Env) -> Telemetry {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_filter))
        .and(tracing_subscriber::filter::filter_fn(not_a_client_gone));
    let json = env("MASSGEN_LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
    let ansi = std::io::stderr().is_terminal() && env("NO_COLOR").is_none();
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .fmt_fields(fields::LogFields)
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_filter(filter)
            .boxed()
    };
    let endpoint = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .into_iter()
    .find_map(|name| env(name).filter(|v| !v.trim().is_empty()));
    let (otel, traces) = match endpoint.map(|_| tracer_provider(env)) {
        Some(Ok(provider)) => {
            let tracer = provider.tracer("massgen");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(Targets::new().with_target("massgen", LevelFilter::INFO))
                .boxed();
            (Some(layer), Some(provider))
        }
        Some(Err(e)) => {
            eprintln!("massgen: traces disabled: cannot build the OTLP exporter: {e}");
            (None, None)
        }
        None => (None, None),
    };
    if traces.is_some() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
    }
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    Telemetry { traces }
}

/// rmcp (pinned, =3.9.0) logs an ERROR ("fail to response message", "failed to send
/// pending response during drain") whenever an MCP call's answer finds its transport
/// closed: over stateless HTTP, the client closed the call's POST (gave up or cancelled),
/// an ordinary event the MCP door logs at debug. Those two call sites are dropped; every
/// other rmcp line passes.
fn not_a_client_gone(meta: &tracing::Metadata<'_>) -> bool {
    !(meta.target() == "rmcp::service"
        && *meta.level() == tracing::Level::ERROR
        && meta.file().is_some_and(|f| f.ends_with("service.rs"))
        && matches!(meta.line(), Some(1518 | 1806)))
}

fn tracer_provider(env: &crate::config::Env) -> Result<SdkTracerProvider, String> {
    // The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (and _TRACES_ENDPOINT, _HEADERS) itself.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| e.to_string())?;
    let service = env("OTEL_SERVICE_NAME")
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "massgen".to_string());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The W3C trace context a client sent (`traceparent`), to parent the request span.
pub fn remote_context(headers: &http::HeaderMap) -> opentelemetry::Context {
    struct Headers<'a>(&'a http::HeaderMap);
    impl opentelemetry::propagation::Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(http::HeaderName::as_str).collect()
        }
    }
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)))
}
