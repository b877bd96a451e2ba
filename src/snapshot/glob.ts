/**
 * Minimal glob expansion for config `files` and drill `invariants`
 * (`*`, `?`, `**`), relative to a base folder. Only regular files match.
 */
import { readdirSync, statSync } from "node:fs";
import { isAbsolute, join, relative, resolve, sep } from "node:path";

function toRegex(pattern: string): RegExp {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*" && pattern[i + 1] === "*") {
      re += pattern[i + 2] === "/" ? "(?:.*/)?" : ".*";
      i += pattern[i + 2] === "/" ? 2 : 1;
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

function walk(dir: string, out: string[]): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else if (e.isFile()) out.push(p);
  }
}

/** Expands `pattern` against `base`; returns absolute paths, sorted. A pattern without wildcards returns itself. */
export function expandGlob(base: string, pattern: string): string[] {
  const abs = isAbsolute(pattern) ? pattern : resolve(base, pattern);
  if (!/[*?]/.test(pattern)) return [abs];
  const parts = abs.split(sep);
  const fixed: string[] = [];
  for (const p of parts) {
    if (/[*?]/.test(p)) break;
    fixed.push(p);
  }
  const root = fixed.join(sep) || sep;
  const files: string[] = [];
  try {
    if (statSync(root).isDirectory()) walk(root, files);
  } catch {
    return [];
  }
  const re = toRegex(relative(root, abs).split(sep).join("/"));
  return files.filter((f) => re.test(relative(root, f).split(sep).join("/"))).sort();
}
