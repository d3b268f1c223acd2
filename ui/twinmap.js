// Linked twin maps (Base | Tuned): glue between the component's value and regl-scatterplot (ui/vendor, loaded by the
// component's <head> script as window.reglScatterplot), which draws, zooms, pans, hovers and lassos in WebGL.
// Runs as gr.HTML's js_on_load: Gradio passes `element`, `trigger`, `props` and `watch`. Events sent to Python:
//   trigger('click',  {index: i, text, map})                         a point was clicked (or Enter in Locate)
//   trigger('select', {index: [i...], value: [text...], selected})   a lasso / box / legend selection (empty: cleared)
// where i is the point's id in the service's data. What this file adds to the library: the second map follows the
// first (view, hover, selection), colour by clusters or by how much a string moved, a 2-D overlay for movement
// lines, queries and labels, Locate, touch pan/pinch, the tooltip, and the data-* hooks / element.twinmap the tests
// read.
const root = element.querySelector(".tm");
const MAPS = ["base", "tuned"];
const OTHER = { base: "tuned", tuned: "base" };
const RAMP = [[148, 163, 184], [245, 158, 11], [220, 38, 38]]; // moved: 0 -> 0.5 -> 1
const FALLBACK = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"];
const MAX_LINES = 5000; // movement lines drawn when nothing is selected: the strings that moved most
const $ = (sel) => root.querySelector(sel);
const box = {}, gl = {}, ov = {};
for (const m of MAPS) {
  box[m] = root.querySelector(`.tm-map[data-map="${m}"]`);
  gl[m] = box[m].querySelector("canvas.tm-gl");
  ov[m] = box[m].querySelector("canvas.tm-ov");
}

let D = null; // the decoded data, see load()
let plots = null; // {base, tuned}: the two scatterplots, made on the first data
let shared = null; // the renderer (one WebGL context) both draw with
const S = {
  colourBy: "base", mode: "pan", movement: false, hover: null, clicked: -1, selected: [], located: [],
  lassoing: { base: false, tuned: false }, offset: [0, 0], following: false, size: { w: 0, h: 0 },
  labels: { base: [], tuned: [] }, // the label boxes each map's overlay shows (canvas CSS pixels), see placeLabels
};

