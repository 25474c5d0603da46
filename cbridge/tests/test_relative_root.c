/*
 * The run-time loader never searches a relative toolkit folder built into the library: built
 * here with JB_CUDA_ROOT (or JB_ROCM_ROOT) "toolkit-rel", as `make CUDA=1 CUDA_PATH=toolkit-rel`
 * once baked in, it must not load a library planted at toolkit-rel/lib64/libcuda.so.1 under the
 * current folder. Compiled once per GPU vendor with the loader's source alone.
 */
#include "check.h"
#include "../src/internal.h"
#include "../src/gpu/vendor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const planted_names[] = {
    "libcuda.so.1",     "libnvrtc.so.13",   "libnvrtc.so.12",   "libnvrtc.so.11",
    "libnvrtc.so",      "libamdhip64.so",   "libamdhip64.so.7", "libamdhip64.so.6",
    "libamdhip64.so.5", "libhiprtc.so",     "libhiprtc.so.7",   "libhiprtc.so.6",
    "libhiprtc.so.5"};

int main(void)
{
    char dir[] = "/tmp/jb-test-relative-root-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    FILE *source = fopen("planted.c", "w");
    CHECK(source != NULL, "planted.c");
    fprintf(source,
            "#include <stdio.h>\n"
            "__attribute__((constructor)) static void planted(void)\n"
            "{ FILE *f = fopen(\"%s/loaded\", \"w\"); if (f) fclose(f); }\n",
            dir);
    fclose(source);
    CHECK(system("cc -shared -fPIC planted.c -o planted.so") == 0, "building planted.so");
    mkdir("toolkit-rel", 0700);
    for (const char *sub = "lib"; sub; sub = strcmp(sub, "lib") == 0 ? "lib64" : NULL) {
        char path[256];
        snprintf(path, sizeof path, "toolkit-rel/%s", sub);
        mkdir(path, 0700);
        for (size_t n = 0; n < sizeof planted_names / sizeof planted_names[0]; n++) {
            snprintf(path, sizeof path, "toolkit-rel/%s/%s", sub, planted_names[n]);
            CHECK(symlink("../../planted.so", path) == 0, "symlink %s", path);
        }
    }
    unsetenv("CUDA_PATH"), unsetenv("ROCM_PATH"), unsetenv("HIP_PATH");

    char why[1024] = "";
    int status = JB_GPU_PREFIXED(load)(why, sizeof why);
    CHECK(access("loaded", F_OK) != 0,
          "the relative toolkit folder built into the loader was searched");
    if (status != JB_OK) /* no driver here: the message says the folder was not searched */
        CHECK(strstr(why, "toolkit-rel was not searched (not an absolute path)") != NULL, "%s",
              why);
    char remove[128];
    snprintf(remove, sizeof remove, "rm -rf %s", dir);
    CHECK(system(remove) == 0, "%s", remove);
    return check_summary("test_relative_root (" JB_GPU_BACKEND_NAME ")");
}
