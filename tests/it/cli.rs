//! The command line: flag/env merging as a function, and the built binary black-box.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;
use massgen::cli::{
    Cli, Command as Sub, Fatal, NO_CONFIG_HINT, ServeArgs, ServePlan, build_catalog, resolve_serve,
};
use massgen::config::{ProductionSettings, RecordsDb, Secret, process_env};

use crate::support::{env_of, in_child_env};

/// `massgen serve ARGV…` as clap reads it (flags, then this process's `MASSGEN_SERVER_*`).
fn parse_serve(argv: &[&str]) -> Result<ServeArgs, Fatal> {
    let mut full = vec!["massgen", "serve"];
    full.extend_from_slice(argv);
    match Cli::try_parse_from(full) {
        Ok(Cli {
            command: Sub::Serve(args),
        }) => Ok(args),
        Ok(other) => panic!("not a serve command: {other:?}"),
        Err(e) => Err(Fatal {
            code: u8::try_from(e.exit_code()).unwrap_or(1),
            message: e.to_string(),
        }),
    }
}

/// The plan of `massgen serve ARGV…` in this process's environment.
fn plan_of(argv: &[&str]) -> Result<ServePlan, Fatal> {
    resolve_serve(&parse_serve(argv)?, &process_env)
}

// clap reads the process environment itself: each test below runs its body in a child
// process whose environment is exactly the variables it names.

#[test]
fn defaults_without_flags_or_env() {
    in_child_env("cli::defaults_without_flags_or_env", &[], || {
        let plan = plan_of(&[]).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(plan.settings.cache_ttl, None, "the response cache is off");
        let expected = massgen::config::ServerSettings {
            production: cli_production_defaults(),
            ..massgen::config::ServerSettings::default()
        };
        assert_eq!(plan.settings, expected);
        assert_eq!(plan.settings.host, "127.0.0.1");
        assert_eq!(plan.settings.port, 4000);
        assert!(
            plan.settings.allow_model_override,
            "massgen/model: is on by default"
        );
        assert!(
            !plan.settings.allow_request_panels,
            "massgen.models is off by default"
        );
        assert!(
            !plan.settings.allow_request_sampling,
            "request sampling is off by default"
        );
        assert_eq!(plan.default_config, None);
        assert_eq!(plan.configs_dir, None);
        assert!(!plan.demo);
    });
}

#[test]
fn env_fallbacks_apply() {
    let e = [
        ("MASSGEN_SERVER_HOST", "0.0.0.0"),
        ("MASSGEN_SERVER_PORT", "8080"),
        ("MASSGEN_SERVER_DEFAULT_CONFIG", "team.yaml"),
        ("MASSGEN_SERVER_DEFAULT_MODEL", "panel"),
        ("MASSGEN_SERVER_DEBUG", "true"),
        ("MASSGEN_SERVER_CONFIGS_DIR", "configs"),
        ("MASSGEN_SERVER_ALLOW_CONFIG_PATHS", "1"),
        ("MASSGEN_SERVER_ALLOW_MODEL_OVERRIDE", "off"),
        ("MASSGEN_SERVER_ALLOW_REQUEST_PANELS", "true"),
        ("MASSGEN_SERVER_ALLOW_REQUEST_SAMPLING", "1"),
    ];
    in_child_env("cli::env_fallbacks_apply", &e, || {
        let plan = plan_of(&[]).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(plan.settings.host, "0.0.0.0");
        assert_eq!(plan.settings.port, 8080);
        assert_eq!(plan.settings.default_model.as_deref(), Some("panel"));
        assert!(plan.settings.debug);
        assert!(plan.settings.allow_config_paths);
        assert!(!plan.settings.allow_model_override);
        assert!(plan.settings.allow_request_panels);
        assert!(plan.settings.allow_request_sampling);
        assert_eq!(plan.default_config, Some(PathBuf::from("team.yaml")));
        assert_eq!(plan.configs_dir, Some(PathBuf::from("configs")));
    });
}

