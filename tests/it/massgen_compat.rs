//! MassGen configs (issue 14, loading): MassGen's own keys dropped with a warning each,
//! `betas` and `extra_body`, the `chatcompletion` key from the base_url host, round
//! timeouts, MassGen's orchestrator keys and voting rubrics, `${VAR}` in `mcp_servers`,
//! local agent programs, the YAML MassGen's examples use, `check-config`, and a capture of
//! what reaches the upstream.

use std::path::Path;
use std::time::Duration;

use massgen::app::{HttpProviders, ProviderFactory};
use massgen::cli::check_report;
use massgen::config::massgen_keys::{
    BACKEND_DROPPED, LOCAL_AGENT_PROGRAMS, ORCHESTRATOR_NOT_IMPLEMENTED,
};
use massgen::config::{ConfigCheck, PanelConfig, check_panel, parse_panel};
use massgen_core::coordination::{FinalAnswerStrategy, Strictness};
use massgen_providers::http_client;
use serde_json::{Value, json};

use crate::support::native::{Reply, coordination_turn, serve};
use crate::support::{TestEnv, env_of, startup_log, write};

fn keys() -> TestEnv {
    env_of(&[
        ("OPENAI_API_KEY", "sk-openai"),
        ("ANTHROPIC_API_KEY", "sk-ant"),
        ("GEMINI_API_KEY", "g-key"),
        ("CEREBRAS_API_KEY", "csk-cerebras"),
        ("NGC_API_KEY", "nvapi-ngc"),
        ("MOONSHOT_API_KEY", "sk-moon"),
    ])
}

fn parse(yaml: &str, env: &TestEnv) -> Result<PanelConfig, String> {
    parse_panel("team", Path::new("team.yaml"), yaml, env.as_ref()).map_err(|e| e.to_string())
}

/// Errors and warnings of `yaml` as `check-config` sees them.
fn check(yaml: &str, env: &TestEnv) -> ConfigCheck {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "team.yaml", yaml);
    check_panel(&file, env.as_ref())
}

fn warned(check: &ConfigCheck, key: &str) -> Option<String> {
    check
        .warnings
        .iter()
        .find(|w| w.key == key)
        .map(|w| w.why.clone())
}

/// Every MassGen-only backend key of the catalogue, each with a value of its usual shape.
fn every_dropped_key() -> serde_json::Map<String, Value> {
    BACKEND_DROPPED
        .iter()
        .flat_map(|g| g.keys.iter())
        .map(|k| (k.to_string(), json!(true)))
        .collect()
}

fn backend_yaml(fields: &serde_json::Map<String, Value>) -> String {
    // JSON is YAML: a flow mapping the loader reads as written.
    Value::Object(fields.clone()).to_string()
}

#[test]
fn every_massgen_only_backend_key_is_dropped_with_one_warning_each() {
    let mut backend = every_dropped_key();
    backend.insert("type".into(), json!("openai"));
    backend.insert("model".into(), json!("gpt-5-mini"));
    backend.insert("temperature".into(), json!(0.2));
    backend.insert("_internal_flag".into(), json!(1));
    backend.insert("llm_circuit_breaker_threshold".into(), json!(3));
    let yaml = format!(
        "agents:\n  - id: a\n    backend: {}\n",
        backend_yaml(&backend)
    );
    let panel = parse(&yaml, &keys()).unwrap();
    let params = &panel.agents[0].backend.params;
    assert_eq!(
        params.keys().collect::<Vec<_>>(),
        ["temperature"],
        "{params:?}"
    );
    let report = check(&yaml, &keys());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for key in every_dropped_key().keys() {
        let path = format!("agents[0].backend.{key}");
        let count = report.warnings.iter().filter(|w| w.key == path).count();
        assert_eq!(count, 1, "one warning for {path}");
    }
    assert!(warned(&report, "agents[0].backend._internal_flag").is_some());
    assert!(warned(&report, "agents[0].backend.llm_circuit_breaker_threshold").is_some());
}

