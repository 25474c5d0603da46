/*
 * The compile farm: the kernels of a manifest that this device lacks are built by worker
 * processes (farm_worker.c's main, in a program of the caller's), up to `jobs` at once, each
 * storing into the cache folder under the host's leases; then the manifest is prewarmed, so
 * that this process loads what they built and compiles nothing.
 *
 * A library inside a threaded server may not fork and run code in the child: workers are
 * started with posix_spawn (vfork-like, exec at once) of a program, with only their result pipe
 * open (stdin and stderr on /dev/null), an empty signal mask and default signal actions. Results
 * come over that pipe, one line per kernel, never from an exit status (a host that ignores
 * SIGCHLD loses it); each worker is watched through a pidfd, killed when a kernel keeps it past
 * the compile timeout, and reaped by that pidfd (waitid P_PIDFD: never another child under a
 * reused pid), or by its pid where pidfds are missing. A kernel a worker did not report built
 * is compiled at its first use, as without the farm.
 */
#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BATCH_MAX 16            /* kernels given to one worker: its argv stays small */
#define REPORT_BYTES 1024       /* a report line's longest */
#define EXIT_WAIT_MS 2000       /* a worker's exit after its pipe closed */
#define EXIT_LOOK_MS 100        /* without a pidfd: how often a worker's exit is looked for */

enum { UNREPORTED, BUILT, FAILED }; /* an item's state, from its worker's reports */

#ifdef JB_TEST_HOOKS
static bool test_secure, test_no_pidfd;
static void (*test_spawned)(void);
void jb__test_set_farm_spawned(void (*fn)(void))
{
    test_spawned = fn;
}
void jb__test_set_farm_secure(bool secure)
{
    test_secure = secure;
}
void jb__test_set_farm_no_pidfd(bool no_pidfd)
{
    test_no_pidfd = no_pidfd;
}
#else
static const bool test_secure = false, test_no_pidfd = false;
#endif

typedef struct worker {
    pid_t pid;
    int pidfd; /* -1 where pidfd_open is missing */
    int pipe;  /* the read end; -1 once it ended */
    size_t first, count;
    size_t reported; /* its kernels reported, built or not: the next is the one it is on */
    unsigned char *state; /* of the farm's items: UNREPORTED, BUILT or FAILED */
    uint64_t deadline_ns; /* last progress plus the compile timeout */
    char line[REPORT_BYTES];
    size_t used;
    bool warned_junk; /* a line that is no next report was warned of once */
} worker;

typedef struct farm {
    jb_device *dev;
    const jb_farm_list *list;
    unsigned char *state;
    char *const *envp;
    const char *program;
    uint64_t timeout_ns;
    jb_prewarm_build_result *out;
    jb_farm_progress *progress;
} farm;

unsigned jb_usable_processors(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    int count = CPU_COUNT(&set);
    return count > 0 ? (unsigned)count : 1;
}

/* This environment less JITBRIDGE_MANIFEST (a worker's lines would land in the file read), with
 * JITBRIDGE_CACHE_DIR set to the folder this process uses (chosen at its first use: the
 * variable, or the working directory a relative one means, may have changed since). The kept
 * strings are copied, since the host may setenv or free a putenv string while workers start.
 * One block: free() frees it. */
static bool kept_variable(const char *entry)
{
    return strncmp(entry, "JITBRIDGE_MANIFEST=", 19) != 0 &&
           strncmp(entry, "JITBRIDGE_CACHE_DIR=", 20) != 0;
}

static char **worker_environment(void)
{
    const char *why, *folder = jb__disk_folder(&why);
    static const char name[] = "JITBRIDGE_CACHE_DIR=";
    size_t n = 0, text = sizeof name + strlen(folder);
    for (; environ && environ[n]; n++)
        if (kept_variable(environ[n]) && !jb__add_size(text, strlen(environ[n]) + 1, &text))
            return NULL;
    size_t pointers = (n + 2) * sizeof(char *), bytes;
    char **envp = jb__add_size(pointers, text, &bytes) ? malloc(bytes) : NULL;
    if (!envp)
        return NULL;
    char *next = (char *)envp + pointers;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (kept_variable(environ[i])) {
            size_t len = strlen(environ[i]) + 1;
            envp[kept++] = memcpy(next, environ[i], len);
            next += len;
        }
    memcpy(next, name, sizeof name - 1);
    strcpy(next + sizeof name - 1, folder);
    envp[kept++] = next;
    envp[kept] = NULL;
    return envp;
}

