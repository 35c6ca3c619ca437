//! The report as documentation: `docs/benchmarks.md` with its charts in
//! `docs/benchmarks/`, and the headline block of `README.md`.
//!
//! The page is generated whole by `report`; it records what a reader needs
//! to judge the numbers: the machine (CPU, memory, kernel, the data file's
//! device, file system and `read_ahead_kb`), what else the machine was doing
//! during the run (load average, other processes' CPU time, hypervisor
//! steal), the command, the commit and the date. The README block holds a
//! compact headline table between [`BEGIN`] and [`END`]; without both
//! markers the README is left alone.

use crate::chart::{self, COLORS};
use crate::pattern::Pattern;
use crate::report::{self, ChartFile, Meta, Remote, Row, Section};
use crate::scan::{self, Engine};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The line before the README's headline block.
pub const BEGIN: &str = "<!-- headline:begin -->";
/// The line after the README's headline block.
pub const END: &str = "<!-- headline:end -->";

/// The line before the benchmark page's before/after block, which
/// `scripts/compare.py` writes and a report keeps when it rewrites the page.
pub const COMPARE_BEGIN: &str = "<!-- compare:begin -->";
/// The line after that block.
pub const COMPARE_END: &str = "<!-- compare:end -->";

/// The before/after block of a benchmark page's text, markers included;
/// `None` if it has none (or its markers are out of order).
pub fn compare_block(page: &str) -> Option<&str> {
    let b = page.find(COMPARE_BEGIN)?;
    let e = b + page[b..].find(COMPARE_END)? + COMPARE_END.len();
    Some(&page[b..e])
}

/// The machine the report ran on.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// `/proc/cpuinfo`'s model name.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `MemTotal`, bytes.
    pub memory: u64,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// The data files' block device: name, model, rotational or not.
    pub device: String,
    /// The data files' file system type and mount point.
    pub fs: String,
    /// The device's kernel read-ahead window, KiB.
    pub read_ahead_kb: Option<u64>,
    /// `fio --version`, if fio is installed.
    pub fio: Option<String>,
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Machine {
    /// Probes the machine; `file` and `dev` (its block device,
    /// `major:minor`) are a data file the report reads.
    pub fn probe(file: Option<&Path>, dev: Option<(u32, u32)>) -> Machine {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown CPU".into(), |(_, v)| v.trim().to_string());
        let memory = read("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        // A partition's queue settings are its disk's.
        let sys = dev.map(|(a, b)| PathBuf::from(format!("/sys/dev/block/{a}:{b}")));
        let queue = sys.as_ref().and_then(|s| {
            [s.join("queue"), s.join("../queue")]
                .into_iter()
                .find(|q| q.is_dir())
        });
        let read_ahead_kb = queue
            .as_ref()
            .and_then(|q| read(q.join("read_ahead_kb"))?.parse().ok());
        let device = match &sys {
            Some(s) => {
                let name = std::fs::canonicalize(s)
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "?".into());
                let model = [s.join("device/model"), s.join("../device/model")]
                    .into_iter()
                    .find_map(read)
                    .filter(|m| !m.is_empty());
                let rot = queue
                    .as_ref()
                    .and_then(|q| read(q.join("rotational")))
                    .map(|r| {
                        if r == "1" {
                            "rotational, as the kernel reports it"
                        } else {
                            "non-rotational"
                        }
                    });
                let mut d = format!("/dev/{name}");
                let extra: Vec<&str> = model.as_deref().into_iter().chain(rot).collect();
                if !extra.is_empty() {
                    let _ = write!(d, " ({})", extra.join(", "));
                }
                d
            }
            None => "unknown (no block device: tmpfs or overlay?)".into(),
        };
        let fs = file.and_then(mount_of).unwrap_or_else(|| "unknown".into());
        let fio = std::process::Command::new("fio")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory,
            kernel: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
            device,
            fs,
            read_ahead_kb,
            fio,
        }
    }

    /// One line: CPU, memory, kernel.
    pub fn summary(&self) -> String {
        format!(
            "{} ({} CPUs), {:.0} GiB memory, Linux {}",
            self.cpu_model,
            self.cpus,
            self.memory as f64 / (1u64 << 30) as f64,
            self.kernel
        )
    }
}

