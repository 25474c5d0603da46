/*
 * Event states. A launch's event (an array's "ready" event, a hold's "done") is recorded lazily:
 * only when a host wait, another stream or a look at the holds needs it, since a record costs a
 * tenth of a launch. A late record (newer work queued behind the event's) also waits for that
 * newer work; after one, the stream records each event at once for JB_EAGER_HOLDS more holds
 * (reads of those are not late: nothing extends the count, so a reader that keeps overlapping
 * pays late records again each time the count runs out), and a one-off does not keep it forever.
 */
#include "exec.h"

int jb__event_state(const jb_event *event)
{
    return atomic_load_explicit(&event->state, memory_order_acquire);
}

static bool recording(int state)
{
    return state == JB_EVENT_RECORDING || state == JB_EVENT_RECORDING_WAITED;
}

/* Sleeps until the event, seen `state` (recording), is no longer recording, or a moment later:
 * the caller looks again (jb__futex_wait says why it never spins). */
static void wait_while_recording(jb_event *event, int state)
{
    if (state == JB_EVENT_RECORDING &&
        !atomic_compare_exchange_strong_explicit(&event->state, &state, JB_EVENT_RECORDING_WAITED,
                                                 memory_order_acquire, memory_order_acquire))
        return; /* it changed meanwhile */
    jb__futex_wait(&event->state, JB_EVENT_RECORDING_WAITED);
}

/* Ends a record: publishes `state` and wakes the threads that sleep on the event. */
static void end_recording(jb_event *event, int state)
{
    if (atomic_exchange_explicit(&event->state, state, memory_order_release) ==
        JB_EVENT_RECORDING_WAITED)
        jb__futex_wake_all(&event->state);
}

/* Records a pending event on its stream now: behind its work, and behind whatever was queued
 * after it. `stream_locked`: the caller holds the stream's holds mutex (a look), and leaves an
 * event that another thread is recording to that thread (which waits for that mutex). */
int jb__event_record_now(jb_event *event, bool stream_locked)
{
    int state = JB_EVENT_PENDING;
    while (!atomic_compare_exchange_weak_explicit(&event->state, &state, JB_EVENT_RECORDING,
                                                  memory_order_acquire, memory_order_acquire)) {
        if (state == JB_EVENT_RECORDED || state == JB_EVENT_DONE ||
            (recording(state) && stream_locked))
            return JB_OK;
        if (recording(state))
            wait_while_recording(event, state);
        state = JB_EVENT_PENDING;
    }
    JB_TEST_RECORD_PAUSE(event->stream);
    /* While it is recording, the stream's destruction waits for it (event_done). */
    jb_stream *stream = event->stream;
    jb_device *dev = event->device;
    if (!stream_locked) {
        pthread_mutex_lock(&stream->holds_mutex);
        if (event->hold_seq + 1 != stream->holds_next_seq ||
            stream->unheld_work_seq > event->hold_seq)
            stream->eager_until_seq = stream->holds_next_seq + JB_EAGER_HOLDS;
    }
    int status = dev->backend->event_record(dev, event->native, stream->native);
    if (!stream_locked)
        pthread_mutex_unlock(&stream->holds_mutex);
    end_recording(event, status == JB_OK ? JB_EVENT_RECORDED : JB_EVENT_PENDING);
    return status;
}

/* The event's work is done: a pending event never needs recording. Waits out a record in
 * progress, whose stream must outlive it. */
void jb__event_done(jb_event *event)
{
    int state = JB_EVENT_PENDING;
    while (!atomic_compare_exchange_weak_explicit(&event->state, &state, JB_EVENT_DONE,
                                                  memory_order_release, memory_order_acquire)) {
        if (state == JB_EVENT_RECORDED || state == JB_EVENT_DONE)
            return;
        if (recording(state))
            wait_while_recording(event, state);
        state = JB_EVENT_PENDING;
    }
}

/* In a forked child, the parent's work not seen done: its stream's worker (or driver context)
 * is the parent's, so no record or wait here would see it end, and a record in progress at the
 * fork never ends. Refused with a clear error instead of a hang. */
static int refuse_parent_work(jb_event *event)
{
    if (event->generation == atomic_load_explicit(&jb__fork_generation, memory_order_relaxed))
        return JB_OK;
    int state = jb__event_state(event);
    if (state == JB_EVENT_DONE ||
        (state == JB_EVENT_RECORDED &&
         event->device->backend->event_query(event->device, event->native) == 1))
        return JB_OK;
    return jb__fail(JB_ERR_INVALID_ARGUMENT,
                    "the array's work was queued before this process forked and was not seen "
                    "done there: a forked child cannot know when it ends (wait for arrays "
                    "before fork)");
}

int jb__event_synchronize(jb_event *event)
{
    JB_FORWARD_IF_ERROR(refuse_parent_work(event));
    JB_FORWARD_IF_ERROR(jb__event_record_now(event, false));
    if (jb__event_state(event) == JB_EVENT_DONE)
        return JB_OK;
    return event->device->backend->event_synchronize(event->device, event->native);
}

int jb__event_order_before(jb_event *event, jb_stream *stream)
{
    /* Work queued on this same stream is ordered already; only other streams need a wait. */
    if (event->stream_id == stream->id || jb__event_state(event) == JB_EVENT_DONE)
        return JB_OK;
    JB_FORWARD_IF_ERROR(refuse_parent_work(event));
    JB_FORWARD_IF_ERROR(jb__event_record_now(event, false));
    if (jb__event_state(event) == JB_EVENT_DONE)
        return JB_OK;
    return stream->device->backend->stream_wait_event(stream->device, stream->native,
                                                      event->native);
}
