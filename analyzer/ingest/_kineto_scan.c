/*
 * _kineto_scan: a streaming, bounded scanner of Kineto (Chrome trace) JSON that
 * returns the events as columns, without a Python object per event.
 *
 *   s = Scanner(keep, max_value_bytes=..., max_depth=..., max_tokens=..., max_kept_bytes=...)
 *   s.feed(chunk)   any number of times, with consecutive pieces of the document
 *   s.finish()  ->  dict (below)
 *
 * The scanner never holds the document: it keeps the bytes not yet parsed (at most
 * one event, or one top-level member, plus a chunk), the columns of the events it
 * keeps, their args when asked, and each distinct token once.
 *
 * keep(ph: int, cat: bytes | None, name: bytes | None) -> int is called once per
 * distinct (ph, cat, name) and says what to keep of such events:
 *   0 count only   1 the row   2 the row and its raw args
 *   3, 4 as 1, 2 but only on a CPU-only trace: once an event of category "kernel"
 *        is seen, the rows kept so far under 3 or 4 are dropped, and later ones too.
 *
 * finish() returns
 *   n            events in traceEvents (kept or not); by_ph: bytes, 256 x int64 counts
 *   kept         rows kept (slice rows and other rows together)
 *   ph           bytes, slice rows x uint8: the kept events of the slice phases (X, i, I), in
 *                file order (the other phases' rows are apart: o_*, below)
 *   cat, name,   bytes, slice rows x int32: token ids (-1 when absent) into ``tokens``
 *   pid, tid, id
 *   ts, dur      bytes, slice rows x float64 (NaN when absent)
 *   args_start,  bytes, slice rows x int64: the row's raw args object in ``args`` (length 0:
 *   args_len     none kept)
 *   args         bytes: the slice rows' kept args objects, one after another in row order
 *   o_ph, o_cat, the other kept rows (metadata M, flows s t f), in file order, as the slice
 *   o_name, ...  rows' columns of the same name (no dur); o_args_start and o_args_len lie in
 *                ``meta_args``. Apart, so that the slice rows' columns are the slices' own:
 *                read as they are, not gathered (a third of a trace's events are flows)
 *   meta_args    bytes: the metadata rows' kept args objects
 *   tokens       list of bytes: each distinct raw token once, quotes included for
 *                strings (so "12" and 12 stay apart); the caller decodes them
 *   token_ints,  bytes, tokens x int64 and x uint8: each token's value where it is a plain JSON
 *   token_is_int integer (1; NULL_I64 outside int64), else 0
 *   top          list of (key bytes, raw value bytes): the other top-level members
 *   gpu          whether an event of category "kernel" was seen
 *   took         list of len(take_keys) bytes, each slice rows x int64 (a column per key): the values of the args keys given as
 *                take_keys=[(key, 'i'|'f'|'p'), ...], read while scanning (integers as int64,
 *                NULL_I64 when absent or out of range; floats as a double's bits, NaN when
 *                absent or null), so that most events' args need no decoding
 *   took_flags   bytes, slice rows x uint32: 1 when a taken value was not of its type (decode that
 *                row to read it, or to refuse it); 1 << (1 + k) when presence key k is there
 *
 * Errors (ValueError, one line, with the byte offset) are the input's: invalid
 * JSON, a value nested deeper than max_depth, one event or member larger than
 * max_value_bytes, more distinct tokens than max_tokens, more memory kept than max_kept_bytes (the
 * kept rows, their args and the distinct tokens: "keeps more than the limit: N events so far"),
 * a control character, a traceEvents entry that
 * is not an object, a field of the wrong JSON type, data after the document, or a
 * document that ends too early.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- growable buffer ------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

/* Room for extra more bytes (the rare path, out of line: pushes stay a few moves). */
static __attribute__((noinline)) int buf_grow(Buf *b, Py_ssize_t extra) {
    Py_ssize_t cap = b->cap ? b->cap * 2 : 1 << 12;
    while (cap < b->len + extra) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    return b->len + extra <= b->cap ? 0 : buf_grow(b, extra);
}

/* Inlined: a push of a row's value (a constant size) is a move, not a call to memcpy. */
static inline __attribute__((always_inline)) int buf_push(Buf *b, const void *item, Py_ssize_t size) {
    if (buf_reserve(b, size) < 0) return -1;
    memcpy(b->data + b->len, item, size);
    b->len += size;
    return 0;
}

/* ---- arena: token bytes that never move ------------------------------------------- */

typedef struct Block {
    struct Block *next;
    Py_ssize_t used, cap;
    char data[];
} Block;

typedef struct {
    Block *head;
} Arena;

static const char *arena_copy(Arena *a, const char *s, Py_ssize_t len) {
    if (!a->head || a->head->used + len > a->head->cap) {
        Py_ssize_t cap = len > (1 << 16) ? len : (1 << 16);
        Block *b = malloc(sizeof(Block) + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    char *out = a->head->data + a->head->used;
    memcpy(out, s, len);
    a->head->used += len;
    return out;
}

static void arena_free(Arena *a) {
    while (a->head) {
        Block *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* ---- token interning (open addressing on the raw bytes) --------------------------------- */

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
    Buf order;       /* (s, len) pairs by id */
} Table;

static uint64_t mix(uint64_t h) {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 29);
}

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
    uint64_t w = 0;  /* the last 0-7 bytes, little-endian as memcpy would put them: a loop, since a
                        call to memcpy of a variable length and the load after it cost a tenth of the scan */
    for (Py_ssize_t k = len - 1; k >= i; k--) w = (w << 8) | (unsigned char)s[k];
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

/* The id of a token (copied into the arena the first time); -2 on failure. */
static int32_t table_id(Table *t, Arena *a, const char *s, Py_ssize_t len) {
    if ((t->count + 1) * 2 > t->cap && table_grow(t) < 0) return -2;
    uint64_t h = token_hash(s, len);
    Py_ssize_t j = h & (t->cap - 1);
    while (t->slots[j].s) {
        if (t->slots[j].hash == h && t->slots[j].len == len && memcmp(t->slots[j].s, s, len) == 0)
            return t->slots[j].id;
        j = (j + 1) & (t->cap - 1);
    }
    const char *own = arena_copy(a, s, len ? len : 1);
    if (!own) return -2;
    t->slots[j].s = own;
    t->slots[j].len = len;
    t->slots[j].hash = h;
    t->slots[j].id = (int32_t)t->count;
    const char *pair[2] = {own, (const char *)(intptr_t)len};
    if (buf_push(&t->order, pair, sizeof(pair)) < 0) return -2;
    return (int32_t)t->count++;
}

/* ---- keep cache: (ph, cat, name) -> mode ------------------------------------------- */

typedef struct {
    uint64_t *keys;  /* key + 1; 0 = empty */
    unsigned char *modes;
    Py_ssize_t cap, count;
} Cache;

static int cache_grow(Cache *c) {
    Py_ssize_t cap = c->cap ? c->cap * 2 : 256;
    uint64_t *keys = calloc(cap, sizeof(uint64_t));
    unsigned char *modes = calloc(cap, 1);
    if (!keys || !modes) {
        free(keys);
        free(modes);
        return -1;
    }
    for (Py_ssize_t i = 0; i < c->cap; i++) {
        if (c->keys[i]) {
            Py_ssize_t j = mix(c->keys[i]) & (cap - 1);
            while (keys[j]) j = (j + 1) & (cap - 1);
            keys[j] = c->keys[i];
            modes[j] = c->modes[i];
        }
    }
    free(c->keys);
    free(c->modes);
    c->keys = keys;
    c->modes = modes;
    c->cap = cap;
    return 0;
}

/* ---- the scanner ---------------------------------------------------------------------- */

#define MAX_TAKE 16
#define NULL_I64 INT64_MIN
/* took_flags bits: ODD, a taken key whose value is not of its type (an integer given as a
 * float, a string, null ...: the caller decodes such rows itself, with their errors);
 * then one bit per presence key (1 << (1 + its index)) */
#define TOOK_ODD 1u

enum {
    S_START, S_FIRST_KEY, S_KEY, S_COLON, S_MEMBER, S_MEMBER_SEP,
    S_EVENTS_OPEN, S_FIRST_EVENT, S_EVENT, S_EVENT_SEP, S_END
};

typedef struct {
    PyObject_HEAD
    PyObject *keep;
    PyObject *top;          /* list of (key, value) */
    Buf pending;            /* bytes not parsed yet */
    Py_ssize_t pos;         /* parsed prefix of pending */
    long long offset;       /* document offset of pending[0] */
    int state;
    char key[64];
    Py_ssize_t key_len;     /* -1: a key too long to be one of ours (the value is kept raw anyway) */
    int is_events;
    int found_events;
    Py_ssize_t max_value, max_tokens;
    Py_ssize_t max_kept;    /* bytes of kept rows, args and tokens (what memory follows) */
    Py_ssize_t row_bytes;   /* column bytes of one kept row */
    Py_ssize_t token_bytes; /* the distinct tokens' bytes, with their table entries */
    int max_depth;
    /* columns */
    Buf ph, cat, name, pid, tid, id, ts, dur, astart, alen, cond, args;  /* slice rows (X, i, I) */
    Buf o_ph, o_cat, o_name, o_pid, o_tid, o_id, o_ts, o_astart, o_alen;  /* other rows (M, s, t, f) */
    Buf margs;  /* the metadata events' (ph M) kept args: args holds the slice rows' in row order */
    long long n, by_ph[256];
    Table tokens;
    Arena arena;
    /* per field (cat, name, pid, tid, id: the bit of F_*), the token the last event gave it */
    const char *last_tok[5];
    Py_ssize_t last_len[5];
    int32_t last_id[5];
    Cache cache;
    int gpu;
    int32_t kernel_tok;     /* token id of "kernel" once seen */
    int finished;
    char **args_keys;       /* keep only these args keys (NULL: all of them) */
    Py_ssize_t *args_key_lens;
    Py_ssize_t n_args_keys;
    /* args values read into columns while scanning (take_keys): per kept row, one int64
     * slot per key (an integer, a double's bits, or NULL_I64) and a uint32 of flags */
    char take_names[MAX_TAKE][64];
    Py_ssize_t take_lens[MAX_TAKE];
    uint32_t take_of_len[64];   /* per key length, the bits of the taken keys of that length */
    char take_types[MAX_TAKE];  /* 'i' integer, 'f' float, 'p' presence only */
    Py_ssize_t n_take;
    Buf took[MAX_TAKE], took_flags;  /* a column per taken key: each read alone for some rows */
    /* feed() parses without the GIL, so that another thread runs Python meanwhile (the
     * imports and the store of a one-rank analysis: ingest/one.py); what calls into
     * Python (the keep callback, errors, top-level members) takes it back first */
    PyThreadState *released;  /* non-NULL while the GIL is released */
    int busy;                 /* inside feed(): a second thread's feed is refused */
} Scanner;

/* The GIL, held again (a no-op where it is held). */
static void gil_hold(Scanner *s) {
    if (s->released) {
        PyEval_RestoreThread(s->released);
        s->released = NULL;
    }
}

/* The GIL, released (a no-op where it is). */
static void gil_drop(Scanner *s) {
    if (!s->released) s->released = PyEval_SaveThread();
}

/* Out of memory, with the GIL held again to say so; -1. */
static int nomem(Scanner *s) {
    gil_hold(s);
    PyErr_NoMemory();
    return -1;
}

static unsigned char DELIM[256], NUMERIC[256], WS[256], DIGIT[256];

static void init_tables(void) {
    for (const char *p = ",}] \n\r\t:"; *p; p++) DELIM[(unsigned char)*p] = 1;
    for (const char *p = "0123456789+-.eE"; *p; p++) NUMERIC[(unsigned char)*p] = 1;
    for (const char *p = "0123456789"; *p; p++) DIGIT[(unsigned char)*p] = 1;
    for (const char *p = " \n\r\t"; *p; p++) WS[(unsigned char)*p] = 1;
}

/* b[0, n) copied to dst, and the offset of its first control character other than JSON's
 * whitespace, or -1: one pass over the bytes instead of a check and a copy. Blocks are
 * checked 16 bytes at a time (SSE2: a byte below 0x20 is one whose unsigned max with 0x1F
 * is 0x1F) without a branch per byte; only a block that holds one is searched byte by byte. */
static Py_ssize_t copy_checked(unsigned char *dst, const unsigned char *b, Py_ssize_t n) {
    for (Py_ssize_t start = 0; start < n; start += 4096) {
        Py_ssize_t stop = n - start > 4096 ? start + 4096 : n, i = start;
        int found = 0;
#if defined(__SSE2__)
        const __m128i low = _mm_set1_epi8(0x1F), tab = _mm_set1_epi8('\t'), nl = _mm_set1_epi8('\n'),
                      cr = _mm_set1_epi8('\r');
        __m128i acc = _mm_setzero_si128();
        for (; i + 16 <= stop; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(b + i));
            _mm_storeu_si128((__m128i *)(dst + i), v);
            __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(v, low), low);
            __m128i space = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, tab), _mm_cmpeq_epi8(v, nl)),
                                         _mm_cmpeq_epi8(v, cr));
            acc = _mm_or_si128(acc, _mm_andnot_si128(space, control));
        }
        found = _mm_movemask_epi8(acc) != 0;
