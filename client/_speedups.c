/*
 * Optional C versions of the per-message loops in rill.client.protocol.messages.
 *
 * scan(buf, max_message_size, index_interval, next_mark) -> (count, valid_bytes, error, marks)
 * find_valid(buf, start, max_message_size) -> position or -1
 * decode(buf, topic, partition, base_offset, cls) -> (messages, consumed, status)
 * encode_set(payloads, magic) -> bytes (the uncompressed message set of the payloads)
 *
 * Semantics are those of the _py_* functions in messages.py (the reference); the
 * tests run both on the same inputs. Lengths are checked against the bytes that
 * remain before anything after them is touched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <zlib.h>
#include <stdint.h>

enum { SCAN_OK = 0, SCAN_BAD_CRC = 1, SCAN_BAD_LENGTH = 2, SCAN_TOO_LARGE = 3,
       SCAN_BAD_MAGIC = 4, SCAN_BAD_CODEC = 5, SCAN_COMPRESSED = -1 };

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint32_t payload_crc(const unsigned char *p, Py_ssize_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {  /* zlib takes uInt lengths */
        uInt chunk = n > 0x40000000 ? 0x40000000 : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* Check the message at p (avail bytes available). Returns SCAN_OK with *size set to
 * the whole entry size (4 + length) when valid, 1 (via *incomplete) when it does not
 * fit in avail, or an error code. *header is the payload start, *codec its codec. */
static int check_one(const unsigned char *p, Py_ssize_t avail, long long max_size,
                     Py_ssize_t *entry, int *header, int *codec, int *incomplete) {
    *incomplete = 0;
    if (avail < 4) { *incomplete = 1; return SCAN_OK; }
    int32_t size = (int32_t)be32(p);
    if (size < 5) return SCAN_BAD_LENGTH;
    if ((long long)size > max_size) return SCAN_TOO_LARGE;
    if ((Py_ssize_t)size > avail - 4) { *incomplete = 1; return SCAN_OK; }
    unsigned char magic = p[4];
    if (magic == 1) {
        if (size < 6) return SCAN_BAD_LENGTH;
        *codec = p[5] & 3;
        if (*codec == 3) return SCAN_BAD_CODEC;
        *header = 10;
    } else if (magic == 0) {
        *codec = 0;
        *header = 9;
    } else {
        return SCAN_BAD_MAGIC;
    }
    uint32_t stored = be32(p + *header - 4);
    if (payload_crc(p + *header, (Py_ssize_t)size + 4 - *header) != stored) return SCAN_BAD_CRC;
    *entry = (Py_ssize_t)size + 4;
    return SCAN_OK;
}

static PyObject *speed_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long max_size, interval, next_mark;
    if (!PyArg_ParseTuple(args, "y*LLL", &view, &max_size, &interval, &next_mark)) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0, count = 0;
    int error = SCAN_OK;
    PyObject *marks = PyList_New(0);
    if (!marks) { PyBuffer_Release(&view); return NULL; }
    while (1) {
        Py_ssize_t entry; int header, codec, incomplete;
        error = check_one(buf + pos, end - pos, max_size, &entry, &header, &codec, &incomplete);
        if (error != SCAN_OK || incomplete) break;
        if (next_mark >= 0 && next_mark <= pos) {
            PyObject *m = PyLong_FromSsize_t(pos);
            if (!m || PyList_Append(marks, m) < 0) { Py_XDECREF(m); Py_DECREF(marks); PyBuffer_Release(&view); return NULL; }
            Py_DECREF(m);
            next_mark = pos + interval;
        }
        pos += entry;
        count++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nniN)", count, pos, error, marks);
}

