//! The webhook's certificates, as pure functions: a self-signed CA, a serving
//! certificate signed by it, and the decision whether a stored certificate
//! must be replaced. PEM in, PEM out, and the clock is a parameter, so tests
//! can travel in time and nothing here touches the network or the disk.
//!
//! The API server verifies the webhook like any Go TLS client: by the SANs
//! (the common name is ignored), against the CRD's `caBundle`. So what
//! matters is that the serving certificate names exactly the host the API
//! server dials, and that it is signed by the CA we publish.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType,
};
use time::{Duration, OffsetDateTime};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

/// How long a CA we make is valid: long, because replacing it means
/// re-publishing `caBundle` and every replica picking up a new serving cert.
pub const CA_VALIDITY: Duration = Duration::days(3650);
/// How long a serving certificate is valid: a year, renewed well before.
pub const SERVING_VALIDITY: Duration = Duration::days(365);
/// A certificate that expires within this is renewed (the maintenance task
/// runs hourly, so a month leaves room for long outages).
pub const RENEW_BEFORE: Duration = Duration::days(30);
/// A CA with less left than this is not used to sign a new serving
/// certificate: a new CA is made instead, so that the serving certificate
/// never outlives its CA.
pub const CA_MIN_REMAINING: Duration = Duration::days(365);
/// Certificates start a little in the past, so a node whose clock is
/// slightly behind ours still accepts them.
const BACKDATE: Duration = Duration::minutes(5);

/// Why a certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("no PEM certificate found")]
    NoCertificate,
    #[error("not a valid PEM certificate: {0}")]
    Parse(String),
    #[error("invalid DNS name {0:?} for a certificate")]
    DnsName(String),
}

/// The names a serving certificate must hold (subjectAltName).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sans {
    pub dns: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
}

impl Sans {
    /// The SANs for one host as written in a URL: an IP SAN for an address
    /// (`127.0.0.1`, `::1`, with or without brackets), else a DNS SAN.
    pub fn for_host(host: &str) -> Sans {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let mut sans = Sans::default();
        match bare.parse::<IpAddr>() {
            Ok(ip) => {
                sans.ips.insert(ip);
            }
            Err(_) => {
                sans.dns.insert(bare.to_ascii_lowercase());
            }
        }
        sans
    }

    /// The names the API server uses for a Service reference
    /// (`name.namespace.svc`), plus the fully qualified form.
    pub fn for_service(namespace: &str, name: &str) -> Sans {
        Sans {
            dns: [
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ]
            .into_iter()
            .collect(),
            ips: BTreeSet::new(),
        }
    }

    /// Every name in `self` or `other`.
    pub fn union(&self, other: &Sans) -> Sans {
        Sans {
            dns: self.dns.union(&other.dns).cloned().collect(),
            ips: self.ips.union(&other.ips).copied().collect(),
        }
    }

    /// The names of `wanted` that `self` lacks (empty when it covers them).
    pub fn missing(&self, wanted: &Sans) -> Sans {
        Sans {
            dns: wanted.dns.difference(&self.dns).cloned().collect(),
            ips: wanted.ips.difference(&self.ips).copied().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dns.is_empty() && self.ips.is_empty()
    }
}

impl fmt::Display for Sans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .dns
            .iter()
            .cloned()
            .chain(self.ips.iter().map(ToString::to_string))
            .collect();
        write!(f, "{}", names.join(", "))
    }
}

/// A certificate and its private key, both PEM. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for KeyedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// A new self-signed CA, valid from `now` for [`CA_VALIDITY`].
pub fn new_ca(now: OffsetDateTime) -> Result<KeyedCert, CertError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "modelservice-operator webhook CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - BACKDATE;
    params.not_after = now + CA_VALIDITY;
    let cert = params.self_signed(&key)?;
    Ok(KeyedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A new serving certificate for `sans`, signed by `ca` (the first
/// certificate of `ca.cert_pem`), valid from `now` for [`SERVING_VALIDITY`]
/// but never beyond the CA.
pub fn issue_serving(
    ca: &KeyedCert,
    sans: &Sans,
    now: OffsetDateTime,
) -> Result<KeyedCert, CertError> {
    let ca_pem = first_pem(&ca.cert_pem)?;
    let ca_info = info_of(&ca_pem)?;
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_der(&ca_pem.contents.as_slice().into(), ca_key)?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    // A fixed name: clients check the SANs only, and a Service's DNS name
    // can be longer than the 64 characters a common name may hold.
    params
        .distinguished_name
        .push(DnType::CommonName, "modelservice-operator webhook");
    params.subject_alt_names = sans
        .dns
        .iter()
        .map(|d| {
            d.clone()
                .try_into()
                .map(SanType::DnsName)
                .map_err(|_| CertError::DnsName(d.clone()))
        })
        .chain(sans.ips.iter().map(|ip| Ok(SanType::IpAddress(*ip))))
        .collect::<Result<_, _>>()?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - BACKDATE;
    params.not_after = (now + SERVING_VALIDITY).min(ca_info.not_after);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(KeyedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// What a stored certificate says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub sans: Sans,
    pub is_ca: bool,
}

/// Reads the first certificate of a PEM text (a bundle's first is its leaf,
/// or for `ca.crt` the current CA).
pub fn inspect(cert_pem: &str) -> Result<CertInfo, CertError> {
    info_of(&first_pem(cert_pem)?)
}

/// Why a certificate must be replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// It cannot be read at all.
    Unreadable(String),
    /// It expires within [`RENEW_BEFORE`] (or already has).
    ExpiresSoon { not_after: OffsetDateTime },
    /// It lacks some of the names the API server will dial.
    MissingSans(Sans),
}

impl fmt::Display for Renewal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Renewal::Unreadable(e) => write!(f, "the stored certificate is unreadable ({e})"),
            Renewal::ExpiresSoon { not_after } => {
                write!(f, "the stored certificate expires at {not_after}")
            }
            Renewal::MissingSans(m) => write!(f, "the stored certificate does not name {m}"),
        }
    }
}

