// Bundles regl-scatterplot (the version package-lock.json pins) and every package it pulls in into one minified
// script, ui/vendor/regl-scatterplot.min.js (an IIFE that sets window.reglScatterplot), and writes the licences
// of exactly the packages that ended up in it to ui/vendor/regl-scatterplot.LICENSES.txt. Run by
// scripts/build_vendor.sh after `npm ci`; the same inputs give the same bytes.
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] || join(here, "..", "..", "ui", "vendor");
mkdirSync(out, { recursive: true });

const result = await esbuild.build({
  entryPoints: [join(here, "entry.js")],
  bundle: true,
  minify: true,
  format: "iife",
  globalName: "reglScatterplot",
  target: "es2020",
  platform: "browser",
  legalComments: "none", // the licences go, whole, into the .LICENSES.txt beside the bundle
  metafile: true,
  write: false,
  absWorkingDir: here,
});
const pin = JSON.parse(readFileSync(join(here, "node_modules", "regl-scatterplot", "package.json"), "utf8")).version;
const head = `/*! regl-scatterplot ${pin} and its dependencies, bundled by scripts/build_vendor.sh (esbuild ${esbuild.version}); licences: regl-scatterplot.LICENSES.txt */\n`;
writeFileSync(join(out, "regl-scatterplot.min.js"), head + result.outputFiles[0].text);

// The bundled inputs are regl-scatterplot, regl and pub-sub-es, but regl-scatterplot's own dist/ already inlines
// its other dependencies (earcut, gl-matrix, dom-2d-camera, ...): every non-dev package of the lock file is in it.
const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8"));
const folders = new Set(Object.entries(lock.packages).filter(([k, v]) => k && !v.dev).map(([k]) => k));
for (const input of Object.keys(result.metafile.inputs)) {
  const m = input.match(/^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//);
  if (m && !folders.has(m[1])) throw new Error(`${m[1]} is bundled but not a dependency in package-lock.json`);
}
const sections = [];
for (const folder of [...folders].sort()) {
  const pkg = JSON.parse(readFileSync(join(here, folder, "package.json"), "utf8"));
  const file = readdirSync(join(here, folder)).sort().find((f) => /^(licen[cs]e|copying)/i.test(f));
  if (!file) throw new Error(`${pkg.name} ${pkg.version}: no licence file in the package`);
  const text = readFileSync(join(here, folder, file), "utf8").trim();
  sections.push(`${pkg.name} ${pkg.version} (${pkg.license}) — ${relative(here, folder)}/${file}\n\n${text}\n`);
}
const banner = "Licences of the npm packages bundled into regl-scatterplot.min.js (scripts/build_vendor.sh).\n";
writeFileSync(join(out, "regl-scatterplot.LICENSES.txt"), [banner, ...sections].join("\n" + "=".repeat(78) + "\n\n"));
console.log(`regl-scatterplot ${pin}: ${result.outputFiles[0].text.length} bytes, ${folders.size} packages`);
