// The sluice page: replays traces of real bench runs, one lane per mode
// (the suite's scenarios, the page's own burst, or a run asked for here),
// and shows the running proxy live. No dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const css = getComputedStyle(document.documentElement);
const color = (name) => css.getPropertyValue("--" + name).trim();
const C = {
  arrive: color("arrive"), wait: color("wait"), flight: color("flight"), stream: color("stream"), ok: color("ok"), err: color("err"),
  cap: color("cap"), text: color("text"), muted: color("muted"), line: color("line"),
  leader: color("leader"), follower: color("follower"), nocache: color("nocache"),
};
// Lane colours, in lane order; plain and windowed keep the colours they
// always had.
const LANE_COLOURS = { direct: color("direct"), plain: color("plain"), windowed: color("windowed") };
const MORE_COLOURS = ["#c792ea", "#4cd69a", "#ffcb6b", "#f07178", "#89ddff"];
const TENANT_COLOURS = ["#f2c14e", "#4cd69a", "#c792ea", "#ff9f68", "#89ddff", "#f07178"];

const state = { trace: null, lanes: [], t: 0, duration: 1, playing: false, speed: 1, last: 0, colourBy: "phase", list: null };

// ---- the trace: every format into one model ----

// A suite trace (web/static/traces/NAME.json) has rows of trace.cols; the
// page's own burst and a run from the form have objects with flush and
// release times. Both become lanes of requests with the same fields.
function normalize(trace, name) {
  if (trace.format === 1) {
    const col = Object.fromEntries(trace.cols.map((c, i) => [c, i]));
    const t = (v) => (v < 0 ? null : v);
    return {
      kind: "suite", name, desc: trace.desc, verdict: trace.verdict.line, outcome: trace.verdict.outcome,
      bucket: trace.bucket || 0, slots: trace.slots || 0, tenants: trace.tenants || [], spikes: trace.spikes || [],
      // the upstream's slots over time, when they change (capacity_steps)
      slotSteps: (trace.lanes[0].figures.phases || []).map((p) => [p.from_s * 1000, p.capacity]),
      hasWindow: false,
      lanes: trace.lanes.map((l, li) => ({
        mode: l.mode, windowed: !!l.windowed, cap: l.cap || trace.cap, series: l.series, colour: laneColour(l.mode, li),
        reqs: l.req.map((r) => ({
          id: r[col.id], arrive: r[col.arrive], slot: t(r[col.slot]), first: t(r[col.first]), done: r[col.done],
          outcome: ["ok", "error", "lost"][r[col.outcome]], status: r[col.status], retries: r[col.retries],
          stream: !!r[col.stream], cache: r[col.cache], tenant: r[col.tenant],
        })),
      })),
    };
  }
  return {
    kind: name ? "burst" : "run", name: name || "", desc: burstDesc(trace.params), verdict: trace.verdict || "", outcome: "",
    bucket: 0, slots: trace.params.capacity, tenants: [], spikes: [], hasWindow: true, params: trace.params,
    lanes: trace.lanes.map((l, li) => ({
      mode: l.mode, windowed: l.mode !== "plain" && l.mode !== "direct", cap: l.cap, series: null, colour: laneColour(l.mode, li),
      reqs: l.requests.map((r) => ({
        id: r.id, arrive: r.arrive, flush: r.flush, slot: r.slot, release: r.release, first: null, done: r.done,
        outcome: r.outcome, status: r.status, retries: 0, stream: r.stream, cache: 0, tenant: 0,
      })),
    })),
  };
}

function laneColour(mode, i) { return LANE_COLOURS[mode] || MORE_COLOURS[i % MORE_COLOURS.length]; }

function burstDesc(p) {
  return p.burst + " requests at once, window " + p.max_size + " or " + p.max_wait_ms + " ms, cap " + p.max_concurrency +
    ", against an upstream with " + (p.capacity || "unlimited") + " generation slots and " + p.latency_ms + " ms to first token; client retries off, so each dot is one call.";
}

// prepare adds what the replay reads often: the in-flight steps (from the
// series when the trace has one, else from the requests' slot intervals),
// the latencies and each lane's figures.
function prepare(m) {
  for (const lane of m.lanes) {
    const reqs = lane.reqs;
    let steps, peak = 0;
    if (lane.series) {
      // Each point is the peak of its step, shown from the step's end, so
      // that the replay never shows a count before it happened; the series
      // ends once every request of the lane has ended, when nothing is in
      // flight or waiting.
      const s = lane.series, vals = lane.windowed && s.gate ? s.gate : s.up, end = (vals.length + 1) * s.step;
      const at = (vs) => [[0, 0], ...vs.map((v, i) => [(i + 1) * s.step, v]), [end, 0]];
      steps = at(vals);
      peak = Math.max(0, ...vals);
      lane.queued = at(s.queued || []);
      lane.upstream = at(s.up);
      lane.bucket = s.bucket ? s.bucket.map((v, i) => [(i + 1) * s.step, v]) : null;
      lane.seriesEnd = end;
    } else {
      const ev = [], qv = [];
      for (const r of reqs) {
        if (r.slot != null && r.release != null) { ev.push([r.slot, 1]); ev.push([r.release, -1]); }
        if (lane.windowed) { qv.push([r.arrive, 1]); qv.push([r.slot ?? r.done, -1]); }
      }
      steps = cumulate(ev);
      peak = Math.max(...steps.map((s) => s[1]));
      lane.queued = cumulate(qv);
      lane.upstream = steps;
      lane.bucket = null;
    }
    lane.steps = steps;
    lane.peak = peak;
    const lat = reqs.filter((r) => r.outcome === "ok").map((r) => r.done - r.arrive).sort((a, b) => a - b);
    const first = Math.min(...reqs.map((r) => r.arrive));
    const end = Math.max(...reqs.map((r) => Math.max(r.done, r.release || 0)));
    lane.lat = lat;
    lane.end = end;
    lane.fig = { peak, p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), errors: reqs.length - lat.length,
      retries: reqs.reduce((n, r) => n + r.retries, 0), retried: reqs.filter((r) => r.retries > 0).length,
      goodput: lat.length / Math.max(0.001, (end - first) / 1000), span: end };
    lane.tenantFig = m.tenants.map((name, ti) => {
      const mine = reqs.filter((r) => r.tenant === ti);
      const ok = mine.filter((r) => r.outcome === "ok").map((r) => r.done - r.arrive).sort((a, b) => a - b);
      return { name, sent: mine.length, ok: ok.length, p50: quantile(ok, 0.5), p99: quantile(ok, 0.99) };
    });
  }
  m.duration = Math.max(...m.lanes.map((l) => l.end)) * 1.02 + 50;
  // one scale for every lane's bar, so that the lanes compare at a glance
  m.barScale = Math.max(1, m.slots || 0, ...m.lanes.map((l) => Math.max(l.peak, l.cap || 0)));
  return m;
}

