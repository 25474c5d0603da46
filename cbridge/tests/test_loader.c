/*
 * The GPU toolkit folders named by CUDA_PATH, ROCM_PATH and HIP_PATH are searched only when
 * absolute: a relative one named a folder under the current one (a download, a checkout), and a
 * library planted there was loaded. Built with any set of backends; the cpu works either way.
 */
#include "check.h"
#include "jitbridge_sys.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const planted_names[] = {
    "libcuda.so.1",     "libnvrtc.so.13",    "libnvrtc.so.12",    "libnvrtc.so.11",
    "libnvrtc.so",      "libamdhip64.so",    "libamdhip64.so.7",  "libamdhip64.so.6",
    "libamdhip64.so.5", "libhiprtc.so",      "libhiprtc.so.7",    "libhiprtc.so.6",
    "libhiprtc.so.5"};
static const char *const variables[] = {"CUDA_PATH", "ROCM_PATH", "HIP_PATH"};

int main(void)
{
    char dir[] = "/tmp/jb-test-loader-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    /* A library that, once loaded, leaves a file behind. */
    FILE *source = fopen("planted.c", "w");
    CHECK(source != NULL, "planted.c");
    fprintf(source,
            "#include <stdio.h>\n"
            "__attribute__((constructor)) static void planted(void)\n"
            "{ FILE *f = fopen(\"%s/loaded\", \"w\"); if (f) fclose(f); }\n",
            dir);
    fclose(source);
    CHECK(system("cc -shared -fPIC planted.c -o planted.so") == 0, "building planted.so");
    for (size_t v = 0; v < sizeof variables / sizeof variables[0]; v++) {
        char path[256];
        mkdir(variables[v], 0700);
        for (const char *sub = "lib"; sub; sub = strcmp(sub, "lib") == 0 ? "lib64" : NULL) {
            snprintf(path, sizeof path, "%s/%s", variables[v], sub);
            mkdir(path, 0700);
            for (size_t n = 0; n < sizeof planted_names / sizeof planted_names[0]; n++) {
                snprintf(path, sizeof path, "%s/%s/%s", variables[v], sub, planted_names[n]);
                CHECK(symlink("../../planted.so", path) == 0, "symlink %s", path);
            }
        }
        setenv(variables[v], variables[v], 1); /* relative: under the current folder */
    }

    jb_device *device = NULL;
    CHECK_OK(jb_device_default(&device));
    CHECK(access("loaded", F_OK) != 0, "a library under a relative toolkit folder was loaded");
    CHECK_OK(jb_device_lookup(&device, "cpu"));
#if defined(JB_WITH_CUDA)
    int count = 0;
    if (jb_backend_device_count(&count, "cuda") != JB_OK) /* no driver here: says why */
        CHECK(strstr(jb_last_error_message(), "cuda: ") != NULL, "%s", jb_last_error_message());
#endif
    char remove[128];
    snprintf(remove, sizeof remove, "rm -rf %s", dir);
    CHECK(system(remove) == 0, "%s", remove);
    return check_summary("test_loader");
}
