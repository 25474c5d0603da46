/*
 * Leases where locks do not work (ENOLCK, as on a network file system without a lock daemon):
 * the process compiles alone, as without leases, with one warning for the process; nothing
 * waits, nothing fails. Built with JB_TEST_HOOKS (the lock's failure is injected). The many-
 * process cases (one compile among eight, killed and stopped holders, junk at a lease's name)
 * are in tests/lease.rs.
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef JB_TEST_HOOKS
#error "test_lease needs a JB_TEST_HOOKS build of the library"
#endif

#define N 16

static atomic_int warnings;
static char last_warning[1024];

static void keep_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    atomic_fetch_add(&warnings, 1);
    snprintf(last_warning, sizeof last_warning, "%s", message);
}

static bool launch(jb_device *device, const char *name, float value)
{
    char body[96];
    snprintf(body, sizeof body, "out[thread_index()] = %.1ff;", (double)value);
    jb_custom_kernel *k = f32_kernel(name, body);
    jb_array *x = f32_filled(device, N, 0.0f), *y = NULL;
    bool exact = f32_launch(&y, k, &x, 1, N) == JB_OK && f32_all_equal(y, N, value);
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    return exact;
}

/* A failed compile's mark: within the compile timeout (2 s here) the next taker compiles
 * without the lease; past it, or ahead of the clock (left before a reboot of a machine that had
 * been up longer), it is a lease as any other, taken, and removed by its holder's success. So is
 * a mark in the window on a file last changed long ago (left before a reboot of a machine up for
 * less than the timeout now). */
static void failure_marks(const char *cache)
{
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "2000", 1);
    char text[] = "a key of the failure marks";
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/leases/%.*s.lease", cache, JB_DISK_ENTRY_HEX, key.file);
    uint64_t now = jb__now_ns(), second = 1000000000ULL;
    const struct {
        const char *what;
        uint64_t mark;
        bool old_file;
    } marks[] = {
        {"a mark past the timeout", now > 3 * second ? now - 3 * second : 0, false},
        {"a mark ahead of the clock", now + 3600 * second, false},
        {"a recent mark on a file changed an hour ago", now, true},
    };
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++) {
        jb_lease lease;
        CHECK(jb__lease_acquire(&key, NULL, jb__now_ns() + 5 * second, &lease) == JB_LEASE_HELD,
              "%s: the first taker", marks[i].what);
        jb__lease_release(&lease, true);
        CHECK(access(path, F_OK) == 0, "%s: a failed compile's lease file was removed",
              marks[i].what);
        CHECK(jb__lease_acquire(&key, NULL, jb__now_ns() + second, &lease) == JB_LEASE_NONE,
              "%s: a fresh failure mark was not honoured", marks[i].what);
        if (!marks[i].mark)
            continue; /* a machine up for under 3 s: no mark is past the timeout yet */
        int fd = open(path, O_WRONLY);
        struct timespec hour_ago[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
        CHECK(fd >= 0 &&
                  pwrite(fd, &marks[i].mark, sizeof marks[i].mark, 0) ==
                      (ssize_t)sizeof marks[i].mark &&
                  (!marks[i].old_file || futimens(fd, hour_ago) == 0) && close(fd) == 0,
              "%s: ageing the mark: %s", marks[i].what, strerror(errno));
        CHECK(jb__lease_acquire(&key, NULL, jb__now_ns() + second, &lease) == JB_LEASE_HELD,
              "%s kept the lease from being taken", marks[i].what);
        jb__lease_release(&lease, false);
        CHECK(access(path, F_OK) != 0, "%s: the holder's success left the old mark",
              marks[i].what);
    }
    unsetenv("JITBRIDGE_COMPILE_TIMEOUT_MS");
}

/* A lease file at `name` in `leases` holding `mark` (none when 0), last changed an hour ago
 * when `old`. */
static void lease_file(const char *leases, const char *name, uint64_t mark, bool old)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", leases, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0 && (!mark || write(fd, &mark, sizeof mark) == (ssize_t)sizeof mark),
          "making %s: %s", path, strerror(errno));
    struct timespec hour_ago[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    CHECK(!old || futimens(fd, hour_ago) == 0, "ageing %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
}

static bool lease_file_there(const char *leases, const char *name)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", leases, name);
    return access(path, F_OK) == 0;
}

/* Leaving a failure's mark sweeps away the lease files no one holds that were last changed
 * over a compile timeout ago, with a mark past or none (a killed holder's): a server compiling
 * many kernels that fail, for months, keeps one timeout's marks, not every one ever left. A
 * held lease, a recent file and the new mark stay. */
static void marks_swept(const char *cache)
{
    char leases[PATH_MAX + 16];
    snprintf(leases, sizeof leases, "%s/leases", cache);
    const char *past = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.lease",
               *killed = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.lease",
               *recent = "cccccccccccccccccccccccccccccccc.lease";
    lease_file(leases, past, 1, true);
    lease_file(leases, killed, 0, true);
    lease_file(leases, recent, 0, false);
    char held_text[] = "a key held while others are swept", text[] = "a key whose compile fails";
    jb_disk_key held_key = {.text = held_text, .bytes = sizeof held_text - 1},
                key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&held_key);
    jb__disk_key_name(&key);
    jb_lease held, failing;
    uint64_t deadline = jb__now_ns() + 5000000000ULL;
    CHECK(jb__lease_acquire(&held_key, NULL, deadline, &held) == JB_LEASE_HELD &&
              jb__lease_acquire(&key, NULL, deadline, &failing) == JB_LEASE_HELD,
          "two leases");
    struct timespec hour_ago[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    CHECK(futimens(held.fd, hour_ago) == 0, "ageing the held lease: %s", strerror(errno));
    jb__lease_release(&failing, true);
    CHECK(!lease_file_there(leases, past) && !lease_file_there(leases, killed),
          "an old mark (%s) or a killed holder's file (%s) was not swept",
          lease_file_there(leases, past) ? "stays" : "gone",
          lease_file_there(leases, killed) ? "stays" : "gone");
    CHECK(lease_file_there(leases, recent) && lease_file_there(leases, held.name) &&
              lease_file_there(leases, failing.name),
          "a recent file, a held lease or the new mark was swept");
    jb__lease_release(&held, false);
}

