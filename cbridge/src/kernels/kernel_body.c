/*
 * A body's words: which names it uses, and the bounds-checked rewrite, in which every subscript
 * of a kernel's array, `x[i]`, becomes `jb_at_<slot>(i)` (a checked access the generated code
 * defines). The scan knows C's tokens well enough for that: comments, string and character
 * literals, numbers (whose letters are not names, digit separators included), member names
 * after `.` and `->` (never the kernel's names), and #include lines, which are copied as they
 * are. Where the scan could be told one thing and the compiler another, a checked text is
 * refused instead (jb__bounds_text_check): a name made by pasting or split by a line
 * continuation, an #include, asm, a trigraph, or a #define of a name the generated code relies
 * on.
 */
#include "kernels.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Words that C or CUDA C++ reserve, plus the names the generated code itself uses. */
static const char *const reserved_words[] = {
    "alignas", "alignof", "and", "asm", "auto", "bool", "break", "case", "catch", "char",
    "class", "const", "constexpr", "const_cast", "continue", "decltype", "default", "delete",
    "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false",
    "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace",
    "new", "noexcept", "not", "nullptr", "operator", "or", "private", "protected", "public",
    "register", "reinterpret_cast", "restrict", "return", "short", "signed", "sizeof", "static",
    "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
    "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
    "virtual", "void", "volatile", "while", "xor", "_Bool", "_Atomic", "_Generic", "_Noreturn",
    "_Thread_local", "thread_index", "block_index", "block_size", "thread_in_block",
    "grid_blocks", "blockIdx", "blockDim", "threadIdx", "gridDim", "warpSize",
    "__global__", "__device__", "__shared__", "__restrict__", "f16", "bf16", "f32", "f64", "i8",
    "u8", "i32", "u32", "i64", "i16", "u16", "u64", "f16_to_f32", "f32_to_f16", "bf16_to_f32",
    "f32_to_bf16", "main", "atomic_add", "atomic_exchange", "atomic_min", "atomic_max",
};

/* Returns a static reason when `s` cannot be pasted into source as a name, else NULL. */
static const char *identifier_problem(const char *s)
{
    if (!s)
        return "is NULL";
    size_t len = strlen(s);
    if (len == 0)
        return "is empty";
    if (len > JB_MAX_IDENTIFIER)
        return "is longer than 128 characters";
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return "does not start with a letter or '_'";
    for (size_t i = 1; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return "holds a character other than letters, digits and '_'";
    }
    if (strncmp(s, "jb_", 3) == 0 || strncmp(s, "__", 2) == 0)
        return "uses a prefix reserved for the generated code ('jb_' or '__')";
    for (size_t i = 0; i < sizeof reserved_words / sizeof *reserved_words; i++)
        if (strcmp(s, reserved_words[i]) == 0)
            return "is a reserved word";
    return NULL;
}

bool jb__identifier_ok(const char *s, const char **problem)
{
    *problem = identifier_problem(s);
    return *problem == NULL;
}

#define MAX_NESTING 256 /* brackets open at once; a deeper body is refused */

static bool is_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_part(char c)
{
    return is_start(c) || (c >= '0' && c <= '9');
}

/* The length of a line continuation at `p`: a backslash, blanks (which GCC allows there), and a
 * newline; 0 when there is none. */
static size_t continuation_at(const char *p)
{
    if (*p != '\\')
        return 0;
    size_t n = 1;
    while (p[n] == ' ' || p[n] == '\t' || p[n] == '\r' || p[n] == '\f' || p[n] == '\v')
        n++;
    return p[n] == '\n' ? n + 1 : 0;
}

void jb__splice_lines(const char *text, jb_strbuf *out)
{
    jb__strbuf_append(out, "");
    for (const char *p = text; *p;) {
        size_t skip = continuation_at(p), run = 0;
        if (skip) {
            p += skip;
            continue;
        }
        while (p[run] && (p[run] != '\\' || !continuation_at(p + run)))
            run++;
        if (run > INT_MAX)
            run = INT_MAX;
        jb__strbuf_appendf(out, "%.*s", (int)run, p);
        p += run;
    }
}

