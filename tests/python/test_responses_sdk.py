"""The official `openai` Python SDK's Responses API (`client.responses`) against a running
massgen demo server, every response and stream event checked against openapi.yaml.
Started by tests/it/python_clients.rs with MASSGEN_BASE_URL."""

import json
import os

import httpx
import openai
import pytest

from common import check, sse_events

BASE = os.environ["MASSGEN_BASE_URL"]
QUESTION = "Name three uses of a paperclip."


@pytest.fixture()
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


def answer_text(response):
    return "".join(
        part.text
        for item in response.output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
    )


def test_create_returns_reasoning_then_message(client):
    raw = client.responses.with_raw_response.create(
        model="massgen", input=QUESTION, instructions="Answer briefly.", metadata={"run": "sdk"}
    )
    assert raw.headers["x-massgen-session-id"].startswith("sess_")
    response = raw.parse()
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "message"]
    summary = response.output[0].summary[0].text
    assert "answered (agent" in summary and "voted for" in summary
    assert response.output_text.startswith("[simulated final answer]")
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.metadata == {"run": "sdk"}
    body = json.loads(raw.text)
    assert body["massgen_metadata"]["winner"]["label"].startswith("agent")
    check("Response", body)


def test_stream_accumulator_builds_the_final_response(client):
    deltas, reasoning = "", ""
    with client.responses.stream(model="massgen", input=QUESTION) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas += event.delta
            elif event.type == "response.reasoning_summary_text.delta":
                reasoning += event.delta
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == deltas
    assert deltas.startswith("[simulated final answer]")
    assert "consensus" in reasoning
    assert final.usage.total_tokens > 0


def test_stream_events_on_the_wire_match_openapi(client):
    events = sse_events(f"{BASE}/v1/responses", {"model": "massgen", "input": QUESTION, "stream": True})
    data = [event for _, event in events]
    assert [name for name, _ in events] == [event["type"] for event in data]
    assert data[0]["type"] == "response.created" and data[-1]["type"] == "response.completed"
    assert [event["sequence_number"] for event in data] == list(range(len(data)))
    assert len({event["response"]["id"] for event in data if "response" in event}) == 1
    for event in data:
        check("ResponseStreamEvent", event)
    # What Codex reads the answer from: the finished message item.
    [message] = [e["item"] for e in data if e["type"] == "response.output_item.done" and e["item"]["type"] == "message"]
    assert message["content"][0]["text"] == "".join(
        e["delta"] for e in data if e["type"] == "response.output_text.delta"
    )
    assert data[-1]["response"]["output"][-1] == message
    # The SDK reads the same stream.
    events = list(client.responses.create(model="massgen", input=QUESTION, stream=True))
    assert events[-1].response.output_text.startswith("[simulated final answer]")


def test_previous_response_id_continues_and_store_false_keeps_nothing(client):
    first = client.responses.create(model="massgen", input=QUESTION)
    assert client.responses.retrieve(first.id).id == first.id
    check("Response", httpx.get(f"{BASE}/v1/responses/{first.id}", timeout=30).json())
    second = client.responses.create(
        model="massgen", input="And two more?", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id
    assert second.output_text.startswith("[simulated final answer]")

    unstored = client.responses.create(model="massgen", input=QUESTION, store=False)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(unstored.id)
    assert err.value.code == "response_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="massgen", input="More", previous_response_id=unstored.id)
    assert err.value.code == "previous_response_not_found"


def test_errors_are_openai_shaped_and_not_retried(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="massgen", input=QUESTION, background=True)
    assert err.value.code == "unsupported_parameter"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="massgen/does-not-exist", input=QUESTION)
    r = httpx.post(f"{BASE}/v1/responses", json={"model": "massgen"}, timeout=30)
    assert r.status_code == 400
    assert r.headers["x-should-retry"] == "false"
    check("ErrorResponse", r.json())
    # The session list says which door each session came through.
    listing = httpx.get(f"{BASE}/v1/sessions", timeout=30).json()
    check("SessionList", listing)
    assert "responses" in {s["door"] for s in listing["data"]}
