//! Checks the schema cannot express, turning a spec into a [`ValidSpec`].
//!
//! The API server already enforces ranges, lengths and the CEL rule; this step
//! catches the rest (names that would make invalid children, malformed
//! quantities, old objects stored before a rule existed). A failure here becomes
//! an `InvalidSpec` condition, never a panic or a hot retry loop.

use std::fmt;

use kube::ResourceExt;

use super::{model_source, preset};
use crate::api::{Engine, ModelService, ModelServiceSpec, RouteBackend};

/// What the endpoint picker's objects add to the ModelService's name.
const EPP_SUFFIX: &str = "-epp";

/// A ModelService whose spec passed every check, with the identity the
/// children need.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidSpec {
    pub name: String,
    pub namespace: String,
    pub spec: ModelServiceSpec,
    /// The Prometheus server a KEDA trigger queries: the spec's, else the
    /// operator's default. Always set when the engine is KEDA.
    pub prometheus_address: Option<String>,
    /// The endpoint picker's image, with `route.backend: InferencePool`:
    /// the operator's, never the spec's.
    pub endpoint_picker_image: String,
    /// What the serving pods read, with `model.source`: the spec's source,
    /// or (see `children::plan`) the one that still serves while the
    /// spec's downloads.
    pub served: Option<super::weights::Served>,
    /// The image of the download Job: the operator's, never the spec's.
    pub fetch_image: String,
}

/// What the operator's configuration adds to every spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorDefaults {
    /// `--prometheus-address`: for KEDA triggers whose spec names no server.
    pub prometheus_address: Option<String>,
    /// `--endpoint-picker-image`: the InferencePools' endpoint picker
    /// (`endpoint_picker::DEFAULT_IMAGE` when unset).
    pub endpoint_picker_image: Option<String>,
    /// `--fetch-image`: the download Job's image, the operator's own
    /// (`weights::DEFAULT_FETCH_IMAGE` when unset).
    pub fetch_image: Option<String>,
}

/// Why a spec cannot be turned into children; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSpec {
    pub problems: Vec<String>,
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.problems.join("; "))
    }
}

impl std::error::Error for InvalidSpec {}

/// The longest name of a ModelService whose replicas are groups: LWS names
/// a group's StatefulSet `<name>-<group>`, and the StatefulSet's revision
/// label `<name>-<group>-<hash>` must fit in 63 characters.
pub const MAX_NAME_WITH_GROUPS: usize = 45;

/// `parallelism`: what the schema cannot check, and what a group needs.
fn check_parallelism(problems: &mut Vec<String>, name: &str, spec: &ModelServiceSpec) {
    let Some(p) = &spec.parallelism else {
        return;
    };
    check_range(problems, "spec.parallelism.pipeline", p.pipeline, 1, 16);
    if let Some(t) = p.tensor
        && t != spec.resources.gpus
    {
        problems.push(format!(
            "spec.parallelism.tensor ({t}) must equal spec.resources.gpus ({}): both are the GPUs of one pod; set one of them",
            spec.resources.gpus
        ));
    }
    if p.pipeline <= 1 {
        return;
    }
    if spec.resources.gpus < 1 {
        problems.push("spec.parallelism.pipeline above 1 splits the model over the GPUs of several pods: spec.resources.gpus must be at least 1".into());
    }
    if !super::multinode::supported(spec.runtime.preset) {
        problems.push("spec.parallelism.pipeline above 1 needs a runtime with a multi-node mode: runtime.preset vllm, sglang or none (TGI has none)".into());
    }
    // The canary's LeaderWorkerSet adds "-canary".
    let longest = if spec.rollout.canary.is_some() {
        MAX_NAME_WITH_GROUPS - super::tracks::canary_name("").len()
    } else {
        MAX_NAME_WITH_GROUPS
    };
    if name.len() > longest {
        problems.push(format!(
            "metadata.name {name:?} is too long for spec.parallelism.pipeline above 1: the LeaderWorkerSet's StatefulSets are named <LeaderWorkerSet>-<group> with a revision label of 10 more characters, so the name must be at most {longest} characters{}",
            if spec.rollout.canary.is_some() { " with rollout.canary (its LeaderWorkerSet is <name>-canary)" } else { "" }
        ));
    }
}

