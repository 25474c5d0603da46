/*
 * A kernel's or module's own compiler options: more options for the backend's compiler, folders
 * searched for #include, and the target architecture. Each is checked before it is kept (one
 * argument each, never through a shell; nothing that moves the output, runs other programs or
 * links; folders absolute and writable by us alone), refused in a setuid host, copied, and
 * written into the source's first line so that it is part of the module name and disk key.
 */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#define MAX_OPTIONS 64
#define MAX_OPTION_LENGTH 256
#define MAX_INCLUDE_DIRS 16
#define MAX_ARCH_LENGTH 64

/* Options the library sets itself or that change what a compile is: where its output goes
 * (-o, -E, -S, -c, -M...), what it runs or loads (-B, -fplugin, -specs, -wrapper), what it links
 * (-l, -L, -Wl, -Xlinker, -fuse-ld, -nostdlib, -shared), what has its own field (-I and
 * -march, --gpu-architecture, --offload-arch, -arch), what reads the source otherwise than
 * the bounds checks do, and what leaves the platform's ABI. An entry ending in '*' is a
 * prefix. */
static const char *const refused_options[] = {
    "-o*", "-E", "-S", "-c", "-M*", "-x*", "--output*", "-save-temps*", "-B*", "-fplugin*",
    "-specs*", "--specs*", "-wrapper*", "--sysroot*", "-l*", "-L*", "-Wl,*", "-Xlinker*",
    "-fuse-ld*", "-nostdlib*", "-shared", "-I*", "--include-path*", "-march*", "-arch*",
    "--gpu-architecture*", "--offload-arch*", "-include*", "-imacros*", "-iquote*", "-isystem*",
    "-idirafter*", "-iprefix*", "-iwithprefix*", "--pre-include*", "-fdump*", "-dump*",
    "-D*", "-U*", "--define-macro*", "--undefine-macro*",
    /* The driver's ways of passing any of the above on (-Wp,-MD,FILE writes FILE). */
    "-Wp,*", "-Xpreprocessor*", "-Wa,*", "-Xassembler*", "-Xclang*",
    /* Source read otherwise than the bounds checks read it: in another charset (GBK's second
     * byte may be a backslash), with trigraphs, or with comments that paste names together. */
    "-finput-charset*", "-trigraphs", "-traditional*",
    /* Code the library would call, or whose data it would read, past the platform's ABI
     * (calling convention, registers, layout), or a sanitizer runtime loaded into the process. */
    "-mabi*", "-m16", "-m32", "-mx32", "-mregparm*", "-mrtd", "-malign-double", "-fcall-used-*",
    "-fcall-saved-*", "-ffixed-*", "-fpack-struct*", "-fshort-enums", "-fshort-wchar",
    "-freg-struct-return", "-fpcc-struct-return", "-fleading-underscore", "-fsanitize*",
};

static const char *refused_by(const char *option)
{
    for (size_t i = 0; i < sizeof refused_options / sizeof *refused_options; i++) {
        const char *r = refused_options[i];
        size_t n = strlen(r);
        if (r[n - 1] == '*' ? strncmp(option, r, n - 1) == 0 : strcmp(option, r) == 0)
            return r;
    }
    return NULL;
}

