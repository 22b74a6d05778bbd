#!/usr/bin/env bash
# Fill docker/local/ (git-ignored) with this machine's build-time inputs for the Dockerfile:
# the CA bundle pip inside the build must trust (behind a TLS-inspecting proxy, the host's), and
# a CPU-only torch wheel found in pip's local wheel folders (`pip config list`: find-links), which
# makes the image CPU-only. Nothing found: nothing copied, the build uses the index's wheels.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p docker/local/wheels

bundle=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$bundle" ]; then
    cmp -s "$bundle" docker/local/ca-certificates.crt 2>/dev/null \
        || cp "$bundle" docker/local/ca-certificates.crt
fi

folders=$({
    python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p"
    echo "${PIP_FIND_LINKS:-}"
} | tr ' ' '\n' | sed 's|^file://||' | sort -u)
for folder in $folders; do
    [ -d "$folder" ] || continue
    for wheel in "$folder"/torch-*+cpu-cp311-*.whl; do
        [ -f "$wheel" ] || continue
        target=docker/local/wheels/$(basename "$wheel")
        [ -f "$target" ] || ln "$wheel" "$target" 2>/dev/null || cp "$wheel" "$target"
        echo "stack/prepare-build: $(basename "$wheel")"
    done
done
