//! What the benchmark reads off the operator: its process statistics from
//! /proc, and its own Prometheus metrics (request counts by verb and
//! resource, the reconcile histogram).

use std::collections::BTreeMap;

/// Memory of a process, in KiB.
pub struct Memory {
    pub rss: u64,
    pub peak: u64,
    /// Heap, stacks and other private memory.
    pub anon: u64,
    /// Pages of the binary and shared libraries.
    pub file: u64,
}

pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

/// CPU seconds (user + system) a process ("self" or a pid) has used so far.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime, fields 14 and 15 of stat, in USER_HZ (100 on Linux).
    (ticks(11) + ticks(12)) / 100.0
}

/// The value of one label in a Prometheus sample line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(&format!("{name}=\"")).nth(1)?.split('"').next()
}

fn value(line: &str) -> Option<f64> {
    line.split_whitespace().last()?.parse().ok()
}

/// The sum of every sample of a metric.
pub fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(value)
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0, printed "-0"
}

/// Requests by "verb resource", from `modelservice_api_requests_total`.
pub type Requests = BTreeMap<String, f64>;

pub fn requests(metrics: &str) -> Requests {
    let mut by = Requests::new();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("modelservice_api_requests_total{"))
    {
        if let (Some(verb), Some(res), Some(v)) = (label(l, "verb"), label(l, "resource"), value(l))
        {
            *by.entry(format!("{verb} {res}")).or_default() += v;
        }
    }
    by
}

