/*
 * Leases where locks do not work (ENOLCK, as on a network file system without a lock daemon):
 * the process compiles alone, as without leases, with one warning for the process; nothing
 * waits, nothing fails. Built with JB_TEST_HOOKS (the lock's failure is injected). Then failure
 * marks, stopped holders (each thread stopped, or the process by kill -STOP while it compiles),
 * a slow holder never robbed, two waiters one compile, a taker stopped between its lock and its
 * touch, a failed takeover that naps, folders at a lease's name, a leases/ others may read.
 * More many-process cases (one compile among eight, killed holders, junk at a lease's name) are
 * in tests/lease.rs.
 */
#include "../src/base/keeper.h"
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* Takes a lease as a build does (the deadline: the compile timeout from the first try). */
static jb_lease_outcome take(const jb_disk_key *key, uint64_t deadline_ns, jb_lease *out)
{
    (void)deadline_ns;
    return jb__lease_acquire(key, NULL, out);
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
        CHECK(take(&key, jb__now_ns() + 5 * second, &lease) == JB_LEASE_HELD,
              "%s: the first taker", marks[i].what);
        jb__lease_release(&lease, true);
        CHECK(access(path, F_OK) == 0, "%s: a failed compile's lease file was removed",
              marks[i].what);
        CHECK(take(&key, jb__now_ns() + second, &lease) == JB_LEASE_NONE,
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
        CHECK(take(&key, jb__now_ns() + second, &lease) == JB_LEASE_HELD,
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
    CHECK(take(&held_key, deadline, &held) == JB_LEASE_HELD &&
              take(&key, deadline, &failing) == JB_LEASE_HELD,
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

/* (a2) A sweep that has locked an old lease file no one held removes it only if the name
 * still leads to it: between its look and its removal (the point), a waiter may have taken the
 * file for a stopped holder's and removed it, and another process made the name anew and
 * locked it; that new lease stays. */
typedef struct swept_name {
    const char *leases, *name;
    int fd; /* the new lease, held */
} swept_name;

static void made_anew(void *ctx, const char *arg)
{
    swept_name *n = ctx;
    if (strcmp(arg, n->name) != 0 || n->fd >= 0)
        return;
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", n->leases, n->name);
    unlink(path);
    n->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(n->fd >= 0 && jb__lock_open_file(n->fd, F_WRLCK, JB_LOCK_OR_FLOCK) == 0,
          "making %s anew: %s", path, strerror(errno));
}

static void sweep_leaves_a_name_made_anew(const char *cache)
{
    char leases[PATH_MAX + 16];
    snprintf(leases, sizeof leases, "%s/leases", cache);
    swept_name n = {leases, "dddddddddddddddddddddddddddddddd.lease", -1};
    lease_file(leases, n.name, 0, true); /* a killed holder's, an hour old */
    char text[] = "a key whose failure sweeps";
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    jb_lease failing;
    CHECK(take(&key, jb__now_ns() + 5000000000ULL, &failing) == JB_LEASE_HELD, "a lease");
    jb__test_set_point(JB_TEST_LEASE_SWEEPING, made_anew, &n);
    jb__lease_release(&failing, true);
    jb__test_set_point(JB_TEST_LEASE_SWEEPING, NULL, NULL);
    CHECK(n.fd >= 0, "the sweep never came to the old file");
    struct stat held, named;
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", leases, n.name);
    CHECK(n.fd >= 0 && fstat(n.fd, &held) == 0 && stat(path, &named) == 0 &&
              held.st_ino == named.st_ino,
          "a sweep removed a lease made anew at the name it had looked at");
    if (n.fd >= 0)
        close(n.fd);
    unlink(path);
}

/* In a process of its own (as nobody when the test runs as root), a lease file made under a
 * umask that takes the owner's write bit (processes of other umasks share the folder): a
 * taker of a held lease finds it busy; it must never remove the holder's file
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
    if (take(&key, jb__now_ns() + 5000000000ULL, &first) != JB_LEASE_HELD)
        return 4;
    jb__lease_release(&first, false);
    umask(0277);
    if (take(&key, jb__now_ns() + 5000000000ULL, &first) != JB_LEASE_HELD)
        return 4;
    jb_lease_outcome outcome = take(&key, jb__now_ns() + 200000000ULL, &second);
    jb__lease_release(&second, false);
    jb__lease_release(&first, false);
    return outcome == JB_LEASE_HELD ? 5 : outcome == JB_LEASE_BUSY ? 0 : 6;
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

/* ---- stopped and slow holders (issue 35): each case in processes of its own, all with one
 * compiler, a wrapper whose first compile of a kernel named lease_stall_* stalls (until `go`
 * is made, or for `seconds`) and whose other compiles each add a line to `compiles` ---- */

typedef struct lease_case {
    char dir[PATH_MAX], cache[PATH_MAX + 16], cc[PATH_MAX + 16];
} lease_case;

static void case_make(lease_case *c, const char *base, const char *name, const char *stall)
{
    snprintf(c->dir, sizeof c->dir, "%s/%s", base, name);
    snprintf(c->cache, sizeof c->cache, "%s/cache", c->dir);
    snprintf(c->cc, sizeof c->cc, "%s/cc", c->dir);
    CHECK(mkdir(c->dir, 0700) == 0, "mkdir %s: %s", c->dir, strerror(errno));
    FILE *f = fopen(c->cc, "w");
    CHECK(f != NULL, "making %s: %s", c->cc, strerror(errno));
    if (!f)
        return;
    fprintf(f,
            "#!/bin/sh\n"
            "[ \"$1\" = --version ] && exec /usr/bin/cc \"$@\"\n"
            "for a in \"$@\"; do [ -f \"$a\" ] && grep -q lease_stall \"$a\" && stall=1; done\n"
            "if [ -n \"$stall\" ] && mkdir %s/stalled 2>/dev/null; then\n"
            "  echo $$ > %s/started.new && mv %s/started.new %s/started\n"
            "  %s\n"
            "else\n"
            "  echo $$ >> %s/compiles\n"
            "fi\n"
            "exec /usr/bin/cc \"$@\"\n",
            c->dir, c->dir, c->dir, c->dir, stall, c->dir);
    fclose(f);
    chmod(c->cc, 0700);
}

/* Starts this test as `mode` with the case's compiler and folder, a 60 s compile timeout (only
 * a takeover ends a wait for a stopped holder early) and the lease's stale time `stale_ms`. */
static pid_t case_start(const lease_case *c, const char *self, const char *mode,
                        const char *stale_ms, const char *kernels)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CC", c->cc, 1);
        setenv("JITBRIDGE_CACHE_DIR", c->cache, 1);
        setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "60000", 1);
        execl(self, self, mode, stale_ms, kernels, c->dir, (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0, "fork: %s", strerror(errno));
    return pid;
}

static bool case_exists(const lease_case *c, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", c->dir, name);
    return access(path, F_OK) == 0;
}

/* Polls for `name` in the case's folder (made by another process), 120 s at most. */
static bool case_await(const lease_case *c, const char *name)
{
    for (int i = 0; i < 120 * 200 && !case_exists(c, name); i++)
        usleep(5000);
    return case_exists(c, name);
}

static int case_lines(const lease_case *c, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", c->dir, name);
    return lines_in(path);
}

/* A child's exit status, 120 s at most (then it is killed: a wait that never ended). */
static int case_wait(pid_t pid)
{
    int status = 0;
    for (int i = 0; i < 120 * 200; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(5000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* A task's state letter (R, S, D, T, Z...) from /proc/<pid>/task/<task>/stat; 0 when gone. */
static char task_state(int pid, const char *task)
{
    char path[128], stat_text[512];
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", pid, task);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(stat_text, 1, sizeof stat_text - 1, f) : 0;
    if (f)
        fclose(f);
    stat_text[n] = '\0';
    const char *end = strrchr(stat_text, ')');
    return end && end[1] == ' ' ? end[2] : 0;
}

/* Whether `pid` runs (a zombie no one reaps, as under an init that reaps nothing, has ended). */
static bool running(int pid)
{
    char task[16];
    snprintf(task, sizeof task, "%d", pid);
    char state = task_state(pid, task);
    return state && state != 'Z' && state != 'X';
}

/* Lets the stalled compile go and ends the stopped holder, then waits for its compiler. */
static void case_end_holder(const lease_case *c, pid_t holder)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/go", c->dir);
    close(open(path, O_WRONLY | O_CREAT, 0600));
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    snprintf(path, sizeof path, "%s/started", c->dir);
    FILE *f = fopen(path, "r");
    int wrapper = 0;
    if (f && fscanf(f, "%d", &wrapper) != 1)
        wrapper = 0;
    if (f)
        fclose(f);
    for (int i = 0; wrapper > 0 && i < 60 * 200 && running(wrapper); i++)
        usleep(5000);
}

typedef struct case_result {
    unsigned long long builds, disk_hits, waits, timeouts, takeovers;
    int exact, k1_before_takeover;
} case_result;

static void case_write(const char *dir, const char *name, const case_result *r)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%llu %llu %llu %llu %llu %d %d\n", r->builds, r->disk_hits, r->waits,
                r->timeouts, r->takeovers, r->exact, r->k1_before_takeover);
        fclose(f);
    }
}

static bool case_read(const lease_case *c, const char *name, pid_t pid, case_result *r)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.%d", c->dir, name, (int)pid);
    FILE *f = fopen(path, "r");
    bool read = f && fscanf(f, "%llu %llu %llu %llu %llu %d %d", &r->builds, &r->disk_hits,
                            &r->waits, &r->timeouts, &r->takeovers, &r->exact,
                            &r->k1_before_takeover) == 7;
    if (f)
        fclose(f);
    return read;
}

static void counters_into(case_result *r)
{
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    r->builds = c.builds;
    r->disk_hits = c.disk_hits;
    r->waits = c.lease_waits;
    r->timeouts = c.lease_timeouts;
    r->takeovers = c.lease_stale_takeovers;
}

static float value_of(const char *kernel)
{
    return (float)(strlen(kernel) % 7) + (kernel[strlen(kernel) - 1] == '0' ? 10.0f : 20.0f);
}

/* Child "launch": launches each kernel of a comma-separated list, in order; writes its
 * counters to result.<pid>. */
static int launch_child(const char *kernels, const char *dir)
{
    jb_device *device = test_device();
    if (!device)
        return 3;
    char list[256];
    snprintf(list, sizeof list, "%s", kernels);
    case_result r = {0};
    r.exact = 1;
    for (char *save = NULL, *k = strtok_r(list, ",", &save); k; k = strtok_r(NULL, ",", &save))
        r.exact &= launch(device, k, value_of(k));
    counters_into(&r);
    case_write(dir, "result", &r);
    return 0;
}

/* Child "stopped-a": a thread launches lease_stall_k0, whose lease a stopped process holds;
 * once it waits, a second thread launches lease_k1, whose entry is in the folder: it must end
 * before the first thread's wait does (no takeover counted yet). */
typedef struct second_thread {
    jb_device *device;
    pthread_t thread;
    atomic_bool started;
    bool exact;
    unsigned long long takeovers_then;
} second_thread;

static void *launch_k1(void *arg)
{
    second_thread *t = arg;
    t->exact = launch(t->device, "lease_k1", value_of("lease_k1"));
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    t->takeovers_then = c.lease_stale_takeovers;
    return NULL;
}

static void start_k1(void *ctx, const char *arg)
{
    (void)arg;
    second_thread *t = ctx;
    if (!atomic_exchange(&t->started, true) && pthread_create(&t->thread, NULL, launch_k1, t))
        atomic_store(&t->started, false);
}

static int stopped_a_child(const char *dir)
{
    second_thread t = {.device = test_device()};
    if (!t.device)
        return 3;
    jb__test_set_point(JB_TEST_LEASE_WAITING, start_k1, &t);
    case_result r = {0};
    r.exact = launch(t.device, "lease_stall_k0", value_of("lease_stall_k0"));
    jb__test_set_point(JB_TEST_LEASE_WAITING, NULL, NULL);
    bool joined = atomic_load(&t.started) && pthread_join(t.thread, NULL) == 0;
    counters_into(&r);
    r.exact = r.exact && joined && t.exact;
    r.k1_before_takeover = joined && t.takeovers_then == 0;
    case_write(dir, "result", &r);
    return 0;
}

/* A holder that compiled lease_k1 and then stalls in lease_stall_k0's compile, stopped there
 * (SIGSTOP) once its compile started; 0 when it could not be set up. */
static pid_t stopped_holder(const lease_case *c, const char *self, const char *stale_ms)
{
    pid_t holder = case_start(c, self, "launch", stale_ms, "lease_k1,lease_stall_k0");
    CHECK(case_await(c, "started"), "%s: the holder's compile never started", c->dir);
    /* Its compiling thread sleeps in the compiler's vfork (state D) until the compile ends,
     * and a stop sent to the process waits for it there: sent to each thread, the stop takes
     * the others (the one that keeps the lease fresh among them) at once. */
    bool stopped = false;
    for (int i = 0; i < 60 * 200 && !stopped; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task", (int)holder);
        DIR *d = opendir(path);
        stopped = d != NULL;
        for (struct dirent *e; d && (e = readdir(d));) {
            char state = task_state((int)holder, e->d_name);
            if (state == 'R' || state == 'S')
                syscall(SYS_tgkill, (long)holder, atol(e->d_name), (long)SIGSTOP);
            stopped &= e->d_name[0] == '.' || (state != 'R' && state != 'S');
        }
        if (d)
            closedir(d);
        if (!stopped)
            usleep(5000);
    }
    CHECK(stopped, "%s: the holder was not stopped", c->dir);
    return holder;
}

/* (a) A holder stopped with k0's lease: another thread's k1, whose entry is in the folder, is
 * loaded while k0's launch waits (the wait holds no lock of the module cache), and k0's waiter
 * takes the lease over once its time stood still, long before the 60 s compile timeout. */
static void stopped_holder_holds_up_nothing(const char *self, const char *base)
{
    lease_case c;
    case_make(&c, base, "stopped", "while [ ! -e $(dirname $0)/go ]; do sleep 0.05; done");
    pid_t holder = stopped_holder(&c, self, "2000");
    pid_t waiter = case_start(&c, self, "stopped-a", "2000", "-");
    int status = case_wait(waiter);
    case_end_holder(&c, holder);
    case_result r;
    CHECK(status == 0 && case_read(&c, "result", waiter, &r), "the waiter ended with %d",
          status);
    if (status != 0)
        return;
    CHECK(r.exact, "a stopped holder: a wrong output");
    CHECK(r.k1_before_takeover, "a stopped holder: lease_k1, stored, waited for k0's lease");
    CHECK(r.takeovers == 1 && r.builds == 1 && r.timeouts == 0 && r.disk_hits == 1,
          "a stopped holder: takeovers %llu (1), builds %llu (1), timeouts %llu (0), disk hits "
          "%llu (1)",
          r.takeovers, r.builds, r.timeouts, r.disk_hits);
}

/* (b) A holder whose compile takes three stale times, alive: never robbed; its waiter loads
 * its entry and compiles nothing. */
static void slow_holder_is_not_robbed(const char *self, const char *base)
{
    lease_case c;
    case_make(&c, base, "slow", "sleep 3");
    pid_t holder = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    CHECK(case_await(&c, "started"), "the slow holder's compile never started");
    pid_t waiter = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    int waited = case_wait(waiter), held = case_wait(holder);
    case_result r, h;
    CHECK(waited == 0 && held == 0 && case_read(&c, "result", waiter, &r) &&
              case_read(&c, "result", holder, &h),
          "the slow holder's case ended with %d and %d", held, waited);
    if (waited != 0 || held != 0)
        return;
    CHECK(r.exact && h.exact, "a slow holder: a wrong output");
    CHECK(h.builds == 1 && r.builds == 0 && r.takeovers == 0 && r.waits == 1 &&
              case_lines(&c, "compiles") == 0,
          "a slow holder was robbed: waiter builds %llu (0), takeovers %llu (0), waits %llu "
          "(1), other compiles %d (0)",
          r.builds, r.takeovers, r.waits, case_lines(&c, "compiles"));
}

/* (c) Two processes wait for one stopped holder: one takes the lease over and compiles, the
 * other waits for it and loads its entry. */
static void two_waiters_one_compile(const char *self, const char *base)
{
    lease_case c;
    case_make(&c, base, "two", "while [ ! -e $(dirname $0)/go ]; do sleep 0.05; done");
    pid_t holder = stopped_holder(&c, self, "1000");
    pid_t first = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    pid_t second = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    int s1 = case_wait(first), s2 = case_wait(second);
    case_end_holder(&c, holder);
    case_result a, b;
    CHECK(s1 == 0 && s2 == 0 && case_read(&c, "result", first, &a) &&
              case_read(&c, "result", second, &b),
          "the two waiters ended with %d and %d", s1, s2);
    if (s1 != 0 || s2 != 0)
        return;
    CHECK(a.exact && b.exact, "two waiters: a wrong output");
    /* The compiles: the holder's lease_k1 and the takeover's. */
    CHECK(a.builds + b.builds == 1 && a.takeovers + b.takeovers == 1 &&
              case_lines(&c, "compiles") == 2 && a.timeouts + b.timeouts == 0,
          "two waiters of a stopped holder: builds %llu + %llu (1), takeovers %llu + %llu (1), "
          "compiles %d (2)",
          a.builds, b.builds, a.takeovers, b.takeovers, case_lines(&c, "compiles"));
}

/* (c2) A holder stopped as a shell stops it (kill -STOP to the process) while its compiling
 * thread sleeps in the compiler's vfork: that thread takes the stop only when the compile ends
 * (here: never, it stalls), and the process's other threads run on. Its lease must go stale in
 * seconds all the same: of two waiters one takes it over and compiles, the other loads, both
 * long before the 60 s compile timeout. */
static void stopped_by_kill_goes_stale(const char *self, const char *base)
{
    lease_case c;
    case_make(&c, base, "kill-stop", "while [ ! -e $(dirname $0)/go ]; do sleep 0.05; done");
    pid_t holder = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    CHECK(case_await(&c, "started"), "the holder's compile never started");
    usleep(200 * 1000); /* its keeper has touched the lease by now, as a running one does */
    CHECK(kill(holder, SIGSTOP) == 0, "kill -STOP: %s", strerror(errno));
    uint64_t start = jb__now_ns();
    pid_t first = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    pid_t second = case_start(&c, self, "launch", "1000", "lease_stall_k0");
    int s1 = case_wait(first), s2 = case_wait(second);
    double seconds = (double)(jb__now_ns() - start) / 1e9;
    case_end_holder(&c, holder);
    case_result a, b;
    CHECK(s1 == 0 && s2 == 0 && case_read(&c, "result", first, &a) &&
              case_read(&c, "result", second, &b),
          "the waiters of a holder stopped by kill ended with %d and %d", s1, s2);
    if (s1 != 0 || s2 != 0)
        return;
    CHECK(a.exact && b.exact, "a holder stopped by kill: a wrong output");
    CHECK(a.builds + b.builds == 1 && a.takeovers + b.takeovers == 1 &&
              a.timeouts + b.timeouts == 0 && case_lines(&c, "compiles") == 1 && seconds < 20.0,
          "a holder stopped by kill while compiling: builds %llu + %llu (1), takeovers %llu + "
          "%llu (1), timeouts %llu + %llu (0), compiles %d (1), %.1f s (under 20)",
          a.builds, b.builds, a.takeovers, b.takeovers, a.timeouts, b.timeouts,
          case_lines(&c, "compiles"), seconds);
}

/* (d) A kernel this process knows fails does not wait behind another's lease of it: the
 * remembered error comes at once. */
static void known_failure_does_not_wait(jb_device *device, const char *cache)
{
    char leases[PATH_MAX + 16], name[256] = "", cmd[PATH_MAX + 64];
    snprintf(leases, sizeof leases, "%s/leases", cache);
    snprintf(cmd, sizeof cmd, "rm -f %s/*", leases);
    CHECK(system(cmd) == 0, "emptying %s", leases); /* the failed compile's mark is then alone */
    jb_custom_kernel *k = f32_kernel("lease_fails", "out[thread_index()] = no_such_name;");
    jb_array *x = f32_filled(device, N, 0.0f), *y = NULL;
    CHECK(f32_launch(&y, k, &x, 1, N) == JB_ERR_COMPILE, "the failing kernel compiled");
    DIR *d = opendir(leases);
    for (struct dirent *e; d && (e = readdir(d));)
        if (jb__lease_is_name(e->d_name))
            snprintf(name, sizeof name, "%s", e->d_name);
    if (d)
        closedir(d);
    CHECK(name[0], "the failed compile left no mark in %s", leases);
    /* Held as another process would: a handle of its own (1 ms timeout: the mark is old). */
    jb_disk_key key = {0};
    snprintf(key.file, sizeof key.file, "%.*s" JB_DISK_ENTRY_SUFFIX,
             (int)(strlen(name) - strlen(JB_LEASE_SUFFIX)), name);
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "1", 1);
    usleep(2000);
    jb_lease held;
    CHECK(take(&key, jb__now_ns() + 1000000000ULL, &held) == JB_LEASE_HELD,
          "the failing kernel's lease could not be taken");
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "3000", 1);
    jb_counters_reset();
    CHECK(f32_launch(&y, k, &x, 1, N) == JB_ERR_COMPILE, "the failure was not recalled");
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(c.lease_timeouts == 0 && c.lease_waits == 0,
          "a known failure waited behind another's lease (timeouts %llu, waits %llu)",
          (unsigned long long)c.lease_timeouts, (unsigned long long)c.lease_waits);
    jb__lease_release(&held, false);
    unsetenv("JITBRIDGE_COMPILE_TIMEOUT_MS");
    jb_array_free(x);
    jb_custom_kernel_free(k);
}

