/*
 * The disk cache's folder and failures that pass:
 * - a folder that is not the cache's own ($HOME, ".") loses nothing: no sweep, no file named
 *   tmp replaced, no prune, clear or fix; a folder the cache makes, or finds holding only its
 *   kinds of files, is marked with CACHEDIR.TAG and managed, and a link named tmp in it is never
 *   followed, nor a tmp/ its group may write used (one it may only read is);
 * - a transient failure (here: out of descriptors) while loading evicts nothing, nor does one
 *   that makes the loader refuse a good entry, while storing it stops nothing, and while setting
 *   up turns nothing off: the cache is set up at a later build;
 * - a full disk pauses storing for a while (a doubling wait), a read-only one stops it;
 * - prune, stats and verify of a folder that does not exist yet report an empty cache.
 * The folder is chosen once per process, so each case runs in a child of its own (its exit
 * status is its count of failed checks) before the parent uses the library.
 */
#include "../src/kernels/kernels.h"
#include "check.h"
#include "deadline.h"
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAG_SIGNATURE "Signature: 8a477f597d28d172789f06886806bc55"

static char base[] = "/tmp/jb-disk-folder-XXXXXX";

/* ---- small file helpers ---- */

static void path_of(char *out, size_t len, const char *dir, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void write_file(const char *dir, const char *name, const char *text, int age_seconds)
{
    char path[512];
    path_of(path, sizeof path, dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    if (age_seconds) {
        struct timeval then[2] = {{time(NULL) - age_seconds, 0}, {time(NULL) - age_seconds, 0}};
        utimes(path, then);
    }
}

/* The file's text, or "" when it is not a regular file that can be read. */
static const char *read_file(const char *dir, const char *name)
{
    static char text[4096];
    char path[512];
    path_of(path, sizeof path, dir, name);
    struct stat st;
    text[0] = '\0';
    FILE *f = lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? fopen(path, "r") : NULL;
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    return text;
}

static bool exists(const char *dir, const char *name)
{
    char path[512];
    struct stat st;
    path_of(path, sizeof path, dir, name);
    return lstat(path, &st) == 0;
}

/* Regular files at entry names (32 lowercase hex digits, ".jbc"); -1 without a folder. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        bool entry = strlen(name) == 36 && strcmp(name + 32, ".jbc") == 0 &&
                     strspn(name, "0123456789abcdef") == 32;
        n += entry && strcmp(read_file(dir, name), "") != 0;
    }
    closedir(d);
    return n;
}

/* base/name made with `mode`; its path (one of a few kept). */
static char *new_folder(const char *name, mode_t mode)
{
    static char dirs[16][300];
    static int used;
    char *dir = dirs[used++ % 16];
    snprintf(dir, sizeof dirs[0], "%s/%s", base, name);
    CHECK(mkdir(dir, 0700) == 0 && chmod(dir, mode) == 0, "mkdir %s", dir);
    return dir;
}

static void make_dir(const char *dir, const char *name, int age_seconds)
{
    char path[512];
    path_of(path, sizeof path, dir, name);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
    struct timeval then[2] = {{time(NULL) - age_seconds, 0}, {time(NULL) - age_seconds, 0}};
    utimes(path, then);
}

/* ---- running a case in a child ---- */

typedef struct a_case {
    const char *cache_dir;
    void (*body)(const char *dir);
} a_case;

static bool run_in_child(void *arg)
{
    a_case *c = arg;
    check_failed = check_passed = 0; /* the child's own count */
    setenv("JITBRIDGE_CACHE_DIR", c->cache_dir, 1);
    unsetenv("JITBRIDGE_DISK_CACHE"); /* on, whatever the run says: it is what is tested */
    c->body(c->cache_dir);
    return check_failed == 0;
}

static void run_case(const char *name, const char *cache_dir, void (*body)(const char *dir))
{
    a_case c = {cache_dir, body};
    CHECK(child_says_yes(name, 60, run_in_child, &c),
          "%s: the child's checks failed (above), or it crashed or hung", name);
    printf("%s: done\n", name);
}

static jb_device *cpu(void)
{
    jb_device *device = NULL;
    CHECK_OK(jb_device_get(&device, JB_DEVICE_CPU, 0));
    return device;
}

/* Builds (and so stores) a kernel whose source depends on `salt`. */
static jb_status build_salted(int salt)
{
    char body[128];
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %d.0f;", salt);
    jb_custom_kernel *k = f32_kernel("disk_folder_test", body);
    jb_status status = jb_custom_kernel_prepare(k, cpu());
    jb_custom_kernel_free(k);
    return status;
}

/* Descriptors used up, as by a busy server for a moment: until give_back_descriptors. */
static int held_fds[4096], held_count;
static struct rlimit saved_limit;

static void use_up_descriptors(void)
{
    getrlimit(RLIMIT_NOFILE, &saved_limit);
    struct rlimit low = saved_limit;
    low.rlim_cur = low.rlim_max < 256 ? low.rlim_max : 256;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit: %s", strerror(errno));
    held_count = 0;
    int fd;
    while (held_count < 4096 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        held_fds[held_count++] = fd;
    CHECK(errno == EMFILE, "descriptors ran out with %s", strerror(errno));
}

static void give_back_descriptors(void)
{
    while (held_count > 0)
        close(held_fds[--held_count]);
    setrlimit(RLIMIT_NOFILE, &saved_limit);
}

/* ---- 8. a folder that does not exist yet is an empty cache ---- */

static void missing_folder(const char *dir)
{
    uint64_t removed = 99, entries = 99, bytes = 99, valid = 99, invalid = 99;
    CHECK_OK(jb_disk_cache_prune(0, &removed));
    CHECK(removed == 0, "prune removed %llu", (unsigned long long)removed);
    CHECK_OK(jb_disk_cache_prune(1 << 20, &removed));
    CHECK_OK(jb_disk_cache_stats(&entries, &bytes));
    CHECK(entries == 0 && bytes == 0, "stats %llu %llu", (unsigned long long)entries,
          (unsigned long long)bytes);
    CHECK_OK(jb_disk_cache_check(&valid, &invalid, 1, NULL, NULL));
    CHECK(valid == 0 && invalid == 0, "check %llu %llu", (unsigned long long)valid,
          (unsigned long long)invalid);
    CHECK(!exists(dir, ""), "looking created the folder %s", dir);
}

/* ---- 4. what is the cache's own ---- */

/* A folder the cache makes is marked with the convention's exact signature line. */
static void new_folder_is_marked(const char *dir)
{
    CHECK_OK(build_salted(1));
    CHECK(strncmp(read_file(dir, "CACHEDIR.TAG"), TAG_SIGNATURE "\n",
                  strlen(TAG_SIGNATURE) + 1) == 0,
          "CACHEDIR.TAG: \"%s\"", read_file(dir, "CACHEDIR.TAG"));
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
    CHECK(strcmp(jb_disk_cache_state(), "on") == 0, "state: %s", jb_disk_cache_state());
    uint64_t removed = 0;
    CHECK_OK(jb_disk_cache_prune(0, &removed));
    CHECK(removed == 1 && count_entries(dir) == 0, "clear removed %llu, %d left",
          (unsigned long long)removed, count_entries(dir));
}

static const char *const stale_temporary = "0123456789abcdef0123456789abcdef.tmp";
static const char *const old_style_temporary =
    "00112233445566778899aabbccddeeff.jbc.4242.7.tmp"; /* an older version's name */

/* The user's folder (".", $HOME): every file of theirs stays as it was, a file named tmp
 * included; the cache works there all the same, and removes nothing. */
static void shared_folder_loses_nothing(const char *dir)
{
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    setenv("JITBRIDGE_CACHE_DIR", ".", 1);
    CHECK_OK(build_salted(2));
    CHECK(strcmp(read_file(dir, "tmp"), "the user's file named tmp") == 0,
          "the file named tmp became \"%s\"", read_file(dir, "tmp"));
    CHECK(strcmp(read_file(dir, "notes.txt"), "two hours old") == 0, "notes.txt changed");
    CHECK(strcmp(read_file(dir, "ffeeddccbbaa99887766554433221100.tmp"), "mine") == 0,
          "a file named like a temporary, in a folder not the cache's own, was removed");
    CHECK(!exists(dir, "CACHEDIR.TAG"), "a shared folder was marked as the cache's");
    CHECK(count_entries(dir) == 1, "the entry was not stored beside the user's files: %d",
          count_entries(dir));
    CHECK(strncmp(jb_disk_cache_state(), "on, shared", 10) == 0, "state: %s",
          jb_disk_cache_state());
    uint64_t removed = 0, valid = 0, invalid = 0;
    CHECK(jb_disk_cache_prune(0, &removed) == JB_ERR_UNSUPPORTED && removed == 0,
          "clear of a shared folder: %s", jb_last_error_message());
    CHECK(strstr(jb_last_error_message(), "CACHEDIR.TAG"), "%s", jb_last_error_message());
    CHECK(jb_disk_cache_check(&valid, &invalid, 1, NULL, NULL) == JB_ERR_UNSUPPORTED,
          "verify --fix of a shared folder: %s", jb_last_error_message());
    CHECK_OK(jb_disk_cache_check(&valid, &invalid, 0, NULL, NULL));
    CHECK(valid == 1 && count_entries(dir) == 1, "verify: %llu valid, %d entries",
          (unsigned long long)valid, count_entries(dir));
}

/* A tmp/ of the user's in a shared folder: nothing in it is swept, however old. */
static void shared_tmp_folder_is_not_swept(const char *dir)
{
    CHECK_OK(build_salted(3));
    CHECK(strcmp(read_file(dir, "tmp/draft.txt"), "the user's") == 0, "tmp/draft.txt went");
    CHECK(strcmp(read_file(dir, "tmp/0123456789abcdef0123456789abcdef.tmp"), "mine too") == 0,
          "an old temporary-like file in a shared folder's tmp/ was swept");
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
}

/* An older version's folder (entries and a tmp/ of its temporaries, no tag) is adopted:
 * marked, its stale temporaries swept, its entries served. */
static void older_cache_folder_is_adopted(const char *dir)
{
    CHECK_OK(build_salted(4));
    CHECK(strncmp(read_file(dir, "CACHEDIR.TAG"), TAG_SIGNATURE, strlen(TAG_SIGNATURE)) == 0,
          "not marked: \"%s\"", read_file(dir, "CACHEDIR.TAG"));
    char name[128];
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    CHECK(!exists(dir, name), "a stale temporary of the adopted folder stayed");
    snprintf(name, sizeof name, "tmp/%s", old_style_temporary);
    CHECK(!exists(dir, name), "an older version's stale temporary stayed");
    CHECK(strcmp(jb_disk_cache_state(), "on") == 0, "state: %s", jb_disk_cache_state());
}

/* In the cache's own folder, a file named tmp (not a folder) stays: temporaries go beside
 * the entries, and a temporary-like name that is not the cache's is never swept. */
static void own_folder_keeps_a_file_named_tmp(const char *dir)
{
    CHECK_OK(build_salted(5));
    CHECK(strcmp(read_file(dir, "tmp"), "a file") == 0, "the file named tmp became \"%s\"",
          read_file(dir, "tmp"));
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
}

/* A process that only loads never reads tmp/: its stale temporary stays until a store. */
static void a_load_sweeps_nothing_and_a_store_sweeps(const char *dir)
{
    char name[128];
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    CHECK_OK(build_salted(7)); /* stored by the case before, in another process: loaded */
    jb_counters counters;
    CHECK_OK(jb_counters_get(&counters, sizeof counters));
    CHECK(counters.disk_hits == 1 && counters.builds == 0, "%llu disk hits, %llu builds",
          (unsigned long long)counters.disk_hits, (unsigned long long)counters.builds);
    CHECK(exists(dir, name), "a process that only loaded swept tmp/");
    CHECK_OK(build_salted(8)); /* a store */
    CHECK(!exists(dir, name), "the first store left a stale temporary");
}

static void store_one(const char *dir)
{
    (void)dir;
    CHECK_OK(build_salted(7));
}

static void own_folder_sweeps_only_temporaries(const char *dir)
{
    CHECK_OK(build_salted(6));
    char name[128];
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    CHECK(!exists(dir, name), "a stale temporary stayed");
    CHECK(exists(dir, "tmp/fedcba98765432100123456789abcdef.tmp"), "a fresh temporary went");
    CHECK(strcmp(read_file(dir, "tmp/notes.tmp"), "not a temporary") == 0,
          "a file not named like a temporary was swept");
    CHECK(exists(dir, "tmp/old-folder"), "a folder in tmp/ was removed");
}

/* A marked folder's tmp/ that its group may read (0750) holds the temporaries: a store sweeps
 * its stale one. */
static void own_tmp_the_group_reads_is_used(const char *dir)
{
    CHECK_OK(build_salted(6));
    char name[128];
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    CHECK(!exists(dir, name), "a tmp/ its group may only read was not used");
}

/* One its group may write (0770) is not: the entry is stored beside, nothing in it swept. */
static void own_tmp_the_group_writes_is_left(const char *dir)
{
    CHECK_OK(build_salted(6));
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
    char name[128];
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    CHECK(exists(dir, name), "a tmp/ its group may write was used and swept");
}

/* Another folder of ours, which the cache folder's tmp links to, and its time before (any name
 * made or removed in it changes that). */
static char linked_to[300];
static struct timespec linked_to_time;

/* A marked folder whose tmp is a link to another folder of ours (made after the path was
 * resolved, as another process could): never followed. Temporaries go beside the entries; the
 * other folder is neither swept nor written. */
static void own_folder_never_follows_a_link_named_tmp(const char *dir)
{
    CHECK_OK(build_salted(9)); /* a store: it would sweep tmp/ and write a temporary there */
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
    CHECK(strcmp(read_file(linked_to, stale_temporary), "another folder's") == 0,
          "a stale temporary in the folder tmp links to was swept");
    struct stat st;
    CHECK(stat(linked_to, &st) == 0 && st.st_mtim.tv_sec == linked_to_time.tv_sec &&
              st.st_mtim.tv_nsec == linked_to_time.tv_nsec,
          "a name was written in, or removed from, the folder tmp links to");
    char link[512];
    path_of(link, sizeof link, dir, "tmp");
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link named tmp was replaced");
}

/* ---- 6 and 7. a transient failure is "not now" ---- */

/* Out of descriptors while loading a good entry: a miss, and the entry stays; while storing:
 * that store is skipped, and storing goes on. */
static void transient_failures_evict_and_stop_nothing(const char *dir)
{
    jb_disk_key key = {0};
    jb_blob code = {.data = (unsigned char *)"compiled code", .size = 13}, loaded = {0};
    CHECK(jb__disk_cache_usable(), "state: %s", jb_disk_cache_state());
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "a source", &key));
    jb__disk_store(&key, &code);
    CHECK(exists(dir, key.file), "the entry was not stored");

    use_up_descriptors();
    bool hit = jb__disk_load(&key, &loaded);
    give_back_descriptors();
    CHECK(!hit, "loaded without a descriptor?");
    CHECK(exists(dir, key.file), "a good entry was evicted for a moment of EMFILE");
    CHECK(jb__disk_load(&key, &loaded) && loaded.size == code.size &&
              memcmp(loaded.data, code.data, code.size) == 0,
          "the entry does not load once descriptors are back");
    free(loaded.data);

    jb_disk_key other = {0};
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "another source", &other));
    use_up_descriptors();
    jb__disk_store(&other, &code);
    give_back_descriptors();
    CHECK(strcmp(jb_disk_cache_state(), "on") == 0,
          "a moment of EMFILE while storing stopped the cache storing: %s",
          jb_disk_cache_state());
    jb__disk_store(&other, &code);
    CHECK(exists(dir, other.file), "the next store did not land");
    jb__disk_key_free(&key);
    jb__disk_key_free(&other);
}

