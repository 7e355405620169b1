//! PEM certificates and keys, read the same way by the config check (`gtd check`, and every
//! start and reload, with errors at the `cert`, `key`, `ca` or `client_*` value that names the
//! file) and by the node when it builds its TLS configs.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::files;

/// The ring provider, passed to every config: no process-wide provider is installed.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The bytes of a PEM file: a regular file of at most [`files::MAX_PEM_BYTES`].
pub(crate) fn pem_bytes(path: &Path) -> Result<Vec<u8>, String> {
    files::read(path, files::MAX_PEM_BYTES).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a PEM certificate chain (leaf first).
pub(crate) fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = pem_bytes(path)?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{}: no certificate found (expected PEM \"BEGIN CERTIFICATE\" blocks)",
            path.display()
        ));
    }
    Ok(chain)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = pem_bytes(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound
            if bytes
                .windows(b"ENCRYPTED PRIVATE KEY".len())
                .any(|w| w == b"ENCRYPTED PRIVATE KEY") =>
        {
            format!(
                "{}: an encrypted private key, which gtd cannot read without its passphrase: \
                 decrypt it (openssl pkey -in KEY -out PLAIN)",
                path.display()
            )
        }
        rustls::pki_types::pem::Error::NoItemsFound => format!(
            "{}: no private key found (expected a PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE \
             KEY\" or \"BEGIN EC PRIVATE KEY\" block)",
            path.display()
        ),
        e => format!("{}: {e}", path.display()),
    })
}

/// Which file of a certificate and key pair an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Faulty {
    Cert,
    Key,
}

/// A certificate chain with the key that belongs to it, and the DNS names (SANs, lower case)
/// its leaf serves.
pub(crate) fn certified(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, Vec<String>), (Faulty, String)> {
    let chain = read_chain(cert).map_err(|e| (Faulty::Cert, e))?;
    let names = webpki::EndEntityCert::try_from(&chain[0])
        .map_err(|e| {
            let message = format!("{}: not a usable certificate: {e}", cert.display());
            (Faulty::Cert, message)
        })?
        .valid_dns_names()
        .map(str::to_ascii_lowercase)
        .collect();
    let signing = provider
        .key_provider
        .load_private_key(read_key(key).map_err(|e| (Faulty::Key, e))?)
        .map_err(|e| (Faulty::Key, format!("{}: {e}", key.display())))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key type whose public half the provider cannot tell: nothing to compare.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => {
            let message = format!(
                "{}: the key does not belong to the certificate {} ({e})",
                key.display(),
                cert.display()
            );
            return Err((Faulty::Key, message));
        }
    }
    Ok((certified, names))
}

/// The certificates of a CA bundle, as roots to verify endpoints with.
pub(crate) fn roots(ca: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_chain(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", ca.display()))?;
    }
    Ok(roots)
}
