/* base/keeper.c: a thread that keeps something fresh while a holder works (a lease file's time,
 * a fleet lease's expiry), and never for a holder that is stopped. */
#ifndef JB_BASE_KEEPER_H
#define JB_BASE_KEEPER_H

#include <stddef.h>
#include <stdint.h>

/* A thread that calls tick(state) every period_ns until it is stopped: started with every
 * signal blocked (no handler of the host runs on it); a tick is skipped while the thread that
 * started it is stopped or has a stop pending (a thread that sleeps in the compiler's vfork
 * stops only once the compile ends, and the keeper would run on meanwhile), and once it has
 * ended (cancelled: it will never let go, so what it held must go stale). A tick runs with
 * the keeper's lock let go, so a stop waits for at most the one tick under way (it joins),
 * and its warnings are held: the stopper may hold a library lock while it joins the keeper. */
typedef struct jb_keeper jb_keeper;
/* Starts one with its own copy of the `size` bytes at `state`; NULL when it cannot (no memory,
 * no threads left). */
jb_keeper *jb__keeper_start(void (*tick)(void *state), const void *state, size_t size,
                            uint64_t period_ns);
/* Stops and joins it (NULL: nothing to do), warns its held warnings as the caller's own (held
 * if the caller holds) and frees it. */
void jb__keeper_stop(jb_keeper *keeper);

#endif
