//! Calendar dates of Unix times (UTC), for what server and UI both show: the web UI's dates and
//! tooltips, the server's messages naming when something happened.

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix milliseconds.
pub fn utc_seconds(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil(secs / 86_400);
    let in_day = secs % 86_400;
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", in_day / 3600, in_day / 60 % 60, in_day % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_shown_in_utc() {
        assert_eq!(utc_seconds(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_seconds(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_seconds(1_795_690_862_000), "2026-11-26 11:01:02 UTC");
    }
}
