#!/usr/bin/env python3
"""Load on `massgen serve` from OUTSIDE its process (issues 11 and 26), every session in flight.

Three processes: the simulator (`massgen mock-upstream`), the server under test (`massgen
serve`, a fresh SQLite records file in a temp dir unless MASSGEN_SERVER_RECORDS_DB is set)
and this script as the client: Python's standard library only (raw HTTP/1.1 over asyncio
streams, one connection per session), plus Debian's `wrk` for `passthrough`. Everything
after a bare `--` goes to `massgen serve`. Each run prints one JSON object.

    benches/external.py scale [--sessions 1000] [--massgen target/release/massgen] [-- serve flags]
    benches/external.py cpu [--sessions 2000 --at-once 50]
    benches/external.py fds [--sessions 10000] [--server-nofile 20000] \
        -- --max-connections 12000 --max-connections-per-address 12000
    benches/external.py passthrough [--connections 1,2,4,8,16 --step-seconds 10]
    benches/external.py soak
    benches/external.py sequential [--sessions 60] [--ttft-ms 200 --token-ms 5 --words 40]
    benches/external.py scale --wrap "heaptrack -o /tmp/ht"     # profile (apt: heaptrack)
    benches/external.py scale --h2c     # the agents' backends get `h2c: true` (HTTP/2 upstream)

Modes and their defaults (each flag overrides):
  scale  1,000 streamed 3-agent sessions opened at once; upstream 2 s to the first token,
         20 words at 50 ms (--ttft-ms 2000 --token-ms 50 --words 20): peak RSS and
         kib_per_session = (peak - idle) / sessions in flight; all_in_flight says whether
         every one had its 200 before the first ended.
  cpu    2,000 sessions, 50 at once, fast upstream (--ttft-ms 0 --token-ms 1 --words 20):
         utime+stime (/proc/PID/stat) of the server and of the simulator over the wave, ms
         per session each and their ratio; upstream calls per session from /mock/stats.
  fds    10,000 at once, the scale upstream: errors by class, 503s, refused before the
         200 vs failed after it, peak open descriptors of the server and the simulator
         (/proc/PID/fd every 200 ms). --server-nofile N sets the server's RLIMIT_NOFILE. The
         server's default --max-connections (4096, half per address) closes the rest: pass
         the flags above to measure the sessions themselves. `warnings` names this machine's
         limits that fail sessions first: ~3 simulator connections per session in flight
         need that many descriptors in the simulator and ephemeral ports (28,232 by default).
  passthrough  one agent with skip_coordination_rounds + skip_final_presentation; wrk -t1,
         non-streaming, at each --connections count for --step-seconds, first straight at the
         simulator with the body the server sends it (captured once from a throwaway server;
         --direct-body client: the client's body with the agent's model), then through the
         server: server CPU per request and added p50/p99 = through-server minus direct.
         Upstream 20 ms, 8 words at 1 ms (the in-process driver's pass-through load).
  soak   2,000 sessions at 100 concurrent, then 1,000 at once (upstream 50 ms, 10 at 2 ms).
  sequential  N sessions one after the other (upstream 50 ms, 10 at 2 ms).
scale, cpu, fds, soak and sequential all report the same fields (RSS idle/peak/per session,
CPU, descriptors, errors) and then wait --after-seconds (60) once the gauges settle and
read RSS again. --server-cpus/--sim-cpus (taskset -c) and --client-cpus (this script and
wrk) pin the processes. The client raises its RLIMIT_NOFILE to the hard limit
(--client-nofile N raises the hard one too, as root); the simulator inherits it.
"""

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

QUESTION = "Why is the sky blue?"
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
LOADS = {  # mode: (sessions, at_once (None: all), ttft_ms, token_ms, words)
    "scale": (1000, None, 2000, 50, 20),
    "cpu": (2000, 50, 0, 1, 20),
    "fds": (10000, None, 2000, 50, 20),
    "soak": (None, None, 50, 2, 10),
    "sequential": (60, 1, 50, 2, 10),
    "passthrough": (None, None, 20, 1, 8),
}
PASS_ORCHESTRATOR = "orchestrator:\n  skip_coordination_rounds: true\n  skip_final_presentation: true\n"


