/* kernels/: custom kernels (their body words, generated sources, compile options), the one
 * staged launch path, captured graphs, source modules, the race probe and the bench's compile
 * entry points. The top layer: it calls every layer below. */
#ifndef JB_KERNELS_KERNELS_H
#define JB_KERNELS_KERNELS_H

#include "../cache/cache.h"

/* ---- custom kernels: spec and launch (kernel.c), names and source (kernel_source.c) ---- */
struct jb_custom_kernel {
    char *name;
    char *module_name;
    uint64_t module_name_hash;
    size_t num_inputs, num_outputs;
    char **input_names, **output_names;
    jb_dtype *input_dtypes, *output_dtypes;
    size_t num_scalars;
    char **scalar_names;
    jb_dtype *scalar_dtypes;
    jb_compile_options options; /* flags and the caller's compiler options (owned) */
    char *sources[JB_DIALECT_COUNT];
    jb_configure_hook configure;
    void *configure_user_data;
    jb_kernel_state configured[JB_MAX_DEVICES]; /* by device index: this hook's own result */
    bool disk_cacheable; /* false for probes: each process must compile them */
    bool bounds_checked; /* JB_COMPILE_BOUNDS_CHECKS */
    bool shaped[JB_KERNEL_MAX_ARRAYS]; /* by array slot: the body sees its shape */
    /* The names a checked access reports: the arrays in slot order, then each shown shape
     * ("x_shape"); filled for every kernel. */
    char **checked_names;
    size_t num_checked;
    jb_scalar *output_inits; /* NULL, or one per output (JB_DTYPE_INVALID: none) */
    bool uses_atomics; /* the body, header or a define names atomic_add or its kin */
    bool uses_block;   /* ... names block_index or its kin (kernel_source.c's block_words) */
};

/* Checks every name, count and dtype of a spec; the status and message of the first problem. */
int jb__kernel_spec_check(const jb_kernel_spec *spec);
/* Generates the kernel's sources and its module name from its names and the spec's body,
 * header, parameters and defines. */
int jb__kernel_generate(jb_custom_kernel *k, const jb_kernel_spec *spec);
/* Checks compile flags and defines ("NAME" or "NAME=VALUE"); `owner` names the kernel or
 * module in the message. */
int jb__compile_options_check(const char *owner, unsigned flags, unsigned also_allowed,
                              const char *const *defines, size_t num_defines);
/* ---- source records' rules and a manifest's records checked (source_records.c) ---- */
/* The rules of a kernel made through the API, for a record read from disk (handed to
 * jb__source_record_read): names, flags, options, and options stated in the source's first line. */
int jb__source_record_rules(const jb_source_record *record);
/* jb_manifest_sources_check (jitbridge.h) checks every record a manifest names with them. */
/* JB_OK when the record is of the line's backend, module and entry names. */
int jb__source_record_of_line(const jb_source_record *record, const jb_manifest_line *line);
/* The SHA-256 of the key the record has when built on `dev` (of its backend): this device's. */
int jb__source_record_key(jb_device *dev, const jb_source_record *record,
                          unsigned char key_digest[JB_SHA256_BYTES]);
/* JB_OK when the record, built on `dev`, has the key whose SHA-256 is `key_digest`. */
int jb__source_record_key_check(jb_device *dev, const jb_source_record *record,
                                const unsigned char key_digest[JB_SHA256_BYTES]);
/* ---- the compile farm: its input (farm_items.c), parent (farm.c) and worker (farm_worker.c) */
/* One kernel to build: a manifest line's key and the source record that rebuilds it (read and
 * checked, then let go: a worker reads and checks it again from the cache folder). */
typedef struct jb_farm_item {
    unsigned char key[JB_SHA256_BYTES];
    unsigned char record[JB_SHA256_BYTES];
    char module[160]; /* for messages: the name (at most 128), "_", 16 hex digits */
} jb_farm_item;
typedef struct jb_farm_list {
    jb_farm_item *items;
    size_t count, capacity;
    bool bundle; /* read from a bundle: its keys are this device's, made from the records */
} jb_farm_list;
/* The one reader of a farm's input, through jb__source_list_read (store/sources.h): the kernels
 * of the manifest or bundle at `path` that `dev` lacks (in neither its module cache nor the
 * cache folder), each with a record that passed the rules, once per key. A manifest line's
 * record must rebuild its line's key on `dev`; a bundle's record is rebuilt under the key `dev`
 * makes from it (another compiler, architecture or ABI made the bundle) and put into the cache
 * folder's sources/ for the workers. What is not listed is counted in `out` (present, refused
 * with a warning each, without_source, other). An error when the file cannot be read, the
 * bundle is refused or memory runs out. Free the list with jb__farm_list_free. */
/* Whether the cache folder holds a good entry under `key` (the entry's SHA-256 name). */
bool jb__farm_entry_stored(const unsigned char *key);
int jb__farm_items_read(jb_device *dev, const char *path, jb_farm_list *list,
                        jb_prewarm_build_result *out);
