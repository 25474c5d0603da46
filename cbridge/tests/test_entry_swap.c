/*
 * A disk cache entry is checked on the handle it was opened with, never again by its name:
 * between the open and the check, another user's process could put an acceptable file at the
 * name while the handle still reads an unacceptable one. A test point right after the open
 * renames a good copy of the entry over its name, the opened file being group-writable, or
 * linked elsewhere too. It must be rejected, nothing loaded from it, and the kernel compiled
 * again. Built with JB_TEST_HOOKS; cpu.
 */
#include "../src/kernels/kernels.h"
#include "deadline.h"
#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#ifndef JB_TEST_HOOKS
#error "test_entry_swap needs a JB_TEST_HOOKS build of the library"
#endif

#define N 16

static char root[] = "/tmp/jb-entry-swap-XXXXXX";
static char cache[64], good[64];

/* The swap the test point makes once: the good copy goes over the entry just opened. */
typedef struct swap {
    char entry[128];
    bool done;
} swap;

static void rename_good_copy_over(void *ctx, const char *name)
{
    swap *s = ctx;
    if (s->done || strcmp(name, s->entry) != 0)
        return;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", cache, name);
    s->done = rename(good, path) == 0;
    CHECK(s->done, "renaming the good copy over %s: %s", path, strerror(errno));
}

static jb_custom_kernel *scaling_kernel(int factor)
{
    char body[96];
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] * %d.0f;", factor);
    return f32_kernel("entry_swap", body);
}

/* The one regular file in the cache folder whose name is not in `seen` (which it joins);
 * false if there is none. */
static bool new_entry(char seen[][128], int *num_seen, char *out)
{
    DIR *dir = opendir(cache);
    bool found = false;
    for (struct dirent *e; dir && !found && (e = readdir(dir));) {
        size_t len = strlen(e->d_name); /* entries only: not the tag, not a record (.jbr) */
        if (e->d_type != DT_REG || len < 4 || strcmp(e->d_name + len - 4, ".jbc") != 0)
            continue;
        found = true;
        for (int i = 0; found && i < *num_seen; i++)
            found = strcmp(seen[i], e->d_name) != 0;
        if (found) {
            snprintf(out, 128, "%.127s", e->d_name);
            snprintf(seen[(*num_seen)++], 128, "%.127s", e->d_name);
        }
    }
    if (dir)
        closedir(dir);
    return found;
}

static bool copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
    char buf[65536];
    ssize_t n = 0;
    bool ok = in >= 0 && out >= 0;
    while (ok && (n = read(in, buf, sizeof buf)) > 0)
        ok = write(out, buf, (size_t)n) == n;
    ok = ok && n == 0;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return ok;
}

/* In a child: builds the kernel, which stores its entry; 0 on success. */
static int build_in_child(int factor)
{
    jb_device *cpu = NULL;
    jb_custom_kernel *k = scaling_kernel(factor);
    int status = jb_device_get(&cpu, JB_DEVICE_CPU, 0);
    if (status == JB_OK)
        status = jb_custom_kernel_prepare(k, cpu);
    jb_custom_kernel_free(k);
    return status == JB_OK ? 0 : 1;
}

enum { GROUP_WRITABLE, LINKED_ELSEWHERE };

/* How this program was started: the child that stores an entry runs it again from there. */
static const char *program_path;

static void swapped_after_open(int bad_kind, char seen[][128], int *num_seen)
{
    const char *what = bad_kind == GROUP_WRITABLE ? "group-writable" : "linked-elsewhere";
    int factor = 2 + bad_kind;
    /* Another process stores the entry: this one has never built the kernel. */
    /* The child runs this program anew: a child forked from this threaded process (its stream's
     * worker) may inherit an allocator lock that worker held at the fork (ASan's, which has no
     * fork handler: the child then hung in the lease keeper's calloc). */
    pid_t pid = fork_with_deadline("a child that stores an entry", 60);
    if (pid == 0) {
        char arg[16];
        snprintf(arg, sizeof arg, "%d", factor);
        /* argv[0], not /proc/self/exe: under valgrind that is valgrind's own launcher. */
        execl(program_path, "test_entry_swap", "build-child", arg, (char *)NULL);
        _exit(127);
    }
    int ws = wait_child_with_deadline(pid, 65, "a child that stores an entry");
    CHECK(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child's build failed");
    swap s = {"", false};
    if (!new_entry(seen, num_seen, s.entry)) {
        CHECK(false, "%s: the child stored no entry in %s", what, cache);
        return;
    }
    char entry[256], links[2][256];
    snprintf(entry, sizeof entry, "%s/%s", cache, s.entry);
    CHECK(copy_file(entry, good), "copying %s", entry);
    for (int i = 0; i < 2; i++) {
        snprintf(links[i], sizeof links[i], "%s/link-%d", root, i);
        /* Two more: the rename over its name takes one away, and one more than one is bad. */
        if (bad_kind == LINKED_ELSEWHERE)
            CHECK(link(entry, links[i]) == 0, "link %s", entry);
    }
    if (bad_kind == GROUP_WRITABLE)
        CHECK(chmod(entry, 0620) == 0, "chmod %s", entry);

    jb__test_set_point(JB_TEST_ENTRY_OPENED, rename_good_copy_over, &s);
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    jb_device *cpu = NULL;
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    jb_custom_kernel *k = scaling_kernel(factor);
    jb_array *x = f32_filled(cpu, N, 1.0f), *y = NULL;
    CHECK_OK(f32_launch(&y, k, &x, 1, N));
    CHECK(f32_all_equal(y, N, (float)factor), "%s: the kernel's output is wrong", what);
    jb_counters_get(&after, sizeof after);
    jb__test_set_point(JB_TEST_ENTRY_OPENED, NULL, NULL);

    CHECK(s.done, "%s: the entry was never opened (no disk lookup?)", what);
    CHECK(after.disk_hits == before.disk_hits && after.builds == before.builds + 1,
          "a %s entry, swapped for a good file after its open, was loaded (%llu disk hits, %llu "
          "builds): it was checked by name, not on its open handle",
          what, (unsigned long long)(after.disk_hits - before.disk_hits),
          (unsigned long long)(after.builds - before.builds));
    CHECK(after.disk_rejected > before.disk_rejected, "%s: the entry was not counted rejected",
          what);
    jb_array_free(x);
    jb_array_free(y);
    jb_custom_kernel_free(k);
    for (int i = 0; i < 2; i++)
        unlink(links[i]);
    unlink(good);
}

int main(int argc, char **argv)
{
    program_path = argv[0];
    if (argc == 3 && strcmp(argv[1], "build-child") == 0)
        return build_in_child(atoi(argv[2]));
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    snprintf(cache, sizeof cache, "%s/cache", root);
    snprintf(good, sizeof good, "%s/good", root);
    CHECK(mkdir(cache, 0700) == 0, "mkdir %s", cache);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    unsetenv("JITBRIDGE_DISK_CACHE"); /* on, whatever the caller's runs say */
    jb_device *cpu = NULL;
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    if (!cpu)
        return check_summary("test_entry_swap");
    default_stream_first(cpu);
    char seen[8][128];
    int num_seen = 0;
    swapped_after_open(GROUP_WRITABLE, seen, &num_seen);
    swapped_after_open(LINKED_ELSEWHERE, seen, &num_seen);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "%s", cmd);
    return check_summary("test_entry_swap");
}
