/*
 * The compile farm against hostile hosts and workers. The worker program is this test (argv[0],
 * absolute), which plays the real worker or an attacker chosen by JB_ATTACK:
 *   "inspect": writes what it inherited (descriptors at 3 and above, JITBRIDGE_MANIFEST) to
 *              the file JB_ATTACK_FILE, then builds as the real worker;
 *   "forge":   builds nothing and reports every kernel built ("ok <i>");
 *   "flood":   writes 8 MiB of lines that are no report, then builds as the real worker;
 *   "skip":    reports its second kernel built, out of order, and exits building nothing;
 *   "repeat":  repeats "failed 0 ..." without end (each line must not buy it more time);
 *   "moved":   the real worker, the host's JITBRIDGE_CACHE_DIR changed after its folder was
 *              chosen (the workers must store where the host reads).
 * Each farm: no child left, no descriptor leaked, and the launches after it exact, whatever
 * the worker claimed (a forged report loads nothing: every kernel compiles at its launch).
 * A host whose SIGCHLD handler reaps every child (waitpid(-1)) still gets its workers' reports.
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"
#include "redis_server.h" /* remove_tree */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dir[] = "/tmp/jb_farm_attacks_XXXXXX";
static char self[4096], inherited[512];

static jb_custom_kernel *attack_kernel(const char *set, int i)
{
    char name[64], body[128];
    snprintf(name, sizeof name, "farm_attack_%s_%d", set, i);
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %d.0f;", i);
    return f32_kernel(name, body);
}

/* Launches the set here: each output exact; the compiles it took. */
static uint64_t launch_set(jb_device *dev, const char *set, int count)
{
    jb_counters before, after;
    CHECK_OK(jb_counters_get(&before, sizeof before));
    for (int i = 0; i < count; i++) {
        jb_custom_kernel *k = attack_kernel(set, i);
        jb_array *in = f32_filled(dev, 4, 1.0f), *out = NULL;
        CHECK_OK(f32_launch(&out, k, &in, 1, 4));
        CHECK(f32_all_equal(out, 4, 1.0f + (float)i), "%s kernel %d is wrong", set, i);
        jb_array_free(out);
        jb_array_free(in);
        jb_custom_kernel_free(k);
    }
    CHECK_OK(jb_counters_get(&after, sizeof after));
    return after.builds - before.builds;
}

/* A manifest of the set made by a child process (its records kept), the entries then removed. */
static void make_manifest(const char *set, int count, char *manifest, size_t len)
{
    snprintf(manifest, len, "%s/%s.manifest", dir, set);
    char variable[600], n[16], cache[600];
    snprintf(variable, sizeof variable, "JITBRIDGE_MANIFEST=%s", manifest);
    snprintf(n, sizeof n, "%d", count);
    size_t vars = 0;
    while (environ[vars])
        vars++;
    char **envp = calloc(vars + 2, sizeof *envp);
    memcpy(envp, environ, vars * sizeof *envp);
    envp[vars] = variable;
    char *args[] = {self, "make-set", (char *)set, n, NULL};
    pid_t pid = -1;
    int status = 0;
    CHECK(posix_spawn(&pid, self, NULL, NULL, args, envp) == 0, "spawn %s", self);
    free(envp);
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "making the manifest of %s", set);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    DIR *d = opendir(cache);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".jbc") == 0) {
            char path[900];
            snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
}

static int count_descriptors(int *highest)
{
    int n = 0;
    *highest = -1;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        n++;
        *highest = atoi(e->d_name) > *highest ? atoi(e->d_name) : *highest;
    }
    if (d)
        closedir(d);
    return n;
}

/* ---- the worker ---- */

static int worker(int argc, char **argv)
{
    const char *attack = getenv("JB_ATTACK");
    if (attack && strcmp(attack, "inspect") == 0) {
        int highest, n = count_descriptors(&highest);
        FILE *f = fopen(getenv("JB_ATTACK_FILE"), "a");
        if (f) {
            fprintf(f, "descriptors %d highest %d manifest %s\n", n, highest,
                    getenv("JITBRIDGE_MANIFEST") ? "set" : "unset");
            fclose(f);
        }
    } else if (attack && strcmp(attack, "forge") == 0) {
        for (int i = 3; i < argc; i++)
            printf("ok %d\n", i - 3);
        return 0;
    } else if (attack && strcmp(attack, "skip") == 0) {
        printf("ok 1\n");
        return 0;
    } else if (attack && strcmp(attack, "repeat") == 0) {
        for (;;) /* ends by SIGPIPE or SIGKILL */
            if (printf("failed 0 again\n") < 0 || fflush(stdout) != 0)
                return 1;
    } else if (attack && strcmp(attack, "flood") == 0) {
        static char junk[1 << 16];
        memset(junk, 'x', sizeof junk);
        for (size_t i = 0; i < sizeof junk; i += 100)
            junk[i] = '\n';
        for (int i = 0; i < 128; i++)
            if (fwrite(junk, 1, sizeof junk, stdout) != sizeof junk)
                return 1;
        putchar('\n'); /* the junk's last line ends before the reports start */
        fflush(stdout);
    }
    return jb_prewarm_build_worker_main(argc, argv);
}

static int make_set(const char *set, int count)
{
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    for (int i = 0; i < count; i++) {
        jb_custom_kernel *k = attack_kernel(set, i);
        CHECK_OK(launch_on_four_ones(k, dev));
        jb_custom_kernel_free(k);
    }
    return check_summary("test_farm_attacks (making a manifest)");
}

