/* C-level tests of the module cache, the configure hook, streams and arrays on the cpu device. */
#include "check.h"
#include "deadline.h"
#include "jitbridge_sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8
#define N 256

static jb_device *cpu;

static bool probe_output_exact(jb_array *out, int64_t n)
{
    float values[1024];
    if (jb_array_read(out, values, (size_t)n * sizeof(float)) != JB_OK)
        return false;
    for (int64_t i = 0; i < n; i++)
        if (values[i] != 2.0f * (float)i + 1.0f)
            return false;
    return true;
}

typedef struct race_arg {
    pthread_barrier_t *barrier;
    int variant;
    bool exact;
} race_arg;

/* One thread of a round: its own stream installed as default, the barrier, then the probe. */
static void *first_launch(void *p)
{
    race_arg *arg = p;
    jb_stream *stream = NULL;
    jb_array *in = NULL, *out = NULL;
    arg->exact = jb_new_thread_local_generation_stream(&stream, cpu) == JB_OK &&
                 jb_install_thread_local_default_stream(stream) == JB_OK &&
                 jb_array_arange(&in, cpu, N, JB_F32) == JB_OK;
    pthread_barrier_wait(arg->barrier);
    arg->exact = arg->exact && jb_jit_race_probe_array(&out, in, arg->variant) == JB_OK &&
                 jb_array_eval(out) == JB_OK && probe_output_exact(out, N);
    jb_array_free(in);
    jb_array_free(out);
    jb_uninstall_thread_local_default_stream(stream);
    jb_stream_free(stream);
    return NULL;
}

/* One round: THREADS threads first-launch variants first_variant + t * step together; each
 * output must be exact, and `new_keys` modules built, one per new key. */
static void first_launch_round(const char *scenario, int round, int first_variant, int step,
                               int new_keys)
{
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, THREADS);
    pthread_t threads[THREADS];
    race_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (race_arg){&barrier, first_variant + t * step, false};
        pthread_create(&threads[t], NULL, first_launch, &args[t]);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(args[t].exact, "%s round %d thread %d: output not exact", scenario, round, t);
    }
    pthread_barrier_destroy(&barrier);
    jb_counters_get(&after, sizeof after);
    CHECK(after.builds - before.builds == (uint64_t)new_keys,
          "%s round %d: %llu builds for %d new keys", scenario, round,
          (unsigned long long)(after.builds - before.builds), new_keys);
    CHECK(after.build_failures == before.build_failures, "%s round %d: a build failed",
          scenario, round);
}

static void test_same_kernel_first_launch(void)
{
    for (int round = 0; round < 4; round++)
        first_launch_round("same kernel", round, 100 + round, 0, 1);
}

static void test_distinct_kernels_first_launch(void)
{
    for (int round = 0; round < 4; round++)
        first_launch_round("distinct kernels", round, 200 + round * THREADS, 1, THREADS);
}

/* A build that fails inserts nothing: once its cause is gone and the failure forgotten (it was a
 * rejection, so it is remembered), the same key builds. */
static void test_failed_build_is_retried(void)
{
    char dir[] = "/tmp/jb-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char header_path[128], header[200];
    snprintf(header_path, sizeof header_path, "%s/value.h", dir);
    snprintf(header, sizeof header, "#include \"%s\"", header_path);
    const char *in_names[] = {"x"}, *out_names[] = {"y"};
    jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "retried_kernel",
                           .input_names = in_names,
                           .input_dtypes = dtypes,
                           .num_inputs = 1,
                           .output_names = out_names,
                           .output_dtypes = dtypes,
                           .num_outputs = 1,
                           .body = "y[thread_index()] = x[thread_index()] + JB_TEST_VALUE;",
                           .header = header};
    jb_custom_kernel *kernel;
    CHECK_OK(jb_custom_kernel_new(&kernel, &spec));
    jb_array *in, *out = NULL;
    CHECK_OK(jb_array_arange(&in, cpu, 4, JB_F32));
    int64_t n = 4;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};

    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    int status = jb_custom_kernel_launch(&out, kernel, &in, 1, shapes, ndims, &shape);
    CHECK(status == JB_ERR_COMPILE, "expected a compile error, got %s", jb_status_name(status));
    CHECK(strstr(jb_last_error_message(), "value.h") != NULL, "the log is missing: %s",
          jb_last_error_message());
    CHECK(out == NULL, "an output was written on failure");
    jb_counters_get(&after, sizeof after);
    CHECK(after.build_failures - before.build_failures == 1, "one failure counted");
    CHECK(after.builds == before.builds, "nothing built");

    FILE *f = fopen(header_path, "w");
    fputs("#define JB_TEST_VALUE 10.0f\n", f);
    fclose(f);
    /* The rejection is remembered until forgotten: the fixed header is not seen before that. */
    status = jb_custom_kernel_launch(&out, kernel, &in, 1, shapes, ndims, &shape);
    CHECK(status == JB_ERR_COMPILE, "the remembered failure was compiled again: %s",
          jb_status_name(status));
    CHECK_OK(jb_forget_build_failures());
    CHECK_OK(jb_custom_kernel_launch(&out, kernel, &in, 1, shapes, ndims, &shape));
    float values[4] = {0};
    CHECK_OK(jb_array_read(out, values, sizeof values));
    CHECK(values[0] == 10.0f && values[3] == 13.0f, "retried kernel computed %g..%g",
          (double)values[0], (double)values[3]);
    jb_counters_get(&after, sizeof after);
    CHECK(after.builds - before.builds == 1, "the retry built once");
    unlink(header_path);
    rmdir(dir);
    jb_array_free(in);
    jb_array_free(out);
    jb_custom_kernel_free(kernel);
}

