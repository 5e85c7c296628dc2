//! The conversion webhook end to end against the in-process fake API server:
//! `start` makes the shared Secret, serves HTTPS with it, and points the CRD
//! at itself with the Secret's CA; a second replica writes nothing; a missing
//! CRD is waited for; cert-manager files that appear late are waited for.
//!
//! These use the fake only (request counters, a CRD that can be missing); the
//! real API server's side of conversion is exercised by the e2e suite once
//! the CRD has a second version.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Verb};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use modelservice_operator::webhook::certs::{self, Sans};
use modelservice_operator::webhook::client_config::{self, Outcome};
use modelservice_operator::webhook::secret::{CA_CRT, DEFAULT_SECRET_NAME};
use modelservice_operator::webhook::{
    CRD_NAME, CertSource, ClientConfigTarget, Running, WebhookConfig, start,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::sync::oneshot;

fn set_version(mut o: Value, to: &str) -> Result<Value, String> {
    o["apiVersion"] = Value::String(to.into());
    Ok(o)
}

const URL: &str = "https://127.0.0.1:9443/convert";

fn config(client_config: Option<ClientConfigTarget>) -> WebhookConfig {
    WebhookConfig {
        addr: "127.0.0.1:0".parse().expect("addr"),
        certs: CertSource::Secret {
            namespace: "default".into(),
            name: DEFAULT_SECRET_NAME.into(),
        },
        client_config,
        crd_name: CRD_NAME.into(),
    }
}

async fn install_crd(server: &FakeApiServer) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"group": "serving.modelservice.dev", "scope": "Namespaced",
            "names": {"plural": "modelservices", "singular": "modelservice", "kind": "ModelService"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("CRD");
    Api::<CustomResourceDefinition>::all(server.client())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
}

async fn crd_ca_bundle(server: &FakeApiServer) -> Option<String> {
    let crd = Api::<CustomResourceDefinition>::all(server.client())
        .get(CRD_NAME)
        .await
        .ok()?;
    let cc = crd.spec.conversion?.webhook?.client_config?;
    String::from_utf8(cc.ca_bundle?.0).ok()
}

async fn secret_ca(server: &FakeApiServer) -> String {
    let s = Api::<Secret>::namespaced(server.client(), "default")
        .get(DEFAULT_SECRET_NAME)
        .await
        .expect("the Secret");
    let bytes = s.data.and_then(|d| d.get(CA_CRT).cloned()).expect("ca.crt");
    String::from_utf8(bytes.0).expect("PEM")
}

/// POST a ConversionReview over HTTPS, trusting only `ca_pem` and checking
/// the IP SAN, as the API server does with `caBundle`.
async fn convert_over_https(addr: SocketAddr, ca_pem: &str) -> Value {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA added");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .expect("TLS handshake with our CA");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP handshake");
    tokio::spawn(conn);
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": "serving.modelservice.dev/v1",
            "objects": [{"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
                         "metadata": {"name": "a", "namespace": "ml"}}]}});
    let req = http::Request::post("/convert")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(axum::body::Bytes::from(
            serde_json::to_vec(&review).expect("json"),
        )))
        .expect("request");
    let res = sender.send_request(req).await.expect("response");
    assert_eq!(res.status(), 200);
    let body = res.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&body).expect("JSON")
}

async fn stop(running: Running, trigger: oneshot::Sender<()>) {
    let _ = trigger.send(());
    tokio::time::timeout(Duration::from_secs(10), running.handle)
        .await
        .expect("stops on shutdown")
        .expect("joins");
}

async fn start_replica(
    server: &FakeApiServer,
    cfg: WebhookConfig,
) -> (Running, oneshot::Sender<()>) {
    let (trigger, fired) = oneshot::channel::<()>();
    let running = start(server.client(), cfg, set_version, async move {
        let _ = fired.await;
    })
    .await
    .expect("the webhook starts");
    (running, trigger)
}

async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn replicas_share_one_ca_serve_it_and_publish_it_once() {
    let server = FakeApiServer::start().await;
    install_crd(&server).await;
    let target = Some(ClientConfigTarget::Url(URL.into()));

    let (a, stop_a) = start_replica(&server, config(target.clone())).await;
    let ca = secret_ca(&server).await;
    let published = wait_for("the CRD's caBundle", || async {
        crd_ca_bundle(&server).await
    })
    .await;
    assert_eq!(published, ca, "the CRD trusts the Secret's CA");
    let out = convert_over_https(a.addr, &published).await;
    assert_eq!(out["response"]["uid"], "u-1");
    assert_eq!(out["response"]["result"]["status"], "Success");
    assert_eq!(
        out["response"]["convertedObjects"][0]["apiVersion"],
        "serving.modelservice.dev/v1"
    );

    // A second replica reads, serves the same CA, and writes nothing.
    server.reset_counts();
    let (b, stop_b) = start_replica(&server, config(target)).await;
    let out = convert_over_https(b.addr, &published).await;
    assert_eq!(out["response"]["result"]["status"], "Success");
    let counts = server.counts();
    assert_eq!(
        counts.writes(),
        0,
        "nothing written by the second replica: {counts:?}"
    );
    assert_eq!(counts.get(Verb::Get, "customresourcedefinitions"), 1);
    stop(a, stop_a).await;
    stop(b, stop_b).await;
}

