/*
 * sendpath.c - the producer's per-record hot path, as a CPython extension
 * module (pylog._native._sendpath).
 *
 * Why not cffi like the rest of the C core: a cffi function cannot take or
 * return Python objects, and what costs time in Producer.send is Python-level
 * work on Python objects - parsing the call, a dict look-up, a list append,
 * the size bookkeeping and allocating the future. Done by the interpreter
 * that is about 1.2 us per record; here it is a few hundred nanoseconds. The
 * logic is the same as the pure-Python closure in pylog/client/producer.py
 * (_make_fast_send), which stays as the fallback when this module is not
 * built, and tests/property/test_send_path.py checks the two against each
 * other.
 *
 * Four types:
 *
 *   BatchBase  the base of ProducerBatch: its records list and estimated
 *       size as C fields.
 *
 *   Lock()  a non-reentrant lock like threading.Lock (the producer's lock),
 *       which send() takes with a direct C call.
 *
 *   RecordFuture(batch, index)  FutureRecordMetadata itself: two references,
 *       read-only attributes _batch and _index; its methods call Python
 *       functions bound by pylog/client/accumulator.py (bind_future).
 *
 *   SendPath(lock, sticky, parts, batch_size, overhead, slow, batch_full,
 *            future_type, record_proto=None)
 *       .send(topic, value, key=None, partition=None, headers=None,
 *             timestamp=None)
 *       The fast case - a bytes value and no key, headers or timestamp, with
 *       an open batch for the topic (sticky) or the given partition - appends
 *       under the producer's lock and returns future_type(batch, index). A
 *       bytes key (with a bytes or null value, no headers or timestamp) is a
 *       fast case too when record_proto is given: the partition is murmur2 of
 *       the key modulo the partition count (Kafka's default partitioner)
 *       unless one is given, and the batch holds Record(value, key).
 *       Anything else is handed to slow(topic, value, key, partition,
 *       headers, timestamp) with the same six arguments.
 *
 * Thread-safety: send() takes the producer's lock (the same lock the Python
 * code uses: a Lock from this module, taken without a method call) around
 * everything it reads or writes in the batch, so it keeps the invariants the Python side relies on
 * (a batch's records change only under the lock while it is open). Nothing
 * between acquire and release runs Python code except batch_full(), which
 * the Python path also calls under the lock.
 *
 * Complexity: O(1) per call (one dict look-up, one list append).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

/* --------------------------------------------------------------- BatchBase */

/* The base of ProducerBatch: the two fields every send touches, as C fields
 * (records: the list of queued records; size: the estimated encoded bytes),
 * so the send path reads and updates them without attribute look-ups or an
 * int object per record. Python sees them as ordinary attributes. */
typedef struct {
    PyObject_HEAD
    PyObject *records;
    Py_ssize_t size;
    /* Read by FutureRecordMetadata.result()'s fast path; plain object slots otherwise. */
    PyObject *topic;
    PyObject *partition;
    PyObject *done;
    PyObject *error;
    PyObject *base_offset;
    PyObject *timestamp;
    PyObject *plain;
} BatchBase;

static int batch_traverse(BatchBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->records);
    Py_VISIT(self->topic);
    Py_VISIT(self->partition);
    Py_VISIT(self->done);
    Py_VISIT(self->error);
    Py_VISIT(self->base_offset);
    Py_VISIT(self->timestamp);
    Py_VISIT(self->plain);
    return 0;
}

static int batch_clear(BatchBase *self) {
    Py_CLEAR(self->records);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->partition);
    Py_CLEAR(self->done);
    Py_CLEAR(self->error);
    Py_CLEAR(self->base_offset);
    Py_CLEAR(self->timestamp);
    Py_CLEAR(self->plain);
    return 0;
}