function cumulate(ev) {
  ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const steps = [[0, 0]];
  let n = 0;
  for (const [t, d] of ev) { n += d; steps.push([t, n]); }
  return steps;
}

// nearest-rank quantile of sorted values, as the bench computes it
function quantile(sorted, p) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] : NaN;
}

function valueAt(steps, t) {
  let lo = 0, hi = steps.length - 1;
  if (hi < 0) return 0;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (steps[mid][0] <= t) lo = mid; else hi = mid - 1; }
  return steps[lo][1];
}

// ---- building the lanes ----

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  e.append(...kids);
  return e;
}

function laneTitle(lane) {
  if (lane.mode === "direct") return "Direct: no sluice";
  if (lane.mode === "plain") return "Plain: straight upstream";
  if (lane.mode === "windowed") return "Windowed: waves under the cap";
  if (lane.mode === "windowed-fifo") return "Windowed, one line (GATE_ORDER=fifo)";
  if (lane.mode === "bulk") return "Bulk: one Message Batch";
  return "Windowed variant: " + lane.mode;
}

function buildLanes(m) {
  const box = $("lanes");
  box.replaceChildren();
  box.dataset.count = m.lanes.length;
  for (const lane of m.lanes) {
    const capText = lane.windowed ? "cap " + lane.cap : "cap " + lane.cap + " (not enforced)";
    const fig = el("figure", { class: "lane", id: "lane-" + lane.mode, "data-mode": lane.mode, "data-requests": lane.reqs.length },
      el("figcaption", {},
        el("h3", { text: laneTitle(lane), style: "color:" + lane.colour }),
        el("p", { class: "gauge" }, (lane.windowed ? "slots held " : "upstream in flight "),
          el("span", { class: "num", id: lane.mode + "-inflight", "data-inflight": "0", "data-cap": String(lane.cap || 0), text: "0" }),
          el("span", { class: "cap", id: lane.mode + "-cap", text: capText }))),
      el("canvas", { id: "canvas-" + lane.mode, role: "img", "aria-label": laneTitle(lane) + ": requests moving from arrival to done" }));
    box.append(fig);
  }
}

// The stations a lane's dots move through. The page's own traces know
// when each window closed; the suite's know when each request's last
// upstream call began and, for a stream, its first token.
function stations(m, lane) {
  if (m.hasWindow) return lane.windowed ? ["in a window", "waiting for a slot", "in flight upstream", "done"] : ["no window", "no gate", "in flight upstream", "done"];
  if (lane.mode === "bulk") return ["in a batch", "in flight upstream", "streaming", "done"];
  return [lane.windowed ? "waiting in sluice" : "before its last call", "upstream, to first token", "streaming", "done"];
}

// phase of a request at t: -1 not arrived, 0..3 the stations; and since when
function phase(m, lane, r, t) {
  if (t < r.arrive) return [-1, 0];
  if (m.hasWindow) {
    if (lane.windowed) {
      if (r.slot == null) {
        if (t >= r.done) return [3, r.done];
        if (r.flush != null && t >= r.flush) return [1, r.flush];
        return [0, r.arrive];
      }
      if (t < (r.flush ?? r.slot)) return [0, r.arrive];
      if (t < r.slot) return [1, r.flush];
      if (t < r.release) return [2, r.slot];
      return [3, r.release];
    }
    const end = r.release ?? r.done;
    if (t < end) return r.slot == null || t >= r.slot ? [2, r.arrive] : [-1, 0];
    return [3, end];
  }
  if (t >= r.done) return [3, r.done];
  if (r.slot == null || t < r.slot) return [0, r.arrive];
  if (r.first != null && t >= r.first) return [2, r.first];
  return [1, r.slot];
}

// ---- drawing ----

function sizeCanvas(cv) {
  const dpr = window.devicePixelRatio || 1;
  const w = cv.clientWidth, h = cv.clientHeight;
  if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
  }
  const g = cv.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  return [g, w, h];
}

function grid(n, w, h) {
  let s = Math.max(2, Math.floor(Math.sqrt((w * h) / Math.max(1, n))));
  for (;;) {
    const cols = Math.max(1, Math.floor(w / s)), rows = Math.ceil(n / cols);
    if (rows * s <= h || s <= 2) return { s, cols };
    s--;
  }
}