// ---------- data ----------
function decode(b64, Type) {
  const bin = atob(b64 || "");
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

function load(v) {
  const started = performance.now();
  S.hover = null; S.clicked = -1; S.selected = []; S.located = []; S.offset = [0, 0];
  $(".tm-locate").value = "";
  $(".tm-tip").hidden = true;
  if (!v || !v.n) {
    D = null;
    root.dataset.state = "empty";
    root.dataset.n = "0";
    root.dataset.drawn = "0";
    $(".tm-empty").textContent = (v && v.note) || props.placeholder || "No map yet.";
    $(".tm-legend").replaceChildren();
    $(".tm-foot").textContent = "";
    if (plots) for (const m of MAPS) plots[m].clear();
    sync();
    return;
  }
  const n = v.n;
  const raw = { base: decode(v.base, Float32Array), tuned: decode(v.tuned, Float32Array) };
  // both maps in one frame: the same scale and centre, so a string that did not move is drawn at the same spot
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  const grow = (x, y) => { if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y; };
  for (const m of MAPS) for (let k = 0; k < n; k++) grow(raw[m][2 * k], raw[m][2 * k + 1]);
  for (const q of v.queries || []) for (const m of MAPS) grow(q[m][0], q[m][1]);
  const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2, s = 1.9 / Math.max(x1 - x0, y1 - y0, 1e-9);
  const ndc = (x, y) => [(x - cx) * s, (y - cy) * s];
  D = { n, texts: v.texts, ids: decode(v.ids, Int32Array), bc: decode(v.bc, Uint16Array), tc: decode(v.tc, Uint16Array),
    clusters: v.clusters, queries: (v.queries || []).map((q) => ({ text: q.text, base: ndc(...q.base), tuned: ndc(...q.tuned) })) };
  const moved8 = decode(v.moved, Uint8Array);
  D.moved = Float32Array.from(moved8, (b) => b / 255);
  for (const m of MAPS) {
    D[`${m}X`] = new Float32Array(n);
    D[`${m}Y`] = new Float32Array(n);
    for (let k = 0; k < n; k++) [D[`${m}X`][k], D[`${m}Y`][k]] = ndc(raw[m][2 * k], raw[m][2 * k + 1]);
  }
  D.lower = null; // lower-cased texts, made on the first Locate
  D.movedOrder = Array.from({ length: n }, (_, k) => k).sort((a, b) => D.moved[a] - D.moved[b]);
  D.colours = {};
  D.names = {};
  for (const m of MAPS) {
    const ids = (v.clusters[m] || []).map((c) => c.id);
    const pal = new Array(Math.max(0, ...ids) + 1).fill("#888888"), names = {};
    (v.clusters[m] || []).forEach((c, j) => { pal[c.id] = c.colour || FALLBACK[j % FALLBACK.length]; names[c.id] = c.name; });
    D.colours[m] = pal;
    D.names[m] = names;
  }
  root.dataset.state = "ready";
  root.dataset.n = String(n);
  root.dataset.drawn = "0";
  const method = { umap: "UMAP", tsne: "t-SNE", pca: "PCA" }[v.method] || v.method || "";
  const shown = v.n_shown < v.n_total ? `${v.n_shown.toLocaleString()} of ${v.n_total.toLocaleString()} strings shown`
    : `all ${v.n_shown.toLocaleString()} strings`;
  const secs = typeof v.seconds === "number" ? ` · laid out in ${v.seconds.toFixed(1)} s` : "";
  $(".tm-foot").textContent = [`${method} · ${shown}${secs}`, v.note].filter(Boolean).join(" — ");
  if (!ensurePlots()) return;
  resize();
  drawPoints(true, started);
  legend();
  sync();
}

// ---------- the two scatterplots ----------
function ensurePlots() {
  if (plots) return true;
  const lib = window.reglScatterplot;
  let renderer = null;
  try {
    // our own canvas, sized to one map by resize(): the library's default is the window's size, and each draw clears
    // it, fills a float framebuffer of that size, runs a gamma pass over it and copies a map's part out (in a
    // software-WebGL browser ~4x the pixels of a 1400 x 1000 page's map, on every frame the map is drawn)
    renderer = lib && lib.createRenderer({ canvas: document.createElement("canvas") });
  } catch (err) {
    console.warn("twin maps: no WebGL", err);
  }
  if (!renderer) {
    root.dataset.state = "nowebgl";
    $(".tm-empty").textContent = lib
      ? "This browser cannot draw the maps: WebGL is switched off or unavailable (try another browser, or enable " +
        "hardware acceleration). What moved, the exports and the API still work."
      : "The map library did not load (a blocked script?): reload the page.";
    return false;
  }
  plots = {};
  shared = renderer;
  for (const m of MAPS) {
    const sp = lib.createScatterplot({
      renderer, canvas: gl[m], width: Math.max(1, box[m].clientWidth), height: Math.max(1, box[m].clientHeight), syncEvents: true,
      actionKeyMap: { lasso: "shift", merge: "ctrl" }, deselectOnDblClick: false, deselectOnEscape: true,
      lassoMinDelay: 0, lassoMinDist: 2, lassoClearEvent: "lassoEnd", lassoLongPressIndicatorParentElement: box[m],
      pointSizeSelected: 1, pointOutlineWidth: 1.5, opacityInactiveScale: 0.3, opacityInactiveMax: 0.35,
      pointScaleMode: "asinh", aspectRatio: 1,
    });
    sp.subscribe("view", ({ view }) => follow(m, view));
    sp.subscribe("draw", () => overlay(m));
    sp.subscribe("pointOver", (k) => hoverAt(m, k));
    sp.subscribe("pointOut", () => hoverAt(m, -1));
    sp.subscribe("lassoStart", () => { S.lassoing[m] = true; });
    sp.subscribe("lassoEnd", ({ coordinates }) => { S.lasso = { map: m, coordinates }; });
    sp.subscribe("select", ({ points }) => selected(m, points));
    sp.subscribe("deselect", () => { if (!S.quiet) select([], true); });
    plots[m] = sp;
    touch(m);
  }
  setMode(S.mode);
  theme();
  return true;
}

function pointSize() {
  const n = D ? D.n : 0;
  return n <= 1000 ? 7 : n <= 5000 ? 5 : n <= 30000 ? 3.5 : 2.5;
}

function rampColour(t) {
  const f = Math.min(1, Math.max(0, t)) * (RAMP.length - 1), j = Math.min(RAMP.length - 2, Math.floor(f)), r = f - j;
  return RAMP[j].map((c, i) => Math.round(c + r * (RAMP[j + 1][i] - c)));
}
const hex = (rgb) => `#${rgb.map((c) => c.toString(16).padStart(2, "0")).join("")}`;
const RAMP_COLOURS = Array.from({ length: 64 }, (_, j) => hex(rampColour(j / 63)));

function drawPoints(first, started) {
  if (!D || !plots) return;
  const by = S.colourBy, moved = by === "moved";
  const z = moved ? new Uint16Array(D.n) : by === "base" ? D.bc : D.tc;
  const colours = moved ? RAMP_COLOURS : D.colours[by];
  const done = MAPS.map((m) => {
    const sp = plots[m];
    sp.set({ colorBy: moved ? "valueB" : "valueA", pointColor: colours, pointColorActive: colours, pointSize: pointSize(),
      pointOrder: moved ? D.movedOrder : null });
    const pts = { x: D[`${m}X`], y: D[`${m}Y`], z, w: D.moved };
    const opts = { zDataType: "categorical", wDataType: "continuous", preventFilterReset: true };
    if (!first && D.index && D.index[m]) opts.spatialIndex = D.index[m]; // same positions: keep the spatial index
    return sp.draw(pts, opts).then(() => {
      D.index = D.index || {};
      D.index[m] = sp.get("spatialIndex");
    });
  });
  Promise.all(done).then(() => {
    if (first) reset();
    showSelection();
    root.dataset.drawn = String(D.n); // both maps hold every point of the value
    if (started) root.dataset.drawMs = String(Math.round(performance.now() - started)); // bench/bench_map.py
    sync();
  });
}

// the other map follows a pan or zoom: the same view, shifted by S.offset (non-zero after Locate centred each map
// on its own copy of the string)
function follow(from, view) {
  if (S.following || !plots) return;
  S.following = true;
  try {
    const sign = from === "base" ? 1 : -1, v = Float32Array.from(view);
    v[12] -= sign * (v[0] * S.offset[0] + v[4] * S.offset[1]);
    v[13] -= sign * (v[1] * S.offset[0] + v[5] * S.offset[1]);
    plots[OTHER[from]].view(v, { preventEvent: true });
  } finally {
    S.following = false;
  }
  sync();
}

function look(m, tx, ty, zoom) {
  const v = new Float32Array([zoom, 0, 0, 0, 0, zoom, 0, 0, 0, 0, 1, 0, -zoom * tx, -zoom * ty, 0, 1]);
  plots[m].view(v, { preventEvent: true });
}

function zoom() {
  return plots && D ? plots.base.get("camera").view[0] : 1;
}

// the whole layout in view: it spans [-0.95, 0.95], and a map taller than wide (a phone) shows less than that across
const fitZoom = () => (S.size.w && S.size.h ? Math.min(1, S.size.w / S.size.h) : 1);
function reset() {
  if (!plots || !D) return;
  S.offset = [0, 0];
  for (const m of MAPS) look(m, 0, 0, fitZoom());
  sync();
}

// NDC (the data frame) -> canvas pixels with the map's current view (regl-scatterplot's getScreenPosition, for any
// position: a query, a string's position on the other map)
function toScreen(m, x, y) {
  const v = plots[m].get("camera").view, { w, h } = S.size;
  const vx = v[0] * x + v[4] * y + v[12], vy = v[1] * x + v[5] * y + v[13];
  return [(w * (vx * (h / w) + 1)) / 2, h * (0.5 - vy / 2)];
}

// ---------- hover, click, selection ----------
function hoverAt(m, k) {
  if (!D) return;
  const o = OTHER[m];
  if (k >= 0) {
    S.hover = { map: m, k };
    plots[o].hover(k, { preventEvent: true, showReticleOnce: true });
    const [x, y] = toScreen(m, D[`${m}X`][k], D[`${m}Y`][k]);
    tip(m, x, y, k, null);
  } else {
    S.hover = null;
    plots[o].hover(-1, { preventEvent: true });
    $(".tm-tip").hidden = true;
  }
  gl[m].style.cursor = k >= 0 ? "pointer" : "";
  overlay(o);
  sync();
}

// the library selects on a lasso and on a click; a click is ours (neighbours), a lasso is a selection
function selected(m, points) {
  if (S.quiet || !D) return;
  if (S.lassoing[m]) {
    S.lassoing[m] = false;
    select(Array.from(points), true);
    return;
  }
  const k = points.length ? points[points.length - 1] : -1;
  showSelection(); // a click does not change the selection
  if (k >= 0) clickPoint(k, m);
}

function quietly(fn) {
  S.quiet = true;
  try { fn(); } finally { S.quiet = false; }
}

// what the maps show as selected: the located strings while a Locate is on, else the selection (the rest dimmed)
function showSelection() {
  if (!plots || !D) return;
  const ks = S.located.length ? S.located : S.selected;
  quietly(() => {
    for (const m of MAPS) {
      if (ks.length) plots[m].select(ks, { preventEvent: true });
      else plots[m].deselect({ preventEvent: true });
    }
  });
  for (const m of MAPS) overlay(m);
}

function select(ks, emit) {
  S.selected = [...new Set(ks)].sort((a, b) => a - b);
  showSelection();
  sync();
  if (emit && D) {
    const ks2 = S.selected;
    trigger("select", { index: ks2.map((k) => D.ids[k]), value: ks2.map((k) => D.texts[k]), selected: ks2.length > 0 });
  }
}

function clickPoint(k, m) {
  S.clicked = k;
  for (const mm of MAPS) overlay(mm);
  sync();
  trigger("click", { index: D.ids[k], text: D.texts[k], map: m });
}

function locate(q, emit) {
  q = (q || "").trim().toLowerCase();
  S.located = [];
  if (D && q) {
    D.lower = D.lower || D.texts.map((t) => t.toLowerCase());
    const exact = [];
    for (let k = 0; k < D.n; k++) {
      if (D.lower[k].includes(q)) S.located.push(k);
      if (D.lower[k] === q) exact.push(k);
    }
    const ks = exact.length ? exact : S.located;
    if (ks.length) centreOn(ks.slice(0, 500));
    if (emit && ks.length) clickPoint(ks[0], "base");
  }
  showSelection();
  sync();
}

// each map centred on its own copy of the matches, zoomed in until their box fills about half the map (at most
// 2.5x: the surroundings stay in view); pans and zooms after that keep the two views this far apart
function centreOn(ks) {
  if (!plots) return;
  const c = {}, half = {};
  for (const m of MAPS) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const k of ks) {
      const x = D[`${m}X`][k], y = D[`${m}Y`][k];
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    c[m] = [(x0 + x1) / 2, (y0 + y1) / 2];
    half[m] = Math.max(x1 - x0, y1 - y0, 0.1) / 2;
  }
  const z = fitZoom() * Math.max(1, Math.min(2.5, 0.5 / Math.max(half.base, half.tuned)));
  S.offset = [c.tuned[0] - c.base[0], c.tuned[1] - c.base[1]];
  for (const m of MAPS) look(m, c[m][0], c[m][1], z);
}

