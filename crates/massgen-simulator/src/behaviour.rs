//! The model-name grammar: `<name>[:key=value[,key=value…]]`.
//!
//! Everything a test or demo wants the simulator to do is packed into the `model` string so
//! that any OpenAI client (and our own server's YAML configs) can drive it unchanged.
//!
//! ```text
//! model   = name [ ":" [ option *( "," option ) ] ]   ; name = text before the first ":"
//! option  = key "=" value                              ; spaces around key/value ignored
//! ttft_ms=N        delay before the first chunk (30)    token_ms=N   delay between chunks (5)
//! words=N          answer length in words, >= 1 (30)
//! policy=auto|answer|vote|no_tool|bad_vote|double_vote|copy|client_tool|judge (auto)
//!                  client_tool: call the first non-workflow tool offered (see plan.rs)
//! call=PREFIX      client_tool calls the first offered tool whose name starts with PREFIX
//!                  (else, as without it, the first non-workflow tool), also after results
//!                  while it has none; when none is offered but `ToolSearch` is, it first
//!                  calls that with `select:PREFIX` (plan.rs). A question's
//!                  `[sim:args={…}]` is the call's arguments
//!                  judge: grade the question's <candidate_answer> against its
//!                  <reference_answer>, ending with `VERDICT: CORRECT|INCORRECT` (truth.rs)
//!                  A forced tool_choice overrides the policy (see forced.rs), except for
//!                  no_tool, bad_vote and double_vote, which ignore it like a faulty upstream
//! vote=first|last|<label>   label not offered -> first                        (first)
//! fault=none|429|quota|500|503|context|hang|hang_headers|drop|malformed|error_chunk (none)
//!                  quota: a spent quota (OpenAI 429 insufficient_quota, Anthropic 400 credit
//!                  balance, Gemini 429 RESOURCE_EXHAUSTED without a retry delay)
//! fault_times=N    only the first N requests with this exact model string fault
//! retry_after=S    retry-after seconds (429 default 1; 503 only when given)
//! retry_after_ms=MS  sends retry-after-ms (and no default retry-after)
//! reasoning=on|off (off)   usage=on|off (on)
//! batch=on|off     off: each streamed event is its own write; on: the whole stream in one
//!                  write once its last event is produced, as Nagle's algorithm delivered a
//!                  short stream on a reused connection (flush.rs)                  (off)
//! accuracy=P       a number from 0 to 1 (none): when the question holds `[sim:truth=V]`,
//!                  every answer ends with a line `Answer: V` with probability P, else
//!                  `Answer: <distractor>` (V+1 for an integer, `not V` otherwise); a judge
//!                  gives the right verdict with probability P. Votes go to the answer
//!                  whose `Answer:`/`VERDICT:` value most answers share, and the final
//!                  presentation restates its own answer's value (see truth.rs)
//! seed=N           seeds accuracy's draws, a whole number from 0 to 2^64-1 (0); each
//!                  draw is new: k identical requests make k independent draws
//! ```
//! Unknown keys, repeated keys, bad values and an empty name are a 400 naming the option.

use std::time::Duration;

/// Keys accepted after the `:`; an unknown key is a 400 so typos never pass silently.
pub const KNOWN_KEYS: &[&str] = &[
    "ttft_ms",
    "token_ms",
    "words",
    "policy",
    "vote",
    "fault",
    "fault_times",
    "retry_after",
    "retry_after_ms",
    "reasoning",
    "usage",
    "accuracy",
    "seed",
    "call",
    "batch",
];

const MAX_WORDS: usize = 100_000;
const MAX_DELAY_MS: u64 = 3_600_000;

/// What the simulated model does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    /// The part before the first `:`; seeds the simulated text and keys the stats.
    pub name: String,
    pub ttft: Duration,
    pub token_delay: Duration,
    pub words: usize,
    pub policy: Policy,
    pub vote: VoteChoice,
    pub fault: Fault,
    /// Only the first N requests with the exact same model string fault.
    pub fault_times: Option<u64>,
    pub retry_after_s: Option<u64>,
    pub retry_after_ms: Option<u64>,
    pub reasoning: bool,
    pub usage: bool,
    /// How often an answer states the question's `[sim:truth=…]` (see [`crate::truth`]).
    pub accuracy: Option<Accuracy>,
    /// Seeds the accuracy draws.
    pub seed: u64,
    /// `client_tool` calls the first offered tool whose name starts with this.
    pub call: Option<String>,
    /// A streamed body in one write at its end instead of one write per event.
    pub batch: bool,
}

/// A probability in [0, 1]. Its own type so that [`Behaviour`] stays `Eq`: NaN, the one
/// float that is not equal to itself, is refused when parsing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy(f64);

impl Eq for Accuracy {}

