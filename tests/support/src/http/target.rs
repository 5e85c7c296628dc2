//! Parsing resource URLs: `/api/v1/...` and `/apis/{group}/{version}/...`.

/// What a resource URL points at, before checking the type exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path prefix was used.
    pub legacy_watch: bool,
}

impl Target {
    /// Plural plus `/subresource`: the key for counters and fault rules.
    pub fn resource_label(&self) -> String {
        match &self.subresource {
            Some(s) => format!("{}/{s}", self.plural),
            None => self.plural.clone(),
        }
    }

    /// Parses a path; `None` for anything that is not a resource URL.
    pub fn parse(path: &str) -> Option<Target> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, mut rest) = match segs.as_slice() {
            ["api", v, rest @ ..] => ("", *v, rest),
            ["apis", g, v, rest @ ..] => (*g, *v, rest),
            _ => return None,
        };
        let mut legacy_watch = false;
        if rest.first() == Some(&"watch") {
            legacy_watch = true;
            rest = &rest[1..];
        }
        if rest.iter().any(|s| s.is_empty()) {
            return None;
        }
        let namespaced_form = rest.len() >= 3
            && rest[0] == "namespaces"
            && !(group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize"));
        let (namespace, tail) = if namespaced_form {
            (Some(rest[1].to_string()), &rest[2..])
        } else {
            (None, rest)
        };
        let (plural, name, subresource) = match tail {
            [p] => (*p, None, None),
            [p, n] => (*p, Some(*n), None),
            [p, n, s] => (*p, Some(*n), Some(*s)),
            _ => return None,
        };
        Some(Target {
            group: group.to_string(),
            version: version.to_string(),
            namespace,
            plural: plural.to_string(),
            name: name.map(str::to_string),
            subresource: subresource.map(str::to_string),
            legacy_watch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shapes() {
        let t = Target::parse("/apis/apps/v1/namespaces/ns/deployments/d/scale").unwrap();
        assert_eq!(t.group, "apps");
        assert_eq!(t.namespace.as_deref(), Some("ns"));
        assert_eq!(t.name.as_deref(), Some("d"));
        assert_eq!(t.resource_label(), "deployments/scale");

        let t = Target::parse("/api/v1/namespaces").unwrap();
        assert_eq!((t.plural.as_str(), t.name.as_deref()), ("namespaces", None));
        let t = Target::parse("/api/v1/namespaces/foo").unwrap();
        assert_eq!(
            (t.plural.as_str(), t.name.as_deref()),
            ("namespaces", Some("foo"))
        );
        let t = Target::parse("/api/v1/namespaces/foo/status").unwrap();
        assert_eq!(t.subresource.as_deref(), Some("status"));
        assert_eq!(t.namespace, None);
        let t = Target::parse("/api/v1/namespaces/foo/pods").unwrap();
        assert_eq!(t.namespace.as_deref(), Some("foo"));
        let t = Target::parse("/api/v1/pods").unwrap();
        assert_eq!(t.namespace, None);
        let t = Target::parse("/api/v1/watch/namespaces/foo/pods").unwrap();
        assert!(t.legacy_watch);
        assert!(Target::parse("/version").is_none());
        assert!(Target::parse("/api/v1").is_none());
    }
}
