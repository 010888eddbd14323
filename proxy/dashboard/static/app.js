// rotor dashboard: renders the snapshots /dashboard/events streams. Every
// value goes into the page as text (never as HTML): labels are the user's.
"use strict";

const COLOURS = ["#0969da", "#8250df", "#2da44e", "#d4762c", "#bf3989", "#1b9aaa", "#8c959f", "#cf222e"];
let snap = null;
let skew = 0; // server clock minus ours, so countdowns match the serve's
let span = "24h";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// human is a duration as rotor's CLI prints it (rotation.HumanDuration):
// 45s, 3m20s, 5h, 5h10m, 9d.
function human(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return s % 60 ? `${Math.floor(s / 60)}m${s % 60}s` : `${s / 60}m`;
  if (s < 48 * 3600) {
    const m = Math.round(s / 60);
    return m % 60 ? `${Math.floor(m / 60)}h${m % 60}m` : `${m / 60}h`;
  }
  return Math.floor((s + 12 * 3600) / 86400) + "d";
}

function now() { return Date.now() + skew; }

function until(iso) { return iso ? human(Date.parse(iso) - now()) : ""; }

function ago(iso) { return iso ? human(now() - Date.parse(iso)) + " ago" : "never"; }

function stateClass(state) {
  const w = state.split(/[: ]/)[0];
  if (w === "available") return "ok";
  if (w === "disabled" || w === "flagged") return "bad";
  return "warn";
}

function headroom(used) { return used >= 90 ? "bad" : used >= 70 ? "warn" : "ok"; }

// countdown is a span the ticker keeps current.
function countdown(iso, prefix) {
  const s = el("span", { "data-until": iso, "data-prefix": prefix });
  s.textContent = prefix + until(iso);
  return s;
}

// windowName is a window's length as people say it: 5h, 7d, 90m.
function windowName(minutes) {
  if (minutes % 1440 === 0) return minutes / 1440 + "d";
  if (minutes % 60 === 0) return minutes / 60 + "h";
  return minutes + "m";
}

function quota(name, w) {
  const box = el("div", { class: "quota" });
  if (!w) {
    box.append(el("div", {}, name + ": not seen yet"));
    return box;
  }
  const used = Math.min(100, Math.max(0, w.used_percent));
  const fill = el("span", { class: headroom(used) });
  fill.style.width = used + "%";
  const bar = el("div", { class: "bar", role: "meter", "aria-valuemin": "0", "aria-valuemax": "100",
    "aria-valuenow": String(Math.round(used)), "aria-label": name + " quota used" }, fill);
  const line = el("div", {}, name + ": " + Math.round(used) + "% used");
  if (w.resets_at && Date.parse(w.resets_at) > now()) line.append(", ", countdown(w.resets_at, "resets in "));
  box.append(line, bar);
  return box;
}

async function act(name, index) {
  const res = await fetch("/dashboard/" + name, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ index }), credentials: "same-origin",
  });
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    setLive((body.error && body.error.message) || "action failed: " + res.status, true);
    return;
  }
  refresh();
}

function card(a) {
  const c = el("article", { class: "card", "data-index": String(a.index) });
  const title = el("h3", {}, el("span", {}, a.index + ". " + a.label));
  if (a.pinned) title.append(el("span", { class: "pinmark" }, "pinned"));
  c.append(title);
  const dl = el("dl");
  const row = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
  const st = el("span", { class: "state " + stateClass(a.state) }, a.state);
  row("State", st);
  row("Kind", a.kind);
  if (a.reason) row("Reason", a.reason);
  if (a.until) row("Until", countdown(a.until, "in "));
  row("Health", String(a.health));
  row("Last used", el("span", { "data-ago": a.last_used || "" }, ago(a.last_used)));
  row("Cache hit", cacheHit(a.index));
  if (a.quota && a.quota.reset_credits != null) row("Reset credits", String(a.quota.reset_credits));
  if (a.limit_reason) row("Limit", a.waits_for_workspace ? "waits for the workspace owner (" + a.limit_reason + ")" : a.limit_reason);
  const cr = a.quota && a.quota.credits;
  if (cr && (cr.unlimited || cr.balance != null || cr.has_credits)) {
    row("Credits", (cr.unlimited ? "unlimited" : cr.balance != null ? cr.balance : "yes") + (a.on_credits ? ", on credits now" : ""));
  }
  const u = snap.usage.accounts.find((x) => x.index === a.index);
  if (u && (u.credits_requests_24h || u.fast_requests_24h)) {
    row("24 h", u.credits_requests_24h + " on credits (" + u.credits_tokens_24h + " tokens), " + u.fast_requests_24h + " Fast");
  }
  c.append(dl);
  if (a.quota && a.quota.workspace && !a.quota.primary && !a.quota.secondary) {
    c.append(el("div", { class: "quota" }, el("div", {}, "workspace, no windows")));
  } else {
    c.append(quota("Primary", a.quota && a.quota.primary), quota("Secondary", a.quota && a.quota.secondary));
  }
  const limited = {};
  for (const l of a.family_limits || []) limited[l.id] = l;
  for (const f of (a.quota && a.quota.families) || []) {
    const name = f.model || f.id;
    if (f.primary) c.append(quota(name + " " + (f.primary.window_minutes ? windowName(f.primary.window_minutes) : "primary"), f.primary));
    if (f.secondary) c.append(quota(name + " " + (f.secondary.window_minutes ? windowName(f.secondary.window_minutes) : "secondary"), f.secondary));
    if (limited[f.id]) c.append(el("div", { class: "quota" }, el("div", {}, name + ": usage limit reached, back ", countdown(limited[f.id].until, "in "))));
    delete limited[f.id];
  }
  for (const id in limited) {
    const l = limited[id];
    c.append(el("div", { class: "quota" }, el("div", {}, (l.model || l.id) + ": usage limit reached, back ", countdown(l.until, "in "))));
  }
  const buttons = el("div", { class: "actions" });
  const button = (text, name) => {
    const b = el("button", { type: "button", "data-action": name }, text);
    b.addEventListener("click", () => act(name, a.index));
    buttons.append(b);
  };
  if (a.pinned) button("Unpin", "unpin"); else button("Pin", "pin");
  if (a.enabled) button("Disable", "disable"); else button("Enable", "enable");
  c.append(buttons);
  return c;
}

