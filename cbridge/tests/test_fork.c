/* fork() while another thread builds: the child is not stuck on a lock the parent's builder held,
 * and it can compile and launch on the cpu with its own streams, never on its parent's. */
#include "check.h"
#include "deadline.h"
#include "jitbridge.h"
#include "jitbridge_sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_DEADLINE_S 30

static jb_device *cpu;
static const char *in_names[] = {"x"}, *out_names[] = {"y"};
static jb_dtype dtypes[] = {JB_F32};

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

static jb_kernel_spec spec_named(const char *name, const char *body, const char *header)
{
    return (jb_kernel_spec){.struct_size = sizeof(jb_kernel_spec),
                            .name = name,
                            .input_names = in_names,
                            .input_dtypes = dtypes,
                            .num_inputs = 1,
                            .output_names = out_names,
                            .output_dtypes = dtypes,
                            .num_outputs = 1,
                            .header = header,
                            .body = body};
}

typedef struct {
    jb_custom_kernel *kernel;
    int status;
} build_arg;

static void *build_on_thread(void *p)
{
    build_arg *arg = p;
    arg->status = jb_custom_kernel_prepare(arg->kernel, cpu);
    return NULL;
}

/* Writes the gate after a while: the build holding the module cache's lock then finishes, so a
 * fork that waits for that lock (as it must) does not wait forever. */
static void *open_gate_later(void *p)
{
    int fd = *(int *)p;
    sleep_ms(300);
    if (write(fd, "\n", 1) != 1)
        perror("writing the gate");
    close(fd);
    return NULL;
}

/* The child's whole life: 0 when a probe and a new custom kernel ran right on a fresh default
 * stream and the parent's explicit stream was refused. */
static int child_main(jb_stream *parents_stream)
{
    float in[8], out[8];
    for (int i = 0; i < 8; i++)
        in[i] = (float)i;
    int64_t shape[] = {8};
    jb_array *x = NULL, *y = NULL, *z = NULL;
    if (jb_array_from_host(&x, cpu, JB_F32, shape, 1, in) != JB_OK)
        return 10;
    if (jb_jit_race_probe_array(&y, x, 4242) != JB_OK || jb_array_read(y, out, sizeof out))
        return 11;
    for (int i = 0; i < 8; i++)
        if (out[i] != in[i] * 2 + 1)
            return 12;
    jb_kernel_spec spec =
        spec_named("forked_child_kernel", "y[thread_index()] = x[thread_index()] * 3.0f;", NULL);
    jb_custom_kernel *k;
    if (jb_custom_kernel_new(&k, &spec) != JB_OK)
        return 13;
    const int64_t *shapes[] = {shape};
    int ndims[] = {1};
    jb_launch_shape launch = {.total_threads = 8};
    if (jb_custom_kernel_launch(&z, k, &x, 1, shapes, ndims, &launch) != JB_OK ||
        jb_array_read(z, out, sizeof out) != JB_OK)
        return 14;
    for (int i = 0; i < 8; i++)
        if (out[i] != in[i] * 3)
            return 15;
    jb_array *w = NULL;
    if (jb_custom_kernel_launch_on(&w, k, parents_stream, &x, 1, NULL, 0, shapes, ndims,
                                   &launch) != JB_ERR_INVALID_ARGUMENT ||
        w || !strstr(jb_last_error_message(), "before this process forked"))
        return 16;
    if (jb_stream_synchronize(parents_stream) != JB_ERR_INVALID_ARGUMENT)
        return 17;
    jb_array_free(x);
    jb_array_free(y);
    jb_array_free(z);
    jb_custom_kernel_free(k);
    return 0;
}

