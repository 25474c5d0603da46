/*
 * Write after read across streams: a whole-source launch that writes an array in place waits for
 * the kernels on other streams that still read it, and for nothing else; a custom kernel's
 * in-place output waits for them too. On the cpu, where a kernel can wait on a host flag (a
 * "gate" passed as an i64 scalar), so a reader is held running for as long as the test wants: no
 * timing decides whether it passes.
 */
#include "jitbridge.h"
#include "helpers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define N 4096
#define OLD 1.0f
#define NEW 7.0f
#define MAX_READERS 20

static jb_device *cpu;
static jb_custom_kernel *reader, *in_place_writer;
static jb_source_module *module;

/* Spins until *gate is non-zero; a reader holds its stream while it waits. */
#define GATE_WAIT                                                                                  \
    "static void gate_wait(int64_t gate) {\n"                                                      \
    "    while (!__atomic_load_n((const int *)(intptr_t)gate, __ATOMIC_ACQUIRE))\n"                \
    "        sched_yield();\n"                                                                     \
    "}\n"

static const char module_source[] =
    "#include <sched.h>\n" GATE_WAIT
    "void gated_copy(void **args, uint64_t threads) {\n"
    "    const float *x = *(const float **)args[0]; float *y = *(float **)args[1];\n"
    "    gate_wait(*(int64_t *)args[2]);\n"
    "    for (uint64_t i = 0; i < threads; i++) y[i] = x[i];\n"
    "}\n"
    "void gated(void **args, uint64_t threads) { (void)threads; gate_wait(*(int64_t *)args[0]); }\n"
    "void fill(void **args, uint64_t threads) {\n"
    "    float *x = *(float **)args[0]; float v = *(float *)args[1];\n"
    "    for (uint64_t i = 0; i < threads; i++) x[i] = v;\n"
    "    __atomic_store_n((int *)(intptr_t)*(int64_t *)args[2], 1, __ATOMIC_RELEASE);\n"
    "}\n";

static const jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};

static jb_array *filled(float value)
{
    return f32_filled(cpu, N, value);
}

static bool all_equal(jb_array *a, float want)
{
    return f32_all_equal(a, N, want);
}

static jb_scalar gate_scalar(atomic_int *gate)
{
    return (jb_scalar){.dtype = JB_I64, .value.i64 = (int64_t)(intptr_t)gate};
}

/* A copy of x on `stream` by the custom kernel, held until *gate opens. */
static jb_array *kernel_read(jb_stream *stream, jb_array *x, atomic_int *gate)
{
    jb_array *y = NULL;
    jb_scalar g = gate_scalar(gate);
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    CHECK_OK(jb_custom_kernel_launch_on(&y, reader, stream, &x, 1, &g, 1, shapes, ndims, &shape));
    return y;
}

/* The same by a whole-source entry: x a read argument, y (made here) the written one. */
static jb_array *module_read(jb_stream *stream, jb_array *x, atomic_int *gate)
{
    jb_array *y = filled(-1.0f);
    jb_arg args[] = {{.array = x}, {.array = y, .written = 1}, {.scalar = gate_scalar(gate)}};
    CHECK_OK(jb_source_module_launch(module, stream, "gated_copy", args, 3, &shape));
    return y;
}

/* Writes NEW into x on `stream`; the kernel sets *done when it has run (no wait blocks here). */
static void write_new(jb_stream *stream, jb_array *x, atomic_int *done)
{
    jb_arg args[] = {{.array = x, .written = 1},
                     {.scalar = {.dtype = JB_F32, .value.f32 = NEW}},
                     {.scalar = gate_scalar(done)}};
    CHECK_OK(jb_source_module_launch(module, stream, "fill", args, 3, &shape));
}

/* The same write by a custom kernel's in-place output. */
static void write_new_in_place(jb_stream *stream, jb_array *x, atomic_int *done)
{
    jb_scalar scalars[] = {{.dtype = JB_F32, .value.f32 = NEW}, gate_scalar(done)};
    jb_array *in_place[] = {x};
    jb_launch l = JB_LAUNCH_INIT;
    l.stream = stream, l.scalars = scalars, l.num_scalars = 2, l.in_place = in_place;
    l.shape = shape;
    CHECK_OK(jb_custom_kernel_run(NULL, in_place_writer, &l));
}

