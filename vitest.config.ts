// Two projects: every test against a local-folder repository, and the tests
// that exercise a repository again against an S3 bucket on the Ceph RADOS
// Gateway that .ci/run starts (AGENTBAK_TEST_S3_ENDPOINT). Without a gateway
// the second project is left out, and says so.
import { defineConfig } from "vitest/config";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
/** the test files whose subject is a repository: they run against every store */
const REPOSITORY_TESTS = ["backup", "restore", "incremental", "crash", "drill", "repository", "catalog", "catalog-status", "fleet-drill", "serve-host", "chunks"].map((n) => `test/e2e/${n}.test.ts`);
/** the file that kills the RADOS Gateway in the middle of an upload */
const OUTAGE_TEST = "test/e2e/s3.test.ts";
if (!endpoint) console.warn("repository tests against S3 skipped: AGENTBAK_TEST_S3_ENDPOINT is not set (.ci/run starts a Ceph RADOS Gateway and sets it)");

export default defineConfig({
  test: {
    // set here, not only on the command line: projects inherit the root config, not CLI flags
    testTimeout: 180_000,
    hookTimeout: 180_000,
    projects: [
      { extends: true, test: { name: "local", include: ["test/**/*.test.ts"], exclude: [OUTAGE_TEST], env: { AGENTBAK_TEST_STORE: "local" } } },
      // it kills the shared gateway and starts it again: run after every other file, never beside one that uses it
      { extends: true, test: { name: "s3-outage", include: [OUTAGE_TEST], env: { AGENTBAK_TEST_STORE: "local" }, sequence: { groupOrder: 1 } } },
      ...(endpoint
        ? [{ extends: true, test: { name: "s3", include: REPOSITORY_TESTS, env: { AGENTBAK_TEST_STORE: "s3", AGENTBAK_S3_ENDPOINT: endpoint, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" } } }]
        : []),
    ],
  },
});
