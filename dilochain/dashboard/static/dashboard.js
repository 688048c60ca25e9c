// The dashboard: polls /api/view (the same view `dilochain status` prints) and redraws the
// page in place, without reloading. While the chain is unreachable the last view stays, marked
// stale, and the page keeps asking. No framework, no build step.
"use strict";

const REFRESH_MS = 1000;
const FETCH_TIMEOUT_MS = 15000;
const UDLC_PER_DLC = 1000000;
const SVG = "http://www.w3.org/2000/svg";
let shownAt = null; // when the view on the page was read

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

// An integer with thousands separators: 1234567 -> "1,234,567".
function grouped(n) {
  return n.toLocaleString("en-US", { maximumFractionDigits: 0 });
}

// udlc as DLC (10^6 udlc), exact, without trailing zeros: 10000000 -> "10 DLC",
// 1234567890 -> "1,234.56789 DLC".
function dlc(udlc) {
  const n = Math.abs(udlc);
  const frac = n % UDLC_PER_DLC;
  let text = grouped((n - frac) / UDLC_PER_DLC);
  if (frac) text += "." + String(frac).padStart(6, "0").replace(/0+$/, "");
  return `${udlc < 0 ? "-" : ""}${text} DLC`;
}

// An amount in DLC, its exact udlc in the tooltip ("-" for nothing).
function amount(udlc) {
  if (!udlc) return "-";
  return el("span", { class: "amount", title: `${grouped(udlc)} udlc` }, dlc(udlc));
}

// A bech32 address shortened to its prefix, four characters each side: dilo1abcd…wxyz.
function short(address) {
  const head = address.lastIndexOf("1") + 5;
  return head > 4 && address.length > head + 5 ? `${address.slice(0, head)}…${address.slice(-4)}`
    : address;
}

// An address by its short name, the full one in the tooltip.
function named(address) {
  return el("span", { class: "address", title: address }, short(address));
}

// Tokens per second as shown: one decimal below 10, whole numbers above ("-" for none).
function tokensPerSecond(rate) {
  if (rate === null || rate === undefined) return "-";
  return rate < 10 ? rate.toFixed(1) : grouped(Math.round(rate));
}

// A table of `items`: `columns` are [key, heading] pairs, `cells(item)` gives each key's
// content (text or a node; the cell's class is its key), `attrs(item)` the row's attributes.
// Without items, one row says `none`.
function table(cls, columns, items, cells, attrs = () => ({}), none = "none") {
  const head = el("tr");
  for (const [, heading] of columns) head.append(el("th", {}, heading));
  const body = el("tbody");
  for (const item of items) {
    const content = cells(item);
    const tr = el("tr", attrs(item));
    for (const [key] of columns) {
      const td = el("td", { class: key });
      const value = content[key];
      if (value instanceof Node) td.append(value); else td.textContent = String(value);
      tr.append(td);
    }
    body.append(tr);
  }
  if (items.length === 0) {
    const tr = el("tr", { class: "empty" });
    tr.append(el("td", { class: "none", colspan: columns.length }, none));
    body.append(tr);
  }
  const thead = el("thead");
  thead.append(head);
  const out = el("table", { class: cls });
  out.append(thead, body);
  return out;
}

