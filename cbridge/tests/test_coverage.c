/*
 * The coverage check (jb_cache_coverage): for each kernel of a manifest, once, in order, where a
 * launch would get it from (memory, the cache folder, a bundle) or that it would compile, or
 * that it is another device's; nothing compiled or loaded. Fresh processes (this program run
 * again) see the cache folder, a bundle, and stored code of another library ABI (a test hook),
 * which must count as a compile; sealed to refuse, the kernels found stored load and the others
 * are refused. Prewarm loads what the check finds stored and compiles nothing, not even what the
 * loader refuses (a test hook). Bad manifests are errors that leave the counts at 0.
 */
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

/* Test hooks (JB_TEST_HOOKS): keys made from now on name another library ABI; while non-zero,
 * the loader refuses every module with this status (JB_ERR_SYSTEM: for now, JB_ERR_LOAD: for
 * good). */
void jb__test_set_key_abi(int abi);
void jb__test_set_load_failure(int status);

#define KERNELS 3
#define MAX_SEEN 16

static const char *const names[KERNELS] = {"cov_a", "cov_b", "cov_c"};
static unsigned salt; /* the parent's, passed to its children: the same kernels */
static const char *self; /* argv[0]: /proc/self/exe would be valgrind's own under valgrind */

static jb_status launch(jb_device *dev, int i)
{
    char body[128];
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %u.%d;", salt, i);
    jb_custom_kernel *k = f32_kernel(names[i], body);
    jb_status status = launch_on_four_ones(k, dev);
    jb_custom_kernel_free(k);
    return status;
}

/* Sealed to refuse, the kernels the check found stored load, and only those: `want` says, per
 * kernel, whether its launch succeeds ('y') or is refused ('n'). */
static void sealed_launches(jb_device *dev, const char *want)
{
    CHECK_OK(jb_seal(JB_SEAL_ERROR));
    for (int i = 0; i < KERNELS; i++) {
        jb_status status = launch(dev, i);
        CHECK(want[i] == 'y' ? status == JB_OK : status == JB_ERR_SEALED,
              "sealed launch of %s: %s", names[i], jb_last_error_message());
    }
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(c.builds == 0, "%llu compiles while sealed", (unsigned long long)c.builds);
    CHECK_OK(jb_seal(JB_SEAL_OFF));
}

typedef struct seen {
    int count;
    jb_coverage_source source[MAX_SEEN];
    char module[MAX_SEEN][256], key[MAX_SEEN][65], why[MAX_SEEN][256];
} seen;

static void collect(void *user_data, const jb_coverage_kernel *k)
{
    seen *s = user_data;
    CHECK(k->struct_size == sizeof *k, "struct_size %zu", k->struct_size);
    if (s->count == MAX_SEEN)
        return;
    s->source[s->count] = k->source;
    snprintf(s->module[s->count], sizeof s->module[0], "%s", k->module);
    snprintf(s->key[s->count], sizeof s->key[0], "%s", k->key);
    snprintf(s->why[s->count], sizeof s->why[0], "%s", k->why);
    s->count++;
    /* The callback may call the library: it runs under no lock. */
    jb_coverage_result inner;
    CHECK(jb_cache_coverage(&inner, NULL, NULL, NULL, NULL) == JB_ERR_INVALID_ARGUMENT, "inner");
}

/* The sources seen, as "memory,disk,..." */
static const char *sources(const seen *s, char *out, size_t len)
{
    out[0] = '\0';
    for (int i = 0; i < s->count; i++)
        snprintf(out + strlen(out), len - strlen(out), "%s%s", i ? "," : "",
                 jb_coverage_source_name(s->source[i]));
    return out;
}

static uint64_t builds_and_misses(void)
{
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    return c.builds + c.build_failures + c.misses;
}