/* The configure hook raced by many threads runs once, and every launch sees its result. */
static atomic_int hook_calls;
static int slow_configure(void *user_data, const jb_device *device, jb_kernel_config *config)
{
    (void)user_data, (void)device;
    atomic_fetch_add(&hook_calls, 1);
    struct timespec wait = {0, 20 * 1000 * 1000}; /* keeps the race window wide open */
    nanosleep(&wait, NULL);
    config->threads_per_block = 64;
    return 0;
}

typedef struct configure_arg {
    pthread_barrier_t *barrier;
    jb_custom_kernel *kernel;
    bool exact;
} configure_arg;

static void *configure_launch(void *p)
{
    configure_arg *arg = p;
    jb_array *in = NULL, *out = NULL;
    bool ok = jb_array_arange(&in, cpu, N, JB_F32) == JB_OK;
    pthread_barrier_wait(arg->barrier);
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    arg->exact = ok && jb_custom_kernel_launch(&out, arg->kernel, &in, 1, shapes, ndims, &shape) ==
                           JB_OK &&
                 probe_output_exact(out, N);
    jb_array_free(in);
    jb_array_free(out);
    return NULL;
}

static void test_configure_hook_runs_once(void)
{
    const char *in_names[] = {"inp"}, *out_names[] = {"out"};
    jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "configured_kernel",
                           .input_names = in_names,
                           .input_dtypes = dtypes,
                           .num_inputs = 1,
                           .output_names = out_names,
                           .output_dtypes = dtypes,
                           .num_outputs = 1,
                           .body = jb_race_probe_body(),
                           .configure = slow_configure};
    jb_custom_kernel *kernel;
    CHECK_OK(jb_custom_kernel_new(&kernel, &spec));
    enum { CONFIGURE_THREADS = 16 };
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, CONFIGURE_THREADS);
    pthread_t threads[CONFIGURE_THREADS];
    configure_arg args[CONFIGURE_THREADS];
    for (int t = 0; t < CONFIGURE_THREADS; t++) {
        args[t] = (configure_arg){&barrier, kernel, false};
        pthread_create(&threads[t], NULL, configure_launch, &args[t]);
    }
    for (int t = 0; t < CONFIGURE_THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(args[t].exact, "thread %d: output not exact", t);
    }
    pthread_barrier_destroy(&barrier);
    CHECK(atomic_load(&hook_calls) == 1, "the configure hook ran %d times",
          atomic_load(&hook_calls));
    jb_custom_kernel_free(kernel);
}

/* A hook may call the library: prepare another kernel object of its module (which used to wait
 * for the module's kernel mutex the hook held: a deadlock), and launching its own kernel is
 * refused (it would wait for itself) instead of hanging. */
static jb_custom_kernel *hooked_self, *hooked_sibling;
static atomic_int sibling_status = -1, self_status = -1;

static int hook_calling_the_library(void *user_data, const jb_device *device,
                                    jb_kernel_config *config)
{
    (void)user_data, (void)device, (void)config;
    atomic_store(&sibling_status, jb_custom_kernel_prepare(hooked_sibling, cpu));
    atomic_store(&self_status, jb_custom_kernel_prepare(hooked_self, cpu));
    return 0;
}

