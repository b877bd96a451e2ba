/**
 * zod/mini for the config, manifest, recovery and drill spec schemas, with
 * zod's English messages (zod/mini ships without them; formatIssues prints
 * them). Kept out of errors.ts, which every worker thread loads: they parse no
 * schema and need not load zod (~100 KB of code compiled at each start).
 */
import { config } from "zod/mini";
import en from "zod/v4/locales/en.js";

config(en());

export * from "zod/mini";
