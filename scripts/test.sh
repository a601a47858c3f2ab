#!/usr/bin/env bash
# The whole test set-up in one call: install kgen with its test and PostgreSQL extras; unless
# KGEN_TEST_PG_URL is given, provide a local PostgreSQL server for the database tests (Debian's
# package, when run as root with apt-get: a login role kgen/kgen, not a superuser, owning the
# database kgen_test; otherwise those tests skip, saying why); run pytest.
# Safe to re-run. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install '.[test,pg,dist]'

as_postgres() { runuser -u postgres -- "$@"; }

local_postgres() {
    if ! command -v pg_lsclusters >/dev/null; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
    fi
    if [[ -z "$(pg_lsclusters --no-header)" ]]; then
        pg_createcluster "$(ls /usr/lib/postgresql | sort -V | tail -1)" main
    fi
    local ver name port status
    read -r ver name port status _ < <(pg_lsclusters --no-header | head -1)
    [[ "$status" == online* ]] || pg_ctlcluster "$ver" "$name" start
    if [[ -z "$(as_postgres psql -p "$port" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'kgen'")" ]]; then
        as_postgres psql -p "$port" -c "CREATE ROLE kgen LOGIN PASSWORD 'kgen'"
    fi
    if [[ -z "$(as_postgres psql -p "$port" -tAc "SELECT 1 FROM pg_database WHERE datname = 'kgen_test'")" ]]; then
        as_postgres createdb -p "$port" -O kgen kgen_test
    fi
    export KGEN_TEST_PG_URL="postgresql+psycopg://kgen:kgen@localhost:$port/kgen_test"
}

if [[ -z "${KGEN_TEST_PG_URL:-}" && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    local_postgres
fi
python3 -m pytest -q "$@"
