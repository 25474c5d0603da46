/*
 * Modules: a loaded code object and its kernel table. The table is filled when the module is
 * built and never changes, so looking a kernel up takes no lock. Each kernel's one-time
 * configure hook runs once: one thread claims the kernel state and runs the hook, the others
 * wait for it, and its results are stored before the "configured" flag is published (the other
 * order lets a thread read an unset block size). The configured state belongs to the kernel
 * object on a device, not to the module: two kernel objects with one source share a module but
 * each runs its own hook.
 * The hook runs under no lock: a hook may fork, and fork's handlers take configure_mutex (held
 * only to claim, publish and raise a function's shared-memory limit). A claim made before a
 * fork (another fork generation) belongs to a thread the child does not have: the child's first
 * launch claims it again and runs the hook itself.
 * Modules are never freed: the cache keeps them for the life of the process.
 */
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct jb_kernel_entry {
    jb_module *module;
    char *name;
    void *fn;
    jb_kernel_state state;  /* for callers without a kernel object of their own */
    uint32_t shared_limit; /* the largest any kernel on it asked for (under configure_mutex) */
};

struct jb_module {
    jb_device *device;
    void *native;
    char *source; /* what it was built from: module names are a 64-bit hash of it */
    size_t num_kernels;
    jb_kernel_entry kernels[];
};

_Thread_local jb_build_steps jb__build_steps;

#ifdef JB_TEST_HOOKS
static atomic_int test_load_failure;
void jb__test_set_load_failure(int status)
{
    atomic_store(&test_load_failure, status);
}
#endif

static int module_load(jb_device *dev, const jb_blob *code, void **native)
{
#ifdef JB_TEST_HOOKS
    int injected = atomic_load(&test_load_failure);
    if (injected)
        return jb__fail(injected, "test hook: the loader refused the module (%s)",
                        injected == JB_ERR_LOAD ? "for good" : "for now: Too many open files");
#endif
    return dev->backend->module_load(dev, code, native);
}

int jb__module_create(jb_device *dev, const jb_blob *code, const char *source,
                      const char *const *kernel_names, size_t num_kernels, jb_module **out)
{
    size_t bytes;
    jb_module *module = jb__mul_size(num_kernels, sizeof(jb_kernel_entry), &bytes) &&
                                jb__add_size(bytes, sizeof *module, &bytes)
                            ? calloc(1, bytes)
                            : NULL;
    char *source_copy = jb__strdup(source);
    if (!module || !source_copy) {
        free(module);
        free(source_copy);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a module");
    }
    module->source = source_copy;
    module->device = dev;
    module->num_kernels = num_kernels;
    uint64_t start = jb__now_ns();
    int status = module_load(dev, code, &module->native);
    uint64_t loaded = jb__now_ns();
    for (size_t i = 0; status == JB_OK && i < num_kernels; i++) {
        jb_kernel_entry *kernel = &module->kernels[i];
        kernel->module = module;
        kernel->name = jb__strdup(kernel_names[i]);
        if (!kernel->name)
            status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a kernel name");
        else
            status = dev->backend->module_function(dev, module->native, kernel->name, &kernel->fn);
    }
    jb__build_steps.load_ns = loaded - start;
    jb__build_steps.get_function_ns = jb__now_ns() - loaded;
    if (status != JB_OK) {
        /* Nothing is left behind: a native module whose entries did not all resolve was never
         * published, so no thread can be in it (every failed launch of it would keep one). */
        if (module->native)
            dev->backend->module_unload(dev, module->native);
        for (size_t i = 0; i < num_kernels; i++)
            free(module->kernels[i].name);
        free(module->source);
        free(module);
        return status;
    }
    *out = module;
    return JB_OK;
}

int jb__module_check_source(const jb_module *module, const char *module_name,
                            const char *source)
{
    JB_RETURN_IF(strcmp(module->source, source) != 0, JB_ERR_INVALID_ARGUMENT,
                 "module '%s' holds code built from another source: two sources met in one "
                 "64-bit name hash; rename one of the kernels (nothing was launched)",
                 module_name);
    return JB_OK;
}

