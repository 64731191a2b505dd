//! MassGen 0.1.97's example configs (276 files, `tests/corpus/fetch-massgen.sh`; CI fetches
//! them): every config loads, or is refused for a reason a server cannot help (a local agent
//! program, per-deployment variables that are not set, a file that is not a panel). Prints
//! the tally and the warned keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use massgen::config::check_panel;
use massgen_providers::presets::PRESETS;

use crate::support::env_of;

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

#[test]
fn massgen_example_configs_load_or_are_rightly_refused() {
    let Some(dir) = std::env::var_os("MASSGEN_CORPUS_DIR") else {
        assert!(
            std::env::var_os("MASSGEN_REQUIRE_CORPUS").is_none(),
            "MASSGEN_REQUIRE_CORPUS is set but MASSGEN_CORPUS_DIR is not"
        );
        println!("skipped: MASSGEN_CORPUS_DIR is not set (tests/corpus/fetch-massgen.sh)");
        return;
    };
    let root = PathBuf::from(dir);
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    files.sort();
    // Every key variable set to a dummy, as a user with all keys would have them.
    let mut vars: Vec<(&str, &str)> = PRESETS
        .iter()
        .flat_map(|p| p.key_vars.iter().map(|v| (*v, "x")))
        .collect();
    vars.push(("AZURE_OPENAI_ENDPOINT", "http://127.0.0.1:9"));
    let env = env_of(&vars);

    let mut loading = 0;
    let mut refused: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut warned: BTreeMap<String, usize> = BTreeMap::new();
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
                Some(reason) => *refused.entry(reason).or_default() += 1,
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
