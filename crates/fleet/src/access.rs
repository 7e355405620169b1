//! How a command or a node reaches etcd: the members' addresses, and what it shows them.
//!
//! - Plaintext (`http://host:port` or `host:port`), for a cluster on a trusted network.
//! - TLS (`https://host:port`, with `--etcd-cacert`): etcd's certificate is checked against that
//!   CA, and with `--etcd-cert`/`--etcd-key` the client shows its own (etcd's
//!   `--client-cert-auth`).
//! - A user (`--etcd-user`, the password from `--etcd-password-file` or `GTD_ETCD_PASSWORD`),
//!   for a cluster with `etcdctl auth enable`; its token is renewed when etcd expires it.
//!
//! Every file is read when the settings are given (so that a mistake is reported before
//! anything connects) and again at every connection, so that a node picks up a rotated
//! certificate or password at its next reconnect without a restart.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::etcd::ConnectOptions;

use super::{CONNECT_TIMEOUT, REQUEST_TIMEOUT};

/// The alerts etcd's TLS stack sends for a client certificate it does not accept, or none
/// (which one depends on Go's version and the TLS version).
const CERTIFICATE_ALERTS: [&str; 3] = [
    "received fatal alert: BadCertificate",
    "received fatal alert: CertificateRequired",
    "received fatal alert: HandshakeFailure",
];

/// Whether `why` says the member dropped a connection it had accepted: closed, reset, or the
/// client's next write failing.
fn dropped(why: &str) -> bool {
    why.ends_with("connection closed")
        || why.contains("connection reset")
        || why.ends_with("broken pipe")
        || why.ends_with("handshake eof")
}

fn certificate_alert(why: &str) -> bool {
    CERTIFICATE_ALERTS.iter().any(|a| why.contains(a))
}

/// The environment variable a password may come from (rather than a command line, which
/// every user of the machine can read).
pub const PASSWORD_ENV: &str = "GTD_ETCD_PASSWORD";

/// What is wrong with one `--etcd` value (said without the flag: clap, or [`AccessError`],
/// names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Nothing but commas and spaces.
    #[error("no endpoint given (host:port, http://host:port or https://host:port)")]
    None,
    /// `user@host`: not echoed, since it is a password on the command line.
    #[error("an endpoint with user info (user@host); give --etcd-user instead")]
    UserInfo,
    /// Not `host:port` with a port number.
    #[error("{0}: expected host:port, http://host:port or https://host:port")]
    NotAnAddress(String),
}

/// Why the etcd settings cannot be used: flags that do not go together, or a file they name
/// that cannot be read or used. Each message names the flag to change.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// An `--etcd` value.
    #[error("--etcd{}{}", separator(.0), .0)]
    Endpoint(EndpointError),
    /// `--etcd-cert` without `--etcd-key`.
    #[error("--etcd-cert needs --etcd-key, the certificate's private key")]
    CertWithoutKey,
    /// `--etcd-key` without `--etcd-cert`.
    #[error("--etcd-key needs --etcd-cert, the certificate it signs for")]
    KeyWithoutCert,
    /// A client certificate without TLS.
    #[error("--etcd-cert needs --etcd-cacert: a client certificate is shown over TLS")]
    CertWithoutTls,
    /// An `http://` endpoint while `--etcd-cacert` asks for TLS.
    #[error("--etcd {url}: plaintext, but --etcd-cacert asks for TLS; use https://{rest}")]
    PlaintextUnderTls {
        /// The endpoint as given.
        url: String,
        /// Its host and port.
        rest: String,
    },
    /// An `https://` endpoint without `--etcd-cacert`.
    #[error("--etcd {0}: TLS needs --etcd-cacert FILE, the CA that signed etcd's certificate")]
    TlsWithoutCa(String),
    /// `--etcd-user NAME:PASSWORD` (etcdctl's habit); not echoed.
    #[error(
        "--etcd-user takes a name only; the password goes in --etcd-password-file FILE or \
         {PASSWORD_ENV}"
    )]
    PasswordInUser,
    /// `--etcd-password-file` without a user.
    #[error("--etcd-password-file needs --etcd-user")]
    PasswordFileWithoutUser,
    /// The password variable set without a user.
    #[error("{PASSWORD_ENV} is set but --etcd-user is not")]
    PasswordEnvWithoutUser,
    /// A user without a password.
    #[error("--etcd-user {0}: no password; give --etcd-password-file FILE or set {PASSWORD_ENV}")]
    NoPassword(String),
    /// The password variable set but empty.
    #[error("{PASSWORD_ENV} is empty")]
    EmptyPasswordEnv,
    /// A certificate, key or password file that cannot be read or used, after the flag that
    /// names it (the message names the file).
    #[error("{flag} {message}")]
    File {
        /// `--etcd-cacert`, `--etcd-cert`, `--etcd-key` or `--etcd-password-file`.
        flag: &'static str,
        /// What is wrong, the file first.
        message: String,
    },
}

