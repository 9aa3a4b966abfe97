/*
 * _kineto_scan: one pass over a Kineto (Chrome trace) JSON document that
 * returns its events as columns, without a Python object per event.
 *
 * scan(buffer) -> dict or None
 *   n            number of entries in traceEvents
 *   ph           bytes, n x uint8: the phase character ('X', 'i', 's', 'M', ...; 0 when absent)
 *   cat, name,   bytes, n x int32: token ids (-1 when absent) into ``tokens``
 *   pid, tid, id
 *   ts, dur      bytes, n x float64 (NaN when absent)
 *   args_start,  bytes, n x int64: byte range of the raw "args" object (length 0 when absent)
 *   args_len
 *   tokens       list of bytes: each distinct raw token once, quotes included for
 *                strings (so "12" and 12 stay apart); the caller decodes them
 *   top          list of (key bytes, start, end): the other top-level members, raw
 *
 * None means "not the simple shape this scanner reads" (malformed JSON, escaped
 * keys, a traceEvents that is not an array of objects ...): the caller then uses
 * the general decoder, which also produces the precise error message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    const char *end;
    int bad;
} Cursor;

/* ---- growable column ------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len;  /* bytes used */
    Py_ssize_t cap;
} Buf;

static int buf_push(Buf *b, const void *item, Py_ssize_t size) {
    if (b->len + size > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->len + size) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, item, size);
    b->len += size;
    return 0;
}

/* ---- token interning (open addressing on the raw bytes) ---------------------------- */

typedef struct {
    const char *s;
    Py_ssize_t len;
    uint64_t hash;
    int32_t id;
} Slot;

typedef struct {
    Slot *slots;
    Py_ssize_t cap;  /* power of two */
    Py_ssize_t count;
    Buf order;       /* Slot index by id: (s, len) pairs */
} Table;

/* A word-at-a-time multiplicative hash: names are long kernel signatures. */
static uint64_t token_hash(const char *s, Py_ssize_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    Py_ssize_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, len - i);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

