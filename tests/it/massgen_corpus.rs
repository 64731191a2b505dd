//! MassGen 0.1.97's example configs (276 files, `tests/corpus/fetch-massgen.sh`; CI fetches
//! them): every config loads, or is refused for a reason a server cannot help (a local agent
//! program, per-deployment variables that are not set, a file that is not a panel). Prints
//! the tally and the warned keys. Then every loading config's agents call a loopback
//! recorder: no key MassGen itself never forwards to that API (read from its own
//! `_excluded_params.py` and params handlers) reaches an upstream body, `betas` arrive as `anthropic-beta`, `extra_body` is merged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use massgen::config::check_panel;
use massgen_providers::presets::PRESETS;

use massgen::app::{HttpProviders, ProviderFactory};
use massgen::config::load_panel;
use massgen_providers::http_client;
use serde_json::Value;

use crate::support::native::{Reply, coordination_turn, serve};
use crate::support::{TestEnv, env_of};

/// What the pinned corpus gives: files, and those that load.
const FILES: usize = 276;
const LOADING: usize = 214;

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Why a config is rightly refused, from its first error; `None` for any other error.
fn refusal(problem: &str) -> Option<&'static str> {
    if problem.contains("is a local agent program") {
        Some("local agent program")
    } else if problem.contains("AZURE_") && problem.contains("is not set") {
        Some("Azure per-deployment variables not set")
    } else if problem.contains("no agents") {
        Some("not a panel (no agents)")
    } else {
        None
    }
}

/// The corpus's configs folder and its YAML files, sorted; `None` (the test skips) when
/// MASSGEN_CORPUS_DIR is unset, which fails under MASSGEN_REQUIRE_CORPUS (CI).
fn corpus() -> Option<(PathBuf, Vec<PathBuf>)> {
    let Some(dir) = std::env::var_os("MASSGEN_CORPUS_DIR") else {
        assert!(
            std::env::var_os("MASSGEN_REQUIRE_CORPUS").is_none(),
            "MASSGEN_REQUIRE_CORPUS is set but MASSGEN_CORPUS_DIR is not"
        );
        println!("skipped: MASSGEN_CORPUS_DIR is not set (tests/corpus/fetch-massgen.sh)");
        return None;
    };
    let root = PathBuf::from(dir);
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    files.sort();
    assert_eq!(files.len(), FILES, "{}", root.display());
    Some((root, files))
}

/// Every key variable set to a dummy, as a user with all keys would have them.
fn dummy_keys() -> TestEnv {
    let mut vars: Vec<(&str, &str)> = PRESETS
        .iter()
        .flat_map(|p| p.key_vars.iter().map(|v| (*v, "x")))
        .collect();
    vars.push(("AZURE_OPENAI_ENDPOINT", "http://127.0.0.1:9"));
    env_of(&vars)
}

#[test]
fn massgen_example_configs_load_or_are_rightly_refused() {
    let Some((root, files)) = corpus() else {
        return;
    };
    let env = dummy_keys();

    let mut loading = 0;
    let mut refused: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut warned: BTreeMap<String, usize> = BTreeMap::new();
    let mut programs: BTreeMap<String, usize> = BTreeMap::new();
    for file in &files {
        let check = check_panel(file, env.as_ref());
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        match check.errors.first() {
            None => {
                loading += 1;
                let mut keys: Vec<String> =
                    check.warnings.iter().map(|w| generic_key(&w.key)).collect();
                keys.sort();
                keys.dedup();
                for key in keys {
                    *warned.entry(key).or_default() += 1;
                }
            }
            Some(error) => match refusal(&error.problem) {
                Some(reason) => {
                    *refused.entry(reason).or_default() += 1;
                    let mut local: Vec<&str> = check
                        .errors
                        .iter()
                        .filter_map(|e| local_program(&e.problem))
                        .collect();
                    local.sort();
                    local.dedup();
                    for program in local {
                        *programs.entry(program.to_string()).or_default() += 1;
                    }
                }
                None => unexpected.push(format!("{name}: {error}")),
            },
        }
    }
    println!(
        "{} configs, {loading} load, {} fail",
        files.len(),
        files.len() - loading
    );
    for (reason, count) in &refused {
        println!("  refused, {reason}: {count}");
    }
    for (program, count) in &programs {
        println!("    of which with a `{program}` agent: {count}");
    }
    println!("warned keys (configs that load with them):");
    for (key, count) in &warned {
        println!("  {count:4}  {key}");
    }
    assert!(
        unexpected.is_empty(),
        "wrongly refused:\n{}",
        unexpected.join("\n")
    );
    assert_eq!((files.len(), loading), (FILES, LOADING));
}

