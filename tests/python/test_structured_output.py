"""Structured output with the official `openai` SDK's `parse()` helpers and a Pydantic model,
against the simulator-backed demo panel (which answers a requested schema with its smallest
valid instance). Started by tests/it/python_clients.rs with MASSGEN_BASE_URL."""

import os

import openai
import pytest

from common import SIMULATED_PERSON as EXPECTED, Person

BASE = os.environ["MASSGEN_BASE_URL"]
MESSAGES = [{"role": "user", "content": "Describe a typical user as a person record."}]


@pytest.fixture()
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


def test_chat_completions_parse(client):
    completion = client.chat.completions.parse(
        model="massgen", messages=MESSAGES, response_format=Person
    )
    message = completion.choices[0].message
    assert message.refusal is None
    assert message.parsed == EXPECTED
    assert completion.choices[0].finish_reason == "stop"


def test_chat_completions_stream_parse(client):
    with client.chat.completions.stream(
        model="massgen", messages=MESSAGES, response_format=Person
    ) as stream:
        deltas = [e for e in stream if e.type == "content.delta"]
        completion = stream.get_final_completion()
    assert deltas, "the answer streamed"
    assert completion.choices[0].message.parsed == EXPECTED


def test_chat_completions_retry_then_error(client):
    # The simulator breaks its first answer: the corrective call fixes it.
    once = [{"role": "user", "content": "A person record. [sim:invalid_json_once]"}]
    completion = client.chat.completions.parse(model="massgen", messages=once, response_format=Person)
    assert completion.choices[0].message.parsed == EXPECTED
    # It breaks every answer: a clear error, not prose for the parser to choke on.
    always = [{"role": "user", "content": "A person record. [sim:invalid_json]"}]
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.parse(model="massgen", messages=always, response_format=Person)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "invalid_output"


def test_responses_parse(client):
    response = client.responses.parse(
        model="massgen", input="Describe a typical user as a person record.", text_format=Person
    )
    assert response.output_parsed == EXPECTED
    assert response.status == "completed"
