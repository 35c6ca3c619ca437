# Sourced by the measurement scripts: wait for a quiet machine before a
# measured invocation.
#
# quiet: waits (up to 300 s) until no other process uses more than 5% CPU
# (ps), the CPUs are at least 90% idle over a second (ps's %CPU is a
# lifetime average and misses a long-lived process that just got busy) and
# the disks moved less than 1 MiB in 2 s; prints "still busy: …" if it gave
# up. Each script takes /tmp/pagestream-measure.lock (flock) around its
# measured invocations so that two measurement scripts never overlap.
cpu_idle_pct() { # idle share of all CPUs over 1 s
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local tot=0 i
  for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  echo $(( tot > 0 ? 100 * (b[4] - a[4] + b[5] - a[5]) / tot : 100 ))
}
disk_kib() { # KiB read + written by whole disks so far
  awk '{ if (system("test -e /sys/block/" $3) == 0 && $3 !~ /^(loop|ram|zram|dm-|md|sr)/) s += $6 + $10 } END { printf "%.0f\n", s / 2 }' /proc/diskstats
}
quiet() {
  local busy="" idle d0 d1
  for _ in $(seq 1 300); do
    busy=$(ps -eo pcpu,comm --sort=-pcpu | awk 'NR>1 && $1>5.0 {print $2}' | head -3 | tr '\n' ' ')
    if [ -z "$busy" ]; then
      idle=$(cpu_idle_pct)
      d0=$(disk_kib); sleep 2; d1=$(disk_kib)
      [ "$idle" -ge 90 ] && [ $((d1 - d0)) -lt 1024 ] && return 0
      busy="cpu idle ${idle}%, disks $((d1 - d0)) KiB in 2 s"
    else
      sleep 1
    fi
  done
  echo "still busy: $busy"
}
# measured NAME CMD...: waits for quiet, runs CMD under the lock with its
# output and the machine's state before and after in target/measure/NAME.txt.
measured() {
  local name=$1; shift
  mkdir -p target/measure
  local log=target/measure/$name.txt
  (
    flock 9
    quiet > "target/measure/$name.quiet"
    { echo "## $(date -u +%T) $* (commit $(git rev-parse --short HEAD))"; cat "target/measure/$name.quiet"; ps -eo pcpu,comm --sort=-pcpu | head -4; } > "$log"
    "$@" >> "$log" 2>&1
    echo "exit $?" >> "$log"
    { echo "## after: $(date -u +%T) load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } >> "$log"
  ) 9> /tmp/pagestream-measure.lock
  echo "== $name: $*"
}
