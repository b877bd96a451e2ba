import { z } from "zod"; globalThis.z = z;
