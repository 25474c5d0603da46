/* store/: compiled code below memory: content keys, the cache folder and its entries, admin,
 * leases, manifests, bundles, the remote tier. It calls base/ only. */
#ifndef JB_STORE_STORE_H
#define JB_STORE_STORE_H

#include "../internal.h"

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
/* The folder `name` in `dir` (made 0700 when missing and `create`), opened without following a
 * link or blocking and checked on its handle: ours, with none of the mode bits `refused` (077:
 * closed to others). Its fd, or -1 with errno: ENOENT (none, not made), EPERM (not ours so),
 * ENOTDIR or ELOOP (something else stands at the name), or the step's that failed. */
int jb__disk_open_own_folder(int dir, const char *name, bool create, mode_t refused);
/* Whether the folder is marked as the cache's own (CACHEDIR.TAG): only then may anything in it
 * be removed, or replaced by what is not an entry's newer copy. */
bool jb__disk_folder_is_ours(void);
/* Whether `name` is an entry's file name (JB_DISK_ENTRY_HEX lowercase hex digits, the suffix). */
bool jb__disk_is_entry_name(const char *name);
bool jb__disk_is_record_name(const char *name);
/* Creates a new temporary file, 0600, under a random name (written to `name`) in `dir`: its fd,
 * or -1 (errno). The name is 32 hex digits and ".tmp", or `suffix` (_as). */
int jb__disk_create_temporary(int dir, char *name, size_t len);
int jb__disk_create_temporary_as(int dir, char *name, size_t len, const char *suffix);
/* Whether `name` is a random temporary name with `suffix`, as jb__disk_create_temporary_as
 * makes them. */
bool jb__disk_is_temporary_name_as(const char *name, const char *suffix);
/* Creates an unnamed file (O_TMPFILE), 0600, in `dir`, which the kernel frees if the process
 * dies before jb__disk_name_unnamed names it: its fd, or -1 (errno) where the system has none
 * (an old kernel, some file systems) or no /proc to name it through. */
int jb__disk_create_unnamed(int dir);
/* Links the unnamed file `fd` (made in `dir`) at `name` there, which must not exist (EEXIST):
 * 0, or -1 (errno; ESTALE: the name was made but leads to another file, which took the
 * descriptor's number meanwhile). */
int jb__disk_link_unnamed(int dir, int fd, const char *name);
/* Names the unnamed file `fd` (made in `dir`) there, under a random temporary name with `suffix`
 * (written to `name`), as jb__disk_create_temporary_as would have: 0, or -1 (errno). */
int jb__disk_name_unnamed(int dir, int fd, char *name, size_t len, const char *suffix);
/* Turns the cache off for this process with one warning (fmt has one %s for detail). */
void jb__disk_turn_off(const char *fmt, const char *detail);
/* Sets up again after the folder or its tmp/ was removed; whether storing can go on now. */
bool jb__disk_reattach(void);
/* Stops storing (loads go on), one warning (fmt's %s: strerror(err)); a full disk for a while. */
void jb__disk_stop_storing(const char *fmt, int err);
void jb__disk_stored(void); /* a store landed: a full disk's pause is over, with one warning */
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
#define JB_DISK_RECORD_SUFFIX ".jbr" /* a record (a fact, not code) kept beside the entries */
#define JB_DISK_ENTRY_HEX 32 /* hex digits before the suffix: 128 bits of the key's SHA-256 */
#define JB_KEY_MAGIC "jitbridge cache key"
#define JB_KEY_FORMAT 2
typedef struct jb_disk_key {
    char *text; /* every input of the compile, compared on read */
    size_t bytes;
    char file[64];                          /* the first 128 bits of `digest`, hex, + suffix */
    unsigned char digest[JB_SHA256_BYTES]; /* SHA-256 of `text` */
} jb_disk_key;
/* The key of module `module_name` (entry points `entry_names`) built from `source` by the
 * compiler `identity` (its first line counts) of backend `backend` for target `arch`. */
int jb__disk_key(const char *backend, const char *arch, const char *identity,
                 const char *module_name, const char *const *entry_names, size_t num_entries,
                 const char *source, jb_disk_key *out);
