#!/usr/bin/env bash
# Run the test suite in the cached virtualenv. Extra arguments go to pytest;
# when they name test paths only those run, e.g.
#   ./run_tests.sh tests/integration/test_devstack.py -k cluster
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh

targets=(tests)
for arg in "$@"; do
    if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
        targets=()  # the caller chose the paths
        break
    fi
done
exec "$LLOG_PY" -m pytest "${targets[@]}" -q -p no:cacheprovider "$@"