jb_kernel_entry *jb__module_kernel(jb_module *module, const char *name)
{
    for (size_t i = 0; i < module->num_kernels; i++)
        if (strcmp(module->kernels[i].name, name) == 0)
            return &module->kernels[i];
    return NULL;
}

int jb__module_global(jb_module *module, const char *name, void **out_ptr, size_t *out_size,
                      bool *out_writable)
{
    jb_device *dev = module->device;
    return dev->backend->module_global(dev, module->native, name, out_ptr, out_size,
                                       out_writable);
}

/* Claims, publishes, and a function's shared-memory limit; never held across a hook. */
static pthread_mutex_t configure_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t configure_done = PTHREAD_COND_INITIALIZER;

static void configure_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&configure_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&configure_mutex);
    } else {
        pthread_mutex_init(&configure_mutex, NULL);
        pthread_cond_init(&configure_done, NULL);
    }
}
JB_FORK_HANDLER(JB_FORK_CONFIGURE, configure_fork)

/* Runs the hook and stores what it says: JB_OK with the kernel state published, or the
 * failure. Called by the thread that claimed the state, with no lock held. */
static int run_hook(jb_kernel_entry *kernel, jb_kernel_state *state, jb_configure_hook hook,
                    void *user_data)
{
    jb_module *module = kernel->module;
    uint64_t start = jb__now_ns();
    jb_kernel_config config = {0, 0};
    int status = JB_OK;
    if (hook && hook(user_data, module->device, &config) != 0)
        status = jb__fail(JB_ERR_LAUNCH, "the configure hook of kernel '%s' failed",
                          kernel->name);
    pthread_mutex_lock(&configure_mutex);
    /* The limit is the function's, shared by every kernel object on it: only raise it. */
    if (status == JB_OK && config.shared_memory_bytes > kernel->shared_limit &&
        module->device->backend->kernel_set_shared_limit &&
        (status = module->device->backend->kernel_set_shared_limit(
             module->device, kernel->fn, config.shared_memory_bytes)) == JB_OK)
        kernel->shared_limit = config.shared_memory_bytes;
    if (status == JB_OK) {
        state->config = config;
        jb__counters_add_configure();
        jb__build_steps.configure_ns = jb__now_ns() - start;
        atomic_store_explicit(&state->configured, true, memory_order_release);
    }
    state->claimed = false;
    pthread_cond_broadcast(&configure_done);
    pthread_mutex_unlock(&configure_mutex);
    return status;
}

#ifdef JB_REMOVE_LOCK_CONFIGURE
/* Test-only: no claim, so every thread that finds the kernel unconfigured runs the hook. */
static int configure_once(jb_kernel_entry *kernel, jb_kernel_state *state,
                          jb_configure_hook hook, void *user_data)
{
    return run_hook(kernel, state, hook, user_data);
}
#else
static _Thread_local char configuring_thread; /* its address names the thread */

static int configure_once(jb_kernel_entry *kernel, jb_kernel_state *state,
                          jb_configure_hook hook, void *user_data)
{
    unsigned generation = atomic_load(&jb__fork_generation);
    pthread_mutex_lock(&configure_mutex);
    /* Wait while another thread of this process runs the hook; a claim of another generation
     * was made before a fork, by a thread this process does not have. */
    bool claimed_here = false;
    while (!atomic_load_explicit(&state->configured, memory_order_relaxed) && state->claimed &&
           state->claim_generation == generation &&
           !(claimed_here = state->claimer == &configuring_thread))
        pthread_cond_wait(&configure_done, &configure_mutex);
    bool done = atomic_load_explicit(&state->configured, memory_order_relaxed);
    if (!done && !claimed_here) {
        state->claimed = true;
        state->claim_generation = generation;
        state->claimer = &configuring_thread;
    }
    pthread_mutex_unlock(&configure_mutex);
    if (done)
        return JB_OK;
    JB_RETURN_IF(claimed_here, JB_ERR_LAUNCH,
                 "the configure hook of kernel '%s' launched the kernel it configures: it "
                 "would wait for itself (nothing was launched)",
                 kernel->name);
    return run_hook(kernel, state, hook, user_data);
}
#endif