// cacheHit is the prompt cache's hit rate of account index (cached ÷ input
// tokens) over 1 h, 24 h and 7 d; "-" where nothing was sent.
function cacheHit(index) {
  const u = snap.usage.accounts.find((x) => x.index === index);
  const pct = (r) => (r === null || r === undefined ? "-" : Math.round(r * 100) + "%");
  const h = (u && u.cache_hit) || {};
  return `${pct(h["1h"])} 1h · ${pct(h["24h"])} 24h · ${pct(h["7d"])} 7d`;
}

function label(index) {
  const a = snap.accounts.find((x) => x.index === index);
  return a ? index + ". " + a.label : "-";
}

function chart(id, series, buckets, fmt) {
  const box = document.getElementById(id);
  const W = 600, H = 160;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  const n = buckets.length;
  const totals = buckets.map((_, i) => series.reduce((t, a) => t + a.values[i], 0));
  const max = Math.max(1, ...totals);
  const bw = W / n;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    let y = H;
    series.forEach((a, k) => {
      const v = a.values[i];
      if (!v) return;
      const h = (v / max) * (H - 4);
      y -= h;
      sum += v;
      const r = svg("rect", { x: i * bw + 1, y, width: Math.max(1, bw - 2), height: h, fill: COLOURS[k % COLOURS.length], "data-series": String(a.index) });
      const t = svg("title");
      t.textContent = `${label(a.index)}: ${fmt(v)}`;
      r.append(t);
      s.append(r);
    });
  }
  const when = (iso) => {
    const d = new Date(iso);
    return span === "24h" ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : d.toLocaleDateString([], { month: "short", day: "numeric" });
  };
  // Labels are HTML beside the drawing: the SVG stretches to the width,
  // and text inside it would stretch too.
  const axis = el("div", { class: "axis" }, el("span", {}, when(buckets[0])), el("span", {}, "max " + fmt(max) + " per " + (span === "24h" ? "hour" : "day")), el("span", {}, when(buckets[n - 1])));
  s.setAttribute("aria-label", `${box.previousElementSibling ? box.previousElementSibling.textContent : id}, ${span}: ${fmt(sum)} in all`);
  box.replaceChildren(s, axis);
}

function compact(v) {
  return v >= 1e6 ? (v / 1e6).toFixed(1) + "M" : v >= 1e3 ? (v / 1e3).toFixed(1) + "k" : String(v);
}

// usd is an amount as `rotor report` prints it: cents from a dollar up,
// and below it up to hundredths of a cent ($0.45, $0.2375, $0.0005); null
// is an amount only usage of models without a price went to: unpriced,
// never $0.
function usd(v) {
  if (v == null) return "unpriced";
  const a = Math.abs(v);
  if (v === 0) return "$0";
  if (a < 0.00005) return "<$0.0001";
  if (a < 1) {
    let s = v.toFixed(4);
    while (s.endsWith("0") && s.length - s.indexOf(".") > 3) s = s.slice(0, -1);
    return "$" + s;
  }
  return "$" + v.toFixed(2);
}

const WINDOWS = [["1h", "1 h"], ["24h", "24 h"], ["7d", "7 d"]];