// dotColour is a request's fill and the legend key it counts under.
function dotColour(m, r, ph) {
  if (ph === 3 && r.outcome !== "ok") return [C.err, "failed"];
  if (state.colourBy === "cache") return [[C.nocache, C.leader, C.follower][r.cache], ["none", "leader", "follower"][r.cache]];
  if (state.colourBy === "tenant") return [TENANT_COLOURS[r.tenant % TENANT_COLOURS.length], "tenant-" + m.tenants[r.tenant]];
  if (ph === 3) return [C.ok, "done"];
  const p = m.hasWindow ? [C.arrive, C.wait, C.flight][ph] : [C.wait, C.flight, C.stream][ph];
  return [p, "phase-" + ph];
}

function drawLane(m, lane) {
  const cv = $("canvas-" + lane.mode);
  const [g, W, H] = sizeCanvas(cv);
  g.clearRect(0, 0, W, H);
  const t = state.t;
  const top = 20, barH = 44, colGap = 6;
  const colW = (W - colGap * 3) / 4, colH = H - top - barH - 8;
  const N = lane.reqs.length;
  const gr = grid(N, colW - 8, colH - 8);
  const r0 = Math.max(1.2, gr.s * 0.38);
  const names = stations(m, lane);
  g.font = "12px system-ui, sans-serif";
  g.textBaseline = "top";
  for (let c = 0; c < 4; c++) {
    const x = c * (colW + colGap);
    const unused = m.hasWindow && !lane.windowed && (c === 0 || c === 1);
    g.fillStyle = unused ? "rgba(255,255,255,0.02)" : "rgba(255,255,255,0.05)";
    g.fillRect(x, top, colW, colH);
    g.fillStyle = unused ? C.line : C.muted;
    g.fillText(names[c], x + 2, 3, colW - 4);
  }
  const pos = (c, i) => [c * (colW + colGap) + 4 + (i % gr.cols) * gr.s + gr.s / 2, top + 4 + Math.floor(i / gr.cols) * gr.s + gr.s / 2];
  const tween = 120 * state.speed;
  const counts = {};
  let drawn = 0;
  lane.reqs.forEach((r, i) => {
    const [ph, since] = phase(m, lane, r, t);
    if (ph < 0) return;
    let [x, y] = pos(ph, i);
    const dt = t - since;
    if (dt < tween && ph > 0) {
      const prev = m.hasWindow ? (lane.windowed ? ph - 1 : 2) : (r.slot == null ? 0 : ph === 3 ? (r.first != null ? 2 : 1) : ph - 1);
      if (prev !== ph) {
        const [px, py] = pos(prev, i);
        const k = dt / tween, e = k * (2 - k);
        x = px + (x - px) * e; y = py + (y - py) * e;
      }
    }
    const [fill, key] = dotColour(m, r, ph);
    counts[key] = (counts[key] || 0) + 1;
    drawn++;
    g.fillStyle = fill;
    g.beginPath(); g.arc(x, y, r0, 0, Math.PI * 2); g.fill();
    if (r.retries > 0 && t >= r.arrive) { // a ring: the client retried it
      g.strokeStyle = C.text; g.lineWidth = Math.max(1, r0 * 0.35);
      g.beginPath(); g.arc(x, y, r0 + g.lineWidth, 0, Math.PI * 2); g.stroke();
      counts.retried = (counts.retried || 0) + 1;
    }
  });
  cv.dataset.drawn = drawn;
  cv.dataset.colours = JSON.stringify(counts);
  // in-flight bar against the cap line
  const n = valueAt(lane.steps, t);
  const cap = lane.cap || 0;
  const by = H - barH + 10, bh = 16;
  const scale = m.barScale;
  const bw = W - 8;
  g.fillStyle = "rgba(255,255,255,0.06)";
  g.fillRect(4, by, bw, bh);
  g.fillStyle = cap && n > cap ? C.err : C.flight;
  g.fillRect(4, by, (bw * n) / scale, bh);
  g.textBaseline = "top";
  let capX = 0;
  if (cap) {
    capX = 4 + (bw * cap) / scale;
    g.strokeStyle = C.cap; g.lineWidth = 2; g.setLineDash([4, 3]);
    g.beginPath(); g.moveTo(capX, by - 6); g.lineTo(capX, by + bh + 4); g.stroke(); g.setLineDash([]);
    g.fillStyle = C.cap;
    const capLabel = "cap " + cap;
    g.fillText(capLabel, Math.min(capX + 4, W - g.measureText(capLabel).width - 2), by + bh + 2);
  }
  const fig = $("lane-" + lane.mode);
  fig.dataset.cap = cap;
  fig.dataset.capX = capX.toFixed(1);
  const e = $(lane.mode + "-inflight");
  e.textContent = n;
  e.dataset.inflight = n;
  e.dataset.cap = cap;
  e.classList.toggle("over", cap > 0 && n > cap);
}

function fmtMS(v) {
  if (!isFinite(v)) return "–";
  return v >= 10000 ? (v / 1000).toFixed(1) + " s" : Math.round(v) + " ms";
}