#[test]
fn extra_body_merges_into_the_body_and_betas_only_reach_claude() {
    let yaml = r#"
agents:
  - id: vllm
    backend:
      type: vllm
      model: m
      top_k: 20
      extra_body: {chat_template_kwargs: {enable_thinking: false}, top_k: 40, messages: []}
  - id: claude
    backend: {type: claude, model: claude-sonnet-4-5, betas: [context-1m-2025-08-07]}
  - id: gpt
    backend: {type: openai, model: m, betas: [x]}
"#;
    let panel = parse(yaml, &keys()).unwrap();
    let vllm = &panel.agents[0].backend.params;
    assert_eq!(
        Value::Object(vllm.clone()),
        json!({"top_k": 40, "chat_template_kwargs": {"enable_thinking": false}}),
        "extra_body wins, request-owned fields never come from it"
    );
    assert_eq!(
        panel.agents[1].backend.params["betas"],
        json!(["context-1m-2025-08-07"])
    );
    assert!(panel.agents[2].backend.params.is_empty());
    let report = check(yaml, &keys());
    assert!(warned(&report, "agents[0].backend.extra_body.messages").is_some());
    assert!(warned(&report, "agents[2].backend.betas").is_some());
    let bad = "agent: {backend: {type: vllm, model: m, extra_body: [1]}}";
    assert!(parse(bad, &keys()).unwrap_err().contains("extra_body"));
}

