//! Times as people read them in a list (pure, tested natively): "5 min ago", "3 h ago",
//! "2 days ago", then the date once it is a month old; and the full UTC time for a tooltip.
//!
//! The server sends Unix milliseconds (`TreeInfo::created`, `last_activity`); the browser's
//! clock gives `now`. A time a little in the future (clocks differ) reads as "just now".

use crate::i18n::Lang;
use simtree_shared::time::civil;

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// How long ago `then` was, at `now` (both Unix ms), in `lang`.
pub fn ago(now: u64, then: u64, lang: Lang) -> String {
    let d = now.saturating_sub(then);
    let (n, en, zh) = match d {
        _ if d < MINUTE => {
            return if lang == Lang::Zh { "刚刚".into() } else { "just now".into() };
        }
        _ if d < HOUR => (d / MINUTE, "min ago", "分钟前"),
        _ if d < DAY => (d / HOUR, "h ago", "小时前"),
        _ if d < 2 * DAY => (1, "day ago", "天前"),
        _ if d < 30 * DAY => (d / DAY, "days ago", "天前"),
        _ => return date(then),
    };
    match lang {
        Lang::En => format!("{n} {en}"),
        Lang::Zh => format!("{n} {zh}"),
    }
}

/// `2026-11-22` of a Unix ms time (UTC).
pub fn date(ms: u64) -> String {
    let (y, m, d) = civil(ms / DAY);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `2026-11-22 17:39 UTC`, for a tooltip.
pub fn timestamp(ms: u64) -> String {
    let in_day = ms % DAY;
    format!("{} {:02}:{:02} UTC", date(ms), in_day / HOUR, in_day % HOUR / MINUTE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_times_read_relative_and_old_ones_as_dates() {
        // 2026-11-22 17:39:00 UTC
        let now = 1_795_369_140_000;
        assert_eq!(timestamp(now), "2026-11-22 17:39 UTC");
        assert_eq!(ago(now, now - 20_000, Lang::En), "just now");
        assert_eq!(ago(now, now + 5_000, Lang::En), "just now", "a clock ahead of ours");
        assert_eq!(ago(now, now - 5 * MINUTE, Lang::En), "5 min ago");
        assert_eq!(ago(now, now - 3 * HOUR - 1, Lang::En), "3 h ago");
        assert_eq!(ago(now, now - DAY - HOUR, Lang::En), "1 day ago");
        assert_eq!(ago(now, now - 6 * DAY, Lang::En), "6 days ago");
        assert_eq!(ago(now, now - 6 * DAY, Lang::Zh), "6 天前");
        assert_eq!(ago(now, now - 40 * DAY, Lang::En), "2026-10-13");
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400_000), "2000-02-29");
    }
}
