/**
 * Crash testing of agentbak itself: when AGENTBAK_CRASH_STEP names a step,
 * the process kills itself with SIGKILL there (no cleanup runs), so tests can
 * prove that every step leaves the repository and targets consistent.
 */
export function crashStep(name: string): void {
  if (process.env.AGENTBAK_CRASH_STEP === name) process.kill(process.pid, "SIGKILL");
}

/** The instrumented steps, in order, per command. */
export const CRASH_STEPS = {
  backup: ["locked", "snapshotted", "payload-written", "bundle-written", "sequence-reserved", "published", "recorded"],
  restore: ["locked", "extracted", "generation-reserved", "markers-written", "placed", "checked", "trusted-state-raised"],
} as const;