// ---------- the 2-D overlay: movement lines, queries, located and hovered labels, the clicked ring ----------
function colours() {
  const cs = getComputedStyle(root);
  const get = (name, dflt) => cs.getPropertyValue(name).trim() || dflt;
  return { fg: get("--tm-fg", "#1f2937"), bg: get("--tm-bg", "#ffffff"), accent: get("--tm-accent", "#f97316") };
}
// any CSS colour (Gradio's variables may be names or rgb()) as the [r, g, b, a] in 0..1 the library takes
const probe = document.createElement("canvas").getContext("2d", { willReadFrequently: true });
function rgba(css) {
  probe.clearRect(0, 0, 1, 1);
  probe.fillStyle = "#000";
  probe.fillStyle = css;
  probe.fillRect(0, 0, 1, 1);
  const [r, g, b, a] = probe.getImageData(0, 0, 1, 1).data;
  return [r / 255, g / 255, b / 255, a / 255];
}
let overlayFrame = { base: 0, tuned: 0 };
function overlay(m) {
  if (overlayFrame[m]) return;
  overlayFrame[m] = requestAnimationFrame(() => { overlayFrame[m] = 0; paint(m); });
}
function paint(m) {
  const cv = ov[m], { w, h } = S.size, dpr = window.devicePixelRatio || 1;
  const ctx = cv.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  S.labels[m] = [];
  if (!D || !plots) return;
  const th = colours(), focus = S.located.length ? S.located : S.selected;
  if (S.movement && m === "tuned") {
    const ks = focus.length ? focus : D.movedOrder.slice(-MAX_LINES);
    ctx.strokeStyle = th.fg;
    ctx.globalAlpha = focus.length ? 0.45 : 0.18;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const k of ks) {
      const [ax, ay] = toScreen(m, D.baseX[k], D.baseY[k]), [bx, by] = toScreen(m, D.tunedX[k], D.tunedY[k]);
      ctx.moveTo(ax, ay);
      ctx.lineTo(bx, by);
    }
    ctx.stroke();
    ctx.globalAlpha = 1;
  }
  // markers first, their labels after (placed by placeLabels, most important first: the hovered string's, then the
  // located ones, then the queries); every marker is an obstacle no label covers
  const marks = [], names = [];
  const mark = (x, y, r) => marks.push({ x: x - r, y: y - r, w: 2 * r, h: 2 * r });
  if (S.hover && S.hover.map !== m) { // the other map names the hovered string where it sits there
    const k = S.hover.k, [x, y] = toScreen(m, D[`${m}X`][k], D[`${m}Y`][k]);
    mark(x, y, 13);
    names.push({ x, y, text: D.texts[k], dx: 15 });
  }
  if (S.located.length && S.located.length <= 12)
    for (const k of S.located) {
      const [x, y] = toScreen(m, D[`${m}X`][k], D[`${m}Y`][k]);
      ring(ctx, x, y, 8, th.accent, 2);
      mark(x, y, 9);
      names.push({ x, y, text: D.texts[k], dx: 12 });
    }
  for (const q of D.queries) {
    const [x, y] = toScreen(m, q[m][0], q[m][1]);
    star(ctx, x, y, th);
    mark(x, y, 10);
    names.push({ x, y, text: q.text, dx: 12 });
  }
  if (S.clicked >= 0) {
    const [x, y] = toScreen(m, D[`${m}X`][S.clicked], D[`${m}Y`][S.clicked]);
    ring(ctx, x, y, 9, th.accent, 2.5);
    mark(x, y, 11);
  }
  if (S.hover && S.hover.map !== m) {
    const k = S.hover.k, [x, y] = toScreen(m, D[`${m}X`][k], D[`${m}Y`][k]);
    ring(ctx, x, y, 10, th.bg, 5);
    ring(ctx, x, y, 10, th.accent, 2.5);
  }
  const title = box[m].querySelector(".tm-title"); // the map's name sits over its top-left corner
  if (title) marks.push({ x: title.offsetLeft - 2, y: title.offsetTop - 2, w: title.offsetWidth + 4, h: title.offsetHeight + 4 });
  S.labels[m] = placeLabels(ctx, names, marks, th);
  root.dataset[`labels${m === "base" ? "Base" : "Tuned"}`] = `${S.labels[m].length}/${names.length}`;
}

