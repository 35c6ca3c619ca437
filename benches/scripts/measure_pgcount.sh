#!/bin/bash
# Issue 7's must-show: hot pgcount over the seed's table against PostgreSQL's
# own count(*) on the same files.
#
# Makes (once; kept for later runs) a PostgreSQL 15 cluster in
# target/pgcount-pg/ holding the seed's table
#   create table t (i int, filler text) with (fillfactor=10);
#   insert into t select g, repeat('x', 900) from generate_series(1, ROWS) g;
#   vacuum freeze t;
# (ROWS=560000 by default: one row per page, 560,000 pages, 4.3 GiB in five
# 1 GiB segment files). Then:
#  1. PostgreSQL, hot: shared_buffers big enough for the table,
#     max_parallel_workers_per_gather = 0, pg_prewarm('t'), then
#     `select count(*) from t` under \timing, once to warm up and REPS times.
#  2. The server stopped: pgcount --cache hot --repeat REPS (a pool holding
#     the whole relation, filled by one scan; every timed scan reads nothing),
#     prefetch off and on, twice, interleaved; the prefetch-off runs also
#     count the same pages held in one buffer without a stream (--baseline),
#     for the stream's cost per page; pgcount --cache warm.
# pgcount's count and sum must equal the server's.
# Logs go to target/measure/pgcount-<UTC time>/; prints medians (min–max).
#
# Holds /tmp/pagestream-measure.lock while it runs (the machine is shared)
# and waits for a quiet machine (quiet.sh) before each measured step.
# Needs PostgreSQL 15 (PG_BINDIR, default /usr/lib/postgresql/15/bin) with
# pg_prewarm, about 2.5x the table's size free on disk and 3x in memory.
# Usage: benches/scripts/measure_pgcount.sh [REPS]   (from anywhere)
set -u
cd "$(dirname "$0")/../.."
. benches/scripts/quiet.sh
reps=${1:-5}
rows=${ROWS:-560000}
bindir=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
base=$(realpath -m "${PGCOUNT_DIR:-target/pgcount-pg}")
out=target/measure/pgcount-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$out"
log=$out/log.txt
say() { echo "$*" | tee -a "$log"; }

for p in initdb pg_ctl psql postgres; do
  [ -x "$bindir/$p" ] || { echo "measure_pgcount.sh: $bindir/$p is missing (PG_BINDIR)" >&2; exit 1; }
done
cargo build --release -q --bin pgcount || exit 1
bin=$(realpath target/release/pgcount)

exec 9> /tmp/pagestream-measure.lock
say "## $(date -u +%T) waiting for /tmp/pagestream-measure.lock"
flock 9
say "## $(date -u +%T) have the lock; load $(cat /proc/loadavg)"

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
data=$base/data
psql_() { as_pg "$bindir/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$base" -U postgres -d postgres "$@"; }
table_bytes=$((rows * 8192))
start_server() { # extra postgres options
  as_pg "$bindir/pg_ctl" -w -t 600 -D "$data" -l "$base/server.log" \
    -o "-c listen_addresses='' -k $base -c autovacuum=off $*" start >> "$log" || exit 1
}
stop_server() { as_pg "$bindir/pg_ctl" -w -t 600 -m fast -D "$data" stop >> "$log" || exit 1; }

if [ ! -f "$base/ready-$rows" ]; then
  avail=$(df --output=avail -B1 "$(dirname "$base")" | tail -1)
  need=$((table_bytes * 5 / 2))
  if [ "$avail" -lt "$need" ]; then
    echo "measure_pgcount.sh: $avail bytes free under $(dirname "$base"), need $need" >&2
    exit 1
  fi
  say "## $(date -u +%T) creating the table ($rows rows) in $base"
  rm -rf "$base"
  mkdir -p "$base"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$base"
  as_pg "$bindir/initdb" -A trust -U postgres -E UTF8 --locale C -D "$data" >> "$log" || exit 1
  # wal_level minimal: the insert in the creating transaction skips WAL.
  start_server "-c fsync=off -c full_page_writes=off -c wal_level=minimal -c max_wal_senders=0 \
    -c max_wal_size=2GB -c shared_buffers=512MB"
  t0=$(date +%s)
  psql_ <<EOF >> "$log" || exit 1
begin;
create table t (i int, filler text) with (fillfactor=10);
insert into t select g, repeat('x', 900) from generate_series(1, $rows) g;
commit;
vacuum freeze t;
checkpoint;
EOF
  stop_server
  # fsync was off while loading: make the files durable before trusting them.
  sync
  say "## $(date -u +%T) table made in $(( $(date +%s) - t0 )) s"
  touch "$base/ready-$rows"
fi

