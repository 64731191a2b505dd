#!/usr/bin/env bash
# Where the server's CPU goes in the floor's pass-through step, next to nginx's (issue 37):
# the share of sampled CPU time in user space and in each system call (perf, cpu-clock, with
# the kernel's call chains), and system calls per request (perf's syscall tracepoints).
# callgrind (benches/instructions.sh) counts only user space; this says how the kernel's
# half divides, and whether a system call is made more often than nginx makes it.
#
#   benches/cpu_split.sh BIN [CONNECTIONS]      e.g. benches/cpu_split.sh target/release/massgen 16
#
# Runs the floor (`bench_driver --only floor`, one round, 10 s a step, server and nginx on
# CPU 0, the driver on CPU 1 at real-time priority) with perf attached to the server and
# to nginx for their whole lives; requests per process = its step's plus the driver's
# warm-up ones. Needs perf (`apt-get install linux-perf`), root or perf_event_paranoid <= 1,
# nginx, and the driver (`cargo build --release --example bench_driver`).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in perf python3 taskset chrt; do
  command -v "$tool" >/dev/null || { echo "$0: needs $tool" >&2; exit 1; }
done
bin=$(realpath "$1")
connections="${2:-16}"
nginx=$(PATH="$PATH:/usr/sbin:/sbin" command -v nginx) || { echo "$0: needs nginx" >&2; exit 1; }
driver="${CARGO_TARGET_DIR:-target}/release/examples/bench_driver"
[[ -x "$driver" ]] || { echo "$0: build the driver first: cargo build --release --example bench_driver" >&2; exit 1; }
work=$(mktemp -d)
watcher=
trap '[[ -n "$watcher" ]] && kill "$watcher" 2>/dev/null; pkill -INT -f "perf (record|stat) .* -o $work/" 2>/dev/null || true' EXIT

calls=writev,write,recvfrom,sendto,read,epoll_wait,futex,pwrite64,pread64
events=$(echo "$calls" | sed 's/\([a-z0-9_]*\)/syscalls:sys_enter_\1/g')
# Every server and nginx process the driver starts, from its first moments to its exit.
(
  seen=" "
  while true; do
    for pid in $(pgrep -f "^$bin serve") $(pgrep -x nginx); do
      [[ "$seen" == *" $pid "* ]] && continue
      seen+="$pid "
      name=$([[ "$(cat /proc/"$pid"/comm 2>/dev/null)" == nginx ]] && echo nginx || echo server)
      perf record -q -F 4000 -e cpu-clock -g -p "$pid" -o "$work/$name.$pid.data" >/dev/null 2>&1 &
      perf stat -e "$events" -x, -p "$pid" -o "$work/$name.$pid.stat" >/dev/null 2>&1 &
    done
    sleep 0.05
  done
) &
watcher=$!
chrt -f 10 taskset -c 1 "$driver" --massgen "$bin" --server-cpus 0 --name "cpu-split" \
  --build "cpu_split.sh" --command "benches/cpu_split.sh" --nginx "$nginx" --only floor \
  --floor-connections "$connections" --floor-seconds 10 --floor-rounds 1 --results "$work" > "$work/driver.out" 2>&1 \
  || { cat "$work/driver.out" >&2; exit 1; }
kill "$watcher"; watcher=
pkill -INT -f "perf (record|stat) .* -o $work/" 2>/dev/null || true
sleep 2
for data in "$work"/*.data; do
  perf script -i "$data" -F ip,sym > "${data%.data}.script" 2>/dev/null || true
done
python3 - "$work" "$connections" <<'PY'
import collections, glob, json, os, sys
work, connections = sys.argv[1], int(sys.argv[2])
report = json.load(open(glob.glob(os.path.join(work, "*.json"))[0]))
steps = {s["target"]: s for s in report["floor"]["steps"] if s["connections"] == connections}
for path in sorted(glob.glob(os.path.join(work, "*.script"))):
    name = os.path.basename(path).split(".")[0]
    step = steps[name]
    requests = step["requests"] + 3 * connections
    shares, n = collections.Counter(), 0
    for sample in open(path).read().split("\n\n"):
        frames = [l.split(None, 1)[1] if " " in l.strip() else "" for l in sample.strip().splitlines()]
        if not frames:
            continue
        n += 1
        entry = [i for i, f in enumerate(frames) if f.startswith("do_syscall_64")]
        if entry:
            i = entry[0]
            call = frames[i - 1] if i > 0 else "?"
            for prefix in ("__x64_sys_", "__do_sys_", "ksys_", "do_"):
                call = call.removeprefix(prefix)
            shares["syscall " + call] += 1
        elif frames[0].startswith(("_raw_", "finish_task_switch", "asm_", "irq", "handle_")):
            shares["kernel, other"] += 1
        else:
            shares["user space"] += 1
    if n == 0:
        continue
    counts = {}
    stat = path.replace(".script", ".stat")
    for line in open(stat) if os.path.exists(stat) else []:
        parts = line.strip().split(",")
        if len(parts) > 2 and parts[2].startswith("syscalls:sys_enter_") and parts[0].isdigit():
            counts[parts[2].removeprefix("syscalls:sys_enter_")] = int(parts[0]) / requests
    cpu = step.get("cpu_us_per_request") or 0
    print(f"{name}: {cpu:.0f} µs CPU a request in the step, {n} samples over its life")
    for what, k in shares.most_common(8):
        print(f"  {k / n * 100:5.1f} %  {what}")
    print("  system calls a request: " + ", ".join(f"{c} {v:.1f}" for c, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v >= 0.05))
PY