static int table_grow(Table *t) {
    Py_ssize_t cap = t->cap ? t->cap * 2 : 1024;
    Slot *slots = calloc(cap, sizeof(Slot));
    if (!slots) return -1;
    for (Py_ssize_t i = 0; i < t->cap; i++) {
        if (t->slots[i].s) {
            Py_ssize_t j = t->slots[i].hash & (cap - 1);
            while (slots[j].s) j = (j + 1) & (cap - 1);
            slots[j] = t->slots[i];
        }
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

static int32_t table_id(Table *t, const char *s, Py_ssize_t len) {
    if ((t->count + 1) * 2 > t->cap && table_grow(t) < 0) return -2;
    uint64_t h = token_hash(s, len);
    Py_ssize_t j = h & (t->cap - 1);
    while (t->slots[j].s) {
        if (t->slots[j].hash == h && t->slots[j].len == len && memcmp(t->slots[j].s, s, len) == 0)
            return t->slots[j].id;
        j = (j + 1) & (t->cap - 1);
    }
    t->slots[j].s = s;
    t->slots[j].len = len;
    t->slots[j].hash = h;
    t->slots[j].id = (int32_t)t->count;
    const char *pair[2] = {s, (const char *)(intptr_t)len};
    if (buf_push(&t->order, pair, sizeof(pair)) < 0) return -2;
    return (int32_t)t->count++;
}

/* ---- JSON scanning ------------------------------------------------------------------- */

/* Characters that end a number or literal, and those that make up a number. */
static unsigned char DELIM[256], NUMERIC[256];

static void init_tables(void) {
    for (const char *p = ",}] \n\r\t"; *p; p++) DELIM[(unsigned char)*p] = 1;
    for (const char *p = "0123456789+-.eE"; *p; p++) NUMERIC[(unsigned char)*p] = 1;
}

static void skip_ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int expect(Cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    c->bad = 1;
    return 0;
}

/* A string token from its opening quote; *escaped set when it holds a backslash. */
static const char *scan_string(Cursor *c, int *escaped) {
    const char *start = c->p;
    if (c->p >= c->end || *c->p != '"') {
        c->bad = 1;
        return NULL;
    }
    c->p++;
    *escaped = 0;
    while (c->p < c->end) {
        const char *q = memchr(c->p, '"', c->end - c->p);
        if (!q) break;
        if (memchr(c->p, '\\', q - c->p)) *escaped = 1;
        /* the quote ends the string unless an odd run of backslashes precedes it */
        const char *b = q;
        while (b > c->p && b[-1] == '\\') b--;
        c->p = q + 1;
        if (((q - b) & 1) == 0) return start;
    }
    c->bad = 1;
    return NULL;
}

/* Skip an object or array by counting brackets outside strings: one tight loop
 * (the args of CPU ops, with their shape lists, are most of a trace's bytes).
 * Well-formedness inside is not checked here: a scanned trace is also decoded
 * by msgspec for the values the analyses read. */
static void skip_balanced(Cursor *c) {
    int depth = 0;
    const char *p = c->p, *end = c->end;
    while (p < end) {
        char ch = *p;
        if (ch == '"') {
            p++;
            for (;;) {
                const char *q = memchr(p, '"', end - p);
                if (!q) {
                    c->bad = 1;
                    return;
                }
                /* count the backslashes right before the quote: odd means escaped */
                const char *b = q;
                while (b > p && b[-1] == '\\') b--;
                p = q + 1;
                if (((q - b) & 1) == 0) break;
            }
            continue;
        }
        if (ch == '{' || ch == '[') depth++;
        else if (ch == '}' || ch == ']') {
            if (--depth == 0) {
                c->p = p + 1;
                return;
            }
        }
        p++;
    }
    c->bad = 1;
}

static void skip_value(Cursor *c) {
    skip_ws(c);
    if (c->p >= c->end) {
        c->bad = 1;
        return;
    }
    char ch = *c->p;
    if (ch == '"') {
        int esc;
        scan_string(c, &esc);
    } else if (ch == '{' || ch == '[') {
        skip_balanced(c);
    } else {
        /* number or literal: up to the next delimiter */
        const char *start = c->p;
        while (c->p < c->end && !DELIM[(unsigned char)*c->p]) c->p++;
        if (c->p == start) c->bad = 1;
    }
}

/* The raw token of a scalar value (a string with its quotes, or a number). */
static const char *scalar_token(Cursor *c, Py_ssize_t *len) {
    skip_ws(c);
    const char *start = c->p;
    if (c->p < c->end && *c->p == '"') {
        int esc;
        if (!scan_string(c, &esc)) return NULL;
    } else {
        while (c->p < c->end && !DELIM[(unsigned char)*c->p]) c->p++;
        if (c->p == start || *start == '{' || *start == '[') {
            c->bad = 1;
            return NULL;
        }
    }
    *len = c->p - start;
    return start;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static double number_value(Cursor *c) {
    skip_ws(c);
    const char *start = c->p;
    while (c->p < c->end && NUMERIC[(unsigned char)*c->p]) c->p++;
    if (c->p == start || c->p - start > 63) {
        c->bad = 1;
        return NAN;
    }
    /* Fast path (Clinger): digits[.digits] with a mantissa below 2^53 and at most 22
     * decimals is mantissa / 10^k, both exact, so the division is correctly rounded:
     * the same double strtod (and msgspec) give. Everything else goes to strtod. */
    {
        const char *q = start;
        int neg = 0;
        if (*q == '-') {
            neg = 1;
            q++;
        }
        uint64_t m = 0;
        int digits = 0, frac = -1, ok = q < c->p;
        for (; q < c->p && ok; q++) {
            if (*q >= '0' && *q <= '9') {
                m = m * 10 + (uint64_t)(*q - '0');
                if (++digits > 17) ok = 0;
                if (frac >= 0) frac++;
            } else if (*q == '.' && frac < 0) {
                frac = 0;
            } else {
                ok = 0;
            }
        }
        if (ok && digits > 0 && m < (1ULL << 53) && (frac < 0 ? 0 : frac) <= 22) {
            double v = frac > 0 ? (double)m / POW10[frac] : (double)m;
            return neg ? -v : v;
        }
    }
    char tmp[64];
    memcpy(tmp, start, c->p - start);
    tmp[c->p - start] = 0;
    char *stop;
    double v = strtod(tmp, &stop);
    if (*stop) c->bad = 1;
    return v;
}

#define KEY_IS(k, klen, lit) ((klen) == (Py_ssize_t)sizeof(lit) - 1 && memcmp((k), (lit), (klen)) == 0)

typedef struct {
    Buf ph, cat, name, pid, tid, id, ts, dur, args_start, args_len;
    Buf top;  /* int64 quadruples: key start, key length, value start, value length */
    Table tokens;
    Py_ssize_t n;
} Columns;

static int32_t intern_token(Cursor *c, Table *t) {
    Py_ssize_t len;
    const char *tok = scalar_token(c, &len);
    if (!tok) return -1;
    int32_t id = table_id(t, tok, len);
    if (id == -2) c->bad = 1;
    return id;
}

static void scan_event(Cursor *c, const char *base, Columns *cols) {
    unsigned char ph = 0;
    int32_t cat = -1, name = -1, pid = -1, tid = -1, id = -1;
    double ts = NAN, dur = NAN;
    int64_t astart = 0, alen = 0;
    if (!expect(c, '{')) return;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        while (!c->bad) {
            int esc;
            skip_ws(c);
            const char *k = scan_string(c, &esc);
            if (!k || esc) {
                c->bad = 1;
                return;
            }
            const char *key = k + 1;
            Py_ssize_t klen = c->p - k - 2;
            if (!expect(c, ':')) return;
            if (KEY_IS(key, klen, "ph")) {
                Py_ssize_t len;
                const char *tok = scalar_token(c, &len);
                if (tok && len >= 3 && tok[0] == '"') ph = (unsigned char)tok[1];
            } else if (KEY_IS(key, klen, "cat")) {
                cat = intern_token(c, &cols->tokens);
            } else if (KEY_IS(key, klen, "name")) {
                name = intern_token(c, &cols->tokens);
            } else if (KEY_IS(key, klen, "pid")) {
                pid = intern_token(c, &cols->tokens);
            } else if (KEY_IS(key, klen, "tid")) {
                tid = intern_token(c, &cols->tokens);
            } else if (KEY_IS(key, klen, "id")) {
                id = intern_token(c, &cols->tokens);
            } else if (KEY_IS(key, klen, "ts")) {
                ts = number_value(c);
            } else if (KEY_IS(key, klen, "dur")) {
                dur = number_value(c);
            } else if (KEY_IS(key, klen, "args")) {
                skip_ws(c);
                const char *s = c->p;
                if (c->p >= c->end || *c->p != '{') {
                    c->bad = 1;
                    return;
                }
                skip_value(c);
                astart = s - base;
                alen = c->p - s;
            } else {
                skip_value(c);
            }
            skip_ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (!expect(c, '}')) return;
            break;
        }
    }
    if (c->bad) return;
    if (buf_push(&cols->ph, &ph, 1) || buf_push(&cols->cat, &cat, 4) || buf_push(&cols->name, &name, 4) ||
        buf_push(&cols->pid, &pid, 4) || buf_push(&cols->tid, &tid, 4) || buf_push(&cols->id, &id, 4) ||
        buf_push(&cols->ts, &ts, 8) || buf_push(&cols->dur, &dur, 8) || buf_push(&cols->args_start, &astart, 8) ||
        buf_push(&cols->args_len, &alen, 8)) {
        c->bad = 1;
        return;
    }
    cols->n++;
}

static void free_columns(Columns *cols) {
    Buf *bufs[] = {&cols->ph, &cols->cat, &cols->name, &cols->pid, &cols->tid, &cols->id,
                   &cols->ts, &cols->dur, &cols->args_start, &cols->args_len, &cols->top, &cols->tokens.order};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]->data);
    free(cols->tokens.slots);
}

