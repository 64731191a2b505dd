//! The application in-process: an [`App`] over massgen-core's scripted providers, its use
//! case ([`App::open`]) called directly. No process, no socket, no simulator: for the
//! tests of what the application decides (panels, permits, each key's day, overrides, the
//! forwarder), with the HTTP edge left to the tests of what only the binary shows.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use massgen::app::{App, AppParts, Ask, Caller, Deliberation, Overrides, ProviderFactory};
use massgen::config::{AgentConfig, BackendConfig, PanelCatalog, PanelConfig, ServerSettings};
use massgen_core::coordination::{EventKind, OrchestratorOptions, SessionEvent, SessionInput};
use massgen_core::provider::{Price, Provider};
use massgen_providers::retry::CallPolicy;
use massgen_tools::ToolRegistry;
use massgen_tools::rmcp_client::RmcpConnector;

use super::engine::{FixedClock, Scripted};

/// Hands each agent the scripted provider named by its model.
pub struct ByAgent(pub HashMap<String, Scripted>);

impl ProviderFactory for ByAgent {
    fn build(&self, backend: &BackendConfig, _: &CallPolicy) -> Result<Arc<dyn Provider>, String> {
        self.0
            .get(&backend.model)
            .map(|p| Arc::new(p.clone()) as Arc<dyn Provider>)
            .ok_or_else(|| format!("no script for {}", backend.model))
    }
}

/// A panel named `scripted` of one agent per `(id, provider)`, each agent's model its id,
/// priced at `price` when given.
pub fn panel(
    agents: &[(&str, Scripted)],
    orchestrator: OrchestratorOptions,
    price: Option<Price>,
) -> PanelConfig {
    PanelConfig {
        name: "scripted".into(),
        source: PathBuf::from("scripted.yaml"),
        agents: agents
            .iter()
            .map(|(id, _)| AgentConfig {
                id: id.to_string(),
                system_message: None,
                backend: BackendConfig {
                    backend_type: "scripted".into(),
                    model: id.to_string(),
                    api_key: None,
                    base_url: String::new(),
                    params: Default::default(),
                    api_version: None,
                    price,
                    vision: false,
                    http: Default::default(),
                },
                tools: None,
            })
            .collect(),
        orchestrator,
        call_policy: CallPolicy::default(),
    }
}

/// An app whose default panel is `panel`, its agents answered by `agents`, records in
/// memory, on the fixed clock.
pub fn app(panel: PanelConfig, agents: &[(&str, Scripted)], settings: ServerSettings) -> Arc<App> {
    let providers = ByAgent(
        agents
            .iter()
            .map(|(id, p)| (id.to_string(), p.clone()))
            .collect(),
    );
    let records = massgen::app::store::RecordStore::memory(&settings.production);
    Arc::new(App::new(AppParts {
        catalog: PanelCatalog {
            default: Some(Arc::new(panel)),
            ..PanelCatalog::default()
        },
        settings,
        providers: Arc::new(providers),
        tools: Arc::new(ToolRegistry::new(Arc::new(RmcpConnector))),
        env: Arc::new(|_: &str| None),
        clock: Arc::new(FixedClock),
        records,
    }))
}

/// The ask a door would make of `question` for `caller`.
pub fn ask(caller: Caller, question: &str) -> Ask {
    Ask {
        caller,
        door: "test",
        model: "massgen".into(),
        route_as: None,
        metadata: Default::default(),
        input: SessionInput {
            question: question.into(),
            ..SessionInput::default()
        },
        deliberation: Deliberation::Summary,
        overrides: Overrides::default(),
        hold: None,
    }
}

/// Every event of a session opened with `ask`, to its end (bounded: 60 s).
pub async fn run(app: &App, ask: Ask) -> Result<Vec<Box<SessionEvent>>, massgen::app::Refusal> {
    let mut opened = app.open(ask).await?;
    let mut events = Vec::new();
    let all = async {
        while let Some(event) = opened.events.recv().await {
            events.push(event);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), all)
        .await
        .expect("the session did not end within 60 s");
    Ok(events)
}

/// The final answer of `events`, if the session completed.
pub fn answer(events: &[Box<SessionEvent>]) -> Option<&str> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::SessionCompleted { summary } => Some(summary.final_answer.as_str()),
        _ => None,
    })
}
