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
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::{self, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

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
    let json = env("MASSGEN_LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
    let ansi = std::io::stderr().is_terminal() && env("NO_COLOR").is_none();
    let filter = LogFilter::new(env("RUST_LOG").as_deref(), default_filter);
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
    let registry = tracing_subscriber::registry();
    let _ = match otel {
        // The log's filter filters everything, so it is a global one: a per-layer filter
        // looks the span up in the registry on every enter and exit to know whether its
        // layer sees it, about 60 times a streamed request.
        None => registry.with(filter).with(fmt_layer(json, ansi)).try_init(),
        // The trace export keeps its own filter (`RUST_LOG=warn` does not quiet it).
        Some(otel) => registry
            .with(fmt_layer(json, ansi).with_filter(filter))
            .with(otel)
            .try_init(),
    };
    Telemetry { traces }
}

/// The log's filter: `RUST_LOG` when it parses, else the command's default.
#[allow(clippy::large_enum_variant)] // one for the process
enum LogFilter {
    /// Targets and levels only, the usual kind (`info,rmcp=warn`).
    Targets(Targets),
    /// Anything else `EnvFilter` reads (span and field directives: `massgen[session]=debug`).
    /// It looks each span up in a locked map on every enter and exit to know whether a
    /// directive names it, about 60 times a streamed request (each body frame, each
    /// upstream event), so it is used only where such a directive needs it.
    Env(EnvFilter),
}

impl LogFilter {
    /// `RUST_LOG` when set and valid (as `EnvFilter::try_from_default_env` took it), else
    /// the default.
    fn new(rust_log: Option<&str>, default: &str) -> Self {
        rust_log
            .and_then(Self::parse)
            .or_else(|| Self::parse(default))
            .unwrap_or_else(|| Self::Env(EnvFilter::new(default)))
    }

    fn parse(directives: &str) -> Option<Self> {
        let parts: Vec<&str> = directives
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .collect();
        // `EnvFilter` reads `[` as span or field directives, and an empty filter its own way.
        if !directives.contains('[')
            && !parts.is_empty()
            && let Ok(targets) = parts.join(",").parse::<Targets>()
        {
            return Some(Self::Targets(targets));
        }
        EnvFilter::try_new(directives).ok().map(Self::Env)
    }
}

fn fmt_layer<S>(json: bool, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .fmt_fields(fields::LogFields)
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed()
    }
}

/// As the subscriber's own filter (no trace export).
impl<S: Subscriber> Layer<S> for LogFilter {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if !not_a_client_gone(meta) {
            return Interest::never();
        }
        match self {
            Self::Targets(t) => Layer::<S>::register_callsite(t, meta),
            Self::Env(e) => Layer::<S>::register_callsite(e, meta),
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, cx: layer::Context<'_, S>) -> bool {
        not_a_client_gone(meta)
            && match self {
                Self::Targets(t) => Layer::enabled(t, meta, cx),
                Self::Env(e) => Layer::enabled(e, meta, cx),
            }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        match self {
            Self::Targets(t) => Layer::<S>::max_level_hint(t),
            Self::Env(e) => Layer::<S>::max_level_hint(e),
        }
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            Layer::on_new_span(e, attrs, id, cx);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            Layer::on_record(e, id, values, cx);
        }
    }

    fn on_enter(&self, id: &span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            Layer::on_enter(e, id, cx);
        }
    }

    fn on_exit(&self, id: &span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            Layer::on_exit(e, id, cx);
        }
    }

    fn on_close(&self, id: span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            Layer::on_close(e, id, cx);
        }
    }
}

