//! What a web browser may make the server do. Browsers send credentials nobody typed and
//! requests nobody meant: a page on another site can POST to a local server (a `no-cors`
//! `text/plain` body needs no preflight), and a page whose name was rebound to this address
//! (DNS rebinding) reads the answers as same-origin. So, on every route and before a key is
//! checked or a body read:
//!
//! - `Host` must be a name the server answers to: an IP address, `localhost`, or, when the
//!   server is bound to a loopback address, nothing else unless `--allowed-hosts` names it
//!   (bound elsewhere, any name unless the flag lists them). A rebinding page's own name is
//!   none of these.
//! - `Origin`, when a browser sends one, must be the server's own (its page at `/`) or one
//!   of `--cors-origins`.
//!
//! And where a body is read ([`super::bodies::read_body`]), after the route and the key:
//! it must be declared `application/json`, which a page cannot send to another origin
//! without a preflight that the CORS settings answer.
//!
//! Clients that are not browsers (SDKs, curl, agents) send no `Origin` and are unaffected;
//! `/health` skips the `Host` check, for probes that address the server by a pod's name.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use std::sync::Arc;

use super::Edge;
use super::error::ApiError;
use crate::config::ServerSettings;
use crate::telemetry::metrics;

/// The checks, fixed at start-up.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `None`: any host name.
    hosts: Option<Vec<String>>,
    /// `--cors-origins`, normalised; `any` for `*`.
    origins: Vec<String>,
    any_origin: bool,
}

impl Policy {
    pub fn new(settings: &ServerSettings) -> Self {
        let production = &settings.production;
        let listed = &production.allowed_hosts;
        let hosts = if listed.iter().any(|h| h == "*") {
            None
        } else if !listed.is_empty() || binds_loopback(&settings.host) {
            Some(listed.clone())
        } else {
            None
        };
        Self {
            hosts,
            origins: production
                .cors_origins
                .iter()
                .map(|o| normalise_origin(o))
                .collect(),
            any_origin: production.cors_origins.iter().any(|o| o == "*"),
        }
    }

    /// Why `request` is refused, if it is.
    fn refuse(&self, request: &Request) -> Option<ApiError> {
        let host = request_host(request);
        if let Some(host) = host
            && request.uri().path() != "/health"
            && !self.host_allowed(host)
        {
            count("host_not_allowed");
            return Some(ApiError::Forbidden {
                message: format!(
                    "Host '{}' is not a name this server answers to: add it to --allowed-hosts (MASSGEN_SERVER_ALLOWED_HOSTS)",
                    clip(host)
                ),
                code: "host_not_allowed",
            });
        }
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            if !self.origin_allowed(origin, host) {
                count("origin_not_allowed");
                return Some(ApiError::Forbidden {
                    message: format!(
                        "Origin '{}' is not allowed: a web page may call this server only from the server's own page or an origin in --cors-origins (MASSGEN_SERVER_CORS_ORIGINS)",
                        clip(origin)
                    ),
                    code: "origin_not_allowed",
                });
            }
        }
        None
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let Some(names) = &self.hosts else {
            return true;
        };
        let name = host_name(authority);
        if name.parse::<IpAddr>().is_ok() || name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        names
            .iter()
            .any(|allowed| match allowed.strip_prefix("*.") {
                Some(domain) => name
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
                None => *allowed == name,
            })
    }

    /// The server's own origin (its page, served under the `Host` the request names) or
    /// one of `--cors-origins`.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if self.any_origin {
            return true;
        }
        let origin = normalise_origin(origin);
        if self.origins.contains(&origin) {
            return true;
        }
        host.is_some_and(|host| same_authority(&origin, host))
    }
}

/// The middleware: refuses what [`Policy`] refuses, in the door's error shape.
pub async fn guard(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    match edge.browsers.refuse(&request) {
        Some(refused) => {
            tracing::info!(
                path = %request.uri().path(),
                code = refused.code(),
                "request refused: browser policy"
            );
            refused.into_response()
        }
        None => next.run(request).await,
    }
}

/// Whether the server listens on a loopback address only (`127.0.0.1`, `::1`,
/// `localhost`): a laptop's server, which only the machine's own browser reaches.
fn binds_loopback(host: &str) -> bool {
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The authority a request was sent to: HTTP/2's `:authority`, else `Host`.
fn request_host(request: &Request) -> Option<&str> {
    request
        .uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| request.headers().get(header::HOST)?.to_str().ok())
}

