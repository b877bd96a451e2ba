import * as z from "zod/mini"; globalThis.z = z;
