/*
 * Bundles attacked: forged, truncated, reordered, another user's, writable by others, under a
 * folder others may change, a FIFO or a folder in its place, changed or cut or swapped while
 * open, an entry filed under another key, a payload for another machine under the right key.
 * Each must be refused (the bundle) or skipped (the entry), never loaded, never block, never
 * crash; a good bundle next to them must keep working. An export that fails, or is killed while
 * it writes, leaves its folder as it was; one killed before its rename leaves a temporary that
 * the next export into the folder removes (never a live export's). The manifest's lock is its
 * open file's, and a forked child's own. A read that fails for now (a network
 * disk's EIO, no descriptors or memory) is no verdict on an entry. The test makes its bundles
 * with the library's own export, and forges others with the format's encoders (src/bundle.c);
 * read failures are injected (JB_TEST_HOOKS). The manifest beside them: each line one write()
 * (this program's own write() counts the calls), one lock a forked child cannot share.
 */
#include "../src/kernels/kernels.h"
#include "deadline.h"
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef JB_TEST_HOOKS
#error "test_bundle needs a JB_TEST_HOOKS build of the library"
#endif

#define N 32
#define ENTRIES 3

static char base[PATH_MAX];
static jb_device *device;

static const char *at(const char *name)
{
    static char paths[8][PATH_MAX + 64]; /* the last 8 stay valid */
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", base, name);
    return p;
}

static void shell(const char *fmt, const char *a, const char *b)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    CHECK(system(cmd) == 0, "failed: %s", cmd);
}

static jb_custom_kernel *salted(int salt)
{
    char body[128], name[32];
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %d.0f;", salt);
    snprintf(name, sizeof name, "bundled_%d", salt);
    return f32_kernel(name, body);
}

/* Launches kernel `salt` once; whether its output was right. */
static bool launch_salt(int salt)
{
    jb_custom_kernel *k = salted(salt);
    jb_array *x = f32_filled(device, N, 1.0f), *y = NULL;
    bool exact = f32_launch(&y, k, &x, 1, N) == JB_OK && f32_all_equal(y, N, 1.0f + salt);
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    return exact;
}

/* Opens the bundle at `path`: NULL on refusal, with the message kept in `why`. */
static jb_bundle *open_bundle(const char *path, char *why, size_t len)
{
    jb_bundle *b = NULL;
    int status = jb__bundle_open(path, "the test", &b);
    snprintf(why, len, "%s", status == JB_OK ? "" : jb_last_error_message());
    return b;
}

static void refused(const char *what, const char *path, const char *expected)
{
    char why[1024];
    jb_bundle *b = open_bundle(path, why, sizeof why);
    CHECK(!b && strstr(why, expected), "%s: want a refusal with '%s', got '%s'", what, expected,
          b ? "(opened)" : why);
    jb__bundle_free(b);
}

/* How many entries of an opened bundle read back good. */
static size_t good_entries(jb_bundle *b)
{
    size_t good = 0;
    for (size_t i = 0; b && i < jb__bundle_count(b); i++) {
        unsigned char *data = NULL;
        good += jb__bundle_read_entry(b, i, &data) == JB_OK;
        free(data);
    }
    return good;
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *data = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        rewind(f);
        data = n > 0 ? malloc((size_t)n) : NULL;
        if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
            free(data);
            data = NULL;
        }
        *size = data ? (size_t)n : 0;
    }
    if (f)
        fclose(f);
    return data;
}

static void write_file(const char *path, const void *data, size_t size, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    CHECK(fd >= 0 && write(fd, data, size) == (ssize_t)size, "write %s: %s", path,
          strerror(errno));
    if (fd >= 0)
        close(fd);
    chmod(path, mode);
}

/* A bundle of one entry written by hand (the test's forger): `key` and `payload`, its index
 * filed under `filed` (the key's own digest when NULL). */
static void forge(const char *path, const char *key, size_t key_bytes, const void *payload,
                  size_t payload_bytes, const unsigned char *filed)
{
    jb_bundle_entry e = {.offset = JB_BUNDLE_HEADER_BYTES,
                         .key_bytes = key_bytes,
                         .payload_bytes = payload_bytes};
    jb__sha256(key, key_bytes, e.digest);
    if (filed)
        memcpy(e.digest, filed, JB_SHA256_BYTES);
    jb_sha256 h;
    jb__sha256_init(&h);
    jb__sha256_update(&h, key, key_bytes);
    jb__sha256_update(&h, payload, payload_bytes);
    jb__sha256_final(&h, e.checksum);
    char fingerprints[128];
    int fp = snprintf(fingerprints, sizeof fingerprints, "jitbridge bundle\nkey-format %d\n",
                      JB_KEY_FORMAT);
    size_t entry_end = JB_BUNDLE_HEADER_BYTES + key_bytes + payload_bytes;
    jb_bundle_header hd = {.count = 1,
                           .fingerprints_offset = entry_end,
                           .fingerprints_bytes = (uint64_t)fp,
                           .index_offset = entry_end + (uint64_t)fp,
                           .index_bytes = JB_BUNDLE_INDEX_BYTES};
    hd.file_bytes = hd.index_offset + hd.index_bytes;
    unsigned char index[JB_BUNDLE_INDEX_BYTES], header[JB_BUNDLE_HEADER_BYTES];
    jb__bundle_index_encode(index, &e);
    jb__sha256_init(&h);
    jb__sha256_update(&h, fingerprints, (size_t)fp);
    jb__sha256_update(&h, index, sizeof index);
    jb__sha256_final(&h, hd.tables_digest);
    jb__bundle_header_encode(header, &hd);
    size_t size = (size_t)hd.file_bytes;
    unsigned char *file = malloc(size);
    memcpy(file, header, sizeof header);
    memcpy(file + JB_BUNDLE_HEADER_BYTES, key, key_bytes);
    memcpy(file + JB_BUNDLE_HEADER_BYTES + key_bytes, payload, payload_bytes);
    memcpy(file + entry_end, fingerprints, (size_t)fp);
    memcpy(file + entry_end + fp, index, sizeof index);
    write_file(path, file, size, 0600);
    free(file);
}

/* The disk key of kernel `salt` and its stored code (read from the cache folder). */
static bool stored(int salt, jb_disk_key *key, jb_blob *code)
{
    jb_custom_kernel *k = salted(salt);
    const char *names[] = {k->name};
    bool ok = jb__module_disk_key(device, k->module_name, names, 1, k->sources[device->backend->dialect],
                           key) == JB_OK &&
              jb__disk_load(key, code);
    jb_custom_kernel_free(k);
    return ok;
}

