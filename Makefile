# The two commands of the README: `make run` and `make test`. Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lenses-installed
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: install run test lint bench

install: $(STAMP)

# The realserver extra (llama-cpp-python, for one slow test) compiles from source: a few minutes the
# first time, then pip's wheel cache. GGML_NATIVE=OFF: a portable build (native segfaults on these CPUs).
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[train,dev]'
	CMAKE_ARGS=-DGGML_NATIVE=OFF $(PY) -m pip install -q -c constraints.txt -e '.[realserver]'
	touch $(STAMP)

run: install
	$(VENV)/bin/lenses run --sample

test: install
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

lint: install
	$(VENV)/bin/ruff check lenses_data flows training tests benchmarks