/* A descriptor at 3 or above (close-on-exec), so that the child's dup2 onto 0-2 never meets it. */
static int above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return moved;
}

static int start_worker(farm *f, size_t first, size_t count, worker *w)
{
    *w = (worker){.pid = -1, .pidfd = -1, .pipe = -1, .first = first, .count = count};
    char **argv = calloc(count + 4, sizeof *argv);
    char *args = malloc(count * (4 * JB_SHA256_BYTES + 2));
    int fds[2] = {-1, -1};
    int status = JB_OK;
    if (!argv || !args)
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to start a compile farm worker");
    else if (pipe2(fds, O_CLOEXEC) != 0 || (fds[0] = above_stdio(fds[0])) < 0 ||
             (fds[1] = above_stdio(fds[1])) < 0)
        status = jb__fail(JB_ERR_SYSTEM, "no pipe for a compile farm worker: %s",
                          strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    bool made = status == JB_OK && posix_spawn_file_actions_init(&actions) == 0;
    if (made && posix_spawnattr_init(&attr) != 0) {
        posix_spawn_file_actions_destroy(&actions);
        made = false;
    }
    if (status == JB_OK && !made)
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to start a compile farm worker");
    char device_name[64]; /* "cpu:0", "cuda:1": what jb_device_lookup reads */
    snprintf(device_name, sizeof device_name, "%s:%d", f->dev->backend->name, f->dev->ordinal);
    if (status == JB_OK) {
        argv[0] = (char *)f->program;
        argv[1] = JB_BUILD_WORKER_ARG;
        argv[2] = device_name;
        for (size_t i = 0; i < count; i++) {
            char *arg = args + i * (4 * JB_SHA256_BYTES + 2);
            const jb_farm_item *item = &f->list->items[first + i];
            jb__hex(item->key, JB_SHA256_BYTES, arg);
            arg[2 * JB_SHA256_BYTES] = ':';
            jb__hex(item->record, JB_SHA256_BYTES, arg + 2 * JB_SHA256_BYTES + 1);
            argv[3 + i] = arg;
        }
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        int err = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        err = err ? err : posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
        err = err ? err : posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
        err = err ? err : posix_spawn_file_actions_addclosefrom_np(&actions, 3);
        err = err ? err : posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
                                                              POSIX_SPAWN_SETSIGDEF);
        err = err ? err : posix_spawnattr_setsigmask(&attr, &none);
        err = err ? err : posix_spawnattr_setsigdefault(&attr, &all);
        err = err ? err : posix_spawn(&w->pid, f->program, &actions, &attr, argv, f->envp);
        if (err) {
            w->pid = -1;
            status = jb__fail(JB_ERR_SYSTEM, "cannot start the compile farm worker '%s': %s",
                              f->program, strerror(err));
        }
    }
    if (made) {
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
    }
#ifdef JB_TEST_HOOKS
    if (test_spawned && w->pid > 0)
        test_spawned();
#endif
    if (fds[1] >= 0)
        close(fds[1]); /* the pipe ends when the worker does, unless a host fork holds it */
    if (w->pid > 0) {
        w->pidfd = test_no_pidfd ? -1 : (int)syscall(SYS_pidfd_open, (long)w->pid, 0L);
        w->pipe = fds[0];
        fcntl(w->pipe, F_SETFL, fcntl(w->pipe, F_GETFL) | O_NONBLOCK); /* drained at its exit */
        w->state = f->state;
        w->deadline_ns = jb__now_ns() + f->timeout_ns;
        f->out->workers++;
    } else if (fds[0] >= 0) {
        close(fds[0]);
    }
    free(argv);
    free(args);
    return status;
}

/* The event of the farm's item i, finished: built, or failed (`why`), on the farm's thread. */
static void raise_finished(farm *f, size_t i, bool built, const char *why)
{
    if (!jb__callback_installed(JB_CALLBACK_EVENT))
        return; /* nobody listens: not even the key's text is made */
    const jb_farm_item *item = &f->list->items[i];
    char key[sizeof item->module + 16], hex[2 * JB_SHA256_BYTES + 1];
    snprintf(key, sizeof key, "%d:%s", f->dev->index, item->module);
    jb__hex(item->key, JB_SHA256_BYTES, hex);
    hex[JB_DISK_ENTRY_HEX] = '\0';
    jb__event_build_begin(f->dev, item->module, key);
    jb__event_build_content_key(hex);
    jb__event_raise(built ? JB_CACHE_EVENT_FARM_BUILT : JB_CACHE_EVENT_FARM_FAILED, 0,
                    built ? JB_OK : JB_ERR_COMPILE, why);
    jb__event_build_end();
}