#endif
        for (; i < stop; i++) {
            dst[i] = b[i];
            found |= (b[i] < 0x20) & (b[i] != '\t') & (b[i] != '\n') & (b[i] != '\r');
        }
        if (found)
            for (i = start; i < stop; i++)
                if (b[i] < 0x20 && !WS[b[i]]) return i;
    }
    return -1;
}

/* Errors: set a Python ValueError naming the document offset; return -1. */
static int fail_at(Scanner *s, const char *at, const char *what) {
    gil_hold(s);
    long long where = s->offset + (at - s->pending.data);
    PyErr_Format(PyExc_ValueError, "%s (at byte %lld)", what, where);
    return -1;
}

/* End of a string token from its opening quote; NULL when the buffer ends first.
 * The first quote or backslash is found 16 bytes at a time (SSE2, which every x86-64 has):
 * most strings are a key or a name of a few dozen bytes, where a call to memchr per string
 * and a second look for backslashes cost more than the search. A backslash skips the byte
 * it escapes (a \\uXXXX's digits hold neither). */
static inline __attribute__((always_inline)) const char *string_end_at(const char *p, const char *end,
                                                                         int *escaped) {
    p++;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
        if (!m) {
            p += 16;
            continue;
        }
        p += __builtin_ctz(m);
        if (*p == '"') return p + 1;
        *escaped = 1;
        p += 2;  /* the backslash and the byte it escapes */
    }
#endif
    while (p < end) {
        if (*p == '"') return p + 1;
        if (*p == '\\') {
            *escaped = 1;
            p += 2;
        } else {
            p++;
        }
    }
    return NULL;
}

static const char *string_end(const char *p, const char *end) {
    int escaped = 0;
    return string_end_at(p, end, &escaped);
}

/* The end of a plain JSON integer at p (an optional minus, digits without a leading zero)
 * that a delimiter follows, else NULL: most numbers in a trace, read in one look. */
static inline const char *integer_end(const char *p, const char *end) {
    const char *q = p + (p < end && *p == '-');
    const char *digits = q;
    while (q < end && DIGIT[(unsigned char)*q]) q++;
    return q > digits && q < end && DELIM[(unsigned char)*q] && (*digits != '0' || q - digits == 1) ? q : NULL;
}

/* Whether [p, end) is a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)? */
static int is_json_number(const char *p, const char *end) {
    const char *q = p;
    if (q < end && *q == '-') q++;
    if (q >= end) return 0;
    if (*q == '0') q++;
    else if (*q >= '1' && *q <= '9') while (q < end && *q >= '0' && *q <= '9') q++;
    else return 0;
    if (q < end && *q == '.') {
        q++;
        if (q >= end || *q < '0' || *q > '9') return 0;
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || *q < '0' || *q > '9') return 0;
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    return q == end;
}

static int is_literal(const char *p, Py_ssize_t len) {
    return (len == 4 && (!memcmp(p, "true", 4) || !memcmp(p, "null", 4))) || (len == 5 && !memcmp(p, "false", 5));
}

/* End of a complete JSON value at p (no surrounding whitespace), or NULL when the
 * buffer ends first (*need = 1) or the value is malformed (*bad set to a message).
 * Objects and arrays: brackets are counted outside strings, at most max_depth deep, and
 * the numbers and literals inside checked; their structure is checked when decoded
 * (msgspec) or scanned (events). */
static const char *value_end(const char *p, const char *end, int max_depth, int final, int *need,
                             const char **bad) {
    if (p >= end) {
        *need = 1;
        return NULL;
    }
    char ch = *p;
    if (ch == '"') {
        const char *e = string_end(p, end);
        if (!e) *need = 1;
        return e;
    }
    if (ch == '{' || ch == '[') {
        int depth = 0;
        while (p < end) {
            ch = *p;
            if (ch == '"') {
                const char *e = string_end(p, end);
                if (!e) {
                    *need = 1;
                    return NULL;
                }
                p = e;
                continue;
            }
            if (ch == '{' || ch == '[') {
                if (++depth > max_depth) {
                    *bad = "JSON nested deeper than the limit";
                    return NULL;
                }
            } else if (ch == '}' || ch == ']') {
                if (--depth == 0) return p + 1;
            } else if (!WS[(unsigned char)ch] && ch != ',' && ch != ':') {
                /* a number or literal inside: JSON's (no NaN, no garbage), as msgspec reads it */
                const char *q = p;
                const char *i = integer_end(p, end);  /* most are integers */
                if (i) {
                    p = i;
                    continue;
                }
                while (q < end && !DELIM[(unsigned char)*q] && *q != '{' && *q != '[' && *q != '"') q++;
                if (q == end) break;
                if (!is_literal(p, q - p) && !is_json_number(p, q)) {
                    *bad = "invalid JSON: not a number, string, object, array or literal";
                    return NULL;
                }
                p = q;
                continue;
            }
            p++;
        }
        *need = 1;
        return NULL;
    }
    const char *start = p;
    const char *i = integer_end(p, end);  /* most are integers */
    if (i) return i;
    while (p < end && !DELIM[(unsigned char)*p]) p++;
    if (p == end && !final) {
        *need = 1;
        return NULL;
    }
    if (p == start) {
        *bad = "invalid JSON: a value was expected";
        return NULL;
    }
    /* a literal or a number: checked for what it is */
    Py_ssize_t len = p - start;
    if ((len == 4 && (!memcmp(start, "true", 4) || !memcmp(start, "null", 4))) ||
        (len == 5 && !memcmp(start, "false", 5)))
        return p;
    unsigned char numeric = 1;
    for (const char *q = start; q < p; q++) numeric &= NUMERIC[(unsigned char)*q];
    if (!numeric) {
        *bad = "invalid JSON: not a number, string, object, array or literal";
        return NULL;
    }
    return p;
}

