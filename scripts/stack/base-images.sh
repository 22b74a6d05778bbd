#!/usr/bin/env bash
# Make the base images docker-compose.yml and the Dockerfile name (python:3.11-slim,
# redis:7-alpine, postgres:16-alpine) exist in the local engine. An image already there is
# kept; a missing one is pulled when a registry answers, and otherwise built from Debian
# bookworm's packages with mmdebstrap under the same tag, so the project's own files run
# unchanged on a machine without a registry. The stand-ins keep the part of each official
# image's contract the stack uses:
#   python:3.11-slim  python/pip on PATH (Debian's Python 3.11), venv, ca-certificates.
#   redis:7-alpine    redis-server/redis-cli (Debian: Redis 7.0), user `redis`, /data.
#   postgres:16-alpine  postgres/initdb/pg_isready on PATH (Debian: PostgreSQL 15), user
#                     `postgres`, PGDATA=/var/lib/postgresql/data, POSTGRES_USER/_DB/
#                     _PASSWORD(_FILE) on first start (scripts/stack/base/postgres-entrypoint.sh).
# Usage: scripts/stack/base-images.sh [--force]   (--force rebuilds the stand-ins)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
force=${1:-}

log() { echo "stack/base-images: $*"; }

mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
security=${mirror%/debian}/debian-security

# build TAG PACKAGES HOOK IMPORT-CHANGES...
build() {
    local tag=$1 packages=$2 hook=$3
    shift 3
    if [ "$force" != --force ] && docker image inspect "$tag" >/dev/null 2>&1; then
        log "$tag: present"
        return
    fi
    if [ "$force" != --force ] && timeout 60 docker pull -q "$tag" >/dev/null 2>&1; then
        log "$tag: pulled"
        return
    fi
    log "$tag: building from Debian bookworm with mmdebstrap"
    local work
    work=$(mktemp -d)
    # /run is kept: the PostgreSQL image needs its /run/postgresql socket folder.
    mmdebstrap --quiet --variant=minbase --skip=cleanup/run --include="ca-certificates,$packages" \
        --customize-hook="$hook" \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
        bookworm "$work/rootfs.tar" \
        "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
        "deb $security bookworm-security main"
    local changes=()
    for c in "$@"; do changes+=(--change "$c"); done
    docker import "${changes[@]}" "$work/rootfs.tar" "$tag" >/dev/null
    rm -rf "$work"
    log "$tag: built ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%d MB", $1/1e6}'))"
}

build python:3.11-slim "python3,python3-venv,python3-pip" \
    'ln -sf /usr/bin/python3 "$1"/usr/local/bin/python && ln -sf /usr/bin/pip3 "$1"/usr/local/bin/pip && rm -f "$1"/usr/lib/python3.11/EXTERNALLY-MANAGED' \
    'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' 'ENV LANG=C.UTF-8' \
    'CMD ["python3"]'

build redis:7-alpine "redis-server,redis-tools" \
    'mkdir -p "$1"/data && chroot "$1" chown redis:redis /data' \
    'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' 'WORKDIR /data' \
    'VOLUME /data' 'EXPOSE 6379' 'CMD ["redis-server"]'

build postgres:16-alpine "postgresql-15" \
    "rm -rf \"\$1\"/var/lib/postgresql/15 \"\$1\"/etc/postgresql/15 && install -m 0755 '$here/base/postgres-entrypoint.sh' \"\$1\"/usr/local/bin/docker-entrypoint.sh && mkdir -p \"\$1\"/var/lib/postgresql/data \"\$1\"/var/run/postgresql && chroot \"\$1\" chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql && chmod 0700 \"\$1\"/var/lib/postgresql/data" \
    'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    'ENV PGDATA=/var/lib/postgresql/data' 'ENV LANG=C.UTF-8' 'VOLUME /var/lib/postgresql/data' \
    'EXPOSE 5432' 'ENTRYPOINT ["docker-entrypoint.sh"]' 'CMD ["postgres"]'