static void files_refused(const char *good)
{
    char why[1024];
    jb_bundle *b = open_bundle(good, why, sizeof why);
    CHECK(b && jb__bundle_count(b) == ENTRIES && good_entries(b) == ENTRIES,
          "the exported bundle: %s", why);
    jb__bundle_free(b);

    size_t size;
    unsigned char *bytes = read_file(good, &size);
    CHECK(bytes && size > 400, "cannot read %s back", good);
    if (!bytes)
        return;
    write_file(at("cut.jbb"), bytes, size - 10, 0600);
    refused("cut short", at("cut.jbb"), "cut short");
    write_file(at("grown.jbb"), bytes, size, 0600);
    shell("printf x >> %s%s", at("grown.jbb"), "");
    refused("grown", at("grown.jbb"), "has grown");
    unsigned char *copy = malloc(size);
    memcpy(copy, bytes, size);
    copy[size - 5] ^= 1; /* in the index */
    write_file(at("index.jbb"), copy, size, 0600);
    refused("a changed index", at("index.jbb"), "fails its SHA-256");
    memcpy(copy, bytes, size);
    copy[8] = 9; /* the format */
    write_file(at("format.jbb"), copy, size, 0600);
    refused("another format", at("format.jbb"), "format this library does not read");
    memcpy(copy, bytes, size);
    memcpy(copy, "JBCACHE", 8);
    write_file(at("magic.jbb"), copy, size, 0600);
    refused("no magic", at("magic.jbb"), "no JBBUNDLE magic");
    write_file(at("tiny.jbb"), bytes, 20, 0600);
    refused("a few bytes", at("tiny.jbb"), "too short");
    free(copy);

    write_file(at("open.jbb"), bytes, size, 0620);
    refused("group-writable", at("open.jbb"), "writable by group or others");
    write_file(at("world.jbb"), bytes, size, 0602);
    refused("writable by others", at("world.jbb"), "writable by group or others");
    if (geteuid() == 0) {
        write_file(at("theirs.jbb"), bytes, size, 0644);
        CHECK(chown(at("theirs.jbb"), 65534, 65534) == 0, "chown: %s", strerror(errno));
        refused("another user's", at("theirs.jbb"), "owned by another user");
    } else {
        printf("test_bundle: another user's bundle needs root to make; not tried\n");
    }
    CHECK(mkfifo(at("fifo.jbb"), 0600) == 0, "mkfifo: %s", strerror(errno));
    refused("a FIFO (must not block)", at("fifo.jbb"), "not a regular file");
    CHECK(mkdir(at("folder.jbb"), 0700) == 0, "mkdir: %s", strerror(errno));
    refused("a folder", at("folder.jbb"), "not a regular file");

    /* Under a folder others may change (no sticky bit): refused; with the sticky bit: used. */
    CHECK(mkdir(at("shared"), 0777) == 0 && chmod(at("shared"), 0777) == 0, "mkdir shared");
    write_file(at("shared/b.jbb"), bytes, size, 0644);
    refused("under a folder others may write", at("shared/b.jbb"), "writable by others");
    CHECK(chmod(at("shared"), 01777) == 0, "chmod: %s", strerror(errno));
    b = open_bundle(at("shared/b.jbb"), why, sizeof why);
    CHECK(b != NULL, "under a sticky folder: %s", why);
    jb__bundle_free(b);
    /* A link to a good bundle is followed to it (the target's folders are what is checked). */
    CHECK(symlink(good, at("link.jbb")) == 0, "symlink: %s", strerror(errno));
    b = open_bundle(at("link.jbb"), why, sizeof why);
    CHECK(b && good_entries(b) == ENTRIES, "through a link: %s", why);
    jb__bundle_free(b);
    free(bytes);
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The good bundle with one field of its header (at byte `field`) or of its index (entry
 * `entry`'s byte `field`, entry >= 0) set to `value`, and its tables' SHA-256 made right again,
 * as an attacker would: only the library's bounds and order checks stand in the way. */
static void crafted(const char *what, const unsigned char *bytes, size_t size, int entry,
                    size_t field, uint64_t value, const char *expected)
{
    unsigned char *copy = malloc(size);
    memcpy(copy, bytes, size);
    uint64_t fingerprints_at = le64(copy + 24), index_at = le64(copy + 40);
    unsigned char *target =
        entry < 0 ? copy : copy + index_at + (size_t)entry * JB_BUNDLE_INDEX_BYTES;
    if (field == 0) /* a whole index entry: entry `value`'s, copied over this one */
        memcpy(target, copy + index_at + value * JB_BUNDLE_INDEX_BYTES, JB_BUNDLE_INDEX_BYTES);
    else
        put_le64(target + field, value);
    jb__sha256(copy + fingerprints_at, size - fingerprints_at, copy + 64);
    write_file(at("crafted.jbb"), copy, size, 0600);
    refused(what, at("crafted.jbb"), expected);
    free(copy);
}

/* Lengths and offsets that overflow, point outside the file or at the tables, and a key filed
 * twice: each refused when the bundle is opened, with no read outside what was allocated. */
static void crafted_tables(const char *good)
{
    size_t size;
    unsigned char *bytes = read_file(good, &size);
    CHECK(bytes && le64(bytes + 16) == ENTRIES, "cannot read %s back", good);
    if (!bytes)
        return;
    const uint64_t huge = UINT64_MAX - 7;
    crafted("a key filed twice", bytes, size, 1, 0, 0, "not sorted");
    crafted("a key length near 2^64", bytes, size, 0, 72, huge, "outside its entries");
    crafted("a payload length near 2^64", bytes, size, 0, 80, huge, "outside its entries");
    crafted("key and payload lengths summing past 2^64", bytes, size, 0, 72, 1ull << 63,
            "outside its entries");
    crafted("an offset near 2^64", bytes, size, 0, 64, huge, "outside its entries");
    crafted("an entry inside the header", bytes, size, 0, 64, 8, "outside its entries");
    crafted("an entry running into the tables", bytes, size, ENTRIES - 1, 80,
            le64(bytes + 24), "outside its entries");
    crafted("an empty key", bytes, size, 0, 72, 0, "outside its entries");
    crafted("a count whose index size wraps", bytes, size, -1, 16,
            (UINT64_MAX / JB_BUNDLE_INDEX_BYTES) + 2, "malformed header");
    crafted("an index offset near 2^64", bytes, size, -1, 40, huge, "malformed header");
    crafted("fingerprints overlapping the index", bytes, size, -1, 32, le64(bytes + 32) + 8,
            "malformed header");
    free(bytes);
}

/* In a child (its limit dies with it): a disk that fills while a bundle is written
 * (RLIMIT_FSIZE: writes past the limit fail with EFBIG, as ENOSPC would); the export must fail
 * and say so. */
static bool export_fails_on_a_full_disk(void *path)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {.rlim_cur = JB_BUNDLE_HEADER_BYTES + 64,
                           .rlim_max = JB_BUNDLE_HEADER_BYTES + 64};
    uint64_t exported = 9, skipped = 9;
    return setrlimit(RLIMIT_FSIZE, &limit) == 0 &&
           jb_disk_cache_export(&exported, &skipped, path, NULL) == JB_ERR_SYSTEM &&
           strstr(jb_last_error_message(), "failed") && exported == 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in the folder `path`, sorted, each ended by a newline (malloc'd; NULL when it
 * cannot be listed). */
static char *names_in(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return NULL;
    char *names[64];
    size_t count = 0, bytes = 1;
    struct dirent *e;
    while ((e = readdir(d)) && count < 64)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            names[count] = strdup(e->d_name);
            if (names[count])
                bytes += strlen(names[count++]) + 1;
        }
    closedir(d);
    qsort(names, count, sizeof *names, by_name);
    char *list = malloc(bytes);
    for (size_t i = 0, at = 0; list && i < count; i++)
        at += (size_t)sprintf(list + at, "%s\n", names[i]);
    if (list && count == 0)
        list[0] = '\0';
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    return list;
}

/* Checks that the folder `path` holds exactly `want` (names_in's form) after `what`. */
static void folder_holds(const char *path, const char *want, const char *what)
{
    char *names = names_in(path);
    CHECK(names && strcmp(names, want) == 0, "%s left the folder holding\n%swhere it held\n%s",
          what, names ? names : "(cannot list it)\n", want);
    free(names);
}

/* The failed export leaves the bundle already at its path as it was, and no temporary beside
 * it. `folder` tells the unnamed file's run from the named temporary's. */
static void export_on_a_full_disk(const char *good, const char *folder)
{
    char old[PATH_MAX + 64];
    snprintf(old, sizeof old, "%s/old.jbb", at(folder));
    shell("mkdir -p %s%s", at(folder), "");
    shell("cp %s %s", good, old);
    size_t before_size;
    unsigned char *before = read_file(old, &before_size);
    CHECK(child_says_yes("export onto a full disk", 120, export_fails_on_a_full_disk, old),
          "an export onto a full disk did not fail with JB_ERR_SYSTEM");
    size_t after_size;
    unsigned char *after = read_file(old, &after_size);
    CHECK(before && after && before_size == after_size && !memcmp(before, after, after_size),
          "the bundle already there was changed by a failed export");
    folder_holds(at(folder), "old.jbb\n", "an export onto a full disk");
    free(before);
    free(after);
}

static void killed_here(void *ctx, const char *arg)
{
    (void)ctx;
    (void)arg;
    raise(SIGKILL);
}

/* The child's export of `old`, on the calling thread: killed at its test point. */
static void export_in_child(char *old)
{
    uint64_t exported, skipped;
    jb_disk_cache_export(&exported, &skipped, old, NULL);
}

static void *export_on_its_thread(void *old)
{
    export_in_child(old);
    _exit(3); /* the point was never reached */
}

/* The child's export on a thread of its own, the main thread gone: /proc/self/fd is gone with
 * it, and the export names its file through the thread's own /proc entry. */
static void export_after_main_exited(char *old)
{
    pthread_t exporter;
    if (pthread_create(&exporter, NULL, export_on_its_thread, old) != 0)
        _exit(4);
    pthread_exit(NULL); /* the process lives on in the exporter */
}

/* An export (`export` in a child, over a copy of `good` at FOLDER/old.jbb) killed (SIGKILL, as
 * by the OOM killer) once its bundle is written whole, before it is named, leaves the
 * destination's folder as it was: the kernel frees the unnamed file. */
static void export_killed(const char *good, const char *folder, void (*export)(char *old),
                          const char *what)
{
    char old[PATH_MAX + 64];
    snprintf(old, sizeof old, "%s/old.jbb", at(folder));
    shell("mkdir -p %s%s", at(folder), "");
    shell("cp %s %s", good, old);
    pid_t pid = fork_with_deadline(what, 120);
    if (pid == 0) {
        jb__test_set_point(JB_TEST_BUNDLE_WRITTEN, killed_here, NULL);
        export(old);
        _exit(3); /* the point was never reached */
    }
    int status = wait_child_with_deadline(pid, 125, what);
    CHECK(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "%s: the export was not killed at its test point (wait status %d)", what, status);
    /* A file system without unnamed files (NFS, overlayfs before Linux 6.6) gets the named
     * temporary, which a kill leaves, as jitbridge.h says. */
    int probe = open(at(folder), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (probe >= 0) {
        close(probe);
        folder_holds(at(folder), "old.jbb\n", what);
    } else {
        printf("%s: no unnamed files in %s (%s): the named temporary may stay\n", what,
               at(folder), strerror(errno));
    }
    size_t before_size, after_size;
    unsigned char *before = read_file(good, &before_size), *after = read_file(old, &after_size);
    CHECK(before && after && before_size == after_size && !memcmp(before, after, after_size),
          "%s: the bundle already there was changed", what);
    free(before);
    free(after);
}

/* Whether `path` is a bundle with every entry good. */
static bool whole_bundle(const char *path)
{
    char why[1024];
    jb_bundle *b = open_bundle(path, why, sizeof why);
    bool whole = b && good_entries(b) == ENTRIES;
    jb__bundle_free(b);
    return whole;
}

/* Exports the cache to FOLDER/other.jbb in this process. */
static void export_beside(const char *folder)
{
    char other[PATH_MAX + 64];
    snprintf(other, sizeof other, "%s/other.jbb", folder);
    uint64_t exported = 0, skipped = 9;
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, other, NULL));
}

