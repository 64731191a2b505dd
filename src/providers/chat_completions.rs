//! The OpenAI Chat Completions wire format (`POST {base_url}/chat/completions`), serving
//! `openai`, `chatcompletion` and every OpenAI-compatible preset.
