"""Client tool calls decided by the panel, read by the official `openai` Python SDK.
Started by tests/it/python_clients.rs with MASSGEN_BASE_URL pointing at a server whose agents
run the simulator's `policy=client_tool`."""

import json
import os

import openai
import pytest

from common import WEATHER_QUESTION, WEATHER_TOOL, check

BASE = os.environ["MASSGEN_BASE_URL"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": WEATHER_TOOL["name"],
            "description": WEATHER_TOOL["description"],
            "parameters": WEATHER_TOOL["schema"],
        },
    }
]
QUESTION = [{"role": "user", "content": WEATHER_QUESTION}]


@pytest.fixture()
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


def test_non_stream_tool_calls(client):
    raw = client.chat.completions.with_raw_response.create(
        model="massgen", messages=QUESTION, tools=TOOLS
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "simulated"}
    check("ChatCompletion", json.loads(raw.text))


def test_stream_tool_call_deltas_accumulate(client):
    stream = client.chat.completions.create(
        model="massgen", messages=QUESTION, tools=TOOLS, stream=True
    )
    calls, finish = {}, None
    for chunk in stream:
        check("ChatCompletionChunk", chunk.model_dump(exclude_unset=True))
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                if delta.id:
                    assert entry["id"] is None, "id sent twice"
                    entry["id"] = delta.id
                if delta.function and delta.function.name:
                    entry["name"] += delta.function.name
                if delta.function and delta.function.arguments:
                    entry["arguments"] += delta.function.arguments
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "simulated"}

    # The SDK's own accumulator (the `.stream()` helper) builds the same message.
    with client.chat.completions.stream(model="massgen", messages=QUESTION, tools=TOOLS) as s:
        final = s.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "simulated"}
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_round_trip_tool_call_then_final_answer(client, stream):
    first = client.chat.completions.create(model="massgen", messages=QUESTION, tools=TOOLS)
    message = first.choices[0].message
    [call] = message.tool_calls
    messages = QUESTION + [
        message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
        {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"},
    ]
    if stream:
        with client.chat.completions.stream(model="massgen", messages=messages, tools=TOOLS) as s:
            final = s.get_final_completion()
    else:
        final = client.chat.completions.create(model="massgen", messages=messages, tools=TOOLS)
    choice = final.choices[0]
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert "18C and sunny" in choice.message.content


def test_workflow_tool_name_is_rejected(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="massgen",
            messages=QUESTION,
            tools=[{"type": "function", "function": {"name": "vote", "parameters": {}}}],
        )
    assert err.value.code == "tool_name_collision"