static void batch_dealloc(BatchBase *self) {
    PyObject_GC_UnTrack(self);
    batch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef batch_members[] = {
    {"records", T_OBJECT_EX, offsetof(BatchBase, records), 0, "the records queued in the batch (a list)"},
    {"size", T_PYSSIZET, offsetof(BatchBase, size), 0, "the batch's estimated encoded size in bytes"},
    {"topic", T_OBJECT_EX, offsetof(BatchBase, topic), 0, NULL},
    {"partition", T_OBJECT_EX, offsetof(BatchBase, partition), 0, NULL},
    {"done", T_OBJECT_EX, offsetof(BatchBase, done), 0, "completed (acknowledged or failed)"},
    {"error", T_OBJECT_EX, offsetof(BatchBase, error), 0, "the error the batch failed with, or None"},
    {"base_offset", T_OBJECT_EX, offsetof(BatchBase, base_offset), 0, "the first record's offset (-1: unknown)"},
    {"timestamp", T_OBJECT_EX, offsetof(BatchBase, timestamp), 0, "the batch's timestamp"},
    {"plain", T_OBJECT_EX, offsetof(BatchBase, plain), 0, "every record a bytes value (no per-record timestamp)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BatchBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog._native._sendpath.BatchBase",
    .tp_basicsize = sizeof(BatchBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The base of ProducerBatch: records (a list) and size (int) as C fields.",
    .tp_traverse = (traverseproc)batch_traverse,
    .tp_clear = (inquiry)batch_clear,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_members = batch_members,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------ RecordFuture */

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
} RecordFuture;

static int future_traverse(RecordFuture *self, visitproc visit, void *arg) {
    Py_VISIT(self->batch);
    return 0;
}

static int future_clear(RecordFuture *self) {
    Py_CLEAR(self->batch);
    return 0;
}

static void future_dealloc(RecordFuture *self) {
    PyObject_GC_UnTrack(self);
    future_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *future_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"batch", "index", NULL};
    PyObject *batch;
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On:RecordFuture", kwlist, &batch, &index)) {
        return NULL;
    }
    RecordFuture *self = (RecordFuture *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(batch);
    self->batch = batch;
    self->index = index;
    return (PyObject *)self;
}

/* The methods users call (result, get, exception, add_done_callback, repr)
 * are Python functions in pylog/client/accumulator.py, bound once with
 * bind_future(); done() is here. A static type rather than a Python
 * subclass, because a heap subclass's instances cost a type reference and
 * subtype_dealloc on every send. */
enum { IMPL_RESULT, IMPL_EXCEPTION, IMPL_ADD_DONE_CALLBACK, IMPL_REPR, IMPL_N };
static PyObject *future_impl[IMPL_N];
static PyTypeObject *metadata_type; /* RecordMetadata (a NamedTuple: a tuple subclass of 4 items) */
static PyObject *str_done;

static PyObject *future_dispatch(int which, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    PyObject *fn = future_impl[which];
    if (fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FutureRecordMetadata: pylog.client.accumulator did not bind it");
        return NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *stack[8];
    if (nargs + nkw > 7) {
        PyErr_SetString(PyExc_TypeError, "FutureRecordMetadata: too many arguments");
        return NULL;
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++) {
        stack[i + 1] = args[i];
    }
    return PyObject_Vectorcall(fn, stack, nargs + 1, kwnames);
}

/* result() of a record already acknowledged in a batch of plain values (so
 * its timestamp is the batch's): RecordMetadata(topic, partition,
 * base_offset + index, timestamp) built here. NULL without an exception set
 * when the case is not that one (the Python function then decides). */
static PyObject *future_result_done(RecordFuture *self) {
    if (metadata_type == NULL || !PyObject_TypeCheck(self->batch, &BatchBaseType)) {
        return NULL;
    }
    BatchBase *b = (BatchBase *)self->batch;
    if (b->done != Py_True || b->error != Py_None || b->plain != Py_True || b->topic == NULL ||
        b->partition == NULL || b->base_offset == NULL || b->timestamp == NULL ||
        !PyLong_CheckExact(b->base_offset)) {
        return NULL;
    }
    int overflow = 0;
    long long base = PyLong_AsLongLongAndOverflow(b->base_offset, &overflow);
    if (overflow || (base == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *offset = PyLong_FromLongLong(base >= 0 ? base + (long long)self->index : -1);
    if (offset == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *meta = metadata_type->tp_alloc(metadata_type, 4);
    if (meta == NULL) {
        Py_DECREF(offset);
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(b->topic);
    PyTuple_SET_ITEM(meta, 0, b->topic);
    Py_INCREF(b->partition);
    PyTuple_SET_ITEM(meta, 1, b->partition);
    PyTuple_SET_ITEM(meta, 2, offset);
    Py_INCREF(b->timestamp);
    PyTuple_SET_ITEM(meta, 3, b->timestamp);
    return meta;
}

static PyObject *future_result(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames)) <= 1 &&
        (kwnames == NULL || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout") == 0)) {
        PyObject *meta = future_result_done((RecordFuture *)self);
        if (meta != NULL) {
            return meta;
        }
    }
    return future_dispatch(IMPL_RESULT, self, args, nargs, kwnames);
}

static PyObject *future_exception(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return future_dispatch(IMPL_EXCEPTION, self, args, nargs, kwnames);
}

static PyObject *future_add_done_callback(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames) {
    if (!PyObject_GC_IsTracked(self)) { /* the callback's closure will refer to this future: a cycle */
        PyObject_GC_Track(self);
    }
    return future_dispatch(IMPL_ADD_DONE_CALLBACK, self, args, nargs, kwnames);
}

static PyObject *future_repr(PyObject *self) {
    return future_dispatch(IMPL_REPR, self, NULL, 0, NULL);
}

static PyObject *future_done(RecordFuture *self, PyObject *unused) {
    PyObject *done = PyObject_GetAttr(self->batch, str_done);
    if (done == NULL) {
        return NULL;
    }
    int truth = PyObject_IsTrue(done);
    Py_DECREF(done);
    if (truth < 0) {
        return NULL;
    }
    return PyBool_FromLong(truth);
}

static PyMethodDef future_methods[] = {
    {"result", (PyCFunction)(void (*)(void))future_result, METH_FASTCALL | METH_KEYWORDS,
     "result($self, /, timeout=None)\n--\n\nBlock until the record is acknowledged and return its "
     "RecordMetadata; raise its error if it failed."},
    {"get", (PyCFunction)(void (*)(void))future_result, METH_FASTCALL | METH_KEYWORDS,
     "get($self, /, timeout=None)\n--\n\nresult() under kafka-python's name."},
    {"exception", (PyCFunction)(void (*)(void))future_exception, METH_FASTCALL | METH_KEYWORDS,
     "exception($self, /, timeout=None)\n--\n\nThe error the record failed with (None if it succeeded); "
     "waits like result()."},
    {"add_done_callback", (PyCFunction)(void (*)(void))future_add_done_callback, METH_FASTCALL | METH_KEYWORDS,
     "add_done_callback($self, /, fn)\n--\n\nCall fn(future) on the producer's loop thread once the record "
     "is done, or at once if it already is."},
    {"done", (PyCFunction)future_done, METH_NOARGS, "done($self, /)\n--\n\nTrue once acknowledged or failed."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef future_members[] = {
    {"_batch", T_OBJECT_EX, offsetof(RecordFuture, batch), READONLY, "the ProducerBatch the record is in"},
    {"_index", T_PYSSIZET, offsetof(RecordFuture, index), READONLY, "the record's position in its batch"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog.client.accumulator.FutureRecordMetadata",
    .tp_basicsize = sizeof(RecordFuture),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FutureRecordMetadata(batch, index): the future of one sent record; result() gives its "
              "RecordMetadata. Two references, so a send costs one small allocation.",
    .tp_traverse = (traverseproc)future_traverse,
    .tp_clear = (inquiry)future_clear,
    .tp_dealloc = (destructor)future_dealloc,
    .tp_repr = future_repr,
    .tp_methods = future_methods,
    .tp_members = future_members,
    .tp_new = future_new,
};

static PyObject *bind_future(PyObject *module, PyObject *args) {
    PyObject *fns[IMPL_N];
    PyObject *meta;
    if (!PyArg_ParseTuple(args, "OOOOO!:bind_future", &fns[0], &fns[1], &fns[2], &fns[3], &PyType_Type, &meta)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)meta, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind_future: the metadata type must be a tuple subclass");
        return NULL;
    }
    for (int i = 0; i < IMPL_N; i++) {
        if (!PyCallable_Check(fns[i])) {
            PyErr_SetString(PyExc_TypeError, "bind_future: every argument must be callable");
            return NULL;
        }
    }
    for (int i = 0; i < IMPL_N; i++) {
        Py_INCREF(fns[i]);
        Py_XSETREF(future_impl[i], fns[i]);
    }
    Py_INCREF(meta);
    Py_XSETREF(metadata_type, (PyTypeObject *)meta);
    Py_RETURN_NONE;
}

/* -------------------------------------------------------------------- Lock */

/* A non-reentrant lock like threading.Lock, whose acquire the send path can
 * take without a Python method call (threading.Lock.acquire parses its
 * arguments with PyArg_ParseTupleAndKeywords on every call). Python code uses
 * it the same way: acquire(blocking=True, timeout=-1), release(), locked(),
 * and as a context manager; threading.Condition accepts it. A blocked
 * acquire releases the GIL while it waits. */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char locked;
} Lock;

static PyTypeObject LockType;

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    Lock *self = (Lock *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void lock_dealloc(Lock *self) {
    if (self->lock != NULL) {
        if (self->locked) {
            PyThread_release_lock(self->lock);
        }
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Take the lock: at once if it is free, else with the GIL released, waiting
 * up to timeout_us (-1: forever). Returns 1 if taken, 0 if not. */
static int lock_take(Lock *self, PY_TIMEOUT_T timeout_us) {
    if (PyThread_acquire_lock_timed(self->lock, 0, 0) != PY_LOCK_ACQUIRED) {
        if (timeout_us == 0) {
            return 0;
        }
        PyLockStatus r;
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->lock, timeout_us, 0);
        Py_END_ALLOW_THREADS
        if (r != PY_LOCK_ACQUIRED) {
            return 0;
        }
    }
    self->locked = 1;
    return 1;
}

static int lock_give(Lock *self) {
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return -1;
    }
    self->locked = 0;
    PyThread_release_lock(self->lock);
    return 0;
}

static PyObject *lock_acquire(Lock *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (args != NULL && (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0))) {
        if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout)) {
            return NULL;
        }
    }
    PY_TIMEOUT_T timeout_us;
    if (!blocking) {
        if (timeout != -1) {
            PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
            return NULL;
        }
        timeout_us = 0;
    } else if (timeout == -1) {
        timeout_us = -1;
    } else if (timeout < 0) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    } else {
        double us = timeout * 1e6;
        if (us >= (double)PY_TIMEOUT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
            return NULL;
        }
        timeout_us = (PY_TIMEOUT_T)us;
    }
    return PyBool_FromLong(lock_take(self, timeout_us));
}

static PyObject *lock_enter(Lock *self, PyObject *unused) {
    lock_take(self, -1);
    Py_RETURN_TRUE;
}

static PyObject *lock_release(Lock *self, PyObject *unused) {
    if (lock_give(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *lock_exit(Lock *self, PyObject *const *args, Py_ssize_t nargs) {
    if (lock_give(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *lock_locked(Lock *self, PyObject *unused) {
    return PyBool_FromLong(self->locked);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool, as threading.Lock.acquire"},
    {"release", (PyCFunction)lock_release, METH_NOARGS, "release(): RuntimeError if not locked"},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "locked() -> bool"},
    {"__enter__", (PyCFunction)lock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lock_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog._native._sendpath.Lock",
    .tp_basicsize = sizeof(Lock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lock(): a non-reentrant lock like threading.Lock, which the C send path takes directly.",
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_methods = lock_methods,
    .tp_new = lock_new,
};

/* ---------------------------------------------------------------- SendPath */

typedef struct {
    PyObject_HEAD
    Lock *lock;            /* the producer's lock, taken directly */
    PyObject *sticky;      /* dict: topic -> the open batch keyless records join */
    PyObject *parts;       /* dict: topic -> list of partition states (attribute "open") */
    Py_ssize_t batch_size;
    Py_ssize_t overhead;   /* estimated bytes a record adds besides its value */
    PyObject *slow;        /* callable(topic, value, key, partition, headers, timestamp) */
    PyObject *batch_full;  /* callable(batch), called under the lock */
    PyTypeObject *future_type;
    PyObject *record_proto; /* Record(None): keyed records are built as copies with value and key set; or NULL */
} SendPath;

static PyObject *str_open;

static int sendpath_traverse(SendPath *self, visitproc visit, void *arg) {
    Py_VISIT((PyObject *)self->lock);
    Py_VISIT(self->sticky);
    Py_VISIT(self->parts);
    Py_VISIT(self->slow);
    Py_VISIT(self->batch_full);
    Py_VISIT((PyObject *)self->future_type);
    Py_VISIT(self->record_proto);
    return 0;
}

static int sendpath_clear(SendPath *self) {
    Py_CLEAR(self->lock);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->parts);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->batch_full);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->record_proto);
    return 0;
}

static void sendpath_dealloc(SendPath *self) {
    PyObject_GC_UnTrack(self);
    sendpath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *sendpath_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"lock", "sticky", "parts", "batch_size", "overhead", "slow", "batch_full",
                             "future_type", "record_proto", NULL};
    PyObject *lock, *sticky, *parts, *slow, *batch_full, *future_type, *record_proto = Py_None;
    Py_ssize_t batch_size, overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!nnOOO!|O:SendPath", kwlist, &lock, &PyDict_Type, &sticky,
                                     &PyDict_Type, &parts, &batch_size, &overhead, &slow, &batch_full,
                                     &PyType_Type, &future_type, &record_proto)) {
        return NULL;
    }
    if (record_proto != Py_None && (!PyTuple_Check(record_proto) || PyTuple_CheckExact(record_proto) ||
                                    PyTuple_GET_SIZE(record_proto) < 2)) {
        PyErr_SetString(PyExc_TypeError, "SendPath: record_proto must be a Record (a tuple subclass: value, key, ...)");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)future_type, &RecordFutureType)) {
        PyErr_SetString(PyExc_TypeError, "SendPath: future_type must be a subclass of RecordFuture");
        return NULL;
    }
    if (!PyCallable_Check(slow) || !PyCallable_Check(batch_full)) {
        PyErr_SetString(PyExc_TypeError, "SendPath: slow and batch_full must be callable");
        return NULL;
    }
    if (!Py_IS_TYPE(lock, &LockType)) {
        PyErr_SetString(PyExc_TypeError, "SendPath: lock must be a pylog._native._sendpath.Lock");
        return NULL;
    }
    SendPath *self = (SendPath *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(lock);
    self->lock = (Lock *)lock;
    Py_INCREF(sticky);
    self->sticky = sticky;
    Py_INCREF(parts);
    self->parts = parts;
    self->batch_size = batch_size;
    self->overhead = overhead;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(batch_full);
    self->batch_full = batch_full;
    Py_INCREF(future_type);
    self->future_type = (PyTypeObject *)future_type;
    if (record_proto != Py_None) {
        Py_INCREF(record_proto);
        self->record_proto = record_proto;
    }
    return (PyObject *)self;
}

static const char *const send_params[] = {"topic", "value", "key", "partition", "headers", "timestamp"};
#define SEND_NPARAMS 6

/* Release the lock (taken by send); -1 when an error is pending, else 0. */
static int unlock(SendPath *self) {
    self->lock->locked = 0;
    PyThread_release_lock(self->lock->lock);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *call_slow(SendPath *self, PyObject *const *argv) {
    return PyObject_Vectorcall(self->slow, argv, SEND_NPARAMS, NULL);
}

/* Kafka's Utils.murmur2 (the Java client's default partitioner hash), as an
 * unsigned 32-bit value; reads exactly n bytes of data. */
static uint32_t murmur2(const unsigned char *data, Py_ssize_t n) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)n;
    Py_ssize_t nblocks = n >> 2;
    for (Py_ssize_t i = 0; i < nblocks; i++) {
        const unsigned char *b = data + 4 * i;
        uint32_t k = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t i = n & ~(Py_ssize_t)3;
    switch (n & 3) {
    case 3:
        h ^= (uint32_t)data[i + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[i + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[i];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *py_murmur2(PyObject *module, PyObject *arg) {
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "murmur2() takes bytes");
        return NULL;
    }
    uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg));
    return PyLong_FromLong((long)(int32_t)h);
}

/* The open batch for the fast case, as a new reference; Py_None (new
 * reference) when there is none or the call is not the fast case; NULL with
 * an exception set on error. Called with the lock held. */
static PyObject *open_batch(SendPath *self, PyObject *topic, PyObject *partition, PyObject *key) {
    PyObject *b;
    if (partition == Py_None && key != Py_None) { /* Kafka's default partitioner: murmur2 of the key */
        PyObject *parts = PyDict_GetItemWithError(self->parts, topic); /* borrowed */
        if (parts == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        if (!PyList_CheckExact(parts) || PyList_GET_SIZE(parts) == 0) {
            Py_RETURN_NONE;
        }
        uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)) & 0x7fffffffu;
        return PyObject_GetAttr(PyList_GET_ITEM(parts, (Py_ssize_t)(h % (uint32_t)PyList_GET_SIZE(parts))),
                                str_open);
    }
    if (partition == Py_None) {
        b = PyDict_GetItemWithError(self->sticky, topic); /* borrowed */
        if (b == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        Py_INCREF(b);
        return b;
    }
    PyObject *parts = PyDict_GetItemWithError(self->parts, topic); /* borrowed */
    if (parts == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(parts) || !PyLong_CheckExact(partition)) {
        Py_RETURN_NONE;
    }
    int overflow = 0;
    long p = PyLong_AsLongAndOverflow(partition, &overflow);
    if (p == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow || p < 0 || p >= PyList_GET_SIZE(parts)) {
        Py_RETURN_NONE;
    }
    return PyObject_GetAttr(PyList_GET_ITEM(parts, p), str_open);
}

static PyObject *sendpath_send(SendPath *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *argv[SEND_NPARAMS] = {NULL, NULL, Py_None, Py_None, Py_None, Py_None};
    if (nargs > SEND_NPARAMS) {
        PyErr_Format(PyExc_TypeError, "send() takes from 2 to %d positional arguments but %zd were given",
                     SEND_NPARAMS, nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        argv[i] = args[i];
    }
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nkw; k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            int slot = -1;
            for (int j = 0; j < SEND_NPARAMS; j++) {
                if (PyUnicode_CompareWithASCIIString(name, send_params[j]) == 0) {
                    slot = j;
                    break;
                }
            }
            if (slot < 0) {
                PyErr_Format(PyExc_TypeError, "send() got an unexpected keyword argument '%U'", name);
                return NULL;
            }
            if (slot < nargs) {
                PyErr_Format(PyExc_TypeError, "send() got multiple values for argument '%s'", send_params[slot]);
                return NULL;
            }
            argv[slot] = args[nargs + k];
        }
    }
    if (argv[0] == NULL && argv[1] == NULL) {
        PyErr_SetString(PyExc_TypeError, "send() missing 2 required positional arguments: 'topic' and 'value'");
        return NULL;
    }
    if (argv[0] == NULL || argv[1] == NULL) {
        PyErr_Format(PyExc_TypeError, "send() missing 1 required positional argument: '%s'",
                     argv[0] == NULL ? "topic" : "value");
        return NULL;
    }
    PyObject *topic = argv[0], *value = argv[1], *key = argv[2];
    if (argv[4] != Py_None || argv[5] != Py_None) {
        return call_slow(self, argv);
    }
    PyObject *item = value; /* what the batch holds: the value, or a Record for a keyed record */
    Py_ssize_t size = self->overhead;
    if (key == Py_None) {
        if (!PyBytes_CheckExact(value)) {
            return call_slow(self, argv);
        }
        Py_INCREF(item);
        size += PyBytes_GET_SIZE(value);
    } else {
        if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)) ||
            self->record_proto == NULL) {
            return call_slow(self, argv);
        }
        /* Record(value=value, key=key) with the prototype's other fields (headers (), timestamp None, ...),
         * built as tuple.__new__ would build the subclass. */
        PyTypeObject *rt = Py_TYPE(self->record_proto);
        Py_ssize_t nf = PyTuple_GET_SIZE(self->record_proto);
        item = rt->tp_alloc(rt, nf);
        if (item == NULL) {
            return NULL;
        }
        Py_INCREF(value);
        PyTuple_SET_ITEM(item, 0, value);
        Py_INCREF(key);
        PyTuple_SET_ITEM(item, 1, key);
        for (Py_ssize_t f = 2; f < nf; f++) {
            PyObject *v = PyTuple_GET_ITEM(self->record_proto, f);
            Py_INCREF(v);
            PyTuple_SET_ITEM(item, f, v);
        }
        size += PyBytes_GET_SIZE(key) + (value == Py_None ? 0 : PyBytes_GET_SIZE(value));
        PyObject_GC_UnTrack(item); /* bytes, None, () and ints: it can be in no cycle */
    }

    lock_take(self->lock, -1);
    PyObject *batch = open_batch(self, topic, argv[3], key);
    if (batch == NULL) {
        Py_DECREF(item);
        unlock(self);
        return NULL;
    }
    if (batch == Py_None) {
        Py_DECREF(batch);
        Py_DECREF(item);
        if (unlock(self) < 0) {
            return NULL;
        }
        return call_slow(self, argv);
    }
    /* The batch's records and size change only here and in the Python code, both under the lock. */
    BatchBase *bb = (BatchBase *)batch;
    if (!PyObject_TypeCheck(batch, &BatchBaseType) || bb->records == NULL || !PyList_CheckExact(bb->records)) {
        PyErr_SetString(PyExc_TypeError, "send(): the open batch is not a ProducerBatch with a list of records");
        Py_DECREF(batch);
        Py_DECREF(item);
        unlock(self);
        return NULL;
    }
    Py_ssize_t index = PyList_GET_SIZE(bb->records);
    int failed = PyList_Append(bb->records, item);
    Py_DECREF(item);
    if (failed == 0) {
        if (key != Py_None && bb->plain != Py_False) { /* a Record: not the encoder's plain-values case */
            Py_INCREF(Py_False);
            Py_XSETREF(bb->plain, Py_False);
        }
        bb->size += size;
        if (bb->size >= self->batch_size) {
            PyObject *full = PyObject_CallOneArg(self->batch_full, batch);
            failed = full == NULL;
            Py_XDECREF(full);
        }
    }
    if (unlock(self) < 0 || failed) {
        Py_DECREF(batch);
        return NULL;
    }
    RecordFuture *fut = (RecordFuture *)self->future_type->tp_alloc(self->future_type, 0);
    if (fut == NULL) {
        Py_DECREF(batch);
        return NULL;
    }
    fut->batch = batch; /* the reference open_batch gave us */
    fut->index = index;
    /* Not tracked by the cycle collector: a future refers only to its batch, and it joins a cycle
     * only through a done-callback (batch -> callbacks -> closure -> future), where
     * add_done_callback tracks it. Untracked, the futures an application holds (a list of 100,000
     * awaiting result()) are not traversed by every older-generation collection. */
    PyObject_GC_UnTrack(fut);
    return (PyObject *)fut;
}