/* A child's export over a copy of `good` at FOLDER/old.jbb, killed (SIGKILL) once its bundle is
 * linked under its temporary name, before the rename (`named`: no unnamed files, a temporary
 * from the start): the temporary stays, and the next export into the folder removes it; the
 * old bundle is as it was. */
static void killed_before_the_rename(const char *good, const char *folder, bool named)
{
    const char *what = named ? "an export through a named temporary killed before its rename"
                             : "an export killed before its rename";
    char old[PATH_MAX + 64];
    snprintf(old, sizeof old, "%s/old.jbb", at(folder));
    shell("mkdir -p %s%s", at(folder), "");
    shell("cp %s %s", good, old);
    pid_t pid = fork_with_deadline(what, 120);
    if (pid == 0) {
        jb__test_set_unnamed_refused(named);
        jb__test_set_point(JB_TEST_BUNDLE_LINKED, killed_here, NULL);
        export_in_child(old);
        _exit(3); /* the point was never reached */
    }
    int status = wait_child_with_deadline(pid, 125, what);
    CHECK(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "%s: the export was not killed at its test point (wait status %d)", what, status);
    export_beside(at(folder));
    folder_holds(at(folder), "old.jbb\nother.jbb\n", what);
    size_t before_size, after_size;
    unsigned char *before = read_file(good, &before_size), *after = read_file(old, &after_size);
    CHECK(before && after && before_size == after_size && !memcmp(before, after, after_size),
          "%s: the bundle already there was changed", what);
    free(before);
    free(after);
}