static void test_fork_during_build(void)
{
    char dir[] = "/tmp/jb-fork-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char gate[128], header[200];
    snprintf(gate, sizeof gate, "%s/gate.h", dir);
    snprintf(header, sizeof header, "#include \"%s\"", gate);
    CHECK(mkfifo(gate, 0600) == 0, "mkfifo %s", gate);

    /* The parent has a default stream (with its worker thread) and an explicit stream. */
    float one = 1;
    int64_t shape1[] = {1};
    jb_array *a = NULL, *b = NULL;
    CHECK_OK(jb_array_from_host(&a, cpu, JB_F32, shape1, 1, &one));
    CHECK_OK(jb_jit_race_probe_array(&b, a, 4241));
    jb_stream *explicit_stream;
    CHECK_OK(jb_stream_new(&explicit_stream, cpu));

    jb_kernel_spec held_spec =
        spec_named("held_during_fork", "y[thread_index()] = x[thread_index()];", header);
    build_arg building = {NULL, -1};
    CHECK_OK(jb_custom_kernel_new(&building.kernel, &held_spec));
    pthread_t builder, opener;
    pthread_create(&builder, NULL, build_on_thread, &building);
    /* The compiler has the FIFO open: the build, and the cache's write lock, are in progress. */
    int fd = -1;
    for (int i = 0; fd < 0 && i < 3000; i++) {
        fd = open(gate, O_WRONLY | O_NONBLOCK);
        if (fd < 0)
            sleep_ms(10);
    }
    CHECK(fd >= 0, "the compiler never opened the gate");
    pthread_create(&opener, NULL, open_gate_later, &fd);
    sleep_ms(50); /* the opener is asleep; the build still holds the lock */

    pid_t pid = fork_with_deadline("a fork during a build", CHILD_DEADLINE_S);
    if (pid == 0)
        exit(child_main(explicit_stream)); /* exit: its atexit work must spare the parent too */
    int wstatus = wait_child_with_deadline(pid, CHILD_DEADLINE_S + 5, "a fork during a build");
    CHECK(wstatus < 0 || (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0),
          "the forked child failed: exit status %d (see child_main)",
          WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);

    pthread_join(opener, NULL);
    pthread_join(builder, NULL);
    CHECK(building.status == JB_OK, "the parent's held build failed: %s", jb_last_error_message());
    /* The parent's streams still work after the fork. */
    jb_array *c = NULL;
    float got = 0;
    CHECK_OK(jb_jit_race_probe_array(&c, a, 4241));
    CHECK_OK(jb_array_read(c, &got, sizeof got));
    CHECK(got == 3, "the parent's probe after fork gave %g", got);
    CHECK_OK(jb_stream_synchronize(explicit_stream));
    jb_stream_free(explicit_stream);
    jb_custom_kernel_free(building.kernel);
    jb_array_free(a);
    jb_array_free(b);
    jb_array_free(c);
    unlink(gate);
    rmdir(dir);
}

/* A forked child may not queue a whole-source module on a stream its parent made: the stream's
 * worker is the parent's. The child's launch is refused before anything is built or queued. */
static void source_module_on_parents_stream(void)
{
    const char *entries[] = {"fill"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "misuse_forked_fill";
    spec.cpu_source = "void fill(void **args, uint64_t n) { float *y = *(float **)args[0];"
                      " for (uint64_t i = 0; i < n; i++) y[i] = 5.0f; }\n";
    spec.entry_names = entries, spec.num_entries = 1;
    jb_source_module *m = NULL;
    jb_stream *stream = NULL;
    jb_array *y = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    CHECK_OK(jb_stream_new(&stream, cpu));
    CHECK_OK(jb_array_arange(&y, cpu, 8, JB_F32));
    CHECK_OK(jb_array_eval(y));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 8};
    jb_arg args[] = {{.array = y, .written = 1}};
    /* The child answers through a pipe: under valgrind its exit status also reports the
     * parent's threads' blocks as lost, whatever the launch did. */
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    /* The alarm: a launch queued to the parent's worker would wait for nobody. */
    pid_t pid = fork_with_deadline("a launch on the parent's stream", 20);
    if (pid == 0) {
        close(fds[0]);
        jb_counters start, end;
        jb_counters_get(&start, sizeof start);
        int status = jb_source_module_launch(m, stream, "fill", args, 1, &shape);
        jb_counters_get(&end, sizeof end);
        char answer = status != JB_ERR_INVALID_ARGUMENT ? 1
                      : !strstr(jb_last_error_message(), "before this process forked") ? 2
                      : end.builds != start.builds                                    ? 3
                                                                                      : 0;
        _exit(write(fds[1], &answer, 1) == 1 ? 0 : 1);
    }
    close(fds[1]);
    char answer = -1;
    if (pid < 0 || read(fds[0], &answer, 1) != 1)
        answer = -1;
    close(fds[0]);
    wait_child_with_deadline(pid, 25, "a launch on the parent's stream");
    CHECK(answer == 0,
          "the forked child launched on its parent's stream (answer %d: 1 launched, 2 unclear "
          "message, 3 built, -1 none)",
          answer);
    /* The parent's stream still runs the module. */
    CHECK_OK(jb_source_module_launch(m, stream, "fill", args, 1, &shape));
    float host[8];
    CHECK_OK(jb_array_read(y, host, sizeof host));
    CHECK(host[0] == 5.0f && host[7] == 5.0f, "the parent's launch wrote %g", (double)host[7]);
    jb_array_free(y);
    jb_stream_free(stream);
    jb_source_module_free(m);
}