/// Validates `ms`. `namespace` falls back to `default_namespace` because a
/// document given to `render` may omit it.
pub fn validate(ms: &ModelService, default_namespace: &str) -> Result<ValidSpec, InvalidSpec> {
    validate_with(ms, default_namespace, &OperatorDefaults::default())
}

/// [`validate`], with what the operator's configuration fills in.
pub fn validate_with(
    ms: &ModelService,
    default_namespace: &str,
    defaults: &OperatorDefaults,
) -> Result<ValidSpec, InvalidSpec> {
    let name = ms.name_any();
    let namespace = ms
        .namespace()
        .unwrap_or_else(|| default_namespace.to_string());
    let spec = &ms.spec;
    let mut problems = Vec::new();

    if let Err(e) = check_dns1035_label(&name) {
        problems.push(format!(
            "metadata.name {name:?} cannot name a Service: {e}; use a lower-case name that starts with a letter, at most 63 characters"
        ));
    }
    if spec.rollout.canary.is_some() && name.len() > super::tracks::MAX_NAME_WITH_TRACKS {
        problems.push(format!(
            "metadata.name {name:?} is too long for rollout.canary: the canary's Service {name}-canary must be at most 63 characters, so the name at most {}",
            super::tracks::MAX_NAME_WITH_TRACKS
        ));
    }
    if spec
        .route
        .as_ref()
        .is_some_and(|r| r.backend() == RouteBackend::InferencePool)
    {
        let longest = if spec.rollout.canary.is_some() {
            super::tracks::MAX_NAME_WITH_TRACKS - EPP_SUFFIX.len()
        } else {
            63 - EPP_SUFFIX.len()
        };
        if name.len() > longest {
            problems.push(format!(
                "metadata.name {name:?} is too long for route.backend InferencePool: the endpoint picker's Service {} must be at most 63 characters, so the name at most {longest}",
                super::endpoint_picker::picker_name(&if spec.rollout.canary.is_some() {
                    super::tracks::canary_name(&name)
                } else {
                    name.clone()
                })
            ));
        }
        if super::endpoint_picker::engine(spec.runtime.preset).is_none() {
            problems.push(
                "spec.route.backend InferencePool needs model servers whose metrics the endpoint picker reads: runtime.preset vllm or sglang (TGI's are not among them); use route.backend Service".into(),
            );
        }
    }
    if spec.model.name.trim().is_empty() {
        problems.push("spec.model.name must not be empty".into());
    }
    let rt = &spec.runtime;
    if rt.image.trim().is_empty() {
        problems.push("spec.runtime.image must not be empty".into());
    } else if rt.image.chars().any(char::is_whitespace) {
        problems.push(format!(
            "spec.runtime.image {:?} must not contain whitespace",
            rt.image
        ));
    }
    check_range(&mut problems, "spec.replicas", spec.replicas, 1, 100);
    check_range(&mut problems, "spec.runtime.port", rt.port, 1, 65535);
    let res = &spec.resources;
    check_range(&mut problems, "spec.resources.gpus", res.gpus, 0, 16);
    check_parallelism(&mut problems, &name, spec);
    if let Err(e) = check_extended_resource_name(&res.gpu_resource) {
        problems.push(format!(
            "spec.resources.gpuResource {:?} is not a valid extended resource name: {e} (for example nvidia.com/gpu)",
            res.gpu_resource
        ));
    }
    for (field, q) in [("cpu", &res.cpu), ("memory", &res.memory)] {
        if let Some(q) = q
            && !is_quantity(&q.0)
        {
            problems.push(format!(
                "spec.resources.{field} {:?} is not a quantity (for example \"4\", \"500m\", \"32Gi\")",
                q.0
            ));
        }
    }
    let mut prometheus_address = None;
    if let Some(a) = &spec.autoscaling {
        let keda = a.engine() == Engine::Keda;
        check_range(
            &mut problems,
            "spec.autoscaling.minReplicas",
            a.min_replicas,
            if keda { 0 } else { 1 },
            100,
        );
        if keda {
            prometheus_address = a
                .keda()
                .prometheus
                .map(|p| p.address.trim().to_string())
                .or_else(|| defaults.prometheus_address.clone())
                .filter(|p| !p.is_empty());
            if prometheus_address.is_none() {
                problems.push(
                    "spec.autoscaling.keda.prometheus.address is not set and the operator has no default (--prometheus-address, chart value keda.prometheusAddress); KEDA needs a Prometheus server to query".into(),
                );
            }
        }
        check_range(
            &mut problems,
            "spec.autoscaling.maxReplicas",
            a.max_replicas,
            1,
            100,
        );
        if a.max_replicas < a.min_replicas {
            problems.push(format!(
                "spec.autoscaling.maxReplicas ({}) must be greater than or equal to minReplicas ({})",
                a.max_replicas, a.min_replicas
            ));
        }
        if a.target_queue_length < 1 {
            problems.push("spec.autoscaling.targetQueueLength must be at least 1".into());
        }
        if a.metric.trim().is_empty() {
            problems.push("spec.autoscaling.metric must not be empty".into());
        }
    }
    if let Some(c) = &spec.rollout.canary {
        check_range(
            &mut problems,
            "spec.rollout.canary.replicas",
            c.replicas,
            1,
            100,
        );
        check_range(
            &mut problems,
            "spec.rollout.canary.weight",
            c.weight,
            0,
            100,
        );
        if let Some(image) = c.runtime.as_ref().and_then(|r| r.image.as_deref())
            && (image.trim().is_empty() || image.chars().any(char::is_whitespace))
        {
            problems.push(format!(
                "spec.rollout.canary.runtime.image {image:?} must be non-empty, without whitespace"
            ));
        }
    }
    if let Some(r) = &spec.route {
        if r.parent_refs.is_empty() || r.parent_refs.len() > 32 {
            problems.push(format!(
                "spec.route.parentRefs has {} entries, must have 1 to 32",
                r.parent_refs.len()
            ));
        }
        if r.hostnames.len() > 16 {
            problems.push(format!(
                "spec.route.hostnames has {} entries, must have at most 16",
                r.hostnames.len()
            ));
        }
        if !r.path.starts_with('/') || r.path.len() > 1024 {
            problems
                .push("spec.route.path must start with / and be at most 1024 characters".into());
        }
    }
    check_weights(&mut problems, &name, spec);
    let reserved = preset::env_names(rt.preset);
    for (i, e) in rt.env.iter().enumerate() {
        if e.name.is_empty() || e.name.contains('=') {
            problems.push(format!(
                "spec.runtime.env[{i}].name {:?} must be non-empty and must not contain '='",
                e.name
            ));
        } else if reserved.contains(&e.name.as_str()) {
            problems.push(format!(
                "spec.runtime.env[{i}].name {:?} is set by the preset; remove it, or use preset none",
                e.name
            ));
        }
    }

    if problems.is_empty() {
        let served = spec
            .model
            .source
            .as_ref()
            .and_then(|s| super::weights::served(&name, &s.uri));
        Ok(ValidSpec {
            name,
            namespace,
            spec: spec.clone(),
            prometheus_address,
            endpoint_picker_image: defaults
                .endpoint_picker_image
                .clone()
                .filter(|i| !i.trim().is_empty())
                .unwrap_or_else(|| super::endpoint_picker::DEFAULT_IMAGE.to_string()),
            served,
            fetch_image: defaults
                .fetch_image
                .clone()
                .filter(|i| !i.trim().is_empty())
                .unwrap_or_else(|| super::weights::DEFAULT_FETCH_IMAGE.to_string()),
        })
    } else {
        Err(InvalidSpec { problems })
    }
}