/* A child's export to FOLDER/new.jbb, where nothing was, killed (SIGKILL) right after its link:
 * the bundle is whole at its name and nothing else is in the folder (no temporary name). */
static void killed_after_linking_a_new_bundle(void)
{
    const char *what = "an export to a new name killed after its link";
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/new.jbb", at("linked"));
    shell("mkdir -p %s%s", at("linked"), "");
    pid_t pid = fork_with_deadline(what, 120);
    if (pid == 0) {
        jb__test_set_point(JB_TEST_BUNDLE_LINKED, killed_here, NULL);
        export_in_child(path);
        _exit(3);
    }
    int status = wait_child_with_deadline(pid, 125, what);
    CHECK(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "%s: the export was not killed at its test point (wait status %d)", what, status);
    folder_holds(at("linked"), "new.jbb\n", what);
    CHECK(whole_bundle(path), "%s: the bundle at its name is not whole", what);
}

static int pause_pipes[2][2]; /* [0]: the child says it is at the point; [1]: it may go on */

static void paused_here(void *ctx, const char *arg)
{
    (void)ctx;
    (void)arg;
    char byte = 1;
    if (write(pause_pipes[0][1], &byte, 1) != 1 || read(pause_pipes[1][0], &byte, 1) != 1)
        _exit(5);
}

/* A child's export over FOLDER/old.jbb, paused with its bundle under its temporary name, while
 * this process exports into the same folder: the live export's temporary is not swept, and the
 * paused export then puts its bundle in place. */
static void live_export_not_swept(const char *good, const char *folder, bool named)
{
    const char *what = named ? "a live export through a named temporary, paused before its "
                               "rename"
                             : "a live export paused before its rename";
    char old[PATH_MAX + 64];
    snprintf(old, sizeof old, "%s/old.jbb", at(folder));
    shell("mkdir -p %s%s", at(folder), "");
    shell("cp %s %s", good, old);
    CHECK(pipe(pause_pipes[0]) == 0 && pipe(pause_pipes[1]) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork_with_deadline(what, 120);
    if (pid == 0) {
        jb__test_set_unnamed_refused(named);
        jb__test_set_point(JB_TEST_BUNDLE_LINKED, paused_here, NULL);
        uint64_t exported = 0, skipped = 9;
        _exit(jb_disk_cache_export(&exported, &skipped, old, NULL) == JB_OK ? 0 : 4);
    }
    /* Only the child writes the first and reads the second: a child that died reads as EOF. */
    close(pause_pipes[0][1]);
    close(pause_pipes[1][0]);
    char byte = 0;
    CHECK(read(pause_pipes[0][0], &byte, 1) == 1, "%s: the child never reached its point", what);
    export_beside(at(folder));
    char *names = names_in(at(folder));
    CHECK(names && strstr(names, ".export.tmp\n"), "%s: its temporary was swept (the folder "
          "holds\n%s)", what, names ? names : "(cannot list it)\n");
    free(names);
    CHECK(write(pause_pipes[1][1], &byte, 1) == 1, "%s: cannot resume the child", what);
    int status = wait_child_with_deadline(pid, 125, what);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "%s: the paused export failed (wait status %d)", what, status);
    folder_holds(at(folder), "old.jbb\nother.jbb\n", what);
    CHECK(whole_bundle(old), "%s: the bundle it put in place is not whole", what);
    close(pause_pipes[0][0]);
    close(pause_pipes[1][1]);
}

/* A destination whose last part is "." or ".." names a folder: refused before anything is
 * written. */
static void export_to_a_folder_name(void)
{
    shell("mkdir -p %s%s", at("dots/inner"), "");
    /* "." from inside the test's folder: a regression writes nowhere else. */
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(cwd >= 0 && chdir(at("dots/inner")) == 0, "cannot go into %s", at("dots/inner"));
    const char *names[] = {"dots/inner/.", "dots/inner/..", "."};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s", strcmp(names[i], ".") == 0 ? "." : at(names[i]));
        uint64_t exported = 9, skipped = 9;
        jb_status status = jb_disk_cache_export(&exported, &skipped, path, NULL);
        CHECK(status == JB_ERR_INVALID_ARGUMENT &&
                  strstr(jb_last_error_message(), "does not name a file") && exported == 0,
              "an export to %s: status %d, '%s'", path, (int)status, jb_last_error_message());
    }
    CHECK(cwd >= 0 && fchdir(cwd) == 0, "cannot go back to the working folder");
    if (cwd >= 0)
        close(cwd);
    folder_holds(at("dots"), "inner\n", "an export to a folder's name");
    folder_holds(at("dots/inner"), "", "an export to a folder's name");
}

/* A destination named as an export's temporary would be swept by the next export beside it:
 * refused before anything is written. */
static void export_to_a_temporary_name(void)
{
    shell("mkdir -p %s%s", at("tmpname"), "");
    uint64_t exported = 9, skipped = 9;
    jb_status status = jb_disk_cache_export(
        &exported, &skipped, at("tmpname/0123456789abcdef0123456789abcdef.export.tmp"), NULL);
    CHECK(status == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "temporary") &&
              exported == 0,
          "an export to a temporary's name: status %d, '%s'", (int)status,
          jb_last_error_message());
    folder_holds(at("tmpname"), "", "an export to a temporary's name");
}