/// The program a "local agent program" error names (`'claude_code' is a local …`).
fn local_program(problem: &str) -> Option<&str> {
    let (head, _) = problem.split_once("' is a local agent program")?;
    head.rsplit_once('\'').map(|(_, name)| name)
}

/// `agents[3].backend.cwd` → `agent.backend.cwd`, to count keys across configs.
fn generic_key(key: &str) -> String {
    let key = key.strip_prefix("agents[").map_or(key.to_string(), |rest| {
        format!("agent{}", rest.split_once(']').map_or("", |(_, tail)| tail))
    });
    match key.split_once("mcp_servers[") {
        Some((head, rest)) => format!(
            "{head}mcp_servers[]{}",
            rest.split_once(']').map_or("", |(_, tail)| tail)
        ),
        None => key,
    }
}

/// The identifiers quoted in `block` (Python source), comments left out.
fn quoted_keys(block: &str) -> Vec<String> {
    block
        .lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .flat_map(|line| line.split('"').skip(1).step_by(2))
        .filter(|k| !k.is_empty() && k.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()))
        .map(String::from)
        .collect()
}

/// The keys quoted in `file` (below the wheel's `massgen/`) from `marker` to the next method
/// or the closing parenthesis at the file's margin.
fn massgen_set(configs: &Path, file: &str, marker: &str) -> Vec<String> {
    let path = configs.join("..").join(file);
    let source = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (tests/corpus/fetch-massgen.sh)", path.display()));
    let start = source
        .find(marker)
        .unwrap_or_else(|| panic!("{file}: {marker}"));
    let rest = &source[start + marker.len()..];
    let end = ["\n    def ", "\n)"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    let keys = quoted_keys(&rest[..end]);
    assert!(!keys.is_empty(), "{file}: {marker}");
    keys
}

/// What MassGen never sends to the API a request went to: its BASE_EXCLUDED_CONFIG_PARAMS
/// (`backend/_excluded_params.py`), `upload_files`, and the exclusions of the wire's own
/// params handler (`api_params_handler/`), keyed by a part of the request path.
fn massgen_excluded(configs: &Path) -> (Vec<String>, Vec<(&'static str, Vec<String>)>) {
    let mut base = massgen_set(
        configs,
        "backend/_excluded_params.py",
        "BASE_EXCLUDED_CONFIG_PARAMS",
    );
    assert!(base.len() > 100, "{base:?}");
    base.extend(massgen_set(
        configs,
        "api_params_handler/_api_params_handler_base.py",
        "def get_base_excluded_params",
    ));
    let handler = |file: &str| {
        massgen_set(
            configs,
            &format!("api_params_handler/{file}"),
            "def get_excluded_params",
        )
    };
    let per_wire = vec![
        (
            "/chat/completions",
            handler("_chat_completions_api_params_handler.py"),
        ),
        ("/responses", handler("_response_api_params_handler.py")),
        ("/messages", handler("_claude_api_params_handler.py")),
        ("/v1beta/models/", handler("_gemini_api_params_handler.py")),
    ];
    (base, per_wire)
}

/// `base_url` with its scheme, host and port replaced by the recorder's; the path stays.
fn to_loopback(base_url: &str, recorder: &str) -> String {
    let rest = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest);
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    format!("{recorder}{path}")
}

/// The raw `backend` mappings of a config file, in agent order.
fn raw_backends(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap();
    let doc: Value = serde_norway::from_str(&text).unwrap();
    match (doc.get("agents"), doc.get("agent")) {
        (Some(Value::Array(agents)), _) => agents.iter().map(|a| a["backend"].clone()).collect(),
        (_, Some(agent)) => vec![agent["backend"].clone()],
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn corpus_capture_sends_no_massgen_only_key_upstream() {
    let Some((root, files)) = corpus() else {
        return;
    };
    let (base, per_wire) = massgen_excluded(&root);
    let env = dummy_keys();
    let (url, upstream) = serve(vec![Reply::Status(400, vec![], "{}".into())]).await;
    let factory = HttpProviders::new(http_client().unwrap());
    let (mut configs, mut calls, mut betas, mut extra) = (0, 0, 0, 0);
    let mut leaks = Vec::new();
    for file in &files {
        let Ok(mut panel) = load_panel(file, env.as_ref()) else {
            continue;
        };
        configs += 1;
        panel.call_policy.max_attempts = 1;
        let raw = raw_backends(file);
        assert_eq!(raw.len(), panel.agents.len(), "{}", file.display());
        for (agent, raw) in panel.agents.iter_mut().zip(raw) {
            // MassGen sends OpenRouter's `reasoning` through extra_body, which the SDK merges.
            let openrouter = agent.backend.base_url.contains("openrouter.ai");
            agent.backend.base_url = to_loopback(&agent.backend.base_url, &url);
            let provider = factory
                .build(&agent.backend, &panel.call_policy)
                .unwrap_or_else(|e| panic!("{}: {}: {e}", file.display(), agent.id));
            let before = upstream.requests().len();
            let mut stream = provider.stream(coordination_turn());
            while futures::StreamExt::next(&mut stream).await.is_some() {}
            let seen = upstream.requests();
            assert_eq!(seen.len(), before + 1, "{}: {}", file.display(), agent.id);
            let request = &seen[before];
            calls += 1;
            let where_ = format!("{}: {} ({})", file.display(), agent.id, request.uri);
            let body = request.body.as_object().expect("a JSON body");
            // Gemini carries the sampling parameters one level down.
            let nested = body
                .get("generationConfig")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|c| c.keys());
            let wire = per_wire
                .iter()
                .find(|(part, _)| request.uri.contains(part))
                .map(|(_, keys)| keys)
                .unwrap_or_else(|| panic!("{where_}: which API?"));
            for key in body.keys().chain(nested) {
                let allowed = openrouter && key == "reasoning";
                let excluded = base.contains(key) || wire.contains(key);
                if (excluded && !allowed) || key == "betas" || key == "extra_body" {
                    leaks.push(format!("{where_}: {key}"));
                }
            }
            if let Some(list) = raw.get("betas").and_then(Value::as_array) {
                betas += 1;
                let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
                assert_eq!(
                    request
                        .headers
                        .get("anthropic-beta")
                        .map(|v| v.to_str().unwrap()),
                    Some(names.join(",").as_str()),
                    "{where_}"
                );
            }
            if let Some(merged) = raw.get("extra_body").and_then(Value::as_object) {
                extra += 1;
                for (key, value) in merged {
                    assert_eq!(body.get(key), Some(value), "{where_}: extra_body.{key}");
                }
            }
        }
    }
    println!(
        "{configs} loading configs, {calls} upstream calls recorded; {betas} with betas, {extra} with extra_body"
    );
    assert!(
        leaks.is_empty(),
        "MassGen-only keys sent:\n{}",
        leaks.join("\n")
    );
    assert_eq!(configs, LOADING);
    assert!(
        betas > 0 && extra > 0,
        "the corpus exercises betas and extra_body"
    );
}
