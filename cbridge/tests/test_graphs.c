/*
 * Captured graphs on the cpu: a four-kernel step captured once and replayed, with scalars
 * updated between replays; buffers the graph uses kept alive when their arrays and kernels are
 * freed; a replay ordered after another stream's write of what it reads and after another
 * stream's read of what it writes, and a queued replay keeping the scalars it was launched with
 * (each seen through a gated kernel that holds its stream until the test opens the gate, not
 * timed); bounds-checked and initialised outputs in a graph; two threads replaying one graph;
 * and every misuse refused with its error.
 */
#include "gated_kernels.h"

#include <pthread.h>

#define N 1000

static jb_custom_kernel *scale, *add_one, *mul, *sub, *acc_add, *gated_write, *gated_copy,
    *checked, *initialised;
static jb_stream *stream_a, *stream_b;

static jb_custom_kernel *kernel(const char *name, const char *const *in, size_t num_in,
                                const char *out, const char *const *scalars,
                                const jb_dtype *scalar_dtypes, size_t num_scalars,
                                const char *body, unsigned flags, const jb_scalar *init)
{
    jb_dtype f32[] = {JB_F32, JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = num_in;
    spec.output_names = &out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.scalar_names = scalars, spec.scalar_dtypes = scalar_dtypes;
    spec.num_scalars = num_scalars;
    spec.body = body;
    spec.compile_flags = flags;
    spec.output_inits = init;
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    return k;
}

static void make_kernels(void)
{
    const char *x[] = {"x"}, *cx[] = {"c", "x"}, *s[] = {"s"}, *g[] = {"gate"};
    jb_dtype f32 = JB_F32, i64 = JB_I64;
    const char *I = "const uint64_t i = thread_index();";
    char body[512];
    snprintf(body, sizeof body, "%s out[i] = x[i] * 2.0f + s;", I);
    scale = kernel("graph_scale", x, 1, "out", s, &f32, 1, body, 0, NULL);
    snprintf(body, sizeof body, "%s out[i] = x[i] + 1.0f;", I);
    add_one = kernel("graph_add_one", x, 1, "out", NULL, NULL, 0, body, 0, NULL);
    snprintf(body, sizeof body, "%s out[i] = x[i] * s;", I);
    mul = kernel("graph_mul", x, 1, "out", s, &f32, 1, body, 0, NULL);
    snprintf(body, sizeof body, "%s out[i] = c[i] - x[i];", I);
    sub = kernel("graph_sub", cx, 2, "out", NULL, NULL, 0, body, 0, NULL);
    snprintf(body, sizeof body, "%s out[i] += s;", I);
    acc_add = kernel("graph_acc_add", NULL, 0, "out", s, &f32, 1, body, 0, NULL);
    /* Spins while the gate (one f32) holds 0, then writes 100 + i in place. */
    snprintf(body, sizeof body,
             "while (*(volatile const float *)&gate[0] == 0.0f) {}\n%s out[i] = 100.0f + i;", I);
    gated_write = kernel("graph_gated_write", g, 1, "out", NULL, NULL, 0, body, 0, NULL);
    /* Spins while the gate holds 0, then copies x. */
    const char *gx[] = {"gate", "x"};
    snprintf(body, sizeof body,
             "while (*(volatile const float *)&gate[0] == 0.0f) {}\n%s out[i] = x[i];", I);
    gated_copy = kernel("graph_gated_copy", gx, 2, "out", NULL, NULL, 0, body, 0, NULL);
    snprintf(body, sizeof body, "%s out[i] = x[i + (uint64_t)s];", I);
    checked = kernel("graph_checked", x, 1, "out", s, &i64, 1, body, JB_COMPILE_BOUNDS_CHECKS,
                     NULL);
    jb_scalar seven = {.dtype = JB_F32, .value.f32 = 7.0f};
    snprintf(body, sizeof body, "%s out[i] += x[i];", I);
    initialised = kernel("graph_initialised", x, 1, "out", NULL, NULL, 0, body, 0, &seven);
}

static jb_scalar f32(float v)
{
    return (jb_scalar){.dtype = JB_F32, .value.f32 = v};
}

/* One launch of `k` on `stream`: new output of N (or in place into `into`), N threads. */
static jb_status run(jb_array **out, jb_custom_kernel *k, jb_stream *stream,
                     jb_array *const *inputs, size_t num_inputs, const jb_scalar *scalars,
                     size_t num_scalars, jb_array *into)
{
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_array *in_place[] = {into};
    jb_launch l = JB_LAUNCH_INIT;
    l.device = dev, l.stream = stream;
    l.inputs = inputs, l.num_inputs = num_inputs;
    l.scalars = scalars, l.num_scalars = num_scalars;
    l.output_shapes = shapes, l.output_ndims = ndims;
    l.in_place = into ? in_place : NULL;
    l.shape = (jb_launch_shape){{0, 0, 0}, {0, 0, 0}, N};
    if (out)
        *out = NULL;
    return jb_custom_kernel_run(out, k, &l);
}

static jb_array *arange(void)
{
    jb_array *a = NULL;
    CHECK_OK(jb_array_arange(&a, dev, N, JB_F32));
    return a;
}

/* Whether `a` holds f(i) at every i. */
static bool holds(jb_array *a, float (*f)(int64_t, const float *), const float *params)
{
    float host[N];
    if (!a || jb_array_read(a, host, sizeof host) != JB_OK)
        return false;
    for (int64_t i = 0; i < N; i++)
        if (host[i] != f(i, params))
            return false;
    return true;
}

/* The step: ((2x + s) + 1) * t - x, for params {s, t}. */
static float step_value(int64_t i, const float *p)
{
    float x = (float)i;
    return (x * 2.0f + p[0] + 1.0f) * p[1] - x;
}

static float constant(int64_t i, const float *p)
{
    (void)i;
    return p[0];
}

static float plus(int64_t i, const float *p)
{
    return (float)i + p[0];
}

/* Captures the step on stream_a from x; *out: its final output. */
static jb_graph *capture_step(jb_array *x, jb_array **out, jb_array **tmp, float s, float t)
{
    CHECK_OK(jb_graph_begin_capture(stream_a));
    jb_scalar ss = f32(s), tt = f32(t);
    CHECK_OK(run(&tmp[0], scale, stream_a, &x, 1, &ss, 1, NULL));
    CHECK_OK(run(&tmp[1], add_one, stream_a, &tmp[0], 1, NULL, 0, NULL));
    CHECK_OK(run(&tmp[2], mul, stream_a, &tmp[1], 1, &tt, 1, NULL));
    jb_array *cx[] = {tmp[2], x};
    CHECK_OK(run(out, sub, stream_a, cx, 2, NULL, 0, NULL));
    jb_graph *graph = NULL;
    CHECK_OK(jb_graph_end_capture(&graph, stream_a));
    CHECK(jb_graph_launch_count(graph) == 4, "4 launches, not %zu", jb_graph_launch_count(graph));
    return graph;
}

static void replays_are_exact_and_take_new_scalars(void)
{
    jb_array *x = arange(), *out = NULL, *tmp[3] = {0};
    jb_graph *graph = capture_step(x, &out, tmp, 3.0f, 2.0f);
    CHECK(!jb_graph_bounds_checked(graph), "no launch of the step is bounds-checked");
    for (int step = 0; step < 20; step++) {
        float p[2] = {(float)step, step % 2 ? 0.5f : 3.0f};
        jb_scalar s = f32(p[0]), t = f32(p[1]);
        CHECK_OK(jb_graph_set_scalar(graph, 0, 0, &s));
        CHECK_OK(jb_graph_set_scalar(graph, 2, 0, &t));
        CHECK_OK(jb_graph_launch(graph, stream_a));
        CHECK(holds(out, step_value, p), "step %d: the replay's output is exact", step);
    }
    /* Also on another stream of the device, and after the arrays' own stream. */
    float p[2] = {19.0f, 0.5f};
    CHECK_OK(jb_graph_launch(graph, stream_b));
    CHECK(holds(out, step_value, p), "a replay on another stream is exact");
    jb_graph_free(graph);
    jb_array_free(out);
    for (int i = 0; i < 3; i++)
        jb_array_free(tmp[i]);
    jb_array_free(x);
}

static void freed_arrays_and_kernels_stay_alive(void)
{
    jb_array *x = arange(), *out = NULL, *tmp[3] = {0}, *last = NULL;
    jb_graph *graph = capture_step(x, &out, tmp, 1.0f, 3.0f);
    /* One more graph, of a kernel freed right after its capture. */
    const char *in[] = {"x"};
    jb_custom_kernel *own = kernel("graph_own_plus", in, 1, "out", NULL, NULL, 0,
                                   "out[thread_index()] = x[thread_index()] + 0.5f;", 0, NULL);
    CHECK_OK(jb_graph_begin_capture(stream_a));
    CHECK_OK(run(&last, own, stream_a, &x, 1, NULL, 0, NULL));
    jb_graph *own_graph = NULL;
    CHECK_OK(jb_graph_end_capture(&own_graph, stream_a));
    jb_custom_kernel_free(own);
    jb_memory_stats before;
    CHECK_OK(jb_device_memory_stats(&before, sizeof before, dev));
    /* Everything but the outputs goes: the graphs keep using x and the step's temporaries. */
    jb_array_free(x);
    for (int i = 0; i < 3; i++)
        jb_array_free(tmp[i]);
    jb_memory_stats after;
    CHECK_OK(jb_device_memory_stats(&after, sizeof after, dev));
    CHECK(after.live_bytes == before.live_bytes,
          "the graph keeps its buffers live: %llu bytes, then %llu",
          (unsigned long long)before.live_bytes, (unsigned long long)after.live_bytes);
    /* Freed buffers would go idle and serve these, which overwrite them. */
    jb_array *garbage[8];
    for (int i = 0; i < 8; i++) {
        garbage[i] = f32_filled(dev, N, -12345.0f);
        CHECK_OK(jb_array_eval(garbage[i]));
    }
    float p[2] = {1.0f, 3.0f}, half[1] = {0.5f};
    CHECK_OK(jb_graph_launch(graph, stream_a));
    CHECK_OK(jb_graph_launch(own_graph, stream_a));
    CHECK(holds(out, step_value, p), "a replay after its arrays were freed is exact");
    CHECK(holds(last, plus, half), "a replay after its kernel was freed is exact");
    for (int i = 0; i < 8; i++)
        jb_array_free(garbage[i]);
    jb_graph_free(graph);
    jb_graph_free(own_graph);
    /* The graphs were the last owners of x and the temporaries: their buffers go idle (once
     * the streams let go of the replays' holds, and of the garbage's copies). */
    CHECK_OK(jb_stream_synchronize(stream_a));
    jb_stream *own_stream = NULL;
    CHECK_OK(jb_thread_local_default_stream(&own_stream, dev));
    CHECK_OK(jb_stream_synchronize(own_stream));
    jb_memory_stats end;
    CHECK_OK(jb_device_memory_stats(&end, sizeof end, dev));
    CHECK(end.live_bytes == after.live_bytes - 4 * N * sizeof(float),
          "freeing the graphs let go of what only they kept: %llu bytes, then %llu",
          (unsigned long long)after.live_bytes, (unsigned long long)end.live_bytes);
    jb_array_free(out);
    jb_array_free(last);
}

static void a_queued_replay_keeps_its_scalars(void)
{
    jb_array *acc = f32_filled(dev, N, 0.0f);
    CHECK_OK(jb_graph_begin_capture(stream_a));
    jb_scalar s = f32(1.0f);
    CHECK_OK(run(NULL, acc_add, stream_a, NULL, 0, &s, 1, acc));
    jb_graph *graph = NULL;
    CHECK_OK(jb_graph_end_capture(&graph, stream_a));
    jb_array *gate = filled(0.0f), *held = launch(gated, gate, stream_a);
    CHECK_OK(jb_graph_launch(graph, stream_a)); /* queued behind the gate, with 1 */
    s = f32(10.0f);
    CHECK_OK(jb_graph_set_scalar(graph, 0, 0, &s));
    CHECK_OK(jb_graph_launch(graph, stream_a)); /* with 10 */
    set_gate(gate, 1.0f);
    float p[1] = {11.0f};
    CHECK(holds(acc, constant, p), "two replays add 1, then 10");
    CHECK(value_of(held) == 2.0f, "the gated kernel ran first");
    jb_graph_free(graph);
    jb_array_free(held);
    jb_array_free(gate);
    jb_array_free(acc);
}

static void a_replay_waits_for_other_streams(void)
{
    jb_array *x = arange(), *out = NULL, *tmp[3] = {0};
    jb_graph *graph = capture_step(x, &out, tmp, 0.0f, 1.0f);
    CHECK_OK(jb_graph_launch(graph, stream_a));
    CHECK_OK(jb_array_eval(out));
    /* Read after write: another stream rewrites x (100 + i) behind a gate; the replay reads it. */
    jb_array *gate = filled(0.0f);
    CHECK_OK(run(NULL, gated_write, stream_b, &gate, 1, NULL, 0, x));
    CHECK_OK(jb_graph_launch(graph, stream_a));
    set_gate(gate, 1.0f);
    float want[N];
    for (int i = 0; i < N; i++)
        want[i] = ((100.0f + (float)i) * 2.0f + 0.0f + 1.0f) * 1.0f - (100.0f + (float)i);
    float host[N];
    CHECK_OK(jb_array_read(out, host, sizeof host));
    CHECK(memcmp(host, want, sizeof host) == 0, "the replay waited for the other stream's write");
    /* Write after read: another stream copies out behind a gate; the next replay rewrites out
     * only after that copy. */
    jb_array *gate2 = filled(0.0f), *copy = NULL;
    jb_array *gx[] = {gate2, out};
    CHECK_OK(run(&copy, gated_copy, stream_b, gx, 2, NULL, 0, NULL));
    jb_scalar s = f32(1000.0f);
    CHECK_OK(jb_graph_set_scalar(graph, 0, 0, &s));
    CHECK_OK(jb_graph_launch(graph, stream_a));
    set_gate(gate2, 1.0f);
    float got[N];
    CHECK_OK(jb_array_read(copy, got, sizeof got));
    CHECK(memcmp(got, want, sizeof got) == 0, "the replay waited for the other stream's read");
    jb_graph_free(graph);
    jb_array_free(copy);
    jb_array_free(gate2);
    jb_array_free(gate);
    jb_array_free(out);
    for (int i = 0; i < 3; i++)
        jb_array_free(tmp[i]);
    jb_array_free(x);
}

static void checked_and_initialised_outputs_replay(void)
{
    jb_array *x = arange(), *y = NULL, *z = NULL;
    CHECK_OK(jb_graph_begin_capture(stream_a));
    jb_scalar off = {.dtype = JB_I64, .value.i64 = 0};
    CHECK_OK(run(&y, checked, stream_a, &x, 1, &off, 1, NULL));
    CHECK_OK(run(&z, initialised, stream_a, &y, 1, NULL, 0, NULL));
    jb_graph *graph = NULL;
    CHECK_OK(jb_graph_end_capture(&graph, stream_a));
    CHECK(!jb_graph_bounds_checked(graph), "one launch of two is bounds-checked");
    float seven[1] = {7.0f};
    for (int round = 0; round < 3; round++) {
        CHECK_OK(jb_graph_launch(graph, stream_a));
        CHECK(holds(z, plus, seven), "round %d: each replay starts the output from 7", round);
    }
    off.value.i64 = N; /* every read past the end */
    CHECK_OK(jb_graph_set_scalar(graph, 0, 0, &off));
    CHECK_OK(jb_graph_launch(graph, stream_a));
    CHECK(jb_array_eval(z) == JB_ERR_BOUNDS, "the replay's out-of-range read is reported: %s",
          jb_last_error_message());
    CHECK(jb_array_eval(y) == JB_ERR_BOUNDS, "on the checked launch's own output too");
    off.value.i64 = 0;
    CHECK_OK(jb_graph_set_scalar(graph, 0, 0, &off));
    CHECK_OK(jb_graph_launch(graph, stream_a));
    CHECK_OK(jb_array_eval(z));
    CHECK(holds(z, plus, seven), "a clean replay after it reads clean");
    jb_graph_free(graph);
    jb_array_free(z);
    jb_array_free(y);
    jb_array_free(x);
}

typedef struct replayer {
    jb_graph *graph;
    jb_array *out;
    int ok;
} replayer;

static void *replay_loop(void *arg)
{
    replayer *r = arg;
    jb_stream *stream = NULL;
    CHECK_OK(jb_stream_new(&stream, dev));
    float p[2] = {2.0f, 4.0f};
    for (int i = 0; i < 30; i++) {
        CHECK_OK(jb_graph_launch(r->graph, stream));
        CHECK_OK(jb_stream_synchronize(stream));
    }
    r->ok = holds(r->out, step_value, p);
    jb_stream_free(stream);
    return NULL;
}

static void two_threads_replay_one_graph(void)
{
    jb_array *x = arange(), *out = NULL, *tmp[3] = {0};
    jb_graph *graph = capture_step(x, &out, tmp, 2.0f, 4.0f);
    replayer r[2] = {{graph, out, 0}, {graph, out, 0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, replay_loop, &r[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    CHECK(r[0].ok && r[1].ok, "two threads' replays of one graph are exact");
    jb_graph_free(graph);
    jb_array_free(out);
    for (int i = 0; i < 3; i++)
        jb_array_free(tmp[i]);
    jb_array_free(x);
}

typedef struct intruder {
    jb_array *x;
    jb_status status;
} intruder;

static void *launch_from_another_thread(void *arg)
{
    intruder *in = arg;
    jb_array *y = NULL;
    in->status = run(&y, add_one, stream_a, &in->x, 1, NULL, 0, NULL);
    jb_array_free(y);
    jb_graph *graph = NULL;
    CHECK(jb_graph_end_capture(&graph, stream_a) == JB_ERR_INVALID_ARGUMENT && !graph,
          "another thread cannot end the capture");
    return NULL;
}

static void misuse_is_refused(void)
{
    jb_array *x = arange(), *y = NULL;
    jb_graph *graph = NULL;
    CHECK(jb_graph_end_capture(&graph, stream_a) == JB_ERR_INVALID_ARGUMENT && !graph,
          "end without begin: %s", jb_last_error_message());
    CHECK(jb_graph_begin_capture(NULL) == JB_ERR_INVALID_ARGUMENT, "NULL stream");
    CHECK_OK(jb_graph_begin_capture(stream_a));
    CHECK(jb_graph_begin_capture(stream_a) == JB_ERR_INVALID_ARGUMENT &&
              strstr(jb_last_error_message(), "nest"),
          "nested capture: %s", jb_last_error_message());
    CHECK(jb_graph_end_capture(&graph, stream_a) == JB_ERR_INVALID_ARGUMENT &&
              strstr(jb_last_error_message(), "nothing was launched"),
          "an empty capture: %s", jb_last_error_message());
    CHECK_OK(jb_graph_begin_capture(stream_a));
    intruder in = {x, JB_OK};
    pthread_t thread;
    pthread_create(&thread, NULL, launch_from_another_thread, &in);
    pthread_join(thread, NULL);
    CHECK(in.status == JB_ERR_INVALID_ARGUMENT, "a launch on a capturing stream from another "
                                                "thread is refused: %d",
          (int)in.status);
    /* What cannot be captured, refused on the capturing stream (installed as the default). */
    CHECK_OK(jb_install_thread_local_default_stream(stream_a));
    jb_array *made = NULL;
    CHECK(jb_array_arange(&made, dev, 4, JB_F32) == JB_ERR_INVALID_ARGUMENT && !made,
          "making an array: %s", jb_last_error_message());
    float host[N];
    CHECK(jb_array_read(x, host, sizeof host) == JB_ERR_INVALID_ARGUMENT, "reading one");
    CHECK(jb_stream_synchronize(stream_a) == JB_ERR_INVALID_ARGUMENT, "waiting for the stream");
    /* A launch refused for its arguments leaves the capture as it was. */
    jb_scalar wrong = {.dtype = JB_I32, .value.i32 = 1};
    CHECK(run(&y, scale, stream_a, &x, 1, &wrong, 1, NULL) == JB_ERR_SHAPE, "a bad scalar");
    jb_scalar s = f32(5.0f);
    CHECK_OK(run(&y, scale, stream_a, &x, 1, &s, 1, NULL)); /* on the default stream */
    CHECK_OK(jb_graph_end_capture(&graph, stream_a));
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream_a));
    CHECK(jb_graph_launch_count(graph) == 1, "the refused launches were not captured");
    CHECK(jb_graph_set_scalar(graph, 0, 0, &wrong) == JB_ERR_SHAPE, "a scalar of another dtype");
    CHECK(jb_graph_set_scalar(graph, 1, 0, &s) == JB_ERR_INVALID_ARGUMENT, "launch 1 of 1");
    CHECK(jb_graph_set_scalar(graph, 0, 1, &s) == JB_ERR_INVALID_ARGUMENT, "scalar 1 of 1");
    CHECK_OK(jb_graph_launch(graph, stream_a));
    float twice[N];
    CHECK_OK(jb_array_read(y, twice, sizeof twice));
    bool exact = true;
    for (int i = 0; i < N; i++)
        exact &= twice[i] == 2.0f * (float)i + 5.0f;
    CHECK(exact, "the capture's one launch replays");
    /* A replay on a capturing stream is refused; freeing a capturing stream discards it. */
    jb_stream *doomed = NULL;
    CHECK_OK(jb_stream_new(&doomed, dev));
    CHECK_OK(jb_graph_begin_capture(doomed));
    CHECK(jb_graph_launch(graph, doomed) == JB_ERR_INVALID_ARGUMENT, "a replay into a capture");
    jb_array *z = NULL;
    CHECK_OK(run(&z, add_one, doomed, &x, 1, NULL, 0, NULL));
    jb_stream_free(doomed);
    jb_array_free(z);
    jb_graph_free(graph);
    jb_array_free(y);
    jb_array_free(x);
}

int main(void)
{
    if (!gated_kernels_new("graphs")) {
        printf("test_graphs: no cpu device\n");
        return 1;
    }
    make_kernels();
    CHECK_OK(jb_stream_new(&stream_a, dev));
    CHECK_OK(jb_stream_new(&stream_b, dev));
    replays_are_exact_and_take_new_scalars();
    freed_arrays_and_kernels_stay_alive();
    a_queued_replay_keeps_its_scalars();
    a_replay_waits_for_other_streams();
    checked_and_initialised_outputs_replay();
    two_threads_replay_one_graph();
    misuse_is_refused();
    jb_stream_free(stream_b);
    jb_stream_free(stream_a);
    jb_custom_kernel *all[] = {scale,      add_one, mul,    sub, acc_add, gated_write,
                               gated_copy, checked, initialised};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        jb_custom_kernel_free(all[i]);
    gated_kernels_free();
    return check_summary("test_graphs");
}
