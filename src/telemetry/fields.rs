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
        let mut visitor = Kept::new(writer, true);
        fields.record(&mut visitor);
        visitor.result
    }

    /// A value recorded later (a status code, token counts): padded only when something
    /// is written, so a skipped one leaves no stray space.
    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let empty = current.fields.is_empty();
        let mut visitor = Kept::new(current.as_writer(), empty);
        fields.record(&mut visitor);
        visitor.result
    }
}

/// The default visitor's output for the fields the log keeps. Without colours a plain
/// `name=value` is written here: the default visitor paints the name and the `=` even
/// then, two styles formatted around every value (half the cost of a span's fields). The
/// message, an error and a raw identifier, and every field when colours are on, still go
/// through the default visitor, which escapes and paints them.
struct Kept<'a> {
    writer: Writer<'a>,
    /// Nothing written yet: the next field needs no space before it.
    is_empty: bool,
    result: fmt::Result,
}

impl<'a> Kept<'a> {
    fn new(writer: Writer<'a>, is_empty: bool) -> Self {
        Self {
            writer,
            is_empty,
            result: Ok(()),
        }
    }

    /// `record` through the default visitor, which writes the field (with the space
    /// before it).
    fn delegate(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        self.is_empty = false;
    }

    /// Whether `name` is written at all: not after an error, not a field for the trace
    /// export, and not a `log` crate record's metadata (the default visitor skips those
    /// too; the line shows them already).
    fn writes(&self, name: &str) -> bool {
        self.result.is_ok() && !for_traces_only(name) && !name.starts_with("log.")
    }
}

impl Visit for Kept<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if !self.writes(name) {
            return;
        }
        if self.writer.has_ansi_escapes() || name == "message" || name.starts_with("r#") {
            return self.delegate(|v| v.record_debug(field, value));
        }
        let pad = if std::mem::take(&mut self.is_empty) {
            ""
        } else {
            " "
        };
        self.result = write!(self.writer, "{pad}{name}={value:?}");
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            if self.writes("message") {
                self.delegate(|v| v.record_str(field, value));
            }
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.writes(field.name()) {
            self.delegate(|v| v.record_error(field, value));
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

    /// A subscriber writing lines without times into the returned buffer.
    fn subscriber<F>(fields: F, ansi: bool) -> (Lines, impl tracing::Subscriber + Send + Sync)
    where
        F: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(ansi)
            .without_time()
            .fmt_fields(fields)
            .finish();
        (lines, subscriber)
    }

    /// The lines a subscriber formatting fields with `fields` writes for the same spans
    /// and events, none of them named for the trace export.
    fn lines_with<F>(fields: F, ansi: bool) -> String
    where
        F: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let (lines, subscriber) = subscriber(fields, ansi);
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("above")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        #[derive(Debug)]
        struct Shape {
            #[allow(dead_code)]
            sides: u8,
        }
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "request",
                request_id = "r\"1",
                r#type = "chat",
                agents = 3_u64,
                late = Empty,
            );
            span.record("late", -7_i64);
            let _in = span.enter();
            let inner = tracing::info_span!(
                "call",
                agent = %"sim1",
                shape = ?Shape { sides: 4 },
                later = Empty
            );
            inner.record("later", true);
            let _inner = inner.enter();
            let error = Outer(std::io::Error::other("below"));
            tracing::info!(
                ratio = 0.5_f64,
                flag = false,
                "a message with \x1b[31m inside"
            );
            tracing::warn!(
                error = &error as &(dyn std::error::Error + 'static),
                quoted = "say \"hi\"\n",
                "went wrong: {}",
                42
            );
            tracing::info!(only = 1_u64);
        });
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_line_reads_as_the_default_formatting_with_and_without_colours() {
        for ansi in [false, true] {
            let ours = lines_with(LogFields, ansi);
            let default = lines_with(tracing_subscriber::fmt::format::DefaultFields::new(), ansi);
            assert_eq!(ours, default, "ansi: {ansi}");
            assert_eq!(ours.lines().count(), 3, "{ours}");
        }
        let plain = lines_with(LogFields, false);
        assert!(
            plain.contains(
                "request{request_id=\"r\\\"1\" type=\"chat\" agents=3 late=-7}:call{agent=sim1 \
                 shape=Shape { sides: 4 } later=true}"
            ),
            "{plain}"
        );
        assert!(
            plain.contains("error=above error.sources=[below]"),
            "{plain}"
        );
        assert!(!plain.contains('\x1b'), "{plain}");
    }

    #[test]
    fn a_line_keeps_its_own_fields_and_leaves_the_exporters_out() {
        let (lines, subscriber) = subscriber(LogFields, false);
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
