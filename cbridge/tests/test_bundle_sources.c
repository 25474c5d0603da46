/*
 * Bundles with source records: exported with sources, then imported into an empty cache folder
 * (another process, exec'd from argv[0]), the records are in its sources/ and pass
 * jb_manifest_sources_check for the exporting process's manifest; prewarm's lines name them.
 * Hostile records in a bundle (another hash, too large, a refused option, another kernel's; a
 * link at the record's name or at sources/ in the importing folder) are refused with a clear
 * warning or never followed, no compiler starts, and the bundle's compiled entries still load;
 * records that cannot be put into sources/ (a link in its place, a folder at a record's name)
 * are counted refused, each with a warning.
 * A bundle without records (what an export without sources writes, as before) opens as ever.
 * The compile farm's list (jb__source_list_read) of a bundle and of a manifest.
 */
#include "../src/kernels/kernels.h"
#include "../src/store/sources.h"
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KERNELS 3

static char warnings[1 << 16];

static void keep_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    size_t used = strlen(warnings);
    snprintf(warnings + used, sizeof warnings - used, "%s\n", message);
}

/* Builds (or loads) the three kernels of the test on the cpu: a plain one, one with a flag and
 * a compiler option, a whole-source module. */
static void launch_kernels(jb_device *dev)
{
    kernel_kinds kinds;
    CHECK_OK(launch_kernel_kinds(dev, "bsrc", &kinds));
    free_kernel_kinds(&kinds);
}

static size_t count_records(const char *folder)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sources", folder);
    DIR *d = opendir(path);
    size_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".jbs") != NULL && e->d_type == DT_REG; /* records are files */
    if (d)
        closedir(d);
    return n;
}

/* The lines of manifest `path` that name a record, and all its lines. */
static int lines_with_record(const char *path, int *all)
{
    FILE *f = fopen(path, "r");
    char line[16384];
    int with = 0;
    *all = 0;
    while (f && fgets(line, sizeof line, f)) {
        (*all)++;
        with += strstr(line, "\tsource=") != NULL;
    }
    if (f)
        fclose(f);
    return with;
}

/* ---- the importing child: argv = child BUNDLE FOLDER RECORDS REFUSED TEXT HEX MANIFEST ---- */

static int child(char **argv)
{
    const char *bundle = argv[2], *folder = argv[3], *want_text = argv[6], *hostile = argv[7],
               *parent_manifest = argv[8];
    char manifest[512];
    snprintf(manifest, sizeof manifest, "%s.manifest", folder);
    setenv("JITBRIDGE_CACHE_DIR", folder, 1);
    setenv("JITBRIDGE_MANIFEST", manifest, 1);
    CHECK_OK(jb_set_log_callback(keep_warning, NULL));
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    uint64_t imported = 0, skipped = 0, records = 0, refused = 0;
    CHECK_OK(jb_disk_cache_import_sources(&imported, &skipped, &records, &refused, bundle));
    CHECK(imported == KERNELS && skipped == 0, "%s: %llu imported, %llu skipped", bundle,
          (unsigned long long)imported, (unsigned long long)skipped);
    CHECK(records == strtoull(argv[4], NULL, 10) && refused == strtoull(argv[5], NULL, 10),
          "%s: %llu records, %llu refused (want %s, %s); warnings:\n%s", bundle,
          (unsigned long long)records, (unsigned long long)refused, argv[4], argv[5], warnings);
    CHECK(count_records(folder) == records, "%s: %zu records in sources/, %llu imported", bundle,
          count_records(folder), (unsigned long long)records);
    CHECK(strcmp(want_text, "-") == 0 || strstr(warnings, want_text),
          "%s: no warning says '%s':\n%s", bundle, want_text, warnings);
    if (strcmp(hostile, "-") != 0) {
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/sources/%s.jbs", folder, hostile);
        CHECK(lstat(path, &st) != 0, "%s: the refused record %s is in sources/", bundle, hostile);
    }
    /* The imported entries load: nothing is compiled. */
    launch_kernels(dev);
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    CHECK(c.builds == 0 && c.disk_hits == KERNELS, "%s: %llu builds, %llu disk hits", bundle,
          (unsigned long long)c.builds, (unsigned long long)c.disk_hits);
    if (strcmp(parent_manifest, "-") != 0) {
        /* The exporting process's lines name records this folder now holds, each passing. */
        uint64_t checked = 0, keyed = 0;
        CHECK_OK(jb_manifest_sources_check(&checked, &keyed, parent_manifest));
        CHECK(checked == KERNELS && keyed == KERNELS, "%llu checked, %llu keyed",
              (unsigned long long)checked, (unsigned long long)keyed);
    }
    return check_summary("test_bundle_sources (import)");
}

