/*
 * The remote tier: compiled code on a Redis server a fleet shares, below bundles and above the
 * compiler. What makes it safe to load native code from a store others may be able to write:
 *
 * - Every value is signed: a header (magic, format, key length, payload length, little-endian),
 *   the key text, the payload's SHA-256, an HMAC-SHA256 with the fleet's key over the header,
 *   the key text and the payload, then the payload. A value whose MAC, checksum or lengths fail,
 *   that names another key text (another kernel, backend, target or compiler), or that is
 *   larger than a disk entry may be, is a miss, counted and raised as an event, never loaded.
 *   Without a key nothing could be verified, so without one the tier is not used at all.
 * - The fleet key comes from a file only its owner (this user) can read or write, of at least
 *   32 bytes, read once when the tier is configured.
 * - A slow or dead store costs no more than a cold cache: connects, lookups, each whole
 *   command and its reply's first byte are bounded, replies are capped and must be of the type
 *   asked for (remote_client.c), and after a failure a breaker skips the tier for a while (one
 *   warning per trip), then tries again. No SIGPIPE reaches the host.
 * - No lock of the library is held during a remote call other than the build's write lock
 *   (every call is made from a build): the idle connection is taken out of its slot with an
 *   atomic exchange, and a fork child finds its parent's connection marked with another pid or
 *   fork generation and closes its copy without sending anything. Setting the tier anew
 *   closes the idle connection, and one in use when it is given back.
 * - A URL's password and option values never reach a message (mask_url).
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A store on the same network accepts a connection in well under a millisecond: one that takes
 * longer than this is treated as down, since a compile is then the faster way to the code. */
#define CONNECT_TIMEOUT_MS 100
/* Each command, sent and answered (a 64 MiB entry moves in about 0.5 s at 1 Gb/s), and a host
 * name's lookup: long enough
 * for the largest entry on a slow link, short enough that a stopped store costs one compile's
 * worth of waiting before the breaker opens. */
#define OPERATION_TIMEOUT_MS 2000
/* A reply's first byte, counted from the end of the send or from the store's last taking in of
 * the command's bytes still queued (a large value on a slow link). A healthy store on the same
 * network starts a GET's reply in well under a millisecond (a busy one in a few), and one whose
 * round trip nears this is slower than the compile it would save (30 ms a kernel on an H100,
 * here too); a stopped or hung one trips the breaker after this wait, not after the 2 s meant
 * for a large value's transfer (1.35x a 6 s cold run on an H100), and a spurious trip costs
 * compiles for one breaker pause, never an error. Once bytes flow, the command's deadline alone
 * holds. */
#define FIRST_BYTE_TIMEOUT_MS 250
/* After a failure the tier is skipped this long: a dead store costs one timeout per pause, and
 * a restarted one is used again soon. */
#define BREAKER_PAUSE_MS 15000
/* A key file shorter than SHA-256's output would make a weaker MAC than the hash allows. */
#define KEY_MIN_BYTES 32
#define KEY_MAX_BYTES 4096
#define REDIS_KEY_PREFIX "jitbridge:v1:"

#define VALUE_MAGIC "JBREMOTE"
#define VALUE_FORMAT 1u
#define VALUE_HEADER_BYTES JB_REMOTE_VALUE_HEADER_BYTES

typedef struct remote_config {
    bool on, read_only;
    char host[256];
    int port, db;
    char unix_path[108]; /* "" for TCP */
    char url[512];       /* for messages: credentials and option values masked */
    unsigned char key[64];
    size_t key_bytes;
    unsigned generation; /* a connection made under another is dropped */
} remote_config;

static pthread_mutex_t config_mutex = PTHREAD_MUTEX_INITIALIZER;
static remote_config config;
static atomic_bool configured; /* the variable was read, or the API set the tier */
static atomic_uint config_generation; /* config's, read without the mutex by connection_give_back */

/* At most one idle connection; a thread takes it out whole (two builds never share one). */
typedef struct idle_connection {
    jb_redis *redis;
    unsigned generation;
} idle_connection;
static _Atomic(idle_connection *) idle;
static void connection_drop(idle_connection *conn);

/* The configuration's lock, then the client's list of connections (never taken under it). */
static void config_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&config_mutex);
        jb__redis_fork(phase);
    } else if (phase == JB_FORK_PARENT) {
        jb__redis_fork(phase);
        pthread_mutex_unlock(&config_mutex);
    } else {
        jb__redis_fork(phase);
        pthread_mutex_init(&config_mutex, NULL);
    }
}
JB_FORK_HANDLER(JB_FORK_REMOTE, config_fork)

static atomic_uint_fast64_t counter_hits, counter_misses, counter_rejected, counter_stores,
    counter_trips;
static atomic_uint_fast64_t breaker_until_ns;
static atomic_int connect_ms = CONNECT_TIMEOUT_MS, operation_ms = OPERATION_TIMEOUT_MS,
                  breaker_ms = BREAKER_PAUSE_MS;

