/*
 * A write of an array waits for the kernels on other streams that read it (write after read),
 * however many streams read it, and for no stream that did not. An array remembers a few reading
 * streams in slots; past those, a write finds the readers by the holds that keep the array's
 * buffer (array.c, holds.c). The gated kernels (tests/gated_kernels.h) hold work on a stream
 * until the test opens a gate, so what waits for what is seen, not timed.
 */
#include "gated_kernels.h"

#include <pthread.h>
#include <time.h>

#define READERS 8 /* reading streams: more than the array's slots */
#define WAIT_MS 3000 /* an eval that waits for no gated work ends long before this */

static jb_custom_kernel *gated_read;
static jb_source_module *bump;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct evaluation {
    jb_array *array;
    atomic_bool done;
    pthread_t thread;
} evaluation;

static void *evaluate(void *arg)
{
    evaluation *e = arg;
    CHECK_OK(jb_array_eval(e->array));
    atomic_store(&e->done, true);
    return NULL;
}

/* Starts an eval of `array` on a thread of its own; whether it ended within `ms`. */
static bool eval_ends_within(evaluation *e, jb_array *array, unsigned ms)
{
    e->array = array;
    atomic_init(&e->done, false);
    pthread_create(&e->thread, NULL, evaluate, e);
    for (unsigned waited = 0; waited < ms && !atomic_load(&e->done); waited += 5)
        sleep_ms(5);
    return atomic_load(&e->done);
}

/* Adds 10 to element 0 of `a` in place, on `stream`: a write. */
static void write_on(jb_array *a, jb_stream *stream)
{
    jb_arg arg = {.array = a, .written = 1};
    jb_launch_shape one = {{0, 0, 0}, {0, 0, 0}, 1};
    CHECK_OK(jb_source_module_launch(bump, stream, "bump", &arg, 1, &one));
}

static jb_array *read_gated(jb_array *a, jb_array *gate, jb_stream *stream)
{
    int64_t n = 1;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 1};
    jb_array *inputs[] = {a, gate}, *out = NULL;
    CHECK_OK(jb_custom_kernel_launch_on(&out, gated_read, stream, inputs, 2, NULL, 0, shapes, ndims,
                                        &shape));
    return out;
}

/* READERS streams read `a` and finish; each keeps its read's hold (no stream looked yet). */
static void read_on_many(jb_array *a, jb_stream **readers, int count)
{
    for (int i = 0; i < count; i++) {
        jb_array *y = launch(plus_one, a, readers[i]);
        CHECK(value_of(y) == 2.0f, "reader %d read %g, not 2", i, value_of(y));
        jb_array_free(y);
    }
}

/* Past the slots, a write waited for every stream of the device: here for a stream that never
 * read the array and runs work that ends only when the test opens its gate. */
static void test_write_ignores_streams_that_did_not_read(jb_stream **readers, jb_stream *writer)
{
    jb_stream *unrelated;
    CHECK_OK(jb_stream_new(&unrelated, dev));
    jb_array *a = filled(1.0f), *gate = filled(0.0f);
    read_on_many(a, readers, READERS);
    jb_array *busy = launch(gated, gate, unrelated);
    write_on(a, writer);
    evaluation e;
    bool ended = eval_ends_within(&e, a, WAIT_MS);
    CHECK(ended, "a write of an array read by %d streams waited for a stream that never read it "
                 "(still waiting after %d ms)",
          READERS, WAIT_MS);
    set_gate(gate, 1.0f);
    pthread_join(e.thread, NULL);
    CHECK(value_of(a) == 11.0f, "the written array holds %g, not 11", value_of(a));
    CHECK(value_of(busy) == 2.0f, "the unrelated work's output");
    jb_array_free(busy);
    jb_array_free(gate);
    jb_array_free(a);
    jb_stream_free(unrelated);
}

/* Past the slots, a write still waits for a reading stream whose read has not run yet: its
 * kernel must see the contents from before the write. */
static void test_write_waits_for_the_last_reader(jb_stream **readers, jb_stream *writer)
{
    jb_array *a = filled(1.0f), *gate = filled(0.0f);
    read_on_many(a, readers, READERS - 1);
    jb_array *late = read_gated(a, gate, readers[READERS - 1]);
    write_on(a, writer);
    evaluation e;
    bool ended = eval_ends_within(&e, a, 200);
    CHECK(!ended, "a write of an array did not wait for the reader past the slots, %d of %d, "
                  "whose read was still held",
          READERS, READERS);
    set_gate(gate, 1.0f);
    pthread_join(e.thread, NULL);
    CHECK(value_of(late) == 1.0f, "the late reader read %g, not the 1 from before the write",
          value_of(late));
    CHECK(value_of(a) == 11.0f, "the written array holds %g, not 11", value_of(a));
    jb_array_free(late);
    jb_array_free(gate);
    jb_array_free(a);
}

int main(void)
{
    if (!gated_kernels_new("readers"))
        return check_summary("test_many_readers");
    const char *in[] = {"a", "gate"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32, JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "readers_gated_read";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 2;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = "while (*(volatile const float *)&gate[0] == 0.0f) {}\n"
                "out[thread_index()] = a[0];";
    CHECK_OK(jb_custom_kernel_new(&gated_read, &spec));
    const char *entries[] = {"bump"};
    jb_source_module_spec module = JB_SOURCE_MODULE_SPEC_INIT;
    module.name = "readers_bump";
    module.cpu_source = "void bump(void **args, uint64_t threads) {\n"
                        "    (void)threads;\n"
                        "    float *a = *(float **)args[0];\n"
                        "    a[0] += 10.0f;\n"
                        "}\n";
    module.entry_names = entries, module.num_entries = 1;
    CHECK_OK(jb_source_module_new(&bump, &module));
    jb_stream *readers[READERS], *writer;
    for (int i = 0; i < READERS; i++)
        CHECK_OK(jb_stream_new(&readers[i], dev));
    CHECK_OK(jb_stream_new(&writer, dev));

    test_write_ignores_streams_that_did_not_read(readers, writer);
    test_write_waits_for_the_last_reader(readers, writer);

    for (int i = 0; i < READERS; i++)
        jb_stream_free(readers[i]);
    jb_stream_free(writer);
    jb_source_module_free(bump);
    jb_custom_kernel_free(gated_read);
    gated_kernels_free();
    return check_summary("test_many_readers");
}
