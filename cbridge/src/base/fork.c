/*
 * fork(): the library's pthread_atfork handlers, registered once when the library is loaded;
 * each part that holds locks installs its handler in its slot (base.h's jb_fork_slot).
 * Prepare takes every global lock, in the one order below, so that no other thread holds one at
 * the moment of fork; the parent lets go in reverse; the child, whose only thread is the forking
 * one, initializes each lock anew. The order follows how the locks nest in normal use:
 *
 *   1. the module cache's lock, as writer (waits for a build in progress), then the registry
 *      of per-thread cache state, then the failure memory (a build takes it under the cache's)
 *   2. the disk cache folder's locks (taken by a build, under 1): setup (and reattach), then
 *      state text
 *   3. per device, devices in order: the stream list, each stream's holds, the event pool, the
 *      buffer cache (a hold's release returns events and buffers)
 *   4. the cpu compiler's version query (a build asks it under 1, and it takes the private
 *      folder's), then the cpu backend's private compile folder (a build takes it under 1); the
 *      child makes its own folder and serials
 *   5. configure hooks' claims (a leaf, never held across a hook: a child takes over a claim
 *      made before the fork, whose thread it does not have, and runs the hook itself)
 *   6. the callbacks' records (callback.c; a leaf: held for a pointer and a count, never across
 *      a call, so a callback may fork or wait for a thread that forks)
 *   7. the cpu backend's list of events (a leaf: held at an event's create and destroy only);
 *      the child makes each event's mutex anew, since it reads a finished array's event and
 *      reuses pooled ones that a parent thread may have been waiting on at the fork
 *   8. the list of graphs (graph.c; a leaf, the same way): the child makes each graph's mutex
 *      anew, since it may launch a graph that a parent thread was launching at the fork
 *   9. the manifest (manifest.c; takes no lock): the child opens the file anew, so that its
 *      lock on it excludes its parent's (a lock of the open file's is shared across fork)
 *  10. the remote tier's configuration (store/remote.c; a leaf: held to copy it, never across
 *      a call to the store), then the client's list of open connections (a leaf): a child
 *      closes its copies of them all, one in use by another thread included, and uses none
 *
 * Per-event mutexes and the cpu streams' worker state are not taken: in the child, streams made
 * before the fork are not used (jb__fork_generation). Nor is a bounds record's
 * read in progress waited for: a child takes over a read its parent's thread had begun
 * (bounds.c).
 * A pthread_once in progress in another thread at fork time cannot be made safe from here.
 * Every part of the library that needs a fork handler installs it in its slot (base.h's
 * jb_fork_slot, in the order above, with JB_FORK_HANDLER) and never registers its own:
 * handlers of separate registrations run in an order set by who registered first.
 */
#include "base.h"

atomic_uint jb__fork_generation;

/* Written by the handlers' constructors while the library loads, read at fork: no lock. */
static jb_fork_handler handlers[JB_FORK_SLOTS];

void jb__fork_install(jb_fork_slot slot, jb_fork_handler handler)
{
    handlers[slot] = handler;
}

static void fork_prepare(void)
{
    for (int slot = 0; slot < JB_FORK_SLOTS; slot++)
        if (handlers[slot])
            handlers[slot](JB_FORK_PREPARE);
}

static void fork_parent(void)
{
    for (int slot = JB_FORK_SLOTS - 1; slot >= 0; slot--)
        if (handlers[slot])
            handlers[slot](JB_FORK_PARENT);
}

static void fork_child(void)
{
    atomic_fetch_add(&jb__fork_generation, 1);
    for (int slot = JB_FORK_SLOTS - 1; slot >= 0; slot--)
        if (handlers[slot])
            handlers[slot](JB_FORK_CHILD);
}

/* At load, before any thread of the library exists; kept in a static link by every handler's
 * constructor (jb__fork_install) and by the users of jb__fork_generation. */
__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
