/* assay pages: the static report and the live dashboard share this script.
 *
 * The page carries its configuration (#assay-config) and its first data (#assay-data) as
 * JSON. In "report" mode everything is embedded and nothing is fetched. In "live" mode the
 * page polls its JSON twin and redraws in place, without reloading.
 * Text from the journal is always inserted as text (never as HTML).
 */
(function () {
  "use strict";

  var cfg = JSON.parse(document.getElementById("assay-config").textContent);
  var dataTag = document.getElementById("assay-data");
  var data = null;  // parsed at start: plain JSON, or gzip+base64 for large reports
  var PAGE = 100;
  var view = { sortKey: "seq", sortDir: 1, version: null, seen: null, updates: 0, failures: 0,
               page: 0, filter: "" };
  var COLORS = { kept: "#1a9850", discarded: "#9e9e9e", invalid: "#e08a00", crashed: "#d73027", conflict: "#b35806",
                 running: "#2c7fb8", measured: "#2c7fb8", queued: "#74a9cf", proposed: "#74a9cf" };
  window.assay = { view: view, cfg: cfg, data: function () { return data; } };

  // -- small helpers -------------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "text") node.textContent = String(v);
        else if (k === "cls") node.className = v;
        else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), v);
        else node.setAttribute(k, v === true ? "" : String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) add(node, arguments[i]);
    return node;
  }
  function add(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { add(node, c); }); return; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  // One format for every number: 4 significant digits, with an SI prefix from a thousand
  // up (939.4k, 2.179M; 0.9812 stays 0.9812), as `assay run` and `assay status` print them.
  var SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  function num(v) {
    if (v === null || v === undefined || typeof v !== "number" || !isFinite(v)) return "–";
    if (v === 0) return "0";
    var a = Math.abs(v);
    for (var i = 0; i < SI.length; i++) {
      if (a >= SI[i][0] * 0.99995) return String(Number((v / SI[i][0]).toPrecision(4))) + SI[i][1];
    }
    return String(Number(v.toPrecision(4)));
  }
  function metric(v) { return num(v) === "–" ? "–" : num(v) + unit(); }
  // Hypothesis text, with the parameters only when the text does not already name them.
  function hypText(h, p) {
    var extra = Object.keys(p || {}).filter(function (k) { return String(h || "").indexOf(k + "=" + p[k]) < 0; });
    return String(h || "") + (extra.length ? " (" + extra.map(function (k) { return k + "=" + p[k]; }).join(", ") + ")" : "");
  }
  function pct(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    return (v >= 0 ? "+" : "") + (100 * v).toFixed(2) + "%";
  }
  function interval(lo, hi) { return (lo === null || lo === undefined) ? "–" : "[" + pct(lo) + ", " + pct(hi) + "]"; }
  function hours(v) { return (v === null || v === undefined) ? "–" : (v < 0.01 ? (v * 3600).toFixed(1) + " s" : v.toFixed(3) + " h"); }
  // as assay.usage.dollars: enough digits to tell small sums apart
  function usd(v) { return (v === null || v === undefined) ? "–" : "$" + v.toFixed(v >= 1 ? 2 : (v >= 0.01 || v === 0 ? 4 : 6)); }
  function ints(v) { return (v === null || v === undefined) ? "–" : Math.round(v).toLocaleString("en-US"); }
  function when(ts) {
    if (!ts) return "–";
    var d = new Date(ts * 1000);
    return d.toISOString().replace("T", " ").slice(0, 19) + "Z";
  }
  function badge(state) { return el("span", { cls: "badge " + state, text: state }); }
  function unit() { return data.metric && data.metric.unit ? " " + data.metric.unit : ""; }
  function expHref(id) { return cfg.mode === "live" ? cfg.base + "experiments/" + id : "#" + id; }
  function params(p) {
    var keys = Object.keys(p || {});
    return keys.length ? keys.map(function (k) { return k + "=" + p[k]; }).join(", ") : "";
  }
  function replace(id, node) {
    var old = document.getElementById(id);
    node.id = id;
    if (old) old.replaceWith(node); else document.getElementById("app").appendChild(node);
    return node;
  }

  // -- the overview --------------------------------------------------------------------
  function summary() {
    var m = data.metric || {};
    var counts = data.counts || {};
    var states = Object.keys(counts).sort().map(function (k) { return k + " " + counts[k]; });
    var cal = data.calibration || {};
    var cost = data.cost || {};
    var lock = data.lock || {};
    return el("section", null,
      el("div", { cls: "cards" },
        card("metric", m.name, (m.direction === "minimize" ? "lower" : "higher") + " is better" + (m.unit ? " · " + m.unit : "")),
        verified(data.verification),
        card("baseline (unpaired median)", metric(data.baseline), "the first incumbent, measured at another time than the best"),
        card("best (unpaired median)", metric(data.best), data.improvement === null || data.improvement === undefined ? "" : pct(data.improvement) + " vs baseline, unpaired"),
        card("experiments", String((data.experiments || []).length), states.join(", ")),
        card("noise (pair σ)", cal.pooled === undefined || cal.pooled === null ? "–" : pct(cal.pooled).replace("+", ""), cal.message ? "δ " + pct(cal.delta) : "no calibration"),
        card("resources used", (cost.resources || []).length ? cost.resources.map(function (r) { return resource(r, r.total); }).join(" · ") : "–",
             cost.kept ? "per kept change: " + cost.resources.map(function (r) { return resource(r, r.per_kept); }).join(" · ") : "nothing kept yet"),
        card("run", lock.running ? "running" : "idle", data.branch ? "kept commits on " + data.branch : "")),
      cal.message ? el("p", { cls: "note", text: "calibration: " + cal.message }) : null);
  }
  // The headline: baseline and final best measured against each other (ABBA blocks).
  function verified(v) {
    if (!v) return null;
    var m = v.measured;
    if (m && v.current) return card("improvement (paired)", pct(m.effect), v.words);
    var comp = v.compounded_words ? "kept effects compound to " + v.compounded_words : "";
    return card("improvement (paired)", "–", (m ? "measured before the last keep; " : "not verified yet (assay verify); ") + comp);
  }
  function resource(r, v) {
    if (v === null || v === undefined) return "–";
    if (r.key === "gpu_hours") return v.toFixed(v < 10 ? 3 : 1) + " GPU-h";
    if (r.key === "cpu_seconds") return num(v) + " CPU-s";
    if (r.key === "tokens") return num(v) + " tokens";
    return usd(v);
  }
  function card(k, v, s) {
    return el("div", { cls: "card" }, el("div", { cls: "k", text: k }), el("div", { cls: "v", text: v }),
              s ? el("div", { cls: "s", text: s }) : null);
  }

  function chartTraces() {
    var p = data.progress || { points: [], best: { x: [], y: [] }, band: null };
    var traces = [];
    if (p.band) {
      traces.push({ x: p.best.x, y: p.band.lower, mode: "lines", line: { width: 0, shape: "hv" },
                    hoverinfo: "skip", showlegend: false, name: "band-lower" });
      traces.push({ x: p.best.x, y: p.band.upper, mode: "lines", fill: "tonexty",
                    fillcolor: "rgba(26,152,80,0.13)", line: { width: 0, shape: "hv" },
                    hoverinfo: "skip", name: "incumbent ± " + p.band.sigmas + "σ noise" });
    }
    traces.push({ x: p.best.x, y: p.best.y, mode: "lines", name: "running best (kept)",
                  line: { color: COLORS.kept, width: 2.5, shape: "hv" }, hoverinfo: "skip" });
    var groups = [
      ["kept", "kept", "circle", 11],
      ["discarded", "discarded", "circle", 8],
      ["within", "discarded: gain within the noise (not clear of δ)", "triangle-up-open", 9],
      ["crashed", "crashed", "x", 11],
      ["invalid", "invalid", "diamond-open", 10],
      ["conflict", "conflict: the patch and the incumbent change the same lines", "square-open", 10],
      ["pending", "running / queued", "circle-open", 9]
    ];
    groups.forEach(function (g) {
      var pts = p.points.filter(function (q) {
        if (g[0] === "within") return q.state === "discarded" && q.within_noise;
        if (g[0] === "discarded") return q.state === "discarded" && !q.within_noise;
        return g[0] === "pending" ? ["kept", "discarded", "crashed", "invalid", "conflict"].indexOf(q.state) < 0 : q.state === g[0];
      });
      if (!pts.length) return;
      var total = pts.length;
      pts = thin(pts);
      traces.push({
        x: pts.map(function (q) { return q.seq; }), y: pts.map(function (q) { return q.y; }),
        customdata: pts.map(function (q) { return q.id; }),
        text: pts.map(function (q) {
          return q.id + " " + q.state + (q.measured ? "" : " (no value)") + "<br>" +
            String(q.hypothesis || "").replace(/[<>&]/g, " ").slice(0, 80) +
            (q.effect === null || q.effect === undefined ? "" : "<br>effect " + pct(q.effect));
        }),
        hovertemplate: "%{text}<extra></extra>", mode: "markers",
        name: g[1] + (pts.length < total ? " (" + pts.length + " of " + total + " drawn: overlapping points merged)" : ""),
        marker: { symbol: g[2], size: g[3], color: g[0] === "within" ? "#6b7280" : COLORS[g[0]] || COLORS.running,
                  line: { width: g[0] === "crashed" ? 0 : 1, color: g[0] === "discarded" ? "#777" : COLORS[g[0]] || COLORS.running } }
      });
    });
    return traces;
  }
  // Points that would cover each other (the same 3 x 3 pixel cell of a ~1200 x 400 chart,
  // markers being 8 to 11 pixels wide) are drawn once; a chart of a few thousand points is
  // left as it is.
  function thin(pts) {
    if (pts.length <= 3000) return pts;
    var xs = pts.map(function (q) { return q.seq; }), ys = pts.map(function (q) { return q.y; }).filter(function (y) { return y !== null && y !== undefined; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var seen = {};
    return pts.filter(function (q) {
      var cx = Math.floor(400 * (q.seq - x0) / ((x1 - x0) || 1));
      var cy = Math.floor(133 * ((q.y || 0) - y0) / ((y1 - y0) || 1));
      var key = cx + ":" + cy;
      if (seen[key]) return false;
      seen[key] = true;
      return true;
    });
  }
  function xStep(n) {  // integer ticks only: 1, 2, 5, 10, 20, 50 ... about ten of them
    var raw = Math.max(1, n / 10), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return Math.max(1, (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p);
  }
  function chartLayout() {
    var m = data.metric || {};
    return {
      margin: { l: 64, r: 16, t: 12, b: 44 }, height: 400, hovermode: "closest",
      xaxis: { title: { text: "experiment" }, zeroline: false, rangemode: "tozero",
               tickformat: "d", dtick: xStep((data.progress && data.progress.best.x.length) ? data.progress.best.x[data.progress.best.x.length - 1] : 1) },
      yaxis: { title: { text: (m.name || "metric") + (m.unit ? " (" + m.unit + ")" : "") +
                        (m.direction === "minimize" ? " ↓ better" : " ↑ better") } },
      legend: { orientation: "h", y: 1.08, x: 0 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      annotations: (data.progress && data.progress.points.length) ? [] : [{
        text: "no experiments yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
        font: { size: 16, color: "#6b7280" } }]
    };
  }
  function drawChart(first) {
    var div = document.getElementById("progress-chart");
    if (!div) return;
    if (typeof Plotly === "undefined") {
      div.textContent = "the chart library did not load";
      return;
    }
    var conf = { displaylogo: false, responsive: true,
                 modeBarButtonsToRemove: ["select2d", "lasso2d", "toImage"] };
    Plotly.react(div, chartTraces(), chartLayout(), conf).then(function () {
      div.dataset.points = String((data.progress || { points: [] }).points.length);
      div.dataset.rendered = "1";
    });
    if (first && div.on) {
      div.on("plotly_click", function (ev) {
        var id = ev && ev.points && ev.points[0] && ev.points[0].customdata;
        if (!id) return;
        if (cfg.mode === "live") window.location.href = expHref(id);
        else openDetail(id, true);
      });
    }
  }

  var COLUMNS = [
    ["seq", "#", "num"], ["id", "id"], ["state", "state"], ["proposer", "proposer"],
    ["source_kind", "source"], ["hypothesis", "hypothesis"], ["value", "value (kept: its median; discarded: its effect on the incumbent's)", "num"],
    ["effect", "effect", "num"], ["lo", "interval", "num"], ["runs", "runs", "num"],
    ["gpu_hours", "GPU-h", "num"], ["cpu_seconds", "CPU-s", "num"], ["tokens", "tokens", "num"],
    ["cost_usd", "cost", "num"]
  ];
  var RESOURCE_KEYS = ["gpu_hours", "cpu_seconds", "tokens", "cost_usd"];
  function shown(key) {  // a resource column only when the run used that resource
    return ((data.cost || {}).resources || []).some(function (r) { return r.key === key; });
  }
  function columns() {
    return COLUMNS.filter(function (c) { return RESOURCE_KEYS.indexOf(c[0]) < 0 || shown(c[0]); });
  }
  function sortValue(r, key) {
    if (key === "tokens") return (r.tokens_in || 0) + (r.tokens_out || 0);
    return r[key];
  }
  function matches(r, f) {
    if (!f) return true;
    return [r.id, r.state, r.proposer, r.source_kind, r.hypothesis].join(" ").toLowerCase().indexOf(f) >= 0;
  }
  function sortedRows() {
    var f = view.filter.trim().toLowerCase();
    var rows = (data.experiments || []).filter(function (r) { return matches(r, f); });
    var k = view.sortKey, dir = view.sortDir;
    rows.sort(function (a, b) {
      var x = sortValue(a, k), y = sortValue(b, k);
      var xn = x === null || x === undefined, yn = y === null || y === undefined;
      if (xn && yn) return a.seq - b.seq;
      if (xn) return 1;
      if (yn) return -1;
      var c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return c === 0 ? a.seq - b.seq : c * dir;
    });
    return rows;
  }
  function table() {
    var head = el("tr", null, columns().map(function (c) {
      var cls = "sortable" + (c[2] ? " num" : "");
      if (view.sortKey === c[0]) cls += view.sortDir > 0 ? " sorted-asc" : " sorted-desc";
      return el("th", { cls: cls, "data-key": c[0], text: c[1], title: "sort by " + c[1],
                        onclick: function () {
                          if (view.sortKey === c[0]) view.sortDir = -view.sortDir;
                          else { view.sortKey = c[0]; view.sortDir = 1; }
                          redrawTable();
                        } });
    }));
    var seen = view.seen;
    var all = sortedRows();
    var pages = Math.max(1, Math.ceil(all.length / PAGE));
    view.page = Math.min(view.page, pages - 1);
    var rowsShown = all.slice(view.page * PAGE, (view.page + 1) * PAGE);
    view.shown = rowsShown.map(function (r) { return r.id; });
    var body = el("tbody", null, rowsShown.map(function (r) { return rowNode(r, seen !== null && !seen[r.id]); }));
    var foot = (data.experiments || []).length ? null : el("tfoot", null, el("tr", null,
      el("td", { colspan: columns().length, cls: "empty", text: "no experiments yet" })));
    return tableBox(all, rowsShown, pages, head, body, foot);
  }
  function rowNode(r, fresh) {
      return el("tr", { "data-id": r.id, "data-state": r.state, cls: fresh ? "new" : null },
        el("td", { cls: "num", text: r.seq }),
        el("td", null, el("a", { href: expHref(r.id), text: r.id, onclick: cfg.mode === "live" ? null : function (ev) { ev.preventDefault(); openDetail(r.id, true); } })),
        el("td", null, badge(r.state)),
        el("td", { text: r.proposer }),
        el("td", { text: r.source_kind }),
        el("td", { cls: "hyp", text: (r.unconfined ? "(unconfined) " : "") + hypText(r.hypothesis, r.params) }),
        el("td", { cls: "num", text: metric(r.value) }),
        el("td", { cls: "num", text: pct(r.effect) }),
        el("td", { cls: "num", text: interval(r.lo, r.hi) }),
        el("td", { cls: "num", text: r.runs }),
        shown("gpu_hours") ? el("td", { cls: "num", text: r.gpu_hours ? r.gpu_hours.toFixed(3) : "–" }) : null,
        shown("cpu_seconds") ? el("td", { cls: "num", text: r.cpu_seconds ? num(r.cpu_seconds) : "–" }) : null,
        shown("tokens") ? el("td", { cls: "num", text: (r.tokens_in || r.tokens_out) ? num(r.tokens_in + r.tokens_out) : "–" }) : null,
        shown("cost_usd") ? el("td", { cls: "num", text: r.cost_usd ? usd(r.cost_usd) : "–" }) : null);
  }
  function tableBox(all, rowsShown, pages, head, body, foot) {
    function go(p) { return function () { view.page = p; redrawTable(); }; }
    var nav = el("div", { cls: "pager" },
      el("input", { id: "filter", type: "search", placeholder: "filter: id, state, proposer, text", value: view.filter,
                    oninput: function (ev) { view.filter = ev.target.value; view.page = 0; redrawTable(); } }),
      el("button", { type: "button", text: "‹ prev", disabled: view.page === 0, onclick: go(view.page - 1) }),
      el("span", { cls: "where", text: all.length ? "rows " + (view.page * PAGE + 1) + "–" + (view.page * PAGE + rowsShown.length) + " of " + all.length + (all.length < (data.experiments || []).length ? " (filtered from " + data.experiments.length + ")" : "") : "no rows" }),
      el("button", { type: "button", text: "next ›", disabled: view.page >= pages - 1, onclick: go(view.page + 1) }));
    return el("div", null, nav, el("table", { cls: "experiments" }, el("thead", null, head), body, foot));
  }
  function redrawTable() {
    var focused = document.activeElement && document.activeElement.id === "filter";
    var pos = focused ? document.activeElement.selectionStart : null;
    replace("experiments-table", table());
    if (focused) { var f = document.getElementById("filter"); f.focus(); if (pos !== null) f.setSelectionRange(pos, pos); }
    if (cfg.mode === "report") renderReportDetails();
    document.body.dataset.filtered = view.filter;
    document.body.dataset.page = String(view.page);
  }

  function rateTable(title, rows) {
    return el("div", null, el("h3", { text: title }),
      rows.length ? el("table", { cls: "rates" },
        el("thead", null, el("tr", null, ["name", "finished", "kept", "discarded", "invalid", "crashed", "conflict", "win rate"].map(function (h, i) {
          return el("th", { cls: i ? "num" : null, text: h });
        }))),
        el("tbody", null, rows.map(function (g) {
          return el("tr", { "data-name": g.name },
            el("td", { text: g.name }), el("td", { cls: "num", text: g.finished }),
            el("td", { cls: "num", text: g.kept }), el("td", { cls: "num", text: g.discarded }),
            el("td", { cls: "num", text: g.invalid }), el("td", { cls: "num", text: g.crashed }),
            el("td", { cls: "num", text: g.conflict }),
            el("td", { cls: "num", text: g.win_rate === null ? "–" : (100 * g.win_rate).toFixed(0) + "%" }));
        }))) : el("p", { cls: "empty", text: "no experiments yet" }));
  }
  function rates() {
    var w = data.win_rates || { proposer: [], source_kind: [] };
    return el("section", null, el("h2", { text: "Win rates" }),
      el("div", { cls: "grid2" }, rateTable("by proposer", w.proposer),
         rateTable("by source kind of the hypothesis", w.source_kind)));
  }
  function costs() {
    var c = data.cost || {};
    var res = c.resources || [];
    return el("section", null, el("h2", { text: "Resources used" }),
      res.length ? el("table", { cls: "cost", style: "max-width: 640px" },
        el("thead", null, el("tr", null, el("th", { text: "" }), el("th", { cls: "num", text: "total" }),
           el("th", { cls: "num", text: "per kept change (" + (c.kept || 0) + " kept)" }))),
        el("tbody", null, res.map(function (r) {
          return el("tr", { "data-resource": r.key }, el("td", { text: r.name }),
            el("td", { cls: "num", text: resource(r, r.total) }), el("td", { cls: "num", text: resource(r, r.per_kept) }));
        }))) : el("p", { cls: "empty", text: "nothing measured yet" }));
  }
  // What the model calls cost (assay.spend): dollars of the priced calls, tokens, and what
  // they bought; calls with no price or no usage are counted apart, never as zero.
  function spend() {
    var s = data.spend;
    var title = el("h2", { text: "Spend on model calls" });
    if (!s || !s.calls) return el("section", null, title, el("p", { cls: "empty", text: "no model calls" }));
    function row(key, name, value) {
      return el("tr", { "data-spend": key }, el("td", { text: name }), el("td", { cls: "num", text: value }));
    }
    var unknown = [s.unpriced ? s.unpriced + " with price unknown" : null,
                   s.unknown ? s.unknown + (s.unknown === 1 ? " call" : " calls") + " of unknown usage" : null].filter(function (x) { return x; });
    return el("section", null, title,
      el("table", { cls: "cost", style: "max-width: 640px" }, el("tbody", null,
        row("usd", "spent", usd(s.usd) + (s.complete ? "" : " + unpriced calls")),
        row("calls", "model calls", ints(s.calls) + (unknown.length ? " (" + unknown.join(", ") + ")" : "")),
        row("tokens", "tokens (input · cached · output)", ints(s.tokens_in) + " · " + ints(s.tokens_cached) + " · " + ints(s.tokens_out)),
        row("per_kept", "per kept change (" + s.kept + " kept)", usd(s.usd_per_kept)),
        row("per_percent", "per 1% of improvement" + (s.improvement === null || s.improvement === undefined ? "" : " (" + pct(s.improvement) + ", " + s.improvement_source + ")"), usd(s.usd_per_percent)),
        s.caps_words ? row("caps", "caps", s.caps_words) : null,
        s.stop ? row("stop", "stopped by a rule", s.stop.kind) : null)),
      s.stop ? el("p", { cls: "note", "data-spend": "stop-reason", text: "The run stopped: " + s.stop.reason + ". `assay run --continue` goes on." }) : null);
  }
  // With [fidelity] (assay.decision.agreement): how each level's verdicts held at the next,
  // one row per pair of adjacent levels, the same words `assay status` prints under it.
  function fidelity() {
    var f = data.fidelity;
    var rev = function (p) {
      return p.reversed.length ? p.reversed.map(function (r) { return r.label + " (" + pct(r.effect) + " → " + pct(r.next_effect) + ")"; }).join("; ") : "none";
    };
    return el("section", null, el("h2", { text: "Fidelity levels: does a level's verdict hold at the next?" }),
      el("table", { cls: "rates", id: "fidelity-table" },
        el("thead", null, el("tr", null, ["level", "next level", "promoted", "with a verdict there", "also won there", "ρ (Spearman)", "reversed"].map(function (h, i) {
          return el("th", { cls: i > 1 && i < 6 ? "num" : null, text: h });
        }))),
        el("tbody", null, f.pairs.map(function (p) {
          return el("tr", { "data-level": p.level },
            el("td", { text: p.label }), el("td", { text: p.next_label }),
            el("td", { cls: "num", text: p.promoted }), el("td", { cls: "num", text: p.reached }),
            el("td", { cls: "num", text: p.held }),
            el("td", { cls: "num", text: p.rho === null ? "– (" + p.rho_n + ")" : p.rho.toFixed(2) + " over " + p.rho_n }),
            el("td", { text: rev(p) }));
        }))),
      el("ul", { cls: "events", id: "fidelity-lines" }, f.lines.map(function (t) { return el("li", { text: t }); })),
      f.warnings.length ? el("ul", { cls: "events", id: "fidelity-warnings" }, f.warnings.map(function (t) { return el("li", { cls: "warn", text: "warning: " + t }); })) : null,
      el("p", { cls: "note", text: "Also won: the promoted candidate was promoted or kept at the next level with a positive effect there. Reversed: positive at the level, no win at the next. ρ: the rank correlation of the effects at both levels, over promoted candidates only (a screen that cuts the range lowers it; over fewer than 10 a rough sign). Candidates stopped at a level are never measured at the next." }));
  }
  function events() {
    var evs = data.events || [];
    return el("section", null, el("h2", { text: "Recent events" }),
      evs.length ? el("ul", { cls: "events" }, evs.map(function (e) {
        return el("li", null, el("span", { cls: "ts", text: when(e.ts) }), e.message);
      })) : el("p", { cls: "empty", text: "no events yet" }));
  }

  // A long noise series keeps one point per pixel cell of the chart (1200 × 400): the
  // points it drops would be drawn on top of one it keeps.
  function thinSeries(s) {
    var n = s.x.length;
    if (n <= 3000) return s;
    var ys = s.noise.filter(function (y) { return y !== null && y !== undefined; });
    var x0 = s.x[0], x1 = s.x[n - 1], y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var seen = {}, out = { slot: s.slot, x: [], noise: [], block: [] };
    for (var i = 0; i < n; i++) {
      var key = Math.floor(1200 * (s.x[i] - x0) / ((x1 - x0) || 1)) + ":" + Math.floor(400 * ((s.noise[i] || 0) - y0) / ((y1 - y0) || 1));
      if (seen[key] && i !== n - 1) continue;
      seen[key] = true;
      out.x.push(s.x[i]); out.noise.push(s.noise[i]); out.block.push(s.block[i]);
    }
    return out;
  }
  function noiseTraces() {
    var n = data.noise || { slots: [] };
    var traces = [];
    var quarantined = {};
    (n.quarantined || []).forEach(function (q) { quarantined[q.slot] = q.reason; });
    var maxX = 1;
    (n.slots || []).forEach(function (s0) {
      var s = thinSeries(s0);
      maxX = Math.max(maxX, s.x.length ? s.x[s.x.length - 1] : 1);
      var q = quarantined[s.slot];
      traces.push({ x: s.x, y: s.noise, customdata: s.block, mode: s.x.length > 1500 ? "lines" : "lines+markers",
        name: "slot " + s.slot + (q ? " (quarantined)" : ""),
        marker: { symbol: q ? "x" : "circle", size: q ? 9 : 6 }, line: { width: 1.5, dash: q ? "dot" : "solid" },
        hovertemplate: "%{customdata}: pair noise %{y:.2%}<extra>slot " + s.slot + "</extra>" });
    });
    // δ as each block's decision used it (it follows the measured noise), a step line.
    var d = (n.deltas && n.deltas.x.length) ? n.deltas : { x: [0, maxX], y: [n.delta, n.delta] };
    traces.push({ x: d.x, y: d.y, mode: "lines", name: "δ per block (now " + pct(n.delta).replace("+", "") + ")",
                  line: { color: COLORS.kept, dash: "dash", width: 1.5, shape: "hv" },
                  hovertemplate: "δ %{y:.2%}<extra></extra>" });
    // every change of δ, each with its old and new value and its reason
    var st = (n.steps || []);
    if (st.length) {
      traces.push({ x: st.map(function (q) { return q.x; }), y: st.map(function (q) { return q.new; }),
                    text: st.map(function (q) { return "δ " + pct(q.old).replace("+", "") + " → " + pct(q.new).replace("+", "") + " after " + q.block + ": " + String(q.why).replace(/[<>&]/g, " ").slice(0, 160); }),
                    mode: "markers", name: "δ step (" + st.length + ")", hovertemplate: "%{text}<extra></extra>",
                    marker: { symbol: "diamond", size: 8, color: COLORS.kept } });
    }
    var qs = (n.quarantines || []);
    if (qs.length) {
      traces.push({ x: qs.map(function (q) { return q.x; }),
                    y: qs.map(function (q) { return q.y === null || q.y === undefined ? n.delta : q.y; }),
                    text: qs.map(function (q) { return "slot " + q.slot + " quarantined: " + String(q.reason).replace(/[<>&]/g, " ").slice(0, 100); }),
                    mode: "markers", name: "quarantine", hovertemplate: "%{text}<extra></extra>",
                    marker: { symbol: "x-thin-open", size: 14, color: COLORS.crashed, line: { width: 3, color: COLORS.crashed } } });
    }
    return traces;
  }
  function drawNoise() {
    var div = document.getElementById("noise-chart");
    if (!div || typeof Plotly === "undefined") return;
    var n = data.noise || { slots: [] };
    var q = (n.quarantined || []).map(function (x) { return x.slot + ": " + x.reason; }).join("; ");
    Plotly.react(div, noiseTraces(), {
      margin: { l: 64, r: 16, t: 12, b: 44 }, height: 300, hovermode: "closest",
      xaxis: { title: { text: "block (in the order they finished)" }, tickformat: "d", rangemode: "tozero" },
      yaxis: { title: { text: "pair noise (sd of log-ratio)" }, tickformat: ".1%", rangemode: "tozero" },
      legend: { orientation: "h", y: 1.12, x: 0 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      annotations: [
        q ? { text: "quarantined: " + q.replace(/[<>&]/g, " "), showarrow: false, xref: "paper", yref: "paper", x: 0, y: -0.28, xanchor: "left", font: { size: 11, color: COLORS.crashed } } : null,
        (n.slots || []).length ? null : { text: "no block measured yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 16, color: "#6b7280" } }
      ].filter(function (a) { return a; })
    }, { displaylogo: false, responsive: true }).then(function () { div.dataset.rendered = "1"; });
  }

  function renderOverview(first) {
    replace("summary", summary());
    if (first) {
      document.getElementById("app").appendChild(el("section", { id: "chart-section" },
        el("h2", { text: "Progress" }),
        el("p", { cls: "note", text: "Each experiment in order. Kept ones are drawn at their measured value and joined as the running best (step line); every other one at the running best of its time moved by its decided effect against the incumbent it was compared with: discarded grey, a gain too small to clear δ as an open triangle, crashed ✕ red, invalid ◇ orange, conflict □ dark orange (at the incumbent's value: they have none). The band is the incumbent's noise." }),
        el("div", { id: "progress-chart" })));
      document.getElementById("app").appendChild(el("section", { id: "noise-section" },
        el("h2", { text: "Noise over time" }),
        el("p", { cls: "note", text: "Each slot's noise per block, from its incumbent runs (the sd of one pair's log-ratio they imply), against δ, the smallest effect a keep must clear, as the decision after each block used it (it rises with the measured noise); a diamond marks each change of δ, with its old and new value and its reason. A red ✕ marks when a slot was quarantined; a quarantined slot's line is dotted." }),
        el("div", { id: "noise-chart" })));
      document.getElementById("app").appendChild(el("h2", { id: "experiments-title", text: "Experiments" }));
    }
    drawChart(first);
    drawNoise();
    replace("experiments-table", table());
    document.body.dataset.filtered = view.filter;
    if (data.fidelity) replace("fidelity", fidelity());
    replace("rates", rates());
    replace("costs", costs());
    replace("spend", spend());
    if (cfg.mode === "live") replace("events", events());
    var seen = {};
    (data.experiments || []).forEach(function (r) { seen[r.id] = true; });
    view.seen = seen;
  }

  // -- one experiment ------------------------------------------------------------------
  function diffView(patch) {
    if (!patch || !patch.trim()) return el("p", { cls: "empty", text: "no patch (parameters only)" });
    return el("pre", { cls: "diff" }, patch.split("\n").map(function (line) {
      var cls = null;
      if (/^(\+\+\+|---|diff --git)/.test(line)) cls = "file";
      else if (line.charAt(0) === "+") cls = "add";
      else if (line.charAt(0) === "-") cls = "del";
      else if (line.slice(0, 2) === "@@") cls = "hunk";
      return cls ? el("span", { cls: cls, text: line }) : line + "\n";
    }));
  }
  function intervalBar(d, delta) {
    if (d.lo === null || d.lo === undefined || d.hi === null || d.hi === undefined) return null;
    var lo = Math.min(d.lo, 0, delta || 0), hi = Math.max(d.hi, 0, delta || 0);
    var pad = (hi - lo) * 0.15 || 0.01;
    lo -= pad; hi += pad;
    var W = 520, X = function (v) { return 10 + (W - 20) * (v - lo) / (hi - lo); };
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " 48");
    svg.setAttribute("class", "bar");
    function s(tag, attrs, text) {
      var n = document.createElementNS(ns, tag);
      Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
      if (text) n.textContent = text;
      svg.appendChild(n);
    }
    var color = d.verdict === "keep" ? COLORS.kept : d.verdict === "discard" ? COLORS.discarded : COLORS.running;
    s("line", { x1: X(0), x2: X(0), y1: 10, y2: 34, stroke: "#333", "stroke-width": 1 });
    s("text", { x: X(0) - 3, y: 9, "font-size": 10, "text-anchor": "end" }, "0");
    if (delta) {
      s("line", { x1: X(delta), x2: X(delta), y1: 10, y2: 34, stroke: COLORS.kept, "stroke-dasharray": "3,3" });
      s("text", { x: X(delta) + 3, y: 9, "font-size": 10, "text-anchor": "start", fill: COLORS.kept }, "δ " + pct(delta));
    }
    s("text", { x: X(d.lo) - 2, y: 44, "font-size": 10, "text-anchor": "end", fill: "#555" }, pct(d.lo));
    s("text", { x: X(d.hi) + 2, y: 44, "font-size": 10, "text-anchor": "start", fill: "#555" }, pct(d.hi));
    s("rect", { x: X(d.lo), y: 13, width: Math.max(2, X(d.hi) - X(d.lo)), height: 12, fill: color, opacity: 0.35 });
    if (d.effect !== null && d.effect !== undefined) s("circle", { cx: X(d.effect), cy: 19, r: 5, fill: color });
    return svg;
  }
  function kv(pairs) {
    return el("div", { cls: "kv" }, pairs.filter(function (p) { return p[1] !== null && p[1] !== undefined && p[1] !== ""; }).map(function (p) {
      return [el("div", { cls: "k", text: p[0] }), el("div", { cls: "v" }, p[1])];
    }));
  }
  function logBlock(label, text) {
    if (text === null || text === undefined) return null;
    return el("details", { cls: "log" }, el("summary", { text: label + (text ? "" : " (empty)") }),
              el("pre", { cls: "logtext", text: text || "" }));
  }
  function experimentBody(x) {
    var c = x.cost || {};
    var hyp = x.hypothesis_record;
    var parts = [];
    parts.push(kv([
      ["state", badge(x.state)], ["hypothesis", x.hypothesis], ["proposer", x.proposer],
      ["source kind", x.source_kind + (hyp ? " — " + hyp.text + (hyp.sources.length ? " (" + hyp.sources.join(", ") + ")" : "") : "")],
      ["sources", (x.sources || []).join(", ")], ["parameters", params(x.params)],
      ["reason", x.note], ["commit", x.commit], ["base commit", (x.base_commit || "").slice(0, 12)],
      ["created", when(x.created_at)],
      ["resources", [c.gpu_hours ? c.gpu_hours.toFixed(3) + " GPU-h" : null,
        c.cpu_seconds ? num(c.cpu_seconds) + " CPU-s" : null,
        (c.tokens_in || c.tokens_out) ? num(c.tokens_in) + " + " + num(c.tokens_out) + " tokens" : null,
        c.cost_usd ? usd(c.cost_usd) : null].filter(function (x) { return x; }).join(", ")]
    ]));
    parts.push(el("h3", { text: "Decision" }));
    var decs = x.decisions || [];
    if (!decs.length) parts.push(el("p", { cls: "empty", text: x.finished || ["kept", "discarded", "invalid", "crashed", "conflict"].indexOf(x.state) >= 0 ? "no decision: " + (x.note || x.state) : "no decision yet" }));
    else {
      var last = decs[decs.length - 1];
      parts.push(intervalBar(last, last.delta));
      parts.push(el("table", { cls: "decisions" },
        el("thead", null, el("tr", null, ["rule", "verdict", "effect", "interval", "δ", "pairs", "runs", "reason"].map(function (h) { return el("th", { text: h }); }))),
        el("tbody", null, decs.map(function (d) {
          return el("tr", null, el("td", { text: d.rule }), el("td", { text: d.verdict }),
            el("td", { cls: "num", text: pct(d.effect) }), el("td", { cls: "num", text: interval(d.lo, d.hi) }),
            el("td", { cls: "num", text: pct(d.delta) }), el("td", { cls: "num", text: d.pairs_used }),
            el("td", { cls: "num", text: d.runs_used }), el("td", { text: d.reason }));
        }))));
      var plats = (last.details || {}).platforms || [];
      if (plats.length) {  // with [[platforms]]: each platform's own effect and interval
        parts.push(el("h3", { text: "Per platform" }));
        parts.push(el("table", { cls: "platforms" },
          el("thead", null, el("tr", null, ["platform", "state", "effect", "interval", "pairs", "reason"].map(function (h) { return el("th", { text: h }); }))),
          el("tbody", null, plats.map(function (p) {
            return el("tr", { "data-platform": p.platform }, el("td", { text: p.platform }), el("td", { text: p.state }),
              el("td", { cls: "num", text: pct(p.effect) }), el("td", { cls: "num", text: interval(p.lo, p.hi) }),
              el("td", { cls: "num", text: p.pairs }), el("td", { text: p.reason }));
          }))));
      }
    }
    var guards = x.guards || [];
    if (guards.length) {  // [[guards]]: each side's median and the candidate's change
      parts.push(el("h3", { text: "Guards" + (x.guards_level ? " at " + x.guards_level : "") }));
      parts.push(el("table", { cls: "guards" },
        el("thead", null, el("tr", null, ["guard", "incumbent (median)", "candidate (median)", "change", "tolerance", ""].map(function (h) { return el("th", { text: h }); }))),
        el("tbody", null, guards.map(function (g) {
          var unit = g.unit ? " " + g.unit : "";
          return el("tr", { "data-guard": g.name }, el("td", { text: g.name }),
            el("td", { cls: "num", text: g.incumbent === null ? "–" : num(g.incumbent) + unit }),
            el("td", { cls: "num", text: g.candidate === null ? "–" : num(g.candidate) + unit }),
            el("td", { cls: "num", text: pct(g.better) }), el("td", { cls: "num", text: pct(g.tolerance) }),
            el("td", { text: g.better === null ? "not measured on both sides" : (g.regressed ? "regressed" : "holds") }));
        }))));
    }
    parts.push(el("h3", { text: "Diff" }));
    parts.push(diffView(x.patch));
    parts.push(el("h3", { text: "Runs" }));
    var runs = x.runs || [];
    var over = x.finished || ["kept", "discarded", "invalid", "crashed", "conflict"].indexOf(x.state) >= 0;
    if (!runs.length) parts.push(el("p", { cls: "empty", text: over ? "no runs: it was decided before any run" : "no runs yet" }));
    else parts.push(el("table", { cls: "runs" },
      el("thead", null, el("tr", null, ["run", "role", "status", "metrics", "slot", "wall", "exit", "reason"].map(function (h) { return el("th", { text: h }); }))),
      el("tbody", null, runs.map(function (r) {
        return el("tr", { "data-run": r.run_id }, el("td", { text: r.run_id }),
          el("td", { text: r.role === "A" ? "A (incumbent)" : "B (candidate)" }),
          el("td", null, el("span", { cls: "badge " + runClass(r.status), text: r.status })),
          el("td", { text: Object.keys(r.metrics || {}).map(function (k) { return k + "=" + num(r.metrics[k]); }).join(", ") }),
          el("td", { text: r.slot }), el("td", { cls: "num", text: (r.wall_s || 0).toFixed(2) + " s" }),
          el("td", { cls: "num", text: r.exit_code === null ? "–" : r.exit_code }), el("td", { text: r.reason }));
      }))));
    var blocks = x.blocks || [];
    if (blocks.length) {
      // Build once, measure many: a candidate's blocks after its first build nothing.
      parts.push(el("h3", { text: "Blocks" }));
      parts.push(el("table", { cls: "blocks" },
        el("thead", null, el("tr", null, ["block", "kind", "order", "slot", "state", "wall", "build", "checks"].map(function (h) { return el("th", { text: h }); }))),
        el("tbody", null, blocks.map(function (b) {
          var secs = function (v) { return v === null || v === undefined ? "–" : v.toFixed(2) + " s"; };
          return el("tr", { "data-block": b.id }, el("td", { text: b.id }), el("td", { text: b.kind }),
            el("td", { text: b.order }), el("td", { text: b.slot || "" }), el("td", { text: b.state }),
            el("td", { cls: "num", text: secs(b.wall_s) }), el("td", { cls: "num", text: secs(b.build_s) }),
            el("td", { text: b.checks_outcome ? b.checks_outcome + " (" + (b.checks_runs || 0) + " run" + (b.checks_runs === 1 ? "" : "s") + ")" : "–" }));
        }))));
    }
    parts.push(el("h3", { text: "Logs" }));
    var logs = [];
    runs.forEach(function (r) {
      logs.push(logBlock(r.run_id + " stdout (" + r.stdout_path + ")", r.stdout));
      logs.push(logBlock(r.run_id + " stderr (" + r.stderr_path + ")", r.stderr));
    });
    (x.blocks || []).forEach(function (b) {
      if (b.error) logs.push(el("p", { cls: "note", text: b.id + ": " + b.error_kind + ": " + b.error }));
      (b.logs || []).forEach(function (f) { logs.push(logBlock(b.id + " " + f.name, f.text)); });
    });
    logs = logs.filter(function (n) { return n; });
    parts.push(logs.length ? el("div", { cls: "logs" }, logs) : el("p", { cls: "empty", text: "no log files" }));
    return el("div", { cls: "exp-body" }, parts);
  }

  function runClass(status) {
    return status === "ok" ? "kept" : (status === "invalid" || status === "suspicious") ? "invalid" : "crashed";
  }

  function detailNode(id) {
    var r = (data.experiments || []).filter(function (e) { return e.id === id; })[0];
    if (!r) return null;
    var node = el("details", { cls: "exp", id: id },
      el("summary", null, el("b", { text: r.id }), " ", badge(r.state), " ", r.hypothesis,
         r.effect === null ? "" : " — effect " + pct(r.effect) + " " + interval(r.lo, r.hi)));
    node.addEventListener("toggle", function () {  // the body is drawn when first opened
      if (node.open && !node.dataset.built) { node.dataset.built = "1"; withDetail(id, function (x) { node.appendChild(experimentBody(x)); }); }
    });
    return node;
  }
  // The report keeps the experiments' details in packed chunks of cfg.detail_chunk
  // experiments (in the table's order), each unpacked the first time one of its
  // experiments is opened: a large report's page never parses them all.
  var chunks = {}, positions = null;
  function withDetail(id, fn) {
    if (data.details) { if (data.details[id]) fn(data.details[id]); return; }
    if (!positions) {
      positions = {};
      (data.experiments || []).forEach(function (r, i) { positions[r.id] = i; });
    }
    if (positions[id] === undefined || !cfg.detail_chunk) return;
    var k = Math.floor(positions[id] / cfg.detail_chunk);
    var tag = document.getElementById("assay-details-" + k);
    if (!tag) return;
    if (!chunks[k]) chunks[k] = unpack(tag.textContent).then(function (text) { return JSON.parse(text); });
    chunks[k].then(function (part) { if (part[id]) fn(part[id]); }).catch(fail);
  }
  function openDetail(id, scroll) {
    var d = document.getElementById(id);
    if (!d) {
      d = detailNode(id);
      if (!d) return;
      document.getElementById("details").appendChild(d);
    }
    d.open = true;
    if (!d.dataset.built) { d.dataset.built = "1"; withDetail(id, function (x) { d.appendChild(experimentBody(x)); }); }
    if (scroll) { d.scrollIntoView({ block: "start" }); history.replaceState(null, "", "#" + id); }
  }

  // The report's details: one collapsed entry per row of the table's page, drawn on opening.
  function renderReportDetails() {
    var box = replace("details", el("section", null, el("h2", { text: "Experiments in detail" }),
      el("p", { cls: "note", text: "The experiments of the table's page; open one to see its decisions, runs and logs." }),
      (view.shown || []).map(detailNode)));
    return box;
  }
  var detailsHooked = false;
  function hookDetails() {
    if (detailsHooked) return;
    detailsHooked = true;
    if (location.hash.length > 1) openDetail(location.hash.slice(1), true);
    window.addEventListener("hashchange", function () { openDetail(location.hash.slice(1), true); });
  }

  function renderExperimentPage() {
    var x = data;
    var nav = el("div", { cls: "nav" }, el("a", { href: cfg.base, text: "← all experiments" }),
      x.prev ? el("a", { href: expHref(x.prev), text: "‹ " + x.prev }) : null,
      x.next ? el("a", { href: expHref(x.next), text: x.next + " ›" }) : null,
      el("a", { href: expHref(x.id) + ".json", text: "JSON" }));
    replace("experiment", el("section", null, nav,
      el("h2", null, x.id + " ", badge(x.state), " " + x.hypothesis), experimentBody(x)));
  }

  // -- live updates --------------------------------------------------------------------
  function setLive(ok, text) {
    var box = document.getElementById("live");
    if (!box) return;
    box.className = "live" + (ok ? " on" : "");
    box.lastChild.textContent = text;
  }
  // Fold a `since` answer into the page's data; patch the changed rows of the table in
  // place. Returns true when nothing else needs drawing again.
  function merge(d) {
    var index = {};
    (data.experiments || []).forEach(function (r, i) { index[r.id] = i; });
    var added = 0;
    (d.rows || []).forEach(function (r) {
      if (index[r.id] === undefined) { index[r.id] = data.experiments.length; data.experiments.push(r); added += 1; }
      else data.experiments[index[r.id]] = r;
    });
    var pidx = {};
    var pts = (data.progress || { points: [] }).points;
    pts.forEach(function (q, i) { pidx[q.id] = i; });
    (d.points || []).forEach(function (q) { if (pidx[q.id] === undefined) pts.push(q); else pts[pidx[q.id]] = q; });
    ["counts", "best", "baseline", "improvement", "incumbent", "events", "cost", "spend", "lock"].forEach(function (k) {
      if (d[k] !== undefined) data[k] = d[k];
    });
    data.version = d.version;
    if (!(d.rows || []).length) return true;
    // The running best: kept experiments in order.
    var kept = data.experiments.filter(function (r) { return r.state === "kept" && r.value !== null; })
      .sort(function (a, b) { return a.seq - b.seq; });
    var best = data.progress.best;
    if (data.baseline !== null && data.baseline !== undefined) {
      best.x = [0].concat(kept.map(function (r) { return r.seq; }));
      best.y = [data.baseline].concat(kept.map(function (r) { return r.value; }));
      var last = Math.max.apply(null, data.experiments.map(function (r) { return r.seq; }));
      if (best.x[best.x.length - 1] < last) { best.x.push(last); best.y.push(best.y[best.y.length - 1]); }
    }
    replace("summary", summary());
    drawChart(false);
    if (cfg.mode === "live") replace("events", events());
    replace("costs", costs());
    replace("spend", spend());
    if (added) { redrawTable(); return true; }
    (d.rows || []).forEach(function (r) {  // patch rows in place
      var tr = document.querySelector("#experiments-table tr[data-id='" + r.id + "']");
      if (!tr) return;
      var fresh = rowNode(r, false);
      tr.replaceWith(fresh);
    });
    return true;
  }
  function poll() {
    var url = cfg.page === "experiment" ? cfg.base + "experiments/" + cfg.exp + ".json" :
      cfg.base + "api/status.json" + (view.version ? "?since=" + encodeURIComponent(view.version) : "");
    fetch(url, { cache: "no-store" }).then(function (resp) {
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      return resp.json();
    }).then(function (fresh) {
      view.failures = 0;
      var version = cfg.page === "experiment" ? JSON.stringify([fresh.state, (fresh.runs || []).length, (fresh.decisions || []).length, (fresh.blocks || []).length]) : fresh.version;
      var running = cfg.page === "experiment" ? !fresh.finished : !!(fresh.lock && fresh.lock.running);
      setLive(true, (running ? "live · run in progress" : "live · no run holds the lock") + " · updated " + new Date().toLocaleTimeString());
      if (version !== view.version) {
        view.version = version;
        var patched = false;
        if (fresh.since !== undefined && cfg.page !== "experiment") patched = merge(fresh);
        else data = fresh;
        view.updates += 1;
        document.body.dataset.updates = String(view.updates);
        if (cfg.page === "experiment") renderExperimentPage(); else if (!patched) renderOverview(false);
        document.body.dataset.version = String(version);
      }
    }).catch(function (err) {
      view.failures += 1;
      setLive(false, "disconnected (" + err.message + "); retrying");
    }).then(function () {
      window.setTimeout(poll, cfg.interval * (view.failures ? Math.min(10, 1 + view.failures) : 1));
    });
  }

  // -- start ---------------------------------------------------------------------------
  function start() {
    if (cfg.page === "experiment") renderExperimentPage();
    else {
      renderOverview(true);
      if (cfg.mode === "report") { renderReportDetails(); hookDetails(); }
    }
    view.version = cfg.page === "experiment" ? null : data.version;
    document.body.dataset.ready = "1";
    if (cfg.mode === "live") window.setTimeout(poll, cfg.interval);
  }
  function fail(err) {
    document.getElementById("app").appendChild(el("pre", { text: "could not draw the page: " + err }));
    throw err;
  }
  function unpack(text) {
    var bytes;
    if (Uint8Array.fromBase64) bytes = Uint8Array.fromBase64(text.trim());  // native: ~10x faster
    else {
      var bin = atob(text.trim());
      bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }
  try {
    if (dataTag.type === "application/gzip+base64") {
      unpack(dataTag.textContent).then(function (text) { data = JSON.parse(text); start(); }).catch(fail);
    } else {
      data = JSON.parse(dataTag.textContent);
      start();
    }
  } catch (err) { fail(err); }
})();
