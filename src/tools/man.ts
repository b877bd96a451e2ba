/**
 * `npm run build`, last step: writes the man page, dist/agentbak.1, from the
 * command table (the same text `agentbak man` prints); package.json's "man"
 * field ships it, so a global install puts it where `man agentbak` finds it.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildProgram } from "../cli.js";
import { manPage } from "../ui/help.js";
import { ROOT, TOOL_VERSION } from "../version.js";

writeFileSync(join(ROOT, "dist", "agentbak.1"), manPage(buildProgram({ code: 0 }), TOOL_VERSION));
