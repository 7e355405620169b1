//! TLS with rustls and the ring provider: termination for HTTPS listeners (certificates chosen
//! by SNI, ALPN h2 and http/1.1) and client configs towards endpoints (CA, mTLS, minimum
//! version, or no verification for tests).
//!
//! Every config is built with `builder_with_provider(ring)`, so no process-wide provider has to
//! be installed. Files are read when a snapshot is built (start, reload): a bad file fails that
//! build with a message naming it, and the running config stays.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use gtd_core::config::{ServerTls, TlsVersion, UpstreamTls};
use gtd_core::pem::{self, provider, read_chain, read_key};

/// Where Linux distributions keep their CA bundle (the paths OpenSSL-based clients probe).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Arch, Gentoo
    "/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // RHEL 7+
    "/etc/ssl/ca-bundle.pem",             // openSUSE
    "/etc/ssl/cert.pem",                  // Alpine, macOS
];

/// Why a TLS config cannot be built: a file it names, or what rustls refuses.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file.
    #[error(transparent)]
    Pem(#[from] pem::PemError),
    /// `SSL_CERT_FILE` names no file.
    #[error("SSL_CERT_FILE={}: not a file", .0.display())]
    SslCertFile(PathBuf),
    /// No `ca` and no system bundle.
    #[error(
        "tls towards endpoints without `ca` verifies them with the system CA bundle, and none \
         was found ({}; or set SSL_CERT_FILE); set `ca = \"bundle.pem\"`",
        SYSTEM_BUNDLES.join(", ")
    )]
    NoSystemBundle,
    /// A system bundle none of whose certificates rustls can use.
    #[error("{}: no usable CA certificate in the system bundle", .0.display())]
    NoUsableSystemCa(PathBuf),
    /// An HTTPS listener with no certificate (the config check refuses it first).
    #[error("https listener without certificates")]
    NoCertificate,
    /// rustls refuses the protocol versions or the client certificate.
    #[error("{0}")]
    Rustls(rustls::Error),
    /// The client certificate and key, refused together.
    #[error("{} / {}: {error}", cert.display(), key.display())]
    ClientCertificate {
        cert: PathBuf,
        key: PathBuf,
        error: rustls::Error,
    },
    /// Not a name or address to send as SNI.
    #[error("server name {name:?}: {error}")]
    ServerName {
        name: String,
        error: rustls::pki_types::InvalidDnsNameError,
    },
}

/// The system's CA bundle for a group `tls` without `ca`: `SSL_CERT_FILE` when set (as for
/// curl and OpenSSL), else the first of [`SYSTEM_BUNDLES`] that exists.
fn system_bundle() -> Result<PathBuf, TlsError> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE") {
        let file = PathBuf::from(file);
        if !file.is_file() {
            return Err(TlsError::SslCertFile(file));
        }
        return Ok(file);
    }
    SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
        .ok_or(TlsError::NoSystemBundle)
}

/// A certificate with its key and the DNS names (SANs, lower case) it serves.
struct Served {
    names: Vec<String>,
    key: Arc<CertifiedKey>,
}

/// Chooses the certificate by SNI: an exact SAN first, then a wildcard SAN (`*.example.com`
/// covers one label), else the first certificate.
struct SniResolver {
    certs: Vec<Served>,
}

impl fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SniResolver")
            .field(
                "names",
                &self.certs.iter().map(|c| &c.names).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl SniResolver {
    fn choose(&self, sni: Option<&str>) -> &Served {
        let default = &self.certs[0];
        let Some(name) = sni else { return default };
        let exact = self.certs.iter().find(|c| {
            c.names
                .iter()
                .any(|n| !n.starts_with("*.") && n.eq_ignore_ascii_case(name))
        });
        if let Some(c) = exact {
            return c;
        }
        let Some((_, parent)) = name.split_once('.') else {
            return default;
        };
        self.certs
            .iter()
            .find(|c| {
                c.names.iter().any(|n| {
                    n.strip_prefix("*.")
                        .is_some_and(|rest| rest.eq_ignore_ascii_case(parent))
                })
            })
            .unwrap_or(default)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.choose(hello.server_name()).key))
    }
}

/// The server config of an HTTPS listener: every certificate loaded and checked against its key.
pub(crate) fn server_config(tls: &ServerTls) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let mut certs = Vec::with_capacity(tls.certs.len());
    for pair in &tls.certs {
        let (certified, names) =
            pem::certified(&pair.cert, &pair.key, &provider).map_err(|(_, e)| e)?;
        certs.push(Served {
            names,
            key: Arc::new(certified),
        });
    }
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver { certs }));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client config towards a group's endpoints: verified with the group's CA bundle (`ca`),
/// else the system's; or not at all with `insecure_skip_verify` (tests); mTLS when the group
/// names a client certificate and key.
pub fn client_config(tls: &UpstreamTls) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = provider();
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V1_3 => &[&rustls::version::TLS13],
    };
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(TlsError::Rustls)?;
    let builder = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    } else {
        let roots = match &tls.ca {
            Some(ca) => pem::roots(ca)?,
            None => {
                let bundle = system_bundle()?;
                // A system bundle may hold a certificate rustls cannot use; skip it, as
                // OpenSSL-based clients do, as long as some remain.
                let mut roots = RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(read_chain(&bundle)?);
                if added == 0 {
                    return Err(TlsError::NoUsableSystemCa(bundle));
                }
                roots
            }
        };
        builder.with_root_certificates(roots)
    };
    let mut config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_chain(cert)?, read_key(key)?)
            .map_err(|error| TlsError::ClientCertificate {
                cert: cert.clone(),
                key: key.clone(),
                error,
            })?,
        _ => builder.with_no_client_auth(),
    };
    // Endpoints are spoken to in HTTP/1.1 (pooled keep-alive connections).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The server name sent to an endpoint: the group's `sni`, else the endpoint's host.
pub(crate) fn server_name(sni: Option<&str>, host: &str) -> Result<ServerName<'static>, TlsError> {
    let name = sni.unwrap_or(host);
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    ServerName::try_from(name.to_owned()).map_err(|error| TlsError::ServerName {
        name: name.to_owned(),
        error,
    })
}

/// `insecure_skip_verify`: accepts any certificate, still checking the handshake signatures.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::PrivateKeyDer;

    fn served(names: &[&str]) -> Served {
        let cert = rcgen::generate_simple_self_signed(vec!["x.invalid".to_owned()]).unwrap();
        let key = PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let signing = provider().key_provider.load_private_key(key).unwrap();
        Served {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            key: Arc::new(CertifiedKey::new(vec![cert.cert.der().clone()], signing)),
        }
    }

    #[test]
    fn sni_prefers_exact_then_wildcard_then_the_first() {
        let r = SniResolver {
            certs: vec![
                served(&["default.test"]),
                served(&["*.example.com"]),
                served(&["api.example.com"]),
            ],
        };
        let pick = |sni| {
            let chosen = r.choose(sni);
            r.certs
                .iter()
                .position(|c| std::ptr::eq(c, chosen))
                .unwrap()
        };
        assert_eq!(pick(Some("api.example.com")), 2);
        assert_eq!(pick(Some("API.Example.com")), 2);
        assert_eq!(pick(Some("www.example.com")), 1);
        assert_eq!(
            pick(Some("a.b.example.com")),
            0,
            "a wildcard covers one label"
        );
        assert_eq!(pick(Some("example.com")), 0);
        assert_eq!(pick(Some("other.test")), 0);
        assert_eq!(pick(None), 0);
    }
}