static PyMethodDef sendpath_methods[] = {
    {"send", (PyCFunction)(void (*)(void))sendpath_send, METH_FASTCALL | METH_KEYWORDS,
     "send($self, /, topic, value, key=None, partition=None, headers=None, timestamp=None)\n--\n\n"
     "Queue one record; returns a future of its RecordMetadata (see pylog.client.producer.Producer.send)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SendPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog._native._sendpath.SendPath",
    .tp_basicsize = sizeof(SendPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SendPath(lock, sticky, parts, batch_size, overhead, slow, batch_full, future_type): "
              "the producer's send() fast path.",
    .tp_traverse = (traverseproc)sendpath_traverse,
    .tp_clear = (inquiry)sendpath_clear,
    .tp_dealloc = (destructor)sendpath_dealloc,
    .tp_methods = sendpath_methods,
    .tp_new = sendpath_new,
};

/* ------------------------------------------------------------- make_records */

/* One field of record i: seq[i] when seq is a tuple or list, or first + i (contiguous) / the shared
 * object when seq is an int (step 1 or 0; first is seq's value). Returns a new reference. */
static PyObject *field_at(PyObject *seq, Py_ssize_t i, int step, long long first) {
    if (PyLong_CheckExact(seq)) {
        if (step == 0 || i == 0) {
            Py_INCREF(seq);
            return seq;
        }
        return PyLong_FromLongLong(first + (long long)i);
    }
    PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
    Py_INCREF(o);
    return o;
}

static int atomic(PyObject *o) {
    return o == Py_None || PyBytes_CheckExact(o) || PyLong_CheckExact(o);
}

/* make_records(cls, values, keys, offsets, timestamps, timestamp_type) -> list
 *
 * The storage reader's record builder (pylog.storage.log.Log.read): record i is
 * cls(values[i], keys[i], (), timestamps[i], offsets[i], timestamp_type), where keys
 * None means every key is null, offsets an int means first offset of a contiguous
 * run, and timestamps an int means one timestamp for all. cls is a tuple subclass of
 * six fields (pylog.record.Record). A record whose fields are all bytes,
 * None or int (and the shared empty headers tuple) cannot be part of a reference
 * cycle, so it is untracked by the cycle collector at once, as CPython does itself
 * for plain tuples of such items at their first collection (it never does for a
 * tuple subclass): a million records held by the caller then cost no collector
 * time. Records holding anything else stay tracked. */
static PyObject *make_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "make_records takes 6 arguments");
        return NULL;
    }
    PyObject *cls = args[0], *values = args[1], *keys = args[2], *offsets = args[3],
             *timestamps = args[4], *tst = args[5];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "make_records: cls must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (!(PyTuple_CheckExact(values) || PyList_CheckExact(values)) ||
        !(keys == Py_None || PyTuple_CheckExact(keys) || PyList_CheckExact(keys)) ||
        !(PyLong_CheckExact(offsets) || PyTuple_CheckExact(offsets) || PyList_CheckExact(offsets)) ||
        !(PyLong_CheckExact(timestamps) || PyTuple_CheckExact(timestamps) || PyList_CheckExact(timestamps)) ||
        !PyLong_CheckExact(tst)) {
        PyErr_SetString(PyExc_TypeError, "make_records: bad argument types");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if ((keys != Py_None && PySequence_Fast_GET_SIZE(keys) != n) ||
        (!PyLong_CheckExact(offsets) && PySequence_Fast_GET_SIZE(offsets) != n) ||
        (!PyLong_CheckExact(timestamps) && PySequence_Fast_GET_SIZE(timestamps) != n)) {
        PyErr_SetString(PyExc_ValueError, "make_records: columns of different lengths");
        return NULL;
    }
    long long first = 0;
    if (PyLong_CheckExact(offsets)) {
        first = PyLong_AsLongLong(offsets);
        if (first == -1 && PyErr_Occurred()) return NULL;
        if (first < 0 || (long long)n > LLONG_MAX - first) {
            PyErr_SetString(PyExc_ValueError, "make_records: offsets out of range");
            return NULL;
        }
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) return NULL;
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(empty);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = type->tp_alloc(type, 6);
        if (rec == NULL) goto fail;
        PyList_SET_ITEM(out, i, rec);
        PyObject *v = PySequence_Fast_GET_ITEM(values, i);
        PyObject *k = keys == Py_None ? Py_None : PySequence_Fast_GET_ITEM(keys, i);
        Py_INCREF(v);
        Py_INCREF(k);
        Py_INCREF(empty);
        Py_INCREF(tst);
        PyTuple_SET_ITEM(rec, 0, v);
        PyTuple_SET_ITEM(rec, 1, k);
        PyTuple_SET_ITEM(rec, 2, empty);
        PyTuple_SET_ITEM(rec, 5, tst);
        PyObject *ts = field_at(timestamps, i, 0, 0);
        if (ts == NULL) goto fail;
        PyTuple_SET_ITEM(rec, 3, ts);
        PyObject *off = field_at(offsets, i, 1, first);
        if (off == NULL) goto fail;
        PyTuple_SET_ITEM(rec, 4, off);
        if (atomic(v) && atomic(k) && atomic(ts) && atomic(off) && PyObject_GC_IsTracked(rec)) {
            PyObject_GC_UnTrack(rec);
        }
    }
    Py_DECREF(empty);
    return out;
