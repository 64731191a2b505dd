"""The official `anthropic` Python SDK against a running massgen demo server with an API
key, every message, stream event and error checked against openapi.yaml. Started by
tests/it/python_clients.rs with MASSGEN_BASE_URL and MASSGEN_API_KEY."""

import os

import anthropic
import httpx
import pytest

from common import check, sse_events

BASE = os.environ["MASSGEN_BASE_URL"]
KEY = os.environ["MASSGEN_API_KEY"]
MESSAGES = [{"role": "user", "content": "Name three uses of a paperclip."}]


@pytest.fixture()
def client():
    # The SDK sends the key as a bearer token; Claude Code sends x-api-key (tested apart).
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)


def test_create_returns_thinking_then_text(client):
    raw = client.messages.with_raw_response.create(
        model="massgen", max_tokens=1024, system="Answer briefly.", messages=MESSAGES
    )
    assert raw.headers["x-massgen-session-id"].startswith("sess_")
    message = raw.parse()
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert "voted for" in message.content[0].thinking
    assert message.content[1].text.startswith("[simulated final answer]")
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 0
    body = raw.http_response.json()
    assert body["massgen_metadata"]["winner"]["label"].startswith("agent")
    check("AnthropicMessage", body)


def test_stream_helper_accumulates_the_message(client):
    with client.messages.stream(model="massgen", max_tokens=1024, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("[simulated final answer]")
    assert final.content[-1].text == text
    # Signed by the server, so the block can be sent back natively.
    assert final.content[0].type == "thinking" and final.content[0].signature.startswith("mg1.")
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


def test_thinking_blocks_go_back_as_the_sdk_returns_them(client):
    first = client.messages.create(model="massgen", max_tokens=1024, messages=MESSAGES)
    turn = MESSAGES + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "And a fourth?"},
    ]
    second = client.messages.create(model="massgen", max_tokens=1024, messages=turn)
    assert second.content[-1].text.startswith("[simulated final answer]")


def test_stream_events_on_the_wire_match_openapi(client):
    events = sse_events(
        f"{BASE}/v1/messages",
        {"model": "massgen", "max_tokens": 1024, "messages": MESSAGES, "stream": True},
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )
    # Anthropic's SDKs skip data without an `event:` line: every event has one.
    assert all(name == event["type"] for name, event in events)
    data = [event for _, event in events]
    assert data[0]["type"] == "message_start" and data[-1]["type"] == "message_stop"
    for event in data:
        check("AnthropicStreamEvent", event)
    starts = [e["index"] for e in data if e["type"] == "content_block_start"]
    stops = [e["index"] for e in data if e["type"] == "content_block_stop"]
    assert starts == stops == list(range(len(starts)))
    # The SDK reads the same stream.
    events = list(client.messages.create(model="massgen", max_tokens=1024, messages=MESSAGES, stream=True))
    assert events[0].type == "message_start" and events[-1].type == "message_stop"


def test_bounds_and_count_tokens(client):
    message = client.messages.create(
        model="massgen", max_tokens=1024, messages=MESSAGES, stop_sequences=["final"]
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "final"
    assert message.content[-1].text == "[simulated "
    count = client.messages.count_tokens(model="massgen", messages=[{"role": "user", "content": "12345678"}])
    assert count.input_tokens == 2


def test_errors_are_anthropic_shaped(client):
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="massgen/does-not-exist", max_tokens=10, messages=MESSAGES)
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="massgen", max_tokens=10, messages=[])
    assert err.value.body["error"]["type"] == "invalid_request_error"
    wrong = anthropic.Anthropic(base_url=BASE, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        wrong.messages.create(model="massgen", max_tokens=10, messages=MESSAGES)
    assert err.value.body["error"]["type"] == "authentication_error"
    # Without max_tokens (the SDK would not send that), and with the key as x-api-key.
    r = httpx.post(f"{BASE}/v1/messages", json={"model": "massgen", "messages": MESSAGES},
                   headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}, timeout=30)
    assert r.status_code == 400 and r.headers["x-should-retry"] == "false"
    check("AnthropicErrorResponse", r.json())
    r = httpx.get(f"{BASE}/v1/messages", headers={"x-api-key": KEY}, timeout=30)
    assert r.status_code == 405
    check("AnthropicErrorResponse", r.json())
