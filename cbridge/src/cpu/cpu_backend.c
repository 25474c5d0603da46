/*
 * The cpu backend. Kernels are C, compiled by the system compiler ($CC, else cc) into a shared
 * object inside a private temporary directory and loaded with dlopen. The compiler is started
 * from an argument vector, never through a shell. Each stream is a worker thread that runs its
 * queue in order, so launches are asynchronous and events mean what they mean on a GPU.
 */
#include "../internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- the compiler and the private directory ---- */

#define MAX_COMPILER_WORDS 32

static char compiler_line[1024] = "cc";
static char *compiler_argv[MAX_COMPILER_WORDS];
static int compiler_argc;
static char private_dir[4096];
static char private_dir_error[512];
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t file_serial;

static void remove_private_dir(void)
{
    rmdir(private_dir); /* best effort: only empty once every compile has finished */
}

static void cpu_setup(void)
{
    const char *cc = secure_getenv("CC"); /* a setuid host must not run its caller's compiler */
    if (cc && *cc)
        snprintf(compiler_line, sizeof compiler_line, "%s", cc);
    /* $CC may carry words ("ccache gcc", "gcc -m64"); split on blanks, no shell involved. */
    static char words[sizeof compiler_line];
    memcpy(words, compiler_line, sizeof words);
    for (char *save = NULL, *w = strtok_r(words, " \t", &save);
         w && compiler_argc < MAX_COMPILER_WORDS - 1; w = strtok_r(NULL, " \t", &save))
        compiler_argv[compiler_argc++] = w;

    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    /* Compiles and dlopen go by path: a TMPDIR someone else controls lets them swap our folder. */
    char trusted[sizeof private_dir - 64], why[sizeof private_dir_error - 128];
    if (!jb__trusted_folder_path(tmp, "TMPDIR", trusted, sizeof trusted, why, sizeof why)) {
        snprintf(private_dir_error, sizeof private_dir_error,
                 "refusing TMPDIR=%s for the compiler's private folder: %s", tmp, why);
        private_dir[0] = '\0';
        return;
    }
    snprintf(private_dir, sizeof private_dir, "%s/jitbridge-%ld-XXXXXX", trusted, (long)getpid());
    if (!mkdtemp(private_dir)) {
        snprintf(private_dir_error, sizeof private_dir_error,
                 "cannot create a private directory under %s: %s (set TMPDIR)", tmp,
                 strerror(errno));
        private_dir[0] = '\0';
        return;
    }
    atexit(remove_private_dir);
}

const char *jb_cpu_compiler(void)
{
    pthread_once(&setup_once, cpu_setup);
    return compiler_line;
}

static int private_path(char *out, size_t len, const char *stem, const char *ext)
{
    pthread_once(&setup_once, cpu_setup);
    JB_RETURN_IF(!private_dir[0], JB_ERR_SYSTEM, "%s", private_dir_error);
    /* A serial, never reused: glibc's dlopen matches loaded objects by path name. */
    unsigned long long serial = (unsigned long long)atomic_fetch_add(&file_serial, 1);
    int n = snprintf(out, len, "%s/%s-%llu%s", private_dir, stem, serial, ext);
    JB_RETURN_IF(n < 0 || (size_t)n >= len, JB_ERR_SYSTEM, "temporary path too long");
    return JB_OK;
}

static int write_file(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
    if (!jb__write_all(fd, data, size)) {
        int err = errno;
        close(fd);
        unlink(path);
        return jb__fail(JB_ERR_SYSTEM, "cannot write %s: %s", path, strerror(err));
    }
    close(fd);
    return JB_OK;
}

