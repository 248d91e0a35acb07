"""Kafka's protocol error codes: every int16 a response's ErrorCode field can carry.

The table matches ``org.apache.kafka.common.protocol.Errors`` as released in Apache Kafka 4.1.0 and
unchanged through the 4.3 line: codes -1 and 0 through 133 (SHARE_SESSION_LIMIT_REACHED, the newest;
Kafka 4.0.0 stops at 132). Names are Kafka's enum constant names, values its codes, and a code is
retriable exactly when Kafka's exception class for it extends ``RetriableException``: that is what
Java clients act on, so it is what a broker's choice of error code promises them.

Trunk after 4.3 adds 134 GROUP_DELETION_FAILED and 135 STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED
(KIP-1331, aimed at 4.4); they are left out until a release carries them.

The one-line messages are kbroker's own wording, for logs and for ErrorMessage fields the broker
fills in when it has nothing more specific to say.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["KAFKA_VERSION", "RETRIABLE", "ErrorCode", "from_code", "is_retriable", "message"]

KAFKA_VERSION = "4.1"  # oldest Apache Kafka release whose Errors.java this table matches exactly


class ErrorCode(IntEnum):
    """A Kafka error code; member names are Kafka's, so logs read the same as a Java client's."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        """Whether a client may simply retry: Kafka's exception for this code is a RetriableException."""
        return self in RETRIABLE

    @property
    def message(self) -> str:
        return _MESSAGES[self]


E = ErrorCode

# Codes whose Java exception class extends org.apache.kafka.common.errors.RetriableException.
RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        E.CORRUPT_MESSAGE,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.LEADER_NOT_AVAILABLE,
        E.NOT_LEADER_OR_FOLLOWER,
        E.REQUEST_TIMED_OUT,
        E.REPLICA_NOT_AVAILABLE,
        E.NETWORK_EXCEPTION,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.NOT_CONTROLLER,
        E.CONCURRENT_TRANSACTIONS,
        E.KAFKA_STORAGE_ERROR,
        E.FETCH_SESSION_ID_NOT_FOUND,
        E.INVALID_FETCH_SESSION_EPOCH,
        E.LISTENER_NOT_FOUND,
        E.FENCED_LEADER_EPOCH,
        E.UNKNOWN_LEADER_EPOCH,
        E.OFFSET_NOT_AVAILABLE,
        E.PREFERRED_LEADER_NOT_AVAILABLE,
        E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        E.ELECTION_NOT_NEEDED,
        E.UNSTABLE_OFFSET_COMMIT,
        E.THROTTLING_QUOTA_EXCEEDED,
        E.UNKNOWN_TOPIC_ID,
        E.INCONSISTENT_TOPIC_ID,
        E.FETCH_SESSION_TOPIC_ID_ERROR,
        E.SHARE_SESSION_NOT_FOUND,
        E.INVALID_SHARE_SESSION_EPOCH,
        E.SHARE_SESSION_LIMIT_REACHED,
    }
)

