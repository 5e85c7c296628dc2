//! Small accessors over `metadata` of objects kept as `serde_json::Value`.
//!
//! Objects are stored untyped so any resource (including CRDs the fake does
//! not know the schema of) works the same way; these helpers keep the many
//! `obj["metadata"]["..."]` look-ups in one readable place.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

/// `metadata` of an object, if present.
pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata` of an object, created when missing. `obj` must be an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("just made an object");
    let entry = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("just made an object")
}

/// A string field of `metadata`, `""` when absent.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

pub fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion")
}

pub fn is_deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|v| !v.is_null()))
}

/// `metadata.labels` as a map (absent → None).
pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let m = meta_mut(obj);
    if finalizers.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), Value::from(finalizers.to_vec()));
    }
}

/// The uids of `metadata.ownerReferences`.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub fn generation(obj: &Value) -> Option<i64> {
    meta(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
}

/// Follows a dotted path (`spec.replicas`) through nested maps.
pub fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(obj, |cur, seg| cur.as_object().and_then(|m| m.get(seg)))
}

/// Sets a dotted path, creating intermediate maps (replacing non-maps).
pub fn set_path(obj: &mut Value, path: &str, value: Value) {
    let mut cur = obj;
    let segs: Vec<&str> = path.split('.').collect();
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let map = cur.as_object_mut().expect("just made an object");
        if i + 1 == segs.len() {
            map.insert(seg.to_string(), value);
            return;
        }
        cur = map
            .entry(seg.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Current time as RFC 3339 UTC with second precision, as `metav1.Time` is.
pub fn now_rfc3339() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 64 random-ish bits: a per-process random hasher over a counter.
fn random_u64() -> u64 {
    thread_local! {
        static STATE: RandomState = RandomState::new();
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    STATE.with(|s| s.hash_one(n))
}

/// A random version-4 UUID string, like the uids the real server assigns.
pub fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    let time_hi = ((a >> 16) & 0x0fff) | 0x4000;
    let clock = ((b >> 48) & 0x3fff) | 0x8000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        a & 0xffff,
        time_hi,
        clock,
        b & 0xffff_ffff_ffff
    )
}

/// The 5-character suffix `generateName` appends (same alphabet as the
/// real server: no vowels, no confusable digits).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uid_looks_like_uuid_v4() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(new_uid(), u);
    }

    #[test]
    fn time_has_second_precision() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }

    #[test]
    fn paths() {
        let mut v = json!({"spec": {"replicas": 2}});
        assert_eq!(get_path(&v, "spec.replicas"), Some(&json!(2)));
        set_path(&mut v, "status.replicas", json!(3));
        assert_eq!(v["status"]["replicas"], 3);
    }
}
