/** Parses durations like 30s, 5m, 2h, 7d, 1w into milliseconds (the base module src/duration.ts, where the host file reads them too). */
export { parseDuration } from "../duration.js";
