/**
 * Cleanup on interruption: stages register what to remove if the process is
 * stopped by SIGINT/SIGTERM; main runs these before it exits. (kill -9 can not
 * be caught: leftovers carry the owner's pid and are swept by the next run.)
 */
const tasks = new Set<() => void>();

/** Registers `fn`; returns a function that unregisters it. */
export function onInterrupt(fn: () => void): () => void {
  tasks.add(fn);
  return () => tasks.delete(fn);
}

/** Runs every registered cleanup, ignoring individual failures. */
export function runInterruptCleanups(): void {
  for (const fn of tasks) {
    try {
      fn();
    } catch {
      /* best effort while exiting */
    }
  }
  tasks.clear();
}
