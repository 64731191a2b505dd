//! Flags and `MASSGEN_SERVER_*` variables (as clap read them, flags first) to the settings
//! `serve` runs with: the checks clap cannot make (zero limits, one flag against another,
//! key sources that hold no key) and the defaults that depend on another flag.

use std::path::PathBuf;
use std::time::Duration;

use super::fatal::Fatal;
use super::flags::{DB_RECORDS_MAX, DB_RECORDS_MAX_AGE, ProductionArgs, ServeArgs};
use crate::config::{Env, ProductionSettings, RecordsDb, Secret, ServerSettings};

/// What `serve` will do: settings plus where the panels come from.
#[derive(Debug, Clone, PartialEq)]
pub struct ServePlan {
    pub settings: ServerSettings,
    pub default_config: Option<PathBuf>,
    pub configs_dir: Option<PathBuf>,
    pub demo: bool,
}

/// Checks what clap read from flags and `MASSGEN_SERVER_*` variables (flags win) and
/// applies the defaults that depend on other flags. `env` is read for
/// `MASSGEN_SERVER_API_KEYS` only, a list that has no flag: keys do not belong on a
/// command line.
pub fn resolve_serve(args: &ServeArgs, env: &Env) -> Result<ServePlan, Fatal> {
    if args.keepalive_seconds == 0 {
        return Err(Fatal::usage("--keepalive-seconds must be at least 1"));
    }
    if args.mcp_deadline_seconds == 0 {
        return Err(Fatal::usage("--mcp-deadline-seconds must be at least 1"));
    }
    if args.cache_ttl_seconds == Some(0) {
        return Err(Fatal::usage(
            "--cache-ttl-seconds must be at least 1 (leave it out to keep the cache off)",
        ));
    }
    let (config_paths_root, config_paths_env) = config_paths(args)?;
    let max_body_bytes = args.max_body_bytes;
    let max_buffered_body_bytes = match args.production.max_buffered_body_bytes {
        Some(n) if n < max_body_bytes => {
            return Err(Fatal::usage(format!(
                "--max-buffered-body-bytes ({n}) must be at least --max-body-bytes ({max_body_bytes}): \
                 a body the server accepts must fit in the budget"
            )));
        }
        Some(n) => n,
        None => ProductionSettings::default()
            .max_buffered_body_bytes
            .max(max_body_bytes),
    };
    let settings = ServerSettings {
        // An empty `MASSGEN_SERVER_HOST=` counts as not given, as every empty variable.
        host: if args.host.trim().is_empty() {
            ServerSettings::default().host
        } else {
            args.host.clone()
        },
        port: args.port,
        keepalive: Duration::from_secs(args.keepalive_seconds),
        max_body_bytes,
        allow_config_paths: args.allow_config_paths,
        config_paths_root,
        config_paths_env,
        allow_model_override: args.allow_model_override,
        allow_request_panels: args.allow_request_panels,
        allow_request_sampling: args.allow_request_sampling,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        debug: args.debug,
        default_model: given(&args.default_model),
        messages_default_panel: messages_default_panel(args)?,
        deliberation_format: args.deliberation_format,
        reasoning_secret: given(&args.reasoning_secret).map(massgen_core::Secret::new),
        production: {
            let mut production = resolve_production(&args.production, env)?;
            production.max_buffered_body_bytes = max_buffered_body_bytes;
            // Simulated sessions do not belong in the operator's records: `--demo` keeps
            // them in memory unless --records-db says otherwise.
            if args.demo && given(&args.production.records_db).is_none() {
                let memory = ProductionSettings::default();
                production.records_db = RecordsDb::Memory;
                production.records_max_sessions = args
                    .production
                    .records_max
                    .unwrap_or(memory.records_max_sessions);
                production.records_max_age = args
                    .production
                    .records_max_age_seconds
                    .map_or(memory.records_max_age, Duration::from_secs);
            }
            production
        },
        cache_ttl: args.cache_ttl_seconds.map(Duration::from_secs),
        mcp_deadline: Duration::from_secs(args.mcp_deadline_seconds),
    };
    Ok(ServePlan {
        settings,
        default_config: given_path(&args.config),
        configs_dir: given_path(&args.configs_dir),
        demo: args.demo,
    })
}

/// `--config-paths-root` (else `--configs-dir`) and `--config-paths-env`. With
/// `--allow-config-paths` a root is required: without one any file the server can read,
/// its own records included, would be a config a request can load.
fn config_paths(args: &ServeArgs) -> Result<(Option<PathBuf>, Vec<String>), Fatal> {
    let root = given_path(&args.config_paths_root).or_else(|| given_path(&args.configs_dir));
    if args.allow_config_paths && root.is_none() {
        return Err(Fatal::usage(
            "--allow-config-paths needs the folder massgen/path: files must be in: \
             --config-paths-root DIR (or --configs-dir DIR)",
        ));
    }
    let vars: Vec<String> = given(&args.config_paths_env)
        .map(|list| split_list(&list).map(str::to_string).collect())
        .unwrap_or_default();
    if let Some(bad) = vars
        .iter()
        .find(|v| !crate::config::expand::is_variable_name(v))
    {
        return Err(Fatal::usage(format!(
            "--config-paths-env: '{bad}' is not a variable name (letters, digits and '_', not starting with a digit)"
        )));
    }
    Ok((root, vars))
}

