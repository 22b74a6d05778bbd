#!/usr/bin/env bash
# On a lent GPU machine: a metric job (BRISQUE, NIQE, PIQE; no agent) run locally on CUDA and on
# the CPU, against bare pyiqa loops over the same photos in float32 and in the catalog's
# precision. Writes $OUT/metric_job_{cuda,cpu}.txt.
#
# Travels in the ignored folder .device/ (see scripts/device_check.sh): the wheels of
# `device_check.sh prepare` plus SQLAlchemy, alembic, Mako, MarkupSafe, tenacity, limits,
# deprecated, wrapt (Python 3.12), and .device/data/livec-dev/{images,mos.csv} (100 photos).
# Run with the device tool from the repository root, carrying .device:
#
#     bash scripts/device_metric_job.sh
#
# Settings: PYTHON (python3), OUT (./device-metric-out), LIMIT (100), THREADS (4 local job
# threads), DEVICES (cuda cpu), SKIP_INSTALL=1 to use PYTHON's own packages (a CPU rehearsal:
# PYTHON=.venv/bin/python SKIP_INSTALL=1 DEVICES=cpu LIMIT=10 bash scripts/device_metric_job.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE_DIR=.device
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/device-metric-out}
mkdir -p "$OUT"
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$DEVICE_DIR/site" "$DEVICE_DIR"/whl/*.whl
    export PYTHONPATH=$PWD/$DEVICE_DIR/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCH_HOME=$PWD/$DEVICE_DIR/cache/torch \
    XDG_CACHE_HOME=$PWD/$DEVICE_DIR/cache
for device in ${DEVICES:-cuda cpu}; do
    "$PYTHON" benchmarks/job_throughput.py "$DEVICE_DIR/data/livec-dev" \
        --weights-dir "$DEVICE_DIR/data/pyiqa-weights" --metric-job --local-only \
        --limit "${LIMIT:-100}" --threads "${THREADS:-4}" --device "$device" \
        2> "$OUT/metric_job_$device.stderr.txt" | tee "$OUT/metric_job_$device.txt" \
        || { tail -n 40 "$OUT/metric_job_$device.stderr.txt"; exit 1; }
done
