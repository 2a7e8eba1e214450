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
echo "[setup] installing ms_grad_ops into $VENV (builds the C++ kernels)" >&2
"$PY" -m pip install -q --disable-pip-version-check "$ROOT[test]" 2>&1 | grep -v "^WARNING: Location" >&2 || true
"$PY" -c "import ms_grad_ops._validate" || { echo "[setup] ms_grad_ops failed to install" >&2; exit 1; }
export ROOT PY
