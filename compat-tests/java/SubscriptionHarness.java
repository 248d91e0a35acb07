// One Java KafkaConsumer (group.protocol=consumer, kafka-clients 4.x) whose subscription a test changes
// while it runs, for compat-tests/test_regex_subscriptions.py.
//
// Compiled with KafkaHarness.java (whose JSON printer it uses) against kafka-clients 4.x only:
// SubscriptionPattern, the regex the broker resolves (KIP-848), first appeared in 4.0.
//
//   SubscriptionHarness <bootstrap> <group> [<consumer property>=<value> ...]
//
// Commands come on stdin, one a line, and are applied between two polls of the one consumer thread:
//   pattern <regex>          subscribe(new SubscriptionPattern(regex)): the broker resolves the regex
//   topics <name>[,<name>]   subscribe(List.of(names))
//   unsubscribe              unsubscribe(): the member leaves the group
//   exit                     close the consumer and exit 0 (so does the end of stdin)
// Output, one JSON object a line:
//   {"type": "applied", "command": "<line>"}                 once the call returned
//   {"type": "assignment", "partitions": ["topic:p", ...]}   whenever assignment() changes (sorted)
//   {"type": "poll-error", "class": ..., "message": ...}     poll() threw; the loop goes on
//   {"type": "error", ...}                                   a command failed; exits 1

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.LinkedBlockingQueue;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class SubscriptionHarness {
    static final Duration POLL = Duration.ofMillis(100);
    static final String END = "exit";

    public static void main(String[] args) {
        int status;
        try {
            if (args.length < 2) {
                throw new IllegalArgumentException("usage: SubscriptionHarness <bootstrap> <group> [key=value ...]");
            }
            status = run(consumerConfig(args), commands());
        } catch (Throwable failure) {
            KafkaHarness.emit(KafkaHarness.error(failure));
            status = 1;
        }
        System.out.flush();
        System.exit(status);
    }

    static Properties consumerConfig(String[] args) {
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        config.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        config.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (String override : Arrays.asList(args).subList(2, args.length)) {
            String[] pair = override.split("=", 2);
            config.put(pair[0], pair[1]);
        }
        return config;
    }

    /** stdin lines, read on a daemon thread so the consumer thread never blocks on them. */
    static LinkedBlockingQueue<String> commands() {
        LinkedBlockingQueue<String> queue = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line = in.readLine(); line != null; line = in.readLine()) {
                    queue.add(line.strip());
                }
            } catch (Exception ignored) {
                // stdin closed under us: treated as its end
            }
            queue.add(END);
        }, "stdin");
        reader.setDaemon(true);
        reader.start();
        return queue;
    }

    static int run(Properties config, LinkedBlockingQueue<String> commands) {
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            List<String> reported = null;
            boolean subscribed = false;  // subscription() stays empty while a pattern matches nothing
            while (true) {
                String command = commands.poll();
                if (command != null) {
                    if (command.equals(END)) {
                        return 0;
                    }
                    subscribed = apply(consumer, command);
                    KafkaHarness.emit(KafkaHarness.object("type", "applied", "command", command));
                }
                if (!subscribed) {
                    sleep();  // poll() refuses a consumer without a subscription
                } else {
                    pollOnce(consumer);
                }
                List<String> assignment = sorted(consumer);
                if (!assignment.equals(reported)) {
                    reported = assignment;
                    KafkaHarness.emit(KafkaHarness.object("type", "assignment", "partitions", assignment));
                }
            }
        }
    }

    /** Runs one command; whether the consumer is subscribed afterwards. */
    static boolean apply(KafkaConsumer<byte[], byte[]> consumer, String command) {
        String[] parts = command.split(" ", 2);
        switch (parts[0]) {
            case "pattern":
                consumer.subscribe(new SubscriptionPattern(parts[1]));
                return true;
            case "topics":
                consumer.subscribe(Arrays.asList(parts[1].split(",")));
                return true;
            case "unsubscribe":
                consumer.unsubscribe();
                return false;
            default:
                throw new IllegalArgumentException("unknown command " + command);
        }
    }

    static void pollOnce(KafkaConsumer<byte[], byte[]> consumer) {
        try {
            consumer.poll(POLL);
        } catch (RuntimeException failure) {
            Map<String, Object> line = KafkaHarness.error(failure);
            line.put("type", "poll-error");
            KafkaHarness.emit(line);
        }
    }

    static List<String> sorted(KafkaConsumer<byte[], byte[]> consumer) {
        TreeSet<String> partitions = new TreeSet<>();
        for (TopicPartition partition : consumer.assignment()) {
            partitions.add(partition.topic() + ":" + partition.partition());
        }
        return new ArrayList<>(partitions);
    }

    static void sleep() {
        try {
            Thread.sleep(POLL.toMillis());
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
