// Property tests (fast-check) through the real binary: configs and signed
// manifests mutated at random. Whatever the input, the answer is a
// documented exit code and a message — never an internal error, a JS stack or
// a raw Node dump.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type RunResult, type TestAgent } from "../helpers.js";
import { craft, manifestOf } from "../craft.js";

/** Exit codes DESIGN.md documents for backup and verify. */
const DOCUMENTED = [0, 1, 2, 3, 10, 11, 12, 13, 14];

let t: TestAgent;
let baseConfig: any;
let baseManifest: any;
let payload: Buffer;
beforeAll(async () => {
  t = await makeAgent({ sizeMb: 0 });
  baseConfig = JSON.parse(readFileSync(t.config, "utf8"));
  const b = json(await t.run(["backup", "--json"]));
  const file = await t.file(b.path);
  baseManifest = manifestOf(file);
  const { readLayout } = await import("../../dist/bundle/outer.js");
  const l = readLayout(file);
  payload = readFileSync(file).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
}, 180_000);
afterAll(() => t.cleanup());

/** Every path to a value in `v` (object keys and array indexes), the root excluded. */
function paths(v: unknown, at: (string | number)[] = []): (string | number)[][] {
  if (Array.isArray(v)) return v.flatMap((x, i) => [[...at, i], ...paths(x, [...at, i])]);
  if (v && typeof v === "object") return Object.entries(v).flatMap(([k, x]) => [[...at, k], ...paths(x, [...at, k])]);
  return [];
}

/** Values that have broken parsers before: traversal, folders, sidecars, huge, unsafe and fractional numbers, wrong types. */
const nasty = fc.oneof(
  fc.constantFrom<unknown>("", ".", "..", "../x", "../../etc", "/", "/etc/passwd", "a".repeat(5000), "state", "workspace", "memory", "state/agent.sqlite",
    "state/agent.sqlite-wal", ".agentbak", ".agentbak/SUSPENDED", "env:", "file:", "file:memory/rules.json", "*", "**/*", "\u0000", "é", "db/x", "files/../x",
    -1, 0, 1.5, 5.5, 2 ** 40, 2 ** 53, Number.MAX_SAFE_INTEGER, true, null, [], {}, [""], { x: 1 }),
  fc.jsonValue({ maxDepth: 2 }),
);

type Mutation = { path: (string | number)[]; op: "set" | "delete" | "add"; value: unknown };

/** Paths an agent might mistype: folders, missing files, sidecars, the repository, traversal, links out. */
const pathLike = fc.constantFrom("state", "memory", ".", "/", "..", "../x", "missing.sqlite", "/etc/passwd", "/dev/null", "memory/rules.json", "state/agent.sqlite",
  "state/agent.sqlite-wal", "state/agent.sqlite-journal", "workspace", "workspace/src", "backups", "backups/**", "state/*", "**/*", "*", "workspace/*", ".git", "")

/**
 * One or two mutations of `base`: at a path `targeted` names (with values of
 * the kind that key takes, typed wrong half the time), or anywhere (any value).
 */
function mutations(base: unknown, skip: RegExp, targeted: [RegExp, fc.Arbitrary<unknown>][]) {
  const all = paths(base).filter((p) => !skip.test(p.join(".")));
  const one = fc.oneof(
    { arbitrary: fc.record({ path: fc.constantFrom(...all), op: fc.constantFrom<Mutation["op"]>("set", "delete", "add"), value: nasty }), weight: 1 },
    ...targeted.map(([re, values]) => ({
      arbitrary: fc.record({ path: fc.constantFrom(...all.filter((p) => re.test(p.join(".")))), op: fc.constant<Mutation["op"]>("set"), value: fc.oneof({ arbitrary: values, weight: 3 }, { arbitrary: nasty, weight: 1 }) }),
      weight: 2,
    })),
  );
  return fc.array(one, { minLength: 1, maxLength: 2 });
}

