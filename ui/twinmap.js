// Linked twin maps (Base | Tuned): canvas scatter with zoom, pan, lasso/box selection, linked hover and events.
// Runs as gr.HTML's js_on_load: Gradio passes `element`, `trigger`, `props` and `watch`. Events sent to Python:
//   trigger('click',  {index: i, text, map})                         a point was clicked (or Enter in Locate)
//   trigger('select', {index: [i...], value: [text...], selected})   a lasso / box / legend selection (empty: cleared)
// where i is the point's "i" in the service's data. Test hooks: data-* attributes on .tm and element.twinmap.
const root = element.querySelector(".tm");
const MAPS = ["base", "tuned"];
const MOVED_STOPS = [
  [0, [148, 163, 184]],
  [0.5, [245, 158, 11]],
  [1, [220, 38, 38]],
];
const FALLBACK = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"];
const $ = (sel) => root.querySelector(sel);
const canvases = {};
const sizes = {};
for (const m of MAPS) canvases[m] = root.querySelector(`.tm-map[data-map="${m}"] canvas`);

let D = null; // the loaded data, see load()
const S = {
  colourBy: "base", mode: "pan", movement: false, zoom: 1, centre: { base: null, tuned: null },
  hover: null, clicked: -1, selected: new Set(), located: new Set(), drag: null,
};
let frame = 0;

// ---------- data ----------
function load(v) {
  S.hover = null; S.clicked = -1; S.selected = new Set(); S.located = new Set(); S.drag = null;
  $(".tm-locate").value = "";
  if (!v || !v.texts || !v.texts.length) {
    D = null;
    root.dataset.state = "empty";
    root.dataset.n = "0";
    $(".tm-empty").textContent = (v && v.note) || props.placeholder || "No map yet.";
    $(".tm-legend").replaceChildren();
    $(".tm-foot").textContent = "";
    sync();
    return;
  }
  const n = v.texts.length;
  D = { ...v, n, colours: {}, names: {}, lower: v.texts.map((t) => t.toLowerCase()) };
  for (const m of MAPS) {
    const pal = {}, names = {};
    (v.clusters[m] || []).forEach((c, j) => {
      pal[c.id] = c.colour || FALLBACK[j % FALLBACK.length];
      names[c.id] = c.name;
    });
    D.colours[m] = pal;
    D.names[m] = names;
  }
  D.movedColour = v.moved.map(movedColour);
  D.movedOrder = [...Array(n).keys()].sort((a, b) => v.moved[a] - v.moved[b]);
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  const grow = (x, y) => { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); };
  for (const m of MAPS) for (let k = 0; k < n; k++) grow(v[m][2 * k], v[m][2 * k + 1]);
  for (const q of v.queries || []) for (const m of MAPS) grow(q[m][0], q[m][1]);
  const pad = 0.06 * Math.max(x1 - x0, y1 - y0, 1e-9);
  D.bounds = { x0: x0 - pad, x1: x1 + pad, y0: y0 - pad, y1: y1 + pad };
  root.dataset.state = "ready";
  root.dataset.n = String(n);
  const method = { umap: "UMAP", tsne: "t-SNE", pca: "PCA" }[v.method] || v.method || "";
  const shown = v.n_shown < v.n_total ? `${v.n_shown.toLocaleString()} of ${v.n_total.toLocaleString()} strings shown`
    : `${v.n_shown.toLocaleString()} strings`;
  const secs = typeof v.seconds === "number" ? ` · laid out in ${v.seconds.toFixed(1)} s` : "";
  $(".tm-foot").textContent = [`${method} · ${shown}${secs}`, v.note].filter(Boolean).join(" — ");
  reset();
  legend();
}

function movedColour(t) {
  t = Math.min(1, Math.max(0, Number(t) || 0));
  for (let j = 1; j < MOVED_STOPS.length; j++) {
    const [t1, c1] = MOVED_STOPS[j], [t0, c0] = MOVED_STOPS[j - 1];
    if (t <= t1) {
      const f = (t - t0) / (t1 - t0);
      return `rgb(${c0.map((c, i) => Math.round(c + f * (c1[i] - c))).join(",")})`;
    }
  }
  return "rgb(220,38,38)";
}

function colourOf(map, k) {
  if (S.colourBy === "moved") return D.movedColour[k];
  const by = S.colourBy;
  return D.colours[by][(by === "base" ? D.bc : D.tc)[k]] || "#888888";
}

