/*
 * The cpu backend's compiler: kernels are C, compiled by the system compiler ($CC, else cc)
 * into a shared object in the private directory and loaded with dlopen. The compiler runs from
 * an argument vector, never through a shell, under the compile timeout (process.c), and so
 * does its version query, which names it in the disk cache key. Both get an environment chosen
 * here, never the host's whole one, and run in the private directory, never the host's current
 * one: ld opens a linker script's relative names there first (libgcc_s.so.1 in libgcc_s.so).
 */
#include "cpu.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The version query is quick; a compile timeout of minutes need not apply to it under the lock. */
#define VERSION_TIMEOUT_CAP_MS 30000

static const char *compiler_line = "cc";
static char **compiler_argv; /* the words of $CC, as many as it has */
static size_t compiler_argc;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void compiler_setup(void)
{
    const char *cc = secure_getenv("CC"); /* a setuid host must not run its caller's compiler */
    char *line = jb__strdup(cc && *cc ? cc : "cc");
    char *words = jb__strdup(cc && *cc ? cc : "cc");
    char **argv = words ? calloc(strlen(words) / 2 + 2, sizeof *argv) : NULL;
    if (!line || !argv) {
        free(line), free(words), free(argv);
        return; /* no words: every compile says so */
    }
    compiler_line = line;
    /* $CC may carry words ("ccache gcc", "gcc -m64"); split on blanks, no shell involved. */
    for (char *save = NULL, *w = strtok_r(words, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        argv[compiler_argc++] = w;
    compiler_argv = argv;
}

const char *jb_cpu_compiler(void)
{
    pthread_once(&setup_once, compiler_setup);
    return compiler_line;
}

/* The compiler's words, then `extra` (NULL-terminated); free() the result. */
static int compiler_command(char *const *extra, char ***out)
{
    pthread_once(&setup_once, compiler_setup);
    JB_RETURN_IF(compiler_argc == 0, JB_ERR_COMPILE,
                 "the compiler command ($CC) is empty or could not be stored: '%s'", compiler_line);
    size_t more = 0;
    while (extra[more])
        more++;
    char **argv = calloc(compiler_argc + more + 1, sizeof *argv);
    JB_RETURN_IF(!argv, JB_ERR_OUT_OF_MEMORY, "no memory for the compiler's arguments");
    memcpy(argv, compiler_argv, compiler_argc * sizeof *argv);
    memcpy(argv + compiler_argc, extra, more * sizeof *argv);
    *out = argv;
    return JB_OK;
}

/* ---- the compiler's environment ---- */

/* What gcc, clang and a ccache in $CC need from a normal host's environment, with LC_*. The rest
 * stays out: GCC_EXEC_PREFIX, COMPILER_PATH, CPATH, LIBRARY_PATH, LD_*, DEPENDENCIES_OUTPUT and
 * their like choose the programs the compiler runs, what it includes and links and where it
 * writes, and the disk cache key sees none of them. */
static const char *const passed_names[] = {"PATH", "HOME", "LANG", "LANGUAGE"};

static bool same_name(const char *a, size_t a_len, const char *b, size_t b_len)
{
    return a_len == b_len && strncmp(a, b, a_len) == 0;
}

/* Whether "NAME=value" goes to the compiler: a name above, LC_*, or one that `extra` lists
 * (JITBRIDGE_COMPILER_ENV: names separated by commas or blanks). TMPDIR is always ours. */
static bool passed_through(const char *entry, const char *extra)
{
    size_t len = strcspn(entry, "=");
    if (entry[len] != '=' || same_name(entry, len, "TMPDIR", 6))
        return false;
    if (len > 3 && strncmp(entry, "LC_", 3) == 0)
        return true;
    for (size_t i = 0; i < sizeof passed_names / sizeof *passed_names; i++)
        if (same_name(entry, len, passed_names[i], strlen(passed_names[i])))
            return true;
    for (const char *p = extra ? extra : ""; *p;) {
        p += strspn(p, ", \t");
        size_t word = strcspn(p, ", \t");
        if (word && same_name(entry, len, p, word))
            return true;
        p += word;
    }
    return false;
}

static void free_environment(char **envp)
{
    for (size_t i = 0; envp && envp[i]; i++)
        free(envp[i]);
    free(envp);
}

/* The compiler's whole environment, TMPDIR=`tmpdir` included when not NULL. A setuid (AT_SECURE)
 * host passes nothing of its caller's: PATH is JB_TRUSTED_PATH and that is all. NULL: no memory. */
static char **compiler_environment(const char *tmpdir)
{
    bool secure = getauxval(AT_SECURE) != 0;
    const char *extra = secure_getenv("JITBRIDGE_COMPILER_ENV");
    size_t n = 0;
    while (!secure && environ && environ[n])
        n++;
    char **envp = calloc(n + 3, sizeof *envp);
    if (!envp)
        return NULL;
    size_t used = 0;
    bool has_path = false, ok = true;
    /* At most n: another thread's setenv meanwhile is the host's race, not an overflow here. */
    for (size_t i = 0; ok && i < n && environ[i]; i++) {
        if (!passed_through(environ[i], extra))
            continue;
        has_path = has_path || strncmp(environ[i], "PATH=", 5) == 0;
        ok = (envp[used++] = jb__strdup(environ[i])) != NULL;
    }
    if (ok && !has_path)
        ok = (envp[used++] = jb__strdup("PATH=" JB_TRUSTED_PATH)) != NULL;
    if (ok && tmpdir) {
        jb_strbuf sb = {0};
        jb__strbuf_appendf(&sb, "TMPDIR=%s", tmpdir);
        ok = !sb.failed;
        envp[used++] = sb.data;
    }
    if (!ok) {
        free_environment(envp);
        return NULL;
    }
    return envp;
}

/* Reads a whole file; the result is NUL-terminated for convenience. */
static int read_file(const char *path, jb_blob *out)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        close(fd);
        return jb__fail(JB_ERR_SYSTEM, "%s is not a regular file%s%s", path, err ? ": " : "",
                        err ? strerror(err) : "");
    }
    size_t size = (size_t)st.st_size;
    char *data = malloc(size + 1);
    if (!data) {
        close(fd);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to read %zu bytes", size);
    }
    size_t got = jb__read_up_to(fd, data, size);
    close(fd);
    data[got] = '\0';
    out->data = data;
    out->size = got;
    return JB_OK;
}

