//! A ModelService as the watch hands it over: decoded, or why it could not be.
//!
//! kube's `DeserializeGuard` gives the same guarantee (one unreadable object
//! never breaks the watch for the others), but gets there by buffering each
//! object into a generic value tree and cloning that tree before decoding it. Every ModelService event goes through it, and the
//! profile put it at a tenth of the operator's CPU while converging. This
//! guard keeps the object's JSON text instead (one copy, no tree), decodes
//! it, and only when that fails decodes the metadata from the same text.
//! The error is kube's own `InvalidObject`, so handling stays the same; its
//! text is serde_json's wording (``missing field `image` ``) where
//! `DeserializeGuard` had serde_value's (`Missing field image`).
//!
//! Keeping the text needs serde_json reading it straight from the wire,
//! which is what kube's client does, and the watch event's `type` before its
//! `object`, which is the order the API server writes them in (the fields of
//! Go's `metav1.WatchEvent`); `lean` relies on the same.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::core::error_boundary::InvalidObject;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// An object of kind `K`, or the reason it could not be read with its metadata.
#[derive(Clone, Debug)]
pub struct Guarded<K>(pub Result<K, InvalidObject>);

impl<'de, K> Deserialize<'de> for Guarded<K>
where
    K: DeserializeOwned + Resource,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        match serde_json::from_str::<K>(raw.get()) {
            Ok(k) => Ok(Guarded(Ok(k))),
            Err(e) => {
                let partial = serde_json::from_str::<PartialObjectMeta<K>>(raw.get())
                    .map_err(D::Error::custom)?;
                Ok(Guarded(Err(InvalidObject {
                    error: without_position(&e),
                    metadata: partial.metadata,
                })))
            }
        }
    }
}

/// The error without serde_json's " at line 1 column 345": a column in a
/// one-line wire format means nothing to the person who reads the status.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if e.line() == 0 {
        return text;
    }
    match text.rsplit_once(" at line ") {
        Some((message, _)) => message.to_string(),
        None => text,
    }
}

impl<K: Resource> Resource for Guarded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &K::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &K::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &K::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &K::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(k) => k.meta(),
            Err(bad) => &bad.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(k) => k.meta_mut(),
            Err(bad) => &mut bad.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Guarded;
    use crate::api::ModelService;
    use kube::Resource;
    use kube::core::WatchEvent;
    use serde_json::json;

    fn object(spec: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "serving.modelservice.dev/v1", "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ns", "generation": 2, "finalizers": ["f"]},
            "spec": spec
        })
    }

    #[test]
    fn a_valid_object_decodes() {
        let text =
            object(json!({"model": {"name": "llama"}, "runtime": {"image": "vllm:1"}})).to_string();
        let g: Guarded<ModelService> = serde_json::from_str(&text).unwrap();
        let ms = g.0.as_ref().unwrap();
        assert_eq!(ms.spec.runtime.image, "vllm:1");
        assert_eq!(g.meta().name.as_deref(), Some("m"));
    }

    #[test]
    fn an_invalid_object_keeps_its_metadata_and_a_readable_error() {
        let text = object(json!({"model": {"name": "llama"}, "runtime": {"image": "vllm:1"}, "resources": {"gpus": "two"}})).to_string();
        let mut g: Guarded<ModelService> = serde_json::from_str(&text).unwrap();
        let bad = g.0.as_ref().unwrap_err();
        assert!(bad.error.contains("invalid type"), "{}", bad.error);
        assert!(!bad.error.contains("column"), "{}", bad.error);
        assert_eq!(bad.metadata.generation, Some(2));
        assert_eq!(g.meta().finalizers.as_deref(), Some(&["f".to_string()][..]));
        g.meta_mut().finalizers = None;
        assert_eq!(g.meta().finalizers, None);
    }

    #[test]
    fn decodes_inside_a_watch_event_as_the_api_server_writes_it() {
        // Go writes the fields of metav1.WatchEvent in order: type, then object.
        let obj = object(json!({"model": {"name": "x"}, "runtime": {"image": "i"}}));
        let line = format!(r#"{{"type":"MODIFIED","object":{obj}}}"#);
        let ev: WatchEvent<Guarded<ModelService>> = serde_json::from_str(&line).unwrap();
        assert!(matches!(ev, WatchEvent::Modified(Guarded(Ok(_)))));
        // With the object first, serde would have to buffer it, and the text
        // is gone: that is the one input this guard does not take.
        let reordered = format!(r#"{{"object":{obj},"type":"MODIFIED"}}"#);
        assert!(serde_json::from_str::<WatchEvent<Guarded<ModelService>>>(&reordered).is_err());
    }

    #[test]
    fn not_even_metadata_is_an_error() {
        let r = serde_json::from_str::<Guarded<ModelService>>(r#"{"metadata": 5}"#);
        assert!(r.is_err());
    }
}