// ---------- view ----------
function fitScale(map) {
  const { w, h } = sizes[map] || { w: 1, h: 1 };
  const b = D.bounds;
  return Math.min(w / (b.x1 - b.x0), h / (b.y1 - b.y0));
}
function toScreen(map, x, y) {
  const { w, h } = sizes[map] || { w: 1, h: 1 };
  const s = fitScale(map) * S.zoom, c = S.centre[map];
  return [(x - c[0]) * s + w / 2, h / 2 - (y - c[1]) * s];
}
function toWorld(map, sx, sy) {
  const { w, h } = sizes[map] || { w: 1, h: 1 };
  const s = fitScale(map) * S.zoom, c = S.centre[map];
  return [(sx - w / 2) / s + c[0], c[1] - (sy - h / 2) / s];
}
function reset() {
  S.zoom = 1;
  if (D) for (const m of MAPS) S.centre[m] = [(D.bounds.x0 + D.bounds.x1) / 2, (D.bounds.y0 + D.bounds.y1) / 2];
  redraw();
}
function zoomAt(map, sx, sy, factor) {
  const z = Math.min(200, Math.max(0.5, S.zoom * factor));
  for (const m of MAPS) {  // the same screen point stays put on both maps
    const before = toWorld(m, sx, sy);
    const old = S.zoom;
    S.zoom = z;
    const after = toWorld(m, sx, sy);
    S.zoom = old;
    S.centre[m] = [S.centre[m][0] + before[0] - after[0], S.centre[m][1] + before[1] - after[1]];
  }
  S.zoom = z;
  redraw();
}
function centreOn(ks) {
  if (!ks.length) return;
  for (const m of MAPS) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const k of ks) {
      const x = D[m][2 * k], y = D[m][2 * k + 1];
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    S.centre[m] = [(x0 + x1) / 2, (y0 + y1) / 2];
  }
  const b = D.bounds, span = Math.max(b.x1 - b.x0, b.y1 - b.y0);
  let need = Infinity;  // zoom in until the matches' box fills about half the map, up to 2.5x (the surroundings stay)
  for (const m of MAPS) {
    let w = 0, h = 0;
    for (const k of ks) {
      w = Math.max(w, Math.abs(D[m][2 * k] - S.centre[m][0]));
      h = Math.max(h, Math.abs(D[m][2 * k + 1] - S.centre[m][1]));
    }
    need = Math.min(need, span / (4 * Math.max(w, h, span / 10)));
  }
  S.zoom = Math.max(1, Math.min(2.5, need));
}