/* ---- one event, complete in [p, end) ----------------------------------------------- */

typedef struct {
    const char *p, *end;
    const char *bad;
} Cursor;

static void skip_ws(Cursor *c) {
    /* every byte up to a space is whitespace here: feed() refused the other control characters */
    while (c->p < c->end && (unsigned char)*c->p <= ' ') c->p++;
}

static int take(Cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    if (!c->bad) c->bad = "invalid JSON in an event";
    return 0;
}

/* A key: *key points at it, in the buffer where it holds no escape (the usual key), else
 * unescaped into out (at most 63 bytes; longer keys are none of ours: len -1). */
static Py_ssize_t read_key(Cursor *c, char *out, const char **key) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"') {
        c->bad = "invalid JSON in an event: a key was expected";
        return -2;
    }
    int escaped = 0;
    const char *e = string_end_at(c->p, c->end, &escaped);
    if (!e) {
        c->bad = "invalid JSON in an event: an unterminated string";
        return -2;
    }
    const char *q = c->p + 1, *stop = e - 1;
    Py_ssize_t n = 0;
    int too_long = 0;
    *key = out;
    if (!escaped) {  /* the usual key: read where it is */
        n = stop - q;
        c->p = e;
        if (n > 63) return -1;
        *key = q;
        return n;
    }
    while (q < stop) {
        char ch = *q++;
        if (ch == '\\' && q < stop) {
            char x = *q++;
            switch (x) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'u': {
                if (stop - q < 4) { c->bad = "invalid JSON in an event: a bad \\u escape"; return -2; }
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = q[i];
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                           : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                }
                q += 4;
                if (v > 0x7f) { too_long = 1; ch = '?'; } else ch = (char)v;  /* our keys are ASCII */
                break;
            }
            default: ch = x;
            }
        }
        if (n < 63) out[n++] = ch;
        else too_long = 1;
    }
    c->p = e;
    return too_long ? -1 : n;
}

/* A scalar's raw token (a string with its quotes, or a number or literal); an object or
 * array is skipped whole and returned with *is_string = -1 (a wrong type for the caller). */
static const char *scalar(Cursor *c, Py_ssize_t *len, int *is_string, int max_depth) {
    skip_ws(c);
    const char *start = c->p;
    if (c->p < c->end && *c->p == '"') {
        const char *e = string_end(c->p, c->end);
        if (!e) {
            c->bad = "invalid JSON in an event: an unterminated string";
            return NULL;
        }
        c->p = e;
        *is_string = 1;
    } else if (c->p < c->end && (*c->p == '{' || *c->p == '[')) {
        int need = 0;
        const char *bad = NULL;
        const char *e = value_end(c->p, c->end, max_depth, 1, &need, &bad);
        if (!e) {
            c->bad = bad ? bad : "invalid JSON in an event";
            return NULL;
        }
        c->p = e;
        *is_string = -1;
    } else {
        const char *q = integer_end(start, c->end);  /* most are integers */
        if (q) {
            c->p = q;
            *is_string = 0;
            *len = q - start;
            return start;
        }
        while (c->p < c->end && !DELIM[(unsigned char)*c->p]) c->p++;
        if (c->p == start || (!is_literal(start, c->p - start) && !is_json_number(start, c->p))) {
            c->bad = "invalid JSON: not a number, string, object, array or literal";
            return NULL;
        }
        *is_string = 0;
    }
    *len = c->p - start;
    return start;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number (ts, dur) into *out (NaN for null): 0, or NUM_TYPE for a value of another type
 * (skipped) and NUM_RANGE for one beyond a double's range (as msgspec refuses it), both left
 * to the event's phase to judge; -1 with c->bad set for invalid JSON. */
#define NUM_TYPE 1
#define NUM_RANGE 2
static int number(Cursor *c, double *out, int max_depth) {
    skip_ws(c);
    *out = NAN;
    /* The common case in one pass: -?digits[.digits] up to a delimiter (JSON's: no leading
     * zero, a digit after the point), a mantissa below 2^53 and at most 22 decimals: exactly
     * mantissa / 10^k (Clinger), as strtod and msgspec give it. Anything else: below. */
    {
        const char *q = c->p;
        int neg = q < c->end && *q == '-';
        q += neg;
        const char *first = q;
        uint64_t m = 0;
        int digits = 0, frac = -1;
        for (; q < c->end; q++) {
            char ch = *q;
            if (ch >= '0' && ch <= '9') {
                m = m * 10 + (uint64_t)(ch - '0');
                digits++;
                if (frac >= 0) frac++;
            } else if (ch == '.' && frac < 0 && digits > 0) {
                frac = 0;
            } else {
                break;
            }
        }
        if (q < c->end && DELIM[(unsigned char)*q] && digits > 0 && digits <= 17 && frac != 0 && frac <= 22 &&
            m < (1ULL << 53) && !(*first == '0' && q - first > 1 && first[1] != '.')) {
            double v = frac > 0 ? (double)m / POW10[frac] : (double)m;
            *out = neg ? -v : v;
            c->p = q;
            return 0;
        }
    }
    Py_ssize_t len;
    int str;
    const char *start = scalar(c, &len, &str, max_depth);
    if (!start) return -1;
    if (str) return NUM_TYPE;
    if (len == 4 && !memcmp(start, "null", 4)) return 0;
    if (is_literal(start, len)) return NUM_TYPE;
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
            *out = neg ? -v : v;
            return 0;
        }
    }
    char small[64], *tmp = small;
    if (len >= (Py_ssize_t)sizeof(small) && !(tmp = malloc(len + 1))) {
        c->bad = "out of memory";
        return -1;
    }
    memcpy(tmp, start, len);
    tmp[len] = 0;
    double v = strtod(tmp, NULL);
    if (tmp != small) free(tmp);
    if (isinf(v)) return NUM_RANGE;
    *out = v;
    return 0;
}

#define KEY_IS(k, klen, lit) ((klen) == (Py_ssize_t)sizeof(lit) - 1 && memcmp((k), (lit), (klen)) == 0)

/* The keep mode of (ph, cat, name), asking Python once per distinct triple; -1 on error. */
static int keep_mode(Scanner *s, unsigned char ph, int32_t cat, int32_t name) {
    uint64_t key = (((uint64_t)ph << 56) ^ ((uint64_t)(uint32_t)(cat + 1) << 28) ^ (uint64_t)(uint32_t)(name + 1)) + 1;
    if ((s->cache.count + 1) * 2 > s->cache.cap && cache_grow(&s->cache) < 0) return nomem(s);
    Py_ssize_t j = mix(key) & (s->cache.cap - 1);
    while (s->cache.keys[j]) {
        if (s->cache.keys[j] == key) return s->cache.modes[j];
        j = (j + 1) & (s->cache.cap - 1);
    }
    const char **pairs = (const char **)s->tokens.order.data;
    int was_released = s->released != NULL;  /* asked once per distinct triple: rare */
    gil_hold(s);
    PyObject *c = cat >= 0 ? PyBytes_FromStringAndSize(pairs[2 * cat], (Py_ssize_t)(intptr_t)pairs[2 * cat + 1])
                           : (Py_INCREF(Py_None), Py_None);
    PyObject *nm = name >= 0 ? PyBytes_FromStringAndSize(pairs[2 * name], (Py_ssize_t)(intptr_t)pairs[2 * name + 1])
                             : (Py_INCREF(Py_None), Py_None);
    if (!c || !nm) {
        Py_XDECREF(c);
        Py_XDECREF(nm);
        return -1;
    }
    PyObject *r = PyObject_CallFunction(s->keep, "iOO", (int)ph, c, nm);
    Py_DECREF(c);
    Py_DECREF(nm);
    if (!r) return -1;
    long mode = PyLong_AsLong(r);
    Py_DECREF(r);
    if (mode < 0 || mode > 4) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "keep() must return 0 to 4");
        return -1;
    }
    if (was_released) gil_drop(s);
    s->cache.keys[j] = key;
    s->cache.modes[j] = (unsigned char)mode;
    s->cache.count++;
    return (int)mode;
}

