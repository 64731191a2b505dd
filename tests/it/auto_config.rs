//! `massgen serve` without `--config` (issue 17): the config lookup, the automatic panel
//! from the keys present, the SDKs' base-URL variables, `--print-config`, and the error
//! when there is nothing to serve.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use massgen::cli::NO_CONFIG_HINT;
use massgen::config::{
    AUTO_MODELS, auto_key_variables, auto_panel, auto_panel_yaml, find_default_config, load_panel,
};
use serde_json::Value;

use crate::support::{self, env_of, startup_log, write};

const PANEL: &str = "agent: {id: solo, backend: {type: ollama, model: m}}\n";

/// `massgen ARGS…` in `dir` with exactly `vars` as its environment, bounded to 20 s.
fn run_in(dir: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut child = Command::new(support::bin())
        .args(args)
        .env_clear()
        .envs(vars.iter().copied())
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("massgen did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn print_config(dir: &Path, vars: &[(&str, &str)]) -> String {
    let out = run_in(dir, vars, &["serve", "--print-config"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn lookup_order_working_dir_then_xdg_then_home() {
    let root = tempfile::tempdir().unwrap();
    let (work, home, xdg) = (
        root.path().join("work"),
        root.path().join("home"),
        root.path().join("xdg"),
    );
    for dir in [
        work.join(".massgen"),
        home.join(".config/massgen"),
        xdg.join("massgen"),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let home_s = home.display().to_string();
    let xdg_s = xdg.display().to_string();
    let with_home = env_of(&[("HOME", &home_s)]);
    let with_both = env_of(&[("HOME", &home_s), ("XDG_CONFIG_HOME", &xdg_s)]);

    assert_eq!(find_default_config(&work, with_both.as_ref()), None);
    let in_home = write(&home.join(".config/massgen"), "config.yaml", PANEL);
    assert_eq!(
        find_default_config(&work, with_home.as_ref()),
        Some(in_home.clone())
    );
    // XDG_CONFIG_HOME replaces ~/.config; a relative one is ignored, as the spec says.
    assert_eq!(find_default_config(&work, with_both.as_ref()), None);
    let relative = env_of(&[("HOME", &home_s), ("XDG_CONFIG_HOME", "xdg")]);
    assert_eq!(find_default_config(&work, relative.as_ref()), Some(in_home));
    let in_xdg = write(&xdg.join("massgen"), "config.yaml", PANEL);
    assert_eq!(find_default_config(&work, with_both.as_ref()), Some(in_xdg));
    let in_work = write(&work.join(".massgen"), "config.yaml", PANEL);
    assert_eq!(
        find_default_config(&work, with_both.as_ref()),
        Some(in_work)
    );
}

#[test]
fn the_binary_uses_the_file_it_finds_and_names_it() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(home.join(".config/massgen")).unwrap();
    let home_panel = "agent: {id: from-home, backend: {type: ollama, model: m}}\n";
    write(&home.join(".config/massgen"), "config.yaml", home_panel);
    let home_s = home.display().to_string();
    // A key is set too: a file found wins over the automatic panel.
    let vars = [("HOME", home_s.as_str()), ("GROQ_API_KEY", "gsk-test")];
    assert_eq!(print_config(root.path(), &vars), home_panel);

    std::fs::create_dir_all(root.path().join(".massgen")).unwrap();
    write(&root.path().join(".massgen"), "config.yaml", PANEL);
    assert_eq!(print_config(root.path(), &vars), PANEL);

    // The start-up line names the file.
    let log = startup_log(root.path(), &vars);
    assert!(log.contains("config=.massgen/config.yaml"), "{log}");
    assert!(log.contains("solo(ollama/m)"), "{log}");

    // The first step, MASSGEN_SERVER_DEFAULT_CONFIG (the variable of --config), wins.
    let chosen = "agent: {id: chosen, backend: {type: ollama, model: m}}\n";
    write(root.path(), "chosen.yaml", chosen);
    let vars = [
        ("HOME", home_s.as_str()),
        ("MASSGEN_SERVER_DEFAULT_CONFIG", "chosen.yaml"),
    ];
    assert_eq!(print_config(root.path(), &vars), chosen);
    let log = startup_log(root.path(), &vars);
    assert!(log.contains("config=chosen.yaml"), "{log}");
}

#[test]
fn automatic_panel_for_one_provider_is_three_prompted_agents() {
    let panel = auto_panel(env_of(&[("ANTHROPIC_API_KEY", "sk-ant-test")]).as_ref())
        .unwrap()
        .unwrap();
    let model = AUTO_MODELS.iter().find(|(t, _)| *t == "claude").unwrap().1;
    assert_eq!(panel.agents.len(), 3);
    let mut prompts: Vec<&str> = Vec::new();
    for agent in &panel.agents {
        assert_eq!(agent.backend.backend_type, "claude");
        assert_eq!(agent.backend.model, model);
        assert_eq!(agent.backend.base_url, "https://api.anthropic.com/v1");
        prompts.push(agent.system_message.as_deref().unwrap());
    }
    prompts.dedup();
    assert_eq!(prompts.len(), 3, "distinct system prompts");
}

#[test]
fn automatic_panel_for_several_providers_is_one_agent_each() {
    let env = env_of(&[
        ("GOOGLE_API_KEY", "g-test"),
        ("OPENAI_API_KEY", "sk-test"),
        ("GROQ_API_KEY", "  "),
        ("XAI_API_KEY", "xai-test"),
    ]);
    let panel = auto_panel(env.as_ref()).unwrap().unwrap();
    let agents: Vec<(&str, &str, &str)> = panel
        .agents
        .iter()
        .map(|a| {
            (
                a.id.as_str(),
                a.backend.backend_type.as_str(),
                a.backend.model.as_str(),
            )
        })
        .collect();
    let model = |t: &str| AUTO_MODELS.iter().find(|(n, _)| *n == t).unwrap().1;
    assert_eq!(
        agents,
        [
            ("openai", "openai", model("openai")),
            ("gemini", "gemini", model("gemini")),
            ("grok", "grok", model("grok")),
        ],
        "blank keys do not count"
    );
    assert!(panel.agents.iter().all(|a| a.system_message.is_none()));
    assert!(auto_panel(env_of(&[]).as_ref()).is_none());
}

#[test]
fn sdk_base_url_variables_are_honoured() {
    let env = env_of(&[
        ("OPENAI_API_KEY", "k"),
        ("OPENAI_BASE_URL", "http://proxy.test/v1/"),
        ("ANTHROPIC_API_KEY", "k"),
        ("ANTHROPIC_BASE_URL", "http://proxy.test/anthropic"),
        ("GEMINI_API_KEY", "k"),
        ("GOOGLE_GEMINI_BASE_URL", "http://proxy.test/google/"),
    ]);
    let panel = auto_panel(env.as_ref()).unwrap().unwrap();
    let urls: Vec<&str> = panel
        .agents
        .iter()
        .map(|a| a.backend.base_url.as_str())
        .collect();
    // The SDKs append their version path to the Anthropic and Gemini variables.
    assert_eq!(
        urls,
        [
            "http://proxy.test/v1",
            "http://proxy.test/anthropic/v1",
            "http://proxy.test/google/v1beta"
        ]
    );
}

#[test]
fn print_config_loads_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    for vars in [
        vec![("GROQ_API_KEY", "gsk-test")],
        vec![
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENROUTER_API_KEY", "or-test"),
        ],
    ] {
        let env = env_of(&vars);
        let printed = print_config(dir.path(), &vars);
        assert_eq!(
            Some(printed.as_str()),
            auto_panel_yaml(env.as_ref()).as_deref()
        );
        assert!(!printed.contains("test"), "no key is printed: {printed}");
        let saved = write(dir.path(), "saved.yaml", &printed);
        let loaded = load_panel(&saved, env.as_ref()).unwrap();
        let served = auto_panel(env.as_ref()).unwrap().unwrap();
        assert_eq!(loaded.agents, served.agents);
        assert_eq!(loaded.orchestrator, served.orchestrator);
        assert_eq!(loaded.call_policy, served.call_policy);
    }
}

#[test]
fn keys_in_dot_env_make_the_automatic_panel() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), ".env", "CEREBRAS_API_KEY=csk-from-dotenv\n");
    let printed = print_config(dir.path(), &[]);
    let model = AUTO_MODELS
        .iter()
        .find(|(t, _)| *t == "cerebras")
        .unwrap()
        .1;
    assert_eq!(
        printed.matches(&format!("model: \"{model}\"")).count(),
        3,
        "{printed}"
    );
    assert!(!printed.contains("csk-from-dotenv"));
}

