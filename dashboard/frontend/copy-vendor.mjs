// Copies the installed front-end packages into Django's static files (dashboard/static/dashboard/
// vendor/, ignored by git): the library code comes from the npm registry, never from the repo.
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const target = join(here, "..", "static", "dashboard", "vendor");
const files = [
  ["uplot/dist/uPlot.iife.min.js", "uPlot.iife.min.js"],
  ["uplot/dist/uPlot.min.css", "uPlot.min.css"],
  ["uplot/LICENSE", "uPlot.LICENSE"],
];

mkdirSync(target, { recursive: true });
for (const [source, name] of files) {
  copyFileSync(join(here, "node_modules", source), join(target, name));
}
console.log(`copied ${files.length} files to ${target}`);
