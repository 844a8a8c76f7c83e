# Source me (bash or zsh):  source scripts/env.sh
#
# Runs scripts/setup.sh (fast when everything is cached) and exports
#   LLOG_PY         the cached virtualenv's python
#   PYTHONPATH      this repo's root first, so `$LLOG_PY -m server...` finds the code
#   LLOG_CACHE_DIR  where the venv and the Oxia/S3 binaries live
# Returns non-zero (without exiting your shell) if set-up fails.

_llog_src="${BASH_SOURCE[0]:-$0}"
_llog_root="$(cd "$(dirname "$_llog_src")/.." && pwd)"
export LLOG_CACHE_DIR="${LLOG_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llog}"
if _llog_py="$(bash "$_llog_root/scripts/setup.sh")" && [ -x "$_llog_py" ]; then
    export LLOG_PY="$_llog_py"
    case ":${PYTHONPATH:-}:" in
        *":$_llog_root:"*) ;;
        *) export PYTHONPATH="$_llog_root${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
    unset _llog_src _llog_root _llog_py
else
    echo "[setup] scripts/setup.sh failed; LLOG_PY is not set" >&2
    unset _llog_src _llog_root _llog_py
    return 1 2>/dev/null || exit 1
fi