// ---------- drawing ----------
function theme() {
  const cs = getComputedStyle(root);
  const get = (name, dflt) => cs.getPropertyValue(name).trim() || dflt;
  return { fg: get("--tm-fg", "#1f2937"), bg: get("--tm-bg", "#ffffff"), accent: get("--tm-accent", "#f97316") };
}
function redraw() {
  if (frame) return;
  frame = requestAnimationFrame(() => { frame = 0; for (const m of MAPS) draw(m); sync(); });
}
function radius() {
  const n = D ? D.n : 0;
  const r = n < 300 ? 4 : n < 1200 ? 3 : 2.2;
  return r * Math.min(2, Math.sqrt(S.zoom));
}
function focusSet() {
  if (S.located.size) return S.located;
  return S.selected.size ? S.selected : null;
}
function draw(map) {
  const cv = canvases[map], sz = sizes[map];
  if (!cv || !sz) return;
  const ctx = cv.getContext("2d"), dpr = sz.dpr;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, sz.w, sz.h);
  if (!D) return;
  const th = theme(), r = radius(), focus = focusSet(), n = D.n;
  if (S.movement && map === "tuned") {
    ctx.strokeStyle = th.fg;
    ctx.globalAlpha = focus ? 0.45 : 0.16;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = 0; k < n; k++) {
      if (focus && !focus.has(k)) continue;
      const [ax, ay] = toScreen(map, D.base[2 * k], D.base[2 * k + 1]);
      const [bx, by] = toScreen(map, D.tuned[2 * k], D.tuned[2 * k + 1]);
      ctx.moveTo(ax, ay);
      ctx.lineTo(bx, by);
    }
    ctx.stroke();
    ctx.globalAlpha = 1;
  }
  const order = S.colourBy === "moved" ? D.movedOrder : null;
  const pass = (keep, alpha) => {  // one path per colour: thousands of arcs in a handful of fills
    const groups = new Map();
    for (let j = 0; j < n; j++) {
      const k = order ? order[j] : j;
      if (!keep(k)) continue;
      const c = colourOf(map, k);
      if (!groups.has(c)) groups.set(c, []);
      groups.get(c).push(k);
    }
    ctx.globalAlpha = alpha;
    for (const [c, ks] of groups) {
      ctx.fillStyle = c;
      ctx.beginPath();
      for (const k of ks) {
        const [x, y] = toScreen(map, D[map][2 * k], D[map][2 * k + 1]);
        if (x < -r || y < -r || x > sz.w + r || y > sz.h + r) continue;
        ctx.moveTo(x + r, y);
        ctx.arc(x, y, r, 0, 2 * Math.PI);
      }
      ctx.fill();
    }
    ctx.globalAlpha = 1;
  };
  if (order) {  // most moved on top: one pass in order, colour groups would reorder them
    ctx.globalAlpha = 1;
    for (const k of order) {
      const dim = focus && !focus.has(k);
      const [x, y] = toScreen(map, D[map][2 * k], D[map][2 * k + 1]);
      ctx.globalAlpha = dim ? 0.12 : 1;
      ctx.fillStyle = D.movedColour[k];
      ctx.beginPath();
      ctx.arc(x, y, r, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
  } else if (focus) {
    pass((k) => !focus.has(k), 0.12);
    pass((k) => focus.has(k), 1);
  } else {
    pass(() => true, 0.9);
  }
  if (focus && focus.size <= 400) for (const k of focus) ring(ctx, map, k, r + 2, th.fg, 1);
  if (S.located.size && S.located.size <= 12)  // a located string is named on both maps
    for (const k of S.located) {
      ring(ctx, map, k, r + 4, th.accent, 2);
      label(ctx, map, D[map][2 * k], D[map][2 * k + 1], D.texts[k], th, r + 8);
    }
  drawQueries(ctx, map, th);
  if (S.clicked >= 0) ring(ctx, map, S.clicked, r + 5, th.accent, 2.5);
  if (S.hover && S.hover.k >= 0) {
    const k = S.hover.k, other = S.hover.map !== map;
    ring(ctx, map, k, r + (other ? 6 : 4), th.bg, 5);
    ring(ctx, map, k, r + (other ? 6 : 4), th.accent, 2.5);
    if (other) label(ctx, map, D[map][2 * k], D[map][2 * k + 1], D.texts[k], th, r + 9);
  }
  const dr = S.drag;
  if (dr && dr.map === map && (dr.kind === "lasso" || dr.kind === "box") && dr.path.length > 1) {
    ctx.strokeStyle = th.accent;
    ctx.fillStyle = th.accent;
    ctx.lineWidth = 1.5;
    ctx.setLineDash([5, 4]);
    ctx.beginPath();
    shape(dr).forEach(([x, y], j) => (j ? ctx.lineTo(x, y) : ctx.moveTo(x, y)));
    ctx.closePath();
    ctx.stroke();
    ctx.globalAlpha = 0.08;
    ctx.fill();
    ctx.globalAlpha = 1;
    ctx.setLineDash([]);
  }
}
function ring(ctx, map, k, rr, colour, width) {
  const [x, y] = toScreen(map, D[map][2 * k], D[map][2 * k + 1]);
  ctx.strokeStyle = colour;
  ctx.lineWidth = width;
  ctx.beginPath();
  ctx.arc(x, y, rr, 0, 2 * Math.PI);
  ctx.stroke();
}
function label(ctx, map, wx, wy, text, th, dx) {
  const [x, y] = toScreen(map, wx, wy);
  const sz = sizes[map];
  const t = text.length > 48 ? text.slice(0, 47) + "…" : text;
  ctx.font = "600 12px system-ui, sans-serif";
  const w = ctx.measureText(t).width;
  let lx = x + dx;
  if (lx + w + 6 > sz.w) lx = x - dx - w;  // flip left rather than run off the canvas
  const ly = Math.min(Math.max(y, 10), sz.h - 8);
  ctx.lineWidth = 4;
  ctx.strokeStyle = th.bg;
  ctx.strokeText(t, lx, ly + 4);
  ctx.fillStyle = th.fg;
  ctx.fillText(t, lx, ly + 4);
}
function drawQueries(ctx, map, th) {
  for (const q of D.queries || []) {
    const [x, y] = toScreen(map, q[map][0], q[map][1]);
    ctx.beginPath();
    for (let j = 0; j < 10; j++) {
      const a = -Math.PI / 2 + (j * Math.PI) / 5, rr = j % 2 ? 3.6 : 9;
      ctx.lineTo(x + rr * Math.cos(a), y + rr * Math.sin(a));
    }
    ctx.closePath();
    ctx.fillStyle = th.accent;
    ctx.strokeStyle = th.bg;
    ctx.lineWidth = 2;
    ctx.stroke();
    ctx.fill();
    label(ctx, map, q[map][0], q[map][1], q.text, th, 12);
  }
}
function shape(dr) {
  if (dr.kind === "lasso") return dr.path;
  const [a, b] = [dr.path[0], dr.path[dr.path.length - 1]];
  return [a, [b[0], a[1]], b, [a[0], b[1]]];
}

// ---------- state out: data-* hooks, legend, selection line ----------
function sync() {
  const h = S.hover && S.hover.k >= 0 ? S.hover : null;
  root.dataset.hovered = h ? String(h.k) : "";
  root.dataset.hoverMap = h ? h.map : "";
  root.dataset.hoveredText = h ? D.texts[h.k] : "";
  root.dataset.highlightOther = h ? String(h.k) : "";  // the other map rings the same point (same string)
  root.dataset.highlightOtherText = h ? D.texts[h.k] : "";
  root.dataset.selected = String(S.selected.size);
  root.dataset.located = String(S.located.size);
  root.dataset.clicked = S.clicked >= 0 ? String(S.clicked) : "";
  root.dataset.colourBy = S.colourBy;
  root.dataset.movement = S.movement ? "1" : "0";
  root.dataset.mode = S.mode;
  root.dataset.zoom = S.zoom.toFixed(2);
  const info = $(".tm-selinfo");
  const parts = [];
  if (S.selected.size) parts.push(`${S.selected.size} selected`);
  if (S.located.size) parts.push(`${S.located.size} found`);
  else if ($(".tm-locate").value.trim() && D) parts.push("not found");
  info.textContent = parts.join(" · ");
  $(".tm-clear").hidden = !S.selected.size;
}
function legend() {
  const box = $(".tm-legend");
  box.replaceChildren();
  if (!D) return;
  if (S.colourBy === "moved") {
    const bar = document.createElement("span");
    bar.className = "tm-ramp";
    bar.style.background = `linear-gradient(90deg, ${[0, 0.25, 0.5, 0.75, 1].map(movedColour).join(",")})`;
    const lo = document.createElement("span"), hi = document.createElement("span");
    lo.textContent = "kept its neighbours";
    hi.textContent = "moved most";
    box.append(lo, bar, hi);
    return;
  }
  const by = S.colourBy, key = by === "base" ? D.bc : D.tc;
  for (const c of D.clusters[by] || []) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "tm-chip";
    b.title = `select the ${c.size} strings of this ${by} cluster`;
    const sw = document.createElement("span");
    sw.className = "tm-swatch";
    sw.style.background = D.colours[by][c.id];
    const name = document.createElement("span");
    name.textContent = `${c.name} (${c.size})`;
    b.append(sw, name);
    b.addEventListener("click", () => {
      const ks = [];
      for (let k = 0; k < D.n; k++) if (key[k] === c.id) ks.push(k);
      select(ks, true);
    });
    box.append(b);
  }
}