impl Accuracy {
    /// `None` outside [0, 1] (NaN included).
    pub fn new(p: f64) -> Option<Self> {
        (0.0..=1.0).contains(&p).then_some(Self(p))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Auto,
    Answer,
    Vote,
    NoTool,
    BadVote,
    DoubleVote,
    Copy,
    /// Call the first offered tool that is not a workflow tool, until tool results are in.
    ClientTool,
    /// Grade a candidate answer against a reference answer (see [`crate::truth`]).
    Judge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoteChoice {
    First,
    Last,
    Label(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    RateLimit,
    /// A spent quota: no wait helps.
    Quota,
    ServerError,
    Unavailable,
    Context,
    Hang,
    HangHeaders,
    Drop,
    Malformed,
    ErrorChunk,
}

/// A rejected model string; `code` is the OpenAI-style error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    pub code: &'static str,
    pub message: String,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            name: String::new(),
            ttft: Duration::from_millis(30),
            token_delay: Duration::from_millis(5),
            words: 30,
            policy: Policy::Auto,
            vote: VoteChoice::First,
            fault: Fault::None,
            fault_times: None,
            retry_after_s: None,
            retry_after_ms: None,
            reasoning: false,
            usage: true,
            accuracy: None,
            seed: 0,
            call: None,
            batch: false,
        }
    }
}

/// The name part of a model string (used for stats even when the options are invalid).
pub fn name_of(model: &str) -> &str {
    model.split_once(':').map_or(model, |(name, _)| name).trim()
}

impl Behaviour {
    pub fn parse(model: &str) -> Result<Self, OptionError> {
        let (name, options) = model.split_once(':').unwrap_or((model, ""));
        let name = name.trim();
        if name.is_empty() {
            return Err(OptionError {
                code: "invalid_model",
                message: format!("simulated model `{model}` has an empty name"),
            });
        }
        let mut b = Behaviour {
            name: name.to_string(),
            ..Behaviour::default()
        };
        let mut seen: Vec<&str> = Vec::new();
        for part in options.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(invalid(part, "", "options are written key=value"));
            };
            let (key, value) = (key.trim(), value.trim());
            if !KNOWN_KEYS.contains(&key) {
                return Err(OptionError {
                    code: "unknown_option",
                    message: format!(
                        "unknown simulator option `{key}` in model `{model}`; known options: {}",
                        KNOWN_KEYS.join(", ")
                    ),
                });
            }
            if seen.contains(&key) {
                return Err(invalid(key, value, "the option is given twice"));
            }
            seen.push(key);
            b.set(key, value)?;
        }
        Ok(b)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        match key {
            "ttft_ms" => self.ttft = Duration::from_millis(number(key, value, MAX_DELAY_MS)?),
            "token_ms" => {
                self.token_delay = Duration::from_millis(number(key, value, MAX_DELAY_MS)?);
            }
            "words" => {
                let n = number(key, value, MAX_WORDS as u64)?;
                if n == 0 {
                    return Err(invalid(key, value, "must be at least 1"));
                }
                self.words = n as usize;
            }
            "policy" => {
                self.policy = match value {
                    "auto" => Policy::Auto,
                    "answer" => Policy::Answer,
                    "vote" => Policy::Vote,
                    "no_tool" => Policy::NoTool,
                    "bad_vote" => Policy::BadVote,
                    "double_vote" => Policy::DoubleVote,
                    "copy" => Policy::Copy,
                    "client_tool" => Policy::ClientTool,
                    "judge" => Policy::Judge,
                    _ => {
                        return Err(invalid(
                            key,
                            value,
                            "expected auto, answer, vote, no_tool, bad_vote, double_vote, copy, client_tool or judge",
                        ));
                    }
                }
            }
            "vote" => {
                self.vote = match value {
                    "" => return Err(invalid(key, value, "expected first, last or a label")),
                    "first" => VoteChoice::First,
                    "last" => VoteChoice::Last,
                    label => VoteChoice::Label(label.to_string()),
                }
            }
            "fault" => {
                self.fault = match value {
                    "none" => Fault::None,
                    "429" => Fault::RateLimit,
                    "quota" => Fault::Quota,
                    "500" => Fault::ServerError,
                    "503" => Fault::Unavailable,
                    "context" => Fault::Context,
                    "hang" => Fault::Hang,
                    "hang_headers" => Fault::HangHeaders,
                    "drop" => Fault::Drop,
                    "malformed" => Fault::Malformed,
                    "error_chunk" => Fault::ErrorChunk,
                    _ => {
                        return Err(invalid(
                            key,
                            value,
                            "expected none, 429, quota, 500, 503, context, hang, hang_headers, drop, malformed or error_chunk",
                        ));
                    }
                }
            }
            "fault_times" => self.fault_times = Some(number(key, value, u64::MAX)?),
            "retry_after" => self.retry_after_s = Some(number(key, value, 86_400)?),
            "retry_after_ms" => self.retry_after_ms = Some(number(key, value, MAX_DELAY_MS)?),
            "reasoning" => self.reasoning = switch(key, value)?,
            "usage" => self.usage = switch(key, value)?,
            "batch" => self.batch = switch(key, value)?,
            "accuracy" => {
                let p = value.parse::<f64>().ok().and_then(Accuracy::new);
                match p {
                    Some(p) => self.accuracy = Some(p),
                    None => return Err(invalid(key, value, "expected a number from 0 to 1")),
                }
            }
            "seed" => self.seed = number(key, value, u64::MAX)?,
            "call" if !value.is_empty() => self.call = Some(value.to_string()),
            "call" => return Err(invalid(key, value, "expected the start of a tool name")),
            _ => return Err(invalid(key, value, "unsupported")),
        }
        Ok(())
    }
}