// Labels inside the map and apart (greedy, in the order given): each goes to the first spot, right then left of its
// point, level with it and then a line further up or down at a time, that lies inside the map and covers no label or
// marker already placed; a label moved off its point's line gets a thin leader line. A label too long for the wider
// side of its point is cut to fit it; one whose point is out of view, or that finds no free spot, is left out (the
// ring still shows the string, and hovering it names it). Returns the boxes drawn (canvas CSS pixels).
const LABEL_FONT = "600 12px system-ui, sans-serif";
function placeLabels(ctx, names, marks, th) {
  const { w, h } = S.size, PAD = 3, LINE = 16, placed = [];
  if (!names.length || !w || !h) return placed;
  ctx.font = LABEL_FONT;
  const hits = (b) => (o) => b.x < o.x + o.w && o.x < b.x + b.w && b.y < o.y + o.h && o.y < b.y + b.h;
  const taken = marks.slice();
  for (const it of names) {
    if (!(it.x >= 0 && it.x <= w && it.y >= 0 && it.y <= h)) continue; // its point is out of view
    const room = Math.max(it.x, w - it.x) - it.dx - 2 * PAD;
    if (room < 24) continue;
    const t = fitText(ctx, it.text, room), tw = ctx.measureText(t).width, bh = 14;
    let spot = null;
    for (let j = 0; j <= 6 && !spot; j++) {
      const dy = j === 0 ? 0 : (j % 2 ? -1 : 1) * Math.ceil(j / 2) * LINE;
      for (const side of [1, -1]) {
        const b = { x: side > 0 ? it.x + it.dx : it.x - it.dx - tw, y: it.y - bh / 2 + dy, w: tw, h: bh };
        // inside the map, at PAD from its edges: the clamp of a label whose point is a few pixels from an edge
        if (b.y < PAD && dy === 0) b.y = PAD;
        if (b.y + bh > h - PAD && dy === 0) b.y = h - PAD - bh;
        if (b.x < PAD || b.x + tw > w - PAD || b.y < PAD || b.y + bh > h - PAD) continue;
        const halo = { x: b.x - 2, y: b.y - 2, w: b.w + 4, h: b.h + 4 };
        if (taken.some(hits(halo))) continue;
        spot = { ...b, side, dy };
        break;
      }
    }
    if (!spot) continue;
    taken.push({ x: spot.x - 2, y: spot.y - 2, w: spot.w + 4, h: spot.h + 4 });
    if (spot.dy) { // a leader from the point's marker to the label's near end
      const ex = spot.side > 0 ? spot.x - 2 : spot.x + spot.w + 2, ey = spot.y + bh / 2;
      ctx.strokeStyle = th.fg;
      ctx.globalAlpha = 0.5;
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(it.x + (spot.side > 0 ? 1 : -1) * (it.dx - 3), it.y);
      ctx.lineTo(ex, ey);
      ctx.stroke();
      ctx.globalAlpha = 1;
    }
    const base = spot.y + 11; // 12px text: its baseline 11 px below the box's top, descenders within the box
    ctx.lineWidth = 4;
    ctx.strokeStyle = th.bg;
    ctx.strokeText(t, spot.x, base);
    ctx.fillStyle = th.fg;
    ctx.fillText(t, spot.x, base);
    placed.push({ text: t, x: spot.x, y: spot.y, w: spot.w, h: spot.h });
  }
  return placed;
}

