#!/bin/sh
# Entry point of the locally built `postgres:16-alpine` stand-in (scripts/stack/base-images.sh):
# the part of the official image's contract that docker-compose.yml relies on. On first start
# (empty PGDATA) it creates the cluster with superuser POSTGRES_USER, whose password is read
# from POSTGRES_PASSWORD_FILE (or POSTGRES_PASSWORD), and database POSTGRES_DB; connections over
# the network need that password (scram-sha-256), the local socket is trusted.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
        password=$(cat "$POSTGRES_PASSWORD_FILE")
    else
        password=${POSTGRES_PASSWORD:-}
    fi
    if [ -z "$password" ]; then
        echo "postgres: set POSTGRES_PASSWORD_FILE (or POSTGRES_PASSWORD); refusing to start" >&2
        exit 1
    fi
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    pwfile=$(mktemp)
    printf '%s\n' "$password" >"$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    if [ "$db" != postgres ]; then
        pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
        createdb -U "$user" "$db"
        pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    fi
    echo "postgres: initialised $PGDATA (user $user, database $db)"
fi
exec "$@"