/* Where the system has no unnamed files (before Linux 3.11, some file systems, no /proc), an
 * export writes a named temporary instead: it still works, and a failed one still leaves no
 * temporary. */
static void export_without_unnamed_files(const char *good)
{
    jb__test_set_unnamed_refused(true);
    shell("mkdir -p %s%s", at("named"), "");
    uint64_t exported = 0, skipped = 9;
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, at("named/new.jbb"), NULL));
    CHECK(exported == ENTRIES && skipped == 0,
          "with a named temporary: exported %llu, skipped %llu", (unsigned long long)exported,
          (unsigned long long)skipped);
    char why[1024];
    jb_bundle *b = open_bundle(at("named/new.jbb"), why, sizeof why);
    CHECK(b && good_entries(b) == ENTRIES, "a bundle written under a named temporary: %s",
          b ? "bad entries" : why);
    jb__bundle_free(b);
    folder_holds(at("named"), "new.jbb\n", "an export through a named temporary");
    export_on_a_full_disk(good, "full-named");
    jb__test_set_unnamed_refused(false);
}

/* Changed, cut or replaced after it was opened: entries go bad (or stay the old file's), and
 * nothing faults as a mapping of a cut file would. */
static void changed_while_open(const char *good)
{
    char why[1024];
    const char *path = at("live.jbb");
    shell("cp %s %s", good, path);
    jb_bundle *b = open_bundle(path, why, sizeof why);
    CHECK(b != NULL, "%s", why);
    if (!b)
        return;
    /* Another bundle renamed over it: the handle still reads the one opened. */
    shell("printf junk > %s%s", path, ".new");
    shell("mv %s.new %s", path, path);
    CHECK(good_entries(b) == ENTRIES, "a rename over the bundle changed what it reads");
    jb__bundle_free(b);

    shell("cp %s %s", good, path);
    b = open_bundle(path, why, sizeof why);
    const jb_bundle_entry *e = b ? jb__bundle_entry(b, 1) : NULL;
    int fd = open(path, O_WRONLY);
    char junk = 'X';
    CHECK(e && fd >= 0 && pwrite(fd, &junk, 1, (off_t)(e->offset + e->key_bytes + 3)) == 1,
          "cannot change the bundle in place");
    CHECK(good_entries(b) == ENTRIES - 1, "a byte changed in place was not caught");
    CHECK(ftruncate(fd, JB_BUNDLE_HEADER_BYTES + 10) == 0, "truncate: %s", strerror(errno));
    CHECK(good_entries(b) == 0, "entries of a bundle cut short still read good");
    if (fd >= 0)
        close(fd);
    jb__bundle_free(b);
}

/* A read that fails for now leaves the entry as good as it was: not skipped from then on, not
 * counted or warned as rejected, read good once the failure passes. Any other read failure
 * (EINVAL here) is a verdict: the entry is skipped from then on. */
static void transient_reads(const char *good)
{
    char why[1024];
    jb_bundle *b = open_bundle(good, why, sizeof why);
    CHECK(b != NULL, "%s", why);
    if (!b)
        return;
    static const int transient[] = {EIO, EMFILE, ENOMEM, EAGAIN};
    jb_counters_reset();
    for (size_t t = 0; t < sizeof transient / sizeof *transient; t++) {
        jb__test_set_bundle_read_error(transient[t]);
        unsigned char *data = NULL;
        int status = jb__bundle_read_entry(b, 0, &data);
        CHECK(status == JB_ERR_SYSTEM && !data && strstr(jb_last_error_message(), "for now"),
              "a read failing with %s: status %d, '%s'", strerror(transient[t]), status,
              jb_last_error_message());
        CHECK(good_entries(b) == 0, "an entry read good while its reads failed");
        jb__test_set_bundle_read_error(0);
        size_t after = good_entries(b);
        CHECK(after == ENTRIES, "after reads failed with %s, %zu of %d entries read good",
              strerror(transient[t]), after, ENTRIES);
    }
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(c.bundle_rejected == 0, "reads that failed for now counted %llu rejected entries",
          (unsigned long long)c.bundle_rejected);
    jb__test_set_bundle_read_error(EINVAL);
    CHECK(good_entries(b) == 0, "an entry read good while its reads failed");
    jb__test_set_bundle_read_error(0);
    CHECK(good_entries(b) == 0, "an entry whose read failed with EINVAL read good later");
    jb_counters_get(&c, sizeof c);
    CHECK(c.bundle_rejected == ENTRIES, "EINVAL: %llu rejected, want %d",
          (unsigned long long)c.bundle_rejected, ENTRIES);
    jb__bundle_free(b);
}

/* Forged bundles of one entry with right checksums. */
static void forged_entries(void)
{
    jb_disk_key key = {0}, other = {0};
    jb_blob code = {0}, other_code = {0};
    bool have = stored(1, &key, &code) && stored(2, &other, &other_code);
    CHECK(have, "the exported kernels are not in the cache folder");
    if (!have)
        return;
    char why[1024];
    /* Kernel 2's code filed under kernel 1's key: the index says 1, the key text says 2. */
    forge(at("misfiled.jbb"), other.text, other.bytes, other_code.data, other_code.size,
          key.digest);
    jb_bundle *b = open_bundle(at("misfiled.jbb"), why, sizeof why);
    CHECK(b && good_entries(b) == 0, "an entry filed under another key read good (%s)", why);
    jb__bundle_free(b);
    /* An entry with right checksums and key whose key text is not a key at all: import skips. */
    forge(at("notakey.jbb"), "not a key", 9, "x", 1, NULL);
    uint64_t imported = 9, skipped = 9;
    CHECK_OK(jb_disk_cache_import(&imported, &skipped, at("notakey.jbb")));
    CHECK(imported == 0 && skipped == 1, "a non-key imported: %llu, skipped %llu",
          (unsigned long long)imported, (unsigned long long)skipped);

    /* Kernel 3 never ran: its right key with code for another machine (ELF e_machine). */
    jb_custom_kernel *k = salted(3);
    const char *names[] = {k->name};
    jb_disk_key third = {0};
    CHECK_OK(jb__module_disk_key(device, k->module_name, names, 1, k->sources[device->backend->dialect],
                          &third));
    unsigned char *foreign = malloc(code.size);
    memcpy(foreign, code.data, code.size);
    foreign[18] = foreign[18] == 62 ? 183 : 62;
    foreign[19] = 0;
    forge(at("foreign.jbb"), third.text, third.bytes, foreign, code.size, NULL);
    jb_counters_reset();
    CHECK_OK(jb_disk_cache_add_bundle(at("foreign.jbb")));
    CHECK(launch_salt(3), "the kernel behind a refused payload gave a wrong output");
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(c.builds == 1 && c.bundle_hits == 0 && c.bundle_rejected == 1,
          "a foreign payload: builds %llu (1), bundle hits %llu (0), rejected %llu (1)",
          (unsigned long long)c.builds, (unsigned long long)c.bundle_hits,
          (unsigned long long)c.bundle_rejected);
    jb_custom_kernel_free(k);
    free(foreign);
    jb__disk_key_free(&third);
    free(code.data);
    free(other_code.data);
    jb__disk_key_free(&key);
    jb__disk_key_free(&other);
}