# 1. PostgreSQL, hot.
say "## $(date -u +%T) waiting for a quiet machine: $(quiet)"
sb_mb=$((table_bytes / 1048576 + 512))
start_server "-c shared_buffers=${sb_mb}MB -c max_parallel_workers_per_gather=0 -c jit=off"
rel=$data/$(psql_ -c "select pg_relation_filepath('t')")
psql_ -c "create extension if not exists pg_prewarm" > /dev/null
say "## $(date -u +%T) pg_prewarm: $(psql_ -c "select pg_prewarm('t')") blocks; relation $rel"
expect=$(psql_ -c "select count(*) || ' ' || sum(i) from t")
{
  echo '\timing on'
  for _ in $(seq 0 "$reps"); do echo 'select count(*) from t;'; done
} | psql_ -f - > "$out/postgres.txt" 2>&1 || { cat "$out/postgres.txt"; exit 1; }
pages=$(psql_ -c "select pg_relation_size('t') / 8192")
stop_server
say "## $(date -u +%T) PostgreSQL: count, sum = $expect; $pages pages; stopped"
# The first timed query is the warm-up.
grep -o 'Time: [0-9.]*' "$out/postgres.txt" | awk '{print $2}' | tail -n +2 > "$out/postgres.ms"

# 2. pgcount.
run() { # name args...
  local name=$1; shift
  say "## $(date -u +%T) waiting for a quiet machine: $(quiet)"
  say "## $(date -u +%T) pgcount $rel $* --json; load $(cat /proc/loadavg)"
  "$bin" "$rel" "$@" --json > "$out/$name.json" 2> "$out/$name.err" || { cat "$out/$name.err"; exit 1; }
  while read -r l; do
    got=$(echo "$l" | sed -E 's/.*"tuples":([0-9]+),"sum":(-?[0-9]+|null).*/\1 \2/')
    [ "$got" = "$expect" ] || { say "MISMATCH: pgcount says $got, PostgreSQL $expect"; exit 1; }
  done < "$out/$name.json"
}
run hot-prefetch-off-1 --cache hot --repeat "$reps" --prefetch off --baseline
run hot-prefetch-on-1 --cache hot --repeat "$reps" --prefetch on
run hot-prefetch-off-2 --cache hot --repeat "$reps" --prefetch off --baseline
run hot-prefetch-on-2 --cache hot --repeat "$reps" --prefetch on
run warm --cache warm --repeat 3

# Summary: median (min–max) of pages/s.
spread() { # numbers on stdin -> "median (min–max)"
  sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
    printf "%.4g (%.4g–%.4g) n=%d", m, v[1], v[NR], NR}'
}
# pages_per_s of the stream's runs (or, with in-memory, of the baseline's).
pps() { grep -h -v '"runtime":"in-memory"' "$@" | sed -E 's/.*"pages_per_s":([0-9.e+]+).*/\1/'; }
pps_mem() { grep -h '"runtime":"in-memory"' "$@" | sed -E 's/.*"pages_per_s":([0-9.e+]+).*/\1/'; }
median() { sort -g | awk '{v[NR]=$1} END {print NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
{
  echo
  echo "summary ($pages pages; count, sum = $expect; pgcount's equal in every run)"
  echo "  PostgreSQL 15 hot count(*), ms:      $(spread < "$out/postgres.ms")"
  echo "  PostgreSQL 15 hot count(*), pages/s: $(awk -v p="$pages" '{print p / ($1 / 1000)}' "$out/postgres.ms" | spread)"
  echo "  pgcount hot, prefetch off, pages/s:  $(pps "$out"/hot-prefetch-off-*.json | spread)"
  echo "  pgcount hot, prefetch on, pages/s:   $(pps "$out"/hot-prefetch-on-*.json | spread)"
  echo "  in memory, no stream, pages/s:       $(pps_mem "$out"/hot-prefetch-off-*.json | spread)"
  s_off=$(pps "$out"/hot-prefetch-off-*.json | median)
  s_on=$(pps "$out"/hot-prefetch-on-*.json | median)
  mem=$(pps_mem "$out"/hot-prefetch-off-*.json | median)
  awk -v a="$s_off" -v b="$s_on" -v m="$mem" 'BEGIN {
    printf "  per page (medians): stream %.1f ns (prefetch on %.1f ns), in memory %.1f ns: stream overhead %.1f ns (%.1f ns with prefetch)\n",
      1e9 / a, 1e9 / b, 1e9 / m, 1e9 / a - 1e9 / m, 1e9 / b - 1e9 / m }'
  echo "  pgcount warm, pages/s:               $(pps "$out"/warm.json | spread)"
  echo "  pgcount warm, MiB/s:                 $(sed -E 's/.*"mib_per_s":([0-9.e+]+).*/\1/' "$out"/warm.json | spread)"
  echo "  commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- benches/src/bin/pgcount core/src runtimes/src adapters || echo ' (+ uncommitted changes)')"
} | tee -a "$log"
