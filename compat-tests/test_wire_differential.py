"""Wire-level differential: the same request bytes to a fresh kbroker and to Apache Kafka, every API kbroker
serves at every version both accept, the decoded responses compared field by field (issue 13, part 3).

The cases and the one list of fields that must differ (`differential.NORMALISED`) live in differential.py;
an expected difference is an xfail(strict=True) naming the issue that brings what Kafka's answer needs.
It always compares kbroker with Kafka itself, so it runs in the default target run only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.testing import BrokerProcess

import differential as wd
import kafka_process

pytestmark = [pytest.mark.client("wire")]
# The same settings on both: no initial rebalance delay, so a classic join answers at once.
SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


def _kafka_version(config: pytest.Config) -> str:
    return config.getoption("--kafka-version")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    version = _kafka_version(metafunc.config)
    if "triple" in metafunc.fixturenames:
        params = [pytest.param((api, v, case), id=f"{api}-v{v}-{case.name}",
                               marks=[pytest.mark.scenario(f"Wire differential: {api}"),
                                      *_xfail(case.expected_failure(v, version))])
                  for api, v, case in wd.triples(version)]
        metafunc.parametrize("triple", params)
    if "unsupported_api" in metafunc.fixturenames:
        keys = sorted(wd.common_versions(wd.KAFKA_VERSIONS[version]))
        metafunc.parametrize("unsupported_api", [
            pytest.param(key, id=f"{wd.messages.api(key).name}-unsupported_version",
                         marks=pytest.mark.scenario(f"Wire differential: {wd.messages.api(key).name}"))
            for key in keys])


def _xfail(reason: str | None) -> list:
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


class Pair:
    """One connection to each broker and the shared topic/group made on both."""

    def __init__(self, kbroker: str, kafka: str) -> None:
        self.kbroker = wd.Connection(kbroker)
        self.kafka = wd.Connection(kafka)

    def contexts(self, version: int, key: str) -> tuple[wd.Ctx, wd.Ctx]:
        return wd.Ctx(self.kbroker, version, key), wd.Ctx(self.kafka, version, key)

    def both(self, api_key: int, version: int, requests: tuple, body_version: int | None = None) -> tuple:
        """Both requests in flight at once (a request that waits on the broker waits once), then both answers."""
        for conn, request in zip((self.kbroker, self.kafka), requests, strict=True):
            conn.send(api_key, version, request, body_version)
        return tuple(wd.plain(conn.receive(api_key, version)) for conn in (self.kbroker, self.kafka))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI must run the wire differential)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with contextlib.ExitStack() as stack:
        workdir: Path = tmp_path_factory.mktemp("wire-differential")
        kbroker = BrokerProcess(workdir / "kbroker", *(f"{k}={v}" for k, v in SETTINGS.items()))
        stack.callback(kbroker.stop)
        kbroker.start()
        kafka = kafka_process.KafkaProcess(workdir, _kafka_version(request.config), overrides=SETTINGS)
        stack.callback(kafka.stop)
        try:
            kafka.start()
        except kafka_process.KafkaUnavailable as error:
            _unavailable(f"cannot start Apache Kafka: {error}")
        found = Pair(kbroker.bootstrap, kafka.bootstrap)
        stack.callback(found.kbroker.close)
        stack.callback(found.kafka.close)
        for conn in (found.kbroker, found.kafka):
            wd.prepare_shared(wd.Ctx(conn, 0, "shared"))
        yield found


@pytest.mark.scenario("Wire differential: ApiVersions")
def test_kafka_version_table_is_current(pair: Pair, request: pytest.FixtureRequest) -> None:
    """The versions the test ids were made from are what this Kafka answers."""
    assert wd.kafka_table(pair.kafka) == wd.KAFKA_VERSIONS[_kafka_version(request.config)]


def test_same_response(pair: Pair, triple: tuple[str, int, wd.Case]) -> None:
    """kbroker answers this request as Kafka does, up to the fields that must differ."""
    api, version, case = triple
    contexts = pair.contexts(version, f"{api}-v{version}-{case.name}".lower())
    if case.prepare:
        for ctx in contexts:
            case.prepare(ctx)
    requests = tuple(wd.request_for(case, api, ctx) for ctx in contexts)
    kbroker, kafka = pair.both(wd.api_key(api), version, requests)
    assert kbroker == kafka, "kbroker differs from Kafka at:\n" + "\n".join(wd.differences(kbroker, kafka))


def test_unsupported_version_is_refused_alike(pair: Pair, unsupported_api: int,
                                              request: pytest.FixtureRequest) -> None:
    """A version neither broker serves: ApiVersions answers UNSUPPORTED_VERSION with its table, other APIs close
    the connection; both brokers do the same."""
    table = wd.KAFKA_VERSIONS[_kafka_version(request.config)]
    version = wd.unsupported_version(table, unsupported_api)
    newest = wd.messages.api(unsupported_api).versions.high
    template = {"client_software_name": "wd", "client_software_version": "1"}
    body = wd.build(wd.messages.api(unsupported_api).request.name, newest, template)
    kbroker, kafka = pair.both(unsupported_api, version, (body, body), body_version=newest)
    if unsupported_api == wd.API_VERSIONS and isinstance(kafka, dict):
        kbroker, kafka = kbroker["error_code"], kafka["error_code"]
    assert kbroker == kafka
