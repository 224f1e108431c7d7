#!/usr/bin/env bash
# `make bench`: our PTQ and Sony MCT 2.6.1 side by side, on the same models, data and machine.
#
# Builds .venv-bench once (about 6 GB, a few minutes; not part of CI), then runs the driver.
# TensorFlow is kept OUT of this venv: MCT 2.6.1 segfaulted at import when TensorFlow or
# h5py was loaded before torchvision (shared/REFERENCE.md).
#
# Our package is NOT pip-installed here: it and MCT are both the distribution
# "model-compression-toolkit" with the import name model_compression_toolkit, so installing
# one uninstalls the other. The venv gets MCT 2.6.1 plus our dependencies; bench/worker.py
# imports ours from this source tree (first on sys.path) and MCT from site-packages.
#
#   bash bench/run.sh                  # full run, writes bench/results/<date>.md
#   bash bench/run.sh --install-only   # only build the venv
#   bash bench/run.sh --repeats 1 ...  # other arguments go to bench/compare_mct.py (--help)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-bench
PY=$VENV/bin/python
REQS=("torch==2.14.1" "torchvision==0.29.1" "model-compression-toolkit==2.6.1"
      numpy scipy networkx tensorboard matplotlib tqdm scikit-learn)
# The stamp records what was installed: a change of the pins or of setup.py reinstalls.
WANT="$(printf '%s\n' "${REQS[@]}" | cat - setup.py | sha256sum | cut -d' ' -f1)"
STAMP=$VENV/.bench-installed

if [[ ! -f $STAMP || "$(cat "$STAMP")" != "$WANT" ]]; then
  echo "bench: building $VENV (once; about 6 GB) ..."
  test -x "$PY" || "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
  # An editable install of ours would have replaced MCT (same distribution name).
  if "$PY" -m pip show model-compression-toolkit 2>/dev/null | grep -q "^Editable project location"; then
    "$PY" -m pip uninstall --quiet --yes model-compression-toolkit
  fi
  "$PY" -m pip install --quiet "${REQS[@]}"
  # Our own dependencies (setup.py's install_requires), without our package itself.
  "$PY" -m pip install --quiet $("$PY" -c "
import ast, pathlib
tree = ast.parse(pathlib.Path('setup.py').read_text())
kw = [k for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords if k.arg == 'install_requires']
print(' '.join(e.value for e in kw[0].value.elts))")
  "$PY" -P - <<'PY'
import importlib.metadata as md, importlib.util as u, sys
bad = [m for m in ("tensorflow", "h5py") if u.find_spec(m)]
if bad:
    sys.exit(f"bench: {bad} got into .venv-bench; MCT 2.6.1 segfaults beside them. Remove them and retry.")
if md.version("model-compression-toolkit") != "2.6.1":
    sys.exit("bench: model-compression-toolkit in .venv-bench is not MCT 2.6.1")
PY
  echo "$WANT" > "$STAMP"
fi

if [[ "${1:-}" == "--install-only" ]]; then
  exit 0
fi
exec "$PY" bench/compare_mct.py "$@"
