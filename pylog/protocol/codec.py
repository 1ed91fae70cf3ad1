"""Kafka's message schemas: kafka-python's classes built from Kafka's own JSON message definitions.

pylog does not write a codec per message: ``kafka.protocol`` (kafka-python >= 3,
Apache-2.0) vendors Kafka's ``clients/src/main/resources/common/message/*.json``
and compiles an encoder and a decoder per (message, version) on first use; the
same classes decode requests (a server's side) and encode responses. Why this
library and not ``kio``: docs/kafka-protocol.md.

This module is the one place that imports ``kafka.protocol``: it maps an API key
to its request and response classes, decodes a request frame (header + body)
and encodes a response (header + body, framed). Record batches are ``bytes``
fields of those messages and are never decoded here.

Complexity: O(frame size). Thread-safety: the classes are immutable after their
first use; decode/encode may run on any thread.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Type

from pylog.errors import InvalidConfigurationError

import warnings

with warnings.catch_warnings():
    # kafka-python 3.0 loads its JSON schemas with importlib.resources.read_text (deprecated since 3.11)
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        from kafka.protocol import api_message as _api_message  # noqa: F401 - presence check
    except ImportError as exc:  # pragma: no cover - the `kafka` extra is missing
        raise InvalidConfigurationError(
            "the Kafka protocol listener needs kafka-python>=3 (its Kafka message schemas): "
            "pip install 'pylog-kafka[kafka]'") from exc
    import kafka.errors as _kerrors
    import kafka.protocol.admin  # noqa: F401 - every schema loads now, not in a request's path
    import kafka.protocol.consumer  # noqa: F401
    import kafka.protocol.metadata  # noqa: F401
    import kafka.protocol.producer  # noqa: F401

_HEAD = struct.Struct(">hhi")  # request_api_key, request_api_version, correlation_id


if TYPE_CHECKING:
    from kafka.protocol.api_message import ApiMessage

#: A kafka-python message class (a subclass of its ``ApiMessage``; kafka-python has no type
#: hints, so its class attributes - ``API_KEY``, ``name``, ``decode`` ... - are typed Any).
MessageClass = Type["ApiMessage"]


def _message_classes() -> Dict[int, Tuple[MessageClass, MessageClass]]:
    """{api_key: (RequestClass, ResponseClass)} for every message kafka-python defines."""
    import importlib

    from kafka.protocol.api_message import ApiMessage

    out: Dict[int, Tuple[MessageClass, MessageClass]] = {}
    reqs: Dict[int, MessageClass] = {}
    resps: Dict[int, MessageClass] = {}
    for mod in ("kafka.protocol.metadata", "kafka.protocol.producer", "kafka.protocol.consumer",
                "kafka.protocol.admin"):
        m = importlib.import_module(mod)
        for name in dir(m):
            cls: MessageClass = getattr(m, name)
            if not (isinstance(cls, type) and issubclass(cls, ApiMessage)) or cls is ApiMessage:
                continue
            if getattr(cls, "_json", None) is None or cls._class_version is not None:
                continue
            (reqs if cls.is_request() else resps)[cls.API_KEY] = cls
    for key, req in reqs.items():
        if key in resps:
            out[key] = (req, resps[key])
    return out


MESSAGES: Dict[int, Tuple[MessageClass, MessageClass]] = _message_classes()


def request_class(api_key: int) -> Optional[MessageClass]:
    pair = MESSAGES.get(api_key)
    return None if pair is None else pair[0]


def response_class(api_key: int) -> Optional[MessageClass]:
    pair = MESSAGES.get(api_key)
    return None if pair is None else pair[1]


def peek_header(frame: "bytes | memoryview") -> Tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without its 4-byte size); the
    caller checked ``len(frame) >= 8``."""
    return _HEAD.unpack_from(frame, 0)


def decode_request(api_key: int, api_version: int, frame: "bytes | memoryview") -> Any:
    """The request (with ``.header``: client_id, correlation_id) from a frame without its size prefix.

    Raises whatever the schema decoder raises on malformed bytes (the server closes the
    connection then, as Kafka does for a request it cannot parse)."""
    cls = MESSAGES[api_key][0]
    return cls.decode(frame, version=api_version, header=True)


def encode_response(resp: Any, correlation_id: int) -> bytes:
    """A response with its header, framed (4-byte size first), ready for the socket.

    The header is v1 (tagged fields) for a flexible version, else v0; ApiVersions
    always v0 (KIP-511) - the response class knows."""
    resp.with_header(correlation_id=correlation_id)
    return bytes(resp.encode(header=True, framed=True))


