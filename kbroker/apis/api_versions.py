"""ApiVersions (18): the broker's API ranges, built from the handler registry."""

from __future__ import annotations

from kbroker.apis.registry import HANDLERS, handles
from wire import messages
from wire.errors import ErrorCode

PRODUCE = 0
# Kafka 4 still advertises Produce v0-2 (KAFKA-18659): librdkafka refuses to produce when
# the advertised minimum is above what it wants to see, so we list them and reject them.
ADVERTISED_MIN = {PRODUCE: 0}


def supported_versions() -> list:
    ApiVersion = messages.ApiVersionsResponse.ApiVersion
    return [ApiVersion(api_key=h.api_key, min_version=ADVERTISED_MIN.get(h.api_key, h.min_version),
                       max_version=h.max_version)
            for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)]


def unsupported_version_response():
    """What a client gets for an ApiVersions version we do not know (KIP-511): a v0
    response with UNSUPPORTED_VERSION and our ranges, so it can retry with one we do."""
    return messages.ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                        api_keys=supported_versions())


@handles(18)
async def api_versions(broker, header, request):
    return messages.ApiVersionsResponse(error_code=0, api_keys=supported_versions(), throttle_time_ms=0)
