// Java kafka-clients consumers in one group, for compat-tests/test_consumer_protocol.py.
//
// Compiled together with KafkaHarness.java (whose JSON printer it uses) against kafka-clients 3.9.x or 4.x
// as Maven resolved them (compat-tests/java_harness.py); one run is one JVM:
//
//   group-consume <bootstrap> <topic> <group> <members> <expected> <protocol>
//
// starts <members> KafkaConsumers (group.protocol=<protocol>: consumer or classic), each on
// its own thread, subscribed to <topic> from the earliest offset with auto-commit off. They
// poll until together they have read <expected> distinct records and their assignments have
// stayed the same for SETTLE; then each commits its position (commitSync) and closes. Output,
// printed after every consumer has closed:
//   {"type": "record", "member": i, "partition": p, "offset": o, "value": base64}
//   {"type": "assignment", "member": i, "partitions": [...], "generation": member epoch}
// where the partitions are those the harness saw settled (for SETTLE) when it decided to stop.
// A run that does not get there within DEADLINE exits non-zero with an error line.

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ConsumerGroupHarness {
    static final Duration DEADLINE = Duration.ofSeconds(60);
    static final Duration SETTLE = Duration.ofSeconds(2);

    public static void main(String[] args) {
        int status;
        try {
            if (args.length != 7 || !args[0].equals("group-consume")) {
                throw new IllegalArgumentException(
                        "usage: group-consume <bootstrap> <topic> <group> <members> <expected> <protocol>");
            }
            status = groupConsume(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]),
                    args[6]);
        } catch (Throwable failure) {
            KafkaHarness.emit(KafkaHarness.error(failure));
            status = 1;
        }
        System.out.flush();
        System.exit(status);
    }

    /** One group member on its own thread; the main thread only reads its published state. */
    static final class Member implements Runnable {
        final int index;
        final KafkaConsumer<byte[], byte[]> consumer;
        final String topic;
        final AtomicBoolean stop;
        final Map<String, ConsumerRecord<byte[], byte[]>> records = new ConcurrentHashMap<>();
        final AtomicReference<Set<Integer>> assignment = new AtomicReference<>(Set.of());
        volatile int generation = -1;
        volatile Throwable failure;

        Member(int index, Properties config, String topic, AtomicBoolean stop) {
            this.index = index;
            this.consumer = new KafkaConsumer<>(config);
            this.topic = topic;
            this.stop = stop;
        }

        @Override
        public void run() {
            try {
                consumer.subscribe(List.of(topic));
                while (!stop.get()) {
                    for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(100))) {
                        records.put(record.partition() + "@" + record.offset(), record);
                    }
                    Set<Integer> partitions = new TreeSet<>();
                    for (TopicPartition partition : consumer.assignment()) {
                        partitions.add(partition.partition());
                    }
                    assignment.set(partitions);
                    generation = consumer.groupMetadata().generationId();
                }
                consumer.commitSync(Duration.ofSeconds(15));
            } catch (Throwable error) {
                failure = error;
            } finally {
                consumer.close(Duration.ofSeconds(10));
            }
        }
    }

    static int groupConsume(String bootstrap, String topic, String group, int members, int expected,
                            String protocol) throws Exception {
        AtomicBoolean stop = new AtomicBoolean(false);
        List<Member> consumers = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            Properties config = new Properties();
            config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            config.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
            config.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + i);
            config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            Member member = new Member(i, config, topic, stop);
            consumers.add(member);
            Thread thread = new Thread(member, "member-" + i);
            threads.add(thread);
            thread.start();
        }
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        List<Set<Integer>> last = snapshot(consumers);
        long stableSince = System.nanoTime();
        boolean done = false;
        while (System.nanoTime() < deadline && !failed(consumers)) {
            Thread.sleep(100);
            List<Set<Integer>> now = snapshot(consumers);
            if (!now.equals(last)) {
                last = now;
                stableSince = System.nanoTime();
            }
            if (distinct(consumers) >= expected && System.nanoTime() - stableSince >= SETTLE.toNanos()) {
                // reported as settled here: once stop is set, a member that leaves first hands its
                // partitions to one still polling, which is the protocol working, not the split
                done = true;
                break;
            }
        }
        stop.set(true);
        for (Thread thread : threads) {
            thread.join(30_000);
        }
        for (Member member : consumers) {
            if (member.failure != null) {
                throw new RuntimeException("member " + member.index + " failed", member.failure);
            }
        }
        for (Member member : consumers) {
            for (ConsumerRecord<byte[], byte[]> record : member.records.values()) {
                Map<String, Object> line = new LinkedHashMap<>();
                line.put("type", "record");
                line.put("member", member.index);
                line.put("partition", record.partition());
                line.put("offset", record.offset());
                line.put("value", record.value());
                KafkaHarness.emit(line);
            }
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("type", "assignment");
            line.put("member", member.index);
            line.put("partitions", new ArrayList<>(last.get(member.index)));
            line.put("generation", member.generation);
            KafkaHarness.emit(line);
        }
        if (!done) {
            throw new IllegalStateException("read " + distinct(consumers) + " of " + expected
                    + " records, assignments " + snapshot(consumers) + ", within " + DEADLINE.getSeconds() + " s");
        }
        return 0;
    }

    static List<Set<Integer>> snapshot(List<Member> members) {
        List<Set<Integer>> assignments = new ArrayList<>();
        for (Member member : members) {
            assignments.add(member.assignment.get());
        }
        return assignments;
    }

    static int distinct(List<Member> members) {
        Set<String> seen = new TreeSet<>();
        for (Member member : members) {
            seen.addAll(member.records.keySet());
        }
        return seen.size();
    }

    static boolean failed(List<Member> members) {
        for (Member member : members) {
            if (member.failure != null) {
                return true;
            }
        }
        return false;
    }
}
