#!/usr/bin/env python3
"""Before/after comparison of the rows where pagestream trailed, interleaved.

    scripts/compare.py BEFORE_BIN_DIR [AFTER_BIN_DIR] [--rounds N] [--rows 1,2,..]
                       [--labels BEFORE,AFTER] [--write PAGE]
    scripts/compare.py --reports BEFORE.json AFTER.json [BEFORE2.json]

The rows: 1 a hot scan against the same pages in memory, 2 a warm scan
against a 128 KiB read() loop, 3 buffered backward against forward, 4
random O_DIRECT reads against fio, 5 a dense bitmap against a pread loop
and fadvise prefetching.

BEFORE_BIN_DIR and AFTER_BIN_DIR hold release builds of `seqscan`,
`backscan` and `pagestream-bench` (AFTER defaults to target/release). To
build an older commit beside this one:

    git worktree add /tmp/before COMMIT
    (cd /tmp/before && CARGO_TARGET_DIR=/tmp/before-target cargo build --release \\
        -p pagestream-bench)
    scripts/compare.py /tmp/before-target/release --write docs/benchmarks.md

--reports compares two `pagestream-bench report` runs (their report.json):
every cell both have, after/before of the medians, and the cells where
after's fastest run is slower than before's slowest (worse beyond the
noise of either run) or the reverse; BEFORE2, a second run of the before
build made after AFTER's, widens before's range by the machine's drift.

Run it from the workspace root: the data files are
target/pagestream-data/seqscan-1GiB.dat and seqscan-256MiB.dat, created
there if missing. Every row runs its before and after invocations in alternation, round by
round (which build goes first alternates too), with the row's ceiling or
baseline measured in the same rounds. Figures are medians with min-max.
With --write, the markdown replaces the block between the compare markers
of PAGE (`pagestream-bench report` keeps that block when it rewrites the
page); without it, the markdown goes to stdout.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

BEGIN = "<!-- compare:begin -->"
END = "<!-- compare:end -->"

DATA = "target/pagestream-data"
BIG = f"{DATA}/seqscan-1GiB.dat"
SMALL = f"{DATA}/seqscan-256MiB.dat"


def run_json(cmd):
    """Runs cmd; returns its stdout's JSON objects. Fails loudly."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    out = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    if not out:
        sys.exit(f"no JSON from: {' '.join(cmd)}")
    return out


def med(xs):
    """'median (min–max)' of xs."""
    if not xs:
        return "—"
    m = statistics.median(xs)
    fmt = (lambda v: f"{v:,.0f}") if m >= 100 else (lambda v: f"{v:.2f}")
    return f"{fmt(m)} ({fmt(min(xs))}–{fmt(max(xs))})"


def ratio(xs):
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}–{max(xs):.2f})" if xs else "—"


class Machine:
    """Load and steal over the comparison (what else the machine was doing)."""

    def __init__(self):
        self.load0 = os.getloadavg()
        self.stat0 = self.stat()
        self.t0 = time.time()

    @staticmethod
    def stat():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal; guest time is
        # already counted in user and nice.
        return sum(v[:8]), v[7] if len(v) > 7 else 0

    def summary(self):
        tot1, st1 = self.stat()
        tot = max(1, tot1 - self.stat0[0])
        load1 = os.getloadavg()
        return (
            f"load average {self.load0[0]:.2f} at the start, {load1[0]:.2f} at the end; "
            f"the hypervisor stole {100 * (st1 - self.stat0[1]) / tot:.1f}% of CPU time; "
            f"{time.time() - self.t0:.0f} s in all"
        )


def alternate(rounds, builds, fn):
    """Calls fn(build) for every build, rounds times, alternating the order."""
    for r in range(rounds):
        order = builds if r % 2 == 0 else builds[::-1]
        for b in order:
            fn(b)
        print(f"  round {r + 1}/{rounds}", file=sys.stderr)


def hot(builds, rounds):
    """Row 1: hot scan, ns/page of the stream against the memory loop."""
    ns = {b: {"memory": [], "stream": [], "stream+prefetch": []} for b in builds}
    for_ratio = {b: [] for b in builds}

    def one(b):
        runs = run_json([f"{b}/seqscan", "--file", BIG, "--runtime", "uring", "--cache", "hot",
                         "--repeat", "3", "--json"])
        mem = [r["seconds"] * 1e9 / r["pages"] for r in runs if r["runtime"] == "memory"]
        for r in runs:
            if r["runtime"] == "memory":
                continue
            key = "stream+prefetch" if r.get("prefetch") else "stream"
            ns[b][key].append(r["seconds"] * 1e9 / r["pages"])
        ns[b]["memory"] += mem
        pre = [r["seconds"] * 1e9 / r["pages"] for r in runs
               if r["runtime"] != "memory" and r.get("prefetch")]
        if mem and pre:
            for_ratio[b].append(statistics.median(mem) / statistics.median(pre))

    alternate(rounds, builds, one)
    return ns, for_ratio


