//! Prompt text and workflow tool schemas (docs/protocol.md, "One agent turn", "Winner and
//! final presentation"). The block delimiters of the user message are a contract: the simulated
//! upstream (`massgen-simulator`) parses them, so change them in both places or not at all.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::SystemTime;

use serde_json::json;

use super::client_tools::describe_calls;
use super::options::Strictness;
use super::spec::SessionInput;
use crate::provider::{Image, Message, Role, ToolCall, ToolSpec};
use crate::tool_names::{NEW_ANSWER, VOTE};

/// One answer as the prompt shows it: the agent's label (`agent2`) and its latest text
/// (for a tool-call answer, `agent2 proposes calling get_weather({"city":"Paris"})`, with
/// the calls themselves in `calls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownAnswer {
    pub label: String,
    pub text: String,
    /// The proposed client tool calls; empty for a text answer.
    pub calls: Vec<ToolCall>,
}

impl ShownAnswer {
    pub fn proposal(label: &str, calls: &[ToolCall]) -> Self {
        let text = match calls {
            [one] => format!(
                "{label} proposes calling {}",
                describe_calls(std::slice::from_ref(one))
            ),
            _ => format!(
                "{label} proposes calling these tools together:\n{}",
                describe_calls(calls)
            ),
        };
        Self {
            label: label.to_string(),
            text,
            calls: calls.to_vec(),
        }
    }
}

/// Puts the answers (in config order) in the order one voter sees them, so that no answer
/// always takes the first place across voters (MassGen 0.1.90's position-bias
/// counterbalancing): rotated so the voter's own answer comes last, or, when it has none,
/// rotated by its number (`agent3`: 3). Deterministic; the labels stay with their answers,
/// and the `vote` enum keeps config order.
pub fn order_for_voter(answers: &mut [ShownAnswer], voter_label: &str, voter_number: usize) {
    if answers.len() < 2 {
        return;
    }
    let shift = match answers.iter().position(|a| a.label == voter_label) {
        Some(own) => own + 1,
        None => voter_number,
    };
    answers.rotate_left(shift % answers.len());
}

/// `new_answer`, then `vote` (only when `vote_labels` is not empty).
pub fn workflow_tools(offer_new_answer: bool, vote_labels: &[String]) -> Vec<Arc<ToolSpec>> {
    let mut tools = Vec::with_capacity(2);
    if offer_new_answer {
        tools.push(Arc::clone(&NEW_ANSWER_TOOL));
    }
    if !vote_labels.is_empty() {
        tools.push(vote_tool(vote_labels));
    }
    tools
}

/// Built once: every turn of every session offers it. (Per turn, the schemas of the two
/// workflow tools were ~4 KiB of JSON maps per agent in flight: 13 MB of a 187 MB peak
/// with 1,000 sessions.)
static NEW_ANSWER_TOOL: LazyLock<Arc<ToolSpec>> = LazyLock::new(|| {
    Arc::new(ToolSpec {
        name: NEW_ANSWER.into(),
        description:
            "Submit a new answer to the original message that improves on the current answers."
                .into(),
        parameters: json!({
            "type": "object",
            "properties": {"content": {"type": "string"}},
            "required": ["content"]
        }),
    })
});

/// How many `vote` schemas are kept for reuse. Their enums are sets of `agentN` labels in
/// config order, so a process sees few; past this many the cache starts over.
const VOTE_TOOLS_KEPT: usize = 256;

/// The `vote` tool for `labels`, built once per set of labels.
fn vote_tool(labels: &[String]) -> Arc<ToolSpec> {
    static KEPT: LazyLock<VoteTools> = LazyLock::new(VoteTools::default);
    KEPT.get(labels)
}

/// The `vote` tools built so far, by their labels (at most [`VOTE_TOOLS_KEPT`]).
#[derive(Default)]
struct VoteTools(Mutex<HashMap<Vec<String>, Arc<ToolSpec>>>);

