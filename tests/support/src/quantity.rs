//! Resource quantities in the canonical form a real API server stores them
//! in: `1000m` reads back as `1`, `2000` as `2k`, `1024Mi` as `1Gi`, `0.5` as
//! `500m`. An operator that compares what it applied with what it reads
//! back must cope with that, so the fake does it too.
//!
//! Covered: decimal numbers with the decimal SI suffixes (`n`, `u`, `m`,
//! none, `k`, `M`, `G`, `T`, `P`, `E`) and the binary ones (`Ki` ... `Ei`).
//! Exponent forms (`1e3`) and values finer than a nanounit are left as
//! written (a real server rounds the latter up).

const DECIMAL: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

/// The canonical form of `q`, or `None` where this module does not know it.
pub fn canonical(q: &str) -> Option<String> {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let nanos = parse_nanos(number)?;
    if let Some((_, shift)) = BINARY.iter().find(|(s, _)| *s == suffix) {
        let value = nanos.checked_mul(1i128 << shift)?;
        return Some(binary(value));
    }
    let (_, exp) = DECIMAL.iter().find(|(s, _)| *s == suffix)?;
    let value =
        nanos.checked_mul(10i128.checked_pow(u32::try_from(exp + 9).ok()?)?)? / 1_000_000_000;
    Some(decimal(value))
}

/// `number` in units of 10^-9, exactly; `None` past nine decimals.
fn parse_nanos(number: &str) -> Option<i128> {
    let (negative, digits) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() || frac.len() > 9 {
        return None;
    }
    let int: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_nanos: i128 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    let n = int.checked_mul(1_000_000_000)?.checked_add(frac_nanos)?;
    Some(if negative { -n } else { n })
}

/// A binary-suffixed value (in nanounits): the largest binary suffix that
/// divides it, else the decimal form (as the API server falls back).
fn binary(nanos: i128) -> String {
    let units = nanos / 1_000_000_000;
    let whole = nanos % 1_000_000_000 == 0 && units != 0;
    BINARY
        .iter()
        .rev()
        .find(|(_, shift)| whole && units % (1i128 << shift) == 0)
        .map(|(suffix, shift)| format!("{}{suffix}", units >> shift))
        .unwrap_or_else(|| decimal(nanos))
}

/// A decimal value (in nanounits) with the largest suffix that keeps it whole.
fn decimal(nanos: i128) -> String {
    if nanos == 0 {
        return "0".into();
    }
    DECIMAL
        .iter()
        .rev()
        .find_map(|(suffix, exp)| {
            let unit = 10i128.pow(u32::try_from(exp + 9).ok()?);
            (nanos % unit == 0).then(|| format!("{}{suffix}", nanos / unit))
        })
        .unwrap_or_else(|| format!("{nanos}n"))
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn quantities_read_back_as_a_real_server_stores_them() {
        for (given, stored) in [
            ("1000m", "1"),
            ("1", "1"),
            ("4", "4"),
            ("0.5", "500m"),
            ("2000", "2k"),
            ("1024", "1024"),
            ("1500m", "1500m"),
            ("32Gi", "32Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("100M", "100M"),
            ("0", "0"),
            ("16", "16"),
        ] {
            assert_eq!(canonical(given).as_deref(), Some(stored), "{given}");
        }
        assert_eq!(canonical("1e3"), None, "exponent forms are left as written");
        assert_eq!(canonical("abc"), None);
    }
}
