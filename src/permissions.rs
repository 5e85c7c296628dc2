//! Everything the operator may do in the Kubernetes API, as data.
//!
//! This is the one list of permissions. The RBAC of the Helm chart and of
//! `config/rbac`, and the readable listing `config/rbac/permissions.yaml`, are
//! generated from it (`cargo xtask generate`; CI fails when they are stale),
//! and the end-to-end suite checks that every call the operator makes is
//! granted here. To change a permission, change it here.
//!
//! No wildcards, no nonResourceURLs. `resource_names` appear only where the
//! operator touches one named object of a kind it must not read in general
//! (the ModelService CRD among all CRDs, the webhook Secret among all
//! Secrets). Kubernetes cannot limit create, list or watch by name, so a rule
//! with `resource_names` never carries those verbs (a unit test holds it).

use crate::api::{CRD_NAME, GROUP};
use crate::webhook::secret::DEFAULT_SECRET_NAME;

/// A verb of an RBAC rule. An enum rather than strings so that a typo is a
/// compile error instead of a permission that silently grants nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    /// The verb as RBAC and the audit log spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    /// Whether `resourceNames` can limit the verb; Kubernetes ignores them
    /// for the others, so a named rule with one of those would grant more
    /// than it reads as.
    pub fn nameable(self) -> bool {
        !matches!(self, Verb::Create | Verb::List | Verb::Watch)
    }
}

use Verb::{Create, Get, List, Patch, Update, Watch};

/// One RBAC rule: some verbs on one resource of one API group, optionally
/// only on the named objects. Owned strings, so that rules can also come
/// from other tables (the child kinds' API groups are known at run time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Why the operator needs it. The generated RBAC files carry it as a
    /// comment above the rule, so a reviewer of a Role sees the reason.
    pub why: String,
    /// `""` is the core group.
    pub api_group: String,
    /// With its subresource, e.g. `modelservices/status`.
    pub resource: String,
    pub verbs: Vec<Verb>,
    /// Empty: every object of the resource.
    pub resource_names: Vec<String>,
}

impl Rule {
    pub fn new(
        why: impl Into<String>,
        api_group: impl Into<String>,
        resource: impl Into<String>,
        verbs: &[Verb],
    ) -> Self {
        Self {
            why: why.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            verbs: verbs.to_vec(),
            resource_names: Vec::new(),
        }
    }

    /// Limited to these objects.
    pub fn named(mut self, names: &[&str]) -> Self {
        self.resource_names = names.iter().map(|n| n.to_string()).collect();
        self
    }
}

/// One (Cluster)Role's worth of rules. The sections are separate because
/// they are granted at different scopes (all namespaces or the watched one,
/// cluster-wide, the operator's own namespace) or only in some installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Its key in `config/rbac/permissions.yaml`.
    pub key: &'static str,
    /// What the section covers, shown above it in the generated listing.
    pub why: &'static str,
    pub rules: Vec<Rule>,
}

/// All five sections, in the order of the generated listing.
pub fn sections() -> Vec<Section> {
    vec![
        Section {
            key: "clusterRules",
            why: "The workloads: ModelServices and their children. A ClusterRole, or a Role \
                  in the watched namespace when the operator watches one (the chart's \
                  watchNamespace).",
            rules: cluster_rules(),
        },
        Section {
            key: "crdRules",
            why: "The ModelService CRD (cluster-scoped), and no other CRD.",
            rules: crd_rules(),
        },
        Section {
            key: "capacityRules",
            why: "Free GPUs, for rollout.surge Auto: all nodes and the pods of every \
                  namespace, watched from the first rollout that needs free GPUs on, \
                  each pod reduced to its node and its GPU requests. A ClusterRole \
                  even for an operator that watches one namespace: nodes are \
                  cluster-scoped and other namespaces' pods hold GPUs too. Without \
                  it, rollouts replace and say why.",
            rules: capacity_rules(),
        },
        Section {
            key: "leaseRules",
            why: "Leader election, in the operator's own namespace.",
            rules: lease_rules(),
        },
        Section {
            key: "webhookSecretRules",
            why: "The webhook's own CA and serving certificate (keys ca.crt, ca.key, \
                  tls.crt, tls.key), shared by all replicas, in the Secret \
                  modelservice-operator-webhook-certs (--webhook-secret) in the \
                  operator's own namespace. Not needed with --webhook-certs=external \
                  (cert-manager).",
            rules: webhook_secret_rules(),
        },
    ]
}