/// Whether `cert_pem` must be replaced at `now` to serve `wanted`: `None`
/// when it is readable, valid for more than [`RENEW_BEFORE`] and names all of
/// `wanted`.
pub fn needs_renewal(cert_pem: &str, wanted: &Sans, now: OffsetDateTime) -> Option<Renewal> {
    let info = match inspect(cert_pem) {
        Ok(i) => i,
        Err(e) => return Some(Renewal::Unreadable(e.to_string())),
    };
    if info.not_after - now < RENEW_BEFORE {
        return Some(Renewal::ExpiresSoon {
            not_after: info.not_after,
        });
    }
    let missing = info.sans.missing(wanted);
    if !missing.is_empty() {
        return Some(Renewal::MissingSans(missing));
    }
    None
}

/// Whether `cert_pem`'s signature verifies with the public key of the
/// first certificate of `ca_pem`: a serving certificate from another CA
/// would be rejected by the API server however valid it looks.
pub fn issued_by(cert_pem: &str, ca_pem: &str) -> bool {
    let (Ok(leaf), Ok(ca)) = (first_pem(cert_pem), first_pem(ca_pem)) else {
        return false;
    };
    let (Ok(leaf), Ok(ca)) = (leaf.parse_x509(), ca.parse_x509()) else {
        return false;
    };
    leaf.verify_signature(Some(ca.public_key())).is_ok()
}

/// Whether `key_pem` is the private key of the first certificate of
/// `cert_pem`: a mismatched pair makes every TLS handshake fail.
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    let Ok(key) = KeyPair::from_pem(key_pem) else {
        return false;
    };
    let Ok(pem) = first_pem(cert_pem) else {
        return false;
    };
    let Ok(cert) = pem.parse_x509() else {
        return false;
    };
    cert.public_key().subject_public_key.data.as_ref() == key.der_bytes()
}

/// Every readable certificate of a PEM bundle, each as its own PEM text
/// (copied as written), in order. Used to carry the previous CA along in
/// `ca.crt` when a new one replaces it.
pub fn split_bundle(bundle: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = bundle;
    while let Some(b) = rest.find(BEGIN) {
        let Some(e) = rest[b..].find(END) else { break };
        let block = format!("{}\n", &rest[b..b + e + END.len()]);
        if inspect(&block).is_ok() {
            out.push(block);
        }
        rest = &rest[b + e + END.len()..];
    }
    out
}

fn first_pem(text: &str) -> Result<Pem, CertError> {
    for block in Pem::iter_from_buffer(text.as_bytes()) {
        let block = block.map_err(|e| CertError::Parse(e.to_string()))?;
        if block.label == "CERTIFICATE" {
            return Ok(block);
        }
    }
    Err(CertError::NoCertificate)
}

fn info_of(pem: &Pem) -> Result<CertInfo, CertError> {
    let cert = pem
        .parse_x509()
        .map_err(|e| CertError::Parse(e.to_string()))?;
    Ok(CertInfo {
        not_before: cert.validity().not_before.to_datetime(),
        not_after: cert.validity().not_after.to_datetime(),
        sans: sans_of(&cert),
        is_ca: cert.is_ca(),
    })
}

