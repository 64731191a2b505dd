//! The deliberation a door sends goes back to the client as reasoning, and clients send it
//! back on their next turn. Agents never take deliberation as input, so whatever form it
//! returns in is dropped before the session starts:
//!
//! - natively: a Messages `thinking` block with the `signature` we gave it, a Responses
//!   `reasoning` item with the `encrypted_content` we gave it. Both are HMAC-SHA256 tags
//!   under the deployment's `--reasoning-secret` (replicas share it through config), so the
//!   server can tell its own from a forgery or another deployment's: with the secret set, a
//!   non-empty tag that does not verify is refused (as Anthropic and OpenAI refuse theirs).
//!   Without it the key is random per process, and a tag from before a restart cannot be
//!   told from a forgery: it is dropped like the rest, not refused, so a laptop's restart
//!   does not break the conversations of clients that send reasoning back (Codex does, on
//!   every turn).
//! - as text, from clients that cannot send reasoning back natively: a leading
//!   `<think>…</think>` in an assistant turn (pydantic-ai's rendering, and the server's own
//!   `think_tags` output), and `<assistant_thinking>…</assistant_thinking>` in a user turn
//!   (pydantic-ai's Anthropic model, for thinking without a signature).
//!
//! The tags are signatures, not encryption: the deliberation they cover is the text the
//! client was already shown.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use massgen_core::Secret;
use massgen_core::provider::{Message, Role};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Tags start with this, so a tag from another scheme fails fast and the scheme can change.
const VERSION: &str = "mg1";

/// Signs and verifies the deliberation the server hands out.
pub struct Signer {
    key: Vec<u8>,
    /// The key is the operator's (`--reasoning-secret`): tags that do not verify are refused.
    strict: bool,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(***)")
    }
}

impl Signer {
    /// With `secret` (`--reasoning-secret`), tags verify on every replica and after a
    /// restart, and those that do not are refused; without, a random per-process key,
    /// under which unverifiable tags are dropped, not refused (see the module's comment).
    pub fn new(secret: Option<&Secret>) -> Self {
        let strict = secret.is_some();
        let key = match secret {
            Some(s) => s.expose().as_bytes().to_vec(),
            None => {
                let mut key = vec![0u8; 32];
                rand::fill(&mut key[..]);
                key
            }
        };
        Self { key, strict }
    }

    /// Whether a thinking block with this non-empty `signature` may come back: ours, or
    /// any under a per-process key (see the module's comment).
    pub fn accepts_thinking(&self, thinking: &str, signature: &str) -> bool {
        !self.strict || self.verify_thinking(thinking, signature)
    }

    /// As [`Signer::accepts_thinking`], for a reasoning item's `encrypted_content`.
    pub fn accepts_reasoning(&self, content: &str) -> bool {
        !self.strict || self.verify_reasoning(content)
    }