#ifdef JB_TEST_HOOKS
void jb__test_set_remote_timing(int connect, int operation, int breaker)
{
    atomic_store(&connect_ms, connect ? connect : CONNECT_TIMEOUT_MS);
    atomic_store(&operation_ms, operation ? operation : OPERATION_TIMEOUT_MS);
    atomic_store(&breaker_ms, breaker ? breaker : BREAKER_PAUSE_MS);
}
#endif

/* ---- configuration ---- */

/* A decimal number in [min, max] of at most 9 digits from *p, which moves past it. */
static bool parse_number(const char **p, long min, long max, long *out)
{
    const char *s = *p;
    long value = 0;
    size_t digits = 0;
    while (s[digits] >= '0' && s[digits] <= '9' && digits < 10)
        value = value * 10 + (s[digits++] - '0');
    if (digits == 0 || digits > 9 || value < min || value > max)
        return false;
    *p = s + digits;
    *out = value;
    return true;
}

/* `url` as messages show it (`out`, at least as long): a password in its user part
 * ("user:pass@", ":pass@", or "pass@") and every option's value become "***", as they would
 * otherwise reach logs. */
static void mask_url(const char *url, char *out, size_t len)
{
    jb_strbuf sb = {0};
    const char *scheme_end = strstr(url, "://");
    const char *authority = scheme_end ? scheme_end + 3 : url;
    size_t authority_len = strcspn(authority, "/?");
    const char *at = NULL;
    for (const char *q = authority; q < authority + authority_len; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(authority, ':', (size_t)(at - authority));
        size_t kept = (size_t)((colon ? colon + 1 : authority) - url);
        jb__strbuf_appendf(&sb, "%.*s***", (int)kept, url);
        url = at;
    }
    const char *query = strchr(url, '?');
    jb__strbuf_appendf(&sb, "%.*s", (int)(query ? (size_t)(query - url) : strlen(url)), url);
    for (const char *q = query; q && *q;) { /* "?name=value&name=value": names only */
        size_t name = strcspn(q + 1, "=&");
        jb__strbuf_appendf(&sb, "%c%.*s", *q, (int)name, q + 1);
        q += 1 + name;
        if (*q == '=') {
            size_t value = strcspn(q + 1, "&");
            bool mode = name == 4 && strncmp(q - 4, "mode", 4) == 0;
            jb__strbuf_appendf(&sb, "=%.*s", (int)(mode ? value : 3), mode ? q + 1 : "***");
            q += 1 + value;
        }
    }
    snprintf(out, len, "%s", sb.data ? sb.data : "");
    jb__strbuf_free(&sb);
}

/* Parses `url` into `c` (its address, database and mode): JB_OK, or JB_ERR_INVALID_ARGUMENT
 * with *why, which shows the URL masked (mask_url), as c->url keeps it. */
static int parse_url(const char *raw_url, remote_config *c, char *why, size_t why_len)
{
    const char *p, *url = c->url; /* messages show the masked URL only */
    if (strlen(raw_url) >= sizeof c->url) {
        snprintf(why, why_len, "the URL is longer than %zu bytes", sizeof c->url - 1);
        return JB_ERR_INVALID_ARGUMENT;
    }
    mask_url(raw_url, c->url, sizeof c->url);
    if (strncmp(raw_url, "unix://", 7) == 0) {
        p = raw_url + 7;
        size_t len = strcspn(p, "?");
        if (p[0] != '/' || len >= sizeof c->unix_path) {
            snprintf(why, why_len,
                     "'%s': unix:// takes an absolute socket path of at most %zu bytes "
                     "(unix:///run/redis.sock)",
                     url, sizeof c->unix_path - 1);
            return JB_ERR_INVALID_ARGUMENT;
        }
        memcpy(c->unix_path, p, len);
        c->unix_path[len] = '\0';
        p += len;
    } else if (strncmp(raw_url, "redis://", 8) == 0) {
        p = raw_url + 8;
        const char *host = p;
        size_t len;
        if (*p == '[') { /* an IPv6 address */
            len = strspn(p + 1, "0123456789abcdefABCDEF:.");
            if (p[1 + len] != ']') {
                snprintf(why, why_len, "'%s': an IPv6 address is not closed with ']'", url);
                return JB_ERR_INVALID_ARGUMENT;
            }
            host = p + 1;
            p += len + 2;
        } else {
            len = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_");
            p += len;
        }
        if (*p == '@' || strchr(raw_url + 8, '@')) {
            snprintf(why, why_len,
                     "'%s': credentials in the URL are not supported (use a Unix socket or a "
                     "network only the fleet reaches)",
                     url);
            return JB_ERR_INVALID_ARGUMENT;
        }
        long port, db = 0;
        if (len == 0 || len >= sizeof c->host || *p++ != ':' || !parse_number(&p, 1, 65535, &port)) {
            snprintf(why, why_len, "'%s': expected redis://HOST:PORT[/DB] (PORT 1 to 65535)",
                     url);
            return JB_ERR_INVALID_ARGUMENT;
        }
        if (*p == '/' && (p++, !parse_number(&p, 0, 999999, &db))) {
            snprintf(why, why_len, "'%s': the database after '/' must be a number", url);
            return JB_ERR_INVALID_ARGUMENT;
        }
        memcpy(c->host, host, len);
        c->host[len] = '\0';
        c->port = (int)port;
        c->db = (int)db;
    } else {
        snprintf(why, why_len, "'%s': expected redis://HOST:PORT[/DB] or unix:///PATH", url);
        return JB_ERR_INVALID_ARGUMENT;
    }
    if (*p == '\0')
        return JB_OK;
    if (strcmp(p, "?mode=read-only") == 0) {
        c->read_only = true;
        return JB_OK;
    }
    if (strcmp(p, "?mode=read-write") == 0)
        return JB_OK;
    snprintf(why, why_len, "'%s': unexpected options (the one option is ?mode=read-only)", url);
    return JB_ERR_INVALID_ARGUMENT;
}