impl From<EndpointError> for AccessError {
    fn from(e: EndpointError) -> AccessError {
        AccessError::Endpoint(e)
    }
}

/// `--etcd h:x` as the flag and its value; `--etcd: no endpoint given` as the flag and a
/// sentence.
fn separator(e: &EndpointError) -> &'static str {
    match e {
        EndpointError::NotAnAddress(_) => " ",
        _ => ": ",
    }
}

type Result<T, E = AccessError> = std::result::Result<T, E>;

/// A file error for `flag`.
fn file_error(flag: &'static str, message: impl Into<String>) -> AccessError {
    AccessError::File {
        flag,
        message: message.into(),
    }
}

/// The credentials as given on the command line. Its `Debug` leaves the password out.
#[derive(Clone, Default)]
pub struct Credentials {
    /// `--etcd-cacert`: the CA certificates (PEM) etcd's certificate is checked against.
    pub cacert: Option<PathBuf>,
    /// `--etcd-cert`: the client certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// `--etcd-key`: the client certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// `--etcd-user`.
    pub user: Option<String>,
    /// `--etcd-password-file`.
    pub password_file: Option<PathBuf>,
    /// The password from [`PASSWORD_ENV`], when no file is given.
    pub password_env: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("cacert", &self.cacert)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("user", &self.user)
            .field("password_file", &self.password_file)
            .field(
                "password_env",
                &self.password_env.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Where etcd is and how to talk to it.
#[derive(Debug, Clone)]
pub struct Access {
    endpoints: Vec<String>,
    credentials: Credentials,
}

impl Access {
    /// Checks `urls` (`--etcd`, comma separated or repeated) against `credentials`: which
    /// settings go together. The files are read at each connection; [`Access::check_files`]
    /// reads them now.
    pub fn new(urls: &[String], credentials: Credentials) -> Result<Access> {
        let c = &credentials;
        let tls = c.cacert.is_some();
        match (&c.cert, &c.key) {
            (Some(_), None) => return Err(AccessError::CertWithoutKey),
            (None, Some(_)) => return Err(AccessError::KeyWithoutCert),
            (Some(_), Some(_)) if !tls => return Err(AccessError::CertWithoutTls),
            _ => {}
        }
        let endpoints = with_schemes(endpoints(urls)?, tls);
        for u in &endpoints {
            if tls && let Some(rest) = u.strip_prefix("http://") {
                return Err(AccessError::PlaintextUnderTls {
                    url: u.clone(),
                    rest: rest.to_owned(),
                });
            }
            if !tls && u.starts_with("https://") {
                return Err(AccessError::TlsWithoutCa(u.clone()));
            }
        }
        if c.user.as_ref().is_some_and(|u| u.contains(':')) {
            // etcdctl's --user takes NAME:PASSWORD; here the value is not echoed, since it
            // may hold a password.
            return Err(AccessError::PasswordInUser);
        }
        match (&c.user, &c.password_file, &c.password_env) {
            (None, Some(_), _) => return Err(AccessError::PasswordFileWithoutUser),
            (None, None, Some(_)) => return Err(AccessError::PasswordEnvWithoutUser),
            (Some(u), None, None) => return Err(AccessError::NoPassword(u.clone())),
            (Some(_), None, Some(p)) if p.is_empty() => return Err(AccessError::EmptyPasswordEnv),
            _ => {}
        }
        Ok(Access {
            endpoints,
            credentials,
        })
    }

    /// Reads every certificate, key and password file now, as a connection would: what
    /// `gtd push` and `gtd fleet` do before anything else. (`gtd run` leaves it to its first
    /// connection, so that a node whose files are not there yet starts from its cache.)
    pub fn check_files(&self) -> Result<()> {
        self.options(true).map(|_| ())
    }

    /// Plaintext access to `urls`, no user.
    pub fn plain(urls: &[String]) -> Result<Access> {
        Access::new(urls, Credentials::default())
    }

    /// The members' URLs (`https://` for all when TLS is on).
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Whether connections use TLS.
    pub fn tls(&self) -> bool {
        self.credentials.cacert.is_some()
    }

    /// The user etcd knows the client as, if any.
    pub fn user(&self) -> Option<&str> {
        self.credentials.user.as_deref()
    }

    /// Whether `why` a member failed may be its refusal of the client's certificate (or of
    /// none): over TLS, etcd (`--client-cert-auth`) ends the handshake with an alert, or
    /// closes the connection before the client has read the alert, which the client then
    /// sees as the connection closed, reset, or its next write failing. (Only the alert is
    /// sure: a member going away closes connections too.)
    fn closes(&self, why: &str) -> bool {
        self.tls() && (dropped(why) || certificate_alert(why))
    }

    /// What to try, given every member's failure.
    pub(crate) fn hint<'a>(
        &self,
        mut reasons: impl Iterator<Item = &'a str> + Clone,
    ) -> Option<&'static str> {
        if !self.tls() {
            // A TLS-only member answers a plaintext HTTP/2 preface with an HTTP/1 400 and
            // closes: the client's write fails, or it reads the end.
            reasons
                .all(dropped)
                .then_some("if etcd serves clients over TLS, use https:// and --etcd-cacert")
        } else if reasons
            .clone()
            .any(|r| r.contains("certificate not valid for name"))
        {
            Some(
                "etcd's certificate does not list the name or address given in --etcd: use \
                 one it lists",
            )
        } else if reasons
            .clone()
            .any(|r| r.contains("invalid peer certificate"))
        {
            Some(
                "etcd's certificate does not verify against --etcd-cacert: give the CA that \
                 signed it",
            )
        } else if !reasons.all(|r| self.closes(r)) {
            None
        } else if self.credentials.cert.is_none() {
            Some(
                "etcd closes TLS connections without a client certificate when it runs with \
                 --client-cert-auth: give --etcd-cert and --etcd-key",
            )
        } else {
            Some(
                "etcd may have refused the client certificate: it must be signed by a CA of \
                 etcd's --trusted-ca-file and allow client authentication",
            )
        }
    }