#[test]
fn flags_win_over_env() {
    let e = [
        ("MASSGEN_SERVER_HOST", "0.0.0.0"),
        ("MASSGEN_SERVER_PORT", "8080"),
        ("MASSGEN_SERVER_DEFAULT_CONFIG", "env.yaml"),
        ("MASSGEN_SERVER_CONFIGS_DIR", "env-dir"),
        ("MASSGEN_SERVER_DEBUG", "false"),
        ("MASSGEN_SERVER_ALLOW_MODEL_OVERRIDE", "false"),
    ];
    in_child_env("cli::flags_win_over_env", &e, || {
        let plan = plan_of(&[
            "--host",
            "::1",
            "--port",
            "0",
            "--config",
            "flag.yaml",
            "--configs-dir",
            "flag-dir",
            "--debug",
            "--demo",
            "--keepalive-seconds",
            "5",
            "--max-body-bytes",
            "1000",
            "--shutdown-grace-seconds",
            "2",
            "--allow-config-paths",
            "--allow-model-override",
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let s = &plan.settings;
        assert_eq!((s.host.as_str(), s.port), ("::1", 0));
        assert!(s.debug && s.allow_config_paths && s.allow_model_override && plan.demo);
        assert_eq!(s.keepalive, Duration::from_secs(5));
        assert_eq!(s.max_body_bytes, 1000);
        assert_eq!(s.shutdown_grace, Duration::from_secs(2));
        assert_eq!(plan.default_config, Some(PathBuf::from("flag.yaml")));
        assert_eq!(plan.configs_dir, Some(PathBuf::from("flag-dir")));
    });
}

#[test]
fn bad_env_values_are_usage_errors() {
    let port = [("MASSGEN_SERVER_PORT", "http")];
    in_child_env("cli::bad_env_values_are_usage_errors", &port, || {
        let err = plan_of(&[]).err();
        assert!(
            err.as_ref()
                .is_some_and(|f| f.code == 2 && f.message.contains("MASSGEN_SERVER_PORT")),
            "{err:?}"
        );
    });
}

#[test]
fn bad_switch_values_are_usage_errors() {
    let debug = [("MASSGEN_SERVER_DEBUG", "sometimes")];
    in_child_env("cli::bad_switch_values_are_usage_errors", &debug, || {
        let err = plan_of(&[]).err();
        assert!(
            err.as_ref()
                .is_some_and(|f| f.code == 2 && f.message.contains("MASSGEN_SERVER_DEBUG")),
            "{err:?}"
        );
        let err = plan_of(&["--keepalive-seconds", "0"]).err();
        assert!(err.is_some_and(|f| f.code == 2));
    });
}

#[test]
fn the_response_cache_is_off_unless_given_a_ttl_of_at_least_one_second() {
    let ttl = [("MASSGEN_SERVER_CACHE_TTL_SECONDS", "30")];
    in_child_env(
        "cli::the_response_cache_is_off_unless_given_a_ttl_of_at_least_one_second",
        &ttl,
        || {
            let ttl = |argv: &[&str]| plan_of(argv).map(|p| p.settings.cache_ttl).ok();
            assert_eq!(ttl(&[]), Some(Some(std::time::Duration::from_secs(30))));
            assert_eq!(
                ttl(&["--cache-ttl-seconds", "5"]),
                Some(Some(std::time::Duration::from_secs(5)))
            );
            let err = plan_of(&["--cache-ttl-seconds", "0"]).err();
            assert!(err.is_some_and(|f| f.code == 2 && f.message.contains("--cache-ttl-seconds")));
        },
    );
}

#[test]
fn deliberation_format_from_env_or_flag_and_bad_values_refused() {
    use massgen::config::DeliberationFormat;
    let e = [("MASSGEN_SERVER_DELIBERATION_FORMAT", "think_tags")];
    in_child_env(
        "cli::deliberation_format_from_env_or_flag_and_bad_values_refused",
        &e,
        || {
            let format = |argv: &[&str]| plan_of(argv).map(|p| p.settings.deliberation_format);
            assert_eq!(format(&[]), Ok(DeliberationFormat::ThinkTags));
            assert_eq!(
                format(&["--deliberation-format", "none"]),
                Ok(DeliberationFormat::None)
            );
            let err = format(&["--deliberation-format", "tags"]).err();
            assert!(
                err.as_ref().is_some_and(
                    |f| f.code == 2 && f.message.contains("reasoning, think_tags, none")
                ),
                "{err:?}"
            );
        },
    );
}

#[test]
fn catalog_from_plan_demo_and_hint() {
    in_child_env("cli::catalog_from_plan_demo_and_hint", &[], || {
        let none = env_of(&[]);
        let plan = plan_of(&[]).unwrap_or_else(|e| panic!("{e:?}"));
        let err = build_catalog(&plan, None, none.as_ref()).err();
        assert!(err.is_some_and(|f| f.code == 2 && f.message == NO_CONFIG_HINT));

        let demo = build_catalog(&plan, Some("http://127.0.0.1:1/v1"), none.as_ref())
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(demo.default.as_ref().map(|p| p.name.as_str()), Some("demo"));
        assert!(demo.named.is_empty());

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("team.yaml");
        std::fs::write(
            &file,
            "agent: {id: solo, backend: {type: ollama, model: m}}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let plan = plan_of(&["--demo", "--config", &file.display().to_string()])
            .unwrap_or_else(|e| panic!("{e:?}"));
        let both = build_catalog(&plan, Some("http://127.0.0.1:1/v1"), none.as_ref())
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(both.default.as_ref().map(|p| p.name.as_str()), Some("team"));
        assert_eq!(both.named.keys().collect::<Vec<_>>(), ["demo"]);
    });
}

#[test]
fn production_defaults() {
    in_child_env("cli::production_defaults", &[], || {
        let none = plan_of(&[]).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(none.settings.production, cli_production_defaults());
        // With HOME, the default records file is under it; XDG_DATA_HOME wins.
        let home = env_of(&[("HOME", "/home/u")]);
        let args = parse_serve(&[]).unwrap_or_else(|e| panic!("{e:?}"));
        let plan = resolve_serve(&args, home.as_ref()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            plan.settings.production.records_db,
            RecordsDb::Sqlite("/home/u/.local/share/massgen/records.db".into())
        );
        // --demo keeps its simulated sessions in memory, with memory's bounds.
        let demo = plan_of(&["--demo"]).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(demo.settings.production, ProductionSettings::default());
    });
}

/// `ProductionSettings::default()` is what an in-process server uses (records in
/// memory); the command line defaults to the SQLite file, which in an environment
/// without HOME or XDG_DATA_HOME has no place (opening it fails, naming the flag).
fn cli_production_defaults() -> ProductionSettings {
    ProductionSettings {
        records_db: RecordsDb::Unplaced,
        records_max_sessions: 100_000,
        records_max_age: Duration::from_secs(30 * 24 * 3600),
        ..ProductionSettings::default()
    }
}

#[test]
fn production_env_and_flags() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("keys");
    std::fs::write(&file, "# ops keys\nk-file-1\n\n  k-file-2  \n")
        .unwrap_or_else(|e| panic!("{e}"));
    let file = file.display().to_string();
    let e = [
        ("MASSGEN_SERVER_API_KEYS", " k-env-1 ,k-env-2,"),
        ("MASSGEN_SERVER_MAX_SESSIONS", "8"),
        ("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE", "60"),
        (
            "MASSGEN_SERVER_CORS_ORIGINS",
            "https://a.example, https://b.example",
        ),
        ("MASSGEN_SERVER_PROTECT_METRICS", "true"),
        ("MASSGEN_SERVER_RECORDS_DIR", "/var/log/massgen"),
        ("MASSGEN_SERVER_MAX_KEY_COST_USD_PER_DAY", "0.75"),
        ("MASSGEN_TEST_KEYS_FILE", file.as_str()),
    ];
    in_child_env("cli::production_env_and_flags", &e, || {
        let file = process_env("MASSGEN_TEST_KEYS_FILE").unwrap_or_default();
        let plan = plan_of(&[
            "--api-keys-file",
            &file,
            "--max-sessions",
            "2",
            "--max-upstream-calls",
            "40",
            "--header-timeout-seconds",
            "5",
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        let p = plan.settings.production;
        let keys: Vec<&str> = p.api_keys.iter().map(Secret::expose).collect();
        assert_eq!(keys, ["k-env-1", "k-env-2", "k-file-1", "k-file-2"]);
        assert_eq!(p.max_concurrent_sessions, Some(2), "flag wins");
        // With keys, one key's part of the sessions: a quarter, rounded up.
        assert_eq!(p.max_sessions_per_key, Some(1));
        assert_eq!(p.rate_limit_per_minute, Some(60));
        assert_eq!(p.max_upstream_calls, Some(40));
        assert_eq!(p.max_key_cost_usd_per_day, Some(0.75));
        assert_eq!(p.header_read_timeout, Duration::from_secs(5));
        assert_eq!(p.cors_origins, ["https://a.example", "https://b.example"]);
        assert!(p.protect_metrics);
        assert_eq!(p.records_dir, Some(PathBuf::from("/var/log/massgen")));
        assert!(!format!("{p:?}").contains("k-env-1"), "keys never print");
    });
}

#[test]
fn a_keys_part_of_the_sessions_defaults_to_a_quarter() {
    let keyed = [
        ("MASSGEN_SERVER_API_KEYS", "k-1,k-2"),
        ("MASSGEN_SERVER_MAX_SESSIONS", "10"),
    ];
    in_child_env(
        "cli::a_keys_part_of_the_sessions_defaults_to_a_quarter",
        &keyed,
        || {
            let p = plan_of(&[])
                .unwrap_or_else(|e| panic!("{e:?}"))
                .settings
                .production;
            assert_eq!(p.max_sessions_per_key, Some(3));
            let given = plan_of(&["--max-sessions-per-key", "10"])
                .unwrap_or_else(|e| panic!("{e:?}"))
                .settings
                .production;
            assert_eq!(given.max_sessions_per_key, Some(10), "the flag wins");
        },
    );
}

#[test]
fn without_keys_no_part_of_the_sessions_is_set() {
    // Every request of a keyless server is the same caller.
    in_child_env(
        "cli::without_keys_no_part_of_the_sessions_is_set",
        &[("MASSGEN_SERVER_MAX_SESSIONS", "10")],
        || {
            let p = plan_of(&[])
                .unwrap_or_else(|e| panic!("{e:?}"))
                .settings
                .production;
            assert_eq!(p.max_sessions_per_key, None);
        },
    );
}

#[test]
fn production_rejects_bad_values_without_echoing_keys() {
    let bad = [("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE", "lots")];
    in_child_env(
        "cli::production_rejects_bad_values_without_echoing_keys",
        &bad,
        || {
            let e = plan_of(&[]).unwrap_err();
            assert!(
                e.message.contains("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE"),
                "{}",
                e.message
            );
        },
    );
}

#[test]
fn production_rejects_zero_limits_and_a_missing_keys_file() {
    in_child_env(
        "cli::production_rejects_zero_limits_and_a_missing_keys_file",
        &[],
        || {
            let zero = plan_of(&["--max-sessions", "0"]).unwrap_err();
            assert_eq!(zero.code, 2);
            for bad in ["0", "-1", "NaN", "inf"] {
                let e = plan_of(&[&format!("--max-key-cost-usd-per-day={bad}")]).unwrap_err();
                assert_eq!(e.code, 2, "{bad}");
                assert!(
                    e.message
                        .contains("--max-key-cost-usd-per-day must be above 0"),
                    "{bad}: {}",
                    e.message
                );
            }
            let plan = plan_of(&["--max-key-cost-usd-per-day", "2.5"]).unwrap();
            assert_eq!(plan.settings.production.max_key_cost_usd_per_day, Some(2.5));
            // Replicas mark each other's sessions interrupted: not between two heartbeats.
            let beat = plan_of(&["--records-heartbeat-seconds", "0"]).unwrap_err();
            assert!(
                beat.message
                    .contains("--records-heartbeat-seconds must be at least 1")
            );
            let soon = plan_of(&[
                "--records-heartbeat-seconds",
                "10",
                "--records-interrupted-after-seconds",
                "29",
            ])
            .unwrap_err();
            assert_eq!(soon.code, 2);
            assert!(soon.message.contains("at least 3 x"), "{}", soon.message);
            let plan = plan_of(&["--records-interrupted-after-seconds", "30"]).unwrap();
            assert_eq!(
                plan.settings.production.records_interrupted_after,
                Duration::from_secs(30)
            );
            let missing = plan_of(&["--api-keys-file", "/nonexistent/keys"]).unwrap_err();
            assert!(
                missing.message.contains("/nonexistent/keys"),
                "{}",
                missing.message
            );
        },
    );
}

// ---- the binary ----

fn massgen(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_massgen"));
    // A clean environment and an empty working directory: no MASSGEN_*, no keys, no .env;
    // the records file in that directory.
    cmd.env_clear().current_dir(dir).env("XDG_DATA_HOME", dir);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    // These invocations exit on their own (help, errors); the bound keeps a regression from
    // hanging the suite.
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().ok().flatten().is_some() {
            return child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("massgen did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_and_version() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = run(massgen(dir.path()).arg("--help"));
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(
        help.contains("serve") && help.contains("mock-upstream"),
        "{help}"
    );

    let out = run(massgen(dir.path()).args(["serve", "--help"]));
    let help = text(&out.stdout);
    for flag in [
        "--config",
        "--configs-dir",
        "--demo",
        "--port",
        "MASSGEN_SERVER_PORT",
    ] {
        assert!(help.contains(flag), "{flag} missing in {help}");
    }

    let out = run(massgen(dir.path()).arg("--version"));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

/// Item 8 of issue 24: a new user reading `--help` learns all three doors, by name and
/// path, both at the top and for `serve`.
#[test]
fn help_names_all_three_doors() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for argv in [&["--help"][..], &["serve", "--help"][..]] {
        let out = run(massgen(dir.path()).args(argv));
        assert!(out.status.success(), "{argv:?}");
        let help = text(&out.stdout);
        for door in [
            "Chat Completions",
            "/v1/chat/completions",
            "Responses",
            "/v1/responses",
            "Anthropic Messages",
            "/v1/messages",
        ] {
            assert!(help.contains(door), "{argv:?}: {door} missing in {help}");
        }
    }
}

#[test]
fn bad_config_exits_2_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("team.yaml");
    std::fs::write(
        &file,
        "agents:\n  - id: a\n    backend: {type: ollama, model: m}\n  - id: b\n    backend: {type: foo, model: m}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = run(massgen(dir.path()).args(["serve", "--port", "0", "--config", "team.yaml"]));
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("team.yaml: agents[1].backend.type: unknown backend type 'foo'"),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty());
}

#[test]
fn missing_key_exits_2_with_variable_name() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("p.yaml"),
        "agent: {backend: {type: openai, model: m}}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = run(massgen(dir.path()).args(["serve", "--port", "0", "--config", "p.yaml"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("set OPENAI_API_KEY"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn no_config_exits_2_with_hint() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = run(massgen(dir.path()).args(["serve", "--port", "0"]));
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--config FILE") && stderr.contains("--demo"),
        "{stderr}"
    );
}

/// Reads the first stdout line of `child`, waiting at most 20 s.
fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(line) => line.trim_end().to_string(),
        Err(_) => {
            let _ = child.kill();
            panic!("no address line in time");
        }
    }
}

fn http_get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// Kills (or has already stopped) `child`, and reaps it within 10 s.
fn wait_bounded(child: &mut Child) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn mock_upstream_prints_address_and_serves_health() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut child = massgen(dir.path())
        .args(["mock-upstream", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let line = first_line(&mut child);
    let addr = line
        .strip_prefix("mock-upstream listening on http://")
        .unwrap_or_else(|| panic!("unexpected line: {line}"))
        .to_string();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    let response = http_get(&addr, "/health");
    let _ = child.kill();
    wait_bounded(&mut child);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("ok"), "{response}");
}

#[cfg(unix)]
#[test]
fn serve_demo_announces_address_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut child = massgen(dir.path())
        .args([
            "serve",
            "--demo",
            "--port",
            "0",
            "--shutdown-grace-seconds",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let line = first_line(&mut child);
    assert!(
        line.starts_with("massgen listening on http://127.0.0.1:") && !line.ends_with(":0"),
        "{line}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(killed, "could not send SIGTERM");
    let status = wait_bounded(&mut child);
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    assert!(status.is_some_and(|s| s.success()), "{status:?}: {stderr}");
    // The start-up log names the demo panel's agents, types and models.
    assert!(
        stderr.contains("sim-analyst(chatcompletion/sim-analyst:"),
        "{stderr}"
    );
    assert!(stderr.contains("config=<built-in demo>"), "{stderr}");
}

#[test]
fn dot_env_in_the_working_directory_provides_keys() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("team.yaml"),
        "agents:\n  - id: a\n    backend: {type: groq, model: m}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // A port that is taken: once the config loads, start-up fails at bind (exit 1), which
    // tells a loaded key apart from a missing one (exit 2) without leaving a server running.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = taken
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .port()
        .to_string();
    let args = [
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--config",
        "team.yaml",
    ];

    let without = run(massgen(dir.path()).args(args));
    assert_eq!(without.status.code(), Some(2), "{}", text(&without.stderr));
    assert!(text(&without.stderr).contains("GROQ_API_KEY"));

    std::fs::write(dir.path().join(".env"), "GROQ_API_KEY=gsk-from-dotenv\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let with = run(massgen(dir.path()).args(args));
    let stderr = text(&with.stderr);
    assert_eq!(with.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("gsk-from-dotenv"), "{stderr}");
    drop(taken);
}