/// `--messages-default-panel`: a panel name (as in `massgen/<name>`).
fn messages_default_panel(args: &ServeArgs) -> Result<Option<String>, Fatal> {
    let Some(name) = given(&args.messages_default_panel).map(|n| n.trim().to_string()) else {
        return Ok(None);
    };
    if !crate::config::valid_panel_name(&name) {
        return Err(Fatal::usage(format!(
            "--messages-default-panel: '{name}' is not a panel name (letters, digits, '-', '_', '.')"
        )));
    }
    Ok(Some(name))
}

/// The production part of [`resolve_serve`]; `ProductionArgs::default()` (nothing given)
/// gives the command line's defaults.
pub fn resolve_production(args: &ProductionArgs, env: &Env) -> Result<ProductionSettings, Fatal> {
    let (records_heartbeat, records_interrupted_after) = heartbeat_flags(args)?;
    let api_keys = api_keys(args, env)?;
    let count = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    for (value, name) in [
        (args.max_sessions.map(count), "--max-sessions"),
        (
            args.max_sessions_per_key.map(count),
            "--max-sessions-per-key",
        ),
        (
            args.rate_limit_per_minute.map(u64::from),
            "--rate-limit-per-minute",
        ),
        (args.rate_limit_burst.map(u64::from), "--rate-limit-burst"),
        (
            Some(u64::from(args.auth_failures_per_minute)),
            "--auth-failures-per-minute",
        ),
        (
            args.max_upstream_calls.map(u64::from),
            "--max-upstream-calls",
        ),
        (
            Some(args.header_timeout_seconds),
            "--header-timeout-seconds",
        ),
        (Some(args.body_timeout_seconds), "--body-timeout-seconds"),
        (Some(args.idle_timeout_seconds), "--idle-timeout-seconds"),
        (
            Some(args.client_stall_timeout_seconds),
            "--client-stall-timeout-seconds",
        ),
        (Some(count(args.max_connections)), "--max-connections"),
        (
            args.max_connections_per_address.map(count),
            "--max-connections-per-address",
        ),
        (
            Some(count(args.max_subscribers_per_session)),
            "--max-subscribers-per-session",
        ),
        (
            Some(count(args.max_subscribers_per_key)),
            "--max-subscribers-per-key",
        ),
        (
            Some(args.max_stored_bytes_per_key),
            "--max-stored-bytes-per-key",
        ),
    ] {
        if value == Some(0) {
            return Err(Fatal::usage(format!("{name} must be at least 1")));
        }
    }
    for (usd, name) in [
        (args.max_session_cost_usd, "--max-session-cost-usd"),
        (args.max_key_cost_usd_per_day, "--max-key-cost-usd-per-day"),
    ] {
        if let Some(usd) = usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(Fatal::usage(format!("{name} must be above 0, got {usd}")));
        }
    }
    let records_db = match given(&args.records_db) {
        Some(text) => RecordsDb::parse(&text)
            .map_err(|e| Fatal::usage(format!("--records-db / MASSGEN_SERVER_RECORDS_DB: {e}")))?,
        // Without either variable the store fails when opened, not here: commands that
        // never open it (--print-config) still work.
        None => RecordsDb::default_sqlite(env("XDG_DATA_HOME").as_deref(), env("HOME").as_deref())
            .unwrap_or(RecordsDb::Unplaced),
    };
    let memory = ProductionSettings::default();
    let in_memory = matches!(records_db, RecordsDb::Memory);
    // One key's part of the server's sessions, so no key can take every slot.
    let max_sessions_per_key = args.max_sessions_per_key.or(args
        .max_sessions
        .filter(|_| !api_keys.is_empty())
        .map(|n| n.div_ceil(4)));
    Ok(ProductionSettings {
        api_keys,
        protect_metrics: args.protect_metrics,
        cors_origins: given(&args.cors_origins)
            .map(|list| split_list(&list).map(str::to_string).collect())
            .unwrap_or_default(),
        allowed_hosts: allowed_hosts(args)?,
        max_concurrent_sessions: args.max_sessions,
        max_sessions_per_key,
        rate_limit_per_minute: args.rate_limit_per_minute,
        rate_limit_burst: args.rate_limit_burst,
        auth_failures_per_minute: args.auth_failures_per_minute,
        max_upstream_calls: args.max_upstream_calls,
        max_session_cost_usd: args.max_session_cost_usd,
        max_key_cost_usd_per_day: args.max_key_cost_usd_per_day,
        header_read_timeout: Duration::from_secs(args.header_timeout_seconds),
        body_read_timeout: Duration::from_secs(args.body_timeout_seconds),
        idle_timeout: Duration::from_secs(args.idle_timeout_seconds),
        max_connections: args.max_connections,
        max_connections_per_address: args
            .max_connections_per_address
            .unwrap_or((args.max_connections / 2).max(1)),
        max_buffered_body_bytes: args
            .max_buffered_body_bytes
            .unwrap_or(memory.max_buffered_body_bytes),
        max_stored_bytes_per_key: args.max_stored_bytes_per_key,
        client_stall_timeout: Duration::from_secs(args.client_stall_timeout_seconds),
        max_subscribers_per_session: args.max_subscribers_per_session,
        max_subscribers_per_key: args.max_subscribers_per_key,
        records_max_sessions: args.records_max.unwrap_or(if in_memory {
            memory.records_max_sessions
        } else {
            DB_RECORDS_MAX
        }),
        records_max_age: args.records_max_age_seconds.map_or(
            if in_memory {
                memory.records_max_age
            } else {
                DB_RECORDS_MAX_AGE
            },
            Duration::from_secs,
        ),
        records_dir: given_path(&args.records_dir),
        records_heartbeat,
        records_interrupted_after,
        records_db,
    })
}

