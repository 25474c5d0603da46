/* Library-internal declarations shared by the backend-neutral parts and the backends. Nothing
 * here is exported: the library is built with hidden visibility and only JB_API names leave it. */
#ifndef JB_INTERNAL_H
#define JB_INTERNAL_H

#include "jitbridge.h"
#include "jitbridge_sys.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JB_MAX_DEVICES 64
#define JB_PROBE_MAX_THREADS 1024

/* ---- errors (error.c) ---- */
/* Records `status` and a printf-style message as this thread's last error; returns `status`. */
int jb__fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like jb__fail, with a long detail (a compiler log) appended after the message. */
int jb__fail_with_log(int status, const char *log, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Every warning the library gives goes through here: to the log callback, else stderr. */
void jb__warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Between hold and release (nested), this thread's warnings wait and are delivered at the
 * outermost release: a callback never runs under a library lock or inside a pthread_once. */
void jb__warn_hold(void);
void jb__warn_release(void);
/* Adds text to the end of this thread's last error message (before its log, if any). */
void jb__error_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sets this thread's last error to `status` and `text`, a whole message as
 * jb_last_error_message gave it (a failure remembered, then recalled); returns `status`. */
int jb__fail_with_text(int status, const char *text);
/* The calling thread's last error, taken aside while a callback (which may call the library
 * and fail) runs, and put back after it: the caller may be about to read it. */
typedef struct jb_saved_error {
    int status;
    char *long_message;
    char short_message[1024];
} jb_saved_error;
void jb__error_save(jb_saved_error *saved);
void jb__error_restore(const jb_saved_error *saved);

#define JB_RETURN_IF(cond, status, ...)                                                            \
    do {                                                                                           \
        if (cond)                                                                                  \
            return jb__fail((status), __VA_ARGS__);                                                \
    } while (0)
#define JB_FORWARD_IF_ERROR(expr)                                                                  \
    do {                                                                                           \
        int jb_forward_status_ = (expr);                                                           \
        if (jb_forward_status_ != JB_OK)                                                           \
            return jb_forward_status_;                                                             \
    } while (0)

/* ---- fork (fork.c: the pthread_atfork handlers and the one order they take locks in) ---- */
typedef enum jb_fork_phase { JB_FORK_PREPARE, JB_FORK_PARENT, JB_FORK_CHILD } jb_fork_phase;
/* Counts the forks this process descends from: a stream made under another value belongs to
 * an ancestor, whose worker threads do not exist here. */
/* A doubly linked list of records with `prev` and `next` fields, its head a pointer; the caller
 * holds the list's lock. Push links at the front; unlink takes a node out from anywhere. */
#define JB_LIST_PUSH(head, node)                                                                   \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (head);                                                                     \
        if (head)                                                                                  \
            (head)->prev = (node);                                                                 \
        (head) = (node);                                                                           \
    } while (0)
#define JB_LIST_UNLINK(head, node)                                                                 \
    do {                                                                                           \
        if ((node)->prev)                                                                          \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (head) = (node)->next;                                                                 \
        if ((node)->next)                                                                          \
            (node)->next->prev = (node)->prev;                                                     \
    } while (0)

extern atomic_uint jb__fork_generation;
extern pthread_mutex_t *const jb__disk_locks[2]; /* disk_dir.c, in the order they nest */
extern pthread_mutex_t *const jb__build_failures_lock; /* build_failures.c */
void jb__jit_cache_fork(jb_fork_phase phase);    /* the module cache and thread registry */
void jb__devices_fork(jb_fork_phase phase);      /* each device's streams, events, buffers */
void jb__cpu_compiler_fork(jb_fork_phase phase); /* cpu/cpu_compiler.c: its version query */
void jb__private_dir_fork(jb_fork_phase phase);  /* cpu/private_dir.c: the compile folder */
void jb__configure_fork(jb_fork_phase phase);    /* module.c: configure hooks' claims */
void jb__cpu_events_fork(jb_fork_phase phase);   /* cpu/cpu_backend.c: its events' mutexes */
void jb__graphs_fork(jb_fork_phase phase);       /* graph.c: each graph's mutex */

/* ---- callbacks into the caller (callback.c: the one pattern every callback follows) ---- */
typedef enum jb_callback_kind {
    JB_CALLBACK_LOG,
    JB_CALLBACK_EVENT,
    JB_CALLBACK_KINDS
} jb_callback_kind;
/* One call in progress, from enter to leave: what to call, and the reference that keeps it. */
typedef struct jb_callback_call {
    jb_callback_kind kind;
    struct callback_record *record;
    void (*fn)(void);
    void *user_data;
} jb_callback_call;
/* Installs fn and user_data (fn NULL: none) and returns once no call of the one replaced is in
 * progress; the one replaced into *old_fn and *old_user_data (each may be NULL; NULL, NULL when
 * none or on an error). From inside this kind's own callback: JB_ERR_INVALID_ARGUMENT (it would
 * wait for itself), naming `who`. Never under a library lock. */
int jb__callback_set(jb_callback_kind kind, void (*fn)(void), void *user_data, const char *who,
                     void (**old_fn)(void), void **old_user_data);
/* Starts a call: false when none is installed or this thread is inside this kind's callback
 * already; else `call` says what to call until jb__callback_leave. Never under a library lock. */
bool jb__callback_enter(jb_callback_kind kind, jb_callback_call *call);
void jb__callback_leave(jb_callback_call *call);
/* Whether a callback of `kind` is installed: one atomic load, safe under any lock. */
bool jb__callback_installed(jb_callback_kind kind);
/* Whether this thread runs a callback of `kind` now. */
bool jb__callback_inside(jb_callback_kind kind);
void jb__callback_fork(jb_fork_phase phase); /* fork.c: last, a leaf */

/* ---- seeing compiles (events.c) and sealed mode (seal.c) ---- */
/* The module a build on this thread is for, set by the cache around its builder: what the
 * events raised inside (module.c, disk_cache.c) are about. `name` and `key` live until end. */
void jb__event_build_begin(jb_device *dev, const char *name, const char *key);
/* The build's disk cache entry name (its content hash), once known. */
void jb__event_build_content_key(const char *file);
void jb__event_build_end(void);
/* One event about this thread's build (`message` may be NULL). Between hold and release
 * (nested) events wait and are delivered at the outermost release, after the cache's lock. */
void jb__event_raise(jb_cache_event_kind kind, uint64_t duration_ns, int status,
                     const char *message);
void jb__events_hold(void);
void jb__events_release(void);
void jb__count_sealed(bool refused);
/* Fills and resets jb_counters' slow-path fields kept in events.c. */
void jb__slow_path_counters(jb_counters *out);
void jb__slow_path_counters_reset(void);
/* Right before the compiler would start for module `name` on `dev`: JB_OK to go on (unsealed,
 * or sealed to warn: with `once_per_module`, only the module's first time on the device, which
 * needs the cache's write lock held), or JB_ERR_SEALED with the error set. Raises the seal
 * violation event. */
int jb__seal_check(jb_device *dev, const char *name, bool once_per_module);

/* ---- small utilities (util.c) ---- */
/* A listing of the folder `dir` refers to, on a descriptor of its own (closedir leaves `dir`
 * open); NULL with errno set when it cannot be listed. */
DIR *jb__opendir_at(int dir);
uint64_t jb__now_ns(void);
uint64_t jb__fnv1a64(const void *data, size_t len, uint64_t seed);
/* Overflow-checked size arithmetic: every sum or product of sizes or counts a caller, a file or
 * a driver can make large goes through these. Each writes *out and returns true when the result
 * fits, else returns false and leaves *out alone. Inline: a launch checks its shapes with them. */
static inline bool jb__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return false;
    *out = sum;
    return true;
}

static inline bool jb__mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t product;
    if (__builtin_mul_overflow(a, b, &product))
        return false;
    *out = product;
    return true;
}

static inline bool jb__add_size(size_t a, size_t b, size_t *out)
{
    size_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return false;
    *out = sum;
    return true;
}

static inline bool jb__mul_size(size_t a, size_t b, size_t *out)
{
    size_t product;
    if (__builtin_mul_overflow(a, b, &product))
        return false;
    *out = product;
    return true;
}

/* ceil(total / per) for per > 0, without the (total + per - 1) that wraps near 2^64. */
uint64_t jb__ceil_div_u64(uint64_t total, uint64_t per);
/* malloc and realloc of `count` elements of `size`: NULL (errno ENOMEM) when the product does
 * not fit in a size_t. A zero product asks for one byte, so NULL always means failure. */
void *jb__malloc_array(size_t count, size_t size);
void *jb__realloc_array(void *data, size_t count, size_t size);
/* Whether a failed call's errno means "not now" (out of descriptors or memory, interrupted,
 * would block, a network disk's I/O error): retried later, never a reason to evict or give up. */
bool jb__errno_is_transient(int err);
/* Whether the file on `fd` is on a network file system (NFS, SMB, 9P, FUSE), where locks may not
 * work or cost a round trip to a server. */
bool jb__network_file_system(int fd);
/* The wait before trying again a set-up that failed for now (the disk cache folder, the
 * compiler's version query): it doubles with each failure in a row, from 50 ms to 30 s. Zeroed
 * is ready; its user serializes the failures (its own lock), any thread may ask if it is due. */
