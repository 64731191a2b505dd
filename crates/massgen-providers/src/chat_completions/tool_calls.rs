//! Assembling streamed tool-call fragments into complete calls.
//!
//! OpenAI sends the id and name on a call's first delta and the arguments split anywhere
//! over later deltas that carry only `index`. Groq, xAI and Ollama send a whole call in
//! one delta. Some routed providers (OpenRouter → Novita) re-send the same call, same id,
//! with the arguments again, and some compatible servers repeat the id on every fragment
//! or put several calls on index 0 with different ids. One rule set covers all of them:
//! a delta joins the latest call of its index unless it brings a different id.

use super::wire::ToolCallDeltaWire;
use crate::ToolCall;
use crate::sse::Held;

#[derive(Debug)]
struct Slot {
    index: Option<u32>,
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
pub(crate) struct ToolCallAssembler {
    slots: Vec<Slot>,
    /// What the calls took in, for the answer's cap.
    held: Held,
}

enum Target {
    New,
    /// `resent`: the delta repeats the call's id, so it may carry the arguments again.
    Existing {
        slot: usize,
        resent: bool,
    },
}

impl ToolCallAssembler {
    /// Takes one delta in; returns the call's name when this delta is the first to name it
    /// (the call has begun).
    pub fn apply(&mut self, delta: ToolCallDeltaWire) -> Option<String> {
        let function = delta.function.unwrap_or_default();
        let id = delta.id.filter(|id| !id.is_empty());
        let name = function.name.filter(|name| !name.is_empty());
        let arguments = function.arguments.unwrap_or_default();
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        let bytes = text(&id) + text(&name) + arguments.len();
        match self.target(delta.index, id.as_deref()) {
            Target::New => {
                self.held.item(bytes);
                self.slots.push(Slot {
                    index: delta.index,
                    id,
                    name: name.clone().unwrap_or_default(),
                    arguments,
                });
                name
            }
            Target::Existing { slot, resent } => {
                self.held.add(bytes);
                let slot = &mut self.slots[slot];
                if slot.id.is_none() {
                    slot.id = id;
                }
                // The first name wins: later deltas only ever repeat it.
                let named = name.filter(|_| slot.name.is_empty());
                if let Some(name) = &named {
                    slot.name.clone_from(name);
                }
                if resent {
                    merge_resent(&mut slot.arguments, &arguments);
                } else {
                    slot.arguments.push_str(&arguments);
                }
                named
            }
        }
    }

    fn target(&self, index: Option<u32>, id: Option<&str>) -> Target {
        let existing = match index {
            Some(index) => self.slots.iter().rposition(|s| s.index == Some(index)),
            None => match id {
                Some(id) => self.slots.iter().rposition(|s| s.id.as_deref() == Some(id)),
                None => self.slots.len().checked_sub(1),
            },
        };
        let Some(slot) = existing else {
            return Target::New;
        };
        match (id, self.slots[slot].id.as_deref()) {
            (Some(new), Some(old)) if new != old => Target::New,
            (Some(_), Some(_)) => Target::Existing { slot, resent: true },
            _ => Target::Existing {
                slot,
                resent: false,
            },
        }
    }

    /// The bytes the calls took in so far ([`Held`]).
    pub fn held(&self) -> usize {
        self.held.bytes()
    }

    /// The complete calls in index order (arrival order within an index), with ids
    /// synthesized as `call_<n>` where the upstream sent none.
    pub fn finish(&mut self) -> Vec<ToolCall> {
        let mut slots: Vec<Slot> = std::mem::take(&mut self.slots)
            .into_iter()
            .filter(|s| !s.name.is_empty() || !s.arguments.is_empty())
            .collect();
        slots.sort_by_key(|s| s.index.unwrap_or(u32::MAX));
        slots
            .into_iter()
            .enumerate()
            .map(|(n, slot)| ToolCall {
                id: slot.id.unwrap_or_else(|| format!("call_{n}")),
                name: slot.name,
                arguments: slot.arguments,
                opaque: None,
            })
            .collect()
    }
}

/// Arguments of a delta that repeats a call's id: either the whole arguments again
/// (possibly grown), or the next fragment from a server that repeats the id every time.
fn merge_resent(accumulated: &mut String, incoming: &str) {
    if incoming.is_empty() || incoming == accumulated.as_str() {
        return;
    }
    if incoming.starts_with(accumulated.as_str()) || is_json_object(accumulated) {
        *accumulated = incoming.to_owned();
    } else {
        accumulated.push_str(incoming);
    }
}

fn is_json_object(text: &str) -> bool {
    matches!(
        serde_json::from_str::<serde_json::Value>(text),
        Ok(serde_json::Value::Object(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat_completions::wire::FunctionDeltaWire;

    fn delta(
        index: Option<u32>,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
    ) -> ToolCallDeltaWire {
        ToolCallDeltaWire {
            index,
            id: id.map(str::to_owned),
            function: Some(FunctionDeltaWire {
                name: name.map(str::to_owned),
                arguments: Some(args.to_owned()),
            }),
        }
    }

    fn assemble(deltas: Vec<ToolCallDeltaWire>) -> Vec<ToolCall> {
        let mut assembler = ToolCallAssembler::default();
        for d in deltas {
            assembler.apply(d);
        }
        assembler.finish()
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            opaque: None,
        }
    }

    #[test]
    fn openai_fragments_and_parallel_calls() {
        let calls = assemble(vec![
            delta(Some(0), Some("a"), Some("f"), ""),
            delta(Some(0), None, None, "{\""),
            delta(Some(1), Some("b"), Some("g"), ""),
            delta(Some(0), None, None, "x\":1}"),
            delta(Some(1), None, None, "{}"),
        ]);
        assert_eq!(
            calls,
            vec![call("a", "f", "{\"x\":1}"), call("b", "g", "{}")]
        );
    }

    #[test]
    fn resent_call_is_not_duplicated() {
        let calls = assemble(vec![
            delta(Some(0), Some("0"), Some("llm_version"), ""),
            delta(Some(0), Some("0"), Some("llm_version"), "{}"),
            delta(Some(0), Some("0"), Some("llm_version"), "{}"),
        ]);
        assert_eq!(calls, vec![call("0", "llm_version", "{}")]);
    }

    #[test]
    fn id_repeated_on_every_fragment_appends() {
        let calls = assemble(vec![
            delta(Some(0), Some("c"), Some("f"), "{\"a"),
            delta(Some(0), Some("c"), None, "\": 2}"),
        ]);
        assert_eq!(calls, vec![call("c", "f", "{\"a\": 2}")]);
    }

    #[test]
    fn same_index_new_id_is_a_new_call_and_missing_ids_are_synthesized() {
        let calls = assemble(vec![
            delta(Some(0), Some("x"), Some("f"), "{}"),
            delta(Some(0), Some("y"), Some("g"), "{}"),
            delta(Some(1), None, Some("h"), "{}"),
        ]);
        assert_eq!(
            calls,
            vec![
                call("x", "f", "{}"),
                call("y", "g", "{}"),
                call("call_2", "h", "{}")
            ]
        );
    }

    #[test]
    fn calls_come_out_in_index_order() {
        let calls = assemble(vec![
            delta(Some(1), Some("b"), Some("g"), "{}"),
            delta(Some(0), Some("a"), Some("f"), "{}"),
        ]);
        assert_eq!(calls, vec![call("a", "f", "{}"), call("b", "g", "{}")]);
    }
}
