/*
 * The compiler's environment is the library's choice, never the host's whole one. For each
 * variable gcc reads that changes what it runs, includes, links or writes, a plant leaves a
 * marker when it takes effect: a fake cc1, as, collect2 and ld found through PATH,
 * COMPILER_PATH or GCC_EXEC_PREFIX; a stdint.h with a constructor through CPATH or
 * C_INCLUDE_PATH; start files (crtbeginS.o, crtendS.o) with a constructor through LIBRARY_PATH;
 * a dependency file written through DEPENDENCIES_OUTPUT or SUNPRO_DEPENDENCIES. The prefix
 * variables' plants go in every folder `cc -print-search-dirs` lists for them, as that cc says.
 * Each variable is tried in a new process (this test with --compile, whose first compile reads
 * it):
 *  - a plain host passes PATH (its fake as runs) but none of the others, unless
 *    JITBRIDGE_COMPILER_ENV names it: then the plant takes effect, which shows it would;
 *  - a setuid copy of this test (as root: owned by nobody, so AT_SECURE is set) passes none of
 *    its caller's, PATH and JITBRIDGE_COMPILER_ENV included: no marker ever;
 *  - the compiler and its version query see only PATH, HOME, LANG, LANGUAGE, LC_*, the names
 *    JITBRIDGE_COMPILER_ENV lists, and TMPDIR set to the private folder;
 *  - the compiler runs in the private folder, not in the host's current one, where an object
 *    planted as libgcc_s.so.1 (a name Debian's libgcc_s.so linker script gives relative) was
 *    linked into the module; a relative $CC still means the host's folder.
 */
#include "check.h"
#include "deadline.h"
#include "jitbridge.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char root[] = "/tmp/jb-compiler-env-XXXXXX";
static char open_dir[128]; /* writable by all: a setuid host runs as nobody */

static const char *const variables[] = {
    "PATH",         "COMPILER_PATH", "GCC_EXEC_PREFIX",    "CPATH",
    "C_INCLUDE_PATH", "LIBRARY_PATH", "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"};
#define NUM_VARIABLES (sizeof variables / sizeof *variables)
static char values[NUM_VARIABLES][512]; /* each folder's path and a little more */

/* The host's one compile: a kernel no other run has built. */
static int compile_once(void)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    char body[128];
    snprintf(body, sizeof body, "/* %d */ out[thread_index()] = inp[thread_index()] + 1.0f;",
             getpid());
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "environment", spec.body = body;
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

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s: %s", path, strerror(errno));
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

/* The first line `command` prints, without its newline. */
static void first_line(const char *command, char *out, size_t len)
{
    out[0] = '\0';
    FILE *p = popen(command, "r");
    if (p && fgets(out, (int)len, p))
        out[strcspn(out, "\n")] = '\0';
    if (p)
        pclose(p);
    CHECK(out[0], "%s printed nothing", command);
}

static void make_folder(const char *path, mode_t mode)
{
    CHECK(mkdir(path, mode) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
    chmod(path, mode);
}

/* Fake cc1, as, collect2 and ld in `dir`: each marks `marker`, then fails the compile. */
static void fake_tools(const char *dir, const char *marker)
{
    static const char *const tools[] = {"cc1", "as", "collect2", "ld"};
    for (size_t i = 0; i < sizeof tools / sizeof *tools; i++) {
        char path[1024], script[1024];
        snprintf(path, sizeof path, "%s/%s", dir, tools[i]);
        snprintf(script, sizeof script, "#!/bin/sh\necho \"ran $0\" >> %s\nexit 1\n", marker);
        write_file(path, script, 0755);
    }
}

/* Whether variable v's plant is fake tools, which fail the compile they run in. */
static bool runs_fake_tools(size_t v)
{
    return strcmp(variables[v], "PATH") == 0 || strcmp(variables[v], "COMPILER_PATH") == 0 ||
           strcmp(variables[v], "GCC_EXEC_PREFIX") == 0;
}

/* A file whose constructor creates `marker` when the module it is compiled into is loaded. */
static const char constructor_fmt[] =
    "__attribute__((constructor)) static void jb_planted(void)\n"
    "{ extern int creat(const char *, unsigned); creat(\"%s\", 0644); }\n";

/* `path` with "." and ".." taken out by its words alone (the folders need not exist yet). */
static void lexical_path(const char *path, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = path; *p;) {
        p += strspn(p, "/");
        size_t word = strcspn(p, "/");
        if (word == 2 && strncmp(p, "..", 2) == 0) {
            while (used > 0 && out[--used] != '/')
                ;
            out[used] = '\0';
        } else if (word && !(word == 1 && *p == '.') && used + word + 2 <= len) {
            out[used++] = '/';
            memcpy(out + used, p, word);
            used += word;
            out[used] = '\0';
        }
        p += word;
    }
}