# ------------------------------------------------------------ error codes
def _error_codes() -> Dict[str, int]:
    codes: Dict[str, int] = {}
    obj: Type[Any]  # kafka-python's error classes (untyped: class attributes are Any)
    for obj in vars(_kerrors).values():
        if isinstance(obj, type) and issubclass(obj, _kerrors.BrokerResponseError) and isinstance(
                getattr(obj, "errno", None), int):
            codes[obj.message] = obj.errno
    # Kafka's own names (Errors.java) where kafka-python's differ
    codes.update(NOT_LEADER_OR_FOLLOWER=6, NONE=0, UNKNOWN_SERVER_ERROR=-1, MESSAGE_TOO_LARGE=10,
                 INVALID_TOPIC_EXCEPTION=17, INVALID_REPLICA_ASSIGNMENT=39)
    return codes


#: Kafka error name (``"NOT_LEADER_OR_FOLLOWER"``) -> code, from kafka-python's table of Kafka's errors
ERROR_CODES: Dict[str, int] = _error_codes()

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
BROKER_NOT_AVAILABLE = 8
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
UNKNOWN_PRODUCER_ID = 59
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
RESOURCE_NOT_FOUND = 91
TRANSACTION_ABORTABLE = 120


def error_code_of(error: Any) -> int:
    """Kafka's code for a pylog error class (or instance); -1 (UNKNOWN_SERVER_ERROR) if it has none.

    The table below first (walked along the MRO), then the class's ``kafka_name`` looked up in
    Kafka's table (:data:`ERROR_CODES`): every :mod:`pylog.errors` class named after a Kafka error
    gets that error's code. Client-side errors Kafka has no code for (``TransactionAbortedError``,
    ``ProducerClosedError``) are UNKNOWN_SERVER_ERROR should one ever reach the wire."""
    if error is None:
        return NONE
    cls = error if isinstance(error, type) else type(error)
    for klass in cls.__mro__:
        code = _PYLOG_CODES.get(klass.__name__)
        if code is not None:
            return code
    name = getattr(cls, "kafka_name", "")
    if name:
        return ERROR_CODES.get(name, UNKNOWN_SERVER_ERROR)
    return UNKNOWN_SERVER_ERROR


#: pylog error class name -> Kafka code (walked along the MRO, so subclasses inherit)
_PYLOG_CODES: Dict[str, int] = {
    "OffsetOutOfRangeError": OFFSET_OUT_OF_RANGE,
    "CorruptRecordError": CORRUPT_MESSAGE,
    "UnknownTopicOrPartitionError": UNKNOWN_TOPIC_OR_PARTITION,
    "LeaderNotAvailableError": LEADER_NOT_AVAILABLE,
    "NotLeaderError": NOT_LEADER_OR_FOLLOWER,
    "RequestTimedOutError": REQUEST_TIMED_OUT,
    "BrokerNotAvailableError": BROKER_NOT_AVAILABLE,
    "RecordTooLargeError": MESSAGE_TOO_LARGE,
    "InvalidTopicError": INVALID_TOPIC_EXCEPTION,
    "NotEnoughReplicasError": NOT_ENOUGH_REPLICAS,
    "NotEnoughReplicasAfterAppendError": NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    "TopicAlreadyExistsError": TOPIC_ALREADY_EXISTS,
    "InvalidConfigurationError": INVALID_CONFIG,
    "OutOfOrderSequenceError": OUT_OF_ORDER_SEQUENCE_NUMBER,
    "InvalidProducerEpochError": INVALID_PRODUCER_EPOCH,
    "KafkaStorageError": KAFKA_STORAGE_ERROR,
    "FencedLeaderEpochError": FENCED_LEADER_EPOCH,
    "UnknownLeaderEpochError": UNKNOWN_LEADER_EPOCH,
    "InvalidRecordError": INVALID_RECORD,
    "CoordinatorNotAvailableError": COORDINATOR_NOT_AVAILABLE,
    "NotCoordinatorError": 16,
    "CoordinatorLoadInProgressError": 14,
    "IllegalGenerationError": 22,
    "InconsistentGroupProtocolError": 23,
    "InvalidGroupIdError": 24,
    "UnknownMemberIdError": 25,
    "RebalanceInProgressError": 27,
    "NonEmptyGroupError": 68,
    "GroupIdNotFoundError": 69,
    "FencedInstanceIdError": 82,
    "GroupSubscribedToTopicError": 86,
    # transactions (issue 17)
    "ProducerFencedError": PRODUCER_FENCED,
    "InvalidTxnStateError": INVALID_TXN_STATE,
    "TransactionAbortableError": TRANSACTION_ABORTABLE,
    "ConcurrentTransactionsError": CONCURRENT_TRANSACTIONS,
    "TransactionCoordinatorFencedError": TRANSACTION_COORDINATOR_FENCED,
    "InvalidTransactionTimeoutError": INVALID_TRANSACTION_TIMEOUT,
    "InvalidProducerIdMappingError": INVALID_PRODUCER_ID_MAPPING,
    "InvalidRequestError": INVALID_REQUEST,
    "TransactionalIdAuthorizationFailedError": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


__all__ = ["MESSAGES", "ERROR_CODES", "request_class", "response_class", "peek_header", "decode_request",
           "encode_response", "error_code_of"]
