/** The tool version, from package.json. */
import { readFileSync } from "node:fs";

export const TOOL_VERSION: string = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version;
