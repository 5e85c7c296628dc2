//! The watch caches, and what a relist tells the rest of the operator.
//!
//! kube's reflector swaps a relist's objects in whole, when the list ends
//! (`InitDone`). Two things follow from that, and this wrapper handles both.
//!
//! **A listed object is announced once the cache holds it.** The watcher
//! hands each listed object on (`InitApply`) as its page arrives, but the
//! cache still holds what it held before the relist until the last page is
//! in. kube's `Controller` reads the object a reconcile gets from the cache
//! when the reconcile starts, so a ModelService changed while its watch was
//! away (an apiserver or etcd restart, a 410 after a compaction) was
//! reconciled as it was before the change, and nothing started another
//! reconcile once the cache had the new version: the change was lost until
//! the resync. One created meanwhile was not in the cache at all, and its
//! reconcile was dropped as "object not found". The same held for a child
//! changed behind our back. Lists come in pages (`--list-page-size`, 100),
//! so past a page's worth of objects the window is a whole round trip per
//! page (found by the outage scenario with every watch paged). So the listed objects
//! are held back and follow the swap, read from the cache itself, before
//! the `InitDone` that closes them; the pod index and the freshness marks
//! downstream see the same list, in the same order, only later. client-go's
//! informers do the same: `Replace` fills the store, then tells the
//! handlers.
//!
//! **An object the relist no longer lists was deleted.** It is simply
//! absent from the new list, and no event says so. A child deleted then
//! started no reconcile of its ModelService, and stayed missing until the
//! resync, five minutes later (found by the outage scenario: a Deployment
//! deleted as the server came back). client-go's informers report such an
//! object as a deletion (`DeletedFinalStateUnknown`), and so does this: after
//! a relist, every object the cache held that the relist did not list
//! follows as an [`Event::Delete`], which the triggers, the pod index and the
//! ModelService memory all take like any other.
//!
//! Such a deletion carries no resourceVersion. The one the cache last saw is
//! not the deletion's, and would be read as something it is not: as our own
//! write coming back (`controller::echoes`), which starts no reconcile.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};

type Item<K> = Result<Event<K>, watcher::Error>;

/// `stream` reflected into `writer`, as kube's `reflect` does, except that a
/// relist's objects follow the swap into the cache, and the objects it
/// dropped follow its `InitDone` as deletions (see the module doc).
pub fn reflect<K, S>(stream: S, mut writer: Writer<K>) -> impl Stream<Item = Item<K>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Item<K>> + Send,
{
    let reader = writer.as_reader();
    stream.flat_map(move |item| {
        let out: Box<dyn Iterator<Item = Item<K>> + Send> = match item {
            Ok(event @ Event::InitApply(_)) => {
                writer.apply_watcher_event(&event);
                Box::new(std::iter::empty())
            }
            Ok(Event::InitDone) => {
                let before = reader.state();
                writer.apply_watcher_event(&Event::InitDone);
                let vanished = missing_from(before, &reader);
                let listed = reader.state().into_iter();
                Box::new(
                    listed
                        .map(|o| Ok(Event::InitApply((*o).clone())))
                        .chain(std::iter::once(Ok(Event::InitDone)))
                        .chain(vanished.into_iter().map(|o| Ok(Event::Delete(o)))),
                )
            }
            item => {
                if let Ok(event) = &item {
                    writer.apply_watcher_event(event);
                }
                Box::new(std::iter::once(item))
            }
        };
        futures::stream::iter(out)
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

    /// The names of `events`, each run of listed objects sorted (they come
    /// out of the cache, in no order).
    fn in_order(events: &[Event<ConfigMap>]) -> Vec<String> {
        let mut out = names(events);
        let mut i = 0;
        while i < out.len() {
            let run = out[i..]
                .iter()
                .take_while(|n| n.starts_with("list "))
                .count();
            out[i..i + run].sort();
            i += run.max(1);
        }
        out
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
            in_order(first),
            ["init", "list gone", "list kept", "done", "apply late"],
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

    /// The bug: a relist's objects were handed on page by page while the
    /// cache still held the versions from before it, and a reconcile they
    /// started read those.
    #[tokio::test]
    async fn a_listed_object_is_handed_on_only_once_the_cache_holds_it() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut out = Box::pin(reflect(rx, writer));
        let send = |e: Event<ConfigMap>| tx.unbounded_send(Ok(e)).unwrap_or_default();
        for e in [
            Event::Init,
            Event::InitApply(cm("changed", "1")),
            Event::InitDone,
        ] {
            send(e);
        }
        let first: Vec<_> = (&mut out)
            .take(3)
            .filter_map(|e| async { e.ok() })
            .collect()
            .await;
        assert_eq!(names(&first), ["init", "list changed", "done"]);

        // The watch was away; the relist's first page holds the change and
        // a new object, and the rest of the list has not come yet.
        send(Event::Init);
        send(Event::InitApply(cm("changed", "5")));
        send(Event::InitApply(cm("new", "6")));
        let next = out.next().await;
        assert!(matches!(next, Some(Ok(Event::Init))));
        let early = futures::poll!(out.next());
        assert!(
            early.is_pending(),
            "nothing of the list is handed on before it ends"
        );

        send(Event::InitApply(cm("later", "7")));
        send(Event::InitDone);
        let listed: Vec<_> = (&mut out)
            .take(4)
            .filter_map(|e| async { e.ok() })
            .collect()
            .await;
        assert_eq!(
            in_order(&listed),
            ["list changed", "list later", "list new", "done"]
        );
        for e in &listed {
            if let Event::InitApply(o) = e {
                let cached = store.get(&ObjectRef::from_obj(o));
                assert_eq!(
                    cached.and_then(|c| c.resource_version()),
                    o.resource_version(),
                    "{} is handed on as the cache holds it",
                    o.name_any()
                );
            }
        }
    }
}