int jb__kernel_configured_for(jb_kernel_entry *kernel, jb_kernel_state *state,
                              jb_configure_hook hook, void *user_data,
                              jb_kernel_config *out_config, void **out_fn)
{
    if (!atomic_load_explicit(&state->configured, memory_order_acquire))
        JB_FORWARD_IF_ERROR(configure_once(kernel, state, hook, user_data));
    *out_config = state->config;
    *out_fn = kernel->fn;
    return JB_OK;
}

int jb__kernel_configured(jb_kernel_entry *kernel, jb_configure_hook hook, void *user_data,
                          jb_kernel_config *out_config, void **out_fn)
{
    return jb__kernel_configured_for(kernel, &kernel->state, hook, user_data, out_config,
                                     out_fn);
}

/* $JITBRIDGE_SAVE_SOURCE=DIR: every source the library compiles is written to
 * DIR/<module name>.c (cpu) or .cu (GPUs), for reading and profiling. True with `path` set once
 * the file is written; a failure is a warning, never an error. */
static bool save_source(jb_device *dev, const char *module_name, const char *source, char *path,
                        size_t path_len)
{
    const char *dir = secure_getenv("JITBRIDGE_SAVE_SOURCE"); /* never a setuid caller's */
    if (!dir || !*dir)
        return false;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        jb__warn("JITBRIDGE_SAVE_SOURCE: cannot create %s: %s", dir, strerror(errno));
        return false;
    }
    int n = snprintf(path, path_len, "%s/%s.%s", dir, module_name,
                     dev->backend->dialect == JB_DIALECT_C ? "c" : "cu");
    if (n < 0 || (size_t)n >= path_len)
        return false;
    /* O_NONBLOCK: a FIFO there fails at once (no reader) instead of blocking under the lock. */
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st;
    bool regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (fd >= 0 && !regular)
        errno = EINVAL; /* a FIFO with a reader, a device: never written to */
    bool written = regular && ftruncate(fd, 0) == 0 && jb__write_all(fd, source, strlen(source));
    if (!written)
        jb__warn("JITBRIDGE_SAVE_SOURCE: cannot write %s (not a regular file?): %s", path,
                 strerror(errno));
    if (fd >= 0)
        close(fd);
    return written;
}

/* A module from the disk cache entry of `key`: true when one loaded. An entry the loader refuses
 * for good (JB_ERR_LOAD) is counted and reported as refused; the compile that follows replaces
 * it. A refusal for now (the loader's EMFILE or ENOMEM, a driver out of memory) is no verdict on
 * the entry: a warning and a plain miss. */
static bool load_from_disk(jb_device *dev, const jb_disk_key *key, const char *module_name,
                           const char *source, const char *const *kernel_names,
                           size_t num_kernels, jb_module **out)
{
    jb_blob code = {0};
    uint64_t start = jb__now_ns();
    if (!jb__disk_load(key, &code))
        return false;
    int status = jb__module_create(dev, &code, source, kernel_names, num_kernels, out);
    free(code.data);
    if (status == JB_OK) {
        jb__disk_accept();
        jb__event_raise(JB_CACHE_EVENT_DISK_HIT, jb__now_ns() - start, JB_OK, NULL);
        return true;
    }
    if (status != JB_ERR_LOAD) {
        jb__warn("the disk cache entry %s of module '%s' could not be loaded for now (%s); "
                 "compiling it",
                 key->file, module_name, jb_last_error_message());
        return false;
    }
    /* Compiled afresh next, once (a failure then is an error), and stored over it: never removed
     * first, since the refusal may be the loader's own moment of EMFILE or a full TMPDIR. */
    jb__warn("the disk cache entry %s of module '%s' was refused by the loader (%s); compiling "
             "it again",
             key->file, module_name, jb_last_error_message());
    jb__event_raise(JB_CACHE_EVENT_ENTRY_EVICTED, 0, status, jb_last_error_message());
    jb__disk_reject(key);
    return false;
}

