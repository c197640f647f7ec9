# syntax=docker/dockerfile:1
# Two images from one file (no Docker engine on the dev machines: this file is kept consistent with
# pyproject.toml, constraints.txt and `lenses serve`, and documented in docs/scaling.md):
#
#   docker build --target pipeline -t lenses-pipeline:0.1.0 .
#       the pipeline package; runs a Prefect worker or any `lenses` command
#   docker build --target serving  -t lenses-serving:0.1.0 .
#       the official vLLM image at the pinned release (ModelsConfig.vllm_image, the release that
#       tests/realvllm serves) plus `lenses serve`, which builds the `vllm serve` command for a role
#       (filter, generator, validator, visual_validator)
#
# vLLM lives only in the serving image: its torch/transformers pins clash with the pipeline's.

ARG PYTHON_VERSION=3.11
ARG VLLM_VERSION=v0.32.0

# ---------------------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim AS pipeline
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    ARROW_DEFAULT_MEMORY_POOL=jemalloc \
    LENSES_HOME=/app
RUN apt-get update && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Pinned dependencies first (a cached layer that changes only with constraints.txt), then the project.
COPY constraints.txt ./
RUN pip install -r constraints.txt
COPY . .
RUN pip install --no-deps -e '.[train,dask]'
# GPU nodes: faiss on the GPU (same code path, picked up when importable).
ARG WITH_FAISS_GPU=0
RUN if [ "$WITH_FAISS_GPU" = "1" ]; then pip install faiss-gpu-cu12; fi
# Default: a Prefect worker on the GPU pool; override with any `lenses ...` command.
CMD ["prefect", "worker", "start", "--pool", "lenses-gpu"]

# ---------------------------------------------------------------------------------------------
FROM vllm/vllm-openai:${VLLM_VERSION} AS serving
ENV LENSES_HOME=/opt/lenses HF_HUB_OFFLINE=1
WORKDIR /opt/lenses
# `lenses serve` needs only the light part of the package (CLI, config + launcher), not torch from us:
# install without dependencies and add the few pure-Python ones it imports.
COPY pyproject.toml README.md ./
COPY lenses_data lenses_data
COPY lenses_app lenses_app
COPY configs configs
RUN pip install --no-deps -e . && pip install "pydantic>=2.6" pyyaml httpx
ENTRYPOINT ["lenses", "serve"]
CMD ["--role", "generator"]
