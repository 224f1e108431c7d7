#!/usr/bin/env bash
# `make bench`: our PTQ and Sony MCT 2.6.1 side by side, on the same models, data and machine.
#
# Builds .venv-bench once (several GB, a few minutes; not part of CI), then runs the driver.
# TensorFlow is kept OUT of this venv: MCT 2.6.1 segfaulted at import when TensorFlow or
# h5py was loaded before torchvision (shared/REFERENCE.md).
#   bash bench/run.sh                  # full run, writes bench/results/<date>.md
#   bash bench/run.sh --install-only   # only build the venv
#   bash bench/run.sh --repeats 1 ...  # any other argument goes to bench/compare_mct.py
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-bench
PY=$VENV/bin/python
REQS=("torch==2.14.1" "torchvision==0.29.1" "model-compression-toolkit==2.6.1"
      numpy scipy networkx tensorboard matplotlib tqdm scikit-learn)
# The stamp records what was installed: a change of pins or of setup.py reinstalls.
WANT="$(printf '%s\n' "${REQS[@]}" | cat - setup.py | sha256sum | cut -d' ' -f1)"
STAMP=$VENV/.bench-installed

if [[ ! -f $STAMP || "$(cat "$STAMP")" != "$WANT" ]]; then
  echo "bench: building $VENV (once; several GB) ..."
  test -x "$PY" || "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet "${REQS[@]}"
  "$PY" -m pip install --quiet --no-deps -e .
  if "$PY" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('tensorflow') or u.find_spec('h5py')))"; then
    echo "bench: tensorflow/h5py got into $VENV; MCT segfaults beside them. Remove them and retry." >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi

if [[ "${1:-}" == "--install-only" ]]; then
  exit 0
fi
exec "$PY" bench/compare_mct.py "$@"