/* Sets `digest` and `file` from `text`. */
void jb__disk_key_name(jb_disk_key *key);
/* The key of a record about `subject` (one line of text: what the record says it of), filed
 * under 32 hex digits of its SHA-256 and JB_DISK_RECORD_SUFFIX: never an entry's name, so
 * exports, listings and pruning pass it by. */
int jb__disk_record_key(const char *subject, jb_disk_key *out);
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
 * or "prewarm"; `source_record` (64 hex digits, or NULL) names its source record in a field
 * "source=<hex>" after the seven that readers before it know (they ignore it). Under the module
 * cache's write lock (as builds are). */
#define JB_MANIFEST_SOURCE_FIELD "source="
void jb__manifest_record(const char *backend, const char *arch, const jb_disk_key *key,
                         const char *module_name, const char *const *entry_names,
                         size_t num_entries, const char *how, const char *source_record);
/* One manifest line's fields: pointers into the line, which parsing changed. */
typedef struct jb_manifest_line {
    unsigned char digest[JB_SHA256_BYTES]; /* the key's SHA-256 */
    const char *backend, *target, *module;
    const char *entries; /* entry names, separated by commas */
    const char *how;
    /* A "source=" field after those: has_source with its digest, or source_malformed. */
    bool has_source, source_malformed;
    unsigned char source_digest[JB_SHA256_BYTES];
} jb_manifest_line;
/* Parses one line (TABs and the newline become NULs); false when it is not a jbm1 line. */
bool jb__manifest_parse_line(char *line, jb_manifest_line *out);
/* Calls fn for each jbm1 line of the manifest at `path` (others are skipped) until it returns
 * non-zero, which is returned. */
typedef int (*jb_manifest_fn)(void *ctx, const jb_manifest_line *line);
int jb__manifest_read(const char *path, jb_manifest_fn fn, void *ctx);
/* 64 hex digits (lowercase) and nothing after them into a digest; false otherwise. */
bool jb__hex_digest(const char *hex, unsigned char digest[JB_SHA256_BYTES]);


/* ---- source records (source_record.c): what it takes to build a kernel again ---- */
#define JB_SOURCE_RECORD_DIR "sources" /* in the cache folder: <64 hex of SHA-256>.jbs */
#define JB_SOURCE_RECORD_SUFFIX ".jbs"
#define JB_SOURCE_RECORD_MAX_BYTES (4u << 20) /* a reader refuses a larger record unread */
#define JB_SOURCE_RECORD_MAX_ENTRIES 64        /* as many as a manifest line may name */
#define JB_SOURCE_RECORD_MAX_OPTIONS 64        /* as many as a kernel may be given */
/* A record read and checked: pointers into `text` (owned). */
typedef struct jb_source_record {
    char *text;
    const char *backend, *module;
    jb_source_dialect dialect;
    const char *entries[JB_SOURCE_RECORD_MAX_ENTRIES];
    size_t num_entries;
    unsigned flags;
    const char *options[JB_SOURCE_RECORD_MAX_OPTIONS];
    size_t num_options;
    const char *target_arch; /* NULL: the device's */
    const char *source;      /* source_bytes bytes, NUL-terminated, no NUL inside */
    size_t source_bytes;
} jb_source_record;
/* The rules a parsed record must pass before it is returned (names, flags, options: the kernels
 * layer's, handed down); JB_OK or the status and message of the first problem. */
typedef int (*jb_source_record_rules)(const jb_source_record *record);
/* Stores the record of a module built from `source` in the cache folder (best effort: false when
 * it is not stored, one warning for a failing disk); its SHA-256 in `hex` (64 hex digits). */
bool jb__source_record_store(const char *backend, jb_source_dialect dialect,
                             const char *module_name, const char *const *entries,
                             size_t num_entries, const jb_compile_options *options,
                             const char *source, char hex[2 * JB_SHA256_BYTES + 1]);
