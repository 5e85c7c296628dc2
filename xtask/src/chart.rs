//! The chart's RBAC rules: one named template per section, in a generated
//! partial (`_rules.tpl`) that the hand-written RBAC templates include. The
//! templates keep what is Helm's (names from the release, conditions on
//! values); only the rules come from `src/permissions.rs`.

use modelservice_operator::webhook::secret::DEFAULT_SECRET_NAME;

use crate::roles::{ROLES, section};
use crate::rules_yaml::{quoted, rules, wrap};
use crate::{GENERATED, Generated};

pub const RULES_TPL: &str = "charts/modelservice-operator/templates/_rules.tpl";

/// A resourceName as the chart writes it: the chart names the webhook Secret
/// after the release (`modelservice-operator-webhook-certs` only with the
/// default release name), so it takes the name from the chart's helper.
fn chart_name(name: &str) -> String {
    if name == DEFAULT_SECRET_NAME {
        r#"{{ include "modelservice-operator.webhookSecretName" . | quote }}"#.to_string()
    } else {
        quoted(name)
    }
}

pub fn file() -> Result<Generated, String> {
    let intro = "The rules of each RBAC section, included as `rules:` by the templates \
                 that render the (Cluster)Roles around them.";
    let mut out = format!("{{{{/*\n{GENERATED}\n{}*/}}}}\n", wrap(intro, ""));
    for role in &ROLES {
        let section = section(role)?;
        let about = format!(
            "{}: {} Included by {}.",
            section.key,
            section.why,
            role.chart_template
                .trim_start_matches("charts/modelservice-operator/"),
        );
        out.push_str(&format!(
            "\n{{{{/*\n{}*/}}}}\n{{{{- define \"{}\" -}}}}\n{}{{{{- end }}}}\n",
            wrap(&about, ""),
            role.chart_define,
            rules(&section.rules, 0, chart_name),
        ));
    }
    Ok(Generated::new(RULES_TPL, out))
}
