//! HTTPS with SNI and ALPN, TLS and mTLS to endpoints, certificates that do not load.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gtd::node::Node;
use http::Request;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub(crate) fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

pub(crate) fn server_tls(
    cert: &str,
    key: &str,
    client_ca: Option<&Pki>,
) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(pki) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(pki.roots()),
                provider(),
            )
            .build()
            .unwrap(),
        ),
        None => builder.with_no_client_auth(),
    };
    Arc::new(builder.with_single_cert(chain, key).unwrap())
}

/// Connects over TLS with this SNI and ALPN list; returns the stream.
pub(crate) async fn tls_connect(
    addr: SocketAddr,
    pki: &Pki,
    sni: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .expect("TLS handshake with gtd")
}

/// One GET over an established connection, HTTP/2 or HTTP/1.1; (status, x-backend, body).
pub(crate) async fn get_over(
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    h2: bool,
    host: &str,
    path: &str,
) -> (u16, String, String) {
    let io = TokioIo::new(stream);
    let req = Request::get(format!("https://{host}{path}"))
        .header("host", host)
        .body(empty())
        .unwrap();
    let resp = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = req;
        req.headers_mut().remove("host");
        sender.send_request(req).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let mut req = req;
        *req.uri_mut() = path.parse().unwrap();
        sender.send_request(req).await.unwrap()
    };
    let status = resp.status().as_u16();
    let backend = h(resp.headers(), "x-backend").to_owned();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, backend, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_sni_alpn_and_tls_with_mtls_to_endpoints() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // gtd's certificates: the first is the default, the second serves *.b.test by SNI.
    let (default_cert, default_key) = pki.issue(&["default.test"], false);
    let (wild_cert, wild_key) = pki.issue(&["*.b.test"], false);
    write("default.pem", &default_cert);
    write("default.key", &default_key);
    write("wild.pem", &wild_cert);
    write("wild.key", &wild_key);
    write("ca.pem", &pki.ca_pem());
    // gtd's client certificate towards endpoints that require one.
    let (client_cert, client_key) = pki.issue(&["gtd.test"], true);
    write("client.pem", &client_cert);
    write("client.key", &client_key);
    // Endpoints: one requiring a client certificate (mTLS), one plain TLS.
    let (backend_cert, backend_key) = pki.issue(&["backend.test"], false);
    let mtls = Backend::start_with(
        "mtls",
        200,
        vec![],
        Some(server_tls(&backend_cert, &backend_key, Some(&pki))),
    )
    .await;
    let tls_only = Backend::start_with(
        "tls",
        200,
        vec![],
        Some(server_tls(&backend_cert, &backend_key, None)),
    )
    .await;

    let routes = "\
tls = { certs = [{ cert = \"default.pem\", key = \"default.key\" }, { cert = \"wild.pem\", key = \"wild.key\" }] }
[[listener.route]]
path_prefix = [\"/nocert/\"]
groups = [\"nocert\"]
[[listener.route]]
path_prefix = [\"/plain/\"]
groups = [\"plain\"]
[[listener.route]]
path_prefix = [\"/system/\"]
groups = [\"system\"]
";
    let cfg = write_config(
        dir.path(),
        &listener(
            "secure",
            "https",
            routes,
            &format!(
                "{}{}{}{}",
                group(
                    "mtls",
                    "cn-beijing",
                    100.0,
                    "tls = { ca = \"ca.pem\", sni = \"backend.test\", client_cert = \"client.pem\", client_key = \"client.key\" }",
                    &[(mtls.addr, "max_fails = 0")],
                ),
                // Same endpoint without a client certificate: its handshake is refused.
                group(
                    "nocert",
                    "cn-shanghai",
                    100.0,
                    "tls = { ca = \"ca.pem\", sni = \"backend.test\" }",
                    &[(mtls.addr, "max_fails = 0")],
                ),
                group(
                    "plain",
                    "cn-hangzhou",
                    100.0,
                    "tls = { insecure_skip_verify = true, min_version = \"1.3\" }",
                    &[(tls_only.addr, "")],
                ),
                // No `ca`: verified with the system bundle, which does not hold the test CA.
                group(
                    "system",
                    "cn-shenzhen",
                    100.0,
                    "tls = { sni = \"backend.test\" }",
                    &[(tls_only.addr, "max_fails = 0")],
                ),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "secure").await;

    // SNI picks the wildcard certificate; ALPN offers h2 first and gets it.
    let s = tls_connect(addr, &pki, "x.b.test", &[b"h2", b"http/1.1"]).await;
    let (_, conn) = s.get_ref();
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(
        conn.peer_certificates().unwrap()[0].as_ref(),
        der_of(&wild_cert)
    );
    let (status, backend, _) = get_over(s, true, "x.b.test", "/hello").await;
    assert_eq!(
        (status, backend.as_str()),
        (200, "mtls"),
        "mTLS to the endpoint"
    );

    // Another name gets the default certificate; an HTTP/1.1-only client gets HTTP/1.1.
    let s = tls_connect(addr, &pki, "default.test", &[b"http/1.1"]).await;
    let (_, conn) = s.get_ref();
    assert_eq!(conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(
        conn.peer_certificates().unwrap()[0].as_ref(),
        der_of(&default_cert)
    );
    let (status, backend, _) = get_over(s, false, "default.test", "/plain/x").await;
    assert_eq!(
        (status, backend.as_str()),
        (200, "tls"),
        "TLS 1.3, unverified"
    );

    // A plaintext request on the HTTPS port is told so (400, as nginx does), not just cut off;
    // the listener goes on serving TLS.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: default.test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), plain.read_to_string(&mut answer))
        .await
        .expect("answered and closed")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.ends_with("this port speaks HTTPS: the plain HTTP request was not read\n"));

    // Verified against the system bundle, the endpoint's private CA is unknown: 502.
    let s = tls_connect(addr, &pki, "default.test", &[b"http/1.1"]).await;
    let (status, _, _) = get_over(s, false, "default.test", "/system/x").await;
    assert_eq!(status, 502);

    // Without a client certificate the endpoint refuses the handshake: 502.
    let s = tls_connect(addr, &pki, "default.test", &[b"http/1.1"]).await;
    let (status, _, _) = get_over(s, false, "default.test", "/nocert/x").await;
    assert_eq!(status, 502);

    // A certificate that does not parse fails a reload, naming the file; the running config
    // stays and keeps serving.
    std::fs::write(dir.path().join("wild.pem"), "not a certificate\n").unwrap();
    let err = node.reload().await.unwrap_err().to_string();
    assert!(err.contains("wild.pem"), "{err}");
    let s = tls_connect(addr, &pki, "x.b.test", &[b"h2"]).await;
    let (status, _, _) = get_over(s, true, "x.b.test", "/").await;
    assert_eq!(status, 200);
    node.shutdown().await;

    // And a node cannot start with it.
    let err = Node::start(options(&cfg)).await.err().expect("start fails");
    assert!(format!("{err:#}").contains("wild.pem"), "{err:#}");
    // A key that does not match its certificate is named too.
    write("wild.pem", &wild_cert);
    write("wild.key", &default_key);
    let err = Node::start(options(&cfg)).await.err().expect("start fails");
    assert!(format!("{err:#}").contains("wild.key"), "{err:#}");
}
