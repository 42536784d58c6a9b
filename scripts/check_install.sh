#!/usr/bin/env bash
# Checks the three install routes of the README from this checkout (needs PyPI): pip install .,
# pipx install ., uvx --from . kopt-mcp. Each must give a working `kopt-mcp --version`; the pip
# route also runs the CPU demo from another directory (bundled examples inside the wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q .
(cd "$tmp" && "$tmp/venv/bin/kopt-mcp" --version && "$tmp/venv/bin/kopt-mcp" demo --example cpu | tail -1)
python3 -m pip install -q pipx uv
PIPX_HOME="$tmp/pipx" PIPX_BIN_DIR="$tmp/pipxbin" python3 -m pipx install -q . && "$tmp/pipxbin/kopt-mcp" --version
UV_CACHE_DIR="$tmp/uvcache" uvx --from . kopt-mcp --version
echo "install routes: all OK"