/* (e) A folder at a lease's name: an empty one of ours is removed and the lease taken; one
 * with something in it (or, as root, someone else's) is left, said once with its path, and the
 * kernel compiles without its lease. */
static void folder_at_a_lease_name(const char *cache)
{
    char text[] = "a key whose lease name a folder takes";
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    char path[PATH_MAX + 64], inner[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/leases/%.*s.lease", cache, JB_DISK_ENTRY_HEX, key.file);
    snprintf(inner, sizeof inner, "%s/kept", path);
    jb_lease lease;
    CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
    CHECK(take(&key, jb__now_ns() + 1000000000ULL, &lease) == JB_LEASE_HELD,
          "an empty folder at the lease's name kept the lease from being taken");
    jb__lease_release(&lease, false);
    CHECK(access(path, F_OK) != 0, "the lease's file was left");
    struct {
        const char *what;
        bool theirs, full;
    } folders[] = {{"a folder with a file in it", false, true},
                   {"someone else's empty folder", true, false}};
    for (size_t i = 0; i < 2; i++) {
        if (folders[i].theirs && geteuid() != 0)
            continue;
        CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
        if (folders[i].full)
            close(open(inner, O_WRONLY | O_CREAT, 0600));
        if (folders[i].theirs)
            CHECK(chown(path, 65534, 65534) == 0, "chown: %s", strerror(errno));
        warnings = 0;
        last_warning[0] = '\0';
        jb_counters_reset();
        for (int round = 0; round < 2; round++)
            CHECK(take(&key, jb__now_ns() + 1000000000ULL, &lease) == JB_LEASE_NONE,
                  "%s: the lease was taken", folders[i].what);
        jb_counters c;
        jb_counters_get(&c, sizeof c);
        CHECK(warnings == 1 && strstr(last_warning, path) && !strstr(last_warning, " off"),
              "%s: want one warning naming %s, got %d: '%s'", folders[i].what, path,
              (int)warnings, last_warning);
        CHECK(c.lease_fallbacks == 2, "%s: fallbacks %llu (2)", folders[i].what,
              (unsigned long long)c.lease_fallbacks);
        struct stat st;
        CHECK(lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
                  (!folders[i].full || access(inner, F_OK) == 0),
              "%s was removed", folders[i].what);
        unlink(inner);
        rmdir(path);
    }
}

/* leases/ that others may read: not ours alone, so no lease is taken in it (the kernel
 * compiles alone, counted); made 0700 again, the lease is taken. */
static void leases_folder_open_to_others(const char *cache)
{
    char text[] = "a key whose leases/ others may read";
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    char leases[PATH_MAX + 16];
    snprintf(leases, sizeof leases, "%s/leases", cache);
    jb_lease lease;
    jb_counters c;
    CHECK(chmod(leases, 0750) == 0, "chmod %s: %s", leases, strerror(errno));
    jb_counters_reset();
    CHECK(take(&key, jb__now_ns() + 1000000000ULL, &lease) == JB_LEASE_NONE,
          "a lease was taken in a leases/ others may read");
    jb_counters_get(&c, sizeof c);
    CHECK(c.lease_fallbacks == 1, "a leases/ others may read: fallbacks %llu (1)",
          (unsigned long long)c.lease_fallbacks);
    CHECK(chmod(leases, 0700) == 0, "chmod %s: %s", leases, strerror(errno));
    CHECK(take(&key, jb__now_ns() + 1000000000ULL, &lease) == JB_LEASE_HELD,
          "no lease in a leases/ closed again");
    jb__lease_release(&lease, false);
}

/* (f) A taker stopped between its lock and its first touch of the lease (here: paused at the
 * point until the waiter is done, on a file a killed holder left an hour old) looks stopped,
 * and a waiter takes the lease over; the taker then finds its file gone from the name and waits
 * on the new lease: one holder, never two compiling. */
typedef struct paused_taker {
    jb_disk_key *key;
    pthread_t thread;
    jb_lease lease;
    jb_lease_outcome outcome;
    atomic_bool locked, go_on;
} paused_taker;

static _Thread_local bool is_paused_taker;

static void pause_after_lock(void *ctx, const char *arg)
{
    (void)arg;
    paused_taker *t = ctx;
    if (!is_paused_taker)
        return;
    atomic_store(&t->locked, true);
    for (int i = 0; i < 20000 && !atomic_load(&t->go_on); i++) /* 20 s at most */
        usleep(1000);
}

static void *paused_taker_main(void *arg)
{
    paused_taker *t = arg;
    is_paused_taker = true;
    t->outcome = jb__lease_acquire(t->key, NULL, &t->lease);
    return NULL;
}

static void taker_stopped_before_its_touch(const char *cache)
{
    char text[] = "a key whose taker stops before touching its lease", leases[PATH_MAX + 16];
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    snprintf(leases, sizeof leases, "%s/leases", cache);
    char name[64];
    snprintf(name, sizeof name, "%.*s" JB_LEASE_SUFFIX, JB_DISK_ENTRY_HEX, key.file);
    lease_file(leases, name, 0, true);
    jb__test_set_lease_stale_ms(200);
    jb_counters_reset();
    paused_taker t = {.key = &key, .outcome = JB_LEASE_NONE};
    jb__test_set_point(JB_TEST_LEASE_LOCKED, pause_after_lock, &t);
    CHECK(pthread_create(&t.thread, NULL, paused_taker_main, &t) == 0, "a taker thread");
    for (int i = 0; i < 5000 && !atomic_load(&t.locked); i++)
        usleep(1000);
    CHECK(atomic_load(&t.locked), "the taker never locked the lease");
    /* The waiter, as a build's rounds are (its thread's own wait). */
    jb_lease mine = {.fd = -1};
    jb_lease_outcome outcome = JB_LEASE_BUSY;
    uint64_t until = jb__now_ns() + 15000000000ULL;
    while (outcome == JB_LEASE_BUSY && jb__now_ns() < until) {
        outcome = jb__lease_acquire(&key, NULL, &mine);
        if (outcome == JB_LEASE_BUSY)
            jb__lease_wait();
    }
    atomic_store(&t.go_on, true);
    pthread_join(t.thread, NULL);
    jb__test_set_point(JB_TEST_LEASE_LOCKED, NULL, NULL);
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(outcome == JB_LEASE_HELD && c.lease_stale_takeovers == 1,
          "a taker stopped before its touch: the waiter's outcome %d (held %d), takeovers %llu "
          "(1)",
          (int)outcome, (int)JB_LEASE_HELD, (unsigned long long)c.lease_stale_takeovers);
    CHECK(t.outcome == JB_LEASE_BUSY,
          "a taker whose lease was taken over before its touch held it too (outcome %d, busy "
          "%d): two holders compile",
          (int)t.outcome, (int)JB_LEASE_BUSY);
    if (t.outcome == JB_LEASE_HELD)
        jb__lease_release(&t.lease, false);
    jb__lease_release(&mine, false);
    jb__test_set_lease_stale_ms(0);
    CHECK(!lease_file_there(leases, name), "the lease file was left");
}

/* (g) A takeover that fails (its removal refused, here injected) is tried again a nap later,
 * never in a spin of rounds: a second of waiting on a stale lease is a handful of rounds. Once
 * the removal works again, the next try takes the lease over. */
static void failed_takeover_naps(const char *cache)
{
    char text[] = "a key whose stale lease cannot be removed", path[PATH_MAX + 128];
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    snprintf(path, sizeof path, "%s/leases/%.*s" JB_LEASE_SUFFIX, cache, JB_DISK_ENTRY_HEX,
             key.file);
    /* Held as a stopped process holds it: locked, never touched. */
    int held = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(held >= 0 && jb__lock_open_file(held, F_WRLCK, JB_LOCK_OR_FLOCK) == 0,
          "holding %s: %s", path, strerror(errno));
    jb__test_set_lease_stale_ms(100);
    jb__test_set_lease_break_error(EROFS);
    jb_counters_reset();
    jb_lease lease = {.fd = -1};
    jb_lease_outcome outcome = JB_LEASE_BUSY;
    int rounds = 0;
    for (uint64_t until = jb__now_ns() + 1000000000ULL;
         outcome == JB_LEASE_BUSY && jb__now_ns() < until; rounds++) {
        outcome = jb__lease_acquire(&key, NULL, &lease);
        if (outcome == JB_LEASE_BUSY)
            jb__lease_wait();
    }
    CHECK(outcome == JB_LEASE_BUSY && rounds <= 12,
          "a failing takeover: %d rounds in a second (want 12 at most), outcome %d (busy %d)",
          rounds, (int)outcome, (int)JB_LEASE_BUSY);
    jb__test_set_lease_break_error(0);
    for (uint64_t until = jb__now_ns() + 5000000000ULL;
         outcome == JB_LEASE_BUSY && jb__now_ns() < until;) {
        outcome = jb__lease_acquire(&key, NULL, &lease);
        if (outcome == JB_LEASE_BUSY)
            jb__lease_wait();
    }
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(outcome == JB_LEASE_HELD && c.lease_stale_takeovers == 1,
          "once removals work: outcome %d (held %d), takeovers %llu (1)", (int)outcome,
          (int)JB_LEASE_HELD, (unsigned long long)c.lease_stale_takeovers);
    jb__lease_release(&lease, false);
    if (held >= 0)
        close(held);
    jb__test_set_lease_stale_ms(0);
}

/* (h) A waiter's poll looks whether the lease is held without taking it: taken for a moment,
 * a process forked then would keep it held (its child shares the handle) and the lease would
 * wait to be taken over as stale. At the point, after a poll of a free lease, no one may hold
 * it. */
typedef struct poll_seen {
    const char *path;
    int polls, locked;
} poll_seen;

static void lock_seen(void *ctx, const char *arg)
{
    (void)arg;
    poll_seen *p = ctx;
    int fd = open(p->path, O_RDWR | O_CLOEXEC);
    int err = fd >= 0 ? jb__lock_open_file(fd, F_WRLCK, JB_LOCK_OR_FLOCK) : errno;
    p->polls++;
    p->locked += err == EAGAIN;
    if (fd >= 0)
        close(fd);
}

static void poll_takes_no_lock(const char *cache)
{
    char text[] = "a key whose waiter polls a lease let go", path[PATH_MAX + 128];
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    snprintf(path, sizeof path, "%s/leases/%.*s" JB_LEASE_SUFFIX, cache, JB_DISK_ENTRY_HEX,
             key.file);
    int held = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(held >= 0 && jb__lock_open_file(held, F_WRLCK, JB_LOCK_OR_FLOCK) == 0,
          "holding %s: %s", path, strerror(errno));
    jb_lease lease = {.fd = -1};
    CHECK(jb__lease_acquire(&key, NULL, &lease) == JB_LEASE_BUSY, "a held lease was not busy");
    if (held >= 0)
        close(held); /* let go: the wait's first poll finds it free */
    poll_seen seen = {path, 0, 0};
    jb__test_set_point(JB_TEST_LEASE_POLLED, lock_seen, &seen);
    jb__lease_wait();
    jb__test_set_point(JB_TEST_LEASE_POLLED, NULL, NULL);
    CHECK(seen.polls == 1 && seen.locked == 0,
          "a waiter's poll of a free lease held its lock (%d of %d polls)", seen.locked,
          seen.polls);
    CHECK(jb__lease_acquire(&key, NULL, &lease) == JB_LEASE_HELD, "the free lease was not taken");
    jb__lease_release(&lease, false);
}

/* (i) A wait that ended with the entry stored ends its round: the same thread's next build of
 * that key (the entry's load refused, say) waits with a deadline of its own, not the old
 * round's, long past. */
static void stored_entry_ends_the_round(const char *cache)
{
    char text[] = "a key whose wait ends with its entry stored", path[PATH_MAX + 128],
         entry[PATH_MAX + 128];
    jb_disk_key key = {.text = text, .bytes = sizeof text - 1};
    jb__disk_key_name(&key);
    snprintf(path, sizeof path, "%s/leases/%.*s" JB_LEASE_SUFFIX, cache, JB_DISK_ENTRY_HEX,
             key.file);
    snprintf(entry, sizeof entry, "%s/%s", cache, key.file);
    int held = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(held >= 0 && jb__lock_open_file(held, F_WRLCK, JB_LOCK_OR_FLOCK) == 0,
          "holding %s: %s", path, strerror(errno));
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "300", 1);
    jb_counters_reset();
    jb_lease lease = {.fd = -1};
    CHECK(jb__lease_acquire(&key, NULL, &lease) == JB_LEASE_BUSY, "a held lease was not busy");
    int fd = open(entry, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1, "an entry at %s: %s", entry, strerror(errno));
    if (fd >= 0)
        close(fd);
    jb__lease_wait(); /* ends at once: the entry is there */
    usleep(400 * 1000); /* past the first round's deadline */
    unlink(entry); /* its load was refused, and it is gone */
    jb_lease_outcome outcome = jb__lease_acquire(&key, NULL, &lease);
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(outcome == JB_LEASE_BUSY && c.lease_timeouts == 0 && c.lease_waits == 1,
          "a new round of a key whose wait ended with its entry stored: outcome %d (busy %d), "
          "timeouts %llu (0), waits %llu (1)",
          (int)outcome, (int)JB_LEASE_BUSY, (unsigned long long)c.lease_timeouts,
          (unsigned long long)c.lease_waits);
    if (outcome == JB_LEASE_HELD)
        jb__lease_release(&lease, false);
    if (held >= 0)
        close(held);
    unlink(path);
    unsetenv("JITBRIDGE_COMPILE_TIMEOUT_MS");
}

