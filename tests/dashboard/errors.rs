//! Errors on the page (issue 31 item 3): an endpoint that refuses every connection shows its
//! connect failures of the last minute in the errors column with a red bar, the healthy one
//! none; the timeline shows the passive mark with its cause and the failover it caused.

use super::*;

/// The errors cell of endpoint `addr` of group `group`, as JS.
fn cell(group: &str, addr: SocketAddr) -> String {
    format!("document.querySelector('[data-group=\"{group}\"] [data-endpoint=\"{addr}\"] .errors')")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_errors_column_and_the_timeline_show_a_failing_endpoint() {
    let Some(exe) = chromium_or_skip("the_errors_column_and_the_timeline_show_a_failing_endpoint")
    else {
        return;
    };
    // Beijing's one endpoint refuses (the default max_fails = 1 marks it at once, and the
    // listener fails over to Shanghai); connections retried there are served.
    let refusing = Refusing::new();
    let bj = refusing.0;
    let (sh, h) = named_backend("sh-1").await;
    let _backends = Aborted(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(start(&config(dir.path(), bj, sh)).await);
    let load = Load::start(listener_addr(&node, "t").await);
    let admin = node.admin_addr();
    tokio::task::spawn_blocking(move || {
        let browser = Browser::start(&exe);
        let mut page = browser.page();
        page.navigate(&format!("http://{admin}/"));
        let bad = cell("beijing", bj);
        page.wait_for(
            "the refusing endpoint's errors, red, with a full bar",
            &format!(
                "(() => {{ const c = {bad}; if (!c) return false; const bar = c.querySelector('.errbar');
                   return +c.dataset.errors > 0 && c.classList.contains('bad')
                     && c.textContent.includes('errors/min') && +bar.dataset.w === 100
                     && bar.getBoundingClientRect().width > 0
                     && getComputedStyle(bar).backgroundColor === 'rgb(198, 40, 40)'; }})()"
            ),
        );
        // What the page shows comes from /status: connect failures only.
        let doc = status_at(admin);
        let errors = doc.listeners[0]
            .group("beijing")
            .unwrap()
            .endpoint(&bj.to_string())
            .unwrap()
            .errors;
        assert!(
            errors.connect > 0 && errors.total == errors.connect,
            "{errors:?}"
        );
        let good = cell("shanghai", sh);
        page.wait_for(
            "the healthy endpoint without errors",
            &format!(
                "(() => {{ const c = {good}; return !!c && c.dataset.errors === '0'
                   && !c.classList.contains('bad') && c.textContent.includes('no errors'); }})()"
            ),
        );
        // The timeline: the mark with its cause, and the failover it caused.
        page.wait_for(
            "the failover on the timeline",
            "[...document.querySelectorAll('#events [data-kind=\"failover\"]')].some(e =>
               e.querySelector('.where').textContent === 't / beijing'
               && e.querySelector('.what').textContent.includes('to shanghai 100 %'))",
        );
        page.wait_for(
            "the mark and its cause on the timeline",
            &format!(
                "[...document.querySelectorAll('#events [data-kind=\"passive\"]')].some(e =>
                   e.querySelector('.where').textContent === 't / beijing / {bj}'
                   && e.querySelector('.what').textContent.toLowerCase().includes('connection refused'))"
            ),
        );
        assert_eq!(
            page.eval("document.getElementById('events').hidden"),
            json!(false)
        );
        screenshot(&mut page, "dashboard-errors.png");
        assert!(page.problems.is_empty(), "{:#?}", page.problems);
    })
    .await
    .expect("the browser part passed");
    drop(load);
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