fn sans_of(cert: &X509Certificate<'_>) -> Sans {
    let mut sans = Sans::default();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(d) => {
                    sans.dns.insert(d.to_ascii_lowercase());
                }
                GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        sans.ips.insert(IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        sans.ips.insert(IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    sans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn both() -> Sans {
        Sans::for_service("ops", "hook").union(&Sans::for_host("127.0.0.1"))
    }

    #[test]
    fn the_ca_is_a_ca_for_ten_years() {
        let t = now();
        let ca = new_ca(t).expect("CA");
        let info = inspect(&ca.cert_pem).expect("readable");
        assert!(info.is_ca);
        assert!(info.not_before <= t);
        let years = (info.not_after - t).whole_days();
        assert!((3649..=3650).contains(&years), "{years}");
        assert!(key_matches(&ca.cert_pem, &ca.key_pem));
        assert!(issued_by(&ca.cert_pem, &ca.cert_pem), "self-signed");
    }

    #[test]
    fn the_serving_certificate_names_the_hosts_and_is_signed_by_the_ca() {
        let t = now();
        let ca = new_ca(t).expect("CA");
        let serving = issue_serving(&ca, &both(), t).expect("serving");
        let info = inspect(&serving.cert_pem).expect("readable");
        assert!(!info.is_ca);
        assert_eq!(info.sans, both());
        assert!(info.sans.ips.contains(&"127.0.0.1".parse().expect("ip")));
        assert!(info.sans.dns.contains("hook.ops.svc"));
        assert!(info.sans.dns.contains("hook.ops.svc.cluster.local"));
        assert!(((info.not_after - t).whole_days() - 365).abs() <= 1);
        assert!(issued_by(&serving.cert_pem, &ca.cert_pem));
        assert!(key_matches(&serving.cert_pem, &serving.key_pem));
        assert!(!key_matches(&serving.cert_pem, &ca.key_pem));
        let other = new_ca(t).expect("another CA");
        assert!(!issued_by(&serving.cert_pem, &other.cert_pem));
        assert!(!issued_by("garbage", &ca.cert_pem));
    }

    #[test]
    fn a_serving_certificate_never_outlives_its_ca() {
        let t = now();
        let ca = new_ca(t - CA_VALIDITY + Duration::days(100)).expect("old CA");
        let serving = issue_serving(&ca, &both(), t).expect("serving");
        let ca_end = inspect(&ca.cert_pem).expect("CA").not_after;
        assert_eq!(
            inspect(&serving.cert_pem).expect("serving").not_after,
            ca_end
        );
    }

    #[test]
    fn renewal_is_due_within_thirty_days_of_expiry() {
        let t = now();
        let ca = new_ca(t).expect("CA");
        let serving = issue_serving(&ca, &both(), t).expect("serving");
        assert_eq!(needs_renewal(&serving.cert_pem, &both(), t), None);
        assert_eq!(
            needs_renewal(&serving.cert_pem, &both(), t + Duration::days(330)),
            None
        );
        assert!(matches!(
            needs_renewal(&serving.cert_pem, &both(), t + Duration::days(336)),
            Some(Renewal::ExpiresSoon { .. })
        ));
        assert!(matches!(
            needs_renewal(&serving.cert_pem, &both(), t + Duration::days(400)),
            Some(Renewal::ExpiresSoon { .. })
        ));
    }

    #[test]
    fn renewal_is_due_when_a_wanted_name_is_missing() {
        let t = now();
        let ca = new_ca(t).expect("CA");
        let serving = issue_serving(&ca, &Sans::for_host("127.0.0.1"), t).expect("serving");
        // Fewer names than the certificate holds is fine.
        assert_eq!(needs_renewal(&serving.cert_pem, &Sans::default(), t), None);
        match needs_renewal(&serving.cert_pem, &both(), t) {
            Some(Renewal::MissingSans(m)) => {
                assert!(m.ips.is_empty());
                assert_eq!(m.dns.len(), 2);
                let said = Renewal::MissingSans(m).to_string();
                assert!(said.contains("hook.ops.svc"), "{said}");
            }
            other => panic!("expected missing SANs, got {other:?}"),
        }
        let v6 = Sans::for_host("[::1]");
        assert!(matches!(
            needs_renewal(&serving.cert_pem, &v6, t),
            Some(Renewal::MissingSans(_))
        ));
    }

    #[test]
    fn an_unreadable_certificate_needs_renewal() {
        for pem in [
            "",
            "garbage",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ] {
            assert!(
                matches!(
                    needs_renewal(pem, &Sans::default(), now()),
                    Some(Renewal::Unreadable(_))
                ),
                "{pem:?}"
            );
        }
        let ca = new_ca(now()).expect("CA");
        // A key is not a certificate.
        assert!(matches!(
            needs_renewal(&ca.key_pem, &Sans::default(), now()),
            Some(Renewal::Unreadable(_))
        ));
    }

    #[test]
    fn bundles_split_into_readable_certificates() {
        let t = now();
        let a = new_ca(t).expect("a");
        let b = new_ca(t).expect("b");
        let bundle = format!("{}junk\n{}", a.cert_pem, b.cert_pem);
        let parts = split_bundle(&bundle);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].trim(), a.cert_pem.trim());
        assert_eq!(parts[1].trim(), b.cert_pem.trim());
        assert!(split_bundle("nothing").is_empty());
        // The first certificate of a bundle is the one inspected and trusted to sign.
        let serving = issue_serving(&a, &both(), t).expect("serving");
        assert!(issued_by(&serving.cert_pem, &bundle));
    }

    #[test]
    fn sans_from_hosts() {
        assert!(
            Sans::for_host("[::1]")
                .ips
                .contains(&"::1".parse().expect("ip"))
        );
        assert!(Sans::for_host("Example.COM").dns.contains("example.com"));
        let s = Sans::for_host("a").union(&Sans::for_host("10.0.0.1"));
        assert!(s.missing(&Sans::for_host("a")).is_empty());
        assert_eq!(s.missing(&Sans::for_host("b")), Sans::for_host("b"));
        assert_eq!(s.to_string(), "a, 10.0.0.1");
    }
}