/* Reads a whole file; the result is NUL-terminated for convenience. */
static int read_file(const char *path, jb_blob *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return jb__fail(JB_ERR_SYSTEM, "cannot stat %s: %s", path, strerror(errno));
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

#define DEFAULT_COMPILE_TIMEOUT_MS (10 * 60 * 1000)

/* $JITBRIDGE_COMPILE_TIMEOUT_MS, read at each compile so that it can change at run time. */
static uint64_t compile_timeout_ms(void)
{
    const char *text = getenv("JITBRIDGE_COMPILE_TIMEOUT_MS");
    char *end;
    unsigned long long ms = text ? strtoull(text, &end, 10) : 0;
    return text && *text && !*end && ms > 0 ? ms : DEFAULT_COMPILE_TIMEOUT_MS;
}

/* The options of every compile; also part of the disk cache key. */
static const char *const compile_flags[] = {"-O2", "-fPIC", "-shared", "-w"};

static int run_compiler(const char *src, const char *obj, const char *log, unsigned flags,
                        int *out_wait_status)
{
    JB_RETURN_IF(compiler_argc == 0, JB_ERR_COMPILE, "the compiler command ($CC) is empty");
    char *argv[MAX_COMPILER_WORDS + 14];
    int argc = 0;
    for (int i = 0; i < compiler_argc; i++)
        argv[argc++] = compiler_argv[i];
    for (size_t i = 0; i < sizeof compile_flags / sizeof *compile_flags; i++)
        argv[argc++] = (char *)compile_flags[i];
    if (flags & JB_COMPILE_FAST_MATH)
        argv[argc++] = "-ffast-math";
    if (flags & JB_COMPILE_LINE_INFO)
        argv[argc++] = "-g";
    char *files[] = {"-o", (char *)obj, (char *)src, "-lm"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        argv[argc++] = files[i];
    argv[argc] = NULL;

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    /* Its own process group, so that a timeout ends the compiler and whatever it started. */
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    JB_RETURN_IF(err != 0, JB_ERR_COMPILE, "cannot start the compiler '%s': %s (set CC)", argv[0],
                 strerror(err));
    uint64_t timeout_ms = compile_timeout_ms();
    uint64_t deadline = jb__now_ns() + timeout_ms * 1000000ULL;
    long nap_ns = 100 * 1000; /* grows to 5 ms: short compiles are not slowed down */
    int wait_status;
    for (;;) {
        pid_t done = waitpid(pid, &wait_status, WNOHANG);
        if (done == pid)
            break;
        if (done < 0 && errno != EINTR)
            return jb__fail(JB_ERR_COMPILE, "waiting for the compiler failed: %s",
                            strerror(errno));
        if (jb__now_ns() > deadline) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR)
                ;
            return jb__fail(JB_ERR_COMPILE,
                            "the compiler '%s' did not finish within %llu ms and was killed "
                            "(JITBRIDGE_COMPILE_TIMEOUT_MS sets the limit)",
                            argv[0], (unsigned long long)timeout_ms);
        }
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        if (nap_ns < 5 * 1000 * 1000)
            nap_ns *= 2;
    }
    *out_wait_status = wait_status;
    return JB_OK;
}

static int cpu_compile(jb_device *dev, const char *module_name, const char *source,
                       unsigned flags, jb_blob *out)
{
    (void)dev;
    char src[4200], obj[4200], log[4200];
    JB_FORWARD_IF_ERROR(private_path(src, sizeof src, "kernel", ".c"));
    JB_FORWARD_IF_ERROR(private_path(obj, sizeof obj, "kernel", ".so"));
    JB_FORWARD_IF_ERROR(private_path(log, sizeof log, "kernel", ".log"));
    int status = write_file(src, source, strlen(source));
    int wait_status = 0;
    if (status == JB_OK)
        status = run_compiler(src, obj, log, flags, &wait_status);
    if (status == JB_OK) {
        if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
            status = read_file(obj, out);
        } else {
            jb_blob text = {0};
            read_file(log, &text);
            if (WIFSIGNALED(wait_status))
                status = jb__fail_with_log(JB_ERR_COMPILE, text.data,
                                           "compiling '%s' with '%s': the compiler was killed by "
                                           "signal %d",
                                           module_name, compiler_line, WTERMSIG(wait_status));
            else if (WEXITSTATUS(wait_status) == 127) /* exec failed after the fork */
                status = jb__fail_with_log(JB_ERR_COMPILE, text.data,
                                           "cannot start the compiler '%s' (exit status 127: not "
                                           "found or not executable; set CC)",
                                           compiler_line);
            else
                status = jb__fail_with_log(JB_ERR_COMPILE, text.data,
                                           "compiling '%s' with '%s': exit status %d", module_name,
                                           compiler_line, WEXITSTATUS(wait_status));
            free(text.data);
        }
    }
    unlink(src);
    unlink(obj);
    unlink(log);
    return status;
}

static char compiler_version[256];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

