// The sluice page: replays a trace of the same burst through the plain and
// the windowed path, and shows the running proxy live. No dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const css = getComputedStyle(document.documentElement);
const color = (name) => css.getPropertyValue("--" + name).trim();
const C = {
  arrive: color("arrive"), wait: color("wait"), flight: color("flight"), ok: color("ok"), err: color("err"),
  cap: color("cap"), text: color("text"), muted: color("muted"), line: color("line"),
  plain: color("plain"), windowed: color("windowed"),
};
const MODES = ["plain", "windowed"];
const STATIONS = ["in a window", "waiting for a slot", "in flight upstream", "done"];

const state = { trace: null, lanes: {}, t: 0, duration: 1, playing: false, speed: 1, last: 0 };

// ---- the trace ----

function prepare(trace) {
  const lanes = {};
  for (const l of trace.lanes) {
    const reqs = l.requests;
    // in-flight steps: +1 at slot, -1 at release
    const ev = [];
    for (const r of reqs) {
      if (r.slot != null && r.release != null) { ev.push([r.slot, 1]); ev.push([r.release, -1]); }
    }
    ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const steps = [[0, 0]];
    let n = 0, peak = 0;
    for (const [t, d] of ev) { n += d; peak = Math.max(peak, n); steps.push([t, n]); }
    const lat = reqs.filter((r) => r.outcome === "ok").map((r) => r.done - r.arrive).sort((a, b) => a - b);
    const first = Math.min(...reqs.map((r) => r.arrive));
    const end = Math.max(...reqs.map((r) => Math.max(r.done, r.release || 0)));
    const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.max(0, Math.ceil(p * lat.length) - 1))] : NaN);
    lanes[l.mode] = {
      mode: l.mode, cap: l.cap, reqs, steps, peak, lat, end,
      waves: l.waves || [],
      fig: { peak, p50: q(0.5), p99: q(0.99), errors: reqs.length - lat.length,
             goodput: lat.length / Math.max(0.001, (end - first) / 1000), span: end },
    };
  }
  return lanes;
}

function load(trace, note) {
  state.trace = trace;
  state.lanes = prepare(trace);
  state.duration = Math.max(...MODES.map((m) => state.lanes[m].end)) + 100;
  setTime(0);
  pause();
  fillFigures();
  fillForm(trace.params);
  drawCharts();
  document.body.dataset.state = "ready";
  if (note) $("run-status").textContent = note;
}

function inflightAt(lane, t) {
  // last step at or before t
  const s = lane.steps;
  let lo = 0, hi = s.length - 1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (s[mid][0] <= t) lo = mid; else hi = mid - 1; }
  return s[lo][1];
}