/* The options of every compile; also part of the disk cache key. -pipe: the compiler's stages
 * pass their output through pipes, not temporary files; the same .so, 3-4% less time per
 * compile (bench section 11, 2026-12-01). */
static char *const compile_flags[] = {"-O2", "-fPIC", "-shared", "-pipe",
                                      /* A misspelt or GPU-only function (expff, atomicAdd) is an
                                       * error at the body's line, not a symbol missing at load. */
                                      "-Werror=implicit-function-declaration", "-Wl,-z,defs"};
#define NUM_FLAGS (sizeof compile_flags / sizeof *compile_flags)

static int compile_failed(const jb_child *c, const char *module_name)
{
    int ws = c->wait_status;
    const char *log = c->output ? c->output : "(the compiler's output was lost: no memory)";
    if (WIFSIGNALED(ws))
        return jb__fail_with_log(JB_ERR_COMPILE, log,
                                 "compiling '%s' with '%s': the compiler was killed by signal %d",
                                 module_name, compiler_line, WTERMSIG(ws));
    jb__compile_rejected(); /* it ran to its end and said no: the same source fails again */
    return jb__fail_with_log(JB_ERR_COMPILE, log, "compiling '%s' with '%s': exit status %d",
                             module_name, compiler_line, WEXITSTATUS(ws));
}

/* The compiler's arguments after its own words: the fixed `flags`, the kernel's options, then
 * its files. The option strings made here (-I..., -march=...) are in `made`, freed by the
 * caller with `tail`; NULL on no memory. */
