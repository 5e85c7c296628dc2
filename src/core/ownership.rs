//! Whose an object is: the operator adopts nothing.
//!
//! A ModelService's name is chosen by whoever may create one, and its
//! children take their names from it. Without this check, a tenant could
//! name a ModelService after any object in the namespace (a Service
//! `postgres`, another ModelService's canary) and the operator's forced
//! apply would take it over, and garbage collection would later delete it.
//! So the operator writes to an object only when this ModelService controls
//! it (a controller owner reference with its uid) or when no object of that
//! name exists. Anything else is a conflict that the status names.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::diagnosis::Problem;
use super::reasons;

/// A child's name is held by an object this ModelService does not control.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} {name} already exists and is {holder}; the operator adopts nothing, so it leaves it alone and creates no {kind} {name}. Rename or delete that {kind}, or rename this ModelService: the child appears once the name is free"
)]
pub struct Conflict {
    pub kind: String,
    pub name: String,
    /// Who holds it, in words: "controlled by ModelService foo", or "not
    /// managed by modelservice-operator".
    pub holder: String,
}

impl Conflict {
    /// The status problem it becomes.
    pub fn problem(&self) -> Problem {
        Problem {
            reason: reasons::CHILD_CONFLICT,
            message: self.to_string(),
        }
    }
}

/// The uid of the object that controls `meta`, if any.
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// `None` when the existing object `found` (of `kind`) is controlled by
/// `owner_uid`, so the operator may write to it; else the conflict.
pub fn check(kind: &str, found: &ObjectMeta, owner_uid: &str) -> Option<Conflict> {
    let controller = found
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let holder = match controller {
        Some(o) if o.uid == owner_uid => return None,
        Some(o) => format!("controlled by {} {}", o.kind, o.name),
        None => "not managed by modelservice-operator".to_string(),
    };
    Some(Conflict {
        kind: kind.to_string(),
        name: found.name.clone().unwrap_or_default(),
        holder,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn meta(owner: Option<(&str, &str, bool)>) -> ObjectMeta {
        ObjectMeta {
            name: Some("postgres".into()),
            owner_references: owner.map(|(kind, uid, controller)| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: kind.into(),
                    name: "foo".into(),
                    uid: uid.into(),
                    controller: Some(controller),
                    block_owner_deletion: None,
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn ours_is_written() {
        assert_eq!(
            check("Service", &meta(Some(("ModelService", "u1", true))), "u1"),
            None
        );
    }

    #[test]
    fn an_unowned_object_is_not_adopted_and_the_message_says_so() {
        let c = check("Service", &meta(None), "u1").expect("conflict");
        assert_eq!(c.holder, "not managed by modelservice-operator");
        assert!(c.to_string().starts_with(
            "Service postgres already exists and is not managed by modelservice-operator"
        ));
        assert_eq!(c.problem().reason, "ChildConflict");
    }

    #[test]
    fn another_controller_is_named() {
        let c =
            check("Service", &meta(Some(("ModelService", "u2", true))), "u1").expect("conflict");
        assert_eq!(c.holder, "controlled by ModelService foo");
    }

    #[test]
    fn an_owner_that_is_not_the_controller_does_not_make_it_ours() {
        // Our uid as a plain owner: someone listed us, we never controlled it.
        let c = check("Service", &meta(Some(("ModelService", "u1", false))), "u1");
        assert!(c.is_some());
        assert_eq!(
            controller_uid(&meta(Some(("ModelService", "u1", false)))),
            None
        );
    }
}