/* Reads the record named `digest` from the cache folder and checks it (on its handle, size,
 * hash against the name, format, then `rules`): JB_OK with *out filled (free it with
 * jb__source_record_free), else JB_ERR_INVALID_ARGUMENT (a bad or missing record) or
 * JB_ERR_SYSTEM (the disk) with a message naming the record; nothing is changed on disk. */
int jb__source_record_read(const unsigned char digest[JB_SHA256_BYTES],
                           jb_source_record_rules rules, jb_source_record *out);
/* The checks of jb__source_record_read on a record's bytes already in memory (`data`, malloc'd,
 * taken over: freed or kept in out->text), such as a bundle's: size, hash, format, `rules`. */
int jb__source_record_check(const unsigned char digest[JB_SHA256_BYTES], unsigned char *data,
                            size_t size, jb_source_record_rules rules, jb_source_record *out);
/* Stores a record's bytes (checked before) in sources/ as jb__source_record_store does: false
 * when not stored, with errno saying why (EPERM: a folder not the library's own); its SHA-256
 * in `hex`. `module_name` is for the one warning. */
bool jb__source_record_put(const char *data, size_t len, const char *module_name,
                           char hex[2 * JB_SHA256_BYTES + 1]);
void jb__source_record_free(jb_source_record *record);

/* ---- bundles (bundle.c reads and imports them, bundle_export.c writes them) ---- */
#define JB_BUNDLE_MAGIC "JBBUNDLE"
#define JB_BUNDLE_FORMAT 1
#define JB_BUNDLE_HEADER_BYTES 128
#define JB_BUNDLE_INDEX_BYTES 96
#define JB_BUNDLE_MAX_ENTRIES (1u << 20) /* a reader refuses a bundle of more */
/* An export's temporary names in the bundle's folder (32 hex digits before it): apart from the
 * cache writers' ".tmp", which hold no lock, as an export sweeps only its own kind. */
#define JB_EXPORT_TEMPORARY_SUFFIX ".export.tmp"
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
/* The compiler version in a tier's fingerprints: of a line "built <backend> <target>
 * <version>; <files>" (the entries' compiler identity), where a sealed process, which starts no
 * program, knows only the files part. False when no tier has one. */
bool jb__bundle_compiler(const char *backend, const char *target, const char *files, char *out,
                         size_t len);
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
/* The manifest's descriptor (-1: none open). */
int jb__test_manifest_fd(void);
#endif

/* ---- leases (lease.c): one compile per key across the processes of one cache folder ---- */
#define JB_LEASE_DIR "leases" /* in the cache folder: one <entry's hex>.lease per key */
#define JB_LEASE_SUFFIX ".lease"
/* Whether `name` is a lease file's name (an entry's hex digits and ".lease"). */
bool jb__lease_is_name(const char *name);
typedef struct jb_lease {
    int fd, dir; /* the locked lease file and leases/; -1 when none is held */
    char name[64];
    struct jb_keeper *keeper; /* the thread that keeps it fresh while held, or NULL */
} jb_lease;
typedef enum jb_lease_outcome {
    JB_LEASE_HELD, /* ours: compile, store, then release */
    JB_LEASE_BUSY, /* another process holds it: wait (jb__lease_wait), then look again */
    JB_LEASE_NONE, /* compile alone: locks do not work here, or the deadline passed */
} jb_lease_outcome;
/* The entry file that was at a key's name before a load found it bad (present false: none), so
 * that only another one counts as stored. */
typedef struct jb_lease_stale {
    bool present;
    uint64_t dev;
    uint64_t ino;
} jb_lease_stale;
void jb__lease_note_stale(const jb_disk_key *key, jb_lease_stale *out);
/* What a waiter saw of a held lease file (which file, its time) and since when (jb__now_ns's
 * clock) it has not moved. */
typedef struct jb_lease_watch {
    bool seen;
    uint64_t dev, ino;
    struct timespec mtime;
    uint64_t since_ns;
} jb_lease_watch;
/* Takes the lease of `key` in the cache folder without waiting: BUSY while another process
 * holds it, unless its holder stopped (its time stood still for seconds while this thread
 * waited: it is then taken over) or the wait's deadline, the compile timeout from the key's
 * first try, passed. Under the module cache's write lock; a HELD lease is kept fresh until
 * released. An entry that is `stale` (may be NULL) does not end the wait. */
