/*
 * A TMPDIR that someone else may write to never holds what the compiler reads or dlopen loads.
 * A folder writable by our own group counts: its other members could swap ours.
 *  - Where the private folder goes: in TMPDIR when it and its parents are ours (or root's) and
 *    not writable by group or others; else, for a group-writable TMPDIR, one under a
 *    group-writable parent, or a link to one, in the disk cache's tmp/; with no disk cache, or
 *    one in a folder the library does not own (no tmp/), the compile fails naming TMPDIR.
 *  - The swap (as root: a victim and an attacker, two users of one group): the victim's TMPDIR
 *    is writable by the group; its $CC pauses before compiling, the attacker renames the
 *    victim's private folder away, puts her own in its place with her own kernel-N.c, and lets
 *    the compile go on. Her code ran in the victim when the library compiled there; now the
 *    private folder is in the victim's cache folder, which she cannot reach.
 */
#include "check.h"
#include "deadline.h"
#include "jitbridge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char root[] = "/tmp/jb-shared-tmpdir-XXXXXX";

static int build(void)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    char body[128];
    snprintf(body, sizeof body, "/* %d */ out[thread_index()] = inp[thread_index()] * 2.0f;",
             getpid());
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "shared_tmpdir", spec.body = body;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    jb_custom_kernel *kernel = NULL;
    jb_device *cpu;
    int status = jb_device_get(&cpu, JB_DEVICE_CPU, 0);
    if (status == JB_OK)
        status = jb_custom_kernel_new(&kernel, &spec);
    if (status == JB_OK)
        status = jb_custom_kernel_prepare(kernel, cpu);
    jb_custom_kernel_free(kernel);
    return status;
}

/* Whether `dir` holds a private folder ("jitbridge-PID-..."): this process's, or any (`any`). */
static bool holds_private_folder(const char *dir, bool any)
{
    char prefix[64] = "jitbridge-";
    if (!any)
        snprintf(prefix, sizeof prefix, "jitbridge-%ld-", (long)getpid());
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));)
        found = found || strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return found;
}

