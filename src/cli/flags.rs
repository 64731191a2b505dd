//! The command line as clap reads it: commands, flags and their `MASSGEN_SERVER_*`
//! variables. A default that is one value is clap's `default_value_t`, taken from
//! [`ServerSettings::default`] / [`ProductionSettings::default`] (so `--help` shows the
//! value the server uses); a flag stays an `Option` where "not given" means something a
//! value cannot (off, no cap, or a default that depends on another flag).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use super::values::{Number, Switch, default_deliberation_format, deliberation_format};
use crate::config::{DeliberationFormat, ProductionSettings, ServerSettings};

/// Records kept in a database by default: how many, and for how long (30 days).
pub(super) const DB_RECORDS_MAX: usize = 100_000;
pub(super) const DB_RECORDS_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, Parser)]
#[command(
    name = "massgen",
    version,
    about = "Several LLMs answer together behind OpenAI- and Anthropic-compatible APIs: Chat \
             Completions (/v1/chat/completions), Responses (/v1/responses) and Anthropic \
             Messages (/v1/messages)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start-up: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API: Chat Completions (POST /v1/chat/completions), Responses (POST
    /// /v1/responses), Anthropic Messages (POST /v1/messages) and GET /v1/models.
    Serve(ServeArgs),
    /// Run the simulated OpenAI-compatible model server (behaviour chosen by model name).
    MockUpstream(MockUpstreamArgs),
    /// Exit 0 when a server's /health answers 200 (container health checks; no curl needed).
    Healthcheck(HealthcheckArgs),
    /// Check panel configs without serving: one line per problem, warnings listed; exit 1
    /// when a config has an error.
    CheckConfig(CheckConfigArgs),
    /// Speak MCP on stdin/stdout (logs on stderr), for MCP clients that launch a command:
    /// the `deliberate` and `list_panels` tools, as on `/mcp`.
    Mcp(McpArgs),
    /// Measure a panel on your own questions against each of its agents alone and
    /// self-consistency of each agent: accuracy with 95% intervals, paired comparisons,
    /// cost and latency, in --out (report.json, report.md, items.jsonl, chart.svg).
    /// `massgen eval compare A B` compares two runs' folders.
    #[command(args_conflicts_with_subcommands = true)]
    Eval(EvalArgs),
}

