//! MassGen-style YAML panel configs (`agents:`, `orchestrator:`, `timeout_settings:`) and the
//! server settings that come from flags and the environment.
//!
//! Loading: [`load_panel`] / [`parse_panel`] / [`load_catalog`] (see `load.rs` for the rules
//! and the decisions taken), `${VAR}` expansion in `expand.rs`, the `--demo` panel in
//! `demo.rs`, the config lookup and the automatic panel from the keys present in `auto.rs`.

mod agents;
mod auto;
mod backend;
mod demo;
mod error;
pub mod expand;
mod load;
pub mod massgen_keys;
mod orchestrator;
mod pricing;
mod production;
mod read;
mod request_paths;
mod retry;
mod tools;
mod vision;
mod yaml;

pub use auto::{
    AUTO_MODELS, AUTO_SOURCE, auto_key_variables, auto_panel, auto_panel_yaml, find_default_config,
};
pub use demo::{DEMO_SOURCE, demo_panel};
pub use error::ConfigError;
pub use load::{ConfigCheck, check_panel, load_catalog, load_panel, parse_panel, valid_panel_name};
pub use production::{ProductionSettings, RecordsDb};
pub use read::ConfigWarning;
pub use request_paths::{PathRefused, check_config_paths_root, load_request_panel};
pub use vision::default_vision;

/// Environment lookup seam: the process environment in production ([`process_env`]), a map in
/// tests.
pub type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Looks `name` up in the process environment (after `.env` was loaded by the CLI).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use massgen_core::Secret;
use massgen_core::coordination::OrchestratorOptions;
use massgen_providers::retry::CallPolicy;
use serde_json::{Map, Value};

/// One agent's `backend:` section, resolved (variables expanded, key found, base URL set).
#[derive(Debug, Clone, PartialEq)]
pub struct BackendConfig {
    /// The config `type`, lower-cased (`openai`, `groq`, `chatcompletion`, …).
    pub backend_type: String,
    pub model: String,
    pub api_key: Option<Secret>,
    pub base_url: String,
    /// Keys the server does not know, passed into the upstream request body as they are
    /// (temperature, max_tokens, reasoning_effort, top_p, …).
    pub params: Map<String, Value>,
    /// Azure OpenAI's `api-version` (`api_version` key, `AZURE_OPENAI_API_VERSION`, or a
    /// default); `None` for every other type.
    pub api_version: Option<String>,
    /// What the model costs (`pricing`, else the built-in list price); `None`: unknown.
    pub price: Option<massgen_core::provider::Price>,
    /// The model can see images (`vision`, else [`default_vision`] of the model).
    pub vision: bool,
    /// The HTTP spoken upstream: `h2c: true` is HTTP/2 with prior knowledge (`http://`
    /// only), else HTTP/1.1 or, over TLS, HTTP/2 where ALPN picks it.
    pub http: massgen_providers::UpstreamHttp,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub id: String,
    pub system_message: Option<String>,
    pub backend: BackendConfig,
    /// The agent's own MCP tools (`backend.mcp_servers` and friends); `None` without them.
    pub tools: Option<massgen_tools::AgentToolsConfig>,
}

/// One loaded panel config file.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelConfig {
    /// The name clients use (`massgen/<name>`): the file stem.
    pub name: String,
    /// Where it came from (for messages).
    pub source: PathBuf,
    pub agents: Vec<AgentConfig>,
    pub orchestrator: OrchestratorOptions,
    /// Upstream retry and time limits (`retry:` section).
    pub call_policy: CallPolicy,
}

