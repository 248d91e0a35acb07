// Kafka 3.9's own replica placement and leader election, for tests/cluster/test_kafka_rules_differential.py.
//
// Compiled against the kafka-3.9 jar set (compat-tests/java/pom.xml); one JVM answers a whole test module.
// It reads one JSON case per line on stdin and prints one JSON answer per line on stdout, in order:
//
//   {"op": "assign", "brokers": [[id, rack|null], ...], "partitions": n, "rf": r, "fixed_start": k,
//    "start_partition": p, "seed": s|null}
//       AdminUtils.assignReplicasToBrokers. With a seed, AdminUtils' own Random is reseeded and the answer
//       names the start index and follower shift it will draw ("start", "shift"), from a twin Random.
//   {"op": "new_partitions", "topic": t, "existing": [[p, [replicas]], ...], "brokers": [...], "count": n,
//    "proposed": [[p, [replicas]], ...]|null}
//       AdminZkClient.createNewPartitionsAssignment (CreatePartitions' placement and validation).
//   {"op": "elect", "kind": "offline"|"reassign"|"preferred"|"shutdown"|"new", "replicas": [...],
//    "adding": [...], "removing": [...], "leader": l, "leader_epoch": e, "isr": [...], "recovery": 0|1,
//    "partition_epoch": v, "registered": [...], "shutting_down": [...], "offline_dirs": [...],
//    "unclean": bool, "recovery_supported": bool}
//       kafka.controller.Election over a real ControllerContext holding those brokers and that partition.
//   {"op": "scala_set", "elements": [...]}
//       the iteration order of Seq.toSet, which Kafka's error texts list sets in.
//   {"op": "long_map", "keys": [...], "initial": n}
//       the iteration order of a mutable.LongMap sized n and filled in that order, as ZkMetadataCache keeps the
//       live brokers CreateTopics places replicas over.
//
// Answers: {"assignment": [[p, [replicas]], ...]}, {"leader_and_isr": {...}|null, "recipients": [...]},
// {"elements": [...]}, or {"error": Errors name, "exception": class, "message": text} when Kafka throws.

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import kafka.api.LeaderAndIsr;
import kafka.cluster.Broker;
import kafka.controller.ControllerContext;
import kafka.controller.Election;
import kafka.controller.ElectionResult;
import kafka.controller.ReplicaAssignment;
import kafka.zk.AdminZkClient;
import org.apache.kafka.admin.AdminUtils;
import org.apache.kafka.admin.BrokerMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.metadata.LeaderRecoveryState;
import scala.Option;
import scala.Tuple2;
import scala.Tuple3;
import scala.jdk.javaapi.CollectionConverters;