/// How `massgen eval` grades an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraderName {
    /// The answer (its last `Answer:` line, else all of it) equals `answer` after
    /// normalisation (case, spaces, emphasis, a final period); `answer` may list several.
    Exact,
    /// The answer matches `answer`, a regular expression (Rust syntax).
    Regex,
    /// The last number of the answer is within --tolerance (or --relative-tolerance).
    Numeric,
    /// The answer, asked for as structured output, is valid against --schema (and equal
    /// to `answer` when the line has one).
    JsonSchema,
    /// A model or panel (--judge) compares the answer with `answer`.
    Judge,
}

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// `compare`: two runs' folders side by side instead of a run
    #[command(subcommand)]
    pub action: Option<EvalAction>,
    /// The questions: JSONL, one `{"question": …, "answer": …, "id": …}` a line
    /// (`messages` instead of `question` for a conversation; `input`/`prompt` and
    /// `target`/`ideal`/`expected` read too; other keys kept as metadata) [required but
    /// with --demo or --regrade]
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// Where the results go; a rerun with the same folder skips the items it graded
    /// [required but with --demo: a new folder in the temporary directory]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Default panel config (YAML) [default: as for `serve`]
    #[arg(long, value_name = "FILE", env = "MASSGEN_SERVER_DEFAULT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of named panel configs (for --panel and --judge)
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_CONFIGS_DIR")]
    pub configs_dir: Option<PathBuf>,
    /// A panel to measure: a name in --configs-dir, or `default`; repeat to compare
    /// several (the first is the one the others are compared with) [default: the default
    /// panel]
    #[arg(long = "panel", value_name = "NAME")]
    pub panels: Vec<String>,
    /// Try it with no key: three simulated agents on a built-in simulator, asked the
    /// bundled questions (or --data's)
    #[arg(long)]
    pub demo: bool,
    /// Grade the answers the run in --out keeps again, with the grader flags given, and
    /// write a new report: no upstream call (the judge's apart), no --data or panel flags
    #[arg(long)]
    pub regrade: bool,
    /// What to compare the panel with, comma-separated: `agents` (each agent alone, one
    /// call), `self-consistency` (each agent --samples times, majority answer), `none`
    /// [default: agents,self-consistency]
    #[arg(long, value_name = "LIST")]
    pub baselines: Option<String>,
    /// Samples per item for self-consistency (its first sample is the agent-alone answer)
    /// [default: 5]
    #[arg(long, value_name = "K", value_parser = Number::<u32>::new())]
    pub samples: Option<u32>,
    /// Settings of the panel to compare too, comma-separated: `majority` (voting_quorum:
    /// majority), `synthesize` (final_answer_strategy: synthesize)
    #[arg(long, value_name = "LIST")]
    pub variants: Option<String>,
    #[arg(long, value_enum, default_value_t = GraderName::Exact)]
    pub grader: GraderName,
    /// Numeric grader: the largest absolute difference that counts as right [default: 1e-6]
    #[arg(long, value_name = "X", value_parser = Number::<f64>::new())]
    pub tolerance: Option<f64>,
    /// Numeric grader: the largest difference relative to the answer that counts as right
    /// [default: 0]
    #[arg(long, value_name = "X", value_parser = Number::<f64>::new())]
    pub relative_tolerance: Option<f64>,
    /// JSON Schema grader: the schema (a JSON file); every session asks for it as
    /// structured output
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Judge grader: a panel config file (one agent: one call per verdict), or a name in
    /// --configs-dir, or `default`
    #[arg(long, value_name = "FILE|NAME")]
    pub judge: Option<String>,
    /// A system message for every agent [default: for the exact, regex and numeric
    /// graders, "End your reply with a final line of the form `Answer: <answer>`."; none
    /// for the others; "" for none]
    #[arg(long, value_name = "TEXT")]
    pub instruction: Option<String>,
    /// Only the first N items of the data (after --shuffle)
    #[arg(long, value_name = "N", value_parser = Number::<usize>::new())]
    pub limit: Option<usize>,
    /// Ask the items in an order drawn from --seed (with --limit: a sample of them)
    #[arg(long)]
    pub shuffle: bool,
    /// The seed of --shuffle: the same seed picks the same order [default: 0]
    #[arg(long, value_name = "S", value_parser = Number::<u64>::new())]
    pub seed: Option<u64>,
    /// A metadata key of the items (a key of theirs beyond question, answer and id) the
    /// report groups accuracy by
    #[arg(long, value_name = "KEY")]
    pub group_by: Option<String>,
    /// Sessions in flight at most (self-consistency samples and judge calls count)
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = Number::<usize>::new())]
    pub concurrency: usize,
    /// Stop starting new items once the run (every arm and the judge) has spent this
    /// much; needs a price for every model (exit 3)
    #[arg(long, value_name = "USD", value_parser = Number::<f64>::new())]
    pub max_cost_usd: Option<f64>,
    /// Stop starting new items when the first N results all failed (and, once 2N are in,
    /// when more than --max-failure-rate of them did; exit 4) [default: 10]
    #[arg(long, value_name = "N", value_parser = Number::<usize>::new())]
    pub max_failures: Option<usize>,
    /// Stop starting new items once at least 2 × --max-failures results are in and more
    /// than this share of them failed; 1 never [default: 0.5]
    #[arg(long, value_name = "R", value_parser = Number::<f64>::new())]
    pub max_failure_rate: Option<f64>,
    /// Most one session may spend, in USD (as `serve`'s) [default: no limit]
    #[arg(long, value_name = "USD", env = "MASSGEN_SERVER_MAX_SESSION_COST_USD", value_parser = Number::<f64>::new())]
    pub max_session_cost_usd: Option<f64>,
    /// Upstream calls one session may make (as `serve`'s) [default: no limit]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_UPSTREAM_CALLS", value_parser = Number::<u32>::new())]
    pub max_upstream_calls: Option<u32>,
    /// Keep the run and its sessions in this records database (as `serve
    /// --records-db`), so the server's page shows them [default: sessions kept in memory
    /// only]
    #[arg(long, value_name = "URL", env = "MASSGEN_SERVER_RECORDS_DB")]
    pub records_db: Option<String>,
    /// Log every session's start and end (as `serve` does) [default: warnings only]
    #[arg(long)]
    pub verbose: bool,
}