/* The first line of `$CC --version`, asked once per process. */
static void find_compiler_version(void)
{
    snprintf(compiler_version, sizeof compiler_version, "unknown version");
    char log[4200];
    if (compiler_argc == 0 || private_path(log, sizeof log, "version", ".txt") != JB_OK)
        return;
    char *argv[MAX_COMPILER_WORDS + 2];
    int argc = 0;
    for (int i = 0; i < compiler_argc; i++)
        argv[argc++] = compiler_argv[i];
    argv[argc++] = "--version";
    argv[argc] = NULL;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int status;
    if (posix_spawnp(&pid, argv[0], &actions, NULL, argv, environ) == 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        FILE *f = fopen(log, "r");
        if (f) {
            if (fgets(compiler_version, sizeof compiler_version, f))
                compiler_version[strcspn(compiler_version, "\n")] = '\0';
            fclose(f);
        }
    }
    posix_spawn_file_actions_destroy(&actions);
    unlink(log);
}

static int cpu_compiler_identity(jb_device *dev, char *out, size_t len)
{
    (void)dev;
    pthread_once(&setup_once, cpu_setup);
    pthread_once(&version_once, find_compiler_version);
    size_t used = (size_t)snprintf(out, len, "%s (%s); flags", compiler_line, compiler_version);
    for (size_t i = 0; i < sizeof compile_flags / sizeof *compile_flags && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, " %s", compile_flags[i]);
    return JB_OK;
}

static int cpu_module_load(jb_device *dev, const jb_blob *code, void **out_module)
{
    (void)dev;
    char path[4200];
    JB_FORWARD_IF_ERROR(private_path(path, sizeof path, "module", ".so"));
    JB_FORWARD_IF_ERROR(write_file(path, code->data, code->size));
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *why = handle ? NULL : dlerror();
    unlink(path); /* the mapping stays; the name is never reused */
    JB_RETURN_IF(!handle, JB_ERR_LOAD, "dlopen rejected the compiled module: %s",
                 why ? why : "unknown reason");
    *out_module = handle;
    return JB_OK;
}

static int cpu_module_function(jb_device *dev, void *module, const char *name, void **out_fn)
{
    (void)dev;
    dlerror();
    void *fn = dlsym(module, name);
    JB_RETURN_IF(!fn, JB_ERR_LOAD, "the module has no function '%s'", name);
    *out_fn = fn;
    return JB_OK;
}

/* ---- events ---- */

typedef struct cpu_event {
    pthread_mutex_t mutex;
    pthread_cond_t done;
    uint64_t recorded;  /* number of the last record */
    uint64_t completed; /* highest record the streams have reached */
} cpu_event;

static int cpu_event_create(jb_device *dev, void **out_event)
{
    (void)dev;
    cpu_event *ev = calloc(1, sizeof *ev);
    JB_RETURN_IF(!ev, JB_ERR_OUT_OF_MEMORY, "no memory for an event");
    pthread_mutex_init(&ev->mutex, NULL);
    pthread_cond_init(&ev->done, NULL);
    *out_event = ev;
    return JB_OK;
}

static void cpu_event_destroy(jb_device *dev, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    pthread_mutex_destroy(&ev->mutex);
    pthread_cond_destroy(&ev->done);
    free(ev);
}

static void event_wait_for(cpu_event *ev, uint64_t target)
{
    pthread_mutex_lock(&ev->mutex);
    while (ev->completed < target)
        pthread_cond_wait(&ev->done, &ev->mutex);
    pthread_mutex_unlock(&ev->mutex);
}

static int cpu_event_synchronize(jb_device *dev, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    pthread_mutex_lock(&ev->mutex);
    uint64_t target = ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    event_wait_for(ev, target);
    return JB_OK;
}

static int cpu_event_query(jb_device *dev, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    pthread_mutex_lock(&ev->mutex);
    int done = ev->completed >= ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    return done;
}

/* ---- streams: a worker thread and an ordered queue ---- */

typedef enum task_kind { TASK_LAUNCH, TASK_SIGNAL, TASK_WAIT, TASK_STOP } task_kind;

typedef void (*cpu_kernel_fn)(void *const *pointers, const uint64_t *sizes,
                              const unsigned char *scalars, uint64_t threads);