jb_lease_outcome jb__lease_acquire(const jb_disk_key *key, const jb_lease_stale *stale,
                                   jb_lease *out);
/* After BUSY, with no lock of the module cache held: waits until another entry is stored, the
 * lease is free, its holder stopped or the deadline passed; nothing after any other outcome. */
void jb__lease_wait(void);
/* Whether an entry other than `stale` (may be NULL) stands at its name in the folder. */
bool jb__lease_entry_stored(const jb_disk_key *key, const jb_lease_stale *stale);
/* Lets go of a held lease (removing its file, or marking it when the compile failed: those who
 * find it marked within the compile timeout compile without the lease); nothing when none is
 * held. */
void jb__lease_release(jb_lease *lease, bool compile_failed);
void jb__lease_counters(uint64_t *waits, uint64_t *timeouts, uint64_t *fallbacks,
                        uint64_t *stale_takeovers);
void jb__lease_counters_reset(void);
#ifdef JB_TEST_HOOKS
/* A lease whose time has not moved for `ms` is taken over (0: the default, 5 s). */
void jb__test_set_lease_stale_ms(uint64_t ms);
#endif
#ifdef JB_TEST_HOOKS
/* While non-zero, taking a lock fails with this errno (ENOLCK: locks do not work here). */
void jb__test_set_lease_error(int err);
/* While non-zero, taking over a stale lease fails with this errno, as a refused removal does. */
void jb__test_set_lease_break_error(int err);
#endif

/* ---- the disk cache's entries (disk_cache.c) ---- */
/* Real code objects are far smaller (a cpu shared object ~20 KiB, a large cubin a few MiB); the
 * cap bounds what is read whole under the module cache's write lock (a remote value too). */
#define JB_DISK_ENTRY_MAX_BYTES (64u << 20)
/* True with the stored code when a valid entry exists; a missing or invalid one is a miss. */
bool jb__disk_load(const jb_disk_key *key, jb_blob *out);
/* The loaded code was accepted by the loader (a disk hit) or refused (counted; the compile that
 * follows replaces the entry, which is never removed first). */
void jb__disk_accept(void);
void jb__disk_reject(const jb_disk_key *key);
/* Stores compiled code: true once the entry is in place; a failing disk stops storing with one
 * warning. Also stores a record (its key from jb__disk_record_key), written as an entry is. */
bool jb__disk_store(const jb_disk_key *key, const jb_blob *code);
/* Keeps a copy of code another tier holds (a remote hit; *code is taken) for the calling
 * thread's next jb__disk_store_pending, which stores it as jb__disk_store does but not fsynced:
 * an entry a crash leaves torn fails its checks on load, a miss the tier serves again. The
 * build calls it under the module cache's lock, where a file's creation would hold up the
 * process's other builds; the cache calls jb__disk_store_pending once it let go. */
void jb__disk_store_later(const jb_disk_key *key, jb_blob *code);
void jb__disk_store_pending(void);
/* A record's content when one is stored under `key` and passes an entry's checks (regular,
 * ours, not writable by others, one link; magic, whole key, checksum); false otherwise. Counts
 * nothing, removes nothing and raises no event: a record missing or bad is only not known. */
bool jb__disk_record_load(const jb_disk_key *key, jb_blob *out);
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

/* ---- the Redis client (remote_client.c): hiredis, loaded at run time ---- */
/* The largest value of the remote tier (signed header, key text, digests, an entry's payload):
 * what a store is asked to keep and the longest reply read; a longer one is refused unread. */
#define JB_REMOTE_VALUE_HEADER_BYTES 24 /* magic 8, format 4, key length 4, payload length 8 */
#define JB_REMOTE_VALUE_MAX_BYTES                                                                  \
    ((size_t)JB_DISK_ENTRY_MAX_BYTES + JB_REMOTE_VALUE_HEADER_BYTES + 2 * JB_SHA256_BYTES)