// ---------- selection, events ----------
function select(ks, emit) {
  S.selected = new Set(ks);
  redraw();
  sync();
  if (emit) {
    const sorted = [...S.selected].sort((a, b) => a - b);
    trigger("select", { index: sorted.map((k) => D.ids[k]), value: sorted.map((k) => D.texts[k]), selected: sorted.length > 0 });
  }
}
function clickPoint(k, map) {
  S.clicked = k;
  redraw();
  sync();
  trigger("click", { index: D.ids[k], text: D.texts[k], map });
}
function locate(q, emit) {
  q = (q || "").trim().toLowerCase();
  S.located = new Set();
  if (D && q) {
    const exact = [];
    for (let k = 0; k < D.n; k++) {
      if (D.lower[k].includes(q)) S.located.add(k);
      if (D.lower[k] === q) exact.push(k);
    }
    const ks = exact.length ? exact : [...S.located];
    if (ks.length) centreOn(ks.slice(0, 500));
    if (emit && ks.length) clickPoint(ks[0], "base");
  }
  redraw();
  sync();
}
function inside(poly, x, y) {
  let hit = false;
  for (let a = 0, b = poly.length - 1; a < poly.length; b = a++) {
    const [xa, ya] = poly[a], [xb, yb] = poly[b];
    if (ya > y !== yb > y && x < ((xb - xa) * (y - ya)) / (yb - ya) + xa) hit = !hit;
  }
  return hit;
}
function nearest(map, sx, sy) {
  if (!D) return -1;
  const lim = Math.max(7, radius() + 3);
  let best = -1, bd = lim * lim;
  for (let k = 0; k < D.n; k++) {
    const [x, y] = toScreen(map, D[map][2 * k], D[map][2 * k + 1]);
    const d = (x - sx) ** 2 + (y - sy) ** 2;
    if (d < bd) { bd = d; best = k; }
  }
  return best;
}
function nearestQuery(map, sx, sy) {
  for (const q of (D && D.queries) || []) {
    const [x, y] = toScreen(map, q[map][0], q[map][1]);
    if ((x - sx) ** 2 + (y - sy) ** 2 < 100) return q;
  }
  return null;
}

