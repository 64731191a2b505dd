//! A model (or deployment) name that becomes part of an upstream URL (Gemini's
//! `models/{model}:…`, Azure's `deployments/{name}/…`) must stay exactly one path segment:
//! a name is the caller's or the operator's choice of model, never of endpoint. The one
//! rule, used by the config check (start-up) and the request path (a 400) through
//! [`crate::presets::check_model`], and by the wire formats themselves (which encode what
//! the rule lets through). It knows no wire format, so the formats can use it.

/// Why `name` cannot be one path segment, if it cannot. Refused rather than encoded: what
/// could only mean "another path" (`/`, `..`, a lone `.`), a query or fragment (`?`, `#`),
/// an encoding of those (`%`), or nothing a model is named with (control characters,
/// whitespace, the empty name). Everything else is percent-encoded by [`path_segment`].
pub fn check_path_segment(name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        Some("is empty".to_string())
    } else if name == "." {
        Some("is '.'".to_string())
    } else if name.contains("..") {
        Some("holds '..'".to_string())
    } else if let Some(c) = name.chars().find(|c| matches!(c, '/' | '?' | '#' | '%')) {
        Some(format!("holds '{c}'"))
    } else if name.chars().any(char::is_control) {
        Some("holds a control character".to_string())
    } else if name.chars().any(char::is_whitespace) {
        Some("holds whitespace".to_string())
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(format!(
            "the model name {} {problem}: it goes into the upstream URL as one path segment, \
             so it cannot hold '/', '?', '#', '%', '..', whitespace or control characters",
            quoted(name)
        )),
    }
}

/// Gemini's name without the `models/` its own clients accept in front.
pub(crate) fn gemini_model(model: &str) -> &str {
    model.strip_prefix("models/").unwrap_or(model)
}

/// `name` as one path segment: checked by [`check_path_segment`], then every byte that is
/// not unreserved (RFC 3986: letters, digits, `-._~`) percent-encoded.
pub(crate) fn path_segment(name: &str) -> Result<String, String> {
    check_path_segment(name)?;
    Ok(percent_encode(name))
}

/// Every byte of `text` that is not unreserved, percent-encoded: a query value that cannot
/// start another parameter or a fragment.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The name in an error message: quoted, control characters escaped, cut when long.
fn quoted(name: &str) -> String {
    const MAX_CHARS: usize = 120;
    let shown: String = name.chars().take(MAX_CHARS).collect();
    let cut = if name.chars().count() > MAX_CHARS {
        "…"
    } else {
        ""
    };
    format!("'{}{cut}'", shown.escape_debug())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_leave_their_segment_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            "../../../v1beta/cachedContents?x=1#",
            "../../../openai/batches?api-version=2024-10-21#",
            "a%2F..%2Fb",
            "a/b",
            "a?b",
            "a#b",
            "a%41",
            "a b",
            "a\tb",
            "a\nb",
            "a\u{0}b",
            "a\u{7f}b",
            "a\u{85}b",
            "a\u{3000}b",
        ] {
            let why = check_path_segment(bad).expect_err(bad);
            assert!(why.contains("one path segment"), "{why}");
            assert!(!why.contains('\n') && !why.contains('\0'), "{why:?}");
        }
    }

    #[test]
    fn other_names_are_encoded_as_one_segment() {
        let cases = [
            ("gemini-2.0-flash", "gemini-2.0-flash"),
            ("my_deploy.v1~x", "my_deploy.v1~x"),
            ("tuned:v1@ä", "tuned%3Av1%40%C3%A4"),
            ("a\\b", "a%5Cb"),
            ("a;b=c&d+e", "a%3Bb%3Dc%26d%2Be"),
            (".hidden", ".hidden"),
        ];
        for (name, segment) in cases {
            assert_eq!(path_segment(name).as_deref(), Ok(segment), "{name}");
        }
    }
}
