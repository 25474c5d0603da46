/*
 * main returns while its threads keep launching (warm probes, new probes being compiled, arrays
 * freed mid-flight). The process must exit cleanly: status 0, no crash, no hang. `make test` runs
 * it 20 times.
 */
#include "jitbridge.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

static jb_device *cpu;

static void *launch_forever(void *arg)
{
    int first_variant = (int)(size_t)arg;
    jb_array *in = NULL;
    if (jb_array_arange(&in, cpu, 128, JB_F32) != JB_OK)
        return NULL;
    for (int i = 0;; i++) {
        jb_array *out = NULL;
        /* Mostly warm launches, now and then a new variant that must be compiled. */
        int variant = i % 16 == 0 ? first_variant + i : 0;
        if (jb_jit_race_probe_array(&out, in, variant) == JB_OK && i % 3 == 0)
            jb_array_eval(out);
        jb_array_free(out);
    }
    return NULL;
}

int main(void)
{
    if (jb_device_get(&cpu, JB_DEVICE_CPU, 0) != JB_OK)
        return 2;
    pthread_t threads[4];
    for (size_t t = 0; t < 4; t++)
        pthread_create(&threads[t], NULL, launch_forever, (void *)(1000000 * (t + 1)));
    struct timespec wait = {0, 60 * 1000 * 1000};
    nanosleep(&wait, NULL);
    return 0; /* with every thread still launching */
}
