//! A log-line throttle: at most one line per period for reports an edge can repeat at will.

use std::time::Duration;

use tokio::time::Instant;

/// At most one log line per period, counting the lines it held back in between.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    pub(crate) const fn new(every: Duration) -> Self {
        Throttle {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(lines held back since the last one)` when a line may be written at `now`.
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < self.every)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.allow(t0), Some(0));
        for s in 1..10 {
            assert_eq!(t.allow(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(t.allow(t0 + Duration::from_secs(10)), Some(9));
        assert_eq!(t.allow(t0 + Duration::from_secs(11)), None);
        assert_eq!(t.allow(t0 + Duration::from_secs(25)), Some(1));
    }
}