/* ---- 11. a full disk pauses storing, a lasting failure stops it ---- */

static atomic_int warnings;

static void count_warnings(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    atomic_fetch_add(&warnings, 1);
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Storing under JITBRIDGE_DISK_CACHE_FAULT=`fault` fails; once the fault is gone and the pause
 * (1 s here) is over, whether a store lands. */
static bool stores_after_fault(const char *dir, const char *fault, jb_disk_key *key)
{
    jb_blob code = {.data = (unsigned char *)"compiled code", .size = 13};
    CHECK(jb__disk_cache_usable(), "state: %s", jb_disk_cache_state());
    CHECK_OK(jb_set_log_callback(count_warnings, NULL));
    setenv("JITBRIDGE_TEST_DISK_FULL_WAIT_MS", "1000", 1);
    setenv("JITBRIDGE_DISK_CACHE_FAULT", fault, 1);
    CHECK(!jb__disk_store(key, &code), "stored under the fault %s?", fault);
    CHECK(strncmp(jb_disk_cache_state(), "on, read-only", 13) == 0, "state: %s",
          jb_disk_cache_state());
    unsetenv("JITBRIDGE_DISK_CACHE_FAULT");
    CHECK(!jb__disk_store(key, &code) && !exists(dir, key->file), "stored at once: %s",
          jb_disk_cache_state());
    sleep_ms(1100);
    return jb__disk_store(key, &code) && exists(dir, key->file);
}

/* A full disk frees up: storing resumes after the pause, with one warning for the pause and one
 * for the resumption; a disk still full at the retry pauses again, twice as long, silently. */
static void full_disk_pauses_storing(const char *dir)
{
    jb_disk_key key = {0}, other = {0};
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "a source", &key));
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "another source", &other));
    CHECK(stores_after_fault(dir, "enospc", &key),
          "a full disk stopped storing past its pause: %s", jb_disk_cache_state());
    CHECK(strcmp(jb_disk_cache_state(), "on") == 0, "state: %s", jb_disk_cache_state());
    CHECK(atomic_load(&warnings) == 2, "%d warnings, not one for the pause and one after it",
          atomic_load(&warnings));

    jb_blob code = {.data = (unsigned char *)"compiled code", .size = 13};
    setenv("JITBRIDGE_DISK_CACHE_FAULT", "enospc", 1);
    CHECK(!jb__disk_store(&other, &code), "stored on a full disk?");
    CHECK(strstr(jb_disk_cache_state(), "the disk is full") &&
              strstr(jb_disk_cache_state(), "a wait of 1000 ms"),
          "a store that landed did not reset the wait: %s", jb_disk_cache_state());
    sleep_ms(1100);
    CHECK(!jb__disk_store(&other, &code), "stored on a full disk?");
    CHECK(strstr(jb_disk_cache_state(), "a wait of 2000 ms"), "the wait did not double: %s",
          jb_disk_cache_state());
    CHECK(atomic_load(&warnings) == 3, "%d warnings: a retry that failed again warned",
          atomic_load(&warnings));
    unsetenv("JITBRIDGE_DISK_CACHE_FAULT");
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    jb__disk_key_free(&key);
    jb__disk_key_free(&other);
}

