//! Ownership bookkeeping for creates, updates and non-apply patches.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Views;
use super::diff::{Changes, diff_objects};
use super::managed::{self, Entry};
use crate::meta::now_rfc3339;
use crate::status::ApiError;

/// Who is writing, as recorded in `managedFields`.
#[derive(Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    /// `""`, `status` or `scale`.
    pub subresource: &'a str,
    pub views: &'a dyn Views,
}

/// Gives `writer` (operation Update) the fields that changed from `old` to
/// `new` and takes them from every other manager; removed fields lose their
/// owners. `new`'s own `managedFields` are the starting point, so a client
/// that rewrites them explicitly is honoured. When nothing changed the
/// entries are left untouched (no new timestamp, so no-op writes stay no-ops).
/// Entries recorded at another version lose what changed in that version's
/// view of the object.
pub fn track_update(old: Option<&Value>, new: &mut Value, writer: &Writer) -> Result<(), ApiError> {
    let empty = Value::Object(Default::default());
    let changes = diff_objects(old.unwrap_or(&empty), new);
    if changes.is_empty() {
        return Ok(());
    }
    let mut entries = managed::read(new);
    let mut elsewhere: BTreeMap<String, Changes> = BTreeMap::new();
    for e in entries.iter_mut() {
        let other_version =
            e.api_version != writer.api_version && writer.views.converts_to(&e.api_version);
        let seen = match old {
            Some(old) if other_version => {
                if !elsewhere.contains_key(&e.api_version) {
                    let before = writer.views.view(old, &e.api_version)?;
                    let after = writer.views.view(new, &e.api_version)?;
                    elsewhere.insert(e.api_version.clone(), diff_objects(&before, &after));
                }
                elsewhere.get(&e.api_version).unwrap_or(&changes)
            }
            _ => &changes,
        };
        for p in seen.removed.iter().chain(seen.changed.iter()) {
            e.fields.remove_subtree(p);
        }
    }
    let idx = match entries.iter().position(|e| {
        e.is(
            writer.manager,
            "Update",
            writer.api_version,
            writer.subresource,
        )
    }) {
        Some(i) => i,
        None => {
            entries.push(Entry::new(
                writer.manager,
                "Update",
                writer.api_version,
                writer.subresource,
            ));
            entries.len() - 1
        }
    };
    entries[idx].fields.extend(&changes.changed);
    entries[idx].time = now_rfc3339();
    managed::write(new, &entries);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn update_moves_ownership() {
        let w1 = Writer {
            manager: "a",
            api_version: "v1",
            subresource: "",
            views: &crate::ssa::OneVersion,
        };
        let w2 = Writer {
            manager: "b",
            api_version: "v1",
            subresource: "",
            views: &crate::ssa::OneVersion,
        };
        let mut o = json!({"metadata": {"name": "x"}, "data": {"k": "1", "j": "2"}});
        track_update(None, &mut o, &w1).expect("tracks");
        let old = o.clone();
        o["data"]["k"] = json!("changed");
        track_update(Some(&old), &mut o, &w2).expect("tracks");
        let entries = managed::read(&o);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0].fields.to_fields_v1(),
            json!({"f:data": {"f:j": {}}})
        );
        assert_eq!(
            entries[1].fields.to_fields_v1(),
            json!({"f:data": {"f:k": {}}})
        );
        let before = o.clone();
        track_update(Some(&before), &mut o, &w2).expect("tracks");
        assert_eq!(o, before, "no change, no new timestamps");
    }
}