fail:
    Py_DECREF(empty);
    Py_DECREF(out); /* a record with a NULL slot is fine to free: tuple dealloc skips NULL items */
    return NULL;
}

/* untrack_records(records: list) -> None: make_records' untracking for records built elsewhere
 * (the general decoder's): each tuple in the list whose items are all bytes, None, int or the
 * empty tuple is untracked by the cycle collector; anything else is left as it is. */
static PyObject *untrack_records(PyObject *self, PyObject *arg) {
    if (!PyList_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "untrack_records takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyList_GET_ITEM(arg, i);
        if (!PyTuple_Check(rec) || !PyObject_GC_IsTracked(rec)) continue;
        Py_ssize_t m = PyTuple_GET_SIZE(rec), j;
        for (j = 0; j < m; j++) {
            PyObject *o = PyTuple_GET_ITEM(rec, j);
            if (!(atomic(o) || (PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 0))) break;
        }
        if (j == m) PyObject_GC_UnTrack(rec);
    }
    Py_RETURN_NONE;
}

/* --------------------------------------------------------- encode_value_list */

/* plg_batch_seal of the cffi-built C core (length field and CRC-32C), set once by set_seal_function,
 * for the same reason as lookup_fn below: this module calls the core through a pointer rather than
 * linking a second copy. */