void jb__farm_list_free(jb_farm_list *list);
/* A farm's counters, read while it runs (jb_prewarm_build_poll): kernels given to workers,
 * reported built, failed or lost with their worker. */
typedef struct jb_farm_progress {
    _Atomic uint64_t total, built, failed;
} jb_farm_progress;
/* jb_prewarm_build's refusals before anything is read (arguments, setuid, sealed, no worker
 * program, the cache folder off); *worker_program NULL is taken from JITBRIDGE_BUILD_WORKER. */
int jb__farm_refusal(jb_device *device, const char *path, unsigned jobs,
                     const char **worker_program);
/* jb_prewarm_build after jb__farm_refusal passed: the list read, the workers run (counted in
 * `progress` as they report), the kernels loaded. Any thread; signals are the caller's. */
int jb__farm_run(jb_prewarm_build_result *out, jb_device *device, const char *path,
                 unsigned jobs, const char *worker_program, jb_farm_progress *progress);
#ifdef JB_TEST_HOOKS
/* true: the farm takes this process for a setuid one (its refusal, without a setuid binary). */
void jb__test_set_farm_secure(bool secure);
/* true: workers are watched as on a kernel without pidfds (signalled and reaped by pid). */
void jb__test_set_farm_no_pidfd(bool no_pidfd);
/* `fn` (or NULL) runs in the host just after each worker is spawned, its pipe's write end
 * still open here: as a host thread's fork there would. */
void jb__test_set_farm_spawned(void (*fn)(void));
#endif
/* ---- atomics in bodies (atomics.c) ---- */
/* Whether the `len` bytes at `name` are atomic_add, atomic_exchange, atomic_min or atomic_max. */
bool jb__is_atomic_word(const char *name, size_t len);
/* The i-th of those words, NULL past the last. */
const char *jb__atomic_word(size_t i);
/* Appends the helpers the atomic_* macros call, for `dialect`; with `checked`, also the checked
 * element access they use in a bounds-checked kernel (after jb_checked). */
void jb__append_atomic_helpers(jb_strbuf *sb, jb_source_dialect dialect, bool checked);
/* Appends, just before the body, the atomic_* macros and each array's element access for them;
 * jb__append_atomic_undefs, after it, undefines them all. */
void jb__append_atomic_macros(jb_strbuf *sb, const jb_custom_kernel *k);
void jb__append_atomic_undefs(jb_strbuf *sb, const jb_custom_kernel *k);

/* Whether `text` uses `name` as a name (not inside a comment or literal, not a member name). */
bool jb__source_mentions(const char *text, const char *name);
/* Appends `text` with every line continuation (a backslash, blanks, a newline) removed, as
 * the compiler removes them before it reads a token. */
void jb__splice_lines(const char *text, jb_strbuf *out);
/* Appends `text` (the kernel's body or header, `what` names it) with every subscript of one of
 * `names`, `name[i]`, made `jb_at_<slot>(i)`. `strict` (the body): any other use of those names,
 * and any name starting with jb_, is refused. */
int jb__bounds_rewrite(const char *kernel, const char *what, const char *text,
                       const char *const *names, size_t num_names, bool strict, jb_strbuf *out);
/* JB_OK when a checked kernel's text (`what`: body, header, a define) holds nothing that could
 * reach an array past its checks: no name pasted (## or %:%:) or split by a line continuation,
 * no directive that brings in other text (#include and its kin), no %: digraph, no asm, no raw
 * string, no digit separator, and no #define or #undef of a reserved name, of the kernel's arrays and
 * their companions (`names`), or of a name the generated code uses. */
int jb__bounds_text_check(const char *kernel, const char *what, const char *text,
                          const char *const *names, size_t num_names);
/* Appends one #define line per define (checked before). */
void jb__append_defines(jb_strbuf *sb, const char *const *defines, size_t num_defines);
/* The longest name a kernel may paste into source. */
#define JB_MAX_IDENTIFIER 128
/* True when `s` may be pasted into source as a name; else false with a static reason. */
bool jb__identifier_ok(const char *s, const char **problem);
/* The dialect the backend named `backend` ("cpu", "cuda", "rocm") compiles; false if unknown. */
bool jb__backend_name_dialect(const char *backend, jb_source_dialect *out);
/* Finds (or builds) the kernel's module on `dev`, runs its configure hook once, and returns its
 * config and function handle. */
int jb__custom_kernel_prepare(jb_custom_kernel *k, jb_device *dev, jb_kernel_config *config,
                              void **fn);

/* The attributes of kernel `fn` loaded on `dev` (jb_kernel_attributes). */
int jb__kernel_attributes(jb_device *dev, void *fn, jb_kernel_attributes *out);

/* Turns a launch shape into grid and block (thread counts use the config's block size). */
int jb__resolve_launch_shape(const jb_launch_shape *shape, const jb_kernel_config *config,
                             uint32_t grid[3], uint32_t block[3], uint64_t *total);