// ---------- tooltip ----------
function tip(map, sx, sy, k, q) {
  const el = $(".tm-tip");
  if (!el) return;  // the map was replaced (a new run served) while a pointer event was on its way
  if (k < 0 && !q) { el.hidden = true; return; }
  el.replaceChildren();
  const strong = document.createElement("div");
  strong.className = "tm-tip-text";
  const sub = document.createElement("div");
  sub.className = "tm-tip-sub";
  if (q) {
    strong.textContent = q.text;
    sub.textContent = "query";
  } else {
    strong.textContent = D.texts[k];
    const cid = (map === "base" ? D.bc : D.tc)[k];
    const bits = [`${map} cluster: ${D.names[map][cid] ?? cid}`];
    if (S.colourBy === "moved") bits.push(`moved ${Math.round(100 * D.moved[k])}%`);
    sub.textContent = bits.join(" · ");
  }
  el.append(strong, sub);
  el.hidden = false;
  const cr = canvases[map].getBoundingClientRect(), rr = root.getBoundingClientRect();
  let x = cr.left - rr.left + sx + 14, y = cr.top - rr.top + sy + 14;
  const w = el.offsetWidth, h = el.offsetHeight;
  if (x + w > rr.width - 4) x = Math.max(4, cr.left - rr.left + sx - w - 14);
  if (y + h > rr.height - 4) y = Math.max(4, cr.top - rr.top + sy - h - 14);
  el.style.left = `${x}px`;
  el.style.top = `${y}px`;
}

