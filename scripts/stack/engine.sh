#!/usr/bin/env bash
# Make a Docker engine and the Compose v2 plugin answer on this machine, installing and
# starting what is missing (used by .ci/run before the stack test; safe to run again).
#
# - Engine: Debian's docker.io, started in the background when its socket does not answer
#   (these machines have no systemd). Log: /var/log/dockerd-ci.log.
# - Compose v2: bookworm ships only compose 1.29; the v2 CLI plugin comes from the next
#   release's docker-compose package, fetched with a private apt state (the system's sources
#   and lists are not touched) and unpacked into /usr/local/lib/docker/cli-plugins.
# - mmdebstrap, for scripts/stack/base-images.sh.
set -euo pipefail

log() { echo "stack/engine: $*"; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if ((${#need[@]})); then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    log "starting dockerd"
    setsid nohup dockerd >>/var/log/dockerd-ci.log 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { log "dockerd did not answer; see /var/log/dockerd-ci.log"; exit 1; }
fi

if ! docker compose version >/dev/null 2>&1; then
    log "installing the Compose v2 plugin"
    state=$(mktemp -d)
    trap 'rm -rf "$state"' EXIT
    # The mirror the system already uses, with the next release's suite.
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [ -z "$mirror" ]; then
        mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
    fi
    mkdir -p "$state/lists/partial" "$state/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
        >"$state/sources.list"
    apt_opts=(-o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$state/sources.list" -o "Dir::Etc::SourceParts=-"
        -o "Dir::State::Lists=$state/lists" -o "Dir::Cache::Archives=$state/archives"
        -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
    apt-get "${apt_opts[@]}" update -qq
    (cd "$state" && apt-get "${apt_opts[@]}" download docker-compose >/dev/null)
    dpkg-deb -x "$state"/docker-compose_*.deb "$state/root"
    install -D -m 0755 "$state/root/usr/libexec/docker/cli-plugins/docker-compose" \
        /usr/local/lib/docker/cli-plugins/docker-compose
fi
log "$(docker compose version)"
