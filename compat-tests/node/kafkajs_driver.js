#!/usr/bin/env node
// Drives kafkajs against a broker for compat-tests/test_kafkajs.py.
//
// Input: one JSON script on stdin (or as the first argument):
//   {"brokers": ["127.0.0.1:9092"], "steps": [{"op": "produce", ...}, {"op": "consume", ...}]}
// Output: one JSON line on stdout, {"results": [...]}, one result per step, in order. A step that
// throws gives {"ok": false, "error": {...}} and the script goes on, so one failing scenario in a
// batch does not hide the others. kafkajs's own log lines go to stderr.
//
// Bytes cross the boundary base64-encoded (null stays null): message keys and values, and header
// values. Headers are lists of [name, value] pairs; kafkajs itself holds them as an object whose
// repeated names become arrays, so pairs come back grouped by name in first-seen order.
//
// Operations (fields in brackets are optional):
//   codecs                                   which compression codecs can be loaded
//   describeCluster                          brokers, controller, cluster id
//   fetchTopicMetadata  topics               partitions with leader, replicas, isr
//   listTopics
//   createTopics        topics [validateOnly]   topics: [{topic, numPartitions, configEntries}]
//   deleteTopics        topics
//   fetchTopicOffsets   topic                low/high watermark per partition
//   fetchTopicOffsetsByTimestamp  topic timestamp
//   fetchOffsets        groupId topics       committed offsets of a group
//   produce             topic messages [compression acks idempotent allowAutoTopicCreation retry]
//                       messages: [{key, value, headers, timestamp, partition}]
//   consume             topics groupId count [fromBeginning autoCommit commit timeoutMs whenFetching]
//                       reads `count` messages through a consumer group; `commit` commits what it
//                       read (autoCommit off), `whenFetching` is a list of steps run once the
//                       consumer has completed its first fetch (its start offsets are resolved)
//   parallel            steps                runs sub-steps concurrently

'use strict'

const { Kafka, CompressionTypes, CompressionCodecs, Partitioners, logLevel } = require('kafkajs')

// Codec packages register with kafkajs when loaded. @kafkajs/zstd does not build against current Node
// headers (its cppzst 2.0.6 binding is compiled as C++ older than 17; tried on Node 20), so zstd comes
// from @sensejs/kafkajs-zstd-support (zstd-napi), whose CommonJS build is broken: it is loaded as an ES module.
const CODEC_PACKAGES = {
  snappy: ['kafkajs-snappy', async name => { CompressionCodecs[CompressionTypes.Snappy] = require(name) }],
  lz4: ['kafkajs-lz4', async name => { CompressionCodecs[CompressionTypes.LZ4] = new (require(name))().codec }],
  zstd: ['@sensejs/kafkajs-zstd-support', async name => { await import(name) }],
}
const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}
const FAST_RETRY = { initialRetryTime: 100, retries: 3 } // fail inside the test's patience

// Registers the codec for `name`; returns null, or why it cannot be had.
async function loadCodec (name) {
  if (name === 'none' || name === 'gzip') return null // built into kafkajs
  const entry = CODEC_PACKAGES[name]
  if (!entry) throw new Error(`unknown compression ${name}`)
  const [packageName, register] = entry
  try {
    await register(packageName)
  } catch (failure) {
    return `${packageName} cannot be loaded: ${failure.message.split('\n')[0]}`
  }
  return null
}

const decode = encoded => (encoded == null ? null : Buffer.from(encoded, 'base64'))
const encode = bytes => (bytes == null ? null : Buffer.from(bytes).toString('base64'))

function headersObject (pairs) {
  const headers = {}
  for (const [name, value] of pairs || []) {
    const bytes = decode(value)
    if (!(name in headers)) headers[name] = bytes
    else if (Array.isArray(headers[name])) headers[name].push(bytes)
    else headers[name] = [headers[name], bytes]
  }
  return headers
}

function headerPairs (headers) {
  const pairs = []
  for (const [name, value] of Object.entries(headers || {})) {
    for (const one of Array.isArray(value) ? value : [value]) pairs.push([name, encode(one)])
  }
  return pairs
}

function describeError (failure) {
  const error = { name: failure.name, message: failure.message }
  for (const field of ['type', 'code', 'retriable']) {
    if (failure[field] !== undefined) error[field] = failure[field]
  }
  if (failure.errors) error.errors = failure.errors.map(describeError)
  const cause = failure.cause || failure.originalError
  if (cause && cause !== failure) error.cause = describeError(cause)
  return error
}

