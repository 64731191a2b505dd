#!/usr/bin/env python3
"""Big request bodies against a running `massgen serve` (issue 23, item 7).

Sends COUNT concurrent non-streamed Chat Completions requests whose question is SIZE bytes,
BATCHES times, to a server on loopback, while sampling the server's RSS (VmRSS and VmHWM of
/proc/PID/status) every 50 ms. Prints, per batch: the statuses (an error's with its
`error.code`, e.g. `503 server_busy`), whether every error was JSON,
the peak RSS, and how long RSS took to come back within 50 MB of the idle figure (up to
--settle seconds). Standard library only; every request has a timeout.

    massgen serve --demo --port 4011 &
    python3 benches/bodies.py --url http://127.0.0.1:4011 --pid $!
"""

import argparse
import http.client
import json
import threading
import time
import urllib.parse


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """Samples VmRSS until stopped; `peak` is the highest sample in MB."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_kib(self.pid) / 1024)
            time.sleep(0.05)


def post(url, body, timeout, results, i):
    u = urllib.parse.urlsplit(url)
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"content-type": "application/json"},
        )
        resp = conn.getresponse()
        data = resp.read()
        status = resp.status
        try:
            parsed = json.loads(data)
            is_json = True
            code = (parsed.get("error") or {}).get("code") if status != 200 else None
            if code:
                status = f"{status} {code}"
        except (ValueError, AttributeError):
            is_json = False
        results[i] = (status, is_json, resp.getheader("retry-after"))
        conn.close()
    except Exception as e:  # a reset or a timeout is a result too
        results[i] = (type(e).__name__, False, None)


def batch(args, body):
    results = [None] * args.count
    sampler = Sampler(args.pid)
    sampler.start()
    start = time.monotonic()
    threads = [
        threading.Thread(target=post, args=(args.url, body, args.timeout, results, i))
        for i in range(args.count)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.timeout + 5)
    took = time.monotonic() - start
    sampler.stop.set()
    sampler.join()
    return results, sampler.peak, took


def settle(args, idle_mb):
    """Seconds until RSS is within 50 MB of idle, or None after --settle seconds."""
    start = time.monotonic()
    while time.monotonic() - start < args.settle:
        if rss_kib(args.pid) / 1024 <= idle_mb + 50:
            return time.monotonic() - start
        time.sleep(0.25)
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--pid", type=int, required=True, help="the server's process id")
    p.add_argument("--count", type=int, default=30)
    p.add_argument("--size", type=int, default=9_500_000, help="question bytes")
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--settle", type=float, default=60)
    args = p.parse_args()
    assert 0 < args.count <= 200 and 0 < args.batches <= 5
    question = ("The quick brown fox jumps over the lazy dog. " * (args.size // 45 + 1))[
        : args.size
    ]
    body = json.dumps(
        {"model": "massgen", "messages": [{"role": "user", "content": question}]}
    ).encode()
    del question
    idle = rss_kib(args.pid) / 1024
    print(f"idle RSS {idle:.0f} MB; body {len(body) / 1e6:.1f} MB x {args.count}")
    for n in range(1, args.batches + 1):
        results, peak, took = batch(args, body)
        statuses = {}
        for status, _, _ in results:
            statuses[status] = statuses.get(status, 0) + 1
        errors_json = all(j for s, j, _ in results if s != 200)
        retry = all(r for s, _, r in results if str(s).startswith("503"))
        kept = rss_kib(args.pid) / 1024
        back = settle(args, idle)
        back_text = f"{back:.1f} s" if back is not None else f"not within {args.settle:.0f} s"
        print(
            f"batch {n}: {took:.1f} s, statuses {statuses}, errors JSON: {errors_json}, "
            f"503 with Retry-After: {retry}; peak RSS {peak:.0f} MB "
            f"(VmHWM {rss_kib(args.pid, 'VmHWM') / 1024:.0f} MB), right after {kept:.0f} MB, "
            f"back within 50 MB of idle: {back_text} ({rss_kib(args.pid) / 1024:.0f} MB)"
        )


if __name__ == "__main__":
    main()