/* Checks one coverage run: the sources in order, and that it compiled and looked up nothing. */
static void expect(jb_device *dev, const char *manifest, const char *want, const char *why_of_a,
                   const char *why_of_c)
{
    seen s = {0};
    jb_coverage_result r;
    uint64_t before = builds_and_misses();
    CHECK_OK(jb_cache_coverage(&r, dev, manifest, collect, &s));
    char got[256];
    CHECK(strcmp(sources(&s, got, sizeof got), want) == 0, "sources %s, want %s", got, want);
    CHECK(r.memory + r.disk + r.bundle + r.compile + r.other == (uint64_t)s.count,
          "counts %lu %lu %lu %lu %lu for %d kernels", (unsigned long)r.memory,
          (unsigned long)r.disk, (unsigned long)r.bundle, (unsigned long)r.compile,
          (unsigned long)r.other, s.count);
    CHECK(builds_and_misses() == before, "the check built or looked up a module");
    if (s.count == 5) {
        CHECK(strstr(s.module[0], "cov_a") && strstr(s.module[1], "cov_b") &&
                  strstr(s.module[2], "cov_c") && strcmp(s.module[3], "cov_missing") == 0 &&
                  strcmp(s.module[4], "cov_gpu") == 0,
              "modules in the manifest's order, each once: %s %s %s %s %s", s.module[0],
              s.module[1], s.module[2], s.module[3], s.module[4]);
        CHECK(strstr(s.why[0], why_of_a) && (*why_of_a || !*s.why[0]),
              "why of cov_a: '%s', want '%s'", s.why[0], why_of_a);
        CHECK(strstr(s.why[2], why_of_c) && (*why_of_c || !*s.why[2]),
              "why of cov_c: '%s', want '%s'", s.why[2], why_of_c);
        CHECK(strstr(s.why[3], "in neither"), "why of a missing one: %s", s.why[3]);
        CHECK(strstr(s.why[4], "cuda sm_90"), "why of another device's: %s", s.why[4]);
    }
}

/* ---- a fresh process: this program run again ---- */

static pthread_mutex_t events_mutex = PTHREAD_MUTEX_INITIALIZER;
static char hit_names[1024];

static void on_event(void *user_data, const jb_cache_event *e)
{
    (void)user_data;
    pthread_mutex_lock(&events_mutex);
    snprintf(hit_names + strlen(hit_names), sizeof hit_names - strlen(hit_names), "%s:%.6s ",
             jb_cache_event_kind_name(e->kind), e->name);
    pthread_mutex_unlock(&events_mutex);
}

/* Prewarm loads what the check found stored, and each load is a hit event. */
static void prewarm_raises_hits(jb_device *dev, const char *manifest, const char *kind)
{
    CHECK_OK(jb_set_event_callback(on_event, NULL));
    jb_prewarm_result r;
    CHECK_OK(jb_prewarm(&r, dev, manifest));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    char want[256];
    snprintf(want, sizeof want, "%s:cov_a_ %s:cov_b_ ", kind, kind);
    CHECK(strncmp(hit_names, want, strlen(want)) == 0, "prewarm's events: '%s', want '%s...'",
          hit_names, want);
}

/* The loader refuses the stored code of every kernel prewarm finds (for now or for good):
 * prewarm compiles none of them, counts each as failed, and leaves each to the next launch,
 * which, the loader working again, loads its entry from the cache folder. */
static void prewarm_refused(jb_device *dev, const char *manifest, jb_status refusal)
{
    CHECK_OK(jb_set_event_callback(on_event, NULL));
    jb_counters_reset();
    jb__test_set_load_failure(refusal);
    jb_prewarm_result r;
    CHECK_OK(jb_prewarm(&r, dev, manifest));
    jb__test_set_load_failure(JB_OK);
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    /* cov_a (twice: its line again under another name) and cov_b are in the folder; cov_c's
     * entry was removed, cov_missing is stored nowhere, cov_gpu is another device's. */
    CHECK(r.loaded == 0 && r.present == 0 && r.failed == 3 && r.missing == 2 && r.other == 1,
          "prewarm of refused code: %llu loaded, %llu present, %llu failed (want 3), %llu "
          "missing, %llu other",
          (unsigned long long)r.loaded, (unsigned long long)r.present,
          (unsigned long long)r.failed, (unsigned long long)r.missing,
          (unsigned long long)r.other);
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    /* A refusal counts as a failed build (the builder failed); a compile would raise its start. */
    CHECK(c.builds == 0 && !strstr(hit_names, "build start"),
          "prewarm compiled code the loader refused: %llu builds, events '%s'",
          (unsigned long long)c.builds, hit_names);
    jb_counters_reset();
    CHECK_OK(launch(dev, 0));
    jb_counters_get(&c, sizeof c);
    CHECK(c.disk_hits == 1 && c.builds == 0,
          "the next launch after prewarm's refusal: %llu disk hits (want 1), %llu builds",
          (unsigned long long)c.disk_hits, (unsigned long long)c.builds);
}

