/* cache/: the locked module cache, modules and their build (memory, the cache folder, bundles,
 * the compiler), the failure memory, sealing, prewarm and coverage. It calls every layer
 * below it; kernels/ calls it. */
#ifndef JB_CACHE_CACHE_H
#define JB_CACHE_CACHE_H

#include "../exec/exec.h"
#include "../store/store.h"

/* ---- prewarm (prewarm.c) and coverage (coverage.c): stored kernels, without compiling ---- */
/* The cache folder's entry filed under `digest`, read and checked: true with its key text at
 * *key (*key_bytes), inside *data, which the caller frees. */
bool jb__folder_entry_key(const unsigned char *digest, unsigned char **data,
                          const unsigned char **key, size_t *key_bytes);
/* *ours: whether a stored key text is the very key this process makes for its module on `dev`
 * (the same compiler, architecture and library ABI), so code it would load itself. An error
 * when the key cannot be made here. */
int jb__stored_key_is_ours(jb_device *dev, const unsigned char *key, size_t key_bytes,
                           bool *ours);
/* jb_prewarm (jitbridge.h), its lines naming source records that pass `rules` (the kernels
 * layer's, which defines jb_prewarm). */
int jb__prewarm(jb_prewarm_result *out, jb_device *device, const char *path,
                jb_source_record_rules rules);
/* Loads the cache folder's entry filed under `key` as jb__prewarm loads a manifest line naming
 * record `record` (NULL: none); counted in *out (added to: loaded, present, missing, ...). */
void jb__prewarm_entry(jb_prewarm_result *out, jb_device *device,
                       const unsigned char key[JB_SHA256_BYTES],
                       const unsigned char record[JB_SHA256_BYTES], jb_source_record_rules rules);


/* ---- the JIT module cache (jit_cache.c) and modules (module.c) ---- */
typedef struct jb_module jb_module;
typedef struct jb_kernel_entry jb_kernel_entry;

/* Builds the module for `name` on `dev`; called at most once per key at a time, under the
 * cache's write lock. Returns a status and sets the thread's error on failure; *from_disk says
 * the code came from the disk cache rather than the compiler. */
typedef int (*jb_module_builder)(void *ctx, jb_device *dev, const char *name, jb_module **out,
                                 bool *from_disk);

/* `name_hash` is jb__fnv1a64(name, strlen(name), JB_FNV_SEED), computed once by the caller so
 * that a warm lookup hashes nothing. */
/* Whether the module cache holds module `name` for `dev` now; builds nothing, counts nothing. */
bool jb__jit_module_cached(const jb_device *dev, const char *name);
int jb__get_jit_module(jb_device *dev, const char *name, uint64_t name_hash,
                       jb_module_builder builder, void *ctx, jb_module **out);
void jb__counters_add_configure(void);

/* Where the calling thread's latest module build and configure spent their time (module.c);
 * read by the bench. A few clock reads per build, none per launch. */
typedef struct jb_build_steps {
    uint64_t compile_ns, load_ns, get_function_ns, disk_store_ns, configure_ns;
} jb_build_steps;
extern _Thread_local jb_build_steps jb__build_steps;
/* Loads `code` (built from `source`, kept) and fills the kernel table with `kernel_names`; the
 * table never changes after. */
int jb__module_create(jb_device *dev, const jb_blob *code, const char *source,
                      const char *const *kernel_names, size_t num_kernels, jb_module **out);
#ifdef JB_TEST_HOOKS
/* While non-zero, the loader refuses every module with this status (JB_ERR_SYSTEM: an EMFILE of
 * its own; JB_ERR_LOAD: a lasting refusal), whichever tier its code came from. */
void jb__test_set_load_failure(int status);
#endif
/* JB_OK when `module` was built from `source`: a module name is a 64-bit hash of its source, so
 * a caller who controls sources could make two meet. Once per kernel object and device, never
 * per launch. */
int jb__module_check_source(const jb_module *module, const char *module_name,
                            const char *source);
/* The kernel named `name` in the module, looked up without a lock. */
jb_kernel_entry *jb__module_kernel(jb_module *module, const char *name);
/* The module's global variable `name`, through its backend's module_global. */
int jb__module_global(jb_module *module, const char *name, void **out_ptr, size_t *out_size,
                      bool *out_writable);
/* One kernel object's configured state on one device: the hook's result, stored before
 * `configured` is published. Starts zeroed. */
typedef struct jb_kernel_state {
    jb_kernel_config config; /* valid once `configured` reads true */
    atomic_bool configured;
    /* Under module.c's configure_mutex: a thread runs the hook (claimed), which thread, and the
     * fork generation it belongs to (a claim of another one is a thread this process lacks). */
    bool claimed;
    unsigned claim_generation;
    const void *claimer;
} jb_kernel_state;
/* Runs `hook` once for `state` (one thread runs it, under no lock; others wait); then returns
 * the config and the kernel's handle. */
int jb__kernel_configured_for(jb_kernel_entry *kernel, jb_kernel_state *state,
                              jb_configure_hook hook, void *user_data,
                              jb_kernel_config *out_config, void **out_fn);
/* The same with the module entry's own state, for callers without a kernel object (no hook). */
int jb__kernel_configured(jb_kernel_entry *kernel, jb_configure_hook hook, void *user_data,
                          jb_kernel_config *out_config, void **out_fn);
/* The identity of `dev`'s compiler for keys (seal.c): sealed to refuse, found without starting
 * any program (the cpu backend's version query included), or an error where it cannot be. */
int jb__compiler_identity(jb_device *dev, char *out, size_t len);
/* jb__disk_key for module `module_name` built from `source` on `dev` (its compiler's identity). */
int jb__module_disk_key(jb_device *dev, const char *module_name, const char *const *entry_names,
                        size_t num_entries, const char *source, jb_disk_key *out);
/* Builds a module from `source` (disk cache, else compiler; see module.c); a jb_module_builder
 * calls it under the cache's write lock. `use_disk_cache` false: always compile (and so does a
 * module with include folders: the key cannot hold their headers' contents). */
int jb__module_build(jb_device *dev, const char *module_name, const char *source,
                     const jb_compile_options *options, const char *const *kernel_names,
                     size_t num_kernels, bool use_disk_cache, jb_module **out, bool *from_disk);
/* What jb__module_build (and so a builder) returns when another process holds the key's lease:
 * nothing was built; the caller lets go of the cache's write lock, calls jb__lease_wait, takes
 * the lock again and looks again from the top (another thread may have built it). */
#define JB_BUILD_LEASE_BUSY (-1)

/* ---- failure memory (build_failures.c): a source the compiler rejected is not compiled again.
 * jb__module_build calls them in this order, under the cache's write lock. ---- */
/* True, with the remembered error set and *status its status, when the compiler with the same
 * identity rejected `source` for `module_name` on `dev` before. */
bool jb__build_failure_recall(jb_device *dev, const char *module_name, const char *source,
                              int *status);
/* Called before a compile: forgets a rejection left over by an earlier compile. */
void jb__build_failure_start(void);
/* After a compile: remembers its failure when the compiler rejected the source. */
void jb__build_failure_remember(jb_device *dev, const char *module_name, const char *source,
                                int status);


#endif /* JB_CACHE_CACHE_H */
