// Starts local-aws-sqs (the npm package pinned in .ci/tools) on loopback
// for starlog's tests: node sqs-server.cjs <local-aws-sqs dir> <port>.
// It prints "ready" once listening and runs until killed.
"use strict";
const [modDir, port] = process.argv.slice(2);
const { createSqsServer } = require(modDir);
createSqsServer({
  port: Number(port),
  hostname: "127.0.0.1",
  // Tests create and delete queues freely.
  emulateQueueCreationLifecycle: false,
})
  .then(() => console.log("ready"))
  .catch((err) => {
    console.error(err);
    process.exit(1);
  });