/* ---- the prewarming child: argv = prewarm FILE FOLDER RECORDS (the lines naming one) ---- */

static int prewarm_child(char **argv)
{
    const char *file = argv[2], *folder = argv[3];
    int want = atoi(argv[4]);
    char manifest[512];
    snprintf(manifest, sizeof manifest, "%s.manifest", folder);
    setenv("JITBRIDGE_CACHE_DIR", folder, 1);
    setenv("JITBRIDGE_MANIFEST", manifest, 1);
    unlink(manifest); /* only prewarm's own lines */
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    jb_prewarm_result r;
    CHECK_OK(jb_prewarm(&r, dev, file));
    CHECK(r.loaded == KERNELS, "prewarm %s: %llu loaded", file, (unsigned long long)r.loaded);
    int all = 0, with = lines_with_record(manifest, &all);
    CHECK(all == KERNELS && with == want, "prewarm %s: %d of %d lines name a record", file,
          with, all);
    uint64_t checked = 0, keyed = 0;
    CHECK_OK(jb_manifest_sources_check(&checked, &keyed, manifest));
    CHECK(checked == (uint64_t)want && keyed == (uint64_t)want,
          "prewarm %s: %llu checked, %llu keyed", file, (unsigned long long)checked,
          (unsigned long long)keyed);
    return check_summary("test_bundle_sources (prewarm)");
}

static void run_child(const char *self, const char *const *args)
{
    pid_t pid = fork();
    if (pid == 0) {
        execv(self, (char *const *)args);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "the child (%s %s) failed: status %d", args[1], args[2], status);
}

/* ---- forging a bundle: the good bundle's entries, one record replaced ---- */

typedef struct forged_record {
    const char *text; /* entry 0's record instead of its own, or NULL */
    size_t bytes;
    bool wrong_name;  /* filed under another SHA-256 than its content's */
    bool other_entry; /* entry 1's record (whole and good) under entry 0 */
} forged_record;

/* Writes `path`: the entries of `good`, each with its record (records[i] when given), as an
 * export with sources lays them out. The hex of entry 0's record in `hex0`. */
