/*
 * libFuzzer target: the custom-kernel source generator and name validation. The input is split
 * at NUL bytes into a kernel name, an input name, an output name, a body and a header. Whatever
 * it holds, jb_custom_kernel_new must return a status without crashing, and when it accepts the
 * spec every name must be a plain identifier and the generated source must hold the body.
 */
#include "jitbridge.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int is_identifier(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    const char *parts[5] = {"", "", "", "", ""};
    size_t part = 0, start = 0;
    for (size_t i = 0; i <= size && part < 5; i++)
        if (i == size || copy[i] == '\0') {
            parts[part++] = copy + start;
            start = i + 1;
        }
    const char *inputs[] = {parts[1]}, *outputs[] = {parts[2]};
    jb_dtype dtypes[] = {size % 2 ? JB_F32 : JB_I32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = parts[0],
                           .input_names = inputs,
                           .input_dtypes = dtypes,
                           .num_inputs = 1,
                           .output_names = outputs,
                           .output_dtypes = dtypes,
                           .num_outputs = 1,
                           .body = parts[3],
                           .header = part > 4 ? parts[4] : NULL};
    jb_custom_kernel *kernel = NULL;
    int status = jb_custom_kernel_new(&kernel, &spec);
    if (status == JB_OK) {
        if (!is_identifier(parts[0]) || !is_identifier(parts[1]) || !is_identifier(parts[2]))
            abort(); /* a name that is no identifier reached the source */
        const char *name = jb_custom_kernel_module_name(kernel);
        if (strncmp(name, parts[0], strlen(parts[0])) != 0)
            abort();
        if (!strstr(jb_custom_kernel_source(kernel, "cpu"), parts[3]) ||
            !strstr(jb_custom_kernel_source(kernel, "cuda"), parts[3]))
            abort();
    } else if (kernel != NULL || jb_last_error_message()[0] == '\0') {
        abort(); /* a failure must leave NULL and a message */
    }
    jb_custom_kernel_free(kernel);
    free(copy);
    return 0;
}
