/*
 * The fleet's lease against a real redis-server, started by the test on a Unix socket in its
 * own temporary folder and killed when it ends. Each host is a new process (this program in
 * "child" mode) with a cache folder of its own, and compiles through a wrapper around gcc that
 * sleeps 0.4 s first (so that two hosts' compiles would overlap) and notes each compile:
 * - four hosts first-launching six kernels, each in its own order, compile each once;
 * - two hosts first-launching one kernel together compile it once; the other waits for the
 *   value and loads it, and no lease is left; also when the compile outlives the lease's
 *   lifetime (its holder renews it);
 * - a holder stopped (SIGSTOP) during its compile stops renewing its lease: the next host
 *   compiles once it expires, before the stopped one's compile would have ended;
 * - a key at a lease's name that never expires or is no string (another tenant's) is removed,
 *   not waited on;
 * - the renewing thread's warning (the store stopped) reaches a log callback that uses the
 *   library only once the holder has let go of the module cache's lock;
 * - a lease left by a dead holder (set with PX by the test) holds a host up until it expires,
 *   then the host compiles; one that outlives the compile timeout is waited for until then;
 * - a failed compile lets go of its lease, so the next host does not wait;
 * - a waiting host's other threads build other kernels meanwhile (no lock is held);
 * - a server stopped during a wait ends it (the breaker trips) and the host compiles;
 * - a forged value under the key does not end a wait (nor is it fetched every poll);
 * - a read-only tier takes no lease and waits for none.
 * Without redis-server the test fails: CI installs it.
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"
#include "redis_server.h"

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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 8
#define LEASE_PREFIX "jb:lease:"

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ---- child mode: waits for its go (its stdin ends), launches, prints one line ---- */

static char content_key[80];

static void keep_key(void *user_data, const jb_cache_event *e)
{
    (void)user_data;
    if (e->content_key[0])
        snprintf(content_key, sizeof content_key, "%s", e->content_key);
}

/* Launches kernel `what` (a number, or "fail": a body that does not compile): whether it did
 * what it should. */
static bool launch_one(jb_device *device, const char *what)
{
    bool right = false;
    jb_custom_kernel *k = NULL;
    jb_array *x = device ? f32_filled(device, N, 0.0f) : NULL, *y = NULL;
    if (strcmp(what, "fail") == 0) {
        k = f32_kernel("leased_fail", "out[thread_index()] = no_such_name;");
        right = f32_launch(&y, k, &x, 1, N) == JB_ERR_COMPILE;
    } else {
        char name[32], body[96];
        snprintf(name, sizeof name, "leased_%s", what);
        snprintf(body, sizeof body, "out[thread_index()] = %s.0f;", what);
        k = f32_kernel(name, body);
        right = f32_launch(&y, k, &x, 1, N) == JB_OK && f32_all_equal(y, N, (float)atoi(what));
    }
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    return right;
}

typedef struct first_launch {
    jb_device *device;
    const char *what;
    bool right;
} first_launch;

static void *launch_first(void *arg)
{
    first_launch *f = arg;
    f->right = launch_one(f->device, f->what);
    return NULL;
}

/* A log callback that first-launches kernel 16 (a build, under the module cache's write lock) at
 * a warning, as a host's logging may use the library. */
static jb_device *logging_device;
static atomic_int logged;

static void launch_on_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    if (atomic_load(&logged) == 0 && launch_one(logging_device, "16"))
        atomic_fetch_add(&logged, 1);
}

/* argv: child WHAT, where WHAT is kernels for launch_one launched in order ("1,2,3"), or "A+B":
 * A launched on a thread of its own and, 300 ms later, B on this one, timed apart (other_ms). */
