//! The CRD's own schema, checked by the operator on what conversion makes.
//!
//! The API server validates an object against the schema of the version it
//! was written in, then converts it for storage, and does not validate the
//! converted object again. Conversion to the storage version brings back
//! fields from the kept-fields annotation, which is user input: without this
//! check a v1alpha1 client could store a v1 field outside the v1
//! schema (a canary of 5000 replicas). So the webhook refuses a conversion to
//! the storage version whose result breaks a bound of that version's schema
//! (a range, a length, a pattern, an enum, a count of items, a type),
//! naming the field.
//!
//! Not every object converted is whole: server-side apply converts the
//! fields one manager owns, as a partial object, between versions (the fake
//! API server does; a v1alpha1 apply that owned `autoscaling.minReplicas`
//! but not `maxReplicas` was refused when this check counted required
//! fields). So a missing required field is not a problem here, and neither
//! are the CEL rules, which read fields a partial object lacks and defaults
//! it was never given. Those rules are checked again where the object is
//! whole: the reconcile's `core::validate`, which turns a broken one into
//! `InvalidSpec` (defence in depth, as for every bound).
//!
//! The schema is walked here by hand rather than by a JSON Schema crate:
//! the storage schema is structural (no `$ref`, no combinators), so its
//! bounds are a short walk, and the `jsonschema` crate this replaced was
//! 2.1 MB of the binary's code, resident in every replica, to run only in
//! conversions (BENCHMARKS.md, issue 36, sixth round). The contract tests
//! still hold this walk to `jsonschema` on every bound of the schema, and a
//! test refuses a schema keyword the walk does not know.
//! A `null` passes whatever the type, as on the API server, which drops
//! the nulls of fields that are not nullable.

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use regex::Regex;
use serde_json::Value;

use super::{GROUP, STORAGE_VERSION, crd};

/// The storage version's schema and its patterns, compiled once.
struct Storage {
    schema: JSONSchemaProps,
    patterns: HashMap<String, Regex>,
}

