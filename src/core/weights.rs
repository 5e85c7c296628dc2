//! The weights cache: the claim a downloaded source is kept in, the Job
//! that fills it, and how the serving pods read it.
//!
//! The cache belongs to one ModelService (see docs/weights.md for why not a
//! shared resource): its claim `<name>-weights` holds one directory per
//! source (`model_source::Source::key`), so a new revision downloads beside
//! the one that serves. The Job is named after the source, so a source is
//! fetched by exactly one Job, and a Job never has to change (a Job's pod
//! template cannot).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvFromSource, EnvVar, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, ResourceRequirements, SeccompProfile, SecretEnvSource, SecurityContext,
    Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::labels::{INSTANCE_LABEL, NAME_LABEL, child_meta};
use super::model_source::{self, Source};
use super::{Prior, ValidSpec};
use crate::api::CacheAccessMode;

/// Where the serving pods see the weights (read-only).
pub const MOUNT_PATH: &str = "/models";
/// Where the fetch Job sees the cache (read-write).
pub const CACHE_PATH: &str = "/cache";
/// The pod volume of the weights, in serving and fetch pods alike.
pub const VOLUME: &str = "model-weights";
/// On the pod template: the source its pods read, so that the next
/// reconcile knows what serves while a new source downloads.
pub const SERVED_ANNOTATION: &str = "modelservice.dev/weights-source";
/// The Job's container.
pub const FETCH_CONTAINER: &str = "fetch";
/// What `fetch` exits with when the claim is too small: the Job fails at
/// once (a retry would fail the same way), see `fetch::outcome`.
pub const EXIT_VOLUME_TOO_SMALL: i32 = 3;
/// What `fetch` exits with when the source refuses it (401, 403, 404).
pub const EXIT_PERMANENT: i32 = 4;
/// Pod restarts the Job allows for transient failures (each resumes).
pub const BACKOFF_LIMIT: i32 = 6;
/// The user the fetch pods run as: the release image's (distroless's
/// `nonroot`), so the Job passes the restricted Pod Security profile.
pub const FETCH_UID: i64 = 65532;
/// The `app.kubernetes.io/name` of fetch pods.
pub const FETCH_APP: &str = "modelservice-fetch";
/// The default image of the Job: this operator's own release.
pub const DEFAULT_FETCH_IMAGE: &str = concat!(
    "ghcr.io/modelservice/modelservice-operator:",
    env!("CARGO_PKG_VERSION")
);

/// The claim a downloaded source is kept in.
pub fn claim_name(name: &str) -> String {
    format!("{name}-weights")
}

/// The Job that fetches the spec's `source`: one per source, size and
/// credentials. A new claim size or Secret is a new Job, so that changing
/// either retries a download that failed for lack of them; a complete
/// source's new Job finds the weights in place and ends at once.
pub fn job_name(v: &ValidSpec, source: &Source) -> String {
    let cache = v.spec.model.cache.as_ref();
    let secret = v
        .spec
        .model
        .source
        .as_ref()
        .and_then(|s| s.credentials_secret.as_deref());
    let what = format!(
        "{}|{}|{}",
        source.key(),
        cache.map_or("", |c| c.size.0.as_str()),
        secret.unwrap_or_default()
    );
    format!(
        "{}-fetch-{}",
        v.name,
        &model_source::stable_hash(&what)[..8]
    )
}

/// What `<name>-fetch-<8 hex>` adds to the name: a Job's name is also a
/// label value of its pods, at most 63 characters.
pub const JOB_SUFFIX_LEN: usize = "-fetch-".len() + 8;

/// What the serving pods read: a claim, and the model's directory in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The source URI, as the pod template's annotation keeps it.
    pub uri: String,
    /// The claim mounted at [`MOUNT_PATH`].
    pub claim: String,
    /// The model's directory as the server sees it.
    pub path: String,
}

/// What pods of `name` read for the source `uri`; `None` if it does not parse.
pub fn served(name: &str, uri: &str) -> Option<Served> {
    let source = model_source::parse(uri).ok()?;
    Some(match &source {
        Source::Claim { claim, path } => Served {
            uri: uri.to_string(),
            claim: claim.clone(),
            path: if path.is_empty() {
                MOUNT_PATH.to_string()
            } else {
                format!("{MOUNT_PATH}/{path}")
            },
        },
        _ => Served {
            uri: uri.to_string(),
            claim: claim_name(name),
            path: format!("{MOUNT_PATH}/{}", source.key()),
        },
    })
}

