# Sourced by device.sh and device_parallel.sh on the GPU machine, from the checkout root: the staged
# wheels installed once into /tmp/site (.whl/ without its kopt_mcp wheel, then .devstage/whl/: this
# branch's kopt_mcp and the projects' own), the environment that imports them, and ROOT, STAGE, OUT.
ROOT=$PWD
STAGE=$ROOT/.devstage
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [[ ! -f /tmp/site/.kopt-installed ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v '/kopt_mcp-') "$STAGE"/whl/*.whl || { echo "wheel install failed" >&2; exit 2; }
  touch /tmp/site/.kopt-installed
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$(dirname "$(command -v python3)"):$PATH PYTHONUNBUFFERED=1
command -v python >/dev/null || { mkdir -p /tmp/pybin && ln -sf "$(command -v python3)" /tmp/pybin/python && export PATH=/tmp/pybin:$PATH; }
cd /tmp  # never import the checkout's own kopt_mcp/ (python -m puts the cwd first)