def start(cmd, prefix, log, nofile=None, **env):
    """Starts `cmd` (stderr to the file `log`), waits (<= 30 s) for its stdout line
    `<prefix> http://ADDR`, then keeps draining stdout so that it never blocks on a full pipe."""

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn"), **env}
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                text=True, env=env, preexec_fn=limit if nofile else None)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, line[len(prefix):].strip()
    proc.kill()
    with open(log) as f:
        sys.exit(f"{cmd} did not print {prefix!r}:\n{f.read()[-2000:]}")


def program_pid(root, binary):
    """The pid running `binary` at or under `root`: a --wrap command forks it."""
    target, todo = os.path.realpath(binary), [root]
    while todo:
        pid = todo.pop()
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == target:
                return pid
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return root


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ms(pid):
    """utime + stime so far (fields 14 and 15 of /proc/PID/stat, after the `(comm)`)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def run_ms(pid):
    """Run time of the process's live threads so far (/proc/PID/task/*/schedstat, ns): finer
    than the 10 ms ticks of `cpu_ms`, so small differences between builds show; a thread
    that exits takes its time with it (the server's are long-lived: the runtime's workers
    and the records writer)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def nofile_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return [int(v) if v.isdigit() else v for v in line.split()[3:5]]
    return None


def mib(kib):
    return round(kib / 1024, 1)


