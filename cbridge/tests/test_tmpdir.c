/*
 * What the cpu backend takes from $TMPDIR and the environment.
 *  - A process killed during its life leaves "jitbridge-PID-*" behind; the next process's first
 *    compile sweeps those of dead processes of this user in this PID namespace, and nothing
 *    else: not a live process's, not another user's, not a symlink's target, not a folder from
 *    an unknown or other PID namespace until it has been idle for a day.
 *  - CC is read with secure_getenv: a setuid copy of this test (as root: owned by nobody) must
 *    not take its caller's CC.
 */
#include "check.h"
#include "deadline.h"
#include "jitbridge.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char root[] = "/tmp/jb-tmpdir-XXXXXX";
static char tmp[128];

static int build(void)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    char body[128];
    snprintf(body, sizeof body, "/* %d */ out[thread_index()] = inp[thread_index()];", getpid());
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec), .name = "sweep",
                           .input_names = in, .input_dtypes = f32, .num_inputs = 1,
                           .output_names = out, .output_dtypes = f32, .num_outputs = 1,
                           .body = body};
    jb_custom_kernel *kernel;
    jb_device *cpu;
    int status = jb_device_get(&cpu, JB_DEVICE_CPU, 0);
    if (status == JB_OK)
        status = jb_custom_kernel_new(&kernel, &spec);
    if (status == JB_OK) {
        status = jb_custom_kernel_prepare(kernel, cpu);
        jb_custom_kernel_free(kernel);
    }
    return status;
}

static pid_t dead_pid(void)
{
    pid_t pid = fork_with_deadline("a child that exits at once", 10);
    if (pid == 0)
        _exit(0);
    wait_child_with_deadline(pid, 15, "a child that exits at once");
    return pid;
}

static unsigned long long pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A folder as a process would leave it, with a file, a link to `victim` and a given age. */
static void leave_folder(char *path, size_t len, const char *name, const char *victim,
                         int age_hours)
{
    snprintf(path, len, "%s/%s", tmp, name);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
    char file[512];
    snprintf(file, sizeof file, "%s/kernel-3.c", path);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    snprintf(file, sizeof file, "%s/link-to-victim", path);
    CHECK(symlink(victim, file) == 0, "symlink: %s", strerror(errno));
    struct timespec times[2] = {{time(NULL) - age_hours * 3600L, 0},
                                {time(NULL) - age_hours * 3600L, 0}};
    utimensat(AT_FDCWD, path, times, 0);
}

