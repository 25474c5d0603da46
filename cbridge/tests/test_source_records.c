/*
 * Source records: with a manifest written, each kernel's line names a record in the cache
 * folder's sources/ (its name the SHA-256 of its content) holding what rebuilds it; the record
 * read back passes the API's rules and makes the line's key again. Hostile records (another
 * hash, cut short, too large, a bad name, a refused option, options the source does not state,
 * a link or a FIFO at the name, another kernel's, a sources/ others may read) are refused with a
 * clear error, and the cache folder is left as it was. Readers of manifests (coverage, prewarm) still read the lines.
 */
#include "helpers.h"
#include "jitbridge_sys.h"
#include "../src/kernels/kernels.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINES 8

static char dir[] = "/tmp/jb_source_records_XXXXXX";
static char cache[256], sources[320], manifest[256], hostile_manifest[256];

typedef struct line {
    char text[4096]; /* the whole line, newline cut */
    char module[256];
    char record[65];
} line;

/* The manifest's lines: how many, each with its module and the record it names ("" if none). */
static int read_lines(line *out)
{
    FILE *f = fopen(manifest, "r");
    CHECK(f, "open %s", manifest);
    int n = 0;
    while (f && n < MAX_LINES && fgets(out[n].text, sizeof out[n].text, f)) {
        out[n].text[strcspn(out[n].text, "\n")] = '\0';
        char copy[sizeof out[n].text], *fields[9], *at = copy;
        int count = 0;
        memcpy(copy, out[n].text, sizeof copy);
        while (count < 9 && (fields[count++] = strsep(&at, "\t")))
            ;
        out[n].record[0] = '\0';
        snprintf(out[n].module, sizeof out[n].module, "%s", count > 4 ? fields[4] : "");
        if (count >= 8 && fields[7] && strncmp(fields[7], "source=", 7) == 0)
            snprintf(out[n].record, sizeof out[n].record, "%s", fields[7] + 7);
        n++;
    }
    if (f)
        fclose(f);
    return n;
}

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = malloc(8 << 20);
    *size = fread(data, 1, 8 << 20, f);
    fclose(f);
    return data;
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, size, f) == size, "write %s", path);
    if (f)
        fclose(f);
    chmod(path, 0600);
}

static void sha256_hex(const void *data, size_t size, char hex[65])
{
    unsigned char digest[JB_SHA256_BYTES];
    jb__sha256(data, size, digest);
    jb__hex(digest, JB_SHA256_BYTES, hex);
}

/* Every name, type, size and time under the cache folder, as one text: what "unchanged" means. */
static void snapshot(const char *path, char *out, size_t len)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char child[1024];
        struct stat st;
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        if (lstat(child, &st) != 0)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s %o %lld %lld.%ld\n", child, (unsigned)st.st_mode,
                 (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        if (S_ISDIR(st.st_mode))
            snapshot(child, out, len);
    }
    closedir(d);
}

/* The first good line with `record` in place of its record: a manifest of its own. */
static void hostile_line(const line *good, const char *record)
{
    char text[4096];
    snprintf(text, sizeof text, "%.*s%s\n", (int)(strstr(good->text, "source=") + 7 - good->text),
             good->text, record);
    write_file(hostile_manifest, text, strlen(text));
}

/* The hostile manifest is refused with JB_ERR_INVALID_ARGUMENT and a message holding `want`,
 * and the cache folder (the hostile record included) is the same before and after. */
static void refused(const char *what, const char *want)
{
    static char before[1 << 16], after[1 << 16];
    before[0] = after[0] = '\0';
    snapshot(cache, before, sizeof before);
    uint64_t checked = 99, keyed = 99;
    int status = jb_manifest_sources_check(&checked, &keyed, hostile_manifest);
    const char *message = jb_last_error_message();
    CHECK(status == JB_ERR_INVALID_ARGUMENT, "%s: status %d (%s)", what, status, message);
    CHECK(strstr(message, want), "%s: the message '%s' does not say '%s'", what, message, want);
    CHECK(checked == 0, "%s: %llu records passed", what, (unsigned long long)checked);
    snapshot(cache, after, sizeof after);
    CHECK(strcmp(before, after) == 0, "%s: the cache folder changed:\n%s---\n%s", what, before,
          after);
}

/* A record that is `text` edited (`from` replaced by `to`) and stored under its own hash. */
static void refused_edit(const char *good_text, const line *good, const char *from,
                         const char *to, const char *what, const char *want)
{
    const char *at = strstr(good_text, from);
    CHECK(at, "%s: the record has no '%s'", what, from);
    if (!at)
        return;
    static char edited[1 << 20];
    snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - good_text), good_text, to,
             at + strlen(from));
    char hex[65], path[512];
    sha256_hex(edited, strlen(edited), hex);
    snprintf(path, sizeof path, "%s/%s.jbs", sources, hex);
    write_file(path, edited, strlen(edited));
    hostile_line(good, hex);
    refused(what, want);
    unlink(path);
}

