//! Section 6 of `pagestream-bench report`: `remote --serve nginx` (and
//! `remote --serve moto` when moto's server is installed), measured in the
//! report's process, as the page's tables: what the targets ask of
//! these rows, every row, the request size × GETs in flight grid and the
//! engine's defaults beside it.

use crate::args::format_size;
use pagestream_object_store::{DEFAULT_READS_IN_FLIGHT, DEFAULT_READ_BYTES};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Instant;

/// One `remote --json ARGS` run.
#[derive(Debug)]
pub(crate) struct StoreRun {
    /// The command line, `remote --json …`.
    pub(crate) command: String,
    /// Its rows.
    pub(crate) rows: Vec<Value>,
    /// Why it printed nothing, if it did not run.
    pub(crate) error: Option<String>,
}

/// Section 6's runs.
#[derive(Debug)]
pub(crate) struct StoreSection {
    pub(crate) runs: Vec<StoreRun>,
    /// Wall-clock seconds the section took.
    pub(crate) seconds: f64,
    /// `nginx -v`, if nginx is installed.
    pub(crate) nginx: Option<String>,
}

/// The nginx run's arguments: `--quick` reads fewer pages one GET at a
/// time, drops the grid's 256 KiB row and 4-in-flight column (the slowest
/// cells) and runs 3 repeats.
fn nginx_args(quick: bool, repeat: Option<usize>) -> Vec<String> {
    let mut a: Vec<String> = ["--serve", "nginx"].map(String::from).to_vec();
    if quick {
        a.extend(
            [
                "--per-page-pages",
                "32",
                "--read-sizes",
                "1MiB,4MiB,16MiB",
                "--in-flight",
                "16,64,128",
            ]
            .map(String::from),
        );
    }
    if let Some(r) = repeat.or(quick.then_some(3)) {
        a.extend(["--repeat".to_string(), r.to_string()]);
    }
    a
}

/// The moto run's arguments: a small object, the anchor and the defaults
/// only (moto reads the whole object for every range GET).
fn moto_args(repeat: Option<usize>) -> Vec<String> {
    let mut a: Vec<String> = [
        "--serve",
        "moto",
        "--object-size",
        "16MiB",
        "--rows",
        "pagestream,get-ranges",
        "--per-page-pages",
        "16",
    ]
    .map(String::from)
    .to_vec();
    a.extend([
        "--repeat".to_string(),
        repeat.unwrap_or(2).min(3).to_string(),
    ]);
    a
}

fn run(args: &[String]) -> StoreRun {
    let command = format!("remote --json {}", args.join(" "));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    match super::json_rows(&refs) {
        Ok(rows) if rows.is_empty() => StoreRun {
            command,
            rows,
            error: Some("printed no JSON lines".into()),
        },
        Ok(rows) => StoreRun {
            command,
            rows,
            error: None,
        },
        Err(e) => StoreRun {
            command,
            rows: Vec::new(),
            error: Some(e),
        },
    }
}

/// Runs section 6.
pub(crate) fn measure(quick: bool, repeat: Option<usize>) -> StoreSection {
    let t = Instant::now();
    let nginx = std::process::Command::new("nginx")
        .arg("-v")
        .output()
        .ok()
        .or_else(|| {
            std::process::Command::new("/usr/sbin/nginx")
                .arg("-v")
                .output()
                .ok()
        })
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
        .filter(|s| !s.is_empty());
    let runs = vec![run(&nginx_args(quick, repeat)), run(&moto_args(repeat))];
    StoreSection {
        runs,
        seconds: t.elapsed().as_secs_f64(),
        nginx,
    }
}

/// Section 6 as JSON, for report.json.
pub(crate) fn json(s: &StoreSection) -> Value {
    json!({
        "seconds": s.seconds,
        "nginx": s.nginx,
        "runs": s.runs.iter().map(|r| json!({
            "command": r.command,
            "error": r.error,
            "rows": r.rows,
        })).collect::<Vec<_>>(),
    })
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The row named `row` over `pattern` (`sequential` or a bitmap).
fn find<'a>(rows: &'a [Value], row: &str, sequential: bool) -> Option<&'a Value> {
    rows.iter()
        .find(|r| text(r, "row") == row && (text(r, "pattern") == "sequential") == sequential)
}

fn x(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.2}x"))
}

