"""The official `openai` Python SDK against a running massgen server, and every response
checked against openapi.yaml. Started by tests/it/python_clients.rs with MASSGEN_BASE_URL."""

import json
import os

import httpx
import openai
import pytest

from common import check, sse_events

BASE = os.environ["MASSGEN_BASE_URL"]


@pytest.fixture()
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Name three uses of a paperclip."},
]


def test_non_stream(client):
    raw = client.chat.completions.with_raw_response.create(model="massgen", messages=MESSAGES)
    assert raw.headers["x-massgen-session-id"].startswith("sess_")
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content.startswith("[simulated final answer]")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    extra = completion.model_extra or {}
    assert extra["massgen_metadata"]["winner"]["label"].startswith("agent")
    check("ChatCompletion", json.loads(raw.text))


def test_stream_with_usage(client):
    stream = client.chat.completions.create(
        model="massgen", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    content, reasoning, finish, usage = "", "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            finish = choice.finish_reason or finish
    assert content.startswith("[simulated final answer]")
    assert "answered (agent" in reasoning and "voted for" in reasoning
    assert finish == "stop"
    assert usage is not None and usage.total_tokens > 0


def test_stream_helper_accumulates(client):
    with client.chat.completions.stream(model="massgen", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content.startswith("[simulated final answer]")


def test_stream_chunks_match_openapi():
    body = {"model": "massgen", "stream": True, "stream_options": {"include_usage": True}, "messages": MESSAGES}
    events = sse_events(f"{BASE}/v1/chat/completions", body)
    assert events[-1] == (None, None)  # data: [DONE]
    for _, chunk in events[:-1]:
        check("ChatCompletionChunk", chunk)


def test_answer_bounds_and_what_is_refused(client):
    stopped = client.chat.completions.create(model="massgen", messages=MESSAGES, stop=["final"])
    assert stopped.choices[0].message.content == "[simulated "
    assert stopped.choices[0].finish_reason == "stop"
    # (The SDK's stream helper raises on `length` by design: read the chunks.)
    chunks = list(client.chat.completions.create(
        model="massgen", messages=MESSAGES, max_completion_tokens=2, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "[simulat"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    for refused in [
        {"n": 2},
        {"logprobs": True},
    ]:
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="massgen", messages=MESSAGES, **refused)
        assert err.value.code == "unsupported_parameter", refused


def test_errors_match_openapi_and_sdk_raises(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="massgen", messages=[])
    assert err.value.code == "empty_array"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="massgen/does-not-exist", messages=MESSAGES)
    for body, status in [(b"{nope", 400), (json.dumps({"model": "massgen"}).encode(), 400)]:
        r = httpx.post(f"{BASE}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status
        check("ErrorResponse", r.json())


def test_health_and_models_match_openapi(client):
    check("Health", httpx.get(f"{BASE}/health").json())
    models = httpx.get(f"{BASE}/v1/models").json()
    check("ModelList", models)
    assert "massgen" in [m.id for m in client.models.list()]
    model = client.models.retrieve("massgen")
    assert (model.id, model.object, model.owned_by) == ("massgen", "model", "massgen")
    check("Model", httpx.get(f"{BASE}/v1/models/massgen").json())
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("massgen/does-not-exist")
    assert err.value.code == "model_not_found"
    check("ErrorResponse", err.value.response.json())


def test_session_list_and_record_match_openapi(client):
    raw = client.chat.completions.with_raw_response.create(model="massgen", messages=MESSAGES)
    sid = raw.headers["x-massgen-session-id"]
    listing = httpx.get(f"{BASE}/v1/sessions", timeout=30)
    assert listing.status_code == 200
    check("SessionList", listing.json())
    entry = next(s for s in listing.json()["data"] if s["id"] == sid)
    assert entry["status"] == "completed" and entry["question"] == MESSAGES[-1]["content"]
    record = httpx.get(f"{BASE}/v1/sessions/{sid}", timeout=30)
    check("SessionRecord", record.json())
    bad = httpx.get(f"{BASE}/v1/sessions?limit=0", timeout=30)
    assert bad.status_code == 400
    check("ErrorResponse", bad.json())