/* A loader's refusal for now (its own EMFILE, no memory, a driver out of memory) is no verdict on
 * a bundle's entry: the launch falls back to the compiler, and once the refusal passes the entry
 * serves. A refusal for good (JB_ERR_LOAD) skips the entry from then on. Each kernel here is in
 * no other tier: its code compiled by the test and forged into a bundle of its own. */
static void transient_loads(void)
{
    const int salts[] = {40, 41};
    const jb_status refusals[] = {JB_ERR_SYSTEM, JB_ERR_LOAD};
    for (int i = 0; i < 2; i++) {
        jb_custom_kernel *k = salted(salts[i]);
        const char *names[] = {k->name};
        const char *source = k->sources[device->backend->dialect];
        jb_disk_key key = {0};
        jb_blob code = {0};
        CHECK_OK(jb__module_disk_key(device, k->module_name, names, 1, source, &key));
        CHECK_OK(device->backend->compile(device, k->module_name, source, &k->options, &code));
        char name[32];
        snprintf(name, sizeof name, "loads_%d.jbb", salts[i]);
        forge(at(name), key.text, key.bytes, code.data, code.size, NULL);
        CHECK_OK(jb_disk_cache_add_bundle(at(name)));

        jb_counters_reset();
        jb__test_set_load_failure(refusals[i]);
        jb_array *x = f32_filled(device, N, 1.0f), *y = NULL;
        jb_status status = f32_launch(&y, k, &x, 1, N);
        jb__test_set_load_failure(JB_OK);
        CHECK(status == refusals[i], "salt %d: a launch whose loads all fail: status %d (%d)",
              salts[i], status, refusals[i]);
        jb_array_free(y);
        jb_array_free(x);
        jb_counters c;
        jb_counters_get(&c, sizeof c);
        CHECK(c.bundle_rejected == (refusals[i] == JB_ERR_LOAD),
              "salt %d: a loader's %s refusal counted %llu rejected entries", salts[i],
              refusals[i] == JB_ERR_LOAD ? "lasting" : "passing",
              (unsigned long long)c.bundle_rejected);

        jb_counters_reset();
        CHECK(launch_salt(salts[i]), "salt %d: a wrong output once loads work", salts[i]);
        jb_counters_get(&c, sizeof c);
        bool lasting = refusals[i] == JB_ERR_LOAD;
        CHECK(c.bundle_hits == !lasting && c.builds == lasting,
              "salt %d, after a %s refusal: bundle hits %llu (want %d), builds %llu (want %d)",
              salts[i], lasting ? "lasting" : "passing", (unsigned long long)c.bundle_hits,
              !lasting, (unsigned long long)c.builds, lasting);
        jb__disk_key_free(&key);
        free(code.data);
        jb_custom_kernel_free(k);
    }
}

/* A cache of more entries than a reader opens is not exported into a bundle no one could use:
 * the export fails, says why, and leaves nothing at its path (the limit, 2^20, lowered to 2 by
 * a test hook for both the reader and the writer). */
static void too_many_entries(const char *good)
{
    jb__test_set_bundle_max_entries(2);
    char why[1024];
    jb_bundle *b = open_bundle(good, why, sizeof why);
    CHECK(!b && strstr(why, "malformed header"), "a bundle past the limit opened: %s", why);
    jb__bundle_free(b);
    uint64_t exported = 9, skipped = 9;
    jb_status status = jb_disk_cache_export(&exported, &skipped, at("many.jbb"), NULL);
    CHECK(status == JB_ERR_UNSUPPORTED && strstr(jb_last_error_message(), "at most 2"),
          "an export past the limit: status %d, '%s'", (int)status,
          status ? jb_last_error_message() : "");
    CHECK(exported == 0 && access(at("many.jbb"), F_OK) != 0,
          "an export past the limit wrote a bundle of %llu entries", (unsigned long long)exported);
    jb__test_set_bundle_max_entries(0);
}

/* Run with relative JITBRIDGE_CACHE_BUNDLE and JITBRIDGE_MANIFEST, in the folder they name
 * things in: the host chdir's away before its first launch, as daemons do. The bundle must
 * still serve every kernel (sealed: nothing may compile) and the manifest's lines land where
 * the process started. 0 when so. */
static int relative_child(void)
{
    char start[PATH_MAX], manifest[PATH_MAX + 32];
    if (!getcwd(start, sizeof start) || chdir("/") != 0)
        return 2;
    snprintf(manifest, sizeof manifest, "%s/relative.manifest", start);
    device = test_device();
    if (!device || jb_seal(JB_SEAL_ERROR) != JB_OK)
        return 3;
    jb_counters_reset();
    bool exact = true;
    for (int salt = 0; salt < ENTRIES; salt++)
        exact = launch_salt(salt) && exact;
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    if (!exact || c.bundle_hits != ENTRIES)
        return 4;
    return access(manifest, F_OK) == 0 ? 0 : 5;
}

/* Whether another process, opening the file at `path` itself, can lock it now. */
static bool another_process_locks(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        int fd = open(path, O_RDWR | O_CLOEXEC);
        _exit(fd >= 0 && fcntl(fd, F_SETLK, &lock) == 0 ? 10 : 11);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 10;
}

/* With a manifest open: the manifest's lock outlives another descriptor of the file opened and
 * closed in the process (a process's own lock, F_SETLK, was dropped by that close); while this
 * process holds it, a child it forks (which shares the open file) cannot take it, and can once
 * this process lets go (with a lock of the open file's and no handle of its own, parent and
 * child both held it, and a child's look could fall in the middle of its parent's line). 0 when
 * so. */