// phase of a request at t: -1 not arrived, 0 window, 1 waiting for slot, 2 upstream, 3 done; and since when
function phase(r, t, windowed) {
  if (t < r.arrive) return [-1, 0];
  if (windowed) {
    if (r.slot == null) { // never got a slot
      if (t >= r.done) return [3, r.done];
      if (r.flush != null && t >= r.flush) return [1, r.flush];
      return [0, r.arrive];
    }
    if (t < (r.flush ?? r.slot)) return [0, r.arrive];
    if (t < r.slot) return [1, r.flush];
    if (t < r.release) return [2, r.slot];
    return [3, r.release];
  }
  // plain: no window and no gate; it is in flight from its upstream call's
  // start (a few ms after arrival) to its end
  const end = r.release ?? r.done;
  if (t < end) return r.slot == null || t >= r.slot ? [2, r.arrive] : [-1, 0];
  return [3, end];
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

function drawLane(mode) {
  const lane = state.lanes[mode];
  const cv = $("canvas-" + mode);
  const [g, W, H] = sizeCanvas(cv);
  g.clearRect(0, 0, W, H);
  const windowed = mode === "windowed";
  const t = state.t;
  const top = 20, barH = 44, colGap = 6;
  const colW = (W - colGap * 3) / 4, colH = H - top - barH - 8;
  const N = lane.reqs.length;
  const gr = grid(N, colW - 8, colH - 8);
  const r0 = Math.max(1.2, gr.s * 0.38);
  g.font = "12px system-ui, sans-serif";
  g.textBaseline = "top";
  for (let c = 0; c < 4; c++) {
    const x = c * (colW + colGap);
    const unused = !windowed && (c === 0 || c === 1);
    g.fillStyle = unused ? "rgba(255,255,255,0.02)" : "rgba(255,255,255,0.05)";
    g.fillRect(x, top, colW, colH);
    g.fillStyle = unused ? C.line : C.muted;
    const label = unused ? (c === 0 ? "no window" : "no gate") : STATIONS[c];
    g.fillText(label, x + 2, 3, colW - 4);
  }
  const pos = (c, i) => {
    const x = c * (colW + colGap) + 4 + (i % gr.cols) * gr.s + gr.s / 2;
    const y = top + 4 + Math.floor(i / gr.cols) * gr.s + gr.s / 2;
    return [x, y];
  };
  const tween = 120 * state.speed;
  lane.reqs.forEach((r, i) => {
    const [ph, since] = phase(r, t, windowed);
    if (ph < 0) return;
    let [x, y] = pos(ph, i);
    const dt = t - since;
    if (dt < tween && ph > 0) {
      const prev = windowed ? ph - 1 : (ph === 3 ? 2 : 2);
      if (prev !== ph) {
        const [px, py] = pos(prev, i);
        const k = dt / tween, e = k * (2 - k);
        x = px + (x - px) * e; y = py + (y - py) * e;
      }
    }
    g.fillStyle = ph === 3 ? (r.outcome === "ok" ? C.ok : C.err) : [C.arrive, C.wait, C.flight][ph];
    g.beginPath(); g.arc(x, y, r0, 0, Math.PI * 2); g.fill();
  });
  // in-flight bar against the cap line
  const n = inflightAt(lane, t);
  const by = H - barH + 10, bh = 16;
  const scale = Math.max(N, lane.cap, 1);
  const bw = W - 8;
  g.fillStyle = "rgba(255,255,255,0.06)";
  g.fillRect(4, by, bw, bh);
  g.fillStyle = n > lane.cap ? C.err : C.flight;
  g.fillRect(4, by, (bw * n) / scale, bh);
  const capX = 4 + (bw * lane.cap) / scale;
  g.strokeStyle = C.cap; g.lineWidth = 2; g.setLineDash([4, 3]);
  g.beginPath(); g.moveTo(capX, by - 6); g.lineTo(capX, by + bh + 4); g.stroke(); g.setLineDash([]);
  g.fillStyle = C.cap; g.textBaseline = "top";
  const capLabel = "cap " + lane.cap;
  g.fillText(capLabel, Math.min(capX + 4, W - g.measureText(capLabel).width - 2), by + bh + 2);
  g.fillStyle = C.text;
  g.textAlign = "right";
  g.fillText("in flight " + n, W - 4, by + bh + 2);
  g.textAlign = "left";
  const fig = $("lane-" + mode);
  fig.dataset.cap = lane.cap;
  fig.dataset.capX = capX.toFixed(1);
  const el = $(mode + "-inflight");
  el.textContent = n;
  el.dataset.inflight = n;
  el.dataset.cap = lane.cap;
  el.classList.toggle("over", n > lane.cap);
  $(mode + "-cap").textContent = lane.cap;
}

function fmtMS(v) {
  if (!isFinite(v)) return "–";
  return v >= 10000 ? (v / 1000).toFixed(1) + " s" : Math.round(v) + " ms";
}

function fillFigures() {
  for (const m of MODES) {
    const f = state.lanes[m].fig;
    const set = (k, text, v) => { const e = $(m + "-" + k); e.textContent = text; e.dataset.value = v; };
    set("peak", String(f.peak), f.peak);
    set("p50", fmtMS(f.p50), f.p50);
    set("p99", fmtMS(f.p99), f.p99);
    set("errors", String(f.errors), f.errors);
    set("goodput", f.goodput.toFixed(1) + " /s", f.goodput);
    set("span", fmtMS(f.span), f.span);
  }
}

function axes(g, W, H, pad, xmax, ymax, xl, yl) {
  g.strokeStyle = C.line; g.lineWidth = 1;
  g.beginPath(); g.moveTo(pad.l, pad.t); g.lineTo(pad.l, H - pad.b); g.lineTo(W - pad.r, H - pad.b); g.stroke();
  g.fillStyle = C.muted; g.font = "11px system-ui, sans-serif";
  g.textBaseline = "top"; g.textAlign = "right";
  g.fillText(xl(xmax), W - pad.r, H - pad.b + 4);
  g.textAlign = "left"; g.fillText("0", pad.l, H - pad.b + 4);
  g.textBaseline = "middle"; g.textAlign = "right";
  g.fillText(yl(ymax), pad.l - 4, pad.t + 4);
  g.fillText("0", pad.l - 4, H - pad.b);
  g.textAlign = "left";
}

function drawCharts() {
  if (!state.trace) return;
  const pad = { l: 36, r: 8, t: 18, b: 18 };
  { // in flight over time
    const [g, W, H] = sizeCanvas($("chart-inflight"));
    g.clearRect(0, 0, W, H);
    const xmax = state.duration, ymax = Math.max(...MODES.map((m) => Math.max(state.lanes[m].peak, state.lanes[m].cap))) * 1.1;
    const X = (t) => pad.l + ((W - pad.l - pad.r) * t) / xmax, Y = (v) => H - pad.b - ((H - pad.t - pad.b) * v) / ymax;
    axes(g, W, H, pad, xmax, ymax, fmtMS, (v) => String(Math.round(v / 1.1)));
    const cap = state.lanes.windowed.cap;
    g.strokeStyle = C.cap; g.setLineDash([5, 4]);
    g.beginPath(); g.moveTo(X(0), Y(cap)); g.lineTo(X(xmax), Y(cap)); g.stroke(); g.setLineDash([]);
    for (const m of MODES) {
      g.strokeStyle = C[m]; g.lineWidth = 2; g.beginPath();
      let prev = 0;
      g.moveTo(X(0), Y(0));
      for (const [t, n] of state.lanes[m].steps) { g.lineTo(X(t), Y(prev)); g.lineTo(X(t), Y(n)); prev = n; }
      g.lineTo(X(xmax), Y(prev)); g.stroke();
    }
    g.strokeStyle = C.text; g.lineWidth = 1;
    g.beginPath(); g.moveTo(X(state.t), pad.t); g.lineTo(X(state.t), H - pad.b); g.stroke();
    legend(g, W, pad);
  }
  { // latency CDF
    const [g, W, H] = sizeCanvas($("chart-cdf"));
    g.clearRect(0, 0, W, H);
    const xmax = Math.max(1, ...MODES.map((m) => state.lanes[m].lat.at(-1) || 0)) * 1.05;
    const X = (v) => pad.l + ((W - pad.l - pad.r) * v) / xmax, Y = (p) => H - pad.b - (H - pad.t - pad.b) * p;
    axes(g, W, H, pad, xmax, 1, fmtMS, () => "100%");
    for (const m of MODES) {
      const lat = state.lanes[m].lat, n = state.lanes[m].reqs.length;
      g.strokeStyle = C[m]; g.lineWidth = 2; g.beginPath(); g.moveTo(X(0), Y(0));
      lat.forEach((v, i) => { g.lineTo(X(v), Y(i / n)); g.lineTo(X(v), Y((i + 1) / n)); });
      g.stroke();
    }
    legend(g, W, pad);
  }
}

function legend(g, W, pad) {
  g.font = "11px system-ui, sans-serif"; g.textBaseline = "top";
  let x = pad.l + 6;
  for (const m of MODES) {
    g.fillStyle = C[m]; g.fillRect(x, 4, 10, 3); g.fillStyle = C.text; g.fillText(m, x + 14, 0); x += 80;
  }
}

function render() {
  if (!state.trace) return;
  for (const m of MODES) drawLane(m);
  drawCharts();
  const clock = $("clock");
  clock.textContent = fmtMS(state.t);
  clock.dataset.ms = Math.round(state.t);
  $("scrub").value = Math.round((state.t / state.duration) * 1000);
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
    load(body, "Ran " + p.burst + " requests: window " + p.max_size + " or " + p.max_wait_ms + " ms, cap " + p.max_concurrency + ". Press Play.");
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

fetch("api/default")
  .then((r) => { if (!r.ok) throw new Error(r.statusText); return r.json(); })
  .then((t) => load(t, "Showing the run that ships with sluice (" + t.params.burst + " requests at once). Press Play."))
  .catch((err) => { $("run-status").textContent = "Could not load the default trace: " + err.message; document.body.dataset.state = "error"; });
live();
bulkBatches();
setInterval(bulkBatches, 2000);
