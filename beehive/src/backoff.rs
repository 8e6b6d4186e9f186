//! The one back-off rule every retry loop of the workspace uses: a wait that doubles per
//! consecutive failure up to a cap.

use std::time::Duration;

/// Waits between attempts: `initial · 2ⁿ⁻¹` before attempt `n` (1-based), at most `max`.
/// With `initial == max` the wait is constant.
///
/// ```
/// use std::time::Duration;
/// use beehive::Backoff;
///
/// let b = Backoff::new(Duration::from_millis(200), Duration::from_secs(1));
/// assert_eq!(b.delay(1), Duration::from_millis(200));
/// assert_eq!(b.delay(3), Duration::from_millis(800));
/// assert_eq!(b.delay(40), Duration::from_secs(1));
/// // Drawn from [delay / 2, delay]: clients that failed together do not retry together.
/// let d = b.jittered(2, 0.5, 1.0);
/// assert!(d >= Duration::from_millis(200) && d <= Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first attempt.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Backoff {
    /// A back-off from `initial` doubling to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max }
    }

    /// The wait before attempt `attempt` (1-based; 0 counts as 1). Never more than `max`, and
    /// never overflows however many attempts failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        // 2³¹ times any wait of a millisecond or more is past every cap in use; saturating
        // keeps larger products at Duration::MAX until `min` takes the cap.
        let doublings = attempt.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// [`Backoff::delay`] times a factor drawn uniformly from `[low, high]` (for example
    /// `0.5, 1.0`, "equal jitter", or `0.75, 1.25`, ±25 %), so that many clients that failed
    /// at the same moment spread their retries. The result may exceed `max` when `high > 1`.
    pub fn jittered(&self, attempt: u32, low: f64, high: f64) -> Duration {
        let factor = low + (high - low) * rand::random::<f64>();
        self.delay(attempt).mul_f64(factor.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_per_attempt_and_stops_at_the_cap() {
        let b = Backoff::new(Duration::from_millis(5), Duration::from_secs(1000));
        assert_eq!(b.delay(0), Duration::from_millis(5));
        assert_eq!(b.delay(1), Duration::from_millis(5));
        assert_eq!(b.delay(2), Duration::from_millis(10));
        assert_eq!(b.delay(18), Duration::from_millis(5 << 17));
        assert_eq!(b.delay(19), Duration::from_secs(1000));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1000));
        let huge = Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX);
        assert_eq!(huge.delay(u32::MAX), Duration::MAX);
    }

    #[test]
    fn equal_initial_and_max_is_a_constant_wait() {
        let b = Backoff::new(Duration::from_secs(3), Duration::from_secs(3));
        for attempt in [1, 2, 10, u32::MAX] {
            assert_eq!(b.delay(attempt), Duration::from_secs(3));
        }
    }

    #[test]
    fn jitter_stays_within_its_bounds_and_varies() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
        let mut seen = std::collections::HashSet::new();
        for (attempt, base) in [(1u32, 1u64), (2, 2), (3, 4), (4, 8), (9, 8)] {
            let base = Duration::from_secs(base);
            for _ in 0..50 {
                let d = b.jittered(attempt, 0.5, 1.0);
                assert!(d >= base / 2 && d <= base, "attempt {attempt}: {d:?}");
                let d = b.jittered(attempt, 0.75, 1.25);
                assert!(
                    d >= base.mul_f64(0.75) && d <= base.mul_f64(1.25),
                    "attempt {attempt}: {d:?}"
                );
                seen.insert(d);
            }
        }
        assert!(
            seen.len() > 100,
            "the factor is drawn each time: {} distinct",
            seen.len()
        );
    }
}
