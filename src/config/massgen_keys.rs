//! MassGen's own config keys, as data, and what this server does with each.
//!
//! Source: MassGen **0.1.97** (the wheel's `backend/_excluded_params.py` and the
//! `api_params_handler/*` exclusion sets, `agent_config.py`'s orchestrator, coordination and
//! timeout keys, `cli/backends.py`'s backend types and `chatcompletion` host rule). Read,
//! not copied: the groups and their reasons are ours. docs/configuration.md ("MassGen
//! configs") lists every key below with its group (a test keeps the two in step).

/// Keys that share a fate, and why.
#[derive(Debug, Clone, Copy)]
pub struct KeyGroup {
    pub why: &'static str,
    pub keys: &'static [&'static str],
}

const fn group(why: &'static str, keys: &'static [&'static str]) -> KeyGroup {
    KeyGroup { why, keys }
}

/// The group of `key` among `groups`, if any.
pub fn group_of(groups: &'static [KeyGroup], key: &str) -> Option<&'static KeyGroup> {
    groups.iter().find(|g| g.keys.contains(&key))
}

/// Backend keys that configure MassGen itself and are never upstream parameters: left out
/// of the request with one warning per key.
pub const BACKEND_DROPPED: &[KeyGroup] = &[
    group(
        "MassGen's local workspace and files",
        &[
            "cwd",
            "agent_temporary_workspace",
            "agent_temporary_workspace_parent",
            "context_paths",
            "context_write_access_enabled",
            "enforce_read_before_delete",
            "upload_files",
        ],
    ),
    group(
        "local command execution (MassGen runs commands, Docker or a sandbox on its host)",
        &[
            "enable_mcp_command_line",
            "command_line_allowed_commands",
            "command_line_blocked_commands",
            "command_line_execution_mode",
            "command_line_docker_image",
            "command_line_docker_memory_limit",
            "command_line_docker_cpu_limit",
            "command_line_docker_network_mode",
            "command_line_docker_enable_sudo",
            "command_line_docker_credentials",
            "command_line_docker_packages",
            "command_line_srt_network_allowed_domains",
            "command_line_srt_deny_read",
            "command_line_srt_allow_unix_sockets",
            "command_line_srt_read_mode",
            "command_line_srt_allow_read",
        ],
    ),
    group(
        "local Python tools and MassGen's MCP plumbing (this server's tools are mcp_servers)",
        &[
            "custom_tools",
            "custom_tools_path",
            "auto_discover_custom_tools",
            "exclude_custom_tools",
            "enable_code_based_tools",
            "shared_tools_directory",
            "direct_mcp_servers",
            "exclude_file_operation_mcps",
            "use_mcpwrapped_for_tool_filtering",
            "use_no_roots_wrapper",
            "use_multi_mcp",
            "mcp_sdk_auto",
            "concurrent_tool_execution",
            "max_concurrent_tools",
            "function_calling_mode",
        ],
    ),
    group(
        "provider built-in tools (web search, code execution, computer use), not wired up here",
        &[
            "enable_web_search",
            "enable_x_search",
            "enable_code_execution",
            "enable_code_interpreter",
            "enable_tool_search",
            "tool_search_variant",
            "enable_programmatic_flow",
            "enable_strict_tool_use",
            "output_schema",
            "engine",
            "max_results",
            "search_prompt",
            "search_context_size",
            "enable_computer_use",
            "display_width",
            "display_height",
            "computer_environment",
        ],
    ),
    group(
        "media generation tools (local tools that call other APIs and write files)",
        &[
            "enable_image_generation",
            "enable_audio_generation",
            "enable_video_generation",
            "enable_file_generation",
            "enable_multimodal_tools",
            "multimodal_config",
            "image_generation_backend",
            "image_generation_model",
            "video_generation_backend",
            "video_generation_model",
            "audio_generation_backend",
            "audio_generation_model",
            "use_multimodal_tools",
        ],
    ),
    group(
        "coordination options MassGen reads per agent; here they belong under orchestrator",
        &[
            "voting_sensitivity",
            "voting_threshold",
            "vote_only",
            "coordination_mode",
            "presenter_agent",
            "final_answer_strategy",
            "subtask",
            "fairness_enabled",
            "fairness_lead_cap_answers",
            "max_midstream_injections_per_round",
            "defer_peer_updates_until_restart",
            "allow_midstream_peer_updates_before_checklist_submit",
            "max_checklist_calls_per_round",
            "checklist_first_answer",
            "checklist_require_gap_report",
            "gap_report_mode",
            "plan_depth",
            "plan_thoroughness",
            "plan_target_steps",
            "plan_target_chunks",
            "use_two_tier_workspace",
            "write_mode",
            "drift_conflict_policy",
            "subagent_types",
            "round_evaluator_before_checklist",
            "orchestrator_managed_round_evaluator",
            "round_evaluator_skip_synthesis",
            "round_evaluator_refine",
            "round_evaluator_transformation_pressure",
            "enable_quality_rethink_on_iteration",
            "enable_novelty_on_iteration",
            "enable_execution_trace_analyzer",
            "novelty_injection",
            "improvements",
            "learning_capture_mode",
            "criteria_mode",
            "bootstrap_max_per_agent_per_round",
            "bootstrap_max_total",
            "disable_final_only_round_capture_fallback",
            "main_agent",
            "checkpoint_enabled",
            "checkpoint_mode",
            "checkpoint_guidance",
            "checkpoint_gated_patterns",
            "standalone_checkpoint_enabled",
            "standalone_checkpoint_team_config",
            "standalone_checkpoint_mode",
            "standalone_checkpoint_single",
            "standalone_checkpoint_include_workspace_context",
            "hooks",
            "permissions",
        ],
    ),
    group(
        "MassGen's own client: identity, sessions, transport, pacing and retries",
        &[
            "agent_id",
            "session_id",
            "filesystem_session_id",
            "session_storage_base",
            "instance_id",
            "websocket_mode",
            "organization",
            "previous_response_id",
            "enable_rate_limit",
            "enable_nlip",
            "nlip",
            "nlip_config",
            "debug_delay_seconds",
            "debug_delay_after_n_tools",
            "max_incomplete_response_retries",
            "max_mcp_message_history",
            "provider_name",
            "gemini_backoff_max_attempts",
            "gemini_backoff_initial_delay",
            "gemini_backoff_multiplier",
            "gemini_backoff_max_delay",
            "gemini_backoff_jitter",
        ],
    ),
    group(
        "options of the local agent programs (claude_code)",
        &[
            "disallowed_tools",
            "permission_mode",
            "append_system_prompt",
        ],
    ),
];

/// Backend key prefixes MassGen consumes wholesale (`_…`: internal flags, which MassGen's
/// Chat Completions handler never sends).
pub const BACKEND_DROPPED_PREFIXES: &[(&str, &str)] = &[
    ("llm_circuit_breaker_", "MassGen's circuit breaker"),
    ("_", "MassGen-internal flags"),
];

/// Backend types that are programs MassGen runs on its own host, with what each is.
pub const LOCAL_AGENT_PROGRAMS: &[(&str, &str)] = &[
    (
        "claude_code",
        "the Claude Agent SDK (Claude Code) run on MassGen's host",
    ),
    ("codex", "OpenAI's Codex CLI run as a subprocess"),
    ("gemini_cli", "Google's Gemini CLI run as a subprocess"),
    (
        "copilot",
        "the GitHub Copilot SDK with a local subscription",
    ),
    (
        "antigravity_cli",
        "Google's Antigravity CLI (`agy`) run as a subprocess",
    ),
    (
        "ag2",
        "the AG2 (AutoGen) framework run in MassGen's process",
    ),
    (
        "autogen",
        "the AG2 (AutoGen) framework run in MassGen's process",
    ),
];

/// MassGen's `orchestrator:` keys that this server does not implement: one warning per
/// key at start-up. (The ones it implements are read in `orchestrator.rs`.)
pub const ORCHESTRATOR_NOT_IMPLEMENTED: &[KeyGroup] = &[
    group(
        "checklist voting (MassGen's own MCP server)",
        &[
            "voting_threshold",
            "max_checklist_calls_per_round",
            "checklist_first_answer",
            "checklist_require_gap_report",
            "gap_report_mode",
        ],
    ),
    group(
        "mid-stream peer updates (this server restarts a stale turn instead)",
        &[
            "max_midstream_injections_per_round",
            "defer_peer_updates_until_restart",
            "allow_midstream_peer_updates_before_checklist_submit",
            "disable_injection",
        ],
    ),
    group(
        "decomposition mode",
        &["coordination_mode", "presenter_agent"],
    ),
    group(
        "MassGen's local workspace, files and containers",
        &[
            "snapshot_storage",
            "agent_temporary_workspace",
            "context_paths",
            "docker",
        ],
    ),
    group(
        "media generation tools",
        &[
            "enable_multimodal_tools",
            "multimodal_config",
            "image_generation_backend",
            "video_generation_backend",
            "audio_generation_backend",
        ],
    ),
    group(
        "MassGen features outside a chat server (NLIP, DSPy, skills, TUI, debugging)",
        &[
            "coordination",
            "dspy",
            "enable_nlip",
            "nlip",
            "nlip_config",
            "skills_directory",
            "debug_final_answer",
            "interactive_mode",
            "max_turns",
            "type",
            "timeout",
        ],
    ),
    group(
        "older MassGen keys",
        &["session_storage", "enable_agent_context_sharing"],
    ),
];

/// The keys of MassGen's `orchestrator.coordination:` section this server implements
/// (read in `orchestrator.rs`); each of its other keys is one warning.
pub const COORDINATION_IMPLEMENTED: &[&str] =
    &["max_orchestration_restarts", "enable_planning_mode"];

/// `voting_sensitivity` values MassGen has beyond lenient/balanced/strict, and the one
/// used instead (the closest rubric; checklist modes need MassGen's own MCP server).
pub const VOTING_SENSITIVITY_FALLBACKS: &[(&str, &str)] = &[
    ("checklist", "strict"),
    ("checklist_scored", "strict"),
    ("checklist_gated", "strict"),
    ("adversarial", "strict"),
    ("roi_conservative", "strict"),
    ("roi", "balanced"),
    ("roi_balanced", "balanced"),
    ("sequential", "balanced"),
    ("consistency", "balanced"),
    ("reflective", "balanced"),
    ("roi_aggressive", "lenient"),
    ("diversity", "lenient"),
];

/// `timeout_settings` round timeouts, mapped onto the turn timeout (`orchestrator.rs`).
pub const ROUND_TIMEOUT_KEYS: [&str; 3] = [
    "initial_round_timeout_seconds",
    "subsequent_round_timeout_seconds",
    "round_timeout_grace_seconds",
];

/// MassGen's default `round_timeout_grace_seconds`.
pub const ROUND_TIMEOUT_GRACE_DEFAULT_SECS: f64 = 120.0;

/// `chatcompletion` without `api_key`: the key variable follows the `base_url` host, as
/// MassGen's `create_backend` does (host suffix → the preset whose variables hold the key).
/// Unlike MassGen, an unknown host gets no key: the OpenAI SDK would send `OPENAI_API_KEY`
/// to any host, which leaks it.
pub const CHATCOMPLETION_HOST_KEYS: &[(&str, &str)] = &[
    ("cerebras.ai", "cerebras"),
    ("together.xyz", "together"),
    ("fireworks.ai", "fireworks"),
    ("groq.com", "groq"),
    ("nebius.com", "nebius"),
    ("nebius.ai", "nebius"),
    ("openrouter.ai", "openrouter"),
    ("z.ai", "zai"),
    ("bigmodel.cn", "zai"),
    ("moonshot.ai", "moonshot"),
    ("moonshot.cn", "moonshot"),
    ("nvidia.com", "nvidia_nim"),
    ("poe.com", "poe"),
    ("aliyuncs.com", "qwen"),
    ("api.openai.com", "openai"),
    ("x.ai", "grok"),
];

/// Top-level keys of MassGen's first config format, which MassGen rejects too.
pub const V1_TOP_LEVEL_KEYS: &[&str] = &[
    "models",
    "model_configs",
    "num_agents",
    "max_rounds",
    "consensus_threshold",
    "voting_enabled",
    "enable_voting",
];
