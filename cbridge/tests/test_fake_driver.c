/*
 * A cuda build meeting a broken driver: a fake libcuda.so.1 (under an absolute CUDA_PATH) whose
 * cuInit fails, whose cuDeviceGet fails for every device, or that lacks cuMemAlloc_v2. Each time
 * the cpu is still the default and works, and asking for cuda says what the driver said. Runs
 * where no real driver loads (CI); elsewhere, and in builds without cuda, it checks nothing.
 */
#include "check.h"
#include "jitbridge_sys.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* In the child: the cpu works; the cuda backend's answer goes to stdout. */
static int child(void)
{
    jb_device *device = NULL;
    CHECK_OK(jb_device_default(&device));
    CHECK(jb_device_get_kind(device) == JB_DEVICE_CPU, "the default is the cpu");
    int count = -1;
    jb_status status = jb_backend_device_count(&count, "cuda");
    printf("status %d count %d: %s\n", (int)status, count, jb_last_error_message());
    CHECK(jb_device_lookup(&device, "cuda:0") == JB_ERR_NO_DEVICE, "cuda:0 is no device");
    return check_summary("test_fake_driver child");
}

#if defined(JB_WITH_CUDA)
static const char fake_source[] =
    "typedef int R;\n"
    "#define OK(name) R name() { return 0; }\n"
    "R cuInit(unsigned f) { (void)f; return MODE == 1 ? 999 : 0; }\n"
    "R cuDeviceGetCount(int *n) { *n = 3; return 0; }\n"
    "R cuDeviceGet(int *d, int o) { *d = o; return MODE == 2 ? 999 : 0; }\n"
    "R cuGetErrorName(R r, const char **s) { (void)r; *s = \"CUDA_ERROR_FAKE\"; return 0; }\n"
    "R cuGetErrorString(R r, const char **s) { (void)r; *s = \"a fake driver\"; return 0; }\n"
    "OK(cuDeviceGetName) OK(cuDeviceTotalMem_v2) OK(cuModuleLoadData) OK(cuModuleGetFunction)\n"
    "OK(cuStreamCreate) OK(cuStreamDestroy_v2) OK(cuStreamSynchronize) OK(cuStreamWaitEvent)\n"
    "OK(cuEventCreate) OK(cuEventDestroy_v2) OK(cuEventRecord) OK(cuEventSynchronize)\n"
    "OK(cuEventQuery) OK(cuMemFree_v2) OK(cuMemcpyHtoDAsync_v2) OK(cuMemcpyDtoHAsync_v2)\n"
    "OK(cuLaunchKernel) OK(cuFuncSetAttribute) OK(cuDevicePrimaryCtxRetain) OK(cuCtxGetCurrent)\n"
    "OK(cuCtxSetCurrent) OK(cuDeviceGetAttribute)\n"
    "#if MODE != 3\nOK(cuMemAlloc_v2)\n#endif\n"
    /* An NVRTC too, for hosts without one: the driver is what is tested. */
    "OK(nvrtcCreateProgram) OK(nvrtcCompileProgram) OK(nvrtcDestroyProgram)\n"
    "OK(nvrtcGetProgramLogSize) OK(nvrtcGetProgramLog) OK(nvrtcGetErrorString)\n"
    "OK(nvrtcVersion) OK(nvrtcGetCUBIN) OK(nvrtcGetCUBINSize)\n";

static void fake_driver(const char *self, const char *dir, int mode, const char *expected)
{
    char command[2048];
    snprintf(command, sizeof command,
             "mkdir -p %s/m%d/lib64 && cd %s/m%d/lib64 && cc -shared -fPIC -w -DMODE=%d "
             "-x c %s/fake.c -o libcuda.so.1 && for m in 13 12 11; do "
             "ln -sf libcuda.so.1 libnvrtc.so.$m; done",
             dir, mode, dir, mode, mode, dir);
    CHECK(system(command) == 0, "%s", command);
    snprintf(command, sizeof command, "CUDA_PATH=%s/m%d %s child", dir, mode, self);
    FILE *out = popen(command, "r");
    char text[4096] = "";
    size_t len = out ? fread(text, 1, sizeof text - 1, out) : 0;
    text[len] = '\0';
    int status = out ? pclose(out) : -1;
    CHECK(status == 0, "mode %d: the child failed (%d): %s", mode, status, text);
    CHECK(strstr(text, "status 4 count 0") != NULL, "mode %d: %s", mode, text);
    CHECK(strstr(text, expected) != NULL, "mode %d: %s does not say %s", mode, text, expected);
}
#endif

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
#if defined(JB_WITH_CUDA)
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real) {
        dlclose(real);
        printf("test_fake_driver: a real driver loads here, so no fake can be tested\n");
        return check_summary("test_fake_driver");
    }
    char dir[] = "/tmp/jb-test-fake-driver-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[128];
    snprintf(path, sizeof path, "%s/fake.c", dir);
    FILE *source = fopen(path, "w");
    CHECK(source != NULL, "%s", path);
    fputs(fake_source, source);
    fclose(source);
    fake_driver(argv[0], dir, 1, "cuInit failed: CUDA_ERROR_FAKE (a fake driver)");
    fake_driver(argv[0], dir, 2, "cuDeviceGet failed: CUDA_ERROR_FAKE (a fake driver)");
    fake_driver(argv[0], dir, 3, "libcuda.so.1 has no cuMemAlloc_v2");
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK(system(command) == 0, "%s", command);
#else
    (void)argv;
#endif
    return check_summary("test_fake_driver");
}
