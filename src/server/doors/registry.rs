//! Every door in one table, as `wire_formats!` lists the upstream formats: its routes,
//! its name (the records' and metrics' label) and its error shape. The router, span
//! names and the error reshaping read it; adding a door is its module, its line in
//! `doors/mod.rs` and its entry here.

use axum::Router;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::Value;

use super::chat_completions::ChatCompletions;
use super::door::{Door, serve};
use super::mcp;
use super::messages::{self, Messages};
use super::responses::{self, Responses};
use crate::server::AppState;
use crate::server::error::ApiError;

/// One route of a door: its path (axum's syntax) and handler (built once, from the state:
/// a transport such as MCP's keeps its sessions in it).
pub struct Route {
    pub path: &'static str,
    pub handler: fn(&AppState) -> MethodRouter<AppState>,
}

/// A door's entry.
pub struct Entry {
    /// [`Door::NAME`].
    pub name: &'static str,
    pub routes: &'static [Route],
    /// The body of an error on the door's routes, from the error and the request id;
    /// `None`: OpenAI's shape ([`ApiError`]'s own).
    pub error_body: Option<fn(&ApiError, Option<&str>) -> Value>,
}

pub const DOORS: &[Entry] = &[
    Entry {
        name: ChatCompletions::NAME,
        routes: &[Route {
            path: "/v1/chat/completions",
            handler: |_| post(serve::<ChatCompletions>),
        }],
        error_body: None,
    },
    Entry {
        name: Responses::NAME,
        routes: &[
            Route {
                path: "/v1/responses",
                handler: |_| post(serve::<Responses>),
            },
            Route {
                path: "/v1/responses/{id}",
                handler: |_| get(responses::get),
            },
        ],
        error_body: None,
    },
    Entry {
        name: Messages::NAME,
        routes: &[
            Route {
                path: "/v1/messages",
                handler: |_| post(serve::<Messages>),
            },
            Route {
                path: "/v1/messages/count_tokens",
                handler: |_| post(messages::count_tokens),
            },
        ],
        error_body: Some(messages::error::body),
    },
    Entry {
        name: mcp::NAME,
        routes: &[Route {
            path: mcp::PATH,
            handler: mcp::route,
        }],
        error_body: None,
    },
];

/// `router` with every door's routes.
pub fn mount(mut router: Router<AppState>, state: &AppState) -> Router<AppState> {
    for route in DOORS.iter().flat_map(|d| d.routes) {
        router = router.route(route.path, (route.handler)(state));
    }
    router
}

/// The door route `path` matches, and its door: `{…}` segments match one non-empty
/// segment.
pub fn route_of(path: &str) -> Option<(&'static Entry, &'static str)> {
    DOORS.iter().find_map(|door| {
        door.routes
            .iter()
            .find(|r| matches(r.path, path))
            .map(|r| (door, r.path))
    })
}

fn matches(template: &str, path: &str) -> bool {
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return true,
            (Some(want), Some(got)) => {
                let wild = want.starts_with('{') && want.ends_with('}');
                if (wild && got.is_empty()) || (!wild && want != got) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// Whether `path` is under one of `door`'s routes (its own paths, and unknown paths below
/// them: a wrong `/v1/messages/x` gets the door's error shape too).
fn under(door: &Entry, path: &str) -> bool {
    door.routes.iter().any(|r| {
        let base = r.path.split("/{").next().unwrap_or(r.path);
        path == base
            || path
                .strip_prefix(base)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Re-renders an [`ApiError`] response in the shape of the door whose paths it is on,
/// keeping the status and headers (`retry-after`, `x-should-retry`, CORS) it already has.
/// Outside everything that can fail, so the errors of the layers in front of the doors
/// (authentication, rate limits, unknown paths, wrong methods, panics) take the shape too.
pub async fn reshape_errors(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let shape = DOORS
        .iter()
        .find(|d| under(d, path))
        .and_then(|d| d.error_body);
    let request_id = shape.and_then(|_| {
        request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    });
    let response = next.run(request).await;
    let Some(shape) = shape else {
        return response;
    };
    let Some(error) = response.extensions().get::<ApiError>().cloned() else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    let fresh = axum::Json(shape(&error, request_id.as_deref())).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in fresh.headers() {
        parts.headers.insert(name, value.clone());
    }
    Response::from_parts(parts, fresh.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_find_their_door_and_route() {
        let (door, route) = route_of("/v1/responses/resp_1").unwrap();
        assert_eq!((door.name, route), ("responses", "/v1/responses/{id}"));
        assert!(route_of("/v1/responses/").is_none());
        assert!(route_of("/v1/responses/a/b").is_none());
        assert_eq!(route_of("/v1/messages").unwrap().0.name, "messages");
        assert!(route_of("/v1/messagesx").is_none());
        let names: Vec<_> = DOORS.iter().map(|d| d.name).collect();
        assert_eq!(names, ["chat_completions", "responses", "messages", "mcp"]);
        assert_eq!(route_of("/mcp").unwrap().0.name, "mcp");
    }

    #[test]
    fn the_error_shape_covers_a_doors_paths_and_below() {
        let messages = &DOORS[2];
        assert!(under(messages, "/v1/messages") && under(messages, "/v1/messages/count_tokens"));
        assert!(under(messages, "/v1/messages/nope"));
        assert!(!under(messages, "/v1/messagesx"));
        assert!(!under(&DOORS[0], "/v1/chat/completionsx"));
    }
}