typedef struct jb_backoff {
    atomic_uint_fast64_t at_ns; /* no attempt before this */
    uint64_t delay_ns;          /* the last wait */
} jb_backoff;
bool jb__backoff_due(jb_backoff *b);
/* One more failure in a row: sets the next attempt's time; returns the wait in milliseconds. */
uint64_t jb__backoff_failed(jb_backoff *b);
#define JB_FNV_SEED 0xcbf29ce484222325ULL
char *jb__strdup(const char *s);
/* write() until done, retrying on EINTR; false on any error (errno tells). */
bool jb__write_all(int fd, const void *data, size_t bytes);
/* read() until `bytes` or end of file, retrying on EINTR; returns how many were read. */
size_t jb__read_up_to(int fd, void *data, size_t bytes);
/* Parses a byte count strictly: digits, then nothing or one of K, M, G, T (binary), each
 * optionally followed by "iB". False on anything else, or on overflow. */
bool jb__parse_bytes(const char *text, uint64_t *out);
/* A mutex that spins briefly before it sleeps (glibc's adaptive kind), for the short sections
 * that launches on many threads take (the allocator, the event pool, a stream's holds): a plain
 * one puts a thread that finds it taken to sleep, and the wake-up costs far more than the wait. */
void jb__mutex_init_spinning(pthread_mutex_t *mutex);
/* Sleeps while *word holds `expected`; a wake, a signal or a change ends it (the caller looks
 * again). What a thread waiting for another's step uses, never a yield loop: a real-time thread
 * spinning on a core keeps a lower-priority thread there from ever finishing that step. */
