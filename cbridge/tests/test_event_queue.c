/*
 * Events raised inside the event callback (a build or a sealed refusal the callback starts) are
 * never made: the callback is not entered again on its thread, so such an event could only be
 * queued and dropped at delivery, unseen but for its cost. A test point (JB_TEST_HOOKS) counts
 * the events made on each thread, and the callback says when its thread is inside.
 */
#include "../src/base/base.h"
#include "helpers.h"
#include "jitbridge_sys.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#ifndef JB_TEST_HOOKS
#error "test_event_queue needs a JB_TEST_HOOKS build of the library"
#endif

static unsigned salt;
static _Thread_local bool in_callback; /* this thread runs the test's callback now */
static atomic_int made_outside, made_inside, calls;

static void count_made(void *ctx, const char *kind)
{
    (void)ctx, (void)kind;
    atomic_fetch_add(in_callback ? &made_inside : &made_outside, 1);
}

static jb_custom_kernel *fresh_kernel(const char *name, const char *body_fmt)
{
    char body[256];
    snprintf(body, sizeof body, body_fmt, salt);
    return f32_kernel(name, body);
}

typedef struct inside {
    jb_device *dev;
    jb_custom_kernel *inner;  /* built from inside the callback (a miss) */
    jb_custom_kernel *sealed; /* its compile refused from inside the callback */
    int inner_status, sealed_status; /* -1: not yet */
} inside;

/* At the outer build's end: a build of its own, and a compile refused while sealed. */
static void build_from_inside(void *user_data, const jb_cache_event *e)
{
    inside *in = user_data;
    atomic_fetch_add(&calls, 1);
    if (e->kind != JB_CACHE_EVENT_BUILD_END || in->inner_status != -1)
        return;
    in_callback = true;
    in->inner_status = launch_on_four_ones(in->inner, in->dev);
    double ns = 0;
    jb_status sealed = jb_seal(JB_SEAL_ERROR);
    in->sealed_status = sealed == JB_OK ? jb_bench_compile_only(&ns, in->sealed, in->dev) : sealed;
    jb_seal(JB_SEAL_OFF);
    in_callback = false;
}

int main(void)
{
    alarm(getenv("JB_TEST_UNDER_VALGRIND") ? 1500 : 300); /* a deadlock fails, never hangs */
    salt = (unsigned)getpid() ^ (unsigned)time(NULL);
    jb_device *dev = test_device();
    if (!dev)
        return check_summary("test_event_queue");
    default_stream_first(dev);
    inside in = {.dev = dev,
                 .inner = fresh_kernel("queue_inner", "out[thread_index()] = %u.5f;"),
                 .sealed = fresh_kernel("queue_sealed", "out[thread_index()] = %u.75f;"),
                 .inner_status = -1,
                 .sealed_status = -1};
    jb_custom_kernel *outer = fresh_kernel("queue_outer", "out[thread_index()] = %u.25f;");
    jb__test_set_point(JB_TEST_EVENT_MADE, count_made, NULL);
    CHECK_OK(jb_set_event_callback(build_from_inside, &in));
    CHECK_OK(launch_on_four_ones(outer, dev));
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    jb__test_set_point(JB_TEST_EVENT_MADE, NULL, NULL);
    CHECK(in.inner_status == JB_OK && in.sealed_status == JB_ERR_SEALED,
          "inside the callback: the build gave %d, the sealed compile %d (want %d)",
          in.inner_status, in.sealed_status, JB_ERR_SEALED);
    /* The outer build's events: each made once, each delivered (the point is where events are
     * made, so that it would see the inner ones). */
    CHECK(atomic_load(&made_outside) >= 2 && atomic_load(&made_outside) == atomic_load(&calls),
          "%d events made outside the callback, %d delivered", atomic_load(&made_outside),
          atomic_load(&calls));
    CHECK(atomic_load(&made_inside) == 0,
          "the build and the refusal inside the callback queued %d events (never delivered)",
          atomic_load(&made_inside));
    jb_custom_kernel_free(outer);
    jb_custom_kernel_free(in.inner);
    jb_custom_kernel_free(in.sealed);
    return check_summary("test_event_queue");
}
