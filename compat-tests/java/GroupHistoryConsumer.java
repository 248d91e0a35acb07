import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One member of a consumer group for the failover tests: subscribes to a topic from the earliest offset, and
 * after every poll commits what it read (commitSync), slowly (pause_ms between polls), so that a test can move
 * the group coordinator while it reads and commits. Stops once it has read `expected` distinct values.
 *
 *   GroupHistoryConsumer bootstrap topic group expected pause_ms
 *
 * Lines: {"partition": p, "offset": o, "value": v} per record, {"committed": {"p": offset, ...}} per commit,
 * {"done": true} at the end. Any exception ends the run with a non-zero status and a stack trace on stderr.
 */
public final class GroupHistoryConsumer {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            throw new IllegalArgumentException("usage: GroupHistoryConsumer bootstrap topic group expected pause_ms");
        }
        int expected = Integer.parseInt(args[3]);
        long pauseMs = Long.parseLong(args[4]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args[2]);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + 180_000;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]));
            while (seen.size() < expected) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("read " + seen.size() + " of " + expected + " values in time");
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    String value = new String(record.value(), StandardCharsets.UTF_8);
                    seen.add(value);
                    System.out.println("{\"partition\": " + record.partition() + ", \"offset\": " + record.offset()
                            + ", \"value\": \"" + value + "\"}");
                }
                Map<TopicPartition, OffsetAndMetadata> positions = new java.util.HashMap<>();
                for (TopicPartition partition : consumer.assignment()) {
                    positions.put(partition, new OffsetAndMetadata(consumer.position(partition)));
                }
                consumer.commitSync(positions);
                StringBuilder line = new StringBuilder("{\"committed\": {");
                String separator = "";
                for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : positions.entrySet()) {
                    line.append(separator).append('"').append(entry.getKey().partition()).append("\": ")
                            .append(entry.getValue().offset());
                    separator = ", ";
                }
                System.out.println(line.append("}}"));
                System.out.flush();
                Thread.sleep(pauseMs);
            }
        }
        System.out.println("{\"done\": true}");
        System.out.flush();
    }
}