/* ---- fork while a kernel is being configured ---- */

/* The hook blocks until `release` is set: the parent's configuring thread stays inside it for
 * as long as the test wants. The child's copy of `release` is its own. */
typedef struct blocking_hook {
    atomic_int entered, release, calls;
} blocking_hook;

static int hold_in_hook(void *user_data, const jb_device *device, jb_kernel_config *config)
{
    (void)device;
    blocking_hook *h = user_data;
    atomic_fetch_add(&h->calls, 1);
    atomic_store(&h->entered, 1);
    while (!atomic_load(&h->release))
        sleep_ms(1);
    config->threads_per_block = 64;
    return 0;
}

typedef struct launch_arg {
    jb_custom_kernel *kernel;
    int status;
} launch_arg;

static int launch_once(jb_custom_kernel *k, float scale)
{
    float in[8], out[8];
    for (int i = 0; i < 8; i++)
        in[i] = (float)i;
    int64_t shape[] = {8};
    const int64_t *shapes[] = {shape};
    int ndims[] = {1};
    jb_launch_shape launch = {.total_threads = 8};
    jb_array *x = NULL, *y = NULL;
    int status = jb_array_from_host(&x, cpu, JB_F32, shape, 1, in);
    if (status == JB_OK)
        status = jb_custom_kernel_launch(&y, k, &x, 1, shapes, ndims, &launch);
    if (status == JB_OK)
        status = jb_array_read(y, out, sizeof out);
    for (int i = 0; status == JB_OK && i < 8; i++)
        if (out[i] != in[i] * scale)
            status = JB_ERR_LAUNCH;
    jb_array_free(x);
    jb_array_free(y);
    return status;
}

static void *launch_on_thread(void *p)
{
    launch_arg *arg = p;
    arg->status = launch_once(arg->kernel, 5.0f);
    return NULL;
}

#define CONFIGURED_BODY "y[thread_index()] = x[thread_index()] * 5.0f;"

/* Another thread is inside a kernel's configure hook (under the module's kernel mutex, once)
 * when the process forks: the child launches that kernel, another kernel object of its module
 * and a new kernel, each at once. (2 of 2 such children hung.) */
