//! In-process retries of transient failures: a dropped connection or a 5xx
//! costs a few seconds and a resume, not a new pod that must list the
//! source again.

use std::time::Duration;

use super::outcome::Failure;

/// The backoff of one step (listing, or one file).
pub(crate) struct Retries<'a> {
    delays: &'a [Duration],
    used: usize,
}

impl<'a> Retries<'a> {
    pub fn new(delays: &'a [Duration]) -> Self {
        Self { delays, used: 0 }
    }

    /// After a failed attempt: waits and returns true when the failure is
    /// retryable and retries remain.
    pub async fn again(&mut self, failure: &Failure) -> bool {
        let Failure::Retryable(msg) = failure else {
            return false;
        };
        let Some(delay) = self.delays.get(self.used) else {
            return false;
        };
        self.used += 1;
        tracing::warn!(
            "{msg}; retry {} of {} in {delay:?}",
            self.used,
            self.delays.len()
        );
        tokio::time::sleep(*delay).await;
        true
    }

    /// The final failure, saying how many retries it took.
    pub fn exhausted(&self, failure: Failure) -> Failure {
        match failure {
            Failure::Retryable(msg) if self.used > 0 => {
                Failure::Retryable(format!("{msg} (after {} retries)", self.used))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_retryable_failures_are_retried_and_only_as_often_as_delays() {
        let delays = [Duration::from_millis(1), Duration::from_millis(1)];
        let mut r = Retries::new(&delays);
        assert!(!r.again(&Failure::Permanent("404".into())).await);
        let busy = Failure::Retryable("503".into());
        assert!(r.again(&busy).await);
        assert!(r.again(&busy).await);
        assert!(!r.again(&busy).await);
        assert_eq!(
            r.exhausted(busy),
            Failure::Retryable("503 (after 2 retries)".into())
        );
        assert!(
            !Retries::new(&[])
                .again(&Failure::Retryable("x".into()))
                .await
        );
    }
}