/* ---- the host ---- */

static void reap_all(int sig)
{
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

/* Farms `count` kernels of `set` with the worker playing `attack`: its result, the compiles the
 * launches after it took in *late. */
static jb_prewarm_build_result farm(jb_device *dev, const char *set, int count,
                                    const char *attack, uint64_t *late)
{
    char manifest[512];
    make_manifest(set, count, manifest, sizeof manifest);
    setenv("JB_ATTACK", attack, 1);
    if (strcmp(attack, "inspect") == 0) /* a host's manifest the workers must not write to */
        setenv("JITBRIDGE_MANIFEST", inherited, 1);
    char moved[600], cache[600];
    snprintf(moved, sizeof moved, "%s/moved", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    if (strcmp(attack, "moved") == 0)
        setenv("JITBRIDGE_CACHE_DIR", moved, 1);
    int highest, fds = count_descriptors(&highest);
    jb_prewarm_build_result r;
    CHECK_OK(jb_prewarm_build(&r, dev, manifest, 2, self));
    unsetenv("JB_ATTACK");
    unsetenv("JITBRIDGE_MANIFEST");
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    CHECK(count_descriptors(&highest) == fds, "%s: %d descriptors open, %d before", set,
          count_descriptors(&highest), fds);
    int status;
    pid_t left = waitpid(-1, &status, WNOHANG);
    CHECK(left < 0 && errno == ECHILD, "%s: a child is left (waitpid gives %d)", set, (int)left);
    *late = launch_set(dev, set, count);
    return r;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], JB_BUILD_WORKER_ARG) == 0)
        return worker(argc, argv);
    if (argc == 4 && strcmp(argv[1], "make-set") == 0)
        return make_set(argv[2], atoi(argv[3]));
    CHECK(realpath(argv[0], self), "realpath %s", argv[0]);
    CHECK(mkdtemp(dir), "mkdtemp");
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(inherited, sizeof inherited, "%s/inherited", dir);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    setenv("JB_ATTACK_FILE", inherited, 1);
    unsetenv("JITBRIDGE_MANIFEST");
    unsetenv("JITBRIDGE_DISK_CACHE");
    unsetenv("JITBRIDGE_CACHE_BUNDLE");
    unsetenv("JITBRIDGE_REMOTE_CACHE");
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "20000", 1);
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    launch_set(dev, "warm", 1); /* the library's own descriptors opened before counting */
    uint64_t late;

    /* A host descriptor without close-on-exec and a manifest variable: neither reaches a worker. */
    int leaked = open("/dev/null", O_RDONLY);
    CHECK(leaked >= 3, "open /dev/null");
    jb_prewarm_build_result r = farm(dev, "inspect", 2, "inspect", &late);
    close(leaked);
    CHECK(r.built == 2 && late == 0, "inspect: built %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)late);
    FILE *f = fopen(inherited, "r");
    char line[256];
    int workers = 0;
    while (f && fgets(line, sizeof line, f)) {
        workers++;
        CHECK(strcmp(line, "descriptors 3 highest 2 manifest unset\n") == 0,
              "a worker inherited more than stdin, stdout, stderr and its environment: %s", line);
    }
    if (f)
        fclose(f);
    CHECK(workers == 2, "inspect: %d workers wrote what they inherited", workers);

    /* Forged reports: counted as the worker's word, but nothing unbuilt loads; each kernel
     * compiles at its launch, outputs exact. */
    r = farm(dev, "forge", 3, "forge", &late);
    CHECK(r.load.loaded == 0 && late == 3, "forge: loaded %llu, compiled at launch %llu",
          (unsigned long long)r.load.loaded, (unsigned long long)late);

    /* 8 MiB of lines that are no report before the real ones: all built, none compiled here. */
    r = farm(dev, "flood", 3, "flood", &late);
    CHECK(r.built == 3 && late == 0, "flood: built %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)late);

    /* A report out of order (kernel 1 before kernel 0) counts for nothing. */
    r = farm(dev, "skip", 4, "skip", &late);
    CHECK(r.built == 0 && late == 4, "skip: built %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)late);

    /* A worker repeating one failure report is killed at the compile timeout (1 s), not kept. */
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "1000", 1);
    uint64_t slow = getenv("JB_TEST_UNDER_VALGRIND") ? 5 : 1, start = jb__now_ns();
    r = farm(dev, "repeat", 2, "repeat", &late);
    uint64_t took_ms = (jb__now_ns() - start) / 1000000;
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "20000", 1);
    CHECK(r.built == 0 && late == 2 && took_ms < 2500 * slow,
          "repeat: built %llu, compiled at launch %llu, took %llu ms",
          (unsigned long long)r.built, (unsigned long long)late, (unsigned long long)took_ms);

    /* The variable changed after the host chose its folder: workers still store there. */
    r = farm(dev, "moved", 2, "moved", &late);
    CHECK(r.built == 2 && late == 0, "moved: built %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)late);

    /* A host whose SIGCHLD handler reaps every child: the reports still count. */
    struct sigaction sa = {0}, old;
    sa.sa_handler = reap_all;
    sigaction(SIGCHLD, &sa, &old);
    r = farm(dev, "reaper", 3, "none", &late);
    sigaction(SIGCHLD, &old, NULL);
    CHECK(r.built == 3 && late == 0, "reaper: built %llu, compiled at launch %llu",
          (unsigned long long)r.built, (unsigned long long)late);

    remove_tree(dir);
    return check_summary("test_farm_attacks");
}