/// The spec's source when it is downloaded (not a pvc:// path).
pub fn downloaded(v: &ValidSpec) -> Option<Source> {
    let uri = &v.spec.model.source.as_ref()?.uri;
    model_source::parse(uri).ok().filter(Source::downloads)
}

/// What the serving pods should read now: `Some(served)` says to build the
/// workload with `served` (the spec's source once it is in the cache, or
/// what already serves while it downloads: pods never roll onto missing
/// weights), `None` that no workload may exist yet.
pub fn serving_now(v: &ValidSpec, prior: &Prior) -> Option<Option<Served>> {
    let Some(source) = v.spec.model.source.as_ref() else {
        return Some(v.served.clone());
    };
    if downloaded(v).is_none() || prior.weights.complete {
        return Some(v.served.clone());
    }
    match &prior.weights.serving {
        Some(uri) if *uri == source.uri => Some(v.served.clone()),
        Some(uri) => Some(served(&v.name, uri)),
        // Pods that read no cache (the server fetched model.name itself)
        // keep serving the way they did.
        None if prior.stable_template.is_some() => Some(None),
        None => None,
    }
}

/// What a claim keeps from its creation: its class and access modes cannot
/// change, and its size cannot shrink. The desired claim takes them from
/// the `current` spec, so that an edit of them is not an apply the API
/// server refuses on every reconcile (docs/weights.md says how to change
/// them).
pub fn keep_immutable(desired: &mut PersistentVolumeClaim, current: Option<&serde_json::Value>) {
    let (Some(spec), Some(current)) = (desired.spec.as_mut(), current) else {
        return;
    };
    if let Some(class) = current.get("storageClassName").and_then(|c| c.as_str()) {
        spec.storage_class_name = Some(class.to_string());
    }
    if let Some(modes) = current.get("accessModes").and_then(|m| m.as_array()) {
        spec.access_modes = Some(
            modes
                .iter()
                .filter_map(|m| m.as_str().map(str::to_string))
                .collect(),
        );
    }
    let size = |v: Option<&Quantity>| v.and_then(|q| super::quantity::bytes(&q.0));
    let current_size = current
        .pointer("/resources/requests/storage")
        .and_then(|q| q.as_str())
        .map(|q| Quantity(q.to_string()));
    if let Some(requests) = spec.resources.as_mut().and_then(|r| r.requests.as_mut())
        && size(current_size.as_ref()) > size(requests.get("storage"))
        && let Some(q) = current_size
    {
        requests.insert("storage".to_string(), q);
    }
}