impl VoteTools {
    fn get(&self, labels: &[String]) -> Arc<ToolSpec> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tool) = kept.get(labels) {
            return Arc::clone(tool);
        }
        let tool = Arc::new(ToolSpec {
            name: VOTE.into(),
            description:
                "Vote for the agent whose current answer should be presented as the final answer."
                    .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent_id": {"type": "string", "enum": labels},
                    "reason": {"type": "string"}
                },
                "required": ["agent_id", "reason"]
            }),
        });
        if kept.len() >= VOTE_TOOLS_KEPT {
            kept.clear();
        }
        kept.insert(labels.to_vec(), Arc::clone(&tool));
        tool
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// Settings that shape the coordination instructions.
#[derive(Debug, Clone, Copy)]
pub struct Instructions<'a> {
    pub label: &'a str,
    /// Alone (single agent or `skip_coordination_rounds`): answer only, no voting.
    pub single: bool,
    pub voting: Strictness,
    pub novelty: Strictness,
    pub now: SystemTime,
    /// Names of the client's tools offered in this turn (empty: none).
    pub client_tools: &'a [String],
    /// The client demands a call (`tool_choice` `required` or a named function).
    pub call_required: bool,
    /// Planning mode: the agent's own tools held back until the winner presents.
    pub held_tools: &'a [String],
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The paragraph about the agent's own tools held back by planning mode, if any.
fn held_tools_note(how: &Instructions<'_>) -> String {
    if how.held_tools.is_empty() {
        return String::new();
    }
    format!(
        "\nYou also have tools that change things: {}. They are not available while the agents \
         deliberate: the agent whose answer is chosen runs them, once, while presenting the final \
         answer. If the message needs them, say in your answer which of these calls to make and \
         with which arguments; do not claim they were made.",
        quoted(how.held_tools)
    )
}

/// The presentation's extra instruction under planning mode: the winner now holds the
/// tools that were held back, and carries out the plan.
pub fn planning_presentation_note(held: &[String]) -> String {
    let held = if held.is_empty() {
        String::new()
    } else {
        format!(
            " The tools held back while the agents deliberated are available now: {}.",
            quoted(held)
        )
    };
    format!(
        "You may use your tools now.{held} Make the calls the chosen answer needs, each action \
         once, then write the final answer, saying what was done."
    )
}

/// The paragraph about the client's tools, when some are offered.
fn client_tools_note(how: &Instructions<'_>) -> String {
    if how.client_tools.is_empty() {
        return String::new();
    }
    let names = quoted(how.client_tools);
    let mut note = format!(
        "\nThe client that sent the original message offers its own tools: {names}. If the \
         message needs them (information or actions you do not have), your answer can be a set \
         of calls to those tools instead of text: call them directly, with complete arguments, \
         and nothing else. The client runs the chosen calls and asks again with their results. \
         A proposal of calls is shown as `agentN proposes calling …`; vote for it if you agree."
    );
    if how.call_required {
        note.push_str(
            " The client requires the answer to be calls to its tools: do not answer with text.",
        );
    }
    note
}

