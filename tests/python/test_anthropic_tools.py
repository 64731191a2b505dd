"""Client tools decided by the panel through the Messages API, read by the official
`anthropic` SDK's stream accumulator. Started by tests/it/python_clients.rs with
MASSGEN_BASE_URL pointing at a server whose agents run the simulator's `policy=client_tool`."""

import json
import os

import anthropic
import httpx
import pytest

from common import WEATHER_QUESTION, WEATHER_TOOL, check, sse_events

BASE = os.environ["MASSGEN_BASE_URL"]
TOOLS = [
    {
        "name": WEATHER_TOOL["name"],
        "description": WEATHER_TOOL["description"],
        "input_schema": WEATHER_TOOL["schema"],
    }
]
QUESTION = [{"role": "user", "content": WEATHER_QUESTION}]


@pytest.fixture()
def client():
    return anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(client, stream):
    with client.messages.stream(model="massgen", max_tokens=1024, messages=QUESTION, tools=TOOLS) as s:
        first = s.get_final_message()
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "simulated"}
    messages = QUESTION + [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C and sunny"}]},
    ]
    if stream:
        with client.messages.stream(model="massgen", max_tokens=1024, messages=messages, tools=TOOLS) as s:
            final = s.get_final_message()
    else:
        final = client.messages.create(model="massgen", max_tokens=1024, messages=messages, tools=TOOLS)
    assert final.stop_reason == "end_turn"
    assert "18C and sunny" in final.content[-1].text


def test_tool_choice_any_and_a_colliding_name(client):
    message = client.messages.create(
        model="massgen", max_tokens=1024, messages=QUESTION, tools=TOOLS, tool_choice={"type": "any"}
    )
    assert message.stop_reason == "tool_use"
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(
            model="massgen", max_tokens=10, messages=QUESTION,
            tools=[{"name": "vote", "input_schema": {"type": "object"}}],
        )
    assert "collides" in err.value.body["error"]["message"]


def test_tool_use_on_the_wire_matches_openapi():
    body = {"model": "massgen", "max_tokens": 1024, "messages": QUESTION, "tools": TOOLS}
    message = httpx.post(f"{BASE}/v1/messages", json=body, timeout=60).json()
    check("AnthropicMessage", message)
    assert message["stop_reason"] == "tool_use"
    events = sse_events(f"{BASE}/v1/messages", {**body, "stream": True})
    assert all(name == event["type"] for name, event in events)
    for _, event in events:
        check("AnthropicStreamEvent", event)
    partial = "".join(
        e["delta"]["partial_json"] for _, e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "simulated"}
    [delta] = [e for _, e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"