static void test_configure_hook_may_call_the_library(void)
{
    const char *in_names[] = {"inp"}, *out_names[] = {"out"};
    jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "hook_calls_library",
                           .input_names = in_names,
                           .input_dtypes = dtypes,
                           .num_inputs = 1,
                           .output_names = out_names,
                           .output_dtypes = dtypes,
                           .num_outputs = 1,
                           .body = jb_race_probe_body()};
    CHECK_OK(jb_custom_kernel_new(&hooked_sibling, &spec));
    spec.configure = hook_calling_the_library;
    CHECK_OK(jb_custom_kernel_new(&hooked_self, &spec));
    deadline d;
    deadline_start(&d, 20, "a configure hook that calls the library");
    CHECK_OK(jb_custom_kernel_prepare(hooked_self, cpu));
    deadline_end(&d);
    CHECK(atomic_load(&sibling_status) == JB_OK, "the hook's prepare of a sibling: %d",
          atomic_load(&sibling_status));
    CHECK(atomic_load(&self_status) == JB_ERR_LAUNCH,
          "the hook's launch of its own kernel: %d, not JB_ERR_LAUNCH",
          atomic_load(&self_status));
    jb_custom_kernel_free(hooked_self);
    jb_custom_kernel_free(hooked_sibling);
}

typedef struct prepare_arg {
    jb_custom_kernel *kernel;
    atomic_bool done;
    int status;
} prepare_arg;

static void *prepare_on_new_thread(void *p)
{
    prepare_arg *arg = p;
    arg->status = jb_custom_kernel_prepare(arg->kernel, cpu);
    atomic_store(&arg->done, true);
    return NULL;
}

/* A new thread's first lookup of a built kernel does not wait behind another key's build: the
 * build is held inside the compiler (its header is a FIFO nobody writes yet) while a fresh
 * thread looks the built kernel up. */
