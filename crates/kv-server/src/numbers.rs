//! Numbers as Redis reads and writes them, so replies and stored values match byte for byte.
//!
//! Integers: [`parse_i64`] takes exactly what Redis's `string2ll` takes (no `+`, no leading
//! zeros, no `-0`, no spaces). Floats: INCRBYFLOAT on x86-64 Redis computes in the x87 80-bit
//! `long double` (64-bit significand): it reads with `strtold`, adds, and writes with
//! `%.17Lf`, trailing zeros trimmed. Rust has no such type and a 64-bit `f64` gives other
//! digits (`10.5 + 0.1` is `10.6` in `long double`, `10.59999999999999964` in `f64` printed
//! the same way), so [`LongDouble`] does that arithmetic exactly on big integers: correctly
//! rounded parsing of decimal and hexadecimal text, a correctly rounded sum, and exact
//! decimal printing, each rounding to nearest, ties to even, as the C library does.

use num_bigint::BigUint;
use num_traits::{One, ToPrimitive, Zero};

/// A 64-bit integer as Redis's `string2ll` reads it: `0`, or an optional `-` and a digit
/// `1`-`9` followed by digits, within the range of an `i64`.
pub(crate) fn parse_i64(text: &[u8]) -> Option<i64> {
    // Redis refuses 21 bytes and more before looking (the longest i64 takes 20).
    if text.is_empty() || text.len() >= 21 {
        return None;
    }
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Bits of an x87 extended significand.
const PRECISION: u64 = 64;
/// The exponent of the smallest subnormal's unit (2^-16445): no value has finer bits.
const MIN_EXPONENT: i64 = -16445;
/// Every finite value is below 2^16384.
const MAX_BINARY_DIGITS: i64 = 16384;
/// Redis refuses float text of this many bytes or more (`MAX_LONG_DOUBLE_CHARS`).
const MAX_TEXT: usize = 5 * 1024;

/// A finite x87 extended-precision value: `(-1)^negative × significand × 2^exponent`, the
/// significand below 2^64 and the exponent at least the subnormals' (not normalized: one
/// value may have several forms; they compare by value through the arithmetic alone).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LongDouble {
    negative: bool,
    significand: u64,
    exponent: i64,
}

/// What reading a float gave.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ParsedFloat {
    Finite(LongDouble),
    /// `inf` or `infinity` (which Redis reads, then refuses to store).
    Infinite,
}

/// An exact value, `(-1)^negative × magnitude × 2^exponent`, plus whether a remainder too small
/// to show (`sticky`) lies beyond it, to be rounded to a [`LongDouble`].
struct Exact {
    negative: bool,
    magnitude: BigUint,
    exponent: i64,
    sticky: bool,
}

/// Why a rounding gave no finite value.
#[derive(Debug, PartialEq, Eq)]
enum OutOfRange {
    Overflow,
    /// A non-zero value that rounds to zero.
    Underflow,
}

impl Exact {
    /// Round to nearest, ties to even, to 64 significant bits at or above the subnormals'
    /// exponent.
    fn round(self) -> Result<LongDouble, OutOfRange> {
        let Exact {
            negative,
            magnitude,
            exponent,
            sticky,
        } = self;
        let was_zero = magnitude.is_zero() && !sticky;
        let bits = magnitude.bits() as i64;
        let drop = (bits - PRECISION as i64).max(MIN_EXPONENT - exponent);
        let (mut significand, mut exponent) = if drop <= 0 {
            // Exact (a sticky remainder only comes with guard bits to drop: see `divide`).
            debug_assert!(!sticky);
            let shifted = magnitude << (-drop) as usize;
            (shifted, exponent + drop)
        } else {
            let drop = drop as u64;
            let kept = &magnitude >> drop;
            let half = BigUint::one() << (drop - 1);
            let rest = magnitude - (&kept << drop);
            let up = rest > half || (rest == half && (sticky || kept.bit(0)));
            (if up { kept + 1u32 } else { kept }, exponent + drop as i64)
        };
        if significand.bits() > PRECISION {
            significand >>= 1;
            exponent += 1;
        }
        let significand = significand.to_u64().expect("rounded to 64 bits");
        if significand == 0 {
            return if was_zero {
                Ok(LongDouble::zero(negative))
            } else {
                Err(OutOfRange::Underflow)
            };
        }
        if significand.ilog2() as i64 + 1 + exponent > MAX_BINARY_DIGITS {
            return Err(OutOfRange::Overflow);
        }
        Ok(LongDouble {
            negative,
            significand,
            exponent,
        })
    }
}