/// `model.source` and `model.cache`: a source that names one set of files,
/// a cache exactly when something is downloaded, and names that fit.
fn check_weights(problems: &mut Vec<String>, name: &str, spec: &ModelServiceSpec) {
    let m = &spec.model;
    let Some(source) = &m.source else {
        if m.cache.is_some() {
            problems.push(
                "spec.model.cache is only used with spec.model.source (an hf:// or http(s):// source to download into it)".into(),
            );
        }
        return;
    };
    let parsed = match model_source::parse(&source.uri) {
        Ok(p) => p,
        Err(e) => {
            problems.push(format!("spec.model.source.uri {:?} {e}", source.uri));
            return;
        }
    };
    if let Some(secret) = &source.credentials_secret
        && !model_source::is_dns_subdomain(secret)
    {
        problems.push(format!(
            "spec.model.source.credentialsSecret {secret:?} is not a Secret name"
        ));
    }
    if !parsed.downloads() {
        if m.cache.is_some() {
            problems.push("spec.model.cache is only for downloaded sources: a pvc:// source is mounted as it is, read-only".into());
        }
        if source.credentials_secret.is_some() {
            problems.push("spec.model.source.credentialsSecret is only for downloaded sources: nothing fetches a pvc:// source".into());
        }
        return;
    }
    let longest = 63 - super::weights::JOB_SUFFIX_LEN;
    if name.len() > longest {
        problems.push(format!(
            "metadata.name {name:?} is too long for a downloaded model.source: the download Job {name}-fetch-<8 hex> must be at most 63 characters, so the name at most {longest}"
        ));
    }
    let Some(cache) = &m.cache else {
        problems.push(format!(
            "spec.model.cache is required with a downloaded source: its size (for example 200Gi) makes the claim {name}-weights that every replica reads"
        ));
        return;
    };
    if super::quantity::bytes(&cache.size.0).is_none_or(|b| b == 0) {
        problems.push(format!(
            "spec.model.cache.size {:?} is not a positive quantity (for example 200Gi)",
            cache.size.0
        ));
    }
    if let Some(class) = &cache.storage_class_name
        && !model_source::is_dns_subdomain(class)
    {
        problems.push(format!(
            "spec.model.cache.storageClassName {class:?} is not a StorageClass name"
        ));
    }
}

