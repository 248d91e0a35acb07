// Java kafka-clients transactions against a broker, for compat-tests/test_transactions_java.py; compiled with
// KafkaHarness.java (whose emit/object helpers it uses) against kafka-clients 3.9.x or 4.x.
//
//   txn-produce   <bootstrap> <topic> <partition> <transactional-id> <commit|abort>:<count>...
//                 one producer; each argument is one transaction of <count> records "<n>-<i>" (n counts the
//                 transactions from 0), committed or aborted; prints {"type": "transaction", ...} per transaction
//   read-committed <bootstrap> <topic> <partition>
//                 a read_committed consumer from the beginning up to the end offset it may read (the last stable
//                 offset); prints {"type": "values", "values": [...]} with the values as UTF-8 strings
//   describe      <bootstrap> <transactional-id>
//                 Admin.describeTransactions; prints {"type": "transaction", "state", "producer_id", "producer_epoch"}
//   fence         <bootstrap> <topic> <partition> <transactional-id>
//                 a producer opens a transaction, a second one with the same id initialises, and the first one's
//                 commit fails; prints {"type": "fenced", "exception": <class name>}

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TransactionHarness {
    static final Duration READ_TIMEOUT = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        try {
            System.exit(run(args));
        } catch (Exception e) {
            KafkaHarness.emit(KafkaHarness.object("type", "error", "exception", e.getClass().getName(),
                    "message", String.valueOf(e.getMessage())));
            System.exit(1);
        }
    }

    static int run(String[] args) throws Exception {
        switch (args[0]) {
            case "txn-produce":
                return produce(args[1], args[2], Integer.parseInt(args[3]), args[4], List.of(args).subList(5, args.length));
            case "read-committed":
                return readCommitted(args[1], args[2], Integer.parseInt(args[3]));
            case "describe":
                return describe(args[1], args[2]);
            case "fence":
                return fence(args[1], args[2], Integer.parseInt(args[3]), args[4]);
            default:
                throw new IllegalArgumentException("unknown subcommand " + args[0]);
        }
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String transactionalId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
        producer.initTransactions();
        return producer;
    }

    static int produce(String bootstrap, String topic, int partition, String transactionalId, List<String> plan) {
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, transactionalId)) {
            for (int n = 0; n < plan.size(); n++) {
                String[] step = plan.get(n).split(":");
                int count = Integer.parseInt(step[1]);
                producer.beginTransaction();
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, partition, null, (n + "-" + i).getBytes(StandardCharsets.UTF_8)));
                }
                producer.flush();
                if (step[0].equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                KafkaHarness.emit(KafkaHarness.object("type", "transaction", "index", n, "result", step[0], "count", count));
            }
        }
        return 0;
    }

    static int readCommitted(String bootstrap, String topic, int partition) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        TopicPartition tp = new TopicPartition(topic, partition);
        List<Object> values = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);  // read_committed: the last stable offset
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            while (consumer.position(tp) < end && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200)).records(tp)) {
                    values.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            Map<String, Object> line = KafkaHarness.object("type", "values", "end_offset", end);
            line.put("position", consumer.position(tp));
            line.put("values", values);
            KafkaHarness.emit(line);
        }
        return 0;
    }

    static int describe(String bootstrap, String transactionalId) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            TransactionDescription found = admin.describeTransactions(List.of(transactionalId))
                    .description(transactionalId).get();
            KafkaHarness.emit(KafkaHarness.object("type", "transaction", "state", found.state().toString(),
                    "producer_id", found.producerId(), "producer_epoch", found.producerEpoch()));
        }
        return 0;
    }

    static int fence(String bootstrap, String topic, int partition, String transactionalId) {
        KafkaProducer<byte[], byte[]> zombie = producer(bootstrap, transactionalId);
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(topic, partition, null, "zombie".getBytes(StandardCharsets.UTF_8)));
        zombie.flush();
        try (KafkaProducer<byte[], byte[]> successor = producer(bootstrap, transactionalId)) {
            String failure = null;
            try {
                zombie.commitTransaction();
            } catch (KafkaException e) {
                failure = e.getClass().getName();
            }
            zombie.close(Duration.ZERO);
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(topic, partition, null, "successor".getBytes(StandardCharsets.UTF_8)));
            successor.commitTransaction();
            KafkaHarness.emit(KafkaHarness.object("type", "fenced", "exception", failure));
        }
        return 0;
    }
}
