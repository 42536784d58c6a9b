#!/usr/bin/env bash
# The GPU suite in one script.
#   scripts/gpu_suite.sh prepare   here (with PyPI): download the wheels the GPU machine's image lacks
#                                  into .whl/ (git-ignored), pinned to the versions installed here.
#   scripts/gpu_suite.sh run       on the GPU machine (no network): install .whl/ into /tmp/site, run the
#                                  gpu-marked tests, the Triton example check and `kopt-mcp demo`;
#                                  logs and results go to $OUT (default: benchmarks/results/latest).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=(pydantic pydantic-core annotated-types typing-inspection typing-extensions mcp mcp-types httpx2
        httpcore2 h11 truststore anyio jsonschema jsonschema-specifications referencing rpds-py attrs pyjwt
        python-multipart sse-starlette starlette uvicorn opentelemetry-api gitpython gitdb smmap filelock
        cryptography cffi pycparser)

prepare() {
  rm -rf .whl && mkdir -p .whl
  for name in "${WHEELS[@]}"; do
    version=$(python3 -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
    [[ -n $version ]] || { echo "prepare: $name is not installed here; pip install -e '.[test]' first" >&2; exit 2; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$name==$version" || exit 2
  done
  python3 -m pip wheel -q --no-deps -w .whl . || exit 2   # kopt-mcp itself
  du -sh .whl
}

run() {
  OUT=${OUT:-benchmarks/results/latest}
  mkdir -p "$OUT"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "run: wheel install failed" >&2; exit 2; }
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$(dirname "$(command -v python3)"):$PATH PYTHONUNBUFFERED=1
  command -v python >/dev/null || { mkdir -p /tmp/pybin && ln -sf "$(command -v python3)" /tmp/pybin/python && export PATH=/tmp/pybin:$PATH; }
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version;
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
    ncu --version | tail -1; } > "$OUT/device.txt" 2>&1
  python3 -m kopt_mcp.cli demo --example triton 2>&1 | tee "$OUT/demo_triton.log"
  python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests 2>&1 | tee "$OUT/gpu_tests.log"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu_suite.sh prepare|run" >&2; exit 2 ;;
esac