/// The name of an authority, lower-cased, without its port (`[::1]:4000` → `::1`).
fn host_name(authority: &str) -> String {
    let authority = authority.trim();
    let name = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(n, _)| n),
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// An origin as browsers send it, compared case-insensitively without a trailing slash.
fn normalise_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// Whether `origin` (`scheme://host[:port]`, normalised) names `authority` (`host[:port]`),
/// a missing port being the scheme's default.
fn same_authority(origin: &str, authority: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let split = |a: &str| -> (String, Option<u16>) {
        let a = a.trim().to_ascii_lowercase();
        let (name, port) = match a.strip_prefix('[') {
            Some(v6) => match v6.split_once(']') {
                Some((name, tail)) => (name.to_string(), tail.strip_prefix(':')),
                None => (v6.to_string(), None),
            },
            None => match a.rsplit_once(':') {
                Some((name, port)) => (name.to_string(), Some(port)),
                None => (a.clone(), None),
            },
        };
        let port = port.map(str::to_string);
        (name, port.and_then(|p| p.parse().ok()))
    };
    let (origin_name, origin_port) = split(rest);
    let (host_name, host_port) = split(authority);
    origin_name == host_name && origin_port.unwrap_or(default) == host_port.unwrap_or(default)
}

/// At most 200 characters of what a request sent, for a message.
fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

fn count(reason: &'static str) {
    if let Some(m) = metrics() {
        m.rejected.with_label_values(&[reason]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProductionSettings;

    fn policy(host: &str, allowed: &[&str], cors: &[&str]) -> Policy {
        Policy::new(&ServerSettings {
            host: host.into(),
            production: ProductionSettings {
                allowed_hosts: allowed.iter().map(|s| s.to_string()).collect(),
                cors_origins: cors.iter().map(|s| s.to_string()).collect(),
                ..ProductionSettings::default()
            },
            ..ServerSettings::default()
        })
    }

    #[test]
    fn a_loopback_server_answers_to_loopback_names_and_addresses_only() {
        let p = policy("127.0.0.1", &[], &[]);
        for ok in [
            "127.0.0.1:4000",
            "localhost:4000",
            "LOCALHOST",
            "app.localhost:4000",
            "[::1]:4000",
            "10.1.2.3",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for refused in [
            "attacker.example:4000",
            "attacker.example",
            "localhost.evil.example",
        ] {
            assert!(!p.host_allowed(refused), "{refused}");
        }
        let listed = policy("::1", &["api.example.com", "*.corp.example"], &[]);
        assert!(listed.host_allowed("api.example.com:443"));
        assert!(listed.host_allowed("a.corp.example"));
        assert!(!listed.host_allowed("corp.example"));
        assert!(!listed.host_allowed("evilcorp.example"));
        // Bound elsewhere: any name, unless the flag lists them.
        assert!(policy("0.0.0.0", &[], &[]).host_allowed("anything.example"));
        assert!(!policy("0.0.0.0", &["api.example.com"], &[]).host_allowed("x.example"));
        assert!(policy("127.0.0.1", &["*"], &[]).host_allowed("x.example"));
    }

    #[test]
    fn origins_are_the_servers_own_or_listed() {
        let p = policy("127.0.0.1", &[], &["https://app.example.com"]);
        assert!(p.origin_allowed("http://127.0.0.1:4000", Some("127.0.0.1:4000")));
        assert!(p.origin_allowed("http://localhost", Some("localhost:80")));
        assert!(p.origin_allowed("https://APP.example.com/", Some("127.0.0.1:4000")));
        assert!(!p.origin_allowed("http://127.0.0.1:5000", Some("127.0.0.1:4000")));
        // The scheme a request came over is not known behind a TLS terminator: the same
        // host and port are the server's own either way.
        assert!(p.origin_allowed("https://127.0.0.1:4000", Some("127.0.0.1:4000")));
        assert!(!p.origin_allowed("http://evil.example", Some("127.0.0.1:4000")));
        assert!(!p.origin_allowed("null", Some("127.0.0.1:4000")));
        assert!(!p.origin_allowed("http://127.0.0.1:4000", None));
        assert!(policy("127.0.0.1", &[], &["*"]).origin_allowed("null", None));
        assert!(same_authority("http://[::1]:4000", "[::1]:4000"));
    }

    #[test]
    fn host_names_lose_their_port_and_case() {
        assert_eq!(host_name("Example.COM:4000"), "example.com");
        assert_eq!(host_name("[::1]:4000"), "::1");
        assert_eq!(host_name("example.com."), "example.com");
        assert!(binds_loopback("127.0.0.1"));
        assert!(binds_loopback("[::1]"));
        assert!(binds_loopback("localhost"));
        assert!(!binds_loopback("0.0.0.0"));
        assert!(!binds_loopback("::"));
    }
}
