/* The cpu backend's parts: the compiler (cpu_compiler.c) and its private directory
 * (private_dir.c); the backend table and the streams are in cpu_backend.c. */
#ifndef JB_CPU_H
#define JB_CPU_H

#include "../store/store.h"

/* ---- the private directory (private_dir.c) ---- */
/* A fresh name "<dir>/<stem>-<serial><ext>" in this process's private directory, which is made
 * on first use: again in a child after fork, and again when it has been removed. */
int jb__cpu_private_path(char *out, size_t len, const char *stem, const char *ext);
/* The private directory's own path (made on first use, as above): the compiler's TMPDIR. */
int jb__cpu_private_dir(char *out, size_t len);
/* Creates a fresh file (as jb__cpu_private_path names it) holding `data`; its path in `out`. */
int jb__cpu_private_write(char *out, size_t len, const char *stem, const char *ext,
                          const void *data, size_t size);

/* ---- the compiler (cpu_compiler.c) ---- */
/* The compiler's identity for the disk cache's keys. With `may_run` false (a sealed process),
 * no program starts: the version comes from the cache folder's record of it, or is unknown. */
int jb__cpu_compiler_identity(jb_device *dev, bool may_run, char *out, size_t len);
int jb__cpu_compile(jb_device *dev, const char *module_name, const char *source,
                    const jb_compile_options *options, jb_blob *out);
/* jb__cpu_compile with `flags` in place of the backend's own (the bench's compile options). */
int jb__cpu_compile_flags(char *const *flags, size_t num_flags, const char *module_name,
                          const char *source, const jb_compile_options *options, jb_blob *out);
int jb__cpu_module_load(jb_device *dev, const jb_blob *code, void **out_module);
int jb__cpu_module_function(jb_device *dev, void *module, const char *name, void **out_fn);
int jb__cpu_module_global(jb_device *dev, void *module, const char *name, void **out_ptr,
                          size_t *out_size, bool *out_writable);
void jb__cpu_module_unload(jb_device *dev, void *module);

#endif /* JB_CPU_H */
