// `npm run threats`: a vitest reporter that prints the THREATS.md figures from
// the tests that exercise it. A test counts for a case when its name carries
// the case's tag: [T<n>] for case n of ../shared/THREATS.md, [S] for secrets,
// [I] for bad input, [E<n>] for point n of issue 32 (trust at the edges). Figures come from the tests' own measurements (task.meta):
// the tamper sweep's bit flips, and the peak memory of every bomb case.
import type { Reporter, TestCase } from "vitest/node";

const SECTIONS: { title: string; has: (tag: string) => boolean }[] = [
  { title: "Signature, manifest, trust (cases 1-14)", has: (t) => caseIn(t, 1, 14) },
  { title: "Archive and decompression (15-20)", has: (t) => caseIn(t, 15, 20) },
  { title: "SQLite (21-25)", has: (t) => caseIn(t, 21, 25) },
  { title: "Workspace (26)", has: (t) => caseIn(t, 26, 26) },
  { title: "Crash consistency and I/O (27-30)", has: (t) => caseIn(t, 27, 30) },
  { title: "Side effects, fencing, repeats (31-37)", has: (t) => caseIn(t, 31, 37) },
  { title: "Secrets never enter a bundle [S]", has: (t) => t === "S" },
  { title: "Bad input and config [I]", has: (t) => t === "I" },
  { title: "Trust at the edges [E1-E13] (issue 32)", has: (t) => /^E\d+$/.test(t) },
];

function caseIn(tag: string, lo: number, hi: number): boolean {
  const n = Number(/^T(\d+)$/.exec(tag)?.[1]);
  return n >= lo && n <= hi;
}

const MiB = (kb: number) => `${(kb / 1024).toFixed(0)} MiB`;

export default class ThreatsReporter implements Reporter {
  private readonly results: { tags: string[]; name: string; state: string; meta: ReturnType<TestCase["meta"]> }[] = [];

  onTestCaseResult(tc: TestCase): void {
    const tags = [...tc.name.matchAll(/\[(T\d+|E\d+|S|I)\]/g)].map((m) => m[1]!);
    if (tags.length) this.results.push({ tags, name: tc.name, state: tc.result().state, meta: tc.meta() });
  }

  onTestRunEnd(): void {
    const out: string[] = ["", "THREATS.md figures (npm run threats)", ""];
    const w = Math.max(...SECTIONS.map((s) => s.title.length));
    out.push(`  ${"section".padEnd(w)}  tests  passed  cases covered`);
    for (const s of SECTIONS) {
      const mine = this.results.filter((r) => r.tags.some(s.has));
      const passed = mine.filter((r) => r.state === "passed").length;
      const cases = [...new Set(mine.flatMap((r) => r.tags.filter(s.has)))].filter((t) => /^[TE]/.test(t)).sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
      out.push(`  ${s.title.padEnd(w)}  ${String(mine.length).padStart(5)}  ${String(passed).padStart(6)}  ${cases.join(" ") || (mine.length ? "-" : "none in this run")}`);
    }
    const failed = this.results.filter((r) => r.state === "failed");
    for (const f of failed) out.push(`  FAILED: ${f.name}`);
    const flips = this.results.find((r) => r.meta.bitFlips)?.meta.bitFlips;
    out.push("");
    if (flips) {
      const pct = (a: number, b: number) => `${((100 * a) / b).toFixed(flips.tried === flips.detected ? 0 : 3)}%`;
      out.push(
        `  Tamper detection: ${flips.tried} bit flips (every byte of manifest.json ${flips.manifestBytes} B, manifest.sig ${flips.signatureBytes} B and the age header ${flips.headerBytes} B, plus ${flips.payloadOffsets} payload offsets): ${flips.detected} detected (${pct(flips.detected, flips.tried)}), 0 bytes written`,
      );
      out.push(`  Truncation at every tar block and age chunk boundary: ${flips.truncations} tried, ${flips.refused} refused`);
    } else out.push("  Tamper detection: the bit-flip sweep (test/e2e/restore.test.ts) did not run");
    const bombs = this.results.filter((r) => r.meta.peakRssKb);
    out.push(`  Bounded resources (cap 150 MiB): ${bombs.length ? bombs.map((b) => `${b.name.replace(/^\[T\d+\]\s*/, "").split(":")[0]} ${MiB(b.meta.peakRssKb!)}`).join("; ") : "no bomb case ran"}`);
    out.push("");
    process.stdout.write(out.join("\n") + "\n");
  }
}