def warm(builds, rounds):
    """Row 2: warm 1 GiB scan, uring and threadpool against a 128 KiB read loop."""
    mib = {b: {"read-loop": [], "uring": [], "threadpool": []} for b in builds}
    rel = {b: {"uring": [], "threadpool": []} for b in builds}

    def one(b):
        runs = run_json([f"{b}/seqscan", "--file", BIG, "--runtime", "threadpool,uring",
                         "--cache", "warm", "--repeat", "5", "--json"])
        loop = [r["mib_per_s"] for r in runs if r["runtime"] == "read-loop"]
        mib[b]["read-loop"] += loop
        for rt in ("uring", "threadpool"):
            xs = [r["mib_per_s"] for r in runs if r["runtime"] == rt]
            mib[b][rt] += xs
            if xs and loop:
                rel[b][rt].append(statistics.median(xs) / statistics.median(loop))

    alternate(rounds, builds, one)
    return mib, rel


def backward(builds, rounds):
    """Row 3: buffered cold backward/forward with combining, per io_combine_limit."""
    rel = {b: {} for b in builds}

    def one(b):
        rows = run_json([f"{b}/backscan", "--file", SMALL, "--mode", "buffered",
                         "--combining", "on", "--combine", "8,16,32", "--pairs", "5", "--json"])
        for r in rows:
            if r["direction"] == "backward":
                rel[b].setdefault(r["combine"], []).append(r["bwd_fwd_pairs_median"])

    alternate(rounds, builds, one)
    return rel


def scan(b, engine, pattern, file, extra=()):
    cmd = [f"{b}/pagestream-bench", "scan", "--engine", engine, "--pattern", pattern,
           "--cache", "cold", "--max-ios", "16", "--file", file, "--json", *extra]
    return run_json(cmd)[0]["mib_per_s"]


def random_row(builds, rounds):
    """Row 4: random 8 KiB O_DIRECT, depth 16, each engine against fio."""
    engines = ["threadpool", "tokio-uring", "glommio", "uring"]
    mib = {b: {e: [] for e in engines} for b in builds}
    fio = []

    def one(b):
        for e in engines:
            mib[b][e].append(scan(b, e, "random", BIG, ["--direct"]))
        if b == builds[-1]:
            fio.append(scan(b, "fio", "random", BIG, ["--direct"]))

    alternate(rounds, builds, one)
    return mib, fio


def bitmap(builds, rounds):
    """Row 5: dense bitmap (half the blocks), buffered, kernel read-ahead on."""
    mib = {b: {"threadpool": [], "uring": []} for b in builds}
    gap = {"threadpool": [], "uring": []}
    base = {"pread-loop": [], "fadvise-prefetch": []}
    after = builds[-1]

    def one(b):
        for e in ("threadpool", "uring"):
            mib[b][e].append(scan(b, e, "bitmap:0.5", SMALL))
        if b == after:
            for e in ("threadpool", "uring"):
                gap[e].append(scan(b, e, "bitmap:0.5", SMALL, ["--gap-limit", "4"]))
            for e in base:
                base[e].append(scan(b, e, "bitmap:0.5", SMALL))

    alternate(rounds, builds, one)
    return mib, gap, base


def cells(path):
    """{(section, row, engine): (median, min, max, vs best baseline)} of a report.json."""
    d = json.load(open(path))
    out = {}
    for sec in d["sections"]:
        for row in sec["rows"]:
            for c in row["cells"]:
                if c.get("median_mib_per_s") is not None:
                    key = (sec["title"], row["label"], c["label"])
                    out[key] = (c["median_mib_per_s"], c["min_mib_per_s"], c["max_mib_per_s"],
                                c.get("vs_best_baseline"))
    return out