/// As the log layer's own filter (beside the trace export).
impl<S: Subscriber + for<'a> LookupSpan<'a>> layer::Filter<S> for LogFilter {
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if !not_a_client_gone(meta) {
            return Interest::never();
        }
        match self {
            Self::Targets(t) => layer::Filter::<S>::callsite_enabled(t, meta),
            Self::Env(e) => layer::Filter::<S>::callsite_enabled(e, meta),
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, cx: &layer::Context<'_, S>) -> bool {
        not_a_client_gone(meta)
            && match self {
                Self::Targets(t) => layer::Filter::enabled(t, meta, cx),
                Self::Env(e) => layer::Filter::enabled(e, meta, cx),
            }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        match self {
            Self::Targets(t) => layer::Filter::<S>::max_level_hint(t),
            Self::Env(e) => layer::Filter::<S>::max_level_hint(e),
        }
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            layer::Filter::on_new_span(e, attrs, id, cx);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            layer::Filter::on_record(e, id, values, cx);
        }
    }

    fn on_enter(&self, id: &span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            layer::Filter::on_enter(e, id, cx);
        }
    }

    fn on_exit(&self, id: &span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            layer::Filter::on_exit(e, id, cx);
        }
    }

    fn on_close(&self, id: span::Id, cx: layer::Context<'_, S>) {
        if let Self::Env(e) = self {
            layer::Filter::on_close(e, id, cx);
        }
    }
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

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    fn targets(filter: LogFilter) -> Targets {
        match filter {
            LogFilter::Targets(targets) => targets,
            LogFilter::Env(env) => panic!("an EnvFilter: {env}"),
        }
    }

    #[test]
    fn targets_and_levels_need_no_span_lookups() {
        let default = targets(LogFilter::new(None, "info,rmcp=warn"));
        assert!(default.would_enable("massgen::server", &Level::INFO));
        assert!(!default.would_enable("massgen::server", &Level::DEBUG));
        assert!(default.would_enable("rmcp::service", &Level::WARN));
        assert!(!default.would_enable("rmcp::service", &Level::INFO));

        let chosen = targets(LogFilter::new(Some(" warn, massgen=debug ,"), "info"));
        assert!(chosen.would_enable("massgen::app", &Level::DEBUG));
        assert!(!chosen.would_enable("hyper", &Level::INFO));
        assert!(chosen.would_enable("hyper", &Level::WARN));
    }

    #[test]
    fn span_directives_keep_the_env_filter_and_a_bad_filter_gives_the_default() {
        match LogFilter::new(Some("warn,massgen[session]=debug"), "info") {
            LogFilter::Env(env) => assert_eq!(env.to_string(), "warn,massgen[session]=debug"),
            LogFilter::Targets(t) => panic!("span directives read as targets: {t:?}"),
        }
        let fallback = targets(LogFilter::new(Some("massgen=loud=1"), "info,rmcp=warn"));
        assert!(fallback.would_enable("massgen", &Level::INFO));
        assert!(!fallback.would_enable("rmcp", &Level::INFO));
    }

    /// Both ways the filter is used: the subscriber's own, and the log layer's beside a
    /// second layer (the trace export), which sees what the log leaves out.
    #[test]
    fn the_filter_filters_as_the_subscribers_and_as_the_log_layers() {
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        fn log<S>(lines: &Lines) -> impl Layer<S> + use<S>
        where
            S: Subscriber + for<'a> LookupSpan<'a>,
        {
            let lines = lines.clone();
            tracing_subscriber::fmt::layer()
                .with_writer(move || lines.clone())
                .with_ansi(false)
                .without_time()
        }
        let emit = || {
            let span = tracing::info_span!("session", session_id = "s1");
            let _in = span.enter();
            tracing::info!(target: "massgen::app", "kept");
            tracing::debug!(target: "massgen::app", "too detailed");
            tracing::info!(target: "rmcp::service", "quieted");
            tracing::warn!(target: "rmcp::service", "warned");
        };
        let text = |lines: &Lines| String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let expected = " INFO session{session_id=\"s1\"}: massgen::app: kept\n \
                        WARN session{session_id=\"s1\"}: rmcp::service: warned\n";

        let global = Lines::default();
        let subscriber = tracing_subscriber::registry()
            .with(LogFilter::new(None, "info,rmcp=warn"))
            .with(log(&global));
        tracing::subscriber::with_default(subscriber, emit);
        assert_eq!(text(&global), expected);

        let (layered, other) = (Lines::default(), Lines::default());
        let subscriber = tracing_subscriber::registry()
            .with(log(&layered).with_filter(LogFilter::new(None, "info,rmcp=warn")))
            .with(log(&other));
        tracing::subscriber::with_default(subscriber, emit);
        assert_eq!(text(&layered), expected);
        assert!(text(&other).contains("too detailed"), "{}", text(&other));
    }
}