static void forge(const char *good, const char *path, const forged_record *replace,
                  char hex0[65])
{
    jb_bundle *b = NULL;
    CHECK_OK(jb__bundle_open(good, "test", &b));
    if (!b)
        return;
    size_t n = jb__bundle_count(b);
    FILE *f = fopen(path, "w+b");
    unsigned char zeros[JB_BUNDLE_HEADER_BYTES] = {0};
    fwrite(zeros, 1, sizeof zeros, f);
    uint64_t at = JB_BUNDLE_HEADER_BYTES;
    jb_bundle_entry index[KERNELS];
    jb_bundle_source rows[KERNELS];
    char *texts[KERNELS] = {NULL};
    size_t lens[KERNELS] = {0};
    for (size_t i = 0; i < n && i < KERNELS; i++) { /* every record first: one may be swapped */
        unsigned char *data = NULL;
        bool has = false;
        jb_source_record r;
        CHECK_OK(jb__bundle_read_entry(b, i, &data));
        CHECK_OK(jb__bundle_source(b, i, data, (size_t)jb__bundle_entry(b, i)->key_bytes,
                                   jb__source_record_rules, &has, rows[i].record, &r));
        texts[i] = has ? jb__source_record_bytes(&r, rows[i].record, &lens[i]) : NULL;
        jb__source_record_free(&r);
        free(data);
    }
    if (replace && replace->other_entry) {
        free(texts[0]);
        texts[0] = malloc(lens[1]);
        memcpy(texts[0], texts[1], lens[1]);
        lens[0] = lens[1];
        memcpy(rows[0].record, rows[1].record, JB_SHA256_BYTES);
    } else if (replace) {
        free(texts[0]);
        texts[0] = malloc(replace->bytes);
        memcpy(texts[0], replace->text, replace->bytes);
        lens[0] = replace->bytes;
        jb__sha256(replace->wrong_name ? "another record" : texts[0],
                   replace->wrong_name ? 14 : lens[0], rows[0].record);
    }
    jb__hex(rows[0].record, JB_SHA256_BYTES, hex0);
    for (size_t i = 0; i < n && i < KERNELS; i++) {
        unsigned char *data = NULL;
        CHECK_OK(jb__bundle_read_entry(b, i, &data));
        index[i] = *jb__bundle_entry(b, i);
        index[i].offset = at;
        size_t bytes = (size_t)(index[i].key_bytes + index[i].payload_bytes);
        fwrite(data, 1, bytes, f);
        at += bytes;
        free(data);
        memcpy(rows[i].entry, index[i].digest, JB_SHA256_BYTES);
        rows[i].offset = at;
        rows[i].bytes = lens[i];
        fwrite(texts[i], 1, lens[i], f);
        at += lens[i];
        free(texts[i]);
    }
    /* Rows sorted by entry: the index is, and so are they. */
    unsigned char table[KERNELS * JB_BUNDLE_SOURCE_BYTES], digest[JB_SHA256_BYTES];
    for (size_t i = 0; i < n; i++)
        jb__bundle_source_encode(table + i * JB_BUNDLE_SOURCE_BYTES, &rows[i]);
    jb__sha256(table, n * JB_BUNDLE_SOURCE_BYTES, digest);
    uint64_t table_at = at;
    fwrite(table, 1, n * JB_BUNDLE_SOURCE_BYTES, f);
    at += n * JB_BUNDLE_SOURCE_BYTES;
    char fingerprints[4096], hex[65];
    jb__hex(digest, JB_SHA256_BYTES, hex);
    const char *old = jb__bundle_fingerprints(b), *cut = strstr(old, "\nsources ");
    snprintf(fingerprints, sizeof fingerprints, "%.*s\nsources %llu %zu %s\n",
             (int)(cut ? cut - old : (ptrdiff_t)strlen(old)), old, (unsigned long long)table_at, n,
             hex);
    size_t fp_bytes = strlen(fingerprints);
    fwrite(fingerprints, 1, fp_bytes, f);
    unsigned char raw_index[KERNELS * JB_BUNDLE_INDEX_BYTES];
    for (size_t i = 0; i < n; i++)
        jb__bundle_index_encode(raw_index + i * JB_BUNDLE_INDEX_BYTES, &index[i]);
    fwrite(raw_index, 1, n * JB_BUNDLE_INDEX_BYTES, f);
    jb_bundle_header h = {.count = n,
                          .fingerprints_offset = at,
                          .fingerprints_bytes = fp_bytes,
                          .index_offset = at + fp_bytes,
                          .index_bytes = n * JB_BUNDLE_INDEX_BYTES};
    h.file_bytes = h.index_offset + h.index_bytes;
    jb_sha256 sha;
    jb__sha256_init(&sha);
    jb__sha256_update(&sha, fingerprints, fp_bytes);
    jb__sha256_update(&sha, raw_index, n * JB_BUNDLE_INDEX_BYTES);
    jb__sha256_final(&sha, h.tables_digest);
    unsigned char header[JB_BUNDLE_HEADER_BYTES];
    jb__bundle_header_encode(header, &h);
    fseek(f, 0, SEEK_SET);
    fwrite(header, 1, sizeof header, f);
    fclose(f);
    chmod(path, 0600);
    jb__bundle_free(b);
}

