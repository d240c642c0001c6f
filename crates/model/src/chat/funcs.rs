//! The functions and filters chat templates call beyond minijinja's own:
//! `raise_exception`, `strftime_now` (through [`strftime`]) and a
//! Python-style `tojson`.

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// The current time in seconds since the Unix epoch.
pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// C's `strftime` for the UTC time `secs`: %d %m %Y %y %H %M %S %b %B %a %A
/// %j and %% are understood, other directives are kept as they are.
pub(super) fn strftime(fmt: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem / 60 % 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let month = MONTHS[(m - 1) as usize];
    let day = DAYS[(days % 7) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&day[..3]),
            Some('A') => out.push_str(day),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Python's `json.dumps(x, ensure_ascii=False, indent=indent)`, as the
/// `tojson` of `transformers`' template environment.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Accepted for compatibility; keys keep their order either way.
    let _: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value).map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e)
    })?;
    let mut out = String::new();
    py_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn py_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => out.push_str(&n.to_string()),
        J::String(s) => py_str(s, out),
        J::Array(a) if a.is_empty() => out.push_str("[]"),
        J::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_json(x, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(o) if o.is_empty() => out.push_str("{}"),
        J::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_str(k, out);
                out.push_str(": ");
                py_json(x, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

fn py_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_dates() {
        // 2024-07-26 13:05:09 UTC was a Friday, day 208 of a leap year.
        assert_eq!(
            strftime("%d %B %Y %H:%M:%S %a %j %b %y%%", 1_722_000_309),
            "26 July 2024 13:25:09 Fri 208 Jul 24%"
        );
    }
}
