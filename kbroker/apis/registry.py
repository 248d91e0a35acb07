"""Which API keys and versions the broker serves, and the handler for each.

Each module under kbroker/apis declares what it serves with `@handles(api_key, versions)`;
ApiVersions answers from this registry and dispatch is one dictionary lookup, so what is
served and what is not is written down in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from wire import messages

HandlerFunction = Callable[..., Awaitable[Any]]

# The address of the client whose request is being handled, as Kafka prints it ("/127.0.0.1");
# the network layer sets it, group coordinators report it in DescribeGroups.
client_host: ContextVar[str] = ContextVar("client_host", default="")


@dataclass(frozen=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    handle: HandlerFunction
    # the response to send when `handle` raised: Kafka's getErrorResponse, which names every item of the request
    # with the error (None: the error at the top level, where the API has one)
    failed: Callable[[Any, int], Any] | None = None

    @property
    def name(self) -> str:
        return messages.api(self.api_key).name

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


HANDLERS: dict[int, Handler] = {}


def handles(api_key: int, versions: tuple[int, int] | None = None, *,
            failed: Callable[[Any, int], Any] | None = None) -> Callable[[HandlerFunction], HandlerFunction]:
    """Register a handler; `versions` defaults to every version the spec defines; `failed(request, error)` builds
    the answer for a request whose handler raised (see Handler.failed)."""

    def register(function: HandlerFunction) -> HandlerFunction:
        spec_versions = messages.api(api_key).versions
        low, high = versions or (spec_versions.low, spec_versions.high)
        if api_key in HANDLERS:
            raise RuntimeError(f"API key {api_key} registered twice")
        HANDLERS[api_key] = Handler(api_key, low, high, function, failed)
        return function

    return register