/* Reads the fleet key from `path` into `c`, refusing a file another user could read or
 * replace: JB_OK, or an error with *why. */
static int read_key_file(const char *path, remote_config *c, char *why, size_t why_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, why_len, "the key file %s cannot be opened: %s", path, strerror(errno));
        return JB_ERR_SYSTEM;
    }
    struct stat st;
    const char *problem = NULL;
    if (fstat(fd, &st) != 0)
        problem = "cannot be examined";
    else if (!S_ISREG(st.st_mode))
        problem = "is not a regular file";
    else if (st.st_uid != geteuid())
        problem = "is owned by another user";
    else if (st.st_mode & (S_IRWXG | S_IRWXO))
        problem = "is readable or writable by group or others (chmod 600 it)";
    else if (st.st_size < KEY_MIN_BYTES)
        problem = "holds fewer than 32 bytes";
    else if (st.st_size > KEY_MAX_BYTES)
        problem = "holds more than 4096 bytes";
    unsigned char key[KEY_MAX_BYTES];
    size_t bytes = problem ? 0 : jb__read_up_to(fd, key, (size_t)st.st_size);
    if (!problem && bytes != (size_t)st.st_size)
        problem = "could not be read whole";
    close(fd);
    if (problem) {
        snprintf(why, why_len, "the key file %s %s", path, problem);
        memset(key, 0, sizeof key);
        return JB_ERR_INVALID_ARGUMENT;
    }
    if (bytes > sizeof c->key) { /* as HMAC would (RFC 2104): one block at most */
        jb__sha256(key, bytes, c->key);
        c->key_bytes = JB_SHA256_BYTES;
    } else {
        memcpy(c->key, key, bytes);
        c->key_bytes = bytes;
    }
    memset(key, 0, sizeof key);
    return JB_OK;
}

/* A configuration from a URL and a key file: JB_OK with c->on, or an error with *why. */
static int configure(const char *url, const char *key_file, remote_config *c, char *why,
                     size_t why_len)
{
    memset(c, 0, sizeof *c);
    JB_FORWARD_IF_ERROR(parse_url(url, c, why, why_len));
    if (!key_file || !*key_file) {
        snprintf(why, why_len,
                 "a remote tier needs the fleet's key file (JITBRIDGE_REMOTE_KEY_FILE): without "
                 "it no entry could be verified");
        return JB_ERR_INVALID_ARGUMENT;
    }
    JB_FORWARD_IF_ERROR(read_key_file(key_file, c, why, why_len));
    const char *load_why;
    if (!jb__redis_client_load(&load_why)) {
        snprintf(why, why_len, "%s", load_why);
        memset(c, 0, sizeof *c);
        return JB_ERR_UNSUPPORTED;
    }
    c->on = true;
    return JB_OK;
}

static void publish(const remote_config *c)
{
    pthread_mutex_lock(&config_mutex);
    config = *c;
    config.generation = atomic_fetch_add(&config_generation, 1) + 1;
    atomic_store(&configured, true);
    pthread_mutex_unlock(&config_mutex);
    atomic_store(&breaker_until_ns, 0);
    /* The old configuration's idle connection is closed now, not left open until a next build
     * (a tier turned off would never have one); one in use is closed when given back. */
    connection_drop(atomic_exchange(&idle, NULL));
}