/// What `massgen eval` does instead of running.
#[derive(Debug, Clone, Subcommand)]
pub enum EvalAction {
    /// Compare two runs' folders (--out of two `massgen eval` runs), arm by arm: accuracy
    /// and cost per item of each, and B minus A paired on the items both graded, with a
    /// 95% interval and McNemar's p. Exit 1 with --fail-if-worse when B is worse.
    Compare(CompareArgs),
}

#[derive(Debug, Clone, Args)]
#[command(allow_negative_numbers = true)]
pub struct CompareArgs {
    /// The first run's folder (A, the baseline)
    #[arg(value_name = "DIR_A")]
    pub a: PathBuf,
    /// The second run's folder (B, compared with A)
    #[arg(value_name = "DIR_B")]
    pub b: PathBuf,
    /// Exit 1 when B is worse than A on some arm by more than this many percentage points
    /// with McNemar p < 0.05
    #[arg(long, value_name = "POINTS", value_parser = Number::<f64>::new())]
    pub fail_if_worse: Option<f64>,
    /// Print the comparison as JSON instead of Markdown
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Default panel config (YAML) [default: as for `serve`]
    #[arg(long, value_name = "FILE", env = "MASSGEN_SERVER_DEFAULT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of named panel configs, offered as `massgen/<name>`
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_CONFIGS_DIR")]
    pub configs_dir: Option<PathBuf>,
    /// Run three simulated agents on a built-in mock upstream (no API keys needed)
    #[arg(long)]
    pub demo: bool,
    /// Most a deliberation may spend, in USD [default: no limit]
    #[arg(long, value_name = "USD", env = "MASSGEN_SERVER_MAX_SESSION_COST_USD", value_parser = Number::<f64>::new())]
    pub max_session_cost_usd: Option<f64>,
    /// Seconds after which a `deliberate` call that asked for no progress and set no
    /// `deadline_seconds` presents its best answer
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MCP_DEADLINE_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ServerSettings::default().mcp_deadline.as_secs())]
    pub mcp_deadline_seconds: u64,
}