static char **compile_tail(char *const *flags, size_t num_flags, const jb_compile_options *o,
                           char *obj, char *src, char ***made)
{
    size_t most = num_flags + 2 + o->num_extra + o->num_include_dirs + 1 + 4 + 1;
    char **tail = calloc(most, sizeof *tail);
    *made = calloc(o->num_include_dirs + 2, sizeof **made);
    if (!tail || !*made) {
        free(tail);
        free(*made);
        *made = NULL;
        return NULL;
    }
    memcpy(tail, flags, num_flags * sizeof *flags);
    size_t used = num_flags, n = 0;
    if (o->flags & JB_COMPILE_FAST_MATH)
        tail[used++] = "-ffast-math";
    if (o->flags & JB_COMPILE_LINE_INFO)
        tail[used++] = "-g";
    for (size_t i = 0; i < o->num_extra; i++)
        tail[used++] = (char *)o->extra[i]; /* each one argument: no shell splits it */
    bool ok = true;
    for (size_t i = 0; ok && i < o->num_include_dirs; i++) {
        size_t len = strlen(o->include_dirs[i]) + 3;
        ok = ((*made)[n] = malloc(len)) != NULL;
        if (ok)
            snprintf((*made)[n], len, "-I%s", o->include_dirs[i]), tail[used++] = (*made)[n++];
    }
    if (ok && o->target_arch) {
        size_t len = strlen(o->target_arch) + 8;
        ok = ((*made)[n] = malloc(len)) != NULL;
        if (ok)
            snprintf((*made)[n], len, "-march=%s", o->target_arch), tail[used++] = (*made)[n++];
    }
    char *files[] = {"-o", obj, src, "-lm"};
    memcpy(tail + used, files, sizeof files);
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            free((*made)[i]);
        free(*made), *made = NULL;
        free(tail);
        return NULL;
    }
    return tail;
}

int jb__cpu_compile(jb_device *dev, const char *module_name, const char *source,
                    const jb_compile_options *options, jb_blob *out)
{
    (void)dev;
    return jb__cpu_compile_flags(compile_flags, NUM_FLAGS, module_name, source, options, out);
}

int jb__cpu_compile_flags(char *const *flags, size_t num_flags, const char *module_name,
                          const char *source, const jb_compile_options *options, jb_blob *out)
{
    char src[4200], obj[4200];
    JB_FORWARD_IF_ERROR(jb__cpu_private_write(src, sizeof src, "kernel", ".c", source,
                                              strlen(source)));
    int status = jb__cpu_private_path(obj, sizeof obj, "kernel", ".so");
    char **made = NULL, **tail = compile_tail(flags, num_flags, options, obj, src, &made);
    if (status == JB_OK && !tail)
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the compiler's arguments");
    char **argv = NULL, **envp = NULL;
    char folder[4200];
    if (status == JB_OK)
        status = compiler_command(tail, &argv);
    if (status == JB_OK)
        status = jb__cpu_private_dir(folder, sizeof folder);
    if (status == JB_OK && !(envp = compiler_environment(folder)))
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the compiler's environment");
    if (status == JB_OK) {
        jb_child c = {.argv = argv,
                      .envp = envp,
                      .cwd = folder,
                      .what = "the compiler",
                      .hint = " (set CC)",
                      .timeout_ms = jb__child_timeout_ms(),
                      .fail_status = JB_ERR_COMPILE};
        status = jb__child_run(&c);
        if (status == JB_OK && WIFEXITED(c.wait_status) && WEXITSTATUS(c.wait_status) == 0) {
            jb__build_log_set(c.output); /* its warnings, if it gave any */
            status = read_file(obj, out);
        }
        else if (status == JB_OK)
            status = compile_failed(&c, module_name);
        free(c.output);
    }
    free(argv);
    free_environment(envp);
    for (size_t i = 0; made && made[i]; i++)
        free(made[i]);
    free(made);
    free(tail);
    unlink(src);
    unlink(obj);
    return status;
}

/* The version query's outcome is kept once it is known: the identity, or a lasting failure (no
 * compiler, no version in its answer). A failure that may pass (no descriptor, memory or process
 * to start it, its timeout) is asked again after a backoff. Under version_mutex, which a query
 * holds (fork.c takes it before the private folder's). */
static pthread_mutex_t version_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool version_known;
static jb_backoff version_backoff;
static char compiler_version[256];
static char compiler_identity[1024];
static char compiler_files[1024]; /* the identity past its version: what a record is filed by */
static atomic_bool version_recorded, record_missing_warned;

static void cpu_compiler_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE)
        pthread_mutex_lock(&version_mutex);
    else if (phase == JB_FORK_PARENT)
        pthread_mutex_unlock(&version_mutex);
    else
        pthread_mutex_init(&version_mutex, NULL);
}
JB_FORK_HANDLER(JB_FORK_CPU_COMPILER, cpu_compiler_fork)

/* SHA-256 of the file a child with environment `envp` would run for `name` (execvp's search: the
 * first candidate that is an executable regular file); false when none can be read, with
 * *passing set when that may pass (a candidate not opened or read for want of descriptors). */
