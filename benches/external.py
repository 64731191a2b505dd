#!/usr/bin/env python3
"""Memory of `massgen serve` under load from OUTSIDE its process (issue 11, item 7 and the soak).

Three processes: the simulator (`massgen mock-upstream`, its own process), the server under
test (`massgen serve`), and this script as the client. Python's standard library only (raw
HTTP/1.1 over asyncio streams), so nothing to install. Server RSS is sampled from
/proc/PID/status every 20 ms (VmRSS) and VmHWM is read at the end (a peak between samples).

    benches/external.py scale [--sessions 1000] [--massgen target/release/massgen] [-- serve flags]
    benches/external.py soak  [--massgen target/release/massgen] [-- serve flags]
    benches/external.py sequential [--sessions 60] [--ttft-ms 200 --token-ms 5 --words 40]

scale: N streaming 3-agent sessions opened at once (the issue's load: 50 ms to the first
token, 10 tokens at 2 ms). soak: 2,000 sessions at 100 concurrent, then 1,000 at once;
RSS before, peak and after, errors, and the gauges (massgen_active_sessions,
massgen_open_connections) once the load is gone. sequential: N sessions one after the
other (the coordination benchmark's load), for the RSS they leave. Prints one JSON object.
"""

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

QUESTION = "Why is the sky blue?"


def start(cmd, prefix):
    """Starts `cmd` and waits (<= 30 s) for its stdout line `<prefix> http://ADDR`."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return proc, line[len(prefix):].strip()
    proc.kill()
    sys.exit(f"{cmd} did not print {prefix!r}")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def mib(kib):
    return round(kib / 1024, 1)


async def request(host, port, method, path, body=None):
    """One HTTP/1.1 request on its own connection: (status, headers text, body bytes)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
        )
        writer.write(head.encode() + payload)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    if b"transfer-encoding: chunked" in head.lower():
        rest = dechunk(rest)
    return status, head.decode(errors="replace"), rest


def dechunk(data):
    out, i = bytearray(), 0
    while i < len(data):
        end = data.find(b"\r\n", i)
        if end < 0:
            break
        size = int(data[i:end].split(b";")[0], 16)
        if size == 0:
            break
        out += data[end + 2:end + 2 + size]
        i = end + 2 + size + 2
    return bytes(out)


async def session(host, port):
    """One streamed chat session: None when it ended with a stop and [DONE], else why not."""
    body = {
        "model": "massgen",
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    try:
        status, _, text = await request(host, port, "POST", "/v1/chat/completions", body)
    except OSError as e:
        return f"connection: {e}"
    if status != 200:
        return f"status {status}: {text[:200]!r}"
    text = text.decode(errors="replace")
    if "data: [DONE]" not in text:
        return "no [DONE]"
    if '"finish_reason":"stop"' not in text:
        return f"no stop: {text[-300:]!r}"
    return None


class Sampler:
    """VmRSS of the server every 20 ms while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.running = pid, 0, True

    async def run(self):
        while self.running:
            self.peak = max(self.peak, status_kib(self.pid, "VmRSS:"))
            await asyncio.sleep(0.02)


async def wave(host, port, n, at_once):
    """`n` sessions, at most `at_once` at a time: (seconds, errors, first error)."""
    gate = asyncio.Semaphore(at_once)

    async def one():
        async with gate:
            return await session(host, port)

    started = time.monotonic()
    results = await asyncio.gather(*(one() for _ in range(n)))
    errors = [r for r in results if r]
    return time.monotonic() - started, len(errors), (errors[0] if errors else None)


async def gauges(host, port):
    _, _, text = await request(host, port, "GET", "/metrics")
    found = {}
    for name in ("massgen_active_sessions", "massgen_open_connections"):
        m = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
        found[name] = float(m.group(1)) if m else None
    return found


async def settle(host, port, pid, within=10.0):
    """Waits (bounded) for the gauges to reach 0 once the load is gone; returns them."""
    deadline = time.monotonic() + within
    while True:
        g = await gauges(host, port)
        # The /metrics request itself holds one connection.
        busy = (g["massgen_active_sessions"] or 0) > 0 or (g["massgen_open_connections"] or 0) > 1
        if not busy or time.monotonic() > deadline:
            return g
        await asyncio.sleep(0.2)


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["scale", "soak", "sequential"])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--massgen", default="target/release/massgen")
    parser.add_argument("--ttft-ms", type=int, default=50)
    parser.add_argument("--token-ms", type=int, default=2)
    parser.add_argument("--words", type=int, default=10)
    parser.add_argument("--wrap", default="", help="run the server under this command (e.g. 'heaptrack -o /tmp/ht')")
    parser.add_argument("serve_flags", nargs="*")
    args = parser.parse_args()

    # ~5 descriptors per session on the server (client socket, 3 upstream, slack).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    sim, sim_url = start(
        [args.massgen, "mock-upstream", "--host", "127.0.0.1", "--port", "0"],
        "mock-upstream listening on",
    )
    work = tempfile.TemporaryDirectory()
    model = f"ttft_ms={args.ttft_ms},token_ms={args.token_ms},words={args.words}"
    config = os.path.join(work.name, "team.yaml")
    with open(config, "w") as f:
        f.write("agents:\n")
        for i, name in enumerate(["alpha", "beta", "gamma"]):
            f.write(
                f"  - id: sim{i + 1}\n    backend:\n      type: chatcompletion\n"
                f"      base_url: {sim_url}/v1\n      model: \"{name}:{model}\"\n"
            )
    server, url = start(
        [*args.wrap.split(), args.massgen, "serve", "--host", "127.0.0.1", "--port", "0", "--config", config,
         *args.serve_flags],
        "massgen listening on",
    )
    host, port = url.removeprefix("http://").rsplit(":", 1)
    port = int(port)
    report = {"mode": args.mode, "upstream": model, "serve_flags": args.serve_flags}
    try:
        warm = await session(host, port)
        if warm:
            sys.exit(f"warm-up session failed: {warm}")
        await asyncio.sleep(0.5)
        report["rss_idle_mib"] = mib(status_kib(server.pid, "VmRSS:"))
        sampler = Sampler(server.pid)
        sampling = asyncio.create_task(sampler.run())
        if args.mode in ("scale", "sequential"):
            at_once = args.sessions if args.mode == "scale" else 1
            secs, errors, first = await wave(host, port, args.sessions, at_once)
            report["sessions"] = args.sessions
            report["seconds"] = round(secs, 2)
            report["errors"] = errors
            report["first_error"] = first
        else:
            for name, n, at_once in (("sustained", 2000, 100), ("burst", 1000, 1000)):
                secs, errors, first = await wave(host, port, n, at_once)
                report[name] = {
                    "sessions": n, "at_once": at_once, "seconds": round(secs, 2),
                    "errors": errors, "first_error": first,
                    "rss_mib_after_wave": mib(status_kib(server.pid, "VmRSS:")),
                }
        sampler.running = False
        await sampling
        report["rss_peak_mib"] = mib(max(sampler.peak, status_kib(server.pid, "VmHWM:")))
        report["gauges_after"] = await settle(host, port, server.pid)
        await asyncio.sleep(2)
        report["rss_after_mib"] = mib(status_kib(server.pid, "VmRSS:"))
    finally:
        server.terminate()
        sim.terminate()
        for p in (server, sim):
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