#[derive(Debug, Clone, Args)]
pub struct CheckConfigArgs {
    /// Panel config files (YAML)
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    #[arg(long, help = format!(
        "Health URL [default: http://127.0.0.1:$MASSGEN_SERVER_PORT/health, port {}]",
        ServerSettings::default().port
    ))]
    pub url: Option<String>,
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub timeout_seconds: u64,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to bind
    #[arg(long, env = "MASSGEN_SERVER_HOST", default_value_t = ServerSettings::default().host)]
    pub host: String,
    /// Port to bind, 0 for any free port
    #[arg(long, env = "MASSGEN_SERVER_PORT", value_parser = Number::<u16>::new(),
          default_value_t = ServerSettings::default().port)]
    pub port: u16,
    /// Default panel config (YAML) [default: .massgen/config.yaml, then
    /// ~/.config/massgen/config.yaml, then an automatic panel from the API keys present]
    #[arg(long, value_name = "FILE", env = "MASSGEN_SERVER_DEFAULT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of named panel configs, served as `massgen/<name>`
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_CONFIGS_DIR")]
    pub configs_dir: Option<PathBuf>,
    /// Run three simulated agents on a built-in mock upstream (no API keys needed)
    #[arg(long)]
    pub demo: bool,
    /// Print the default panel as YAML, ready to save as a config, and exit
    #[arg(long)]
    pub print_config: bool,
    /// Allow `massgen/path:<file>` models: `.yaml`/`.yml` files under --config-paths-root
    /// (else --configs-dir), never where the server writes records
    #[arg(long, env = "MASSGEN_SERVER_ALLOW_CONFIG_PATHS", value_parser = Switch)]
    pub allow_config_paths: bool,
    /// The folder `massgen/path:` files must be in [default: --configs-dir]
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_CONFIG_PATHS_ROOT")]
    pub config_paths_root: Option<PathBuf>,
    /// Environment variables a `massgen/path:` file may read (`${VAR}`, provider keys),
    /// comma-separated [default: none]
    #[arg(long, value_name = "VAR,…", env = "MASSGEN_SERVER_CONFIG_PATHS_ENV")]
    pub config_paths_env: Option<String>,
    /// Allow `massgen/model:<model>` models (`--allow-model-override=false` turns them off)
    #[arg(
        long,
        env = "MASSGEN_SERVER_ALLOW_MODEL_OVERRIDE",
        value_parser = Switch,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = ServerSettings::default().allow_model_override
    )]
    pub allow_model_override: bool,
    /// Allow `"massgen": {"models": ["openai/gpt-4o-mini", …]}`: a request chooses its
    /// panel's models among the providers the server's configs already use (their keys and
    /// base URLs; never new ones)
    #[arg(long, env = "MASSGEN_SERVER_ALLOW_REQUEST_PANELS", value_parser = Switch)]
    pub allow_request_panels: bool,
    /// Let a request's `temperature`, `top_p` and `seed` override every agent's config
    /// (otherwise they are ignored)
    #[arg(long, env = "MASSGEN_SERVER_ALLOW_REQUEST_SAMPLING", value_parser = Switch)]
    pub allow_request_sampling: bool,
    /// Answer a request identical to one answered within N seconds (same API key, same
    /// panel) from the response cache [default: off]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_CACHE_TTL_SECONDS", value_parser = Number::<u64>::new())]
    pub cache_ttl_seconds: Option<u64>,
    /// Period of SSE keep-alive comments
    #[arg(long, value_name = "N", value_parser = Number::<u64>::new(),
          default_value_t = ServerSettings::default().keepalive.as_secs())]
    pub keepalive_seconds: u64,
    /// Largest accepted request body
    #[arg(long, value_name = "N", value_parser = Number::<usize>::new(),
          default_value_t = ServerSettings::default().max_body_bytes)]
    pub max_body_bytes: usize,
    /// How long running sessions may finish after a shutdown signal
    #[arg(long, value_name = "N", value_parser = Number::<u64>::new(),
          default_value_t = ServerSettings::default().shutdown_grace.as_secs())]
    pub shutdown_grace_seconds: u64,
    /// Debug logging, including prompt and answer text
    #[arg(long, env = "MASSGEN_SERVER_DEBUG", value_parser = Switch)]
    pub debug: bool,
    /// Replace every agent's model of the default config with NAME
    #[arg(long, value_name = "NAME", env = "MASSGEN_SERVER_DEFAULT_MODEL")]
    pub default_model: Option<String>,
    /// Panel for /v1/messages requests whose model is not `massgen` or `massgen/<name>` (Claude
    /// Code sends its own model names) [default: the default config]
    #[arg(
        long,
        value_name = "NAME",
        env = "MASSGEN_SERVER_MESSAGES_DEFAULT_PANEL"
    )]
    pub messages_default_panel: Option<String>,
    /// Where Chat Completions sends the deliberation: reasoning (`reasoning_content`),
    /// think_tags (`<think>…</think>` before the answer in `content`) or none
    #[arg(long, value_name = "FORMAT", env = "MASSGEN_SERVER_DELIBERATION_FORMAT",
          value_parser = deliberation_format, default_value = default_deliberation_format())]
    pub deliberation_format: DeliberationFormat,
    /// Seconds after which an MCP `deliberate` call that asked for no progress and set no
    /// `deadline_seconds` presents its best answer
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MCP_DEADLINE_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ServerSettings::default().mcp_deadline.as_secs())]
    pub mcp_deadline_seconds: u64,
    /// Key that signs the deliberation given to clients (thinking signatures, reasoning
    /// encrypted_content), so it verifies when sent back; replicas must share it [default: a
    /// random key per process]
    #[arg(
        long,
        value_name = "SECRET",
        env = "MASSGEN_SERVER_REASONING_SECRET",
        hide_env_values = true
    )]
    pub reasoning_secret: Option<String>,
    #[command(flatten)]
    pub production: ProductionArgs,
}

