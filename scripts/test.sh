#!/usr/bin/env bash
# Sets up (Debian packages, .venv) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# one worker per core (pytest-xdist); a file's tests stay on one worker, so the module-scoped
# firmware build caches are built once
exec .venv/bin/python -m pytest -q -n auto --dist loadfile "$@"
