#!/usr/bin/env python3
"""Hostile structured-output schemas against a running `massgen serve` (issue 23, item 2).

Sends COUNT concurrent non-streamed Chat Completions requests whose `response_format` is a
JSON Schema with BRANCHES `anyOf` branches of `^(a|aa)+\\1c{0,N}$` (a backreference; with
`--linear`, `^(a|aa)+c{0,N}$`), beside a `$ref` to a 31-character `const` the simulator
answers with, so the check runs every branch's pattern on it (`--costly`:
`.{1,200}[a-z]{1,100}Q{0,N}` on a 25,000-character `const`). Meanwhile it polls `/health`
every 50 ms. Prints each request's status and time and the slowest `/health`. Standard
library only; every request has a timeout.

    massgen serve --demo --port 4012 &
    python3 benches/schemas.py --url http://127.0.0.1:4012
"""

import argparse
import http.client
import json
import threading
import time
import urllib.parse


def schema(branches, linear, costly=False):
    back = "" if linear else "\\1"
    pattern, answer = "^(a|aa)+" + back + "c{{0,{n}}}$", "a" * 30 + "b"
    if costly:  # within the caps, but every pattern scans a 25,000-character answer
        pattern, answer = ".{{1,200}}[a-z]{{1,100}}Q{{0,{n}}}", "\u00e9" * 25_000
    return {
        "type": "object",
        "properties": {
            "a": {
                "$ref": "#/$defs/answer",
                "anyOf": [
                    {"type": "string", "pattern": pattern.format(n=n)}
                    for n in range(branches)
                ],
            }
        },
        "required": ["a"],
        "$defs": {"answer": {"type": "string", "const": answer}},
    }


def post(url, body, timeout):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = json.dumps(body).encode()
    conn.request("POST", "/v1/chat/completions", data, {"content-type": "application/json"})
    r = conn.getresponse()
    text = r.read()
    conn.close()
    return r.status, text


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--count", type=int, default=2)
    p.add_argument("--branches", type=int, default=300)
    p.add_argument("--linear", action="store_true")
    p.add_argument("--costly", action="store_true", help="linear patterns on a long answer")
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()
    body = {
        "model": "massgen",
        "messages": [{"role": "user", "content": "Which string?"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": schema(a.branches, a.linear, a.costly)},
        },
    }
    size = len(json.dumps(body["response_format"], ensure_ascii=False).encode())
    print(f"schema: {size} bytes")
    results = [None] * a.count
    started = time.monotonic()

    def one(i):
        t = time.monotonic()
        try:
            status, text = post(a.url, body, a.timeout)
            code = json.loads(text).get("error", {}).get("code", "") if status != 200 else ""
        except Exception as e:  # a timeout or a reset connection is a result too
            status, code = "error", str(e)
        results[i] = (status, code, time.monotonic() - t)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(a.count)]
    for t in threads:
        t.start()
    slowest, polls, unanswered = 0.0, 0, 0
    u = urllib.parse.urlparse(a.url)
    while any(t.is_alive() for t in threads):
        left = a.timeout - (time.monotonic() - started)
        if left <= 0:
            break
        t = time.monotonic()
        try:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=left)
            conn.request("GET", "/health")
            conn.getresponse().read()
            conn.close()
        except Exception:  # no answer within the time left
            unanswered += 1
        slowest, polls = max(slowest, time.monotonic() - t), polls + 1
        time.sleep(0.05)
    for t in threads:
        t.join(1)
    for i, r in enumerate(results):
        print(f"request {i}: {r if r else 'no answer within --timeout'}")
    print(f"/health: {polls} polls ({unanswered} unanswered), slowest {slowest * 1000:.1f} ms")
    print(f"ended after {time.monotonic() - started:.2f} s")


if __name__ == "__main__":
    main()