// the text cut (with an ellipsis) to 48 characters and to `room` pixels
function fitText(ctx, text, room) {
  let t = text.length > 48 ? text.slice(0, 47) + "…" : text;
  while (t.length > 2 && ctx.measureText(t).width > room) t = t.slice(0, -2) + "…";
  return t;
}
function ring(ctx, x, y, r, colour, width) {
  ctx.strokeStyle = colour;
  ctx.lineWidth = width;
  ctx.beginPath();
  ctx.arc(x, y, r, 0, 2 * Math.PI);
  ctx.stroke();
}
function star(ctx, x, y, th) {
  ctx.beginPath();
  for (let j = 0; j < 10; j++) {
    const a = -Math.PI / 2 + (j * Math.PI) / 5, r = j % 2 ? 3.6 : 9;
    ctx.lineTo(x + r * Math.cos(a), y + r * Math.sin(a));
  }
  ctx.closePath();
  ctx.fillStyle = th.accent;
  ctx.strokeStyle = th.bg;
  ctx.lineWidth = 2;
  ctx.stroke();
  ctx.fill();
}
// ---------- tooltip ----------
function tip(m, sx, sy, k, q) {
  const el = $(".tm-tip");
  if (k < 0 && !q) { el.hidden = true; return; }
  el.replaceChildren();
  const strong = document.createElement("div"), sub = document.createElement("div");
  strong.className = "tm-tip-text";
  sub.className = "tm-tip-sub";
  strong.textContent = D.texts[k];
  const cid = (m === "base" ? D.bc : D.tc)[k];
  const bits = [`${m} cluster: ${D.names[m][cid] ?? cid}`];
  if (S.colourBy === "moved") bits.push(`moved ${Math.round(100 * D.moved[k])}%`);
  sub.textContent = bits.join(" · ");
  el.append(strong, sub);
  el.hidden = false;
  const cr = gl[m].getBoundingClientRect(), rr = root.getBoundingClientRect();
  let x = cr.left - rr.left + sx + 14, y = cr.top - rr.top + sy + 14;
  const w = el.offsetWidth, h = el.offsetHeight;
  if (x + w > rr.width - 4) x = Math.max(4, cr.left - rr.left + sx - w - 14);
  if (y + h > rr.height - 4) y = Math.max(4, cr.top - rr.top + sy - h - 14);
  el.style.left = `${x}px`;
  el.style.top = `${y}px`;
}