/// `--allowed-hosts`: host names, `*.domain` patterns or `*`, lower-cased; a port or a
/// scheme is a mistake worth naming (the check compares names only).
fn allowed_hosts(args: &ProductionArgs) -> Result<Vec<String>, Fatal> {
    let Some(list) = given(&args.allowed_hosts) else {
        return Ok(Vec::new());
    };
    let mut hosts = Vec::new();
    for entry in split_list(&list) {
        let name = entry.strip_prefix("*.").unwrap_or(entry);
        let valid = entry == "*"
            || (!name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        if !valid {
            return Err(Fatal::usage(format!(
                "--allowed-hosts: '{entry}' is not a host name, `*.domain` or `*` (no scheme or port)"
            )));
        }
        hosts.push(entry.to_ascii_lowercase());
    }
    Ok(hosts)
}

/// `MASSGEN_SERVER_API_KEYS` and `--api-keys-file`. A key source that was given but holds
/// no key is an operator's mistake that would leave the API open: refuse to start instead
/// (fail closed). An empty variable counts as not given, as everywhere else.
fn api_keys(args: &ProductionArgs, env: &Env) -> Result<Vec<Secret>, Fatal> {
    let mut api_keys: Vec<Secret> = Vec::new();
    if let Some(list) = env("MASSGEN_SERVER_API_KEYS").filter(|l| !l.trim().is_empty()) {
        api_keys.extend(split_list(&list).map(Secret::new));
        if api_keys.is_empty() {
            return Err(Fatal::usage(
                "MASSGEN_SERVER_API_KEYS is set but holds no key (only commas and spaces): \
                 set real keys or unset it",
            ));
        }
    }
    if let Some(path) = given_path(&args.api_keys_file) {
        // The error names the file only: its content is secret.
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Fatal::usage(format!(
                "cannot read the API keys file {}: {e}",
                path.display()
            ))
        })?;
        let before = api_keys.len();
        api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(Secret::new),
        );
        if api_keys.len() == before {
            return Err(Fatal::usage(format!(
                "the API keys file {} holds no key (only blank or # lines): add keys or drop \
                 --api-keys-file",
                path.display()
            )));
        }
    }
    Ok(api_keys)
}

/// `--records-heartbeat-seconds` and `--records-interrupted-after-seconds`: a replica's
/// running sessions are marked interrupted by the others after the second without its
/// heartbeat, so it must allow a few missed beats (a slow but live replica is not gone).
fn heartbeat_flags(args: &ProductionArgs) -> Result<(Duration, Duration), Fatal> {
    if args.records_heartbeat_seconds == 0 {
        return Err(Fatal::usage(
            "--records-heartbeat-seconds must be at least 1",
        ));
    }
    let heartbeat = Duration::from_secs(args.records_heartbeat_seconds);
    let after = Duration::from_secs(args.records_interrupted_after_seconds);
    // A huge heartbeat must be refused, not overflow the multiplication.
    if heartbeat.checked_mul(3).is_none_or(|three| after < three) {
        return Err(Fatal::usage(format!(
            "--records-interrupted-after-seconds ({}) must be at least 3 x --records-heartbeat-seconds ({}): a live replica's sessions would be marked interrupted between two heartbeats",
            after.as_secs(),
            heartbeat.as_secs()
        )));
    }
    Ok((heartbeat, after))
}

/// A text value, an empty one (`MASSGEN_SERVER_HOST=`) counting as not given.
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

fn given_path(value: &Option<PathBuf>) -> Option<PathBuf> {
    value.clone().filter(|p| !p.as_os_str().is_empty())
}

fn split_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}
