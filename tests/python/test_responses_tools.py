"""Function tools decided by the panel through the Responses API: the official `openai`
SDK (a round trip by `previous_response_id` and by re-sent items) and the OpenAI Agents
SDK in its default Responses mode. Started by tests/it/python_clients.rs with
MASSGEN_BASE_URL pointing at a server whose agents run the simulator's `policy=client_tool`."""

import asyncio
import json
import os

import httpx
import openai
import pytest
from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)

from common import WEATHER_QUESTION, WEATHER_TOOL, check, sse_events

BASE = os.environ["MASSGEN_BASE_URL"]
TOOLS = [
    {
        "type": "function",
        "name": WEATHER_TOOL["name"],
        "description": WEATHER_TOOL["description"],
        "parameters": WEATHER_TOOL["schema"],
        "strict": True,
    }
]
QUESTION = WEATHER_QUESTION


@pytest.fixture()
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


def test_round_trip_by_previous_response_id(client):
    first = client.responses.create(model="massgen", input=QUESTION, tools=TOOLS)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "simulated"}
    final = client.responses.create(
        model="massgen",
        previous_response_id=first.id,
        tools=TOOLS,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"}],
    )
    assert "18C and sunny" in final.output_text
    assert not [item for item in final.output if item.type == "function_call"]


def test_streamed_call_then_round_trip_with_every_item_resent(client):
    with client.responses.stream(model="massgen", input=QUESTION, tools=TOOLS) as stream:
        first = stream.get_final_response()
    [call] = [item for item in first.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"city": "simulated"}
    # Without a stored conversation: the user message, every output item as the SDK
    # returned it (reasoning included), and the result.
    history = [{"role": "user", "content": QUESTION}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"})
    with client.responses.stream(model="massgen", input=history, tools=TOOLS, store=False) as stream:
        final = stream.get_final_response()
    assert "18C and sunny" in final.output_text


def test_function_call_on_the_wire_matches_openapi():
    body = {"model": "massgen", "input": QUESTION, "tools": TOOLS}
    response = httpx.post(f"{BASE}/v1/responses", json=body, timeout=60).json()
    check("Response", response)
    assert response["output"][-1]["type"] == "function_call"
    events = [event for _, event in sse_events(f"{BASE}/v1/responses", {**body, "stream": True})]
    for event in events:
        check("ResponseStreamEvent", event)
    arguments = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert json.loads(arguments) == json.loads(done["arguments"]) == {"city": "simulated"}


def test_agents_sdk_runs_a_function_tool_in_responses_mode():
    set_tracing_disabled(True)
    set_default_openai_api("responses")
    set_default_openai_client(
        openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60),
        use_for_tracing=False,
    )
    calls = []

    @function_tool
    def lookup_weather(city: str) -> str:
        """Current weather of a city."""
        calls.append(city)
        return f"18C and sunny in {city}"

    agent = Agent(name="weather", instructions="Use the tool.", model="massgen", tools=[lookup_weather])

    async def run():
        result = await Runner.run(agent, QUESTION)
        streamed = Runner.run_streamed(agent, QUESTION)
        async for _ in streamed.stream_events():
            pass
        return result, streamed

    result, streamed = asyncio.run(run())
    assert calls == ["simulated", "simulated"]
    for outcome in (result, streamed):
        assert "18C and sunny in simulated" in outcome.final_output
        kinds = [item.type for item in outcome.new_items]
        assert "tool_call_item" in kinds and "tool_call_output_item" in kinds
