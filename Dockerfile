# One image for every agentic-iqa process: migrations, Celery workers (default, VLM and tool
# queues), Flower and the CLI. See docs/deployment.md ("The image").
#
#   scripts/stack/prepare-build.sh      # optional: local wheels and CA bundle into docker/local/
#   docker build --network host -t agentic-iqa .
#
# torch/torchvision (build args): TORCH_REQUIREMENTS (default torch==2.13.0 torchvision==0.28.0),
# installed first in a layer of their own, from TORCH_INDEX_URL when it is set (e.g. a CPU index
# such as https://download.pytorch.org/whl/cpu, or a CUDA one for an older host driver), else from
# PyPI with wheels in docker/local/wheels/ preferred. A CPU-only torch there gives the CPU-only
# image (about 1.9 GB); `TORCH_REQUIREMENTS="torch torchvision"` from PyPI gives the CUDA pair
# the gpu-worker needs (several GB more). docker/torchvision_without_ops.py says what happens when
# the torchvision found does not match a CPU torch.
#
# Layers, most stable first, so that a source edit rebuilds only the last few seconds' worth:
# torch; the dependencies read from pyproject.toml alone (a README or source edit does not
# reinstall them); the project's wheel. Build-time inputs (docker/local/: pip's CA bundle behind
# a TLS-inspecting proxy, local wheels) stay in the build stages, never in the final image.
#
# No HEALTHCHECK here: each service's check is in docker-compose.yml (workers: a liveness file
# they touch while connected to the broker).

# 0. The dependency list, read from pyproject.toml alone: the deps stage copies only this file,
#    so an edit of pyproject.toml that leaves [project].dependencies as they are (a marker, a
#    linter setting) reinstalls nothing either.
FROM python:3.11-slim AS requirements
COPY pyproject.toml /tmp/project/
RUN python -c "import tomllib; deps = tomllib.load(open('/tmp/project/pyproject.toml', 'rb'))['project']['dependencies']; open('/tmp/requirements.txt', 'w').write('\n'.join(deps) + '\n')"

FROM python:3.11-slim AS deps

ARG TORCH_INDEX_URL=""
ARG TORCH_REQUIREMENTS="torch==2.13.0 torchvision==0.28.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

COPY docker/local/ /tmp/local/
COPY docker/torchvision_without_ops.py /tmp/
RUN python -m venv /opt/venv

# 1. torch and torchvision, a matching pair as far as the index has one.
RUN set -eu; \
    if [ -f /tmp/local/ca-certificates.crt ]; then export PIP_CERT=/tmp/local/ca-certificates.crt; fi; \
    if [ -n "$TORCH_INDEX_URL" ]; then \
        pip install --index-url "$TORCH_INDEX_URL" $TORCH_REQUIREMENTS; \
    else \
        pip install --find-links /tmp/local/wheels $TORCH_REQUIREMENTS; \
    fi; \
    python /tmp/torchvision_without_ops.py; \
    python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"

# 2. The project's dependencies (stage 0's list). pyiqa asks for opencv-python,
#    other packages for opencv-python-headless: both ship the same cv2 module, so only the
#    headless one (no GUI, no libGL) is kept, reinstalled over the files the other removed.
COPY --from=requirements /tmp/requirements.txt /tmp/
RUN set -eu; \
    if [ -f /tmp/local/ca-certificates.crt ]; then export PIP_CERT=/tmp/local/ca-certificates.crt; fi; \
    pip install --find-links /tmp/local/wheels -r /tmp/requirements.txt; \
    if pip show -q opencv-python 2>/dev/null; then \
        version=$(pip show opencv-python | sed -n 's/^Version: //p'); \
        pip uninstall -y -q opencv-python opencv-python-headless; \
        pip install --no-deps "opencv-python-headless==$version"; \
    fi; \
    python -c "import cv2, pyiqa, torchvision; print('cv2', cv2.__version__, 'torchvision', torchvision.__version__)"

# 3. What pyiqa asks for but nothing here runs: its test and lint tools (pytest, ruff, yapf,
#    pre-commit and theirs), TensorBoard (its training logger) and bitsandbytes (CUDA-only
#    quantisation). The import check below is the proof that nothing needs them.
RUN pip uninstall -y -q pytest iniconfig pluggy ruff yapf platformdirs pre-commit cfgv identify \
        nodeenv virtualenv distlib python-discovery tensorboard tensorboard-data-server grpcio \
        werkzeug markdown absl-py bitsandbytes \
    && python -c "import cv2, pyiqa, torchvision, transformers, timm"

# 4. The project as a wheel (hatchling reads README.md: only this stage sees it).
FROM deps AS wheel
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY agentic_iqa ./agentic_iqa
COPY iqa_tools ./iqa_tools
COPY workers ./workers
COPY configs ./configs
COPY migrations ./migrations
RUN set -eu; \
    if [ -f /tmp/local/ca-certificates.crt ]; then export PIP_CERT=/tmp/local/ca-certificates.crt; fi; \
    pip wheel --no-deps --wheel-dir /wheels .

# The runtime image: the dependency environment, the project's wheel, nothing to build with.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

# Never wait on Hugging Face hub retries: models come from mounted volumes (see
# docs/deployment.md). Set HF_HUB_OFFLINE=0 together with AGENTIC_IQA_ALLOW_DOWNLOADS=true to let
# tools download what they miss.
ENV HF_HUB_OFFLINE=1

# Unprivileged runtime user; its home holds the per-container caches (torch hub links to the
# mounted weights, the Hugging Face home). /var/lib/agentic-iqa is its writable data folder: the
# default results database of a plain `docker run ... assess` (compose points every service at
# PostgreSQL instead).
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app \
        --shell /usr/sbin/nologin app \
    && install -d -o app -g app -m 0750 /var/lib/agentic-iqa

COPY --from=deps /opt/venv /opt/venv
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && agentic-iqa --help >/dev/null

# Runtime working directory: alembic.ini and migrations/ for the plain `alembic` command
# (`agentic-iqa db upgrade` needs neither), and the README's example images.
WORKDIR /app
COPY alembic.ini ./
COPY migrations ./migrations
COPY examples ./examples

ENV AGENTIC_IQA_DATABASE_URL=sqlite:////var/lib/agentic-iqa/agentic-iqa.sqlite3
VOLUME ["/var/lib/agentic-iqa"]

USER app

ENTRYPOINT ["agentic-iqa"]
CMD ["--help"]
