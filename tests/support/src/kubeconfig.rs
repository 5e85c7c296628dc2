//! A kubeconfig pointing at the fake, for running real binaries against it.

use std::path::Path;

/// The kubeconfig text: one cluster, an anonymous user, namespace default.
pub fn render(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake-apiserver
  cluster:
    server: {url}
users:
- name: fake-apiserver
  user: {{}}
contexts:
- name: fake-apiserver
  context:
    cluster: fake-apiserver
    user: fake-apiserver
    namespace: default
current-context: fake-apiserver
preferences: {{}}
"
    )
}

pub fn write(path: &Path, url: &str) -> std::io::Result<()> {
    std::fs::write(path, render(url))
}
