//! `gtd explain LISTENER CLIENT`: asks a running node's admin server (`GET /explain`) why that
//! client's connection or request goes where it goes, and prints the answer for a person (or
//! the document itself with `--json`). docs/explain.md.

use std::io::Write as _;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// How long the whole exchange with the node may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// `gtd explain`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Explain {
    /// The listener.
    listener: String,
    /// The client address.
    client: IpAddr,
    /// HTTP: the request's Host, for forwarding rules.
    #[arg(long)]
    host: Option<String>,
    /// HTTP: the request's path, for forwarding rules and `$request_uri`.
    #[arg(long)]
    path: Option<String>,
    /// What the hash key's request variables read (`$request_uri`, `$http_*`, `$cookie_*`).
    #[arg(long)]
    key: Option<String>,
    /// HTTP: a request header NAME:VALUE, for rules that match headers and for hash keys
    /// (repeatable).
    #[arg(long = "header", value_name = "NAME:VALUE", value_parser = gtd::sim::parse_header)]
    headers: Vec<(String, String)>,
    /// The node's admin server (`[admin] bind`), HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:9100")]
    admin: String,
    /// Print the node's JSON document instead of the text.
    #[arg(long)]
    json: bool,
}

impl Explain {
    /// The request target of `GET /explain` for these arguments.
    fn target(&self) -> String {
        let mut target = format!(
            "/explain?listener={}&client={}",
            utf8_percent_encode(&self.listener, NON_ALPHANUMERIC),
            self.client
        );
        for (name, value) in [
            ("host", &self.host),
            ("path", &self.path),
            ("key", &self.key),
        ] {
            if let Some(v) = value {
                target += &format!("&{name}={}", utf8_percent_encode(v, NON_ALPHANUMERIC));
            }
        }
        for (name, value) in &self.headers {
            let header = format!("{name}:{value}");
            target += &format!("&header={}", utf8_percent_encode(&header, NON_ALPHANUMERIC));
        }
        target
    }

    /// Asks the node and prints its answer: exit status 0, or 1 when the node refused the
    /// question (its error on stderr).
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        let (status, body) = rt
            .block_on(async {
                tokio::time::timeout(TIMEOUT, get(&self.admin, &self.target())).await
            })
            .map_err(|_| anyhow::anyhow!("{}: no answer within {TIMEOUT:?}", self.admin))??;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            let error = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| text.trim().to_owned());
            writeln!(std::io::stderr().lock(), "gtd explain: {status}: {error}")?;
            return Ok(ExitCode::FAILURE);
        }
        let out = if self.json {
            text.into_owned()
        } else {
            let doc: gtd::view::Explain = serde_json::from_str(&text)
                .with_context(|| format!("{}: the answer is not an explanation", self.admin))?;
            doc.text()
        };
        std::io::stdout()
            .lock()
            .write_all(out.as_bytes())
            .context("writing the answer")?;
        Ok(ExitCode::SUCCESS)
    }
}

/// `GET target` from the admin server at `admin` (HOST:PORT, which the request's Host names,
/// as the admin server's guard wants): the status and the body.
async fn get(admin: &str, target: &str) -> anyhow::Result<(http::StatusCode, Bytes)> {
    let stream = tokio::net::TcpStream::connect(admin)
        .await
        .with_context(|| format!("connecting to the admin server at {admin}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("{admin}: HTTP handshake"))?;
    tokio::spawn(conn);
    let req = http::Request::get(target)
        .header(http::header::HOST, admin)
        .body(Empty::<Bytes>::new())
        .context("building the request")?;
    let res = sender
        .send_request(req)
        .await
        .with_context(|| format!("{admin}: GET {target}"))?;
    let status = res.status();
    let body = res
        .into_body()
        .collect()
        .await
        .with_context(|| format!("{admin}: reading the answer"))?
        .to_bytes();
    if body.is_empty() && !status.is_success() {
        bail!("{admin}: {status}");
    }
    Ok((status, body))
}