static bool hash_program(const char *name, char *const *envp,
                         unsigned char digest[JB_SHA256_BYTES], bool *passing)
{
    char **paths = jb__exec_candidates(name, envp);
    bool hashed = false;
    if (!paths)
        *passing = true;
    for (size_t i = 0; paths && paths[i] && !hashed; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        struct stat st;
        if (fd < 0 && jb__errno_is_transient(errno))
            *passing = true;
        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) {
            jb_sha256 h;
            jb__sha256_init(&h);
            unsigned char buf[65536];
            ssize_t n;
            while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
                if (n > 0)
                    jb__sha256_update(&h, buf, (size_t)n);
            jb__sha256_final(&h, digest);
            hashed = n == 0;
            if (n < 0 && jb__errno_is_transient(errno))
                *passing = true;
        }
        close(fd);
    }
    jb__exec_candidates_free(paths);
    return hashed;
}

/* Whether `word` is the last part of one of $CC's words: how the compiler named itself. */
static bool is_compiler_name(const char *word, size_t len)
{
    for (size_t i = 0; i < compiler_argc; i++) {
        const char *slash = strrchr(compiler_argv[i], '/');
        const char *base = slash ? slash + 1 : compiler_argv[i];
        if (strlen(base) == len && memcmp(base, word, len) == 0)
            return true;
    }
    return false;
}

/* The compiler as content, never as a path, its version aside: each program word of $CC
 * ("ccache gcc": both) as a hash of its file, each option word as it is, then the flags. False
 * when that does not fit in `len` (it could name two compilers alike) or a file could not be
 * read for now (*passing). Starts no program. */
static bool find_compiler_files(char *const *envp, char *out, size_t len, bool *passing)
{
    size_t used = (size_t)snprintf(out, len, "run as");
    for (size_t i = 0; i < compiler_argc && used < len; i++) {
        unsigned char digest[JB_SHA256_BYTES];
        char hex[2 * JB_SHA256_BYTES + 1];
        const char *word = compiler_argv[i];
        if (word[0] != '-' && hash_program(word, envp, digest, passing)) {
            jb__hex(digest, sizeof digest, hex);
            word = hex;
        }
        used += (size_t)snprintf(out + used, len - used, " %s%s", word == hex ? "sha256:" : "",
                                 word);
    }
    for (size_t i = 0; i < NUM_FLAGS && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s %s", i ? "" : "; flags",
                                 compile_flags[i]);
    return used < len && !*passing;
}

/* The version line without the name the compiler was called by (gcc prints "cc (Debian
 * 12.2.0) 12.2.0" when run as cc): what identities and the folder's record hold. */
static const char *version_without_name(const char *version)
{
    size_t first = strcspn(version, " ");
    return version[first] == ' ' && is_compiler_name(version, first) ? version + first + 1
                                                                      : version;
}

/* The identity: the version line without the name it was called by, then the files. So CC=gcc,
 * CC=/usr/bin/gcc and a link to it are one compiler; a cross compiler of the same version is
 * another. Empty when cut short. */
static void find_compiler_identity(const char *files)
{
    const char *version = version_without_name(compiler_version);
    if ((size_t)snprintf(compiler_identity, sizeof compiler_identity, "%s; %s", version, files) >=
        sizeof compiler_identity)
        compiler_identity[0] = '\0';
    else
        snprintf(compiler_files, sizeof compiler_files, "%s", files);
}

/* The first line of `$CC --version`, under the timeout; stays empty when the answer is not a
 * clean one. Then the identity made of it. Under version_mutex; true once the outcome is known
 * for good, false after a failure that may pass (no descriptors, memory or process, a timeout,
 * the compiler killed by a signal). */
