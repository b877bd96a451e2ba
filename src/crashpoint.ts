/**
 * Crash testing of agentbak itself: when AGENTBAK_CRASH_STEP names a step,
 * the process kills itself with SIGKILL there (no cleanup runs), so tests can
 * prove that every step leaves the repository and targets consistent.
 * AGENTBAK_INTERRUPT_STEP sends SIGINT there instead (main's cleanup runs);
 * AGENTBAK_PAUSE_STEP stops the process there (SIGSTOP) until a test sends
 * SIGCONT: a process stalled while it holds a lease.
 */
export function crashStep(name: string): void {
  if (process.env.AGENTBAK_CRASH_STEP === name) process.kill(process.pid, "SIGKILL");
  // an operator's Ctrl-C at exactly this step (handled at the next await, as a real one would be)
  if (process.env.AGENTBAK_INTERRUPT_STEP === name) process.kill(process.pid, "SIGINT");
  if (process.env.AGENTBAK_PAUSE_STEP === name) process.kill(process.pid, "SIGSTOP");
}

/** The instrumented steps, in order, per command. */
export const CRASH_STEPS = {
  backup: ["locked", "snapshotted", "payload-written", "bundle-written", "sequence-reserved", "published", "recorded"],
  restore: ["locked", "extracted", "generation-reserved", "markers-written", "placed", "checked", "trusted-state-raised"],
} as const;
