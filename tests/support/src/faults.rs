//! Fault injection: fail the next N matching requests.
//!
//! Operators must survive API errors (conflicts from concurrent writers,
//! transient 500s); tests script those failures deterministically here
//! instead of hoping for races.

use std::sync::Mutex;

use crate::counts::Verb;

/// Fail the next `times` requests matching `verb` and `resource` with `code`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailRule {
    /// `None` matches every verb.
    pub verb: Option<Verb>,
    /// Plural with optional subresource (`"modelservices/status"`); `None`
    /// matches every resource.
    pub resource: Option<String>,
    /// HTTP status to answer with (500, 409, 429, 503, ...).
    pub code: u16,
    pub times: usize,
}

impl FailRule {
    /// Fail the next request of any kind with `code`.
    pub fn new(code: u16) -> Self {
        FailRule {
            verb: None,
            resource: None,
            code,
            times: 1,
        }
    }

    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_string());
        self
    }

    pub fn times(mut self, times: usize) -> Self {
        self.times = times;
        self
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        self.times > 0
            && self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }
}

/// The pending rules, consumed in the order they were added.
#[derive(Default)]
pub(crate) struct Faults {
    rules: Mutex<Vec<FailRule>>,
}

impl Faults {
    pub fn add(&self, rule: FailRule) {
        if rule.times > 0 {
            self.rules
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(rule);
        }
    }

    /// Consumes one use of the first rule matching the request, returning
    /// the status code to fail with.
    pub fn take(&self, verb: Verb, resource: &str) -> Option<u16> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let idx = rules.iter().position(|r| r.matches(verb, resource))?;
        let code = rules[idx].code;
        rules[idx].times -= 1;
        if rules[idx].times == 0 {
            rules.remove(idx);
        }
        Some(code)
    }

    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_consumed() {
        let f = Faults::default();
        f.add(
            FailRule::new(500)
                .verb(Verb::Patch)
                .resource("deployments")
                .times(2),
        );
        assert_eq!(f.take(Verb::Get, "deployments"), None);
        assert_eq!(f.take(Verb::Patch, "services"), None);
        assert_eq!(f.take(Verb::Patch, "deployments"), Some(500));
        assert_eq!(f.take(Verb::Patch, "deployments"), Some(500));
        assert_eq!(f.take(Verb::Patch, "deployments"), None);
    }
}