/* Past the comment, literal, number or #include line at `p`, or `p` when there is none. */
static const char *skip_other(const char *p, bool line_start)
{
    if (p[0] == '/' && p[1] == '/') {
        while (*p && *p != '\n')
            p++;
        return p;
    }
    if (p[0] == '/' && p[1] == '*') {
        const char *end = strstr(p + 2, "*/");
        return end ? end + 2 : p + strlen(p);
    }
    if (*p == '"' || *p == '\'') {
        char quote = *p++;
        while (*p && *p != quote && *p != '\n')
            p += p[0] == '\\' && p[1] ? 2 : 1;
        return *p == quote ? p + 1 : p;
    }
    if ((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')) {
        /* A preprocessing number: digits, letters, dots, a sign after an exponent, and digit
         * separators (1'000, C++14 and C23): a quote there opens no character literal. */
        for (p++; is_part(*p) || *p == '.' ||
                  ((*p == '+' || *p == '-') && strchr("eEpP", p[-1])) ||
                  (*p == '\'' && is_part(p[1]));
             p++)
            ;
        return p;
    }
    if (line_start && *p == '#') {
        const char *q = p + 1;
        while (*q == ' ' || *q == '\t')
            q++;
        if (strncmp(q, "include", 7) == 0 && !is_part(q[7])) {
            while (*p && *p != '\n')
                p++;
            return p;
        }
    }
    return p;
}

/* Walks `text`, calling `visit` for each name that is not a member name; `visit` returns how
 * much of the text from the name on it consumed (its own output), or 0 to copy the name.
 * `bracket` (if not NULL) is called for each '[' and ']' of the code and returns whether it
 * wrote that character's output itself. The rest is copied to `out` when it is not NULL. */
typedef size_t (*name_visitor)(void *ctx, const char *text, const char *name, size_t len,
                               jb_strbuf *out);
typedef bool (*bracket_visitor)(void *ctx, char c, jb_strbuf *out);

static void walk(const char *text, name_visitor visit, bracket_visitor bracket, void *ctx,
                 jb_strbuf *out)
{
    bool line_start = true, after_member = false;
    for (const char *p = text; *p;) {
        /* Tokens are taken whole, so that `a-->x` is `a -- > x` (no member follows) and `->`
         * is one token; nor does a member follow `...`. */
        bool arrow = p[0] == '-' && p[1] == '>';
        if (arrow || (p[0] == '-' && p[1] == '-') || (p[0] == '.' && p[1] == '.' && p[2] == '.')) {
            size_t len = p[0] == '-' ? 2 : 3;
            if (out)
                jb__strbuf_appendf(out, "%.*s", (int)len, p);
            p += len;
            line_start = false;
            after_member = arrow;
            continue;
        }
        const char *next = skip_other(p, line_start);
        if (next != p) {
            if (out)
                jb__strbuf_appendf(out, "%.*s", (int)(next - p), p);
            p = next;
            line_start = false;
            after_member = false;
            continue;
        }
        if (is_start(*p)) {
            size_t len = 1;
            while (is_part(p[len]))
                len++;
            size_t used = after_member ? 0 : visit(ctx, text, p, len, out);
            if (used == 0) {
                if (out)
                    jb__strbuf_appendf(out, "%.*s", (int)len, p);
                used = len;
            }
            p += used;
            line_start = false;
            after_member = false;
            continue;
        }
        char c = *p;
        bool placed = (c == '[' || c == ']') && bracket && bracket(ctx, c, out);
        if (out && !placed)
            jb__strbuf_appendf(out, "%c", c);
        p++;
        if (c == '\n')
            line_start = true;
        else if (c != ' ' && c != '\t' && c != '\r')
            line_start = false;
        /* A member name follows `.` on its line: after a newline it may be a directive's
         * last `.` (`#define M(s) s.`), and the name on the next line a use of an array. */
        if (c == '.')
            after_member = true;
        else if (c != ' ' && c != '\t' && c != '\r')
            after_member = false;
    }
}

typedef struct mention_ctx {
    const char *name;
    bool found;
} mention_ctx;

static size_t note_mention(void *ctx, const char *text, const char *name, size_t len,
                           jb_strbuf *out)
{
    (void)text, (void)out;
    mention_ctx *m = ctx;
    if (strlen(m->name) == len && strncmp(m->name, name, len) == 0)
        m->found = true;
    return 0;
}

bool jb__source_mentions(const char *text, const char *name)
{
    mention_ctx m = {name, false};
    if (text)
        walk(text, note_mention, NULL, &m, NULL);
    return m.found;
}

typedef struct rewrite_ctx {
    const char *kernel, *what;
    const char *const *names;
    size_t num_names;
    bool strict;
    int status;
    /* Each open '[': whether it opened a checked access, which its ']' closes with ')'. */
    bool checked[MAX_NESTING];
    size_t depth;
} rewrite_ctx;

/* The line of `at` in `text`, counted from 1, for messages. */
static int line_of(const char *text, const char *at)
{
    int line = 1;
    for (const char *p = text; p < at; p++)
        line += *p == '\n';
    return line;
}

/* Past spaces and tabs. */
static const char *skip_spaces(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static size_t rewrite_name(void *ctx, const char *text, const char *name, size_t len,
                           jb_strbuf *out)
{
    rewrite_ctx *r = ctx;
    if (r->status != JB_OK)
        return 0;
    if (len > 3 && strncmp(name, "jb_", 3) == 0) {
        r->status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                             "kernel '%s': its %s uses '%.*s' (line %d): names starting with "
                             "jb_ belong to the generated code of a bounds-checked kernel",
                             r->kernel, r->what, (int)len, name, line_of(text, name));
        return 0;
    }
    /* `atomic_add(y,`: the array's name is pasted into its checked element access. */
    if (jb__is_atomic_word(name, len)) {
        const char *array = skip_spaces(name + len);
        if (*array == '(') {
            array = skip_spaces(array + 1);
            size_t n = 0;
            while (is_part(array[n]))
                n++;
            const char *comma = skip_spaces(array + n);
            for (size_t slot = 0; *comma == ',' && slot < r->num_names; slot++)
                if (strlen(r->names[slot]) == n && strncmp(r->names[slot], array, n) == 0) {
                    jb__strbuf_appendf(out, "%.*s", (int)(comma + 1 - name), name);
                    return (size_t)(comma + 1 - name);
                }
        }
        return 0;
    }
    for (size_t slot = 0; slot < r->num_names; slot++) {
        if (strlen(r->names[slot]) != len || strncmp(r->names[slot], name, len) != 0)
            continue;
        const char *after = name + len;
        while (*after == ' ' || *after == '\t')
            after++;
        if (*after == '[') {
            if (r->depth == MAX_NESTING) {
                r->status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                                     "kernel '%s': its %s nests brackets more than %d deep",
                                     r->kernel, r->what, MAX_NESTING);
                return 0;
            }
            r->checked[r->depth++] = true;
            jb__strbuf_appendf(out, "jb_at_%zu(", slot);
            return (size_t)(after - name) + 1;
        }
        if (r->strict)
            r->status = jb__fail(
                JB_ERR_INVALID_ARGUMENT,
                "kernel '%s': its %s uses array '%s' other than as %s[index] (line %d): a "
                "bounds-checked kernel reaches its arrays only through subscripts (a local or "
                "parameter of that name must be renamed)",
                r->kernel, r->what, r->names[slot], r->names[slot], line_of(text, name));
        return 0;
    }
    return 0;
}