static int child(jb_device *dev, const char *mode, const char *manifest, const char *bundle)
{
    if (strcmp(mode, "disk") == 0) {
        expect(dev, manifest, "disk,disk,compile,compile,other", "", "in neither");
        sealed_launches(dev, "yyn");
    } else if (strcmp(mode, "prewarm") == 0) {
        prewarm_raises_hits(dev, manifest, "disk hit");
    } else if (strcmp(mode, "bundle") == 0) {
        CHECK_OK(jb_disk_cache_add_bundle(bundle));
        expect(dev, manifest, "bundle,bundle,bundle,compile,other", "", "");
        sealed_launches(dev, "yyy");
    } else if (strcmp(mode, "prewarm-refused-now") == 0) {
        prewarm_refused(dev, manifest, JB_ERR_SYSTEM);
    } else if (strcmp(mode, "prewarm-refused") == 0) {
        prewarm_refused(dev, manifest, JB_ERR_LOAD);
    } else if (strcmp(mode, "prewarm-bundle") == 0) {
        CHECK_OK(jb_disk_cache_add_bundle(bundle));
        prewarm_raises_hits(dev, manifest, "bundle hit");
    } else if (strcmp(mode, "abi") == 0) {
        jb__test_set_key_abi(jb_abi_version() + 1);
        expect(dev, manifest, "compile,compile,compile,compile,other", "another compiler",
               "in neither");
    }
    return check_summary(mode);
}

static bool run_child(const char *mode, const char *manifest, const char *bundle,
                      const char *cache_dir)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (cache_dir)
            setenv("JITBRIDGE_CACHE_DIR", cache_dir, 1);
        unsetenv("JITBRIDGE_MANIFEST");
        char salt_text[16];
        snprintf(salt_text, sizeof salt_text, "%u", salt);
        execl(self, self, "child", mode, manifest, bundle, salt_text,
              (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void append(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "append to %s", path);
}

static void bad_manifests(jb_device *dev, const char *dir)
{
    jb_coverage_result r = {1, 1, 1, 1, 1};
    char path[512];
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK(jb_cache_coverage(&r, dev, path, NULL, NULL) == JB_ERR_SYSTEM, "a missing manifest");
    CHECK(r.memory + r.disk + r.bundle + r.compile + r.other == 0, "counts left at 0");
    CHECK(strstr(jb_last_error_message(), "none"), "names the file: %s", jb_last_error_message());
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK(jb_cache_coverage(&r, dev, path, NULL, NULL) == JB_ERR_INVALID_ARGUMENT,
          "a FIFO is refused, never waited on");
    CHECK(jb_cache_coverage(&r, dev, dir, NULL, NULL) != JB_OK, "a folder");
    CHECK(jb_cache_coverage(NULL, dev, path, NULL, NULL) == JB_ERR_INVALID_ARGUMENT, "no out");
    CHECK(jb_cache_coverage(&r, NULL, path, NULL, NULL) == JB_ERR_INVALID_ARGUMENT,
          "a FIFO is refused with no device given too");
    CHECK(jb_cache_coverage(&r, dev, NULL, NULL, NULL) == JB_ERR_INVALID_ARGUMENT, "no path");
    CHECK(jb_coverage_source_name(0) == NULL && jb_coverage_source_name(6) == NULL &&
              strcmp(jb_coverage_source_name(JB_COVERAGE_COMPILE), "compile") == 0,
          "source names");
}

/* Writes `junk` (`bytes` of it) then cov_a's own line (`good`) to `path`: cov_a must still be
 * read. */
static void after_junk(jb_device *dev, const char *path, const char *good, const char *junk,
                       size_t bytes, const char *what)
{
    size_t length = strlen(good);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, junk, bytes) == (ssize_t)bytes &&
              write(fd, good, length) == (ssize_t)length && close(fd) == 0,
          "write %s", path);
    seen s = {0};
    jb_coverage_result r;
    CHECK_OK(jb_cache_coverage(&r, dev, path, collect, &s));
    CHECK(s.count == 1 && r.memory == 1 && strstr(s.module[0], "cov_a"),
          "cov_a's line after %s: %d kernels seen (1), %llu in memory (1)", what, s.count,
          (unsigned long long)r.memory);
}

