#!/usr/bin/env python3
"""Import circles between sibling modules, for CI: for every module with children (a crate's
root included), an edge A -> B between two of its children when code in A's files names a path
into B (`crate::`, `super::`, `self::` paths, in `use` items, `use` groups or inline; comments
left out). A strongly connected component of more than one module is a circle: each is
printed, and the exit status is 1 if there is any. Reads source text (no compiler): a path
through a re-export counts for the module that re-exports it.

Usage: .ci/import_circles.py <crate src dir>...
"""
import os, re, sys
from collections import defaultdict

def module_path(src, f):
    rel = os.path.relpath(f, src)[:-3].split(os.sep)
    if rel[-1] in ('mod', 'lib', 'main'):
        rel = rel[:-1]
    return tuple(rel)

PATH_RE = re.compile(r'\b((?:crate|super|self)(?:::\w+)+)')
USE_GROUP_RE = re.compile(r'\buse\s+((?:crate|super|self)(?:::\w+)*)::\{([^;]*)\};', re.S)

def strip_comments(text):
    text = re.sub(r'//[^\n]*', '', text)
    return re.sub(r'/\*.*?\*/', '', text, flags=re.S)

def resolve(mod, path):
    parts = path.split('::')
    if parts[0] == 'crate':
        base = []; parts = parts[1:]
    else:
        base = list(mod)
        while parts and parts[0] in ('super', 'self'):
            if parts[0] == 'super':
                base = base[:-1]
            parts = parts[1:]
    return tuple(base + parts)

def crate_graph(src):
    files = []
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith('.rs'):
                files.append(os.path.join(root, n))
    mods = {module_path(src, f): f for f in files}
    # Every file is a node; inline `mod x { }` blocks count as their file's.
    refs = defaultdict(set)
    for m, f in mods.items():
        text = strip_comments(open(f).read())
        paths = set(PATH_RE.findall(text))
        for head, group in USE_GROUP_RE.findall(text):
            for item in re.split(r',', group):
                item = item.strip().split(' as ')[0].strip()
                if item and re.match(r'^[\w:]+$', item):
                    paths.add(head + '::' + item)
        for p in paths:
            target = resolve(m, p)
            # longest module prefix
            for k in range(len(target), -1, -1):
                if target[:k] in mods:
                    refs[m].add(target[:k]); break
    return mods, refs

def sccs(nodes, edges):
    index = {}; low = {}; stack = []; on = set(); out = []; i = [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(comp)
    for v in nodes:
        if v not in index: visit(v)
    return out

def main():
    total = 0
    for crate_src in sys.argv[1:]:
        mods, refs = crate_graph(crate_src)
        parents = defaultdict(set)
        for m in mods:
            if m:
                parents[m[:-1]].add(m)
        for parent, children in sorted(parents.items()):
            children = sorted(children)
            edges = defaultdict(set)
            for a in children:
                for m, targets in refs.items():
                    if m[:len(a)] != a: continue
                    for t in targets:
                        for b in children:
                            if b != a and t[:len(b)] == b:
                                edges[a].add(b)
            for comp in sccs(children, edges):
                if len(comp) > 1:
                    total += 1
                    names = sorted('/'.join(c[len(parent):]) for c in comp)
                    print(f"{crate_src}: in {'/'.join(parent) or '(root)'}: {' <-> '.join(names)}")
    print(f"import circles: {total}")
    return total


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
