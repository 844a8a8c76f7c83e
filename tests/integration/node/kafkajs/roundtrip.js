// KafkaJS against a Kafka listener: an idempotent producer (acks=all, no compression
// and gzip, the codecs KafkaJS ships), a consumer group reading from the beginning and
// committing, a second member resuming from the commits, and the admin client's offsets.
//
//   node roundtrip.js BOOTSTRAP TOPIC GROUP RECORDS
//
// Prints one JSON object of what each step saw; the test
// (tests/integration/test_kafka_node_client.py) checks it. Exits 1 when a client fails.
"use strict";

const { Kafka, CompressionTypes, logLevel } = require("kafkajs");

const READ_TIMEOUT_MS = 60000;

function values(round, n) {
  return Array.from({ length: n }, (_, i) => `${round}-${i}`);
}

async function produce(kafka, topic, vals) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const half = Math.ceil(vals.length / 2);
    for (const [codec, part] of [[CompressionTypes.None, vals.slice(0, half)],
                                 [CompressionTypes.GZIP, vals.slice(half)]]) {
      await producer.send({ topic, acks: -1, compression: codec,
                            messages: part.map((v) => ({ key: v, value: v })) });
    }
  } finally {
    await producer.disconnect();
  }
}

// Joins group and reads until want records arrived (or the timeout); commits what it read.
async function consume(kafka, topic, group, want) {
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000 });
  const got = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    let done;
    const finished = new Promise((resolve) => { done = resolve; });
    await consumer.run({
      autoCommit: true,
      eachMessage: async ({ message }) => {
        got.push(message.value.toString());
        if (got.length >= want) done();
      },
    });
    let timer;
    await Promise.race([finished, new Promise((resolve) => { timer = setTimeout(resolve, READ_TIMEOUT_MS); })]);
    clearTimeout(timer); // a pending timer would keep the process alive past its work
  } finally {
    await consumer.disconnect(); // commits the offsets read, then leaves the group
  }
  return got;
}

async function main() {
  const [bootstrap, topic, group, records] = process.argv.slice(2);
  const n = Number.parseInt(records, 10);
  if (!bootstrap || !topic || !group || !(n > 0)) {
    console.error("usage: node roundtrip.js BOOTSTRAP TOPIC GROUP RECORDS");
    process.exit(2);
  }
  const kafka = new Kafka({ clientId: "llog-test-kafkajs", brokers: [bootstrap], logLevel: logLevel.WARN });
  const report = { produced: values("one", n), produced_two: values("two", 10) };
  await produce(kafka, topic, report.produced);
  report.group = await consume(kafka, topic, group, n);
  await produce(kafka, topic, report.produced_two);
  report.resumed = await consume(kafka, topic, group, report.produced_two.length);
  const admin = kafka.admin();
  await admin.connect();
  try {
    const ends = await admin.fetchTopicOffsets(topic);
    const committed = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    report.end_offsets = ends.reduce((sum, p) => sum + Number(p.high), 0);
    report.committed = committed[0].partitions.reduce((sum, p) => sum + Math.max(Number(p.offset), 0), 0);
  } finally {
    await admin.disconnect();
  }
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((err) => {
  console.error(`kafkajs: ${err.stack || err}`);
  process.exit(1);
});