/* One launch of a custom kernel, staged: the one launch path (public launch, probe, bench). */
typedef struct jb_capture jb_capture;
typedef struct jb_staged_launch {
    jb_device *dev;
    jb_stream *stream; /* the caller's, else the calling thread's default of the device */
    const jb_custom_kernel *kernel;
    jb_capture *capture; /* the stream's capture (this thread's), or NULL: a plain launch */
    uint32_t captured[JB_KERNEL_MAX_ARRAYS]; /* captured: each array slot's index in the graph */
    void *fn;
    uint32_t grid[3], block[3], shared_bytes;
    jb_launch_args args; /* points into the arrays below */
    /* Per array slot (inputs, then outputs), then a bounds-checked launch's record. */
    void *pointers[JB_KERNEL_MAX_ARRAYS + 1];
    uint64_t sizes[JB_KERNEL_MAX_ARRAYS + 1];
    jb_buffer *buffers[JB_KERNEL_MAX_ARRAYS + 1];
    _Alignas(8) unsigned char scalars[JB_KERNEL_MAX_SLOTS * JB_SCALAR_SLOT];
    size_t num_outputs;
    jb_array *outputs[JB_KERNEL_MAX_ARRAYS];  /* new outputs; NULL for in-place ones */
    jb_array *in_place[JB_KERNEL_MAX_ARRAYS]; /* the caller's arrays written in place, or NULL */
    jb_event *end; /* marks the kernel's end (from the stream, at jb__launch_end): each output
                    * and the hold take a reference */
    bool queued;   /* work may be on the stream: a failure waits for it */
    jb_bounds_report *report; /* a bounds-checked launch's, else NULL */
    /* What the outputs will hold: that report and the inputs' (a reference each). */
    jb_bounds_report *reports[JB_ARRAY_REPORTS];
    size_t num_reports;
} jb_staged_launch;
/* ---- captured graphs (graph.c) ---- */
/* The capture in progress on `stream`, when the calling thread began it, in *out; NULL when
 * none is. One begun by another thread: JB_ERR_INVALID_ARGUMENT naming `what`. */
int jb__stream_capture(jb_stream *stream, const char *what, jb_capture **out);
/* A launch being captured uses `array` (written: the graph writes it): the graph takes a
 * reference; its index in the graph in *out_index. Out of memory fails the capture. */
int jb__capture_array(jb_capture *capture, jb_array *array, bool written, uint32_t *out_index);
/* One more operation the backend captured besides launches (a fill). */
void jb__capture_count_op(jb_capture *capture);
/* Records the staged launch, just issued into the capture: its node, arguments and buffers. */
int jb__capture_launch(jb_capture *capture, const jb_staged_launch *launch);
/* Something the capture holds went wrong: its end fails (`why` says what) and discards it. */
void jb__capture_poison(jb_capture *capture, const char *why);
/* The stream is being destroyed while it captures: the capture is discarded. */
void jb__capture_abandon(jb_stream *stream);

/* Checks the scalars against the kernel's and stores each value in its slot of `slots`. */
int jb__stage_scalars(const jb_custom_kernel *k, const jb_scalar *scalars, size_t num_scalars,
                      unsigned char *slots);
/* Checks the arguments, builds and configures the module, makes the outputs and orders the
 * inputs' pending work (and the in-place outputs' readers) before the launch. On failure
 * nothing stays staged. `launch` is a whole jb_launch (jb_custom_kernel_run normalised it). */
int jb__launch_begin(jb_staged_launch *staged, jb_custom_kernel *k, const jb_launch *launch);
/* Queues the staged kernel on its stream; may be called more than once (the bench does). */
int jb__launch_issue(const jb_staged_launch *launch);
/* With `status` JB_OK: gives the outputs their event, holds every buffer until the kernel is done
 * and hands the new outputs to `outputs` (NULL for in-place ones; `outputs` may be NULL when
 * all are in place). Otherwise waits for the stream and frees what was staged; returns the
 * status. */
int jb__launch_end(jb_staged_launch *launch, int status, jb_array **outputs);


#ifdef JB_TEST_HOOKS
/* Gives the source module another module name (and its hash): two sources meeting in one hash,
 * without searching for a real 64-bit collision. */
void jb__test_set_source_module_name(jb_source_module *m, const char *module_name);
#endif

/* ---- precompiled module code (module_code.c) ---- */
/* Whether the caller gave code (bytes or a path). */
bool jb__module_code_given(const jb_module_code *code);
/* Copies the code (bytes, or the trusted file read whole) into *out, with one NUL past its
 * `size`; `owner` names the module in errors. */
int jb__module_code_copy(const char *owner, const jb_module_code *code, jb_blob *out);
/* What stands for a source: "precompiled code: N bytes, sha256 HEX" (malloc'd; NULL: no memory). */
char *jb__module_code_marker(const jb_blob *code);

#endif /* JB_KERNELS_KERNELS_H */
