# The two commands of the README: `make run` and `make test`. Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lenses-installed
TEST_STAMP := $(VENV)/.lenses-test-installed
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: install run test lint bench

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[train,dev]'
	touch $(STAMP)

# Only the tests need the realserver extra (llama-cpp-python, for the slow real-server test). It
# compiles from source: a few minutes the first time, then pip's wheel cache. GGML_NATIVE=OFF: a
# portable build (the native one segfaults on these CPUs). The report's browser test drives Debian's
# chromium through chromedriver: installed with apt-get when missing (CI runs as root).
$(TEST_STAMP): $(STAMP)
	if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver \
	  || echo "WARNING: chromium could not be installed; the report's browser test will be skipped"; \
	fi
	CMAKE_ARGS=-DGGML_NATIVE=OFF $(PY) -m pip install -q -c constraints.txt -e '.[realserver]'
	touch $(TEST_STAMP)

run: install
	$(VENV)/bin/lenses run --sample

test: $(TEST_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

lint: install
	$(VENV)/bin/ruff check lenses_data lenses_app flows training tests benchmarks
