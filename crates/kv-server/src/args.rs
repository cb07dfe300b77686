//! Arguments as Redis reads them, shared by the commands and the pipeline: integers, and
//! the deadline an expiry option gives.

use crate::reply::Reply;

pub(crate) fn not_an_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

/// An integer argument as Redis reads one.
pub(crate) fn integer(text: &[u8]) -> Result<i64, Reply> {
    crate::numbers::parse_i64(text).ok_or_else(not_an_integer)
}

/// The deadline an expiry option (`EX`, `PX`, `EXAT`, `PXAT`) and its argument give at
/// `now`, or Redis's error for `command` (a time not above 0, or past the 64-bit range).
pub(crate) fn deadline_of(
    option: &str,
    value: &[u8],
    now: u64,
    command: &str,
) -> Result<u64, Reply> {
    let invalid = || Reply::error(format!("ERR invalid expire time in '{command}' command"));
    let n = integer(value)?;
    let seconds = option == "EX" || option == "EXAT";
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(invalid());
    }
    let millis = if seconds { n * 1000 } else { n };
    if option == "EX" || option == "PX" {
        return millis
            .checked_add(now as i64)
            .filter(|&at| at > 0)
            .map(|at| at as u64)
            .ok_or_else(invalid);
    }
    Ok(millis as u64)
}
