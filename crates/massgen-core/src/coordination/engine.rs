//! The session loop (docs/protocol.md, "The session loop"): it starts the turns the
//! [`SessionState`] asks for, runs each agent's current attempt, checks what the attempt
//! ended with, and hands the answer, vote or failure back to the state. Every attempt is a
//! future in one `FuturesUnordered` polled by the session future itself: nothing is
//! spawned, so dropping the set (or the session) drops every upstream stream at once.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::agent_tools::{SplitTools, ToolCallRecord};
use super::call::{
    AttemptDone, AttemptTools, CallError, Gathered, Progress, Report, Side, attempt,
};
use super::emit::Emitter;
use super::events::{
    AgentErrorKind, AgentRef, AnswerContent, CallPhase, ConsensusReason, EventKind, SessionError,
    SessionErrorKind, SessionEvent, SessionSummary,
};
use super::options::{FinalAnswerStrategy, OrchestratorOptions};
use super::own_names;
use super::present::Presenter;
use super::prompt::{self, Instructions};
use super::spec::{Clock, SessionAgent, SessionInput, SessionSpec};
use super::state::{Member, Rules as StateRules, SessionState, VoteOutcome};
use super::validate::{Action, Invalid, Rules, validate};
use crate::provider::{Message, ProviderError, ProviderRequest, Role, ToolChoice, ToolSpec};
use crate::tool_names::NEW_ANSWER;

mod attempts;

/// Runs one session to its end. Every event goes to `events` (the last one is
/// `session_completed` or `session_failed`); the same outcome is returned. Cancelling
/// `cancel`, or dropping the receiver, stops every upstream call at once.
pub async fn run_session(
    spec: SessionSpec,
    events: mpsc::Sender<Box<SessionEvent>>,
    cancel: CancellationToken,
    clock: Arc<dyn Clock>,
) -> Result<SessionSummary, SessionError> {
    // A panel of one is a plain call, not a coordination (docs/protocol.md).
    if super::plain::is_plain(&spec) {
        return super::plain::run_plain(spec, events, cancel, clock).await;
    }
    let started = Instant::now();
    let mut em = Emitter::new(
        events,
        spec.session_id.clone(),
        clock.clone(),
        cancel.clone(),
    );
    let mut spec = spec;
    super::structured::tell_agents(&mut spec.input);
    let mut session = Session::new(spec, clock);
    let outcome = session.run(&mut em, &cancel, started).await;
    // Stop every upstream call before the last event goes out.
    session.running.clear();
    let last = match &outcome {
        Ok(summary) => EventKind::SessionCompleted {
            summary: Box::new(summary.clone()),
        },
        Err(error) => EventKind::SessionFailed {
            error: error.clone(),
        },
    };
    // After a cancellation nobody may be reading: deliver the last event only if there is
    // room for it right now.
    let cancelled = matches!(&outcome, Err(e) if e.kind == SessionErrorKind::Cancelled);
    if cancelled || cancel.is_cancelled() {
        em.emit_now(last);
    } else {
        let _ = em.emit(last).await;
    }
    outcome
}

/// The loop's side of a running turn: the prompt and tools it was given, and where its
/// attempts stand. (`SessionState` holds which answer set the turn saw.)
struct Turn {
    attempt: u32,
    deadline: Instant,
    /// Shared with each attempt's request, so an upstream call does not copy the prompt.
    messages: Arc<Vec<Message>>,
    tools: Vec<Arc<ToolSpec>>,
    vote_labels: Vec<String>,
    offer_new_answer: bool,
    /// Names of the client tools offered in this turn.
    client_tools: Vec<String>,
    /// Rounds of the agent's own tool loop used so far in this turn.
    tool_rounds_used: u32,
    /// The running attempt: its cancel switch and what it has shown so far.
    cancel: CancellationToken,
    progress: Arc<Progress>,
}