typedef int (*seal_fn_t)(uint8_t *, uint64_t);
static seal_fn_t seal_fn = NULL;

static PyObject *set_seal_function(PyObject *self, PyObject *arg) {
    unsigned long long addr = PyLong_AsUnsignedLongLong(arg);
    if (addr == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    seal_fn = (seal_fn_t)(uintptr_t)addr;
    Py_RETURN_NONE;
}

static inline uint32_t ev_varint_size(int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    uint32_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *ev_put_varint(uint8_t *p, int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (u >= 0x80) {
        *p++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

static inline void ev_put(uint8_t *p, uint64_t v, int bytes) { /* big-endian */
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* encode_value_list(records, now_ms, base_offset, leader_epoch, producer_id, producer_epoch,
 *                   base_sequence, attributes) -> bytearray | None
 *
 * Log.append's plain case in one call: a list of bytes values becomes one sealed, uncompressed
 * RecordBatch v2 (keyless, headerless records, every timestamp now_ms, the given base offset and
 * leader epoch), byte for byte what plg_batch_encode_values writes and then set_offsets stamps. The
 * values are read from the list's items where they are (no joined copy, no length array): one
 * sizing pass, one bytearray of exactly the batch's size, one writing pass, then the core's seal
 * (CRC-32C over the batch). Returns None - nothing done - for anything else (not a list, empty,
 * an item not exactly bytes, a field out of its range, a batch over 2 GiB, no seal function), for
 * the caller's general encoder to handle or refuse precisely. The GIL is held throughout, so the
 * list cannot change under the two passes. O(bytes). */
static PyObject *encode_value_list(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "encode_value_list takes 8 arguments");
        return NULL;
    }
    PyObject *records = args[0];
    long long f[7];
    for (int i = 0; i < 7; i++) {
        int overflow = 0;
        if (!PyLong_Check(args[i + 1])) Py_RETURN_NONE;
        f[i] = PyLong_AsLongLongAndOverflow(args[i + 1], &overflow);
        if (overflow) Py_RETURN_NONE;
        if (f[i] == -1 && PyErr_Occurred()) return NULL;
    }
    long long now_ms = f[0], base_offset = f[1], epoch = f[2], pid = f[3], pepoch = f[4], seq = f[5], attrs = f[6];
    if (epoch < INT32_MIN || epoch > INT32_MAX || pepoch < INT16_MIN || pepoch > INT16_MAX || seq < INT32_MIN ||
        seq > INT32_MAX || attrs < 0 || attrs > 0xffff || base_offset < 0 || seal_fn == NULL) {
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(records)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (n <= 0 || n > 0x7fffffff) Py_RETURN_NONE;
    PyObject **items = ((PyListObject *)records)->ob_item;
    /* Pass 1: sizes, with plg_batch_encode_values's limits. */
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = items[i];
        if (!PyBytes_CheckExact(v)) Py_RETURN_NONE;
        uint64_t vl = (uint64_t)PyBytes_GET_SIZE(v);
        if (vl > 0x7fffffffu) Py_RETURN_NONE;
        uint64_t body = 4 + ev_varint_size((int64_t)i) + ev_varint_size((int64_t)vl) + vl;
        if (body > 0x7fffffffu) Py_RETURN_NONE;
        total += ev_varint_size((int64_t)body) + body;
        if (total > 0x7fffffffu) Py_RETURN_NONE;
    }
    if (total > 0x7fffffffu - 61) Py_RETURN_NONE;
    uint64_t size = 61 + total; /* PLG_BATCH_OVERHEAD */
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL) return NULL;
    uint8_t *o = (uint8_t *)PyByteArray_AS_STRING(out);
    ev_put(o, (uint64_t)base_offset, 8);
    ev_put(o + 12, (uint64_t)(uint32_t)(int32_t)epoch, 4);
    o[16] = 2; /* magic */
    ev_put(o + 21, (uint64_t)attrs, 2);
    ev_put(o + 23, (uint64_t)(n - 1), 4);
    ev_put(o + 27, (uint64_t)now_ms, 8);
    ev_put(o + 35, (uint64_t)now_ms, 8);
    ev_put(o + 43, (uint64_t)pid, 8);
    ev_put(o + 51, (uint64_t)(uint16_t)(int16_t)pepoch, 2);
    ev_put(o + 53, (uint64_t)(uint32_t)(int32_t)seq, 4);
    ev_put(o + 57, (uint64_t)n, 4);
    /* Pass 2: the records; pass 1 sized exactly these bytes. */
    uint8_t *p = o + 61;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = items[i];
        int64_t vl = (int64_t)PyBytes_GET_SIZE(v);
        int64_t body = 4 + ev_varint_size((int64_t)i) + ev_varint_size(vl) + vl;
        p = ev_put_varint(p, body);
        *p++ = 0; /* attributes */
        *p++ = 0; /* timestampDelta 0 */
        p = ev_put_varint(p, (int64_t)i);
        *p++ = 1; /* keyLength -1 (zig-zag) */
        p = ev_put_varint(p, vl);
        if (vl > 0) {
            memcpy(p, PyBytes_AS_STRING(v), (size_t)vl);
            p += vl;
        }
        *p++ = 0; /* headerCount 0 */
    }
    if ((uint64_t)(p - o) != size || seal_fn(o, size) != 0) { /* cannot happen: sized above */
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "encode_value_list: size mismatch");
        return NULL;
    }
    return out;
}

