/*
 * The remote tier against a real redis-server, started by the test on a Unix socket in its own
 * temporary folder and killed when it ends (atexit, and PR_SET_PDEATHSIG if the test dies).
 * Each case runs a new process (this program, "child" mode) with its own cache folder, as a new
 * host would: a compile stores to the remote; a new process with an empty folder loads it with
 * no compile and then has it on disk; forged, cut, foreign-keyed and misfiled values are
 * rejected (counter and event) and compiled instead; a read-only tier stores nothing; a stopped
 * server (SIGSTOP) and a killed one cost a compile and one breaker trip, no SIGPIPE reaches a
 * process with default handling, and nothing in the cache folder is lost; bad URLs and key
 * files are refused, with passwords masked in every message. A hostile store (a socket of the
 * test's answering crafted RESP: one byte at a time, a 256 MiB reply, wrong types, bytes that
 * are not RESP, control bytes, a close while a value is sent) costs a compile and one trip
 * within the deadline, in bounded memory; a hanging resolver is given up on; a fork child never
 * sends on its parent's connection; setting the tier anew closes its connection. Built with
 * JB_TEST_HOOKS (shorter timeouts, the value cap, a slow resolver, test points).
 * Without redis-server the test fails: CI installs it.
 */
#include "../src/kernels/kernels.h"
#include "../src/store/store.h"
#include "helpers.h"
#include "redis_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef JB_TEST_HOOKS
#error "test_remote needs a JB_TEST_HOOKS build of the library (shorter remote timeouts)"
#endif

#define N 8

/* ---- child mode: launches, then one line of what happened ---- */

static long long connections_received(void);
static long long clients_connected(void);

static atomic_int events[JB_CACHE_EVENT_REMOTE_STORE + 1];
static char content_key[80];
static char rejection[512];
static atomic_int warnings;
static char warning[1024];

static void count_event(void *user_data, const jb_cache_event *e)
{
    (void)user_data;
    if (e->kind > 0 && e->kind <= JB_CACHE_EVENT_REMOTE_STORE)
        atomic_fetch_add(&events[e->kind], 1);
    if (e->content_key[0])
        snprintf(content_key, sizeof content_key, "%s", e->content_key);
    if (e->kind == JB_CACHE_EVENT_REMOTE_REJECTED)
        snprintf(rejection, sizeof rejection, "%s", e->message);
}

static void keep_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    atomic_fetch_add(&warnings, 1);
    snprintf(warning, sizeof warning, "%s", message);
}

/* Kernel `salt`; from 1000 on its body carries a comment of 1 MiB (from 2000 on, 4 MiB), so that
 * its remote value is larger than a socket's buffer (a store that dies while it is sent, or
 * that reads it slowly). */
/* At the first store's command: the tier is turned off while its connection is in use. */
static void turn_off_at_store(void *ctx, const char *what)
{
    atomic_bool *done = ctx;
    if (strcmp(what, "store an entry") == 0 && !atomic_exchange(done, true))
        jb_remote_cache_set(NULL, NULL);
}

static bool launch(jb_device *device, int salt)
{
    char name[32];
    size_t padding = salt >= 2000 ? 4u << 20 : salt >= 1000 ? 1u << 20 : 0;
    char *body = malloc(padding + 96);
    snprintf(name, sizeof name, "remote_%d", salt);
    snprintf(body, 96, "out[thread_index()] = %d.0f;", salt);
    if (padding) {
        size_t at = strlen(body);
        memcpy(body + at, "/*", 2);
        memset(body + at + 2, 'p', padding);
        memcpy(body + at + 2 + padding, "*/", 3);
    }
    jb_custom_kernel *k = f32_kernel(name, body);
    free(body);
    jb_array *x = f32_filled(device, N, 0.0f), *y = NULL;
    bool exact = f32_launch(&y, k, &x, 1, N) == JB_OK && f32_all_equal(y, N, (float)salt);
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    return exact;
}

/* argv: child SALTS ACTION. SALTS: launched in order ("1,2"); ACTION "kill-after-first": the
 * server (JB_TEST_REDIS_PID, socket JB_TEST_REDIS_SOCKET) is killed after the first launch;
 * "fork-after-first": a forked child launches kernel 100 (its exit status says whether it ran
 * right), and the connections the server received meanwhile are counted; "pause-after-each":
 * 20 ms pass after each launch (more than a 1 ms breaker pause); "reconfigure-after-first": the
 * tier is turned off (the server's clients counted before and after), then set again from the
 * variables (JB_TEST_RESOLVE_ANSWER sets every host name's addresses); "reconfigure-during-store": the tier is turned off while the first store's
 * connection is in use (the clients counted after the launches). JB_TEST_VALUE_MAX and JB_TEST_RESOLVE_DELAY_MS set those hooks. */
static int child_main(char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* a host with default handling: a SIGPIPE would kill it */
    const char *timing = getenv("JB_TEST_REMOTE_TIMING");
    int connect_ms = 0, operation_ms = 0, breaker_ms = 0;
    if (timing)
        sscanf(timing, "%d,%d,%d", &connect_ms, &operation_ms, &breaker_ms);
    jb__test_set_remote_timing(connect_ms, operation_ms, breaker_ms);
    const char *value_max = getenv("JB_TEST_VALUE_MAX"), *delay = getenv("JB_TEST_RESOLVE_DELAY_MS");
    jb__test_set_remote_value_max(value_max ? (size_t)atoll(value_max) : 0);
    jb__test_set_resolve_delay_ms(delay ? atoi(delay) : 0);
    jb__test_set_resolve_answer(getenv("JB_TEST_RESOLVE_ANSWER"));
    long long clients_before = -1, clients_after = -1;
    static atomic_bool turned_off;
    if (strcmp(argv[3], "reconfigure-during-store") == 0)
        jb__test_set_point(JB_TEST_REMOTE_COMMAND, turn_off_at_store, &turned_off);
    jb_set_log_callback(keep_warning, NULL);
    jb_set_event_callback(count_event, NULL);
    jb_device *device = test_device();
    bool exact = device != NULL;
    char *salts = argv[2];
    bool first = true;
    long long fork_connections = -1;
    for (char *s = strtok(salts, ","); s; s = strtok(NULL, ",")) {
        exact = launch(device, atoi(s)) && exact;
        if (first && strcmp(argv[3], "kill-after-first") == 0) {
            pid_t server = (pid_t)atol(getenv("JB_TEST_REDIS_PID"));
            kill(server, SIGKILL);
            for (int i = 0; i < 1000 && socket_answers(getenv("JB_TEST_REDIS_SOCKET")); i++)
                sleep_ms(10);
        }
        if (first && strcmp(argv[3], "fork-after-first") == 0) {
            long long before = connections_received();
            pid_t pid = fork();
            if (pid == 0)
                _exit(launch(device, 100) ? 0 : 1);
            int status = 0;
            waitpid(pid, &status, 0);
            exact = WIFEXITED(status) && WEXITSTATUS(status) == 0 && exact;
            /* Less this count's own connection. */
            fork_connections = connections_received() - before - 1;
        }
        if (first && strcmp(argv[3], "reconfigure-after-first") == 0) {
            clients_before = clients_connected();
            exact = jb_remote_cache_set(NULL, NULL) == JB_OK && exact;
            clients_after = clients_connected();
            exact = jb_remote_cache_set(getenv("JITBRIDGE_REMOTE_CACHE"),
                                        getenv("JITBRIDGE_REMOTE_KEY_FILE")) == JB_OK &&
                    exact;
        }
        if (strcmp(argv[3], "pause-after-each") == 0)
            sleep_ms(20);
        first = false;
    }
    if (strcmp(argv[3], "reconfigure-during-store") == 0) {
        jb__test_set_point(JB_TEST_REMOTE_COMMAND, NULL, NULL);
        clients_after = clients_connected();
    }
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("builds=%llu disk_hits=%llu remote_hits=%llu remote_misses=%llu remote_rejected=%llu "
           "remote_stores=%llu trips=%llu ev_hit=%d ev_rejected=%d ev_store=%d warnings=%d "
           "exact=%d key=%s fork_connections=%lld max_rss_kb=%ld clients=%lld,%lld\n",
           (unsigned long long)c.builds, (unsigned long long)c.disk_hits,
           (unsigned long long)c.remote_hits, (unsigned long long)c.remote_misses,
           (unsigned long long)c.remote_rejected, (unsigned long long)c.remote_stores,
           (unsigned long long)c.remote_breaker_trips, events[JB_CACHE_EVENT_REMOTE_HIT],
           events[JB_CACHE_EVENT_REMOTE_REJECTED], events[JB_CACHE_EVENT_REMOTE_STORE],
           warnings, exact, content_key[0] ? content_key : "-", fork_connections,
           usage.ru_maxrss, clients_before, clients_after);
    printf("rejection: %s\nwarning: %s\n", rejection, warning);
    jb_set_event_callback(NULL, NULL);
    jb_set_log_callback(NULL, NULL);
    return 0;
}

