#!/usr/bin/env bash
# A local PostgreSQL for the Dagster instance (dagster.postgres.yaml): install, init, start, stop.
#
#   scripts/postgres.sh start    install Debian's postgresql if missing (as root), init a cluster in
#                                $REWARDBOX_PG_DATA, start it on 127.0.0.1:$REWARDBOX_PG_PORT, create the db
#   scripts/postgres.sh stop     stop that cluster (the data stays)
#   scripts/postgres.sh status   exit 0 when it accepts connections
#   scripts/postgres.sh env      print the variables dagster.postgres.yaml reads, as `export` lines
#
# Settings (environment; defaults in brackets): REWARDBOX_PG_DATA [<repo>/.postgres],
# REWARDBOX_PG_PORT [55432], REWARDBOX_PG_DB [rewardbox], REWARDBOX_PG_USER [rewardbox],
# REWARDBOX_PG_PASSWORD [rewardbox: a local development password; set your own elsewhere].
# The server listens on 127.0.0.1 only and asks every client for the password (scram-sha-256).
# PostgreSQL refuses to run as root: as root, the cluster's files belong to the `postgres` user
# (created by the package) and the server runs as that user.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export REWARDBOX_PG_HOST="127.0.0.1"
export REWARDBOX_PG_PORT="${REWARDBOX_PG_PORT:-55432}"
export REWARDBOX_PG_DB="${REWARDBOX_PG_DB:-rewardbox}"
export REWARDBOX_PG_USER="${REWARDBOX_PG_USER:-rewardbox}"
export REWARDBOX_PG_PASSWORD="${REWARDBOX_PG_PASSWORD:-rewardbox}"
DATA="${REWARDBOX_PG_DATA:-$ROOT/.postgres}"

die() { echo "postgres.sh: $*" >&2; exit 1; }

bindir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -n "$dir" && -x "$dir/pg_ctl" ]]; then echo "$dir"; return 0; fi
  if command -v pg_ctl >/dev/null 2>&1; then dirname "$(command -v pg_ctl)"; return 0; fi
  return 1
}

install_postgres() {
  bindir >/dev/null && return 0
  [[ "$(id -u)" == 0 ]] || die "PostgreSQL is not installed and installing it needs root: sudo apt-get install -y postgresql"
  command -v apt-get >/dev/null || die "PostgreSQL is not installed and there is no apt-get to install it"
  echo "postgres.sh: installing Debian's postgresql package" >&2
  apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 || die "apt-get install postgresql failed"
  bindir >/dev/null || die "postgresql installed but no pg_ctl found under /usr/lib/postgresql/*/bin"
}

# Run a server-side command (initdb, pg_ctl) as a user PostgreSQL accepts.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

client() {  # psql / createdb against our server with our password
  PGPASSWORD="$REWARDBOX_PG_PASSWORD" "$@" -h "$REWARDBOX_PG_HOST" -p "$REWARDBOX_PG_PORT" -U "$REWARDBOX_PG_USER"
}

init_cluster() {
  local bin="$1"
  [[ -f "$DATA/PG_VERSION" ]] && return 0
  mkdir -p "$DATA"
  local pwfile
  pwfile="$(mktemp)"
  printf '%s\n' "$REWARDBOX_PG_PASSWORD" >"$pwfile"
  if [[ "$(id -u)" == 0 ]]; then
    chown postgres: "$DATA" "$pwfile"
    chmod 700 "$DATA"
    runuser -u postgres -- test -w "$DATA" \
      || die "the postgres user cannot write $DATA (a parent folder is closed to it); set REWARDBOX_PG_DATA to a path under /tmp"
  fi
  as_owner "$bin/initdb" -D "$DATA" -U "$REWARDBOX_PG_USER" --pwfile="$pwfile" -E UTF8 \
    --auth-local=scram-sha-256 --auth-host=scram-sha-256 >"$DATA.initdb.log" 2>&1 \
    || { rm -f "$pwfile"; cat "$DATA.initdb.log" >&2; die "initdb failed (log above)"; }
  rm -f "$pwfile" "$DATA.initdb.log"
}

start() {
  install_postgres
  local bin
  bin="$(bindir)"
  init_cluster "$bin"
  if ! as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
      -o "-p $REWARDBOX_PG_PORT -k $DATA -c listen_addresses=$REWARDBOX_PG_HOST" start >/dev/null \
      || { tail -n 20 "$DATA/server.log" >&2 || true; die "the server did not start (log above)"; }
  fi
  if ! client "$bin/psql" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$REWARDBOX_PG_DB'" | grep -q 1; then
    client "$bin/createdb" "$REWARDBOX_PG_DB"
  fi
  echo "postgres.sh: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') ready on $REWARDBOX_PG_HOST:$REWARDBOX_PG_PORT, database $REWARDBOX_PG_DB, data in $DATA" >&2
}

stop() {
  local bin
  bin="$(bindir)" || die "PostgreSQL is not installed"
  [[ -f "$DATA/PG_VERSION" ]] || { echo "postgres.sh: no cluster in $DATA" >&2; return 0; }
  as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
}

status() {
  local bin
  bin="$(bindir)" || die "PostgreSQL is not installed"
  "$bin/pg_isready" -q -h "$REWARDBOX_PG_HOST" -p "$REWARDBOX_PG_PORT"
}

print_env() {
  for name in REWARDBOX_PG_HOST REWARDBOX_PG_PORT REWARDBOX_PG_DB REWARDBOX_PG_USER REWARDBOX_PG_PASSWORD; do
    printf 'export %s=%q\n' "$name" "${!name}"
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) print_env ;;
  *) die "usage: $0 start|stop|status|env" ;;
esac