public final class ClusterRulesHarness {
    static final ObjectMapper JSON = new ObjectMapper();
    static final TopicPartition PARTITION = new TopicPartition("t", 0);

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            out.write(JSON.writeValueAsString(answer(JSON.readTree(line))));
            out.newLine();
            if (!in.ready()) {
                out.flush();  // about to block on input: let the caller see every answer so far
            }
        }
        out.flush();
    }

    static ObjectNode answer(JsonNode request) {
        try {
            switch (request.get("op").asText()) {
                case "assign": return assign(request);
                case "new_partitions": return newPartitions(request);
                case "elect": return elect(request);
                case "scala_set": return scalaSet(request);
                case "long_map": return longMap(request);
                default: throw new IllegalArgumentException("unknown op " + request.get("op"));
            }
        } catch (Exception failure) {
            ObjectNode error = JSON.createObjectNode();
            error.put("error", Errors.forException(failure).name());
            error.put("exception", failure.getClass().getSimpleName());
            error.put("message", failure.getMessage());
            return error;
        }
    }

    static ObjectNode assign(JsonNode request) throws Exception {
        List<BrokerMetadata> brokers = brokers(request.get("brokers"));
        ObjectNode result = JSON.createObjectNode();
        JsonNode seed = request.get("seed");
        if (seed != null && !seed.isNull()) {
            Field field = AdminUtils.class.getDeclaredField("RAND");
            field.setAccessible(true);
            ((Random) field.get(null)).setSeed(seed.asLong());
            Random twin = new Random(seed.asLong());
            result.put("start", twin.nextInt(Math.max(1, brokers.size())));
            result.put("shift", twin.nextInt(Math.max(1, brokers.size())));
        }
        Map<Integer, List<Integer>> placed = AdminUtils.assignReplicasToBrokers(brokers,
                request.get("partitions").asInt(), request.get("rf").asInt(), request.get("fixed_start").asInt(),
                request.get("start_partition").asInt());
        result.set("assignment", assignment(placed));
        return result;
    }

    static ObjectNode newPartitions(JsonNode request) {
        scala.collection.immutable.Map<Object, ReplicaAssignment> existing = scala.collection.immutable.Map$.MODULE$.empty();
        for (JsonNode entry : request.get("existing")) {
            existing = existing.updated(entry.get(0).asInt(), ReplicaAssignment.apply(seq(entry.get(1))));
        }
        Option<scala.collection.Map<Object, scala.collection.Seq<Object>>> proposed = Option.empty();
        JsonNode given = request.get("proposed");
        if (given != null && !given.isNull()) {
            scala.collection.immutable.Map<Object, scala.collection.Seq<Object>> map = scala.collection.immutable.Map$.MODULE$.empty();
            for (JsonNode entry : given) {
                map = map.updated(entry.get(0).asInt(), seq(entry.get(1)));
            }
            proposed = Option.apply(map);
        }
        AdminZkClient admin = new AdminZkClient(null, Option.empty());
        scala.collection.Map<Object, ReplicaAssignment> placed = admin.createNewPartitionsAssignment(
                request.get("topic").asText(), existing, CollectionConverters.asScala(brokers(request.get("brokers"))).toList(),
                request.get("count").asInt(), proposed);
        Map<Integer, List<Integer>> plain = new HashMap<>();
        CollectionConverters.asJava(placed).forEach((partition, replicas) ->
                plain.put((Integer) partition, ints(replicas.replicas())));
        ObjectNode result = JSON.createObjectNode();
        result.set("assignment", assignment(plain));
        return result;
    }

    static ObjectNode elect(JsonNode request) {
        ControllerContext context = new ControllerContext();
        context.updatePartitionFullReplicaAssignment(PARTITION, ReplicaAssignment.apply(
                seq(request.get("replicas")), seq(request.get("adding")), seq(request.get("removing"))));
        Map<Broker, Object> live = new HashMap<>();
        for (JsonNode id : request.get("registered")) {
            live.put(new Broker(id.asInt(), "localhost", 9092, ListenerName.normalised("PLAINTEXT"),
                    SecurityProtocol.PLAINTEXT), (long) id.asInt());
        }
        context.setLiveBrokers(CollectionConverters.asScala(live));
        for (JsonNode id : request.get("shutting_down")) {
            context.shuttingDownBrokerIds().add(id.asInt());
        }
        Set<TopicPartition> offline = new HashSet<>();
        offline.add(PARTITION);
        for (JsonNode id : request.get("offline_dirs")) {
            context.replicasOnOfflineDirs().put(id.asInt(), CollectionConverters.asScala(offline).toSet());
        }
        LeaderAndIsr current = LeaderAndIsr.apply(request.get("leader").asInt(), request.get("leader_epoch").asInt(),
                list(request.get("isr")), LeaderRecoveryState.of((byte) request.get("recovery").asInt()),
                request.get("partition_epoch").asInt());
        String kind = request.get("kind").asText();
        if (kind.equals("new")) {
            return initialLeadership(context);
        }
        scala.collection.Seq<Tuple2<TopicPartition, LeaderAndIsr>> one =
                CollectionConverters.asScala(List.of(new Tuple2<>(PARTITION, current))).toList();
        scala.collection.Seq<ElectionResult> results;
        switch (kind) {
            case "offline": results = offline(context, current, request); break;
            case "reassign": results = Election.leaderForReassign(context, one); break;
            case "preferred": results = Election.leaderForPreferredReplica(context, one); break;
            case "shutdown": results = Election.leaderForControlledShutdown(context, one); break;
            default: throw new IllegalArgumentException("unknown election " + kind);
        }
        ElectionResult result = results.head();
        return election(result.leaderAndIsr().isEmpty() ? null : result.leaderAndIsr().get(), ints(result.liveReplicas()));
    }

    /** As ZkPartitionStateMachine.collectUncleanLeaderElectionState: unclean only when no ISR member is online. */
    static scala.collection.Seq<ElectionResult> offline(ControllerContext context, LeaderAndIsr current, JsonNode request) {
        boolean liveInSync = ints(current.isr()).stream().anyMatch(id -> context.isReplicaOnline(id, PARTITION));
        boolean unclean = request.get("unclean").asBoolean() && !liveInSync;
        Tuple3<TopicPartition, Option<LeaderAndIsr>, Object> entry = new Tuple3<>(PARTITION, Option.apply(current), unclean);
        return Election.leaderForOffline(context, request.get("recovery_supported").asBoolean(),
                CollectionConverters.asScala(List.of(entry)).toList());
    }

    /** As ZkPartitionStateMachine.initializeLeaderAndIsrForPartitions: first online replica, online replicas as ISR. */
    static ObjectNode initialLeadership(ControllerContext context) {
        List<Integer> online = new ArrayList<>();
        for (Integer replica : ints(context.partitionReplicaAssignment(PARTITION))) {
            if (context.isReplicaOnline(replica, PARTITION)) {
                online.add(replica);
            }
        }
        if (online.isEmpty()) {
            return election(null, online);
        }
        scala.collection.immutable.List<Object> isr = CollectionConverters.asScala(new ArrayList<Object>(online)).toList();
        return election(LeaderAndIsr.apply(online.get(0), isr), online);
    }

    static ObjectNode election(LeaderAndIsr elected, List<Integer> recipients) {
        ObjectNode result = JSON.createObjectNode();
        if (elected == null) {
            result.putNull("leader_and_isr");
        } else {
            ObjectNode state = result.putObject("leader_and_isr");
            state.put("leader", elected.leader());
            state.put("leader_epoch", elected.leaderEpoch());
            ArrayNode isr = state.putArray("isr");
            ints(elected.isr()).forEach(isr::add);
            state.put("recovery", elected.leaderRecoveryState().value());
            state.put("partition_epoch", elected.partitionEpoch());
        }
        ArrayNode to = result.putArray("recipients");
        recipients.forEach(to::add);
        return result;
    }

    static ObjectNode scalaSet(JsonNode request) {
        ObjectNode result = JSON.createObjectNode();
        ArrayNode elements = result.putArray("elements");
        CollectionConverters.asJava(seq(request.get("elements")).toSet().toList()).forEach(e -> elements.add((Integer) e));
        return result;
    }

    static ObjectNode longMap(JsonNode request) {
        scala.collection.mutable.LongMap<Object> map = new scala.collection.mutable.LongMap<>(request.get("initial").asInt());
        for (JsonNode key : request.get("keys")) {
            map.update((long) key.asLong(), (Object) Integer.valueOf(key.asInt()));
        }
        ObjectNode result = JSON.createObjectNode();
        ArrayNode elements = result.putArray("elements");
        CollectionConverters.asJava(map.values().iterator()).forEachRemaining(e -> elements.add((Integer) e));
        return result;
    }

    static List<BrokerMetadata> brokers(JsonNode listed) {
        List<BrokerMetadata> brokers = new ArrayList<>();
        for (JsonNode broker : listed) {
            JsonNode rack = broker.get(1);
            brokers.add(new BrokerMetadata(broker.get(0).asInt(),
                    rack.isNull() ? Optional.empty() : Optional.of(rack.asText())));
        }
        return brokers;
    }

    static ArrayNode assignment(Map<Integer, List<Integer>> placed) {
        ArrayNode rows = JSON.createArrayNode();
        new TreeMap<>(placed).forEach((partition, replicas) -> {
            ArrayNode row = rows.addArray();
            row.add(partition);
            ArrayNode ids = row.addArray();
            replicas.forEach(ids::add);
        });
        return rows;
    }

    static scala.collection.immutable.List<Object> list(JsonNode ids) {
        List<Object> values = new ArrayList<>();
        ids.forEach(id -> values.add(id.asInt()));
        return CollectionConverters.asScala(values).toList();
    }

    static scala.collection.Seq<Object> seq(JsonNode ids) {
        return list(ids);
    }

    static List<Integer> ints(scala.collection.Seq<Object> values) {
        List<Integer> ids = new ArrayList<>();
        CollectionConverters.asJava(values).forEach(value -> ids.add((Integer) value));
        return ids;
    }
}
