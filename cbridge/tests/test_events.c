/*
 * The event callback: one call per slow-path event (build start/end/fail, disk store, disk hit,
 * entry rejected, entry evicted), each with its module, key, content hash, device, thread id,
 * the thread's tag and a duration; memory hits raise nothing. And the callback's rules, tried as
 * an adversary would: it runs under no lock (it launches, builds and seals from inside), it
 * cannot replace itself or recurse, it may fork (and a child forked while a call is in progress,
 * with or without a replacement waiting for it, can replace it), the
 * caller's last error survives it, a replaced user_data is never used again, and no event is
 * torn when many threads raise them at once.
 */
#include "deadline.h"
#include "helpers.h"
#include "jitbridge_sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Internal, hidden; reachable from a static link: raising events without a compiler makes the
 * stress below fast enough to run thousands of times. */
void jb__event_build_begin(jb_device *dev, const char *name, const char *key);
void jb__event_build_end(void);
void jb__event_raise(jb_cache_event_kind kind, uint64_t duration_ns, int status,
                     const char *message);
uint64_t jb__fnv1a64(const void *data, size_t len, uint64_t seed);
uint64_t jb__now_ns(void);

#define MAX_SEEN 64
#define CHILD_S 60 /* a forked child's alarm */

typedef struct seen_event {
    jb_cache_event e;
    char name[256], key[280], content_key[64], tag[256], message[512];
} seen_event;

typedef struct recorder {
    pthread_mutex_t mutex;
    int count;
    seen_event events[MAX_SEEN];
} recorder;

static recorder rec = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static void record(void *user_data, const jb_cache_event *e)
{
    recorder *r = user_data;
    pthread_mutex_lock(&r->mutex);
    if (r->count < MAX_SEEN) {
        seen_event *s = &r->events[r->count++];
        s->e = *e;
        snprintf(s->name, sizeof s->name, "%s", e->name);
        snprintf(s->key, sizeof s->key, "%s", e->key);
        snprintf(s->content_key, sizeof s->content_key, "%s", e->content_key);
        snprintf(s->tag, sizeof s->tag, "%s", e->tag);
        snprintf(s->message, sizeof s->message, "%s", e->message);
    }
    pthread_mutex_unlock(&r->mutex);
}

static void recorder_clear(void)
{
    pthread_mutex_lock(&rec.mutex);
    rec.count = 0;
    pthread_mutex_unlock(&rec.mutex);
}

/* The kinds seen, as "build start,build end,..." */
static const char *kinds_seen(char *out, size_t len)
{
    out[0] = '\0';
    pthread_mutex_lock(&rec.mutex);
    for (int i = 0; i < rec.count; i++)
        snprintf(out + strlen(out), len - strlen(out), "%s%s", i ? "," : "",
                 jb_cache_event_kind_name(rec.events[i].e.kind));
    pthread_mutex_unlock(&rec.mutex);
    return out;
}

static bool disk_on(void)
{
    return strncmp(jb_disk_cache_state(), "on", 2) == 0 && !getenv("JITBRIDGE_DISK_CACHE");
}

/* A run-unique salt: the cache folder is shared by the tests of one `make test`. */
static unsigned salt;

static jb_custom_kernel *unique_kernel(const char *name, const char *body_fmt)
{
    char body[256];
    snprintf(body, sizeof body, body_fmt, salt);
    return f32_kernel(name, body);
}

