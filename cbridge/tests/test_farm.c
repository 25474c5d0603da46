/*
 * The compile farm: a manifest whose kernels carry source records (written by a process of
 * its own, their entries then removed) is built by worker processes (this program, exec'd from
 * argv[0] with JB_BUILD_WORKER_ARG), then loaded: 0 compiles here, every launch exact. Workers
 * killed at a random point, killed after a build before its report, hung past the compile
 * timeout, or exiting silently cost their kernels one compile at first use here, nothing else;
 * a host ignoring SIGCHLD still gets its results; a setuid host, hostile records and bad
 * arguments are refused with clear errors. No worker is left unreaped, no descriptor open.
 */
#include "deadline.h"
#include "helpers.h"
#include "jitbridge_sys.h"
#include "../src/kernels/kernels.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char dir[] = "/tmp/jb_farm_XXXXXX";
static char cache[256], self[4096];
static bool ignore_sigchld; /* farm_set's farm runs with SIGCHLD ignored, as some hosts do */

static void kernel_name(char *out, size_t len, const char *set, int i)
{
    snprintf(out, len, "farm_%s_%d", set, i);
}

static jb_custom_kernel *set_kernel(const char *set, int i)
{
    char name[64], body[128];
    kernel_name(name, sizeof name, set, i);
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %d.0f;", i);
    return f32_kernel(name, body);
}

/* In a process of its own: launches the set's kernels, writing their manifest lines. */
static int make_set(const char *set, int count)
{
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    for (int i = 0; i < count; i++) {
        jb_custom_kernel *k = set_kernel(set, i);
        CHECK_OK(launch_on_four_ones(k, dev));
        jb_custom_kernel_free(k);
    }
    return check_summary("test_farm (making a manifest)");
}

/* Removes every cache entry (*.jbc), keeping the source records. */
static void remove_entries(void)
{
    DIR *d = opendir(cache);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".jbc") == 0) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
}

