"""kbroker: a Kafka broker in Python that speaks Kafka's wire protocol and keeps its on-disk format."""

__version__ = "0.1.0"
