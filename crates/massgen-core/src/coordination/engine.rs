//! The session loop (protocol: "The session loop"). Every agent's current attempt is a
//! future in one `FuturesUnordered` polled by the session future itself: nothing is
//! spawned, so dropping the set (or the session) drops every upstream stream at once.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::agent_tools::ToolCallRecord;
use super::call::{AttemptDone, AttemptTools, CallError, Gathered, Side, attempt};
use super::emit::{ClientGone, Emitter};
use super::events::*;
use super::options::OrchestratorOptions;
use super::prompt::{self, Instructions};
use super::record::agent_summary;
use super::session::{Clock, SessionAgent, SessionInput, SessionSpec};
use super::validate::{Action, Invalid, Rules, validate};
use crate::provider::{Message, ProviderError, ProviderRequest, Role, ToolChoice, ToolSpec, Usage};

pub(super) async fn run(
    spec: SessionSpec,
    events: mpsc::Sender<SessionEvent>,
    cancel: CancellationToken,
    clock: Arc<dyn Clock>,
) -> Result<SessionSummary, SessionError> {
    let started = Instant::now();
    let mut emitter = Emitter::new(
        events,
        spec.session_id.clone(),
        clock.clone(),
        cancel.clone(),
    );
    let mut session = Session::new(spec, clock);
    let outcome = session.run(&mut emitter, &cancel, started).await;
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
        emitter.emit_now(last);
    } else {
        let _ = emitter.emit(last).await;
    }
    outcome
}

pub(super) enum Status {
    /// Not in a turn and not waiting on a vote (before the first turn; a single agent
    /// after its answer).
    Idle,
    Running(Turn),
    /// Its vote counts; waits for a new answer or the end.
    Voted,
    Failed,
}

pub(super) struct Turn {
    number: u32,
    attempt: u32,
    /// `Session::version` when the turn started: a vote counts only if nothing changed.
    seen_version: u64,
    deadline: Instant,
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    vote_labels: Vec<String>,
    offer_new_answer: bool,
    /// Names of the client tools offered in this turn.
    client_tools: Vec<String>,
    /// Rounds of the agent's own tool loop used so far in this turn.
    tool_rounds_used: u32,
}

pub(super) struct AgentState {
    pub(super) spec: SessionAgent,
    pub(super) who: AgentRef,
    pub(super) status: Status,
    turns: u32,
    pub(super) answers: u32,
    /// Index of the latest answer in `Session::answers`.
    pub(super) latest: Option<usize>,
    pub(super) vote: Option<VoteRecord>,
    pub(super) usage: Usage,
    pub(super) error: Option<AgentError>,
    /// The agent's own tools, as discovered when the session started.
    own_tools: Vec<ToolSpec>,
}

pub(super) struct Session {
    pub(super) agents: Vec<AgentState>,
    pub(super) options: OrchestratorOptions,
    pub(super) input: SessionInput,
    pub(super) clock: Arc<dyn Clock>,
    /// Alone (one agent, or `skip_coordination_rounds`): answer once, no votes.
    single: bool,
    pub(super) min_live: usize,
    stream_agent_text: bool,
    /// Every answer of the session, in order.
    pub(super) answers: Vec<Answer>,
    /// Bumped on every new answer.
    version: u64,
    pub(super) usage: Usage,
    pub(super) running: FuturesUnordered<BoxFuture<'static, AttemptDone>>,
    side_tx: mpsc::Sender<(usize, Side)>,
    side_rx: mpsc::Receiver<(usize, Side)>,
}