static void events_of_a_build(jb_device *dev)
{
    jb_custom_kernel *k = unique_kernel("ev_build", "out[thread_index()] = inp[thread_index()] + %u.0f;");
    CHECK_OK(jb_set_thread_tag("request 1234"));
    CHECK_OK(jb_set_event_callback(record, &rec));
    recorder_clear();
    uint64_t before = jb__now_ns();
    CHECK_OK(launch_on_four_ones(k, dev));
    char kinds[512];
    const char *want = disk_on() ? "build start,build end,disk store" : "build start,build end";
    CHECK(strcmp(kinds_seen(kinds, sizeof kinds), want) == 0, "events %s, want %s", kinds, want);
    char key[300];
    snprintf(key, sizeof key, "%d:%s", jb_device_index(dev), jb_custom_kernel_module_name(k));
    uint64_t last_time = before;
    for (int i = 0; i < rec.count; i++) {
        const seen_event *s = &rec.events[i];
        CHECK(s->e.struct_size == sizeof(jb_cache_event), "struct_size %zu", s->e.struct_size);
        CHECK(strcmp(s->name, jb_custom_kernel_module_name(k)) == 0, "name %s", s->name);
        CHECK(strcmp(s->key, key) == 0, "key %s, want %s", s->key, key);
        CHECK(s->e.device == dev, "device");
        CHECK(s->e.thread_id == (uint64_t)gettid(), "thread %llu, this is %d",
              (unsigned long long)s->e.thread_id, (int)gettid());
        CHECK(strcmp(s->tag, "request 1234") == 0, "tag '%s'", s->tag);
        CHECK(s->e.status == JB_OK && s->message[0] == '\0', "status %d message '%s'",
              s->e.status, s->message);
        CHECK(s->e.time_ns >= last_time, "times go back: %llu after %llu",
              (unsigned long long)s->e.time_ns, (unsigned long long)last_time);
        last_time = s->e.time_ns;
        CHECK(disk_on() == (strlen(s->content_key) == 32), "content key '%s'", s->content_key);
    }
    if (rec.count >= 2) {
        CHECK(rec.events[0].e.duration_ns == 0, "build start has no duration");
        CHECK(rec.events[1].e.duration_ns > 0 &&
                  rec.events[1].e.duration_ns <= rec.events[1].e.time_ns - rec.events[0].e.time_ns,
              "build end's duration %llu is the time since build start",
              (unsigned long long)rec.events[1].e.duration_ns);
    }
    jb_counters c;
    CHECK_OK(jb_counters_get(&c, sizeof c));
    CHECK(rec.count >= 2 && c.build_max_ns >= rec.events[1].e.duration_ns &&
              c.build_max_ns <= c.build_ns,
          "longest build %llu ns, all builds %llu ns", (unsigned long long)c.build_max_ns,
          (unsigned long long)c.build_ns);
    /* Memory hits are never events: through the lookaside, and through the locked lookup. */
    recorder_clear();
    for (int i = 0; i < 20; i++) {
        CHECK_OK(jb_set_lookaside_enabled(i % 2));
        CHECK_OK(launch_on_four_ones(k, dev));
    }
    CHECK_OK(jb_set_lookaside_enabled(1));
    CHECK(rec.count == 0, "%d events for memory hits (%s)", rec.count,
          kinds_seen(kinds, sizeof kinds));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    CHECK_OK(jb_set_thread_tag(NULL));
    jb_custom_kernel_free(k);
}

/* The entry file for a content key seen in an event. */
static void entry_path(char *out, size_t len, const char *content_key)
{
    const char *dir = NULL;
    jb_disk_cache_dir(&dir);
    snprintf(out, len, "%s/%s.jbc", dir, content_key);
}

/* Rewrites the entry's payload as `payload` with a recomputed (valid) checksum: an entry that
 * passes every check and that the loader then refuses. */
static bool forge_entry(const char *path, const char *payload)
{
    int fd = open(path, O_RDONLY);
    unsigned char data[1 << 16];
    ssize_t n = fd >= 0 ? read(fd, data, sizeof data) : -1;
    if (fd >= 0)
        close(fd);
    if (n < 32)
        return false;
    uint32_t key_bytes;
    memcpy(&key_bytes, data + 12, 4);
    uint64_t payload_bytes = strlen(payload);
    memcpy(data + 16, &payload_bytes, 8);
    memcpy(data + 32 + key_bytes, payload, payload_bytes);
    uint64_t checksum = jb__fnv1a64(payload, payload_bytes,
                                    jb__fnv1a64(data + 32, key_bytes, 0xcbf29ce484222325ULL));
    memcpy(data + 24, &checksum, 8);
    unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    bool ok = fd >= 0 && write(fd, data, 32 + key_bytes + payload_bytes) ==
                             (ssize_t)(32 + key_bytes + payload_bytes);
    if (fd >= 0)
        close(fd);
    return ok;
}