struct Session {
    state: SessionState,
    agents: Vec<SessionAgent>,
    /// Each agent's own tools, as discovered when the session started (split by
    /// planning mode).
    own_tools: Vec<SplitTools>,
    /// The running turn of each agent: `Some` exactly while its status is `Running`.
    turns: Vec<Option<Turn>>,
    options: OrchestratorOptions,
    input: SessionInput,
    clock: Arc<dyn Clock>,
    stream_agent_text: bool,
    /// Each running attempt; a cancelled one ends as `None`.
    running: FuturesUnordered<BoxFuture<'static, Option<AttemptDone>>>,
    side_tx: mpsc::Sender<(usize, Side)>,
    side_rx: mpsc::Receiver<(usize, Side)>,
    /// After a post-evaluation restart: what every turn's prompt is told first.
    feedback: Option<String>,
}

enum Step {
    Cancel,
    Timeout,
    Side(usize, Side),
    Done(Option<AttemptDone>),
}

impl Session {
    fn new(spec: SessionSpec, clock: Arc<dyn Clock>) -> Self {
        let mut agents = spec.agents;
        // `skip_coordination_rounds` is a pass-through to the first agent: the others take
        // no part at all (and are not listed in the record).
        if spec.options.skip_coordination_rounds {
            agents.truncate(1);
        }
        let min_live = if spec.options.skip_coordination_rounds {
            1
        } else {
            spec.options.min_live_agents.max(1)
        };
        let members = agents
            .iter()
            .map(|a| Member {
                id: a.id.clone(),
                provider: a.provider.provider_name().to_string(),
                model: a.provider.model().to_string(),
                price: a.price,
            })
            .collect();
        let (side_tx, side_rx) = mpsc::channel(64);
        Self {
            state: SessionState::new(
                members,
                StateRules {
                    min_live,
                    answer_cap: spec.options.max_new_answers_per_agent,
                    global_cap: spec.options.max_new_answers_global,
                    fairness_cap: spec.options.fairness_lead_cap,
                    answer_once: spec.options.ends_when_all_answered(),
                    defer: spec.options.defer_voting_until_all_answered,
                    quorum: spec.options.voting_quorum,
                    budget: spec.options.max_cost_usd,
                },
            ),
            own_tools: vec![SplitTools::default(); agents.len()],
            turns: agents.iter().map(|_| None).collect(),
            agents,
            options: spec.options,
            input: spec.input,
            clock,
            stream_agent_text: spec.stream_agent_text,
            running: FuturesUnordered::new(),
            side_tx,
            side_rx,
            feedback: None,
        }
    }