/* ---- a keeper whose holder thread is gone ---- */

static atomic_int keeper_ticks;

static void count_tick(void *state)
{
    (void)state;
    atomic_fetch_add(&keeper_ticks, 1);
}

/* Starts a keeper ticking every 5 ms and ends without stopping it (a cancelled compile). */
static void *start_keeper_and_exit(void *arg)
{
    char unused = 0;
    *(jb_keeper **)arg = jb__keeper_start(count_tick, &unused, sizeof unused, 5000000ULL);
    return NULL;
}

/* The ticks, over 200 ms, of a keeper whose starting thread has ended (ticking every 5 ms). */
static int ticks_after_holder_exit(void)
{
    jb_keeper *keeper = NULL;
    pthread_t holder;
    if (pthread_create(&holder, NULL, start_keeper_and_exit, &keeper) != 0)
        return -1;
    pthread_join(holder, NULL);
    if (!keeper)
        return -1;
    usleep(100 * 1000);
    int before = atomic_load(&keeper_ticks);
    usleep(200 * 1000); /* 40 periods */
    int after = atomic_load(&keeper_ticks);
    jb__keeper_stop(keeper);
    return after - before;
}

/* Whether a keeper stops ticking once the thread that started it has ended: it renews for a
 * holder that can no longer compile or let go, which would keep others waiting forever. Run in
 * a fork child, its count sent through a pipe: memcheck calls the joined keeper's thread block
 * "possibly lost" where no later thread takes its stack. */
