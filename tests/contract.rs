//! Contract tests: the committed CRD is exactly what the Rust types generate,
//! and the schema the API server will enforce accepts our samples and rejects
//! the bad documents API.md promises to reject.
//!
//! The schema check combines a JSON Schema validator (types, ranges, lengths,
//! enums, required) with kube's client-side CEL evaluator for the
//! `x-kubernetes-validations` rules, so both halves of the API server's
//! validation are exercised offline.

use std::path::{Path, PathBuf};

use modelservice_operator::api::{CRD_FILE, ModelService, crd, crd_yaml, deprecation_warning};
use modelservice_operator::core::convert::{V1, convert_object};
use serde_json::{Value, json};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn crd_json() -> Value {
    serde_json::to_value(crd().expect("versions merge")).expect("crd serializes")
}

/// One version's entry of the CRD.
fn version(name: &str) -> Value {
    crd_json()["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no version {name}"))
        .clone()
}

/// The schema the API server applies to `obj`: its apiVersion's.
fn schema_of(obj: &Value) -> Value {
    let v = obj["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit_once('/'))
        .map_or("", |(_, v)| v);
    version(v)["schema"]["openAPIV3Schema"].clone()
}

/// Every problem the API server's schema validation would report for `obj`.
fn schema_errors(obj: &Value) -> Vec<String> {
    let schema = schema_of(obj);
    let mut errors: Vec<String> = match jsonschema::validator_for(&schema) {
        Ok(v) => v
            .iter_errors(obj)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect(),
        Err(e) => vec![format!("schema does not compile: {e}")],
    };
    if let Err(cel) = kube::core::cel::Validator::new().validate(&schema, obj, None) {
        errors.extend(cel.into_vec().into_iter().map(|e| e.to_string()));
    }
    errors
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    files
}

fn minimal_alpha() -> Value {
    json!({"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
           "metadata": {"name": "m", "namespace": "ml"},
           "spec": {"model": "org/model", "image": "vllm/vllm-openai:v0.8.5"}})
}

fn minimal() -> Value {
    json!({"apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
           "metadata": {"name": "m", "namespace": "ml"},
           "spec": {"model": {"name": "org/model"}, "runtime": {"image": "vllm/vllm-openai:v0.8.5"}}})
}

fn minimal_beta() -> Value {
    let mut doc = minimal();
    doc["apiVersion"] = json!("serving.modelservice.dev/v1beta1");
    doc
}

/// Sets a dotted path of `doc` (`spec.runtime.port`).
fn set(doc: &mut Value, path: &str, v: Value) {
    let mut at = doc;
    for k in path.split('.') {
        if at.get(k).is_none() {
            at[k] = json!({});
        }
        at = &mut at[k];
    }
    *at = v;
}

/// Takes any sample document to the version the operator reads.
fn as_model_service(doc: Value, file: &Path) -> ModelService {
    let v1 = convert_object(doc, V1).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_json::from_value(v1).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

#[test]
fn committed_crd_is_what_the_types_generate() {
    let generated = crd_yaml().expect("renders");
    let committed = std::fs::read_to_string(repo(CRD_FILE)).expect("crds/modelservice.yaml exists");
    assert!(
        generated == committed,
        "{CRD_FILE} is stale: run `cargo xtask generate` (it writes the copies in the chart and config/ too) and commit them"
    );
}

#[test]
fn crd_uses_only_integer_formats_kubernetes_accepts() {
    let y = crd_yaml().expect("renders");
    assert!(
        !y.contains("uint"),
        "unsigned formats are rejected by the API server"
    );
    for line in y.lines().filter(|l| l.trim_start().starts_with("format:")) {
        let f = line.trim_start().trim_start_matches("format:").trim();
        assert!(
            ["int32", "int64", "date-time", "double"].contains(&f),
            "unexpected format {f}"
        );
    }
}

/// `kubectl explain modelservice.spec.X` must say something for every field,
/// in every version (`--api-version=serving.modelservice.dev/v1` included).
#[test]
fn every_field_has_a_description() {
    fn walk(path: &str, s: &Value, missing: &mut Vec<String>) {
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{path}.{k}");
                if v.get("description")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    missing.push(p.clone());
                }
                walk(&p, v, missing);
            }
        }
        if let Some(items) = s.get("items") {
            walk(&format!("{path}[]"), items, missing);
        }
    }
    let mut missing = Vec::new();
    for v in ["v1alpha1", "v1beta1", "v1"] {
        let s = &version(v)["schema"]["openAPIV3Schema"];
        for top in ["spec", "status"] {
            walk(&format!("{v}:{top}"), &s["properties"][top], &mut missing);
        }
    }
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:?}"
    );
}

