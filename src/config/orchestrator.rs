//! The `orchestrator:` and `timeout_settings:` sections → [`OrchestratorOptions`].
//!
//! Keys this server implements are read here; MassGen's other keys are warnings naming
//! them (`massgen_keys::ORCHESTRATOR_NOT_IMPLEMENTED`); any other key is an error, since a
//! typo must not pass silently.

use std::time::Duration;

use massgen_core::coordination::{FinalAnswerStrategy, OrchestratorOptions, Quorum, Strictness};
use serde_json::{Map, Value};

use super::ConfigError;
use super::expand::join;
use super::massgen_keys::{
    COORDINATION_IMPLEMENTED, ORCHESTRATOR_NOT_IMPLEMENTED, ROUND_TIMEOUT_GRACE_DEFAULT_SECS,
    ROUND_TIMEOUT_KEYS, VOTING_SENSITIVITY_FALLBACKS, group_of,
};
use super::read::Cx;

/// `orchestrator:` keys this server implements.
const ORCHESTRATOR_KEYS: &[&str] = &[
    "voting_sensitivity",
    "answer_novelty_requirement",
    "max_new_answers_per_agent",
    "skip_coordination_rounds",
    "single_agent_coordination",
    "skip_final_presentation",
    "min_live_agents",
    "agent_turn_timeout_seconds",
    "presentation_timeout_seconds",
    "present_tool_calls",
    "defer_voting_until_all_answered",
    "voting_quorum",
    "max_cost_usd",
    "final_answer_strategy",
    "max_new_answers_global",
    "skip_voting",
    "fairness_enabled",
    "fairness_lead_cap_answers",
    "max_orchestration_restarts",
];

/// Most restarts `max_orchestration_restarts` may allow: each is a whole new deliberation.
const MAX_RESTARTS: i64 = 10;

/// `timeout_settings:` keys this server implements (the round timeouts included).
const TIMEOUT_KEYS: &[&str] = &[
    "orchestrator_timeout_seconds",
    "agent_turn_timeout_seconds",
    "presentation_timeout_seconds",
    "initial_round_timeout_seconds",
    "subsequent_round_timeout_seconds",
    "round_timeout_grace_seconds",
];

