#!/usr/bin/env bash
# The main job: set up (cached), bring up a local Oxia + MinIO, write records
# and read them back. `./quick_run.sh --help` lists the options.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
exec "$LLOG_PY" -m loadtest.quick_run "$@"
