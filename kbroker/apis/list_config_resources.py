"""ListConfigResources (74, KIP-1142; v0 was KIP-714's ListClientMetricsResources): the resources that
have configs, by type, for admin tools that discover what DescribeConfigs can be asked about.

Answered as Kafka 4.4 does. v0 lists client-metrics resources only. v1 lists the types it names, or
every config resource type when it names none; one type that is not a config resource type refuses the
whole request with UNSUPPORTED_VERSION and no resources. Resources come grouped by type in Kafka's fixed
order, whatever order the request names them in: groups with configs, client-metrics subscriptions, the
brokers as logger resources, the brokers, then every topic, internal ones included. kbroker keeps no
group configs and no client-metrics subscriptions (IncrementalAlterConfigs refuses both), so those two
lists are always empty, as they are on a Kafka where none were set.
"""

from __future__ import annotations

from enum import IntEnum

from kbroker.apis.registry import handles
from kbroker.broker import Broker
from wire import messages
from wire.errors import ErrorCode


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids, the config resource types v1 accepts."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


Type = ConfigResourceType
# Kafka lists the types in this order, not in the request's.
LISTING_ORDER = (Type.GROUP, Type.CLIENT_METRICS, Type.BROKER_LOGGER, Type.BROKER, Type.TOPIC)
V0_TYPES = frozenset({Type.CLIENT_METRICS})


def resource_names(broker: Broker, resource_type: Type) -> list[str]:
    """The names of one type's resources. Kafka lists topics in hash order; kbroker sorts them."""
    if resource_type in (Type.BROKER, Type.BROKER_LOGGER):
        return [str(broker.node_id)]  # one node: the cluster's only broker, reachable on every listener
    if resource_type == Type.TOPIC:
        return sorted(broker.topics)
    return []  # GROUP, CLIENT_METRICS: kbroker stores no configs for them


def requested_types(version: int, request) -> set[int]:
    """The types to list: v0's fixed one, v1's named ones, or every type for an empty v1 list."""
    if version == 0:
        return set(V0_TYPES)
    return set(request.resource_types) or set(Type)


@handles(74)
async def list_config_resources(broker: Broker, header, request):
    Response = messages.ListConfigResourcesResponse
    wanted = requested_types(header.request_api_version, request)
    if not wanted <= set(Type):
        return Response(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, config_resources=[])
    resources = [Response.ConfigResource(resource_name=name, resource_type=int(resource_type))
                 for resource_type in LISTING_ORDER if resource_type in wanted
                 for name in resource_names(broker, resource_type)]
    return Response(throttle_time_ms=0, error_code=ErrorCode.NONE, config_resources=resources)