/* One report line of worker `w`: "ok <i>" or "failed <i> <why>". */
static void take_report(farm *f, worker *w, char *line)
{
    char *end;
    bool ok = strncmp(line, "ok ", 3) == 0;
    bool failed = strncmp(line, "failed ", 7) == 0;
    const char *number = line + (ok ? 3 : 7);
    unsigned long index = (ok || failed) && *number >= '0' && *number <= '9'
                              ? strtoul(number, &end, 10)
                              : ULONG_MAX;
    /* Only the kernel it is on counts: a repeat, a skip or a stray line buys no time. */
    if (index != w->reported || index >= w->count || *end != (ok ? '\0' : ' ')) {
        if (!w->warned_junk)
            jb__warn("cache build: a worker wrote a line that is not the report of its next "
                     "kernel (ignored; its later ones are not warned of): '%.80s'", line);
        w->warned_junk = true;
        return;
    }
    w->reported++;
    atomic_fetch_add(ok ? &f->progress->built : &f->progress->failed, 1);
    raise_finished(f, w->first + index, ok, ok ? NULL : *end ? end + 1 : "no reason given");
    w->state[w->first + index] = ok ? BUILT : FAILED;
    if (!ok)
        jb__warn("cache build: module '%s' was not built by a worker (it compiles at its first "
                 "use): %s",
                 f->list->items[w->first + index].module, *end ? end + 1 : "no reason given");
    w->deadline_ns = jb__now_ns() + f->timeout_ns;
}

/* Reads what the worker wrote: 1 when something came, 0 at the pipe's end, -1 when nothing is
 * there now. */
static int read_reports(farm *f, worker *w)
{
    char buf[4096];
    ssize_t n = read(w->pipe, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return -1;
    if (n <= 0)
        return 0;
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            w->line[w->used < sizeof w->line ? w->used : sizeof w->line - 1] = '\0';
            take_report(f, w, w->line);
            w->used = 0;
        } else if (w->used < sizeof w->line - 1) {
            w->line[w->used++] = buf[i];
        } else {
            w->used = sizeof w->line; /* too long: cut, still read to its end */
        }
    }
    return 1;
}

/* Whether the worker has exited (not reaped: reap_worker does that). Without a pidfd, by
 * waitid's WNOWAIT on its pid; ECHILD: a host that reaps children took it. */
