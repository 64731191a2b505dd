#!/usr/bin/env bash
# Records engines side by side (issue 15): the coordination benchmark (1) and (2) of
# benches/README.md with `--records-db memory`, the default SQLite file and a PostgreSQL
# database, interleaved round by round in one sitting so machine noise hits all three alike,
# then the 1,000-session scale run (4) on each. Writes
# benches/results/records-interleaved.md.
#
#   benches/records.sh [ROUNDS] [SESSIONS] [SCALE]   defaults: 3 rounds of 60, scale 1,000
#
# PostgreSQL: a throwaway server per run from benches/postgres.sh (fsync on, pinned with the
# driver).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
sessions="${2:-60}"
scale="${3:-1000}"
work=$(mktemp -d /tmp/massgen-bench-records.XXXXXX)
trap 'rm -rf "$work"' EXIT
results="$work/results"
mkdir -p "$results"
export SKIP_WRK=1 SKIP_PYTHON=1

# run NAME ENGINE DRIVER-FLAGS…: one benches/run.sh run with its records in ENGINE.
run() {
  local name=$1 engine=$2
  shift 2
  case "$engine" in
    memory) MASSGEN_SERVER_RECORDS_DB=memory benches/run.sh "$name" "$@" ;;
    sqlite) MASSGEN_SERVER_RECORDS_DB="sqlite://$work/$name.db" benches/run.sh "$name" "$@" ;;
    postgres) benches/postgres.sh benches/run.sh "$name" "$@" ;;
  esac
}

for round in $(seq 1 "$rounds"); do
  for db in memory sqlite postgres; do
    echo "== round $round: $db"
    run "records-$db-$round" "$db" --only coordination --sessions "$sessions" \
      --efficiency-sessions 0 --results "$results" >/dev/null
  done
done

for db in memory sqlite postgres; do
  echo "== scale: $scale sessions at once, $db"
  run "records-scale-$db" "$db" --only scale --scale-sessions "$scale" --efficiency-sessions 0 \
    --results "$results" >/dev/null
done

python3 - "$results" "$rounds" "$sessions" "$(git rev-parse --short HEAD)" "$scale" <<'EOF' | tee benches/results/records-interleaved.md
import json, pathlib, statistics, sys

results, rounds, sessions, commit, scale = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = {}
for db in ("memory", "sqlite", "postgres"):
    runs = [json.loads((results / f"records-{db}-{r}.json").read_text())["coordination"]
            for r in range(1, rounds + 1)]
    pick = lambda key, q: statistics.median(run[key][q] for run in runs)
    rows[db] = {
        "failures": sum(run["failures"] for run in runs),
        "ratio_p50": pick("ratio", "p50"), "ratio_p99": pick("ratio", "p99"),
        "overhead_p50": pick("overhead_ms", "p50"),
        "ttfb_p50": pick("ttfb_ms", "p50"), "ttfb_p99": pick("ttfb_ms", "p99"),
        "rss": statistics.median(run["server_rss_mib_after"] for run in runs),
    }
base = rows["memory"]
print(f"# Records engines side by side (`benches/records.sh {rounds} {sessions} {scale}`, commit {commit})\n")
print(f"{rounds} interleaved rounds of {sessions} streamed 3-agent sessions each, one at a time;")
print("each cell is the median over the rounds of that round's percentile.\n")
print("| records | failures | ratio p50 | ratio p99 | overhead p50 ms | TTFB p50 ms | TTFB p99 ms | RSS after MiB | ratio p50 / memory | TTFB p50 / memory |")
print("|---|---|---|---|---|---|---|---|---|---|")
for db, r in rows.items():
    print(f"| {db} | {r['failures']} | {r['ratio_p50']:.4f} | {r['ratio_p99']:.4f} | "
          f"{r['overhead_p50']:.2f} | {r['ttfb_p50']:.3f} | {r['ttfb_p99']:.3f} | {r['rss']:.1f} | "
          f"{r['ratio_p50'] / base['ratio_p50']:.4f} | {r['ttfb_p50'] / base['ttfb_p50']:.3f} |")
print(f"\n{scale} streamed 3-agent sessions started at once (50 ms tokens), one run each:\n")
print("| records | completed | errors | peak RSS MiB | idle RSS MiB | all done s | TTFB p50 ms | wall p50 ms |")
print("|---|---|---|---|---|---|---|---|")
for db in ("memory", "sqlite", "postgres"):
    s = json.loads((results / f"records-scale-{db}.json").read_text())["scale"]
    print(f"| {db} | {s['completed_ok']} | {s['failures']} | {s['peak_rss_mib']:.1f} | {s['idle_rss_mib']:.1f} | "
          f"{s['all_done_s']:.1f} | {s['ttfb_ms']['p50']:.0f} | {s['wall_ms']['p50']:.0f} |")
EOF