function fillFigures(m) {
  const tb = $("figures-body");
  tb.replaceChildren(...m.lanes.map((lane) => {
    const f = lane.fig;
    const cell = (k, text, v) => el("td", { id: lane.mode + "-" + k, "data-value": String(v), text });
    return el("tr", { "data-mode": lane.mode }, el("th", { scope: "row", text: lane.mode, style: "color:" + lane.colour }),
      cell("peak", String(f.peak), f.peak), cell("p50", fmtMS(f.p50), f.p50), cell("p99", fmtMS(f.p99), f.p99),
      cell("errors", String(f.errors), f.errors), cell("retries", f.retries ? f.retries + " (" + f.retried + " req)" : "0", f.retries),
      cell("goodput", f.goodput.toFixed(1) + " /s", f.goodput), cell("span", fmtMS(f.span), f.span));
  }));
  const tw = $("tenants-wrap");
  tw.hidden = !m.tenants.length;
  $("tenants-body").replaceChildren(...m.lanes.flatMap((lane) => lane.tenantFig.map((f, ti) =>
    el("tr", { "data-mode": lane.mode, "data-tenant": f.name },
      el("th", { scope: "row", text: lane.mode }),
      el("td", {}, el("i", { class: "sw", style: "background:" + TENANT_COLOURS[ti % TENANT_COLOURS.length] }), f.name),
      el("td", { text: f.ok + " of " + f.sent }), el("td", { text: fmtMS(f.p50) }), el("td", { text: fmtMS(f.p99) })))));
}

// The legend says what the dots' colours mean under the colouring chosen.
function fillLegend(m) {
  const ul = $("legend");
  const item = (cls, colour, text, data) => el("li", Object.assign({ class: cls }, data || {}), el("i", { class: "sw", style: "background:" + colour }), text);
  const items = [];
  if (state.colourBy === "cache") {
    items.push(item("", C.leader, "wrote the prompt cache (a leader; on the plain path every request on a cold prefix)", { "data-role": "leader" }),
      item("", C.follower, "read it (a follower)", { "data-role": "follower" }),
      item("", C.nocache, "neither", { "data-role": "none" }));
  } else if (state.colourBy === "tenant") {
    m.tenants.forEach((name, i) => items.push(item("", TENANT_COLOURS[i % TENANT_COLOURS.length], "tenant " + name, { "data-tenant": name })));
  } else if (m.hasWindow) {
    items.push(item("", C.arrive, "in a window"), item("", C.wait, "wave released, waiting for a slot"), item("", C.flight, "in flight upstream"), item("", C.ok, "done"));
  } else {
    items.push(item("", C.wait, "waiting (in sluice, or the client's retries)"), item("", C.flight, "upstream, to first token"), item("", C.stream, "streaming"), item("", C.ok, "done"));
  }
  items.push(item("", C.err, "failed"));
  if (m.lanes.some((l) => l.fig.retries > 0)) items.push(el("li", { "data-role": "retried" }, el("i", { class: "sw ring" }), "ring: the client retried it"));
  ul.replaceChildren(...items);
  ul.dataset.colourBy = state.colourBy;
}

// ---- charts: axes with ticks ----

// niceStep is a round step (1, 2 or 5 times a power of ten) for about n ticks up to max.
function niceStep(max, n) {
  const raw = max / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  for (const k of [1, 2, 5, 10]) if (k * p >= raw) return k * p;
  return 10 * p;
}

function fmtS(ms, step) {
  const s = ms / 1000, d = step >= 1000 ? 0 : step >= 100 ? 1 : 2;
  return s.toFixed(d) + " s";
}

function fmtCount(v) { return v >= 10000 ? Math.round(v / 1000) + "k" : String(Math.round(v * 100) / 100); }

// chart draws axes with ticks and labels and returns the scales.
function chart(id, xmax, ymax, ylabel, xfmt) {
  const cv = $(id);
  const [g, W, H] = sizeCanvas(cv);
  g.clearRect(0, 0, W, H);
  const pad = { l: 44, r: 10, t: 30, b: 30 };
  const X = (v) => pad.l + ((W - pad.l - pad.r) * v) / xmax, Y = (v) => H - pad.b - ((H - pad.t - pad.b) * v) / ymax;
  g.strokeStyle = C.line; g.lineWidth = 1;
  g.beginPath(); g.moveTo(pad.l, pad.t); g.lineTo(pad.l, H - pad.b); g.lineTo(W - pad.r, H - pad.b); g.stroke();
  g.font = "11px system-ui, sans-serif"; g.fillStyle = C.muted;
  const xs = niceStep(xmax, Math.max(2, Math.floor((W - pad.l) / 70)));
  g.textAlign = "center"; g.textBaseline = "top";
  for (let v = 0; v <= xmax + 1e-9; v += xs) {
    g.beginPath(); g.moveTo(X(v), H - pad.b); g.lineTo(X(v), H - pad.b + 4); g.stroke();
    g.fillText((xfmt || fmtS)(v, xs), X(v), H - pad.b + 5);
  }
  const ys = niceStep(ymax, Math.max(2, Math.floor((H - pad.t - pad.b) / 30)));
  g.textAlign = "right"; g.textBaseline = "middle";
  for (let v = 0; v <= ymax + 1e-9; v += ys) {
    g.strokeStyle = "rgba(255,255,255,0.06)";
    g.beginPath(); g.moveTo(pad.l, Y(v)); g.lineTo(W - pad.r, Y(v)); g.stroke();
    g.fillText(fmtCount(v), pad.l - 5, Y(v));
  }
  g.save(); g.translate(10, (pad.t + H - pad.b) / 2); g.rotate(-Math.PI / 2); g.textAlign = "center"; g.fillText(ylabel, 0, 0); g.restore();
  g.strokeStyle = C.line;
  return { g, W, H, X, Y, pad };
}