/* A whole-source module's entry point: args[i] points at argument i's value (jitbridge.h). */
typedef void (*cpu_entry_fn)(void **args, uint64_t threads);

typedef struct cpu_task {
    struct cpu_task *next;
    task_kind kind;
    union {
        struct {
            cpu_kernel_fn fn;
            uint64_t threads;
            size_t count;
            bool raw; /* a cpu_entry_fn with `count` argument pointers */
        } launch;
        struct {
            cpu_event *event;
            uint64_t target;
        } event;
    } u;
    /* TASK_LAUNCH only: count pointers, count sizes, then the scalar slots, behind the task */
    void **pointers;
} cpu_task;

typedef struct cpu_stream {
    pthread_mutex_t mutex;
    pthread_cond_t work;
    pthread_cond_t idle;
    cpu_task *head, *tail;
    uint64_t submitted, completed;
    pthread_t thread;
    cpu_task stop_task; /* allocated with the stream, so destroying one cannot fail */
} cpu_stream;

static void run_task(cpu_task *task)
{
    switch (task->kind) {
    case TASK_LAUNCH:
        if (task->u.launch.raw) {
            cpu_entry_fn entry;
            memcpy(&entry, &task->u.launch.fn, sizeof entry);
            entry(task->pointers, task->u.launch.threads);
            break;
        }
        task->u.launch.fn(task->pointers, (const uint64_t *)&task->pointers[task->u.launch.count],
                          (const unsigned char *)&task->pointers[2 * task->u.launch.count],
                          task->u.launch.threads);
        break;
    case TASK_SIGNAL: {
        cpu_event *ev = task->u.event.event;
        pthread_mutex_lock(&ev->mutex);
        if (ev->completed < task->u.event.target)
            ev->completed = task->u.event.target;
        pthread_cond_broadcast(&ev->done);
        pthread_mutex_unlock(&ev->mutex);
        break;
    }
    case TASK_WAIT:
        event_wait_for(task->u.event.event, task->u.event.target);
        break;
    case TASK_STOP:
        break;
    }
}

static void *stream_worker(void *arg)
{
    cpu_stream *s = arg;
    for (;;) {
        /* Take every queued task at once: one lock per batch, not two per task. */
        pthread_mutex_lock(&s->mutex);
        while (!s->head)
            pthread_cond_wait(&s->work, &s->mutex);
        cpu_task *batch = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->mutex);

        uint64_t ran = 0;
        bool stop = false;
        while (batch) {
            cpu_task *task = batch;
            batch = task->next;
            run_task(task);
            ran++;
            stop = task == &s->stop_task;
            if (!stop)
                free(task);
        }

        pthread_mutex_lock(&s->mutex);
        s->completed += ran;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->mutex);
        if (stop)
            return NULL;
    }
}

static void enqueue(cpu_stream *s, cpu_task *task)
{
    task->next = NULL;
    pthread_mutex_lock(&s->mutex);
    if (s->tail)
        s->tail->next = task;
    else
        s->head = task;
    s->tail = task;
    s->submitted++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mutex);
}

static cpu_task *task_new(task_kind kind, size_t extra)
{
    cpu_task *task = calloc(1, sizeof *task + extra);
    if (task) {
        task->kind = kind;
        task->pointers = (void **)(task + 1);
    }
    return task;
}

