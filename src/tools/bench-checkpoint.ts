/**
 * `npm run bench -- --only checkpoint`: a small agent (10 MiB database,
 * workspace, memory files) takes incremental checkpoints through a running
 * `agentbak serve` (POST /v1/backups), a few rows written before each as a
 * sub-task would; the median is printed beside `agentbak backup --incremental`
 * for the same work.
 */
import { execa } from "execa";
import { readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { bin, fmt, measure, median, root } from "./bench-measure.js";

/** Checkpoints of a small agent through the running server, and the CLI's time for the same backup. */
export async function checkpointBench(tmp: string, env: Record<string, string>, recipient: string, runs: number) {
  const agent = join(tmp, "agent-small");
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(agent, { recipient, sizeMb: 10 });
  // every checkpoint measured is an incremental (no full one falls due among them)
  const cfgFile = join(agent, "agentbak.json");
  writeFileSync(cfgFile, JSON.stringify({ ...JSON.parse(readFileSync(cfgFile, "utf8")), incremental: { enabled: false, fullEvery: 100 } }, null, 2));
  await execa("node", [bin, "init"], { cwd: agent, env });
  const Database = (await import("better-sqlite3")).default;
  // a sub-task's worth of new state before each checkpoint
  const work = (n: number) => {
    const db = new Database(join(agent, "state", "agent.sqlite"));
    const ins = db.prepare("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (?, 'assistant', ?, ?)");
    db.transaction(() => {
      for (let i = 0; i < 20; i++) ins.run(`bench-${n}`, `step ${n}.${i}: checked the invoice and drafted a reply`, new Date().toISOString());
    })();
    db.close();
  };
  const { token } = JSON.parse(String((await execa("node", [bin, "token", "create", "--tenant", "acme", "--agent", "billing-agent", "--tier", "checkpoint", "--json"], { cwd: agent, env })).stdout));
  const server = execa("node", [bin, "serve", "--listen", "127.0.0.1:0"], { cwd: agent, env, reject: false });
  let log = "";
  const url = await new Promise<string>((resolve, reject) => {
    server.stderr!.on("data", (d: Buffer) => {
      log += d;
      const m = log.match(/agent interface on (http:\/\/\S+)/);
      if (m) resolve(m[1]!);
    });
    void server.then(() => reject(new Error(`server exited: ${log}`)));
  });
  const checkpoint = async (body: unknown) => {
    const t0 = performance.now();
    const r = await fetch(`${url}/v1/backups`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    const receipt = (await r.json()) as { kind?: string };
    if (r.status !== 201) throw new Error(`checkpoint answered ${r.status}: ${JSON.stringify(receipt)}`);
    return { seconds: (performance.now() - t0) / 1000, kind: receipt.kind };
  };
  try {
    const first = await checkpoint({}); // the full snapshot the incrementals build on; the server warms up
    const server_s: number[] = [];
    for (let i = 0; i < runs; i++) {
      work(i);
      const c = await checkpoint({ incremental: true });
      if (c.kind !== "incremental") throw new Error(`checkpoint ${i} was ${c.kind}`);
      server_s.push(c.seconds);
    }
    const cli_s: number[] = [];
    for (let i = 0; i < Math.min(runs, 5); i++) {
      work(runs + i);
      cli_s.push((await measure(["node", bin, "backup", "--incremental"], { cwd: agent, env })).seconds);
    }
    const full_s: number[] = [];
    for (let i = 0; i < 3; i++) full_s.push((await measure(["node", bin, "backup", "--no-incremental"], { cwd: agent, env })).seconds);
    await execa("node", [bin, "backup", "--incremental", "--skip-if-unchanged"], { cwd: agent, env });
    const unchanged_s = (await measure(["node", bin, "backup", "--incremental", "--skip-if-unchanged"], { cwd: agent, env })).seconds;
    // `snapshots` over 200 real snapshots of this agent (checkpoints through the server until there are 200)
    const count = async () => (JSON.parse(String((await execa("node", [bin, "snapshots", "--json"], { cwd: agent, env })).stdout)) as unknown[]).length;
    for (let n = await count(), i = 0; n < 200; n++, i++) {
      work(1000 + i);
      await checkpoint({ incremental: true });
    }
    const listed = await count();
    rmSync(join(env.AGENTBAK_HOME!, "cache"), { recursive: true, force: true });
    const snapshots_cold = (await measure(["node", bin, "snapshots"], { cwd: agent, env })).seconds;
    const warm: number[] = [];
    for (let i = 0; i < 3; i++) warm.push((await measure(["node", bin, "snapshots"], { cwd: agent, env })).seconds);
    const snapshots_warm = median(warm);
    const node_startup = (await measure(["node", "-e", "0"])).seconds;
    return {
      cli_full_median_seconds: Number(fmt(median(full_s), 3)),
      cli_unchanged_seconds: Number(fmt(unchanged_s, 3)),
      snapshots_listed: listed,
      snapshots_cold_seconds: Number(fmt(snapshots_cold, 3)),
      snapshots_warm_seconds: Number(fmt(snapshots_warm, 3)),
      node_startup_seconds: Number(fmt(node_startup, 3)),
      database_mib: Number(fmt(statSync(join(agent, "state", "agent.sqlite")).size / 2 ** 20, 1)),
      first_full_seconds: Number(fmt(first.seconds, 3)),
      server_median_seconds: Number(fmt(median(server_s), 3)),
      server_runs: server_s.map((x) => Number(fmt(x, 3))),
      cli_median_seconds: Number(fmt(median(cli_s), 3)),
      cli_runs: cli_s.map((x) => Number(fmt(x, 3))),
      goal_seconds: 0.3,
    };
  } finally {
    server.kill("SIGTERM");
    await server;
  }
}

export function checkpointRows(c: Awaited<ReturnType<typeof checkpointBench>>): string[] {
  return [
    `checkpoint via server   median ${c.server_median_seconds} s over ${c.server_runs.length} incrementals (POST /v1/backups; ${c.database_mib} MiB db, workspace; goal <= ${c.goal_seconds} s)`,
    `same backup via CLI     median ${c.cli_median_seconds} s over ${c.cli_runs.length} (agentbak backup --incremental, a new process each; goal <= 0.6 s)`,
    `small agent CLI full    median ${c.cli_full_median_seconds} s over 3 (agentbak backup --no-incremental; goal <= 1.0 s); nothing changed ${c.cli_unchanged_seconds} s`,
    `snapshots (${c.snapshots_listed} listed)  ${c.snapshots_warm_seconds} s warm, ${c.snapshots_cold_seconds} s with no header cache (goal <= 0.3 s; node -e 0 takes ${c.node_startup_seconds} s)`,
  ];
}

