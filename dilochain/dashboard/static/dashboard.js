// The dashboard: polls /api/view (the same view `dilochain status` prints) and redraws the
// page in place, without reloading. No framework, no build step.
"use strict";

const REFRESH_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text = "") {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}

function short(address) {
  return address.length > 20 ? address.slice(0, 12) + "…" + address.slice(-6) : address;
}

function row(cells, attrs = {}) {
  const tr = el("tr", attrs);
  for (const cell of cells) {
    const td = el("td");
    if (cell instanceof Node) td.append(cell); else td.textContent = String(cell);
    tr.append(td);
  }
  return tr;
}

// The global loss curve: one point per round with commits (x: round, y: eval loss).
function lossChart(curve, totalRounds) {
  const W = 640, H = 220, L = 48, R = 12, T = 12, B = 28;
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}` });
  chart.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  chart.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  if (curve.length === 0) {
    chart.append(svg("text", { x: L + 10, y: H / 2 }, "no finished round yet"));
    return chart;
  }
  const losses = curve.map(([, loss]) => loss);
  let lo = Math.min(...losses), hi = Math.max(...losses);
  if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
  const xMax = Math.max(1, totalRounds - 1);
  const x = (r) => L + (W - L - R) * (r / xMax);
  const y = (v) => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  chart.append(svg("text", { x: 4, y: T + 8 }, hi.toFixed(3)));
  chart.append(svg("text", { x: 4, y: H - B }, lo.toFixed(3)));
  chart.append(svg("text", { x: W / 2, y: H - 2 }, "round (eval loss of its starting state)"));
  chart.append(svg("polyline", {
    class: "line", points: curve.map(([r, v]) => `${x(r)},${y(v)}`).join(" "),
  }));
  for (const [r, v] of curve) {
    const point = svg("circle", { class: "point", cx: x(r), cy: y(v), r: 4, "data-round": r });
    point.append(svg("title", {}, `round ${r}: ${v.toFixed(4)}`));
    chart.append(point);
    chart.append(svg("text", { x: x(r) - 3, y: H - B + 12 }, String(r)));
  }
  return chart;
}

// What each address was paid by its claims in the epochs the view lists.
function claimedBy(epochs) {
  const paid = {};
  for (const ep of epochs) {
    for (const c of ep.claims) {
      if (c.claimed) paid[c.address] = (paid[c.address] || 0) + c.amount;
    }
  }
  return paid;
}

function runSection(run, paid) {
  const section = el("section", { class: "run", "data-run": run.run_id });
  section.append(el("h2", {}, `run ${run.run_id}: round ${run.round}/${run.total_rounds}, ` +
    `${run.phase}`));
  section.append(lossChart(run.loss_curve, run.total_rounds));

  const hosts = el("table", { class: "hosts" });
  hosts.append(row(["host", "endpoint", "collateral", "slashed", "rewards claimed"]
    .map((h) => el("b", {}, h))));
  for (const h of run.hosts) {
    const name = el("span", { title: h.address }, short(h.address));
    if (h.slashed > 0) name.append(el("span", { class: "badge" }, "slashed"));
    if (!h.registered) name.append(el("span", { class: "muted" }, " (no longer registered)"));
    hosts.append(row([name, h.endpoint || "-", `${h.collateral} udlc`,
      h.slashed > 0 ? `${h.slashed} udlc` : "-",
      paid[h.address] ? `${paid[h.address]} udlc` : "-"],
    { "data-address": h.address, class: h.slashed > 0 ? "slashed" : "" }));
  }
  section.append(el("h2", {}, "hosts"), hosts);

  const challenges = el("table", { class: "challenges" });
  challenges.append(row(["round", "host", "segment", "revealed", "status", "verdicts"]
    .map((h) => el("b", {}, h))));
  for (const c of run.challenges) {
    challenges.append(row([c.round, short(c.host), c.segment, c.revealed ? "yes" : "no",
      c.status, `${c.votes}/${c.verifiers}`], { "data-status": c.status }));
  }
  section.append(el("h2", {}, "challenges of the current round"), challenges);
  return section;
}

function render(view) {
  document.getElementById("chain-id").textContent = view.chain_id;
  document.getElementById("height").textContent = view.height;
  const e = view.epoch;
  document.getElementById("epoch").textContent =
    `${e.epoch} (blocks ${e.start_height}-${e.end_height})`;
  const paid = claimedBy(view.epochs);
  document.getElementById("runs").replaceChildren(...view.runs.map((r) => runSection(r, paid)));

  const slashes = document.querySelector("#slashes tbody");
  slashes.replaceChildren(...view.slashes.map((s) =>
    row([short(s.address), s.run_id, s.round, `${s.amount} udlc`, s.reason, s.height])));

  const epochs = document.querySelector("#epochs tbody");
  epochs.replaceChildren(...view.epochs.slice().reverse().map((ep) => row([
    ep.epoch, `${ep.start_height}-${ep.end_height}`, ep.closed ? "closed" : "open",
    `${ep.reward_pool} udlc`, ep.claims.length, ep.claims.filter((c) => c.claimed).length,
  ])));
  document.getElementById("updated").textContent =
    "updated " + new Date().toLocaleTimeString();
}

async function refresh() {
  const error = document.getElementById("error");
  try {
    const response = await fetch("/api/view", { cache: "no-store" });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      throw new Error(answer.error || `chain view: HTTP ${response.status}`);
    }
    render(await response.json());
    error.hidden = true;
  } catch (err) {
    error.textContent = err.message || String(err);
    error.hidden = false;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();