/* Reads the variables once: a bad one is one warning and no tier. */
static void configure_from_environment(void)
{
    if (atomic_load_explicit(&configured, memory_order_acquire))
        return;
    const char *url = secure_getenv("JITBRIDGE_REMOTE_CACHE"); /* never a setuid caller's */
    remote_config c;
    char why[768] = "";
    bool wanted = url && *url;
    if (!wanted || configure(url, secure_getenv("JITBRIDGE_REMOTE_KEY_FILE"), &c, why,
                             sizeof why) != JB_OK)
        memset(&c, 0, sizeof c);
    pthread_mutex_lock(&config_mutex);
    bool first = !atomic_load(&configured);
    if (first) {
        config = c;
        config.generation = atomic_fetch_add(&config_generation, 1) + 1;
        atomic_store(&configured, true);
    }
    pthread_mutex_unlock(&config_mutex);
    memset(&c, 0, sizeof c);
    if (first && wanted && why[0])
        jb__warn("JITBRIDGE_REMOTE_CACHE: no remote tier: %s", why);
}

/* The configuration in force, copied (false when there is no tier). */
static bool snapshot(remote_config *out)
{
    configure_from_environment();
    pthread_mutex_lock(&config_mutex);
    *out = config;
    pthread_mutex_unlock(&config_mutex);
    return out->on;
}

jb_status jb_remote_cache_set(const char *url, const char *key_file)
{
    remote_config c;
    memset(&c, 0, sizeof c);
    if (url && *url) {
        char why[768];
        int status = configure(url, key_file, &c, why, sizeof why);
        JB_RETURN_IF(status != JB_OK, status, "jb_remote_cache_set: %s (the tier is unchanged)",
                     why);
    }
    publish(&c);
    memset(&c, 0, sizeof c);
    return JB_OK;
}

/* ---- the breaker ---- */

static bool breaker_open(void)
{
    return jb__now_ns() < atomic_load(&breaker_until_ns);
}

/* `text` with every byte that is not printable ASCII as '?': what a store sends (an error
 * reply's words) reaches the host's log, where control bytes could forge lines or drive a
 * terminal. */
static void printable_only(char *text)
{
    for (; *text; text++)
        if (*text < 0x20 || *text > 0x7e)
            *text = '?';
}

/* One trip per failure while the tier was in use: counted, one warning. */
static void breaker_trip(const remote_config *c, const char *what, const char *given_why)
{
    char why[512];
    snprintf(why, sizeof why, "%s", given_why);
    printable_only(why);
    uint64_t now = jb__now_ns(), until = atomic_load(&breaker_until_ns);
    int pause = atomic_load(&breaker_ms);
    if (now < until ||
        !atomic_compare_exchange_strong(&breaker_until_ns, &until,
                                        now + (uint64_t)pause * 1000000ULL))
        return; /* already open: another thread's failure tripped it */
    atomic_fetch_add(&counter_trips, 1);
    jb__warn("the remote cache %s failed to %s (%s): skipped for %d ms, then tried again "
             "(compiling meanwhile)",
             c->url, what, why, pause);
}

bool jb__remote_on(void)
{
    remote_config c;
    bool on = snapshot(&c);
    memset(&c.key, 0, sizeof c.key);
    return on;
}

/* ---- the connection ---- */

static void connection_drop(idle_connection *conn)
{
    if (conn) {
        jb__redis_free(conn->redis);
        free(conn);
    }
}

/* The idle connection when it is this process's and of this configuration, else a new one;
 * NULL with *why. */
static idle_connection *connection_take(const remote_config *c, char *why, size_t why_len)
{
    idle_connection *conn = atomic_exchange(&idle, NULL);
    if (conn && jb__redis_owned_here(conn->redis) && conn->generation == c->generation)
        return conn;
    connection_drop(conn); /* a fork child's copy, or another configuration's */
    conn = malloc(sizeof *conn);
    if (!conn) {
        snprintf(why, why_len, "no memory");
        return NULL;
    }
    conn->generation = c->generation;
    if (jb__redis_connect(c->host, c->port, c->unix_path[0] ? c->unix_path : NULL,
                          atomic_load(&connect_ms), atomic_load(&operation_ms),
                          FIRST_BYTE_TIMEOUT_MS, &conn->redis, why, why_len) != JB_OK) {
        free(conn);
        return NULL;
    }
    if (c->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", c->db);
        const char *argv[] = {"SELECT", db};
        size_t lens[] = {6, strlen(db)};
        jb_redis_reply reply;
        if (jb__redis_command(conn->redis, 2, argv, lens, &reply, why, why_len) != JB_OK) {
            connection_drop(conn);
            return NULL;
        }
        bool selected = reply.type == JB_REDIS_STATUS && strcmp(reply.str, "OK") == 0;
        if (!selected)
            snprintf(why, why_len, "SELECT %d: %.*s", c->db, (int)(reply.len > 200 ? 200 : reply.len),
                     reply.str ? reply.str : "");
        jb__redis_reply_free(&reply);
        if (!selected) {
            connection_drop(conn);
            return NULL;
        }
    }
    return conn;
}