def compare_reports(before, after, before2=None):
    """Cells of two report runs side by side. With a second run of the
    before build (made after the after run), before's range spans both runs:
    the machine's drift between runs counts as noise."""
    b, a = cells(before), cells(after)
    if before2:
        b2 = cells(before2)
        b = {k: (statistics.median([v[0], b2[k][0]]), min(v[1], b2[k][1]), max(v[2], b2[k][2]),
                 v[3] if v[3] is None or b2[k][3] is None else (v[3] + b2[k][3]) / 2)
             for k, v in b.items() if k in b2}
    common = [k for k in b if k in a]
    if not common:
        sys.exit("the two reports have no cell in common")
    print("| section | row | engine | before MiB/s | after MiB/s | after/before | vs best baseline, "
          "before → after | beyond noise |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    worse = better = 0
    for k in common:
        (bm, bl, bh, bv), (am, al, ah, av) = b[k], a[k]
        flag = ""
        if ah < bl:
            flag, worse = "worse", worse + 1
        elif al > bh:
            flag, better = "better", better + 1
        vs = f"{bv:.2f}x → {av:.2f}x" if bv is not None and av is not None else ""
        print(f"| {k[0]} | {k[1]} | {k[2]} | {bm:,.0f} ({bl:,.0f}–{bh:,.0f}) "
              f"| {am:,.0f} ({al:,.0f}–{ah:,.0f}) | {am / bm:.2f}x | {vs} | {flag} |")
    ratios = sorted(a[k][0] / b[k][0] for k in common)
    print(f"\n{len(common)} cells in both; after/before median {statistics.median(ratios):.2f}x "
          f"(from {ratios[0]:.2f}x to {ratios[-1]:.2f}x); {worse} worse and {better} better "
          f"beyond the noise (after's min–max range entirely below or above before's"
          f"{', over both before runs' if before2 else ''})")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--reports":
        if len(sys.argv) not in (4, 5):
            sys.exit("usage: scripts/compare.py --reports BEFORE.json AFTER.json [BEFORE2.json]")
        compare_reports(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after", nargs="?", default="target/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default="1,2,3,4,5", help="which rows, e.g. 1,4")
    ap.add_argument("--labels", default="", help="names of the two builds, e.g. 65ed6a4,HEAD")
    ap.add_argument("--write", metavar="PAGE")
    a = ap.parse_args()
    try:
        rows = {int(x) for x in a.rows.split(",")}
    except ValueError:
        sys.exit(f"--rows {a.rows!r}: expected numbers from 1 to 5, comma-separated")
    if not rows or not rows <= {1, 2, 3, 4, 5}:
        sys.exit(f"--rows {a.rows!r}: the rows are 1 to 5")
    if a.rounds < 1:
        sys.exit(f"--rounds {a.rounds}: at least 1")
    names = a.labels.split(",") if a.labels else [a.before, a.after]
    if len(names) != 2:
        sys.exit(f"--labels {a.labels!r}: two names, BEFORE,AFTER")
    if 4 in rows and shutil.which("fio") is None:
        sys.exit("row 4 compares with fio, which is not installed (apt-get install fio)")
    # The same directory twice (a build against itself, for the noise) must
    # still be two keys.
    builds = [a.before, a.after if a.after != a.before else f"{a.after}/."]
    for b in builds:
        for exe in ("seqscan", "backscan", "pagestream-bench"):
            if not os.access(f"{b}/{exe}", os.X_OK):
                sys.exit(f"{b}/{exe}: not an executable (build it first, see --help)")
    for f, size in ((BIG, "1GiB"), (SMALL, "256MiB")):
        if not os.path.exists(f):
            run_json([f"{a.after}/seqscan", "--file", f, "--create", "--size", size,
                      "--runtime", "uring", "--cache", "none", "--json"])
    m = Machine()
    out = []
    B, A = builds
    hdr = "| row | measure | before | after | goal |\n| --- | --- | --- | --- | --- |"
    out.append(hdr)

    def row1():
        ns, rat = hot(builds, a.rounds)
        yield (f"| 1 hot scan, uring | memory loop / stream with prefetch | {ratio(rat[B])} "
               f"| {ratio(rat[A])} | ≥ 0.8x |")
        for k in ("stream+prefetch", "stream", "memory"):
            yield f"| | {k}, ns/page | {med(ns[B][k])} | {med(ns[A][k])} | |"

    def row2():
        mib, rel = warm(builds, a.rounds)
        for e in ("uring", "threadpool"):
            yield (f"| 2 warm 1 GiB, {e} | engine / 128 KiB read loop | {ratio(rel[B][e])} "
                   f"| {ratio(rel[A][e])} | ≥ 0.9x |")
        for k in ("uring", "threadpool", "read-loop"):
            yield f"| | {k}, MiB/s | {med(mib[B][k])} | {med(mib[A][k])} | |"

    def row3():
        rel = backward(builds, a.rounds)
        for c in sorted(rel[A]):
            yield (f"| 3 backward, buffered, cold, combine {c} | backward / forward time "
                   f"| {ratio(rel[B].get(c, []))} | {ratio(rel[A][c])} | ≤ 1.1x |")

    def row4():
        mib, fio = random_row(builds, a.rounds)
        fm = statistics.median(fio)
        for e in mib[A]:
            yield (f"| 4 random 8 KiB O_DIRECT depth 16, {e} | engine / fio (medians) "
                   f"| {statistics.median(mib[B][e]) / fm:.2f}x "
                   f"| {statistics.median(mib[A][e]) / fm:.2f}x | ≥ 0.9x |")
        for e in mib[A]:
            yield f"| | {e}, MiB/s | {med(mib[B][e])} | {med(mib[A][e])} | |"
        yield f"| | fio, MiB/s | | {med(fio)} | |"

    def row5():
        mib, gap, base = bitmap(builds, a.rounds)
        best = max(statistics.median(v) for v in base.values())
        for e in mib[A]:
            yield (f"| 5 bitmap 0.5, cold, buffered, {e} | engine / best baseline (medians) "
                   f"| {statistics.median(mib[B][e]) / best:.2f}x "
                   f"| {statistics.median(mib[A][e]) / best:.2f}x "
                   f"(`--gap-limit 4`: {statistics.median(gap[e]) / best:.2f}x) "
                   f"| ahead of every baseline |")
        for e in mib[A]:
            yield (f"| | {e}, MiB/s | {med(mib[B][e])} | {med(mib[A][e])} "
                   f"(`--gap-limit 4`: {med(gap[e])}) | |")
        for e, v in base.items():
            yield f"| | {e}, MiB/s | | {med(v)} | |"

    table = {1: ("hot", row1), 2: ("warm", row2), 3: ("backward", row3), 4: ("random", row4),
             5: ("bitmap", row5)}
    for r in sorted(rows):
        name, fn = table[r]
        print(f"row {r}: {name}", file=sys.stderr)
        lines = list(fn())
        # Shown as soon as measured: a later failure loses only the rest.
        print("\n".join(lines), file=sys.stderr)
        out.extend(lines)
    md = "\n".join(out) + "\n"
    cmds = {
        1: f"`seqscan --file {BIG} --runtime uring --cache hot --repeat 3` (each run times the memory loop and the "
           "stream with prefetch on and off)",
        2: f"`seqscan --file {BIG} --runtime threadpool,uring --cache warm --repeat 5` (each run times the 128 KiB "
           "`read()` loop too)",
        3: f"`backscan --file {SMALL} --mode buffered --combining on --combine 8,16,32 --pairs 5`",
        4: f"`pagestream-bench scan --engine E --pattern random --cache cold --direct --max-ios 16 "
           f"--file {BIG}`, E each engine and fio (fio once a round, with the after build)",
        5: f"`pagestream-bench scan --engine E --pattern bitmap:0.5 --cache cold --max-ios 16 --file "
           f"{SMALL}`, E threadpool and uring (after: also `--gap-limit 4`), pread-loop and "
           f"fadvise-prefetch (once a round)",
    }
    md += "\nThe commands, run with each build's binaries:\n\n" + "".join(
        f"{r}. {cmds[r]}\n" for r in sorted(rows))
    cmd = " ".join(["scripts/compare.py", *sys.argv[1:]])
    block = (
        f"## Before and after\n\n"
        f"The rows where pagestream trailed a baseline, measured side by side: before = "
        f"`{names[0]}`, after = `{names[1]}`, "
        f"{a.rounds} rounds, the two builds alternating. Ratios are medians (min–max) of the "
        f"rounds' ratios, or of medians where marked; MiB/s and ns/page are medians (min–max) "
        f"of all runs. Command: `{cmd}`. Machine during the run: {m.summary()}.\n\n{md}"
    )
    if a.write:
        text = open(a.write).read() if os.path.exists(a.write) else ""
        b = text.find(BEGIN)
        e = text.find(END, b + len(BEGIN)) if b >= 0 else -1
        if e >= 0:
            text = f"{text[:b + len(BEGIN)]}\n{block}{text[e:]}"
        else:
            text = f"{text.rstrip()}\n\n{BEGIN}\n{block}{END}\n".lstrip()
        with open(a.write, "w") as f:
            f.write(text)
        print(f"wrote the comparison into {a.write}", file=sys.stderr)
    else:
        print(block)


if __name__ == "__main__":
    main()