static bool place_bracket(void *ctx, char c, jb_strbuf *out)
{
    rewrite_ctx *r = ctx;
    if (r->status != JB_OK)
        return false;
    if (c == '[') { /* a plain bracket: a checked one was consumed with its name */
        if (r->depth == MAX_NESTING) {
            r->status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                                 "kernel '%s': its %s nests brackets more than %d deep",
                                 r->kernel, r->what, MAX_NESTING);
            return false;
        }
        r->checked[r->depth++] = false;
        return false;
    }
    if (r->depth > 0 && r->checked[--r->depth]) {
        jb__strbuf_append(out, ")");
        return true;
    }
    return false;
}

int jb__bounds_rewrite(const char *kernel, const char *what, const char *text,
                       const char *const *names, size_t num_names, bool strict, jb_strbuf *out)
{
    rewrite_ctx r = {.kernel = kernel, .what = what, .names = names, .num_names = num_names,
                     .strict = strict, .status = JB_OK};
    walk(text, rewrite_name, place_bracket, &r, out);
    if (r.status == JB_OK && out->failed)
        r.status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the source of kernel '%s'",
                            kernel);
    return r.status;
}

/* Names the generated code of a checked kernel uses besides its own jb_ names, the kernel's
 * names and the reserved words: a #define of one would change what a checked access means. */
