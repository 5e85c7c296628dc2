//! The queue between reconciles and the event publishers: bounded in what
//! it holds in order, unbounded in what it remembers to say.
//!
//! A burst (ten thousand models all waiting for GPUs) announces faster than
//! the API server takes Events. Dropping the overflow, as client-go's
//! broadcaster does, lost announcements for good: the operator announces a
//! cause once, when it begins, never again while it lasts. Here an
//! announcement past the bound waits instead, keyed by what it is about
//! (object and reason): a second announcement of the same key while the
//! first still waits replaces it, so the overflow holds at most one entry
//! per object and reason, however long the burst. Announcements come out in
//! the order they were first made.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// What became of one announcement handed to [`Queue::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// In line, within the bound.
    Queued,
    /// Past the bound: it waits for room.
    Delayed,
    /// Past the bound, where an announcement of the same key already
    /// waited: that one is replaced by this.
    Replaced,
}

struct State<K, T> {
    /// In order, at most `bound` of them.
    line: VecDeque<T>,
    /// Keys waiting for room in `line`, in the order first announced.
    waiting: VecDeque<K>,
    /// The newest announcement of each waiting key.
    latest: HashMap<K, T>,
    /// No further pushes can come: the queue ends once empty.
    closed: bool,
}

/// A FIFO of at most `bound` items, then a waiting room of one item per key.
pub struct Queue<K, T> {
    bound: usize,
    state: Mutex<State<K, T>>,
    changed: Notify,
}

impl<K: Eq + Hash + Clone, T> Queue<K, T> {
    pub fn new(bound: usize) -> Arc<Self> {
        Arc::new(Self {
            bound: bound.max(1),
            state: Mutex::new(State {
                line: VecDeque::new(),
                waiting: VecDeque::new(),
                latest: HashMap::new(),
                closed: false,
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K, T>> {
        // A panic elsewhere while holding the lock leaves consistent data
        // (every change below is one call on one collection).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands an item on; never waits.
    pub fn push(&self, key: K, item: T) -> Pushed {
        let pushed = {
            let mut s = self.lock();
            if s.waiting.is_empty() && s.line.len() < self.bound {
                s.line.push_back(item);
                Pushed::Queued
            } else if let Some(slot) = s.latest.get_mut(&key) {
                *slot = item;
                Pushed::Replaced
            } else {
                s.waiting.push_back(key.clone());
                s.latest.insert(key, item);
                Pushed::Delayed
            }
        };
        self.changed.notify_one();
        pushed
    }

    /// No more pushes: [`Queue::next`] ends once everything is taken.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_one();
    }

    /// How many items wait, in line and past the bound.
    pub fn len(&self) -> usize {
        let s = self.lock();
        s.line.len() + s.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next item without waiting, moving the first waiting key into
    /// the room it leaves.
    fn take(&self) -> Option<T> {
        let mut s = self.lock();
        let item = s.line.pop_front();
        while s.line.len() < self.bound {
            let Some(key) = s.waiting.pop_front() else {
                break;
            };
            if let Some(next) = s.latest.remove(&key) {
                s.line.push_back(next);
            }
        }
        item.or_else(|| s.line.pop_front())
    }

    /// The next item, waiting for one; `None` once closed and empty.
    pub async fn next(&self) -> Option<T> {
        loop {
            if let Some(item) = self.take() {
                return Some(item);
            }
            if self.lock().closed {
                return None;
            }
            // `notify_one` keeps a permit when nobody waits, so a push
            // between the check above and this wait is not missed.
            self.changed.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &Queue<&'static str, String>) -> Vec<String> {
        std::iter::from_fn(|| q.take()).collect()
    }

    #[test]
    fn within_the_bound_everything_is_kept_in_order_even_repeats() {
        let q = Queue::new(4);
        assert_eq!(q.push("a", "a1".to_string()), Pushed::Queued);
        assert_eq!(q.push("a", "a2".to_string()), Pushed::Queued);
        assert_eq!(q.push("b", "b1".to_string()), Pushed::Queued);
        assert_eq!(drain(&q), ["a1", "a2", "b1"]);
    }

    #[test]
    fn past_the_bound_nothing_is_lost_and_each_key_waits_once() {
        let q = Queue::new(2);
        let keys = ["a", "b", "c", "d", "e", "f", "g"];
        for k in keys {
            q.push(k, format!("{k}1"));
        }
        // c and e are announced again while they wait: the newer word wins,
        // in the place the first one took.
        assert_eq!(q.push("c", "c2".to_string()), Pushed::Replaced);
        assert_eq!(q.push("e", "e2".to_string()), Pushed::Replaced);
        // A key already in line (a) waits once more past the bound: what
        // is in line is on its way, and the new word must follow it.
        assert_eq!(q.push("a", "a2".to_string()), Pushed::Delayed);
        assert_eq!(q.len(), 8);
        assert_eq!(drain(&q), ["a1", "b1", "c2", "d1", "e2", "f1", "g1", "a2"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_push_while_some_wait_goes_behind_them_even_with_room_in_line() {
        let q = Queue::new(1);
        q.push("a", "a".to_string());
        q.push("b", "b".to_string());
        q.push("c", "c".to_string());
        assert_eq!(q.take().as_deref(), Some("a"));
        // Room now, but b and c were first: d must not overtake them.
        assert_eq!(q.push("d", "d".to_string()), Pushed::Delayed);
        assert_eq!(drain(&q), ["b", "c", "d"]);
    }

    #[tokio::test]
    async fn the_consumer_wakes_for_a_push_and_ends_after_close_once_drained() {
        let q: Arc<Queue<&'static str, u32>> = Queue::new(1);
        let consumer = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(i) = q.next().await {
                    got.push(i);
                }
                got
            })
        };
        tokio::task::yield_now().await;
        for (i, k) in ["a", "b", "c"].into_iter().enumerate() {
            q.push(k, i as u32);
        }
        q.close();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), consumer).await;
        assert_eq!(got.ok().and_then(Result::ok), Some(vec![0, 1, 2]));
    }
}
