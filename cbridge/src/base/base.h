/* base/: what every layer uses: errors and warnings, callbacks into the caller, compile events,
 * fork handling, small utilities, tables, SHA-256, dtypes, child processes, test points. It calls
 * nothing above it. */
#ifndef JB_BASE_BASE_H
#define JB_BASE_BASE_H

#include "jitbridge.h"
#include "jitbridge_sys.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define JB_MAX_DEVICES 64
#define JB_PROBE_MAX_THREADS 1024

/* ---- errors (error.c) ---- */
/* Records `status` and a printf-style message as this thread's last error; returns `status`. */
int jb__fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like jb__fail, with a long detail (a compiler log) appended after the message. */
int jb__fail_with_log(int status, const char *log, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The calling thread's last successful compile's diagnostics (its warnings), at most
 * JB_BUILD_LOG_MAX bytes with a note where cut; NULL or "" clears it. Read by the build that
 * ran the compile, to give them to its event. */
#define JB_BUILD_LOG_MAX 4096
void jb__build_log_set(const char *text);
const char *jb__build_log(void);

/* Every warning the library gives goes through here: to the log callback, else stderr. */
void jb__warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Between hold and release (nested), this thread's warnings wait and are delivered at the
 * outermost release: a callback never runs under a library lock or inside a pthread_once. */
void jb__warn_hold(void);
void jb__warn_release(void);
/* The outermost release, handing the held warnings over (a thread a lock holder joins); the
 * taker's jb__warn_pass warns them as its own (held if it holds) and frees them. */
struct held_warning *jb__warn_release_taken(void);
void jb__warn_pass(struct held_warning *warnings);
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
/* A backend's compile calls it when the compiler ran to its end and rejected the source (not a
 * timeout, a signal, a failure to start or out of memory): only then is the failure kept. */
void jb__compile_rejected(void);
/* Whether the compile since the last take was rejected (jb__compile_rejected); clears it. The
 * failure memory (cache/build_failures.c) takes it before and after each compile. */
bool jb__compile_rejected_take(void);
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
/* Whoever holds a lock across fork, in the one order fork.c's prepare takes them (its comment
 * says why); parent and child run in reverse. A part of a higher layer hands its handler down
 * with JB_FORK_HANDLER, so that base/ calls no layer above it. */
typedef enum jb_fork_slot {
    JB_FORK_JIT_CACHE,      /* cache/jit_cache.c: the module cache and thread registry */
    JB_FORK_BUILD_FAILURES, /* cache/build_failures.c: the failure memory */
    JB_FORK_DISK_FOLDER,    /* store/disk_dir.c: setup (and reattach), then state text */
    JB_FORK_DEVICES,        /* exec/device.c: each device's streams, events, buffers */
    JB_FORK_CPU_COMPILER,   /* cpu/cpu_compiler.c: its version query */
    JB_FORK_PRIVATE_DIR,    /* cpu/private_dir.c: the compile folder */
    JB_FORK_CONFIGURE,      /* cache/module.c: configure hooks' claims */
    JB_FORK_CALLBACKS,      /* base/callback.c: a leaf */
    JB_FORK_CPU_EVENTS,     /* cpu/cpu_backend.c: its events' mutexes */
    JB_FORK_GRAPHS,         /* kernels/graph.c: each graph's mutex */
    JB_FORK_MANIFEST,       /* store/manifest.c: no lock; the child opens its own handle */
    JB_FORK_REMOTE,         /* store/remote.c: the remote tier's configuration (a leaf) */
    JB_FORK_SLOTS
} jb_fork_slot;
typedef void (*jb_fork_handler)(jb_fork_phase phase);
/* Puts `handler` in `slot`; called before main (or while the library loads), never later. */
void jb__fork_install(jb_fork_slot slot, jb_fork_handler handler);
/* Installs a file's static fork handler when the library loads, before any thread of it runs:
 * a static link that takes the file takes its handler. */
#define JB_FORK_HANDLER(slot, handler)                                                             \
    __attribute__((constructor)) static void install_##handler(void)                               \
    {                                                                                              \
        jb__fork_install((slot), (handler));                                                       \
    }

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
/* Sleeps `ns` nanoseconds, the whole of it even when a signal interrupts the sleep. */
void jb__nap_ns(uint64_t ns);
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
/* Whether two stats describe one file (device and inode). */
bool jb__same_file(const struct stat *a, const struct stat *b);
/* Whether the file on `fd` is on a network file system (NFS, SMB, 9P, FUSE), where locks may not
 * work or cost a round trip to a server. */
bool jb__network_file_system(int fd);
/* What a lock on an open file falls back to on a kernel without open file description locks
 * (before 3.15: F_OFD_SETLK fails with EINVAL). */
typedef enum jb_lock_fallback {
    JB_LOCK_OR_FLOCK,   /* flock: held by the open file too (a forked child shares it) */
    JB_LOCK_OR_PROCESS, /* fcntl F_SETLK: the process's (any of its closes drops it) */
} jb_lock_fallback;
/* Takes (F_WRLCK) or lets go of (F_UNLCK) a lock on the whole file held by the open file
 * description of `fd` (F_OFD_SETLK), without waiting: 0, or the errno (EAGAIN: another holds
 * it; ENOLCK and others: locks do not work here). */
int jb__lock_open_file(int fd, short type, jb_lock_fallback fallback);
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
/* HMAC-SHA256 (RFC 2104): remote cache entries are signed with the fleet's key. */
typedef struct jb_hmac_sha256 {
    jb_sha256 inner;
    unsigned char outer_pad[64]; /* the key (hashed when longer than a block) XOR 0x5c */
} jb_hmac_sha256;
void jb__hmac_sha256_init(jb_hmac_sha256 *h, const void *key, size_t key_len);
void jb__hmac_sha256_update(jb_hmac_sha256 *h, const void *data, size_t len);
/* Writes the MAC and wipes `h`. */
void jb__hmac_sha256_final(jb_hmac_sha256 *h, unsigned char out[JB_SHA256_BYTES]);
/* Whether a and b hold the same n bytes, in a time that does not depend on where they differ. */
bool jb__equal_in_constant_time(const void *a, const void *b, size_t n);
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
/* SipHash-1-3 (Aumasson and Bernstein) of `len` bytes under a 128-bit key. */
uint64_t jb__siphash13(const uint64_t key[2], const void *data, size_t len);
/* The hash of a table whose keys a file gives (a manifest's digests, the kernels it names): all
 * of the key under a key drawn once per process (getrandom), so no file can be written whose
 * keys share one chain and make the table quadratic. */
uint64_t jb__table_hash(const void *data, size_t len);

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


/* ---- test points (test_points.c): JB_TEST_HOOKS builds only, never a normal one ---- */
#ifdef JB_TEST_HOOKS
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
    JB_TEST_EVENT_MADE,     /* events.c: an event made to be delivered or queued, on the
                             * raising thread; arg: its kind's name */
    JB_TEST_BUNDLE_LINKED,  /* bundle_export.c: a bundle linked at a name in its folder (its
                             * path, or a temporary one before the rename); arg: that name */
    JB_TEST_LEASE_WAITING,  /* lease.c: a build's wait for another process's lease begins;
                             * arg: the lease's file name */
    JB_TEST_LEASE_LOCKED,   /* lease.c: a taker locked a lease file, just before its first
                             * touch of it; arg: the lease's file name */
    JB_TEST_LEASE_SWEEPING, /* lease.c: a sweep locked an old lease file no one held, before
                             * it removes it; arg: the lease's file name */
    JB_TEST_LEASE_POLLED,   /* lease.c: a waiter looked whether the lease is held, its
                             * handle on the file still open; arg: the lease's file name */
    JB_TEST_REMOTE_COMMAND, /* remote.c: a command about to be sent on a connection taken
                             * for it; arg: what the command does ("store an entry") */
    JB_TEST_POINTS
} jb_test_point;
typedef void (*jb_test_point_fn)(void *ctx, const char *arg);
/* Sets (or with NULL clears) the function `point` calls. */
void jb__test_set_point(jb_test_point point, jb_test_point_fn fn, void *ctx);
void jb__test_point(jb_test_point point, const char *arg);
#define JB_TEST_POINT(point, arg) jb__test_point(point, arg)
#else
#define JB_TEST_POINT(point, arg) ((void)0)
#endif

/* ---- source dialects (dtype.c writes each one's prelude) ---- */
/* The language a backend compiles; a custom kernel's source is generated once per dialect. */
typedef enum jb_source_dialect {
    JB_DIALECT_C,    /* C11, the cpu backend */
    JB_DIALECT_CUDA, /* CUDA C++, compiled by NVRTC or (through the vendor header) hiprtc */
    JB_DIALECT_COUNT
} jb_source_dialect;

#endif /* JB_BASE_BASE_H */