static bool find_compiler_version(void)
{
    compiler_version[0] = compiler_identity[0] = '\0';
    char *extra[] = {"--version", NULL}, **argv;
    int status = compiler_command(extra, &argv);
    if (status != JB_OK)
        return status != JB_ERR_OUT_OF_MEMORY;
    char folder[4200]; /* the query writes nothing: without a private folder, no TMPDIR */
    bool have_folder = jb__cpu_private_dir(folder, sizeof folder) == JB_OK;
    char **envp = compiler_environment(have_folder ? folder : NULL);
    if (!envp) {
        free(argv);
        jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the compiler's environment");
        return false;
    }
    uint64_t timeout_ms = jb__child_timeout_ms();
    jb_child c = {.argv = argv,
                  .envp = envp,
                  .cwd = have_folder ? folder : "/",
                  .what = "the compiler's version query",
                  .hint = " (set CC)",
                  .timeout_ms = timeout_ms < VERSION_TIMEOUT_CAP_MS ? timeout_ms
                                                                    : VERSION_TIMEOUT_CAP_MS,
                  .fail_status = JB_ERR_COMPILE};
    status = jb__child_run(&c);
    bool passing = status != JB_OK ? c.passing : WIFSIGNALED(c.wait_status); /* the OOM killer */
    if (status == JB_OK && WIFEXITED(c.wait_status) && WEXITSTATUS(c.wait_status) == 0 &&
        c.output && c.output[0] != '\n' && c.output[0])
        snprintf(compiler_version, sizeof compiler_version, "%.*s",
                 (int)strcspn(c.output, "\n"), c.output);
    else if (status == JB_OK)
        jb__fail(JB_ERR_COMPILE, "'%s --version' gave no version (%s %d)", compiler_line,
                 WIFEXITED(c.wait_status) ? "exit status" : "signal",
                 WIFEXITED(c.wait_status) ? WEXITSTATUS(c.wait_status) : WTERMSIG(c.wait_status));
    char files[sizeof compiler_files];
    if (compiler_version[0] && find_compiler_files(envp, files, sizeof files, &passing))
        find_compiler_identity(files);
    if (compiler_version[0] && !compiler_identity[0] && passing)
        jb__fail(JB_ERR_SYSTEM, "the compiler's files could not be read for now");
    free(c.output);
    free(argv);
    free_environment(envp);
    return !passing;
}

/* The record of the compiler's version in the cache folder, filed by its files (the identity
 * past the version), so that a sealed process, which starts no program, learns the identity
 * without the version query. It holds the version as the identity does, without the name the
 * compiler was called by: a process sealed with CC naming the same files otherwise (a link
 * of another name) finds the identity its unsealed neighbours use. Written once per process,
 * after the query and outside its lock, unless the folder already holds the same. */
static void record_version(void)
{
    if (atomic_load(&version_recorded) || atomic_exchange(&version_recorded, true))
        return;
    jb_disk_key key;
    jb_blob stored = {0};
    if (jb__disk_record_key(compiler_files, &key) != JB_OK)
        return;
    const char *version = version_without_name(compiler_version);
    size_t len = strlen(version);
    if (!jb__disk_record_load(&key, &stored) || stored.size != len ||
        memcmp(stored.data, version, len) != 0)
        jb__disk_store(&key, &(jb_blob){(void *)version, len});
    free(stored.data);
    jb__disk_key_free(&key);
}

/* A sealed process's identity, with no program started: the compiler's files hashed, and the
 * version line an unsealed process recorded for those files in the cache folder, else the one
 * a bundle's entries name for them (a new replica starting sealed from a bundle). Without
 * either, the identity is unknown (a lookup then misses and the sealed miss is refused), and it
 * is looked for again on the next lookup: an unsealed process may record it meanwhile. */
static int identity_without_running(jb_device *dev)
{
    pthread_once(&setup_once, compiler_setup);
    char **envp = compiler_environment(NULL); /* for the search along PATH only */
    JB_RETURN_IF(!envp, JB_ERR_OUT_OF_MEMORY, "no memory for the compiler's environment");
    char files[sizeof compiler_files];
    bool passing = false;
    bool have_files = compiler_argc && find_compiler_files(envp, files, sizeof files, &passing);
    free_environment(envp);
    jb_disk_key key = {0};
    jb_blob version = {0};
    bool found = have_files && jb__disk_record_key(files, &key) == JB_OK &&
                 jb__disk_record_load(&key, &version);
    jb__disk_key_free(&key);
    /* One line, as the query keeps it: anything else is not a record this library wrote. */
    bool recorded = found && version.size > 0 && version.size < sizeof compiler_version &&
                    !memchr(version.data, '\n', version.size) &&
                    !memchr(version.data, '\0', version.size);
    char bundled[sizeof compiler_version]; /* as an identity holds it: without the name */
    bool in_bundle = !recorded && have_files &&
                     jb__bundle_compiler(dev->backend->name, dev->arch, files, bundled,
                                         sizeof bundled);
    if (recorded || in_bundle) {
        pthread_mutex_lock(&version_mutex);
        if (!atomic_load(&version_known)) {
            if (recorded)
                snprintf(compiler_version, sizeof compiler_version, "%.*s", (int)version.size,
                         (const char *)version.data);
            else
                snprintf(compiler_version, sizeof compiler_version, "%s", bundled);
            find_compiler_identity(files);
            atomic_store(&version_recorded, true); /* nothing to record: it came from there */
            atomic_store(&version_known, compiler_identity[0] != '\0');
        }
        pthread_mutex_unlock(&version_mutex);
    }
    free(version.data);
    if ((recorded || in_bundle) && atomic_load(&version_known))
        return JB_OK;
    jb__fail(JB_ERR_COMPILE,
             "the process is sealed (JB_SEAL_ERROR) and starts no program, and neither the cache "
             "folder nor a bundle holds a record of the version of '%s' (an unsealed process "
             "writes it when it first asks), so nothing stored under its keys can be found",
             compiler_line);
    if (!atomic_exchange(&record_missing_warned, true))
        jb__warn("%s", jb_last_error_message());
    return JB_ERR_COMPILE;
}

