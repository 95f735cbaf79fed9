#!/usr/bin/env bash
# Sets up (Debian packages, .venv) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The tests build hundreds of generated projects whose kernels and training engine are the
# same files: a compiler cache (ccache, in build/ccache) compiles each such file once. The
# cache key leaves out the project's folder (CCACHE_NOHASHDIR), so a cached object's debug
# info names the folder it was first compiled in.
export CCACHE_DIR="$PWD/build/ccache" CCACHE_NOHASHDIR=1
export NATIVE_CC="ccache cc" QEMU_CC="ccache arm-none-eabi-gcc" FW_CC="ccache arm-none-eabi-gcc"
# one worker per core (pytest-xdist); a file's tests stay on one worker, so the module-scoped
# firmware build caches are built once
exec .venv/bin/python -m pytest -q -n auto --dist loadfile "$@"
