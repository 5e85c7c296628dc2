//! Surge or replace (`rollout.surge: Auto`): does one more replica fit now?
//!
//! A surge pod that fits nowhere stays Pending, and with maxUnavailable 0 the
//! rollout then waits for it until its progress deadline while the old pods
//! keep serving. Replacing always makes progress, but with one replica it
//! means downtime. So the choice is made from what the scheduler would see
//! when the rollout starts: a node that takes the pod (schedulable, Ready,
//! matching nodeSelector, every NoSchedule/NoExecute taint tolerated) with
//! `gpuResource` allocatable minus what its pods request ≥ gpus.
//!
//! The choice is made once per pod template and kept on the Deployment (an
//! annotation, in its metadata, so writing it never restarts a pod). Later
//! reconciles reuse it: reading the cluster again would see the surge pod
//! itself holding the free GPU, and flip the rollout to replace halfway.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

use super::ValidSpec;
use super::fingerprint::fingerprint;
use super::quantity::milli_units;

/// Where the decision is kept: on the Deployment's metadata.
pub const ANNOTATION: &str = "serving.modelservice.dev/rollout-decision";

/// What one more replica needs from a node, and how many replicas roll.
#[derive(Clone, Copy, Debug)]
pub struct Demand<'a> {
    pub gpus: i32,
    pub resource: &'a str,
    pub node_selector: &'a BTreeMap<String, String>,
    pub tolerations: &'a [Toleration],
    /// The replicas the rollout replaces (the HPA's count while it owns it).
    pub replicas: i32,
    /// Pods per replica: with groups (`parallelism.pipeline`), one more
    /// replica is that many pods, each with `gpus`.
    pub group: i32,
}

impl<'a> Demand<'a> {
    pub fn of(v: &'a ValidSpec) -> Self {
        Self {
            gpus: v.spec.resources.gpus,
            resource: &v.spec.resources.gpu_resource,
            node_selector: &v.spec.scheduling.node_selector,
            tolerations: &v.spec.scheduling.tolerations,
            replicas: v.spec.replicas,
            group: v.spec.pipeline().max(1),
        }
    }

    /// The most pods a rollout surges at once: a quarter of the replicas,
    /// rounded up, as a Deployment's default maxSurge. More would roll out
    /// faster, but the free GPUs a read shows are shared by every rollout
    /// that starts from it, and a one-replica model that finds none left
    /// must replace, with downtime.
    pub fn surge_cap(&self) -> i32 {
        (self.replicas.max(1) + 3) / 4
    }
}

/// The decision for one pod template, as the annotation holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// [`template_hash`] of the pod template it was made for.
    pub template: String,
    pub surge: bool,
    /// Pods surged at a time while surging: as many replicas as the free
    /// GPUs hold, up to [`Demand::surge_cap`]. A decision written before
    /// this field existed surged one.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub max_surge: i32,
    /// Why, for the Progressing condition: "surging: node N has K free ...".
    pub message: String,
}

fn one() -> i32 {
    1
}

fn is_one(n: &i32) -> bool {
    *n == 1
}

impl Decision {
    /// Replace: one old pod goes first and frees its GPUs.
    pub fn replace(template: &str, message: String) -> Self {
        Self {
            template: template.into(),
            surge: false,
            max_surge: 1,
            message,
        }
    }

    /// Surge `max_surge` pods at a time; none unavailable.
    pub fn surge(template: &str, max_surge: i32, message: String) -> Self {
        Self {
            template: template.into(),
            surge: true,
            max_surge: max_surge.max(1),
            message,
        }
    }

    /// maxSurge as the Deployment gets it: 0 when replacing.
    pub fn pods_surged(&self) -> i32 {
        if self.surge { self.max_surge.max(1) } else { 0 }
    }

