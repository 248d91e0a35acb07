"""The version names Kafka 3.9 accepts for its deprecated `message.format.version`.

Kafka 3.9 checks the topic config (and the broker's `log.message.format.version`) against its
MetadataVersion list, then ignores the value: from inter-broker protocol 3.0 on, records are
always written in format v2. kbroker accepts the same names, so 3.9 tools and scripts that still
send the config work unchanged (Kafka 4 no longer knows the config).
"""

from __future__ import annotations

# Kafka 3.9's MetadataVersions: release -> its internal versions ("IVn"; none before 0.10.0).
# "<release>" alone names its last version, for production releases only (up to 3.9: 4.0's
# IV0 and IV1 exist in 3.9 but only under their full names).
_RELEASES: dict[str, tuple[str, ...]] = {
    "0.8.0": (), "0.8.1": (), "0.8.2": (), "0.9.0": (),
    "0.10.0": ("IV0", "IV1"), "0.10.1": ("IV0", "IV1", "IV2"), "0.10.2": ("IV0",),
    "0.11.0": ("IV0", "IV1", "IV2"),
    "1.0": ("IV0",), "1.1": ("IV0",),
    "2.0": ("IV0", "IV1"), "2.1": ("IV0", "IV1", "IV2"), "2.2": ("IV0", "IV1"), "2.3": ("IV0", "IV1"),
    "2.4": ("IV0", "IV1"), "2.5": ("IV0",), "2.6": ("IV0",), "2.7": ("IV0", "IV1", "IV2"), "2.8": ("IV0", "IV1"),
    "3.0": ("IV0", "IV1"), "3.1": ("IV0",), "3.2": ("IV0",), "3.3": ("IV0", "IV1", "IV2", "IV3"), "3.4": ("IV0",),
    "3.5": ("IV0", "IV1", "IV2"), "3.6": ("IV0", "IV1", "IV2"), "3.7": ("IV0", "IV1", "IV2", "IV3", "IV4"),
    "3.8": ("IV0",), "3.9": ("IV0",),
    "4.0": ("IV0", "IV1"),
}
_NOT_PRODUCTION = {"4.0"}
KAFKA_39_NAMES = frozenset(
    [f"{release}-{iv}" for release, ivs in _RELEASES.items() for iv in ivs]
    + [release for release in _RELEASES if release not in _NOT_PRODUCTION]
)
DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"  # Kafka 3.9's default, what every 3.x value is taken as


def metadata_version_problem(text: str) -> str | None:
    """Kafka 3.9's complaint about `text` as a message.format.version, or None if it names a version.

    As MetadataVersion.fromVersionString: only the first two dot-separated parts count (three
    for "0.x" names), so "2.8.1" is 2.8 and "0.10.0.1" is 0.10.0; the value is trimmed first,
    as Kafka's ConfigDef trims every string."""
    value = text.strip()
    parts = value.split(".")
    while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
        parts.pop()
    wanted = 3 if value.startswith("0.") else 2
    key = value if wanted >= len(parts) else ".".join(parts[:wanted])
    return None if key in KAFKA_39_NAMES else f"Version {value} is not a valid version"