/// The read-only volume and mount of the serving pods.
pub fn mount(served: &Served) -> (Volume, VolumeMount) {
    (
        Volume {
            name: VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: served.claim.clone(),
                read_only: Some(true),
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: VOLUME.into(),
            mount_path: MOUNT_PATH.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// The claim of a downloaded source, with the spec's size, class and mode.
pub fn claim(v: &ValidSpec, owner: Option<&OwnerReference>) -> Option<PersistentVolumeClaim> {
    downloaded(v)?;
    let cache = v.spec.model.cache.as_ref()?;
    let mut metadata = child_meta(v, owner);
    metadata.name = Some(claim_name(&v.name));
    let mode = match cache.access_mode.unwrap_or_default() {
        CacheAccessMode::ReadWriteOnce => "ReadWriteOnce",
        CacheAccessMode::ReadWriteMany => "ReadWriteMany",
    };
    Some(PersistentVolumeClaim {
        metadata,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![mode.into()]),
            storage_class_name: cache.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    cache.size.clone(),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    })
}

/// The Job that fetches the spec's source into the claim. `keep` is the
/// source the pods read now: its directory survives the new download's
/// clean-up of older ones.
///
/// It runs where the serving pods run (their node selector and
/// tolerations): a ReadWriteOnce claim, or a node-local volume, is then on
/// the node that will read it. It gets no ServiceAccount token (it talks to
/// the source, never to the API server) and the credentials Secret as its
/// environment only. A claim that is too small, or a source that refuses
/// the request, fails the Job at once; anything else is retried by the Job
/// controller, and every retry resumes.
pub fn job(
    v: &ValidSpec,
    owner: Option<&OwnerReference>,
    keep: Option<&Served>,
    image: &str,
) -> Option<Job> {
    let source = downloaded(v)?;
    let spec_source = v.spec.model.source.as_ref()?;
    let capacity = v
        .spec
        .model
        .cache
        .as_ref()
        .and_then(|c| super::quantity::bytes(&c.size.0))?;
    let mut metadata = child_meta(v, owner);
    metadata.name = Some(job_name(v, &source));
    let mut args = vec![
        "fetch".to_string(),
        "--source".into(),
        spec_source.uri.clone(),
        "--dest".into(),
        CACHE_PATH.into(),
        "--key".into(),
        source.key(),
        "--capacity".into(),
        capacity.to_string(),
    ];
    if let Some(keep) = keep.and_then(|s| model_source::parse(&s.uri).ok()) {
        args.extend(["--keep".into(), keep.key()]);
    }
    // Not the serving pods' labels: the Service and the Deployment's
    // selector must never pick up a fetch pod, and the operator's pod
    // cache (managed-by) keeps serving pods only.
    let labels = BTreeMap::from([
        (NAME_LABEL.to_string(), FETCH_APP.to_string()),
        (INSTANCE_LABEL.to_string(), v.name.clone()),
    ]);
    let spec = &v.spec;
    Some(Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some(FETCH_CONTAINER.into()),
                        operator: "In".into(),
                        values: vec![EXIT_VOLUME_TOO_SMALL, EXIT_PERMANENT],
                    }),
                    on_pod_conditions: None,
                }],
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    automount_service_account_token: Some(false),
                    // The release image's user (distroless nonroot); the
                    // claim is made writable for it through fsGroup, and
                    // the files it writes are readable by any server.
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(FETCH_UID),
                        run_as_group: Some(FETCH_UID),
                        fs_group: Some(FETCH_UID),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..PodSecurityContext::default()
                    }),
                    node_selector: (!spec.scheduling.node_selector.is_empty())
                        .then(|| spec.scheduling.node_selector.clone()),
                    tolerations: (!spec.scheduling.tolerations.is_empty())
                        .then(|| spec.scheduling.tolerations.clone()),
                    containers: vec![Container {
                        name: FETCH_CONTAINER.into(),
                        image: Some(image.to_string()),
                        image_pull_policy: Some("IfNotPresent".into()),
                        args: Some(args),
                        env: Some(vec![EnvVar {
                            name: "RUST_LOG".into(),
                            value: Some("info".into()),
                            value_from: None,
                        }]),
                        env_from: spec_source.credentials_secret.as_ref().map(|s| {
                            vec![EnvFromSource {
                                secret_ref: Some(SecretEnvSource {
                                    name: s.clone(),
                                    optional: Some(false),
                                }),
                                ..EnvFromSource::default()
                            }]
                        }),
                        volume_mounts: Some(vec![VolumeMount {
                            name: VOLUME.into(),
                            mount_path: CACHE_PATH.into(),
                            ..VolumeMount::default()
                        }]),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".to_string(), Quantity("250m".into())),
                                ("memory".to_string(), Quantity("128Mi".into())),
                            ])),
                            limits: Some(BTreeMap::from([(
                                "memory".to_string(),
                                Quantity("512Mi".into()),
                            )])),
                            ..ResourceRequirements::default()
                        }),
                        security_context: Some(SecurityContext {
                            allow_privilege_escalation: Some(false),
                            read_only_root_filesystem: Some(true),
                            capabilities: Some(Capabilities {
                                drop: Some(vec!["ALL".into()]),
                                add: None,
                            }),
                            ..SecurityContext::default()
                        }),
                        termination_message_policy: Some("FallbackToLogsOnError".into()),
                        ..Container::default()
                    }],
                    volumes: Some(vec![Volume {
                        name: VOLUME.into(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: claim_name(&v.name),
                            read_only: None,
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::children::tests::sample;
    use crate::core::children::{WeightsPrior, plan};
    use crate::core::validate;
    use serde_json::{Value, json};

    const REV1: &str = "hf://meta-llama/Llama-3.1-8B-Instruct@0e9e39f";
    const REV2: &str = "hf://meta-llama/Llama-3.1-8B-Instruct@5206a32";

    fn cached(uri: &str) -> ValidSpec {
        let mut ms = sample();
        ms.spec.model.source = Some(Box::new(crate::api::ModelSource {
            uri: uri.into(),
            credentials_secret: Some("hf-token".into()),
        }));
        ms.spec.model.cache = Some(Box::new(crate::api::ModelCache {
            size: Quantity("200Gi".into()),
            storage_class_name: Some("fast".into()),
            access_mode: Some(CacheAccessMode::ReadWriteMany),
        }));
        validate(&ms, "default").expect("valid")
    }

    fn mounted(uri: &str) -> ValidSpec {
        let mut ms = sample();
        ms.spec.model.source = Some(Box::new(crate::api::ModelSource {
            uri: uri.into(),
            credentials_secret: None,
        }));
        validate(&ms, "default").expect("valid")
    }

    fn prior(complete: bool, serving: Option<&str>, exists: bool) -> Prior {
        Prior {
            weights: WeightsPrior {
                complete,
                serving: serving.map(str::to_string),
            },
            stable_template: exists.then(|| json!({})),
            ..Prior::offline()
        }
    }

    fn server(p: &crate::core::Plan) -> Value {
        let d = p.children.deployment.as_ref().expect("a Deployment");
        serde_json::to_value(&d.spec.template).unwrap_or_default()
    }

    #[test]
    fn the_claim_has_the_size_class_and_mode_of_the_spec() {
        let c = claim(&cached(REV1), None).expect("a claim");
        let j = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(j["metadata"]["name"], "llama-weights");
        assert_eq!(j["spec"]["resources"]["requests"]["storage"], "200Gi");
        assert_eq!(j["spec"]["storageClassName"], "fast");
        assert_eq!(j["spec"]["accessModes"], json!(["ReadWriteMany"]));
        // A claim path is mounted, never made.
        assert!(claim(&mounted("pvc://models/llama"), None).is_none());
        assert!(job(&mounted("pvc://models/llama"), None, None, "img").is_none());
    }

    #[test]
    fn the_job_fetches_with_the_operators_image_no_token_and_the_secret_as_env() {
        let v = cached(REV1);
        let old = served("llama", REV2);
        let j = serde_json::to_value(job(&v, None, old.as_ref(), "op:1").expect("a Job"))
            .unwrap_or_default();
        assert!(
            j["metadata"]["name"].as_str().is_some_and(
                |n| n.starts_with("llama-fetch-") && n.len() == "llama-fetch-".len() + 8
            )
        );
        let pod = &j["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "op:1");
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let key = model_source::parse(REV1).unwrap().key();
        let old_key = model_source::parse(REV2).unwrap().key();
        assert_eq!(
            args,
            [
                "fetch",
                "--source",
                REV1,
                "--dest",
                "/cache",
                "--key",
                &key,
                "--capacity",
                "214748364800",
                "--keep",
                &old_key
            ]
        );
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], "hf-token");
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "llama-weights"
        );
        // Where the serving pods run, and never among them.
        assert_eq!(pod["nodeSelector"]["gpu"], "a100");
        assert_eq!(
            j["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
            FETCH_APP
        );
        let rule = &j["spec"]["podFailurePolicy"]["rules"][0];
        assert_eq!(
            (rule["action"].as_str(), &rule["onExitCodes"]["values"]),
            (Some("FailJob"), &json!([3, 4]))
        );
    }

    #[test]
    fn a_new_size_or_secret_is_a_new_job_and_the_same_spec_the_same_one() {
        let name = |v: &ValidSpec| job_name(v, &downloaded(v).unwrap());
        let v = cached(REV1);
        assert_eq!(name(&v), name(&cached(REV1)));
        let mut bigger = v.clone();
        bigger.spec.model.cache.as_mut().unwrap().size = Quantity("300Gi".into());
        let mut other_secret = v.clone();
        other_secret
            .spec
            .model
            .source
            .as_mut()
            .unwrap()
            .credentials_secret = None;
        for w in [&bigger, &other_secret, &cached(REV2)] {
            assert_ne!(name(&v), name(w));
        }
    }

    #[test]
    fn no_pod_starts_before_the_weights_are_in() {
        let v = cached(REV1);
        let p = plan(&v, None, &prior(false, None, false));
        let c = &p.children;
        assert!(c.deployment.is_none() && c.groups.is_none() && c.hpa.is_none());
        assert!(c.weights_claim.is_some() && c.fetch.is_some());
        let p = plan(&v, None, &prior(true, None, false));
        let t = server(&p);
        assert_eq!(t["metadata"]["annotations"][SERVED_ANNOTATION], REV1);
        let args = &t["spec"]["containers"][0]["args"];
        assert_eq!(
            args[1]
                .as_str()
                .map(|a| a.starts_with("/models/Llama-3.1-8B-Instruct-0e9e39f-")),
            Some(true),
            "{args}"
        );
        assert_eq!(
            t["spec"]["volumes"][0]["persistentVolumeClaim"],
            json!({"claimName": "llama-weights", "readOnly": true})
        );
        assert_eq!(
            t["spec"]["containers"][0]["volumeMounts"][0],
            json!({"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": true})
        );
        assert!(p.children.hpa.is_some());
    }

    #[test]
    fn the_old_weights_serve_until_the_new_ones_are_in() {
        let v = cached(REV2);
        // rev1 serves, rev2 downloads: the pods keep rev1.
        let p = plan(&v, None, &prior(false, Some(REV1), true));
        assert_eq!(
            server(&p)["metadata"]["annotations"][SERVED_ANNOTATION],
            REV1
        );
        assert!(
            p.children
                .fetch
                .as_ref()
                .is_some_and(|j| serde_json::to_string(j).unwrap_or_default().contains(REV2))
        );
        // In: the pods roll to rev2.
        let p = plan(&v, None, &prior(true, Some(REV1), true));
        assert_eq!(
            server(&p)["metadata"]["annotations"][SERVED_ANNOTATION],
            REV2
        );
        // Pods that fetched the model themselves keep doing so meanwhile.
        let p = plan(&v, None, &prior(false, None, true));
        let t = server(&p);
        assert!(
            t["metadata"]["annotations"]
                .get(SERVED_ANNOTATION)
                .is_none()
        );
        assert_eq!(
            t["spec"]["containers"][0]["args"][1],
            "meta-llama/Llama-3.1-8B-Instruct"
        );
        // A Job that is gone again (deleted) does not take rev2 away from pods reading it.
        let p = plan(&v, None, &prior(false, Some(REV2), true));
        assert_eq!(
            server(&p)["metadata"]["annotations"][SERVED_ANNOTATION],
            REV2
        );
    }

    #[test]
    fn a_claim_keeps_what_cannot_change_and_never_shrinks() {
        let mut c = claim(&cached(REV1), None).expect("a claim");
        let current = json!({"storageClassName": "slow", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "500Gi"}}});
        keep_immutable(&mut c, Some(&current));
        let j = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(j["spec"]["storageClassName"], "slow");
        assert_eq!(j["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(j["spec"]["resources"]["requests"]["storage"], "500Gi");
        let mut c = claim(&cached(REV1), None).expect("a claim");
        keep_immutable(
            &mut c,
            Some(&json!({"resources": {"requests": {"storage": "100Gi"}}})),
        );
        let j = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(
            j["spec"]["resources"]["requests"]["storage"], "200Gi",
            "grows"
        );
    }

    #[test]
    fn a_claim_source_mounts_its_path_and_downloads_nothing() {
        let v = mounted("pvc://models/llama/8b");
        let p = plan(&v, None, &prior(false, None, false));
        let t = server(&p);
        assert_eq!(
            t["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "models"
        );
        assert_eq!(t["spec"]["containers"][0]["args"][1], "/models/llama/8b");
        assert!(p.children.fetch.is_none() && p.children.weights_claim.is_none());
    }
}
