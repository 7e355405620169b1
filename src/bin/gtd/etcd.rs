//! The etcd options `gtd push`, `gtd fleet` and `gtd run --etcd` share: the endpoints, the
//! credentials, the prefix, and `gtd run`'s fleet settings; and the small runtime the fleet
//! commands run on.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

/// The environment variable the fleet commands read their etcd endpoints from when no
/// `--etcd` gives them (as etcdctl reads `ETCDCTL_ENDPOINTS`).
pub(crate) const ENDPOINTS_ENV: &str = "GTD_ETCD";

/// `--etcd`, its credentials and `--prefix` (`gtd push`, `gtd fleet`, `gtd drain`): global, so
/// that they are taken after a subcommand too (`gtd fleet history --etcd URL`); the endpoints
/// from [`ENDPOINTS_ENV`] when no `--etcd` is given.
#[derive(clap::Args)]
pub(crate) struct Etcd {
    /// etcd endpoints: host:port, http://host:port or https://host:port, comma separated.
    // Not `required`: clap refuses a global argument that is (checked in `checked`).
    #[arg(long, value_name = "URL,...", value_parser = endpoints, env = ENDPOINTS_ENV, global = true)]
    etcd: Vec<Endpoints>,
    #[command(flatten)]
    credentials: Credentials,
    /// The key prefix the fleet lives under.
    #[arg(long, default_value = gtd::fleet::DEFAULT_PREFIX, value_parser = prefix, global = true)]
    prefix: String,
}

impl Etcd {
    /// The prefix and the access, with every credentials file read now (`gtd push`, `gtd
    /// fleet`: a mistake is reported before anything connects).
    pub(crate) fn checked(self) -> anyhow::Result<(String, gtd::fleet::Access)> {
        if self.etcd.is_empty() {
            anyhow::bail!(
                "no etcd endpoints: give --etcd URL,... or set {ENDPOINTS_ENV} (host:port, \
                 http://host:port or https://host:port, comma separated)"
            );
        }
        let access = self.credentials.access(&urls(self.etcd))?;
        access.check_files()?;
        Ok((self.prefix, access))
    }
}

/// One `--etcd` value: its endpoints, each checked (`host:port`, `http://host:port` or
/// `https://host:port`).
#[derive(Clone)]
pub(crate) struct Endpoints(Vec<String>);

/// Parses one `--etcd` value (comma separated endpoints). A value with user info (`user@host`,
/// a password on the command line) is left to [`gtd::fleet::Access::new`], which refuses it
/// without echoing it: clap's refusal would quote the value.
pub(crate) fn endpoints(s: &str) -> Result<Endpoints, gtd::fleet::access::EndpointError> {
    if s.contains('@') {
        return Ok(Endpoints(vec![s.to_owned()]));
    }
    gtd::fleet::access::endpoints(&[s.to_owned()]).map(Endpoints)
}

/// Every endpoint of every `--etcd` given, in order.
pub(crate) fn urls(given: Vec<Endpoints>) -> Vec<String> {
    given.into_iter().flat_map(|e| e.0).collect()
}

/// Parses `--prefix`: starts with `/`, no trailing `/`.
fn prefix(s: &str) -> Result<String, gtd::fleet::PrefixError> {
    gtd::fleet::normalise_prefix(s)
}

/// Parses `--lease-ttl`: a duration etcd can count in whole seconds, at least 2 s.
fn lease_ttl(s: &str) -> Result<Duration, String> {
    let ttl = gtd::config::parse_duration(s).map_err(|e| e.to_string())?;
    if ttl < Duration::from_secs(2) {
        return Err("at least 2s (etcd counts leases in seconds)".to_owned());
    }
    Ok(ttl)
}

/// How to show etcd who is asking: TLS (with a client certificate) and a user. Global, as
/// [`Etcd`]'s options (`gtd run` has no subcommand, so it makes no difference there).
#[derive(clap::Args)]
pub(crate) struct Credentials {
    /// TLS to etcd: the CA certificates (PEM) its certificate is checked against.
    #[arg(long, value_name = "FILE", global = true)]
    etcd_cacert: Option<PathBuf>,
    /// A client certificate (PEM chain) to show etcd (its --client-cert-auth); with
    /// --etcd-key.
    #[arg(long, value_name = "FILE", global = true)]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", global = true)]
    etcd_key: Option<PathBuf>,
    /// An etcd user (a cluster with `etcdctl auth enable`); its password from
    /// --etcd-password-file or the GTD_ETCD_PASSWORD environment variable.
    #[arg(long, value_name = "NAME", global = true)]
    etcd_user: Option<String>,
    /// A file whose first line is --etcd-user's password.
    #[arg(long, value_name = "FILE", global = true)]
    etcd_password_file: Option<PathBuf>,
}