fn check_range(problems: &mut Vec<String>, field: &str, v: i32, min: i32, max: i32) {
    if v < min || v > max {
        problems.push(format!("{field} is {v}, must be between {min} and {max}"));
    }
}

/// RFC 1035 label: what a Service name must be.
fn check_dns1035_label(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters");
    }
    let bytes = s.as_bytes();
    if !bytes[0].is_ascii_lowercase() {
        return Err("must start with a lower-case letter");
    }
    if !bytes[bytes.len() - 1].is_ascii_alphanumeric() {
        return Err("must end with a letter or digit");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        return Err("may contain only lower-case letters, digits and '-'");
    }
    Ok(())
}

/// A qualified name with a DNS-subdomain prefix, which extended resources need.
fn check_extended_resource_name(s: &str) -> Result<(), &'static str> {
    let Some((prefix, name)) = s.split_once('/') else {
        return Err("must have a domain prefix, as in vendor.com/gpu");
    };
    if prefix.is_empty() || prefix.len() > 253 {
        return Err("the prefix must be a DNS subdomain of at most 253 characters");
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !prefix.split('.').all(label_ok) {
        return Err("the prefix must be a lower-case DNS subdomain");
    }
    if prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io") {
        return Err("the kubernetes.io domain is reserved");
    }
    let nb = name.as_bytes();
    if name.is_empty() || name.len() > 63 {
        return Err("the name part must be 1 to 63 characters");
    }
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    if !alnum(&nb[0])
        || !alnum(&nb[nb.len() - 1])
        || !nb
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("the name part must be alphanumeric, with '-', '_' or '.' inside");
    }
    Ok(())
}

