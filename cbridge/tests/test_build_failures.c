/*
 * Failure memory: a kernel the compiler rejects is compiled once, and later launches get the
 * same error without the compiler; a killed or timed-out compile is tried again; forgetting
 * compiles again. $CC is a wrapper script that counts its compiles and, while a marker file
 * exists, dies by SIGKILL (a killed compiler) or sleeps (a timeout).
 */
#include "helpers.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], log_path[300], kill_path[300], slow_path[300];

/* The real compiler's absolute path, searched in PATH as the library would. */
static bool find_cc(char *out, size_t len)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "/usr/bin:/bin");
    bool found = false;
    for (char *save = NULL, *d = strtok_r(copy, ":", &save); d && !found;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/cc", d);
        found = access(out, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* $CC: a wrapper of `cc` that notes each compile, dies by SIGKILL while the kill marker exists
 * and sleeps while the slow one does. */
static void write_wrapper(const char *cc)
{
    char script[300], markers[700];
    snprintf(script, sizeof script, "%s/cc-wrapper", dir);
    snprintf(markers, sizeof markers,
             "[ -e '%s' ] && kill -9 $$\n[ -e '%s' ] && exec /bin/sleep 30\n", kill_path,
             slow_path);
    CHECK(write_compiler_wrapper(script, cc, log_path, markers), "cannot write %s", script);
    setenv("CC", script, 1);
}

static int compiles(void)
{
    return lines_in(log_path);
}

static void touch(const char *path, bool present)
{
    if (present) {
        FILE *f = fopen(path, "w");
        if (f)
            fclose(f);
    } else {
        unlink(path);
    }
}

static jb_status launch_once(jb_device *cpu, jb_custom_kernel *k)
{
    jb_array *x = f32_filled(cpu, 4, 1.0f), *y = NULL;
    jb_status status = f32_launch(&y, k, &x, 1, 4);
    if (status == JB_OK)
        status = jb_array_eval(y);
    jb_array_free(y);
    jb_array_free(x);
    return status;
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/jb-build-failures-%d", (int)getpid());
    mkdir(dir, 0700);
    snprintf(log_path, sizeof log_path, "%s/compiles", dir);
    snprintf(kill_path, sizeof kill_path, "%s/kill", dir);
    snprintf(slow_path, sizeof slow_path, "%s/slow", dir);
    char cc[4096];
    CHECK(find_cc(cc, sizeof cc), "no cc in PATH");
    write_wrapper(cc); /* before the library reads $CC */
    jb_device *cpu = test_device();
    /* Bodies unique to this process: a disk cache entry must not stand in for a compile. */
    char tag[64], body[256];
    snprintf(tag, sizeof tag, "/* %d */", (int)getpid());

    /* A rejected source: one compile for five launches, and the same error each time. */
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] +; %s", tag);
    jb_custom_kernel *broken = f32_kernel("broken", body);
    jb_counters before, after;
    CHECK_OK(jb_counters_get(&before, sizeof before));
    int start = compiles();
    char first[4096] = "";
    for (int i = 0; i < 5; i++) {
        jb_status status = launch_once(cpu, broken);
        CHECK(status == JB_ERR_COMPILE, "launch %d: %s", i, jb_status_name(status));
        if (i == 0)
            snprintf(first, sizeof first, "%s", jb_last_error_message());
        else
            CHECK(strcmp(first, jb_last_error_message()) == 0,
                  "launch %d's error differs: %s\nvs the first: %s", i, jb_last_error_message(),
                  first);
    }
    CHECK(strstr(first, "broken.body:1") != NULL, "the compiler's log is in the error: %s", first);
    CHECK(compiles() - start == 1, "5 launches of a rejected kernel compiled %d times",
          compiles() - start);
    CHECK_OK(jb_counters_get(&after, sizeof after));
    CHECK(after.builds == before.builds, "a failed build inserted a module");
    CHECK(after.build_failures - before.build_failures == 5, "%llu build failures counted",
          (unsigned long long)(after.build_failures - before.build_failures));

    /* Another kernel object with the same source recalls it too; another source compiles. */
    jb_custom_kernel *twin = f32_kernel("broken", body);
    CHECK(launch_once(cpu, twin) == JB_ERR_COMPILE, "the twin compiled");
    CHECK(compiles() - start == 1, "the twin compiled again");
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] -; %s", tag);
    jb_custom_kernel *other = f32_kernel("broken", body);
    CHECK(launch_once(cpu, other) == JB_ERR_COMPILE, "the other source compiled");
    CHECK(compiles() - start == 2, "another source was not compiled (%d)", compiles() - start);

    /* Forgetting: the next launch compiles again, and is remembered again. */
    CHECK_OK(jb_forget_build_failures());
    CHECK(launch_once(cpu, broken) == JB_ERR_COMPILE, "the forgotten kernel compiled");
    CHECK(launch_once(cpu, broken) == JB_ERR_COMPILE, "the forgotten kernel compiled");
    CHECK(compiles() - start == 3, "after forgetting: %d compiles, not 3", compiles() - start);

    /* A killed compiler is not remembered: the next launch compiles, and succeeds. */
    snprintf(body, sizeof body, "out[thread_index()] = 2.0f * inp[thread_index()]; %s", tag);
    jb_custom_kernel *good = f32_kernel("killed_once", body);
    touch(kill_path, true);
    CHECK(launch_once(cpu, good) == JB_ERR_COMPILE, "a killed compile succeeded");
    touch(kill_path, false);
    CHECK_OK(launch_once(cpu, good));
    CHECK(compiles() - start == 5, "after a killed compile: %d compiles, not 5",
          compiles() - start);

    /* A timed-out compile is not remembered either. */
    snprintf(body, sizeof body, "out[thread_index()] = 3.0f * inp[thread_index()]; %s", tag);
    jb_custom_kernel *slow = f32_kernel("timed_out_once", body);
    touch(slow_path, true);
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "300", 1);
    CHECK(launch_once(cpu, slow) == JB_ERR_COMPILE, "a timed-out compile succeeded");
    unsetenv("JITBRIDGE_COMPILE_TIMEOUT_MS");
    touch(slow_path, false);
    CHECK_OK(launch_once(cpu, slow));
    CHECK(compiles() - start == 7, "after a timed-out compile: %d compiles, not 7",
          compiles() - start);

    jb_custom_kernel_free(broken);
    jb_custom_kernel_free(twin);
    jb_custom_kernel_free(other);
    jb_custom_kernel_free(good);
    jb_custom_kernel_free(slow);
    char command[400];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    CHECK(system(command) == 0, "cannot remove %s", dir);
    return check_summary("test_build_failures");
}
