#!/usr/bin/env bash
# Refreshes requirements/lock.txt: the exact version and hashes of every Python package the
# tool, its tests and the fleet need, for CPython 3.11+ on every platform (uv's universal
# resolution). Run it on purpose, then run `bash scripts/test.sh` and commit the lock only if
# the suite passes: the lock records the versions the suite was last green with.
#   bash scripts/lock.sh                    # newest releases the ranges in pyproject.toml allow
#   bash scripts/lock.sh --upgrade-package onnxruntime   # move one package, keep the rest
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
args=(pip compile pyproject.toml requirements/build.in --extra test --extra fleet
      --universal --python-version 3.11 --generate-hashes
      --constraints requirements/constraints.txt --output-file requirements/lock.txt
      --custom-compile-command "bash scripts/lock.sh")
[ -e requirements/lock.txt ] || args+=(--upgrade)
"$tools/venv/bin/uv" "${args[@]}" "$@"
