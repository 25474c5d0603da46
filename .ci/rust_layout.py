#!/usr/bin/env python3
"""Checks the Rust side's layout, as the C side keeps its own: no module of the library takes part
in a circle of `use`s (a module that names another, directly or through others, that names it
back), and no Rust source file is longer than MAX_LINES.

Usage: rust_layout.py [REPOSITORY]   (default: the repository this script is in)
Exit status: 0 when both hold, 1 when not (each circle and each long file is named).

A module's edges are the paths it names that start with `crate::`, `super::` or `self::`
(in `use` trees and in code alike), and, in a file that declares child modules, paths that
start with a child's name. A path is followed down the module tree as far as it names modules;
a name the crate root re-exports (`pub use device::Device` makes `crate::Device`) counts as
the module it comes from. Comments, strings and character literals are left out first. The
crate root itself (src/lib.rs: declarations and re-exports) is no node of the graph.
"""

import os
import re
import subprocess
import sys

MAX_LINES = 600
LIBRARY_ROOT = "src/lib.rs"


def strip_comments_and_literals(text):
    """The text with comments, strings and character literals blanked (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
            out.append(" ")
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:  # a lifetime or a label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Module:
    def __init__(self, path, file, parent):
        self.path = path  # ("array",), ("soak", "decode"); () for the root
        self.file = file
        self.parent = parent
        self.children = {}
        self.code = ""

    @property
    def name(self):
        return "::".join(self.path) or "crate"


def child_file(module, name):
    """Where `mod name;` declared in `module` lives: name.rs or name/mod.rs beside it."""
    base = os.path.dirname(module.file)
    stem = os.path.basename(module.file)[:-3]
    if module.path and stem not in ("mod", "lib", "main"):
        base = os.path.join(base, stem)
    for candidate in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
        if os.path.exists(candidate):
            return candidate
    return None


def load(root_file):
    """The module tree from `root_file` down, each module with its comment-free code."""
    root = Module((), root_file, None)
    pending = [root]
    modules = []
    while pending:
        module = pending.pop()
        modules.append(module)
        with open(module.file, encoding="utf-8") as f:
            module.code = strip_comments_and_literals(f.read())
        for name in re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", module.code, re.M):
            file = child_file(module, name)
            if file is None:
                sys.exit(f"{module.file}: no file for `mod {name};`")
            child = Module(module.path + (name,), file, module)
            module.children[name] = child
            pending.append(child)
    return root, modules


def use_paths(tree, prefix=""):
    """Every path a `use` tree names: `crate::{a, b::{c, d}}` gives crate::a, crate::b::c, ..."""
    tree = tree.strip()
    at = tree.find("{")
    if at < 0:
        return [prefix + re.sub(r"\s+as\s+\w+$", "", tree)]
    head, body = tree[:at], tree[at + 1 : tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, c in enumerate(body):
        depth += c == "{"
        depth -= c == "}"
        if c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    paths = []
    for part in parts:
        if part.strip():
            paths += use_paths(part, prefix + head.strip())
    return paths


def named_paths(module):
    """The paths `module`'s code names, each a list of segments."""
    code = module.code
    paths = []
    for tree in re.findall(r"\buse\s+([^;]+);", code):
        paths += [p.split("::") for p in use_paths(tree)]
    code = re.sub(r"\buse\s+[^;]+;", " ", code)
    starts = ["crate", "super", "self"] + list(module.children)
    pattern = r"(?<![\w:])((?:%s)(?:\s*::\s*\w+)+)" % "|".join(map(re.escape, starts))
    paths += [re.sub(r"\s+", "", p).split("::") for p in re.findall(pattern, code)]
    return paths


def reexports(root):
    """Names the crate root re-exports, each with the module it comes from."""
    names = {}
    for tree in re.findall(r"\bpub\s+use\s+([^;]+);", root.code):
        for path in use_paths(tree):
            segments = path.split("::")
            if segments[0] == "crate":
                segments = segments[1:]
            module = root
            for segment in segments[:-1]:
                module = module.children.get(segment, module)
            if module is not root:
                names[segments[-1]] = module
    return names


def resolve(module, segments, root, exported):
    """The module a path leads to (the deepest module it names), or None."""
    first, rest = segments[0], segments[1:]
    if first == "crate":
        at = root
    elif first == "super":
        at = module.parent
        while rest and rest[0] == "super" and at is not None:
            at, rest = at.parent, rest[1:]
    elif first == "self":
        at = module
    elif first in module.children:
        at, rest = module.children[first], rest
    else:
        return None
    for segment in rest:
        if segment in at.children:
            at = at.children[segment]
        elif at is root and segment in exported:
            return exported[segment]
        else:
            break
    return at


def module_graph(root_file):
    root, modules = load(root_file)
    exported = reexports(root)
    graph = {m.name: set() for m in modules if m is not root}
    for module in modules:
        if module is root:
            continue
        for segments in named_paths(module):
            target = resolve(module, segments, root, exported)
            if target is not None and target is not root and target is not module:
                graph[module.name].add(target.name)
    return graph


def circles(graph):
    """Groups of modules that reach each other (Tarjan), and every simple circle among them."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for group in groups:
        members = set(group)
        for start in group:  # each circle once: from its least member, through greater ones
            path = [start]

            def walk(v):
                for w in sorted(graph[v] & members):
                    if w == start:
                        found.append(path + [start])
                    elif w > start and w not in path:
                        path.append(w)
                        walk(w)
                        path.pop()

            walk(start)
    return groups, found


def rust_files(repository):
    listed = subprocess.run(
        ["git", "-C", repository, "ls-files", "--cached", "--others", "--exclude-standard", "*.rs"],
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0:
        return sorted(f for f in listed.stdout.splitlines() if os.path.exists(os.path.join(repository, f)))
    files = []
    for folder, dirs, names in os.walk(repository):
        dirs[:] = [d for d in dirs if d not in ("target", ".git")]
        files += [os.path.relpath(os.path.join(folder, n), repository) for n in names if n.endswith(".rs")]
    return sorted(files)


def main():
    repository = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    failed = False

    graph = module_graph(os.path.join(repository, LIBRARY_ROOT))
    groups, found = circles(graph)
    edges = sum(len(targets) for targets in graph.values())
    if groups:
        failed = True
        print(f"{len(found)} module circles in the library ({LIBRARY_ROOT}):")
        for circle in found:
            print("  " + " -> ".join(circle))
        for group in groups:
            print("modules that reach each other: " + ", ".join(group))
    else:
        print(f"library modules: {len(graph)}, {edges} edges, no circle")

    long_files = []
    files = rust_files(repository)
    for file in files:
        with open(os.path.join(repository, file), encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES:
            long_files.append((file, lines))
    if long_files:
        failed = True
        for file, lines in long_files:
            print(f"{file}: {lines} lines (at most {MAX_LINES}: split it by what its parts do)")
    else:
        print(f"Rust files: {len(files)}, none over {MAX_LINES} lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
