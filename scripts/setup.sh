#!/usr/bin/env bash
# Sets up everything zocodegen needs on a Debian machine: the Arm toolchain and QEMU (Debian
# packages, installed with apt-get when missing and we are root) and a Python virtual
# environment in .venv with the package and its locked dependencies. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v arm-none-eabi-gcc >/dev/null || need_apt+=(gcc-arm-none-eabi)
dpkg -s libnewlib-arm-none-eabi >/dev/null 2>&1 || [ -e /usr/lib/arm-none-eabi/newlib ] || need_apt+=(libnewlib-arm-none-eabi)
command -v qemu-system-arm >/dev/null || need_apt+=(qemu-system-arm)
# clang with libFuzzer: the fuzz harnesses of the device's parsers (tests/fuzz)
command -v clang >/dev/null || command -v clang-14 >/dev/null || need_apt+=(clang)
# ccache: the compiler cache of scripts/test.sh (the tests build hundreds of projects that share
# their kernels and training engine)
command -v ccache >/dev/null || need_apt+=(ccache)
python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${need_apt[*]}" >&2
    echo "setup: install them with: sudo apt-get install ${need_apt[*]}" >&2
    exit 1
  fi
fi

# Python packages: exactly the versions and hashes in requirements/lock.txt (scripts/lock.sh
# refreshes it), then zocodegen itself in editable mode without touching its dependencies.
# The environment is rebuilt from scratch whenever the lock changed since it was made, or
# always with ZOCODEGEN_FRESH_VENV=1 (CI): downloads stay in pip's cache, environments do not.
lock=requirements/lock.txt
stamp=.venv/.lock.sha256
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ "${ZOCODEGEN_FRESH_VENV:-0}" = 1 ] || [ ! -x .venv/bin/python ] \
    || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf .venv
  python3 -m venv .venv
  echo "setup: installing the locked Python packages into a new .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
    -r "$lock"
  echo "$want" > "$stamp"
fi
if ! .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
    --no-build-isolation -e . 2>.venv/editable-install.log; then
  cat .venv/editable-install.log >&2
  exit 1
fi
.venv/bin/python -m pip check --disable-pip-version-check >/dev/null