static int put_bytes(PyObject *dict, const char *key, Buf *b) {
    PyObject *v = PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
    if (!v) return -1;
    int rc = PyDict_SetItemString(dict, key, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *build_result(Columns *cols, PyObject *top) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    PyObject *n = PyLong_FromSsize_t(cols->n);
    if (!n || PyDict_SetItemString(d, "n", n) < 0) goto fail;
    Py_DECREF(n);
    n = NULL;
    if (put_bytes(d, "ph", &cols->ph) || put_bytes(d, "cat", &cols->cat) || put_bytes(d, "name", &cols->name) ||
        put_bytes(d, "pid", &cols->pid) || put_bytes(d, "tid", &cols->tid) || put_bytes(d, "id", &cols->id) ||
        put_bytes(d, "ts", &cols->ts) || put_bytes(d, "dur", &cols->dur) ||
        put_bytes(d, "args_start", &cols->args_start) || put_bytes(d, "args_len", &cols->args_len))
        goto fail;
    Py_ssize_t count = cols->tokens.count;
    PyObject *tokens = PyList_New(count);
    if (!tokens) goto fail;
    const char **pairs = (const char **)cols->tokens.order.data;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *b = PyBytes_FromStringAndSize(pairs[2 * i], (Py_ssize_t)(intptr_t)pairs[2 * i + 1]);
        if (!b) {
            Py_DECREF(tokens);
            goto fail;
        }
        PyList_SET_ITEM(tokens, i, b);
    }
    if (PyDict_SetItemString(d, "tokens", tokens) < 0) {
        Py_DECREF(tokens);
        goto fail;
    }
    Py_DECREF(tokens);
    if (PyDict_SetItemString(d, "top", top) < 0) goto fail;
    return d;
fail:
    Py_XDECREF(n);
    Py_DECREF(d);
    return NULL;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *base = view.buf;
    Cursor c = {base, base + view.len, 0};
    Columns cols;
    memset(&cols, 0, sizeof(cols));
    PyObject *top = PyList_New(0);
    int found = 0;
    if (!top) goto error;

    Py_BEGIN_ALLOW_THREADS
    if (expect(&c, '{')) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') c.p++;
        else {
            while (!c.bad) {
                int esc;
                skip_ws(&c);
                const char *k = scan_string(&c, &esc);
                if (!k || esc) {
                    c.bad = 1;
                    break;
                }
                Py_ssize_t klen = c.p - k - 2;
                if (!expect(&c, ':')) break;
                if (KEY_IS(k + 1, klen, "traceEvents")) {
                    found = 1;
                    skip_ws(&c);
                    if (!expect(&c, '[')) break;
                    skip_ws(&c);
                    if (c.p < c.end && *c.p == ']') c.p++;
                    else {
                        while (!c.bad) {
                            scan_event(&c, base, &cols);
                            skip_ws(&c);
                            if (c.p < c.end && *c.p == ',') {
                                c.p++;
                                continue;
                            }
                            expect(&c, ']');
                            break;
                        }
                    }
                } else {
                    skip_ws(&c);
                    const char *s = c.p;
                    skip_value(&c);
                    if (!c.bad) {
                        /* offsets now; Python objects once the GIL is back */
                        int64_t rec[4] = {k + 1 - base, klen, s - base, c.p - s};
                        if (buf_push(&cols.top, rec, sizeof(rec)) < 0) c.bad = 1;
                    }
                }
                skip_ws(&c);
                if (c.p < c.end && *c.p == ',') {
                    c.p++;
                    continue;
                }
                expect(&c, '}');
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS

    if (c.bad || !found) {
        free_columns(&cols);
        Py_DECREF(top);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    const int64_t *recs = (const int64_t *)cols.top.data;
    for (Py_ssize_t i = 0; i < cols.top.len / (Py_ssize_t)(4 * sizeof(int64_t)); i++) {
        PyObject *item = Py_BuildValue("(y#LL)", base + recs[4 * i], (Py_ssize_t)recs[4 * i + 1],
                                       (long long)recs[4 * i + 2], (long long)(recs[4 * i + 2] + recs[4 * i + 3]));
        if (!item || PyList_Append(top, item) < 0) {
            Py_XDECREF(item);
            goto error;
        }
        Py_DECREF(item);
    }
    PyObject *result = build_result(&cols, top);
    free_columns(&cols);
    Py_DECREF(top);
    PyBuffer_Release(&view);
    return result;
error:
    free_columns(&cols);
    Py_XDECREF(top);
    PyBuffer_Release(&view);
    return NULL;
}

/* gather(buffer, starts, lengths) -> b"[" + b",".join(buffer[s:s+n] or b"{}") + b"]"
 * starts and lengths: int64 arrays (as bytes); one JSON array of raw args objects,
 * to decode them with one msgspec call. */
static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data, starts, lengths;
    if (!PyArg_ParseTuple(args, "y*y*y*", &data, &starts, &lengths)) return NULL;
    Py_ssize_t n = starts.len / 8;
    const int64_t *st = starts.buf, *ln = lengths.buf;
    PyObject *out = NULL;
    if (lengths.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths differ in length");
        goto done;
    }
    Py_ssize_t total = 2 + (n ? n - 1 : 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || ln[i] < 0 || st[i] + ln[i] > data.len) {
            PyErr_SetString(PyExc_ValueError, "range outside the buffer");
            goto done;
        }
        total += ln[i] ? ln[i] : 2;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *w = PyBytes_AS_STRING(out);
    *w++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *w++ = ',';
        if (ln[i]) {
            memcpy(w, (const char *)data.buf + st[i], ln[i]);
            w += ln[i];
        } else {
            *w++ = '{';
            *w++ = '}';
        }
    }
    *w++ = ']';
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "Columns of a Kineto trace's traceEvents (see the module source), or None."},
    {"gather", gather, METH_VARARGS, "One JSON array of the raw args at (starts, lengths)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan",
                                    "One-pass columnar scan of Kineto JSON traces.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    init_tables();
    return PyModule_Create(&module);
}