// ---------- pointer handling ----------
function local(map, ev) {
  const r = canvases[map].getBoundingClientRect();
  return [ev.clientX - r.left, ev.clientY - r.top];
}
function hoverAt(map, sx, sy) {
  const k = nearest(map, sx, sy);
  const q = k < 0 ? nearestQuery(map, sx, sy) : null;
  const prev = S.hover ? `${S.hover.map}:${S.hover.k}` : "";
  S.hover = k >= 0 ? { map, k } : null;
  tip(map, sx, sy, k, q);
  canvases[map].style.cursor = k >= 0 ? "pointer" : S.mode === "pan" ? "grab" : "crosshair";
  if (prev !== (S.hover ? `${map}:${k}` : "")) redraw();
  sync();
}
for (const map of MAPS) {
  const cv = canvases[map];
  cv.addEventListener("pointerdown", (ev) => {
    if (!D || ev.button !== 0) return;
    const [x, y] = local(map, ev);
    const kind = ev.shiftKey ? "lasso" : S.mode;
    S.drag = { map, kind, x0: x, y0: y, path: [[x, y]], moved: false, centres: { ...S.centre } };
    cv.setPointerCapture(ev.pointerId);
    ev.preventDefault();
  });
  cv.addEventListener("pointermove", (ev) => {
    if (!D) return;
    const [x, y] = local(map, ev);
    const dr = S.drag;
    if (!dr) { hoverAt(map, x, y); return; }
    if (Math.abs(x - dr.x0) + Math.abs(y - dr.y0) > 4) dr.moved = true;
    if (!dr.moved) return;
    $(".tm-tip").hidden = true;
    if (dr.kind === "pan") {
      const s = fitScale(map) * S.zoom;
      for (const m of MAPS) {
        const c = dr.centres[m];
        S.centre[m] = [c[0] - (x - dr.x0) / s, c[1] + (y - dr.y0) / s];
      }
      cv.style.cursor = "grabbing";
    } else {
      dr.path.push([x, y]);
    }
    redraw();
  });
  cv.addEventListener("pointerup", (ev) => {
    const dr = S.drag;
    S.drag = null;
    if (!dr || !D) return;
    const [x, y] = local(map, ev);
    if (!dr.moved) {
      const k = nearest(map, x, y);
      if (k >= 0) clickPoint(k, map);
      return;
    }
    if (dr.kind === "lasso" || dr.kind === "box") {
      const poly = shape(dr);
      const ks = [];
      if (poly.length > 2)
        for (let k = 0; k < D.n; k++) {
          const [px, py] = toScreen(map, D[map][2 * k], D[map][2 * k + 1]);
          if (inside(poly, px, py)) ks.push(k);
        }
      select(ks, true);
    }
    redraw();
  });
  cv.addEventListener("pointerleave", () => {
    if (S.drag) return;
    S.hover = null;
    $(".tm-tip").hidden = true;
    redraw();
    sync();
  });
  cv.addEventListener("wheel", (ev) => {
    if (!D) return;
    ev.preventDefault();
    const [x, y] = local(map, ev);
    zoomAt(map, x, y, Math.exp(-ev.deltaY * 0.0015));
  }, { passive: false });
}

// ---------- controls ----------
$(".tm-colour").addEventListener("change", (ev) => { S.colourBy = ev.target.value; legend(); redraw(); sync(); });
$(".tm-move").addEventListener("change", (ev) => { S.movement = ev.target.checked; redraw(); sync(); });
$(".tm-reset").addEventListener("click", () => reset());
$(".tm-clear").addEventListener("click", () => select([], true));
for (const b of root.querySelectorAll(".tm-mode")) {
  b.addEventListener("click", () => {
    S.mode = b.dataset.mode;
    for (const o of root.querySelectorAll(".tm-mode")) o.setAttribute("aria-pressed", String(o === b));
    sync();
  });
}
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

// ---------- size ----------
const observer = new ResizeObserver(() => {
  for (const m of MAPS) {
    const cv = canvases[m], w = cv.clientWidth, h = cv.clientHeight, dpr = window.devicePixelRatio || 1;
    if (!w || !h) continue;
    sizes[m] = { w, h, dpr };
    cv.width = Math.round(w * dpr);
    cv.height = Math.round(h * dpr);
  }
  redraw();
});
for (const m of MAPS) observer.observe(canvases[m]);
root.style.setProperty("--tm-height", `${Number(props.map_height) || 460}px`);
const themeWatch = new MutationObserver(() => redraw());  // Gradio's dark mode toggles a class on <body>/<html>
themeWatch.observe(document.body, { attributes: true, attributeFilter: ["class"] });
themeWatch.observe(document.documentElement, { attributes: true, attributeFilter: ["class"] });

// ---------- test and app API ----------
element.twinmap = root.twinmap = {
  pointScreenXY(map, k) {  // viewport (client) pixel of point k on `map`, for tests that hover or click it
    const r = canvases[map].getBoundingClientRect();
    const [x, y] = toScreen(map, D[map][2 * k], D[map][2 * k + 1]);
    return { x: r.left + x, y: r.top + y };
  },
  select: (ks, emit = true) => select(ks, emit),
  locate: (text, emit = false) => locate(text, emit),
  setColourBy(mode) { const s = $(".tm-colour"); s.value = mode; s.dispatchEvent(new Event("change")); },
  reset,
  indexOf: (text) => (D ? D.texts.indexOf(text) : -1),
  state: () => ({ n: D ? D.n : 0, zoom: S.zoom, hover: S.hover, selected: [...S.selected], located: [...S.located],
    clicked: S.clicked, colourBy: S.colourBy, movement: S.movement, mode: S.mode }),
};
load(props.value);
watch("value", () => load(props.value));