/// The workloads: a ClusterRole, or a Role in the watched namespace when the
/// operator watches one.
pub fn cluster_rules() -> Vec<Rule> {
    let mut rules = vec![
        Rule::new(
            "Watch ModelServices; add and remove the finalizer with a JSON merge patch.",
            GROUP,
            "modelservices",
            &[Get, List, Watch, Patch],
        ),
        Rule::new(
            "Report observedGeneration, replicas and conditions.",
            GROUP,
            "modelservices/status",
            &[Patch],
        ),
        Rule::new(
            "Children carry ownerReferences with blockOwnerDeletion: true; with the \
             OwnerReferencesPermissionEnforcement admission plugin that needs update \
             on the owner's finalizers subresource.",
            GROUP,
            "modelservices/finalizers",
            &[Update],
        ),
    ];
    rules.extend(child_rules());
    rules.extend([
        Rule::new(
            "Read-only: diagnose why pods do not serve (InsufficientGPU, \
             ImagePullFailed, ...), from one watch of the pods labelled \
             managed-by modelservice-operator. Get: the endpoint pickers' Role \
             (route.backend InferencePool) grants get, list and watch on pods, \
             and Kubernetes lets the operator grant only what it holds; the \
             operator itself never gets a pod.",
            "",
            "pods",
            &[Get, List, Watch],
        ),
        Rule::new(
            "Read-only: the progress of a weights download (model.source), \
             from the last lines of its Job's pod log, every 5 s while it runs.",
            "",
            "pods/log",
            &[Get],
        ),
        Rule::new(
            "Not used by the operator: the endpoint pickers' Role \
             (route.backend InferencePool) grants get, list and watch on the \
             Inference Extension's objectives and rewrites, and Kubernetes \
             lets the operator grant only what it holds.",
            crate::api::inference::EXPERIMENTAL_GROUP,
            "inferenceobjectives",
            &[Get, List, Watch],
        ),
        Rule::new(
            "Not used by the operator: granted to the endpoint pickers, as above.",
            crate::api::inference::EXPERIMENTAL_GROUP,
            "inferencemodelrewrites",
            &[Get, List, Watch],
        ),
        Rule::new(
            "Kubernetes Events on ModelServices.",
            "events.k8s.io",
            "events",
            &[Create, Patch],
        ),
    ]);
    rules
}

/// The children's rules come from the child table (`controller::children`):
/// a new child kind is granted by its row.
fn child_rules() -> Vec<Rule> {
    crate::controller::children::rules()
}

/// The ModelService CRD, by name: always a ClusterRole, as the CRD is
/// cluster-scoped, also for an operator that watches one namespace.
pub fn crd_rules() -> Vec<Rule> {
    vec![
        Rule::new(
            "Conversion webhook: read the CRD and point \
             spec.conversion.webhook.clientConfig (service or url, and caBundle) \
             at this operator (JSON merge patch). Done with self-made \
             certificates, and with cert-manager's when ca.crt is mounted. \
             Storage migration (leader, all namespaces): read \
             status.storedVersions.",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &[Get, Patch],
        )
        .named(&[CRD_NAME]),
        Rule::new(
            "Storage migration: narrow status.storedVersions to [v1] once \
             every ModelService has been rewritten (JSON patch, test-and-replace).",
            "apiextensions.k8s.io",
            "customresourcedefinitions/status",
            &[Patch],
        )
        .named(&[CRD_NAME]),
    ]
}

/// Free GPUs for the surge decision (`controller::surge`): always a
/// ClusterRole, as what holds a node's GPUs is not limited to the watched
/// namespace.
pub fn capacity_rules() -> Vec<Rule> {
    vec![
        Rule::new(
            "rollout.surge Auto: which nodes take the pods (Ready, schedulable, \
             labels for nodeSelector, taints for tolerations) and their \
             allocatable GPUs; watched from the first rollout that needs them.",
            "",
            "nodes",
            &[List, Watch],
        ),
        Rule::new(
            "rollout.surge Auto: what the running pods of every namespace request \
             of the GPU resource, per node (fieldSelector \
             status.phase!=Succeeded,status.phase!=Failed); watched from the first \
             rollout that needs them, so a decision costs O(nodes), not O(pods).",
            "",
            "pods",
            &[List, Watch],
        ),
    ]
}

