//! Whether an agent's model can see images when its config does not say (`backend.vision`).
//!
//! A small table of known model families, matched on the model name's last path segment
//! (`openai/gpt-4o` and `meta-llama/Llama-3.2-11B-Vision-Instruct` alike), lower-cased.
//! A model the table does not know counts as unable to see: sending an image to a
//! text-only model makes the upstream refuse the whole call, so the agent would lose its
//! turn, while the note it gets instead costs nothing; an operator who knows better sets
//! `vision: true`.

/// Name prefixes of families that take images.
const SEEING_PREFIXES: &[&str] = &[
    // OpenAI: GPT-4o, GPT-4.1, GPT-4 Turbo, GPT-5 and the reasoning models with vision.
    "gpt-4o",
    "chatgpt-4o",
    "gpt-4.1",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    // Anthropic: every Claude from 3 on.
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    // Google: every Gemini.
    "gemini",
    // xAI: the vision models and Grok 4.
    "grok-2-vision",
    "grok-vision",
    "grok-4",
    // Meta: Llama 4 (natively multimodal).
    "llama-4",
    // Mistral, Qwen and open models built for images.
    "pixtral",
    "qwen-vl",
    "qwen2-vl",
    "qwen2.5-vl",
    "qvq",
    "llava",
];

/// Names that start like a seeing family but are text-only.
const BLIND_PREFIXES: &[&str] = &["o1-mini", "o1-preview", "o3-mini", "gpt-4o-audio"];

/// Words that mark a vision variant of a family that is otherwise text-only
/// (`llama-3.2-11b-vision-instruct`, `llama3.2-vision`, `qwen2.5-vl-72b`).
const SEEING_WORDS: &[&str] = &["vision", "-vl-", "-vl:"];

/// The default of `backend.vision` for `model`.
pub fn default_vision(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .trim()
        .to_ascii_lowercase();
    if BLIND_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return false;
    }
    SEEING_PREFIXES.iter().any(|p| name.starts_with(p))
        || SEEING_WORDS.iter().any(|w| name.contains(w))
        || name.ends_with("-vl")
}

#[cfg(test)]
mod tests {
    use super::default_vision;

    #[test]
    fn the_table_of_families() {
        for seeing in [
            "gpt-4o",
            "gpt-4o-mini",
            "openai/gpt-4.1-mini",
            "gpt-5",
            "gpt-5-nano",
            "o3",
            "o4-mini",
            "claude-3-5-sonnet-20241022",
            "claude-sonnet-4-5",
            "claude-opus-4-1",
            "gemini-2.5-flash",
            "models/gemini-2.0-flash",
            "grok-2-vision-1212",
            "grok-4",
            "meta-llama/Llama-3.2-11B-Vision-Instruct",
            "llama3.2-vision:11b",
            "meta-llama/llama-4-scout-17b-16e-instruct",
            "pixtral-12b",
            "Qwen/Qwen2.5-VL-72B-Instruct",
            "llava:13b",
        ] {
            assert!(default_vision(seeing), "{seeing}");
        }
        for blind in [
            "gpt-3.5-turbo",
            "gpt-4",
            "o1-mini",
            "o3-mini",
            "gpt-oss-120b",
            "deepseek-chat",
            "llama-3.3-70b-versatile",
            "grok-3",
            "mistral-large-latest",
            "sim-a:ttft_ms=10",
            "",
        ] {
            assert!(!default_vision(blind), "{blind}");
        }
    }
}
