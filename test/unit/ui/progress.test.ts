// The progress reporter on a fake clock: at most one update per 100 ms, the
// rate over a moving window, the ETA, the JSON line shape and the clearing.
import { describe, expect, it } from "vitest";
import { CLEAR, clock, eta, line, rate, Reporter } from "../../../src/ui/progress.js";

function fake(mode: "tty" | "json", columns = 200) {
  let t = 1_000_000;
  const out: string[] = [];
  const r = new Reporter({ mode, write: (s) => out.push(s), now: () => t, columns: () => columns });
  return { r, out, tick: (ms: number) => (t += ms) };
}

describe("throttle", () => {
  it("draws at most once per 100 ms however many chunks arrive, and always when a stage starts", () => {
    const { r, out, tick } = fake("json");
    const add = r.stage("writing payload", 10_000);
    expect(out).toHaveLength(1); // the start
    for (let i = 0; i < 100; i++) {
      add(10); // 100 chunks in 99 ms: no update
      tick(1);
    }
    expect(out).toHaveLength(1);
    tick(1);
    add(0);
    expect(out).toHaveLength(2);
    expect(JSON.parse(out[1]!)).toEqual({ stage: "writing payload", bytes: 1000, total: 10_000 });
    // 1 s of chunks every 10 ms: 10 updates, not 100
    for (let i = 0; i < 100; i++) {
      tick(10);
      add(10);
    }
    expect(out).toHaveLength(12);
  });
});

describe("rate and ETA", () => {
  it("the rate is bytes over the window's span; the ETA is what is left at that rate", () => {
    expect(rate([[0, 0]])).toBe(0);
    expect(rate([[0, 0], [2000, 4_000_000]])).toBe(2_000_000);
    expect(eta(4_000_000, 10_000_000, 2_000_000)).toBe(3);
    expect(eta(5, 10, 0)).toBeUndefined();
    expect(eta(5, undefined, 100)).toBeUndefined();
    expect(clock(75)).toBe("1:15");
    expect(clock(3725)).toBe("1:02:05");
  });

  it("looks back only WINDOW_MS: a stall long ago no longer slows the rate", () => {
    const { r, out, tick } = fake("tty");
    const add = r.stage("decrypting payload", 100 << 20);
    tick(10_000); // ten seconds of nothing
    add(0);
    for (let i = 0; i < 60; i++) {
      tick(100);
      add(1 << 20); // 10 MiB/s from here on
    }
    const last = out.at(-1)!;
    expect(last).toMatch(/10 MiB\/s/);
    // 60 MiB of 100 done at 10 MiB/s: 4 s left
    expect(last).toMatch(/60 MiB \/ 100 MiB {2}60% {2}10 MiB\/s {2}ETA 0:04$/);
  });
});

describe("terminal line", () => {
  it("is rewritten in place, cut to the terminal's width, and cleared on stop", () => {
    const { r, out, tick } = fake("tty", 30);
    const add = r.stage("writing payload", 2048);
    tick(200);
    add(1024);
    for (const s of out) {
      expect(s.startsWith(CLEAR)).toBe(true);
      expect(s.length - CLEAR.length).toBeLessThanOrEqual(29);
      expect(s).not.toContain("\n");
    }
    r.stop(true);
    expect(out.at(-1)).toBe("\r\x1b[2K");
  });

  it("escapes a stage name: it can not move the cursor", () => {
    expect(line({ name: "evil\x1b[2Jname", bytes: 0, total: undefined }, 0)).toBe("evil\\x1b[2Jname");
  });

  it("shows bytes without a total when the total is unknown, and nothing is cleared that was never drawn", () => {
    expect(line({ name: "capturing workspace", bytes: 3 << 20, total: undefined }, 0)).toBe("capturing workspace  3.0 MiB");
    const { r, out } = fake("json");
    r.stop(true);
    expect(out).toEqual([]);
  });
});

describe("JSON lines", () => {
  it("one object per line: stage, bytes, total (null when unknown); a last line per stage with done", () => {
    const { r, out, tick } = fake("json");
    const a = r.stage("checking payload digest", 500);
    tick(150);
    a(500);
    const b = r.stage("capturing workspace");
    tick(150);
    b(7);
    r.stop(true);
    expect(out.map((l) => JSON.parse(l))).toEqual([
      { stage: "checking payload digest", bytes: 0, total: 500 },
      { stage: "checking payload digest", bytes: 500, total: 500 },
      { stage: "checking payload digest", bytes: 500, total: 500, done: true },
      { stage: "capturing workspace", bytes: 0, total: null },
      { stage: "capturing workspace", bytes: 7, total: null },
      { stage: "capturing workspace", bytes: 7, total: null, done: true },
    ]);
    for (const l of out) expect(l.endsWith("\n") && l.indexOf("\n") === l.length - 1).toBe(true);
  });

  it("a failed or interrupted run leaves its stage unfinished (no done line), and a stale counter draws nothing", () => {
    const { r, out, tick } = fake("json");
    const a = r.stage("writing payload", 100);
    r.stop(false);
    tick(500);
    a(50);
    expect(out.map((l) => JSON.parse(l))).toEqual([{ stage: "writing payload", bytes: 0, total: 100 }]);
  });
});