/* ------------------------------------------------------------- point_lookup */

#include "plg.h"

typedef int (*lookup_fn_t)(const uint8_t *, uint64_t, const uint8_t *, uint64_t, int64_t, int64_t, uint64_t,
                           plg_lookup_cache_t *, plg_record_ref_t *);

/* plg_lookup_cached of the cffi-built C core, set once by set_lookup_function: this module is built
 * apart from that library and calls it through the pointer rather than linking a second copy. */
static lookup_fn_t lookup_fn = NULL;

static PyObject *set_lookup_function(PyObject *self, PyObject *arg) {
    unsigned long long addr = PyLong_AsUnsignedLongLong(arg);
    if (addr == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    lookup_fn = (lookup_fn_t)(uintptr_t)addr;
    Py_RETURN_NONE;
}

/* The record plg_lookup_cached found (rc PLG_OK, *ref filled) as cls(value, key, (), timestamp,
 * offset, timestamp_type), one object per field; None for a control batch's record; 1 when the record
 * has headers (the caller decodes it the general way); PLG_ECORRUPT (an int) for a position past
 * size. offset_obj becomes the record's offset field. */
static PyObject *record_of(const uint8_t *log, uint64_t size, const plg_record_ref_t *ref, PyObject *offset_obj,
                           PyObject *cls) {
    if (ref->attributes & PLG_ATTR_CONTROL) Py_RETURN_NONE;
    if (ref->header_count != 0) return PyLong_FromLong(1);
    /* The C core checked every position against size; check again before copying out. */
    if ((ref->value_len > 0 && (ref->value_pos > size || (uint64_t)ref->value_len > size - ref->value_pos)) ||
        (ref->key_len > 0 && (ref->key_pos > size || (uint64_t)ref->key_len > size - ref->key_pos)))
        return PyLong_FromLong(PLG_ECORRUPT);
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *value = NULL, *key = NULL, *ts = NULL, *tst = NULL, *empty = NULL;
    if (ref->value_len >= 0) {
        value = PyBytes_FromStringAndSize((const char *)log + ref->value_pos, ref->value_len);
    } else {
        value = Py_None;
        Py_INCREF(value);
    }
    if (ref->key_len >= 0) {
        key = PyBytes_FromStringAndSize((const char *)log + ref->key_pos, ref->key_len);
    } else {
        key = Py_None;
        Py_INCREF(key);
    }
    ts = PyLong_FromLongLong(ref->timestamp);
    tst = PyLong_FromLong((ref->attributes & PLG_ATTR_LOG_APPEND_TIME) ? 1 : 0);
    empty = PyTuple_New(0);
    PyObject *rec = (value && key && ts && tst && empty) ? type->tp_alloc(type, 6) : NULL;
    if (rec == NULL) {
        Py_XDECREF(value);
        Py_XDECREF(key);
        Py_XDECREF(ts);
        Py_XDECREF(tst);
        Py_XDECREF(empty);
        return NULL;
    }
    Py_INCREF(offset_obj);
    PyTuple_SET_ITEM(rec, 0, value);
    PyTuple_SET_ITEM(rec, 1, key);
    PyTuple_SET_ITEM(rec, 2, empty);
    PyTuple_SET_ITEM(rec, 3, ts);
    PyTuple_SET_ITEM(rec, 4, offset_obj);
    PyTuple_SET_ITEM(rec, 5, tst);
    return rec;
}


/* point_lookup(map_addr, size, index, base_offset, offset, verified_bytes, cache_addr, cls)
 *
 * LogSegment.lookup_record's fast path in one call: plg_lookup_cached over the segment's map
 * (map_addr: its address, size: the logical end; index: the offset index, a bytes-like object),
 * then the record as cls(value, key, (), timestamp, offset, timestamp_type) with one object per
 * field, built here instead of by a dozen cffi field reads and slices in Python. Returns the
 * record; None when the C core says "not here" (no such offset, a compressed or legacy batch, a
 * control batch); 1 when the record has headers (the caller decodes it the general way); or the
 * C core's negative status for bad bytes. The caller keeps the map and cache alive and holds the
 * segment's lock. */
static PyObject *point_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "point_lookup takes 8 arguments");
        return NULL;
    }
    if (lookup_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "point_lookup: set_lookup_function was not called");
        return NULL;
    }
    PyObject *cls = args[7], *offset_obj = args[4];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) || !PyLong_CheckExact(offset_obj)) {
        PyErr_SetString(PyExc_TypeError, "point_lookup: bad argument types");
        return NULL;
    }
    unsigned long long map_addr = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long size = PyLong_AsUnsignedLongLong(args[1]);
    long long base_offset = PyLong_AsLongLong(args[3]);
    long long offset = PyLong_AsLongLong(offset_obj);
    unsigned long long verified = PyLong_AsUnsignedLongLong(args[5]);
    unsigned long long cache_addr = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    if (map_addr == 0 || cache_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "point_lookup: null map or cache");
        return NULL;
    }
    Py_buffer idx;
    if (PyObject_GetBuffer(args[2], &idx, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *log = (const uint8_t *)(uintptr_t)map_addr;
    plg_record_ref_t ref;
    int rc = lookup_fn(log, (uint64_t)size, (const uint8_t *)idx.buf, (uint64_t)idx.len, (int64_t)base_offset,
                       (int64_t)offset, (uint64_t)verified, (plg_lookup_cache_t *)(uintptr_t)cache_addr, &ref);
    PyBuffer_Release(&idx);
    if (rc == PLG_ENOTFOUND || rc == PLG_EUNSUPPORTED) Py_RETURN_NONE;
    if (rc != PLG_OK) return PyLong_FromLong(rc);
    return record_of(log, size, &ref, offset_obj, cls);
}

/* -------------------------------------------------------------- PointReader */

/* PointReader(segment, state_addr, state, index, map_addr, map_len, base_offset, cache, cache_addr, cls,
 *             tick, fallback)
 *
 * LogSegment.lookup_record's fast path with no Python frame: a segment whose map and lookup cache are
 * made installs one as its instance attribute `lookup_record` (shadowing the method), and removes it
 * before the map or the cache goes away (LogSegment._unmap). A call reader(offset) reads what changes
 * between calls - the segment's size from its plg_segment_state_t (state_addr), the offset index's
 * bytes (index._data), segment.verified_bytes - marks the segment used (segment._cache_used =
 * tick()), then does point_lookup's work. Anything else - an offset that is not an int, a size past
 * the map, an index not loaded, a record with headers, bad bytes - is handed to
 * fallback(segment, offset) (the Python method), which remaps, decodes the general way or raises the
 * error naming the file. The reader holds the segment weakly (no cycle), and the state, index and
 * lookup cache objects strongly (what state_addr and cache_addr point into stays alive); the map is
 * kept alive by the segment, which closes and removes the reader before unmapping (a closed reader
 * takes the fallback, so a reference kept elsewhere never reads an old map). Called under the segment's
 * log's lock, like the method. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *segment_ref; /* weakref to the LogSegment                         */
    PyObject *state;       /* the SegmentState (owns *state_ptr)               */
    PyObject *index;       /* the OffsetIndex (its _data: the entries)          */
    PyObject *cache;       /* the LookupCache (owns *cache_ptr)                 */
    PyObject *cls;         /* Record                                           */
    PyObject *tick;        /* the segment cache's use counter                  */
    PyObject *fallback;    /* LogSegment.lookup_record, the function            */
    const plg_segment_state_t *state_ptr;
    plg_lookup_cache_t *cache_ptr;
    const uint8_t *map;
    uint64_t map_len;
    int64_t base_offset;
} PointReaderObject;

