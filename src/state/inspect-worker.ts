/** Worker-thread entry for inspectSnapshot. */
import { parentPort, workerData } from "node:worker_threads";
import { AgentbakError } from "../errors.js";
import { inspectSnapshot, type InspectInput } from "./inspect.js";

try {
  parentPort!.postMessage({ ok: true, result: inspectSnapshot(workerData as InspectInput) });
} catch (e) {
  parentPort!.postMessage({ ok: false, code: e instanceof AgentbakError ? e.code : 1, message: (e as Error).message });
}
