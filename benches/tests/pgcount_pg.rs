//! `pgcount` against a real PostgreSQL 15 server: a throwaway cluster in a
//! temp dir (as the `postgres` user when run as root; unix socket in the
//! temp dir, no TCP) writes tables — the seed's `t (i int, filler text) with
//! (fillfactor=10)`, NULLs, all NULLs, deleted-then-vacuumed rows, deleted
//! rows not vacuumed, HOT updates, aborted inserts and deletes, locked rows,
//! an empty table, a table no one read after its insert (no hint bits) — and
//! `select count(*), sum(i)` is taken before the server stops; `pgcount
//! --json` on each table's files must say the same.
//! The seed table is also split into 1 MiB segment files (`PATH`, `PATH.1`,
//! …, `--segment-size 1MiB`) and scanned as one relation on every runtime
//! and cache mode, and cut short (empty segment files past the end are
//! ignored, a non-empty one is an error). An index file, random bytes and a
//! size that is not a multiple of 8 KiB are errors with exit code 1.
//!
//! Every table, and the split one, is counted over object URLs too: served
//! by nginx (`http://…`) and uploaded to moto's S3 server (`s3://…`, with
//! moto's `AWS_*` environment); the counts must be PostgreSQL's. Without
//! nginx or moto that part is skipped (or fails under `CI=true`).
//!
//! The server test needs PostgreSQL 15's `initdb`, `pg_ctl`, `psql` and
//! `postgres` in `PG_BINDIR` (default `/usr/lib/postgresql/15/bin`);
//! without them it is skipped, or fails under `CI=true` (see
//! `pagestream::testing::require`).

mod common;

use common::field;
use pagestream::testing::require;
use pagestream_object_store::testing::{Moto, Nginx};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn pgcount(args: &[&str]) -> Output {
    common::run("pgcount", env!("CARGO_BIN_EXE_pgcount"), args)
}

/// Runs `pgcount ARGS --json`, which must succeed; returns its JSON lines.
fn pgcount_json(args: &[&str]) -> Vec<String> {
    pgcount_json_env(args, &[])
}

