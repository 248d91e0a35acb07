"""A small web console for any Kafka-protocol broker: `kbroker console` or `kbroker serve --console-port`.

It reads and writes only through the Kafka protocol (confluent-kafka's AdminClient, Consumer and
Producer), so it works against kbroker and Apache Kafka alike and never touches the broker's
internals. docs/console.md.
"""

from kbroker.console.server import ConsoleServer, start_console

__all__ = ["ConsoleServer", "start_console"]
