/**
 * The PostgreSQL source's server-free part (state/sources/postgres.ts): the
 * newest installed PostgreSQL's programs are used (pg_dump must be at least
 * as new as the server), and check() parses an archive with pg_restore
 * --list, 13 when it can not. Capture, restore and lock waits against a real
 * server: test/e2e/source-postgres.test.ts.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { pgBin, postgresDriver } from "../../../../src/state/sources/postgres.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-pg-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const installed = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").filter((v) => /^\d+$/.test(v)).map(Number).sort((a, b) => b - a) : [];

describe("postgres source", () => {
  it("pgBin: the newest /usr/lib/postgresql/N/bin that has the program, else the bare name for PATH", () => {
    if (installed.length) expect(pgBin("pg_restore")).toBe(`/usr/lib/postgresql/${installed[0]}/bin/pg_restore`);
    expect(pgBin("no-such-program")).toBe("no-such-program");
  });

  it.skipIf(!installed.length)("check: a file pg_restore can not read is 13 naming the source", async () => {
    const f = join(dir, "dump");
    writeFileSync(f, "this is not a pg_dump archive");
    const e = await postgresDriver.check("crm", [{ path: "sources/crm/dump.pgdump", file: f, records: { "public.t": 1 } }]).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(13);
    expect((e as Error).message).toMatch(/^source crm: pg_restore can not read the dump: /);
  });
});
