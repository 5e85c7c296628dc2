//! The lines the demo prints: one row per ModelService, as `kubectl get
//! modelservices -w` would show it, printed only when it changes, and cut
//! to fit a terminal.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use modelservice_operator::api::ModelService;

/// Width of the terminal the rows are cut for.
pub const WIDTH: usize = 100;

/// What a user watches of one ModelService.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// `Ready` condition: True/False and its reason.
    pub ready: String,
    pub reason: String,
    /// ready/desired replicas.
    pub replicas: String,
    /// The message of the condition that says most: Degraded when true,
    /// CanaryHealthy when false, else Progressing, else Ready.
    pub message: String,
}

fn condition<'a>(ms: &'a ModelService, type_: &str) -> Option<&'a Condition> {
    ms.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

pub fn row(ms: &ModelService) -> Row {
    let name = ms.metadata.name.clone().unwrap_or_default();
    let ready = condition(ms, "Ready");
    let status = ms.status.as_ref();
    let replicas = format!(
        "{}/{}",
        status.and_then(|s| s.ready_replicas).unwrap_or(0),
        status.and_then(|s| s.replicas).unwrap_or(0)
    );
    let telling = condition(ms, "Degraded")
        .filter(|c| c.status == "True")
        .or_else(|| condition(ms, "CanaryHealthy").filter(|c| c.status == "False"))
        .or_else(|| condition(ms, "Progressing").filter(|c| c.status == "True"))
        .or(ready);
    Row {
        name,
        ready: ready
            .map(|c| c.status.clone())
            .unwrap_or_else(|| "-".into()),
        reason: ready
            .map(|c| c.reason.clone())
            .unwrap_or_else(|| "-".into()),
        replicas,
        message: telling
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default(),
    }
}

pub fn header() -> String {
    cut(&format!(
        "{:>6}  {:<16} {:<6} {:<18} {:<8} {}",
        "T", "NAME", "READY", "REASON", "REPLICAS", "WHY"
    ))
}

/// Where the WHY column starts, and the most lines a row may take.
const WHY_AT: usize = 60;
const MAX_LINES: usize = 3;

/// `r` at `seconds` since the demo started: lines of at most [`WIDTH`],
/// the WHY column wrapped below itself (a reason is worth reading whole)
/// and cut after [`MAX_LINES`].
pub fn line(seconds: f64, r: &Row) -> String {
    let room = WIDTH - WHY_AT;
    let why: Vec<char> = r.message.chars().collect();
    let mut parts: Vec<String> = why.chunks(room).map(|c| c.iter().collect()).collect();
    if parts.len() > MAX_LINES {
        parts.truncate(MAX_LINES);
        if let Some(last) = parts.last_mut() {
            *last = cut_to(&format!("{last}…"), room);
        }
    }
    let first = parts.first().cloned().unwrap_or_default();
    let mut out = format!(
        "{:>5.1}s  {:<16} {:<6} {:<18} {:<8} {first}",
        seconds,
        cut_to(&r.name, 16),
        r.ready,
        cut_to(&r.reason, 18),
        r.replicas,
    );
    for more in parts.iter().skip(1) {
        out.push('\n');
        out.push_str(&" ".repeat(WHY_AT));
        out.push_str(more);
    }
    out
}

fn cut_to(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn cut(s: &str) -> String {
    cut_to(s, WIDTH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ms(status: serde_json::Value) -> ModelService {
        serde_json::from_value(json!({"apiVersion": "serving.modelservice.dev/v1",
            "kind": "ModelService", "metadata": {"name": "llama-3-1-70b-instruct-long-name"},
            "spec": {"model": {"name": "m"}, "runtime": {"image": "i"}}, "status": status}))
        .expect("ModelService")
    }

    fn cond(t: &str, s: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": t, "status": s, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn a_degraded_model_says_why_before_anything_else() {
        let m = ms(json!({"replicas": 1, "readyReplicas": 0, "conditions": [
            cond("Ready", "False", "InsufficientGPU", "short"),
            cond("Progressing", "True", "RollingOut", "rolling"),
            cond("Degraded", "True", "InsufficientGPU", "0/3 nodes are available")]}));
        let r = row(&m);
        assert_eq!(
            (r.ready.as_str(), r.reason.as_str()),
            ("False", "InsufficientGPU")
        );
        assert_eq!(r.replicas, "0/1");
        assert_eq!(r.message, "InsufficientGPU: 0/3 nodes are available");
    }

    #[test]
    fn a_rolled_back_canary_is_what_a_ready_model_shows() {
        let m = ms(json!({"replicas": 2, "readyReplicas": 2, "conditions": [
            cond("Ready", "True", "Serving", "2/2"),
            cond("CanaryHealthy", "False", "CrashLooping", "rolled back")]}));
        assert_eq!(row(&m).message, "CrashLooping: rolled back");
    }

    #[test]
    fn lines_fit_the_terminal_and_a_long_reason_wraps() {
        let m = ms(json!({"conditions": [cond("Ready", "False", "Pending", &"x".repeat(300))]}));
        let l = line(12.34, &row(&m));
        let lines: Vec<&str> = l.lines().collect();
        assert_eq!(lines.len(), MAX_LINES, "{l}");
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{l}");
        assert!(
            lines[0].starts_with(" 12.3s  llama-3-1-70b-i… False"),
            "{l}"
        );
        assert!(lines[2].ends_with('…'), "{l}");
        assert_eq!(lines[1].find('x'), Some(WHY_AT), "{l}");
        assert!(header().chars().count() <= WIDTH);
        let empty = line(0.0, &row(&ms(json!(null))));
        assert!(empty.contains(" -      -"), "{empty}");
    }
}
