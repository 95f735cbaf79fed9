#!/usr/bin/env bash
# Builds every fuzz harness (tests/fuzz: the device's parsers under libFuzzer with ASan and
# UBSan, the host's under atheris) and runs each for SECONDS (default 60); exits non-zero on
# any finding, which is left in build/fuzz/findings/. docs/reliability.md has the figures.
#   bash scripts/fuzz.sh 3600
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python tests/fuzz/run.py fuzz --seconds "${1:-60}" "${@:2}"