function stderrLogger () {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

class Driver {
  constructor (brokers) {
    this.kafka = new Kafka({
      clientId: 'kbroker-compat',
      brokers,
      connectionTimeout: 3000,
      requestTimeout: 10000,
      retry: FAST_RETRY,
      logLevel: logLevel.WARN,
      logCreator: stderrLogger,
    })
  }

  async run (step) {
    const operation = this[`op_${step.op}`]
    if (!operation) return { ok: false, error: { name: 'UnknownOperation', message: step.op } }
    try {
      return { ok: true, ...(await operation.call(this, step)) }
    } catch (failure) {
      return { ok: false, error: describeError(failure) }
    }
  }

  async withAdmin (use) {
    const admin = this.kafka.admin({ retry: FAST_RETRY })
    await admin.connect()
    try {
      return await use(admin)
    } finally {
      await admin.disconnect()
    }
  }

  async op_codecs () {
    const unavailable = {}
    for (const name of Object.keys(COMPRESSION)) {
      const reason = await loadCodec(name)
      if (reason) unavailable[name] = reason
    }
    return { unavailable }
  }

  async op_parallel ({ steps }) {
    return { results: await Promise.all(steps.map(step => this.run(step))) }
  }

  async op_describeCluster () {
    return this.withAdmin(admin => admin.describeCluster())
  }

  async op_fetchTopicMetadata ({ topics }) {
    return this.withAdmin(admin => admin.fetchTopicMetadata({ topics }))
  }

  async op_listTopics () {
    return { topics: await this.withAdmin(admin => admin.listTopics()) }
  }

  async op_createTopics ({ topics, validateOnly = false }) {
    const created = await this.withAdmin(admin => admin.createTopics({ topics, validateOnly, timeout: 10000 }))
    return { created }
  }

  async op_deleteTopics ({ topics }) {
    await this.withAdmin(admin => admin.deleteTopics({ topics, timeout: 10000 }))
    return {}
  }

  async op_fetchTopicOffsets ({ topic }) {
    return { partitions: await this.withAdmin(admin => admin.fetchTopicOffsets(topic)) }
  }

  async op_fetchTopicOffsetsByTimestamp ({ topic, timestamp }) {
    return { partitions: await this.withAdmin(admin => admin.fetchTopicOffsetsByTimestamp(topic, timestamp)) }
  }

  async op_fetchOffsets ({ groupId, topics }) {
    return { topics: await this.withAdmin(admin => admin.fetchOffsets({ groupId, topics })) }
  }

  async op_produce (step) {
    const { topic, messages, compression = 'none', acks = -1, idempotent = false } = step
    const unavailable = await loadCodec(compression)
    if (unavailable) throw new Error(unavailable)
    const producer = this.kafka.producer({
      allowAutoTopicCreation: step.allowAutoTopicCreation ?? true,
      idempotent,
      retry: step.retry || FAST_RETRY,
      createPartitioner: Partitioners.DefaultPartitioner,
    })
    await producer.connect()
    try {
      const metadata = await producer.send({
        topic,
        acks,
        compression: COMPRESSION[compression],
        messages: messages.map(message => ({
          key: decode(message.key),
          value: decode(message.value),
          headers: headersObject(message.headers),
          ...(message.timestamp == null ? {} : { timestamp: String(message.timestamp) }),
          ...(message.partition == null ? {} : { partition: message.partition }),
        })),
      })
      return { metadata }
    } finally {
      await producer.disconnect()
    }
  }

  async op_consume (step) {
    const { topics, groupId, count, fromBeginning = true, autoCommit = true, commit = false } = step
    for (const name of Object.keys(COMPRESSION)) await loadCodec(name) // read whatever codec the topic holds
    const consumer = this.kafka.consumer({ groupId, maxWaitTimeInMs: 100, retry: FAST_RETRY })
    const received = []
    const events = []
    let finish
    const enough = new Promise(resolve => { finish = resolve })
    let whenFetching = null
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      events.push({ event: 'group_join', memberAssignment: payload.memberAssignment })
    })
    consumer.on(consumer.events.FETCH, () => {
      if (whenFetching === null && step.whenFetching) {
        whenFetching = Promise.all(step.whenFetching.map(sub => this.run(sub)))
      }
    })
    await consumer.connect()
    try {
      await consumer.subscribe({ topics, fromBeginning })
      await consumer.run({
        autoCommit: autoCommit && !commit,
        eachMessage: async ({ topic, partition, message }) => {
          if (received.length >= count) return // the rest of a batch past `count`: neither kept nor committed
          received.push({
            topic,
            partition,
            offset: Number(message.offset),
            timestamp: Number(message.timestamp),
            key: encode(message.key),
            value: encode(message.value),
            headers: headerPairs(message.headers),
          })
          if (received.length === count) finish()
        },
      })
      let timer
      const timedOut = await Promise.race([
        enough.then(() => false),
        new Promise(resolve => { timer = setTimeout(() => resolve(true), step.timeoutMs || 15000) }),
      ])
      clearTimeout(timer)
      if (commit) {
        consumer.pause(topics.map(topic => ({ topic })))
        await consumer.commitOffsets(nextOffsets(received)) // only while running: stop() drops the group
      }
      await consumer.stop()
      const fetchSteps = whenFetching ? await whenFetching : []
      return { messages: received, timedOut, events, whenFetching: fetchSteps }
    } finally {
      await consumer.disconnect()
    }
  }
}

// The offsets to commit after `received`: one past the last message read of each partition.
function nextOffsets (received) {
  const next = new Map()
  for (const { topic, partition, offset } of received) next.set(`${topic}\u0000${partition}`, { topic, partition, offset })
  return [...next.values()].map(({ topic, partition, offset }) => ({ topic, partition, offset: String(offset + 1) }))
}

async function readScript () {
  if (process.argv[2]) return JSON.parse(process.argv[2])
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

// Exits once stdout has taken all of `line`: a pipe takes 64 KiB at a time, and process.exit()
// would drop the rest (exiting at all is needed, as kafkajs may leave timers behind).
function finish (line, status) {
  process.stdout.write(JSON.stringify(line) + '\n', () => process.exit(status))
}

async function main () {
  const script = await readScript()
  const driver = new Driver(script.brokers || [])
  const results = []
  for (const step of script.steps) results.push(await driver.run(step))
  return results
}

main().then(
  results => finish({ results }, 0),
  failure => finish({ fatal: describeError(failure) }, 1)
)