    async fn run(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
        started: Instant,
    ) -> Result<SessionSummary, SessionError> {
        let agents = self.state.everyone();
        em.send(&self.state, EventKind::SessionStarted { agents })
            .await?;
        let images = prompt::image_count(&self.input);
        if images > 0 {
            let (seen_by, not_seen_by) = (0..self.agents.len())
                .map(|i| (self.agents[i].vision, self.state.who(i).clone()))
                .partition::<Vec<_>, _>(|(vision, _)| *vision);
            let refs = |v: Vec<(bool, AgentRef)>| v.into_iter().map(|(_, a)| a).collect();
            let shown = EventKind::ImagesShown {
                images,
                seen_by: refs(seen_by),
                not_seen_by: refs(not_seen_by),
            };
            em.send(&self.state, shown).await?;
        }
        if self.state.len() < self.state.min_live() {
            return Err(self.state.error(
                SessionErrorKind::NoUsableAgent,
                format!(
                    "the panel has {} agent(s), fewer than min_live_agents ({})",
                    self.state.len(),
                    self.state.min_live()
                ),
            ));
        }
        let deadline = started + self.options.session_timeout;
        self.discover_tools(cancel, deadline).await?;
        let (winner, reason, cut) = self.deliberate(em, cancel, deadline).await?;
        // A spent budget allows no presentation call: the stored answer is returned.
        let mut options = self.options.clone();
        if reason == ConsensusReason::Budget {
            options.final_answer_strategy = Some(FinalAnswerStrategy::WinnerReuse);
        }
        // Planning mode: the winner's presentation gets every tool, the held ones included.
        let own = &self.own_tools[winner];
        let presentation_tools = if self.options.planning_mode {
            own.turns.iter().chain(&own.held).cloned().collect()
        } else {
            Vec::new()
        };
        let presenter = Presenter {
            state: &mut self.state,
            winner,
            agent: &self.agents[winner],
            own_tools: presentation_tools,
            held_tools: own.held_names(),
            options: &options,
            input: &self.input,
            clock: self.clock.as_ref(),
            em,
            cancel,
        };
        // Boxed: the presentation's future is twice the deliberation's, and inline it
        // would size the session's future for the whole deliberation (~3 KB per session).
        let presented = Box::pin(presenter.present()).await?;
        Ok(SessionSummary {
            winner: self.state.who(winner).clone(),
            consensus_reason: reason,
            final_answer: presented.text,
            final_tool_calls: presented.calls,
            finish_reason: presented.finish,
            presentation: presented.mode,
            answers: self.state.answers().to_vec(),
            votes: self.state.counted_votes(),
            tally: self.state.tally(),
            cut,
            agents: self.state.summaries(),
            usage: self.state.usage(),
            cost_usd: self.state.cost_usd(),
            max_cost_usd: self.state.budget(),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    async fn coordinate(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
        deadline: Instant,
    ) -> Result<ConsensusReason, SessionError> {
        loop {
            if let Some(error) = self.state.too_few_live() {
                return Err(error);
            }
            // Checked before any turn starts, so a spent budget starts nothing more.
            if let Some(limit) = self.state.budget_spent() {
                return self.budget_exhausted(limit, em).await;
            }
            self.start_due(em).await?;
            if self.state.is_single() && !self.state.answers().is_empty() {
                return Ok(ConsensusReason::SingleAgent);
            }
            if self.options.ends_when_all_answered() && self.state.all_live_answered_or_voted() {
                return Ok(ConsensusReason::AllAnswered);
            }
            if self.state.converged() {
                return Ok(ConsensusReason::Converged);
            }
            if self.state.quorum_reached() {
                return Ok(ConsensusReason::Quorum);
            }
            if self.running.is_empty() {
                // Unreachable by the rules above; fail rather than wait for the timeout.
                return Err(self.state.error(
                    SessionErrorKind::NoUsableAgent,
                    "no agent can take a turn".into(),
                ));
            }
            let step = tokio::select! {
                biased;
                _ = cancel.cancelled() => Step::Cancel,
                _ = em.closed() => Step::Cancel,
                Some((i, side)) = self.side_rx.recv() => Step::Side(i, side),
                _ = sleep_until(deadline) => Step::Timeout,
                Some(done) = self.running.next() => Step::Done(done),
            };
            match step {
                Step::Cancel => return Err(self.state.cancelled()),
                Step::Timeout => return Ok(ConsensusReason::Timeout),
                Step::Side(i, side) => self.send_side(i, side, em).await?,
                // A cancelled attempt: its turn was already dealt with.
                Step::Done(None) => {}
                Step::Done(Some(done)) => {
                    // The attempt's last deltas may still sit in the channel: keep order.
                    while let Ok((i, side)) = self.side_rx.try_recv() {
                        self.send_side(i, side, em).await?;
                    }
                    self.on_attempt(done, em).await?;
                }
            }
        }
    }

    /// The spend reached `limit`: the best answer so far wins, or with none the session
    /// fails.
    async fn budget_exhausted(
        &mut self,
        limit: f64,
        em: &mut Emitter,
    ) -> Result<ConsensusReason, SessionError> {
        let spent = self.state.spent();
        let event = EventKind::BudgetExhausted {
            spent_usd: spent,
            max_cost_usd: limit,
        };
        em.send(&self.state, event).await?;
        if self.state.answers().is_empty() {
            return Err(self.state.error(
                SessionErrorKind::BudgetExhausted,
                format!(
                    "the session spent ${spent:.6} of its ${limit} limit (max_cost_usd) before any agent answered"
                ),
            ));
        }
        Ok(ConsensusReason::Budget)
    }

    async fn send_side(
        &mut self,
        i: usize,
        side: Side,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let agent = self.state.who(i).clone();
        let event = match side {
            Side::Delta(text) => EventKind::AgentDelta { agent, text },
            Side::Tool(ToolCallRecord {
                tool,
                round,
                duration_ms,
                error,
            }) => EventKind::ToolCalled {
                agent,
                tool,
                round,
                duration_ms,
                error,
            },
        };
        em.send(&self.state, event).await
    }

    /// Asks every agent's own tool source what it offers, all at once, before the first
    /// turn (MCP servers start on first use, so this may take a while the first time).
    async fn discover_tools(
        &mut self,
        cancel: &CancellationToken,
        deadline: Instant,
    ) -> Result<(), SessionError> {
        let pending: Vec<_> = self
            .agents
            .iter()
            .map(|a| a.tools.as_ref().map(|t| t.discover()))
            .collect();
        if pending.iter().all(Option::is_none) {
            return Ok(());
        }
        let all = futures::future::join_all(pending.into_iter().map(|p| async move {
            match p {
                Some(fut) => fut.await,
                None => Vec::new(),
            }
        }));
        let found = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(self.state.cancelled()),
            _ = sleep_until(deadline) => return Ok(()),
            found = all => found,
        };
        // The client's tools keep their names; an own tool one of them shadows is offered
        // under an alias, and the agent's source is wrapped to take calls of it.
        let client: HashSet<&str> = self
            .input
            .tools
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        for ((own, agent), tools) in self.own_tools.iter_mut().zip(&mut self.agents).zip(found) {
            let (tools, aliases) = own_names::rename(tools, &client);
            if !aliases.is_empty()
                && let Some(inner) = agent.tools.take()
            {
                agent.tools = Some(Arc::new(own_names::Renamed::new(inner, aliases)));
            }
            *own = SplitTools::new(tools, self.options.planning_mode);
        }
        Ok(())
    }

    /// Starts a turn for every agent the state says needs one (at first, everybody).
    async fn start_due(&mut self, em: &mut Emitter) -> Result<(), SessionError> {
        // Each start leaves the agent running or failed, so this ends.
        while let Some(&i) = self.state.due().first() {
            self.start_turn(i, em).await?;
        }
        Ok(())
    }

    async fn start_turn(&mut self, i: usize, em: &mut Emitter) -> Result<(), SessionError> {
        let mut shown = self.state.shown_answers();
        let vote_labels: Vec<String> = if self.state.is_single() {
            Vec::new()
        } else {
            shown.iter().map(|a| a.label.clone()).collect()
        };
        let blocked = self.state.answer_blocked(i);
        let may_answer = blocked.is_none();
        let client = &self.input.tools;
        let client_specs = if may_answer {
            client.offered()
        } else {
            Vec::new()
        };
        let call_required = client.call_required();
        // With `required` / a named function the answer must be calls: no text answers.
        let offer_new_answer = may_answer && !call_required;
        if let Some(why) = blocked.filter(|_| vote_labels.is_empty()) {
            let message = format!("{why} There is no answer to vote for.");
            return self
                .fail(i, AgentErrorKind::InvalidTurns, message, None, em)
                .await;
        }
        let who = self.state.who(i).clone();
        prompt::order_for_voter(&mut shown, &who.label, i + 1);
        let held_tools = self.own_tools[i].held_names();
        let how = Instructions {
            label: &who.label,
            single: self.state.is_single(),
            voting: self.options.voting_sensitivity,
            novelty: self.options.answer_novelty_requirement,
            now: self.clock.now(),
            client_tools: &client_specs
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>(),
            call_required,
            held_tools: &held_tools,
        };
        let system = prompt::coordination_system(
            self.agents[i].system_message.as_deref(),
            self.input.extra_system.as_deref(),
            &how,
        );
        let user = prompt::coordination_user(&self.input, &shown);
        let user = match &self.feedback {
            Some(feedback) => format!("{feedback}{user}"),
            None => user,
        };
        let user = prompt::user_turn(user, &self.input, self.agents[i].vision);
        let messages = Arc::new(vec![Message::system(system), user]);
        let mut tools = prompt::workflow_tools(offer_new_answer, &vote_labels);
        let client_tools = client_specs.iter().map(|t| t.name.clone()).collect();
        tools.extend(client_specs);
        tools.extend(self.own_tools[i].turns.iter().cloned());
        let mut turn = Turn {
            attempt: 1,
            deadline: Instant::now() + self.options.agent_turn_timeout,
            messages,
            tools,
            vote_labels,
            offer_new_answer,
            client_tools,
            tool_rounds_used: 0,
            cancel: CancellationToken::new(),
            progress: Arc::default(),
        };
        let number = self.state.begin_turn(i);
        let started = EventKind::TurnStarted {
            agent: who,
            turn: number,
            answers_seen: self.state.latest_answer_labels(),
        };
        em.send(&self.state, started).await?;
        self.launch(i, &mut turn);
        self.turns[i] = Some(turn);
        Ok(())
    }

    /// Starts the turn's next attempt, with a fresh cancel switch and progress.
    fn launch(&mut self, i: usize, turn: &mut Turn) {
        let client = &self.input.tools;
        let offers_client = !turn.client_tools.is_empty();
        let request = ProviderRequest {
            messages: Arc::clone(&turn.messages),
            tools: turn.tools.clone(),
            // Not `Required` (unless the client demanded a call): many local servers reject
            // it; validation asks again instead.
            tool_choice: Some(if offers_client {
                client.upstream_choice()
            } else {
                ToolChoice::Auto
            }),
            parallel_tool_calls: client.parallel.filter(|_| offers_client),
            // Never the output format here: a schema on a tool-calling turn suppresses the
            // tool calls the protocol needs.
            sampling: self.input.sampling,
            ..ProviderRequest::default()
        };
        let agent = &self.agents[i];
        let provider = agent.provider.clone();
        let own = &self.own_tools[i].turns;
        let tools = agent.tools.clone().and_then(|tools| {
            let names: HashSet<String> = own.iter().map(|t| t.name.clone()).collect();
            let rounds_left = tools
                .limits()
                .max_rounds
                .saturating_sub(turn.tool_rounds_used);
            (!names.is_empty()).then_some(AttemptTools {
                tools,
                names,
                rounds_left,
            })
        });
        let mut answer_tools = turn.client_tools.clone();
        if turn.offer_new_answer {
            answer_tools.push(NEW_ANSWER.to_string());
        }
        turn.progress = Arc::new(Progress::new(answer_tools));
        turn.cancel = CancellationToken::new();
        let report = Report {
            agent: i,
            side: self.side_tx.clone(),
            stream_text: self.stream_agent_text,
            progress: turn.progress.clone(),
        };
        let run = attempt(provider, request, turn.deadline, report, tools);
        let cancel = turn.cancel.clone();
        self.running.push(Box::pin(async move {
            // Dropping `run` drops its upstream stream: the call is cancelled.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => None,
                done = run => Some(done),
            }
        }));
    }

    /// Cancels agent `i`'s running attempt and reports the usage its upstream had reported
    /// so far; returns the cancelled turn's number. The agent is then due a new turn.
    async fn cancel_turn(&mut self, i: usize, em: &mut Emitter) -> Result<u32, SessionError> {
        let number = self.state.abandon_turn(i);
        if let Some(turn) = self.turns[i].take() {
            turn.cancel.cancel();
            self.state.add_calls(i, turn.progress.calls());
            if let Some(usage) = turn.progress.usage() {
                em.usage(&mut self.state, i, CallPhase::Coordination, usage)
                    .await?;
            }
        }
        Ok(number)
    }

    /// A newer answer made agent `i`'s turn stale: cancel it now (the fresh turn starts at
    /// the top of the loop) instead of letting it finish into a vote that would be
    /// discarded.
    async fn restart(&mut self, i: usize, em: &mut Emitter) -> Result<(), SessionError> {
        let newest = self
            .state
            .newest_answer_label()
            .unwrap_or_default()
            .to_string();
        let turn = self.cancel_turn(i, em).await?;
        self.state.count_restart(i);
        let agent = self.state.who(i).clone();
        em.send(
            &self.state,
            EventKind::TurnRestarted {
                agent,
                turn,
                newest,
            },
        )
        .await
    }

    /// The deliberation is over: every running turn is cancelled (its reported usage
    /// kept); returns whose turns were cut.
    async fn cut_running(&mut self, em: &mut Emitter) -> Result<Vec<AgentRef>, SessionError> {
        let mut cut = Vec::new();
        for i in self.state.running() {
            self.cancel_turn(i, em).await?;
            cut.push(self.state.who(i).clone());
        }
        self.running.clear();
        Ok(cut)
    }

    async fn on_attempt(
        &mut self,
        done: AttemptDone,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let i = done.agent;
        if let Some(turn) = &self.turns[i] {
            self.state.add_calls(i, turn.progress.calls());
        }
        if let Some(usage) = done.gathered.usage {
            em.usage(&mut self.state, i, CallPhase::Coordination, usage)
                .await?;
        }
        match done.result {
            Err(CallError::Provider(e)) => {
                let message = e.message.clone();
                return self
                    .fail(i, AgentErrorKind::Upstream, message, Some(&e), em)
                    .await;
            }
            Err(CallError::TimedOut) => {
                let message = format!(
                    "the turn took longer than agent_turn_timeout ({}s)",
                    self.options.agent_turn_timeout.as_secs()
                );
                return self
                    .fail(i, AgentErrorKind::TurnTimeout, message, None, em)
                    .await;
            }
            Ok(()) => {}
        }
        let Some(turn) = self.turns[i].as_mut() else {
            return Ok(());
        };
        turn.tool_rounds_used += done.tool_rounds;
        let current = self.state.shown_answers();
        let blocked = self.state.answer_blocked(i);
        let rules = Rules {
            vote_labels: &turn.vote_labels,
            answer_limit_reached: blocked.as_deref(),
            current: &current,
            novelty: self.options.answer_novelty_requirement,
            client_tools: &turn.client_tools,
            call_required: !turn.client_tools.is_empty() && self.input.tools.call_required(),
            one_call_only: self.input.tools.one_call_only(),
        };
        let checked = validate(&rules, &done.gathered.text, &done.gathered.tool_calls);
        match checked {
            Err(invalid) => {
                self.on_invalid(i, invalid, done.gathered, done.transcript, em)
                    .await
            }
            Ok(Action::NewAnswer(text)) => {
                self.on_answer(i, AnswerContent::Text { text }, em).await
            }
            Ok(Action::ToolCalls(calls)) => {
                self.on_answer(i, AnswerContent::ToolCalls { calls }, em)
                    .await
            }
            Ok(Action::Vote { target, reason }) => self.on_vote(i, target, reason, em).await,
        }
    }

    /// A failed check goes back to the agent in the same turn (as the tool result, or as a
    /// reminder when it called no tool), up to `max_attempts_per_turn`.
    async fn on_invalid(
        &mut self,
        i: usize,
        invalid: Invalid,
        gathered: Gathered,
        transcript: Vec<Message>,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let Some(attempt) = self.turns[i].as_ref().map(|t| t.attempt) else {
            return Ok(());
        };
        let event = EventKind::TurnInvalid {
            agent: self.state.who(i).clone(),
            attempt,
            check: invalid.check.into(),
            message: invalid.message.clone(),
        };
        em.send(&self.state, event).await?;
        if attempt >= self.options.max_attempts_per_turn {
            let message = format!(
                "{attempt} invalid attempts in one turn; last: {}",
                invalid.message
            );
            return self
                .fail(i, AgentErrorKind::InvalidTurns, message, None, em)
                .await;
        }
        // Asking again in a turn that no longer shows the current answers would be wasted.
        if self.state.is_stale(i) {
            return self.restart(i, em).await;
        }
        let Some(mut turn) = self.turns[i].take() else {
            return Ok(());
        };
        // The attempt that shared these messages has ended, so this normally appends in
        // place; should its request still be alive, make_mut copies instead.
        let messages = Arc::make_mut(&mut turn.messages);
        messages.extend(transcript);
        if gathered.tool_calls.is_empty() {
            if !gathered.text.trim().is_empty() {
                messages.push(Message::assistant(gathered.text));
            }
            let reminder = if turn.client_tools.is_empty() {
                prompt::missing_tool_reminder(turn.offer_new_answer, !turn.vote_labels.is_empty())
            } else {
                format!("You did not call a tool. {}", invalid.message)
            };
            messages.push(Message::user(reminder));
        } else {
            let results: Vec<Message> = gathered
                .tool_calls
                .iter()
                .map(|c| Message::tool_result(&c.id, format!("Error: {}", invalid.message)))
                .collect();
            messages.push(Message {
                role: Role::Assistant,
                content: gathered.text,
                tool_calls: gathered.tool_calls,
                tool_call_id: None,
                images: Vec::new(),
            });
            messages.extend(results);
        }
        turn.attempt += 1;
        self.launch(i, &mut turn);
        self.turns[i] = Some(turn);
        Ok(())
    }

    async fn on_answer(
        &mut self,
        i: usize,
        content: AnswerContent,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        self.turns[i] = None;
        let answer = self.state.record_answer(i, content);
        em.send(&self.state, EventKind::Answer { answer }).await?;
        // Turns that cannot see the new answer start over now, unless they have begun an
        // answer of their own: that one may finish, and counts. Once the panel's answers are
        // used up no answer can count: every running turn starts over, to vote.
        let all = self.state.global_cap_reached();
        let restart = if all {
            self.state.running()
        } else {
            self.state.stale()
        };
        for j in restart {
            let answering = self.turns[j]
                .as_ref()
                .is_some_and(|t| t.progress.answering());
            if all || !answering {
                self.restart(j, em).await?;
            }
        }
        Ok(())
    }

    async fn on_vote(
        &mut self,
        i: usize,
        target: String,
        reason: String,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        if self.turns[i].take().is_none() {
            return Ok(());
        }
        match self.state.record_vote(i, target, reason) {
            VoteOutcome::Counted(vote) => em.send(&self.state, EventKind::Vote { vote }).await,
            VoteOutcome::Stale { vote, why } => {
                em.send(&self.state, EventKind::VoteIgnored { vote, why })
                    .await
            }
        }
    }

    async fn fail(
        &mut self,
        i: usize,
        kind: AgentErrorKind,
        message: String,
        upstream: Option<&ProviderError>,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        self.turns[i] = None;
        let error = self.state.fail(i, kind, message, upstream);
        em.send(&self.state, EventKind::AgentFailed { error }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn the_session_future_can_be_spawned() {
        let (tx, _rx) = mpsc::channel(1);
        let spec = SessionSpec {
            session_id: "sess_x".into(),
            agents: Vec::new(),
            options: OrchestratorOptions::default(),
            input: SessionInput::default(),
            stream_agent_text: false,
        };
        let clock: Arc<dyn Clock> = Arc::new(super::super::spec::SystemClock);
        let fut = run_session(spec, tx, CancellationToken::new(), clock);
        assert_send(&fut);
    }
}