// stepLine draws steps up to until (the end of what was measured; xmax
// when not given), starting from the first step's value.
function stepLine(c, steps, xmax, colour, until) {
  const { g, X, Y } = c;
  const end = Math.min(xmax, until ?? xmax);
  g.strokeStyle = colour; g.lineWidth = 2; g.beginPath();
  let prev = steps.length ? steps[0][1] : 0;
  g.moveTo(X(0), Y(prev));
  for (const [t, n] of steps) { if (t > end) break; g.lineTo(X(t), Y(prev)); g.lineTo(X(t), Y(n)); prev = n; }
  g.lineTo(X(end), Y(prev)); g.stroke();
}

// hline draws a dashed level across the chart, labelled at its right end
// (at its left with left, to stay clear of a label on the right).
function hline(c, v, xmax, colour, label, left) {
  const { g, X, Y } = c;
  g.strokeStyle = colour; g.lineWidth = 1.5; g.setLineDash([5, 4]);
  g.beginPath(); g.moveTo(X(0), Y(v)); g.lineTo(X(xmax), Y(v)); g.stroke(); g.setLineDash([]);
  g.fillStyle = colour; g.textAlign = left ? "left" : "right"; g.textBaseline = "bottom";
  g.fillText(label, left ? X(0) + 4 : X(xmax) - 2, Y(v) - 2);
}

function cursor(c) {
  const { g, X, H, pad } = c;
  g.strokeStyle = C.text; g.lineWidth = 1;
  g.beginPath(); g.moveTo(X(state.t), pad.t); g.lineTo(X(state.t), H - pad.b); g.stroke();
}

function spikes(c, m) {
  for (const sp of m.spikes) {
    c.g.fillStyle = "rgba(255,107,107,0.10)";
    c.g.fillRect(c.X(sp.from_s * 1000), c.pad.t, c.X(sp.to_s * 1000) - c.X(sp.from_s * 1000), c.H - c.pad.t - c.pad.b);
  }
}

function chartLegend(c, m) {
  const { g, pad } = c;
  g.font = "11px system-ui, sans-serif"; g.textBaseline = "top"; g.textAlign = "left";
  let x = pad.l + 6, y = 1;
  for (const l of m.lanes) {
    const w = 22 + g.measureText(l.mode).width;
    if (x + w > c.W && x > pad.l + 6) { x = pad.l + 6; y += 12; } // wrap on a narrow chart
    g.fillStyle = l.colour; g.fillRect(x, y + 4, 10, 3); g.fillStyle = C.text; g.fillText(l.mode, x + 14, y);
    x += w;
  }
}

function drawCharts(m) {
  const xmax = m.duration;
  { // in flight over time
    // the upstream's slots count only when they are near what was in flight
    const top = Math.max(1, ...m.lanes.map((l) => Math.max(l.peak, l.cap || 0)));
    const ymax = Math.max(top, m.slots && m.slots <= 1.5 * top ? m.slots : 0) * 1.12;
    const c = chart("chart-inflight", xmax, ymax, "in flight");
    spikes(c, m);
    // each windowed lane's cap: one line when they agree, else one in each lane's colour
    const caps = [...new Set(m.lanes.filter((l) => l.windowed).map((l) => l.cap))];
    for (const l of m.lanes) {
      if (!l.windowed || !caps.includes(l.cap)) continue;
      hline(c, l.cap, xmax, caps.length > 1 ? l.colour : C.cap, "cap " + l.cap);
      caps.splice(caps.indexOf(l.cap), 1);
    }
    if (m.slotSteps && m.slotSteps.length) {
      c.g.setLineDash([2, 3]); stepLine(c, m.slotSteps, xmax, C.muted); c.g.setLineDash([]);
      c.g.fillStyle = C.muted; c.g.textAlign = "left"; c.g.textBaseline = "bottom";
      c.g.fillText("upstream slots", c.X(0) + 4, c.Y(m.slotSteps[0][1]) - 2);
    } else if (m.slots && m.slots < ymax && !m.lanes.some((l) => l.windowed && l.cap === m.slots)) {
      hline(c, m.slots, xmax, C.muted, "upstream slots " + m.slots, true);
    }
    for (const l of [...m.lanes].reverse()) stepLine(c, l.steps, xmax, l.colour); // plain and windowed on top
    cursor(c); chartLegend(c, m);
  }
  { // waiting in sluice over time
    const ymax = Math.max(1, ...m.lanes.map((l) => Math.max(0, ...l.queued.map((s) => s[1])))) * 1.12;
    const c = chart("chart-queued", xmax, ymax, "waiting");
    for (const l of [...m.lanes].reverse()) if (l.windowed) stepLine(c, l.queued, xmax, l.colour);
    cursor(c); chartLegend(c, m);
  }
  { // latency CDF
    const lmax = Math.max(1, ...m.lanes.map((l) => l.lat.at(-1) || 0)) * 1.05;
    const c = chart("chart-cdf", lmax, 1, "share done", fmtS);
    for (const l of m.lanes) {
      const n = l.reqs.length;
      c.g.strokeStyle = l.colour; c.g.lineWidth = 2; c.g.beginPath(); c.g.moveTo(c.X(0), c.Y(0));
      l.lat.forEach((v, i) => { c.g.lineTo(c.X(v), c.Y(i / n)); c.g.lineTo(c.X(v), c.Y((i + 1) / n)); });
      c.g.stroke();
    }
    chartLegend(c, m);
  }
  const bfig = $("bucket-fig"), bcv = $("chart-bucket");
  bfig.hidden = !m.bucket;
  if (m.bucket) { // the simulator's input-token bucket
    const c = chart("chart-bucket", xmax, m.bucket * 1.12, "tokens");
    hline(c, m.bucket, xmax, C.cap, "capacity " + m.bucket.toLocaleString("en"));
    let lines = 0;
    for (const l of [...m.lanes].reverse()) if (l.bucket) { stepLine(c, l.bucket, xmax, l.colour, l.seriesEnd); lines++; }
    cursor(c); chartLegend(c, m);
    bcv.dataset.lines = lines; bcv.dataset.capacity = m.bucket;
  } else {
    bcv.dataset.lines = 0; bcv.dataset.capacity = 0;
  }
}