// ---------- touch: one finger pans, two pinch (the library's camera listens to the mouse and wheel only) ----------
function touch(m) {
  const fingers = new Map();
  let last = null;
  const state = () => {
    const ps = [...fingers.values()];
    const r = gl[m].getBoundingClientRect();
    const cx = ps.reduce((a, p) => a + p[0], 0) / ps.length - r.left, cy = ps.reduce((a, p) => a + p[1], 0) / ps.length - r.top;
    const spread = ps.length > 1 ? Math.hypot(ps[0][0] - ps[1][0], ps[0][1] - ps[1][1]) : 0;
    return { cx, cy, spread, count: ps.length };
  };
  gl[m].addEventListener("pointerdown", (ev) => {
    if (ev.pointerType !== "touch") return;
    fingers.set(ev.pointerId, [ev.clientX, ev.clientY]);
    last = state();
  });
  gl[m].addEventListener("pointermove", (ev) => {
    if (ev.pointerType !== "touch" || !fingers.has(ev.pointerId) || !plots || !D) return;
    if (S.mode !== "pan" && fingers.size < 2) return; // one finger lassos in the Lasso and Box modes
    fingers.set(ev.pointerId, [ev.clientX, ev.clientY]);
    const now = state();
    if (!last || now.count !== last.count) { last = now; return; }
    const cam = plots[m].get("camera"), { h } = S.size, px = 2 / h; // pixels -> NDC at zoom 1
    cam.translate([((now.cx - last.cx) * px) / cam.view[0], (-(now.cy - last.cy) * px) / cam.view[0]]);
    if (now.count > 1 && last.spread > 0) {
      const f = now.spread / last.spread, { w } = S.size;
      cam.scale(f, [((now.cx / w) * 2 - 1) * (w / h), 1 - (now.cy / h) * 2]);
    }
    plots[m].redraw();
    last = now;
    ev.preventDefault();
  });
  const up = (ev) => { fingers.delete(ev.pointerId); last = fingers.size ? state() : null; };
  gl[m].addEventListener("pointerup", up);
  gl[m].addEventListener("pointercancel", up);
}

