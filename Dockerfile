# One image for every agentic-iqa process: migrations, Celery workers (default and tool queues),
# Flower, and the CLI. See docs/deployment.md.
#
#   docker build -t agentic-iqa .                                   # torch from PyPI
#   docker build -t agentic-iqa \
#       --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu .   # CPU-only torch
#
# torch/torchvision: the default PyPI wheel is a CUDA build that also runs on the CPU, so the
# default image serves both the CPU workers and the GPU worker (it is large, several GB).
# TORCH_INDEX_URL, when set, installs torch and torchvision from that index first (a matching
# pair, resolved by pip); the project's own `torch>=...` requirement is then already satisfied
# and pip leaves them alone. Use the CPU index for a much smaller image without GPU support, or a
# CUDA index (e.g. https://download.pytorch.org/whl/cu124) to match an older host driver.
#
# No HEALTHCHECK: workers serve no port, and a broadcast `celery inspect ping` every few seconds
# from every replica costs more than it tells; Compose restarts a worker whose process exits.

FROM python:3.11-slim

ARG TORCH_INDEX_URL=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Never wait on Hugging Face hub retries: models come from mounted volumes (see
# docs/deployment.md). Set HF_HUB_OFFLINE=0 together with AGENTIC_IQA_ALLOW_DOWNLOADS=true to let
# tools download what they miss.
ENV HF_HUB_OFFLINE=1

# libgl1 and libglib2.0-0: OpenCV (a pyiqa dependency) loads them at import; curl for debugging
# and for health checks of services built on this image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 curl \
    && rm -rf /var/lib/apt/lists/*

# Unprivileged runtime user; its home holds the per-container caches (torch hub links to the
# mounted weights, the Hugging Face home).
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app \
        --shell /usr/sbin/nologin app

# 1. torch/torchvision from a custom index, only when asked.
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
        pip install --index-url "$TORCH_INDEX_URL" torch torchvision; \
    fi

# 2. The project's dependencies, read from pyproject.toml alone, so this (multi-GB) layer is
#    rebuilt only when pyproject.toml changes, not on every source edit.
WORKDIR /src
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; open('/tmp/requirements.txt', 'w').write('\n'.join(deps) + '\n')" \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# 3. The project as a regular (non-editable) wheel: everything it runs, configs and Alembic
#    migrations included, comes from site-packages. The sources are not kept, so nothing in
#    the working directory shadows the installed packages.
COPY agentic_iqa ./agentic_iqa
COPY iqa_tools ./iqa_tools
COPY workers ./workers
COPY configs ./configs
COPY migrations ./migrations
COPY alembic.ini ./
RUN pip install . \
    && agentic-iqa --help >/dev/null \
    && cd / && rm -rf /src

# 4. Runtime working directory: alembic.ini and migrations/ for the plain `alembic` command
#    (`agentic-iqa db upgrade` needs neither), and the README's example images.
WORKDIR /app
COPY alembic.ini ./
COPY migrations ./migrations
COPY examples ./examples

USER app

ENTRYPOINT ["agentic-iqa"]
CMD ["--help"]