static int child_main(char *what)
{
    char byte;
    while (read(0, &byte, 1) > 0) /* the parent's go: the pipe on stdin is closed */
        ;
    const char *timing = getenv("JB_TEST_REMOTE_TIMING");
    int connect_ms = 0, operation_ms = 0, breaker_ms = 0;
    if (timing)
        sscanf(timing, "%d,%d,%d", &connect_ms, &operation_ms, &breaker_ms);
    jb__test_set_remote_timing(connect_ms, operation_ms, breaker_ms);
    const char *ttl = getenv("JB_TEST_REMOTE_LEASE_TTL_MS");
    jb__test_set_remote_lease_ttl_ms(ttl ? strtoull(ttl, NULL, 10) : 0);
    jb_set_event_callback(keep_key, NULL);
    jb_device *device = test_device();
    uint64_t start = now_ms(), other_ms = 0;
    bool right;
    char *second = strchr(what, '+');
    alarm(60); /* a host that hangs ends, and its test fails */
    if (strncmp(what, "log:", 4) == 0) { /* WHAT with the callback set */
        logging_device = device;
        jb_set_log_callback(launch_on_warning, NULL);
        right = launch_one(device, what + 4);
        jb_set_log_callback(NULL, NULL);
    } else if (second) {
        *second++ = '\0';
        first_launch first = {device, what, false};
        pthread_t thread;
        bool started = pthread_create(&thread, NULL, launch_first, &first) == 0;
        sleep_ms(300);
        uint64_t other_start = now_ms();
        right = launch_one(device, second);
        other_ms = now_ms() - other_start;
        if (started)
            pthread_join(thread, NULL);
        right = right && started && first.right;
    } else {
        right = true;
        for (char *one = strtok(what, ","); one; one = strtok(NULL, ","))
            right = launch_one(device, one) && right;
    }
    uint64_t took = now_ms() - start;
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    printf("builds=%llu remote_hits=%llu remote_stores=%llu waits=%llu timeouts=%llu ms=%llu "
           "right=%d key=%s other_ms=%llu trips=%llu rejected=%llu logged=%d\n",
           (unsigned long long)c.builds, (unsigned long long)c.remote_hits,
           (unsigned long long)c.remote_stores, (unsigned long long)c.remote_lease_waits,
           (unsigned long long)c.remote_lease_timeouts, (unsigned long long)took, right,
           content_key[0] ? content_key : "-", (unsigned long long)other_ms,
           (unsigned long long)c.remote_breaker_trips, (unsigned long long)c.remote_rejected,
           atomic_load(&logged));
    jb_set_event_callback(NULL, NULL);
    return 0;
}

/* ---- the server ---- */

static char folder[128], socket_path[160], self[PATH_MAX], compiler[PATH_MAX], slower[PATH_MAX],
    marks[PATH_MAX], stalling[PATH_MAX], stall_flag[PATH_MAX];
static pid_t server_pid;

static void clean_up(void)
{
    redis_server_stop(&server_pid);
    remove_tree(folder);
}

/* One command of plain words to the server: the first line of its answer (a bulk string's
 * content instead of its length; "(nil)" for none), or "" when the exchange failed. */