/* ---- the server ---- */

static char folder[128], socket_path[160], self[PATH_MAX];
static const char *child_socket; /* in child mode: the server's socket */
static pid_t server_pid;

static void stop_server(void)
{
    redis_server_stop(&server_pid);
}

static void stop_fake(void);

static void clean_up(void)
{
    stop_fake();
    stop_server();
    remove_tree(folder);
}

static bool start_server(void)
{
    server_pid = redis_server_start(folder, socket_path);
    return server_pid > 0;
}

static bool redis_server_found(void)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "/usr/bin:/bin");
    bool found = false;
    for (char *dir = strtok(copy, ":"); dir && !found; dir = strtok(NULL, ":")) {
        char candidate[PATH_MAX];
        snprintf(candidate, sizeof candidate, "%s/redis-server", dir);
        found = access(candidate, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* ---- a small RESP client, to read and forge values ---- */

typedef struct resp {
    char type; /* '+', '-', ':', '$' ('$' with len -1: nil); 0 when the exchange failed */
    long long number;
    char *data;
    size_t len;
} resp;

static bool read_exact(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static bool read_line(int fd, char *line, size_t len)
{
    size_t n = 0;
    while (n + 1 < len && read_exact(fd, line + n, 1)) {
        if (n > 0 && line[n - 1] == '\r' && line[n] == '\n') {
            line[n - 1] = '\0';
            return true;
        }
        n++;
    }
    return false;
}

static resp command(int argc, const char **argv, const size_t *lens)
{
    resp out = {0};
    int fd = connect_to(child_socket ? child_socket : socket_path);
    if (fd < 0)
        return out;
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        jb__strbuf_appendf(&sb, "$%zu\r\n", lens[i]);
        bool sent = jb__write_all(fd, sb.data, sb.len) && jb__write_all(fd, argv[i], lens[i]) &&
                    jb__write_all(fd, "\r\n", 2);
        sb.len = 0;
        if (sb.data)
            sb.data[0] = '\0';
        if (!sent)
            goto done;
    }
    char line[128];
    if (!read_line(fd, line, sizeof line))
        goto done;
    out.type = line[0];
    out.number = atoll(line + 1);
    if (out.type == '$' && out.number >= 0) {
        out.len = (size_t)out.number;
        out.data = malloc(out.len + 2);
        if (!read_exact(fd, out.data, out.len + 2))
            out.type = 0;
    } else if (out.type == '+' || out.type == '-') {
        out.data = strdup(line + 1);
        out.len = strlen(line + 1);
    }
done:
    jb__strbuf_free(&sb);
    close(fd);
    return out;
}

static resp command2(const char *a, const char *b)
{
    const char *argv[] = {a, b};
    size_t lens[] = {strlen(a), b ? strlen(b) : 0};
    return command(b ? 2 : 1, argv, lens);
}

static bool set_value(const char *name, const char *value, size_t len)
{
    const char *argv[] = {"SET", name, value};
    size_t lens[] = {3, strlen(name), len};
    resp r = command(3, argv, lens);
    free(r.data);
    return r.type == '+';
}

/* The value under the remote name of content key `key` (NULL when none). */
static char *get_value(const char *key, size_t *len)
{
    char name[128];
    snprintf(name, sizeof name, "jitbridge:v1:%s", key);
    resp r = command2("GET", name);
    if (r.type != '$' || r.number < 0) {
        free(r.data);
        return NULL;
    }
    *len = r.len;
    return r.data;
}

/* The connections the server accepted since it started (INFO stats), or -1. */
static long long connections_received(void)
{
    resp r = command2("INFO", "stats");
    const char *field = r.type == '$' ? strstr(r.data, "total_connections_received:") : NULL;
    long long n = field ? atoll(field + strlen("total_connections_received:")) : -1;
    free(r.data);
    return n;
}

/* The clients connected to the server now, this query's included (INFO clients), or -1. */
static long long clients_connected(void)
{
    resp r = command2("INFO", "clients");
    const char *field = r.type == '$' ? strstr(r.data, "connected_clients:") : NULL;
    long long n = field ? atoll(field + strlen("connected_clients:")) : -1;
    free(r.data);
    return n;
}

static long long db_size(void)
{
    resp r = command2("DBSIZE", NULL);
    free(r.data);
    return r.type == ':' ? r.number : -1;
}

/* ---- a hostile store: a socket that answers crafted RESP ---- */

static char fake_path[160];
static pid_t fake_pid;

static void stop_fake(void)
{
    if (fake_pid > 0) {
        kill(fake_pid, SIGKILL);
        waitpid(fake_pid, NULL, 0);
        fake_pid = 0;
    }
}

/* Sends `text` one byte every `pause_ms` (0: at once): false once the client has gone. */
static bool send_slowly(int fd, const char *text, int pause_ms)
{
    for (size_t i = 0; text[i]; i++) {
        size_t n = pause_ms ? 1 : strlen(text + i);
        if (send(fd, text + i, n, MSG_NOSIGNAL) != (ssize_t)n)
            return false;
        i += n - 1;
        if (pause_ms)
            sleep_ms(pause_ms);
    }
    return true;
}

/* Reads one command into `name` (its first word, cut to 15 bytes): false at its end or when
 * the command is a SET and `stop_at_set` (the rest is left unread). */
/* Reads one command: its name and whether its key is a fleet lease's (`jb:lease:...`). With
 * stop_at_set, gives up after the key of a SET of a value, as a store that closes mid-store. */
static bool slow_taker; /* the fake takes a value in at 160 KiB/s (4 KiB every 25 ms) */

static bool read_request(int fd, char name[16], bool *lease_key, bool stop_at_set)
{
    char line[64], scratch[4096];
    *lease_key = false;
    if (!read_line(fd, line, sizeof line) || line[0] != '*')
        return false;
    long words = atol(line + 1);
    for (long i = 0; i < words; i++) {
        if (!read_line(fd, line, sizeof line) || line[0] != '$')
            return false;
        size_t left = (size_t)atoll(line + 1) + 2;
        if (i <= 1) {
            char word[16];
            size_t n = left - 2 < 15 ? left - 2 : 15;
            if (!read_exact(fd, word, n))
                return false;
            word[n] = '\0';
            left -= n;
            if (i == 0)
                memcpy(name, word, n + 1);
            else
                *lease_key = strncmp(word, "jb:lease:", 9) == 0;
            if (i == 1 && stop_at_set && strcmp(name, "SET") == 0 && !*lease_key)
                return false;
        }
        while (left > 0) {
            size_t n = left < sizeof scratch ? left : sizeof scratch;
            if (!read_exact(fd, scratch, n))
                return false;
            left -= n;
            if (slow_taker)
                sleep_ms(25);
        }
    }
    return true;
}

/* Answers each connection by `mode`: "dribble-read" (an entry, one byte every 250 ms),
 * "huge" (an entry of 256 MiB, sent whole), "wrong-type" (an integer for GETRANGE), "array",
 * "malformed" (a length that is no number), "error-escape" (an error reply with terminal
 * control bytes); every mode grants a fleet lease (SET NX, the release's EVAL) and answers
 * EXISTS with nothing there, so that what is tested is the value's read or store; the others answer GETRANGE with a miss and SET by
 * "dribble-store" (a status, one byte every 250 ms), "store-ok" (+OK, an honest store),
 * "store-wrong" (a nil), "store-queued" (a
 * status other than OK, as in a transaction), "close-mid-store"
 * (closing the connection after the SET's key, while the value is being sent),
 * "slow-reader" (reading the value at 640 KiB/s: the client's socket becomes writable again
 * well within each wait, yet a 4 MiB value takes 6 s), "slow-taker" (an honest store that
 * takes a value in at 160 KiB/s, then answers +OK at once), "late-dribble" (an entry's first
 * byte after 100 ms, then one every 100 ms). */
static void serve_fake(const char *mode, int listener)
{
    signal(SIGPIPE, SIG_IGN);
    slow_taker = strcmp(mode, "slow-taker") == 0;
    static char chunk[1 << 20];
    memset(chunk, 'x', sizeof chunk);
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        char name[16];
        bool stop_at_set = strcmp(mode, "close-mid-store") == 0 || strcmp(mode, "slow-reader") == 0;
        bool lease_key = false;
        while (fd >= 0 && read_request(fd, name, &lease_key, stop_at_set)) {
            bool range = strcmp(name, "GETRANGE") == 0, set = strcmp(name, "SET") == 0;
            bool going = true;
            if (lease_key && set)
                going = send_slowly(fd, "+OK\r\n", 0);
            else if (strcmp(name, "EXISTS") == 0)
                going = send_slowly(fd, ":0\r\n", 0);
            else if (strcmp(name, "EVAL") == 0)
                going = send_slowly(fd, ":1\r\n", 0);
            else if (range && strcmp(mode, "dribble-read") == 0)
                going = send_slowly(fd, "$20\r\nxxxxxxxxxxxxxxxxxxxx\r\n", 250);
            else if (range && strcmp(mode, "late-dribble") == 0) {
                sleep_ms(100);
                going = send_slowly(fd, "$20\r\nxxxxxxxxxxxxxxxxxxxx\r\n", 100);
            } else if (range && strcmp(mode, "huge") == 0) {
                going = send_slowly(fd, "$268435456\r\n", 0);
                for (int i = 0; going && i < 256; i++)
                    going = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL) == (ssize_t)sizeof chunk;
                going = going && send_slowly(fd, "\r\n", 0);
            } else if (range && strcmp(mode, "wrong-type") == 0)
                going = send_slowly(fd, ":42\r\n", 0);
            else if (range && strcmp(mode, "array") == 0)
                going = send_slowly(fd, "*1\r\n$1\r\nx\r\n", 0);
            else if (range && strcmp(mode, "error-escape") == 0)
                going = send_slowly(fd, "-ERR \x1b[2Jcleared\x07\r\n", 0);
            else if (range && strcmp(mode, "malformed") == 0)
                going = send_slowly(fd, "$4x\r\nabcd\r\n", 0);
            else if (range)
                going = send_slowly(fd, "$0\r\n\r\n", 0);
            else if (set && strcmp(mode, "dribble-store") == 0)
                going = send_slowly(fd, "+OKAYOKAYOKAYOK\r\n", 250);
            else if (set && strcmp(mode, "store-wrong") == 0)
                going = send_slowly(fd, "$-1\r\n", 0);
            else if (set && (strcmp(mode, "store-ok") == 0 || slow_taker))
                going = send_slowly(fd, "+OK\r\n", 0);
            else if (set && strcmp(mode, "store-queued") == 0)
                going = send_slowly(fd, "+QUEUED\r\n", 0);
            else
                going = send_slowly(fd, "-ERR not here\r\n", 0);
            if (!going)
                break;
        }
        if (fd >= 0 && strcmp(mode, "slow-reader") == 0) { /* 64 KiB every 100 ms: 640 KiB/s */
            static char scratch[64 << 10];
            while (read_exact(fd, scratch, sizeof scratch))
                sleep_ms(100);
        }
        if (fd >= 0)
            close(fd);
    }
}