/// [`pgcount_json`] with `env` added to its environment.
fn pgcount_json_env(args: &[&str], env: &[(&str, String)]) -> Vec<String> {
    let mut all = args.to_vec();
    all.push("--json");
    let out = Command::new(env!("CARGO_BIN_EXE_pgcount"))
        .args(&all)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap_or_else(|e| panic!("run pgcount: {e:?}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pgcount {all:?} failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(!lines.is_empty(), "pgcount {all:?} printed nothing");
    lines
}

/// Checks that `pgcount ARGS` fails with exit code 1, no panic, and an
/// error line containing every one of `needles`.
fn assert_fails(args: &[&str], needles: &[&str]) {
    let out = pgcount(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("pgcount: error: "))
        .unwrap_or_else(|| panic!("{args:?}: no error line in {err}"));
    for n in needles {
        assert!(line.contains(n), "{args:?}: {line:?} lacks {n:?}");
    }
}

/// PostgreSQL 15's bin directory, `PG_BINDIR` or Debian's, if it has the
/// programs the server test runs.
fn pg_bindir() -> Result<PathBuf, String> {
    let (dir, from) = match std::env::var_os("PG_BINDIR") {
        Some(d) => (PathBuf::from(d), "PG_BINDIR"),
        None => (
            PathBuf::from("/usr/lib/postgresql/15/bin"),
            "default PG_BINDIR",
        ),
    };
    for prog in ["initdb", "pg_ctl", "psql", "postgres"] {
        if !dir.join(prog).is_file() {
            return Err(format!(
                "{from}={}: no {prog} there; install postgresql-15 or set PG_BINDIR to \
                 its bin directory",
                dir.display()
            ));
        }
    }
    Ok(dir)
}

/// `runuser` (util-linux), from `PATH` or where Debian puts it.
fn runuser() -> PathBuf {
    let in_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("runuser"));
    in_path
        .chain(["/usr/sbin/runuser", "/sbin/runuser"].map(PathBuf::from))
        .find(|p| p.is_file())
        .expect("runuser (util-linux) is needed to run PostgreSQL as postgres when root")
}

fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A throwaway PostgreSQL cluster; stopped and removed on drop.
struct Pg {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    /// Run the server's programs as `postgres` (we are root).
    as_postgres: bool,
    running: bool,
}

impl Pg {
    fn new(tag: &str, bin: PathBuf) -> Pg {
        let dir = std::env::temp_dir().join(format!(
            "pagestream-pg-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let as_postgres = is_root();
        let pg = Pg {
            bin,
            data: dir.join("data"),
            dir,
            as_postgres,
            running: false,
        };
        if as_postgres {
            // PostgreSQL refuses to run as root: hand the dir to postgres.
            pg.check(
                Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(&pg.dir),
                "chown the temp dir to postgres (is there a postgres user?)",
            );
        }
        pg
    }

    /// A command for the server's program `prog`, as `postgres` if root.
    fn cmd(&self, prog: &str) -> Command {
        let exe = self.bin.join(prog);
        if self.as_postgres {
            let mut c = Command::new(runuser());
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn check(&self, cmd: &mut Command, what: &str) -> String {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "{what}: {cmd:?} failed: {}\n{}\nserver log:\n{log}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn init_and_start(&mut self) {
        let mut initdb = self.cmd("initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .args(["--locale", "C", "-D"])
            .arg(&self.data);
        self.check(&mut initdb, "initdb");
        let opts = format!(
            "-c listen_addresses='' -k {} -c fsync=off -c autovacuum=off \
             -c shared_buffers=32MB",
            self.dir.display()
        );
        let mut start = self.cmd("pg_ctl");
        start
            .args(["-w", "-t", "120", "-D"])
            .arg(&self.data)
            .args(["-o", &opts, "-l"])
            .arg(self.dir.join("log"))
            .arg("start");
        self.check(&mut start, "pg_ctl start");
        self.running = true;
    }

    /// Runs `sql` (statements one after the other, each in its own
    /// transaction unless it says `begin`; stopping at the first error);
    /// returns the unaligned, tuples-only output.
    fn sql(&self, sql: &str) -> String {
        use std::io::Write as _;
        let mut psql = self.cmd("psql");
        psql.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            "postgres",
        ])
        .args(["-d", "postgres", "-f", "-", "-h"])
        .arg(&self.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = psql
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {psql:?}: {e}"));
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(sql.as_bytes())
            .expect("write SQL to psql");
        let out = child.wait_with_output().expect("psql");
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "psql failed on {sql}: {}\nserver log:\n{log}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn stop(&mut self) {
        let mut stop = self.cmd("pg_ctl");
        stop.args(["-w", "-m", "fast", "-D"])
            .arg(&self.data)
            .arg("stop");
        self.check(&mut stop, "pg_ctl stop");
        self.running = false;
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if self.running {
            let _ = self
                .cmd("pg_ctl")
                .args(["-w", "-m", "immediate", "-D"])
                .arg(&self.data)
                .arg("stop")
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What PostgreSQL said about a table, and where its files are.
struct Expected {
    table: &'static str,
    count: String,
    sum: String,
    path: PathBuf,
}

/// The tables: name and the SQL that makes it (all committed before the
/// counts are taken).
const TABLES: &[(&str, &str)] = &[
    // The seed's table at small scale: one 900-byte row per page, frozen.
    (
        "t",
        "create table t (i int, filler text) with (fillfactor=10);
         insert into t select g, repeat('x', 900) from generate_series(1, 3000) g;
         vacuum freeze t;
         create index t_i on t (i);",
    ),
    // NULLs in i, several per page; never vacuumed (hint bits as the
    // count(*) below leaves them).
    (
        "tn",
        "create table tn (i int, j int, s text);
         insert into tn select case when g % 3 = 0 then null else g end, g, 'row ' || g
           from generate_series(1, 20000) g;",
    ),
    // Every i NULL: sum is NULL.
    (
        "tz",
        "create table tz (i int, s text);
         insert into tz select null, 'x' || g from generate_series(1, 5000) g;",
    ),
    // Deleted, then vacuumed: dead line pointers and free space.
    (
        "td",
        "create table td (i int, pad text);
         insert into td select g, repeat('p', 50) from generate_series(1, 30000) g;
         delete from td where i % 5 <> 0;
         vacuum td;
         insert into td select -g, 'again' from generate_series(1, 1000) g;",
    ),
    // Deleted and not vacuumed: committed xmax, maybe without hint bits.
    (
        "tdn",
        "create table tdn (i int, pad text);
         insert into tdn select g, 'q' from generate_series(1, 20000) g;
         delete from tdn where i % 3 = 0;",
    ),
    // HOT updates of a non-indexed column (room on each page for the new
    // versions), twice for half the rows; some pages pruned by reads.
    (
        "th",
        "create table th (i int, v int, pad text) with (fillfactor=50);
         create index th_i on th (i);
         insert into th select g, 0, repeat('h', 20) from generate_series(1, 10000) g;
         update th set v = v + 1 where i % 2 = 0;
         update th set v = v + 1 where i % 4 = 0;
         select count(*) from th where v > 0;
         update th set v = v + 1 where i % 8 = 0;",
    ),
    // HOT updates, then vacuumed: redirect line pointers.
    (
        "thv",
        "create table thv (i int, v int) with (fillfactor=50);
         create index thv_i on thv (i);
         insert into thv select g, 0 from generate_series(1, 10000) g;
         update thv set v = 1 where i % 2 = 0;
         update thv set v = 2 where i % 2 = 0;
         vacuum thv;",
    ),
    // Aborted inserts and deletes, and locked rows: xmin aborted (hinted
    // by the count(*) below), xmax aborted, xmax lock-only.
    (
        "ta",
        "create table ta (i int, s text);
         insert into ta select g, 'a' from generate_series(1, 4000) g;
         begin; insert into ta select g, 'b' from generate_series(5001, 7000) g; rollback;
         begin; delete from ta where i < 1000; rollback;
         begin; select count(*) from (select * from ta where i % 7 = 0 for update) x; commit;
         begin; select count(*) from (select * from ta where i % 11 = 0 for key share) x; commit;",
    ),
    // No rows at all: an empty file.
    ("te", "create table te (i int);"),
    // Never read after the insert (its counts are known, not queried): no
    // hint bits on xmin (see UNREAD).
    (
        "tu",
        "create table tu (i int, s text);
         insert into tu select g, 'u' from generate_series(1, 10000) g;",
    ),
];

/// Tables whose count and sum are known rather than queried, so that
/// nothing reads them (and sets hint bits) before pgcount does.
const UNREAD: &[(&str, &str, &str)] = &[("tu", "10000", "50005000")];

#[test]
fn pgcount_equals_postgres_count_and_sum() {
    let Some(bin) = require("PostgreSQL 15", pg_bindir()) else {
        return;
    };
    let mut pg = Pg::new("count", bin);
    pg.init_and_start();
    for (_, sql) in TABLES {
        pg.sql(sql);
    }
    let data_dir = pg.sql("show data_directory");
    let mut expected = Vec::new();
    for &(table, _) in TABLES {
        let got = match UNREAD.iter().find(|u| u.0 == table) {
            Some(&(_, count, sum)) => format!("{count}|{sum}"),
            None => pg.sql(&format!(
                "select count(*), coalesce(sum(i)::text, 'null') from {table}"
            )),
        };
        let (count, sum) = got.split_once('|').expect("count|sum");
        let rel = pg.sql(&format!("select pg_relation_filepath('{table}')"));
        expected.push(Expected {
            table,
            count: count.to_string(),
            sum: sum.to_string(),
            path: Path::new(&data_dir).join(rel),
        });
    }
    let index = Path::new(&data_dir).join(pg.sql("select pg_relation_filepath('t_i')"));
    pg.sql("checkpoint");
    // The states the tables were made to have.
    assert_eq!(expected[0].count, "3000");
    assert_eq!(expected[2].sum, "null");
    assert_eq!(expected[8].count, "0");
    pg.stop();

    for e in &expected {
        let path = e.path.to_str().expect("utf-8 path");
        let lines = pgcount_json(&[path]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!(field(l, "tuples"), e.count, "{}: {l}", e.table);
        assert_eq!(field(l, "sum"), e.sum, "{}: {l}", e.table);
        assert_eq!(field(l, "cache"), "none", "{l}");
        assert_eq!(field(l, "runtime"), "threadpool", "{l}");
        for key in [
            "pages",
            "seconds",
            "pages_per_s",
            "reads",
            "mean_blocks_per_read",
            "mib_per_s",
            "segments",
        ] {
            field(l, key);
        }
        let pages: u64 = field(l, "pages").parse().unwrap();
        let len = std::fs::metadata(&e.path).unwrap().len();
        assert_eq!(pages * 8192, len, "{}: {l}", e.table);
        match e.table {
            "td" => assert_ne!(field(l, "unused_line_pointers"), "0", "td: {l}"),
            "tdn" | "th" | "ta" => assert_ne!(field(l, "invisible"), "0", "{}: {l}", e.table),
            "thv" => assert_ne!(field(l, "redirects"), "0", "thv: {l}"),
            _ => {}
        }
        eprintln!(
            "{}: count {} sum {} = pgcount ({} pages)",
            e.table, e.count, e.sum, pages
        );
    }

    // The seed table split into 1 MiB segments: one relation of 24 files.
    let t = &expected[0];
    let split = pg.dir.join("split");
    std::fs::create_dir_all(&split).unwrap();
    let bytes = std::fs::read(&t.path).unwrap();
    let first = split.join("16384");
    for (n, piece) in bytes.chunks(1 << 20).enumerate() {
        let name = if n == 0 {
            first.clone()
        } else {
            split.join(format!("16384.{n}"))
        };
        std::fs::write(name, piece).unwrap();
    }
    let first_s = first.to_str().unwrap();
    let lines = pgcount_json(&[
        first_s,
        "--segment-size",
        "1MiB",
        "--runtime",
        "all",
        "--cache",
        "all",
        "--max-ios",
        "4",
    ]);
    let split_names: Vec<String> = (0..24)
        .map(|n| match n {
            0 => "16384".to_string(),
            n => format!("16384.{n}"),
        })
        .collect();
    over_http(&pg.dir, &expected, &split);
    over_s3(&pg.dir, &expected, &split, &split_names);
    // cold, warm, hot on threadpool, tokio-uring, uring and uring-tokio;
    // cold, hot on glommio.
    assert_eq!(lines.len(), 14, "{lines:?}");
    for l in &lines {
        assert_eq!(field(l, "tuples"), t.count, "{l}");
        assert_eq!(field(l, "sum"), t.sum, "{l}");
        assert_eq!(field(l, "segments"), "24", "{l}");
        assert_eq!(field(l, "pages"), "3000", "{l}");
        if field(l, "cache") == "hot" {
            assert_eq!(field(l, "reads"), "0", "{l}");
        } else {
            // Reads end at each boundary (128 blocks, a multiple of 16),
            // so every read is still full-sized but the file's last.
            let mean: f64 = field(l, "mean_blocks_per_read").parse().unwrap();
            assert!(mean > 8.0, "{l}");
        }
    }
    // The same relation whole, hot, beside the in-memory baseline: the same
    // answer.
    let whole = pgcount_json(&[t.path.to_str().unwrap(), "--cache", "hot", "--baseline"]);
    assert_eq!(whole.len(), 2, "{whole:?}");
    assert_eq!(field(&whole[1], "runtime"), "in-memory");
    for l in &whole {
        assert_eq!(field(l, "tuples"), t.count, "{l}");
        assert_eq!(field(l, "sum"), t.sum, "{l}");
        assert_eq!(field(l, "reads"), "0", "{l}");
    }

    // A short segment ends the relation (as PostgreSQL's mdnblocks says):
    // a non-empty one after it is an error naming both; empty ones after
    // it (what a vacuum that truncated the relation leaves) are ignored.
    let second = split.join("16384.1");
    std::fs::write(&second, vec![0u8; 8192]).unwrap();
    assert_fails(
        &[first_s, "--segment-size", "1MiB"],
        &["16384.2", "16384.1", "partial segment", "must be empty"],
    );
    for n in 2..24 {
        std::fs::write(split.join(format!("16384.{n}")), b"").unwrap();
    }
    let lines = pgcount_json(&[first_s, "--segment-size", "1MiB"]);
    let l = &lines[0];
    assert_eq!(field(l, "segments"), "2", "{l}");
    assert_eq!(field(l, "pages"), "129", "{l}");
    assert_eq!(field(l, "new_pages"), "1", "{l}");
    // Rows went in in order, one per page: blocks 0..128 hold i = 1..=128.
    assert_eq!(field(l, "tuples"), "128", "{l}");
    assert_eq!(field(l, "sum"), (128 * 129 / 2).to_string(), "{l}");
    // A segment longer than the segment size is an error.
    assert_fails(
        &[first_s, "--segment-size", "512KiB"],
        &["16384", "more than a segment of 524288 bytes"],
    );

    // Nor are its free space map and visibility map (vacuum made them).
    for fork in ["fsm", "vm"] {
        let p = format!("{}_{fork}", expected[3].path.display());
        assert!(Path::new(&p).exists(), "{p}");
        assert_fails(&[&p], &[&p, "not a heap relation's data"]);
    }
    // An index is not a heap relation.
    assert_fails(
        &[index.to_str().unwrap()],
        &["not a heap relation: block 0 has special space (index?)"],
    );
}

/// Checks the pgcount lines of a run over `url` against PostgreSQL's
/// count and sum for `e`: one run, on object-store, of the URL.
fn assert_counts(lines: &[String], e: &Expected, url: &str, cache: &str) {
    assert_eq!(lines.len(), 1, "{url}: {lines:?}");
    let l = &lines[0];
    assert_eq!(field(l, "tuples"), e.count, "{} over {url}: {l}", e.table);
    assert_eq!(field(l, "sum"), e.sum, "{} over {url}: {l}", e.table);
    assert_eq!(field(l, "runtime"), "object-store", "{l}");
    assert_eq!(field(l, "file"), url, "{l}");
    assert_eq!(field(l, "cache"), cache, "{l}");
    assert_eq!(field(l, "direct"), "false", "{l}");
    let pages: u64 = field(l, "pages").parse().unwrap();
    assert_eq!(
        pages * 8192,
        std::fs::metadata(&e.path).unwrap().len(),
        "{l}"
    );
}

/// The split relation (24 segments of 1 MiB) over `url`, `none` and `hot`:
/// one relation of 24 objects, the seed table's counts.
fn assert_split(url: &str, t: &Expected, env: &[(&str, String)]) {
    for cache in ["none", "hot"] {
        let args = [url, "--segment-size", "1MiB", "--cache", cache];
        let lines = pgcount_json_env(&args, env);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!(field(l, "tuples"), t.count, "{url}: {l}");
        assert_eq!(field(l, "sum"), t.sum, "{url}: {l}");
        assert_eq!(field(l, "segments"), "24", "{url}: {l}");
        assert_eq!(field(l, "pages"), "3000", "{url}: {l}");
        assert_eq!(field(l, "runtime"), "object-store", "{l}");
        if cache == "hot" {
            assert_eq!(field(l, "reads"), "0", "{l}");
        } else {
            // Reads end at every segment boundary, and nowhere else.
            assert!(field(l, "reads").parse::<u64>().unwrap() >= 24, "{l}");
        }
    }
}

/// `pgcount http://…` over nginx serving `root` (the cluster's temp dir):
/// every table, the split relation, and a missing relation.
fn over_http(root: &Path, expected: &[Expected], split: &Path) {
    let Some(nginx) = require("nginx", Nginx::start(root)) else {
        return;
    };
    let rel = |p: &Path| {
        p.strip_prefix(root)
            .expect("under the temp dir")
            .to_str()
            .unwrap()
            .to_string()
    };
    for e in expected {
        let url = nginx.url(&rel(&e.path));
        assert_counts(&pgcount_json(&[&url]), e, &url, "none");
        eprintln!(
            "{}: count {} sum {} = pgcount {url}",
            e.table, e.count, e.sum
        );
    }
    let t = &expected[0];
    let url = nginx.url(&rel(&t.path));
    assert_counts(&pgcount_json(&[&url, "--cache", "hot"]), t, &url, "hot");
    assert_split(&nginx.url(&rel(&split.join("16384"))), t, &[]);
    let missing = nginx.url(&rel(&split.join("99999")));
    assert_fails(&[&missing], &[&missing, "not found"]);
}

/// `pgcount s3://…` over moto: every table's file uploaded under its path
/// in the cluster's directory, and the split relation's 24 segments.
fn over_s3(root: &Path, expected: &[Expected], split: &Path, split_names: &[String]) {
    let Some(moto) = require("moto", Moto::start()) else {
        return;
    };
    let bucket = "pgcount";
    moto.create_bucket(bucket).expect("create bucket");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = |p: &Path| {
        p.strip_prefix(root)
            .expect("under the temp dir")
            .to_str()
            .unwrap()
            .to_string()
    };
    let mut uploads: Vec<(String, PathBuf)> = expected
        .iter()
        .map(|e| (key(&e.path), e.path.clone()))
        .collect();
    for name in split_names {
        uploads.push((key(&split.join(name)), split.join(name)));
    }
    rt.block_on(async {
        for (k, p) in &uploads {
            let bytes = std::fs::read(p).unwrap();
            moto.put(bucket, k, bytes).await.expect("upload to moto");
        }
    });
    let env = moto.env();
    for e in expected {
        let url = format!("s3://{bucket}/{}", key(&e.path));
        assert_counts(&pgcount_json_env(&[&url], &env), e, &url, "none");
        eprintln!(
            "{}: count {} sum {} = pgcount {url}",
            e.table, e.count, e.sum
        );
    }
    let t = &expected[0];
    assert_split(
        &format!("s3://{bucket}/{}", key(&split.join("16384"))),
        t,
        &env,
    );
    // A missing first segment, and a missing bucket, name the URL.
    for url in [
        format!("s3://{bucket}/{}", key(&split.join("99999"))),
        "s3://no-such-bucket/base/5/16384".to_string(),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pgcount"))
            .arg(&url)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {err}");
        assert!(
            err.contains(&url) && !err.contains("panicked"),
            "{url}: {err}"
        );
    }
}

/// A temp file with `bytes`, removed after `f`.
fn with_file(tag: &str, bytes: &[u8], f: impl FnOnce(&str)) {
    let p = std::env::temp_dir().join(format!("pagestream-pgcount-{tag}-{}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    f(p.to_str().unwrap());
    let _ = std::fs::remove_file(&p);
}

#[test]
fn files_that_are_not_heap_relations_are_errors() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let random: Vec<u8> = (0..8192 * 4)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    with_file("random", &random, |p| {
        assert_fails(&[p], &[p, "block 0"]);
        assert_fails(&[p, "--cache", "hot"], &[p, "block 0"]);
    });
    // Random bytes after a valid empty page: block 1 is named.
    let mut mixed = vec![0u8; 8192];
    mixed.extend_from_slice(&random[..8192]);
    with_file("mixed", &mixed, |p| assert_fails(&[p], &["block 1"]));
    with_file("size", &vec![0u8; 10000], |p| {
        assert_fails(&[p], &[p, "not a multiple of 8192"]);
    });
    assert_fails(
        &["/nonexistent/pagestream/16384"],
        &["/nonexistent/pagestream/16384"],
    );
    // All-zero pages are new pages: valid and empty.
    with_file("zeros", &vec![0u8; 8192 * 3], |p| {
        let lines = pgcount_json(&[p]);
        assert_eq!(field(&lines[0], "tuples"), "0");
        assert_eq!(field(&lines[0], "sum"), "null");
        assert_eq!(field(&lines[0], "new_pages"), "3");
    });
}

#[test]
fn bad_command_lines_exit_2() {
    for (args, needle) in [
        (&[][..], "no PATH"),
        (&["a", "--cache", "tepid"], "tepid"),
        (&["a", "--segment-size", "100"], "multiple of 8KiB"),
        (&["a", "--bogus"], "unknown option --bogus"),
        (
            &["s3://bucket/base/5/16384", "--runtime", "threadpool"],
            "--runtime threadpool reads local files, not the object URL s3://bucket/base/5/16384",
        ),
        (&["a", "--runtime", "object-store"], "not the local file a"),
        (
            &["http://h/base/5/1", "--cache", "cold"],
            "--cache cold does not apply",
        ),
        (
            &["http://h/base/5/1", "--cache", "all"],
            "--cache cold,warm",
        ),
        (
            &["http://h/base/5/1", "--direct"],
            "--direct does not apply",
        ),
        (
            &["http://h/base/5/1", "--baseline"],
            "--baseline does not apply",
        ),
    ] {
        let out = pgcount(args);
        common::assert_usage_error("pgcount", args, needle, &out);
    }
}

/// `-h` prints the usage text, like `--help`.
#[test]
fn short_h_is_help() {
    common::assert_short_help("pgcount", env!("CARGO_BIN_EXE_pgcount"), &[]);
}