static void fork_during_a_configure_hook(void)
{
    static blocking_hook hook;
    jb_kernel_spec spec = spec_named("configured_during_fork", CONFIGURED_BODY, NULL);
    spec.configure = hold_in_hook, spec.configure_user_data = &hook;
    jb_kernel_spec plain = spec_named("configured_during_fork", CONFIGURED_BODY, NULL);
    launch_arg arg = {NULL, -1};
    jb_custom_kernel *sibling = NULL;
    CHECK_OK(jb_custom_kernel_new(&arg.kernel, &spec));
    CHECK_OK(jb_custom_kernel_new(&sibling, &plain));
    CHECK_OK(jb_custom_kernel_prepare(sibling, cpu)); /* the module is built: no build at fork */
    pthread_t configuring;
    pthread_create(&configuring, NULL, launch_on_thread, &arg);
    while (!atomic_load(&hook.entered))
        sleep_ms(1);

    pid_t pid = fork_with_deadline("a fork during a configure hook", 20);
    if (pid == 0) {
        atomic_store(&hook.release, 1); /* the child's hook runs through */
        jb_custom_kernel *fresh = NULL, *again = NULL;
        jb_kernel_spec other = spec_named("configured_during_fork", CONFIGURED_BODY, NULL);
        int answer = launch_once(arg.kernel, 5.0f) != JB_OK                  ? 1
                     : atomic_load(&hook.calls) != 2                          ? 2
                     : jb_custom_kernel_new(&fresh, &other) != JB_OK         ? 3
                     : launch_once(fresh, 5.0f) != JB_OK                      ? 4
                     : jb_custom_kernel_new(&again, &spec) != JB_OK          ? 5
                     : launch_once(again, 5.0f) != JB_OK                      ? 6
                                                                              : 0;
        _exit(answer);
    }
    int status = wait_child_with_deadline(pid, 20, "a fork during a configure hook");
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child forked during a configure hook failed: %d (1: the hooked kernel, 2: its "
          "hook did not run again in the child, 3-6: other kernels of the module)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    atomic_store(&hook.release, 1);
    pthread_join(configuring, NULL);
    CHECK(arg.status == JB_OK, "the parent's configured launch: %d", arg.status);
    CHECK(atomic_load(&hook.calls) == 1, "the parent ran the hook %d times",
          atomic_load(&hook.calls));
    jb_custom_kernel_free(arg.kernel);
    jb_custom_kernel_free(sibling);
}

/* A thread keeps making new kernel objects of one built module and launching each once (a
 * first launch configures, without a hook) while the process forks again and again; each child
 * launches a new kernel object of that module. (5 of 1,200 such children hung.) */
#ifdef __SANITIZE_ADDRESS__
#define NO_HOOK_FORKS 30 /* each fork copies ASan's shadow maps: 300 took 3 minutes */
#else
#define NO_HOOK_FORKS 300 /* with the fix taken out, one of the first 100 or so hung */
#endif
#define LAUNCHERS 3

static atomic_int stop_first_launches;

static void *first_launch_new_kernels(void *p)
{
    (void)p;
    jb_kernel_spec plain = spec_named("configured_during_fork", CONFIGURED_BODY, NULL);
    while (!atomic_load(&stop_first_launches)) {
        jb_custom_kernel *k = NULL;
        if (jb_custom_kernel_new(&k, &plain) == JB_OK)
            jb_custom_kernel_prepare(k, cpu);
        jb_custom_kernel_free(k);
    }
    return NULL;
}

static void fork_during_first_launches(void)
{
    pthread_t launchers[LAUNCHERS];
    for (int t = 0; t < LAUNCHERS; t++)
        pthread_create(&launchers[t], NULL, first_launch_new_kernels, NULL);
    bool ok = true;
    int forks = 0;
    for (; forks < NO_HOOK_FORKS && ok; forks++) {
        pid_t pid = fork_with_deadline("a fork during first launches", 10);
        if (pid == 0) {
            jb_custom_kernel *k = NULL;
            jb_kernel_spec plain = spec_named("configured_during_fork", CONFIGURED_BODY, NULL);
            bool launched = jb_custom_kernel_new(&k, &plain) == JB_OK &&
                            jb_custom_kernel_prepare(k, cpu) == JB_OK;
            if (!launched)
                fprintf(stderr, "a child forked during first launches: %s\n",
                        jb_last_error_message());
            _exit(launched ? 0 : 1);
        }
        int status = wait_child_with_deadline(pid, 10, "a fork during first launches");
        ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    atomic_store(&stop_first_launches, 1);
    for (int t = 0; t < LAUNCHERS; t++)
        pthread_join(launchers[t], NULL);
    CHECK(ok, "child %d of %d forked during first launches hung or failed", forks, NO_HOOK_FORKS);
}

/* A parent thread that waits for a finished array again and again holds the cpu event's mutex
 * much of the time; a child forked meanwhile that reads the array (its work was done before the
 * fork: allowed) must not wait for that mutex, whose holder it does not have. */
#define EVENT_WAIT_FORKS 40

static atomic_int stop_waiting;

static void *wait_again_and_again(void *p)
{
    jb_array *array = p;
    while (!atomic_load(&stop_waiting))
        jb_array_eval(array);
    return NULL;
}

static void fork_while_a_thread_waits_for_an_array(void)
{
    float in[4] = {1, 2, 3, 4};
    int64_t shape[] = {4};
    jb_array *array = NULL;
    CHECK(jb_array_from_host(&array, cpu, JB_F32, shape, 1, in) == JB_OK &&
              jb_array_eval(array) == JB_OK,
          "an array to wait for: %s", jb_last_error_message());
    if (!array)
        return;
    pthread_t waiter;
    pthread_create(&waiter, NULL, wait_again_and_again, array);
    bool ok = true;
    int forks = 0;
    for (; forks < EVENT_WAIT_FORKS && ok; forks++) {
        pid_t pid = fork_with_deadline("a fork while a thread waits for an array", 10);
        if (pid == 0) {
            float out[4] = {0};
            int status = jb_array_read(array, out, sizeof out);
            if (status != JB_OK)
                fprintf(stderr, "a child reading its parent's finished array: %s\n",
                        jb_last_error_message());
            _exit(status == JB_OK && out[3] == 4 ? 0 : 1);
        }
        int status = wait_child_with_deadline(pid, 5, "a fork while a thread waits for an array");
        ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    atomic_store(&stop_waiting, 1);
    pthread_join(waiter, NULL);
    jb_array_free(array);
    CHECK(ok, "child %d of %d, forked while a thread waited for an array, hung or failed", forks,
          EVENT_WAIT_FORKS);
}

/* A parent thread that replays a graph holds the graph's mutex for most of each launch; a child
 * forked meanwhile that launches the graph gets an answer (a replay, or an error for work it
 * cannot wait for), never a wait for that mutex, whose holder it does not have. */
#define GRAPH_FORKS 40

static atomic_int stop_replaying;

typedef struct replay_arg {
    jb_graph *graph;
    jb_stream *stream;
} replay_arg;

static void *replay_again_and_again(void *p)
{
    replay_arg *arg = p;
    for (int n = 0; !atomic_load(&stop_replaying); n++)
        if (jb_graph_launch(arg->graph, arg->stream) != JB_OK || n % 64 == 0)
            jb_stream_synchronize(arg->stream);
    jb_stream_synchronize(arg->stream);
    return NULL;
}

static void fork_while_a_thread_replays_a_graph(void)
{
    jb_kernel_spec spec = spec_named("replayed_during_fork", CONFIGURED_BODY, NULL);
    jb_custom_kernel *k = NULL;
    jb_stream *capturing = NULL, *replaying = NULL;
    jb_graph *graph = NULL;
    jb_array *x = NULL, *y = NULL;
    float in[8] = {0};
    int64_t shape[] = {8};
    const int64_t *shapes[] = {shape};
    int ndims[] = {1};
    jb_launch_shape launch = {.total_threads = 8};
    bool made = jb_custom_kernel_new(&k, &spec) == JB_OK &&
                jb_stream_new(&capturing, cpu) == JB_OK &&
                jb_stream_new(&replaying, cpu) == JB_OK &&
                jb_array_from_host(&x, cpu, JB_F32, shape, 1, in) == JB_OK &&
                jb_array_eval(x) == JB_OK && jb_graph_begin_capture(capturing) == JB_OK &&
                jb_custom_kernel_launch_on(&y, k, capturing, &x, 1, NULL, 0, shapes, ndims,
                                           &launch) == JB_OK &&
                jb_graph_end_capture(&graph, capturing) == JB_OK;
    CHECK(made, "a graph to replay: %s", jb_last_error_message());
    if (made) {
        replay_arg arg = {graph, replaying};
        pthread_t replayer;
        pthread_create(&replayer, NULL, replay_again_and_again, &arg);
        bool ok = true;
        int forks = 0;
        for (; forks < GRAPH_FORKS && ok; forks++) {
            pid_t pid = fork_with_deadline("a fork while a thread replays a graph", 10);
            if (pid == 0) {
                jb_stream *own = NULL;
                if (jb_stream_new(&own, cpu) != JB_OK)
                    _exit(1);
                jb_graph_launch(graph, own); /* a replay, or a clear error: either answers */
                _exit(0);
            }
            int status = wait_child_with_deadline(pid, 5, "a fork while a thread replays a graph");
            ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        }
        atomic_store(&stop_replaying, 1);
        pthread_join(replayer, NULL);
        CHECK(ok, "child %d of %d, forked while a thread replayed a graph, hung or failed",
              forks, GRAPH_FORKS);
    }
    jb_graph_free(graph);
    jb_array_free(x);
    jb_array_free(y);
    jb_stream_free(capturing);
    jb_stream_free(replaying);
    jb_custom_kernel_free(k);
}

int main(void)
{
    setenv("JITBRIDGE_DISK_CACHE", "0", 1); /* the child compiles, not loads */
    if (jb_device_get(&cpu, JB_DEVICE_CPU, 0) != JB_OK) {
        fprintf(stderr, "no cpu device: %s\n", jb_last_error_message());
        return 1;
    }
    test_fork_during_build();
    source_module_on_parents_stream();
    fork_during_a_configure_hook();
    fork_during_first_launches();
    fork_while_a_thread_waits_for_an_array();
    fork_while_a_thread_replays_a_graph();
    return check_summary("test_fork");
}
