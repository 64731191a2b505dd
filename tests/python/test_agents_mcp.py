"""The OpenAI Agents SDK's MCP client (`MCPServerStreamableHttp`, at its default 5 s client
session timeout) against the MCP door, driven by tests/it/mcp_door.rs.

MASSGEN_MCP_URL and MASSGEN_API_KEY name the door; MASSGEN_MCP_STEADY_PANEL a panel whose
agents answer after 2 s and whose whole deliberation takes longer than the client waits.
"""

import asyncio
import os
import time

import pytest
from agents.mcp import MCPServerStreamableHttp

URL = os.environ["MASSGEN_MCP_URL"]
KEY = os.environ["MASSGEN_API_KEY"]
PANEL = os.environ["MASSGEN_MCP_STEADY_PANEL"]


def server():
    # The SDK's defaults, as an agent builder leaves them: a 5 s read timeout per call.
    return MCPServerStreamableHttp(
        params={"url": URL, "headers": {"Authorization": f"Bearer {KEY}"}},
        name="massgen",
    )


def test_a_deliberation_longer_than_the_clients_5_s_answers_within_a_deadline():
    async def main():
        async with server() as s:
            names = [t.name for t in await s.list_tools()]
            assert "deliberate" in names, names
            deliberate = next(t for t in await s.list_tools() if t.name == "deliberate")
            assert "deadline_seconds" in deliberate.input_schema["properties"]
            started = time.monotonic()
            result = await s.call_tool(
                "deliberate",
                {"question": "Which index should the orders table get?", "panel": PANEL, "deadline_seconds": 4},
            )
            took = time.monotonic() - started
        assert not result.is_error, result
        assert took < 5, took
        out = result.structured_content
        assert out["consensus_reason"] == "timeout", out
        assert out["answer"], out

    asyncio.run(main())


def test_without_a_deadline_the_client_gives_up_at_5_s():
    async def main():
        async with server() as s:
            started = time.monotonic()
            with pytest.raises(BaseException):
                await s.call_tool("deliberate", {"question": "Take your time", "panel": PANEL})
            assert time.monotonic() - started < 15

    asyncio.run(main())