static void keeper_after_holder_exit(void)
{
    int counted[2];
    CHECK(pipe(counted) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        int ticks = ticks_after_holder_exit();
        _exit(write(counted[1], &ticks, sizeof ticks) == sizeof ticks ? 0 : 1);
    }
    close(counted[1]);
    int ticks = -1;
    if (read(counted[0], &ticks, sizeof ticks) != sizeof ticks)
        ticks = -1;
    close(counted[0]);
    waitpid(pid, NULL, 0);
    CHECK(ticks >= 0 && ticks <= 1,
          "a keeper whose holder thread ended went on ticking (%d ticks in 200 ms; -1: the "
          "case could not run)",
          ticks);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "umask-child") == 0)
        return umask_child();
    if (argc == 5) {
        jb__test_set_lease_stale_ms(strtoull(argv[2], NULL, 10));
        if (strcmp(argv[1], "launch") == 0)
            return launch_child(argv[3], argv[4]);
        if (strcmp(argv[1], "stopped-a") == 0)
            return stopped_a_child(argv[4]);
        return 2;
    }
    char base[] = "/tmp/jb_lease_XXXXXX", cache[PATH_MAX];
    CHECK(mkdtemp(base) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(cache, sizeof cache, "%s/cache", base);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1); /* on, and ours: valgrind runs turn it off */
    unsetenv("JITBRIDGE_DISK_CACHE");
    jb_device *device = test_device();
    if (!device)
        return check_summary("test_lease");
    CHECK_OK(jb_set_log_callback(keep_warning, NULL));
    keeper_after_holder_exit();
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
    sweep_leaves_a_name_made_anew(cache);
    known_failure_does_not_wait(device, cache);
    folder_at_a_lease_name(cache);
    leases_folder_open_to_others(cache);
    taker_stopped_before_its_touch(cache);
    failed_takeover_naps(cache);
    poll_takes_no_lock(cache);
    stored_entry_ends_the_round(cache);
    jb_set_log_callback(NULL, NULL);
    umask_without_write(argv[0], base);
    stopped_holder_holds_up_nothing(argv[0], base);
    slow_holder_is_not_robbed(argv[0], base);
    two_waiters_one_compile(argv[0], base);
    stopped_by_kill_goes_stale(argv[0], base);
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    CHECK(system(cmd) == 0, "cannot remove %s", base);
    return check_summary("test_lease");
}
