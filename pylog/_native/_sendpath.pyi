# Types of the producer's send path extension (sendpath.c) for the type checker. Only ``BatchBase``
# is spelled out (ProducerBatch subclasses it and sets these fields); the other names - Lock,
# SendPath, RecordFuture, bind_future - are typed Any through the module ``__getattr__`` below.
from typing import Any, List, Optional

class BatchBase:
    records: List[Any]
    size: int
    topic: str
    partition: int
    done: bool
    error: Optional[BaseException]
    base_offset: int
    timestamp: int
    plain: bool

def __getattr__(name: str) -> Any: ...
