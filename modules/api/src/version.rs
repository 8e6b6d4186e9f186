//! Resource version comparison that never panics.

use std::cmp::Ordering;

/// Compares two resource versions as unsigned 64-bit decimal integers (what etcd-backed API
/// servers produce). `None` when either does not parse: callers treat that as "unknown, send
/// it" (Go panics here, crashing cloudcore).
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    Some(a.parse::<u64>().ok()?.cmp(&b.parse::<u64>().ok()?))
}

/// True when `candidate` must be delivered over `acknowledged`: it is newer, or either
/// version does not parse.
pub fn is_newer(candidate: &str, acknowledged: &str) -> bool {
    !matches!(
        compare(candidate, acknowledged),
        Some(Ordering::Less | Ordering::Equal)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_numerically_and_tolerates_garbage() {
        assert_eq!(compare("9", "10"), Some(Ordering::Less));
        assert_eq!(
            compare("18446744073709551615", "1"),
            Some(Ordering::Greater)
        );
        assert_eq!(compare("abc", "1"), None);
        assert_eq!(compare("", "1"), None);
        assert!(is_newer("11", "10"));
        assert!(!is_newer("10", "10"));
        assert!(!is_newer("9", "10"));
        assert!(is_newer("abc", "10"));
    }
}