    /// The annotation's value.
    pub fn encode(&self) -> String {
        // A struct of strings and a bool always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The annotation's value read back; anything else (a hand edit, a
    /// future format) is no decision, and a new one is made when needed.
    pub fn decode(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// The identity of a pod template: the same fingerprint as the children's,
/// over `spec.template` only, so that a change of replicas or strategy is
/// not a new rollout.
pub fn template_hash(d: &Deployment) -> String {
    fingerprint(&serde_json::to_value(&d.spec.template).unwrap_or_default())
}

/// What the Deployment in the cluster says, as far as the decision goes.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The Deployment exists (in the cache).
    pub exists: bool,
    /// Its decision annotation, if it holds a readable one.
    pub decision: Option<Decision>,
}

/// What a reconcile does about the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Already decided for this template: stamp it again, read nothing.
    Keep(Decision),
    /// A rollout starts: read nodes and pods, then decide.
    Decide,
    /// No rollout starts (a new Deployment, or an unchanged template): the
    /// Deployment stays exactly as the builder made it, as before surge
    /// existed, so an upgrade of the operator rewrites no Deployment.
    Nothing,
}

/// Chooses between the three for the desired template `template`.
/// `recent` is our own decision that the cache may not show yet;
/// `template_changes` compares the desired template with the cached one and
/// is only called when nothing cheaper settles it.
pub fn plan(
    template: &str,
    recent: Option<&Decision>,
    seen: Seen,
    template_changes: impl FnOnce() -> bool,
) -> Plan {
    if let Some(d) = recent
        .into_iter()
        .chain(seen.decision.as_ref())
        .find(|d| d.template == template)
    {
        return Plan::Keep(d.clone());
    }
    if !seen.exists {
        return Plan::Nothing;
    }
    // A decision for another template means the template we apply changed
    // (removals included, which a subset comparison cannot see).
    if seen.decision.is_some() || template_changes() {
        Plan::Decide
    } else {
        Plan::Nothing
    }
}

/// The rolling update a decision implies: surge `max_surge` pods and keep
/// every old one until its replacement is ready (no downtime, even at one
/// replica), or, at 0, take one old pod down first to free its GPUs.
pub fn strategy(max_surge: i32) -> DeploymentStrategy {
    let (max_surge, max_unavailable) = if max_surge > 0 {
        (max_surge, 0)
    } else {
        (0, 1)
    };
    DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(max_surge)),
            max_unavailable: Some(IntOrString::Int(max_unavailable)),
        }),
    }
}

/// Puts `decision` on the desired Deployment: its strategy and the annotation.
pub fn stamp(d: &mut Deployment, decision: &Decision) {
    d.spec.strategy = Some(strategy(decision.pods_surged()));
    d.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION.into(), decision.encode());
}

/// Decides from the cluster as listed: `nodes`, and `used`, what the
/// non-terminated pods request of the resource per node (see [`add_usage`]).
pub fn decide(
    template: &str,
    demand: &Demand<'_>,
    nodes: &[Node],
    used: &BTreeMap<String, i128>,
) -> Decision {
    choose(template, demand, nodes, used).0
}

/// [`decide`], then a surge's GPUs are taken from `used` on the node the
/// surge pod would go to: decisions that share one read of the cluster (a
/// GitOps change that rolls out many models at once) do not all count on
/// the same free GPU.
pub fn decide_and_reserve(
    template: &str,
    demand: &Demand<'_>,
    nodes: &[Node],
    used: &mut BTreeMap<String, i128>,
) -> Decision {
    let (decision, placed) = choose(template, demand, nodes, used);
    let need = i128::from(demand.gpus.max(0)) * 1000;
    for node in placed {
        *used.entry(node).or_insert(0) += need;
    }
    decision
}

