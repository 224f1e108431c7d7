# `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOGS ?= $(CURDIR)/demo_logs

.PHONY: install demo test lint format clean

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all-cpu,dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) tutorials/demo.py --log-folder $(LOGS)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) demo_logs .pytest_cache .ruff_cache
