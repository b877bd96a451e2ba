/** `agentbak config-schema`: the JSON Schema of agentbak.json, the one published for editors (init writes it beside the config). */
import { configJsonSchema } from "../config/schema.js";

/** The JSON Schema of agentbak.json (as input: defaults may be left out). */
export const configSchema = (): unknown => configJsonSchema();