    /// The client's options for one connection, from the files as they are now; with the
    /// user (and its password) when `user` and one is given.
    pub(crate) fn options(&self, user: bool) -> Result<ConnectOptions> {
        let c = &self.credentials;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(
                std::time::Duration::from_secs(2),
                std::time::Duration::from_secs(2),
            )
            .with_require_leader(true);
        if let Some(ca) = &c.cacert {
            // Checked as the data plane's certificates are (gtd_core::pem), then handed to tonic
            // as the PEM text it takes.
            gtd_core::pem::roots(ca).map_err(|e| file_error("--etcd-cacert", e))?;
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(pem("--etcd-cacert", ca)?));
            if let (Some(cert), Some(key)) = (&c.cert, &c.key) {
                gtd_core::pem::certified(cert, key, &gtd_core::pem::provider()).map_err(
                    |(faulty, e)| match faulty {
                        gtd_core::pem::Faulty::Cert => file_error("--etcd-cert", e),
                        gtd_core::pem::Faulty::Key => file_error("--etcd-key", e),
                    },
                )?;
                tls = tls.identity(Identity::from_pem(
                    pem("--etcd-cert", cert)?,
                    pem("--etcd-key", key)?,
                ));
            }
            options = options.with_tls(tls);
        }
        if let Some(user) = c.user.as_ref().filter(|_| user) {
            let password = match (&c.password_file, &c.password_env) {
                (Some(f), _) => password_from(f)?,
                (None, Some(p)) => p.clone(),
                (None, None) => unreachable!("checked by Access::new"),
            };
            // etcd's tokens expire (simple tokens after 5 minutes by default): the client
            // renews one on the first request that meets it expired, so a node's watch and
            // lease outlive it.
            options = options.with_user(user.clone(), password);
        }
        Ok(options)
    }
}

/// A PEM file's text (already checked by gtd_core::pem), the file named by `flag`.
fn pem(flag: &'static str, path: &Path) -> Result<Vec<u8>> {
    gtd_core::pem::pem_bytes(path).map_err(|e| file_error(flag, e))
}

