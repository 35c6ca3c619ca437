//! `report`: the standard matrix.

use crate::cli::ReportOpts;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io;

/// A progress bar on stderr of `len` steps, hidden when `quiet`.
pub fn progress(len: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {what} {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Runs the report.
pub fn run(_o: ReportOpts) -> io::Result<()> {
    Err(io::Error::other("not yet"))
}