/* True when `text` is printable ASCII that cannot end the source comment it is written in. */
static bool printable(const char *text)
{
    for (const char *c = text; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            return false;
    return !strstr(text, "*/");
}

int jb__compiler_options_check(const char *owner, const jb_compile_options *o)
{
    bool secure = getauxval(AT_SECURE) != 0;
    JB_RETURN_IF(secure && (o->num_extra || o->num_include_dirs), JB_ERR_INVALID_ARGUMENT,
                 "'%s': compiler options and include folders are refused in a setuid (or "
                 "setgid, or capability-raised) program: its caller must not choose what the "
                 "compiler reads or runs", owner);
    JB_RETURN_IF(o->num_extra > MAX_OPTIONS || (o->num_extra && !o->extra),
                 JB_ERR_INVALID_ARGUMENT, "'%s': compiler options are NULL or more than %d",
                 owner, MAX_OPTIONS);
    for (size_t i = 0; i < o->num_extra; i++) {
        const char *option = o->extra[i];
        JB_RETURN_IF(!option, JB_ERR_INVALID_ARGUMENT, "'%s': compiler option %zu is NULL", owner,
                     i);
        size_t len = strlen(option);
        JB_RETURN_IF(len < 2 || len > MAX_OPTION_LENGTH || option[0] != '-' || !printable(option),
                     JB_ERR_INVALID_ARGUMENT,
                     "'%s': compiler option %zu must be one argument of 2 to %d printable "
                     "characters starting with '-' (and no '*/')", owner, i, MAX_OPTION_LENGTH);
        const char *refused = refused_by(option);
        JB_RETURN_IF(refused, JB_ERR_INVALID_ARGUMENT,
                     "'%s': compiler option '%s' is refused (%s): it would move the output, run "
                     "or link something, read the source otherwise than the bounds checks do, "
                     "leave the ABI the library calls the code with, or it has its own field "
                     "(defines, include_dirs, target_arch)",
                     owner, option, refused);
    }
    JB_RETURN_IF(o->num_include_dirs > MAX_INCLUDE_DIRS || (o->num_include_dirs && !o->include_dirs),
                 JB_ERR_INVALID_ARGUMENT, "'%s': include folders are NULL or more than %d", owner,
                 MAX_INCLUDE_DIRS);
    for (size_t i = 0; i < o->num_include_dirs; i++) {
        const char *dir = o->include_dirs[i];
        JB_RETURN_IF(!dir || dir[0] != '/' || strlen(dir) > 1024 || !printable(dir),
                     JB_ERR_INVALID_ARGUMENT,
                     "'%s': include folder %zu must be an absolute path of printable characters "
                     "(and no '*/')", owner, i);
        char resolved[4096], why[4096 + 256];
        /* A header another user can replace is code another user writes. */
        JB_RETURN_IF(!jb__trusted_folder_path(dir, "include_dirs", resolved, sizeof resolved, why,
                                              sizeof why),
                     JB_ERR_INVALID_ARGUMENT, "'%s': include folder %s is not ours alone: %s",
                     owner, dir, why);
    }
    if (o->target_arch) {
        size_t len = strlen(o->target_arch);
        bool ok = len >= 1 && len <= MAX_ARCH_LENGTH;
        for (size_t i = 0; ok && i < len; i++) {
            char c = o->target_arch[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 strchr("_.+:-", c);
        }
        JB_RETURN_IF(!ok, JB_ERR_INVALID_ARGUMENT,
                     "'%s': target_arch must be 1 to %d letters, digits and _ . + : - (sm_90, "
                     "gfx90a, x86-64-v3, native)", owner, MAX_ARCH_LENGTH);
    }
    return JB_OK;
}

static char **copy_strings(const char *const *strings, size_t count, bool *ok)
{
    if (!count)
        return NULL;
    char **copy = calloc(count, sizeof *copy);
    *ok = *ok && copy;
    for (size_t i = 0; copy && i < count; i++)
        *ok = *ok && (copy[i] = jb__strdup(strings[i])) != NULL;
    return copy;
}

int jb__compile_options_copy(jb_compile_options *out, const jb_compile_options *o)
{
    bool ok = true;
    *out = (jb_compile_options){.flags = o->flags,
                                .num_extra = o->num_extra,
                                .num_include_dirs = o->num_include_dirs};
    out->extra = (const char *const *)copy_strings(o->extra, o->num_extra, &ok);
    out->include_dirs = (const char *const *)copy_strings(o->include_dirs, o->num_include_dirs, &ok);
    if (o->target_arch)
        ok = ok && (out->target_arch = jb__strdup(o->target_arch)) != NULL;
    if (!ok) {
        jb__compile_options_free(out);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for compiler options");
    }
    return JB_OK;
}

void jb__compile_options_free(jb_compile_options *o)
{
    for (size_t i = 0; o->extra && i < o->num_extra; i++)
        free((void *)o->extra[i]);
    for (size_t i = 0; o->include_dirs && i < o->num_include_dirs; i++)
        free((void *)o->include_dirs[i]);
    free((void *)o->extra);
    free((void *)o->include_dirs);
    free((void *)o->target_arch);
    *o = (jb_compile_options){0};
}

void jb__compile_options_describe(jb_strbuf *sb, const jb_compile_options *o)
{
    jb__strbuf_appendf(sb, "compile flags %u", o->flags);
    for (size_t i = 0; i < o->num_extra; i++)
        jb__strbuf_appendf(sb, "%s%s", i ? " " : "; options ", o->extra[i]);
    for (size_t i = 0; i < o->num_include_dirs; i++)
        jb__strbuf_appendf(sb, "%s%s", i ? " " : "; include ", o->include_dirs[i]);
    if (o->target_arch)
        jb__strbuf_appendf(sb, "; target %s", o->target_arch);
}