static void make_folder(const char *path, mode_t mode)
{
    CHECK(mkdir(path, mode) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
    chmod(path, mode); /* past the umask */
}

enum { IN_TMPDIR = 10, IN_CACHE, NOWHERE, FAILED };
static const char *const where_names[] = {"in TMPDIR", "in the cache's tmp/", "nowhere",
                                          "failed"};

typedef enum cache_kind { CACHE_OWN, CACHE_OFF, CACHE_SHARED } cache_kind;

/* In a new process with TMPDIR=`tmpdir` and a disk cache of its own, none, or one in a folder
 * that holds the user's files (shared: the library makes nothing there): where its private
 * folder went; the build's message in `message` when it failed. */
static int where_compiled(const char *tmpdir, cache_kind kind, char *message, size_t len)
{
    char cache[256], cache_tmp[300];
    snprintf(cache, sizeof cache, "%s/%s", root, kind == CACHE_SHARED ? "home" : "cache");
    snprintf(cache_tmp, sizeof cache_tmp, "%s/tmp", cache);
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork_with_deadline("a child that compiles", 60);
    if (pid == 0) {
        close(fds[0]);
        setenv("TMPDIR", tmpdir, 1);
        setenv("JITBRIDGE_CACHE_DIR", cache, 1);
        setenv("JITBRIDGE_DISK_CACHE", kind == CACHE_OFF ? "0" : "1", 1);
        int status = build();
        int where = status != JB_OK          ? FAILED
                    : holds_private_folder(tmpdir, false) ? IN_TMPDIR
                    : holds_private_folder(cache_tmp, false) ? IN_CACHE
                                                  : NOWHERE;
        if (status != JB_OK)
            (void)!write(fds[1], jb_last_error_message(), strlen(jb_last_error_message()));
        _exit(where);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], message, len - 1);
    message[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int ws = wait_child_with_deadline(pid, 65, "a child that compiles");
    return ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void expect(const char *what, const char *tmpdir, cache_kind kind, int want)
{
    char message[2048];
    int got = where_compiled(tmpdir, kind, message, sizeof message);
    CHECK(got == want, "%s: compiled %s, not %s %s", what,
          got >= IN_TMPDIR && got <= FAILED ? where_names[got - IN_TMPDIR] : "(crashed)",
          where_names[want - IN_TMPDIR], message);
    if (want == FAILED)
        CHECK(strstr(message, "TMPDIR") && strstr(message, "writable by its group"),
              "%s: the error does not name TMPDIR and why: %s", what, message);
}

static void test_where(void)
{
    char own[256], shared[256], under_shared[256], link[256];
    snprintf(own, sizeof own, "%s/own", root);
    snprintf(shared, sizeof shared, "%s/shared", root);
    snprintf(under_shared, sizeof under_shared, "%s/shared/own", root);
    snprintf(link, sizeof link, "%s/link", root);
    make_folder(own, 0700);
    make_folder(shared, 0770);
    make_folder(under_shared, 0700);
    CHECK(symlink(shared, link) == 0, "symlink: %s", strerror(errno));
    char home[256], notes[300];
    snprintf(home, sizeof home, "%s/home", root);
    snprintf(notes, sizeof notes, "%s/notes.txt", home);
    make_folder(home, 0700);
    FILE *f = fopen(notes, "w");
    if (f)
        fclose(f);
    expect("a TMPDIR of our own", own, CACHE_OWN, IN_TMPDIR);
    expect("a TMPDIR our group may write", shared, CACHE_OWN, IN_CACHE);
    expect("a TMPDIR of our own under a folder our group may write", under_shared, CACHE_OWN,
           IN_CACHE);
    expect("a TMPDIR that links to a folder our group may write", link, CACHE_OWN, IN_CACHE);
    expect("a TMPDIR our group may write, no disk cache", shared, CACHE_OFF, FAILED);
    expect("a TMPDIR our group may write, a shared cache folder", shared, CACHE_SHARED, FAILED);
    CHECK(!holds_private_folder(home, true), "a private folder was made in a shared folder");
    chmod(shared, 01770); /* sticky: no one may rename or remove what is not theirs */
    expect("a TMPDIR our group may write, sticky", shared, CACHE_OWN, IN_TMPDIR);
}

/* ---- the swap, by another member of the group ---- */

#define GROUP 3999000
#define VICTIM 3999001
#define ATTACKER 3999002

#define BECOME_FAILED 90

static void become(uid_t uid)
{
    gid_t group = GROUP;
    if (setgroups(1, &group) != 0 || setgid(GROUP) != 0 || setuid(uid) != 0)
        _exit(BECOME_FAILED);
}

/* Waits up to 30 s for `path`. */
static bool wait_for(const char *path)
{
    for (int i = 0; i < 3000; i++) {
        if (access(path, F_OK) == 0)
            return true;
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return false;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

/* The attacker: once the victim's compiler waits, her folder and source replace the victim's. */
static int attack(const char *shared, const char *sync)
{
    char source_note[512], source[1024] = "", go[512], marker[512];
    snprintf(source_note, sizeof source_note, "%s/source", sync);
    snprintf(go, sizeof go, "%s/go", sync);
    snprintf(marker, sizeof marker, "%s/marker", sync);
    if (!wait_for(source_note))
        return 1;
    FILE *f = fopen(source_note, "r");
    if (f && fgets(source, sizeof source, f))
        source[strcspn(source, "\n")] = '\0';
    if (f)
        fclose(f);
    char folder[1024], moved[600];
    snprintf(folder, sizeof folder, "%s", source);
    char *slash = strrchr(folder, '/');
    bool reachable = slash && strncmp(folder, shared, strlen(shared)) == 0 &&
                     folder[strlen(shared)] == '/';
    if (slash)
        *slash = '\0';
    snprintf(moved, sizeof moved, "%s/moved-away", shared);
    if (reachable && rename(folder, moved) == 0 && mkdir(folder, 0777) == 0) {
        chmod(folder, 0777);
        char text[1024];
        snprintf(text, sizeof text,
                 "__attribute__((constructor)) static void planted(void)\n"
                 "{ extern int creat(const char *, unsigned); creat(\"%s\", 0644); }\n",
                 marker);
        write_file(source, text, 0644);
    }
    write_file(go, "", 0666);
    return 0;
}

static void test_swap(void)
{
    if (geteuid() != 0) {
        printf("test_shared_tmpdir: the swap by another member of the group needs root to "
               "stage; not tried\n");
        return;
    }
    char shared[256], home[256], cache[300], sync[256], cc[256], script[1024], marker[300];
    chmod(root, 0755);
    snprintf(shared, sizeof shared, "%s/victim-tmp", root);
    snprintf(home, sizeof home, "%s/victim-home", root);
    snprintf(cache, sizeof cache, "%s/cache", home);
    snprintf(sync, sizeof sync, "%s/sync", root);
    snprintf(cc, sizeof cc, "%s/pausing-cc", root);
    snprintf(marker, sizeof marker, "%s/marker", sync);
    make_folder(shared, 0770);
    make_folder(home, 0700);
    make_folder(sync, 0777);
    CHECK(chown(shared, VICTIM, GROUP) == 0 && chown(home, VICTIM, GROUP) == 0, "chown: %s",
          strerror(errno));
    /* The victim's compiler notes its source, then waits for the attacker to be done. */
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "[ \"$1\" = --version ] && exec cc --version\n"
             "for a; do case $a in *.c) echo \"$a\" > %s/source;; esac; done\n"
             "i=0; while [ ! -e %s/go ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done\n"
             "exec cc \"$@\"\n",
             sync, sync);
    write_file(cc, script, 0755);

    pid_t victim = fork_with_deadline("the victim", 90);
    if (victim == 0) {
        become(VICTIM);
        setenv("TMPDIR", shared, 1);
        setenv("HOME", home, 1);
        setenv("CC", cc, 1);
        setenv("JITBRIDGE_CACHE_DIR", cache, 1);
        unsetenv("JITBRIDGE_DISK_CACHE");
        _exit(build() == JB_OK ? 0 : 1);
    }
    pid_t attacker = fork_with_deadline("the attacker", 90);
    if (attacker == 0) {
        become(ATTACKER);
        _exit(attack(shared, sync));
    }
    int victim_ws = wait_child_with_deadline(victim, 95, "the victim");
    int attacker_ws = wait_child_with_deadline(attacker, 95, "the attacker");
    if (WIFEXITED(victim_ws) && WEXITSTATUS(victim_ws) == BECOME_FAILED) {
        printf("test_shared_tmpdir: cannot take on another user's ids here; the swap not tried\n");
        return;
    }
    CHECK(WIFEXITED(attacker_ws) && WEXITSTATUS(attacker_ws) == 0,
          "the attacker never saw the victim compile (status %#x)", attacker_ws);
    CHECK(access(marker, F_OK) != 0,
          "the attacker's code ran in the victim: she swapped its private folder in a TMPDIR "
          "writable by their group");
    CHECK(WIFEXITED(victim_ws) && WEXITSTATUS(victim_ws) == 0,
          "the victim could not compile (status %#x)", victim_ws);
}

int main(void)
{
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    unsetenv("JITBRIDGE_COMPILER_ENV");
    test_where();
    test_swap();
    char command[300];
    snprintf(command, sizeof command, "rm -rf %s", root);
    CHECK(system(command) == 0, "cleaning %s", root);
    return check_summary("test_shared_tmpdir");
}