fn mib(v: &Value) -> String {
    match num(v, "mib_per_s") {
        Some(m) => format!(
            "{} ({}–{})",
            fmt_mib(m),
            fmt_mib(num(v, "mib_per_s_min").unwrap_or(0.0)),
            fmt_mib(num(v, "mib_per_s_max").unwrap_or(0.0))
        ),
        None => format!("error: {}", text(v, "error").replace('|', "/")),
    }
}

fn fmt_mib(m: f64) -> String {
    if m >= 100.0 {
        format!("{m:.0}")
    } else if m >= 1.0 {
        format!("{m:.1}")
    } else {
        format!("{m:.2}")
    }
}

/// The targets, checked against the nginx run's rows.
fn targets(m: &mut String, rows: &[Value]) {
    let Some(first) = rows.first() else { return };
    let at = format!(
        "{} ms, {} MiB/s per GET, {} object",
        num(first, "latency_ms").unwrap_or(0.0),
        num(first, "request_mib_per_s").unwrap_or(0.0),
        format_size(num(first, "object_bytes").unwrap_or(0.0) as u64)
    );
    let _ = writeln!(
        m,
        "What the issue asks of these rows (at {at}; the issue's figures are for 20 ms, 60 MiB/s \
         and 256MiB):\n"
    );
    let _ = writeln!(m, "| target | measured | holds |\n| --- | --- | --- |");
    let mut line = |what: &str, got: Option<f64>, ok: &dyn Fn(f64) -> bool, extra: String| {
        let verdict = match got {
            Some(v) if ok(v) => "yes",
            Some(_) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(m, "| {what} | {}{extra} | {verdict} |", x(got));
    };
    let seq = find(rows, "pagestream", true);
    let bmp = find(rows, "pagestream", false);
    line(
        "sequential scan: pagestream ≥ 5x object_store `get_ranges`",
        seq.and_then(|r| num(r, "vs_anchor")),
        &|v| v >= 5.0,
        String::new(),
    );
    line(
        "bitmap scan (density 0.01): ≥ 2x `get_ranges`",
        bmp.and_then(|r| num(r, "vs_anchor")),
        &|v| v >= 2.0,
        String::new(),
    );
    line(
        "sequential scan: ≥ 100x one GET per page (rates)",
        seq.and_then(|r| num(r, "vs_per_page")),
        &|v| v >= 100.0,
        String::new(),
    );
    line(
        "sequential scan: within 1.3x of the ideal (time over ideal time)",
        seq.and_then(|r| num(r, "x_ideal")),
        &|v| v <= 1.3,
        String::new(),
    );
    line(
        "bitmap scan: within 1.3x of the ideal",
        bmp.and_then(|r| num(r, "x_ideal")),
        &|v| v <= 1.3,
        String::new(),
    );
    let off = find(rows, "hedge-off", true).and_then(|r| num(r, "vs_unstalled"));
    line(
        "one GET in twenty stalled 2 s: with hedging, within 1.5x of the unstalled time",
        find(rows, "hedge-on", true).and_then(|r| num(r, "vs_unstalled")),
        &|v| v <= 1.5,
        format!(" (without hedging: {})", x(off)),
    );
    line(
        "nginx on loopback, unthrottled: ≥ 0.8x the best of curl / parallel range GETs",
        find(rows, "unthrottled", true).and_then(|r| num(r, "vs_best")),
        &|v| v >= 0.8,
        String::new(),
    );
    if let Some(o) = seq.and_then(|r| num(r, "x_overlap")) {
        let _ = writeln!(
            m,
            "| (sequential scan against the bound if the throttle's waits overlapped the transfer) \
             | {} | — |",
            x(Some(o))
        );
    }
    if let Some(p) = find(rows, "pool64", true) {
        let flight = num(p, "max_in_flight").unwrap_or(0.0);
        let _ = writeln!(
            m,
            "| 64 MiB pool: look-ahead does not collapse to one request | {:.0} reads of {:.0} KiB, \
             up to {flight:.0} in flight (limit: {}) | {} |",
            num(p, "reads").unwrap_or(0.0),
            num(p, "mean_request_kib").unwrap_or(0.0),
            text(p, "limit"),
            if flight >= (DEFAULT_READS_IN_FLIGHT / 2) as f64 {
                "yes"
            } else {
                "**no**"
            }
        );
    }
    let _ = writeln!(m);
}

/// Every row of one run.
fn rows_table(m: &mut String, rows: &[Value]) {
    let _ = writeln!(
        m,
        "| row | reader | pattern | request × in flight | MiB/s | × get_ranges | × one GET per page \
         | ideal MiB/s | × ideal | GETs (hedged, won) | reads × KiB, most in flight, limit |"
    );
    let _ = writeln!(m, "|{}", " --- |".repeat(11));
    for r in rows {
        let request = match (num(r, "read_bytes"), num(r, "reads_in_flight")) {
            (Some(b), Some(f)) => format!("{} × {f:.0}", format_size(b as u64)),
            (None, Some(f)) if text(r, "row") == "get-ranges" => {
                format!("merged within 1 MiB × {f:.0}")
            }
            (None, Some(f)) => format!("— × {f:.0}"),
            _ => "—".into(),
        };
        let mut row = text(r, "row").to_string();
        if r.get("prefix").is_some() {
            row = format!("{row} (first {:.0} pages)", num(r, "pages").unwrap_or(0.0));
        }
        if text(r, "reader").starts_with("pagestream") {
            row = format!("**{row}**");
        }
        let gets = match (num(r, "gets"), num(r, "hedged")) {
            (Some(g), Some(h)) => {
                format!("{g:.0} ({h:.0}, {:.0})", num(r, "hedge_won").unwrap_or(0.0))
            }
            (Some(g), None) => format!("{g:.0}"),
            _ => "—".into(),
        };
        let mut reads = match num(r, "reads") {
            Some(n) => format!(
                "{n:.0} × {:.0}, {:.0}, {}",
                num(r, "mean_request_kib").unwrap_or(0.0),
                num(r, "max_in_flight").unwrap_or(0.0),
                text(r, "limit")
            ),
            None => "—".into(),
        };
        if let Some(s) = num(r, "vs_unstalled") {
            let _ = write!(
                reads,
                "; {:.0} GETs stalled; {s:.2}x the unstalled time",
                num(r, "stalled").unwrap_or(0.0)
            );
        }
        if let Some(b) = num(r, "vs_best") {
            let _ = write!(reads, "; {b:.2}x the server's best");
        }
        let _ = writeln!(
            m,
            "| {row} | {} | {} | {request} | {} | {} | {} | {} | {} | {gets} | {reads} |",
            text(r, "reader"),
            text(r, "pattern"),
            mib(r),
            x(num(r, "vs_anchor")),
            x(num(r, "vs_per_page")),
            num(r, "ideal_mib_per_s").map_or("—".into(), fmt_mib),
            x(num(r, "x_ideal")),
        );
    }
    let _ = writeln!(m);
}

/// The request size × GETs in flight table, and the defaults beside it.
fn grid(m: &mut String, rows: &[Value]) {
    let cells: Vec<&Value> = rows.iter().filter(|r| text(r, "row") == "grid").collect();
    if cells.is_empty() {
        return;
    }
    let mut sizes: Vec<u64> = cells
        .iter()
        .filter_map(|r| num(r, "read_bytes").map(|v| v as u64))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut flights: Vec<u64> = cells
        .iter()
        .filter_map(|r| num(r, "reads_in_flight").map(|v| v as u64))
        .collect();
    flights.sort_unstable();
    flights.dedup();
    let cell = |q: u64, f: u64| {
        cells.iter().find(|r| {
            num(r, "read_bytes") == Some(q as f64) && num(r, "reads_in_flight") == Some(f as f64)
        })
    };
    let _ = writeln!(
        m,
        "Request size × GETs in flight, sequential scan: MiB/s median (× ideal).\n"
    );
    let _ = writeln!(
        m,
        "| request \\ in flight | {} |",
        flights
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(m, "|{}", " --- |".repeat(flights.len() + 1));
    for &q in &sizes {
        let vals: Vec<String> = flights
            .iter()
            .map(|&f| match cell(q, f) {
                Some(r) => match num(r, "mib_per_s") {
                    Some(v) => format!("{} ({})", fmt_mib(v), x(num(r, "x_ideal"))),
                    None => "error".into(),
                },
                None => "—".into(),
            })
            .collect();
        let _ = writeln!(m, "| {} | {} |", format_size(q), vals.join(" | "));
    }
    // The best cell, the cells within 10% of it, and where the defaults are.
    let best = cells
        .iter()
        .filter_map(|r| num(r, "mib_per_s").map(|v| (*r, v)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((b, top)) = best {
        let shape = |r: &Value| {
            format!(
                "{} × {:.0}",
                format_size(num(r, "read_bytes").unwrap_or(0.0) as u64),
                num(r, "reads_in_flight").unwrap_or(0.0)
            )
        };
        let mut near: Vec<(&Value, f64)> = cells
            .iter()
            .filter_map(|r| num(r, "mib_per_s").map(|v| (*r, v)))
            .filter(|(_, v)| *v >= 0.9 * top)
            .collect();
        // Smallest footprint (bytes in flight) first.
        near.sort_by(|a, b| {
            let fp = |r: &Value| {
                num(r, "read_bytes").unwrap_or(0.0) * num(r, "reads_in_flight").unwrap_or(0.0)
            };
            fp(a.0).total_cmp(&fp(b.0))
        });
        let defaults = cell(DEFAULT_READ_BYTES as u64, DEFAULT_READS_IN_FLIGHT as u64)
            .and_then(|r| num(r, "mib_per_s"));
        let _ = writeln!(
            m,
            "\nThe engine's defaults are `DEFAULT_READ_BYTES` = {} × `DEFAULT_READS_IN_FLIGHT` = \
             {DEFAULT_READS_IN_FLIGHT} (a stream pins up to {} of the pool for its GETs){}. The \
             fastest cell here is {} at {} MiB/s; within 10% of it, by bytes in flight: {}. \
             Bandwidth comes from GETs in parallel once each is large enough that its round trip \
             is small beside its transfer; past the server's ceiling more in flight only costs \
             pool.\n",
            format_size(DEFAULT_READ_BYTES as u64),
            format_size((DEFAULT_READ_BYTES * DEFAULT_READS_IN_FLIGHT) as u64),
            match defaults {
                Some(d) => format!(": {} MiB/s, {:.2}x the fastest cell", fmt_mib(d), d / top),
                None => String::new(),
            },
            shape(b),
            fmt_mib(top),
            near.iter()
                .map(|(r, _)| shape(r))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// The heading line of a run: the server, the throttle, the server's
/// bandwidth and what the harness adds.
fn about(m: &mut String, r: &StoreRun, nginx: Option<&str>) {
    let _ = writeln!(m, "`{}`\n", r.command);
    let Some(first) = r.rows.first() else {
        if let Some(e) = &r.error {
            let _ = writeln!(m, "Not run: **{}**\n", e.replace('|', "/"));
        }
        return;
    };
    let server = text(first, "server");
    let server = match nginx {
        Some(v) if server.starts_with("nginx") => format!("{server} ({v})"),
        _ => server.to_string(),
    };
    let per_byte = num(first, "per_byte_ns").unwrap_or(0.0);
    let _ = write!(
        m,
        "{} ({}), {}: object_store's `ThrottledStore` adds {} ms to every GET and {} ns a byte \
         to its body ({} MiB/s asked, {:.1} MiB/s configured). ",
        text(first, "store"),
        format_size(num(first, "object_bytes").unwrap_or(0.0) as u64),
        server,
        num(first, "latency_ms").unwrap_or(0.0),
        per_byte,
        num(first, "request_mib_per_s").unwrap_or(0.0),
        if per_byte > 0.0 {
            1e9 / per_byte / (1u64 << 20) as f64
        } else {
            f64::INFINITY
        },
    );
    if let Some(s) = num(first, "server_mib_per_s") {
        let _ = write!(
            m,
            "The server unthrottled, in the same run: {} MiB/s for the best of its own rows (curl of \
             the whole object; {DEFAULT_READS_IN_FLIGHT} range GETs by curl, one curl per CPU; the same \
             by object_store's `get_range`), {} MiB/s for the most any reader got (the ideal's \
             bandwidth). ",
            num(first, "server_rows_mib_per_s").map_or("—".into(), fmt_mib),
            fmt_mib(s)
        );
    }
    if let Some(t) = find(&r.rows, "throttle", true) {
        let _ = write!(
            m,
            "One GET of {} through the throttle takes {:.2}x its configured time (the harness: \
             tokio's timer rounds each of the throttle's sleeps up to a millisecond). ",
            format_size(num(t, "read_bytes").unwrap_or(0.0) as u64),
            num(t, "x_ideal").unwrap_or(0.0)
        );
    }
    let runs = r.rows.first().and_then(|f| num(f, "runs")).unwrap_or(0.0);
    let _ = writeln!(
        m,
        "{runs:.0} runs per configuration, interleaved; MiB/s of pages returned, median (min–max).\n"
    );
}

/// Section 6 as Markdown.
pub(crate) fn markdown(m: &mut String, s: &StoreSection) {
    let _ = writeln!(
        m,
        "\n## 6. Object storage (the object-store engine on real servers)\n\n\
         pagestream over `pagestream-object-store` against object_store's own `get_ranges` (the \
         anchor: ranges within 1 MiB merged, 10 GETs at a time) and one GET per page, on a server \
         the report starts on loopback; how the rows are made and the ideal computed is in \
         [`benches/src/remote/store.rs`](../benches/src/remote/store.rs). The ideal uses only \
         the configured latency and per-GET bandwidth, each row's requests and GETs in flight, \
         the pool and the server's bandwidth measured unthrottled in the same run: every GET \
         takes the latency, its bytes at the throttle's per-byte wait and its bytes at its share \
         of the server (`ThrottledStore` sleeps after each chunk has arrived, so its waits add to \
         the transfer), the GETs in flight sharing the server, no ramp, no CPU; × ideal is the \
         row's time over it. ({} s.)\n",
        s.seconds.round()
    );
    for (k, r) in s.runs.iter().enumerate() {
        if k > 0 {
            let _ = writeln!(
                m,
                "### {}\n",
                if r.command.contains("moto") {
                    "S3 API: moto"
                } else {
                    "Another server"
                }
            );
        }
        about(m, r, s.nginx.as_deref());
        if r.rows.is_empty() {
            continue;
        }
        if k == 0 {
            targets(m, &r.rows);
        }
        if r.command.contains("moto") {
            if let (Some(c), Some(g)) = (
                find(&r.rows, "server-curl", true).and_then(|v| num(v, "mib_per_s")),
                find(&r.rows, "server-range-gets", true).and_then(|v| num(v, "mib_per_s")),
            ) {
                let _ = writeln!(
                    m,
                    "moto is an S3 API for tests, not a fast server: one GET of the whole object \
                     runs at {} MiB/s, its {DEFAULT_READS_IN_FLIGHT} parallel range GETs at {} \
                     MiB/s (it reads the whole object for every range). The rows show the s3:// \
                     path works; the ideal, from the best server row, does not fit them.\n",
                    fmt_mib(c),
                    fmt_mib(g)
                );
            }
        }
        rows_table(m, &r.rows);
        grid(m, &r.rows);
    }
    let _ = writeln!(m, "Every field of every row is in report.json.");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fields: Value) -> Value {
        fields
    }

    #[test]
    fn targets_are_read_from_the_rows() {
        let rows = vec![
            row(
                json!({"row": "pagestream", "pattern": "sequential", "vs_anchor": 20.0,
                "vs_per_page": 3000.0, "x_ideal": 1.2, "latency_ms": 20.0,
                "request_mib_per_s": 60.0, "object_bytes": 268435456.0}),
            ),
            row(
                json!({"row": "pagestream", "pattern": "bitmap:0.01", "vs_anchor": 1.5,
                "x_ideal": 1.1}),
            ),
            row(json!({"row": "hedge-on", "pattern": "sequential", "vs_unstalled": 1.1})),
            row(json!({"row": "hedge-off", "pattern": "sequential", "vs_unstalled": 8.0})),
        ];
        let mut m = String::new();
        targets(&mut m, &rows);
        assert!(
            m.contains("at 20 ms, 60 MiB/s per GET, 256MiB object"),
            "{m}"
        );
        assert!(m.contains("| 20.00x | yes |"), "{m}");
        assert!(m.contains("| 1.50x | **no** |"), "{m}");
        assert!(m.contains("1.10x (without hedging: 8.00x) | yes"), "{m}");
        assert!(m.contains("| — | not measured |"), "{m}");
    }

    #[test]
    fn grid_names_the_fastest_cell_and_the_defaults() {
        let cell = |q: u64, f: u64, v: f64| {
            json!({"row": "grid", "pattern": "sequential", "read_bytes": q,
                "reads_in_flight": f, "mib_per_s": v, "x_ideal": 1.1})
        };
        let rows = vec![
            cell(1 << 20, 64, 500.0),
            cell(4 << 20, 64, 950.0),
            cell(4 << 20, 128, 1000.0),
            cell(1 << 20, 128, 920.0),
        ];
        let mut m = String::new();
        grid(&mut m, &rows);
        assert!(m.contains("| 4MiB | 950 (1.10x) | 1000 (1.10x) |"), "{m}");
        assert!(
            m.contains("The fastest cell here is 4MiB × 128 at 1000 MiB/s"),
            "{m}"
        );
        assert!(
            m.contains("by bytes in flight: 1MiB × 128, 4MiB × 64, 4MiB × 128"),
            "{m}"
        );
        assert!(m.contains(": 950 MiB/s, 0.95x the fastest cell"), "{m}");
    }
}