fn storage() -> Result<&'static Storage, String> {
    static STORAGE: OnceLock<Result<Storage, String>> = OnceLock::new();
    STORAGE
        .get_or_init(|| {
            let schema = storage_schema()?;
            let mut patterns = HashMap::new();
            compile_patterns(&schema, &mut patterns)?;
            Ok(Storage { schema, patterns })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn storage_schema() -> Result<JSONSchemaProps, String> {
    let crd = crd().map_err(|e| format!("the CRD does not merge: {e}"))?;
    crd.spec
        .versions
        .into_iter()
        .find(|v| v.name == STORAGE_VERSION)
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .ok_or_else(|| "the CRD has no storage schema".to_string())
}

fn compile_patterns(s: &JSONSchemaProps, out: &mut HashMap<String, Regex>) -> Result<(), String> {
    if let Some(p) = &s.pattern
        && !out.contains_key(p)
    {
        let re = Regex::new(p).map_err(|e| format!("the schema's pattern {p:?}: {e}"))?;
        out.insert(p.clone(), re);
    }
    for sub in children(s) {
        compile_patterns(sub, out)?;
    }
    Ok(())
}

/// The schemas nested in `s`: its properties, its items, its map values.
fn children(s: &JSONSchemaProps) -> impl Iterator<Item = &JSONSchemaProps> {
    let properties = s.properties.iter().flat_map(|p| p.values());
    let items = s.items.iter().flat_map(|i| match i {
        JSONSchemaPropsOrArray::Schema(one) => std::slice::from_ref(one.as_ref()),
        JSONSchemaPropsOrArray::Schemas(many) => many.as_slice(),
    });
    let values = s.additional_properties.iter().filter_map(|a| match a {
        JSONSchemaPropsOrBool::Schema(one) => Some(one.as_ref()),
        JSONSchemaPropsOrBool::Bool(_) => None,
    });
    properties.chain(items).chain(values)
}

/// At most this many problems are named in one message.
const NAMED: usize = 5;

/// Whether `obj`, in the storage version, keeps within that version's
/// schema (see the module doc for what is not counted); else what breaks
/// it, each with its field.
pub fn check_storage_version(obj: &Value) -> Result<(), String> {
    let expected = format!("{GROUP}/{STORAGE_VERSION}");
    if obj.get("apiVersion").and_then(Value::as_str) != Some(expected.as_str()) {
        return Err(format!("the object is not {expected}"));
    }
    let storage = storage()?;
    let mut walk = Walk {
        patterns: &storage.patterns,
        path: Vec::new(),
        problems: Vec::new(),
    };
    walk.value(&storage.schema, obj);
    if walk.problems.is_empty() {
        Ok(())
    } else {
        Err(walk.problems.join("; "))
    }
}

/// One check of one object: where it is, and what it found so far.
struct Walk<'a> {
    patterns: &'a HashMap<String, Regex>,
    path: Vec<String>,
    problems: Vec<String>,
}

impl Walk<'_> {
    fn problem(&mut self, what: String) {
        if self.problems.len() < NAMED {
            let field = if self.path.is_empty() {
                "the object".to_string()
            } else {
                self.path.join(".")
            };
            self.problems.push(format!("{field}: {what}"));
        }
    }

    fn nested(&mut self, step: String, s: &JSONSchemaProps, v: &Value) {
        self.path.push(step);
        self.value(s, v);
        self.path.pop();
    }

    fn value(&mut self, s: &JSONSchemaProps, v: &Value) {
        if v.is_null() || self.problems.len() >= NAMED {
            return;
        }
        if !self.of_type(s, v) {
            return;
        }
        if let Some(allowed) = &s.enum_
            && !allowed.iter().any(|a| &a.0 == v)
        {
            let list: Vec<String> = allowed.iter().map(|a| a.0.to_string()).collect();
            self.problem(format!("{v} is not one of [{}]", list.join(", ")));
        }
        match v {
            Value::Number(n) => self.number(s, n.as_f64().unwrap_or(f64::NAN), v),
            Value::String(text) => self.string(s, text),
            Value::Array(items) => self.array(s, items),
            Value::Object(map) => self.object(s, map),
            Value::Bool(_) | Value::Null => {}
        }
    }

    /// Whether `v` has the schema's type; says so when not.
    fn of_type(&mut self, s: &JSONSchemaProps, v: &Value) -> bool {
        let integer = |v: &Value| v.as_f64().is_some_and(|f| f.fract() == 0.0);
        let fits = if s.x_kubernetes_int_or_string == Some(true) {
            v.is_string() || integer(v)
        } else {
            match s.type_.as_deref() {
                None => true,
                Some("object") => v.is_object(),
                Some("array") => v.is_array(),
                Some("string") => v.is_string(),
                Some("integer") => integer(v),
                Some("number") => v.is_number(),
                Some("boolean") => v.is_boolean(),
                Some(_) => false,
            }
        };
        if !fits {
            let want = match s.type_.as_deref() {
                _ if s.x_kubernetes_int_or_string == Some(true) => "an integer or a string",
                Some(t) => t,
                None => "",
            };
            self.problem(format!("{v} is not of type {want}"));
        }
        fits
    }

    fn number(&mut self, s: &JSONSchemaProps, n: f64, v: &Value) {
        if let Some(min) = s.minimum {
            let exclusive = s.exclusive_minimum == Some(true);
            if n < min || (exclusive && n == min) {
                let how = if exclusive {
                    "equal to or less than"
                } else {
                    "less than"
                };
                self.problem(format!("{v} is {how} the minimum of {min}"));
            }
        }
        if let Some(max) = s.maximum {
            let exclusive = s.exclusive_maximum == Some(true);
            if n > max || (exclusive && n == max) {
                let how = if exclusive {
                    "equal to or greater than"
                } else {
                    "greater than"
                };
                self.problem(format!("{v} is {how} the maximum of {max}"));
            }
        }
        if let Some(step) = s.multiple_of
            && step > 0.0
            && (n / step).fract() != 0.0
        {
            self.problem(format!("{v} is not a multiple of {step}"));
        }
    }

    fn string(&mut self, s: &JSONSchemaProps, text: &str) {
        let chars = text.chars().count();
        let shown = || {
            let mut short: String = text.chars().take(40).collect();
            if chars > 40 {
                short.push('…');
            }
            format!("{short:?}")
        };
        if let Some(max) = s.max_length
            && chars as i64 > max
        {
            let what = format!("{} is longer than {max} characters", shown());
            self.problem(what);
        }
        if let Some(min) = s.min_length
            && (chars as i64) < min
        {
            let what = format!("{} is shorter than {min} characters", shown());
            self.problem(what);
        }
        if let Some(p) = &s.pattern {
            match self.patterns.get(p) {
                Some(re) if re.is_match(text) => {}
                Some(_) => {
                    let what = format!("{} does not match {p:?}", shown());
                    self.problem(what);
                }
                None => self.problem(format!("the pattern {p:?} was not compiled")),
            }
        }
    }

    /// Items of a list or fields of an object, against the schema's bounds.
    fn count(&mut self, n: usize, min: Option<i64>, max: Option<i64>, what: &str) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(max) = max
            && n > max
        {
            self.problem(format!("has {n} {what}, more than {max}"));
        }
        if let Some(min) = min
            && n < min
        {
            self.problem(format!("has {n} {what}, fewer than {min}"));
        }
    }

    fn array(&mut self, s: &JSONSchemaProps, items: &[Value]) {
        self.count(items.len(), s.min_items, s.max_items, "items");
        match &s.items {
            Some(JSONSchemaPropsOrArray::Schema(each)) => {
                for (i, item) in items.iter().enumerate() {
                    self.nested(i.to_string(), each, item);
                }
            }
            Some(JSONSchemaPropsOrArray::Schemas(each)) => {
                for (i, (sub, item)) in each.iter().zip(items).enumerate() {
                    self.nested(i.to_string(), sub, item);
                }
            }
            None => {}
        }
    }

    fn object(&mut self, s: &JSONSchemaProps, map: &serde_json::Map<String, Value>) {
        self.count(map.len(), s.min_properties, s.max_properties, "fields");
        let values = match &s.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(values)) => Some(values.as_ref()),
            _ => None,
        };
        for (key, v) in map {
            // A field the schema does not name is pruned by the API server,
            // not refused.
            if let Some(sub) = s.properties.as_ref().and_then(|p| p.get(key)).or(values) {
                self.nested(key.clone(), sub, v);
            }
        }
    }
}