/* Whether `path`, its ".." taken out, is a folder or file inside `within`. */
static bool inside(const char *path, const char *within)
{
    char plain[1024];
    lexical_path(path, plain, sizeof plain);
    return strncmp(plain, within, strlen(within)) == 0 && plain[strlen(within)] == '/';
}

/* Makes the folder `listed` names as written, so that the kernel can walk it: in
 * PREFIX/lib/gcc/../../libexec/ each folder before a ".." must exist. Only the folders inside
 * `within` are made (a folder above it is never made or chmod-ed). */
static void make_listed_folder(const char *within, const char *listed)
{
    char part[1024];
    for (const char *slash = strchr(listed + 1, '/');; slash = strchr(slash + 1, '/')) {
        size_t len = slash ? (size_t)(slash - listed) : strlen(listed);
        snprintf(part, sizeof part, "%.*s", (int)len, listed);
        if (inside(part, within))
            make_folder(part, 0755);
        if (!slash)
            break;
    }
}

/* The folders `cc -print-search-dirs` lists as `kind` ("programs" or "libraries") with
 * name=value set that lie inside `within`, made, each handed to `plant_in` with `arg`: the
 * compiler says where it looks (gcc 12 looks in PREFIX/MACHINE/VERSION/ for its programs, an
 * Ubuntu gcc 13 in PREFIX/../../libexec/gcc/MACHINE/VERSION/), no layout is assumed. */
static int plant_where_cc_looks(const char *name, const char *value, const char *kind,
                                const char *within, void (*plant_in)(const char *, const void *),
                                const void *arg)
{
    char command[1200], line[16384];
    snprintf(command, sizeof command, "%s='%s' cc -print-search-dirs", name, value);
    FILE *p = popen(command, "r");
    size_t kind_len = strlen(kind);
    int planted = 0;
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, kind, kind_len) != 0 || strncmp(line + kind_len, ": ", 2) != 0)
            continue;
        char *list = line + kind_len + 2;
        list += *list == '='; /* gcc marks a sysroot-relative list so */
        for (char *save = NULL, *dir = strtok_r(list, ":", &save); dir;
             dir = strtok_r(NULL, ":", &save)) {
            if (!inside(dir, within))
                continue; /* the compiler's own folders, or ones above the plant's */
            make_listed_folder(within, dir);
            plant_in(dir, arg);
            planted++;
        }
    }
    if (p)
        pclose(p);
    CHECK(planted > 0, "%s listed no %s folder inside %s: nothing planted", command, kind, within);
    return planted;
}

/* What `cc -print-NAME=what` says with name=value set: where it would take `what` from. */
static void where_cc_takes(const char *name, const char *value, const char *option,
                           const char *what, char *out, size_t len)
{
    char command[1200];
    snprintf(command, sizeof command, "%s='%.600s' cc -print-%s=%.200s", name, value, option,
             what);
    first_line(command, out, len);
}

static void fake_tools_in(const char *dir, const void *marker) { fake_tools(dir, marker); }

/* The start files a shared object is linked with, each planted as the real one joined with
 * `planted_object` (its constructor): the link works as before, and the constructor runs. */
static const char *const start_files[] = {"crtbeginS.o", "crtendS.o"};