/* Drop the rows kept only for a CPU-only trace (cond), now that a kernel was seen. */
static void drop_conditional(Scanner *s) {
    Py_ssize_t n = s->cond.len, w = 0;
    const unsigned char *cond = (const unsigned char *)s->cond.data;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cond[i]) continue;
        if (w != i) {
            s->ph.data[w] = s->ph.data[i];
            memcpy(s->cat.data + 4 * w, s->cat.data + 4 * i, 4);
            memcpy(s->name.data + 4 * w, s->name.data + 4 * i, 4);
            memcpy(s->pid.data + 4 * w, s->pid.data + 4 * i, 4);
            memcpy(s->tid.data + 4 * w, s->tid.data + 4 * i, 4);
            memcpy(s->id.data + 4 * w, s->id.data + 4 * i, 4);
            memcpy(s->ts.data + 8 * w, s->ts.data + 8 * i, 8);
            memcpy(s->dur.data + 8 * w, s->dur.data + 8 * i, 8);
            memcpy(s->astart.data + 8 * w, s->astart.data + 8 * i, 8);
            memcpy(s->alen.data + 8 * w, s->alen.data + 8 * i, 8);
            for (Py_ssize_t k = 0; k < s->n_take; k++) memcpy(s->took[k].data + 8 * w, s->took[k].data + 8 * i, 8);
            if (s->n_take) memcpy(s->took_flags.data + 4 * w, s->took_flags.data + 4 * i, 4);
            s->cond.data[w] = 0;
        }
        w++;
    }
    s->ph.len = w;
    s->cond.len = w;
    s->cat.len = s->name.len = s->pid.len = s->tid.len = s->id.len = 4 * w;
    s->ts.len = s->dur.len = s->astart.len = s->alen.len = 8 * w;
    for (Py_ssize_t k = 0; k < s->n_take; k++) s->took[k].len = 8 * w;
    if (s->n_take) s->took_flags.len = 4 * w;
    /* the dropped rows' args stay in the args buffer until the end: compacting it
     * would cost a copy of everything kept; they are few (conditional rows keep args
     * only where the analyses read them) */
}

/* The members of a complete args object whose keys are in s->args_keys, as a new
 * object appended to out: the analyses read a few keys of each event's args,
 * and a kernel's args hold many more (grid, block, registers, ...). */
static int keep_args(Scanner *s, Buf *out, const char *p, const char *end) {
    if (!s->args_keys) return buf_push(out, p, end - p);
    Py_ssize_t mark = out->len;
    if (buf_push(out, "{", 1) < 0) return -1;
    int first = 1;
    Cursor c = {p + 1, end, NULL};
    for (;;) {
        skip_ws(&c);
        if (c.p >= c.end || *c.p == '}') break;
        const char *kstart = c.p;
        char kbuf[64];
        const char *key;
        Py_ssize_t klen = read_key(&c, kbuf, &key);
        if (klen == -2 || !take(&c, ':')) break;
        skip_ws(&c);
        int need = 0;
        const char *bad = NULL;
        const char *vend = value_end(c.p, c.end, s->max_depth, 1, &need, &bad);
        if (!vend) break;
        int wanted = 0;
        for (Py_ssize_t i = 0; i < s->n_args_keys && klen >= 0; i++)
            if (s->args_key_lens[i] == klen && !memcmp(s->args_keys[i], key, klen)) wanted = 1;
        if (wanted) {
            if ((!first && buf_push(out, ",", 1) < 0) || buf_push(out, kstart, vend - kstart) < 0) return -1;
            first = 0;
        }
        c.p = vend;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') c.p++;
    }
    if (first) {  /* nothing kept: no args at all */
        out->len = mark;
        return 1;
    }
    return buf_push(out, "}", 1);
}

static const char *skip_space(const char *p, const char *end);

/* An integer token as msgspec reads it into int64 (out of range: NULL_I64); 0 when the
 * token is no plain JSON integer (a float, leading zeros, a string, a literal). */
static int take_int(const char *p, const char *end, int64_t *out) {
    const char *q = p;
    int neg = 0;
    if (q < end && *q == '-') {
        neg = 1;
        q++;
    }
    if (q >= end || *q < '0' || *q > '9') return 0;
    if (*q == '0' && q + 1 < end) return 0;  /* leading zeros: not JSON */
    uint64_t v = 0;
    int overflow = 0;
    for (; q < end; q++) {
        if (*q < '0' || *q > '9') return 0;
        unsigned d = (unsigned)(*q - '0');
        if (v > (UINT64_MAX - d) / 10) overflow = 1;
        else v = v * 10 + d;
    }
    /* the int64 range without INT64_MIN itself, which marks "none" (columns._to_int) */
    if (overflow || (!neg && v > (uint64_t)INT64_MAX) || (neg && v >= (uint64_t)INT64_MAX + 1)) *out = NULL_I64;
    else *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* A number token as a double (null: NaN); 0 when it is none of those. */
static int take_float(const char *p, const char *end, double *out) {
    Py_ssize_t len = end - p;
    if (len == 4 && !memcmp(p, "null", 4)) {
        *out = NAN;
        return 1;
    }
    if (len <= 0 || len > 63 || !is_json_number(p, end)) return 0;
    char tmp[64];
    memcpy(tmp, p, len);
    tmp[len] = 0;
    *out = strtod(tmp, NULL);
    return 1;
}

/* An event's args object at p: its taken keys into the row's slots and flags, and its
 * end (after the '}'), or NULL when it is not a well-formed object. Keys are compared as
 * written (ours hold no escapes; a key that does is unescaped first); values are skipped
 * by their first byte, nested ones with value_end: one pass, instead of finding the
 * object's end first and reading it again. */
static const char *take_args(Scanner *s, const char *p, const char *end, int64_t *slots, uint32_t *flags) {
    const char *q = skip_space(p + 1, end);
    if (q < end && *q == '}') return q + 1;
    for (;;) {
        if (q >= end || *q != '"') return NULL;
        int escaped = 0;
        const char *kend = string_end_at(q, end, &escaped);
        if (!kend) return NULL;
        const char *key = q + 1;
        Py_ssize_t klen = kend - 1 - key;
        char unescaped[64];
        if (escaped) {
            Cursor c = {q, kend, NULL};
            klen = read_key(&c, unescaped, &key);
            if (klen == -2) return NULL;
        }
        q = skip_space(kend, end);
        if (q >= end || *q != ':') return NULL;
        q = skip_space(q + 1, end);
        if (q >= end) return NULL;
        int need = 0;
        const char *bad = NULL;
        const char *vend = *q == '"' ? string_end(q, end) : value_end(q, end, s->max_depth - 2, 1, &need, &bad);
        if (!vend) return NULL;
        /* only the taken keys of this key's length are compared (an args object holds many
         * keys, the kernels' a dozen, and few are taken) */
        for (uint32_t bits = klen >= 0 && klen < 64 ? s->take_of_len[klen] : 0; bits; bits &= bits - 1) {
            int k = __builtin_ctz(bits);
            if (memcmp(s->take_names[k], key, klen)) continue;
            if (s->take_types[k] == 'p') {
                *flags |= 1u << (1 + k);
            } else if (s->take_types[k] == 'i') {
                int64_t v;
                if (take_int(q, vend, &v)) slots[k] = v;
                else *flags |= TOOK_ODD;
            } else {
                double v;
                if (take_float(q, vend, &v)) memcpy(&slots[k], &v, 8);
                else *flags |= TOOK_ODD;
            }
        }
        q = skip_space(vend, end);
        if (q < end && *q == ',') {
            q = skip_space(q + 1, end);
            continue;
        }
        if (q < end && *q == '}') return q + 1;
        return NULL;
    }
}

/* A distinct token's bytes beyond its text: its (s, len) pair and its slot in the table. */
#define TOKEN_OVERHEAD 64
/* A kept row's bytes in the columns (ph, cat, name, pid, tid, id, ts, dur, args start and
 * length, cond), without the taken values. */
#define ROW_BYTES 53

/* Kept rows, slice and other: each counted at a slice row's size (what the msgspec decoder's
 * cap counts alike: frames._check_kept). */
static Py_ssize_t kept_rows(Scanner *s) {
    return s->ph.len + s->o_ph.len;
}

static int over_kept(Scanner *s) {
    return kept_rows(s) * s->row_bytes + s->args.len + s->margs.len + s->token_bytes > s->max_kept;
}

static int kept_failure(Scanner *s) {
    gil_hold(s);
    PyErr_Format(PyExc_ValueError, "keeps more than the limit: %zd events so far", kept_rows(s));
    return -1;
}

/* The fields of an event whose value is of the wrong type (or a number beyond a double's
 * range) are noted as it is read and judged once its phase is known: a phase's own fields
 * must be right (those of kineto.py's struct of that phase: the msgspec decoder reads the
 * same ones), the others are not read. */
#define F_CAT 1u
#define F_NAME 2u
#define F_PID 4u
#define F_TID 8u
#define F_ID 16u
#define F_TS 32u
#define F_DUR 64u
#define F_ARGS 128u
#define F_TS_RANGE 256u
#define F_DUR_RANGE 512u

static unsigned fields_of(unsigned char ph) {
    switch (ph) {
    case 'X': case 'i': case 'I':
        return F_CAT | F_NAME | F_PID | F_TID | F_TS | F_DUR | F_ARGS | F_TS_RANGE | F_DUR_RANGE;
    case 'M':
        return F_NAME | F_PID | F_TID | F_ARGS;
    case 's': case 't': case 'f':
        return F_CAT | F_NAME | F_ID | F_PID | F_TID | F_TS | F_TS_RANGE;
    default:
        return 0;
    }
}

/* The one-line problem of wrong fields (the words frames.parse gives msgspec's errors). */
static const char *field_problem(unsigned bad) {
    if (bad & (F_CAT | F_NAME)) return "not a Kineto trace: an event's cat or name is not a string";
    if (bad & (F_PID | F_TID | F_ID)) return "not a Kineto trace: an event's pid, tid or id is not an integer or a string";
    if (bad & (F_TS | F_DUR)) return "not a Kineto trace: a timestamp or duration that is not a number";
    if (bad & (F_TS_RANGE | F_DUR_RANGE)) return "not a Kineto trace: a timestamp or duration out of range";
    return "not a Kineto trace: an event's args is not an object";
}

/* Whether a scalar token that is a JSON number is an integer (no fraction, no exponent). */
static int is_integer_token(const char *tok, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i < len; i++)
        if (tok[i] == '.' || tok[i] == 'e' || tok[i] == 'E') return 0;
    return 1;
}

