"""ApiVersions (18): the broker's API ranges, built from the handler registry."""

from __future__ import annotations

import re

from kbroker.apis.registry import HANDLERS, handles
from wire import messages
from wire.errors import ErrorCode

PRODUCE = 0
# Kafka 4 still advertises Produce v0-2 (KAFKA-18659): librdkafka refuses to produce when
# the advertised minimum is above what it wants to see, so we list them and reject them.
ADVERTISED_MIN = {PRODUCE: 0}
NAMES_CLIENT = 3      # v3+ names the client software
NAMES_TARGET = 5      # v5+ may name the cluster and node the client means to reach (KIP-1242)
UNKNOWN_NODE = -1
# What Kafka accepts as a client software name or version (ApiVersionsRequest.isValid)
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


# The inter-broker APIs of ZooKeeper mode (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
# AlterPartition, AllocateProducerIds): a Kafka 3.9 ZooKeeper broker lists them, a single node does not
CLUSTER_ONLY_APIS = frozenset({4, 5, 6, 7, 56, 67})
# KRaft-only APIs a Kafka 3.9 ZooKeeper-mode broker does not list (ListClientMetricsResources,
# DescribeTopicPartitions): a cluster member does not either, so clients take the paths Kafka's brokers offer
SINGLE_NODE_ONLY_APIS = frozenset({74, 75})


END_TXN = 26
# A ZooKeeper-mode cluster serves transactions v1 only, as Kafka 3.9: EndTxn up to v4 and no transaction.version
CLUSTER_MAX = {END_TXN: 4}
# The transaction.version feature Kafka 4 finalizes (KIP-890 part 2): a single node serves transactions v2, so Kafka 4
# Java producers use them (they read the finalized level, and ignore it at an epoch of -1)
TRANSACTION_VERSION = "transaction.version"
TRANSACTIONS_V2 = 2
FEATURES_EPOCH = 0
SUPPORTED_FEATURES_WITH_LEVEL_0 = 4  # Kafka lists features whose minimum is 0 only to ApiVersions v4+ (KAFKA-17492)


def disabled_apis(cluster_mode: bool) -> frozenset[int]:
    """The served APIs this kind of broker neither lists nor answers (Kafka closes the connection)."""
    return SINGLE_NODE_ONLY_APIS if cluster_mode else CLUSTER_ONLY_APIS


def supported_versions(cluster_mode: bool = False) -> list:
    ApiVersion = messages.ApiVersionsResponse.ApiVersion
    disabled = disabled_apis(cluster_mode)
    capped = CLUSTER_MAX if cluster_mode else {}
    return [ApiVersion(api_key=h.api_key, min_version=ADVERTISED_MIN.get(h.api_key, h.min_version),
                       max_version=capped.get(h.api_key, h.max_version))
            for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)
            if h.api_key not in disabled]


def _with_features(response, cluster_mode: bool, version: int):
    """A single node's transaction.version: finalized at 2 (epoch 0), supported 0..2 (for v4+ requests)."""
    if cluster_mode:
        return response
    R = messages.ApiVersionsResponse
    response.finalized_features_epoch = FEATURES_EPOCH
    response.finalized_features = [R.FinalizedFeatureKey(name=TRANSACTION_VERSION, max_version_level=TRANSACTIONS_V2,
                                                         min_version_level=TRANSACTIONS_V2)]
    if version >= SUPPORTED_FEATURES_WITH_LEVEL_0:
        response.supported_features = [R.SupportedFeatureKey(name=TRANSACTION_VERSION, min_version=0,
                                                             max_version=TRANSACTIONS_V2)]
    return response


def unsupported_version_response(cluster_mode: bool = False):
    """What a client gets for an ApiVersions version we do not know (KIP-511): a v0
    response with UNSUPPORTED_VERSION and our ranges, so it can retry with one we do."""
    return messages.ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                        api_keys=supported_versions(cluster_mode))


def _is_valid(request, version: int) -> bool:
    """Kafka's checks: the cluster and node are named together or not at all (v5+), and the
    client software name and version look like names (v3+)."""
    if version >= NAMES_TARGET and (request.cluster_id is None) != (request.node_id == UNKNOWN_NODE):
        return False
    return version < NAMES_CLIENT or bool(_SOFTWARE.fullmatch(request.client_software_name)
                                          and _SOFTWARE.fullmatch(request.client_software_version))


def _meant_for_another_broker(broker, request, version: int) -> bool:
    """A v5+ client that names a cluster and node other than this one must bootstrap again."""
    return version >= NAMES_TARGET and request.cluster_id is not None and (
        request.cluster_id != broker.cluster_id or request.node_id != broker.node_id)


@handles(18)
async def api_versions(broker, header, request):
    version = header.request_api_version
    error = ErrorCode.NONE
    if not _is_valid(request, version):
        error = ErrorCode.INVALID_REQUEST
    elif _meant_for_another_broker(broker, request, version):
        error = ErrorCode.REBOOTSTRAP_REQUIRED
    if error != ErrorCode.NONE:  # Kafka lists no APIs with these errors
        return messages.ApiVersionsResponse(error_code=error, api_keys=[], throttle_time_ms=0)
    cluster_mode = broker.config.cluster_mode
    return _with_features(messages.ApiVersionsResponse(error_code=0, api_keys=supported_versions(cluster_mode),
                                                       throttle_time_ms=0), cluster_mode, version)