/* A read-only disk is no passing state: storing stops for the process's life. */
static void lasting_write_failure_stops_storing(const char *dir)
{
    jb_disk_key key = {0};
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "a source", &key));
    CHECK(!stores_after_fault(dir, "erofs", &key), "storing resumed after EROFS");
    CHECK(strstr(jb_disk_cache_state(), strerror(EROFS)), "state: %s", jb_disk_cache_state());
    CHECK(atomic_load(&warnings) == 1, "%d warnings", atomic_load(&warnings));
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    jb__disk_key_free(&key);
}

/* A good entry is opened, then descriptors run out (a test point): the loader cannot take it
 * (its private copy cannot be written), and the compile cannot start. The entry used to be
 * evicted as "refused by the loader"; it stays, and loads once descriptors are back. */
static void use_up_descriptors_at(void *ctx, const char *entry)
{
    (void)entry;
    *(int *)ctx += 1;
    if (*(int *)ctx > 1)
        return;
    use_up_descriptors();
    /* Closing the entry frees its number: with the limit under every number in use, no open
     * gets it (an open takes the lowest free number, and fails when that is past the limit). */
    struct rlimit none = saved_limit;
    none.rlim_cur = 3;
    CHECK(setrlimit(RLIMIT_NOFILE, &none) == 0, "setrlimit: %s", strerror(errno));
}