/// The system message of a coordination turn.
pub fn coordination_system(
    agent_system: Option<&str>,
    extra_system: Option<&str>,
    how: &Instructions<'_>,
) -> String {
    let date = format!(
        "Current date and time: {}.",
        httpdate::fmt_http_date(how.now)
    );
    let notes = format!("{}{}", client_tools_note(how), held_tools_note(how));
    let instructions = if how.single {
        if how.call_required {
            format!(
                "Answer the original message below by calling the client's tools.{notes}\n{date}"
            )
        } else {
            let or_calls = if how.client_tools.is_empty() {
                ""
            } else {
                " (or, if the message needs the client's tools, with your calls to them instead)"
            };
            format!(
                "Answer the original message below. Submit your complete answer by calling `{NEW_ANSWER}` \
                 with the answer as `content`; end your turn with exactly that one tool call{or_calls}.{notes}\n{date}"
            )
        }
    } else {
        let well = match how.voting {
            Strictness::Lenient => "reasonably well",
            Strictness::Balanced => "well, with no significant errors or gaps",
            Strictness::Strict => {
                "fully: correct, complete and clear, with nothing important left to improve"
            }
        };
        let novelty = match how.novelty {
            Strictness::Lenient => "",
            Strictness::Balanced => {
                " A new answer must differ meaningfully from the current answers, not just rephrase them."
            }
            Strictness::Strict => {
                " Only submit a new answer that is substantially different and better (new content, \
                 a different approach or corrected errors); otherwise vote."
            }
        };
        format!(
            "You are {label}, one of several agents answering the same message. Below are the \
             original message and the current answers of all agents (yours included).\n\
             If the best current answer already addresses the original message {well}, call \
             `{VOTE}` with its label and a short reason. Otherwise call `{NEW_ANSWER}` with a \
             better, complete answer that combines the strengths of the current answers and \
             fixes their weaknesses.{novelty}{notes}\n\
             You must end your turn with exactly one tool call: either `{VOTE}` or `{NEW_ANSWER}`{or_calls}.\n\
             {date}",
            label = how.label,
            or_calls = if how.client_tools.is_empty() {
                ""
            } else {
                " (or, instead of `new_answer`, your calls to the client's tools)"
            },
        )
    };
    join_system(agent_system, extra_system, &instructions)
}

/// The user message of a coordination turn.
pub fn coordination_user(input: &SessionInput, answers: &[ShownAnswer]) -> String {
    context_blocks(input, answers, 0)
}

/// The system message of the presentation call.
pub fn presentation_system(
    agent_system: Option<&str>,
    extra_system: Option<&str>,
    label: &str,
    now: SystemTime,
) -> String {
    let instructions = format!(
        "You are {label}. Several agents answered the original message below and your answer was \
         chosen. Write the final answer to the original message for the user. You may integrate \
         the best points of the other answers. Do not mention the agents, their answers, the votes \
         or this selection process.\nCurrent date and time: {}.",
        httpdate::fmt_http_date(now)
    );
    join_system(agent_system, extra_system, &instructions)
}

/// The system message of the presentation call under `final_answer_strategy: synthesize`:
/// the presenter combines the strongest parts of every answer. With votes it builds on the
/// chosen answer (its own); without, it treats every answer alike.
pub fn synthesis_system(
    agent_system: Option<&str>,
    extra_system: Option<&str>,
    label: &str,
    had_votes: bool,
    now: SystemTime,
) -> String {
    let basis = if had_votes {
        format!(
            "You are {label}. Several agents answered the original message below and the others \
             chose your answer as the best. Write the final answer for the user with your answer \
             as its basis, and bring in the strongest parts of the other answers wherever they \
             make it more complete, more accurate or deeper."
        )
    } else {
        format!(
            "You are {label}. Several agents answered the original message below. Write one final \
             answer for the user that combines the strongest relevant parts of all the answers."
        )
    };
    let instructions = format!(
        "{basis} Keep concrete details (exact values, names, steps, code) as the answer that gave \
         them stated them: the result must be at least as specific as the most detailed answer. \
         Where answers overlap, keep the most specific version and add what the others have \
         that it lacks; where they conflict, keep what is correct. Be selective rather than \
         merging everything. Do not mention the agents, their answers, the votes or this \
         process.\nCurrent date and time: {}.",
        httpdate::fmt_http_date(now)
    );
    join_system(agent_system, extra_system, &instructions)
}