/* Starts the store of `mode` on fake_path, or with `tcp_port` on 127.0.0.1 at a free port
 * written there: whether it listens. */
static bool start_fake_on(const char *mode, int *tcp_port)
{
    stop_fake();
    unlink(fake_path);
    struct sockaddr_un unix_addr = {.sun_family = AF_UNIX};
    memcpy(unix_addr.sun_path, fake_path, strlen(fake_path) + 1);
    struct sockaddr_in tcp_addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t tcp_len = sizeof tcp_addr;
    int listener = socket(tcp_port ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small_window = 4096; /* a slow link: what the fake has not read is not acknowledged */
    if (listener >= 0 && strcmp(mode, "slow-taker") == 0)
        setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small_window, sizeof small_window);
    if (listener < 0 ||
        (tcp_port ? bind(listener, (struct sockaddr *)&tcp_addr, sizeof tcp_addr)
                  : bind(listener, (struct sockaddr *)&unix_addr, sizeof unix_addr)) != 0 ||
        listen(listener, 8) != 0 ||
        (tcp_port && getsockname(listener, (struct sockaddr *)&tcp_addr, &tcp_len) != 0)) {
        if (listener >= 0)
            close(listener);
        return false;
    }
    if (tcp_port)
        *tcp_port = ntohs(tcp_addr.sin_port);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        serve_fake(mode, listener);
        _exit(0);
    }
    close(listener);
    fake_pid = pid;
    return pid > 0;
}