static PyObject *speed_find_valid(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    long long max_size;
    if (!PyArg_ParseTuple(args, "y*nL", &view, &start, &max_size)) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t found = -1;
    for (Py_ssize_t pos = start < 0 ? 0 : start; pos + 4 <= view.len; pos++) {
        Py_ssize_t entry; int header, codec, incomplete;
        int error = check_one(buf + pos, view.len - pos, max_size, &entry, &header, &codec, &incomplete);
        if (error == SCAN_OK && !incomplete) { found = pos; break; }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(found);
}

static PyObject *speed_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *topic, *cls;
    long partition_value;
    long long base;
    if (!PyArg_ParseTuple(args, "y*OlLO", &view, &topic, &partition_value, &base, &cls)) return NULL;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    int status = SCAN_OK;
    PyObject *out = PyList_New(0);
    PyObject *partition = PyLong_FromLong(partition_value);
    if (!out || !partition) goto fail;
    while (1) {
        Py_ssize_t entry; int header, codec, incomplete;
        status = check_one(buf + pos, end - pos, (long long)0x7FFFFFFF, &entry, &header, &codec, &incomplete);
        if (status != SCAN_OK || incomplete) break;
        if (codec != 0) { status = SCAN_COMPRESSED; break; }
        PyObject *item = type->tp_alloc(type, 6);
        if (!item) goto fail;
        PyObject *offset = PyLong_FromLongLong(base + pos);
        PyObject *next = PyLong_FromLongLong(base + pos + entry);
        PyObject *value = PyBytes_FromStringAndSize((const char *)buf + pos + header, entry - header);
        if (!offset || !next || !value) {
            Py_XDECREF(offset); Py_XDECREF(next); Py_XDECREF(value); Py_DECREF(item);
            goto fail;
        }
        Py_INCREF(topic); Py_INCREF(partition); Py_INCREF(Py_None);
        PyTuple_SET_ITEM(item, 0, topic);
        PyTuple_SET_ITEM(item, 1, partition);
        PyTuple_SET_ITEM(item, 2, offset);
        PyTuple_SET_ITEM(item, 3, next);
        PyTuple_SET_ITEM(item, 4, value);
        PyTuple_SET_ITEM(item, 5, Py_None);
        /* Every field is a str, int, bytes or None, so the tuple can never be part of
         * a reference cycle: untrack it, or decoding a large fetch triggers the
         * cyclic collector every 700 messages over an ever larger young generation. */
        PyObject_GC_UnTrack(item);
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0) goto fail;
        pos += entry;
    }
    Py_DECREF(partition);
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nni)", out, pos, status);
fail:
    Py_XDECREF(out);
    Py_XDECREF(partition);
    PyBuffer_Release(&view);
    return NULL;
}

/* The payloads' sizes and addresses: every item must export a contiguous buffer. */
static int payload_view(PyObject *item, Py_buffer *view) {
    if (PyObject_GetBuffer(item, view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "a payload must be bytes-like, not %.100s", Py_TYPE(item)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *speed_encode_set(PyObject *self, PyObject *args) {
    PyObject *payloads;
    int magic;
    if (!PyArg_ParseTuple(args, "Oi", &payloads, &magic)) return NULL;
    if (magic != 0 && magic != 1) {
        PyErr_Format(PyExc_ValueError, "unknown magic %d", magic);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(payloads, "payloads must be iterable");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), header = magic == 1 ? 10 : 9, total = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer *views = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    Py_ssize_t held = 0;
    PyObject *out = NULL;
    if (!views) { PyErr_NoMemory(); goto done; }
    for (; held < n; held++) {
        if (payload_view(items[held], &views[held]) < 0) goto done;
        Py_ssize_t length = views[held].len + header - 4;  /* the length field */
        if (length > 0x7FFFFFFF || total > PY_SSIZE_T_MAX - 4 - length) {
            held++;
            PyErr_SetString(PyExc_OverflowError, "message too large for its int32 length field");
            goto done;
        }
        total += 4 + length;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = views[i].len;
        uint32_t length = (uint32_t)(len + header - 4);
        p[0] = length >> 24; p[1] = length >> 16; p[2] = length >> 8; p[3] = length;
        p[4] = (unsigned char)magic;
        if (magic == 1) p[5] = 0;  /* attributes: no compression */
        unsigned char *payload = p + header;
        memcpy(payload, views[i].buf, len);
        uint32_t crc = payload_crc(payload, len);  /* of the copy: what is sent is what is checked */
        unsigned char *c = p + header - 4;
        c[0] = crc >> 24; c[1] = crc >> 16; c[2] = crc >> 8; c[3] = crc;
        p += header + len;
    }
done:
    for (Py_ssize_t i = 0; i < held; i++) {
        if (views[i].obj) PyBuffer_Release(&views[i]);
    }
    PyMem_Free(views);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", speed_scan, METH_VARARGS, "Validate a message set (see messages.scan)."},
    {"find_valid", speed_find_valid, METH_VARARGS, "First position of a whole valid message, or -1."},
    {"decode", speed_decode, METH_VARARGS, "Decode uncompressed messages (see messages._py_decode)."},
    {"encode_set", speed_encode_set, METH_VARARGS, "Encode payloads as a message set (see messages._py_encode_set)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