/// `numerator / denominator × 2^exponent` as an [`Exact`] with guard bits enough to round.
fn divide(negative: bool, numerator: BigUint, denominator: &BigUint, exponent: i64) -> Exact {
    // At least 66 bits in the quotient: 64 kept, a guard bit and one more, so the rounding
    // always drops bits and the remainder's weight shows in `sticky`.
    let shift = (66 + denominator.bits() as i64 - numerator.bits() as i64).max(0) as u64;
    let scaled = numerator << shift;
    let quotient = &scaled / denominator;
    let sticky = !(scaled - &quotient * denominator).is_zero();
    Exact {
        negative,
        magnitude: quotient,
        exponent: exponent - shift as i64,
        sticky,
    }
}

impl LongDouble {
    fn zero(negative: bool) -> LongDouble {
        LongDouble {
            negative,
            significand: 0,
            exponent: 0,
        }
    }

    fn exact(self) -> Exact {
        Exact {
            negative: self.negative,
            magnitude: BigUint::from(self.significand),
            exponent: self.exponent,
            sticky: false,
        }
    }

    /// The correctly rounded sum, or `None` if it overflows (Redis: "increment would produce
    /// NaN or Infinity").
    pub(crate) fn checked_add(self, other: LongDouble) -> Option<LongDouble> {
        if self.significand == 0 && other.significand == 0 {
            // -0 + -0 is -0; any other sum of zeros is +0 (rounding to nearest).
            return Some(LongDouble::zero(self.negative && other.negative));
        }
        let exponent = self.exponent.min(other.exponent);
        let (a, b) = (self.exact(), other.exact());
        let a_magnitude = a.magnitude << (self.exponent - exponent) as u64;
        let b_magnitude = b.magnitude << (other.exponent - exponent) as u64;
        let (negative, magnitude) = if self.negative == other.negative {
            (self.negative, a_magnitude + b_magnitude)
        } else if a_magnitude >= b_magnitude {
            // An exact cancellation is +0.
            let negative = self.negative && a_magnitude != b_magnitude;
            (negative, a_magnitude - b_magnitude)
        } else {
            (other.negative, b_magnitude - a_magnitude)
        };
        Exact {
            negative,
            magnitude,
            exponent,
            sticky: false,
        }
        .round()
        .ok()
    }

    /// Printed as Redis prints INCRBYFLOAT's result: `%.17Lf` (rounded to nearest, ties to
    /// even), then trailing zeros and a trailing `.` removed, and `-0` written `0`.
    pub(crate) fn to_redis_string(self) -> String {
        let magnitude = BigUint::from(self.significand);
        let mut text = if self.exponent >= 0 {
            (magnitude << self.exponent as u64).to_string()
        } else {
            let shift = (-self.exponent) as u64;
            let scaled = magnitude * BigUint::from(10u32).pow(17);
            let mut quotient = &scaled >> shift;
            let rest = scaled - (&quotient << shift);
            let half = BigUint::one() << (shift - 1);
            if rest > half || (rest == half && quotient.bit(0)) {
                quotient += 1u32;
            }
            let digits = format!("{quotient:0>18}");
            let (whole, fraction) = digits.split_at(digits.len() - 17);
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                whole.to_string()
            } else {
                format!("{whole}.{fraction}")
            }
        };
        if self.negative && text != "0" {
            text.insert(0, '-');
        }
        text
    }
}

