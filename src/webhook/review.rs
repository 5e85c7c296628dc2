//! The ConversionReview protocol (apiextensions.k8s.io/v1), as one pure
//! function from request bytes to response JSON.
//!
//! The API server reads only the review in the body, so every problem,
//! including a body it would never send, is answered with a review whose
//! `result` is a Failure naming the problem; the HTTP layer always answers
//! 200. A failed conversion returns no `convertedObjects` at all: the API
//! server must not get a partial list (it would fail the whole request
//! anyway, but with a less useful message).

use serde_json::{Value, json};

use super::Convert;

/// The review version used when the request does not say which one it is.
const DEFAULT_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// Turns a ConversionReview request into the response review: the same
/// apiVersion and kind, `response.uid` copied from the request, and either
/// every object converted in order with `result.status: Success`, or no
/// objects and `result: {status: Failure, message}`. Never panics.
pub fn handle(body: &[u8], convert: Convert) -> Value {
    let review: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return failure(
                DEFAULT_API_VERSION,
                "",
                &format!("the request body is not a JSON ConversionReview: {e}"),
            );
        }
    };
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .unwrap_or(DEFAULT_API_VERSION);
    let Some(request) = review.get("request").filter(|r| r.is_object()) else {
        return failure(api_version, "", "the ConversionReview has no request");
    };
    let uid = match request.get("uid").and_then(Value::as_str) {
        Some(u) if !u.is_empty() => u,
        _ => return failure(api_version, "", "the ConversionReview request has no uid"),
    };
    let desired = match request.get("desiredAPIVersion").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => d,
        _ => {
            return failure(
                api_version,
                uid,
                "the ConversionReview request has no desiredAPIVersion",
            );
        }
    };
    let objects = match request.get("objects") {
        Some(Value::Array(objects)) => objects.as_slice(),
        // An empty list may be sent as null or left out.
        None | Some(Value::Null) => &[],
        Some(_) => {
            return failure(
                api_version,
                uid,
                "the ConversionReview request's objects is not a list",
            );
        }
    };
    let mut converted = Vec::with_capacity(objects.len());
    for (index, object) in objects.iter().enumerate() {
        // A converter that panics fails this review, not the server.
        let result = std::panic::catch_unwind(|| convert(object.clone(), desired))
            .unwrap_or_else(|_| Err("the conversion panicked (a bug in the operator)".into()));
        match result {
            Ok(c) => converted.push(c),
            Err(e) => {
                return failure(
                    api_version,
                    uid,
                    &format!(
                        "cannot convert {} to {desired}: {e}",
                        describe(object, index)
                    ),
                );
            }
        }
    }
    json!({
        "apiVersion": api_version,
        "kind": "ConversionReview",
        "response": {
            "uid": uid,
            "convertedObjects": converted,
            "result": {"status": "Success"},
        },
    })
}

fn failure(api_version: &str, uid: &str, message: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "ConversionReview",
        "response": {
            "uid": uid,
            "result": {"status": "Failure", "message": message},
        },
    })
}

