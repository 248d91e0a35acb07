// A Kafka Streams word count with processing.guarantee=exactly_once_v2, for compat-tests/test_kafka_streams.py;
// compiled against kafka-streams 4.x (jar set kafka-4 of pom.xml).
//
//   StreamsWordCount <bootstrap> <application-id> <input-topic> <output-topic> <state-dir>
//
// Lines of the input are split on spaces; the output carries each word's running count (String key, Long
// value). Prints {"type": "state", "state": "<KafkaStreams.State>"} on every state change and runs until it is
// killed or its stdin closes (then it closes Streams cleanly).

import java.util.Arrays;
import java.util.Properties;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "10000");
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "1000");
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
                .count()
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"type\": \"state\", \"state\": \"" + now + "\"}");
            System.out.flush();
        });
        streams.start();
        while (System.in.read() != -1) {
            // run until stdin closes
        }
        streams.close();
    }
}
