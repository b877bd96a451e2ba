/** Worker-thread entry: decrypts and decompresses one payload for the calling thread (bundle/plaintext.ts). */
import { parentPort } from "node:worker_threads";
import { serveWorker } from "./plaintext.js";

serveWorker(parentPort!);
