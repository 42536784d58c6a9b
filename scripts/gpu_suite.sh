#!/usr/bin/env bash
# The GPU suite in one script.
#   scripts/gpu_suite.sh prepare   here (with PyPI): download the wheels the GPU machine's image lacks
#                                  into .whl/ (git-ignored), pinned to the versions installed here.
#   scripts/gpu_suite.sh run       on the GPU machine (no network): install .whl/ into /tmp/site, run
#                                  `kopt-mcp demo` on the Triton example and the gpu-marked tests;
#   scripts/gpu_suite.sh tests     ... the gpu-marked tests alone
#   scripts/gpu_suite.sh initreuse ... examples/triton_softmax from a fresh copy through `kopt-mcp init --write`
#                                  to the baseline's end, init's runs adopted and not (benchmarks/init_reuse/run.py)
#   scripts/gpu_suite.sh accuracy  ... profiler GPU time vs CUDA events and profiling overhead
#                                  (benchmarks/profiler_accuracy/run.py; ACCURACY_QUICK=1: no ncu)
#   scripts/gpu_suite.sh trace     ... the trace report alone: kernel_trace_analysis on the Triton example's
#                                  baseline (benchmarks/trace_report/run.py -> trace_report.md / .json)
#   scripts/gpu_suite.sh slots     ... two candidate slots sharing the GPU on the Triton example
#                                  (benchmarks/slots_gpu/run.py -> slots_gpu.md / .json)
#   scripts/gpu_suite.sh many [PER_SLOT] [REPO]  ... 1, N and 2N candidate slots on the host's N GPUs
#                                  (benchmarks/slots_gpu/many.py -> many_slots.md / .json; REPO gpu or
#                                  gpu-dobench; MANY_MAX_SECONDS=S: no verdict starts past S s;
#                                  MANY_CONTROL=K: the host control first, K runs per GPU, 0 = none)
#   scripts/gpu_suite.sh loopend [RUNS] [FIRST]  ... `kopt-mcp demo` on the Triton example RUNS times in a row
#                                  (no stall), then `kopt-mcp compare` on the first run's session
#                                  (benchmarks/end_of_loop/run.py -> end_of_loop.md / .json;
#                                  LOOPEND_FLAGS=--no-compare: the demos alone)
#   scripts/gpu_suite.sh sandbox   ... the Triton example with every run in bubblewrap and without
#                                  (benchmarks/sandbox_gpu/run.py -> sandbox_gpu.md / .json; `prepare` brings
#                                  Debian's bubblewrap .deb along for an image without bwrap)
#   scripts/gpu_suite.sh decisions [TRIALS]  ... the decision-quality benchmark (planted effects;
#                                  DQ_MAX_SECONDS=S: start no round of trials that would end past S s)
#                                  logs and results go to $OUT (default: benchmarks/results/latest).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=(pydantic pydantic-core annotated-types typing-inspection typing-extensions mcp mcp-types httpx2
        httpcore2 h11 truststore anyio jsonschema jsonschema-specifications referencing rpds-py attrs pyjwt
        python-multipart sse-starlette starlette uvicorn opentelemetry-api gitpython gitdb smmap filelock
        cryptography cffi pycparser bm25s nvidia-ml-py py-spy)
# not installed here (no GPU): pinned, downloaded for the GPU machine's Python 3.12. cupti-python 13.4.0
# ran there on 2026-11-22 over the image's nvidia-cuda-cupti 13.0.85 (driver 580.159.04).
GPU_WHEELS=(cupti-python==13.4.0 pyelftools==0.33)