/// Access control, limits, records and timeouts (docs/production.md).
/// [`Default`] is what the command line gives when no flag or variable is set.
#[derive(Debug, Clone, Args)]
pub struct ProductionArgs {
    /// File of accepted API keys, one per line (`#` comments); adds to MASSGEN_SERVER_API_KEYS
    /// (comma-separated)
    #[arg(long, value_name = "FILE", env = "MASSGEN_SERVER_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// Require an API key for GET /metrics too
    #[arg(long, env = "MASSGEN_SERVER_PROTECT_METRICS", value_parser = Switch)]
    pub protect_metrics: bool,
    /// Allowed CORS origins, comma-separated, or `*` [default: CORS off]
    #[arg(long, value_name = "LIST", env = "MASSGEN_SERVER_CORS_ORIGINS")]
    pub cors_origins: Option<String>,
    /// Host names the server answers to (the `Host` header), comma-separated: `name`,
    /// `*.domain` or `*` for any; IP addresses and `localhost` always [default: loopback
    /// names only when bound to a loopback address, any otherwise]
    #[arg(long, value_name = "LIST", env = "MASSGEN_SERVER_ALLOWED_HOSTS")]
    pub allowed_hosts: Option<String>,
    /// Sessions running at once, more get 429 [default: no cap]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SESSIONS", value_parser = Number::<usize>::new())]
    pub max_sessions: Option<usize>,
    /// Sessions one API key (without keys: the server) runs at once, more get 429 [default:
    /// with keys and --max-sessions, a quarter of it (at least 1); else no cap]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SESSIONS_PER_KEY", value_parser = Number::<usize>::new())]
    pub max_sessions_per_key: Option<usize>,
    /// Requests per minute per API key [default: no limit]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE", value_parser = Number::<u32>::new())]
    pub rate_limit_per_minute: Option<u32>,
    /// Requests a key may send in a burst [default: the per-minute rate]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RATE_LIMIT_BURST", value_parser = Number::<u32>::new())]
    pub rate_limit_burst: Option<u32>,
    /// Failed authentications per minute per client address, then 429
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_AUTH_FAILURES_PER_MINUTE", value_parser = Number::<u32>::new(),
          default_value_t = ProductionSettings::default().auth_failures_per_minute)]
    pub auth_failures_per_minute: u32,
    /// Upstream calls one session may make [default: no cap]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_UPSTREAM_CALLS", value_parser = Number::<u32>::new())]
    pub max_upstream_calls: Option<u32>,
    /// USD one session may spend; panels and requests may only set less [default: no limit]
    #[arg(long, value_name = "USD", env = "MASSGEN_SERVER_MAX_SESSION_COST_USD", value_parser = Number::<f64>::new())]
    pub max_session_cost_usd: Option<f64>,
    /// USD one API key may spend per UTC day, then 429 insufficient_quota [default: no limit]
    #[arg(long, value_name = "USD", env = "MASSGEN_SERVER_MAX_KEY_COST_USD_PER_DAY", value_parser = Number::<f64>::new())]
    pub max_key_cost_usd_per_day: Option<f64>,
    /// Time to receive a request's headers
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_HEADER_TIMEOUT_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().header_read_timeout.as_secs())]
    pub header_timeout_seconds: u64,
    /// Time to receive a request's whole body
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_BODY_TIMEOUT_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().body_read_timeout.as_secs())]
    pub body_timeout_seconds: u64,
    /// Seconds a connection may stay open with no request in flight
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_IDLE_TIMEOUT_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().idle_timeout.as_secs())]
    pub idle_timeout_seconds: u64,
    /// Open connections at once; more are closed at once
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_CONNECTIONS", value_parser = Number::<usize>::new(),
          default_value_t = ProductionSettings::default().max_connections)]
    pub max_connections: usize,
    /// Open connections from one client address at once; more from it are closed at once
    /// [default: half of --max-connections]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_CONNECTIONS_PER_ADDRESS", value_parser = Number::<usize>::new())]
    pub max_connections_per_address: Option<usize>,
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_BUFFERED_BODY_BYTES", value_parser = Number::<usize>::new(),
          help = format!(
              "Request body bytes all requests together may hold until their responses are \
               done; past it a request waits up to 2 s, then gets 503 [default: {}, or \
               --max-body-bytes if larger]",
              ProductionSettings::default().max_buffered_body_bytes
          ))]
    pub max_buffered_body_bytes: Option<usize>,
    /// Bytes of stored Responses API responses one API key (without keys: the server)
    /// may hold; past it a `store: true` request gets 429 storage_quota_exceeded
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_STORED_BYTES_PER_KEY", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().max_stored_bytes_per_key)]
    pub max_stored_bytes_per_key: u64,
    /// Seconds a streaming client may leave its buffer full (not reading) before it is
    /// dropped as a disconnect
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_CLIENT_STALL_TIMEOUT_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().client_stall_timeout.as_secs())]
    pub client_stall_timeout_seconds: u64,
    /// Readers of one session's event stream at once; more get 429
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SUBSCRIBERS_PER_SESSION", value_parser = Number::<usize>::new(),
          default_value_t = ProductionSettings::default().max_subscribers_per_session)]
    pub max_subscribers_per_session: usize,
    /// Readers of session event streams one API key (the whole server, without keys) holds
    /// at once; more get 429
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SUBSCRIBERS_PER_KEY", value_parser = Number::<usize>::new(),
          default_value_t = ProductionSettings::default().max_subscribers_per_key)]
    pub max_subscribers_per_key: usize,
    /// Where session records are kept: sqlite://PATH, postgres://USER:PASSWORD@HOST/DB or
    /// memory [default: sqlite://$XDG_DATA_HOME/massgen/records.db, else
    /// ~/.local/share/massgen/records.db]
    #[arg(
        long,
        value_name = "URL",
        env = "MASSGEN_SERVER_RECORDS_DB",
        hide_env_values = true
    )]
    pub records_db: Option<String>,
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_MAX", value_parser = Number::<usize>::new(),
          help = format!(
              "Session records kept: in memory with `memory`, in the database otherwise (and \
               finished ones waiting in memory while the database fails) [default: {} in \
               memory, {DB_RECORDS_MAX} in a database]",
              ProductionSettings::default().records_max_sessions
          ))]
    pub records_max: Option<usize>,
    /// Seconds between this process's heartbeats in the records database
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_HEARTBEAT_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().records_heartbeat.as_secs())]
    pub records_heartbeat_seconds: u64,
    /// A running session whose process sent no heartbeat for this long is marked
    /// interrupted
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_INTERRUPTED_AFTER_SECONDS", value_parser = Number::<u64>::new(),
          default_value_t = ProductionSettings::default().records_interrupted_after.as_secs())]
    pub records_interrupted_after_seconds: u64,
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_MAX_AGE_SECONDS", value_parser = Number::<u64>::new(),
          help = format!(
              "Seconds a finished session's record is kept [default: {} in memory, {} ({} \
               days) in a database]",
              ProductionSettings::default().records_max_age.as_secs(),
              DB_RECORDS_MAX_AGE.as_secs(),
              DB_RECORDS_MAX_AGE.as_secs() / 86_400
          ))]
    pub records_max_age_seconds: Option<u64>,
    /// Also write session records as files (MassGen's log layout)
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_RECORDS_DIR")]
    pub records_dir: Option<PathBuf>,
}

