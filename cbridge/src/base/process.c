/*
 * Running a child program (the cpu backend's compiler, its version query): an argument vector,
 * never a shell; stdin from /dev/null; stdout and stderr kept together, head and tail; a
 * timeout that kills the program's process group.
 *
 * Hosts may ignore SIGCHLD (SIG_IGN or SA_NOCLDWAIT: the kernel then reaps children itself and
 * their exit status is lost) or reap every child with waitpid(-1) on a thread of their own.
 * Neither can touch a child whose exit signal is not SIGCHLD, but exec resets a child's exit
 * signal to SIGCHLD. So the program is not our child: an intermediate process is, started with
 * clone(), exit signal 0 and CLONE_VM|CLONE_VFORK (posix_spawn's way: no copy of the host's
 * memory; the calling thread sleeps until the intermediate ends, and other threads run on).
 * The intermediate never execs: it resets every signal to SIG_DFL (its own copy of the table),
 * starts the program the same way, waits for it on a pidfd (pidfd_open; short naps on kernels
 * before 5.3) until the deadline, kills the program's group past it, reaps it and writes its
 * wait status to a pipe; we then reap the intermediate with waitpid(__WCLONE). A host that
 * reaps with __WALL could still take it: that is reported, never mistaken for a status.
 * Both children run on stacks of their own with raw system calls only until execve. The program
 * gets the environment its caller chose (cpu_compiler.c: never the host's whole environ).
 * PIDFD_INFO_EXIT (Linux 6.15) would give the status without an intermediate; servers run
 * older kernels. The program's output goes to a memfd (a file in memory, read head and tail
 * afterwards), so a chatty compiler can never block on a full pipe.
 */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS (10 * 60 * 1000ULL)
#define MAX_TIMEOUT_MS (24 * 60 * 60 * 1000ULL) /* a day: far past any compile, far from overflow */
#define OUTPUT_HEAD (32 * 1024)
#define OUTPUT_TAIL (32 * 1024)
#define STACK_BYTES (64 * 1024) /* each of the two children's */
/* ---- the timeout ---- */

static pthread_mutex_t warn_mutex = PTHREAD_MUTEX_INITIALIZER;
static char warned_text[64]; /* the last bad value warned about: one warning per value */

static void warn_timeout(const char *text, const char *why, unsigned long long used)
{
    pthread_mutex_lock(&warn_mutex);
    bool repeat = strncmp(warned_text, text, sizeof warned_text - 1) == 0;
    snprintf(warned_text, sizeof warned_text, "%s", text);
    pthread_mutex_unlock(&warn_mutex);
    if (!repeat)
        jb__warn("JITBRIDGE_COMPILE_TIMEOUT_MS=%.40s%s %s; using %llu ms", text,
                 strlen(text) > 40 ? "..." : "", why, used);
}

uint64_t jb__parse_timeout_ms(const char *text)
{
    if (!text || !*text)
        return DEFAULT_TIMEOUT_MS; /* empty is unset */
    unsigned long long ms = 0;
    bool digits = true, huge = false;
    for (const char *p = text; *p && digits; p++) {
        if (*p < '0' || *p > '9')
            digits = false;
        else if (ms > MAX_TIMEOUT_MS)
            huge = true; /* stop growing: no overflow however long the text */
        else
            ms = ms * 10 + (unsigned long long)(*p - '0');
    }
    if (!digits) {
        warn_timeout(text, "is not a whole number of milliseconds", DEFAULT_TIMEOUT_MS);
        return DEFAULT_TIMEOUT_MS;
    }
    if (ms == 0) {
        warn_timeout(text, "would kill every compile at once", DEFAULT_TIMEOUT_MS);
        return DEFAULT_TIMEOUT_MS;
    }
    if (huge || ms > MAX_TIMEOUT_MS) {
        warn_timeout(text, "is more than a day", MAX_TIMEOUT_MS);
        return MAX_TIMEOUT_MS;
    }
    return ms;
}

uint64_t jb__child_timeout_ms(void)
{
    return jb__parse_timeout_ms(getenv("JITBRIDGE_COMPILE_TIMEOUT_MS"));
}