static PyObject *str_data, *str_verified_bytes, *str_cache_used;

static PyObject *point_reader_fallback(PointReaderObject *r, PyObject *segment, PyObject *offset) {
    PyObject *args[2] = {segment, offset};
    return PyObject_Vectorcall(r->fallback, args, 2, NULL);
}

static PyObject *point_reader_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PointReaderObject *r = (PointReaderObject *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "lookup_record takes one argument, the offset");
        return NULL;
    }
    PyObject *offset_obj = args[0];
    PyObject *segment = PyWeakref_GetObject(r->segment_ref); /* borrowed */
    if (segment == NULL) return NULL;
    if (segment == Py_None) Py_RETURN_NONE; /* the segment is gone: nothing is here */
    Py_INCREF(segment);
    PyObject *result = NULL, *idx_obj = NULL, *verified_obj = NULL, *used = NULL;
    uint64_t size = r->state_ptr->size;
    if (!PyLong_CheckExact(offset_obj) || r->map == NULL || size > r->map_len) goto fallback;
    idx_obj = PyObject_GetAttr(r->index, str_data);
    if (idx_obj == NULL) {
        PyErr_Clear(); /* the index is not loaded: the method says so */
        goto fallback;
    }
    if (!PyByteArray_CheckExact(idx_obj)) goto fallback;
    verified_obj = PyObject_GetAttr(segment, str_verified_bytes);
    if (verified_obj == NULL) goto done;
    unsigned long long verified = PyLong_AsUnsignedLongLong(verified_obj);
    long long offset = PyLong_AsLongLong(offset_obj);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        goto fallback;
    }
    used = PyObject_CallNoArgs(r->tick);
    if (used == NULL || PyObject_SetAttr(segment, str_cache_used, used) < 0) goto done;
    plg_record_ref_t ref;
    int rc = lookup_fn(r->map, size, (const uint8_t *)PyByteArray_AS_STRING(idx_obj),
                       (uint64_t)PyByteArray_GET_SIZE(idx_obj), r->base_offset, (int64_t)offset,
                       (uint64_t)verified, r->cache_ptr, &ref);
    if (rc == PLG_ENOTFOUND || rc == PLG_EUNSUPPORTED) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (rc != PLG_OK) goto fallback;
    result = record_of(r->map, size, &ref, offset_obj, r->cls);
    if (result == NULL || !PyLong_CheckExact(result)) goto done;
    Py_CLEAR(result); /* headers, or a position past the end: the general way */