function render() {
  const m = state.trace;
  if (!m) return;
  for (const l of m.lanes) drawLane(m, l);
  drawCharts(m);
  const clock = $("clock");
  clock.textContent = fmtMS(state.t);
  clock.dataset.ms = Math.round(state.t);
  $("scrub").value = Math.round((state.t / state.duration) * 1000);
}

// ---- loading a trace ----

// The colouring that shows what a scenario is about: the prompt cache's
// leaders and followers, the tenants, or each request's phase.
function defaultColouring(m) {
  if (m.tenants.length > 1) return "tenant";
  if (m.lanes.some((l) => l.reqs.some((r) => r.cache > 0))) return "cache";
  return "phase";
}

function load(trace, name, note) {
  const m = prepare(normalize(trace, name));
  state.trace = m;
  state.duration = m.duration;
  state.colourBy = defaultColouring(m);
  const pick = $("colour-by");
  pick.value = state.colourBy;
  pick.querySelector('option[value="tenant"]').disabled = m.tenants.length < 2;
  pick.querySelector('option[value="cache"]').disabled = !m.lanes.some((l) => l.reqs.some((r) => r.cache > 0));
  const v = $("verdict");
  v.textContent = m.verdict || "No verdict line for this trace.";
  v.dataset.outcome = m.outcome || "";
  $("trace-desc").textContent = m.desc;
  const why = state.list && m.kind === "suite" && m.name === state.list.default ? state.list.why : "";
  $("trace-why").textContent = why;
  $("trace-why").hidden = !why;
  buildLanes(m);
  fillLegend(m);
  fillFigures(m);
  if (m.params) fillForm(m.params);
  document.body.dataset.trace = m.name || "run";
  // a long run starts faster, so that a replay takes seconds, not minutes
  state.speed = m.duration > 60000 ? 8 : m.duration > 20000 ? 4 : 1;
  $("speed").value = String(state.speed);
  state.t = 0;
  pause();
  setTime(0);
  document.body.dataset.state = "ready";
  if (note) $("run-status").textContent = note;
}

// pickTrace fetches a shipped trace, only once it is picked.
async function pickTrace(name) {
  document.body.dataset.state = "loading";
  try {
    const r = await fetch("api/traces/" + encodeURIComponent(name));
    const body = await r.json();
    if (!r.ok) throw new Error((body.error && body.error.message) || r.statusText);
    load(body, name);
    $("trace-pick").value = name;
    if (history.replaceState) history.replaceState(null, "", "#" + name);
  } catch (err) {
    $("trace-desc").textContent = "Could not load the trace " + name + ": " + err.message;
    document.body.dataset.state = "error";
  }
}

async function loadList() {
  const r = await fetch("api/traces");
  if (!r.ok) throw new Error(r.statusText);
  const list = await r.json();
  state.list = list;
  const sel = $("trace-pick");
  sel.replaceChildren(...list.traces.map((t) => el("option", { value: t.name, text: t.name + (t.name === list.default ? " (shown first)" : "") + " · " + t.lanes + " lanes" })));
  const hash = decodeURIComponent(location.hash.slice(1));
  return list.traces.some((t) => t.name === hash) ? hash : list.default;
}

// ---- playback ----

function setTime(t) { state.t = Math.max(0, Math.min(state.duration, t)); render(); }

function frame(now) {
  if (!state.playing) return;
  const dt = now - state.last;
  state.last = now;
  setTime(state.t + dt * state.speed);
  if (state.t >= state.duration) { pause(); return; }
  requestAnimationFrame(frame);
}

function play() {
  if (!state.trace) return;
  if (state.t >= state.duration) setTime(0);
  state.playing = true;
  state.last = performance.now();
  $("play").textContent = "Pause";
  $("play").setAttribute("aria-pressed", "true");
  requestAnimationFrame(frame);
}

function pause() {
  state.playing = false;
  $("play").textContent = "Play";
  $("play").setAttribute("aria-pressed", "false");
}

$("play").addEventListener("click", () => (state.playing ? pause() : play()));
$("restart").addEventListener("click", () => { setTime(0); play(); });
$("speed").addEventListener("change", (e) => { state.speed = Number(e.target.value); });
$("scrub").addEventListener("input", (e) => { setTime((Number(e.target.value) / 1000) * state.duration); });
$("trace-pick").addEventListener("change", (e) => { if (e.target.value !== "run") pickTrace(e.target.value); });
$("colour-by").addEventListener("change", (e) => { state.colourBy = e.target.value; if (state.trace) { fillLegend(state.trace); render(); } });
document.addEventListener("keydown", (e) => {
  const tag = e.target.tagName;
  if (tag === "INPUT" || tag === "SELECT" || tag === "BUTTON" || tag === "TEXTAREA" || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === " ") { e.preventDefault(); state.playing ? pause() : play(); }
  else if (e.key === "r" || e.key === "R") { setTime(0); play(); }
  else if (e.key === "ArrowRight") setTime(state.t + state.duration / 50);
  else if (e.key === "ArrowLeft") setTime(state.t - state.duration / 50);
});
window.addEventListener("resize", render);

// ---- running a scenario on the server ----

