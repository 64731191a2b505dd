#!/usr/bin/env bash
# User-space instructions per streamed pass-through request, counted by valgrind's callgrind
# (issue 37). On a VM where identical work moves CPU time by ±15 %, instruction counts move
# by about ±3 % (the records writer's batches and the runtime's polls depend on timing), so
# a change of a few per cent can be seen here when CPU time cannot show it. The kernel's
# share (about half of the server's CPU, sockets above all) is not counted.
#
#   benches/instructions.sh BIN [REQUESTS] [RUNS]      e.g. benches/instructions.sh target/release/massgen
#
# Starts `BIN mock-upstream`, then `BIN serve` under callgrind on the pass-through panel
# (benches/panels/one-agent-pass.yaml: one agent, a plain call; records in a fresh SQLite
# file), sends 20 warm-up requests, zeroes the counters, sends REQUESTS (default 300)
# streamed Chat Completions requests on one keep-alive connection (8 words, no delays), and
# prints instructions per request: all threads, SQLite's writer thread, and the rest.
# Needs valgrind (`apt-get install valgrind`) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind callgrind_control callgrind_annotate python3; do
  command -v "$tool" >/dev/null || { echo "$0: needs $tool (apt-get install valgrind python3)" >&2; exit 1; }
done
bin=$(realpath "$1")
requests="${2:-300}"
runs="${3:-1}"
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT

wait_for_url() { # FILE: the URL a process printed after "listening on ", within 60 s
  for _ in $(seq 600); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$1")
    [[ -n "$url" ]] && { echo "$url"; return; }
    sleep 0.1
  done
  echo "no URL in $1" >&2
  exit 1
}

cat > "$work/load.py" <<'PY'
import http.client, json, sys, urllib.parse
url, n = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
body = json.dumps({"model": "massgen", "stream": True, "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "How should a team adopt Rust in an existing C++ codebase?"}]})
for _ in range(n):
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    assert r.status == 200 and b"[DONE]" in data, data[-300:]
PY

"$bin" mock-upstream --host 127.0.0.1 --port 0 > "$work/sim.out" 2> "$work/sim.log" &
pids+=($!)
sim=$(wait_for_url "$work/sim.out")
for run in $(seq "$runs"); do
  MASSGEN_BENCH_UPSTREAM="$sim/v1" \
  MASSGEN_BENCH_MODEL="sim-p:ttft_ms=0,token_ms=0,words=8" \
  MASSGEN_SERVER_RECORDS_DB="sqlite://$work/records-$run.db" \
    valgrind --tool=callgrind --callgrind-out-file="$work/run-$run.cg" \
    "$bin" serve --host 127.0.0.1 --port 0 --config benches/panels/one-agent-pass.yaml \
    > "$work/server-$run.out" 2> "$work/server-$run.log" &
  server=$!
  pids+=("$server")
  url=$(wait_for_url "$work/server-$run.out")
  python3 "$work/load.py" "$url" 20
  callgrind_control -z "$server" > /dev/null 2>&1
  python3 "$work/load.py" "$url" "$requests"
  callgrind_control -d "$server" > /dev/null 2>&1
  kill "$server"
  wait "$server" 2>/dev/null || true
  python3 - "$work/run-$run.cg.1" "$requests" "$run" <<'PY'
import re, subprocess, sys
path, n, run = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                     capture_output=True, text=True, check=True).stdout
def count(pattern):
    for line in out.splitlines():
        if pattern in line:
            return int(line.split()[0].replace(",", ""))
    return 0
total = count("PROGRAM TOTALS")
sqlite = count("sqlx_sqlite::connection::worker::ConnectionWorker::establish::{{closure}}::{{closure}}")
print(f"run {run}: {total / n:,.0f} instructions per request "
      f"(SQLite's writer thread {sqlite / n:,.0f}, the rest {(total - sqlite) / n:,.0f})")
PY
done
