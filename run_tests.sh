#!/usr/bin/env bash
# Run the test suite in the cached virtualenv. Extra arguments go to pytest;
# when they name test paths only those run (in one process), e.g.
#   ./run_tests.sh tests/integration/test_devstack.py -k cluster
# Without paths, the whole suite runs in three phases: the unit tests on every
# core (pytest-xdist; LLOG_TEST_WORKERS overrides the count); the integration
# tests on two workers (LLOG_TEST_INTEGRATION_WORKERS), each with its own
# Oxia + S3 stack, a module's tests on one worker (tests/conftest.py groups
# them); then the `exclusive` integration tests one at a time, since they load
# the machine or print rates, so each gets it to itself.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh

pytest_=("$LLOG_PY" -m pytest -q -p no:cacheprovider)
for arg in "$@"; do
    if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
        exec "${pytest_[@]}" "$@"  # the caller chose the paths
    fi
done

set +e
"${pytest_[@]}" tests/unit -n "${LLOG_TEST_WORKERS:-auto}" "$@"
unit=$?
"${pytest_[@]}" tests/integration -m "not exclusive" -n "${LLOG_TEST_INTEGRATION_WORKERS:-2}" --dist loadgroup "$@"
shared=$?
"${pytest_[@]}" tests/integration -m exclusive "$@"
exclusive=$?
set -e
echo "unit tests: exit $unit; integration tests: exit $shared, exclusive ones: exit $exclusive (5: none selected)"
# One exit status: the first failing phase's, 0 if the rest passed or selected nothing.
for rc in "$unit" "$shared" "$exclusive"; do
    if ((rc != 0 && rc != 5)); then exit "$rc"; fi
done
if ((unit == 5 && shared == 5 && exclusive == 5)); then exit 5; fi
exit 0