const FIELDS = ["burst", "max_size", "max_wait_ms", "max_concurrency", "latency_ms", "capacity", "spike_factor", "spike_from_ms", "spike_to_ms"];

function fillForm(p) {
  for (const f of FIELDS) if (p[f] != null) $(f).value = p[f];
  if (!p.spike_factor) { $("spike_factor").value = 1; $("spike_from_ms").value = 0; $("spike_to_ms").value = 1000; }
}

let runsOff = false;
$("params").addEventListener("submit", async (e) => {
  e.preventDefault();
  const p = {};
  for (const f of FIELDS) p[f] = Number($(f).value);
  if (p.spike_factor === 1) { p.spike_factor = 0; p.spike_from_ms = 0; p.spike_to_ms = 0; }
  const status = $("run-status");
  status.textContent = "Running " + p.burst + " requests through both paths…";
  document.body.dataset.state = "running";
  $("run").disabled = true;
  try {
    const resp = await fetch("api/run", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(p) });
    const body = await resp.json();
    if (!resp.ok) throw Object.assign(new Error((body.error && body.error.message) || resp.statusText), { status: resp.status });
    const sel = $("trace-pick");
    if (!sel.querySelector('option[value="run"]')) sel.append(el("option", { value: "run", text: "your run" }));
    sel.value = "run";
    load(body, "", "Ran " + p.burst + " requests: window " + p.max_size + " or " + p.max_wait_ms + " ms, cap " + p.max_concurrency + ". Press Play.");
  } catch (err) {
    status.textContent = "The run failed: " + err.message;
    document.body.dataset.state = "error";
    if (err.status === 403) runsOff = true; // this sluice takes no runs from the page (UI_BENCH_RUNS)
  } finally {
    $("run").disabled = runsOff;
  }
});

// ---- live ----

function ago(ms, now) { const d = Math.max(0, now - ms); return d < 1000 ? d + " ms ago" : (d / 1000).toFixed(1) + " s ago"; }

function live() {
  const status = $("live-status");
  const es = new EventSource("api/live");
  es.addEventListener("open", () => { status.textContent = "Connected: updates up to 10 a second."; status.dataset.state = "open"; });
  es.addEventListener("error", () => {
    status.textContent = "Not connected to a live sluice (retrying).";
    status.dataset.state = "closed";
  });
  es.addEventListener("live", (e) => {
    const u = JSON.parse(e.data), gz = u.gauges;
    const gate = $("live-gate");
    gate.textContent = !gz.windowed ? "windowing off (BATCH_ENABLED=0): no gate"
      : gz.in_flight + " of " + gz.slots + " slots held" + (gz.adaptive ? " (adaptive limit, at most " + gz.max_slots + ")" : "");
    gate.dataset.inflight = gz.in_flight; gate.dataset.slots = gz.slots;
    $("live-gate-bar").style.width = gz.windowed && gz.slots ? Math.min(100, (100 * gz.in_flight) / gz.slots) + "%" : "0";
    const q = $("live-queued"); q.textContent = gz.queued; q.dataset.queued = gz.queued;
    $("live-settings").textContent = gz.windowed
      ? "Window closes at " + gz.max_size + " requests or " + gz.max_wait_ms + " ms. Seen since you opened this page: " + u.waves_seen + " waves, " + u.requests_seen + " requests."
      : "Seen since you opened this page: " + u.requests_seen + " requests.";
    const bl = $("live-buckets");
    const buckets = gz.buckets || [];
    bl.replaceChildren(...buckets.map((b) => {
      const li = document.createElement("li");
      li.dataset.key = b.key; li.dataset.limit = b.limit; li.dataset.level = Math.round(b.level);
      const pct = b.size ? Math.max(0, Math.min(100, (100 * b.level) / b.size)) : 0;
      li.textContent = "key " + b.key.slice(0, 8) + " · " + b.limit + ": " + Math.round(Math.max(0, b.level)).toLocaleString("en") + " of " + b.size.toLocaleString("en") + " (" + pct.toFixed(0) + "%)";
      return li;
    }));
    if (!buckets.length) { const li = document.createElement("li"); li.textContent = "none known yet (RATE_LIMIT_PACING=buckets learns them from the upstream's answers)"; bl.append(li); }
    const ul = $("live-waves");
    ul.replaceChildren(...u.waves.map((w) => {
      const li = document.createElement("li");
      li.dataset.wave = w.id; li.dataset.size = w.size; li.dataset.reason = w.reason; li.className = w.reason;
      li.textContent = "wave " + w.id + " · " + w.size + " req · by " + w.reason + " · " + ago(w.at_ms, u.now_ms);
      return li;
    }));
    if (!u.waves.length) { const li = document.createElement("li"); li.textContent = "no waves yet"; ul.append(li); }
    // The busiest tenants (the server sends at most ten), by what they
    // have waiting and in flight.
    const tt = $("live-tenants"), tenants = gz.tenants || [];
    tt.replaceChildren(...tenants.map((t) => {
      const tr = document.createElement("tr");
      tr.dataset.tenant = t.tenant;
      [t.tenant, t.waiting, t.in_flight, t.served, t.shed, t.tokens].forEach((c) => { const td = document.createElement("td"); td.textContent = String(c); tr.append(td); });
      return tr;
    }));
    if (!tenants.length) { const tr = document.createElement("tr"), td = document.createElement("td"); td.colSpan = 6; td.textContent = "no tenants yet"; tr.append(td); tt.append(tr); }
    // The books' outage, when there is one: budgets enforced from memory.
    const bn = $("live-books");
    bn.textContent = gz.books || ""; bn.hidden = !gz.books;
    // Spend by tenant and model, the costliest first (the server sends
    // at most ten pairs).
    const sp = $("live-spend"), spent = gz.spend || [];
    sp.replaceChildren(...spent.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.tenant = s.tenant; tr.dataset.model = s.model; tr.dataset.usd = s.usd; tr.dataset.tokens = s.tokens;
      let usd = "$" + (s.usd < 1 ? s.usd.toFixed(4) : s.usd.toFixed(2));
      if (s.unpriced_tokens) usd = s.usd ? usd + " (no price for some)" : "no price";
      else if (s.estimated_usd) usd += " (estimated in part)";
      [s.tenant || "–", s.model, usd, s.tokens.toLocaleString("en")].forEach((c) => { const td = document.createElement("td"); td.textContent = c; tr.append(td); });
      return tr;
    }));
    if (!spent.length) { const tr = document.createElement("tr"), td = document.createElement("td"); td.colSpan = 4; td.textContent = "no spend yet"; tr.append(td); sp.append(tr); }
    // The backend keys, in the config file's order; the section shows
    // only when sluice routes over backends.
    const bk = $("live-backends"), backends = gz.backends || [];
    $("live-backends-section").hidden = !backends.length;
    bk.replaceChildren(...backends.map((b) => {
      const tr = document.createElement("tr");
      tr.dataset.key = b.key; tr.dataset.healthy = b.healthy; tr.dataset.routed = b.routed; tr.dataset.pending = b.pending; tr.dataset.failedOver = b.failed_over;
      [b.key, b.pending + " / " + b.cap, b.healthy ? "tried" : "skipped", b.routed, b.by_affinity, b.by_session, b.failed_over, b.failures, b.rate_limited, b.cache_read_tokens.toLocaleString("en")]
        .forEach((c) => { const td = document.createElement("td"); td.textContent = String(c); tr.append(td); });
      return tr;
    }));
    // Why cache writes happened, the costliest first (the server sends
    // at most one row per block label).
    const cw = $("live-cache-writes"), writes = gz.cache_writes || [];
    cw.replaceChildren(...writes.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.block = s.block; tr.dataset.writes = s.writes; tr.dataset.tokens = s.tokens;
      [s.block, s.writes.toLocaleString("en"), s.tokens.toLocaleString("en"), Math.round(s.tokens / s.writes).toLocaleString("en")]
        .forEach((c) => { const td = document.createElement("td"); td.textContent = c; tr.append(td); });
      return tr;
    }));
    if (!writes.length) { const tr = document.createElement("tr"), td = document.createElement("td"); td.colSpan = 4; td.textContent = "no cache writes yet"; tr.append(td); cw.append(tr); }
    const tb = $("live-requests");
    tb.replaceChildren(...u.requests.slice(0, 15).map((r) => {
      const tr = document.createElement("tr");
      tr.dataset.wave = r.wave;
      tr.dataset.cache = r.cache || "";
      // A group: one leader writes the shared prompt, its followers wait
      // for its first token and read it.
      const cache = !r.cache ? "–" : r.cache === "follower" ? "follower, held " + fmtMS(r.cache_hold_ms || 0) : r.cache;
      const cells = [ago(r.at_ms, u.now_ms), r.wave ? String(r.wave) : "–", fmtMS(r.queue_wait_ms), fmtMS(r.total_ms), String(r.status), cache, r.tenant || "–"];
      cells.forEach((c, i) => { const td = document.createElement("td"); td.textContent = c; if (i === 4) td.className = r.status < 400 ? "s-ok" : "s-err"; tr.append(td); });
      return tr;
    }));
  });
}