static void connection_give_back(idle_connection *conn)
{
    idle_connection *none = NULL;
    if (conn->generation != atomic_load(&config_generation))
        connection_drop(conn); /* the tier was set anew while it was in use */
    else if (!atomic_compare_exchange_strong(&idle, &none, conn))
        connection_drop(conn); /* another build's connection is idle already */
    else if (conn->generation != atomic_load(&config_generation))
        connection_drop(atomic_exchange(&idle, NULL)); /* set anew meanwhile: publish missed it */
}

/* Runs one command on a connection of `c`: JB_OK with its reply (never an error reply), or a
 * failure (the breaker has tripped, the connection is gone). JB_ERR_INVALID_ARGUMENT, with no
 * trip: the key holds another type than the command works on (a WRONGTYPE error), which says
 * nothing of the store's health, only of that key (another tenant's doing). */
static int remote_command(const remote_config *c, const char *what, int argc, const char **argv,
                          const size_t *lens, jb_redis_reply *reply)
{
    char why[512] = "";
    idle_connection *conn = connection_take(c, why, sizeof why);
    if (!conn) {
        breaker_trip(c, what, why);
        return JB_ERR_SYSTEM;
    }
    JB_TEST_POINT(JB_TEST_REMOTE_COMMAND, what);
    if (jb__redis_command(conn->redis, argc, argv, lens, reply, why, sizeof why) != JB_OK) {
        connection_drop(conn);
        breaker_trip(c, what, why);
        return JB_ERR_SYSTEM;
    }
    connection_give_back(conn);
    if (reply->type == JB_REDIS_ERROR && strncmp(reply->str, "WRONGTYPE", 9) == 0) {
        jb__redis_reply_free(reply);
        return JB_ERR_INVALID_ARGUMENT;
    }
    if (reply->type == JB_REDIS_ERROR) { /* a full store, a store still loading, a proxy's own */
        snprintf(why, sizeof why, "%.*s", (int)(reply->len > 200 ? 200 : reply->len),
                 reply->str ? reply->str : "");
        jb__redis_reply_free(reply);
        breaker_trip(c, what, why);
        return JB_ERR_SYSTEM;
    }
    return JB_OK;
}

/* remote_command, whose reply must be of type `expected` (a status: +OK, as every command sent
 * that answers one must; +QUEUED would be a session in a transaction): a reply of another type
 * (a hostile or broken store) trips the breaker too, never used. */
static int remote_command_expecting(const remote_config *c, const char *what, int argc,
                                    const char **argv, const size_t *lens, int expected,
                                    jb_redis_reply *reply)
{
    int status = remote_command(c, what, argc, argv, lens, reply);
    if (status != JB_OK)
        return status;
    if (reply->type != expected ||
        (expected == JB_REDIS_STATUS && strcmp(reply->str, "OK") != 0)) {
        char why[128];
        snprintf(why, sizeof why, "the store answered with a reply of type %d, not %d%s",
                 reply->type, expected, reply->type == expected ? " +OK" : "");
        jb__redis_reply_free(reply);
        breaker_trip(c, what, why);
        return JB_ERR_SYSTEM;
    }
    return JB_OK;
}

/* ---- values ---- */