/* Runs this program with `args` and `variables` added to the environment; whether it passed. */
static bool run_self(char **args, const char *const *variables)
{
    size_t vars = 0, added = 0;
    while (environ[vars])
        vars++;
    while (variables[added])
        added++;
    char **envp = calloc(vars + added + 1, sizeof *envp);
    memcpy(envp, environ, vars * sizeof *envp);
    memcpy(envp + vars, variables, added * sizeof *envp);
    pid_t pid = -1;
    bool spawned = posix_spawn(&pid, self, NULL, NULL, args, envp) == 0;
    free(envp);
    int status = 0;
    return spawned && pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

/* The manifest of `count` kernels of `set`, their records kept, their entries removed. */
static void manifest_of(const char *set, int count, char *manifest, size_t len)
{
    snprintf(manifest, len, "%s/%s.manifest", dir, set);
    char n[16], variable[600];
    snprintf(n, sizeof n, "%d", count);
    snprintf(variable, sizeof variable, "JITBRIDGE_MANIFEST=%s", manifest);
    char *args[] = {self, "make-set", (char *)set, n, NULL};
    const char *variables[] = {variable, NULL};
    CHECK(run_self(args, variables), "making the manifest of %s", set);
    remove_entries();
}

static int open_descriptors(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static uint64_t builds(void)
{
    jb_counters c;
    CHECK_OK(jb_counters_get(&c, sizeof c));
    return c.builds;
}

/* No child of ours left to reap, no temporary left in the cache folder. */
static void nothing_left(const char *what)
{
    int status;
    pid_t left = waitpid(-1, &status, WNOHANG);
    CHECK(left < 0 && errno == ECHILD, "%s: a child is left (waitpid gives %d)", what, (int)left);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/tmp", cache);
    DIR *d = opendir(tmp);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        files += e->d_name[0] != '.';
    if (d)
        closedir(d);
    CHECK(files == 0, "%s: %d temporaries left in the cache folder", what, files);
}

/* Launches the set's kernels here: each exact; the compiles it took. */
static uint64_t launch_set(jb_device *dev, const char *set, int count)
{
    uint64_t before = builds();
    for (int i = 0; i < count; i++) {
        jb_custom_kernel *k = set_kernel(set, i);
        jb_array *in = f32_filled(dev, 4, 1.0f), *out = NULL;
        CHECK_OK(f32_launch(&out, k, &in, 1, 4));
        CHECK(f32_all_equal(out, 4, 1.0f + (float)i), "%s kernel %d is wrong", set, i);
        jb_array_free(out);
        jb_array_free(in);
        jb_custom_kernel_free(k);
    }
    return builds() - before;
}

static atomic_ulong farm_events[2]; /* FARM_BUILT, FARM_FAILED events seen */

static void count_farm_event(void *user, const jb_cache_event *e)
{
    (void)user;
    if (e->kind == JB_CACHE_EVENT_FARM_BUILT || e->kind == JB_CACHE_EVENT_FARM_FAILED)
        atomic_fetch_add(&farm_events[e->kind == JB_CACHE_EVENT_FARM_FAILED], 1);
    if (e->kind == JB_CACHE_EVENT_FARM_BUILT && strlen(e->content_key) == 0)
        atomic_fetch_add(&farm_events[1], 1000); /* an event that names no entry is wrong */
}

static pid_t holder = -1; /* fork_holder's child */

/* A host thread's fork without exec: the child keeps every descriptor open for 3 s. */
static void fork_holder(void)
{
    holder = fork();
    if (holder == 0) {
        struct timespec wait = {3, 0};
        nanosleep(&wait, NULL);
        _exit(0);
    }
}

static unsigned slow_factor(void)
{
    return getenv("JB_TEST_UNDER_VALGRIND") ? 5 : 1; /* bounds stretch under valgrind */
}

/* Builds the set with `jobs` workers (JITBRIDGE_TEST_FARM_FAULT=`fault` in them, or none) and
 * launches it: the result, and the compiles its launches took in *late. */
static jb_prewarm_build_result farm_set(jb_device *dev, const char *set, int count,
                                        unsigned jobs, const char *fault, uint64_t *late)
{
    char manifest[512];
    manifest_of(set, count, manifest, sizeof manifest);
    if (fault)
        setenv("JITBRIDGE_TEST_FARM_FAULT", fault, 1);
    int fds = open_descriptors();
    uint64_t before = builds();
    jb_prewarm_build_result r;
    if (ignore_sigchld)
        signal(SIGCHLD, SIG_IGN);
    atomic_store(&farm_events[0], 0);
    atomic_store(&farm_events[1], 0);
    CHECK_OK(jb_set_event_callback(count_farm_event, NULL));
    CHECK_OK(jb_prewarm_build(&r, dev, manifest, jobs, self));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    signal(SIGCHLD, SIG_DFL);
    CHECK(atomic_load(&farm_events[0]) == r.built && atomic_load(&farm_events[1]) == r.failed,
          "%s: events of %lu built, %lu failed; built %llu, failed %llu", set,
          atomic_load(&farm_events[0]), atomic_load(&farm_events[1]),
          (unsigned long long)r.built, (unsigned long long)r.failed);
    CHECK(builds() == before, "%s: the farm compiled %llu in this process", set,
          (unsigned long long)(builds() - before));
    unsetenv("JITBRIDGE_TEST_FARM_FAULT");
    CHECK(open_descriptors() == fds, "%s: %d descriptors open, %d before", set,
          open_descriptors(), fds);
    nothing_left(set);
    *late = launch_set(dev, set, count);
    return r;
}

static void expect_refused(jb_device *dev, const char *manifest, const char *what)
{
    jb_prewarm_build_result r;
    CHECK_OK(jb_prewarm_build(&r, dev, manifest, 2, self));
    CHECK(r.refused == 1 && r.workers == 0 && r.built == 0,
          "%s: refused %llu, workers %llu, built %llu", what, (unsigned long long)r.refused,
          (unsigned long long)r.workers, (unsigned long long)r.built);
}

/* The record a manifest of one line names, rewritten by `edit` into a hostile one under its
 * own hash (or `name` when given), in a manifest of its own. */
static void hostile(jb_device *dev, const char *good_manifest, const char *what,
                    const char *from, const char *to, bool keep_name, size_t pad)
{
    char line[4096] = "", path[600], hex[65];
    FILE *f = fopen(good_manifest, "r");
    CHECK(f && fgets(line, sizeof line, f), "read %s", good_manifest);
    if (f)
        fclose(f);
    char *field = strstr(line, "source=");
    CHECK(field, "no record in %s", line);
    if (!field)
        return;
    snprintf(path, sizeof path, "%s/sources/%.64s.jbs", cache, field + 7);
    static char text[(4 << 20) + 4096];
    f = fopen(path, "rb");
    size_t size = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[size] = '\0';
    static char edited[sizeof text];
    char *at = strstr(text, from);
    CHECK(at, "%s: no '%s' in the record", what, from);
    if (!at)
        return;
    size_t len = (size_t)snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, to,
                                  at + strlen(from));
    memset(edited + len, ' ', pad);
    len += pad;
    unsigned char digest[JB_SHA256_BYTES];
    jb__sha256(edited, len, digest);
    jb__hex(digest, JB_SHA256_BYTES, hex);
    if (keep_name)
        memcpy(hex, field + 7, 64); /* other content under the good name: the hash is wrong */
    char bad_path[600], bad_manifest[600];
    snprintf(bad_path, sizeof bad_path, "%s/sources/%s.jbs", cache, hex);
    char saved[sizeof path + 8];
    snprintf(saved, sizeof saved, "%s.saved", path);
    if (keep_name)
        rename(path, saved);
    f = fopen(bad_path, "wb");
    CHECK(f && fwrite(edited, 1, len, f) == len, "write %s", bad_path);
    if (f)
        fclose(f);
    chmod(bad_path, 0600);
    memcpy(field + 7, hex, 64);
    snprintf(bad_manifest, sizeof bad_manifest, "%s/hostile.manifest", dir);
    f = fopen(bad_manifest, "w");
    fputs(line, f);
    fclose(f);
    uint64_t before = builds();
    expect_refused(dev, bad_manifest, what);
    CHECK(builds() == before, "%s: compiled here", what);
    unlink(bad_path);
    if (keep_name)
        rename(saved, path);
}

/* In a process of its own, in a cache folder of its own, with keys of another library ABI (as
 * another compiler or architecture would make): the set launched and exported into `bundle`,
 * with its records or without. */
static int make_bundle(const char *set, int count, const char *bundle, bool with_sources)
{
    jb__test_set_key_abi(jb_abi_version() + 1);
    CHECK(make_set(set, count) == 0, "launching %s", set);
    uint64_t exported = 0, skipped = 0, records = 0;
    const char *manifest = getenv("JITBRIDGE_MANIFEST");
    if (with_sources)
        CHECK_OK(jb_disk_cache_export_sources(&exported, &skipped, &records, bundle, manifest));
    else
        CHECK_OK(jb_disk_cache_export(&exported, &skipped, bundle, manifest));
    CHECK(exported == (uint64_t)count && records == (with_sources ? (uint64_t)count : 0),
          "%s: exported %llu, records %llu", bundle, (unsigned long long)exported,
          (unsigned long long)records);
    return check_summary("test_farm (making a bundle)");
}

/* The bundle of `count` kernels of `set` made elsewhere (make_bundle), at `bundle`. */
static void bundle_of(const char *set, int count, bool with_sources, char *bundle, size_t len)
{
    snprintf(bundle, len, "%s/%s.jbb", dir, set);
    char n[16], manifest[600], cache_dir[600];
    snprintf(n, sizeof n, "%d", count);
    snprintf(manifest, sizeof manifest, "JITBRIDGE_MANIFEST=%s/%s.elsewhere", dir, set);
    snprintf(cache_dir, sizeof cache_dir, "JITBRIDGE_CACHE_DIR=%s/elsewhere", dir);
    char *args[] = {self, "make-bundle", (char *)set, n, bundle,
                    with_sources ? "with-sources" : "without", NULL};
    const char *variables[] = {manifest, cache_dir, NULL};
    CHECK(run_self(args, variables), "making the bundle of %s", set);
}

/* A bundle with records, made under other keys, is rebuilt here by the workers: every kernel
 * built there, loaded here, 0 compiles here. One without records builds nothing, and says so. */
static void farm_bundles(jb_device *dev)
{
    char bundle[512];
    bundle_of("bundled", 5, true, bundle, sizeof bundle);
    uint64_t before = builds();
    jb_prewarm_build_result r;
    CHECK_OK(jb_prewarm_build(&r, dev, bundle, 2, self));
    CHECK(builds() == before, "bundle: the farm compiled %llu here",
          (unsigned long long)(builds() - before));
    uint64_t late = launch_set(dev, "bundled", 5);
    CHECK(r.built == 5 && r.failed == 0 && r.refused == 0 && r.workers == 2 &&
              r.load.loaded == 5 && late == 0,
          "bundle: built %llu, failed %llu, refused %llu, workers %llu, loaded %llu, compiled "
          "at launch %llu",
          (unsigned long long)r.built, (unsigned long long)r.failed,
          (unsigned long long)r.refused, (unsigned long long)r.workers,
          (unsigned long long)r.load.loaded, (unsigned long long)late);
    /* Again: every kernel present under this device's keys, no worker. */
    CHECK_OK(jb_prewarm_build(&r, dev, bundle, 2, self));
    CHECK(r.present == 5 && r.workers == 0 && r.built == 0, "bundle again: present %llu, "
          "workers %llu", (unsigned long long)r.present, (unsigned long long)r.workers);

    bundle_of("bare", 3, false, bundle, sizeof bundle);
    before = builds();
    CHECK_OK(jb_prewarm_build(&r, dev, bundle, 2, self));
    CHECK(r.without_source == 3 && r.built == 0 && r.workers == 0 && r.load.loaded == 0 &&
              builds() == before,
          "bundle without records: without a record %llu, built %llu, workers %llu",
          (unsigned long long)r.without_source, (unsigned long long)r.built,
          (unsigned long long)r.workers);
    nothing_left("bundles");
}

/* Opens the gate of the slow compiler after `ms`, from a thread of its own. */
static void *open_gate_later(void *ms)
{
    usleep((useconds_t)(uintptr_t)ms * 1000);
    char go[300];
    snprintf(go, sizeof go, "%s/go", dir);
    FILE *f = fopen(go, "w");
    if (f)
        fclose(f);
    return NULL;
}

static bool exists(const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* A build in the background: the call returns at once, its counters show the worker held at a
 * compiler's gate, and a launch of the kernel that worker builds waits for its lease and loads
 * what it stored: 0 compiles here. */
/* The compiler of this whole test (the process keeps the identity it found first): cc behind
 * a gate, `dir`/go, which a compile (with -o) waits for; it writes `dir`/started on its way. */
static void slow_compiler_install(void)
{
    char script[300], started[300], go[300];
    snprintf(script, sizeof script, "%s/slow-cc", dir);
    snprintf(started, sizeof started, "%s/started", dir);
    snprintf(go, sizeof go, "%s/go", dir);
    FILE *f = fopen(script, "w");
    CHECK(f, "write %s", script);
    if (!f)
        return;
    fprintf(f, "#!/bin/sh\ncase \" $* \" in *\" -o \"*)\n  : > '%s'\n"
               "  while [ ! -e '%s' ]; do sleep 0.02; done;;\nesac\nexec cc \"$@\"\n",
            started, go);
    fclose(f);
    chmod(script, 0755);
    setenv("CC", script, 1);
    open_gate_later((void *)(uintptr_t)0);
}

static void farm_background(jb_device *dev)
{
    char manifest[512], started[300], go[300];
    snprintf(started, sizeof started, "%s/started", dir);
    snprintf(go, sizeof go, "%s/go", dir);
    manifest_of("background", 2, manifest, sizeof manifest);
    unlink(go);
    unlink(started);

    int slow = getenv("JB_TEST_UNDER_VALGRIND") ? 5 : 1; /* bounds stretch under valgrind */
    uint64_t before = builds();
    jb_prewarm_build_job *job = NULL;
    uint64_t start = jb__now_ns();
    CHECK_OK(jb_prewarm_build_start(&job, dev, manifest, 1, self));
    CHECK((jb__now_ns() - start) / 1000000 < 2000u * slow, "start took %llu ms",
          (unsigned long long)((jb__now_ns() - start) / 1000000));
    jb_prewarm_build_progress p = {0};
    for (int i = 0; i < 2000 * slow && !exists("started"); i++)
        usleep(10000);
    CHECK(exists("started"), "no worker reached the compiler");
    CHECK_OK(jb_prewarm_build_poll(job, &p));
    CHECK(p.total == 2 && p.built == 0 && p.pending == 2 && !p.done,
          "at the gate: total %llu, built %llu, pending %llu, done %llu",
          (unsigned long long)p.total, (unsigned long long)p.built,
          (unsigned long long)p.pending, (unsigned long long)p.done);

    pthread_t opener;
    CHECK(pthread_create(&opener, NULL, open_gate_later, (void *)(uintptr_t)300) == 0,
          "thread");
    start = jb__now_ns();
    uint64_t late = launch_set(dev, "background", 1); /* the kernel the worker is on */
    uint64_t waited_ms = (jb__now_ns() - start) / 1000000;
    pthread_join(opener, NULL);
    CHECK(late == 0 && waited_ms >= 250,
          "a launch during the build: %llu compiles here, waited %llu ms (its lease: >= 250)",
          (unsigned long long)late, (unsigned long long)waited_ms);

    for (int i = 0; i < 2000 * slow && jb_prewarm_build_poll(job, &p) == JB_OK && !p.done; i++)
        usleep(10000);
    CHECK(p.done && p.built == 2 && p.failed == 0 && p.pending == 0,
          "done: %llu, built %llu, failed %llu", (unsigned long long)p.done,
          (unsigned long long)p.built, (unsigned long long)p.failed);
    jb_prewarm_build_result r;
    CHECK_OK(jb_prewarm_build_wait(job, &r));
    CHECK(r.built == 2 && r.load.loaded + r.load.present == 2 && builds() == before &&
              launch_set(dev, "background", 2) == 0,
          "background: built %llu, loaded %llu, present %llu, compiled here %llu",
          (unsigned long long)r.built, (unsigned long long)r.load.loaded,
          (unsigned long long)r.load.present, (unsigned long long)(builds() - before));

    /* Refusals come at once; a job detached after its end frees itself. */
    CHECK(jb_prewarm_build_start(&job, dev, manifest, 0, self) == JB_ERR_INVALID_ARGUMENT &&
              job == NULL,
          "jobs 0 started a build");
    CHECK_OK(jb_prewarm_build_start(&job, dev, manifest, 1, self));
    for (int i = 0; i < 2000 * slow && jb_prewarm_build_poll(job, &p) == JB_OK && !p.done; i++)
        usleep(10000);
    jb_prewarm_build_detach(job);
    nothing_left("background");
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], JB_BUILD_WORKER_ARG) == 0)
        return jb_prewarm_build_worker_main(argc, argv);
    if (argc == 4 && strcmp(argv[1], "make-set") == 0)
        return make_set(argv[2], atoi(argv[3]));
    if (argc == 6 && strcmp(argv[1], "make-bundle") == 0)
        return make_bundle(argv[2], atoi(argv[3]), argv[4], strcmp(argv[5], "with-sources") == 0);
    /* Workers are this program: its path made absolute (the farm never searches PATH). */
    CHECK(realpath(argv[0], self), "realpath %s", argv[0]);
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    unsetenv("JITBRIDGE_MANIFEST");
    unsetenv("JITBRIDGE_DISK_CACHE");
    unsetenv("JITBRIDGE_CACHE_BUNDLE");
    unsetenv("JITBRIDGE_REMOTE_CACHE");
    unsetenv("JITBRIDGE_BUILD_WORKER");
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "20000", 1);
    slow_compiler_install();
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    uint64_t late = 0;
    /* The library's own descriptors (the cache folder, its leases) opened before they are counted. */
    launch_set(dev, "warm", 1);

    /* Six kernels, two workers: all built there, loaded here, 0 compiles here. */
    jb_prewarm_build_result r = farm_set(dev, "plain", 6, 2, NULL, &late);
    CHECK(r.built == 6 && r.failed == 0 && r.workers == 2 && r.load.loaded == 6 && late == 0,
          "plain: built %llu, failed %llu, workers %llu, loaded %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)r.failed,
          (unsigned long long)r.workers, (unsigned long long)r.load.loaded,
          (unsigned long long)late);
    farm_bundles(dev);
    /* Again: every kernel present, no worker. */
    char manifest[512];
    snprintf(manifest, sizeof manifest, "%s/plain.manifest", dir);
    CHECK_OK(jb_prewarm_build(&r, dev, manifest, 2, self));
    CHECK(r.present == 6 && r.workers == 0, "again: present %llu, workers %llu",
          (unsigned long long)r.present, (unsigned long long)r.workers);

    /* Workers killed (at a random kernel), killed after a build before its report, exiting
     * without a report: each kernel not reported costs one compile at its launch, or none
     * when its entry was stored; nothing is lost. */
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int point = rand() % 2;
    printf("test_farm: workers fail at their kernel %d\n", point);
    fflush(stdout); /* before any child: a copy of the buffer must not reach its output */
    const char *faults[] = {"kill", "built", "quiet"};
    for (int i = 0; i < 3; i++) {
        char fault[32], set[32];
        snprintf(fault, sizeof fault, "%s:%d", faults[i], point);
        snprintf(set, sizeof set, "%s%d", faults[i], point);
        r = farm_set(dev, set, 4, 2, fault, &late);
        uint64_t lost = (uint64_t)(2 * (2 - point)); /* two workers of two kernels each */
        uint64_t stored = strcmp(faults[i], "built") == 0 ? 2 : 0;
        CHECK(r.failed == lost && r.built == 4 - lost && r.load.loaded == 4 - lost + stored &&
                  late == lost - stored,
              "%s: failed %llu, built %llu, loaded %llu, compiled at launch %llu", fault,
              (unsigned long long)r.failed, (unsigned long long)r.built,
              (unsigned long long)r.load.loaded, (unsigned long long)late);
    }
    /* Workers ended at a random moment (SIGALRM's default action): in a compile, a store, a
     * report. Every kernel is loaded or compiled at its launch, every output exact. */
    for (int round = 0; round < 3; round++) {
        char fault[32], set[32];
        snprintf(fault, sizeof fault, "after:%d", rand() % 400);
        snprintf(set, sizeof set, "random%d", round);
        printf("test_farm: workers end %s ms after their start\n", fault + 6);
        fflush(stdout);
        r = farm_set(dev, set, 4, 2, fault, &late);
        CHECK(r.built + r.failed == 4 && r.load.loaded + late == 4 && late <= r.failed,
              "%s: built %llu, failed %llu, loaded %llu, compiled at launch %llu", fault,
              (unsigned long long)r.built, (unsigned long long)r.failed,
              (unsigned long long)r.load.loaded, (unsigned long long)late);
    }
    /* Malformed reports build nothing. */
    r = farm_set(dev, "lie", 2, 1, "lie:0", &late);
    CHECK(r.built == 0 && r.failed == 2 && late == 2,
          "malformed reports: built %llu, failed %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)r.failed, (unsigned long long)late);
    /* A worker that hangs is killed past the compile timeout. */
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "3000", 1);
    uint64_t start = jb__now_ns();
    r = farm_set(dev, "hang", 2, 1, "hang:1", &late);
    uint64_t took_ms = (jb__now_ns() - start) / 1000000;
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "20000", 1);
    CHECK(r.built == 1 && r.failed == 1 && late == 1 && took_ms < 20000,
          "hang: built %llu, failed %llu, compiled at launch %llu, %llu ms",
          (unsigned long long)r.built, (unsigned long long)r.failed, (unsigned long long)late,
          (unsigned long long)took_ms);

    /* A kernel without pidfds: workers signalled and reaped by their pids, a hang killed. */
    jb__test_set_farm_no_pidfd(true);
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "3000", 1);
    r = farm_set(dev, "no_pidfd", 2, 1, "hang:1", &late);
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "20000", 1);
    jb__test_set_farm_no_pidfd(false);
    CHECK(r.built == 1 && r.failed == 1 && late == 1,
          "without pidfds: built %llu, failed %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)r.failed, (unsigned long long)late);

    /* A host fork (no exec) holding a worker's pipe open for 3 s: the farm of one kernel ends
     * when its worker does, the worker is not taken for hung; with pidfds and without. */
    for (int no_pidfd = 0; no_pidfd < 2; no_pidfd++) {
        char set[32];
        snprintf(set, sizeof set, "forked%d", no_pidfd);
        manifest_of(set, 1, manifest, sizeof manifest);
        jb__test_set_farm_no_pidfd(no_pidfd);
        jb__test_set_farm_spawned(fork_holder);
        uint64_t begun = jb__now_ns();
        CHECK_OK(jb_prewarm_build(&r, dev, manifest, 1, self));
        took_ms = (jb__now_ns() - begun) / 1000000;
        jb__test_set_farm_spawned(NULL);
        jb__test_set_farm_no_pidfd(false);
        int holder_status = 0;
        CHECK(holder > 0 && waitpid(holder, &holder_status, 0) == holder, "%s: no holder", set);
        CHECK(r.built == 1 && took_ms < 2000u * slow_factor(), "%s: built %llu in %llu ms", set,
              (unsigned long long)r.built, (unsigned long long)took_ms);
        nothing_left(set);
        CHECK(launch_set(dev, set, 1) == 0, "%s: compiled at launch", set);
    }

    /* Without pidfds, a worker that closes its stdout and hangs: killed after the exit wait
     * (2 s), reaped, not waited for without end. */
    jb__test_set_farm_no_pidfd(true);
    deadline muted;
    deadline_start(&muted, 30, "the farm of a worker that closed its stdout and hangs");
    uint64_t mute_start = jb__now_ns();
    r = farm_set(dev, "mute", 1, 1, "mute:0", &late);
    took_ms = (jb__now_ns() - mute_start) / 1000000;
    deadline_end(&muted);
    jb__test_set_farm_no_pidfd(false);
    CHECK(r.built == 0 && r.failed == 1 && late == 1 && took_ms < 4000u * slow_factor(),
          "mute: built %llu, failed %llu, compiled at launch %llu, %llu ms",
          (unsigned long long)r.built, (unsigned long long)r.failed, (unsigned long long)late,
          (unsigned long long)took_ms);

    /* A host that ignores SIGCHLD: its children are reaped by the kernel, results still come. */
    ignore_sigchld = true;
    r = farm_set(dev, "ignored", 3, 2, NULL, &late);
    ignore_sigchld = false;
    CHECK(r.built == 3 && r.failed == 0 && late == 0,
          "SIGCHLD ignored: built %llu, failed %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)r.failed, (unsigned long long)late);

    /* A setuid host refuses the farm before it reads anything. */
    manifest_of("secure", 1, manifest, sizeof manifest);
    jb__test_set_farm_secure(true);
    jb_status status = jb_prewarm_build(&r, dev, manifest, 2, self);
    jb__test_set_farm_secure(false);
    CHECK(status == JB_ERR_UNSUPPORTED && strstr(jb_last_error_message(), "setuid") &&
              r.workers == 0,
          "setuid: status %d, '%s'", status, jb_last_error_message());

    /* A process sealed to refuse starts no compiler, in workers neither. */
    CHECK_OK(jb_seal(JB_SEAL_ERROR));
    status = jb_prewarm_build(&r, dev, manifest, 2, self);
    CHECK_OK(jb_seal(JB_SEAL_OFF));
    CHECK(status == JB_ERR_SEALED && r.workers == 0, "sealed: status %d, '%s'", status,
          jb_last_error_message());

    /* Bad arguments. */
    struct {
        unsigned jobs;
        const char *path, *worker;
        jb_status want;
        const char *says;
    } bad[] = {
        {0, manifest, self, JB_ERR_INVALID_ARGUMENT, "jobs must be 1 to"},
        {JB_PREWARM_BUILD_MAX_JOBS + 1, manifest, self, JB_ERR_INVALID_ARGUMENT, "jobs must"},
        {2, NULL, self, JB_ERR_INVALID_ARGUMENT, "path is NULL"},
        {2, manifest, "test_farm", JB_ERR_INVALID_ARGUMENT, "must be an absolute path"},
        {2, manifest, "build-hooks/test_farm", JB_ERR_INVALID_ARGUMENT, "absolute path"},
        {2, manifest, NULL, JB_ERR_INVALID_ARGUMENT, "JITBRIDGE_BUILD_WORKER"},
        {2, manifest, "/nonexistent/worker", JB_ERR_SYSTEM, "cannot start"},
        {2, "/nonexistent/manifest", self, JB_ERR_SYSTEM, "/nonexistent/manifest"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        status = jb_prewarm_build(&r, dev, bad[i].path, bad[i].jobs, bad[i].worker);
        CHECK(status == bad[i].want && strstr(jb_last_error_message(), bad[i].says),
              "bad argument %zu: status %d, '%s'", i, status, jb_last_error_message());
    }
    CHECK(jb_prewarm_build(NULL, dev, manifest, 2, self) == JB_ERR_INVALID_ARGUMENT, "NULL out");
    nothing_left("bad arguments");

    farm_background(dev);

    /* Hostile records never reach a compiler, nor a worker. */
    hostile(dev, manifest, "another hash", "source ", "source ", true, 1);
    hostile(dev, manifest, "too large", "source ", "source ", false,
            JB_SOURCE_RECORD_MAX_BYTES);
    hostile(dev, manifest, "a bad identifier", "entry farm_secure_0\n", "entry bad-name\n",
            false, 0);
    hostile(dev, manifest, "a refused option", "flags 0\n",
            "flags 0\noption -fplugin=/tmp/evil.so\n", false, 0);

    char command[512];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK(system(command) == 0, "rm -rf %s", dir);
    return check_summary("test_farm");
}