/* Every Chrome-trace phase (frames.KNOWN_PH; tests/test_decoders_agree.py checks they match). */
static const char KNOWN_PH[] = "XiIMstfBECbnePONDRcVv()";

#define TOO_MANY_TOKENS "more distinct names than the limit"

static int known_ph(unsigned char ph) {
    return ph > 1 && memchr(KNOWN_PH, ph, sizeof(KNOWN_PH) - 1) != NULL;
}

/* A field's token id: the field's token of the event before (most often the same: pid, tid,
   cat), else the table's; -2: out of memory, -3: past the kept-memory cap, -4: the table
   holds more than max_tokens (checked after the lookup, so that a tentative call that added
   the token fails its retry too). Callers fail at once on each, tentative or not. */
static inline __attribute__((always_inline)) int32_t intern_token(Scanner *s, int f, const char *tok,
                                                                  Py_ssize_t len) {
    if (s->last_tok[f] && s->last_len[f] == len && !memcmp(s->last_tok[f], tok, len)) return s->last_id[f];
    Py_ssize_t before = s->tokens.count;
    int32_t t = table_id(&s->tokens, &s->arena, tok, len);
    if (t == -2) return -2;
    if (s->tokens.count > s->max_tokens) return -4;
    if (s->tokens.count > before) {
        s->token_bytes += len + TOKEN_OVERHEAD;
        if (over_kept(s)) return -3;
    }
    s->last_tok[f] = ((const char **)s->tokens.order.data)[2 * t];  /* the arena's copy */
    s->last_len[f] = len;
    s->last_id[f] = t;
    return t;
}

/* One event at p, complete in [p, end) or (tentative) maybe not: the row (when kept) and
 * *out_end, the byte after its closing brace. Returns 0, or -1 with the error set; a
 * tentative call returns 1 instead of any error (the buffer may end inside the event:
 * the caller finds its end first and calls again, which reports what is wrong). Nested
 * values are checked for depth as an event's members (the event itself is level 1). */
static int scan_event(Scanner *s, const char *p, const char *end, int tentative, const char **out_end) {
    Cursor c = {p, end, NULL};
    unsigned char ph = 0;
    int ph_seen = 0;
    unsigned wrong = 0;  /* F_* of fields of the wrong type */
    int32_t cat = -1, name = -1, pid = -1, tid = -1, id = -1;
    /* The id's text: a flow's id is read only when the flow is kept, and at analyze's detail
       none is, while each flow's id is a token of its own (a third of a trace's events) */
    const char *id_tok = NULL;
    Py_ssize_t id_len = 0;
    double ts = NAN, dur = NAN;
    const char *args = NULL;
    Py_ssize_t args_len = 0;
    int64_t slots[MAX_TAKE];
    uint32_t took_flags = 0;
    for (Py_ssize_t k = 0; k < s->n_take; k++) {
        if (s->take_types[k] == 'f') {
            double nan = NAN;
            memcpy(&slots[k], &nan, 8);
        } else {
            slots[k] = NULL_I64;
        }
    }
    take(&c, '{');
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
    } else {
        while (!c.bad) {
            char kbuf[64];
            const char *key;
            Py_ssize_t klen = read_key(&c, kbuf, &key);
            if (klen == -2 || !take(&c, ':')) break;
            skip_ws(&c);
            if (klen < 0) {
                int need = 0;
                const char *bad = NULL;
                const char *e = value_end(c.p, c.end, s->max_depth - 1, 1, &need, &bad);
                if (!e) {
                    c.bad = bad ? bad : "invalid JSON in an event";
                    break;
                }
                c.p = e;
            } else if (KEY_IS(key, klen, "ph")) {
                Py_ssize_t len;
                int str;
                const char *tok = scalar(&c, &len, &str, s->max_depth - 1);
                if (!tok) break;
                if (str != 1) {
                    c.bad = "not a Kineto trace: an event's ph is not a string";
                    break;
                }
                unsigned char given = len == 3 ? (unsigned char)tok[1] : (len == 2 ? 0 : 1);  /* 1: not one character */
                if (ph_seen && given != ph) {
                    /* msgspec reads the first as the event's type and checks the second against it */
                    if (known_ph(ph) && known_ph(given)) {
                        c.bad = "not a Kineto trace: an event's ph given twice, differently";
                        break;
                    }
                    if (!known_ph(ph)) given = ph;  /* the unknown one is refused after the scan */
                }
                ph = given;
                ph_seen = 1;
            } else if (KEY_IS(key, klen, "cat") || KEY_IS(key, klen, "name") || KEY_IS(key, klen, "pid") ||
                       KEY_IS(key, klen, "tid") || KEY_IS(key, klen, "id")) {
                unsigned bit = key[0] == 'c' ? F_CAT : key[0] == 'n' ? F_NAME : key[0] == 'p' ? F_PID
                               : key[0] == 't' ? F_TID : F_ID;
                Py_ssize_t len;
                int str;
                const char *tok = scalar(&c, &len, &str, s->max_depth - 1);
                if (!tok) break;
                int32_t t = -1;
                if (str == 1 || (str == 0 && !is_literal(tok, len) && !(bit & (F_CAT | F_NAME)) &&
                                 is_integer_token(tok, len))) {
                    /* a string, or (pid, tid, id) an integer */
                    if (bit == F_ID) {  /* interned once the event is kept (below) */
                        id_tok = tok;
                        id_len = len;
                    } else {
                        t = intern_token(s, __builtin_ctz(bit), tok, len);
                        if (t == -2) return nomem(s);
                        if (t == -3) return kept_failure(s);
                        if (t == -4) return fail_at(s, c.p, TOO_MANY_TOKENS);
                    }
                } else {
                    if (bit == F_ID) id_tok = NULL;
                    if (!(str == 0 && len == 4 && !memcmp(tok, "null", 4)))
                        wrong |= bit;  /* an object, array, true, false, or a number where it may not be */
                }
                if (bit == F_CAT) cat = t;
                else if (bit == F_NAME) name = t;
                else if (bit == F_PID) pid = t;
                else if (bit == F_TID) tid = t;
                else id = t;
            } else if (KEY_IS(key, klen, "ts") || KEY_IS(key, klen, "dur")) {
                int is_ts = klen == 2;
                double v;
                int rc = number(&c, &v, s->max_depth - 1);
                if (rc < 0) break;
                if (rc == NUM_TYPE) wrong |= is_ts ? F_TS : F_DUR;
                if (rc == NUM_RANGE) wrong |= is_ts ? F_TS_RANGE : F_DUR_RANGE;
                if (is_ts) ts = v;
                else dur = v;
            } else if (KEY_IS(key, klen, "args")) {
                const char *e;
                if (c.p < c.end && *c.p == '{' && s->n_take) {  /* the end, and the taken keys, in one pass */
                    e = take_args(s, c.p, c.end, slots, &took_flags);
                    if (!e) {
                        c.bad = "invalid JSON in an event's args";
                        break;
                    }
                } else {
                    int need = 0;
                    const char *bad = NULL;
                    e = value_end(c.p, c.end, s->max_depth - 1, 1, &need, &bad);
                    if (!e) {
                        c.bad = bad ? bad : "invalid JSON in an event's args";
                        break;
                    }
                }
                if (*c.p == '{') {
                    args = c.p;
                    args_len = e - c.p;
                } else if (!(e - c.p == 4 && !memcmp(c.p, "null", 4))) {
                    wrong |= F_ARGS;
                }
                c.p = e;
            } else {
                int need = 0;
                const char *bad = NULL;
                const char *e = value_end(c.p, c.end, s->max_depth - 1, 1, &need, &bad);
                if (!e) {
                    c.bad = bad ? bad : "invalid JSON in an event";
                    break;
                }
                c.p = e;
            }
            skip_ws(&c);
            if (c.p < c.end && *c.p == ',') {
                c.p++;
                continue;
            }
            take(&c, '}');
            break;
        }
    }
    if (c.bad) return tentative ? 1 : fail_at(s, c.p, c.bad);
    wrong &= fields_of(ph);
    if (wrong) return tentative ? 1 : fail_at(s, p, field_problem(wrong));
    *out_end = c.p;
    s->n++;
    s->by_ph[ph]++;
    if (cat >= 0 && !s->gpu && (ph == 'X' || ph == 'i' || ph == 'I')) {  /* a slice's category (msgspec: the same) */
        if (s->kernel_tok < 0) {
            const char **pairs = (const char **)s->tokens.order.data;
            if ((Py_ssize_t)(intptr_t)pairs[2 * cat + 1] == 8 && !memcmp(pairs[2 * cat], "\"kernel\"", 8))
                s->kernel_tok = cat;
        }
        if (cat == s->kernel_tok) {
            s->gpu = 1;
            drop_conditional(s);
        }
    }
    int mode = keep_mode(s, ph, cat, name);
    if (mode < 0) return -1;
    if (mode == 0 || (mode >= 3 && s->gpu)) return 0;
    if (id_tok) {
        id = intern_token(s, __builtin_ctz(F_ID), id_tok, id_len);
        if (id == -2) return nomem(s);
        if (id == -3) return kept_failure(s);
        if (id == -4) return fail_at(s, p, TOO_MANY_TOKENS);
    }
    unsigned char cond = mode >= 3;
    int64_t astart = 0, alen = 0;
    if ((mode == 2 || mode == 4) && args) {
        /* metadata events' args apart: the slices' lie back to back, the args column's data as it is */
        Buf *out = ph == 'M' ? &s->margs : &s->args;
        astart = out->len;
        /* a row whose taken values are odd keeps its args whole: the caller decodes them */
        int rc = (took_flags & TOOK_ODD) ? buf_push(out, args, args_len) : keep_args(s, out, args, args + args_len);
        if (rc < 0) return nomem(s);
        alen = rc == 1 ? 0 : out->len - astart;
        if (!alen) astart = 0;
    }
    if (ph == 'M' || ph == 's' || ph == 't' || ph == 'f') {  /* not a slice: apart (o_*) */
        if (buf_push(&s->o_ph, &ph, 1) || buf_push(&s->o_cat, &cat, 4) || buf_push(&s->o_name, &name, 4) ||
            buf_push(&s->o_pid, &pid, 4) || buf_push(&s->o_tid, &tid, 4) || buf_push(&s->o_id, &id, 4) ||
            buf_push(&s->o_ts, &ts, 8) || buf_push(&s->o_astart, &astart, 8) || buf_push(&s->o_alen, &alen, 8))
            return nomem(s);
        if (over_kept(s)) return kept_failure(s);
        return 0;
    }
    if (buf_push(&s->ph, &ph, 1) || buf_push(&s->cat, &cat, 4) || buf_push(&s->name, &name, 4) ||
        buf_push(&s->pid, &pid, 4) || buf_push(&s->tid, &tid, 4) || buf_push(&s->id, &id, 4) ||
        buf_push(&s->ts, &ts, 8) || buf_push(&s->dur, &dur, 8) || buf_push(&s->astart, &astart, 8) ||
        buf_push(&s->alen, &alen, 8) || buf_push(&s->cond, &cond, 1))
        return nomem(s);
    for (Py_ssize_t k = 0; k < s->n_take; k++)
        if (buf_push(&s->took[k], &slots[k], 8)) return nomem(s);
    if (s->n_take && buf_push(&s->took_flags, &took_flags, 4)) return nomem(s);
    if (over_kept(s)) return kept_failure(s);
    return 0;
}

