//! The fields of a human-readable log line: tracing-subscriber's default formatting, less
//! the fields that exist for the trace export. A span's fields are formatted when the span
//! is made, whether or not a line is ever logged in it: a streamed request's three spans
//! formatted 41 values, half of them names and kinds for an OpenTelemetry backend or
//! repeats of a field beside them (`http.request.method` after `method`).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// The log's [`FormatFields`]: every field but those [`for_traces_only`] names.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogFields;

/// Fields only the trace export reads: the exporter's own (`otel.*`) and those a line
/// already shows under another name (the method, the session id) or in the span's name.
fn for_traces_only(name: &str) -> bool {
    name.starts_with("otel.")
        || matches!(
            name,
            "http.request.method"
                | "http.route"
                | "gen_ai.operation.name"
                | "gen_ai.agent.name"
                | "massgen.session_id"
        )
}

impl<'writer> FormatFields<'writer> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Kept(DefaultVisitor::new(writer, true));
        fields.record(&mut visitor);
        visitor.0.finish()
    }

    /// A value recorded later (a status code, token counts): padded only when something
    /// is written, so a skipped one leaves no stray space.
    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let empty = current.fields.is_empty();
        let mut visitor = Kept(DefaultVisitor::new(current.as_writer(), empty));
        fields.record(&mut visitor);
        visitor.0.finish()
    }
}

/// The default visitor, told only of the fields the log keeps.
struct Kept<'a>(DefaultVisitor<'a>);

impl Visit for Kept<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !for_traces_only(field.name()) {
            self.0.record_debug(field, value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !for_traces_only(field.name()) {
            self.0.record_str(field, value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if !for_traces_only(field.name()) {
            self.0.record_error(field, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing::field::Empty;
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    #[test]
    fn a_line_keeps_its_own_fields_and_leaves_the_exporters_out() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(LogFields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "request",
                request_id = "r1",
                method = "POST",
                "otel.name" = "POST /v1/chat/completions",
                "http.request.method" = "POST",
                "http.route" = "/v1/chat/completions",
                "http.response.status_code" = Empty,
                "otel.status_code" = Empty,
            );
            span.record("otel.status_code", "OK");
            span.record("http.response.status_code", 200);
            let _in = span.enter();
            let error = std::io::Error::other("refused");
            tracing::info!(
                session_id = "s1",
                "massgen.session_id" = "s1",
                error = &error as &(dyn std::error::Error + 'static),
                "session completed"
            );
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text.trim(),
            "INFO request{request_id=\"r1\" method=\"POST\" http.response.status_code=200}: \
             massgen::telemetry::fields::tests: session completed session_id=\"s1\" \
             error=refused",
        );
    }
}