/// `FSTYPE on MOUNTPOINT` of the mount holding `file` (`/proc/self/mountinfo`,
/// longest matching mount point).
fn mount_of(file: &Path) -> Option<String> {
    let file = std::fs::canonicalize(file).ok()?;
    let info = read("/proc/self/mountinfo")?;
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let mp = *f.get(4)?;
            let dash = f.iter().position(|x| *x == "-")?;
            let fstype = *f.get(dash + 1)?;
            file.starts_with(mp)
                .then(|| (mp.len(), format!("{fstype} on {mp}")))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, s)| s)
}

/// Names of the other programs running or runnable now (state `R` in
/// `/proc/PID/stat`; not kernel threads, not this process's children),
/// with how many of each.
pub fn running_others() -> BTreeMap<String, usize> {
    let me = std::process::id().to_string();
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Some(stat) = read(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state …: comm may hold spaces and parentheses.
        let (Some(a), Some(b)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        // Kernel threads have no command line: only programs are named.
        let user = read(e.path().join("cmdline")).is_some_and(|c| !c.is_empty());
        // State, then the parent: this report's own children (fio) are not
        // "other" processes.
        let mut rest = stat[b + 1..].split_whitespace();
        let running = rest.next() == Some("R");
        let child = rest.next() == Some(me.as_str());
        if user && running && !child {
            *out.entry(stat[a + 1..b].to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// Keeps, per name, the most processes of that name seen in one sample.
pub fn merge_running(into: &mut BTreeMap<String, usize>, sample: BTreeMap<String, usize>) {
    for (k, n) in sample {
        let e = into.entry(k).or_insert(0);
        *e = (*e).max(n);
    }
}

/// The machine's CPU counters at one moment (`/proc/stat`'s `cpu` line) and
/// this process's CPU time (with its waited-for children, such as fio).
#[derive(Debug, Clone, Copy)]
pub struct CpuSnap {
    wall: Instant,
    busy: u64,
    steal: u64,
    own: f64,
}

/// What the CPUs did between two [`CpuSnap`]s, as fractions of all CPUs'
/// time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuUse {
    /// Time busy running this report (this process and its children).
    pub own: f64,
    /// Time busy running other processes.
    pub others: f64,
    /// Time the hypervisor gave this machine's vCPUs to someone else.
    pub steal: f64,
}

fn own_cpu_seconds() -> f64 {
    let mut total = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage into the valid pointer given.
        if unsafe { libc::getrusage(who, &mut ru) } == 0 {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            total += tv(ru.ru_utime) + tv(ru.ru_stime);
        }
    }
    total
}

impl CpuSnap {
    /// The counters now; `None` without `/proc/stat`.
    pub fn now() -> Option<CpuSnap> {
        let own = own_cpu_seconds();
        let text = read("/proc/stat")?;
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal
        let get = |i: usize| v.get(i).copied().unwrap_or(0);
        Some(CpuSnap {
            wall: Instant::now(),
            busy: get(0) + get(1) + get(2) + get(5) + get(6),
            steal: get(7),
            own,
        })
    }

    /// From `self` to `later`.
    pub fn until(&self, later: &CpuSnap) -> CpuUse {
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let all = later.wall.duration_since(self.wall).as_secs_f64() * cpus;
        if all <= 0.0 {
            return CpuUse {
                own: 0.0,
                others: 0.0,
                steal: 0.0,
            };
        }
        let busy = later.busy.saturating_sub(self.busy) as f64 / hz;
        let own = (later.own - self.own).max(0.0);
        CpuUse {
            own: own / all,
            others: (busy - own).max(0.0) / all,
            steal: later.steal.saturating_sub(self.steal) as f64 / hz / all,
        }
    }
}

/// Where `report` writes documentation.
#[derive(Debug, Clone)]
pub struct Targets {
    /// The page (docs/benchmarks.md).
    pub doc: PathBuf,
    /// The README whose headline block is rewritten, if any.
    pub readme: Option<PathBuf>,
}

impl Targets {
    /// `doc` and `readme` as given; where not given, `docs/benchmarks.md`
    /// and `README.md` of the current directory if it is a Cargo workspace
    /// root. `None`: no page to write.
    pub fn resolve(doc: Option<PathBuf>, readme: Option<PathBuf>) -> Option<Targets> {
        let root = std::env::current_dir()
            .ok()
            .filter(|d| read(d.join("Cargo.toml")).is_some_and(|t| t.contains("[workspace]")));
        let doc = doc.or_else(|| root.as_ref().map(|r| r.join("docs/benchmarks.md")))?;
        let readme = readme.or_else(|| root.map(|r| r.join("README.md")));
        Some(Targets { doc, readme })
    }

    /// The directory of the page's charts: `docs/benchmarks/` beside
    /// `docs/benchmarks.md`.
    pub fn chart_dir(&self) -> PathBuf {
        let stem = self
            .doc
            .file_stem()
            .map_or("benchmarks".into(), |s| s.to_string_lossy().into_owned());
        self.doc.with_file_name(stem)
    }
}

fn mib(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.0}"))
}

/// A row of the compact headline table.
struct Line<'a> {
    label: String,
    row: &'a Row,
    /// Only cells of this pattern (section 3 mixes forward and backward).
    pattern: Option<Pattern>,
}

/// The rows a user wants first: sequential cold / warm / hot, random at the
/// shallowest, a middle and the deepest depth, backward at the largest
/// io_combine_limit, bitmap scans at the deepest max_ios.
fn headline_lines(sections: &[Section]) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    for s in sections {
        match s.id {
            1 => out.extend(s.rows.iter().map(|r| Line {
                label: format!("sequential, {}", r.label),
                row: r,
                pattern: None,
            })),
            2 => {
                let top = s
                    .rows
                    .iter()
                    .filter_map(|r| r.cells.first().map(|c| c.cfg.max_ios))
                    .max();
                for r in &s.rows {
                    let Some(c) = r.cells.first() else { continue };
                    let Pattern::Bitmap(d) = c.cfg.pattern else {
                        continue;
                    };
                    if Some(c.cfg.max_ios) == top && r.label.starts_with("read-ahead on") && d < 1.0
                    {
                        out.push(Line {
                            label: format!("bitmap {d} of the blocks, cold"),
                            row: r,
                            pattern: None,
                        });
                    }
                }
            }
            3 => {
                if let Some(r) = s.rows.iter().max_by(|a, b| a.x.total_cmp(&b.x)) {
                    out.push(Line {
                        label: format!("backward, cold, O_DIRECT, {}", r.label),
                        row: r,
                        pattern: Some(Pattern::Backward),
                    });
                }
            }
            4 => {
                let n = s.rows.len();
                let mut pick: Vec<usize> = vec![0, n / 2, n.saturating_sub(1)];
                pick.dedup();
                for i in pick.into_iter().filter(|&i| i < n) {
                    let r = &s.rows[i];
                    out.push(Line {
                        label: format!("random 8 KiB, cold, O_DIRECT, {}", r.label),
                        row: r,
                        pattern: None,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The compact headline table: MiB/s medians of each pagestream engine, the
/// best baseline, `tokio::fs` and fio, per headline row.
pub fn headline_table(sections: &[Section]) -> String {
    let ps = [
        Engine::ThreadPool,
        Engine::TokioUring,
        Engine::Glommio,
        Engine::Uring,
        Engine::UringTokio,
    ];
    let mut m = String::new();
    let _ = writeln!(
        m,
        "| MiB/s (median) | threadpool | tokio-uring | glommio | uring | uring-tokio | best baseline | tokio::fs | fio |"
    );
    let _ = writeln!(
        m,
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
    );
    for l in headline_lines(sections) {
        let cells = || {
            l.row.cells.iter().filter(|c| {
                l.pattern.is_none_or(|p| c.cfg.pattern == p) && c.cfg.backward_combining
            })
        };
        let of = |e: Engine| {
            cells()
                .find(|c| c.cfg.engine == e)
                .and_then(|c| c.spread())
                .map(|s| s.median)
        };
        let mut line = format!("| {} |", l.label);
        for e in ps {
            let _ = write!(line, " {} |", mib(of(e)));
        }
        let best = cells()
            .filter(|c| c.cfg.engine.is_baseline())
            .filter_map(|c| c.spread().map(|s| (c, s.median)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let _ = writeln!(
            line,
            " {} | {} | {} |",
            best.map_or("—".into(), |(c, v)| format!("{v:.0} ({})", c.cfg.engine)),
            mib(of(Engine::TokioFs)),
            mib(of(Engine::Fio)),
        );
        m.push_str(&line);
    }
    m
}

/// `path` relative to `base` (a directory) where it lies inside it.
fn relative(path: &Path, base: &Path) -> String {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (p, b) = (abs(path), abs(base));
    p.strip_prefix(&b)
        .map_or(p.clone(), Path::to_path_buf)
        .display()
        .to_string()
}

/// `f` with the current directory's prefix removed (the data files lie
/// under the workspace's `target/`).
fn shorten(f: &str) -> String {
    match std::env::current_dir() {
        Ok(d) => f.replace(&format!("{}/", d.display()), ""),
        Err(_) => f.to_string(),
    }
}

/// The command as a user types it: the program's name, not its path.
fn command_line(meta: &Meta) -> String {
    let mut words = meta.command.split(' ');
    let prog = words.next().unwrap_or("pagestream-bench");
    let name = Path::new(prog)
        .file_name()
        .map_or(prog.into(), |n| n.to_string_lossy().into_owned());
    std::iter::once(name.as_str())
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What else the machine was doing, one sentence.
fn busy_line(meta: &Meta, sections: &[Section]) -> String {
    let (stolen, all) = sections
        .iter()
        .flat_map(|s| &s.rows)
        .flat_map(|r| &r.cells)
        .flat_map(|c| &c.runs)
        .fold((0, 0), |(k, n), r| {
            (k + usize::from(report::stolen_from(r)), n + 1)
        });
    let mut s = format!(
        "load average (1, 5, 15 min) {} at the start, {} at the end, 1-minute peak {:.2}",
        meta.load_before, meta.load_after, meta.load_peak
    );
    if let Some(c) = meta.cpu {
        let _ = write!(
            s,
            "; of all CPU time during the run, this report used {:.0}%, other processes {:.0}% \
             and the hypervisor stole {:.1}%",
            c.own * 100.0,
            c.others * 100.0,
            c.steal * 100.0
        );
    }
    if !meta.others_running.is_empty() {
        let names: Vec<String> = meta
            .others_running
            .iter()
            .map(|(k, n)| {
                if *n > 1 {
                    format!("{k} ×{n}")
                } else {
                    k.clone()
                }
            })
            .collect();
        let _ = write!(
            s,
            "; other processes seen running between rows: {}",
            names.join(", ")
        );
    }
    let _ = write!(
        s,
        "; {stolen} of {all} timed runs lost more than {:.0}% of their time to steal",
        report::STEAL_FRACTION * 100.0
    );
    s
}

/// Writes the page, its charts and the README block.
pub(crate) fn write(
    t: &Targets,
    meta: &Meta,
    sections: &[Section],
    remote: Option<&Remote>,
    objects: Option<&crate::remote::StoreSection>,
    problems: &[String],
) -> io::Result<()> {
    let dir = t.chart_dir();
    std::fs::create_dir_all(&dir)?;
    // Charts of an earlier run that this one did not draw would be stale.
    for e in std::fs::read_dir(&dir)?.flatten() {
        if e.path().extension().is_some_and(|x| x == "svg") {
            std::fs::remove_file(e.path())?;
        }
    }
    let charts = report::charts(&dir, sections)?;
    let rel_dir = dir
        .file_name()
        .map_or("benchmarks".into(), |n| n.to_string_lossy().into_owned());
    let cmd = command_line(meta);
    let mut m = String::new();
    let _ = writeln!(m, "# Benchmarks\n");
    let _ = writeln!(
        m,
        "<!-- Written by `pagestream-bench report`: run it again instead of editing. -->\n"
    );
    let _ = writeln!(
        m,
        "pagestream's engines against what a Rust program would use instead (a `pread` loop, \
         `posix_fadvise` prefetching, `tokio::fs`, tokio's own io_uring fs, tokio-uring, \
         glommio's own readers) and against fio, \
         the device's ceiling (and, for io_uring from tokio, against bare-uring-tokio, the floor \
         of any engine that learns of completions from tokio's reactor). How each configuration is prepared, timed and checked is \
         described in [`benches/src/main.rs`](../benches/src/main.rs); the matrix is in \
         [`benches/src/report.rs`](../benches/src/report.rs). To regenerate this page, from \
         the workspace root:\n\n```sh\ncargo run --release -p pagestream-bench -- {}\n```\n",
        cmd.split_once(' ').map_or("report", |(_, a)| a)
    );
    let _ = writeln!(m, "## Headline\n");
    m.push_str(&headline_table(sections));
    let _ = writeln!(
        m,
        "\nMedians of {} runs per cell, engines alternating run by run. best baseline: the \
         fastest of the row's non-pagestream readers (fio excluded). — : not run in that row \
         (`tokio::fs` has no O_DIRECT; glommio reads with O_DIRECT only). The sections below \
         give min–max, ratios and what the device did.\n",
        meta.repeat
    );
    let _ = writeln!(m, "## The run\n");
    let _ = writeln!(m, "- command: `{cmd}`");
    let _ = writeln!(m, "- commit: {}", meta.commit);
    let _ = writeln!(
        m,
        "- date: {}; the run took {:.0} s{}",
        meta.when.split(' ').next().unwrap_or(&meta.when),
        meta.seconds,
        if meta.quick {
            " (`--quick`: reduced matrix, small files)"
        } else {
            ""
        }
    );
    let _ = writeln!(m, "- machine: {}", meta.machine.summary());
    let _ = writeln!(
        m,
        "- storage: {}, {}, read_ahead_kb {}; files: {}",
        meta.machine.device,
        meta.machine.fs,
        meta.machine
            .read_ahead_kb
            .map_or("unknown".into(), |v| v.to_string()),
        meta.files
            .iter()
            .map(|f| shorten(f))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        m,
        "- fio: {}",
        meta.machine.fio.as_deref().unwrap_or("not installed")
    );
    let _ = writeln!(
        m,
        "- what else the machine was doing: {}. Other processes' CPU use and steal slow the \
         runs they overlap; the `steal` column of each table counts the affected runs",
        busy_line(meta, sections)
    );
    if problems.is_empty() {
        let _ = writeln!(m, "- checksums: every run over the same blocks agrees");
    } else {
        let _ = writeln!(m, "- **checksum mismatches**:");
        for p in problems {
            let _ = writeln!(m, "  - {p}");
        }
    }
    let _ = writeln!(m, "\n## Reading the charts\n");
    let _ = writeln!(
        m,
        "Every chart draws an engine in the same colour. pagestream engines: solid lines, \
         filled markers and bars; baselines: dashed lines, hollow markers, pale outlined bars. \
         Whiskers span the slowest to the fastest run. Log axes are labelled with the values \
         themselves.\n"
    );
    let _ = writeln!(m, "| engine | kind | colour |\n| --- | --- | --- |");
    for (e, c) in COLORS {
        let _ = writeln!(
            m,
            "| {e} | {} | `{}` |",
            if e.is_pagestream() {
                "pagestream (solid)"
            } else {
                "baseline (dashed, hollow)"
            },
            chart::hex(c)
        );
    }
    for s in sections {
        report::section_md(&mut m, s);
        let mine: Vec<&ChartFile> = charts.iter().filter(|c| c.section == s.id).collect();
        if !mine.is_empty() {
            let _ = writeln!(m);
        }
        for c in mine {
            let _ = writeln!(
                m,
                "[![{t}]({d}/{f})]({d}/{f})\n",
                t = c.title,
                d = rel_dir,
                f = c.file
            );
        }
    }
    if let Some(r) = remote {
        report::remote_md(&mut m, r);
    }
    if let Some(o) = objects {
        crate::remote::section_markdown(&mut m, o);
    }
    // The before/after comparison is measured by another tool, with other
    // builds: keep it.
    let old = match std::fs::read_to_string(&t.doc) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    keep_compare_block(&mut m, &old);
    if let Some(parent) = t.doc.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&t.doc, &m)?;
    println!(
        "wrote {} and {} chart(s) in {}",
        t.doc.display(),
        charts.len(),
        dir.display()
    );
    if let Some(readme) = &t.readme {
        match readme_block(readme, &t.doc, meta, sections)? {
            true => println!("rewrote the headline block of {}", readme.display()),
            false => println!(
                "{} has no {BEGIN} … {END} block: left alone",
                readme.display()
            ),
        }
    }
    Ok(())
}

/// Adds `old` page's before/after block, if it has one, at the end of `page`.
fn keep_compare_block(page: &mut String, old: &str) {
    if let Some(block) = compare_block(old) {
        let _ = writeln!(page, "\n{block}");
    }
}

/// Replaces what lies between [`BEGIN`] and [`END`] in `text` with `block`;
/// `None` if either marker is missing or they are out of order.
pub fn replace_block(text: &str, block: &str) -> Option<String> {
    let b = text.find(BEGIN)? + BEGIN.len();
    let e = b + text[b..].find(END)?;
    Some(format!("{}\n{}{}", &text[..b], block, &text[e..]))
}

/// Rewrites `readme`'s headline block; `false` if it has none.
fn readme_block(readme: &Path, doc: &Path, meta: &Meta, sections: &[Section]) -> io::Result<bool> {
    let Ok(text) = std::fs::read_to_string(readme) else {
        return Ok(false);
    };
    let base = readme.parent().unwrap_or(Path::new("."));
    let link = relative(doc, base);
    let mut block = headline_table(sections);
    let _ = writeln!(
        block,
        "\n{}, {}, read_ahead_kb {}; `{}`; medians of {} runs. Machine load, min–max, every \
         section and the charts: [{link}]({link}).",
        meta.machine.summary(),
        meta.machine.fs,
        meta.machine
            .read_ahead_kb
            .map_or("unknown".into(), |v| v.to_string()),
        command_line(meta),
        meta.repeat
    );
    match replace_block(&text, &block) {
        Some(new) => {
            if new != text {
                std::fs::write(readme, new)?;
            }
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The first target's file and device, for [`Machine::probe`].
pub fn probe_for(targets: &[scan::Target]) -> Machine {
    let t = targets.first();
    Machine::probe(t.map(|t| t.path.as_path()), t.and_then(|t| t.dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_between_markers_is_replaced() {
        let text = format!("# x\n\n{BEGIN}\nold\ntable\n{END}\n\nrest\n");
        let new = replace_block(&text, "new\n").expect("markers");
        assert_eq!(new, format!("# x\n\n{BEGIN}\nnew\n{END}\n\nrest\n"));
        // Idempotent.
        assert_eq!(replace_block(&new, "new\n").as_deref(), Some(new.as_str()));
    }

    #[test]
    fn missing_or_reversed_markers_leave_text_alone() {
        assert_eq!(replace_block("no markers", "x"), None);
        assert_eq!(replace_block(&format!("{BEGIN} only"), "x"), None);
        assert_eq!(replace_block(&format!("{END} then {BEGIN}"), "x"), None);
    }

    #[test]
    fn the_compare_block_is_found_with_its_markers() {
        let block = format!("{COMPARE_BEGIN}\n## Before and after\n| a |\n{COMPARE_END}");
        let page = format!("# Benchmarks\n\nrows\n\n{block}\n");
        assert_eq!(compare_block(&page), Some(block.as_str()));
        assert_eq!(compare_block("# Benchmarks\n"), None);
        assert_eq!(
            compare_block(&format!("{COMPARE_END} {COMPARE_BEGIN}")),
            None
        );
    }

    #[test]
    fn a_rewritten_page_keeps_the_compare_block_once() {
        let block = format!("{COMPARE_BEGIN}\n## Before and after\n{COMPARE_END}");
        let mut first = "# Benchmarks\n\nnew rows\n".to_string();
        keep_compare_block(
            &mut first,
            &format!("# Benchmarks\n\nold rows\n\n{block}\n"),
        );
        assert!(first.starts_with("# Benchmarks\n\nnew rows\n"), "{first}");
        assert_eq!(first.matches(COMPARE_BEGIN).count(), 1, "{first}");
        assert_eq!(compare_block(&first), Some(block.as_str()));
        // Rewritten again from its own output: the same page.
        let mut second = "# Benchmarks\n\nnew rows\n".to_string();
        keep_compare_block(&mut second, &first);
        assert_eq!(second, first);
        // A page without the block stays as generated.
        let mut plain = "# Benchmarks\n".to_string();
        keep_compare_block(&mut plain, "# Benchmarks\n\nold rows\n");
        assert_eq!(plain, "# Benchmarks\n");
    }

    #[test]
    fn charts_go_beside_the_page() {
        let t = Targets {
            doc: PathBuf::from("docs/benchmarks.md"),
            readme: None,
        };
        assert_eq!(t.chart_dir(), PathBuf::from("docs/benchmarks"));
    }
}