/// The decision, and the node of each surge pod.
fn choose(
    template: &str,
    demand: &Demand<'_>,
    nodes: &[Node],
    used: &BTreeMap<String, i128>,
) -> (Decision, Vec<String>) {
    let resource = demand.resource;
    if demand.gpus <= 0 {
        let decision = Decision::surge(
            template,
            demand.surge_cap(),
            format!("surging: the pods request no {resource}, so a surge pod needs none free"),
        );
        return (decision, Vec::new());
    }
    let need = i128::from(demand.gpus) * 1000;
    let mut candidates: Vec<(&str, i128)> = nodes
        .iter()
        .filter(|n| takes_pods(n, demand))
        .filter_map(|n| {
            let name = n.metadata.name.as_deref()?;
            let free = allocatable(n, resource) - used.get(name).copied().unwrap_or(0);
            Some((name, free))
        })
        .collect();
    // Most free first, then by name: the same cluster gives the same message.
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if demand.group > 1 {
        return choose_groups(template, demand, nodes, &candidates, need);
    }
    let placed = place(&candidates, need, demand.surge_cap());
    match candidates.first() {
        Some((name, free)) if *free >= need => {
            let message = if placed.len() == 1 {
                format!(
                    "surging: node {name} has {} free {resource}",
                    free.div_euclid(1000)
                )
            } else {
                let on: Vec<String> = candidates
                    .iter()
                    .filter(|(n, _)| placed.iter().any(|p| p == n))
                    .map(|(n, f)| format!("{n} ({})", f.div_euclid(1000)))
                    .collect();
                format!(
                    "surging {} pods at a time, a quarter of {} replicas at most: nodes {} have free {resource}",
                    placed.len(),
                    demand.replicas,
                    on.join(", ")
                )
            };
            let decision = Decision::surge(template, placed.len() as i32, message);
            (decision, placed)
        }
        best => {
            let detail = match best {
                None => format!(
                    "none of the {} nodes is Ready, schedulable, matching and tolerated",
                    nodes.len()
                ),
                Some((_, free)) => format!(
                    "{} of {} nodes match, at most {} free on one",
                    candidates.len(),
                    nodes.len(),
                    (*free).max(0).div_euclid(1000)
                ),
            };
            let decision = Decision::replace(
                template,
                format!(
                    "replacing: no schedulable node that matches the pods' nodeSelector and tolerations has {} free {resource} ({detail})",
                    demand.gpus
                ),
            );
            (decision, Vec::new())
        }
    }
}

/// [`choose`] for groups: one more replica is `demand.group` pods, and
/// surges only if the whole group fits (the scheduler places each member
/// where it fits, so a node with room for two takes two). A group that
/// fits only in part would hold GPUs and serve nothing.
fn choose_groups(
    template: &str,
    demand: &Demand<'_>,
    nodes: &[Node],
    candidates: &[(&str, i128)],
    need: i128,
) -> (Decision, Vec<String>) {
    let resource = demand.resource;
    let size = demand.group;
    let slots = place(candidates, need, demand.surge_cap().saturating_mul(size));
    let groups = i32::try_from(slots.len()).unwrap_or(0) / size;
    if groups == 0 {
        let decision = Decision::replace(
            template,
            format!(
                "replacing: a group is {size} pods of {} {resource}, and the schedulable nodes that match have room for {} of them ({} nodes)",
                demand.gpus,
                slots.len(),
                nodes.len()
            ),
        );
        return (decision, Vec::new());
    }
    let placed: Vec<String> = slots
        .into_iter()
        .take(usize::try_from(groups * size).unwrap_or(0))
        .collect();
    let mut on: Vec<String> = Vec::new();
    for n in &placed {
        if !on.contains(n) {
            on.push(n.clone());
        }
    }
    let decision = Decision::surge(
        template,
        groups,
        format!(
            "surging {groups} group{} of {size} pods at a time: nodes {} have {} {resource} free for each",
            if groups == 1 { "" } else { "s" },
            on.join(", "),
            demand.gpus
        ),
    );
    (decision, placed)
}

/// Where up to `cap` surge pods of `need` each go, filling the node with
/// the most free first, as the candidates are sorted: one node per pod.
fn place(candidates: &[(&str, i128)], need: i128, cap: i32) -> Vec<String> {
    let mut placed = Vec::new();
    for (name, free) in candidates {
        let mut left = *free;
        while left >= need && (placed.len() as i32) < cap {
            placed.push(name.to_string());
            left -= need;
        }
    }
    placed
}

/// The decision when the cluster could not be read (`why`): replacing
/// always makes progress, so that is the safe side.
pub fn unreadable(template: &str, demand: &Demand<'_>, why: &str) -> Decision {
    Decision::replace(
        template,
        format!(
            "replacing: the free {} could not be read ({why}); surging needs list and watch on nodes and pods at the cluster scope",
            demand.resource
        ),
    )
}

/// Adds what `pods` request of `resource` to `used`, per node. Pods not
/// bound to a node, and pods that ended (Succeeded, Failed), hold nothing.
pub fn add_usage<'a>(
    used: &mut BTreeMap<String, i128>,
    pods: impl IntoIterator<Item = &'a Pod>,
    resource: &str,
) {
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let request = pod_request(pod, resource);
        if request != 0 {
            *used.entry(node.to_string()).or_insert(0) += request;
        }
    }
}