/* A line no reader takes (with a NUL byte in it, or past the longest a line may be) costs
 * that line only, never the next one. */
static void odd_lines(jb_device *dev, const char *dir, const char *manifest)
{
    char path[512], good[1024] = "";
    snprintf(path, sizeof path, "%s/odd.manifest", dir);
    FILE *f = fopen(manifest, "r"); /* cov_a's line is its first */
    CHECK(f && fgets(good, sizeof good, f) && strstr(good, "\tcov_a"), "cov_a's line: %s", good);
    if (f)
        fclose(f);
    after_junk(dev, path, good, "nul\0byte\n", 9, "a line with a NUL byte");
    static char overlong[16384 + 10];
    memset(overlong, 'x', sizeof overlong - 1);
    overlong[sizeof overlong - 1] = '\n';
    after_junk(dev, path, good, overlong, sizeof overlong, "a line past the longest");
}

/* Writes `lines` manifest lines of another device's kernels, their keys all sharing the first
 * 16 hex digits (`crafted`) or random; returns the seconds the check took. */
static double check_lines(jb_device *dev, const char *path, int lines, bool crafted)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "open %s", path);
    if (!f)
        return 0;
    for (int i = 0; i < lines; i++) {
        unsigned long long low = (unsigned long long)i * 0x9e3779b97f4a7c15ULL;
        unsigned long long high = crafted ? 0x0123456789abcdefULL : low ^ 0x5555555555555555ULL;
        fprintf(f, "jbm1\t%016llx%016llx%032x\tcuda\tsm_90\tcrafted_%d\tcrafted_%d\tcompiled\n",
                high, low, (unsigned)i, i, i);
    }
    CHECK(fclose(f) == 0, "write %s", path);
    struct timespec start, end;
    jb_coverage_result r;
    clock_gettime(CLOCK_MONOTONIC, &start);
    CHECK_OK(jb_cache_coverage(&r, dev, path, NULL, NULL));
    clock_gettime(CLOCK_MONOTONIC, &end);
    CHECK(r.other == (uint64_t)lines, "%llu of %d lines counted", (unsigned long long)r.other,
          lines);
    return (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
}

/* A manifest whose keys share their first bytes costs what random keys cost: the table that
 * drops repeated keys hashes all of a key under a per-process key. A ratio in one run, the best
 * of two each (the old hash, on the first 8 bytes only, was 66.8x slower at 50,000 lines). */
static void crafted_keys(jb_device *dev, const char *dir)
{
    const int lines = 50000;
    char path[512];
    snprintf(path, sizeof path, "%s/crafted.manifest", dir);
    double random_s = 1e9, crafted_s = 1e9;
    for (int round = 0; round < 2; round++) {
        double r = check_lines(dev, path, lines, false), c = check_lines(dev, path, lines, true);
        random_s = r < random_s ? r : random_s;
        crafted_s = c < crafted_s ? c : crafted_s;
    }
    CHECK(crafted_s < 4 * random_s,
          "%d keys sharing their first 16 hex digits took %.3f s, random keys %.3f s (%.1fx)",
          lines, crafted_s, random_s, crafted_s / random_s);
    unlink(path);
}

