"""What the Python client tests share: openapi.yaml's schemas as a validator, a raw
server-sent-events reader (the wire itself is checked, not what an SDK made of it), and the
client tool the tool tests offer, to be put in each API's own tool shape."""

import json
import pathlib

from typing import List, Literal

import httpx
import jsonschema
import pydantic
import yaml

SPEC = yaml.safe_load(
    (pathlib.Path(__file__).resolve().parents[2] / "openapi.yaml").read_text()
)

WEATHER_QUESTION = "What is the weather in Paris?"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def check(schema_name, instance):
    """Fails unless `instance` matches openapi.yaml's components/schemas/<schema_name>."""
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": SPEC["components"]}
    jsonschema.Draft202012Validator(schema).validate(instance)


def sse_events(url, body, headers=None):
    """POSTs `body` and returns the stream as (event name or None, JSON data) pairs, in
    order; comments are skipped and a `[DONE]` data line is returned as data None."""
    events, name = [], None
    with httpx.stream("POST", url, json=body, headers=headers or {}, timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = line[len("data: "):]
                events.append((name, None if data == "[DONE]" else json.loads(data)))
                name = None
    return events


class Address(pydantic.BaseModel):
    city: str


class Person(pydantic.BaseModel):
    """The structured-output tests' model: nested, an enum, a list."""

    name: str
    age: int
    role: Literal["admin", "user"]
    tags: List[str]
    address: Address


# What the simulator writes for Person's schema (its smallest valid instance).
SIMULATED_PERSON = Person(name="simulated", age=1, role="admin", tags=[], address=Address(city="simulated"))
