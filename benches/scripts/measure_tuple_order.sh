#!/bin/bash
# Seed 002's question for pgcount: does the order a page's tuples are
# visited in change the speed of a hot count(*)? Makes (once) a throwaway
# PostgreSQL 15 cluster in target/tuple-order-pg/ holding seed 002's table
# shape with many tuples per page,
#   create table large (a int4 not null, b int8 not null default 0, c int8);
#   insert into large select g from generate_series(1, ROWS) g;  -- ROWS=10000000: 54,055 pages, 185 tuples each
#   vacuum freeze large; checkpoint;
# stops it, then runs pgcount --cache hot --repeat 3 with --tuple-order lp
# and reverse, alternating, PAIRS times (default 5), under the measurement
# lock after a quiet-machine wait, and prints every run and the medians.
# Usage: benches/scripts/measure_tuple_order.sh [PAIRS]   (from anywhere)
set -u
cd "$(dirname "$0")/../.."
. benches/scripts/quiet.sh
pairs=${1:-5}
rows=${ROWS:-10000000}
bindir=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
base=$(realpath -m target/tuple-order-pg)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cargo build --release -q --bin pgcount || exit 1
if [ ! -s "$base/relpath" ]; then
  rm -rf "$base"; mkdir -p "$base"; [ "$(id -u)" = 0 ] && chown postgres "$base"
  as_pg "$bindir/initdb" -D "$base/data" -A trust > "$base/initdb.log" || exit 1
  as_pg "$bindir/pg_ctl" -D "$base/data" -l "$base/server.log" \
    -o "-k $base -c listen_addresses='' -c max_wal_size=4GB" start > /dev/null || exit 1
  as_pg "$bindir/psql" -h "$base" -d postgres -qAt -v ON_ERROR_STOP=1 \
    -c "create table large (a int4 not null, b int8 not null default 0, c int8)" \
    -c "insert into large select g from generate_series(1, $rows) g" \
    -c "vacuum freeze large" -c "checkpoint" \
    -c "select pg_relation_filepath('large') || ' ' || count(*) || ' ' || sum(a) from large" > "$base/answer" || exit 1
  as_pg "$bindir/pg_ctl" -D "$base/data" stop > /dev/null || exit 1
  cut -d' ' -f1 "$base/answer" > "$base/relpath"
fi
rel=$base/data/$(cat "$base/relpath")
echo "PostgreSQL said (path count sum): $(cat "$base/answer")"
out=target/measure/tuple-order.txt
{
  flock 9
  quiet
  echo "## $(date -u +%T) commit $(git rev-parse --short HEAD): pgcount $rel --cache hot --repeat 3 --tuple-order lp|reverse, $pairs alternating pairs"
  for _ in $(seq 1 "$pairs"); do
    for o in lp reverse; do
      ./target/release/pgcount "$rel" --cache hot --repeat 3 --tuple-order "$o" --json 2> /dev/null |
        python3 -c 'import sys, json
for l in sys.stdin:
    j = json.loads(l); print(j["tuple_order"], j["tuples"], j["sum"], "%.2f ms" % (j["seconds"] * 1e3))'
    done
  done
} 9> /tmp/pagestream-measure.lock | tee "$out"
python3 - "$out" <<'PY'
import sys, statistics
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5 and f[0] in ("lp", "reverse"):
        runs.setdefault(f[0], []).append(float(f[3]))
for k, v in runs.items():
    print(f"{k}: median {statistics.median(v):.1f} ms ({min(v):.1f}–{max(v):.1f}), {len(v)} runs")
PY
