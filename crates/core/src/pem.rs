//! PEM certificates and keys, read the same way by the config check (`gtd check`, and every
//! start and reload, with errors at the `cert`, `key`, `ca` or `client_*` value that names the
//! file) and by the node when it builds its TLS configs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::files;

/// The ring provider, passed to every config: no process-wide provider is installed.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// Why a certificate, key or CA file cannot be used; every message begins with the file.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// Not a regular file of at most [`files::MAX_PEM_BYTES`], or unreadable.
    #[error("{}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        error: files::FileError,
    },
    /// A PEM block that does not decode.
    #[error("{}: {error}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// The decoder's complaint.
        error: rustls::pki_types::pem::Error,
    },
    /// A file with no certificate in it.
    #[error("{}: no certificate found (expected PEM \"BEGIN CERTIFICATE\" blocks)", .0.display())]
    NoCertificate(PathBuf),
    /// A key encrypted with a passphrase.
    #[error(
        "{}: an encrypted private key, which gtd cannot read without its passphrase: decrypt \
         it (openssl pkey -in KEY -out PLAIN)",
        .0.display()
    )]
    EncryptedKey(PathBuf),
    /// A file with no private key in it.
    #[error(
        "{}: no private key found (expected a PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE \
         KEY\" or \"BEGIN EC PRIVATE KEY\" block)",
        .0.display()
    )]
    NoKey(PathBuf),
    /// A leaf certificate webpki cannot read.
    #[error("{}: not a usable certificate: {error}", path.display())]
    UnusableCertificate {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        error: webpki::Error,
    },
    /// A key the provider cannot sign with.
    #[error("{}: {error}", path.display())]
    UnusableKey {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        error: rustls::Error,
    },
    /// A key that is not the certificate's.
    #[error(
        "{}: the key does not belong to the certificate {} ({error})",
        key.display(),
        cert.display()
    )]
    Mismatch {
        /// The key's file.
        key: PathBuf,
        /// The certificate's file.
        cert: PathBuf,
        /// How they disagree.
        error: rustls::Error,
    },
    /// A CA certificate rustls refuses as a root.
    #[error("{}: not a usable CA certificate: {error}", path.display())]
    UnusableCa {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        error: rustls::Error,
    },
}

/// The config check reports a PEM error as the message at the value that names the file.
impl From<PemError> for String {
    fn from(e: PemError) -> String {
        e.to_string()
    }
}

/// The bytes of a PEM file: a regular file of at most [`files::MAX_PEM_BYTES`].
pub fn pem_bytes(path: &Path) -> Result<Vec<u8>, PemError> {
    files::read(path, files::MAX_PEM_BYTES).map_err(|error| PemError::Read {
        path: path.to_owned(),
        error,
    })
}

/// Reads a PEM certificate chain (leaf first).
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let bytes = pem_bytes(path)?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| PemError::Pem {
            path: path.to_owned(),
            error,
        })?;
    if chain.is_empty() {
        return Err(PemError::NoCertificate(path.to_owned()));
    }
    Ok(chain)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let bytes = pem_bytes(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound
            if bytes
                .windows(b"ENCRYPTED PRIVATE KEY".len())
                .any(|w| w == b"ENCRYPTED PRIVATE KEY") =>
        {
            PemError::EncryptedKey(path.to_owned())
        }
        rustls::pki_types::pem::Error::NoItemsFound => PemError::NoKey(path.to_owned()),
        error => PemError::Pem {
            path: path.to_owned(),
            error,
        },
    })
}

/// Which file of a certificate and key pair an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Faulty {
    /// The certificate.
    Cert,
    /// The key.
    Key,
}

/// A certificate chain with the key that belongs to it, and the DNS names (SANs, lower case)
/// its leaf serves.
pub fn certified(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, Vec<String>), (Faulty, PemError)> {
    let chain = read_chain(cert).map_err(|e| (Faulty::Cert, e))?;
    let names = webpki::EndEntityCert::try_from(&chain[0])
        .map_err(|error| {
            let path = cert.to_owned();
            (Faulty::Cert, PemError::UnusableCertificate { path, error })
        })?
        .valid_dns_names()
        .map(str::to_ascii_lowercase)
        .collect();
    let signing = provider
        .key_provider
        .load_private_key(read_key(key).map_err(|e| (Faulty::Key, e))?)
        .map_err(|error| {
            let path = key.to_owned();
            (Faulty::Key, PemError::UnusableKey { path, error })
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key type whose public half the provider cannot tell: nothing to compare.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(error) => {
            let mismatch = PemError::Mismatch {
                key: key.to_owned(),
                cert: cert.to_owned(),
                error,
            };
            return Err((Faulty::Key, mismatch));
        }
    }
    Ok((certified, names))
}

/// The certificates of a CA bundle, as roots to verify endpoints with.
pub fn roots(ca: &Path) -> Result<RootCertStore, PemError> {
    let mut roots = RootCertStore::empty();
    for cert in read_chain(ca)? {
        roots.add(cert).map_err(|error| PemError::UnusableCa {
            path: ca.to_owned(),
            error,
        })?;
    }
    Ok(roots)
}
