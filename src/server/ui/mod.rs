//! The live coordination view: one HTML page, its script and stylesheet, built into the
//! binary. The page itself needs no key (a browser cannot send one when navigating); it
//! asks for one when the API answers 401 and sends it on every API call.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

/// Only this origin's own files and API: model text can never load or run anything, even if
/// an escaping bug slipped through.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Paths served without a key.
pub fn is_page_path(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

pub async fn index() -> Response {
    let mut response = asset(INDEX_HTML, "text/html; charset=utf-8");
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    response
        .headers_mut()
        .insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

pub async fn app_js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

pub async fn app_css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}

pub async fn favicon() -> Response {
    asset(FAVICON_SVG, "image/svg+xml")
}

/// `no-cache`: a browser revalidates, so an upgraded binary's page is never mixed with the
/// previous version's script.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn page_paths_are_only_the_page_and_its_assets() {
        for open in ["/", "/ui", "/ui/app.js", "/ui/app.css"] {
            assert!(super::is_page_path(open), "{open}");
        }
        for closed in ["/v1/sessions", "/uix", "/v1/models", "/metrics"] {
            assert!(!super::is_page_path(closed), "{closed}");
        }
    }

    #[test]
    fn the_script_never_assigns_html() {
        // Model text goes through textContent only; the page builds no markup from strings.
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
        ] {
            assert!(!super::APP_JS.contains(banned), "app.js uses {banned}");
        }
    }
}