def cpus(text):
    """`0,2-3` -> {0, 2, 3}."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def error_code(raw):
    """`code` (else `type`) of the first `{"error": {...}}` in raw bytes, else ''."""
    m = re.search(rb'"error":\{.*?"code":"([^"]*)"', raw) or re.search(rb'"type":"([^"]*)"', raw)
    return m.group(1).decode(errors="replace") if m else ""


class Tally:
    """Outcomes of one wave. Each failed session counts once, under its first error's class:
    `refused` before a 200 (no connection, closed, non-200 status) or `mid-stream` after it."""

    def __init__(self):
        self.ok = self.open = self.streaming = self.peak_open = self.peak_streaming = 0
        self.classes, self.started, self.last_200 = {}, time.monotonic(), 0.0

    def fail(self, stage, kind, example):
        entry = self.classes.setdefault(f"{stage}: {kind}", {"count": 0, "example": example[:300]})
        entry["count"] += 1

    def report(self, at_once):
        refused = sum(v["count"] for k, v in self.classes.items() if k.startswith("refused"))
        failed = sum(v["count"] for v in self.classes.values())
        return {
            "completed_ok": self.ok,
            "errors": failed,
            "refused_before_start": refused,
            "failed_mid_stream": failed - refused,
            "status_503": sum(v["count"] for k, v in self.classes.items()
                              if k.startswith("refused: status 503")),
            "error_classes": dict(sorted(self.classes.items(), key=lambda kv: -kv[1]["count"])),
            "peak_open": self.peak_open,
            "peak_streaming": self.peak_streaming,
            "all_in_flight": self.peak_streaming == at_once,
            "last_200_after_s": round(self.last_200, 2),
        }


STOP, DONE, ERROR = b'"finish_reason":"stop"', b"data: [DONE]", b'data: {"error"'


async def session(host, port, wire, tally, timeout):
    """One streamed chat session, outcome into `tally`. The body is scanned as it comes (the
    markers sit inside one SSE event, never across a chunk header), never kept whole."""
    stage, got_200 = "refused", False
    tally.open += 1
    tally.peak_open = max(tally.peak_open, tally.open)
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(wire)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status != 200:
                rest = await reader.read(4096)
                kind = f"status {status} {error_code(rest)}".strip()
                return tally.fail(stage, kind, rest.decode(errors="replace"))
            stage, got_200 = "mid-stream", True
            tally.streaming += 1
            tally.peak_streaming = max(tally.peak_streaming, tally.streaming)
            tally.last_200 = time.monotonic() - tally.started
            stop = done = False
            carry, error = b"", None
            while chunk := await reader.read(65536):
                window = carry + chunk
                if error is not None:
                    error += chunk
                elif (i := window.find(ERROR)) >= 0:
                    error = window[i:]
                stop = stop or STOP in window
                done = done or DONE in window
                carry = window[-48:]
            if error is not None:
                kind = f"error event {error_code(error[:2000])}"
                return tally.fail(stage, kind, error[:300].decode(errors="replace"))
            if not done:
                return tally.fail(stage, "closed without [DONE]", carry.decode(errors="replace"))
            if not stop:
                return tally.fail(stage, "[DONE] without stop", carry.decode(errors="replace"))
            tally.ok += 1
    except TimeoutError:
        tally.fail(stage, "timeout", f"no end within {timeout} s")
    except asyncio.IncompleteReadError as e:
        tally.fail(stage, "closed before status", repr(e.partial[:200]))
    except (OSError, ValueError, IndexError) as e:
        tally.fail(stage, f"{type(e).__name__} {getattr(e, 'errno', '') or ''}".strip(), str(e))
    finally:
        tally.open -= 1
        tally.streaming -= got_200
        if writer is not None:
            writer.close()


async def wave(host, port, n, at_once, timeout):
    """`n` sessions, at most `at_once` at a time: (seconds, tally)."""
    body = json.dumps({"model": "massgen", "stream": True,
                       "messages": [{"role": "user", "content": QUESTION}]}).encode()
    wire = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
    gate, tally = asyncio.Semaphore(at_once), Tally()

    async def one():
        async with gate:
            await session(host, port, wire, tally, timeout)

    await asyncio.gather(*(one() for _ in range(n)))
    return time.monotonic() - tally.started, tally


class Sampler(threading.Thread):
    """Server VmRSS every 20 ms and the descriptors of both processes every 200 ms, on a
    thread so that a saturated event loop (10,000 sessions) does not skip samples."""

    def __init__(self, server, sim):
        super().__init__(daemon=True)
        self.server, self.sim, self.stop = server, sim, threading.Event()
        self.rss = self.fds = self.sim_fds = 0

    def run(self):
        i = 0
        while not self.stop.is_set():
            self.rss = max(self.rss, status_kib(self.server, "VmRSS:"))
            if i % 10 == 0:
                self.fds = max(self.fds, fd_count(self.server))
                self.sim_fds = max(self.sim_fds, fd_count(self.sim))
            i += 1
            self.stop.wait(0.02)


def gauges(url):
    text = http_get(f"{url}/metrics").decode()
    found = {}
    for name in ("massgen_active_sessions", "massgen_open_connections"):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        found[name] = float(m.group(1)) if m else None
    return found


async def settle(url, within=30.0):
    """Waits (bounded) for the gauges to reach 0 once the load is gone; returns them."""
    deadline = time.monotonic() + within
    while True:
        g = gauges(url)
        # The /metrics request itself holds one connection.
        busy = (g["massgen_active_sessions"] or 0) > 0 or (g["massgen_open_connections"] or 0) > 1
        if not busy or time.monotonic() > deadline:
            return g
        await asyncio.sleep(0.2)


async def load(args, ctx, report):
    """scale / cpu / fds / soak / sequential: one or two waves with every measurement."""
    host, port, server, sim = ctx["host"], ctx["port"], ctx["server"], ctx["sim"]
    _, warm = await wave(host, port, 1, 1, args.session_timeout)
    if warm.ok != 1:
        sys.exit(f"warm-up session failed: {warm.classes}")
    await asyncio.sleep(0.5)
    idle = status_kib(server, "VmRSS:")
    report.update(rss_idle_mib=mib(idle), fds_idle=fd_count(server), server_nofile=nofile_limit(server))
    sampler = Sampler(server, sim)
    sampler.start()
    calls0 = mock_requests(ctx["sim_url"])
    cpu0 = (cpu_ms(server), cpu_ms(sim), cpu_ms(os.getpid()))
    run0 = (run_ms(server), run_ms(sim))
    if args.mode == "soak":
        waves = [("sustained", 2000, 100), ("burst", 1000, 1000)]
    else:
        waves = [(None, args.sessions, args.at_once or args.sessions)]
    total = widest = 0
    for name, n, at_once in waves:
        secs, tally = await wave(host, port, n, at_once, args.session_timeout)
        part = {"sessions": n, "at_once": at_once, "seconds": round(secs, 2), **tally.report(min(n, at_once))}
        total, widest = total + n, max(widest, min(n, at_once))
        if name:
            report[name] = {**part, "rss_mib_after_wave": mib(status_kib(server, "VmRSS:"))}
        else:
            report.update(part)
    cpu1 = (cpu_ms(server), cpu_ms(sim), cpu_ms(os.getpid()))
    run1 = (run_ms(server), run_ms(sim))
    calls = mock_requests(ctx["sim_url"]) - calls0
    sampler.stop.set()
    sampler.join()
    peak = max(sampler.rss, status_kib(server, "VmHWM:"))
    server_ms, sim_ms = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    report.update(
        rss_peak_mib=mib(peak),
        kib_per_session=round((peak - idle) / widest, 1),  # per session in flight
        fds_peak=sampler.fds,
        simulator_fds_peak=sampler.sim_fds,
        cpu={
            "server_ms_per_session": round(server_ms / total, 3),
            "simulator_ms_per_session": round(sim_ms / total, 3),
            "server_over_simulator": round(server_ms / sim_ms, 3) if sim_ms else None,
            # The same from the threads' run time (schedstat, ns).
            "server_run_ms_per_session": round((run1[0] - run0[0]) / total, 4),
            "simulator_run_ms_per_session": round((run1[1] - run0[1]) / total, 4),
            "server_over_simulator_run": round((run1[0] - run0[0]) / (run1[1] - run0[1]), 3)
            if run1[1] > run0[1] else None,
            # This script: near a whole core means the client, not the server, set the pace.
            "client_ms_per_session": round((cpu1[2] - cpu0[2]) / total, 3),
            "upstream_calls_per_session": round(calls / total, 3),
            "clock_tick_ms": TICK_MS,
        },
    )
    report["gauges_after"] = await settle(ctx["url"])
    report["rss_after_settle_mib"] = mib(status_kib(server, "VmRSS:"))
    await asyncio.sleep(args.after_seconds)
    report["after_seconds"] = args.after_seconds
    report["rss_after_wait_mib"] = mib(status_kib(server, "VmRSS:"))


WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[BODY]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"errors":%d,"p50":%d,"p99":%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk(binary, script, url, connections, seconds):
    out = subprocess.run([binary, "-t1", "--timeout", "10s", f"-c{connections}", f"-d{seconds}s",
                          "-s", script, url], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[8:])
    sys.exit(f"wrk printed no result: {out.stdout} {out.stderr}")


def write_config(path, base_url, names, upstream, passthrough, h2c=False, coordinate_one=False):
    with open(path, "w") as f:
        f.write("agents:\n")
        for i, name in enumerate(names):
            f.write(f"  - id: sim{i + 1}\n    backend:\n      type: chatcompletion\n"
                    f"      base_url: {base_url}\n      model: \"{name}:{upstream}\"\n")
            if h2c:
                f.write("      h2c: true\n")
        if passthrough:
            f.write(PASS_ORCHESTRATOR)
        elif coordinate_one:
            # One agent still runs the protocol (answer, vote, presentation): the same path
            # as N agents, so a fit over N measures the session's fixed part.
            f.write("orchestrator:\n  single_agent_coordination: true\n")
    return path


def upstream_body(args, model, body, work):
    """The body `massgen serve` sends upstream for `body` (streamed, with the new_answer
    tool): a throwaway server whose one agent points at a one-shot listener here."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    name, _, upstream = model.partition(":")
    config = write_config(os.path.join(work, "capture.yaml"), base, [name], upstream, True)
    proc, url = start([args.massgen, "serve", "--host", "127.0.0.1", "--port", "0", "--config", config],
                      "massgen listening on", os.path.join(work, "capture.log"),
                      MASSGEN_SERVER_RECORDS_DB="memory")
    ask = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})

    def send():
        try:
            urllib.request.urlopen(ask, timeout=30).read()
        except OSError:
            pass  # the listener hangs up: the server answers 502, unread

    threading.Thread(target=send, daemon=True).start()
    try:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536) or sys.exit("capture: the server hung up")
            head, _, got = data.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))
            while len(got) < length:
                got += conn.recv(65536) or sys.exit("capture: the server hung up")
    finally:
        listener.close()
        proc.terminate()
        proc.wait(timeout=40)
    return got[:length].decode()