/* The good bundle's record of entry 0, as text (a static copy). */
static const char *first_record(const char *good)
{
    static char text[1 << 16];
    jb_bundle *b = NULL;
    CHECK_OK(jb__bundle_open(good, "test", &b));
    unsigned char *data = NULL, digest[JB_SHA256_BYTES];
    CHECK_OK(jb__bundle_read_entry(b, 0, &data));
    bool has = false;
    jb_source_record r;
    CHECK_OK(jb__bundle_source(b, 0, data, (size_t)jb__bundle_entry(b, 0)->key_bytes,
                               jb__source_record_rules, &has, digest, &r));
    size_t len = 0;
    char *bytes = has ? jb__source_record_bytes(&r, digest, &len) : NULL;
    snprintf(text, sizeof text, "%.*s", (int)len, bytes ? bytes : "");
    free(bytes);
    jb__source_record_free(&r);
    free(data);
    jb__bundle_free(b);
    return text;
}

/* Makes `folder` a cache folder of the library's own (as the parent's, marked) and its
 * sources/ (0700; `sources` NULL: none). */
static void own_folder(const char *cache, const char *folder, const char *sources)
{
    char from[600], to[600], command[1400];
    snprintf(from, sizeof from, "%s/CACHEDIR.TAG", cache);
    snprintf(to, sizeof to, "%s/CACHEDIR.TAG", folder);
    snprintf(command, sizeof command, "cp %s %s", from, to);
    CHECK(mkdir(folder, 0700) == 0 && system(command) == 0 && chmod(to, 0600) == 0 &&
              (!sources || mkdir(sources, 0700) == 0),
          "making %s", folder);
}

/* Imports the forged bundle `name` into a new empty folder: 2 records, 1 refused saying `want`,
 * the refused one not in sources/, the entries loading without a compile. */
static void hostile_import(const char *self, const char *dir, const char *good,
                           const char *name, const forged_record *replace, const char *want)
{
    char path[512], folder[512], hex[65] = "";
    snprintf(path, sizeof path, "%s/%s.jbb", dir, name);
    snprintf(folder, sizeof folder, "%s/into_%s", dir, name);
    forge(good, path, replace, hex);
    if (replace->other_entry) /* another entry's record, rightly imported for that entry */
        snprintf(hex, sizeof hex, "-");
    const char *args[] = {self, "child", path, folder, "2", "1", want, hex, "-", NULL};
    run_child(self, args);
    /* Prewarm loads all three; the refused record is named by no line. */
    snprintf(folder, sizeof folder, "%s/prewarm_%s", dir, name);
    const char *prewarm_args[] = {self, "prewarm", path, folder, "2", NULL};
    run_child(self, prewarm_args);
    /* The compile farm's list leaves it out too, counted. */
    jb_source_list list;
    CHECK_OK(jb__source_list_read(&list, path, jb__source_record_rules));
    CHECK(list.count == KERNELS - 1 && list.refused == 1, "%s: listed %zu, refused %llu", name,
          list.count, (unsigned long long)list.refused);
    jb__source_list_free(&list);
}