/// "ModelService ns/name" (or "object #i" when it has no name), so that the
/// message the user sees from kubectl points at the object to fix.
fn describe(object: &Value, index: usize) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = object.get("metadata");
    let field = |f: &str| {
        meta.and_then(|m| m.get(f))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (field("namespace"), field("name")) {
        (Some(ns), Some(name)) => format!("{kind} {ns}/{name}"),
        (None, Some(name)) => format!("{kind} {name}"),
        _ => format!("{kind} #{index} of the request"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_version(mut o: Value, to: &str) -> Result<Value, String> {
        if o.get("spec").and_then(|s| s.get("broken")).is_some() {
            return Err("spec.broken cannot be converted".into());
        }
        match o.as_object_mut() {
            Some(m) => {
                m.insert("apiVersion".into(), Value::String(to.into()));
                Ok(o)
            }
            None => Err("not an object".into()),
        }
    }

    fn ms(name: &str) -> Value {
        json!({"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
               "metadata": {"name": name, "namespace": "ml"}, "spec": {"model": "m"}})
    }

    fn review(objects: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                        "desiredAPIVersion": "serving.modelservice.dev/v1beta1",
                        "objects": objects}
        }))
        .expect("serializes")
    }

    fn message(v: &Value) -> &str {
        v["response"]["result"]["message"].as_str().unwrap_or("")
    }

    #[test]
    fn converts_every_object_in_order() {
        let out = handle(&review(json!([ms("a"), ms("b"), ms("c")])), set_version);
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(out["kind"], "ConversionReview");
        assert_eq!(
            out["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
        assert_eq!(out["response"]["result"], json!({"status": "Success"}));
        let names: Vec<_> = out["response"]["convertedObjects"]
            .as_array()
            .expect("list")
            .iter()
            .map(|o| {
                assert_eq!(o["apiVersion"], "serving.modelservice.dev/v1beta1");
                o["metadata"]["name"].as_str().unwrap_or("").to_string()
            })
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn no_objects_is_an_empty_success() {
        let out = handle(&review(json!([])), set_version);
        assert_eq!(out["response"]["result"]["status"], "Success");
        assert_eq!(out["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn the_review_version_is_echoed() {
        let body = json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": "serving.modelservice.dev/v1alpha1", "objects": [ms("a")]}});
        let out = handle(&serde_json::to_vec(&body).expect("json"), set_version);
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1beta1");
        assert_eq!(out["response"]["uid"], "u");
        assert_eq!(out["response"]["result"]["status"], "Success");
    }

    #[test]
    fn one_failing_object_fails_the_review_and_is_named() {
        let mut bad = ms("broken-one");
        bad["spec"]["broken"] = json!(true);
        let out = handle(&review(json!([ms("a"), bad, ms("c")])), set_version);
        let response = &out["response"];
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["result"]["status"], "Failure");
        assert!(response.get("convertedObjects").is_none(), "{out}");
        let m = message(&out);
        assert!(m.contains("ModelService ml/broken-one"), "{m}");
        assert!(m.contains("spec.broken cannot be converted"), "{m}");
        assert!(m.contains("serving.modelservice.dev/v1beta1"), "{m}");
    }

    #[test]
    fn a_panicking_converter_fails_the_review() {
        fn panics(_: Value, _: &str) -> Result<Value, String> {
            panic!("boom")
        }
        let out = handle(&review(json!([ms("a")])), panics);
        assert_eq!(out["response"]["result"]["status"], "Failure");
        assert!(message(&out).contains("ModelService ml/a"), "{out}");
        assert!(message(&out).contains("panicked"), "{out}");
    }

    #[test]
    fn a_nameless_failing_object_is_named_by_position() {
        let out = handle(&review(json!([ms("a"), 7])), set_version);
        assert_eq!(out["response"]["result"]["status"], "Failure");
        assert!(message(&out).contains("object #1"), "{}", message(&out));
    }

    #[test]
    fn malformed_requests_fail_with_a_message_and_never_panic() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not json".to_vec(), "not a JSON ConversionReview"),
            (Vec::new(), "not a JSON ConversionReview"),
            (b"[1,2]".to_vec(), "has no request"),
            (br#"{"kind":"ConversionReview"}"#.to_vec(), "has no request"),
            (br#"{"request":"x"}"#.to_vec(), "has no request"),
            (
                br#"{"request":{"desiredAPIVersion":"v"}}"#.to_vec(),
                "no uid",
            ),
            (br#"{"request":{"uid":""}}"#.to_vec(), "no uid"),
            (
                br#"{"request":{"uid":"u","objects":[]}}"#.to_vec(),
                "no desiredAPIVersion",
            ),
            (
                br#"{"request":{"uid":"u","desiredAPIVersion":"v","objects":{}}}"#.to_vec(),
                "not a list",
            ),
        ];
        for (body, needle) in cases {
            let out = handle(&body, set_version);
            assert_eq!(out["kind"], "ConversionReview");
            assert_eq!(
                out["response"]["result"]["status"], "Failure",
                "{needle}: {out}"
            );
            assert!(out["response"].get("convertedObjects").is_none());
            assert!(message(&out).contains(needle), "{needle}: {out}");
        }
        // The uid is kept whenever the request had one.
        let out = handle(br#"{"request":{"uid":"u9"}}"#, set_version);
        assert_eq!(out["response"]["uid"], "u9");
        assert_eq!(out["apiVersion"], DEFAULT_API_VERSION);
    }
}
