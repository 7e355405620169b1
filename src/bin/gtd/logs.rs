//! `RUST_LOG` as operators wrote it before gtd's code became a workspace of crates.
//!
//! A log line's target is the module that wrote it. The modules used to be `gtd::node::…`,
//! `gtd::fleet::…`; they are now crates, so the same modules are `gtd_node::…`,
//! `gtd_fleet::…` (and `gtd_core::…` for config, split, balance, health, view). A directive
//! in the former spelling is translated, so a filter such as `info,gtd::node::l4=debug` keeps
//! selecting what it selected, and `gtd=debug` still covers all of gtd; the node says once at
//! start which directives it rewrote.

/// The crates a bare `gtd` directive covers.
const CRATES: [&str; 6] = [
    "gtd",
    "gtd_core",
    "gtd_sim",
    "gtd_fleet",
    "gtd_node",
    "gtd_demo",
];

/// The modules of gtd-core, which were `gtd::MODULE`.
const CORE: [&str; 10] = [
    "balance", "calendar", "config", "files", "geoip", "health", "pem", "regions", "split", "view",
];

/// `RUST_LOG`'s directives with former targets translated, and the (former, now) pairs.
pub(crate) fn translate(filter: &str) -> (String, Vec<(String, String)>) {
    let mut out = Vec::new();
    let mut changed = Vec::new();
    for directive in filter.split(',') {
        let end = directive.find(['[', '=']).unwrap_or(directive.len());
        let (target, rest) = directive.split_at(end);
        let target = target.trim();
        let now = if target == "gtd" && !rest.is_empty() {
            CRATES
                .iter()
                .map(|c| format!("{c}{rest}"))
                .collect::<Vec<_>>()
                .join(",")
        } else if let Some(path) = target.strip_prefix("gtd::") {
            let (first, tail) = path.split_once("::").map_or((path, ""), |(f, t)| (f, t));
            let krate = match first {
                "node" | "fleet" | "sim" | "demo" => format!("gtd_{first}"),
                m if CORE.contains(&m) => format!("gtd_core::{m}"),
                _ => {
                    out.push(directive.to_owned());
                    continue;
                }
            };
            let mapped = if tail.is_empty() {
                krate
            } else {
                format!("{krate}::{tail}")
            };
            format!("{mapped}{rest}")
        } else {
            out.push(directive.to_owned());
            continue;
        };
        changed.push((directive.trim().to_owned(), now.clone()));
        out.push(now);
    }
    (out.join(","), changed)
}

/// The filter for `RUST_LOG` (or `default` without it), translated, and what was rewritten.
pub(crate) fn filter(default: &str) -> (tracing_subscriber::EnvFilter, Vec<(String, String)>) {
    let (text, changed) = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => translate(&v),
        _ => (default.to_owned(), Vec::new()),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&text)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    (filter, changed)
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn former_targets_select_the_same_modules() {
        let (text, changed) = translate("info,gtd::node::l4=debug,rustls=error");
        assert_eq!(text, "info,gtd_node::l4=debug,rustls=error");
        assert_eq!(
            changed,
            [(
                "gtd::node::l4=debug".to_owned(),
                "gtd_node::l4=debug".to_owned()
            )]
        );
        assert_eq!(translate("gtd::node=trace").0, "gtd_node=trace");
        assert_eq!(
            translate("gtd::split::ranker=debug").0,
            "gtd_core::split::ranker=debug"
        );
        assert_eq!(translate("gtd::fleet[push]=info").0, "gtd_fleet[push]=info");
        assert_eq!(
            translate("warn,gtd=debug").0,
            "warn,gtd=debug,gtd_core=debug,gtd_sim=debug,gtd_fleet=debug,gtd_node=debug,gtd_demo=debug"
        );
        // Today's spelling, levels alone and other crates pass unchanged.
        for same in ["gtd_node::l4=debug", "debug", "hyper=warn", "gtdx=info"] {
            assert_eq!(translate(same), (same.to_owned(), Vec::new()));
        }
    }
}
