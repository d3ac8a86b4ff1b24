#!/usr/bin/env python3
"""The tree's size rules (README, Layout): no source file over 800 lines, no
class over 400 lines of code (its definition and its member functions'
definitions, blank and comment-only lines not counted).

    tools/dev/tree_rules.py [ROOT] [--list N]

C++ classes are found with universal-ctags (their member functions may be
spread over several files), Python classes with the ast module. Prints
every class over N lines with --list; exits 1 when a rule is broken.
"""
import argparse
import ast
import collections
import pathlib
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_CLASS_LINES = 400
SOURCE_DIRS = ("host", "sdk", "plugins", "protocol", "tools", "tests", "examples")
CPP_SUFFIXES = {".cc", ".h", ".cpp", ".hpp", ".c"}


def sources(root):
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and (path.suffix in CPP_SUFFIXES or path.suffix == ".py"):
                yield path


def code_lines(lines):
    """Lines that are neither blank nor only a comment."""
    n = 0
    for line in lines:
        t = line.strip()
        if t and not t.startswith(("//", "/*", "*", "#")):
            n += 1
    return n


def cpp_classes(root):
    """{class: (code lines, raw lines)} over the C++ sources under root."""
    out = subprocess.run(
        ["ctags", "-R", "--languages=C++", "--fields=+neKZ", "--extras=-q", "-x",
         "--_xformat=%K|%N|%{scope}|%F|%n|%{end}", *SOURCE_DIRS],
        cwd=root, capture_output=True, text=True, check=True).stdout
    ranges = collections.defaultdict(set)
    classes = set()
    for row in out.splitlines():
        kind, name, scope, path, begin, end = row.split("|")
        if not begin.isdigit() or not end.isdigit():
            continue
        scope = re.sub(r"^[a-z]+:", "", scope) if scope not in ("", "-") else ""
        if kind == "function" and scope:
            ranges[scope].add((path, int(begin), int(end)))
        elif kind in ("class", "struct"):
            key = f"{scope}::{name}" if scope else name
            classes.add(key)
            ranges[key].add((path, int(begin), int(end)))
    texts = {}
    sizes = {}
    for key in classes:
        spans = sorted(ranges[key])
        # A range inside another of the same class (an inline member) counts once.
        outer = [r for r in spans if not any(o != r and o[0] == r[0] and o[1] <= r[1] and
                                             r[2] <= o[2] for o in spans)]
        code = raw = 0
        for path, begin, end in outer:
            if path not in texts:
                texts[path] = (root / path).read_text(errors="replace").splitlines()
            code += code_lines(texts[path][begin - 1:end])
            raw += end - begin + 1
        sizes[key] = (code, raw)
    return sizes


def python_classes(root):
    sizes = {}
    for path in sources(root):
        if path.suffix != ".py":
            continue
        text = path.read_text(errors="replace")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                # Docstrings count as comments.
                docs = set()
                for sub in ast.walk(node):
                    if (isinstance(sub, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                            and ast.get_docstring(sub, clean=False) is not None):
                        doc = sub.body[0]
                        docs.update(range(doc.lineno, doc.end_lineno + 1))
                numbers = range(node.lineno, node.end_lineno + 1)
                code = code_lines(lines[n - 1] for n in numbers if n not in docs)
                sizes[f"{path.relative_to(root)}:{node.name}"] = (code, len(numbers))
    return sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=pathlib.Path(__file__).resolve().parents[2])
    parser.add_argument("--list", type=int, metavar="N", help="print classes over N code lines")
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    broken = []
    for path in sources(root):
        n = len(path.read_text(errors="replace").splitlines())
        if n > MAX_FILE_LINES:
            broken.append(f"{path.relative_to(root)}: {n} lines (at most {MAX_FILE_LINES})")
    sizes = {**cpp_classes(root), **python_classes(root)}
    for name, (code, raw) in sorted(sizes.items(), key=lambda kv: -kv[1][0]):
        if args.list is not None and code > args.list:
            print(f"{code:5d} code {raw:5d} raw  {name}")
        if code > MAX_CLASS_LINES:
            broken.append(f"class {name}: {code} lines of code (at most {MAX_CLASS_LINES})")
    for line in broken:
        print(line, file=sys.stderr)
    print(f"{len(sizes)} classes, {sum(1 for _ in sources(root))} files: "
          f"{'rules broken' if broken else 'within the rules'}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
