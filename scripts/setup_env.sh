#!/usr/bin/env bash
# Sourced by the README commands: makes a virtual environment (default .venv in the repo, or
# $MGO_VENV) and installs ms_grad_ops into it with its test tools. Everything the project needs
# comes from PyPI through pyproject.toml; nothing else is assumed on the machine but python3,
# g++ and pip's registry.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MGO_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
# The install is skipped when the sources it builds from are unchanged since the last one into
# this venv: the README commands are run often, and a rebuild of the C++ kernels costs minutes.
STAMP="$VENV/.ms_grad_ops_sources"
SOURCES="$(cd "$ROOT" && find setup.py pyproject.toml cpu infer_shape ms_grad_ops -type f \
  \( -name '*.py' -o -name '*.cc' -o -name '*.h' -o -name '*.toml' \) -print0 | sort -z \
  | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SOURCES" ]; then
  echo "[setup] ms_grad_ops in $VENV is up to date with the sources" >&2
else
  rm -f "$STAMP"
  echo "[setup] installing ms_grad_ops into $VENV (builds the C++ kernels)" >&2
  LOG="$(mktemp)"
  if ! "$PY" -m pip install --disable-pip-version-check "$ROOT[test]" > "$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "[setup] pip install failed (log above)" >&2
    exit 1
  fi
  rm -f "$LOG"
fi
# -P: do not put the working directory first on sys.path, where the source tree would shadow the
# installed package.
"$PY" -P -c "import ms_grad_ops._validate, ms_grad_ops._custom as c; c.cpu_library()" \
  || { echo "[setup] ms_grad_ops is not importable after install" >&2; exit 1; }
echo "$SOURCES" > "$STAMP"
export ROOT PY
