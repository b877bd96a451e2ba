/**
 * What the nemeses share (nemesis.ts, eio.ts): a cell of the nemesis matrix,
 * how a restore nemesis makes its cell, and the LD_PRELOAD shims they build
 * with the host's C compiler.
 */
import { execa } from "execa";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** One cell of the matrix. */
export interface NemesisCell {
  scenario: string;
  nemesis: string;
  result: "recovered" | "contained" | "failed";
  /** the first failed check, when failed */
  check: string | null;
  detail: string;
}

/** The cell maker of a restore nemesis (scenario `restore`). */
export const restoreCell =
  (nemesis: string) =>
  (result: NemesisCell["result"], check: string | null, detail: string): NemesisCell => ({ scenario: "restore", nemesis, result, check, detail });

/**
 * Builds a shim (`source`, C) with `cc` into `dir` as `<name>.so`, linked with `libs` (`-ldl`); one already built there is reused.
 * @returns its path, or why it could not be built ("needs a C compiler (cc): ...")
 */
export async function buildShim(dir: string, name: string, source: string, libs: string[]): Promise<{ so: string } | { error: string }> {
  mkdirSync(dir, { recursive: true });
  const src = join(dir, `${name}.c`);
  const so = join(dir, `${name}.so`);
  if (existsSync(so)) return { so };
  writeFileSync(src, source);
  const r = await execa("cc", ["-shared", "-fPIC", "-O2", "-o", so, src, ...libs], { reject: false, timeout: 60_000 }).catch((e: Error) => ({ exitCode: 127, stderr: e.message }));
  if (r.exitCode !== 0) return { error: `needs a C compiler (cc): ${String(r.stderr).trim().split("\n").at(-1)?.slice(0, 200)}` };
  return { so };
}
