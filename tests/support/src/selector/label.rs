//! Label selector parsing and matching (equality-, set- and existence-based).

use serde_json::{Map, Value};

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    NotExists,
    Gt,
    Lt,
}

#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Splits on commas that are not inside `( )`.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn parse_set(rest: &str, term: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("unable to parse requirement: found '{term}', expected: '('"))?;
    let values: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Err(format!(
            "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty: '{term}'"
        ));
    }
    Ok(values)
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    let t = term.trim();
    if let Some(key) = t.strip_prefix('!') {
        let key = key.trim();
        if key.is_empty() || !key.chars().all(is_key_char) {
            return Err(format!("unable to parse requirement: invalid key in '{t}'"));
        }
        return Ok(Requirement {
            key: key.into(),
            op: Op::NotExists,
            values: vec![],
        });
    }
    let key_end = t.find(|c: char| !is_key_char(c)).unwrap_or(t.len());
    let key = &t[..key_end];
    if key.is_empty() {
        return Err(format!(
            "unable to parse requirement: found '{t}', expected: identifier"
        ));
    }
    let rest = t[key_end..].trim_start();
    let single = |op: Op, v: &str| -> Result<Requirement, String> {
        let v = v.trim();
        if !v.chars().all(is_key_char) {
            return Err(format!(
                "unable to parse requirement: invalid value in '{t}'"
            ));
        }
        if matches!(op, Op::Gt | Op::Lt) && v.parse::<i64>().is_err() {
            return Err(format!(
                "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: '{t}'"
            ));
        }
        Ok(Requirement {
            key: key.into(),
            op,
            values: vec![v.to_string()],
        })
    };
    if rest.is_empty() {
        Ok(Requirement {
            key: key.into(),
            op: Op::Exists,
            values: vec![],
        })
    } else if let Some(v) = rest.strip_prefix("!=") {
        single(Op::NotEq, v)
    } else if let Some(v) = rest.strip_prefix("==") {
        single(Op::Eq, v)
    } else if let Some(v) = rest.strip_prefix('=') {
        single(Op::Eq, v)
    } else if let Some(v) = rest.strip_prefix('>') {
        single(Op::Gt, v)
    } else if let Some(v) = rest.strip_prefix('<') {
        single(Op::Lt, v)
    } else if let Some(v) = rest.strip_prefix("notin") {
        Ok(Requirement {
            key: key.into(),
            op: Op::NotIn,
            values: parse_set(v, t)?,
        })
    } else if let Some(v) = rest.strip_prefix("in") {
        Ok(Requirement {
            key: key.into(),
            op: Op::In,
            values: parse_set(v, t)?,
        })
    } else {
        Err(format!(
            "unable to parse requirement: found '{rest}', expected: in, notin, =, ==, !=, gt, lt"
        ))
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax; the error is the message of
    /// the 400 the real server answers with.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let reqs = split_terms(s)
            .into_iter()
            .map(parse_term)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LabelSelector { reqs })
    }

    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match r.op {
                Op::Eq => v == Some(r.values[0].as_str()),
                Op::NotEq => v != Some(r.values[0].as_str()),
                Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Gt | Op::Lt => {
                    let (Some(have), Ok(want)) = (
                        v.and_then(|v| v.parse::<i64>().ok()),
                        r.values[0].parse::<i64>(),
                    ) else {
                        return false;
                    };
                    if r.op == Op::Gt {
                        have > want
                    } else {
                        have < want
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(sel: &str, labels: Value) -> bool {
        LabelSelector::parse(sel)
            .unwrap()
            .matches(labels.as_object())
    }

    #[test]
    fn equality_and_sets() {
        let l = json!({"app": "web", "tier": "front", "n": "5"});
        assert!(m("app=web", l.clone()));
        assert!(m("app==web,tier=front", l.clone()));
        assert!(!m("app!=web", l.clone()));
        assert!(m("missing!=x", l.clone()));
        assert!(m("tier in (front, back)", l.clone()));
        assert!(!m("tier notin (front,back)", l.clone()));
        assert!(m("other notin (a)", l.clone()));
        assert!(m("app", l.clone()));
        assert!(m("!missing", l.clone()));
        assert!(!m("!app", l.clone()));
        assert!(m("n>3,n<6", l.clone()));
        assert!(m("", l));
    }

    #[test]
    fn bad_selectors_are_errors() {
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("a in ()").is_err());
        assert!(LabelSelector::parse("a ~ b").is_err());
    }
}
