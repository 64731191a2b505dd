//! The integration tests in one binary: one module per area, the helpers they share in
//! [`support`]. One binary links once after a change instead of once per file.
//! (`tests/mcp.rs` stays a binary of its own: it doubles as the stdio MCP server it tests.)
//!
//! Run one area with `cargo test --test it http_doors::`, one test by its name. The engine's
//! own tests are massgen-core's (`cargo test -p massgen-core --test engine`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is the test failure

mod support;

mod agent_tool_shapes;
mod app_use_case;
mod auto_config;
mod bench_smoke;
mod chat_roundtrip;
mod cli;
mod cli_clients;
mod config;
mod demo_tool_choice;
mod deploy;
mod descriptors;
mod docs_links;
mod engine_identical;
mod engine_planning;
mod eval;
mod eval_compare;
mod eval_second;
mod evals_page;
mod h2c;
mod hardening;
mod hardening_records;
mod http_blackbox;
mod http_cache;
mod http_client_habits;
mod http_doors;
mod http_efficiency;
mod http_images;
mod http_inprocess;
mod http_messages;
mod http_native_providers;
mod http_production;
mod http_quota;
mod http_request_panel;
mod http_responses;
mod http_tools;
mod http_ui;
mod massgen_compat;
mod massgen_corpus;
mod mcp_clients;
mod mcp_door;
mod messages_roundtrip;
mod mock_upstream;
mod mock_upstream_native;
mod openai_client;
mod plain_call;
mod provider_config;
mod python_clients;
mod records_db;
mod records_db_pg;
mod responses_items;
mod responses_store;
mod sdk_clients;
mod security_bodies;
mod security_browsers;
mod security_budgets;
mod security_eval;
mod security_paths;
mod security_records;
mod security_schema;
mod security_session_clock;
mod security_shared_pools;
mod security_store;
mod security_upstream;
mod security_urls;
mod sessions_by_door;
mod structured_output;
mod ui_e2e;
mod upstream_connections;