#[test]
fn chatcompletion_key_follows_the_base_url_host() {
    let agent = |url: &str| {
        format!("agent: {{backend: {{type: chatcompletion, model: m, base_url: \"{url}\"}}}}")
    };
    let key_of = |url: &str, env: &TestEnv| {
        parse(&agent(url), env).map(|p| {
            p.agents[0]
                .backend
                .api_key
                .as_ref()
                .map(|k| k.expose().to_string())
        })
    };
    let env = keys();
    assert_eq!(
        key_of("https://api.cerebras.ai/v1", &env)
            .unwrap()
            .as_deref(),
        Some("csk-cerebras")
    );
    assert_eq!(
        key_of("https://integrate.api.nvidia.com/v1", &env)
            .unwrap()
            .as_deref(),
        Some("nvapi-ngc")
    );
    assert_eq!(
        key_of("https://api.moonshot.cn/v1", &env)
            .unwrap()
            .as_deref(),
        Some("sk-moon")
    );
    // A known host whose variable is unset is an error naming it.
    let e = key_of("https://openrouter.ai/api/v1", &env).unwrap_err();
    assert!(
        e.contains("OPENROUTER_API_KEY") && e.contains("openrouter.ai"),
        "{e}"
    );
    // An unknown host gets no key, never OPENAI_API_KEY, and a warning says so.
    assert_eq!(key_of("https://llm.example.com/v1", &env).unwrap(), None);
    let report = check(&agent("https://llm.example.com/v1"), &env);
    let why = warned(&report, "agent.backend.api_key").unwrap();
    assert!(why.contains("llm.example.com"), "{why}");
    // Look-alike hosts do not match.
    assert_eq!(key_of("https://notcerebras.ai/v1", &env).unwrap(), None);
    // Loopback servers need no key and get no warning.
    let report = check(&agent("http://127.0.0.1:8000/v1"), &env);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn nvidia_nim_preset_and_moonshot_default() {
    let yaml = "
agents:
  - {id: nim, backend: {type: nvidia_nim, model: moonshotai/kimi-k2.5}}
  - {id: moon, backend: {type: moonshot, model: kimi-k2}}
";
    let panel = parse(yaml, &keys()).unwrap();
    let nim = &panel.agents[0].backend;
    assert_eq!(nim.base_url, "https://integrate.api.nvidia.com/v1");
    assert_eq!(nim.api_key.as_ref().map(|k| k.expose()), Some("nvapi-ngc"));
    let nvidia_only = env_of(&[("NVIDIA_API_KEY", "nvapi-2"), ("MOONSHOT_API_KEY", "m")]);
    let panel = parse(yaml, &nvidia_only).unwrap();
    assert_eq!(
        panel.agents[0].backend.api_key.as_ref().map(|k| k.expose()),
        Some("nvapi-2")
    );
    // The international platform; MassGen's .cn default is a base_url away (docs/configuration.md).
    assert_eq!(
        panel.agents[1].backend.base_url,
        "https://api.moonshot.ai/v1"
    );
}

#[test]
fn round_timeouts_become_the_turn_timeout() {
    let turn = |timeouts: &str| {
        let yaml = format!(
            "agent: {{backend: {{type: openai, model: m}}}}\ntimeout_settings: {timeouts}\n"
        );
        parse(&yaml, &keys()).map(|p| p.orchestrator.agent_turn_timeout)
    };
    let both = "{initial_round_timeout_seconds: 600, subsequent_round_timeout_seconds: 300, round_timeout_grace_seconds: 60}";
    assert_eq!(turn(both).unwrap(), Duration::from_secs(660));
    // Grace defaults to MassGen's 120 s.
    assert_eq!(
        turn("{subsequent_round_timeout_seconds: 300}").unwrap(),
        Duration::from_secs(420)
    );
    // An explicit turn timeout wins.
    assert_eq!(
        turn("{initial_round_timeout_seconds: 600, agent_turn_timeout_seconds: 90}").unwrap(),
        Duration::from_secs(90)
    );
    assert!(
        turn("{initial_round_timeout_seconds: -1}")
            .unwrap_err()
            .contains("initial_round_timeout_seconds")
    );
    assert!(
        turn("{round_timeout_grace: 1}")
            .unwrap_err()
            .contains("unknown key")
    );
}

#[test]
fn massgen_orchestrator_keys_warn_and_unknown_ones_fail() {
    let mut orchestrator = serde_json::Map::new();
    for key in ORCHESTRATOR_NOT_IMPLEMENTED
        .iter()
        .flat_map(|g| g.keys.iter())
        .filter(|k| **k != "coordination")
    {
        orchestrator.insert(key.to_string(), json!(1));
    }
    orchestrator.insert(
        "coordination".into(),
        json!({"enable_planning_mode": true, "max_orchestration_restarts": 2, "use_skills": true}),
    );
    let yaml = format!(
        "agent: {{backend: {{type: openai, model: m}}}}\norchestrator: {}\n",
        Value::Object(orchestrator.clone())
    );
    let report = check(&yaml, &keys());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for key in orchestrator.keys().filter(|k| *k != "coordination") {
        let why = warned(&report, &format!("orchestrator.{key}")).unwrap_or_default();
        assert!(why.contains("not implemented"), "orchestrator.{key}: {why}");
    }
    let restarts = "orchestrator.coordination.max_orchestration_restarts";
    assert_eq!(warned(&report, restarts), None, "implemented");
    let planning = "orchestrator.coordination.enable_planning_mode";
    assert_eq!(warned(&report, planning), None, "implemented");
    assert!(warned(&report, "orchestrator.coordination.use_skills").is_some());

    let typo =
        "agent: {backend: {type: openai, model: m}}\norchestrator: {max_new_answer_per_agent: 2}";
    let e = parse(typo, &keys()).unwrap_err();
    assert!(
        e.contains("orchestrator.max_new_answer_per_agent: unknown key"),
        "{e}"
    );
}

/// The protocol options of MassGen 0.1.46+ that the engine implements load into its options
/// with MassGen's values and defaults, start without a warning, and bad values are errors.
#[test]
fn protocol_options_load_with_massgen_values() {
    let with = |orch: &str| {
        format!("agent: {{backend: {{type: openai, model: m}}}}\norchestrator: {{{orch}}}\n")
    };
    let defaults = parse(&with(""), &keys()).unwrap().orchestrator;
    assert_eq!(defaults.final_answer(), FinalAnswerStrategy::WinnerPresent);
    assert_eq!(defaults.fairness_lead_cap, Some(2));
    assert_eq!(defaults.max_new_answers_global, None);
    assert!(!defaults.skip_voting);

    let yaml = with(
        "final_answer_strategy: synthesize, max_new_answers_global: 6, skip_voting: true, \
         fairness_enabled: true, fairness_lead_cap_answers: 0",
    );
    let o = parse(&yaml, &keys()).unwrap().orchestrator;
    assert_eq!(o.final_answer(), FinalAnswerStrategy::Synthesize);
    assert_eq!(o.max_new_answers_global, Some(6));
    assert!(o.skip_voting);
    assert_eq!(o.fairness_lead_cap, Some(0));
    assert!(check(&yaml, &keys()).warnings.is_empty());
    let off = with("fairness_enabled: false, fairness_lead_cap_answers: 3");
    assert_eq!(
        parse(&off, &keys()).unwrap().orchestrator.fairness_lead_cap,
        None
    );
    let reuse = with("skip_final_presentation: true");
    let o = parse(&reuse, &keys()).unwrap().orchestrator;
    assert_eq!(o.final_answer(), FinalAnswerStrategy::WinnerReuse);
    let null = with("final_answer_strategy: null, max_new_answers_global: null");
    assert!(parse(&null, &keys()).is_ok());

    for (orch, key, says) in [
        (
            "final_answer_strategy: best",
            "final_answer_strategy",
            "unknown value 'best' (known: winner_reuse, winner_present, synthesize)",
        ),
        (
            "max_new_answers_global: 0",
            "max_new_answers_global",
            "between 1 and",
        ),
        ("skip_voting: sometimes", "skip_voting", "true or false"),
        ("fairness_enabled: 1", "fairness_enabled", "true or false"),
        (
            "fairness_lead_cap_answers: -1",
            "fairness_lead_cap_answers",
            "between 0 and",
        ),
    ] {
        let e = parse(&with(orch), &keys()).unwrap_err();
        assert!(
            e.contains(&format!("orchestrator.{key}")) && e.contains(says),
            "{orch}: {e}"
        );
    }
}

/// `massgen serve` starts without a warning for the protocol options (all implemented).
#[test]
fn protocol_options_start_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".massgen")).unwrap();
    write(
        &dir.path().join(".massgen"),
        "config.yaml",
        "agent: {backend: {type: openai, model: m}}\norchestrator: {final_answer_strategy: synthesize, fairness_enabled: true, skip_voting: false, coordination: {max_orchestration_restarts: 1}}\n",
    );
    let log = startup_log(dir.path(), &[("OPENAI_API_KEY", "sk-test")]);
    assert!(log.contains("massgen listening on"), "{log}");
    for key in [
        "final_answer_strategy",
        "fairness_enabled",
        "skip_voting",
        "max_orchestration_restarts",
    ] {
        assert!(!log.contains(key), "{key}: {log}");
    }
}