/* ---- the top level, as a state machine over the pending bytes ---------------------- */

static const char *skip_space(const char *p, const char *end) {
    while (p < end && (unsigned char)*p <= ' ') p++;  /* as skip_ws */
    return p;
}

/* Parse as much of pending as is complete; final: no more bytes will come. */
static int advance(Scanner *s, int final) {
    const char *p = s->pending.data + s->pos, *end = s->pending.data + s->pending.len;
    for (;;) {
        p = skip_space(p, end);
        if (s->state == S_END) {
            if (p < end) {
                fail_at(s, p, "invalid JSON: data after the end of the trace");
                return -1;
            }
            break;
        }
        if (p >= end) {
            if (final) {
                fail_at(s, p, s->state == S_START ? "empty file" : "invalid JSON: the trace ends too early (truncated)");
                return -1;
            }
            break;
        }
        char ch = *p;
        switch (s->state) {
        case S_START:
            if (ch != '{') return fail_at(s, p, "not a Kineto trace: the top level is not an object with traceEvents");
            p++;
            s->state = S_FIRST_KEY;
            continue;
        case S_FIRST_KEY:
            if (ch == '}') {
                p++;
                s->state = S_END;
                continue;
            }
            /* fall through */
        case S_KEY: {
            if (ch != '"') return fail_at(s, p, "invalid JSON: a key was expected");
            const char *e = string_end(p, end);
            if (!e) {
                if (end - p > 4096) return fail_at(s, p, "invalid JSON: a key longer than 4096 bytes");
                goto need_more;
            }
            Cursor c = {p, e, NULL};
            const char *key;
            s->key_len = read_key(&c, s->key, &key);
            if (s->key_len == -2) return fail_at(s, p, c.bad);
            if (s->key_len > 0 && key != s->key) memcpy(s->key, key, s->key_len);
            s->is_events = KEY_IS(s->key, s->key_len, "traceEvents");
            p = e;
            s->state = S_COLON;
            continue;
        }
        case S_COLON:
            if (ch != ':') return fail_at(s, p, "invalid JSON: ':' was expected");
            p++;
            if (s->is_events) {
                if (s->found_events) return fail_at(s, p, "not a Kineto trace: traceEvents given twice");
                s->found_events = 1;
                s->state = S_EVENTS_OPEN;
            } else {
                s->state = S_MEMBER;
            }
            continue;
        case S_MEMBER: {
            int need = 0;
            const char *bad = NULL;
            const char *e = value_end(p, end, s->max_depth, final, &need, &bad);
            if (!e) {
                if (bad) return fail_at(s, p, bad);
                if (end - p > s->max_value)
                    return fail_at(s, p, "a top-level member larger than the limit");
                goto need_more;
            }
            if (s->key_len >= 0) {
                int was_released = s->released != NULL;
                gil_hold(s);
                PyObject *item = Py_BuildValue("(y#y#)", s->key, s->key_len, p, (Py_ssize_t)(e - p));
                if (!item || PyList_Append(s->top, item) < 0) {
                    Py_XDECREF(item);
                    return -1;
                }
                Py_DECREF(item);
                if (was_released) gil_drop(s);
            }
            p = e;
            s->state = S_MEMBER_SEP;
            continue;
        }
        case S_MEMBER_SEP:
            if (ch == ',') {
                p++;
                s->state = S_KEY;
            } else if (ch == '}') {
                p++;
                s->state = S_END;
            } else {
                return fail_at(s, p, "invalid JSON: ',' or '}' was expected");
            }
            continue;
        case S_EVENTS_OPEN:
            if (ch != '[') return fail_at(s, p, "not a Kineto trace: traceEvents is not a list");
            p++;
            s->state = S_FIRST_EVENT;
            continue;
        case S_FIRST_EVENT:
            if (ch == ']') {
                p++;
                s->state = S_MEMBER_SEP;
                continue;
            }
            /* fall through */
        case S_EVENT: {
            if (ch != '{') return fail_at(s, p, "not a Kineto trace: a traceEvents entry is not an object");
            /* parse at once: nearly every event lies whole in the buffer; only when that
             * fails (the buffer ends inside it, or it is bad) is its end found first */
            const char *e = NULL;
            int rc = scan_event(s, p, end, 1, &e);
            if (rc < 0) return -1;
            if (rc == 1) {
                int need = 0;
                const char *bad = NULL;
                const char *whole = value_end(p, end, s->max_depth, final, &need, &bad);
                if (!whole) {
                    if (bad) return fail_at(s, p, bad);
                    if (end - p > s->max_value) return fail_at(s, p, "an event larger than the limit");
                    goto need_more;
                }
                if (scan_event(s, p, whole, 0, &e) < 0) return -1;
                e = whole;
            } else if (e - p > s->max_value) {
                return fail_at(s, p, "an event larger than the limit");
            }
            p = e;
            s->state = S_EVENT_SEP;
            continue;
        }
        case S_EVENT_SEP:
            if (ch == ',') {
                p++;
                s->state = S_EVENT;
            } else if (ch == ']') {
                p++;
                s->state = S_MEMBER_SEP;
            } else {
                return fail_at(s, p, "invalid JSON: ',' or ']' was expected between events");
            }
            continue;
        }
    }
need_more:
    if (final && s->state != S_END) return fail_at(s, p, "invalid JSON: the trace ends too early (truncated)");
    /* keep the unparsed tail only */
    Py_ssize_t done = p - s->pending.data;
    memmove(s->pending.data, p, s->pending.len - done);
    s->pending.len -= done;
    s->offset += done;
    s->pos = 0;
    return 0;
}

