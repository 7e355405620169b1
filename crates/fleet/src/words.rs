//! The fleet commands' shared words: a time as `gtd fleet`, `gtd drain` and the predictions
//! print it, and a plural's `s`. A leaf.

/// `2026-12-01 18:40:02 UTC`.
pub(crate) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let rem = secs % 86_400;
    let (year, month, day) = gtd_core::calendar::civil(secs / 86_400);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `s` after a count other than one.
pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