fn number(key: &str, value: &str, max: u64) -> Result<u64, OptionError> {
    match value.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(invalid(
            key,
            value,
            &format!("expected a whole number from 0 to {max}"),
        )),
    }
}

fn switch(key: &str, value: &str) -> Result<bool, OptionError> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(invalid(key, value, "expected on or off")),
    }
}

fn invalid(key: &str, value: &str, why: &str) -> OptionError {
    OptionError {
        code: "invalid_option_value",
        message: format!("simulator option `{key}={value}`: {why}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    #[test]
    fn bare_name_uses_defaults() {
        let b = Behaviour::parse("sim-a").unwrap();
        assert_eq!(b.name, "sim-a");
        assert_eq!(b.ttft, Duration::from_millis(30));
        assert_eq!(b.token_delay, Duration::from_millis(5));
        assert_eq!(b.words, 30);
        assert_eq!(b.policy, Policy::Auto);
        assert_eq!(b.fault, Fault::None);
        assert!(b.usage && !b.reasoning && !b.batch);
    }

    #[test]
    fn options_are_parsed() {
        let b = Behaviour::parse(
            "sim-a:ttft_ms=300, token_ms=20,vote=agent2,fault=429,fault_times=2,retry_after_ms=50,reasoning=on,usage=off,policy=copy,words=7,batch=on",
        )
        .unwrap();
        assert_eq!(b.ttft, Duration::from_millis(300));
        assert_eq!(b.token_delay, Duration::from_millis(20));
        assert_eq!(b.vote, VoteChoice::Label("agent2".into()));
        assert_eq!(b.fault, Fault::RateLimit);
        assert_eq!(b.fault_times, Some(2));
        assert_eq!(b.retry_after_ms, Some(50));
        assert_eq!(b.policy, Policy::Copy);
        assert_eq!(b.words, 7);
        assert!(b.reasoning && !b.usage && b.batch);
    }

    #[test]
    fn bad_options_are_named() {
        let e = Behaviour::parse("sim:colour=red").unwrap_err();
        assert_eq!(e.code, "unknown_option");
        assert!(e.message.contains("`colour`"), "{}", e.message);
        let e = Behaviour::parse("sim:words=many").unwrap_err();
        assert!(e.message.contains("words=many"), "{}", e.message);
        assert!(Behaviour::parse("sim:fault=teapot").is_err());
        assert!(Behaviour::parse("sim:words").is_err());
        assert!(Behaviour::parse("sim:words=1,words=2").is_err());
        let e = Behaviour::parse("sim:batch=yes").unwrap_err();
        assert!(e.message.contains("batch=yes"), "{}", e.message);
        assert!(Behaviour::parse(":words=1").is_err());
    }

    #[test]
    fn accuracy_and_seed_are_parsed_and_checked() {
        let b = Behaviour::parse("sim:accuracy=0.7,seed=42,policy=judge").unwrap();
        assert_eq!(b.accuracy.map(Accuracy::get), Some(0.7));
        assert_eq!((b.seed, b.policy), (42, Policy::Judge));
        let b = Behaviour::parse("sim:accuracy=1,seed=18446744073709551615").unwrap();
        assert_eq!(
            (b.accuracy.map(Accuracy::get), b.seed),
            (Some(1.0), u64::MAX)
        );
        assert_eq!(Behaviour::parse("sim").unwrap().accuracy, None);
        for (model, named) in [
            ("sim:accuracy=1.5", "`accuracy=1.5`"),
            ("sim:accuracy=x", "`accuracy=x`"),
            ("sim:accuracy=-0.1", "`accuracy=-0.1`"),
            ("sim:accuracy=NaN", "`accuracy=NaN`"),
            ("sim:seed=-1", "`seed=-1`"),
            ("sim:seed=1.5", "`seed=1.5`"),
        ] {
            let e = Behaviour::parse(model).unwrap_err();
            assert_eq!(e.code, "invalid_option_value", "{model}");
            assert!(e.message.contains(named), "{model}: {}", e.message);
        }
    }

    #[test]
    fn name_ignores_options() {
        assert_eq!(name_of("sim-b:fault=500"), "sim-b");
        assert_eq!(name_of("plain"), "plain");
    }
}