static void put_le(unsigned char *p, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void value_mac(const remote_config *c, const unsigned char *header, const void *key_text,
                      size_t key_bytes, const void *payload, size_t payload_bytes,
                      unsigned char out[JB_SHA256_BYTES])
{
    jb_hmac_sha256 h;
    jb__hmac_sha256_init(&h, c->key, c->key_bytes);
    jb__hmac_sha256_update(&h, header, VALUE_HEADER_BYTES);
    jb__hmac_sha256_update(&h, key_text, key_bytes);
    jb__hmac_sha256_update(&h, payload, payload_bytes);
    jb__hmac_sha256_final(&h, out);
}

/* Why `value` must not be loaded as `key`'s code, or NULL with *payload_at set. */
static const char *value_problem(const remote_config *c, const jb_disk_key *key,
                                 const unsigned char *value, size_t size, size_t *payload_at)
{
    if (size < VALUE_HEADER_BYTES || memcmp(value, VALUE_MAGIC, 8) != 0)
        return "is not a jitbridge remote entry";
    if (get_le(value + 8, 4) != VALUE_FORMAT)
        return "is of another format version";
    uint64_t key_bytes = get_le(value + 12, 4), payload_bytes = get_le(value + 16, 8);
    if (payload_bytes > JB_DISK_ENTRY_MAX_BYTES || key_bytes > JB_DISK_ENTRY_MAX_BYTES)
        return "is larger than the entry cap";
    uint64_t expected = VALUE_HEADER_BYTES + key_bytes + 2 * JB_SHA256_BYTES + payload_bytes;
    if (size != expected)
        return size < expected ? "is cut short" : "is longer than its lengths say";
    const unsigned char *key_text = value + VALUE_HEADER_BYTES;
    if (key_bytes != key->bytes || memcmp(key_text, key->text, key->bytes) != 0)
        return "is filed under this key's name but holds another key (another kernel, target "
               "or compiler)";
    const unsigned char *digest = key_text + key_bytes, *mac = digest + JB_SHA256_BYTES,
                        *payload = mac + JB_SHA256_BYTES;
    unsigned char computed[JB_SHA256_BYTES];
    jb__sha256(payload, payload_bytes, computed);
    if (memcmp(computed, digest, sizeof computed) != 0)
        return "fails its checksum (corrupted or cut)";
    value_mac(c, value, key_text, key_bytes, payload, payload_bytes, computed);
    if (!jb__equal_in_constant_time(computed, mac, sizeof computed))
        return "is not signed with this fleet's key (a forged entry, or another fleet's)";
    *payload_at = (size_t)(payload - value);
    return NULL;
}

static void redis_key(const jb_disk_key *key, char out[64])
{
    snprintf(out, 64, "%s%.*s", REDIS_KEY_PREFIX, JB_DISK_ENTRY_HEX, key->file);
}

static _Thread_local bool last_load_missed; /* the store answered: no value under the key */

/* Why the value `value` (`size` bytes) must not be loaded, or NULL with *payload_at set; the
 * context is the caller's (the key it must be filed under, or how to find it). */
typedef const char *value_check(const remote_config *c, const unsigned char *value, size_t size,
                                void *context, size_t *payload_at);

/* The payload of the value at the Redis key `name` into *out, once `check` passes it: true.
 * False for a miss (counted, last_load_missed), a rejection (counted and raised as an event),
 * or a store that failed (the breaker has tripped). */
static bool read_verified(const char *name, value_check *check, void *context, jb_blob *out)
{
    last_load_missed = false;
    remote_config c;
    if (!snapshot(&c) || breaker_open()) {
        memset(&c.key, 0, sizeof c.key);
        return false;
    }
    /* GETRANGE bounds what an honest store sends (its end is inclusive); the client refuses a
     * longer reply from a dishonest one unread. */
    char last[24];
    size_t max_bytes = jb__redis_reply_max_bytes();
    snprintf(last, sizeof last, "%zu", max_bytes - 1);
    const char *argv[] = {"GETRANGE", name, "0", last};
    size_t lens[] = {8, strlen(name), 1, strlen(last)};
    jb_redis_reply reply;
    int status =
        remote_command_expecting(&c, "read an entry", 4, argv, lens, JB_REDIS_STRING, &reply);
    if (status != JB_OK && status != JB_ERR_INVALID_ARGUMENT) {
        memset(&c.key, 0, sizeof c.key);
        return false;
    }
    const char *problem = NULL;
    size_t payload_at = 0;
    bool loaded = false;
    if (status == JB_ERR_INVALID_ARGUMENT) {
        problem = "is not a string (the key was made another type: the store is shared)";
    } else if (reply.len == 0) {
        atomic_fetch_add(&counter_misses, 1); /* GETRANGE answers "" for a missing key */
        last_load_missed = true;
    } else if (reply.len >= max_bytes) { /* the longest value stored is shorter (remote_store) */
        problem = "is larger than the entry cap";
    } else if (!(problem = check(&c, (const unsigned char *)reply.str, reply.len, context,
                                 &payload_at))) {
        size_t bytes = reply.len - payload_at;
        out->data = malloc(bytes ? bytes : 1);
        if (out->data) {
            memcpy(out->data, reply.str + payload_at, bytes);
            out->size = bytes;
            loaded = true;
        }
    }
    if (status == JB_OK)
        jb__redis_reply_free(&reply);
    memset(&c.key, 0, sizeof c.key);
    if (problem) {
        atomic_fetch_add(&counter_rejected, 1);
        char why[512];
        snprintf(why, sizeof why, "remote entry %s %s", name, problem);
        jb__event_raise(JB_CACHE_EVENT_REMOTE_REJECTED, 0, JB_OK, why);
    }
    return loaded;
}

/* value_check for a value that must be of the key `context` (a jb_disk_key). */
static const char *keyed_problem(const remote_config *c, const unsigned char *value, size_t size,
                                 void *context, size_t *payload_at)
{
    return value_problem(c, context, value, size, payload_at);
}

bool jb__remote_load(const jb_disk_key *key, jb_blob *out)
{
    char name[64];
    redis_key(key, name);
    return read_verified(name, keyed_problem, (void *)key, out);
}

void jb__remote_accept(void)
{
    atomic_fetch_add(&counter_hits, 1);
}

void jb__remote_reject(void)
{
    atomic_fetch_add(&counter_rejected, 1);
}

static _Thread_local bool last_store_stored; /* the store answered +OK to this thread's SET */

void jb__remote_store(const jb_disk_key *key, const jb_blob *code)
{
    last_store_stored = false;
    remote_config c;
    /* Nothing is stored that a load would not read back whole: a load asks for fewer bytes
     * than the cap (GETRANGE's end), so a value must be shorter too. */
    size_t bytes = VALUE_HEADER_BYTES + key->bytes + 2 * JB_SHA256_BYTES + code->size;
    if (!snapshot(&c) || c.read_only || breaker_open() || key->bytes > JB_DISK_ENTRY_MAX_BYTES ||
        code->size > JB_DISK_ENTRY_MAX_BYTES || bytes >= jb__redis_reply_max_bytes()) {
        memset(&c.key, 0, sizeof c.key);
        return;
    }
    uint64_t start = jb__now_ns();
    unsigned char *value = malloc(bytes);
    if (!value) {
        memset(&c.key, 0, sizeof c.key);
        return;
    }
    memcpy(value, VALUE_MAGIC, 8);
    put_le(value + 8, VALUE_FORMAT, 4);
    put_le(value + 12, key->bytes, 4);
    put_le(value + 16, code->size, 8);
    unsigned char *key_text = value + VALUE_HEADER_BYTES, *digest = key_text + key->bytes,
                  *mac = digest + JB_SHA256_BYTES, *payload = mac + JB_SHA256_BYTES;
    memcpy(key_text, key->text, key->bytes);
    memcpy(payload, code->data, code->size);
    jb__sha256(payload, code->size, digest);
    value_mac(&c, value, key_text, key->bytes, payload, code->size, mac);
    memset(&c.key, 0, sizeof c.key);
    char name[64];
    redis_key(key, name);
    const char *argv[] = {"SET", name, (const char *)value};
    size_t lens[] = {3, strlen(name), bytes};
    jb_redis_reply reply;
    if (remote_command_expecting(&c, "store an entry", 3, argv, lens, JB_REDIS_STATUS, &reply) ==
        JB_OK) {
        jb__redis_reply_free(&reply);
        atomic_fetch_add(&counter_stores, 1);
        last_store_stored = true;
        jb__event_raise(JB_CACHE_EVENT_REMOTE_STORE, jb__now_ns() - start, JB_OK, NULL);
    }
    free(value);
}

void jb__remote_counters(uint64_t *hits, uint64_t *misses, uint64_t *rejected, uint64_t *stores,
                         uint64_t *breaker_trips)
{
    *hits = atomic_load(&counter_hits);
    *misses = atomic_load(&counter_misses);
    *rejected = atomic_load(&counter_rejected);
    *stores = atomic_load(&counter_stores);
    *breaker_trips = atomic_load(&counter_trips);
}

void jb__remote_counters_reset(void)
{
    atomic_store(&counter_hits, 0);
    atomic_store(&counter_misses, 0);
    atomic_store(&counter_rejected, 0);
    atomic_store(&counter_stores, 0);
    atomic_store(&counter_trips, 0);
}

/* ---- for the fleet's lease (remote_lease.c) ---- */

bool jb__remote_writable(void)
{
    remote_config c;
    bool writable = snapshot(&c) && !c.read_only && !breaker_open();
    memset(&c.key, 0, sizeof c.key);
    return writable;
}

bool jb__remote_last_load_missed(void)
{
    return last_load_missed;
}

void jb__remote_entry_name(const jb_disk_key *key, char out[64])
{
    redis_key(key, out);
}

int jb__remote_call(const char *what, int argc, const char **argv, const size_t *lens,
                    jb_redis_reply *reply)
{
    remote_config c;
    bool usable = snapshot(&c) && !breaker_open();
    memset(&c.key, 0, sizeof c.key); /* a command needs the address, never the fleet's key */
    if (!usable) {
        memset(reply, 0, sizeof *reply);
        return JB_ERR_UNSUPPORTED;
    }
    return remote_command(&c, what, argc, argv, lens, reply);
}

/* ---- the check (jitbridge cache remote) ---- */

/* Why there is no tier: the variables' error when they ask for one, else that none was set. */
static void no_tier_why(jb_remote_check *out)
{
    const char *url = secure_getenv("JITBRIDGE_REMOTE_CACHE");
    if (!url || !*url) {
        snprintf(out->why, sizeof out->why,
                 "JITBRIDGE_REMOTE_CACHE is not set (nor was a tier set by jb_remote_cache_set)");
        return;
    }
    mask_url(url, out->url, sizeof out->url);
    remote_config c;
    if (configure(url, secure_getenv("JITBRIDGE_REMOTE_KEY_FILE"), &c, out->why,
                  sizeof out->why) == JB_OK)
        snprintf(out->why, sizeof out->why, "the tier was turned off (jb_remote_cache_set)");
    memset(&c, 0, sizeof c);
}

jb_status jb_remote_cache_check(jb_remote_check *out, int pings)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_remote_cache_check: out is NULL");
    JB_RETURN_IF(pings < 1 || pings > 100, JB_ERR_INVALID_ARGUMENT,
                 "jb_remote_cache_check: pings is %d, not 1 to 100", pings);
    memset(out, 0, sizeof *out);
    const char *load_why = NULL;
    out->client_loaded = jb__redis_client_load(&load_why);
    remote_config c;
    if (!snapshot(&c)) {
        memset(&c.key, 0, sizeof c.key);
        no_tier_why(out);
        return JB_OK;
    }
    memset(&c.key, 0, sizeof c.key); /* a PING needs the address, never the fleet's key */
    out->configured = 1;
    out->read_only = c.read_only;
    snprintf(out->url, sizeof out->url, "%s", c.url);
    uint64_t start = jb__now_ns();
    idle_connection *conn = connection_take(&c, out->why, sizeof out->why);
    if (!conn) {
        printable_only(out->why);
        return JB_OK;
    }
    out->connect_ms = (double)(jb__now_ns() - start) / 1e6;
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    for (int i = 0; i < pings; i++) {
        jb_redis_reply reply;
        start = jb__now_ns();
        if (jb__redis_command(conn->redis, 1, argv, lens, &reply, out->why, sizeof out->why) !=
            JB_OK) {
            connection_drop(conn);
            printable_only(out->why);
            return JB_OK;
        }
        double ms = (double)(jb__now_ns() - start) / 1e6;
        bool pong = reply.type == JB_REDIS_STATUS && strcmp(reply.str, "PONG") == 0;
        if (!pong)
            snprintf(out->why, sizeof out->why, "PING was answered with %.*s",
                     (int)(reply.len > 200 ? 200 : reply.len), reply.str ? reply.str : "nothing");
        jb__redis_reply_free(&reply);
        if (!pong) {
            connection_drop(conn);
            printable_only(out->why);
            return JB_OK;
        }
        if (out->pings == 0 || ms < out->round_trip_ms)
            out->round_trip_ms = ms;
        out->pings++;
    }
    connection_give_back(conn);
    out->reachable = 1;
    return JB_OK;
}