/// What a pod requests of `resource`, in milli-units, the way the scheduler
/// counts it: the app containers and the sidecars (restartable init
/// containers) run together; each other init container runs alone beside
/// the sidecars started before it; the pod needs the larger of the two, plus
/// its overhead. A container that sets only a limit requests its limit (the
/// API server defaults it so; extended resources usually come that way).
pub fn pod_request(pod: &Pod, resource: &str) -> i128 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let of = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| -> i128 {
        let get = |m: Option<&BTreeMap<String, Quantity>>| {
            m.and_then(|m| m.get(resource))
                .and_then(|q| milli_units(&q.0))
        };
        r.and_then(|r| get(r.requests.as_ref()).or_else(|| get(r.limits.as_ref())))
            .unwrap_or(0)
    };
    let containers: i128 = spec
        .containers
        .iter()
        .map(|c| of(c.resources.as_ref()))
        .sum();
    let mut sidecars = 0;
    let mut init = 0;
    for c in spec.init_containers.iter().flatten() {
        let r = of(c.resources.as_ref());
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += r;
            init = init.max(sidecars);
        } else {
            init = init.max(sidecars + r);
        }
    }
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get(resource))
        .and_then(|q| milli_units(&q.0))
        .unwrap_or(0);
    (containers + sidecars).max(init) + overhead
}

/// `node` with only what a decision reads: its name and labels, whether it
/// is cordoned, its taints, its allocatable resources and its Ready
/// condition. A read of the cluster is kept a few seconds for the decisions
/// that follow it; a node's status otherwise carries its image list, which
/// on a GPU node (large serving images) is most of its size.
pub fn slim(node: Node) -> Node {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let spec = node.spec.map(|s| NodeSpec {
        unschedulable: s.unschedulable,
        taints: s.taints,
        ..NodeSpec::default()
    });
    let status = node.status.map(|s| NodeStatus {
        allocatable: s.allocatable,
        conditions: s
            .conditions
            .map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect()),
        ..NodeStatus::default()
    });
    Node {
        metadata: ObjectMeta {
            name: node.metadata.name,
            labels: node.metadata.labels,
            ..ObjectMeta::default()
        },
        spec,
        status,
    }
}