static void entry_for_the_loader(const char *dir)
{
    CHECK_OK(build_salted(9));
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
}

static void loader_without_descriptors_evicts_nothing(const char *dir)
{
    cpu();
    int opened = 0;
    jb__test_set_point(JB_TEST_ENTRY_OPENED, use_up_descriptors_at, &opened);
    jb_status status = build_salted(9);
    give_back_descriptors();
    jb__test_set_point(JB_TEST_ENTRY_OPENED, NULL, NULL);
    CHECK(opened == 1 && status != JB_OK, "the entry was opened %d times; the build gave %s",
          opened, jb_status_name(status));
    CHECK(count_entries(dir) == 1, "a good entry the loader could not take for want of a "
          "descriptor was evicted: %d entries", count_entries(dir));
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    CHECK_OK(build_salted(9));
    jb_counters_get(&after, sizeof after);
    CHECK(after.disk_hits == before.disk_hits + 1 && after.builds == before.builds,
          "the kept entry did not load: %llu disk hits, %llu builds",
          (unsigned long long)(after.disk_hits - before.disk_hits),
          (unsigned long long)(after.builds - before.builds));
}

/* dlopen itself runs out of descriptors (a test point after the module's private copy is
 * written): a refusal for now, not counted rejected; the entry loads once descriptors are
 * back. It used to be JB_ERR_LOAD, a verdict on the code. */