static bool worker_exited(const worker *w, bool pidfd_ready)
{
    if (w->pidfd >= 0)
        return pidfd_ready;
    siginfo_t info = {0};
    if (waitid(P_PID, (id_t)w->pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0)
        return errno == ECHILD;
    return info.si_pid == w->pid;
}

static void kill_worker(worker *w)
{
    if (w->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, (long)w->pidfd, (long)SIGKILL, NULL, 0L);
    else if (!worker_exited(w, false)) /* gone already: its pid may be another process's */
        kill(w->pid, SIGKILL);
}

/* Reaps the worker (killed when it outlives its pipe by EXIT_WAIT_MS), EINTR-safe, never
 * blocking longer than that on a live one. ECHILD (a host that ignores SIGCHLD, or reaps
 * children itself) means it is gone already. */
static void reap_worker(worker *w)
{
    bool by_pid = w->pidfd < 0;
    if (w->pidfd >= 0) {
        struct pollfd p = {w->pidfd, POLLIN, 0};
        int n;
        while ((n = poll(&p, 1, EXIT_WAIT_MS)) < 0 && errno == EINTR)
            ;
        if (n == 0)
            kill_worker(w);
        siginfo_t info;
        int reaped;
        while ((reaped = waitid(P_PIDFD, (id_t)w->pidfd, &info, WEXITED)) < 0 && errno == EINTR)
            ;
        /* EINVAL: a kernel with pidfd_open but without P_PIDFD (5.3): by its pid below. */
        by_pid = reaped < 0 && errno == EINVAL;
        close(w->pidfd);
    }
    /* By pid: looked for every 10 ms up to EXIT_WAIT_MS (a worker that closed its stdout may
     * hang), then killed and waited for. */
    for (uint64_t until = jb__now_ns() + EXIT_WAIT_MS * 1000000ULL; by_pid;) {
        pid_t reaped = waitpid(w->pid, NULL, WNOHANG);
        if (reaped == w->pid || (reaped < 0 && errno != EINTR))
            break;
        if (reaped == 0 && jb__now_ns() >= until) {
            kill_worker(w);
            while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
    }
    w->pid = -1;
    w->pidfd = -1;
}

static void end_worker(farm *f, worker *w)
{
    close(w->pipe);
    w->pipe = -1;
    reap_worker(w);
    atomic_fetch_add(&f->progress->failed, w->count - w->reported); /* lost with the worker */
    for (size_t i = w->first; i < w->first + w->count; i++) {
        f->out->built += f->state[i] == BUILT;
        if (f->state[i] == UNREPORTED)
            raise_finished(f, i, false, "its worker ended (crashed, killed or timed out) first");
    }
}

/* Runs the list through at most `jobs` workers at once; an error only when none could start. */
static int run_workers(farm *f, unsigned jobs)
{
    size_t total = f->list->count, next = 0;
    size_t batch = (total + jobs - 1) / jobs;
    batch = batch < 1 ? 1 : batch > BATCH_MAX ? BATCH_MAX : batch;
    worker *workers = calloc(jobs, sizeof *workers);
    struct pollfd *polls = calloc(2 * (size_t)jobs, sizeof *polls); /* pipes, then pidfds */
    if (!workers || !polls) {
        free(workers);
        free(polls);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the compile farm");
    }
    for (unsigned j = 0; j < jobs; j++)
        workers[j].pipe = -1;
    int start_status = JB_OK;
    for (;;) {
        size_t running = 0;
        for (unsigned j = 0; j < jobs; j++) {
            if (workers[j].pipe < 0 && next < total && start_status == JB_OK) {
                size_t count = total - next < batch ? total - next : batch;
                start_status = start_worker(f, next, count, &workers[j]);
                if (start_status == JB_OK)
                    next += count;
            }
            running += workers[j].pipe >= 0;
        }
        if (!running)
            break;
        uint64_t now = jb__now_ns(), soonest = UINT64_MAX;
        size_t n = 0, pidfds = 0;
        bool look_by_pid = false;
        for (unsigned j = 0; j < jobs; j++) {
            if (workers[j].pipe < 0)
                continue;
            if (workers[j].deadline_ns <= now) {
                jb__warn("cache build: a worker took past the compile timeout on module '%s' "
                         "and was killed (JITBRIDGE_COMPILE_TIMEOUT_MS sets it)",
                         f->list->items[workers[j].first +
                                        (workers[j].reported < workers[j].count
                                             ? workers[j].reported
                                             : workers[j].count - 1)]
                             .module);
                kill_worker(&workers[j]);
                end_worker(f, &workers[j]);
                continue;
            }
            soonest = workers[j].deadline_ns < soonest ? workers[j].deadline_ns : soonest;
            polls[n++] = (struct pollfd){workers[j].pipe, POLLIN, 0};
            look_by_pid |= workers[j].pidfd < 0;
        }
        if (!n)
            continue;
        /* A worker's exit, not only its pipe's end: a host's fork may hold the pipe open. */
        for (unsigned j = 0; j < jobs; j++)
            if (workers[j].pipe >= 0 && workers[j].pidfd >= 0)
                polls[n + pidfds++] = (struct pollfd){workers[j].pidfd, POLLIN, 0};
        uint64_t wait_ms = (soonest - now) / 1000000 + 1;
        wait_ms = look_by_pid && wait_ms > EXIT_LOOK_MS ? EXIT_LOOK_MS : wait_ms;
        if (poll(polls, n + pidfds, wait_ms > 60000 ? 60000 : (int)wait_ms) < 0 &&
            errno != EINTR)
            break; /* cannot happen with valid descriptors; the workers are ended below */
        size_t k = 0, p = n;
        for (unsigned j = 0; j < jobs; j++) {
            if (workers[j].pipe < 0)
                continue;
            worker *w = &workers[j];
            bool readable = polls[k++].revents != 0;
            bool pidfd_ready = w->pidfd >= 0 && polls[p++].revents != 0;
            if (readable && read_reports(f, w) == 0) {
                end_worker(f, w);
            } else if (worker_exited(w, pidfd_ready)) {
                while (read_reports(f, w) > 0) /* what it wrote before it exited */
                    ;
                end_worker(f, w);
            }
        }
    }
    for (unsigned j = 0; j < jobs; j++)
        if (workers[j].pipe >= 0) {
            kill_worker(&workers[j]);
            end_worker(f, &workers[j]);
        }
    free(workers);
    free(polls);
    /* Kernels no worker took: compiled at their first use, as the ones that failed. */
    if (start_status != JB_OK && f->out->workers)
        jb__warn("cache build: %s; %zu kernels left to their first use",
                 jb_last_error_message(), total - next);
    return f->out->workers ? JB_OK : start_status;
}

int jb__farm_refusal(jb_device *device, const char *path, unsigned jobs,
                     const char **worker_program)
{
    JB_RETURN_IF(!device || !path, JB_ERR_INVALID_ARGUMENT, "jb_prewarm_build: %s is NULL",
                 device ? "path" : "device");
    JB_RETURN_IF(jobs < 1 || jobs > JB_PREWARM_BUILD_MAX_JOBS, JB_ERR_INVALID_ARGUMENT,
                 "jb_prewarm_build: jobs must be 1 to %d, not %u", JB_PREWARM_BUILD_MAX_JOBS,
                 jobs);
    bool secure = test_secure || getauxval(AT_SECURE) != 0 || geteuid() != getuid() ||
                  getegid() != getgid();
    JB_RETURN_IF(secure, JB_ERR_UNSUPPORTED,
                 "the compile farm is refused in a setuid (or setgid, or capability-raised) "
                 "program: its caller must not choose the programs it starts or what they "
                 "compile");
    JB_RETURN_IF(jb_seal_mode_get() == JB_SEAL_ERROR, JB_ERR_SEALED,
                 "jb_prewarm_build: the process is sealed (JB_SEAL_ERROR): it starts no compiler, "
                 "in worker processes neither; build before sealing");
    if (!*worker_program)
        *worker_program = getenv("JITBRIDGE_BUILD_WORKER");
    const char *worker = *worker_program;
    /* Absolute: a relative one would mean wherever the host has chdir'd to by then. */
    JB_RETURN_IF(!worker || worker[0] != '/', JB_ERR_INVALID_ARGUMENT,
                 "jb_prewarm_build: the worker program must be an absolute path (never looked "
                 "for in PATH, nor taken against the working directory), given or in "
                 "JITBRIDGE_BUILD_WORKER, not '%s'",
                 worker ? worker : "(none)");
    /* Checked before any worker starts: some posix_spawn implementations (and valgrind's)
     * report a program that cannot run only by the child's exit status 127. */
    JB_RETURN_IF(access(worker, X_OK) != 0, JB_ERR_SYSTEM,
                 "cannot start the compile farm worker '%s': %s", worker, strerror(errno));
    JB_RETURN_IF(!jb__disk_cache_usable(), JB_ERR_UNSUPPORTED,
                 "jb_prewarm_build: the workers store into the cache folder, which is off");
    return JB_OK;
}

int jb__farm_run(jb_prewarm_build_result *out, jb_device *device, const char *path,
                 unsigned jobs, const char *worker_program, jb_farm_progress *progress)
{
    memset(out, 0, sizeof *out);
    jb__bundles_present();
    jb_farm_list list;
    JB_FORWARD_IF_ERROR(jb__farm_items_read(device, path, &list, out));
    atomic_store(&progress->total, list.count);
    int status = JB_OK;
    if (list.count) {
        unsigned char *state = calloc(list.count, sizeof *state);
        char **envp = worker_environment();
        farm f = {device, &list, state, envp, worker_program,
                  jb__child_timeout_ms() * 1000000ULL, out, progress};
        status = state && envp ? run_workers(&f, jobs)
                               : jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the compile farm");
        out->failed = list.count - out->built;
        free(state);
        free(envp);
    }
    if (status == JB_OK && list.bundle && out->without_source)
        jb__warn("cache build: %llu kernels of the bundle %s carry no source record, so they "
                 "cannot be rebuilt here (export it with its records: cache export "
                 "--with-sources); they compile at their first use",
                 (unsigned long long)out->without_source, path);
    jb_prewarm_result load;
    if (status == JB_OK)
        status = jb_prewarm(&load, device, path);
    /* A bundle made elsewhere: what the workers built is under this device's keys. */
    for (size_t i = 0; status == JB_OK && list.bundle && i < list.count; i++)
        jb__prewarm_entry(&load, device, list.items[i].key, list.items[i].record,
                          jb__source_record_rules);
    if (status == JB_OK)
        out->load = load;
    jb__farm_list_free(&list);
    return status;
}

jb_status jb_prewarm_build(jb_prewarm_build_result *out, jb_device *device, const char *path,
                           unsigned jobs, const char *worker_program)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_prewarm_build: out is NULL");
    memset(out, 0, sizeof *out);
    JB_FORWARD_IF_ERROR(jb__farm_refusal(device, path, jobs, &worker_program));
    jb_farm_progress progress = {0};
    return jb__farm_run(out, device, path, jobs, worker_program, &progress);
}