static void test_new_thread_hits_during_build(void)
{
    char dir[] = "/tmp/jb-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char gate[128], header[200];
    snprintf(gate, sizeof gate, "%s/gate.h", dir);
    snprintf(header, sizeof header, "#include \"%s\"", gate);
    CHECK(mkfifo(gate, 0600) == 0, "mkfifo %s", gate);
    const char *in_names[] = {"inp"}, *out_names[] = {"out"};
    jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec warm_spec = {.struct_size = sizeof(jb_kernel_spec),
                                .name = "warm_kernel",
                                .input_names = in_names,
                                .input_dtypes = dtypes,
                                .num_inputs = 1,
                                .output_names = out_names,
                                .output_dtypes = dtypes,
                                .num_outputs = 1,
                                .body = jb_race_probe_body()};
    jb_kernel_spec held_spec = warm_spec;
    held_spec.name = "held_kernel";
    held_spec.header = header;
    jb_custom_kernel *warm, *held;
    CHECK_OK(jb_custom_kernel_new(&warm, &warm_spec));
    CHECK_OK(jb_custom_kernel_new(&held, &held_spec));
    CHECK_OK(jb_custom_kernel_prepare(warm, cpu));

    prepare_arg building = {held, false, -1}, fresh = {warm, false, -1};
    pthread_t builder, newcomer;
    pthread_create(&builder, NULL, prepare_on_new_thread, &building);
    /* The FIFO opens for writing once the compiler has it open for reading: the build (and
     * the write lock) is in progress from then until the gate is written. */
    int fd = -1;
    for (int i = 0; fd < 0 && i < 3000; i++) {
        fd = open(gate, O_WRONLY | O_NONBLOCK);
        if (fd < 0)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK(fd >= 0, "the compiler never opened the gate");
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    pthread_create(&newcomer, NULL, prepare_on_new_thread, &fresh);
    for (int i = 0; !atomic_load(&fresh.done) && i < 500; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    CHECK(atomic_load(&fresh.done), "a new thread's hit waited behind another key's build");
    CHECK(!atomic_load(&building.done), "the held build finished early");
    jb_counters_get(&after, sizeof after);
    CHECK(after.hits - before.hits == 1 && after.misses == before.misses,
          "the new thread's lookup counted %llu hits, %llu misses",
          (unsigned long long)(after.hits - before.hits),
          (unsigned long long)(after.misses - before.misses));
    if (fd >= 0) {
        CHECK(write(fd, "\n", 1) == 1, "writing the gate");
        close(fd);
    }
    pthread_join(builder, NULL);
    pthread_join(newcomer, NULL);
    CHECK(building.status == JB_OK && fresh.status == JB_OK, "prepare failed: %d, %d",
          building.status, fresh.status);
    unlink(gate);
    rmdir(dir);
    jb_custom_kernel_free(warm);
    jb_custom_kernel_free(held);
}

static void test_bad_probe_inputs_change_nothing(void)
{
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    jb_array *out = NULL, *empty, *big, *ints, *ok;
    CHECK_OK(jb_array_arange(&empty, cpu, 0, JB_F32));
    CHECK_OK(jb_array_arange(&big, cpu, 1025, JB_F32));
    CHECK_OK(jb_array_arange(&ints, cpu, 8, JB_I32));
    CHECK_OK(jb_array_arange(&ok, cpu, 8, JB_F32));
    CHECK(jb_jit_race_probe_array(&out, empty, 1) == JB_ERR_INVALID_ARGUMENT, "n = 0");
    CHECK(jb_jit_race_probe_array(&out, big, 1) == JB_ERR_INVALID_ARGUMENT, "n = 1025");
    CHECK(jb_jit_race_probe_array(&out, ints, 1) == JB_ERR_SHAPE, "i32 input");
    CHECK(strstr(jb_last_error_message(), "f32") != NULL, "message names the dtype");
    CHECK(jb_jit_race_probe_array(&out, ok, -1) == JB_ERR_INVALID_ARGUMENT, "negative variant");
    CHECK(jb_jit_race_probe_array(&out, NULL, 1) == JB_ERR_INVALID_ARGUMENT, "NULL input");
    CHECK(jb_jit_race_probe_array(NULL, ok, 1) == JB_ERR_INVALID_ARGUMENT, "NULL out");
    CHECK(jb_rocm_jit_race_probe_array(&out, ok, 1) == JB_ERR_UNSUPPORTED, "rocm probe");
    CHECK(strstr(jb_last_error_message(), "ROCm") != NULL, "message names ROCm: %s",
          jb_last_error_message());
    CHECK(out == NULL, "no output on failure");
    jb_counters_get(&after, sizeof after);
    /* The module cache's counters: the arrays made above use device memory, which is counted. */
    CHECK(memcmp(&before, &after, offsetof(jb_counters, mem_live_bytes)) == 0,
          "counters changed on bad input");
    jb_array_free(empty);
    jb_array_free(big);
    jb_array_free(ints);
    jb_array_free(ok);
}

static void test_streams_and_early_free(void)
{
    jb_stream *mine, *other, *current;
    CHECK_OK(jb_stream_new(&mine, cpu));
    CHECK_OK(jb_stream_new(&other, cpu));
    CHECK_OK(jb_install_thread_local_default_stream(mine));
    CHECK_OK(jb_thread_local_default_stream(&current, cpu));
    CHECK(current == mine, "the installed stream is the default");
    jb_array *in, *out;
    CHECK_OK(jb_array_arange(&in, cpu, 512, JB_F32));
    CHECK_OK(jb_jit_race_probe_array(&out, in, 7));
    jb_array_free(in); /* the queued kernel still reads it */
    CHECK(probe_output_exact(out, 512), "output exact after freeing the input early");
    jb_array_free(out);
    /* Nested installs, removed out of order: the default is always one still installed. */
    CHECK_OK(jb_install_thread_local_default_stream(other));
    CHECK_OK(jb_uninstall_thread_local_default_stream(mine));
    CHECK_OK(jb_thread_local_default_stream(&current, cpu));
    CHECK(current == other, "the remaining installed stream is the default");
    CHECK_OK(jb_uninstall_thread_local_default_stream(other));
    CHECK_OK(jb_thread_local_default_stream(&current, cpu));
    CHECK(current != mine && current != other, "back to the thread's own stream");
    CHECK(jb_uninstall_thread_local_default_stream(other) == JB_ERR_INVALID_ARGUMENT,
          "uninstalling twice is an error");
    jb_stream_free(mine);
    /* Freeing a stream that is still installed here uninstalls it. */
    CHECK_OK(jb_install_thread_local_default_stream(other));
    jb_stream_free(other);
    CHECK_OK(jb_thread_local_default_stream(&current, cpu));
    CHECK(current != other, "a freed stream stayed the default");
    jb_stream_free(NULL);
    jb_array_free(NULL);
}

int main(void)
{
    CHECK(jb_removed_locks() == 0 || getenv("JB_EXPECT_RACES"), "this build removes locks");
    if (jb_device_get(&cpu, JB_DEVICE_CPU, 0) != JB_OK) {
        fprintf(stderr, "no cpu device: %s\n", jb_last_error_message());
        return 1;
    }
    test_bad_probe_inputs_change_nothing();
    test_same_kernel_first_launch();
    test_distinct_kernels_first_launch();
    test_failed_build_is_retried();
    test_configure_hook_runs_once();
    if (!(jb_removed_locks() & 4)) /* without the claim the hook's own launch recurses */
        test_configure_hook_may_call_the_library();
    /* Under memcheck the compiler helper runs as an emulated fork and the gated compile never
     * opens its FIFO (the build then waits out the compile timeout): ASan and plain runs keep it. */
    if (getenv("JB_TEST_UNDER_VALGRIND"))
        printf("test_new_thread_hits_during_build: skipped under valgrind\n");
    else
        test_new_thread_hits_during_build();
    test_streams_and_early_free();
    return check_summary("test_cache");
}