/// Every keyword the storage schema may use: those [`Walk`] checks, and
/// those it leaves alone on purpose (see the module doc).
#[cfg(test)]
const KNOWN_KEYWORDS: &[&str] = &[
    // checked
    "type",
    "nullable",
    "x-kubernetes-int-or-string",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "items",
    "minProperties",
    "maxProperties",
    "properties",
    "additionalProperties",
    // not checked here, on purpose
    "required",
    "x-kubernetes-validations",
    // no bound: what the API server does with the object, or words
    "format",
    "default",
    "description",
    "title",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(spec: Value) -> Value {
        json!({"apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ml"}, "spec": spec})
    }

    fn schema_json() -> Value {
        serde_json::to_value(storage_schema().expect("storage schema")).expect("serializes")
    }

    #[test]
    fn a_valid_object_passes() {
        let o = object(json!({"model": {"name": "m"}, "runtime": {"image": "i"}}));
        assert_eq!(check_storage_version(&o), Ok(()));
        let o = object(
            json!({"model": {"name": "m", "source": {"uri": "hf://org/m@main"}},
            "runtime": {"image": "i"}}),
        );
        assert_eq!(check_storage_version(&o), Ok(()));
    }

    #[test]
    fn a_bound_broken_names_the_field() {
        let o = object(json!({"model": {"name": "m"}, "runtime": {"image": "i"},
            "rollout": {"canary": {"replicas": 5000}}}));
        let e = check_storage_version(&o).expect_err("out of bounds");
        assert!(
            e.contains("spec.rollout.canary.replicas: 5000 is greater than the maximum"),
            "{e}"
        );
    }

    /// What server-side apply converts: the fields one manager owns.
    #[test]
    fn a_partial_object_is_not_refused_for_what_it_lacks() {
        let o = object(json!({"autoscaling": {"minReplicas": 5}}));
        assert_eq!(check_storage_version(&o), Ok(()));
        let o = object(json!({"autoscaling": {"minReplicas": 500}}));
        assert!(check_storage_version(&o).is_err(), "a bound still counts");
    }

    #[test]
    fn a_wrong_type_a_pattern_and_an_item_are_named() {
        let o = object(json!({"model": {"name": 7, "source": {"uri": "ftp://x"}},
            "route": {"parentRefs": [{"name": "gw"}, {"name": "gw", "port": 70000}]}}));
        let e = check_storage_version(&o).expect_err("three problems");
        assert!(
            e.contains("spec.model.name: 7 is not of type string"),
            "{e}"
        );
        assert!(
            e.contains("spec.model.source.uri: \"ftp://x\" does not match"),
            "{e}"
        );
        assert!(
            e.contains("spec.route.parentRefs.1.port: 70000 is greater than"),
            "{e}"
        );
    }

    #[test]
    fn nulls_and_unknown_fields_pass_as_the_api_server_prunes_them() {
        let o = object(
            json!({"model": {"name": "m", "source": null}, "runtime": {"image": "i"},
            "notAField": {"anything": [1, 2]}}),
        );
        assert_eq!(check_storage_version(&o), Ok(()));
    }

    #[test]
    fn another_version_is_refused() {
        let o = json!({"apiVersion": format!("{GROUP}/v1alpha1"), "spec": {}});
        assert!(check_storage_version(&o).is_err());
    }

    #[test]
    fn no_more_than_five_problems_are_named() {
        let refs: Vec<Value> = (0..9).map(|_| json!({"name": ""})).collect();
        let o = object(json!({"route": {"parentRefs": refs}}));
        let e = check_storage_version(&o).expect_err("nine problems");
        assert_eq!(e.matches("is shorter than").count(), NAMED, "{e}");
    }

    /// A keyword the walk does not know would be a bound left unchecked.
    #[test]
    fn the_storage_schema_uses_only_keywords_the_walk_knows() {
        fn keywords(s: &Value, at: &str, unknown: &mut Vec<String>) {
            let Some(map) = s.as_object() else { return };
            for (k, v) in map {
                if !KNOWN_KEYWORDS.contains(&k.as_str()) {
                    unknown.push(format!("{at}: {k}"));
                }
                match k.as_str() {
                    "properties" => {
                        for (name, sub) in v.as_object().into_iter().flatten() {
                            keywords(sub, &format!("{at}.{name}"), unknown);
                        }
                    }
                    "items" | "additionalProperties" => keywords(v, &format!("{at}[]"), unknown),
                    _ => {}
                }
            }
        }
        let mut unknown = Vec::new();
        keywords(&schema_json(), "", &mut unknown);
        assert!(unknown.is_empty(), "not checked: {unknown:?}");
    }

    /// Every bound of the storage schema, each broken alone and each met at
    /// its edge: the walk and the `jsonschema` crate (the contract tests'
    /// validator, which the walk replaced) agree on every one, and the walk
    /// names the field.
    #[test]
    fn every_bound_agrees_with_a_json_schema_validator() {
        let schema = schema_json();
        let reference = jsonschema::validator_for(&schema).expect("compiles");
        let reference_ok = |o: &Value| {
            reference.iter_errors(o).all(|e| {
                matches!(
                    e.kind(),
                    jsonschema::error::ValidationErrorKind::Required { .. }
                )
            })
        };
        let mut cases = Vec::new();
        bounds(&schema, &mut Vec::new(), &mut cases);
        assert!(
            cases.len() > 80,
            "only {} cases: the walk of the schema is broken",
            cases.len()
        );
        // The apiVersion is the one field checked before the walk.
        cases.retain(|(path, _, _, _)| !path.is_empty() && path[0] != "apiVersion");
        for (path, value, ok, by_reference) in cases {
            let mut o = object(json!({}));
            put(&mut o, &path, value.clone());
            let field = path.join(".");
            let ours = check_storage_version(&o);
            assert_eq!(ours.is_ok(), ok, "{field} = {value}: {ours:?}");
            if by_reference {
                assert_eq!(reference_ok(&o), ok, "jsonschema on {field} = {value}");
            }
            if let Err(e) = ours {
                assert!(e.starts_with(&format!("{field}: ")), "{field}: {e}");
            }
        }
    }

    /// Cases for every bound under `s`: (path, value, whether it passes,
    /// whether `jsonschema` judges it as the API server does).
    fn bounds(s: &Value, path: &mut Vec<String>, out: &mut Vec<Case>) {
        let mut case = |v: Value, ok: bool| out.push((path.clone(), v, ok, true));
        let int_or_string = s["x-kubernetes-int-or-string"] == json!(true);
        match s["type"].as_str() {
            Some("integer") | Some("number") => {
                case(json!("text"), false);
                if let Some(min) = s["minimum"].as_f64() {
                    case(json!(min as i64), true);
                    case(json!(min as i64 - 1), false);
                }
                if let Some(max) = s["maximum"].as_f64() {
                    case(json!(max as i64), true);
                    case(json!(max as i64 + 1), false);
                }
            }
            Some("string") if s["enum"].is_array() => {
                for v in s["enum"].as_array().into_iter().flatten() {
                    case(v.clone(), true);
                }
                case(json!("NotOneOfThem"), false);
            }
            Some("string") if s["pattern"].is_null() && s["format"].is_null() => {
                case(json!(5), false);
                let min = s["minLength"].as_u64().unwrap_or(0) as usize;
                let max = s["maxLength"].as_u64();
                case(json!("x".repeat(min.max(1))), true);
                if min > 0 {
                    case(json!("x".repeat(min - 1)), false);
                }
                if let Some(max) = max {
                    case(json!("é".repeat(max as usize)), true);
                    case(json!("x".repeat(max as usize + 1)), false);
                }
            }
            Some("string") if s["pattern"].is_string() => {
                case(json!("no scheme"), false);
            }
            Some("boolean") => case(json!("yes"), false),
            Some("array") => {
                case(json!({"not": "a list"}), false);
                if let Some(max) = s["maxItems"].as_u64() {
                    let item = sample(&s["items"]);
                    case(Value::Array(vec![item.clone(); max as usize]), true);
                    case(Value::Array(vec![item; max as usize + 1]), false);
                }
                path.push("0".into());
                bounds(&s["items"], path, out);
                path.pop();
            }
            Some("object") => {
                case(json!([1]), false);
                for (name, sub) in s["properties"].as_object().into_iter().flatten() {
                    path.push(name.clone());
                    bounds(sub, path, out);
                    path.pop();
                }
            }
            _ if int_or_string => {
                case(json!(3), true);
                case(json!("30%"), true);
                // A Kubernetes keyword, which `jsonschema` does not know.
                out.push((path.clone(), json!(true), false, false));
            }
            _ => {}
        }
    }

    type Case = (Vec<String>, Value, bool, bool);

    /// A value that keeps within `s` (its bounds' edges are tested apart).
    fn sample(s: &Value) -> Value {
        match s["type"].as_str() {
            Some("object") => json!({}),
            Some("array") => json!([]),
            Some("integer") | Some("number") => json!(s["minimum"].as_f64().unwrap_or(1.0) as i64),
            Some("boolean") => json!(true),
            _ if s["enum"].is_array() => s["enum"][0].clone(),
            _ => json!("x".repeat(s["minLength"].as_u64().unwrap_or(1).max(1) as usize)),
        }
    }

    /// Sets `v` at `path` (object keys, or `0` for a list's first item).
    fn put(o: &mut Value, path: &[String], v: Value) {
        let mut at = o;
        for (i, step) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let next_is_item = path.get(i + 1).is_some_and(|s| s == "0");
            let fresh = || if next_is_item { json!([{}]) } else { json!({}) };
            at = if step == "0" {
                let Value::Array(items) = at else {
                    panic!("not a list at {step}")
                };
                if last {
                    items[0] = v;
                    return;
                }
                if !items[0].is_object() && !items[0].is_array() {
                    items[0] = fresh();
                }
                &mut items[0]
            } else {
                let Value::Object(map) = at else {
                    panic!("not an object at {step}")
                };
                if last {
                    map.insert(step.clone(), v);
                    return;
                }
                map.entry(step.clone()).or_insert_with(fresh)
            };
        }
    }
}