static void dlopen_without_descriptors_rejects_nothing(const char *dir)
{
    cpu();
    int written = 0;
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    jb__test_set_point(JB_TEST_MODULE_WRITTEN, use_up_descriptors_at, &written);
    jb_status status = build_salted(9);
    give_back_descriptors();
    jb__test_set_point(JB_TEST_MODULE_WRITTEN, NULL, NULL);
    jb_counters_get(&after, sizeof after);
    CHECK(written >= 1 && status != JB_OK, "the module was written %d times; the build gave %s",
          written, jb_status_name(status));
    CHECK(after.disk_rejected == before.disk_rejected,
          "dlopen out of descriptors counted %llu rejected entries",
          (unsigned long long)(after.disk_rejected - before.disk_rejected));
    CHECK(count_entries(dir) == 1, "%d entries", count_entries(dir));
    jb_counters_get(&before, sizeof before);
    CHECK_OK(build_salted(9));
    jb_counters_get(&after, sizeof after);
    CHECK(after.disk_hits == before.disk_hits + 1 && after.builds == before.builds,
          "the entry did not load once descriptors were back: %llu disk hits, %llu builds",
          (unsigned long long)(after.disk_hits - before.disk_hits),
          (unsigned long long)(after.builds - before.builds));
}

/* The loader refuses a good entry for now (its own EMFILE: the test hook) or for good (JB_ERR_LOAD):
 * only the lasting refusal is counted rejected and raised as an event; the passing one is a
 * warning and a plain miss, and the entry loads once the refusal passes. */
static atomic_int entry_events;