/* A copy of `text` with `from` replaced by `to` (a static buffer). */
static const char *edited(const char *text, const char *from, const char *to)
{
    static char out[1 << 16];
    const char *at = strstr(text, from);
    CHECK(at, "the record has no '%s'", from);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at ? at - text : 0), text, at ? to : "",
             at ? at + strlen(from) : "");
    return out;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "child") == 0)
        return child(argv);
    if (argc == 5 && strcmp(argv[1], "prewarm") == 0)
        return prewarm_child(argv);
    static char dir[] = "/tmp/jb_bundle_sources_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    char cache[256], manifest[256], with[256], without[256];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(manifest, sizeof manifest, "%s/kernels.manifest", dir);
    snprintf(with, sizeof with, "%s/with.jbb", dir);
    snprintf(without, sizeof without, "%s/without.jbb", dir);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    setenv("JITBRIDGE_MANIFEST", manifest, 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    unsetenv("JITBRIDGE_CACHE_BUNDLE");
    unsetenv("JITBRIDGE_REMOTE_CACHE");
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    launch_kernels(dev);

    /* Exported with sources: every entry's record rides along. */
    uint64_t exported = 0, skipped = 0, records = 0;
    CHECK_OK(jb_disk_cache_export_sources(&exported, &skipped, &records, with, NULL));
    CHECK(exported == KERNELS && skipped == 0 && records == KERNELS,
          "export with sources: %llu exported, %llu skipped, %llu records",
          (unsigned long long)exported, (unsigned long long)skipped,
          (unsigned long long)records);
    /* Only what a manifest names, with sources. */
    char named[256];
    snprintf(named, sizeof named, "%s/named.jbb", dir);
    CHECK_OK(jb_disk_cache_export_sources(&exported, &skipped, &records, named, manifest));
    CHECK(exported == KERNELS && records == KERNELS, "export of a manifest with sources: %llu, %llu",
          (unsigned long long)exported, (unsigned long long)records);
    /* Without sources: the bundle an export always wrote, no sources line. */
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, without, NULL));
    jb_bundle *b = NULL;
    CHECK_OK(jb__bundle_open(without, "test", &b));
    CHECK(b && !strstr(jb__bundle_fingerprints(b), "sources ") && jb__bundle_source_count(b) == 0,
          "a bundle exported without sources names records");
    jb__bundle_free(b);

    /* Imported into an empty folder: the records land in its sources/ and pass the check of
     * this process's manifest there. */
    char folder[512];
    snprintf(folder, sizeof folder, "%s/empty", dir);
    const char *good_args[] = {argv[0], "child", with, folder, "3", "0", "-", "-", manifest, NULL};
    run_child(argv[0], good_args);
    /* A bundle without records imports as before: no records, nothing refused. */
    snprintf(folder, sizeof folder, "%s/plain", dir);
    const char *plain_args[] = {argv[0], "child", without, folder, "0", "0", "-", "-", "-", NULL};
    run_child(argv[0], plain_args);
    /* Prewarm from the bundle, and from the manifest after an import: lines name records. */
    snprintf(folder, sizeof folder, "%s/prewarmed", dir);
    const char *prewarm_args[] = {argv[0], "prewarm", with, folder, "3", NULL};
    run_child(argv[0], prewarm_args);
    snprintf(folder, sizeof folder, "%s/empty", dir);
    const char *prewarm_manifest_args[] = {argv[0], "prewarm", manifest, folder, "3", NULL};
    run_child(argv[0], prewarm_manifest_args);

    /* The compile farm's list, of the bundle and of the manifest: every kernel, each record
     * checked and of its line. */
    jb_source_list list;
    CHECK_OK(jb__source_list_read(&list, with, jb__source_record_rules));
    CHECK(list.count == KERNELS && list.refused == 0 && list.without_record == 0,
          "the bundle's list: %zu, %llu refused, %llu without", list.count,
          (unsigned long long)list.refused, (unsigned long long)list.without_record);
    for (size_t i = 0; i < list.count; i++)
        CHECK(strcmp(list.items[i].line.module, list.items[i].record.module) == 0 &&
                  list.items[i].line.has_source &&
                  strcmp(list.items[i].line.how, "bundle") == 0,
              "item %zu: line of %s, record of %s", i, list.items[i].line.module,
              list.items[i].record.module);
    jb__source_list_free(&list);
    CHECK_OK(jb__source_list_read(&list, manifest, jb__source_record_rules));
    CHECK(list.count == KERNELS && list.refused == 0, "the manifest's list: %zu, %llu refused",
          list.count, (unsigned long long)list.refused);
    jb__source_list_free(&list);
    /* Two processes' lines of the same kernels: each kernel listed once. */
    char twice[300], command[1200];
    snprintf(twice, sizeof twice, "%s/twice.manifest", dir);
    snprintf(command, sizeof command, "cat %s %s > %s", manifest, manifest, twice);
    CHECK(system(command) == 0, "%s", command);
    CHECK_OK(jb__source_list_read(&list, twice, jb__source_record_rules));
    CHECK(list.count == KERNELS && list.repeated == KERNELS, "twice: %zu listed, %llu repeated",
          list.count, (unsigned long long)list.repeated);
    jb__source_list_free(&list);
    CHECK_OK(jb__source_list_read(&list, without, jb__source_record_rules));
    CHECK(list.count == 0 && list.without_record == KERNELS, "a bundle without records: %zu",
          list.count);
    jb__source_list_free(&list);

    /* Hostile records: each refused, saying why; the entries still load. */
    const char *good = first_record(with);
    CHECK(strncmp(good, "jbs1\n", 5) == 0, "no record read back from %s", with);
    forged_record wrong_name = {good, strlen(good), true, false};
    hostile_import(argv[0], dir, with, "wrong_hash", &wrong_name, "does not hash to its name");
    size_t huge = JB_SOURCE_RECORD_MAX_BYTES + 1;
    char *big = calloc(1, huge);
    memcpy(big, good, strlen(good));
    forged_record too_large = {big, huge, false, false};
    hostile_import(argv[0], dir, with, "too_large", &too_large, "4194305 bytes, past the");
    free(big);
    /* An option the API refuses, stated where options go (after the flags line). */
    const char *with_plugin = edited(good, "\nsource ", "\noption -fplugin=/tmp/evil.so\nsource ");
    forged_record plugin = {with_plugin, strlen(with_plugin), false, false};
    hostile_import(argv[0], dir, with, "plugin", &plugin, "-fplugin=/tmp/evil.so' is refused");
    forged_record another = {NULL, 0, false, true};
    hostile_import(argv[0], dir, with, "another_kernel", &another, "is not of entry");

    /* A link at a record's name in the importing folder is replaced, never written through; a
     * link in sources/'s place is never followed. */
    snprintf(folder, sizeof folder, "%s/linked", dir);
    char sources_dir[600], outside[600], link_path[800], outside_dir[600];
    snprintf(sources_dir, sizeof sources_dir, "%s/sources", folder);
    snprintf(outside, sizeof outside, "%s/outside", dir);
    own_folder(cache, folder, sources_dir);
    FILE *f = fopen(outside, "w");
    fputs("not a record\n", f);
    fclose(f);
    char first_hex[65]; /* the good record's name */
    unsigned char digest[JB_SHA256_BYTES];
    jb__sha256(good, strlen(good), digest);
    jb__hex(digest, JB_SHA256_BYTES, first_hex);
    snprintf(link_path, sizeof link_path, "%s/%s.jbs", sources_dir, first_hex);
    CHECK(symlink(outside, link_path) == 0, "symlink: %s", strerror(errno));
    const char *linked_args[] = {argv[0], "child", with, folder, "3", "0", "-", "-", "-", NULL};
    run_child(argv[0], linked_args);
    struct stat st;
    CHECK(lstat(link_path, &st) == 0 && S_ISREG(st.st_mode), "the link at %s was kept",
          link_path);
    f = fopen(outside, "r");
    char back[64] = "";
    CHECK(f && fgets(back, sizeof back, f) && strcmp(back, "not a record\n") == 0,
          "the link's target was written");
    if (f)
        fclose(f);
    snprintf(folder, sizeof folder, "%s/linked_dir", dir);
    snprintf(outside_dir, sizeof outside_dir, "%s/outside_dir", dir);
    snprintf(sources_dir, sizeof sources_dir, "%s/sources", folder);
    own_folder(cache, folder, NULL);
    CHECK(mkdir(outside_dir, 0700) == 0 && symlink(outside_dir, sources_dir) == 0,
          "a link in sources/'s place: %s", strerror(errno));
    /* Records that cannot be put into sources/ are counted refused, each with its warning. */
    const char *linked_dir_args[] = {argv[0], "child", with, folder, "0", "3",
                                     "could not be put into", "-", "-", NULL};
    run_child(argv[0], linked_dir_args);
    CHECK(count_records(outside_dir) == 0, "records were written through the link at sources/");
    /* A folder at a record's name: that record refused, the two others put. */
    snprintf(folder, sizeof folder, "%s/folder_at_name", dir);
    snprintf(sources_dir, sizeof sources_dir, "%s/sources", folder);
    own_folder(cache, folder, sources_dir);
    snprintf(link_path, sizeof link_path, "%s/%s.jbs", sources_dir, first_hex);
    CHECK(mkdir(link_path, 0700) == 0, "a folder at %s: %s", link_path, strerror(errno));
    const char *folder_args[] = {argv[0], "child", with, folder, "2", "1",
                                 "could not be put into", "-", "-", NULL};
    run_child(argv[0], folder_args);

    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK(system(command) == 0, "rm -rf %s", dir);
    return check_summary("test_bundle_sources");
}