/* ---- the output: head and tail ---- */

static size_t read_at(int fd, char *buf, size_t bytes, off_t at)
{
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = pread(fd, buf + got, bytes - got, at + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

/* All of it when short; else the head, a note of what was cut, and the tail. NULL: no memory. */
static char *output_text(int fd, size_t *out_total)
{
    struct stat st;
    size_t total = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    *out_total = total;
    size_t head = total <= OUTPUT_HEAD + OUTPUT_TAIL ? total : OUTPUT_HEAD;
    size_t tail = total - head < OUTPUT_TAIL ? total - head : OUTPUT_TAIL;
    char note[128] = "";
    if (head + tail < total)
        snprintf(note, sizeof note,
                 "\n[... %zu bytes cut from the middle of %zu bytes of output ...]\n",
                 total - head - tail, total);
    size_t note_len = strlen(note);
    char *text = malloc(head + note_len + tail + 1);
    if (!text)
        return NULL;
    size_t got = read_at(fd, text, head, 0);
    memcpy(text + got, note, note_len);
    got += note_len;
    got += read_at(fd, text + got, tail, (off_t)(total - tail));
    text[got] = '\0';
    return text;
}

/* ---- the two children ---- */

enum { REPORT_EXEC_ERRNO = 1, REPORT_STATUS, REPORT_TIMED_OUT };
typedef struct report {
    int kind, value;
} report;

typedef struct plan {
    char *const *paths; /* argv[0], or each PATH candidate for it: absolute */
    char *const *argv;
    char *const *envp;
    const char *cwd;
    int null_fd, out_fd, report_fd; /* all >= 3 and close-on-exec */
    uint64_t timeout_ns;
    char *program_stack; /* its top */
} plan;

#define CHILD_CODE __attribute__((no_sanitize("address", "undefined", "thread"))) static

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define JB_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(JB_UNDER_TSAN)
/* ThreadSanitizer takes every clone() for a fork and runs its fork hooks in the child, which
 * here shares its memory: glibc's own entry point, which it does not intercept. */
int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);
#define clone __clone
#endif

CHILD_CODE void child_report(const plan *p, int kind, int value)
{
    report r = {kind, value};
    syscall(SYS_write, (long)p->report_fd, &r, sizeof r);
}

/* The program: sharing memory with the intermediate until execve. */
CHILD_CODE int program_main(void *arg)
{
    const plan *p = arg;
    syscall(SYS_setpgid, 0L, 0L); /* a timeout kills the compiler and whatever it started */
    syscall(SYS_dup3, (long)p->null_fd, 0L, 0L);
    syscall(SYS_dup3, (long)p->out_fd, 1L, 0L);
    syscall(SYS_dup3, (long)p->out_fd, 2L, 0L);
    static const unsigned long empty_mask[4];
    syscall(SYS_rt_sigprocmask, (long)SIG_SETMASK, empty_mask, NULL, (long)(_NSIG / 8));
    if (syscall(SYS_chdir, p->cwd) != 0) { /* its own: clone shares no CLONE_FS */
        child_report(p, REPORT_EXEC_ERRNO, errno);
        syscall(SYS_exit, 127L);
    }
    int err = ENOENT;
    for (size_t i = 0; p->paths[i]; i++)
        if (syscall(SYS_execve, p->paths[i], p->argv, p->envp) < 0 && errno != ENOENT &&
            errno != ENOTDIR)
            err = errno; /* as execvp: a found but unusable file says why */
    child_report(p, REPORT_EXEC_ERRNO, err);
    syscall(SYS_exit, 127L);
    return 127;
}

CHILD_CODE uint64_t child_now_ns(void)
{
    struct timespec ts = {0, 0};
    syscall(SYS_clock_gettime, (long)CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The intermediate: shares our memory while the calling thread sleeps (errno included: it is
 * that thread's), never execs, and ends by exiting. Every signal stays blocked. */
CHILD_CODE int intermediate_main(void *arg)
{
    const plan *p = arg;
    static const unsigned long default_action[16]; /* SIG_DFL, no flags, no mask, on every ABI */
    for (long sig = 1; sig < _NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            syscall(SYS_rt_sigaction, sig, default_action, NULL, (long)(_NSIG / 8));
    long pid = clone(program_main, p->program_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, (void *)p);
    if (pid < 0) {
        child_report(p, REPORT_EXEC_ERRNO, errno);
        syscall(SYS_exit, 1L);
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0L);
    uint64_t deadline = child_now_ns() + p->timeout_ns;
    long nap_ns = 100 * 1000; /* without a pidfd: grows to 5 ms */
    int status = 0;
    for (;;) {
        if (syscall(SYS_wait4, pid, &status, (long)WNOHANG, NULL) == pid) {
            child_report(p, REPORT_STATUS, status);
            break;
        }
        uint64_t now = child_now_ns();
        if (now >= deadline) {
            syscall(SYS_kill, -pid, (long)SIGKILL);
            syscall(SYS_kill, pid, (long)SIGKILL);
            syscall(SYS_wait4, pid, &status, 0L, NULL);
            child_report(p, REPORT_TIMED_OUT, status);
            break;
        }
        uint64_t left = deadline - now;
        struct timespec wait = {0, 0};
        if (pidfd >= 0) {
            left = left < 1000000000ULL ? left : 1000000000ULL;
            wait.tv_sec = (time_t)(left / 1000000000ULL);
            wait.tv_nsec = (long)(left % 1000000000ULL);
            struct pollfd fd = {pidfd, POLLIN, 0};
            syscall(SYS_ppoll, &fd, 1L, &wait, NULL, 0L);
        } else {
            wait.tv_nsec = (long)(left < (uint64_t)nap_ns ? left : (uint64_t)nap_ns);
            syscall(SYS_nanosleep, &wait, NULL);
            if (nap_ns < 5 * 1000 * 1000)
                nap_ns *= 2;
        }
    }
    syscall(SYS_exit, 0L);
    return 0;
}

/* `dir`/`name` (`dir` may be empty: `name` alone), made absolute against `here` (the host's
 * current folder), since the program runs in a folder of its own. NULL: no memory. */
static char *absolute_path(const char *here, const char *dir, size_t dir_len, const char *name)
{
    jb_strbuf sb = {0};
    if ((dir_len ? dir[0] : name[0]) != '/')
        jb__strbuf_appendf(&sb, "%s/", here);
    jb__strbuf_appendf(&sb, "%.*s%s%s", (int)dir_len, dir, dir_len ? "/" : "", name);
    return sb.failed ? NULL : sb.data;
}

/* argv[0] as is when it names a path, else each directory of the child's own PATH joined with
 * it (the environment it is given: never the caller's, in a setuid host); each absolute. */
char **jb__exec_candidates(const char *name, char *const *envp)
{
    char here[4096];
    if (!getcwd(here, sizeof here))
        snprintf(here, sizeof here, "/"); /* only a relative name would miss it */
    if (strchr(name, '/')) {
        char **one = calloc(2, sizeof *one);
        if (one && !(one[0] = absolute_path(here, "", 0, name)))
            free(one), one = NULL;
        return one;
    }
    const char *path = JB_TRUSTED_PATH;
    for (size_t i = 0; envp[i]; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0)
            path = envp[i] + 5;
    size_t dirs = 1;
    for (const char *p = path; *p; p++)
        dirs += *p == ':';
    char **list = calloc(dirs + 1, sizeof *list);
    if (!list)
        return NULL;
    size_t count = 0;
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* an empty entry means the current directory, as execvp says */
        if (!(list[count++] = absolute_path(here, p, len, name))) {
            jb__exec_candidates_free(list);
            return NULL;
        }
        if (!end)
            break;
        p = end;
    }
    return list;
}

void jb__exec_candidates_free(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* Moves a descriptor to 3 or above, so that the program's dup3 onto 0-2 never clobbers it. */
static int high_fd(int fd)
{
    if (fd < 0 || fd >= 3)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return moved;
}

static int output_file(void)
{
    int fd = memfd_create("jitbridge-child-output", MFD_CLOEXEC);
    if (fd < 0) { /* no memfd (before Linux 3.17): an unnamed file in the temporary folder */
        const char *tmp = secure_getenv("TMPDIR");
        fd = open(tmp && *tmp ? tmp : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    }
    return high_fd(fd);
}

/* ---- running ---- */

int jb__child_run(jb_child *c)
{
    c->wait_status = 0;
    c->output = NULL;
    c->output_bytes = 0;
    c->passing = false;
    JB_RETURN_IF(!c->argv[0], c->fail_status, "%s: the command is empty%s", c->what,
                 c->hint ? c->hint : "");
    char **paths = jb__exec_candidates(c->argv[0], c->envp);
    c->passing = !paths;
    JB_RETURN_IF(!paths, JB_ERR_OUT_OF_MEMORY, "no memory to start %s", c->what);
    int fds[4] = {-1, -1, -1, -1}; /* /dev/null, output, report read end, report write end */
    int pipe_fds[2];
    fds[0] = high_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
    fds[1] = output_file();
    if (pipe2(pipe_fds, O_CLOEXEC) == 0)
        fds[2] = high_fd(pipe_fds[0]), fds[3] = high_fd(pipe_fds[1]);
    char *stacks = mmap(NULL, 2 * STACK_BYTES, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    int err = errno;
    pid_t pid = -1;
    if (fds[0] >= 0 && fds[1] >= 0 && fds[2] >= 0 && fds[3] >= 0 && stacks != MAP_FAILED) {
        plan p = {paths, c->argv, c->envp, c->cwd, fds[0], fds[1], fds[3],
                  c->timeout_ms * 1000000ULL, stacks + STACK_BYTES};
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* no handler of the host may run in them */
        /* Exit signal 0: see the top of the file. */
        pid = clone(intermediate_main, stacks + 2 * STACK_BYTES, CLONE_VM | CLONE_VFORK, &p);
        err = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (fds[3] >= 0)
        close(fds[3]); /* then the report pipe ends when the intermediate does */
    report r[2] = {{0, 0}, {0, 0}};
    size_t got = pid > 0 ? jb__read_up_to(fds[2], r, sizeof r) : 0;
    int reaped = 0;
    while (pid > 0 && (reaped = waitpid(pid, NULL, __WCLONE)) < 0 && errno == EINTR)
        ;
    if (stacks != MAP_FAILED)
        munmap(stacks, 2 * STACK_BYTES); /* only now: a child that runs on them has ended */
    jb__exec_candidates_free(paths);
    if (fds[1] >= 0)
        c->output = output_text(fds[1], &c->output_bytes);
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    /* A start refused for want of descriptors, memory or processes may pass; a program that is
     * missing or may not run (ENOENT, EACCES) does not. */
    c->passing = jb__errno_is_transient(err);
    JB_RETURN_IF(pid < 0, c->fail_status, "cannot start %s '%s': %s", c->what, c->argv[0],
                 strerror(err));
    if (got >= sizeof *r && r[0].kind == REPORT_EXEC_ERRNO) {
        c->passing = jb__errno_is_transient(r[0].value);
        return jb__fail(c->fail_status, "cannot start %s '%s': %s%s", c->what, c->argv[0],
                        strerror(r[0].value), c->hint ? c->hint : "");
    }
    const report *last = got >= sizeof *r ? &r[0] : NULL;
    c->passing = true; /* its helper killed, or reaped by another waiter */
    JB_RETURN_IF(!last, c->fail_status,
                 "%s '%s' ended without a report (its helper process was %s)", c->what,
                 c->argv[0], reaped != pid ? "reaped by another part of the process" : "killed");
    c->wait_status = last->value;
    c->passing = last->kind == REPORT_TIMED_OUT;
    JB_RETURN_IF(last->kind == REPORT_TIMED_OUT, c->fail_status,
                 "%s '%s' did not finish within %llu ms and was killed "
                 "(JITBRIDGE_COMPILE_TIMEOUT_MS sets the limit)",
                 c->what, c->argv[0], (unsigned long long)c->timeout_ms);
    return JB_OK;
}