static void count_entry_events(void *user_data, const jb_cache_event *event)
{
    (void)user_data;
    if (event->kind == JB_CACHE_EVENT_ENTRY_EVICTED || event->kind == JB_CACHE_EVENT_ENTRY_REJECTED)
        atomic_fetch_add(&entry_events, 1);
}

static void entries_for_refusals(const char *dir)
{
    CHECK_OK(build_salted(11));
    CHECK_OK(build_salted(12));
    CHECK(count_entries(dir) == 2, "%d entries", count_entries(dir));
}

static void loader_refusals_for_now_and_for_good(const char *dir)
{
    cpu();
    const int salts[] = {11, 12};
    const jb_status refusals[] = {JB_ERR_SYSTEM, JB_ERR_LOAD};
    CHECK_OK(jb_set_event_callback(count_entry_events, NULL));
    for (int i = 0; i < 2; i++) {
        bool lasting = refusals[i] == JB_ERR_LOAD;
        jb_counters before, after;
        jb_counters_get(&before, sizeof before);
        atomic_store(&entry_events, 0);
        jb__test_set_load_failure(refusals[i]);
        jb_status status = build_salted(salts[i]);
        jb__test_set_load_failure(JB_OK);
        jb_counters_get(&after, sizeof after);
        CHECK(status == refusals[i], "a build whose loads all fail gave %s",
              jb_status_name(status));
        CHECK(after.disk_rejected - before.disk_rejected == lasting &&
                  atomic_load(&entry_events) == lasting,
              "a loader's %s refusal of a good entry: %llu counted rejected, %d events (want %d)",
              lasting ? "lasting" : "passing",
              (unsigned long long)(after.disk_rejected - before.disk_rejected),
              atomic_load(&entry_events), lasting);
        CHECK(count_entries(dir) == 2, "%d entries", count_entries(dir));
    }
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    CHECK_OK(build_salted(11));
    jb_counters_get(&after, sizeof after);
    CHECK(after.disk_hits == before.disk_hits + 1 && after.builds == before.builds,
          "the entry refused for now did not load once the refusal passed: %llu disk hits, "
          "%llu builds",
          (unsigned long long)(after.disk_hits - before.disk_hits),
          (unsigned long long)(after.builds - before.builds));
}

/* Out of descriptors at the first build: the cache is off for now, says so, and is set up at
 * a later build; nothing is lost but that build's entry. */
static void transient_setup_failure_is_retried(const char *dir)
{
    cpu(); /* devices first: their set-up is not what this case is about */
    use_up_descriptors();
    jb_status status = build_salted(7); /* the compiler cannot start either */
    give_back_descriptors();
    (void)status;
    CHECK(strncmp(jb_disk_cache_state(), "off for now", 11) == 0, "state: %s",
          jb_disk_cache_state());
    CHECK(strstr(jb_disk_cache_state(), strerror(EMFILE)), "state: %s", jb_disk_cache_state());
    int salt = 100;
    for (uint64_t start = jb__now_ns(); count_entries(dir) <= 0 && salt < 400; salt++) {
        CHECK_OK(build_salted(salt));
        if (jb__now_ns() - start > 10ull * 1000 * 1000 * 1000)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    CHECK(count_entries(dir) > 0, "nothing was stored after the descriptors came back (%d "
          "builds); state: %s", salt - 100, jb_disk_cache_state());
    CHECK(strcmp(jb_disk_cache_state(), "on") == 0, "state: %s", jb_disk_cache_state());
}

/* Out of descriptors at the compiler's version query (its identity is in every key): no key for
 * now, and one at a later try, so the cache stores again; it used to stay unknown for good. */
static void transient_version_query_is_retried(const char *dir)
{
    jb_device *dev = cpu();
    CHECK(jb__disk_cache_usable(), "state: %s", jb_disk_cache_state()); /* set up first */
    jb_disk_key key = {0};
    use_up_descriptors();
    jb_status status = jb__module_disk_key(dev, "folder_test", NULL, 0, "a source", &key);
    give_back_descriptors();
    CHECK(status != JB_OK, "a key was made while the compiler could not be asked its version");
    CHECK(strstr(jb_last_error_message(), "for now"), "%s", jb_last_error_message());
    jb__disk_key_free(&key);
    uint64_t start = jb__now_ns();
    while (status != JB_OK && jb__now_ns() - start < 10ull * 1000 * 1000 * 1000) {
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
        status = jb__module_disk_key(dev, "folder_test", NULL, 0, "a source", &key);
        if (status != JB_OK)
            jb__disk_key_free(&key);
    }
    CHECK(status == JB_OK, "no key 10 s after the descriptors came back: %s",
          jb_last_error_message());
    jb__disk_key_free(&key);
    CHECK_OK(build_salted(13));
    CHECK(count_entries(dir) == 1, "nothing was stored: %d entries", count_entries(dir));
}

/* No compiler at all: its version stays unknown (a lasting failure, not asked again). */
static void missing_compiler_stays_unknown(const char *dir)
{
    (void)dir;
    setenv("CC", "/nonexistent/cc", 1);
    jb_disk_key key = {0};
    for (int i = 0; i < 2; i++) {
        CHECK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "a source", &key) != JB_OK,
              "a key without a compiler?");
        CHECK(!strstr(jb_last_error_message(), "for now"), "%s", jb_last_error_message());
        jb__disk_key_free(&key);
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
}

