//! The watch caches, and the deletions a relist hides.
//!
//! kube's reflector swaps a relist's objects in whole: an object deleted
//! while its watch was away (an apiserver or etcd restart, a 410 after a
//! compaction) is simply absent from the new list, and no event says so. A
//! child deleted then started no reconcile of its ModelService, and stayed
//! missing until the resync, five minutes later (found by the outage
//! scenario: a Deployment deleted as the server came back). client-go's
//! informers report such an object as a deletion (`DeletedFinalStateUnknown`),
//! and so does this: after a relist, every object the cache held that the
//! relist did not list follows as an [`Event::Delete`], which the triggers,
//! the pod index and the ModelService memory all take like any other.
//!
//! Such a deletion carries no resourceVersion. The one the cache last saw is
//! not the deletion's, and would be read as something it is not: as our own
//! write coming back (`controller::echoes`), which starts no reconcile.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};

/// `stream` reflected into `writer`, as kube's `reflect` does, with the
/// objects each relist dropped following its `InitDone` as deletions.
pub fn reflect<K, S>(
    stream: S,
    mut writer: Writer<K>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let reader = writer.as_reader();
    stream.flat_map(move |item| {
        let mut vanished = Vec::new();
        if let Ok(event) = &item {
            let before = matches!(event, Event::InitDone).then(|| reader.state());
            writer.apply_watcher_event(event);
            if let Some(before) = before {
                vanished = missing_from(before, &reader);
            }
        }
        futures::stream::iter(
            std::iter::once(item).chain(vanished.into_iter().map(|o| Ok(Event::Delete(o)))),
        )
    })
}

/// The objects of `before` that `now` no longer holds, without their
/// resourceVersion (see the module doc).
fn missing_from<K>(before: Vec<Arc<K>>, now: &Store<K>) -> Vec<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    before
        .into_iter()
        .filter(|o| now.get(&ObjectRef::from_obj(&**o)).is_none())
        .map(|o| {
            let mut o = (*o).clone();
            o.meta_mut().resource_version = None;
            o
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::runtime::reflector;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(rv.into());
        c
    }

    fn names(events: &[Event<ConfigMap>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Apply(o) => format!("apply {}", o.name_any()),
                Event::Delete(o) => format!(
                    "delete {} rv={}",
                    o.name_any(),
                    o.resource_version().unwrap_or_default()
                ),
                Event::Init => "init".into(),
                Event::InitApply(o) => format!("list {}", o.name_any()),
                Event::InitDone => "done".into(),
            })
            .collect()
    }

    #[tokio::test]
    async fn an_object_a_relist_no_longer_lists_follows_as_a_deletion() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("kept", "1"))),
            Ok(Event::InitApply(cm("gone", "2"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("late", "3"))),
            Err(watcher::Error::NoResourceVersion),
            // The relist after an outage: "gone" and "late" were deleted.
            Ok(Event::Init),
            Ok(Event::InitApply(cm("kept", "1"))),
            Ok(Event::InitDone),
        ];
        let out: Vec<_> = reflect(futures::stream::iter(events), writer)
            .collect()
            .await;
        assert!(out[5].is_err(), "errors pass through");
        let out: Vec<_> = out.into_iter().filter_map(Result::ok).collect();
        let (first, relist) = out.split_at(5);
        assert_eq!(
            names(first),
            ["init", "list kept", "list gone", "done", "apply late"],
            "the first list vanishes nothing"
        );
        let mut relist = names(relist);
        relist[3..].sort();
        assert_eq!(
            relist,
            [
                "init",
                "list kept",
                "done",
                "delete gone rv=",
                "delete late rv="
            ]
        );
        let mut cached: Vec<_> = store.state().iter().map(|o| o.name_any()).collect();
        cached.sort();
        assert_eq!(cached, ["kept"]);
    }
}