/// Leader election: a Role in the operator's own namespace.
pub fn lease_rules() -> Vec<Rule> {
    vec![Rule::new(
        "Leader election: the Lease named modelservice-operator in the \
         operator's own namespace (--lease-namespace, default POD_NAMESPACE).",
        "coordination.k8s.io",
        "leases",
        &[Get, List, Watch, Create, Update, Patch],
    )]
}

/// The webhook Secret: a Role in the operator's own namespace, only when the
/// operator makes its own certificates (`--webhook-certs=self`, the default).
pub fn webhook_secret_rules() -> Vec<Rule> {
    vec![
        Rule::new(
            "Read it at startup and before expiry; rotate it in place (update \
             with the resourceVersion read, so concurrent replicas cannot both \
             win).",
            "",
            "secrets",
            &[Get, Update],
        )
        .named(&[DEFAULT_SECRET_NAME]),
        Rule::new(
            "The first replica to start creates it. Create cannot be limited by name.",
            "",
            "secrets",
            &[Create],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The API server refuses a Role that grants more than its writer holds
    /// (RBAC escalation prevention): the endpoint pickers' Role must be
    /// within the operator's own rules, even when it watches one namespace.
    #[test]
    fn the_operator_holds_everything_the_endpoint_pickers_role_grants() {
        let v = crate::core::validate(
            &serde_yaml::from_str(
                "apiVersion: serving.modelservice.dev/v1\nkind: ModelService\nmetadata: {name: m, namespace: ns}\nspec: {model: {name: m}, runtime: {image: i}}\n",
            )
            .expect("parses"),
            "ns",
        )
        .expect("valid");
        let role = crate::core::endpoint_picker::role(&v, None);
        let held = cluster_rules();
        for rule in role.rules.unwrap_or_default() {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        assert!(
                            held.iter().any(|h| &h.api_group == group
                                && &h.resource == resource
                                && h.resource_names.is_empty()
                                && h.verbs.iter().any(|v| v.as_str() == verb)),
                            "the picker's Role grants {verb} {group}/{resource}, which the operator does not hold"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn named_rules_carry_only_verbs_names_can_limit() {
        for section in sections() {
            for rule in section
                .rules
                .iter()
                .filter(|r| !r.resource_names.is_empty())
            {
                let unlimited: Vec<_> = rule.verbs.iter().filter(|v| !v.nameable()).collect();
                assert!(
                    unlimited.is_empty(),
                    "{} {}: resourceNames cannot limit {unlimited:?}",
                    section.key,
                    rule.resource
                );
            }
        }
    }

    #[test]
    fn no_grant_is_listed_twice_in_a_section() {
        for section in sections() {
            let mut seen = BTreeSet::new();
            for rule in &section.rules {
                for verb in &rule.verbs {
                    let grant = (&rule.api_group, &rule.resource, *verb, &rule.resource_names);
                    assert!(seen.insert(grant), "{}: {grant:?} twice", section.key);
                }
            }
        }
    }

    #[test]
    fn the_surge_decision_may_list_and_watch_nodes_and_pods_cluster_wide_and_nothing_more() {
        let capacity = sections()
            .into_iter()
            .find(|s| s.key == "capacityRules")
            .expect("the capacity section");
        let grants: Vec<_> = capacity
            .rules
            .iter()
            .map(|r| (r.api_group.as_str(), r.resource.as_str(), r.verbs.clone()))
            .collect();
        assert_eq!(
            grants,
            [
                ("", "nodes", vec![List, Watch]),
                ("", "pods", vec![List, Watch])
            ],
            "read through a watch: no get, no write"
        );
        assert!(
            !cluster_rules().iter().any(|r| r.resource == "nodes"),
            "nodes are cluster-scoped: a namespaced Role of the workload rules cannot grant them"
        );
    }

    #[test]
    fn every_rule_says_why_and_names_no_wildcard() {
        for section in sections() {
            assert!(!section.why.is_empty(), "{}", section.key);
            for rule in &section.rules {
                assert!(!rule.why.trim().is_empty(), "{}: {rule:?}", section.key);
                assert!(
                    !rule.resource.contains('*') && !rule.api_group.contains('*'),
                    "{}: wildcard in {rule:?}",
                    section.key
                );
            }
        }
    }
}
