// Creates a bucket on the test gateway (AGENTBAK_TEST_S3_ENDPOINT).
export async function makeBucket(name: string, objectLock = false): Promise<void> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
  const { S3Client, CreateBucketCommand } = await import("@aws-sdk/client-s3");
  const c = new S3Client({ endpoint: process.env.AGENTBAK_TEST_S3_ENDPOINT, region: "us-east-1", forcePathStyle: true });
  await c.send(new CreateBucketCommand({ Bucket: name, ...(objectLock ? { ObjectLockEnabledForBucket: true } : {}) }));
}
