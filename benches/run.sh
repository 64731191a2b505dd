#!/usr/bin/env bash
# One command for the whole benchmark (issue 6): builds the release server and the driver,
# installs wrk (apt) and Python MassGen (a throwaway venv, pip), then runs every measurement
# and writes benches/results/<name>.md and .json.
#
#   benches/run.sh [NAME] [extra driver flags…]      e.g. benches/run.sh baseline
#
# The server under test (and Python MassGen, and nginx) runs pinned to CPU 0; the driver,
# the simulator and wrk run pinned to CPU 1. Set SKIP_PYTHON=1, SKIP_WRK=1 or SKIP_NGINX=1
# to leave those out.
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-latest}"
shift || true

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin massgen --example bench_driver

flags=()
if [[ "${SKIP_WRK:-0}" != 1 ]]; then
  if ! command -v wrk >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq wrk) >/dev/null 2>&1 \
      || sudo sh -c 'apt-get update -qq && apt-get install -y -qq wrk' >/dev/null
  fi
  flags+=(--wrk "$(command -v wrk)")
fi
# (7) pass-through at the floor: nginx as the reverse proxy the server is compared with.
if [[ "${SKIP_NGINX:-0}" != 1 ]]; then
  nginx=$(PATH="$PATH:/usr/sbin:/sbin" command -v nginx || true)
  if [[ -z "$nginx" ]]; then
    (apt-get update -qq && apt-get install -y -qq nginx-light) >/dev/null 2>&1 \
      || sudo sh -c 'apt-get update -qq && apt-get install -y -qq nginx-light' >/dev/null
    nginx=$(PATH="$PATH:/usr/sbin:/sbin" command -v nginx)
  fi
  flags+=(--nginx "$nginx")
fi
if [[ "${SKIP_PYTHON:-0}" != 1 ]]; then
  venv="${MASSGEN_REF_VENV:-/tmp/massgen-ref-venv}"
  # The version issue 10 compares with; (6) reports the version its `massgen serve` runs.
  if [[ ! -x "$venv/bin/python" ]] \
    || ! "$venv/bin/python" -c 'import sys, massgen; sys.exit(massgen.__version__ != "0.1.97")' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check massgen==0.1.97
  fi
  flags+=(--python "$venv/bin/python")
fi

# (6) efficiency: a massgen binary from before issue 10 to compare with, side by side.
if [[ -n "${MASSGEN_BASELINE:-}" ]]; then
  flags+=(--baseline "$MASSGEN_BASELINE")
fi

cpus=$(nproc --all)
server_cpus=0
driver_cpus=1
if (( cpus < 2 )); then driver_cpus=0; fi
# 1,000 sessions need ~4 descriptors each across client, server and simulator.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

profile=$(sed -n "/^\[profile.release\]/,/^\[/p" Cargo.toml | grep -v "^\[" | grep . | tr "\n" " " | sed "s/ *$//" || true)
build="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml || echo +dirty), release profile: ${profile:-cargo defaults}"
# Other work on the machine (builds) would preempt the measured processes and show up as
# 10-15 ms p99 stalls: run the whole tree (driver, simulator, wrk, server, Python) at high
# priority when allowed. BENCH_PRIORITY=normal turns this off.
prio=()
case "${BENCH_PRIORITY:-rt}" in
  rt) if chrt -f 10 true 2>/dev/null; then prio=(chrt -f 10);
      elif nice -n -15 true 2>/dev/null; then prio=(nice -n -15); fi ;;
  nice) if nice -n -15 true 2>/dev/null; then prio=(nice -n -15); fi ;;
esac
build="$build, priority: ${prio[*]:-normal}"
"${prio[@]}" taskset -c "$driver_cpus" "$CARGO_TARGET_DIR/release/examples/bench_driver" \
  --massgen "$CARGO_TARGET_DIR/release/massgen" \
  --server-cpus "$server_cpus" \
  --name "$name" \
  --build "$build" \
  --command "benches/run.sh $name${*:+ $*}" \
  "${flags[@]}" "$@"