typedef struct jb_redis jb_redis;
/* Reply types, the same numbers in every hiredis version. */
enum { JB_REDIS_STRING = 1, JB_REDIS_ARRAY = 2, JB_REDIS_INTEGER = 3, JB_REDIS_NIL = 4,
       JB_REDIS_STATUS = 5, JB_REDIS_ERROR = 6 };
typedef struct jb_redis_reply {
    int type; /* never JB_REDIS_ARRAY: an array reply fails the command */
    long long integer;
    const char *str; /* len bytes and a NUL (strings, statuses, errors), owned by the reply */
    size_t len;
    void *raw;
} jb_redis_reply;
/* Loads hiredis once: false with *why saying what is missing. */
bool jb__redis_client_load(const char **why);
/* Connects to host:port, or to unix_path when not NULL: the host name is looked up in a
 * thread of its own, and its addresses (IPv4 ones first, at most 8) are tried in turn,
 * connect_ms each, until one answers or the lookup and the connects together have taken
 * operation_ms; every later command (send and reply together) takes operation_ms at most, and
 * its reply's first byte comes within first_byte_ms of the send (0: no bound of its own).
 * JB_ERR_UNSUPPORTED when hiredis cannot be loaded. */
int jb__redis_connect(const char *host, int port, const char *unix_path, int connect_ms,
                      int operation_ms, int first_byte_ms, jb_redis **out, char *why,
                      size_t why_len);
/* Whether this process made the connection and has not forked since (a fork child must not
 * use its parent's: jb__redis_command refuses it). */
bool jb__redis_owned_here(const jb_redis *r);
/* Closes and frees; sends nothing. NULL is fine. */
void jb__redis_free(jb_redis *r);
/* The client's part of the remote tier's fork handler (remote.c's slot): a child closes its
 * copies of every connection open at the fork, in use by another thread included; each is
 * still freed by its holder, and never used (jb__redis_owned_here). */
void jb__redis_fork(jb_fork_phase phase);
/* One command of 1 to 16 words, sent and answered within the connection's operation_ms:
 * JB_ERR_SYSTEM (a timeout, a closed or failed connection, a reply that is not RESP, an array,
 * a string longer than jb__redis_reply_max_bytes, more than one reply, a connection of the
 * process this one was forked from; the connection must then be freed) with *why, or JB_OK
 * with the reply (free it with jb__redis_reply_free). No SIGPIPE reaches the process. */
int jb__redis_command(jb_redis *r, int argc, const char **argv, const size_t *lens,
                      jb_redis_reply *out, char *why, size_t why_len);
void jb__redis_reply_free(jb_redis_reply *reply);
/* The longest string reply taken: JB_REMOTE_VALUE_MAX_BYTES (less under a test hook). */
size_t jb__redis_reply_max_bytes(void);
#ifdef JB_TEST_HOOKS
/* While non-zero, the longest value stored or string reply read (0: the default). */
void jb__test_set_remote_value_max(size_t bytes);
/* While non-zero, each host name lookup first sleeps this long (a resolver that hangs). */
void jb__test_set_resolve_delay_ms(int ms);
/* While not NULL, every host name resolves to these addresses ("127.0.0.2,127.0.0.1"). */
void jb__test_set_resolve_answer(const char *addresses);
#endif

/* ---- the remote tier (remote.c): verified entries on a Redis server shared by a fleet ---- */
/* Whether a remote tier is configured (JITBRIDGE_REMOTE_CACHE is read at the first call). */
bool jb__remote_on(void);
/* True with the verified payload stored under `key` (the caller frees out->data); a missing,
 * unreachable or rejected entry is a miss (a rejection is counted and raises an event). */
bool jb__remote_load(const jb_disk_key *key, jb_blob *out);
/* The loaded payload was accepted by the loader (a remote hit) or refused for good. */
void jb__remote_accept(void);
void jb__remote_reject(void);
/* Signs and writes compiled code under `key`, unless the tier is read-only or off. */
void jb__remote_store(const jb_disk_key *key, const jb_blob *code);
void jb__remote_counters(uint64_t *hits, uint64_t *misses, uint64_t *rejected, uint64_t *stores,
                         uint64_t *breaker_trips);
