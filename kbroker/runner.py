"""Starting and stopping a broker: listeners, the retention timer, the log cleaner, clean shutdown.

And halting: when no log dir is left (or the first one, holding the topics file, fails), the
broker stops serving at once, as Kafka's Exit.halt(1): listeners and connections closed,
nothing flushed, checkpointed or marked clean, so the next start recovers every dir.
`serve_forever` then raises BrokerHalted (`kbroker serve` exits with status 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from kbroker.broker import Broker
from kbroker.config import BrokerConfig
from kbroker.log.cleaner import CleanerConfig
from kbroker.metrics import BrokerMetrics, MetricsEndpoint, endpoint_address
from kbroker.net.quotas import ConnectionQuotas
from kbroker.net.server import Server

log = logging.getLogger(__name__)
CHECKPOINT_INTERVAL_S = 60  # log.flush.offset.checkpoint.interval.ms
# Kafka's launcher logs these three and lets the JVM run its shutdown hooks: a clean shutdown
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StartupError(Exception):
    """The broker could not start; whatever it had opened was closed again, cleanly."""


class BrokerHalted(Exception):
    """The broker stopped serving because its log dirs failed (see the module docstring)."""


class RunningBroker:
    """A broker with its listeners open, inside a running event loop."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker: Broker | None = None
        self.servers: list[Server] = []
        self._retention: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self.halted = False  # set when the log dirs' failure stopped the broker (see halt)
        self._halt_done = asyncio.Event()
        self.member = None  # kbroker.cluster.member.ClusterMember with zookeeper.connect, else None
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics, with prometheus.port
        self.faults = None  # kbroker.faults.Faults once listening: what tests inject (nothing unless asked)
        self._faults_admin: asyncio.Server | None = None  # its HTTP endpoint, with kbroker.faults.port

    @property
    def port(self) -> int:
        return self.servers[0].port

    @property
    def bootstrap_servers(self) -> str:
        listener = self.broker.advertised_listener
        return f"{listener.host}:{listener.port}"

    async def start(self, before_listening: Callable[[], object] | None = None) -> None:
        """Open the logs, then listen (`before_listening` runs just before the first listener
        opens). As Kafka after a fatal start-up error, a failure part way shuts down what was
        opened (listeners stopped, logs closed with the clean-shutdown marker, so the next
        start skips recovery) before it is raised."""
        try:
            await self._open_and_listen(before_listening)
        except BaseException as error:
            try:
                await self.stop()
            except Exception:
                log.exception("closing after a failed start failed too")
            if isinstance(error, Exception):
                raise StartupError(f"{type(error).__name__}: {error}") from error
            raise

    async def _open_and_listen(self, before_listening: Callable[[], object] | None) -> None:
        self._loop = asyncio.get_running_loop()
        if self.config.cluster_mode:  # a ZooKeeper-mode cluster: its cluster id and broker id first
            from kbroker.cluster.member import ClusterMember

            self.member = ClusterMember(self.config)
            self.config = await self.member.connect()
        self.broker = Broker(self.config)
        if self.member is not None:
            self.member.attach(self.broker)
            await self.member.load_broker_configs(at_start=True)
        self.broker.on_log_dir_failure = self._on_log_dir_failure
        self.broker.coordinator.start()  # replays __consumer_offsets before the first client arrives
        # group commit: the connections flush staged offset commits before they send any answer (a cluster's
        # commits wait for the ISR instead)
        self.broker.coordinator.offsets.deferring = not self.config.cluster_mode
        # a single node replays __transaction_state and ends what a crash left prepared; a cluster member loads the
        # partitions it comes to lead (kbroker/cluster/member.py)
        await self.broker.transactions.start()
        if before_listening is not None:
            before_listening()
        await self._start_metrics()
        quotas = ConnectionQuotas(lambda: self.broker.config)
        self.broker.config_observers.append(lambda old, new: quotas.reconfigured())
        for listener in self.config.listeners:
            server = Server(self.broker, listener.host or "0.0.0.0", listener.port, listener.name, quotas)
            await server.start()
            self.servers.append(server)
        advertised = self.config.advertised_listeners[0]
        if advertised.port == 0:
            advertised = dataclasses.replace(advertised, port=self.servers[0].port)
        self.broker.advertised_listener = advertised
        await self._offer_faults()
        if self.member is not None:
            await self._join_cluster()
        self._retention = asyncio.create_task(self._housekeeping())
        self.broker.log_dir_mover.start()  # moves between log dirs a restart cut short go on
        if self.config["log.cleaner.enable"]:
            self.broker.logs.start_cleaner(CleanerConfig.from_properties(self.broker.config))
            self.broker.config_observers.append(self._reconfigure_cleaner)
        log.info("[KafkaServer id=%d] started, listening on %s", self.broker.node_id, self.bootstrap_servers,
                 extra={"broker_id": self.broker.node_id})

    async def _offer_faults(self) -> None:
        """The fault injection controls (kbroker.faults); the HTTP endpoint only with kbroker.faults.port."""
        from kbroker.faults import Faults, serve_admin

        self.faults = Faults(self.broker, self.servers, asyncio.get_running_loop())
        port = self.config["kbroker.faults.port"]
        if port is not None:
            self._faults_admin = await serve_admin(self.faults, port)

    async def _start_metrics(self) -> None:
        """With prometheus.port: count events from the first request on, and serve /metrics."""
        address = endpoint_address(self.config)
        if address is not None:
            self.broker.metrics = BrokerMetrics(self)
            self.metrics_endpoint = MetricsEndpoint(self.broker.metrics, *address)
            await self.metrics_endpoint.start()

    async def _stop_metrics(self) -> None:
        endpoint, self.metrics_endpoint = self.metrics_endpoint, None
        if endpoint is not None:
            await endpoint.stop()
            endpoint.metrics.close()

    async def _join_cluster(self) -> None:
        """Register in ZooKeeper once listening, then start the controller (Kafka's KafkaServer order)."""
        from kbroker.cluster.member import endpoints_of

        await self.member.register(endpoints_of(self.config, {s.listener: s.port for s in self.servers}),
                                   renew_on_new_session=False)  # the controller renews it
        await self.member.start_controller()
        await self.member.start_config_listener()  # topic config changes made through any broker

    def _reconfigure_cleaner(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """Kafka's LogCleaner reconfiguration: a changed log.cleaner.* restarts the cleaner with it."""
        settings = CleanerConfig.from_properties(new)
        if settings != CleanerConfig.from_properties(old) and self.broker.logs.cleaner is not None:
            self.broker.logs.cleaner.reconfigure(settings)

    async def _housekeeping(self) -> None:
        """Kafka's scheduler: retention every log.retention.check.interval.ms, offset
        checkpoints every minute, time-based flushes checked every second."""
        retention_every = int(self.config["log.retention.check.interval.ms"]) / 1000
        loop = asyncio.get_running_loop()
        next_retention = loop.time() + retention_every
        next_checkpoint = loop.time() + CHECKPOINT_INTERVAL_S
        while True:
            await asyncio.sleep(1)
            now = loop.time()
            try:
                if now >= next_retention:
                    self.broker.apply_retention()
                    next_retention = now + retention_every
                if now >= next_checkpoint:
                    self.broker.checkpoint()
                    next_checkpoint = now + CHECKPOINT_INTERVAL_S
                else:
                    self.broker.logs.flush_dirty()
            except Exception:
                log.exception("housekeeping failed")

    # --- a failed log dir ----------------------------------------------------------------

    def _on_log_dir_failure(self, log_dir: Path, must_stop: bool) -> None:
        """Called by the log manager from whichever thread met the failure."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile: nothing left to do
                self._loop.call_soon_threadsafe(self._after_log_dir_failure, must_stop)

    def _after_log_dir_failure(self, must_stop: bool) -> None:
        if self.broker is None or self._stopping:
            return
        self.broker.fetch_waiters.wake_all()  # fetches parked on its partitions answer the error now
        if must_stop and not self.halted:
            self.halted = True
            asyncio.get_running_loop().create_task(self.halt())

    async def halt(self) -> None:
        """Stop serving at once without writing anything more (Kafka's Exit.halt(1))."""
        self.halted = True
        broker, self.broker = self.broker, None
        if broker is None:
            self._halt_done.set()
            return
        try:
            broker.closing = True
            broker.fetch_waiters.wake_all()
            if self._retention is not None:
                self._retention.cancel()
            for server in self.servers:
                for connection in list(server.connections):
                    connection.abort()  # unanswered requests stay unanswered, as when a process dies
            await asyncio.sleep(0)  # each aborted connection leaves its server
            for server in self.servers:
                await server.stop()
            await self._stop_metrics()
            if self.member is not None:  # no controlled shutdown: the session ends, the registration goes
                member, self.member = self.member, None
                await member.stop()
            broker.halt()
        finally:
            self._halt_done.set()

    async def wait_halted(self) -> None:
        await self._halt_done.wait()

    async def stop(self) -> None:
        """Answer nothing new, finish what is in flight, then flush and checkpoint the logs."""
        if self.halted:
            await self._halt_done.wait()
            return
        if self.broker is None:
            await self._stop_metrics()
            if self.member is not None:  # the start failed after joining ZooKeeper
                member, self.member = self.member, None
                await member.stop()
            return
        if self.member is not None:  # leadership moves away while this broker still serves as before
            await self.member.controlled_shutdown()
            if self.halted:  # the log dirs failed meanwhile: the halt has stopped everything
                await self._halt_done.wait()
                return
        node_id = self.broker.node_id
        self._stopping = True
        self.broker.closing = True
        if self.faults is not None:  # a hung request must not hold the shutdown; recording files are closed
            self.faults.clear()
            self.faults.stop_recording()
        if self._faults_admin is not None:
            self._faults_admin.close()
        self.broker.fetch_waiters.wake_all()  # long-polling fetches answer now
        if self.broker._coordinator is not None:
            self.broker._coordinator.close()  # answer parked JoinGroup/SyncGroup requests now
        if self.broker._transactions is not None:
            self.broker._transactions.close()
        if self._retention is not None:
            self._retention.cancel()
        self.broker.logs.stop_cleaner()
        for server in self.servers:
            await server.stop()
        await self._stop_metrics()
        try:
            if self.member is not None:
                member, self.member = self.member, None
                await member.stop()
                log.info("left the cluster")
        finally:  # whatever leaving the cluster raised, the logs are closed cleanly (no recovery at the next start)
            self.broker.flush_deferred_appends()  # nothing should be left: every connection flushed its own
            self.broker.close()
            self.broker = None
        log.info("[KafkaServer id=%d] shut down completed", node_id, extra={"broker_id": node_id})  # Kafka's words


async def serve_forever(config: BrokerConfig) -> None:
    """Serve until a shutdown signal (a clean shutdown), or until the log dirs fail (BrokerHalted)."""
    running = RunningBroker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def handle_shutdown_signals() -> None:
        """From the moment clients can connect: a signal then stops the broker cleanly, even
        one that arrives before the start has finished (it takes effect right after)."""
        for signum in SHUTDOWN_SIGNALS:
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, _on_shutdown_signal, signum, stop)

    await running.start(before_listening=handle_shutdown_signals)
    halted = loop.create_task(running.wait_halted())
    stopped = loop.create_task(stop.wait())
    try:
        await asyncio.wait((halted, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        halted.cancel()
        stopped.cancel()
        if not running.halted:
            log.info("[KafkaServer id=%d] shutting down", config.broker_id, extra={"broker_id": config.broker_id})
        await running.stop()
    if running.halted:
        raise BrokerHalted("the broker halted because its log dirs failed")


def _on_shutdown_signal(signum: int, stop: asyncio.Event) -> None:
    log.info("Terminating process due to signal %s", signal.Signals(signum).name)  # Kafka's words
    stop.set()