static PyObject *Scanner_feed(Scanner *s, PyObject *arg) {
    if (s->finished) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner has finished");
        return NULL;
    }
    if (s->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is feeding in another thread");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    s->busy = 1;
    gil_drop(s);  /* the view's bytes stay ours until it is released */
    /* a control character other than whitespace is invalid JSON anywhere (in a string it
     * must be escaped): refused here, in one pass, as msgspec refuses it */
    Py_ssize_t bad_at = -1;
    int rc = buf_reserve(&s->pending, view.len);
    if (rc == 0) {
        bad_at = copy_checked((unsigned char *)s->pending.data + s->pending.len, view.buf, view.len);
        if (bad_at < 0) {
            s->pending.len += view.len;
            rc = advance(s, 0) < 0 ? -2 : 0;
        }
    }
    gil_hold(s);
    s->busy = 0;
    PyBuffer_Release(&view);
    if (bad_at >= 0) {
        long long where = s->offset + s->pending.len + bad_at;
        PyErr_Format(PyExc_ValueError, "invalid JSON: a control character (at byte %lld)", where);
        return NULL;
    }
    if (rc == -1) return PyErr_NoMemory();
    if (rc == -2) return NULL;
    Py_RETURN_NONE;
}

static int put(PyObject *d, const char *key, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* The buffer as bytes, freeing it at once: finish() hands the columns over one by
 * one, so the copies never stand beside all the originals (peak memory). */
static PyObject *bytes_of(Buf *b) {
    PyObject *out = PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
    free(b->data);
    memset(b, 0, sizeof(Buf));
    return out;
}

static PyObject *Scanner_finish(Scanner *s, PyObject *unused) {
    (void)unused;
    if (s->finished || s->busy) {
        PyErr_SetString(PyExc_RuntimeError, s->busy ? "the scanner is feeding in another thread"
                                                     : "the scanner has finished");
        return NULL;
    }
    if (advance(s, 1) < 0) return NULL;
    s->finished = 1;
    free(s->pending.data);
    memset(&s->pending, 0, sizeof(Buf));
    if (!s->found_events) {
        PyErr_SetString(PyExc_ValueError, "not a Kineto trace: no traceEvents list");
        return NULL;
    }
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    PyObject *tokens = PyList_New(s->tokens.count);
    if (!tokens) goto fail;
    const char **pairs = (const char **)s->tokens.order.data;
    /* each token read as a plain JSON integer where it is one (flow ids: tens of thousands of
     * distinct tokens, read here instead of one Python object each) */
    PyObject *ints = PyBytes_FromStringAndSize(NULL, 8 * s->tokens.count);
    PyObject *is_int = PyBytes_FromStringAndSize(NULL, s->tokens.count);
    if (!ints || !is_int) {
        Py_XDECREF(ints);
        Py_XDECREF(is_int);
        Py_DECREF(tokens);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < s->tokens.count; i++) {
        const char *raw = pairs[2 * i];
        Py_ssize_t len = (Py_ssize_t)(intptr_t)pairs[2 * i + 1];
        int64_t v = NULL_I64;
        int plain = len > 0 && raw[0] != '"' && take_int(raw, raw + len, &v);
        memcpy(PyBytes_AS_STRING(ints) + 8 * i, &v, 8);
        PyBytes_AS_STRING(is_int)[i] = (char)plain;
        PyObject *b = PyBytes_FromStringAndSize(raw, len);
        if (!b) {
            Py_DECREF(tokens);
            Py_DECREF(ints);
            Py_DECREF(is_int);
            goto fail;
        }
        PyList_SET_ITEM(tokens, i, b);
    }
    if (put(d, "token_ints", ints)) {
        Py_DECREF(is_int);
        Py_DECREF(tokens);
        goto fail;
    }
    if (put(d, "token_is_int", is_int)) {
        Py_DECREF(tokens);
        goto fail;
    }
    arena_free(&s->arena);  /* the list holds the tokens now; no more lookups */
    free(s->tokens.slots);
    s->tokens.slots = NULL;
    if (put(d, "tokens", tokens) || put(d, "n", PyLong_FromLongLong(s->n)) ||
        put(d, "kept", PyLong_FromSsize_t(kept_rows(s))) ||
        put(d, "by_ph", PyBytes_FromStringAndSize((const char *)s->by_ph, sizeof(s->by_ph))) ||
        put(d, "ph", bytes_of(&s->ph)) || put(d, "cat", bytes_of(&s->cat)) || put(d, "name", bytes_of(&s->name)) ||
        put(d, "pid", bytes_of(&s->pid)) || put(d, "tid", bytes_of(&s->tid)) || put(d, "id", bytes_of(&s->id)) ||
        put(d, "ts", bytes_of(&s->ts)) || put(d, "dur", bytes_of(&s->dur)) ||
        put(d, "args_start", bytes_of(&s->astart)) || put(d, "args_len", bytes_of(&s->alen)) ||
        put(d, "args", bytes_of(&s->args)) || put(d, "meta_args", bytes_of(&s->margs)) ||
        put(d, "o_ph", bytes_of(&s->o_ph)) || put(d, "o_cat", bytes_of(&s->o_cat)) ||
        put(d, "o_name", bytes_of(&s->o_name)) || put(d, "o_pid", bytes_of(&s->o_pid)) ||
        put(d, "o_tid", bytes_of(&s->o_tid)) || put(d, "o_id", bytes_of(&s->o_id)) || put(d, "o_ts", bytes_of(&s->o_ts)) ||
        put(d, "o_args_start", bytes_of(&s->o_astart)) || put(d, "o_args_len", bytes_of(&s->o_alen)) ||
        put(d, "gpu", PyBool_FromLong(s->gpu)) ||
        put(d, "took_flags", bytes_of(&s->took_flags)))
        goto fail;
    PyObject *took = PyList_New(s->n_take);
    if (!took) goto fail;
    for (Py_ssize_t k = 0; k < s->n_take; k++) {
        PyObject *column = bytes_of(&s->took[k]);
        if (!column) {
            Py_DECREF(took);
            goto fail;
        }
        PyList_SET_ITEM(took, k, column);
    }
    if (put(d, "took", took)) goto fail;
    Py_INCREF(s->top);
    if (put(d, "top", s->top)) goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static void free_all(Scanner *s) {
    Buf *bufs[] = {&s->pending, &s->ph, &s->cat, &s->name, &s->pid, &s->tid, &s->id, &s->ts, &s->dur,
                   &s->astart, &s->alen, &s->cond, &s->args, &s->margs, &s->tokens.order, &s->took_flags,
                   &s->o_ph, &s->o_cat, &s->o_name, &s->o_pid, &s->o_tid, &s->o_id, &s->o_ts, &s->o_astart,
                   &s->o_alen};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        free(bufs[i]->data);
        memset(bufs[i], 0, sizeof(Buf));
    }
    for (int k = 0; k < MAX_TAKE; k++) {
        free(s->took[k].data);
        memset(&s->took[k], 0, sizeof(Buf));
    }
    free(s->tokens.slots);
    s->tokens.slots = NULL;
    free(s->cache.keys);
    free(s->cache.modes);
    s->cache.keys = NULL;
    s->cache.modes = NULL;
    arena_free(&s->arena);
    for (Py_ssize_t i = 0; i < s->n_args_keys; i++) free(s->args_keys[i]);
    free(s->args_keys);
    free(s->args_key_lens);
    s->args_keys = NULL;
    s->args_key_lens = NULL;
    s->n_args_keys = 0;
    s->n_take = 0;
    memset(s->take_of_len, 0, sizeof(s->take_of_len));
}

static void Scanner_dealloc(Scanner *s) {
    free_all(s);
    Py_XDECREF(s->keep);
    Py_XDECREF(s->top);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"keep", "max_value_bytes", "max_depth", "max_tokens", "args_keys", "take_keys",
                         "max_kept_bytes", NULL};
    PyObject *keep, *keys = Py_None, *take_keys = Py_None;
    Py_ssize_t max_value = 256 << 20, max_tokens = 10000000, max_kept = PY_SSIZE_T_MAX;
    int max_depth = 256;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|ninOOn", kw, &keep, &max_value, &max_depth, &max_tokens, &keys,
                                     &take_keys, &max_kept))
        return -1;
    if (!PyCallable_Check(keep)) {
        PyErr_SetString(PyExc_TypeError, "keep must be callable");
        return -1;
    }
    free_all(s);
    Py_XDECREF(s->keep);
    Py_XDECREF(s->top);
    Py_INCREF(keep);
    s->keep = keep;
    s->top = PyList_New(0);
    if (!s->top) return -1;
    s->state = S_START;
    s->pos = 0;
    s->offset = 0;
    s->found_events = 0;
    s->n = 0;
    memset(s->by_ph, 0, sizeof(s->by_ph));
    s->tokens.count = s->tokens.cap = 0;
    s->cache.count = s->cache.cap = 0;
    memset(s->last_tok, 0, sizeof(s->last_tok));  /* they pointed into the arena just freed */
    s->gpu = 0;
    s->kernel_tok = -1;
    s->finished = 0;
    s->max_value = max_value;
    s->max_depth = max_depth;
    s->max_tokens = max_tokens;
    s->max_kept = max_kept;
    s->token_bytes = 0;
    if (keys != Py_None) {
        PyObject *seq = PySequence_Fast(keys, "args_keys must be a sequence of bytes");
        if (!seq) return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        s->args_keys = calloc(n ? n : 1, sizeof(char *));
        s->args_key_lens = calloc(n ? n : 1, sizeof(Py_ssize_t));
        if (!s->args_keys || !s->args_key_lens) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            char *b;
            Py_ssize_t len;
            if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &b, &len) < 0 || len > 63) {
                Py_DECREF(seq);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "args keys are at most 63 bytes");
                return -1;
            }
            s->args_keys[i] = malloc(len + 1);
            if (!s->args_keys[i]) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                return -1;
            }
            memcpy(s->args_keys[i], b, len);
            s->args_key_lens[i] = len;
            s->n_args_keys = i + 1;
        }
        Py_DECREF(seq);
    }
    if (take_keys != Py_None) {
        PyObject *seq = PySequence_Fast(take_keys, "take_keys must be a sequence of (bytes, type) pairs");
        if (!seq) return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > MAX_TAKE) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "at most 16 take_keys");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            const char *name, *type;
            Py_ssize_t len, tlen;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y#s#", &name, &len, &type, &tlen) || len > 63 ||
                tlen != 1 || (type[0] != 'i' && type[0] != 'f' && type[0] != 'p')) {
                Py_DECREF(seq);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "take_keys: (key of at most 63 bytes, 'i'|'f'|'p')");
                return -1;
            }
            memcpy(s->take_names[i], name, len);
            s->take_lens[i] = len;
            s->take_of_len[len] |= 1u << i;
            s->take_types[i] = type[0];
        }
        s->n_take = n;
        Py_DECREF(seq);
    }
    s->row_bytes = ROW_BYTES + (s->n_take ? 8 * s->n_take + 4 : 0);
    return 0;
}

