/*
 * The search for the holds whose work is done (holds.c) when most events are not recorded
 * (lazy events): a look or a trim asks only recorded events. A gated kernel on the cpu stream
 * holds the device behind the host, so what has run is seen, not timed. cpu only: on a GPU the
 * test cannot write a running kernel's memory. Built with JB_TEST_HOOKS (the array's buffer,
 * the hold count).
 */
#include "gated_kernels.h"

#include <sched.h>
#include <stdlib.h>

/* Waits until a launch's output holds `value`: the stream ran that far (read from host memory,
 * so nothing is recorded or waited for by the library). */
static void wait_for_value(jb_array *a, float value)
{
    while (*(volatile const float *)jb__array_buffer(a)->ptr != value)
        sched_yield();
}

/* Marks a launch's output unwritten (its kernel waits behind a closed gate): a reused buffer may
 * hold the value already. */
static jb_array *not_yet(jb_array *a)
{
    *(volatile float *)jb__array_buffer(a)->ptr = -1.0f;
    return a;
}

/* A stream whose device runs a few looks behind the host: each look's guess (the hold recorded
 * at the previous look) has not fired, while holds recorded at earlier looks have. The search
 * must find those among the unrecorded holds, or the stream's holds (and their memory) grow for
 * as long as the device lags. */
static void lagging_stream(int offset)
{
    enum { SEGMENTS = 8, BEHIND = 2 };
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(1.0f);
    /* Finished holds let go by a wait: the ring starts `offset` holds after a look's place. */
    for (int i = 0; i < offset; i++)
        jb_array_free(launch(plus_one, x, stream));
    CHECK_OK(jb_stream_synchronize(stream));
    jb_array *gates[SEGMENTS], *last[SEGMENTS];
    size_t most = 0;
    for (int seg = 0; seg < SEGMENTS; seg++) {
        /* One look per segment: a gated launch, then plus_ones, JB_HOLDS_PER_LOOK holds. */
        gates[seg] = filled(0.0f);
        jb_array_free(launch(gated, gates[seg], stream));
        for (int i = 1; i < JB_HOLDS_PER_LOOK; i++) {
            jb_array *y = launch(plus_one, x, stream);
            if (i < JB_HOLDS_PER_LOOK - 1)
                jb_array_free(y);
            else
                last[seg] = not_yet(y);
        }
        size_t held = jb__test_hold_count(stream);
        most = held > most ? held : most;
        if (seg >= BEHIND) { /* the device catches up to BEHIND segments behind the host */
            set_gate(gates[seg - BEHIND], 1.0f);
            wait_for_value(last[seg - BEHIND], 2.0f);
        }
    }
    CHECK(most <= (BEHIND + 2) * JB_HOLDS_PER_LOOK,
          "offset %d: %zu holds kept by a stream whose device ran %d looks behind, not at most "
          "%d: the search missed the recorded holds that fired",
          offset, most, BEHIND + 1, (BEHIND + 2) * JB_HOLDS_PER_LOOK);
    for (int seg = 0; seg < SEGMENTS; seg++)
        set_gate(gates[seg], 1.0f);
    for (int seg = 0; seg < SEGMENTS; seg++) {
        CHECK(value_of(last[seg]) == 2.0f, "segment %d's last output", seg);
        jb_array_free(last[seg]);
        jb_array_free(gates[seg]);
    }
    jb_stream_free(stream);
    jb_array_free(x);
}

static void test_lagging_stream_lets_go_of_finished_holds(void)
{
    for (int offset = 0; offset < JB_HOLDS_PER_LOOK; offset += 9)
        lagging_stream(offset);
}

/* A trim (or a refused allocation's retry) on a busy stream lets go of the work known finished:
 * the holds up to the last one whose recorded event fired, though most events are unrecorded. */
static void test_trim_of_busy_stream(void)
{
    enum { PLUS = JB_HOLDS_PER_LOOK + JB_HOLDS_PER_LOOK / 2 };
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(1.0f), *first = filled(0.0f), *second = filled(0.0f), *last = NULL;
    jb_array_free(launch(gated, first, stream));
    for (int i = 0; i < PLUS; i++) { /* a look at the 64th hold records it; nothing fired */
        jb_array *y = launch(plus_one, x, stream);
        if (i < PLUS - 1)
            jb_array_free(y);
        else
            last = not_yet(y);
    }
    jb_array_free(launch(gated, second, stream));
    set_gate(first, 1.0f);
    wait_for_value(last, 2.0f); /* all but the second gated launch ran */
    size_t before = jb__test_hold_count(stream);
    CHECK_OK(jb_device_trim(NULL, dev));
    size_t after = jb__test_hold_count(stream);
    CHECK(after + JB_HOLDS_PER_LOOK <= before,
          "a trim of a busy stream kept %zu of %zu holds: those up to the look's recorded "
          "hold (%d) finished",
          after, before, JB_HOLDS_PER_LOOK);
    set_gate(second, 1.0f);
    CHECK(value_of(last) == 2.0f, "the last plus_one's output");
    jb_array_free(last);
    jb_stream_free(stream);
    jb_array_free(x);
    jb_array_free(first);
    jb_array_free(second);
}

/* A launch that uses the buffer the launch before it used borrows that hold's reference (holds.c);
 * when a trim lets the lender go while the borrower still runs, the borrower keeps the buffer,
 * though its array is freed: a new array gets another buffer, and the kernel reads its own. The
 * lender is the 64th hold, whose event the look records, so the trim knows it finished. */
static void test_borrower_outlives_its_lender(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(1.0f), *first = filled(0.0f), *w = filled(0.0f);
    jb_array_free(launch(gated, first, stream)); /* nothing below runs before the gate opens */
    for (int i = 0; i < JB_HOLDS_PER_LOOK - 2; i++)
        jb_array_free(launch(plus_one, x, stream));
    jb_array *lender_out = not_yet(launch(plus_one, w, stream)); /* the lender: w, 64th hold */
    jb_array *borrower_out = not_yet(launch(gated, w, stream));  /* borrows w: spins on it */
    jb_buffer *w_buffer = jb__array_buffer(w);
    jb_array_free(w); /* only the holds keep its buffer now */
    set_gate(first, 1.0f);
    wait_for_value(lender_out, 1.0f);
    CHECK_OK(jb_device_trim(NULL, dev));
    CHECK(jb__test_hold_count(stream) == 1, "%zu holds after the trim: the borrower's alone",
          jb__test_hold_count(stream));
    CHECK(atomic_load(&w_buffer->refs) == 1,
          "the borrower's buffer has %u references after its lender went",
          atomic_load(&w_buffer->refs));
    jb_array *decoy = filled(7.0f); /* takes w's buffer if the holds let it go */
    *(volatile float *)w_buffer->ptr = 1.0f; /* the borrower's gate opens */
    CHECK(value_of(borrower_out) == 2.0f, "the borrower read %g, not its own input",
          value_of(borrower_out));
    CHECK(value_of(decoy) == 7.0f, "a new array shares the borrower's buffer");
    jb_array_free(decoy);
    jb_array_free(lender_out);
    jb_array_free(borrower_out);
    jb_stream_free(stream);
    jb_array_free(x);
    jb_array_free(first);
}

int main(void)
{
    if (!gated_kernels_new("search"))
        return check_summary("test_hold_search");
    test_lagging_stream_lets_go_of_finished_holds();
    test_trim_of_busy_stream();
    test_borrower_outlives_its_lender();
    gated_kernels_free();
    return check_summary("test_hold_search");
}
