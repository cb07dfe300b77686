//! Progress of the YCSB matrix on stderr.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Where the matrix is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressEvent {
    /// Runs finished.
    pub done: usize,
    /// Runs in all.
    pub total: usize,
    /// The run that just finished.
    pub label: String,
}

/// A progress bar of `total` runs on stderr, hidden when stderr is not a terminal or under CI
/// (the `CI` variable set), where a bar would only litter the log.
pub fn progress_bar(total: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() || std::env::var_os("CI").is_some() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) =
        ProgressStyle::with_template("ycsb [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// A progress callback for [`run_matrix`](super::run_matrix) that moves `bar`.
pub fn bar_callback(bar: &ProgressBar) -> impl Fn(&ProgressEvent) + '_ {
    move |e| {
        bar.set_length(e.total as u64);
        bar.set_position(e.done as u64);
        bar.set_message(e.label.clone());
    }
}
