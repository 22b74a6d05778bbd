#!/usr/bin/env bash
# Make the Docker secrets docker-compose.yml reads, one file each under SECRETS_DIR (default
# ./secrets, git-ignored): random passwords for PostgreSQL and Redis, Flower's `user:password`
# (user FLOWER_USER, default admin), and the API keys from OPENAI_API_KEY / ANTHROPIC_API_KEY in
# the shell, or empty files (that backend then says its key is unset). A file already there is
# kept: run it again after deleting one to make a new one. Prints the Flower login.
#
#   scripts/stack-secrets.sh            # then: docker compose up -d --wait
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SECRETS_DIR:-./secrets}
umask 077
mkdir -p "$dir"
chmod 0700 "$dir"

random() { python3 -c 'import secrets; print(secrets.token_hex(24))'; }

# write NAME VALUE: only when absent. The folder is private (0700); the files are readable
# (0644) because the containers read them as their own unprivileged users.
write() {
    local file=$dir/$1.txt
    if [ ! -e "$file" ]; then
        printf '%s\n' "$2" >"$file"
        echo "stack-secrets: wrote $file"
    fi
    chmod 0644 "$file"
}

write postgres_password "$(random)"
write redis_password "$(random)"
write flower_auth "${FLOWER_USER:-admin}:$(random)"
write openai_api_key "${OPENAI_API_KEY:-}"
write anthropic_api_key "${ANTHROPIC_API_KEY:-}"
echo "stack-secrets: Flower login (user:password) is in $dir/flower_auth.txt"
