//! Resource quantities as numbers, for adding up what pods request.
//!
//! Node allocatable and pod requests arrive as strings ("2", "500m", "1k",
//! "1Gi", "1e3"). Free GPUs are allocatable minus the sum of requests, so the
//! strings must become numbers that add exactly: thousandths of a unit
//! (milli-units) in an i128 hold every quantity the API server accepts for
//! countable resources without rounding a whole GPU away.

/// `q` in thousandths of a unit, rounded up (as the scheduler rounds a
/// request up); `None` when `q` is not a quantity or does not fit.
pub fn milli_units(q: &str) -> Option<i128> {
    let s = q.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    // The digits as one integer, and the power of ten that scales it back.
    let mut mantissa: i128 = 0;
    for c in whole.chars().chain(fraction.chars()) {
        let digit = i128::from(c.to_digit(10)?);
        mantissa = mantissa.checked_mul(10)?.checked_add(digit)?;
    }
    let fraction_digits = i32::try_from(fraction.len()).ok()?;
    let value = match binary_factor(suffix) {
        Some(factor) => {
            let scaled = mantissa.checked_mul(factor)?.checked_mul(1000)?;
            ceil_div(scaled, 10i128.checked_pow(fraction_digits.unsigned_abs())?)
        }
        None => {
            let exponent = decimal_exponent(suffix)?.checked_add(3)? - fraction_digits;
            if exponent >= 0 {
                mantissa.checked_mul(10i128.checked_pow(exponent.unsigned_abs())?)?
            } else {
                ceil_div(mantissa, 10i128.checked_pow(exponent.unsigned_abs())?)
            }
        }
    };
    Some(if negative { -value } else { value })
}

/// `q` in whole units, rounded up (bytes, for a storage size); `None` when
/// it is not a quantity, is negative or does not fit.
pub fn bytes(q: &str) -> Option<u64> {
    let milli = milli_units(q)?;
    if milli < 0 {
        return None;
    }
    u64::try_from((milli + 999) / 1000).ok()
}

fn binary_factor(suffix: &str) -> Option<i128> {
    let power = match suffix {
        "Ki" => 1,
        "Mi" => 2,
        "Gi" => 3,
        "Ti" => 4,
        "Pi" => 5,
        "Ei" => 6,
        _ => return None,
    };
    Some(1024i128.pow(power))
}

fn decimal_exponent(suffix: &str) -> Option<i32> {
    Some(match suffix {
        "" => 0,
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        exp => {
            let digits = exp.strip_prefix(['e', 'E'])?;
            let e: i32 = digits.parse().ok()?;
            // Beyond this no quantity of a countable resource is meaningful,
            // and the powers of ten below would overflow.
            if !(-30..=30).contains(&e) {
                return None;
            }
            e
        }
    })
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 { q + 1 } else { q }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_units_and_suffixes() {
        assert_eq!(milli_units("2"), Some(2000));
        assert_eq!(milli_units("0"), Some(0));
        assert_eq!(milli_units("500m"), Some(500));
        assert_eq!(milli_units("1.5"), Some(1500));
        assert_eq!(milli_units("1k"), Some(1_000_000));
        assert_eq!(milli_units("1Ki"), Some(1_024_000));
        assert_eq!(milli_units("1e3"), Some(1_000_000));
        assert_eq!(milli_units("+4"), Some(4000));
        assert_eq!(milli_units("-1"), Some(-1000));
    }

    #[test]
    fn fractions_of_a_milli_unit_round_up() {
        assert_eq!(milli_units("1n"), Some(1));
        assert_eq!(milli_units("0.0001"), Some(1));
    }

    #[test]
    fn not_a_quantity() {
        for bad in [
            "",
            "gpu",
            "1.2.3",
            "1x",
            ".",
            "1e999",
            "9".repeat(60).as_str(),
        ] {
            assert_eq!(milli_units(bad), None, "{bad:?}");
        }
    }
}