/* The manifest line's key of the module whose name starts with `module`. */
static bool key_of(const char *manifest, const char *module, char key[65])
{
    FILE *f = fopen(manifest, "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        char k[65], m[256];
        found = sscanf(line, "jbm1\t%64[0-9a-f]\t%*s\t%*s\t%255s", k, m) == 2 &&
                strncmp(m, module, strlen(module)) == 0;
        if (found)
            memcpy(key, k, 65);
    }
    if (f)
        fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    alarm(300);
    self = argv[0];
    if (argc >= 6 && strcmp(argv[1], "child") == 0) {
        salt = (unsigned)strtoul(argv[5], NULL, 10);
        jb_device *dev = test_device();
        return dev ? child(dev, argv[2], argv[3], argv[4]) : 1;
    }
    /* The manifest is named before the library's first use: it is read once. */
    char dir[] = "/tmp/jb-coverage-XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    char manifest[256], bundle[256], empty[256];
    snprintf(manifest, sizeof manifest, "%s/kernels.manifest", dir);
    snprintf(bundle, sizeof bundle, "%s/kernels.bundle", dir);
    snprintf(empty, sizeof empty, "%s/empty-cache", dir);
    int fd = open(manifest, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0 && close(fd) == 0, "the manifest");
    setenv("JITBRIDGE_MANIFEST", manifest, 1);
    jb_device *dev = test_device();
    if (!dev)
        return check_summary("test_coverage");
    if (strcmp(jb_device_backend_name(dev), "cpu") != 0 ||
        strncmp(jb_disk_cache_state(), "on", 2) != 0) {
        printf("test_coverage: skipped: needs the cpu device and the disk cache on\n");
        return check_summary("test_coverage");
    }
    salt = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int i = 0; i < KERNELS; i++)
        CHECK_OK(launch(dev, i));
    /* A repeated kernel, a comment, a line of no format, a kernel stored nowhere, and one of
     * another device. */
    char key_a[65], line[1024];
    CHECK(key_of(manifest, "cov_a", key_a), "cov_a's line");
    snprintf(line, sizeof line,
             "jbm1\t%s\tcpu\t%s\tcov_a_again\tf\tdisk\n# a comment\nnot a manifest line\n"
             "jbm1\t%s\tcpu\t%s\tcov_missing\tcov_missing\tcompiled\n"
             "jbm1\t%s\tcuda\tsm_90\tcov_gpu\tcov_gpu\tcompiled\n",
             key_a, jb_device_arch(dev), "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
             jb_device_arch(dev), "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
    append(manifest, line);

    expect(dev, manifest, "memory,memory,memory,compile,other", "", "");
    uint64_t exported = 0, skipped = 0;
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, bundle, manifest));
    CHECK(exported == KERNELS, "%lu exported", (unsigned long)exported);
    CHECK(mkdir(empty, 0700) == 0, "an empty cache folder");

    /* cov_c's entry goes: a fresh process finds it nowhere, and compiles nothing. */
    char key_c[65], entry[512];
    CHECK(key_of(manifest, "cov_c", key_c), "cov_c's line");
    snprintf(entry, sizeof entry, "%s/%.32s.jbc", getenv("JITBRIDGE_CACHE_DIR"), key_c);
    CHECK(unlink(entry) == 0, "remove %s: %s", entry, strerror(errno));
    CHECK(run_child("disk", manifest, "-", NULL), "a fresh process: cache folder");
    CHECK(access(entry, F_OK) != 0, "the check stored cov_c again: it compiled");
    CHECK(run_child("bundle", manifest, bundle, empty), "a fresh process: bundle");
    CHECK(run_child("abi", manifest, "-", NULL), "a fresh process: another ABI");
    CHECK(run_child("prewarm", manifest, "-", NULL), "a fresh process: prewarm's events");
    CHECK(run_child("prewarm-bundle", manifest, bundle, empty), "prewarm's bundle events");
    CHECK(run_child("prewarm-refused-now", manifest, "-", NULL),
          "prewarm of code the loader refuses for now");
    CHECK(run_child("prewarm-refused", manifest, "-", NULL),
          "prewarm of code the loader refuses for good");
    bad_manifests(dev, dir);
    odd_lines(dev, dir, manifest);
    crafted_keys(dev, dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "clean up");
    return check_summary("test_coverage");
}
