//! RBAC rules as YAML text, written by hand rather than through a serializer
//! so that each rule keeps its *why* as a comment above it and the flow style
//! reviewers know from the files that used to be hand-written.

use modelservice_operator::permissions::Rule;

/// Comments wrap here, indentation included, like the rest of the repository.
const WIDTH: usize = 80;

/// `text` wrapped at [`WIDTH`], each line starting with `prefix`. Words
/// longer than a line stay whole.
pub fn wrap(text: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && prefix.len() + line.len() + 1 + word.len() > WIDTH {
            out.push_str(&format!("{prefix}{line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&format!("{prefix}{line}\n"));
    }
    out
}

/// `text` as YAML comment lines indented by `indent` spaces.
pub fn comment(text: &str, indent: usize) -> String {
    wrap(text, &format!("{}# ", " ".repeat(indent)))
}

/// A YAML double-quoted scalar; JSON's string syntax is a subset of it.
pub fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The items of a Role's `rules:` list, each under its *why* comment.
/// `name` writes one resourceName as a YAML scalar: the chart templates the
/// webhook Secret's name, the plain manifests quote it.
pub fn rules(rules: &[Rule], indent: usize, name: impl Fn(&str) -> String) -> String {
    let pad = " ".repeat(indent);
    let list = |items: Vec<String>| format!("[{}]", items.join(", "));
    let mut out = String::new();
    for rule in rules {
        out.push_str(&comment(&rule.why, indent));
        out.push_str(&format!(
            "{pad}- apiGroups: {}\n",
            list(vec![quoted(&rule.api_group)])
        ));
        out.push_str(&format!(
            "{pad}  resources: {}\n",
            list(vec![quoted(&rule.resource)])
        ));
        if !rule.resource_names.is_empty() {
            let names = rule.resource_names.iter().map(|n| name(n)).collect();
            out.push_str(&format!("{pad}  resourceNames: {}\n", list(names)));
        }
        let verbs = rule.verbs.iter().map(|v| quoted(v.as_str())).collect();
        out.push_str(&format!("{pad}  verbs: {}\n", list(verbs)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_wrap_at_the_width_and_keep_every_word() {
        let text = "word ".repeat(40);
        let out = comment(&text, 2);
        assert!(
            out.lines()
                .all(|l| l.len() <= WIDTH && l.starts_with("  # "))
        );
        assert_eq!(out.split_whitespace().filter(|w| *w == "word").count(), 40);
    }

    #[test]
    fn the_core_group_is_an_empty_quoted_string() {
        assert_eq!(quoted(""), "\"\"");
    }
}