static bool start_fake(const char *mode)
{
    return start_fake_on(mode, NULL);
}

/* ---- a fork while another thread's command waits ---- */

typedef struct waiting_command {
    jb_redis *redis;
    atomic_bool sent; /* about to be: the command's thread is inside jb__redis_command */
} waiting_command;

static void *command_thread(void *arg)
{
    waiting_command *w = arg;
    const char *argv[] = {"GETRANGE", "jb:slow", "0", "10"};
    size_t lens[] = {8, 7, 1, 2};
    jb_redis_reply reply;
    char why[256];
    atomic_store(&w->sent, true);
    jb__redis_command(w->redis, 4, argv, lens, &reply, why, sizeof why);
    jb__redis_reply_free(&reply);
    return NULL;
}

/* The sockets this process has open (/proc/self/fd). */
static int sockets_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[300], target[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        n += len > 0 && strncmp(target, "socket:", 7) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

/* ---- a stream of signals while a command waits ---- */

static void ignore_signal(int sig)
{
    (void)sig;
}

typedef struct signaller {
    pthread_t target;
    atomic_bool stop;
} signaller;

/* Interrupts `target` every 2 ms (a sampling profiler's timer signal) until stopped. */
static void *signal_often(void *arg)
{
    signaller *s = arg;
    while (!atomic_load(&s->stop)) {
        pthread_kill(s->target, SIGUSR1);
        sleep_ms(2);
    }
    return NULL;
}

/* ---- the parent ---- */

typedef struct outcome {
    bool exited; /* normally, status 0 */
    int signal;  /* what killed it, or 0 */
    unsigned long long builds, disk_hits, remote_hits, remote_misses, remote_rejected,
        remote_stores, trips;
    int ev_hit, ev_rejected, ev_store, warnings, exact;
    char key[80];
    long long fork_connections;
    long max_rss_kb;
    long long clients_before, clients_after;
    long long elapsed_ms; /* the child's whole run */
    char text[4096];
} outcome;

/* Runs this program in child mode with cache folder `cache`, the variables as given (NULL:
 * unset), launching `salts`; `value_max` and `resolve_delay` (NULL: none) set those hooks. */
static outcome run_child_hooked(const char *cache, const char *url, const char *key_file,
                                const char *salts, const char *action, const char *timing,
                                const char *value_max, const char *resolve_delay)
{
    outcome o = {0};
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0)
        return o;
    char pid_text[32];
    snprintf(pid_text, sizeof pid_text, "%d", (int)server_pid);
    uint64_t start = jb__now_ns();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipe_fds[1], 1);
        close(pipe_fds[0]);
        host_environment(cache, url, key_file);
        if (timing)
            setenv("JB_TEST_REMOTE_TIMING", timing, 1);
        setenv("JB_TEST_REDIS_PID", pid_text, 1);
        setenv("JB_TEST_REDIS_SOCKET", socket_path, 1);
        if (value_max)
            setenv("JB_TEST_VALUE_MAX", value_max, 1);
        if (resolve_delay)
            setenv("JB_TEST_RESOLVE_DELAY_MS", resolve_delay, 1);
        execl(self, self, "child", salts, action ? action : "-", (char *)NULL);
        _exit(127);
    }
    close(pipe_fds[1]);
    read_host_output(pipe_fds[0], o.text, sizeof o.text);
    int status = 0;
    waitpid(pid, &status, 0);
    o.elapsed_ms = (long long)((jb__now_ns() - start) / 1000000);
    o.exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    sscanf(o.text,
           "builds=%llu disk_hits=%llu remote_hits=%llu remote_misses=%llu remote_rejected=%llu "
           "remote_stores=%llu trips=%llu ev_hit=%d ev_rejected=%d ev_store=%d warnings=%d "
           "exact=%d key=%79s fork_connections=%lld max_rss_kb=%ld clients=%lld,%lld",
           &o.builds, &o.disk_hits, &o.remote_hits, &o.remote_misses, &o.remote_rejected,
           &o.remote_stores, &o.trips, &o.ev_hit, &o.ev_rejected, &o.ev_store, &o.warnings,
           &o.exact, o.key, &o.fork_connections, &o.max_rss_kb, &o.clients_before,
           &o.clients_after);
    return o;
}

static outcome run_child(const char *cache, const char *url, const char *key_file,
                         const char *salts, const char *action, const char *timing)
{
    return run_child_hooked(cache, url, key_file, salts, action, timing, NULL, NULL);
}

/* A new, empty cache folder under the test's folder. */
static const char *new_cache(char *path, size_t len)
{
    static int count;
    snprintf(path, len, "%s/cache%d", folder, ++count);
    return path;
}

static int entries_in(const char *cache)
{
    DIR *d = opendir(cache);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".jbc") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* A key file, written as the tests write every file (helpers.h). */
static bool write_key(const char *path, const char *text, mode_t mode)
{
    return write_text_file(path, text, mode);
}

