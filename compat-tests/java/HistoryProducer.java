import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * An idempotent acks=all producer for the failover tests: sends "prefix-i" (i = 0..count-1) to a topic, one
 * every interval_ms, and prints one JSON line per record as its callback fires, so a checker gets the full
 * history of sends and acknowledgements while brokers are killed under it.
 *
 *   HistoryProducer bootstrap topic count interval_ms prefix
 *
 * Lines: {"sent": v} before each send, {"value": v, "partition": p, "offset": o} or {"value": v, "error": e},
 * and {"done": true} once every callback has fired.
 */
public final class HistoryProducer {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            throw new IllegalArgumentException("usage: HistoryProducer bootstrap topic count interval_ms prefix");
        }
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        long intervalMs = Long.parseLong(args[3]);
        String prefix = args[4];
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        // long enough to ride through a failover: a session timeout, an election, a metadata refresh
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                String value = prefix + "-" + i;
                emit("{\"sent\": \"" + value + "\"}");
                producer.send(new ProducerRecord<>(topic, value.getBytes(StandardCharsets.UTF_8)),
                        (metadata, error) -> emit(error == null
                                ? "{\"value\": \"" + value + "\", \"partition\": " + metadata.partition()
                                        + ", \"offset\": " + metadata.offset() + "}"
                                : "{\"value\": \"" + value + "\", \"error\": \"" + error.getClass().getSimpleName()
                                        + "\"}"));
                if (intervalMs > 0) {
                    Thread.sleep(intervalMs);
                }
            }
            producer.flush();
        }
        emit("{\"done\": true}");
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