/* ---- for export and import (remote_admin.c) ---- */

bool jb__remote_last_store_stored(void)
{
    return last_store_stored;
}

/* The tier for an export or import: JB_OK, or an error that says why it cannot be used. */
int jb__remote_usable(bool for_writing)
{
    remote_config c;
    bool on = snapshot(&c);
    memset(&c.key, 0, sizeof c.key);
    JB_RETURN_IF(!on, JB_ERR_UNSUPPORTED,
                 "no remote tier is set (JITBRIDGE_REMOTE_CACHE and JITBRIDGE_REMOTE_KEY_FILE)");
    JB_RETURN_IF(for_writing && c.read_only, JB_ERR_INVALID_ARGUMENT,
                 "the remote tier %s is read-only: nothing is written to it", c.url);
    JB_RETURN_IF(breaker_open(), JB_ERR_SYSTEM,
                 "the remote tier %s failed and is skipped for now (see the warning)", c.url);
    return JB_OK;
}

/* A manifest's value: the key text it names must hash to `digest`; it becomes *key. */
typedef struct named_value {
    const unsigned char *digest;
    jb_disk_key *key;
} named_value;

/* value_check for a value filed under a manifest's digest (`context`, a named_value): the key
 * text the value names must be the one the manifest names; then it is checked as a load checks
 * a value for that key (lengths, checksum, the fleet's MAC). */