/// The user message of the presentation call: the context, which answer is the presenter's
/// own (`None`: no answer is singled out), and the votes with their reasons (`votes` holds
/// `(voter label, target label, reason)`).
pub fn presentation_user(
    input: &SessionInput,
    answers: &[ShownAnswer],
    own_label: Option<&str>,
    votes: &[(String, String, String)],
) -> String {
    let votes_len: usize = votes
        .iter()
        .map(|(voter, target, reason)| voter.len() + target.len() + reason.len() + 16)
        .sum();
    let mut out = context_blocks(input, answers, votes_len);
    out.push('\n');
    if let Some(own_label) = own_label {
        out.push_str(&format!(
            "Your own answer is the one labelled {own_label}.\n"
        ));
    }
    out.push_str("<votes>\n");
    if votes.is_empty() {
        out.push_str("No votes were cast.\n");
    }
    for (voter, target, reason) in votes {
        out.push_str(&format!("{voter} voted for {target}: {reason}\n"));
    }
    out.push_str("</votes>");
    out
}

/// The system message of the post-evaluation call (`max_orchestration_restarts`).
pub fn evaluation_system(
    agent_system: Option<&str>,
    extra_system: Option<&str>,
    label: &str,
    now: SystemTime,
) -> String {
    let instructions = format!(
        "You are {label}. Several agents answered the original message below and chose your \
         answer. Before it goes to the user, check it with a fresh eye: does it fully and \
         correctly answer every part of the original message? If it does, call `submit` with \
         `confirmed: true`. If something required is missing or wrong, call \
         `restart_orchestration` with `reason` (what is wrong) and `instructions` (what the \
         next attempt must do); the agents then deliberate again with your critique. \
         Restarting costs a whole new deliberation: do it only for real gaps or errors, not \
         for style. End with exactly one of the two calls.\nCurrent date and time: {}.",
        httpdate::fmt_http_date(now)
    );
    join_system(agent_system, extra_system, &instructions)
}

/// The user message of the post-evaluation call: the context and the answer to check.
pub fn evaluation_user(input: &SessionInput, answer: &str) -> String {
    let mut out = question_blocks(input, answer.len());
    out.push_str(&format!(
        "<answer_to_evaluate>\n{answer}\n</answer_to_evaluate>"
    ));
    out
}

/// What a restarted deliberation is told about the attempt before it (put before the
/// coordination user message).
pub fn restart_feedback(reason: &str, instructions: &str, previous: &str) -> String {
    format!(
        "<previous_attempt>\nAn earlier deliberation on this message chose the answer below, and \
         its review found it insufficient: {reason}\nWhat this attempt must do: {instructions}\n\
         The earlier answer, for reference:\n{previous}\n</previous_attempt>\n"
    )
}

/// The short user message sent when an attempt ended without a workflow tool call.
pub fn missing_tool_reminder(offer_new_answer: bool, offer_vote: bool) -> String {
    let tools = match (offer_new_answer, offer_vote) {
        (true, true) => format!("`{VOTE}` or `{NEW_ANSWER}`"),
        (false, true) => format!("`{VOTE}`"),
        _ => format!("`{NEW_ANSWER}`"),
    };
    format!("You did not call a tool. Finish your turn now with exactly one call to {tools}.")
}

/// How many images the client's messages hold (history, question, and the tool results
/// that follow it).
pub fn image_count(input: &SessionInput) -> usize {
    let in_messages = |list: &[Message]| list.iter().map(|m| m.images.len()).sum::<usize>();
    in_messages(&input.history) + input.question_images.len() + in_messages(&input.followup)
}

