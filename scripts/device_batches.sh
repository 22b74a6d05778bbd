#!/usr/bin/env bash
# On a lent GPU machine: batched against unbatched tool scoring on CUDA, against a bare pyiqa
# per-image CUDA loop (benchmarks/tool_batches.py), then a distributed metric job with one CUDA
# tool worker (batch 1 and batch 16) and 1/2/4/8 default workers on Redis + SQLite
# (benchmarks/job_throughput.py).  Writes $OUT/tool_batches.txt and $OUT/metric_job_scaling.txt.
#
# Carries .device/ as scripts/device_metric_job.sh does, plus .device/redis/ (redis-server with
# liblzf.so.1, libjemalloc.so.2, libatomic.so.1; see ../shared/device/README.md) and the wheels
# of celery-batches.  Run with the device tool from the repository root, carrying .device:
#
#     bash scripts/device_batches.sh
#
# Settings: PYTHON (python3), OUT (./device-batches-out), LIMIT (100), SCALING (1,2,4,8),
# SKIP_INSTALL=1 to use PYTHON's own packages (CPU rehearsal here:
# PYTHON=.venv/bin/python SKIP_INSTALL=1 DEVICE=cpu LIMIT=8 SCALING=1 bash scripts/device_batches.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE_DIR=.device
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/device-batches-out}
DEVICE=${DEVICE:-cuda}
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
    DATA=${DATA:-../shared/data}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCH_HOME=$PWD/$DEVICE_DIR/cache/torch \
    XDG_CACHE_HOME=$PWD/$DEVICE_DIR/cache
"$PYTHON" benchmarks/tool_batches.py "$DATA/livec-dev/images" \
    --weights-dir "$DATA/pyiqa-weights" --device "$DEVICE" --limit "${LIMIT:-100}" \
    --batches 8,16,32 2> "$OUT/tool_batches.stderr.txt" | tee "$OUT/tool_batches.txt"
for batch in 1 16; do
    "$PYTHON" benchmarks/job_throughput.py "$DATA/livec-dev" \
        --weights-dir "$DATA/pyiqa-weights" --metric-job --limit "${LIMIT:-100}" \
        --device "$DEVICE" --postgres-url '' --broker redis://127.0.0.1:6379/5 \
        --tool-workers 1 --batch-size "$batch" --scaling "${SCALING:-1,2,4,8}" \
        2>> "$OUT/metric_job_scaling.stderr.txt" | tee -a "$OUT/metric_job_scaling.txt"
done