#[test]
fn crd_has_the_subresources_columns_and_names_api_md_promises() {
    let crd = crd_json();
    assert_eq!(crd["spec"]["group"], "serving.modelservice.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["plural"], "modelservices");
    assert_ne!(
        crd["spec"]["names"]["shortNames"][0], "msvc",
        "llm-d owns msvc"
    );
    for name in ["v1", "v1beta1", "v1alpha1"] {
        let v = version(name);
        assert_eq!(v["served"], true, "{name}");
        assert_eq!(v["subresources"]["status"], json!({}));
        assert_eq!(
            v["subresources"]["scale"],
            json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"})
        );
        let columns: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        for c in ["Model", "Ready", "Reason", "Replicas", "Age"] {
            assert!(
                columns.contains(&c),
                "{name}: missing column {c}: {columns:?}"
            );
        }
    }
    let alpha =
        &version("v1alpha1")["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(alpha["replicas"]["default"], 1);
    assert_eq!(alpha["port"]["default"], 8000);
    assert_eq!(alpha["gpus"]["default"], 1);
    assert_eq!(alpha["gpuResource"]["default"], "nvidia.com/gpu");
    assert_eq!(alpha["strategy"]["default"], "RollingUpdate");
    assert_eq!(
        alpha["strategy"]["enum"],
        json!(["RollingUpdate", "Recreate"])
    );
    for name in ["v1", "v1beta1"] {
        let beta = &version(name)["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(beta["replicas"]["default"], 1);
        assert_eq!(beta["runtime"]["properties"]["port"]["default"], 8000);
        assert_eq!(
            beta["runtime"]["properties"]["preset"]["enum"],
            json!(["vllm", "sglang", "tgi", "none"])
        );
        assert_eq!(beta["resources"]["properties"]["gpus"]["default"], 1);
        assert_eq!(
            beta["resources"]["properties"]["gpuResource"]["default"],
            "nvidia.com/gpu"
        );
        assert_eq!(
            beta["rollout"]["properties"]["strategy"]["default"],
            "RollingUpdate"
        );
    }
    let autoscaling = |name: &str| {
        version(name)["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["autoscaling"]["properties"]
            .clone()
    };
    assert!(autoscaling("v1")["keda"]["properties"]["cooldownSeconds"].is_object());
    assert!(autoscaling("v1").get("cooldownSeconds").is_none());
    assert!(autoscaling("v1beta1")["cooldownSeconds"].is_object());
}

#[test]
fn v1_is_stored_and_the_older_versions_are_deprecated_and_converted_by_webhook() {
    let crd = crd_json();
    let names: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["v1", "v1beta1", "v1alpha1"],
        "the first is the preferred"
    );
    assert_eq!(version("v1")["storage"], true);
    assert!(version("v1").get("deprecated").is_none());
    for old in ["v1beta1", "v1alpha1"] {
        let v = version(old);
        assert_eq!(v["storage"], false, "{old}");
        assert_eq!(v["deprecated"], true, "{old}");
        assert_eq!(v["deprecationWarning"], deprecation_warning(old));
        let warning = deprecation_warning(old);
        assert!(
            warning.contains(&format!(
                "serving.modelservice.dev/{old} ModelService is deprecated"
            )) && warning.contains("use serving.modelservice.dev/v1 ")
                && warning.contains("--to v1`"),
            "{warning}"
        );
    }
    let conv = &crd["spec"]["conversion"];
    assert_eq!(conv["strategy"], "Webhook");
    assert_eq!(conv["webhook"]["conversionReviewVersions"], json!(["v1"]));
    assert_eq!(
        conv["webhook"]["clientConfig"]["service"]["path"],
        "/convert"
    );
}

#[test]
fn a_minimal_document_is_accepted_in_every_version() {
    for doc in [minimal(), minimal_beta(), minimal_alpha()] {
        let errors = schema_errors(&doc);
        assert!(errors.is_empty(), "{errors:?}");
    }
}

#[test]
fn bad_v1alpha1_documents_are_rejected_naming_the_field() {
    let cases: &[(&str, Value, &str)] = &[
        ("replicas 0", json!({"replicas": 0}), "replicas"),
        ("replicas 101", json!({"replicas": 101}), "replicas"),
        ("port 70000", json!({"port": 70000}), "port"),
        ("gpus -1", json!({"gpus": -1}), "gpus"),
        ("empty model", json!({"model": ""}), "model"),
        ("empty image", json!({"image": ""}), "image"),
        (
            "unknown strategy",
            json!({"strategy": "BlueGreen"}),
            "strategy",
        ),
        ("replicas as text", json!({"replicas": "two"}), "replicas"),
    ];
    for (what, patch, field) in cases {
        let mut doc = minimal_alpha();
        for (k, v) in patch.as_object().expect("object") {
            doc["spec"][k] = v.clone();
        }
        let errors = schema_errors(&doc);
        assert!(!errors.is_empty(), "{what} was accepted");
        assert!(
            errors.iter().any(|e| e.contains(field)),
            "{what}: errors do not name {field}: {errors:?}"
        );
    }
    let mut no_model = minimal_alpha();
    if let Some(spec) = no_model["spec"].as_object_mut() {
        spec.remove("model");
    }
    assert!(
        !schema_errors(&no_model).is_empty(),
        "a missing model was accepted"
    );
}

#[test]
fn bad_v1_and_v1beta1_documents_are_rejected_naming_the_field() {
    let cases: &[(&str, &str, Value)] = &[
        ("spec.replicas", "replicas", json!(0)),
        ("spec.replicas", "replicas", json!(101)),
        ("spec.runtime.port", "port", json!(70000)),
        ("spec.resources.gpus", "gpus", json!(-1)),
        ("spec.model.name", "name", json!("")),
        ("spec.runtime.image", "image", json!("")),
        ("spec.runtime.preset", "preset", json!("triton")),
        ("spec.rollout.strategy", "strategy", json!("BlueGreen")),
        // Bounded specs (issue 24): every string and list has a size.
        ("spec.runtime.image", "image", json!("r/".repeat(600))),
        ("spec.model.name", "name", json!("m".repeat(513))),
        ("spec.runtime.args", "args", json!(vec!["--x"; 257])),
        ("spec.runtime.args", "args", json!(["a".repeat(16_385)])),
        (
            "spec.runtime.env",
            "env",
            json!(vec![json!({"name": "A"}); 129]),
        ),
        (
            "spec.scheduling.tolerations",
            "tolerations",
            json!(vec![json!({}); 65]),
        ),
        ("spec.autoscaling.metric", "metric", json!("m".repeat(257))),
    ];
    let keda: &[(Value, &str, &str, Value)] = &[
        (
            minimal(),
            "spec.autoscaling.keda.cooldownSeconds",
            "cooldownSeconds",
            json!(-1),
        ),
        (
            minimal(),
            "spec.autoscaling.keda.pollingSeconds",
            "pollingSeconds",
            json!(0),
        ),
        (
            minimal_beta(),
            "spec.autoscaling.cooldownSeconds",
            "cooldownSeconds",
            json!(-1),
        ),
    ];
    let shared = [minimal(), minimal_beta()].into_iter().flat_map(|doc| {
        cases
            .iter()
            .map(move |(p, f, v)| (doc.clone(), *p, *f, v.clone()))
    });
    let keda = keda.iter().cloned();
    for (mut doc, path, field, value) in shared.chain(keda) {
        if path.starts_with("spec.autoscaling.") {
            doc["spec"]["autoscaling"] = json!({"maxReplicas": 2});
        }
        set(&mut doc, path, value.clone());
        let errors = schema_errors(&doc);
        assert!(
            !errors.is_empty(),
            "{}: {path}: {value} was accepted",
            doc["apiVersion"]
        );
        assert!(
            errors.iter().any(|e| e.contains(field)),
            "{path}: errors do not name {field}: {errors:?}"
        );
    }
    for required in ["model", "runtime"] {
        let mut doc = minimal();
        if let Some(spec) = doc["spec"].as_object_mut() {
            spec.remove(required);
        }
        assert!(
            !schema_errors(&doc).is_empty(),
            "no {required} was accepted"
        );
    }
}

#[test]
fn the_cel_rule_rejects_max_below_min() {
    for mut doc in [minimal(), minimal_beta(), minimal_alpha()] {
        doc["spec"]["autoscaling"] = json!({"minReplicas": 4, "maxReplicas": 2});
        let errors = schema_errors(&doc);
        assert!(
            errors.iter().any(|e| e.contains("maxReplicas")),
            "{errors:?}"
        );
        doc["spec"]["autoscaling"] = json!({"minReplicas": 2, "maxReplicas": 2});
        assert!(schema_errors(&doc).is_empty());
        doc["spec"]["autoscaling"] = json!({"maxReplicas": 3});
        assert!(schema_errors(&doc).is_empty(), "minReplicas defaults to 1");
    }
}

#[test]
fn names_that_cannot_name_the_children_are_refused_naming_metadata_name() {
    let named = |name: &str| {
        let mut doc = minimal();
        doc["metadata"]["name"] = json!(name);
        let mut alpha = minimal_alpha();
        alpha["metadata"]["name"] = json!(name);
        let mut errors = schema_errors(&doc);
        let alpha_errors = schema_errors(&alpha);
        assert_eq!(
            errors.is_empty(),
            alpha_errors.is_empty(),
            "{name:?}: the versions disagree"
        );
        errors.extend(alpha_errors);
        errors
    };
    for bad in ["7b-llama", &"a".repeat(64), "Llama", "llama-", "llama.8b"] {
        let errors = named(bad);
        assert!(
            errors.iter().any(|e| e.contains("metadata.name")),
            "{bad:?} was accepted: {errors:?}"
        );
    }
    for good in ["llama-8b", "a", &"a".repeat(63)] {
        assert!(
            named(good).is_empty(),
            "{good:?} was refused: {:?}",
            named(good)
        );
    }
}

#[test]
fn every_sample_is_valid_and_parses_as_a_modelservice() {
    let mut files = yaml_files(&repo("config/samples"));
    let alpha = yaml_files(&repo("config/samples/v1alpha1"));
    let beta = yaml_files(&repo("config/samples/v1beta1"));
    assert!(
        files.len() >= 2 && alpha.len() >= 2 && beta.len() >= 2,
        "expected a minimal and a full sample in each version, found {files:?} {alpha:?} {beta:?}"
    );
    files.extend(alpha);
    files.extend(beta);
    let mut autoscaled = false;
    for f in files {
        let want = match f
            .parent()
            .and_then(Path::file_name)
            .and_then(|d| d.to_str())
        {
            Some(old @ ("v1alpha1" | "v1beta1")) => format!("serving.modelservice.dev/{old}"),
            _ => "serving.modelservice.dev/v1".to_string(),
        };
        for doc in yaml_docs(&f) {
            assert_eq!(doc["apiVersion"], want, "{}", f.display());
            let errors = schema_errors(&doc);
            assert!(errors.is_empty(), "{}: {errors:?}", f.display());
            let ms = as_model_service(doc, &f);
            autoscaled |= ms.spec.autoscaling.is_some();
            modelservice_operator::core::validate(&ms, "default")
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        }
    }
    assert!(autoscaled, "one sample must use autoscaling");
}

#[test]
fn every_deliberately_bad_sample_is_rejected() {
    let files = yaml_files(&repo("config/samples/invalid"));
    assert!(
        files.len() >= 5,
        "expected the bad samples, found {files:?}"
    );
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        // Each bad sample says which field must be named in the rejection.
        let field = text
            .lines()
            .find_map(|l| l.strip_prefix("# expected-error-field: spec."))
            .unwrap_or_else(|| panic!("{} lacks an expected-error-field comment", f.display()))
            .trim()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_string();
        for doc in yaml_docs(&f) {
            let errors = schema_errors(&doc);
            assert!(!errors.is_empty(), "{} was accepted", f.display());
            assert!(
                errors.iter().any(|e| e.contains(&field)),
                "{}: errors do not name {field}: {errors:?}",
                f.display()
            );
        }
    }
}
