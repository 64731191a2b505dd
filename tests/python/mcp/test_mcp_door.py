"""The official Python `mcp` SDK's client against the MCP door, driven by
tests/it/mcp_door.rs: over Streamable HTTP (MASSGEN_MCP_URL, with MASSGEN_API_KEY) or over
stdio (MASSGEN_MCP_COMMAND, a JSON list: the command and its arguments).

MASSGEN_MCP_ANSWER is what the final answer starts with. MASSGEN_MCP_SLOW_PANEL names a panel
whose agents are slow and MASSGEN_MOCK_URL the simulator they call: the cancellation test
cancels a call on it and waits for the simulator's in-flight count to reach zero.
MASSGEN_MCP_OUT, when set, is a file the deliberate test writes the session id into.
"""

import json
import os
import time
import urllib.request
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ.get("MASSGEN_MCP_URL")
KEY = os.environ.get("MASSGEN_API_KEY")
COMMAND = os.environ.get("MASSGEN_MCP_COMMAND")
ANSWER = os.environ.get("MASSGEN_MCP_ANSWER", "[simulated final answer]")
SLOW_PANEL = os.environ.get("MASSGEN_MCP_SLOW_PANEL")
MOCK_URL = os.environ.get("MASSGEN_MOCK_URL")
CALL_TIMEOUT = 60


@asynccontextmanager
async def session(key=KEY):
    """An initialized client session on the transport the environment names."""
    if URL:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = httpx2.Timeout(30, read=120)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            async with streamable_http_client(URL, http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    yield s
    else:
        argv = json.loads(COMMAND)
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


def mock_active():
    with urllib.request.urlopen(f"{MOCK_URL}/mock/stats", timeout=10) as r:
        return json.load(r)["active"]


def test_tools_are_listed():
    async def main():
        async with session() as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) == {"deliberate", "list_panels"}, tools
            deliberate = tools["deliberate"]
            assert deliberate.input_schema["required"] == ["question"]
            assert "answer" in deliberate.output_schema["properties"]
            panels = await s.call_tool("list_panels", {})
            assert not panels.is_error, text_of(panels)
            names = [p["panel"] for p in panels.structured_content["panels"]]
            assert "massgen" in names, panels.structured_content

    anyio.run(main)


def test_deliberate_streams_progress_then_answers():
    async def main():
        seen = []

        async def progress(value, total, message):
            seen.append((value, message))

        async with session() as s:
            result = await s.call_tool(
                "deliberate",
                {"question": "Should the users table get a soft-delete column?", "context": "ALTER TABLE users ..."},
                read_timeout_seconds=CALL_TIMEOUT,
                progress_callback=progress,
            )
            # Every progress notification came before the result.
            at_result = list(seen)
        assert not result.is_error, text_of(result)
        answer = text_of(result)
        assert answer.startswith(ANSWER), answer
        out = result.structured_content
        assert out["answer"] == answer
        assert out["session_id"].startswith("sess_"), out
        assert out["winner"]["agent_id"], out
        assert out["votes"], out
        assert out["consensus_reason"], out
        assert out["usage"]["total_tokens"] > 0, out
        assert "cost_usd" in out
        messages = [m for _, m in at_result]
        assert any("answered" in m for m in messages), messages
        assert any("consensus" in m for m in messages), messages
        values = [v for v, _ in at_result]
        assert values == sorted(values) and len(set(values)) == len(values), values
        if os.environ.get("MASSGEN_MCP_OUT"):
            with open(os.environ["MASSGEN_MCP_OUT"], "w") as f:
                f.write(out["session_id"])

    anyio.run(main)


def test_bad_calls_are_tool_errors():
    async def main():
        async with session() as s:
            empty = await s.call_tool("deliberate", {"question": "  "})
            assert empty.is_error
            assert "'question' must be a non-empty string" in text_of(empty)
            unknown = await s.call_tool("deliberate", {"question": "Why?", "panel": "massgen/nope"})
            assert unknown.is_error
            assert "massgen/nope" in text_of(unknown) and "does not exist" in text_of(unknown)
            quorum = await s.call_tool("deliberate", {"question": "Why?", "voting_quorum": 0})
            assert quorum.is_error and "voting_quorum" in text_of(quorum)

    anyio.run(main)


@pytest.mark.skipif(not (SLOW_PANEL and MOCK_URL), reason="needs a slow panel and its simulator")
def test_cancelling_a_call_cancels_the_upstream_calls():
    async def main():
        started = anyio.Event()

        async def progress(value, total, message):
            started.set()

        async with session() as s:
            async with anyio.create_task_group() as tg:

                async def call():
                    await s.call_tool(
                        "deliberate",
                        {"question": "Take your time", "panel": SLOW_PANEL},
                        read_timeout_seconds=CALL_TIMEOUT,
                        progress_callback=progress,
                    )

                tg.start_soon(call)
                with anyio.fail_after(30):
                    await started.wait()
                    # The agents' calls are in flight at the simulator.
                    while await anyio.to_thread.run_sync(mock_active) == 0:
                        await anyio.sleep(0.05)
                # Abandoning the call sends notifications/cancelled.
                tg.cancel_scope.cancel()
            deadline = time.monotonic() + 15
            while (active := await anyio.to_thread.run_sync(mock_active)) != 0:
                assert time.monotonic() < deadline, f"{active} upstream calls still in flight"
                await anyio.sleep(0.05)
            # The session still answers after a cancelled call.
            panels = await s.call_tool("list_panels", {})
            assert not panels.is_error

    anyio.run(main)


@pytest.mark.skipif(not (URL and KEY), reason="HTTP with keys only")
def test_a_missing_key_is_refused():
    response = httpx2.post(
        URL,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=10,
    )
    assert response.status_code == 401, response.text

    async def main():
        async with session(key=None) as s:
            await s.list_tools()

    with pytest.raises(BaseException):
        anyio.run(main)
