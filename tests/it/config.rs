//! Panel config loading: expansion, validation messages, params, keys, catalog.

use std::path::Path;
use std::time::Duration;

use massgen::config::{
    ConfigError, PanelConfig, demo_panel, load_catalog, load_panel, parse_panel,
};
use massgen_core::coordination::{Quorum, Strictness};
use massgen_providers::presets::PRESETS;
use serde_json::json;

use crate::support::{TestEnv, env_of, write};

fn with_keys() -> TestEnv {
    env_of(&[
        ("OPENAI_API_KEY", "sk-env-openai"),
        ("GROQ_API_KEY", "gsk-env"),
    ])
}

fn parse(yaml: &str, env: &TestEnv) -> Result<PanelConfig, ConfigError> {
    parse_panel("team", Path::new("team.yaml"), yaml, env.as_ref())
}

fn ok(yaml: &str) -> PanelConfig {
    match parse(yaml, &with_keys()) {
        Ok(panel) => panel,
        Err(e) => panic!("expected a valid config, got: {e}"),
    }
}

/// The error message, asserted to name the file and `key`, and to contain every `parts`.
fn fails(yaml: &str, env: &TestEnv, key: &str, parts: &[&str]) -> String {
    let e = match parse(yaml, env) {
        Ok(_) => panic!("expected an error at {key}"),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert_eq!(e.file, "team.yaml", "{msg}");
    assert_eq!(e.key, key, "{msg}");
    assert!(msg.starts_with(&format!("team.yaml: {key}: ")), "{msg}");
    for part in parts {
        assert!(msg.contains(part), "missing {part:?} in: {msg}");
    }
    msg
}

const GPT: &str = "
agents:
  - id: gpt
    backend: {type: openai, model: gpt-4o-mini}
";

#[test]
fn minimal_config_gets_defaults() {
    let panel = ok(GPT);
    assert_eq!(panel.name, "team");
    assert_eq!(panel.source, Path::new("team.yaml"));
    let b = &panel.agents[0].backend;
    assert_eq!(b.backend_type, "openai");
    assert_eq!(b.base_url, "https://api.openai.com/v1");
    assert_eq!(
        b.api_key.as_ref().map(|k| k.expose()),
        Some("sk-env-openai")
    );
    assert!(b.params.is_empty());
    assert_eq!(panel.orchestrator, Default::default());
    assert_eq!(panel.call_policy, Default::default());
}

#[test]
fn vision_follows_the_model_family_unless_set() {
    let panel = ok("
agents:
  - id: a
    backend: {type: openai, model: gpt-4o-mini}
  - id: b
    backend: {type: groq, model: llama-3.3-70b-versatile}
  - id: c
    backend: {type: groq, model: llama-3.3-70b-versatile, vision: true}
  - id: d
    backend: {type: openai, model: gpt-4o, vision: \"false\"}
");
    let vision: Vec<bool> = panel.agents.iter().map(|a| a.backend.vision).collect();
    assert_eq!(vision, [true, false, true, false]);
    assert!(
        panel
            .agents
            .iter()
            .all(|a| !a.backend.params.contains_key("vision"))
    );
    fails(
        "
agents:
  - id: a
    backend: {type: openai, model: gpt-4o, vision: sometimes}
",
        &with_keys(),
        "agents[0].backend.vision",
        &["true or false"],
    );
}

#[test]
fn single_agent_form_and_generated_ids() {
    let panel = ok("
agent:
  backend: {type: groq, model: llama-3.3-70b-versatile}
  system_message: hi
");
    assert_eq!(panel.agents.len(), 1);
    assert_eq!(panel.agents[0].id, "agent1");
    assert_eq!(panel.agents[0].system_message.as_deref(), Some("hi"));

    let panel = ok("
agents:
  - backend: {type: openai, model: a}
  - id: named
    backend: {type: openai, model: b}
  - backend: {type: openai, model: c}
");
    let ids: Vec<&str> = panel.agents.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["agent1", "named", "agent3"]);
}

#[test]
fn backend_type_is_case_insensitive_and_aliases_exist() {
    let panel = ok("
agents:
  - id: a
    backend: {type: OpenAI, model: m}
  - id: b
    backend: {type: kimi, model: m, api_key: k}
  - id: c
    backend: {type: Moonshot, model: m, api_key: k}
");
    let types: Vec<&str> = panel
        .agents
        .iter()
        .map(|a| a.backend.backend_type.as_str())
        .collect();
    assert_eq!(types, ["openai", "kimi", "moonshot"]);
}

#[test]
fn params_keep_types_and_case() {
    let panel = ok("
agents:
  - id: gpt
    backend:
      type: openai
      model: gpt-4o-mini
      temperature: 0.7
      top_p: 0.9
      max_tokens: 100
      stop: [\"a\", \"b\"]
      logitBias: {\"50256\": -100}
      reasoning_effort: low
      parallel_tool_calls: false
      seed: ~
");
    let params = &panel.agents[0].backend.params;
    assert_eq!(params["temperature"], json!(0.7));
    assert!(params["temperature"].is_f64());
    assert_eq!(params["top_p"], json!(0.9));
    assert_eq!(params["max_tokens"], json!(100));
    assert!(params["max_tokens"].is_u64());
    assert_eq!(params["stop"], json!(["a", "b"]));
    assert_eq!(params["logitBias"], json!({"50256": -100}));
    assert_eq!(params["reasoning_effort"], json!("low"));
    assert_eq!(params["parallel_tool_calls"], json!(false));
    assert_eq!(params["seed"], json!(null));
    for key in ["type", "model", "api_key", "base_url"] {
        assert!(!params.contains_key(key), "{key} leaked into params");
    }
}

#[test]
fn massgen_only_and_request_owned_keys_are_not_params() {
    let panel = ok("
agents:
  - id: gpt
    backend:
      type: openai
      model: m
      enable_web_search: true
      enable_code_interpreter: true
      cwd: workspace
      mcp_servers: [{name: gh, command: gh-mcp, env: {TOKEN: \"${NOT_SET_ANYWHERE:-none}\"}}]
      allowed_tools: [a]
      exclude_tools: [b]
      custom_tools: []
      stream: false
      messages: []
      temperature: 1
");
    let params = &panel.agents[0].backend.params;
    assert_eq!(params.keys().collect::<Vec<_>>(), ["temperature"]);
}

#[test]
fn expansion_everywhere_with_defaults() {
    let e = env_of(&[
        ("OPENAI_API_KEY", "sk-x"),
        ("MODEL", "gpt-4.1"),
        ("STOP", "END"),
        ("HOST", "llm.local"),
        ("TURN", "42"),
    ]);
    let panel = parse(
        "
agents:
  - id: ${AGENT_ID:-gpt}
    system_message: \"costs $5, $$HOME, ${MODEL}\"
    backend:
      type: openai
      model: ${MODEL}
      base_url: http://${HOST}:${PORT:-8000}/v1/
      stop: [\"${STOP}\", fixed]
      metadata: {who: \"${HOST}\", nested: {deep: \"${MODEL:-x}\"}}
orchestrator:
  agent_turn_timeout_seconds: ${TURN}
  voting_sensitivity: ${SENS:-strict}
",
        &e,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let a = &panel.agents[0];
    assert_eq!(a.id, "gpt");
    assert_eq!(
        a.system_message.as_deref(),
        Some("costs $5, $HOME, gpt-4.1")
    );
    assert_eq!(a.backend.model, "gpt-4.1");
    assert_eq!(a.backend.base_url, "http://llm.local:8000/v1");
    assert_eq!(a.backend.params["stop"], json!(["END", "fixed"]));
    assert_eq!(
        a.backend.params["metadata"],
        json!({"who": "llm.local", "nested": {"deep": "gpt-4.1"}})
    );
    assert_eq!(
        panel.orchestrator.agent_turn_timeout,
        Duration::from_secs(42)
    );
    assert_eq!(panel.orchestrator.voting_sensitivity, Strictness::Strict);
}

#[test]
fn unset_variable_is_an_error_naming_it_and_the_key() {
    fails(
        "
agents:
  - id: gpt
    backend:
      type: openai
      model: m
      stop: [a, \"${MISSING_STOP}\"]
",
        &with_keys(),
        "agents[0].backend.stop[1]",
        &["MISSING_STOP", "not set"],
    );
    fails(
        "
agents:
  - id: gpt
    backend: {type: openai, model: m, api_key: \"${MY_KEY}\"}
",
        &env_of(&[]),
        "agents[0].backend.api_key",
        &["MY_KEY"],
    );
}

#[test]
fn ignored_sections_are_not_expanded_or_validated() {
    let panel = ok(&format!(
        "{GPT}\nui: {{display_type: \"${{NOPE}}\"}}\nlogging: {{level: 3}}\n"
    ));
    assert_eq!(panel.agents.len(), 1);
}

#[test]
fn api_key_from_config_wins_over_env_and_fallback_vars_in_order() {
    let panel = ok("
agents:
  - id: gpt
    backend: {type: openai, model: m, api_key: sk-config}
");
    assert_eq!(
        panel.agents[0].backend.api_key.as_ref().map(|k| k.expose()),
        Some("sk-config")
    );

    let e = env_of(&[("KIMI_API_KEY", "kimi-2"), ("OPENAI_API_KEY", "x")]);
    let panel =
        parse("agent: {backend: {type: kimi, model: m}}", &e).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        panel.agents[0].backend.api_key.as_ref().map(|k| k.expose()),
        Some("kimi-2")
    );

    let e = env_of(&[("KIMI_API_KEY", "kimi-2"), ("MOONSHOT_API_KEY", "moon-1")]);
    let panel =
        parse("agent: {backend: {type: kimi, model: m}}", &e).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        panel.agents[0].backend.api_key.as_ref().map(|k| k.expose()),
        Some("moon-1")
    );

    // An empty expansion counts as "not given": the env variable is used.
    let panel = ok("agent: {backend: {type: openai, model: m, api_key: \"${UNSET:-}\"}}");
    assert_eq!(
        panel.agents[0].backend.api_key.as_ref().map(|k| k.expose()),
        Some("sk-env-openai")
    );
}

#[test]
fn local_backends_need_no_key() {
    let panel = parse(
        "agent: {backend: {type: ollama, model: llama3.2}}",
        &env_of(&[]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(panel.agents[0].backend.api_key, None);
    assert_eq!(
        panel.agents[0].backend.base_url,
        "http://localhost:11434/v1"
    );
}

#[test]
fn missing_key_names_the_variables() {
    fails(
        "agents: [{id: g, backend: {type: groq, model: m}}]",
        &env_of(&[("OPENAI_API_KEY", "x")]),
        "agents[0].backend",
        &["no API key: set GROQ_API_KEY (environment or .env) or backend.api_key"],
    );
    fails(
        "agents: [{id: k, backend: {type: moonshot, model: m}}]",
        &env_of(&[]),
        "agents[0].backend",
        &["MOONSHOT_API_KEY or KIMI_API_KEY"],
    );
}

#[test]
fn base_url_override_and_trailing_slash() {
    let panel =
        ok("agent: {backend: {type: openai, model: m, base_url: \"https://proxy.example/v1//\"}}");
    assert_eq!(panel.agents[0].backend.base_url, "https://proxy.example/v1");
}

#[test]
fn base_url_required_for_chatcompletion_and_poe() {
    fails(
        "agents: [{id: a, backend: {type: chatcompletion, model: m}}]",
        &with_keys(),
        "agents[0].backend.base_url",
        &["base_url is required for backend type 'chatcompletion'"],
    );
    fails(
        "agents: [{id: a, backend: {type: poe, model: m, api_key: k}}]",
        &with_keys(),
        "agents[0].backend.base_url",
        &["required", "'poe'"],
    );
    fails(
        "agents: [{id: a, backend: {type: chatcompletion, model: m, base_url: localhost:8080}}]",
        &with_keys(),
        "agents[0].backend.base_url",
        &["http://"],
    );
}

#[test]
fn no_agents() {
    for yaml in ["ui: {}", "agents: []", "", "agents:"] {
        fails(yaml, &with_keys(), "agents", &["no agents"]);
    }
    fails("agents: {id: a}", &with_keys(), "agents", &["list"]);
    fails(
        &format!("{GPT}agent: {{backend: {{type: openai, model: m}}}}"),
        &with_keys(),
        "agent",
        &["not both"],
    );
}

#[test]
fn duplicate_and_empty_ids() {
    fails(
        "
agents:
  - id: gpt
    backend: {type: openai, model: a}
  - id: gpt
    backend: {type: openai, model: b}
",
        &with_keys(),
        "agents[1].id",
        &["duplicate agent id 'gpt'", "agents[0]"],
    );
    fails(
        "
agents:
  - backend: {type: openai, model: a}
  - id: agent1
    backend: {type: openai, model: b}
",
        &with_keys(),
        "agents[1].id",
        &["duplicate agent id 'agent1'"],
    );
    fails(
        "agents: [{id: \"  \", backend: {type: openai, model: a}}]",
        &with_keys(),
        "agents[0].id",
        &["empty agent id"],
    );
}

#[test]
fn missing_backend_type_and_model() {
    fails(
        "agents: [{id: a}]",
        &with_keys(),
        "agents[0].backend",
        &["missing backend"],
    );
    fails(
        "agents: [{id: a, backend: {model: m}}]",
        &with_keys(),
        "agents[0].backend.type",
        &["missing backend type", "openai"],
    );
    fails(
        "agents: [{id: a, backend: {type: openai}}]",
        &with_keys(),
        "agents[0].backend.model",
        &["missing model"],
    );
    fails(
        "agents: [{id: a, backend: {type: openai, model: \"\"}}]",
        &with_keys(),
        "agents[0].backend.model",
        &["missing model"],
    );
}

#[test]
fn unknown_backend_type_lists_known_ones() {
    let msg = fails(
        "
agents:
  - id: a
    backend: {type: openai, model: m}
  - id: b
    backend: {type: foo, model: m}
",
        &with_keys(),
        "agents[1].backend.type",
        &["unknown backend type 'foo' (known: openai, chatcompletion,"],
    );
    for preset in PRESETS {
        assert!(
            msg.contains(preset.name),
            "{} not listed in {msg}",
            preset.name
        );
    }
}

#[test]
fn orchestrator_values_map_into_options() {
    let panel = ok(&format!(
        "{GPT}  - id: b
    backend: {{type: openai, model: m}}
orchestrator:
  voting_sensitivity: Balanced
  answer_novelty_requirement: strict
  max_new_answers_per_agent: 3
  skip_coordination_rounds: true
  skip_final_presentation: \"true\"
  min_live_agents: 2
  agent_turn_timeout_seconds: 90
  defer_voting_until_all_answered: false
  voting_quorum: majority
  snapshot_storage: snapshots
timeout_settings:
  orchestrator_timeout_seconds: 600
  presentation_timeout_seconds: 1.5
"
    ));
    let o = &panel.orchestrator;
    assert_eq!(o.voting_sensitivity, Strictness::Balanced);
    assert_eq!(o.answer_novelty_requirement, Strictness::Strict);
    assert_eq!(o.max_new_answers_per_agent, Some(3));
    assert!(o.skip_coordination_rounds);
    assert!(o.skip_final_presentation);
    assert_eq!(o.min_live_agents, 2);
    assert_eq!(o.session_timeout, Duration::from_secs(600));
    assert_eq!(o.agent_turn_timeout, Duration::from_secs(90));
    assert_eq!(o.presentation_timeout, Duration::from_millis(1500));
    assert!(!o.defer_voting_until_all_answered);
    assert_eq!(o.voting_quorum, Quorum::Majority);
    let defaults = ok(GPT).orchestrator;
    assert!(defaults.defer_voting_until_all_answered);
    assert_eq!(defaults.voting_quorum, Quorum::All);
    let k = ok(&format!("{GPT}orchestrator: {{voting_quorum: 2}}\n"));
    assert_eq!(k.orchestrator.voting_quorum, Quorum::Votes(2));
    assert_eq!(defaults.max_cost_usd, None);
    let limited = ok(&format!("{GPT}orchestrator: {{max_cost_usd: \"0.25\"}}\n"));
    assert_eq!(limited.orchestrator.max_cost_usd, Some(0.25));
}

#[test]
fn turn_timeout_accepted_under_timeout_settings_but_not_conflicting() {
    let panel = ok(&format!(
        "{GPT}timeout_settings: {{agent_turn_timeout_seconds: 77}}"
    ));
    assert_eq!(
        panel.orchestrator.agent_turn_timeout,
        Duration::from_secs(77)
    );
    fails(
        &format!(
            "{GPT}orchestrator: {{agent_turn_timeout_seconds: 10}}\ntimeout_settings: {{agent_turn_timeout_seconds: 20}}"
        ),
        &with_keys(),
        "timeout_settings.agent_turn_timeout_seconds",
        &["conflicts with orchestrator.agent_turn_timeout_seconds"],
    );
}

#[test]
fn invalid_orchestrator_values() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "orchestrator: {voting_sensitivity: loose}",
            "orchestrator.voting_sensitivity",
            &["unknown value 'loose'", "lenient, balanced, strict"],
        ),
        (
            "orchestrator: {answer_novelty_requirement: 3}",
            "orchestrator.answer_novelty_requirement",
            &["unknown value '3'"],
        ),
        (
            "orchestrator: {min_live_agents: 0}",
            "orchestrator.min_live_agents",
            &["between 1 and the number of agents (1), got 0"],
        ),
        (
            "orchestrator: {min_live_agents: 2}",
            "orchestrator.min_live_agents",
            &["got 2"],
        ),
        (
            "orchestrator: {agent_turn_timeout_seconds: 0}",
            "orchestrator.agent_turn_timeout_seconds",
            &["positive number of seconds"],
        ),
        (
            "orchestrator: {presentation_timeout_seconds: -5}",
            "orchestrator.presentation_timeout_seconds",
            &["positive", "-5"],
        ),
        (
            "timeout_settings: {orchestrator_timeout_seconds: soon}",
            "timeout_settings.orchestrator_timeout_seconds",
            &["must be a number"],
        ),
        (
            "orchestrator: {skip_final_presentation: maybe}",
            "orchestrator.skip_final_presentation",
            &["true or false"],
        ),
        (
            "orchestrator: {voting_quorum: most}",
            "orchestrator.voting_quorum",
            &["\"all\", \"majority\" or a whole number", "\"most\""],
        ),
        (
            "orchestrator: {voting_quorum: 0}",
            "orchestrator.voting_quorum",
            &["(1 or more), got 0"],
        ),
        (
            "orchestrator: {max_cost_usd: 0}",
            "orchestrator.max_cost_usd",
            &["must be above 0 USD, got 0"],
        ),
        (
            "orchestrator: {defer_voting_until_all_answered: sometimes}",
            "orchestrator.defer_voting_until_all_answered",
            &["true or false"],
        ),
        (
            "orchestrator: {max_new_answers_per_agent: 0}",
            "orchestrator.max_new_answers_per_agent",
            &["between 1"],
        ),
        (
            "orchestrator: {voting_sensitivty: strict}",
            "orchestrator.voting_sensitivty",
            &["unknown key", "voting_sensitivity", "min_live_agents"],
        ),
        (
            "timeout_settings: {orchestrator_timeout: 5}",
            "timeout_settings.orchestrator_timeout",
            &["unknown key", "orchestrator_timeout_seconds"],
        ),
        ("orchestrator: [1]", "orchestrator", &["must be a mapping"]),
    ];
    for (section, key, parts) in cases {
        fails(&format!("{GPT}{section}\n"), &with_keys(), key, parts);
    }
}

#[test]
fn retry_section_maps_into_call_policy() {
    let panel = ok(&format!(
        "{GPT}retry:
  max_attempts: 5
  initial_backoff_ms: 250
  max_backoff_ms: 4000
  max_retry_after_seconds: 0
  connect_timeout_seconds: 3
  first_byte_timeout_seconds: 45
  idle_timeout_seconds: 30
"
    ));
    let p = &panel.call_policy;
    assert_eq!(p.max_attempts, 5);
    assert_eq!(p.initial_backoff, Duration::from_millis(250));
    assert_eq!(p.max_backoff, Duration::from_secs(4));
    assert_eq!(p.max_retry_after, Duration::ZERO);
    assert_eq!(p.connect_timeout, Duration::from_secs(3));
    assert_eq!(p.first_byte_timeout, Duration::from_secs(45));
    assert_eq!(p.idle_timeout, Duration::from_secs(30));

    fails(
        &format!("{GPT}retry: {{max_attempts: 0}}"),
        &with_keys(),
        "retry.max_attempts",
        &["between 1"],
    );
    fails(
        &format!("{GPT}retry: {{idle_timeout_seconds: 0}}"),
        &with_keys(),
        "retry.idle_timeout_seconds",
        &["positive"],
    );
    fails(
        &format!("{GPT}retry: {{max_atempts: 2}}"),
        &with_keys(),
        "retry.max_atempts",
        &["unknown key", "max_attempts"],
    );
    fails(
        &format!("{GPT}retry: {{initial_backoff_ms: 5000, max_backoff_ms: 100}}"),
        &with_keys(),
        "retry.max_backoff_ms",
        &["initial_backoff_ms"],
    );
}

#[test]
fn invalid_yaml_names_the_file() {
    let e = parse("agents: [\n  - id: a\n  backend", &with_keys()).err();
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.starts_with("team.yaml: invalid YAML"), "{msg}");
}

#[test]
fn secrets_never_in_debug_or_errors() {
    let e = env_of(&[("GROQ_API_KEY", "gsk-SECRET-ENV")]);
    let panel = parse(
        "
agents:
  - id: a
    backend: {type: openai, model: m, api_key: sk-SECRET-INLINE}
  - id: b
    backend: {type: groq, model: m}
",
        &e,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{panel:?} {:#?}", panel);
    assert!(!debug.contains("SECRET"), "{debug}");
    assert!(debug.contains("Secret(***)"));

    // A later error in the same file must not quote the key either.
    let err = parse(
        "
agents:
  - id: a
    backend: {type: openai, model: m, api_key: sk-SECRET-INLINE}
  - id: a
    backend: {type: openai, model: m, api_key: sk-SECRET-INLINE}
",
        &e,
    )
    .err()
    .map(|e| format!("{e} {e:?}"))
    .unwrap_or_default();
    assert!(
        err.contains("duplicate") && !err.contains("SECRET"),
        "{err}"
    );
}

#[test]
fn demo_panel_shape() {
    let panel = demo_panel("http://127.0.0.1:5555/v1/");
    assert_eq!(panel.name, "demo");
    assert_eq!(panel.source, Path::new("<built-in demo>"));
    let ids: Vec<&str> = panel.agents.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["sim-analyst", "sim-critic", "sim-synthesizer"]);
    for a in &panel.agents {
        assert_eq!(a.backend.backend_type, "chatcompletion");
        assert_eq!(a.backend.base_url, "http://127.0.0.1:5555/v1");
        assert!(a.backend.api_key.is_none());
        assert!(
            a.backend.model.starts_with(&format!("{}:", a.id)),
            "{}",
            a.backend.model
        );
        assert!(a.backend.model.contains("ttft_ms="));
        assert!(a.system_message.as_deref().is_some_and(|m| !m.is_empty()));
    }
}

#[test]
fn load_panel_uses_file_stem_and_reports_unreadable_files() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = write(dir.path(), "my-team.yml", GPT);
    let panel = load_panel(&path, with_keys().as_ref()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(panel.name, "my-team");
    assert_eq!(panel.source, path);

    let missing = dir.path().join("nope.yaml");
    let e = load_panel(&missing, with_keys().as_ref())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("nope.yaml") && e.contains("cannot read"), "{e}");
}

#[test]
fn catalog_lists_good_files_and_broken_ones_as_unavailable() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(dir.path(), "good.yaml", GPT);
    write(dir.path(), "also_good.yml", GPT);
    write(
        dir.path(),
        "broken.yaml",
        "agents: [{id: a, backend: {type: foo, model: m}}]",
    );
    write(dir.path(), "notes.txt", "not a config");
    write(dir.path(), "bad name.yaml", GPT);
    let default = write(dir.path(), "good.yaml", GPT);

    let catalog = load_catalog(Some(&default), Some(dir.path()), with_keys().as_ref())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        catalog.default.as_ref().map(|p| p.name.as_str()),
        Some("good")
    );
    assert_eq!(
        catalog.named.keys().collect::<Vec<_>>(),
        ["also_good", "good"]
    );
    assert_eq!(catalog.unavailable.keys().collect::<Vec<_>>(), ["broken"]);
    let why = &catalog.unavailable["broken"];
    assert!(
        why.contains("broken.yaml")
            && why.contains("agents[0].backend.type")
            && why.contains("'foo'"),
        "{why}"
    );
    assert_eq!(catalog.configs_dir.as_deref(), Some(dir.path()));

    // A broken default is fatal, unlike a broken named config.
    let bad_default = dir.path().join("broken.yaml");
    let e = load_catalog(Some(&bad_default), None, with_keys().as_ref())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("broken.yaml: agents[0].backend.type"), "{e}");
}

#[test]
fn shipped_example_configs_all_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut vars: Vec<(&str, &str)> = PRESETS
        .iter()
        .flat_map(|p| p.key_vars.iter().map(|v| (*v, "test-key")))
        .collect();
    vars.push(("MY_KEY", "my-key"));
    let e = env_of(&vars);
    let catalog = load_catalog(None, Some(&dir), e.as_ref()).unwrap_or_else(|e| panic!("{e}"));
    assert!(catalog.unavailable.is_empty(), "{:?}", catalog.unavailable);
    for name in [
        "three-agent-panel",
        "local-panel",
        "single-agent",
        "openai-compatible",
        "simulated",
    ] {
        assert!(catalog.named.contains_key(name), "{name} missing");
    }
    let sim = &catalog.named["simulated"];
    assert_eq!(sim.agents[0].backend.base_url, "http://127.0.0.1:9000/v1");
    let compat = &catalog.named["openai-compatible"];
    assert_eq!(
        compat.agents[0]
            .backend
            .api_key
            .as_ref()
            .map(|k| k.expose()),
        Some("my-key")
    );
}

#[test]
fn mcp_servers_and_tool_filters_are_parsed() {
    use massgen_tools::McpTransport;
    let e = env_of(&[("OPENAI_API_KEY", "sk"), ("SEARCH_KEY", "k1"), ("T", "tok")]);
    let panel = parse(
        "
agents:
  - id: researcher
    backend:
      type: openai
      model: m
      mcp_servers:
        search: {type: stdio, command: npx, args: [\"-y\", some-mcp-server], env: {API_KEY: \"${SEARCH_KEY}\"}}
        files: {type: streamable-http, url: \"http://127.0.0.1:8080/mcp\", headers: {Authorization: \"Bearer ${T}\"}}
      allowed_tools: [mcp__search__query]
      exclude_tools: [mcp__files__delete]
      max_tool_rounds: 3
      tool_timeout_seconds: 5
",
        &e,
    )
    .unwrap();
    let tools = panel.agents[0].tools.as_ref().unwrap();
    assert_eq!(tools.limits.max_rounds, 3);
    assert_eq!(tools.limits.call_timeout, Duration::from_secs(5));
    assert_eq!(
        tools.allowed.as_deref(),
        Some(&["mcp__search__query".to_string()][..])
    );
    assert_eq!(tools.exclude, ["mcp__files__delete"]);
    let by_name = |n: &str| {
        &tools
            .servers
            .iter()
            .find(|s| s.name == n)
            .unwrap()
            .transport
    };
    match by_name("search") {
        McpTransport::Stdio {
            command, args, env, ..
        } => {
            assert_eq!(command, "npx");
            assert_eq!(args, &["-y", "some-mcp-server"]);
            assert_eq!(env["API_KEY"].expose(), "k1");
            // Secrets never print.
            assert!(!format!("{env:?}").contains("k1"));
        }
        other => panic!("{other:?}"),
    }
    match by_name("files") {
        McpTransport::StreamableHttp { url, headers } => {
            assert_eq!(url, "http://127.0.0.1:8080/mcp");
            assert_eq!(headers["Authorization"].expose(), "Bearer tok");
        }
        other => panic!("{other:?}"),
    }
    assert!(panel.agents[0].backend.params.is_empty());
    assert!(ok(GPT).agents[0].tools.is_none());

    let bad = |servers: &str, key: &str, part: &str| {
        let yaml = format!(
            "agents:\n  - id: a\n    backend:\n      type: openai\n      model: m\n      mcp_servers: {servers}\n"
        );
        fails(&yaml, &with_keys(), key, &[part]);
    };
    bad(
        "{s: {type: stdio}}",
        "agents[0].backend.mcp_servers.s.command",
        "missing command",
    );
    bad(
        "{s: {type: ws, url: \"http://x\"}}",
        "agents[0].backend.mcp_servers.s.type",
        "unknown MCP transport",
    );
    bad(
        "{s: {url: \"ftp://x\"}}",
        "agents[0].backend.mcp_servers.s.url",
        "http://",
    );
    bad(
        "{a__b: {command: x}}",
        "agents[0].backend.mcp_servers.a__b",
        "single '_'",
    );
    bad(
        "[{command: x}]",
        "agents[0].backend.mcp_servers[0].name",
        "missing server name",
    );
}

#[test]
fn prices_come_from_the_list_or_backend_pricing_which_stays_out_of_the_request() {
    let list = ok(GPT).agents[0]
        .backend
        .price
        .expect("gpt-4o-mini is listed");
    assert_eq!(list.input_per_million, 0.15);
    assert_eq!(list.cached_input_per_million, 0.075);
    assert_eq!(list.output_per_million, 0.60);
    let panel = ok("
agents:
  - id: local
    backend:
      type: chatcompletion
      base_url: http://127.0.0.1:8000/v1
      model: my-model
      temperature: 0.1
      pricing: {input_per_million: 0.5, output_per_million: \"1.5\"}
  - id: unknown
    backend: {type: chatcompletion, base_url: http://127.0.0.1:8000/v1, model: my-model}
");
    let b = &panel.agents[0].backend;
    let price = b.price.expect("configured");
    assert_eq!(price.input_per_million, 0.5);
    assert_eq!(price.output_per_million, 1.5);
    assert_eq!(
        price.cached_input_per_million, 0.5,
        "cached defaults to input"
    );
    assert!(!b.params.contains_key("pricing"), "{:?}", b.params);
    assert!(b.params.contains_key("temperature"));
    assert_eq!(panel.agents[1].backend.price, None);
}

#[test]
fn invalid_pricing() {
    let agent = |pricing: &str| {
        format!(
            "agents:\n  - id: a\n    backend: {{type: chatcompletion, base_url: http://h/v1, model: m, pricing: {pricing}}}\n"
        )
    };
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "{input_per_million: 1}",
            "agents[0].backend.pricing.output_per_million",
            &["missing (USD per million tokens)"],
        ),
        (
            "{input_per_million: -1, output_per_million: 1}",
            "agents[0].backend.pricing.input_per_million",
            &["must be 0 or more USD, got -1"],
        ),
        (
            "{input_per_million: 1, output_per_million: 1, output: 2}",
            "agents[0].backend.pricing.output",
            &["unknown key", "cached_input_per_million"],
        ),
        ("3", "agents[0].backend.pricing", &["must be a mapping"]),
    ];
    for (pricing, key, parts) in cases {
        fails(&agent(pricing), &with_keys(), key, parts);
    }
}