enum Step {
    Cancel,
    Timeout,
    Side(usize, Side),
    Done(AttemptDone),
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
        let (side_tx, side_rx) = mpsc::channel(64);
        Self {
            single: agents.len() == 1,
            agents: agents
                .into_iter()
                .enumerate()
                .map(|(i, spec)| AgentState {
                    who: AgentRef {
                        agent_id: spec.id.clone(),
                        label: format!("agent{}", i + 1),
                    },
                    spec,
                    status: Status::Idle,
                    turns: 0,
                    answers: 0,
                    latest: None,
                    vote: None,
                    usage: Usage::default(),
                    error: None,
                    own_tools: Vec::new(),
                })
                .collect(),
            options: spec.options,
            input: spec.input,
            clock,
            min_live,
            stream_agent_text: spec.stream_agent_text,
            answers: Vec::new(),
            version: 0,
            usage: Usage::default(),
            running: FuturesUnordered::new(),
            side_tx,
            side_rx,
        }
    }

    async fn run(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
        started: Instant,
    ) -> Result<SessionSummary, SessionError> {
        let agents = self.agents.iter().map(|a| a.who.clone()).collect();
        self.send(em, EventKind::SessionStarted { agents }).await?;
        if self.agents.len() < self.min_live {
            return Err(self.error(
                SessionErrorKind::NoUsableAgent,
                format!(
                    "the panel has {} agent(s), fewer than min_live_agents ({})",
                    self.agents.len(),
                    self.min_live
                ),
            ));
        }
        let deadline = started + self.options.session_timeout;
        self.discover_tools(cancel, deadline).await?;
        let reason = self.coordinate(em, cancel, deadline).await?;
        // At a timeout this cancels the turns still running.
        self.running.clear();
        let Some(winner) = self.pick_winner() else {
            return Err(self.error(
                SessionErrorKind::Timeout,
                format!(
                    "the session timed out after {}s before any agent answered",
                    self.options.session_timeout.as_secs()
                ),
            ));
        };
        let consensus = EventKind::Consensus {
            winner: self.agents[winner].who.clone(),
            reason,
            tally: self.tally(),
            votes: self.counted_votes(),
        };
        self.send(em, consensus).await?;
        let presented = self.present(winner, em, cancel).await?;
        Ok(SessionSummary {
            winner: self.agents[winner].who.clone(),
            consensus_reason: reason,
            final_answer: presented.text,
            final_tool_calls: presented.calls,
            finish_reason: presented.finish,
            presentation: presented.mode,
            answers: self.answers.clone(),
            votes: self.counted_votes(),
            tally: self.tally(),
            agents: self.agents.iter().map(agent_summary).collect(),
            usage: self.usage,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    async fn coordinate(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
        deadline: Instant,
    ) -> Result<ConsensusReason, SessionError> {
        for i in 0..self.agents.len() {
            self.start_turn(i, em).await?;
        }
        loop {
            if let Some(error) = self.too_few_live() {
                return Err(error);
            }
            if self.single && !self.answers.is_empty() {
                return Ok(ConsensusReason::SingleAgent);
            }
            if self.converged() {
                return Ok(ConsensusReason::Converged);
            }
            if self.running.is_empty() {
                // Unreachable by the rules above; fail rather than wait for the timeout.
                return Err(self.error(
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
                Step::Cancel => return Err(self.cancelled()),
                Step::Timeout => return Ok(ConsensusReason::Timeout),
                Step::Side(i, side) => self.send_side(i, side, em).await?,
                Step::Done(done) => {
                    // The attempt's last deltas may still sit in the channel: keep order.
                    while let Ok((i, side)) = self.side_rx.try_recv() {
                        self.send_side(i, side, em).await?;
                    }
                    self.on_attempt(done, em).await?;
                }
            }
        }
    }

    async fn send_side(
        &mut self,
        i: usize,
        side: Side,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let agent = self.agents[i].who.clone();
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
        self.send(em, event).await
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
            .map(|a| a.spec.tools.as_ref().map(|t| t.discover()))
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
            _ = cancel.cancelled() => return Err(self.cancelled()),
            _ = sleep_until(deadline) => return Ok(()),
            found = all => found,
        };
        for (agent, specs) in self.agents.iter_mut().zip(found) {
            agent.own_tools = specs;
        }
        Ok(())
    }

    async fn start_turn(&mut self, i: usize, em: &mut Emitter) -> Result<(), SessionError> {
        let shown = self.shown_answers();
        let vote_labels: Vec<String> = if self.single {
            Vec::new()
        } else {
            shown.iter().map(|a| a.label.clone()).collect()
        };
        let may_answer = self.limit_reached(i).is_none();
        let client = &self.input.tools;
        let client_specs = if may_answer {
            client.offered()
        } else {
            Vec::new()
        };
        let call_required = client.call_required();
        // With `required` / a named function the answer must be calls: no text answers.
        let offer_new_answer = may_answer && !call_required;
        if !may_answer && vote_labels.is_empty() {
            let message = "max_new_answers_per_agent is used up and there is no answer to vote for";
            return self
                .fail(i, AgentErrorKind::InvalidTurns, message.into(), None, em)
                .await;
        }
        let agent = &self.agents[i];
        let how = Instructions {
            label: &agent.who.label,
            single: self.single,
            voting: self.options.voting_sensitivity,
            novelty: self.options.answer_novelty_requirement,
            now: self.clock.now(),
            client_tools: &client_specs
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>(),
            call_required,
        };
        let system = prompt::coordination_system(
            agent.spec.system_message.as_deref(),
            self.input.extra_system.as_deref(),
            &how,
        );
        let messages = vec![
            Message::system(system),
            Message::user(prompt::coordination_user(&self.input, &shown)),
        ];
        let mut tools = prompt::workflow_tools(offer_new_answer, &vote_labels);
        let client_tools = client_specs.iter().map(|t| t.name.clone()).collect();
        tools.extend(client_specs);
        tools.extend(agent.own_tools.iter().cloned());
        let turn = Turn {
            number: agent.turns + 1,
            attempt: 1,
            seen_version: self.version,
            deadline: Instant::now() + self.options.agent_turn_timeout,
            messages,
            tools,
            vote_labels,
            offer_new_answer,
            client_tools,
            tool_rounds_used: 0,
        };
        let started = EventKind::TurnStarted {
            agent: agent.who.clone(),
            turn: turn.number,
            answers_seen: self.latest_answer_labels(),
        };
        self.send(em, started).await?;
        self.launch(i, &turn);
        let agent = &mut self.agents[i];
        agent.turns = turn.number;
        agent.status = Status::Running(turn);
        Ok(())
    }

    fn launch(&mut self, i: usize, turn: &Turn) {
        let client = &self.input.tools;
        let offers_client = !turn.client_tools.is_empty();
        let request = ProviderRequest {
            messages: turn.messages.clone(),
            tools: turn.tools.clone(),
            // Not `Required` (unless the client demanded a call): many local servers reject
            // it; validation asks again instead.
            tool_choice: Some(if offers_client {
                client.upstream_choice()
            } else {
                ToolChoice::Auto
            }),
            parallel_tool_calls: client.parallel.filter(|_| offers_client),
        };
        let agent = &self.agents[i];
        let provider = agent.spec.provider.clone();
        let tools = agent.spec.tools.clone().and_then(|tools| {
            let names: std::collections::HashSet<String> =
                agent.own_tools.iter().map(|t| t.name.clone()).collect();
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
        self.running.push(Box::pin(attempt(
            i,
            provider,
            request,
            turn.deadline,
            self.side_tx.clone(),
            self.stream_agent_text,
            tools,
        )));
    }

    async fn on_attempt(
        &mut self,
        done: AttemptDone,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let i = done.agent;
        if let Some(usage) = done.gathered.usage {
            self.record_usage(i, CallPhase::Coordination, usage, em)
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
        if let Status::Running(turn) = &mut self.agents[i].status {
            turn.tool_rounds_used += done.tool_rounds;
        }
        let Status::Running(turn) = &self.agents[i].status else {
            return Ok(());
        };
        let current = self.shown_answers();
        let rules = Rules {
            vote_labels: &turn.vote_labels,
            answer_limit_reached: self.limit_reached(i),
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

    async fn on_invalid(
        &mut self,
        i: usize,
        invalid: Invalid,
        gathered: Gathered,
        transcript: Vec<Message>,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let Status::Running(turn) = &self.agents[i].status else {
            return Ok(());
        };
        let attempt = turn.attempt;
        let event = EventKind::TurnInvalid {
            agent: self.agents[i].who.clone(),
            attempt,
            check: invalid.check.into(),
            message: invalid.message.clone(),
        };
        self.send(em, event).await?;
        if attempt >= self.options.max_attempts_per_turn {
            let message = format!(
                "{attempt} invalid attempts in one turn; last: {}",
                invalid.message
            );
            return self
                .fail(i, AgentErrorKind::InvalidTurns, message, None, em)
                .await;
        }
        let Status::Running(mut turn) = std::mem::replace(&mut self.agents[i].status, Status::Idle)
        else {
            return Ok(());
        };
        turn.messages.extend(transcript);
        if gathered.tool_calls.is_empty() {
            if !gathered.text.trim().is_empty() {
                turn.messages.push(Message::assistant(gathered.text));
            }
            let reminder = if turn.client_tools.is_empty() {
                prompt::missing_tool_reminder(turn.offer_new_answer, !turn.vote_labels.is_empty())
            } else {
                format!("You did not call a tool. {}", invalid.message)
            };
            turn.messages.push(Message::user(reminder));
        } else {
            let results: Vec<Message> = gathered
                .tool_calls
                .iter()
                .map(|c| Message::tool_result(&c.id, format!("Error: {}", invalid.message)))
                .collect();
            turn.messages.push(Message {
                role: Role::Assistant,
                content: gathered.text,
                tool_calls: gathered.tool_calls,
                tool_call_id: None,
            });
            turn.messages.extend(results);
        }
        turn.attempt += 1;
        self.launch(i, &turn);
        self.agents[i].status = Status::Running(turn);
        Ok(())
    }

    async fn on_answer(
        &mut self,
        i: usize,
        content: AnswerContent,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let agent = &mut self.agents[i];
        agent.answers += 1;
        let answer = Answer {
            agent: agent.who.clone(),
            answer_label: format!("{}.{}", agent.who.label, agent.answers),
            content,
        };
        agent.latest = Some(self.answers.len());
        agent.status = Status::Idle;
        self.answers.push(answer.clone());
        self.version += 1;
        self.send(em, EventKind::Answer { answer }).await?;
        if self.single {
            return Ok(());
        }
        // Waiting agents restart now; running ones when their turn ends (their turn's
        // `seen_version` is stale, so a vote from it will be discarded).
        let mut restart = Vec::new();
        for (j, agent) in self.agents.iter_mut().enumerate() {
            agent.vote = None;
            if j == i || matches!(agent.status, Status::Voted) {
                restart.push(j);
            }
        }
        for j in restart {
            self.start_turn(j, em).await?;
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
        let Status::Running(turn) = &self.agents[i].status else {
            return Ok(());
        };
        let fresh = turn.seen_version == self.version;
        let target_agent_id = self
            .agents
            .iter()
            .find(|a| a.who.label == target)
            .map(|a| a.who.agent_id.clone())
            .unwrap_or_default();
        let vote = VoteRecord {
            voter: self.agents[i].who.clone(),
            target_label: target,
            target_agent_id,
            reason,
        };
        if fresh {
            self.agents[i].vote = Some(vote.clone());
            self.agents[i].status = Status::Voted;
            return self.send(em, EventKind::Vote { vote }).await;
        }
        let newest = self
            .answers
            .last()
            .map(|a| a.answer_label.clone())
            .unwrap_or_default();
        let why = format!("cast before the newest answer ({newest}) was seen");
        self.agents[i].status = Status::Idle;
        self.send(em, EventKind::VoteIgnored { vote, why }).await?;
        self.start_turn(i, em).await
    }

    async fn fail(
        &mut self,
        i: usize,
        kind: AgentErrorKind,
        message: String,
        upstream: Option<&ProviderError>,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        let agent = &mut self.agents[i];
        let error = AgentError {
            agent: agent.who.clone(),
            kind,
            message,
            provider: upstream.map(|e| e.provider.clone()),
            status: upstream.and_then(|e| e.status),
            upstream_kind: upstream.map(|e| e.kind),
            retry_after_ms: upstream
                .and_then(|e| e.retry_after)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        agent.status = Status::Failed;
        agent.vote = None;
        agent.error = Some(error.clone());
        self.send(em, EventKind::AgentFailed { error }).await
    }

    pub(super) async fn record_usage(
        &mut self,
        i: usize,
        phase: CallPhase,
        usage: Usage,
        em: &mut Emitter,
    ) -> Result<(), SessionError> {
        self.agents[i].usage.add(&usage);
        self.usage.add(&usage);
        let agent = self.agents[i].who.clone();
        self.send(
            em,
            EventKind::Usage {
                agent,
                phase,
                usage,
            },
        )
        .await
    }

    pub(super) async fn send(
        &mut self,
        em: &mut Emitter,
        kind: EventKind,
    ) -> Result<(), SessionError> {
        em.emit(kind).await.map_err(|ClientGone| self.cancelled())
    }
}