static bool done_within(atomic_int *done, int ms)
{
    for (int i = 0; i < ms && !atomic_load(done); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return atomic_load(done);
}

static jb_stream *new_stream(void)
{
    jb_stream *s = NULL;
    CHECK_OK(jb_stream_new(&s, cpu));
    return s;
}

/* One reader on stream A, the write on stream B; x made on A itself (the read follows its
 * producer on one stream) or on a third stream P. The write must not pass the held reader. */
static void one_reader(bool by_module, bool made_on_reader_stream, bool write_in_place)
{
    jb_stream *a = new_stream(), *b = new_stream(), *p = new_stream();
    CHECK_OK(jb_install_thread_local_default_stream(made_on_reader_stream ? a : p));
    jb_array *x = filled(OLD);
    CHECK_OK(jb_uninstall_thread_local_default_stream(made_on_reader_stream ? a : p));
    atomic_int gate = 0;
    jb_array *y = by_module ? module_read(a, x, &gate) : kernel_read(a, x, &gate);
    atomic_int written = 0;
    (write_in_place ? write_new_in_place : write_new)(b, x, &written);
    /* Done soon without the wait for the reader (1 s: a loaded machine); never with it. */
    bool passed = done_within(&written, 1000);
    atomic_store(&gate, 1);
    CHECK(!passed, "%s reader, x made on %s: the %s write on another stream ran while the reader "
          "still read x", by_module ? "module" : "kernel", made_on_reader_stream ? "A" : "P",
          write_in_place ? "in-place kernel" : "module");
    CHECK(all_equal(y, OLD), "%s reader, x made on %s: the reader saw the later write",
          by_module ? "module" : "kernel", made_on_reader_stream ? "A" : "P");
    CHECK(all_equal(x, NEW), "the write");
    jb_array_free(y);
    jb_array_free(x);
    jb_stream_free(a), jb_stream_free(b), jb_stream_free(p);
}

/* n readers on n streams, each held by its own gate; the write waits for every one of them:
 * each round keeps a different reader held last (the first and then every `step`-th). */
static void several_readers(int n, int step)
{
    for (int last = 0; last < n; last += step) {
        jb_stream *streams[MAX_READERS], *b = new_stream();
        atomic_int gates[MAX_READERS];
        jb_array *ys[MAX_READERS];
        jb_array *x = filled(OLD);
        for (int i = 0; i < n; i++) {
            streams[i] = new_stream();
            atomic_init(&gates[i], 0);
            ys[i] = i % 2 ? module_read(streams[i], x, &gates[i])
                          : kernel_read(streams[i], x, &gates[i]);
        }
        atomic_int written = 0;
        write_new(b, x, &written);
        for (int i = 0; i < n; i++)
            if (i != last)
                atomic_store(&gates[i], 1);
        for (int i = 0; i < n; i++)
            if (i != last)
                CHECK_OK(jb_array_eval(ys[i]));
        bool passed = done_within(&written, 200);
        atomic_store(&gates[last], 1);
        CHECK(!passed, "%d readers: the write passed reader %d, still held", n, last);
        for (int i = 0; i < n; i++) {
            CHECK(all_equal(ys[i], OLD), "%d readers, %d held last: reader %d saw the write", n,
                  last, i);
            jb_array_free(ys[i]);
            jb_stream_free(streams[i]);
        }
        CHECK(all_equal(x, NEW), "the write");
        jb_array_free(x);
        jb_stream_free(b);
    }
}

/* The write waits for readers only: not for other work on the stream x was made on, nor for
 * reads on its own stream, nor for streams that read x before an earlier write. The other work
 * reads an array of its own, so it is a hold that a wrong wait (a stream's newest) would meet. */
static void no_wait_for_others(void)
{
    jb_stream *a = new_stream(), *b = new_stream(), *c = new_stream();
    CHECK_OK(jb_install_thread_local_default_stream(a));
    jb_array *x = filled(OLD);
    CHECK_OK(jb_uninstall_thread_local_default_stream(a));
    jb_array *other = filled(OLD);
    atomic_int gate = 0, open = 1;
    jb_array *on_c = kernel_read(c, x, &open); /* read and done before the first write */
    CHECK_OK(jb_array_eval(on_c));
    jb_array *held_on_a = kernel_read(a, other, &gate); /* not a read of x */
    atomic_int first = 0;
    write_new(b, x, &first);
    bool first_passed = done_within(&first, 5000);
    jb_array *held_on_c = kernel_read(c, other, &gate); /* c read x before the first write */
    jb_array *on_b = kernel_read(b, x, &open);
    atomic_int written = 0;
    write_new(b, x, &written);
    bool passed = done_within(&written, 5000);
    atomic_store(&gate, 1);
    CHECK(first_passed, "the write waited for unrelated work on the stream x was made on");
    CHECK(passed, "the write waited for a stream that read x before an earlier write");
    CHECK(all_equal(on_b, NEW) && all_equal(x, NEW), "a read on the writer's own stream");
    CHECK(all_equal(held_on_a, OLD) && all_equal(held_on_c, OLD), "the unrelated reads");
    jb_array_free(held_on_c);
    jb_array_free(held_on_a);
    jb_array_free(on_b);
    jb_array_free(on_c);
    jb_array_free(other);
    jb_array_free(x);
    jb_stream_free(a), jb_stream_free(b), jb_stream_free(c);
}

/* A reader's stream freed by its owner on another thread while the reader still runs: the
 * write still waits for it. */
typedef struct free_later {
    jb_stream *stream;
    atomic_bool started;
} free_later;

static void *free_stream(void *arg)
{
    free_later *f = arg;
    atomic_store(&f->started, true);
    jb_stream_free(f->stream); /* blocks until the held reader is done */
    return NULL;
}

static void reader_stream_freed(void)
{
    jb_stream *b = new_stream();
    free_later f = {.stream = new_stream()};
    atomic_init(&f.started, false);
    jb_array *x = filled(OLD);
    atomic_int gate = 0;
    jb_array *y = kernel_read(f.stream, x, &gate);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_stream, &f) == 0, "pthread_create");
    while (!atomic_load(&f.started))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    nanosleep(&(struct timespec){0, 50000000}, NULL); /* inside jb_stream_free, most likely */
    atomic_int written = 0;
    write_new(b, x, &written);
    bool passed = done_within(&written, 200);
    atomic_store(&gate, 1);
    pthread_join(t, NULL);
    CHECK(!passed && all_equal(y, OLD), "the write passed a reader whose stream is being freed");
    jb_array_free(y);
    jb_array_free(x);
    jb_stream_free(b);
}