function mutate(base: unknown, ms: Mutation[]): any {
  const out = structuredClone(base) as any;
  for (const m of ms) {
    let parent = out;
    for (const k of m.path.slice(0, -1)) {
      if (parent === null || typeof parent !== "object") break;
      parent = parent[k];
    }
    if (parent === null || typeof parent !== "object") continue;
    const key = m.path.at(-1)!;
    if (m.op === "set") parent[key] = m.value;
    else if (m.op === "delete") Array.isArray(parent) ? parent.splice(Number(key), 1) : delete parent[key];
    else if (!Array.isArray(parent)) parent[`unknown_${String(key)}`] = m.value;
  }
  return out;
}

function documented(r: RunResult, what: string): void {
  expect(DOCUMENTED, `${what}\n${r.stderr}`).toContain(r.code);
  expect(r.stderr, what).not.toMatch(/internal error|\n\s+at |triggerUncaughtException|Node\.js v\d/);
  if (r.code !== 0 && r.code !== 3) expect(r.stderr, what).toMatch(/^agentbak: \S/);
}

describe("[I] property: no bad input reaches an internal error", () => {
  // hooks and credential checks run commands, and a repository URL would reach the network: those keys are not mutated
  it("[I] mutated configs: backup answers with a documented exit code and a message, never a stack", async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        mutations(baseConfig, /^(hooks|restore|repository)(\.|$)/, [
          [/^databases\.0\.path$/, pathLike],
          [/^workspace\.path$/, pathLike],
          [/^files\.0$/, pathLike],
          [/^credentials\.\d\.ref$/, pathLike.map((p) => `file:${p}`)],
          [/^(agent\.(id|tenant)|databases\.0\.name)$/, fc.oneof(fc.string(), fc.constantFrom("..", "../x", "a/b", "state", "x".repeat(65)))],
          [/^cursors\.\w+\.sql$|^openOperations\.sql$/, fc.constantFrom("SELECT load_extension('x')", "DROP TABLE messages", "SELECT", "SELECT * FROM nowhere", "PRAGMA writable_schema=1")],
        ]),
        async (ms) => {
        const file = join(t.dir, `fuzz-${n++}.json`);
        writeFileSync(file, JSON.stringify(mutate(baseConfig, ms)));
        documented(await t.run(["backup", "-c", file]), JSON.stringify(ms).slice(0, 300));
        },
      ),
      { numRuns: 40 },
    );
  });

  it("[T7] mutated signed manifests: restore answers with a documented exit code and a message, never a stack", async () => {
    let n = 0;
    const place = fc.constantFrom(".agentbak", ".agentbak/SUSPENDED", ".agentbak-raw/x", "state/agent.sqlite", "state/agent.sqlite-wal", "state", "workspace", "workspace/x", "memory", "db/state.sqlite", "files/x", "../x", "a/./b", "");
    await fc.assert(
      fc.asyncProperty(
        mutations(baseManifest, /^signer\.fingerprint$/, [
          [/^components\.\d+\.(target|path)$|^workspace\.path$/, place],
          [/^components\.\d+\.(kind|name)$/, fc.constantFrom("sqlite", "sqlite-delta", "file", "git-bundle", "git-patch", "state", "workspace")],
          [/^components\.\d+\.size$|^payload\.tar_size$|^sequence$|^schema_version$/, fc.constantFrom(0, 1, 5.5, -1, 2 ** 31, 2 ** 40, 2 ** 53 - 1, 2 ** 53)],
          [/^(agent_id|tenant|snapshot_id)$/, fc.constantFrom("..", "../x", "a/b", "x".repeat(65), "")],
        ]),
        async (ms) => {
          const out = join(t.tmp, `fuzz-${n}.agentbak`);
          const m = mutate(baseManifest, ms);
          if (m.payload === null || typeof m.payload !== "object" || Array.isArray(m.payload)) m.payload = {}; // craft fills in the digest and sizes
          await craft({ baseManifest: m, payloadAge: payload, tarSize: typeof m.payload.tar_size === "number" ? m.payload.tar_size : 0, keyFile: join(t.home, "signing-key"), out });
          const r = await t.run(["restore", out, "--target", join(t.tmp, `fuzz-target-${n++}`), "--yes", "--identity", t.identity, "--allow-rollback", "--allow-other-agent"]);
          documented(r, JSON.stringify(ms).slice(0, 300));
        },
      ),
      { numRuns: 40 },
    );
  });
});