// renderMoney fills the cost card (docs/cost.md): what the API keys cost, what
// the ChatGPT accounts' usage was worth at API prices, what the prompt
// cache saved, per window; tokens of a model without a price are counted
// apart, never as free.
function renderMoney() {
  const m = snap.usage.money;
  const unpriced = (s) => Object.values(s.unpriced_tokens || {}).reduce((a, b) => a + b, 0);
  const th = (text) => el("th", { scope: "col" }, text);
  const head = el("tr", {}, th("Last"), th("Cost (API keys)"), th("Value (ChatGPT)"), th("Saved by cache"), th("Unpriced tokens"));
  const rows = WINDOWS.map(([k, name]) => {
    const s = m[k];
    const n = unpriced(s);
    return el("tr", { "data-window": k }, el("th", { scope: "row" }, name),
      el("td", { class: "cost" }, usd(s.cost_usd)), el("td", { class: "value" }, usd(s.value_usd)),
      el("td", { class: "saved" }, usd(s.saved_usd)), el("td", { class: "unpriced" }, n ? compact(n) : "-"));
  });
  const notes = [];
  let src = `Prices: OpenAI list prices of ${m.prices.date} (shipped)`;
  if (m.prices.file) src += `; ${m.prices.file_models.length} model(s) from ${m.prices.file} of ${m.prices.file_date}`;
  notes.push(el("p", { class: "note prices" }, src + ". Value is what ChatGPT accounts' usage would have cost at these prices."));
  const week = m["7d"];
  const models = Object.keys(week.unpriced_tokens || {});
  if (models.length) notes.push(el("p", { class: "note unpriced-models" }, "No price for " + models.join(", ") + " (add them to prices.json)."));
  if (week.unknown_kind_usd) notes.push(el("p", { class: "note" }, `Accounts no longer in the pool, 7 d: ${usd(week.unknown_kind_usd)} at API prices.`));
  document.getElementById("money").replaceChildren(el("div", { class: "scroll" }, el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows))), ...notes);
}

function renderCharts() {
  const u = snap.usage;
  const day = span === "7d";
  const buckets = day ? u.days : u.hours;
  chart("chart-requests", u.accounts.map((a) => ({ index: a.index, values: day ? a.day_requests : a.hour_requests })), buckets, String);
  chart("chart-tokens", u.accounts.map((a) => ({ index: a.index, values: day ? a.day_tokens : a.hour_tokens })), buckets, compact);
  const legend = document.getElementById("legend");
  legend.replaceChildren(...u.accounts.map((a, k) => {
    const sw = el("i");
    sw.style.background = COLOURS[k % COLOURS.length];
    return el("span", {}, sw, label(a.index));
  }));
}

function render() {
  const pin = document.getElementById("pin");
  pin.textContent = snap.pinned_account_index
    ? `Pinned: account ${label(snap.pinned_account_index)} (${snap.pin_source}); the others wait until it is unpinned.`
    : "Pinned: no (rotating between accounts)";
  const next = document.getElementById("next");
  next.textContent = snap.next.index ? `Next: account ${label(snap.next.index)} (${snap.next.reason})` : `Next: none: ${snap.next.reason}`;
  const box = document.getElementById("accounts");
  box.replaceChildren(...(snap.accounts.length ? snap.accounts.map(card)
    : [el("p", {}, "No accounts yet. Add one with \"rotor import codex\", \"rotor login\" or \"rotor add-key\".")]));
  renderMoney();
  renderCharts();
  const body = document.querySelector("#recent tbody");
  body.replaceChildren(...snap.usage.recent.map((r) => el("tr", {},
    el("td", {}, new Date(r.time).toLocaleTimeString()), el("td", {}, label(r.account)), el("td", {}, r.model || "-"),
    el("td", { class: r.status >= 400 ? "error" : "" }, String(r.status)), el("td", {}, r.code || "-"),
    el("td", {}, r.duration_ms + " ms"))));
}

function tick() {
  document.querySelectorAll("[data-until]").forEach((s) => { s.textContent = s.dataset.prefix + until(s.dataset.until); });
  document.querySelectorAll("[data-ago]").forEach((s) => { s.textContent = ago(s.dataset.ago); });
}

function take(json) {
  snap = JSON.parse(json);
  skew = Date.parse(snap.now) - Date.now();
  render();
  document.body.dataset.updated = snap.now;
}

function setLive(text, bad) {
  const live = document.getElementById("live");
  live.textContent = text;
  live.className = "live" + (bad ? " error" : " on");
}

async function refresh() {
  const res = await fetch("/dashboard/state", { credentials: "same-origin" });
  if (res.ok) take(await res.text());
}

function connect() {
  const es = new EventSource("/dashboard/events");
  es.onmessage = (e) => { take(e.data); setLive("live"); };
  es.onerror = () => setLive("reconnecting…", true);
}

for (const [id, value] of [["span-24h", "24h"], ["span-7d", "7d"]]) {
  document.getElementById(id).addEventListener("click", () => {
    span = value;
    document.querySelectorAll(".tabs button").forEach((b) => b.setAttribute("aria-pressed", String(b.id === id)));
    if (snap) renderCharts();
  });
}
// The page arrives with a snapshot inside (data, not script), so it shows
// the pool at once; the live stream takes over from there.
const initial = document.getElementById("initial");
if (initial && initial.textContent.trim().startsWith("{")) take(initial.textContent);
setInterval(tick, 1000);
connect();