impl Cx<'_> {
    pub(super) fn orchestrator(
        &self,
        root: &Map<String, Value>,
        agent_count: usize,
    ) -> Result<OrchestratorOptions, ConfigError> {
        let mut options = OrchestratorOptions::default();
        let empty = Map::new();
        let orch = self
            .section(root.get("orchestrator"), "orchestrator")?
            .unwrap_or(&empty);
        let timeouts = self
            .section(root.get("timeout_settings"), "timeout_settings")?
            .unwrap_or(&empty);
        self.orchestrator_keys(orch)?;
        self.only_known(timeouts, "timeout_settings", TIMEOUT_KEYS)?;

        let key = |k: &str| join("orchestrator", k);
        let voting = "voting_sensitivity";
        let fallbacks = VOTING_SENSITIVITY_FALLBACKS;
        if let Some(s) = self.strictness(orch.get(voting), &key(voting), fallbacks)? {
            options.voting_sensitivity = s;
        }
        let novelty = "answer_novelty_requirement";
        if let Some(s) = self.strictness(orch.get(novelty), &key(novelty), &[])? {
            options.answer_novelty_requirement = s;
        }
        let cap = "max_new_answers_per_agent";
        options.max_new_answers_per_agent = self
            .count(orch.get(cap), &key(cap), 1, i64::from(u32::MAX))?
            .and_then(|n| u32::try_from(n).ok());
        if let Some(b) = self.boolean(
            orch.get("skip_coordination_rounds"),
            &key("skip_coordination_rounds"),
        )? {
            options.skip_coordination_rounds = b;
        }
        if let Some(b) = self.boolean(
            orch.get("single_agent_coordination"),
            &key("single_agent_coordination"),
        )? {
            options.single_agent_coordination = b;
        }
        if let Some(b) = self.boolean(
            orch.get("skip_final_presentation"),
            &key("skip_final_presentation"),
        )? {
            options.skip_final_presentation = b;
        }
        if let Some(b) = self.boolean(orch.get("present_tool_calls"), &key("present_tool_calls"))? {
            options.present_tool_calls = b;
        }
        self.waste_rules(orch, &mut options)?;
        self.answer_rules(orch, &mut options)?;
        self.restarts(orch, &mut options)?;
        self.planning_mode(orch, &mut options)?;
        let max_live = i64::try_from(agent_count).unwrap_or(i64::MAX);
        let min_live_key = key("min_live_agents");
        if let Some(n) = self.integer(orch.get("min_live_agents"), &min_live_key)? {
            if n < 1 || n > max_live {
                return Err(self.err(
                    &min_live_key,
                    format!("must be between 1 and the number of agents ({agent_count}), got {n}"),
                ));
            }
            options.min_live_agents = usize::try_from(n).unwrap_or(1);
        }

        let session = "orchestrator_timeout_seconds";
        if let Some(d) = self.duration(
            timeouts.get(session),
            &join("timeout_settings", session),
            false,
            false,
        )? {
            options.session_timeout = d;
        }
        match self.timeout_either(orch, timeouts, "agent_turn_timeout_seconds")? {
            Some(d) => options.agent_turn_timeout = d,
            None => {
                if let Some(d) = self.round_timeouts(timeouts)? {
                    options.agent_turn_timeout = d;
                }
            }
        }
        if let Some(d) = self.timeout_either(orch, timeouts, "presentation_timeout_seconds")? {
            options.presentation_timeout = d;
        }
        Ok(options)
    }

    /// The keys that decide how much a session may spend (deferred voting, the quorum, the
    /// budget): docs/protocol.md, "The session loop".
    fn waste_rules(
        &self,
        orch: &Map<String, Value>,
        options: &mut OrchestratorOptions,
    ) -> Result<(), ConfigError> {
        let defer = "defer_voting_until_all_answered";
        if let Some(b) = self.boolean(orch.get(defer), &join("orchestrator", defer))? {
            options.defer_voting_until_all_answered = b;
        }
        if let Some(value) = orch.get("voting_quorum") {
            let key = join("orchestrator", "voting_quorum");
            let value = self.expanded(value, &key)?;
            options.voting_quorum = Quorum::parse(&value).map_err(|e| self.err(&key, e))?;
        }
        let key = join("orchestrator", "max_cost_usd");
        match self.number(orch.get("max_cost_usd"), &key)? {
            Some(n) if n.is_finite() && n > 0.0 => options.max_cost_usd = Some(n),
            Some(n) => return Err(self.err(&key, format!("must be above 0 USD, got {n}"))),
            None => {}
        }
        Ok(())
    }

    /// How the final answer is made and who may still answer (MassGen 0.1.46–0.1.97:
    /// `final_answer_strategy`, `max_new_answers_global`, `skip_voting`, fairness), with
    /// MassGen's values and defaults.
    fn answer_rules(
        &self,
        orch: &Map<String, Value>,
        options: &mut OrchestratorOptions,
    ) -> Result<(), ConfigError> {
        let key = |k: &str| join("orchestrator", k);
        let strategy = key("final_answer_strategy");
        if let Some(text) = self.string(orch.get("final_answer_strategy"), &strategy)? {
            let parsed = FinalAnswerStrategy::parse(&text).ok_or_else(|| {
                self.err(
                    &strategy,
                    format!(
                        "unknown value '{text}' (known: winner_reuse, winner_present, synthesize)"
                    ),
                )
            })?;
            options.final_answer_strategy = Some(parsed);
        }
        let global = "max_new_answers_global";
        options.max_new_answers_global = self
            .count(orch.get(global), &key(global), 1, i64::from(u32::MAX))?
            .and_then(|n| u32::try_from(n).ok());
        if let Some(b) = self.boolean(orch.get("skip_voting"), &key("skip_voting"))? {
            options.skip_voting = b;
        }
        let cap = "fairness_lead_cap_answers";
        if let Some(n) = self.count(orch.get(cap), &key(cap), 0, i64::from(u32::MAX))? {
            options.fairness_lead_cap = u32::try_from(n).ok();
        }
        let enabled = key("fairness_enabled");
        if self.boolean(orch.get("fairness_enabled"), &enabled)? == Some(false) {
            options.fairness_lead_cap = None;
        }
        Ok(())
    }

    /// `max_orchestration_restarts`, at the top of `orchestrator:` or under its
    /// `coordination:` (MassGen reads both); both with different values is an error.
    fn restarts(
        &self,
        orch: &Map<String, Value>,
        options: &mut OrchestratorOptions,
    ) -> Result<(), ConfigError> {
        let name = "max_orchestration_restarts";
        let top_key = join("orchestrator", name);
        let top = self.count(orch.get(name), &top_key, 0, MAX_RESTARTS)?;
        let inner_key = join("orchestrator.coordination", name);
        let inner = match orch.get("coordination") {
            Some(Value::Object(c)) => self.count(c.get(name), &inner_key, 0, MAX_RESTARTS)?,
            _ => None,
        };
        let n = match (top, inner) {
            (Some(a), Some(b)) if a != b => {
                return Err(self.err(
                    &inner_key,
                    format!("conflicts with {top_key}; give it in one place"),
                ));
            }
            (a, b) => a.or(b).unwrap_or(0),
        };
        options.max_orchestration_restarts = u32::try_from(n).unwrap_or(0);
        Ok(())
    }

    /// `orchestrator.coordination.enable_planning_mode` (MassGen's key and default, off).
    /// Without a presentation call the tools it holds back would never run: said at
    /// start-up.
    fn planning_mode(
        &self,
        orch: &Map<String, Value>,
        options: &mut OrchestratorOptions,
    ) -> Result<(), ConfigError> {
        let Some(Value::Object(coordination)) = orch.get("coordination") else {
            return Ok(());
        };
        let key = join("orchestrator.coordination", "enable_planning_mode");
        let Some(on) = self.boolean(coordination.get("enable_planning_mode"), &key)? else {
            return Ok(());
        };
        options.planning_mode = on;
        if on && options.final_answer() == FinalAnswerStrategy::WinnerReuse {
            self.warn(
                &key,
                "the final answer is the stored one (skip_final_presentation or \
                 final_answer_strategy: winner_reuse): the MCP tools planning mode holds back \
                 are never run",
            );
        }
        Ok(())
    }

    /// Implemented keys pass, MassGen's other keys are warnings, anything else an error.
    fn orchestrator_keys(&self, orch: &Map<String, Value>) -> Result<(), ConfigError> {
        for (key, value) in orch {
            let path = join("orchestrator", key);
            if ORCHESTRATOR_KEYS.contains(&key.as_str()) {
                continue;
            }
            if key == "coordination" {
                // MassGen's CoordinationConfig (planning, broadcast, skills, subagents, …):
                // one warning per key it holds.
                match value {
                    Value::Object(inner) if !inner.is_empty() => {
                        // Read in `restarts` and `planning_mode`.
                        let implemented =
                            |k: &&String| COORDINATION_IMPLEMENTED.contains(&k.as_str());
                        for inner_key in inner.keys().filter(|k| !implemented(k)) {
                            self.warn(
                                &join(&path, inner_key),
                                "MassGen coordination feature, not implemented by massgen serve",
                            );
                        }
                    }
                    _ => self.warn(&path, "MassGen coordination features, not implemented"),
                }
                continue;
            }
            match group_of(ORCHESTRATOR_NOT_IMPLEMENTED, key) {
                Some(group) => self.warn(
                    &path,
                    format!("accepted by MassGen, not implemented here: {}", group.why),
                ),
                None => {
                    let mut known: Vec<&str> = ORCHESTRATOR_KEYS.to_vec();
                    known.extend(ORCHESTRATOR_NOT_IMPLEMENTED.iter().flat_map(|g| g.keys));
                    return Err(
                        self.err(&path, format!("unknown key (known: {})", known.join(", ")))
                    );
                }
            }
        }
        Ok(())
    }

    /// lenient, balanced or strict; a value of `fallbacks` (MassGen's other rubrics) warns
    /// and uses the closest of the three, named in the warning; anything else is an error.
    fn strictness(
        &self,
        value: Option<&Value>,
        key: &str,
        fallbacks: &[(&str, &str)],
    ) -> Result<Option<Strictness>, ConfigError> {
        let Some(text) = self.string(value, key)? else {
            return Ok(None);
        };
        if let Some(s) = parse_strictness(&text) {
            return Ok(Some(s));
        }
        let wanted = text.trim().to_ascii_lowercase();
        if let Some((name, fallback)) = fallbacks.iter().find(|(name, _)| *name == wanted) {
            self.warn(
                key,
                format!("MassGen's '{name}' voting is not implemented; using '{fallback}'"),
            );
            return Ok(parse_strictness(fallback));
        }
        let mut known = vec!["lenient", "balanced", "strict"];
        known.extend(fallbacks.iter().map(|(n, _)| *n));
        Err(self.err(
            key,
            format!("unknown value '{text}' (known: {})", known.join(", ")),
        ))
    }

    /// MassGen's round timeouts as our one turn timeout: a turn may run until MassGen's hard
    /// limit (soft timeout + grace) of the longer of the two rounds. (MassGen's soft
    /// "wrap up now" injection has no counterpart here.)
    fn round_timeouts(
        &self,
        timeouts: &Map<String, Value>,
    ) -> Result<Option<Duration>, ConfigError> {
        let [initial, subsequent, grace] = ROUND_TIMEOUT_KEYS;
        let secs = |k: &str| self.number(timeouts.get(k), &join("timeout_settings", k));
        let positive = |k: &str, n: f64| {
            if n.is_finite() && n >= 0.0 {
                Ok(n)
            } else {
                Err(self.err(
                    &join("timeout_settings", k),
                    format!("must be zero or a positive number of seconds (got {n})"),
                ))
            }
        };
        let soft = match (secs(initial)?, secs(subsequent)?) {
            (None, None) => return Ok(None),
            (a, b) => {
                let a = a.map(|n| positive(initial, n)).transpose()?.unwrap_or(0.0);
                let b = b
                    .map(|n| positive(subsequent, n))
                    .transpose()?
                    .unwrap_or(0.0);
                a.max(b)
            }
        };
        let grace_secs = match secs(grace)? {
            Some(n) => positive(grace, n)?,
            None => ROUND_TIMEOUT_GRACE_DEFAULT_SECS,
        };
        Ok(Duration::try_from_secs_f64(soft + grace_secs)
            .ok()
            .filter(|d| !d.is_zero()))
    }

    /// A timeout that may be under `orchestrator:` or `timeout_settings:`; both with different
    /// values is an error rather than a silent pick.
    fn timeout_either(
        &self,
        orch: &Map<String, Value>,
        timeouts: &Map<String, Value>,
        name: &str,
    ) -> Result<Option<Duration>, ConfigError> {
        let in_orch = self.duration(orch.get(name), &join("orchestrator", name), false, false)?;
        let ts_key = join("timeout_settings", name);
        let in_ts = self.duration(timeouts.get(name), &ts_key, false, false)?;
        match (in_orch, in_ts) {
            (Some(a), Some(b)) if a != b => Err(self.err(
                &ts_key,
                format!("conflicts with orchestrator.{name}; give it in one place"),
            )),
            (a, b) => Ok(a.or(b)),
        }
    }
}

fn parse_strictness(text: &str) -> Option<Strictness> {
    match text.trim().to_ascii_lowercase().as_str() {
        "lenient" => Some(Strictness::Lenient),
        "balanced" => Some(Strictness::Balanced),
        "strict" => Some(Strictness::Strict),
        _ => None,
    }
}