/// A password file's first line, exactly, without its line ending (`\n`, `\r\n` or `\r`).
fn password_from(path: &Path) -> Result<String> {
    // A regular file of at most 4 KiB (not a FIFO or a device to read forever).
    const FLAG: &str = "--etcd-password-file";
    let shown = path.display();
    let text = gtd_core::files::read(path, 4096)
        .map_err(|e| file_error(FLAG, format!("{shown}: {e}")))
        .and_then(|b| {
            String::from_utf8(b).map_err(|_| file_error(FLAG, format!("{shown}: not UTF-8")))
        })?;
    let password = text.split(['\n', '\r']).next().unwrap_or_default();
    if password.is_empty() {
        return Err(file_error(
            FLAG,
            format!("{shown}: its first line is empty (the password is the first line)"),
        ));
    }
    Ok(password.to_owned())
}

/// `--etcd` values: `host:port`, `http://host:port` or `https://host:port`, comma separated
/// or repeated; each checked, none echoed that holds user info (a password on the command
/// line).
pub fn endpoints(urls: &[String]) -> Result<Vec<String>, EndpointError> {
    let list: Vec<String> = urls
        .iter()
        .flat_map(|u| u.split(','))
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    if list.is_empty() {
        return Err(EndpointError::None);
    }
    // Before any other check, whose message would echo the endpoint.
    if list.iter().any(|u| u.contains('@')) {
        return Err(EndpointError::UserInfo);
    }
    for u in &list {
        let rest = u
            .strip_prefix("https://")
            .or_else(|| u.strip_prefix("http://"))
            .unwrap_or(u);
        if rest
            .rsplit_once(':')
            .is_none_or(|(_, p)| p.parse::<u16>().is_err())
        {
            return Err(EndpointError::NotAnAddress(u.clone()));
        }
    }
    Ok(list)
}

