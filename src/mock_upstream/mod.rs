//! A simulated OpenAI-compatible model server whose behaviour is chosen by the model name.
