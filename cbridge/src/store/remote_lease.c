/*
 * The fleet's lease: the hosts that share a remote tier compile each kernel once. A process that
 * holds its host's lease for a key (lease.c) and found no value in the store takes the key's
 * fleet lease, `SET jb:lease:<entry hex> <random token> NX PX <lifetime>`, before it
 * compiles; the hosts that find it held wait for the value instead of compiling.
 *
 * - A waiter waits with no lock of the library held (the module cache lets go of its write lock
 *   and calls jb__remote_lease_wait, as for the host's lease), polling every 75 ms: a remote
 *   compile takes tens of milliseconds at the least, and two small commands that often cost a
 *   store nothing. The wait ends when the value is stored (the caller then loads it as a remote
 *   hit), when the lease is gone (released after a failed compile, or expired with its dead
 *   holder: the caller then takes it and compiles), when the store fails (its breaker trips
 *   and the caller compiles) or at the deadline, the compile timeout from the key's first try
 *   (the caller compiles, counted in remote_lease_timeouts).
 * - A held lease expires 10 s after it was last renewed (or after the compile timeout, when
 *   that is shorter): a thread of the holder's renews it every third of that while the compile
 *   runs, so a holder killed at any point holds the fleet up for 10 s at most, never for the
 *   compile timeout (10 minutes by default). Not while the holding thread is stopped or has a
 *   stop pending (keeper.c's rule, as for the host's lease): a stopped holder's lease expires
 *   like a dead one's. A holder cut off from the store for longer loses its lease: at worst the
 *   kernel is compiled twice and stored twice with the same content.
 * - The holder deletes its lease once the value is stored, or once the compile failed (so the
 *   next host compiles and sees the error itself), with a script that deletes it only while it
 *   still holds this holder's token: a lease that expired and was taken by another host stays.
 * - A waiter's poll deletes what no holder leaves at a lease's name (another type than a
 *   string, or a string that never expires), in one step on the server, and takes the lease:
 *   such a key would otherwise hold every host up until its compile timeout.
 * - A read-only tier never takes a lease: it stores nothing, so no one could wait for it.
 */
#include "store.h"
#include "../base/keeper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define LEASE_PREFIX "jb:lease:"
#define POLL_NS 75000000ULL
/* How long a held lease lives unless renewed: long enough that a renewal delayed by a loaded
 * host or a slow store is not missed twice, short next to a compile timeout. */
#define LEASE_TTL_MS 10000ULL

static atomic_uint_fast64_t lease_ttl_ms = LEASE_TTL_MS;
#ifdef JB_TEST_HOOKS
void jb__test_set_remote_lease_ttl_ms(uint64_t ms)
{
    atomic_store(&lease_ttl_ms, ms ? ms : LEASE_TTL_MS);
}
#endif

/* Deletes KEYS[1] only while it holds ARGV[1]: one step on the server, so a lease that
 * expired and was taken by another host in between is never deleted. */
static const char release_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";

/* Sets KEYS[1] to expire in ARGV[2] ms only while it holds ARGV[1]. */
static const char renew_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], "
    "ARGV[2]) end return 0";

/* Whether KEYS[1] is a holder's lease: 1, else 0. A holder's is a string that expires (SET NX PX
 * and PEXPIRE); anything else there (a list, a string without expiry: another tenant's or a
 * tool's) is deleted in the same step, so it is never waited on until the compile timeout. */
static const char held_script[] =
    "local t = redis.call('TYPE', KEYS[1]).ok if t == 'none' then return 0 end "
    "if t ~= 'string' or redis.call('PTTL', KEYS[1]) < 0 then redis.call('DEL', KEYS[1]) "
    "return 0 end return 1";

static atomic_uint_fast64_t counter_waits, counter_timeouts;

/* A held lease's lifetime in ms: the TTL, or the compile timeout when that is shorter. */
static uint64_t lease_lifetime_ms(void)
{
    uint64_t ttl = atomic_load(&lease_ttl_ms), timeout = jb__child_timeout_ms();
    return ttl < timeout ? ttl : timeout;
}