/// The user message of a turn or of the presentation, whose text (from
/// [`coordination_user`] or [`presentation_user`]) marks each image as `[image N]`: an
/// agent that can see images gets them attached in that order; one that cannot gets a
/// note instead, so it neither guesses their content nor ignores that they exist.
pub fn user_turn(mut text: String, input: &SessionInput, vision: bool) -> Message {
    // In the order the text marks them: history, question, tool results.
    let images: Vec<Image> = input
        .history
        .iter()
        .flat_map(|m| m.images.iter())
        .chain(&input.question_images)
        .chain(input.followup.iter().flat_map(|m| m.images.iter()))
        .cloned()
        .collect();
    if images.is_empty() {
        // The text was sized with slack for what a prompt may add; the message is held for
        // the whole call (with three calls per session in flight, 4 KiB each of nothing).
        text.shrink_to_fit();
        return Message::user(text);
    }
    // Appended, not formatted into a new string: the text can hold a big question.
    if !vision {
        text.push_str(
            "\n\nEach [image N] above marks an image of the conversation (one the user \
             attached or a tool returned). Your model cannot see images, so they are not \
             shown to you: do not guess what they show. Other agents may see them; rely on \
             what their answers say about the images.",
        );
        return Message::user(text);
    }
    text.push_str(&format!(
        "\n\nThe images marked [image 1] to [image {}] above are attached below, in \
         that order.",
        images.len()
    ));
    let mut message = Message::user(text);
    message.images = images;
    message
}

/// Room for the tags, image marks and short notes a prompt adds around what it quotes.
const PROMPT_SLACK: usize = 4096;

/// ` [image 3] [image 4]` for a message with two images after two earlier ones.
fn image_marks(count: usize, first: &mut usize) -> String {
    let mut out = String::new();
    for _ in 0..count {
        *first += 1;
        out.push_str(&format!(" [image {first}]"));
    }
    out
}

