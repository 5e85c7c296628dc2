//! The (Cluster)Roles of the plain manifests (config/rbac, applied with
//! kustomize): whole files, metadata included, as nothing in them is
//! templated.

use crate::roles::{ROLES, section};
use crate::rules_yaml::{comment, quoted, rules};
use crate::{GENERATED, Generated};

/// The labels every object of config/ carries.
const LABELS: &str = "  labels:
    app.kubernetes.io/name: modelservice-operator
    app.kubernetes.io/instance: modelservice-operator
";

pub fn files() -> Result<Vec<Generated>, String> {
    ROLES
        .iter()
        .map(|role| {
            let section = section(role)?;
            let namespace = role
                .namespace
                .map(|ns| format!("  namespace: {ns}\n"))
                .unwrap_or_default();
            let contents = format!(
                "# {GENERATED}\n{about}apiVersion: rbac.authorization.k8s.io/v1\n\
                 kind: {kind}\nmetadata:\n  name: {name}\n{namespace}{LABELS}rules:\n{rules}",
                about = comment(role.about, 0),
                kind = role.kind,
                name = role.name,
                rules = rules(&section.rules, 2, quoted),
            );
            Ok(Generated::new(role.config_file, contents))
        })
        .collect()
}