fallback:
    result = point_reader_fallback(r, segment, offset_obj);
done:
    Py_XDECREF(idx_obj);
    Py_XDECREF(verified_obj);
    Py_XDECREF(used);
    Py_DECREF(segment);
    return result;
}

static PyObject *point_reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *segment, *state, *index, *cache, *cls, *tick, *fallback;
    unsigned long long state_addr, map_addr, map_len, cache_addr;
    long long base_offset;
    if (lookup_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PointReader: set_lookup_function was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OKOOKKLOKOOO:PointReader", &segment, &state_addr, &state, &index, &map_addr,
                          &map_len, &base_offset, &cache, &cache_addr, &cls, &tick, &fallback))
        return NULL;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) || !PyCallable_Check(tick) ||
        !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "PointReader: bad argument types");
        return NULL;
    }
    if (state_addr == 0 || map_addr == 0 || cache_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "PointReader: null state, map or cache");
        return NULL;
    }
    PointReaderObject *r = (PointReaderObject *)type->tp_alloc(type, 0);
    if (r == NULL) return NULL;
    r->segment_ref = PyWeakref_NewRef(segment, NULL);
    if (r->segment_ref == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    Py_INCREF(state);
    r->state = state;
    Py_INCREF(index);
    r->index = index;
    Py_INCREF(cache);
    r->cache = cache;
    Py_INCREF(cls);
    r->cls = cls;
    Py_INCREF(tick);
    r->tick = tick;
    Py_INCREF(fallback);
    r->fallback = fallback;
    r->state_ptr = (const plg_segment_state_t *)(uintptr_t)state_addr;
    r->cache_ptr = (plg_lookup_cache_t *)(uintptr_t)cache_addr;
    r->map = (const uint8_t *)(uintptr_t)map_addr;
    r->map_len = map_len;
    r->base_offset = base_offset;
    r->vectorcall = point_reader_call;
    return (PyObject *)r;
}

static void point_reader_dealloc(PyObject *self) {
    PointReaderObject *r = (PointReaderObject *)self;
    Py_XDECREF(r->segment_ref);
    Py_XDECREF(r->state);
    Py_XDECREF(r->index);
    Py_XDECREF(r->cache);
    Py_XDECREF(r->cls);
    Py_XDECREF(r->tick);
    Py_XDECREF(r->fallback);
    Py_TYPE(self)->tp_free(self);
}

/* close(): the map is going away; later calls (a reference kept somewhere) take the fallback. */
static PyObject *point_reader_close(PyObject *self, PyObject *unused) {
    PointReaderObject *r = (PointReaderObject *)self;
    r->map = NULL;
    r->map_len = 0;
    Py_RETURN_NONE;
}

static PyMethodDef point_reader_methods[] = {
    {"close", point_reader_close, METH_NOARGS, "close(): forget the map; later calls take the fallback."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PointReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog._native._sendpath.PointReader",
    .tp_basicsize = sizeof(PointReaderObject),
    .tp_dealloc = point_reader_dealloc,
    .tp_vectorcall_offset = offsetof(PointReaderObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A segment's point lookup bound to its map and lookup cache (see sendpath.c).",
    .tp_new = point_reader_new,
    .tp_methods = point_reader_methods,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef module_methods[] = {
    {"murmur2", py_murmur2, METH_O, "murmur2(data: bytes) -> int: Kafka's Utils.murmur2 (signed 32-bit)."},
    {"bind_future", bind_future, METH_VARARGS,
     "bind_future(result, exception, add_done_callback, repr, metadata_type): the Python functions behind "
     "FutureRecordMetadata's methods (each called with the future first), and the RecordMetadata type "
     "result() builds itself for an acknowledged record of a plain batch."},
    {"set_seal_function", set_seal_function, METH_O,
     "set_seal_function(address): the C core's plg_batch_seal, for encode_value_list."},
    {"encode_value_list", (PyCFunction)(void (*)(void))encode_value_list, METH_FASTCALL,
     "encode_value_list(records, now_ms, base_offset, leader_epoch, producer_id, producer_epoch, base_sequence, "
     "attributes) -> bytearray | None: Log.append's plain batch in one call (see sendpath.c)."},
    {"set_lookup_function", set_lookup_function, METH_O,
     "set_lookup_function(address): the C core's plg_lookup_cached, for point_lookup."},
    {"point_lookup", (PyCFunction)(void (*)(void))point_lookup, METH_FASTCALL,
     "point_lookup(map_addr, size, index, base_offset, offset, verified_bytes, cache_addr, cls): "
     "LogSegment.lookup_record's fast path (see sendpath.c)."},
    {"untrack_records", untrack_records, METH_O,
     "untrack_records(records: list): untrack the tuples holding only bytes, None, ints and () (see sendpath.c)."},
    {"make_records", (PyCFunction)(void (*)(void))make_records, METH_FASTCALL,
     "make_records(cls, values, keys, offsets, timestamps, timestamp_type) -> list: the storage reader's "
     "records, untracked by the cycle collector when they hold only bytes, None and ints (see sendpath.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sendpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pylog._native._sendpath",
    .m_doc = "The producer's per-record send path in C (see sendpath.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__sendpath(void) {
    str_open = PyUnicode_InternFromString("open");
    str_done = PyUnicode_InternFromString("done");
    str_data = PyUnicode_InternFromString("_data");
    str_verified_bytes = PyUnicode_InternFromString("verified_bytes");
    str_cache_used = PyUnicode_InternFromString("_cache_used");
    if (str_open == NULL || str_done == NULL || str_data == NULL || str_verified_bytes == NULL ||
        str_cache_used == NULL) {
        return NULL;
    }
    if (PyType_Ready(&RecordFutureType) < 0 || PyType_Ready(&LockType) < 0 || PyType_Ready(&BatchBaseType) < 0 ||
        PyType_Ready(&SendPathType) < 0 || PyType_Ready(&PointReaderType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&sendpath_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&RecordFutureType);
    if (PyModule_AddObject(m, "RecordFuture", (PyObject *)&RecordFutureType) < 0) {
        Py_DECREF(&RecordFutureType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&BatchBaseType);
    if (PyModule_AddObject(m, "BatchBase", (PyObject *)&BatchBaseType) < 0) {
        Py_DECREF(&BatchBaseType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&LockType);
    if (PyModule_AddObject(m, "Lock", (PyObject *)&LockType) < 0) {
        Py_DECREF(&LockType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SendPathType);
    if (PyModule_AddObject(m, "SendPath", (PyObject *)&SendPathType) < 0) {
        Py_DECREF(&SendPathType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PointReaderType);
    if (PyModule_AddObject(m, "PointReader", (PyObject *)&PointReaderType) < 0) {
        Py_DECREF(&PointReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
