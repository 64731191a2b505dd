"""pydantic-ai (pinned in requirements.txt beside this file, run from its own virtualenv)
against the server: its Chat Completions, Responses and Anthropic models, two turns each
(`agent.run_sync`, then again with `message_history=result.all_messages()`), the answers
checked. Started by tests/it/sdk_clients.rs with MASSGEN_BASE_URL, MASSGEN_API_KEY and
MASSGEN_PYDANTIC_AI_OUT, one model per run (`-k chat|responses|anthropic`).

pydantic-ai keeps the panel's deliberation as a ThinkingPart and sends it back on turn 2
in its own way per API: `reasoning_content` on Chat Completions, an assistant message in
`<think>…</think>` on Responses, a user turn in `<assistant_thinking>…</assistant_thinking>`
on Messages. The test checks that turn 2 did carry it (from what went over the wire), then
writes turn 1's deliberation and answer to MASSGEN_PYDANTIC_AI_OUT/<model>.json: the Rust
side checks against the prompts the simulated agents received that turn 2 reached them
with the answer but without the deliberation."""

import json
import os
import pathlib

import anthropic
import httpx2
import openai
import pytest

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ThinkingPart
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

BASE = os.environ["MASSGEN_BASE_URL"]
KEY = os.environ["MASSGEN_API_KEY"]
OUT = pathlib.Path(os.environ["MASSGEN_PYDANTIC_AI_OUT"])

FIRST = "Why is the sky blue?"
# tests/it/sdk_clients.rs finds turn 2's upstream calls by this question.
SECOND = "And why are sunsets red?"
# What every answer of the simulated panel starts with.
ANSWER = "[simulated final answer]"


class Wire:
    """The JSON bodies the SDK sent, through an httpx2 request hook."""

    def __init__(self):
        self.bodies = []

    async def hook(self, request):
        await request.aread()
        self.bodies.append(json.loads(request.content or b"null"))

    def client(self):
        # No retries anywhere (a retry would run a whole deliberation again) and a deadline.
        return httpx2.AsyncClient(event_hooks={"request": [self.hook]}, timeout=60)


def model(kind, wire):
    if kind == "anthropic":
        raw = anthropic.AsyncAnthropic(
            base_url=BASE, api_key=KEY, max_retries=0, http_client=wire.client()
        )
        return AnthropicModel("massgen", provider=AnthropicProvider(anthropic_client=raw))
    raw = openai.AsyncOpenAI(
        base_url=f"{BASE}/v1", api_key=KEY, max_retries=0, http_client=wire.client()
    )
    provider = OpenAIProvider(openai_client=raw)
    if kind == "chat":
        return OpenAIChatModel("massgen", provider=provider)
    return OpenAIResponsesModel("massgen", provider=provider)


def strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
def test_two_turns(kind):
    wire = Wire()
    agent = Agent(model(kind, wire))

    one = agent.run_sync(FIRST)
    assert one.output.startswith(ANSWER), one.output
    assert FIRST in one.output, one.output
    thinking = "".join(
        part.content
        for message in one.all_messages()
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ThinkingPart)
    )
    assert "[massgen]" in thinking, f"turn 1 brought no deliberation: {one.all_messages()}"

    sent_before = len(wire.bodies)
    two = agent.run_sync(SECOND, message_history=one.all_messages())
    assert two.output.startswith(ANSWER), two.output
    # The simulated agents answer the last question: turn 2 reached them as turn 2.
    assert SECOND in two.output, two.output

    # Turn 2 sent turn 1's deliberation back, so the server had something to leave out.
    sent = [s for body in wire.bodies[sent_before:] for s in strings(body)]
    lines = [line.strip() for line in thinking.splitlines() if line.strip()]
    assert any(line in s for line in lines for s in sent), sent

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{kind}.json").write_text(
        json.dumps({"deliberation": thinking, "answer": one.output, "second": SECOND})
    )