// ---------- state out: data-* hooks, legend, selection line ----------
function sync() {
  const h = S.hover && S.hover.k >= 0 && D ? S.hover : null;
  root.dataset.hovered = h ? String(h.k) : "";
  root.dataset.hoverMap = h ? h.map : "";
  root.dataset.hoveredText = h ? D.texts[h.k] : "";
  root.dataset.highlightOther = h ? String(h.k) : ""; // the other map rings the same point (same string)
  root.dataset.highlightOtherText = h ? D.texts[h.k] : "";
  root.dataset.selected = String(S.selected.length);
  root.dataset.located = String(S.located.length);
  root.dataset.clicked = S.clicked >= 0 ? String(S.clicked) : "";
  root.dataset.colourBy = S.colourBy;
  root.dataset.movement = S.movement ? "1" : "0";
  root.dataset.mode = S.mode;
  root.dataset.zoom = zoom().toFixed(2);
  const parts = [];
  if (S.selected.length) parts.push(`${S.selected.length.toLocaleString()} selected`);
  if (S.located.length) parts.push(`${S.located.length.toLocaleString()} found`);
  else if ($(".tm-locate").value.trim() && D) parts.push("not found");
  $(".tm-selinfo").textContent = parts.join(" · ");
  $(".tm-clear").hidden = !S.selected.length;
}

function legend() {
  const el = $(".tm-legend");
  el.replaceChildren();
  if (!D) return;
  if (S.colourBy === "moved") {
    const bar = document.createElement("span"), lo = document.createElement("span"), hi = document.createElement("span");
    bar.className = "tm-ramp";
    bar.style.background = `linear-gradient(90deg, ${[0, 0.25, 0.5, 0.75, 1].map((t) => hex(rampColour(t))).join(",")})`;
    lo.textContent = "kept its neighbours";
    hi.textContent = "moved most";
    el.append(lo, bar, hi);
    return;
  }
  const by = S.colourBy, key = by === "base" ? D.bc : D.tc;
  for (const c of D.clusters[by] || []) {
    const b = document.createElement("button"), sw = document.createElement("span"), name = document.createElement("span");
    b.type = "button";
    b.className = "tm-chip";
    b.title = `${(c.examples || []).join("\n")}${c.examples ? "\n\n" : ""}select the ${c.size} strings of this ${by} cluster`;
    sw.className = "tm-swatch";
    sw.style.background = D.colours[by][c.id];
    name.textContent = `${c.name} (${c.size})`;
    b.append(sw, name);
    b.addEventListener("click", () => {
      const ks = [];
      for (let k = 0; k < D.n; k++) if (key[k] === c.id) ks.push(k);
      select(ks, true);
    });
    el.append(b);
  }
}

function theme() {
  if (!plots) return;
  const th = colours();
  for (const m of MAPS)
    plots[m].set({ backgroundColor: rgba(th.bg), pointColorHover: rgba(th.accent), lassoColor: rgba(th.accent),
      reticleColor: rgba(th.accent) });
  for (const m of MAPS) overlay(m);
}

