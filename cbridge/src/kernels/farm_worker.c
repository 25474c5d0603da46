/*
 * The compile farm's worker: the main of a program the farm (farm.c) starts. It trusts its
 * arguments no more than a manifest: each record is read from the cache folder and checked again
 * (rules, rebuilds the key it was named with on this device) before its source reaches the
 * compiler, then built the way a launch builds it (the cache folder, the host's leases, the
 * remote tier, the compiler, a store into the folder). One line per kernel on stdout:
 * "ok <index>" once its entry is in the cache folder, or "failed <index> <why>".
 */
#include "kernels.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct record_build {
    const jb_source_record *record;
    const jb_compile_options *options;
} record_build;

static int build_from_record(void *p, jb_device *dev, const char *name, jb_module **out,
                             bool *from_disk)
{
    const record_build *b = p;
    return jb__module_build(dev, name, b->record->source, b->options, b->record->entries,
                            b->record->num_entries, true, out, from_disk);
}

/* Builds one kernel from its record; JB_OK once its entry is in the cache folder. */
static int build_one(jb_device *dev, const unsigned char key[JB_SHA256_BYTES],
                     const unsigned char record_digest[JB_SHA256_BYTES])
{
    jb_source_record r;
    JB_FORWARD_IF_ERROR(jb__source_record_read(record_digest, jb__source_record_rules, &r));
    int status = jb__source_record_key_check(dev, &r, key);
    if (status == JB_OK) {
        const jb_compile_options options = {r.flags, r.num_options ? r.options : NULL,
                                            r.num_options, NULL, 0, r.target_arch};
        record_build b = {&r, &options};
        jb_module *module;
        status = jb__get_jit_module(dev, r.module, jb__fnv1a64(r.module, strlen(r.module),
                                                               JB_FNV_SEED),
                                    build_from_record, &b, &module);
    }
    if (status == JB_OK && !jb__farm_entry_stored(key))
        status = jb__fail(JB_ERR_SYSTEM, "module '%s' was built but is not in the cache folder "
                          "(a full or read-only disk?)", r.module);
    jb__source_record_free(&r);
    return status;
}

/* Writes the whole line to stdout (the farm's pipe); false when the farm is gone. */
static bool report(const char *line)
{
    size_t len = strlen(line), done = 0;
    while (done < len) {
        ssize_t n = write(STDOUT_FILENO, line + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

#ifdef JB_TEST_HOOKS
/* JITBRIDGE_TEST_FARM_FAULT=<kind>:<n>: at the worker's n-th kernel (from 0), "kill" (SIGKILL
 * before building it), "built" (SIGKILL after building it, before its report), "hang" (sleeps
 * before building it), "quiet" (exits 0 without a report), "mute" (closes its stdout, then
 * hangs) or "lie" (writes malformed reports, then exits 0); "after:<ms>": SIGALRM's default
 * action ends the worker <ms> after its first kernel starts, wherever it is then. */
static void test_fault(size_t index, bool built)
{
    const char *fault = getenv("JITBRIDGE_TEST_FARM_FAULT");
    const char *colon = fault ? strchr(fault, ':') : NULL;
    size_t kind = colon ? (size_t)(colon - fault) : 0;
    if (colon && !built && index == 0 && strncmp(fault, "after", kind) == 0) {
        unsigned long ms = strtoul(colon + 1, NULL, 10);
        struct itimerval at = {{0, 0}, {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &at, NULL);
        return;
    }
    if (!colon || strtoul(colon + 1, NULL, 10) != index)
        return;
    if (built && strncmp(fault, "built", kind) == 0)
        raise(SIGKILL);
    if (built)
        return;
    if (strncmp(fault, "kill", kind) == 0)
        raise(SIGKILL);
    if (strncmp(fault, "hang", kind) == 0)
        for (;;)
            pause();
    if (strncmp(fault, "quiet", kind) == 0)
        _exit(0);
    if (strncmp(fault, "mute", kind) == 0) {
        close(STDOUT_FILENO);
        for (;;)
            pause();
    }
    if (strncmp(fault, "lie", kind) == 0) { /* lines that are no report of a built kernel */
        report("ok x\nok 0junk\nok -0\nok 99\nfailed\nok\n");
        _exit(0);
    }
}
#else
static void test_fault(size_t index, bool built)
{
    (void)index, (void)built;
}
#endif

int jb_prewarm_build_worker_main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], JB_BUILD_WORKER_ARG) != 0) {
        fprintf(stderr, "usage: %s " JB_BUILD_WORKER_ARG " DEVICE KEY:RECORD...\n",
                argc ? argv[0] : "worker");
        return 2;
    }
    jb_device *dev = NULL;
    int device_status = jb_device_lookup(&dev, argv[2]);
    char device_error[512];
    snprintf(device_error, sizeof device_error, "%s", jb_last_error_message());
    for (int i = 3; i < argc; i++) {
        size_t index = (size_t)(i - 3);
        char line[1024], hex[2][2 * JB_SHA256_BYTES + 1] = {"", ""};
        unsigned char key[JB_SHA256_BYTES], record[JB_SHA256_BYTES];
        const char *colon = strchr(argv[i], ':');
        if (colon && (size_t)(colon - argv[i]) == 2 * JB_SHA256_BYTES) {
            memcpy(hex[0], argv[i], 2 * JB_SHA256_BYTES);
            snprintf(hex[1], sizeof hex[1], "%s", colon + 1);
        }
        test_fault(index, false);
        int status;
        if (device_status != JB_OK) {
            status = jb__fail(device_status, "%s", device_error);
        } else if (!jb__hex_digest(hex[0], key) || strlen(colon + 1) != 2 * JB_SHA256_BYTES ||
                   !jb__hex_digest(hex[1], record)) {
            status = jb__fail(JB_ERR_INVALID_ARGUMENT, "argument %d is not KEY:RECORD (64 hex "
                              "digits each)", i);
        } else {
            status = build_one(dev, key, record);
        }
        test_fault(index, true);
        if (status == JB_OK)
            snprintf(line, sizeof line, "ok %zu\n", index);
        else
            snprintf(line, sizeof line, "failed %zu %.900s\n", index, jb_last_error_message());
        for (char *c = line; *c && c[1]; c++)
            if (*c == '\n')
                *c = ' '; /* one line per kernel: a compiler's log keeps to it */
        if (!report(line))
            return 1;
    }
    return 0;
}