int main(void)
{
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(sources, sizeof sources, "%s/sources", cache);
    snprintf(manifest, sizeof manifest, "%s/kernels.manifest", dir);
    snprintf(hostile_manifest, sizeof hostile_manifest, "%s/hostile.manifest", dir);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    setenv("JITBRIDGE_MANIFEST", manifest, 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    unsetenv("JITBRIDGE_CACHE_BUNDLE");
    unsetenv("JITBRIDGE_REMOTE_CACHE");
    jb_device *dev = NULL;
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));

    /* Three kernels: a plain one, one with a flag and a compiler option, a whole-source module. */
    kernel_kinds kinds;
    CHECK_OK(launch_kernel_kinds(dev, "srcrec", &kinds));

    line lines[MAX_LINES];
    int n = read_lines(lines);
    CHECK(n == 3, "%d manifest lines", n);
    for (int i = 0; i < n; i++) {
        CHECK(strlen(lines[i].record) == 64, "line %d names no record: %s", i, lines[i].text);
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s.jbs", sources, lines[i].record);
        CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
              "the record %s is not a private regular file", path);
        size_t size = 0;
        char *data = read_file(path, &size), hex[65] = "";
        if (data)
            sha256_hex(data, size, hex);
        CHECK(strcmp(hex, lines[i].record) == 0, "the record %s hashes to %s", path, hex);
        /* Data, never code: no ELF header, the source as generated. */
        CHECK(data && size > 4 && memcmp(data, "jbs1\n", 5) == 0 && !memmem(data, size, "\177ELF", 4),
              "the record %s is not a source record", path);
        free(data);
    }
    /* Each record passes the rules and makes its line's key again on this host's cpu. */
    uint64_t checked = 0, keyed = 0;
    CHECK_OK(jb_manifest_sources_check(&checked, &keyed, manifest));
    CHECK(checked == 3 && keyed == 3, "%llu records checked, %llu keyed",
          (unsigned long long)checked, (unsigned long long)keyed);
    /* The record holds what rebuilds the kernel: the flag and the option, source and entry. */
    line *opts = NULL;
    for (int i = 0; i < n; i++)
        if (strncmp(lines[i].module, "srcrec_opts_", 12) == 0)
            opts = &lines[i];
    CHECK(opts, "no line of srcrec_opts");
    if (!opts)
        return check_summary("test_source_records");
    unsigned char digest[JB_SHA256_BYTES];
    CHECK(jb__hex_digest(opts->record, digest), "digest");
    jb_source_record record;
    CHECK_OK(jb__source_record_read(digest, jb__source_record_rules, &record));
    CHECK(record.flags == JB_COMPILE_FAST_MATH && record.num_options == 1 &&
              strcmp(record.options[0], "-fno-strict-aliasing") == 0 && record.num_entries == 1 &&
              strcmp(record.entries[0], "srcrec_opts") == 0 && strcmp(record.backend, "cpu") == 0 &&
              record.dialect == JB_DIALECT_C && strstr(record.source, "* 3.0f"),
          "the record of srcrec_opts does not hold its flags, option, entry and source");
    jb__source_record_free(&record);

    /* Readers of manifests read lines with a record, and with a field newer than it. */
    char future[8192];
    snprintf(future, sizeof future, "%s\tfuture=1\n", opts->text);
    write_file(hostile_manifest, future, strlen(future));
    CHECK_OK(jb_manifest_sources_check(&checked, &keyed, hostile_manifest));
    CHECK(checked == 1, "a line with a newer field: %llu checked", (unsigned long long)checked);
    jb_coverage_result coverage;
    CHECK_OK(jb_cache_coverage(&coverage, NULL, manifest, NULL, NULL));
    CHECK(coverage.memory == 3 && coverage.compile == 0, "coverage: memory %llu, compile %llu",
          (unsigned long long)coverage.memory, (unsigned long long)coverage.compile);

    /* Hostile records. */
    char good_path[512];
    snprintf(good_path, sizeof good_path, "%s/%s.jbs", sources, opts->record);
    size_t good_size = 0;
    char *good = read_file(good_path, &good_size);
    CHECK(good, "read %s", good_path);
    if (!good)
        return check_summary("test_source_records");
    good[good_size] = '\0';
    char hex[65], path[512];

    /* Content that is not what its name says. */
    sha256_hex("another record", 14, hex);
    snprintf(path, sizeof path, "%s/%s.jbs", sources, hex);
    write_file(path, good, good_size);
    hostile_line(opts, hex);
    refused("another hash", "does not hash to its name");
    unlink(path);
    /* Cut short, named by what is left (its hash matches). */
    sha256_hex(good, good_size - 7, hex);
    snprintf(path, sizeof path, "%s/%s.jbs", sources, hex);
    write_file(path, good, good_size - 7);
    hostile_line(opts, hex);
    refused("cut short", "another length");
    unlink(path);
    /* Larger than a record may be: refused before it is read. */
    size_t huge_size = JB_SOURCE_RECORD_MAX_BYTES + 1;
    char *huge = calloc(1, huge_size);
    memcpy(huge, good, good_size);
    sha256_hex(huge, huge_size, hex);
    snprintf(path, sizeof path, "%s/%s.jbs", sources, hex);
    write_file(path, huge, huge_size);
    free(huge);
    hostile_line(opts, hex);
    refused("too large", "past the");
    unlink(path);
    /* Names and options a kernel made through the API could not have. */
    refused_edit(good, opts, "entry srcrec_opts\n", "entry jb_evil\n", "a reserved entry name",
                 "entry name 'jb_evil'");
    refused_edit(good, opts, "entry srcrec_opts\n", "entry bad-name\n", "an entry name that is "
                 "not an identifier", "entry name 'bad-name'");
    refused_edit(good, opts, "option -fno-strict-aliasing\n",
                 "option -fno-strict-aliasing\noption -fplugin=/tmp/evil.so\n", "a refused option",
                 "'-fplugin=/tmp/evil.so' is refused");
    refused_edit(good, opts, "option -fno-strict-aliasing\n", "option -O0\n",
                 "an option the source does not state", "does not start with the line");
    refused_edit(good, opts, "flags 1\n", "flags 4096\n", "an unknown flag", "unknown compile flags");
    refused_edit(good, opts, "dialect c\n", "dialect cuda\n", "another backend's dialect",
                 "does not compile its dialect");
    refused_edit(good, opts, "source ", "target ../../x\nsource ", "a bad target",
                 "target_arch must be");
    /* Bounds checks on a whole-source module, which the API refuses. */
    line *whole = NULL;
    for (int i = 0; i < n; i++)
        if (strncmp(lines[i].module, "srcrec_module_", 14) == 0)
            whole = &lines[i];
    CHECK(whole, "no line of srcrec_module");
    char whole_path[512], flags[32];
    snprintf(whole_path, sizeof whole_path, "%s/%s.jbs", sources, whole ? whole->record : "");
    size_t whole_size = 0;
    char *whole_text = whole ? read_file(whole_path, &whole_size) : NULL;
    CHECK(whole_text, "read %s", whole_path);
    if (whole_text) {
        whole_text[whole_size] = '\0';
        snprintf(flags, sizeof flags, "flags %u\n", (unsigned)JB_COMPILE_BOUNDS_CHECKS);
        refused_edit(whole_text, whole, "flags 0\n", flags, "bounds checks on a module",
                     "bounds checks are for custom kernels");
        free(whole_text);
    }
    /* Another kernel's record under this kernel's line. */
    line *other = opts == &lines[0] ? &lines[1] : &lines[0];
    hostile_line(opts, other->record);
    refused("another kernel's record", "is of another kernel");
    /* A record that is not there. */
    sha256_hex("absent", 6, hex);
    hostile_line(opts, hex);
    refused("a missing record", "missing");
    /* A link at the record's name (to the good record), then a FIFO: never followed, never
     * waited on. */
    sha256_hex("a link", 6, hex);
    snprintf(path, sizeof path, "%s/%s.jbs", sources, hex);
    CHECK(symlink(good_path, path) == 0, "symlink: %s", strerror(errno));
    hostile_line(opts, hex);
    refused("a symbolic link", "is a symbolic link");
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo: %s", strerror(errno));
    refused("a FIFO", "is a FIFO");
    unlink(path);
    /* A sources/ others may read: not ours alone, so no record in it is trusted; made 0700
     * again, its good record passes. */
    hostile_line(opts, opts->record);
    CHECK(chmod(sources, 0750) == 0, "chmod sources/: %s", strerror(errno));
    uint64_t passed = 99;
    int status = jb_manifest_sources_check(&passed, &keyed, hostile_manifest);
    CHECK(status == JB_ERR_SYSTEM && strstr(jb_last_error_message(), "is not ours alone"),
          "a sources/ open to its group: status %d (%s)", status, jb_last_error_message());
    CHECK(chmod(sources, 0700) == 0, "chmod sources/: %s", strerror(errno));
    CHECK_OK(jb_manifest_sources_check(&passed, &keyed, hostile_manifest));
    CHECK(passed == 1, "the good record under a closed sources/: %llu passed",
          (unsigned long long)passed);
    /* A malformed reference in the manifest line. */
    hostile_line(opts, "not-hex");
    refused("a malformed reference", "malformed field");
    free(good);

    free_kernel_kinds(&kinds);
    char command[512];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK(system(command) == 0, "rm -rf %s", dir);
    return check_summary("test_source_records");
}