/* A module from the first bundle that holds `key`: true when one loaded. A payload the loader
 * refuses for good (JB_ERR_LOAD) is skipped from then on (a bundle is read-only), and the next
 * bundle is tried. A refusal for now (the loader's EMFILE or ENOMEM, a driver out of memory) is
 * no verdict on the payload: it stays, and this build compiles. */
static bool load_from_bundles(jb_device *dev, const jb_disk_key *key, const char *module_name,
                              const char *source, const char *const *kernel_names,
                              size_t num_kernels, jb_module **out)
{
    jb_blob code = {0};
    jb_bundle_ref ref;
    uint64_t start = jb__now_ns();
    while (jb__bundle_load(key, &code, &ref)) {
        int status = jb__module_create(dev, &code, source, kernel_names, num_kernels, out);
        free(code.data);
        if (status == JB_OK) {
            jb__bundle_accept();
            jb__event_raise(JB_CACHE_EVENT_BUNDLE_HIT, jb__now_ns() - start, JB_OK, NULL);
            return true;
        }
        if (status != JB_ERR_LOAD) {
            jb__warn("a bundle's code of module '%s' could not be loaded for now (%s); compiling "
                     "it",
                     module_name, jb_last_error_message());
            return false;
        }
        jb__event_raise(JB_CACHE_EVENT_ENTRY_EVICTED, 0, status, jb_last_error_message());
        char why[1024];
        snprintf(why, sizeof why, "was refused by the loader (%s)", jb_last_error_message());
        jb__bundle_reject(&ref, why);
    }
    return false;
}

/* A module from the remote tier: true when one loaded. The code is loaded from the fetched bytes,
 * which jb__remote_load verified (MAC, checksum, key, size), never from a file written and read
 * back; once loaded it is kept for the cache folder's copy, written once the build has let go
 * of the module cache's lock (jb__disk_store_later). Code the loader refuses is counted and
 * raised as rejected, and not stored; the compile that follows replaces it. */
static bool load_from_remote(jb_device *dev, const jb_disk_key *key, const char *module_name,
                             const char *source, const char *const *kernel_names,
                             size_t num_kernels, jb_module **out)
{
    jb_blob code = {0};
    uint64_t start = jb__now_ns();
    if (!jb__remote_load(key, &code))
        return false;
    int status = jb__module_create(dev, &code, source, kernel_names, num_kernels, out);
    if (status == JB_OK)
        jb__disk_store_later(key, &code);
    free(code.data);
    if (status == JB_OK) {
        jb__remote_accept();
        jb__event_raise(JB_CACHE_EVENT_REMOTE_HIT, jb__now_ns() - start, JB_OK, NULL);
        return true;
    }
    if (status == JB_ERR_LOAD) {
        jb__remote_reject();
        jb__event_raise(JB_CACHE_EVENT_REMOTE_REJECTED, 0, status, jb_last_error_message());
    }
    jb__warn("the remote entry %s of module '%s' could not be loaded (%s); compiling it",
             key->file, module_name, jb_last_error_message());
    return false;
}

/* Compiles and loads `source` (unless it failed before, or the process is sealed); stores the
 * code under `key` (in the cache folder and the remote tier) unless it is NULL. */
