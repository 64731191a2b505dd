"""LangChain's `ChatOpenAI.with_structured_output` (langchain-openai, pinned in
requirements.txt) against the simulator-backed demo panel: `json_schema` (the answer is
checked against the Pydantic model's schema on the server) and `json_mode` (any JSON
object, which the simulator writes as {"answer": ...}). Started by
tests/it/python_clients.rs with MASSGEN_BASE_URL."""

import os
import pydantic
from langchain_openai import ChatOpenAI

from common import SIMULATED_PERSON, Person

BASE = os.environ["MASSGEN_BASE_URL"]


class Answer(pydantic.BaseModel):
    answer: str


def chat():
    return ChatOpenAI(model="massgen", base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


def test_json_schema():
    person = chat().with_structured_output(Person, method="json_schema").invoke(
        "Describe a typical user as a person record."
    )
    assert person == SIMULATED_PERSON


def test_json_mode():
    answer = chat().with_structured_output(Answer, method="json_mode").invoke(
        "Answer as a JSON object with an 'answer' string."
    )
    assert answer == Answer(answer="[simulated]")