static PyMethodDef scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_O, "Scan the next piece of the document."},
    {"finish", (PyCFunction)Scanner_finish, METH_NOARGS, "End of the document: the columns (see the module)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kineto_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = scanner_methods,
    .tp_doc = "Streaming scanner of a Kineto trace's events into columns (see the module).",
};

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

/* concat(buffer, starts, lengths) -> the ranges back to back: the data of a string
 * column whose offsets are the running sum of lengths (the args column). */
static PyObject *concat(PyObject *self, PyObject *args) {
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
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || ln[i] < 0 || st[i] + ln[i] > data.len) {
            PyErr_SetString(PyExc_ValueError, "range outside the buffer");
            goto done;
        }
        total += ln[i];
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *w = PyBytes_AS_STRING(out);
    /* ranges that follow each other in the buffer (most rows' args: the scanner kept them
     * in row order) go in one copy: a few large copies instead of one small one per row */
    for (Py_ssize_t i = 0; i < n;) {
        int64_t from = st[i], len = ln[i];
        for (i++; i < n && (ln[i] == 0 || st[i] == from + len); i++) len += ln[i];
        memcpy(w, (const char *)data.buf + from, len);
        w += len;
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    return out;
}

/* depth(buffer, limit) -> bool: whether the JSON text nests at most ``limit`` levels
 * (brackets counted outside strings): the same check the scanner applies, for text
 * decoded by msgspec (the manifest, the msgspec decoder's whole document). */
static PyObject *depth_ok(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    int limit;
    if (!PyArg_ParseTuple(args, "y*i", &data, &limit)) return NULL;
    const char *p = data.buf, *end = p + data.len;
    int depth = 0, ok = 1;
    while (p < end) {
        char ch = *p;
        if (ch == '"') {
            const char *e = string_end(p, end);
            if (!e) break;
            p = e;
            continue;
        }
        if (ch == '{' || ch == '[') {
            if (++depth > limit) {
                ok = 0;
                break;
            }
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
        p++;
    }
    PyBuffer_Release(&data);
    return PyBool_FromLong(ok);
}

/* top_key_count(buffer, key) -> int: how many times the top-level object of the JSON text
 * has the member ``key`` (a raw key without escapes; the msgspec decoder keeps the last of
 * a repeated member, so traceEvents given twice is found here, as the scanner finds it). */
static PyObject *top_key_count(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data, key;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &key)) return NULL;
    const char *p = data.buf, *end = p + data.len;
    int depth = 0, expect_key = 0;
    long count = 0;
    while (p < end) {
        char ch = *p;
        if (ch == '"') {
            const char *e = string_end(p, end);
            if (!e) break;
            if (depth == 1 && expect_key && e - p - 2 == key.len && !memcmp(p + 1, key.buf, key.len)) count++;
            expect_key = 0;
            p = e;
            continue;
        }
        if (ch == '{' || ch == '[') {
            depth++;
            expect_key = depth == 1 && ch == '{';
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',' && depth == 1) {
            expect_key = 1;
        }
        p++;
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&key);
    return PyLong_FromLong(count);
}

static int hex_value(char h) {
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

/* The code of the \uXXXX escape text at p (6 bytes before end), or -1. */
static int escape_code(const char *p, const char *end) {
    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
    int code = 0;
    for (int i = 2; i < 6; i++) {
        int v = hex_value(p[i]);
        if (v < 0) return -1;
        code = code * 16 + v;
    }
    return code;
}

/* fix_surrogates(buffer) -> (bytes, n): the JSON text with each lone surrogate escape
 * (\uD800-\uDFFF not in a high-low pair) written as \ufffd, the same six bytes, and how
 * many; the buffer itself (as bytes) when there are none. The text starts outside a run of
 * backslashes (textfix.py); runs are followed forward, so an escaped backslash never
 * counts as an escape. */
static PyObject *fix_surrogates(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    const char *base = data.buf, *p = base, *end = base + data.len;
    char *out = NULL;
    long n = 0;
    while (p < end) {
        const char *q = memchr(p, '\\', end - p);
        if (!q) break;
        const char *r = q;
        while (r < end && *r == '\\') r++;
        p = r;
        if (((r - q) & 1) == 0) continue;  /* escaped backslashes only */
        const char *esc = r - 1;  /* the backslash that escapes what follows */
        int code = escape_code(esc, end);
        if (code < 0xD800 || code > 0xDFFF) continue;
        if (code < 0xDC00) {
            int low = escape_code(esc + 6, end);
            if (low >= 0xDC00 && low <= 0xDFFF) {  /* a pair: one character */
                p = esc + 12;
                continue;
            }
        }
        if (!out) {
            out = PyMem_Malloc(data.len ? data.len : 1);
            if (!out) {
                PyBuffer_Release(&data);
                return PyErr_NoMemory();
            }
            memcpy(out, base, data.len);
        }
        memcpy(out + (esc - base), "\\ufffd", 6);
        n++;
        p = esc + 6;
    }
    PyObject *text = out ? PyBytes_FromStringAndSize(out, data.len)
                         : (PyBytes_CheckExact(self = PyTuple_GET_ITEM(args, 0)) ? (Py_INCREF(self), self)
                                                                                   : PyBytes_FromStringAndSize(base, data.len));
    PyMem_Free(out);
    PyBuffer_Release(&data);
    if (!text) return NULL;
    return Py_BuildValue("(Nl)", text, n);
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "One JSON array of the raw args at (starts, lengths)."},
    {"concat", concat, METH_VARARGS, "The ranges (starts, lengths) of a buffer back to back."},
    {"depth_ok", depth_ok, METH_VARARGS, "Whether JSON text nests at most limit levels."},
    {"top_key_count", top_key_count, METH_VARARGS, "How many times the top-level object has a member."},
    {"fix_surrogates", fix_surrogates, METH_VARARGS, "Lone surrogate escapes written as \\ufffd, and how many."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan",
                                    "Streaming columnar scan of Kineto JSON traces.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    init_tables();
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "KNOWN_PH", KNOWN_PH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