// A bar and "label: block `block` of `blocks`" (just the label, bar full, when `blocks` is 0).
function progressBar(label, block, blocks) {
  const box = el("div", { class: "progress" });
  const done = blocks > 0 ? Math.min(block, blocks) : 1;
  box.append(el("progress", { value: done, max: Math.max(blocks, 1) }));
  const position = blocks > 0 ? `block ${block} of ${blocks}` : "";
  box.append(el("span", { class: "stage" }, [label, position].filter(Boolean).join(": ")));
  return box;
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

// "block 120 (4 blocks ago): commit of round 3" (a host's last_seen at chain height `height`).
function seenAt(seen, height) {
  if (!seen) return "never";
  const ago = height - seen.height;
  const when = ago === 0 ? "this block" : `${grouped(ago)} block${ago === 1 ? "" : "s"} ago`;
  return `block ${seen.height} (${when}): ${seen.what}`;
}

function hostName(h) {
  const name = named(h.address);
  if (h.slashed > 0) name.append(el("span", { class: "badge" }, "slashed"));
  if (!h.registered) name.append(el("span", { class: "muted" }, " (no longer registered)"));
  return name;
}

function hostsTable(run, height) {
  const rate = run.rate_round === null ? "tokens/s" : `tokens/s (round ${run.rate_round})`;
  const columns = [["host", "host"], ["endpoint", "endpoint"],
    ["committed", `committed round ${run.shown_round}`], ["seen", "last seen"],
    ["rate", rate], ["collateral", "collateral"], ["slashed", "slashed"],
    ["earned", "rewards earned"], ["claimed", "claimed"]];
  return table("hosts", columns, run.hosts, (h) => ({
    host: hostName(h), endpoint: h.endpoint || "-", committed: h.committed ? "yes" : "no",
    seen: seenAt(h.last_seen, height), rate: tokensPerSecond(h.tokens_per_second), ...money(h),
  }), memberRow, "no hosts registered yet");
}

// The amount columns hosts and verifiers share, and the attributes of their rows.
function money(member) {
  return { collateral: amount(member.collateral), slashed: amount(member.slashed),
    earned: amount(member.earned), claimed: amount(member.claimed) };
}

function memberRow(member) {
  return { "data-address": member.address, class: member.slashed > 0 ? "slashed" : "" };
}

function challengesTable(run) {
  const columns = [["round", "round"], ["host", "host"], ["segment", "segment"],
    ["revealed", "revealed"], ["status", "status"], ["verdicts", "verdicts"]];
  return table("challenges", columns, run.challenges, (c) => ({
    round: c.round, host: named(c.host), segment: c.segment, revealed: c.revealed ? "yes" : "no",
    status: c.status, verdicts: `${c.votes}/${c.verifiers}`,
  }), (c) => ({ "data-status": c.status }),
  run.in_progress ? "no challenges yet this round" : "none");
}

function runSummary(run) {
  const members = run.hosts.filter((h) => h.registered).length;
  const committed = run.hosts.filter((h) => h.committed).length;
  let text = `${committed} of ${members} hosts committed round ${run.shown_round}`;
  if (run.tokens_per_second !== null) {
    text += ` · ${tokensPerSecond(run.tokens_per_second)} tokens/s in round ${run.rate_round}`;
  }
  return el("p", { class: "summary" }, text);
}

function runSection(run, height) {
  const section = el("section", { class: "run", "data-run": run.run_id });
  section.append(el("h2", {}, `run ${run.run_id}: round ${run.round}/${run.total_rounds}, ` +
    `${run.phase}`));
  const p = run.progress;
  const bar = progressBar(p.stage, p.block, p.blocks);
  if (p.resolves_at !== null) {
    bar.append(el("span", { class: "muted" },
      ` · round ${run.challenges_round} resolves at block ${p.resolves_at}`));
  }
  section.append(bar, runSummary(run), lossChart(run.loss_curve, run.total_rounds));
  section.append(el("h2", {}, "hosts"), hostsTable(run, height));
  section.append(el("h2", {}, `challenges of round ${run.challenges_round}`),
    challengesTable(run));
  return section;
}

function verifierStatus(v) {
  if (v.left_height) {
    return el("span", { class: "muted" },
      `leaving (left at block ${v.left_height}, released after block ${v.release_height})`);
  }
  if (v.up === null) return el("span", { class: "muted" }, "idle (no run in progress)");
  return v.up ? el("span", { class: "up" }, "up")
    : el("span", { class: "down" }, "not seen in the last two rounds");
}

function verifiersTable(verifiers) {
  const columns = [["verifier", "verifier"], ["registered", "registered at"],
    ["endpoint", "serves at"], ["status", "status"], ["seen", "last seen"],
    ["collateral", "collateral"],
    ["slashed", "slashed"], ["earned", "rewards earned"], ["claimed", "claimed"]];
  return table("verifiers", columns, verifiers, (v) => ({
    verifier: named(v.address), registered: `block ${v.registered_height}`,
    endpoint: v.endpoint || "-", status: verifierStatus(v),
    seen: v.last_seen ? `run ${v.last_seen.run_id}, round ${v.last_seen.round}: ` +
      v.last_seen.what : "never",
    ...money(v),
  }), memberRow, "no verifiers registered");
}

function slashesTable(slashes) {
  const columns = [["address", "address"], ["run", "run"], ["round", "round"],
    ["amount", "amount"], ["reason", "reason"], ["height", "height"]];
  return table("slashes", columns, slashes, (s) => ({
    address: named(s.address), run: s.run_id, round: s.round, amount: amount(s.amount),
    reason: s.reason, height: s.height,
  }));
}

function epochsTable(epochs) {
  const columns = [["epoch", "epoch"], ["blocks", "blocks"], ["status", "status"],
    ["pool", "pool"], ["earned", "earned by"], ["claimed", "claimed by"]];
  return table("epochs", columns, epochs.slice().reverse(), (ep) => ({
    epoch: ep.epoch, blocks: `${ep.start_height}-${ep.end_height}`,
    status: ep.closed ? "closed" : "open", pool: amount(ep.reward_pool),
    earned: ep.claims.length, claimed: ep.claims.filter((c) => c.claimed).length,
  }));
}

function render(view) {
  document.getElementById("chain-id").textContent = view.chain_id;
  document.getElementById("height").textContent = view.height;
  document.getElementById("block-time").textContent =
    `at ${new Date(view.time).toLocaleTimeString()}`;
  const e = view.epoch;
  document.getElementById("epoch").textContent =
    `${e.epoch} (blocks ${e.start_height}-${e.end_height})`;
  document.getElementById("epoch-progress").replaceChildren(progressBar("",
    view.height - e.start_height + 1, e.end_height - e.start_height + 1));
  const runs = view.runs.map((r) => runSection(r, view.height));
  document.getElementById("runs").replaceChildren(
    ...(runs.length ? runs : [el("p", { class: "muted" }, "no runs yet")]));
  document.getElementById("verifiers").replaceChildren(verifiersTable(view.verifiers));
  document.getElementById("slashes").replaceChildren(slashesTable(view.slashes));
  document.getElementById("epochs").replaceChildren(epochsTable(view.epochs));
}

// The banner over a stale view (or an empty page): what failed, and since when the view shown
// was read.
function showError(message) {
  const error = document.getElementById("error");
  error.textContent = shownAt === null ? message
    : `${message} (showing the view of ${shownAt.toLocaleTimeString()}, stale)`;
  error.hidden = false;
  document.body.classList.add("stale");
}

// The view, or an Error saying why there is none.
async function fetchView() {
  let response;
  try {
    response = await fetch("/api/view", {
      cache: "no-store", signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
    });
  } catch {
    throw new Error("dashboard server unreachable, retrying");
  }
  if (!response.ok) {
    const answer = await response.json().catch(() => ({}));
    throw new Error(answer.error || `chain view: HTTP ${response.status}; retrying`);
  }
  return response.json();
}

async function refresh() {
  try {
    render(await fetchView());
    shownAt = new Date();
    document.getElementById("updated").textContent = `updated ${shownAt.toLocaleTimeString()}`;
    document.getElementById("error").hidden = true;
    document.body.classList.remove("stale");
  } catch (err) {
    showError(err.message || String(err));
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();
