"""instructor (pinned in instructor/requirements.txt, run from its own virtualenv) against
the simulator-backed demo panel. JSON mode sends `response_format: json_object` plus the
model's schema in words, which the simulator answers as {"answer": ...}; JSON_SCHEMA mode
sends the schema natively. instructor's own retries are off, so a valid object after a
broken first answer is the server's corrective call. Started by tests/it/python_clients.rs
with MASSGEN_BASE_URL."""

import os

import instructor
import openai
import pydantic

from common import SIMULATED_PERSON, Person

BASE = os.environ["MASSGEN_BASE_URL"]


class Answer(pydantic.BaseModel):
    answer: str


def client(mode):
    raw = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)
    return instructor.from_openai(raw, mode=mode)


def ask(mode, model, content):
    """The object instructor validated, as a plain dict (instructor returns its own subclass
    of `model`, which Pydantic's `==` tells apart from `model` itself)."""
    made = client(mode).chat.completions.create(
        model="massgen",
        response_model=model,
        max_retries=0,
        messages=[{"role": "user", "content": content}],
    )
    assert isinstance(made, model), type(made)
    return made.model_dump()


def test_json_mode():
    answer = ask(instructor.Mode.JSON, Answer, "Answer as a JSON object with an 'answer' string.")
    assert answer == {"answer": "[simulated]"}


def test_json_mode_after_one_broken_answer():
    answer = ask(
        instructor.Mode.JSON, Answer, "Answer as a JSON object. [sim:invalid_json_once]"
    )
    assert answer == {"answer": "[simulated]"}


def test_json_mode_broken_every_time_is_an_error():
    # The control for the test above: without the server's corrective call the marker
    # breaks the answer, and instructor (no retries of its own) gets the 502.
    try:
        ask(instructor.Mode.JSON, Answer, "Answer as a JSON object. [sim:invalid_json]")
    except Exception as e:  # instructor wraps the SDK's error in its own exception type
        assert "invalid_output" in str(e), e
    else:
        raise AssertionError("a broken answer became an object")


def test_json_schema_mode():
    person = ask(instructor.Mode.JSON_SCHEMA, Person, "Describe a typical user as a person record.")
    assert person == SIMULATED_PERSON.model_dump()