#[tokio::test]
async fn a_crd_installed_later_is_pointed_at_the_webhook() {
    let server = FakeApiServer::start().await;
    let (running, trigger) = start_replica(
        &server,
        config(Some(ClientConfigTarget::Service {
            namespace: "ops".into(),
            name: "msop-webhook".into(),
            port: 443,
        })),
    )
    .await;
    // The certificate names the Service as the API server dials it.
    let ca = secret_ca(&server).await;
    let tls = Api::<Secret>::namespaced(server.client(), "default")
        .get(DEFAULT_SECRET_NAME)
        .await
        .expect("Secret")
        .data
        .and_then(|d| d.get("tls.crt").cloned())
        .expect("tls.crt");
    let info = certs::inspect(&String::from_utf8(tls.0).expect("PEM")).expect("cert");
    assert!(info.sans.dns.contains("msop-webhook.ops.svc"));
    assert!(info.sans.dns.contains("msop-webhook.ops.svc.cluster.local"));

    install_crd(&server).await;
    let published = wait_for("the CRD's caBundle after a retry", || async {
        crd_ca_bundle(&server).await
    })
    .await;
    assert_eq!(published, ca);
    let crd = Api::<CustomResourceDefinition>::all(server.client())
        .get(CRD_NAME)
        .await
        .expect("CRD");
    let conversion = crd.spec.conversion.expect("conversion");
    assert_eq!(conversion.strategy, "Webhook");
    let webhook = conversion.webhook.expect("webhook");
    assert_eq!(webhook.conversion_review_versions, ["v1"]);
    let service = webhook
        .client_config
        .and_then(|c| c.service)
        .expect("service");
    assert_eq!(
        (
            service.namespace.as_str(),
            service.name.as_str(),
            service.path.as_deref(),
            service.port
        ),
        ("ops", "msop-webhook", Some("/convert"), Some(443))
    );
    stop(running, trigger).await;
}

#[tokio::test]
async fn the_client_config_is_written_once_and_switches_cleanly() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let url = ClientConfigTarget::Url(URL.into());
    assert_eq!(
        client_config::reconcile(&client, CRD_NAME, &url, "CA")
            .await
            .expect("reconcile"),
        Outcome::CrdMissing
    );
    install_crd(&server).await;
    server.reset_counts();
    for expected in [Outcome::Updated, Outcome::Unchanged, Outcome::Unchanged] {
        assert_eq!(
            client_config::reconcile(&client, CRD_NAME, &url, "CA")
                .await
                .expect("reconcile"),
            expected
        );
    }
    assert_eq!(
        server
            .counts()
            .get(Verb::Patch, "customresourcedefinitions"),
        1
    );
    let svc = ClientConfigTarget::Service {
        namespace: "ops".into(),
        name: "hook".into(),
        port: 443,
    };
    assert_eq!(
        client_config::reconcile(&client, CRD_NAME, &svc, "CA2")
            .await
            .expect("reconcile"),
        Outcome::Updated
    );
    let crd = Api::<CustomResourceDefinition>::all(client)
        .get(CRD_NAME)
        .await
        .expect("CRD");
    let managers: Vec<String> = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "modelservice-operator"),
        "the write is signed (issue 24): {managers:?}"
    );
    let cc = crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .expect("clientConfig");
    assert_eq!(cc.url, None, "the URL is gone once the Service is set");
    assert_eq!(cc.service.map(|s| s.name), Some("hook".into()));
    assert_eq!(cc.ca_bundle.map(|b| b.0), Some(b"CA2".to_vec()));
}

#[tokio::test]
async fn cert_manager_files_that_appear_late_are_waited_for() {
    let server = FakeApiServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let now = time::OffsetDateTime::now_utc();
    let ca = certs::new_ca(now).expect("CA");
    let serving = certs::issue_serving(&ca, &Sans::for_host("127.0.0.1"), now).expect("cert");
    let cfg = WebhookConfig {
        certs: CertSource::Files {
            dir: dir.path().to_path_buf(),
        },
        // Ignored with files: the CRD is cert-manager's business.
        client_config: Some(ClientConfigTarget::Url(URL.into())),
        ..config(None)
    };
    let path = dir.path().to_path_buf();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        std::fs::write(path.join("tls.key"), &serving.key_pem).expect("key");
        std::fs::write(path.join("tls.crt"), &serving.cert_pem).expect("cert");
    });
    let (running, trigger) = start_replica(&server, cfg).await;
    writer.await.expect("writer");
    let out = convert_over_https(running.addr, &ca.cert_pem).await;
    assert_eq!(out["response"]["result"]["status"], "Success");
    assert_eq!(
        server.counts().writes(),
        0,
        "neither Secret nor CRD touched"
    );
    stop(running, trigger).await;
}

#[tokio::test]
async fn a_taken_port_fails_start_with_the_address() {
    let server = FakeApiServer::start().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let cfg = WebhookConfig {
        addr: taken.local_addr().expect("addr"),
        ..config(None)
    };
    let err = start(server.client(), cfg, set_version, async {})
        .await
        .expect_err("port taken");
    assert!(
        err.to_string()
            .contains(&taken.local_addr().expect("addr").to_string()),
        "{err}"
    );
}