/// Checked endpoints with their schemes: a bare `host:port` is `https://` under TLS (`tls`, or
/// another endpoint's scheme), else `http://`.
fn with_schemes(list: Vec<String>, tls: bool) -> Vec<String> {
    let tls = tls || list.iter().any(|u| u.starts_with("https://"));
    list.into_iter()
        .map(|u| {
            if u.contains("://") {
                u
            } else if tls {
                format!("https://{u}")
            } else {
                format!("http://{u}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(s: &str) -> Vec<String> {
        vec![s.to_owned()]
    }

    #[test]
    fn endpoints_take_every_spelling_and_refuse_what_is_not_an_address() {
        let a = Access::plain(&urls("127.0.0.1:2379, http://127.0.0.1:2381,,")).unwrap();
        assert_eq!(
            a.endpoints(),
            ["http://127.0.0.1:2379", "http://127.0.0.1:2381"]
        );
        assert!(!a.tls());
        for bad in ["", "127.0.0.1", "http://host:port", "https://h:99999"] {
            assert!(Access::plain(&urls(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn tls_and_plaintext_are_not_mixed_and_each_flag_says_what_it_needs() {
        let err = |u: &str, c: Credentials| format!("{:#}", Access::new(&urls(u), c).unwrap_err());
        assert!(err("https://h:1", Credentials::default()).contains("needs --etcd-cacert"));
        let ca = Credentials {
            cacert: Some("/nonexistent/ca.pem".into()),
            ..Credentials::default()
        };
        assert!(err("http://h:1", ca.clone()).contains("use https://h:1"));
        let later = Access::new(&urls("https://h:1"), ca.clone()).unwrap();
        let e = format!("{:#}", later.check_files().unwrap_err());
        assert!(
            e.contains("--etcd-cacert /nonexistent/ca.pem: No such file"),
            "{e}"
        );
        let cert_only = Credentials {
            cert: Some("c.pem".into()),
            ..ca
        };
        assert!(err("https://h:1", cert_only).contains("needs --etcd-key"));
        let user = Credentials {
            user: Some("root".into()),
            ..Credentials::default()
        };
        assert!(err("h:1", user).contains(PASSWORD_ENV));
        let file_only = Credentials {
            password_file: Some("p".into()),
            ..Credentials::default()
        };
        assert!(err("h:1", file_only).contains("needs --etcd-user"));
        let env_only = Credentials {
            password_env: Some("pw".into()),
            ..Credentials::default()
        };
        assert!(err("h:1", env_only).contains("--etcd-user is not"));
        let empty = Credentials {
            user: Some("root".into()),
            password_env: Some(String::new()),
            ..Credentials::default()
        };
        assert!(err("h:1", empty).contains("is empty"));
    }

    #[test]
    fn every_way_a_refused_handshake_shows_gets_the_certificate_hint() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        let tls = Access::new(
            &urls("a:1"),
            Credentials {
                cacert: Some(ca),
                ..Credentials::default()
            },
        )
        .unwrap();
        // As seen from etcd 3.4 with --client-cert-auth, one member to the next.
        let seen = [
            "https://a:1: connection closed",
            "https://a:2: stream closed because of a broken pipe",
            "https://a:3: received fatal alert: BadCertificate",
            "https://a:4: connection reset",
            "https://a:5: tls handshake eof",
            "https://a:6: received fatal alert: CertificateRequired",
        ];
        let hint = tls.hint(seen.iter().copied()).unwrap();
        assert!(hint.contains("give --etcd-cert and --etcd-key"), "{hint}");
        // One member that timed out is not a certificate matter.
        let mixed = ["https://a:1: connection closed", "https://a:2: timed out"];
        assert_eq!(tls.hint(mixed.iter().copied()), None);
        // Plaintext to a TLS member.
        let plain = Access::plain(&urls("a:1")).unwrap();
        let pipe = ["http://a:1: stream closed because of a broken pipe"];
        assert!(
            plain
                .hint(pipe.iter().copied())
                .unwrap()
                .contains("https://")
        );
    }

    #[test]
    fn a_password_given_where_it_does_not_belong_is_refused_without_being_echoed() {
        let secret = "hunter2";
        let etcdctl_habit = Credentials {
            user: Some(format!("root:{secret}")),
            password_env: Some("x".into()),
            ..Credentials::default()
        };
        let e = format!(
            "{:#}",
            Access::new(&urls("h:1"), etcdctl_habit).unwrap_err()
        );
        assert!(e.contains("a name only") && !e.contains(secret), "{e}");
        let e = format!(
            "{:#}",
            Access::plain(&urls(&format!("https://root:{secret}@h:1"))).unwrap_err()
        );
        assert!(e.contains("user info") && !e.contains(secret), "{e}");
        let c = Credentials {
            user: Some("root".into()),
            password_env: Some(secret.into()),
            ..Credentials::default()
        };
        let debug = format!("{:?}", Access::new(&urls("h:1"), c).unwrap());
        assert!(
            !debug.contains(secret) && debug.contains("redacted"),
            "{debug}"
        );
    }

    #[test]
    fn files_are_read_when_given_and_their_contents_checked() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let c = Credentials {
            cacert: Some(junk.clone()),
            ..Credentials::default()
        };
        let a = Access::new(&urls("h:1"), c).unwrap();
        let e = format!("{:#}", a.check_files().unwrap_err());
        assert!(e.contains("no certificate found"), "{e}");

        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        assert_eq!(password_from(&pw).unwrap(), "s3cret");
        std::fs::write(&pw, "s3cret\r").unwrap();
        assert_eq!(password_from(&pw).unwrap(), "s3cret");
        std::fs::write(&pw, " s3cret \r\n").unwrap();
        assert_eq!(password_from(&pw).unwrap(), " s3cret ");
        std::fs::write(&pw, "\nsecond").unwrap();
        assert!(format!("{:#}", password_from(&pw).unwrap_err()).contains("first line is empty"));

        // A bare host:port turns https:// when another endpoint is.
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        let c = Credentials {
            cacert: Some(ca),
            ..Credentials::default()
        };
        let a = Access::new(&urls("https://a:1,b:2"), c.clone()).unwrap();
        assert_eq!(a.endpoints(), ["https://a:1", "https://b:2"]);
        assert!(a.tls());
        // All bare with a CA: all TLS.
        let a = Access::new(&urls("a:1"), c.clone()).unwrap();
        assert_eq!(a.endpoints(), ["https://a:1"]);

        // A client certificate with another certificate's key: said before connecting.
        let other = rcgen::generate_simple_self_signed(vec!["client".into()]).unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, other.cert.pem()).unwrap();
        let another_key = rcgen::KeyPair::generate().unwrap();
        std::fs::write(&key, another_key.serialize_pem()).unwrap();
        let mismatched = Credentials {
            cert: Some(cert),
            key: Some(key),
            ..c
        };
        let e = Access::new(&urls("a:1"), mismatched).unwrap().check_files();
        let e = format!("{:#}", e.unwrap_err());
        assert!(
            e.starts_with("--etcd-key") && e.contains("does not belong to the certificate"),
            "{e}"
        );
    }
}
