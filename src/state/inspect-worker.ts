/** Worker-thread entry for inspectSnapshot: one snapshot per message, for as long as the process keeps the thread. */
import { parentPort } from "node:worker_threads";
import { AgentbakError } from "../errors.js";
import { inspectSnapshot, type InspectInput } from "./inspect.js";

parentPort!.on("message", (input: InspectInput) => {
  try {
    parentPort!.postMessage({ ok: true, result: inspectSnapshot(input) });
  } catch (e) {
    parentPort!.postMessage({ ok: false, code: e instanceof AgentbakError ? e.code : 1, message: (e as Error).message });
  }
});