// ---- bulk batches ----

// The bulk endpoint's newest batches, read every two seconds (the server
// reads its store at most once a second for all tabs). Errored counts
// canceled and expired results too: every result that is not a success.
async function bulkBatches() {
  const status = $("bulk-status"), tb = $("bulk-batches");
  try {
    const r = await fetch("api/bulk", { cache: "no-store" });
    if (!r.ok) throw new Error(r.statusText);
    const u = await r.json();
    status.dataset.state = u.enabled ? "on" : "off";
    if (!u.enabled) {
      status.textContent = "The bulk endpoint is off (BULK_ENABLED=0).";
      tb.replaceChildren();
      return;
    }
    status.textContent = u.batches.length ? "The newest " + u.batches.length + " batches, newest first." : "No bulk batches yet: requests sent to POST /v1/bulk/messages go upstream as one batch per key when their window closes.";
    tb.replaceChildren(...u.batches.map((b) => {
      const tr = document.createElement("tr");
      tr.dataset.batch = b.id; tr.dataset.key = b.key; tr.dataset.status = b.status;
      tr.dataset.count = b.count; tr.dataset.succeeded = b.succeeded; tr.dataset.pending = b.pending;
      const errored = b.errored + b.canceled + b.expired;
      [b.upstream_id || b.id, b.key, b.count, b.succeeded, errored, b.pending, b.status.replace("_", " "), ago(b.created_at_ms, u.now_ms)]
        .forEach((c) => { const td = document.createElement("td"); td.textContent = String(c); tr.append(td); });
      return tr;
    }));
  } catch (err) {
    status.textContent = "Could not read the bulk batches: " + err.message;
    status.dataset.state = "error";
  }
}

// ---- start ----

loadList()
  .then(pickTrace)
  .catch((err) => { $("trace-desc").textContent = "Could not load the list of traces: " + err.message; document.body.dataset.state = "error"; });
live();
bulkBatches();
setInterval(bulkBatches, 2000);