/// A float as Redis reads one (`string2ld`): the whole text as `strtold` takes it (decimal,
/// hexadecimal `0x1.8p3`, `inf`/`infinity`, an optional sign), no leading space, not NaN, not
/// out of range (an overflow or a non-zero value that rounds to zero), under 5 KiB. Every
/// byte must be read (Redis checks that `strtold` stopped at the end, not at a zero byte).
pub(crate) fn parse_long_double(text: &[u8]) -> Option<ParsedFloat> {
    if text.is_empty() || text.len() >= MAX_TEXT {
        return None;
    }
    if is_c_space(text[0]) {
        return None;
    }
    let (negative, body) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        return Some(ParsedFloat::Infinite);
    }
    let exact = if body.len() > 2 && body[..2].eq_ignore_ascii_case(b"0x") {
        hexadecimal(negative, &body[2..])?
    } else {
        decimal(negative, body)?
    };
    exact.round().ok().map(ParsedFloat::Finite)
}

/// C's `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// Digits with at most one `.` (at least one digit), then an optional exponent: the digits as
/// one integer, how many came after the point, and the rest of the text.
fn mantissa(text: &[u8], radix: u32) -> Option<(BigUint, i64, &[u8])> {
    let mut digits = Vec::new();
    let mut after_point = 0i64;
    let mut seen_point = false;
    let mut at = 0;
    while let Some(&byte) = text.get(at) {
        if byte == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(digit) = char::from(byte).to_digit(radix) {
            digits.push(digit as u8);
            if seen_point {
                after_point += 1;
            }
        } else {
            break;
        }
        at += 1;
    }
    if digits.is_empty() {
        return None;
    }
    let value = BigUint::from_radix_be(&digits, radix).expect("digits of the radix");
    Some((value, after_point, &text[at..]))
}

/// An exponent's text (`[+-]digits`, the whole rest), saturated far past any finite value.
fn exponent(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits
        .iter()
        .fold(0i64, |n, &d| (n * 10 + i64::from(d - b'0')).min(1 << 40));
    Some(if negative { -magnitude } else { magnitude })
}

fn decimal(negative: bool, text: &[u8]) -> Option<Exact> {
    let (digits, after_point, rest) = mantissa(text, 10)?;
    let power = match rest.first() {
        None => 0,
        Some(b'e' | b'E') => exponent(&rest[1..])?,
        Some(_) => return None,
    };
    if digits.is_zero() {
        return Some(Exact {
            negative,
            magnitude: digits,
            exponent: 0,
            sticky: false,
        });
    }
    let power = power - after_point;
    // Far out of range either way (the largest finite value is near 1.19e4932, the smallest
    // subnormal near 3.6e-4951): no need to compute.
    let magnitude_digits = digits.to_string().len() as i64 + power;
    if !(-5000..=5000).contains(&magnitude_digits) {
        return Some(Exact {
            negative,
            magnitude: BigUint::one(),
            exponent: if magnitude_digits > 0 { 20000 } else { -20000 },
            sticky: false,
        });
    }
    Some(if power >= 0 {
        Exact {
            negative,
            magnitude: digits * BigUint::from(10u32).pow(power as u32),
            exponent: 0,
            sticky: false,
        }
    } else {
        divide(
            negative,
            digits,
            &BigUint::from(10u32).pow((-power) as u32),
            0,
        )
    })
}