    fn mac(&self, purpose: &str, parts: &[&str]) -> HmacSha256 {
        // A key of any length is accepted by HMAC.
        let mut mac = HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| {
            unreachable!("HMAC takes keys of any length");
        });
        mac.update(purpose.as_bytes());
        for part in parts {
            // Length-prefixed, so ("ab","c") and ("a","bc") differ.
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The `signature` of a thinking block holding `thinking`.
    pub fn sign_thinking(&self, thinking: &str) -> String {
        let tag = self.mac("thinking", &[thinking]).finalize().into_bytes();
        format!("{VERSION}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Whether `signature` is ours for `thinking`.
    pub fn verify_thinking(&self, thinking: &str, signature: &str) -> bool {
        let Some(tag) = decode_tag(signature) else {
            return false;
        };
        self.mac("thinking", &[thinking]).verify_slice(&tag).is_ok()
    }

    /// The `encrypted_content` of reasoning item `id`: self-contained (the id and a tag),
    /// so clients that send the item back without its summary still verify.
    pub fn seal_reasoning(&self, id: &str) -> String {
        let tag = self.mac("reasoning", &[id]).finalize().into_bytes();
        format!(
            "{VERSION}.{}.{}",
            URL_SAFE_NO_PAD.encode(id),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Whether `content` is an `encrypted_content` this deployment sealed.
    pub fn verify_reasoning(&self, content: &str) -> bool {
        let mut parts = content.splitn(3, '.');
        let (Some(VERSION), Some(id), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let (Ok(id), Ok(tag)) = (URL_SAFE_NO_PAD.decode(id), URL_SAFE_NO_PAD.decode(tag)) else {
            return false;
        };
        let Ok(id) = String::from_utf8(id) else {
            return false;
        };
        self.mac("reasoning", &[&id]).verify_slice(&tag).is_ok()
    }
}

fn decode_tag(signature: &str) -> Option<Vec<u8>> {
    let tag = signature.strip_prefix(VERSION)?.strip_prefix('.')?;
    URL_SAFE_NO_PAD.decode(tag).ok()
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const USER_OPEN: &str = "<assistant_thinking>";
const USER_CLOSE: &str = "</assistant_thinking>";

/// Removes deliberation rendered as text from a conversation: a leading `<think>…</think>`
/// of an assistant turn, `<assistant_thinking>…</assistant_thinking>` spans of a user turn
/// (a user turn left empty, with no images, goes).
pub fn strip_from_history(messages: &mut Vec<Message>) {
    messages.retain_mut(|message| {
        let stripped = match message.role {
            Role::Assistant => after_leading_think(&message.content).map(str::to_string),
            Role::User if message.content.contains(USER_OPEN) => {
                Some(without_spans(&message.content, USER_OPEN, USER_CLOSE))
            }
            _ => None,
        };
        let Some(text) = stripped else {
            return true;
        };
        message.content = text;
        // A turn that held only deliberation goes; one with more (tool calls, images)
        // stays without it.
        !(message.content.trim().is_empty()
            && message.tool_calls.is_empty()
            && message.images.is_empty())
    });
}

/// What follows a `<think>…</think>` that opens `text` (whitespace before it allowed).
fn after_leading_think(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix(THINK_OPEN)?;
    let end = rest.find(THINK_CLOSE)?;
    Some(rest[end + THINK_CLOSE.len()..].trim_start())
}

/// `text` without its complete `open…close` spans; an unclosed `open` stays as written.
fn without_spans(text: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        let Some(len) = rest[start + open.len()..].find(close) else {
            break;
        };
        out.push_str(&rest[..start]);
        rest = &rest[start + open.len() + len + close.len()..];
    }
    out.push_str(rest);
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinking_signatures_verify_only_for_their_text_and_key() {
        let signer = Signer::new(Some(&Secret::new("s1")));
        let sig = signer.sign_thinking("step one");
        assert!(sig.starts_with("mg1.") && sig.len() > 20);
        assert!(signer.verify_thinking("step one", &sig));
        assert!(!signer.verify_thinking("step two", &sig));
        assert!(!Signer::new(Some(&Secret::new("s2"))).verify_thinking("step one", &sig));
        assert!(!signer.verify_thinking("step one", ""));
        assert!(!signer.verify_thinking("step one", "EqQBCgIYAhIM"));
        // Same secret, another replica: verifies.
        assert!(Signer::new(Some(&Secret::new("s1"))).verify_thinking("step one", &sig));
        // No secret: a random key per process, which cannot tell a restart from a forgery.
        let lenient = Signer::new(None);
        assert!(!lenient.verify_thinking("step one", &sig));
        assert!(lenient.accepts_thinking("step one", &sig));
        assert!(lenient.accepts_reasoning("gAAAAABo"));
        assert!(!signer.accepts_thinking("step two", &sig));
        assert!(!signer.accepts_reasoning("gAAAAABo"));
    }

    #[test]
    fn reasoning_seals_are_self_contained() {
        let signer = Signer::new(Some(&Secret::new("s1")));
        let sealed = signer.seal_reasoning("rs_1");
        assert!(signer.verify_reasoning(&sealed));
        let forged = sealed.replace(
            &URL_SAFE_NO_PAD.encode("rs_1"),
            &URL_SAFE_NO_PAD.encode("rs_2"),
        );
        assert!(!signer.verify_reasoning(&forged));
        assert!(!signer.verify_reasoning("gAAAAABo"));
        assert!(!Signer::new(Some(&Secret::new("s2"))).verify_reasoning(&sealed));
    }

    #[test]
    fn text_rendered_deliberation_is_removed() {
        let mut messages = vec![
            Message::user("Why is the sky blue?"),
            Message::assistant("<think>\nagent1 answered…\n</think>\n\nRayleigh scattering."),
            Message::user("<assistant_thinking>agent1 answered…</assistant_thinking>"),
            Message::user("And at sunset?"),
            Message::assistant("No <think> here </think> at the start? <think>x</think>"),
        ];
        strip_from_history(&mut messages);
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[1].content, "Rayleigh scattering.");
        assert_eq!(messages[2].content, "And at sunset?");
        assert!(messages[3].content.starts_with("No <think>"));
        let mut unclosed = vec![Message::assistant("<think> never closed")];
        strip_from_history(&mut unclosed);
        assert_eq!(unclosed[0].content, "<think> never closed");
        let mut mixed = vec![Message::user(
            "<assistant_thinking>a</assistant_thinking>\n\nWhat next?",
        )];
        strip_from_history(&mut mixed);
        assert_eq!(mixed[0].content, "What next?");
        // A think-only assistant turn goes (pydantic-ai sends the thinking part apart).
        let mut apart = vec![
            Message::user("Q"),
            Message::assistant("<think>\nagent1 answered…\n</think>"),
            Message::assistant("A"),
            Message::user(""),
        ];
        strip_from_history(&mut apart);
        let left: Vec<_> = apart.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(left, ["Q", "A", ""], "only turns that held deliberation go");
    }
}