/// The Kubernetes quantity grammar: a signed decimal number followed by an
/// optional binary (Ki..Ei), decimal (n u m k M G T P E) or exponent suffix.
pub(crate) fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let digits_ok =
        !num.is_empty() && num.matches('.').count() <= 1 && num.chars().any(|c| c.is_ascii_digit());
    if !digits_ok {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        exp => {
            let Some(rest) = exp.strip_prefix(['e', 'E']) else {
                return false;
            };
            let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::children::tests::sample;

    #[test]
    fn a_good_spec_is_valid() {
        let v = validate(&sample(), "default").expect("valid");
        assert_eq!(v.name, "llama");
        assert_eq!(v.namespace, "ml");
    }

    #[test]
    fn a_canary_needs_room_for_its_suffix_in_the_name() {
        let mut ms = sample();
        ms.spec.rollout.canary = serde_json::from_value(serde_json::json!({})).ok();
        ms.metadata.name = Some("a".repeat(57));
        let err = validate(&ms, "default").expect_err("too long");
        assert!(err.to_string().contains("-canary"), "{err}");
        ms.metadata.name = Some("a".repeat(56));
        assert!(validate(&ms, "default").is_ok());
    }

    /// Defence in depth: an object stored around the schema (an older CRD,
    /// a forged conversion) must never become 5000 pods.
    #[test]
    fn a_pool_backend_needs_room_for_its_picker_and_metrics_it_can_read() {
        let mut ms = sample();
        ms.spec.route = serde_json::from_value(serde_json::json!(
            {"parentRefs": [{"name": "gw"}], "backend": "InferencePool"}
        ))
        .ok();
        assert!(validate(&ms, "d").is_ok());
        ms.metadata.name = Some("a".repeat(60));
        let err = validate(&ms, "d").expect_err("too long for -epp");
        assert!(err.to_string().contains("-epp"), "{err}");
        ms.metadata.name = Some("a".repeat(59));
        assert!(validate(&ms, "d").is_ok());
        ms.spec.rollout.canary = serde_json::from_value(serde_json::json!({})).ok();
        let err = validate(&ms, "d").expect_err("too long for -canary-epp");
        assert!(err.to_string().contains("-canary-epp"), "{err}");
        ms.metadata.name = Some("a".repeat(52));
        assert!(validate(&ms, "d").is_ok());
        ms.spec.runtime.preset = Some(crate::api::Preset::Tgi);
        let err = validate(&ms, "d").expect_err("no TGI metrics");
        assert!(err.to_string().contains("runtime.preset"), "{err}");
    }

    #[test]
    fn every_bound_of_a_canary_and_a_route_is_checked_again() {
        let mut ms = sample();
        ms.spec.rollout.canary = serde_json::from_value(serde_json::json!(
            {"replicas": 5000, "weight": 150, "runtime": {"image": "a b"}}
        ))
        .ok();
        ms.spec.route = serde_json::from_value(serde_json::json!(
            {"parentRefs": [], "path": "v1"}
        ))
        .ok();
        let err = validate(&ms, "default").expect_err("out of bounds");
        for field in [
            "spec.rollout.canary.replicas is 5000",
            "spec.rollout.canary.weight is 150",
            "spec.rollout.canary.runtime.image",
            "spec.route.parentRefs has 0 entries",
            "spec.route.path",
        ] {
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn namespace_falls_back_for_render() {
        let mut ms = sample();
        ms.metadata.namespace = None;
        assert_eq!(validate(&ms, "team-a").expect("valid").namespace, "team-a");
    }

    #[test]
    fn names_that_cannot_name_a_service_are_rejected() {
        for bad in ["Llama", "9lives", "llama.8b", "llama-", &"a".repeat(64)] {
            let mut ms = sample();
            ms.metadata.name = Some(bad.to_string());
            let err = validate(&ms, "default").expect_err(bad);
            assert!(err.to_string().contains("metadata.name"), "{err}");
        }
    }

    #[test]
    fn gpu_resource_must_be_an_extended_resource_name() {
        for bad in [
            "gpu",
            "nvidia.com/",
            "/gpu",
            "NVIDIA.com/gpu",
            "kubernetes.io/gpu",
            "nvidia.com/gpu!",
        ] {
            let mut ms = sample();
            ms.spec.resources.gpu_resource = bad.to_string();
            let err = validate(&ms, "default").expect_err(bad);
            assert!(
                err.to_string().contains("spec.resources.gpuResource"),
                "{err}"
            );
        }
        for good in ["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.5gb"] {
            let mut ms = sample();
            ms.spec.resources.gpu_resource = good.to_string();
            assert!(validate(&ms, "default").is_ok(), "{good}");
        }
    }

    #[test]
    fn out_of_range_values_from_old_objects_are_caught() {
        let mut ms = sample();
        ms.spec.replicas = 0;
        ms.spec.runtime.port = 70000;
        ms.spec.resources.gpus = -1;
        let err = validate(&ms, "default").expect_err("invalid");
        assert_eq!(err.problems.len(), 3, "{err}");
    }

    #[test]
    fn autoscaling_bounds_are_checked() {
        let mut ms = sample();
        if let Some(a) = ms.spec.autoscaling.as_mut() {
            a.min_replicas = 5;
            a.max_replicas = 2;
        }
        let err = validate(&ms, "default").expect_err("invalid");
        assert!(err.to_string().contains("maxReplicas (2)"), "{err}");
    }

    #[test]
    fn quantities() {
        for good in ["4", "500m", "32Gi", "1.5", "1e3", "0.5Gi", "+1"] {
            assert!(is_quantity(good), "{good}");
        }
        for bad in ["", "abc", "4 Gi", "1..2", "Gi", "12x", "1e"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn bad_quantities_name_the_field() {
        let mut ms = sample();
        ms.spec.resources.memory = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "lots".into(),
        ));
        let err = validate(&ms, "default").expect_err("invalid");
        assert!(err.to_string().contains("spec.resources.memory"), "{err}");
    }

    #[test]
    fn env_the_preset_sets_is_refused() {
        let mut ms = sample();
        ms.spec.runtime.preset = Some(crate::api::Preset::Sglang);
        ms.spec
            .runtime
            .env
            .push(k8s_openapi::api::core::v1::EnvVar {
                name: "PORT".into(),
                value: Some("1".into()),
                value_from: None,
            });
        let err = validate(&ms, "default").expect_err("invalid");
        assert!(
            err.to_string()
                .contains("spec.runtime.env[1].name \"PORT\""),
            "{err}"
        );
        ms.spec.runtime.preset = Some(crate::api::Preset::None);
        assert!(
            validate(&ms, "default").is_err(),
            "none sets MODEL_NAME and PORT too"
        );
        ms.spec.runtime.preset = None;
        assert!(validate(&ms, "default").is_ok(), "no preset sets no env");
    }

    #[test]
    fn a_source_names_one_set_of_files_and_a_download_needs_a_cache() {
        let with = |uri: &str, cache: bool, name: &str| {
            let mut ms = sample();
            ms.metadata.name = Some(name.into());
            ms.spec.model.source = Some(Box::new(crate::api::ModelSource {
                uri: uri.into(),
                credentials_secret: None,
            }));
            ms.spec.model.cache = cache.then(|| {
                Box::new(crate::api::ModelCache {
                    size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("10Gi".into()),
                    storage_class_name: None,
                    access_mode: None,
                })
            });
            validate(&ms, "default")
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(with("hf://org/m@abc", true, "llama"), Ok(()));
        assert_eq!(with("pvc://models/m", false, "llama"), Ok(()));
        assert_eq!(with("s3://models/llama/v1", true, "llama"), Ok(()));
        let problems = [
            (with("hf://org/m", true, "llama"), "pinned revision"),
            (
                with("hf://org/m@abc", false, "llama"),
                "spec.model.cache is required",
            ),
            (
                with("pvc://models/m", true, "llama"),
                "only for downloaded sources",
            ),
            (with("hf://org/m@abc", true, &"x".repeat(49)), "at most 48"),
            (with("s3://models", true, "llama"), "needs a prefix"),
            (
                with("s3://models/llama/v1", false, "llama"),
                "spec.model.cache is required",
            ),
        ];
        for (got, want) in problems {
            assert!(
                got.as_ref().is_err_and(|e| e.contains(want)),
                "{want}: {got:?}"
            );
        }
    }

    #[test]
    fn parallelism_is_checked_against_what_a_group_needs() {
        let with = |tensor, pipeline, f: &dyn Fn(&mut ModelService)| {
            let mut ms = sample();
            ms.spec.resources.gpus = 4;
            ms.spec.parallelism = Some(crate::api::Parallelism { tensor, pipeline });
            f(&mut ms);
            validate(&ms, "default")
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(with(Some(4), 2, &|_| ()), Ok(()));
        assert_eq!(with(None, 1, &|_| ()), Ok(()));
        let err = |r: Result<(), String>| r.expect_err("invalid");
        assert!(
            err(with(Some(8), 2, &|_| ()))
                .contains("spec.parallelism.tensor (8) must equal spec.resources.gpus (4)")
        );
        assert!(err(with(None, 17, &|_| ())).contains("spec.parallelism.pipeline is 17"));
        assert!(
            err(with(None, 2, &|ms| ms.spec.resources.gpus = 0)).contains("must be at least 1")
        );
        assert!(
            err(with(None, 2, &|ms| ms.spec.runtime.preset =
                Some(crate::api::Preset::Tgi)))
            .contains("TGI has none")
        );
        assert!(
            err(with(None, 2, &|ms| ms.metadata.name = Some("a".repeat(46))))
                .contains("at most 45")
        );
        // pipeline 1 is one pod per replica: none of the group's limits.
        assert_eq!(
            with(None, 1, &|ms| ms.spec.runtime.preset =
                Some(crate::api::Preset::Tgi)),
            Ok(())
        );
    }
}
