//! Planning mode (`orchestrator.coordination.enable_planning_mode`, issue 25): its config
//! keys (the switch, the servers' `read_only_tools`, the warning when nothing would run the
//! held tools). The engine's side, with scripted providers and fake tools, is
//! `crates/massgen-core/tests/engine/planning.rs`.

use std::path::Path;

use massgen::config::{check_panel, parse_panel};

use crate::support::{env_of, write};

fn env() -> crate::support::TestEnv {
    env_of(&[("OPENAI_API_KEY", "sk")])
}

const AGENT: &str = "agents:\n  - id: a\n    backend:\n      type: openai\n      model: m\n      mcp_servers:\n        files: {command: files-mcp, read_only_tools: [lookup, stat]}\n        web: {url: \"http://127.0.0.1:9/mcp\"}\n";

#[test]
fn planning_mode_and_read_only_tools_load() {
    let parse = |yaml: &str| parse_panel("team", Path::new("team.yaml"), yaml, env().as_ref());
    let off = parse(AGENT).unwrap();
    assert!(
        !off.orchestrator.planning_mode,
        "off by default, as in MassGen"
    );
    let tools = off.agents[0].tools.as_ref().unwrap();
    assert_eq!(tools.read_only["files"], ["lookup", "stat"]);
    assert!(
        !tools.read_only.contains_key("web"),
        "the hints decide there"
    );

    let on = format!("{AGENT}orchestrator:\n  coordination: {{enable_planning_mode: true}}\n");
    assert!(parse(&on).unwrap().orchestrator.planning_mode);
    let dir = tempfile::tempdir().unwrap();
    let checked = check_panel(&write(dir.path(), "team.yaml", &on), env().as_ref());
    assert!(
        checked.errors.is_empty() && checked.warnings.is_empty(),
        "{checked:?}"
    );

    // Without a presentation call the held tools would never run: said at start-up.
    let reuse = format!(
        "{AGENT}orchestrator:\n  skip_final_presentation: true\n  coordination: {{enable_planning_mode: true}}\n"
    );
    let checked = check_panel(&write(dir.path(), "reuse.yaml", &reuse), env().as_ref());
    let warning = checked
        .warnings
        .iter()
        .find(|w| w.key == "orchestrator.coordination.enable_planning_mode")
        .expect("warned");
    assert!(warning.why.contains("never run"), "{}", warning.why);

    let bad = format!("{AGENT}orchestrator:\n  coordination: {{enable_planning_mode: maybe}}\n");
    let e = parse(&bad).unwrap_err().to_string();
    assert!(
        e.contains("orchestrator.coordination.enable_planning_mode"),
        "{e}"
    );
    let bad = AGENT.replace("[lookup, stat]", "lookup");
    let e = parse(&bad).unwrap_err().to_string();
    assert!(
        e.contains("agents[0].backend.mcp_servers.files.read_only_tools"),
        "{e}"
    );
}
