//! Stored change events: what watches replay and stream.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// Watch event types for stored changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object, in resourceVersion order within its type.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change (for DELETED: its last state, carrying
    /// the deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change, so selector-filtered watches can tell
    /// an object that stopped matching (sent as DELETED) from one that
    /// started matching (sent as ADDED).
    pub prev: Option<Arc<Value>>,
    line: OnceLock<Bytes>,
    /// The object at other versions of the type, converted once for all
    /// the watchers of that version (a real server keeps a watch cache per
    /// served version of a custom resource).
    views: Mutex<Vec<Arc<View>>>,
}

/// An event's object at one version.
#[derive(Debug)]
pub struct View {
    pub api_version: String,
    pub object: Arc<Value>,
    line: OnceLock<Bytes>,
}

impl View {
    /// The event line with this view of the object.
    pub fn line(&self, kind: EventType) -> Bytes {
        self.line
            .get_or_init(|| watch_line(kind.as_str(), &self.object))
            .clone()
    }
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

/// One newline-terminated watch event line.
pub fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut buf = serde_json::to_vec(&Line { kind, object }).unwrap_or_default();
    buf.push(b'\n');
    Bytes::from(buf)
}

impl Event {
    pub fn new(rv: u64, kind: EventType, object: Arc<Value>, prev: Option<Arc<Value>>) -> Self {
        Event {
            rv,
            kind,
            object,
            prev,
            line: OnceLock::new(),
            views: Mutex::new(Vec::new()),
        }
    }

    /// The object at `api_version`, converted by `convert` the first time a
    /// watcher of that version asks (failures are not kept).
    pub fn view<E>(
        &self,
        api_version: &str,
        convert: impl FnOnce(&Arc<Value>) -> Result<Arc<Value>, E>,
    ) -> Result<Arc<View>, E> {
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = views.iter().find(|v| v.api_version == api_version) {
            return Ok(v.clone());
        }
        let view = Arc::new(View {
            api_version: api_version.to_string(),
            object: convert(&self.object)?,
            line: OnceLock::new(),
        });
        views.push(view.clone());
        Ok(view)
    }

    /// The event as sent to an unfiltered watcher, serialized once and
    /// shared by all watchers.
    pub fn line(&self) -> Bytes {
        self.line
            .get_or_init(|| watch_line(self.kind.as_str(), &self.object))
            .clone()
    }
}

/// A change anywhere in the store, for in-process observers such as a
/// workload simulator (see [`crate::FakeApiServer::on_change`]).
#[derive(Clone, Debug)]
pub struct ChangeEvent {
    pub event_type: EventType,
    pub group: String,
    pub plural: String,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    pub resource_version: u64,
    pub object: Arc<Value>,
}