static int cpu_stream_create(jb_device *dev, void **out_stream)
{
    (void)dev;
    cpu_stream *s = calloc(1, sizeof *s);
    JB_RETURN_IF(!s, JB_ERR_OUT_OF_MEMORY, "no memory for a stream");
    pthread_mutex_init(&s->mutex, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->stop_task.kind = TASK_STOP;
    /* The worker must not inherit the caller's signal handling duties. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&s->thread, NULL, stream_worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        free(s);
        return jb__fail(JB_ERR_SYSTEM, "cannot start a stream thread: %s", strerror(err));
    }
    *out_stream = s;
    return JB_OK;
}

static int cpu_stream_synchronize(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_stream *s = stream;
    pthread_mutex_lock(&s->mutex);
    uint64_t target = s->submitted;
    while (s->completed < target)
        pthread_cond_wait(&s->idle, &s->mutex);
    pthread_mutex_unlock(&s->mutex);
    return JB_OK;
}

static void cpu_stream_destroy(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_stream *s = stream;
    enqueue(s, &s->stop_task);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mutex);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->idle);
    free(s);
}

static int cpu_event_record(jb_device *dev, void *event, void *stream)
{
    (void)dev;
    cpu_event *ev = event;
    cpu_task *task = task_new(TASK_SIGNAL, 0);
    JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory to record an event");
    pthread_mutex_lock(&ev->mutex);
    task->u.event.event = ev;
    task->u.event.target = ++ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    enqueue(stream, task);
    return JB_OK;
}

static int cpu_stream_wait_event(jb_device *dev, void *stream, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    cpu_task *task = task_new(TASK_WAIT, 0);
    JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory to wait for an event");
    pthread_mutex_lock(&ev->mutex);
    task->u.event.event = ev;
    task->u.event.target = ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    enqueue(stream, task);
    return JB_OK;
}

static int cpu_launch(jb_device *dev, void *stream, void *fn, const uint32_t grid[3],
                      const uint32_t block[3], uint32_t shared_bytes, const jb_launch_args *args)
{
    (void)dev, (void)grid, (void)block, (void)shared_bytes;
    if (args->raw) {
        /* Argument pointers, then the slots they point at, behind the task. */
        size_t n = args->num_scalars;
        cpu_task *task = task_new(TASK_LAUNCH, n * (sizeof(void *) + JB_SCALAR_SLOT));
        JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory for a launch");
        memcpy(&task->u.launch.fn, &fn, sizeof fn);
        task->u.launch.threads = args->total_threads;
        task->u.launch.count = n;
        task->u.launch.raw = true;
        unsigned char *slots = (unsigned char *)&task->pointers[n];
        memcpy(slots, args->scalars, n * JB_SCALAR_SLOT);
        for (size_t i = 0; i < n; i++)
            task->pointers[i] = slots + i * JB_SCALAR_SLOT;
        enqueue(stream, task);
        return JB_OK;
    }
    size_t count = args->count;
    size_t scalar_bytes = args->num_scalars * JB_SCALAR_SLOT;
    cpu_task *task =
        task_new(TASK_LAUNCH, count * (sizeof(void *) + sizeof(uint64_t)) + scalar_bytes);
    JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory for a launch");
    memcpy(&task->u.launch.fn, &fn, sizeof fn); /* dlsym gave an object pointer (POSIX) */
    task->u.launch.threads = args->total_threads;
    task->u.launch.count = count;
    memcpy(task->pointers, args->pointers, count * sizeof(void *));
    memcpy(&task->pointers[count], args->sizes, count * sizeof(uint64_t));
    if (scalar_bytes)
        memcpy(&task->pointers[2 * count], args->scalars, scalar_bytes);
    enqueue(stream, task);
    return JB_OK;
}

/* ---- memory ---- */

static int cpu_mem_alloc(jb_device *dev, size_t bytes, void **out_ptr)
{
    (void)dev;
    void *ptr = NULL;
    int err = posix_memalign(&ptr, 64, bytes);
    JB_RETURN_IF(err != 0, JB_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
    *out_ptr = ptr;
    return JB_OK;
}

static void cpu_mem_free(jb_device *dev, void *ptr)
{
    (void)dev;
    free(ptr);
}

static int cpu_memcpy_htod(jb_device *dev, void *stream, void *dst, const void *src, size_t bytes)
{
    (void)dev, (void)stream;
    memcpy(dst, src, bytes); /* dst is a fresh buffer no queued work touches */
    return JB_OK;
}

static int cpu_memcpy_dtoh(jb_device *dev, void *stream, void *dst, const void *src, size_t bytes)
{
    cpu_stream_synchronize(dev, stream);
    memcpy(dst, src, bytes);
    return JB_OK;
}

const jb_backend jb__cpu_backend = {
    .name = "cpu",
    .dialect = JB_DIALECT_C,
    .compiler_identity = cpu_compiler_identity,
    .compile = cpu_compile,
    .module_load = cpu_module_load,
    .module_function = cpu_module_function,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_wait_event = cpu_stream_wait_event,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_synchronize = cpu_event_synchronize,
    .event_query = cpu_event_query,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .memcpy_htod = cpu_memcpy_htod,
    .memcpy_dtoh = cpu_memcpy_dtoh,
    .launch = cpu_launch,
    .kernel_set_shared_limit = NULL,
};
