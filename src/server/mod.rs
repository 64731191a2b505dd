//! The HTTP edge: routes, OpenAI wire types, SSE rendering, errors as OpenAI JSON.