_MESSAGES: dict[ErrorCode, str] = {
    E.UNKNOWN_SERVER_ERROR: "Unexpected failure inside the broker.",
    E.NONE: "No error.",
    E.OFFSET_OUT_OF_RANGE: "Offset lies outside the log's current start and end.",
    E.CORRUPT_MESSAGE: "Record data failed its checksum or structural checks.",
    E.UNKNOWN_TOPIC_OR_PARTITION: "This broker has no such topic or partition.",
    E.INVALID_FETCH_SIZE: "Fetch size is not valid.",
    E.LEADER_NOT_AVAILABLE: "The partition has no leader right now; an election is under way.",
    E.NOT_LEADER_OR_FOLLOWER: "This broker is not the leader (or not a replica) for the partition.",
    E.REQUEST_TIMED_OUT: "The request did not complete in time.",
    E.BROKER_NOT_AVAILABLE: "The broker is not available.",
    E.REPLICA_NOT_AVAILABLE: "The replica is not available.",
    E.MESSAGE_TOO_LARGE: "The record batch exceeds the largest size the broker accepts.",
    E.STALE_CONTROLLER_EPOCH: "The request came from a controller with an old epoch.",
    E.OFFSET_METADATA_TOO_LARGE: "Offset commit metadata is longer than allowed.",
    E.NETWORK_EXCEPTION: "The connection closed before a response arrived.",
    E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is still loading its state.",
    E.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    E.NOT_COORDINATOR: "This broker is not the coordinator for that key.",
    E.INVALID_TOPIC_EXCEPTION: "The topic name is not valid or the topic cannot be used this way.",
    E.RECORD_LIST_TOO_LARGE: "The batch exceeds the segment size configured for the topic.",
    E.NOT_ENOUGH_REPLICAS: "Too few in-sync replicas to accept the write.",
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "Written, but fewer in-sync replicas than required acknowledged it.",
    E.INVALID_REQUIRED_ACKS: "The acks value is not valid.",
    E.ILLEGAL_GENERATION: "The group generation id is not the current one.",
    E.INCONSISTENT_GROUP_PROTOCOL: "The member's protocols do not fit the group's.",
    E.INVALID_GROUP_ID: "The group id is not valid.",
    E.UNKNOWN_MEMBER_ID: "The coordinator does not know this member id.",
    E.INVALID_SESSION_TIMEOUT: "The session timeout is outside the broker's allowed range.",
    E.REBALANCE_IN_PROGRESS: "The group is rebalancing; rejoin it.",
    E.INVALID_COMMIT_OFFSET_SIZE: "The committed offset data is too large.",
    E.TOPIC_AUTHORIZATION_FAILED: "Not authorized for this topic.",
    E.GROUP_AUTHORIZATION_FAILED: "Not authorized for this group.",
    E.CLUSTER_AUTHORIZATION_FAILED: "Not authorized for this cluster operation.",
    E.INVALID_TIMESTAMP: "A record timestamp is outside the accepted range.",
    E.UNSUPPORTED_SASL_MECHANISM: "The broker does not offer that SASL mechanism.",
    E.ILLEGAL_SASL_STATE: "The request is not allowed in the current SASL state.",
    E.UNSUPPORTED_VERSION: "The broker does not support this API version.",
    E.TOPIC_ALREADY_EXISTS: "A topic with that name already exists.",
    E.INVALID_PARTITIONS: "The partition count is not valid.",
    E.INVALID_REPLICATION_FACTOR: "The replication factor is not valid.",
    E.INVALID_REPLICA_ASSIGNMENT: "The replica assignment is not valid.",
    E.INVALID_CONFIG: "A configuration value is not valid.",
    E.NOT_CONTROLLER: "This node is not the active controller.",
    E.INVALID_REQUEST: "The request is malformed or inconsistent.",
    E.UNSUPPORTED_FOR_MESSAGE_FORMAT: "The topic's message format version does not allow this request.",
    E.POLICY_VIOLATION: "The request breaks a policy configured on the broker.",
    E.OUT_OF_ORDER_SEQUENCE_NUMBER: "The producer sequence number is not the one expected next.",
    E.DUPLICATE_SEQUENCE_NUMBER: "The producer sent a sequence number already written.",
    E.INVALID_PRODUCER_EPOCH: "The producer epoch is older than the current one.",
    E.INVALID_TXN_STATE: "The operation is not valid in the transaction's current state.",
    E.INVALID_PRODUCER_ID_MAPPING: "The producer id is not the one mapped to this transactional id.",
    E.INVALID_TRANSACTION_TIMEOUT: "The transaction timeout exceeds the broker's maximum.",
    E.CONCURRENT_TRANSACTIONS: "Another operation on this transactional id is still in progress.",
    E.TRANSACTION_COORDINATOR_FENCED: "A newer transaction coordinator has taken over.",
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Not authorized for this transactional id.",
    E.SECURITY_DISABLED: "Security features are disabled on this broker.",
    E.OPERATION_NOT_ATTEMPTED: "Skipped because another part of the batch failed.",
    E.KAFKA_STORAGE_ERROR: "The partition's log directory is offline.",
    E.LOG_DIR_NOT_FOUND: "The broker has no such log directory.",
    E.SASL_AUTHENTICATION_FAILED: "SASL authentication failed.",
    E.UNKNOWN_PRODUCER_ID: "The broker holds no state for this producer id.",
    E.REASSIGNMENT_IN_PROGRESS: "A partition reassignment is already running.",
    E.DELEGATION_TOKEN_AUTH_DISABLED: "Delegation tokens are disabled.",
    E.DELEGATION_TOKEN_NOT_FOUND: "No such delegation token.",
    E.DELEGATION_TOKEN_OWNER_MISMATCH: "The principal is not an owner or renewer of the token.",
    E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "Token requests need an authenticated, non-token login.",
    E.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "Not authorized for this delegation token.",
    E.DELEGATION_TOKEN_EXPIRED: "The delegation token has expired.",
    E.INVALID_PRINCIPAL_TYPE: "The principal type is not supported.",
    E.NON_EMPTY_GROUP: "The group still has members.",
    E.GROUP_ID_NOT_FOUND: "No such group.",
    E.FETCH_SESSION_ID_NOT_FOUND: "No such fetch session.",
    E.INVALID_FETCH_SESSION_EPOCH: "The fetch session epoch is not the expected one.",
    E.LISTENER_NOT_FOUND: "The leader has no endpoint on the listener the request came in on.",
    E.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
    E.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the broker's.",
    E.UNKNOWN_LEADER_EPOCH: "The leader epoch in the request is newer than the broker's.",
    E.UNSUPPORTED_COMPRESSION_TYPE: "The compression type is not supported for this request version.",
    E.STALE_BROKER_EPOCH: "The broker epoch is not the current one.",
    E.OFFSET_NOT_AVAILABLE: "The leader's high watermark has not caught up yet.",
    E.MEMBER_ID_REQUIRED: "Rejoin with the member id the coordinator just assigned.",
    E.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader is not available.",
    E.GROUP_MAX_SIZE_REACHED: "The group has reached its maximum size.",
    E.FENCED_INSTANCE_ID: "Another member with this static instance id has fenced this one.",
    E.ELIGIBLE_LEADERS_NOT_AVAILABLE: "No replica eligible for leadership is available.",
    E.ELECTION_NOT_NEEDED: "The partition already has the leader the election would pick.",
    E.NO_REASSIGNMENT_IN_PROGRESS: "No partition reassignment is running.",
    E.GROUP_SUBSCRIBED_TO_TOPIC: "Offsets cannot be deleted while the group consumes the topic.",
    E.INVALID_RECORD: "A record failed the broker's validation.",
    E.UNSTABLE_OFFSET_COMMIT: "There are pending transactional offsets for this partition.",
    E.THROTTLING_QUOTA_EXCEEDED: "The request exceeded a throttling quota.",
    E.PRODUCER_FENCED: "A newer producer with the same transactional id has fenced this one.",
    E.RESOURCE_NOT_FOUND: "The requested resource does not exist.",
    E.DUPLICATE_RESOURCE: "The request names the same resource twice.",
    E.UNACCEPTABLE_CREDENTIAL: "The credential does not meet the broker's requirements.",
    E.INCONSISTENT_VOTER_SET: "The voter sets of the two replicas do not agree.",
    E.INVALID_UPDATE_VERSION: "The feature version in the update is not valid.",
    E.FEATURE_UPDATE_FAILED: "The feature update could not be applied.",
    E.PRINCIPAL_DESERIALIZATION_FAILURE: "The forwarded principal could not be deserialized.",
    E.SNAPSHOT_NOT_FOUND: "No such snapshot.",
    E.POSITION_OUT_OF_RANGE: "The position lies outside the snapshot.",
    E.UNKNOWN_TOPIC_ID: "This broker has no topic with that id.",
    E.DUPLICATE_BROKER_REGISTRATION: "This broker id is already registered.",
    E.BROKER_ID_NOT_REGISTERED: "This broker id is not registered.",
    E.INCONSISTENT_TOPIC_ID: "The topic id does not match the one the broker has.",
    E.INCONSISTENT_CLUSTER_ID: "The cluster id does not match the server's.",
    E.TRANSACTIONAL_ID_NOT_FOUND: "No such transactional id.",
    E.FETCH_SESSION_TOPIC_ID_ERROR: "The fetch session used topic ids inconsistently.",
    E.INELIGIBLE_REPLICA: "The proposed ISR includes a replica that may not join it.",
    E.NEW_LEADER_ELECTED: "The ISR change was applied, but a new leader has since been elected.",
    E.OFFSET_MOVED_TO_TIERED_STORAGE: "The offset now lives only in tiered storage.",
    E.FENCED_MEMBER_EPOCH: "The member epoch is fenced; give up all partitions and rejoin.",
    E.UNRELEASED_INSTANCE_ID: "Another member still holds this static instance id.",
    E.UNSUPPORTED_ASSIGNOR: "The group does not support this assignor or its versions.",
    E.STALE_MEMBER_EPOCH: "The member epoch is stale; retry after the next heartbeat.",
    E.MISMATCHED_ENDPOINT_TYPE: "The request reached the wrong kind of endpoint.",
    E.UNSUPPORTED_ENDPOINT_TYPE: "This kind of endpoint is not supported.",
    E.UNKNOWN_CONTROLLER_ID: "No controller has that id.",
    E.UNKNOWN_SUBSCRIPTION_ID: "The telemetry subscription id is unknown or out of date.",
    E.TELEMETRY_TOO_LARGE: "The telemetry payload exceeds the broker's limit.",
    E.INVALID_REGISTRATION: "The controller considers this broker registration invalid.",
    E.TRANSACTION_ABORTABLE: "The transaction failed but can be aborted and the id reused.",
    E.INVALID_RECORD_STATE: "The record is not in a state that allows this acknowledgement.",
    E.SHARE_SESSION_NOT_FOUND: "No such share session.",
    E.INVALID_SHARE_SESSION_EPOCH: "The share session epoch is not the expected one.",
    E.FENCED_STATE_EPOCH: "The share-group state epoch does not match the coordinator's.",
    E.INVALID_VOTER_KEY: "The voter key does not match the replica's.",
    E.DUPLICATE_VOTER: "That voter is already in the voter set.",
    E.VOTER_NOT_FOUND: "That voter is not in the voter set.",
    E.INVALID_REGULAR_EXPRESSION: "The regular expression is not valid.",
    E.REBOOTSTRAP_REQUIRED: "The client's metadata is stale; it must bootstrap again.",
    E.STREAMS_INVALID_TOPOLOGY: "The Streams topology is not valid.",
    E.STREAMS_INVALID_TOPOLOGY_EPOCH: "The Streams topology epoch is not valid.",
    E.STREAMS_TOPOLOGY_FENCED: "The Streams topology epoch is out of date.",
    E.SHARE_SESSION_LIMIT_REACHED: "The broker has reached its limit of share sessions.",
}

del E


def from_code(code: int) -> ErrorCode:
    """Decode a wire error code; unknown codes read as UNKNOWN_SERVER_ERROR, as Kafka's clients do."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def is_retriable(code: int) -> bool:
    """Retriability of a raw code; codes this table does not know are not retriable."""
    try:
        return ErrorCode(code) in RETRIABLE
    except ValueError:
        return False


def message(code: int) -> str:
    """Our one-line description of `code`, saying so when the code is not one Kafka defines."""
    try:
        return _MESSAGES[ErrorCode(code)]
    except ValueError:
        return f"Unknown error code {code}."
