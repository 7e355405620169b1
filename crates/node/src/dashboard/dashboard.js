// gtd dashboard (docs/design.md §7). Plain JS, no framework: polls this node's /status about
// once a second and /fleet every few seconds, and draws them. Everything shown comes from the
// node; text from it goes into the page as text (never as HTML).
"use strict";

(function () {
  const POLL_MS = 1000;
  const FLEET_MS = 5000;
  // Observed share: the growth of each endpoint's `served` counter between the newest poll
  // and the oldest one kept, at most this long ago (a few polls: one second of light traffic
  // is too few decisions to read a split from).
  const WINDOW_MS = 5000;
  const TOKEN_KEY = "gtd-admin-token";

  const $ = (id) => document.getElementById(id);
  // Samples of the served counters: {t, counts: Map("listener/group" -> n, "listener/group/id" -> n)}.
  let samples = [];
  let pendingToggle = null;
  let lastOk = 0;
  let fleetShown = false;
  let fleetOn = false;
  const EVENTS_MS = 2000;

  // ------------------------------------------------------------------ small helpers

  function h(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const num = (x) => (typeof x === "number" && isFinite(x) ? x : null);
  const arr = (x) => (Array.isArray(x) ? x : []);
  const pct = (x) => (num(x) === null ? "—" : x.toFixed(2) + " %");
  const clamp = (x) => Math.max(0, Math.min(100, num(x) || 0));
  function ago(ms) {
    if (num(ms) === null) return "";
    const s = Math.round((Date.now() - ms) / 1000);
    if (s < 0 || s > 3600) return new Date(ms).toLocaleTimeString();
    return s + " s ago";
  }
  function uptime(s) {
    if (num(s) === null) return "";
    if (s < 120) return s + " s";
    if (s < 7200) return Math.floor(s / 60) + " min";
    return Math.floor(s / 3600) + " h";
  }
  const endpointId = (e) => e.id || e.address;

  let noticeTimer = null;
  function notice(text, error) {
    const n = $("notice");
    n.hidden = !text;
    n.textContent = text || "";
    n.className = "notice" + (error ? " error" : "");
    clearTimeout(noticeTimer);
    if (text) noticeTimer = setTimeout(() => notice(""), error ? 20000 : 8000);
  }

  // ------------------------------------------------------------------ observed share

  function counts(status) {
    const m = new Map();
    for (const l of arr(status.listeners)) {
      for (const g of arr(l.groups)) {
        if (num(g.served) !== null) m.set(l.name + "/" + g.name, g.served);
        for (const e of arr(g.endpoints)) {
          if (num(e.served) !== null) m.set(l.name + "/" + g.name + "/" + endpointId(e), e.served);
        }
      }
    }
    return m;
  }

  function remember(status) {
    const now = Date.now();
    const c = counts(status);
    const prev = samples[samples.length - 1];
    // A counter that went down was started again (a reload removed and re-added its group, or
    // the node restarted): what came before says nothing about now.
    if (prev && [...c].some(([k, v]) => prev.counts.has(k) && v < prev.counts.get(k))) samples = [];
    samples.push({ t: now, counts: c });
    while (samples.length > 2 && now - samples[1].t >= WINDOW_MS) samples.shift();
  }

  // {groups: Map(name -> % or null), endpoints: Map("group/id" -> %), n, seconds} for a listener;
  // null when the node does not report `served` (an older node) or there is one sample only.
  function observed(l) {
    if (samples.length < 2) return null;
    const a = samples[0], b = samples[samples.length - 1];
    const delta = (k) => (b.counts.has(k) ? b.counts.get(k) - (a.counts.get(k) || 0) : null);
    const groups = new Map();
    const endpoints = new Map();
    let total = 0;
    for (const g of arr(l.groups)) {
      const d = delta(l.name + "/" + g.name);
      if (d === null) return null;
      groups.set(g.name, d);
      total += d;
      for (const e of arr(g.endpoints)) {
        const de = delta(l.name + "/" + g.name + "/" + endpointId(e));
        if (de !== null) endpoints.set(g.name + "/" + endpointId(e), de);
      }
    }
    const share = (d) => (total > 0 ? (100 * d) / total : null);
    for (const [k, d] of groups) groups.set(k, share(d));
    for (const [k, d] of endpoints) endpoints.set(k, share(d));
    return { groups, endpoints, n: total, seconds: (b.t - a.t) / 1000 };
  }

  // ------------------------------------------------------------------ listeners

  function modeReason(l) {
    const groups = arr(l.groups);
    const top = groups.find((g) => num(g.ratio) !== 0);
    const taker = groups.find((g) => (num(g.share) || 0) > 0);
    switch (l.mode) {
      case "cascade":
        return "ratios apply: each group takes its ratio of what the ones above left; the leftover is split equally";
      case "failover": {
        const who = top && top.healthy === false ? top.name : "the top group";
        if (top && top.healthy === false && top.drained)
          return who + " is drained (planned, not a failure); the groups below take its traffic";
        if (l.failover === "recompute") return who + " is unhealthy; the cascade runs over the healthy groups (recompute)";
        if (l.failover === "next-priority" && taker)
          return who + " is unhealthy; " + taker.name + " takes all traffic, ratios ignored (next-priority)";
        return who + " is unhealthy";
      }
      case "fail-open":
        return "no group is healthy; routing as if all were (fail_open = true), never to disabled, down or draining endpoints";
      case "no-route":
        if (groups.length && groups.every((g) => num(g.ratio) === 0)) return "every group has ratio 0";
        return "no group can take traffic: TCP connections closed, UDP dropped, HTTP answered 503";
      default:
        return "";
    }
  }

  function drainCause(d) {
    if (d && d.source === "fleet")
      return "drained fleet-wide by " + (d.by || "?") + (d.message ? " (" + d.message + ")" : "");
    if (d && d.source === "admin") return "drained through this node's admin API";
    return "drain = true in the config";
  }

  const drainAction = (e) => (e.drained_by?.source === "admin" ? "undrain" : "drain");

  function endpointState(e) {
    if (e.enabled === false) return ["disabled", "off", "disabled through the admin API"];
    if (e.down) return ["down", "off", "down = true in the config"];
    if (e.drain) return ["draining", "off", drainCause(e.drained_by) + ": no new traffic, what is bound to it finishes"];
    if (e.healthy === true) return [e.backup ? "backup" : "up", "up", ""];
    if (e.healthy === undefined) return ["?", "off", ""];
    if (e.dns_error) return ["unresolved", "down", e.dns_error];
    if (e.ejected)
      return ["ejected", "down", "ejected by outlier detection (5xx or gateway failures in a row) for " + Math.ceil(num(e.ejected_for_s) || 0) + " s more; ejection " + (e.ejections || 1)];
    if (e.passive_down)
      return ["failing", "down", "out after " + (e.fails || 0) + " failed attempts (max_fails), tried again after fail_timeout"];
    if (e.check && e.check.healthy === false) return ["failing", "down", "its health checks fail"];
    return ["unusable", "down", ""];
  }

  function checkText(e) {
    const c = e.check;
    if (!c) return e.check === null ? "no active check" : "";
    if (!c.result) return "not checked yet";
    let t = "last check " + c.result;
    if (c.reason && c.reason !== c.result) t += " (" + c.reason + ")";
    if (num(c.at_unix_ms) !== null) t += " · " + ago(c.at_unix_ms);
    // `passes_needed` is the run of passes (threshold × flap damping) that turns it healthy.
    if (c.healthy === false && num(c.passes_needed)) t += " · healthy again after " + c.passes_needed + " passes in a row";
    return t;
  }

  function bar(parts) {
    return h("div", { class: "track" }, parts.map(([cls, w, title]) =>
      h("div", { class: "seg " + cls, style: null, title, "data-w": w.toFixed(4) })));
  }

  // An endpoint's errors of the last minute (`errors` in /status): the count, what it is made
  // of, and a red bar as long as the count against the listener's worst endpoint.
  function errorsCell(e, worst) {
    const x = e.errors;
    if (!x || num(x.total) === null) return h("span", { class: "errors", "data-errors": "", text: "errors —" });
    const parts = [[x.status_5xx, "5xx"], [x.timeouts, "timeouts"], [x.connect, "connect failures"]]
      .map(([n, what]) => (num(n) || 0) + " " + what).join(", ");
    const w = worst > 0 ? (100 * x.total) / worst : 0;
    return h("span", { class: "errors" + (x.total > 0 ? " bad" : ""), "data-errors": String(x.total),
      title: "last minute: " + parts },
      h("span", { class: "etrack" }, h("span", { class: "seg errbar", "data-w": w.toFixed(4) })),
      h("span", { class: "enum", text: x.total > 0 ? x.total + " errors/min" : "no errors" }));
  }

  function worstErrors(l) {
    let worst = 0;
    for (const g of arr(l.groups)) for (const e of arr(g.endpoints)) worst = Math.max(worst, num(e.errors && e.errors.total) || 0);
    return worst;
  }

  function group(l, g, obs) {
    const ghealthy = g.healthy !== false;
    const o = obs ? obs.groups.get(g.name) : null;
    // The share's parts as the node's split code gives them (`parts`: first pass, leftover,
    // spill, each at what the group keeps of it, so that the bar adds up to the share under
    // failover = "graceful" too; docs/design.md §3.3). Only drawn here, never computed.
    const [first, leftover, spilled] = [0, 1, 2].map((i) => num(arr(g.parts)[i]) || 0);
    const spill = num(g.spill), keep = num(g.keep);
    const parts = [
      ["first", clamp(first), "first pass " + pct(g.first_pass)],
      ["leftover", clamp(leftover), "leftover " + pct(g.leftover)],
    ];
    if (spill !== null && keep !== null) {
      parts.push(["spill", clamp(spilled), "spill " + pct(spill) + " from above; keeps " + keep.toFixed(3)]);
    }
    const expected = bar(parts);
    const seen = bar([["observed", clamp(o), "observed " + pct(o)]]);
    const rtt = num(g.rtt_ms) === null ? "—" : g.rtt_ms.toFixed(2) + " ms";
    const worst = worstErrors(l);
    const eps = arr(g.endpoints).map((e) => {
      const [state, cls, why] = endpointState(e);
      const eo = obs ? obs.endpoints.get(g.name + "/" + endpointId(e)) : undefined;
      const enabled = e.enabled !== false;
      const action = enabled ? "disable" : "enable";
      const nums = ["active " + (num(e.active) ?? "—"), "w" + (num(e.weight) ?? "—")];
      if (num(e.fails)) nums.push("fails " + e.fails);
      if (num(eo) !== null) nums.push("observed " + pct(eo));
      else if (num(e.share) !== null) nums.push("share " + pct(e.share));
      return h("li", { class: "endpoint", "data-endpoint": e.address, "data-healthy": String(e.healthy === true), "data-enabled": String(enabled) },
        h("span", { class: "addr", text: e.address + (e.resolved && e.resolved !== e.address ? " → " + e.resolved : "") }),
        h("span", { class: "badge " + cls, title: why, text: state }),
        h("span", { class: "check", text: checkText(e) + (why && state !== "up" ? (checkText(e) ? " · " : "") + why : "") }),
        h("span", { class: "nums", text: nums.join(" · ") }),
        errorsCell(e, worst),
        e.address ? h("button", {
          type: "button", class: "toggle " + action, "data-action": action, text: action,
          title: action + " " + e.address + " (POST /endpoints/…/" + action + ")",
          onclick: (ev) => toggle(ev.currentTarget, l.name, g.name, e.address, action),
        }) : null,
        // Drain on this node (HAProxy's state drain); a drain from the config or the fleet is
        // ended where it was made, not here.
        e.address && (e.drained_by?.source === "admin" || !e.drain) ? h("button", {
          type: "button", class: "drainer", "data-action": drainAction(e), text: drainAction(e),
          title: drainAction(e) + " " + e.address + " on this node: no new traffic, what is bound to it finishes (POST /endpoints/…/" + drainAction(e) + ")",
          onclick: (ev) => toggle(ev.currentTarget, l.name, g.name, e.address, drainAction(e)),
        }) : null);
    });
    const el = h("div", {
      class: "group", "data-group": g.name, "data-healthy": String(ghealthy),
      "data-share": num(g.share) === null ? "" : g.share.toFixed(6),
      "data-observed": num(o) === null ? "" : o.toFixed(6),
    },
      h("div", { class: "ghead" },
        h("span", { class: "rank", text: "#" + (g.priority ?? "") }),
        h("span", { class: "gname", text: g.name }),
        h("span", { class: "badge " + (ghealthy ? "up" : g.drained ? "off" : "down"), text: ghealthy ? "healthy" : g.drained ? "drained" : "unhealthy" }),
        h("span", { class: "facts", text: [g.region, "rtt " + rtt + (g.rtt_source ? " " + g.rtt_source : ""),
          "ratio " + (num(g.ratio) ?? "—"), g.method].filter(Boolean).join(" · ") })),
      h("div", { class: "bars" },
        h("span", { class: "label", text: "expected" }), expected,
        h("span", { class: "num expected", text: pct(g.share) }),
        h("span", { class: "label", text: "observed" }), seen,
        h("span", { class: "num observed", text: pct(o) })),
      h("ul", { class: "endpoints" }, eps));
    // Widths through the CSSOM (the policy forbids inline style attributes).
    for (const s of el.querySelectorAll(".seg")) s.style.width = s.getAttribute("data-w") + "%";
    return el;
  }

  function listener(l, obs) {
    let why = "";
    if (!obs) why = samples.length < 2 ? "observed: waiting for a second poll" : "observed: this node reports no served counts";
    else if (obs.n === 0) why = "observed: nothing served in the last " + obs.seconds.toFixed(0) + " s";
    else why = "observed over the last " + obs.seconds.toFixed(0) + " s: " + obs.n + " served";
    const routes = arr(l.routes).map((r) => h("li", {
      text: "rule " + r.rule + " (" + (r.matches || "") + ") " + (r.mode || "") + ": " +
        arr(r.groups).map((g) => g.name + " " + pct(g.share)).join(", "),
    }));
    return h("section", { class: "card", "data-listener": l.name, "data-mode": l.mode || "" },
      h("h2", {},
        h("span", { text: l.name }),
        h("span", { class: "proto", text: (l.protocol || "") + " :" + (l.port ?? "") +
          (l.failover ? " · failover " + l.failover : "") + (l.fail_open ? " · fail_open" : "") }),
        h("span", { class: "mode " + (l.mode || ""), text: l.mode || "?" })),
      h("p", { class: "reason", text: modeReason(l) + " · " + why }),
      arr(l.groups).map((g) => group(l, g, obs)),
      routes.length ? h("ul", { class: "routes" }, routes) : null);
  }

  function render(status) {
    const n = status.node || {};
    $("node").textContent = [n.region, n.version && "v" + n.version, num(n.uptime_s) !== null && "up " + uptime(n.uptime_s)]
      .filter(Boolean).join(" · ");
    const main = $("listeners");
    const cards = arr(status.listeners).map((l) => listener(l, observed(l)));
    if (!cards.length) cards.push(h("p", { text: "This node serves no listener." }));
    // Keep the pointer's target alive: a press on a toggle that the next poll redraws would
    // lose its click, so the redraw waits while a button is held.
    if (document.querySelector(".toggle:active")) return;
    main.replaceChildren(...cards);
  }

  async function poll() {
    try {
      const r = await fetch("status", { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const status = await r.json();
      remember(status);
      render(status);
      lastOk = Date.now();
      $("conn").textContent = "live · " + new Date(lastOk).toLocaleTimeString();
      $("conn").className = "conn";
    } catch (e) {
      $("conn").textContent = "cannot read /status (" + e.message + ")" + (lastOk ? " · last " + ago(lastOk) : "");
      $("conn").className = "conn stale";
    }
  }

  // ------------------------------------------------------------------ the event timeline

  function eventPlace(ev) {
    return [ev.listener, ev.group, ev.endpoint].filter(Boolean).join(" / ") || "node";
  }

  function renderEvents(doc) {
    const events = arr(doc && doc.events);
    const items = events.map((ev) => h("li", { class: "event " + (ev.kind || ""), "data-kind": ev.kind || "" },
      h("time", { text: num(ev.at_unix_ms) === null ? "" : new Date(ev.at_unix_ms).toLocaleTimeString(),
        title: num(ev.at_unix_ms) === null ? "" : ago(ev.at_unix_ms) }),
      h("span", { class: "kind", text: ev.kind || "?" }),
      h("span", { class: "where", text: eventPlace(ev) }),
      h("span", { class: "what", text: ev.message || "" })));
    $("events").replaceChildren(h("section", { class: "card" },
      h("h2", {}, h("span", { text: "Events" }),
        h("span", { class: "proto", text: "the last " + (num(doc && doc.capacity) ?? 100) + ", newest first" })),
      items.length ? h("ol", { class: "timeline" }, items)
        : h("p", { class: "reason", text: "nothing happened since the node started" })));
  }

  async function pollEvents() {
    try {
      const r = await fetch("events", { cache: "no-store" });
      // An older node has no /events: no timeline.
      if (r.status !== 200) { $("events").hidden = true; return; }
      renderEvents(await r.json());
      $("events").hidden = fleetOn;
    } catch (e) { /* the status line says the node is away */ }
  }

  // ------------------------------------------------------------------ toggles and the token

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY); } catch (e) { return null; }
  }

  async function toggle(button, l, g, address, action) {
    button.disabled = true;
    const path = ["endpoints", l, g, address, action].map(encodeURIComponent).join("/");
    const headers = {};
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    try {
      const r = await fetch(path, { method: "POST", headers, cache: "no-store" });
      if (r.status === 401) {
        pendingToggle = [l, g, address, action];
        askToken(t ? "The node refused that token." : "This node needs its admin token to change endpoints.");
        return;
      }
      const body = await r.json().catch(() => ({}));
      if (!r.ok) notice(action + " " + address + ": " + (body.error || "HTTP " + r.status), true);
      else notice(address + " (" + l + "/" + g + ") " + action + (action.endsWith("e") ? "d" : "ed"));
    } catch (e) {
      notice(action + " " + address + ": " + e.message, true);
    } finally {
      button.disabled = false;
    }
    poll();
  }

  function askToken(why) {
    $("token-why").textContent = why;
    $("token-form").hidden = false;
    $("token").value = "";
    $("token").focus();
  }

  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    $("token").value = "";
    if (!t) return;
    try { sessionStorage.setItem(TOKEN_KEY, t); } catch (e) { /* private mode: ask again next time */ }
    $("token-form").hidden = true;
    const p = pendingToggle;
    pendingToggle = null;
    if (p) toggle(h("button"), ...p);
  });
  $("token-cancel").addEventListener("click", () => {
    pendingToggle = null;
    $("token-form").hidden = true;
  });

  // ------------------------------------------------------------------ fleet (nodes on etcd)

  function showTab(fleet) {
    fleetOn = fleet;
    $("tab-fleet").classList.toggle("on", fleet);
    $("tab-listeners").classList.toggle("on", !fleet);
    $("fleet").hidden = !fleet;
    $("listeners").hidden = fleet;
    if (fleet) $("events").hidden = true;
    else if ($("events").childElementCount) $("events").hidden = false;
  }
  $("tab-listeners").addEventListener("click", () => showTab(false));
  $("tab-fleet").addEventListener("click", () => showTab(true));

  // The fleet's ramp (gtd push --ramp; `ramp` in /fleet): its state, step of the plan, why it
  // is held or paused, and the last verdict with every gate's line.
  function rampSection(r) {
    if (!r) return null;
    const word = r.held ? "held" : r.drained ? "waiting on a drain" : r.going_back ? "going back" : r.state || "?";
    const steps = arr(r.steps), moved = arr(r.moved);
    const at = num(r.at) ?? 0;
    const share = (i) => (num(steps[i]) === null ? "—" : steps[i] + " %");
    const plan = steps.map((_, i) => h("li", {
      class: i + 1 === at ? "on" : i + 1 < at ? "past" : "", "data-step": String(i + 1),
      text: "step " + (i + 1) + ": " + share(i) + " of the move" +
        (num(moved[i]) === null ? "" : " (" + moved[i].toFixed(2) + " % of decisions moved)") }));
    const bad = r.held || r.drained || r.going_back || ["paused", "reverted", "aborted"].includes(r.state);
    const v = r.verdict;
    return h("section", { class: "ramp", "data-ramp": r.id || "", "data-ramp-state": word, "data-ramp-step": String(at) },
      h("h2", {}, h("span", { text: "Ramp " + (r.id || "") }),
        h("span", { class: "badge " + (bad ? "down" : r.state === "completed" ? "up" : "off"), text: word })),
      h("p", { class: "reason", text: "step " + at + " of " + steps.length +
        (at > 0 ? " · " + share(at - 1) + " of the move" : " · the starting revision") +
        " · revision " + (r.revision ?? "—") + " (started from " + (r.start_revision ?? "—") + ")" +
        " · driven by " + (r.owner || "no node yet") +
        (arr(r.receiving).length ? " · receiving " + arr(r.receiving).join(", ") : "") +
        " · pushed by " + (r.by || "?") + (num(r.created_at_ms) !== null ? ", " + ago(r.created_at_ms) : "") +
        (r.message ? " (" + r.message + ")" : "") }),
      r.why ? h("p", { class: "refused", "data-ramp-why": "", text: r.why }) : null,
      r.outcome ? h("p", { class: r.state === "completed" ? "reason" : "refused", "data-ramp-outcome": "", text: "outcome: " + r.outcome }) : null,
      h("ol", { class: "plan" }, plan),
      v ? h("div", { class: "verdict", "data-ramp-verdict": String(v.step ?? "") },
        h("p", { class: "reason", text: "last verdict: " + (v.said || "") + " · " + (v.by || "") +
          (num(v.at_ms) !== null ? ", " + ago(v.at_ms) : "") }),
        h("ul", { class: "gates" }, arr(v.gates).map((g) => h("li", {
          class: /-> FAIL/.test(g) ? "refused" : "", "data-gate": String(g).split(" ")[0].replace(/:$/, ""), text: g }))))
        : h("p", { class: "reason", text: "no step judged yet" }));
  }

  function renderFleet(f) {
    const latest = (f.latest && num(f.latest.revision)) ?? null;
    const nodes = arr(f.nodes).map((n) => {
      const behind = latest !== null && n.applied !== latest;
      const refused = n.refused ? "refused revision " + n.refused.revision + ": " + (n.refused.reason || "") : "";
      const listeners = arr(n.listeners).map((l) => l.name + " " + (l.mode || "") +
        (l.reason ? " (" + l.reason + ")" : "") + ": " +
        arr(l.groups).map((g) => g.name + " " + pct(g.share) +
          (g.healthy === false ? (g.drained ? " drained" : " unhealthy") : "")).join(", "));
      return h("tr", { "data-node": n.id },
        h("td", {}, h("div", { text: n.id }), h("small", { text: [n.region, n.admin].filter(Boolean).join(" · ") })),
        h("td", { text: n.version || "" }),
        h("td", { class: behind ? "behind" : "", text: (n.applied ?? "—") + (behind ? " (latest " + latest + ")" : "") }),
        h("td", { class: "refused", text: refused }),
        // The entry is rewritten when it changes, not as time passes: up since it started.
        h("td", { text: uptime(num(n.started_at_ms) ? Math.max(0, Math.round((Date.now() - n.started_at_ms) / 1000)) : n.uptime_s) }),
        h("td", {}, listeners.map((t) => h("div", { text: t })),
          // Endpoints out of rotation for a failure (checks, ejection, passive marks).
          arr(n.unhealthy).map((u) => h("div", { class: "refused", "data-unhealthy": [u.listener, u.group, u.endpoint].join("/"),
            text: "out: " + [u.listener, u.group, u.endpoint].join("/") + " (" + u.cause + ")" }))),
        // The entry's errors summary: endpoints with errors in the last minute, each count
        // rounded down to a power of ten.
        h("td", { class: arr(n.errors).length ? "refused" : "", "data-errors": String(arr(n.errors).length) },
          arr(n.errors).map((e) => h("div", { text: [e.listener, e.group, e.endpoint].join("/") + " " + (e.at_least ?? "?") + "+" }))));
    });
    const dis = arr(f.disagreements).map((d) => h("tr", {},
      h("td", { text: d.listener + "/" + d.group }),
      h("td", { text: arr(d.healthy).join(", ") }),
      h("td", { class: "refused", text: arr(d.unhealthy).join(", ") })));
    // Nodes that registered once and have no entry now (gtd fleet forget ends one).
    const missing = arr(f.missing).map((m) => h("tr", { "data-missing": m.id, class: "missing" },
      h("td", {}, h("div", { text: m.id }), h("small", { text: [m.region, m.admin].filter(Boolean).join(" · ") })),
      h("td", { class: "refused", colspan: "6", text: "missing" +
        (num(m.since_ms) !== null ? " since " + ago(m.since_ms) : "") +
        (m.last_applied != null ? ", last served revision " + m.last_applied : "") +
        " (gtd fleet forget " + m.id + " once it is gone for good)" })));
    const stale = f.stale_from ? h("p", { class: "refused", "data-stale": "true", text:
      "STALE: read from " + f.stale_from.member + "'s own store (raft index " + f.stale_from.raft_index +
      ", etcd revision " + f.stale_from.revision + (f.stale_from.leader ? "" : ", no leader") +
      "): later pushes and registry changes may be missing" }) : null;
    // Fleet-wide drains (gtd drain), and what one node's admin API set apart.
    const drains = arr(f.drains).map((d) => h("tr", { "data-drain": "" },
      h("td", { text: [d.listener, d.group, d.endpoint].filter((x) => x != null).join("/") +
        (d.endpoint == null ? " (every endpoint)" : "") }),
      h("td", { text: "fleet-wide" }),
      h("td", { text: (d.by || "") + (num(d.at_ms) !== null ? ", " + ago(d.at_ms) : "") }),
      h("td", { text: d.message || "" })));
    const toggles = arr(f.nodes).flatMap((n) => arr(n.toggles).map((t) => h("tr", { "data-toggle": "" },
      h("td", { text: [t.listener, t.group, t.endpoint].join("/") }),
      // As gtd fleet words it (fleet::registry::Toggle::what).
      h("td", { text: [!t.drained || !t.enabled ? (t.enabled ? "enabled" : "disabled") : null,
        t.drained ? "drained" : null].filter(Boolean).join(", ") }),
      h("td", { text: "on " + n.id + " (its admin API)" }),
      h("td", { text: "" }))));
    const apart = drains.concat(toggles);
    $("fleet").replaceChildren(h("section", { class: "card" },
      h("h2", {}, h("span", { text: "Fleet" }), h("span", { class: "proto", text: "etcd prefix " + (f.prefix || "") })),
      stale,
      h("p", { class: "reason", text: "latest revision " + (latest ?? "—") +
        (f.latest && num(f.latest.pushed_at_ms) !== null ? ", pushed " + ago(f.latest.pushed_at_ms) : "") +
        (f.all_latest === true ? " · every node runs it" : f.all_latest === false ? " · not every node runs it" : "") }),
      rampSection(f.ramp),
      h("div", { class: "scroll" }, h("table", {},
        h("tr", {}, ["node", "version", "applied", "refused", "up", "listeners", "errors (1 min)"].map((t) => h("th", { text: t }))),
        nodes, missing)),
      h("h2", {}, h("span", { text: "Drained and set apart" })),
      apart.length ? h("div", { class: "scroll" }, h("table", {},
        h("tr", {}, ["endpoint", "what", "by, when", "message"].map((t) => h("th", { text: t }))), apart))
        : h("p", { class: "reason", text: "nothing drained or set apart" }),
      h("h2", {}, h("span", { text: "Health disagreements" })),
      dis.length ? h("div", { class: "scroll" }, h("table", {},
        h("tr", {}, ["group", "healthy on", "unhealthy on"].map((t) => h("th", { text: t }))), dis))
        : h("p", { class: "reason", text: "every node sees the same health" })));
  }

  async function pollFleet() {
    let f = null;
    try {
      const r = await fetch("fleet", { cache: "no-store" });
      if (r.status === 200) f = await r.json();
    } catch (e) { /* no fleet, or the node is away: the status line says which */ }
    fleetShown = !!f;
    $("tabs").hidden = !fleetShown;
    if (f) renderFleet(f);
    else showTab(false);
  }

  poll();
  pollFleet();
  pollEvents();
  setInterval(poll, POLL_MS);
  setInterval(pollFleet, FLEET_MS);
  setInterval(pollEvents, EVENTS_MS);
})();
