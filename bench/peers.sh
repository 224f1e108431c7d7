#!/usr/bin/env bash
# `make bench`: our PTQ beside PyTorch's pt2e (torchao) and Intel NNCF, 8 bits, on the same
# models and data; writes bench/results/peers.md (bench/peers.py says how it measures).
#
# Builds .venv-peers once (a few seconds to a minute: no torch download). The peers are kept
# OUT of the project's environment and constraints: .venv-peers gets torchao and NNCF only,
# and sees the project's .venv (torch, the real zoo's wheels) through a .pth file, so all
# three tools run on one torch build. Our package is imported from this source tree.
#
#   bash bench/peers.sh                                  # every model, every tool
#   bash bench/peers.sh --models crepe_tiny --tools ours,pt2e   # other arguments go to bench/peers.py
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-peers
PY=$VENV/bin/python
REQS=("torchao==0.18.0" "nncf==3.4.0")
if [[ ! -x .venv/bin/python ]]; then
  echo "bench/peers.sh: the project's .venv is missing; run 'make install' first" >&2
  exit 1
fi
SITE="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
WANT="$(printf '%s\n' "${REQS[@]}" "$SITE" | sha256sum | cut -d' ' -f1)"
STAMP=$VENV/.peers-installed

if [[ ! -f $STAMP || "$(cat "$STAMP")" != "$WANT" ]]; then
  echo "bench: building $VENV (once) ..."
  test -x "$PY" || "$PYTHON" -m venv "$VENV"
  # the project's packages, after .venv-peers' own (a peer's pinned dependency wins here only)
  echo "$SITE" > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_project_site.pth"
  "$PY" -m pip install --quiet "${REQS[@]}"
  echo "$WANT" > "$STAMP"
fi

if [[ "${1:-}" == "--install-only" ]]; then
  exit 0
fi
exec "$PY" bench/peers.py "$@"