static int manifest_lock_child(void)
{
    device = test_device();
    if (!device || !launch_salt(0)) /* opens the manifest */
        return 2;
    if (!jb__test_manifest_lock(true))
        return 3;
    int other = open(getenv("JITBRIDGE_MANIFEST"), O_RDONLY | O_CLOEXEC);
    if (other < 0 || close(other) != 0)
        return 4;
    if (another_process_locks(getenv("JITBRIDGE_MANIFEST")))
        return 8;
    for (int round = 0; round < 2; round++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(jb__test_manifest_lock(true) ? 10 : 11);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
            return 9;
        if (WEXITSTATUS(status) != (round == 0 ? 11 : 10))
            return round == 0 ? 5 : 6;
        if (round == 0 && !jb__test_manifest_lock(false))
            return 7;
    }
    return 0;
}

/* The file whose write() calls are counted (device and inode; 0: none), and the count. */
static dev_t watched_dev;
static ino_t watched_ino;
static atomic_int watched_writes;

/* This program's write(), which the library (linked in statically) calls too: it counts the
 * calls on the watched file, then writes. A manifest line in two calls can interleave with
 * another process's line; counting sees that on every run, where a race would seldom. */
ssize_t write(int fd, const void *data, size_t bytes)
{
    struct stat st;
    if (watched_ino && fstat(fd, &st) == 0 && st.st_dev == watched_dev &&
        st.st_ino == watched_ino)
        atomic_fetch_add(&watched_writes, 1);
    return syscall(SYS_write, fd, data, bytes);
}

/* With JITBRIDGE_MANIFEST naming an empty file: the ENTRIES kernels, loaded from the cache
 * folder, each write their line in one write() call. 0 when so. */
static int manifest_line_child(void)
{
    struct stat st;
    if (stat(getenv("JITBRIDGE_MANIFEST"), &st) != 0 || st.st_size != 0)
        return 2;
    watched_dev = st.st_dev;
    watched_ino = st.st_ino;
    device = test_device();
    for (int salt = 0; salt < ENTRIES; salt++)
        if (!device || !launch_salt(salt))
            return 3;
    FILE *f = fopen(getenv("JITBRIDGE_MANIFEST"), "r");
    int lines = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        lines += c == '\n';
    if (f)
        fclose(f);
    int writes = atomic_load(&watched_writes);
    printf("manifest: %d lines in %d write() calls\n", lines, writes);
    fflush(stdout);
    return lines != ENTRIES ? 4 : writes != lines ? 5 : 0;
}

#define APP_TEXT "the application's own file\n"

/* In a child forked after the application closed the manifest's descriptor and opened a file of
 * its own at that number: the descriptor is the application's as it was (no O_APPEND, no
 * O_NONBLOCK, not close-on-exec, its position kept, the same file), and a kernel the child
 * loads writes nothing into it. 0 when so. */
static int reused_descriptor_grandchild(int fd, const struct stat *app)
{
    struct stat now;
    int flags = fcntl(fd, F_GETFL), fd_flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fd_flags < 0 || fstat(fd, &now) != 0 || now.st_dev != app->st_dev ||
        now.st_ino != app->st_ino)
        return 20;
    if ((flags & (O_APPEND | O_NONBLOCK)) || (fd_flags & FD_CLOEXEC) ||
        lseek(fd, 0, SEEK_CUR) != 3)
        return 21;
    return launch_salt(1) ? 0 : 22;
}

/* The application closes the manifest's descriptor and reuses its number for its own file (or,
 * `same_file`, a descriptor of its own on the manifest, read only); a child forked then must
 * not reopen the manifest over it or close it, nor write a line into it. 0 when so. */
static int manifest_reused_child(bool same_file)
{
    device = test_device();
    if (!device || !launch_salt(0)) /* opens the manifest */
        return 2;
    int fd = jb__test_manifest_fd();
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s.app", getenv("JITBRIDGE_MANIFEST"));
    if (fd < 0 || close(fd) != 0)
        return 3;
    int app = same_file ? open(getenv("JITBRIDGE_MANIFEST"), O_RDONLY)
                        : open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (app < 0 || (app != fd && (dup2(app, fd) != fd || close(app) != 0)))
        return 4;
    struct stat st;
    if ((!same_file && write(fd, APP_TEXT, strlen(APP_TEXT)) != (ssize_t)strlen(APP_TEXT)) ||
        lseek(fd, 3, SEEK_SET) != 3 || fstat(fd, &st) != 0)
        return 5;
    pid_t pid = fork();
    if (pid == 0)
        _exit(reused_descriptor_grandchild(fd, &st));
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 6;
    if (WEXITSTATUS(status) != 0 || same_file)
        return WEXITSTATUS(status);
    char text[256];
    ssize_t n = pread(fd, text, sizeof text, 0);
    return n == (ssize_t)strlen(APP_TEXT) && memcmp(text, APP_TEXT, (size_t)n) == 0 ? 0 : 7;
}

/* Runs this test binary again as `mode`, in `dir` (NULL: here), with `env` (NAME, VALUE pairs,
 * NULL-ended) set: its exit status, -1 when it did not exit (or not start). */