static void disk_module_body(char *out, size_t len)
{
    snprintf(out, len, "void touch(void **args, unsigned long n) { (void)n; "
                       "**(float **)args[0] = %u.0f; }", salt);
}

/* In a new process (this program, run again): launches the disk test's module and prints what
 * the callback saw: "kinds|first content key|first status|first duration > 0|first message". */
static int disk_child(jb_device *dev)
{
    char body[256], kinds[512];
    disk_module_body(body, sizeof body);
    jb_source_module *m = touch_module("ev_disk", body);
    CHECK_OK(jb_set_event_callback(record, &rec));
    CHECK_OK(launch_touch(m, dev));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    const seen_event *first = &rec.events[0];
    printf("%s|%s|%d|%d|%s\n", kinds_seen(kinds, sizeof kinds), first->content_key,
           first->e.status, first->e.duration_ns > 0, first->message);
    jb_source_module_free(m);
    return check_failed ? 1 : 0;
}

/* Runs disk_child in a new process; its line in `out`. */
static void run_disk_child(char *out, size_t len)
{
    char self[4096], salt_text[32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(salt_text, sizeof salt_text, "%u", salt);
    int fds[2];
    out[0] = '\0';
    if (pipe(fds) != 0)
        return;
    pid_t pid = fork_with_deadline("the disk child", CHILD_S);
    if (pid == 0) {
        dup2(fds[1], 1);
        execl(self, self, "disk-child", salt_text, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < len - 1 && (r = read(fds[0], out + got, len - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    out[strcspn(out, "\n")] = '\0';
    close(fds[0]);
    int ws = wait_child_with_deadline(pid, CHILD_S + 5, "the disk child");
    CHECK(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the disk child: %#x (%s)", ws, out);
}

static void events_of_the_disk_cache(jb_device *dev)
{
    if (!disk_on()) {
        printf("test_events: the disk cache is off; its events not tried\n");
        return;
    }
    char body[256], kinds[512], path[4200], line[2048], want[512];
    disk_module_body(body, sizeof body);
    jb_source_module *m = touch_module("ev_disk", body);
    CHECK_OK(jb_set_event_callback(record, &rec));
    recorder_clear();
    CHECK_OK(launch_touch(m, dev));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    CHECK(strcmp(kinds_seen(kinds, sizeof kinds), "build start,build end,disk store") == 0,
          "first: %s", kinds);
    char content_key[64];
    snprintf(content_key, sizeof content_key, "%s", rec.events[0].content_key);
    jb_source_module_free(m);

    /* A new process loads it from the folder: one disk hit, with a duration. */
    run_disk_child(line, sizeof line);
    snprintf(want, sizeof want, "disk hit|%s|0|1|", content_key);
    CHECK(strcmp(line, want) == 0, "second process: '%s', want '%s'", line, want);

    /* A damaged entry fails its checks: rejected, then compiled and stored afresh. */
    entry_path(path, sizeof path, content_key);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "XXXX", 4, 0) == 4, "damage %s", path);
    if (fd >= 0)
        close(fd);
    run_disk_child(line, sizeof line);
    snprintf(want, sizeof want,
             "entry rejected,build start,build end,disk store|%s|0|0|cache entry %s.jbc failed "
             "its checks", content_key, content_key);
    CHECK(strncmp(line, want, strlen(want)) == 0, "damaged: '%s', want '%s...'", line, want);

    /* An entry with valid checks that the loader refuses: evicted, then compiled. */
    CHECK(forge_entry(path, "not a shared object"), "forge %s", path);
    run_disk_child(line, sizeof line);
    snprintf(want, sizeof want, "entry evicted,build start,build end,disk store|%s|%d|0|",
             content_key, JB_ERR_LOAD);
    CHECK(strncmp(line, want, strlen(want)) == 0 && strlen(line) > strlen(want),
          "forged: '%s', want '%s<the loader's message>'", line, want);
}

static void event_of_a_failed_build(jb_device *dev)
{
    jb_custom_kernel *k = unique_kernel("ev_fail", "out[thread_index()] = %u +;");
    char kinds[512];
    CHECK_OK(jb_set_event_callback(record, &rec));
    recorder_clear();
    CHECK(launch_on_four_ones(k, dev) == JB_ERR_COMPILE, "a broken kernel compiles?");
    CHECK(strcmp(kinds_seen(kinds, sizeof kinds), "build start,build fail") == 0, "%s", kinds);
    CHECK(rec.count == 2 && rec.events[1].e.status == JB_ERR_COMPILE &&
              strstr(rec.events[1].message, "error") != NULL && rec.events[1].e.duration_ns > 0,
          "build fail: status %d, message '%s'", rec.events[1].e.status, rec.events[1].message);
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    jb_custom_kernel_free(k);
}

/* ---- the callback calls the library ---- */

typedef struct reentrant {
    jb_device *dev;
    jb_custom_kernel *inner;  /* launched (a miss, so a build) from inside the callback */
    jb_custom_kernel *sealed; /* launched from inside while the callback has sealed */
    int calls, inner_status, sealed_status, set_status, seal_status, lookup_status;
} reentrant;

static void launch_from_inside(void *user_data, const jb_cache_event *e)
{
    reentrant *r = user_data;
    r->calls++;
    if (e->kind != JB_CACHE_EVENT_BUILD_END)
        return;
    r->set_status = jb_set_event_callback(NULL, NULL);
    jb_device *nothing = NULL;
    r->lookup_status = jb_device_lookup(&nothing, "tpu:0"); /* sets this thread's error */
    r->seal_status = jb_seal(JB_SEAL_ERROR);
    /* its violation event: not delivered */
    r->sealed_status = launch_on_four_ones(r->sealed, r->dev);
    r->seal_status |= jb_seal(JB_SEAL_OFF);
    r->inner_status = launch_on_four_ones(r->inner, r->dev);
}

static void callback_calls_the_library(jb_device *dev)
{
    reentrant r = {.dev = dev,
                   .inner = unique_kernel("ev_inner", "out[thread_index()] = %u.5f;"),
                   .sealed = unique_kernel("ev_sealed", "out[thread_index()] = %u.875f;")};
    jb_custom_kernel *outer = unique_kernel("ev_outer", "out[thread_index()] = %u.25f;");
    jb_custom_kernel *broken = unique_kernel("ev_broken", "out[thread_index()] = %u +;");
    jb_counters before, after;
    CHECK_OK(jb_counters_get(&before, sizeof before));
    CHECK_OK(jb_set_event_callback(launch_from_inside, &r));
    CHECK_OK(launch_on_four_ones(outer, dev));
    CHECK(r.inner_status == JB_OK, "the callback's launch: %d", r.inner_status);
    CHECK(r.sealed_status == JB_ERR_SEALED, "the callback sealed, then launched: %d",
          r.sealed_status);
    CHECK(r.set_status == JB_ERR_INVALID_ARGUMENT, "replacing from inside: %d", r.set_status);
    CHECK(r.seal_status == JB_OK && r.lookup_status == JB_ERR_INVALID_ARGUMENT,
          "seal %d lookup %d", r.seal_status, r.lookup_status);
    /* The inner build's events are not delivered (they would recurse); counters count it. */
    int want = disk_on() ? 3 : 2;
    CHECK(r.calls == want, "%d calls, want %d (the outer build's only)", r.calls, want);
    CHECK_OK(jb_counters_get(&after, sizeof after));
    CHECK(after.builds - before.builds == 2, "%llu builds",
          (unsigned long long)(after.builds - before.builds));
    /* The caller's error is the failed build's, not the callback's lookup's. */
    CHECK(launch_on_four_ones(broken, dev) == JB_ERR_COMPILE, "broken compiles?");
    CHECK(jb_last_error_status() == JB_ERR_COMPILE &&
              strstr(jb_last_error_message(), "ev_broken") != NULL,
          "the last error after the callback: %d %s", jb_last_error_status(),
          jb_last_error_message());
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    jb_custom_kernel_free(outer);
    jb_custom_kernel_free(broken);
    jb_custom_kernel_free(r.inner);
    jb_custom_kernel_free(r.sealed);
}

/* ---- fork ---- */

static jb_device *fork_device;
static atomic_int forked_child_ok = -1;

static bool child_builds(void *name)
{
    jb_custom_kernel *k = unique_kernel(name, "out[thread_index()] = %u.75f;");
    return launch_on_four_ones(k, fork_device) == JB_OK;
}

/* Forks from inside the callback; the child builds a kernel and leaves. */
static void fork_from_inside(void *user_data, const jb_cache_event *e)
{
    (void)user_data;
    if (e->kind == JB_CACHE_EVENT_BUILD_START)
        atomic_store(&forked_child_ok,
                     child_says_yes("a fork inside the callback", CHILD_S, child_builds, "ev_child"));
}

static void callback_forks(jb_device *dev)
{
    fork_device = dev;
    jb_custom_kernel *k = unique_kernel("ev_forker", "out[thread_index()] = %u.125f;");
    CHECK_OK(jb_set_event_callback(fork_from_inside, NULL));
    CHECK_OK(launch_on_four_ones(k, dev));
    CHECK(atomic_load(&forked_child_ok) == 1, "the child forked inside the callback: %d",
          atomic_load(&forked_child_ok));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    jb_custom_kernel_free(k);
}

/* A thread stays inside the callback while another waits to replace it; then this thread
 * forks. The child has neither of them: its own replacement returns at once. */
static atomic_int parked, release_parked, replaced;

static void park(void *user_data, const jb_cache_event *e)
{
    (void)user_data, (void)e;
    atomic_store(&parked, 1);
    while (!atomic_load(&release_parked))
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
}

static void *raise_one(void *arg)
{
    (void)arg;
    jb__event_build_begin(NULL, "parked", "x:parked");
    jb__event_raise(JB_CACHE_EVENT_DISK_HIT, 1, JB_OK, NULL);
    jb__event_build_end();
    return NULL;
}

static void *replace(void *arg)
{
    (void)arg;
    jb_set_event_callback(NULL, NULL);
    atomic_store(&replaced, 1);
    return NULL;
}

/* In a child forked now: replaces the callback twice and builds; neither may wait for the
 * parked call (its thread is not in the child). */
static bool child_replaces(void *name)
{
    return jb_set_event_callback(record, &rec) == JB_OK &&
           jb_set_event_callback(NULL, NULL) == JB_OK && child_builds(name);
}

static void fork_while_a_call_is_parked(void)
{
    pthread_t raiser, replacer;
    CHECK_OK(jb_set_event_callback(park, NULL));
    pthread_create(&raiser, NULL, raise_one, NULL);
    while (!atomic_load(&parked))
        nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    CHECK(child_says_yes("the child of a parked call", CHILD_S, child_replaces, "ev_child_parked"),
          "the child of a parked call could not replace the callback and build");
    /* Now a replacement waits for the parked call too. */
    pthread_create(&replacer, NULL, replace, NULL);
    nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    CHECK(!atomic_load(&replaced), "the replacement did not wait for the call in progress");
    CHECK(child_says_yes("the child of a waiting replacement", CHILD_S, child_replaces,
                         "ev_child_waiting"),
          "the child of a waiting replacement could not replace the callback and build");
    atomic_store(&release_parked, 1);
    pthread_join(raiser, NULL);
    pthread_join(replacer, NULL);
    CHECK(atomic_load(&replaced), "replaced");
}

/* A child's events carry the child's thread id, not the id its forking thread had in the
 * parent (which an earlier event there may have cached). */
static bool child_events_carry_its_thread_id(void *arg)
{
    (void)arg;
    recorder_clear();
    raise_one(NULL);
    return rec.count == 1 && rec.events[0].e.thread_id == (uint64_t)gettid();
}

static void forked_thread_id(void)
{
    CHECK_OK(jb_set_event_callback(record, &rec));
    recorder_clear();
    raise_one(NULL);
    CHECK(rec.count == 1 && rec.events[0].e.thread_id == (uint64_t)gettid(), "this thread's id");
    CHECK(child_says_yes("a child's thread id", CHILD_S, child_events_carry_its_thread_id, NULL),
          "the child's event carried another thread's id (the parent's)");
    CHECK_OK(jb_set_event_callback(NULL, NULL));
}

/* ---- many threads: replaced user_data never used, no torn event ---- */

#define RAISERS 8
#define RAISES_EACH 3000

typedef struct sink {
    atomic_int live;
    atomic_long calls, stale, torn;
} sink;

static void check_event(void *user_data, const jb_cache_event *e)
{
    sink *s = user_data;
    atomic_fetch_add(&s->calls, 1);
    /* name "t<thread>-<i>", key "k<thread>-<i>", tag "tag<thread>-<i>", duration thread*1e6+i */
    unsigned t1, i1, t2, i2, t3, i3;
    bool whole = sscanf(e->name, "t%u-%u", &t1, &i1) == 2 && sscanf(e->key, "k%u-%u", &t2, &i2) == 2 &&
                 sscanf(e->tag, "tag%u-%u", &t3, &i3) == 2 && t1 == t2 && t2 == t3 && i1 == i2 &&
                 i2 == i3 && e->duration_ns == (uint64_t)t1 * 1000000 + i1 &&
                 e->thread_id == (uint64_t)gettid() && e->struct_size == sizeof *e;
    if (!whole)
        atomic_fetch_add(&s->torn, 1);
    if (atomic_load(&s->calls) % 64 == 0)
        nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    if (!atomic_load(&s->live))
        atomic_fetch_add(&s->stale, 1);
}

static atomic_int raisers_done;

static void *raiser(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < RAISES_EACH; i++) {
        char name[32], key[32], tag[32];
        snprintf(name, sizeof name, "t%u-%u", t, i);
        snprintf(key, sizeof key, "k%u-%u", t, i);
        snprintf(tag, sizeof tag, "tag%u-%u", t, i);
        jb_set_thread_tag(tag);
        jb__event_build_begin(NULL, name, key);
        jb__event_raise(JB_CACHE_EVENT_BUILD_END, (uint64_t)t * 1000000 + i, JB_OK, NULL);
        jb__event_build_end();
    }
    atomic_fetch_add(&raisers_done, 1);
    return NULL;
}

static void many_threads_while_replacing(void)
{
    static sink sinks[2];
    pthread_t threads[RAISERS];
    atomic_store(&sinks[0].live, 1);
    CHECK_OK(jb_set_event_callback(check_event, &sinks[0]));
    for (uintptr_t t = 0; t < RAISERS; t++)
        pthread_create(&threads[t], NULL, raiser, (void *)t);
    int current = 0;
    long swaps = 0;
    for (; atomic_load(&raisers_done) < RAISERS || swaps < 100; swaps++) {
        int next = 1 - current;
        atomic_store(&sinks[next].live, 1);
        CHECK_OK(jb_set_event_callback(check_event, &sinks[next]));
        atomic_store(&sinks[current].live, 0); /* released: any call on it now is a bug */
        current = next;
    }
    for (int t = 0; t < RAISERS; t++)
        pthread_join(threads[t], NULL);
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    long calls = sinks[0].calls + sinks[1].calls;
    CHECK(calls == (long)RAISERS * RAISES_EACH, "%ld of %d events delivered", calls,
          RAISERS * RAISES_EACH);
    CHECK(sinks[0].stale + sinks[1].stale == 0, "%ld calls used a replaced user_data",
          sinks[0].stale + sinks[1].stale);
    CHECK(sinks[0].torn + sinks[1].torn == 0, "%ld torn events", sinks[0].torn + sinks[1].torn);
}

/* jb_exchange_event_callback gives back what it replaced, for its caller to free. */
static void exchange_gives_back_the_replaced(void)
{
    int a, b;
    jb_cache_event_fn old_fn = record;
    void *old_data = &a;
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    CHECK_OK(jb_exchange_event_callback(&old_fn, &old_data, record, &a));
    CHECK(old_fn == NULL && old_data == NULL, "none was installed");
    CHECK_OK(jb_exchange_event_callback(&old_fn, &old_data, check_event, &b));
    CHECK(old_fn == record && old_data == &a, "the first one is given back");
    CHECK_OK(jb_exchange_event_callback(NULL, NULL, NULL, NULL));
    CHECK_OK(jb_exchange_event_callback(&old_fn, NULL, NULL, NULL));
    CHECK(old_fn == NULL, "none after NULL");
    jb_log_fn old_log = NULL;
    CHECK_OK(jb_exchange_log_callback(&old_log, &old_data, NULL, &a));
    CHECK(old_log == NULL && old_data == NULL, "no log callback was installed");
}

static void thread_tags(void)
{
    char long_tag[JB_THREAD_TAG_MAX + 2];
    memset(long_tag, 'x', sizeof long_tag - 1);
    long_tag[sizeof long_tag - 1] = '\0';
    CHECK_OK(jb_set_thread_tag("kept"));
    CHECK(jb_set_thread_tag(long_tag) == JB_ERR_INVALID_ARGUMENT, "a tag too long is taken");
    CHECK(strcmp(jb_thread_tag(), "kept") == 0, "a refused tag changed it: %s", jb_thread_tag());
    long_tag[JB_THREAD_TAG_MAX] = '\0';
    CHECK_OK(jb_set_thread_tag(long_tag));
    CHECK(strlen(jb_thread_tag()) == JB_THREAD_TAG_MAX, "the longest tag");
    CHECK_OK(jb_set_thread_tag(""));
    CHECK(strcmp(jb_thread_tag(), "") == 0, "cleared");
    CHECK(jb_cache_event_kind_name(0) == NULL && jb_cache_event_kind_name(15) == NULL &&
              strcmp(jb_cache_event_kind_name(JB_CACHE_EVENT_SEAL_VIOLATION), "seal violation") == 0 &&
              strcmp(jb_cache_event_kind_name(JB_CACHE_EVENT_REMOTE_STORE), "remote store") == 0 &&
              strcmp(jb_cache_event_kind_name(JB_CACHE_EVENT_FARM_FAILED), "farm failed") == 0,
          "kind names");
}

int main(int argc, char **argv)
{
    alarm(getenv("JB_TEST_UNDER_VALGRIND") ? 1500 : 300); /* a deadlock fails, never hangs */
    jb_device *dev = test_device();
    if (!dev)
        return check_summary("test_events");
    if (argc == 3 && strcmp(argv[1], "disk-child") == 0) {
        salt = (unsigned)strtoul(argv[2], NULL, 10);
        return disk_child(dev);
    }
    salt = (unsigned)getpid() ^ (unsigned)time(NULL);
    default_stream_first(dev);
    thread_tags();
    events_of_a_build(dev);
    events_of_the_disk_cache(dev);
    event_of_a_failed_build(dev);
    callback_calls_the_library(dev);
    callback_forks(dev);
    fork_while_a_call_is_parked();
    forked_thread_id();
    exchange_gives_back_the_replaced();
    many_threads_while_replacing();
    return check_summary("test_events");
}
