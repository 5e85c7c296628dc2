//! `config/rbac/permissions.yaml`: the operator's permissions for people (an
//! auditor, a cluster admin granting them by hand), one section per Role,
//! with the reason for each rule and where each section is granted.

use modelservice_operator::permissions::sections;

use crate::roles::ROLES;
use crate::rules_yaml::comment;
use crate::{GENERATED, Generated};

pub const LISTING: &str = "config/rbac/permissions.yaml";

const INTRO: &str = "Everything the modelservice-operator may do in the Kubernetes API. \
    To change a permission, change src/permissions.rs and run `cargo xtask generate`, \
    which rewrites this file and every RBAC file below; CI (`cargo xtask check`) fails \
    when any of them is stale, and the end-to-end tests check that every API call the \
    operator makes is granted in src/permissions.rs.";

const FORMAT: &str = "Each entry: apiGroup (\"\" is the core group), resource (with \
    /subresource), verbs, and optionally resourceNames. No wildcards, no \
    nonResourceURLs. resourceNames appear only where the operator touches one named \
    object of a kind it must not read in general; Kubernetes cannot limit create, list \
    or watch by name. The chart names the webhook Secret <fullname>-webhook-certs, \
    which is the name below with the default release name.";

/// A plain scalar where YAML reads one as the same string, else quoted.
fn scalar(s: &str) -> String {
    let plain = s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-'));
    if plain {
        s.to_string()
    } else {
        crate::rules_yaml::quoted(s)
    }
}

fn flow(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

pub fn file() -> Generated {
    let mut out = format!("# {GENERATED}\n#\n{}#\n", comment(INTRO, 0));
    for role in &ROLES {
        let scope = match role.namespace {
            None => format!("{} {}", role.kind, role.name),
            Some(ns) => format!("{} {} in {ns}", role.kind, role.name),
        };
        out.push_str(&format!(
            "#   {}: {scope}\n#       {}\n#       {}\n",
            role.section, role.config_file, role.chart_template
        ));
    }
    out.push_str(&format!("#\n{}", comment(FORMAT, 0)));
    for section in sections() {
        out.push_str(&format!("\n{}{}:\n", comment(section.why, 0), section.key));
        for rule in &section.rules {
            out.push_str(&comment(&rule.why, 2));
            out.push_str(&format!("  - apiGroup: {}\n", scalar(&rule.api_group)));
            out.push_str(&format!("    resource: {}\n", scalar(&rule.resource)));
            if !rule.resource_names.is_empty() {
                let names = rule.resource_names.iter().map(|n| scalar(n));
                out.push_str(&format!("    resourceNames: {}\n", flow(names)));
            }
            let verbs = rule.verbs.iter().map(|v| v.as_str().to_string());
            out.push_str(&format!("    verbs: {}\n", flow(verbs)));
        }
    }
    Generated::new(LISTING, out)
}