impl Credentials {
    /// The first flag given, if any.
    fn given(&self) -> Option<&'static str> {
        [
            (self.etcd_cacert.is_some(), "--etcd-cacert"),
            (self.etcd_cert.is_some(), "--etcd-cert"),
            (self.etcd_key.is_some(), "--etcd-key"),
            (self.etcd_user.is_some(), "--etcd-user"),
            (self.etcd_password_file.is_some(), "--etcd-password-file"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// The access to `urls` with these credentials (files read at each connection).
    fn access(self, urls: &[String]) -> anyhow::Result<gtd::fleet::Access> {
        Ok(gtd::fleet::Access::new(
            urls,
            gtd::fleet::Credentials {
                cacert: self.etcd_cacert,
                cert: self.etcd_cert,
                key: self.etcd_key,
                user: self.etcd_user,
                password_file: self.etcd_password_file,
                password_env: std::env::var(gtd::fleet::access::PASSWORD_ENV).ok(),
            },
        )?)
    }
}

/// `gtd run`'s fleet settings (with `--etcd`).
#[derive(clap::Args)]
pub(crate) struct NodeFleet {
    /// The key prefix the fleet lives under (default /gtd).
    #[arg(long, value_parser = prefix)]
    prefix: Option<String>,
    /// Where the served revision is cached, for a start while etcd is down (default
    /// `$STATE_DIRECTORY/revision-REGION.json`, else `./gtd-revision-REGION.json`).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// This node's id in the registry (default REGION@HOST:ADMIN_PORT).
    #[arg(long)]
    node_id: Option<String>,
    /// The registry lease: a node that dies leaves the registry within this (default 10s).
    #[arg(long, value_name = "TTL", value_parser = lease_ttl)]
    lease_ttl: Option<Duration>,
    #[command(flatten)]
    credentials: Credentials,
}

impl NodeFleet {
    /// The first fleet flag given, if any (each needs `--etcd`: clap's `requires` cannot say
    /// so, since `--etcd` conflicts with `--config`, which has a default).
    pub(crate) fn given(&self) -> Option<&'static str> {
        [
            (self.prefix.is_some(), "--prefix"),
            (self.cache.is_some(), "--cache"),
            (self.node_id.is_some(), "--node-id"),
            (self.lease_ttl.is_some(), "--lease-ttl"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
        .or_else(|| self.credentials.given())
    }

    /// The node's fleet options: etcd at `urls`, for a node of `region`; `state_directory`
    /// is systemd's `$STATE_DIRECTORY`, where the cache goes by default.
    pub(crate) fn options(
        self,
        urls: &[String],
        region: &str,
        state_directory: Option<&str>,
    ) -> anyhow::Result<gtd::node::fleet::Options> {
        let cache = self.cache.unwrap_or_else(|| {
            let name = format!("revision-{region}.json");
            match state_directory {
                // systemd's StateDirectory= (a list when several are set: the first).
                Some(dirs) => PathBuf::from(dirs.split(':').next().unwrap_or(".")).join(name),
                None => PathBuf::from(format!("gtd-{name}")),
            }
        });
        Ok(gtd::node::fleet::Options {
            etcd: self.credentials.access(urls)?,
            prefix: self
                .prefix
                .unwrap_or_else(|| gtd::fleet::DEFAULT_PREFIX.to_owned()),
            cache,
            node_id: self.node_id,
            lease_ttl: self.lease_ttl.unwrap_or(Duration::from_secs(10)),
        })
    }
}

/// Runs a fleet command on a small runtime (again while etcd fails transiently: an election),
/// printing its outcome.
pub(crate) fn command<F, Fut, E>(work: F) -> anyhow::Result<ExitCode>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<gtd::fleet::outcome::Outcome, E>>,
    E: gtd::fleet::Classified + AsRef<dyn std::error::Error + Send + Sync + 'static>,
{
    // Warnings (users off on the cluster) to stderr, as one line each.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(crate::logs::filter("warn").0)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .try_init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match runtime.block_on(gtd::fleet::retrying(work)) {
        Ok(o) => {
            std::io::stderr().write_all(o.err.as_bytes())?;
            std::io::stdout().write_all(o.out.as_bytes())?;
            Ok(ExitCode::from(o.code))
        }
        Err(e) => {
            eprintln!("gtd: {}", gtd::fleet::describe(&e));
            Ok(ExitCode::FAILURE)
        }
    }
}
