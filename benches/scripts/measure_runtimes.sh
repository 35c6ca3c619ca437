#!/bin/bash
# Issue 5's must-show: cold O_DIRECT sequential scans of the default 1 GiB
# seqscan file on every runtime (threadpool, tokio-uring, glommio, uring; max_ios 16,
# io_combine_limit 16 = 128 KiB reads) against fio reading the same file with
# the same shape (O_DIRECT, io_uring, 128 KiB, depth 16) as the device's
# ceiling. Runs are interleaved — fio, threadpool, tokio-uring, glommio, uring, fio,
# … — REPS times each (default 5); before every run the script waits for a
# quiet machine (benches/scripts/quiet.sh).
# Prints every run, then per engine the median MiB/s (min–max), the ratio of
# medians to fio's, the median of per-round ratios, and max_in_flight.
# Logs go to target/measure/runtimes-<UTC time>/.
#
# Needs fio on PATH (Debian: apt-get install fio); installs nothing.
# Usage: benches/scripts/measure_runtimes.sh [REPS]   (from anywhere)
# SEQSCAN_ARGS="--ring off" (for example) adds seqscan options, for
# investigations; the must-show runs without it.
set -u
cd "$(dirname "$0")/../.."
reps=${1:-5}
extra=${SEQSCAN_ARGS:-}
command -v fio > /dev/null || {
  echo "measure_runtimes.sh: fio is needed (e.g. apt-get install fio)" >&2
  exit 1
}
cargo build --release -q --bin seqscan || exit 1
bin=./target/release/seqscan
out=target/measure/runtimes-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$out"
file=${CARGO_TARGET_DIR:-target}/pagestream-data/seqscan-1GiB.dat
# Create the default data file if needed (a hot-only run creates it).
[ -f "$file" ] || $bin --runtime threadpool --cache hot --json > /dev/null || exit 1
size=$(stat -c %s "$file")

. benches/scripts/quiet.sh   # quiet: idle CPUs and disks
# The value of "key": in a one-line JSON object.
field() { sed -E "s/.*\"$2\":\"?([^,\"}]*).*/\1/" <<< "$1"; }

results=$out/results.tsv # round engine mib_s max_in_flight mean_blocks reads waits
: > "$results"
echo "file $file ($size bytes), $reps rounds, seqscan extra options: ${extra:-none}; logs in $out"
for round in $(seq 1 "$reps"); do
  quiet
  fio --name=seqread --filename="$file" --readonly --direct=1 --ioengine=io_uring \
    --rw=read --bs=128k --iodepth=16 --size="$size" --output-format=json \
    > "$out/fio-$round.json" 2> "$out/fio-$round.err" || { cat "$out/fio-$round.err"; exit 1; }
  bw=$(grep -m1 '"bw_bytes"' "$out/fio-$round.json" | tr -dc '0-9')
  mib=$(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1048576 }')
  printf "%s\tfio\t%s\t-\t-\t-\t-\n" "$round" "$mib" >> "$results"
  echo "round $round fio: $mib MiB/s"
  for rt in threadpool tokio-uring glommio uring; do
    quiet
    # shellcheck disable=SC2086 # $extra is a list of options
    line=$($bin --runtime "$rt" --cache cold --direct --max-ios 16 --combine 16 --json \
      --file "$file" $extra 2> "$out/$rt-$round.err") || { cat "$out/$rt-$round.err"; exit 1; }
    echo "$line" > "$out/$rt-$round.json"
    mib=$(awk -v m="$(field "$line" mib_per_s)" 'BEGIN { printf "%.1f", m }')
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$round" "$rt" "$mib" \
      "$(field "$line" max_in_flight)" "$(field "$line" mean_blocks_per_read)" \
      "$(field "$line" reads)" "$(field "$line" waits)" >> "$results"
    echo "round $round $rt: $mib MiB/s, max_in_flight $(field "$line" max_in_flight)," \
      "reads $(field "$line" reads), blocks/read $(field "$line" mean_blocks_per_read)," \
      "waits $(field "$line" waits)"
  done
done
rm -f "$out/.t0" "$out/.t1"

echo
echo "summary over $reps rounds (cold, O_DIRECT, max_ios 16, io_combine_limit 16 / fio bs 128k iodepth 16):"
for e in fio threadpool tokio-uring glommio uring; do
  awk -F'\t' -v e="$e" '
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    $2 == "fio" { fio[$1] = $3; f[++nf] = $3 }
    $2 == e { v[++n] = $3; r[$1] = $3; mif = mif " " $4 }
    END {
      fm = median(f, nf); m = median(v, n); lo = v[1]; hi = v[n]
      for (k in r) q[++nq] = r[k] / fio[k]
      printf "  %-12s median %7.1f MiB/s (%.1f–%.1f)  %.2fx fio (ratio of medians), per-round ratios median %.2fx  max_in_flight:%s\n",
        e, m, lo, hi, m / fm, median(q, nq), mif
    }' "$results"
done | tee "$out/summary.txt"