// ---------- controls ----------
function setMode(mode) {
  S.mode = mode;
  for (const b of root.querySelectorAll(".tm-mode")) b.setAttribute("aria-pressed", String(b.dataset.mode === mode));
  if (plots)
    for (const m of MAPS)
      plots[m].set({ mouseMode: mode === "pan" ? "panZoom" : "lasso", lassoType: mode === "box" ? "rectangle" : "freeform" });
  sync();
}
$(".tm-colour").addEventListener("change", (ev) => { S.colourBy = ev.target.value; drawPoints(false); legend(); sync(); });
$(".tm-move").addEventListener("change", (ev) => { S.movement = ev.target.checked; overlay("tuned"); sync(); });
$(".tm-reset").addEventListener("click", () => reset());
$(".tm-clear").addEventListener("click", () => select([], true));
for (const b of root.querySelectorAll(".tm-mode")) b.addEventListener("click", () => setMode(b.dataset.mode));
let locateTimer = 0;
const locBox = $(".tm-locate");
locBox.addEventListener("input", () => {
  clearTimeout(locateTimer);
  locateTimer = setTimeout(() => locate(locBox.value, false), 120);
});
locBox.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter") { ev.preventDefault(); clearTimeout(locateTimer); locate(locBox.value, true); }
  if (ev.key === "Escape") { locBox.value = ""; locate("", false); }
});
for (const m of MAPS) gl[m].addEventListener("pointerleave", () => { if (S.hover && S.hover.map === m) hoverAt(m, -1); });

// ---------- size ----------
function resize() {
  const w = box.base.clientWidth, h = box.base.clientHeight, dpr = window.devicePixelRatio || 1;
  if (!w || !h) return;
  S.size = { w, h };
  // the shared renderer's canvas holds one map at a time (both are w x h): that size, in device pixels as the maps'
  if (shared) shared.resize(w, h);
  for (const m of MAPS) {
    if (plots) plots[m].set({ width: w, height: h });
    ov[m].width = Math.round(w * dpr);
    ov[m].height = Math.round(h * dpr);
    overlay(m);
  }
}
new ResizeObserver(() => resize()).observe(box.base);
root.style.setProperty("--tm-height", `${Number(props.map_height) || 460}px`);
const themeWatch = new MutationObserver(() => theme()); // Gradio's dark mode toggles a class on <body>/<html>
themeWatch.observe(document.body, { attributes: true, attributeFilter: ["class"] });
themeWatch.observe(document.documentElement, { attributes: true, attributeFilter: ["class"] });

// ---------- test and app API ----------
element.twinmap = root.twinmap = {
  pointScreenXY(m, k) { // viewport (client) pixel of point k on map m, for tests that hover or click it
    const r = gl[m].getBoundingClientRect(), [x, y] = toScreen(m, D[`${m}X`][k], D[`${m}Y`][k]);
    return { x: r.left + x, y: r.top + y };
  },
  select: (ks, emit = true) => select(ks, emit),
  locate: (text, emit = false) => locate(text, emit),
  setColourBy(mode) { const s = $(".tm-colour"); s.value = mode; s.dispatchEvent(new Event("change")); },
  reset,
  indexOf: (text) => (D ? D.texts.indexOf(text) : -1),
  // what each map holds and shows: the number of points drawn, the selection as the library has it
  drawn: (m) => (plots && D ? plots[m].get("points").length : 0),
  libraryXY: (m, k) => plots[m].getScreenPosition(k),
  libraryPoint: (m, k) => plots[m].get("points")[k],
  ownPoint: (m, k) => [D[`${m}X`][k], D[`${m}Y`][k]],
  labels: (m) => S.labels[m].map((b) => ({ ...b })), // the label boxes map m shows, in its canvas's CSS pixels
  librarySelection: (m) => (plots ? Array.from(plots[m].get("selectedPoints")) : []),
  state: () => ({ n: D ? D.n : 0, zoom: zoom(), hover: S.hover, selected: [...S.selected], located: [...S.located],
    clicked: S.clicked, colourBy: S.colourBy, movement: S.movement, mode: S.mode, offset: [...S.offset],
    lasso: S.lasso ? { map: S.lasso.map, screen: S.lasso.coordinates.map(([x, y]) => toScreen(S.lasso.map, x, y)) } : null }),
};
load(props.value);
watch("value", () => load(props.value));