#[test]
fn max_orchestration_restarts_is_read_where_massgen_reads_it() {
    let with = |orch: &str| {
        format!("agent: {{backend: {{type: openai, model: m}}}}\norchestrator: {{{orch}}}\n")
    };
    let restarts =
        |orch: &str| parse(&with(orch), &keys()).map(|p| p.orchestrator.max_orchestration_restarts);
    assert_eq!(restarts(""), Ok(0));
    assert_eq!(
        restarts("coordination: {max_orchestration_restarts: 2}"),
        Ok(2)
    );
    assert_eq!(restarts("max_orchestration_restarts: 1"), Ok(1));
    assert_eq!(
        restarts("max_orchestration_restarts: 1, coordination: {max_orchestration_restarts: 1}"),
        Ok(1)
    );
    let e =
        restarts("max_orchestration_restarts: 1, coordination: {max_orchestration_restarts: 2}")
            .unwrap_err();
    assert!(
        e.contains("conflicts with orchestrator.max_orchestration_restarts"),
        "{e}"
    );
    for bad in ["-1", "11", "many"] {
        let e = restarts(&format!(
            "coordination: {{max_orchestration_restarts: {bad}}}"
        ))
        .unwrap_err();
        assert!(
            e.contains("orchestrator.coordination.max_orchestration_restarts"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn voting_rubrics_beyond_three_fall_back_and_say_so() {
    let with = |value: &str| {
        format!(
            "agent: {{backend: {{type: openai, model: m}}}}\norchestrator: {{voting_sensitivity: {value}}}\n"
        )
    };
    let panel = parse(&with("checklist_gated"), &keys()).unwrap();
    assert_eq!(panel.orchestrator.voting_sensitivity, Strictness::Strict);
    let why = warned(
        &check(&with("checklist_gated"), &keys()),
        "orchestrator.voting_sensitivity",
    )
    .unwrap();
    assert!(
        why.contains("checklist_gated") && why.contains("'strict'"),
        "{why}"
    );
    let panel = parse(&with("roi_aggressive"), &keys()).unwrap();
    assert_eq!(panel.orchestrator.voting_sensitivity, Strictness::Lenient);
    let e = parse(&with("strictest"), &keys()).unwrap_err();
    assert!(e.contains("unknown value 'strictest'"), "{e}");
}

#[test]
fn an_unset_variable_in_mcp_servers_fails_only_that_server() {
    let yaml = r#"
agent:
  backend:
    type: openai
    model: m
    mcp_servers:
      - {name: brave, type: stdio, command: npx, env: {BRAVE_API_KEY: "${BRAVE_API_KEY}"}}
      - {name: files, type: stdio, command: npx, args: ["-y", "server-files"]}
"#;
    let panel = parse(yaml, &keys()).unwrap();
    let tools = panel.agents[0].tools.as_ref().unwrap();
    let names: Vec<&str> = tools.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["files"]);
    let why = warned(&check(yaml, &keys()), "agent.backend.mcp_servers[0]").unwrap();
    assert!(
        why.contains("brave") && why.contains("BRAVE_API_KEY"),
        "{why}"
    );
    // Elsewhere an unset variable stays an error.
    let e = parse(
        "agent: {backend: {type: openai, model: m, api_key: \"${NOPE}\"}}",
        &keys(),
    )
    .unwrap_err();
    assert!(e.contains("NOPE"), "{e}");
}

#[test]
fn local_agent_programs_are_refused_saying_what_they_are() {
    for (name, _) in LOCAL_AGENT_PROGRAMS {
        let yaml = format!("agent: {{backend: {{type: {name}, model: m, cwd: work}}}}");
        let e = parse(&yaml, &keys()).unwrap_err();
        assert!(
            e.contains(&format!("'{name}' is a local agent program"))
                && e.contains("a server cannot"),
            "{e}"
        );
    }
}

#[test]
fn yaml_as_massgen_examples_write_it() {
    // A multi-line flow list closed at its key's indentation, with comments inside.
    let yaml = "
agent:
  backend:
    type: openai
    model: m
    mcp_servers:
      - name: browser
        type: stdio
        command: npx
        args: [
          \"@playwright/mcp@latest\",  # the server
          \"--browser=chrome\"
        ]
";
    let panel = parse(yaml, &keys()).unwrap();
    let tools = panel.agents[0].tools.as_ref().unwrap();
    let debug = format!("{:?}", tools.servers[0]);
    assert!(debug.contains("--browser=chrome"), "{debug}");
}

#[test]
fn massgen_first_format_keywords_are_refused() {
    let e = parse(
        "agent: {backend: {type: openai, model: m}}\nnum_agents: 3\n",
        &keys(),
    )
    .unwrap_err();
    assert!(
        e.contains("num_agents") && e.contains("first config format"),
        "{e}"
    );
}

#[test]
fn check_config_lists_every_problem_and_warning() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.yaml",
        "agent: {backend: {type: openai, model: m, cwd: work}}\n",
    );
    let bad = write(
        dir.path(),
        "bad.yaml",
        "agents:\n  - {backend: {type: claude_code, model: m}}\n  - {backend: {type: openai}}\norchestrator: {typo_key: 1}\n",
    );
    let missing = dir.path().join("missing.yaml");
    let (report, failed) = check_report(&[good.clone(), bad, missing], keys().as_ref());
    assert_eq!(failed, 2, "{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("warning: ") && l.contains("good.yaml: agent.backend.cwd")),
        "{report}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ok: ") && l.contains("good.yaml")),
        "{report}"
    );
    // Each agent's error and the orchestrator's, one line each.
    for key in [
        "agents[0].backend.type",
        "agents[1].backend.model",
        "orchestrator.typo_key",
    ] {
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("error: ") && l.contains(key))
                .count(),
            1,
            "{key}: {report}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("missing.yaml") && l.contains("cannot read")),
        "{report}"
    );

    // The binary: exit status 1 with a failing file, 0 with warnings only.
    let run = |files: &[&Path]| {
        std::process::Command::new(crate::support::bin())
            .arg("check-config")
            .args(files)
            .env_clear()
            .env("OPENAI_API_KEY", "sk-test")
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = run(&[&good]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("warning: "));
    let out = run(&[&good, &dir.path().join("bad.yaml")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 config file(s) have errors"));
}

/// Corpus-like configs (the shapes of MassGen's examples, every MassGen-only key added)
/// built against a loopback upstream: what each request body carries.
#[tokio::test]
async fn capture_no_massgen_only_key_reaches_the_upstream() {
    let (url, upstream) = serve(vec![Reply::Status(400, vec![], "{}".into())]).await;
    let dropped = backend_yaml(&every_dropped_key());
    let extra = |fields: &str| format!("{{{}, {fields}}}", &dropped[1..dropped.len() - 1]);
    let yaml = format!(
        r#"
agents:
  - id: gpt
    backend: {gpt}
  - id: claude
    backend: {claude}
  - id: gemini
    backend: {gemini}
  - id: cerebras
    backend: {cerebras}
  - id: router
    backend: {router}
retry: {{max_attempts: 1}}
"#,
        gpt = extra(&format!(
            r#""type": "openai", "model": "gpt-5-mini", "base_url": "{url}/v1", "text": {{"verbosity": "low"}}"#
        )),
        claude = extra(&format!(
            r#""type": "claude", "model": "claude-sonnet-4-5", "base_url": "{url}/v1", "betas": ["context-1m-2025-08-07", "interleaved-thinking-2025-05-14"], "max_tokens": 4096"#
        )),
        gemini = extra(&format!(
            r#""type": "gemini", "model": "gemini-2.5-flash", "base_url": "{url}/v1beta", "temperature": 0.5"#
        )),
        cerebras = extra(&format!(
            r#""type": "chatcompletion", "model": "gpt-oss-120b", "base_url": "{url}/v1", "api_key": "k", "extra_body": {{"chat_template_kwargs": {{"reasoning": "low"}}}}, "reasoning": {{"effort": "low"}}"#
        )),
        router = extra(&format!(
            r#""type": "openrouter", "model": "openai/gpt-5-mini", "base_url": "{url}/v1", "api_key": "k", "provider": {{"sort": "price"}}, "reasoning": {{"effort": "low"}}"#
        )),
    );
    let panel = parse(&yaml, &keys()).unwrap();
    let factory = HttpProviders::new(http_client().unwrap());
    for agent in &panel.agents {
        let provider = factory.build(&agent.backend, &panel.call_policy).unwrap();
        let mut stream = provider.stream(coordination_turn());
        while futures::StreamExt::next(&mut stream).await.is_some() {}
    }
    let seen = upstream.requests();
    assert_eq!(seen.len(), panel.agents.len());
    let massgen_only: Vec<&str> = BACKEND_DROPPED
        .iter()
        .flat_map(|g| g.keys.iter().copied())
        .collect();
    for request in &seen {
        let body = request.body.as_object().unwrap();
        let leaked: Vec<&String> = body
            .keys()
            .filter(|k| {
                massgen_only.contains(&k.as_str()) || ["betas", "extra_body"].contains(&k.as_str())
            })
            .collect();
        assert!(leaked.is_empty(), "{}: {leaked:?}", request.uri);
    }
    let by_path = |part: &str| seen.iter().find(|r| r.uri.contains(part)).unwrap();
    let claude = by_path("/messages");
    assert_eq!(
        claude.headers["anthropic-beta"],
        "context-1m-2025-08-07,interleaved-thinking-2025-05-14"
    );
    assert_eq!(claude.body["max_tokens"], 4096);
    assert_eq!(
        by_path("/responses").body["text"],
        json!({"verbosity": "low"})
    );
    assert_eq!(
        by_path("streamGenerateContent").body["generationConfig"]["temperature"],
        0.5
    );
    let chats: Vec<&Value> = seen
        .iter()
        .filter(|r| r.uri.contains("/chat/completions"))
        .map(|r| &r.body)
        .collect();
    let cerebras = chats.iter().find(|b| b["model"] == "gpt-oss-120b").unwrap();
    assert_eq!(
        cerebras["chat_template_kwargs"],
        json!({"reasoning": "low"})
    );
    assert!(
        cerebras.get("reasoning").is_none(),
        "reasoning goes to OpenRouter only"
    );
    let router = chats
        .iter()
        .find(|b| b["model"] == "openai/gpt-5-mini")
        .unwrap();
    assert_eq!(router["provider"], json!({"sort": "price"}));
    assert_eq!(router["reasoning"], json!({"effort": "low"}));
}

#[test]
fn readme_lists_every_massgen_key_of_the_catalogue() {
    // The key lists live in the configuration page of the manual (docs/).
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    let keys = BACKEND_DROPPED
        .iter()
        .chain(ORCHESTRATOR_NOT_IMPLEMENTED)
        .flat_map(|g| g.keys.iter().copied())
        .chain(LOCAL_AGENT_PROGRAMS.iter().map(|(name, _)| *name));
    for key in keys {
        assert!(
            readme.contains(&format!("`{key}`")),
            "docs/configuration.md does not list `{key}`"
        );
    }
}