static int compile_and_store(jb_device *dev, const char *module_name, const char *source,
                             const jb_compile_options *options, const char *const *kernel_names,
                             size_t num_kernels, const jb_disk_key *key, jb_module **out)
{
    int status;
    if (jb__build_failure_recall(dev, module_name, source, &status) ||
        (status = jb__seal_check(dev, module_name, true)) != JB_OK)
        return status;
    char saved[4096];
    bool is_saved = save_source(dev, module_name, source, saved, sizeof saved);
    jb_blob code = {0};
    jb__event_raise(JB_CACHE_EVENT_BUILD_START, 0, JB_OK, NULL);
    uint64_t build_start = jb__now_ns(), start = build_start;
    jb__build_failure_start();
    jb__build_log_set(NULL);
    status = dev->backend->compile(dev, module_name, source, options, &code);
    jb__build_steps.compile_ns = jb__now_ns() - start;
    if (status == JB_ERR_COMPILE) {
        if (is_saved)
            jb__error_append(" (source saved at %s)", saved);
        else
            jb__error_append(" (set JITBRIDGE_SAVE_SOURCE=DIR to keep the source)");
    }
    jb__build_failure_remember(dev, module_name, source, status);
    if (status == JB_OK)
        status = jb__module_create(dev, &code, source, kernel_names, num_kernels, out);
    start = jb__now_ns();
    jb__event_raise(status == JB_OK ? JB_CACHE_EVENT_BUILD_END : JB_CACHE_EVENT_BUILD_FAIL,
                    start - build_start, status,
                    status == JB_OK ? jb__build_log() : jb_last_error_message());
    if (status == JB_OK && key && jb__disk_store(key, &code))
        jb__event_raise(JB_CACHE_EVENT_DISK_STORE, jb__now_ns() - start, JB_OK, NULL);
    jb__build_steps.disk_store_ns = jb__now_ns() - start;
    if (status == JB_OK && key)
        jb__remote_store(key, &code);
    free(code.data);
    return status;
}

/* Compiles with the key's fleet lease held (where the remote tier can be written), so that the
 * hosts sharing the tier compile it once. One that finds the lease taken returns
 * JB_BUILD_LEASE_BUSY: its caller lets go of the module cache's lock, waits
 * (jb__remote_lease_wait) and looks again from the top, where the holder's value loads from the
 * remote tier; past the compile timeout it compiles alone. */
static int compile_under_remote_lease(jb_device *dev, const char *module_name,
                                      const char *source, const jb_compile_options *options,
                                      const char *const *kernel_names, size_t num_kernels,
                                      const jb_disk_key *key, jb_module **out, const char **how)
{
    int status;
    if (jb__build_failure_recall(dev, module_name, source, &status))
        return status; /* failed here before: no lease for a compile that will not run */
    jb_remote_lease lease;
    jb_lease_outcome outcome = jb__remote_lease_acquire(key, &lease);
    if (outcome == JB_LEASE_BUSY)
        return JB_BUILD_LEASE_BUSY;
    /* Stored by a host that let go between this one's look (a plain miss: a value rejected
     * then is not loaded twice) and its lease. */
    if (outcome == JB_LEASE_HELD && jb__remote_last_load_missed() &&
        jb__remote_entry_exists(key) &&
        load_from_remote(dev, key, module_name, source, kernel_names, num_kernels, out)) {
        jb__remote_lease_release(&lease);
        *how = "remote";
        return JB_OK;
    }
    status = compile_and_store(dev, module_name, source, options, kernel_names, num_kernels, key,
                               out);
    jb__remote_lease_release(&lease); /* stored, or failed: the next host compiles itself */
    return status;
}

/* Compiles with the key's lease held, so that the processes sharing the cache folder compile
 * it once. One that finds the lease taken returns JB_BUILD_LEASE_BUSY: its caller lets go of
 * the module cache's lock, waits (jb__lease_wait) and looks again from the top, where
 * the holder's entry loads; a holder that stopped is taken over, and the wait ends at the
 * compile timeout at the latest. A kernel this process knows fails fails at once. */
static int compile_under_lease(jb_device *dev, const char *module_name, const char *source,
                               const jb_compile_options *options,
                               const char *const *kernel_names, size_t num_kernels,
                               const jb_disk_key *key, jb_module **out,
                               const char **how)
{
    int status;
    if (jb__build_failure_recall(dev, module_name, source, &status))
        return status;
    /* An entry still at the name after the load failed is a bad one: only another ends a wait. */
    jb_lease_stale stale;
    jb__lease_note_stale(key, &stale);
    jb_lease lease;
    jb_lease_outcome outcome = jb__lease_acquire(key, &stale, &lease);
    if (outcome == JB_LEASE_BUSY)
        return JB_BUILD_LEASE_BUSY;
    /* Stored by a holder that let go just before we looked. */
    if (outcome == JB_LEASE_HELD && jb__lease_entry_stored(key, &stale) &&
        load_from_disk(dev, key, module_name, source, kernel_names, num_kernels, out)) {
        jb__lease_release(&lease, false);
        *how = "disk";
        return JB_OK;
    }
    /* The remote tier was asked before the lease (jb__module_build); a value stored since is
     * found by compile_under_remote_lease's look under the fleet's lease. */
    status = compile_under_remote_lease(dev, module_name, source, options, kernel_names,
                                        num_kernels, key, out, how);
    /* Let go also when another host compiles it (BUSY): this host's others then wait on the
     * fleet's lease too, not behind this process's wait. */
    jb__lease_release(&lease, status == JB_ERR_COMPILE);
    return status;
}