int jb__cpu_compiler_identity(jb_device *dev, bool may_run, char *out, size_t len)
{
    if (!atomic_load(&version_known) && !may_run)
        JB_FORWARD_IF_ERROR(identity_without_running(dev));
    if (!atomic_load(&version_known) && jb__backoff_due(&version_backoff)) {
        jb__warn_hold(); /* its warning reaches the callback after the lock */
        pthread_mutex_lock(&version_mutex);
        if (!atomic_load(&version_known) && jb__backoff_due(&version_backoff)) {
            if (find_compiler_version())
                atomic_store(&version_known, true);
            else
                jb__warn("the compiler's version is unknown for now, so compiled code is not kept "
                         "on disk until it is asked again, after %llu ms: %s",
                         (unsigned long long)jb__backoff_failed(&version_backoff),
                         jb_last_error_message());
            if (atomic_load(&version_known) && !compiler_identity[0])
                jb__warn("the compiler's version is unknown, so compiled code is not kept on "
                         "disk: %s",
                         jb_last_error_message());
        }
        pthread_mutex_unlock(&version_mutex);
        jb__warn_release();
    }
    /* Without a version two compilers could share a key: no disk cache rather than a wrong hit. */
    JB_RETURN_IF(!atomic_load(&version_known), JB_ERR_COMPILE,
                 "the version of '%s' is unknown for now", compiler_line);
    JB_RETURN_IF(!compiler_identity[0], JB_ERR_COMPILE, "the version of '%s' is unknown",
                 compiler_line);
    record_version();
    snprintf(out, len, "%s", compiler_identity);
    return JB_OK;
}

/* Whether dlopen's refusal `why` is one for now: dlerror ends with the failed call's strerror
 * (": Too many open files"), and dlopen leaves errno alone. */
static bool dlopen_refused_for_now(const char *why)
{
    static const int passing[] = {EMFILE, ENFILE, ENOMEM, EAGAIN, EINTR, EIO};
    size_t len = why ? strlen(why) : 0;
    for (size_t i = 0; i < sizeof passing / sizeof *passing; i++) {
        const char *text = strerror(passing[i]);
        size_t n = strlen(text);
        if (len > n + 2 && memcmp(why + len - n - 2, ": ", 2) == 0 &&
            strcmp(why + len - n, text) == 0)
            return true;
    }
    return false;
}

int jb__cpu_module_load(jb_device *dev, const jb_blob *code, void **out_module)
{
    (void)dev;
    char path[4200];
    JB_FORWARD_IF_ERROR(jb__cpu_private_write(path, sizeof path, "module", ".so", code->data,
                                              code->size));
    JB_TEST_POINT(JB_TEST_MODULE_WRITTEN, path);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *why = handle ? NULL : dlerror();
    unlink(path); /* the mapping stays; the name is never reused */
    /* A refusal for now (out of descriptors or memory) is no verdict on the code. */
    JB_RETURN_IF(!handle, dlopen_refused_for_now(why) ? JB_ERR_SYSTEM : JB_ERR_LOAD,
                 "dlopen rejected the compiled module: %s", why ? why : "unknown reason");
    *out_module = handle;
    return JB_OK;
}