fn join_system(agent_system: Option<&str>, extra_system: Option<&str>, tail: &str) -> String {
    [agent_system, extra_system]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .chain([tail])
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// `more`: bytes the caller adds after these blocks.
fn context_blocks(input: &SessionInput, answers: &[ShownAnswer], more: usize) -> String {
    let answers_len: usize = answers
        .iter()
        .map(|a| a.label.len() + a.text.len() + 32)
        .sum();
    let mut out = question_blocks(input, answers_len + more);
    out.push_str("<current_answers>\n");
    if answers.is_empty() {
        out.push_str("No answers exist yet.\n");
    }
    for a in answers {
        out.push_str(&format!(
            "<answer label=\"{}\">\n{}\n</answer>\n",
            a.label, a.text
        ));
    }
    out.push_str("</current_answers>");
    out
}

/// The conversation, the original message and any tool results, with room for `more`
/// bytes after them: sized once, since a prompt grown by doubling can hold a big question
/// twice over.
fn question_blocks(input: &SessionInput, more: usize) -> String {
    let history: usize = input.history.iter().map(|m| m.content.len() + 64).sum();
    let followup: usize = input.followup.iter().map(|m| m.content.len() + 256).sum();
    let mut out =
        String::with_capacity(history + input.question.len() + followup + more + PROMPT_SLACK);
    let mut images = 0;
    if !input.history.is_empty() {
        out.push_str("<conversation>\n");
        for m in &input.history {
            out.push_str(&render_history(m));
            out.push_str(&image_marks(m.images.len(), &mut images));
            out.push('\n');
        }
        out.push_str("</conversation>\n");
    }
    out.push_str("<original_message>\n");
    out.push_str(&input.question);
    out.push_str(&image_marks(input.question_images.len(), &mut images));
    out.push_str("\n</original_message>\n");
    if !input.followup.is_empty() {
        out.push_str(&tool_results_block(&input.followup, &mut images));
    }
    out
}

/// What happened after the original message: the tool calls made for it (as chosen in an
/// earlier session) and the results the client sent back, each result named by its call
/// and followed by the marks of its images (numbered on from `images`).
fn tool_results_block(followup: &[Message], images: &mut usize) -> String {
    let mut out = String::from(
        "<tool_results>\nTools were already called for the original message; the client ran \
         them and sent these results:\n",
    );
    let mut names = std::collections::HashMap::new();
    for m in followup {
        match m.role {
            Role::Assistant => {
                if !m.content.trim().is_empty() {
                    out.push_str(&format!("assistant: {}\n", m.content.trim()));
                }
                for call in &m.tool_calls {
                    names.insert(call.id.as_str(), call.name.as_str());
                    out.push_str(&format!(
                        "called {} [{}]\n",
                        describe_calls(std::slice::from_ref(call)),
                        call.id
                    ));
                }
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or("?");
                let name = names.get(id).copied().unwrap_or("a tool");
                out.push_str(&format!(
                    "result of {name} [{id}]: {}{}\n",
                    m.content,
                    image_marks(m.images.len(), images)
                ));
            }
            _ => out.push_str(&format!(
                "{}{}\n",
                render_history(m),
                image_marks(m.images.len(), images)
            )),
        }
    }
    out.push_str("</tool_results>\n");
    out
}

fn render_history(m: &Message) -> String {
    let role = match m.role {
        Role::System => "system".to_string(),
        Role::User => "user".to_string(),
        Role::Assistant => "assistant".to_string(),
        Role::Tool => format!("tool ({})", m.tool_call_id.as_deref().unwrap_or("?")),
    };
    let mut line = format!("{role}: {}", m.content);
    for call in &m.tool_calls {
        line.push_str(&format!(
            "\n{role}: [calls {}({})]",
            call.name, call.arguments
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_without_history_or_answers() {
        let input = SessionInput {
            question: "Why?".into(),
            ..Default::default()
        };
        assert_eq!(
            coordination_user(&input, &[]),
            "<original_message>\nWhy?\n</original_message>\n<current_answers>\nNo answers exist yet.\n</current_answers>"
        );
    }

    #[test]
    fn each_voter_sees_its_own_answer_last_and_nobody_always_first() {
        let shown = |labels: &[&str]| -> Vec<ShownAnswer> {
            labels
                .iter()
                .map(|l| ShownAnswer {
                    label: l.to_string(),
                    text: format!("text of {l}"),
                    calls: Vec::new(),
                })
                .collect()
        };
        let order = |voter: &str, number: usize, labels: &[&str]| -> Vec<String> {
            let mut answers = shown(labels);
            order_for_voter(&mut answers, voter, number);
            answers.into_iter().map(|a| a.label).collect()
        };
        let all = ["agent1", "agent2", "agent3"];
        assert_eq!(order("agent1", 1, &all), ["agent2", "agent3", "agent1"]);
        assert_eq!(order("agent2", 2, &all), ["agent3", "agent1", "agent2"]);
        assert_eq!(order("agent3", 3, &all), ["agent1", "agent2", "agent3"]);
        // Each answer is first for exactly one voter.
        let firsts: std::collections::HashSet<String> = (1..=3)
            .map(|n| order(&format!("agent{n}"), n, &all)[0].clone())
            .collect();
        assert_eq!(firsts.len(), 3);
        // A voter without an answer: rotated by its number; one answer: nothing to rotate.
        assert_eq!(
            order("agent3", 3, &["agent1", "agent2"]),
            ["agent2", "agent1"]
        );
        assert_eq!(order("agent2", 2, &["agent1"]), ["agent1"]);
        // Labels stay with their text.
        let mut answers = shown(&all);
        order_for_voter(&mut answers, "agent1", 1);
        assert!(
            answers
                .iter()
                .all(|a| a.text == format!("text of {}", a.label))
        );
    }

    #[test]
    fn system_parts_in_order_and_vote_tool_lists_labels() {
        let how = Instructions {
            label: "agent2",
            single: false,
            voting: Strictness::Strict,
            novelty: Strictness::Balanced,
            now: SystemTime::UNIX_EPOCH,
            client_tools: &[],
            call_required: false,
            held_tools: &[],
        };
        let s = coordination_system(Some("Be terse."), Some("Client rules."), &how);
        assert!(!s.contains("change things"));
        let held = ["mcp__files__delete".to_string()];
        let planning = coordination_system(
            None,
            None,
            &Instructions {
                held_tools: &held,
                ..how
            },
        );
        assert!(
            planning.contains("tools that change things: `mcp__files__delete`")
                && planning.contains("runs them, once, while presenting"),
            "{planning}"
        );
        assert!(planning_presentation_note(&held).contains("available now: `mcp__files__delete`"));
        assert!(s.starts_with("Be terse.\n\nClient rules.\n\nYou are agent2"));
        assert!(s.contains("Thu, 01 Jan 1970 00:00:00 GMT"));
        assert!(s.contains("nothing important left to improve"));
        assert!(s.contains("differ meaningfully"));
        let tools = workflow_tools(false, &["agent1".into(), "agent3".into()]);
        let synth = synthesis_system(None, None, "agent2", false, SystemTime::UNIX_EPOCH);
        assert!(synth.contains("combines the strongest relevant parts of all the answers"));
        assert!(!synth.contains("chose your answer"));
        assert_eq!(tools.len(), 1);
        assert_eq!(
            tools[0].parameters["properties"]["agent_id"]["enum"],
            json!(["agent1", "agent3"])
        );
    }

    /// Built once and shared by every turn that offers them; the kept `vote` tools are
    /// bounded.
    #[test]
    fn workflow_tools_are_shared_not_rebuilt() {
        let labels = ["agent1".to_string(), "agent2".to_string()];
        let first = workflow_tools(true, &labels);
        let again = workflow_tools(true, &labels);
        assert_eq!(first.len(), 2);
        assert!(Arc::ptr_eq(&first[0], &again[0]));

        let kept = VoteTools::default();
        let vote = kept.get(&labels);
        assert!(Arc::ptr_eq(&vote, &kept.get(&labels)));
        assert_eq!(
            vote.parameters["properties"]["agent_id"]["enum"],
            json!(labels)
        );
        for n in 0..VOTE_TOOLS_KEPT + 10 {
            kept.get(&[format!("agent{n}")]);
            assert!(kept.len() <= VOTE_TOOLS_KEPT);
        }
    }

    #[test]
    fn tool_result_images_are_marked_after_the_question_and_attached_in_order() {
        let image = |url: &str| Image {
            source: crate::provider::ImageSource::Url { url: url.into() },
            detail: None,
        };
        let mut earlier = Message::user("see");
        earlier.images = vec![image("https://x/1.png")];
        let mut call = Message::assistant(String::new());
        call.tool_calls = vec![ToolCall {
            id: "t1".into(),
            name: "Read".into(),
            arguments: "{}".into(),
            opaque: None,
        }];
        let mut result = Message::tool_result("t1", "a screenshot");
        result.images = vec![image("https://x/3.png")];
        let input = SessionInput {
            history: vec![earlier],
            question: "What changed?".into(),
            question_images: vec![image("https://x/2.png")],
            followup: vec![call, result],
            ..Default::default()
        };
        assert_eq!(image_count(&input), 3);
        let text = coordination_user(&input, &[]);
        assert!(text.contains("user: see [image 1]"), "{text}");
        assert!(text.contains("What changed? [image 2]"), "{text}");
        assert!(
            text.contains("result of Read [t1]: a screenshot [image 3]"),
            "{text}"
        );
        let seen = user_turn(text.clone(), &input, true);
        let urls: Vec<_> = seen
            .images
            .iter()
            .map(|i| match &i.source {
                crate::provider::ImageSource::Url { url } => url.as_str(),
                crate::provider::ImageSource::Base64 { .. } => "",
            })
            .collect();
        assert_eq!(
            urls,
            ["https://x/1.png", "https://x/2.png", "https://x/3.png"]
        );
        let blind = user_turn(text, &input, false);
        assert!(blind.images.is_empty());
        assert!(blind.content.contains("or a tool returned"));
    }
}