static const char *const generated_names[] = {
    "uint64_t", "int64_t", "uint32_t", "int32_t", "uint16_t", "int16_t", "uint8_t", "int8_t",
    "size_t", "memcpy", "memset", "atomicCAS", "atomicExch", "NULL",
};

/* Why `name` (len bytes) may not be #defined or #undefined in a checked text, or NULL. */
static const char *define_problem(const char *name, size_t len, const char *const *names,
                                  size_t num_names)
{
    char copy[160];
    if (len >= sizeof copy)
        return NULL; /* longer than any name the check protects */
    memcpy(copy, name, len);
    copy[len] = '\0';
    const char *problem;
    if (!jb__identifier_ok(copy, &problem))
        return "is reserved (a keyword, a dtype, a helper, or a jb_ or __ name)";
    for (size_t i = 0; i < sizeof generated_names / sizeof *generated_names; i++)
        if (strcmp(copy, generated_names[i]) == 0)
            return "is a name the generated code uses";
    static const char *const companions[] = {"", "_size", "_shape", "_ndim"};
    for (size_t i = 0; i < num_names; i++) {
        size_t n = strlen(names[i]);
        for (size_t c = 0; c < sizeof companions / sizeof *companions; c++)
            if (len == n + strlen(companions[c]) && strncmp(copy, names[i], n) == 0 &&
                strcmp(copy + n, companions[c]) == 0)
                return "is one of the kernel's arrays or their sizes, shapes and ndims";
    }
    return NULL;
}

/* Past spaces, tabs and comments on one line. */
static const char *skip_blanks(const char *p)
{
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
            continue;
        }
        return p;
    }
}

/* Whether a checked text may hold the directive named by `len` bytes at `name`: none that
 * brings in text from elsewhere (#include, #include_next, #import, #embed). */
static bool directive_allowed(const char *name, size_t len)
{
    static const char *const allowed[] = {
        "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else",
        "endif", "line", "error", "warning", "pragma",
    };
    if (len == 0)
        return true; /* a null directive, or a line marker (# 12 "file") */
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++)
        if (strlen(allowed[i]) == len && strncmp(name, allowed[i], len) == 0)
            return true;
    return false;
}

/* The first trigraph in `text` (?? and one of =/'()!<>-), or NULL. ISO C modes (-std=c11,
 * -ansi) replace each before anything else, inside literals and comments too, so a text that
 * holds one is read otherwise by the compiler than by the scan: ?? plus ' ends a character
 * literal one character early, ?? plus / continues a line. */
static const char *trigraph_in(const char *text)
{
    for (const char *p = strstr(text, "??"); p; p = strstr(p + 1, "??"))
        if (p[2] && strchr("=/'()!<>-", p[2]))
            return p;
    return NULL;
}