static void api_refusals(const char *key1, const char *group_key, const char *short_key)
{
    const char *bad_urls[] = {
        "http://localhost:6379",       "redis://localhost",          "redis://localhost:0",
        "redis://localhost:65536",     "redis://localhost:6379/x",   "redis://:pw@localhost:6379",
        "redis://localhost:6379?mode=rw", "unix://relative/socket", "redis://[::1:6379",
        "redis://localhost:6379/1?mode=read-only&x=1", "",
    };
    for (size_t i = 0; i + 1 < sizeof bad_urls / sizeof *bad_urls; i++) {
        jb_status s = jb_remote_cache_set(bad_urls[i], key1);
        CHECK(s == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "jb_remote_cache_set"),
              "the URL '%s' was not refused: %s %s", bad_urls[i], jb_status_name(s),
              jb_last_error_message());
    }
    /* A password never reaches a message: the URL is shown masked. */
    const char *with_secrets[] = {
        "redis://alice:s3cret-pw@localhost:6379", "redis://:s3cret-pw@localhost:6379",
        "redis://s3cret-pw@localhost:6379",       "redis://localhost:6379?password=s3cret-pw",
        "redis://alice:s3cret-pw@[::1:6379",
    };
    for (size_t i = 0; i < sizeof with_secrets / sizeof *with_secrets; i++) {
        jb_status s = jb_remote_cache_set(with_secrets[i], key1);
        CHECK(s == JB_ERR_INVALID_ARGUMENT && !strstr(jb_last_error_message(), "s3cret") &&
                  strstr(jb_last_error_message(), "***"),
              "the URL '%s': %s, a message that shows its secret: %s", with_secrets[i],
              jb_status_name(s), jb_last_error_message());
    }
    char url[PATH_MAX + 16];
    snprintf(url, sizeof url, "unix://%s", socket_path);
    jb_status s = jb_remote_cache_set(url, group_key);
    CHECK(s == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "group or others"),
          "a group-readable key file: %s %s", jb_status_name(s), jb_last_error_message());
    s = jb_remote_cache_set(url, short_key);
    CHECK(s == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "fewer than 32"),
          "a 16-byte key file: %s %s", jb_status_name(s), jb_last_error_message());
    s = jb_remote_cache_set(url, NULL);
    CHECK(s == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "key file"),
          "no key file: %s %s", jb_status_name(s), jb_last_error_message());
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/no-such-key", folder);
    s = jb_remote_cache_set(url, missing);
    CHECK(s == JB_ERR_SYSTEM, "a missing key file: %s %s", jb_status_name(s),
          jb_last_error_message());
    CHECK_OK(jb_remote_cache_set(url, key1));
    snprintf(url, sizeof url, "redis://127.0.0.1:6379/3?mode=read-only");
    CHECK_OK(jb_remote_cache_set(url, key1));
    CHECK_OK(jb_remote_cache_set(NULL, NULL));
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "child") == 0) {
        child_socket = getenv("JB_TEST_REDIS_SOCKET");
        return child_main(argv);
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!redis_server_found()) {
        fprintf(stderr, "test_remote: redis-server is not installed (apt-get install "
                        "redis-server): the remote tier cannot be tested\n");
        printf("test_remote: 0 passed, 1 failed\n");
        return 1;
    }
    if (!realpath("/proc/self/exe", self))
        return 1;
    const char *tmp = getenv("TMPDIR");
    tmp = tmp && *tmp && strlen(tmp) < 60 ? tmp : "/tmp"; /* the socket's path fits sun_path */
    snprintf(folder, sizeof folder, "%s/jb-remote-XXXXXX", tmp);
    if (!mkdtemp(folder))
        return 1;
    atexit(clean_up);
    snprintf(socket_path, sizeof socket_path, "%s/redis.sock", folder);
    if (!start_server()) {
        fprintf(stderr, "test_remote: redis-server did not start (see %s/redis.log)\n", folder);
        printf("test_remote: 0 passed, 1 failed\n");
        return 1;
    }
    char key1[PATH_MAX], key2[PATH_MAX], group_key[PATH_MAX], short_key[PATH_MAX];
    snprintf(key1, sizeof key1, "%s/fleet.key", folder);
    snprintf(key2, sizeof key2, "%s/other-fleet.key", folder);
    snprintf(group_key, sizeof group_key, "%s/group.key", folder);
    snprintf(short_key, sizeof short_key, "%s/short.key", folder);
    CHECK(write_key(key1, "the fleet's key: 0123456789abcdef0123456789abcdef", 0600) &&
              write_key(key2, "another fleet's: 0123456789abcdef0123456789abcdef", 0600) &&
              write_key(group_key, "a group-readable key 0123456789abcdef0123456789", 0640) &&
              write_key(short_key, "sixteen bytes...", 0600),
          "writing the key files: %s", strerror(errno));
    char url[PATH_MAX + 32], read_only[PATH_MAX + 32], cache[PATH_MAX];
    snprintf(url, sizeof url, "unix://%s", socket_path);
    snprintf(read_only, sizeof read_only, "unix://%s?mode=read-only", socket_path);

    /* A compile stores to the remote. */
    outcome o = run_child(new_cache(cache, sizeof cache), url, key1, "1", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_misses == 1 && o.remote_stores == 1 &&
              o.ev_store == 1,
          "the first compile did not store to the remote:\n%s", o.text);
    char key_one[80];
    snprintf(key_one, sizeof key_one, "%s", o.key);
    size_t good_len = 0;
    char *good = get_value(key_one, &good_len);
    CHECK(good && good_len > 100, "no value under jitbridge:v1:%s", key_one);
    if (!good)
        return check_summary("test_remote");

    /* A new process on an empty folder loads it with no compile, and then has it on disk. */
    new_cache(cache, sizeof cache);
    o = run_child(cache, url, key1, "1", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 0 && o.remote_hits == 1 && o.ev_hit == 1 &&
              o.remote_stores == 0,
          "a new host did not load the remote entry:\n%s", o.text);
    CHECK(entries_in(cache) == 1, "the remote hit left %d entries in the cache folder",
          entries_in(cache));
    o = run_child(cache, url, key1, "1", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 0 && o.disk_hits == 1 && o.remote_hits == 0,
          "the next process on that host did not read the disk:\n%s", o.text);

    /* The store obeys the read's limit: with values capped at 4096 bytes a larger one is not
     * stored (it could never be read back whole), and one already there is refused unread. */
    o = run_child_hooked(new_cache(cache, sizeof cache), url, key1, "23", NULL, NULL, "4096",
                         NULL);
    size_t capped_len = 0;
    char *capped = o.key[0] && o.key[0] != '-' ? get_value(o.key, &capped_len) : NULL;
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_stores == 0 && o.ev_store == 0 &&
              !capped && good_len > 4096,
          "a value over the cap was stored (%zu bytes):\n%s", capped_len, o.text);
    free(capped);
    o = run_child_hooked(new_cache(cache, sizeof cache), url, key1, "1", NULL, NULL, "4096",
                         NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_hits == 0 && o.remote_rejected == 1 &&
              strstr(o.text, "larger than the entry cap"),
          "a value over the cap was not refused:\n%s", o.text);

    /* The cap's one boundary, the same for the store and the read: with values capped at one
     * byte more than the value it is stored and loads; capped at its very length it is neither
     * stored nor loaded. */
    char cap_at[24], cap_above[24], one_name[128];
    snprintf(cap_at, sizeof cap_at, "%zu", good_len);
    snprintf(cap_above, sizeof cap_above, "%zu", good_len + 1);
    snprintf(one_name, sizeof one_name, "jitbridge:v1:%s", key_one);
    o = run_child_hooked(new_cache(cache, sizeof cache), url, key1, "1", NULL, NULL, cap_above,
                         NULL);
    CHECK(o.exited && o.exact && o.builds == 0 && o.remote_hits == 1 && o.remote_rejected == 0,
          "a value one byte under the cap did not load:\n%s", o.text);
    o = run_child_hooked(new_cache(cache, sizeof cache), url, key1, "1", NULL, NULL, cap_at,
                         NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_hits == 0 && o.remote_rejected == 1 &&
              strstr(o.text, "larger than the entry cap"),
          "a value at the cap was not refused:\n%s", o.text);
    resp dropped = command2("DEL", one_name);
    free(dropped.data);
    o = run_child_hooked(new_cache(cache, sizeof cache), url, key1, "1", NULL, NULL, cap_at,
                         NULL);
    size_t at_cap_len = 0;
    char *at_cap = get_value(key_one, &at_cap_len);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_stores == 0 && !at_cap,
          "a value at the cap was stored (%zu bytes):\n%s", at_cap_len, o.text);
    free(at_cap);
    o = run_child_hooked(new_cache(cache, sizeof cache), url, key1, "1", NULL, NULL, cap_above,
                         NULL);
    size_t under_cap_len = 0;
    char *under_cap = get_value(key_one, &under_cap_len);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_stores == 1 && under_cap &&
              under_cap_len == good_len,
          "a value one byte under the cap was not stored (%zu bytes):\n%s", under_cap_len,
          o.text);
    free(under_cap);
    CHECK(set_value(one_name, good, good_len), "the first value could not be put back");

    /* Values that must never load: each is rejected (counter, event) and the launch compiles. */
    char *bad = malloc(good_len);
    struct {
        const char *what;
        size_t len;
        size_t flip; /* a byte flipped, or SIZE_MAX */
        const char *key_file;
        const char *why; /* in the event's message */
    } forged[] = {
        {"a forged MAC", good_len, 0 /* set below */, key1, "signed"},
        {"a cut value", good_len - 100, SIZE_MAX, key1, "cut short"},
        {"a changed payload", good_len, good_len - 1, key1, "checksum"},
        {"a value signed by another fleet's key", good_len, SIZE_MAX, key2, "signed"},
        {"a value whose payload length says 1 TiB", good_len, 21, key1, "larger than"},
    };
    /* The MAC sits 32 bytes before the payload, which ends the value; the payload's length is
     * at bytes 16-23 (little-endian). */
    uint64_t payload_len = 0;
    for (int i = 7; i >= 0; i--)
        payload_len = payload_len << 8 | (unsigned char)good[16 + i];
    forged[0].flip = good_len - payload_len - 1;
    char name_one[128];
    snprintf(name_one, sizeof name_one, "jitbridge:v1:%s", key_one);
    for (size_t i = 0; i < sizeof forged / sizeof *forged; i++) {
        memcpy(bad, good, good_len);
        if (forged[i].flip != SIZE_MAX)
            bad[forged[i].flip] ^= 0x01; /* byte 21: bit 40 of the payload's length */
        CHECK(set_value(name_one, bad, forged[i].len), "%s: SET failed", forged[i].what);
        new_cache(cache, sizeof cache);
        o = run_child(cache, url, forged[i].key_file, "1", NULL, NULL);
        CHECK(o.exited && o.exact && o.builds == 1 && o.remote_hits == 0 &&
                  o.remote_rejected == 1 && o.ev_rejected == 1 &&
                  strstr(o.text, forged[i].why) != NULL,
              "%s was not rejected:\n%s", forged[i].what, o.text);
    }
    /* Another kernel's value filed under this kernel's name. */
    o = run_child(new_cache(cache, sizeof cache), url, key1, "2", NULL, NULL);
    CHECK(o.exited && o.exact && o.remote_stores == 1, "storing kernel 2:\n%s", o.text);
    char name_two[128];
    snprintf(name_two, sizeof name_two, "jitbridge:v1:%s", o.key);
    CHECK(set_value(name_two, good, good_len), "SET of kernel 1's value as kernel 2's failed");
    o = run_child(new_cache(cache, sizeof cache), url, key1, "2", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_hits == 0 && o.remote_rejected == 1 &&
              o.ev_rejected == 1 && strstr(o.text, "another key"),
          "another kernel's value under this one's name was not rejected:\n%s", o.text);
    free(bad);
    free(good);

    /* Another tenant made a kernel's name a list: that entry is a rejection, not a reason to
     * skip the whole tier (no trip), and the compile's store replaces it. */
    resp deleted = command2("DEL", name_two);
    free(deleted.data);
    const char *lpush[] = {"LPUSH", name_two, "x"};
    size_t lpush_lens[] = {5, strlen(name_two), 1};
    resp pushed = command(3, lpush, lpush_lens);
    free(pushed.data);
    o = run_child(new_cache(cache, sizeof cache), url, key1, "2", NULL, NULL);
    CHECK(pushed.type == ':' && o.exited && o.exact && o.builds == 1 && o.trips == 0 &&
              o.remote_rejected == 1 && o.ev_rejected == 1 && o.remote_stores == 1 &&
              strstr(o.text, "not a string"),
          "a kernel's name made a list by another tenant (LPUSH: %c):\n%s",
          pushed.type ? pushed.type : '0', o.text);

    /* A read-only tier stores nothing. */
    long long before = db_size();
    o = run_child(new_cache(cache, sizeof cache), read_only, key1, "3", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_stores == 0 && o.ev_store == 0 &&
              db_size() == before && before >= 0,
          "a read-only tier stored (keys %lld, then %lld):\n%s", before, db_size(), o.text);

    /* A bad URL or a refused key file in the variables: one warning, no tier, a compile. */
    o = run_child(new_cache(cache, sizeof cache), "redis://nowhere", key1, "4", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.warnings == 1 && o.remote_misses == 0 &&
              strstr(o.text, "JITBRIDGE_REMOTE_CACHE"),
          "a bad URL in the variable:\n%s", o.text);
    o = run_child(new_cache(cache, sizeof cache), url, group_key, "4", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.warnings == 1 && o.remote_misses == 0 &&
              strstr(o.text, "group or others"),
          "a group-readable key file in the variable:\n%s", o.text);
    o = run_child(new_cache(cache, sizeof cache), url, NULL, "4", NULL, NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.warnings == 1 && o.remote_misses == 0 &&
              strstr(o.text, "key file"),
          "no key file:\n%s", o.text);
    api_refusals(key1, group_key, short_key);

    /* A password in the variable is not in its warning either. */
    o = run_child(new_cache(cache, sizeof cache), "redis://alice:s3cret-pw@localhost:6379", key1,
                  "4", NULL, NULL);
    CHECK(o.exited && o.exact && o.warnings == 1 && !strstr(o.text, "s3cret") &&
              strstr(o.text, "alice:***@localhost"),
          "a password in the variable's URL reached its warning:\n%s", o.text);

    /* A fork child never sends on a connection its parent made: the command is refused there,
     * the server never sees it, and the parent's connection goes on. */
    jb_redis *redis = NULL;
    char why[256] = "";
    CHECK_OK(jb__redis_connect(NULL, 0, socket_path, 100, 2000, 0, &redis, why, sizeof why));
    int verdict[2];
    if (redis && pipe(verdict) == 0) {
        /* The child's verdict comes through a pipe: under valgrind its exit status is
         * valgrind's (the parent's heap, copied, shows as leaked there). */
        pid_t pid = fork();
        if (pid == 0) {
            const char *incr[] = {"INCR", "jb:fork-probe"};
            size_t incr_lens[] = {4, 13};
            jb_redis_reply reply;
            int status = jb__redis_command(redis, 2, incr, incr_lens, &reply, why, sizeof why);
            jb__redis_reply_free(&reply);
            char said = status == JB_OK ? 'u' : strstr(why, "forked") ? 'r' : '?';
            _exit(write(verdict[1], &said, 1) == 1 ? 0 : 1);
        }
        close(verdict[1]);
        char said = 0;
        if (read(verdict[0], &said, 1) != 1)
            said = 0;
        close(verdict[0]);
        waitpid(pid, NULL, 0);
        resp probe = command2("GET", "jb:fork-probe");
        CHECK(said == 'r' && probe.type == '$' && probe.number == -1,
              "a fork child used its parent's connection (its verdict '%c': u, used; r, "
              "refused; the probe's reply %c%lld)",
              said ? said : '0', probe.type ? probe.type : '0', probe.number);
        free(probe.data);
        const char *ping[] = {"PING"};
        size_t ping_lens[] = {4};
        jb_redis_reply reply;
        CHECK(jb__redis_command(redis, 1, ping, ping_lens, &reply, why, sizeof why) == JB_OK &&
                  reply.type == JB_REDIS_STATUS && strcmp(reply.str, "PONG") == 0,
              "the parent's connection after the fork: %s", why);
        jb__redis_reply_free(&reply);
        jb__redis_free(redis);
    }

    /* A fork while another thread's command waits on a slow store: the child closes its copy
     * of that connection (the thread that would free it does not exist there). */
    snprintf(fake_path, sizeof fake_path, "%s/fake.sock", folder);
    CHECK(start_fake("dribble-read"), "the fake store (dribble-read) did not start");
    waiting_command waiting = {0};
    CHECK_OK(
        jb__redis_connect(NULL, 0, fake_path, 100, 3000, 0, &waiting.redis, why, sizeof why));
    pthread_t waiter;
    int child_sockets = -1;
    if (waiting.redis && pthread_create(&waiter, NULL, command_thread, &waiting) == 0) {
        while (!atomic_load(&waiting.sent))
            sleep_ms(1);
        sleep_ms(100); /* well inside the read of its reply, which dribbles for 6 s */
        int count[2];
        if (pipe(count) == 0) {
            pid_t pid = fork();
            if (pid == 0) {
                int n = sockets_open();
                _exit(write(count[1], &n, sizeof n) == sizeof n ? 0 : 1);
            }
            close(count[1]);
            if (read(count[0], &child_sockets, sizeof child_sockets) != sizeof child_sockets)
                child_sockets = -1;
            close(count[0]);
            waitpid(pid, NULL, 0);
        }
        pthread_join(waiter, NULL);
    }
    jb__redis_free(waiting.redis);
    stop_fake();
    CHECK(child_sockets == 0,
          "a child forked during another thread's command has %d sockets open (its parent's "
          "connection)",
          child_sockets);

    /* A store still taking in a value when the send ends (a slow link: the socket's buffer
     * holds the value's tail, unacknowledged) is not given up on at the first-byte bound: it is reading, so it is no stopped store, and
     * a value of 128 KiB at 160 KiB/s answers well within the command's deadline. */
    int taker_port = 0;
    CHECK(start_fake_on("slow-taker", &taker_port), "the fake store (slow-taker) did not start");
    jb_redis *taker = NULL;
    CHECK_OK(jb__redis_connect("127.0.0.1", taker_port, NULL, 100, 5000, 250, &taker, why,
                               sizeof why));
    if (taker) {
        static char big[128 << 10];
        memset(big, 'v', sizeof big);
        const char *set[] = {"SET", "jb:slow-taken", big};
        size_t set_lens[] = {3, 13, sizeof big};
        jb_redis_reply reply;
        uint64_t began = jb__now_ns();
        int status = jb__redis_command(taker, 3, set, set_lens, &reply, why, sizeof why);
        CHECK(status == JB_OK && reply.type == JB_REDIS_STATUS && strcmp(reply.str, "OK") == 0,
              "a store taking in a value at 160 KiB/s was given up on after %llu ms: %s",
              (unsigned long long)((jb__now_ns() - began) / 1000000), status ? why : "");
        jb__redis_reply_free(&reply);
        jb__redis_free(taker);
    }
    stop_fake();

    /* A reply begun within the first-byte bound (at 100 ms) that then dribbles (a byte every
     * 100 ms) ends at the command's deadline (1 s here), neither at the first-byte bound nor
     * later. */
    CHECK(start_fake("late-dribble"), "the fake store (late-dribble) did not start");
    jb_redis *late = NULL;
    CHECK_OK(jb__redis_connect(NULL, 0, fake_path, 100, 1000, 250, &late, why, sizeof why));
    if (late) {
        const char *range[] = {"GETRANGE", "jb:late", "0", "10"};
        size_t range_lens[] = {8, 7, 1, 2};
        jb_redis_reply reply;
        uint64_t began = jb__now_ns();
        int status = jb__redis_command(late, 4, range, range_lens, &reply, why, sizeof why);
        long long took_ms = (long long)((jb__now_ns() - began) / 1000000);
        jb__redis_reply_free(&reply);
        CHECK(status != JB_OK && took_ms >= 900 && took_ms < 1500 &&
                  strstr(why, "no answer within 1000 ms"),
              "a reply begun in time that dribbles ended after %lld ms: %s", took_ms,
              status == JB_OK ? "answered" : why);
        jb__redis_free(late);
    }
    stop_fake();

    /* Setting the tier anew closes its idle connection (none is left open, and the next build
     * connects again). */
    o = run_child(new_cache(cache, sizeof cache), url, key1, "20,21", "reconfigure-after-first",
                  NULL);
    CHECK(o.exited && o.exact && o.builds == 2 && o.remote_stores == 2 && o.trips == 0 &&
              o.clients_before >= 2 && o.clients_after == o.clients_before - 1,
          "turning the tier off left its connection open (clients %lld, then %lld):\n%s",
          o.clients_before, o.clients_after, o.text);
    /* Turned off while its connection is in use: that connection is closed when the command
     * ends, not kept idle (the query's own is then the only client). */
    o = run_child(new_cache(cache, sizeof cache), url, key1, "24", "reconfigure-during-store",
                  NULL);
    CHECK(o.exited && o.exact && o.builds == 1 && o.remote_stores == 1 && o.clients_after == 1,
          "a connection in use when the tier was turned off was kept (clients %lld):\n%s",
          o.clients_after, o.text);

    /* A dead resolver: the lookup is given up after the deadline (300 ms here, the resolver
     * hangs 5 s), the breaker trips and the launch compiles. */
    o = run_child_hooked(new_cache(cache, sizeof cache), "redis://localhost:6379", key1, "22",
                         NULL, "100,300,60000", NULL, "5000");
    CHECK(o.exited && o.exact && o.builds == 1 && o.trips == 1 && o.elapsed_ms < 3000 &&
              strstr(o.text, "not resolved within 300 ms"),
          "a hanging host name lookup held the launch %lld ms:\n%s", o.elapsed_ms, o.text);

    /* A host name whose first address refuses: the next is tried, within the deadline, and
     * the tier works (a store on TCP, 127.0.0.2 refusing, 127.0.0.1 answering). */
    snprintf(fake_path, sizeof fake_path, "%s/fake.sock", folder);
    int tcp_port = 0;
    CHECK(start_fake_on("store-ok", &tcp_port), "the fake TCP store did not start");
    char tcp_url[64];
    snprintf(tcp_url, sizeof tcp_url, "redis://store.test:%d", tcp_port);
    setenv("JB_TEST_RESOLVE_ANSWER", "127.0.0.2,127.0.0.1", 1);
    o = run_child(new_cache(cache, sizeof cache), tcp_url, key1, "25", NULL, NULL);
    unsetenv("JB_TEST_RESOLVE_ANSWER");
    stop_fake();
    CHECK(o.exited && o.exact && o.builds == 1 && o.trips == 0 && o.remote_misses == 1 &&
              o.remote_stores == 1,
          "a store behind the second of two addresses was not reached:\n%s", o.text);

    /* Hostile stores. Each: the launch compiles, nothing is used, the breaker trips once, and
     * the launch takes far less than the store would hold it (3 s, compile included, against 4 s
 * and more; a 4 MiB kernel's, 4.5 s against 6.5 s and more). */
    snprintf(fake_path, sizeof fake_path, "%s/fake.sock", folder);
    char fake_url[PATH_MAX + 16];
    snprintf(fake_url, sizeof fake_url, "unix://%s", fake_path);
    struct {
        const char *mode, *salts, *why;
        unsigned long long misses; /* the stores that fail on SET answer GETRANGE with a miss */
        const char *timing; /* NULL: a connect 100 ms, a command 300 ms */
        long long max_ms;   /* the child's whole run, compile included: 0, 3 s */
    } hostile[] = {
        {"dribble-read", "30", "no answer within 300 ms", 0, NULL, 0},
        {"dribble-store", "31", "no answer within 300 ms", 1, NULL, 0},
        {"huge", "32", "refused unread", 0, NULL, 0},
        {"wrong-type", "33", "type 3", 0, NULL, 0},
        {"array", "34", "array", 0, NULL, 0},
        {"malformed", "35", "not RESP", 0, NULL, 0},
        {"store-wrong", "36", "type 4", 1, NULL, 0},
        {"store-queued", "40", "not 5 +OK", 1, NULL, 0},
        {"close-mid-store", "1037", "store an entry", 1, NULL, 0},
        {"slow-reader", "2039", "no answer within 1000 ms", 1, "100,1000,60000", 4500},
        {"error-escape", "38", "(ERR ?[2Jcleared?)", 0, NULL, 0},
    };
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        CHECK(start_fake(hostile[i].mode), "the fake store (%s) did not start", hostile[i].mode);
        o = run_child(new_cache(cache, sizeof cache), fake_url, key1, hostile[i].salts, NULL,
                      hostile[i].timing ? hostile[i].timing : "100,300,60000");
        CHECK(o.exited && o.signal == 0 && o.exact && o.builds == 1 && o.trips == 1 &&
                  o.remote_hits == 0 && o.remote_misses == hostile[i].misses &&
                  o.remote_rejected == 0 &&
                  o.remote_stores == 0 && o.ev_store == 0 &&
                  o.elapsed_ms < (hostile[i].max_ms ? hostile[i].max_ms : 3000) &&
                  o.max_rss_kb < 128 * 1024 && strstr(o.text, hostile[i].why),
              "a hostile store (%s): signal %d, %lld ms, %ld KiB at most:\n%s", hostile[i].mode,
              o.signal, o.elapsed_ms, o.max_rss_kb, o.text);
    }
    stop_fake();

    /* A fork child never uses its parent's connection: it connects anew (one connection more
     * while it ran), and the parent's stays usable. */
    o = run_child(new_cache(cache, sizeof cache), url, key1, "10,11", "fork-after-first", NULL);
    CHECK(o.exited && o.exact && o.builds == 2 && o.remote_stores == 2 && o.trips == 0 &&
              o.fork_connections == 1,
          "a fork child and its parent's connection (%lld new connections):\n%s",
          o.fork_connections, o.text);

    /* A stopped server with a breaker pause of 1 ms, which has passed when the second build
     * starts: the tier is tried again (never off for good), and its read trips it again. */
    kill(server_pid, SIGSTOP);
    o = run_child(new_cache(cache, sizeof cache), url, key1, "12,13", "pause-after-each",
                  "100,300,1");
    kill(server_pid, SIGCONT);
    CHECK(o.exited && o.exact && o.builds == 2 && o.trips >= 2,
          "the breaker did not close again after its pause:\n%s", o.text);

    /* A stopped server: the read times out (300 ms here), the breaker trips once, both
     * launches compile. */
    kill(server_pid, SIGSTOP);
    o = run_child(new_cache(cache, sizeof cache), url, key1, "5,6", NULL, "100,300,60000");
    kill(server_pid, SIGCONT);
    CHECK(o.exited && o.exact && o.builds == 2 && o.trips == 1 && o.remote_hits == 0 &&
              entries_in(cache) == 2,
          "with the server stopped:\n%s", o.text);

    /* The server killed between two builds: no SIGPIPE reaches the process, the breaker trips
     * once, every launch compiles, and every entry is in the cache folder. */
    o = run_child(new_cache(cache, sizeof cache), url, key1, "7,8,9", "kill-after-first", NULL);
    CHECK(o.exited && o.signal == 0 && o.exact && o.builds == 3 && o.trips == 1 &&
              o.remote_stores == 1 && entries_in(cache) == 3,
          "with the server killed (signal %d, %d entries):\n%s", o.signal, entries_in(cache),
          o.text);

    /* A stopped server under the real deadlines (2 s a command): the first read gives up when
     * no reply has begun within 250 ms, so the breaker trips and the launch compiles in far
     * less than the command's 2 s (the whole child, compile included: 1 s, 5 s under
     * valgrind). */
    long long stopped_bound_ms = getenv("JB_TEST_UNDER_VALGRIND") ? 5000 : 1000;
    stop_server(); /* the one killed above, reaped */
    CHECK(start_server(), "redis-server did not start again (see %s/redis.log)", folder);
    kill(server_pid, SIGSTOP);
    o = run_child(new_cache(cache, sizeof cache), url, key1, "42", NULL, "100,0,60000");
    kill(server_pid, SIGCONT);
    CHECK(o.exited && o.exact && o.builds == 1 && o.trips == 1 && o.remote_misses == 0 &&
              o.remote_hits == 0 && o.elapsed_ms < stopped_bound_ms &&
              strstr(o.text, "no first byte of a reply within 250 ms"),
          "a stopped server held the first miss %lld ms (at most %lld):\n%s", o.elapsed_ms,
          stopped_bound_ms, o.text);

    /* Signals every 2 ms (a profiler's) while a stopped store's first byte is awaited: each
     * interrupted wait goes on to the same bound, so the command still ends at 250 ms, not at
     * its 3 s deadline. */
    jb_redis *interrupted = NULL;
    CHECK_OK(jb__redis_connect(NULL, 0, socket_path, 100, 3000, 250, &interrupted, why,
                               sizeof why));
    struct sigaction quiet = {.sa_handler = ignore_signal}, before_usr1;
    sigaction(SIGUSR1, &quiet, &before_usr1); /* no SA_RESTART: each signal ends a poll */
    signaller often = {.target = pthread_self()};
    pthread_t often_thread;
    if (interrupted && pthread_create(&often_thread, NULL, signal_often, &often) == 0) {
        kill(server_pid, SIGSTOP);
        const char *range[] = {"GETRANGE", "jb:interrupted", "0", "10"};
        size_t range_lens[] = {8, 14, 1, 2};
        jb_redis_reply reply;
        uint64_t began = jb__now_ns();
        int status = jb__redis_command(interrupted, 4, range, range_lens, &reply, why,
                                       sizeof why);
        long long took_ms = (long long)((jb__now_ns() - began) / 1000000);
        kill(server_pid, SIGCONT);
        atomic_store(&often.stop, true);
        pthread_join(often_thread, NULL);
        jb__redis_reply_free(&reply);
        CHECK(status != JB_OK && took_ms < 1000 && strstr(why, "no first byte of a reply"),
              "a stopped store's command under a stream of signals took %lld ms: %s", took_ms,
              status == JB_OK ? "answered" : why);
    }
    sigaction(SIGUSR1, &before_usr1, NULL);
    jb__redis_free(interrupted);
    return check_summary("test_remote");
}