static void start_files_in(const char *dir, const void *planted_object)
{
    for (size_t i = 0; i < sizeof start_files / sizeof *start_files; i++) {
        char real[1024], command[3400];
        snprintf(command, sizeof command, "cc -print-file-name=%s", start_files[i]);
        first_line(command, real, sizeof real); /* LIBRARY_PATH is not set here: main unset it */
        snprintf(command, sizeof command,
                 "cc -nostdlib -r -o %s/%s %s %s && chmod 644 %s/%s", dir, start_files[i], real,
                 (const char *)planted_object, dir, start_files[i]);
        CHECK(system(command) == 0, "%s", command);
    }
}

static void plant(size_t v)
{
    char dir[400], marker[400], path[1024], text[2048];
    snprintf(dir, sizeof dir, "%s/%s", root, variables[v]);
    snprintf(marker, sizeof marker, "%s/%s", open_dir, variables[v]);
    make_folder(dir, 0755);
    snprintf(values[v], sizeof values[v], "%s", dir);
    const char *name = variables[v];
    if (strcmp(name, "PATH") == 0) {
        fake_tools(dir, marker);
        snprintf(values[v], sizeof values[v], "%s:/usr/bin:/bin", dir);
    } else if (strcmp(name, "COMPILER_PATH") == 0) {
        fake_tools(dir, marker);
    } else if (strcmp(name, "GCC_EXEC_PREFIX") == 0) {
        /* A prefix shaped like an install's (PREFIX/lib/gcc/): the folders gcc finds relative
         * to it (PREFIX/lib/gcc/../../libexec/gcc/..., PREFIX/lib/gcc/../../MACHINE/bin/...)
         * are inside the plant's folder too. */
        snprintf(values[v], sizeof values[v], "%s/prefix/lib/gcc/", dir);
        plant_where_cc_looks(name, values[v], "programs", dir, fake_tools_in, marker);
        where_cc_takes(name, values[v], "prog-name", "cc1", path, sizeof path);
        CHECK(inside(path, dir),
              "with GCC_EXEC_PREFIX=%s, cc would run cc1 from '%s', not the plant", values[v],
              path);
    } else if (strcmp(name, "CPATH") == 0 || strcmp(name, "C_INCLUDE_PATH") == 0) {
        int n = snprintf(text, sizeof text,
                         "#include_next <stdint.h>\n#ifndef JB_PLANTED\n#define JB_PLANTED\n");
        n += snprintf(text + n, sizeof text - (size_t)n, constructor_fmt, marker);
        snprintf(text + n, sizeof text - (size_t)n, "#endif\n");
        snprintf(path, sizeof path, "%s/stdint.h", dir);
        write_file(path, text, 0644);
    } else if (strcmp(name, "LIBRARY_PATH") == 0) {
        /* gcc searches it for start files (and GCC_EXEC_PREFIX first, unset here) */
        char source[600], object[600], command[1400];
        snprintf(source, sizeof source, "%s/planted.c", dir);
        snprintf(object, sizeof object, "%s/planted.o", dir);
        snprintf(text, sizeof text, constructor_fmt, marker);
        write_file(source, text, 0644);
        snprintf(command, sizeof command, "cc -fPIC -c %s -o %s", source, object);
        CHECK(system(command) == 0, "%s", command);
        plant_where_cc_looks(name, dir, "libraries", dir, start_files_in, object);
        where_cc_takes(name, dir, "file-name", "crtbeginS.o", path, sizeof path);
        CHECK(inside(path, dir),
              "with LIBRARY_PATH=%s, cc would link crtbeginS.o from '%s', not the plant", dir,
              path);
    } else { /* a file the compiler writes where its caller says */
        snprintf(values[v], sizeof values[v], "%s", marker);
    }
}

/* The last host's report: "secure=N status=N message". */
static char report[1024];

