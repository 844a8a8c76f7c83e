#!/usr/bin/env bash
# Prepare everything llog needs to run and test, once per user; idempotent.
#
#   1. checks python3 >= 3.11 and go >= 1.24 (fails, saying what to install)
#      and java >= 17 (only warns: only the Spark pipeline needs it);
#   2. creates the virtualenv $CACHE/venv-<sha256(requirements.txt)[:12]>,
#      holding only the dependencies (the repo is found via PYTHONPATH, so one
#      venv serves every clone with the same requirements.txt);
#   3. builds Oxia and the S3 server into $CACHE/bin, fetches the Kafka tools' jars
#      and builds the Go Kafka clients' test program (python -m devstack install).
#
# CACHE is ${LLOG_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llog}. Progress
# goes to stderr; the only line on stdout is the venv's python, so
#   LLOG_PY="$(scripts/setup.sh)"
# works. Usually you `source scripts/env.sh` instead, which calls this.
# LLOG_PYTHON picks the interpreter the venv is made from (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LLOG_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llog}"
REQUIREMENTS="$ROOT/requirements.txt"
PYTHON="${LLOG_PYTHON:-python3}"

say() { echo "[setup] $*" >&2; }
die() { echo "[setup] error: $*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------

command -v "$PYTHON" >/dev/null 2>&1 \
    || die "$PYTHON not found: install Python >= 3.11 (e.g. apt-get install python3.11 python3.11-venv)"
# One interpreter start for the version check and the requirements hash.
read -r PY_VERSION REQ_HASH < <("$PYTHON" - "$REQUIREMENTS" <<'EOF'
import hashlib, sys
with open(sys.argv[1], "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:12]
print("%d.%d" % sys.version_info[:2], digest)
EOF
) || die "could not read $REQUIREMENTS with $PYTHON"
case "$PY_VERSION" in
    3.1[1-9]|3.[2-9][0-9]) ;;
    *) die "Python >= 3.11 is needed, $PYTHON is $PY_VERSION: install python3.11 (and python3.11-venv) or set LLOG_PYTHON" ;;
esac

command -v go >/dev/null 2>&1 \
    || die "go not found: install Go >= 1.24 from https://go.dev/dl/ (it builds Oxia and MinIO)"
GO_VERSION="$(go env GOVERSION 2>/dev/null || true)"
GO_VERSION="${GO_VERSION#go}"
IFS=. read -r GO_MAJOR GO_MINOR _ <<<"$GO_VERSION.0"
if ! [[ "$GO_MAJOR" =~ ^[0-9]+$ && "$GO_MINOR" =~ ^[0-9]+$ ]] || (( GO_MAJOR == 1 && GO_MINOR < 24 )); then
    die "Go >= 1.24 is needed, found '${GO_VERSION:-unknown}': install it from https://go.dev/dl/"
fi

if command -v java >/dev/null 2>&1; then
    JAVA_VERSION="$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)"
    JAVA_MAJOR="${JAVA_VERSION%%.*}"
    [[ "$JAVA_MAJOR" == 1 ]] && JAVA_MAJOR="$(cut -d. -f2 <<<"$JAVA_VERSION")"  # "1.8.0" is Java 8
    if ! [[ "$JAVA_MAJOR" =~ ^[0-9]+$ ]] || (( JAVA_MAJOR < 17 )); then
        say "WARNING: Java >= 17 is needed for the Spark pipeline, found '${JAVA_VERSION:-unknown}'" \
            "(install openjdk-17-jre-headless); everything else works without it"
    fi
else
    say "WARNING: java not found: the Spark pipeline needs Java >= 17 (install openjdk-17-jre-headless);" \
        "everything else works without it"
fi

# --- virtualenv ------------------------------------------------------------

mkdir -p "$CACHE"
VENV="$CACHE/venv-$REQ_HASH"

if [[ ! -f "$VENV/.complete" ]]; then
    # Serialize concurrent set-ups where flock(1) exists; the rename below is
    # safe without it, just wasteful.
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$CACHE/.setup.lock"
        flock 9
    fi
fi
if [[ ! -f "$VENV/.complete" ]]; then
    say "creating the virtualenv $VENV (first run for this requirements.txt, ~1-2 min)"
    TMP_VENV="$(mktemp -d "$CACHE/.venv-$REQ_HASH.tmp.XXXXXX")"
    trap 'rm -rf "$TMP_VENV"' EXIT
    "$PYTHON" -m venv "$TMP_VENV" >&2 \
        || die "python -m venv failed: install the venv module (e.g. apt-get install python3.11-venv)"
    say "installing $REQUIREMENTS"
    "$TMP_VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
        -r "$REQUIREMENTS" >&2 || die "pip install -r $REQUIREMENTS failed (see above)"
    # The venv was made under its temporary name: point its scripts at the final one.
    "$TMP_VENV/bin/python" - "$TMP_VENV" "$VENV" <<'EOF'
import pathlib, sys
old, new = sys.argv[1].encode(), sys.argv[2].encode()
for path in pathlib.Path(sys.argv[1], "bin").iterdir():
    if path.is_file() and not path.is_symlink():
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))
EOF
    touch "$TMP_VENV/.complete"
    rm -rf "$VENV"  # an incomplete leftover of an interrupted run
    mv "$TMP_VENV" "$VENV"
    trap - EXIT
    say "virtualenv ready"
fi

# --- server binaries -------------------------------------------------------

# Fast (well under a second) once the stamps in $CACHE/bin exist.
LLOG_CACHE_DIR="$CACHE" PYTHONPATH="$ROOT" "$VENV/bin/python" -m devstack install \
    || die "building the local stack binaries failed (see above)"

echo "$VENV/bin/python"
