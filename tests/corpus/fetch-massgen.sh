#!/usr/bin/env bash
# The MassGen compatibility corpus: MassGen 0.1.97's wheel from PyPI (pinned by version and
# sha256), with its example configs (massgen/configs/**.yaml) and its lists of backend keys
# never sent upstream (massgen/backend/_excluded_params.py, massgen/api_params_handler/)
# unpacked under DIR (default target/massgen-corpus). Prints the configs folder. Then:
#   MASSGEN_CORPUS_DIR=$(bash tests/corpus/fetch-massgen.sh) \
#     cargo test --test it massgen_corpus -- --nocapture
# loads every config, prints the tally and records what each loading config sends upstream
# (.ci/run does this on every run).
set -euo pipefail
dir=${1:-target/massgen-corpus}
version=0.1.97
sha256=094cefe209d010aa855309b098650377ad663b20f506fb808cb76d2f719fd397
wheel="$dir/massgen-$version-py3-none-any.whl"
mkdir -p "$dir"
if ! echo "$sha256  $wheel" | sha256sum --check --status 2>/dev/null; then
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: "massgen==$version" -d "$dir" >&2
    echo "$sha256  $wheel" | sha256sum --check --quiet -
fi
python3 - "$wheel" "$dir" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith(("massgen/configs/", "massgen/api_params_handler/")) or name == "massgen/backend/_excluded_params.py":
            wheel.extract(name, sys.argv[2])
PY
echo "$dir/massgen/configs"