/* Builds a module from `source`: from the disk cache when a valid entry loads, else from a
 * bundle, else from the remote tier, else with the compiler, whose code is then stored for the
 * next process (and the fleet); a manifest, when one is written, gets its line. Runs under the
 * module cache's write lock; any producer of kernels may use it. */
int jb__module_build(jb_device *dev, const char *module_name, const char *source,
                     const jb_compile_options *options, const char *const *kernel_names,
                     size_t num_kernels, bool use_disk_cache, jb_module **out, bool *from_disk)
{
    jb_disk_key key = {0};
    /* Included files are not in the key: with include folders, no key (no disk, no manifest). */
    use_disk_cache = use_disk_cache && !options->num_include_dirs;
    bool use_disk = use_disk_cache && jb__disk_cache_usable();
    bool use_bundles = use_disk_cache && jb__bundles_present();
    bool use_remote = use_disk_cache && jb__remote_on();
    bool keyed = use_disk_cache && (use_disk || use_bundles || use_remote || jb__manifest_on()) &&
                 jb__module_disk_key(dev, module_name, kernel_names, num_kernels, source, &key) == JB_OK;
    use_disk = use_disk && keyed;
    if (keyed)
        jb__event_build_content_key(key.file);
    use_bundles = use_bundles && keyed;
    const char *how = "compiled";
    int status = JB_OK;
    if (use_disk && load_from_disk(dev, &key, module_name, source, kernel_names, num_kernels, out))
        how = "disk";
    else if (use_bundles && load_from_bundles(dev, &key, module_name, source, kernel_names,
                                              num_kernels, out))
        how = "bundle";
    /* Asked before the host's lease: a hit then costs one round trip, not a lease file's
     * creation too; processes of one host that ask at once each fetch the same value. */
    else if (use_remote && keyed &&
             load_from_remote(dev, &key, module_name, source, kernel_names, num_kernels, out))
        how = "remote";
    else if (use_disk)
        status = compile_under_lease(dev, module_name, source, options, kernel_names, num_kernels,
                                     &key, out, &how);
    else if (use_remote && keyed)
        status = compile_under_remote_lease(dev, module_name, source, options, kernel_names,
                                            num_kernels, &key, out, &how);
    else
        status = compile_and_store(dev, module_name, source, options, kernel_names, num_kernels,
                                   NULL, out);
    *from_disk = strcmp(how, "compiled") != 0;
    /* With a manifest on, its line names a record of the sources (in the cache folder). */
    char record[2 * JB_SHA256_BYTES + 1];
    bool recorded = status == JB_OK && keyed && use_disk && jb__manifest_on() &&
                    jb__source_record_store(dev->backend->name, dev->backend->dialect, module_name,
                                            kernel_names, num_kernels, options, source, record);
    if (status == JB_OK && keyed)
        jb__manifest_record(dev->backend->name, dev->arch, &key, module_name, kernel_names,
                            num_kernels, how, recorded ? record : NULL);
    jb__disk_key_free(&key);
    return status;
}

int jb__module_disk_key(jb_device *dev, const char *module_name, const char *const *entry_names,
                        size_t num_entries, const char *source, jb_disk_key *out)
{
    memset(out, 0, sizeof *out);
    char identity[1024];
    JB_FORWARD_IF_ERROR(jb__compiler_identity(dev, identity, sizeof identity));
    return jb__disk_key(dev->backend->name, dev->arch, identity, module_name, entry_names,
                        num_entries, source, out);
}