/// Whether the scheduler would put one of the pods on `node` at all,
/// whatever its free GPUs.
fn takes_pods(node: &Node, demand: &Demand<'_>) -> bool {
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable) == Some(true) {
        return false;
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return false;
    }
    let labels = node.metadata.labels.as_ref();
    let selected = demand
        .node_selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !selected {
        return false;
    }
    spec.and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .all(|t| demand.tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Kubernetes' `Toleration.ToleratesTaint`: an empty effect matches every
/// effect; an empty key matches every key (with `Exists`, the only
/// operator validation allows it with); `Exists` ignores the value, and
/// `Equal` (the default) compares it.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "Exists" => true,
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// `resource` allocatable on `node`, in milli-units; none is 0.
fn allocatable(node: &Node, resource: &str) -> i128 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .and_then(|q| milli_units(&q.0))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU: &str = "nvidia.com/gpu";

    fn node(name: &str, gpus: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"gpu": "a100", "kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": "32", GPU: gpus},
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]}
        }))
        .expect("node")
    }

    fn pod(name: &str, node: &str, gpus: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"limits": {GPU: gpus}}}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod")
    }

    fn used(pods: &[Pod]) -> BTreeMap<String, i128> {
        let mut u = BTreeMap::new();
        add_usage(&mut u, pods, GPU);
        u
    }

    struct Spec {
        gpus: i32,
        replicas: i32,
        group: i32,
        selector: BTreeMap<String, String>,
        tolerations: Vec<Toleration>,
    }

    impl Spec {
        fn new(gpus: i32) -> Self {
            Self {
                gpus,
                replicas: 1,
                group: 1,
                selector: BTreeMap::new(),
                tolerations: Vec::new(),
            }
        }
        fn demand(&self) -> Demand<'_> {
            Demand {
                gpus: self.gpus,
                resource: GPU,
                node_selector: &self.selector,
                tolerations: &self.tolerations,
                replicas: self.replicas,
                group: self.group,
            }
        }
        fn decide(&self, nodes: &[Node], pods: &[Pod]) -> Decision {
            self.decide_with(nodes, &used(pods))
        }
        fn decide_with(&self, nodes: &[Node], used: &BTreeMap<String, i128>) -> Decision {
            decide("t1", &self.demand(), nodes, used)
        }
    }

    fn toleration(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).expect("toleration")
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tainted(name: &str, t: Taint) -> Node {
        let mut n = node(name, "2");
        n.spec.get_or_insert_with(Default::default).taints = Some(vec![t]);
        n
    }

    #[test]
    fn surges_onto_the_node_with_the_most_free_gpus() {
        let nodes = [node("gpu-1", "2"), node("gpu-2", "4"), node("gpu-3", "4")];
        let pods = [pod("a", "gpu-2", "1"), pod("b", "gpu-1", "1")];
        let d = Spec::new(1).decide(&nodes, &pods);
        assert!(d.surge);
        assert_eq!(d.message, "surging: node gpu-3 has 4 free nvidia.com/gpu");
        assert_eq!(d.template, "t1");
    }

    #[test]
    fn replaces_when_the_gpus_are_full() {
        let nodes = [node("gpu-1", "2"), node("gpu-2", "2")];
        let pods = [
            pod("a", "gpu-1", "2"),
            pod("b", "gpu-2", "1"),
            pod("c", "gpu-2", "1"),
        ];
        let d = Spec::new(1).decide(&nodes, &pods);
        assert!(!d.surge);
        assert_eq!(
            d.message,
            "replacing: no schedulable node that matches the pods' nodeSelector and tolerations has 1 free nvidia.com/gpu (2 of 2 nodes match, at most 0 free on one)"
        );
        // Two GPUs free, but on two nodes: a 2-GPU pod fits on neither.
        let pods = [pod("a", "gpu-1", "1"), pod("b", "gpu-2", "1")];
        assert!(!Spec::new(2).decide(&nodes, &pods).surge);
        assert!(Spec::new(1).decide(&nodes, &pods).surge);
    }

    #[test]
    fn a_taint_the_pods_do_not_tolerate_keeps_them_off() {
        let nodes = [tainted(
            "gpu-1",
            taint("dedicated", Some("infer"), "NoSchedule"),
        )];
        let mut s = Spec::new(1);
        let d = s.decide(&nodes, &[]);
        assert!(!d.surge);
        assert!(d.message.contains("none of the 1 nodes"), "{}", d.message);
        s.tolerations = vec![toleration(
            json!({"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}),
        )];
        assert!(s.decide(&nodes, &[]).surge);
        // PreferNoSchedule only scores: the node still takes pods.
        let soft = [tainted("gpu-1", taint("x", None, "PreferNoSchedule"))];
        assert!(Spec::new(1).decide(&soft, &[]).surge);
        let evicting = [tainted("gpu-1", taint("x", None, "NoExecute"))];
        assert!(!Spec::new(1).decide(&evicting, &[]).surge);
    }

    #[test]
    fn the_toleration_matcher_follows_kubernetes() {
        let t = taint("nvidia.com/gpu", Some("present"), "NoSchedule");
        let cases = [
            (json!({"key": "nvidia.com/gpu", "operator": "Exists"}), true),
            (
                json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
                true,
            ),
            (
                json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoExecute"}), false),
            (json!({"key": "nvidia.com/gpu", "value": "present"}), true),
            (
                json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}),
                true,
            ),
            (
                json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}),
                false,
            ),
            (json!({"key": "nvidia.com/gpu", "operator": "Equal"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
            (
                json!({"key": "nvidia.com/gpu", "operator": "Lt", "value": "present"}),
                false,
            ),
        ];
        for (tol, want) in cases {
            assert_eq!(tolerates(&toleration(tol.clone()), &t), want, "{tol}");
        }
        let bare = taint("k", None, "NoSchedule");
        assert!(tolerates(
            &toleration(json!({"key": "k", "operator": "Equal"})),
            &bare
        ));
    }

    #[test]
    fn a_node_the_selector_does_not_match_is_not_counted() {
        let mut other = node("cpu-1", "8");
        other.metadata.labels = Some(BTreeMap::from([("gpu".into(), "t4".into())]));
        let nodes = [node("gpu-1", "1"), other];
        let pods = [pod("a", "gpu-1", "1")];
        let mut s = Spec::new(1);
        s.selector = BTreeMap::from([("gpu".into(), "a100".into())]);
        let d = s.decide(&nodes, &pods);
        assert!(!d.surge, "{}", d.message);
        assert!(d.message.contains("1 of 2 nodes match"), "{}", d.message);
        s.selector = BTreeMap::new();
        assert_eq!(
            s.decide(&nodes, &pods).message,
            "surging: node cpu-1 has 8 free nvidia.com/gpu"
        );
    }

    #[test]
    fn unschedulable_and_not_ready_nodes_take_no_pods() {
        let mut cordoned = node("gpu-1", "4");
        cordoned
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        assert!(!Spec::new(1).decide(&[cordoned], &[]).surge);
        let mut not_ready = node("gpu-2", "4");
        if let Some(c) = not_ready
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
        {
            c[1].status = "Unknown".into();
        }
        assert!(!Spec::new(1).decide(&[not_ready], &[]).surge);
        let mut no_conditions = node("gpu-3", "4");
        if let Some(s) = no_conditions.status.as_mut() {
            s.conditions = None;
        }
        assert!(!Spec::new(1).decide(&[no_conditions], &[]).surge);
    }

    #[test]
    fn terminated_and_unbound_pods_hold_no_gpus() {
        let nodes = [node("gpu-1", "1")];
        let mut done = pod("done", "gpu-1", "1");
        done.status.get_or_insert_with(Default::default).phase = Some("Succeeded".into());
        let mut failed = pod("failed", "gpu-1", "1");
        failed.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
        let mut pending = pod("pending", "gpu-1", "1");
        if let Some(s) = pending.spec.as_mut() {
            s.node_name = None;
        }
        assert!(Spec::new(1).decide(&nodes, &[done, failed, pending]).surge);
        assert!(
            !Spec::new(1)
                .decide(&nodes, &[pod("running", "gpu-1", "1")])
                .surge
        );
    }

    #[test]
    fn requests_fall_back_to_limits_and_init_containers_count_like_the_scheduler() {
        let p = |spec: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("pod")
        };
        let c = |name: &str, res: serde_json::Value| json!({"name": name, "resources": res});
        let limit = |n: &str| json!({"limits": {GPU: n}});
        assert_eq!(
            pod_request(&p(json!({"containers": [c("a", limit("2"))]})), GPU),
            2000
        );
        let both = json!({"requests": {GPU: "1"}, "limits": {GPU: "1"}});
        let two = p(json!({"containers": [c("a", both), c("b", limit("1")), c("cpu", json!({}))]}));
        assert_eq!(pod_request(&two, GPU), 2000);
        // A plain init container runs alone: the larger of the two counts.
        let init =
            p(json!({"initContainers": [c("i", limit("4"))], "containers": [c("a", limit("1"))]}));
        assert_eq!(pod_request(&init, GPU), 4000);
        // A sidecar runs beside the app containers: it adds up.
        let mut sidecar = c("s", limit("1"));
        sidecar["restartPolicy"] = json!("Always");
        let with_sidecar =
            p(json!({"initContainers": [sidecar], "containers": [c("a", limit("1"))]}));
        assert_eq!(pod_request(&with_sidecar, GPU), 2000);
        let overhead = p(json!({"containers": [c("a", limit("1"))], "overhead": {GPU: "1"}}));
        assert_eq!(pod_request(&overhead, GPU), 2000);
        assert_eq!(pod_request(&two, "amd.com/gpu"), 0);
    }

    #[test]
    fn decisions_that_share_one_read_do_not_count_on_the_same_gpu() {
        let nodes = [node("gpu-1", "2"), node("gpu-2", "2")];
        let mut used = used(&[pod("a", "gpu-1", "1"), pod("b", "gpu-2", "2")]);
        let s = Spec::new(1);
        let first = decide_and_reserve("t1", &s.demand(), &nodes, &mut used);
        assert_eq!(
            first.message,
            "surging: node gpu-1 has 1 free nvidia.com/gpu"
        );
        let second = decide_and_reserve("t2", &s.demand(), &nodes, &mut used);
        assert!(!second.surge, "{}", second.message);
        assert_eq!(used.get("gpu-1"), Some(&2000));
        // A replace and a CPU model take nothing.
        decide_and_reserve("t3", &Spec::new(0).demand(), &nodes, &mut used);
        assert_eq!(used.get("gpu-1"), Some(&2000));
    }

    #[test]
    fn a_partly_free_cluster_surges_what_fits_and_never_more() {
        // The worked example of docs/rollouts.md: 4 replicas of 1 GPU, one
        // GPU free in the whole cluster.
        let nodes = [node("gpu-1", "2"), node("gpu-2", "2"), node("gpu-3", "1")];
        let pods = [
            pod("a", "gpu-1", "2"),
            pod("b", "gpu-2", "1"),
            pod("c", "gpu-3", "1"),
        ];
        let mut s = Spec::new(1);
        s.replicas = 4;
        let d = s.decide(&nodes, &pods);
        assert_eq!((d.surge, d.pods_surged()), (true, 1), "{}", d.message);
        assert_eq!(d.message, "surging: node gpu-2 has 1 free nvidia.com/gpu");
        // Eight replicas and three free GPUs: two at a time, the cap.
        let nodes = [node("gpu-1", "2"), node("gpu-2", "2")];
        let pods = [pod("a", "gpu-2", "1")];
        s.replicas = 8;
        let d = s.decide(&nodes, &pods);
        assert_eq!(d.pods_surged(), 2, "{}", d.message);
        assert_eq!(
            d.message,
            "surging 2 pods at a time, a quarter of 8 replicas at most: nodes gpu-1 (2) have free nvidia.com/gpu"
        );
        // Twelve replicas (cap 3): three fit, one of them on the second node;
        // what is reserved in a shared read is exactly what they take.
        s.replicas = 12;
        let mut left = used(&pods);
        let d = decide_and_reserve("t1", &s.demand(), &nodes, &mut left);
        assert_eq!(d.pods_surged(), 3, "{}", d.message);
        assert_eq!(
            (left.get("gpu-1"), left.get("gpu-2")),
            (Some(&2000), Some(&2000))
        );
        assert!(!s.decide_with(&nodes, &left).surge, "nothing left to surge");
        // A 2-GPU replica fits only where two are free on one node.
        let mut big = Spec::new(2);
        big.replicas = 8;
        let d = big.decide(&nodes, &[pod("a", "gpu-2", "1")]);
        assert_eq!(d.pods_surged(), 1, "{}", d.message);
    }

    #[test]
    fn a_decision_written_before_max_surge_surges_one() {
        let old = r#"{"template":"t1","surge":true,"message":"surging: node a has 2 free nvidia.com/gpu"}"#;
        let d = Decision::decode(old).expect("an older decision still reads");
        assert_eq!(d.pods_surged(), 1);
        assert_eq!(d.encode(), old, "and writes back the same");
        let mut dep = Deployment::default();
        stamp(&mut dep, &Decision::surge("t1", 3, "m".into()));
        let ru = dep.spec.strategy.and_then(|s| s.rolling_update);
        assert_eq!(
            ru.map(|r| (r.max_surge, r.max_unavailable)),
            Some((Some(IntOrString::Int(3)), Some(IntOrString::Int(0))))
        );
    }

    #[test]
    fn a_slim_node_decides_the_same() {
        let mut big = tainted("gpu-1", taint("k", None, "NoSchedule"));
        if let Some(s) = big.status.as_mut() {
            s.images =
                Some(vec![serde_json::from_value(
                json!({"names": ["vllm/vllm-openai:v0.8.5"], "sizeBytes": 9_000_000_000u64}),
            )
            .expect("image")]);
        }
        let slim = slim(big.clone());
        assert!(slim.status.as_ref().is_some_and(|s| s.images.is_none()));
        let mut s = Spec::new(1);
        for tolerated in [false, true] {
            if tolerated {
                s.tolerations = vec![toleration(json!({"key": "k", "operator": "Exists"}))];
            }
            assert_eq!(
                s.decide(std::slice::from_ref(&big), &[]),
                s.decide(std::slice::from_ref(&slim), &[])
            );
        }
    }

    #[test]
    fn a_cpu_model_surges_and_says_why() {
        let d = Spec::new(0).decide(&[], &[]);
        assert!(d.surge);
        assert!(
            d.message.contains("request no nvidia.com/gpu"),
            "{}",
            d.message
        );
    }

    #[test]
    fn no_nodes_at_all_replaces() {
        let d = Spec::new(1).decide(&[], &[]);
        assert!(!d.surge);
        assert!(d.message.contains("none of the 0 nodes"), "{}", d.message);
    }

    #[test]
    fn a_bad_annotation_is_no_decision() {
        for text in ["", "surge", "{}", r#"{"template": 1}"#, "[1,2]", "null"] {
            assert_eq!(Decision::decode(text), None, "{text:?}");
        }
        let d = Spec::new(1).decide(&[node("gpu-1", "1")], &[]);
        assert_eq!(Decision::decode(&d.encode()), Some(d));
    }

    #[test]
    fn the_plan_reuses_a_decision_for_the_same_template_and_reads_only_when_a_rollout_starts() {
        let d = |t: &str| Decision::surge(t, 1, "m".into());
        let seen = |decision: Option<Decision>| Seen {
            exists: true,
            decision,
        };
        let never = || -> bool { panic!("no comparison needed") };
        assert_eq!(
            plan("t1", None, seen(Some(d("t1"))), never),
            Plan::Keep(d("t1"))
        );
        assert_eq!(
            plan("t2", Some(&d("t2")), seen(Some(d("t1"))), never),
            Plan::Keep(d("t2")),
            "our own decision, before the cache shows it"
        );
        assert_eq!(plan("t2", None, seen(Some(d("t1"))), never), Plan::Decide);
        assert_eq!(
            plan("t1", None, Seen::default(), never),
            Plan::Nothing,
            "a new Deployment"
        );
        assert_eq!(plan("t1", None, seen(None), || false), Plan::Nothing);
        assert_eq!(plan("t1", None, seen(None), || true), Plan::Decide);
    }

    #[test]
    fn stamping_sets_the_strategy_and_the_annotation_but_never_the_pod_template() {
        let mut dep = Deployment::default();
        let before = template_hash(&dep);
        let d = Decision::surge(&before, 1, "surging".into());
        stamp(&mut dep, &d);
        assert_eq!(template_hash(&dep), before);
        let ru = dep
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.clone())
            .expect("rollingUpdate");
        assert_eq!(
            (ru.max_surge, ru.max_unavailable),
            (Some(IntOrString::Int(1)), Some(IntOrString::Int(0)))
        );
        let text = dep
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION));
        assert_eq!(text.and_then(|t| Decision::decode(t)), Some(d));
        assert_eq!(
            strategy(0)
                .rolling_update
                .map(|r| (r.max_surge, r.max_unavailable)),
            Some((Some(IntOrString::Int(0)), Some(IntOrString::Int(1))))
        );
    }

    #[test]
    fn an_unreadable_cluster_replaces_and_says_why() {
        let s = Spec::new(1);
        let d = unreadable("t1", &s.demand(), "listing nodes: 403 Forbidden");
        assert!(!d.surge);
        assert!(d.message.starts_with("replacing: the free nvidia.com/gpu could not be read (listing nodes: 403 Forbidden)"), "{}", d.message);
    }

    #[test]
    fn a_group_surges_only_when_all_of_it_fits() {
        let mut s = Spec::new(2);
        s.group = 3;
        // Three free nodes of 2: one group of three fits, on three nodes.
        let nodes = [node("a", "2"), node("b", "2"), node("c", "2")];
        let d = s.decide(&nodes, &[]);
        assert!(d.surge, "{}", d.message);
        assert_eq!(d.pods_surged(), 1);
        assert!(
            d.message
                .starts_with("surging 1 group of 3 pods at a time: nodes a, b, c have 2"),
            "{}",
            d.message
        );
        // Two nodes of room: no group, though a single pod would fit.
        let d = s.decide(&nodes, &[pod("x", "c", "2")]);
        assert!(!d.surge);
        assert!(
            d.message.contains("a group is 3 pods of 2 nvidia.com/gpu"),
            "{}",
            d.message
        );
        assert!(d.message.contains("room for 2 of them"), "{}", d.message);
        // A node with room for two members takes two.
        let d = s.decide(&[node("a", "4"), node("b", "2")], &[]);
        assert!(d.surge, "{}", d.message);
    }

    #[test]
    fn groups_surge_a_quarter_of_the_replicas_at_most() {
        let mut s = Spec::new(1);
        s.group = 2;
        s.replicas = 8;
        let nodes = [node("a", "8"), node("b", "8")];
        let d = s.decide(&nodes, &[]);
        assert_eq!(d.pods_surged(), 2, "{}", d.message);
    }
}
