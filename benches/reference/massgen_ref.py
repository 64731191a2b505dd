"""One session of Python MassGen (`pip install massgen`) against the simulator.

Prints one line `REFJSON {...}`: the wall time of `massgen.run` (import and interpreter
start-up excluded), the process's peak RSS, the winner and the start of the answer.
Usage: python massgen_ref.py MOCK_BASE_URL QUESTION MODEL_A MODEL_B MODEL_C
"""

import asyncio
import json
import os
import resource
import sys
import tempfile
import time


def config(base_url, models):
    agents = []
    for i, model in enumerate(models):
        agents.append(
            {
                "id": f"sim{i + 1}",
                "backend": {
                    "type": "chatcompletion",
                    "model": model,
                    "base_url": base_url,
                },
            }
        )
    return {
        "agents": agents,
        # The same orchestrator setting as the Rust server's reference panel.
        "orchestrator": {"max_new_answers_per_agent": 1},
        "ui": {"display_type": "simple", "logging_enabled": False},
    }


async def main():
    base_url, question, *models = sys.argv[1:]
    os.chdir(tempfile.mkdtemp(prefix="massgen-ref-"))
    t_import = time.perf_counter()
    import massgen  # noqa: PLC0415 - the import is part of what we report separately

    import_s = time.perf_counter() - t_import
    start = time.perf_counter()
    result = await massgen.run(query=question, config_dict=config(base_url, models))
    wall = time.perf_counter() - start
    result = result if isinstance(result, dict) else {}
    answer = result.get("final_answer") or ""
    winner = result.get("selected_agent")
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = {
        "wall_ms": wall * 1e3,
        "import_ms": import_s * 1e3,
        "peak_rss_mib": peak_kib / 1024,
        "winner": winner,
        "answer": answer[:200],
    }
    print("REFJSON " + json.dumps(line), flush=True)


asyncio.run(main())
