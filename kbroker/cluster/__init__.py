"""The cluster layer, as Kafka 3.9's ZooKeeper mode: ZooKeeper, the controller, replica placement and
replication. It sits between the APIs and the log; the log knows nothing of it."""
