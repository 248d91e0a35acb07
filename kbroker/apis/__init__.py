"""One module per API family; importing this package registers every handler."""

from kbroker.apis import (  # noqa: F401 - imported for their @handles registrations
    api_versions,
    configs,
    consumer_groups,
    controller,
    delete_records,
    describe_producers,
    elect_leaders,
    fetch,
    groups,
    leader_epochs,
    list_config_resources,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    produce,
    producers,
    reassignments,
    topic_partitions,
    topics,
)
