#!/usr/bin/env bash
# Tests scripts/pg-cluster, which the PostgreSQL tests and scripts/test stand on: start prints a
# URL that works, start again is a no-op printing the same URL, a cluster killed with SIGKILL
# starts again on the same URL with its data, stop is idempotent, a bad port is refused, and
# --sync-standby gives a synchronous standby that, promoted after the primary is killed, holds
# every committed row and answers the multi-host URL; tmpdir gives a directory for clusters.
# Exit 77 (skip) when PostgreSQL is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
cluster=scripts/pg-cluster

# tmpdir: a fresh directory the postgres user can enter, on tmpfs when /dev/shm has room.
root=$($cluster tmpdir fp-pg-cluster-test)
cleanup() {
  for d in "$root"/*; do [ -d "$d" ] && $cluster stop "$d" >/dev/null 2>&1 || true; done
  rm -rf "$root"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
[ -d "$root" ] && [ -z "$(ls -A "$root")" ] || fail "tmpdir printed '$root'"
[ "$(stat -c %a "$root")" = 755 ] || fail "tmpdir's mode is $(stat -c %a "$root")"
# On tmpfs when /dev/shm clearly has room (well above the 4 GiB it asks for: other tests may
# be filling it meanwhile).
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
  [ "$(df --output=avail -k /dev/shm | tail -1)" -ge $((8 * 1024 * 1024)) ]; then
  [[ "$root" == /dev/shm/fp-pg-cluster-test.* ]] || fail "tmpdir not on tmpfs: $root"
fi
sql() { /usr/bin/psql -XAtq -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }

set +e
url=$($cluster start "$root/a")
code=$?
set -e
[ $code -eq 77 ] && { echo "skipped: PostgreSQL is missing"; exit 77; }
[ $code -eq 0 ] || fail "start exited with $code"
[[ "$url" =~ ^postgresql://postgres@127\.0\.0\.1:[0-9]+/postgres$ ]] || fail "start printed '$url'"
[ "$(sql "$url" 'SHOW fsync')" = off ] || fail "fsync is not off"
[ "$(sql "$url" 'SHOW max_connections')" -ge 300 ] || fail "max_connections below 300"
[ "$(sql "$url" "SHOW listen_addresses")" = 127.0.0.1 ] || fail "listens beyond loopback"
[ "$($cluster url "$root/a")" = "$url" ] || fail "url differs from start's"
[ "$($cluster start "$root/a")" = "$url" ] || fail "a second start changed the URL"
sql "$url" "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"

# A crash: the restart keeps the port (clients reconnect to the same URL) and the data.
pid=$($cluster pid "$root/a")
kill -KILL "$pid"
[ "$($cluster start "$root/a")" = "$url" ] || fail "restart after SIGKILL changed the URL"
[ "$(sql "$url" 'SELECT count(*) FROM t')" = 1 ] || fail "data lost across SIGKILL"

$cluster stop "$root/a"
$cluster stop "$root/a" || fail "a second stop failed"
if sql "$url" 'SELECT 1' 2>/dev/null; then fail "answers after stop"; fi
if $cluster start "$root/b" --port 0x10 2>/dev/null; then fail "accepted port 0x10"; fi
if $cluster url "$root/none" 2>/dev/null; then fail "url of no cluster"; fi

# A primary with a synchronous standby, then failover.
pair=$($cluster start "$root/p" --sync-standby "$root/s")
[[ "$pair" =~ ^postgresql://postgres@127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+/postgres\?target_session_attrs=read-write$ ]] ||
  fail "start --sync-standby printed '$pair'"
primary=$($cluster url "$root/p" | sed -E 's#@127\.0\.0\.1:([0-9]+),[^/]*/#@127.0.0.1:\1/#; s#\?.*##')
[ "$(sql "$primary" "SELECT sync_state FROM pg_stat_replication")" = sync ] ||
  fail "the standby is not synchronous"
sql "$pair" "CREATE TABLE u (x int); INSERT INTO u SELECT generate_series(1, 100)"
kill -KILL "$($cluster pid "$root/p")"
$cluster promote "$root/s"
[ "$(sql "$pair" 'SELECT count(*) FROM u')" = 100 ] || fail "committed rows missing on the standby"
[ "$(sql "$pair" 'SELECT pg_is_in_recovery()')" = f ] || fail "multi-host URL reached no primary"
echo "pg-cluster: all checks passed"