/* The calling thread's build that found a key's fleet lease held, between the rounds of its
 * wait (made with the module cache's lock let go): the key's entry name and the deadline. */
static _Thread_local struct {
    bool continuing; /* the last acquire was BUSY: the next one of this key keeps the deadline */
    bool armed;      /* a wait is due */
    bool counted;    /* this build's wait is counted */
    bool absent;     /* no value was under the key: one that appears ends the wait */
    char file[64];
    uint64_t deadline_ns;
} pending;

static void lease_name(const char *file, char out[64])
{
    snprintf(out, 64, LEASE_PREFIX "%.*s", JB_DISK_ENTRY_HEX, file);
}

/* 32 hex digits no other holder draws: the random source, else the process, clock and a
 * counter (unique on the host; the token only tells holders apart). */
static void new_token(char out[33])
{
    unsigned char bytes[16];
    if (getrandom(bytes, sizeof bytes, GRND_NONBLOCK) != (ssize_t)sizeof bytes) {
        static atomic_uint_fast64_t drawn;
        uint64_t parts[2] = {jb__now_ns() ^ ((uint64_t)getpid() << 40),
                             atomic_fetch_add(&drawn, 1) ^ (uint64_t)(uintptr_t)&pending};
        memcpy(bytes, parts, sizeof bytes);
    }
    for (size_t i = 0; i < sizeof bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* ---- a holder renews its lease while it compiles ---- */

/* What the keeper renews: the lease's name and token, copied (the holder's may move). */
struct renewal {
    char name[64], token[33];
    uint64_t lifetime_ms;
};

/* Renews the lease; a warning of the store's (the breaker's) goes to the holder, whose log
 * callback may build while it holds the module cache's write lock (keeper.h). */
static void renew(void *state)
{
    const struct renewal *r = state;
    char expiry[24];
    snprintf(expiry, sizeof expiry, "%llu", (unsigned long long)r->lifetime_ms);
    const char *argv[] = {"EVAL", renew_script, "1", r->name, r->token, expiry};
    size_t lens[] = {4, strlen(renew_script), 1, strlen(r->name), strlen(r->token),
                     strlen(expiry)};
    jb_redis_reply reply;
    if (jb__remote_call("renew a lease", 6, argv, lens, &reply) == JB_OK)
        jb__redis_reply_free(&reply);
}

/* Starts the keeper that renews the held lease every third of its lifetime. Without it (no
 * memory, no threads left) the lease lives its one lifetime: a compile longer than that may be
 * done twice, never worse. */
static void keep_renewed(jb_remote_lease *lease)
{
    struct renewal r = {.lifetime_ms = lease_lifetime_ms()};
    memcpy(r.name, lease->name, sizeof r.name);
    memcpy(r.token, lease->token, sizeof r.token);
    lease->keeper = jb__keeper_start(renew, &r, sizeof r, r.lifetime_ms * 1000000ULL / 3);
}

/* ---- taking, waiting, letting go ---- */

jb_lease_outcome jb__remote_lease_acquire(const jb_disk_key *key, jb_remote_lease *out)
{
    memset(out, 0, sizeof *out);
    uint64_t now = jb__now_ns();
    if (!pending.continuing || strcmp(pending.file, key->file) != 0) {
        memset(&pending, 0, sizeof pending);
        snprintf(pending.file, sizeof pending.file, "%s", key->file);
        pending.deadline_ns = now + jb__child_timeout_ms() * 1000000ULL;
    }
    pending.continuing = pending.armed = false;
    if (!jb__remote_writable())
        return JB_LEASE_NONE; /* no tier, a read-only one, or its breaker open */
    if (now >= pending.deadline_ns) {
        atomic_fetch_add(&counter_timeouts, 1);
        return JB_LEASE_NONE;
    }
    lease_name(key->file, out->name);
    new_token(out->token);
    char expiry[24];
    snprintf(expiry, sizeof expiry, "%llu", (unsigned long long)lease_lifetime_ms());
    const char *argv[] = {"SET", out->name, out->token, "NX", "PX", expiry};
    size_t lens[] = {3, strlen(out->name), strlen(out->token), 2, 2, strlen(expiry)};
    jb_redis_reply reply;
    if (jb__remote_call("take a lease", 6, argv, lens, &reply) != JB_OK)
        return JB_LEASE_NONE; /* the store failed: compile alone, as with no tier */
    bool held = reply.type == JB_REDIS_STATUS, busy = reply.type == JB_REDIS_NIL;
    jb__redis_reply_free(&reply);
    if (held) {
        out->held = true;
        keep_renewed(out);
        return JB_LEASE_HELD;
    }
    if (!busy)
        return JB_LEASE_NONE; /* an answer SET NX never gives: not a lease to wait on */
    pending.continuing = pending.armed = true;
    /* A value that was there (and rejected) must not end the wait at once, every round. */
    pending.absent = jb__remote_last_load_missed();
    return JB_LEASE_BUSY;
}

/* A poll's answer to the command `argv`: 1 for a positive integer, 0 for another, -1 when the
 * store cannot say (it failed, or answered no integer). */
static int poll_answer(int argc, const char **argv, const size_t *lens)
{
    jb_redis_reply reply;
    if (jb__remote_call("poll a lease", argc, argv, lens, &reply) != JB_OK)
        return -1;
    int answer = reply.type == JB_REDIS_INTEGER ? reply.integer > 0 : -1;
    jb__redis_reply_free(&reply);
    return answer;
}

/* Whether the Redis key `name` exists: 1, 0, or -1 when the store cannot say. */
static int exists(const char *name)
{
    const char *argv[] = {"EXISTS", name};
    size_t lens[] = {6, strlen(name)};
    return poll_answer(2, argv, lens);
}

/* Whether the lease `name` is held by a holder: 1, 0 (none, or what stood there was removed),
 * or -1 when the store cannot say. */
static int lease_held(const char *name)
{
    const char *argv[] = {"EVAL", held_script, "1", name};
    size_t lens[] = {4, strlen(held_script), 1, strlen(name)};
    return poll_answer(4, argv, lens);
}

bool jb__remote_entry_exists(const jb_disk_key *key)
{
    char name[64];
    jb__remote_entry_name(key, name);
    return exists(name) == 1;
}

void jb__remote_lease_wait(void)
{
    if (!pending.armed)
        return;
    pending.armed = false;
    if (!pending.counted) {
        pending.counted = true;
        atomic_fetch_add(&counter_waits, 1);
    }
    char entry[64], lease[64];
    jb_disk_key key = {0};
    snprintf(key.file, sizeof key.file, "%s", pending.file);
    jb__remote_entry_name(&key, entry);
    lease_name(pending.file, lease);
    for (;;) {
        uint64_t now = jb__now_ns();
        if (now >= pending.deadline_ns)
            return;
        jb__nap_ns(pending.deadline_ns - now < POLL_NS ? pending.deadline_ns - now : POLL_NS);
        if ((pending.absent && exists(entry) != 0) || lease_held(lease) != 1)
            return; /* stored, free, or the store failed: the caller looks again */
    }
}

void jb__remote_lease_release(jb_remote_lease *lease)
{
    if (!lease->held)
        return;
    jb__keeper_stop(lease->keeper); /* its warnings held by the holder until it lets go */
    lease->keeper = NULL;
    const char *argv[] = {"EVAL", release_script, "1", lease->name, lease->token};
    size_t lens[] = {4, strlen(release_script), 1, strlen(lease->name), strlen(lease->token)};
    jb_redis_reply reply;
    if (jb__remote_call("release a lease", 5, argv, lens, &reply) == JB_OK)
        jb__redis_reply_free(&reply);
    lease->held = false; /* a release that failed leaves the lease to expire */
}

void jb__remote_lease_counters(uint64_t *waits, uint64_t *timeouts)
{
    *waits = atomic_load(&counter_waits);
    *timeouts = atomic_load(&counter_timeouts);
}

void jb__remote_lease_counters_reset(void)
{
    atomic_store(&counter_waits, 0);
    atomic_store(&counter_timeouts, 0);
}
