//! The `GET /explain` query.

use super::*;

/// A bad `/explain` query: the parameter and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{parameter}: {message}")]
pub struct QueryError {
    /// The parameter at fault.
    pub parameter: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The parameters of `GET /explain?listener=L&client=IP[&host=H&path=P&key=K&header=N:V…]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The listener's name.
    pub listener: String,
    /// The client address.
    pub client: IpAddr,
    /// The request's host.
    pub host: Option<String>,
    /// The request's path (its query cut off).
    pub path: Option<String>,
    /// What the hash key's request variables read.
    pub key: Option<String>,
    /// Request headers, `header=NAME:VALUE` each (repeatable), for rules and hash keys.
    pub headers: Vec<(String, String)>,
}

impl Query {
    /// Parses a query string (`a=b&c=d`, percent-encoded, `+` for a space). Pure: no node.
    pub fn parse(query: &str) -> Result<Query, QueryError> {
        let err = |parameter, message: String| QueryError { parameter, message };
        let (mut listener, mut client, mut host, mut path, mut key) =
            (None, None, None, None, None);
        let mut headers = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned();
            if name == "header" {
                headers
                    .push(crate::split::rules::parse_header(&value).map_err(|e| err("header", e))?);
                continue;
            }
            let slot = match name {
                "listener" => &mut listener,
                "client" => &mut client,
                "host" => &mut host,
                "path" => &mut path,
                "key" => &mut key,
                _ => continue,
            };
            *slot = Some(value);
        }
        let listener = listener
            .filter(|l| !l.is_empty())
            .ok_or_else(|| err("listener", "missing: give listener=NAME".to_owned()))?;
        let client = client
            .filter(|c| !c.is_empty())
            .ok_or_else(|| err("client", "missing: give client=IP".to_owned()))?;
        let client: IpAddr = client.parse().map_err(|_| {
            err(
                "client",
                format!("{client:?} is not an IP address (e.g. 203.0.113.9 or 2001:db8::1)"),
            )
        })?;
        let path = match path {
            Some(p) if !p.starts_with('/') => {
                return Err(err("path", format!("{p:?}: a path starts with /")));
            }
            Some(p) => Some(p.split_once('?').map_or(p.as_str(), |(p, _)| p).to_owned()),
            None => None,
        };
        Ok(Query {
            listener,
            client,
            host: host.filter(|h| !h.is_empty()),
            path,
            key,
            headers,
        })
    }
}