int main(void)
{
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    const char *in[] = {"x"}, *out[] = {"y"}, *scalars[] = {"gate"};
    jb_dtype f32[] = {JB_F32}, i64[] = {JB_I64};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "war_reader", spec.header = "#include <sched.h>\n" GATE_WAIT;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.scalar_names = scalars, spec.scalar_dtypes = i64, spec.num_scalars = 1;
    spec.body = "if (thread_index() == 0) gate_wait(gate); y[thread_index()] = x[thread_index()];";
    CHECK_OK(jb_custom_kernel_new(&reader, &spec));
    const char *writer_scalars[] = {"v", "done"};
    jb_dtype writer_dtypes[] = {JB_F32, JB_I64};
    spec.name = "war_in_place_writer", spec.header = NULL;
    spec.input_names = NULL, spec.input_dtypes = NULL, spec.num_inputs = 0;
    spec.scalar_names = writer_scalars, spec.scalar_dtypes = writer_dtypes, spec.num_scalars = 2;
    spec.body = "y[thread_index()] = v;\n"
                "if (thread_index() == 0)\n"
                "    __atomic_store_n((int *)(intptr_t)done, 1, __ATOMIC_RELEASE);";
    CHECK_OK(jb_custom_kernel_new(&in_place_writer, &spec));
    const char *entries[] = {"gated_copy", "gated", "fill"};
    jb_source_module_spec ms = JB_SOURCE_MODULE_SPEC_INIT;
    ms.name = "war_module", ms.cpu_source = module_source;
    ms.entry_names = entries, ms.num_entries = 3;
    CHECK_OK(jb_source_module_new(&module, &ms));

    one_reader(false, true, false);
    one_reader(false, false, false);
    one_reader(true, true, false);
    one_reader(true, false, false);
    one_reader(false, false, true);
    one_reader(true, true, true);
    several_readers(2, 1);
    several_readers(6, 1);            /* more than an array's reader slots */
    several_readers(MAX_READERS, 19); /* more streams than a write's wait list holds unallocated */
    no_wait_for_others();
    reader_stream_freed();

    jb_source_module_free(module);
    jb_custom_kernel_free(in_place_writer);
    jb_custom_kernel_free(reader);
    return check_summary("test_stream_order");
}