prepare() {
  rm -rf .whl && mkdir -p .whl
  for name in "${WHEELS[@]}"; do
    version=$(python3 -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
    [[ -n $version ]] || { echo "prepare: $name is not installed here; pip install -e '.[test]' first" >&2; exit 2; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$name==$version" || exit 2
  done
  for spec in "${GPU_WHEELS[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl "$spec" || exit 2
  done
  python3 -m pip wheel -q --no-deps -w .whl . || exit 2   # kopt-mcp itself
  (cd .whl && apt-get download bubblewrap >/dev/null 2>&1) || echo "prepare: no bubblewrap .deb (apt-get download failed)" >&2
  du -sh .whl
}

setup() {
  OUT=${OUT:-benchmarks/results/latest}
  mkdir -p "$OUT"
  if [[ ! -f /tmp/site/.kopt-installed ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "run: wheel install failed" >&2; exit 2; }
    touch /tmp/site/.kopt-installed
  fi
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$(dirname "$(command -v python3)"):$PATH PYTHONUNBUFFERED=1
  if ! command -v bwrap >/dev/null && compgen -G ".whl/bubblewrap_*.deb" >/dev/null; then  # the run sandbox
    dpkg-deb -x .whl/bubblewrap_*.deb /tmp/bwrap-root && export PATH=/tmp/bwrap-root/usr/bin:$PATH
  fi
  command -v python >/dev/null || { mkdir -p /tmp/pybin && ln -sf "$(command -v python3)" /tmp/pybin/python && export PATH=/tmp/pybin:$PATH; }
}

run() {
  setup
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version;
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
    ncu --version | tail -1
    python3 -c "from importlib.metadata import version as v; print('cupti-python', v('cupti-python'), 'cupy', v('cupy-cuda13x'), 'nvidia-cuda-cupti', v('nvidia-cuda-cupti'))"
  } > "$OUT/device.txt" 2>&1
  python3 -m kopt_mcp.app.cli demo --example triton 2>&1 | tee "$OUT/demo_triton.log"
  gpu_tests
}

gpu_tests() {
  setup
  python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests 2>&1 | tee "$OUT/gpu_tests.log"
}

accuracy() {
  setup
  python3 benchmarks/profiler_accuracy/run.py "$OUT" ${ACCURACY_QUICK:+--quick} 2>&1 | tee "$OUT/profiler_accuracy.log"
}

trace_report() {
  setup
  python3 benchmarks/trace_report/run.py "$OUT" 2>&1 | tee "$OUT/trace_report.log"
}

sandbox() {
  setup
  python3 benchmarks/sandbox_gpu/run.py "$OUT" 2>&1 | tee "$OUT/sandbox_gpu.log"
}

slots() {
  setup
  python3 benchmarks/slots_gpu/run.py "$OUT" 2>&1 | tee "$OUT/slots_gpu.log"
}

many() {
  setup
  python3 benchmarks/slots_gpu/many.py "$OUT" --per-slot "${1:-6}" --repo "${2:-gpu}" \
    --max-seconds "${MANY_MAX_SECONDS:-500}" --control "${MANY_CONTROL:-4}" 2>&1 | tee "$OUT/many_slots.log"
}

loopend() {
  setup
  python3 benchmarks/end_of_loop/run.py "$OUT" --runs "${1:-5}" --first "${2:-1}" ${LOOPEND_FLAGS:-} 2>&1 | tee -a "$OUT/end_of_loop.log"
}

decisions() {
  setup
  python3 benchmarks/decision_quality/run.py --device gpu --trials "${1:-20}" --out "$OUT" \
    ${DQ_MAX_SECONDS:+--max-seconds "$DQ_MAX_SECONDS"} 2>&1 | tee "$OUT/decision_quality.log"
}

case "${1:-}" in
  prepare) prepare ;;
  initreuse) setup; python3 benchmarks/init_reuse/run.py 2>&1 | tee "$OUT/init_reuse.log" ;;
  run) run ;;
  tests) gpu_tests ;;
  accuracy) accuracy ;;
  trace) trace_report ;;
  decisions) decisions "${2:-20}" ;;
  slots) slots ;;
  many) many "${2:-6}" "${3:-gpu}" ;;
  loopend) loopend "${2:-5}" "${3:-1}" ;;
  sandbox) sandbox ;;
  *) echo "usage: scripts/gpu_suite.sh prepare|run|initreuse|tests|accuracy|trace|decisions [TRIALS]|slots|many [PER_SLOT] [REPO]|loopend [RUNS] [FIRST]|sandbox" >&2; exit 2 ;;
esac
