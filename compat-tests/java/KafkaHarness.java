// A command-line harness that drives the official Java kafka-clients against a broker.
//
// compat-tests/java_harness.py compiles this file with javac at test time, against kafka-clients
// 3.9.x or 4.x as Maven resolved them (jar sets clients-3.9 and clients-4 of pom.xml beside this
// file), and runs one subcommand per JVM. Every subcommand prints one JSON object per line on
// stdout and exits non-zero on failure (after printing a {"type": "error", ...} line). Keys,
// values and header values are printed base64-encoded (null stays null), so binary data compares exactly.
//
//   produce        <bootstrap> <topic> <partition> <count> [compression] [acks]
//   consume-assign <bootstrap> <topic> <partition> <offset|earliest|latest> <count>
//   admin-create   <bootstrap> <topic> <partitions>
//   admin-describe <bootstrap> <topic>
//   list-offsets   <bootstrap> <topic> <partition> <earliest|latest|timestamp:N|max-timestamp>...
//   admin-delete   <bootstrap> <topic>
//   commit         <bootstrap> <group> <topic> <partition>:<offset>[:<metadata>]...   (commitSync, no subscription)
//   committed      <bootstrap> <group> <topic> <partition>...                           (KafkaConsumer.committed)
//   admin-groups   <bootstrap> <group>        (listConsumerGroups, describeConsumerGroups, listConsumerGroupOffsets)
//   admin-alter-offsets <bootstrap> <group> <topic> <partition>:<offset>...
//   admin-delete-groups <bootstrap> <group>...
//   list-offsets-all <bootstrap> <read_uncommitted|read_committed> <earliest|latest|timestamp:N> <topic>...
//                  (every partition of the topics in one Admin.listOffsets call, as Spark's driver does)
//   admin-list-topics <bootstrap> [internal]   (Admin.listTopics; Spark's subscribePattern)
//   spark-fetch    <bootstrap> <topic> <partition> <offset> <poll-ms>
//                  (one poll the way Spark's executors read: group.id, auto.offset.reset=none, seek)
//
// Several subcommands may share one JVM (startup costs about a second), separated by "--":
//   produce <bootstrap> t 0 10 -- consume-assign <bootstrap> t 0 earliest 10
// They run in order; the first failure ends the run with its exit status.
//
// The records `produce` sends are a fixed pattern of record index i (see record()); each
// output line carries both what was sent and the RecordMetadata the broker returned.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaHarness {
    static final long BASE_TIMESTAMP = 1_700_000_000_000L;
    static final Duration CONSUME_TIMEOUT = Duration.ofSeconds(20);

    public static void main(String[] args) {
        int status;
        try {
            status = run(args);
        } catch (Throwable failure) {
            emit(error(failure));
            status = 1;
        }
        System.out.flush();
        System.exit(status);  // the clients' non-daemon threads must not keep the JVM alive
    }

    static int run(String[] args) throws Exception {
        List<String> group = new ArrayList<>();
        for (String arg : args) {
            if (!arg.equals("--")) {
                group.add(arg);
                continue;
            }
            int status = runOne(group.toArray(new String[0]));
            if (status != 0) {
                return status;
            }
            group.clear();
        }
        return runOne(group.toArray(new String[0]));
    }

    static int runOne(String[] args) throws Exception {
        if (args.length < 1) {
            throw new IllegalArgumentException("usage: KafkaHarness <subcommand> <bootstrap> ... [-- <subcommand> ...]");
        }
        String command = args[0];
        switch (command) {
            case "produce":
                need(args, 5, 7);
                return produce(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                        args.length > 5 ? args[5] : "none", args.length > 6 ? args[6] : null);
            case "consume-assign":
                need(args, 6, 6);
                return consumeAssign(args[1], args[2], Integer.parseInt(args[3]), args[4],
                        Integer.parseInt(args[5]));
            case "admin-create":
                need(args, 4, 4);
                return adminCreate(args[1], args[2], Integer.parseInt(args[3]));
            case "admin-describe":
                need(args, 3, 3);
                return adminDescribe(args[1], args[2]);
            case "admin-authorized-operations":
                need(args, 4, 4);
                return adminAuthorizedOperations(args[1], args[2], args[3]);
            case "list-offsets":
                need(args, 5, Integer.MAX_VALUE);
                return listOffsets(args[1], args[2], Integer.parseInt(args[3]),
                        List.of(args).subList(4, args.length));
            case "admin-delete":
                need(args, 3, 3);
                return adminDelete(args[1], args[2]);
            case "commit":
                need(args, 5, Integer.MAX_VALUE);
                return commit(args[1], args[2], args[3], List.of(args).subList(4, args.length));
            case "committed":
                need(args, 5, Integer.MAX_VALUE);
                return committed(args[1], args[2], args[3], List.of(args).subList(4, args.length));
            case "admin-groups":
                need(args, 3, 3);
                return adminGroups(args[1], args[2]);
            case "admin-alter-offsets":
                need(args, 5, Integer.MAX_VALUE);
                return adminAlterOffsets(args[1], args[2], args[3], List.of(args).subList(4, args.length));
            case "admin-delete-groups":
                need(args, 3, Integer.MAX_VALUE);
                return adminDeleteGroups(args[1], List.of(args).subList(2, args.length));
            case "list-offsets-all":
                need(args, 5, Integer.MAX_VALUE);
                return listOffsetsAll(args[1], args[2], args[3], List.of(args).subList(4, args.length));
            case "admin-list-topics":
                need(args, 2, 3);
                return adminListTopics(args[1], args.length > 2 && args[2].equals("internal"));
            case "spark-fetch":
                need(args, 6, 6);
                return sparkFetch(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                        Long.parseLong(args[5]));
            default:
                throw new IllegalArgumentException("unknown subcommand " + command);
        }
    }

    static void need(String[] args, int min, int max) {
        if (args.length < min || args.length > max) {
            throw new IllegalArgumentException(args[0] + ": expected " + (min - 1)
                    + (max == min ? "" : max == Integer.MAX_VALUE ? "+" : "-" + (max - 1))
                    + " arguments, got " + (args.length - 1));
        }
    }

    // ---- producer ------------------------------------------------------------------------

    /** Record i of the fixed pattern: null key every 10th, null value every 10th (offset by 7),
     *  values of varying length with a non-UTF-8 byte, three headers (one repeated key, one
     *  null value), and explicit CreateTime timestamps one second apart. */
    static ProducerRecord<byte[], byte[]> record(String topic, int partition, int i) {
        byte[] key = i % 10 == 9 ? null : utf8("key-" + i);
        byte[] value = null;
        if (i % 10 != 7) {
            byte[] text = utf8(("value-" + i + ";").repeat(i % 4 + 1));
            value = new byte[text.length + 1];
            System.arraycopy(text, 0, value, 0, text.length);
            value[text.length] = (byte) (0x80 + i % 128);
        }
        RecordHeaders headers = new RecordHeaders();
        headers.add("h", utf8(Integer.toString(i)));
        headers.add("bin", new byte[] {0, (byte) i, (byte) 0xff});
        headers.add("h", utf8("again"));
        headers.add("empty", null);
        return new ProducerRecord<>(topic, partition, BASE_TIMESTAMP + 1000L * i, key, value, headers);
    }

    static int produce(String bootstrap, String topic, int partition, int count, String compression, String acks)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        if (acks != null) {
            props.put(ProducerConfig.ACKS_CONFIG, acks);
        }
        // Fail within the test's patience instead of the 60-120 s defaults.
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<byte[], byte[]> record = record(topic, partition, i);
                sent.add(record);
                futures.add(producer.send(record));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata metadata = futures.get(i).get();
                ProducerRecord<byte[], byte[]> record = sent.get(i);
                Map<String, Object> line = object("type", "record_metadata", "index", i);
                line.put("topic", metadata.topic());
                line.put("partition", metadata.partition());
                line.put("offset", metadata.hasOffset() ? metadata.offset() : null);
                line.put("timestamp", metadata.hasTimestamp() ? metadata.timestamp() : null);
                line.put("sent_timestamp", record.timestamp());
                line.put("key", record.key());
                line.put("value", record.value());
                line.put("headers", headers(record.headers()));
                emit(line);
            }
        }
        return 0;
    }

    // ---- consumer ------------------------------------------------------------------------

    static int consumeAssign(String bootstrap, String topic, int partition, String from, int count) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);  // no group.id: no coordinator
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        TopicPartition tp = new TopicPartition(topic, partition);
        int received = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            switch (from) {
                case "earliest":
                    consumer.seekToBeginning(List.of(tp));
                    break;
                case "latest":
                    consumer.seekToEnd(List.of(tp));
                    break;
                default:
                    consumer.seek(tp, Long.parseLong(from));
            }
            long start = consumer.position(tp);
            emit(object("type", "start", "position", start));
            long deadline = System.nanoTime() + CONSUME_TIMEOUT.toNanos();
            while (received < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200)).records(tp)) {
                    if (received == count) {
                        break;
                    }
                    Map<String, Object> line = object("type", "record", "partition", r.partition());
                    line.put("offset", r.offset());
                    line.put("timestamp", r.timestamp());
                    line.put("timestamp_type", r.timestampType().name);
                    line.put("leader_epoch", r.leaderEpoch().orElse(null));
                    line.put("key", r.key());
                    line.put("value", r.value());
                    line.put("headers", headers(r.headers()));
                    emit(line);
                    received++;
                }
            }
            Map<String, Object> end = object("type", "end", "received", received);
            end.put("position", consumer.position(tp));
            emit(end);
        }
        if (received < count) {
            emit(object("type", "error", "class", "Timeout",
                    "message", "received " + received + " of " + count + " records in " + CONSUME_TIMEOUT));
            return 2;
        }
        return 0;
    }

    // ---- admin ---------------------------------------------------------------------------

    static Admin admin(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        return Admin.create(props);
    }

    static int adminCreate(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            CreateTopicsResult result = admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)));
            result.all().get();
            Map<String, Object> line = object("type", "created", "topic", topic);
            line.put("topic_id", result.topicId(topic).get().toString());
            line.put("partitions", result.numPartitions(topic).get());
            line.put("replication_factor", result.replicationFactor(topic).get());
            emit(line);
        }
        return 0;
    }

    static int adminDescribe(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> partitions = new ArrayList<>();
            for (TopicPartitionInfo info : description.partitions()) {
                Map<String, Object> p = object("partition", info.partition());
                p.put("leader", info.leader() == null ? null : info.leader().id());
                p.put("replicas", nodeIds(info.replicas()));
                p.put("isr", nodeIds(info.isr()));
                partitions.add(p);
            }
            Map<String, Object> line = object("type", "topic_description", "topic", description.name());
            line.put("internal", description.isInternal());
            line.put("topic_id", description.topicId().toString());
            line.put("partitions", partitions);
            emit(line);
        }
        return 0;
    }

    /** The operations Admin reports as authorized for a topic, the cluster and a group (KIP-430). */
    static int adminAuthorizedOperations(String bootstrap, String topic, String group) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            TopicDescription description = admin.describeTopics(List.of(topic),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames().get().get(topic);
            emitOperations("topic", description.authorizedOperations());
            emitOperations("cluster", admin.describeCluster(
                    new DescribeClusterOptions().includeAuthorizedOperations(true)).authorizedOperations().get());
            ConsumerGroupDescription groupDescription = admin.describeConsumerGroups(List.of(group),
                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).describedGroups().get(group).get();
            emitOperations("group", groupDescription.authorizedOperations());
        }
        return 0;
    }

    static void emitOperations(String resource, Set<AclOperation> operations) {
        List<Object> names = new ArrayList<>();
        if (operations != null) {
            operations.stream().map(AclOperation::name).sorted().forEach(names::add);
        }
        Map<String, Object> line = object("type", "authorized_operations", "resource", resource);
        line.put("operations", operations == null ? null : names);
        emit(line);
    }

    static int listOffsets(String bootstrap, String topic, int partition, List<String> specs) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = admin(bootstrap)) {
            for (String spec : specs) {  // one request per spec: a map cannot hold a partition twice
                ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, offsetSpec(spec))).partitionResult(tp).get();
                Map<String, Object> line = object("type", "offset", "spec", spec);
                line.put("offset", info.offset());
                line.put("timestamp", info.timestamp());
                line.put("leader_epoch", info.leaderEpoch().orElse(null));
                emit(line);
            }
        }
        return 0;
    }

    static OffsetSpec offsetSpec(String spec) {
        if (spec.equals("earliest")) {
            return OffsetSpec.earliest();
        }
        if (spec.equals("latest")) {
            return OffsetSpec.latest();
        }
        if (spec.equals("max-timestamp")) {
            return OffsetSpec.maxTimestamp();
        }
        if (spec.startsWith("timestamp:")) {
            return OffsetSpec.forTimestamp(Long.parseLong(spec.substring("timestamp:".length())));
        }
        throw new IllegalArgumentException("unknown offset spec " + spec);
    }

    static int adminDelete(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.deleteTopics(List.of(topic)).all().get();
            emit(object("type", "deleted", "topic", topic));
        }
        return 0;
    }

    // ---- consumer groups: committed offsets and group admin ----------------------------------

    static KafkaConsumer<byte[], byte[]> groupConsumer(String bootstrap, String group) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        return new KafkaConsumer<>(props);
    }

    /** "partition:offset[:metadata]" specs of one topic, in the order given. */
    static Map<TopicPartition, OffsetAndMetadata> offsetSpecs(String topic, List<String> specs) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
        for (String spec : specs) {
            String[] parts = spec.split(":", 3);
            offsets.put(new TopicPartition(topic, Integer.parseInt(parts[0])),
                    new OffsetAndMetadata(Long.parseLong(parts[1]), parts.length > 2 ? parts[2] : ""));
        }
        return offsets;
    }

    static int commit(String bootstrap, String group, String topic, List<String> specs) {
        Map<TopicPartition, OffsetAndMetadata> offsets = offsetSpecs(topic, specs);
        try (KafkaConsumer<byte[], byte[]> consumer = groupConsumer(bootstrap, group)) {
            consumer.commitSync(offsets);  // outside any generation: a "simple" commit
        }
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : offsets.entrySet()) {
            emit(object("type", "commit", "partition", entry.getKey().partition(), "offset", entry.getValue().offset()));
        }
        return 0;
    }

    static int committed(String bootstrap, String group, String topic, List<String> partitions) {
        List<TopicPartition> wanted = new ArrayList<>();
        for (String partition : partitions) {
            wanted.add(new TopicPartition(topic, Integer.parseInt(partition)));
        }
        try (KafkaConsumer<byte[], byte[]> consumer = groupConsumer(bootstrap, group)) {
            Map<TopicPartition, OffsetAndMetadata> found = consumer.committed(Set.copyOf(wanted));
            for (TopicPartition tp : wanted) {
                OffsetAndMetadata committed = found.get(tp);
                Map<String, Object> line = object("type", "committed", "group", group, "partition", tp.partition());
                line.put("offset", committed == null ? null : committed.offset());
                line.put("metadata", committed == null ? null : committed.metadata());
                emit(line);
            }
        }
        return 0;
    }

    @SuppressWarnings("deprecation")  // ConsumerGroupListing.state() and ConsumerGroupDescription.state() in 3.9
    static int adminGroups(String bootstrap, String group) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get()) {
                Map<String, Object> line = object("type", "group_listing", "group", listing.groupId());
                line.put("state", listing.state().map(Object::toString).orElse(null));
                line.put("simple", listing.isSimpleConsumerGroup());
                emit(line);
            }
            ConsumerGroupDescription description =
                    admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
            List<Object> members = new ArrayList<>();
            for (MemberDescription member : description.members()) {
                Map<String, Object> m = object("member_id", member.consumerId(), "client_id", member.clientId());
                m.put("instance_id", member.groupInstanceId().orElse(null));
                List<Object> partitions = new ArrayList<>();
                member.assignment().topicPartitions().stream().map(TopicPartition::partition).sorted()
                        .forEach(partitions::add);
                m.put("partitions", partitions);
                members.add(m);
            }
            Map<String, Object> line = object("type", "group_description", "group", description.groupId());
            line.put("state", description.state().toString());
            line.put("assignor", description.partitionAssignor());
            line.put("members", members);
            emit(line);
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            offsets.keySet().stream()
                    .sorted(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition))
                    .forEach(tp -> {
                        Map<String, Object> offset = object("type", "group_offset", "topic", tp.topic());
                        offset.put("partition", tp.partition());
                        offset.put("offset", offsets.get(tp).offset());
                        offset.put("metadata", offsets.get(tp).metadata());
                        emit(offset);
                    });
        }
        return 0;
    }

    static int adminAlterOffsets(String bootstrap, String group, String topic, List<String> specs) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.alterConsumerGroupOffsets(group, offsetSpecs(topic, specs)).all().get();
        }
        emit(object("type", "altered", "group", group));
        return 0;
    }

    static int adminDeleteGroups(String bootstrap, List<String> groups) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.deleteConsumerGroups(groups).all().get();
        }
        for (String group : groups) {
            emit(object("type", "deleted_group", "group", group));
        }
        return 0;
    }

    // ---- what Spark's Kafka connector calls (spark-sql-kafka-0-10) -----------------------------

    /** Spark's driver resolves earliest/latest/timestamp offsets of every partition it reads with one
     *  Admin.listOffsets call under the consumer's isolation.level (read_uncommitted by default). */
    static int listOffsetsAll(String bootstrap, String isolation, String spec, List<String> topics) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            Map<TopicPartition, OffsetSpec> query = new LinkedHashMap<>();
            for (TopicDescription description : admin.describeTopics(topics).allTopicNames().get().values()) {
                for (TopicPartitionInfo info : description.partitions()) {
                    query.put(new TopicPartition(description.name(), info.partition()), offsetSpec(spec));
                }
            }
            ListOffsetsOptions options = new ListOffsetsOptions(IsolationLevel.valueOf(isolation.toUpperCase()));
            Map<TopicPartition, ListOffsetsResultInfo> found = admin.listOffsets(query, options).all().get();
            List<TopicPartition> partitions = new ArrayList<>(found.keySet());
            partitions.sort(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition));
            for (TopicPartition tp : partitions) {
                Map<String, Object> line = object("type", "offset", "topic", tp.topic(), "partition", tp.partition());
                line.put("spec", spec);
                line.put("isolation", isolation);
                line.put("offset", found.get(tp).offset());
                line.put("timestamp", found.get(tp).timestamp());
                emit(line);
            }
        }
        return 0;
    }

    static int adminListTopics(String bootstrap, boolean internal) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<TopicListing> listings = new ArrayList<>(
                    admin.listTopics(new ListTopicsOptions().listInternal(internal)).listings().get());
            listings.sort(Comparator.comparing(TopicListing::name));
            for (TopicListing listing : listings) {
                Map<String, Object> line = object("type", "topic_listing", "topic", listing.name());
                line.put("internal", listing.isInternal());
                line.put("topic_id", listing.topicId().toString());
                emit(line);
            }
        }
        return 0;
    }

    /** One read the way Spark's executors make it (KafkaDataConsumer): a consumer with a group.id that
     *  never joins, auto.offset.reset=none, assign + seek + one poll, then the partition's available
     *  range from seekToBeginning/seekToEnd + position. An offset below the log start offset makes the
     *  poll throw OffsetOutOfRangeException, which is how failOnDataLoss notices deleted records. */
    static int sparkFetch(String bootstrap, String topic, int partition, long offset, long pollMs) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, "spark-kafka-source-compat-executor");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, offset);
            try {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(pollMs)).records(tp)) {
                    Map<String, Object> line = object("type", "record", "partition", r.partition());
                    line.put("offset", r.offset());
                    line.put("timestamp", r.timestamp());
                    line.put("key", r.key());
                    line.put("value", r.value());
                    line.put("headers", headers(r.headers()));
                    emit(line);
                }
                emit(object("type", "polled", "position", consumer.position(tp)));
            } catch (OffsetOutOfRangeException outOfRange) {
                emit(object("type", "offset_out_of_range", "offset", outOfRange.offsetOutOfRangePartitions().get(tp)));
            }
            consumer.seekToBeginning(List.of(tp));
            long earliest = consumer.position(tp);
            consumer.seekToEnd(List.of(tp));
            emit(object("type", "available_range", "earliest", earliest, "latest", consumer.position(tp)));
        }
        return 0;
    }

    // ---- output --------------------------------------------------------------------------

    static List<Object> nodeIds(List<Node> nodes) {
        List<Object> ids = new ArrayList<>();
        for (Node node : nodes) {
            ids.add(node.id());
        }
        return ids;
    }

    static List<Object> headers(Iterable<Header> headers) {
        List<Object> pairs = new ArrayList<>();
        for (Header header : headers) {
            List<Object> pair = new ArrayList<>();
            pair.add(header.key());
            pair.add(header.value());
            pairs.add(pair);
        }
        return pairs;
    }

    static Map<String, Object> error(Throwable failure) {
        Throwable root = failure instanceof ExecutionException && failure.getCause() != null
                ? failure.getCause() : failure;
        Map<String, Object> line = object("type", "error", "class", root.getClass().getName());
        line.put("message", String.valueOf(root.getMessage()));
        List<Object> causes = new ArrayList<>();
        for (Throwable cause = root.getCause(); cause != null && causes.size() < 5; cause = cause.getCause()) {
            causes.add(cause.getClass().getName() + ": " + cause.getMessage());
        }
        line.put("causes", causes);
        return line;
    }

    static Map<String, Object> object(Object... keysAndValues) {
        Map<String, Object> map = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            map.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return map;
    }

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    static void emit(Map<String, Object> line) {
        StringBuilder out = new StringBuilder();
        json(out, line);
        System.out.println(out);
    }

    static void json(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            quote(out, (String) value);
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof byte[]) {
            quote(out, Base64.getEncoder().encodeToString((byte[]) value));
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                if (!first) {
                    out.append(", ");
                }
                first = false;
                quote(out, (String) entry.getKey());
                out.append(": ");
                json(out, entry.getValue());
            }
            out.append('}');
        } else if (value instanceof Collection) {
            out.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) value) {
                if (!first) {
                    out.append(", ");
                }
                first = false;
                json(out, item);
            }
            out.append(']');
        } else {
            quote(out, value.toString());
        }
    }

    static void quote(StringBuilder out, String text) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }
}
