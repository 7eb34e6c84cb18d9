//! Byte sizes on the command line: `4096`, `64K`, `1M`, `2G`, `1T` (binary units).

/// Parses a size with an optional K/M/G/T suffix (powers of 1024).
pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64K, 1M, 2G, 1T)"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Formats bytes in the largest exact binary unit.
pub fn show(n: u64) -> String {
    match n {
        n if n >= 1 << 40 && n % (1 << 40) == 0 => format!("{}T", n >> 40),
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}G", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_and_show() {
        assert_eq!(super::parse("64K"), Ok(65536));
        assert_eq!(super::parse("1m"), Ok(1 << 20));
        assert_eq!(super::parse("1T"), Ok(1 << 40));
        assert!(super::parse("12Q").is_err());
        assert_eq!(super::show(4 << 20), "4M");
        assert_eq!(super::show(1000), "1000");
    }
}