/* Runs `program --compile` in `cwd` (NULL: this process's) and reads its report. */
static void run_host(const char *program, const char *cwd, unsigned long *secure, int *status)
{
    report[0] = '\0';
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0); /* the report says */
    if (cwd)
        posix_spawn_file_actions_addchdir_np(&actions, cwd);
    char *argv[] = {(char *)program, "--compile", NULL};
    pid_t pid;
    int spawned = posix_spawn(&pid, program, &actions, NULL, argv, environ);
    close(fds[1]);
    if (spawned == 0) {
        ssize_t n = read(fds[0], report, sizeof report - 1); /* the host's alarm bounds it */
        report[n > 0 ? n : 0] = '\0';
        while (n > 0 && report[n - 1] == '\n')
            report[--n] = '\0';
        wait_child_with_deadline(pid, 65, "a host that compiles");
    }
    close(fds[0]);
    posix_spawn_file_actions_destroy(&actions);
    *secure = 99, *status = -1;
    CHECK(sscanf(report, "secure=%lu status=%d", secure, status) == 2, "%s: no report: '%s'",
          program, report);
}

/* Runs `program --compile` with variable v planted (and JITBRIDGE_COMPILER_ENV naming it when
 * `listed`): whether the plant took effect; *secure and *status are what the host saw. */
static bool planted_took_effect(const char *program, size_t v, bool listed, unsigned long *secure,
                                int *status)
{
    char marker[512];
    snprintf(marker, sizeof marker, "%s/%s", open_dir, variables[v]);
    unlink(marker);
    char *saved_path = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv(variables[v], values[v], 1);
    if (listed)
        setenv("JITBRIDGE_COMPILER_ENV", variables[v], 1);
    run_host(program, NULL, secure, status);
    setenv("PATH", saved_path, 1); /* PATH's plant: restored for this process */
    free(saved_path);
    if (strcmp(variables[v], "PATH") != 0)
        unsetenv(variables[v]);
    unsetenv("JITBRIDGE_COMPILER_ENV");
    return access(marker, F_OK) == 0;
}

/* The host's current folder is not the compiler's: ld looks for a linker script's relative
 * names there first (Debian's libgcc_s.so says GROUP ( libgcc_s.so.1 -lgcc )), so an object
 * planted as libgcc_s.so.1 in the folder a host runs in was linked into its module. */
static char cwd_dir[400], cwd_marker[400];

static void plant_in_cwd(void)
{
    char source[600], text[1024], command[2048];
    snprintf(cwd_dir, sizeof cwd_dir, "%s/cwd", root);
    snprintf(cwd_marker, sizeof cwd_marker, "%s/cwd", open_dir);
    make_folder(cwd_dir, 0755);
    snprintf(source, sizeof source, "%s/planted.c", root);
    snprintf(text, sizeof text, constructor_fmt, cwd_marker);
    write_file(source, text, 0644);
    snprintf(command, sizeof command, "cc -fPIC -c %s -o %s/libgcc_s.so.1 && chmod 644 %s/*",
             source, cwd_dir, cwd_dir);
    CHECK(system(command) == 0, "%s", command);
}

static bool cwd_plant_took_effect(const char *program, unsigned long *secure, int *status)
{
    unlink(cwd_marker);
    run_host(program, cwd_dir, secure, status);
    return access(cwd_marker, F_OK) == 0;
}

static void plain_host(const char *self)
{
    for (size_t v = 0; v < NUM_VARIABLES; v++) {
        unsigned long secure;
        int status;
        bool path = strcmp(variables[v], "PATH") == 0;
        bool ran = planted_took_effect(self, v, false, &secure, &status);
        CHECK(ran == path, "a plain host %s the compiler %s", path ? "did not give" : "gave",
              variables[v]);
        if (!path)
            CHECK(status == JB_OK, "a plain host with %s=%s could not compile", variables[v],
                  values[v]);
        /* Named in JITBRIDGE_COMPILER_ENV it reaches the compiler: the plant works. */
        ran = planted_took_effect(self, v, true, &secure, &status);
        CHECK(ran, "%s listed in JITBRIDGE_COMPILER_ENV: the plant did not take effect (%s)",
              variables[v], report);
        if (!runs_fake_tools(v)) /* a fake tool fails the compile; the other plants do not */
            CHECK(status == JB_OK, "%s listed in JITBRIDGE_COMPILER_ENV: %s", variables[v],
                  report);
    }
    unsigned long secure;
    int status;
    CHECK(!cwd_plant_took_effect(self, &secure, &status),
          "a plain host's compiler linked the libgcc_s.so.1 of the folder the host ran in");
    CHECK(status == JB_OK, "a plain host in %s could not compile", cwd_dir);
    /* A relative $CC still means the host's folder, as it does for execvp. */
    char relative_cc[600];
    snprintf(relative_cc, sizeof relative_cc, "%s/relative-cc", cwd_dir);
    write_file(relative_cc, "#!/bin/sh\nexec cc \"$@\"\n", 0755);
    setenv("CC", "./relative-cc", 1);
    run_host(self, cwd_dir, &secure, &status);
    unsetenv("CC");
    CHECK(status == JB_OK, "CC=./relative-cc, run in %s, did not compile", cwd_dir);
}

