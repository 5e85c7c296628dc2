//! The controller's one error type.

use kube::runtime::finalizer;

/// Everything a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the finalizer, or the work wrapped by it, failed.
    /// Boxed: the finalizer error wraps this type.
    #[error("{0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
    /// The object lacks something the API server always sets.
    #[error("the object has no {0}")]
    MissingField(&'static str),
    /// A child's name is held by an object this ModelService does not
    /// control: nothing was written to it.
    #[error("{0}")]
    ChildConflict(#[from] crate::core::ownership::Conflict),
    /// A child could not be turned into JSON (a bug, not bad input).
    #[error("serializing {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action: action.into(),
            source,
        }
    }

    /// A short, bounded label for the errors-by-kind metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube { source, .. } => match source {
                kube::Error::Api(s) if s.code == 409 => "conflict",
                kube::Error::Api(s) if s.code == 404 => "not_found",
                kube::Error::Api(s) if s.code == 403 => "forbidden",
                kube::Error::Api(s) if s.code == 422 => "invalid",
                kube::Error::Api(s) if s.code >= 500 => "server_error",
                kube::Error::Api(_) => "api_error",
                _ => "transport",
            },
            Self::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e.kind(),
                _ => "finalizer",
            },
            Self::MissingField(_) => "missing_field",
            Self::ChildConflict(_) => "child_conflict",
            Self::Serialize { .. } => "serialize",
        }
    }

    /// What failed, without the details that change from one retry to the
    /// next: what was being done and the kind of error. One cause is one
    /// `ReconcileFailed` Event, however often it is retried.
    pub fn cause(&self) -> String {
        match self {
            Self::Kube { action, .. } => format!("{action}: {}", self.kind()),
            Self::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e.cause(),
                other => format!("finalizer: {other}"),
            },
            other => other.to_string(),
        }
    }

    /// True when retrying cannot help until someone changes something (the
    /// spec, RBAC, an admission policy): worth a status condition. Conflicts,
    /// throttling, server errors and network trouble are retried quietly.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::Kube {
                source: kube::Error::Api(s),
                ..
            } => (400..500).contains(&s.code) && !matches!(s.code, 404 | 409 | 429),
            Self::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => {
                    e.is_permanent()
                }
                _ => false,
            },
            Self::MissingField(_) | Self::Serialize { .. } | Self::ChildConflict(_) => true,
            Self::Kube { .. } => false,
        }
    }
}

impl Error {
    /// The API server answered 404: for an apply (which creates what is
    /// missing), the kind itself is not served.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source, .. } if is_not_found(source))
    }
}

/// True for a 404: in cleanup, "already gone" is success.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        let status = kube::core::Status::failure("m", "r").with_code(code);
        Error::kube("applying Deployment", kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn permanence_follows_the_status_code() {
        assert!(api(422).is_permanent());
        assert!(api(403).is_permanent());
        assert!(!api(409).is_permanent());
        assert!(!api(429).is_permanent());
        assert!(!api(500).is_permanent());
    }

    #[test]
    fn kinds_are_bounded_labels() {
        assert_eq!(api(409).kind(), "conflict");
        assert_eq!(api(503).kind(), "server_error");
        assert_eq!(api(422).kind(), "invalid");
        let wrapped = Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(api(403))));
        assert_eq!(wrapped.kind(), "forbidden");
        assert!(wrapped.is_permanent());
    }

    #[test]
    fn messages_say_what_was_being_done() {
        assert!(api(422).to_string().starts_with("applying Deployment: "));
    }
}
