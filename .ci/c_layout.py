#!/usr/bin/env python3
"""Checks the C library's layout (cbridge/src), as rust_layout.py checks the crate's:

1. No two source files call each other in a loop, and no two folders (layers) do. A file calls
   another when its object file leaves a symbol undefined (`nm`: U) that the other's object file
   defines, so calls and data references count, words in comments do not.
2. Calls go down the layers only: the folders are ordered in LAYERS, lowest first, and a file may
   call into its own folder and the folders below it, never above.
3. Every C source and header under cbridge/src is named in the README's map of the C library
   (a table row's first cell), and every file the map names exists.
4. No private header is longer than MAX_HEADER_LINES.

Usage: c_layout.py OBJECT_FOLDER [OBJECT_FOLDER ...]
  Each OBJECT_FOLDER is a build's obj/ (cbridge/build-cuda-rocm/obj holds every backend's). An
  object file obj/DIR/NAME.o (or NAME.cuda.o, NAME.rocm.o: one GPU source compiled per vendor)
  stands for src/DIR/NAME.c.
Exit status: 0 when all hold, 1 when not; each loop is printed with the names that tie it.
"""

import os
import re
import subprocess
import sys

# The folders of cbridge/src, lowest first: a file calls only into its own folder and below
# (README.md's map says what each owns). The backends sit above store/ (the cpu backend's
# compile folder may live in the cache folder) and below exec/ (the device table enumerates
# them); everything above reaches them through the backend table, never by name.
LAYERS = ["base", "store", "cpu", "gpu", "exec", "cache", "kernels"]
MAX_HEADER_LINES = 500
README = "README.md"
SOURCE_ROOT = "cbridge/src"


def repository():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_of(object_path, object_root):
    """The source file (relative to cbridge/src) an object file was compiled from."""
    relative = os.path.relpath(object_path, object_root)
    folder, name = os.path.split(relative)
    stem = re.sub(r"(\.cuda|\.rocm)?\.o$", "", name)
    return os.path.join(folder, stem + ".c")


def symbols(object_path):
    """(defined, undefined) global symbol names of one object file."""
    out = subprocess.run(["nm", "-P", "-g", object_path], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind == "U":
            undefined.add(name)
        elif kind not in ("w", "v"):
            defined.add(name)
    return defined, undefined


def call_graph(object_roots):
    """{file: {file it calls: {symbols}}} over every object file of the given builds."""
    defined_in, needs = {}, {}
    for root in object_roots:
        for folder, _, names in os.walk(root):
            for name in sorted(names):
                if not name.endswith(".o"):
                    continue
                path = os.path.join(folder, name)
                source = source_of(path, root)
                defined, undefined = symbols(path)
                for symbol in defined:
                    defined_in.setdefault(symbol, set()).add(source)
                needs.setdefault(source, set()).update(undefined)
    graph = {source: {} for source in needs}
    for source, undefined in needs.items():
        for symbol in undefined:
            for target in defined_in.get(symbol, ()):
                if target != source:
                    graph[source].setdefault(target, set()).add(symbol)
    return graph


def folder_of(source):
    return os.path.dirname(source) or "."


def folder_graph(graph):
    folders = {}
    for source, calls in graph.items():
        edges = folders.setdefault(folder_of(source), {})
        for target, names in calls.items():
            if folder_of(target) != folder_of(source):
                edges.setdefault(folder_of(target), set()).update(
                    f"{os.path.basename(source)} -> {os.path.basename(target)}: {n}" for n in names)
    return folders


def strongly_connected(graph):
    """Tarjan's components of more than one node, each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def report_loops(kind, graph):
    problems = []
    for component in strongly_connected(graph):
        lines = [f"{kind} call each other in a loop: {' <-> '.join(component)}"]
        members = set(component)
        for source in component:
            for target in sorted(graph[source]):
                if target in members:
                    names = sorted(graph[source][target])
                    shown = ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
                    lines.append(f"    {source} -> {target}: {shown}")
        problems.append("\n".join(lines))
    return problems


def report_upward_calls(graph):
    problems = []
    for source, calls in sorted(graph.items()):
        layer = folder_of(source)
        if layer not in LAYERS:
            problems.append(f"{source}: folder {layer!r} is not one of the layers {LAYERS}")
            continue
        for target, names in sorted(calls.items()):
            target_layer = folder_of(target)
            if target_layer in LAYERS and LAYERS.index(target_layer) > LAYERS.index(layer):
                problems.append(f"{source} calls up into {target_layer}/ ({target}): "
                                f"{', '.join(sorted(names))}")
    return problems


def report_map(repo):
    """Files under cbridge/src that the README's map leaves out, and map entries with no file."""
    with open(os.path.join(repo, README), encoding="utf-8") as f:
        text = f.read()
    start = text.find("<!-- c-map -->")
    end = text.find("<!-- /c-map -->")
    if start < 0 or end < start:
        return [f"{README} has no map of the C files between <!-- c-map --> and <!-- /c-map -->"]
    named = set()
    for line in text[start:end].splitlines():
        if line.startswith("|"):
            first_cell = line.split("|")[1]
            named.update(re.findall(r"`([A-Za-z0-9_./]+\.[ch])`", first_cell))
    present = set()
    root = os.path.join(repo, SOURCE_ROOT)
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith((".c", ".h")):
                present.add(os.path.relpath(os.path.join(folder, name), root))
    problems = [f"{SOURCE_ROOT}/{p} is not in {README}'s map of the C files" for p in sorted(present - named)]
    problems += [f"{README}'s map names {p}, which is not under {SOURCE_ROOT}" for p in sorted(named - present)]
    return problems


def report_long_headers(repo):
    problems = []
    root = os.path.join(repo, SOURCE_ROOT)
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".h"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    count = sum(1 for _ in f)
                if count > MAX_HEADER_LINES:
                    problems.append(f"{os.path.relpath(path, repo)}: {count} lines "
                                    f"(a private header holds at most {MAX_HEADER_LINES})")
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    for root in argv[1:]:
        if not os.path.isdir(root):
            print(f"c_layout.py: {root} is no folder of object files (build the library first)",
                  file=sys.stderr)
            return 2
    repo = repository()
    graph = call_graph(argv[1:])
    problems = report_loops("files", graph)
    problems += report_loops("folders", folder_graph(graph))
    problems += report_upward_calls(graph)
    problems += report_map(repo)
    problems += report_long_headers(repo)
    for problem in problems:
        print(problem)
    files = len(graph)
    edges = sum(len(calls) for calls in graph.values())
    if problems:
        print(f"C layout: {len(problems)} problem(s) in {files} files ({edges} calls between files)")
        return 1
    print(f"C layout: {files} files, {edges} calls between files, no loop, every call goes down "
          f"the layers ({' < '.join(LAYERS)}), the map names every file")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
