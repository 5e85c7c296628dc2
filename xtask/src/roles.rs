//! Where each section of `src/permissions.rs` is granted: one (Cluster)Role
//! per section, in config/rbac and in the chart. The generators of both and
//! of the readable listing read this table, so the three cannot disagree.

use modelservice_operator::permissions::{Section, sections};

/// One section's Role. The names are those of the plain manifests
/// (config/rbac); the chart derives its own from the release name.
pub struct Role {
    /// The section's key in `src/permissions.rs`.
    pub section: &'static str,
    pub kind: &'static str,
    pub name: &'static str,
    /// `None` for a ClusterRole.
    pub namespace: Option<&'static str>,
    pub config_file: &'static str,
    /// Why the Role exists and where it applies, above it in `config_file`.
    pub about: &'static str,
    /// The chart template that renders the Role around the rules.
    pub chart_template: &'static str,
    /// The named template (in the generated `_rules.tpl`) that the chart
    /// template includes as its `rules:`.
    pub chart_define: &'static str,
}

/// The operator's namespace in the plain manifests (config/default).
const NAMESPACE: &str = "modelservice-system";

pub const ROLES: [Role; 5] = [
    Role {
        section: "clusterRules",
        kind: "ClusterRole",
        name: "modelservice-operator",
        namespace: None,
        config_file: "config/rbac/role.yaml",
        about: "The operator's workload permissions (clusterRules). The chart makes this a \
                Role in the watched namespace when watchNamespace is set.",
        chart_template: "charts/modelservice-operator/templates/rbac.yaml",
        chart_define: "modelservice-operator.workloadRules",
    },
    Role {
        section: "crdRules",
        kind: "ClusterRole",
        name: "modelservice-operator-crd",
        namespace: None,
        config_file: "config/rbac/crd_role.yaml",
        about: "The ModelService CRD, by name only (crdRules): the conversion webhook keeps \
                its clientConfig and caBundle, the leader's storage migration narrows \
                status.storedVersions. A ClusterRole even for an operator that watches \
                one namespace: the CRD is cluster-scoped.",
        chart_template: "charts/modelservice-operator/templates/crd-rbac.yaml",
        chart_define: "modelservice-operator.crdRules",
    },
    Role {
        section: "capacityRules",
        kind: "ClusterRole",
        name: "modelservice-operator-capacity",
        namespace: None,
        config_file: "config/rbac/capacity_role.yaml",
        about: "Free GPUs for rollout.surge Auto (capacityRules): nodes and the pods of \
                every namespace, listed once when a rollout starts. A ClusterRole even \
                for an operator that watches one namespace. Without it rollouts \
                replace (maxSurge 0) and the Progressing condition says why: drop it \
                and its binding from kustomization.yaml to grant no cluster-wide reads.",
        chart_template: "charts/modelservice-operator/templates/capacity-rbac.yaml",
        chart_define: "modelservice-operator.capacityRules",
    },
    Role {
        section: "leaseRules",
        kind: "Role",
        name: "modelservice-operator-leader-election",
        namespace: Some(NAMESPACE),
        config_file: "config/rbac/leader_election_role.yaml",
        about: "Leader election (leaseRules): the Lease `modelservice-operator` in the \
                operator's own namespace.",
        chart_template: "charts/modelservice-operator/templates/leader-election-rbac.yaml",
        chart_define: "modelservice-operator.leaseRules",
    },
    Role {
        section: "webhookSecretRules",
        kind: "Role",
        name: "modelservice-operator-webhook-certs",
        namespace: Some(NAMESPACE),
        config_file: "config/rbac/webhook_secret_role.yaml",
        about: "The webhook's own CA and serving certificate (webhookSecretRules), in the \
                Secret modelservice-operator-webhook-certs of the operator's namespace \
                (--webhook-secret). Create cannot be limited by name; get and update \
                are. Not needed with cert-manager certificates: drop it and its binding \
                from kustomization.yaml.",
        chart_template: "charts/modelservice-operator/templates/webhook-rbac.yaml",
        chart_define: "modelservice-operator.webhookSecretRules",
    },
];

/// The section a Role grants.
pub fn section(role: &Role) -> Result<Section, String> {
    sections()
        .into_iter()
        .find(|s| s.key == role.section)
        .ok_or_else(|| format!("src/permissions.rs has no section {}", role.section))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_has_exactly_one_role() {
        let mut granted: Vec<_> = ROLES.iter().map(|r| r.section).collect();
        granted.sort_unstable();
        let mut keys: Vec<_> = sections().iter().map(|s| s.key).collect();
        keys.sort_unstable();
        assert_eq!(granted, keys);
    }
}
