//! Backend `type`s: their wire format, default base URL and the environment variable(s)
//! that hold the key.

pub use crate::chat_completions::AZURE_DEFAULT_API_VERSION;
pub use crate::connect::Wire;
use crate::model_name::{check_path_segment, gemini_model};

/// One backend type of the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The `type` value in the config.
    pub name: &'static str,
    pub wire: Wire,
    /// `None`: the config must give `base_url`.
    pub default_base_url: Option<&'static str>,
    /// Environment variables tried in order for the key.
    pub key_vars: &'static [&'static str],
    /// Whether a key is required (local servers need none).
    pub key_required: bool,
    /// Environment variables tried in order for `base_url` before the default, each with
    /// the path its SDK appends to it (`ANTHROPIC_BASE_URL` is the host, `/v1` follows).
    pub base_url_vars: &'static [(&'static str, &'static str)],
}

const fn p(
    name: &'static str,
    default_base_url: Option<&'static str>,
    key_vars: &'static [&'static str],
    key_required: bool,
) -> Preset {
    Preset {
        name,
        wire: Wire::ChatCompletions,
        default_base_url,
        key_vars,
        key_required,
        base_url_vars: &[],
    }
}

const fn native(
    name: &'static str,
    wire: Wire,
    default_base_url: Option<&'static str>,
    key_vars: &'static [&'static str],
) -> Preset {
    Preset {
        wire,
        ..p(name, default_base_url, key_vars, true)
    }
}

/// Every backend type, in the order of docs/configuration.md's provider table.
pub const PRESETS: &[Preset] = &[
    Preset {
        base_url_vars: &[("OPENAI_BASE_URL", "")],
        ..native(
            "openai",
            Wire::Responses,
            Some("https://api.openai.com/v1"),
            &["OPENAI_API_KEY"],
        )
    },
    p("chatcompletion", None, &[], false),
    Preset {
        base_url_vars: &[("ANTHROPIC_BASE_URL", "/v1")],
        ..native(
            "claude",
            Wire::Anthropic,
            Some("https://api.anthropic.com/v1"),
            &["ANTHROPIC_API_KEY"],
        )
    },
    Preset {
        base_url_vars: &[("ANTHROPIC_BASE_URL", "/v1")],
        ..native(
            "anthropic",
            Wire::Anthropic,
            Some("https://api.anthropic.com/v1"),
            &["ANTHROPIC_API_KEY"],
        )
    },
    Preset {
        base_url_vars: &[("GOOGLE_GEMINI_BASE_URL", "/v1beta")],
        ..native(
            "gemini",
            Wire::Gemini,
            Some("https://generativelanguage.googleapis.com/v1beta"),
            &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        )
    },
    Preset {
        base_url_vars: &[("AZURE_OPENAI_ENDPOINT", "")],
        ..native(
            "azure_openai",
            Wire::AzureChatCompletions,
            None,
            &["AZURE_OPENAI_API_KEY"],
        )
    },
    p("grok", Some("https://api.x.ai/v1"), &["XAI_API_KEY"], true),
    p(
        "groq",
        Some("https://api.groq.com/openai/v1"),
        &["GROQ_API_KEY"],
        true,
    ),
    p(
        "together",
        Some("https://api.together.xyz/v1"),
        &["TOGETHER_API_KEY"],
        true,
    ),
    p(
        "fireworks",
        Some("https://api.fireworks.ai/inference/v1"),
        &["FIREWORKS_API_KEY"],
        true,
    ),
    p(
        "cerebras",
        Some("https://api.cerebras.ai/v1"),
        &["CEREBRAS_API_KEY"],
        true,
    ),
    p(
        "openrouter",
        Some("https://openrouter.ai/api/v1"),
        &["OPENROUTER_API_KEY"],
        true,
    ),
    // MassGen 0.1.97 defaults to api.moonshot.cn, the China platform; its accounts and keys
    // are separate from the international api.moonshot.ai kept here (set base_url for .cn).
    p(
        "moonshot",
        Some("https://api.moonshot.ai/v1"),
        &["MOONSHOT_API_KEY", "KIMI_API_KEY"],
        true,
    ),
    p(
        "kimi",
        Some("https://api.moonshot.ai/v1"),
        &["MOONSHOT_API_KEY", "KIMI_API_KEY"],
        true,
    ),
    p(
        "nvidia_nim",
        Some("https://integrate.api.nvidia.com/v1"),
        &["NGC_API_KEY", "NVIDIA_API_KEY"],
        true,
    ),
    p(
        "nebius",
        Some("https://api.studio.nebius.ai/v1"),
        &["NEBIUS_API_KEY"],
        true,
    ),
    p(
        "qwen",
        Some("https://dashscope-intl.aliyuncs.com/compatible-mode/v1"),
        &["QWEN_API_KEY", "DASHSCOPE_API_KEY"],
        true,
    ),
    p(
        "zai",
        Some("https://api.z.ai/api/paas/v4"),
        &["ZAI_API_KEY"],
        true,
    ),
    p("poe", None, &["POE_API_KEY"], true),
    p(
        "vllm",
        Some("http://localhost:8000/v1"),
        &["VLLM_API_KEY"],
        false,
    ),
    p(
        "sglang",
        Some("http://localhost:30000/v1"),
        &["SGLANG_API_KEY"],
        false,
    ),
    p(
        "lmstudio",
        Some("http://localhost:1234/v1"),
        &["LMSTUDIO_API_KEY"],
        false,
    ),
    p(
        "ollama",
        Some("http://localhost:11434/v1"),
        &["OLLAMA_API_KEY"],
        false,
    ),
];

/// The preset for a config `type` (case-insensitive).
pub fn find(backend_type: &str) -> Option<&'static Preset> {
    PRESETS
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(backend_type))
}

/// Whether the wire format puts the model name into the URL (the others send it in the
/// body, where `openai/gpt-4o` and the like are ordinary names).
pub fn model_in_url(wire: Wire) -> bool {
    matches!(wire, Wire::Gemini | Wire::AzureChatCompletions)
}

/// The path-segment rule ([`crate::model_name`]) for one backend: `model` as a backend of
/// `backend_type` would use it. Types that send the model in the body accept any name; an
/// unknown type is not this rule's to refuse.
pub fn check_model(backend_type: &str, model: &str) -> Result<(), String> {
    let Some(preset) = find(backend_type) else {
        return Ok(());
    };
    match preset.wire {
        Wire::Gemini => check_path_segment(gemini_model(model)),
        wire if model_in_url(wire) => check_path_segment(model),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wire_formats_with_the_model_in_the_url_are_restricted() {
        let leaving = "../../../admin?x=1#";
        assert!(check_model("gemini", leaving).is_err());
        assert!(check_model("azure_openai", leaving).is_err());
        assert!(check_model("gemini", "models/gemini-2.0-flash").is_ok());
        assert!(check_model("gemini", "models/../x").is_err());
        for body_only in ["openai", "chatcompletion", "claude", "openrouter"] {
            assert!(
                check_model(body_only, "openai/gpt-4o").is_ok(),
                "{body_only}"
            );
        }
        assert!(check_model("no-such-type", leaving).is_ok());
    }
}