static void setuid_host(const char *self)
{
    if (geteuid() != 0) {
        printf("test_compiler_env: the setuid cases need root to make; not tried\n");
        return;
    }
    /* Next to the test, not in /tmp, which may be mounted nosuid. */
    char copy[4200], command[4 * sizeof copy + 64];
    snprintf(copy, sizeof copy, "%s-setuid", self);
    snprintf(command, sizeof command, "cp '%s' '%s' && chown 65534 '%s' && chmod 4755 '%s'",
             self, copy, copy, copy);
    CHECK(system(command) == 0, "cannot make a setuid copy: %s", command);
    for (size_t v = 0; v < NUM_VARIABLES; v++) {
        unsigned long secure;
        int status;
        bool ran = planted_took_effect(copy, v, true, &secure, &status);
        if (secure == 0) {
            printf("test_compiler_env: setuid has no effect here (nosuid mount?); not tried\n");
            break;
        }
        CHECK(!ran, "a setuid host gave the compiler its caller's %s=%s", variables[v],
              values[v]);
        CHECK(status == JB_OK, "a setuid host with its caller's %s could not compile",
              variables[v]);
    }
    unsigned long secure;
    int status;
    CHECK(!cwd_plant_took_effect(copy, &secure, &status),
          "a setuid host's compiler linked the libgcc_s.so.1 of its caller's folder");
    CHECK(status == JB_OK, "a setuid host in %s could not compile", cwd_dir);
    unlink(copy);
}

/* Names in the file `path` ("NAME=value" lines) that are not allowed; "" if none. */
static void unexpected_names(const char *path, char *out, size_t len, bool *saw_extra,
                             char *tmpdir, size_t tmpdir_len)
{
    out[0] = '\0';
    *saw_extra = false;
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "the compiler did not write %s", path);
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        size_t name_len = strcspn(line, "=");
        static const char *const allowed[] = {"PATH", "HOME", "LANG", "LANGUAGE", "TMPDIR",
                                              "JB_TEST_PASSED"};
        bool ok = strncmp(line, "LC_", 3) == 0;
        for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++)
            ok = ok || (strlen(allowed[i]) == name_len && strncmp(line, allowed[i], name_len) == 0);
        *saw_extra = *saw_extra || strncmp(line, "JB_TEST_PASSED=", 15) == 0;
        if (strncmp(line, "TMPDIR=", 7) == 0)
            snprintf(tmpdir, tmpdir_len, "%.1000s", line + 7);
        if (!ok) {
            size_t used = strlen(out);
            snprintf(out + used, len - used, " %.*s", (int)name_len, line);
        }
    }
    if (f)
        fclose(f);
}

