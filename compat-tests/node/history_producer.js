#!/usr/bin/env node
// An acks=all kafkajs producer for tests/cluster/test_failover_history.py: sends "prefix-i"
// (i = 0..count-1) to a topic, each intervalMs after the previous one was answered, and prints one JSON line
// per record as kafkajs answers, the same lines as compat-tests/java/HistoryProducer.java:
//   {"sent": v} before each send, {"value": v, "partition": p, "offset": o} or {"value": v, "error": e},
//   and {"done": true} at the end.
//
//   node history_producer.js bootstrap topic count intervalMs prefix

'use strict'

const { Kafka, Partitioners, logLevel } = require('kafkajs')

async function main ([bootstrap, topic, count, intervalMs, prefix]) {
  const kafka = new Kafka({ clientId: 'history-producer', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING,
    // ride through a failover: a session timeout, an election, a metadata refresh
    retry: { retries: 30, initialRetryTime: 200, maxRetryTime: 2000 } })
  // Not idempotent: kafkajs 2.2.4's idempotence (documented as experimental) loses records across a leader
  // kill, on Apache Kafka 3.9 as on kbroker. A batch retried after the failover can go to another partition
  // with its old sequence number, and a later batch then takes that sequence number again, so the broker
  // answers it as a duplicate (with the earlier batch's offset) and never writes it. Without idempotence,
  // a retry may write a record twice, but nothing acknowledged is lost.
  const producer = kafka.producer({ idempotent: false, maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  // one send at a time: kafkajs keeps no order between concurrent send() calls, and its idempotence (marked
  // experimental) can reuse a sequence number across them
  for (let i = 0; i < Number(count); i++) {
    const value = `${prefix}-${i}`
    console.log(JSON.stringify({ sent: value }))
    try {
      const [answer] = await producer.send({ topic, acks: -1, messages: [{ value }] })
      console.log(JSON.stringify({ value, partition: answer.partition, offset: Number(answer.baseOffset) }))
    } catch (error) {
      console.log(JSON.stringify({ value, error: error.name || String(error) }))
    }
    await new Promise(resolve => setTimeout(resolve, Number(intervalMs)))
  }
  await producer.disconnect()
  console.log(JSON.stringify({ done: true }))
}

main(process.argv.slice(2)).catch(error => { console.error(error); process.exit(1) })