void jb__remote_counters_reset(void);
/* Whether the tier may be written now: configured, not read-only, its breaker closed. */
bool jb__remote_writable(void);
/* Whether the calling thread's last jb__remote_load found no value in a store that answered
 * (not a rejection, an open breaker or a failure). */
bool jb__remote_last_load_missed(void);
/* The Redis key of `key`'s value. */
void jb__remote_entry_name(const jb_disk_key *key, char out[64]);
/* Whether this thread's last jb__remote_store was answered +OK (export counts with it). */
bool jb__remote_last_store_stored(void);
/* JB_OK when the tier is set, answering (no breaker open) and, `for_writing`, not read-only;
 * else an error that says which. */
int jb__remote_usable(bool for_writing);
/* The value filed under `digest` (a manifest's key), checked as jb__remote_load checks one for
 * the key text it holds, which must hash to `digest`: true with *key (free it with
 * jb__disk_key_free) and *out (the payload; the caller frees out->data). A miss sets
 * jb__remote_last_load_missed; a bad value is counted and raised as a rejection. */
bool jb__remote_load_named(const unsigned char digest[JB_SHA256_BYTES], jb_disk_key *key,
                           jb_blob *out);
/* Runs one command on the tier's connection: JB_OK with the reply (free it), JB_ERR_UNSUPPORTED
 * when there is no tier or its breaker is open, JB_ERR_SYSTEM when the store failed or answered
 * an error (the breaker has tripped). */
int jb__remote_call(const char *what, int argc, const char **argv, const size_t *lens,
                    jb_redis_reply *reply);
#ifdef JB_TEST_HOOKS
/* Shorter waits for the tests: connect, each operation, and the breaker's pause (0: default). */
void jb__test_set_remote_timing(int connect_ms, int operation_ms, int breaker_ms);
#endif

/* ---- the fleet's lease (remote_lease.c): one compile per key across a remote tier's hosts ---- */
typedef struct jb_remote_lease {
    bool held;
    char name[64];  /* its Redis key */
    char token[33]; /* this holder's random value: only it renews or deletes the lease */
    struct jb_keeper *keeper; /* the thread that renews it while held, or NULL */
} jb_remote_lease;
/* Takes the fleet's lease of `key` after the host's (SET NX PX: 10 s, renewed while held, or
 * the compile timeout when shorter): HELD (compile, store, release), BUSY (another host
 * compiles it: the caller lets go of the module cache's lock, calls jb__remote_lease_wait and
 * looks again from the top), or NONE (compile without it: no writable tier, a failing store,
 * or the wait's deadline, the compile timeout from the key's first try, passed). */
jb_lease_outcome jb__remote_lease_acquire(const jb_disk_key *key, jb_remote_lease *out);
/* After BUSY, with no lock of the module cache held: polls every 75 ms until the entry is
 * stored (when none was there before), the lease is gone (released after a failure, or
 * expired with a dead holder), the store fails or the deadline passes; nothing after any
 * other outcome. */
void jb__remote_lease_wait(void);
/* Deletes a held lease if it is still this holder's (compare and delete in one script). */
void jb__remote_lease_release(jb_remote_lease *lease);
/* Whether `key`'s value is in the store now (false when it cannot be asked). */
bool jb__remote_entry_exists(const jb_disk_key *key);
void jb__remote_lease_counters(uint64_t *waits, uint64_t *timeouts);
void jb__remote_lease_counters_reset(void);
#ifdef JB_TEST_HOOKS
/* A held lease lives `ms` unless renewed (0: the default, 10 s). */
void jb__test_set_remote_lease_ttl_ms(uint64_t ms);
#endif

#ifdef JB_TEST_HOOKS
/* While set, jb__disk_create_unnamed fails as on a file system without O_TMPFILE. */
void jb__test_set_unnamed_refused(bool refused);
#endif

#endif /* JB_STORE_STORE_H */