/* In a process of its own (as nobody when the test runs as root), a lease file made under a
 * umask that takes the owner's write bit (processes of other umasks share the folder): a
 * taker of a held lease waits for it and times out; it must never remove the holder's file
 * (which it could not open for writing) and take the lease as well. 0 when it waited, 5 when
 * it took the lease too. */
static int umask_child(void)
{
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        return 2;
    if (!jb__disk_cache_usable())
        return 3;
    char text[] = "a key of the umask test";
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    jb_lease first, second;
    /* leases/ made by a process of the usual umask, the lease file by one of 0277 */
    if (jb__lease_acquire(&key, NULL, jb__now_ns() + 5000000000ULL, &first) != JB_LEASE_HELD)
        return 4;
    jb__lease_release(&first, false);
    umask(0277);
    if (jb__lease_acquire(&key, NULL, jb__now_ns() + 5000000000ULL, &first) != JB_LEASE_HELD)
        return 4;
    jb_lease_outcome outcome = jb__lease_acquire(&key, NULL, jb__now_ns() + 200000000ULL, &second);
    jb__lease_release(&second, false);
    jb__lease_release(&first, false);
    return outcome == JB_LEASE_HELD ? 5 : outcome == JB_LEASE_NONE ? 0 : 6;
}

static void umask_without_write(const char *self, const char *base)
{
    char cache[PATH_MAX];
    snprintf(cache, sizeof cache, "%s/umask-cache", base);
    if (geteuid() == 0)
        CHECK(chmod(base, 0755) == 0 && mkdir(cache, 0700) == 0 &&
                  chown(cache, 65534, 65534) == 0,
              "a cache folder for nobody: %s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        setenv("JITBRIDGE_CACHE_DIR", cache, 1);
        execl(self, self, "umask-child", (char *)NULL);
        _exit(7);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the umask child");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
        printf("test_lease: cannot become nobody; the umask case is not tried\n");
        return;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "under umask 0277 a held lease was %s (child status %d)",
          WEXITSTATUS(status) == 5 ? "taken by a second taker too" : "not tried",
          WEXITSTATUS(status));
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "umask-child") == 0)
        return umask_child();
    char base[] = "/tmp/jb_lease_XXXXXX", cache[PATH_MAX];
    CHECK(mkdtemp(base) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(cache, sizeof cache, "%s/cache", base);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1); /* on, and ours: valgrind runs turn it off */
    unsetenv("JITBRIDGE_DISK_CACHE");
    jb_device *device = test_device();
    if (!device)
        return check_summary("test_lease");
    CHECK_OK(jb_set_log_callback(keep_warning, NULL));
    jb__test_set_lease_error(ENOLCK);
    jb_counters_reset();
    uint64_t start = jb__now_ns();
    CHECK(launch(device, "lease_a", 3.0f) && launch(device, "lease_b", 4.0f),
          "a kernel compiled without a lease gave a wrong output");
    double ms = (double)(jb__now_ns() - start) / 1e6;
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(c.builds == 2 && c.lease_fallbacks == 2 && c.lease_waits == 0 && c.lease_timeouts == 0,
          "without locks: builds %llu (2), fallbacks %llu (2), waits %llu, timeouts %llu",
          (unsigned long long)c.builds, (unsigned long long)c.lease_fallbacks,
          (unsigned long long)c.lease_waits, (unsigned long long)c.lease_timeouts);
    CHECK(warnings == 1 && strstr(last_warning, "leases between processes are off") &&
              strstr(last_warning, strerror(ENOLCK)),
          "want one warning naming ENOLCK, got %d: '%s'", (int)warnings, last_warning);
    CHECK(ms < 20000.0, "two compiles without locks took %.0f ms", ms);
    /* Locks back: the next kernel takes its lease, and the folder keeps no lease file. */
    jb__test_set_lease_error(0);
    jb_counters_reset();
    CHECK(launch(device, "lease_c", 5.0f), "a wrong output with the lease");
    jb_counters_get(&c, sizeof c);
    CHECK(c.builds == 1 && c.lease_fallbacks == 0, "with locks: builds %llu, fallbacks %llu",
          (unsigned long long)c.builds, (unsigned long long)c.lease_fallbacks);
    char leases[PATH_MAX + 16], cmd[3 * PATH_MAX];
    snprintf(leases, sizeof leases, "%s/leases", cache);
    snprintf(cmd, sizeof cmd, "test -d %s && test -z \"$(ls -A %s)\"", leases, leases);
    CHECK(system(cmd) == 0, "the lease's file was left in %s", leases);
    failure_marks(cache);
    marks_swept(cache);
    jb_set_log_callback(NULL, NULL);
    umask_without_write(argv[0], base);
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    CHECK(system(cmd) == 0, "cannot remove %s", base);
    return check_summary("test_lease");
}