def mock_requests(sim_url):
    return json.loads(http_get(f"{sim_url}/mock/stats")).get("requests", 0)


def passthrough(args, ctx, report, work):
    """wrk straight at the simulator, then through the server, at each connection count."""
    binary = shutil.which(args.wrk) or sys.exit(f"no {args.wrk}: apt-get install wrk")
    base = {"model": "massgen", "stream": False, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "ping"}]}
    direct_body = json.dumps({**base, "model": ctx["model"]})
    if args.direct_body == "upstream":
        direct_body = upstream_body(args, ctx["model"], base, work)
    urls, scripts = {}, {}
    targets = (("direct", direct_body, ctx["sim_url"]), ("server", json.dumps(base), ctx["url"]))
    for target, body, addr in targets:
        scripts[target] = os.path.join(work, f"{target}.lua")
        with open(scripts[target], "w") as f:
            f.write(WRK_LUA.replace("BODY", body))
        urls[target] = f"{addr}/v1/chat/completions"
        wrk(binary, scripts[target], urls[target], 8, 1)  # warm both connection pools
    steps = []
    for c in args.connections:
        direct = wrk(binary, scripts["direct"], urls["direct"], c, args.step_seconds)
        cpu0, calls0 = (cpu_ms(ctx["server"]), cpu_ms(ctx["sim"])), mock_requests(ctx["sim_url"])
        through = wrk(binary, scripts["server"], urls["server"], c, args.step_seconds)
        cpu1, calls1 = (cpu_ms(ctx["server"]), cpu_ms(ctx["sim"])), mock_requests(ctx["sim_url"])
        per = max(through["requests"], 1)
        steps.append({
            "connections": c,
            "requests": through["requests"],
            "rate_rps": round(through["requests"] / (through["duration_us"] / 1e6), 1),
            "errors": through["errors"],
            "direct_requests": direct["requests"],
            "direct_errors": direct["errors"],
            "p50_ms": through["p50"] / 1e3, "p99_ms": through["p99"] / 1e3,
            "direct_p50_ms": direct["p50"] / 1e3, "direct_p99_ms": direct["p99"] / 1e3,
            "added_p50_ms": round((through["p50"] - direct["p50"]) / 1e3, 3),
            "added_p99_ms": round((through["p99"] - direct["p99"]) / 1e3, 3),
            "server_cpu_us_per_request": round((cpu1[0] - cpu0[0]) * 1e3 / per, 1),
            "simulator_cpu_us_per_request": round((cpu1[1] - cpu0[1]) * 1e3 / per, 1),
            "upstream_calls_per_request": round((calls1 - calls0) / per, 3),
        })
    report.update(generator="wrk -t1, closed loop", direct_body=direct_body, step_seconds=args.step_seconds,
                  steps=steps, clock_tick_ms=TICK_MS)