/// Server settings from flags, `MASSGEN_SERVER_*` and the optional `server:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    pub host: String,
    pub port: u16,
    /// SSE keep-alive comment period.
    pub keepalive: Duration,
    pub max_body_bytes: usize,
    /// `massgen/path:<file>` routing.
    pub allow_config_paths: bool,
    /// The folder `massgen/path:` files must be in (`--config-paths-root`, else
    /// `--configs-dir`; resolved at start-up).
    pub config_paths_root: Option<PathBuf>,
    /// The environment variables a `massgen/path:` file may read (`--config-paths-env`).
    pub config_paths_env: Vec<String>,
    /// `massgen/model:<model>` routing (on unless the operator turns it off).
    pub allow_model_override: bool,
    /// `"massgen": {"models": [...]}`: a request may choose its panel's models among the
    /// providers the server's configs already use (off unless the operator allows it).
    pub allow_request_panels: bool,
    /// A request's `temperature`, `top_p` and `seed` go to every agent's calls, over its
    /// config (off unless the operator allows it: the panel's settings are the operator's).
    pub allow_request_sampling: bool,
    /// How long running sessions may go on after a shutdown signal.
    pub shutdown_grace: Duration,
    /// Log prompt and answer text.
    pub debug: bool,
    /// Replaces every agent's model of the default config for requests that use it
    /// (`MASSGEN_SERVER_DEFAULT_MODEL`, MassGen's "default model override").
    pub default_model: Option<String>,
    /// The named panel for `/v1/messages` requests whose model is not `massgen` or
    /// `massgen/<name>` (`--messages-default-panel`); `None`: the default config.
    pub messages_default_panel: Option<String>,
    /// Where Chat Completions puts the deliberation unless a request says
    /// (`--deliberation-format`).
    pub deliberation_format: DeliberationFormat,
    /// The key that signs the deliberation handed to clients (thinking `signature`s,
    /// reasoning `encrypted_content`), shared by replicas; `None`: a random one per process.
    pub reasoning_secret: Option<massgen_core::Secret>,
    /// Auth, limits, records and timeouts (`production.rs`).
    pub production: ProductionSettings,
    /// How long identical requests are answered from the response cache; `None`: off.
    pub cache_ttl: Option<Duration>,
    /// The MCP door: a `deliberate` call with neither a progress token nor a
    /// `deadline_seconds` presents its best answer after this long (clients that wait
    /// without progress give up at 60 s or sooner).
    pub mcp_deadline: Duration,
}

/// Where the Chat Completions door puts the deliberation (`--deliberation-format`,
/// `massgen.deliberation_format`). Clients that drop `reasoning_content` (LangChain, the
/// AI SDK's OpenAI provider, `llm`) show nothing while a panel deliberates; chat UIs
/// (Open WebUI, LibreChat, LM Studio) render `<think>…</think>` at the start of `content`
/// as reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliberationFormat {
    /// `reasoning_content`, beside `content`.
    #[default]
    Reasoning,
    /// `<think>…</think>` at the start of `content`, the answer after the closing tag.
    ThinkTags,
    /// Not sent.
    None,
}

impl DeliberationFormat {
    pub const NAMES: [&'static str; 3] = ["reasoning", "think_tags", "none"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "reasoning" => Some(Self::Reasoning),
            "think_tags" => Some(Self::ThinkTags),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_string(),
            port: 4000,
            keepalive: Duration::from_secs(15),
            max_body_bytes: 10 * 1024 * 1024,
            allow_config_paths: false,
            config_paths_root: None,
            config_paths_env: Vec::new(),
            allow_model_override: true,
            allow_request_panels: false,
            allow_request_sampling: false,
            shutdown_grace: Duration::from_secs(30),
            debug: false,
            default_model: None,
            messages_default_panel: None,
            deliberation_format: DeliberationFormat::Reasoning,
            reasoning_secret: None,
            production: ProductionSettings::default(),
            cache_ttl: None,
            mcp_deadline: Duration::from_secs(50),
        }
    }
}

/// Every panel the server can serve: the default and the named ones of the configs dir.
#[derive(Debug, Clone, Default)]
pub struct PanelCatalog {
    pub default: Option<std::sync::Arc<PanelConfig>>,
    pub named: BTreeMap<String, std::sync::Arc<PanelConfig>>,
    /// Files of the configs dir that failed to load: name → why (no secrets in it).
    pub unavailable: BTreeMap<String, String>,
    pub configs_dir: Option<PathBuf>,
}