static void test_sweep(void)
{
    snprintf(tmp, sizeof tmp, "%s/tmp", root);
    mkdir(tmp, 0700);
    setenv("TMPDIR", tmp, 1);
    unsigned long long ns = pid_namespace();

    /* A real leftover: a process killed after it compiled. */
    pid_t killed = fork_with_deadline("a child killed after it compiled", 60);
    if (killed == 0) {
        build();
        raise(SIGKILL);
        _exit(1);
    }
    wait_child_with_deadline(killed, 65, "a child killed after it compiled");

    char victim[256], victim_file[300];
    snprintf(victim, sizeof victim, "%s/victim", root);
    mkdir(victim, 0700);
    snprintf(victim_file, sizeof victim_file, "%s/keep", victim);
    fclose(fopen(victim_file, "w"));

    char name[128], dead[512], alive[512], other_user[512], link[512], old_fresh[512],
        old_stale[512], foreign_fresh[512], foreign_stale[512], killed_prefix[64];
    pid_t gone = dead_pid();
    snprintf(name, sizeof name, "jitbridge-%ld-%llu-aBc123", (long)gone, ns);
    leave_folder(dead, sizeof dead, name, victim_file, 0);
    snprintf(name, sizeof name, "jitbridge-%ld-%llu-aBc123", (long)getpid(), ns);
    leave_folder(alive, sizeof alive, name, victim_file, 48);
    snprintf(name, sizeof name, "jitbridge-%ld-%llu-xyz789", (long)gone, ns);
    leave_folder(other_user, sizeof other_user, name, victim_file, 48);
    bool root_user = geteuid() == 0;
    if (root_user)
        CHECK(chown(other_user, 65534, 65534) == 0, "chown: %s", strerror(errno));
    snprintf(link, sizeof link, "%s/jitbridge-%ld-%llu-link00", tmp, (long)gone, ns);
    CHECK(symlink(victim, link) == 0, "symlink: %s", strerror(errno));
    snprintf(name, sizeof name, "jitbridge-%ld-old001", (long)gone);
    leave_folder(old_fresh, sizeof old_fresh, name, victim_file, 1);
    snprintf(name, sizeof name, "jitbridge-%ld-old002", (long)gone);
    leave_folder(old_stale, sizeof old_stale, name, victim_file, 48);
    snprintf(name, sizeof name, "jitbridge-%ld-%llu-frn001", (long)getpid(), ns + 1);
    leave_folder(foreign_fresh, sizeof foreign_fresh, name, victim_file, 1);
    snprintf(name, sizeof name, "jitbridge-%ld-%llu-frn002", (long)getpid(), ns + 1);
    leave_folder(foreign_stale, sizeof foreign_stale, name, victim_file, 48);
    snprintf(killed_prefix, sizeof killed_prefix, "jitbridge-%ld-", (long)killed);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q '^%s'", tmp, killed_prefix);
    CHECK(system(cmd) == 0, "the killed process left no folder to sweep");

    /* A new process: its first compile sweeps. */
    pid_t pid = fork_with_deadline("a child whose compile sweeps", 60);
    if (pid == 0)
        _exit(build() == JB_OK ? 0 : 1);
    int ws = wait_child_with_deadline(pid, 65, "a child whose compile sweeps");
    CHECK(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
          "the sweeping process could not compile");

    CHECK(system(cmd) != 0, "the killed process's folder was not swept");
    CHECK(!exists(dead), "a dead process's folder was not swept: %s", dead);
    CHECK(exists(alive), "a live process's folder was swept: %s", alive);
    if (root_user)
        CHECK(exists(other_user), "another user's folder was swept: %s", other_user);
    else
        printf("test_tmpdir: another user's folder needs root to make; not tried\n");
    CHECK(exists(link) && exists(victim_file), "a symlinked folder or its target was touched");
    CHECK(exists(victim_file), "a link inside a swept folder was followed: %s", victim_file);
    CHECK(exists(old_fresh), "a recent folder of an unknown PID namespace was swept");
    CHECK(!exists(old_stale), "a day-old folder of an unknown PID namespace was kept");
    CHECK(exists(foreign_fresh), "a recent folder of another PID namespace was swept");
    CHECK(!exists(foreign_stale), "a day-old folder of another PID namespace was kept");
}

/* Runs `program --print-compiler` with CC set; returns what it printed. */
static void print_compiler_of(const char *program, char *out, size_t len)
{
    int fds[2];
    out[0] = '\0';
    if (pipe(fds) != 0)
        return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    char *argv[] = {(char *)program, "--print-compiler", NULL};
    setenv("CC", "/nonexistent/planted-cc", 1);
    pid_t pid;
    if (posix_spawn(&pid, program, &actions, NULL, argv, environ) == 0) {
        close(fds[1]);
        ssize_t n = read(fds[0], out, len - 1);
        out[n > 0 ? n : 0] = '\0';
        waitpid(pid, NULL, 0);
    } else {
        close(fds[1]);
    }
    close(fds[0]);
    posix_spawn_file_actions_destroy(&actions);
    unsetenv("CC");
}

static void test_secure_getenv(void)
{
    char self[4096], copy[4200], seen[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    print_compiler_of(self, seen, sizeof seen);
    CHECK(strstr(seen, "secure=0 compiler=/nonexistent/planted-cc") != NULL,
          "a plain run must take CC: %s", seen);
    if (geteuid() != 0) {
        printf("test_tmpdir: the setuid case needs root to make; not tried\n");
        return;
    }
    /* Next to the test, not in /tmp, which may be mounted nosuid. */
    snprintf(copy, sizeof copy, "%s-setuid", self);
    char cmd[4 * sizeof copy + 64];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chown 65534 '%s' && chmod 4755 '%s'", self, copy,
             copy, copy);
    CHECK(system(cmd) == 0, "cannot make a setuid copy: %s", cmd);
    print_compiler_of(copy, seen, sizeof seen);
    unlink(copy);
    if (strstr(seen, "secure=0")) {
        printf("test_tmpdir: setuid has no effect here (nosuid mount?); not tried\n");
        return;
    }
    CHECK(strstr(seen, "secure=1 compiler=cc\n") != NULL,
          "a setuid program took its caller's CC: %s", seen);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print-compiler") == 0) {
        printf("secure=%lu compiler=%s\n", getauxval(AT_SECURE), jb_cpu_compiler());
        fflush(stdout);
        _exit(0); /* a sanitizer's exit-time checks cannot run as another user */
    }
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    setenv("JITBRIDGE_DISK_CACHE", "0", 1);
    test_sweep();
    test_secure_getenv();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "cleaning %s", root);
    return check_summary("test_tmpdir");
}
