#!/usr/bin/env bash
# The one command for a lent GPU machine: the same scores on CPU and CUDA (BRISQUE, NIQE, PIQE,
# SSIM, PSNR), then throughput: a local CUDA metric job against pyiqa's loops (with a wall-clock
# profile of every thread), batched against unbatched tool scoring, and distributed metric jobs
# with one CUDA tool worker (tool batch 1 and 16).
#
# The GPU machine has python3.12 with torch + CUDA but not our other dependencies, no Redis and
# no network (see the device README), so everything travels in the ignored folder .device/,
# made here first with
#
#     bash scripts/device.sh prepare     # wheels for Python 3.12, redis-server, data
#
# then run there from the repository root, carrying .device:
#
#     bash scripts/device.sh
#
# Writes into $OUT: environment.txt, device_consistency.txt, metric_job_tN.txt and profile_tN.txt
# (N local threads), tool_batches.txt, scaling.txt, log.txt.  Settings (environment): PYTHON (python3), OUT
# (./device-out), LIMIT (photos, 100), CHECK_LIMIT (photos for the consistency check, 40),
# DEVICE (cuda), THREADS (local job threads, a list: 1), SCALING (default workers beside one tool
# worker at batch 1: 1,4; "" skips), BATCHED_SCALING (the same at batch 16: 8), STAGES (all of
# "check jobs batches scaling"; "tiles" runs the tiled-scoring tests and benchmarks/large_photos.py
# at TILE_SIZES megapixels, 12,24,50,100), LOCAL_BATCH (the local job again with this tool batch: 16; 0
# skips), PROFILE=0 (no profile run), SKIP_INSTALL=1 to use PYTHON's own packages.  A rehearsal on
# a CPU-only machine:
#
#     PYTHON=.venv/bin/python SKIP_INSTALL=1 DEVICE=cpu LIMIT=8 CHECK_LIMIT=4 SCALING=1 \
#         BATCHED_SCALING=1 OUT=/tmp/out bash scripts/device.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE_DIR=.device
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/device-out}
LIMIT=${LIMIT:-100}
CHECK_LIMIT=${CHECK_LIMIT:-40}
DEVICE=${DEVICE:-cuda}
STAGES=${STAGES:-check jobs batches scaling}

prepare() {
    # Versions as in the project's virtual environment; the machine already has torch,
    # torchvision, numpy, scipy, pillow, opencv, pandas, pyarrow, matplotlib, rich, typer, psutil.
    local pip=${PIP:-.venv/bin/pip} shared=${AGENTIC_IQA_DATA_DIR:-../shared/data}
    local packages=(addict alembic amqp annotated-types anthropic billiard celery celery-batches
                    click-didyoumean click-plugins click-repl Deprecated dill docstring_parser
                    et_xmlfile facexlib filterpy flower ftfy future httpcore2 httpx2 humanize
                    jiter kombu limits Mako openai openpyxl opentelemetry-api platformdirs
                    prompt_toolkit psycopg psycopg-binary pydantic pydantic_core
                    pydantic-settings pyiqa python-dotenv pytz redis sniffio SQLAlchemy tenacity
                    tornado truststore typing-inspection typing_extensions tzdata tzlocal vine
                    wcwidth yapf yappi)
    local pins=() name version
    for name in "${packages[@]}"; do
        version=$("$pip" show "$name" 2>/dev/null | sed -n 's/^Version: //p')
        [ -n "$version" ] || { echo "prepare: $name is not installed in $pip's environment" >&2; exit 1; }
        pins+=("$name==$version")
    done
    rm -rf "$DEVICE_DIR/whl" "$DEVICE_DIR/data" "$DEVICE_DIR/redis"
    mkdir -p "$DEVICE_DIR/whl" "$DEVICE_DIR/data/livec-dev/images" "$DEVICE_DIR/redis" \
        "$DEVICE_DIR/data/tid2013-calibration"
    "$pip" download -q --no-deps --only-binary :all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform any -d "$DEVICE_DIR/whl" "${pins[@]}"
    head -n "$((LIMIT + 1))" "$shared/livec-dev/mos.csv" > "$DEVICE_DIR/data/livec-dev/mos.csv"
    tail -n +2 "$DEVICE_DIR/data/livec-dev/mos.csv" | cut -d, -f1 \
        | xargs -I{} cp "$shared/livec-dev/images/{}" "$DEVICE_DIR/data/livec-dev/images/"
    cp "$shared/livec-dev/NOTICE.txt" "$DEVICE_DIR/data/livec-dev/"
    cp -r "$shared/pyiqa-weights" "$DEVICE_DIR/data/pyiqa-weights"
    cp -r "$shared/tid2013-calibration/dist" "$shared/tid2013-calibration/ref" \
        "$DEVICE_DIR/data/tid2013-calibration/"
    cp "$(command -v redis-server)" "$DEVICE_DIR/redis/"
    for lib in liblzf.so.1 libjemalloc.so.2 libatomic.so.1; do
        cp -L "/lib/x86_64-linux-gnu/$lib" "$DEVICE_DIR/redis/"
    done
    grep -qxF ".device/" .git/info/exclude 2>/dev/null || echo ".device/" >> .git/info/exclude
    du -sh "$DEVICE_DIR"
}