/* The folder is removed under a running process and cannot be made again (its parent became
 * writable by others): a store outside a build turns the cache off with a warning, and the log
 * callback that gets it may fork. The warning used to be given under the folder's setup lock,
 * which fork's prepare takes: the fork hung. */
static atomic_int forks_in_callback;

static void fork_in_log_callback(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid > 0 && waitpid(pid, NULL, 0) == pid)
        atomic_fetch_add(&forks_in_callback, 1);
}

static void refused_reattach_warns_outside_the_lock(const char *dir)
{
    jb_disk_key key = {0}, other = {0};
    jb_blob code = {.data = (unsigned char *)"compiled code", .size = 13};
    CHECK(jb__disk_cache_usable(), "state: %s", jb_disk_cache_state());
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "a source", &key));
    CHECK_OK(jb__module_disk_key(cpu(), "folder_test", NULL, 0, "another source", &other));
    jb__disk_store(&key, &code);
    char command[600];
    snprintf(command, sizeof command, "rm -rf '%s' && chmod 777 '%s'", dir, base);
    CHECK(system(command) == 0, "%s", command);
    CHECK_OK(jb_set_log_callback(fork_in_log_callback, NULL));
    jb__disk_store(&other, &code);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    chmod(base, 0700);
    CHECK(atomic_load(&forks_in_callback) == 1, "the callback forked %d times",
          atomic_load(&forks_in_callback));
    CHECK(strncmp(jb_disk_cache_state(), "off: refusing", 13) == 0, "state: %s",
          jb_disk_cache_state());
    jb__disk_key_free(&key);
    jb__disk_key_free(&other);
}

/* A lasting refusal turns the cache off, and says so: no retry makes it on. */
static void lasting_refusal_turns_off(const char *dir)
{
    (void)dir;
    CHECK_OK(build_salted(8));
    CHECK(strncmp(jb_disk_cache_state(), "off: refusing", 13) == 0, "state: %s",
          jb_disk_cache_state());
    nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    CHECK(!jb__disk_cache_usable(), "a refused folder came on");
}