def warnings(args, nofile):
    """Limits of this machine that would fail sessions before the server does: every session
    in flight holds ~3 simulator connections (descriptors there, ephemeral ports here)."""
    if args.mode == "passthrough":
        return []
    upstream = 3 * max(args.at_once or args.sessions or 0, 1000 if args.mode == "soak" else 0)
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = map(int, f.read().split())
    out = []
    if hi - lo + 1 < upstream:
        out.append(f"~{upstream} server->simulator connections but {hi - lo + 1} ephemeral ports: "
                   "widen net.ipv4.ip_local_port_range")
    if nofile < upstream + 100:
        out.append(f"the simulator inherits RLIMIT_NOFILE {nofile} for ~{upstream} connections: "
                   "--client-nofile N (needs CAP_SYS_RESOURCE)")
    return out


def parse():
    argv = sys.argv[1:]
    serve_flags = []
    if "--" in argv:  # argparse would take serve flags such as --max-sessions as its own
        i = argv.index("--")
        argv, serve_flags = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="everything after a bare -- goes to `massgen serve`")
    p.add_argument("mode", choices=list(LOADS))
    p.add_argument("--sessions", type=int)
    p.add_argument("--at-once", type=int, help="sessions in flight at once (default: per mode)")
    p.add_argument("--agents", type=int, default=3, help="agents in the panel (not passthrough)")
    p.add_argument("--plain", action="store_true",
                   help="with --agents 1: the plain call (default: one agent still coordinates)")
    p.add_argument("--massgen", default="target/release/massgen")
    p.add_argument("--ttft-ms", type=int)
    p.add_argument("--token-ms", type=int)
    p.add_argument("--words", type=int)
    p.add_argument("--after-seconds", type=float, default=60, help="RSS read again this long after the load")
    p.add_argument("--session-timeout", type=float, default=600)
    p.add_argument("--server-nofile", type=int, help="the server's RLIMIT_NOFILE (soft and hard)")
    p.add_argument("--client-nofile", type=int, help="raise this script's hard RLIMIT_NOFILE to N (root)")
    p.add_argument("--server-cpus", help="taskset -c list for the server")
    p.add_argument("--sim-cpus", help="taskset -c list for the simulator")
    p.add_argument("--client-cpus", help="CPU list for this script and wrk")
    p.add_argument("--connections", default="1,2,4,8,16", help="passthrough: wrk connection counts")
    p.add_argument("--step-seconds", type=int, default=10, help="passthrough: seconds per wrk run")
    p.add_argument("--wrk", default="wrk")
    p.add_argument("--keep-logs", help="write the servers' logs (and the records file) here, kept")
    p.add_argument("--h2c", action="store_true",
                   help="the agents' backends speak HTTP/2 with prior knowledge to the simulator")
    p.add_argument("--direct-body", choices=["upstream", "client"], default="upstream",
                   help="passthrough baseline: the body the server sends upstream, or the client's")
    p.add_argument("--wrap", default="", help="run the server under this command ('heaptrack -o /tmp/ht')")
    args = p.parse_args(argv)
    args.serve_flags = serve_flags
    sessions, at_once, ttft, token, words = LOADS[args.mode]
    args.sessions = args.sessions or sessions
    args.at_once = args.at_once or at_once
    args.ttft_ms = ttft if args.ttft_ms is None else args.ttft_ms
    args.token_ms = token if args.token_ms is None else args.token_ms
    args.words = words if args.words is None else args.words
    args.connections = [int(c) for c in args.connections.split(",")]
    return args