if [ "${1:-}" = prepare ]; then
    prepare
    exit 0
fi

mkdir -p "$OUT"
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$DEVICE_DIR/site" "$DEVICE_DIR"/whl/*.whl
    export PYTHONPATH=$PWD/$DEVICE_DIR/site:$PWD
    LD_LIBRARY_PATH=$DEVICE_DIR/redis "$DEVICE_DIR/redis/redis-server" --port 6379 \
        --daemonize yes --save ""
    DATA=$DEVICE_DIR/data
else
    export PYTHONPATH=$PWD
    DATA=${DATA:-${AGENTIC_IQA_DATA_DIR:-../shared/data}}
fi
# pyiqa writes derived files under TORCH_HOME; keep them (and any cache) out of the home folder.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCH_HOME=$PWD/$DEVICE_DIR/cache/torch \
    XDG_CACHE_HOME=$PWD/$DEVICE_DIR/cache
LOG=$OUT/log.txt
{
    date -u
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    "$PYTHON" -c 'import os, sys, torch, pyiqa
print("python", sys.version.split()[0], "torch", torch.__version__, "pyiqa", pyiqa.__version__,
      "cuda", torch.cuda.is_available(), "cores", os.cpu_count())'
} > "$OUT/environment.txt" 2>&1 || { cat "$OUT/environment.txt"; exit 1; }
cat "$OUT/environment.txt"

# Each stage is bounded, so that one that hangs still leaves the others' figures.
stage() {
    local seconds=$1; shift
    echo "== $* ($(date +%T))" >> "$LOG"
    timeout "$seconds" "$@" 2>> "$LOG" || echo "stage failed or timed out ($?): $*" | tee -a "$LOG"
}
wants() { [[ " $STAGES " == *" $1 "* ]]; }

if wants check; then
    stage 150 "$PYTHON" benchmarks/device_consistency.py "$DATA/livec-dev/images" \
        --weights-dir "$DATA/pyiqa-weights" --tid-dir "$DATA/tid2013-calibration" \
        --limit "$CHECK_LIMIT" --devices "$( [ "$DEVICE" = cpu ] && echo cpu || echo "cpu,$DEVICE")" \
        --clipped 10 \
        > "$OUT/device_consistency.txt"
    cat "$OUT/device_consistency.txt"
fi
jobs_args=("$DATA/livec-dev" --weights-dir "$DATA/pyiqa-weights" --metric-job --limit "$LIMIT"
           --device "$DEVICE")
if wants jobs; then
    for threads in ${THREADS:-1}; do
        stage 120 "$PYTHON" benchmarks/job_throughput.py "${jobs_args[@]}" --local-only \
            --threads "$threads" --local-batch "${LOCAL_BATCH:-16}" \
            $( [ "${PROFILE:-1}" = 1 ] && echo --profile "$OUT/profile_t$threads.txt" ) \
            > "$OUT/metric_job_t$threads.txt"
        cat "$OUT/metric_job_t$threads.txt"
    done
fi
if wants batches; then
    stage 90 "$PYTHON" benchmarks/tool_batches.py "$DATA/livec-dev/images" \
        --weights-dir "$DATA/pyiqa-weights" --device "$DEVICE" --limit "$LIMIT" \
        --batches 8,16,32 > "$OUT/tool_batches.txt"
    cat "$OUT/tool_batches.txt"
fi
if wants tiles; then
    # Camera-sized photos scored tile by tile: the exactness tests on CUDA, then the benchmark.
    AGENTIC_IQA_DATA_DIR=$DATA stage 240 "$PYTHON" -m pytest -q -p no:cacheprovider \
        -o addopts=-ra tests/iqa_tools/test_tiling.py > "$OUT/tiles_tests.txt"
    cat "$OUT/tiles_tests.txt"
    stage 420 "$PYTHON" benchmarks/large_photos.py --device "$DEVICE" \
        --sizes "${TILE_SIZES:-12,24,50,100}" --photos "$DATA/livec-dev/images" \
        --weights-dir "$DATA/pyiqa-weights" > "$OUT/large_photos.txt"
    cat "$OUT/large_photos.txt"
fi
if wants scaling; then
    for spec in "1:${SCALING-1,4}" "16:${BATCHED_SCALING-8}"; do
        [ -n "${spec#*:}" ] || continue  # SCALING="" or BATCHED_SCALING="": that half skipped
        stage 150 "$PYTHON" benchmarks/job_throughput.py "${jobs_args[@]}" --postgres-url '' \
            --broker redis://127.0.0.1:6379/5 --tool-workers 1 --batch-size "${spec%%:*}" \
            --scaling "${spec#*:}" >> "$OUT/scaling.txt"
    done
    cat "$OUT/scaling.txt"
fi