int main(void)
{
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    char missing[400], fresh[400], setup[400], name[128];
    snprintf(missing, sizeof missing, "%s/not/yet", base);
    run_case("8. a folder that does not exist yet", missing, missing_folder);
    snprintf(fresh, sizeof fresh, "%s/fresh", base);
    run_case("4. a folder the cache makes", fresh, new_folder_is_marked);

    char *shared = new_folder("shared", 0700);
    write_file(shared, "tmp", "the user's file named tmp", 7200);
    write_file(shared, "notes.txt", "two hours old", 7200);
    write_file(shared, "ffeeddccbbaa99887766554433221100.tmp", "mine", 7200);
    run_case("4. a shared folder, as JITBRIDGE_CACHE_DIR=.", shared, shared_folder_loses_nothing);

    char *shared_tmp = new_folder("shared-tmp", 0700);
    make_dir(shared_tmp, "tmp", 0);
    write_file(shared_tmp, "tmp/draft.txt", "the user's", 7200);
    write_file(shared_tmp, "tmp/0123456789abcdef0123456789abcdef.tmp", "mine too", 7200);
    write_file(shared_tmp, "photo.jpg", "not the cache's", 0);
    run_case("4. a shared folder with a tmp/ of the user's", shared_tmp,
             shared_tmp_folder_is_not_swept);

    char *older = new_folder("older", 0700);
    make_dir(older, "tmp", 0);
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    write_file(older, name, "half an entry", 7200);
    snprintf(name, sizeof name, "tmp/%s", old_style_temporary);
    write_file(older, name, "half an entry", 7200);
    write_file(older, "00112233445566778899aabbccddeeff.jbc", "an entry", 0);
    run_case("4. an older version's unmarked folder", older, older_cache_folder_is_adopted);

    char *own_file_tmp = new_folder("own-file-tmp", 0700);
    write_file(own_file_tmp, "CACHEDIR.TAG", TAG_SIGNATURE "\n", 0);
    write_file(own_file_tmp, "tmp", "a file", 0);
    run_case("4. a marked folder with a file named tmp", own_file_tmp,
             own_folder_keeps_a_file_named_tmp);

    char *own = new_folder("own", 0700);
    write_file(own, "CACHEDIR.TAG", TAG_SIGNATURE "\n", 0);
    make_dir(own, "tmp", 0);
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    write_file(own, name, "left by a killed writer", 7200);
    write_file(own, "tmp/fedcba98765432100123456789abcdef.tmp", "a live writer's", 0);
    write_file(own, "tmp/notes.tmp", "not a temporary", 7200);
    make_dir(own, "tmp/old-folder", 7200);
    run_case("4. a marked folder's sweep", own, own_folder_sweeps_only_temporaries);

    const mode_t tmp_modes[] = {0750, 0770};
    void (*tmp_cases[])(const char *) = {own_tmp_the_group_reads_is_used,
                                         own_tmp_the_group_writes_is_left};
    for (int i = 0; i < 2; i++) {
        char *own_mode = new_folder(i == 0 ? "own-tmp-0750" : "own-tmp-0770", 0700);
        write_file(own_mode, "CACHEDIR.TAG", TAG_SIGNATURE "\n", 0);
        make_dir(own_mode, "tmp", 0);
        snprintf(name, sizeof name, "tmp/%s", stale_temporary);
        write_file(own_mode, name, "left by a killed writer", 7200);
        path_of(name, sizeof name, own_mode, "tmp");
        CHECK(chmod(name, tmp_modes[i]) == 0, "chmod %s", name);
        run_case(i == 0 ? "4. a marked folder's tmp/ its group may read"
                        : "4. a marked folder's tmp/ its group may write",
                 own_mode, tmp_cases[i]);
    }

    snprintf(linked_to, sizeof linked_to, "%s", new_folder("linked-to", 0700));
    write_file(linked_to, stale_temporary, "another folder's", 7200);
    struct timeval then[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    struct stat linked_to_stat;
    CHECK(utimes(linked_to, then) == 0 && stat(linked_to, &linked_to_stat) == 0, "%s",
          linked_to);
    linked_to_time = linked_to_stat.st_mtim;
    char *own_link_tmp = new_folder("own-link-tmp", 0700);
    write_file(own_link_tmp, "CACHEDIR.TAG", TAG_SIGNATURE "\n", 0);
    path_of(name, sizeof name, own_link_tmp, "tmp");
    CHECK(symlink(linked_to, name) == 0, "symlink %s", name);
    run_case("4. a marked folder whose tmp links to another folder of ours", own_link_tmp,
             own_folder_never_follows_a_link_named_tmp);

    char *loads = new_folder("loads", 0700);
    run_case("4. an entry stored", loads, store_one);
    snprintf(name, sizeof name, "tmp/%s", stale_temporary);
    write_file(loads, name, "left by a killed writer", 7200);
    run_case("4. a process that only loads, then stores", loads,
             a_load_sweeps_nothing_and_a_store_sweeps);

    run_case("6. transient failures while loading and storing",
             new_folder("transient", 0700), transient_failures_evict_and_stop_nothing);
    char *loader = new_folder("loader", 0700);
    run_case("6. an entry for the loader", loader, entry_for_the_loader);
    run_case("6. a loader out of descriptors", loader, loader_without_descriptors_evicts_nothing);
    run_case("6. dlopen out of descriptors", loader, dlopen_without_descriptors_rejects_nothing);
    char *refusals = new_folder("refusals", 0700);
    run_case("6. entries for the loader to refuse", refusals, entries_for_refusals);
    run_case("6. a loader's refusal for now and for good", refusals,
             loader_refusals_for_now_and_for_good);
    run_case("11. a full disk pauses storing", new_folder("full", 0700),
             full_disk_pauses_storing);
    run_case("11. a lasting write failure stops storing", new_folder("erofs", 0700),
             lasting_write_failure_stops_storing);
    snprintf(setup, sizeof setup, "%s/setup", base);
    run_case("7. a transient failure while setting up", setup,
             transient_setup_failure_is_retried);
    run_case("7. a lasting refusal", new_folder("refused", 0777), lasting_refusal_turns_off);
    run_case("7. a transient failure of the compiler's version query",
             new_folder("version", 0700), transient_version_query_is_retried);
    run_case("7. no compiler", new_folder("no-compiler", 0700), missing_compiler_stays_unknown);
    run_case("10. a refused reattach, its warning to a callback that forks",
             new_folder("reattach", 0700), refused_reattach_warns_outside_the_lock);

    char command[400];
    snprintf(command, sizeof command, "rm -rf '%s'", base);
    CHECK(system(command) == 0, "%s", command);
    return check_summary("test_disk_folder");
}