async def run(args, work, procs, nofile):
    def pin(cpus):
        return ["taskset", "-c", cpus] if cpus else []

    sim_proc, sim_url = start([*pin(args.sim_cpus), args.massgen, "mock-upstream", "--host", "127.0.0.1",
                               "--port", "0"], "mock-upstream listening on",
                              os.path.join(work, "simulator.log"))
    procs.append(sim_proc)
    upstream = f"ttft_ms={args.ttft_ms},token_ms={args.token_ms},words={args.words}"
    names = ["sim-p"] if args.mode == "passthrough" else [f"agent{i + 1}" for i in range(args.agents)]
    config = write_config(os.path.join(work, "team.yaml"), f"{sim_url}/v1", names, upstream,
                          args.mode == "passthrough", args.h2c, coordinate_one=not args.plain)
    os.environ.setdefault("MASSGEN_SERVER_RECORDS_DB", f"sqlite://{work}/records.db")
    server_proc, url = start(
        [*pin(args.server_cpus), *args.wrap.split(), args.massgen, "serve", "--host", "127.0.0.1",
         "--port", "0", "--config", config, *args.serve_flags],
        "massgen listening on", os.path.join(work, "server.log"), nofile=args.server_nofile)
    procs.insert(0, server_proc)
    if args.client_cpus:  # after the children started: they must not inherit it
        os.sched_setaffinity(0, cpus(args.client_cpus))
    host, port = url.removeprefix("http://").rsplit(":", 1)
    ctx = {"host": host, "port": int(port), "url": url, "sim_url": sim_url, "model": f"{names[0]}:{upstream}",
           "server": program_pid(server_proc.pid, args.massgen),
           "sim": program_pid(sim_proc.pid, args.massgen)}
    report = {"mode": args.mode, "upstream": upstream, "serve_flags": args.serve_flags, "h2c": args.h2c,
              "warnings": warnings(args, nofile), "client_nofile": nofile,
              "pinned": {"server": args.server_cpus, "simulator": args.sim_cpus, "client": args.client_cpus}}
    if args.mode == "passthrough":
        await asyncio.to_thread(passthrough, args, ctx, report, work)
    else:
        await load(args, ctx, report)
    return report


async def main():
    args = parse()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = max(hard, args.client_nofile or 0)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        sys.exit(f"cannot set RLIMIT_NOFILE to {hard} ({e}): raising the hard limit needs CAP_SYS_RESOURCE")
    work, procs = tempfile.TemporaryDirectory(), []
    logs = args.keep_logs or work.name
    os.makedirs(logs, exist_ok=True)
    try:
        report = await run(args, logs, procs, hard)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
        work.cleanup()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