static void command(char *answer, size_t len, int argc, const char **argv)
{
    answer[0] = '\0';
    int fd = connect_to(socket_path);
    if (fd < 0)
        return;
    char request[1024];
    size_t used = (size_t)snprintf(request, sizeof request, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        used += (size_t)snprintf(request + used, sizeof request - used, "$%zu\r\n%s\r\n",
                                 strlen(argv[i]), argv[i]);
    char reply[1024];
    size_t got = 0;
    ssize_t r;
    if (used < sizeof request && jb__write_all(fd, request, used)) {
        /* Enough for one short reply: a line, or a length line and a short string. */
        while (got + 1 < sizeof reply && (r = read(fd, reply + got, sizeof reply - 1 - got)) > 0) {
            got += (size_t)r;
            reply[got] = '\0';
            char *end = strstr(reply, "\r\n");
            if (end && (reply[0] != '$' || reply[1] == '-' || strstr(end + 2, "\r\n")))
                break;
        }
    }
    close(fd);
    reply[got] = '\0';
    char *line = reply[0] == '$' ? strstr(reply, "\r\n") : NULL;
    if (reply[0] == '$' && reply[1] == '-')
        snprintf(answer, len, "(nil)");
    else if (line)
        snprintf(answer, len, "%.*s", (int)strcspn(line + 2, "\r"), line + 2);
    else if (got > 1)
        snprintf(answer, len, "%.*s", (int)strcspn(reply + 1, "\r"), reply + 1);
}

/* The lease's value for content key `key` ("(nil)": none). */
static void lease_value(const char *key, char *out, size_t len)
{
    char name[128];
    snprintf(name, sizeof name, LEASE_PREFIX "%s", key);
    command(out, len, 2, (const char *[]){"GET", name});
}

/* Sets a lease for content key `key` as another host would, expiring in `ms`. */
static bool set_foreign_lease(const char *key, int ms)
{
    char name[128], px[24], answer[64];
    snprintf(name, sizeof name, LEASE_PREFIX "%s", key);
    snprintf(px, sizeof px, "%d", ms);
    command(answer, sizeof answer, 5, (const char *[]){"SET", name, "a-dead-host", "PX", px});
    return strcmp(answer, "OK") == 0;
}

/* Files a value that is no entry under content key `key`, as a forger would. */
static bool set_forged_value(const char *key)
{
    char name[128], answer[64];
    snprintf(name, sizeof name, "jitbridge:v1:%s", key);
    command(answer, sizeof answer, 3, (const char *[]){"SET", name, "not a signed entry"});
    return strcmp(answer, "OK") == 0;
}

/* ---- the parent ---- */

typedef struct outcome {
    bool exited;
    unsigned long long builds, remote_hits, remote_stores, waits, timeouts, ms, other_ms, trips,
        rejected;
    int right, logged;
    char key[80];
    char text[2048];
} outcome;

typedef struct host {
    pid_t pid;
    int output;
} host;

/* Starts this program in child mode on `what` with a new cache folder, the tier `url` (NULL:
 * none), the compiler `cc` (NULL: the system's), and `timeout_ms` as the compile timeout (NULL: the
 * default). It launches once `go` (the write end of its stdin) is closed. */
static host start_host(const char *what, const char *url, const char *cc, const char *timeout_ms,
                       int *go)
{
    static int hosts;
    char cache[PATH_MAX], key_file[PATH_MAX];
    snprintf(cache, sizeof cache, "%s/cache%d", folder, ++hosts);
    snprintf(key_file, sizeof key_file, "%s/fleet.key", folder);
    int out[2], in[2];
    host h = {-1, -1};
    if (pipe(out) != 0 || (!*go && pipe(in) != 0))
        return h;
    if (*go)
        in[0] = go[0], in[1] = go[1]; /* a go shared with another host */
    h.pid = fork();
    if (h.pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        host_environment(cache, url, key_file);
        if (cc)
            setenv("CC", cc, 1);
        else
            unsetenv("CC");
        if (timeout_ms)
            setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", timeout_ms, 1);
        else
            unsetenv("JITBRIDGE_COMPILE_TIMEOUT_MS");
        execl(self, self, "child", what, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    h.output = out[0];
    go[0] = in[0], go[1] = in[1];
    return h;
}

static void let_go(int *go)
{
    close(go[0]);
    close(go[1]);
    go[0] = go[1] = 0;
}

static outcome finish_host(host h)
{
    outcome o = {0};
    read_host_output(h.output, o.text, sizeof o.text);
    int status = 0;
    if (h.pid > 0)
        waitpid(h.pid, &status, 0);
    o.exited = h.pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    sscanf(o.text,
           "builds=%llu remote_hits=%llu remote_stores=%llu waits=%llu timeouts=%llu ms=%llu "
           "right=%d key=%79s other_ms=%llu trips=%llu rejected=%llu logged=%d",
           &o.builds, &o.remote_hits, &o.remote_stores, &o.waits, &o.timeouts, &o.ms, &o.right,
           o.key, &o.other_ms, &o.trips, &o.rejected, &o.logged);
    return o;
}

/* One host on its own, let go at once. */
static outcome run_host(const char *what, const char *url, const char *cc, const char *timeout_ms)
{
    int go[2] = {0, 0};
    host h = start_host(what, url, cc, timeout_ms, go);
    let_go(go);
    return finish_host(h);
}

static int compiles(void)
{
    return lines_in(marks);
}

/* The content key of kernel `what` built by the compiler `cc`, from a host with no tier. */
static bool key_of(const char *what, const char *cc, char *key, size_t len)
{
    outcome o = run_host(what, NULL, cc, NULL);
    snprintf(key, len, "%s", o.key);
    return o.exited && o.right && strlen(o.key) == 32;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "child") == 0)
        return child_main(argv[2]);
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    /* argv[0], not /proc/self/exe: under valgrind that is valgrind's launcher. */
    if (!realpath(argv[0], self))
        return 1;
    const char *tmp = getenv("TMPDIR");
    tmp = tmp && *tmp && strlen(tmp) < 60 ? tmp : "/tmp"; /* the socket's path fits sun_path */
    snprintf(folder, sizeof folder, "%s/jb-lease-XXXXXX", tmp);
    if (!mkdtemp(folder))
        return 1;
    atexit(clean_up);
    snprintf(socket_path, sizeof socket_path, "%s/redis.sock", folder);
    server_pid = redis_server_start(folder, socket_path);
    if (!server_pid) {
        fprintf(stderr, "test_remote_lease: redis-server did not start (is it installed? "
                        "apt-get install redis-server; see %s/redis.log)\n", folder);
        printf("test_remote_lease: 0 passed, 1 failed\n");
        return 1;
    }
    char key_file[PATH_MAX], stall[PATH_MAX + 32];
    snprintf(key_file, sizeof key_file, "%s/fleet.key", folder);
    snprintf(compiler, sizeof compiler, "%s/slow-gcc", folder);
    snprintf(slower, sizeof slower, "%s/slower-gcc", folder);
    snprintf(marks, sizeof marks, "%s/compiles", folder);
    /* Sleeps 4 s while the flag file exists: a long compile that a test can shorten. */
    snprintf(stalling, sizeof stalling, "%s/stalling-gcc", folder);
    snprintf(stall_flag, sizeof stall_flag, "%s/stall", folder);
    snprintf(stall, sizeof stall, "[ -e '%s' ] && sleep 4\n", stall_flag);
    CHECK(write_text_file(key_file, "the fleet's key: 0123456789abcdef0123456789abcdef", 0600) &&
              write_compiler_wrapper(compiler, "gcc", marks, "sleep 0.4\n") &&
              write_compiler_wrapper(slower, "gcc", marks, "sleep 1.5\n") &&
              write_compiler_wrapper(stalling, "gcc", marks, stall),
          "writing the key file and the compilers: %s", strerror(errno));
    char url[PATH_MAX], read_only[PATH_MAX + 32], value[128];
    snprintf(url, sizeof url, "unix://%s", socket_path);
    snprintf(read_only, sizeof read_only, "unix://%s?mode=read-only", socket_path);

    /* Two hosts first-launch one kernel together: one compile; the other waits and loads it. */
    int go[2] = {0, 0};
    host a = start_host("1", url, compiler, NULL, go);
    host b = start_host("1", url, compiler, NULL, go);
    let_go(go);
    outcome oa = finish_host(a), ob = finish_host(b);
    CHECK(oa.exited && ob.exited && oa.right && ob.right && oa.builds + ob.builds == 1 &&
              compiles() == 1 && oa.remote_hits + ob.remote_hits == 1 &&
              oa.waits + ob.waits == 1 && oa.timeouts + ob.timeouts == 0,
          "two hosts compiled one kernel %d times:\n%s%s", compiles(), oa.text, ob.text);
    lease_value(oa.key, value, sizeof value);
    CHECK(strcmp(value, "(nil)") == 0, "the holder left its lease: '%s'", value);

    /* Four hosts first-launch the same six kernels, each in its own order: six compiles. */
    const char *orders[] = {"20,21,22,23,24,25", "25,24,23,22,21,20", "22,23,24,25,20,21",
                            "23,22,21,20,25,24"};
    host four[4];
    outcome o;
    int before = compiles();
    for (int i = 0; i < 4; i++)
        four[i] = start_host(orders[i], url, compiler, NULL, go);
    let_go(go);
    unsigned long long builds = 0, hits = 0;
    bool all_right = true;
    char texts[4 * 256] = "";
    for (int i = 0; i < 4; i++) {
        o = finish_host(four[i]);
        all_right = all_right && o.exited && o.right && o.timeouts == 0;
        builds += o.builds, hits += o.remote_hits;
        snprintf(texts + strlen(texts), sizeof texts - strlen(texts), "%.255s", o.text);
    }
    CHECK(all_right && builds == 6 && hits == 18 && compiles() == before + 6,
          "four hosts compiled six kernels %d times:\n%s", compiles() - before, texts);

    /* A compile (1.5 s and more) longer than a lease lives (0.9 s here): its holder renews it,
     * so the other host still waits instead of compiling. */
    before = compiles();
    setenv("JB_TEST_REMOTE_LEASE_TTL_MS", "900", 1);
    a = start_host("6", url, slower, NULL, go), b = start_host("6", url, slower, NULL, go);
    unsetenv("JB_TEST_REMOTE_LEASE_TTL_MS");
    let_go(go);
    oa = finish_host(a), ob = finish_host(b);
    CHECK(oa.exited && ob.exited && oa.right && ob.right && oa.builds + ob.builds == 1 &&
              compiles() == before + 1 && oa.remote_hits + ob.remote_hits == 1 &&
              oa.waits + ob.waits == 1,
          "a lease renewed while its holder compiled was not waited for (%d compiles):\n%s%s",
          compiles() - before, oa.text, ob.text);

    /* A holder stopped (SIGSTOP) while its compiler runs: the thread that compiles sleeps in
     * the compiler's vfork and stops only when the compile ends, but the thread that renews the
     * lease would run on. It renews no more once the holder has a stop pending, so the lease
     * expires (0.9 s here) and the next host compiles long before the stopped one's compile
     * (4 s) ends. */
    char key[80];
    CHECK(key_of("11", stalling, key, sizeof key), "the key of kernel 11");
    CHECK(write_text_file(stall_flag, "", 0600), "the stall flag: %s", strerror(errno));
    setenv("JB_TEST_REMOTE_LEASE_TTL_MS", "900", 1);
    a = start_host("11", url, stalling, NULL, go);
    let_go(go);
    value[0] = '\0';
    for (int i = 0; i < 500 && (!value[0] || strcmp(value, "(nil)") == 0); i++) {
        sleep_ms(10);
        lease_value(key, value, sizeof value);
    }
    sleep_ms(200); /* into the compile */
    kill(a.pid, SIGSTOP);
    unlink(stall_flag); /* the next host's compile is quick */
    o = run_host("11", url, stalling, NULL);
    unsetenv("JB_TEST_REMOTE_LEASE_TTL_MS");
    kill(a.pid, SIGCONT);
    oa = finish_host(a);
    CHECK(strlen(value) == 32 && o.exited && o.right && oa.exited && oa.right &&
              o.builds == 1 && o.waits == 1 && o.ms < 2500,
          "a stopped holder's lease was kept fresh (lease '%s', %llu ms):\n%s%s", value, o.ms,
          o.text, oa.text);

    /* The store stopped while a holder compiles: the renewal times out (300 ms here) and trips
     * the breaker, whose warning reaches a log callback that builds another kernel. The
     * holder's thread holds the module cache's write lock until it has stopped the renewing
     * thread: the warning waits for the lock's release, never a callback on that thread
     * blocked on the lock while the holder waits for the thread. */
    CHECK(key_of("14", slower, key, sizeof key), "the key of kernel 14");
    setenv("JB_TEST_REMOTE_LEASE_TTL_MS", "900", 1);
    setenv("JB_TEST_REMOTE_TIMING", "100,300,60000", 1);
    a = start_host("log:14", url, slower, NULL, go);
    unsetenv("JB_TEST_REMOTE_TIMING");
    unsetenv("JB_TEST_REMOTE_LEASE_TTL_MS");
    let_go(go);
    value[0] = '\0';
    for (int i = 0; i < 500 && (!value[0] || strcmp(value, "(nil)") == 0); i++) {
        sleep_ms(10);
        lease_value(key, value, sizeof value);
    }
    kill(server_pid, SIGSTOP);
    sleep_ms(2500); /* past the compile (1.5 s) */
    kill(server_pid, SIGCONT);
    oa = finish_host(a);
    CHECK(strlen(value) == 32 && oa.exited && oa.right && oa.builds == 2 && oa.trips == 1 &&
              oa.logged >= 1,
          "a warning of the renewing thread hung its holder (lease '%s'):\n%s", value, oa.text);

    /* A lease of a dead holder: the host waits until it expires (1.5 s), then compiles. */
    CHECK(key_of("2", compiler, key, sizeof key), "the key of kernel 2");
    CHECK(set_foreign_lease(key, 1500), "SET of a dead holder's lease");
    o = run_host("2", url, compiler, NULL);
    CHECK(o.exited && o.right && o.builds == 1 && o.waits == 1 && o.timeouts == 0 &&
              o.remote_stores == 1 && o.ms >= 1200,
          "a dead holder's lease did not hold the host up until it expired:\n%s", o.text);

    /* A lease that outlives the compile timeout (2.5 s here): waited for until then only. */
    CHECK(key_of("3", NULL, key, sizeof key), "the key of kernel 3");
    CHECK(set_foreign_lease(key, 60000), "SET of a dead holder's lease");
    o = run_host("3", url, NULL, "2500");
    CHECK(o.exited && o.right && o.builds == 1 && o.waits == 1 && o.timeouts == 1 &&
              o.ms >= 2300 && o.ms < 20000,
          "a wait did not end at the compile timeout:\n%s", o.text);
    lease_value(key, value, sizeof value);
    CHECK(strcmp(value, "a-dead-host") == 0, "another holder's lease was touched: '%s'", value);

    /* A host waits for a lease with the module cache's lock let go: its other threads build
     * meanwhile (kernel 8 while kernel 7 waits 2 s for another host's lease). */
    CHECK(key_of("7", NULL, key, sizeof key), "the key of kernel 7");
    CHECK(set_foreign_lease(key, 2000), "SET of another host's lease");
    o = run_host("7+8", url, NULL, NULL);
    CHECK(o.exited && o.right && o.builds == 2 && o.waits == 1 && o.ms >= 1800 &&
              o.other_ms < 1200,
          "a build waited behind another thread's lease wait (%llu ms):\n%s", o.other_ms,
          o.text);

    /* The server stopped (SIGSTOP) during a wait: the next poll times out (300 ms here), the
     * breaker trips and the host compiles, long before the lease (10 s) or the compile
     * timeout (20 s) would have ended the wait. */
    CHECK(key_of("9", NULL, key, sizeof key), "the key of kernel 9");
    CHECK(set_foreign_lease(key, 10000), "SET of another host's lease");
    setenv("JB_TEST_REMOTE_TIMING", "100,300,60000", 1);
    host h = start_host("9", url, NULL, "20000", go);
    unsetenv("JB_TEST_REMOTE_TIMING");
    let_go(go);
    sleep_ms(1000);
    kill(server_pid, SIGSTOP);
    o = finish_host(h);
    kill(server_pid, SIGCONT);
    CHECK(o.exited && o.right && o.builds == 1 && o.waits == 1 && o.trips == 1 &&
              o.ms < 5000,
          "a host waiting on a stopped server did not compile soon:\n%s", o.text);

    /* A forged value under the key while another host holds the lease: rejected once, then
     * waited past (not fetched and rejected again every 75 ms) until the lease expires. */
    CHECK(key_of("10", NULL, key, sizeof key), "the key of kernel 10");
    CHECK(set_forged_value(key) && set_foreign_lease(key, 1500), "SET of a forged value");
    o = run_host("10", url, NULL, NULL);
    CHECK(o.exited && o.right && o.builds == 1 && o.waits == 1 && o.rejected == 2 &&
              o.remote_stores == 1 && o.ms >= 1200,
          "a forged value ended a lease wait at once:\n%s", o.text);

    /* A key at a lease's name that no holder makes, a list or a string that never expires (another
     * tenant's, or a tool's): not waited on until the compile timeout (8 s here) but removed, and
     * the lease taken; no trip. */
    const char *foreign[][5] = {{"RPUSH", NULL, "a", "list", NULL}, {"SET", NULL, "forever", NULL}};
    const char *kernels[] = {"12", "13"};
    for (int i = 0; i < 2; i++) {
        char name[128], answer[64];
        CHECK(key_of(kernels[i], NULL, key, sizeof key), "the key of kernel %s", kernels[i]);
        snprintf(name, sizeof name, LEASE_PREFIX "%s", key);
        foreign[i][1] = name;
        command(answer, sizeof answer, i == 0 ? 4 : 3, foreign[i]);
        CHECK(answer[0], "%s of a lease's name", foreign[i][0]);
        o = run_host(kernels[i], url, NULL, "8000");
        CHECK(o.exited && o.right && o.builds == 1 && o.timeouts == 0 && o.trips == 0 &&
                  o.remote_stores == 1 && o.ms < 4000,
              "a %s at a lease's name was waited on:\n%s", i == 0 ? "list" : "lasting string",
              o.text);
        lease_value(key, value, sizeof value);
        CHECK(strcmp(value, "(nil)") == 0, "the holder left a lease: '%s'", value);
    }

    /* A failed compile lets go of its lease: the next host compiles at once. */
    o = run_host("fail", url, compiler, "20000"); /* a lease left behind would last 20 s */
    CHECK(o.exited && o.right && o.builds == 0 && strlen(o.key) == 32,
          "the failing kernel:\n%s", o.text);
    lease_value(o.key, value, sizeof value);
    CHECK(strcmp(value, "(nil)") == 0, "a failed compile left its lease: '%s'", value);
    o = run_host("fail", url, compiler, "20000");
    CHECK(o.exited && o.right && o.waits == 0 && o.ms < 5000,
          "a host waited after a failed compile:\n%s", o.text);

    /* A read-only tier takes no lease and waits for none. */
    CHECK(key_of("4", NULL, key, sizeof key), "the key of kernel 4");
    CHECK(set_foreign_lease(key, 3000), "SET of another host's lease");
    o = run_host("4", read_only, NULL, NULL);
    CHECK(o.exited && o.right && o.builds == 1 && o.waits == 0 && o.remote_stores == 0 &&
              o.ms < 2000,
          "a read-only host waited for a lease:\n%s", o.text);
    lease_value(key, value, sizeof value);
    CHECK(strcmp(value, "a-dead-host") == 0, "a read-only host touched a lease: '%s'", value);
    return check_summary("test_remote_lease");
}
