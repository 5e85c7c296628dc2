//! The generated RBAC, read back as YAML the way kubectl and Helm will read
//! it, grants exactly the sections of `src/permissions.rs`, and every file
//! that should use it does. Text generation can go wrong in ways the Rust
//! data cannot (a lost line, a quote, a template that includes the wrong
//! section); these tests take the place of the packaging script's
//! rendered-RBAC comparison.

use std::collections::BTreeSet;

use modelservice_operator::permissions::{Rule, Section};
use modelservice_operator::webhook::secret::DEFAULT_SECRET_NAME;
use serde_json::Value;

use crate::roles::{ROLES, section};
use crate::{chart, config_rbac, root};

/// One grant: (apiGroup, resource, verb, resourceNames).
type Grant = (String, String, String, Vec<String>);

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

fn grants_of_yaml(rules: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in rules.as_array().expect("a list of rules") {
        let mut names = strings(&rule["resourceNames"]);
        names.sort();
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.clone(), resource.clone(), verb, names.clone()));
                }
            }
        }
    }
    out
}

fn grants_of(rules: &[Rule]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let mut names: Vec<String> = rule.resource_names.iter().map(|n| n.to_string()).collect();
        names.sort();
        for verb in &rule.verbs {
            out.insert((
                rule.api_group.to_string(),
                rule.resource.to_string(),
                verb.as_str().to_string(),
                names.clone(),
            ));
        }
    }
    out
}

fn section_of(key: &str) -> Section {
    let role = ROLES.iter().find(|r| r.section == key).expect("a role");
    section(role).expect("a section")
}

#[test]
fn config_roles_grant_their_sections_exactly() {
    let files = config_rbac::files().expect("generates");
    for (role, file) in ROLES.iter().zip(&files) {
        let doc: Value = serde_yaml::from_str(&file.contents).expect("YAML");
        assert_eq!(doc["kind"], role.kind, "{}", file.path);
        assert_eq!(doc["metadata"]["name"], role.name, "{}", file.path);
        assert_eq!(
            doc["metadata"]["namespace"].as_str(),
            role.namespace,
            "{}",
            file.path
        );
        assert_eq!(
            grants_of_yaml(&doc["rules"]),
            grants_of(&section_of(role.section).rules),
            "{}",
            file.path
        );
    }
}

#[test]
fn kustomize_applies_every_config_role() {
    let text = std::fs::read_to_string(root().join("config/rbac/kustomization.yaml"))
        .expect("config/rbac/kustomization.yaml");
    let doc: Value = serde_yaml::from_str(&text).expect("YAML");
    let listed = strings(&doc["resources"]);
    for role in &ROLES {
        let file = role.config_file.trim_start_matches("config/rbac/");
        assert!(
            listed.iter().any(|l| l == file),
            "kustomization.yaml lacks {file}"
        );
    }
}

/// The body of `{{- define "name" -}} ... {{- end }}` in the chart partial,
/// with the webhook Secret's name as the chart renders it for the default
/// release name.
fn chart_rules(tpl: &str, define: &str) -> Value {
    let start = format!("{{{{- define \"{define}\" -}}}}\n");
    let body = tpl
        .split_once(&start)
        .and_then(|(_, rest)| rest.split_once("{{- end }}"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("no define {define}"));
    let body = body.replace(
        r#"{{ include "modelservice-operator.webhookSecretName" . | quote }}"#,
        &format!("\"{DEFAULT_SECRET_NAME}\""),
    );
    assert!(!body.contains("{{"), "{define}: unexpected templating");
    serde_yaml::from_str(&body).expect("YAML")
}

#[test]
fn chart_rules_grant_their_sections_exactly() {
    let tpl = chart::file().expect("generates").contents;
    for role in &ROLES {
        assert_eq!(
            grants_of_yaml(&chart_rules(&tpl, role.chart_define)),
            grants_of(&section_of(role.section).rules),
            "{}",
            role.chart_define
        );
    }
}

#[test]
fn each_chart_template_includes_its_section() {
    let defines: Vec<_> = ROLES.iter().map(|r| r.chart_define).collect();
    for role in &ROLES {
        let text = std::fs::read_to_string(root().join(role.chart_template))
            .unwrap_or_else(|e| panic!("{}: {e}", role.chart_template));
        let included: Vec<_> = defines
            .iter()
            .filter(|d| text.contains(&format!("include \"{d}\"")))
            .collect();
        assert_eq!(included, [&role.chart_define], "{}", role.chart_template);
    }
}
