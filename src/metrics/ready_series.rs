//! `modelservice_ready{namespace,name}`, drawn at scrape time from the one
//! table of what each ModelService's Ready condition says.
//!
//! The aggregate gauges need that table anyway (to move one object from its
//! old reason to its new one). A gauge vector beside it kept a second copy
//! per ModelService, with its own label strings and descriptor: about
//! 270 bytes each, 2.7 MB at 10,000 (BENCHMARKS.md, "Where the 10,000
//! ModelServices' memory goes"). A scrape builds the same series either way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// namespace, name.
pub type Key = (String, String);
/// Ready, and the Ready condition's reason.
pub type State = (bool, String);

/// Every ModelService's state, shared by the metrics and this collector.
#[derive(Clone, Debug, Default)]
pub struct States(Arc<Mutex<HashMap<Key, State>>>);

impl States {
    /// The table, locked. The aggregate gauges change under this lock too:
    /// two statuses of one object tallied at once would otherwise move its
    /// count in the wrong order, and drop a reason's series while an
    /// increment of it was still to come.
    pub fn lock(&self) -> Option<MutexGuard<'_, HashMap<Key, State>>> {
        self.0.lock().ok()
    }
}

/// The per-model series, as a collector of the registry.
pub struct ReadySeries {
    desc: Desc,
    states: States,
}

const NAME: &str = "modelservice_ready";
const HELP: &str = "1 when the ModelService is Ready, else 0.";

impl ReadySeries {
    pub fn new(states: States) -> Result<Self, prometheus::Error> {
        let labels = vec!["namespace".to_string(), "name".to_string()];
        let desc = Desc::new(NAME.into(), HELP.into(), labels, HashMap::new())?;
        Ok(Self { desc, states })
    }
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut pair = LabelPair::default();
    pair.set_name(name.to_string());
    pair.set_value(value.to_string());
    pair
}

impl Collector for ReadySeries {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(states) = self.states.lock() else {
            return Vec::new();
        };
        let mut rows: Vec<(&Key, bool)> =
            states.iter().map(|(k, (ready, _))| (k, *ready)).collect();
        // Sorted, so that two scrapes list the series in the same order.
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let metrics = rows
            .into_iter()
            .map(|((namespace, name), ready)| {
                let mut gauge = Gauge::default();
                gauge.set_value(if ready { 1.0 } else { 0.0 });
                let mut m = Metric::default();
                // In the order of the label names, as the text format has them.
                m.set_label(vec![label("name", name), label("namespace", namespace)]);
                m.set_gauge(gauge);
                m
            })
            .collect();
        let mut family = MetricFamily::default();
        family.set_name(NAME.into());
        family.set_help(HELP.into());
        family.set_field_type(MetricType::GAUGE);
        family.set_metric(metrics);
        vec![family]
    }
}