fn hexadecimal(negative: bool, text: &[u8]) -> Option<Exact> {
    let (digits, after_point, rest) = mantissa(text, 16)?;
    let power = match rest.first() {
        None => 0,
        Some(b'p' | b'P') => exponent(&rest[1..])?,
        Some(_) => return None,
    };
    Some(Exact {
        negative,
        exponent: if digits.is_zero() {
            0
        } else {
            (power - 4 * after_point).clamp(-(1 << 20), 1 << 20)
        },
        magnitude: digits,
        sticky: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_exactly_as_redis_reads_them() {
        for (text, expected) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("007", None),
            ("01", None),
            ("-0", None),
            ("+1", None),
            ("00", None),
            ("", None),
            ("-", None),
            (" 1", None),
            ("1 ", None),
            ("1x", None),
            ("1.0", None),
            ("000000000000000000001", None),
        ] {
            assert_eq!(parse_i64(text.as_bytes()), expected, "{text:?}");
        }
    }

    fn incr(value: &str, by: &str) -> Option<String> {
        let finite = |text: &str| match parse_long_double(text.as_bytes())? {
            ParsedFloat::Finite(value) => Some(value),
            ParsedFloat::Infinite => None,
        };
        Some(finite(value)?.checked_add(finite(by)?)?.to_redis_string())
    }

    #[test]
    fn long_double_sums_print_as_redis_prints_them() {
        // Each expected value is what Redis 7.0.15 (x86-64) answered to INCRBYFLOAT.
        for (value, by, expected) in [
            ("10.5", "0.1", "10.6"),
            ("0", "0x10", "16"),
            ("10.6", "1e300", "1000000000000000000008997324079559193870523944273290747938260082321265646596180935755849152083750497190350372508614274835903592556184672983913096260520748646287327135641843653294084255107606016789726652932370030551382947620994540294772781889620606179267611627097410650567187386105690089424915104006144"),
            ("0", "1e-4940", "0"),
            ("5", "-5", "0"),
            ("-0", "-0", "0"),
            ("1", "-1.5", "-0.5"),
            ("3.0", "0.0000001", "3.0000001"),
            ("0", "0.1", "0.1"),
            ("0", "1e-18", "0"),
            ("0", "-1e-18", "0"),
            ("0", "0.000000000000000015", "0.00000000000000002"),
            ("0", "0.000011444091796875", "0.00001144409179688"),
            // An exact tie at the 18th decimal rounds to even: 2^-18 = 0.000003814697265625.
            ("0", "0.000003814697265625", "0.00000381469726562"),
        ] {
            assert_eq!(incr(value, by).as_deref(), Some(expected), "{value} + {by}");
        }
    }

    #[test]
    fn the_largest_decimals_print_every_integer_digit() {
        // Redis 7.0.15 answered 4,933 digits for 0 + 1e4932: the long double's exact value.
        let digits = incr("0", "1e4932").unwrap();
        assert_eq!(digits.len(), 4933);
        assert!(digits.starts_with("1000000000000000000006018949387963891323837774"));
        assert!(digits.ends_with("371163141086538418113791886622720"));
    }

    #[test]
    fn text_strtold_refuses_or_redis_refuses_is_not_a_float() {
        for text in [
            "",
            " 1",
            "1 ",
            "abc",
            "1e",
            "1e+",
            "0x",
            "0xg",
            "nan",
            "NaN",
            "-nan",
            "1e5000",
            "-1e5000",
            "1e-5000",
            "1..2",
            ".",
            "0x1p",
            "infinite",
            "++1",
            "1\0garbage",
            "\0",
            "\x001996",
        ] {
            assert!(
                parse_long_double(text.as_bytes()).is_none(),
                "{text:?} was read"
            );
        }
        for text in [
            "1",
            "+1",
            "-1.",
            ".5",
            "1e3",
            "1E-3",
            "0x1.8p1",
            "0X10",
            "inf",
            "-Infinity",
            "0e99999",
            "00012",
        ] {
            assert!(parse_long_double(text.as_bytes()).is_some(), "{text:?}");
        }
        assert!(parse_long_double(&[b'1'; MAX_TEXT]).is_none());
        assert!(matches!(
            parse_long_double(b"-inf"),
            Some(ParsedFloat::Infinite)
        ));
    }

    #[test]
    fn sums_past_the_largest_value_overflow() {
        let largest = "0xffffffffffffffffp16320";
        assert!(incr(largest, "0").is_some());
        assert!(incr(largest, largest).is_none());
        assert!(parse_long_double(b"0x1p16384").is_none());
        assert!(incr(largest, "-0xffffffffffffffffp16320").as_deref() == Some("0"));
    }

    #[test]
    fn decimal_reading_rounds_to_the_nearest_64_bit_significand() {
        // 2^64 + 1 needs 65 bits: a tie between 2^64 and 2^64 + 2, to even (2^64).
        let tie = parse_long_double(b"18446744073709551617").unwrap();
        let ParsedFloat::Finite(tie) = tie else {
            panic!()
        };
        assert_eq!(tie.to_redis_string(), "18446744073709551616");
        let ParsedFloat::Finite(above) = parse_long_double(b"18446744073709551619").unwrap() else {
            panic!()
        };
        assert_eq!(above.to_redis_string(), "18446744073709551620");
    }
}
