//! Certificates for the test cluster, generated per cluster with `rcgen`: a CA, the API server's
//! serving certificate, an admin client certificate (`O=system:masters`) and the service-account
//! signing key. Everything is ECDSA P-256 and lives only in the cluster's state directory.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// Paths of the PEM files written by [`write_all`].
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// CA certificate (trust anchor for both sides).
    pub ca: PathBuf,
    /// API server serving certificate and key.
    pub server_cert: PathBuf,
    /// Key of `server_cert`.
    pub server_key: PathBuf,
    /// Admin client certificate (`CN=ferrolb-admin`, `O=system:masters`).
    pub admin_cert: PathBuf,
    /// Key of `admin_cert`.
    pub admin_key: PathBuf,
    /// Service-account signing key (private).
    pub sa_key: PathBuf,
    /// Public half of `sa_key`, for verifying tokens.
    pub sa_pub: PathBuf,
}

/// Generates every certificate into `dir`. `server_ips` are the serving certificate's IP SANs
/// (always add 127.0.0.1; add the lab bridge address when the lab reaches the API server).
///
/// # Errors
/// Key generation, signing or writing a file failed.
pub fn write_all(dir: &Path, server_ips: &[IpAddr]) -> anyhow::Result<CertFiles> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name = name("ferrolb-test-ca", None);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut sans: Vec<String> = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    sans.extend(server_ips.iter().map(|ip| ip.to_string()));
    let mut server = CertificateParams::new(sans)?;
    server.distinguished_name = name("kube-apiserver", None);
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &ca)?;

    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin.distinguished_name = name("ferrolb-admin", Some("system:masters"));
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_key = KeyPair::generate()?;
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let sa_key = KeyPair::generate()?;

    let files = CertFiles {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("apiserver.crt"),
        server_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
    };
    for (path, pem) in [
        (&files.ca, ca.pem()),
        (&files.server_cert, server_cert.pem()),
        (&files.server_key, server_key.serialize_pem()),
        (&files.admin_cert, admin_cert.pem()),
        (&files.admin_key, admin_key.serialize_pem()),
        (&files.sa_key, sa_key.serialize_pem()),
        (&files.sa_pub, sa_key.public_key_pem()),
    ] {
        std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(files)
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}