int jb__bounds_text_check(const char *kernel, const char *what, const char *text,
                          const char *const *names, size_t num_names)
{
    const char *trigraph = trigraph_in(text);
    if (trigraph) {
        int line = 1;
        for (const char *c = text; c < trigraph; c++)
            line += *c == '\n';
        return jb__fail(JB_ERR_INVALID_ARGUMENT,
                        "kernel '%s': its %s holds the trigraph '%.3s' (line %d), which a compiler "
                        "in an ISO C mode reads as another character, inside literals and "
                        "comments too, where the checks would not see it: a bounds-checked "
                        "kernel refuses it (write '?\\?' in a literal)",
                        kernel, what, trigraph, line);
    }
    bool line_start = true;
    for (const char *p = text; *p;) {
        const char *problem = NULL, *at = p;
        char word[160] = "";
        if (line_start && *p == '#') {
            const char *q = skip_blanks(p + 1);
            size_t len = 0;
            while (is_part(q[len]))
                len++;
            if (!directive_allowed(q, len))
                problem = "a directive other than #define, #undef, #if and its kin, #line, "
                          "#error, #warning and #pragma (an #include's text would escape the "
                          "checks)";
            if ((len == 6 && strncmp(q, "define", 6) == 0) ||
                (len == 5 && strncmp(q, "undef", 5) == 0)) {
                const char *name = skip_blanks(q + len);
                size_t n = 0;
                while (is_part(name[n]))
                    n++;
                const char *why = define_problem(name, n, names, num_names);
                if (why) {
                    snprintf(word, sizeof word, "%.*s", (int)(n < 100 ? n : 100), name);
                    problem = why;
                    at = name;
                }
            }
        }
        if (!problem && (*p >= '0' && *p <= '9')) {
            const char *end = skip_other(p, false);
            if (memchr(p, '\'', (size_t)(end - p)))
                problem = "a digit separator (C before C23 reads 1'0 as 1 and a character "
                          "literal, C++ as 10)";
        }
        if (!problem) {
            const char *next = skip_other(p, false);
            if (next != p) {
                /* A comment is a blank: a # after one still opens a directive. */
                if (!(p[0] == '/' && p[1] == '*'))
                    line_start = false;
                p = next;
                continue;
            }
        }
        if (!problem && p[0] == '%' && p[1] == ':')
            problem = "%: (the digraph of #, which the checks would not see)";
        if (!problem && p[0] == '#' && p[1] == '#')
            problem = "## (a name pasted together would escape the checks)";
        if (!problem && p[0] == '\\' && (p[1] == '\n' || (p[1] == '\r' && p[2] == '\n')) &&
            p > text && is_part(p[-1]) && is_part(p[p[1] == '\r' ? 3 : 2]))
            problem = "a line continuation inside a name (the name would escape the checks)";
        if (!problem && is_start(*p)) {
            size_t len = 1;
            while (is_part(p[len]))
                len++;
            if ((len == 3 && strncmp(p, "asm", 3) == 0) || (len == 5 && strncmp(p, "__asm", 5) == 0) ||
                (len == 7 && strncmp(p, "__asm__", 7) == 0))
                problem = "asm";
            else if (p[len - 1] == 'R' && p[len] == '"')
                problem = "a raw string literal (whose text the checks would read as code)";
            else {
                p += len;
                line_start = false;
                continue;
            }
        }
        if (problem) {
            int line = 1;
            for (const char *c = text; c < at; c++)
                line += *c == '\n';
            if (word[0])
                return jb__fail(JB_ERR_INVALID_ARGUMENT,
                                "kernel '%s': its %s defines '%s' (line %d), which %s: a "
                                "bounds-checked kernel keeps it", kernel, what, word, line,
                                problem);
            return jb__fail(JB_ERR_INVALID_ARGUMENT,
                            "kernel '%s': its %s holds %s (line %d), which a bounds-checked "
                            "kernel refuses", kernel, what, problem, line);
        }
        if (*p == '\n')
            line_start = true;
        else if (*p != ' ' && *p != '\t' && *p != '\r')
            line_start = false;
        p++;
    }
    return JB_OK;
}
