/*
 * Precompiled module code (jb_module_code): the caller's bytes, or a file read under the disk
 * cache's trust rules, copied when the module is made, and the text that stands for a source in
 * the module's identity and its check against a colliding name.
 */
#include "kernels.h"

#include "../store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool jb__module_code_given(const jb_module_code *code)
{
    return code->bytes || code->path;
}

/* The file at `path`, whole, into *data and *size: only what the disk cache would read. */
static int read_trusted_file(const char *owner, const char *path, unsigned char **data,
                             size_t *size)
{
    JB_RETURN_IF(path[0] != '/', JB_ERR_INVALID_ARGUMENT,
                 "module '%s': code path '%.256s' is not absolute", owner, path);
    const char *slash = strrchr(path, '/');
    char folder[4096], resolved[4096], why[512];
    JB_RETURN_IF(slash[1] == '\0' || (size_t)(slash - path) >= sizeof folder,
                 JB_ERR_INVALID_ARGUMENT, "module '%s': code path '%.256s' names no file", owner,
                 path);
    memcpy(folder, path, (size_t)(slash - path));
    folder[slash == path ? 1 : slash - path] = '\0';
    if (slash == path)
        folder[0] = '/';
    JB_RETURN_IF(!jb__trusted_folder_path(folder, "the code path", resolved, sizeof resolved, why,
                                          sizeof why),
                 JB_ERR_INVALID_ARGUMENT, "module '%s': code file '%.256s': %s", owner, path, why);
    int dir = open(resolved, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    JB_RETURN_IF(dir < 0, JB_ERR_SYSTEM, "module '%s': cannot open folder '%.256s': %s", owner,
                 resolved, strerror(errno));
    struct stat st;
    const char *problem = NULL;
    int fd = jb__disk_open_entry(dir, slash + 1, &st, &problem);
    int err = errno;
    close(dir);
    JB_RETURN_IF(fd < 0, JB_ERR_INVALID_ARGUMENT, "module '%s': code file '%.256s' %s", owner,
                 path, problem ? problem : err == ENOENT ? "does not exist" : strerror(err));
    *data = jb__disk_read_entry(fd, &st, size);
    err = errno;
    close(fd);
    JB_RETURN_IF(!*data, err == ENOMEM ? JB_ERR_OUT_OF_MEMORY : JB_ERR_SYSTEM,
                 "module '%s': reading code file '%.256s': %s", owner, path, strerror(err));
    return JB_OK;
}

int jb__module_code_copy(const char *owner, const jb_module_code *code, jb_blob *out)
{
    memset(out, 0, sizeof *out);
    JB_RETURN_IF(code->bytes && code->path, JB_ERR_INVALID_ARGUMENT,
                 "module '%s': code has both bytes and a path", owner);
    unsigned char *read = NULL;
    size_t size = code->size;
    if (code->path)
        JB_FORWARD_IF_ERROR(read_trusted_file(owner, code->path, &read, &size));
    else
        JB_RETURN_IF(size == 0 || size > JB_DISK_ENTRY_MAX_BYTES, JB_ERR_INVALID_ARGUMENT,
                     "module '%s': code of %zu bytes: 1 byte to 64 MiB", owner, size);
    /* One NUL past the end: PTX is text that the driver reads up to a NUL. */
    unsigned char *copy = malloc(size + 1);
    if (copy) {
        memcpy(copy, read ? read : code->bytes, size);
        copy[size] = '\0';
    }
    free(read);
    JB_RETURN_IF(!copy, JB_ERR_OUT_OF_MEMORY, "no memory for module '%s''s code", owner);
    *out = (jb_blob){copy, size};
    return JB_OK;
}

char *jb__module_code_marker(const jb_blob *code)
{
    unsigned char digest[JB_SHA256_BYTES];
    jb__sha256(code->data, code->size, digest);
    char hex[2 * JB_SHA256_BYTES + 1];
    for (int i = 0; i < JB_SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    char *marker = malloc(128);
    if (marker)
        snprintf(marker, 128, "precompiled code: %zu bytes, sha256 %s", code->size, hex);
    return marker;
}