static const char *named_problem(const remote_config *c, const unsigned char *value, size_t size,
                                 void *context, size_t *payload_at)
{
    named_value *named = context;
    if (size < VALUE_HEADER_BYTES || get_le(value + 12, 4) > size - VALUE_HEADER_BYTES)
        return "is not a jitbridge remote entry, or is cut short";
    size_t key_bytes = (size_t)get_le(value + 12, 4);
    unsigned char hashed[JB_SHA256_BYTES];
    jb__sha256(value + VALUE_HEADER_BYTES, key_bytes, hashed);
    if (memcmp(hashed, named->digest, sizeof hashed) != 0)
        return "holds another key than the one it is filed under";
    jb_disk_key *key = named->key;
    key->text = malloc(key_bytes + 1);
    if (!key->text)
        return "cannot be checked (no memory for its key)";
    memcpy(key->text, value + VALUE_HEADER_BYTES, key_bytes);
    key->text[key_bytes] = '\0';
    key->bytes = key_bytes;
    jb__disk_key_name(key);
    return value_problem(c, key, value, size, payload_at);
}

bool jb__remote_load_named(const unsigned char digest[JB_SHA256_BYTES], jb_disk_key *key,
                           jb_blob *out)
{
    memset(key, 0, sizeof *key);
    out->data = NULL;
    out->size = 0;
    char hex[2 * JB_SHA256_BYTES + 1], name[64];
    jb__hex(digest, JB_SHA256_BYTES, hex);
    snprintf(name, sizeof name, "%s%.*s", REDIS_KEY_PREFIX, JB_DISK_ENTRY_HEX, hex);
    named_value named = {digest, key};
    if (read_verified(name, named_problem, &named, out))
        return true;
    free(key->text);
    memset(key, 0, sizeof *key);
    return false;
}
