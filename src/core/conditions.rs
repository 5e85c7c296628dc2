//! Merging freshly computed conditions with the ones already in status.
//!
//! `lastTransitionTime` moves only when a condition's status changes; a new
//! reason or message alone keeps it. Together with a fixed order this makes
//! the status a pure function of what was observed, so an unchanged world
//! produces a byte-identical status and no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// One condition as the operator wants it now, before timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Wanted {
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// The conditions to write: `wanted` in its order, each stamped with
/// `generation`, keeping the previous transition time when the status did not
/// change. Conditions of other types (set by someone else) are kept, after ours.
pub fn merge(
    previous: &[Condition],
    wanted: &[Wanted],
    generation: i64,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = wanted
        .iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == w.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: w.type_.to_string(),
                status: status.to_string(),
                reason: w.reason.clone(),
                message: w.message.clone(),
                observed_generation: Some(generation),
                last_transition_time,
            }
        })
        .collect();
    out.extend(
        previous
            .iter()
            .filter(|c| !wanted.iter().any(|w| w.type_ == c.type_))
            .cloned(),
    );
    out
}

/// Finds a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("timestamp"))
    }

    #[test]
    fn transition_time_is_kept_while_status_is_unchanged() {
        let first = merge(
            &[],
            &[Wanted::new("Ready", false, "RollingOut", "0/1")],
            1,
            &t(100),
        );
        let second = merge(
            &first,
            &[Wanted::new("Ready", false, "InsufficientGPU", "no gpus")],
            2,
            &t(200),
        );
        assert_eq!(second[0].last_transition_time, t(100));
        assert_eq!(second[0].reason, "InsufficientGPU");
        assert_eq!(second[0].observed_generation, Some(2));
    }

    #[test]
    fn transition_time_moves_when_status_flips() {
        let first = merge(
            &[],
            &[Wanted::new("Ready", false, "RollingOut", "0/1")],
            1,
            &t(100),
        );
        let second = merge(
            &first,
            &[Wanted::new("Ready", true, "Available", "1/1")],
            1,
            &t(300),
        );
        assert_eq!(second[0].last_transition_time, t(300));
        assert_eq!(second[0].status, "True");
    }

    #[test]
    fn foreign_conditions_survive_after_ours() {
        let foreign = Condition {
            type_: "example.com/Audited".into(),
            status: "True".into(),
            reason: "Done".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: t(5),
        };
        let out = merge(
            std::slice::from_ref(&foreign),
            &[Wanted::new("Ready", true, "Available", "1/1")],
            1,
            &t(9),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].type_, "Ready");
        assert_eq!(out[1], foreign);
    }

    #[test]
    fn same_inputs_give_identical_output() {
        let w = [
            Wanted::new("Ready", true, "Available", "1/1"),
            Wanted::new("Degraded", false, "AsExpected", ""),
        ];
        let a = merge(&[], &w, 4, &t(10));
        let b = merge(&a, &w, 4, &t(99));
        assert_eq!(a, b, "a later clock alone must not change anything");
    }
}
