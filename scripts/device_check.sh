#!/usr/bin/env bash
# The one command for a lent GPU machine: are BRISQUE, NIQE and PIQE (and SSIM, PSNR) the same on
# CPU and CUDA, in float32 (before) and float64 (after)?  Writes $OUT/device_consistency.txt
# (benchmarks/device_consistency.py's report) and $OUT/environment.txt.
#
# The GPU machine has python3.12 with torch + CUDA but not our other dependencies, and no network
# (see the device README), so everything travels in the ignored folder .device/ (listed in
# .git/info/exclude), made here first with
#
#     bash scripts/device_check.sh prepare      # wheels for Python 3.12 + data, about 14 MB
#
#     .device/whl/   pyiqa and the few packages iqa_tools imports that the machine lacks
#     .device/data/  40 LIVE-C photos (with NOTICE.txt), pyiqa-weights, tid2013-calibration
#
# then run there from the repository root, carrying .device:
#
#     bash scripts/device_check.sh
#
# Settings (environment): PYTHON (python3), OUT (./device-check-out), LIMIT (40 photos), DEVICES
# (cpu,cuda), CLIPPED (10 burnt-out copies), SKIP_INSTALL=1 to use PYTHON's own packages instead
# of the wheels.  On a CPU-only machine, as a rehearsal:
#
#     PYTHON=.venv/bin/python OUT=/tmp/out SKIP_INSTALL=1 bash scripts/device_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE_DIR=.device
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/device-check-out}
LIMIT=${LIMIT:-40}
DEVICES=${DEVICES:-cpu,cuda}
CLIPPED=${CLIPPED:-10}
DATA=$DEVICE_DIR/data

prepare() {
    # Versions as in the project's virtual environment; the machine already has torch,
    # torchvision, numpy, scipy, pillow, opencv, pyyaml, requests, tqdm and huggingface_hub.
    local pip=${PIP:-.venv/bin/pip} shared=${AGENTIC_IQA_DATA_DIR:-../shared/data}
    local packages=(pyiqa pydantic pydantic_core pydantic-settings python-dotenv annotated-types
                    typing-inspection typing_extensions)
    local pins=() name version
    for name in "${packages[@]}"; do
        version=$("$pip" show "$name" 2>/dev/null | sed -n 's/^Version: //p')
        [ -n "$version" ] || { echo "prepare: $name is not installed in $pip's environment" >&2; exit 1; }
        pins+=("$name==$version")
    done
    rm -rf "$DEVICE_DIR/whl" "$DATA"
    mkdir -p "$DEVICE_DIR/whl" "$DATA/livec"
    "$pip" download -q --no-deps --only-binary :all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
        -d "$DEVICE_DIR/whl" "${pins[@]}"
    find "$shared/livec-dev/images" -maxdepth 1 -type f | sort | head -n "$LIMIT" \
        | xargs -I{} cp {} "$DATA/livec/"
    cp "$shared/livec-dev/NOTICE.txt" "$DATA/livec/"
    cp -r "$shared/pyiqa-weights" "$DATA/pyiqa-weights"
    mkdir -p "$DATA/tid2013-calibration"
    cp -r "$shared/tid2013-calibration/dist" "$shared/tid2013-calibration/ref" \
        "$DATA/tid2013-calibration/"
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
else
    export PYTHONPATH=$PWD
fi
# pyiqa writes derived files under TORCH_HOME; keep them (and any cache) out of the home folder.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCH_HOME=$PWD/$DEVICE_DIR/cache/torch \
    XDG_CACHE_HOME=$PWD/$DEVICE_DIR/cache

{
    date -u
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    "$PYTHON" -c 'import sys, torch, pyiqa, pydantic
print("python", sys.version.split()[0], "torch", torch.__version__, "pyiqa", pyiqa.__version__,
      "pydantic", pydantic.__version__, "cuda", torch.cuda.is_available())'
} > "$OUT/environment.txt" 2>&1 || { cat "$OUT/environment.txt"; exit 1; }
cat "$OUT/environment.txt"

started=$(date +%s)
status=0
"$PYTHON" benchmarks/device_consistency.py "$DATA/livec" --weights-dir "$DATA/pyiqa-weights" \
    --tid-dir "$DATA/tid2013-calibration" --limit "$LIMIT" --devices "$DEVICES" \
    --clipped "$CLIPPED" 2> "$OUT/device_consistency.stderr.txt" \
    | tee "$OUT/device_consistency.txt" || status=$?
if [ "$status" != 0 ]; then
    tail -n 40 "$OUT/device_consistency.stderr.txt"
    exit "$status"
fi
echo "device check done in $(( $(date +%s) - started ))s" | tee -a "$OUT/device_consistency.txt"
