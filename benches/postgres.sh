#!/usr/bin/env bash
# A throwaway PostgreSQL for the records benchmark (issue 15), from Debian's `postgresql`
# package, like the tests' (tests/it/support/postgres.rs): initdb in a temp dir, trust on
# loopback, fsync ON (a benchmark measures the real commit path; the tests turn it off),
# pinned to the driver's CPU so the server under test keeps CPU 0 to itself.
#
#   benches/postgres.sh COMMAND…    runs COMMAND with MASSGEN_SERVER_RECORDS_DB set to the
#                                   database, then stops PostgreSQL and removes its folder
# e.g. SKIP_WRK=1 SKIP_PYTHON=1 benches/postgres.sh benches/run.sh records-postgres --only coordination
set -euo pipefail
bin=${MASSGEN_POSTGRES_BIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
port=${PG_PORT:-55432}
dir=$(mktemp -d /tmp/massgen-bench-pg-XXXXXX)
as=()
if [[ $(id -u) == 0 ]]; then
  chown postgres: "$dir"
  as=(runuser -u postgres --)
fi
cleanup() {
  # The postmaster's own PID (runuser may stand between it and this shell).
  local pid
  pid=$(head -1 "$dir/data/postmaster.pid" 2>/dev/null || true)
  if [[ -n $pid ]]; then
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
"${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C \
  --no-instructions >/dev/null
driver_cpus=1
(( $(nproc --all) < 2 )) && driver_cpus=0
"${as[@]}" taskset -c "$driver_cpus" "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
  -c listen_addresses=127.0.0.1 >"$dir/postgres.log" 2>&1 &
for _ in $(seq 200); do
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
  sleep 0.1
done
"$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -c "CREATE DATABASE massgen"
export MASSGEN_SERVER_RECORDS_DB="postgres://postgres@127.0.0.1:$port/massgen"
echo "records in $MASSGEN_SERVER_RECORDS_DB (PostgreSQL $("$bin/postgres" --version | awk '{print $3}'))" >&2
"$@"