/* dlsym on a module's handle also searches the objects it depends on (libc, libm): an entry the
 * source lacks would bind to libc's abort. Only a symbol the module itself defines counts; a
 * missing one is `missing` (the status), named a `what`; its ELF entry goes to *out_symbol. */
static int own_symbol(void *module, const char *name, const char *what, int missing,
                      void **out_addr,
                      const ElfW(Sym) **out_symbol, struct link_map **out_own)
{
    dlerror();
    void *addr = dlsym(module, name);
    JB_RETURN_IF(!addr, missing, "the module has no %s '%s'", what, name);
    struct link_map *own = NULL, *found = NULL;
    const ElfW(Sym) *symbol = NULL;
    Dl_info in_object, at_symbol;
    bool located = dlinfo(module, RTLD_DI_LINKMAP, &own) == 0 &&
                   dladdr1(addr, &in_object, (void **)&found, RTLD_DL_LINKMAP) != 0 &&
                   dladdr1(addr, &at_symbol, (void **)&symbol, RTLD_DL_SYMENT) != 0;
    JB_RETURN_IF(!located || !own || found != own, missing,
                 "the module's source does not define '%s' (the name is %s's)", name,
                 located && in_object.dli_fname ? in_object.dli_fname : "another object");
    JB_RETURN_IF(at_symbol.dli_saddr != addr || !symbol, missing,
                 "the module's '%s' is not the start of a symbol", name);
    *out_addr = addr;
    *out_symbol = symbol;
    *out_own = own;
    return JB_OK;
}

int jb__cpu_module_function(jb_device *dev, void *module, const char *name, void **out_fn)
{
    (void)dev;
    void *fn;
    const ElfW(Sym) *symbol;
    struct link_map *own;
    JB_FORWARD_IF_ERROR(own_symbol(module, name, "function", JB_ERR_LOAD, &fn, &symbol, &own));
    int type = ELF64_ST_TYPE(symbol->st_info); /* ELF32_ST_TYPE is the same */
    JB_RETURN_IF(type != STT_FUNC && type != STT_GNU_IFUNC, JB_ERR_LOAD,
                 "the module's '%s' is not a function", name);
    *out_fn = fn;
    return JB_OK;
}

/* Where in a loaded object [start, end) lies, and whether its pages stay writable. */
typedef struct object_range {
    const struct link_map *object;
    uintptr_t start, end;
    bool found, writable;
} object_range;

static int find_range(struct dl_phdr_info *info, size_t size, void *ctx)
{
    (void)size;
    object_range *range = ctx;
    if (info->dlpi_addr != range->object->l_addr ||
        strcmp(info->dlpi_name ? info->dlpi_name : "", range->object->l_name) != 0)
        return 0;
    bool in_relro = false;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD && range->start >= lo && range->end <= hi) {
            range->found = true;
            range->writable = (ph->p_flags & PF_W) != 0;
        }
        /* The loader makes these pages read-only once it has relocated them. */
        if (ph->p_type == PT_GNU_RELRO && range->start < hi && range->end > lo)
            in_relro = true;
    }
    range->writable = range->writable && !in_relro;
    return 1;
}

/* A data object the module defines (a thread-local one has no one address: refused). */
int jb__cpu_module_global(jb_device *dev, void *module, const char *name, void **out_ptr,
                          size_t *out_size, bool *out_writable)
{
    (void)dev;
    void *addr;
    const ElfW(Sym) *symbol;
    struct link_map *own;
    JB_FORWARD_IF_ERROR(own_symbol(module, name, "global variable", JB_ERR_INVALID_ARGUMENT,
                                      &addr, &symbol, &own));
    JB_RETURN_IF(ELF64_ST_TYPE(symbol->st_info) != STT_OBJECT, JB_ERR_INVALID_ARGUMENT,
                 "the module's '%s' is not a global variable", name);
    object_range range = {own, (uintptr_t)addr, (uintptr_t)addr + symbol->st_size, false, false};
    dl_iterate_phdr(find_range, &range);
    JB_RETURN_IF(!range.found, JB_ERR_LOAD,
                 "the module's global '%s' lies outside its loaded segments", name);
    *out_ptr = addr;
    *out_size = symbol->st_size;
    *out_writable = range.writable;
    return JB_OK;
}

void jb__cpu_module_unload(jb_device *dev, void *module)
{
    (void)dev;
    dlclose(module);
}
