//! The host a bench or soak ran on, and when: numbers read without the host they came from
//! cannot be compared.

use crate::json::Object;
use std::time::{SystemTime, UNIX_EPOCH};

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The value of `key` in a `key : value` file such as /proc/cpuinfo, trimmed.
fn proc_field(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name.trim() == key).then(|| value.trim().to_string())
    })
}

/// Memory of the host in bytes (MemTotal), 0 where unknown.
fn memory_bytes() -> u64 {
    proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// `{"cores":..,"cpu":..,"os":..,"memory_bytes":..}` for the JSON's `host`.
pub fn json() -> String {
    let os = format!(
        "{} {}",
        read_trimmed("/proc/sys/kernel/ostype"),
        read_trimmed("/proc/sys/kernel/osrelease")
    );
    Object::new()
        .count("cores", cores() as u64)
        .text("cpu", &proc_field("/proc/cpuinfo", "model name").unwrap_or_default())
        .text("os", os.trim())
        .count("memory_bytes", memory_bytes())
        .build()
}

/// `seconds` since the epoch as a UTC time, `2026-11-30T21:03:27Z`.
pub fn utc(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Days to a civil date (Howard Hinnant's days_from_civil, inverted), from 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Now, as [`utc`] writes it.
pub fn now_utc() -> String {
    utc(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_dates_are_civil_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z"); // a leap day of a leap century
        assert_eq!(utc(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(utc(1_796_072_607), "2026-11-30T21:03:27Z");
        assert_eq!(utc(4_107_542_400), "2100-03-01T00:00:00Z"); // 2100 is no leap year
    }
}
