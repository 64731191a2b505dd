//! The router in-process (no sockets): CORS, authentication order, /metrics protection,
//! request ids.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use massgen::app::HttpProviders;
use massgen::config::{PanelCatalog, ProductionSettings, Secret, ServerSettings};
use massgen::server::{AppState, router};
use massgen_tools::ToolRegistry;
use massgen_tools::rmcp_client::RmcpConnector;
use tower::ServiceExt;

fn app(production: ProductionSettings) -> axum::Router {
    let settings = ServerSettings {
        production,
        ..ServerSettings::default()
    };
    let providers = Arc::new(HttpProviders::new(
        massgen_providers::http_client().unwrap(),
    ));
    let tools = Arc::new(ToolRegistry::new(Arc::new(RmcpConnector)));
    let env: Arc<massgen::config::Env> = Arc::new(|_: &str| None);
    router(AppState::new(Arc::new(massgen::app::App::in_memory(
        PanelCatalog::default(),
        settings,
        providers,
        tools,
        env,
    ))))
}

async fn send(app: &axum::Router, request: Request<Body>) -> axum::response::Response {
    app.clone().oneshot(request).await.unwrap()
}

fn preflight(origin: &str) -> Request<Body> {
    Request::options("/v1/chat/completions")
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "authorization,content-type",
        )
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn cors_is_off_by_default_and_follows_the_configured_origins() {
    let off = app(ProductionSettings::default());
    let r = send(&off, preflight("https://app.example")).await;
    assert!(
        r.headers()
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_none()
    );

    let on = app(ProductionSettings {
        cors_origins: vec!["https://app.example".into()],
        api_keys: vec![Secret::new("k")],
        ..ProductionSettings::default()
    });
    // The preflight carries no key and still succeeds.
    let r = send(&on, preflight("https://app.example")).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://app.example"
    );
    let allowed = r.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap()
        .to_string();
    assert!(allowed.contains("authorization"), "{allowed}");
    let r = send(&on, preflight("https://evil.example")).await;
    assert!(
        r.headers()
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_none()
    );
    // An actual cross-origin request without a key: 401, with CORS headers so the browser
    // can read the error.
    let r = send(
        &on,
        Request::get("/v1/models")
            .header(header::ORIGIN, "https://app.example")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://app.example"
    );

    let any = app(ProductionSettings {
        cors_origins: vec!["*".into()],
        ..ProductionSettings::default()
    });
    let r = send(&any, preflight("https://whoever.example")).await;
    assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
}

#[tokio::test]
async fn metrics_are_open_unless_protected_and_health_always_is() {
    let keys = vec![Secret::new("k-1")];
    let open = app(ProductionSettings {
        api_keys: keys.clone(),
        ..ProductionSettings::default()
    });
    let get = |path: &str, key: Option<&str>| {
        let mut b = Request::get(path);
        if let Some(k) = key {
            b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        b.body(Body::empty()).unwrap()
    };
    assert_eq!(
        send(&open, get("/metrics", None)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&open, get("/health", None)).await.status(),
        StatusCode::OK
    );
    let closed = app(ProductionSettings {
        api_keys: keys,
        protect_metrics: true,
        ..ProductionSettings::default()
    });
    assert_eq!(
        send(&closed, get("/metrics", None)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&closed, get("/metrics", Some("k-2"))).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let r = send(&closed, get("/metrics", Some("k-1"))).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(
        send(&closed, get("/health", None)).await.status(),
        StatusCode::OK
    );
    // Unknown sessions are 404 in OpenAI's error shape for the right key.
    let r = send(&closed, get("/v1/sessions/sess_nope", Some("k-1"))).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "session_not_found");
}

/// The `x-request-id` the server uses for `sent` (echoed in the response, logged, put in
/// Anthropic errors), with the Messages error's `request_id`.
async fn request_id_for(app: &axum::Router, sent: &[&str]) -> (String, serde_json::Value) {
    let mut b = Request::post("/v1/messages").header(header::CONTENT_TYPE, "application/json");
    for id in sent {
        b = b.header("x-request-id", *id);
    }
    let r = send(app, b.body(Body::from("{")).unwrap()).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let echoed = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    (echoed, v["request_id"].clone())
}

#[tokio::test]
async fn only_short_safe_request_ids_are_kept() {
    let app = app(ProductionSettings::default());
    let good = "req-42_a.b:c";
    let (echoed, in_error) = request_id_for(&app, &[good]).await;
    assert_eq!(echoed, good);
    assert_eq!(in_error, good);
    let long = "a".repeat(129);
    let forged = [
        "a path=/admin http.response.status_code=200",
        long.as_str(),
        "x\ty",
        "id\"}{",
        "",
    ];
    for bad in forged {
        let (echoed, in_error) = request_id_for(&app, &[bad]).await;
        assert_ne!(echoed, bad);
        assert!(uuid::Uuid::parse_str(&echoed).is_ok(), "{echoed}");
        assert_eq!(in_error, echoed.as_str());
    }
    assert_eq!(request_id_for(&app, &[&"b".repeat(128)]).await.0.len(), 128);
    // Two ids, even safe ones: which one would be logged is ambiguous.
    let (echoed, _) = request_id_for(&app, &["one", "two"]).await;
    assert!(uuid::Uuid::parse_str(&echoed).is_ok(), "{echoed}");
}

#[tokio::test]
async fn an_id_that_is_not_utf8_is_a_json_400() {
    let app = app(ProductionSettings::default());
    for path in [
        "/v1/sessions/%FF%FE",
        "/v1/sessions/%C3%28/events",
        "/v1/responses/%FF",
    ] {
        let r = send(&app, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&body)));
        assert_eq!(v["error"]["code"], "invalid_value", "{v}");
        assert_eq!(v["error"]["param"], "id", "{v}");
    }
}