impl Default for ProductionArgs {
    fn default() -> Self {
        let d = ProductionSettings::default();
        Self {
            api_keys_file: None,
            protect_metrics: d.protect_metrics,
            cors_origins: None,
            allowed_hosts: None,
            max_sessions: None,
            max_sessions_per_key: None,
            rate_limit_per_minute: None,
            rate_limit_burst: None,
            auth_failures_per_minute: d.auth_failures_per_minute,
            max_upstream_calls: None,
            max_session_cost_usd: None,
            max_key_cost_usd_per_day: None,
            header_timeout_seconds: d.header_read_timeout.as_secs(),
            body_timeout_seconds: d.body_read_timeout.as_secs(),
            idle_timeout_seconds: d.idle_timeout.as_secs(),
            max_connections: d.max_connections,
            max_connections_per_address: None,
            max_buffered_body_bytes: None,
            max_stored_bytes_per_key: d.max_stored_bytes_per_key,
            client_stall_timeout_seconds: d.client_stall_timeout.as_secs(),
            max_subscribers_per_session: d.max_subscribers_per_session,
            max_subscribers_per_key: d.max_subscribers_per_key,
            records_db: None,
            records_max: None,
            records_heartbeat_seconds: d.records_heartbeat.as_secs(),
            records_interrupted_after_seconds: d.records_interrupted_after.as_secs(),
            records_max_age_seconds: None,
            records_dir: None,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct MockUpstreamArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (the bound address is printed).
    #[arg(long, default_value_t = 9000)]
    pub port: u16,
}
