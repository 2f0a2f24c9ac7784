/* llamarig live page: reads the server-sent events of llamarig.web.feed and shows them.
   Every figure is the snapshot's own (llamarig top's model); this script only formats.
   No data is ever inserted as HTML: text nodes only. */
(function () {
  "use strict";

  var S = {
    L: {}, lang: "en", doc: null, updates: 0, errors: 0, notify: false, notified: "",
    data: [[], [], [], [], []], charts: [], source: null
  };
  window.__llamarig = S; // the tests read the last update and the count from here

  var KEEP_S = 3600;
  var CHARTS = [["c-decode", 1, "--c1"], ["c-pool", 2, "--c2"], ["c-power", 3, "--c3"], ["c-temp", 4, "--c4"]];

  function $(id) { return document.getElementById(id); }
  function L(k) { return S.L[k] || k; }

  function el(tag, cls, text, title) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (title) { e.title = title; }
    return e;
  }

  function clear(e) { while (e.firstChild) { e.removeChild(e.firstChild); } return e; }

  function num(v, digits) {
    if (v === null || v === undefined || (typeof v === "number" && !isFinite(v))) { return "\u2014"; }
    if (typeof v !== "number") { return String(v); }
    if (digits === undefined) { return Math.round(v).toLocaleString("en-US"); }
    return v.toFixed(digits);
  }

  function hms(t) {
    var d = new Date(t * 1000);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map(function (x) { return String(x).padStart(2, "0"); }).join(":");
  }

  function rate(v) { return v === null || v === undefined ? "\u2014" : (v >= 100 ? num(v, 0) : num(v, 1)); }

  function fig(dl, label, value, title, key) {
    var dt = el("dt", "", label, title);
    var dd = el("dd", "", value, title);
    if (key) { dd.setAttribute("data-fig", key); }
    dl.appendChild(dt);
    dl.appendChild(dd);
  }

  function bar(frac, warnAt, badAt) {
    var b = el("div", "bar");
    var i = el("i");
    var f = frac === null || frac === undefined ? 0 : Math.max(0, Math.min(1, frac));
    i.style.width = (100 * f).toFixed(1) + "%";
    if (f >= badAt) { b.className = "bar bad"; } else if (f >= warnAt) { b.className = "bar warn"; }
    b.appendChild(i);
    return b;
  }

  function pickLang() {
    var q = new URLSearchParams(location.search).get("lang");
    if (q === "zh" || q === "en") { return q; }
    try {
      var s = window.localStorage.getItem("llamarig.lang");
      if (s === "zh" || s === "en") { return s; }
    } catch (e) { /* storage refused: the browser's language */ }
    return (navigator.language || "").toLowerCase().indexOf("zh") === 0 ? "zh" : "en";
  }

  function applyLabels() {
    var nodes = document.querySelectorAll("[data-l]");
    for (var i = 0; i < nodes.length; i++) { nodes[i].textContent = L(nodes[i].getAttribute("data-l")); }
    document.documentElement.lang = S.lang === "zh" ? "zh-CN" : "en";
    document.title = L("title");
    $("lang").textContent = S.lang === "zh" ? "English" : "\u4e2d\u6587";
    $("chart-method").textContent = "";
    $("chart-method").title = L("m_chart");
    $("chart-method").textContent = "(" + L("method") + ")";
    $("notify").textContent = S.notify ? L("notify_on") : L("notify");
  }

  /* ------------------------------------------------------------------ sections */

  function renderHeader(doc) {
    var snap = doc.snapshot;
    var v = $("verdict");
    v.className = "verdict v-" + doc.verdict.kind;
    v.textContent = doc.verdict.text;
    v.setAttribute("data-verdict", doc.verdict.kind);
    $("where").textContent = snap.url + " (" + snap.mode + ")";
    var busy = 0;
    snap.slots.forEach(function (s) { if (s.state === "busy") { busy += 1; } });
    var up = snap.servers.filter(function (s) { return s.state === "up"; }).length;
    var sum = $("summary");
    clear(sum);
    sum.appendChild(el("span", "", L("server") + " " + up + "/" + snap.servers.length + " " + L("up") + " \u00b7 "));
    sum.appendChild(el("span", "", L("slots") + " " + busy + "/" + snap.slots.length + " \u00b7 "));
    var d = el("span", "", L("chart_decode") + " " + rate(snap.decode_tok_s), snap.methods.decode_tok_s);
    d.setAttribute("data-fig", "decode_tok_s");
    sum.appendChild(d);
    $("updated").textContent = L("updated") + " " + hms(snap.t_unix);
    var ul = clear($("alerts"));
    doc.crossed.forEach(function (c) { ul.appendChild(el("li", "bad", c.text)); });
    doc.alerts.forEach(function (a) {
      var bad = a.kind === "down" || a.kind === "pool_overflow_ahead" || a.kind === "pool_near_full";
      ul.appendChild(el("li", bad ? "bad" : "", a.text));
    });
  }

  function renderGpus(doc) {
    var box = clear($("gpus"));
    var g = doc.snapshot.gpu;
    var th = doc.thresholds;
    gpuCharts(g.available ? "" : (doc.gpu_reason || L("unavailable")));
    if (!g.available) {
      var dl = el("dl", "figs");
      var why = doc.gpu_reason || L("unavailable");
      fig(dl, L("memory_nvml"), "\u2014", why, "gpu_memory");
      fig(dl, L("memory_plan"), "\u2014", L("plan_unknown"));
      fig(dl, L("power"), "\u2014", why, "gpu_power");
      fig(dl, L("temperature"), "\u2014", why, "gpu_temp");
      fig(dl, L("tpj"), "\u2014", doc.snapshot.methods.tokens_per_joule);
      box.appendChild(dl);
      box.appendChild(el("div", "dim small", why));
      return;
    }
    g.gpus.forEach(function (d) {
      var div = el("div", "gpu");
      div.appendChild(el("div", "name", "GPU" + d.index + " " + d.name));
      var dl = el("dl", "figs");
      var used = d.mem_used_mib, total = d.mem_total_mib;
      var mem = used === null || !total ? "\u2014" : num(used / 1024, 1) + " / " + num(total / 1024, 1) + " GiB";
      fig(dl, L("memory_nvml"), mem, L("m_memory"), "gpu_memory");
      fig(dl, L("memory_plan"), "\u2014", L("plan_unknown"));
      var pw = d.power_w === null ? "\u2014" : num(d.power_w, 0) + " W" + (th.power_w ? " / " + num(th.power_w, 0) + " W" : "");
      fig(dl, L("power"), pw, L("m_power"), "gpu_power");
      fig(dl, L("temperature"), d.temp_c === null ? "\u2014" : num(d.temp_c, 0) + " \u00b0C", L("m_temp"), "gpu_temp");
      div.appendChild(dl);
      if (used !== null && total) { div.appendChild(bar(used / total, 0.9, 0.97)); }
      box.appendChild(div);
    });
    var t = el("dl", "figs");
    var tpj = g.tokens_per_joule === null ? "\u2014" : num(g.tokens_per_joule, 2);
    fig(t, L("tpj"), tpj, doc.snapshot.methods.tokens_per_joule + (g.joule_source ? " (" + g.joule_source + ")" : ""), "tpj");
    box.appendChild(t);
  }

  function gpuCharts(why) {
    [["c-power", "chart_power"], ["c-temp", "chart_temp"]].forEach(function (c) {
      var t = $(c[0]).parentNode.querySelector(".ct");
      t.textContent = L(c[1]) + (why ? " \u2014 " + L("unavailable") : "");
      t.title = why;
    });
  }

  function renderPools(doc) {
    var box = clear($("pools"));
    var th = doc.thresholds;
    doc.snapshot.servers.forEach(function (s) {
      var div = el("div", "pool");
      div.setAttribute("data-server", s.name);
      div.appendChild(el("div", "name", s.name + " \u00b7 " + L(s.state) + (s.model ? " \u00b7 " + s.model : "")));
      var p = s.pool;
      var dl = el("dl", "figs");
      if (!p || !p.tokens) {
        fig(dl, L("cells"), "\u2014", s.slots_error || s.error || L("unavailable"), "pool_cells");
      } else {
        var le = p.bound === "at_least" ? "\u2264" : "";
        var pct = p.used_frac === null ? "\u2014" : le + num(100 * p.used_frac, 0) + " %";
        fig(dl, L("cells"), num(p.cells_used) + " / " + num(p.tokens) + " (" + pct + ")",
            doc.snapshot.methods.pool_used_frac, "pool_cells");
        fig(dl, L("pool"), p.unified === true ? L("shared") : (p.unified === false ? L("per_slot") : "?"),
            p.source + (p.detail ? ": " + p.detail : ""), "pool_layout");
        fig(dl, L("needed"), num(p.cells_needed), doc.snapshot.methods.pool_used_frac, "pool_needed");
        fig(dl, L("full_in"), p.full_in_s === null ? "\u2014" : num(p.full_in_s, 0) + " s", "", "pool_full_in");
        div.appendChild(dl);
        div.appendChild(bar(p.used_frac, th.pool_pct / 100 * 0.9, th.pool_pct / 100));
        box.appendChild(div);
        return;
      }
      div.appendChild(dl);
      box.appendChild(div);
    });
  }

  function renderGateway(doc) {
    var gw = doc.snapshot.gateway;
    $("gw-card").hidden = !gw;
    if (!gw) { return; }
    var dl = clear($("gateway"));
    var m = doc.snapshot.methods;
    fig(dl, L("in_flight"), num(gw.in_flight), "", "in_flight");
    fig(dl, L("queued"), num(gw.queue.length), "", "queue");
    fig(dl, L("reserved"), num(gw.reserved_tokens) + " / " + num(gw.pool_tokens), L("m_reserved"), "reserved");
    fig(dl, L("rejected"), num(gw.rejected_429_total) + " (" + num(gw.rejected_429_per_min, 1) + " " + L("per_min") + ")",
        m.rejected_429_per_min, "rejected");
    fig(dl, L("retry_after"), gw.retry_after_s === null ? "\u2014" : gw.retry_after_s + " s", L("m_retry"), "retry_after");
    fig(dl, L("cron"), num(gw.cron.reserved_tokens) + " (" + gw.cron.in_flight + " " + L("in_flight") + ")",
        L("m_cron"), "cron");
    var t = $("requests");
    var head = clear(t.tHead);
    var tb = clear(t.tBodies[0]);
    if (!gw.requests.length) { return; }
    var hr = el("tr");
    [["requests", "l"], ["tier", "l"], ["key", "l"], ["reserved", ""], ["tokens", ""]].forEach(function (h) {
      hr.appendChild(el("th", h[1], L(h[0])));
    });
    head.appendChild(hr);
    gw.requests.slice(0, 20).forEach(function (r) {
      var tr = el("tr");
      tr.appendChild(el("td", "l", r.id + " \u2192 " + r.backend + (r.slot === null ? "" : "#" + r.slot)));
      tr.appendChild(el("td", "l", r.tier));
      tr.appendChild(el("td", "l", r.key || "\u2014"));
      tr.appendChild(el("td", "", num(r.reserved_tokens), L("m_reserved")));
      tr.appendChild(el("td", "", num(r.generated)));
      tb.appendChild(tr);
    });
  }

  function renderSlots(doc) {
    var snap = doc.snapshot;
    var t = $("slots");
    var head = clear(t.tHead);
    var tb = clear(t.tBodies[0]);
    var many = snap.servers.length > 1;
    var reqs = {};
    if (snap.gateway) { snap.gateway.requests.forEach(function (r) { reqs[r.id] = r; }); }
    var hr = el("tr");
    var gw = !!snap.gateway; // tier and key are the gateway's to know
    var cols = [["slot", "l", ""], ["phase", "l", ""], ["tokens", "", snap.methods.ctx_used],
                ["tok_s", "", snap.methods.decode_tok_s]].concat(gw ? [["tier", "l hide-phone", ""], ["key", "l hide-phone", ""]] : []);
    cols.forEach(function (c) { hr.appendChild(el("th", c[1], L(c[0]), c[2])); });
    head.appendChild(hr);
    snap.slots.forEach(function (s) {
      var tr = el("tr");
      tr.setAttribute("data-slot", s.server + "/" + s.id);
      var r = s.request ? reqs[s.request] : null;
      tr.appendChild(el("td", "l", (many ? s.server + " " : "") + "#" + s.id));
      tr.appendChild(el("td", "l ph-" + s.phase, L(s.phase)));
      var ctx = el("td", "", num(s.ctx_used) + " / " + num(s.n_ctx));
      ctx.setAttribute("data-fig", "ctx");
      tr.appendChild(ctx);
      var rt = el("td", "", s.phase === "decode" ? rate(s.decode_tok_s) : (s.phase === "prefill" ? rate(s.prefill_tok_s) : "\u2014"));
      rt.setAttribute("data-fig", "rate");
      tr.appendChild(rt);
      if (gw) {
        tr.appendChild(el("td", "l hide-phone", r ? r.tier : "\u2014"));
        tr.appendChild(el("td", "l hide-phone", r ? (r.key || "\u2014") : "\u2014"));
      }
      tb.appendChild(tr);
    });
  }

  function renderEvents(doc) {
    var ol = clear($("events"));
    var evs = doc.events.slice(-12).reverse();
    if (!evs.length) { ol.appendChild(el("li", "dim", L("no_events"))); return; }
    evs.forEach(function (e) {
      var li = el("li");
      li.appendChild(el("span", "dim", hms(e.t_unix) + " "));
      var bad = e.kind === "restart" || e.kind === "down" || e.kind === "context_exceeded";
      li.appendChild(el("span", bad ? "k bad" : "k", e.kind_text));
      li.appendChild(el("span", "", e.server + ": " + e.text));
      ol.appendChild(li);
    });
  }

  function renderFooter(doc) {
    var th = doc.thresholds;
    var parts = [L("thresholds") + ":",
      L("power") + " " + (th.power_w === null ? "\u2014" : th.power_w + " W"),
      L("temperature") + " " + th.temp_c + " \u00b0C", L("pool") + " " + th.pool_pct + " %", L("queued") + " " + th.queue];
    $("th").textContent = parts.join(" ");
  }

  /* ------------------------------------------------------------------ charts */

  function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888"; }

  function clock(u, splits) {
    return splits.map(function (v) {
      var d = new Date(v * 1000);
      return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0") +
        (u.scales.x.max - u.scales.x.min < 600 ? ":" + String(d.getSeconds()).padStart(2, "0") : "");
    });
  }

  function amounts(u, splits) {
    return splits.map(function (v) { return v >= 10000 ? (v / 1000).toFixed(0) + "k" : (Math.abs(v) < 10 && v % 1 ? v.toFixed(1) : v.toFixed(0)); });
  }

  function chartWidth(box) { return Math.max(200, box.parentNode.clientWidth - 4); }

  function makeCharts() {
    if (!window.uPlot) { return; }
    var phone = window.innerWidth <= 640;
    S.charts = CHARTS.map(function (c) {
      var box = $(c[0]);
      var grid = { stroke: css("--line"), width: 1 };
      var opts = {
        width: chartWidth(box), height: phone ? 110 : 140, legend: { show: false }, cursor: { show: true, drag: { x: false, y: false } },
        scales: { x: { time: true }, y: { range: function (u, lo, hi) { return [Math.min(0, lo || 0), Math.max(1, (hi || 0) * 1.15)]; } } },
        axes: [{ stroke: css("--dim"), grid: grid, ticks: grid, space: 70, values: clock },
               { stroke: css("--dim"), grid: grid, ticks: grid, size: 54, space: 22, values: amounts }],
        series: [{}, { stroke: css(c[2]), width: 2, fill: css(c[2]) + "22", spanGaps: false, points: { show: false } }]
      };
      return new window.uPlot(opts, [S.data[0], S.data[c[1]]], box);
    });
    if (window.ResizeObserver) {
      var ro = new ResizeObserver(function () {
        S.charts.forEach(function (u, i) { u.setSize({ width: chartWidth($(CHARTS[i][0])), height: u.height }); });
      });
      ro.observe(document.querySelector(".charts"));
    }
  }

  function pushSample(p) {
    var d = S.data;
    if (d[0].length && p[0] <= d[0][d[0].length - 1]) { return; }
    for (var i = 0; i < 5; i++) { d[i].push(p[i]); }
    while (d[0].length && d[0][0] < p[0] - KEEP_S) { for (var j = 0; j < 5; j++) { d[j].shift(); } }
  }

  function drawCharts() {
    S.charts.forEach(function (u, i) { u.setData([S.data[0], S.data[CHARTS[i][1]]]); });
  }

  /* ------------------------------------------------------------------ notifications */

  function maybeNotify(doc) {
    var key = doc.verdict.kind + "|" + doc.crossed.map(function (c) { return c.kind + c.subject; }).join(",");
    if (doc.verdict.kind === "healthy") { S.notified = ""; return; }
    if (!S.notify || key === S.notified || !("Notification" in window)) { return; }
    S.notified = key;
    var body = doc.crossed.length ? doc.crossed[0].text : (doc.alerts.length ? doc.alerts[0].text : "");
    try { new window.Notification(doc.verdict.text, { body: body, tag: "llamarig" }); } catch (e) { /* not allowed here */ }
  }

  function askNotify() {
    if (!("Notification" in window)) { return; }
    window.Notification.requestPermission().then(function (p) {
      S.notify = p === "granted";
      $("notify").className = S.notify ? "on" : "";
      $("notify").textContent = S.notify ? L("notify_on") : L("notify");
    });
  }

  /* ------------------------------------------------------------------ the stream */

  function onUpdate(ev) {
    var doc = JSON.parse(ev.data);
    S.doc = doc;
    renderHeader(doc);
    renderGpus(doc);
    renderPools(doc);
    renderGateway(doc);
    renderSlots(doc);
    renderEvents(doc);
    renderFooter(doc);
    pushSample(doc.sample);
    drawCharts();
    maybeNotify(doc);
    S.updates += 1;
    document.body.setAttribute("data-updates", String(S.updates));
  }

  function onHistory(ev) {
    S.data = [[], [], [], [], []];
    JSON.parse(ev.data).forEach(pushSample);
    drawCharts();
  }

  function connect() {
    if (S.source) { S.source.close(); }
    var es = new EventSource("events?lang=" + S.lang);
    es.addEventListener("history", onHistory);
    es.addEventListener("update", onUpdate);
    es.onerror = function () {
      S.errors += 1;
      var v = $("verdict");
      if (S.doc) { $("updated").textContent = L("lost"); } else { v.textContent = L("lost"); }
    };
    S.source = es;
  }

  function load(lang) {
    S.lang = lang;
    return fetch("strings.json?lang=" + lang, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (j) {
        S.L = j.labels;
        applyLabels();
        if (S.doc) { onUpdate({ data: JSON.stringify(S.doc) }); }
        connect();
      });
  }

  function start() {
    $("lang").addEventListener("click", function () {
      var next = S.lang === "zh" ? "en" : "zh";
      try { window.localStorage.setItem("llamarig.lang", next); } catch (e) { /* not kept */ }
      load(next);
    });
    $("notify").addEventListener("click", askNotify);
    if ("Notification" in window && window.Notification.permission === "granted") {
      S.notify = true;
      $("notify").className = "on";
    }
    makeCharts();
    load(pickLang());
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
}());
