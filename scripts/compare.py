#!/usr/bin/env python3
"""Before/after comparison of the rows where pagestream trailed, interleaved.

    scripts/compare.py BEFORE_BIN_DIR [AFTER_BIN_DIR] [--rounds N] [--rows 1,2,..]
                       [--labels BEFORE,AFTER] [--write PAGE]
    scripts/compare.py --reports BEFORE.json[,...] AFTER.json[,...] [--labels B,A]
                       [--write PAGE]

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

--reports compares two builds' `pagestream-bench report` runs (their
report.json; several runs of a build, comma-separated, are pooled: run
them alternating, before, after, before, after, so that the machine's
drift counts as noise): every cell both have, after/before of the medians,
the cells where after's fastest run is slower than before's slowest (worse
beyond the noise) or the reverse, and for pagestream's cells the
look-ahead each kept (mean distance, and mean frames pinned where the build
records `mean_pinned`). It prints every cell; the summary goes to stdout,
or with --write into its own block inside the compare block of PAGE.

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
# The matrix comparison (--reports --write), kept inside the block above.
RBEGIN = "<!-- compare-reports:begin -->"
REND = "<!-- compare-reports:end -->"

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


def pooled(paths):
    """{(section, row, engine): {"mib": [...], "distance": [...], "pinned": [...]}} over the
    runs of every report.json in paths (runs of one build pooled)."""
    out = {}
    for path in paths:
        d = json.load(open(path))
        for sec in d["sections"]:
            for row in sec["rows"]:
                for c in row["cells"]:
                    runs = [r for r in c.get("runs") or [] if r.get("mib_per_s") is not None]
                    if not runs:
                        continue
                    v = out.setdefault((sec["title"], row["label"], c["label"]),
                                       {"mib": [], "distance": [], "pinned": [], "rel": []})
                    v["mib"] += [r["mib_per_s"] for r in runs]
                    # Against the row's reference in the same report run
                    # (fio where it ran, else the best baseline), which the
                    # report measured alternating with this cell: what the
                    # machine's drift between report runs does not move.
                    ref, name = row.get("reference_mib_per_s"), row.get("reference")
                    if not ref:
                        ref, name = row.get("best_baseline_mib_per_s"), row.get("best_baseline")
                    if ref and c.get("median_mib_per_s") and c["label"] != name:
                        v["rel"].append(c["median_mib_per_s"] / ref)
                    v["distance"] += [r["mean_distance"] for r in runs
                                      if r.get("mean_distance") is not None]
                    v["pinned"] += [r["mean_pinned"] for r in runs
                                    if r.get("mean_pinned") is not None]
    return out


def compare_reports(before, after, labels=None):
    """Markdown: two builds' `pagestream-bench report` runs side by side.

    Each build's runs of a cell are pooled over its reports; a cell is worse
    (better) beyond the noise when after's fastest run is slower than
    before's slowest (or the reverse). Returns (the page's section, the
    table of every cell)."""
    b, a = pooled(before), pooled(after)
    common = [k for k in b if k in a]
    if not common:
        sys.exit("the reports of the two builds have no cell in common")
    names = labels or ["before", "after"]
    mm = lambda xs: f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"
    m1 = lambda xs: f"{statistics.median(xs):,.1f}" if xs else "—"
    full = ["| section | row | engine | before MiB/s | after MiB/s | after/before | beyond noise "
            "| against the row's reference, before → after "
            "| mean distance, before → after | mean frames pinned, before → after |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_sec = {}
    flagged = []
    for k in common:
        bv, av = b[k], a[k]
        r = statistics.median(av["mib"]) / statistics.median(bv["mib"])
        flag = ("worse" if max(av["mib"]) < min(bv["mib"])
                else "better" if min(av["mib"]) > max(bv["mib"]) else "")
        rel = (f"{statistics.median(bv['rel']):.2f}x → {statistics.median(av['rel']):.2f}x"
               if bv["rel"] and av["rel"] else "")
        line = (f"| {k[0]} | {k[1]} | {k[2]} | {mm(bv['mib'])} | {mm(av['mib'])} | {r:.2f}x "
                f"| {flag} | {rel} | {m1(bv['distance'])} → {m1(av['distance'])} "
                f"| {m1(bv['pinned'])} → {m1(av['pinned'])} |")
        full.append(line)
        if flag:
            flagged.append(line)
        s = by_sec.setdefault(k[0], {"r": [], "worse": 0, "better": 0, "pb": [], "pa": [],
                                      "fewer": 0, "more": 0, "rel": []})
        s["r"].append(r)
        if bv["rel"] and av["rel"]:
            s["rel"].append(statistics.median(av["rel"]) / statistics.median(bv["rel"]))
        if flag:
            s[flag] += 1
        if bv["pinned"] and av["pinned"]:
            pb, pa = statistics.median(bv["pinned"]), statistics.median(av["pinned"])
            s["pb"].append(pb)
            s["pa"].append(pa)
            s["fewer"] += pa < 0.9 * pb
            s["more"] += pa > 1.1 * pb
    times = lambda n: "once" if n == 1 else "twice" if n == 2 else f"{n} times"
    out = [f"Every cell both builds ran, before = `{names[0]}` (the report run {times(len(before))}), "
           f"after = `{names[1]}` (run {times(len(after))}), their runs pooled per build. A cell is worse (better) "
           f"beyond the noise when after's fastest run is slower than before's slowest (or the "
           f"reverse). Against the row's reference: the cell's median over the median of the row's "
           f"reference (fio where it ran, else the row's best baseline) in the same report run, which "
           f"the machine's drift between runs moves far less. Frames pinned: the mean over a "
           f"scan's pages of the frames its look-ahead held, median over the cell's runs.", "",
           "| section | cells | after/before, median (min–max) | worse | better "
           "| after/before against the row's reference, median (min–max) "
           "| frames pinned, median of the cells, before → after | cells pinning >10% fewer / more |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for sec, s in by_sec.items():
        rs = s["r"]
        pins = (f"{statistics.median(s['pb']):,.1f} → {statistics.median(s['pa']):,.1f}"
                if s["pb"] else "—")
        rl = s["rel"]
        rels = (f"{statistics.median(rl):.2f}x ({min(rl):.2f}–{max(rl):.2f})" if rl else "—")
        out.append(f"| {sec} | {len(rs)} | {statistics.median(rs):.2f}x ({min(rs):.2f}–{max(rs):.2f}) "
                   f"| {s['worse']} | {s['better']} | {rels} | {pins} | {s['fewer']} / {s['more']} |")
    rs = sorted(statistics.median(a[k]["mib"]) / statistics.median(b[k]["mib"]) for k in common)
    out += ["", f"{len(common)} cells; after/before median {statistics.median(rs):.2f}x "
            f"(from {rs[0]:.2f}x to {rs[-1]:.2f}x); {sum(s['worse'] for s in by_sec.values())} "
            f"worse and {sum(s['better'] for s in by_sec.values())} better beyond the noise."]
    if flagged:
        out += ["", "The cells beyond the noise:", "", full[0], full[1], *flagged]
    return "\n".join(out) + "\n", "\n".join(full) + "\n"


def report_runs(before, after, names):
    """A line per report run, in the order they finished: its build, command,
    end, length and what else the machine was doing."""
    runs = []
    for name, paths in ((names[0], before), (names[1], after)):
        for path in paths:
            d = json.load(open(path))
            cpu = d.get("cpu_use") or {}
            runs.append((d.get("finished", ""),
                         f"- {name}: `{d.get('command', '?')}`, finished {d.get('finished', '?')} "
                         f"after {d.get('seconds', 0):.0f} s; load average {d.get('load_before', '?')} "
                         f"before, 1-minute peak {d.get('load_peak', '?')}; other processes used "
                         f"{100 * cpu.get('others', 0):.0f}% of the CPU time, the hypervisor stole "
                         f"{100 * cpu.get('steal', 0):.1f}%"))
    d = json.load(open(after[0]))
    m = d.get("machine") or {}
    head = (f"Machine: {m.get('cpu_model', '?')} ({d.get('cpus', '?')} CPUs), Linux "
            f"{d.get('kernel', '?')}, {m.get('device', '?')}, read_ahead_kb "
            f"{m.get('read_ahead_kb', '?')}.\n\n")
    return head + "\n".join(line for _, line in sorted(runs)) + "\n"


def write_block(page, block, begin, end, inside=None):
    """Puts block between the markers begin and end of page (replacing what
    was there). Missing markers are added: at the end of the block between
    the markers `inside` if given (which must exist), else of the page."""
    text = open(page).read() if os.path.exists(page) else ""
    b = text.find(begin)
    e = text.find(end, b + len(begin)) if b >= 0 else -1
    if e >= 0:
        text = f"{text[:b + len(begin)]}\n{block}{text[e:]}"
    elif inside:
        at = text.find(inside[1], text.find(inside[0]))
        if text.find(inside[0]) < 0 or at < 0:
            sys.exit(f"{page} has no {inside[0]} block to put the matrix comparison in "
                     f"(run the rows' comparison with --write first)")
        text = f"{text[:at]}{begin}\n{block}{end}\n{text[at:]}"
    else:
        text = f"{text.rstrip()}\n\n{begin}\n{block}{end}\n".lstrip()
    with open(page, "w") as f:
        f.write(text)


def reports_main(argv):
    ap = argparse.ArgumentParser(prog="compare.py --reports",
                                 description="Compares two builds' `pagestream-bench report` runs.")
    ap.add_argument("before", help="the before build's report.json files, comma-separated")
    ap.add_argument("after", help="the after build's report.json files, comma-separated")
    ap.add_argument("before2", nargs="?", help="(older form) a second before run")
    ap.add_argument("--labels", default="", help="names of the two builds, e.g. 75606b1,HEAD")
    ap.add_argument("--write", metavar="PAGE")
    a = ap.parse_args(argv)
    before = a.before.split(",") + ([a.before2] if a.before2 else [])
    after = a.after.split(",")
    for f in before + after:
        if not os.path.isfile(f):
            sys.exit(f"{f}: no such report.json")
    labels = a.labels.split(",") if a.labels else None
    if labels is not None and len(labels) != 2:
        sys.exit(f"--labels {a.labels!r}: two names, BEFORE,AFTER")
    section, full = compare_reports(before, after, labels)
    print(full)
    cmd = " ".join(["scripts/compare.py", "--reports", *argv])
    block = (f"### The whole matrix\n\nCommand: `{cmd}`, over these report runs:\n\n"
             f"{report_runs(before, after, labels or ['before', 'after'])}\n{section}")
    if a.write:
        write_block(a.write, block, RBEGIN, REND, inside=(BEGIN, END))
        print(f"wrote the matrix comparison into {a.write}", file=sys.stderr)
    else:
        print(block)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--reports":
        reports_main(sys.argv[2:])
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
        # The matrix comparison inside the block, if any, stays.
        text = open(a.write).read() if os.path.exists(a.write) else ""
        rb = text.find(RBEGIN, text.find(BEGIN))
        re_ = text.find(REND, rb) if rb >= 0 else -1
        if rb >= 0 and re_ >= 0 and re_ < text.find(END, text.find(BEGIN)):
            block += "\n" + text[rb:re_ + len(REND)] + "\n"
        write_block(a.write, block, BEGIN, END)
        print(f"wrote the comparison into {a.write}", file=sys.stderr)
    else:
        print(block)


if __name__ == "__main__":
    main()