/// `later - earlier`, dropping what did not change.
pub fn since(later: &Requests, earlier: &Requests) -> Requests {
    later
        .iter()
        .map(|(k, v)| (k.clone(), v - earlier.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

pub fn writes(r: &Requests) -> f64 {
    r.iter()
        .filter(|(k, _)| WRITE_VERBS.iter().any(|w| k.starts_with(&format!("{w} "))))
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0
}

/// "patch deployments 1.00; ..." per ModelService; watches are long-lived
/// streams, not per-object work, so they are left out.
pub fn per_ms(r: &Requests, n: usize) -> String {
    r.iter()
        .filter(|(k, _)| !k.starts_with("watch "))
        .map(|(k, v)| format!("{k} {:.2}", v / n as f64))
        .collect::<Vec<_>>()
        .join("; ")
}

/// p-quantile from a Prometheus histogram's cumulative buckets,
/// interpolated within the bucket.
pub fn quantile(metrics: &str, histogram: &str, q: f64) -> f64 {
    let prefix = format!("{histogram}_bucket");
    let mut buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = label(l, "le")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value(l)?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    if total == 0.0 {
        return 0.0;
    }
    let target = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in buckets {
        if c >= target {
            if le.is_infinite() {
                return prev.0;
            }
            let frac = if c > prev.1 {
                (target - prev.1) / (c - prev.1)
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, c);
    }
    prev.0
}

/// Requests as the API server counted them in `apiserver_request_total`,
/// keyed like the operator's metric, with the group added (the API server's
/// label; the operator's metric has none, see [`group_of`]): "patch
/// deployments.apps", "create events.events.k8s.io", "list pods".
///
/// The API server's verb label is not the audit verb: POST is "create",
/// PUT "update", and server-side apply is APPLY. APPLY and PATCH both count
/// as "patch", as the operator's metric counts them; `verbs` keeps the API
/// server's own verbs of each row. Non-resource requests are "get <path>
/// (non-resource)"; the API server does not count its own `/metrics` there.
#[derive(Clone, Default)]
pub struct ApiCounts {
    pub rows: Requests,
    pub verbs: BTreeMap<String, BTreeMap<String, f64>>,
    /// In a difference: a counter went down, so the API server restarted
    /// in between and the difference means nothing.
    pub reset: bool,
}

/// Parses the API server's `/metrics`.
pub fn apiserver_requests(metrics: &str) -> ApiCounts {
    let mut out = ApiCounts::default();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let (Some(verb), Some(v)) = (label(l, "verb"), value(l)) else {
            continue;
        };
        let group = label(l, "group").unwrap_or("");
        let resource = label(l, "resource").unwrap_or("");
        let sub = label(l, "subresource").unwrap_or("");
        let lower = match verb {
            "APPLY" | "PATCH" => "patch".to_string(),
            "POST" => "create".to_string(),
            "PUT" => "update".to_string(),
            other => other.to_ascii_lowercase(),
        };
        let (lower, resource) = if resource.is_empty() {
            // Non-resource: its path is in `subresource`.
            (lower, non_resource(sub))
        } else if sub.is_empty() {
            (lower, resource.to_string())
        } else {
            (lower, format!("{resource}/{sub}"))
        };
        let key = key(&lower, group, &resource);
        *out.rows.entry(key.clone()).or_default() += v;
        *out.verbs
            .entry(key)
            .or_default()
            .entry(verb.to_string())
            .or_default() += v;
    }
    out
}

/// The row of a non-resource request to `path`.
fn non_resource(path: &str) -> String {
    format!("/{} (non-resource)", path.trim_start_matches('/'))
}

pub fn api_since(later: &ApiCounts, earlier: &ApiCounts) -> ApiCounts {
    let reset = earlier.verbs.iter().any(|(k, by)| {
        by.iter().any(|(v, n)| {
            later
                .verbs
                .get(k)
                .and_then(|l| l.get(v))
                .is_none_or(|l| l < n)
        })
    });
    let verbs = later
        .verbs
        .iter()
        .map(|(k, by)| {
            let before = earlier.verbs.get(k);
            let d: BTreeMap<String, f64> = by
                .iter()
                .map(|(v, n)| {
                    let was = before.and_then(|b| b.get(v)).copied().unwrap_or(0.0);
                    (v.clone(), n - was)
                })
                .filter(|(_, n)| *n > 0.0)
                .collect();
            (k.clone(), d)
        })
        .collect();
    ApiCounts {
        rows: since(&later.rows, &earlier.rows),
        verbs,
        reset,
    }
}

/// "verb resource[/sub][.group]", the row key of the request tables.
fn key(verb: &str, group: &str, resource: &str) -> String {
    let (plural, sub) = match resource.split_once('/') {
        Some((p, s)) => (p, format!("/{s}")),
        None => (resource, String::new()),
    };
    if group.is_empty() {
        format!("{verb} {plural}{sub}")
    } else {
        format!("{verb} {plural}.{group}{sub}")
    }
}

/// The API group of a resource the operator or the harness requests. Their
/// metric (`modelservice_api_requests_total`) names no group; these are the
/// groups the operator's code uses (its Events go through kube's
/// `Recorder`, which writes `events.k8s.io/v1`). An unknown resource is
/// left in the core group, so it shows up as a mismatch rather than vanish.
pub fn group_of(resource: &str) -> &'static str {
    match resource.split('/').next().unwrap_or("") {
        "deployments" | "replicasets" | "statefulsets" | "daemonsets" | "controllerrevisions" => {
            "apps"
        }
        "modelservices" => "serving.modelservice.dev",
        "events" => "events.k8s.io",
        "leases" => "coordination.k8s.io",
        "horizontalpodautoscalers" => "autoscaling",
        "poddisruptionbudgets" => "policy",
        "customresourcedefinitions" => "apiextensions.k8s.io",
        "endpointslices" => "discovery.k8s.io",
        "networkpolicies" | "ingresses" => "networking.k8s.io",
        "httproutes" | "gateways" | "grpcroutes" => "gateway.networking.k8s.io",
        "scaledobjects" | "triggerauthentications" => "keda.sh",
        "leaderworkersets" => "leaderworkerset.x-k8s.io",
        "servicemonitors" | "podmonitors" => "monitoring.coreos.com",
        "certificates" | "issuers" => "cert-manager.io",
        "selfsubjectaccessreviews" | "subjectaccessreviews" | "selfsubjectrulesreviews" => {
            "authorization.k8s.io"
        }
        _ => "",
    }
}

/// The operator's (or the harness's) "verb resource" counts, keyed as the
/// API server's rows.
/// `non_resource_path` names the row of its non-resource requests ("get
/// other" in the metric, which keeps no path).
pub fn keyed(r: &Requests, non_resource_path: &str) -> Requests {
    let mut out = Requests::new();
    for (k, v) in r {
        let (verb, resource) = k.split_once(' ').unwrap_or((k, ""));
        if resource == "other" {
            *out.entry(format!("{verb} {}", non_resource(non_resource_path)))
                .or_default() += v;
            continue;
        }
        *out.entry(key(verb, group_of(resource), resource))
            .or_default() += v;
    }
    out
}

/// The row of the operator's non-resource requests, whose path its metric
/// does not keep.
const OPERATOR_NON_RESOURCE: &str = "api… (the operator's discovery; its metric keeps no path)";

/// The rows only the operator sends while it runs (in a run without the
/// operator: only the harness): no other client of the control plane
/// (kube-controller-manager, kube-scheduler, podsim) applies Deployments or
/// Services, patches ModelServices or lists Pods (they watch, and list only
/// when they start or their watch expires).
pub const OPERATOR_ONLY: [&str; 5] = [
    "patch deployments.apps",
    "patch services",
    "patch modelservices.serving.modelservice.dev",
    "patch modelservices.serving.modelservice.dev/status",
    "list pods",
];

/// Prints one phase's request table: per row, the API server's count, the
/// harness's own, the operator's, and the rest (other clients); then whether
/// the rows only the operator sends agree exactly. Returns true if they do.
pub fn request_table(api: &ApiCounts, harness: &Requests, operator: &Requests, n: usize) -> bool {
    // The harness's only non-resource request is the API server's
    // /metrics; the operator's are discovery (/api, /apis/...).
    let (harness, operator) = (
        keyed(harness, "metrics"),
        keyed(operator, OPERATOR_NON_RESOURCE),
    );
    if api.reset {
        println!();
        println!(
            "The API server restarted during this phase (its counters went down): no request table, no agreement check."
        );
        return true;
    }
    let mut keys: Vec<&String> = api.rows.keys().chain(harness.keys()).collect();
    keys.extend(operator.keys());
    keys.sort();
    keys.dedup();
    println!();
    println!(
        "| request (verb resource.group) | apiserver_request_total | harness | operator | others = apiserver − harness − operator | operator per ModelService |"
    );
    println!("|---|---|---|---|---|---|");
    let get = |m: &Requests, k: &str| m.get(k).copied().unwrap_or(0.0);
    for k in &keys {
        let a = get(&api.rows, k);
        let h = get(&harness, k);
        let o = get(&operator, k);
        let verbs = api
            .verbs
            .get(*k)
            // Only where the API server's verb says more than the row:
            // server-side apply, or two verbs in one row.
            .filter(|v| v.len() > 1 || v.contains_key("APPLY"))
            .map(|v| {
                let parts: Vec<String> =
                    v.iter().map(|(verb, n)| format!("{verb} {n:.0}")).collect();
                format!(" ({})", parts.join(", "))
            })
            .unwrap_or_default();
        let per = if k.starts_with("watch ") {
            "– (long-lived)".to_string()
        } else if o > 0.0 {
            format!("{:.2}", o / n as f64)
        } else {
            String::new()
        };
        println!(
            "| {k} | {a:.0}{verbs} | {h:.0} | {o:.0} | {:.0} | {per} |",
            a - h - o
        );
    }
    let all = agrees_keyed(api, &harness, &operator);
    let checks: Vec<String> = OPERATOR_ONLY
        .iter()
        .map(|k| {
            let (a, h, o) = (get(&api.rows, k), get(&harness, k), get(&operator, k));
            format!(
                "{k} {:.0} {} {o:.0}",
                a - h,
                if a - h == o { "=" } else { "≠" }
            )
        })
        .collect();
    if get(&harness, &format!("get {}", non_resource("metrics"))) > 0.0 {
        println!();
        println!(
            "(The API server does not count the requests for its own /metrics in apiserver_request_total: the harness's scrapes show as negative others.)"
        );
    }
    println!();
    println!(
        "Agreement on the rows only the operator sends (apiserver − harness vs operator): {} — {}",
        if all { "exact" } else { "DIFFERS" },
        checks.join("; ")
    );
    let shared: Vec<String> = operator
        .iter()
        .filter(|(k, _)| !OPERATOR_ONLY.contains(&k.as_str()) && !k.starts_with("watch "))
        .map(|(k, o)| {
            let d = get(&api.rows, k) - get(&harness, k);
            format!(
                "{k}: apiserver − harness {d:.0}, operator {o:.0}, others {:.0}",
                d - o
            )
        })
        .collect();
    if !shared.is_empty() {
        println!(
            "Rows other clients may send too (kube-scheduler writes events.k8s.io Events), not checked: {}",
            shared.join("; ")
        );
    }
    all
}

/// Whether apiserver − harness = operator on every operator-only row.
pub fn agrees(api: &ApiCounts, harness: &Requests, operator: &Requests) -> bool {
    agrees_keyed(
        api,
        &keyed(harness, "metrics"),
        &keyed(operator, OPERATOR_NON_RESOURCE),
    )
}

fn agrees_keyed(api: &ApiCounts, harness: &Requests, operator: &Requests) -> bool {
    if api.reset {
        return true;
    }
    let get = |m: &Requests, k: &str| m.get(k).copied().unwrap_or(0.0);
    OPERATOR_ONLY
        .iter()
        .all(|k| get(&api.rows, k) - get(harness, k) == get(operator, k))
}