static int run_self(const char *argv0, const char *mode, const char *dir, const char *const *env)
{
    char self[PATH_MAX];
    CHECK(realpath(argv0, self) != NULL, "realpath %s: %s", argv0, strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        if (dir && chdir(dir) != 0)
            _exit(126);
        for (; env && *env; env += 2)
            setenv(env[0], env[1], 1);
        execl(self, self, mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static void manifest_lock_and_fork(const char *argv0)
{
    const char *env[] = {"JITBRIDGE_MANIFEST", at("lock.manifest"), NULL};
    int status = run_self(argv0, "manifest-lock-child", NULL, env);
    CHECK(status == 0, "the manifest's lock and fork: %s (child status %d)",
          status == 5   ? "a forked child took the lock its parent held"
          : status == 6 ? "a forked child could not take the lock its parent let go"
          : status == 8 ? "another descriptor's close dropped the lock"
                        : "the child failed",
          status);
    const char *modes[] = {"manifest-reused-child", "manifest-reused-same-child"};
    for (int i = 0; i < 2; i++) {
        const char *reused[] = {"JITBRIDGE_MANIFEST", at("reused.manifest"), NULL};
        status = run_self(argv0, modes[i], NULL, reused);
        CHECK(status == 0, "a child forked after the manifest's descriptor was reused (%s): %s "
              "(child status %d)",
              i ? "on the manifest itself" : "for another file",
              status == 20   ? "the descriptor leads to another file, or is closed"
              : status == 21 ? "the descriptor's flags or position changed"
              : status == 7  ? "a line was written into the application's file"
                             : "the child failed",
              status);
    }
}

/* Each manifest line is one write() on the O_APPEND handle: processes appending together then
 * never interleave their lines. */
static void manifest_line_per_write(const char *argv0)
{
    write_file(at("lines.manifest"), "", 0, 0600);
    const char *env[] = {"JITBRIDGE_MANIFEST", at("lines.manifest"), NULL};
    int status = run_self(argv0, "manifest-line-child", NULL, env);
    CHECK(status == 0, "manifest lines: %s (child status %d)",
          status == 4   ? "not one line per kernel"
          : status == 5 ? "a line was written in more than one write() call"
                        : "the child failed",
          status);
}

/* Relative paths in the variables mean the folder the process started in, as a relative
 * JITBRIDGE_CACHE_DIR does, not wherever the host has gone by its first launch. */
static void relative_variables(const char *argv0)
{
    const char *env[] = {"JITBRIDGE_CACHE_DIR",    at("relative-cache"),
                         "JITBRIDGE_CACHE_BUNDLE", "good.jbb",
                         "JITBRIDGE_MANIFEST",     "relative.manifest",
                         NULL};
    int status = run_self(argv0, "relative-child", base, env);
    CHECK(status == 0, "relative variables after a chdir: %s (child status %d)",
          status == 4   ? "the bundle served nothing"
          : status == 5 ? "the manifest was not written where the process started"
                        : "the child failed",
          status);
}

/* An export that finds nothing to write makes a bundle of no entries, which opens; nothing is
 * sorted or hashed from a null pointer on the way (UBSan stops on that). */
static void export_nothing(const char *path, const char *manifest, uint64_t want_skipped,
                           const char *what)
{
    uint64_t exported = 9, skipped = 9;
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, path, manifest));
    CHECK(exported == 0 && skipped == want_skipped, "%s: exported %llu, skipped %llu (want %llu)",
          what, (unsigned long long)exported, (unsigned long long)skipped,
          (unsigned long long)want_skipped);
    char why[1024];
    jb_bundle *b = open_bundle(path, why, sizeof why);
    CHECK(b && jb__bundle_count(b) == 0, "%s: the bundle of no entries: %s", what,
          b ? "has entries" : why);
    jb__bundle_free(b);
}

/* Run with an empty cache folder: its export is a bundle of no entries. 0 when so. */
static int empty_cache_child(void)
{
    export_nothing("empty-cache.jbb", NULL, 0, "an empty cache folder");
    return check_summary("empty-cache-child");
}

/* Empty exports: an empty cache folder (a fresh process), a manifest of no lines, one naming
 * only a kernel that is not stored. */
static void empty_exports(const char *argv0)
{
    shell("mkdir -m 700 %s%s", at("empty-cache"), "");
    const char *env[] = {"JITBRIDGE_CACHE_DIR", at("empty-cache"), NULL};
    int status = run_self(argv0, "empty-cache-child", base, env);
    CHECK(status == 0, "an export of an empty cache folder: child status %d", status);
    write_file(at("empty.manifest"), "", 0, 0600);
    export_nothing(at("empty-manifest.jbb"), at("empty.manifest"), 0, "a manifest of no lines");
    const char line[] = "jbm1\tffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff\tcpu"
                        "\tx86_64\tnowhere\tnowhere\tcompiled\n";
    write_file(at("unstored.manifest"), line, sizeof line - 1, 0600);
    export_nothing(at("unstored.jbb"), at("unstored.manifest"), 1,
                   "a manifest naming a kernel not stored");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "relative-child") == 0)
        return relative_child();
    if (argc == 2 && strcmp(argv[1], "manifest-lock-child") == 0)
        return manifest_lock_child();
    if (argc == 2 && strcmp(argv[1], "manifest-line-child") == 0)
        return manifest_line_child();
    if (argc == 2 && strcmp(argv[1], "empty-cache-child") == 0)
        return empty_cache_child();
    if (argc == 2 && strcmp(argv[1], "manifest-reused-child") == 0)
        return manifest_reused_child(false);
    if (argc == 2 && strcmp(argv[1], "manifest-reused-same-child") == 0)
        return manifest_reused_child(true);
    char made[] = "/tmp/jb_bundle_XXXXXX";
    CHECK(mkdtemp(made) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(base, sizeof base, "%s", made);
    /* This process's own cache folder, on: a valgrind run turns the disk cache off. */
    setenv("JITBRIDGE_CACHE_DIR", at("cache"), 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    unsetenv("JITBRIDGE_CACHE_BUNDLE");
    device = test_device();
    if (!device)
        return check_summary("test_bundle");
    for (int salt = 0; salt < ENTRIES; salt++)
        CHECK(launch_salt(salt), "kernel %d gave a wrong output", salt);
    uint64_t exported = 0, skipped = 9;
    static char good[PATH_MAX + 64];
    snprintf(good, sizeof good, "%s", at("good.jbb"));
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, good, NULL));
    CHECK(exported == ENTRIES && skipped == 0, "exported %llu, skipped %llu",
          (unsigned long long)exported, (unsigned long long)skipped);
    files_refused(good);
    crafted_tables(good);
    export_on_a_full_disk(good, "full");
    export_killed(good, "killed", export_in_child, "an export killed while it writes");
    export_killed(good, "orphan", export_after_main_exited,
                  "an export killed while it writes, the main thread gone");
    killed_before_the_rename(good, "renamed", false);
    killed_before_the_rename(good, "renamed-named", true);
    killed_after_linking_a_new_bundle();
    live_export_not_swept(good, "live", false);
    live_export_not_swept(good, "live-named", true);
    export_to_a_folder_name();
    export_to_a_temporary_name();
    export_without_unnamed_files(good);
    changed_while_open(good);
    transient_reads(good);
    forged_entries();
    relative_variables(argv[0]);
    manifest_lock_and_fork(argv[0]);
    manifest_line_per_write(argv[0]);
    too_many_entries(good);
    empty_exports(argv[0]);
    transient_loads();
    shell("rm -rf %s%s", base, "");
    return check_summary("test_bundle");
}
