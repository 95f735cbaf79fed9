#!/usr/bin/env bash
# Compatibility check against the newest releases (not part of CI): installs zocodegen with the
# newest versions its pyproject.toml ranges allow into a throw-away virtual environment, prints
# them, and runs the tests that compare with outside engines (the TFLite interpreter, the ONNX
# specification, onnxruntime, Flower). With --no-vnni the same tests run under
# `qemu-x86_64 -cpu Haswell` (Debian's qemu-user), a CPU without VNNI, where onnxruntime's int8
# kernels saturate. The latest result is in docs/onnx.md.
#   bash scripts/compat.sh [--no-vnni] [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
wrap=()
if [ "${1:-}" = --no-vnni ]; then
  shift
  command -v qemu-x86_64 >/dev/null || { echo "compat: needs qemu-x86_64 (apt-get install qemu-user)" >&2; exit 1; }
  wrap=(qemu-x86_64 -cpu Haswell)
fi
env=$(mktemp -d)
trap 'rm -rf "$env"' EXIT
python3 -m venv "$env/venv"
"$env/venv/bin/pip" install -q --disable-pip-version-check --upgrade pip setuptools
"$env/venv/bin/pip" install -q --disable-pip-version-check --upgrade -e ".[test,fleet]"
"$env/venv/bin/python" - <<'PY'
from importlib.metadata import version
names = ("numpy", "onnx", "onnxruntime", "ai-edge-litert", "tflite", "flwr", "jinja2")
print("compat: newest releases: " + ", ".join(f"{n} {version(n)}" for n in names))
PY
tests=(tests/test_onnx_frontend.py tests/test_export.py tests/test_tflite_bitexact.py
       tests/test_fuzz_frontend.py)
[ ${#wrap[@]} -eq 0 ] && tests+=(tests/test_fleet.py)
exec "${wrap[@]}" "$env/venv/bin/python" -m pytest -q -p no:cacheprovider -rs "${tests[@]}" "$@"