#[test]
fn without_keys_or_files_the_error_names_the_variables_and_demo() {
    for var in auto_key_variables() {
        assert!(NO_CONFIG_HINT.contains(var), "{var} missing from the hint");
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().display().to_string();
    let out = run_in(dir.path(), &[("HOME", &home)], &["serve", "--port", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("OPENAI_API_KEY") && stderr.contains("--demo"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "never falls back to simulated agents"
    );
}

#[tokio::test]
async fn a_session_through_openai_base_url_reaches_the_simulator() {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", mock.url);
    let mut cmd = Command::new(support::bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .env_clear()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &base)
        .current_dir(dir.path());
    let server = support::start(cmd, "massgen listening on");
    let response = support::chat(&server.url, None, &support::question(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let answer = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("");
    assert!(!answer.is_empty(), "{body}");
    let stats = support::mock_stats(&mock).await;
    let model = AUTO_MODELS.iter().find(|(t, _)| *t == "openai").unwrap().1;
    assert!(
        stats["by_model"][model]["completed"].as_u64() >= Some(4),
        "three answers and a presentation reached the simulator: {stats}"
    );
}

#[test]
fn the_start_up_line_says_the_panel_is_automatic() {
    let dir = tempfile::tempdir().unwrap();
    let log = startup_log(dir.path(), &[("GROQ_API_KEY", "gsk-test")]);
    let model = AUTO_MODELS.iter().find(|(t, _)| *t == "groq").unwrap().1;
    assert!(log.contains(&format!("analyst(groq/{model})")), "{log}");
    assert!(
        log.contains("automatic panel: write a config to choose your own"),
        "{log}"
    );
    assert!(!log.contains("gsk-test"), "{log}");
}

/// Several providers, one key from `.env` and two from the environment, each SDK's
/// base-URL variable pointing at the simulator (which speaks all three formats): one agent
/// per provider, and every one of them is called.
#[tokio::test]
async fn a_session_through_each_sdk_base_url_reaches_the_simulator() {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), ".env", "GEMINI_API_KEY=g-from-dotenv\n");
    let mut cmd = Command::new(support::bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .env_clear()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", format!("{}/v1", mock.url))
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        // The Anthropic and Gemini SDKs take the origin and add their version path.
        .env("ANTHROPIC_BASE_URL", &mock.url)
        .env("GOOGLE_GEMINI_BASE_URL", &mock.url)
        .current_dir(dir.path());
    let server = support::start(cmd, "massgen listening on");
    let response = support::chat(&server.url, None, &support::question(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|a| !a.is_empty()),
        "{body}"
    );
    let stats = support::mock_stats(&mock).await;
    for provider in ["openai", "claude", "gemini"] {
        let model = AUTO_MODELS.iter().find(|(t, _)| *t == provider).unwrap().1;
        assert!(
            stats["by_model"][model]["completed"].as_u64() >= Some(1),
            "{provider} ({model}) reached the simulator: {stats}"
        );
    }
}