void jb__futex_wait(_Atomic int *word, int expected);
/* Wakes every thread sleeping on `word`. */
void jb__futex_wake_all(_Atomic int *word);
/* A growable string; on allocation failure `failed` is set and appends become no-ops. */
typedef struct jb_strbuf {
    char *data;
    size_t len, cap;
    bool failed;
} jb_strbuf;
void jb__strbuf_append(jb_strbuf *sb, const char *s);
void jb__strbuf_appendf(jb_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jb__strbuf_free(jb_strbuf *sb);

/* ---- SHA-256 (sha256.c, FIPS 180-4): bundle checksums and content keys ---- */
#define JB_SHA256_BYTES 32
typedef struct jb_sha256 {
    uint32_t state[8];
    uint64_t bytes;
    unsigned char block[64];
    size_t used;
} jb_sha256;
void jb__sha256_init(jb_sha256 *h);
void jb__sha256_update(jb_sha256 *h, const void *data, size_t len);
/* Writes the digest and wipes `h` (init it again to reuse it). */
void jb__sha256_final(jb_sha256 *h, unsigned char out[JB_SHA256_BYTES]);
void jb__sha256(const void *data, size_t len, unsigned char out[JB_SHA256_BYTES]);
/* Whether the rounds run on the processor's SHA extensions (x86-64), rather than portable C. */
bool jb__sha256_accelerated(void);
#ifdef JB_TEST_HOOKS
/* true: portable C from now on, whatever the processor has; false: back to what it has. */
void jb__test_sha256_portable(bool portable);
#endif
/* `n` bytes as 2n lowercase hex digits and a NUL into `out`. */
void jb__hex(const unsigned char *bytes, size_t n, char *out);

/* Defines `static T *NAME(void)`: the calling thread's T, made by CREATE() on its first call
 * (NULL when that fails) and passed to DESTROY(T *) when the thread exits, on that thread, after
 * NAME_tls (the thread's T, or NULL: for reads that must not make one) is cleared. */
#define JB_THREAD_LOCAL(T, NAME, CREATE, DESTROY)                                                  \
    static _Thread_local T *NAME##_tls;                                                            \
    static pthread_key_t NAME##_key;                                                               \
    static pthread_once_t NAME##_once = PTHREAD_ONCE_INIT;                                         \
    static void NAME##_exit(void *p)                                                               \
    {                                                                                              \
        NAME##_tls = NULL;                                                                         \
        DESTROY((T *)p);                                                                           \
    }                                                                                              \
    static void NAME##_key_create(void)                                                            \
    {                                                                                              \
        pthread_key_create(&NAME##_key, NAME##_exit);                                              \
    }                                                                                              \
    static T *NAME(void)                                                                           \
    {                                                                                              \
        if (!NAME##_tls) {                                                                         \
            pthread_once(&NAME##_once, NAME##_key_create);                                         \
            T *made = CREATE();                                                                    \
            if (!made)                                                                             \
                return NULL;                                                                       \
            pthread_setspecific(NAME##_key, made);                                                 \
            NAME##_tls = made;                                                                     \
        }                                                                                          \
        return NAME##_tls;                                                                         \
    }

/* An open-addressing hash table (table.c): linear probing, a power-of-two capacity, at most half
 * full. A slot is empty while its value is NULL; keys and values belong to the caller, and so
 * does any lock. */
typedef struct jb_table_slot {
    uint64_t hash;
    const void *key;
    void *value;
} jb_table_slot;
typedef struct jb_table {
    jb_table_slot *slots;
    size_t capacity, count;
} jb_table;
/* True when a stored key equals the key looked up (hashes are compared first). */
typedef bool (*jb_table_equal)(const void *stored, const void *key);

/* The value stored under `key`, or NULL; never writes (safe under a shared lock). Inline: the
 * lookaside's hit path is this loop. */
static inline void *jb__table_find(const jb_table *t, uint64_t hash, const void *key,
                                   jb_table_equal equal)
{
    if (!t->capacity)
        return NULL;
    size_t mask = t->capacity - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const jb_table_slot *slot = &t->slots[i];
        if (!slot->value)
            return NULL;
        if (slot->hash == hash && equal(slot->key, key))
            return slot->value;
    }
}
/* Makes room for one more entry; false when out of memory (the table is unchanged). */
bool jb__table_reserve(jb_table *t);
/* Adds `value` (not NULL) under a key known to be missing, after a successful reserve. */
void jb__table_add(jb_table *t, uint64_t hash, const void *key, void *value);

/* An insert-only table readers search without a lock (table.c). One writer at a time (the
 * caller's lock) fills empty slots and publishes each with a release store; a grow publishes a
 * new slot array and keeps the old one until exit, since a reader may still be searching it. */
typedef struct jb_published_slots jb_published_slots;
typedef struct jb_published_table {
    _Atomic(jb_published_slots *) current;
    size_t count; /* the writer's only */
} jb_published_table;
/* The value under `key`, or NULL (also when it is being added right now); from any thread. */
void *jb__published_find(const jb_published_table *t, uint64_t hash, const void *key,
                         jb_table_equal equal);
/* Adds `value` (not NULL) under a key known to be missing; under the caller's writer lock.
 * False when out of memory (the table is unchanged). */
bool jb__published_add(jb_published_table *t, uint64_t hash, const void *key, void *value);

/* ---- child processes (process.c) ---- */
/* The PATH of a child whose caller may not choose one (a setuid host), or that has none. */
#define JB_TRUSTED_PATH "/usr/bin:/bin"
/* One run of a program: argv[0] is searched in envp's PATH unless it names a path (a relative
 * name or PATH folder means the host's current folder, as for execvp); no shell. */
typedef struct jb_child {
    char *const *argv;
    char *const *envp;   /* its whole environment (NULL-terminated) */
    const char *cwd;     /* the folder it runs in: never the host's, which a linker script's
                          * relative names (libgcc_s.so.1) are looked up in first */
    const char *what;    /* "the compiler": names it in messages */
    const char *hint;    /* appended when it cannot start (" (set CC)"), or NULL */
    uint64_t timeout_ms; /* at most a day; its process group is killed past it */
    int fail_status;     /* the status its failures are reported with */
    /* filled by jb__child_run */
    int wait_status;     /* as waitpid reports it, once it exited */
    char *output;        /* stdout and stderr together, NUL-terminated, caller frees; head and
                          * tail only, with a note of what was cut, past 64 KiB; NULL: no memory */
    size_t output_bytes; /* all it wrote */
    bool passing;        /* on an error: one that may pass (no descriptors, memory or process
                          * to start it, its timeout, its helper killed), not a missing program */
} jb_child;
/* Runs the child to its end and fills the results: JB_OK once it exited, whatever its status;
 * an error (with c->output still filled) when it could not start, timed out or its status was
 * taken by another waiter. Works in hosts that ignore SIGCHLD or reap with waitpid(-1). */
int jb__child_run(jb_child *c);
/* JITBRIDGE_COMPILE_TIMEOUT_MS, read now: digits only, 1 ms to a day; anything else is the
 * default (or a day) with one warning per value. */
uint64_t jb__child_timeout_ms(void);
uint64_t jb__parse_timeout_ms(const char *text);
/* Where a child named `name` is looked for, in order: `name` itself when it has a '/', else
 * each entry of the PATH in `envp` (the child's environment) joined with it; each made absolute
 * against the current folder. NULL-terminated; NULL on no memory. */
char **jb__exec_candidates(const char *name, char *const *envp);
void jb__exec_candidates_free(char **list);

/* ---- backends ---- */
typedef struct jb_backend jb_backend;
typedef struct jb_event jb_event;

/* Compiled code as bytes: a shared object, a cubin or a code object. */
typedef struct jb_blob {
    void *data;
    size_t size;
} jb_blob;

/* Bytes per scalar argument in a launch: each value sits at the start of its own slot. */
#define JB_SCALAR_SLOT 8

/* Arguments of one launch: each array's device pointer and element count, inputs first, then
 * the scalars by value, one JB_SCALAR_SLOT each. */
typedef struct jb_launch_args {
    size_t count;
    void **pointers;
    uint64_t *sizes;
    uint64_t total_threads;
    size_t num_scalars;
    const unsigned char *scalars;
    /* A whole-source entry point: no arrays, every argument (a device pointer or a scalar) is a
     * slot, in order, and no thread count follows. */
    bool raw;
} jb_launch_args;

/* How a module is compiled: its JB_COMPILE_* flags and its caller's own compiler options
 * (compile_options.c), copied and checked; every array NULL when empty. */
typedef struct jb_compile_options {
    unsigned flags;
    const char *const *extra; /* more options for the backend's compiler, one argument each */
    size_t num_extra;
    const char *const *include_dirs; /* absolute folders, each searched for #include */
    size_t num_include_dirs;
    const char *target_arch; /* NULL: the device's */
} jb_compile_options;
/* Checks the options a caller gave (not the flags: jb__compile_options_check); `owner` names
 * the kernel or module. */
int jb__compiler_options_check(const char *owner, const jb_compile_options *options);
/* Copies `options` (the strings too) into *out; jb__compile_options_free lets them go. */
int jb__compile_options_copy(jb_compile_options *out, const jb_compile_options *options);
void jb__compile_options_free(jb_compile_options *options);
/* "compile flags F; options ...; include ...; target ..." for a source's first line. */
void jb__compile_options_describe(jb_strbuf *sb, const jb_compile_options *options);

/* The language a backend compiles; a custom kernel's source is generated once per dialect. */
typedef enum jb_source_dialect {
    JB_DIALECT_C,    /* C11, the cpu backend */
    JB_DIALECT_CUDA, /* CUDA C++, compiled by NVRTC or (through the vendor header) hiprtc */
    JB_DIALECT_COUNT
} jb_source_dialect;

/* The declarations every generated kernel source starts with: the dtypes as types and the
 * f32 <-> f16/bf16 conversions (dtype.c). */
const char *jb__dtype_prelude(jb_source_dialect dialect);
/* JB_OK when `scalar` has a dtype and, for bool, holds 0 or 1; `what` names the caller. */
int jb__scalar_check(const char *what, const jb_scalar *scalar);

struct jb_backend {
    const char *name; /* "cpu", "cuda", "rocm" */
    jb_source_dialect dialect;
    /* Names the compiler, its version and its options: part of every disk cache key. */
    int (*compiler_identity)(jb_device *dev, char *out, size_t len);
    /* Compiles `source` for the device with `options` (checked already); on failure returns
     * JB_ERR_COMPILE with the log. */
    int (*compile)(jb_device *dev, const char *module_name, const char *source,
                   const jb_compile_options *options, jb_blob *out);
    int (*module_load)(jb_device *dev, const jb_blob *code, void **out_module);
    int (*module_function)(jb_device *dev, void *module, const char *name, void **out_fn);
    /* Unloads a module no thread has used: one whose entries did not all resolve, never
     * published. A module in the cache is never unloaded. */
    void (*module_unload)(jb_device *dev, void *module);
    /* A stream of `priority` on the portable scale (0 normal, up to the device's
     * max_stream_priority; the caller clamps). */
    int (*stream_create)(jb_device *dev, int priority, void **out_stream);
    /* The stream's priority on the portable scale, as the device or system reports it now; a
     * negative status (the error set) when the query fails. */
    int (*stream_priority)(jb_device *dev, void *stream);
    void (*stream_destroy)(jb_device *dev, void *stream);
    int (*stream_synchronize)(jb_device *dev, void *stream);
    /* 1 once every piece of work queued on the stream so far is done, 0 while some runs; a
     * negative status (the error set) when the query fails. */
    int (*stream_query)(jb_device *dev, void *stream);
    int (*stream_wait_event)(jb_device *dev, void *stream, void *event);
    int (*event_create)(jb_device *dev, void **out_event);
    void (*event_destroy)(jb_device *dev, void *event);
    int (*event_record)(jb_device *dev, void *event, void *stream);
    int (*event_synchronize)(jb_device *dev, void *event);
    /* 1 once the work before the event's last record is done, 0 while it runs; a negative
     * status (the error set) when the query fails (a faulted device): the end is unknown. */
    int (*event_query)(jb_device *dev, void *event);
    int (*mem_alloc)(jb_device *dev, size_t bytes, void **out_ptr);
    void (*mem_free)(jb_device *dev, void *ptr);
    /* Returns once `src` may be reused. */
    int (*memcpy_htod)(jb_device *dev, void *stream, void *dst, const void *src, size_t bytes);
    /* Returns once `dst` holds the data; the caller waited for the work that writes `src`. On
     * no stream of the library's: a thread that only reads makes none. */
    int (*memcpy_dtoh)(jb_device *dev, void *dst, const void *src, size_t bytes);
    /* Fills `count` elements of `pattern_bytes` (1, 2, 4 or 8) at `dst` with `pattern`, before
     * the stream's later work; `dst` is a buffer no queued work uses. */
    int (*fill)(jb_device *dev, void *stream, void *dst, size_t count, const void *pattern,
                size_t pattern_bytes);
    int (*launch)(jb_device *dev, void *stream, void *fn, const uint32_t grid[3],
                  const uint32_t block[3], uint32_t shared_bytes, const jb_launch_args *args);
    /* Applies a kernel's configured dynamic shared memory limit (NULL where meaningless). */
    int (*kernel_set_shared_limit)(jb_device *dev, void *fn, uint32_t bytes);
    /* Graphs (graph.c). capture_begin is NULL where there are none (a driver without them).
     * Between begin and end the calling thread's launches and fills on `stream` are recorded,
     * not run; another thread's work on it is not recorded (the cpu runs it) or, where the
     * driver captures it anyway, found at the end by the count of what was recorded. */
    int (*capture_begin)(jb_device *dev, void *stream);
    /* The handle of the launch the calling thread captured last on `stream`. */
    int (*capture_node)(jb_device *dev, void *stream, void **out_node);
    /* Ends the capture: the executable graph in *out_graph, unless `discard` (then nothing is
     * kept). `ops`: the launches and fills the library captured; a graph holding other work
     * is refused (an error, nothing kept). */
    int (*capture_end)(jb_device *dev, void *stream, size_t ops, bool discard, void **out_graph);
    /* Gives a launch of the graph new arguments, for its replays from the next on. */
    int (*graph_set_launch)(jb_device *dev, void *graph, void *node, void *fn,
                            const uint32_t grid[3], const uint32_t block[3],
                            uint32_t shared_bytes, const jb_launch_args *args);
    /* Queues one replay of the graph on `stream`. */
    int (*graph_launch)(jb_device *dev, void *graph, void *stream);
    void (*graph_destroy)(jb_device *dev, void *graph);
};

extern const jb_backend jb__cpu_backend;
/* The cpu's stream priorities: each level lowers the worker thread's nice value by 5, from its
 * creator's, as far as the system permits (raising a thread's priority needs CAP_SYS_NICE or
 * RLIMIT_NICE room; without them a stream is made at the level it could get, 0 at worst). */
#define JB_CPU_MAX_STREAM_PRIORITY 4
/* The GPU backends: gpu/ compiled once per vendor (JB_VENDOR_CUDA, JB_VENDOR_HIP). Each
 * enumerate loads its vendor's libraries, then lists its GPUs into `devices` (at most `max`):
 * JB_OK with the count, or JB_ERR_NO_DEVICE with the reason ("cuda: libcuda.so.1 not found
 * ...") in `why`. */
/* bench_compile (jb_bench_compile_with) runs the vendor's compiler alone, loaded without a
 * driver if need be: with `options`, exactly those (the caller names the architecture); with
 * NULL, the library's own for `arch` and the kernel's options `own`, as a build compiles. */
#if defined(JB_WITH_CUDA)
extern const jb_backend jb__cuda_backend;
int jb__cuda_enumerate(jb_device *devices, int max, int *out_count, char *why, size_t why_len);
int jb__cuda_bench_compile(const char *arch, const char *const *options, size_t num_options,
                           const char *module_name, const char *source,
                           const jb_compile_options *own, jb_blob *out);
#endif
#if defined(JB_WITH_ROCM)
extern const jb_backend jb__rocm_backend;
int jb__rocm_enumerate(jb_device *devices, int max, int *out_count, char *why, size_t why_len);
int jb__rocm_bench_compile(const char *arch, const char *const *options, size_t num_options,
                           const char *module_name, const char *source,
                           const jb_compile_options *own, jb_blob *out);
#endif

/* ---- devices (device.c) ---- */
typedef struct jb_event_pool {
    pthread_mutex_t mutex;
    jb_event **free_events;
    size_t count, capacity;
    atomic_size_t alive; /* the device's events: pooled, spare and in use */
} jb_event_pool;

/* A device's caching allocator (buffer.c): idle buffers by capacity bucket, 16 per doubling
 * from 512 bytes to 2^JB_BUFFER_MAX_LOG2, and the device's memory statistics. A warm launch
 * allocates nothing from the driver; every field is under `mutex`. */
#define JB_BUFFER_MAX_LOG2 47
#define JB_BUFFER_BUCKETS ((JB_BUFFER_MAX_LOG2 - 9) * 16 + 1)
typedef struct jb_buffer_cache {
    pthread_mutex_t mutex;
    struct jb_buffer *buckets[JB_BUFFER_BUCKETS]; /* idle buffers of one capacity, newest first */
    struct jb_buffer *oldest, *newest;            /* every idle buffer, in the order it went idle */
    uint64_t idle_cap;        /* idle bytes kept at most; the oldest go first */
    uint64_t live_bytes;      /* asked for by buffers in use */
    uint64_t peak_live_bytes; /* the most live bytes since the last counters reset */
    uint64_t reserved_bytes;  /* capacity taken from the driver: in use and idle */
    uint64_t idle_bytes;
    uint64_t allocations, frees, reuses, retries;
} jb_buffer_cache;

struct jb_device {
    int index; /* process-wide, the prefix of every cache key, in the order set up */
    jb_device_kind kind;
    const jb_backend *backend;
    int ordinal; /* among its backend's devices: the N of "cuda:N" */
    char name[256];
    char arch[160];
    uint64_t total_memory;
    int max_stream_priority; /* the most urgent stream priority, on the portable scale */
    jb_event_pool event_pool;
    jb_buffer_cache buffers;
    /* Every live stream of the device: a failed allocation or a trim lets go of their fired
     * holds, so finished work nobody synchronized does not keep its memory. */
    pthread_mutex_t streams_mutex;
    struct jb_stream *streams;
    atomic_bool walking_streams; /* an allocation lets go of idle streams' holds (stream.c) */
    atomic_uint retired_streams; /* streams left to the device by exiting threads */
};

/* ---- events (event_pool.c; their states, event_state.c) ---- */
/* Where an event stands. A launch's event starts pending: it is recorded on the stream only when
 * something needs it (a wait by the host or by another stream, a look at the holds), since a
 * record is a driver call that costs as much as a tenth of the launch. */
typedef enum jb_event_state {
    JB_EVENT_PENDING,   /* not recorded: the work is queued on `stream`, its end unknown */
    JB_EVENT_RECORDING, /* one thread records it now; others wait for that to end */
    JB_EVENT_RECORDED,  /* recorded on `stream` after the work: the driver knows its end */
    JB_EVENT_DONE,      /* the work is known done (its hold was released); never recorded */
    JB_EVENT_RECORDING_WAITED, /* recording, and threads sleep until it ends (a futex) */
} jb_event_state;

struct jb_event {
    jb_device *device;
    void *native;
    uint64_t stream_id; /* the work's stream: waits on that same stream are free */
    jb_stream *stream;  /* the work's stream, used only while pending (destroying the stream
                         * first marks its pending events done, event_state.c) */
    uint64_t hold_seq;  /* the stream's holds_next_seq before the work's hold went in */
    unsigned generation; /* the stream's: a forked child refuses the parent's unfinished work */
    _Atomic int state;  /* a jb_event_state */
    atomic_bool in_use; /* set while out of the pool: catches an event given to two owners */
    atomic_uint refs;   /* owners: an array, and the stream's hold on that work's buffers */
};
/* A stream looks whether its holds fired once per this many new holds: a query is a driver call
 * (1.3-1.6 us on an H200), so a warm launch pays for 1/64 of one. */
#define JB_HOLDS_PER_LOOK 64
/* Events a stream keeps for its next launches, given back by its finished work: more than a look
 * releases (about JB_HOLDS_PER_LOOK holds), so a launching stream's events come back to it. */
#define JB_SPARE_EVENTS (2 * JB_HOLDS_PER_LOOK)
/* Streams keep spares, but not in builds without the pool's lock: the race they show is the
 * pool's. */
#ifdef JB_REMOVE_LOCK_EVENT_POOL
#define JB_KEEP_SPARE_EVENTS 0
#else
#define JB_KEEP_SPARE_EVENTS 1
#endif
/* Holds a stream records each event at once for, after a late record (event_state.c). */
#define JB_EAGER_HOLDS 4096
int jb__event_state(const jb_event *event);
/* Records a pending event on its stream now (nothing when recorded or done); `stream_locked`:
 * the caller holds the stream's holds mutex and leaves an event being recorded to its recorder. */
int jb__event_record_now(jb_event *event, bool stream_locked);
/* The event's work is done (its hold is released): a pending event is never recorded. */
void jb__event_done(jb_event *event);
/* Takes up to `max` (at least 1) events from the device's pool, or makes one when it has none:
 * they go to out[0 .. *n), owned by the caller with no reference counted yet (a stream's spares,
 * or one to hand out at once with refs set to 1). */
int jb__event_acquire(jb_device *dev, jb_event **out, size_t max, size_t *n);
void jb__event_retain(jb_event *event);
/* Drops a reference; the last one gives the event back to its device's pool. */
void jb__event_release(jb_event *event);
/* Gives `n` events no one references, all of one device, back to its pool under one lock. */
void jb__event_pool_put(jb_event *const *events, size_t n);
/* Destroys the device's pooled events past a few; returns how many went. */
size_t jb__event_pool_trim(jb_device *dev);
/* Waits on the host until the event's work is done. */
int jb__event_synchronize(jb_event *event);
/* Makes `stream`'s later work wait for the event's (nothing when it is that stream's, or done). */
int jb__event_order_before(jb_event *event, jb_stream *stream);
void jb__event_pool_init(jb_event_pool *pool);

/* ---- streams (stream.c) ---- */
typedef struct jb_hold jb_hold;

struct jb_stream {
    jb_device *device;
    void *native;
    uint64_t id; /* unique for the process, never reused (unlike the address) */
    unsigned generation; /* jb__fork_generation at creation: unusable in a forked child */
    atomic_uint refs; /* the creator's, and one per installation on any thread */
    atomic_uint installs; /* installations as a thread's default, on any thread */
    /* Buffers that queued work still uses: a ring, oldest first, each released once its event
     * fires. Looked at every few holds, not at each one. */
    pthread_mutex_t holds_mutex;
    jb_hold *holds;
    size_t holds_capacity, holds_first, holds_count;
    uint64_t holds_next_seq;   /* holds ever added: the newest has holds_next_seq - 1 */
    uint64_t holds_looked_seq; /* holds_next_seq at the last look at which fired */
    unsigned holds_since_release;
    size_t holds_bytes_since_release;
    /* Record each hold's event at once while holds_next_seq is below this: a reader needed an
     * event with newer work queued behind it, which a late record makes it wait for too. */
    uint64_t eager_until_seq;
    uint64_t unheld_work_seq; /* holds_next_seq when work without a hold was last queued */
    uint64_t quiet_check_seq; /* holds_next_seq at the last check for quiet streams (stream.c) */
    jb_event *spare_events[JB_SPARE_EVENTS]; /* for its next launches, under holds_mutex */
    size_t spare_count;
    /* Its last reference went at a thread's exit while its work ran (or its query failed): the
     * device keeps it, with that one reference, until a walk of the device's streams finds it
     * idle or its query failing, a faulted device (stream.c). */
    atomic_bool retired;
    /* The device let go of it (a walk found it idle or faulted): no work is queued on it again,
     * and whoever drops its last reference destroys it without asking the device once more. */
    atomic_bool reaped;
    /* The graph capture in progress (graph.c), set and cleared under holds_mutex. */
    _Atomic(struct jb_capture *) capture;
    jb_stream *device_prev, *device_next; /* the device's streams, under its streams_mutex */
};
/* The calling thread's default stream for `dev`, created on first use. */
int jb__current_stream(jb_device *dev, jb_stream **out);
/* The calling thread's default stream for `dev` if it has one already; NULL (none made) if not. */
jb_stream *jb__current_stream_if_made(jb_device *dev);
/* JB_OK, or an error naming `what` when the stream was made before this process forked. */
int jb__stream_check_process(const jb_stream *stream, const char *what);
/* A reference on a stream for something that keeps using it (the bench's raw launcher). */
void jb__stream_retain(jb_stream *stream);
/* Drops a reference; the last one waits for the stream's work and destroys it. */
void jb__stream_release(jb_stream *stream);
/* Drops a reference without waiting: the last one destroys an idle stream and leaves a busy one
 * (or one whose query fails: a faulted device) to the device, which destroys it once a walk of
 * its streams finds it idle or its query failing (a faulted device's wait returns at once). */
void jb__stream_let_go(jb_stream *stream);
/* Makes `waiter` wait for the work queued so far on the device's streams named in `ids`, and on
 * those whose holds keep `held` (when not NULL); streams gone are done. */
int jb__stream_wait_for_readers(jb_stream *waiter, const uint64_t *ids, size_t n,
                                const struct jb_buffer *held);

/* ---- buffers (buffer.c) ---- */
typedef struct jb_buffer {
    jb_device *device;
    void *ptr;
    size_t bytes;    /* asked for */
    size_t capacity; /* allocated; 0 for a zero-byte buffer, which owns no device memory */
    int bucket;      /* of its capacity in the device's cache */
    atomic_uint refs;
    atomic_bool looked; /* counted toward a stream's look (holds.c) since it was handed out */
    struct jb_buffer *bucket_prev, *bucket_next; /* while idle: its bucket */
    struct jb_buffer *older, *newer;             /* while idle: the device's idle list */
} jb_buffer;
int jb__buffer_alloc(jb_device *dev, size_t bytes, jb_buffer **out);
/* An idle buffer for `bytes` (not 0), if one fits: true with *out set; false changes nothing. */
bool jb__buffer_reuse(jb_device *dev, size_t bytes, jb_buffer **out);
/* A buffer for `bytes` (stream.c): an idle one if one fits; else, before reserved memory grows,
 * every idle stream of the device lets go of its holds and jb__buffer_alloc runs; on running out
 * of memory, every stream lets go of its fired holds and it tries once more. */
int jb__buffer_new(jb_device *dev, size_t bytes, jb_buffer **out);
/* Frees every idle buffer of the device; returns the bytes freed. */
uint64_t jb__buffer_trim(jb_device *dev);
void jb__buffer_retain(jb_buffer *buf);
/* Drops a reference; the last one returns the buffer to its device's cache, and frees idle
 * buffers past the idle cap. Any thread, but not inside a driver callback (it may free). */
void jb__buffer_release(jb_buffer *buf);
/* jb__buffer_release of each, the buffers of one device going idle under one lock: a stream
 * lets go of a batch of holds at once. */
void jb__buffer_release_many(jb_buffer *const *bufs, size_t n);
/* Sets up a device's cache (after its total_memory is known); reads JITBRIDGE_IDLE_CAP once. */
void jb__buffer_cache_init(jb_device *dev);
/* Adds the device's memory statistics to the mem_ fields of `out`; resets them. */
void jb__buffer_counters_add(jb_device *dev, jb_counters *out);
void jb__buffer_counters_reset(jb_device *dev);
/* The same over every device set up so far (device.c); sets up none. */
void jb__memory_counters_add(jb_counters *out);
void jb__memory_counters_reset(void);

/* ---- holds on buffers (holds.c) ---- */
/* Gives the stream's spare events back to its device's pool (a trim; a stream's destruction). */
void jb__stream_give_back_events(jb_stream *stream);
/* Keeps `count` buffers (none: no hold) alive until the work queued on `stream` so far is done,
 * marked by the event written to *done (a reference for the caller; the stream's spare, else the
 * pool's; not recorded: it is recorded when needed, or at once without a hold or on an eager
 * stream), in one step under the stream's lock, so that holds sit in the ring in the stream's
 * order whatever other threads launch on it. Also releases earlier holds that are done. A failed
 * record is returned with nothing held and *done NULL; a failed query (after the hold is in) is
 * returned with every hold kept and *done set. */
int jb__stream_record_hold(jb_stream *stream, jb_event **done, jb_buffer *const *buffers,
                           size_t count);
/* Releases the stream's holds whose events have fired; all of them when `all` (the stream has
 * been synchronized and no other thread can launch on it: it is being destroyed). A failed
 * event query keeps every hold and is returned. */
int jb__stream_release_holds(jb_stream *stream, bool all);
/* Waits for the stream's work, then releases the holds added before the wait began (another
 * thread's launch during the wait keeps its hold). Returns the wait's status. */
int jb__stream_wait(jb_stream *stream);
/* 1 when the stream's work is all done, 0 while some runs, a negative status on a failure (a
 * faulted device; a test hook fakes one). */
int jb__stream_idle(jb_stream *stream);
/* Releases every hold of a stream that went quiet (no hold added since the previous call) if its
 * work is all done, asked without holding its lock (a busy stream or a failed query keeps them).
 * Returns the answer (jb__stream_idle's), or 0 without asking when the stream launched since the
 * previous call or holds nothing (unless it is retired). */
int jb__stream_release_if_quiet(jb_stream *stream);
/* The event of the stream's newest hold (a reference for the caller), which fires once the
 * stream's work that holds buffers so far is done; NULL when nothing is held: that work is done.
 * With `buffer` not NULL, only when some hold keeps that buffer (else NULL). */
jb_event *jb__stream_newest_hold_event(jb_stream *stream, const jb_buffer *buffer);

/* ---- test hooks (holds.c, test_points.c): JB_TEST_HOOKS builds only, never a normal one ---- */
#ifdef JB_TEST_HOOKS
/* Called by each launch between its event and registering its hold, on `stream`. */
typedef void (*jb_test_pause_fn)(void *ctx, jb_stream *stream);
void jb__test_set_pause(jb_test_pause_fn fn, void *ctx);
void jb__test_pause(jb_stream *stream);
/* Called by jb__stream_wait between its wait for the stream and letting go of its holds. */
void jb__test_set_sync_pause(jb_test_pause_fn fn, void *ctx);
void jb__test_sync_pause(jb_stream *stream);
/* While set, a query of a hold's event or of a stream fails the way a faulted device's does. */
void jb__test_set_query_fault(bool fail);
/* How many holds the stream keeps. */
size_t jb__test_hold_count(jb_stream *stream);
/* Called (stream.c) by the release that drops a stream's last reference, before it unlinks it. */
void jb__test_set_unlink_pause(jb_test_pause_fn fn, void *ctx);
/* Called (event_state.c) by a record made when needed, between claiming the event and
 * recording it, with the event's stream. */
void jb__test_set_record_pause(jb_test_pause_fn fn, void *ctx);
void jb__test_record_pause(jb_stream *stream);
/* Gives the source module another module name (and its hash): two sources meeting in one hash,
 * without searching for a real 64-bit collision. */
void jb__test_set_source_module_name(jb_source_module *m, const char *module_name);
/* While set, jb__disk_create_unnamed fails as on a file system without O_TMPFILE. */
void jb__test_set_unnamed_refused(bool refused);
#define JB_TEST_PAUSE(stream) jb__test_pause(stream)
#define JB_TEST_SYNC_PAUSE(stream) jb__test_sync_pause(stream)
/* Points where a test runs code of its own (test_points.c), so that it can tell which path a
 * call took, or act between two steps, every run. `arg` is the point's subject. */
typedef enum jb_test_point {
    JB_TEST_LOOKASIDE_HIT, /* jit_cache.c: a hit in the thread's lookaside; arg: module name */
    JB_TEST_INDEX_HIT,     /* jit_cache.c: a hit in the published index; arg: module name */
    JB_TEST_CACHE_MISSED,  /* jit_cache.c: a miss under the read lock, before the write lock is
                            * asked for; arg: the cache key */
    JB_TEST_ENTRY_OPENED,  /* disk_cache.c: an entry opened, before it is checked; arg: its
                            * file name in the cache folder */
    JB_TEST_BOUNDS_READING, /* bounds.c: this thread is about to read a bounds record (others
                             * wait for it); arg: the kernel's name */
    JB_TEST_MODULE_WRITTEN, /* cpu_compiler.c: a module's private copy written, before dlopen;
                             * arg: its path */
    JB_TEST_BUNDLE_WRITTEN, /* bundle_export.c: a bundle written whole and fsynced, before it
                             * is named; arg: its destination path */
    JB_TEST_POINTS
} jb_test_point;
typedef void (*jb_test_point_fn)(void *ctx, const char *arg);
/* Sets (or with NULL clears) the function `point` calls. */
void jb__test_set_point(jb_test_point point, jb_test_point_fn fn, void *ctx);
void jb__test_point(jb_test_point point, const char *arg);
/* A second cpu device with its own index (the device table's next free one): one kernel object
 * launched on two devices where the machine has only the cpu. Never counted among the devices
 * (not listed, not locked by fork: a test that uses it does not fork). */
int jb__test_second_cpu(jb_device **out);
#define JB_TEST_POINT(point, arg) jb__test_point(point, arg)
#define JB_TEST_RECORD_PAUSE(stream) jb__test_record_pause(stream)
#else
#define JB_TEST_PAUSE(stream) ((void)0)
#define JB_TEST_SYNC_PAUSE(stream) ((void)0)
#define JB_TEST_POINT(point, arg) ((void)0)
#define JB_TEST_RECORD_PAUSE(stream) ((void)0)
#endif

/* ---- bounds-checked launches' reports (bounds.c) ---- */
/* What one bounds-checked launch reports: its device record (the first out-of-range access of
 * the launch, written by the kernel) and the names to report it with. Reference-counted: each
 * array the launch wrote, or made from one, holds one. */
typedef struct jb_bounds_report jb_bounds_report;
/* A record for a launch of `k` on `stream` (zeroed there, before the kernel): the report and its
 * record's buffer, which the launch passes after its arrays and holds like them. */
int jb__bounds_report_new(jb_custom_kernel *k, jb_stream *stream, jb_bounds_report **out,
                          jb_buffer **record);
/* A new report on the same record (a captured launch's, for one replay of its graph): unread,
 * a reference of its own on the record's buffer. NULL without memory. */
jb_bounds_report *jb__bounds_report_clone(const jb_bounds_report *report);
/* The launch's array element counts, in slot order (for the message). */
void jb__bounds_report_sizes(jb_bounds_report *report, const uint64_t *sizes, size_t count);
void jb__bounds_report_retain(jb_bounds_report *report);
void jb__bounds_report_release(jb_bounds_report *report);
/* The reports an array keeps: its writer's, and those of the arrays its writer read. */
#define JB_ARRAY_REPORTS 4
/* JB_OK, or JB_ERR_BOUNDS naming the first out-of-range access among `reports` (whose launches
 * are done: the caller waited for the array that holds them). */
int jb__bounds_check(jb_bounds_report *const *reports, size_t count);
/* Adds `report` to `into` (at most JB_ARRAY_REPORTS, no repeats, a reference each); *count
 * grows. Past the limit the oldest is let go. */
void jb__bounds_merge(jb_bounds_report **into, size_t *count, jb_bounds_report *report);

/* ---- arrays (array.c) ---- */
/* A reference for a captured graph that uses the array (the owner's free then leaves it to the
 * graph), and its release: the last reference frees the array. */
void jb__array_retain(jb_array *array);
void jb__array_release(jb_array *array);
jb_buffer *jb__array_buffer(const jb_array *array);
jb_event *jb__array_ready_event(const jb_array *array);
/* Wraps a fresh buffer as an array whose contents are ready once `ready` fires (may be NULL);
 * takes ownership of both. */
int jb__array_wrap(jb_array **out, jb_buffer *buf, jb_dtype dtype, const int64_t *shape, int ndim,
                   jb_event *ready);
void jb__array_set_ready(jb_array *array, jb_event *ready);
/* The array's ready event for a kernel that reads it on `stream`, noting the read: a later
 * write on another stream waits for it (jb__array_order_write). On the stream that made the
 * contents this costs a load; reads on others fill a few slots, then mark "read by many" (a
 * write then finds the readers by their holds). */
jb_event *jb__array_ready_for_read(jb_array *array, const jb_stream *stream);
/* Orders a write of the array on `stream` after the work that made it and after every read
 * on another stream since (write after read): waits queued on `stream`, nothing blocks. */
int jb__array_order_write(jb_array *array, jb_stream *stream);
/* The write is queued and `done` marks its end (ownership passes): new contents, no reads. */
void jb__array_written(jb_array *array, jb_event *done);
/* The array's bounds reports (a bounds-checked launch wrote it, or made it from arrays one
 * wrote); *count of them. */
jb_bounds_report *const *jb__array_reports(const jb_array *array, size_t *count);
/* Replaces the array's reports with `count` of `reports` (taking a reference on each). */
void jb__array_set_reports(jb_array *array, jb_bounds_report *const *reports, size_t count);

/* ---- the disk cache's folder (disk_dir.c) ---- */
struct stat;
/* True when JITBRIDGE_DISK_CACHE says off (0, false, no, off; any case); *value is its text. */
bool jb__disk_cache_disabled(const char **value);
/* The folder's absolute path, chosen once; "" with *why saying why none could be chosen. */
const char *jb__disk_folder(const char **why);
/* Sets the folder up on first use (creating it 0700, checking it on its handle); then whether
 * the cache is on. */
bool jb__disk_cache_usable(void);
/* `path` made absolute against the directory the process started in (where a variable naming
 * it was set then; else the current one), into `out`: false (errno) when it cannot be. */
bool jb__path_from_start(const char *path, char *out, size_t len);
/* The folder's and its tmp/'s handles, held for the process; -1 while the cache is off (tmp/:
 * also while storing is stopped). */
int jb__disk_dir_fd(void);
int jb__disk_tmp_fd(void);
/* Whether the folder is marked as the cache's own (CACHEDIR.TAG): only then may anything in it
 * be removed, or replaced by what is not an entry's newer copy. */
bool jb__disk_folder_is_ours(void);
/* Whether `name` is an entry's file name (JB_DISK_ENTRY_HEX lowercase hex digits, the suffix). */
bool jb__disk_is_entry_name(const char *name);
/* Creates a new temporary file, 0600, under a random name (written to `name`) in `dir`: its fd,
 * or -1 (errno). */
int jb__disk_create_temporary(int dir, char *name, size_t len);
/* Creates an unnamed file (O_TMPFILE), 0600, in `dir`, which the kernel frees if the process
 * dies before jb__disk_name_unnamed names it: its fd, or -1 (errno) where the system has none
 * (an old kernel, some file systems) or no /proc to name it through. */
int jb__disk_create_unnamed(int dir);
/* Names the unnamed file `fd` (made in `dir`) there, under a random temporary name (written to
 * `name`), as jb__disk_create_temporary would have: 0, or -1 (errno). */
int jb__disk_name_unnamed(int dir, int fd, char *name, size_t len);
/* Turns the cache off for this process with one warning (fmt has one %s for detail). */
void jb__disk_turn_off(const char *fmt, const char *detail);
/* Sets up again after the folder or its tmp/ was removed; whether storing can go on now. */
bool jb__disk_reattach(void);
/* Stops storing new entries, loads go on, with one warning (fmt has one %s for detail). */
void jb__disk_stop_storing(const char *fmt, const char *detail);
/* A handle on the folder for `jitbridge cache`, under the same trust rules, creating nothing:
 * *out is -1 when the folder does not exist yet; *ours says whether anything in it may be
 * removed (marked, or holding only the cache's kinds of files). The caller closes it. */
int jb__disk_open_for_maintenance(int *out, bool *ours);
/* Whether no one but root and us can rename or replace anything at or under `path` (each folder
 * from "/" on, checked on its handle); `resolved` gets the path with its links resolved; `why`
 * names the fix, with the environment `variable` that chose the path. */
bool jb__trusted_folder_path(const char *path, const char *variable, char *resolved, size_t len,
                             char *why, size_t why_len);

/* ---- content keys (cache_key.c) ---- */
#define JB_DISK_ENTRY_SUFFIX ".jbc"
#define JB_DISK_ENTRY_HEX 32 /* hex digits before the suffix: 128 bits of the key's SHA-256 */
#define JB_KEY_MAGIC "jitbridge cache key"
#define JB_KEY_FORMAT 2
typedef struct jb_disk_key {
    char *text; /* every input of the compile, compared on read */
    size_t bytes;
    char file[64];                          /* the first 128 bits of `digest`, hex, + suffix */
    unsigned char digest[JB_SHA256_BYTES]; /* SHA-256 of `text` */
} jb_disk_key;
/* The key of module `module_name` (entry points `entry_names`) built from `source` on `dev`. */
int jb__disk_key(jb_device *dev, const char *module_name, const char *const *entry_names,
                 size_t num_entries, const char *source, jb_disk_key *out);
/* Sets `digest` and `file` from `text`. */
void jb__disk_key_name(jb_disk_key *key);
void jb__disk_key_free(jb_disk_key *key);
/* A key text's fields: pointers into `copy` (owned), each NUL-terminated. */
typedef struct jb_key_fields {
    char *copy;
    long abi;
    const char *backend, *target, *compiler, *module;
    const char *entry_list; /* the entry names, one space between two */
    size_t num_entries;
    const char *source;
    size_t source_bytes;
} jb_key_fields;
/* Parses a key text (of JB_KEY_FORMAT); JB_ERR_INVALID_ARGUMENT when it is not one. */
int jb__key_fields_parse(const void *text, size_t bytes, jb_key_fields *out);
void jb__key_fields_free(jb_key_fields *fields);
/* The entry names as a NULL-terminated array; free it with jb__key_entries_free. */
int jb__key_fields_entries(const jb_key_fields *fields, char ***out);
void jb__key_entries_free(char **names);
#ifdef JB_TEST_HOOKS
/* Keys made from now on name library ABI `abi` instead of JB_ABI_VERSION. */
void jb__test_set_key_abi(int abi);
#endif

/* ---- manifests (manifest.c): the kernels a process built or loaded, one line each ---- */
#define JB_MANIFEST_TAG "jbm1"
/* Bytes in a line, the newline included: every line the library writes fits (64 entry names of
 * 128 characters); readers may rely on it. */
#define JB_MANIFEST_LINE_MAX 16384
/* Whether JITBRIDGE_MANIFEST names a manifest this process writes (opened at the first call). */
bool jb__manifest_on(void);
/* Appends the module's line, once per key and process; `how` is "compiled", "disk", "bundle"
 * or "prewarm". Under the module cache's write lock (as builds are). */
void jb__manifest_record(const jb_device *dev, const jb_disk_key *key, const char *module_name,
                         const char *const *entry_names, size_t num_entries, const char *how);
/* One manifest line's fields: pointers into the line, which parsing changed. */
typedef struct jb_manifest_line {
    unsigned char digest[JB_SHA256_BYTES]; /* the key's SHA-256 */
    const char *backend, *target, *module;
    const char *entries; /* entry names, separated by commas */
    const char *how;
} jb_manifest_line;
/* Parses one line (TABs and the newline become NULs); false when it is not a jbm1 line. */
bool jb__manifest_parse_line(char *line, jb_manifest_line *out);
/* Calls fn for each jbm1 line of the manifest at `path` (others are skipped) until it returns
 * non-zero, which is returned. */
typedef int (*jb_manifest_fn)(void *ctx, const jb_manifest_line *line);
int jb__manifest_read(const char *path, jb_manifest_fn fn, void *ctx);
/* 64 hex digits (lowercase) and nothing after them into a digest; false otherwise. */
bool jb__hex_digest(const char *hex, unsigned char digest[JB_SHA256_BYTES]);

/* ---- prewarm (prewarm.c) and coverage (coverage.c): stored kernels, without compiling ---- */
/* The cache folder's entry filed under `digest`, read and checked: true with its key text at
 * *key (*key_bytes), inside *data, which the caller frees. */
bool jb__folder_entry_key(const unsigned char *digest, unsigned char **data,
                          const unsigned char **key, size_t *key_bytes);
/* *ours: whether a stored key text is the very key this process makes for its module on `dev`
 * (the same compiler, architecture and library ABI), so code it would load itself. An error
 * when the key cannot be made here. */
int jb__stored_key_is_ours(jb_device *dev, const unsigned char *key, size_t key_bytes,
                           bool *ours);

/* ---- bundles (bundle.c reads and imports them, bundle_export.c writes them) ---- */
#define JB_BUNDLE_MAGIC "JBBUNDLE"
#define JB_BUNDLE_FORMAT 1
#define JB_BUNDLE_HEADER_BYTES 128
#define JB_BUNDLE_INDEX_BYTES 96
#define JB_BUNDLE_MAX_ENTRIES (1u << 20) /* a reader refuses a bundle of more */
/* The entries a bundle may hold: JB_BUNDLE_MAX_ENTRIES (fewer under a test hook). */
size_t jb__bundle_max_entries(void);
typedef struct jb_bundle jb_bundle;
typedef struct jb_bundle_header {
    uint64_t count, fingerprints_offset, fingerprints_bytes, index_offset, index_bytes,
        file_bytes;
    unsigned char tables_digest[JB_SHA256_BYTES]; /* of the fingerprints, then the index */
} jb_bundle_header;
typedef struct jb_bundle_entry {
    unsigned char digest[JB_SHA256_BYTES];   /* of the key text */
    unsigned char checksum[JB_SHA256_BYTES]; /* of the key text, then the payload */
    uint64_t offset, key_bytes, payload_bytes;
} jb_bundle_entry;
void jb__bundle_header_encode(unsigned char out[JB_BUNDLE_HEADER_BYTES],
                              const jb_bundle_header *h);
void jb__bundle_index_encode(unsigned char out[JB_BUNDLE_INDEX_BYTES], const jb_bundle_entry *e);
/* Opens a bundle under the trust rules and checks its header and index (`variable` names what
 * chose the path, for the message); the error says what was refused. */
int jb__bundle_open(const char *path, const char *variable, jb_bundle **out);
void jb__bundle_free(jb_bundle *b);
size_t jb__bundle_count(const jb_bundle *b);
const jb_bundle_entry *jb__bundle_entry(const jb_bundle *b, size_t i);
const char *jb__bundle_fingerprints(const jb_bundle *b);
/* Entry i's key text and payload, read and checked (both hashes); a bad one is marked, warned
 * about once, and an error. The caller frees *out. */
int jb__bundle_read_entry(jb_bundle *b, size_t i, unsigned char **out);
/* Whether bundles serve as read-only tiers (JITBRIDGE_CACHE_BUNDLE is read at the first call). */
bool jb__bundles_present(void);
/* Where a tier's payload came from, to reject it if the loader refuses it. */
typedef struct jb_bundle_ref {
    jb_bundle *bundle;
    size_t entry;
} jb_bundle_ref;
/* The first tier's entry filed under `digest`, read and checked: *data (the caller frees it)
 * holds its key text (key_bytes) then its payload. */
bool jb__bundle_find(const unsigned char *digest, unsigned char **data, size_t *key_bytes,
                     jb_blob *payload, jb_bundle_ref *ref);
/* True with the payload of the first tier holding `key` (checked); the caller frees out->data. */
bool jb__bundle_load(const jb_disk_key *key, jb_blob *out, jb_bundle_ref *ref);
/* The loaded payload was accepted (a bundle hit) or refused by the loader (skipped from now). */
void jb__bundle_accept(void);
void jb__bundle_reject(const jb_bundle_ref *ref, const char *why);
void jb__bundle_counters(uint64_t *hits, uint64_t *rejected);
void jb__bundle_counters_reset(void);
#ifdef JB_TEST_HOOKS
/* While non-zero, reading a bundle entry's bytes fails with this errno. */
void jb__test_set_bundle_read_error(int err);
/* While non-zero, bundles may hold at most this many entries (reading and writing). */
void jb__test_set_bundle_max_entries(size_t max);
/* Takes (true) or lets go of (false) the manifest's lock as a writer does, without waiting:
 * whether that worked (false with no manifest open). */
bool jb__test_manifest_lock(bool take);
#endif

/* ---- leases (lease.c): one compile per key across the processes of one cache folder ---- */
#define JB_LEASE_DIR "leases" /* in the cache folder: one <entry's hex>.lease per key */
/* Whether `name` is a lease file's name (an entry's hex digits and ".lease"). */
bool jb__lease_is_name(const char *name);
typedef struct jb_lease {
    int fd, dir; /* the locked lease file and leases/; -1 when none is held */
    char name[64];
} jb_lease;
typedef enum jb_lease_outcome {
    JB_LEASE_HELD,   /* ours: compile, store, then release */
    JB_LEASE_STORED, /* another process stored the entry while we waited: load it */
    JB_LEASE_NONE,   /* compile alone: locks do not work here, or the deadline passed */
} jb_lease_outcome;
/* The entry file that was at a key's name before a load found it bad (present false: none), so
 * that only another one counts as stored. */
typedef struct jb_lease_stale {
    bool present;
    uint64_t dev;
    uint64_t ino;
} jb_lease_stale;
void jb__lease_note_stale(const jb_disk_key *key, jb_lease_stale *out);
/* Takes the lease of `key` in the cache folder, waiting while another process holds it, until
 * `deadline_ns` (jb__now_ns's clock) at most; an entry that is `stale` (may be NULL) does not
 * end the wait. Under the module cache's write lock. */
jb_lease_outcome jb__lease_acquire(const jb_disk_key *key, const jb_lease_stale *stale,
                                   uint64_t deadline_ns, jb_lease *out);
/* Whether an entry other than `stale` (may be NULL) stands at its name in the folder. */
bool jb__lease_entry_stored(const jb_disk_key *key, const jb_lease_stale *stale);
/* Lets go of a held lease (removing its file, or marking it when the compile failed: those who
 * find it marked within the compile timeout compile without the lease); nothing when none is
 * held. */
void jb__lease_release(jb_lease *lease, bool compile_failed);
void jb__lease_counters(uint64_t *waits, uint64_t *timeouts, uint64_t *fallbacks);
void jb__lease_counters_reset(void);
#ifdef JB_TEST_HOOKS
/* While non-zero, taking a lock fails with this errno (ENOLCK: locks do not work here). */
void jb__test_set_lease_error(int err);
#endif

/* ---- the disk cache's entries (disk_cache.c) ---- */
/* True with the stored code when a valid entry exists; a missing or invalid one is a miss. */
bool jb__disk_load(const jb_disk_key *key, jb_blob *out);
/* The loaded code was accepted by the loader (a disk hit) or refused (counted; the compile that
 * follows replaces the entry, which is never removed first). */
void jb__disk_accept(void);
void jb__disk_reject(const jb_disk_key *key);
/* Stores compiled code: true once the entry is in place; a failing disk stops storing with one
 * warning. */
bool jb__disk_store(const jb_disk_key *key, const jb_blob *code);
/* The payload offset of a well-formed entry whose key matches (any key if NULL), else 0. */
size_t jb__disk_entry_check(const unsigned char *data, size_t size, const jb_disk_key *key);
/* The key text of an entry that jb__disk_entry_check accepted (payload at `payload_at`). */
const unsigned char *jb__disk_entry_key(const unsigned char *data, size_t payload_at,
                                        size_t *key_bytes);
/* Why an entry with this status must not be read (type, owner, mode, links, size), or NULL. */
const char *jb__disk_entry_problem(const struct stat *st);
/* Opens entry `name` of folder `dir` without blocking or following a link and checks it on the
 * handle: the fd, or -1 with *problem saying why (NULL when it does not exist). */
int jb__disk_open_entry(int dir, const char *name, struct stat *st, const char **problem);
/* Reads a checked entry whole (st from jb__disk_open_entry); NULL on failure. */
unsigned char *jb__disk_read_entry(int fd, const struct stat *st, size_t *out_size);
/* Removes whatever is at `name` (a file, link, FIFO or empty directory); 0 or -1 with errno. */
int jb__disk_remove(int dir, const char *name);
void jb__disk_counters(uint64_t *hits, uint64_t *misses, uint64_t *rejected);
void jb__disk_counters_reset(void);

/* ---- the JIT module cache (jit_cache.c) and modules (module.c) ---- */
typedef struct jb_module jb_module;
typedef struct jb_kernel_entry jb_kernel_entry;

/* Builds the module for `name` on `dev`; called at most once per key at a time, under the
 * cache's write lock. Returns a status and sets the thread's error on failure; *from_disk says
 * the code came from the disk cache rather than the compiler. */
typedef int (*jb_module_builder)(void *ctx, jb_device *dev, const char *name, jb_module **out,
                                 bool *from_disk);

/* `name_hash` is jb__fnv1a64(name, strlen(name), JB_FNV_SEED), computed once by the caller so
 * that a warm lookup hashes nothing. */
/* Whether the module cache holds module `name` for `dev` now; builds nothing, counts nothing. */
bool jb__jit_module_cached(const jb_device *dev, const char *name);
int jb__get_jit_module(jb_device *dev, const char *name, uint64_t name_hash,
                       jb_module_builder builder, void *ctx, jb_module **out);
void jb__counters_add_configure(void);

/* Where the calling thread's latest module build and configure spent their time (module.c);
 * read by the bench. A few clock reads per build, none per launch. */
typedef struct jb_build_steps {
    uint64_t compile_ns, load_ns, get_function_ns, disk_store_ns, configure_ns;
} jb_build_steps;
extern _Thread_local jb_build_steps jb__build_steps;
/* Loads `code` (built from `source`, kept) and fills the kernel table with `kernel_names`; the
 * table never changes after. */
int jb__module_create(jb_device *dev, const jb_blob *code, const char *source,
                      const char *const *kernel_names, size_t num_kernels, jb_module **out);
#ifdef JB_TEST_HOOKS
/* While non-zero, the loader refuses every module with this status (JB_ERR_SYSTEM: an EMFILE of
 * its own; JB_ERR_LOAD: a lasting refusal), whichever tier its code came from. */
void jb__test_set_load_failure(int status);
#endif
/* JB_OK when `module` was built from `source`: a module name is a 64-bit hash of its source, so
 * a caller who controls sources could make two meet. Once per kernel object and device, never
 * per launch. */
int jb__module_check_source(const jb_module *module, const char *module_name,
                            const char *source);
/* The kernel named `name` in the module, looked up without a lock. */
jb_kernel_entry *jb__module_kernel(jb_module *module, const char *name);
/* One kernel object's configured state on one device: the hook's result, stored before
 * `configured` is published. Starts zeroed. */
typedef struct jb_kernel_state {
    jb_kernel_config config; /* valid once `configured` reads true */
    atomic_bool configured;
    /* Under module.c's configure_mutex: a thread runs the hook (claimed), which thread, and the
     * fork generation it belongs to (a claim of another one is a thread this process lacks). */
    bool claimed;
    unsigned claim_generation;
    const void *claimer;
} jb_kernel_state;
/* Runs `hook` once for `state` (one thread runs it, under no lock; others wait); then returns
 * the config and the kernel's handle. */
int jb__kernel_configured_for(jb_kernel_entry *kernel, jb_kernel_state *state,
                              jb_configure_hook hook, void *user_data,
                              jb_kernel_config *out_config, void **out_fn);
/* The same with the module entry's own state, for callers without a kernel object (no hook). */
int jb__kernel_configured(jb_kernel_entry *kernel, jb_configure_hook hook, void *user_data,
                          jb_kernel_config *out_config, void **out_fn);
/* Builds a module from `source` (disk cache, else compiler; see module.c); a jb_module_builder
 * calls it under the cache's write lock. `use_disk_cache` false: always compile (and so does a
 * module with include folders: the key cannot hold their headers' contents). */
int jb__module_build(jb_device *dev, const char *module_name, const char *source,
                     const jb_compile_options *options, const char *const *kernel_names,
                     size_t num_kernels, bool use_disk_cache, jb_module **out, bool *from_disk);

/* ---- failure memory (build_failures.c): a source the compiler rejected is not compiled again.
 * jb__module_build calls them in this order, under the cache's write lock. ---- */
/* True, with the remembered error set and *status its status, when the compiler with the same
 * identity rejected `source` for `module_name` on `dev` before. */
bool jb__build_failure_recall(jb_device *dev, const char *module_name, const char *source,
                              int *status);
/* Called before a compile: forgets a rejection left over by an earlier compile. */
void jb__build_failure_start(void);
/* A backend's compile calls it when the compiler ran to its end and rejected the source (not a
 * timeout, a signal, a failure to start or out of memory): only then is the failure kept. */
void jb__compile_rejected(void);
/* After a compile: remembers its failure when the compiler rejected the source. */
void jb__build_failure_remember(jb_device *dev, const char *module_name, const char *source,
                                int status);

/* ---- custom kernels: spec and launch (kernel.c), names and source (kernel_source.c) ---- */
#define JB_KERNEL_MAX_ARRAYS 64 /* inputs and outputs together; also the most scalars */
#define JB_KERNEL_MAX_PARAMS 64  /* compile-time parameters; also the most defines */
#define JB_KERNEL_MAX_SHAPED 8   /* arrays whose shape a body sees */
/* A launch's scalar slots: the kernel's scalars, then nine per shaped array (ndim, dims). */
#define JB_KERNEL_MAX_SLOTS (JB_KERNEL_MAX_ARRAYS + JB_KERNEL_MAX_SHAPED * (1 + JB_MAX_NDIM))

struct jb_custom_kernel {
    char *name;
    char *module_name;
    uint64_t module_name_hash;
    size_t num_inputs, num_outputs;
    char **input_names, **output_names;
    jb_dtype *input_dtypes, *output_dtypes;
    size_t num_scalars;
    char **scalar_names;
    jb_dtype *scalar_dtypes;
    jb_compile_options options; /* flags and the caller's compiler options (owned) */
    char *sources[JB_DIALECT_COUNT];
    jb_configure_hook configure;
    void *configure_user_data;
    jb_kernel_state configured[JB_MAX_DEVICES]; /* by device index: this hook's own result */
    bool disk_cacheable; /* false for probes: each process must compile them */
    bool bounds_checked; /* JB_COMPILE_BOUNDS_CHECKS */
    bool shaped[JB_KERNEL_MAX_ARRAYS]; /* by array slot: the body sees its shape */
    /* The names a checked access reports: the arrays in slot order, then each shown shape
     * ("x_shape"); filled for every kernel. */
    char **checked_names;
    size_t num_checked;
    jb_scalar *output_inits; /* NULL, or one per output (JB_DTYPE_INVALID: none) */
};

/* Checks every name, count and dtype of a spec; the status and message of the first problem. */
int jb__kernel_spec_check(const jb_kernel_spec *spec);
/* Generates the kernel's sources and its module name from its names and the spec's body,
 * header, parameters and defines. */
int jb__kernel_generate(jb_custom_kernel *k, const jb_kernel_spec *spec);
/* Checks compile flags and defines ("NAME" or "NAME=VALUE"); `owner` names the kernel or
 * module in the message. */
int jb__compile_options_check(const char *owner, unsigned flags, unsigned also_allowed,
                              const char *const *defines, size_t num_defines);
/* Whether `text` uses `name` as a name (not inside a comment or literal, not a member name). */
bool jb__source_mentions(const char *text, const char *name);
/* Appends `text` with every line continuation (a backslash, blanks, a newline) removed, as
 * the compiler removes them before it reads a token. */
void jb__splice_lines(const char *text, jb_strbuf *out);
/* Appends `text` (the kernel's body or header, `what` names it) with every subscript of one of
 * `names`, `name[i]`, made `jb_at_<slot>(i)`. `strict` (the body): any other use of those names,
 * and any name starting with jb_, is refused. */
int jb__bounds_rewrite(const char *kernel, const char *what, const char *text,
                       const char *const *names, size_t num_names, bool strict, jb_strbuf *out);
/* JB_OK when a checked kernel's text (`what`: body, header, a define) holds nothing that could
 * reach an array past its checks: no name pasted (## or %:%:) or split by a line continuation,
 * no directive that brings in other text (#include and its kin), no %: digraph, no asm, no raw
 * string, no digit separator, and no #define or #undef of a reserved name, of the kernel's arrays and
 * their companions (`names`), or of a name the generated code uses. */
int jb__bounds_text_check(const char *kernel, const char *what, const char *text,
                          const char *const *names, size_t num_names);
/* Appends one #define line per define (checked before). */
void jb__append_defines(jb_strbuf *sb, const char *const *defines, size_t num_defines);
/* True when `s` may be pasted into source as a name; else false with a static reason. */
bool jb__identifier_ok(const char *s, const char **problem);
/* The dialect the backend named `backend` ("cpu", "cuda", "rocm") compiles; false if unknown. */
bool jb__backend_name_dialect(const char *backend, jb_source_dialect *out);
/* Finds (or builds) the kernel's module on `dev`, runs its configure hook once, and returns its
 * config and function handle. */
int jb__custom_kernel_prepare(jb_custom_kernel *k, jb_device *dev, jb_kernel_config *config,
                              void **fn);

/* Turns a launch shape into grid and block (thread counts use the config's block size). */
int jb__resolve_launch_shape(const jb_launch_shape *shape, const jb_kernel_config *config,
                             uint32_t grid[3], uint32_t block[3], uint64_t *total);

/* One launch of a custom kernel, staged: the one launch path (public launch, probe, bench). */
typedef struct jb_capture jb_capture;
typedef struct jb_staged_launch {
    jb_device *dev;
    jb_stream *stream; /* the caller's, else the calling thread's default of the device */
    const jb_custom_kernel *kernel;
    jb_capture *capture; /* the stream's capture (this thread's), or NULL: a plain launch */
    uint32_t captured[JB_KERNEL_MAX_ARRAYS]; /* captured: each array slot's index in the graph */
    void *fn;
    uint32_t grid[3], block[3], shared_bytes;
    jb_launch_args args; /* points into the arrays below */
    /* Per array slot (inputs, then outputs), then a bounds-checked launch's record. */
    void *pointers[JB_KERNEL_MAX_ARRAYS + 1];
    uint64_t sizes[JB_KERNEL_MAX_ARRAYS + 1];
    jb_buffer *buffers[JB_KERNEL_MAX_ARRAYS + 1];
    _Alignas(8) unsigned char scalars[JB_KERNEL_MAX_SLOTS * JB_SCALAR_SLOT];
    size_t num_outputs;
    jb_array *outputs[JB_KERNEL_MAX_ARRAYS];  /* new outputs; NULL for in-place ones */
    jb_array *in_place[JB_KERNEL_MAX_ARRAYS]; /* the caller's arrays written in place, or NULL */
    jb_event *end; /* marks the kernel's end (from the stream, at jb__launch_end): each output
                    * and the hold take a reference */
    bool queued;   /* work may be on the stream: a failure waits for it */
    jb_bounds_report *report; /* a bounds-checked launch's, else NULL */
    /* What the outputs will hold: that report and the inputs' (a reference each). */
    jb_bounds_report *reports[JB_ARRAY_REPORTS];
    size_t num_reports;
} jb_staged_launch;
/* ---- captured graphs (graph.c) ---- */
/* The capture in progress on `stream`, when the calling thread began it, in *out; NULL when
 * none is. One begun by another thread: JB_ERR_INVALID_ARGUMENT naming `what`. */
int jb__stream_capture(jb_stream *stream, const char *what, jb_capture **out);
/* JB_ERR_INVALID_ARGUMENT naming `what` while `stream` captures: work other than a custom
 * kernel's launch (copies, fills of new arrays, reads, waits) is never captured. */
int jb__stream_refuse_capture(jb_stream *stream, const char *what);
/* A launch being captured uses `array` (written: the graph writes it): the graph takes a
 * reference; its index in the graph in *out_index. Out of memory fails the capture. */
int jb__capture_array(jb_capture *capture, jb_array *array, bool written, uint32_t *out_index);
/* One more operation the backend captured besides launches (a fill). */
void jb__capture_count_op(jb_capture *capture);
/* Records the staged launch, just issued into the capture: its node, arguments and buffers. */
int jb__capture_launch(jb_capture *capture, const jb_staged_launch *launch);
/* Something the capture holds went wrong: its end fails (`why` says what) and discards it. */
void jb__capture_poison(jb_capture *capture, const char *why);
/* The stream is being destroyed while it captures: the capture is discarded. */
void jb__capture_abandon(jb_stream *stream);

/* Checks the scalars against the kernel's and stores each value in its slot of `slots`. */
int jb__stage_scalars(const jb_custom_kernel *k, const jb_scalar *scalars, size_t num_scalars,
                      unsigned char *slots);
/* Checks the arguments, builds and configures the module, makes the outputs and orders the
 * inputs' pending work (and the in-place outputs' readers) before the launch. On failure
 * nothing stays staged. `launch` is a whole jb_launch (jb_custom_kernel_run normalised it). */
int jb__launch_begin(jb_staged_launch *staged, jb_custom_kernel *k, const jb_launch *launch);
/* Queues the staged kernel on its stream; may be called more than once (the bench does). */
int jb__launch_issue(const jb_staged_launch *launch);
/* With `status` JB_OK: gives the outputs their event, holds every buffer until the kernel is done
 * and hands the new outputs to `outputs` (NULL for in-place ones; `outputs` may be NULL when
 * all are in place). Otherwise waits for the stream and frees what was staged; returns the
 * status. */
int jb__launch_end(jb_staged_launch *launch, int status, jb_array **outputs);

#endif /* JB_INTERNAL_H */