static void what_the_compiler_sees(const char *self)
{
    char cc[512], script[2048], tmp[512], cache[512], env_compile[512], env_version[512];
    snprintf(cc, sizeof cc, "%s/dumping-cc", root);
    snprintf(tmp, sizeof tmp, "%s/tmp", root);
    snprintf(cache, sizeof cache, "%s/cache", root);
    snprintf(env_compile, sizeof env_compile, "%s/env-compile", root);
    snprintf(env_version, sizeof env_version, "%s/env-version", root);
    make_folder(tmp, 0700);
    /* /proc/$$/environ: exactly what execve gave the compiler, nothing the shell added */
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "if [ \"$1\" = --version ]; then out=%s; else out=%s; fi\n"
             "tr '\\0' '\\n' < /proc/$$/environ > \"$out\"\n"
             "exec cc \"$@\"\n",
             env_version, env_compile);
    write_file(cc, script, 0755);
    setenv("CC", cc, 1);
    setenv("TMPDIR", tmp, 1);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    unsetenv("JITBRIDGE_DISK_CACHE"); /* the disk cache key is what asks for the version */
    setenv("JB_TEST_PASSED", "1", 1);
    setenv("JB_TEST_HIDDEN", "1", 1);
    setenv("COMPILER_PATH", "/nonexistent", 1);
    setenv("LD_LIBRARY_PATH", "/nonexistent", 1);
    setenv("LC_CTYPE", "C", 1);
    setenv("JITBRIDGE_COMPILER_ENV", " JB_TEST_PASSED,TMPDIR", 1);
    char *argv[] = {(char *)self, "--compile", NULL};
    pid_t pid;
    int ws = -1;
    posix_spawn_file_actions_t quiet;
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, self, &quiet, NULL, argv, environ) == 0)
        ws = wait_child_with_deadline(pid, 65, "the host whose compiler dumps its environment");
    posix_spawn_file_actions_destroy(&quiet);
    CHECK(WIFEXITED(ws), "the host did not run");
    for (const char *const *name = (const char *const[]){"CC", "JITBRIDGE_CACHE_DIR",
                                                         "JB_TEST_PASSED", "JB_TEST_HIDDEN",
                                                         "COMPILER_PATH", "LD_LIBRARY_PATH",
                                                         "LC_CTYPE", "JITBRIDGE_COMPILER_ENV",
                                                         NULL};
         *name; name++)
        unsetenv(*name);
    setenv("JITBRIDGE_DISK_CACHE", "0", 1);
    const char *files[] = {env_compile, env_version};
    for (size_t i = 0; i < 2; i++) {
        char extra[1024], child_tmpdir[1024] = "";
        bool saw_passed;
        unexpected_names(files[i], extra, sizeof extra, &saw_passed, child_tmpdir,
                         sizeof child_tmpdir);
        CHECK(!extra[0], "%s: the compiler saw%s", files[i], extra);
        CHECK(saw_passed, "%s: JITBRIDGE_COMPILER_ENV's JB_TEST_PASSED did not pass", files[i]);
        char prefix[600];
        snprintf(prefix, sizeof prefix, "%s/jitbridge-", tmp);
        CHECK(strncmp(child_tmpdir, prefix, strlen(prefix)) == 0,
              "%s: TMPDIR is '%s', not the private folder", files[i], child_tmpdir);
    }
    unsetenv("TMPDIR");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--compile") == 0) {
        alarm(60); /* a hung compile ends, and so does its parent's read of the report */
        int status = compile_once();
        printf("secure=%lu status=%d %s\n", getauxval(AT_SECURE), status,
               status ? jb_last_error_message() : "");
        fflush(stdout);
        _exit(0); /* a sanitizer's exit-time checks cannot run as another user */
    }
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    chmod(root, 0755);
    snprintf(open_dir, sizeof open_dir, "%s/open", root);
    make_folder(open_dir, 0777);
    setenv("JITBRIDGE_DISK_CACHE", "0", 1);
    unsetenv("JITBRIDGE_COMPILER_ENV");
    /* The plants go where `cc` says, so the hosts must run that cc: a $CC of the machine's (the
     * H200 host sets CC=/opt/gcc/bin/gcc) searches other folders, and a control fails. */
    unsetenv("CC");
    for (size_t v = 0; v < NUM_VARIABLES; v++)
        if (strcmp(variables[v], "PATH") != 0)
            unsetenv(variables[v]); /* this machine's own (LIBRARY_PATH, CPATH) stay out */
    for (size_t v = 0; v < NUM_VARIABLES; v++)
        plant(v);
    plant_in_cwd();
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    plain_host(self);
    setuid_host(self);
    what_the_compiler_sees(self);
    char command[300];
    snprintf(command, sizeof command, "rm -rf %s", root);
    CHECK(system(command) == 0, "cleaning %s", root);
    return check_summary("test_compiler_env");
}
