"""One module per API family; importing this package registers every handler."""

from kbroker.apis import (  # noqa: F401 - imported for their @handles registrations
    api_versions,
    fetch,
    list_offsets,
    metadata,
    produce,
    producers,
    topics,
)
